//! NVMe/RDMA (NVMe-oF RDMA transport binding) over dpustack's verbs and RDMA CM
//! (feature `rdma`): [`RdmaTransport`] / [`RdmaPollGroup`] / [`RdmaQpair`] on the
//! target side, [`RdmaHostTransport`] on the host side.
//!
//! * Connection: RDMA CM, TCP port space (service ID `0x0106_PPPP`, as Linux
//!   `rdma_create_id(RDMA_PS_TCP)`), the NVMe/RDMA private data of
//!   [`wire::nvme_rdma`] (REQ → queue sizes, REP with CRQSIZE, REJ with STS).
//! * One RC QP per NVMe queue, one CQ per QP (a shared CQ per poll group is not
//!   done). Command capsules (SQE + in-capsule data) arrive by SEND into
//!   pre-posted receive buffers of one registered region per queue; responses
//!   (CQEs) go out by SEND from a registered response region.
//! * Data: keyed SGL data blocks (host memory): the target RDMA READs a host
//!   write's data into a registered buffer before handing the command to the core,
//!   and RDMA WRITEs a read's data followed by the response SEND in one post (RC
//!   ordering: the SEND is not waited for). In-capsule data: Data Block / Offset SGL.
//! * Memory: [`pool::BufPool`] — registered buffers by power-of-two size class,
//!   registered when a class first runs short and reused after (no registration
//!   in steady state); the core's bdev I/O reads and writes them in place
//!   (`bdev::IoBuf::External`).
//!
//! Not done (said again at run time where it matters): SEND_WITH_INVALIDATE (the
//! soft provider has no memory windows/FRWR; we answer with a plain SEND, and a
//! Linux host then invalidates its own rkey), Last Segment SGL lists of several
//! keyed descriptors (MSDBD 1: rejected with SGL Descriptor Type Invalid), SRQ,
//! a completion channel for sleeping (the poll group naps 50 µs instead).

pub mod capsule;
pub mod host;
pub mod pool;
pub mod target;

pub use host::RdmaHostTransport;
pub use target::{RdmaFaults, RdmaParams, RdmaPollGroup, RdmaQpair, RdmaTransport};

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use cm::driver::CmDevice;
use nvme::log::{DiscoveryEntry, TrType};

use crate::poll_group::{Listen, NvmfServer};
use crate::transport::TransportId;
use crate::Tgt;

/// Opens the RDMA device of `ip` with the RDMA CM on it: the kernel device that
/// has `ip` as a RoCE v2 GID when the build has the rdma-core provider and the
/// kernel such a device (librdmacm is then the CM), else a soft RoCE device on
/// `ip` (its own UDP 4791 socket: one device per address and process).
pub fn open_device(ip: Ipv4Addr) -> io::Result<CmDevice> {
    // a kernel RDMA device with this address (rdma-core provider, librdmacm CM)
    // if there is one, else a soft RoCE device on it
    let ctx = match verbs::rdma_core::open_by_ip_if_kernel(ip)
        .map_err(|e| io::Error::other(format!("kernel RDMA device with GID {ip}: {e}")))?
    {
        Some(c) => c,
        None => verbs::Context::open(&ip.to_string())
            .map_err(|e| io::Error::other(format!("soft RoCE device on {ip}: {e}")))?,
    };
    CmDevice::open(&ctx, cm::CmConfig::default())
        .map_err(|e| io::Error::other(format!("RDMA CM on {ip}: {e}")))
}

/// The source address the kernel would use towards `dst` (nothing is sent).
pub fn source_for(dst: SocketAddr) -> io::Result<IpAddr> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    s.connect(dst)?;
    Ok(s.local_addr()?.ip())
}

fn v4(ip: IpAddr) -> io::Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(_) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "NVMe/RDMA: the soft RoCE device is IPv4 only",
        )),
    }
}

/// A host transport towards `dst` from a soft device on `src` (default: the
/// kernel's source address for `dst`, which must differ from `dst`: one device
/// per address).
pub fn host_transport(dst: SocketAddr, src: Option<IpAddr>) -> io::Result<RdmaHostTransport> {
    let src = match src {
        Some(s) => s,
        None => source_for(dst)?,
    };
    if src == dst.ip() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "NVMe/RDMA host: source {src} is the target's own address; give the host \
                 another address (--host-traddr, e.g. 127.0.0.2 for a target on 127.0.0.1)"
            ),
        ));
    }
    Ok(RdmaHostTransport::new(open_device(v4(src)?)?))
}

/// Starts a target whose listeners (TRTYPE RDMA, all on one IPv4 address) are
/// served by one soft RoCE device on that address.
pub fn start_server(
    tgt: Tgt,
    listen: &[Listen],
    poll_groups: usize,
    params: RdmaParams,
) -> io::Result<NvmfServer> {
    let first = listen
        .first()
        .and_then(|l| l.trid.socket_addr())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no RDMA listener"))?;
    if listen
        .iter()
        .any(|l| l.trid.socket_addr().map(|a| a.ip()) != Some(first.ip()))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NVMe/RDMA listeners must share one address (one soft device)",
        ));
    }
    let dev = open_device(v4(first.ip())?)?;
    start_server_on(tgt, dev, listen, poll_groups, params)
}

/// As [`start_server`], on a CM device that already runs (e.g. the node's CM agent
/// on its soft RoCE device: one device per address, since each binds UDP 4791); the
/// listeners must be on its address.
pub fn start_server_on(
    tgt: Tgt,
    dev: CmDevice,
    listen: &[Listen],
    poll_groups: usize,
    params: RdmaParams,
) -> io::Result<NvmfServer> {
    let ip = IpAddr::V4(dev.ip());
    if let Some(l) = listen
        .iter()
        .find(|l| l.trid.socket_addr().map(|a| a.ip()) != Some(ip))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "NVMe/RDMA listener {}: not the RDMA device's address {ip}",
                l.trid.uri()
            ),
        ));
    }
    NvmfServer::start_with(tgt, RdmaTransport::new(dev, params), listen, poll_groups)
}

/// Live resources of one transport (target or host), for leak checks: queue
/// pairs, registered regions (each queue's receive and response regions and every
/// pool buffer) and pool buffers lent out. All return to zero once every queue is gone.
#[derive(Debug, Default)]
pub struct RdmaCounters {
    pub qpairs: std::sync::atomic::AtomicI64,
    pub mrs: std::sync::atomic::AtomicI64,
    pub bufs_lent: std::sync::atomic::AtomicI64,
    /// Target: times a poll group slept on its queues' completion channels, and
    /// how many of those sleeps a completion ended (the rest: the timeout).
    pub sleeps: std::sync::atomic::AtomicI64,
    pub woken: std::sync::atomic::AtomicI64,
}

impl RdmaCounters {
    /// (qpairs, MRs, buffers lent).
    pub fn snapshot(&self) -> (i64, i64, i64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.qpairs.load(Relaxed),
            self.mrs.load(Relaxed),
            self.bufs_lent.load(Relaxed),
        )
    }
    pub(crate) fn add(c: &std::sync::atomic::AtomicI64, n: i64) {
        c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Size of an NVMe command (SQE) in a capsule.
pub const SQE_LEN: usize = 64;
/// Size of a response capsule (CQE).
pub const CQE_LEN: usize = 16;

/// TSAS for RDMA (NVMe-oF 1.1 Figure 40): QP service type, provider type, CM.
pub mod tsas {
    /// RDMA QPTYPE: reliable connected.
    pub const QPTYPE_CONNECTED: u8 = 1;
    /// RDMA PRTYPE: no provider specified (Linux nvmet reports the same).
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    /// RDMA CMS: the RDMA CM.
    pub const CMS_RDMA_CM: u8 = 1;
}

/// The NVMe/RDMA part of the discovery log entries for a listener at `trid`:
/// TRTYPE RDMA, ADRFAM, TRADDR/TRSVCID, TREQ "secure channel not specified",
/// TSAS RDMA (QPTYPE connected, PRTYPE not specified, CMS RDMA_CM, P_Key 0).
pub fn discovery_entry(trid: &TransportId) -> DiscoveryEntry {
    let mut e = DiscoveryEntry {
        trtype: TrType::Rdma,
        adrfam: trid.adrfam,
        traddr: trid.traddr.clone(),
        trsvcid: trid.trsvcid.clone(),
        treq: nvme::log::treq::SECURE_NOT_SPECIFIED,
        ..Default::default()
    };
    e.tsas = [0; 256];
    e.tsas[0] = tsas::QPTYPE_CONNECTED;
    e.tsas[1] = tsas::PRTYPE_NOT_SPECIFIED;
    e.tsas[2] = tsas::CMS_RDMA_CM;
    e
}

/// Work request ids: the kind in the top byte, a slot in the rest.
pub(crate) mod wrid {
    pub const RECV: u64 = 1 << 56;
    pub const SEND: u64 = 2 << 56;
    pub const READ: u64 = 3 << 56;
    pub const WRITE: u64 = 4 << 56;
    pub const KIND: u64 = 0xff << 56;
    pub fn kind(id: u64) -> u64 {
        id & KIND
    }
    pub fn slot(id: u64) -> usize {
        (id & !KIND) as usize
    }
}
