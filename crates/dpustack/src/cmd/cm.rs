//! RDMA CM tools (issue #4): rping, cm-server/cm-client, ucmatose, udaddy, cmtime.
//!
//! They run the `cm` crate's driver over a `verbs` soft RoCEv2 device bound to the
//! local IPv4 address (`-I`/`-b`, or the address the kernel routes the peer from),
//! and speak the same protocols as rdma-core's tools, so either side may be the
//! real librdmacm program.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use cm::driver::{CmDevice, CmId};
use cm::{CmConfig as CoreConfig, ConnParam, EventType, PortSpace};
use serde::{Deserialize, Serialize};
use verbs::{
    AccessFlags, Cq, Mr, QpCap, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrDetail,
    WrOpcode,
};

use crate::cmd::bench::BenchArgs;
use crate::config::Config;
use crate::up::Part;

/// The `[cm]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CmConfig {
    pub enabled: bool,
    /// CM response timeout (IB time: 4.096 us * 2^n; 20 ~ 4.3 s, as the kernel CMA).
    pub cm_response_timeout: u8,
    /// MAD retries before UNREACHABLE / giving up a DREQ.
    pub max_cm_retries: u8,
    /// How long a closed connection stays in TIMEWAIT, in ms.
    pub timewait_ms: u64,
    /// `dpustack up`: port of the rping-compatible echo server on the node's
    /// address (0 = off; 7174 is rping's default).
    pub rping_port: u16,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            enabled: true,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            timewait_ms: 1000,
            rping_port: 7174,
        }
    }
}

/// The `[cm]` settings the tools' CM devices use (set once by `run`/`bench`).
static CM_SETTINGS: std::sync::OnceLock<CmConfig> = std::sync::OnceLock::new();

fn core_config() -> CoreConfig {
    let c = CM_SETTINGS.get().cloned().unwrap_or_default();
    CoreConfig {
        cm_response_timeout: c.cm_response_timeout.min(31),
        max_cm_retries: c.max_cm_retries.min(15),
        timewait: Duration::from_millis(c.timewait_ms),
        ..CoreConfig::default()
    }
}

/// rping options (rdma-core's letters).
#[derive(Args, Debug, Clone)]
pub struct RpingArgs {
    /// Server.
    #[arg(short = 's')]
    server: bool,
    /// Client.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's bind address, the client's destination.
    #[arg(short = 'a')]
    addr: Option<Ipv4Addr>,
    /// Client source address (the soft device's address).
    #[arg(short = 'I')]
    src: Option<Ipv4Addr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (default: forever).
    #[arg(short = 'C')]
    count: Option<u64>,
    /// Ping buffer size.
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Print ping data: rping's `-v` is dpustack's global `-v` (which also raises
    /// the log level), read back from the command line.
    #[arg(skip = verbose_flag())]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output.
    #[arg(short = 'd')]
    debug: bool,
    /// Persistent server (serve clients one after another).
    #[arg(short = 'P')]
    persistent: bool,
    /// Run as `dpustack up`'s node service: log instead of printing rping's lines.
    #[arg(skip)]
    service: bool,
}

/// Whether the command line carries `-v` (alone or in a group such as `-Vv`).
fn verbose_flag() -> bool {
    std::env::args().skip(1).any(|a| {
        a.strip_prefix('-').is_some_and(|r| {
            !r.starts_with('-') && r.chars().all(|c| c.is_ascii_alphabetic()) && r.contains('v')
        })
    })
}

/// rdma_server / rdma_client options.
#[derive(Args, Debug, Clone)]
pub struct SimpleArgs {
    /// Server address (client: destination; server: bind address, default any of -b).
    #[arg(short = 's')]
    server: Option<Ipv4Addr>,
    /// Local (device) address.
    #[arg(short = 'b')]
    bind: Option<Ipv4Addr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
}

/// ucmatose / udaddy options (librdmacm's letters).
#[derive(Args, Debug, Clone)]
pub struct CmaToseArgs {
    /// Server address: run as client.
    #[arg(short = 's')]
    server: Option<Ipv4Addr>,
    /// Bind (device) address.
    #[arg(short = 'b')]
    bind: Option<Ipv4Addr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1)]
    connections: usize,
    /// Messages per connection.
    #[arg(short = 'C', default_value_t = 10)]
    message_count: usize,
    /// Message size.
    #[arg(short = 'S', default_value_t = 100)]
    message_size: usize,
    /// Port (ucmatose 7471, udaddy 7174).
    #[arg(short = 'p')]
    port: Option<u16>,
    /// Type of service.
    #[arg(short = 't')]
    tos: Option<u8>,
    /// Migrate the ids to a new event channel before disconnecting (ucmatose).
    #[arg(short = 'm')]
    migrate: bool,
}

/// cmtime options (librdmacm's letters).
#[derive(Args, Debug, Clone)]
pub struct CmtimeArgs {
    /// Server address: run as client.
    #[arg(short = 's')]
    server: Option<Ipv4Addr>,
    /// Bind (device) address.
    #[arg(short = 'b')]
    bind: Option<Ipv4Addr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 100)]
    connections: usize,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// rping-compatible RDMA CM ping (-s server, -c client).
    Rping(RpingArgs),
    /// The rdma_server side of the librdmacm simple exchange.
    CmServer(SimpleArgs),
    /// The rdma_client side of the librdmacm simple exchange.
    CmClient(SimpleArgs),
    /// librdmacm ucmatose-compatible connection test (server when no -s).
    Ucmatose(CmaToseArgs),
    /// librdmacm udaddy-compatible UD (SIDR) test (server when no -s).
    Udaddy(CmaToseArgs),
    /// cmtime-like timing of each CM step over many connections (server when no -s).
    Cmtime(CmtimeArgs),
}

pub fn run(cmd: Cmd, cfg: &Config) -> Result<()> {
    let _ = CM_SETTINGS.set(cfg.cm.clone());
    match cmd {
        Cmd::Rping(a) => rping(&a),
        Cmd::CmServer(a) => cm_server(&a),
        Cmd::CmClient(a) => cm_client(&a),
        Cmd::Ucmatose(a) => ucmatose(&a),
        Cmd::Udaddy(a) => udaddy(&a),
        Cmd::Cmtime(a) => cmtime(&a),
    }
}

/// This area's part of `dpustack up`: a CM agent on QP1 of the node's soft RoCE
/// device (the rdma part's device when it runs: a second device cannot bind the
/// same UDP 4791), so the node answers CM MADs as a Linux node does (REQ for a
/// port nobody listens on → REJ 8, SIDR → status 1), and an rping-compatible echo
/// server on `[cm] rping_port`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.cm.enabled {
        return Ok(Part::Disabled {
            name: "cm",
            why: "[cm] enabled = false",
        });
    }
    let _ = CM_SETTINGS.set(cfg.cm.clone());
    let (ctx, shared) = match crate::cmd::rdma::node_device() {
        Some(ctx) => (ctx, true),
        None => {
            let dev = if cfg.rdma.device.is_empty() {
                cfg.node.listen_ip.as_str()
            } else {
                cfg.rdma.device.as_str()
            };
            let ctx = crate::cmd::rdma::open_device((!dev.is_empty()).then_some(dev))?;
            (ctx, false)
        }
    };
    let dev = CmDevice::open(&ctx, core_config())?;
    let ip = dev.ip();
    let mut detail =
        format!(
        "CM agent on QP1 of {} ({ip}{}): REQ/SIDR answered, no listener -> REJ 8 / SIDR status 1",
        ctx.name(),
        if shared { ", the rdma part's device" } else { "" }
    );
    let server = if cfg.cm.rping_port != 0 {
        let listener = dev.create_id(None, PortSpace::Tcp);
        listener
            .bind_addr(SocketAddr::new(IpAddr::V4(ip), cfg.cm.rping_port))
            .with_context(|| format!("rping server: binding {ip}:{}", cfg.cm.rping_port))?;
        listener.listen(16)?;
        detail += &format!("; rping echo server on {ip}:{}", cfg.cm.rping_port);
        let d = dev.clone();
        Some(
            std::thread::Builder::new()
                .name("cm-rping".into())
                .spawn(move || rping_service(&d, listener))?,
        )
    } else {
        detail += "; rping server off ([cm] rping_port = 0)";
        None
    };
    Ok(Part::Running {
        name: "cm",
        detail,
        stop: Some(Box::new(move || {
            // DEVICE_REMOVAL for every id: the acceptor and each connection end
            dev.close();
            if let Some(t) = server {
                let _ = t.join();
            }
            drop(ctx);
        })),
    })
}

/// `dpustack up`'s rping server: every client on its own thread (as `rping -s -P`),
/// until the device is closed.
fn rping_service(dev: &CmDevice, listener: CmId) {
    let a = RpingArgs {
        server: true,
        client: false,
        addr: Some(dev.ip()),
        src: None,
        port: 0,
        count: None,
        size: 64,
        verbose: false,
        validate: false,
        debug: false,
        persistent: true,
        service: true,
    };
    let mut conns = Vec::new();
    loop {
        match listener.get_request(None) {
            Ok((id, ev)) => {
                let peer = ev.param.private_data.len();
                tracing::debug!("cm up: rping CONNECT_REQUEST ({peer} bytes private data)");
                let (d, a) = (dev.clone(), a.clone());
                let t = std::thread::Builder::new()
                    .name("cm-rping-conn".into())
                    .spawn(move || {
                        let peer = id.peer_addr();
                        match rping_serve_one(&d, id, &a) {
                            Ok(n) => tracing::info!("cm up: rping from {peer:?}: {n} pings"),
                            Err(e) => tracing::warn!("cm up: rping from {peer:?}: {e:#}"),
                        }
                    });
                match t {
                    Ok(t) => conns.push(t),
                    Err(e) => tracing::warn!("cm up: rping: no thread: {e}"),
                }
                conns.retain(|t| !t.is_finished());
            }
            Err(cm::driver::DriverError::Event {
                event: EventType::AddrChange,
                ..
            }) => {
                // the node's address went away; keep listening for when it is back
                tracing::warn!("cm up: rping server: {} changed (ADDR_CHANGE)", dev.ip());
            }
            Err(e) => {
                // DEVICE_REMOVAL (stop) or ENODEV
                tracing::debug!("cm up: rping server ends: {e}");
                break;
            }
        }
    }
    for t in conns {
        let _ = t.join();
    }
}

/// `dpustack bench cm`: CM connection setup on loopback (two soft devices in this
/// process, 127.0.4.40 ← .41), each next to TCP loopback connection setup measured
/// in the same run.
pub fn bench(args: &BenchArgs, cfg: &Config) -> Result<benchkit::Report> {
    let _ = CM_SETTINGS.set(cfg.cm.clone());
    use benchkit::{median, Better, Figure, Report, Samples};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let conns = if args.quick { 20 } else { 100 };
    let singles = if args.quick { 20 } else { 200 };
    let srv_ip = Ipv4Addr::new(127, 0, 4, 40);
    let cli_ip = Ipv4Addr::new(127, 0, 4, 41);
    let sdev = open_device(srv_ip)?;
    let cdev = open_device(cli_ip)?;
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (sdev, stop) = (sdev.clone(), stop.clone());
        std::thread::spawn(move || -> Result<()> {
            let ch = sdev.create_event_channel();
            let l = sdev.create_id(Some(&ch), PortSpace::Tcp);
            l.bind_addr(SocketAddr::new(IpAddr::V4(srv_ip), 7471))?;
            l.listen(4096)?;
            let cq = sdev.context().create_cq(4096, None)?;
            let cap = QpCap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let mut ids: Vec<CmId> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(ev) = ch.get_event(Some(Duration::from_millis(50))) else {
                    continue;
                };
                match ev.event {
                    EventType::ConnectRequest => {
                        let mut id = CmId::from_request(&sdev, &ev);
                        id.create_qp(&cq, &cq, cap)?;
                        // the id's own QP number goes into the REP/SIDR_REP, as in librdmacm
                        id.accept(&ConnParam::default(), T)?;
                        ids.push(id);
                    }
                    EventType::Disconnected => {
                        if let Some(i) = ids.iter().position(|i| i.handle() == ev.id) {
                            let id = ids.swap_remove(i);
                            id.disconnect()?;
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        })
    };
    let mut report = Report::new("cm");
    // 1. one connection at a time: create/resolve/QP/connect (REQ-REP-RTU), then disconnect.
    let mut cm_lat = Samples::with_capacity(singles);
    let cq = cdev.context().create_cq(4 * singles + 4, None)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for _ in 0..singles {
        let t0 = Instant::now();
        let mut id = cdev.create_id(None, PortSpace::Tcp);
        id.resolve_addr(
            Some(SocketAddr::new(IpAddr::V4(cli_ip), 0)),
            SocketAddr::new(IpAddr::V4(srv_ip), 7471),
            T,
        )?;
        id.resolve_route(T)?;
        id.create_qp(&cq, &cq, cap)?;
        id.connect(&ConnParam::default(), T)?;
        cm_lat.push(t0.elapsed());
        id.disconnect()?;
        let _ = id.get_event(Some(T));
    }
    let mut tcp_lat = Samples::with_capacity(singles);
    {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let acc = std::thread::spawn(move || {
            for _ in 0..singles {
                if l.accept().is_err() {
                    break;
                }
            }
        });
        for _ in 0..singles {
            let t0 = Instant::now();
            let s = std::net::TcpStream::connect(addr)?;
            tcp_lat.push(t0.elapsed());
            drop(s);
        }
        let _ = acc.join();
    }
    let (cm_s, tcp_s) = (
        cm_lat.summary().context("no samples")?,
        tcp_lat.summary().context("no samples")?,
    );
    report.push(Figure::new(
        "cm connect, one at a time, p50 (id+resolve+QP+REQ/REP/RTU)",
        cm_s.p50_ns as f64 / 1e3,
        "us",
        "TCP loopback connect p50",
        tcp_s.p50_ns as f64 / 1e3,
        Better::Lower,
    ));
    // 2. cmtime: `conns` connections per step, concurrently; median over runs.
    let mut conn_ms = Vec::new();
    let mut disc_ms = Vec::new();
    let mut tcp_ms = Vec::new();
    for _ in 0..args.runs.max(1) {
        let t = cmtime_client(&cdev, cli_ip, srv_ip, 7471, conns, true)?;
        let rows = t.rows();
        conn_ms.push(rows[5].1);
        disc_ms.push(rows[6].1);
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let acc = std::thread::spawn(move || (0..conns).filter_map(|_| l.accept().ok()).count());
        let t0 = Instant::now();
        let socks: Vec<_> = (0..conns)
            .filter_map(|_| std::net::TcpStream::connect(addr).ok())
            .collect();
        tcp_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        let _ = acc.join();
        drop(socks);
    }
    let tcp_med = median(&mut tcp_ms).unwrap_or(f64::NAN);
    report.push(Figure::new(
        format!("cmtime connect step, {conns} connections"),
        median(&mut conn_ms).unwrap_or(f64::NAN),
        "ms",
        format!("TCP loopback, {conns} blocking connects"),
        tcp_med,
        Better::Lower,
    ));
    report.push(Figure::new(
        format!("cmtime disconnect step (DREQ/DREP), {conns} connections"),
        median(&mut disc_ms).unwrap_or(f64::NAN),
        "ms",
        format!("TCP loopback, {conns} blocking connects"),
        tcp_med,
        Better::Lower,
    ));
    report.note("CM over the soft RoCE device (UDP 4791 on 127.0.4.40/41, QP1 MADs); server in this process");
    stop.store(true, Ordering::Relaxed);
    match server.join() {
        Ok(r) => r?,
        Err(_) => bail!("bench cm: server thread panicked"),
    }
    Ok(report)
}

// ---------------------------------------------------------------------------
// shared plumbing
// ---------------------------------------------------------------------------

const T: Duration = Duration::from_secs(30);

/// The local address the kernel would use to reach `dst` (no packet is sent).
fn route_source(dst: Ipv4Addr) -> Result<Ipv4Addr> {
    netio::ifaddr::route_source(None, dst, 4791).with_context(|| format!("no route to {dst}"))
}

fn open_device(ip: Ipv4Addr) -> Result<CmDevice> {
    // only an explicit --provider rdma-core reaches the kernel device here: its
    // CM (librdmacm) is not built yet and says so
    if crate::cmd::devices::chosen() == crate::cmd::devices::ProviderChoice::RdmaCore {
        if let Some(ctx) = crate::cmd::devices::open_kernel(Some(&ip.to_string()))? {
            return Ok(CmDevice::open(&ctx, core_config())?);
        }
    }
    let ctx = verbs::Context::open(&ip.to_string())
        .with_context(|| format!("opening a soft RoCE device on {ip} (UDP {ip}:4791)"))?;
    Ok(CmDevice::open(&ctx, core_config())?)
}

/// Waits for one completion on `cq`, also watching `id` for DISCONNECTED (→ `Ok(None)`).
fn wait_wc(cq: &Cq, id: &CmId, timeout: Duration) -> Result<Option<Wc>> {
    let t0 = Instant::now();
    let mut wc = [Wc::default(); 1];
    let mut spins = 0u32;
    loop {
        if cq.poll(&mut wc)? == 1 {
            if wc[0].status == WcStatus::WrFlushErr {
                // The CM moved the QP to ERR: the peer disconnected.
                return Ok(None);
            }
            if wc[0].status != WcStatus::Success {
                bail!(
                    "completion error: {:?} (wr_id {})",
                    wc[0].status,
                    wc[0].wr_id
                );
            }
            return Ok(Some(wc[0]));
        }
        spins += 1;
        if spins & 63 == 0 {
            match id.get_event(Some(Duration::ZERO)) {
                Ok(ev) if ev.event == EventType::Disconnected => return Ok(None),
                Ok(ev) if ev.event == EventType::DeviceRemoval => return Ok(None),
                Ok(ev) => tracing::debug!("cm event {}", ev.event),
                Err(_) => {}
            }
            if t0.elapsed() > timeout {
                bail!("timed out waiting for a completion");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn post_recv(id: &CmId, mr: &Mr, len: u32) -> Result<()> {
    let qp = id.qp().context("no QP")?;
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[mr.sge(0, len)],
    }])
    .map_err(|e| anyhow::anyhow!("post_recv: {:?}", e.error))
}

fn post_send(
    id: &CmId,
    wr_id: u64,
    op: WrOpcode,
    mr: &Mr,
    len: u32,
    rdma: Option<(u64, u32)>,
) -> Result<()> {
    let qp = id.qp().context("no QP")?;
    let sge = [mr.sge(0, len)];
    let mut wr = SendWr::new(wr_id, op, &sge);
    wr.send_flags = SendFlags::SIGNALED;
    if let Some((remote_addr, rkey)) = rdma {
        wr.wr = WrDetail::Rdma { remote_addr, rkey };
    }
    qp.post_send(&[wr])
        .map_err(|e| anyhow::anyhow!("post_send: {:?}", e.error))
}

fn qp_cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

// ---------------------------------------------------------------------------
// rping (rdma-core librdmacm/examples/rping.c protocol)
// ---------------------------------------------------------------------------

/// `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32).
const INFO_LEN: usize = 16;

fn info(mr: &Mr, size: usize) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&mr.addr().to_be_bytes());
    b[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
    b[12..16].copy_from_slice(&(size as u32).to_be_bytes());
    b
}

fn parse_info(mr: &Mr) -> (u64, u32, u32) {
    let mut b = [0u8; INFO_LEN];
    mr.read(0, &mut b);
    (
        u64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[12..16].try_into().unwrap_or_default()),
    )
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn rping(a: &RpingArgs) -> Result<()> {
    if a.server == a.client {
        bail!("rping: give exactly one of -s (server) or -c (client)");
    }
    if a.size < 32 {
        bail!("rping: size must be at least 32 bytes");
    }
    if a.server {
        rping_server(a)
    } else {
        rping_client(a)
    }
}

fn rping_server(a: &RpingArgs) -> Result<()> {
    let ip = a
        .addr
        .or(a.src)
        .context("rping -s: give the address to bind with -a")?;
    let dev = open_device(ip)?;
    let listener = dev.create_id(None, PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), a.port))?;
    listener.listen(3)?;
    if a.debug {
        eprintln!("rping: listening on {ip}:{}", a.port);
    }
    loop {
        let (id, ev) = listener.get_request(None)?;
        if a.debug {
            eprintln!("cma_event type {} cma_id {} (child)", ev.event, ev.id);
        }
        let r = rping_serve_one(&dev, id, a);
        if let Err(e) = &r {
            eprintln!("rping server: {e:#}");
        }
        if !a.persistent {
            return r.map(|_| ());
        }
    }
}

/// One rping connection, server side; returns the number of pings served.
fn rping_serve_one(dev: &CmDevice, mut id: CmId, a: &RpingArgs) -> Result<u64> {
    let ctx = dev.context();
    let cq = ctx.create_cq(32, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let pd = dev.pd();
    let recv_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let rdma_mr = pd.reg_mr(
        a.size,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    post_recv(&id, &recv_mr, INFO_LEN as u32)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        ..ConnParam::default()
    };
    id.accept(&param, T)?;
    if a.debug {
        eprintln!("accepted connection from {:?}", id.peer_addr());
    }
    // Every exit of this loop is the client's DISCONNECTED.
    let mut pings = 0u64;
    loop {
        // Client's start buffer advertisement.
        let Some(wc) = wait_recv(&cq, &id)? else {
            break;
        };
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        let (raddr, rkey, rlen) = parse_info(&recv_mr);
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        if a.debug {
            eprintln!("Received rkey {rkey:x} addr {raddr:x} len {rlen} from peer");
        }
        let len = (rlen as usize).min(a.size) as u32;
        post_send(
            &id,
            2,
            WrOpcode::RdmaRead,
            &rdma_mr,
            len,
            Some((raddr, rkey)),
        )?;
        if wait_send(&cq, &id)?.is_none() {
            break;
        }
        if a.verbose {
            let mut b = vec![0u8; a.size];
            rdma_mr.read(0, &mut b);
            println!("server ping data: {}", cstr(&b));
        }
        // Tell the client to continue.
        post_send(&id, 3, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id)?.is_none() {
            break;
        }
        // Client's RDMA buffer advertisement.
        let Some(wc) = wait_recv(&cq, &id)? else {
            break;
        };
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        let (raddr, rkey, _) = parse_info(&recv_mr);
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        let mut b = vec![0u8; a.size];
        rdma_mr.read(0, &mut b);
        let wlen = (b.iter().position(|&c| c == 0).unwrap_or(a.size - 1) + 1) as u32;
        post_send(
            &id,
            4,
            WrOpcode::RdmaWrite,
            &rdma_mr,
            wlen,
            Some((raddr, rkey)),
        )?;
        if wait_send(&cq, &id)?.is_none() {
            break;
        }
        post_send(&id, 5, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id)?.is_none() {
            break;
        }
        pings += 1;
    }
    if a.service {
        // the device may be gone (DEVICE_REMOVAL at shutdown): nothing to tell
        let _ = id.disconnect();
    } else {
        println!("server DISCONNECT EVENT...");
        id.disconnect()?;
    }
    Ok(pings)
}

/// Pending completions of the other kind are kept in order: rping's exchange is
/// strictly alternating, so a completion of the other kind here is a protocol error.
fn wait_recv(cq: &Cq, id: &CmId) -> Result<Option<Wc>> {
    match wait_wc(cq, id, Duration::from_secs(3600))? {
        Some(wc) if wc.opcode == WcOpcode::Recv => Ok(Some(wc)),
        Some(wc) => bail!(
            "unexpected completion {:?} while waiting for a receive",
            wc.opcode
        ),
        None => Ok(None),
    }
}

fn wait_send(cq: &Cq, id: &CmId) -> Result<Option<Wc>> {
    match wait_wc(cq, id, T)? {
        Some(wc) if wc.opcode != WcOpcode::Recv => Ok(Some(wc)),
        Some(wc) => bail!(
            "unexpected receive (len {}) while waiting for a send",
            wc.byte_len
        ),
        None => Ok(None),
    }
}

fn rping_client(a: &RpingArgs) -> Result<()> {
    let dst = a
        .addr
        .context("rping -c: give the server address with -a")?;
    let src = match a.src {
        Some(s) => s,
        None => route_source(dst)?,
    };
    let dev = open_device(src)?;
    let mut id = dev.create_id(None, PortSpace::Tcp);
    id.resolve_addr(
        Some(SocketAddr::new(IpAddr::V4(src), 0)),
        SocketAddr::new(IpAddr::V4(dst), a.port),
        Duration::from_secs(2),
    )?;
    id.resolve_route(Duration::from_secs(2))?;
    let ctx = dev.context();
    let cq = ctx.create_cq(32, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let pd = dev.pd();
    let recv_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let start_mr = pd.reg_mr(a.size, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    let rdma_mr = pd.reg_mr(a.size, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    post_recv(&id, &recv_mr, INFO_LEN as u32)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 6,
        rnr_retry_count: 7,
        ..ConnParam::default()
    };
    match id.connect(&param, T) {
        Ok(_) => {}
        Err(cm::driver::DriverError::Event { event, status }) => {
            println!("cma event {}, error {}", event, status);
            bail!("connect error");
        }
        Err(e) => return Err(e.into()),
    }
    let mut start: u8 = 65;
    let mut ping: u64 = 0;
    let mut result = Ok(());
    while a.count.is_none_or(|c| ping < c) {
        let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
        buf.truncate(a.size);
        let mut c = start;
        while buf.len() < a.size {
            buf.push(c);
            c += 1;
            if c > 122 {
                c = 65;
            }
        }
        start += 1;
        if start > 122 {
            start = 65;
        }
        buf[a.size - 1] = 0;
        start_mr.write(0, &buf);
        rdma_mr.write(0, &vec![0u8; a.size]);
        send_mr.write(0, &info(&start_mr, a.size));
        post_send(&id, 1, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id)?.is_none() {
            result = Err(anyhow::anyhow!("server disconnected"));
            break;
        }
        // Server's "go ahead" after its RDMA READ.
        let Some(wc) = wait_recv(&cq, &id)? else {
            result = Err(anyhow::anyhow!("server disconnected"));
            break;
        };
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        send_mr.write(0, &info(&rdma_mr, a.size));
        post_send(&id, 2, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id)?.is_none() {
            result = Err(anyhow::anyhow!("server disconnected"));
            break;
        }
        // Server's "RDMA WRITE done".
        let Some(_) = wait_recv(&cq, &id)? else {
            result = Err(anyhow::anyhow!("server disconnected"));
            break;
        };
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        let mut got = vec![0u8; a.size];
        rdma_mr.read(0, &mut got);
        if a.validate && got != buf {
            eprintln!("data mismatch!");
            result = Err(anyhow::anyhow!("data mismatch"));
            break;
        }
        if a.verbose {
            println!("ping data: {}", cstr(&got));
        }
        ping += 1;
    }
    id.disconnect()?;
    let _ = id.get_event(Some(Duration::from_secs(2)));
    if a.debug {
        eprintln!("rping: {ping} pings, CM stats {:?}", dev.stats());
    }
    result
}

// ---------------------------------------------------------------------------
// rdma_server / rdma_client (librdmacm/examples/rdma_{server,client}.c)
// ---------------------------------------------------------------------------

const SIMPLE_MSG: usize = 16;

fn cm_server(a: &SimpleArgs) -> Result<()> {
    let ip = a
        .bind
        .or(a.server)
        .context("cm-server: give the device address with -b")?;
    let dev = open_device(ip)?;
    let listener = dev.create_id(None, PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), a.port))?;
    listener.listen(0)?;
    println!("rdma_server: start");
    let (mut id, _ev) = listener.get_request(None)?;
    let cq = dev.context().create_cq(8, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let mr = dev.pd().reg_mr(SIMPLE_MSG, AccessFlags::LOCAL_WRITE)?;
    post_recv(&id, &mr, SIMPLE_MSG as u32)?;
    id.accept(&ConnParam::default(), T)?;
    if wait_recv(&cq, &id)?.is_none() {
        bail!("client disconnected before sending");
    }
    post_send(&id, 2, WrOpcode::Send, &mr, SIMPLE_MSG as u32, None)?;
    if wait_send(&cq, &id)?.is_none() {
        bail!("client disconnected before our send completed");
    }
    id.disconnect()?;
    let _ = id.get_event(Some(Duration::from_secs(2)));
    println!("rdma_server: end 0");
    Ok(())
}

fn cm_client(a: &SimpleArgs) -> Result<()> {
    let dst = a
        .server
        .context("cm-client: give the server address with -s")?;
    let src = match a.bind {
        Some(b) => b,
        None => route_source(dst)?,
    };
    let dev = open_device(src)?;
    println!("rdma_client: start");
    let mut id = dev.create_id(None, PortSpace::Tcp);
    id.resolve_addr(
        Some(SocketAddr::new(IpAddr::V4(src), 0)),
        SocketAddr::new(IpAddr::V4(dst), a.port),
        Duration::from_secs(2),
    )?;
    id.resolve_route(Duration::from_secs(2))?;
    let cq = dev.context().create_cq(8, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let mr = dev.pd().reg_mr(SIMPLE_MSG, AccessFlags::LOCAL_WRITE)?;
    post_recv(&id, &mr, SIMPLE_MSG as u32)?;
    id.connect(&ConnParam::default(), T)?;
    post_send(&id, 2, WrOpcode::Send, &mr, SIMPLE_MSG as u32, None)?;
    let mut got_send = false;
    let mut got_recv = false;
    while !(got_send && got_recv) {
        match wait_wc(&cq, &id, T)? {
            Some(wc) if wc.opcode == WcOpcode::Recv => got_recv = true,
            Some(_) => got_send = true,
            None => bail!("server disconnected early"),
        }
    }
    id.disconnect()?;
    let _ = id.get_event(Some(Duration::from_secs(2)));
    println!("rdma_client: end 0");
    Ok(())
}

// ---------------------------------------------------------------------------
// ucmatose (librdmacm/examples/cmatose.c) and udaddy (udaddy.c)
// ---------------------------------------------------------------------------

struct Node {
    id: CmId,
    send_cq: Cq,
    recv_cq: Cq,
    mr: Mr,
    connected: bool,
    /// UD: where replies go.
    remote: Option<(verbs::Ah, u32, u32)>,
}

fn node_for(dev: &CmDevice, mut id: CmId, a: &CmaToseArgs, ud: bool) -> Result<Node> {
    let n = a.message_count.max(1) as u32;
    let send_cq = dev.context().create_cq(2 * n as usize + 2, None)?;
    let recv_cq = if ud {
        send_cq.clone()
    } else {
        dev.context().create_cq(n as usize + 1, None)?
    };
    let cap = QpCap {
        max_send_wr: n,
        max_recv_wr: n,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    id.create_qp(&send_cq, &recv_cq, cap)?;
    let grh = if ud { 40 } else { 0 };
    let mr = dev
        .pd()
        .reg_mr(a.message_size.max(1) + grh, AccessFlags::LOCAL_WRITE)?;
    let node = Node {
        id,
        send_cq,
        recv_cq,
        mr,
        connected: false,
        remote: None,
    };
    if a.message_count > 0 {
        let qp = node.id.qp().context("no QP")?;
        for _ in 0..a.message_count {
            qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &[node.mr.sge(0, (a.message_size + grh) as u32)],
            }])
            .map_err(|e| anyhow::anyhow!("failed to post receives: {:?}", e.error))?;
        }
    }
    Ok(node)
}

fn post_sends(node: &Node, a: &CmaToseArgs) -> Result<()> {
    if !node.connected || a.message_count == 0 {
        return Ok(());
    }
    let qp = node.id.qp().context("no QP")?;
    let sge = [node.mr.sge(0, a.message_size as u32)];
    for _ in 0..a.message_count {
        let mut wr = SendWr::new(0, WrOpcode::Send, &sge);
        wr.send_flags = SendFlags::SIGNALED;
        if let Some((ah, qpn, qkey)) = node.remote {
            wr.opcode = WrOpcode::SendWithImm;
            wr.imm_data = qp.qp_num();
            wr.wr = WrDetail::Ud {
                ah,
                remote_qpn: qpn,
                remote_qkey: qkey,
            };
        }
        qp.post_send(&[wr])
            .map_err(|e| anyhow::anyhow!("failed to post sends: {:?}", e.error))?;
    }
    Ok(())
}

/// Polls `count` completions from `cq` (statuses must be success).
fn poll_n(cq: &Cq, count: usize, what: &str) -> Result<Vec<Wc>> {
    let mut out = Vec::with_capacity(count);
    let mut wc = [Wc::default(); 8];
    let t0 = Instant::now();
    while out.len() < count {
        let n = cq.poll(&mut wc)?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                bail!("{what}: completion error {:?}", w.status);
            }
            out.push(*w);
        }
        if n == 0 {
            if t0.elapsed() > T {
                bail!(
                    "{what}: timed out after {} of {count} completions",
                    out.len()
                );
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(out)
}

fn tose_device(a: &CmaToseArgs) -> Result<(CmDevice, Ipv4Addr)> {
    let ip = match (a.bind, a.server) {
        (Some(b), _) => b,
        (None, Some(dst)) => route_source(dst)?,
        (None, None) => bail!("give the device (bind) address with -b"),
    };
    Ok((open_device(ip)?, ip))
}

fn ucmatose(a: &CmaToseArgs) -> Result<()> {
    tose(a, "cmatose", 7471, PortSpace::Tcp)
}

fn udaddy(a: &CmaToseArgs) -> Result<()> {
    tose(a, "udaddy", 7174, PortSpace::Udp)
}

/// The body of librdmacm's cmatose and udaddy (same messages): client when a
/// server is given, else server; `ps` picks the connected or the UD flavour.
fn tose(a: &CmaToseArgs, tool: &str, default_port: u16, ps: PortSpace) -> Result<()> {
    let port = a.port.unwrap_or(default_port);
    let (dev, ip) = tose_device(a)?;
    let r = if let Some(dst) = a.server {
        println!("{tool}: starting client");
        tose_client(&dev, ip, dst, port, a, ps)
    } else {
        println!("{tool}: starting server");
        tose_server(&dev, ip, port, a, ps)
    };
    println!("test complete");
    println!("return status {}", if r.is_ok() { 0 } else { -1 });
    r
}

fn tose_server(
    dev: &CmDevice,
    ip: Ipv4Addr,
    port: u16,
    a: &CmaToseArgs,
    ps: PortSpace,
) -> Result<()> {
    let ud = ps == PortSpace::Udp;
    let name = if ud { "udaddy" } else { "cmatose" };
    let mut ch = dev.create_event_channel();
    let listener = dev.create_id(Some(&ch), ps);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), port))?;
    listener.listen(0)?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut connects_left = a.connections;
    while connects_left > 0 {
        let ev = ch.get_event(None)?;
        match ev.event {
            EventType::ConnectRequest => {
                let id = CmId::from_request(dev, &ev);
                if nodes.len() == a.connections {
                    println!("{name}: failing connection request");
                    id.reject(&[])?;
                    continue;
                }
                let mut node = node_for(dev, id, a, ud)?;
                // the id's own QP number goes into the REP/SIDR_REP, as in librdmacm
                node.id.accept(&ConnParam::default(), T)?;
                if ud {
                    node.connected = true;
                    connects_left -= 1;
                }
                nodes.push(node);
            }
            EventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id.handle() == ev.id) {
                    n.connected = true;
                }
                connects_left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                println!("{name}: event: {}, error: {}", ev.event, ev.status);
                connects_left -= 1;
            }
            _ => {}
        }
    }
    if a.message_count > 0 {
        if ud {
            println!("receiving data transfers");
            for n in nodes.iter_mut().filter(|n| n.connected) {
                let wcs = poll_n(&n.recv_cq, a.message_count, "receive")?;
                let mut grh = [0u8; 40];
                n.mr.read(0, &mut grh);
                let src = Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
                let ah = verbs::Ah {
                    ip: src,
                    ..verbs::Ah::default()
                };
                n.remote = Some((ah, wcs[0].imm_data, wire::mad::RDMA_UDP_QKEY));
            }
            println!("sending replies");
            for n in &nodes {
                post_sends(n, a)?;
            }
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            println!("data transfers complete");
        } else {
            println!("initiating data transfers");
            for n in &nodes {
                post_sends(n, a)?;
            }
            println!("completing sends");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            println!("receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.recv_cq, a.message_count, "receive")?;
            }
            println!("data transfers complete");
        }
    }
    if ud {
        return Ok(());
    }
    if a.migrate {
        println!("migrating to new event channel");
        let new = dev.create_event_channel();
        listener.migrate(Some(&new))?;
        for n in &nodes {
            n.id.migrate(Some(&new))?;
        }
        ch = new;
    }
    println!("cmatose: disconnecting");
    let mut disconnects_left = 0;
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        n.id.disconnect()?;
        disconnects_left += 1;
    }
    while disconnects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        if ev.event == EventType::Disconnected {
            disconnects_left -= 1;
        }
    }
    println!("disconnected");
    Ok(())
}

fn tose_client(
    dev: &CmDevice,
    ip: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    a: &CmaToseArgs,
    ps: PortSpace,
) -> Result<()> {
    let ud = ps == PortSpace::Udp;
    let name = if ud { "udaddy" } else { "cmatose" };
    let ch = dev.create_event_channel();
    let mut pending: Vec<Option<CmId>> = (0..a.connections)
        .map(|_| Some(dev.create_id(Some(&ch), ps)))
        .collect();
    let mut nodes: Vec<Node> = Vec::new();
    println!("{name}: connecting");
    for id in pending.iter().flatten() {
        id.resolve_addr(
            Some(SocketAddr::new(IpAddr::V4(ip), 0)),
            SocketAddr::new(IpAddr::V4(dst), port),
            Duration::from_secs(2),
        )?;
    }
    let mut connects_left = a.connections;
    let mut result = Ok(());
    while connects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        match ev.event {
            EventType::AddrResolved => {
                if let Some(Some(id)) = pending
                    .iter()
                    .find(|p| p.as_ref().is_some_and(|i| i.handle() == ev.id))
                {
                    if let Some(t) = a.tos {
                        id.set_option(cm::CmOption::Tos(t))?;
                    }
                    id.resolve_route(Duration::from_secs(2))?;
                }
            }
            EventType::RouteResolved => {
                let Some(slot) = pending
                    .iter_mut()
                    .find(|p| p.as_ref().is_some_and(|i| i.handle() == ev.id))
                else {
                    continue;
                };
                let id = slot.take().context("id")?;
                let node = node_for(dev, id, a, ud)?;
                let param = ConnParam {
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 5,
                    ..ConnParam::default()
                };
                node.id.connect(&param, T)?;
                nodes.push(node);
            }
            EventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id.handle() == ev.id) {
                    n.connected = true;
                    if let Some(u) = ev.ud {
                        let ah = verbs::Ah {
                            ip: match u.remote {
                                IpAddr::V4(v) => v,
                                _ => dst,
                            },
                            ..verbs::Ah::default()
                        };
                        n.remote = Some((ah, u.qp_num, u.qkey));
                    }
                }
                connects_left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                println!("{name}: event: {}, error: {}", ev.event, ev.status);
                connects_left -= 1;
                result = Err(anyhow::anyhow!("{} (status {})", ev.event, ev.status));
            }
            _ => {}
        }
    }
    result?;
    if a.message_count > 0 {
        if ud {
            println!("initiating data transfers");
            for n in &nodes {
                post_sends(n, a)?;
            }
            println!("receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                // our sends are signaled here (udaddy's are not): count only receives
                let mut got = 0;
                let t0 = Instant::now();
                while got < a.message_count {
                    let mut wc = [Wc::default(); 8];
                    let k = n.recv_cq.poll(&mut wc)?;
                    for w in &wc[..k] {
                        if w.status != WcStatus::Success {
                            bail!("completion error {:?}", w.status);
                        }
                        if w.opcode == WcOpcode::Recv {
                            got += 1;
                        }
                    }
                    if k == 0 {
                        if t0.elapsed() > T {
                            bail!("receive: timed out after {got} of {}", a.message_count);
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            }
            println!("data transfers complete");
        } else {
            println!("receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.recv_cq, a.message_count, "receive")?;
            }
            println!("sending replies");
            for n in &nodes {
                post_sends(n, a)?;
            }
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            println!("data transfers complete");
        }
    }
    if ud {
        return Ok(());
    }
    let mut disconnects_left = nodes.iter().filter(|n| n.connected).count();
    while disconnects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        if ev.event == EventType::Disconnected {
            if let Some(n) = nodes.iter().find(|n| n.id.handle() == ev.id) {
                n.id.disconnect()?;
            }
            disconnects_left -= 1;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// cmtime (librdmacm/examples/cmtime.c, the per-step table of rdma-core ≤ v45)
// ---------------------------------------------------------------------------

const STEPS: [&str; 8] = [
    "create id",
    "bind addr",
    "resolve addr",
    "resolve route",
    "create qp",
    "connect",
    "disconnect",
    "destroy",
];

/// Per-connection (start, end) of each step, plus each step's wall-clock span.
struct StepTimes {
    per: Vec<[(Option<Instant>, Option<Instant>); 8]>,
    span: [(Option<Instant>, Option<Instant>); 8],
}

impl StepTimes {
    fn new(n: usize) -> Self {
        StepTimes {
            per: vec![[(None, None); 8]; n],
            span: [(None, None); 8],
        }
    }
    fn start(&mut self, c: usize, s: usize) {
        let now = Instant::now();
        self.per[c][s].0 = Some(now);
        self.span[s].0.get_or_insert(now);
    }
    fn end(&mut self, c: usize, s: usize) {
        let now = Instant::now();
        self.per[c][s].1 = Some(now);
        self.span[s].1 = Some(now);
    }
    /// (step, total ms, max ms, min us, us/conn) rows, as cmtime prints them.
    fn rows(&self) -> Vec<(&'static str, f64, f64, f64, f64)> {
        let n = self.per.len().max(1) as f64;
        STEPS
            .iter()
            .enumerate()
            .map(|(s, name)| {
                let d: Vec<f64> = self
                    .per
                    .iter()
                    .filter_map(|p| Some((p[s].1? - p[s].0?).as_secs_f64() * 1e6))
                    .collect();
                let total_us = match self.span[s] {
                    (Some(a), Some(b)) => (b - a).as_secs_f64() * 1e6,
                    _ => 0.0,
                };
                let max = d.iter().copied().fold(0.0, f64::max);
                let min = d.iter().copied().fold(f64::INFINITY, f64::min);
                (
                    *name,
                    total_us / 1e3,
                    max / 1e3,
                    if min.is_finite() { min } else { 0.0 },
                    total_us / n,
                )
            })
            .collect()
    }
    fn print(&self) {
        println!("step              total ms     max ms     min us  us / conn");
        for (name, total, max, min, per) in self.rows() {
            println!("{name:<13}: {total:>11.2} {max:>10.2} {min:>10.2} {per:>10.2}");
        }
    }
}

fn cmtime(a: &CmtimeArgs) -> Result<()> {
    let ip = match (a.bind, a.server) {
        (Some(b), _) => b,
        (None, Some(dst)) => route_source(dst)?,
        (None, None) => bail!("cmtime: give the device (bind) address with -b"),
    };
    let dev = open_device(ip)?;
    match a.server {
        Some(dst) => {
            let t = cmtime_client(&dev, ip, dst, a.port, a.connections, false)?;
            t.print();
            Ok(())
        }
        None => cmtime_server(&dev, ip, a.port, a.connections),
    }
}

/// Accepts `n` connections (QP to RTS before the REP) and answers each DISCONNECTED.
fn cmtime_server(dev: &CmDevice, ip: Ipv4Addr, port: u16, n: usize) -> Result<()> {
    let ch = dev.create_event_channel();
    let listener = dev.create_id(Some(&ch), PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), port))?;
    listener.listen(n.max(1))?;
    let cq = dev.context().create_cq(4 * n + 4, None)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut ids: Vec<CmId> = Vec::new();
    let mut disconnected = 0;
    while disconnected < n {
        let ev = ch.get_event(None)?;
        match ev.event {
            EventType::ConnectRequest => {
                if ids.is_empty() {
                    println!("\tAccepting");
                }
                let mut id = CmId::from_request(dev, &ev);
                id.create_qp(&cq, &cq, cap)?;
                // the id's own QP number goes into the REP/SIDR_REP, as in librdmacm
                id.accept(&ConnParam::default(), T)?;
                ids.push(id);
            }
            EventType::Disconnected => {
                if disconnected == 0 {
                    println!("\tDisconnecting");
                }
                if let Some(id) = ids.iter().find(|i| i.handle() == ev.id) {
                    id.disconnect()?;
                }
                disconnected += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each step for all `n` connections at once (as cmtime): start all, then wait for all.
fn cmtime_client(
    dev: &CmDevice,
    ip: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    n: usize,
    quiet: bool,
) -> Result<StepTimes> {
    let say = |m: &str| {
        if !quiet {
            println!("{m}");
        }
    };
    let ch = dev.create_event_channel();
    let mut t = StepTimes::new(n);
    let cq = dev.context().create_cq(4 * n + 4, None)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    say("creating id");
    let mut ids = Vec::with_capacity(n);
    for c in 0..n {
        t.start(c, 0);
        ids.push(dev.create_id(Some(&ch), PortSpace::Tcp));
        t.end(c, 0);
    }
    say("binding source address");
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 1);
        id.bind_addr(SocketAddr::new(IpAddr::V4(ip), 0))?;
        t.end(c, 1);
    }
    let index = |ids: &[CmId], h| ids.iter().position(|i: &CmId| i.handle() == h);
    let wait_all = |t: &mut StepTimes, ids: &[CmId], step: usize, want: EventType| -> Result<()> {
        let mut left = ids.len();
        while left > 0 {
            let ev = ch.get_event(Some(T))?;
            let Some(c) = index(ids, ev.id) else { continue };
            if ev.event == want {
                t.end(c, step);
                left -= 1;
            } else if ev.event != EventType::TimewaitExit {
                bail!(
                    "cmtime: {} (status {}) while waiting for {want}",
                    ev.event,
                    ev.status
                );
            }
        }
        Ok(())
    };
    say("resolving address");
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 2);
        id.resolve_addr(
            None,
            SocketAddr::new(IpAddr::V4(dst), port),
            Duration::from_secs(2),
        )?;
    }
    wait_all(&mut t, &ids, 2, EventType::AddrResolved)?;
    say("resolving route");
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 3);
        id.resolve_route(Duration::from_secs(2))?;
    }
    wait_all(&mut t, &ids, 3, EventType::RouteResolved)?;
    say("creating qp");
    for (c, id) in ids.iter_mut().enumerate() {
        t.start(c, 4);
        id.create_qp(&cq, &cq, cap)?;
        t.end(c, 4);
    }
    say("connecting");
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 5);
        id.connect(&ConnParam::default(), T)?;
    }
    wait_all(&mut t, &ids, 5, EventType::Established)?;
    say("disconnecting");
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 6);
        id.disconnect()?;
    }
    wait_all(&mut t, &ids, 6, EventType::Disconnected)?;
    say("destroying id");
    for (c, id) in ids.into_iter().enumerate() {
        t.start(c, 7);
        drop(id);
        t.end(c, 7);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ip: &str) -> Config {
        let mut c = Config::default();
        c.node.listen_ip = ip.into();
        c
    }

    #[test]
    fn up_disabled_by_config() {
        let mut c = node("127.0.4.75");
        c.cm.enabled = false;
        match up(&c).unwrap() {
            Part::Disabled { name: "cm", why } => assert!(why.contains("enabled = false")),
            _ => panic!("not disabled"),
        }
    }

    /// `up`'s cm part alone (no rdma part: it opens the device itself): an rping
    /// client gets 3 validated pings, a REQ for another port gets REJ 8, and stop
    /// releases the device (its UDP 4791 can be bound again).
    #[test]
    fn up_serves_rping_and_rejects_unknown_ports() {
        let c = node("127.0.4.76");
        let Part::Running { name, detail, stop } = up(&c).unwrap() else {
            panic!("cm part not running");
        };
        assert_eq!(name, "cm");
        assert!(
            detail.contains("rping echo server on 127.0.4.76:7174"),
            "{detail}"
        );
        let client = RpingArgs {
            server: false,
            client: true,
            addr: Some(Ipv4Addr::new(127, 0, 4, 76)),
            src: Some(Ipv4Addr::new(127, 0, 4, 77)),
            port: 7174,
            count: Some(3),
            size: 64,
            verbose: false,
            validate: true,
            debug: false,
            persistent: false,
            service: false,
        };
        rping_client(&client).unwrap();
        let dev = open_device(Ipv4Addr::new(127, 0, 4, 78)).unwrap();
        let id = dev.create_id(None, PortSpace::Tcp);
        id.resolve_addr(None, "127.0.4.76:9".parse().unwrap(), T)
            .unwrap();
        id.resolve_route(T).unwrap();
        match id.connect(&ConnParam::default(), T) {
            Err(cm::driver::DriverError::Event {
                event: EventType::Rejected,
                status: 8,
            }) => {}
            other => panic!("expected REJ 8, got {other:?}"),
        }
        let t0 = Instant::now();
        (stop.unwrap())();
        assert!(t0.elapsed() < Duration::from_secs(5));
        verbs::Context::open("127.0.4.76").expect("device released after stop");
    }
}
