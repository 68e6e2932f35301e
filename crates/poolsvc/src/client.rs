//! A pool-service client: asks the leader it knows, follows redirects, tries
//! the other replicas when one does not answer, until a deadline.
//!
//! Client sessions (Raft thesis §6.3): every write is sent as
//! [`Command::Session`] with this client's random id and the next sequence
//! number, the same on every retry, so a write whose answer was lost (a
//! leader killed mid-request) and that is retried at the next leader is
//! applied once — a retried `OpenHandle` does not open a second handle.
//! One write at a time per client (`&mut self`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::msg::{ClientReply, ClientRequest, Rpc, RpcReply};
use crate::net::{Transport, CLIENT};
use crate::state::{Command, PoolSvcState, Reply};
use crate::{NodeId, SvcError};

/// A client of one pool-service group.
pub struct PoolClient<T> {
    replicas: BTreeMap<NodeId, String>,
    transport: T,
    leader: Option<NodeId>,
    /// Per-attempt timeout.
    pub rpc_timeout: Duration,
    /// Give up after this long.
    pub deadline: Duration,
    /// Pause before trying again when no leader is known.
    pub backoff: Duration,
    /// (client id, last sequence number) when writes go in sessions.
    session: Option<(u64, u64)>,
}

/// Which replica served a request, and after how many tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub by: NodeId,
    pub tries: u32,
}

impl<T: Transport> PoolClient<T> {
    pub fn new(replicas: BTreeMap<NodeId, String>, transport: T) -> Self {
        PoolClient {
            replicas,
            transport,
            leader: None,
            rpc_timeout: Duration::from_secs(2),
            deadline: Duration::from_secs(15),
            backoff: Duration::from_millis(50),
            session: Some((session_id(), 0)),
        }
    }

    /// Writes without a session (each retry may apply again): tests.
    pub fn without_session(mut self) -> Self {
        self.session = None;
        self
    }

    /// The leader this client last heard of.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// Send `req` to the leader, following redirects.
    pub async fn request(&mut self, req: ClientRequest) -> Result<(ClientReply, Served), SvcError> {
        let start = tokio::time::Instant::now();
        let ids: Vec<NodeId> = self.replicas.keys().copied().collect();
        let mut next = 0usize;
        let mut tries = 0u32;
        let mut last_err = String::from("no replica");
        while start.elapsed() < self.deadline {
            let to = match self.leader {
                Some(l) => l,
                None => {
                    let t = ids[next % ids.len()];
                    next += 1;
                    t
                }
            };
            let addr = self.replicas.get(&to).cloned().unwrap_or_default();
            tries += 1;
            match self
                .transport
                .call(
                    CLIENT,
                    to,
                    &addr,
                    Rpc::Client(req.clone()),
                    self.rpc_timeout,
                )
                .await
            {
                Ok(RpcReply::Client(ClientReply::Redirect { leader, addr })) => {
                    tracing::debug!("pool service: {to} redirects to {leader:?}");
                    if let (Some(l), Some(a)) = (leader, addr) {
                        self.replicas.entry(l).or_insert(a);
                    }
                    if leader.is_none() || leader == Some(to) {
                        self.leader = None;
                        tokio::time::sleep(self.backoff).await;
                    } else {
                        self.leader = leader;
                    }
                }
                Ok(RpcReply::Client(ClientReply::Error(e))) => {
                    // e.g. a leader that lost its quorum; try elsewhere
                    last_err = format!("{to}: {e}");
                    self.leader = None;
                    tokio::time::sleep(self.backoff).await;
                }
                Ok(RpcReply::Client(r)) => {
                    if !matches!(req, ClientRequest::Status) {
                        self.leader = Some(to);
                    }
                    return Ok((r, Served { by: to, tries }));
                }
                Ok(other) => {
                    return Err(SvcError::Wire(format!("{to}: unexpected reply {other:?}")))
                }
                Err(e) => {
                    last_err = e;
                    self.leader = None;
                    tokio::time::sleep(self.backoff).await;
                }
            }
        }
        Err(SvcError::Unreachable(last_err))
    }

    /// Replicate `cmd`; its reply once committed and applied.
    pub async fn write(&mut self, cmd: Command) -> Result<Reply, SvcError> {
        let cmd = match &mut self.session {
            Some((client, seq)) => {
                *seq += 1;
                Command::Session {
                    client: *client,
                    seq: *seq,
                    cmd: Box::new(cmd),
                }
            }
            None => cmd,
        };
        match self.request(ClientRequest::Write(cmd)).await? {
            (ClientReply::Applied { reply, .. }, _) => Ok(reply),
            (r, _) => Err(SvcError::Wire(format!("unexpected reply {r:?}"))),
        }
    }

    /// A linearizable read of the whole state (from the leader).
    pub async fn read(&mut self) -> Result<PoolSvcState, SvcError> {
        match self.request(ClientRequest::Read).await? {
            (ClientReply::State(s), _) => Ok(s),
            (r, _) => Err(SvcError::Wire(format!("unexpected reply {r:?}"))),
        }
    }

    /// Send `req` to replica `id` only (no redirects, no retries).
    pub async fn call_one(&self, id: NodeId, req: ClientRequest) -> Result<ClientReply, String> {
        let addr = self
            .replicas
            .get(&id)
            .ok_or_else(|| format!("no replica {id}"))?;
        match self
            .transport
            .call(CLIENT, id, addr, Rpc::Client(req), self.rpc_timeout)
            .await?
        {
            RpcReply::Client(r) => Ok(r),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    /// Every replica's own status (those that answer within the RPC timeout).
    pub async fn statuses(&self) -> BTreeMap<NodeId, Result<crate::msg::Status, String>> {
        let mut out = BTreeMap::new();
        for (id, addr) in &self.replicas {
            let r = match self
                .transport
                .call(
                    CLIENT,
                    *id,
                    addr,
                    Rpc::Client(ClientRequest::Status),
                    self.rpc_timeout,
                )
                .await
            {
                Ok(RpcReply::Client(ClientReply::Status(s))) => Ok(s),
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) => Err(e),
            };
            out.insert(*id, r);
        }
        out
    }
}

/// A client for synchronous callers (the CLI): a current-thread runtime and a
/// [`PoolClient`] over TCP.
pub struct BlockingClient {
    rt: tokio::runtime::Runtime,
    pub inner: PoolClient<crate::net::TcpTransport>,
}

impl BlockingClient {
    pub fn new(replicas: BTreeMap<NodeId, String>) -> Result<BlockingClient, SvcError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SvcError::Raft(e.to_string()))?;
        Ok(BlockingClient {
            rt,
            inner: PoolClient::new(replicas, crate::net::TcpTransport::new()),
        })
    }

    pub fn request(&mut self, req: ClientRequest) -> Result<(ClientReply, Served), SvcError> {
        self.rt.block_on(self.inner.request(req))
    }

    pub fn write(&mut self, cmd: Command) -> Result<Reply, SvcError> {
        self.rt.block_on(self.inner.write(cmd))
    }

    pub fn read(&mut self) -> Result<PoolSvcState, SvcError> {
        self.rt.block_on(self.inner.read())
    }

    pub fn statuses(&self) -> BTreeMap<NodeId, Result<crate::msg::Status, String>> {
        self.rt.block_on(self.inner.statuses())
    }

    pub fn call_one(&self, id: NodeId, req: ClientRequest) -> Result<ClientReply, String> {
        self.rt.block_on(self.inner.call_one(id, req))
    }
}

/// A random client id (std's per-process random hash keys, the clock, the pid).
fn session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}
