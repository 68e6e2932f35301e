//! The datapath hit path (EMC and megaflow classifier) does not allocate.

use flow::dp::{hash_key, Datapath, Hit};
use flow::{parse_exact_flow, parse_flows, FlowTable};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
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
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut emc = 0;
    for round in 0..1000u64 {
        for k in &pkts {
            let (_, h) = dp.process(&table, k, 64, round);
            emc += (h == Hit::Emc) as usize;
        }
    }
    assert_eq!(ALLOCS.load(Ordering::Relaxed), before, "EMC path allocated");
    assert!(emc > 0);
    dp.set_emc(false);
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        for k in &pkts {
            assert!(dp.lookup(k, hash_key(k)).is_some());
        }
    }
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        before,
        "megaflow path allocated"
    );
}
