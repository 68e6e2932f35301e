//! Flow table / megaflow switch (issue #7): switch trace, run, dump-flows,
//! add/del/replace-flows, `bench flow`: their arguments and output. The live
//! switch (ports, control commands, sweep) is the `switch` crate's; `switch run`
//! serves its control commands as JSON-RPC methods (`dpustack_switch_*`,
//! node::manage) on the management plane's server, and every control command
//! here is a JSON-RPC call.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use mgmt::DEFAULT_SOCKET;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use switch::trace::packet_key;
use switch::{StopHandle, SwitchOpts};

use crate::cmd::bench::BenchArgs;
use crate::config::Config;

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// OpenFlow table + megaflow datapath: trace, run, dump-flows, add-flows, del-flows, replace-flows.
    Switch {
        #[command(subcommand)]
        cmd: SwitchCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum SwitchCmd {
    /// Trace packets through a flow table like `ovs-appctl ofproto/trace`: prints the
    /// megaflow and the datapath actions OVS would install.
    Trace(TraceArgs),
    /// Run a live switch: ports on Linux interfaces (AF_PACKET) or pcap files, flows from
    /// an ovs-ofctl file, managed at run time over JSON-RPC (`-r PATH`, the
    /// `dpustack_switch_*` methods the other switch commands call).
    Run(RunArgs),
    /// Dump the datapath (megaflow) flows of a running switch, like `ovs-appctl dpctl/dump-flows`.
    DumpFlows(CtlArgs),
    /// Add flows (ovs-ofctl add-flows file, `-` = stdin) to a running switch.
    AddFlows(CtlFileArgs),
    /// Delete flows matching MATCH (all without MATCH) from a running switch.
    DelFlows(CtlMatchArgs),
    /// Replace all flows of a running switch with a file.
    ReplaceFlows(CtlFileArgs),
    /// Dump the OpenFlow rules of a running switch with their statistics, like
    /// `ovs-ofctl dump-flows` (cookie, duration, n_packets, n_bytes, timeouts, idle_age).
    DumpRules(CtlMatchArgs),
    /// Add groups (ovs-ofctl add-groups file, `-` = stdin) to a running switch.
    AddGroups(CtlFileArgs),
    /// Replace existing groups (ovs-ofctl mod-group lines) of a running switch.
    ModGroups(CtlFileArgs),
    /// Delete group ID (`group_id=ID` or `ID`; all without it), and the rules using it.
    DelGroups(CtlMatchArgs),
    /// Dump the groups of a running switch, like `ovs-ofctl dump-groups`.
    DumpGroups(CtlArgs),
    /// Group counters, like `ovs-ofctl dump-group-stats`.
    DumpGroupStats(CtlArgs),
    /// NORMAL's MAC learning table, like `ovs-appctl fdb/show`.
    FdbShow(CtlArgs),
    /// Empty NORMAL's MAC learning table, like `ovs-appctl fdb/flush`.
    FdbFlush(CtlArgs),
    /// Mark a port down (its fast-failover / select buckets die) or up again.
    PortDown(CtlPortArgs),
    PortUp(CtlPortArgs),
    /// The datapath and port counters of a running switch (`key value` lines).
    Stats(CtlArgs),
    /// Offload pipeline and revalidator counters of a running switch: queue depths,
    /// inserts, failures by reason, hw-forwarded packets, flow limit.
    OffloadStats(CtlArgs),
    /// Change datapath settings of a running switch: `hw-offload=true|false`,
    /// `hw-offload-priority=tc,rte`, `n-offload-threads=N`, `tc-policy=none|skip_sw|skip_hw`,
    /// `max-idle=MS`, `flow-limit=N`, `offloaded-stats-delay=MS` (none: print them).
    Config(CtlConfigArgs),
    /// Stop a running switch.
    Stop(CtlArgs),
}

#[derive(Args, Debug)]
pub struct CtlConfigArgs {
    /// JSON-RPC socket of the running switch (or node).
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub server: PathBuf,
    /// KEY=VALUE settings.
    pub settings: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CtlPortArgs {
    /// JSON-RPC socket of the running switch (or node).
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub server: PathBuf,
    /// OpenFlow port number.
    pub port: u32,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Initial flow table (ovs-ofctl add-flows syntax).
    #[arg(long)]
    pub flows: Option<PathBuf>,
    /// Initial group table (ovs-ofctl add-groups syntax).
    #[arg(long)]
    pub groups: Option<PathBuf>,
    /// A port: `N=afpacket:IFNAME`, `N=pcap-rx:FILE` (frames replayed as received on N)
    /// or `N=pcap-tx:FILE` (what is output to N is written there). Repeatable.
    #[arg(long = "port", value_name = "N=SPEC")]
    pub ports: Vec<String>,
    /// JSON-RPC socket (as SPDK's apps' -r; created 0600).
    #[arg(short = 'r', long = "rpc-socket", default_value = DEFAULT_SOCKET)]
    pub rpc_socket: PathBuf,
    /// Stop after this many seconds (default: until Ctrl-C or `switch stop`).
    #[arg(long)]
    pub duration: Option<f64>,
    /// OpenFlow 1.3 listener (ovs-ofctl, controllers connect here): `ptcp:[PORT][:IP]`
    /// (default 6653 on 127.0.0.1) or `punix:PATH`. Repeatable.
    #[arg(long = "listen", value_name = "TARGET")]
    pub of_listen: Vec<String>,
    /// OpenFlow 1.3 controller to connect to: `tcp:IP[:PORT]` (reconnects with
    /// back-off 1..8 s). Repeatable.
    #[arg(long = "controller", value_name = "tcp:IP[:PORT]")]
    pub of_controllers: Vec<String>,
    /// OVS fail mode with controllers: `secure` (table as it is) or `standalone`
    /// (NORMAL forwarding while no controller is connected).
    #[arg(long, default_value = "secure")]
    pub fail_mode: String,
    /// OpenFlow inactivity probe in seconds (0: off; OVS's default 5).
    #[arg(long, default_value_t = 5.0)]
    pub inactivity_probe: f64,
    /// OpenFlow datapath id (FEATURES_REPLY).
    #[arg(long, default_value_t = 1)]
    pub datapath_id: u64,
    /// Megaflows idle this long are removed (OVS other_config:max-idle).
    #[arg(long, default_value_t = 10_000)]
    pub max_idle_ms: u64,
    /// NORMAL: a port's VLAN config as ovs-vsctl sets it:
    /// `N:tag=V` (access), `N:trunks=A,B`, `N:tag=V;trunks=A,B;vlan_mode=native-untagged|native-tagged|access|trunk`.
    /// Ports not named are trunks of all VLANs. Repeatable.
    #[arg(long = "vlan", value_name = "N:CONFIG")]
    pub vlans: Vec<String>,
    /// NORMAL: seconds a learned MAC lives without traffic (OVS mac-aging-time).
    #[arg(long, default_value_t = 300)]
    pub mac_aging: u64,
    /// NORMAL: MAC learning table size (OVS mac-table-size).
    #[arg(long, default_value_t = 8192)]
    pub mac_table_size: usize,
    /// Offload megaflows to an emulated NIC (OVS hw-offload; no hardware is programmed).
    #[arg(long)]
    pub hw_offload: bool,
    /// Offload providers in priority order (OVS hw-offload-priority): tc, rte (emulated
    /// NIC), tc-linux (the kernel's tc flower on the afpacket ports, skip_hw; root).
    #[arg(long, default_value = "tc,rte")]
    pub offload_priority: String,
    /// Offload threads (OVS n-offload-threads).
    #[arg(long, default_value_t = 1)]
    pub n_offload_threads: usize,
    /// tc provider policy: none, skip_sw, skip_hw (OVS tc-policy).
    #[arg(long, default_value = "none")]
    pub tc_policy: String,
    /// Most datapath flows (OVS flow-limit; above it idle time 100 ms, above twice it
    /// every flow is deleted).
    #[arg(long, default_value_t = 200_000)]
    pub flow_limit: usize,
    /// Frames an AF_PACKET port's transmit queue holds while the kernel has no
    /// room; past it frames are dropped (`port_tx_dropped` in `switch stats`).
    #[arg(long, default_value_t = switch::port::DEFAULT_TX_QUEUE)]
    pub port_tx_queue: usize,
    /// OpenFlow connections accepted at once on the listeners; past it closed at
    /// accept (`of_connections_refused`).
    #[arg(long, default_value_t = switch::openflow_io::DEFAULT_MAX_CONNECTIONS)]
    pub of_max_connections: usize,
    /// Unsent OpenFlow output (bytes) past which a connection is closed.
    #[arg(long, default_value_t = switch::openflow::MAX_TX_BACKLOG)]
    pub of_max_backlog: usize,
    /// Unsent OpenFlow output (bytes) at which PACKET_IN / FLOW_REMOVED /
    /// PORT_STATUS to that connection are dropped (`of_async_dropped`).
    #[arg(long, default_value_t = switch::openflow::ASYNC_BACKLOG)]
    pub of_async_backlog: usize,
    /// Signature match cache between the EMC and the megaflow classifier (OVS
    /// other_config:smc-enable; off by default as in OVS).
    #[arg(long)]
    pub smc_enable: bool,
}

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// JSON-RPC socket of the running switch (or node).
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub server: PathBuf,
}

#[derive(Args, Debug)]
pub struct CtlFileArgs {
    /// JSON-RPC socket of the running switch (or node).
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub server: PathBuf,
    /// Flow file (`-` = stdin).
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct CtlMatchArgs {
    /// JSON-RPC socket of the running switch (or node).
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub server: PathBuf,
    /// Match (ovs-ofctl syntax, `table=N` included); without it: every flow (for
    /// del-groups: `group_id=N`, without it every group).
    pub r#match: Option<String>,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Flow table in `ovs-ofctl add-flows` syntax.
    #[arg(long)]
    pub flows: PathBuf,
    /// Groups in `ovs-ofctl add-groups` syntax.
    #[arg(long)]
    pub groups: Option<PathBuf>,
    /// Ports that are down (comma-separated; fast-failover/select bucket liveness).
    #[arg(long, value_delimiter = ',')]
    pub down: Vec<u32>,
    /// NORMAL: port VLAN config (`N:tag=V;trunks=A,B;vlan_mode=M`, see `switch run`);
    /// NORMAL needs --ports. A trace does not learn MACs.
    #[arg(long = "vlan", value_name = "N:CONFIG")]
    pub vlans: Vec<String>,
    /// Packets, one per line: an OpenFlow exact-flow string (`in_port=1,tcp,nw_dst=...`),
    /// optionally followed by the Ethernet frame as hex (then the frame is parsed and the
    /// flow string only supplies `in_port`).
    #[arg(long)]
    pub packets: Option<PathBuf>,
    /// Print a JSON list of {"packet","megaflow","actions"}.
    #[arg(long)]
    pub json: bool,
    /// Disable the nw_src/nw_dst prefix tries (like OVS `prefixes=none`).
    #[arg(long)]
    pub no_prefixes: bool,
    /// The switch's port numbers (comma-separated); outputs to other ports are dropped
    /// like OVS's "Nonexistent output port". Default: every port exists.
    #[arg(long, value_delimiter = ',')]
    pub ports: Vec<u32>,
    /// Packets given on the command line (same syntax as --packets lines).
    pub flow: Vec<String>,
}

fn trace_cmd(a: &TraceArgs) -> Result<()> {
    let rules = switch::read_flows(&a.flows)?;
    let groups = match &a.groups {
        Some(p) => switch::read_groups(p)?,
        None => Vec::new(),
    };
    let mut table = switch::build_table(rules, groups)?;
    table.ports_down = a.down.iter().copied().collect();
    table.cls.set_prefix_tracking(!a.no_prefixes);
    if !a.ports.is_empty() {
        table.ports = Some(a.ports.iter().copied().collect());
    }
    let uses_normal = table
        .rules
        .values()
        .any(|r| r.actions.contains(&flow::ofctl::Action::Normal));
    if uses_normal && table.ports.is_none() {
        eprintln!("warning: the table uses NORMAL but no --ports were given: NORMAL drops every packet (no input bundle)");
    }
    switch::configure_bridge(&mut table, &a.vlans, 300, 8192)?;
    let mut pkts: Vec<String> = a.flow.clone();
    if let Some(p) = &a.packets {
        let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        pkts.extend(
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
    }
    if pkts.is_empty() {
        bail!("no packets: give FLOW arguments or --packets FILE");
    }
    let mut out = Vec::new();
    for (i, p) in pkts.iter().enumerate() {
        let (k, bytes) = packet_key(p)?;
        // As OVS's ofproto/trace: a trace of packet bytes has side effects (NORMAL
        // learns its source MAC), a bare flow string has none.
        let t = if bytes {
            let x = table.xlate_upcall(&k, i as u64);
            flow::Trace {
                megaflow: flow::format_megaflow(&k, &x.wc),
                actions: flow::format_actions(&x.actions),
                error: x.error,
            }
        } else {
            flow::trace(&table, &k, false)
        };
        // A select group recirculates: trace the next pass like the datapath runs it
        // (OVS's ofproto/trace stops at `recirc(N)`; `hash()` needs the frame, so a
        // bare flow string is composed into one with zero payload).
        let passes = flow::trace_recirculations(&table, &k, bytes, 4);
        if a.json {
            let rec: Vec<_> = passes
                .iter()
                .map(|(dp_hash, t)| serde_json::json!({"dp_hash": format!("{dp_hash:#x}"), "megaflow": t.megaflow, "actions": t.actions}))
                .collect();
            out.push(
                serde_json::json!({"packet": p, "megaflow": t.megaflow, "actions": t.actions, "error": t.error.map(|e| e.to_string()), "recirculations": rec}),
            );
        } else {
            if i > 0 {
                println!();
            }
            if pkts.len() > 1 {
                println!("Packet: {p}");
            }
            println!("Megaflow: {}", t.megaflow);
            println!("Datapath actions: {}", t.actions);
            if let Some(e) = t.error {
                println!("Translation failed ({e}), packet is dropped.");
            }
            for (h, t) in &passes {
                println!("recirculation: dp_hash={h:#x}");
                println!("  Megaflow: {}", t.megaflow);
                println!("  Datapath actions: {}", t.actions);
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    let Cmd::Switch { cmd } = cmd;
    let opt = |m: &Option<String>| m.clone().unwrap_or_default();
    match cmd {
        SwitchCmd::Trace(a) => trace_cmd(&a),
        SwitchCmd::Run(a) => run_switch(&a),
        SwitchCmd::DumpFlows(a) => rpc(&a.server, "dump_flows", None),
        SwitchCmd::DumpRules(a) => rpc(
            &a.server,
            "dump_rules",
            Some(json!({"match": opt(&a.r#match)})),
        ),
        SwitchCmd::Stop(a) => rpc(&a.server, "stop", None),
        SwitchCmd::Stats(a) => rpc(&a.server, "get_stats", None),
        SwitchCmd::AddGroups(a) => rpc(
            &a.server,
            "add_groups",
            Some(json!({"groups": read_arg_file(&a.file)?})),
        ),
        SwitchCmd::ModGroups(a) => rpc(
            &a.server,
            "mod_groups",
            Some(json!({"groups": read_arg_file(&a.file)?})),
        ),
        SwitchCmd::OffloadStats(a) => rpc(&a.server, "offload_stats", None),
        SwitchCmd::Config(a) => rpc(
            &a.server,
            "config",
            Some(json!({"settings": a.settings.join(" ")})),
        ),
        SwitchCmd::DelGroups(a) => {
            let g = match a.r#match.as_deref().map(str::trim) {
                None | Some("" | "all" | "group_id=all") => None,
                Some(s) => {
                    let v = s.strip_prefix("group_id=").unwrap_or(s);
                    Some(
                        v.parse::<u32>()
                            .with_context(|| format!("bad group id `{v}`"))?,
                    )
                }
            };
            let p = g.map(|g| json!({"group_id": g}));
            rpc(&a.server, "del_groups", p)
        }
        SwitchCmd::DumpGroups(a) => rpc(&a.server, "dump_groups", None),
        SwitchCmd::FdbShow(a) => rpc(&a.server, "fdb_show", None),
        SwitchCmd::FdbFlush(a) => rpc(&a.server, "fdb_flush", None),
        SwitchCmd::DumpGroupStats(a) => rpc(&a.server, "dump_group_stats", None),
        SwitchCmd::PortDown(a) => rpc(&a.server, "port_down", Some(json!({"port": a.port}))),
        SwitchCmd::PortUp(a) => rpc(&a.server, "port_up", Some(json!({"port": a.port}))),
        SwitchCmd::AddFlows(a) => rpc(
            &a.server,
            "add_flows",
            Some(json!({"flows": read_arg_file(&a.file)?})),
        ),
        SwitchCmd::ReplaceFlows(a) => rpc(
            &a.server,
            "replace_flows",
            Some(json!({"flows": read_arg_file(&a.file)?})),
        ),
        SwitchCmd::DelFlows(a) => rpc(
            &a.server,
            "del_flows",
            Some(json!({"match": opt(&a.r#match)})),
        ),
    }
}

fn read_arg_file(p: &std::path::Path) -> Result<String> {
    if p.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    }
}

/// Calls `dpustack_switch_<what>` on the JSON-RPC server at `sock` and prints the
/// answer as ovs-ofctl / ovs-appctl would: lines, a message, or `key value` lines.
fn rpc(sock: &std::path::Path, what: &str, params: Option<Value>) -> Result<()> {
    let method = format!("dpustack_switch_{what}");
    // The switch answers within its REPLY_TIMEOUT; the connection waits a little longer.
    let t = switch::control::REPLY_TIMEOUT + std::time::Duration::from_secs(5);
    let mut c = mgmt::client::Client::connect(sock, t).with_context(|| {
        format!(
            "connecting to the switch's JSON-RPC socket {}",
            sock.display()
        )
    })?;
    let v = match c.call(&method, params)? {
        Ok(v) => v,
        Err(e) => bail!("{method}: {} (JSON-RPC error {})", e.message, e.code),
    };
    print!("{}", render(&v));
    Ok(())
}

/// The text of a `dpustack_switch_*` answer.
fn render(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Array(a) => {
            for l in a {
                out += l
                    .as_str()
                    .map_or_else(|| l.to_string(), str::to_string)
                    .as_str();
                out.push('\n');
            }
        }
        Value::String(s) => {
            out += s;
            out.push('\n');
        }
        Value::Object(m) => {
            for (k, v) in m {
                out += &format!("{k} {v}\n");
            }
        }
        other => {
            out += &other.to_string();
            out.push('\n');
        }
    }
    out
}

/// `switch run`: the live switch on this thread until Ctrl-C, `switch stop` or
/// `--duration`, with the JSON-RPC server for its control commands.
fn run_switch(a: &RunArgs) -> Result<()> {
    let stop = StopHandle::new();
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.stop());
    }
    let opts = SwitchOpts {
        flows: a.flows.clone(),
        groups: a.groups.clone(),
        ports: a.ports.clone(),
        duration: a.duration.map(std::time::Duration::from_secs_f64),
        max_idle_ms: a.max_idle_ms,
        vlans: a.vlans.clone(),
        mac_aging_s: a.mac_aging,
        mac_table_size: a.mac_table_size,
        openflow: switch::openflow_io::OfOpts {
            listen: a.of_listen.clone(),
            controllers: a.of_controllers.clone(),
            fail_mode: a.fail_mode.clone(),
            probe_ms: (a.inactivity_probe * 1000.0) as u64,
            datapath_id: a.datapath_id,
            max_connections: a.of_max_connections,
            max_backlog: a.of_max_backlog,
            async_backlog: a.of_async_backlog,
        },
        dp: switch::DatapathOpts {
            hw_offload: a.hw_offload,
            offload_priority: a.offload_priority.clone(),
            n_offload_threads: a.n_offload_threads,
            tc_policy: a.tc_policy.clone(),
            flow_limit: a.flow_limit,
            port_tx_queue: a.port_tx_queue,
            smc_enable: a.smc_enable,
            ..Default::default()
        },
    };
    let (ctl, crx) = switch::control::channel()?;
    // The server first: a socket in use is an error before any port is opened. A call
    // made before the loop runs waits for it (or fails when the switch did not start).
    let server = mgmt::RpcServer::start(
        &a.rpc_socket,
        Arc::new(node::manage::SwitchServer::new(ctl)),
    )
    .with_context(|| {
        format!(
            "starting the switch's JSON-RPC server on {} (-r PATH for another)",
            a.rpc_socket.display()
        )
    })?;
    eprintln!("JSON-RPC on {}", a.rpc_socket.display());
    let r = switch::run(&opts, &stop, &crx, &mut std::io::stderr());
    server.stop();
    r?;
    Ok(())
}

/// Median, min, max of `v`.
fn mmm(mut v: Vec<f64>) -> (f64, f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (benchkit::median(&mut v).unwrap_or(0.0), lo, hi)
}

/// `dpustack bench offload`: flow offload into the emulated NIC (no hardware): insert
/// rate per provider next to software megaflow installs, the offload threads' rate,
/// revalidator rounds at 10 k / 100 k megaflows next to translating their keys, and
/// forwarding with offload on vs off. Every row: median of `--runs`, min/max in detail.
pub fn bench_offload(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{Better, Figure};
    use flow::bench as fb;
    let runs = args.runs();
    let t = args.run_time();
    let n = if args.quick { 10_000 } else { 100_000 };
    let mut rep = benchkit::Report::new("offload");
    let specs = fb::offload_specs(n);
    for p in ["tc", "rte"] {
        let (mut v, mut b) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (x, failed, base) = fb::offload_insert_rate(p, &specs);
            if failed > 0 {
                bail!("{p}: {failed} of {n} flows refused: the insert rate would time refusals");
            }
            v.push(x);
            b.push(base);
        }
        let (m, lo, hi) = mmm(v);
        let (bm, blo, bhi) = mmm(b);
        rep.push(
            Figure::new(
                format!("offload insert, {p} provider, {}k flows", n / 1000),
                m / 1e3,
                "kflows/s",
                "software megaflow install, same flows",
                bm / 1e3,
                Better::Higher,
            )
            .with_detail(serde_json::json!({"min": lo / 1e3, "max": hi / 1e3, "baseline_min": blo / 1e3, "baseline_max": bhi / 1e3, "runs": runs, "nic_insert_cost": 0})),
        );
    }
    let mut base_v = Vec::new();
    for _ in 0..runs {
        base_v.push(fb::offload_insert_rate("tc", &specs).0);
    }
    let (tc_m, _, _) = mmm(base_v);
    for threads in [1usize, 2] {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(fb::offload_pipeline_rate(&specs, threads));
        }
        let (m, lo, hi) = mmm(v);
        rep.push(
            Figure::new(
                format!(
                    "offload insert via {threads} offload thread(s), tc,rte, {}k flows",
                    n / 1000
                ),
                m / 1e3,
                "kflows/s",
                "tc provider called directly",
                tc_m / 1e3,
                Better::Higher,
            )
            .with_detail(serde_json::json!({"min": lo / 1e3, "max": hi / 1e3, "runs": runs})),
        );
    }
    for flows in [10_000usize, 100_000] {
        if args.quick && flows > 10_000 {
            continue;
        }
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (plain, full, base) = fb::reval_times(flows);
            a.push(plain);
            b.push(full);
            c.push(base);
        }
        let (am, alo, ahi) = mmm(a);
        let (bm, blo, bhi) = mmm(b);
        let (cm, _, _) = mmm(c);
        rep.push(
            Figure::new(
                format!(
                    "revalidator round, {}k flows, no table change (stats push + idle)",
                    flows / 1000
                ),
                am,
                "ms",
                "translating every flow's key",
                cm,
                Better::Lower,
            )
            .with_detail(serde_json::json!({"min": alo, "max": ahi, "runs": runs})),
        );
        rep.push(
            Figure::new(
                format!(
                    "revalidator round, {}k flows, after a table change (all re-translated)",
                    flows / 1000
                ),
                bm,
                "ms",
                "translating every flow's key",
                cm,
                Better::Lower,
            )
            .with_detail(serde_json::json!({"min": blo, "max": bhi, "runs": runs})),
        );
    }
    let fwd_n = if args.quick { 10_000 } else { 100_000 };
    let mut off = (Vec::new(), Vec::new());
    let mut on: Vec<(&str, Vec<f64>, Vec<f64>, usize)> =
        vec![("tc", vec![], vec![], 0), ("rte", vec![], vec![], 0)];
    for _ in 0..runs {
        let (nw, hits, _) = fb::forwarding_rate(t, None, fwd_n);
        off.0.push(nw);
        off.1.push(hits);
        for o in on.iter_mut() {
            let (nw, hits, offloaded) = fb::forwarding_rate(t, Some(o.0), fwd_n);
            o.1.push(nw);
            o.2.push(hits);
            o.3 = offloaded;
        }
    }
    let (onw, _, _) = mmm(off.0.clone());
    let (ohit, _, _) = mmm(off.1.clone());
    for (p, nw, hits, offloaded) in on {
        let (m, lo, hi) = mmm(nw);
        rep.push(
            Figure::new(
                format!("forwarding new flows (upcall+install+ADD queued), offload {p}, {}k flows", fwd_n / 1000),
                m / 1e6,
                "Mpps",
                "same, offload off",
                onw / 1e6,
                Better::Higher,
            )
            .with_detail(serde_json::json!({"min": lo / 1e6, "max": hi / 1e6, "offloaded_at_end": offloaded, "runs": runs})),
        );
        let (m, lo, hi) = mmm(hits);
        rep.push(
            Figure::new(
                format!(
                    "forwarding offloaded flows (emulated NIC on this core), {p}, {}k flows",
                    fwd_n / 1000
                ),
                m / 1e6,
                "Mpps",
                "software cache (EMC+megaflow), offload off",
                ohit / 1e6,
                Better::Higher,
            )
            .with_detail(serde_json::json!({"min": lo / 1e6, "max": hi / 1e6, "runs": runs})),
        );
    }
    rep.note("The NIC is emulated in software: its lookup and actions run on the forwarding core, so 'offloaded' forwarding rates measure the emulation, not hardware.");
    Ok(rep)
}

/// `bench flow` rows of the classifier with caches (issue 14): for 10 / 100 / 1000
/// masks x 1 k / 100 k megaflows x uniform / Zipf traffic over 128 k connections, the
/// lookup rate (hash + EMC / SMC / ranked classifier) with: the SMC (EMC off) next to
/// the ranked classifier alone; EMC + SMC next to the EMC alone; the ranked
/// classifier next to the classifier in creation order. All configurations of a
/// cell run on the same datapath and stream, interleaved in each run; every row is
/// the median of `runs`, min/max and hit shares in its detail.
fn bench_caches(rep: &mut benchkit::Report, t: std::time::Duration, runs: u32, quick: bool) {
    use benchkit::{Better, Figure};
    use flow::bench::{Caches, ClsFigure, ClsWorkload, Traffic};
    const CONFIGS: [(&str, Caches); 5] = [
        (
            "classifier, creation order",
            Caches {
                emc: false,
                smc: false,
                ranking: false,
            },
        ),
        (
            "classifier, ranked",
            Caches {
                emc: false,
                smc: false,
                ranking: true,
            },
        ),
        (
            "SMC + ranked classifier",
            Caches {
                emc: false,
                smc: true,
                ranking: true,
            },
        ),
        (
            "EMC + ranked classifier",
            Caches {
                emc: true,
                smc: false,
                ranking: true,
            },
        ),
        (
            "EMC + SMC + ranked classifier",
            Caches {
                emc: true,
                smc: true,
                ranking: true,
            },
        ),
    ];
    // (value config, baseline config)
    const ROWS: [(usize, usize); 3] = [(2, 1), (4, 3), (1, 0)];
    for &masks in &[10usize, 100, 1000] {
        for &flows in &[1_000usize, 100_000] {
            if quick && flows > 1000 {
                continue;
            }
            for traffic in [Traffic::Uniform, Traffic::Zipf] {
                let mut w = ClsWorkload::new(masks, flows, traffic);
                let top10 = w.top_share(10, flows);
                let mut res: Vec<Vec<ClsFigure>> = vec![Vec::new(); CONFIGS.len()];
                for _ in 0..runs {
                    for (i, (_, c)) in CONFIGS.iter().enumerate() {
                        res[i].push(w.measure(t, *c));
                    }
                }
                let stat = |i: usize| {
                    let v: Vec<f64> = res[i].iter().map(|f| f.rate / 1e6).collect();
                    let (m, lo, hi) = mmm(v);
                    let mid = |g: fn(&ClsFigure) -> f64| {
                        let (x, _, _) = mmm(res[i].iter().map(g).collect());
                        x
                    };
                    let (wall, _, _) = mmm(res[i].iter().map(|f| f.wall_rate / 1e6).collect());
                    (
                        m,
                        serde_json::json!({
                            "min": lo, "max": hi, "runs": runs, "wall_clock_median": wall,
                            "emc_pct": mid(|f| f.emc_pct), "smc_pct": mid(|f| f.smc_pct),
                            "classifier_pct": mid(|f| f.dpcls_pct),
                            "subtables_per_classifier_lookup": mid(|f| f.probes),
                        }),
                    )
                };
                let tname = match traffic {
                    Traffic::Uniform => "uniform",
                    Traffic::Zipf => "Zipf",
                };
                for (v, b) in ROWS {
                    let (vm, vd) = stat(v);
                    let (bm, bd) = stat(b);
                    rep.push(
                        Figure::new(
                            format!(
                                "{}, {masks} masks, {}k flows, {tname}",
                                CONFIGS[v].0,
                                flows / 1000
                            ),
                            vm,
                            "Mlookup/CPU-s",
                            CONFIGS[b].0,
                            bm,
                            Better::Higher,
                        )
                        .with_detail(serde_json::json!({
                            "value": vd, "baseline": bd, "traffic": tname,
                            "top10_megaflow_share": top10,
                            "connections": flow::bench::CONNS,
                            "zipf_s": flow::bench::ZIPF_S,
                        })),
                    );
                }
            }
        }
    }
    rep.note("classifier-with-caches rows: 128k connections (exact keys) over the megaflows, a stream of 256k packets replayed; Zipf: megaflow popularity ~1/rank (ranks shuffled), connection uniform within its megaflow; every lookup hashes the key; lookups in batches of 32 (Datapath::lookup_batch, as OVS does; the switch's receive loop still looks up one packet at a time); EMC 8k entries, SMC 1M entries; rates per second of the thread's CPU time (schedstat), the wall-clock median in the detail");
}

/// `dpustack bench flow`: single-core lookup rates of the datapath cache, each next to
/// the same-run cost of hashing a flow key (the EMC's own hash over the whole key).
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure};
    use flow::bench as fb;
    let t = args.run_time();
    let runs = args.runs();
    let med = |mut v: Vec<f64>| median(&mut v).unwrap_or(0.0);
    let mut rep = benchkit::Report::new("flow");
    let mut base = Vec::new();
    let mut cpy = Vec::new();
    for _ in 0..runs {
        base.push(fb::baseline_hash(t));
        cpy.push(fb::baseline_memcpy(t));
    }
    let base = med(base);
    let cpy = med(cpy);
    let key_bytes = std::mem::size_of::<flow::FlowKey>();
    let bname = format!("hash of flow key ({key_bytes} B)");
    let bname = bname.as_str();
    rep.push(Figure::new(
        format!("baseline: memcpy of flow key ({key_bytes} B)"),
        cpy / 1e6,
        "Mops/s",
        bname,
        base / 1e6,
        Better::Higher,
    ));
    let (mut v, mut d) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, emc) = fb::emc_hits(t, 1000);
        v.push(x);
        d.push(emc);
    }
    rep.push(
        Figure::new(
            "EMC hit lookups (1k flows, incl. stats)",
            med(v) / 1e6,
            "Mlookup/s",
            bname,
            base / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"emc_hit_pct": med(d)})),
    );
    let mut v = Vec::new();
    for _ in 0..runs {
        v.push(fb::emc_hits_with_parse(t, 1000));
    }
    rep.push(Figure::new(
        "EMC hits incl. parse of 64 B TCP/UDP frame",
        med(v) / 1e6,
        "Mpps",
        bname,
        base / 1e6,
        Better::Higher,
    ));
    let quick = args.quick;
    for &masks in &[10usize, 100, 1000] {
        for &flows in &[1_000usize, 100_000] {
            if flows < masks || (quick && flows > 1000) {
                continue;
            }
            let (mut v, mut p) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let (x, probes) = fb::dpcls_lookups(t, masks, flows);
                v.push(x);
                p.push(probes);
            }
            rep.push(
                Figure::new(
                    format!("megaflow lookups, {masks} masks, {}k flows", flows / 1000),
                    med(v) / 1e6,
                    "Mlookup/s",
                    bname,
                    base / 1e6,
                    Better::Higher,
                )
                .with_detail(serde_json::json!({"avg_subtables_probed": med(p), "emc": false, "hit_distribution": "uniform over megaflows"})),
            );
        }
    }
    bench_caches(&mut rep, t, runs, quick);
    let (mut v, mut fr) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, frac) = fb::upcalls(t, 1000);
        v.push(x);
        fr.push(frac);
    }
    rep.push(
        Figure::new(
            "upcalls (miss -> xlate -> install), 1k rules",
            med(v) / 1e6,
            "Mupcall/s",
            bname,
            base / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"megaflows_per_mask_at_end": med(fr)})),
    );
    // Pipelines (issue 20): a 4-table pipeline of 1 k rules per table (goto_table + a
    // register load per table) next to a 1 k-rule table 0, interleaved in the same run:
    // upcalls (translate through every table + install) and megaflow hits (EMC off) on
    // the megaflows those upcalls installed.
    let one = fb::random_table(&mut fb::Rng::new(5), 1000);
    let four = fb::random_pipeline(&mut fb::Rng::new(6), 4, 1000);
    let (mut u1, mut h1, mut u4, mut h4) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut f4, mut m4, mut f1, mut m1) = (0, 0, 0, 0);
    for _ in 0..runs {
        let (u, h, f, m) = fb::table_rates(t, &one);
        u1.push(u);
        h1.push(h);
        (f1, m1) = (f, m);
        let (u, h, f, m) = fb::table_rates(t, &four);
        u4.push(u);
        h4.push(h);
        (f4, m4) = (f, m);
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        serde_json::json!({"min": lo / 1e6, "max": hi / 1e6, "runs": v.len()})
    };
    let (mu1, mh1) = (med(u1.clone()), med(h1.clone()));
    rep.push(
        Figure::new(
            "4-table pipeline (1k rules/table): megaflow hits",
            med(h4.clone()) / 1e6,
            "Mlookup/s",
            "same-run table-0 (1k rules) megaflow hits",
            mh1 / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"spread": spread(&h4), "table0_spread": spread(&h1), "megaflows": f4, "masks": m4, "table0_megaflows": f1, "table0_masks": m1, "emc": false})),
    );
    rep.push(
        Figure::new(
            "4-table pipeline (1k rules/table): upcalls (xlate all tables + install)",
            med(u4.clone()) / 1e6,
            "Mupcall/s",
            "same-run table-0 (1k rules) upcalls",
            mu1 / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"spread": spread(&u4), "table0_spread": spread(&u1)})),
    );
    rep.note("single core, keys pre-parsed (parsing excluded); EMC off for the megaflow figures");
    rep.note("context (OVS commit messages, 10G NIC): dpcls ~5.4 Mpps/core, EMC ~12 Mpps/core");
    rep.note("megaflow packets pick a megaflow uniformly, so about half the masks are probed: tuple space search cost grows with masks");
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_render_as_ovs_text() {
        assert_eq!(render(&json!(["a=1", "b=2"])), "a=1\nb=2\n");
        assert_eq!(render(&json!([])), "");
        assert_eq!(
            render(&json!("2 flows added, 2 in table")),
            "2 flows added, 2 in table\n"
        );
        assert_eq!(
            render(&json!({"rules": 2, "upcalls": 0})),
            "rules 2\nupcalls 0\n"
        );
    }
}
