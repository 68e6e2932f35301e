//! Property test: random sequences of scheduler calls, valid or not, on random
//! handles. Nothing panics, misuse is reported as an error, and the
//! scheduler's counters agree with the tasks it holds: `live()` is the number
//! of handles that still name a task, `inflight()` the number of those that
//! are waiting, running or completing. Cancelling everything leaves no task.

use std::time::Duration;

use proptest::prelude::*;
use tse::{ManualClock, Scheduler, TaskError, TaskId, TaskState};

#[derive(Debug, Clone)]
enum Op {
    CreateRun(bool),
    CreateExternal,
    CreateJoin,
    Schedule(usize, u8),
    Dep(usize, usize),
    Complete(usize, bool),
    Abort(usize),
    Reinit(usize, u8),
    Hold(usize),
    Release(usize),
    PrepFail(usize),
    CompReinitOnce(usize),
    Progress,
    Advance(u8),
    CancelAll,
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..24;
    prop_oneof![
        3 => any::<bool>().prop_map(Op::CreateRun),
        2 => Just(Op::CreateExternal),
        1 => Just(Op::CreateJoin),
        4 => (i.clone(), 0u8..3).prop_map(|(a, d)| Op::Schedule(a, d)),
        4 => (i.clone(), i.clone()).prop_map(|(a, b)| Op::Dep(a, b)),
        3 => (i.clone(), any::<bool>()).prop_map(|(a, ok)| Op::Complete(a, ok)),
        1 => i.clone().prop_map(Op::Abort),
        2 => (i.clone(), 0u8..3).prop_map(|(a, d)| Op::Reinit(a, d)),
        1 => i.clone().prop_map(Op::Hold),
        1 => i.clone().prop_map(Op::Release),
        1 => i.clone().prop_map(Op::PrepFail),
        1 => i.clone().prop_map(Op::CompReinitOnce),
        3 => Just(Op::Progress),
        2 => (0u8..4).prop_map(Op::Advance),
        1 => Just(Op::CancelAll),
    ]
}

fn check(s: &Scheduler, ids: &[TaskId]) -> Result<(), TestCaseError> {
    let mut live = 0;
    let mut inflight = 0;
    for &id in ids {
        if let Ok(st) = s.state(id) {
            live += 1;
            if matches!(
                st,
                TaskState::Waiting | TaskState::Running | TaskState::Completing
            ) {
                inflight += 1;
            }
        }
    }
    prop_assert_eq!(s.live(), live);
    prop_assert_eq!(s.inflight(), inflight);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_calls_keep_counters_consistent(ops in prop::collection::vec(op(), 1..120)) {
        let clock = ManualClock::new();
        let mut s = Scheduler::with_clock(Box::new(clock.clone()));
        let mut ids: Vec<TaskId> = Vec::new();
        let pick = |ids: &Vec<TaskId>, i: usize| ids.get(i % ids.len().max(1)).copied();
        for op in ops {
            match op {
                Op::CreateRun(ok) => ids.push(s.create(move |s, id| {
                    let r = if ok { Ok(()) } else { Err(TaskError::Code(1)) };
                    let _ = s.complete(id, r);
                })),
                Op::CreateExternal => ids.push(s.create_external()),
                Op::CreateJoin => ids.push(s.create_join()),
                Op::Schedule(a, d) => if let Some(t) = pick(&ids, a) {
                    let _ = s.schedule_after(t, Duration::from_millis(d as u64));
                },
                Op::Dep(a, b) => if let (Some(t), Some(d)) = (pick(&ids, a), pick(&ids, b)) {
                    let _ = s.register_deps(t, &[d]);
                },
                Op::Complete(a, ok) => if let Some(t) = pick(&ids, a) {
                    let _ = s.complete(t, if ok { Ok(()) } else { Err(TaskError::TimedOut) });
                },
                Op::Abort(a) => if let Some(t) = pick(&ids, a) { let _ = s.abort(t); },
                Op::Reinit(a, d) => if let Some(t) = pick(&ids, a) {
                    let _ = s.reinit_after(t, Duration::from_millis(d as u64));
                },
                Op::Hold(a) => if let Some(t) = pick(&ids, a) { let _ = s.hold(t); },
                Op::Release(a) => if let Some(t) = pick(&ids, a) { let _ = s.release(t); },
                Op::PrepFail(a) => if let Some(t) = pick(&ids, a) {
                    let _ = s.register_prep_cb(t, |_, _| Err(TaskError::Code(2)));
                },
                Op::CompReinitOnce(a) => if let Some(t) = pick(&ids, a) {
                    let _ = s.register_comp_cb(t, |s, id, r| {
                        let _ = s.reinit_after(id, Duration::from_millis(1));
                        r
                    });
                },
                Op::Progress => { s.progress(); },
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms as u64)),
                Op::CancelAll => { s.cancel_all(); },
            }
            check(&s, &ids)?;
        }
        // held tasks stay after cancelling: release them
        s.cancel_all();
        check(&s, &ids)?;
        prop_assert_eq!(s.inflight(), 0);
        for &t in &ids {
            while s.release(t).is_ok() {}
        }
        prop_assert_eq!(s.live(), 0);
    }
}
