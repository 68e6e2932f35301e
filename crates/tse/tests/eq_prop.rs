//! Property test: random sets of events (singles, parents with own operations,
//! barrier parents) completed in random order, interleaved with polls of random
//! sizes. Every top-level event is polled exactly once, never before all its
//! completions (own and children's), with the first failure as its result.

use proptest::prelude::*;
use tse::{Event, EventQueue, ManualClock, Scheduler, TaskError, TaskResult, Wait};

#[derive(Debug, Clone)]
struct Group {
    children: usize,
    barrier: bool,
    /// Complete the children before launching the parent.
    early: bool,
}

type Case = (Vec<Group>, Vec<u32>, Vec<usize>, Vec<usize>);

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(
        (0usize..4, any::<bool>(), any::<bool>()).prop_map(|(children, barrier, early)| Group {
            children,
            barrier: barrier && children > 0,
            early,
        }),
        1..8,
    )
    .prop_flat_map(|groups| {
        let items: usize = groups
            .iter()
            .map(|g| g.children + usize::from(!g.barrier))
            .sum();
        (
            Just(groups),
            // result code per completion (0 = ok)
            prop::collection::vec(prop_oneof![4 => Just(0u32), 1 => 1u32..50], items),
            Just((0..items).collect::<Vec<_>>()).prop_shuffle(),
            // poll sizes interleaved with completions
            prop::collection::vec(1usize..4, items),
        )
    })
}

fn res(code: u32) -> TaskResult {
    if code == 0 {
        Ok(())
    } else {
        Err(TaskError::Code(code as i32))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn events_poll_once_after_all_completions((groups, codes, order, polls) in case()) {
        let mut eq = EventQueue::new(Scheduler::with_clock(Box::new(ManualClock::new())));
        // completion items: (group, Some(child) | None for the parent's own op)
        let mut items: Vec<(usize, Option<Event>)> = Vec::new();
        let mut tops = Vec::new();
        let mut done: Vec<Vec<TaskResult>> = vec![Vec::new(); groups.len()];
        let mut early_done = vec![false; codes.len()];
        for (gi, g) in groups.iter().enumerate() {
            let p = eq.event_init(None).unwrap();
            let kids: Vec<Event> = (0..g.children).map(|_| eq.event_init(Some(p)).unwrap()).collect();
            for &k in &kids {
                eq.launch(k).unwrap();
                items.push((gi, Some(k)));
            }
            if g.early {
                for i in items.len() - kids.len()..items.len() {
                    let r = res(codes[i]);
                    eq.complete_event(items[i].1.unwrap(), r).unwrap();
                    done[gi].push(r);
                    early_done[i] = true;
                }
            }
            if g.barrier {
                eq.parent_barrier(p).unwrap();
            } else {
                eq.launch(p).unwrap();
                items.push((gi, None));
            }
            tops.push(p);
        }
        prop_assert_eq!(items.len(), codes.len());
        // per group: completions so far (in order) and when it was polled
        let mut polled: Vec<Vec<(usize, TaskResult)>> = vec![Vec::new(); groups.len()];
        let mut out = Vec::new();
        let total_for = |g: &Group| g.children + usize::from(!g.barrier);
        for (step, &i) in order.iter().enumerate() {
            if early_done[i] {
                continue;
            }
            let (gi, ev) = items[i];
            let r = res(codes[i]);
            eq.complete_event(ev.unwrap_or(tops[gi]), r).unwrap();
            done[gi].push(r);
            out.clear();
            eq.poll(Wait::NoWait, polls[step], &mut out).unwrap();
            prop_assert!(out.len() <= polls[step]);
            for &(e, r) in &out {
                let gi = tops.iter().position(|&t| t == e).expect("only top-level events are polled");
                polled[gi].push((done[gi].len(), r));
            }
        }
        out.clear();
        while eq.poll(Wait::NoWait, 16, &mut out).unwrap() > 0 {}
        for &(e, r) in &out {
            let gi = tops.iter().position(|&t| t == e).unwrap();
            polled[gi].push((done[gi].len(), r));
        }
        for (gi, g) in groups.iter().enumerate() {
            prop_assert_eq!(polled[gi].len(), 1, "group {} polled {:?}", gi, polled[gi]);
            let (seen, r) = polled[gi][0];
            prop_assert_eq!(seen, total_for(g), "group {} polled early", gi);
            let first_err = done[gi].iter().copied().find(|r| r.is_err()).unwrap_or(Ok(()));
            prop_assert_eq!(r, first_err);
        }
        prop_assert_eq!((eq.running(), eq.completed()), (0, 0));
        for p in tops {
            eq.event_fini(p).unwrap();
        }
        prop_assert_eq!(eq.live_events(), 0);
        eq.destroy(false).unwrap();
    }
}
