//! RDMA CM tools (issue #4): rping, cm-server/cm-client, ucmatose, udaddy, cmtime,
//! and `bench cm`: their arguments and output.
//!
//! The engines are `cm_tools`': they run the `cm` crate's driver over a `verbs`
//! soft RoCEv2 device bound to the local IPv4 address (`-I`/`-b`, or the address
//! the kernel routes the peer from), and speak the same protocols as rdma-core's
//! tools, so either side may be the real librdmacm program. The `[cm]` settings
//! come from the config, passed down (no process-global state).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use cm::driver::CmId;
use cm::{ConnParam, EventType, PortSpace};
use cm_tools::cmtime::CmtimeOpts;
use cm_tools::rping::RpingOpts;
use cm_tools::simple::SimpleOpts;
use cm_tools::tose::ToseOpts;
use cm_tools::{open_device, Console, T};
use verbs::QpCap;

use crate::cmd::bench::BenchArgs;
use crate::config::Config;

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
    // the provider picks the CM backend too: our own CM on a soft device,
    // librdmacm on a kernel device (rdma-core); the tools are the same
    let p = match cfg.rdma.provider {
        verbs_tools::ProviderChoice::Auto => cm_tools::Provider::Auto,
        verbs_tools::ProviderChoice::Soft => cm_tools::Provider::Soft,
        verbs_tools::ProviderChoice::RdmaCore => cm_tools::Provider::RdmaCore,
    };
    let cm = cfg.cm.core();
    let con = &mut Console::stdio();
    match cmd {
        Cmd::Rping(a) => cm_tools::rping::run(&a.opts(p), &cm, con)?,
        Cmd::CmServer(a) => cm_tools::simple::server(&a.opts(p), &cm, con)?,
        Cmd::CmClient(a) => cm_tools::simple::client(&a.opts(p), &cm, con)?,
        Cmd::Ucmatose(a) => cm_tools::tose::ucmatose(&a.opts(p), &cm, con)?,
        Cmd::Udaddy(a) => cm_tools::tose::udaddy(&a.opts(p), &cm, con)?,
        Cmd::Cmtime(a) => {
            if let Some(t) = cm_tools::cmtime::run(&a.opts(p), &cm, con)? {
                print!("{}", t.table());
            }
        }
    }
    Ok(())
}

impl RpingArgs {
    fn opts(&self, provider: cm_tools::Provider) -> RpingOpts {
        RpingOpts {
            provider,
            server: self.server,
            client: self.client,
            addr: self.addr,
            src: self.src,
            port: self.port,
            count: self.count,
            size: self.size,
            verbose: self.verbose,
            validate: self.validate,
            debug: self.debug,
            persistent: self.persistent,
            service: false,
        }
    }
}

impl SimpleArgs {
    fn opts(&self, provider: cm_tools::Provider) -> SimpleOpts {
        SimpleOpts {
            provider,
            server: self.server,
            bind: self.bind,
            port: self.port,
        }
    }
}

impl CmaToseArgs {
    fn opts(&self, provider: cm_tools::Provider) -> ToseOpts {
        ToseOpts {
            provider,
            server: self.server,
            bind: self.bind,
            connections: self.connections,
            message_count: self.message_count,
            message_size: self.message_size,
            port: self.port,
            tos: self.tos,
            migrate: self.migrate,
        }
    }
}

impl CmtimeArgs {
    fn opts(&self, provider: cm_tools::Provider) -> CmtimeOpts {
        CmtimeOpts {
            provider,
            server: self.server,
            bind: self.bind,
            connections: self.connections,
            port: self.port,
        }
    }
}

/// `dpustack bench cm`: CM connection setup on loopback (two soft devices in this
/// process, 127.0.4.40 ← .41), each next to TCP loopback connection setup measured
/// in the same run.
pub fn bench(args: &BenchArgs, cfg: &Config) -> Result<benchkit::Report> {
    let cm = cfg.cm.core();
    use benchkit::{median, Better, Figure, Report, Samples};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let conns = if args.quick { 20 } else { 100 };
    let singles = if args.quick { 20 } else { 200 };
    let srv_ip = Ipv4Addr::new(127, 0, 4, 40);
    let cli_ip = Ipv4Addr::new(127, 0, 4, 41);
    let sdev = open_device(srv_ip, cm_tools::Provider::Soft, &cm)?;
    let cdev = open_device(cli_ip, cm_tools::Provider::Soft, &cm)?;
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
        let t = cm_tools::cmtime::client(&cdev, cli_ip, srv_ip, 7471, conns, None)?;
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
