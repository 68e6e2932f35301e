//! # verbs-tools — rdma-core's verbs tools as a library
//!
//! Owns: the out-of-band QP exchange over TCP ([`exchange`]: the
//! `ibv_*_pingpong` message format and perftest's line format), the
//! `ibv_rc/uc/ud_pingpong` engine ([`pingpong`]) and the perftest-style
//! bandwidth/latency engine ([`perf`]) with its in-process loopback pair.
//!
//! Does not own: argument parsing or result printing (the `dpustack` CLI does
//! that); the device itself (`verbs`). Engines write the few lines rdma-core's
//! tools print while they run (local/remote address, "waiting for ...") to the
//! `std::io::Write` they are given, and return what they measured.
//!
//! Depends on `verbs`, `netio` (default address, cycle counter), `benchkit`
//! (latency percentiles).

#![forbid(unsafe_code)]

pub mod exchange;
pub mod perf;
pub mod pingpong;

use std::net::Ipv4Addr;

use verbs::soft::{DeviceOptions, IoMode};
use verbs::Context;

/// Errors of the tools.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// A post_send/post_recv was refused.
    #[error(transparent)]
    BadWr(#[from] verbs::BadWr),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// `-d`/`--ib-dev` names no device.
    #[error("no such device: {0}")]
    NoSuchDevice(String),
    /// The device could not be opened (its UDP 4791 bound).
    #[error("opening soft RoCE device on {ip}:4791")]
    Open {
        ip: Ipv4Addr,
        #[source]
        source: verbs::Error,
    },
    /// The out-of-band exchange failed (`what` says which step).
    #[error("{what}")]
    Exchange {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The peer's exchange message does not parse.
    #[error("{0}")]
    BadExchange(String),
    #[error(transparent)]
    ParseInt(#[from] std::num::ParseIntError),
    #[error(transparent)]
    Utf8(#[from] std::str::Utf8Error),
    /// An option is out of range (MTU, size, mode).
    #[error("{0}")]
    BadOption(String),
    /// A QP state transition failed.
    #[error("Failed to modify QP to {state}: {err}")]
    Modify {
        state: &'static str,
        err: verbs::Error,
    },
    /// The run failed: completion error, timeout, unexpected completion, data check.
    #[error("{0}")]
    Run(String),
}

/// Result of the tools.
pub type Result<T> = std::result::Result<T, Error>;

/// Opens `spec` (a `dps_a_b_c_d` name or an IPv4 address), or the default
/// device (the host's default IPv4 address), with device progress `mode`.
pub fn open_device(spec: Option<&str>, mode: IoMode) -> Result<Context> {
    let ip = match spec {
        Some(s) if !s.is_empty() => {
            verbs::parse_device(s).map_err(|_| Error::NoSuchDevice(s.to_string()))?
        }
        _ => netio::ifaddr::default_ipv4(),
    };
    let mut o = DeviceOptions::new(ip);
    o.mode = mode;
    o.open().map_err(|source| Error::Open { ip, source })
}
