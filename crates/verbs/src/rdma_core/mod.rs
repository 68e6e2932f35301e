//! The rdma-core provider: kernel RDMA devices (rxe, ConnectX, ...) through
//! libibverbs, behind the same public verbs objects as the soft provider.
//! Built with the cargo feature `rdma-core` (links libibverbs.so.1; the
//! headers of `libibverbs-dev` are only needed by the ABI test); without it
//! this module still exists and [`open`] fails loudly, saying how to enable it.
//!
//! * `ffi`: the part of libibverbs used, declared by hand, checked against the
//!   installed headers by a unit test (sizes and offsets).
//! * `provider`: the objects the public handles hold (`RcDevice`, `RcPd`,
//!   `RcMr`, `RcCq`, `RcChannel`, `RcSrq`, `RcQp`), each owning an `ibv_*`
//!   pointer and destroying it in `Drop`.
//!
//! Differences from the soft provider a caller can see: the device is named
//! by the kernel (`rxe0`) or by the IPv4 of one of its RoCE v2 GIDs; GID
//! indices are the kernel's (`ibv_devinfo -v`); [`crate::Ah::dport`] is
//! ignored (the kernel sends to 4791); completion events are acked when
//! [`crate::CompChannel::get_cq_event`] returns them (so `Cq::ack_events` is
//! a no-op); port up/down and device fatal are [`crate::AsyncEvent`]s, the
//! async events it has no variant for (COMM_EST, LID/PKEY/GID change) are
//! logged and skipped.

/// The libibverbs declarations, public for the `cm` crate's librdmacm backend
/// (its `rdma_init_qp_attr` fills an `ibv_qp_attr`; its events carry an
/// `ibv_ah_attr`); not an API for applications.
#[cfg(feature = "rdma-core")]
#[doc(hidden)]
pub mod ffi;
#[cfg(feature = "rdma-core")]
pub(crate) mod provider;

#[cfg(feature = "rdma-core")]
pub use provider::{GidEntry, RcDevice};

use crate::{Context, Error, Result};

/// Whether this build has the rdma-core provider (cargo feature `rdma-core`).
pub const BUILT: bool = cfg!(feature = "rdma-core");

/// What to tell a user of a build without the provider.
pub const NOT_BUILT: &str = "this dpustack was built without the rdma-core provider: \
     install libibverbs-dev (apt-get install -y libibverbs-dev librdmacm-dev) and rebuild with \
     `cargo build --release -p dpustack --features rdma-core`";

/// Whether the kernel has RDMA devices (`/sys/class/infiniband` not empty),
/// whatever this build can do with them.
pub fn kernel_has_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// Names of the kernel's RDMA devices libibverbs can open (empty without the
/// feature).
pub fn device_names() -> Result<Vec<String>> {
    #[cfg(feature = "rdma-core")]
    {
        provider::device_names()
    }
    #[cfg(not(feature = "rdma-core"))]
    {
        Ok(Vec::new())
    }
}

/// The kernel device that has `ip` as a RoCE v2 GID, if this build has the
/// provider and the kernel such a device (`Ok(None)`: use a soft device on
/// `ip`). The rule of `--provider auto` for the services that name their
/// device by address (NVMe-oF over RDMA, the object store's RPC): a soft device
/// could not share UDP 4791 of that address with the kernel's rxe anyway.
pub fn open_by_ip_if_kernel(ip: std::net::Ipv4Addr) -> Result<Option<Context>> {
    if !BUILT || !kernel_has_devices() {
        return Ok(None);
    }
    match open(&ip.to_string()) {
        Ok(c) => Ok(Some(c)),
        Err(Error::NoDev) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens a kernel device by name (`rxe0`), by the IPv4 address of one of its
/// RoCE v2 GIDs, or (empty `spec`) the first device. Without the feature:
/// `EOPNOTSUPP` (see [`NOT_BUILT`]).
pub fn open(spec: &str) -> Result<Context> {
    #[cfg(feature = "rdma-core")]
    {
        let dev = if spec.is_empty() {
            let n = device_names()?.into_iter().next().ok_or(Error::NoDev)?;
            provider::open_by_name(&n)?
        } else if let Ok(ip) = spec.parse() {
            provider::open_by_ip(ip)?
        } else {
            provider::open_by_name(spec)?
        };
        Ok(Context::from_rdma_core(dev))
    }
    #[cfg(not(feature = "rdma-core"))]
    {
        let _ = spec;
        tracing::error!("{NOT_BUILT}");
        Err(Error::Io(std::io::Error::from_raw_os_error(
            libc::EOPNOTSUPP,
        )))
    }
}
