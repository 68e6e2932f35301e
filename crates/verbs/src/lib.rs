//! # verbs — the RDMA verbs API and the software RoCEv2 provider
//!
//! Owns: devices, PDs, MRs (lkey/rkey, access flags), CQs and completion channels,
//! QPs (RC/UC/UD) with the IB state machine, SRQs, post_send/post_recv and work
//! completions with rdma-core's names and statuses. The `soft` provider is a
//! RoCEv2 engine byte-compatible with Linux rdma_rxe (requester, responder,
//! completer as sans-IO state machines) driven over UDP 4791 by `netio`.
//! A provider over rdma-core for real NICs will sit beside `soft` behind a feature.
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
//! Depends on `wire` (packet formats) and `netio` (UDP driver).

mod device;
pub mod driver;
mod event;
pub mod mr;
pub mod soft;
mod types;

pub use device::*;
pub use mr::Mr;
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
