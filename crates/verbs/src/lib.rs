//! # verbs — the RDMA verbs API and the software RoCEv2 provider
//!
//! Owns: devices, PDs, MRs (lkey/rkey, access flags), CQs and completion channels,
//! QPs (RC/UC/UD) with the IB state machine, SRQs, post_send/post_recv and work
//! completions with rdma-core's names and statuses. The public objects
//! ([`Context`], [`Pd`], [`Mr`], [`Cq`], [`Qp`], [`Srq`], [`CompChannel`]) are
//! provider-neutral and dispatch to a provider (see *Providers* below); their
//! ownership follows rdma-core's resource hierarchy (see *Ownership*).
//! The [`soft`] provider is a RoCEv2 engine byte-compatible with Linux rdma_rxe
//! (requester, responder, completer as sans-IO state machines) driven over UDP
//! 4791 by `netio`; its own knobs and surface (I/O mode, counters, the sans-IO
//! datagram interface, the GSI QP) live in [`soft`]. The [`rdma_core`]
//! provider (cargo feature `rdma-core`) serves kernel RDMA devices (rxe, NICs)
//! through libibverbs behind the same objects.
//!
//! Does not: memory windows, XRC, IPv6 GIDs, RDMA CM (crate `cm`), path
//! migration. Memory ownership: see [`mr`] (an MR owns its buffer).
//!
//! ```no_run
//! use verbs::*;
//! let ctx = Context::open("127.0.0.1").unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
//! let cq = ctx.create_cq(64, None).unwrap();
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
//! # let _ = (mr, qp);
//! ```
//!
//! # Providers
//! Each public object holds its provider's object in an enum with a variant per
//! provider (`provider.rs`); a verb call is one `match` (per call, never per
//! packet: a provider's datapath runs inside its own objects). Today: `Soft`, the
//! software RoCEv2 provider ([`soft`]). Next: an rdma-core provider over
//! libibverbs for kernel devices, whose objects own `ibv_*` pointers and free
//! them in `Drop`; it adds variants there and nothing changes for callers.
//! [`Context::provider`] says which provider serves a device; `query_device` and
//! `query_port` report the provider's own limits. What only one provider can do
//! is not on the public objects but in its module: the soft device's I/O mode,
//! counters, manual progress and sans-IO datagram interface
//! ([`Context::soft`] → [`soft::Device`]), its options ([`soft::DeviceOptions`])
//! and its GSI QP for the own CM ([`gsi::create_gsi_qp`]).
//!
//! # Ownership
//! Handles are reference-counted and `Clone`: a clone is another reference to
//! the same resource. A child holds its parents (a QP its PD, CQs and SRQ; an
//! MR and an SRQ their PD; a CQ its completion channel; all their `Context`), so
//! no parent can go while a child exists, and a provider object is destroyed
//! when its last handle is dropped, before the parents it holds. The explicit
//! `Qp::destroy`, `Cq::destroy`, `Srq::destroy`, `Mr::dereg` and `Pd::dealloc`
//! fail with `EBUSY` while other handles (clones or children) hold the resource
//! (which then lives until the last of them is dropped). So no handle can name
//! a destroyed provider object: no use-after-free through a clone, which is what
//! makes the model safe for an FFI provider. Handles stay `Clone` because
//! callers share them (the CM keeps a QP per id next to the application's, CQs
//! are shared by QPs) and because an `Arc` clone is what sharing an `ibv_qp *`
//! safely means.
//!
//! Depends on `wire` (packet formats) and `netio` (UDP driver).

mod device;
mod event;
pub mod gsi;
pub mod mr;
mod provider;
pub mod rdma_core;
mod region;
pub mod soft;
mod types;

pub use device::*;
pub use mr::Mr;
/// The soft provider's device names (`dps_a_b_c_d`), the only ones so far.
pub use soft::{device_name, parse_device};
pub use types::*;

/// errno-like errors, as rdma-core returns them from verbs calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// EINVAL: bad attribute, mask, transition or argument.
    #[error("invalid argument (EINVAL)")]
    Inval,
    /// ENOMEM: queue full or allocation failed.
    #[error("out of memory / queue full (ENOMEM)")]
    NoMem,
    /// ENODEV: no such device.
    #[error("no such device (ENODEV)")]
    NoDev,
    /// EBUSY: resource in use.
    #[error("resource busy (EBUSY)")]
    Busy,
    /// EAGAIN: nothing available now.
    #[error("try again (EAGAIN)")]
    Again,
    /// An OS error from the I/O driver.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The errno rdma-core would return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Inval => libc::EINVAL,
            Error::NoMem => libc::ENOMEM,
            Error::NoDev => libc::ENODEV,
            Error::Busy => libc::EBUSY,
            Error::Again => libc::EAGAIN,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// Result of verbs calls.
pub type Result<T> = std::result::Result<T, Error>;

/// A failed `post_send`/`post_recv`: which WR (index into the slice, rdma-core's
/// `bad_wr`) and why. WRs before it were posted.
#[derive(Debug, thiserror::Error)]
#[error("work request {index} rejected: {error}")]
pub struct BadWr {
    pub index: usize,
    pub error: Error,
}
