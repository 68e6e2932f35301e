//! RDMA verbs tools over the software RoCEv2 provider (issue #3): rc-pingpong,
//! uc-pingpong, ud-pingpong (wire- and exchange-compatible with rdma-core's
//! ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong), perf (perftest-like), `bench roce`, and the `up` part.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

use crate::cmd::bench::BenchArgs;
use crate::config::Config;
use crate::up::Part;

/// The `[rdma]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaConfig {
    pub enabled: bool,
    /// IPv4 address (or `dps_a_b_c_d` name) of the soft device `up` starts;
    /// empty = `node.listen_ip`.
    pub device: String,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            enabled: true,
            device: String::new(),
        }
    }
}

/// Options shared by rc-, uc- and ud-pingpong (rdma-core's letters).
#[derive(Args, Debug, Clone)]
pub struct PingpongArgs {
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Device: dpustack device name (dps_a_b_c_d) or its IPv4 address.
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Port of the device (always 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Message size (rc, uc: 4096, ud: 2048).
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Path MTU (rc, uc): 256..4096.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: usize,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: usize,
    /// Iterations.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: usize,
    /// Service level (carried, unused on RoCE).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events (completion channel) instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local GID index (0 and 1 are both the IPv4-mapped RoCEv2 GID here).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 1)]
    pub gid_idx: i32,
    /// Validate received buffers (ibv_*_pingpong -c compatible).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Server to connect to (none = be the server).
    pub host: Option<String>,
}

/// perftest-like tests.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfTest {
    WriteBw,
    SendBw,
    ReadBw,
    WriteLat,
    SendLat,
}

#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Which test.
    pub test: PerfTest,
    /// Server to connect to (none = be the server).
    pub host: Option<String>,
    /// Run both ends in this process between two devices (127.0.0.1 and 127.0.0.2).
    #[arg(long)]
    pub loopback: bool,
    /// Device (name or IPv4).
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18516)]
    pub port: u16,
    /// Message size (bw: 65536, lat: 2).
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Iterations (bw: 5000, lat: 1000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<usize>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<f64>,
    /// Outstanding work requests (bw tests).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    pub mtu: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Device progress: `manual` (default: no device thread, the test's own
    /// thread receives while it busy-polls its CQ, one thread per side),
    /// `threaded` (a poller thread per device, as `dpustack up`) or, with
    /// `--loopback`, `single` (one thread drives both devices).
    #[arg(long, value_enum, default_value_t = PerfMode::Manual)]
    pub mode: PerfMode,
    /// Do not use UDP GSO on loopback devices (one skb per packet).
    #[arg(long)]
    pub no_gso: bool,
}

/// How `perf` drives its devices.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfMode {
    Manual,
    Threaded,
    /// `--loopback` only: one thread drives both devices (manual progress).
    Single,
}

impl PerfMode {
    fn io(self) -> IoMode {
        match self {
            PerfMode::Manual | PerfMode::Single => IoMode::Manual,
            PerfMode::Threaded => IoMode::Threaded,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// ibv_rc_pingpong-compatible RC ping-pong (server when no host is given).
    RcPingpong(PingpongArgs),
    /// ibv_ud_pingpong-compatible UD ping-pong.
    UdPingpong(PingpongArgs),
    /// ibv_uc_pingpong-compatible UC ping-pong (no ACKs, no retransmission:
    /// a lost packet stalls it until the 60 s timeout).
    UcPingpong(PingpongArgs),
    /// perftest-style bandwidth/latency (write-bw, send-bw, read-bw, write-lat, send-lat).
    Perf(PerfArgs),
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::RcPingpong(a) => pingpong(a, QpType::Rc),
        Cmd::UdPingpong(a) => pingpong(a, QpType::Ud),
        Cmd::UcPingpong(a) => pingpong(a, QpType::Uc),
        Cmd::Perf(a) => perf_cmd(a),
    }
}

/// Opens `spec` (name or IP), or the default device.
pub fn open_device(spec: Option<&str>) -> Result<Context> {
    open_device_mode(spec, IoMode::Threaded)
}

fn open_device_mode(spec: Option<&str>, mode: IoMode) -> Result<Context> {
    let ip = match spec {
        Some(s) if !s.is_empty() => parse_device(s).map_err(|_| anyhow!("no such device: {s}"))?,
        _ => netio::ifaddr::default_ipv4(),
    };
    let mut o = DeviceOptions::new(ip);
    o.mode = mode;
    o.open()
        .with_context(|| format!("opening soft RoCE device on {ip}:4791"))
}

// ------------------------------------------------------------ OOB exchange (rdma-core format)

/// "LLLL:QQQQQQ:PPPPPP:GGGG…" plus the terminating NUL, as `sizeof msg` in pingpong.c.
const EXCH_LEN: usize = "0000:000000:000000:00000000000000000000000000000000".len() + 1;

#[derive(Debug, Clone, Copy)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Gid,
}

fn gid_to_wire(g: &Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn wire_to_gid(s: &str) -> Result<Gid> {
    if s.len() != 32 {
        bail!("bad GID in exchange: {s:?}");
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)?;
    }
    Ok(Gid(g))
}

fn encode_dest(d: &Dest) -> [u8; EXCH_LEN] {
    let s = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        d.lid,
        d.qpn,
        d.psn,
        gid_to_wire(&d.gid)
    );
    let mut m = [0u8; EXCH_LEN];
    m[..s.len()].copy_from_slice(s.as_bytes());
    m
}

fn decode_dest(m: &[u8]) -> Result<Dest> {
    let s = std::str::from_utf8(m)?.trim_end_matches('\0');
    let f: Vec<&str> = s.split(':').collect();
    if f.len() != 4 {
        bail!("couldn't parse remote address {s:?}");
    }
    Ok(Dest {
        lid: u16::from_str_radix(f[0], 16)?,
        qpn: u32::from_str_radix(f[1], 16)?,
        psn: u32::from_str_radix(f[2], 16)?,
        gid: wire_to_gid(f[3])?,
    })
}

fn client_exch(host: &str, port: u16, me: &Dest) -> Result<Dest> {
    let mut s = TcpStream::connect((host, port))
        .with_context(|| format!("couldn't connect to {host}:{port}"))?;
    s.write_all(&encode_dest(me))?;
    let mut m = [0u8; EXCH_LEN];
    s.read_exact(&mut m)
        .context("couldn't read remote address")?;
    s.write_all(b"done\0")?;
    decode_dest(&m)
}

/// Server side: accept, read the client's address, `connect` (the QP goes to
/// RTR/RTS before we answer, as pingpong.c does), send ours, wait for "done".
fn server_exch(port: u16, me: &Dest, connect: impl FnOnce(&Dest) -> Result<()>) -> Result<Dest> {
    let l = TcpListener::bind(("0.0.0.0", port))
        .with_context(|| format!("couldn't listen to port {port}"))?;
    let (mut s, _) = l.accept()?;
    let mut m = [0u8; EXCH_LEN];
    s.read_exact(&mut m)
        .context("couldn't read remote address")?;
    let rem = decode_dest(&m)?;
    connect(&rem)?;
    s.write_all(&encode_dest(me))?;
    let mut done = [0u8; 5];
    let _ = s.read_exact(&mut done);
    Ok(rem)
}

fn print_dest(which: &str, d: &Dest) {
    let g = d.gid.0;
    let gs = (0..8)
        .map(|i| format!("{:02x}{:02x}", g[2 * i], g[2 * i + 1]))
        .collect::<Vec<_>>()
        .join(":");
    println!(
        "  {which} address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {gs}",
        d.lid, d.qpn, d.psn
    );
}

fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = (t.as_nanos() as u64 ^ (std::process::id() as u64) << 20)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 40) as u32 & 0xff_ffff
}

/// RTR -> RTS of a connected QP with the attributes rdma-core's
/// pingpong.c / perftest pass: RC with its ACK timing and read/atomic depth,
/// UC (ibv_uc_pingpong) with only what the kernel allows for UC.
#[allow(clippy::too_many_arguments)]
fn connect_qp(
    qp: &Qp,
    ty: QpType,
    port: u8,
    my_psn: u32,
    mtu: Mtu,
    rem: &Dest,
    sgid: u8,
    rd_atomic: u8,
) -> Result<()> {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: rem.qpn,
        rq_psn: rem.psn,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid: rem.gid,
            sgid_index: sgid,
            hop_limit: 1,
            port_num: port,
            ..Default::default()
        },
        ..Default::default()
    };
    let rtr = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    let uc = ty == QpType::Uc;
    let rtr = if uc {
        rtr
    } else {
        rtr | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER
    };
    qp.modify(&a, rtr)
        .map_err(|e| anyhow!("Failed to modify QP to RTR: {e}"))?;
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = rd_atomic;
    let rts = if uc {
        QpAttrMask::STATE | QpAttrMask::SQ_PSN
    } else {
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC
    };
    qp.modify(&a, rts)
        .map_err(|e| anyhow!("Failed to modify QP to RTS: {e}"))?;
    Ok(())
}

// ------------------------------------------------------------ ping-pong

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const UD_QKEY: u32 = 0x1111_1111;
const PAGE: usize = 4096;

/// `-c`: what our client sends in iteration `seq`, every byte of it checked when it
/// comes back (ibv_*_pingpong sends and receives in one buffer, so it echoes what it
/// received). Page starts are 0, as ibv_*_pingpong -c sets and checks them (one byte
/// per page); the other bytes vary with the offset and the iteration, so a lost,
/// misplaced or corrupted packet changes the buffer.
fn chk_pattern(seq: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| match i % PAGE {
            0 => 0,
            _ => ((i + i / 251 * 7 + seq * 31) % 251 + 1) as u8,
        })
        .collect()
}

fn pingpong(a: PingpongArgs, ty: QpType) -> Result<()> {
    let ud = ty == QpType::Ud;
    let size = a.size.unwrap_or(if ud { 2048 } else { 4096 });
    let mtu = Mtu::from_bytes(a.mtu).ok_or_else(|| anyhow!("Invalid MTU {}", a.mtu))?;
    let ctx = open_device(a.dev.as_deref())?;
    let port = ctx
        .query_port(a.ib_port)
        .map_err(|_| anyhow!("Couldn't get port info"))?;
    if ud && size > port.active_mtu.bytes() {
        bail!(
            "Requested size larger than port MTU ({})",
            port.active_mtu.bytes()
        );
    }
    let grh = if ud { 40 } else { 0 };
    let pd = ctx.alloc_pd()?;
    // sends go out of [0, size + grh), receives land in [size + grh, 2 * (size + grh)):
    // a receive that writes nothing cannot pass the -c check with what we sent
    let rbase = size + grh;
    let mr = pd.reg_mr(2 * rbase, AccessFlags::LOCAL_WRITE)?;
    mr.write(0, &vec![0x7b; rbase]);
    mr.write(rbase, &vec![0xee; rbase]);
    let ch = if a.events {
        Some(ctx.create_comp_channel()?)
    } else {
        None
    };
    let cq = ctx.create_cq(a.rx_depth + 1, ch.as_ref())?;
    let mut init = QpInitAttr::new(ty, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init)?;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        port_num: a.ib_port,
        ..Default::default()
    };
    if ud {
        at.qkey = UD_QKEY;
        qp.modify(
            &at,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        at.qp_state = QpState::Rtr;
        qp.modify(&at, QpAttrMask::STATE)?;
    } else {
        qp.modify(
            &at,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )?;
    }
    let rsge = [mr.sge(rbase, (size + grh) as u32)];
    let post_recv = |n: usize| -> usize {
        let mut k = 0;
        while k < n
            && qp
                .post_recv(&[RecvWr {
                    wr_id: RECV_WRID,
                    sg_list: &rsge,
                }])
                .is_ok()
        {
            k += 1;
        }
        k
    };
    let mut routs = post_recv(a.rx_depth);
    if routs < a.rx_depth {
        bail!("Couldn't post receive ({routs})");
    }
    if let Some(_ch) = &ch {
        cq.req_notify(false)?;
    }
    let my_psn = random_psn();
    let gid = if a.gid_idx >= 0 {
        ctx.query_gid(a.ib_port, a.gid_idx as u32)?
    } else {
        Gid::default()
    };
    let me = Dest {
        lid: port.lid,
        qpn: qp.qp_num(),
        psn: my_psn,
        gid,
    };
    if ud {
        at.qp_state = QpState::Rts;
        at.sq_psn = my_psn;
        qp.modify(&at, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
    }
    print_dest("local", &me);
    let sgid = a.gid_idx.max(0) as u8;
    let connect = |rem: &Dest| -> Result<()> {
        if !ud {
            connect_qp(&qp, ty, a.ib_port, my_psn, mtu, rem, sgid, 1)?;
        }
        Ok(())
    };
    let rem = match &a.host {
        Some(h) => {
            let r = client_exch(h, a.port, &me)?;
            connect(&r)?;
            r
        }
        None => server_exch(a.port, &me, connect)?,
    };
    print_dest("remote", &rem);
    let ah = if ud {
        Some(pd.create_ah(&AhAttr {
            dgid: rem.gid,
            sgid_index: sgid,
            hop_limit: 1,
            port_num: a.ib_port,
            ..Default::default()
        })?)
    } else {
        None
    };
    let ssge = [mr.sge(grh, size as u32)];
    let sent = std::cell::Cell::new(0usize);
    let post_send = || -> Result<()> {
        if a.chk && a.host.is_some() {
            mr.write(grh, &chk_pattern(sent.get(), size));
        }
        sent.set(sent.get() + 1);
        let mut w = SendWr::new(SEND_WRID, WrOpcode::Send, &ssge);
        if let Some(ah) = ah {
            w.wr = WrDetail::Ud {
                ah,
                remote_qpn: rem.qpn,
                remote_qkey: UD_QKEY,
            };
        }
        qp.post_send(&[w])
            .map_err(|e| anyhow!("Couldn't post send: {e}"))
    };
    let start = Instant::now();
    let mut pending = RECV_WRID;
    if a.host.is_some() {
        post_send()?;
        pending |= SEND_WRID;
    }
    let (mut rcnt, mut scnt) = (0usize, 0usize);
    let mut checked = 0usize;
    let mut peer_buf: Option<Vec<u8>> = None;
    let mut wc = [Wc::default(); 2];
    let deadline = Duration::from_secs(60);
    while rcnt < a.iters || scnt < a.iters {
        if let Some(ch) = &ch {
            ch.get_cq_event(1000)
                .map_err(|_| anyhow!("Failed to get cq_event"))?;
            cq.ack_events(1);
            cq.req_notify(false)?;
        }
        let n = cq.poll(&mut wc)?;
        if n == 0 && start.elapsed() > deadline {
            bail!("timed out: {rcnt} receives, {scnt} sends completed");
        }
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}",
                    w.status.as_str(),
                    w.status as u32,
                    w.wr_id
                );
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if a.chk {
                        // every byte: the client gets back the pattern it sent last; the
                        // server gets our client's pattern for this iteration, or from
                        // ibv_*_pingpong the same buffer every time (its first one,
                        // 0x7b and 0: it echoes what we echo)
                        let mut got = vec![0u8; size];
                        mr.read(rbase + grh, &mut got);
                        let want = match &a.host {
                            Some(_) => chk_pattern(sent.get().saturating_sub(1), size),
                            None => {
                                if rcnt == 0
                                    && got != chk_pattern(0, size)
                                    && got.iter().all(|&b| b == 0 || b == 0x7b)
                                {
                                    peer_buf = Some(got.clone());
                                }
                                peer_buf.clone().unwrap_or_else(|| chk_pattern(rcnt, size))
                            }
                        };
                        if let Some(at) = (0..size).find(|&i| got[i] != want[i]) {
                            bail!(
                                "invalid data in received buffer {rcnt}: byte {at} (page {}) is {:#04x}, sent {:#04x}",
                                at / PAGE,
                                got[at],
                                want[at]
                            );
                        }
                        checked += 1;
                        if a.host.is_none() {
                            // the server echoes what it received, as ibv_*_pingpong
                            mr.write(grh, &got);
                        }
                        // the next receive must write every byte again
                        mr.write(rbase + grh, &vec![0xee; size]);
                    }
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recv(a.rx_depth - routs);
                        if routs < a.rx_depth {
                            bail!("Couldn't post receive ({routs})");
                        }
                    }
                    rcnt += 1;
                }
                other => bail!("Completion for unknown wr_id {other}"),
            }
            pending &= !w.wr_id;
            if scnt < a.iters && pending == 0 {
                post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = (size * a.iters * 2) as f64;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        bytes as u64,
        secs,
        bytes * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        a.iters,
        secs,
        secs * 1e6 / a.iters as f64
    );
    if a.chk {
        println!("data check: {checked} received buffers validated (every byte)");
    }
    Ok(())
}

// ------------------------------------------------------------ perf

/// One end of a perf connection.
struct End {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    /// The peer (for the echoing side of latency tests).
    remote: std::sync::OnceLock<PerfDest>,
}

#[derive(Debug, Clone, Copy)]
struct PerfDest {
    qpn: u32,
    psn: u32,
    rkey: u32,
    addr: u64,
    gid: Gid,
}

fn perf_end(ctx: Context, size: usize, depth: usize) -> Result<End> {
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(
        size.max(8) * 2,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let cq = ctx.create_cq(depth * 2 + 16, None)?;
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: depth as u32,
        max_recv_wr: depth as u32 + 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init)?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    Ok(End {
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
        remote: std::sync::OnceLock::new(),
    })
}

impl End {
    fn dest(&self, psn: u32) -> PerfDest {
        PerfDest {
            qpn: self.qp.qp_num(),
            psn,
            rkey: self.mr.rkey(),
            addr: self.mr.addr(),
            gid: Gid::from_ipv4(self.ctx.ip()),
        }
    }
    fn connect(&self, my_psn: u32, rem: &PerfDest, mtu: Mtu) -> Result<()> {
        let d = Dest {
            lid: 0,
            qpn: rem.qpn,
            psn: rem.psn,
            gid: rem.gid,
        };
        connect_qp(&self.qp, QpType::Rc, 1, my_psn, mtu, &d, 1, 16)
    }
}

fn perf_line(d: &PerfDest) -> String {
    format!(
        "{:06x} {:06x} {:08x} {:016x} {}\n",
        d.qpn,
        d.psn,
        d.rkey,
        d.addr,
        gid_to_wire(&d.gid)
    )
}

fn parse_perf_line(l: &str) -> Result<PerfDest> {
    let f: Vec<&str> = l.split_whitespace().collect();
    if f.len() != 5 {
        bail!("bad perf exchange line {l:?}");
    }
    Ok(PerfDest {
        qpn: u32::from_str_radix(f[0], 16)?,
        psn: u32::from_str_radix(f[1], 16)?,
        rkey: u32::from_str_radix(f[2], 16)?,
        addr: u64::from_str_radix(f[3], 16)?,
        gid: wire_to_gid(f[4])?,
    })
}

/// What one perf run measured (client side).
#[derive(Debug, Clone, Serialize)]
pub struct PerfResult {
    pub test: String,
    pub bytes: usize,
    pub iters: u64,
    pub secs: f64,
    /// Payload bytes per second.
    pub bw: f64,
    pub msg_rate: f64,
    /// One-way latency samples summary (lat tests), ns.
    pub lat: Option<benchkit::LatencySummary>,
    /// The client QP's retransmitted packets and retransmit timeouts.
    pub retransmits: u64,
    pub timeouts: u64,
}

#[derive(Clone, Copy)]
struct PerfParams {
    test: PerfTest,
    size: usize,
    iters: Option<u64>,
    duration: Option<Duration>,
    depth: usize,
    mtu: Mtu,
    mode: PerfMode,
    gso: bool,
}

fn is_lat(t: PerfTest) -> bool {
    matches!(t, PerfTest::WriteLat | PerfTest::SendLat)
}

/// Polls until completions arrive; `idle` runs before every poll (the other
/// end's step in `--mode single`: what we just sent is usually in its socket
/// already, so it goes first and our poll then finds its answer).
fn poll_one(
    cq: &Cq,
    wc: &mut [Wc],
    deadline: Instant,
    idle: &mut dyn FnMut() -> Result<()>,
) -> Result<usize> {
    let mut k = 0u32;
    loop {
        k = k.wrapping_add(1);
        idle()?;
        let n = cq.poll(wc)?;
        if n > 0 {
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    bail!(
                        "completion error: {} (wr_id {})",
                        w.status.as_str(),
                        w.wr_id
                    );
                }
            }
            return Ok(n);
        }
        // the clock is not free (an HPET read in the guest): look now and then
        if k.is_multiple_of(4096) && Instant::now() > deadline {
            bail!("timed out waiting for completions");
        }
        std::hint::spin_loop();
    }
}

/// WRs per post_send call in the bandwidth tests.
const POST_LIST: usize = 16;

/// The measuring side.
fn perf_client(
    e: &End,
    rem: &PerfDest,
    p: PerfParams,
    idle: &mut dyn FnMut() -> Result<()>,
) -> Result<PerfResult> {
    let size = p.size;
    let sge = [e.mr.sge(0, size as u32)];
    let rsge = [e.mr.sge(size.max(8), size as u32)];
    let mut wc = [Wc::default(); 64];
    let limit = |done: u64, t0: Instant| match (p.iters, p.duration) {
        (_, Some(d)) => t0.elapsed() < d,
        (Some(n), None) => done < n,
        (None, None) => done < 1000,
    };
    let hard =
        Instant::now() + p.duration.unwrap_or(Duration::from_secs(60)) + Duration::from_secs(30);
    if is_lat(p.test) {
        let op = if p.test == PerfTest::WriteLat {
            WrOpcode::RdmaWriteWithImm
        } else {
            WrOpcode::Send
        };
        let mut samples = benchkit::Samples::with_capacity(p.iters.unwrap_or(1000) as usize);
        e.qp.post_recv(&[RecvWr {
            wr_id: 0,
            sg_list: &rsge,
        }])
        .map_err(|b| anyhow!("{b}"))?;
        // samples in CPU cycles (as perftest), converted with the rate measured
        // against the wall clock over the whole run: reading the clock costs a
        // syscall and an HPET access in the guest, the TSC costs nothing
        let mut raw: Vec<u64> = Vec::with_capacity(p.iters.unwrap_or(1 << 16) as usize);
        let t0 = Instant::now();
        let c0 = netio::baseline::cycles();
        let mut done = 0u64;
        while limit(done, t0) {
            let t = netio::baseline::cycles();
            let mut w = SendWr::new(1, op, &sge);
            w.send_flags = SendFlags::SIGNALED;
            w.wr = WrDetail::Rdma {
                remote_addr: rem.addr,
                rkey: rem.rkey,
            };
            e.qp.post_send(&[w]).map_err(|b| anyhow!("{b}"))?;
            let mut got_recv = false;
            let mut got_send = false;
            while !(got_recv && got_send) {
                let n = poll_one(&e.cq, &mut wc, hard, idle)?;
                for w in &wc[..n] {
                    if w.wr_id == 0 {
                        got_recv = true;
                    } else {
                        got_send = true;
                    }
                }
            }
            raw.push(netio::baseline::cycles().wrapping_sub(t));
            e.qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &rsge,
            }])
            .map_err(|b| anyhow!("{b}"))?;
            done += 1;
        }
        let secs = t0.elapsed().as_secs_f64();
        let ns_per_cycle = secs * 1e9 / netio::baseline::cycles().wrapping_sub(c0).max(1) as f64;
        for c in raw {
            samples.push(Duration::from_nanos((c as f64 * ns_per_cycle / 2.0) as u64));
        }
        return Ok(PerfResult {
            test: format!("{:?}", p.test),
            bytes: size,
            iters: done,
            secs,
            bw: (done as f64 * size as f64) / secs,
            msg_rate: done as f64 / secs,
            lat: samples.summary(),
            retransmits: 0,
            timeouts: 0,
        }
        .with_counters(&e.qp));
    }
    let op = match p.test {
        PerfTest::WriteBw => WrOpcode::RdmaWrite,
        PerfTest::SendBw => WrOpcode::Send,
        _ => WrOpcode::RdmaRead,
    };
    let depth = if op == WrOpcode::RdmaRead {
        p.depth.min(16)
    } else {
        p.depth
    };
    let (mut posted, mut done) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut stop_posting = false;
    while done < posted || !stop_posting {
        // post lists of up to POST_LIST WRs (perftest's -l): one doorbell, one
        // device lock and one sendmmsg for the lot
        let mut list = [SendWr::new(0, op, &sge); POST_LIST];
        let mut k = 0;
        // one clock read per list, not per WR (the clock is an HPET read in the guest)
        let room = !stop_posting && (posted - done) < depth as u64;
        if room && p.duration.is_some_and(|d| t0.elapsed() >= d) {
            stop_posting = true;
        }
        while !stop_posting && (posted + k as u64 - done) < depth as u64 && k < POST_LIST {
            if p.duration.is_none() && !limit(posted + k as u64, t0) {
                stop_posting = true;
                break;
            }
            list[k] = SendWr::new(posted + k as u64, op, &sge);
            list[k].wr = WrDetail::Rdma {
                remote_addr: rem.addr,
                rkey: rem.rkey,
            };
            k += 1;
        }
        if k > 0 {
            e.qp.post_send(&list[..k]).map_err(|b| anyhow!("{b}"))?;
            posted += k as u64;
        }
        if done < posted {
            done += poll_one(&e.cq, &mut wc, hard, idle)? as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(PerfResult {
        test: format!("{:?}", p.test),
        bytes: size,
        iters: done,
        secs,
        bw: (done as f64 * size as f64) / secs,
        msg_rate: done as f64 / secs,
        lat: None,
        retransmits: 0,
        timeouts: 0,
    }
    .with_counters(&e.qp))
}

impl PerfResult {
    fn with_counters(mut self, qp: &Qp) -> Self {
        if let Some(Ok(c)) = qp.context().soft().map(|s| s.qp_counters(qp.qp_num())) {
            self.retransmits = c.retransmits;
            self.timeouts = c.timeouts;
        }
        self
    }
}

/// The passive side: receives for SEND tests, echoes for latency tests; one
/// `step` polls its CQ once (in manual mode that also progresses its device).
struct Server<'a> {
    e: &'a End,
    test: PerfTest,
    rsge: [Sge; 1],
    sge: [Sge; 1],
    rem: Option<PerfDest>,
    size: usize,
    wc: [Wc; 64],
}

impl<'a> Server<'a> {
    fn new(e: &'a End, p: PerfParams) -> Result<Self> {
        let size = p.size;
        let s = Server {
            e,
            test: p.test,
            rsge: [e.mr.sge(0, size as u32)],
            sge: [e.mr.sge(size.max(8), size as u32)],
            rem: e.remote.get().copied(),
            size,
            wc: [Wc::default(); 64],
        };
        let (n, base) = match p.test {
            PerfTest::SendBw => (p.depth + 8, 0),
            PerfTest::WriteLat | PerfTest::SendLat => (4, 100),
            _ => (0, 0),
        };
        for i in 0..n {
            e.qp.post_recv(&[RecvWr {
                wr_id: (base + i) as u64,
                sg_list: &s.rsge,
            }])
            .map_err(|b| anyhow!("{b}"))?;
        }
        if is_lat(p.test) && s.rem.is_none() {
            bail!("no remote");
        }
        Ok(s)
    }

    /// Polls once and reacts; returns the completions handled.
    fn step(&mut self) -> Result<usize> {
        let e = self.e;
        let n = e.cq.poll(&mut self.wc)?;
        if n == 0 {
            return Ok(0);
        }
        let mut list = [RecvWr {
            wr_id: 0,
            sg_list: &self.rsge,
        }; 64];
        for (i, w) in self.wc[..n].iter().enumerate() {
            if w.status != WcStatus::Success {
                bail!("server: {}", w.status.as_str());
            }
            list[i].wr_id = w.wr_id;
        }
        match self.test {
            PerfTest::SendBw => {
                e.qp.post_recv(&list[..n]).map_err(|b| anyhow!("{b}"))?;
            }
            PerfTest::WriteLat | PerfTest::SendLat => {
                let op = if self.test == PerfTest::WriteLat {
                    WrOpcode::RdmaWriteWithImm
                } else {
                    WrOpcode::Send
                };
                let rem = self.rem.ok_or_else(|| anyhow!("no remote"))?;
                for w in &list[..n] {
                    if w.wr_id >= 100 {
                        e.qp.post_recv(&[*w]).map_err(|b| anyhow!("{b}"))?;
                        let mut s = SendWr::new(1, op, &self.sge);
                        s.send_flags = SendFlags::empty();
                        s.wr = WrDetail::Rdma {
                            remote_addr: rem.addr + self.size.max(8) as u64,
                            rkey: rem.rkey,
                        };
                        e.qp.post_send(&[s]).map_err(|b| anyhow!("{b}"))?;
                    }
                }
            }
            _ => {}
        }
        Ok(n)
    }
}

/// The passive side on its own thread; returns when `stop()` says so.
fn perf_server(e: &End, p: PerfParams, stop: &dyn Fn() -> bool) -> Result<()> {
    let mut s = Server::new(e, p)?;
    if p.mode == PerfMode::Threaded && matches!(p.test, PerfTest::WriteBw | PerfTest::ReadBw) {
        // the device's poller thread does all the work
        while !stop() {
            std::thread::sleep(Duration::from_millis(5));
        }
        return Ok(());
    }
    // busy poll the CQ (in manual mode this progresses the device; an empty
    // poll yields the CPU now and then)
    while !stop() {
        if s.step()? == 0 {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

fn print_perf(r: &PerfResult, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
        return;
    }
    let line = "-".repeat(95);
    println!("{line}");
    match &r.lat {
        Some(l) => {
            println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    99% percentile[usec]   99.9% percentile[usec]");
            println!(
                " {:<6} {:<11} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<22.2} {:.2}",
                r.bytes,
                r.iters,
                l.min_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3,
                l.p50_ns as f64 / 1e3,
                l.mean_ns / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3
            );
        }
        None => {
            println!(
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
            );
            println!(
                " {:<10} {:<14} {:<18} {:<20.2} {:.6}",
                r.bytes,
                r.iters,
                "-",
                r.bw / 1e6,
                r.msg_rate / 1e6
            );
        }
    }
    println!("{line}");
}

fn perf_params(a: &PerfArgs) -> Result<PerfParams> {
    let lat = is_lat(a.test);
    Ok(PerfParams {
        test: a.test,
        size: a.size.unwrap_or(if lat { 2 } else { 65536 }),
        iters: Some(a.iters.unwrap_or(if lat { 1000 } else { 5000 }) as u64),
        duration: a.duration.map(Duration::from_secs_f64),
        depth: a.tx_depth.max(1),
        mtu: Mtu::from_bytes(a.mtu).ok_or_else(|| anyhow!("invalid MTU {}", a.mtu))?,
        mode: a.mode,
        gso: !a.no_gso,
    })
}

fn perf_cmd(a: PerfArgs) -> Result<()> {
    let p = perf_params(&a)?;
    if p.mode == PerfMode::Single && !a.loopback {
        bail!("--mode single needs --loopback");
    }
    if a.loopback {
        let r = perf_loopback(p, None)?;
        print_perf(&r, a.json);
        return Ok(());
    }
    let ctx = open_device_mode(a.dev.as_deref(), p.mode.io())?;
    let e = perf_end(ctx, p.size, p.depth)?;
    let my_psn = random_psn();
    let me = e.dest(my_psn);
    match &a.host {
        Some(h) => {
            let s = TcpStream::connect((h.as_str(), a.port))
                .with_context(|| format!("connect {h}:{}", a.port))?;
            let mut w = s.try_clone()?;
            w.write_all(perf_line(&me).as_bytes())?;
            let mut r = BufReader::new(s);
            let mut l = String::new();
            r.read_line(&mut l)?;
            let rem = parse_perf_line(&l)?;
            e.connect(my_psn, &rem, p.mtu)?;
            w.write_all(b"go\n")?;
            let res = perf_client(&e, &rem, p, &mut || Ok(()))?;
            w.write_all(b"done\n")?;
            print_perf(&res, a.json);
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port))?;
            println!("waiting for a perf client on port {}", a.port);
            let (s, _) = l.accept()?;
            let mut w = s.try_clone()?;
            let mut r = BufReader::new(s);
            let mut line = String::new();
            r.read_line(&mut line)?;
            let rem = parse_perf_line(&line)?;
            e.connect(my_psn, &rem, p.mtu)?;
            let _ = e.remote.set(rem);
            w.write_all(perf_line(&me).as_bytes())?;
            line.clear();
            r.read_line(&mut line)?; // "go"
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s2 = stop.clone();
            std::thread::spawn(move || {
                let mut l = String::new();
                let _ = r.read_line(&mut l);
                s2.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            perf_server(&e, p, &|| stop.load(std::sync::atomic::Ordering::SeqCst))?;
            println!("perf {:?} served", a.test);
        }
    }
    Ok(())
}

/// Both ends in this process on two loopback devices.
fn perf_loopback(p: PerfParams, ips: Option<(Ipv4Addr, Ipv4Addr)>) -> Result<PerfResult> {
    perf_loopback_counted(p, ips).map(|r| r.0)
}

/// A soft device's counters (zeros for another provider).
fn dev_counters(ctx: &Context) -> verbs::soft::Counters {
    ctx.soft().map(|d| d.counters()).unwrap_or_default()
}

/// [`perf_loopback`], also returning both devices' counters (client, server) read
/// after the run: what really crossed the wire, independent of the client's count.
fn perf_loopback_counted(
    p: PerfParams,
    ips: Option<(Ipv4Addr, Ipv4Addr)>,
) -> Result<(PerfResult, verbs::soft::Counters, verbs::soft::Counters)> {
    let candidates = match ips {
        Some(x) => vec![x],
        None => vec![
            (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2)),
            (Ipv4Addr::new(127, 0, 33, 1), Ipv4Addr::new(127, 0, 33, 2)),
        ],
    };
    let mut last = None;
    for (ia, ib) in candidates {
        let open = |ip| {
            let mut o = DeviceOptions::new(ip);
            o.mode = p.mode.io();
            o.gso &= p.gso;
            o.open()
        };
        match (open(ia), open(ib)) {
            (Ok(ca), Ok(cb)) => {
                let a = perf_end(ca, p.size, p.depth)?;
                let b = perf_end(cb, p.size, p.depth)?;
                let (pa, pb) = (random_psn(), random_psn() ^ 0x5a5a5a);
                let (da, db) = (a.dest(pa), b.dest(pb));
                a.connect(pa, &db, p.mtu)?;
                b.connect(pb, &da, p.mtu)?;
                let _ = b.remote.set(da);
                if p.mode == PerfMode::Single {
                    // one thread drives both devices: the server steps whenever
                    // the client's poll comes back empty
                    let mut srv = Server::new(&b, p)?;
                    let r = perf_client(&a, &db, p, &mut || srv.step().map(|_| ()))?;
                    return Ok((r, dev_counters(&a.ctx), dev_counters(&b.ctx)));
                }
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let s2 = stop.clone();
                let server = std::thread::spawn(move || {
                    perf_server(&b, p, &|| s2.load(std::sync::atomic::Ordering::SeqCst))?;
                    Ok::<_, anyhow::Error>(dev_counters(&b.ctx))
                });
                let r = perf_client(&a, &db, p, &mut || Ok(()));
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                let cb = server
                    .join()
                    .map_err(|_| anyhow!("server thread panicked"))??;
                return Ok((r?, dev_counters(&a.ctx), cb));
            }
            (Err(e), _) | (_, Err(e)) => last = Some(e),
        }
    }
    Err(anyhow!("cannot open two loopback devices: {last:?}"))
}

// ------------------------------------------------------------ up / bench

/// This area's part of `dpustack up`: a soft RoCE device with its poller thread.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.rdma.enabled {
        return Ok(Part::Disabled {
            name: "rdma",
            why: "[rdma] enabled = false",
        });
    }
    // the section's device, else the node's listen address (as the other services)
    let dev = if cfg.rdma.device.is_empty() {
        cfg.node.listen_ip.as_str()
    } else {
        cfg.rdma.device.as_str()
    };
    let dev = (!dev.is_empty()).then_some(dev);
    let ctx = open_device(dev)?;
    *NODE_DEVICE.lock().unwrap_or_else(|p| p.into_inner()) = Some(ctx.clone());
    let attr = ctx.query_port(1)?;
    let detail = format!(
        "soft RoCEv2 device {} on {}:4791, MTU {}, GID {:?}",
        ctx.name(),
        ctx.ip(),
        attr.active_mtu.bytes(),
        ctx.query_gid(1, 1)?.to_ipv4()
    );
    Ok(Part::Running {
        name: "rdma",
        detail,
        stop: Some(Box::new(move || {
            NODE_DEVICE.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(ctx)
        })),
    })
}

/// The device `up` opened, while it runs: the cm part puts its CM agent on it (a
/// second device on the same address could not bind UDP 4791).
static NODE_DEVICE: std::sync::Mutex<Option<Context>> = std::sync::Mutex::new(None);

/// The node's soft RoCE device if the rdma part of `up` opened one.
pub fn node_device() -> Option<Context> {
    NODE_DEVICE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// One figure of `bench roce`: per-run values and same-run baselines.
struct BenchCase {
    name: &'static str,
    test: PerfTest,
    size: usize,
    vals: Vec<f64>,
    bases: Vec<f64>,
}

impl BenchCase {
    fn new(name: &'static str, test: PerfTest, size: usize) -> Self {
        BenchCase {
            name,
            test,
            size,
            vals: vec![],
            bases: vec![],
        }
    }
}

/// `dpustack bench roce`.
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{Better, Figure};
    let t = args.run_time();
    let runs = args.runs();
    let mut rep = benchkit::Report::new("roce");
    // RoCE datagram for a 4 KiB MTU: BTH 12 + payload 4096 + ICRC 4 (+16 RETH on the first)
    let dgram = 12 + 4096 + 4;
    let mut cases: Vec<BenchCase> = vec![
        BenchCase::new("RDMA WRITE 4 KiB bandwidth", PerfTest::WriteBw, 4096),
        BenchCase::new("RDMA WRITE 64 KiB bandwidth", PerfTest::WriteBw, 65536),
        BenchCase::new("SEND 4 KiB bandwidth", PerfTest::SendBw, 4096),
        BenchCase::new("SEND 64 KiB bandwidth", PerfTest::SendBw, 65536),
        BenchCase::new("RDMA WRITE 2 B latency (one way)", PerfTest::WriteLat, 2),
    ];
    for _ in 0..runs {
        let gso = netio::baseline::udp_loopback_bw(dgram, t, true)?;
        let half_rtt =
            netio::baseline::udp_half_rtt(t.min(Duration::from_millis(500)), false)? / 1e3;
        for BenchCase {
            test,
            size,
            vals,
            bases,
            ..
        } in cases.iter_mut()
        {
            let p = PerfParams {
                test: *test,
                size: *size,
                iters: None,
                duration: Some(t),
                depth: 128,
                mtu: Mtu::Mtu4096,
                mode: PerfMode::Threaded,
                gso: true,
            };
            let r = perf_loopback(p, None)?;
            if is_lat(*test) {
                vals.push(r.lat.map(|l| l.p50_ns as f64 / 1e3).unwrap_or(f64::NAN));
                bases.push(half_rtt);
            } else {
                vals.push(r.bw / 1e6);
                bases.push(gso / 1e6);
            }
        }
    }
    for BenchCase {
        name,
        test,
        size,
        vals,
        bases,
    } in cases
    {
        // the machine is shared and noisy: the ratio is the median of the per-run
        // ratios (each against the baseline of its own run), not median/median
        let mut ratios: Vec<f64> = vals.iter().zip(&bases).map(|(v, b)| v / b).collect();
        let per_run = ratios.clone();
        let r = benchkit::median(&mut ratios).unwrap_or(f64::NAN);
        let v = benchkit::median(&mut vals.clone()).unwrap_or(f64::NAN);
        let b = benchkit::median(&mut bases.clone()).unwrap_or(f64::NAN);
        let mut f = if is_lat(test) {
            Figure::new(
                name,
                v,
                "us",
                "UDP loopback half round trip (p50)",
                b,
                Better::Lower,
            )
        } else {
            Figure::new(
                name,
                v,
                "MB/s",
                format!("UDP GSO loopback, {dgram}-byte datagrams"),
                b,
                Better::Higher,
            )
        };
        f.ratio = r;
        rep.push(f.with_detail(serde_json::json!({
            "size": size, "runs": vals, "baseline_runs": bases, "ratio_per_run": per_run
        })));
    }
    rep.note("two dpustack soft RoCE devices on 127.0.0.1 / 127.0.0.2 in one process, poller thread each, path MTU 4096, 128 WRs in flight");
    rep.note("baseline measured in the same run: netio::baseline::udp_loopback_bw(gso=true) at the RoCE datagram size");
    rep.note("value and baseline are medians over runs; ratio is the median of per-run ratios");
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_format_matches_pingpong_c() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ipv4(Ipv4Addr::new(10, 99, 1, 1)),
        };
        let m = encode_dest(&d);
        assert_eq!(m.len(), 52);
        assert_eq!(
            &m[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a630101"
        );
        assert_eq!(m[51], 0);
        let back = decode_dest(&m).unwrap();
        assert_eq!((back.qpn, back.psn, back.gid), (0x11, 0xabcdef, d.gid));
    }

    #[test]
    fn perf_loopback_runs() {
        for (test, mode) in [
            (PerfTest::WriteBw, PerfMode::Manual),
            (PerfTest::WriteLat, PerfMode::Manual),
            (PerfTest::SendBw, PerfMode::Manual),
            (PerfTest::WriteBw, PerfMode::Single),
            (PerfTest::ReadBw, PerfMode::Single),
            (PerfTest::WriteLat, PerfMode::Single),
            (PerfTest::SendLat, PerfMode::Single),
        ]
        .into_iter()
        .chain(
            [
                PerfTest::WriteBw,
                PerfTest::SendBw,
                PerfTest::ReadBw,
                PerfTest::WriteLat,
                PerfTest::SendLat,
            ]
            .map(|t| (t, PerfMode::Threaded)),
        ) {
            let p = PerfParams {
                test,
                size: 8192,
                iters: Some(50),
                duration: None,
                depth: 16,
                mtu: Mtu::Mtu1024,
                mode,
                gso: true,
            };
            let (r, ca, cb) = perf_loopback_counted(
                p,
                Some((Ipv4Addr::new(127, 0, 44, 1), Ipv4Addr::new(127, 0, 44, 2))),
            )
            .unwrap();
            // the client's own count (it stops at the iterations it was given) ...
            assert_eq!(r.iters, 50, "{test:?} {mode:?}");
            // ... and what the devices saw: 50 messages of 8 KiB at MTU 1024 are at
            // least 400 data packets into the side that receives them (the server; the
            // client for READ responses; both for the echoing latency tests), none
            // dropped for a bad header, ICRC, QP or state
            let pkts = 50 * 8192 / 1024;
            let (rx_srv, rx_cli) = match test {
                PerfTest::ReadBw => (50, pkts),
                PerfTest::WriteLat | PerfTest::SendLat => (pkts, pkts),
                _ => (pkts, 1),
            };
            assert!(
                cb.rx_packets >= rx_srv && ca.rx_packets >= rx_cli,
                "{test:?} {mode:?}: server received {} packets (want >= {rx_srv}), client {} (want >= {rx_cli})",
                cb.rx_packets,
                ca.rx_packets
            );
            for c in [ca, cb] {
                let dropped = c.drop_truncated
                    + c.drop_bad_opcode
                    + c.drop_bad_length
                    + c.drop_bad_version
                    + c.drop_bad_icrc
                    + c.drop_no_qp
                    + c.drop_qp_state;
                assert_eq!(dropped, 0, "{test:?} {mode:?}: {c:?}");
            }
        }
    }
}
