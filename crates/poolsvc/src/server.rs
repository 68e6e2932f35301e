//! The TCP server of a replica: one task per connection, one reply per
//! request (framing in [`crate::net`]).

use std::time::Duration;

use tokio::net::TcpListener;

use crate::msg::Rpc;
use crate::net::{read_frame, write_frame};
use crate::service::PoolService;

/// Serve replicas and clients on `listener` until the task is dropped.
pub async fn serve_tcp(listener: TcpListener, svc: PoolService) {
    loop {
        let (mut s, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("pool service accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = s.set_nodelay(true);
        let svc = svc.clone();
        tokio::spawn(async move {
            loop {
                let body = match read_frame(&mut s).await {
                    Ok(Some(b)) => b,
                    Ok(None) => return,
                    Err(e) => {
                        tracing::debug!("pool service connection from {peer}: {e}");
                        return;
                    }
                };
                let rpc: Rpc = match serde_json::from_slice(&body) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("pool service: bad message from {peer}: {e}");
                        return;
                    }
                };
                // fault injection (obj::fault): a request from a cut peer
                // is lost; one to a peer we must not send to is applied and
                // its answer lost
                let from = sender(&rpc);
                if from.is_some_and(obj::fault::drops_from) {
                    return;
                }
                let reply = svc.handle(rpc).await;
                if from.is_some_and(obj::fault::drops_to) {
                    return;
                }
                let out = match serde_json::to_vec(&reply) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::error!("pool service: reply does not encode: {e}");
                        return;
                    }
                };
                if write_frame(&mut s, &out).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The replica that sent a Raft message (its vote names it); `None` for clients.
fn sender(rpc: &Rpc) -> Option<crate::NodeId> {
    match rpc {
        Rpc::Append(r) => r.vote.leader_id().voted_for(),
        Rpc::Vote(r) => r.vote.leader_id().voted_for(),
        Rpc::Snapshot(r) => r.vote.leader_id().voted_for(),
        Rpc::Lease { from, .. } => Some(*from),
        Rpc::Client(_) => None,
    }
}
