//! # flow — flow table, megaflow cache and (later) offload (Open vSwitch model)
//!
//! Owns: packet parsing into a flow key, an OpenFlow-style table loaded from
//! ovs-ofctl syntax, classification with OVS's megaflow semantics, the datapath
//! cache (EMC + tuple-space megaflow classifier), and later the offload providers
//! and the revalidator.
//!
//! Depends on `wire` (L2–L4 views).
//!
//! * [`key`]: [`key::FlowKey`] and packet parsing (`flow_extract`).
//! * [`ofctl`]: the `ovs-ofctl add-flows` syntax (rules, matches, actions).
//! * [`classifier`]: OpenFlow table classifier with OVS's wildcard tracking.
//! * [`xlate`]: table 0 + action translation: megaflow + datapath actions, OVS formats.
//! * [`dp`]: the datapath cache: EMC + megaflow classifier (tuple space search), upcalls.
//! * [`ofproto`]: OpenFlow rule statistics and idle/hard timeouts, `ovs-ofctl dump-flows` text.

/// Workloads of `dpustack bench flow` (not library API: only with the `bench` feature).
#[cfg(any(test, feature = "bench"))]
pub mod bench;
pub mod classifier;
pub mod dp;
#[cfg(feature = "driver")]
pub mod driver;
pub mod exec;
pub mod field;
pub mod group;
pub mod key;
pub mod normal;
pub mod ofctl;
pub mod offload;
pub mod ofproto;
pub mod revalidator;
pub mod rule_stats;
pub mod smc;
pub mod xlate;

pub use key::FlowKey;
pub use ofctl::{parse_exact_flow, parse_flows, parse_groups, Group, Rule};
pub use xlate::{format_actions, format_megaflow, FlowTable, OdpAction, XlateError, Xlated};

/// One traced packet: the OVS-format megaflow and datapath actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub megaflow: String,
    pub actions: String,
    /// The translation failed (OVS: "Translation failed (Recursion too deep), packet is
    /// dropped."); `actions` is then `drop`.
    pub error: Option<xlate::XlateError>,
}

/// Traces a flow key through a table like `ovs-appctl ofproto/trace`.
/// `from_bytes`: the flow was parsed from packet bytes (OVS then marks packet-ins as
/// to be sent, `dont_send=0`; a trace of a bare flow string says `dont_send=1`).
pub fn trace(table: &FlowTable, flow: &FlowKey, from_bytes: bool) -> Trace {
    let x = table.xlate_with(flow, !from_bytes);
    Trace {
        megaflow: format_megaflow(flow, &x.wc),
        actions: format_actions(&x.actions),
        error: x.error,
    }
}

/// The passes after [`trace`] when its actions recirculate (select groups), as the
/// datapath runs them: each `recirc(N)` continues with the packet as committed at that
/// point, `dp_hash` = `hash(sym_l4(0))` of it, traced with `recirc_id=N,dp_hash=H`;
/// breadth first, at most `max` passes. Returns (dp_hash, trace) per pass.
pub fn trace_recirculations(
    table: &FlowTable,
    flow: &FlowKey,
    from_bytes: bool,
    max: usize,
) -> Vec<(u32, Trace)> {
    let mut out = Vec::new();
    let mut queue: std::collections::VecDeque<FlowKey> =
        table.xlate_with(flow, !from_bytes).recirc_keys.into();
    while let Some(k) = queue.pop_front() {
        if out.len() >= max {
            break;
        }
        let h = group::hash_sym_l4(&k, 0);
        let mut k2 = k;
        k2.set(key::f::DP_HASH, h as u64);
        let x = table.xlate_with(&k2, !from_bytes);
        queue.extend(x.recirc_keys);
        out.push((h, trace(table, &k2, from_bytes)));
    }
    out
}

/// Top-level comma-separated items of an OVS megaflow or action string (commas inside
/// parentheses do not split).
fn top_level_items(s: &str) -> Vec<String> {
    let mut depth = 0i32;
    let mut items = Vec::new();
    let mut cur = String::new();
    for c in s.trim().chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        items.push(cur);
    }
    items
}

/// Canonical form of a megaflow for comparisons: its comma-separated top-level fields
/// sorted (a megaflow is a set of field matches: OVS and we may print them in a
/// different order).
pub fn canonical_megaflow(s: &str) -> String {
    let mut items = top_level_items(s);
    items.sort();
    items.join(",")
}

/// Canonical form of a datapath action list for comparisons: the actions **in their
/// order** (`2,push_vlan(vid=100),3` and `push_vlan(vid=100),2,3` put different frames
/// on port 2), with only what OVS itself varies masked: `recirc_id=N` inside a
/// controller (`userspace(...)`) action, an allocation counter, becomes `recirc_id=*`.
pub fn canonical_actions(s: &str) -> String {
    top_level_items(s)
        .into_iter()
        .map(|i| {
            if let Some(p) = i.find("recirc_id=") {
                if i.starts_with("userspace(") {
                    let rest = &i[p + 10..];
                    let end = rest.find([',', ')']).unwrap_or(rest.len());
                    return format!("{}recirc_id=*{}", &i[..p], &rest[end..]);
                }
            }
            i
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_keep_their_order_megaflow_fields_do_not() {
        assert_ne!(
            canonical_actions("2,push_vlan(vid=100,pcp=0),3"),
            canonical_actions("push_vlan(vid=100,pcp=0),2,3")
        );
        assert_ne!(canonical_actions("2,3"), canonical_actions("3,2"));
        assert_eq!(
            canonical_megaflow("recirc_id=0,eth,tcp,in_port=1,tp_dst=80"),
            canonical_megaflow("tcp,recirc_id=0,tp_dst=80,eth,in_port=1")
        );
        // only the controller action's recirc_id is masked, in place
        assert_eq!(
            canonical_actions(
                "push_vlan(vid=5,pcp=0),userspace(pid=0,controller(reason=1,dont_send=1,continuation=0,recirc_id=7,rule_cookie=0,controller_id=0,max_len=65535))"
            ),
            canonical_actions(
                "push_vlan(vid=5,pcp=0),userspace(pid=0,controller(reason=1,dont_send=1,continuation=0,recirc_id=12,rule_cookie=0,controller_id=0,max_len=65535))"
            )
        );
        assert_ne!(
            canonical_actions("set(ipv4(ttl=63)),recirc(0x1)"),
            canonical_actions("set(ipv4(ttl=63)),recirc(0x2)")
        );
    }
}
