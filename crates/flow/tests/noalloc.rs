//! The datapath hit path (EMC, SMC and megaflow classifier) does not allocate.

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
    // past RANK_INTERVAL lookups: the subtable re-sort runs too
    for _ in 0..(flow::dp::RANK_INTERVAL as usize / pkts.len() + 100) {
        for k in &pkts {
            assert!(dp.lookup(k, hash_key(k)).is_some());
        }
    }
    assert_eq!(allocs(), before, "megaflow path allocated");
    dp.set_smc(true); // allocates its table here, once
    let before = allocs();
    for _ in 0..1000 {
        for k in &pkts {
            assert!(dp.lookup(k, hash_key(k)).is_some());
        }
    }
    assert_eq!(allocs(), before, "SMC path allocated");
    assert!(dp.stats.smc_hits > 0);
    // the batch path (groups of LOOKUP_BATCH), SMC and EMC on
    dp.set_emc(true);
    let hashes: Vec<u64> = pkts.iter().map(hash_key).collect();
    let mut out = vec![None; pkts.len()];
    let (s0, before) = (dp.stats, allocs());
    for _ in 0..1000 {
        dp.lookup_batch(&pkts, &hashes, &mut out);
        assert!(out.iter().all(|r| r.is_some()));
    }
    assert_eq!(allocs(), before, "batch lookup path allocated");
    assert!(dp.stats.smc_hits > s0.smc_hits && dp.stats.emc_hits > s0.emc_hits);
}

/// The same for megaflows made by a pipeline: goto_table, resubmit, an `all` group, a
/// select group's two passes (recirc_id + dp_hash in the key) and NORMAL.
#[test]
fn pipeline_hit_path_does_not_allocate() {
    let mut table = FlowTable::from_rules(
        parse_flows(
            "table=0,tcp,actions=set_field:1->reg0,goto_table:1\n\
             table=0,udp,actions=group:1\n\
             table=0,arp,actions=NORMAL\n\
             table=1,reg0=1,actions=resubmit(,2),group:2\n\
             table=2,tcp,tp_dst=80,actions=output:3\n",
        )
        .unwrap(),
    );
    for g in flow::parse_groups(
        "group_id=1,type=all,bucket=output:2,bucket=set_field:02:00:00:00:00:09->eth_dst,output:4\n\
         group_id=2,type=select,bucket=output:2,bucket=output:4\n",
    )
    .unwrap()
    {
        table.add_group(g).unwrap();
    }
    table.ports = Some((1..=4).collect());
    for p in 1..=4 {
        table.bridge.set_port(p, flow::normal::PortVlan::default());
    }
    let mut keys: Vec<_> = [
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=5,tp_dst=80",
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.3,tp_src=6,tp_dst=22",
        "in_port=2,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2",
        "in_port=1,arp,dl_src=02:00:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff",
        "in_port=2,arp,dl_src=02:00:00:00:00:02,dl_dst=02:00:00:00:00:01",
    ]
    .iter()
    .map(|l| parse_exact_flow(l).unwrap())
    .collect();
    // the second passes of the select group
    for k in keys.clone() {
        for mut rk in table.xlate(&k).recirc_keys {
            rk.set(
                flow::key::f::DP_HASH,
                flow::group::hash_sym_l4(&rk, 0) as u64,
            );
            keys.push(rk);
        }
    }
    assert!(keys.len() >= 7, "select passes: {}", keys.len());
    let mut dp = Datapath::new();
    for k in &keys {
        dp.process(&table, k, 64, 1);
    }
    for k in &keys {
        dp.process(&table, k, 64, 2); // NORMAL learning flushed some: reinstall
    }
    let upcalls = dp.stats.upcalls;
    let before = allocs();
    for round in 0..1000u64 {
        for k in &keys {
            dp.process(&table, k, 64, 3 + round);
        }
    }
    assert_eq!(allocs(), before, "pipeline megaflow/EMC hits allocated");
    assert_eq!(dp.stats.upcalls, upcalls, "all hits");
}
