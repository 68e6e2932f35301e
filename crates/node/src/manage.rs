//! The node's parts in the management plane: Prometheus collectors for the
//! RoCE device, the CM agent and the switch, and the `dpustack_*` JSON-RPC
//! methods for what SPDK has no method for (RDMA devices, CM connections, the
//! switch's control commands).
//!
//! Collectors hold clones of the parts' handles: drop the metrics server and
//! the RPC server before [`crate::Node::stop`].

use std::path::PathBuf;
use std::sync::Arc;

use mgmt::jsonrpc::{params_object, Dispatch, RpcError};
use mgmt::metrics::{Collector, Exposition};
use serde_json::{json, Value};

use crate::Node;

/// Counters of one RoCE device (soft provider; a kernel device has none here).
pub struct RoceCollector {
    ctx: verbs::Context,
}

impl Collector for RoceCollector {
    fn collect(&self, e: &mut Exposition) {
        let Some(dev) = self.ctx.soft() else {
            return;
        };
        let name = self.ctx.name().to_string();
        let c = dev.counters();
        let (q, nqp) = dev.with_engine(|en| (en.qp_counter_totals(), en.qp_count()));
        let d = [("device", name.as_str())];
        let ctr = |e: &mut Exposition, n: &str, h: &str, v: u64| e.counter(n, h, &d, v);
        ctr(
            e,
            "dpustack_roce_rx_packets_total",
            "RoCEv2 packets received.",
            c.rx_packets,
        );
        ctr(
            e,
            "dpustack_roce_tx_packets_total",
            "RoCEv2 packets sent.",
            c.tx_packets,
        );
        ctr(
            e,
            "dpustack_roce_rx_bytes_total",
            "RoCEv2 bytes received (BTH to ICRC).",
            c.rx_bytes,
        );
        ctr(
            e,
            "dpustack_roce_tx_bytes_total",
            "RoCEv2 bytes sent (BTH to ICRC).",
            c.tx_bytes,
        );
        ctr(
            e,
            "dpustack_roce_icrc_drops_total",
            "Received packets dropped for a bad ICRC.",
            c.drop_bad_icrc,
        );
        for (reason, v) in [
            ("truncated", c.drop_truncated),
            ("bad_opcode", c.drop_bad_opcode),
            ("bad_length", c.drop_bad_length),
            ("bad_version", c.drop_bad_version),
            ("bad_icrc", c.drop_bad_icrc),
            ("pkey", c.drop_pkey),
            ("no_qp", c.drop_no_qp),
            ("qp_type", c.drop_qp_type),
            ("qp_state", c.drop_qp_state),
            ("qkey", c.drop_qkey),
            ("src", c.drop_src),
        ] {
            e.counter(
                "dpustack_roce_rx_drops_total",
                "Received packets dropped, by reason.",
                &[("device", &name), ("reason", reason)],
                v,
            );
        }
        ctr(
            e,
            "dpustack_roce_retransmits_total",
            "Packets retransmitted by the requesters of the device's QPs.",
            q.retransmits,
        );
        ctr(
            e,
            "dpustack_roce_retry_timeouts_total",
            "Retransmit timer expiries of the device's QPs.",
            q.timeouts,
        );
        for (dir, kind, v) in [
            ("received", "seq", q.seq_naks_rcvd),
            ("received", "rnr", q.rnr_naks_rcvd),
            ("sent", "seq", q.seq_naks_sent),
            ("sent", "rnr", q.rnr_naks_sent),
        ] {
            e.counter(
                "dpustack_roce_naks_total",
                "NAKs (PSN sequence error, RNR) received and sent by the device's QPs.",
                &[("device", &name), ("direction", dir), ("kind", kind)],
                v,
            );
        }
        e.gauge(
            "dpustack_roce_qps",
            "Live queue pairs on the device.",
            &d,
            nqp as f64,
        );
    }
}

/// Every CM state, for gauges that list zeros too.
const CM_STATES: [cm::CmState; 18] = {
    use cm::CmState::*;
    [
        Idle,
        AddrBound,
        AddrResolved,
        RouteResolved,
        Listen,
        ReqSent,
        MraReqRcvd,
        ReqRcvd,
        MraReqSent,
        RepSent,
        RepRcvd,
        Established,
        DreqSent,
        DreqRcvd,
        TimeWait,
        SidrReqSent,
        SidrReqRcvd,
        SidrRepSent,
    ]
};

fn cm_state_name(s: cm::CmState) -> String {
    // snake case of the variant name
    let d = format!("{s:?}");
    let mut out = String::new();
    for (i, ch) in d.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

/// cm_ids of the CM agent by state, and its MAD counters.
pub struct CmCollector {
    dev: cm::driver::CmDevice,
    name: String,
}

impl Collector for CmCollector {
    fn collect(&self, e: &mut Exposition) {
        let ids = self.dev.ids();
        for s in CM_STATES {
            let n = ids.iter().filter(|i| i.state == s).count();
            e.gauge(
                "dpustack_cm_connections",
                "RDMA CM ids by state.",
                &[("device", &self.name), ("state", &cm_state_name(s))],
                n as f64,
            );
        }
        let st = self.dev.stats();
        let d = [("device", self.name.as_str())];
        for (n, h, v) in [
            (
                "dpustack_cm_mads_received_total",
                "CM MADs received.",
                st.mads_in,
            ),
            ("dpustack_cm_mads_sent_total", "CM MADs sent.", st.mads_out),
            (
                "dpustack_cm_mads_dropped_total",
                "CM MADs dropped (malformed, unmatched).",
                st.dropped_malformed + st.dropped_unmatched,
            ),
            (
                "dpustack_cm_retransmits_total",
                "CM MAD retransmissions.",
                st.retransmits,
            ),
            (
                "dpustack_cm_timeouts_total",
                "CM operations that ran out of retries.",
                st.timeouts,
            ),
        ] {
            e.counter(n, h, &d, v);
        }
    }
}

/// Parses the switch's `stats` answer (`key value` lines).
pub fn parse_switch_stats(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The switch's datapath counters, asked over its control socket at scrape time.
pub struct SwitchCollector {
    ctl: PathBuf,
}

impl Collector for SwitchCollector {
    fn collect(&self, e: &mut Exposition) {
        let Ok(text) = switch::ctl::call(&self.ctl, "stats", "") else {
            e.gauge(
                "dpustack_switch_up",
                "1 when the switch answered the scrape.",
                &[],
                0.0,
            );
            return;
        };
        e.gauge(
            "dpustack_switch_up",
            "1 when the switch answered the scrape.",
            &[],
            1.0,
        );
        for (k, v) in parse_switch_stats(&text) {
            match k.as_str() {
                "emc_hits" => e.counter(
                    "dpustack_switch_emc_hits_total",
                    "Packets that hit the exact-match cache.",
                    &[],
                    v,
                ),
                "megaflow_hits" => e.counter(
                    "dpustack_switch_megaflow_hits_total",
                    "Packets that hit a megaflow (after an EMC miss).",
                    &[],
                    v,
                ),
                "upcalls" => e.counter(
                    "dpustack_switch_upcalls_total",
                    "Packets that missed both caches (OpenFlow table lookups).",
                    &[],
                    v,
                ),
                "megaflows" => e.gauge(
                    "dpustack_switch_flows",
                    "Megaflows installed in the datapath.",
                    &[],
                    v as f64,
                ),
                "rules" => e.gauge(
                    "dpustack_switch_rules",
                    "OpenFlow rules in the table.",
                    &[],
                    v as f64,
                ),
                _ => {}
            }
        }
    }
}

/// Requests the object engine received, by opcode, and their bulk bytes.
pub struct ObjCollector {
    stats: Arc<obj::engine::OpCounters>,
}

impl Collector for ObjCollector {
    fn collect(&self, e: &mut Exposition) {
        for (op, n) in self.stats.by_opcode() {
            e.counter(
                "dpustack_obj_requests_total",
                "Object-store RPCs received by the engine, by opcode.",
                &[("opcode", op)],
                n,
            );
        }
        e.counter(
            "dpustack_obj_bulk_bytes_received_total",
            "Bulk (data) bytes received with object-store RPCs.",
            &[],
            self.stats.bulk_bytes_in(),
        );
    }
}

/// The node's collectors (the NVMe-oF and bdev ones are the management plane's
/// own, [`mgmt::Mgmt`]).
pub fn collectors(node: &Node, cfg: &crate::Config) -> Vec<Arc<dyn Collector>> {
    let mut v: Vec<Arc<dyn Collector>> = Vec::new();
    if let Some(ctx) = node.device() {
        v.push(Arc::new(RoceCollector { ctx: ctx.clone() }));
    }
    if let Some(a) = node.cm() {
        v.push(Arc::new(CmCollector {
            dev: a.device().clone(),
            name: node
                .device()
                .map_or("cm".to_string(), |c| c.name().to_string()),
        }));
    }
    if let Some(en) = node.obj() {
        v.push(Arc::new(ObjCollector {
            stats: en.op_counters(),
        }));
    }
    if node.switch.is_some() {
        v.push(Arc::new(SwitchCollector {
            ctl: cfg.switch.ctl.clone(),
        }));
    }
    v
}

/// The `dpustack_*` methods on the node's parts.
pub struct NodeMethods {
    device: Option<verbs::Context>,
    cm: Option<cm::driver::CmDevice>,
    switch_ctl: Option<PathBuf>,
    obj: Option<Arc<obj::engine::OpCounters>>,
}

/// Method names served by [`NodeMethods`].
pub const NODE_METHODS: &[&str] = &[
    "dpustack_rdma_get_devices",
    "dpustack_cm_get_connections",
    "dpustack_obj_get_stats",
    "dpustack_switch_get_stats",
    "dpustack_switch_dump_flows",
    "dpustack_switch_dump_rules",
    "dpustack_switch_add_flows",
    "dpustack_switch_replace_flows",
    "dpustack_switch_del_flows",
];

impl NodeMethods {
    pub fn new(node: &Node, cfg: &crate::Config) -> NodeMethods {
        NodeMethods {
            device: node.device().cloned(),
            cm: node.cm().map(|a| a.device().clone()),
            switch_ctl: node.switch.as_ref().map(|_| cfg.switch.ctl.clone()),
            obj: node.obj().map(|e| e.op_counters()),
        }
    }

    fn switch(&self, cmd: &str, payload: &str) -> Result<String, RpcError> {
        let ctl = self
            .switch_ctl
            .as_ref()
            .ok_or_else(|| RpcError::no_device("the switch is not running in this node"))?;
        switch::ctl::call(ctl, cmd, payload)
            .map_err(|e| RpcError::internal(format!("switch {cmd}: {e}")))
    }
}

fn no_params(p: Option<&Value>) -> Result<(), RpcError> {
    let m = params_object(p)?;
    if let Some(k) = m.keys().next() {
        return Err(RpcError::params(format!(
            "Invalid parameters: unknown key {k:?}"
        )));
    }
    Ok(())
}

fn flows_param(p: Option<&Value>, required: bool) -> Result<String, RpcError> {
    let m = params_object(p)?;
    if let Some(k) = m.keys().find(|k| k.as_str() != "flows") {
        return Err(RpcError::params(format!(
            "Invalid parameters: unknown key {k:?}"
        )));
    }
    match m.get("flows") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(a)) => {
            let mut s = String::new();
            for l in a {
                let l = l
                    .as_str()
                    .ok_or_else(|| RpcError::params("Invalid parameters: flows must be strings"))?;
                s += l;
                s.push('\n');
            }
            Ok(s)
        }
        None if !required => Ok(String::new()),
        _ => Err(RpcError::params(
            "Invalid parameters: flows (ovs-ofctl lines, a string or an array) is required",
        )),
    }
}

fn lines(s: &str) -> Value {
    Value::Array(s.lines().map(|l| json!(l)).collect())
}

impl Dispatch for NodeMethods {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        match method {
            "dpustack_rdma_get_devices" => {
                no_params(params)?;
                let Some(ctx) = &self.device else {
                    return Ok(json!([]));
                };
                let port = ctx
                    .query_port(1)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                let mut d = json!({
                    "name": ctx.name(),
                    "ip": ctx.ip().to_string(),
                    "provider": if ctx.soft().is_some() { "soft" } else { "rdma-core" },
                    "active_mtu": port.active_mtu.bytes(),
                });
                if let Some(dev) = ctx.soft() {
                    let c = dev.counters();
                    let (q, nqp) = dev.with_engine(|en| (en.qp_counter_totals(), en.qp_count()));
                    d["qps"] = json!(nqp);
                    d["counters"] = json!({
                        "rx_packets": c.rx_packets, "tx_packets": c.tx_packets,
                        "rx_bytes": c.rx_bytes, "tx_bytes": c.tx_bytes,
                        "drop_bad_icrc": c.drop_bad_icrc, "drop_no_qp": c.drop_no_qp,
                        "drop_truncated": c.drop_truncated, "drop_bad_opcode": c.drop_bad_opcode,
                        "retransmits": q.retransmits, "timeouts": q.timeouts,
                        "seq_naks_rcvd": q.seq_naks_rcvd, "rnr_naks_rcvd": q.rnr_naks_rcvd,
                        "seq_naks_sent": q.seq_naks_sent, "rnr_naks_sent": q.rnr_naks_sent
                    });
                }
                Ok(json!([d]))
            }
            "dpustack_cm_get_connections" => {
                no_params(params)?;
                let Some(dev) = &self.cm else {
                    return Ok(json!([]));
                };
                let addr = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string());
                Ok(Value::Array(
                    dev.ids()
                        .into_iter()
                        .map(|i| {
                            json!({
                                "state": cm_state_name(i.state),
                                "port_space": format!("{:?}", i.ps),
                                "local_address": addr(i.local),
                                "remote_address": addr(i.remote),
                                "local_qpn": i.local_qpn,
                                "remote_qpn": i.remote_qpn
                            })
                        })
                        .collect(),
                ))
            }
            "dpustack_obj_get_stats" => {
                no_params(params)?;
                let st = self.obj.as_ref().ok_or_else(|| {
                    RpcError::no_device("the object engine is not running in this node")
                })?;
                let ops: serde_json::Map<String, Value> = st
                    .by_opcode()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                Ok(json!({"requests": ops, "bulk_bytes_received": st.bulk_bytes_in()}))
            }
            "dpustack_switch_get_stats" => {
                no_params(params)?;
                let m: serde_json::Map<String, Value> =
                    parse_switch_stats(&self.switch("stats", "")?)
                        .into_iter()
                        .map(|(k, v)| (k, json!(v)))
                        .collect();
                Ok(Value::Object(m))
            }
            "dpustack_switch_dump_flows" => {
                no_params(params)?;
                Ok(lines(&self.switch("dump-flows", "")?))
            }
            "dpustack_switch_dump_rules" => {
                no_params(params)?;
                Ok(lines(&self.switch("dump-rules", "")?))
            }
            "dpustack_switch_add_flows" => {
                let f = flows_param(params, true)?;
                Ok(json!(self.switch("add-flows", &f)?.trim_end()))
            }
            "dpustack_switch_replace_flows" => {
                let f = flows_param(params, true)?;
                Ok(json!(self.switch("replace-flows", &f)?.trim_end()))
            }
            "dpustack_switch_del_flows" => {
                let f = flows_param(params, false)?;
                Ok(json!(self.switch("del-flows", &f)?.trim_end()))
            }
            _ => Err(RpcError::method_not_found()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_state_names_are_snake_case() {
        assert_eq!(cm_state_name(cm::CmState::TimeWait), "time_wait");
        assert_eq!(cm_state_name(cm::CmState::Established), "established");
        assert_eq!(cm_state_name(cm::CmState::MraReqRcvd), "mra_req_rcvd");
    }

    #[test]
    fn switch_stats_lines_parse() {
        let v = parse_switch_stats("emc_hits 3\nupcalls 1\nbad\n");
        assert_eq!(v, vec![("emc_hits".into(), 3), ("upcalls".into(), 1)]);
    }
}
