//! `EventQueue::progress` returns how much happened in the round (issue 21: a mutant
//! returning a constant went unnoticed in the round-robin sample 1/17 of tse,
//! docs/mutants.md). A caller polling until nothing happens relies on the 0.

use tse::{EventQueue, EventState, Scheduler};

#[test]
fn progress_counts_work_and_is_zero_when_idle() {
    let mut eq = EventQueue::new(Scheduler::new());
    assert_eq!(eq.progress(), 0, "a new queue has nothing to do");
    let ev = eq.event_init(None).unwrap();
    eq.launch(ev).unwrap();
    assert_eq!(
        eq.progress(),
        0,
        "a launched event waits for its completion"
    );
    // a completion from elsewhere (the mailbox) is applied by the next round
    eq.completer().complete(ev, Ok(())).unwrap();
    assert!(eq.progress() >= 1, "the queued completion is work done");
    assert_eq!(eq.event_state(ev).unwrap(), EventState::Completed);
    assert_eq!(eq.progress(), 0, "nothing left");
    // a scheduler task that runs is work too
    let t = eq.sched_mut().create(|s, id| {
        let _ = s.complete(id, Ok(()));
    });
    assert_eq!(eq.progress(), 0, "created, not scheduled");
    eq.sched_mut().schedule(t).unwrap();
    assert!(eq.progress() >= 1, "the scheduled task ran");
    assert_eq!(eq.progress(), 0);
}

/// After a round that made progress, the wait loop polls again at once (timeout 0): it
/// lets the poller block only after a round in which nothing happened.
#[test]
fn wait_does_not_block_the_poller_after_a_round_that_progressed() {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;
    use tse::Wait;
    let mut eq = EventQueue::new(Scheduler::new());
    let ev = eq.event_init(None).unwrap();
    eq.launch(ev).unwrap();
    let c = eq.completer();
    let timeouts: Rc<RefCell<Vec<Duration>>> = Rc::default();
    let seen = timeouts.clone();
    eq.bind_poller(Box::new(move |_: &mut Scheduler, t: Duration| {
        seen.borrow_mut().push(t);
        if seen.borrow().len() == 2 {
            // the second poll finds the operation done
            c.complete(ev, Ok(())).unwrap();
        }
        1 // something happened (a first poll that reaped a partial result)
    }));
    assert_eq!(eq.test(ev, Wait::Forever).unwrap(), Some(Ok(())));
    let t = timeouts.borrow();
    assert_eq!(t.len(), 2, "{t:?}");
    assert_eq!(t[1], Duration::ZERO, "polled again without blocking: {t:?}");
}

/// A completion callback cannot be added to a task that already completed (it would
/// never run): `register_comp_cb` refuses it.
#[test]
fn register_comp_cb_on_a_completed_task_is_refused() {
    let mut s = Scheduler::new();
    let t = s.create(|s, id| {
        let _ = s.complete(id, Ok(()));
    });
    s.hold(t).unwrap(); // keep the completed task (not freed) to ask it again
    s.schedule(t).unwrap();
    while s.progress() > 0 {}
    assert_eq!(s.state(t).unwrap(), tse::TaskState::Completed);
    assert_eq!(
        s.register_comp_cb(t, |_, _, r| r),
        Err(tse::Error::AlreadyCompleted(t))
    );
}
