//! cm_id handles and states.

#![forbid(unsafe_code)]

use core::fmt;

/// A cm_id: a slab index plus a generation, so a handle of a destroyed id is
/// rejected instead of reaching the slot's next tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmIdHandle {
    pub(crate) index: u32,
    pub(crate) gen: u32,
}

impl fmt::Display for CmIdHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.index, self.gen)
    }
}

/// An event channel (`struct rdma_event_channel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub(crate) u32);

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ch{}", self.0)
    }
}

/// The state of a cm_id: the kernel's `rdma_cm_state` for address work joined with
/// `ib_cm_state` for the MAD exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Fresh, or finished (after REJ, timeout or TIMEWAIT exit).
    Idle,
    /// `bind_addr` done.
    AddrBound,
    /// `resolve_addr` done.
    AddrResolved,
    /// `resolve_route` done.
    RouteResolved,
    /// Listening.
    Listen,
    /// Active: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Active: MRA received for our REQ.
    MraReqRcvd,
    /// Passive: REQ received, CONNECT_REQUEST reported, waiting for accept/reject.
    ReqRcvd,
    /// Passive: REQ received and a duplicate answered with MRA.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, QP not managed (CONNECT_RESPONSE), waiting for `establish`.
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, DISCONNECTED reported, DREP not yet sent.
    DreqRcvd,
    /// Disconnected; the comm ID is held so stale REQs are recognised.
    TimeWait,
    /// Active UD: SIDR_REQ sent.
    SidrReqSent,
    /// Passive UD: SIDR_REQ received, waiting for accept/reject.
    SidrReqRcvd,
    /// Passive UD: SIDR_REP sent (kept to answer duplicate SIDR_REQs).
    SidrRepSent,
}

/// `rdma_set_option` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmOption {
    /// IP type of service (RoCE traffic class).
    Tos(u8),
    /// Allow binding a port in use.
    ReuseAddr(bool),
    /// Local ACK timeout (5 bits, 4.096 µs · 2^n) for the QP.
    AckTimeout(u8),
}
