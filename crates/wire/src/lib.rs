//! # wire — zero-copy views of every on-the-wire format dpustack speaks
//!
//! Owns: Ethernet/VLAN/IPv4/IPv6/UDP/TCP headers, RoCEv2 (BTH and the extension
//! headers RETH/AETH/AtomicETH/AtomicAckETH/ImmDt/IETH/DETH, the opcode table, the
//! ICRC), InfiniBand MADs (the CM messages carried on QP1), and NVMe/TCP PDUs.
//! Every header is a typed view over a byte buffer (`new_checked` checks lengths
//! once, accessors are then infallible) plus a `Repr` with `parse`/`emit`; bad
//! input is a typed [`Error`]-style value, never a panic.
//!
//! Depends on nothing inside dpustack. Everything else may depend on it. It does no
//! I/O, keeps no state and never allocates on the parse/emit path.

#![forbid(unsafe_code)]

/// Why a buffer could not be viewed or parsed. `Copy`, so drop counters can say why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field inside it says).
    #[error("truncated")]
    Truncated,
    /// A length field is inconsistent with the buffer or with the format.
    #[error("bad length")]
    BadLength,
    /// An opcode / type code that this format does not define (or not here).
    #[error("bad opcode")]
    BadOpcode,
    /// The RoCEv2 invariant CRC does not match.
    #[error("bad ICRC")]
    BadIcrc,
    /// A checksum or digest (IP/UDP checksum, CRC32C digest) does not match.
    #[error("bad checksum")]
    BadChecksum,
    /// A version field has a value this implementation does not speak.
    #[error("bad version")]
    BadVersion,
    /// Well-formed but semantically invalid (reserved bits, impossible combination).
    #[error("malformed")]
    Malformed,
}

/// Result of wire parsing.
pub type Result<T> = core::result::Result<T, Error>;

// Module ownership (one writer each): L2–L4 views are shared by `flow` and the
// RoCE/NVMe-TCP drivers; RoCE and MADs by `verbs`/`cm`; NVMe/TCP PDUs by `nvmf`.
pub mod ethernet;
pub mod mad;
pub mod nvme_rdma;
pub mod nvme_tcp;
pub mod pcap;
pub mod roce;
