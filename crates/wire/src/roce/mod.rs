//! RoCEv2 (InfiniBand transport over UDP port 4791): the Base Transport Header,
//! the extension headers (RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH),
//! the opcode table that says which headers follow the BTH, a whole-packet
//! [`RocePacketRepr`] with `parse`/`emit`, and the invariant CRC exactly as Linux
//! rdma_rxe computes it (see [`icrc`]).
//!
//! Layout of a RoCEv2 UDP payload: `BTH | ext headers (opcode-defined) | payload |
//! pad (0..3, BTH.PadCnt) | ICRC (4, little-endian)`.
//!
//! Every view follows the crate contract: `new_unchecked` wraps, `check_len`
//! validates the buffer length against the fixed header size, `new_checked` does
//! both; accessors are then infallible. Nothing here allocates or panics on input.

mod headers;
pub mod icrc;
pub mod opcode;
mod packet;
mod psn;

pub use headers::*;
pub use icrc::{icrc_ipv4, Ipv4Pseudo};
pub use opcode::{ExtHdr, OpFlags, OpInfo, Opcode};
pub use packet::{AethSyndrome, NakCode, RocePacketRepr};
pub use psn::Psn;

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;
/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
/// The default P_Key (full membership, default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The well-known Q_Key of the GSI (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;

#[cfg(test)]
mod tests;
