//! Offload pipeline + revalidator through the datapath: offload threads, hardware
//! and mark paths, stats merged from hardware (at most every offloaded-stats-delay),
//! flows kept / modified / deleted after table changes (no flush), idle expiry and
//! the flow limit on a made-up clock, failing providers.

use flow::dp::Datapath;
use flow::offload::nic::NicConfig;
use flow::offload::tc::TcPolicy;
use flow::offload::{Offload, OffloadConfig, OffloadState};
use flow::revalidator::{Revalidator, RevalidatorConfig};
use flow::{parse_flows, FlowTable};

/// An Ethernet/IPv4/UDP or TCP frame with valid checksums.
fn frame(tcp: bool, src_port: u16, dst_port: u16, dst_ip: [u8; 4]) -> Vec<u8> {
    let l4 = if tcp { 20 } else { 8 };
    let mut p = vec![0u8; 14 + 20 + l4 + 6];
    p[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[12..14].copy_from_slice(&[0x08, 0]);
    p[14] = 0x45;
    let tl = (20 + l4 + 6) as u16;
    p[16..18].copy_from_slice(&tl.to_be_bytes());
    p[22] = 64;
    p[23] = if tcp { 6 } else { 17 };
    p[26..30].copy_from_slice(&[10, 0, 0, 1]);
    p[30..34].copy_from_slice(&dst_ip);
    p[34..36].copy_from_slice(&src_port.to_be_bytes());
    p[36..38].copy_from_slice(&dst_port.to_be_bytes());
    if tcp {
        p[46] = 0x50;
        p[47] = 0x10;
    } else {
        p[38..40].copy_from_slice(&((l4 + 6) as u16).to_be_bytes());
        p[40] = 0xff; // non-zero checksum placeholder, fixed below
    }
    flow::exec::fix_checksums(&mut p);
    p
}

fn offload(priority: &str, threads: usize, nic: NicConfig, policy: TcPolicy) -> Offload {
    Offload::new(OffloadConfig {
        enabled: true,
        priority: priority.split(',').map(String::from).collect(),
        n_threads: threads,
        nic,
        tc_policy: policy,
        ..Default::default()
    })
    .unwrap()
}

/// Waits until the offload threads have answered every queued op (bounded).
fn settle(dp: &mut Datapath) {
    let t = std::time::Instant::now();
    loop {
        dp.offload_poll();
        let pending = dp.flows().any(|f| f.offload == OffloadState::Pending);
        if !pending && dp.offload().is_none_or(|o| o.queued() == 0) {
            return;
        }
        assert!(t.elapsed().as_secs() < 20, "offload threads did not answer");
        std::thread::yield_now();
    }
}

fn table(rules: &str) -> FlowTable {
    FlowTable::from_rules(parse_flows(rules).unwrap())
}

#[test]
fn offload_threads_full_and_partial_then_hardware_and_mark_paths() {
    let t = table(
        "priority=10,udp,actions=mod_nw_dst:10.9.9.9,output:2\npriority=5,tcp,actions=controller,output:3\n",
    );
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "tc,rte",
        2,
        NicConfig::default(),
        TcPolicy::None,
    )));
    let udp = frame(false, 1000, 53, [10, 0, 0, 7]);
    let tcp = frame(true, 1000, 80, [10, 0, 0, 8]);
    let sw_udp = dp.receive_execute(&t, 1, &mut udp.clone(), 1);
    let sw_tcp = dp.receive_execute(&t, 1, &mut tcp.clone(), 1);
    assert_eq!(dp.stats.upcalls, 2);
    settle(&mut dp);
    let states: Vec<OffloadState> = dp.flows().map(|f| f.offload.clone()).collect();
    assert!(
        states.contains(&OffloadState::Full {
            provider: 0,
            in_hw: true
        }),
        "{states:?}"
    );
    // tc refuses the controller action; rte takes the match with a MARK.
    assert!(
        states
            .iter()
            .any(|s| matches!(s, OffloadState::Partial { provider: 1, .. })),
        "{states:?}"
    );
    let hw = dp.receive_execute(&t, 1, &mut udp.clone(), 2);
    assert_eq!(hw.outputs, sw_udp.outputs);
    assert_eq!(dp.stats.hw_forwarded, 1);
    let marked = dp.receive_execute(&t, 1, &mut tcp.clone(), 2);
    assert_eq!(marked, sw_tcp);
    assert_eq!(dp.stats.mark_hits, 1);
    assert_eq!(dp.stats.upcalls, 2);
    assert_eq!(
        dp.stats.emc_hits + dp.stats.megaflow_hits,
        0,
        "no classifier lookup"
    );
    let d = dp.dump(2, 1.0).join("\n");
    assert!(d.contains("offloaded:yes, dp:tc"), "{d}");
    assert!(d.contains("offloaded:partial, dp:rte"), "{d}");
    let text = dp.offload().unwrap().stats_text();
    assert!(text.contains("full 1 partial 1 failed 0"), "{text}");
    assert!(
        text.contains("tc: unsupported (controller action): 1"),
        "{text}"
    );
}

#[test]
fn hardware_stats_merged_at_most_every_stats_delay() {
    let mut t = table("priority=10,udp,actions=output:2\n");
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "rte",
        0,
        NicConfig::default(),
        TcPolicy::None,
    )));
    let mut rv = Revalidator::new(RevalidatorConfig {
        offloaded_stats_delay_ms: 2000,
        dump_interval_ms: 500,
        ..Default::default()
    });
    let udp = frame(false, 1, 2, [10, 0, 0, 1]);
    let len = udp.len() as u64;
    dp.receive_execute(&t, 1, &mut udp.clone(), 100); // upcall (credited to the rule)
    dp.offload_poll();
    for now in [200, 300, 400] {
        dp.receive_execute(&t, 1, &mut udp.clone(), now);
    }
    assert_eq!(dp.stats.hw_forwarded, 3);
    assert!(!rv.due(400) || rv.rounds == 0);
    let sw = rv.tick(&mut dp, &mut t, 500).unwrap();
    assert!(sw.hw_queried);
    let rid = *t.rules.keys().next().unwrap();
    assert_eq!(t.rule_stats(rid).unwrap().packets, 4);
    assert_eq!(t.rule_stats(rid).unwrap().bytes, 4 * len);
    assert!(
        rv.tick(&mut dp, &mut t, 700).is_none(),
        "not due before 1000"
    );
    dp.receive_execute(&t, 1, &mut udp.clone(), 900);
    dp.receive_execute(&t, 1, &mut udp.clone(), 950);
    let sw = rv.tick(&mut dp, &mut t, 1000).unwrap();
    assert!(
        !sw.hw_queried,
        "stats delay: hardware not read again before 2500"
    );
    assert_eq!(t.rule_stats(rid).unwrap().packets, 4);
    let sw = rv.tick(&mut dp, &mut t, 2500).unwrap();
    assert!(sw.hw_queried);
    assert_eq!(t.rule_stats(rid).unwrap().packets, 6);
    assert_eq!(t.rule_stats(rid).unwrap().used, 950);
    let d = dp.dump(2500, 1.0).join("");
    assert!(d.contains("packets:5,"), "{d}"); // hw packets in the megaflow (upcall's not)
}

#[test]
fn table_change_keeps_modifies_or_deletes_each_megaflow() {
    let mut t =
        table("priority=10,udp,tp_dst=80,actions=output:2\npriority=5,tcp,actions=output:3\n");
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "rte",
        0,
        NicConfig::default(),
        TcPolicy::None,
    )));
    let u80 = frame(false, 1, 80, [10, 0, 0, 1]);
    let u81 = frame(false, 1, 81, [10, 0, 0, 1]);
    let tcp = frame(true, 5, 22, [10, 0, 0, 1]);
    for f in [&u80, &u81, &tcp] {
        dp.receive_execute(&t, 1, &mut f.clone(), 10);
    }
    dp.offload_poll();
    assert_eq!(dp.n_flows(), 3);
    let ufid = |dp: &Datapath, port: u16| {
        dp.flows()
            .find(|f| f.orig_key.tp_dst() == port)
            .map(|f| f.ufid)
    };
    let (a, b, c) = (
        ufid(&dp, 80).unwrap(),
        ufid(&dp, 81).unwrap(),
        ufid(&dp, 22).unwrap(),
    );
    // Rule actions changed (same match + priority replaces) and a new tcp rule that
    // needs tp_src, which the tcp megaflow did not look at.
    for r in parse_flows(
        "priority=10,udp,tp_dst=80,actions=output:4\npriority=20,tcp,tp_src=5,actions=drop\n",
    )
    .unwrap()
    {
        t.add_at(r, 20);
    }
    dp.table_changed();
    let sw = dp.sweep(&mut t, 30, 10_000);
    assert_eq!(
        (sw.modified, sw.deleted_changed, sw.kept),
        (1, 1, 1),
        "{sw:?}"
    );
    assert_eq!(dp.n_flows(), 2);
    assert!(dp.flow_by_ufid(c).is_none(), "tcp megaflow deleted");
    let fa = dp.flow_by_ufid(a).unwrap();
    assert_eq!(flow::format_actions(&fa.actions), "4");
    assert!(
        dp.flow_by_ufid(b).is_some(),
        "unrelated megaflow kept, same ufid"
    );
    dp.offload_poll();
    assert_eq!(
        dp.offload().unwrap().providers()[0].len(),
        2,
        "the deleted flow left the NIC"
    );
    // The modified flow is offloaded with its new actions: the NIC sends to 4.
    let hw0 = dp.stats.hw_forwarded;
    let ex = dp.receive_execute(&t, 1, &mut u80.clone(), 40);
    assert_eq!(dp.stats.hw_forwarded, hw0 + 1);
    assert_eq!(ex.outputs[0].0, 4);
    // The tcp packet: upcall, now dropped by the new rule.
    let up = dp.stats.upcalls;
    let ex = dp.receive_execute(&t, 1, &mut tcp.clone(), 40);
    assert_eq!((dp.stats.upcalls, ex.outputs.len()), (up + 1, 0));
    // No table change: nothing is translated again.
    let sw = dp.sweep(&mut t, 50, 10_000);
    assert_eq!((sw.modified, sw.deleted_changed, sw.kept), (0, 0, 0));
}

#[test]
fn idle_expiry_counts_hardware_use_on_a_made_up_clock() {
    let mut t = table("priority=10,udp,actions=output:2\npriority=5,tcp,actions=output:3\n");
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "tc",
        0,
        NicConfig::default(),
        TcPolicy::SkipSw,
    )));
    let mut rv = Revalidator::new(RevalidatorConfig::default()); // max-idle 10 s
    let udp = frame(false, 1, 2, [10, 0, 0, 1]);
    let tcp = frame(true, 1, 2, [10, 0, 0, 1]);
    dp.receive_execute(&t, 1, &mut udp.clone(), 1000);
    dp.receive_execute(&t, 1, &mut tcp.clone(), 1000);
    dp.offload_poll();
    // Only the NIC sees the udp flow's later packets.
    dp.receive_execute(&t, 1, &mut udp.clone(), 9000);
    assert_eq!(dp.stats.hw_forwarded, 1);
    let sw = rv.run(&mut dp, &mut t, 10_999);
    assert_eq!((sw.megaflows_expired, dp.n_flows()), (0, 2));
    let sw = rv.run(&mut dp, &mut t, 11_000);
    assert_eq!(
        sw.megaflows_expired, 1,
        "tcp: installed at 1000, idle since"
    );
    assert_eq!(dp.n_flows(), 1);
    assert_eq!(dp.offload().unwrap().providers()[0].len(), 1);
    // The udp flow's last NIC packet (at 12 s) is read before it is deleted and
    // credited to its rule at the next round.
    dp.receive_execute(&t, 1, &mut udp.clone(), 12_000);
    let udp_rule = *t.rules.iter().find(|(_, r)| r.priority == 10).unwrap().0;
    let before = t.rule_stats(udp_rule).unwrap().packets;
    let mut rv2 = Revalidator::new(RevalidatorConfig {
        offloaded_stats_delay_ms: u64::MAX / 4,
        ..Default::default()
    });
    rv2.run(&mut dp, &mut t, 12_500); // first round reads hardware; later ones not
    dp.receive_execute(&t, 1, &mut udp.clone(), 13_000);
    let sw = rv2.run(&mut dp, &mut t, 23_001);
    assert!(!sw.hw_queried);
    assert_eq!((sw.megaflows_expired, dp.n_flows()), (1, 0));
    rv2.run(&mut dp, &mut t, 23_600);
    assert_eq!(t.rule_stats(udp_rule).unwrap().packets, before + 2);
    dp.offload_poll();
    assert_eq!(dp.offload().unwrap().providers()[0].len(), 0);
}

#[test]
fn flow_limit_shortens_idle_then_deletes_everything() {
    let mut t = table("priority=10,udp,actions=output:2\n");
    let mut dp = Datapath::new();
    let mut rv = Revalidator::new(RevalidatorConfig {
        flow_limit: 1000,
        ..Default::default()
    });
    let install = |dp: &mut Datapath, n: u16, now: u64| {
        for i in 0..n {
            // exact-ish megaflows: one per destination port
            let mut k = flow::FlowKey::ZERO;
            k.set(flow::key::f::IN_PORT, 1);
            k.set(flow::key::f::TP_DST, i as u64);
            let mut m = k;
            m.w = [0; flow::key::NW];
            m.full(flow::key::f::IN_PORT);
            m.full(flow::key::f::TP_DST);
            dp.install(&k, &m, vec![flow::OdpAction::Output(2)]);
        }
        let _ = now;
    };
    install(&mut dp, 1500, 0);
    assert_eq!(dp.n_flows(), 1500);
    let p = rv.params(1000, dp.n_flows());
    assert_eq!((p.max_idle, p.kill_all), (100, false));
    let sw = rv.run(&mut dp, &mut t, 1000); // installed at 0: idle > 100 ms
    assert_eq!((sw.megaflows_expired, dp.n_flows()), (1500, 0));
    install(&mut dp, 2500, 0);
    let sw = rv.run(&mut dp, &mut t, 50);
    assert_eq!((sw.deleted_limit, dp.n_flows()), (2500, 0));
    // Dynamic limit (OVS udpif_revalidator).
    let mut rv = Revalidator::new(RevalidatorConfig {
        flow_limit: 200_000,
        ..Default::default()
    });
    rv.update_flow_limit(4000, 100_000);
    assert_eq!(rv.flow_limit, 50_000);
    rv.update_flow_limit(1500, 40_000);
    assert_eq!(rv.flow_limit, 37_500);
    rv.update_flow_limit(500, 40_000);
    assert_eq!(rv.flow_limit, 38_500);
    rv.update_flow_limit(500, 1000);
    assert_eq!(rv.flow_limit, 38_500, "few flows: unchanged");
    for _ in 0..100 {
        rv.update_flow_limit(5000, 1);
    }
    assert_eq!(rv.flow_limit, 1000, "floor");
}

#[test]
fn failing_provider_mid_batch_and_full_nic_leave_flows_in_software() {
    let t = table("priority=10,udp,actions=output:9\n");
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "rte",
        1,
        NicConfig {
            fail_after: Some(3),
            ..Default::default()
        },
        TcPolicy::None,
    )));
    let frames: Vec<Vec<u8>> = (0..6)
        .map(|i| frame(false, 1, 100 + i, [10, 0, 0, 1]))
        .collect();
    // in_port differs per flow so each frame is its own megaflow
    for (i, f) in frames.iter().enumerate() {
        dp.receive_execute(&t, 1 + i as u32, &mut f.clone(), 1);
    }
    settle(&mut dp);
    let full = dp
        .flows()
        .filter(|f| matches!(f.offload, OffloadState::Full { .. }))
        .count();
    let failed: Vec<String> = dp
        .flows()
        .filter_map(|f| match &f.offload {
            OffloadState::Failed(why) => Some(why.clone()),
            _ => None,
        })
        .collect();
    assert_eq!((full, failed.len()), (3, 3));
    assert!(
        failed[0].starts_with("rte: device error: injected failure"),
        "{failed:?}"
    );
    assert_eq!(
        dp.offload().unwrap().providers()[0].len(),
        3,
        "nothing half-installed"
    );
    // Every flow still forwards (3 by the NIC, 3 in software).
    let hw0 = dp.stats.hw_forwarded;
    for (i, f) in frames.iter().enumerate() {
        let ex = dp.receive_execute(&t, 1 + i as u32, &mut f.clone(), 2);
        assert_eq!(ex.outputs.len(), 1);
        assert_eq!(ex.outputs[0].0, 9);
    }
    assert_eq!(dp.stats.hw_forwarded - hw0, 3);
    let d = dp.dump(2, 1.0).join("\n");
    assert!(
        d.contains("offloaded:no (rte: device error: injected failure"),
        "{d}"
    );
    // A full tc table (skip_sw) falls back to the next provider.
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "tc,rte",
        0,
        NicConfig {
            capacity: 2,
            ..Default::default()
        },
        TcPolicy::SkipSw,
    )));
    for (i, f) in frames.iter().take(3).enumerate() {
        dp.receive_execute(&t, 1 + i as u32, &mut f.clone(), 1);
    }
    dp.offload_poll();
    let prov: Vec<u8> = dp
        .flows()
        .filter_map(|f| match f.offload {
            OffloadState::Full { provider, .. } => Some(provider),
            _ => None,
        })
        .collect();
    assert_eq!(prov, vec![0, 0, 1]);
    let text = dp.offload().unwrap().stats_text();
    assert!(text.contains("failures tc: table full: 1"), "{text}");
}

/// Forwarding only enqueues: with a NIC that takes 1 ms per insert (1.5 s of offload
/// work for 1500 flows) the 1500 new flows are forwarded long before the offload
/// thread is done (bound: 0.7 s; ~0.05 s on the loaded 2-core machine), and the NIC
/// is not locked during an insert's cost (else each lookup would wait for it).
#[test]
fn forwarding_never_waits_for_the_offload_thread() {
    let t = table("priority=10,udp,actions=output:9\n");
    let mut dp = Datapath::new();
    dp.set_offload(Some(offload(
        "rte",
        1,
        NicConfig {
            insert_cost: std::time::Duration::from_millis(1),
            ..Default::default()
        },
        TcPolicy::None,
    )));
    let frames: Vec<Vec<u8>> = (0..1500u32)
        .map(|i| {
            frame(
                false,
                (i % 60000) as u16,
                7,
                [10, 0, (i >> 8) as u8, i as u8],
            )
        })
        .collect();
    let t0 = std::time::Instant::now();
    for (i, f) in frames.iter().enumerate() {
        // one megaflow per frame: in_port differs
        let ex = dp.receive_execute(&t, 10 + i as u32, &mut f.clone(), 1);
        assert_eq!(ex.outputs.len(), 1);
        dp.offload_poll();
    }
    let took = t0.elapsed();
    let queued = dp.offload().unwrap().queued();
    assert_eq!(dp.n_flows(), 1500);
    assert!(took.as_millis() < 700, "forwarding took {took:?}");
    assert!(
        queued > 700,
        "only {queued} ADDs still queued: the offload thread kept up?"
    );
    let pending = dp
        .flows()
        .filter(|f| f.offload == OffloadState::Pending)
        .count();
    assert!(pending > 700, "{pending}");
}

/// OVS's handlers install no datapath flow once the datapath holds flow_limit
/// flows (`upcall_flow_limit_hit`): the packet is still executed (slow path) and
/// credited to its rule; the revalidator hands its (dynamic) limit to the datapath.
#[test]
fn upcalls_past_the_flow_limit_run_in_the_slow_path() {
    let mut t = table("priority=10,udp,actions=output:2\n");
    let udp_rule = *t.rules.iter().find(|(_, r)| r.priority == 10).unwrap().0;
    let mut dp = Datapath::new();
    let mut rv = Revalidator::new(RevalidatorConfig {
        flow_limit: 1000,
        ..Default::default()
    });
    rv.run(&mut dp, &mut t, 0);
    assert_eq!(dp.flow_limit, 1000);
    // the rule looks at no port or address: one megaflow per in_port
    let mut outputs = 0;
    for i in 0..1200u32 {
        let mut f = frame(false, 1000, 53, [10, 0, 0, 2]);
        let ex = dp.receive_execute(&t, 3 + i, &mut f, 10); // not port 2 (output to in_port is dropped)
        outputs += ex.outputs.len();
    }
    assert_eq!(outputs, 1200, "every packet forwarded, installed or not");
    assert_eq!(dp.n_flows(), 1000, "nothing installed past the limit");
    assert_eq!(dp.stats.flow_limit_hits, 200);
    rv.run(&mut dp, &mut t, 20);
    assert_eq!(
        t.rule_stats(udp_rule).unwrap().packets,
        1200,
        "slow-path packets are credited to their rule"
    );
    assert_eq!(dp.stats.uncredited, 0);
}
