//! A client over several engines: objects placed with the pool map
//! ([`crate::placement`]), replicated KV updates, reads from a healthy replica,
//! engines detected dead by heartbeats ([`crate::membership`]).
//!
//! Each engine is one fault domain holding one target of the pool map (an
//! engine spreads its share over its own target threads by OID hash, which a
//! client cannot address). The same pool and container (by label) exist on
//! every engine ([`DistClient::create`]).
//!
//! **Stale maps** (DAOS): a client built from the pool service's map
//! ([`DistClient::connect_with_map`]) sends that map's version in every
//! object RPC; an engine whose pool service replica has applied a newer map
//! refuses with its version ([`ClientError::StaleMap`]); the client fetches
//! the map again from its [`MapSource`], re-places and retries
//! ([`DistClient::refreshes`] counts it). DOWN marks the client makes itself
//! (transport failures) bump its local copy only; the version it sends stays
//! the service's.
//!
//! **Replication** ([`Replication`]): by default a put goes to the key's
//! leader replica (the first serving one) as a DTX (`engine::dtx`): one
//! epoch on every replica, never partly visible, readers of a prepared key
//! told to retry. [`Replication::ClientDriven`] keeps the older path (the
//! client writes each replica in turn; a put failing half-way stays visible
//! on the replicas that took it, each replica takes its own epoch), kept for
//! comparison and for engines without DTX. Updates of several akeys
//! (single values, array extents: [`DistClient::update`],
//! [`DistClient::array_write`]) and punches (object, dkey, akeys;
//! [`DistClient::kv_remove`]) always go through DTX, whatever the mode.
//!
//! **Which replicas are complete** ([`RebuildView`]): a replica holds all
//! of a group's data when it is a member of the group under the map of the
//! last completed rebuild (the pool's first map when none completed) and is
//! not being filled by a running job. Reads go to complete replicas first;
//! a spare that is not complete (not rebuilt yet) is believed only when it
//! has the value: its "nothing" is not an answer; a target being filled is
//! not read. When no complete replica serves and the others have nothing, a
//! read is [`Error::Unavailable`] (DAOS: `-DER_UNREACH`, retry),
//! never `NonExist` or an empty value.
//!
//! What this is **not** yet (see docs/obj-dist.md):
//! - rebuild (copying older data to the spare) and reintegration are the pool
//!   service leader's (`poolsvc::rebuild`); this client only follows the map
//!   it gets (a DOWN it finds itself stays DOWN in its own copy).

use std::time::{Duration, Instant};

use crate::client::kv::KV_AKEY;
use crate::client::{Client, ContHandle, Error as ClientError, Kv, ObjHandle};
use crate::dtx_op::DtxOp;
use crate::membership::{Detector, DetectorConfig, Liveness};
use crate::placement::{layout, MapError, PoolMap, TargetId, TargetState};
use crate::rpc::Status;
use crate::types::{AKey, Anchor, DKey, Epoch, Iod, ObjectId, Recx};

/// How a put reaches the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// Through the leader replica as a distributed transaction (DTX).
    #[default]
    Dtx,
    /// The client writes each replica in turn (no atomicity).
    ClientDriven,
}

/// Errors of the distributed client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Map(#[from] MapError),
    #[error("engine {rank} ({addr}): {source}")]
    Engine {
        rank: usize,
        addr: String,
        source: ClientError,
    },
    #[error("no replica of the object answered")]
    NoReplica,
    /// No replica known to hold all of the key's group serves (every
    /// original replica is out and no rebuild has filled a spare yet), and
    /// the serving ones have nothing for the key: whether it exists is not
    /// known. Retry later (a rebuild or a returning engine ends it).
    #[error(
        "object {oid}: unavailable (no serving replica holds all of its data: the original \
         replicas are out and no rebuild has filled a spare yet); retry later"
    )]
    Unavailable { oid: ObjectId },
    #[error("no engine is reachable")]
    NoEngine,
    /// The container's status is `UNCLEAN` in the pool service: a failure
    /// took every replica of some of its data (a redundancy group lost all
    /// of its members at once and was rebuilt from nothing), so a read could
    /// answer "not found" for data that was written. DAOS: `-DER_RF`. Every
    /// read and write of the container is refused until an operator accepts
    /// the loss: `dpustack cont set-prop POOL CONT --properties status:healthy --system DIR`.
    #[error(
        "container {cont:?} of pool {pool:?}: redundancy lost (-DER_RF): a failure took every \
         replica of some of its data (`dpustack cont query {pool} {cont}`); I/O is refused until \
         an operator accepts the loss: `dpustack cont set-prop {pool} {cont} --properties \
         status:healthy --system DIR`"
    )]
    RedundancyLost { pool: String, cont: String },
    /// A replica of the write's group does not answer (this client, or the
    /// DTX leader, cannot reach it) but serves in the pool service's map:
    /// the write is not made around it (it would miss an acknowledged
    /// write and serve it stale later). Reported to the pool service, which
    /// marks it DOWN only when its own probes fail too and the engine's
    /// lease has lapsed; retry later.
    #[error(
        "object {oid}: replica rank {rank} is unreachable but serving in pool map version \
         {version}: not written around it (reported to the pool service, which marks it DOWN \
         only when its own probes fail and its lease has lapsed); retry later"
    )]
    ReplicaUnreachable {
        oid: ObjectId,
        rank: usize,
        version: u32,
    },
    #[error("the pool map does not have one single-target domain for each of the {0} engines")]
    MapShape(usize),
    /// An engine refused the client's map as stale and no newer map could be
    /// had (no [`MapSource`], or it failed or gave no newer map).
    #[error("engine {rank} has pool map version {engine} > ours ({ours}): {why}")]
    StaleMap {
        rank: usize,
        engine: u32,
        ours: u32,
        why: String,
    },
}

/// Where a client gets the current pool map after a stale-map refusal (the
/// pool service; `obj` cannot depend on `poolsvc`, so the caller wires it).
pub type MapSource = Box<dyn FnMut() -> std::result::Result<PoolMap, String>>;

/// What a client knows of a pool's rebuilds (the pool service's rebuild
/// status, `poolsvc::state::Pool::view`): which replicas hold all of a
/// group's data. The default (nothing known) trusts the original replicas
/// only: safe, but a spare filled by a completed rebuild is then believed
/// only when it has the value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildView {
    /// The map the last completed rebuild went to; `None`: none completed
    /// (the pool's first map, every target in).
    pub base: Option<PoolMap>,
    /// Targets a running job is still filling (reintegrated targets in pass
    /// 2): serving, but maybe missing values written while they were `UP`.
    pub filling: Vec<TargetId>,
    /// Containers (labels) whose redundancy was lost (status `UNCLEAN`: a
    /// failure took every replica of some of their data): their I/O is
    /// refused, [`Error::RedundancyLost`].
    pub redundancy_lost: Vec<String>,
}

/// The pool as the pool service has it: its map and its rebuild view.
#[derive(Debug, Clone)]
pub struct PoolView {
    pub map: PoolMap,
    pub rebuild: RebuildView,
}

/// [`MapSource`] with the rebuild view (one read of the pool service).
pub type ViewSource = Box<dyn FnMut() -> std::result::Result<PoolView, String>>;

/// Where a client reports an engine it cannot reach (the pool service:
/// DAOS's client-side failure report; the service decides with its own
/// probes, the client never marks DOWN in the service's map).
pub type UnreachableReporter = Box<dyn FnMut(usize)>;

pub type Result<T, E = Error> = std::result::Result<T, E>;

struct Conn {
    addr: String,
    /// `None` when the engine is down (never connected, or dropped).
    client: Option<(Client, ContHandle)>,
}

/// Whether a client error means the engine is gone (rather than refusing).
fn is_transport(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Disconnected | ClientError::Unreachable { .. } | ClientError::TimedOut
    )
}

/// Connects to one engine and opens `pool` / `cont` there; object RPCs will
/// carry `map_version`.
fn open(
    addr: &str,
    pool: &str,
    cont: &str,
    timeout: Duration,
    map_version: Option<u32>,
) -> std::result::Result<(Client, ContHandle), ClientError> {
    let c = Client::connect_with(addr, timeout)?;
    c.set_map_version(map_version);
    let poh = c.pool_connect(pool, None)?.get()?;
    let coh = c.cont_open(&poh, cont, None)?.get()?;
    Ok((c, coh))
}

/// A client of a system of engines.
pub struct DistClient {
    conns: Vec<Conn>,
    map: PoolMap,
    /// The map as the pool service gave it, without this client's own
    /// DOWN marks: writes are placed with it (never around a replica that
    /// serves in it). `None`: a client that made its own map (no service:
    /// writes go around the replicas it found down, as before).
    svc_map: Option<PoolMap>,
    reporter: Option<UnreachableReporter>,
    /// Engines reported unreachable so far (see [`Self::unreachable_reports`]).
    reports: u64,
    detector: Detector,
    timeout: Duration,
    /// The version of the map as the pool service gave it (sent in object
    /// RPCs); `None` for a client that made its own map (nothing sent).
    svc_version: Option<u32>,
    source: Option<ViewSource>,
    /// Which replicas are complete ([`RebuildView`]).
    rebuild: RebuildView,
    refreshes: u64,
    pool: String,
    cont: String,
    replication: Replication,
    /// Reads start at a rotating replica instead of the first.
    read_spread: bool,
    reads: u64,
    /// Refusals by fenced engines ([`Self::fenced_refusals`]).
    fenced: u64,
    /// When the map was last fetched after fenced refusals (at most every
    /// 50 ms: each fetch is a linearizable read of the pool service).
    fenced_refresh: Option<Instant>,
}

impl DistClient {
    /// Creates pool `pool` (`size` bytes on each engine) and container `cont`
    /// on every engine of `addrs`.
    pub fn create(addrs: &[String], pool: &str, size: u64, cont: &str) -> Result<()> {
        for (rank, a) in addrs.iter().enumerate() {
            let err = |source| Error::Engine {
                rank,
                addr: a.clone(),
                source,
            };
            let c = Client::connect(a).map_err(err)?;
            c.pool_create(pool, size, None)
                .and_then(|p| p.get())
                .map_err(err)?;
            let poh = c
                .pool_connect(pool, None)
                .and_then(|p| p.get())
                .map_err(err)?;
            c.cont_create(&poh, cont, &[], None)
                .and_then(|p| p.get())
                .map_err(err)?;
        }
        Ok(())
    }

    /// Connects to every engine of `addrs` (rank = index) and opens `pool` /
    /// `cont` there. Engines that do not answer start DOWN in the map.
    pub fn connect(
        addrs: &[String],
        pool: &str,
        cont: &str,
        timeout: Duration,
        detector: DetectorConfig,
    ) -> Result<DistClient> {
        Self::connect_with_map(addrs, pool, cont, timeout, detector, None)
    }

    /// [`DistClient::connect`] starting from a known map (one single-target
    /// domain per engine): engines not `UP-IN` in it are not contacted and
    /// stay as they are (a DOWN engine that came back is not trusted: it may
    /// have missed writes, and there is no reintegration yet).
    pub fn connect_with_map(
        addrs: &[String],
        pool: &str,
        cont: &str,
        timeout: Duration,
        detector: DetectorConfig,
        map: Option<PoolMap>,
    ) -> Result<DistClient> {
        let svc_version = map.as_ref().map(PoolMap::version);
        let svc_map = map.clone();
        let mut map = map.unwrap_or_else(|| PoolMap::uniform(addrs.len() as u32, 1));
        if map.domains() != addrs.len()
            || map.targets().len() != addrs.len()
            || map.targets().iter().any(|t| t.id != t.domain)
        {
            return Err(Error::MapShape(addrs.len()));
        }
        let mut conns = Vec::with_capacity(addrs.len());
        for (rank, a) in addrs.iter().enumerate() {
            if !map.target(rank as u32)?.state.is_serving() {
                conns.push(Conn {
                    addr: a.clone(),
                    client: None,
                });
                continue;
            }
            let opened = if crate::fault::drops_to(rank as u64) {
                Err(ClientError::TimedOut) // a cut link (fault injection, tests)
            } else {
                open(a, pool, cont, timeout, svc_version)
            };
            let client = match opened {
                Ok(x) => Some(x),
                Err(e) if is_transport(&e) => {
                    tracing::warn!(rank, addr = %a, error = %e, "engine down at connect");
                    map.set_domain_state(rank as u32, TargetState::Down)?;
                    None
                }
                Err(source) => {
                    return Err(Error::Engine {
                        rank,
                        addr: a.clone(),
                        source,
                    })
                }
            };
            conns.push(Conn {
                addr: a.clone(),
                client,
            });
        }
        if conns.iter().all(|c| c.client.is_none()) {
            return Err(Error::NoEngine);
        }
        Ok(DistClient {
            conns,
            map,
            svc_map,
            reporter: None,
            reports: 0,
            detector: Detector::new(detector, addrs.len(), Instant::now()),
            timeout,
            svc_version,
            source: None,
            rebuild: RebuildView::default(),
            refreshes: 0,
            pool: pool.to_string(),
            cont: cont.to_string(),
            replication: Replication::default(),
            read_spread: false,
            reads: 0,
            fenced: 0,
            fenced_refresh: None,
        })
    }

    /// How puts are replicated (default [`Replication::Dtx`]).
    pub fn with_replication(mut self, r: Replication) -> Self {
        self.replication = r;
        self
    }

    /// Reads start at a different replica each time (round robin over the
    /// key's serving replicas) instead of the first: DAOS reads from any
    /// replica; the first is the DTX leader, which never holds readers.
    pub fn with_read_spread(mut self, on: bool) -> Self {
        self.read_spread = on;
        self
    }

    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// Where to fetch the pool map after a stale-map refusal (no rebuild
    /// view: see [`Self::with_view_source`]).
    pub fn with_map_source(mut self, mut source: MapSource) -> Self {
        self.source = Some(Box::new(move || {
            source().map(|map| PoolView {
                map,
                rebuild: RebuildView::default(),
            })
        }));
        self
    }

    /// Where to fetch the pool map and the rebuild view after a stale-map
    /// refusal (and when a read finds no complete replica).
    pub fn with_view_source(mut self, source: ViewSource) -> Self {
        self.source = Some(source);
        self
    }

    /// Where to report engines this client cannot reach (the pool service).
    pub fn with_unreachable_reporter(mut self, r: UnreachableReporter) -> Self {
        self.reporter = Some(r);
        self
    }

    /// Engines reported unreachable so far (one report per write that had
    /// to wait for one).
    pub fn unreachable_reports(&self) -> u64 {
        self.reports
    }

    /// The map writes are placed with: the pool service's (no local DOWN
    /// marks) when the client has one, else its own.
    fn write_map(&self) -> &PoolMap {
        self.svc_map.as_ref().unwrap_or(&self.map)
    }

    /// The rebuild view to start from (with the map the client was built
    /// from).
    pub fn with_rebuild_view(mut self, view: RebuildView) -> Self {
        self.rebuild = view;
        self
    }

    /// The client's rebuild view.
    pub fn rebuild_view(&self) -> &RebuildView {
        &self.rebuild
    }

    /// [`Error::RedundancyLost`] when the client's view has its container
    /// marked `UNCLEAN`.
    fn check_redundancy(&self) -> Result<()> {
        if self.rebuild.redundancy_lost.contains(&self.cont) {
            return Err(Error::RedundancyLost {
                pool: self.pool.clone(),
                cont: self.cont.clone(),
            });
        }
        Ok(())
    }

    /// The map version object RPCs carry (the service's, `None`: none).
    pub fn sent_map_version(&self) -> Option<u32> {
        self.svc_version
    }

    /// Maps fetched after a stale-map refusal so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes
    }

    /// Engine `rank` refused our map: it has `engine`. Fetches the map from
    /// the source (it must be at least that new), takes it, drops the
    /// connections of engines not serving in it, and connects to engines
    /// serving in it that it had none to (one that does not answer is marked
    /// DOWN locally, as at connect).
    fn refresh(&mut self, rank: usize, engine: u32) -> Result<()> {
        let ours = self.svc_version.unwrap_or(0);
        let stale = |why: String| Error::StaleMap {
            rank,
            engine,
            ours,
            why,
        };
        let Some(src) = self.source.as_mut() else {
            return Err(stale("no map source to refresh from".into()));
        };
        let PoolView { map, rebuild } = src().map_err(|e| stale(format!("map source: {e}")))?;
        if map.version() < engine {
            return Err(stale(format!(
                "the map source gave version {}",
                map.version()
            )));
        }
        if map.domains() != self.conns.len()
            || map.targets().len() != self.conns.len()
            || map.targets().iter().any(|t| t.id != t.domain)
        {
            return Err(Error::MapShape(self.conns.len()));
        }
        tracing::info!(
            rank,
            from = ours,
            to = map.version(),
            "stale pool map refused: refreshed"
        );
        self.svc_version = Some(map.version());
        self.svc_map = Some(map.clone());
        self.map = map;
        self.rebuild = rebuild;
        self.refreshes += 1;
        for r in 0..self.conns.len() {
            let serving = self.map.target(r as u32)?.state.is_serving();
            let c = &mut self.conns[r];
            if !serving {
                c.client = None;
            } else if let Some((cl, _)) = &c.client {
                cl.set_map_version(self.svc_version);
            } else if crate::fault::drops_to(r as u64) {
                // a cut link (fault injection, tests): as a failed open
                self.map.set_domain_state(r as u32, TargetState::Down)?;
            } else {
                match open(
                    &c.addr,
                    &self.pool,
                    &self.cont,
                    self.timeout,
                    self.svc_version,
                ) {
                    Ok(x) => {
                        tracing::info!(rank = r, addr = %c.addr, "engine serving in the refreshed map: connected");
                        c.client = Some(x);
                    }
                    Err(e) => {
                        tracing::warn!(rank = r, addr = %c.addr, error = %e, "engine serving in the refreshed map does not open");
                        self.map.set_domain_state(r as u32, TargetState::Down)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A stale-map refusal with a version not newer than ours: the engine's
    /// lease lapsed (the fence: it has not heard from a pool-service leader
    /// lately and may have missed writes), not a newer map. Counted.
    fn is_fenced(&mut self, e: &ClientError) -> bool {
        let fenced = matches!(e, ClientError::StaleMap { version }
            if self.svc_version.is_some_and(|ours| *version <= ours));
        if fenced {
            self.fenced += 1;
        }
        fenced
    }

    /// After fenced refusals left nothing to try: fetch the map again (the
    /// pool service may have marked the fenced engine DOWN); a failure or an
    /// unchanged map is not an error (the caller retries until its deadline).
    fn refresh_if_fenced(&mut self, rank: usize) {
        if self.source.is_none()
            || self
                .fenced_refresh
                .is_some_and(|t| t.elapsed() < Duration::from_millis(50))
        {
            return;
        }
        self.fenced_refresh = Some(Instant::now());
        let ours = self.svc_version.unwrap_or(0);
        if let Err(e) = self.refresh(rank, ours) {
            tracing::debug!(rank, error = %e, "map refresh after fenced refusals");
        }
    }

    /// Stale-map refusals by fenced engines (lease lapsed) so far.
    pub fn fenced_refusals(&self) -> u64 {
        self.fenced
    }

    /// The client's pool map.
    pub fn map(&self) -> &PoolMap {
        &self.map
    }

    /// The RPC deadline of every engine connection.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Marks engine `rank` DOWN (its connection dropped): the layout remaps
    /// its shards to spares from now on.
    pub fn mark_down(&mut self, rank: usize) -> Result<()> {
        if self.conns[rank].client.take().is_some() {
            tracing::warn!(rank, addr = %self.conns[rank].addr, "engine marked DOWN");
        }
        if matches!(
            self.map.target(rank as u32)?.state,
            TargetState::UpIn | TargetState::Up
        ) {
            self.map.set_domain_state(rank as u32, TargetState::Down)?;
        }
        Ok(())
    }

    /// One round of heartbeats: pings the engines that are due, feeds the
    /// detector, marks dead engines DOWN. Returns the ranks newly marked DOWN.
    pub fn heartbeat(&mut self, now: Instant) -> Result<Vec<usize>> {
        for m in self.detector.probes_due(now) {
            if self.ping(m) {
                self.detector.heard(m, Instant::now());
            }
        }
        let mut down = Vec::new();
        for (m, s) in self.detector.tick(Instant::now()) {
            if s == Liveness::Dead {
                self.mark_down(m)?;
                down.push(m);
            } else {
                tracing::info!(rank = m, state = ?s, "engine liveness");
            }
        }
        Ok(down)
    }

    /// The connection to engine `rank`, `None` when it is down or the link
    /// is cut by fault injection (`crate::fault`: a test process that
    /// installs the table cuts its own client off from a rank).
    fn conn(&self, rank: usize) -> Option<&(Client, ContHandle)> {
        if crate::fault::drops_to(rank as u64) {
            return None;
        }
        self.conns[rank].client.as_ref()
    }

    /// Whether engine `rank` answers a ping.
    fn ping(&self, rank: usize) -> bool {
        match self.conn(rank) {
            Some((c, _)) => c.ping(None).and_then(|p| p.get()).is_ok(),
            None => false,
        }
    }

    fn kv(&self, rank: usize, oid: ObjectId) -> Option<(&Client, Kv)> {
        let (c, coh) = self.conn(rank)?;
        let kv = c.kv_open(coh, oid, None).ok()?.get().ok()?;
        Some((c, kv))
    }

    fn oh(&self, rank: usize, oid: ObjectId) -> Option<(&Client, ObjHandle)> {
        let (c, coh) = self.conn(rank)?;
        let oh = c.obj_open(coh, oid, None).ok()?.get().ok()?;
        Some((c, oh))
    }

    /// Puts `value` under `key` on every serving replica of the key's group
    /// (see [`Replication`]). Returns the epoch (DTX: the one epoch of every
    /// replica; client-driven: the highest replica epoch).
    pub fn kv_put(&mut self, oid: ObjectId, key: &[u8], value: &[u8]) -> Result<Epoch> {
        match self.replication {
            Replication::Dtx => self.kv_put_dtx(oid, key, value),
            Replication::ClientDriven => self.kv_put_client_driven(oid, key, value),
        }
    }

    /// DTX put of a KV value (the akey `KV_AKEY` under the dkey `key`).
    fn kv_put_dtx(&mut self, oid: ObjectId, key: &[u8], value: &[u8]) -> Result<Epoch> {
        // an empty value is refused by the operation's check (use kv_remove)
        self.dtx(
            oid,
            DtxOp::Update {
                dkey: key.to_vec(),
                iods: vec![Iod::single(KV_AKEY, value.len() as u64)],
                data: vec![value.to_vec()],
            },
        )
    }

    /// `daos_obj_update` through DTX: several akeys of `dkey` (`data[i]`:
    /// exactly iod `i`'s bytes: single values and array extents), at one
    /// epoch on every serving replica of the dkey's group, or nowhere.
    pub fn update(
        &mut self,
        oid: ObjectId,
        dkey: &[u8],
        iods: &[Iod],
        data: Vec<Vec<u8>>,
    ) -> Result<Epoch> {
        self.dtx(
            oid,
            DtxOp::Update {
                dkey: dkey.to_vec(),
                iods: iods.to_vec(),
                data,
            },
        )
    }

    /// Array convenience: `data` written as bytes (record size 1) at
    /// `offset` of `akey` under `dkey`, through DTX.
    pub fn array_write(
        &mut self,
        oid: ObjectId,
        dkey: &[u8],
        akey: &[u8],
        offset: u64,
        data: &[u8],
    ) -> Result<Epoch> {
        let iod = Iod::array(
            akey,
            1,
            vec![Recx {
                idx: offset,
                nr: data.len() as u64,
            }],
        );
        self.update(oid, dkey, &[iod], vec![data.to_vec()])
    }

    /// `daos_obj_punch` through DTX: every group of the object, one epoch.
    pub fn punch_obj(&mut self, oid: ObjectId) -> Result<Epoch> {
        self.dtx(oid, DtxOp::PunchObj)
    }

    /// `daos_obj_punch_dkeys` (one dkey) through DTX.
    pub fn punch_dkey(&mut self, oid: ObjectId, dkey: &[u8]) -> Result<Epoch> {
        self.dtx(
            oid,
            DtxOp::PunchDkey {
                dkey: dkey.to_vec(),
            },
        )
    }

    /// `daos_obj_punch_akeys` through DTX.
    pub fn punch_akeys(&mut self, oid: ObjectId, dkey: &[u8], akeys: &[&[u8]]) -> Result<Epoch> {
        self.dtx(
            oid,
            DtxOp::PunchAkeys {
                dkey: dkey.to_vec(),
                akeys: akeys.iter().map(|a| a.to_vec()).collect(),
            },
        )
    }

    /// `daos_kv_remove` through DTX (a punch of the key's dkey).
    pub fn kv_remove(&mut self, oid: ObjectId, key: &[u8]) -> Result<Epoch> {
        self.punch_dkey(oid, key)
    }

    /// The serving replicas an operation goes to, the leader first: the
    /// dkey's group, or (object punch) every group's, each rank once; placed
    /// with [`Self::write_map`] (the pool service's map: a replica this
    /// client cannot reach is still a participant).
    fn participants(
        &self,
        oid: ObjectId,
        dkey: Option<&[u8]>,
    ) -> Result<(Vec<(u32, String)>, usize)> {
        let (ranks, total) = crate::dtx_op::write_participants(oid, self.write_map(), dkey)?;
        let reps = ranks
            .into_iter()
            .map(|r| (r, self.conns[r as usize].addr.clone()))
            .collect();
        Ok((reps, total))
    }

    /// A participant of a write does not answer (this client cannot reach
    /// it, or it did not answer a ping after the DTX leader found it
    /// unreachable) while it serves in the pool service's map: the write
    /// must not go around it. Reports it (once per operation) and fetches
    /// the map (at most every 50 ms); the caller retries until its deadline
    /// — the service marks the engine DOWN once its own probes fail and the
    /// engine's lease has lapsed, and the write then goes to a spare under
    /// that map.
    fn unreachable_participant(&mut self, rank: usize, reported: &mut Vec<usize>) {
        if !reported.contains(&rank) {
            reported.push(rank);
            self.reports += 1;
            tracing::warn!(
                rank,
                version = self.svc_version.unwrap_or(0),
                "replica unreachable but serving in the pool map: not written around it; \
                 reported to the pool service"
            );
            if let Some(r) = self.reporter.as_mut() {
                r(rank);
            }
        }
        self.refresh_if_fenced(rank);
    }

    /// One operation as a DTX: sent to the leader replica (the first
    /// serving replica of the group) with every serving replica's rank and
    /// address; the leader commits it at one epoch everywhere or nowhere.
    ///
    /// With the pool service's map, the participants are every replica
    /// serving in *that* map: one this client cannot reach does not lead
    /// (another does, with it as a follower), and one nobody reaches stops
    /// the write ([`Self::unreachable_participant`]: reported, the map
    /// fetched again, retried until the deadline, then
    /// [`Error::ReplicaUnreachable`]) — never written around under a map in
    /// which it serves. Without a service map (a client that made its own),
    /// an engine failing at the transport level is marked DOWN in the
    /// client's map and the operation re-placed without it, as before.
    /// Retried after a refresh on a stale map, and after a short pause when
    /// a follower refused or the leader timed out (nothing or — timeout —
    /// maybe committed; a retry applies it again, which an update or punch
    /// at a newer epoch tolerates).
    fn dtx(&mut self, oid: ObjectId, op: DtxOp) -> Result<Epoch> {
        let deadline = Instant::now() + self.timeout;
        let mut last = None;
        // replicas that refused as fenced (lease lapsed): not asked to lead
        let mut fenced: Vec<u32> = Vec::new();
        // participants found unreachable and reported (service map only)
        let mut reported: Vec<usize> = Vec::new();
        let mut unreach: Option<usize> = None;
        let mut view_refreshed = false;
        let with_svc = self.svc_map.is_some();
        let mut passes = 0usize;
        loop {
            self.check_redundancy()?;
            passes += 1;
            if passes > 4 * self.conns.len() + 64 && Instant::now() > deadline {
                break;
            }
            // a dkey none of whose complete replicas serves is not written:
            // the spares would take it, and a returning original (the only
            // holder of the older data) never reads them (rebuild's rule)
            if let Some(k) = op.dkey() {
                if self.read_order(oid, k)?.1 == 0 {
                    if !view_refreshed && self.source.is_some() {
                        view_refreshed = true;
                        self.refresh_if_fenced(0);
                        continue;
                    }
                    return Err(Error::Unavailable { oid });
                }
            }
            let (mut reps, total) = self.participants(oid, op.dkey())?;
            // a leader this client reaches and that is not fenced
            let reachable = |r: u32| !crate::fault::drops_to(u64::from(r));
            let can_lead: Vec<bool> = reps
                .iter()
                .map(|(r, _)| {
                    !fenced.contains(r) && reachable(*r) && self.conns[*r as usize].client.is_some()
                })
                .collect();
            if let Some(i) = can_lead.iter().position(|x| *x) {
                // another serving replica leads; a fenced or unreachable
                // one still follows (the leader reaches it, or the
                // transaction does not commit)
                reps[..=i].rotate_right(1);
            } else if !reps.is_empty() && with_svc {
                // no participant this client can reach leads: wait for the
                // pool service to decide (lease renewed, map changed, the
                // engine back)
                if Instant::now() > deadline {
                    break;
                }
                let silent: Vec<usize> = reps
                    .iter()
                    .map(|(r, _)| *r as usize)
                    .filter(|r| !fenced.contains(&(*r as u32)))
                    .collect();
                fenced.clear();
                for r in silent {
                    unreach = Some(r);
                    self.unreachable_participant(r, &mut reported);
                }
                std::thread::sleep(Duration::from_millis(5));
                if let Some(&(r, _)) = reps.first() {
                    self.refresh_if_fenced(r as usize);
                }
                // connect again to serving engines with no connection
                self.reconnect();
                continue;
            } else if !fenced.is_empty() {
                fenced.clear();
                if Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
                if let Some(&(r, _)) = reps.first() {
                    self.refresh_if_fenced(r as usize);
                }
                continue;
            }
            let Some(&(leader, _)) = reps.first() else {
                return Err(Error::NoReplica);
            };
            let leader = leader as usize;
            let Some((c, oh)) = self.oh(leader, oid) else {
                self.mark_down(leader)?;
                continue;
            };
            let (pool, cont) = (self.pool.clone(), self.cont.clone());
            match c
                .obj_dtx(&oh, &pool, &cont, &op, &reps, None)
                .and_then(|p| p.get())
            {
                Ok(e) => {
                    if reps.len() < total {
                        tracing::warn!(%oid, written = reps.len(), replicas = total, "degraded write");
                    }
                    return Ok(e);
                }
                Err(e) if is_transport(&e) => {
                    // local mark: reads skip it, and it does not lead; with
                    // a service map it stays a participant
                    self.mark_down(leader)?;
                    last = Some((leader, e));
                }
                Err(e @ ClientError::StaleMap { .. }) if self.is_fenced(&e) => {
                    fenced.push(leader as u32);
                    last = Some((leader, e));
                }
                Err(ClientError::StaleMap { version }) => self.refresh(leader, version)?,
                Err(e) if e.status() == Some(Status::Unreach) => {
                    // which follower? the ones that do not answer us either
                    let mut found = false;
                    for &(r, _) in &reps[1..] {
                        let r = r as usize;
                        if !self.ping(r) {
                            self.mark_down(r)?;
                            if with_svc {
                                unreach = Some(r);
                                self.unreachable_participant(r, &mut reported);
                            }
                            found = true;
                        }
                    }
                    if !found || with_svc {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    last = Some((leader, e));
                }
                Err(e) if e.status() == Some(Status::TimedOut) && with_svc => {
                    // an ack missing at the leader's deadline: a follower
                    // that does not answer us either is reported (the
                    // write waits for the service's decision)
                    for &(r, _) in &reps[1..] {
                        let r = r as usize;
                        if !self.ping(r) {
                            unreach = Some(r);
                            self.unreachable_participant(r, &mut reported);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    last = Some((leader, e));
                }
                Err(e) if matches!(e.status(), Some(Status::Busy | Status::TimedOut)) => {
                    std::thread::sleep(Duration::from_millis(2));
                    last = Some((leader, e));
                }
                Err(source) => {
                    return Err(Error::Engine {
                        rank: leader,
                        addr: self.conns[leader].addr.clone(),
                        source,
                    })
                }
            }
            if Instant::now() > deadline {
                break;
            }
        }
        if let Some(rank) = unreach {
            if self
                .write_map()
                .target(rank as u32)
                .is_ok_and(|t| t.state.is_serving())
            {
                return Err(Error::ReplicaUnreachable {
                    oid,
                    rank,
                    version: self.svc_version.unwrap_or(0),
                });
            }
        }
        match last {
            Some((rank, source)) => Err(Error::Engine {
                rank,
                addr: self.conns[rank].addr.clone(),
                source,
            }),
            None => Err(Error::NoReplica),
        }
    }

    /// Connects again to the engines serving in the map that have no
    /// connection (dropped after a transport failure); one that does not
    /// open stays marked DOWN in the client's own map.
    fn reconnect(&mut self) {
        for r in 0..self.conns.len() {
            let serving = self
                .write_map()
                .target(r as u32)
                .is_ok_and(|t| t.state.is_serving());
            if !serving || self.conns[r].client.is_some() || crate::fault::drops_to(r as u64) {
                continue;
            }
            let c = &self.conns[r];
            if let Ok(x) = open(
                &c.addr,
                &self.pool,
                &self.cont,
                self.timeout,
                self.svc_version,
            ) {
                tracing::info!(rank = r, addr = %c.addr, "engine answers again: connected");
                self.conns[r].client = Some(x);
            }
        }
    }

    /// Client-driven put: `kv_put` on every serving replica of the key's
    /// group under the current map. An engine that fails at the transport
    /// level is marked DOWN and the put is redone under the new layout (the
    /// spare gets the value). Acknowledged (`Ok`) when every serving replica
    /// of the final layout took it; a group with fewer serving replicas than
    /// its class (no spare left) is written degraded, with a warning. Returns
    /// the highest replica epoch. Not atomic: see the module doc.
    pub fn kv_put_client_driven(
        &mut self,
        oid: ObjectId,
        key: &[u8],
        value: &[u8],
    ) -> Result<Epoch> {
        // each pass either succeeds, fails, or learns something (an engine
        // DOWN, a newer map): bounded by the engines plus a few refreshes;
        // with a service map, a replica nobody reaches is waited for until
        // the deadline (never written around: see `dtx`)
        let deadline = Instant::now() + self.timeout;
        let with_svc = self.svc_map.is_some();
        let mut reported = Vec::new();
        let mut passes = 0;
        'remap: loop {
            self.check_redundancy()?;
            passes += 1;
            if passes > 2 * self.conns.len() + 4 && (!with_svc || Instant::now() > deadline) {
                break;
            }
            let map = self.write_map().clone();
            let l = layout(oid, &map)?;
            let grp = l.groups[crate::placement::group_of(key, l.groups.len())].clone();
            let mut epoch = Epoch::default();
            let mut written = 0;
            for &t in &grp {
                let tgt = *map.target(t)?;
                if !tgt.state.is_serving() {
                    continue;
                }
                let rank = tgt.domain as usize;
                let failed = match self.kv(rank, oid) {
                    None => true,
                    Some((c, kv)) => match c.kv_put(&kv, key, value, None).and_then(|p| p.get()) {
                        Ok(e) => {
                            epoch = epoch.max(e);
                            written += 1;
                            false
                        }
                        Err(e) if is_transport(&e) => true,
                        Err(e @ ClientError::StaleMap { .. }) if self.is_fenced(&e) => {
                            // every serving replica must take it: wait for
                            // the pool service (lease renewed or map changed)
                            std::thread::sleep(Duration::from_millis(5));
                            self.refresh_if_fenced(rank);
                            continue 'remap;
                        }
                        Err(ClientError::StaleMap { version }) => {
                            // replicas written before the refusal are
                            // rewritten under the new layout (no DTX: see
                            // the module doc)
                            self.refresh(rank, version)?;
                            continue 'remap;
                        }
                        Err(source) => {
                            return Err(Error::Engine {
                                rank,
                                addr: self.conns[rank].addr.clone(),
                                source,
                            })
                        }
                    },
                };
                if failed {
                    self.mark_down(rank)?;
                    if with_svc {
                        if Instant::now() > deadline {
                            return Err(Error::ReplicaUnreachable {
                                oid,
                                rank,
                                version: self.svc_version.unwrap_or(0),
                            });
                        }
                        self.unreachable_participant(rank, &mut reported);
                        std::thread::sleep(Duration::from_millis(5));
                        self.reconnect();
                    }
                    continue 'remap;
                }
            }
            if written == 0 {
                return Err(Error::NoReplica);
            }
            if written < grp.len() {
                tracing::warn!(%oid, written, replicas = grp.len(), "degraded write");
            }
            return Ok(epoch);
        }
        Err(Error::NoReplica)
    }

    /// Replica ranks to read `key` from, best first, and how many of them
    /// are complete ([`RebuildView`]): the complete serving members of the
    /// key's group (original layout's order first), then the other serving
    /// members of its group under the current map (spares not rebuilt yet;
    /// not targets being filled).
    fn read_order(&self, oid: ObjectId, key: &[u8]) -> Result<(Vec<usize>, usize)> {
        let all_in = self.map.all_in();
        let base = self.rebuild.base.as_ref().unwrap_or(&all_in);
        let group = |m: &PoolMap| -> Result<Vec<TargetId>> {
            let l = layout(oid, m)?;
            let g = crate::placement::group_of(key, l.groups.len());
            Ok(l.groups.get(g).cloned().unwrap_or_default())
        };
        let (orig, was, cur) = (group(&all_in)?, group(base)?, group(&self.map)?);
        let serving = |m: &PoolMap, t: TargetId| m.target(t).is_ok_and(|x| x.state.is_serving());
        let mut order = Vec::new();
        for &t in orig.iter().chain(was.iter()) {
            // a member under the base that left the group (a spare whose
            // original came back) takes no writes any more: not complete
            // (the partition test with the quick return read such a spare's
            // old value)
            let complete = was.contains(&t)
                && serving(base, t)
                && serving(&self.map, t)
                && cur.contains(&t)
                && !self.rebuild.filling.contains(&t);
            let rank = self.map.target(t)?.domain as usize;
            if complete && !order.contains(&rank) {
                order.push(rank);
            }
        }
        let n = order.len();
        for &t in &cur {
            let rank = self.map.target(t)?.domain as usize;
            // a target being filled is not read at all: its value may be
            // one a write it missed while `UP` replaced (the soak caught
            // it answering while the complete replica held the key)
            if serving(&self.map, t) && !order.contains(&rank) && !self.rebuild.filling.contains(&t)
            {
                order.push(rank);
            }
        }
        Ok((order, n))
    }

    /// `kv_get` from the first replica that answers (see [`Self::read_order`]);
    /// a replica that fails at the transport level is marked DOWN and the next
    /// one is tried. A key a complete replica does not have is
    /// `Engine(NonExist)`; when no complete replica serves and the others do
    /// not have it, [`Error::Unavailable`]. A replica holding a prepared DTX
    /// update of the key answers "in progress": the next replica is tried,
    /// and when every one did, the read is retried after a pause (until the
    /// client's timeout).
    pub fn kv_get(&mut self, oid: ObjectId, key: &[u8]) -> Result<Vec<u8>> {
        self.read(
            oid,
            key,
            |c, oh| c.kv_get(&Kv { oh: *oh }, key, None).and_then(|p| p.get()),
            // a key a replica lacks is NonExist, never a value
            |_| true,
        )
    }

    /// `daos_obj_fetch` of `dkey` (one buffer per iod: a single value as
    /// stored, empty when none; an array's records, holes as zeroes), from
    /// a replica as [`Self::kv_get`] picks it.
    pub fn fetch(&mut self, oid: ObjectId, dkey: &[u8], iods: &[Iod]) -> Result<Vec<Vec<u8>>> {
        let d = DKey(dkey.to_vec());
        self.read(
            oid,
            dkey,
            |c, oh| {
                let f = c.obj_fetch(oh, None, &d, iods, Vec::new(), None)?.get()?;
                Ok(f.sgls
                    .into_iter()
                    .map(|s| s.iovs.into_iter().next().unwrap_or_default())
                    .collect())
            },
            // a replica without the dkey answers empty buffers (arrays: zeroes)
            |v: &Vec<Vec<u8>>| v.iter().any(|b| b.iter().any(|&x| x != 0)),
        )
    }

    /// Array convenience: `len` bytes at `offset` of `akey` (record size 1).
    pub fn array_read(
        &mut self,
        oid: ObjectId,
        dkey: &[u8],
        akey: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        let iod = Iod::array(
            AKey(akey.to_vec()),
            1,
            vec![Recx {
                idx: offset,
                nr: len,
            }],
        );
        Ok(self.fetch(oid, dkey, &[iod])?.pop().unwrap_or_default())
    }

    /// One read of `dkey`, tried replica by replica (see [`Self::kv_get`]).
    fn read<T>(
        &mut self,
        oid: ObjectId,
        key: &[u8],
        f: impl Fn(&Client, &ObjHandle) -> std::result::Result<T, ClientError>,
        has_data: impl Fn(&T) -> bool,
    ) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let mut refreshes = 0;
        // the view fetched again once when no complete replica answered (a
        // rebuild may have completed since)
        let mut view_refreshed = false;
        'refreshed: while refreshes < 4 {
            self.check_redundancy()?;
            let mut in_progress = None;
            let mut fenced = None;
            // the complete replicas first (n of them), then the others
            let (mut order, n) = self.read_order(oid, key)?;
            if self.read_spread && n > 1 {
                // among the complete replicas only
                self.reads += 1;
                order[..n].rotate_left((self.reads % n as u64) as usize);
            }
            let first = order.first().copied().unwrap_or(0);
            for (i, rank) in order.into_iter().enumerate() {
                if i >= n && fenced.is_some() {
                    // a complete replica is fenced (e.g. every lease lapsed
                    // while the pool service elects a leader): the others
                    // may lack what it has, so wait for it
                    break;
                }
                let Some((c, oh)) = self.oh(rank, oid) else {
                    self.mark_down(rank)?;
                    continue;
                };
                match f(c, &oh) {
                    // a complete replica's answer, or a value from another
                    Ok(v) if i < n || has_data(&v) => return Ok(v),
                    // not complete and nothing for the key (a fetch answers
                    // empty buffers): not an answer
                    Ok(_) => {}
                    Err(e) if is_transport(&e) => self.mark_down(rank)?,
                    Err(e @ ClientError::StaleMap { .. }) if self.is_fenced(&e) => {
                        // its lease lapsed (cut off from the pool service):
                        // it may have missed writes; another replica
                        fenced = Some((rank, e));
                    }
                    Err(ClientError::StaleMap { version }) => {
                        self.refresh(rank, version)?;
                        refreshes += 1;
                        continue 'refreshed;
                    }
                    Err(e) if e.status() == Some(Status::InProgress) => {
                        in_progress = Some((rank, e));
                    }
                    Err(e) if e.status() == Some(Status::NonExist) => {
                        if i < n {
                            // a complete replica has every write of the key
                            return Err(Error::Engine {
                                rank,
                                addr: self.conns[rank].addr.clone(),
                                source: e,
                            });
                        }
                        // not complete: not an answer
                    }
                    Err(source) => {
                        return Err(Error::Engine {
                            rank,
                            addr: self.conns[rank].addr.clone(),
                            source,
                        })
                    }
                }
            }
            let fenced_rank = fenced.as_ref().map(|(r, _)| *r);
            if let Some((rank, source)) = in_progress.or(fenced) {
                if Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                    if let Some(r) = fenced_rank {
                        self.refresh_if_fenced(r);
                    }
                    continue 'refreshed;
                }
                return Err(Error::Engine {
                    rank,
                    addr: self.conns[rank].addr.clone(),
                    source,
                });
            }
            // no complete replica answered and the others have nothing
            if !view_refreshed && self.source.is_some() {
                view_refreshed = true;
                self.refresh_if_fenced(first);
                continue 'refreshed;
            }
            return Err(Error::Unavailable { oid });
        }
        Err(Error::NoReplica)
    }

    // ---- listing and reads at an epoch (the object CLI against a system) ----

    /// Serving replicas of group `g` of `oid`, best first: the original
    /// layout's (all targets in) that still serve, then the current
    /// layout's spares (as [`Self::read_order`] for a dkey's group).
    fn group_order(&self, oid: ObjectId, g: usize) -> Result<Vec<usize>> {
        let orig = layout(oid, &self.map.all_in())?;
        let cur = layout(oid, &self.map)?;
        let mut order = Vec::new();
        let (Some(og), Some(cg)) = (orig.groups.get(g), cur.groups.get(g)) else {
            return Ok(order);
        };
        for &t in og.iter().chain(cg.iter()) {
            let tgt = self.map.target(t)?;
            let rank = tgt.domain as usize;
            if tgt.state.is_serving() && !order.contains(&rank) {
                order.push(rank);
            }
        }
        Ok(order)
    }

    /// One listing RPC for group `g` of `oid`, from the first replica of
    /// [`Self::group_order`] that answers: a replica failing at the transport
    /// level is marked DOWN and the next one tried; a stale-map refusal
    /// refreshes the map (at most 4 times) and starts again under the new
    /// layout; fenced replicas (lease lapsed) are skipped, and when only
    /// fenced ones are left the call waits for them until the timeout.
    fn list_group<T>(
        &mut self,
        oid: ObjectId,
        g: usize,
        f: &impl Fn(&Client, &ObjHandle) -> std::result::Result<T, ClientError>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let mut refreshes = 0;
        'again: loop {
            self.check_redundancy()?;
            let mut fenced = None;
            for rank in self.group_order(oid, g)? {
                let Some((c, oh)) = self.oh(rank, oid) else {
                    self.mark_down(rank)?;
                    continue;
                };
                match f(c, &oh) {
                    Ok(v) => return Ok(v),
                    Err(e) if is_transport(&e) => self.mark_down(rank)?,
                    Err(e @ ClientError::StaleMap { .. }) if self.is_fenced(&e) => {
                        fenced = Some((rank, e));
                    }
                    Err(ClientError::StaleMap { version }) if refreshes < 4 => {
                        self.refresh(rank, version)?;
                        refreshes += 1;
                        continue 'again;
                    }
                    Err(source) => {
                        return Err(Error::Engine {
                            rank,
                            addr: self.conns[rank].addr.clone(),
                            source,
                        })
                    }
                }
            }
            if let Some((rank, source)) = fenced {
                if Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                    self.refresh_if_fenced(rank);
                    continue 'again;
                }
                return Err(Error::Engine {
                    rank,
                    addr: self.conns[rank].addr.clone(),
                    source,
                });
            }
            return Err(Error::NoReplica);
        }
    }

    /// `daos_obj_list_dkey` over every group of the object: each group is
    /// asked (one serving replica, see [`Self::list_group`]) for up to `max`
    /// dkeys after the anchor, keys a replica holds for another group
    /// (leftover copies) are dropped, and the answers are merged in key
    /// order. Only keys up to the smallest last key of a group that is not
    /// done are returned (beyond it that group's keys are not known yet), at
    /// most `max`; the anchor resumes strictly after the last one, as the
    /// single-engine listing does. A KV object's keys are its dkeys.
    pub fn list_dkeys(
        &mut self,
        oid: ObjectId,
        epoch: Option<Epoch>,
        anchor: &Anchor,
        max: u32,
    ) -> Result<(Vec<Vec<u8>>, Anchor)> {
        if anchor.is_eof() {
            return Ok((Vec::new(), anchor.clone()));
        }
        let max = max.max(1);
        let groups = layout(oid, &self.map)?.groups.len();
        let ask = Anchor {
            after: anchor.after.clone(),
            started: anchor.started,
            eof: false,
        };
        let mut pages = Vec::with_capacity(groups);
        for g in 0..groups {
            let (ks, a) = self.list_group(oid, g, &|c: &Client, oh: &ObjHandle| {
                c.obj_list_dkey(oh, epoch, &ask, max, None)?.get()
            })?;
            if !a.is_eof() && ks.is_empty() {
                tracing::warn!(%oid, group = g, "an engine listed no dkey and is not done: taken as done")
            }
            let mut page = crate::listing::Page::new(ks.into_iter().map(|k| k.0).collect(), &a);
            // keys a replica holds for another group (leftover copies)
            page.keys
                .retain(|k| crate::placement::group_of(k, groups) == g);
            pages.push(page);
        }
        Ok(crate::listing::merge(anchor, pages, max))
    }

    /// `daos_obj_list_akey` of `dkey` (its group, one serving replica; the
    /// engine's anchor as it is).
    pub fn list_akeys(
        &mut self,
        oid: ObjectId,
        epoch: Option<Epoch>,
        dkey: &[u8],
        anchor: &Anchor,
        max: u32,
    ) -> Result<(Vec<Vec<u8>>, Anchor)> {
        let groups = layout(oid, &self.map)?.groups.len();
        let g = crate::placement::group_of(dkey, groups);
        let d = DKey(dkey.to_vec());
        let (ks, a) = self.list_group(oid, g, &|c: &Client, oh: &ObjHandle| {
            c.obj_list_akey(oh, epoch, &d, anchor, max.max(1), None)?
                .get()
        })?;
        Ok((ks.into_iter().map(|k| k.0).collect(), a))
    }

    /// [`Self::fetch`] at `epoch` (`None`: the latest). DTX commits an
    /// update at one epoch on every replica, so any replica answers the
    /// same at a given epoch.
    pub fn fetch_at(
        &mut self,
        oid: ObjectId,
        epoch: Option<Epoch>,
        dkey: &[u8],
        iods: &[Iod],
    ) -> Result<Vec<Vec<u8>>> {
        let d = DKey(dkey.to_vec());
        self.read(
            oid,
            dkey,
            |c, oh| {
                let f = c.obj_fetch(oh, epoch, &d, iods, Vec::new(), None)?.get()?;
                Ok(f.sgls
                    .into_iter()
                    .map(|s| s.iovs.into_iter().next().unwrap_or_default())
                    .collect())
            },
            |v: &Vec<Vec<u8>>| v.iter().any(|b| b.iter().any(|&x| x != 0)),
        )
    }

    /// The engines' addresses, by rank.
    pub fn addrs(&self) -> Vec<String> {
        self.conns.iter().map(|c| c.addr.clone()).collect()
    }
}
