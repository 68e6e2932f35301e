//! `Scheduler::stack_len` counts the task's stack (DAOS `tse_task_stack_push_data` /
//! `pop_data`), and the scheduler's `Debug` text names its counters (written for the
//! mutants cargo-mutants found unchecked in sched.rs, docs/mutants.md).

use tse::Scheduler;

#[test]
fn stack_len_follows_pushes_and_pops() {
    let mut s = Scheduler::new();
    let id = s.create(|_, _| {});
    assert_eq!(s.stack_len(id).unwrap(), 0);
    s.stack_push(id, 7u32).unwrap();
    s.stack_push(id, "two").unwrap();
    assert_eq!(s.stack_len(id).unwrap(), 2);
    assert_eq!(s.stack_pop::<&str>(id).unwrap(), "two");
    assert_eq!(s.stack_len(id).unwrap(), 1);
    // a pop with the wrong type leaves the value on the stack
    assert!(s.stack_pop::<String>(id).is_err());
    assert_eq!(s.stack_len(id).unwrap(), 1);
    assert_eq!(s.stack_pop::<u32>(id).unwrap(), 7);
    assert_eq!(s.stack_len(id).unwrap(), 0);
}

#[test]
fn debug_names_the_counters() {
    let mut s = Scheduler::new();
    let _a = s.create(|_, _| {});
    let _b = s.create(|_, _| {});
    let d = format!("{s:?}");
    assert!(d.starts_with("Scheduler {"), "{d}");
    assert!(d.contains("live: 2"), "{d}");
    for f in ["id:", "inflight:", "ready:", "sleeping:", "result:"] {
        assert!(d.contains(f), "{f} in {d}");
    }
}
