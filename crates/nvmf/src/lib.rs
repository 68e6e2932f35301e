//! # nvmf — NVMe over Fabrics target and host (SPDK's nvmf model)
//!
//! Owns: target ([`tgt::Tgt`]), subsystems and namespaces on bdevs
//! ([`subsystem`]), controllers with dynamic cntlid ([`ctrlr`]), queue pairs
//! ([`qpair`]), poll groups ([`poll_group`]), the discovery subsystem and log
//! page ([`tgt`]; the Identify structures and log pages are the `nvme` crate's,
//! filled by [`ctrlr`] and [`subsystem`]), the transport interface
//! ([`transport`]: [`transport::Transport`], [`transport::TransportPollGroup`],
//! [`transport::TransportQpair`] on the target side,
//! [`transport::HostTransport`] / [`transport::HostQueue`] on the host side),
//! NVMe/TCP as its first implementation ([`tcp`]: sans-IO
//! [`tcp::TargetConn`] / [`tcp::HostConn`] over one PDU framer, and the socket
//! driver [`tcp::TcpTransport`] / [`tcp::TcpHostTransport`]) and the host
//! library ([`host`]).
//!
//! NVMe/RDMA over the `verbs` soft RoCE provider and the `cm` crate is [`rdma`]
//! (feature `rdma`). Does not: authentication (DH-HMAC-CHAP), TLS, reservations,
//! ANA, the Namespace Management command (namespaces change at run time through
//! the management plane: [`Tgt::replace_subsystem`], with the Namespace Attribute
//! Changed AEN). I/O statistics for the management plane: [`stats`].
//!
//! Depends on `wire` (NVMe/TCP PDUs), `nvme` (SQE/CQE/status), `bdev`. The socket
//! glue (the TCP driver, poll groups, host library, perf) is behind the default
//! `driver` feature; the rest builds and tests with `--no-default-features`.

// No unsafe code: forbidden outright in the core (built without `driver`); with
// the driver, the one libc call (`poll(2)`, tcp/driver.rs) has its own `allow`
// and SAFETY comment; so has the registered-buffer module of RDMA (rdma/pool.rs).
#![cfg_attr(not(feature = "driver"), forbid(unsafe_code))]
#![deny(unsafe_code)]

pub mod ctrlr;
#[cfg(feature = "driver")]
pub mod host;
pub mod iopath;
#[cfg(feature = "driver")]
pub mod perf;
#[cfg(feature = "driver")]
pub mod poll_group;
pub mod qpair;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod stats;
pub mod subsystem;
pub mod tcp;
pub mod tgt;
pub mod transport;

#[cfg(feature = "driver")]
pub use poll_group::{Listen, ListenSpec, ListenerHandle, NvmfServer};
pub use subsystem::{Subsystem, DISCOVERY_NQN};
pub use tgt::{Refusals, Tgt, TgtParams};
pub use transport::{
    HostQueue, HostTransport, Request, Transport, TransportId, TransportPollGroup, TransportQpair,
};
