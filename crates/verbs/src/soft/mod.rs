//! The software RoCEv2 provider: a sans-IO engine (no sockets, no clock, no
//! threads) that turns posted work requests into RoCEv2 packets and incoming
//! packets into memory effects and completions, byte-compatible with rdma_rxe.
//!
//! * [`engine::Engine`] is the device ("interface" layer): MR/CQ/SRQ/QP tables,
//!   receive classification (`classify` order as rxe's `hdr_check`), drop counters,
//!   and the transmit / timeout surface:
//!   `handle_datagram(now, ..)`, `poll_transmit(now, buf)`, `poll_timeout()`,
//!   `handle_timeout(now)`. Call order per round: feed every received datagram,
//!   then `handle_timeout(now)`, then drain `poll_transmit` until it returns None.
//! * [`qp::QpCore`] is one QP (the "endpoint"), split as rxe splits it:
//!   `qp/requester.rs` (rxe_req.c), `qp/completer.rs` (rxe_comp.c),
//!   `qp/responder.rs` (rxe_resp.c) and `qp/unreliable.rs` (UC/UD receive), each
//!   with its own state struct; `qp/mod.rs` holds the attributes, the
//!   `modify_qp` state machine, posting and the move to ERR.
//!
//! The UDP driver lives in [`crate::driver`].

pub mod engine;
pub mod qp;
mod sgl;

pub use engine::{Counters, Engine, Transmit};

/// Provider limits.
pub mod qp_limits {
    pub use super::sgl::{MAX_INLINE, MAX_SGE};
}
