//! Property test: random DAGs of tasks with random delays, inline or later
//! ("network") completion and random failures complete in a valid topological
//! order, with dependency failures propagated, and leave no live task.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use tse::{Error, ManualClock, Scheduler, TaskError, TaskId, TaskResult, Time};

#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Completed later by the driver instead of inside the body.
    external: bool,
    fail: Option<i32>,
    delay_us: u64,
}

#[derive(Debug, Default, Clone)]
struct Rec {
    started: Option<(u64, Time)>,
    completed: Vec<(u64, TaskResult)>,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        any::<bool>(),
        prop::option::weighted(0.2, 1i32..100),
        prop_oneof![Just(0u64), 1u64..5000],
    )
        .prop_map(|(external, fail, delay_us)| Plan {
            external,
            fail,
            delay_us,
        })
}

/// Plans, edges (t, d), scheduling order, one possibly backward edge.
type Case = (Vec<Plan>, Vec<(usize, usize)>, Vec<usize>, (usize, usize));

fn dag() -> impl Strategy<Value = Case> {
    (1usize..32).prop_flat_map(|n| {
        let plans = prop::collection::vec(plan(), n);
        // edges (t, d) with d < t: t depends on d
        let edges = prop::collection::vec((0..n, 0..n), 0..n * 3).prop_map(|v| {
            v.into_iter()
                .filter(|(a, b)| a != b)
                .map(|(a, b)| (a.max(b), a.min(b)))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
        });
        let order = Just((0..n).collect::<Vec<_>>()).prop_shuffle();
        let back = (0..n, 0..n);
        (plans, edges, order, back)
    })
}

/// Whether `from` transitively depends on `to` in `edges` ((t, d): t depends on d).
fn depends(edges: &[(usize, usize)], from: usize, to: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if x == to {
            return true;
        }
        if seen.insert(x) {
            stack.extend(edges.iter().filter(|e| e.0 == x).map(|e| e.1));
        }
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_dags_complete_in_topological_order((plans, mut edges, order, back) in dag()) {
        let n = plans.len();
        let clock = ManualClock::new();
        let mut s = Scheduler::with_clock(Box::new(clock.clone()));
        let recs: Rc<RefCell<Vec<Rec>>> = Rc::new(RefCell::new(vec![Rec::default(); n]));
        let seq = Rc::new(RefCell::new(0u64));
        let pending: Rc<RefCell<Vec<TaskId>>> = Default::default();
        let mut ids = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            let (r1, q1, pending) = (recs.clone(), seq.clone(), pending.clone());
            let id = s.create_with_priv(move |s, id| {
                let (recs, seq) = (&r1, &q1);
                let plan = *s.priv_ref::<Plan>(id).unwrap();
                let mut q = seq.borrow_mut();
                *q += 1;
                recs.borrow_mut()[i].started = Some((*q, s.now()));
                drop(q);
                if plan.external {
                    pending.borrow_mut().push(id);
                } else {
                    s.complete(id, plan.fail.map_or(Ok(()), |c| Err(TaskError::Code(c)))).unwrap();
                }
            }, *p);
            let (r2, q2) = (recs.clone(), seq.clone());
            let (recs, seq) = (r2, q2);
            s.register_comp_cb(id, move |_, _, r| {
                let mut q = seq.borrow_mut();
                *q += 1;
                recs.borrow_mut()[i].completed.push((*q, r));
                r
            }).unwrap();
            ids.push(id);
        }
        for &(t, d) in &edges {
            s.register_deps(ids[t], &[ids[d]]).unwrap();
        }
        // a possibly backward edge: refused exactly when it would close a cycle
        let (a, b) = back;
        let r = s.register_deps(ids[a], &[ids[b]]);
        if a == b || depends(&edges, b, a) {
            prop_assert_eq!(r, Err(Error::DependencyCycle { task: ids[a], dep: ids[b] }));
        } else {
            prop_assert_eq!(r, Ok(()));
            edges.push((a, b));
        }
        let t0 = clock.now();
        for &i in &order {
            let d = plans[i].delay_us;
            if d == 0 {
                s.schedule(ids[i]).unwrap();
            } else {
                s.schedule_after(ids[i], Duration::from_micros(d)).unwrap();
            }
        }
        // drive: progress, then let the "network" complete what the bodies sent
        for _ in 0..10 * n + 10 {
            s.progress();
            let ext: Vec<TaskId> = pending.borrow_mut().drain(..).rev().collect();
            for id in &ext {
                let plan = *s.priv_ref::<Plan>(*id).unwrap();
                s.complete(*id, plan.fail.map_or(Ok(()), |c| Err(TaskError::Code(c)))).unwrap();
            }
            if ext.is_empty() && !s.has_ready() {
                match s.next_wakeup() {
                    Some(w) => clock.set(w),
                    None => break,
                }
            }
        }
        prop_assert!(s.check_complete());
        prop_assert_eq!(s.live(), 0);
        let recs = recs.borrow();
        for t in 0..n {
            let r = &recs[t];
            prop_assert_eq!(r.completed.len(), 1, "task {} completed {:?}", t, r.completed);
            let (done, result) = r.completed[0];
            let deps: Vec<usize> = edges.iter().filter(|e| e.0 == t).map(|e| e.1).collect();
            for &d in &deps {
                let dd = recs[d].completed[0].0;
                prop_assert!(dd < done, "task {} completed before its dependency {}", t, d);
                if let Some((st, _)) = r.started {
                    prop_assert!(dd < st, "task {} started before its dependency {}", t, d);
                }
            }
            let first_failed = deps
                .iter()
                .map(|&d| recs[d].completed[0])
                .filter(|c| c.1.is_err())
                .min_by_key(|c| c.0);
            match first_failed {
                Some((_, e)) => {
                    prop_assert!(r.started.is_none(), "task {} ran despite a failed dependency", t);
                    prop_assert_eq!(result, e);
                }
                None => {
                    let (_, at) = r.started.expect("ran");
                    prop_assert!(at.since(t0) >= Duration::from_micros(plans[t].delay_us));
                    prop_assert_eq!(result, plans[t].fail.map_or(Ok(()), |c| Err(TaskError::Code(c))));
                }
            }
        }
    }
}
