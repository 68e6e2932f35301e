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
pub mod key;
pub mod ofctl;
pub mod ofproto;
pub mod xlate;

pub use key::FlowKey;
pub use ofctl::{parse_exact_flow, parse_flows, Rule};
pub use xlate::{format_actions, format_megaflow, FlowTable, OdpAction, Xlated};

/// One traced packet: the OVS-format megaflow and datapath actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub megaflow: String,
    pub actions: String,
}

/// Traces a flow key through a table like `ovs-appctl ofproto/trace`.
/// `from_bytes`: the flow was parsed from packet bytes (OVS then marks packet-ins as
/// to be sent, `dont_send=0`; a trace of a bare flow string says `dont_send=1`).
pub fn trace(table: &FlowTable, flow: &FlowKey, from_bytes: bool) -> Trace {
    let x = table.xlate_with(flow, !from_bytes);
    Trace {
        megaflow: format_megaflow(flow, &x.wc),
        actions: format_actions(&x.actions),
    }
}

/// Canonical, order-insensitive form of a megaflow or action string for comparisons:
/// the comma-separated top-level items sorted; `recirc_id=N` inside a controller action
/// (an allocation counter) replaced by `recirc_id=*`.
pub fn canonical(s: &str) -> String {
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
    let mut items: Vec<String> = items
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
        .collect();
    items.sort();
    items.join(",")
}
