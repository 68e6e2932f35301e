//! Packet parsing never panics on arbitrary or truncated input, and parsing is a pure
//! function of the bytes it consumed (proptest).

use flow::FlowKey;
use proptest::prelude::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Real frames from the OVS fixture (TCP, UDP, VLAN, ARP, IPv6).
fn seeds() -> Vec<Vec<u8>> {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("data/sample-trace.json")).unwrap();
    fx["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| hex(p["packet_hex"].as_str().unwrap()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = FlowKey::from_packet(1, &b);
    }

    #[test]
    fn mutated_real_frames_never_panic(i in 0usize..10, cut in 0usize..200,
                                       flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..8)) {
        let mut b = seeds()[i].clone();
        for (at, v) in flips {
            if at < b.len() { b[at] = v; }
        }
        b.truncate(cut);
        let _ = FlowKey::from_packet(3, &b);
    }

    #[test]
    fn truncation_keeps_l2(i in 0usize..10, cut in 14usize..60) {
        let b = seeds()[i].clone();
        let full = FlowKey::from_packet(1, &b);
        let short = FlowKey::from_packet(1, &b[..cut.min(b.len())]);
        // Ethernet addresses survive any truncation past the Ethernet header.
        prop_assert_eq!(full.get(flow::key::f::DL_DST), short.get(flow::key::f::DL_DST));
        prop_assert_eq!(full.get(flow::key::f::DL_SRC), short.get(flow::key::f::DL_SRC));
    }
}
