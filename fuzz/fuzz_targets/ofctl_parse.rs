//! The ovs-ofctl rule syntax (flows, exact flows, groups): errors, never panics.
//! Invariants: parsing is deterministic; a rule set that parses loads into a
//! flow table, each of its lines parses alone to the same rule as in the set,
//! and the table translates a packet-less key without panicking.
#![no_main]
use flow::{FlowKey, FlowTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = flow::parse_exact_flow(s);
    let _ = flow::parse_groups(s);
    let r = flow::parse_flows(s);
    assert_eq!(
        format!("{r:?}"),
        format!("{:?}", flow::parse_flows(s)),
        "not deterministic"
    );
    if let Ok(rules) = r {
        let singles: Vec<_> = s
            .lines()
            .filter_map(|l| flow::parse_flows(l).ok())
            .flatten()
            .collect();
        assert_eq!(rules, singles, "set vs line by line");
        let t = FlowTable::from_rules(rules);
        let _ = t.xlate(&FlowKey::ZERO);
        if let Ok(k) =
            flow::parse_exact_flow("in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80")
        {
            let _ = t.xlate(&k);
        }
    }
});
