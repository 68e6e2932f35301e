//! Flow extraction from arbitrary frames, classification/translation through an
//! OpenFlow pipeline, and execution of the datapath actions. Invariants:
//! - extraction is total and deterministic; the pipeline registers and metadata
//!   words are zero in a packet's key;
//! - the megaflow is sound (OVS's wildcard contract): any key that agrees with
//!   the packet's key on every bit of the megaflow mask translates to the same
//!   actions;
//! - executing the actions outputs at most one frame per output action, and
//!   every output frame extracts again.
#![no_main]
use flow::key::META_WORDS;
use flow::{format_actions, FlowKey, FlowTable, OdpAction};
use libfuzzer_sys::fuzz_target;

const RULES: &str = "\
priority=200,in_port=1,udp,tp_dst=4000,actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,mod_tp_dst:4001,output:2
priority=150,udp,actions=mod_vlan_vid:5,controller
priority=100,in_port=2,dl_vlan=7,actions=strip_vlan,output:1,in_port
priority=120,tcp,nw_src=192.168.1.0/24,nw_dst=10.0.0.0/255.0.255.0,tp_dst=0x50/0xfff0,actions=mod_nw_src:1.2.3.4,mod_nw_tos:64,output:3
priority=110,ipv6,ipv6_dst=2001:db8::/32,actions=set_field:2001:db8::1->ipv6_src,output:4
priority=105,arp,arp_op=1,arp_tpa=10.0.0.1,actions=output:1,output:2
priority=90,icmp,icmp_type=8,actions=dec_ttl,output:2
priority=80,tcp,tcp_flags=+syn-ack,actions=set_field:16->ip_dscp,controller:128
priority=75,dl_vlan=9,actions=mod_vlan_pcp:3,output:2
priority=70,dl_src=02:00:00:00:00:00/01:00:00:00:00:00,actions=drop
priority=60,ip,nw_dst=3.3.3.3,actions=set_field:64->nw_tos,resubmit(,1)
priority=10,ip,nw_dst=10.0.0.0/8,actions=dec_ttl,mod_vlan_vid:5,output:2
priority=0,actions=drop
table=1,priority=10,tcp,actions=set_field:5->reg0,resubmit(,2),output:4
table=1,priority=5,actions=output:1
table=2,priority=10,reg0=5,actions=output:3
";

thread_local! {
    // FlowTable is not Sync (interior caches); libFuzzer runs one thread
    static TABLE: FlowTable = FlowTable::from_rules(flow::parse_flows(RULES).expect("fuzz rule set parses"));
}

fn outputs(a: &[OdpAction]) -> usize {
    a.iter()
        .filter(|a| matches!(a, OdpAction::Output(_)))
        .count()
}

fuzz_target!(|data: &[u8]| {
    let Some((&port, frame)) = data.split_first() else {
        return;
    };
    let in_port = u32::from(port % 5);
    let k = FlowKey::from_packet(in_port, frame);
    assert_eq!(
        k,
        FlowKey::from_packet(in_port, frame),
        "extraction not deterministic"
    );
    for w in META_WORDS {
        assert_eq!(k.w[w], 0, "metadata word {w} set by a packet");
    }
    TABLE.with(|t| check(t, &k, frame));
});

fn check(t: &FlowTable, k: &FlowKey, frame: &[u8]) {
    let k = *k;
    let x = t.xlate(&k);
    let acts = normalize(&format_actions(&x.actions));
    // the mask the datapath installs: the megaflow plus the VLAN "tag present"
    // bit (a datapath key tells tagged from untagged frames by its structure;
    // flow::dp::Datapath::upcall)
    let mut wc = x.wc;
    wc.or(flow::key::f::VLAN0_TCI, u64::from(flow::key::VLAN_CFI));
    // frames that differ from this one in one byte: whenever the key of such a
    // frame agrees with this key under the mask, its actions must be the same.
    // (Real frames, not random keys: a key no frame can produce, e.g. an ICMP
    // type above 255, may legitimately fall outside the contract.)
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ frame.len() as u64;
    for _ in 0..8 {
        if frame.is_empty() {
            break;
        }
        h = h.rotate_left(17).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ 0x2545_f491_4f6c_dd1d;
        let mut f2 = frame.to_vec();
        let at = (h >> 8) as usize % f2.len();
        f2[at] ^= (h as u8).max(1);
        let k2 = FlowKey::from_packet(k.in_port(), &f2);
        if (0..k.w.len()).any(|i| (k.w[i] ^ k2.w[i]) & wc.w[i] != 0) {
            continue;
        }
        let x2 = t.xlate(&k2);
        assert_eq!(
            normalize(&format_actions(&x2.actions)),
            acts,
            "megaflow unsound: byte {at} changed, keys {k:?} and {k2:?} agree under mask {wc:?}"
        );
    }
    let mut f = frame.to_vec();
    let ex = flow::exec::execute(&x.actions, &mut f);
    assert!(
        ex.outputs.len() <= outputs(&x.actions),
        "{} outputs for {acts}",
        ex.outputs.len()
    );
    for (p, o) in &ex.outputs {
        let _ = FlowKey::from_packet(*p, o);
    }
}

/// Controller continuations carry a freshly allocated `recirc_id` per
/// translation: not part of the decision.
fn normalize(acts: &str) -> String {
    let mut out = String::with_capacity(acts.len());
    let mut rest = acts;
    while let Some(i) = rest.find("recirc_id=") {
        out.push_str(&rest[..i + 10]);
        out.push('_');
        rest = rest[i + 10..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}
