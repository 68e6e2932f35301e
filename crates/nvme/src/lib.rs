//! # nvme — NVMe specification types
//!
//! Owns: submission/completion queue entries ([`Sqe`], [`Cqe`]) with typed
//! accessors, opcodes (admin, NVM I/O, fabrics), status codes with names,
//! Identify structures, log pages (including the discovery log page), feature ids,
//! the controller properties (CAP/VS/CC/CSTS), SGL descriptors and PRP lists with
//! builders and walkers that turn them into iovec lists, and the transport rules
//! (PRP only on PCIe admin queues, SGL only on fabrics).
//!
//! Does not: perform I/O, keep controller state, or know about any transport's
//! framing (NVMe/TCP PDUs live in `wire::nvme_tcp`). Depends on nothing inside
//! dpustack.
//!
//! All multi-byte fields are little-endian, as in the specification. The entry
//! and structure types are owned byte arrays (a 64-byte copy is cheaper than any
//! bookkeeping); every accessor is infallible once the value exists, and parsing
//! from a slice checks the length once ([`Sqe::from_bytes`]).
//!
//! Field offsets follow the NVM Express Base Specification 2.0 and NVMe over
//! Fabrics 1.1; the unit tests compare them to the layout of Linux
//! `include/linux/nvme.h`.

#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod cmd;
pub mod dptr;
pub mod features;
pub mod identify;
pub mod log;

pub mod memory;
pub mod opcode;
pub mod prp;
pub mod regs;
pub mod rules;

pub mod sgl;
pub mod status;

pub use cmd::{ConnectData, Cqe, Dptr, DsmRange, Psdt, Sqe, CQE_LEN, SQE_LEN};
pub use memory::{
    FakeMemory, GuestMemory, GuestMemoryMut, IoVec, MemoryError, SliceMemory, VecMemory,
};
pub use opcode::{AdminOpcode, FabricsType, IoOpcode};
pub use sgl::{SglDescriptor, SglEntry, SglSubtype, SglType};
pub use status::{Sct, Status};

/// Errors from parsing NVMe structures out of byte buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the structure.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
}

/// Read a little-endian u16 at `off` (caller guarantees the range).
#[inline]
pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub(crate) fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
#[inline]
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
