//! The signature match cache and subtable ranking change where a lookup is resolved,
//! never what it finds: a property test runs random packets, rule adds / deletes /
//! modifications (each followed by a revalidator round: megaflows kept, modified,
//! deleted), idle expiry and subtable re-sorts through two datapaths fed the same
//! operations — one with EMC + a tiny SMC (many collisions and replaced entries) +
//! ranking, one with neither cache and subtables in creation order — and checks that
//! every lookup finds a megaflow that matches the packet, the same megaflow (match,
//! mask, actions) as the plain datapath, and that both hold the same megaflows.
//! Deletes rebuild the classifier and new megaflows grow its subtables, so stale SMC
//! entries name (subtable, slot) places that are gone, empty or hold another flow:
//! validation must reject them. Batches of packets go through
//! `Datapath::lookup_batch` with the same checks.

use flow::dp::{hash_key, Datapath, Hit};
use flow::key::{f, FlowKey};
use flow::{parse_flows, FlowTable};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Packet(usize),
    /// These packets through `Datapath::lookup_batch` (1–70: more than one group of
    /// `LOOKUP_BATCH`, repeats inside a group).
    Batch(Vec<usize>),
    AddRule(String),
    DelRule(usize),
    /// Re-adds rule i (same match and priority) with other actions.
    ModRule(usize, u32),
    /// Advances the clock by this many ms and expires every megaflow (partial idle
    /// expiry would depend on which of two overlapping megaflows a packet hit, which
    /// the caches may legitimately change; partial deletes come from the
    /// revalidator).
    Idle(u64),
    Sort,
}

fn rule_text() -> impl Strategy<Value = String> {
    (
        1u16..40,
        prop_oneof![Just("ip"), Just("tcp"), Just("udp")],
        proptest::option::of((
            0u8..4,
            prop_oneof![Just(16u8), Just(22), Just(24), Just(30), Just(32)],
        )),
        proptest::option::of((0u8..8, prop_oneof![Just(24u8), Just(29), Just(32)])),
        proptest::option::of(prop_oneof![Just(22u16), Just(80), Just(443)]),
        1u32..5,
    )
        .prop_map(|(prio, proto, dst, src, tp, out)| {
            let mut s = format!("priority={prio},{proto}");
            if let Some((y, len)) = dst {
                s += &format!(",nw_dst=10.0.{y}.0/{len}");
            }
            if let Some((x, len)) = src {
                s += &format!(",nw_src=10.0.0.{x}/{len}");
            }
            if let (Some(p), true) = (tp, proto != "ip") {
                s += &format!(",tp_dst={p}");
            }
            s + &format!(",actions=output:{out}")
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0usize..64).prop_map(Op::Packet),
        3 => proptest::collection::vec(0usize..64, 1..70).prop_map(Op::Batch),
        2 => rule_text().prop_map(Op::AddRule),
        1 => (0usize..64).prop_map(Op::DelRule),
        1 => (0usize..64, 1u32..5).prop_map(|(i, o)| Op::ModRule(i, o)),
        1 => (1u64..80).prop_map(Op::Idle),
        1 => Just(Op::Sort),
    ]
}

fn packet(seed: u64) -> FlowKey {
    let r = |n: u64, s: u32| (seed.rotate_left(s) ^ (seed >> (s % 17))) % n;
    let mut k = FlowKey::ZERO;
    k.set(f::IN_PORT, 1 + r(2, 3));
    k.set(f::DL_SRC, 0x0200_0000_0001);
    k.set(f::DL_DST, 0x0200_0000_0002);
    k.set(f::DL_TYPE, 0x0800);
    k.set(f::NW_SRC, 0x0a00_0000 | r(8, 7));
    k.set(f::NW_DST, 0x0a00_0000 | (r(4, 11) << 8) | r(8, 19));
    k.set(f::NW_TTL, 64);
    k.set(f::NW_PROTO, [6, 17][r(2, 23) as usize]);
    k.set(f::TP_SRC, 1000 + r(3, 29));
    k.set(f::TP_DST, [22, 80, 443, 4420][r(4, 31) as usize]);
    k
}

/// The alive megaflows of `dp` that match `k`: (masked key, mask).
fn matching(dp: &Datapath, k: &FlowKey) -> Vec<(FlowKey, FlowKey)> {
    dp.flows()
        .filter(|fl| k.and(&fl.mask) == fl.key)
        .map(|fl| (fl.key, fl.mask))
        .collect()
}

fn flow_set(dp: &Datapath) -> Vec<String> {
    let mut v: Vec<String> = dp
        .flows()
        .map(|fl| format!("{:?} {:?} {:?}", fl.key.w, fl.mask.w, fl.actions))
        .collect();
    v.sort();
    v
}

/// A's lookup result `ra` for `k` against the plain datapath's `rb`: both hit or
/// both miss (a hit exactly when some megaflow of `want` matches), A's megaflow
/// matches the packet and is alive, same actions, and the same megaflow when only
/// one matches. `what` prefixes the messages.
fn same_result(
    a: &Datapath,
    b: &Datapath,
    k: &FlowKey,
    want: &[(FlowKey, FlowKey)],
    ra: Option<(u32, Hit)>,
    rb: Option<(u32, Hit)>,
    what: &str,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        ra.is_some(),
        rb.is_some(),
        "{}hit in one datapath only",
        what
    );
    prop_assert_eq!(ra.is_some(), !want.is_empty());
    if let (Some((ia, hit)), Some((ib, _))) = (ra, rb) {
        let (fa, fb) = (a.flow(ia), b.flow(ib));
        prop_assert!(
            k.and(&fa.mask) == fa.key,
            "{}{:?} hit a megaflow that does not match the packet",
            what,
            hit
        );
        prop_assert!(
            want.contains(&(fa.key, fa.mask)),
            "{}{:?}: not alive",
            what,
            hit
        );
        prop_assert_eq!(&fa.actions, &fb.actions, "{}{:?}", what, hit);
        if want.len() == 1 {
            prop_assert_eq!((fa.key, fa.mask), (fb.key, fb.mask));
        }
    }
    Ok(())
}

/// Runs one case; returns A's (SMC hits, SMC rejects).
fn run(ops: &[Op], rules: &[String], pool: &[u64], emc: bool) -> Result<(u64, u64), TestCaseError> {
    let mut table = FlowTable::from_rules(parse_flows(&rules.join("\n")).unwrap());
    let mut texts: Vec<String> = rules.to_vec();
    let mut a = Datapath::new();
    a.set_emc(emc); // without the EMC every repeated lookup goes to the SMC
    a.set_smc_entries(Some(16)); // 4 buckets: collisions, replacements
    let mut b = Datapath::new();
    b.set_emc(false);
    b.set_ranking(false);
    let keys: Vec<FlowKey> = pool.iter().map(|&s| packet(s)).collect();
    let mut now = 1u64;
    let changed = |table: &mut FlowTable, a: &mut Datapath, b: &mut Datapath, now: u64| {
        a.table_changed();
        b.table_changed();
        let sa = a.sweep(table, now, u64::MAX / 4);
        let sb = b.sweep(table, now, u64::MAX / 4);
        (sa.kept, sa.modified, sa.deleted_changed) == (sb.kept, sb.modified, sb.deleted_changed)
    };
    for op in ops {
        match op {
            Op::Packet(i) => {
                let k = keys[*i % keys.len()];
                now += 1;
                let want = matching(&a, &k);
                let h = hash_key(&k);
                let (ra, rb) = (a.lookup(&k, h), b.lookup(&k, h));
                same_result(&a, &b, &k, &want, ra, rb, "")?;
                // then the packet as the datapath processes it (upcall on a miss)
                let (xa, ha) = a.process(&table, &k, 64, now);
                let xa = xa.to_vec();
                let (xb, hb) = b.process(&table, &k, 64, now);
                prop_assert_eq!(&xa, &xb.to_vec());
                prop_assert_eq!(ha == Hit::Upcall, hb == Hit::Upcall);
            }
            Op::Batch(ix) => {
                let ks: Vec<FlowKey> = ix.iter().map(|&i| keys[i % keys.len()]).collect();
                let hs: Vec<u64> = ks.iter().map(hash_key).collect();
                let mut out = vec![None; ks.len()];
                a.lookup_batch(&ks, &hs, &mut out);
                for (k, (ra, h)) in ks.iter().zip(out.into_iter().zip(&hs)) {
                    let want = matching(&a, k);
                    let rb = b.lookup(k, *h);
                    same_result(&a, &b, k, &want, ra, rb, "batch ")?;
                }
            }
            Op::AddRule(t) => {
                table.add(parse_flows(t).unwrap().remove(0));
                texts.push(t.clone());
                prop_assert!(changed(&mut table, &mut a, &mut b, now));
            }
            Op::DelRule(i) if !texts.is_empty() => {
                let t = texts.remove(i % texts.len());
                let r = parse_flows(&t).unwrap().remove(0);
                table.del_matching(&r.m);
                prop_assert!(changed(&mut table, &mut a, &mut b, now));
            }
            Op::ModRule(i, out) if !texts.is_empty() => {
                let n = texts.len();
                let t = &mut texts[*i % n];
                let base = t.split(",actions=").next().unwrap_or_default().to_string();
                *t = format!("{base},actions=output:{out}");
                table.add(parse_flows(t).unwrap().remove(0));
                prop_assert!(changed(&mut table, &mut a, &mut b, now));
            }
            Op::DelRule(_) | Op::ModRule(..) => {}
            Op::Idle(ms) => {
                now += ms;
                let (ea, eb) = (a.expire_idle(now, 0), b.expire_idle(now, 0));
                prop_assert_eq!(ea, eb);
            }
            Op::Sort => a.sort_subtables(),
        }
        prop_assert_eq!(flow_set(&a), flow_set(&b));
    }
    prop_assert_eq!(b.stats.smc_hits + b.stats.emc_hits, 0);
    Ok((a.stats.smc_hits, a.stats.smc_rejects))
}

#[test]
fn smc_and_ranking_find_the_same_megaflow() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let (hits, rejects) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    });
    let strategy = (
        proptest::collection::vec(rule_text(), 1..25),
        proptest::collection::vec(any::<u64>(), 8..48),
        proptest::collection::vec(op(), 20..300),
        any::<bool>(),
    );
    let r = runner.run(&strategy, |(rules, pool, ops, emc)| {
        let (h, r) = run(&ops, &rules, &pool, emc)?;
        hits.fetch_add(h, Relaxed);
        rejects.fetch_add(r, Relaxed);
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
    // the cases went through the SMC, and met stale / colliding entries
    let (h, r) = (hits.into_inner(), rejects.into_inner());
    println!("SMC hits {h}, rejected candidates {r}");
    assert!(h > 1000 && r > 100, "SMC hits {h}, rejects {r}");
}

/// The SMC resolves repeated lookups once the EMC is off (so the property test above
/// really goes through it), and rejects entries of flows that went.
#[test]
fn smc_hits_and_rejects_stale_entries() {
    let table = FlowTable::from_rules(
        parse_flows("priority=10,tcp,nw_dst=10.0.0.0/24,actions=output:2\npriority=5,udp,actions=output:3\n")
            .unwrap(),
    );
    let mut dp = Datapath::new();
    dp.set_emc(false);
    dp.set_smc(true);
    let mut keys: Vec<FlowKey> = (0..200u64).map(|s| packet(s * 0x9e37_79b9)).collect();
    keys.sort_by_key(|k| k.w);
    keys.dedup();
    for k in &keys {
        dp.process(&table, k, 64, 1);
    }
    let s0 = dp.stats;
    for k in &keys {
        dp.process(&table, k, 64, 2);
    }
    let s = dp.stats;
    assert_eq!(s.upcalls, s0.upcalls);
    assert_eq!(s.smc_hits - s0.smc_hits, keys.len() as u64, "{s:?}");
    assert_eq!(s.megaflow_hits, s0.megaflow_hits);
    // every megaflow idle: gone; the SMC still names their indices
    assert!(dp.expire_idle(1000, 10) > 0);
    assert_eq!(dp.n_flows(), 0);
    for k in &keys {
        assert!(dp.lookup(k, hash_key(k)).is_none());
    }
    assert!(
        dp.stats.smc_rejects > 0,
        "stale entries were looked at and refused"
    );
}
