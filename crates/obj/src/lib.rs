//! # obj — DAOS-style object store (one engine)
//!
//! Owns: the data model ([`types`]), the versioned store of one target
//! ([`vos`]), the RPC layer ([`rpc`]: typed wire messages, sans-IO cores, TCP
//! drivers), the engine ([`engine`]: targets owning their shards, management
//! of pools/containers/snapshots) and the client library ([`client`]: libdaos
//! calls on TSE events, KV and array conveniences).
//!
//! Depends on `tse` and `bdev`. Not yet: RPC over RDMA (`verbs`/`cm`),
//! placement over several engines, replication, a Raft pool service. See
//! `docs/obj.md`.

/// Whether this crate has a working implementation yet. `dpustack up` reads it.
pub const IMPLEMENTED: bool = true;

pub mod client;
pub mod dist;
pub mod dtx_op;
pub mod engine;
pub mod fault;
pub mod listing;
pub mod membership;
pub mod placement;
pub mod rebuild;
pub mod rpc;
pub mod types;
pub mod vos;
