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
    /// A kernel RDMA device could not be opened through rdma-core.
    #[error("opening kernel RDMA device {spec:?} through rdma-core")]
    Kernel {
        spec: String,
        #[source]
        source: verbs::Error,
    },
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

/// Which verbs provider serves a tool's devices (`--provider`, config
/// `[rdma] provider`).
///
/// `auto` (the default): a device spec that names a kernel RDMA device (its
/// name, or the IPv4 of one of its RoCE v2 GIDs) opens it through rdma-core
/// when this build has the provider; with no spec, the first kernel device if
/// there is one; anything else is a soft device. `rdma-core` forces kernel
/// devices; `soft` never touches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ProviderChoice {
    /// rdma-core for kernel RDMA devices when built with it, soft otherwise.
    #[default]
    Auto,
    /// The software RoCEv2 provider.
    Soft,
    /// Kernel RDMA devices through libibverbs (cargo feature `rdma-core`).
    RdmaCore,
}

/// Opens `spec` on a kernel device when `provider` says so: `Ok(None)` means
/// "use a soft device". `auto` falls back to soft when no kernel device
/// matches (or the build has no rdma-core provider).
pub fn open_kernel(provider: ProviderChoice, spec: Option<&str>) -> Result<Option<Context>> {
    let spec = spec.unwrap_or("");
    let kernel = |source| Error::Kernel {
        spec: spec.to_string(),
        source,
    };
    match provider {
        ProviderChoice::Soft => Ok(None),
        ProviderChoice::RdmaCore => verbs::rdma_core::open(spec).map(Some).map_err(kernel),
        ProviderChoice::Auto => {
            if !verbs::rdma_core::BUILT || !verbs::rdma_core::kernel_has_devices() {
                return Ok(None);
            }
            match verbs::rdma_core::open(spec) {
                Ok(c) => Ok(Some(c)),
                Err(verbs::Error::NoDev) => Ok(None),
                Err(e) => Err(kernel(e)),
            }
        }
    }
}

/// Opens `spec` (a kernel device's name or GID IPv4 when `provider` picks
/// rdma-core, see [`open_kernel`]; else a `dps_a_b_c_d` name or an IPv4
/// address), or the default device (the first kernel device, else the host's
/// default IPv4 address), with soft device progress `mode`.
pub fn open_device(spec: Option<&str>, mode: IoMode, provider: ProviderChoice) -> Result<Context> {
    open_device_with(spec, mode, provider, Default::default())
}

/// [`open_device`] with the bounds of a soft device (a kernel device keeps
/// its own: `limits` does not apply to it).
pub fn open_device_with(
    spec: Option<&str>,
    mode: IoMode,
    provider: ProviderChoice,
    limits: verbs::soft::DeviceLimits,
) -> Result<Context> {
    if let Some(ctx) = open_kernel(provider, spec)? {
        return Ok(ctx);
    }
    let ip = match spec {
        Some(s) if !s.is_empty() => {
            verbs::parse_device(s).map_err(|_| Error::NoSuchDevice(s.to_string()))?
        }
        _ => netio::ifaddr::default_ipv4(),
    };
    let mut o = DeviceOptions::new(ip);
    o.mode = mode;
    o.limits = limits;
    o.open().map_err(|source| Error::Open { ip, source })
}
