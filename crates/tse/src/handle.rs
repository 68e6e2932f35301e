//! The handles and life states of tasks and events: a leaf module, so that
//! the scheduler, the event queues and the error types can all name them
//! without importing each other.

use std::fmt;

/// A handle to a task: scheduler id, slab index and generation. `Copy`; a
/// handle outlives its task harmlessly (operations on it then fail with
/// [`crate::error::Error::AlreadyCompleted`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    pub(crate) sched: u32,
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl TaskId {
    /// The slab index (unique among live tasks of one scheduler).
    pub fn index(self) -> u32 {
        self.idx
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task#{}.{}@s{}", self.idx, self.gen, self.sched)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where a task is in its life (see [`crate::sched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Created, not scheduled.
    Init,
    /// Scheduled; waiting for dependencies, its delay or the next `progress`.
    Waiting,
    /// Prepare callbacks or the body ran; waiting for `complete`.
    Running,
    /// `complete` was called; completion callbacks are running.
    Completing,
    /// Done; the slot is kept only because the task is held.
    Completed,
}

/// A handle to an event of one EQ. `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Event {
    pub(crate) eq: u32,
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ev#{}.{}@eq{}", self.idx, self.gen, self.eq)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventState {
    /// Initialised, or completed and polled/tested: may be launched.
    Ready,
    /// Launched: its operation is in flight.
    Running,
    /// Completed, not yet polled or tested.
    Completed,
}
