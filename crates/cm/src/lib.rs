//! # cm — the RDMA connection manager (librdmacm's model)
//!
//! Owns: event channels, cm_ids with port spaces, address/route resolution,
//! listen/connect/accept/reject/disconnect with private data and ECE, as a sans-IO
//! state machine ([`CmEndpoint`]) that exchanges IB CM MADs (REQ/REP/RTU/REJ/MRA/
//! DREQ/DREP, SIDR_REQ/REP) with QP1 of the peer, byte-compatible with the Linux
//! kernel CM and librdmacm (service IDs `0x01PP_PPNN`, the 36-byte CMA header in
//! front of REQ/SIDR_REQ private data, RoCEv2 GIDs = IPv4-mapped addresses).
//!
//! Does not: own sockets, clocks or threads (time and MADs are inputs; MADs, events
//! and deadlines are outputs, see [`endpoint`] for the poll order), move QPs
//! through their states (the driver does, with [`CmEndpoint::qp_attrs`]), do LAP/APR
//! (alternate paths), multicast, or IB SA path queries.
//!
//! Depends on `wire` (MAD formats); with the `driver` feature also on `verbs`:
//! [`driver::CmDevice`] offers the rdma_cm-like blocking/async API
//! ([`driver::CmId`], [`driver::EventChannel`]) over the CM backend of a device,
//! chosen by its verbs provider: for a soft device our own, an endpoint on the
//! device's QP1 (`verbs::gsi::create_gsi_qp`); librdmacm for kernel devices
//! later, with the same public API.
//!
//! `unsafe` is only in the driver (the rtnetlink socket, eventfds); the sans-IO
//! core (`endpoint`, `event`, `id`) forbids it.

#[cfg(feature = "driver")]
mod addrwatch;
#[cfg(feature = "driver")]
pub mod driver;
pub mod endpoint;
pub mod event;
pub mod id;

pub use endpoint::{
    cm_timeout, CmConfig, CmEndpoint, CmStats, IdInfo, QpAction, QpConnAttrs, RouteHint, Transmit,
    ACCEPT_PRIVATE_DATA_MAX, CONNECT_PRIVATE_DATA_MAX, REJECT_PRIVATE_DATA_MAX,
    SIDR_ACCEPT_PRIVATE_DATA_MAX, SIDR_CONNECT_PRIVATE_DATA_MAX,
};
pub use event::{CmEvent, ConnParam, Ece, EventType, UdParam};
pub use id::{ChannelId, CmIdHandle, CmOption, CmState};
pub use wire::mad::{PortSpace, RejReason};

/// Errors of CM calls (protocol outcomes are events, not errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The handle is stale or was never valid.
    #[error("invalid or destroyed cm_id")]
    InvalidId,
    /// The call is not allowed in the id's current state.
    #[error("operation not allowed in state {0:?}")]
    InvalidState(CmState),
    /// Private data over the message's limit.
    #[error("private data too long: {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    /// The port is bound by another id.
    #[error("address in use")]
    AddrInUse,
    /// The address is not one of this endpoint's.
    #[error("address {0} not available")]
    AddrNotAvailable(std::net::IpAddr),
    /// The device was removed (after DEVICE_REMOVAL): `ENODEV`.
    #[error("no such device (the CM's device was removed)")]
    NoDevice,
    /// `rdma_resolve_addr`: the kernel has no route to the destination; the
    /// positive errno (`ENETUNREACH`, …) is what `rdma_resolve_addr` fails with.
    #[error("rdma_resolve_addr: {}", std::io::Error::from_raw_os_error(*.0))]
    NoRoute(i32),
}

impl Error {
    /// The positive errno librdmacm sets for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidId | Error::InvalidState(_) | Error::PrivateDataTooLong { .. } => 22,
            Error::AddrInUse => 98,
            Error::AddrNotAvailable(_) => 99,
            Error::NoDevice => 19,
            Error::NoRoute(e) => *e,
        }
    }
}
