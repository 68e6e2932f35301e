//! NVMe-oF target and host tools (issue #5): `nvmf serve`, `nvme discover|connect|
//! identify|read|write|perf`, `bench nvmf`: their arguments and output. The
//! target configuration (target files, the quick form) is `node::target`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;

use node::target::{
    make_bdev, parse_addr, parse_size, quick_target, rdma_addr, TargetFile, DEFAULT_NQN,
};
use nvme::log::TrType;
use nvmf::host::{self, Controller, HostOpts};
use nvmf::perf::{PerfOpts, Workload};
use nvmf::subsystem::Subsystem;
use nvmf::transport::TransportId;
use nvmf::{ListenSpec, NvmfServer, Tgt, TgtParams, DISCOVERY_NQN};

use crate::cmd::bench::BenchArgs;
use crate::config::Config;

fn parse_byte(s: &str) -> std::result::Result<u8, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("bad byte {s:?}: {e}"))
}

// ---------------------------------------------------------------------------
// CLI

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// NVMe-oF target: `nvmf serve --listen tcp://IP:PORT --bdev malloc:64M`.
    Nvmf {
        #[command(subcommand)]
        cmd: NvmfCmd,
    },
    /// NVMe-oF host: discover, connect, identify, read, write, perf.
    Nvme {
        #[command(subcommand)]
        cmd: NvmeCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum NvmfCmd {
    /// Serve NVMe/TCP until Ctrl-C (or --for SECS).
    Serve(ServeArgs),
    /// Drive the target's I/O path in memory on one thread (nvmf::iopath): what
    /// `bench nvmf` runs under callgrind to count the metrics' instructions per I/O.
    #[command(hide = true)]
    Iopath(IopathArgs),
}

#[derive(Args, Debug)]
pub struct IopathArgs {
    /// 4 KiB reads to complete.
    #[arg(long, default_value_t = 1000)]
    pub ios: u64,
    /// Reads per batch (one arrival, then completion).
    #[arg(long, default_value_t = 32)]
    pub depth: u16,
    /// The target's I/O statistics on (what `[metrics] listen` turns on).
    #[arg(long)]
    pub stats: bool,
    /// `tcp`: NVMe/TCP PDUs between a host and the target connection (sans-IO, in
    /// memory); `none`: commands straight to the qpair.
    #[arg(long, default_value = "tcp")]
    pub framing: String,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Listen address(es), tcp://IP:PORT (default tcp://127.0.0.1:4420).
    #[arg(long)]
    pub listen: Vec<String>,
    /// Backing device of the one namespace: malloc:64M, null:1G, file:PATH[,size=64M][,direct][,qd=N].
    #[arg(long, default_value = "malloc:64M")]
    pub bdev: String,
    /// Subsystem NQN of the quick form.
    #[arg(long, default_value = DEFAULT_NQN)]
    pub nqn: String,
    /// Discovery-only port beside the listeners (0 = none; discovery also answers on every listener).
    #[arg(long, default_value_t = 8009)]
    pub discovery_port: u16,
    /// Target configuration file (TOML or .json) with bdevs, subsystems, namespaces, hosts, listeners.
    #[arg(long, short = 'c')]
    pub target_config: Option<PathBuf>,
    /// Poll group threads (0 = one per CPU).
    #[arg(long, default_value_t = 1)]
    pub poll_groups: usize,
    /// Idle passes a poll group busy-polls before sleeping in poll(2) (0 = event driven).
    #[arg(long, default_value_t = 200)]
    pub idle_spins: u32,
    /// Stop after this many seconds.
    #[arg(long = "for", value_name = "SECS")]
    pub for_secs: Option<f64>,
    /// Start with no subsystem and no listener (SPDK's nvmf_tgt: configure by JSON-RPC
    /// or --json); implied by --json.
    #[arg(long)]
    pub empty: bool,
    #[command(flatten)]
    pub rpc: crate::cmd::rpc::ServerArgs,
}

#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// Target address, tcp://IP:PORT (port defaults to 4420; 8009 for discover).
    #[arg(short = 'a', long = "traddr", default_value = "tcp://127.0.0.1:4420")]
    pub addr: String,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn", default_value = DEFAULT_NQN)]
    pub nqn: String,
    /// Host NQN (default: derived from /etc/machine-id).
    #[arg(long)]
    pub hostnqn: Option<String>,
    /// Ask for header digests.
    #[arg(long)]
    pub hdgst: bool,
    /// Ask for data digests.
    #[arg(long)]
    pub ddgst: bool,
    /// Keep-alive timeout to ask for, ms.
    #[arg(long, default_value_t = 15000)]
    pub kato: u32,
    /// rdma:// only: the host's own address (its soft RoCE device); default: the
    /// kernel's source address towards the target.
    #[arg(long = "host-traddr")]
    pub host_traddr: Option<std::net::IpAddr>,
}

impl TargetArgs {
    fn opts(&self) -> HostOpts {
        let mut o = HostOpts {
            hdgst: self.hdgst,
            ddgst: self.ddgst,
            kato_ms: self.kato,
            ..Default::default()
        };
        if let Some(h) = &self.hostnqn {
            o.hostnqn = h.clone();
        }
        o
    }
    fn addr(&self, default_port: u16) -> Result<SocketAddr> {
        Ok(parse_addr(&self.addr, default_port)?)
    }
    fn connect(&self, queues: u16, depth: u16) -> Result<Controller> {
        if let Some(a) = rdma_addr(&self.addr, 4420)? {
            let h = nvmf::rdma::host_transport(a, self.host_traddr)?;
            let trid = TransportId::ip(TrType::Rdma, a);
            return Controller::connect_with(&h, &trid, &self.nqn, &self.opts(), queues, depth)
                .with_context(|| format!("connecting to {} at rdma://{a}", self.nqn));
        }
        let a = self.addr(4420)?;
        Controller::connect(a, &self.nqn, &self.opts(), queues, depth)
            .with_context(|| format!("connecting to {} at {a}", self.nqn))
    }
}

#[derive(Subcommand, Debug)]
pub enum NvmeCmd {
    /// Read the discovery log page.
    Discover {
        /// Discovery controller address (port defaults to 8009).
        #[arg(short = 'a', long = "traddr", default_value = "tcp://127.0.0.1:8009")]
        addr: String,
        #[arg(long)]
        hostnqn: Option<String>,
        /// rdma:// only: the host's own address (see `connect`).
        #[arg(long = "host-traddr")]
        host_traddr: Option<std::net::IpAddr>,
    },
    /// Connect admin + I/O queues, print what the controller offers, optionally hold
    /// the connection (with keep-alives) for a while.
    Connect {
        #[command(flatten)]
        t: TargetArgs,
        /// I/O queues.
        #[arg(long, default_value_t = 1)]
        queues: u16,
        /// Hold the connection this many seconds.
        #[arg(long, default_value_t = 0.0)]
        hold: f64,
    },
    /// Identify the controller and its namespaces.
    Identify {
        #[command(flatten)]
        t: TargetArgs,
        /// Only this namespace.
        #[arg(long)]
        nsid: Option<u32>,
    },
    /// Read blocks (to a file or as a hex dump).
    Read {
        #[command(flatten)]
        t: TargetArgs,
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        #[arg(long, default_value_t = 0)]
        slba: u64,
        /// Number of blocks.
        #[arg(long, default_value_t = 1)]
        blocks: u32,
        /// Write the data here instead of a hex dump.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write blocks from a file or a repeated byte.
    Write {
        #[command(flatten)]
        t: TargetArgs,
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        #[arg(long, default_value_t = 0)]
        slba: u64,
        /// Data file (padded with zeroes to whole blocks).
        #[arg(long = "in")]
        input: Option<PathBuf>,
        /// Else: this byte value (decimal or 0x hex) ...
        #[arg(long, default_value = "0xa5", value_parser = parse_byte)]
        pattern: u8,
        /// ... for this many blocks.
        #[arg(long, default_value_t = 1)]
        blocks: u32,
    },
    /// I/O benchmark like spdk_nvme_perf.
    Perf(PerfArgs),
}

#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    #[command(flatten)]
    pub t: TargetArgs,
    /// Queue depth per I/O queue.
    #[arg(short = 'q', default_value_t = 32)]
    pub depth: u16,
    /// I/O size in bytes (K/M suffixes allowed).
    #[arg(short = 'o', default_value = "4096")]
    pub io_size: String,
    /// read, write, randread, randwrite, randrw, rw.
    #[arg(short = 'w', default_value = "randread")]
    pub workload: String,
    /// Read percentage for randrw/rw.
    #[arg(short = 'M', default_value_t = 50)]
    pub mix: u8,
    /// Seconds.
    #[arg(short = 't', default_value_t = 5.0)]
    pub time: f64,
    /// I/O queues (connections).
    #[arg(long, default_value_t = 1)]
    pub queues: u16,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: Cmd, cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::Nvmf {
            cmd: NvmfCmd::Serve(a),
        } => serve(a, cfg),
        Cmd::Nvmf {
            cmd: NvmfCmd::Iopath(a),
        } => {
            let framing = match a.framing.as_str() {
                "tcp" => nvmf::iopath::Framing::Tcp,
                "none" => nvmf::iopath::Framing::None,
                f => bail!("--framing {f}: want tcp or none"),
            };
            let r = nvmf::iopath::run(a.ios, a.depth, a.stats, framing)?;
            println!(
                "{}",
                serde_json::json!({"ios": r.ios, "bytes": r.bytes, "counted": r.counted})
            );
            Ok(())
        }
        Cmd::Nvme { cmd } => nvme(cmd),
    }
}

fn start_server(a: &ServeArgs) -> Result<NvmfServer> {
    let (tgt, listen, groups) = if a.empty || a.rpc.json.is_some() {
        (Tgt::new(TgtParams::default()), Vec::new(), a.poll_groups)
    } else if let Some(p) = &a.target_config {
        let f = TargetFile::load(p)?;
        let (t, l) = f.build()?;
        (t, l, f.poll_groups.unwrap_or(a.poll_groups))
    } else {
        if a.listen.iter().any(|l| l.starts_with("rdma://")) {
            return start_rdma_server(a);
        }
        let listen: Vec<SocketAddr> = if a.listen.is_empty() {
            vec![parse_addr("127.0.0.1:4420", 4420)?]
        } else {
            a.listen
                .iter()
                .map(|l| Ok(parse_addr(l, 4420)?))
                .collect::<Result<_>>()?
        };
        let (t, l) = quick_target(&a.nqn, &a.bdev, &listen, a.discovery_port)?;
        (t, node::target::listen_as(TrType::Tcp, &l), a.poll_groups)
    };
    let mut tgt = tgt;
    tgt.params.idle_spins = a.idle_spins;
    Ok(node::target::start_target(tgt, &listen, groups, None)?)
}

/// `serve --listen rdma://IP:PORT ...`: the quick form over NVMe/RDMA on a soft
/// RoCE device on IP (the discovery-only port on the same address).
fn start_rdma_server(a: &ServeArgs) -> Result<NvmfServer> {
    let mut addrs = Vec::new();
    for l in &a.listen {
        match rdma_addr(l, 4420)? {
            Some(x) => addrs.push(x),
            None => bail!("--listen {l}: one target serves one transport; all listeners rdma://"),
        }
    }
    let (mut tgt, specs) = quick_target(&a.nqn, &a.bdev, &addrs, a.discovery_port)?;
    tgt.params.idle_spins = a.idle_spins;
    let listen: Vec<nvmf::Listen> = specs
        .iter()
        .map(|l| nvmf::Listen {
            trid: TransportId::ip(TrType::Rdma, l.addr),
            discovery_only: l.discovery_only,
        })
        .collect();
    nvmf::rdma::start_server(tgt, &listen, a.poll_groups, Default::default())
        .context("starting the NVMe/RDMA target")
}

fn serve(a: ServeArgs, cfg: &Config) -> Result<()> {
    let srv = start_server(&a)?;
    let kinds: Vec<(String, mgmt::methods::BdevKind)> = match &a.target_config {
        Some(p) if !a.empty && a.rpc.json.is_none() => TargetFile::load(p)?
            .bdev
            .iter()
            .map(|b| (b.name.clone(), crate::cmd::rpc::kind_of_spec(&b.kind)))
            .collect(),
        _ => vec![("bdev0".into(), crate::cmd::rpc::kind_of_spec(&a.bdev))],
    };
    let mgmt = crate::cmd::rpc::start_management(&a.rpc, cfg, Some(&srv), &kinds, None)?;
    for s in srv.tgt().subsystems() {
        println!("subsystem {}", s.nqn);
        for ns in s.namespaces() {
            println!(
                "  nsid {} on {} ({} blocks of {} B)",
                ns.nsid,
                ns.bdev.name(),
                ns.num_blocks(),
                ns.block_size()
            );
        }
    }
    for l in srv.tgt().listeners() {
        println!(
            "listening {}{}",
            l.trid.uri(),
            if l.discovery_only { " (discovery)" } else { "" }
        );
    }
    println!("discovery NQN {DISCOVERY_NQN}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let deadline = a
        .for_secs
        .map(|s| std::time::Instant::now() + Duration::from_secs_f64(s));
    while !stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| std::time::Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
    }
    mgmt.stop();
    srv.stop();
    Ok(())
}

fn nvme(cmd: NvmeCmd) -> Result<()> {
    match cmd {
        NvmeCmd::Discover {
            addr,
            hostnqn,
            host_traddr,
        } => {
            let mut o = HostOpts::default();
            if let Some(h) = hostnqn {
                o.hostnqn = h;
            }
            let (genctr, entries) = if let Some(a) = rdma_addr(&addr, 8009)? {
                let h = nvmf::rdma::host_transport(a, host_traddr)?;
                host::discover_with(&h, &TransportId::ip(TrType::Rdma, a), &o)
                    .with_context(|| format!("discovery at rdma://{a}"))?
            } else {
                let a = parse_addr(&addr, 8009)?;
                host::discover(a, &o).with_context(|| format!("discovery at {a}"))?
            };
            println!(
                "Discovery Log Number of Records {}, Generation counter {genctr}",
                entries.len()
            );
            for (i, e) in entries.iter().enumerate() {
                println!("=====Discovery Log Entry {i}======");
                println!(
                    "trtype:  {}",
                    match e.trtype {
                        TrType::Rdma => "rdma",
                        TrType::Tcp => "tcp",
                        _ => "other",
                    }
                );
                let ipv4 = e.adrfam == nvme::log::AdrFam::Ipv4;
                println!("adrfam:  {}", if ipv4 { "ipv4" } else { "ipv6" });
                println!(
                    "subtype: {}",
                    match e.subtype {
                        nvme::log::SubType::DiscoveryReferral => "discovery subsystem referral",
                        nvme::log::SubType::CurrentDiscovery => "current discovery subsystem",
                        _ => "nvme subsystem",
                    }
                );
                println!("portid:  {}", e.portid);
                println!("trsvcid: {}", e.trsvcid);
                println!("subnqn:  {}", e.subnqn);
                println!("traddr:  {}", e.traddr);
            }
            Ok(())
        }
        NvmeCmd::Connect { t, queues, hold } => {
            let mut c = t.connect(queues, 32)?;
            print_ctrlr(&mut c)?;
            println!(
                "connected: cntlid {} with {} I/O queue(s)",
                c.cntlid,
                c.io.len()
            );
            let end = std::time::Instant::now() + Duration::from_secs_f64(hold.max(0.0));
            while std::time::Instant::now() < end {
                std::thread::sleep(Duration::from_millis(200));
                c.maybe_keep_alive()?;
            }
            c.shutdown()?;
            println!("disconnected");
            Ok(())
        }
        NvmeCmd::Identify { t, nsid } => {
            let mut c = t.connect(0, 1)?;
            let id = c
                .identity
                .clone()
                .ok_or_else(|| anyhow!("no identify data"))?;
            if nsid.is_none() {
                println!(
                    "vid       : {:#06x}",
                    u16::from_le_bytes([id.raw[0], id.raw[1]])
                );
                println!("sn        : {}", id.serial);
                println!("mn        : {}", id.model);
                println!("fr        : {}", id.firmware);
                println!("cntlid    : {:#x}", id.cntlid);
                println!("ver       : {:#x}", id.version);
                println!("cntrltype : {}", id.cntrltype);
                println!("mdts      : {}", id.mdts);
                println!("nn        : {}", id.nn);
                println!("ioccsz    : {}", id.ioccsz);
                println!("subnqn    : {}", id.subnqn);
            }
            let list = match nsid {
                Some(n) => vec![n],
                None => c.active_namespaces()?,
            };
            for n in list {
                let ns = c.identify_ns(n)?;
                println!(
                    "nsid {n}: nsze {} blocks of {} B ({} MiB), nguid {}",
                    ns.blocks,
                    ns.block_size,
                    (ns.blocks * ns.block_size as u64) >> 20,
                    ns.nguid
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                );
            }
            c.shutdown()?;
            Ok(())
        }
        NvmeCmd::Read {
            t,
            nsid,
            slba,
            blocks,
            out,
        } => {
            let mut c = t.connect(1, 4)?;
            let ns = c.identify_ns(nsid)?;
            let data = c.read(0, nsid, slba, blocks, ns.block_size)?;
            match out {
                Some(p) => {
                    std::fs::write(&p, &data).with_context(|| format!("writing {}", p.display()))?
                }
                None => hexdump(&data, slba * ns.block_size as u64),
            }
            c.shutdown()?;
            Ok(())
        }
        NvmeCmd::Write {
            t,
            nsid,
            slba,
            input,
            pattern,
            blocks,
        } => {
            let mut c = t.connect(1, 4)?;
            let ns = c.identify_ns(nsid)?;
            let bs = ns.block_size as usize;
            let mut data = match input {
                Some(p) => std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?,
                None => vec![pattern; blocks as usize * bs],
            };
            let len = data.len().div_ceil(bs).max(1) * bs;
            data.resize(len, 0);
            // split into chunks of at most 1 MiB (the target's MDTS)
            let chunk = (1 << 20) / bs * bs;
            for (i, part) in data.chunks(chunk).enumerate() {
                c.write(0, nsid, slba + (i * chunk / bs) as u64, part, ns.block_size)?;
            }
            println!("wrote {} blocks at LBA {slba}", len / bs);
            c.shutdown()?;
            Ok(())
        }
        NvmeCmd::Perf(p) => {
            let r = perf(&p)?;
            if p.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{} {} q={} queues={}: {:.0} IOPS, {:.2} MiB/s, avg {:.1} us, p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} errors)",
                    p.workload,
                    p.io_size,
                    p.depth,
                    p.queues,
                    r.iops,
                    r.mib_s,
                    r.avg_us,
                    r.p50_us,
                    r.p99_us,
                    r.max_us,
                    r.errors
                );
            }
            Ok(())
        }
    }
}

fn print_ctrlr(c: &mut Controller) -> Result<()> {
    if let Some(id) = &c.identity {
        println!(
            "controller: {} {} (sn {}), subnqn {}",
            id.model, id.firmware, id.serial, id.subnqn
        );
    }
    for n in c.active_namespaces()? {
        let ns = c.identify_ns(n)?;
        println!("  nsid {n}: {} blocks of {} B", ns.blocks, ns.block_size);
    }
    Ok(())
}

fn hexdump(data: &[u8], base: u64) {
    let mut last: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in data.chunks(16).enumerate() {
        if last == Some(line) {
            if !starred {
                println!("*");
                starred = true;
            }
            continue;
        }
        starred = false;
        last = Some(line);
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let asc: String = line
            .iter()
            .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
            .collect();
        println!(
            "{:08x}  {:<47}  |{asc}|",
            base + i as u64 * 16,
            hex.join(" ")
        );
    }
}

/// Perf figures.
#[derive(Debug, Clone, Serialize)]
pub struct PerfReport {
    pub iops: f64,
    pub mib_s: f64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub ios: u64,
    pub errors: u64,
    pub secs: f64,
}

fn report(r: nvmf::perf::PerfResult) -> PerfReport {
    let mut s = benchkit::Samples::with_capacity(r.lat_ns.len());
    for &ns in &r.lat_ns {
        s.push_ns(ns);
    }
    let us = |v: Option<u64>| v.unwrap_or(0) as f64 / 1e3;
    PerfReport {
        iops: r.iops(),
        mib_s: r.bytes_per_sec() / (1 << 20) as f64,
        avg_us: s.mean().unwrap_or(0.0) / 1e3,
        p50_us: us(s.percentile(50.0)),
        p99_us: us(s.percentile(99.0)),
        max_us: us(s.percentile(100.0)),
        ios: r.ios,
        errors: r.errors,
        secs: r.secs,
    }
}

fn perf(p: &PerfArgs) -> Result<PerfReport> {
    let workload: Workload = p.workload.parse().map_err(|e: String| anyhow!(e))?;
    let io_size = parse_size(&p.io_size)? as u32;
    let mut c = p.t.connect(p.queues.max(1), p.depth.max(1))?;
    let r = nvmf::perf::run(
        &mut c,
        &PerfOpts {
            depth: p.depth.max(1),
            io_size,
            workload,
            read_pct: p.mix.min(100),
            time: Duration::from_secs_f64(p.time.max(0.05)),
            nsid: p.nsid,
            warmup: Duration::from_millis(200),
        },
    )?;
    let _ = c.shutdown();
    Ok(report(r))
}

/// The metrics' time per I/O without the loopback's noise: the in-memory NVMe/TCP
/// harness (nvmf::iopath: target connection, qpair, null bdev, one thread, no
/// syscalls) timed in many short rounds, stats off and on alternating; the median of
/// the per-round on/off ratios and of the per-round added ns with bootstrap 95 %
/// intervals; the added ns next to one NVMe/TCP I/O at the same queue depth, at the
/// rate measured over the loopback (metrics off) in this run (`(depth, iops)`).
fn harness_metrics_cost(
    r: &mut benchkit::Report,
    quick: bool,
    loopback: &[(u16, f64)],
) -> Result<()> {
    use benchkit::{Better, Figure};
    let (rounds, ios) = if quick {
        (30usize, 300u64)
    } else {
        (300, 1000)
    };
    for &(depth, iops_off) in loopback {
        let v = nvmf::iopath::timed_rounds(rounds, ios, depth, nvmf::iopath::Framing::Tcp)?;
        let ratios: Vec<f64> = v.iter().map(|(off, on)| on / off).collect();
        let added: Vec<f64> = v.iter().map(|(off, on)| on - off).collect();
        let med = |x: &[f64]| benchkit::median(&mut x.to_vec()).unwrap_or(f64::NAN);
        let (rlo, rhi) = bootstrap_median_ci(&ratios, 2000, 0.95);
        let (alo, ahi) = bootstrap_median_ci(&added, 2000, 0.95);
        let off_ns = med(&v.iter().map(|x| x.0).collect::<Vec<_>>());
        let io_ns = 1e9 / iops_off.max(1.0);
        r.push(
            Figure::new(
                format!("in-memory NVMe/TCP target path, 4 KiB read, qd {depth}: median per-round time ratio metrics on / off"),
                med(&ratios),
                "x",
                "1.0 = no cost",
                1.0,
                Better::Lower,
            )
            .with_detail(serde_json::json!({
                "ratio_ci95": [rlo, rhi],
                "added_ns_per_io_median": med(&added),
                "added_ns_per_io_ci95": [alo, ahi],
                "harness_ns_per_io_off": off_ns,
                "loopback_io_ns_at_measured_rate": io_ns,
                "loopback_depth": depth,
                "added_share_of_loopback_io_pct": 100.0 * med(&added) / io_ns,
                "added_share_of_loopback_io_pct_ci95": [100.0 * alo / io_ns, 100.0 * ahi / io_ns],
                "rounds": rounds, "ios_per_round": ios,
                "ci": "percentile bootstrap of the median over the rounds (2000 resamples, fixed seed)"
            })),
        );
    }
    Ok(())
}

/// A percentile-bootstrap confidence interval (`level`, e.g. 0.95) of the median of
/// `v`: `resamples` resamples with replacement from a fixed-seed generator.
fn bootstrap_median_ci(v: &[f64], resamples: usize, level: f64) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    };
    let mut meds = Vec::with_capacity(resamples);
    let mut s = vec![0.0; v.len()];
    for _ in 0..resamples {
        for e in s.iter_mut() {
            *e = v[next(v.len())];
        }
        s.sort_by(|a, b| a.total_cmp(b));
        let m = s.len() / 2;
        meds.push(if s.len() % 2 == 1 {
            s[m]
        } else {
            (s[m - 1] + s[m]) / 2.0
        });
    }
    meds.sort_by(|a, b| a.total_cmp(b));
    let at = |f: f64| meds[((meds.len() - 1) as f64 * f).round() as usize];
    let tail = (1.0 - level) / 2.0;
    (at(tail), at(1.0 - tail))
}

/// Instructions of the target's I/O path per I/O, metrics off and on, counted by
/// callgrind (deterministic, so the machine's load does not move them): `dpustack
/// nvmf iopath` (nvmf::iopath: admin + I/O connect, batches of 4 KiB reads on a null
/// bdev, one thread, no sockets) run with N1 and N2 reads; (Ir(N2) - Ir(N1)) / (N2 -
/// N1) leaves out start-up and set-up. At qd 32 (batches share a clock read) and qd 1
/// (the worst case: two clock reads per I/O). Without valgrind the figures are not
/// measured, and the report says so.
fn callgrind_metrics_cost(r: &mut benchkit::Report, repeats: u32, quick: bool) {
    use benchkit::{Better, Figure};
    let have = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("WARNING: valgrind not installed: the metrics' instruction count per I/O is NOT measured");
        r.note("metrics instructions per I/O: NOT measured (valgrind not installed)");
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            r.note(format!("metrics instructions per I/O: NOT measured ({e})"));
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("dpustack-cg-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let (n1, n2) = if quick {
        (200u64, 1200u64)
    } else {
        (1000u64, 6000u64)
    };
    let ir = |ios: u64, depth: u16, stats: bool, framing: &str| -> Result<u64> {
        let out = dir.join(format!("cg.{ios}.{depth}.{stats}.{framing}"));
        let mut c = std::process::Command::new("valgrind");
        c.arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            // only the target's functions (nvmf::iopath::target_*), not the host's
            .arg("--toggle-collect=*iopath::target_*")
            .arg(&exe)
            .args(["nvmf", "iopath", "--ios", &ios.to_string()])
            .args(["--depth", &depth.to_string(), "--framing", framing]);
        if stats {
            c.arg("--stats");
        }
        let o = c.output()?;
        if !o.status.success() {
            bail!(
                "callgrind run failed: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
        let want = if stats { ios } else { 0 };
        if v["ios"] != ios || v["counted"] != want {
            bail!("iopath did not do what it was asked: {v}");
        }
        let text = std::fs::read_to_string(&out)?;
        let _ = std::fs::remove_file(&out);
        text.lines()
            .find_map(|l| {
                l.strip_prefix("summary: ")
                    .or_else(|| l.strip_prefix("totals: "))
            })
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no instruction total in the callgrind output")
    };
    for (framing, depth) in [("tcp", 32u16), ("tcp", 1), ("none", 1)] {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let mut fail = None;
        for _ in 0..repeats.max(1) {
            for (stats, v) in [(false, &mut off), (true, &mut on)] {
                match ir(n2, depth, stats, framing)
                    .and_then(|b| Ok((b, ir(n1, depth, stats, framing)?)))
                {
                    Ok((b, a)) => v.push(b.saturating_sub(a) as f64 / (n2 - n1) as f64),
                    Err(e) => fail = Some(e),
                }
            }
        }
        if let Some(e) = fail {
            r.note(format!(
                "metrics instructions per I/O ({framing} framing, qd {depth}): NOT measured ({e:#})"
            ));
            continue;
        }
        let med = |v: &[f64]| benchkit::median(&mut v.to_vec()).unwrap_or(0.0);
        let spread = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            serde_json::json!({"min": lo, "max": hi, "runs": v.len()})
        };
        let (m_off, m_on) = (med(&off), med(&on));
        r.push(
            Figure::new(
                format!(
                    "target I/O path instructions per 4 KiB read with metrics on (callgrind, {} framing, qd {depth})",
                    if framing == "tcp" { "NVMe/TCP" } else { "no" }
                ),
                m_on,
                "instr/IO",
                "metrics off, same harness",
                m_off,
                Better::Lower,
            )
            .with_detail(serde_json::json!({
                "added_per_io": m_on - m_off,
                "share_pct": 100.0 * (m_on - m_off) / m_off.max(1.0),
                "on": spread(&on), "off": spread(&off),
                "ios": [n1, n2],
                "what": "nvmf::iopath target functions (PDUs if framed, qpair, ctrlr, bdev channel; no kernel): an upper bound of the share on a real connection"
            })),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dpustack bench nvmf`: our target + host on loopback, null and malloc bdevs,
/// 4 KiB randread IOPS and 128 KiB sequential read/write bandwidth, next to TCP
/// loopback measured in the same run.
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure, Report};
    let t = args.run_time();
    let runs = args.runs();
    let bench_tgt = || -> Result<Tgt> {
        let mut tgt = Tgt::new(TgtParams::default());
        let mut s = Subsystem::new(DEFAULT_NQN, "BENCH", "dpustack bench")?;
        s.add_ns(1, make_bdev("null0", "null:4G", 512)?, None)?;
        s.add_ns(2, make_bdev("malloc0", "malloc:256M", 512)?, None)?;
        tgt.add_subsystem(s)?;
        Ok(tgt)
    };
    let srv = NvmfServer::start(
        bench_tgt()?,
        &[ListenSpec {
            addr: "127.0.0.1:0".parse()?,
            discovery_only: false,
        }],
        1,
    )?;
    let addr = srv.addrs()[0];
    // the same target over NVMe/RDMA: soft RoCE devices on two loopback addresses. One
    // transport's target runs at a time: an idle target's pollers (the soft RoCE device
    // threads, the RDMA poll group) would take CPU from the other transport's figures
    // (and from the TCP baseline) on a small machine.
    let rdma_addr: SocketAddr = "127.0.0.91:4420".parse()?;
    let mut srv = Some(srv);
    let mut rdma_srv = None;
    let mut r = Report::new("nvmf");
    let mut tcp_runs = Vec::new();
    for _ in 0..runs {
        tcp_runs.push(netio::baseline::tcp_loopback_bw(t)?);
    }
    let tcp = median(&mut tcp_runs).unwrap_or(0.0);
    let cases: [(&str, u32, &str, u32, u16); 6] = [
        ("4 KiB randread IOPS", 1, "null", 4096, 32),
        ("4 KiB randread IOPS", 2, "malloc", 4096, 32),
        ("128 KiB seq read", 1, "null", 128 * 1024, 8),
        ("128 KiB seq read", 2, "malloc", 128 * 1024, 8),
        ("128 KiB seq write", 1, "null", 128 * 1024, 8),
        ("128 KiB seq write", 2, "malloc", 128 * 1024, 8),
    ];
    // The cost of the metrics on the I/O path: the same target, per-namespace
    // I/O counters and latency histograms (what `[metrics] listen` turns on) off
    // and on, alternating within each round (off-on, then on-off) so drift and
    // warm-up fall on both; 4 KiB randread on the null bdev (the most I/Os/s,
    // so the largest share of per-I/O work).
    // DPUSTACK_BENCH_NVMF_NO_METRICS=1: only the transports' rows (A/B runs of the
    // NVMe/TCP and NVMe/RDMA figures without the minutes of the metrics-cost part)
    let skip_metrics = std::env::var_os("DPUSTACK_BENCH_NVMF_NO_METRICS").is_some_and(|v| v != "0");
    if skip_metrics {
        r.note("DPUSTACK_BENCH_NVMF_NO_METRICS: the metrics-cost figures were not run");
    }
    if let Some(s) = srv.as_ref().filter(|_| !skip_metrics) {
        // short alternating rounds: on a shared machine the load moves more between
        // runs than the metrics cost; the median of the per-round ratios is the figure
        let rounds = (runs * 8).max(8);
        let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let mut pair = [0.0f64; 2];
            for k in 0..2 {
                let stats_on = (k == 1) ^ (round % 2 == 1);
                s.tgt().set_io_stats(stats_on);
                let mut c = Controller::connect(addr, DEFAULT_NQN, &HostOpts::default(), 1, 32)?;
                let res = nvmf::perf::run(
                    &mut c,
                    &PerfOpts {
                        depth: 32,
                        io_size: 4096,
                        workload: Workload::RandRead,
                        read_pct: 100,
                        time: t,
                        nsid: 1,
                        warmup: Duration::from_millis(if args.quick { 20 } else { 100 }),
                    },
                )?;
                let _ = c.shutdown();
                if res.errors > 0 {
                    bail!("metrics cost run: {} I/O errors", res.errors);
                }
                pair[stats_on as usize] = res.iops();
            }
            off.push(pair[0]);
            on.push(pair[1]);
            ratios.push(pair[1] / pair[0].max(1e-9));
        }
        s.tgt().set_io_stats(false);
        let detail = serde_json::json!({
            "rounds": rounds, "iops_off": off, "iops_on": on, "on_over_off": ratios,
            "on_over_off_min": ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            "on_over_off_max": ratios.iter().cloned().fold(0.0, f64::max),
            "on_over_off_median": median(&mut ratios.clone()),
        });
        let off_med = median(&mut off.clone()).unwrap_or(0.0);
        let mut sorted = ratios.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let q = |f: f64| sorted[((sorted.len() - 1) as f64 * f).round() as usize];
        let (ci_lo, ci_hi) = bootstrap_median_ci(&ratios, 2000, 0.95);
        let ratio_detail = serde_json::json!({
            "q1": q(0.25), "median": q(0.5), "q3": q(0.75), "rounds": ratios.len(),
            "median_ci95": [ci_lo, ci_hi],
            "ci": "percentile bootstrap of the median over the rounds (2000 resamples, fixed seed)"
        });
        r.push(
            Figure::new(
                "NVMe/TCP 4 KiB randread: median per-round IOPS ratio metrics on / off",
                q(0.5),
                "x",
                "1.0 = no cost",
                1.0,
                Better::Higher,
            )
            .with_detail(ratio_detail),
        );
        // the same cost without the noise: the work metrics add to one I/O (two
        // clock reads, the counter and histogram update of its qpair's cell),
        // timed in a loop, against the time one I/O takes at the measured rate
        let cell = nvmf::stats::IoStatsCell::default();
        let n = 2_000_000u32;
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let s0 = std::time::Instant::now();
            std::hint::black_box(i);
            let ns = s0.elapsed().as_nanos() as u64;
            cell.record(
                nvmf::stats::IoClass::Read,
                4096,
                true,
                std::hint::black_box(ns),
            );
        }
        let per_io = t0.elapsed().as_nanos() as f64 / n as f64;
        std::hint::black_box(cell.snapshot());
        r.push(Figure::new(
            "metrics work per I/O, worst case (a batch of one I/O: 2 clock reads + counter/histogram update)",
            per_io,
            "ns",
            "one 4 KiB randread I/O at the metrics-off rate",
            1e9 / off_med.max(1.0),
            Better::Lower,
        ));
        callgrind_metrics_cost(&mut r, runs.min(3), args.quick);
        // a qd-1 I/O over the loopback (metrics off), the worst case's yardstick
        let mut qd1 = Vec::new();
        for _ in 0..runs.min(3) {
            let mut c = Controller::connect(addr, DEFAULT_NQN, &HostOpts::default(), 1, 1)?;
            let res = nvmf::perf::run(
                &mut c,
                &PerfOpts {
                    depth: 1,
                    io_size: 4096,
                    workload: Workload::RandRead,
                    read_pct: 100,
                    time: t,
                    nsid: 1,
                    warmup: Duration::from_millis(if args.quick { 20 } else { 100 }),
                },
            )?;
            let _ = c.shutdown();
            qd1.push(res.iops());
        }
        let qd1_iops = median(&mut qd1).unwrap_or(0.0);
        harness_metrics_cost(&mut r, args.quick, &[(32, off_med), (1, qd1_iops)])?;
        r.push(
            Figure::new(
                "NVMe/TCP 4 KiB randread IOPS with metrics on (null, qd 32)",
                median(&mut on).unwrap_or(0.0),
                "IOPS",
                "metrics off, same target, alternating",
                median(&mut off).unwrap_or(0.0),
                Better::Higher,
            )
            .with_detail(detail),
        );
    }
    if args.metrics_only {
        if let Some(s) = srv.take() {
            s.stop();
        }
        r.note("--metrics-only: the transports' figures were not run");
        return Ok(r);
    }
    for tr in ["TCP", "RDMA"] {
        let (host_tr, trid): (Box<dyn nvmf::HostTransport>, TransportId) = if tr == "TCP" {
            (
                Box::new(nvmf::tcp::TcpHostTransport),
                TransportId::tcp(addr),
            )
        } else {
            if let Some(s) = srv.take() {
                s.stop();
            }
            rdma_srv = Some(
                nvmf::rdma::start_server(
                    bench_tgt()?,
                    &[nvmf::Listen {
                        trid: TransportId::ip(TrType::Rdma, rdma_addr),
                        discovery_only: false,
                    }],
                    1,
                    Default::default(),
                )
                .context("NVMe/RDMA bench target on 127.0.0.91")?,
            );
            (
                Box::new(nvmf::rdma::host_transport(
                    rdma_addr,
                    Some("127.0.0.92".parse()?),
                )?),
                TransportId::ip(TrType::Rdma, rdma_addr),
            )
        };
        let host_tr: &dyn nvmf::HostTransport = &*host_tr;
        let trid = &trid;
        for &(name, nsid, bdev_name, size, depth) in &cases {
            let workload = if name.contains("randread") {
                Workload::RandRead
            } else if name.contains("read") {
                Workload::Read
            } else {
                Workload::Write
            };
            let mut vals = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let mut c = Controller::connect_with(
                    host_tr,
                    trid,
                    DEFAULT_NQN,
                    &HostOpts::default(),
                    1,
                    depth,
                )?;
                let res = nvmf::perf::run(
                    &mut c,
                    &PerfOpts {
                        depth,
                        io_size: size,
                        workload,
                        read_pct: 100,
                        time: t,
                        nsid,
                        warmup: Duration::from_millis(if args.quick { 20 } else { 100 }),
                    },
                )?;
                let _ = c.shutdown();
                if res.errors > 0 {
                    bail!("{tr} {name} on {bdev_name}: {} I/O errors", res.errors);
                }
                let rep = report(res);
                vals.push(if name.contains("IOPS") {
                    rep.iops
                } else {
                    rep.mib_s * (1 << 20) as f64 / 1e6
                });
                last = Some(rep);
            }
            let v = median(&mut vals).unwrap_or(0.0);
            let detail = serde_json::json!({
                "transport": tr, "bdev": bdev_name, "io_size": size, "queue_depth": depth, "queues": 1,
                "last_run": last,
            });
            let fig = if name.contains("IOPS") {
                Figure::new(
                    format!("NVMe/{tr} {name} ({bdev_name}, qd {depth})"),
                    v,
                    "IOPS",
                    "TCP loopback bw / 4 KiB",
                    tcp / 4096.0,
                    Better::Higher,
                )
            } else {
                Figure::new(
                    format!("NVMe/{tr} {name} ({bdev_name}, qd {depth})"),
                    v,
                    "MB/s",
                    "TCP loopback",
                    tcp / 1e6,
                    Better::Higher,
                )
            };
            r.push(fig.with_detail(detail));
        }
    }
    if let Some(s) = srv {
        s.stop();
    }
    if let Some(s) = rdma_srv {
        s.stop();
    }
    r.note(format!(
        "{runs} run(s) of {:.2} s each, medians; target (1 poll group) and host (1 queue, 1 thread) in one process; TCP on 127.0.0.1, no digests; RDMA over two soft RoCE devices (127.0.0.91 target, 127.0.0.92 host, UDP 4791 on loopback)",
        t.as_secs_f64()
    ));
    r.note("baseline: one TCP loopback connection, 64 KiB writes (netio::baseline::tcp_loopback_bw), same run");
    r.note("the other figures run with the target's metrics (per-namespace I/O counters) off; the metrics row measures them on against off");
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_patterns() {
        assert_eq!(parse_byte("0x41").unwrap(), 0x41);
        assert_eq!(parse_byte("65").unwrap(), 65);
        assert!(parse_byte("0x141").is_err());
    }
}

#[cfg(test)]
mod bench_tests {
    use super::bootstrap_median_ci;

    #[test]
    fn bootstrap_ci_brackets_the_median_and_narrows_with_data() {
        let v: Vec<f64> = (0..41).map(|i| 1.0 + (i as f64 - 20.0) / 100.0).collect();
        let (lo, hi) = bootstrap_median_ci(&v, 2000, 0.95);
        assert!(lo <= 1.0 && hi >= 1.0 && lo < hi, "{lo} {hi}");
        assert!(hi - lo < 0.2, "{lo} {hi}");
        let c = vec![2.0; 9];
        assert_eq!(bootstrap_median_ci(&c, 100, 0.95), (2.0, 2.0));
        assert!(bootstrap_median_ci(&[], 10, 0.95).0.is_nan());
    }
}
