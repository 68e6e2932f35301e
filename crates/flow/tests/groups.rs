//! Groups (always run): decisions recorded from OVS 3.1 (`ovs.sh ofctl add-groups` +
//! `ofproto/trace` / `netdev-dummy/receive` + `dpctl/dump-flows` on the same tables),
//! the datapath's recirculation for select groups, group statistics and bad input.
//! The randomised comparison with a live OVS is `ovs_oracle.rs`
//! (`group_conformance_with_ovs`).

use flow::dp::Datapath;
use flow::key::f;
use flow::{parse_flows, parse_groups, FlowKey, FlowTable};

const GROUPS: &str = "\
group_id=1,type=select,bucket=output:2,bucket=output:3,bucket=weight:2,set_field:00:00:00:00:00:09->eth_dst,output:4
group_id=2,type=all,bucket=set_field:00:00:00:00:00:07->eth_dst,output:2,bucket=output:3
group_id=3,type=ff,bucket=watch_port:5,output:2,bucket=watch_port:3,output:3
";
const FLOWS: &str = "\
table=0,priority=10,tcp,actions=set_field:5->reg0,resubmit(,1),output:4
table=0,priority=5,udp,actions=group:2,output:1
table=0,priority=4,arp,actions=group:3
table=1,priority=10,reg0=5,actions=group:1,output:3
";
/// `ovs-ofctl compose-packet 'in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=5,tp_dst=80'`
const TCP: &str = "000000000000000000000000080045000068000000000006a68e0a0000010a0000020005005000000000000000005000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn table() -> FlowTable {
    let mut t = FlowTable::from_rules(parse_flows(FLOWS).unwrap());
    for g in parse_groups(GROUPS).unwrap() {
        t.add_group(g).unwrap();
    }
    t.check_groups().unwrap();
    t.ports = Some((1..=4).collect());
    t
}

#[test]
fn all_indirect_ff_as_ovs() {
    let t = table();
    let k = flow::parse_exact_flow("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap();
    let tr = flow::trace(&t, &k, false);
    // each bucket on a clone: the rewrite is undone before the next bucket; the
    // rule's output:1 after the group is the input port (skipped)
    assert_eq!(
        tr.megaflow,
        "recirc_id=0,eth,udp,in_port=1,dl_dst=00:00:00:00:00:00,nw_frag=no"
    );
    assert_eq!(
        tr.actions,
        "set(eth(dst=00:00:00:00:00:07)),2,set(eth(dst=00:00:00:00:00:00)),3"
    );
    // fast failover: port 5 does not exist, port 3 is live
    let k = flow::parse_exact_flow("in_port=1,arp").unwrap();
    assert_eq!(flow::trace(&t, &k, false).actions, "3");
    let mut t2 = t.clone();
    t2.ports_down.insert(3);
    assert_eq!(flow::trace(&t2, &k, false).actions, "drop");
}

#[test]
fn select_recirculates_with_dp_hash_as_ovs() {
    let t = table();
    let k = FlowKey::from_packet(1, &hex(TCP));
    let tr = flow::trace(&t, &k, true);
    assert_eq!(tr.megaflow, "recirc_id=0,eth,tcp,in_port=1,nw_frag=no");
    assert_eq!(tr.actions, "hash(sym_l4(0)),recirc(0x1)");
    // OVS's datapath computed dp_hash(0xa4bdb3aa) for this frame; the second pass
    // (bucket 10 of 16 -> output:3, then the frozen output:3 and output:4):
    // `recirc_id(0x2),dp_hash(0xa4bdb3aa/0xf),in_port(1),...,ipv4(frag=no) actions:3,3,4`
    assert_eq!(flow::group::hash_sym_l4(&k, 0), 0xa4bd_b3aa);
    let passes = flow::trace_recirculations(&t, &k, true, 4);
    assert_eq!(passes.len(), 1);
    assert_eq!(passes[0].0, 0xa4bd_b3aa);
    assert_eq!(
        passes[0].1.megaflow,
        "recirc_id=0x1,dp_hash=0xa/0xf,eth,ip,in_port=1,nw_frag=no"
    );
    assert_eq!(passes[0].1.actions, "3,3,4");
}

#[test]
fn datapath_recirculates_and_credits_group_stats() {
    let mut t = table();
    let mut dp = Datapath::new();
    for i in 0..3 {
        let mut fr = hex(TCP);
        let ex = dp.receive_execute(&t, 1, &mut fr, 10 + i);
        let ports: Vec<u32> = ex.outputs.iter().map(|o| o.0).collect();
        assert_eq!(ports, [3, 3, 4]);
    }
    assert_eq!(dp.stats.recirculations, 3);
    assert_eq!(dp.stats.upcalls, 2, "two passes, each one upcall");
    assert_eq!(dp.n_flows(), 2);
    dp.push_stats(&mut t);
    let st = t.dump_group_stats();
    let g1 = st.iter().find(|l| l.starts_with("group_id=1,")).unwrap();
    let bytes = 3 * hex(TCP).len();
    assert!(
        g1.contains(&format!("packet_count=3,byte_count={bytes},"))
            && g1.contains(&format!("bucket1:packet_count=3,byte_count={bytes},")),
        "{g1}"
    );
    // a recirculation id that the table does not know (the table changed) is dropped
    let mut k = FlowKey::from_packet(1, &hex(TCP));
    k.set(f::RECIRC_ID, 77);
    let x = t.xlate(&k);
    assert_eq!(x.error, Some(flow::XlateError::NoRecircContext));
    assert!(x.actions.is_empty());
}

#[test]
fn bucket_actions_are_an_action_set() {
    // OVS ofpacts_execute_action_set: push_vlan before set_field, only the last output
    let mut t = FlowTable::from_rules(parse_flows("actions=group:1").unwrap());
    t.add_group(
        parse_groups(
            "group_id=1,type=indirect,bucket=output:2,set_field:4106->vlan_vid,push_vlan:0x8100,output:3",
        )
        .unwrap()
        .remove(0),
    )
    .unwrap();
    let k = flow::parse_exact_flow("in_port=1,ip").unwrap();
    assert_eq!(
        flow::trace(&t, &k, false).actions,
        "push_vlan(vid=10,pcp=0),3"
    );
}

#[test]
fn bad_groups_are_refused_or_bounded() {
    for (g, want) in [
        ("group_id=1,type=ff,bucket=output:1", "requires watch_port"),
        (
            "group_id=1,type=all,bucket=watch_port:1,output:1",
            "WATCH_UNSUPPORTED",
        ),
        (
            "group_id=1,type=all,bucket=weight:2,output:1",
            "weight only",
        ),
        (
            "group_id=1,type=indirect,bucket=output:1,bucket=output:2",
            "exactly one",
        ),
        ("group_id=1,type=all,bucket=controller", "not allowed"),
        (
            "group_id=1,type=fancy,bucket=output:1",
            "unknown group type",
        ),
        ("group_id=1,type=all,bucket=", "must specify actions"),
        ("type=all,bucket=output:1", "group_id"),
        (
            "group_id=1,type=select,selection_method=hash,bucket=output:1",
            "selection method",
        ),
    ] {
        let e = parse_groups(g).unwrap_err().to_string();
        assert!(e.contains(want), "{g}: {e}");
    }
    assert!(parse_groups(
        "group_id=1,type=all,bucket=output:1\ngroup_id=1,type=all,bucket=output:2"
    )
    .unwrap_err()
    .to_string()
    .contains("twice"));
    // a rule or a bucket naming a missing group
    let mut t = FlowTable::from_rules(parse_flows("actions=group:9").unwrap());
    assert!(t.check_groups().unwrap_err().contains("group 9"));
    t.add_group(
        parse_groups("group_id=9,type=all,bucket=group:8")
            .unwrap()
            .remove(0),
    )
    .unwrap();
    assert!(t.check_groups().unwrap_err().contains("group 8"));
    // a loop of groups: OVS's depth limit, the packet is dropped, no hang
    t.add_group(
        parse_groups("group_id=8,type=all,bucket=group:9")
            .unwrap()
            .remove(0),
    )
    .unwrap();
    t.check_groups().unwrap();
    let k = flow::parse_exact_flow("in_port=1,ip").unwrap();
    let tr = flow::trace(&t, &k, false);
    assert_eq!(tr.error, Some(flow::XlateError::RecursionTooDeep));
    assert_eq!(tr.actions, "drop");
    // deleting a group deletes the rules that use it (OpenFlow, as OVS)
    assert_eq!(t.del_group(Some(9)), 1);
    assert_eq!(t.len(), 0);
}

/// A megaflow made from an untagged frame never matches a tagged one (OVS's datapath
/// key tells them apart by structure even when the megaflow leaves the VLAN out); found
/// by the group-statistics oracle, where a tagged frame was counted on an untagged
/// frame's flow. The dump still prints no VLAN for it, as OVS.
#[test]
fn untagged_megaflow_does_not_match_tagged_frames() {
    let t = FlowTable::from_rules(parse_flows("ip,actions=output:2").unwrap());
    let mut dp = Datapath::new();
    let untagged = flow::parse_exact_flow("in_port=1,ip,nw_src=10.0.0.1").unwrap();
    let tagged = flow::parse_exact_flow("in_port=1,dl_vlan=30,ip,nw_src=10.0.0.1").unwrap();
    dp.process(&t, &untagged, 60, 1);
    let (_, hit) = dp.process(&t, &tagged, 64, 2);
    assert_eq!(hit, flow::dp::Hit::Upcall);
    assert_eq!(dp.n_flows(), 2);
    let d = dp.dump(3, 1.0);
    assert!(
        d.iter()
            .any(|l| l.starts_with("recirc_id=0,eth,ip,in_port=1,nw_frag=no,")),
        "{d:?}"
    );
}
