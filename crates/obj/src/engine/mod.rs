//! The object-store engine (DAOS's `daos_engine` on one node).
//!
//! ```text
//!  clients ──TCP──► obj-net thread ──(object I/O, by OID)──► obj-tgt0 .. obj-tgtN-1
//!                    (frames, routing)                       (own their shards: one
//!                          │                                   ObjectStore per pool)
//!                          └──(pool/cont/snapshot ops)──► obj-mgmt ──fan-out──┘
//!  replies: targets / mgmt ──ReplySender (channel + wake pipe)──► obj-net ──► client
//! ```
//! - N targets (one per core by default), each a thread owning its shard of
//!   every pool; an object of one group (`S1`, `RP_<r>G1`) lives on the
//!   target [`route`] picks from its OID, so all of its dkeys, akeys and
//!   extents are on one store; a striped object (`SX`, `S<n>`, `..G<n>`)
//!   has each dkey on the target [`crate::rpc::msg::stripe_of`] picks (a
//!   dkey with its akeys and extents on one store). No lock is taken on the
//!   data path.
//! - Group commit on each target (see [`target`]): replies leave only after
//!   the store's `commit`.
//! - The management thread ([`mgmt`]) owns pool/container metadata and
//!   handles; targets learn container handles when they are opened, so an
//!   unknown or closed handle is refused by the target itself.
//! - Handles opened by a connection are closed when it goes away (a client
//!   that dies mid-RPC leaves nothing behind; its replies are dropped).

pub mod backend;
pub mod dtx;
pub mod dtx_log;
pub mod dtx_service;
pub mod hlc;
pub mod map_version;
pub mod mgmt;
pub mod target;
pub mod target_net;
pub mod vos_backend;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tracing::{info, warn};

use crate::rpc::core::ServerConn;
use crate::rpc::msg::{is_striped, list_obj_prefix, object_target, route_prefix, routing_dkey};
use crate::rpc::rdma::RdmaServer;
use crate::rpc::tcp::{ConnId, Dispatch, TcpServer};
use crate::rpc::{HeaderRepr, Opcode, Reply, Status};
use crate::types::StoreError;

pub use backend::StoreBackend;
use dtx_service::{DtxEvent, DtxService, HeldKeys};
use hlc::SharedHlc;
pub use map_version::MapVersions;
pub use mgmt::AggregationPolicy;
use mgmt::{Meta, Mgmt, MgmtMsg};
use target::{Target, TargetMsg, TargetTx};
use target_net::{TargetNet, TargetWaker};

/// Errors starting an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("starting engine threads: {0}")]
    Thread(std::io::Error),
    #[error("opening the recorded pools: {0}")]
    OpenPools(Status),
    #[error("RPC over RDMA: {0}")]
    Rdma(#[from] crate::rpc::rdma::RdmaError),
}

/// How to run an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Targets (poller threads); 0 = one per available core. An existing
    /// data directory keeps the count it was created with.
    pub targets: usize,
    /// Also serve RPC over RDMA (soft RoCE device on this IP, RDMA CM on
    /// this port).
    pub rdma_listen: Option<SocketAddr>,
    /// When the engine runs VOS aggregation in the background.
    pub aggregation: AggregationPolicy,
}

pub use crate::rpc::msg::route;

/// The wire status of a store error.
pub fn status_of(e: &StoreError) -> Status {
    match e {
        StoreError::NoContainer(_) | StoreError::NoSnapshot(_) => Status::NonExist,
        StoreError::ContainerExists(_) => Status::Exists,
        StoreError::Oid(_) | StoreError::InvalidArg(_) | StoreError::BadEpoch(..) => {
            Status::Invalid
        }
        StoreError::TooLarge { .. } | StoreError::BufferTooSmall { .. } => Status::RecTooBig,
        StoreError::NoSpace { .. } => Status::NoSpace,
        StoreError::Corrupt(_) | StoreError::Bdev(_) | StoreError::Index(_) => Status::Io,
    }
}

/// Requests the engine's network threads received, by opcode, and the bulk
/// bytes that came with them (relaxed atomics; read by the management plane);
/// the connected clients, their bound and its refusals.
#[derive(Debug, Default)]
pub struct OpCounters {
    counts: [std::sync::atomic::AtomicU64; OP_SLOTS],
    bulk_in: std::sync::atomic::AtomicU64,
    /// Clients over TCP and RDMA: bound (`max_clients`), connected, refused.
    pub clients: Arc<crate::rpc::limit::ClientLimit>,
    /// Requests received on the targets' own connections (run to
    /// completion; also counted by opcode above).
    target_requests: AtomicU64,
    /// Connections to the targets' own listeners, open now.
    target_conns: AtomicUsize,
    /// Object I/O refused by a target that does not own the object.
    wrong_target: AtomicU64,
}

/// Opcodes with a counter of their own; one more slot counts unknown ones.
const COUNTED: [Opcode; 30] = [
    Opcode::Ping,
    Opcode::TargetPorts,
    Opcode::PoolCreate,
    Opcode::PoolDestroy,
    Opcode::PoolList,
    Opcode::PoolQuery,
    Opcode::PoolConnect,
    Opcode::PoolDisconnect,
    Opcode::ContCreate,
    Opcode::ContDestroy,
    Opcode::ContList,
    Opcode::ContOpen,
    Opcode::ContClose,
    Opcode::ContQuery,
    Opcode::SnapCreate,
    Opcode::SnapList,
    Opcode::SnapDestroy,
    Opcode::ObjUpdate,
    Opcode::ObjFetch,
    Opcode::ObjPunch,
    Opcode::ObjListDkey,
    Opcode::ObjListAkey,
    Opcode::ObjListRecx,
    Opcode::ObjQueryKey,
    Opcode::ObjListObj,
    Opcode::ObjFetchEpochs,
    Opcode::ObjUpdateAt,
    Opcode::ObjPunchAt,
    Opcode::DtxUpdate,
    Opcode::DtxMsg,
];
const OP_SLOTS: usize = COUNTED.len() + 1;

impl OpCounters {
    fn record(&self, op: Opcode, bulk: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let i = COUNTED
            .iter()
            .position(|o| *o == op)
            .unwrap_or(OP_SLOTS - 1);
        self.counts[i].fetch_add(1, Relaxed);
        if bulk > 0 {
            self.bulk_in.fetch_add(bulk, Relaxed);
        }
    }
    /// (opcode name, requests) for every known opcode, then ("unknown", n).
    pub fn by_opcode(&self) -> Vec<(&'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut v: Vec<(&'static str, u64)> = COUNTED
            .iter()
            .zip(self.counts.iter())
            .map(|(o, c)| (o.name(), c.load(Relaxed)))
            .collect();
        v.push(("unknown", self.counts[OP_SLOTS - 1].load(Relaxed)));
        v
    }
    /// Bulk (data) bytes received with requests.
    pub fn bulk_bytes_in(&self) -> u64 {
        self.bulk_in.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Requests received on the targets' own connections (the rest came
    /// through the network threads).
    pub fn target_requests(&self) -> u64 {
        self.target_requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Connections to the targets' own listeners open now.
    pub fn target_connections(&self) -> usize {
        self.target_conns.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Object I/O a target refused because another target owns the object.
    pub fn wrong_target(&self) -> u64 {
        self.wrong_target.load(std::sync::atomic::Ordering::Relaxed)
    }
}

pub use crate::rpc::rtc_enabled;

/// Where a request of object I/O goes, after the checks every path makes.
pub(crate) enum Admit {
    /// To this target.
    To(usize),
    /// Refused: the engine's pool map (this version) is newer.
    Stale(u32),
    /// Refused with this status.
    Refuse(Status),
}

/// What the checks of object I/O need (a target's own connections).
pub(crate) struct IoChecks {
    pub(crate) map_versions: Arc<MapVersions>,
    held_keys: Arc<HeldKeys>,
    ntargets: usize,
}

impl IoChecks {
    /// [`admit_object_io`].
    pub(crate) fn admit(&self, hdr: &HeaderRepr, body: &[u8]) -> Admit {
        admit_object_io(
            &self.map_versions,
            &self.held_keys,
            self.ntargets,
            hdr,
            body,
        )
    }
}

/// The checks before object I/O (and `obj_list_obj`) reaches a target, the
/// same on the network threads and on a target's own connection: the
/// routing prefix parses, the request's map version is not stale (DAOS
/// `DER_STALE`), a fetch does not read a key with a prepared DTX update
/// (`DER_INPROGRESS`); then the owning target: [`object_target`] (a striped
/// object's dkey, or the target its dkey-less request names; [`route`] of
/// any other OID), or the shard `obj_list_obj` names (a target out of range
/// is `DER_INVAL`).
fn admit_object_io(
    map_versions: &MapVersions,
    held_keys: &HeldKeys,
    ntargets: usize,
    hdr: &HeaderRepr,
    body: &[u8],
) -> Admit {
    let args = &body[..body.len() - (hdr.bulk_len as usize).min(body.len())];
    let stale = |coh| hdr.map_version.and_then(|cv| map_versions.check(coh, cv));
    if hdr.opcode == Opcode::ObjListObj {
        return match list_obj_prefix(args) {
            Ok((coh, shard)) if (shard as usize) < ntargets => match stale(coh) {
                Some(v) => Admit::Stale(v),
                None => Admit::To(shard as usize),
            },
            Ok(_) => Admit::Refuse(Status::Invalid),
            Err(_) => Admit::Refuse(Status::Proto),
        };
    }
    let op = hdr.opcode;
    match route_prefix(args) {
        Ok((coh, oid, stripe)) => {
            // DAOS: a request sent with an older pool map than the
            // engine's is refused with the engine's version
            if let Some(v) = stale(coh) {
                return Admit::Stale(v);
            }
            // DTX: a key with a prepared update is not read
            if matches!(op, Opcode::ObjFetch | Opcode::ObjFetchEpochs) && held_keys.any() {
                if let Ok(
                    crate::rpc::msg::Request::ObjFetch { t, dkey, .. }
                    | crate::rpc::msg::Request::ObjFetchEpochs { t, dkey, .. },
                ) = crate::rpc::msg::Request::parse(op, args, hdr.bulk_len as usize)
                {
                    if held_keys.is_held_dkey(t.oid, &dkey) {
                        return Admit::Refuse(Status::InProgress);
                    }
                }
            }
            // a striped object's request goes to its dkey's target (read
            // only for those: any other object's target is its OID's)
            let dkey = if is_striped(oid) {
                match routing_dkey(op, args) {
                    Ok(d) => d,
                    Err(_) => return Admit::Refuse(Status::Proto),
                }
            } else {
                None
            };
            match object_target(oid, dkey, stripe, ntargets) {
                Some(t) => Admit::To(t),
                None => Admit::Refuse(Status::Invalid),
            }
        }
        Err(_) => Admit::Refuse(Status::Proto),
    }
}

/// A running engine.
pub struct Engine {
    stats: Arc<OpCounters>,
    server: Option<TcpServer>,
    rdma: Option<RdmaServer>,
    targets: Vec<TargetTx>,
    mgmt: Sender<MgmtMsg>,
    threads: Vec<JoinHandle<()>>,
    addr: SocketAddr,
    ntargets: usize,
    /// Each target's own TCP port (run to completion; empty when off).
    target_ports: Vec<u16>,
    map_versions: Arc<MapVersions>,
    dtx: DtxService,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("addr", &self.addr)
            .field("targets", &self.ntargets)
            .finish()
    }
}

/// Bounds of an engine on what its peers can grow.
#[derive(Debug, Clone, Copy)]
pub struct EngineLimits {
    /// Connected RPC clients (TCP and RDMA together); past it a connection is
    /// closed at accept (TCP) or rejected (RDMA CM) and counted.
    pub max_clients: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            max_clients: crate::rpc::limit::DEFAULT_MAX_CLIENTS,
        }
    }
}

impl Engine {
    /// Starts an engine over `backend` (the stores of its pools), with the
    /// default [`EngineLimits`].
    pub fn start(
        cfg: &EngineConfig,
        backend: Arc<dyn StoreBackend>,
    ) -> Result<Engine, EngineError> {
        Engine::start_with(cfg, backend, EngineLimits::default())
    }

    /// [`Engine::start`] with `limits`.
    pub fn start_with(
        cfg: &EngineConfig,
        backend: Arc<dyn StoreBackend>,
        limits: EngineLimits,
    ) -> Result<Engine, EngineError> {
        let dd = |source| EngineError::DataDir {
            path: cfg.data_dir.clone(),
            source,
        };
        std::fs::create_dir_all(&cfg.data_dir).map_err(dd)?;
        let meta = Meta::load(&cfg.data_dir).map_err(dd)?;
        let mut ntargets = if cfg.targets == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            cfg.targets
        };
        let meta = match meta {
            Some(m) if m.targets as usize != ntargets && m.targets > 0 => {
                warn!(
                    recorded = m.targets,
                    asked = ntargets,
                    "data directory was created with another target count: keeping it"
                );
                ntargets = m.targets as usize;
                m
            }
            Some(m) => m,
            None => {
                let m = Meta {
                    targets: ntargets as u32,
                    pools: Vec::new(),
                };
                m.save(&cfg.data_dir).map_err(dd)?;
                m
            }
        };
        let (builder, replies) =
            TcpServer::bind(cfg.listen).map_err(|source| EngineError::Listen {
                addr: cfg.listen,
                source,
            })?;
        let addr = builder.local_addr().map_err(|source| EngineError::Listen {
            addr: cfg.listen,
            source,
        })?;
        let (rdma_tx, rdma_rx) = channel();
        let replies = if cfg.rdma_listen.is_some() {
            replies.with_rdma(rdma_tx)
        } else {
            replies
        };
        let hlc = Arc::new(SharedHlc::new());
        let map_versions = Arc::new(MapVersions::new());
        let held_keys = Arc::new(HeldKeys::default());
        let stats = Arc::new(OpCounters::default());
        stats.clients.set_max(limits.max_clients);
        // run to completion: each target's own listener on the engine's IP
        let mut nets = Vec::new();
        let mut target_ports = Vec::new();
        if rtc_enabled() {
            for i in 0..ntargets {
                let listen_err = |source| EngineError::Listen {
                    addr: SocketAddr::new(addr.ip(), 0),
                    source,
                };
                let waker = Arc::new(TargetWaker::new().map_err(EngineError::Thread)?);
                let checks = IoChecks {
                    map_versions: map_versions.clone(),
                    held_keys: held_keys.clone(),
                    ntargets,
                };
                let net = TargetNet::bind(i, addr.ip(), waker.clone(), stats.clone(), checks)
                    .map_err(listen_err)?;
                target_ports.push(net.local_addr().map_err(listen_err)?.port());
                nets.push(Some((net, waker)));
            }
        } else {
            nets.resize_with(ntargets, || None);
        }
        let mut threads = Vec::new();
        let mut targets = Vec::new();
        for (i, net) in nets.into_iter().enumerate() {
            let (tx, rx) = channel();
            let (b, h, r) = (backend.clone(), hlc.clone(), replies.clone());
            let (net, tx) = match net {
                Some((net, waker)) => (Some(net), TargetTx::with_waker(tx, waker)),
                None => (None, TargetTx::plain(tx)),
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("obj-tgt{i}"))
                    // the stores are made and used on this thread only
                    .spawn(move || Target::new(i, b, h, r).run(rx, net))
                    .map_err(EngineError::Thread)?,
            );
            targets.push(tx);
        }
        let mut dtx = DtxService::start(
            addr.to_string(),
            Some(cfg.data_dir.clone()),
            Some(map_versions.clone()),
            hlc.clone(),
            held_keys.clone(),
            targets.clone(),
            replies.clone(),
        )
        .map_err(EngineError::Thread)?;
        let mut mgmt = Mgmt::new(cfg.data_dir.clone(), meta, targets.clone(), replies, hlc)
            .with_aggregation(cfg.aggregation)
            .with_map_versions(map_versions.clone());
        let stop_targets = |targets: &[TargetTx], threads: Vec<JoinHandle<()>>| {
            for t in targets {
                let _ = t.send(TargetMsg::Stop);
            }
            for t in threads {
                let _ = t.join();
            }
        };
        if let Err(st) = mgmt.open_pools() {
            dtx.stop();
            stop_targets(&targets, threads);
            return Err(EngineError::OpenPools(st));
        }
        let (mtx, mrx) = channel();
        threads.push(
            std::thread::Builder::new()
                .name("obj-mgmt".into())
                .spawn(move || mgmt.run(mrx))
                .map_err(EngineError::Thread)?,
        );
        let dispatch = EngineDispatch {
            targets: targets.clone(),
            mgmt: mtx.clone(),
            held: (0..targets.len()).map(|_| Vec::new()).collect(),
            stats: stats.clone(),
            map_versions: map_versions.clone(),
            dtx: dtx.sender(),
            held_keys,
            target_ports: target_ports.clone(),
        };
        let rdma = match cfg.rdma_listen {
            Some(a) => match RdmaServer::start(a, dispatch.clone(), rdma_rx, stats.clients.clone())
            {
                Ok(r) => Some(r),
                Err(e) => {
                    let _ = mtx.send(MgmtMsg::Stop);
                    dtx.stop();
                    stop_targets(&targets, threads);
                    return Err(e.into());
                }
            },
            None => None,
        };
        let server = builder
            .with_limit(stats.clients.clone())
            .start(dispatch)
            .map_err(EngineError::Thread)?;
        info!(%addr, targets = ntargets, ?target_ports, backend = backend.name(), data_dir = %cfg.data_dir.display(), "object engine started");
        Ok(Engine {
            stats,
            server: Some(server),
            rdma,
            targets,
            mgmt: mtx,
            threads,
            addr,
            ntargets,
            target_ports,
            map_versions,
            dtx,
        })
    }

    /// The pool-map versions this engine checks object I/O against; the pool
    /// service replica of the engine process raises them as it applies map
    /// changes ([`MapVersions::raise`]).
    pub fn map_versions(&self) -> Arc<MapVersions> {
        self.map_versions.clone()
    }

    /// Requests received by opcode (management plane).
    pub fn op_counters(&self) -> Arc<OpCounters> {
        self.stats.clone()
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn targets(&self) -> usize {
        self.ntargets
    }

    /// Each target's own address (run to completion: clients send a
    /// target's object I/O there); empty with `DPUSTACK_OBJ_RTC=0`.
    pub fn target_addrs(&self) -> Vec<SocketAddr> {
        self.target_ports
            .iter()
            .map(|&p| SocketAddr::new(self.addr.ip(), p))
            .collect()
    }

    /// Stops accepting, then stops the management thread and the targets
    /// (which commit what they hold).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        if let Some(r) = self.rdma.take() {
            r.stop();
        }
        self.dtx.stop();
        let _ = self.mgmt.send(MgmtMsg::Stop);
        for t in &self.targets {
            let _ = t.send(TargetMsg::Stop);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The network threads' routing (TCP and RDMA each own a copy). Object
/// I/O is held per target until the end of the network thread's round
/// ([`Dispatch::flush`]), then sent as one message.
struct EngineDispatch {
    targets: Vec<TargetTx>,
    mgmt: Sender<MgmtMsg>,
    held: Vec<Vec<TargetMsg>>,
    stats: Arc<OpCounters>,
    map_versions: Arc<MapVersions>,
    dtx: Sender<DtxEvent>,
    held_keys: Arc<HeldKeys>,
    target_ports: Vec<u16>,
}

impl Clone for EngineDispatch {
    /// A copy for another network thread (nothing held).
    fn clone(&self) -> Self {
        EngineDispatch {
            targets: self.targets.clone(),
            mgmt: self.mgmt.clone(),
            held: (0..self.targets.len()).map(|_| Vec::new()).collect(),
            stats: self.stats.clone(),
            map_versions: self.map_versions.clone(),
            dtx: self.dtx.clone(),
            held_keys: self.held_keys.clone(),
            target_ports: self.target_ports.clone(),
        }
    }
}

impl Dispatch for EngineDispatch {
    fn request(&mut self, conn: ConnId, hdr: HeaderRepr, body: Vec<u8>, io: &mut ServerConn) {
        self.stats.record(hdr.opcode, hdr.bulk_len as u64);
        match hdr.opcode {
            Opcode::Ping => io.reply(
                &hdr,
                Status::Ok,
                &Reply::Pong {
                    incarnation: self.map_versions.incarnation(),
                    targets: self.targets.len() as u32,
                },
                &[],
            ),
            Opcode::Unknown(_) => io.reply_error(&hdr, Status::NoSys),
            Opcode::TargetPorts if !self.target_ports.is_empty() => io.reply(
                &hdr,
                Status::Ok,
                &Reply::Ports(self.target_ports.clone()),
                &[],
            ),
            Opcode::TargetPorts => io.reply_error(&hdr, Status::NoSys),
            Opcode::DtxUpdate => match route_prefix(&body) {
                Ok((coh, ..)) => {
                    if let Some(v) = hdr
                        .map_version
                        .and_then(|cv| self.map_versions.check(coh, cv))
                    {
                        io.reply_stale_map(&hdr, v);
                        return;
                    }
                    if self.dtx.send(DtxEvent::Client { conn, hdr, body }).is_err() {
                        io.reply_error(&hdr, Status::Shutdown);
                    }
                }
                Err(_) => io.reply_error(&hdr, Status::Proto),
            },
            Opcode::DtxMsg => {
                // one-way: answered at once, handled by the DTX thread
                io.reply(&hdr, Status::Ok, &Reply::Empty, &[]);
                let _ = self.dtx.send(DtxEvent::Peer { body });
            }
            // object enumeration names the target shard itself (rebuild's
            // scan walks shards 0..targets)
            op if op.is_object_io() || op == Opcode::ObjListObj => {
                match admit_object_io(
                    &self.map_versions,
                    &self.held_keys,
                    self.targets.len(),
                    &hdr,
                    &body,
                ) {
                    Admit::To(t) => self.held[t].push(TargetMsg::Io {
                        conn,
                        hdr,
                        body,
                        received: Instant::now(),
                    }),
                    Admit::Stale(v) => io.reply_stale_map(&hdr, v),
                    Admit::Refuse(st) => io.reply_error(&hdr, st),
                }
            }
            _ => {
                if self.mgmt.send(MgmtMsg::Rpc { conn, hdr, body }).is_err() {
                    io.reply_error(&hdr, Status::Shutdown);
                }
            }
        }
    }

    fn closed(&mut self, conn: ConnId) {
        // its requests reach the targets before its handles are closed
        self.flush();
        let _ = self.mgmt.send(MgmtMsg::ConnClosed(conn));
    }

    fn flush(&mut self) {
        for (t, held) in self.held.iter_mut().enumerate() {
            let msg = match held.len() {
                0 => continue,
                1 => held.pop(),
                _ => Some(TargetMsg::IoBatch(std::mem::take(held))),
            };
            // a stopped target: the engine is shutting down and its
            // connections go with it (their requests get no reply)
            if let Some(m) = msg {
                let _ = self.targets[t].send(m);
            }
        }
    }
}

/// The default data directory layout: `dir/engine.meta` and
/// `dir/pools/<uuid>/t<target>/`.
pub fn meta_path(dir: &Path) -> PathBuf {
    dir.join("engine.meta")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::msg::WireOid;

    #[test]
    fn routing_spreads_and_is_stable() {
        let mut hits = [0usize; 4];
        for lo in 0..4000u64 {
            let oid = WireOid { hi: 1 << 48, lo };
            let t = route(oid, 4);
            assert_eq!(t, route(oid, 4));
            hits[t] += 1;
        }
        for h in hits {
            assert!((700..1300).contains(&h), "{hits:?}");
        }
        assert_eq!(route(WireOid::default(), 1), 0);
    }
}
