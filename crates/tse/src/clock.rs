//! Time as an input. The scheduler reads a [`Clock`] once per `progress` call
//! (to wake delayed tasks) and asks it to sleep when waiting; tests use a
//! [`ManualClock`] whose sleeps jump time forward, so delays are deterministic.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A point on a clock's monotonic time line, in nanoseconds since the clock's
/// origin (only comparable with times of the same clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub const fn from_nanos(ns: u64) -> Time {
        Time(ns)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Time {
    type Output = Time;
    /// `self + d`, saturating.
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

/// A monotonic clock.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Time;
    /// Block until `t` (or return at once if it has passed). A manual clock
    /// jumps to `t` instead.
    fn sleep_until(&self, t: Time);
}

/// The real monotonic clock (`std::time::Instant`), the default.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Time {
        Time(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
    fn sleep_until(&self, t: Time) {
        let now = self.now();
        if t > now {
            std::thread::sleep(t.since(now));
        }
    }
}

/// A clock that moves only when told to (tests, simulations). Clones share the
/// same time, so a test keeps one clone and gives another to the scheduler.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    t: Rc<Cell<u64>>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }
    /// The current time.
    pub fn now(&self) -> Time {
        Time(self.t.get())
    }
    /// Move time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.t.set((Time(self.t.get()) + d).0);
    }
    /// Set the time (never backwards: an earlier `t` is ignored).
    pub fn set(&self, t: Time) {
        if t.0 > self.t.get() {
            self.t.set(t.0);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        ManualClock::now(self)
    }
    fn sleep_until(&self, t: Time) {
        self.set(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_and_monotonic() {
        let c = ManualClock::new();
        let c2 = c.clone();
        c.advance(Duration::from_millis(5));
        assert_eq!(c2.now(), Time::from_nanos(5_000_000));
        c2.set(Time::from_nanos(1));
        assert_eq!(c.now(), Time::from_nanos(5_000_000));
        c2.sleep_until(Time::from_nanos(7_000_000));
        assert_eq!(
            c.now().since(Time::from_nanos(5_000_000)),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let c = MonotonicClock::new();
        let a = c.now();
        c.sleep_until(a + Duration::from_micros(200));
        assert!(c.now().since(a) >= Duration::from_micros(200));
    }
}
