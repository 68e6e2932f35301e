//! The provider seam: what each public verbs object holds, one enum per object
//! type with a variant per provider. A verb call on a public handle is one
//! `match` on its variant (per call, never per packet: the provider's datapath
//! runs inside its own object), so adding a provider touches only this crate:
//!
//! * `Soft`: the software RoCEv2 provider ([`crate::soft`]), a device per IPv4
//!   address, byte-compatible with Linux rdma_rxe.
//! * (next) an rdma-core provider over `libibverbs` for kernel devices (rxe,
//!   NICs): its objects own `ibv_*` pointers and destroy them in `Drop`; the
//!   public handles' ownership (crate docs, *Ownership*) makes that safe.
//!
//! Objects of different providers never mix (a QP's CQs are of its PD's
//! device); a provider's object types carry what its datapath needs (the soft
//! CQ its entry counter and poll heuristics, the soft MR the buffer).
//! Capabilities one provider has and others do not (the soft device's GSI QP,
//! its counters and sans-IO datagram interface) are not part of the public
//! objects: they are reached through the provider's module
//! (`Context::soft`, `soft::create_gsi_qp`).

use std::sync::Arc;

use crate::soft::provider as sp;

/// A device (`ibv_context`).
#[derive(Clone)]
pub(crate) enum DeviceImpl {
    Soft(Arc<crate::soft::Device>),
}

/// A protection domain.
pub(crate) enum PdImpl {
    Soft(sp::SoftPd),
}

/// A completion channel.
#[derive(Clone)]
pub(crate) enum ChannelImpl {
    Soft(sp::SoftChannel),
}

/// A completion queue.
pub(crate) enum CqImpl {
    Soft(sp::SoftCq),
}

/// A shared receive queue.
pub(crate) enum SrqImpl {
    Soft(sp::SoftSrq),
}

/// A queue pair.
pub(crate) enum QpImpl {
    Soft(sp::SoftQp),
}

/// A memory registration.
pub(crate) enum MrImpl {
    Soft(sp::SoftMr),
}
