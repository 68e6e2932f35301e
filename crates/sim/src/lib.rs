//! # sim — deterministic simulated network for sans-IO protocol tests
//!
//! Owns: a virtual clock, seeded lossy/duplicating/reordering/delaying links, and a
//! pcap writer, so that every protocol core (RoCE QP engines, CM, NVMe/TCP, Raft
//! glue) is tested reproducibly. Used only as a dev-dependency.
//!
//! Depends on nothing inside dpustack.
