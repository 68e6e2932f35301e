//! Event queues (DAOS `daos_eq_*` / `daos_event_*`).
//!
//! An [`EventQueue`] owns a [`Scheduler`] and, optionally, a [`Poller`] (the
//! transport's progress hook). An [`Event`] tracks one asynchronous operation:
//! it is initialised on the EQ (optionally as the child of a parent event),
//! launched when its operation starts, completed with the operation's result,
//! and then polled out of the EQ (or tested), which makes it ready for reuse.
//! Polling or testing progresses the scheduler and the poller, so one loop
//! drives tasks, network and completions.
//!
//! ```text
//!  event_init ──► Ready ──launch──► Running ──complete──► Completed ──poll/test──► Ready
//! ```
//!
//! A parent event completes when all its children have and (its own operation
//! completed, or it was launched as a [`EventQueue::parent_barrier`]); only
//! parents and single events are polled, never children.
//!
//! Completions reach the EQ in two ways: [`EventQueue::complete_event`]
//! directly, or through a [`Completer`] (a cheap clone-able handle a task's
//! completion callback or a transport can keep; the EQ applies what it
//! collected on its next poll, test or progress).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Time;
use crate::error::{Error, TaskError, TaskResult};
use crate::sched::{Scheduler, TaskId, TaskState};
use crate::slab::{Miss, Slab};
use crate::stats::{self, EqCell};

pub use crate::handle::{Event, EventState};

/// How long `poll`/`test` may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Progress once and return (`DAOS_EQ_NOWAIT`).
    NoWait,
    /// Until something completes (`DAOS_EQ_WAIT`).
    Forever,
    /// At most this long on the scheduler's clock.
    Timeout(Duration),
}

/// A transport progress hook bound to an EQ: polling the EQ calls it after
/// progressing the scheduler. It completes tasks (or events, through a
/// [`Completer`]) whose I/O finished, and returns how many completions it
/// made. `timeout` is how long it may block waiting for I/O (zero: do not
/// block); busy-polling transports ignore it and return at once.
pub trait Poller {
    fn poll(&mut self, sched: &mut Scheduler, timeout: Duration) -> usize;
}

/// Any `FnMut(&mut Scheduler, Duration) -> usize` closure is a poller.
impl<F: FnMut(&mut Scheduler, Duration) -> usize> Poller for F {
    fn poll(&mut self, sched: &mut Scheduler, timeout: Duration) -> usize {
        self(sched, timeout)
    }
}

/// A completion callback of an event: sees the result, returns the
/// (possibly changed) result. Runs when the EQ applies the completion.
pub type EventCompFn = Box<dyn FnOnce(&mut Scheduler, Event, TaskResult) -> TaskResult>;

type Mailbox = Rc<RefCell<Vec<(Event, TaskResult)>>>;

/// A handle that completes events of one EQ from anywhere in the thread
/// (task completion callbacks, a transport). Completions are applied by the
/// EQ's next poll, test or progress.
#[derive(Clone)]
pub struct Completer {
    eq: u32,
    mailbox: Mailbox,
}

impl Completer {
    /// Queues the completion of `ev` with `result`. An event of another EQ is
    /// refused.
    pub fn complete(&self, ev: Event, result: TaskResult) -> Result<(), Error> {
        if ev.eq != self.eq {
            return Err(Error::WrongEq(ev));
        }
        self.mailbox.borrow_mut().push((ev, result));
        Ok(())
    }
}

impl fmt::Debug for Completer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Completer(eq{})", self.eq)
    }
}

struct EvSlot {
    state: EventState,
    parent: Option<Event>,
    children: Vec<Event>,
    nchild_running: u32,
    nchild_comp: u32,
    barrier: bool,
    error: TaskResult,
    comp_cbs: Vec<EventCompFn>,
    /// In `comp` (completed, waiting to be polled).
    queued: bool,
    /// The task carrying the event's operation, for `abort`.
    task: Option<TaskId>,
}

impl EvSlot {
    fn new(parent: Option<Event>) -> EvSlot {
        EvSlot {
            state: EventState::Ready,
            parent,
            children: Vec::new(),
            nchild_running: 0,
            nchild_comp: 0,
            barrier: false,
            error: Ok(()),
            comp_cbs: Vec::new(),
            queued: false,
            task: None,
        }
    }
}

static NEXT_EQ_ID: AtomicU32 = AtomicU32::new(1);

/// Longest a poller is asked to block in one call while `poll` waits.
const MAX_POLLER_BLOCK: Duration = Duration::from_millis(10);

/// An event queue (DAOS `daos_eq`). Single-threaded, like its scheduler.
pub struct EventQueue {
    id: u32,
    sched: Scheduler,
    poller: Option<Box<dyn Poller>>,
    events: Slab<EvSlot>,
    comp: VecDeque<Event>,
    n_running: usize,
    n_comp: usize,
    mailbox: Mailbox,
    scratch: Vec<(Event, TaskResult)>,
    private_ev: Option<Event>,
    destroyed: bool,
    /// Counters other threads read (crate::stats).
    cell: Arc<EqCell>,
}

impl fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue")
            .field("id", &self.id)
            .field("running", &self.n_running)
            .field("completed", &self.n_comp)
            .field("events", &self.events.live())
            .field("sched", &self.sched)
            .finish()
    }
}

impl EventQueue {
    /// Creates an EQ bound to `sched` (`daos_eq_create`).
    pub fn new(sched: Scheduler) -> Self {
        let id = NEXT_EQ_ID.fetch_add(1, Ordering::Relaxed);
        let cell = stats::register_eq(id, sched.id());
        EventQueue {
            id,
            cell,
            sched,
            poller: None,
            events: Slab::new(),
            comp: VecDeque::new(),
            n_running: 0,
            n_comp: 0,
            mailbox: Rc::new(RefCell::new(Vec::new())),
            scratch: Vec::new(),
            private_ev: None,
            destroyed: false,
        }
    }

    /// Creates an EQ bound to `sched` and to a transport poller.
    pub fn with_poller(sched: Scheduler, poller: Box<dyn Poller>) -> Self {
        let mut eq = Self::new(sched);
        eq.poller = Some(poller);
        eq
    }

    /// Binds (or replaces) the transport poller.
    pub fn bind_poller(&mut self, poller: Box<dyn Poller>) {
        self.poller = Some(poller);
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Publishes the gauges (events running, completed and not polled).
    fn publish(&self) {
        stats::set(&self.cell.running, self.n_running as u64);
        stats::set(&self.cell.waiting, self.n_comp as u64);
    }

    /// The bound scheduler.
    pub fn sched(&self) -> &Scheduler {
        &self.sched
    }

    /// The bound scheduler, to create and schedule tasks.
    pub fn sched_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// A handle completing this EQ's events from callbacks.
    pub fn completer(&self) -> Completer {
        Completer {
            eq: self.id,
            mailbox: self.mailbox.clone(),
        }
    }

    /// Launched events not completed yet (top-level ones; children count
    /// through their parent).
    pub fn running(&self) -> usize {
        self.n_running
    }

    /// Completed events not yet polled.
    pub fn completed(&self) -> usize {
        self.n_comp
    }

    /// Events initialised and not finalised (the leak check).
    pub fn live_events(&self) -> usize {
        self.events
            .live()
            .saturating_sub(usize::from(self.private_ev.is_some()))
    }

    fn alive(&self) -> Result<(), Error> {
        if self.destroyed {
            Err(Error::EqDestroyed)
        } else {
            Ok(())
        }
    }

    fn ev(&self, ev: Event) -> Result<&EvSlot, Error> {
        self.alive()?;
        if ev.eq != self.id {
            return Err(Error::WrongEq(ev));
        }
        self.events
            .get(ev.idx, ev.gen)
            .map_err(|_: Miss| Error::InvalidEvent(ev))
    }

    fn ev_mut(&mut self, ev: Event) -> Result<&mut EvSlot, Error> {
        self.alive()?;
        if ev.eq != self.id {
            return Err(Error::WrongEq(ev));
        }
        self.events
            .get_mut(ev.idx, ev.gen)
            .map_err(|_: Miss| Error::InvalidEvent(ev))
    }

    // ---- events ------------------------------------------------------------

    /// Initialises an event (`daos_event_init`), as a child of `parent` if
    /// given: the parent must not be launched yet and not be a child itself.
    pub fn event_init(&mut self, parent: Option<Event>) -> Result<Event, Error> {
        self.alive()?;
        if let Some(p) = parent {
            let ps = self.ev(p)?;
            if ps.parent.is_some() {
                return Err(Error::NestedParent(p));
            }
            if ps.state != EventState::Ready {
                return Err(Error::BadEventState {
                    ev: p,
                    state: ps.state,
                    what: "adding a child",
                });
            }
        }
        let (idx, gen) = self.events.insert(EvSlot::new(parent));
        let ev = Event {
            eq: self.id,
            idx,
            gen,
        };
        if let Some(p) = parent {
            self.ev_mut(p)?.children.push(ev);
        }
        Ok(ev)
    }

    /// Finalises an event and its children (`daos_event_fini`). Refused while
    /// the event (or a child) is running, or for a child whose parent is.
    pub fn event_fini(&mut self, ev: Event) -> Result<(), Error> {
        let s = self.ev(ev)?;
        if s.state == EventState::Running {
            return Err(Error::BadEventState {
                ev,
                state: s.state,
                what: "finalising",
            });
        }
        for &c in &s.children {
            let cs = self.ev(c)?;
            if cs.state == EventState::Running {
                return Err(Error::BadEventState {
                    ev: c,
                    state: cs.state,
                    what: "finalising the parent of",
                });
            }
        }
        if let Some(p) = s.parent {
            let ps = self.ev(p)?;
            if ps.state != EventState::Ready {
                return Err(Error::BadEventState {
                    ev: p,
                    state: ps.state,
                    what: "finalising a child of",
                });
            }
        }
        let Some(s) = self.events.remove(ev.idx, ev.gen) else {
            return Err(Error::InvalidEvent(ev));
        };
        if s.queued {
            self.n_comp = self.n_comp.saturating_sub(1);
        }
        for c in s.children {
            self.events.remove(c.idx, c.gen);
        }
        if let Some(p) = s.parent {
            if let Ok(ps) = self.ev_mut(p) {
                ps.children.retain(|&c| c != ev);
                // a completed child no longer counts
                if s.state == EventState::Completed {
                    ps.nchild_comp = ps.nchild_comp.saturating_sub(1);
                }
            }
        }
        Ok(())
    }

    pub fn event_state(&self, ev: Event) -> Result<EventState, Error> {
        Ok(self.ev(ev)?.state)
    }

    /// The event's result (`ev_error`): that of its last completion.
    pub fn event_result(&self, ev: Event) -> Result<TaskResult, Error> {
        Ok(self.ev(ev)?.error)
    }

    /// Adds a completion callback to the event (run in registration order when
    /// it completes; each sees and may change the result).
    pub fn register_event_cb(
        &mut self,
        ev: Event,
        cb: impl FnOnce(&mut Scheduler, Event, TaskResult) -> TaskResult + 'static,
    ) -> Result<(), Error> {
        self.ev_mut(ev)?.comp_cbs.push(Box::new(cb));
        Ok(())
    }

    /// Launches the event (`daos_event_launch`): its operation is in flight.
    /// A parent needs all its children launched first.
    pub fn launch(&mut self, ev: Event) -> Result<(), Error> {
        let s = self.ev(ev)?;
        if s.state != EventState::Ready {
            return Err(Error::BadEventState {
                ev,
                state: s.state,
                what: "launching",
            });
        }
        let nchild = s.children.len() as u32;
        if nchild > s.nchild_running + s.nchild_comp {
            return Err(Error::ChildrenNotLaunched(ev));
        }
        let s = self.ev_mut(ev)?;
        s.state = EventState::Running;
        if nchild == 0 {
            // a parent keeps what its children (which may have completed
            // already) reported
            s.error = Ok(());
        }
        s.task = None;
        let parent = s.parent;
        let complete_now = s.barrier && nchild > 0 && nchild == s.nchild_comp;
        match parent {
            Some(p) => self.ev_mut(p)?.nchild_running += 1,
            None => self.n_running += 1,
        }
        stats::add(&self.cell.launched, 1);
        self.publish();
        if complete_now {
            self.complete_event(ev, Ok(()))?;
        }
        Ok(())
    }

    /// Launches `ev` as a barrier over its children (`daos_event_parent_barrier`):
    /// it completes when all of them have.
    pub fn parent_barrier(&mut self, ev: Event) -> Result<(), Error> {
        let s = self.ev_mut(ev)?;
        if s.children.is_empty() {
            return Err(Error::NoChildren(ev));
        }
        s.barrier = true;
        self.launch(ev)
    }

    /// Completes a running event with `result` (`daos_event_complete`): runs
    /// its completion callbacks, records the result; a child reports to its
    /// parent (first failure wins), which may complete in turn.
    pub fn complete_event(&mut self, ev: Event, result: TaskResult) -> Result<(), Error> {
        let s = self.ev_mut(ev)?;
        if s.state != EventState::Running {
            return Err(Error::BadEventState {
                ev,
                state: s.state,
                what: "completing",
            });
        }
        let r = self.run_event_cbs(ev, result);
        let s = self.ev_mut(ev)?;
        // first failure wins: a parent may have one from its children
        if s.children.is_empty() || s.error.is_ok() {
            s.error = r;
        }
        s.state = EventState::Completed;
        s.task = None;
        let Some(p) = s.parent else {
            self.enqueue_completed(ev);
            return Ok(());
        };
        let ps = self.ev_mut(p)?;
        ps.nchild_running = ps.nchild_running.saturating_sub(1);
        ps.nchild_comp += 1;
        if ps.error.is_ok() {
            ps.error = r;
        }
        let all_done = ps.nchild_comp as usize >= ps.children.len();
        if all_done && ps.barrier && ps.state == EventState::Running {
            let pr = ps.error;
            let pr = self.run_event_cbs(p, pr);
            let ps = self.ev_mut(p)?;
            ps.error = pr;
            ps.state = EventState::Completed;
            self.enqueue_completed(p);
        }
        Ok(())
    }

    fn run_event_cbs(&mut self, ev: Event, mut r: TaskResult) -> TaskResult {
        let cbs = match self.ev_mut(ev) {
            Ok(s) => std::mem::take(&mut s.comp_cbs),
            Err(_) => return r,
        };
        for cb in cbs {
            r = cb(&mut self.sched, ev, r);
        }
        r
    }

    fn enqueue_completed(&mut self, ev: Event) {
        self.n_running = self.n_running.saturating_sub(1);
        if let Ok(s) = self.ev_mut(ev) {
            if !s.queued {
                s.queued = true;
                self.n_comp += 1;
                self.comp.push_back(ev);
                stats::add(&self.cell.completed, 1);
            }
        }
        self.publish();
    }

    /// Tries to abort the event's operation (`daos_event_abort`): the task
    /// carrying it (if launched through [`EventQueue::launch_task`]) is
    /// cancelled, or else the event completes with [`TaskError::Cancelled`];
    /// a parent aborts its running children.
    pub fn abort(&mut self, ev: Event) -> Result<(), Error> {
        let s = self.ev(ev)?;
        if s.state != EventState::Running {
            return Err(Error::BadEventState {
                ev,
                state: s.state,
                what: "aborting",
            });
        }
        let children = s.children.clone();
        let task = s.task;
        for c in children {
            if self.ev(c)?.state == EventState::Running {
                self.abort(c)?;
            }
        }
        if let Some(t) = task {
            if self.sched.abort(t).is_ok() {
                self.drain_mailbox();
                return Ok(());
            }
        }
        if self.ev(ev)?.state == EventState::Running {
            let barrier_waiting = self.ev(ev)?.barrier;
            if !barrier_waiting {
                self.complete_event(ev, Err(TaskError::Cancelled))?;
            }
        }
        Ok(())
    }

    // ---- tasks carrying events --------------------------------------------------

    /// Launches `ev` and ties it to `task`: when the task completes, the event
    /// completes with its result. Schedules the task if it was not yet.
    pub fn launch_task(&mut self, ev: Event, task: TaskId) -> Result<(), Error> {
        let st = self.sched.state(task)?;
        if matches!(st, TaskState::Completing | TaskState::Completed) {
            return Err(Error::AlreadyCompleted(task));
        }
        self.launch(ev)?;
        self.ev_mut(ev)?.task = Some(task);
        let c = self.completer();
        let r = self.sched.register_comp_cb(task, move |_, _, r| {
            let _ = c.complete(ev, r);
            r
        });
        let r = r.and_then(|()| {
            if st == TaskState::Init {
                self.sched.schedule(task)
            } else {
                Ok(())
            }
        });
        if let Err(e) = r {
            // undo: the event completes with the failure's cancellation
            let _ = self.sched.abort(task);
            self.drain_mailbox();
            if self.ev(ev).is_ok_and(|s| s.state == EventState::Running) {
                let _ = self.complete_event(ev, Err(TaskError::Cancelled));
            }
            return Err(e);
        }
        Ok(())
    }

    /// The EQ's private event for blocking calls (DAOS's thread-private event).
    pub(crate) fn private_event(&mut self) -> Result<Event, Error> {
        self.alive()?;
        if let Some(ev) = self.private_ev {
            if self.ev(ev).is_ok() {
                return Ok(ev);
            }
        }
        let ev = self.event_init(None)?;
        self.private_ev = Some(ev);
        Ok(ev)
    }

    // ---- progress, poll, test -----------------------------------------------------

    fn drain_mailbox(&mut self) -> usize {
        let mut batch = std::mem::take(&mut self.scratch);
        std::mem::swap(&mut batch, &mut *self.mailbox.borrow_mut());
        let n = batch.len();
        for (ev, r) in batch.drain(..) {
            if let Err(e) = self.complete_event(ev, r) {
                tracing::debug!(%ev, error = %e, "dropped completion for event");
            }
        }
        self.scratch = batch;
        n
    }

    /// One round: progress the scheduler, the poller, and apply queued
    /// completions. Returns how much happened.
    pub fn progress(&mut self) -> usize {
        self.progress_round(Duration::ZERO)
    }

    fn progress_round(&mut self, poller_timeout: Duration) -> usize {
        if self.destroyed {
            return 0;
        }
        let mut n = self.sched.progress();
        n += self.drain_mailbox();
        if let Some(p) = self.poller.as_mut() {
            n += p.poll(&mut self.sched, poller_timeout);
            n += self.sched.progress();
            n += self.drain_mailbox();
        }
        n
    }

    fn pollable(&self, ev: Event) -> bool {
        self.ev(ev)
            .is_ok_and(|s| s.queued && s.state == EventState::Completed && s.nchild_running == 0)
    }

    fn collect(&mut self, max: usize, out: &mut Vec<(Event, TaskResult)>) -> usize {
        let mut got = 0;
        let mut i = 0;
        while got < max {
            let Some(&ev) = self.comp.get(i) else { break };
            let stale = self.ev(ev).map_or(true, |s| !s.queued);
            if stale {
                self.comp.remove(i);
                continue;
            }
            if Some(ev) == self.private_ev || !self.pollable(ev) {
                i += 1;
                continue;
            }
            self.comp.remove(i);
            if let Ok(s) = self.ev_mut(ev) {
                s.queued = false;
                s.state = EventState::Ready;
                out.push((ev, s.error));
            }
            self.n_comp = self.n_comp.saturating_sub(1);
            got += 1;
        }
        if got > 0 {
            stats::add(&self.cell.polled, got as u64);
            self.publish();
        }
        got
    }

    /// Waits for completed events and moves up to `max` of them (with their
    /// results) into `out` (`daos_eq_poll`); they become `Ready`. Each round
    /// progresses the scheduler and the poller. Returns at once with 0 when
    /// nothing is in flight; `Wait::Forever` fails with [`Error::Stalled`] when
    /// events are in flight but no poller, ready task or sleeping task could
    /// ever complete them.
    pub fn poll(
        &mut self,
        wait: Wait,
        max: usize,
        out: &mut Vec<(Event, TaskResult)>,
    ) -> Result<usize, Error> {
        self.alive()?;
        stats::add(&self.cell.polls, 1);
        self.wait_for(wait, |eq| {
            let n = eq.collect(max, out);
            if n > 0 {
                return Some(n);
            }
            let private_busy = eq
                .private_ev
                .and_then(|p| eq.ev(p).ok())
                .is_some_and(|s| s.state == EventState::Running);
            (eq.n_running == usize::from(private_busy) && eq.n_comp == 0).then_some(0)
        })
        .map(|n| n.unwrap_or(0))
    }

    /// Tests one event (`daos_event_test`): `Some(result)` once it completed
    /// (it is then taken off the EQ and becomes `Ready`), `None` if still in
    /// flight when `wait` ran out. A never-launched event reports its last
    /// result at once. Child events cannot be tested.
    pub fn test(&mut self, ev: Event, wait: Wait) -> Result<Option<TaskResult>, Error> {
        let s = self.ev(ev)?;
        if s.parent.is_some() {
            return Err(Error::ChildEvent(ev));
        }
        if s.state == EventState::Ready {
            return Ok(Some(s.error));
        }
        self.wait_for(wait, |eq| {
            if !eq.pollable(ev) {
                return None;
            }
            let s = eq.ev_mut(ev).ok()?;
            s.queued = false;
            s.state = EventState::Ready;
            let r = s.error;
            eq.n_comp = eq.n_comp.saturating_sub(1);
            eq.comp.retain(|&e| e != ev);
            stats::add(&eq.cell.polled, 1);
            eq.publish();
            Some(r)
        })
    }

    /// The wait loop shared by `poll` and `test`: progress, check `done`,
    /// then idle according to `wait` (let the poller block, or sleep on the
    /// clock until the next delayed task), until `done` says yes.
    fn wait_for<T>(
        &mut self,
        wait: Wait,
        mut done: impl FnMut(&mut Self) -> Option<T>,
    ) -> Result<Option<T>, Error> {
        let deadline: Option<Time> = match wait {
            Wait::Timeout(d) => Some(self.sched.now() + d),
            _ => None,
        };
        let mut poller_timeout = Duration::ZERO;
        loop {
            let progressed = self.progress_round(poller_timeout);
            if let Some(v) = done(self) {
                return Ok(Some(v));
            }
            if wait == Wait::NoWait {
                return Ok(None);
            }
            let now = self.sched.now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            if progressed > 0 || self.sched.has_ready() {
                poller_timeout = Duration::ZERO;
                continue;
            }
            // idle: nothing happened this round
            let wake = self.sched.next_wakeup();
            let until = match (wake, deadline) {
                (Some(w), Some(d)) => Some(w.min(d)),
                (w, d) => w.or(d),
            };
            if self.poller.is_some() {
                poller_timeout = until
                    .map_or(MAX_POLLER_BLOCK, |u| u.since(now))
                    .min(MAX_POLLER_BLOCK);
                continue;
            }
            match until {
                Some(u) => self.sched_sleep_until(u),
                None => {
                    return Err(Error::Stalled {
                        inflight: self.n_running + self.sched.inflight(),
                    })
                }
            }
        }
    }

    fn sched_sleep_until(&mut self, t: Time) {
        self.sched.sleep_until(t);
    }

    // ---- destroy ------------------------------------------------------------------

    /// Destroys the EQ (`daos_eq_destroy`). Without `force`, refused with
    /// [`Error::EqBusy`] while events are running or completed but not polled.
    /// With `force`, in-flight operations are cancelled (their tasks complete
    /// with [`TaskError::Cancelled`], running callbacks) and all events are
    /// dropped. Afterwards every call on the EQ fails with
    /// [`Error::EqDestroyed`].
    pub fn destroy(&mut self, force: bool) -> Result<(), Error> {
        self.alive()?;
        let private_busy = self
            .private_ev
            .and_then(|p| self.ev(p).ok())
            .is_some_and(|s| s.state != EventState::Ready);
        let running = self.n_running.saturating_sub(usize::from(private_busy));
        if !force && (running > 0 || self.n_comp > 0) {
            return Err(Error::EqBusy {
                running,
                completed: self.n_comp,
            });
        }
        self.sched.cancel_all();
        self.drain_mailbox();
        // whatever is still running has no task behind it: it is aborted
        let running: Vec<Event> = self
            .events
            .iter()
            .filter(|(_, s)| s.state == EventState::Running && s.parent.is_none())
            .map(|((idx, gen), _)| Event {
                eq: self.id,
                idx,
                gen,
            })
            .collect();
        for ev in running {
            let _ = self.abort(ev);
        }
        self.events.clear();
        self.comp.clear();
        self.n_running = 0;
        self.n_comp = 0;
        self.publish();
        self.private_ev = None;
        self.destroyed = true;
        Ok(())
    }
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        if !self.destroyed {
            let _ = self.destroy(true);
        }
        stats::retire_eq(&self.cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn eq() -> (EventQueue, ManualClock) {
        let c = ManualClock::new();
        (
            EventQueue::new(Scheduler::with_clock(Box::new(c.clone()))),
            c,
        )
    }

    #[test]
    fn launch_complete_poll() {
        let (mut q, _) = eq();
        let a = q.event_init(None).unwrap();
        let b = q.event_init(None).unwrap();
        q.launch(a).unwrap();
        q.launch(b).unwrap();
        assert_eq!(q.running(), 2);
        let mut out = Vec::new();
        assert_eq!(q.poll(Wait::NoWait, 8, &mut out), Ok(0));
        q.complete_event(b, Err(TaskError::Code(2))).unwrap();
        q.completer().complete(a, Ok(())).unwrap();
        assert_eq!(q.poll(Wait::Forever, 1, &mut out), Ok(1));
        assert_eq!(out, [(b, Err(TaskError::Code(2)))]);
        assert_eq!(q.poll(Wait::Forever, 8, &mut out), Ok(1));
        assert_eq!(out[1], (a, Ok(())));
        assert_eq!(q.event_state(a), Ok(EventState::Ready));
        // nothing in flight: returns at once even with Forever
        assert_eq!(q.poll(Wait::Forever, 8, &mut out), Ok(0));
        assert!(matches!(
            q.complete_event(a, Ok(())),
            Err(Error::BadEventState { .. })
        ));
        q.event_fini(a).unwrap();
        q.event_fini(b).unwrap();
        assert_eq!(q.live_events(), 0);
    }

    #[test]
    fn poll_timeout_and_stall() {
        let (mut q, clock) = eq();
        let a = q.event_init(None).unwrap();
        q.launch(a).unwrap();
        let mut out = Vec::new();
        let t0 = clock.now();
        assert_eq!(
            q.poll(Wait::Timeout(Duration::from_millis(3)), 4, &mut out),
            Ok(0)
        );
        assert_eq!(clock.now().since(t0), Duration::from_millis(3));
        assert_eq!(
            q.poll(Wait::Forever, 4, &mut out),
            Err(Error::Stalled { inflight: 1 })
        );
        // a delayed task completing the event: Forever sleeps until it runs
        let c = q.completer();
        let s = q.sched_mut();
        let t = s.create(move |s, id| {
            c.complete(a, Ok(())).unwrap();
            s.complete(id, Ok(())).unwrap();
        });
        s.schedule_after(t, Duration::from_millis(5)).unwrap();
        assert_eq!(q.poll(Wait::Forever, 4, &mut out), Ok(1));
        assert_eq!(clock.now().since(t0), Duration::from_millis(8));
    }

    #[test]
    fn parent_completes_after_children_and_barrier() {
        let (mut q, _) = eq();
        let p = q.event_init(None).unwrap();
        let c1 = q.event_init(Some(p)).unwrap();
        let c2 = q.event_init(Some(p)).unwrap();
        assert_eq!(q.event_init(Some(c1)), Err(Error::NestedParent(c1)));
        assert_eq!(q.launch(p), Err(Error::ChildrenNotLaunched(p)));
        q.launch(c1).unwrap();
        q.launch(c2).unwrap();
        q.parent_barrier(p).unwrap();
        assert_eq!(q.test(c1, Wait::NoWait), Err(Error::ChildEvent(c1)));
        q.complete_event(c1, Ok(())).unwrap();
        assert_eq!(q.test(p, Wait::NoWait), Ok(None));
        q.complete_event(c2, Err(TaskError::Code(9))).unwrap();
        assert_eq!(q.test(p, Wait::NoWait), Ok(Some(Err(TaskError::Code(9)))));
        let mut out = Vec::new();
        assert_eq!(q.poll(Wait::NoWait, 8, &mut out), Ok(0));
        // a parent with its own operation is not polled out before its children
        let p2 = q.event_init(None).unwrap();
        let k = q.event_init(Some(p2)).unwrap();
        q.launch(k).unwrap();
        q.launch(p2).unwrap();
        q.complete_event(p2, Ok(())).unwrap();
        assert_eq!(q.poll(Wait::NoWait, 8, &mut out), Ok(0));
        q.complete_event(k, Ok(())).unwrap();
        assert_eq!(q.poll(Wait::NoWait, 8, &mut out), Ok(1));
        assert_eq!(out, [(p2, Ok(()))]);
        let lone = q.event_init(None).unwrap();
        assert_eq!(q.parent_barrier(lone), Err(Error::NoChildren(lone)));
        q.event_fini(p).unwrap();
        q.event_fini(p2).unwrap();
        q.event_fini(lone).unwrap();
        assert_eq!(q.live_events(), 0);
    }

    #[test]
    fn test_waits_for_a_delayed_completion() {
        let (mut q, clock) = eq();
        let a = q.event_init(None).unwrap();
        let t = q
            .sched_mut()
            .create(|s, id| s.complete(id, Ok(())).unwrap());
        q.sched_mut()
            .schedule_after(t, Duration::from_millis(4))
            .unwrap();
        q.launch_task(a, t).unwrap();
        let t0 = clock.now();
        assert_eq!(q.test(a, Wait::Timeout(Duration::from_millis(1))), Ok(None));
        assert_eq!(clock.now().since(t0), Duration::from_millis(1));
        assert_eq!(q.test(a, Wait::Forever), Ok(Some(Ok(()))));
        assert_eq!(clock.now().since(t0), Duration::from_millis(4));
        assert_eq!(q.event_state(a), Ok(EventState::Ready));
        q.destroy(false).unwrap();
    }

    #[test]
    fn event_callbacks_change_result() {
        let (mut q, _) = eq();
        let a = q.event_init(None).unwrap();
        q.register_event_cb(a, |_, _, r| {
            assert_eq!(r, Err(TaskError::Code(1)));
            Ok(())
        })
        .unwrap();
        q.register_event_cb(a, |_, _, r| r.and(Err(TaskError::TimedOut)))
            .unwrap();
        q.launch(a).unwrap();
        q.complete_event(a, Err(TaskError::Code(1))).unwrap();
        assert_eq!(q.test(a, Wait::NoWait), Ok(Some(Err(TaskError::TimedOut))));
    }

    #[test]
    fn destroy_refuses_busy_unless_forced() {
        let (mut q, _) = eq();
        let a = q.event_init(None).unwrap();
        let t = q.sched_mut().create_external();
        q.launch_task(a, t).unwrap();
        q.progress();
        assert_eq!(
            q.destroy(false),
            Err(Error::EqBusy {
                running: 1,
                completed: 0
            })
        );
        let got = Rc::new(RefCell::new(None));
        let g = got.clone();
        q.register_event_cb(a, move |_, _, r| {
            *g.borrow_mut() = Some(r);
            r
        })
        .unwrap();
        q.destroy(true).unwrap();
        assert_eq!(*got.borrow(), Some(Err(TaskError::Cancelled)));
        assert_eq!(q.sched().live(), 0);
        assert_eq!(q.event_init(None), Err(Error::EqDestroyed));
    }

    #[test]
    fn event_misuse_errors() {
        let (mut q, _) = eq();
        let (mut other, _) = eq();
        let a = q.event_init(None).unwrap();
        let x = other.event_init(None).unwrap();
        assert_eq!(q.launch(x), Err(Error::WrongEq(x)));
        assert_eq!(q.completer().complete(x, Ok(())), Err(Error::WrongEq(x)));
        q.launch(a).unwrap();
        assert!(matches!(q.launch(a), Err(Error::BadEventState { .. })));
        assert!(matches!(q.event_fini(a), Err(Error::BadEventState { .. })));
        assert!(matches!(
            q.event_init(Some(a)),
            Err(Error::BadEventState { .. })
        ));
        q.complete_event(a, Ok(())).unwrap();
        assert!(matches!(q.abort(a), Err(Error::BadEventState { .. })));
        // finalising a completed, unpolled event takes it off the EQ
        assert_eq!(q.completed(), 1);
        q.event_fini(a).unwrap();
        assert_eq!(q.completed(), 0);
        assert_eq!(q.event_state(a), Err(Error::InvalidEvent(a)));
        // a child cannot be finalised while its parent runs, nor the parent while a child runs
        let p = q.event_init(None).unwrap();
        let c = q.event_init(Some(p)).unwrap();
        q.launch(c).unwrap();
        assert!(matches!(q.event_fini(p), Err(Error::BadEventState { .. })));
        q.launch(p).unwrap();
        q.complete_event(c, Ok(())).unwrap();
        assert!(matches!(q.event_fini(c), Err(Error::BadEventState { .. })));
        // aborting a parent aborts its running children; a barrier then completes
        let b = q.event_init(None).unwrap();
        let k1 = q.event_init(Some(b)).unwrap();
        let k2 = q.event_init(Some(b)).unwrap();
        q.launch(k1).unwrap();
        q.launch(k2).unwrap();
        q.parent_barrier(b).unwrap();
        q.abort(b).unwrap();
        assert_eq!(q.test(b, Wait::NoWait), Ok(Some(Err(TaskError::Cancelled))));
        other.destroy(false).unwrap();
        assert_eq!(other.launch(x), Err(Error::EqDestroyed));
    }

    #[test]
    fn a_closure_poller_completes_external_tasks() {
        let clock = ManualClock::new();
        let pending: Rc<RefCell<Vec<TaskId>>> = Default::default();
        let p = pending.clone();
        let polls = Rc::new(std::cell::Cell::new(0u32));
        let n = polls.clone();
        // the "transport" answers on its third poll
        let poller = move |s: &mut Scheduler, _timeout: Duration| {
            n.set(n.get() + 1);
            if n.get() < 3 {
                return 0;
            }
            let done: Vec<TaskId> = p.borrow_mut().drain(..).collect();
            for t in &done {
                s.complete(*t, Ok(())).unwrap();
            }
            done.len()
        };
        let mut q = EventQueue::with_poller(
            Scheduler::with_clock(Box::new(clock.clone())),
            Box::new(poller),
        );
        let ev = q.event_init(None).unwrap();
        let t = q.sched_mut().create_external();
        pending.borrow_mut().push(t);
        q.launch_task(ev, t).unwrap();
        let mut out = Vec::new();
        assert_eq!(q.poll(Wait::Forever, 4, &mut out), Ok(1));
        assert_eq!(out, [(ev, Ok(()))]);
        assert_eq!(polls.get(), 3);
    }

    #[test]
    fn abort_cancels_the_task() {
        let (mut q, _) = eq();
        let a = q.event_init(None).unwrap();
        let t = q.sched_mut().create_external();
        q.launch_task(a, t).unwrap();
        q.progress();
        q.abort(a).unwrap();
        assert_eq!(q.test(a, Wait::NoWait), Ok(Some(Err(TaskError::Cancelled))));
        assert_eq!(q.sched().live(), 0);
        q.destroy(false).unwrap();
    }
}
