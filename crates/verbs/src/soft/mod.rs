//! The software RoCEv2 provider: a sans-IO engine (no sockets, no clock, no
//! threads) that turns posted work requests into RoCEv2 packets and incoming
//! packets into memory effects and completions, byte-compatible with rdma_rxe,
//! and the UDP (or AF_XDP) driver under it. Layers, bottom up (each file uses
//! only those before it):
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
//!   `modify_qp` state machine, posting and the move to ERR. `mr` is the
//!   registered memory and its key table, `sgl` scatter/gather lists.
//! * `clock`, `transmit` (send batches, GSO, per-QP source ports) and `xdp`
//!   (the opt-in AF_XDP datapath) are the driver's lower half; `device`
//!   ([`Device`]: the engine behind its mutex, the socket, the poller handle)
//!   sits on them; `driver` (receive rounds, manual progress, the poller
//!   thread) on `device`.
//! * `provider`: the soft objects the public verbs handles dispatch to, and the
//!   device's own surface ([`Device::counters`], [`Device::progress`], the
//!   sans-IO `handle_datagram`/`poll_transmit`, [`Device::with_engine`]),
//!   reached through `Context::soft`.
//! * `open`: entry points that return public handles: [`DeviceOptions::open`]
//!   (the soft knobs: [`IoMode`], GSO, UDP port, MTU) and [`crate::gsi::create_gsi_qp`].

mod clock;
pub(crate) mod device;
mod driver;
pub mod engine;
pub(crate) mod mr;
pub(crate) mod provider;
pub mod qp;
mod sgl;
mod shared;
mod transmit;
mod xdp;

pub use device::{device_list, device_name, parse_device, Device, DeviceOptions, IoMode};
pub use engine::{Counters, DeviceLimits, Engine, Transmit};
pub use qp::QpCounters;
pub use xdp::datapath;

/// Provider limits.
pub mod qp_limits {
    pub use super::sgl::{MAX_INLINE, MAX_SGE};
}
