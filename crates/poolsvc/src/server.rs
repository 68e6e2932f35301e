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
                let reply = svc.handle(rpc).await;
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
