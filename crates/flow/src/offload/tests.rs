//! Translation unit tests (rte and tc, refusals included), the emulated NIC's limits
//! and failures, and the property: full-offloaded forwarding == software forwarding.

use super::nic::{HwOp, NicConfig, PeditHdr};
use super::rte::{self, RteProvider};
use super::tc::{self, TcAction, TcPolicy, TcProvider};
use super::*;
use crate::bench::{frame_for, Rng};
use crate::key::{f, FlowKey, VLAN_CFI};
use crate::ofctl::{parse_exact_flow, parse_flows};
use crate::xlate::{FlowTable, OdpAction};

/// The megaflow of `flow` (ovs flow string) through `rules`, as the datapath installs it.
fn megaflow(rules: &str, flow: &str) -> (FlowKey, FlowSpec) {
    let t = FlowTable::from_rules(parse_flows(rules).unwrap());
    let k = parse_exact_flow(flow).unwrap();
    spec_of(&t, &k)
}

fn spec_of(t: &FlowTable, k: &FlowKey) -> (FlowKey, FlowSpec) {
    let mut x = t.xlate(k);
    x.wc.or(f::VLAN0_TCI, VLAN_CFI as u64);
    (
        *k,
        FlowSpec {
            key: k.and(&x.wc),
            mask: x.wc,
            actions: x.actions,
        },
    )
}

fn unsupported(e: OffloadError) -> String {
    match e {
        OffloadError::Unsupported(s) => s,
        e => panic!("expected a refusal, got {e:?}"),
    }
}

#[test]
fn rte_translates_tcp_flow_with_rewrites_fully() {
    let (_, s) = megaflow(
        "priority=10,tcp,nw_dst=10.0.0.0/24,tp_dst=80,actions=mod_dl_dst:02:00:00:00:00:09,dec_ttl,output:2\n",
        "in_port=1,tcp,nw_src=1.2.3.4,nw_dst=10.0.0.9,nw_ttl=64,tp_src=1000,tp_dst=80",
    );
    let (fl, how) = rte::translate(&s, 7).unwrap();
    assert_eq!(
        rte::translate_actions(&s.actions).map(|_| ()),
        Ok(()),
        "{:?}",
        s.actions
    );
    assert_eq!(how, Offloaded::Full { in_hw: true });
    assert_eq!(fl.attr.port_id, 1);
    assert_eq!(fl.attr.group, 0);
    assert!(matches!(
        fl.pattern[0],
        rte::Item::Eth {
            has_vlan: (false, true),
            ty: (0x0800, 0xffff),
            ..
        }
    ));
    assert!(
        matches!(
            fl.pattern[1],
            rte::Item::Ipv4 {
                dst: (0x0a00_0000, 0xffff_ff00),
                proto: (6, 0xff),
                frag: (0, 0, 0x3fff),
                ..
            }
        ),
        "{:?}",
        fl.pattern
    );
    assert!(matches!(
        fl.pattern[2],
        rte::Item::Tcp {
            dst: (80, 0xffff),
            ..
        }
    ));
    assert_eq!(
        fl.actions,
        vec![
            rte::Action::SetMacDst(0x0200_0000_0009),
            rte::Action::SetTtl(63),
            rte::Action::PortId(2),
            rte::Action::Count
        ]
    );
    // What the NIC programs is exactly the megaflow.
    let (k, m) = rte::decode_match(&fl.attr, &fl.pattern);
    assert_eq!((k, m), (s.key, s.mask));
}

#[test]
fn rte_refuses_what_it_cannot_express() {
    // A select group's second pass matches dp_hash: no item for it.
    let mut s = megaflow("priority=1,udp,actions=output:2\n", "in_port=1,udp").1;
    s.mask.or(f::DP_HASH, 0xf);
    assert_eq!(
        unsupported(rte::translate(&s, 1).unwrap_err()),
        "match on dp_hash not expressible"
    );
    // IPv6 flow label.
    let mut s = megaflow("priority=1,ipv6,actions=output:2\n", "in_port=1,ipv6").1;
    s.mask.full(f::IPV6_LABEL);
    assert!(unsupported(rte::translate(&s, 1).unwrap_err()).contains("ipv6_label"));
    // TCP flags beyond the 8 bits of the rte TCP item.
    let (_, s) = megaflow(
        "priority=1,tcp,tcp_flags=+syn+ack,actions=output:2\n",
        "in_port=1,tcp,tcp_flags=0x012",
    );
    let r = rte::translate(&s, 1);
    if s.mask.get(f::TCP_FLAGS) > 0xff {
        assert!(unsupported(r.unwrap_err()).contains("tcp_flags"));
    } else {
        r.unwrap();
    }
    let mut s2 = s.clone();
    s2.mask.set(f::TCP_FLAGS, 0xfff);
    assert!(unsupported(rte::translate(&s2, 1).unwrap_err()).contains("tcp_flags"));
    // ARP fields (no ARP item here).
    let (_, s) = megaflow(
        "priority=1,arp,arp_tpa=10.0.0.1,actions=output:2\n",
        "in_port=1,arp,arp_tpa=10.0.0.1",
    );
    assert!(unsupported(rte::translate(&s, 1).unwrap_err()).contains("nw_dst"));
    // No in_port: rte flows live on a port.
    let mut s = megaflow("priority=1,udp,actions=output:2\n", "in_port=1,udp").1;
    s.mask.set(f::IN_PORT, 0);
    assert!(unsupported(rte::translate(&s, 1).unwrap_err()).contains("in_port"));
    // A partially masked in_port.
    s.mask.set(f::IN_PORT, 0xff);
    assert!(unsupported(rte::translate(&s, 1).unwrap_err()).contains("exactly"));
}

#[test]
fn rte_partial_offload_when_actions_do_not_translate() {
    // Controller action, ECN rewrite, partial MAC rewrite: match in hw + MARK.
    for acts in [
        vec![OdpAction::Controller {
            reason: 1,
            dont_send: false,
            recirc_id: 0,
            cookie: 0,
            max_len: 65535,
            table_id: 0,
        }],
        vec![
            OdpAction::SetIpv4 {
                src: (0, 0),
                dst: (0, 0),
                tos: (1, 3),
                ttl: (0, 0),
            },
            OdpAction::Output(2),
        ],
        vec![
            OdpAction::SetEth {
                src: (0, 0),
                dst: (0x0200_0000_0000, 0xffff_0000_0000),
            },
            OdpAction::Output(2),
        ],
    ] {
        let (k, mut s) = megaflow(
            "priority=1,udp,actions=output:2\n",
            "in_port=1,udp,nw_dst=10.1.1.1,tp_dst=9",
        );
        s.actions = acts.clone();
        assert!(rte::translate_actions(&acts).is_err());
        let (fl, how) = rte::translate(&s, 42).unwrap_or_else(|e| panic!("{acts:?}: {e}"));
        assert_eq!(how, Offloaded::Partial { mark: 42 }, "{acts:?}");
        assert_eq!(
            fl.actions,
            vec![rte::Action::Mark(42), rte::Action::Rss, rte::Action::Count]
        );
        let p = RteProvider::new(NicConfig::default());
        assert_eq!(p.put(5, &s, 42).unwrap(), Offloaded::Partial { mark: 42 });
        let mut fr = udp_frame(&k);
        assert_eq!(p.rx(1, &mut fr, 3), HwRx::Mark(42));
    }
    // Partial offload off: refused.
    let (_, s) = megaflow("priority=1,udp,actions=controller\n", "in_port=1,udp");
    let mut p = RteProvider::new(NicConfig::default());
    p.partial = false;
    assert!(unsupported(p.put(1, &s, 1).unwrap_err()).contains("partial offload off"));
    assert_eq!(p.len(), 0);
}

fn udp_frame(k: &FlowKey) -> Vec<u8> {
    let mut k = *k;
    k.set(f::NW_PROTO, 17);
    let mut fr = frame_for(&k);
    crate::exec::fix_checksums(&mut fr);
    fr
}

#[test]
fn nic_limits_failures_and_count_query_reset() {
    let (k, s) = megaflow(
        "priority=1,udp,tp_dst=9,actions=output:2\n",
        "in_port=1,udp,nw_dst=10.1.1.1,tp_dst=9",
    );
    // Supported-field set without tp_dst.
    let cfg = NicConfig {
        fields: field_mask(&[
            "in_port",
            "recirc_id",
            "dl_type",
            "vlan_tci",
            "nw_proto",
            "nw_frag",
        ])
        .unwrap(),
        ..Default::default()
    };
    let p = RteProvider::new(cfg);
    let e = p.put(1, &s, 1).unwrap_err();
    assert_eq!(
        e,
        OffloadError::Unsupported("NIC cannot match tp_dst".into())
    );
    assert_eq!(p.len(), 0);
    // Capacity.
    let p = RteProvider::new(NicConfig {
        capacity: 1,
        ..Default::default()
    });
    p.put(1, &s, 1).unwrap();
    let mut s2 = s.clone();
    s2.key.set(f::TP_DST, 10);
    assert_eq!(p.put(2, &s2, 2).unwrap_err(), OffloadError::TableFull(1));
    // MOD of the existing flow fits (it replaces itself).
    p.put(1, &s2, 1).unwrap();
    assert_eq!(p.len(), 1);
    // Injected failure of the 2nd insert; mid-batch breakage after 3.
    let p = RteProvider::new(NicConfig {
        fail_nth_insert: Some(2),
        ..Default::default()
    });
    p.put(1, &s, 1).unwrap();
    assert!(matches!(p.put(2, &s2, 2), Err(OffloadError::Device(_))));
    p.put(3, &s2, 3).unwrap();
    let p = RteProvider::new(NicConfig {
        fail_after: Some(3),
        ..Default::default()
    });
    let ok = (0..6)
        .filter(|i| {
            let mut si = s.clone();
            si.key.set(f::TP_DST, 100 + i);
            p.put(*i, &si, *i as u32).is_ok()
        })
        .count();
    assert_eq!((ok, p.len()), (3, 3));
    // COUNT: query and reset.
    let p = RteProvider::new(NicConfig::default());
    p.put(9, &s, 9).unwrap();
    let fr = udp_frame(&k);
    for t in 1..=3 {
        match p.rx(1, &mut fr.clone(), t) {
            HwRx::Done(ex) => assert_eq!(ex.outputs[0].0, 2),
            r => panic!("{r:?}"),
        }
    }
    let st = p.stats(9, true).unwrap();
    assert_eq!((st.packets, st.bytes, st.used), (3, 3 * fr.len() as u64, 3));
    assert_eq!(p.stats(9, false).unwrap().packets, 0);
    assert_eq!(p.del(9).unwrap().packets, 0);
    assert_eq!(p.del(9), Err(OffloadError::NotFound(9)));
    assert_eq!(p.rx(1, &mut fr.clone(), 4), HwRx::Miss);
}

#[test]
fn tc_translates_vlan_match_pedit_and_allocates_prio_chain_cookie() {
    let (k, s) = megaflow(
        "priority=5,udp,dl_vlan=10,actions=strip_vlan,mod_nw_dst:10.9.9.9,mod_tp_dst:99,output:3,output:4\n",
        "in_port=2,dl_vlan=10,udp,nw_dst=10.1.1.1,tp_dst=7",
    );
    let p = TcProvider::new(NicConfig::default(), TcPolicy::SkipSw);
    assert_eq!(p.put(77, &s, 0).unwrap(), Offloaded::Full { in_hw: true });
    let (fl, in_hw) = p.filter(77).unwrap();
    assert!(in_hw);
    assert_eq!((fl.chain, fl.cookie, fl.policy), (0, 77, TcPolicy::SkipSw));
    assert_eq!(fl.key.indev, 2);
    assert_eq!(fl.key.protocol, Some(0x8100));
    assert_eq!(fl.key.vlan_id, Some(10));
    assert_eq!(fl.key.vlan_ethtype, Some(0x0800));
    assert_eq!(fl.key.ip_proto, Some(17));
    // commit order (as OVS): eth, ip, l4 sets, then VLAN pops/pushes, then outputs
    assert!(
        matches!(fl.actions[0], TcAction::Pedit(_)),
        "{:?}",
        fl.actions
    );
    assert!(fl.actions.contains(&TcAction::VlanPop));
    // Sets are committed before the first output, in eth, ip, l4 order.
    let pedits: Vec<_> = fl
        .actions
        .iter()
        .filter_map(|a| match a {
            TcAction::Pedit(k) => Some(k.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(pedits
        .iter()
        .any(|k| k.hdr == PeditHdr::Ip4 && k.off == 16 && k.val == 0x0a09_0909 && k.keep == 0));
    assert!(pedits
        .iter()
        .any(|k| k.hdr == PeditHdr::Udp && k.off == 0 && k.val == 99 && k.keep == 0xffff_0000));
    assert!(fl.actions.contains(&TcAction::Csum));
    let n = fl.actions.len();
    assert_eq!(
        fl.actions[n - 2..],
        [
            TcAction::Mirred {
                redirect: false,
                dev: 3
            },
            TcAction::Mirred {
                redirect: true,
                dev: 4
            }
        ]
    );
    let (dk, dm) = tc::decode_match(fl.chain, &fl.key);
    assert_eq!(dk, s.key);
    // the TPID is matched (flower's protocol) where the megaflow left it out
    let mut m2 = s.mask;
    m2.full(f::VLAN0_TPID);
    // "not a fragment" is flower's frag flag: nw_frag mask 1 where the megaflow has 3
    assert_eq!((s.mask.get(f::NW_FRAG), dm.get(f::NW_FRAG)), (3, 1));
    m2.set(f::NW_FRAG, 1);
    assert_eq!(dm, m2);
    // Same mask + ethertype: same prio; another mask: another prio.
    let (_, s2) = megaflow(
        "priority=5,udp,dl_vlan=10,actions=strip_vlan,mod_nw_dst:10.9.9.9,mod_tp_dst:99,output:3,output:4\n",
        "in_port=2,dl_vlan=10,udp,nw_dst=10.1.1.2,tp_dst=7",
    );
    p.put(78, &s2, 0).unwrap();
    assert_eq!(p.filter(78).unwrap().0.prio, fl.prio);
    let (_, s3) = megaflow("priority=5,tcp,actions=output:3\n", "in_port=2,tcp");
    p.put(79, &s3, 0).unwrap();
    assert_ne!(p.filter(79).unwrap().0.prio, fl.prio);
    // The hardware runs it like the software datapath.
    let t = FlowTable::from_rules(
        parse_flows("priority=5,udp,dl_vlan=10,actions=strip_vlan,mod_nw_dst:10.9.9.9,mod_tp_dst:99,output:3,output:4\n").unwrap(),
    );
    let mut fr = udp_frame(&k);
    crate::exec::execute(
        &[OdpAction::PushVlan {
            tpid: 0x8100,
            tci: VLAN_CFI | 10,
        }],
        &mut fr,
    );
    let sw = crate::exec::execute(
        &t.xlate(&FlowKey::from_packet(2, &fr)).actions,
        &mut fr.clone(),
    );
    match p.rx(2, &mut fr.clone(), 1) {
        HwRx::Done(ex) => assert_eq!(ex.outputs, sw.outputs),
        r => panic!("{r:?}"),
    }
}

#[test]
fn tc_refusals_and_policies() {
    // Partial VLAN id mask, SCTP port rewrite, select group (hash + recirc), controller.
    let (_, mut s) = megaflow(
        "priority=5,dl_vlan=10,actions=output:3\n",
        "in_port=2,dl_vlan=10",
    );
    s.mask.set(f::VLAN0_TCI, (VLAN_CFI | 0x00f) as u64);
    assert!(unsupported(tc::translate_match(&s).unwrap_err()).contains("vlan_id"));
    let sctp = [
        OdpAction::SetL4 {
            proto: 132,
            src: (0, 0),
            dst: (5, 0xffff),
        },
        OdpAction::Output(3),
    ];
    assert!(unsupported(tc::translate_actions(&sctp).unwrap_err()).contains("protocol 132"));
    assert!(unsupported(
        tc::translate_actions(&[OdpAction::HashSymL4(0), OdpAction::Recirc(1)]).unwrap_err()
    )
    .contains("hash"));
    let (_, s) = megaflow("priority=5,actions=controller\n", "in_port=2,udp");
    let p = TcProvider::new(NicConfig::default(), TcPolicy::None);
    assert!(unsupported(p.put(1, &s, 0).unwrap_err()).contains("controller"));
    assert_eq!(p.len(), 0);
    // Policies with a full NIC (capacity 0).
    let (_, s) = megaflow("priority=5,udp,actions=output:3\n", "in_port=2,udp");
    let full = NicConfig {
        capacity: 0,
        ..Default::default()
    };
    let p = TcProvider::new(full.clone(), TcPolicy::SkipSw);
    assert_eq!(p.put(1, &s, 0).unwrap_err(), OffloadError::TableFull(0));
    assert_eq!(p.len(), 0);
    let p = TcProvider::new(full.clone(), TcPolicy::None);
    assert_eq!(p.put(1, &s, 0).unwrap(), Offloaded::Full { in_hw: false });
    let p = TcProvider::new(NicConfig::default(), TcPolicy::SkipHw);
    assert_eq!(p.put(1, &s, 0).unwrap(), Offloaded::Full { in_hw: false });
    assert_eq!(p.filter(1).unwrap().0.policy, TcPolicy::SkipHw);
    // A recirculation pass's chain is its recirc id (dp_hash itself is refused).
    let mut s = s;
    s.key.set(f::RECIRC_ID, 5);
    assert_eq!(tc::translate_match(&s).unwrap().0, 5);
}

#[test]
fn tc_arp_and_fragments() {
    let (_, s) = megaflow(
        "priority=1,arp,arp_tpa=10.0.0.1,arp_op=1,actions=output:2\n",
        "in_port=1,arp,arp_tpa=10.0.0.1,arp_op=1",
    );
    let (chain, k) = tc::translate_match(&s).unwrap();
    assert_eq!(k.arp_tip, (0x0a00_0001, 0xffff_ffff));
    assert_eq!(tc::decode_match(chain, &k), (s.key, s.mask));
    for (frag, flags) in [("no", (0, 1)), ("first", (3, 3)), ("later", (1, 3))] {
        let (_, s) = megaflow(
            &format!("priority=1,ip,nw_frag={frag},actions=output:2\n"),
            &format!("in_port=1,ip,nw_frag={frag}"),
        );
        let (c, k) = tc::translate_match(&s).unwrap();
        assert_eq!(k.ip_flags, flags, "{frag}");
        let (dk, dm) = tc::decode_match(c, &k);
        // equal up to the equivalent encodings of "not a fragment"
        assert_eq!(dk.and(&s.mask), s.key, "{frag}");
        assert_eq!(dk, dk.and(&dm));
    }
}

/// Random tables with rewrites, VLAN push/pop, several outputs, drops and packet-ins;
/// random IPv4 TCP/UDP frames (valid checksums, some tagged). For each packet the
/// software datapath's outputs are computed; its megaflow is offloaded; afterwards
/// **every** packet that hits a full-offloaded rule in the NIC must come out exactly
/// as the software datapath sends it.
fn full_offload_equals_software(seed: u64, provider: &str) -> (usize, usize) {
    let mut r = Rng::new(seed);
    let mut rules = String::new();
    for i in 0..(4 + r.below(12)) {
        let mut m = format!("priority={}", 1 + r.below(50));
        m += [",ip", ",tcp", ",udp"][r.below(3) as usize];
        if r.below(2) == 0 {
            m += &format!(
                ",nw_dst=10.{}.0.0/{}",
                r.below(4),
                [8, 12, 16, 24][r.below(4) as usize]
            );
        }
        if r.below(3) == 0 {
            m += &format!(",in_port={}", 1 + r.below(3));
        }
        if r.below(4) == 0 {
            m += &format!(",dl_vlan={}", r.below(3));
        }
        if (m.contains("tcp") || m.contains("udp")) && r.below(2) == 0 {
            m += &format!(",tp_dst=0x{:x}/0xff00", r.below(256) << 8);
        }
        let mut a = Vec::new();
        for _ in 0..r.below(4) {
            a.push(match r.below(11) {
                0 => format!("mod_dl_dst:02:00:00:00:{:02x}:01", r.below(256)),
                1 => format!("mod_nw_dst:10.7.{}.1", r.below(256)),
                2 => "dec_ttl".into(),
                3 if m.contains("tcp") || m.contains("udp") => {
                    format!("mod_tp_dst:{}", r.below(65536))
                }
                4 => format!("mod_vlan_vid:{}", r.below(4096)),
                5 if m.contains("dl_vlan") && !a.iter().any(|x: &String| x.contains("vlan")) => {
                    "strip_vlan".into()
                }
                6 => format!("mod_nw_tos:{}", r.below(64) << 2),
                7 => "controller".into(),
                8 => format!("mod_dl_src:02:00:00:00:00:{:02x}", r.below(256)),
                _ => format!("output:{}", 1 + r.below(4)),
            });
        }
        if r.below(5) != 0 {
            a.push(format!("output:{}", 1 + r.below(4)));
        }
        let acts = if a.is_empty() {
            "drop".into()
        } else {
            a.join(",")
        };
        rules += &format!("{m},actions={acts}\n");
        let _ = i;
    }
    let t = FlowTable::from_rules(parse_flows(&rules).unwrap_or_else(|e| panic!("{rules}: {e}")));
    let frames: Vec<(u32, Vec<u8>)> = (0..40)
        .map(|_| {
            let mut k = crate::bench::random_key(&mut r);
            k.set(
                f::NW_DST,
                (10 << 24) | (r.below(4) << 16) | r.below(1 << 16),
            );
            if r.below(3) == 0 {
                k.set(f::TP_DST, (r.below(256) << 8) | r.below(4));
            }
            let mut fr = frame_for(&k);
            crate::exec::fix_checksums(&mut fr);
            if r.below(3) == 0 {
                let tci = VLAN_CFI | r.below(3) as u16 | ((r.below(8) as u16) << 13);
                crate::exec::execute(&[OdpAction::PushVlan { tpid: 0x8100, tci }], &mut fr);
            }
            (1 + r.below(3) as u32, fr)
        })
        .collect();
    let p: Box<dyn OffloadProvider> = match provider {
        "tc" => Box::new(TcProvider::new(NicConfig::default(), TcPolicy::SkipSw)),
        _ => Box::new(RteProvider::new(NicConfig::default())),
    };
    let sw = |port: u32, fr: &Vec<u8>| {
        let k = FlowKey::from_packet(port, fr);
        crate::exec::execute(&t.xlate(&k).actions, &mut fr.clone())
    };
    let mut installed = 0;
    for (i, (port, fr)) in frames.iter().enumerate() {
        let k = FlowKey::from_packet(*port, fr);
        let (_, spec) = spec_of(&t, &k);
        if p.put(i as u64 + 1, &spec, i as u32 + 1).is_ok() {
            installed += 1;
        }
    }
    let mut hw_forwarded = 0;
    for (port, fr) in &frames {
        let want = sw(*port, fr);
        match p.rx(*port, &mut fr.clone(), 1) {
            HwRx::Done(ex) => {
                hw_forwarded += 1;
                assert_eq!(
                    ex.outputs, want.outputs,
                    "rules:\n{rules}frame {fr:02x?} port {port}"
                );
                assert_eq!(ex.packet_ins, 0);
            }
            HwRx::Mark(_) => assert!(want.packet_ins > 0 || provider == "rte"),
            HwRx::Miss => {}
        }
    }
    (installed, hw_forwarded)
}

#[test]
fn full_offload_forwarding_equals_software_forwarding() {
    for provider in ["rte", "tc"] {
        let (mut inst, mut fwd) = (0, 0);
        for seed in 0..60 {
            let (i, f) = full_offload_equals_software(seed, provider);
            inst += i;
            fwd += f;
        }
        // Most flows offload and most packets are forwarded by the NIC: the property
        // is not vacuously true.
        assert!(
            inst > 60 * 40 / 2 && fwd > 60 * 40 / 2,
            "{provider}: {inst} installed, {fwd} hw-forwarded"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn prop_full_offload_equals_software(seed in 0u64..u64::MAX, rte in proptest::bool::ANY) {
        full_offload_equals_software(seed, if rte { "rte" } else { "tc" });
    }
}

#[test]
fn hw_ops_pedit_semantics() {
    let mut fr = vec![0u8; 14];
    fr[0..4].copy_from_slice(&[1, 2, 3, 4]);
    let op = HwOp::Pedit {
        hdr: PeditHdr::Eth,
        off: 0,
        keep: 0xffff_00ff,
        val: 0x0000_ab00,
    };
    super::nic::run_ops(&[op], &mut fr);
    assert_eq!(&fr[0..4], &[1, 2, 0xab, 4]);
}

#[test]
fn nic_table_same_match_latest_wins_and_priorities() {
    use super::nic::EmuNic;
    let mut nic = EmuNic::new(NicConfig::default());
    let mut m = FlowKey::ZERO;
    m.full(f::IN_PORT);
    m.full(f::TP_DST);
    let mut k = FlowKey::ZERO;
    k.set(f::IN_PORT, 1);
    k.set(f::TP_DST, 80);
    nic.insert(1, k, m, 5, vec![]);
    nic.insert(2, k, m, 5, vec![]);
    let mut pkt = k;
    pkt.set(f::NW_DST, 0x0a000001); // not in the mask
    assert_eq!(nic.lookup(&pkt), Some(2));
    nic.remove(2);
    assert_eq!(nic.lookup(&pkt), Some(1));
    // A wider rule with a better (lower) prio in another mask wins.
    let mut m2 = FlowKey::ZERO;
    m2.full(f::IN_PORT);
    nic.insert(3, k, m2, 1, vec![]);
    assert_eq!(nic.lookup(&pkt), Some(3));
    pkt.set(f::TP_DST, 81);
    assert_eq!(nic.lookup(&pkt), Some(3));
    pkt.set(f::IN_PORT, 2);
    assert_eq!(nic.lookup(&pkt), None);
    nic.remove(3);
    nic.remove(1);
    assert!(nic.is_empty());
    assert_eq!(nic.lookup(&k), None);
}
