//! The messages between replicas and from clients (JSON on the wire).

use std::collections::BTreeMap;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use crate::state::{Command, PoolSvcState, Reply};
use crate::{NodeId, TypeConfig};

/// A message to a replica.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Client(ClientRequest),
    /// An engine's lease request (the fence, `obj::engine::MapVersions`)
    /// from replica `from`'s engine: the leader confirms its leadership with
    /// a quorum and answers the current map versions
    /// ([`ClientReply::Versions`]); a follower redirects.
    /// `incarnation`: the engine's ([`crate::state::Command::EngineIncarnation`]:
    /// the leader records it before answering; a new one is a restart, set
    /// DOWN first).
    Lease {
        from: NodeId,
        #[serde(default)]
        incarnation: Option<u64>,
    },
}

/// A replica's answer.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Client(ClientReply),
}

/// A client's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Replicate and apply a command (leader only).
    Write(Command),
    /// A linearizable read of the whole state (leader only).
    Read,
    /// The replica's own view (any replica).
    Status,
    /// Fault injection (tests): replace this engine's cut links
    /// ([`obj::fault`]); refused unless the engine runs with it on.
    /// Answered with the replica's status.
    Faults {
        drop_to: Vec<NodeId>,
        drop_from: Vec<NodeId>,
    },
    /// A client cannot reach engine `rank` (DAOS's client-side failure
    /// report): the leader probes it at once. It changes no map: the
    /// leader's monitor marks the engine DOWN only when its own probes fail
    /// and the engine's lease has lapsed ([`crate::health`]). Answered with
    /// the leader's status; a follower redirects.
    ReportUnreachable { rank: u32 },
}

/// A replica's view of the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub id: NodeId,
    pub role: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_applied: Option<u64>,
    pub members: BTreeMap<NodeId, String>,
}

/// The answer to a client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ClientReply {
    /// Committed at log `index` and applied.
    Applied {
        index: u64,
        reply: Reply,
    },
    State(PoolSvcState),
    Status(Status),
    /// Not the leader: ask `leader` (unknown during an election).
    Redirect {
        leader: Option<NodeId>,
        addr: Option<String>,
    },
    Error(String),
    /// The answer to a lease request: every pool's map version (label →
    /// version) as applied on the leader after a linearizable read.
    Versions(BTreeMap<String, u32>),
}
