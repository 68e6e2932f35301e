//! DAOS's NULL-event convention as one helper, [`call`], for every
//! asynchronous API of the project.
//!
//! An asynchronous operation is written once, as "create the task that does
//! it". [`call`] then ties the task to an event and:
//! - with an event (`Some(&ev)`): launches it and returns as soon as the task
//!   is scheduled; the operation's result lands in the event (poll or test
//!   the EQ for it). `Err` means the call could not even be made.
//! - without one (`None`): uses the EQ's private event, launches it the same
//!   way, then waits on it (progressing the scheduler and the transport
//!   poller) and returns the operation's result.
//!
//! Both paths run the same code; only the final wait differs.

use crate::eq::{Event, EventQueue, EventState, Wait};
use crate::error::{CallError, Error};
use crate::sched::{Scheduler, TaskId};

/// Runs an asynchronous operation under the NULL-event convention (see the
/// module doc). `op` creates the operation's task on the EQ's scheduler (not
/// completed; usually not yet scheduled) and returns it; `call` schedules it.
///
/// ```
/// use tse::{call, EventQueue, Scheduler, Wait, TaskError};
/// let mut eq = EventQueue::new(Scheduler::new());
/// // blocking: no event
/// let r = call(&mut eq, None, |s| Ok(s.create(|s, id| s.complete(id, Err(TaskError::Code(-2))).unwrap())));
/// assert_eq!(r, Err(tse::CallError::Op(TaskError::Code(-2))));
/// // non-blocking: the result lands in the event
/// let ev = eq.event_init(None).unwrap();
/// call(&mut eq, Some(&ev), |s| Ok(s.create(|s, id| s.complete(id, Ok(())).unwrap()))).unwrap();
/// assert_eq!(eq.test(ev, Wait::Forever), Ok(Some(Ok(()))));
/// ```
pub fn call(
    eq: &mut EventQueue,
    ev: Option<&Event>,
    op: impl FnOnce(&mut Scheduler) -> Result<TaskId, Error>,
) -> Result<(), CallError> {
    let (ev, blocking) = match ev {
        Some(e) => (*e, false),
        None => (eq.private_event()?, true),
    };
    let state = eq.event_state(ev)?;
    if state != EventState::Ready {
        return Err(Error::BadEventState {
            ev,
            state,
            what: "starting an operation on",
        }
        .into());
    }
    let task = op(eq.sched_mut())?;
    if let Err(e) = eq.launch_task(ev, task) {
        let _ = eq.sched_mut().abort(task);
        return Err(e.into());
    }
    if !blocking {
        return Ok(());
    }
    match eq.test(ev, Wait::Forever) {
        Ok(Some(r)) => r.map_err(CallError::Op),
        Ok(None) => Err(Error::Stalled { inflight: 1 }.into()),
        Err(e) => {
            // nothing can complete the operation: abort it so the private
            // event is reusable, and report why
            let _ = eq.abort(ev);
            let _ = eq.test(ev, Wait::NoWait);
            Err(e.into())
        }
    }
}
