//! Flow table / megaflow switch (issue #7): switch trace, run, dump-flows, add/del/replace-flows.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::cmd::bench::BenchArgs;
use crate::config::Config;
use crate::up::Part;

/// The `[switch]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    pub enabled: bool,
    /// Initial flow table for `dpustack up` (ovs-ofctl add-flows file).
    pub flows: Option<PathBuf>,
    /// Ports for `dpustack up`, as for `switch run --port`: "N=afpacket:IF", ...
    /// Without ports the switch is not started by `up`.
    pub ports: Vec<String>,
    /// Control socket.
    pub ctl: PathBuf,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            enabled: true,
            flows: None,
            ports: Vec::new(),
            ctl: PathBuf::from(DEFAULT_CTL),
        }
    }
}

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
    /// an ovs-ofctl file, managed at run time through a control socket.
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
    DumpRules(CtlArgs),
    /// Stop a running switch.
    Stop(CtlArgs),
}

const DEFAULT_CTL: &str = "/tmp/dpustack-switch.sock";

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Initial flow table (ovs-ofctl add-flows syntax).
    #[arg(long)]
    pub flows: Option<PathBuf>,
    /// A port: `N=afpacket:IFNAME`, `N=pcap-rx:FILE` (frames replayed as received on N)
    /// or `N=pcap-tx:FILE` (what is output to N is written there). Repeatable.
    #[arg(long = "port", value_name = "N=SPEC")]
    pub ports: Vec<String>,
    /// Control socket path.
    #[arg(long, default_value = DEFAULT_CTL)]
    pub ctl: PathBuf,
    /// Stop after this many seconds (default: until Ctrl-C or `switch stop`).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Megaflows idle this long are removed (OVS other_config:max-idle).
    #[arg(long, default_value_t = 10_000)]
    pub max_idle_ms: u64,
}

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Control socket of the running switch.
    #[arg(long, default_value = DEFAULT_CTL)]
    pub ctl: PathBuf,
}

#[derive(Args, Debug)]
pub struct CtlFileArgs {
    #[arg(long, default_value = DEFAULT_CTL)]
    pub ctl: PathBuf,
    /// Flow file (`-` = stdin).
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct CtlMatchArgs {
    #[arg(long, default_value = DEFAULT_CTL)]
    pub ctl: PathBuf,
    /// Match (ovs-ofctl syntax); without it every flow is deleted.
    pub r#match: Option<String>,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Flow table in `ovs-ofctl add-flows` syntax.
    #[arg(long)]
    pub flows: PathBuf,
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

fn is_hex(s: &str) -> bool {
    s.len() >= 28 && s.len().is_multiple_of(2) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Parses one packet line into a flow key; true when it came from packet bytes.
pub fn packet_key(line: &str) -> Result<(flow::FlowKey, bool)> {
    let line = line.trim();
    let mut parts = line.split_whitespace();
    let first = parts.next().unwrap_or("");
    if let Some(h) = parts.next() {
        if is_hex(h) {
            let meta =
                flow::parse_exact_flow(first).map_err(|e| anyhow!("packet `{line}`: {e}"))?;
            return Ok((
                flow::FlowKey::from_packet(meta.in_port(), &hex_bytes(h)),
                true,
            ));
        }
    }
    let k = flow::parse_exact_flow(line).map_err(|e| anyhow!("packet `{line}`: {e}"))?;
    Ok((k, false))
}

fn trace_cmd(a: &TraceArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.flows)
        .with_context(|| format!("reading {}", a.flows.display()))?;
    let rules = flow::parse_flows(&text).map_err(|e| anyhow!("{}: {e}", a.flows.display()))?;
    let mut table = flow::FlowTable::from_rules(rules);
    table.cls.set_prefix_tracking(!a.no_prefixes);
    if !a.ports.is_empty() {
        table.ports = Some(a.ports.iter().copied().collect());
    }
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
        let t = flow::trace(&table, &k, bytes);
        if a.json {
            out.push(
                serde_json::json!({"packet": p, "megaflow": t.megaflow, "actions": t.actions}),
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
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    let Cmd::Switch { cmd } = cmd;
    match cmd {
        SwitchCmd::Trace(a) => trace_cmd(&a),
        SwitchCmd::Run(a) => live::run(&a),
        SwitchCmd::DumpFlows(a) => ctl_call(&a.ctl, "dump-flows", ""),
        SwitchCmd::DumpRules(a) => ctl_call(&a.ctl, "dump-rules", ""),
        SwitchCmd::Stop(a) => ctl_call(&a.ctl, "stop", ""),
        SwitchCmd::AddFlows(a) => ctl_call(&a.ctl, "add-flows", &read_arg_file(&a.file)?),
        SwitchCmd::ReplaceFlows(a) => ctl_call(&a.ctl, "replace-flows", &read_arg_file(&a.file)?),
        SwitchCmd::DelFlows(a) => ctl_call(&a.ctl, "del-flows", a.r#match.as_deref().unwrap_or("")),
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

/// Sends one request to a running switch: first line the command, then the payload.
fn ctl_call(sock: &std::path::Path, cmd: &str, payload: &str) -> Result<()> {
    use std::io::{Read, Write};
    let mut c = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("connecting to the switch at {}", sock.display()))?;
    c.write_all(format!("{cmd}\n{payload}").as_bytes())?;
    c.shutdown(std::net::Shutdown::Write)?;
    let mut resp = String::new();
    c.read_to_string(&mut resp)?;
    if let Some(e) = resp.strip_prefix("ERROR: ") {
        bail!("{}", e.trim_end());
    }
    print!("{}", resp.strip_prefix("OK\n").unwrap_or(&resp));
    Ok(())
}

mod live {
    //! The live switch loop: AF_PACKET/pcap ports, datapath cache, control socket.
    use anyhow::{anyhow, bail, Context, Result};
    use flow::dp::Datapath;
    use flow::driver::{poll_readable, read_pcap, AfPacket, LinkType, PcapWriter};
    use flow::FlowTable;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::os::unix::io::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    static STOP: AtomicBool = AtomicBool::new(false);

    /// Period of the stats push + expiry sweep (ms).
    const SWEEP_MS: u64 = 500;

    enum Port {
        Af(AfPacket),
        PcapRx(Vec<Vec<u8>>),
        PcapTx(PcapWriter<std::fs::File>),
    }

    #[derive(Default)]
    struct Counters {
        rx: u64,
        tx: u64,
        dropped_no_port: u64,
        packet_ins: u64,
        rules_expired: u64,
    }

    fn open_port(spec: &str) -> Result<(u32, Port)> {
        let (n, rest) = spec
            .split_once('=')
            .ok_or_else(|| anyhow!("port `{spec}`: expected N=SPEC"))?;
        let n: u32 = n
            .parse()
            .map_err(|_| anyhow!("port `{spec}`: bad port number"))?;
        let (kind, arg) = rest.split_once(':').ok_or_else(|| {
            anyhow!("port `{spec}`: expected afpacket:IF, pcap-rx:FILE or pcap-tx:FILE")
        })?;
        let p = match kind {
            "afpacket" => {
                Port::Af(AfPacket::open(arg).with_context(|| format!("AF_PACKET on {arg}"))?)
            }
            "pcap-rx" => Port::PcapRx(read_pcap(
                std::fs::File::open(arg).with_context(|| format!("opening {arg}"))?,
            )?),
            "pcap-tx" => Port::PcapTx(PcapWriter::new(
                std::fs::File::create(arg).with_context(|| format!("creating {arg}"))?,
                LinkType::Ethernet,
            )?),
            _ => bail!("port `{spec}`: unknown kind `{kind}`"),
        };
        Ok((n, p))
    }

    fn handle_ctl(req: &str, table: &mut FlowTable, dp: &mut Datapath, now: u64) -> (String, bool) {
        let (cmd, payload) = req.split_once('\n').unwrap_or((req, ""));
        let mut stop = false;
        let r: Result<String> = (|| {
            Ok(match cmd.trim() {
                "dump-flows" => {
                    let mut s = String::new();
                    for l in dp.dump(now, 1.0) {
                        s += &l;
                        s.push('\n');
                    }
                    s
                }
                "dump-rules" => {
                    // Fresh counters: credit the megaflows' traffic first.
                    dp.push_stats(table);
                    let mut s = String::new();
                    for l in table.dump_rules(now) {
                        s += &l;
                        s.push('\n');
                    }
                    s
                }
                "add-flows" | "replace-flows" => {
                    let rules = flow::parse_flows(payload).map_err(|e| anyhow!("{e}"))?;
                    // Credit the rules before the megaflows go.
                    dp.push_stats(table);
                    if cmd.trim() == "replace-flows" {
                        table.clear();
                    }
                    let n = rules.len();
                    for r in rules {
                        table.add_at(r, now);
                    }
                    // No revalidator yet (issue 8): megaflows are flushed on any change.
                    dp.flush();
                    format!("{n} flows added, {} in table\n", table.len())
                }
                "del-flows" => {
                    dp.push_stats(table);
                    let n = if payload.trim().is_empty() {
                        let n = table.len();
                        table.clear();
                        n
                    } else {
                        let m =
                            flow::ofctl::parse_match(payload.trim()).map_err(|e| anyhow!("{e}"))?;
                        table.del_matching(&m)
                    };
                    dp.flush();
                    format!("{n} flows deleted, {} in table\n", table.len())
                }
                "stop" => {
                    stop = true;
                    "stopping\n".to_string()
                }
                other => bail!("unknown command `{other}`"),
            })
        })();
        match r {
            Ok(s) => (format!("OK\n{s}"), stop),
            Err(e) => (format!("ERROR: {e}\n"), stop),
        }
    }

    /// Asks a running switch loop to stop.
    pub fn request_stop() {
        STOP.store(true, Ordering::SeqCst);
    }

    pub fn run(a: &super::RunArgs) -> Result<()> {
        let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst));
        run_with(a, None)
    }

    /// The switch loop; `ready` is told once the ports and control socket are open.
    pub fn run_with(
        a: &super::RunArgs,
        ready: Option<std::sync::mpsc::Sender<std::result::Result<(), String>>>,
    ) -> Result<()> {
        let r = setup(a);
        let (mut table, mut ports, listener) = match r {
            Ok(x) => {
                if let Some(t) = &ready {
                    let _ = t.send(Ok(()));
                }
                x
            }
            Err(e) => {
                if let Some(t) = &ready {
                    let _ = t.send(Err(format!("{e:#}")));
                }
                return Err(e);
            }
        };
        run_loop(a, &mut table, &mut ports, listener)
    }

    type Setup = (
        FlowTable,
        BTreeMap<u32, Port>,
        std::os::unix::net::UnixListener,
    );

    fn setup(a: &super::RunArgs) -> Result<Setup> {
        let table = match &a.flows {
            Some(p) => {
                let t = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                FlowTable::from_rules(
                    flow::parse_flows(&t).map_err(|e| anyhow!("{}: {e}", p.display()))?,
                )
            }
            None => FlowTable::new(),
        };
        let mut ports: BTreeMap<u32, Port> = BTreeMap::new();
        for spec in &a.ports {
            let (n, p) = open_port(spec)?;
            if ports.insert(n, p).is_some() {
                bail!("port {n} given twice");
            }
        }
        if ports.is_empty() {
            bail!("no ports: give --port N=afpacket:IF / pcap-rx:FILE / pcap-tx:FILE");
        }
        let mut table = table;
        table.ports = Some(ports.keys().copied().collect());
        let _ = std::fs::remove_file(&a.ctl);
        let listener = std::os::unix::net::UnixListener::bind(&a.ctl)
            .with_context(|| format!("binding {}", a.ctl.display()))?;
        listener.set_nonblocking(true)?;
        Ok((table, ports, listener))
    }

    fn run_loop(
        a: &super::RunArgs,
        table: &mut FlowTable,
        ports: &mut BTreeMap<u32, Port>,
        listener: std::os::unix::net::UnixListener,
    ) -> Result<()> {
        STOP.store(false, Ordering::SeqCst);
        let mut dp = Datapath::new();
        let start = Instant::now();
        let deadline = a.duration.map(|d| start + Duration::from_secs_f64(d));
        let mut c = Counters::default();
        let mut last_expire = 0u64;
        let mut buf = vec![0u8; 65536];
        let mut pending: Vec<(u32, Vec<u8>)> = Vec::new();
        // pcap-rx ports are replayed once, in port order.
        for (&n, p) in ports.iter_mut() {
            if let Port::PcapRx(frames) = p {
                for fr in frames.drain(..) {
                    pending.push((n, fr));
                }
            }
        }
        eprintln!(
            "switch running: {} ports, {} rules, control socket {}",
            ports.len(),
            table.len(),
            a.ctl.display()
        );
        while !STOP.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
            let now_ms = start.elapsed().as_millis() as u64 + 1;
            // Receive.
            for (&n, p) in ports.iter() {
                if let Port::Af(s) = p {
                    for _ in 0..64 {
                        match s.recv(&mut buf)? {
                            Some(len) => pending.push((n, buf[..len].to_vec())),
                            None => break,
                        }
                    }
                }
            }
            // Switch.
            for (in_port, mut frame) in pending.drain(..) {
                c.rx += 1;
                let (acts, _) = dp.receive(table, in_port, &frame, now_ms);
                let acts = acts.to_vec();
                let ex = flow::exec::execute(&acts, &mut frame);
                c.packet_ins += ex.packet_ins as u64;
                for (out, fr) in ex.outputs {
                    match ports.get_mut(&out) {
                        Some(Port::Af(s)) => {
                            s.send(&fr)?;
                            c.tx += 1;
                        }
                        Some(Port::PcapTx(w)) => {
                            w.write(start.elapsed(), &fr)?;
                            c.tx += 1;
                        }
                        _ => c.dropped_no_port += 1,
                    }
                }
            }
            // Every 0.5 s (OVS: after each revalidator dump, ~0.5 s): credit megaflow
            // stats to the OpenFlow rules, expire idle megaflows (max-idle, 10 s) and
            // rules whose idle_timeout/hard_timeout passed (then megaflows are flushed).
            if now_ms >= last_expire + SWEEP_MS {
                last_expire = now_ms;
                let sw = dp.sweep(table, now_ms, a.max_idle_ms);
                for e in &sw.rules_expired {
                    c.rules_expired += 1;
                    eprintln!(
                        "rule expired ({:?} timeout): {}",
                        e.reason,
                        flow::ofproto::format_rule_stats(&e.rule, &e.stats, now_ms).trim_start()
                    );
                }
            }
            // Control requests.
            match listener.accept() {
                Ok((mut conn, _)) => {
                    conn.set_nonblocking(false)?;
                    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
                    let mut req = String::new();
                    conn.read_to_string(&mut req)?;
                    let (resp, stop) = handle_ctl(&req, table, &mut dp, now_ms);
                    let _ = conn.write_all(resp.as_bytes());
                    if stop {
                        STOP.store(true, Ordering::SeqCst);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            // Wait for traffic or a control connection (10 ms).
            let mut fds: Vec<i32> = ports
                .values()
                .filter_map(|p| match p {
                    Port::Af(s) => Some(s.fd()),
                    _ => None,
                })
                .collect();
            fds.push(listener.as_raw_fd());
            poll_readable(&fds, 10);
        }
        let _ = std::fs::remove_file(&a.ctl);
        eprintln!(
            "switch stopped: rx {} tx {} dropped(no port) {} packet-ins {} upcalls {} megaflows {} rules expired {}",
            c.rx,
            c.tx,
            c.dropped_no_port,
            c.packet_ins,
            dp.stats.upcalls,
            dp.n_flows(),
            c.rules_expired
        );
        Ok(())
    }
}

/// This area's part of `dpustack up`: the live switch when `[switch] ports` are set.
pub fn up(cfg: &Config) -> Result<Part> {
    let c = &cfg.switch;
    if !c.enabled {
        return Ok(Part::Disabled {
            name: "switch",
            why: "[switch] enabled = false",
        });
    }
    if c.ports.is_empty() {
        return Ok(Part::Disabled {
            name: "switch",
            why: "no [switch] ports configured; `dpustack switch run` runs one by hand",
        });
    }
    let args = RunArgs {
        flows: c.flows.clone(),
        ports: c.ports.clone(),
        ctl: c.ctl.clone(),
        duration: None,
        max_idle_ms: 10_000,
    };
    let detail = format!(
        "{} ports, control socket {}",
        c.ports.len(),
        c.ctl.display()
    );
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::Builder::new()
        .name("switch".into())
        .spawn(move || live::run_with(&args, Some(ready_tx)))?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => bail!("switch: {e}"),
        Err(_) => match h.join() {
            Ok(Err(e)) => return Err(e.context("switch")),
            _ => bail!("switch thread ended"),
        },
    }
    Ok(Part::Running {
        name: "switch",
        detail,
        stop: Some(Box::new(move || {
            live::request_stop();
            let _ = h.join();
        })),
    })
}

/// `dpustack bench flow`: single-core lookup rates of the datapath cache, each next to
/// the same-run cost of hashing a flow key (the EMC's own hash over the 120-byte key).
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
    let bname = "hash of flow key (120 B)";
    rep.push(Figure::new(
        "baseline: memcpy of flow key (120 B)",
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
    rep.note("single core, keys pre-parsed (parsing excluded); EMC off for the megaflow figures");
    rep.note("context (OVS commit messages, 10G NIC): dpcls ~5.4 Mpps/core, EMC ~12 Mpps/core");
    rep.note("megaflow packets pick a megaflow uniformly, so about half the masks are probed: tuple space search cost grows with masks");
    Ok(rep)
}
