//! # cm-tools — librdmacm's example tools as a library
//!
//! Owns: the engines of `rping` ([`rping`]), `rdma_server`/`rdma_client`
//! ([`simple`]), `ucmatose`/`udaddy` ([`tose`]) and `cmtime` ([`cmtime`]),
//! speaking the same protocols as rdma-core's programs (either side may be the
//! real librdmacm tool), over the `cm` crate's driver on the `verbs` device of
//! a local IPv4 address: a soft RoCEv2 device, or a kernel one through the
//! rdma-core provider (its CM is then librdmacm); [`Provider`] chooses, and no
//! tool has a code path of its own for either.
//!
//! Does not own: argument parsing (the `dpustack` CLI), the node's CM agent
//! (`node`, which runs [`rping::serve_one`] as its rping service). The lines the
//! tools print go to a [`Console`]; the CM settings come in as a
//! [`cm::CmConfig`] (no process-global state).
//!
//! Depends on `cm` (driver), `verbs`, `netio` (route look-up), `wire` (QKEY).

#![forbid(unsafe_code)]

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId};
use cm::CmConfig;
use cm::EventType;
use verbs::{Cq, Mr, QpCap, RecvWr, SendFlags, SendWr, Wc, WcStatus, WrDetail, WrOpcode};

/// Writes one line to the console's stdout (as `println!`).
macro_rules! say {
    ($con:expr, $($t:tt)*) => { $con.out(format_args!($($t)*))? };
}
/// Writes one line to the console's stderr (as `eprintln!`).
macro_rules! warn {
    ($con:expr, $($t:tt)*) => { $con.err(format_args!($($t)*))? };
}
/// An [`Error::Run`] with a formatted message.
macro_rules! err {
    ($($t:tt)*) => { $crate::Error::Run(format!($($t)*)) };
}
/// Returns an [`Error::Run`] with a formatted message.
macro_rules! bail {
    ($($t:tt)*) => { return Err(err!($($t)*)) };
}

pub mod cmtime;
pub mod rping;
pub mod simple;
pub mod tose;

/// Errors of the tools.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Cm(#[from] cm::driver::DriverError),
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The device could not be opened (its UDP 4791 bound).
    #[error("opening a soft RoCE device on {ip} (UDP {ip}:4791)")]
    Open {
        ip: Ipv4Addr,
        #[source]
        source: verbs::Error,
    },
    /// No kernel RDMA device has `ip` (or the build has no rdma-core provider).
    #[error("opening the kernel RDMA device with RoCE v2 GID {ip} (rdma-core provider)")]
    OpenKernel {
        ip: Ipv4Addr,
        #[source]
        source: verbs::Error,
    },
    /// The kernel has no route to the peer (to pick our source address).
    #[error("no route to {dst}")]
    NoRoute {
        dst: Ipv4Addr,
        #[source]
        source: std::io::Error,
    },
    /// A required option is missing or out of range.
    #[error("{0}")]
    Usage(String),
    /// The run failed: completion error, timeout, protocol error, CM error event.
    #[error("{0}")]
    Run(String),
}

/// Result of the tools.
pub type Result<T> = std::result::Result<T, Error>;

/// Where a tool's lines go: stdout and stderr of the process ([`Console::stdio`])
/// or nowhere ([`Console::silent`], for a node service that logs instead).
pub struct Console {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
}

impl Console {
    /// The process's stdout and stderr.
    pub fn stdio() -> Console {
        Console {
            out: Box::new(std::io::stdout()),
            err: Box::new(std::io::stderr()),
        }
    }
    /// Drops every line.
    pub fn silent() -> Console {
        Console {
            out: Box::new(std::io::sink()),
            err: Box::new(std::io::sink()),
        }
    }
    /// Any two writers.
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Console {
        Console { out, err }
    }
    /// One line to the tool's output.
    pub fn out(&mut self, line: std::fmt::Arguments) -> std::io::Result<()> {
        writeln!(self.out, "{line}")
    }
    /// One line to the tool's diagnostics.
    pub fn err(&mut self, line: std::fmt::Arguments) -> std::io::Result<()> {
        writeln!(self.err, "{line}")
    }
}

/// An error and its causes, joined with ": " (as anyhow's `{:#}`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += ": ";
        s += &c.to_string();
        cur = c.source();
    }
    s
}

/// Timeout of the tools' synchronous CM steps and completions.
pub const T: Duration = Duration::from_secs(30);

/// The local address the kernel would use to reach `dst` (no packet is sent).
pub fn route_source(dst: Ipv4Addr) -> Result<Ipv4Addr> {
    netio::ifaddr::route_source(None, dst, 4791).map_err(|source| Error::NoRoute { dst, source })
}

/// Which verbs provider a tool's device is opened with (the CLI's
/// `--provider`; the CM backend follows the provider: our own CM on a soft
/// device, librdmacm on a kernel one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// A kernel device that has `ip` as a RoCE v2 GID when the build has the
    /// rdma-core provider and the kernel has RDMA devices, else a soft one.
    #[default]
    Auto,
    /// A soft RoCE device on `ip`.
    Soft,
    /// The kernel device that has `ip` as a RoCE v2 GID (rdma-core provider).
    RdmaCore,
}

/// Opens the device for `ip` with `provider` (a soft RoCE device: a poller
/// thread, UDP `ip`:4791; a kernel device: the one with `ip` as a RoCE v2 GID)
/// and a CM device on it with the settings `cm`.
pub fn open_device(ip: Ipv4Addr, provider: Provider, cm: &CmConfig) -> Result<CmDevice> {
    let kernel = match provider {
        Provider::Soft => None,
        Provider::RdmaCore => Some(
            verbs::rdma_core::open(&ip.to_string())
                .map_err(|source| Error::OpenKernel { ip, source })?,
        ),
        Provider::Auto => verbs::rdma_core::open_by_ip_if_kernel(ip)
            .map_err(|source| Error::OpenKernel { ip, source })?,
    };
    let ctx = match kernel {
        Some(c) => c,
        None => {
            verbs::Context::open(&ip.to_string()).map_err(|source| Error::Open { ip, source })?
        }
    };
    Ok(CmDevice::open(&ctx, cm.clone())?)
}

/// How long a tool that disconnects waits for the exchange to end (the peer's DREP,
/// or its crossing DREQ): long enough for the CM to resend a lost DREQ twice (CMA's
/// response timeout, 20, is ~4.3 s a try). Linux's CM lives in the kernel and keeps
/// answering after a process exits; ours ends with the process, so a tool that exited
/// right after a lost DREQ left its Linux peer waiting for a disconnect that never
/// came (interop 10-netem, 2 % loss: Linux's rping server killed by its timeout).
pub(crate) const DISCONNECT_WAIT: Duration = Duration::from_secs(12);

/// Waits for `id`'s DISCONNECTED after [`CmId::disconnect`] (at most
/// [`DISCONNECT_WAIT`]) unless a completion wait has `seen` it already (an event
/// comes once); false if it did not come.
pub(crate) fn wait_disconnected(id: &CmId, seen: bool) -> bool {
    if seen {
        return true;
    }
    let t0 = Instant::now();
    while let Some(left) = DISCONNECT_WAIT.checked_sub(t0.elapsed()) {
        match id.get_event(Some(left)) {
            Ok(ev) if matches!(ev.event, EventType::Disconnected | EventType::DeviceRemoval) => {
                return true
            }
            Ok(ev) => tracing::debug!("cm event {} while disconnecting", ev.event),
            Err(_) => return false,
        }
    }
    false
}

/// Waits for one completion on `cq`, also watching `id` for DISCONNECTED (→ `Ok(None)`).
/// How long a completion still in flight is awaited after the peer's DISCONNECTED.
const DISCONNECT_GRACE: Duration = Duration::from_millis(200);

/// `seen` is set when the id's DISCONNECTED (or DEVICE_REMOVAL) event is taken here.
pub(crate) fn wait_wc(
    cq: &Cq,
    id: &CmId,
    timeout: Duration,
    seen: &mut bool,
) -> Result<Option<Wc>> {
    let t0 = Instant::now();
    let mut wc = [Wc::default(); 1];
    let mut spins = 0u32;
    // When the peer disconnects its DREQ may overtake the ACK of our last SEND (its CQE is
    // written before the responder's ACK leaves): the QP stays in RTS until we disconnect
    // (as with Linux's CM), so a completion still in flight is given a short grace.
    let mut peer_gone: Option<Instant> = None;
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
            if peer_gone.is_some_and(|t| t.elapsed() > DISCONNECT_GRACE) {
                return Ok(None);
            }
            match id.get_event(Some(Duration::ZERO)) {
                Ok(ev) if ev.event == EventType::Disconnected => {
                    *seen = true;
                    peer_gone.get_or_insert_with(Instant::now);
                }
                Ok(ev) if ev.event == EventType::DeviceRemoval => {
                    *seen = true;
                    return Ok(None);
                }
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

/// A connection's completion waits (`rping::wait_recv`/`wait_send`): completions
/// of the other kind held for the next wait, and whether the id's DISCONNECTED was
/// taken by a wait (then [`wait_disconnected`] must not wait for it again).
#[derive(Default)]
pub(crate) struct Waits {
    pub(crate) held: std::collections::VecDeque<Wc>,
    pub(crate) disconnected: bool,
}

pub(crate) fn post_recv(id: &CmId, mr: &Mr, len: u32) -> Result<()> {
    let qp = id.qp().ok_or_else(|| err!("no QP"))?;
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[mr.sge(0, len)],
    }])
    .map_err(|e| err!("post_recv: {:?}", e.error))
}

pub(crate) fn post_send(
    id: &CmId,
    wr_id: u64,
    op: WrOpcode,
    mr: &Mr,
    len: u32,
    rdma: Option<(u64, u32)>,
) -> Result<()> {
    let qp = id.qp().ok_or_else(|| err!("no QP"))?;
    let sge = [mr.sge(0, len)];
    let mut wr = SendWr::new(wr_id, op, &sge);
    wr.send_flags = SendFlags::SIGNALED;
    if let Some((remote_addr, rkey)) = rdma {
        wr.wr = WrDetail::Rdma { remote_addr, rkey };
    }
    qp.post_send(&[wr])
        .map_err(|e| err!("post_send: {:?}", e.error))
}

pub(crate) fn qp_cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}
