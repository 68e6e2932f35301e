//! The object store's RPC layer (CaRT/Mercury's role in DAOS): typed wire
//! messages, sans-IO cores, and I/O drivers.
//!
//! - [`header`]: the 32-byte frame header (typed view + `Repr`), opcodes.
//! - [`status`]: DAOS `DER_*` status codes.
//! - [`codec`], [`msg`]: checked body encoding; one typed request and reply
//!   per opcode, bulk descriptors checked against the frame's bulk region.
//! - [`frame`]: stream framing (oversized frames skipped, garbage fatal).
//! - [`core`]: sans-IO client ([`core::ClientCore`]: ids, deadlines,
//!   cancellation) and server connection ([`core::ServerConn`]).
//! - [`tcp`]: the TCP drivers (client socket, engine network thread).
//! - [`limit`]: the engine's bound on connected clients (TCP + RDMA).
//!
//! - [`rdma`]: the same frames over RDMA SEND/RECV on RC QPs set up with the
//!   RDMA CM, large values by RDMA READ (soft RoCE provider).

pub mod codec;
pub mod core;
pub mod frame;
pub mod header;
pub mod limit;
pub mod msg;
pub mod rdma;
pub mod status;
pub mod tcp;

pub use self::core::{ClientCore, Completion, Incoming, RawReply, RpcError, ServerConn};
pub use header::{HeaderRepr, Opcode};
pub use msg::{Reply, Request};
pub use status::Status;

/// Connection ids of RDMA clients have this bit (TCP ids never do), so a
/// reply finds its transport.
pub const RDMA_CONN_BIT: u64 = 1 << 62;

/// Whether run-to-completion targets are on (`DPUSTACK_OBJ_RTC=0` turns
/// them off: an engine then opens no target listeners, a client sends
/// everything over its main connection).
pub fn rtc_enabled() -> bool {
    std::env::var("DPUSTACK_OBJ_RTC").map_or(true, |v| v != "0")
}

/// Connection ids of a run-to-completion target's own TCP connections
/// (`engine::target_net`): their replies are written by that target.
pub const TARGET_CONN_BIT: u64 = 1 << 61;

/// Largest frame body (arguments + bulk) either side accepts: a bigger
/// request is refused with [`Status::RecTooBig`] and its bytes skipped.
pub const MAX_BODY: usize = 16 * 1024 * 1024 + 64 * 1024;

/// Why bytes could not be parsed. `Copy`, so drop counters can say why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated")]
    Truncated,
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    #[error("bad length in {field}: {len}")]
    BadLength { field: &'static str, len: usize },
    #[error("{len} exceeds the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("bad value {value} in {field}")]
    BadValue { field: &'static str, value: u64 },
    #[error("string is not UTF-8")]
    BadUtf8,
    #[error("{0} trailing bytes")]
    TrailingBytes(usize),
    #[error("unknown opcode {0:#x}")]
    UnknownOpcode(u16),
    #[error("bulk descriptor [{off}, +{len}) outside the {bulk_len}-byte bulk region")]
    BulkOutOfRange { off: u32, len: u32, bulk_len: u32 },
}
