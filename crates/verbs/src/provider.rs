//! The provider seam: what each public verbs object holds, one enum per object
//! type with a variant per provider. A verb call on a public handle is one
//! `match` on its variant (per call, never per packet: the provider's datapath
//! runs inside its own object), so adding a provider touches only this crate:
//!
//! * `Soft`: the software RoCEv2 provider ([`crate::soft`]), a device per IPv4
//!   address, byte-compatible with Linux rdma_rxe.
//! * `RdmaCore` (cargo feature `rdma-core`): kernel devices (rxe, NICs) over
//!   `libibverbs` ([`crate::rdma_core`]): its objects own `ibv_*` pointers and
//!   destroy them in `Drop`; the public handles' ownership (crate docs,
//!   *Ownership*) makes that safe.
//!
//! Objects of different providers never mix (a QP's CQs are of its PD's
//! device); a provider's object types carry what its datapath needs (the soft
//! CQ its entry counter and poll heuristics, the soft MR the buffer).
//! Capabilities one provider has and others do not (the soft device's GSI QP,
//! its counters and sans-IO datagram interface) are not part of the public
//! objects: they are reached through the provider's module
//! (`Context::soft`, `gsi::create_gsi_qp`).

use std::sync::Arc;

#[cfg(feature = "rdma-core")]
use crate::rdma_core::provider as rp;
use crate::soft::provider as sp;

/// A device (`ibv_context`).
#[derive(Clone)]
pub(crate) enum DeviceImpl {
    Soft(Arc<crate::soft::Device>),
    #[cfg(feature = "rdma-core")]
    RdmaCore(Arc<rp::RcDevice>),
}

/// A protection domain.
pub(crate) enum PdImpl {
    Soft(sp::SoftPd),
    #[cfg(feature = "rdma-core")]
    RdmaCore(rp::RcPd),
}

/// A completion channel.
#[derive(Clone)]
pub(crate) enum ChannelImpl {
    Soft(sp::SoftChannel),
    #[cfg(feature = "rdma-core")]
    RdmaCore(Arc<rp::RcChannel>),
}

/// A completion queue.
pub(crate) enum CqImpl {
    Soft(sp::SoftCq),
    #[cfg(feature = "rdma-core")]
    RdmaCore(rp::RcCq),
}

/// A shared receive queue.
pub(crate) enum SrqImpl {
    Soft(sp::SoftSrq),
    #[cfg(feature = "rdma-core")]
    RdmaCore(rp::RcSrq),
}

/// A queue pair.
pub(crate) enum QpImpl {
    Soft(sp::SoftQp),
    #[cfg(feature = "rdma-core")]
    RdmaCore(rp::RcQp),
}

/// A memory registration.
pub(crate) enum MrImpl {
    Soft(sp::SoftMr),
    #[cfg(feature = "rdma-core")]
    RdmaCore(rp::RcMr),
}
