//! The soft driver's clocks: the coarse clock (vDSO, no clocksource access), the
//! receive rounds' "now" built on it, and a process-wide nanosecond counter.

use std::time::{Duration, Instant};

/// CLOCK_MONOTONIC_COARSE in ns: read from the vDSO page without touching the
/// clocksource (which is an emulated HPET in the test guest), tick resolution.
pub(crate) fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

thread_local! {
    /// (last exact reading, coarse clock then) for [`clock`].
    static CLOCK: std::cell::Cell<Option<(Instant, u64)>> = const { std::cell::Cell::new(None) };
}

/// The engine's "now" for a receive round of the AF_XDP path (the UDP path reads
/// `Instant::now()`; measured in the guest, this saved ~1 us there). `Instant::now()` is an emulated
/// HPET read in the TCG test guest (its clocksource; ~6 us, a syscall and a device
/// exit, as much as a frame's kernel path), so this reads it at most once per
/// coarse-clock tick (per thread) and otherwise adds the coarse clock's advance
/// (vDSO, no hardware access) to the last reading. It is monotonic and at most a
/// tick (1-4 ms) behind: a deadline set from it comes at most a tick early,
/// against retransmit timeouts of tens of ms (4.096 us x 2^TIMEOUT) and RNR
/// timers that only pace retries. With `DPUSTACK_ROCE_CLOCK=exact` every call
/// reads `Instant::now()` (`DPUSTACK_XDP_CLOCK=exact` too).
pub(crate) fn clock() -> Instant {
    static EXACT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *EXACT.get_or_init(|| {
        ["DPUSTACK_ROCE_CLOCK", "DPUSTACK_XDP_CLOCK"]
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| v == "exact"))
    }) {
        return Instant::now();
    }
    let c = coarse_ns();
    CLOCK.with(|cell| match cell.get() {
        Some((t, c0)) if c.saturating_sub(c0) < 4_000_000 => t + Duration::from_nanos(c - c0),
        _ => {
            let t = Instant::now();
            cell.set(Some((t, coarse_ns())));
            t
        }
    })
}

/// Nanoseconds on a process-wide monotonic clock.
pub(crate) fn mono_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
