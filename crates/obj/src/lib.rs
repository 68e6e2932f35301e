//! # obj — DAOS-style object store (later issue)
//!
//! Will own: pools, containers, objects (dkey/akey, single values and arrays,
//! epochs, snapshots) on a versioned store over `bdev`, an async client on `tse`,
//! RPC and bulk over RDMA, placement, replication and a Raft pool service.
//!
//! Depends on `tse` and `bdev` (and, later, `verbs`/`cm`). Nothing is implemented
//! yet: `dpustack up` reports the object store as not present.

/// Whether this crate has a working implementation yet. `dpustack up` reads it.
pub const IMPLEMENTED: bool = false;

pub mod types;
pub mod vos;
pub mod rpc;
pub mod client;
pub mod engine;
