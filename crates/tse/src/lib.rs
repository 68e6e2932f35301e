//! # tse — Task Scheduler Engine and event queues (DAOS's TSE/EQ model)
//!
//! Owns: schedulers ([`Scheduler`]), tasks with dependencies, prepare and
//! completion callbacks, delays, typed private data and a per-task stack
//! ([`sched`]); event queues and events with parents, barriers and
//! callbacks ([`eq`]); and the NULL-event convention ([`call()`]) through which
//! any asynchronous dpustack call runs blocking (no event) or non-blocking
//! (with an event), on the same code path.
//!
//! Does not own: any I/O. A transport plugs in as a [`Poller`] bound to an
//! EQ; polling the EQ progresses the scheduler and the poller together.
//! `demo` (with the `demo` feature: `dpustack tse-demo` and `bench tse`) holds an
//! example operation over a loopback "transport"; it is not library API.
//!
//! Depends on nothing inside dpustack. No hidden threads, no locks on the task
//! path: a scheduler and its EQ are single-threaded values, and whoever calls
//! `progress`/`poll` runs the tasks and callbacks. Their counters ([`stats`]) are
//! relaxed atomics other threads can read; the process-wide list of them is locked
//! only when a scheduler or EQ is created or dropped. Time comes from a
//! [`Clock`] (a [`ManualClock`] makes delays deterministic in tests).
//! See `docs/tse.md` for the model and how it maps to DAOS.

#![forbid(unsafe_code)]

pub mod call;
pub mod clock;
#[cfg(any(test, feature = "demo"))]
pub mod demo;
pub mod eq;
pub mod error;
mod handle;
pub mod sched;
mod slab;
pub mod stats;

pub use call::call;
pub use clock::{Clock, ManualClock, MonotonicClock, Time};
pub use eq::{Completer, Event, EventQueue, EventState, Poller, Wait};
pub use error::{CallError, Error, TaskError, TaskResult};
pub use sched::{SchedStats, Scheduler, TaskId, TaskState};
