//! The node's parts in the management plane: Prometheus collectors for the
//! RoCE device, the CM agent, the switch, the TSE and the object engine, and the
//! `dpustack_*` JSON-RPC methods for what SPDK has no method for (RDMA devices, CM
//! connections, TSE/EQ counts, object-store requests, the switch's control
//! commands: `dpustack switch run` serves those alone, [`SwitchServer`]).
//!
//! Collectors hold clones of the parts' handles: drop the metrics server and
//! the RPC server before [`crate::Node::stop`].

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
            "dpustack_roce_refused_resources_total",
            "PD/CQ/SRQ/QP/MR creations refused at the device's bounds ([rdma] max_qp ...).",
            c.refused_resources,
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
                "dpustack_cm_refused_requests_total",
                "Peers' connection requests refused at [cm] max_ids.",
                st.refused_ids,
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

/// The switch's datapath counters, asked from its loop at scrape time.
pub struct SwitchCollector {
    ctl: switch::control::Control,
}

impl Collector for SwitchCollector {
    fn collect(&self, e: &mut Exposition) {
        let up = "1 when the switch answered the scrape.";
        let Ok(st) = self.ctl.stats() else {
            e.gauge("dpustack_switch_up", up, &[], 0.0);
            return;
        };
        e.gauge("dpustack_switch_up", up, &[], 1.0);
        for (n, h, v) in [
            (
                "dpustack_switch_emc_hits_total",
                "Packets that hit the exact-match cache.",
                st.emc_hits,
            ),
            (
                "dpustack_switch_megaflow_hits_total",
                "Packets that hit a megaflow (after an EMC miss).",
                st.megaflow_hits,
            ),
            (
                "dpustack_switch_upcalls_total",
                "Packets that missed both caches (OpenFlow table lookups).",
                st.upcalls,
            ),
            (
                "dpustack_switch_rx_packets_total",
                "Frames received on the switch's ports.",
                st.rx_packets,
            ),
            (
                "dpustack_switch_tx_packets_total",
                "Frames sent on the switch's ports.",
                st.tx_packets,
            ),
            (
                "dpustack_switch_rules_expired_total",
                "OpenFlow rules removed by their idle or hard timeout.",
                st.rules_expired,
            ),
            (
                "dpustack_switch_port_rx_dropped_total",
                "Frames the kernel dropped on the ports' receive queues (full).",
                st.port_rx_dropped,
            ),
            (
                "dpustack_switch_port_tx_dropped_total",
                "Frames dropped at a port's transmit queue bound (port_tx_queue).",
                st.port_tx_dropped,
            ),
            (
                "dpustack_switch_port_tx_errors_total",
                "Frames a port's kernel refused for another reason than room.",
                st.port_tx_errors,
            ),
            (
                "dpustack_switch_openflow_refused_connections_total",
                "OpenFlow connections closed at accept (max_connections).",
                st.of_connections_refused,
            ),
            (
                "dpustack_switch_openflow_async_dropped_total",
                "PACKET_IN / FLOW_REMOVED / PORT_STATUS dropped at a connection's async backlog bound.",
                st.of_async_dropped,
            ),
            (
                "dpustack_switch_openflow_backlog_closes_total",
                "OpenFlow connections closed for an output backlog past the bound.",
                st.of_backlog_closes,
            ),
        ] {
            e.counter(n, h, &[], v);
        }
        for (n, h, v) in [
            (
                "dpustack_switch_flows",
                "Megaflows installed in the datapath.",
                st.megaflows,
            ),
            (
                "dpustack_switch_rules",
                "OpenFlow rules in the table.",
                st.rules,
            ),
            ("dpustack_switch_groups", "OpenFlow groups.", st.groups),
        ] {
            e.gauge(n, h, &[], v as f64);
        }
    }
}

/// Every TSE scheduler and event queue of the process (tse::stats): the node's
/// own (its tse part's self-check) and any a part or client made. Sums over the
/// live and dropped ones; per-scheduler and per-EQ counts are in
/// `dpustack_tse_get_stats`.
pub struct TseCollector;

impl Collector for TseCollector {
    fn collect(&self, e: &mut Exposition) {
        let snap = tse::stats::snapshot();
        let (s, q) = (snap.sched_totals(), snap.eq_totals());
        for (n, h, v) in [
            (
                "dpustack_tse_tasks_created_total",
                "TSE tasks created.",
                s.tasks_created,
            ),
            (
                "dpustack_tse_tasks_ran_total",
                "TSE task bodies run.",
                s.tasks_ran,
            ),
            (
                "dpustack_tse_tasks_completed_total",
                "TSE task completions.",
                s.tasks_completed,
            ),
            (
                "dpustack_tse_tasks_failed_total",
                "TSE task completions with an error (failed, cancelled, timed out).",
                s.tasks_failed,
            ),
            (
                "dpustack_tse_events_launched_total",
                "Events launched on TSE event queues.",
                q.events_launched,
            ),
            (
                "dpustack_tse_events_completed_total",
                "Top-level events completed onto TSE event queues.",
                q.events_completed,
            ),
            (
                "dpustack_tse_events_polled_total",
                "Completed events handed to callers by EQ poll or test.",
                q.events_polled,
            ),
            ("dpustack_tse_eq_polls_total", "EQ poll calls.", q.polls),
        ] {
            e.counter(n, h, &[], v);
        }
        for (n, h, v) in [
            (
                "dpustack_tse_schedulers",
                "Live TSE schedulers.",
                snap.schedulers.len() as u64,
            ),
            (
                "dpustack_tse_event_queues",
                "Live TSE event queues.",
                snap.event_queues.len() as u64,
            ),
            (
                "dpustack_tse_tasks_in_flight",
                "TSE tasks scheduled and not completed.",
                s.tasks_in_flight,
            ),
            (
                "dpustack_tse_events_running",
                "Top-level events launched and not completed.",
                q.events_running,
            ),
            (
                "dpustack_tse_events_waiting",
                "Completed events not polled yet.",
                q.events_waiting,
            ),
        ] {
            e.gauge(n, h, &[], v as f64);
        }
    }
}

fn sched_json(c: &tse::stats::SchedCounts) -> Value {
    json!({
        "id": c.id,
        "tasks_created": c.tasks_created,
        "tasks_ran": c.tasks_ran,
        "tasks_completed": c.tasks_completed,
        "tasks_failed": c.tasks_failed,
        "tasks_in_flight": c.tasks_in_flight
    })
}

fn eq_json(c: &tse::stats::EqCounts) -> Value {
    json!({
        "id": c.id,
        "sched_id": c.sched_id,
        "events_launched": c.events_launched,
        "events_completed": c.events_completed,
        "events_polled": c.events_polled,
        "polls": c.polls,
        "events_running": c.events_running,
        "events_waiting": c.events_waiting
    })
}

/// `dpustack_tse_get_stats`: every live scheduler and EQ, the retired ones' sums,
/// and the totals.
pub fn tse_stats_json() -> Value {
    let s = tse::stats::snapshot();
    let strip = |mut v: Value| {
        if let Some(m) = v.as_object_mut() {
            m.remove("id");
            m.remove("sched_id");
        }
        v
    };
    let mut totals = strip(sched_json(&s.sched_totals()));
    if let (Some(t), Value::Object(q)) = (totals.as_object_mut(), strip(eq_json(&s.eq_totals()))) {
        t.extend(q);
        t.insert("schedulers".into(), json!(s.schedulers.len()));
        t.insert("event_queues".into(), json!(s.event_queues.len()));
    }
    let mut retired = strip(sched_json(&s.retired_sched));
    if let (Some(t), Value::Object(q)) = (retired.as_object_mut(), strip(eq_json(&s.retired_eq))) {
        t.extend(q);
        t.insert("schedulers".into(), json!(s.retired_schedulers));
        t.insert("event_queues".into(), json!(s.retired_event_queues));
        t.remove("tasks_in_flight");
        t.remove("events_running");
        t.remove("events_waiting");
    }
    json!({
        "schedulers": s.schedulers.iter().map(sched_json).collect::<Vec<_>>(),
        "event_queues": s.event_queues.iter().map(eq_json).collect::<Vec<_>>(),
        "retired": retired,
        "totals": totals
    })
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
        let cl = &self.stats.clients;
        e.gauge(
            "dpustack_obj_clients",
            "RPC clients connected to the object engine (TCP + RDMA).",
            &[],
            cl.clients() as f64,
        );
        e.counter(
            "dpustack_obj_refused_clients_total",
            "RPC client connections the object engine refused (max_clients reached).",
            &[],
            cl.refused(),
        );
    }
}

/// The node's collectors (the NVMe-oF and bdev ones are the management plane's
/// own, [`mgmt::Mgmt`]).
pub fn collectors(node: &Node, _cfg: &crate::Config) -> Vec<Arc<dyn Collector>> {
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
    if let Some(ctl) = node.switch_control() {
        v.push(Arc::new(SwitchCollector { ctl }));
    }
    if node.tse_enabled() {
        v.push(Arc::new(TseCollector));
    }
    v
}

/// The `dpustack_*` methods on the node's parts.
pub struct NodeMethods {
    device: Option<verbs::Context>,
    cm: Option<cm::driver::CmDevice>,
    switch: SwitchMethods,
    obj: Option<Arc<obj::engine::OpCounters>>,
}

/// Method names served by [`NodeMethods`].
pub const NODE_METHODS: &[&str] = &[
    "dpustack_rdma_get_devices",
    "dpustack_cm_get_connections",
    "dpustack_obj_get_stats",
    "dpustack_tse_get_stats",
    "dpustack_switch_get_stats",
    "dpustack_switch_dump_flows",
    "dpustack_switch_dump_rules",
    "dpustack_switch_add_flows",
    "dpustack_switch_replace_flows",
    "dpustack_switch_del_flows",
    "dpustack_switch_add_groups",
    "dpustack_switch_mod_groups",
    "dpustack_switch_del_groups",
    "dpustack_switch_dump_groups",
    "dpustack_switch_dump_group_stats",
    "dpustack_switch_fdb_show",
    "dpustack_switch_fdb_flush",
    "dpustack_switch_port_down",
    "dpustack_switch_port_up",
    "dpustack_switch_offload_stats",
    "dpustack_switch_config",
    "dpustack_switch_stop",
];

impl NodeMethods {
    pub fn new(node: &Node, _cfg: &crate::Config) -> NodeMethods {
        NodeMethods {
            device: node.device().cloned(),
            cm: node.cm().map(|a| a.device().clone()),
            switch: SwitchMethods::new(node.switch_control()),
            obj: node.obj().map(|e| e.op_counters()),
        }
    }
}

/// The switch's control commands as `dpustack_switch_*` methods (the names in
/// [`NODE_METHODS`] that start so), on a running switch's [`switch::control::Control`]:
/// in `dpustack up` through [`NodeMethods`], in `dpustack switch run` on their own
/// ([`SwitchServer`]).
pub struct SwitchMethods {
    ctl: Option<switch::control::Control>,
}

impl SwitchMethods {
    pub fn new(ctl: Option<switch::control::Control>) -> SwitchMethods {
        SwitchMethods { ctl }
    }

    fn run(&self, cmd: switch::control::Command) -> Result<switch::control::Reply, RpcError> {
        let ctl = self
            .ctl
            .as_ref()
            .ok_or_else(|| RpcError::no_device("the switch is not running in this node"))?;
        ctl.call(cmd).map_err(|e| match e {
            switch::Error::Stopped => RpcError::no_device("the switch is not running"),
            e => RpcError::internal(e.to_string()),
        })
    }

    fn text(&self, cmd: switch::control::Command) -> Result<String, RpcError> {
        self.run(cmd).map(|r| r.text())
    }
}

/// `dpustack switch run`'s JSON-RPC methods: `rpc_get_methods` and the switch's.
pub struct SwitchServer {
    methods: SwitchMethods,
}

impl SwitchServer {
    pub fn new(ctl: switch::control::Control) -> SwitchServer {
        SwitchServer {
            methods: SwitchMethods::new(Some(ctl)),
        }
    }
}

impl Dispatch for SwitchServer {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        if method == "rpc_get_methods" {
            let mut names = vec!["rpc_get_methods"];
            names.extend(switch_method_names());
            return Ok(json!(names));
        }
        self.methods.call(method, params)
    }
}

fn switch_method_names() -> impl Iterator<Item = &'static str> {
    NODE_METHODS
        .iter()
        .copied()
        .filter(|m| m.starts_with("dpustack_switch_"))
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

/// The one parameter `key` (among `allowed`, the others being aliases of it) as
/// ovs-ofctl lines: a string or an array of strings.
fn lines_param(p: Option<&Value>, allowed: &[&str], required: bool) -> Result<String, RpcError> {
    let m = params_object(p)?;
    if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(RpcError::params(format!(
            "Invalid parameters: unknown key {k:?}"
        )));
    }
    let key = allowed[0];
    match allowed.iter().find_map(|k| m.get(*k)) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(a)) => {
            let mut s = String::new();
            for l in a {
                let l = l.as_str().ok_or_else(|| {
                    RpcError::params(format!("Invalid parameters: {key} must be strings"))
                })?;
                s += l;
                s.push('\n');
            }
            Ok(s)
        }
        None if !required => Ok(String::new()),
        _ => Err(RpcError::params(format!(
            "Invalid parameters: {key} (ovs-ofctl lines, a string or an array) is required"
        ))),
    }
}

/// The required `port` parameter (an OpenFlow port number).
fn port_param(p: Option<&Value>) -> Result<u32, RpcError> {
    let m = params_object(p)?;
    if let Some(k) = m.keys().find(|k| k.as_str() != "port") {
        return Err(RpcError::params(format!(
            "Invalid parameters: unknown key {k:?}"
        )));
    }
    m.get("port")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| RpcError::params("Invalid parameters: port (a port number) is required"))
}

/// The optional `group_id` parameter: a number or "all" (absent: all).
fn group_param(p: Option<&Value>) -> Result<String, RpcError> {
    let m = params_object(p)?;
    if let Some(k) = m.keys().find(|k| k.as_str() != "group_id") {
        return Err(RpcError::params(format!(
            "Invalid parameters: unknown key {k:?}"
        )));
    }
    match m.get("group_id") {
        None => Ok(String::new()),
        Some(Value::String(s)) if s == "all" => Ok(String::new()),
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(|v| v.to_string())
            .ok_or_else(|| {
                RpcError::params("Invalid parameters: group_id must be a group number or \"all\"")
            }),
    }
}

impl Dispatch for SwitchMethods {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        use switch::control::Command as C;
        let done = |s: String| json!(s.trim_end());
        match method {
            "dpustack_switch_get_stats" => {
                no_params(params)?;
                match self.run(C::Stats)? {
                    switch::control::Reply::Stats(st) => Ok(Value::Object(
                        st.fields()
                            .iter()
                            .map(|(k, v)| (k.to_string(), json!(v)))
                            .collect(),
                    )),
                    other => Err(RpcError::internal(format!(
                        "unexpected answer to stats: {other:?}"
                    ))),
                }
            }
            "dpustack_switch_dump_flows" => {
                no_params(params)?;
                Ok(lines(&self.text(C::DumpFlows)?))
            }
            "dpustack_switch_dump_rules" => {
                let m = lines_param(params, &["match"], false)?;
                Ok(lines(&self.text(C::DumpRules(m))?))
            }
            "dpustack_switch_add_flows" => {
                let f = lines_param(params, &["flows"], true)?;
                Ok(done(self.text(C::AddFlows(f))?))
            }
            "dpustack_switch_replace_flows" => {
                let f = lines_param(params, &["flows"], true)?;
                Ok(done(self.text(C::ReplaceFlows(f))?))
            }
            "dpustack_switch_del_flows" => {
                // `flows`: the name this method's match had before `match`.
                let f = lines_param(params, &["match", "flows"], false)?;
                Ok(done(self.text(C::DelFlows(f))?))
            }
            "dpustack_switch_add_groups" => {
                let g = lines_param(params, &["groups"], true)?;
                Ok(done(self.text(C::AddGroups(g))?))
            }
            "dpustack_switch_mod_groups" => {
                let g = lines_param(params, &["groups"], true)?;
                Ok(done(self.text(C::ModGroups(g))?))
            }
            "dpustack_switch_del_groups" => {
                let g = group_param(params)?;
                Ok(done(self.text(C::DelGroups(g))?))
            }
            "dpustack_switch_dump_groups" => {
                no_params(params)?;
                Ok(lines(&self.text(C::DumpGroups)?))
            }
            "dpustack_switch_dump_group_stats" => {
                no_params(params)?;
                Ok(lines(&self.text(C::DumpGroupStats)?))
            }
            "dpustack_switch_fdb_show" => {
                no_params(params)?;
                Ok(lines(&self.text(C::FdbShow)?))
            }
            "dpustack_switch_fdb_flush" => {
                no_params(params)?;
                Ok(done(self.text(C::FdbFlush)?))
            }
            "dpustack_switch_port_down" => {
                let p = port_param(params)?;
                Ok(done(self.text(C::PortDown(p))?))
            }
            "dpustack_switch_port_up" => {
                let p = port_param(params)?;
                Ok(done(self.text(C::PortUp(p))?))
            }
            "dpustack_switch_offload_stats" => {
                no_params(params)?;
                Ok(lines(&self.text(C::OffloadStats)?))
            }
            "dpustack_switch_config" => {
                // KEY=VALUE settings: a string or an array of strings (none: show them).
                let s = lines_param(params, &["settings"], false)?;
                let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                Ok(lines(&self.text(C::Config(s))?))
            }
            "dpustack_switch_stop" => {
                no_params(params)?;
                Ok(done(self.text(C::Stop)?))
            }
            _ => Err(RpcError::method_not_found()),
        }
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
                    let l = dev.with_engine(|en| en.limits);
                    d["limits"] = json!({
                        "max_qp": l.max_qp, "max_cq": l.max_cq, "max_mr": l.max_mr,
                        "max_pd": l.max_pd, "max_srq": l.max_srq
                    });
                    d["counters"] = json!({
                        "refused_resources": c.refused_resources,
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
                Ok(json!({
                    "requests": ops,
                    "bulk_bytes_received": st.bulk_bytes_in(),
                    "clients": st.clients.clients(),
                    "max_clients": st.clients.max(),
                    "refused_clients": st.clients.refused(),
                }))
            }
            "dpustack_tse_get_stats" => {
                no_params(params)?;
                Ok(tse_stats_json())
            }
            m if m.starts_with("dpustack_switch_") => self.switch.call(m, params),
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
}
