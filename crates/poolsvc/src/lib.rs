//! # poolsvc — the pool service, replicated with Raft
//!
//! DAOS keeps each pool's metadata in a replicated *pool service*: the pool
//! map (fault domains, targets and their states), container metadata and
//! properties, open handles. Here it is replicated with
//! [openraft](https://docs.rs/openraft) (leader election, log replication,
//! snapshots); every replica keeps its log, vote and applied state in redb
//! ([`store`]).
//!
//! - [`state`]: the replicated state and its commands (deterministic apply);
//! - [`store`]: openraft's storage over redb;
//! - [`service`]: one replica — its Raft node and the answers to clients
//!   (writes and linearizable reads on the leader; a follower answers with a
//!   redirect to the leader it knows);
//! - [`msg`]: the messages between replicas and from clients;
//! - [`net`]: openraft's network over a [`net::Transport`], and the TCP
//!   transport engines use; [`server`]: a replica's TCP server;
//! - [`runner`]: a replica on its own thread inside an engine process;
//! - [`health`]: the leader's engine monitor (DOWN, then EXCLUDED), sans-IO;
//! - [`rebuild`]: the leader's rebuild driver (exclusion → copies to the
//!   spares; reintegration of returning engines), progress in the state;
//! - [`client`]: a client that follows redirects and tries every replica.
//!
//! Runs on tokio (openraft is async); the object I/O path does not.

use std::io::Cursor;

pub mod client;
pub mod health;
pub mod msg;
pub mod net;
pub mod rebuild;
pub mod runner;
pub mod server;
pub mod service;
pub mod state;
pub mod store;

/// Replica ids (the engine's rank).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft's type configuration for the pool service.
    pub TypeConfig:
        D = state::Command,
        R = state::Reply,
);

/// The pool service's openraft node.
pub type Raft = openraft::Raft<TypeConfig>;

/// Errors of the pool service and its clients.
#[derive(Debug, thiserror::Error)]
pub enum SvcError {
    #[error("storage: {0}")]
    Store(#[from] redb::Error),
    #[error("raft: {0}")]
    Raft(String),
    #[error("no leader known (election under way or no quorum)")]
    NoLeader,
    #[error("no replica answered: {0}")]
    Unreachable(String),
    #[error("bad message: {0}")]
    Wire(String),
}

/// Raft timing: heartbeats every `heartbeat_ms`, elections after a silence
/// drawn in `[election_min_ms, election_max_ms)` (openraft's defaults are
/// 50 / 150–300 ms).
pub fn raft_config(
    heartbeat_ms: u64,
    election_min_ms: u64,
    election_max_ms: u64,
) -> openraft::Config {
    openraft::Config {
        cluster_name: "dpustack-pool-svc".into(),
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: election_min_ms,
        election_timeout_max: election_max_ms,
        // small state: snapshot (and purge the log) every 1000 entries
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(1000),
        max_in_snapshot_log_to_keep: 100,
        ..Default::default()
    }
}
