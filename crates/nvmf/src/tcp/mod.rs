//! NVMe/TCP, the first implementation of the transport interface
//! ([`crate::transport`]). Sans-IO: the PDU framing both sides share
//! (`framing`), the controller side of a connection ([`target::TargetConn`]) and
//! the host side ([`host::HostConn`]): bytes in, PDUs/commands/events out; no
//! sockets, no clocks, no threads inside (STYLE.md §2). The socket glue is
//! `driver` (default feature `driver`): [`driver::TcpTransport`],
//! [`driver::TcpPollGroup`], [`driver::TcpQpair`], [`driver::TcpHostTransport`].

#[cfg(feature = "driver")]
pub mod driver;
mod framing;
pub mod host;
pub mod target;
#[cfg(test)]
mod tests;

#[cfg(feature = "driver")]
pub use driver::{TcpHostTransport, TcpPollGroup, TcpQpair, TcpTransport};
pub use framing::ConnStats;
pub use host::{HostConn, HostEvent, HostParams, SubmitError};
pub use target::{
    data_direction, discovery_entry, TargetConn, TargetEvent, TargetParams, SGL_IN_CAPSULE,
    SGL_TRANSPORT,
};
