//! Counters of every scheduler and event queue in the process, readable from any
//! thread (the management plane's `dpustack_tse_get_stats` and Prometheus families).
//!
//! Each [`crate::Scheduler`] and [`crate::EventQueue`] owns a cell of relaxed atomics
//! that only its own thread writes (a load and a store, no read-modify-write: a
//! plain `mov` on x86), so counting costs the task path no lock and no shared
//! cache-line traffic. The cells are listed in one process-wide registry, locked
//! only when a scheduler or EQ is created or dropped (a dropped one's counts are
//! folded into the retired totals, so totals only grow) and by [`snapshot`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Adds `n` to a counter only its owner writes.
#[inline]
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[inline]
pub(crate) fn set(c: &AtomicU64, v: u64) {
    c.store(v, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// A scheduler's cell.
#[derive(Debug, Default)]
pub(crate) struct SchedCell {
    pub id: u32,
    pub created: AtomicU64,
    pub ran: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub in_flight: AtomicU64,
}

/// An event queue's cell.
#[derive(Debug, Default)]
pub(crate) struct EqCell {
    pub id: u32,
    pub sched_id: u32,
    pub launched: AtomicU64,
    pub completed: AtomicU64,
    pub polled: AtomicU64,
    pub polls: AtomicU64,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
}

/// Counts of one scheduler (or the sum of several: `id` 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedCounts {
    pub id: u32,
    /// Tasks created.
    pub tasks_created: u64,
    /// Task bodies run.
    pub tasks_ran: u64,
    /// Task completions (a re-initialised task completes again).
    pub tasks_completed: u64,
    /// Completions with an error (cancelled, aborted, failed).
    pub tasks_failed: u64,
    /// Tasks scheduled and not completed yet (a gauge).
    pub tasks_in_flight: u64,
}

/// Counts of one event queue (or the sum of several: `id` 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EqCounts {
    pub id: u32,
    /// The scheduler the EQ is bound to (0 in sums).
    pub sched_id: u32,
    /// Events launched (children included).
    pub events_launched: u64,
    /// Top-level events that completed onto the queue.
    pub events_completed: u64,
    /// Completed events handed to the caller by `poll` or `test`.
    pub events_polled: u64,
    /// `poll` calls.
    pub polls: u64,
    /// Top-level events launched and not completed (a gauge).
    pub events_running: u64,
    /// Completed events not polled yet (a gauge).
    pub events_waiting: u64,
}

impl SchedCounts {
    fn of(c: &SchedCell) -> SchedCounts {
        SchedCounts {
            id: c.id,
            tasks_created: get(&c.created),
            tasks_ran: get(&c.ran),
            tasks_completed: get(&c.completed),
            tasks_failed: get(&c.failed),
            tasks_in_flight: get(&c.in_flight),
        }
    }
    fn add(&mut self, o: &SchedCounts) {
        self.tasks_created += o.tasks_created;
        self.tasks_ran += o.tasks_ran;
        self.tasks_completed += o.tasks_completed;
        self.tasks_failed += o.tasks_failed;
        self.tasks_in_flight += o.tasks_in_flight;
    }
}

impl EqCounts {
    fn of(c: &EqCell) -> EqCounts {
        EqCounts {
            id: c.id,
            sched_id: c.sched_id,
            events_launched: get(&c.launched),
            events_completed: get(&c.completed),
            events_polled: get(&c.polled),
            polls: get(&c.polls),
            events_running: get(&c.running),
            events_waiting: get(&c.waiting),
        }
    }
    fn add(&mut self, o: &EqCounts) {
        self.events_launched += o.events_launched;
        self.events_completed += o.events_completed;
        self.events_polled += o.events_polled;
        self.polls += o.polls;
        self.events_running += o.events_running;
        self.events_waiting += o.events_waiting;
    }
}

/// Every live scheduler and EQ of the process, and the totals of the dropped ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub schedulers: Vec<SchedCounts>,
    pub event_queues: Vec<EqCounts>,
    /// Schedulers dropped so far and their counts (gauges zeroed).
    pub retired_schedulers: u64,
    pub retired_sched: SchedCounts,
    /// EQs dropped so far and their counts (gauges zeroed).
    pub retired_event_queues: u64,
    pub retired_eq: EqCounts,
}

impl Snapshot {
    /// Live and retired schedulers together.
    pub fn sched_totals(&self) -> SchedCounts {
        let mut t = self.retired_sched;
        for s in &self.schedulers {
            t.add(s);
        }
        t
    }
    /// Live and retired EQs together.
    pub fn eq_totals(&self) -> EqCounts {
        let mut t = self.retired_eq;
        for e in &self.event_queues {
            t.add(e);
        }
        t
    }
}

struct Registry {
    scheds: Vec<Arc<SchedCell>>,
    eqs: Vec<Arc<EqCell>>,
    retired_scheds: u64,
    retired_sched: SchedCounts,
    retired_eqs: u64,
    retired_eq: EqCounts,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    scheds: Vec::new(),
    eqs: Vec::new(),
    retired_scheds: 0,
    retired_sched: SchedCounts {
        id: 0,
        tasks_created: 0,
        tasks_ran: 0,
        tasks_completed: 0,
        tasks_failed: 0,
        tasks_in_flight: 0,
    },
    retired_eqs: 0,
    retired_eq: EqCounts {
        id: 0,
        sched_id: 0,
        events_launched: 0,
        events_completed: 0,
        events_polled: 0,
        polls: 0,
        events_running: 0,
        events_waiting: 0,
    },
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // The registry holds counters only: a panic elsewhere leaves it consistent.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn register_sched(id: u32) -> Arc<SchedCell> {
    let c = Arc::new(SchedCell {
        id,
        ..SchedCell::default()
    });
    registry().scheds.push(c.clone());
    c
}

pub(crate) fn retire_sched(c: &Arc<SchedCell>) {
    let mut r = registry();
    if let Some(i) = r.scheds.iter().position(|x| Arc::ptr_eq(x, c)) {
        r.scheds.swap_remove(i);
        let mut n = SchedCounts::of(c);
        n.tasks_in_flight = 0;
        r.retired_sched.add(&n);
        r.retired_scheds += 1;
    }
}

pub(crate) fn register_eq(id: u32, sched_id: u32) -> Arc<EqCell> {
    let c = Arc::new(EqCell {
        id,
        sched_id,
        ..EqCell::default()
    });
    registry().eqs.push(c.clone());
    c
}

pub(crate) fn retire_eq(c: &Arc<EqCell>) {
    let mut r = registry();
    if let Some(i) = r.eqs.iter().position(|x| Arc::ptr_eq(x, c)) {
        r.eqs.swap_remove(i);
        let mut n = EqCounts::of(c);
        n.events_running = 0;
        n.events_waiting = 0;
        r.retired_eq.add(&n);
        r.retired_eqs += 1;
    }
}

/// The counts of every scheduler and EQ of the process now (by id).
pub fn snapshot() -> Snapshot {
    let r = registry();
    let mut s = Snapshot {
        schedulers: r.scheds.iter().map(|c| SchedCounts::of(c)).collect(),
        event_queues: r.eqs.iter().map(|c| EqCounts::of(c)).collect(),
        retired_schedulers: r.retired_scheds,
        retired_sched: r.retired_sched,
        retired_event_queues: r.retired_eqs,
        retired_eq: r.retired_eq,
    };
    drop(r);
    s.schedulers.sort_by_key(|c| c.id);
    s.event_queues.sort_by_key(|c| c.id);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Scheduler, TaskError};

    fn sched_of(id: u32) -> Option<SchedCounts> {
        snapshot().schedulers.into_iter().find(|s| s.id == id)
    }

    /// A scheduler's counts as another thread sees them: created, ran, completed,
    /// failed, in flight; dropped, they move to the retired totals.
    #[test]
    fn scheduler_counts_are_seen_from_another_thread_and_retired() {
        let mut s = Scheduler::with_clock(Box::new(ManualClock::new()));
        let id = s.id();
        let a = s.create(|s, t| {
            let _ = s.complete(t, Ok(()));
        });
        let b = s.create(|s, t| {
            let _ = s.complete(t, Err(TaskError::Code(-5)));
        });
        let c = s.create(|_, _| {}); // runs, never completes
        for t in [a, b, c] {
            s.schedule(t).unwrap();
        }
        let seen = std::thread::spawn(move || sched_of(id)).join().unwrap();
        assert_eq!(
            seen,
            Some(SchedCounts {
                id,
                tasks_created: 3,
                tasks_ran: 0,
                tasks_completed: 0,
                tasks_failed: 0,
                tasks_in_flight: 3
            })
        );
        s.progress();
        let n = std::thread::spawn(move || sched_of(id))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                n.tasks_ran,
                n.tasks_completed,
                n.tasks_failed,
                n.tasks_in_flight
            ),
            (3, 2, 1, 1)
        );
        let before = snapshot();
        drop(s); // cancels `c`: one more completion, failed
        let after = snapshot();
        assert!(sched_of(id).is_none());
        assert!(after.retired_schedulers > before.retired_schedulers);
        // other tests run schedulers in parallel: the retired totals grew by at least ours
        assert!(after.retired_sched.tasks_created >= before.retired_sched.tasks_created + 3);
        assert!(after.retired_sched.tasks_failed >= before.retired_sched.tasks_failed + 2);
    }

    /// An EQ's counts: events launched, completed, polled, polls; the gauges.
    #[test]
    fn event_queue_counts() {
        use crate::{EventQueue, Wait};
        let mut eq = EventQueue::new(Scheduler::with_clock(Box::new(ManualClock::new())));
        let (id, sid) = (eq.id(), eq.sched().id());
        let of = |id: u32| {
            snapshot()
                .event_queues
                .into_iter()
                .find(|e| e.id == id)
                .unwrap()
        };
        let e1 = eq.event_init(None).unwrap();
        let e2 = eq.event_init(None).unwrap();
        eq.launch(e1).unwrap();
        eq.launch(e2).unwrap();
        let n = of(id);
        assert_eq!(
            (n.sched_id, n.events_launched, n.events_running),
            (sid, 2, 2)
        );
        eq.complete_event(e1, Ok(())).unwrap();
        let n = of(id);
        assert_eq!(
            (n.events_completed, n.events_running, n.events_waiting),
            (1, 1, 1)
        );
        let mut out = Vec::new();
        assert_eq!(eq.poll(Wait::NoWait, 8, &mut out).unwrap(), 1);
        let n = of(id);
        assert_eq!((n.events_polled, n.polls, n.events_waiting), (1, 1, 0));
        eq.complete_event(e2, Ok(())).unwrap();
        assert_eq!(eq.test(e2, Wait::NoWait).unwrap(), Some(Ok(())));
        let n = of(id);
        assert_eq!(
            (n.events_completed, n.events_polled, n.events_running),
            (2, 2, 0)
        );
        drop(eq);
        assert!(snapshot().event_queues.iter().all(|e| e.id != id));
    }
}
