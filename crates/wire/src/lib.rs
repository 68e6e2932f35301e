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
