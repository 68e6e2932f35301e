//! The datapath hit path (EMC and megaflow classifier) does not allocate.

use flow::dp::{hash_key, Datapath, Hit};
use flow::{parse_exact_flow, parse_flows, FlowTable};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

// Counts this thread's allocations only: the datapath runs on the test's thread, and
// libtest's own threads may allocate at any time (a global count made this flaky).
struct Counting;
thread_local! {
    static MINE: Cell<usize> = const { Cell::new(0) };
}

fn allocs() -> usize {
    MINE.with(|c| c.get())
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; counting touches only a thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = MINE.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from System.alloc with layout `l` (the caller's contract).
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn hit_path_does_not_allocate() {
    let table = FlowTable::from_rules(parse_flows(include_str!("data/sample-flows.txt")).unwrap());
    let pkts: Vec<_> = include_str!("data/sample-packets.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| parse_exact_flow(l).unwrap())
        .collect();
    let mut dp = Datapath::new();
    for k in &pkts {
        dp.process(&table, k, 64, 1);
    }
    let before = allocs();
    let mut emc = 0;
    for round in 0..1000u64 {
        for k in &pkts {
            let (_, h) = dp.process(&table, k, 64, round);
            emc += (h == Hit::Emc) as usize;
        }
    }
    assert_eq!(allocs(), before, "EMC path allocated");
    assert!(emc > 0);
    dp.set_emc(false);
    let before = allocs();
    for _ in 0..1000 {
        for k in &pkts {
            assert!(dp.lookup(k, hash_key(k)).is_some());
        }
    }
    assert_eq!(allocs(), before, "megaflow path allocated");
}
