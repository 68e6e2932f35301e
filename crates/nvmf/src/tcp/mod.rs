//! NVMe/TCP, sans-IO: the PDU framing both sides share ([`framing`]), the
//! controller side of a connection ([`target::TargetConn`]) and the host side
//! ([`host::HostConn`]). Bytes in, PDUs/commands/events out; no sockets, no
//! clocks, no threads inside (STYLE.md §2). The socket glue is the TCP
//! transport's ([`crate::transport`]).

mod framing;
pub mod host;
pub mod target;
#[cfg(test)]
mod tests;

pub use framing::ConnStats;
pub use host::{HostConn, HostEvent, HostParams, SubmitError};
pub use target::{data_direction, DataError, Request, TargetConn, TargetEvent, TargetParams};

/// SGL descriptor type byte (byte 15 of the descriptor, SQE byte 39) for data
/// carried in the capsule: Data Block, subtype Offset.
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL type byte for data moved by the transport (R2T/H2CData or C2HData):
/// Transport Data Block, subtype Transport Specific.
pub const SGL_TRANSPORT: u8 = 0x5a;
