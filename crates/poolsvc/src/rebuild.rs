//! The rebuild driver, run by the pool-service leader (next to its engine
//! monitor, [`crate::health`]): when targets go `EXCLUDED` it restores the
//! replicas they held on the spares the new layout names; when targets are
//! `UP` (reintegrating) it fills them and turns them `UP-IN`.
//!
//! Model (see docs/obj-dist.md): one driver, on the leader, reads every
//! surviving engine's objects (`obj_list_obj`), plans each dkey with
//! [`obj::rebuild::plan`] and copies it from its source replica to its
//! destinations ([`obj::rebuild::copy_dkey`]). DAOS instead has every
//! surviving engine scan itself and the new targets pull; with a handful of
//! engines one driver is simpler to resume (one cursor, in the replicated
//! [`RebuildStatus`]) and to report, at the price of data passing through
//! the leader's engine process (two hops instead of one).
//!
//! - Progress (objects and keys scanned, values and bytes copied, state
//!   `scanning`/`pulling`/`done`, the map version) is replicated with
//!   [`Command::SetRebuild`] every `progress_every`, so `pool query` shows it
//!   and a new leader resumes from the cursor (same map version) or starts
//!   over (newer map; copies are compare-then-write, so redoing is harmless).
//! - Throttled: [`RebuildConfig::rate`] values per second.
//! - Reintegration: an `EXCLUDED` engine that was seen gone (a probe failed,
//!   or the monitor declared it dead) and answers again is revived in the
//!   monitor and set `UP`; a job that finds `UP` targets first
//!   **reconciles** their data (not trusted, not discarded: what their
//!   sources no longer have is punched just above its version, newer versions
//!   come by epoch-carrying copies; a dkey with no other replica left is
//!   kept), fills them (pass 1), sets them `UP-IN`
//!   and copies to them once more (pass 2: values written while they were
//!   `UP`, which clients do not write to). `system set-state POOL RANK UP`
//!   reintegrates by hand (DAOS's `dmg pool reintegrate`). Once such a job
//!   is done, the other engines delete the copies they hold for groups they
//!   left (the spares' leftovers: [`Job::reclaim`], DAOS's reclaim).
//! - A completed job that had no source for some group (every replica lost
//!   at once) marks the container `UNCLEAN` in the state machine
//!   ([`crate::state::Pool::mark_redundancy_lost`], DAOS's `-DER_RF`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use obj::client::{Client, ContHandle};
use obj::placement::{PoolMap, TargetId, TargetState};
use obj::rebuild::{copy_dkey, fill_plan, is_replicated, plan, Side, Throttle, LIST_BATCH};
use obj::types::{Anchor, DKey};

use crate::health::Monitor;
use crate::service::PoolService;
use crate::state::{Command, Pool, RebuildCursor, RebuildStatus, Reply};

/// Rebuild settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildConfig {
    /// Run rebuild and reintegration at all.
    pub enabled: bool,
    /// Values copied per second at most; 0 = unlimited.
    pub rate: u64,
    /// Objects per listing RPC.
    pub batch: u32,
    /// How often excluded engines are probed for a return.
    pub probe_every: Duration,
    /// How often progress is replicated.
    pub progress_every: Duration,
    /// RPC deadline towards the engines.
    pub timeout: Duration,
    /// A `DOWN` engine that answers again is reintegrated at once (DOWN →
    /// UP → UP-IN, its data reconciled and filled by epoch-carrying copies)
    /// instead of waiting for `EXCLUDED`. On by default since the partition
    /// and soak runs of docs/obj-dist.md "DOWN → UP-IN return" passed.
    pub return_from_down: bool,
}

impl Default for RebuildConfig {
    fn default() -> Self {
        RebuildConfig {
            enabled: true,
            rate: 0,
            batch: 64,
            probe_every: Duration::from_millis(500),
            progress_every: Duration::from_millis(200),
            timeout: Duration::from_secs(2),
            return_from_down: true,
        }
    }
}

impl RebuildConfig {
    /// No rebuild, no reintegration (a DOWN/EXCLUDED engine stays out).
    pub fn off() -> Self {
        RebuildConfig {
            enabled: false,
            ..Default::default()
        }
    }
}

/// The map a pool's last completed rebuild went to.
pub fn base_map(status: &RebuildStatus, map: &PoolMap) -> PoolMap {
    if status.base_map.is_empty() {
        map.all_in()
    } else {
        PoolMap::from_text(&status.base_map).unwrap_or_else(|_| map.all_in())
    }
}

fn active(status: &RebuildStatus) -> bool {
    matches!(status.state.as_str(), "scanning" | "pulling")
}

/// Whether `pool` needs a rebuild job: one was interrupted, a target went
/// EXCLUDED since the last completed rebuild, or a target is UP.
pub fn needs_rebuild(pool: &Pool) -> bool {
    let map = pool.map();
    if active(&pool.rebuild) {
        return true;
    }
    let base = base_map(&pool.rebuild, &map);
    map.targets().iter().any(|t| {
        t.state == TargetState::Up
            || (t.state == TargetState::Excluded
                && base
                    .target(t.id)
                    .is_ok_and(|b| b.state != TargetState::Excluded))
    })
}

/// The leader's driver: at most one job at a time.
pub(crate) struct Driver {
    cfg: RebuildConfig,
    engines: Vec<String>,
    job: Option<tokio::task::JoinHandle<Result<(), String>>>,
    last_probe: Option<Instant>,
    /// Engines seen gone (a probe failed, or the monitor said dead): they may
    /// be reintegrated when they answer.
    seen_gone: BTreeSet<u32>,
    /// No new job before this (after a failed one).
    backoff_until: Option<Instant>,
    /// This leader has applied everything committed before it led (a new
    /// leader's applied state may lag: a job started from it would resume
    /// from an older cursor).
    synced: bool,
}

impl Driver {
    pub(crate) fn new(cfg: RebuildConfig, engines: Vec<String>) -> Driver {
        Driver {
            cfg,
            engines,
            job: None,
            last_probe: None,
            seen_gone: BTreeSet::new(),
            backoff_until: None,
            synced: false,
        }
    }

    /// One step, on the leader: reap a finished job, probe excluded engines,
    /// start the next job.
    pub(crate) async fn poll(&mut self, svc: &PoolService, mon: &mut Monitor) {
        if !self.cfg.enabled {
            return;
        }
        for r in 0..self.engines.len() {
            if mon.liveness(r) == obj::membership::Liveness::Dead {
                self.seen_gone.insert(r as u32);
            }
        }
        if let Some(j) = &self.job {
            if !j.is_finished() {
                return;
            }
            if let Some(j) = self.job.take() {
                match j.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!("rebuild: job stopped: {e}");
                        self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
                    }
                    Err(e) => {
                        tracing::warn!("rebuild: job panicked or was cancelled: {e}");
                        self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
                    }
                }
            }
        }
        if self.backoff_until.is_some_and(|b| Instant::now() < b) {
            return;
        }
        if !self.synced {
            // a linearizable read returns once this leader has applied up to
            // its commit index: every earlier leader's progress is visible
            if let Err(e) = svc.raft.ensure_linearizable().await {
                tracing::debug!("rebuild: not synced with the log yet: {e}");
                return;
            }
            self.synced = true;
        }
        let st = svc.local_state();
        // excluded engines that answer again: reintegrate (set UP)
        let now = Instant::now();
        if self
            .last_probe
            .is_none_or(|p| now.duration_since(p) >= self.cfg.probe_every)
        {
            self.last_probe = Some(now);
            let mut excluded: BTreeMap<u32, Vec<String>> = BTreeMap::new();
            for (name, pool) in &st.pools {
                let map = pool.map();
                for d in 0..map.domains() as u32 {
                    // DOWN too with `return_from_down` (the default): a DOWN
                    // engine that answers again comes straight back (DOWN →
                    // UP → UP-IN, reconciled and filled; docs/obj-dist.md);
                    // without it, EXCLUDED only
                    let from_down = self.cfg.return_from_down;
                    let all_out = map.domain_targets(d).is_ok_and(|ts| {
                        ts.iter().all(|t| {
                            map.target(*t).is_ok_and(|t| {
                                t.state == TargetState::Excluded
                                    || (from_down && t.state == TargetState::Down)
                            })
                        })
                    });
                    if all_out && (d as usize) < self.engines.len() {
                        excluded.entry(d).or_default().push(name.clone());
                    }
                }
            }
            for (d, pools) in excluded {
                let a = self.engines[d as usize].clone();
                let t = self.cfg.timeout;
                let Some(inc) = tokio::task::spawn_blocking(move || ping(&a, t))
                    .await
                    .unwrap_or(None)
                else {
                    self.seen_gone.insert(d);
                    continue;
                };
                if !self.seen_gone.contains(&d) {
                    continue; // excluded by hand while alive: stays out
                }
                tracing::warn!(
                    rank = d,
                    "rebuild: excluded engine answers again: reintegrating (UP)"
                );
                if let Some(i) = inc.filter(|i| st.incarnations.get(&d) != Some(i)) {
                    // the incarnation that returns is the one reintegrated
                    // (recorded first, or the monitor would take it for a
                    // restart once it probes it again)
                    let c = Command::EngineIncarnation {
                        rank: d,
                        incarnation: i,
                    };
                    if let Err(e) = svc.raft.client_write(c).await {
                        tracing::warn!(rank = d, "rebuild: could not record the incarnation: {e}");
                        return;
                    }
                }
                mon.revive(d as usize, Instant::now());
                self.seen_gone.remove(&d);
                for pool in pools {
                    let c = Command::SetDomainState {
                        pool: pool.clone(),
                        domain: d,
                        state: "UP".into(),
                    };
                    if let Err(e) = svc.raft.client_write(c).await {
                        tracing::warn!(rank = d, %pool, "rebuild: could not set UP: {e}");
                    }
                }
                return; // the next poll starts the job on the new map
            }
        }
        for (name, pool) in &st.pools {
            if needs_rebuild(pool) {
                let ctx = Job {
                    svc: svc.clone(),
                    rt: tokio::runtime::Handle::current(),
                    engines: self.engines.clone(),
                    pool: name.clone(),
                    cfg: self.cfg,
                };
                tracing::info!(pool = %name, "rebuild: job starting");
                self.job = Some(tokio::task::spawn_blocking(move || ctx.run()));
                return;
            }
        }
    }

    /// This replica stopped leading: the job notices (its writes fail, and it
    /// checks the role between batches).
    pub(crate) fn detach(&mut self) {
        self.job = None;
    }
}

/// `None`: no answer; else the incarnation the engine named.
fn ping(addr: &str, timeout: Duration) -> Option<Option<u64>> {
    if obj::fault::drops_to_addr(addr) {
        return None; // a cut link (fault injection)
    }
    match Client::connect_with(addr, timeout) {
        Ok(c) => c.ping_incarnation(None).and_then(|p| p.get()).ok(),
        Err(_) => None,
    }
}

/// One rebuild job of one pool (on a blocking thread).
struct Job {
    svc: PoolService,
    rt: tokio::runtime::Handle,
    engines: Vec<String>,
    pool: String,
    cfg: RebuildConfig,
}

/// An engine connection with the pool's containers opened on it.
struct Conn {
    client: Client,
    conts: HashMap<String, ContHandle>,
    shards: u32,
}

type JobResult<T> = Result<T, String>;

impl Job {
    fn write(&self, cmd: Command) -> JobResult<Reply> {
        if self.svc.status().role != "leader" {
            return Err("no longer the leader".into());
        }
        match self.rt.block_on(self.svc.raft.client_write(cmd)) {
            Ok(r) => match r.data {
                Reply::Refused(e) => Err(format!("pool service refused: {e}")),
                d => Ok(d),
            },
            Err(e) => Err(format!("pool service write: {e}")),
        }
    }

    fn pool_state(&self) -> JobResult<Pool> {
        self.svc
            .local_state()
            .pools
            .get(&self.pool)
            .cloned()
            .ok_or_else(|| format!("no pool {:?}", self.pool))
    }

    fn publish(&self, status: &RebuildStatus) -> JobResult<()> {
        self.write(Command::SetRebuild {
            pool: self.pool.clone(),
            status: Box::new(status.clone()),
        })
        .map(|_| ())
    }

    fn run(self) -> JobResult<()> {
        let started = Instant::now();
        let p = self.pool_state()?;
        let map = p.map();
        if map.targets().len() != map.domains() {
            return Err("rebuild handles one target per engine only".into());
        }
        let prev = p.rebuild.clone();
        let resume = active(&prev) && prev.version == map.version();
        let up: Vec<TargetId> = map
            .targets()
            .iter()
            .filter(|t| t.state == TargetState::Up)
            .map(|t| t.id)
            .collect();
        let mut status = if resume {
            tracing::info!(pool = %self.pool, version = prev.version, pass = prev.pass, "rebuild: resuming from the recorded cursor");
            prev.clone()
        } else {
            RebuildStatus {
                version: map.version(),
                state: "scanning".into(),
                kind: if up.is_empty() {
                    "exclude"
                } else {
                    "reintegrate"
                }
                .into(),
                pass: 1,
                base_map: prev.base_map.clone(),
                // named from the start: a client that sees them UP-IN
                // before pass 2 is published must not take them as complete
                // (`Pool::view`'s `filling`)
                extra: up.clone(),
                ..Default::default()
            }
        };
        let elapsed0 = status.elapsed_ms;
        let elapsed = move || elapsed0 + started.elapsed().as_millis() as u64;
        if !resume && !up.is_empty() {
            for &t in &up {
                let rank = map.target(t).map_err(|e| e.to_string())?.domain;
                self.prepare(rank, &p)?;
            }
        }
        self.publish(&status)?;
        if status.pass == 1 {
            let base = base_map(&status, &map);
            // the UP targets' data is reconciled with their sources, not
            // trusted (and not discarded: a group whose every other replica
            // is gone has its only copy there)
            for &t in &up {
                let rank = map.target(t).map_err(|e| e.to_string())?.domain;
                self.reconcile(rank, &p, &base, &map, &up)?;
            }
            // the UP targets' data was discarded: they are destinations of
            // every dkey of theirs, whether or not they served under the base
            // (a DOWN engine returning did; an EXCLUDED one did not)
            self.pass(&mut status, &base, &up, &elapsed)?;
            if !up.is_empty() {
                let mut v = status.version;
                for &t in &up {
                    let c = Command::SetTargetState {
                        pool: self.pool.clone(),
                        target: t,
                        state: "UP-IN".into(),
                    };
                    if let Reply::MapVersion(x) = self.write(c)? {
                        v = x;
                    }
                }
                tracing::info!(pool = %self.pool, ?up, version = v, "rebuild: reintegrated targets UP-IN; pass 2");
                status.version = v;
                status.pass = 2;
                status.extra = up.clone();
                status.cursor = None;
                self.publish(&status)?;
            }
        }
        if status.pass == 2 {
            let cur = self.pool_state()?.map();
            let extra = status.extra.clone();
            self.pass(&mut status, &cur, &extra, &elapsed)?;
        }
        let cur = self.pool_state()?.map();
        if cur.version() != status.version {
            return Err(format!(
                "pool map changed to version {} during the rebuild to {}",
                cur.version(),
                status.version
            ));
        }
        status.state = "done".into();
        status.cursor = None;
        status.base_map = cur.to_text();
        status.elapsed_ms = elapsed();
        self.publish(&status)?;
        if !status.extra.is_empty() {
            // the returning targets are complete: the spares that served
            // while they were out delete what they hold for groups they left
            let extra = status.extra.clone();
            status.reclaim = "running".into();
            self.publish(&status)?;
            let t = Instant::now();
            let r = self.reclaim(&extra, &mut status, &elapsed);
            status.reclaim = match &r {
                Ok(()) => format!("done in {} ms", t.elapsed().as_millis()),
                Err(e) => {
                    tracing::warn!(
                        pool = %self.pool,
                        "rebuild: reclaim of the spares' leftover copies stopped (they stay, \
                         unreachable: not in any layout): {e}"
                    );
                    format!("stopped: {e}")
                }
            };
            status.elapsed_ms = elapsed();
            // best effort: a new leader or map refuses it, and the next job
            // publishes its own status
            if let Err(e) = self.publish(&status) {
                tracing::debug!("rebuild: reclaim status not published: {e}");
            }
        }
        tracing::info!(
            pool = %self.pool,
            version = status.version,
            objs_scanned = status.objs_scanned,
            recs_copied = status.recs_copied,
            bytes_copied = status.bytes_copied,
            elapsed_ms = status.elapsed_ms,
            "rebuild: done"
        );
        Ok(())
    }

    fn connect(&self, rank: u32, p: &Pool) -> JobResult<Conn> {
        let addr = self
            .engines
            .get(rank as usize)
            .ok_or_else(|| format!("no engine {rank}"))?;
        let e =
            |what: &str, err: obj::client::Error| format!("engine {rank} ({addr}) {what}: {err}");
        let client = Client::connect_with(addr, self.cfg.timeout).map_err(|x| e("connect", x))?;
        let poh = client
            .pool_connect(&self.pool, None)
            .and_then(|x| x.get())
            .map_err(|x| e("pool connect", x))?;
        let shards = client
            .pool_query(&self.pool, None)
            .and_then(|x| x.get())
            .map_err(|x| e("pool query", x))?
            .targets;
        let mut conts = HashMap::new();
        for c in p.containers.keys() {
            let coh = client
                .cont_open(&poh, c, None)
                .and_then(|x| x.get())
                .map_err(|x| e("container open", x))?;
            conts.insert(c.clone(), coh);
        }
        Ok(Conn {
            client,
            conts,
            shards,
        })
    }

    /// Reintegration: the returning engine `rank` has the pool and every
    /// container of it (made empty where it lost them); what it holds is
    /// reconciled afterwards ([`Job::reconcile`]), not discarded.
    fn prepare(&self, rank: u32, p: &Pool) -> JobResult<()> {
        let addr = self
            .engines
            .get(rank as usize)
            .ok_or_else(|| format!("no engine {rank}"))?;
        let e = |what: &str, err: obj::client::Error| {
            format!("reintegration of engine {rank}: {what}: {err}")
        };
        let c = Client::connect_with(addr, self.cfg.timeout).map_err(|x| e("connect", x))?;
        let poh = match c.pool_connect(&self.pool, None).and_then(|x| x.get()) {
            Ok(h) => h,
            Err(x) if x.status() == Some(obj::rpc::Status::NonExist) => {
                let size = p
                    .containers
                    .values()
                    .find_map(|c| c.props.get("size")?.parse().ok())
                    .unwrap_or(64u64 << 20);
                c.pool_create(&self.pool, size, None)
                    .and_then(|x| x.get())
                    .map_err(|x| e("pool create", x))?;
                c.pool_connect(&self.pool, None)
                    .and_then(|x| x.get())
                    .map_err(|x| e("pool connect", x))?
            }
            Err(x) => return Err(e("pool connect", x)),
        };
        for name in p.containers.keys() {
            match c.cont_open(&poh, name, None).and_then(|x| x.get()) {
                Ok(_) => {}
                Err(x) if x.status() == Some(obj::rpc::Status::NonExist) => {
                    c.cont_create(&poh, name, &[], None)
                        .and_then(|x| x.get())
                        .map_err(|x| e("container create", x))?;
                }
                Err(x) => return Err(e("container open", x)),
            }
        }
        Ok(())
    }

    /// Reintegration, before the fill: every dkey of a replicated object on
    /// the returning engine `rank` reconciled with its group's source
    /// ([`obj::rebuild::reconcile_dkey`]: what the source no longer has is
    /// punched there just above its own version; a dkey whose group it is no
    /// longer in — a spare's leftover — entirely). A dkey whose group has no
    /// other replica left is kept as it is: its only copy.
    fn reconcile(
        &self,
        rank: u32,
        p: &Pool,
        base: &PoolMap,
        cur: &PoolMap,
        up: &[TargetId],
    ) -> JobResult<()> {
        let now = obj::rebuild::rebuild_map(cur);
        let mut conns: HashMap<u32, Conn> = HashMap::new();
        conns.insert(rank, self.connect(rank, p)?);
        let shards = conns[&rank].shards;
        let (mut punched, mut kept) = (0u64, 0u64);
        for cont in p.containers.keys() {
            // a striped object is listed by each target holding dkeys of it
            let mut seen = HashSet::new();
            for shard in 0..shards {
                let mut anchor = Anchor::default();
                while !anchor.is_eof() {
                    self.check(cur.version())?;
                    let me = &conns[&rank];
                    let (oids, next) = me
                        .client
                        .obj_list_obj(&me.conts[cont], shard, None, &anchor, self.cfg.batch, None)
                        .and_then(|x| x.get())
                        .map_err(|e| format!("engine {rank}: list objects: {e}"))?;
                    anchor = next;
                    for oid in oids {
                        if !is_replicated(oid, cur) {
                            continue; // its only copy
                        }
                        if oid.is_striped() && !seen.insert(oid) {
                            continue; // listed by another target
                        }
                        let mut da = Anchor::default();
                        while !da.is_eof() {
                            let me = &conns[&rank];
                            let oh = obj::client::ObjHandle {
                                coh: me.conts[cont].coh,
                                oid,
                            };
                            let (dkeys, next) = me
                                .client
                                .obj_list_dkey(&oh, None, &da, LIST_BATCH, None)
                                .and_then(|x| x.get())
                                .map_err(|e| format!("engine {rank}: list dkeys of {oid}: {e}"))?;
                            da = next;
                            for dkey in dkeys {
                                let l =
                                    obj::placement::layout(oid, &now).map_err(|e| e.to_string())?;
                                let g = obj::placement::group_of(&dkey.0, l.groups.len());
                                let member = l.groups.get(g).is_some_and(|grp| grp.contains(&rank));
                                let src = if member {
                                    match plan(oid, &dkey.0, base, cur, up)
                                        .map_err(|e| e.to_string())?
                                    {
                                        Some(pl) => Some(pl.source),
                                        None => {
                                            kept += 1;
                                            continue; // no other replica left
                                        }
                                    }
                                } else {
                                    None
                                };
                                if let Some(s) = src {
                                    let srank = cur.target(s).map_err(|e| e.to_string())?.domain;
                                    if let std::collections::hash_map::Entry::Vacant(e) =
                                        conns.entry(srank)
                                    {
                                        e.insert(self.connect(srank, p)?);
                                    }
                                }
                                let me = &conns[&rank];
                                let dst = Side {
                                    client: &me.client,
                                    coh: &me.conts[cont],
                                };
                                let sc = src.map(|s| {
                                    let srank = cur.target(s).map(|t| t.domain).unwrap_or(s);
                                    &conns[&srank]
                                });
                                let sside = sc.map(|c| Side {
                                    client: &c.client,
                                    coh: &c.conts[cont],
                                });
                                punched += obj::rebuild::reconcile_dkey(
                                    sside.as_ref(),
                                    &dst,
                                    oid,
                                    &DKey(dkey.0.clone()),
                                )
                                .map_err(|e| format!("reconcile {oid} on engine {rank}: {e}"))?;
                            }
                        }
                    }
                }
            }
        }
        tracing::warn!(
            rank,
            pool = %self.pool,
            punched,
            kept,
            "rebuild: reconciled the returning engine's data (stale akeys punched; dkeys with no other replica kept)"
        );
        Ok(())
    }

    /// DAOS's reclaim after a reintegration: every serving engine but the
    /// returning ones (`extra`, whose own leftovers [`Job::reconcile`]
    /// punched) deletes the dkeys of replicated objects whose group, under
    /// the current map, it is not a member of — copies it took as a spare
    /// while a member was out (writes and rebuild copies). Run once the job
    /// is done: the returning members hold everything (pass 2) and the
    /// published base no longer counts the spares complete. Only dkeys whose
    /// group is whole (every member serving) are deleted; each is punched
    /// just above its own newest version ([`obj::rebuild::reconcile_dkey`]
    /// without a source), so nothing newer is hidden. The dkeys deleted are
    /// counted in `status.reclaimed` (published every `progress_every`).
    fn reclaim(
        &self,
        extra: &[TargetId],
        status: &mut RebuildStatus,
        elapsed: &dyn Fn() -> u64,
    ) -> JobResult<()> {
        let p = self.pool_state()?;
        let cur = p.map();
        let mut throttle = Throttle::new(self.cfg.rate);
        let mut last_pub = Instant::now();
        let (mut dkeys_gone, mut akeys_gone) = (0u64, 0u64);
        for rank in 0..cur.domains() as u32 {
            let t = rank; // one target per engine (checked in run)
            if extra.contains(&t) || !cur.target(t).is_ok_and(|x| x.state.is_serving()) {
                continue;
            }
            let me = self.connect(rank, &p)?;
            for cont in p.containers.keys() {
                let side = Side {
                    client: &me.client,
                    coh: &me.conts[cont],
                };
                let mut seen = HashSet::new();
                for shard in 0..me.shards {
                    let mut anchor = Anchor::default();
                    while !anchor.is_eof() {
                        self.check(cur.version())?;
                        let (oids, next) = me
                            .client
                            .obj_list_obj(
                                &me.conts[cont],
                                shard,
                                None,
                                &anchor,
                                self.cfg.batch,
                                None,
                            )
                            .and_then(|x| x.get())
                            .map_err(|e| format!("engine {rank}: list objects: {e}"))?;
                        anchor = next;
                        for oid in oids {
                            if !is_replicated(oid, &cur) {
                                continue; // an S1/SX shard may be its only copy
                            }
                            if oid.is_striped() && !seen.insert(oid) {
                                continue; // listed by another target
                            }
                            let l = obj::placement::layout(oid, &cur).map_err(|e| e.to_string())?;
                            let oh = obj::client::ObjHandle {
                                coh: me.conts[cont].coh,
                                oid,
                            };
                            let mut da = Anchor::default();
                            while !da.is_eof() {
                                let (dkeys, next) = me
                                    .client
                                    .obj_list_dkey(&oh, None, &da, LIST_BATCH, None)
                                    .and_then(|x| x.get())
                                    .map_err(|e| {
                                        format!("engine {rank}: list dkeys of {oid}: {e}")
                                    })?;
                                da = next;
                                for dkey in dkeys {
                                    let g = obj::placement::group_of(&dkey.0, l.groups.len());
                                    let Some(grp) = l.groups.get(g) else {
                                        continue;
                                    };
                                    let whole = grp.iter().all(|&m| {
                                        cur.target(m).is_ok_and(|x| x.state.is_serving())
                                    });
                                    if grp.contains(&t) || !whole {
                                        continue;
                                    }
                                    let n = obj::rebuild::reconcile_dkey(None, &side, oid, &dkey)
                                        .map_err(|e| {
                                        format!("reclaim {oid} on engine {rank}: {e}")
                                    })?;
                                    if n > 0 {
                                        dkeys_gone += 1;
                                        akeys_gone += n;
                                        status.reclaimed += 1;
                                    }
                                    if last_pub.elapsed() >= self.cfg.progress_every {
                                        status.elapsed_ms = elapsed();
                                        self.publish(status)?;
                                        last_pub = Instant::now();
                                    }
                                    let w = throttle.take(n, Instant::now());
                                    if !w.is_zero() {
                                        std::thread::sleep(w);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        tracing::info!(
            pool = %self.pool,
            dkeys = dkeys_gone,
            akeys = akeys_gone,
            "rebuild: reclaimed the spares' leftover copies"
        );
        Ok(())
    }

    /// Stop if this replica no longer leads or the map moved on.
    fn check(&self, version: u32) -> JobResult<()> {
        if self.svc.status().role != "leader" {
            return Err("no longer the leader".into());
        }
        let v = self.pool_state()?.map().version();
        if v != version {
            return Err(format!(
                "pool map changed to version {v} during the rebuild to {version}: restarting"
            ));
        }
        Ok(())
    }

    /// One pass over every serving source engine's objects.
    fn pass(
        &self,
        status: &mut RebuildStatus,
        base: &PoolMap,
        extra: &[TargetId],
        elapsed: &dyn Fn() -> u64,
    ) -> JobResult<()> {
        let p = self.pool_state()?;
        let cur = p.map();
        let conts: Vec<String> = p.containers.keys().cloned().collect();
        let mut conns: HashMap<u32, Conn> = HashMap::new();
        let mut throttle = Throttle::new(self.cfg.rate);
        let mut last_pub = Instant::now();
        let from = status.cursor.clone();
        for rank in 0..cur.domains() as u32 {
            let src_t = rank; // one target per engine (checked in run)
                              // returning targets (`extra`, UP or filling) are scanned too:
                              // a group whose only copy is on one is filled from it
                              // (`fill_plan`); every other dkey names another source
            let serving = cur.target(src_t).is_ok_and(|t| {
                t.state.is_serving() || (extra.contains(&src_t) && t.state == TargetState::Up)
            });
            if !serving {
                continue;
            }
            if from.as_ref().is_some_and(|c| rank < c.rank) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = conns.entry(rank) {
                e.insert(self.connect(rank, &p)?);
            }
            let shards = conns[&rank].shards;
            for cont in &conts {
                let at_cursor = from.as_ref().filter(|c| c.rank == rank);
                if at_cursor.is_some_and(|c| cont < &c.cont) {
                    continue;
                }
                let mut seen = HashSet::new();
                for shard in 0..shards {
                    let resume = at_cursor.filter(|c| &c.cont == cont);
                    if resume.is_some_and(|c| shard < c.shard) {
                        continue;
                    }
                    let mut anchor = match resume.filter(|c| c.shard == shard) {
                        Some(c) => Anchor::from_bytes(&c.anchor).unwrap_or_default(),
                        None => Anchor::default(),
                    };
                    while !anchor.is_eof() {
                        self.check(status.version)?;
                        status.state = "scanning".into();
                        let src = &conns[&rank];
                        let coh = src.conts[cont];
                        let (oids, next) = src
                            .client
                            .obj_list_obj(&coh, shard, None, &anchor, self.cfg.batch, None)
                            .and_then(|x| x.get())
                            .map_err(|e| format!("engine {rank}: list objects: {e}"))?;
                        status.objs_scanned += oids.len() as u64;
                        for oid in oids {
                            if !is_replicated(oid, &cur) {
                                continue;
                            }
                            // a striped object is listed by each target
                            // holding dkeys of it (after a resume from a
                            // checkpoint it may be copied again: harmless,
                            // a copy is at its source's epoch)
                            if oid.is_striped() && !seen.insert(oid) {
                                continue;
                            }
                            let copied = self.object(
                                &mut conns,
                                &p,
                                rank,
                                cont,
                                oid,
                                base,
                                &cur,
                                extra,
                                status,
                                &mut throttle,
                            )?;
                            if copied {
                                status.objs_copied += 1;
                            }
                        }
                        anchor = next;
                        status.cursor = Some(RebuildCursor {
                            rank,
                            cont: cont.clone(),
                            shard,
                            anchor: anchor.to_bytes(),
                        });
                        if last_pub.elapsed() >= self.cfg.progress_every {
                            status.elapsed_ms = elapsed();
                            self.publish(status)?;
                            last_pub = Instant::now();
                        }
                    }
                }
            }
        }
        status.elapsed_ms = elapsed();
        Ok(())
    }

    /// Every dkey of `oid` on source engine `rank` this source is responsible
    /// for, copied to its destinations. Whether anything was written.
    #[allow(clippy::too_many_arguments)]
    fn object(
        &self,
        conns: &mut HashMap<u32, Conn>,
        p: &Pool,
        rank: u32,
        cont: &str,
        oid: obj::types::ObjectId,
        base: &PoolMap,
        cur: &PoolMap,
        extra: &[TargetId],
        status: &mut RebuildStatus,
        throttle: &mut Throttle,
    ) -> JobResult<bool> {
        let mut copied = false;
        let mut anchor = Anchor::default();
        while !anchor.is_eof() {
            let src = &conns[&rank];
            let oh = obj::client::ObjHandle {
                coh: src.conts[cont].coh,
                oid,
            };
            let (dkeys, next) = src
                .client
                .obj_list_dkey(&oh, None, &anchor, LIST_BATCH, None)
                .and_then(|x| x.get())
                .map_err(|e| format!("engine {rank}: list dkeys of {oid}: {e}"))?;
            anchor = next;
            for dkey in dkeys {
                status.keys_scanned += 1;
                let Some(pl) =
                    fill_plan(oid, &dkey.0, base, cur, extra).map_err(|e| e.to_string())?
                else {
                    continue;
                };
                if pl.source != rank {
                    continue; // another replica sends it
                }
                for d in pl.dests {
                    let drank = cur.target(d).map_err(|e| e.to_string())?.domain;
                    if let std::collections::hash_map::Entry::Vacant(e) = conns.entry(drank) {
                        e.insert(self.connect(drank, p)?);
                    }
                    status.state = "pulling".into();
                    let (s, t) = (&conns[&rank], &conns[&drank]);
                    let st = copy_dkey(
                        &Side {
                            client: &s.client,
                            coh: &s.conts[cont],
                        },
                        &Side {
                            client: &t.client,
                            coh: &t.conts[cont],
                        },
                        oid,
                        &DKey(dkey.0.clone()),
                    )
                    .map_err(|e| format!("copy {oid} from engine {rank} to {drank}: {e}"))?;
                    status.recs_copied += st.records;
                    status.bytes_copied += st.bytes;
                    copied |= st.records > 0;
                    let w = throttle.take(st.records, Instant::now());
                    if !w.is_zero() {
                        std::thread::sleep(w);
                    }
                }
            }
        }
        Ok(copied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::PoolSvcState;

    fn state() -> PoolSvcState {
        let mut s = PoolSvcState::default();
        s.apply(&Command::CreatePool {
            pool: "p".into(),
            domains: 3,
            per_domain: 1,
        });
        s
    }

    fn set(s: &mut PoolSvcState, d: u32, st: &str) {
        let r = s.apply(&Command::SetDomainState {
            pool: "p".into(),
            domain: d,
            state: st.into(),
        });
        assert!(matches!(r, Reply::MapVersion(_)), "{r:?}");
    }

    #[test]
    fn a_job_is_needed_after_exclusion_and_for_up_targets_only() {
        let mut s = state();
        assert!(!needs_rebuild(&s.pools["p"]), "a fresh pool");
        set(&mut s, 1, "DOWN");
        assert!(
            !needs_rebuild(&s.pools["p"]),
            "DOWN: DAOS waits for EXCLUDED"
        );
        set(&mut s, 1, "EXCLUDED");
        assert!(needs_rebuild(&s.pools["p"]));
        // the job completes: its map becomes the base
        let done = RebuildStatus {
            version: s.pools["p"].map().version(),
            state: "done".into(),
            base_map: s.pools["p"].map().to_text(),
            ..Default::default()
        };
        s.apply(&Command::SetRebuild {
            pool: "p".into(),
            status: Box::new(done.clone()),
        });
        assert!(!needs_rebuild(&s.pools["p"]));
        // an interrupted job is taken up again
        let mut mid = done.clone();
        mid.state = "pulling".into();
        s.apply(&Command::SetRebuild {
            pool: "p".into(),
            status: Box::new(mid),
        });
        assert!(needs_rebuild(&s.pools["p"]));
        s.apply(&Command::SetRebuild {
            pool: "p".into(),
            status: Box::new(done.clone()),
        });
        // the engine comes back: UP → a (reintegration) job
        set(&mut s, 1, "UP");
        assert!(needs_rebuild(&s.pools["p"]));
        set(&mut s, 1, "UP-IN");
        assert!(!needs_rebuild(&s.pools["p"]));
    }

    #[test]
    fn an_older_rebuild_status_is_refused() {
        let mut s = state();
        let st = |v: u32| RebuildStatus {
            version: v,
            state: "scanning".into(),
            ..Default::default()
        };
        let w = |s: &mut PoolSvcState, v| {
            s.apply(&Command::SetRebuild {
                pool: "p".into(),
                status: Box::new(st(v)),
            })
        };
        assert_eq!(w(&mut s, 3), Reply::Done);
        assert!(matches!(w(&mut s, 2), Reply::Refused(_)));
        assert_eq!(s.pools["p"].rebuild.version, 3);
        assert_eq!(w(&mut s, 3), Reply::Done);
    }
}
