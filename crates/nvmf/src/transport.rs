//! The transport interface, target side (SPDK `spdk_nvmf_transport_ops`).
//!
//! The core (tgt, subsystems, controllers, [`crate::qpair::Qpair`], the poll group
//! loop of [`crate::poll_group`]) knows commands, completions and buffers; a
//! transport knows how they cross the fabric. NVMe/TCP ([`crate::tcp`]) is the
//! first implementation; docs/nvmf.md sketches how NVMe/RDMA fills each op.
//!
//! | SPDK op | here |
//! |---|---|
//! | `create`, `opts` | the transport's constructor and its own params; [`Transport::limits`] |
//! | `cdata_init` | [`TransportLimits`] (MDTS, IOCCSZ), stored with each listener |
//! | `listen`, `stop_listen` | [`Transport::listen`] (dropping the transport stops) |
//! | `accept` | [`Transport::accept`] |
//! | `listener_discover` | [`Transport::listener_discover`] (TRTYPE, ADRFAM, TREQ, TSAS) |
//! | `poll_group_create` | [`Transport::poll_group_create`] |
//! | `poll_group_add` / `remove` | the group's qpair list; [`TransportPollGroup::remove`] (`qpair_fini`) |
//! | `poll_group_poll` | [`TransportPollGroup::poll`] (receive) + [`TransportPollGroup::flush`] (transmit) + [`TransportPollGroup::wait`] (sleep) |
//! | (a qpair's new requests) | [`TransportQpair::poll_event`] → [`QpairEvent::Command`] ([`Request`]) |
//! | `req_complete` | [`TransportQpair::complete`] |
//! | buffers (`spdk_nvmf_request_get_buffers`, `req_free`) | [`TransportQpair::get_buf`] / [`TransportQpair::put_buf`]: [`bdev::IoBuf`]s the transport owns (registered memory for RDMA: [`bdev::ExternalBuf`]) |
//! | `qpair_get_peer_trid` | [`TransportQpair::peer`] |

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use bdev::IoBuf;
use nvme::log::{AdrFam, DiscoveryEntry, TrType};
use nvme::{Cqe, Sqe};

/// Where a transport listens or connects (SPDK `spdk_nvme_transport_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportId {
    pub trtype: TrType,
    pub adrfam: AdrFam,
    /// Transport address (IP transports: the address as text).
    pub traddr: String,
    /// Transport service id (IP transports: the port as decimal text).
    pub trsvcid: String,
}

impl TransportId {
    /// An IP transport's id for `addr` (TCP, RDMA over RoCE/iWARP).
    pub fn ip(trtype: TrType, addr: SocketAddr) -> Self {
        TransportId {
            trtype,
            adrfam: if addr.is_ipv6() {
                AdrFam::Ipv6
            } else {
                AdrFam::Ipv4
            },
            traddr: addr.ip().to_string(),
            trsvcid: addr.port().to_string(),
        }
    }
    /// NVMe/TCP at `addr`.
    pub fn tcp(addr: SocketAddr) -> Self {
        Self::ip(TrType::Tcp, addr)
    }
    /// The socket address of an IP transport id.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        let ip: std::net::IpAddr = self.traddr.parse().ok()?;
        Some(SocketAddr::new(ip, self.trsvcid.parse().ok()?))
    }
    /// `tcp://127.0.0.1:4420`.
    pub fn uri(&self) -> String {
        let scheme = match self.trtype {
            TrType::Tcp => "tcp",
            TrType::Rdma => "rdma",
            TrType::Fc => "fc",
            TrType::Loop => "loop",
            TrType::Unknown(_) => "unknown",
        };
        format!("{scheme}://{self}")
    }
}

/// `traddr:trsvcid`, IPv6 addresses in brackets (as a `SocketAddr` prints).
impl fmt::Display for TransportId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.socket_addr() {
            Some(a) => write!(f, "{a}"),
            None => write!(f, "{}:{}", self.traddr, self.trsvcid),
        }
    }
}

/// What a transport tells the controllers of its queues (SPDK `cdata_init`):
/// Identify's MDTS, IOCCSZ, SGLS and MSDBD, and the largest Get Log Page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// Largest data transfer of one command (MDTS), bytes.
    pub max_xfer: u32,
    /// Largest in-capsule data on I/O queues, bytes (IOCCSZ = (64 + this) / 16).
    pub in_capsule: u32,
    /// Identify SGLS (`nvme::identify::sgls`): which SGL descriptors the
    /// transport takes (RDMA adds Keyed SGL Data Block).
    pub sgls: u32,
    /// Identify MSDBD: SGL data block descriptors per command.
    pub msdbd: u8,
}

impl Default for TransportLimits {
    /// NVMe/TCP's values: 1 MiB, 8 KiB, SGLs without alignment with offsets
    /// (in-capsule data), one descriptor.
    fn default() -> Self {
        TransportLimits {
            max_xfer: 1024 * 1024,
            in_capsule: 8192,
            sgls: nvme::identify::sgls::SUPPORTED | nvme::identify::sgls::OFFSET,
            msdbd: 1,
        }
    }
}

/// A transport-level problem with how a command's data was described or moved;
/// the core completes the command with the matching NVMe status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataError {
    /// SGL descriptor type invalid (generic 0x11).
    SglTypeInvalid,
    /// Data SGL length invalid (generic 0x0f): in-capsule length disagrees, or too long.
    SglLengthInvalid,
    /// SGL offset invalid (generic 0x16).
    SglOffsetInvalid,
    /// Invalid number of SGL descriptors (generic 0x0e): a descriptor list longer than
    /// MSDBD allows, empty, or not a whole number of descriptors.
    SglCountInvalid,
    /// The data arrived damaged (a data digest mismatch; generic 0x04, data
    /// transfer error).
    DataDigest,
}

impl DataError {
    /// (SCT, SC) of the NVMe status to complete with.
    pub fn status(self) -> (u8, u8) {
        match self {
            DataError::SglTypeInvalid => (0, 0x11),
            DataError::SglLengthInvalid => (0, 0x0f),
            DataError::SglOffsetInvalid => (0, 0x16),
            DataError::SglCountInvalid => (0, 0x0e),
            DataError::DataDigest => (0, 0x04),
        }
    }
}

/// A command ready to execute (SPDK `spdk_nvmf_request`): the SQE and, for
/// host-to-controller commands, all of the host's data in a buffer the transport
/// owns (a pooled vector for TCP; registered memory the data was RDMA READ into,
/// for RDMA). The core gives `data` back with [`TransportQpair::put_buf`] or
/// hands it to a bdev I/O.
#[derive(Debug)]
pub struct Request {
    pub sqe: Sqe,
    /// Host-to-controller data (empty for other commands).
    pub data: IoBuf,
    /// Bytes the host's SGL allows for controller-to-host data.
    pub c2h_len: u32,
    /// The data could not be taken in; complete with this error's status.
    pub error: Option<DataError>,
}

impl Request {
    pub fn cid(&self) -> u16 {
        self.sqe.cid()
    }
}

/// What a transport qpair reports to the core.
#[derive(Debug)]
pub enum QpairEvent {
    /// The transport's connection set-up is done (NVMe/TCP: ICReq/ICResp).
    Established,
    /// A command to execute.
    Command(Request),
    /// The connection is over (the transport logged why); the core tears the
    /// qpair down.
    Terminated { by_peer: bool },
}

/// One queue pair's transport side (SPDK `spdk_nvmf_<transport>_qpair`). Owned
/// by the core's [`crate::qpair::Qpair`], which lives on one poll group.
pub trait TransportQpair: Send + 'static {
    /// The next event: commands in arrival order.
    fn poll_event(&mut self) -> Option<QpairEvent>;
    /// Completes a command (`req_complete`): sends `data` (controller-to-host,
    /// possibly empty) and the CQE. The transport owns `data` from here on and
    /// recycles it once sent.
    fn complete(&mut self, cqe: &Cqe, data: IoBuf);
    /// A buffer of `len` bytes for controller-to-host data (a read's bdev
    /// buffer): transport memory, so completing with it needs no copy.
    fn get_buf(&mut self, len: usize) -> IoBuf;
    /// Gives a buffer back (`req_free`).
    fn put_buf(&mut self, buf: IoBuf);
    /// The queue connected (Fabrics Connect succeeded); `sqflow_disabled` lets a
    /// transport omit SQHD (NVMe/TCP's C2HData SUCCESS flag).
    fn connected(&mut self, sqflow_disabled: bool);
    /// The connection is over (peer closed, protocol error, I/O error).
    fn is_terminated(&self) -> bool;
    /// The peer's address (`qpair_get_peer_trid`), for logs.
    fn peer(&self) -> String;
    /// Counters, for the "qpair closed" debug line.
    fn describe_stats(&self) -> String;
}

/// A transport's part of one poll group (SPDK `spdk_nvmf_transport_poll_group`).
/// The generic poll group owns the qpairs; each call gets all of them, so a
/// transport whose qpairs share a completion queue (RDMA) can demultiplex.
pub trait TransportPollGroup: Send + 'static {
    type Qpair: TransportQpair;
    /// Receive half of `poll_group_poll`: bring in what arrived for the qpairs
    /// (events then wait in [`TransportQpair::poll_event`]). Returns progress.
    fn poll<Q: AsMut<Self::Qpair>>(&mut self, qpairs: &mut [Q]) -> bool;
    /// Transmit half: push out what completions queued. Returns progress.
    fn flush<Q: AsMut<Self::Qpair>>(&mut self, qpairs: &mut [Q]) -> bool;
    /// Sleeps until a qpair has something to receive or send, at most
    /// `timeout`. Returns whether it was woken by traffic.
    fn wait<Q: AsMut<Self::Qpair>>(&mut self, qpairs: &mut [Q], timeout: Duration) -> bool;
    /// `qpair_fini`: a last flush (a term request), then close.
    fn remove(&mut self, qpair: Self::Qpair);
}

/// A new connection, accepted on listener number `listener` (the order of
/// [`Transport::listen`] calls).
#[derive(Debug)]
pub struct Accepted<Q> {
    pub qpair: Q,
    pub listener: usize,
}

/// A transport (SPDK `spdk_nvmf_transport_ops`): listens, accepts new queue
/// pairs and makes poll groups for them. Owned by the acceptor thread; poll
/// groups move to their own threads.
pub trait Transport: Send + 'static {
    type Qpair: TransportQpair;
    type PollGroup: TransportPollGroup<Qpair = Self::Qpair>;
    fn trtype(&self) -> TrType;
    /// Limits the controllers of this transport's queues report.
    fn limits(&self) -> TransportLimits;
    /// Starts listening at `trid`; returns the bound id (a port 0 resolved).
    fn listen(&mut self, trid: &TransportId) -> std::io::Result<TransportId>;
    /// Fills the transport's fields of a discovery log entry for a listener
    /// (TRTYPE, ADRFAM, TRADDR, TRSVCID, TREQ, TSAS); the target fills the rest.
    fn listener_discover(&self, trid: &TransportId, entry: &mut DiscoveryEntry);
    /// Stops listening at `trid` (an id [`Transport::listen`] returned): the socket
    /// (CM id) is closed at once. Returns the listener's index (later listeners'
    /// [`Accepted::listener`] numbers shift down by one), `None` when not listening there.
    fn stop_listen(&mut self, trid: &TransportId) -> Option<usize>;
    /// Waits up to `timeout` for new connections and appends them to `out`.
    fn accept(
        &mut self,
        timeout: Duration,
        out: &mut Vec<Accepted<Self::Qpair>>,
    ) -> std::io::Result<()>;
    /// A poll group's transport part. `event_driven`: sleep-first polling
    /// (receive only what `wait` reported), for CPU-starved machines.
    fn poll_group_create(&self, event_driven: bool) -> Self::PollGroup;
}

// ---------------------------------------------------------------------------
// host side

/// Why a host queue's transport refused a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("connection not established")]
    NotReady,
    #[error("command id {0} already in flight")]
    CidBusy(u16),
}

/// Why a host queue's connection stopped working.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection terminated ({0})")]
    Terminated(&'static str),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
}

/// What a host queue asks of its transport connection.
#[derive(Debug, Clone, Copy)]
pub struct HostQueueParams {
    /// Ask for header / data digests (transports that have them).
    pub hdgst: bool,
    pub ddgst: bool,
    /// How long connection set-up may take.
    pub timeout: Duration,
    /// The queue's id (0 = admin) and depth: NVMe/RDMA puts them in the CM
    /// private data (QID, HRQSIZE, HSQSIZE) before Fabrics Connect.
    pub qid: u16,
    pub depth: u16,
}

/// A completed command as a host queue's transport delivers it.
#[derive(Debug)]
pub struct HostCompletion {
    pub cqe: Cqe,
    /// Controller-to-host data (the read length the command was submitted with).
    pub data: Vec<u8>,
}

/// One host queue's connection (SPDK `spdk_nvme_transport_ops` qpair ops:
/// submit, process completions). The host library ([`crate::host`]) assigns
/// CIDs and keeps the queue depth; the transport moves commands, data and
/// completions.
pub trait HostQueue: Send {
    /// Sends a command with its host-to-controller data (`write`, in the capsule
    /// when at most `in_capsule` bytes, else as the transport moves data) and
    /// room for `read_len` bytes back. The transport fills in SGL1.
    fn submit(
        &mut self,
        sqe: Sqe,
        write: &[u8],
        read_len: u32,
        in_capsule: u32,
    ) -> Result<(), SubmitError>;
    /// Moves data both ways and appends completions to `done`; with `block`,
    /// waits (at most 100 ms) for something to happen when nothing moved.
    /// Returns whether anything moved. Completions that arrived before an error
    /// are appended before it is returned.
    fn progress(
        &mut self,
        block: bool,
        done: &mut std::collections::VecDeque<HostCompletion>,
    ) -> Result<bool, QueueError>;
    /// Gives a completion's data buffer back for reuse.
    fn recycle(&mut self, buf: Vec<u8>);
    /// Negotiated digests (none for transports without them).
    fn digests(&self) -> wire::nvme_tcp::Digests {
        wire::nvme_tcp::Digests::default()
    }
}

/// A host transport (SPDK `spdk_nvme_transport_ops` `ctrlr_connect_qpair`):
/// opens queue connections.
pub trait HostTransport: Send + Sync {
    fn trtype(&self) -> TrType;
    /// Connects one queue to `trid` and completes the transport's own set-up
    /// (NVMe/TCP: ICReq/ICResp); Fabrics Connect is the host library's.
    fn connect(
        &self,
        trid: &TransportId,
        params: &HostQueueParams,
    ) -> Result<Box<dyn HostQueue>, QueueError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_id_text() {
        let t = TransportId::tcp("127.0.0.1:4420".parse().unwrap());
        assert_eq!(
            (t.to_string(), t.uri()),
            ("127.0.0.1:4420".into(), "tcp://127.0.0.1:4420".into())
        );
        let t = TransportId::ip(TrType::Rdma, "[::1]:4421".parse().unwrap());
        assert_eq!(
            (t.adrfam, t.to_string()),
            (AdrFam::Ipv6, "[::1]:4421".into())
        );
        assert_eq!(t.uri(), "rdma://[::1]:4421");
        assert_eq!(t.socket_addr(), Some("[::1]:4421".parse().unwrap()));
    }
}
