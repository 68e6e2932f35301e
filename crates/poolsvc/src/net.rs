//! openraft's network over a [`Transport`] (how a replica reaches another),
//! and the TCP transport with its framing.
//!
//! TCP framing: a 4-byte big-endian length, then that many bytes of JSON
//! ([`Rpc`] one way, [`RpcReply`] back), one reply per request, requests on
//! a connection one at a time. A frame longer than [`MAX_FRAME`] or that does
//! not decode is a typed error and the connection is closed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::msg::{Rpc, RpcReply};
use crate::{NodeId, SvcError, TypeConfig};

/// The largest frame accepted (a snapshot of the whole state is one frame).
pub const MAX_FRAME: usize = 64 << 20;

/// How a replica reaches another (a simulated network in tests, TCP between
/// engines). `from` is the caller's id (a client uses [`CLIENT`]).
pub trait Transport: Clone + Send + Sync + 'static {
    fn call(
        &self,
        from: NodeId,
        to: NodeId,
        addr: &str,
        rpc: Rpc,
        timeout: Duration,
    ) -> impl Future<Output = Result<RpcReply, String>> + Send;
}

/// The `from` id clients use.
pub const CLIENT: NodeId = u64::MAX;

/// openraft's network factory for replica `id`.
pub struct Network<T> {
    id: NodeId,
    transport: T,
}

impl<T: Transport> Network<T> {
    pub fn new(id: NodeId, transport: T) -> Self {
        Network { id, transport }
    }
}

/// openraft's connection to one peer.
pub struct Peer<T> {
    from: NodeId,
    to: NodeId,
    addr: String,
    transport: T,
}

impl<T: Transport> RaftNetworkFactory<TypeConfig> for Network<T> {
    type Network = Peer<T>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer<T> {
        Peer {
            from: self.id,
            to: target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
        }
    }
}

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl<T: Transport> Peer<T> {
    async fn call<E: std::error::Error>(
        &self,
        rpc: Rpc,
        opt: &RPCOption,
    ) -> Result<RpcReply, RpcErr<E>> {
        self.transport
            .call(self.from, self.to, &self.addr, rpc, opt.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::from(AnyError::error(e))))
    }
}

fn unexpected<E: std::error::Error>(what: &str) -> RpcErr<E> {
    RPCError::Network(NetworkError::from(AnyError::error(format!(
        "unexpected reply to {what}"
    ))))
}

impl<T: Transport> RaftNetwork<TypeConfig> for Peer<T> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        match self.call(Rpc::Append(rpc), &option).await? {
            RpcReply::Append(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
            }
            _ => Err(unexpected("append")),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        match self.call(Rpc::Snapshot(rpc), &option).await? {
            RpcReply::Snapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
            }
            _ => Err(unexpected("install_snapshot")),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        match self.call(Rpc::Vote(rpc), &option).await? {
            RpcReply::Vote(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            _ => Err(unexpected("vote")),
        }
    }
}

/// Read one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame(s: &mut TcpStream) -> Result<Option<Vec<u8>>, SvcError> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(SvcError::Unreachable(e.to_string())),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(SvcError::Wire(format!("frame of {n} bytes > {MAX_FRAME}")));
    }
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .await
        .map_err(|e| SvcError::Unreachable(e.to_string()))?;
    Ok(Some(buf))
}

/// Write one frame.
pub async fn write_frame(s: &mut TcpStream, body: &[u8]) -> Result<(), SvcError> {
    if body.len() > MAX_FRAME {
        return Err(SvcError::Wire(format!(
            "frame of {} bytes > {MAX_FRAME}",
            body.len()
        )));
    }
    let mut b = Vec::with_capacity(4 + body.len());
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(body);
    s.write_all(&b)
        .await
        .map_err(|e| SvcError::Unreachable(e.to_string()))
}

/// TCP transport: one pooled connection per address, reused while it works.
#[derive(Clone, Default)]
pub struct TcpTransport {
    idle: Arc<tokio::sync::Mutex<HashMap<String, Vec<TcpStream>>>>,
}

impl TcpTransport {
    pub fn new() -> TcpTransport {
        TcpTransport::default()
    }

    async fn exchange(&self, addr: &str, body: &[u8]) -> Result<RpcReply, String> {
        let pooled = self.idle.lock().await.get_mut(addr).and_then(|v| v.pop());
        let mut s = match pooled {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("{addr}: {e}"))?;
                let _ = s.set_nodelay(true);
                s
            }
        };
        write_frame(&mut s, body).await.map_err(|e| e.to_string())?;
        let reply = read_frame(&mut s)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{addr}: connection closed"))?;
        let r: RpcReply =
            serde_json::from_slice(&reply).map_err(|e| format!("{addr}: bad reply: {e}"))?;
        self.idle
            .lock()
            .await
            .entry(addr.to_string())
            .or_default()
            .push(s);
        Ok(r)
    }
}

impl Transport for TcpTransport {
    async fn call(
        &self,
        from: NodeId,
        to: NodeId,
        addr: &str,
        rpc: Rpc,
        timeout: Duration,
    ) -> Result<RpcReply, String> {
        if from != CLIENT && obj::fault::drops_to(to) {
            // a cut link (fault injection, obj::fault): the message is lost
            tokio::time::sleep(timeout).await;
            return Err(format!("{addr}: timed out after {timeout:?} (link cut)"));
        }
        let body = serde_json::to_vec(&rpc).map_err(|e| e.to_string())?;
        match tokio::time::timeout(timeout, self.exchange(addr, &body)).await {
            Ok(r) => r,
            Err(_) => Err(format!("{addr}: timed out after {timeout:?}")),
        }
    }
}
