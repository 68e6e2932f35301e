//! OpenFlow rule statistics, the `ovs-ofctl dump-flows` text and idle/hard timeouts
//! against Open vSwitch itself (the `ovs.sh` oracle sandbox).
//!
//! `#[ignore]`d: needs `openvswitch-switch` (scripts/test-all.sh runs it with `--ignored`).
//!
//! ```sh
//! cargo test -p flow --test ovs_rules -- --ignored --nocapture
//! ```

mod common;
use common::{hex_bytes, Oracle};
use flow::{parse_flows, FlowTable};
use std::process::Command;

/// Replaces the value after `key=` (up to the next `,`) with `*`.
fn blank(line: &str, key: &str) -> String {
    match line.find(key) {
        Some(p) => {
            let rest = &line[p + key.len()..];
            let end = rest.find(',').unwrap_or(rest.len());
            format!("{}{}*{}", &line[..p], key, &rest[end..])
        }
        None => line.to_string(),
    }
}

/// OpenFlow rule statistics and the `ovs-ofctl dump-flows` text against OVS: the same
/// table is loaded into both, the same frames (composed by OVS) go through OVS's real
/// upcall path (`netdev-dummy/receive`) and through our datapath (upcall + EMC/megaflow
/// hits + stats push); every rule's dump line must be the same (duration and idle_age
/// values blanked). OVS's default dump talks OpenFlow 1.3 (actions in the OF1.3 form we
/// hold, no idle_age); the OpenFlow 1.0 (NXM) dump has idle_age, which is checked on
/// the part before `actions=` (OF1.0 prints actions in their OF1.0 form).
#[test]
#[ignore = "needs openvswitch-switch (the OVS oracle): run with --ignored"]
fn rule_stats_dump_with_ovs() {
    let flows = "\
priority=200,in_port=1,udp,tp_dst=4000,idle_timeout=100,hard_timeout=200,cookie=0x2a,actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,mod_tp_dst:4001,output:2
priority=150,udp,actions=mod_vlan_vid:5,controller
priority=100,in_port=2,dl_vlan=7,actions=strip_vlan,output:1,in_port
priority=120,tcp,nw_src=192.168.1.0/24,nw_dst=10.0.0.0/255.0.255.0,tp_dst=0x50/0xfff0,actions=mod_nw_src:1.2.3.4,mod_nw_tos:64,output:3
priority=110,ipv6,ipv6_dst=2001:db8::/32,idle_timeout=300,actions=set_field:2001:db8::1->ipv6_src,output:4
priority=105,arp,arp_op=1,arp_tpa=10.0.0.1,actions=output:1,output:2
priority=90,icmp,icmp_type=8,cookie=0xfeed,actions=dec_ttl,output:2
priority=80,tcp,tcp_flags=+syn-ack,actions=set_field:16->ip_dscp,controller:128
priority=75,dl_vlan=9,actions=mod_vlan_pcp:3,output:2
priority=70,dl_src=02:00:00:00:00:00/01:00:00:00:00:00,actions=drop
priority=60,ip,nw_dst=3.3.3.3,actions=set_field:64->nw_tos,output:1
priority=0,actions=drop
";
    let packets = [
        (
            "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64,udp_dst=4000",
            3,
        ),
        (
            "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64,udp_src=9,udp_dst=4000",
            2,
        ),
        ("in_port=3,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,udp_dst=53", 2),
        ("in_port=2,dl_vlan=7,ip,nw_src=5.5.5.5,nw_dst=6.6.6.6", 2),
        (
            "in_port=1,tcp,nw_src=192.168.1.5,nw_dst=10.9.0.1,tcp_dst=85",
            4,
        ),
        (
            "in_port=3,ipv6,ipv6_src=2001:db9::1,ipv6_dst=2001:db8::5",
            1,
        ),
        (
            "in_port=1,arp,arp_op=1,arp_spa=10.0.0.2,arp_tpa=10.0.0.1",
            2,
        ),
        (
            "in_port=2,icmp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=9,icmp_type=8",
            3,
        ),
        (
            "in_port=2,tcp,nw_src=1.1.1.1,nw_dst=2.2.2.2,tcp_dst=22,tcp_flags=0x002",
            2,
        ),
        ("in_port=4,dl_vlan=9,ip,nw_src=1.1.1.1,nw_dst=2.2.2.2", 1),
        ("in_port=4,dl_src=03:00:00:00:00:01,ip,nw_src=1.1.1.1", 1),
        (
            "in_port=4,dl_src=03:00:00:00:00:01,ip,nw_src=1.1.1.1,nw_dst=3.3.3.3",
            2,
        ),
    ];
    let o = Oracle::start();
    o.load(flows);
    let mut table = FlowTable::new();
    for r in parse_flows(flows).unwrap() {
        table.add_at(r, 0);
    }
    table.ports = Some((1..=4).collect());
    let mut dp = flow::dp::Datapath::new();
    let mut now = 1;
    for (flow_s, n) in packets {
        let hex = o.compose(flow_s);
        let in_port: u32 = flow_s
            .strip_prefix("in_port=")
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        let bytes = hex_bytes(&hex);
        for _ in 0..n {
            let st = o.sh_cmd(&["inject", &format!("p{in_port}"), &hex]);
            assert!(
                st.status.success(),
                "inject {flow_s}: {}",
                String::from_utf8_lossy(&st.stderr)
            );
            dp.receive(&table, in_port, &bytes, now);
            now += 1;
        }
    }
    dp.push_stats(&mut table);
    // Let OVS's revalidators push the datapath stats to the rules.
    for _ in 0..2 {
        let _ = o.sh_cmd(&["appctl", "revalidator/wait"]);
        std::thread::sleep(std::time::Duration::from_millis(600));
    }
    let ofctl_dump = |of: &str| -> Vec<String> {
        let out = Command::new("bash")
            .arg(&o.sh)
            .args(["ofctl", "dump-flows"])
            .env("OVS_ORACLE_DIR", &o.dir)
            .env("OVS_ORACLE_OF", of)
            .output()
            .expect("ovs.sh ofctl dump-flows");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(" cookie="))
            .map(|l| blank(&blank(l, "duration="), "idle_age="))
            .collect();
        v.sort();
        v
    };
    let ours_full: Vec<String> = table
        .dump_rules(now)
        .iter()
        .map(|l| blank(&blank(l, "duration="), "idle_age="))
        .collect();
    let mut ours13: Vec<String> = ours_full
        .iter()
        .map(|l| l.replace("idle_age=*, ", ""))
        .collect();
    ours13.sort();
    let ovs13 = ofctl_dump("OpenFlow13");
    let ovs10 = ofctl_dump("OpenFlow10");
    eprintln!(
        "ours:\n{}\nOVS (OpenFlow 1.3):\n{}",
        ours_full.join("\n"),
        ovs13.join("\n")
    );
    assert_eq!(ours13, ovs13, "dump-flows lines (OpenFlow 1.3) differ");
    let head = |l: &String| l.split(" actions=").next().unwrap_or("").to_string();
    let mut ours10: Vec<String> = ours_full.iter().map(head).collect();
    ours10.sort();
    let mut ovs10: Vec<String> = ovs10.iter().map(head).collect();
    ovs10.sort();
    assert_eq!(
        ours10, ovs10,
        "dump-flows lines (OpenFlow 1.0 + NXM, before actions) differ"
    );
    let total: u64 = packets.iter().map(|p| p.1 as u64).sum();
    let credited: u64 = table
        .rules
        .keys()
        .filter_map(|id| table.rule_stats(*id))
        .map(|s| s.packets)
        .sum();
    assert_eq!(credited, total, "every packet is credited to its rule");

    timeouts_replayed_into_our_table(&o);
}

/// Idle and hard timeouts, tied to our code: OVS runs three timed rules in real time
/// (a never-hit idle_timeout=1, an idle_timeout=1 hit on every poll until 2.4 s, a
/// hard_timeout=2 hit the same way); the hit instants we injected into OVS are replayed
/// into our datapath + table (`Datapath::receive` at each instant, `Datapath::sweep`
/// every 10 ms), and each rule's expiry instant from our code must be where OVS removed
/// it: not after OVS's removal, and not earlier than OVS's removal minus OVS's lag (it
/// expires rules on its revalidation/expiry rounds, and we see it by polling).
fn timeouts_replayed_into_our_table(o: &Oracle) {
    const TIMED: &str = "priority=5,udp,tp_dst=9,idle_timeout=1,actions=drop\n\
                         priority=6,udp,tp_dst=10,idle_timeout=1,actions=drop\n\
                         priority=7,udp,tp_dst=11,hard_timeout=2,actions=drop\n";
    /// How late OVS may remove an expired rule, as we observe it: its expiry round
    /// (~1 s) plus a revalidator round (0.5 s) plus our poll interval.
    const OVS_LAG_MS: u64 = 1700;
    let hit10 = o.compose("in_port=1,udp,udp_dst=10");
    let hit11 = o.compose("in_port=1,udp,udp_dst=11");
    let t0 = std::time::Instant::now();
    let ms = || t0.elapsed().as_millis() as u64;
    o.load(TIMED);
    // OVS installed the rules somewhere in [0, installed]
    let installed = ms();
    let present = |p: &str| {
        let out = o.sh_cmd(&["ofctl", "dump-flows"]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("priority={p},"))
    };
    let mut hits: Vec<(u64, &str)> = Vec::new();
    let mut gone: [Option<u64>; 3] = [None; 3];
    while ms() < 5000 && gone.iter().any(|g| g.is_none()) {
        if ms() < 2400 {
            for (hex, dst) in [(&hit10, "10"), (&hit11, "11")] {
                let a = ms();
                let st = o.sh_cmd(&["inject", "p1", hex]);
                assert!(st.status.success(), "inject udp_dst={dst}");
                hits.push(((a + ms()) / 2, dst));
            }
        }
        for (i, p) in ["5", "6", "7"].iter().enumerate() {
            if gone[i].is_none() && !present(p) {
                gone[i] = Some(ms());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // the same table and hit instants through our datapath
    let mut table = FlowTable::new();
    let ids: Vec<u32> = parse_flows(TIMED)
        .unwrap()
        .into_iter()
        .map(|r| table.add_at(r, installed))
        .collect();
    table.ports = Some((1..=4).collect());
    let frames = [("10", hex_bytes(&hit10)), ("11", hex_bytes(&hit11))];
    let mut dp = flow::dp::Datapath::new();
    let mut ours: [Option<u64>; 3] = [None; 3];
    let mut next = 0;
    for now in (0..=8000u64).step_by(10) {
        while next < hits.len() && hits[next].0 <= now {
            let (at, dst) = hits[next];
            let f = &frames.iter().find(|f| f.0 == dst).unwrap().1;
            dp.receive(&table, 1, f, at);
            next += 1;
        }
        for e in dp.sweep(&mut table, now, 10_000).rules_expired {
            let i = ids.iter().position(|&id| id == e.id).unwrap();
            ours[i].get_or_insert(now);
        }
    }
    eprintln!(
        "timeouts (ms after the table went in; {} hits replayed, install <= {installed} ms): \
         OVS removed never-hit idle=1 / busy idle=1 / busy hard=2 at {:?}, ours expire them at {:?}",
        hits.len(),
        gone,
        ours
    );
    for (i, name) in [
        "never-hit idle_timeout=1",
        "busy idle_timeout=1",
        "busy hard_timeout=2",
    ]
    .iter()
    .enumerate()
    {
        let (Some(ovs), Some(us)) = (gone[i], ours[i]) else {
            panic!(
                "{name}: OVS removed it at {:?}, ours expired it at {:?}",
                gone[i], ours[i]
            );
        };
        // ours were installed at `installed` (OVS's at or before it): allow that much
        assert!(
            us <= ovs + installed,
            "{name}: ours expire it at {us} ms, after OVS removed it at {ovs} ms"
        );
        assert!(
            ovs <= us + OVS_LAG_MS,
            "{name}: ours expire it at {us} ms, OVS only at {ovs} ms (more than its {OVS_LAG_MS} ms lag later)"
        );
    }
    // the boundaries, which OVS's round-based expiry cannot resolve: a rule expires the
    // first millisecond after its timeout
    let mut t = FlowTable::new();
    let mut ids = parse_flows(
        "priority=5,udp,tp_dst=9,idle_timeout=1,actions=drop\n\
         priority=7,udp,tp_dst=11,hard_timeout=2,actions=drop\n",
    )
    .unwrap()
    .into_iter()
    .map(|r| t.add_at(r, 0));
    let (i5, i7) = (ids.next().unwrap(), ids.next().unwrap());
    t.credit(i7, 10, 600, 1900); // busy
    assert!(t.expired_at(1000).is_empty());
    assert_eq!(
        t.expired_at(1001),
        vec![(i5, flow::ofproto::ExpireReason::Idle)]
    );
    assert_eq!(t.expired_at(2000).len(), 1);
    assert_eq!(t.expired_at(2001).len(), 2);
}

/// `ovs-ofctl dump-flows` (OpenFlow 1.3) of OVS's bridge, durations blanked, sorted.
fn ovs_dump13(o: &Oracle) -> Vec<String> {
    let out = Command::new("bash")
        .arg(&o.sh)
        .args(["ofctl", "dump-flows"])
        .env("OVS_ORACLE_DIR", &o.dir)
        .env("OVS_ORACLE_OF", "OpenFlow13")
        .output()
        .expect("ovs.sh ofctl dump-flows");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(" cookie="))
        .map(|l| blank(l, "duration="))
        .collect();
    v.sort();
    v
}

/// The rules written with ovs-fields(7) aliases and writes to every writable packet
/// field (`common::FIELD_FLOWS`) dump like OVS's after its OpenFlow 1.3 round trip:
/// canonical names (`tcp_dst` for `tp_dst`, `nw_src` for `ip_src`), `load` kept as
/// NXM `load` (split into contiguous runs), partial `set_field` on NXM fields as
/// `load`, on OXM-only fields (`sctp_src`) as `set_field:V/M`, `move` with NXM/OXM names.
#[test]
#[ignore = "needs openvswitch-switch (the OVS oracle): run with --ignored"]
fn field_aliases_dump_with_ovs() {
    let o = Oracle::start();
    o.load(common::FIELD_FLOWS);
    let mut table = FlowTable::new();
    for r in parse_flows(common::FIELD_FLOWS).expect("our parser rejects the table") {
        table.add_at(r, 0);
    }
    let mut ours: Vec<String> = table
        .dump_rules(0)
        .iter()
        .map(|l| blank(&blank(l, "duration="), "idle_age=").replace("idle_age=*, ", ""))
        .collect();
    ours.sort();
    let ovs = ovs_dump13(&o);
    let diff: Vec<String> = ours
        .iter()
        .zip(&ovs)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("ours {a}\novs  {b}"))
        .collect();
    assert_eq!(ours.len(), ovs.len(), "rule count");
    assert!(
        diff.is_empty(),
        "dump-flows lines differ:\n{}",
        diff.join("\n")
    );
}

/// The same lines are accepted and refused as by OVS's own parser (`ovs-ofctl -O
/// OpenFlow13 parse-flow`, which also runs OVS's action/match consistency check):
/// aliases, the field names set_field takes (not NXM/OXM names; `tp_dst` is TCP's),
/// value checks, prerequisites of set_field/load/move against the match.
#[test]
#[ignore = "needs openvswitch-common (ovs-ofctl): run with --ignored"]
fn field_syntax_acceptance_with_ovs() {
    let lines = [
        // match names and aliases
        "in_port_oxm=3,actions=drop",
        "ipv4,ip_src=1.2.3.4,actions=drop",
        "ip6,ipv6_label=0x12345,actions=drop",
        "eth,eth_type=0x0800,ip_proto=6,tp_dst=80,actions=drop",
        "ip,ip_ecn=1,ip_frag=no,actions=drop",
        "ip,nw_tos=0xff,actions=drop",
        "ip,ip_dscp=64,actions=drop",
        "dl_vlan=0x1005,actions=drop",
        "dl_vlan=5,vlan_pcp=3,actions=drop",
        "icmp6,icmpv6_type=135,icmpv6_code=0,nd_sll=00:11:22:33:44:55,actions=drop",
        "arp,nw_src=1.2.3.4,arp_op=2,actions=drop",
        "udp6,udp_src=5,actions=drop",
        "sctp,sctp_dst=5,actions=drop",
        "ip,ipv4_src=1.2.3.4,actions=drop",
        "icmp,icmpv4_type=3,actions=drop",
        "ip,NXM_OF_IP_SRC=1.2.3.4,actions=drop",
        // set_field names and prerequisites
        "tcp,actions=set_field:8080->tp_dst",
        "udp,actions=set_field:8080->tp_dst",
        "sctp,actions=set_field:8080->tp_dst",
        "tcp,actions=set_field:80->NXM_OF_TCP_DST",
        "tcp,actions=set_field:80->OXM_OF_TCP_DST",
        "ip,actions=set_field:1.2.3.4->nw_src",
        "ip,actions=set_field:5->nw_ttl,set_field:1->nw_ecn,set_field:2->ip_ecn",
        "ip,actions=set_field:5->nw_ecn",
        "ip,actions=set_field:0xff->nw_tos",
        "ip,actions=set_field:64->ip_dscp",
        "ipv6,actions=set_field:0x12345->ipv6_label",
        "ip,actions=set_field:0x12345->ipv6_label",
        "arp,actions=set_field:2->arp_op,set_field:1.1.1.1->arp_spa,set_field:00:11:22:33:44:55->arp_tha",
        "arp,actions=set_field:300->arp_op",
        "ip,actions=set_field:2->arp_op",
        "icmp,actions=set_field:3->icmp_type,set_field:1->icmp_code",
        "icmp6,actions=set_field:3->icmp_type",
        "icmp6,actions=set_field:129->icmpv6_type",
        "icmp6,actions=set_field:fe80::1->nd_target",
        "icmp6,icmp_type=135,icmp_code=0,actions=set_field:fe80::1->nd_target,set_field:00:11:22:33:44:55->nd_sll",
        "icmp6,icmp_type=135,icmp_code=0,actions=set_field:00:11:22:33:44:55->nd_tll",
        "ip,actions=set_field:6->nw_proto",
        "actions=set_field:0x800->eth_type",
        "udp,actions=set_field:5/0xf->udp_src",
        "sctp,actions=set_field:5/0xf->sctp_src",
        "ip,actions=set_field:1.2.3.4/255.255.0.0->ip_src",
        // load / move
        "tcp,actions=load:80->NXM_OF_TCP_DST[]",
        "tcp,actions=load:80->OXM_OF_TCP_DST[]",
        "tcp,actions=load:80->tp_dst[]",
        "udp,actions=load:80->tcp_dst[]",
        "udp,actions=load:5->udp_src[0..3]",
        "udp,actions=load:0x50->udp_src[0..3]",
        "ip,actions=load:5->NXM_NX_IP_ECN[]",
        "ip,actions=load:3->NXM_NX_IP_ECN[]",
        "tcp,actions=move:tp_src[]->tp_dst[]",
        "ip,actions=move:OXM_OF_IPV4_SRC[]->ip_dst[]",
        "ip,actions=move:NXM_OF_IP_SRC[]->NXM_NX_IPV6_DST[0..31]",
        "ipv6,actions=move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[]",
        "ipv6,actions=move:NXM_NX_IPV6_SRC[0..63]->NXM_NX_REG0[0..63]",
        "actions=move:NXM_OF_ETH_TYPE[]->NXM_NX_REG0[0..15]",
        "actions=move:NXM_NX_REG0[0..15]->NXM_OF_ETH_TYPE[]",
        "arp,actions=move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[]",
        "ip,actions=move:NXM_NX_ARP_SHA[]->NXM_OF_ETH_DST[]",
        "ip,actions=move:NXM_NX_REG0[0..7]->NXM_NX_IP_TTL[]",
        "ip,actions=move:NXM_NX_REG0[0..8]->NXM_NX_IP_TTL[]",
        "icmp,actions=move:NXM_OF_ICMP_TYPE[]->NXM_OF_ICMP_CODE[]",
    ];
    let mut fails = Vec::new();
    for l in lines {
        let o = Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow13", "parse-flow", l])
            .output()
            .expect("ovs-ofctl (openvswitch-common) is needed");
        let theirs = o.status.success();
        let ours = flow::ofctl::parse_rule(l);
        if ours.is_ok() != theirs {
            fails.push(format!(
                "{l}\n  ovs: {}\n  ours: {:?}",
                if theirs {
                    "accepted".to_string()
                } else {
                    String::from_utf8_lossy(&o.stderr).trim().to_string()
                },
                ours.map(|r| r.actions)
            ));
        }
    }
    assert!(
        fails.is_empty(),
        "accepted/refused differently:\n{}",
        fails.join("\n")
    );
}
