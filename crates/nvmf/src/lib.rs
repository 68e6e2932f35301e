//! # nvmf — NVMe over Fabrics target and host (SPDK's nvmf model)
//!
//! Owns: target ([`tgt::Tgt`]), subsystems and namespaces on bdevs
//! ([`subsystem`]), controllers with dynamic cntlid ([`ctrlr`]), queue pairs
//! ([`qpair`]), poll groups and the TCP driver ([`poll_group`]), the discovery
//! subsystem and log page ([`tgt`]; the Identify structures and log pages are the
//! `nvme` crate's, filled by [`ctrlr`] and [`subsystem`]), the sans-IO NVMe/TCP transport cores
//! ([`tcp::TargetConn`], [`tcp::HostConn`]) and the host library ([`host`]).
//!
//! Does not: RDMA (later, over `verbs`), authentication (DH-HMAC-CHAP), TLS,
//! reservations, ANA, namespace management at run time.
//!
//! Depends on `wire` (NVMe/TCP PDUs), `nvme` (SQE/CQE/status), `bdev`. The socket
//! glue (poll groups, host library, perf) is behind the default `driver` feature;
//! the rest builds and tests with `--no-default-features`.

pub mod ctrlr;
#[cfg(feature = "driver")]
pub mod host;
#[cfg(feature = "driver")]
pub mod perf;
#[cfg(feature = "driver")]
pub mod poll_group;
pub mod qpair;
pub mod subsystem;
pub mod tcp;
pub mod tgt;
pub mod transport;

#[cfg(feature = "driver")]
pub use poll_group::{ListenSpec, NvmfServer};
pub use subsystem::{Subsystem, DISCOVERY_NQN};
pub use tgt::{Tgt, TgtParams};
