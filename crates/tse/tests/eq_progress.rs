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
