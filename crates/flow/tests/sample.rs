//! The oracle's recorded fixture (OVS 3.1 traces of the sample table): every sample
//! packet, parsed from its bytes, must give OVS's megaflow and datapath actions.

use flow::{
    canonical_actions, canonical_megaflow, parse_exact_flow, parse_flows, trace, FlowKey, FlowTable,
};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn sample_fixture_matches_ovs() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("data/sample-trace.json")).unwrap();
    let table = FlowTable::from_rules(parse_flows(include_str!("data/sample-flows.txt")).unwrap());
    let pkts = fx["packets"].as_array().unwrap();
    assert_eq!(pkts.len(), 10);
    let mut bad = Vec::new();
    for p in pkts {
        let input = p["input"].as_str().unwrap();
        let in_port = parse_exact_flow(input).unwrap().in_port();
        let bytes = hex(p["packet_hex"].as_str().unwrap());
        let k = FlowKey::from_packet(in_port, &bytes);
        let t = trace(&table, &k, true);
        let want_m = p["megaflow"].as_str().unwrap();
        let want_a = p["datapath_actions"].as_str().unwrap();
        if canonical_megaflow(&t.megaflow) != canonical_megaflow(want_m)
            || canonical_actions(&t.actions) != canonical_actions(want_a)
        {
            bad.push(format!(
                "packet {}:\n  ours megaflow {}\n  ovs  megaflow {}\n  ours actions  {}\n  ovs  actions  {}",
                p["id"], t.megaflow, want_m, t.actions, want_a
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
