//! One pool-service replica: its openraft node and storage, and its answers
//! to other replicas' RPCs and to clients.

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use openraft::{BasicNode, ServerState};

use crate::msg::{ClientReply, ClientRequest, Rpc, RpcReply, Status};
use crate::net::{Network, Transport};
use crate::state::{Command, PoolSvcState};
use crate::store::Store;
use crate::{NodeId, Raft, SvcError, TypeConfig};

/// A running replica.
#[derive(Clone)]
pub struct PoolService {
    pub id: NodeId,
    pub raft: Raft,
    pub store: Store,
    /// What this replica's leader-side monitor learns from requests
    /// (clients' reports, lease grants).
    pub hints: Arc<std::sync::Mutex<Hints>>,
}

/// What the monitor ([`crate::health::Monitor`]) learns from requests this
/// replica answers while it leads.
#[derive(Debug, Default)]
pub struct Hints {
    /// Ranks clients reported unreachable, not yet seen by the monitor.
    pub reports: Vec<u32>,
    /// Reports received so far.
    pub reported: u64,
    /// When this replica last granted each engine a lease (the engine's
    /// lease runs at most `lease` past it).
    pub lease_grants: BTreeMap<u32, std::time::Instant>,
}

fn redirect(f: ForwardToLeader<NodeId, BasicNode>) -> ClientReply {
    ClientReply::Redirect {
        leader: f.leader_id,
        addr: f.leader_node.map(|n| n.addr),
    }
}

impl PoolService {
    /// Start replica `id` over `store`, talking to the others through `transport`.
    pub async fn start<T: Transport>(
        id: NodeId,
        config: openraft::Config,
        store: Store,
        transport: T,
    ) -> Result<PoolService, SvcError> {
        let config = Arc::new(
            config
                .validate()
                .map_err(|e| SvcError::Raft(e.to_string()))?,
        );
        let (log, sm) = openraft::storage::Adaptor::<TypeConfig, Store>::new(store.clone());
        let raft = Raft::new(id, config, Network::new(id, transport), log, sm)
            .await
            .map_err(|e| SvcError::Raft(e.to_string()))?;
        Ok(PoolService {
            id,
            raft,
            store,
            hints: Arc::default(),
        })
    }

    /// Make the first membership (all `members`, id → address). Only on a
    /// pristine replica; a replica that already has a log answers `Ok` and
    /// changes nothing.
    pub async fn initialize(&self, members: &BTreeMap<NodeId, String>) -> Result<(), SvcError> {
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, a)| (*id, BasicNode { addr: a.clone() }))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(SvcError::Raft(e.to_string())),
        }
    }

    /// This replica's view: role, term, leader, applied index.
    pub fn status(&self) -> Status {
        let m = self.raft.metrics().borrow().clone();
        Status {
            id: self.id,
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .to_string(),
            term: m.current_term,
            leader: m.current_leader,
            last_applied: m.last_applied.map(|l| l.index),
            members: m
                .membership_config
                .nodes()
                .map(|(id, n)| (*id, n.addr.clone()))
                .collect(),
        }
    }

    /// The state as applied here (not linearizable: may lag the leader).
    pub fn local_state(&self) -> PoolSvcState {
        self.store.applied().state
    }

    /// Answer one message.
    pub async fn handle(&self, rpc: Rpc) -> RpcReply {
        match rpc {
            Rpc::Append(r) => RpcReply::Append(self.raft.append_entries(r).await),
            Rpc::Vote(r) => RpcReply::Vote(self.raft.vote(r).await),
            Rpc::Snapshot(r) => RpcReply::Snapshot(self.raft.install_snapshot(r).await),
            Rpc::Client(c) => RpcReply::Client(self.client(c).await),
            Rpc::Lease { from, incarnation } => {
                RpcReply::Client(self.lease(incarnation.map(|i| (from as u32, i))).await)
            }
        }
    }

    /// A lease request (see [`Rpc::Lease`]): on the leader, after a
    /// linearizable read, every pool's map version; elsewhere a redirect.
    /// `engine`: the asking engine's (rank, incarnation): one the state does
    /// not record is replicated first (a restart: the engine DOWN), so the
    /// versions answered include that change.
    pub async fn lease(&self, engine: Option<(u32, u64)>) -> ClientReply {
        match self.raft.ensure_linearizable().await {
            Ok(_) => {
                if let Some((rank, incarnation)) = engine {
                    if self.local_state().incarnations.get(&rank) != Some(&incarnation) {
                        let cmd = Command::EngineIncarnation { rank, incarnation };
                        match self.raft.client_write(cmd).await {
                            Ok(_) => {}
                            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                                return redirect(f)
                            }
                            Err(e) => return ClientReply::Error(e.to_string()),
                        }
                    }
                }
                if let Some((rank, _)) = engine {
                    // now is after the engine sent its request: its lease
                    // ends no later than now + lease
                    self.hints
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .lease_grants
                        .insert(rank, std::time::Instant::now());
                }
                ClientReply::Versions(
                    self.local_state()
                        .pools
                        .iter()
                        .map(|(label, p)| (label.clone(), p.map().version()))
                        .collect(),
                )
            }
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => redirect(f),
            Err(e) => ClientReply::Error(e.to_string()),
        }
    }

    async fn client(&self, req: ClientRequest) -> ClientReply {
        match req {
            ClientRequest::Write(cmd) => match self.raft.client_write(cmd).await {
                Ok(r) => ClientReply::Applied {
                    index: r.log_id.index,
                    reply: r.data,
                },
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => redirect(f),
                Err(e) => ClientReply::Error(e.to_string()),
            },
            ClientRequest::Read => match self.raft.ensure_linearizable().await {
                // the leader confirmed its leadership with a quorum and has
                // applied everything committed before the read began
                Ok(_) => ClientReply::State(self.local_state()),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => redirect(f),
                Err(e) => ClientReply::Error(e.to_string()),
            },
            ClientRequest::Status => ClientReply::Status(self.status()),
            ClientRequest::ReportUnreachable { rank } => {
                let st = self.status();
                if st.role != "leader" {
                    let addr = st.leader.and_then(|l| st.members.get(&l).cloned());
                    return ClientReply::Redirect {
                        leader: st.leader,
                        addr,
                    };
                }
                tracing::warn!(
                    rank,
                    "pool service: a client reports engine {rank} unreachable: probing it"
                );
                let mut h = self.hints.lock().unwrap_or_else(|e| e.into_inner());
                h.reports.push(rank);
                h.reported += 1;
                drop(h);
                ClientReply::Status(st)
            }
            ClientRequest::Faults { drop_to, drop_from } => {
                match obj::fault::set(obj::fault::Rules {
                    drop_to: drop_to.into_iter().collect(),
                    drop_from: drop_from.into_iter().collect(),
                }) {
                    Ok(()) => ClientReply::Status(self.status()),
                    Err(e) => ClientReply::Error(e.to_string()),
                }
            }
        }
    }

    /// Stop the Raft node (its storage stays).
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}
