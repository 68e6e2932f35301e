//! The JSON-RPC server on a Unix socket: an accept thread and a thread per
//! connection (control plane: few clients, no hot path). A connection that never
//! sends holds only its own thread; connections beyond the bound
//! ([`MAX_CONNECTIONS`] by default) are closed at once and counted
//! ([`RpcServer::refused`]); a connection idle for [`IDLE_TIMEOUT`] is closed.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::jsonrpc::{Dispatch, Framer, Next, DEFAULT_LIMIT};
use crate::Error;

/// SPDK apps use /var/tmp/spdk.sock; ours.
pub const DEFAULT_SOCKET: &str = "/var/tmp/dpustack.sock";
/// Concurrent connections served by default ([`RpcServer::start_with`] sets
/// another bound); more are closed at once.
pub const MAX_CONNECTIONS: usize = 4096;
/// A connection without a byte for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A running RPC server; stops (and removes its socket) on `stop` or drop.
pub struct RpcServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    live: Arc<AtomicUsize>,
    refused: Arc<AtomicU64>,
}

impl std::fmt::Debug for RpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("path", &self.path)
            .finish()
    }
}

impl RpcServer {
    /// Binds `path` (mode 0600; a stale socket nobody listens on is replaced, a live
    /// one is [`Error::InUse`]) and serves `d`.
    pub fn start(path: &Path, d: Arc<dyn Dispatch + Send + Sync>) -> Result<RpcServer, Error> {
        Self::start_with(path, d, MAX_CONNECTIONS)
    }

    /// [`start`](Self::start) serving at most `max_connections` clients at once.
    pub fn start_with(
        path: &Path,
        d: Arc<dyn Dispatch + Send + Sync>,
        max_connections: usize,
    ) -> Result<RpcServer, Error> {
        let name = path.display().to_string();
        let sock_err = |source| Error::Socket {
            path: name.clone(),
            source,
        };
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(Error::InUse(name));
            }
            std::fs::remove_file(path).map_err(sock_err)?;
        }
        let l = UnixListener::bind(path).map_err(sock_err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(sock_err)?;
        l.set_nonblocking(true).map_err(sock_err)?;
        info!(path = %name, "JSON-RPC server listening");
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let bound = Bound {
            max: max_connections,
            live: live.clone(),
            refused: refused.clone(),
        };
        let stop2 = stop.clone();
        let accept = std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || accept_loop(l, d, stop2, bound))
            .map_err(sock_err)?;
        Ok(RpcServer {
            path: path.to_path_buf(),
            stop,
            accept: Some(accept),
            live,
            refused,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Connections being served now.
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
    /// Connections closed at accept because the bound was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }
    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The accept thread's bound on live connections.
struct Bound {
    max: usize,
    live: Arc<AtomicUsize>,
    refused: Arc<AtomicU64>,
}

fn accept_loop(
    l: UnixListener,
    d: Arc<dyn Dispatch + Send + Sync>,
    stop: Arc<AtomicBool>,
    bound: Bound,
) {
    let Bound { max, live, refused } = bound;
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                if live.load(Ordering::Relaxed) >= max {
                    refused.fetch_add(1, Ordering::Relaxed);
                    warn!(max, "RPC: too many connections, closing a new one");
                    drop(s);
                    continue;
                }
                live.fetch_add(1, Ordering::Relaxed);
                let (d, stop, live) = (d.clone(), stop.clone(), live.clone());
                match std::thread::Builder::new()
                    .name("rpc-conn".into())
                    .spawn(move || {
                        serve_conn(s, &*d, &stop);
                        live.fetch_sub(1, Ordering::Relaxed);
                    }) {
                    Ok(t) => conns.push(t),
                    Err(e) => warn!(%e, "RPC: cannot start a connection thread"),
                }
                conns.retain(|t| !t.is_finished());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                conns.retain(|t| !t.is_finished());
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                warn!(%e, "RPC accept");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    for t in conns {
        let _ = t.join();
    }
}

fn serve_conn(mut s: UnixStream, d: &dyn Dispatch, stop: &AtomicBool) {
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(Duration::from_millis(100)))
            .is_err()
    {
        return;
    }
    let mut f = Framer::new(DEFAULT_LIMIT);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                last = Instant::now();
                out.clear();
                let next = f.feed(&buf[..n], d, &mut out);
                if !out.is_empty() && s.write_all(&out).is_err() {
                    return;
                }
                if next == Next::Close {
                    debug!("RPC: closing a connection after a framing error");
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if last.elapsed() > IDLE_TIMEOUT {
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
