//! CM events (librdmacm's `struct rdma_cm_event`) and connection parameters.

#![forbid(unsafe_code)]

use core::fmt;
use core::net::IpAddr;

use crate::id::{ChannelId, CmIdHandle};

/// `-ETIMEDOUT`: a MAD was retried `max_cm_retries` times without an answer.
pub const ETIMEDOUT: i32 = -110;
/// `-EHOSTUNREACH`: no local address can reach the destination.
pub const EHOSTUNREACH: i32 = -113;
/// `-ENODEV`: the device went away.
pub const ENODEV: i32 = -19;

/// librdmacm's `enum rdma_cm_event_type` (the values are librdmacm's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `rdma_resolve_addr` completed.
    AddrResolved = 0,
    /// `rdma_resolve_addr` failed.
    AddrError = 1,
    /// `rdma_resolve_route` completed.
    RouteResolved = 2,
    /// `rdma_resolve_route` failed.
    RouteError = 3,
    /// A REQ (or SIDR_REQ) arrived on a listener: a new id is in the event.
    ConnectRequest = 4,
    /// The REP arrived and the QP is not managed by the CM: call `establish`.
    ConnectResponse = 5,
    /// Connection setup failed locally.
    ConnectError = 6,
    /// The peer did not answer (status `-ETIMEDOUT`) or SIDR failed (status = SIDR status).
    Unreachable = 7,
    /// The peer rejected (status = REJ reason; 8 = no listener, 28 = consumer reject).
    Rejected = 8,
    /// The connection is up.
    Established = 9,
    /// The connection is down (DREQ/DREP exchanged or timed out).
    Disconnected = 10,
    /// The device was removed.
    DeviceRemoval = 11,
    /// Multicast join (not supported here).
    MulticastJoin = 12,
    /// Multicast error (not supported here).
    MulticastError = 13,
    /// The local address changed.
    AddrChange = 14,
    /// TIMEWAIT finished: the QP may be reused.
    TimewaitExit = 15,
}

impl EventType {
    /// librdmacm's name (`rdma_event_str`).
    pub fn name(self) -> &'static str {
        match self {
            EventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            EventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            EventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            EventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            EventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            EventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            EventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            EventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            EventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            EventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            EventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            EventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            EventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Enhanced connection establishment options (`struct ibv_ece`), carried in the
/// REQ/REP vendor-ID fields and the MAD attribute modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ece {
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Vendor-defined options.
    pub options: u32,
}

/// Connection parameters (`struct rdma_conn_param`), from the local point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Consumer private data (limits: see `CmEndpoint::connect`/`accept`/`reject`).
    pub private_data: Vec<u8>,
    /// RDMA READ/atomics the local side accepts as responder.
    pub responder_resources: u8,
    /// RDMA READ/atomics the local side issues.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retry count (3 bits; REQ only).
    pub retry_count: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The local QP uses an SRQ.
    pub srq: bool,
    /// The local QP number.
    pub qp_num: u32,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        }
    }
}

/// UD parameters of an event in the UDP/IB-UD port space (`struct rdma_ud_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The remote QP number.
    pub qp_num: u32,
    /// The remote Q_Key.
    pub qkey: u32,
    /// The remote address (address handle destination).
    pub remote: IpAddr,
}

/// One CM event. Dropping it acknowledges it (`rdma_ack_cm_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// The id the event is for (for CONNECT_REQUEST: the new id).
    pub id: CmIdHandle,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmIdHandle>,
    /// The channel the event was queued on (`None`: synchronous id).
    pub channel: Option<ChannelId>,
    /// What happened.
    pub event: EventType,
    /// 0, a negative errno, or (REJECTED) the REJ reason / (UNREACHABLE after SIDR) the SIDR status.
    pub status: i32,
    /// Connection parameters (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED: private data).
    pub param: ConnParam,
    /// UD parameters (UDP port space: CONNECT_REQUEST and ESTABLISHED).
    pub ud: Option<UdParam>,
    /// The remote side's ECE (CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED).
    pub ece: Ece,
}

impl fmt::Display for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} status {} id {}", self.event, self.status, self.id)
    }
}
