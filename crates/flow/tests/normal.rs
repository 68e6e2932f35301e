//! NORMAL (always run): decisions recorded from OVS 3.1 on the oracle's sandbox
//! (p1 tag=10, p2 tag=20, p3 trunks=10,20, p4 tag=10 trunks=20
//! vlan_mode=native-untagged, LOCAL as datapath port 100; OVS's flood order that run
//! 100,4,1,3,2), learning through the datapath, aging through the sweep. The
//! randomised comparison with a live OVS is `ovs_oracle.rs` (`normal_conformance_with_ovs`).

use flow::dp::Datapath;
use flow::normal::PortVlan;
use flow::{parse_flows, FlowTable};

fn table() -> FlowTable {
    let mut t = FlowTable::from_rules(parse_flows("actions=NORMAL").unwrap());
    t.ports = Some([1, 2, 3, 4, 100].into_iter().collect());
    let cfg = |p: u32| match p {
        1 => PortVlan::configure(Some(10), None, None),
        2 => PortVlan::configure(Some(20), None, None),
        3 => PortVlan::configure(None, Some(vec![10, 20]), None),
        4 => PortVlan::configure(Some(10), Some(vec![20]), Some("native-untagged")),
        _ => Ok(PortVlan::default()),
    };
    for p in [100, 4, 1, 3, 2] {
        t.bridge.set_port(p, cfg(p).unwrap());
    }
    t
}

fn tr(t: &FlowTable, flow: &str) -> (String, String) {
    let k = flow::parse_exact_flow(flow).unwrap();
    let x = flow::trace(t, &k, false);
    (x.megaflow, x.actions)
}

#[test]
fn flooding_with_vlan_translation_as_ovs() {
    let t = table();
    // tagged VLAN 10 on the trunk: LOCAL keeps the tag, p4 (native 10) and p1 (access)
    // get it untagged; p2 (VLAN 20) nothing
    assert_eq!(
        tr(&t, "in_port=3,dl_src=02:00:00:00:0a:03,dl_dst=01:00:5e:00:00:01,dl_vlan=10,dl_vlan_pcp=2,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2"),
        (
            "recirc_id=0,eth,ip,in_port=3,dl_vlan=10,dl_vlan_pcp=2,dl_src=02:00:00:00:0a:03,dl_dst=01:00:5e:00:00:01,nw_frag=no".into(),
            "100,pop_vlan,4,1".into()
        )
    );
    // untagged on the native-untagged port = VLAN 10
    assert_eq!(
        tr(&t, "in_port=4,dl_src=02:00:00:00:0a:04,dl_dst=02:00:00:00:14:01,arp,arp_op=1,arp_spa=10.0.0.5,arp_tpa=10.0.0.5"),
        (
            "recirc_id=0,eth,arp,in_port=4,dl_src=02:00:00:00:0a:04,dl_dst=02:00:00:00:14:01".into(),
            "push_vlan(vid=10,pcp=0),100,pop_vlan,1,push_vlan(vid=10,pcp=0),3".into()
        )
    );
    // a tagged frame on an access port, VLAN 30 on a trunk of 10,20: dropped
    let (_, a) = tr(
        &t,
        "in_port=1,dl_src=02:00:00:00:0a:01,dl_dst=ff:ff:ff:ff:ff:ff,dl_vlan=10,ip",
    );
    assert_eq!(a, "drop");
    let (_, a) = tr(
        &t,
        "in_port=3,dl_src=02:00:00:00:0a:03,dl_dst=ff:ff:ff:ff:ff:ff,dl_vlan=30,ip",
    );
    assert_eq!(a, "drop");
    // reserved multicast (STP) is not forwarded
    let (_, a) = tr(
        &t,
        "in_port=1,dl_src=02:00:00:00:0a:01,dl_dst=01:80:c2:00:00:00,ip",
    );
    assert_eq!(a, "drop");
    // broadcast ARP request: gratuitous-ARP check un-wildcards op, spa, tpa
    let (m, _) = tr(
        &t,
        "in_port=1,dl_src=02:00:00:00:0a:01,dl_dst=ff:ff:ff:ff:ff:ff,arp,arp_op=1",
    );
    assert_eq!(m, "recirc_id=0,eth,arp,in_port=1,dl_src=02:00:00:00:0a:01,dl_dst=ff:ff:ff:ff:ff:ff,arp_spa=0.0.0.0,arp_tpa=0.0.0.0,arp_op=1");
}

fn frame(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00, (v >> 8) as u8, v as u8]);
    }
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f.extend_from_slice(&[0u8; 46]);
    f
}

#[test]
fn learning_then_unicast_then_aging() {
    let mut t = table();
    t.bridge.ml.borrow_mut().idle_ms = 5_000;
    let mut dp = Datapath::new();
    let a = [2, 0, 0, 0, 0x0a, 1];
    let b = [2, 0, 0, 0, 0x0a, 3];
    let outs = |ex: &flow::exec::Executed| ex.outputs.iter().map(|o| o.0).collect::<Vec<_>>();
    // A (p1, VLAN 10) -> B unknown: flood in VLAN 10
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 10);
    assert_eq!(outs(&ex), [100, 4, 3]);
    assert_eq!(
        t.bridge
            .ml
            .borrow()
            .lookup(u64::from_be_bytes([0, 0, 2, 0, 0, 0, 0x0a, 1]), 10),
        Some(1)
    );
    // B (p3 tagged 10) -> A: unicast to p1, untagged
    let ex = dp.receive_execute(&t, 3, &mut frame(b, a, Some(10)), 20);
    assert_eq!(outs(&ex), [1]);
    assert_eq!(ex.outputs[0].1.len(), 60, "tag popped");
    // A -> B again: the flood megaflow was translated again when B was learned; now
    // unicast, tagged on the trunk
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 30);
    assert_eq!(outs(&ex), [3]);
    assert_eq!(&ex.outputs[0].1[12..16], &[0x81, 0x00, 0x00, 0x0a]);
    // traffic refreshes A (stats push), B stays idle and ages out after 5 s
    for now in [2_000u64, 4_000, 6_000] {
        dp.receive_execute(&t, 1, &mut frame(a, b, None), now);
        dp.sweep(&mut t, now, 10_000);
    }
    let show = t.bridge.ml.borrow().show(6_000);
    assert_eq!(show.len(), 2, "{show:?}");
    assert!(show[1].contains("02:00:00:00:0a:01"), "{show:?}");
    // B gone: A -> B floods again
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 6_100);
    assert_eq!(outs(&ex), [100, 4, 3]);
}

#[test]
fn mac_table_limit() {
    let t = table();
    t.bridge.ml.borrow_mut().max_entries = 4;
    let mut dp = Datapath::new();
    for i in 0..10u8 {
        let src = [2, 0, 0, 0, 1, i];
        dp.receive_execute(&t, 3, &mut frame(src, [0xff; 6], Some(20)), 10 + i as u64);
    }
    let ml = t.bridge.ml.borrow();
    assert_eq!(ml.entries.len(), 4);
    assert_eq!(ml.evicted, 6);
}

fn mac(m: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&m);
    u64::from_be_bytes(b)
}

/// (ufid, actions) of the megaflow for dl_src -> dl_dst.
fn mf(dp: &Datapath, src: [u8; 6], dst: [u8; 6]) -> (u64, String) {
    let fl = dp
        .flows()
        .find(|fl| {
            fl.key.get(flow::key::f::DL_SRC) == mac(src)
                && fl.key.get(flow::key::f::DL_DST) == mac(dst)
        })
        .expect("megaflow");
    (fl.ufid, flow::format_actions(&fl.actions))
}

#[test]
fn a_learned_moved_or_aged_mac_revalidates_only_the_megaflows_that_looked_it_up() {
    let mut t = table();
    t.bridge.ml.borrow_mut().idle_ms = 5_000;
    let mut dp = Datapath::new();
    let (a, b, c, d) = (
        [2, 0, 0, 0, 0x0a, 1],
        [2, 0, 0, 0, 0x0a, 3],
        [2, 0, 0, 0, 0x0a, 5],
        [2, 0, 0, 0, 0x0a, 6],
    );
    let (e, g) = ([2, 0, 0, 0, 0x14, 1], [2, 0, 0, 0, 0x14, 2]);
    let outs = |ex: &flow::exec::Executed| ex.outputs.iter().map(|o| o.0).collect::<Vec<_>>();
    // A -> B and C -> D (p1, VLAN 10), E -> G (p2, VLAN 20): all flood
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 10);
    assert_eq!(outs(&ex), [100, 4, 3]);
    dp.receive_execute(&t, 1, &mut frame(c, d, None), 11);
    dp.receive_execute(&t, 2, &mut frame(e, g, None), 12);
    assert_eq!(dp.n_flows(), 3);
    assert_eq!(
        dp.stats.mac_revalidated, 0,
        "no megaflow looked up A, C or E"
    );
    let (ab, ab_flood) = mf(&dp, a, b);
    let cd = mf(&dp, c, d);
    let eg = mf(&dp, e, g);
    // B (p3, tagged 10) -> A: the upcall learns B; only A -> B looked B up
    let ex = dp.receive_execute(&t, 3, &mut frame(b, a, Some(10)), 20);
    assert_eq!(outs(&ex), [1]);
    assert_eq!(dp.stats.mac_revalidated, 1);
    assert_eq!(dp.n_flows(), 4, "nothing flushed");
    assert_eq!(mf(&dp, a, b), (ab, "push_vlan(vid=10,pcp=0),3".to_string()));
    assert_eq!(mf(&dp, c, d), cd, "C -> D untouched");
    assert_eq!(mf(&dp, e, g), eg, "E -> G untouched");
    // A -> B: a cache hit (no upcall) that now goes to p3 only
    let up = dp.stats.upcalls;
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 30);
    assert_eq!(outs(&ex), [3]);
    assert_eq!(dp.stats.upcalls, up);
    // B moves to p4 (native-untagged 10): A -> B modified again, in place
    dp.receive_execute(&t, 4, &mut frame(b, a, None), 40);
    assert_eq!(dp.stats.mac_revalidated, 2);
    assert_eq!(mf(&dp, a, b), (ab, "4".to_string()));
    let ex = dp.receive_execute(&t, 1, &mut frame(a, b, None), 50);
    assert_eq!(outs(&ex), [4]);
    assert_eq!(dp.stats.upcalls, up + 1, "only B's move was an upcall");
    // A kept alive by traffic; B ages out at 5 s: the sweep revalidates A -> B only
    dp.receive_execute(&t, 1, &mut frame(a, b, None), 3_000);
    let sw = dp.sweep(&mut t, 3_000, 10_000);
    assert_eq!(sw.mac_revalidated, 0);
    let sw = dp.sweep(&mut t, 6_000, 10_000);
    assert_eq!(t.bridge.ml.borrow().lookup(mac(b), 10), None, "B aged out");
    assert_eq!(
        (sw.mac_revalidated, sw.modified, sw.kept, sw.deleted_changed),
        (1, 1, 0, 0),
        "{sw:?}"
    );
    assert_eq!(mf(&dp, a, b), (ab, ab_flood), "back to flooding");
    assert_eq!(mf(&dp, c, d), cd);
}
