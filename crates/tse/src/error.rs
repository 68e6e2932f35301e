//! The crate's error types: [`Error`] for misuse of the scheduler or an event
//! queue (a caller mistake, detected at once), [`TaskError`] for the outcome of
//! a task or event (what the operation itself reports), and [`CallError`] for
//! an asynchronous call run through [`crate::call()`].

use crate::handle::{Event, EventState, TaskId, TaskState};

/// How a task or an event failed. `Copy`, so it propagates through a DAG of
/// dependencies without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum TaskError {
    /// Cancelled (aborted) before it completed: `Scheduler::abort`,
    /// `Scheduler::cancel_all`, `EventQueue::abort`, a forced EQ destroy.
    #[error("cancelled")]
    Cancelled,
    /// The operation gave up waiting.
    #[error("timed out")]
    TimedOut,
    /// An operation-specific code (DAOS: a negative `DER_*` value).
    #[error("failed with code {0}")]
    Code(i32),
}

/// The result of a task or an event.
pub type TaskResult = Result<(), TaskError>;

/// Misuse of the scheduler or an event queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The handle never named a task of this scheduler (or its slot was reused
    /// after more than 2^32 generations).
    #[error("invalid task handle {0}")]
    InvalidTask(TaskId),
    /// The handle belongs to another scheduler.
    #[error("task {0} belongs to another scheduler")]
    WrongScheduler(TaskId),
    /// The task has completed already (it may also have been released).
    #[error("task {0} has already completed")]
    AlreadyCompleted(TaskId),
    /// Dependencies can only be added before a task starts running.
    #[error("task {0} is already running: dependencies must be added before it starts")]
    TaskRunning(TaskId),
    /// `schedule` on a task that is scheduled, running or completing.
    #[error("task {0} is already scheduled (state {1:?})")]
    AlreadyScheduled(TaskId, TaskState),
    /// The operation is not allowed in the task's current state.
    #[error("task {task} is in state {state:?}: {what} not allowed")]
    BadTaskState {
        task: TaskId,
        state: TaskState,
        what: &'static str,
    },
    /// `task` depending on `dep` would close a cycle (`dep` already waits,
    /// directly or through other tasks, for `task`; or `task == dep`).
    #[error("task {task} depending on {dep} would create a dependency cycle")]
    DependencyCycle { task: TaskId, dep: TaskId },
    /// Dependencies must stay within one scheduler.
    #[error("task {task} and its dependency {dep} belong to different schedulers")]
    CrossScheduler { task: TaskId, dep: TaskId },
    /// The scheduler is cancelling all its tasks: nothing new may be scheduled.
    #[error("the scheduler is cancelling its tasks")]
    Cancelling,
    /// `release` without a matching `hold`.
    #[error("task {0} is not held")]
    NotHeld(TaskId),
    /// Private data or a stack entry is missing.
    #[error("task {task} has no {what}")]
    Missing { task: TaskId, what: &'static str },
    /// Private data or the top stack entry is of another type.
    #[error("task {task}: {what} is not a {expected}")]
    WrongType {
        task: TaskId,
        what: &'static str,
        expected: &'static str,
    },
    /// Waiting forever, but tasks or events are in flight and nothing (no ready
    /// task, no sleeping task, no poller) can ever complete them.
    #[error("{inflight} task(s)/event(s) in flight and nothing can complete them")]
    Stalled { inflight: usize },
    /// A blocking wait from inside a body or callback of the same scheduler.
    #[error("cannot wait for the scheduler from inside one of its tasks or callbacks")]
    Reentrant,
    /// The handle never named an event of this EQ.
    #[error("invalid event handle {0}")]
    InvalidEvent(Event),
    /// The event belongs to another EQ.
    #[error("event {0} belongs to another event queue")]
    WrongEq(Event),
    /// The operation is not allowed in the event's current state.
    #[error("event {ev} is {state:?}: {what} not allowed")]
    BadEventState {
        ev: Event,
        state: EventState,
        what: &'static str,
    },
    /// A parent must be launched after all its children.
    #[error("event {0}: launch all children before the parent")]
    ChildrenNotLaunched(Event),
    /// Events nest one level only.
    #[error("event {0} is a child event: it cannot be a parent")]
    NestedParent(Event),
    /// Child events are never tested or polled: their parent is.
    #[error("event {0} is a child event: test its parent")]
    ChildEvent(Event),
    /// A parent barrier needs children.
    #[error("event {0} has no children: nothing to wait for")]
    NoChildren(Event),
    /// `destroy` without `force` while events are launched or not polled.
    #[error("event queue busy: {running} event(s) running, {completed} completed but not polled")]
    EqBusy { running: usize, completed: usize },
    /// The EQ was destroyed.
    #[error("event queue was destroyed")]
    EqDestroyed,
}

/// The error of an asynchronous call made through [`crate::call()`]: either the
/// call could not be made (misuse, [`Error`]) or, when it blocked because no
/// event was given, the operation itself failed ([`TaskError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Tse(#[from] Error),
    #[error("operation failed: {0}")]
    Op(#[from] TaskError),
}
