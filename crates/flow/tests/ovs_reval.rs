//! The revalidator against Open vSwitch's (ofproto-dpif-upcall.c `revalidate_ukey`):
//! the same table goes into OVS (the `ovs.sh` sandbox, real upcall path through its
//! dummy datapath) and into our datapath, the same frames install megaflows in both,
//! then a change is applied to both and every megaflow is classified by what the
//! revalidator did to it: **kept** (same ufid, same actions), **modified** (same ufid,
//! new actions) or **deleted** (ufid gone). OVS's ufids are read from `dpctl/dump-flows
//! -m` after each frame; ours from `Datapath::flows`. Scenarios: a rule's actions
//! changed; a rule's match changed so a megaflow no longer holds; an unrelated rule
//! added; a rule deleted; idle expiry with `max-idle=1000` while one flow keeps its
//! traffic (replayed into our datapath on a made-up clock at the same instants).
//!
//! `#[ignore]`d: needs `openvswitch-switch` (scripts/test-all.sh runs it with `--ignored`).
//!
//! ```sh
//! cargo test -p flow --test ovs_reval -- --ignored --nocapture
//! ```

mod common;
use common::{hex_bytes, Oracle};
use flow::dp::Datapath;
use flow::revalidator::{Revalidator, RevalidatorConfig};
use flow::{format_actions, parse_flows, FlowTable};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fate {
    Kept,
    Modified,
    Deleted,
}

/// `ufid -> actions` of OVS's datapath flows.
fn ovs_flows(o: &Oracle) -> BTreeMap<String, String> {
    let out = o.sh_cmd(&["dump-flows", "-m"]);
    assert!(out.status.success(), "dump-flows");
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = line.strip_prefix("ufid:") else {
            continue;
        };
        let ufid = rest.split(',').next().unwrap_or_default().to_string();
        let acts = line
            .split(", actions:")
            .nth(1)
            .unwrap_or_default()
            .split(", dp-extra-info")
            .next()
            .unwrap_or_default()
            .to_string();
        m.insert(ufid, acts);
    }
    m
}

fn in_port(flow_s: &str) -> u32 {
    flow_s
        .strip_prefix("in_port=")
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .expect("packets start with in_port=N")
}

fn our_table(text: &str) -> FlowTable {
    let mut t = FlowTable::from_rules(parse_flows(text).unwrap());
    t.ports = Some((1..=4).collect());
    t
}

/// Applies `new` to our table as `ovs-ofctl replace-flows` does to OVS's: rules only
/// in `old` (by match and priority) are deleted, rules new or with other actions are
/// added (replacing the old one).
fn replace_flows(t: &mut FlowTable, old: &str, new: &str) {
    let key = |r: &flow::Rule| flow::xlate::format_rule_match(&r.m, r.priority);
    let old_r = parse_flows(old).unwrap();
    let new_r = parse_flows(new).unwrap();
    let lines_old: Vec<&str> = old.lines().map(str::trim).collect();
    for (r, l) in old_r
        .iter()
        .zip(old.lines().map(str::trim).filter(|l| !l.is_empty()))
    {
        if !new_r.iter().any(|n| key(n) == key(r)) {
            assert_eq!(t.del_matching(&r.m), 1, "{l}: deletes exactly its rule");
        }
    }
    for (r, l) in new_r
        .into_iter()
        .zip(new.lines().map(str::trim).filter(|l| !l.is_empty()))
    {
        if !lines_old.contains(&l) {
            t.add(r);
        }
    }
}

/// Installs `packets` in both, applies `new`, returns each packet's megaflow fate in
/// (OVS, ours).
fn scenario(o: &Oracle, old: &str, new: &str, packets: &[&str]) -> (Vec<Fate>, Vec<Fate>) {
    let _ = o.sh_cmd(&["del-flows"]);
    o.load(old);
    let mut table = our_table(old);
    let mut dp = Datapath::new();
    let mut rv = Revalidator::new(RevalidatorConfig::default());
    let (mut ovs_ufids, mut our_ufids) = (Vec::new(), Vec::new());
    for (i, p) in packets.iter().enumerate() {
        let before = ovs_flows(o);
        let hex = o.compose(p);
        let st = o.sh_cmd(&["inject", &format!("p{}", in_port(p)), &hex]);
        assert!(st.status.success(), "inject {p}");
        let after = ovs_flows(o);
        let new_u: Vec<&String> = after.keys().filter(|u| !before.contains_key(*u)).collect();
        assert_eq!(new_u.len(), 1, "{p}: one new OVS megaflow ({after:?})");
        ovs_ufids.push((new_u[0].clone(), after[new_u[0]].clone()));
        let n0 = dp.n_flows();
        dp.receive(&table, in_port(p), &hex_bytes(&hex), 1 + i as u64);
        assert_eq!(dp.n_flows(), n0 + 1, "{p}: one new megaflow of ours");
        let fl = dp.flows().max_by_key(|f| f.ufid).unwrap();
        our_ufids.push((fl.ufid, format_actions(&fl.actions)));
    }
    // the change, then one revalidator round in each
    o.load(new);
    let _ = o.sh_cmd(&["appctl", "revalidator/wait"]);
    replace_flows(&mut table, old, new);
    dp.table_changed();
    rv.run(&mut dp, &mut table, 100);
    let after = ovs_flows(o);
    let ovs: Vec<Fate> = ovs_ufids
        .iter()
        .map(|(u, a)| match after.get(u) {
            None => Fate::Deleted,
            Some(b) if b == a => Fate::Kept,
            Some(_) => Fate::Modified,
        })
        .collect();
    let ours: Vec<Fate> = our_ufids
        .iter()
        .map(|(u, a)| match dp.flow_by_ufid(*u) {
            None => Fate::Deleted,
            Some(f) if format_actions(&f.actions) == *a => Fate::Kept,
            Some(_) => Fate::Modified,
        })
        .collect();
    (ovs, ours)
}

const BASE: &str = "\
priority=100,tcp,nw_dst=10.0.0.0/24,actions=output:2
priority=90,tcp,tp_dst=80,actions=output:3
priority=50,udp,actions=output:4
priority=0,actions=drop
";

const PACKETS: &[&str] = &[
    "in_port=1,tcp,nw_src=192.168.0.1,nw_dst=10.0.0.5,tcp_dst=80",
    "in_port=1,tcp,nw_src=192.168.0.1,nw_dst=10.1.0.5,tcp_dst=80",
    "in_port=1,tcp,nw_src=192.168.0.1,nw_dst=10.1.0.5,tcp_dst=22",
    "in_port=2,udp,nw_src=192.168.0.1,nw_dst=10.0.0.7,udp_dst=53",
    "in_port=3,tcp,nw_src=192.168.0.1,nw_dst=10.0.0.200,tcp_dst=443",
];

#[test]
#[ignore = "needs openvswitch-switch (the OVS oracle): run with --ignored"]
fn revalidator_decisions_with_ovs() {
    let o = Oracle::start();
    let scenarios: [(&str, String, Fate); 4] = [
        (
            "rule actions changed",
            BASE.replace(
                "nw_dst=10.0.0.0/24,actions=output:2",
                "nw_dst=10.0.0.0/24,actions=output:3",
            ),
            Fate::Modified,
        ),
        (
            "rule match changed (megaflow no longer holds)",
            BASE.replace("nw_dst=10.0.0.0/24", "nw_dst=10.0.0.0/28"),
            Fate::Deleted,
        ),
        (
            "unrelated rule added",
            format!("{BASE}priority=200,sctp,tp_dst=9,actions=output:1\n"),
            Fate::Kept,
        ),
        (
            "rule deleted",
            BASE.replace("priority=90,tcp,tp_dst=80,actions=output:3\n", ""),
            Fate::Modified,
        ),
    ];
    let mut bad = Vec::new();
    for (name, new, must) in &scenarios {
        let (ovs, ours) = scenario(&o, BASE, new, PACKETS);
        println!("{name}: OVS {ovs:?}, ours {ours:?}");
        assert!(
            ovs.contains(must),
            "{name}: the scenario must make OVS's revalidator do {must:?} at least once: {ovs:?}"
        );
        if ovs != ours {
            bad.push(format!("{name}: OVS {ovs:?}, ours {ours:?}"));
        }
    }
    let idle = idle_with_ovs(&o);
    if let Some(e) = idle {
        bad.push(e);
    }
    let _ = o.sh_cmd(&["stop"]);
    assert!(
        bad.is_empty(),
        "revalidator decisions differ from OVS:\n{}",
        bad.join("\n")
    );
}

/// max-idle=1000: A keeps its traffic (a frame every 250 ms for 2.5 s), B none after
/// its first frame; after the last frame both revalidators run: which megaflows are
/// left (by packet) must be equal. Our datapath gets the frames at the same instants
/// (ms since the start) and a revalidator round every 500 ms (OVS's dump interval).
fn idle_with_ovs(o: &Oracle) -> Option<String> {
    let _ = o.sh_cmd(&["del-flows"]);
    o.load(BASE);
    let st = o.sh_cmd(&["config", "max-idle=1000"]);
    assert!(st.status.success());
    let mut table = our_table(BASE);
    let mut dp = Datapath::new();
    let mut rv = Revalidator::new(RevalidatorConfig {
        max_idle_ms: 1000,
        ..Default::default()
    });
    let (a, b) = (PACKETS[0], PACKETS[3]);
    let (ha, hb) = (o.compose(a), o.compose(b));
    let t0 = std::time::Instant::now();
    let ms = || t0.elapsed().as_millis() as u64 + 1;
    let feed =
        |p: &str, h: &str, dp: &mut Datapath, table: &mut FlowTable, rv: &mut Revalidator| {
            let st = o.sh_cmd(&["inject", &format!("p{}", in_port(p)), h]);
            assert!(st.status.success());
            let now = ms();
            dp.receive(table, in_port(p), &hex_bytes(h), now);
            rv.tick(dp, table, now);
        };
    feed(a, &ha, &mut dp, &mut table, &mut rv);
    feed(b, &hb, &mut dp, &mut table, &mut rv);
    let (ua, ub) = {
        let mut v: Vec<u64> = dp.flows().map(|f| f.ufid).collect();
        v.sort();
        (v[0], v[1])
    };
    let ovs_before = ovs_flows(o);
    assert_eq!(ovs_before.len(), 2, "{ovs_before:?}");
    let (oa, ob) = {
        // OVS's ufids by actions: A outputs to 2, B to 4 (`-m` names the ports)
        let find = |act: &str| {
            ovs_before
                .iter()
                .find(|(_, x)| x.trim_start_matches('p') == act)
                .map(|(u, _)| u.clone())
                .unwrap_or_else(|| panic!("no OVS flow with actions {act}: {ovs_before:?}"))
        };
        (find("2"), find("4"))
    };
    while t0.elapsed().as_millis() < 2500 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        feed(a, &ha, &mut dp, &mut table, &mut rv);
    }
    for _ in 0..2 {
        let _ = o.sh_cmd(&["appctl", "revalidator/wait"]);
    }
    let end = ms();
    rv.run(&mut dp, &mut table, end);
    let after = ovs_flows(o);
    let _ = o.sh_cmd(&["config", "max-idle=10000"]);
    let ovs = (after.contains_key(&oa), after.contains_key(&ob));
    let ours = (dp.flow_by_ufid(ua).is_some(), dp.flow_by_ufid(ub).is_some());
    println!("idle expiry (A busy, B idle) present after 2.5 s: OVS {ovs:?}, ours {ours:?}");
    assert_eq!(
        ovs,
        (true, false),
        "the scenario: OVS keeps A and expires B"
    );
    (ovs != ours).then(|| format!("idle expiry: OVS (A, B) present {ovs:?}, ours {ours:?}"))
}
