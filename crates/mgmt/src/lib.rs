//! # mgmt — the management plane (SPDK-compatible)
//!
//! Owns: the JSON-RPC 2.0 protocol core ([`jsonrpc`]: framing of a byte stream into
//! requests, batches, SPDK's error codes and messages), the Unix-socket server
//! ([`server`]: a thread per connection, request size limit, idle timeout), the
//! SPDK methods on the node's state ([`methods`]: bdev_*, nvmf_*, framework
//! methods, `save_config`, `load_config`) and a small client ([`client`]).
//!
//! Does not: metrics, methods for RDMA/CM/switch/obj (`dpustack_*`), live namespace
//! changes seen by already-connected controllers (they keep the subsystem they
//! connected to), per-subsystem listener filtering (listeners are target-wide in
//! `nvmf`; the subsystem's listener list is bookkeeping for `nvmf_get_subsystems`
//! and `save_config`).

#![forbid(unsafe_code)]

pub mod client;
pub mod jsonrpc;
pub mod methods;
pub mod metrics;
pub mod server;

pub use jsonrpc::RpcError;
pub use methods::Mgmt;
pub use metrics::{Collector, MetricsServer, Registry};
pub use server::{RpcServer, DEFAULT_SOCKET};

/// Errors of the management plane outside a JSON-RPC exchange.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("RPC socket {path}")]
    Socket {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("RPC socket {0} is in use by a running process")]
    InUse(String),
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("RPC client: {0}")]
    Client(String),
}
