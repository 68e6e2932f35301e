//! Running a replica inside an engine process: its own thread with a tokio
//! runtime (the engine's I/O path is not async), a TCP listener, the store
//! in a redb file in the engine's data directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::health::{Monitor, MonitorConfig};
use crate::msg::{ClientReply, Rpc, RpcReply};
use crate::net::{TcpTransport, Transport};
use crate::rebuild::{Driver, RebuildConfig};
use crate::server::serve_tcp;
use crate::service::PoolService;
use crate::store::Store;
use crate::{NodeId, SvcError};

/// Where and how a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub id: NodeId,
    /// TCP address the replica listens on (must be its own entry in `members`).
    pub listen: String,
    /// Every replica, id → address.
    pub members: BTreeMap<NodeId, String>,
    /// Make the first membership if this replica's log is empty (one replica
    /// of a new group does it).
    pub initialize: bool,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// The engines' object-RPC addresses by rank (= fault domain): when this
    /// replica leads, it probes them and marks dead ones DOWN, then EXCLUDED
    /// ([`crate::health`]). Empty: no monitoring.
    pub engines: BTreeMap<NodeId, String>,
    pub monitor: MonitorConfig,
    /// Rebuild and reintegration, driven by the leader next to its monitor
    /// ([`crate::rebuild`]; only with `engines`).
    pub rebuild: RebuildConfig,
    /// The map versions of the engine hosting this replica: raised as map
    /// changes apply here, so the engine refuses stale-map object I/O.
    pub map_versions: Option<Arc<obj::engine::MapVersions>>,
    /// The engine's lease on its map (the fence, with `map_versions`): it
    /// serves versioned object I/O only within this long of a leader's
    /// answer to its lease request (renewed every `lease / 4`). `None`: no
    /// fence. Keep it below the monitor's `dead_after` minus a probe
    /// interval and timeout, so an engine cut off from the leader fences
    /// itself before the leader can mark it DOWN ([`Replica::spawn`] refuses
    /// a longer one when it monitors engines).
    pub lease: Option<Duration>,
}

/// A replica running on its own thread; dropped or [`Replica::stop`]ped, it
/// shuts down (its storage stays).
pub struct Replica {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Parse `0=127.0.0.60:10601,1=...` into members.
pub fn parse_members(s: &str) -> Result<BTreeMap<NodeId, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (id, addr) = p
                .split_once('=')
                .ok_or_else(|| format!("bad member {p:?} (want ID=ADDR)"))?;
            let id: NodeId = id
                .trim()
                .parse()
                .map_err(|_| format!("bad member id in {p:?}"))?;
            Ok((id, addr.trim().to_string()))
        })
        .collect()
}

impl Replica {
    /// Open the store `db_path` and start the replica; returns once it listens.
    pub fn spawn(cfg: ReplicaConfig, db_path: &Path) -> Result<Replica, SvcError> {
        if !cfg
            .engines
            .keys()
            .copied()
            .eq(0..cfg.engines.len() as NodeId)
        {
            return Err(SvcError::Raft("engine ranks must be 0..n".into()));
        }
        if cfg.members.get(&cfg.id) != Some(&cfg.listen) {
            return Err(SvcError::Raft(format!(
                "replica {} listens on {} but the members say {:?}",
                cfg.id,
                cfg.listen,
                cfg.members.get(&cfg.id)
            )));
        }
        if let Some(l) = cfg.lease {
            let d = cfg.monitor.detector;
            let bound = d
                .dead_after
                .saturating_sub(d.interval + probe_timeout(&cfg.monitor));
            if l.is_zero() || (!cfg.engines.is_empty() && l >= bound) {
                return Err(SvcError::Raft(format!(
                    "lease {l:?}: must be > 0 and below the monitor's dead_after minus a probe \
                     interval and timeout ({bound:?}), or an engine cut off could still serve \
                     after the leader marked it DOWN"
                )));
            }
        }
        if cfg.rebuild.return_from_down {
            tracing::info!(
                "a DOWN engine that answers again is reintegrated at once (DOWN -> UP -> UP-IN); \
                 a restarted one is known by its new incarnation (docs/obj-dist.md \"Restarts\")"
            );
        }
        let mut store = Store::open(db_path)?;
        if let Some(m) = &cfg.map_versions {
            store = store.with_map_versions(m.clone());
            if let Some(l) = cfg.lease {
                m.enable_lease(l);
            }
        }
        // two workers: the Raft core commits to redb synchronously (fsync),
        // and on one thread every such commit also held the TCP server (status
        // and client requests), the health monitor and the lease task — on a
        // slow disk long enough for clients' 300 ms status calls to time out
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("pool-svc-{}-rt", cfg.id))
            .enable_all()
            .build()
            .map_err(|e| SvcError::Raft(e.to_string()))?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), SvcError>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("pool-svc-{}", cfg.id))
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::bind(&cfg.listen).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(SvcError::Unreachable(format!(
                                "bind {}: {e}",
                                cfg.listen
                            ))));
                            return;
                        }
                    };
                    let config = crate::raft_config(
                        cfg.heartbeat_ms,
                        cfg.election_min_ms,
                        cfg.election_max_ms,
                    );
                    let svc = match PoolService::start(cfg.id, config, store, TcpTransport::new())
                        .await
                    {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let server = tokio::spawn(serve_tcp(listener, svc.clone()));
                    let monitor = if cfg.engines.is_empty() {
                        None
                    } else {
                        Some(tokio::spawn(monitor_engines(
                            svc.clone(),
                            cfg.engines.clone(),
                            cfg.monitor,
                            cfg.rebuild,
                            cfg.lease,
                        )))
                    };
                    let lease = match (&cfg.map_versions, cfg.lease) {
                        (Some(m), Some(l)) => Some(tokio::spawn(keep_lease(
                            svc.clone(),
                            cfg.members.clone(),
                            m.clone(),
                            l,
                        ))),
                        _ => None,
                    };
                    if cfg.initialize {
                        if let Err(e) = svc.initialize(&cfg.members).await {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    }
                    tracing::info!(
                        "pool service replica {} on {} ({} members)",
                        cfg.id,
                        cfg.listen,
                        cfg.members.len()
                    );
                    let _ = ready_tx.send(Ok(()));
                    let _ = stop_rx.await;
                    server.abort();
                    if let Some(m) = monitor {
                        m.abort();
                    }
                    if let Some(l) = lease {
                        l.abort();
                    }
                    svc.shutdown().await;
                })
            })
            .map_err(|e| SvcError::Raft(e.to_string()))?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Replica {
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SvcError::Raft(
                "the replica did not start within 10 s".into(),
            )),
        }
    }

    /// Shut the replica down and wait for its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How long the monitor waits for one probe.
fn probe_timeout(cfg: &MonitorConfig) -> Duration {
    cfg.detector.interval.max(Duration::from_millis(100))
}

/// The engine's lease (the fence, `obj::engine::MapVersions`): every
/// `lease / 4`, ask the leader — this replica itself when it leads, else the
/// leader it follows, through the pool-service transport (cut like Raft
/// messages by fault injection) — for the current map versions after a
/// linearizable read; an answer renews the lease from when the request was
/// sent. No answer within the lease (cut off, no leader, a leader without a
/// quorum) renews nothing: the lease lapses and the engine refuses versioned
/// object I/O until an answer comes.
///
/// The request names the engine's incarnation: a leader that has another one
/// (or none) recorded for this rank first replicates the new one — a restart
/// sets the engine DOWN — and only then answers, so a restarted engine's
/// first lease (its fence starts closed) comes with a map in which it is
/// DOWN: it never serves as if it had not missed anything.
async fn keep_lease(
    svc: PoolService,
    members: BTreeMap<NodeId, String>,
    versions: Arc<obj::engine::MapVersions>,
    lease: Duration,
) {
    let every = (lease / 4).max(Duration::from_millis(5));
    let transport = TcpTransport::new();
    let mut lapsed_logged = false;
    // this replica's engine: rank = replica id (as `dpustack system` lays
    // engines out)
    let me = svc.id as u32;
    loop {
        let sent = std::time::Instant::now();
        let st = svc.status();
        let reply = match st.leader {
            Some(l) if l == svc.id => {
                tokio::time::timeout(lease, svc.lease(Some((me, versions.incarnation()))))
                    .await
                    .ok()
            }
            Some(l) => match members.get(&l) {
                Some(addr) => match transport
                    .call(
                        svc.id,
                        l,
                        addr,
                        Rpc::Lease {
                            from: svc.id,
                            incarnation: Some(versions.incarnation()),
                        },
                        lease,
                    )
                    .await
                {
                    Ok(RpcReply::Client(r)) => Some(r),
                    _ => None,
                },
                None => None,
            },
            None => None,
        };
        match reply {
            Some(ClientReply::Versions(v)) => {
                versions.renew_lease(sent, v.iter().map(|(k, v)| (k.as_str(), *v)));
                if lapsed_logged && versions.lease_valid(std::time::Instant::now()) == Some(true) {
                    tracing::info!("pool map lease renewed: object I/O served again");
                    lapsed_logged = false;
                }
            }
            other => {
                tracing::debug!("lease request: {other:?}");
            }
        }
        if !lapsed_logged && versions.lease_valid(std::time::Instant::now()) == Some(false) {
            tracing::warn!(
                "pool map lease lapsed (no answer from a pool-service leader within {lease:?}): \
                 versioned object I/O refused until the map is fetched again"
            );
            lapsed_logged = true;
        }
        let spent = sent.elapsed();
        if spent < every {
            tokio::time::sleep(every - spent).await;
        }
    }
}

/// Probe one engine (an object-RPC ping on a fresh connection): `None` no
/// answer, else the incarnation it named (`Some(None)`: none).
fn ping_engine(addr: &str, timeout: Duration) -> Option<Option<u64>> {
    if obj::fault::drops_to_addr(addr) {
        std::thread::sleep(timeout); // a cut link (fault injection): no answer
        return None;
    }
    match obj::client::Client::connect_with(addr, timeout) {
        Ok(c) => c.ping_incarnation(None).and_then(|p| p.get()).ok(),
        Err(_) => None,
    }
}

/// While this replica leads: probe the engines, replicate what the monitor
/// decides (DOWN, EXCLUDED). A replica that stops leading drops its monitor;
/// one that becomes leader starts a fresh one (every engine heard "now").
async fn monitor_engines(
    svc: PoolService,
    engines: BTreeMap<NodeId, String>,
    cfg: MonitorConfig,
    rebuild: RebuildConfig,
    lease: Option<Duration>,
) {
    let addrs: Vec<String> = engines.into_values().collect();
    let mut driver: Option<Driver> = None;
    let tick = (cfg.detector.interval / 2).max(Duration::from_millis(10));
    let timeout = probe_timeout(&cfg);
    let mut mon: Option<Monitor> = None;
    loop {
        tokio::time::sleep(tick).await;
        if svc.status().role != "leader" {
            mon = None;
            if let Some(mut d) = driver.take() {
                d.detach();
            }
            continue;
        }
        let m = mon.get_or_insert_with(|| {
            tracing::info!(
                "pool service: leader now, monitoring {} engines",
                addrs.len()
            );
            Monitor::new(cfg, addrs.len(), std::time::Instant::now()).with_lease(lease)
        });
        {
            // clients' reports (probe now) and the leases this replica granted
            let mut h = svc.hints.lock().unwrap_or_else(|e| e.into_inner());
            for r in h.reports.drain(..) {
                m.suspect(r as usize);
            }
            for (&r, &at) in &h.lease_grants {
                m.lease_granted(r, at);
            }
        }
        let due = m.probes_due(std::time::Instant::now());
        let probes: Vec<_> = due
            .into_iter()
            .map(|r| {
                let a = addrs[r].clone();
                (
                    r,
                    tokio::task::spawn_blocking(move || ping_engine(&a, timeout)),
                )
            })
            .collect();
        for (r, p) in probes {
            if let Ok(Ok(Some(inc))) = tokio::time::timeout(timeout * 2, p).await {
                m.heard_incarnation(r, std::time::Instant::now(), inc);
            }
        }
        let cmds = m.step(std::time::Instant::now(), &svc.local_state());
        for c in cmds {
            tracing::warn!("pool service: {c:?}");
            if let Err(e) = svc.raft.client_write(c).await {
                tracing::warn!("pool service: the monitor's change was not replicated: {e}");
                break;
            }
        }
        driver
            .get_or_insert_with(|| Driver::new(rebuild, addrs.clone()))
            .poll(&svc, m)
            .await;
    }
}
