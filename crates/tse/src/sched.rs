//! The Task Scheduler Engine: a [`Scheduler`] runs [`TaskId`]-addressed tasks
//! once their dependencies have completed, DAOS `tse` style.
//!
//! # Life of a task
//!
//! ```text
//!  create ──► Init ──schedule──► Waiting ──deps done, delay over, progress──► Running
//!                                   ▲    (prepare callbacks, then the body)     │
//!                                   │                                 complete(result)
//!                                reinit                                         ▼
//!                                   └──────── Completing (completion callbacks, last first)
//!                                                          │
//!                                                          ▼
//!                                           Completed ─► released (slot freed)
//! ```
//!
//! A body runs once per (re)initialisation and does **not** complete its task
//! by returning: it calls [`Scheduler::complete`] itself, or leaves the task
//! `Running` and something completes it later through its handle (a network
//! completion, a poller, a completion callback of a sub-task). Completion runs
//! the completion callbacks at once (in the caller's stack), then marks the
//! task completed, hands its result to the tasks waiting on it (a failure
//! becomes their dependency error) and makes the ready ones runnable on the
//! next pass of [`Scheduler::progress`].
//!
//! # Threads
//!
//! None. A scheduler is a single-threaded value (it holds `Box<dyn FnMut>`
//! bodies and is neither `Send` nor `Sync`): the thread that calls `progress`
//! runs every body and callback. Several schedulers per process are fine; a
//! per-core design gives each core its own. Tasks live in a slab and are named
//! by [`TaskId`] handles carrying a generation, so a stale handle (a task that
//! completed and was released) is reported, never confused with the slot's
//! next occupant. Bodies and callbacks receive `&mut Scheduler`, so they can
//! create, schedule and complete tasks themselves.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock, Time};
use crate::error::{Error, TaskError, TaskResult};
use crate::slab::{Miss, Slab};
use crate::stats::{self, SchedCell};

pub use crate::handle::{TaskId, TaskState};

/// A task body: runs once per (re)initialisation, after the dependencies and
/// the prepare callbacks. It completes the task itself or leaves it running.
pub type BodyFn = Box<dyn FnMut(&mut Scheduler, TaskId)>;
/// A prepare callback: runs after the dependencies, before the body; an error
/// completes the task with it (the body does not run).
pub type PrepFn = Box<dyn FnOnce(&mut Scheduler, TaskId) -> TaskResult>;
/// A completion callback: sees the result and returns the (possibly changed)
/// result; it may re-initialise the task (`Scheduler::reinit`) to run it again.
pub type CompFn = Box<dyn FnOnce(&mut Scheduler, TaskId, TaskResult) -> TaskResult>;
/// A scheduler completion callback: sees the scheduler's result (the first task
/// error) when the scheduler is completed or cancelled, and may change it.
pub type SchedCompFn = Box<dyn FnOnce(TaskResult) -> TaskResult>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A body function (`Task::body`; `None` only while it runs).
    Run,
    /// No body: once ready the task is `Running` until someone completes it.
    External,
    /// No body: once ready the task completes with `Ok` (or its dependency error).
    Join,
}

/// A list that holds its first element inline: most tasks have zero or one
/// completion callback and zero or one dependent, and this saves the `Vec`
/// allocation for them.
#[derive(Default)]
enum Small<T> {
    #[default]
    Empty,
    One(T),
    Many(Vec<T>),
}

impl<T> Small<T> {
    fn push(&mut self, v: T) {
        match std::mem::take(self) {
            Small::Empty => *self = Small::One(v),
            Small::One(a) => *self = Small::Many(vec![a, v]),
            Small::Many(mut vs) => {
                vs.push(v);
                *self = Small::Many(vs);
            }
        }
    }
    /// Removes the last element.
    fn pop(&mut self) -> Option<T> {
        match std::mem::take(self) {
            Small::Empty => None,
            Small::One(a) => Some(a),
            Small::Many(mut vs) => {
                let v = vs.pop();
                *self = Small::Many(vs);
                v
            }
        }
    }
    fn as_slice(&self) -> &[T] {
        match self {
            Small::Empty => &[],
            Small::One(a) => std::slice::from_ref(a),
            Small::Many(vs) => vs,
        }
    }
    /// Takes every element out, in insertion order.
    fn drain(&mut self) -> SmallIter<T> {
        match std::mem::take(self) {
            Small::Empty => SmallIter::One(None),
            Small::One(a) => SmallIter::One(Some(a)),
            Small::Many(vs) => SmallIter::Many(vs.into_iter()),
        }
    }
}

enum SmallIter<T> {
    One(Option<T>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for SmallIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            SmallIter::One(o) => o.take(),
            SmallIter::Many(it) => it.next(),
        }
    }
}

/// What few tasks use, boxed on first use to keep the task slot small.
#[derive(Default)]
struct Extra {
    priv_data: Option<Box<dyn Any>>,
    stack: Vec<Box<dyn Any>>,
    prep: Vec<PrepFn>,
}

struct Task {
    state: TaskState,
    kind: Kind,
    body: Option<BodyFn>,
    extra: Option<Box<Extra>>,
    comp: Small<CompFn>,
    /// Tasks waiting for this one, each with the epoch it had when it started waiting.
    dependents: Small<(TaskId, u32)>,
    /// Dependencies not completed yet.
    dep_cnt: u32,
    /// The first failure among the completed dependencies.
    dep_error: Option<TaskError>,
    /// Whether a dependency failure completes this task without running it.
    propagate: bool,
    result: TaskResult,
    /// Bumped when a task leaves its waiting phase early (completed or aborted
    /// before its dependencies finished), so the dependencies' stale edges to it
    /// are ignored.
    epoch: u32,
    holds: u32,
    in_ready: bool,
    sleeping: bool,
    wake_seq: u64,
    visit: u32,
}

impl Task {
    fn new(kind: Kind, body: Option<BodyFn>, priv_data: Option<Box<dyn Any>>) -> Task {
        Task {
            state: TaskState::Init,
            kind,
            body,
            extra: priv_data.map(|d| {
                Box::new(Extra {
                    priv_data: Some(d),
                    ..Extra::default()
                })
            }),
            comp: Small::Empty,
            dependents: Small::Empty,
            dep_cnt: 0,
            dep_error: None,
            propagate: true,
            result: Ok(()),
            epoch: 0,
            holds: 0,
            in_ready: false,
            sleeping: false,
            wake_seq: 0,
            visit: 0,
        }
    }

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    fn priv_data(&self) -> Option<&dyn Any> {
        self.extra.as_ref()?.priv_data.as_deref()
    }

    fn stack_len(&self) -> usize {
        self.extra.as_ref().map_or(0, |e| e.stack.len())
    }

    fn has_prep(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| !e.prep.is_empty())
    }
}

/// The error for a handle of this scheduler that names no live task: a
/// removed task has completed (tasks are only freed after completion).
fn miss(id: TaskId, m: Miss) -> Error {
    match m {
        Miss::Removed => Error::AlreadyCompleted(id),
        Miss::Invalid => Error::InvalidTask(id),
    }
}

/// Looks a task up in `tasks` (borrowing only that field, so the caller can
/// update the scheduler's other fields meanwhile).
fn lookup_mut(tasks: &mut Slab<Task>, sched: u32, id: TaskId) -> Result<&mut Task, Error> {
    if id.sched != sched {
        return Err(Error::WrongScheduler(id));
    }
    tasks.get_mut(id.idx, id.gen).map_err(|m| miss(id, m))
}

static NEXT_SCHED_ID: AtomicU32 = AtomicU32::new(1);

/// Counters of a scheduler since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedStats {
    pub created: u64,
    pub ran: u64,
    pub completed: u64,
    pub failed: u64,
}

/// A task scheduler (DAOS `tse_sched_t`). See the module doc.
pub struct Scheduler {
    id: u32,
    clock: Box<dyn Clock>,
    tasks: Slab<Task>,
    ready: VecDeque<TaskId>,
    sleeping: BinaryHeap<Reverse<(Time, u64, TaskId)>>,
    wake_seq: u64,
    /// Tasks Waiting, Running or Completing.
    inflight: usize,
    result: TaskResult,
    comp_cbs: Vec<SchedCompFn>,
    in_progress: bool,
    cancelling: bool,
    visit_epoch: u32,
    dfs: Vec<TaskId>,
    /// Counters other threads read (crate::stats).
    cell: Arc<SchedCell>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("id", &self.id)
            .field("live", &self.tasks.live())
            .field("inflight", &self.inflight)
            .field("ready", &self.ready.len())
            .field("sleeping", &self.sleeping.len())
            .field("result", &self.result)
            .finish()
    }
}

impl Default for Scheduler {
    fn default() -> Self {
        Self::new()
    }
}

impl Scheduler {
    /// A scheduler on the real monotonic clock (`tse_sched_init` without a
    /// completion callback).
    pub fn new() -> Self {
        Self::with_clock(Box::new(MonotonicClock::new()))
    }

    /// A scheduler reading time from `clock` (e.g. a `ManualClock` in tests).
    pub fn with_clock(clock: Box<dyn Clock>) -> Self {
        let id = NEXT_SCHED_ID.fetch_add(1, Ordering::Relaxed);
        Scheduler {
            id,
            clock,
            tasks: Slab::new(),
            ready: VecDeque::new(),
            sleeping: BinaryHeap::new(),
            wake_seq: 0,
            inflight: 0,
            result: Ok(()),
            comp_cbs: Vec::new(),
            in_progress: false,
            cancelling: false,
            visit_epoch: 0,
            dfs: Vec::new(),
            cell: stats::register_sched(id),
        }
    }

    /// A scheduler with a completion callback (`tse_sched_init(sched, cb, arg)`).
    pub fn with_completion(
        clock: Box<dyn Clock>,
        cb: impl FnOnce(TaskResult) -> TaskResult + 'static,
    ) -> Self {
        let mut s = Self::with_clock(clock);
        s.register_sched_comp_cb(cb);
        s
    }

    /// Adds a scheduler completion callback, run once by
    /// [`Scheduler::complete_all`] or when the scheduler is dropped.
    pub fn register_sched_comp_cb(&mut self, cb: impl FnOnce(TaskResult) -> TaskResult + 'static) {
        self.comp_cbs.push(Box::new(cb));
    }

    /// This scheduler's id (part of every [`TaskId`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The scheduler's clock reading.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// Sleeps on the scheduler's clock until `t` (a manual clock jumps there).
    pub fn sleep_until(&self, t: Time) {
        self.clock.sleep_until(t)
    }

    /// Tasks in the slab: created and not yet completed-and-released. Zero once
    /// everything finished (the leak check).
    pub fn live(&self) -> usize {
        self.tasks.live()
    }

    /// Tasks scheduled and not completed (waiting, running or completing).
    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// The scheduler's result: the first failure of any completed task.
    pub fn result(&self) -> TaskResult {
        self.result
    }

    pub fn stats(&self) -> SchedStats {
        let c = &self.cell;
        SchedStats {
            created: c.created.load(Ordering::Relaxed),
            ran: c.ran.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
        }
    }

    // ---- lookup ----------------------------------------------------------

    fn task(&self, id: TaskId) -> Result<&Task, Error> {
        if id.sched != self.id {
            return Err(Error::WrongScheduler(id));
        }
        self.tasks.get(id.idx, id.gen).map_err(|m| miss(id, m))
    }

    fn task_mut(&mut self, id: TaskId) -> Result<&mut Task, Error> {
        if id.sched != self.id {
            return Err(Error::WrongScheduler(id));
        }
        self.tasks.get_mut(id.idx, id.gen).map_err(|m| miss(id, m))
    }

    // ---- creation --------------------------------------------------------

    fn insert(
        &mut self,
        kind: Kind,
        body: Option<BodyFn>,
        priv_data: Option<Box<dyn Any>>,
    ) -> TaskId {
        let (idx, gen) = self.tasks.insert(Task::new(kind, body, priv_data));
        stats::add(&self.cell.created, 1);
        TaskId {
            sched: self.id,
            idx,
            gen,
        }
    }

    /// Creates a task with a body (`tse_task_create`). It runs once scheduled
    /// and ready; see [`BodyFn`].
    pub fn create(&mut self, body: impl FnMut(&mut Scheduler, TaskId) + 'static) -> TaskId {
        self.insert(Kind::Run, Some(Box::new(body)), None)
    }

    /// Creates a task with a body and typed private data (read it with
    /// [`Scheduler::priv_ref`] / [`Scheduler::priv_mut`]).
    pub fn create_with_priv<T: Any>(
        &mut self,
        body: impl FnMut(&mut Scheduler, TaskId) + 'static,
        data: T,
    ) -> TaskId {
        self.insert(Kind::Run, Some(Box::new(body)), Some(Box::new(data)))
    }

    /// Creates a task without a body: once scheduled and ready it is `Running`
    /// until [`Scheduler::complete`] is called (DAOS: a task with a NULL body,
    /// completed by an RPC callback).
    pub fn create_external(&mut self) -> TaskId {
        self.insert(Kind::External, None, None)
    }

    /// Creates a join task: once scheduled and its dependencies completed, it
    /// completes by itself with `Ok` (or, by default, its first dependency error).
    pub fn create_join(&mut self) -> TaskId {
        self.insert(Kind::Join, None, None)
    }

    // ---- private data and stack ---------------------------------------------

    /// Sets (replaces) the task's private data.
    pub fn set_priv<T: Any>(&mut self, id: TaskId, data: T) -> Result<(), Error> {
        self.task_mut(id)?.extra().priv_data = Some(Box::new(data));
        Ok(())
    }

    /// The task's private data as a `T`.
    pub fn priv_ref<T: Any>(&self, id: TaskId) -> Result<&T, Error> {
        let t = self.task(id)?;
        let d = t.priv_data().ok_or(Error::Missing {
            task: id,
            what: "private data",
        })?;
        d.downcast_ref::<T>().ok_or(Error::WrongType {
            task: id,
            what: "private data",
            expected: std::any::type_name::<T>(),
        })
    }

    /// The task's private data as a `&mut T`.
    pub fn priv_mut<T: Any>(&mut self, id: TaskId) -> Result<&mut T, Error> {
        let t = self.task_mut(id)?;
        let d = t.extra().priv_data.as_mut().ok_or(Error::Missing {
            task: id,
            what: "private data",
        })?;
        d.downcast_mut::<T>().ok_or(Error::WrongType {
            task: id,
            what: "private data",
            expected: std::any::type_name::<T>(),
        })
    }

    /// Takes the task's private data out (it then has none).
    pub fn take_priv<T: Any>(&mut self, id: TaskId) -> Result<T, Error> {
        let t = self.task_mut(id)?;
        let d = t.extra().priv_data.take().ok_or(Error::Missing {
            task: id,
            what: "private data",
        })?;
        match d.downcast::<T>() {
            Ok(v) => Ok(*v),
            Err(d) => {
                t.extra().priv_data = Some(d);
                Err(Error::WrongType {
                    task: id,
                    what: "private data",
                    expected: std::any::type_name::<T>(),
                })
            }
        }
    }

    /// Pushes a value on the task's stack (DAOS `tse_task_stack_push_data`),
    /// e.g. for a completion callback registered by the same layer.
    pub fn stack_push<T: Any>(&mut self, id: TaskId, v: T) -> Result<(), Error> {
        self.task_mut(id)?.extra().stack.push(Box::new(v));
        Ok(())
    }

    /// Pops the top of the task's stack as a `T`; on a type mismatch the value
    /// stays on the stack.
    pub fn stack_pop<T: Any>(&mut self, id: TaskId) -> Result<T, Error> {
        let t = self.task_mut(id)?;
        let top = t.extra().stack.pop().ok_or(Error::Missing {
            task: id,
            what: "value on its stack",
        })?;
        match top.downcast::<T>() {
            Ok(v) => Ok(*v),
            Err(top) => {
                t.extra().stack.push(top);
                Err(Error::WrongType {
                    task: id,
                    what: "top of its stack",
                    expected: std::any::type_name::<T>(),
                })
            }
        }
    }

    /// Number of values on the task's stack.
    pub fn stack_len(&self, id: TaskId) -> Result<usize, Error> {
        Ok(self.task(id)?.stack_len())
    }

    // ---- queries -----------------------------------------------------------

    pub fn state(&self, id: TaskId) -> Result<TaskState, Error> {
        Ok(self.task(id)?.state)
    }

    /// The task's result once it is completing or completed, else `None`.
    pub fn task_result(&self, id: TaskId) -> Result<Option<TaskResult>, Error> {
        let t = self.task(id)?;
        Ok(match t.state {
            TaskState::Completing | TaskState::Completed => Some(t.result),
            _ => None,
        })
    }

    /// The first failure among the task's completed dependencies.
    pub fn dep_error(&self, id: TaskId) -> Result<Option<TaskError>, Error> {
        Ok(self.task(id)?.dep_error)
    }

    /// Whether a failed dependency completes this task with its error without
    /// running prepare callbacks or body (default `true`; DAOS
    /// `tse_disable_propagate` sets it to `false`, and the body then reads
    /// [`Scheduler::dep_error`] itself).
    pub fn set_propagate(&mut self, id: TaskId, propagate: bool) -> Result<(), Error> {
        self.task_mut(id)?.propagate = propagate;
        Ok(())
    }

    // ---- hold / release ------------------------------------------------------

    /// Keeps the task's slot after it completes (DAOS `tse_task_addref`), so its
    /// result can be read and it can be re-initialised. Balance with `release`.
    pub fn hold(&mut self, id: TaskId) -> Result<(), Error> {
        self.task_mut(id)?.holds += 1;
        Ok(())
    }

    /// Drops a hold; a completed task with no holds left is freed.
    pub fn release(&mut self, id: TaskId) -> Result<(), Error> {
        let t = self.task_mut(id)?;
        if t.holds == 0 {
            return Err(Error::NotHeld(id));
        }
        t.holds -= 1;
        if t.holds == 0 && t.state == TaskState::Completed {
            self.tasks.free(id.idx, id.gen);
        }
        Ok(())
    }

    // ---- dependencies and callbacks ---------------------------------------------

    /// `task` runs only after every task in `deps` completed
    /// (`tse_task_register_deps`). A dependency that already completed (and
    /// was released) is ignored; a held completed one passes on its failure.
    /// Errors: the task is running or completed, a dependency is in another
    /// scheduler, or the edge would close a cycle. On error, the edges added
    /// before the failing one stay.
    pub fn register_deps(&mut self, task: TaskId, deps: &[TaskId]) -> Result<(), Error> {
        for &dep in deps {
            self.add_dep(task, dep)?;
        }
        Ok(())
    }

    fn add_dep(&mut self, task: TaskId, dep: TaskId) -> Result<(), Error> {
        let t = self.task(task)?;
        match t.state {
            TaskState::Init | TaskState::Waiting => {}
            TaskState::Running => return Err(Error::TaskRunning(task)),
            TaskState::Completing | TaskState::Completed => {
                return Err(Error::AlreadyCompleted(task))
            }
        }
        let task_epoch = t.epoch;
        if dep.sched != self.id {
            return Err(Error::CrossScheduler { task, dep });
        }
        if dep == task {
            return Err(Error::DependencyCycle { task, dep });
        }
        let (dep_state, dep_result) = match self.task(dep) {
            Ok(d) => (d.state, d.result),
            Err(Error::AlreadyCompleted(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if dep_state == TaskState::Completed {
            if let Err(e) = dep_result {
                let t = self.task_mut(task)?;
                t.dep_error.get_or_insert(e);
            }
            return Ok(());
        }
        if self.reaches(task, dep) {
            tracing::debug!(%task, %dep, "dependency refused: cycle");
            return Err(Error::DependencyCycle { task, dep });
        }
        self.task_mut(dep)?.dependents.push((task, task_epoch));
        self.task_mut(task)?.dep_cnt += 1;
        Ok(())
    }

    /// Whether `to` waits, directly or transitively, for `from` (a walk over
    /// the dependents edges starting at `from`). Costs the size of the part of
    /// the graph waiting on `from`: nothing for a freshly created task.
    fn reaches(&mut self, from: TaskId, to: TaskId) -> bool {
        self.visit_epoch = self.visit_epoch.wrapping_add(1);
        if self.visit_epoch == 0 {
            // wrapped: clear the marks so no stale mark equals the new epoch
            let hs: Vec<_> = self.tasks.handles().collect();
            for (i, g) in hs {
                if let Ok(t) = self.tasks.get_mut(i, g) {
                    t.visit = 0;
                }
            }
            self.visit_epoch = 1;
        }
        let epoch = self.visit_epoch;
        let mut stack = std::mem::take(&mut self.dfs);
        stack.clear();
        stack.push(from);
        let mut found = false;
        while let Some(cur) = stack.pop() {
            if cur == to {
                found = true;
                break;
            }
            match self.tasks.get_mut(cur.idx, cur.gen) {
                Ok(t) if t.visit != epoch => t.visit = epoch,
                _ => continue,
            }
            let Ok(t) = self.tasks.get(cur.idx, cur.gen) else {
                continue;
            };
            for &(d, ep) in t.dependents.as_slice() {
                if let Ok(dt) = self.tasks.get(d.idx, d.gen) {
                    if dt.epoch == ep && dt.visit != epoch {
                        stack.push(d);
                    }
                }
            }
        }
        stack.clear();
        self.dfs = stack;
        found
    }

    /// Adds a prepare callback (run in registration order, after the
    /// dependencies, before the body). Not allowed once the task runs.
    pub fn register_prep_cb(
        &mut self,
        id: TaskId,
        cb: impl FnOnce(&mut Scheduler, TaskId) -> TaskResult + 'static,
    ) -> Result<(), Error> {
        let t = self.task_mut(id)?;
        match t.state {
            TaskState::Init | TaskState::Waiting => {
                t.extra().prep.push(Box::new(cb));
                Ok(())
            }
            state => Err(Error::BadTaskState {
                task: id,
                state,
                what: "adding a prepare callback",
            }),
        }
    }

    /// Adds a completion callback. Callbacks are stacked: the last registered
    /// runs first. Not allowed once the task completed.
    pub fn register_comp_cb(
        &mut self,
        id: TaskId,
        cb: impl FnOnce(&mut Scheduler, TaskId, TaskResult) -> TaskResult + 'static,
    ) -> Result<(), Error> {
        let t = self.task_mut(id)?;
        match t.state {
            TaskState::Completed => Err(Error::AlreadyCompleted(id)),
            _ => {
                t.comp.push(Box::new(cb));
                Ok(())
            }
        }
    }

    /// Makes `task` complete once all of `deps` completed, with the first
    /// failure among them (or `Ok`). This is DAOS's "sub-tasks" pattern, where
    /// a running body spawns tasks and its own task finishes when they do; here
    /// the running task gets a join task instead of new dependencies (which a
    /// running task may not take). Returns the join task (already scheduled).
    pub fn complete_after(&mut self, task: TaskId, deps: &[TaskId]) -> Result<TaskId, Error> {
        self.task(task)?;
        let join = self.create_join();
        let r = self.register_deps(join, deps).and_then(|()| {
            self.register_comp_cb(join, move |s, _, r| {
                let _ = s.complete(task, r);
                r
            })
        });
        if let Err(e) = r {
            let _ = self.abort(join);
            return Err(e);
        }
        self.schedule(join)?;
        Ok(join)
    }

    // ---- scheduling ------------------------------------------------------------

    /// Hands the task to the scheduler (`tse_task_schedule`): it runs on a
    /// later `progress` once its dependencies completed.
    pub fn schedule(&mut self, id: TaskId) -> Result<(), Error> {
        self.schedule_inner(id, None)
    }

    /// Like [`Scheduler::schedule`], but the task does not run before `delay`
    /// has passed on the scheduler's clock (`tse_task_schedule_with_delay`).
    pub fn schedule_after(&mut self, id: TaskId, delay: Duration) -> Result<(), Error> {
        self.schedule_inner(id, Some(delay))
    }

    fn schedule_inner(&mut self, id: TaskId, delay: Option<Duration>) -> Result<(), Error> {
        if self.cancelling {
            return Err(Error::Cancelling);
        }
        let t = lookup_mut(&mut self.tasks, self.id, id)?;
        match t.state {
            TaskState::Init => {}
            TaskState::Completed => return Err(Error::AlreadyCompleted(id)),
            s => return Err(Error::AlreadyScheduled(id, s)),
        }
        t.state = TaskState::Waiting;
        self.inflight += 1;
        stats::set(&self.cell.in_flight, self.inflight as u64);
        if !matches!(delay, Some(d) if !d.is_zero()) {
            // the common case, without a second lookup
            t.sleeping = false;
            if t.dep_cnt == 0 && !t.in_ready {
                t.in_ready = true;
                self.ready.push_back(id);
            }
            return Ok(());
        }
        self.arm(id, delay);
        Ok(())
    }

    /// Puts a task that just became `Waiting` on the sleeping heap or, if its
    /// dependencies are done, on the ready queue.
    fn arm(&mut self, id: TaskId, delay: Option<Duration>) {
        let now = match delay {
            Some(d) if !d.is_zero() => Some(self.clock.now() + d),
            _ => None,
        };
        self.wake_seq += 1;
        let seq = self.wake_seq;
        let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
            return;
        };
        if let Some(wake) = now {
            t.sleeping = true;
            t.wake_seq = seq;
            self.sleeping.push(Reverse((wake, seq, id)));
        } else {
            t.sleeping = false;
            if t.dep_cnt == 0 && !t.in_ready {
                t.in_ready = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Runs the task again (`tse_task_reinit`): from `Running` (e.g. a body
    /// that wants to retry), from `Completing` (a completion callback; the
    /// remaining callbacks stay registered and the task does not complete) or
    /// from `Completed` (a held task). Its result and stack are reset; prepare
    /// callbacks already run are gone. A task that always re-initialises itself
    /// without a delay keeps `progress` busy: retry with a delay.
    pub fn reinit(&mut self, id: TaskId) -> Result<(), Error> {
        self.reinit_inner(id, None)
    }

    /// [`Scheduler::reinit`] with a delay before the next run.
    pub fn reinit_after(&mut self, id: TaskId, delay: Duration) -> Result<(), Error> {
        self.reinit_inner(id, Some(delay))
    }

    fn reinit_inner(&mut self, id: TaskId, delay: Option<Duration>) -> Result<(), Error> {
        if self.cancelling {
            return Err(Error::Cancelling);
        }
        let t = self.task_mut(id)?;
        match t.state {
            TaskState::Running | TaskState::Completing => {}
            TaskState::Completed => {
                self.inflight += 1;
                stats::set(&self.cell.in_flight, self.inflight as u64);
            }
            state => {
                return Err(Error::BadTaskState {
                    task: id,
                    state,
                    what: "re-initialising (only a running or completed task can be)",
                })
            }
        }
        let t = self.task_mut(id)?;
        tracing::trace!(task = %id, ?delay, "reinit");
        t.state = TaskState::Waiting;
        t.result = Ok(());
        t.dep_error = None;
        if let Some(e) = t.extra.as_mut() {
            e.stack.clear();
        }
        self.arm(id, delay);
        Ok(())
    }

    // ---- completion ----------------------------------------------------------------

    /// Completes the task with `result` (`tse_task_complete`): runs its
    /// completion callbacks now, last registered first (each may change the
    /// result or re-initialise the task), then hands the result to the tasks
    /// waiting on it and frees the task unless held. Completing a task that has
    /// not run (still `Init` or `Waiting`) aborts it: its body never runs.
    /// Errors: [`Error::AlreadyCompleted`] for a second completion.
    pub fn complete(&mut self, id: TaskId, result: TaskResult) -> Result<(), Error> {
        let t = lookup_mut(&mut self.tasks, self.id, id)?;
        match t.state {
            TaskState::Completing | TaskState::Completed => {
                return Err(Error::AlreadyCompleted(id))
            }
            TaskState::Init => {
                self.inflight += 1;
                stats::set(&self.cell.in_flight, self.inflight as u64);
            }
            TaskState::Waiting | TaskState::Running => {}
        }
        if t.dep_cnt > 0 {
            // leaving before its dependencies finished: their edges go stale
            t.epoch = t.epoch.wrapping_add(1);
            t.dep_cnt = 0;
        }
        t.sleeping = false;
        t.result = result;
        t.state = TaskState::Completing;
        tracing::trace!(task = %id, ?result, "complete");
        loop {
            let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                return Ok(());
            };
            let Some(cb) = t.comp.pop() else { break };
            let cur = t.result;
            let new = cb(self, id, cur);
            let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                return Ok(());
            };
            if t.state != TaskState::Completing {
                // re-initialised by the callback: not completed after all
                return Ok(());
            }
            t.result = new;
        }
        self.finish(id);
        Ok(())
    }

    /// Aborts the task: completes it with [`TaskError::Cancelled`].
    pub fn abort(&mut self, id: TaskId) -> Result<(), Error> {
        self.complete(id, Err(TaskError::Cancelled))
    }

    fn finish(&mut self, id: TaskId) {
        let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
            return;
        };
        t.state = TaskState::Completed;
        let r = t.result;
        let dependents = t.dependents.drain();
        let free = t.holds == 0;
        self.inflight = self.inflight.saturating_sub(1);
        stats::set(&self.cell.in_flight, self.inflight as u64);
        stats::add(&self.cell.completed, 1);
        if r.is_err() {
            stats::add(&self.cell.failed, 1);
        }
        if self.result.is_ok() {
            self.result = r;
        }
        for (d, ep) in dependents {
            let Ok(dt) = self.tasks.get_mut(d.idx, d.gen) else {
                continue;
            };
            if dt.epoch != ep || !matches!(dt.state, TaskState::Init | TaskState::Waiting) {
                continue;
            }
            dt.dep_cnt = dt.dep_cnt.saturating_sub(1);
            if let Err(e) = r {
                dt.dep_error.get_or_insert(e);
            }
            if dt.dep_cnt == 0 && dt.state == TaskState::Waiting && !dt.sleeping && !dt.in_ready {
                dt.in_ready = true;
                self.ready.push_back(d);
            }
        }
        if free {
            self.tasks.free(id.idx, id.gen);
        }
    }

    // ---- progress --------------------------------------------------------------------

    /// When the earliest delayed task wakes, if any.
    pub fn next_wakeup(&self) -> Option<Time> {
        self.sleeping.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Whether there are tasks ready to run now (without waiting for time).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    fn wake_due(&mut self, now: Time) {
        while let Some(Reverse((wake, seq, id))) = self.sleeping.peek().copied() {
            if wake > now {
                break;
            }
            self.sleeping.pop();
            let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                continue;
            };
            if !t.sleeping || t.wake_seq != seq || t.state != TaskState::Waiting {
                continue;
            }
            t.sleeping = false;
            if t.dep_cnt == 0 && !t.in_ready {
                t.in_ready = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Runs every task that is ready (`tse_sched_progress`): wakes the delayed
    /// tasks whose time has come (one clock reading), then runs ready tasks,
    /// including those made ready meanwhile, until none is left. Returns how
    /// many tasks it started (a body ran, or a join/failed-dependency task
    /// completed). Re-entrant calls (from a body or callback) return 0.
    pub fn progress(&mut self) -> usize {
        if self.in_progress {
            tracing::warn!(sched = self.id, "re-entrant Scheduler::progress ignored");
            return 0;
        }
        self.in_progress = true;
        if !self.sleeping.is_empty() {
            let now = self.clock.now();
            self.wake_due(now);
        }
        let mut ran = 0;
        while let Some(id) = self.ready.pop_front() {
            let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                continue;
            };
            t.in_ready = false;
            if t.state != TaskState::Waiting || t.dep_cnt > 0 || t.sleeping {
                continue;
            }
            ran += 1;
            self.run_task(id);
        }
        stats::add(&self.cell.ran, ran as u64);
        self.in_progress = false;
        ran
    }

    /// Like [`Scheduler::progress`], but if nothing was ready, sleeps (on the
    /// scheduler's clock) until the next delayed task wakes, at most `timeout`
    /// (`None`: no limit), and runs again. Returns 0 at once when nothing is
    /// ready and nothing sleeps: only an outside completion could help then.
    pub fn progress_wait(&mut self, timeout: Option<Duration>) -> usize {
        if self.in_progress {
            return 0;
        }
        let deadline = timeout.map(|d| self.clock.now() + d);
        loop {
            let n = self.progress();
            if n > 0 {
                return n;
            }
            let Some(wake) = self.next_wakeup() else {
                return 0;
            };
            let now = self.clock.now();
            if deadline.is_some_and(|d| now >= d) {
                return 0;
            }
            let until = deadline.map_or(wake, |d| d.min(wake));
            self.clock.sleep_until(until);
        }
    }

    fn run_task(&mut self, id: TaskId) {
        let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
            return;
        };
        if let (Some(e), true) = (t.dep_error, t.propagate) {
            let _ = self.complete(id, Err(e));
            return;
        }
        t.state = TaskState::Running;
        let t = if !t.has_prep() {
            t
        } else {
            let mut preps = std::mem::take(&mut t.extra().prep).into_iter();
            while let Some(cb) = preps.next() {
                let r = cb(self, id);
                let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                    return;
                };
                if t.state != TaskState::Running {
                    // completed or re-initialised by the callback
                    let mut rest: Vec<PrepFn> = preps.collect();
                    rest.append(&mut t.extra().prep);
                    t.extra().prep = rest;
                    return;
                }
                if let Err(e) = r {
                    let mut rest: Vec<PrepFn> = preps.collect();
                    rest.append(&mut t.extra().prep);
                    t.extra().prep = rest;
                    let _ = self.complete(id, Err(e));
                    return;
                }
            }
            let Ok(t) = self.tasks.get_mut(id.idx, id.gen) else {
                return;
            };
            t
        };
        match t.kind {
            Kind::Join => {
                let _ = self.complete(id, Ok(()));
            }
            Kind::External => {}
            Kind::Run => {
                if let Some(mut f) = t.body.take() {
                    f(self, id);
                    if let Ok(t) = self.tasks.get_mut(id.idx, id.gen) {
                        if t.body.is_none() {
                            t.body = Some(f);
                        }
                    }
                }
            }
        }
    }

    /// Whether a body or callback of this scheduler is running (`progress` is
    /// on the stack).
    pub fn in_progress(&self) -> bool {
        self.in_progress
    }

    /// Whether every scheduled task completed (`tse_sched_check_complete`).
    /// Created but never scheduled tasks do not count.
    pub fn check_complete(&self) -> bool {
        self.inflight == 0
    }

    /// Completes every task that has not completed (created, waiting or
    /// running) with [`TaskError::Cancelled`], running their completion
    /// callbacks; nothing can be scheduled or re-initialised meanwhile.
    /// Returns how many tasks were cancelled.
    pub fn cancel_all(&mut self) -> usize {
        let was = self.cancelling;
        self.cancelling = true;
        let mut n = 0;
        let mut ids = Vec::new();
        // callbacks may create tasks while we cancel: repeat, boundedly
        for _ in 0..1000 {
            ids.clear();
            ids.extend(self.tasks.iter().filter_map(|((idx, gen), t)| {
                matches!(
                    t.state,
                    TaskState::Init | TaskState::Waiting | TaskState::Running
                )
                .then_some(TaskId {
                    sched: self.id,
                    idx,
                    gen,
                })
            }));
            if ids.is_empty() {
                break;
            }
            for &id in &ids {
                if self.abort(id).is_ok() {
                    n += 1;
                }
            }
        }
        self.ready.clear();
        self.sleeping.clear();
        self.cancelling = was;
        n
    }

    /// Completes the scheduler (`tse_sched_complete`): with `cancel`, cancels
    /// every unfinished task; without, progresses (sleeping on the clock for
    /// delayed tasks) until every scheduled task completed, failing with
    /// [`Error::Stalled`] if tasks are running and nothing can complete them.
    /// Then runs the scheduler completion callbacks and returns the result.
    pub fn complete_all(&mut self, cancel: bool) -> Result<TaskResult, Error> {
        if self.in_progress && !cancel {
            // waiting from inside a body or callback would never return
            return Err(Error::Reentrant);
        }
        if cancel {
            self.cancel_all();
        } else {
            loop {
                self.progress();
                if self.check_complete() {
                    break;
                }
                if self.has_ready() {
                    continue;
                }
                match self.next_wakeup() {
                    Some(w) => self.clock.sleep_until(w),
                    None => {
                        return Err(Error::Stalled {
                            inflight: self.inflight,
                        })
                    }
                }
            }
        }
        self.run_sched_comp_cbs();
        Ok(self.result)
    }

    fn run_sched_comp_cbs(&mut self) {
        for cb in std::mem::take(&mut self.comp_cbs) {
            let r = cb(self.result);
            if self.result.is_ok() {
                self.result = r;
            }
        }
    }
}

impl Drop for Scheduler {
    /// Cancels what has not completed (so completion callbacks, e.g. of events,
    /// still see an outcome) and runs the scheduler completion callbacks not
    /// yet run.
    fn drop(&mut self) {
        if self.inflight > 0 || self.tasks.live() > 0 {
            self.cancel_all();
        }
        self.run_sched_comp_cbs();
        stats::retire_sched(&self.cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::cell::RefCell;
    use std::rc::Rc;

    fn manual() -> (Scheduler, ManualClock) {
        let c = ManualClock::new();
        (Scheduler::with_clock(Box::new(c.clone())), c)
    }

    type Log = Rc<RefCell<Vec<String>>>;

    fn logging(s: &mut Scheduler, log: &Log, name: &'static str, r: TaskResult) -> TaskId {
        let log = log.clone();
        s.create(move |s, id| {
            log.borrow_mut().push(name.to_string());
            s.complete(id, r).unwrap();
        })
    }

    #[test]
    fn diamond_runs_in_dependency_order() {
        let (mut s, _) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "a", Ok(()));
        let b = logging(&mut s, &log, "b", Ok(()));
        let c = logging(&mut s, &log, "c", Ok(()));
        let d = logging(&mut s, &log, "d", Ok(()));
        s.register_deps(d, &[b, c]).unwrap();
        s.register_deps(b, &[a]).unwrap();
        s.register_deps(c, &[a]).unwrap();
        for t in [d, c, b, a] {
            s.schedule(t).unwrap();
        }
        assert_eq!(s.inflight(), 4);
        assert_eq!(s.progress(), 4);
        assert_eq!(*log.borrow(), ["a", "b", "c", "d"]); // dependents wake in registration order
        assert!(s.check_complete());
        assert_eq!(s.live(), 0);
        assert_eq!(s.result(), Ok(()));
        assert_eq!(s.complete(a, Ok(())), Err(Error::AlreadyCompleted(a)));
    }

    #[test]
    fn failed_dependency_reaches_dependent_without_running_it() {
        let (mut s, _) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "a", Err(TaskError::Code(-5)));
        let b = logging(&mut s, &log, "b", Ok(()));
        let c = logging(&mut s, &log, "c", Ok(()));
        s.register_deps(b, &[a]).unwrap();
        s.register_deps(c, &[b]).unwrap();
        let seen = Rc::new(RefCell::new(Vec::new()));
        for t in [a, b, c] {
            let seen = seen.clone();
            s.register_comp_cb(t, move |_, id, r| {
                seen.borrow_mut().push((id, r));
                r
            })
            .unwrap();
            s.schedule(t).unwrap();
        }
        s.progress();
        assert_eq!(*log.borrow(), ["a"]);
        let e = Err(TaskError::Code(-5));
        assert_eq!(*seen.borrow(), [(a, e), (b, e), (c, e)]);
        assert_eq!(s.result(), e);
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn no_propagate_runs_body_which_sees_dep_error() {
        let (mut s, _) = manual();
        let a = s.create(|s, id| s.complete(id, Err(TaskError::Code(1))).unwrap());
        let got = Rc::new(RefCell::new(None));
        let g = got.clone();
        let b = s.create(move |s, id| {
            *g.borrow_mut() = Some(s.dep_error(id).unwrap());
            s.complete(id, Ok(())).unwrap();
        });
        s.register_deps(b, &[a]).unwrap();
        s.set_propagate(b, false).unwrap();
        s.hold(b).unwrap();
        s.schedule(a).unwrap();
        s.schedule(b).unwrap();
        s.progress();
        assert_eq!(*got.borrow(), Some(Some(TaskError::Code(1))));
        assert_eq!(s.task_result(b).unwrap(), Some(Ok(())));
        s.release(b).unwrap();
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn misuse_errors() {
        let (mut s, _) = manual();
        let a = s.create_external();
        let b = s.create_external();
        let c = s.create_external();
        s.register_deps(b, &[a]).unwrap();
        s.register_deps(c, &[b]).unwrap();
        // cycle: a waits for c, which waits (through b) for a
        assert_eq!(
            s.register_deps(a, &[c]),
            Err(Error::DependencyCycle { task: a, dep: c })
        );
        assert_eq!(
            s.register_deps(a, &[a]),
            Err(Error::DependencyCycle { task: a, dep: a })
        );
        s.schedule(a).unwrap();
        assert!(matches!(s.schedule(a), Err(Error::AlreadyScheduled(..))));
        s.progress();
        assert_eq!(s.state(a).unwrap(), TaskState::Running);
        let d = s.create_external();
        assert_eq!(s.register_deps(a, &[d]), Err(Error::TaskRunning(a)));
        s.hold(a).unwrap();
        s.complete(a, Ok(())).unwrap();
        assert_eq!(s.complete(a, Ok(())), Err(Error::AlreadyCompleted(a)));
        s.release(a).unwrap();
        assert_eq!(s.complete(a, Ok(())), Err(Error::AlreadyCompleted(a)));
        assert_eq!(s.release(b), Err(Error::NotHeld(b)));
        let mut other = Scheduler::new();
        let x = other.create_external();
        assert_eq!(s.schedule(x), Err(Error::WrongScheduler(x)));
        assert_eq!(
            s.register_deps(b, &[x]),
            Err(Error::CrossScheduler { task: b, dep: x })
        );
        assert_eq!(s.cancel_all(), 3);
        assert_eq!(s.live(), 0);
        assert_eq!(other.cancel_all(), 1);
    }

    #[test]
    fn completion_callbacks_stack_change_result_and_reinit() {
        let (mut s, _) = manual();
        let order = Rc::new(RefCell::new(Vec::new()));
        let runs = Rc::new(RefCell::new(0));
        let r2 = runs.clone();
        let t = s.create(move |s, id| {
            *r2.borrow_mut() += 1;
            s.complete(id, Err(TaskError::Code(7))).unwrap();
        });
        let o = order.clone();
        s.register_comp_cb(t, move |_, _, r| {
            o.borrow_mut().push(("first", r));
            r
        })
        .unwrap();
        let o = order.clone();
        let retries = Rc::new(RefCell::new(0));
        let re = retries.clone();
        // registered second, runs first: retries once, then turns the failure into success
        fn retry(
            o: Rc<RefCell<Vec<(&'static str, TaskResult)>>>,
            re: Rc<RefCell<u32>>,
        ) -> impl FnOnce(&mut Scheduler, TaskId, TaskResult) -> TaskResult {
            move |s, id, r| {
                o.borrow_mut().push(("second", r));
                if *re.borrow() == 0 {
                    *re.borrow_mut() += 1;
                    s.register_comp_cb(id, retry(o, re)).unwrap();
                    s.reinit(id).unwrap();
                    r
                } else {
                    Ok(())
                }
            }
        }
        s.register_comp_cb(t, retry(o, re)).unwrap();
        s.schedule(t).unwrap();
        assert_eq!(s.progress(), 2);
        assert_eq!(*runs.borrow(), 2);
        let e = Err(TaskError::Code(7));
        assert_eq!(
            *order.borrow(),
            [("second", e), ("second", e), ("first", Ok(()))]
        );
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn delays_follow_the_clock() {
        let (mut s, clock) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "a", Ok(()));
        let b = logging(&mut s, &log, "b", Ok(()));
        s.schedule_after(a, Duration::from_millis(10)).unwrap();
        s.schedule_after(b, Duration::from_millis(5)).unwrap();
        assert_eq!(s.progress(), 0);
        clock.advance(Duration::from_millis(6));
        assert_eq!(s.progress(), 1);
        assert_eq!(*log.borrow(), ["b"]);
        assert_eq!(s.progress_wait(Some(Duration::from_millis(1))), 0);
        assert_eq!(s.now(), Time::from_nanos(7_000_000));
        assert_eq!(s.progress_wait(None), 1);
        assert_eq!(s.now(), Time::from_nanos(10_000_000));
        assert_eq!(*log.borrow(), ["b", "a"]);
        assert_eq!(s.progress_wait(None), 0);
    }

    #[test]
    fn external_task_completes_later_and_subtasks_join() {
        let (mut s, _) = manual();
        let pending: Rc<RefCell<Vec<TaskId>>> = Default::default();
        let p = pending.clone();
        // the parent body spawns two "I/O" sub-tasks and finishes when they do
        let parent = s.create(move |s, id| {
            let x = s.create_external();
            let y = s.create_external();
            s.schedule(x).unwrap();
            s.schedule(y).unwrap();
            p.borrow_mut().extend([x, y]);
            s.complete_after(id, &[x, y]).unwrap();
        });
        let res = Rc::new(RefCell::new(None));
        let r = res.clone();
        s.register_comp_cb(parent, move |_, _, rr| {
            *r.borrow_mut() = Some(rr);
            rr
        })
        .unwrap();
        s.schedule(parent).unwrap();
        s.progress();
        assert_eq!(pending.borrow().len(), 2);
        assert_eq!(*res.borrow(), None);
        let (x, y) = (pending.borrow()[0], pending.borrow()[1]);
        // "network" completions arrive
        s.complete(y, Err(TaskError::TimedOut)).unwrap();
        s.complete(x, Ok(())).unwrap();
        s.progress();
        assert_eq!(*res.borrow(), Some(Err(TaskError::TimedOut)));
        assert!(s.check_complete());
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn callbacks_create_and_schedule_tasks() {
        let (mut s, _) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "a", Ok(()));
        let l = log.clone();
        s.register_comp_cb(a, move |s, _, r| {
            // a follow-up created from a completion callback, depending on a
            // task created from a prepare callback of its own
            let follow = logging(s, &l, "follow-up", Ok(()));
            let l2 = l.clone();
            s.register_prep_cb(follow, move |s, id| {
                let pre = logging(s, &l2, "pre", Ok(()));
                s.schedule(pre).unwrap();
                // the prepare callback may not add dependencies: the task runs
                assert_eq!(s.register_deps(id, &[pre]), Err(Error::TaskRunning(id)));
                Ok(())
            })
            .unwrap();
            s.schedule(follow).unwrap();
            r
        })
        .unwrap();
        s.schedule(a).unwrap();
        assert_eq!(s.progress(), 3);
        assert_eq!(*log.borrow(), ["a", "follow-up", "pre"]);
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn prep_callbacks_run_before_body_and_can_fail() {
        let (mut s, _) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "body", Ok(()));
        let l = log.clone();
        s.register_prep_cb(a, move |_, _| {
            l.borrow_mut().push("prep1".into());
            Ok(())
        })
        .unwrap();
        let l = log.clone();
        s.register_prep_cb(a, move |_, _| {
            l.borrow_mut().push("prep2".into());
            Ok(())
        })
        .unwrap();
        let b = logging(&mut s, &log, "never", Ok(()));
        s.register_prep_cb(b, |_, _| Err(TaskError::Code(3)))
            .unwrap();
        s.hold(b).unwrap();
        s.schedule(a).unwrap();
        s.schedule(b).unwrap();
        s.progress();
        assert_eq!(*log.borrow(), ["prep1", "prep2", "body"]);
        assert_eq!(s.task_result(b).unwrap(), Some(Err(TaskError::Code(3))));
        s.release(b).unwrap();
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn priv_data_and_stack_are_typed() {
        let (mut s, _) = manual();
        let t = s.create_with_priv(
            |s, id| {
                *s.priv_mut::<u64>(id).unwrap() += 1;
                s.stack_push(id, "from body").unwrap();
                s.complete(id, Ok(())).unwrap();
            },
            41u64,
        );
        let out = Rc::new(RefCell::new((0u64, "")));
        let o = out.clone();
        s.register_comp_cb(t, move |s, id, r| {
            let msg = s.stack_pop::<&'static str>(id).unwrap();
            *o.borrow_mut() = (*s.priv_ref::<u64>(id).unwrap(), msg);
            r
        })
        .unwrap();
        assert!(matches!(s.priv_ref::<u32>(t), Err(Error::WrongType { .. })));
        s.stack_push(t, 5u8).unwrap();
        assert!(matches!(
            s.stack_pop::<u16>(t),
            Err(Error::WrongType { .. })
        ));
        assert_eq!(s.stack_pop::<u8>(t), Ok(5));
        assert!(matches!(s.stack_pop::<u8>(t), Err(Error::Missing { .. })));
        s.schedule(t).unwrap();
        s.progress();
        assert_eq!(*out.borrow(), (42, "from body"));
    }

    #[test]
    fn scheduler_completion_callback_and_cancel() {
        let got = Rc::new(RefCell::new(None));
        let g = got.clone();
        let mut s = Scheduler::with_completion(Box::new(ManualClock::new()), move |r| {
            *g.borrow_mut() = Some(r);
            r
        });
        let a = s.create_external();
        let b = s.create(|_, _| {});
        s.register_deps(b, &[a]).unwrap();
        s.schedule(a).unwrap();
        s.schedule(b).unwrap();
        s.progress();
        assert_eq!(s.complete_all(false), Err(Error::Stalled { inflight: 2 }));
        assert_eq!(s.complete_all(true), Ok(Err(TaskError::Cancelled)));
        assert_eq!(*got.borrow(), Some(Err(TaskError::Cancelled)));
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn complete_all_sleeps_through_delays() {
        let (mut s, clock) = manual();
        let log: Log = Default::default();
        let a = logging(&mut s, &log, "a", Ok(()));
        let b = logging(&mut s, &log, "b", Err(TaskError::Code(4)));
        s.register_deps(b, &[a]).unwrap();
        s.schedule_after(a, Duration::from_secs(3)).unwrap();
        s.schedule(b).unwrap();
        let unscheduled = s.create_external();
        assert_eq!(s.complete_all(false), Ok(Err(TaskError::Code(4))));
        assert_eq!(clock.now(), Time::from_nanos(3_000_000_000));
        assert_eq!(*log.borrow(), ["a", "b"]);
        // created but never scheduled tasks are not waited for, but are live
        assert_eq!(s.live(), 1);
        s.abort(unscheduled).unwrap();
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn drop_cancels_and_reports() {
        let got = Rc::new(RefCell::new(Vec::new()));
        {
            let mut s = Scheduler::new();
            let t = s.create_external();
            let g = got.clone();
            s.register_comp_cb(t, move |_, _, r| {
                g.borrow_mut().push(r);
                r
            })
            .unwrap();
            s.schedule(t).unwrap();
        }
        assert_eq!(*got.borrow(), [Err(TaskError::Cancelled)]);
    }

    #[test]
    fn abort_waiting_task_makes_stale_edges_harmless() {
        let (mut s, _) = manual();
        let a = s.create_external();
        let b = s.create(|s, id| s.complete(id, Ok(())).unwrap());
        s.register_deps(b, &[a]).unwrap();
        s.hold(b).unwrap();
        s.schedule(a).unwrap();
        s.schedule(b).unwrap();
        s.abort(b).unwrap();
        // b re-runs with no dependencies; a's old edge to b must not count
        s.reinit(b).unwrap();
        let c = s.create_external();
        s.register_deps(b, &[c]).unwrap();
        s.schedule(c).unwrap();
        s.progress();
        s.complete(a, Ok(())).unwrap();
        s.progress();
        assert_eq!(s.state(b).unwrap(), TaskState::Waiting);
        s.complete(c, Ok(())).unwrap();
        s.progress();
        assert_eq!(s.state(b).unwrap(), TaskState::Completed);
        s.release(b).unwrap();
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn task_slot_stays_small() {
        // every task costs one slot: keep it within two cache lines
        assert!(
            std::mem::size_of::<Task>() <= 128,
            "{}",
            std::mem::size_of::<Task>()
        );
    }

    #[test]
    fn reentrant_progress_is_refused() {
        let (mut s, _) = manual();
        let inner = Rc::new(RefCell::new(None));
        let i = inner.clone();
        let t = s.create(move |s, id| {
            // a sleeping task and a ready one: a nested wait would spin forever
            let later = s.create_external();
            s.schedule_after(later, Duration::from_secs(1)).unwrap();
            let now = s.create_external();
            s.schedule(now).unwrap();
            *i.borrow_mut() = Some((
                s.progress(),
                s.progress_wait(None),
                s.complete_all(false),
                s.in_progress(),
            ));
            s.complete(id, Ok(())).unwrap();
        });
        s.schedule(t).unwrap();
        assert_eq!(s.progress(), 2);
        assert_eq!(*inner.borrow(), Some((0, 0, Err(Error::Reentrant), true)));
        assert!(!s.in_progress());
        s.cancel_all();
    }
}
