//! # mgmt — the management plane (SPDK-compatible)
//!
//! Owns: the JSON-RPC 2.0 protocol core ([`jsonrpc`]: framing of a byte stream into
//! requests, batches, SPDK's error codes and messages), the Unix-socket server
//! ([`server`]: a thread per connection, request size limit, idle timeout), the
//! SPDK methods on the node's state ([`methods`]: bdev_*, nvmf_*, framework
//! methods, `save_config`, `load_config`; other dispatchers plugged in with
//! [`Mgmt::add_methods`]), a small client ([`client`]) and Prometheus metrics
//! ([`metrics`]: the text exposition format, collectors, the HTTP endpoint; the
//! bdev and NVMe-oF collector is [`Mgmt`] itself).
//!
//! Does not: the node's other parts (RDMA, CM, switch, obj): their collectors and
//! `dpustack_*` methods are `node::manage`'s, plugged in by the CLI. See docs/mgmt.md.

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
