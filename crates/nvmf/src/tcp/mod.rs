//! NVMe/TCP, sans-IO: the PDU framing both sides share ([`framing`]), the
//! controller side of a connection ([`target::TargetConn`]) and the host side
//! ([`host::HostConn`]). Bytes in, PDUs/commands/events out; no sockets, no
//! clocks, no threads inside (STYLE.md §2). The socket glue is the TCP
//! transport's ([`crate::transport`]).

#[cfg(feature = "driver")]
pub mod driver;
mod framing;
pub mod host;
pub mod target;
#[cfg(test)]
mod tests;

use nvme::log::{treq, DiscoveryEntry, TrType};

use crate::transport::{TransportId, TransportLimits};

#[cfg(feature = "driver")]
pub use driver::{TcpHostTransport, TcpPollGroup, TcpQpair, TcpTransport};
pub use framing::ConnStats;
pub use host::{HostConn, HostEvent, HostParams, SubmitError};
pub use target::{data_direction, TargetConn, TargetEvent, TargetParams};

/// SGL descriptor type byte (byte 15 of the descriptor, SQE byte 39) for data
/// carried in the capsule: Data Block, subtype Offset.
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL type byte for data moved by the transport (R2T/H2CData or C2HData):
/// Transport Data Block, subtype Transport Specific.
pub const SGL_TRANSPORT: u8 = 0x5a;

/// The NVMe/TCP part of the discovery log entries for a listener at `trid`
/// (`listener_discover`): TRTYPE TCP, its address family and address, TREQ
/// "secure channel not specified, SQ flow control disable supported", TSAS
/// SECTYPE none; CNTLID 0xffff (dynamic) and ASQSZ 32 as for any transport.
pub fn discovery_entry(trid: &TransportId) -> DiscoveryEntry {
    DiscoveryEntry {
        trtype: TrType::Tcp,
        adrfam: trid.adrfam,
        traddr: trid.traddr.clone(),
        trsvcid: trid.trsvcid.clone(),
        treq: treq::SECURE_NOT_SPECIFIED | treq::DISABLE_SQFLOW,
        ..Default::default()
    }
}

impl TargetParams {
    /// What controllers of NVMe/TCP queues report (`cdata_init`).
    pub fn limits(&self) -> TransportLimits {
        TransportLimits {
            max_xfer: self.max_xfer,
            in_capsule: self.in_capsule,
        }
    }
}
