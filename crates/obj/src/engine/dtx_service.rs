//! The engine's DTX driver: the thread `obj-dtx` runs the [`super::dtx`]
//! core with real messages, the wall clock and the engine's targets.
//!
//! - A client's `DtxUpdate` (this engine is the leader) and engine-to-engine
//!   `DtxMsg`s come from the network thread ([`DtxEvent`]); a `DtxMsg` is
//!   answered at once (empty) and handled here: the DTX messages are one-way
//!   datagrams, the core resends and asks on its timers.
//! - Messages to another engine go through one sender thread per peer (a
//!   blocking [`Client`]).
//! - Peers down: where the engine hosts a pool-service replica, the pool
//!   map it applies ([`MapVersions::down_ranks`]: engines with a target
//!   DOWN or EXCLUDED) is the only source, as in DAOS — checked every tick,
//!   a rank entering the set is reported down to the core, one leaving it
//!   up. Without a map (a lone engine, the in-process tests), a peer whose
//!   connection is refused is reported down (TCP on the engines' addresses:
//!   refused = the process is gone; a timeout is not taken as down).
//! - `Apply` goes to the target owning the object as
//!   [`TargetMsg::DtxApply`] at the transaction's epoch; its completion comes
//!   back after the target's commit (durable), then the leader answers the
//!   client and a follower releases the key.
//! - Held keys ([`HeldKeys`]): a fetch of a key with a prepared update is
//!   answered `InProgress` by the network thread.
//! - The pool and container are named by label in the update; this thread
//!   opens them on its own engine through a loopback client connection to
//!   get a container handle the targets know.
//!
//! - Records ([`super::dtx::LogRec`]: prepared entries, the leader's
//!   intents, outcomes) go to `DATA_DIR/dtx.redb` ([`super::dtx_log`]), one
//!   transaction per batch of actions, durable before the messages that
//!   depend on them are sent; a restarted engine reloads them, holds the
//!   prepared keys again and resolves them by the resync rules.
//!
//! The engine's rank is the one the first DTX request names for it (the
//! client's placement; recorded in the log, so a restarted engine knows it
//! at once); a later request naming another rank is refused.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use super::dtx::{Action, Dtx, DtxConfig, DtxId, LogRec, Msg, Outcome, Rank, Update};
use super::dtx_log::DtxLog;
use super::hlc::SharedHlc;
use super::map_version::MapVersions;
use super::target::TargetMsg;
use crate::client::{Client, Error as ClientError};
use crate::dtx_op::{held_keys, write_participants, DtxOp, DtxWrite};
use crate::rpc::frame::{encode_reply, encode_stale_map};
use crate::rpc::msg::{is_striped, object_target, Request, WireOid};
use crate::rpc::tcp::{ConnId, ReplySender};
use crate::rpc::{HeaderRepr, Reply, Status};
use crate::types::{Epoch, ObjectId};

pub use crate::dtx_op::held_key;

/// Keys with a prepared update (counted); read by the network threads.
#[derive(Debug, Default)]
pub struct HeldKeys {
    n: AtomicUsize,
    keys: Mutex<HashMap<Vec<u8>, u32>>,
}

impl HeldKeys {
    /// Whether `key` is held (no lock while nothing is held).
    pub fn is_held(&self, key: &[u8]) -> bool {
        self.n.load(Ordering::Acquire) > 0 && self.keys.lock().is_ok_and(|k| k.contains_key(key))
    }
    /// Whether a fetch of `dkey` of `oid` must wait: the dkey or the whole
    /// object is held.
    pub fn is_held_dkey(&self, oid: WireOid, dkey: &[u8]) -> bool {
        if self.n.load(Ordering::Acquire) == 0 {
            return false;
        }
        let Ok(k) = self.keys.lock() else {
            return false;
        };
        k.contains_key(&held_key(oid, dkey)) || k.contains_key(&held_key(oid, &[]))
    }
    pub fn any(&self) -> bool {
        self.n.load(Ordering::Acquire) > 0
    }
    fn hold(&self, keys: &[Vec<u8>]) {
        if let Ok(mut k) = self.keys.lock() {
            for key in keys {
                *k.entry(key.clone()).or_default() += 1;
            }
            self.n.store(k.len(), Ordering::Release);
        }
    }
    fn release(&self, keys: &[Vec<u8>]) {
        if let Ok(mut k) = self.keys.lock() {
            for key in keys {
                if let Some(c) = k.get_mut(key) {
                    *c -= 1;
                    if *c == 0 {
                        k.remove(key);
                    }
                }
            }
            self.n.store(k.len(), Ordering::Release);
        }
    }
}

/// What the `obj-dtx` thread is told.
pub enum DtxEvent {
    /// A client's `DtxUpdate` (request body).
    Client {
        conn: ConnId,
        hdr: HeaderRepr,
        body: Vec<u8>,
    },
    /// An engine's `DtxMsg` (request body; already answered).
    Peer {
        body: Vec<u8>,
    },
    /// A target finished a `DtxApply`.
    Applied {
        id: DtxId,
        result: Result<(), Status>,
    },
    /// The connection to `to` was refused.
    Unreachable {
        to: Rank,
    },
    Stop,
}

/// The running driver.
pub struct DtxService {
    tx: Sender<DtxEvent>,
    thread: Option<JoinHandle<()>>,
}

impl DtxService {
    /// `data_dir`: where the log lives (`None`: records are not kept, a
    /// restart forgets prepared entries — tests of the protocol alone).
    /// `map`: the pool maps the engine's pool-service replica publishes
    /// (peers down come from them once one is known).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        my_addr: String,
        data_dir: Option<PathBuf>,
        map: Option<Arc<MapVersions>>,
        hlc: Arc<SharedHlc>,
        held: Arc<HeldKeys>,
        targets: Vec<super::target::TargetTx>,
        replies: ReplySender,
    ) -> std::io::Result<DtxService> {
        let log = match data_dir {
            Some(d) => Some(
                DtxLog::open(&d.join("dtx.redb"))
                    .map_err(|e| std::io::Error::other(e.to_string()))?,
            ),
            None => {
                warn!("dtx: no data directory: prepared entries are not persisted");
                None
            }
        };
        let (tx, rx) = channel();
        let me_tx = tx.clone();
        let thread = std::thread::Builder::new()
            .name("obj-dtx".into())
            .spawn(move || {
                let mut d = Driver {
                    me: None,
                    core: None,
                    log,
                    pending: Vec::new(),
                    rank_dirty: false,
                    map,
                    map_down: Vec::new(),
                    my_addr,
                    hlc,
                    held,
                    targets,
                    replies,
                    tx: me_tx,
                    addrs: HashMap::new(),
                    peers: HashMap::new(),
                    local: None,
                    cohs: HashMap::new(),
                    clients: HashMap::new(),
                    applying: HashMap::new(),
                };
                d.restore();
                d.run(rx)
            })?;
        Ok(DtxService {
            tx,
            thread: Some(thread),
        })
    }

    pub fn sender(&self) -> Sender<DtxEvent> {
        self.tx.clone()
    }

    pub fn stop(&mut self) {
        let _ = self.tx.send(DtxEvent::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DtxService {
    /// An engine that failed to start drops it without `stop`.
    fn drop(&mut self) {
        self.stop();
    }
}

struct Driver {
    me: Option<Rank>,
    core: Option<Dtx>,
    log: Option<DtxLog>,
    /// Records to write before the next message goes out.
    pending: Vec<LogRec>,
    /// The rank is not in the log yet.
    rank_dirty: bool,
    map: Option<Arc<MapVersions>>,
    /// The ranks the pool map had down at the last tick.
    map_down: Vec<Rank>,
    my_addr: String,
    hlc: Arc<SharedHlc>,
    held: Arc<HeldKeys>,
    targets: Vec<super::target::TargetTx>,
    replies: ReplySender,
    tx: Sender<DtxEvent>,
    addrs: HashMap<Rank, String>,
    peers: HashMap<Rank, Sender<PeerMsg>>,
    /// Loopback connection to this engine, and container handles on it by
    /// (pool, cont) label.
    local: Option<Client>,
    cohs: HashMap<(String, String), u64>,
    /// The client waiting for each transaction led here.
    clients: HashMap<DtxId, (ConnId, HeaderRepr)>,
    /// Transactions being applied: the keys to release afterwards, and
    /// whether their `Resolved` record waits for the apply.
    applying: HashMap<DtxId, (Vec<Vec<u8>>, bool)>,
}

/// To a peer's sender thread: an encoded message and the addresses to send
/// with it.
type PeerMsg = (Vec<u8>, Vec<(Rank, String)>);

const TICK: Duration = Duration::from_millis(5);

impl Driver {
    /// A restarted engine: its rank, peers and records from the log.
    fn restore(&mut self) {
        let Some(log) = &self.log else { return };
        let loaded = match log.load(DtxConfig::default().keep) {
            Ok(l) => l,
            Err(e) => {
                error!(error = %e, "dtx: the log cannot be read: prepared entries are lost");
                return;
            }
        };
        let Some(rank) = loaded.rank else { return };
        self.addrs.extend(loaded.addrs);
        let prepared = loaded
            .recs
            .iter()
            .filter(|r| matches!(r, LogRec::Prepared { .. }))
            .count();
        let incarnation = new_incarnation();
        let (core, holds) = Dtx::restore(
            rank,
            incarnation,
            DtxConfig::default(),
            Instant::now(),
            loaded.recs,
        );
        info!(
            rank,
            incarnation, prepared, "dtx: restarted with the log's prepared entries"
        );
        self.me = Some(rank);
        self.core = Some(core);
        self.run_actions(holds);
    }

    fn run(mut self, rx: Receiver<DtxEvent>) {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(DtxEvent::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(ev) => self.event(ev),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                self.check_map(now);
                if let Some(c) = self.core.as_mut() {
                    let a = c.tick(now);
                    self.run_actions(a);
                }
            }
        }
        if let Some(c) = &self.core {
            info!(rank = ?self.me, stats = ?c.stats, in_flight = ?c.in_flight(), "dtx stopped");
        }
    }

    /// The ranks the pool map has down, when a map is known.
    fn map_down_now(&self) -> Option<Vec<Rank>> {
        self.map.as_ref().and_then(|m| m.down_ranks())
    }

    /// Peers entering / leaving the pool map's down set, to the core.
    fn check_map(&mut self, now: Instant) {
        let Some(down) = self.map_down_now() else {
            return;
        };
        if down == self.map_down {
            return;
        }
        let was = std::mem::replace(&mut self.map_down, down.clone());
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let mut acts = Vec::new();
        for r in &down {
            if !was.contains(r) {
                info!(rank = r, "dtx: peer down in the pool map");
                acts.extend(core.peer_out(now, *r));
            }
        }
        for r in &was {
            if !down.contains(r) {
                info!(rank = r, "dtx: peer back in the pool map");
                core.peer_up(*r);
            }
        }
        self.run_actions(acts);
    }

    /// The core, made when the engine learns its rank.
    fn core_for(&mut self, rank: Rank) -> Option<&mut Dtx> {
        match self.me {
            Some(r) if r != rank => {
                warn!(
                    me = r,
                    asked = rank,
                    "DTX request for another rank: refused"
                );
                return None;
            }
            Some(_) => {}
            None => {
                let incarnation = new_incarnation();
                info!(rank, incarnation, "dtx: this engine is rank {rank}");
                self.me = Some(rank);
                self.rank_dirty = true;
                let mut core = Dtx::new(rank, incarnation, DtxConfig::default());
                for &r in &self.map_down {
                    // nothing in flight yet: no actions
                    let _ = core.peer_out(Instant::now(), r);
                }
                self.core = Some(core);
            }
        }
        self.core.as_mut()
    }

    fn event(&mut self, ev: DtxEvent) {
        let now = Instant::now();
        match ev {
            DtxEvent::Client { conn, hdr, body } => self.client(now, conn, hdr, body),
            DtxEvent::Peer { body } => {
                let Ok(Request::DtxMsg {
                    from,
                    from_addr,
                    to,
                    msg,
                    peers,
                }) = Request::parse(crate::rpc::Opcode::DtxMsg, &body, 0)
                else {
                    debug!("malformed DTX message dropped");
                    return;
                };
                let msg = match Msg::parse(&msg) {
                    Ok(m) => m,
                    Err(e) => {
                        debug!(from, error = %e, "malformed DTX message dropped");
                        return;
                    }
                };
                self.addrs.insert(from, from_addr);
                for (r, a) in peers {
                    if Some(r) != self.me {
                        self.addrs.entry(r).or_insert(a);
                    }
                }
                // with a pool map, liveness is the map's
                let map_down = self.map_down_now().map(|d| d.contains(&from));
                let Some(core) = self.core_for(to) else {
                    return;
                };
                if map_down != Some(true) {
                    core.peer_up(from);
                }
                let a = core.handle(now, from, msg);
                self.run_actions(a);
            }
            DtxEvent::Applied { id, result } => {
                let (keys, resolved) = self.applying.remove(&id).unwrap_or_default();
                self.held.release(&keys);
                if let Err(st) = result {
                    // the prepared record stays: a restart applies it again
                    error!(?id, status = %st, "DTX apply failed on this replica");
                } else if resolved {
                    self.pending.push(LogRec::Resolved {
                        id,
                        committed: true,
                    });
                    self.flush_log();
                }
                if let Some(core) = self.core.as_mut() {
                    if core.is_leading(&id) {
                        let a = core.applied(now, id, result.is_ok());
                        self.run_actions(a);
                    }
                }
            }
            DtxEvent::Unreachable { to } => {
                if self.map_down_now().is_some() {
                    debug!(
                        to,
                        "dtx: connection refused (the pool map decides if it is down)"
                    );
                    return;
                }
                if let Some(core) = self.core.as_mut() {
                    let a = core.peer_down(now, to);
                    self.run_actions(a);
                }
            }
            DtxEvent::Stop => {}
        }
    }

    fn reply(&self, conn: ConnId, hdr: &HeaderRepr, r: Result<u64, Status>) {
        let mut frame = Vec::new();
        match r {
            Ok(epoch) => encode_reply(
                &mut frame,
                hdr.rpc_id,
                hdr.opcode,
                Status::Ok,
                &Reply::Updated { epoch },
                &[],
            ),
            Err(st) => encode_reply(&mut frame, hdr.rpc_id, hdr.opcode, st, &Reply::Empty, &[]),
        }
        self.replies.send(conn, frame);
    }

    fn client(&mut self, now: Instant, conn: ConnId, hdr: HeaderRepr, body: Vec<u8>) {
        let req = match Request::parse(hdr.opcode, &body, 0) {
            Ok(Request::DtxUpdate {
                t,
                pool,
                cont,
                op,
                replicas,
            }) if !replicas.is_empty() && t.epoch == 0 => (t, pool, cont, op, replicas),
            Ok(_) => return self.reply(conn, &hdr, Err(Status::Invalid)),
            Err(_) => return self.reply(conn, &hdr, Err(Status::Proto)),
        };
        let (t, pool, cont, op, replicas) = req;
        let op = match crate::dtx_op::DtxOp::from_bytes(&op) {
            Ok(op) => op,
            Err(_) => return self.reply(conn, &hdr, Err(Status::Proto)),
        };
        if let Err(e) = op.validate() {
            debug!(error = %e, "DTX operation refused");
            return self.reply(conn, &hdr, Err(Status::Invalid));
        }
        // the participants must be the ones this engine's pool map places
        // the write on: a client with an old map, or one that made its own
        // (its DOWN marks), must not write around a serving replica
        if let Err(v) = self.check_placement(&pool, t.oid, &op, &replicas, hdr.map_version) {
            let mut frame = Vec::new();
            encode_stale_map(&mut frame, hdr.rpc_id, hdr.opcode, v);
            self.replies.send(conn, frame);
            return;
        }
        for (r, a) in &replicas[1..] {
            self.addrs.insert(*r, a.clone());
        }
        let me = replicas[0].0;
        let followers: Vec<Rank> = replicas[1..].iter().map(|(r, _)| *r).collect();
        if followers.contains(&me) {
            return self.reply(conn, &hdr, Err(Status::Invalid));
        }
        let epoch = self.hlc.now().0;
        let update = Update {
            keys: held_keys(t.oid, &op),
            payload: DtxWrite {
                pool,
                cont,
                oid: t.oid,
                op,
            }
            .emit(),
        };
        let Some(core) = self.core_for(me) else {
            return self.reply(conn, &hdr, Err(Status::Invalid));
        };
        let (id, a) = core.begin(now, epoch, update, followers);
        self.clients.insert(id, (conn, hdr));
        self.run_actions(a);
    }

    /// The leader's check of a client's participant list against its own
    /// pool map (DAOS's leader places the write itself): with a map of
    /// `pool` known, the ranks must be exactly the serving members
    /// [`write_participants`] names (any order: the client may pick another
    /// leader among them). `Err(version)`: refuse as a stale map with this
    /// engine's version — the client fetches the map, re-places and
    /// retries (a client whose map is newer than this engine's sees a
    /// version not newer than its own and tries another leader or waits).
    /// No map (an engine without a pool service): not checked.
    fn check_placement(
        &self,
        pool: &str,
        oid: WireOid,
        op: &DtxOp,
        replicas: &[(Rank, String)],
        client_version: Option<u32>,
    ) -> Result<(), u32> {
        let Some(map) = self.map.as_ref().and_then(|m| m.pool_map(pool)) else {
            return Ok(());
        };
        let oid = ObjectId {
            hi: oid.hi,
            lo: oid.lo,
        };
        let mut want = match write_participants(oid, &map, op.dkey()) {
            Ok((w, _)) => w,
            Err(e) => {
                warn!(%oid, error = %e, "DTX: no layout under this engine's map: refused");
                return Err(map.version());
            }
        };
        let mut got: Vec<Rank> = replicas.iter().map(|(r, _)| *r).collect();
        want.sort_unstable();
        got.sort_unstable();
        if want == got {
            return Ok(());
        }
        warn!(
            %oid,
            client_map = ?client_version,
            engine_map = map.version(),
            participants = ?got,
            placed = ?want,
            "DTX: the client's participants disagree with this engine's pool map: refused as stale"
        );
        Err(map.version())
    }

    /// Writes the pending records: durable (fsync) unless they are only
    /// commits' `Resolved` records.
    fn flush_log(&mut self) {
        if self.pending.is_empty() && !self.rank_dirty {
            return;
        }
        let Some(log) = &self.log else {
            self.pending.clear();
            return;
        };
        let durable = self.rank_dirty
            || self.pending.iter().any(|r| {
                !matches!(
                    r,
                    LogRec::Resolved {
                        committed: true,
                        ..
                    }
                )
            });
        let mut addrs: Vec<(Rank, String)> = Vec::new();
        for r in &self.pending {
            if let LogRec::Prepared { participants, .. } = r {
                for p in participants {
                    if Some(*p) != self.me && !addrs.iter().any(|(q, _)| q == p) {
                        if let Some(a) = self.addrs.get(p) {
                            addrs.push((*p, a.clone()));
                        }
                    }
                }
            }
        }
        let rank = if self.rank_dirty { self.me } else { None };
        match log.write(rank, &self.pending, &addrs, durable) {
            Ok(()) => self.rank_dirty = false,
            Err(e) => error!(
                error = %e,
                "dtx: writing the log failed: these prepared entries will not survive a restart"
            ),
        }
        self.pending.clear();
    }

    fn run_actions(&mut self, actions: Vec<Action>) {
        let mut q: std::collections::VecDeque<Action> = actions.into();
        while let Some(a) = q.pop_front() {
            if !matches!(a, Action::Persist(_)) {
                // records are durable before anything that depends on them
                self.flush_log();
            }
            match a {
                Action::Persist(rec) => {
                    if let LogRec::Resolved {
                        id,
                        committed: true,
                    } = &rec
                    {
                        if let Some(e) = self.applying.get_mut(id) {
                            // written once the apply is durable
                            e.1 = true;
                            continue;
                        }
                    }
                    self.pending.push(rec);
                }
                Action::Send { to, msg } => self.send(to, &msg),
                Action::Hold { keys } => self.held.hold(&keys),
                Action::Release { keys } => self.held.release(&keys),
                Action::Apply { id, epoch, update } => {
                    // a follower's commit is Apply then Release of the same
                    // keys: the release waits until the apply is durable
                    let release = q
                        .front()
                        .and_then(|n| match n {
                            Action::Release { keys } if *keys == update.keys => Some(()),
                            _ => None,
                        })
                        .is_some();
                    if release {
                        q.pop_front();
                    }
                    if let Err(st) = self.apply(id, epoch, &update, release) {
                        // as if the target had failed
                        let _ = self.tx.send(DtxEvent::Applied {
                            id,
                            result: Err(st),
                        });
                    }
                }
                Action::Reply { id, outcome } => {
                    let Some((conn, hdr)) = self.clients.remove(&id) else {
                        continue;
                    };
                    let r = match outcome {
                        Outcome::Committed { epoch } => Ok(epoch),
                        Outcome::Aborted {
                            refused_by: Some(r),
                            ..
                        } if Some(r) == self.me => Err(Status::Io),
                        Outcome::Aborted {
                            refused_by: Some(_),
                            ..
                        } => Err(Status::Busy),
                        Outcome::Aborted { .. } => Err(Status::Unreach),
                        Outcome::Unknown => Err(Status::TimedOut),
                    };
                    self.reply(conn, &hdr, r);
                }
            }
        }
        self.flush_log();
    }

    /// Sends `update` to its target at `epoch`; `release`: the keys are
    /// released once it is durable.
    fn apply(
        &mut self,
        id: DtxId,
        epoch: u64,
        update: &Update,
        release: bool,
    ) -> Result<(), Status> {
        self.applying.insert(
            id,
            (
                if release {
                    update.keys.clone()
                } else {
                    Vec::new()
                },
                false,
            ),
        );
        let p = DtxWrite::parse(&update.payload).map_err(|_| Status::Proto)?;
        let coh = self.local_coh(&p.pool, &p.cont)?;
        let n = self.targets.len();
        let dkey = match &p.op {
            DtxOp::Update { dkey, .. }
            | DtxOp::PunchDkey { dkey }
            | DtxOp::PunchAkeys { dkey, .. } => Some(dkey.as_slice()),
            DtxOp::PunchObj => None,
        };
        // the dkey's target; a striped object's punch goes to every target
        // and is applied when all of them are
        let targets: Vec<usize> = match (dkey, is_striped(p.oid)) {
            (None, true) => (0..n).collect(),
            (d, _) => vec![object_target(p.oid, d, 0, n).ok_or(Status::Invalid)?],
        };
        let tx = self.tx.clone();
        let left = Arc::new(Mutex::new((targets.len(), Ok(()))));
        for t in targets {
            let (tx, left) = (tx.clone(), left.clone());
            self.targets[t]
                .send(TargetMsg::DtxApply {
                    coh,
                    oid: ObjectId {
                        hi: p.oid.hi,
                        lo: p.oid.lo,
                    },
                    op: p.op.clone(),
                    epoch: Epoch(epoch),
                    done: Box::new(move |result| {
                        let mut g = left.lock().unwrap_or_else(|e| e.into_inner());
                        g.0 -= 1;
                        if let Err(st) = result {
                            if g.1.is_ok() {
                                g.1 = Err(st);
                            }
                        }
                        if g.0 == 0 {
                            let _ = tx.send(DtxEvent::Applied { id, result: g.1 });
                        }
                    }),
                })
                .map_err(|_| Status::Shutdown)?;
        }
        Ok(())
    }

    /// A container handle on this engine for (pool, cont) labels.
    fn local_coh(&mut self, pool: &str, cont: &str) -> Result<u64, Status> {
        if let Some(&c) = self.cohs.get(&(pool.to_string(), cont.to_string())) {
            return Ok(c);
        }
        let to_st = |e: ClientError| {
            warn!(error = %e, "dtx: opening the container on this engine failed");
            e.status().unwrap_or(Status::Misc)
        };
        if self.local.is_none() {
            self.local =
                Some(Client::connect_with(&self.my_addr, Duration::from_secs(10)).map_err(to_st)?);
        }
        let c = self.local.as_ref().ok_or(Status::Misc)?;
        let poh = c
            .pool_connect(pool, None)
            .and_then(|p| p.get())
            .map_err(to_st)?;
        let coh = c
            .cont_open(&poh, cont, None)
            .and_then(|p| p.get())
            .map_err(to_st)?;
        self.cohs
            .insert((pool.to_string(), cont.to_string()), coh.coh);
        Ok(coh.coh)
    }

    fn send(&mut self, to: Rank, msg: &Msg) {
        let Some(me) = self.me else { return };
        let mut m = Vec::new();
        msg.emit(&mut m);
        let peers = match msg {
            Msg::Prepare { participants, .. } => participants
                .iter()
                .filter(|&&r| r != me && r != to)
                .filter_map(|r| self.addrs.get(r).map(|a| (*r, a.clone())))
                .collect(),
            _ => Vec::new(),
        };
        if !self.peers.contains_key(&to) {
            let Some(addr) = self.addrs.get(&to).cloned() else {
                warn!(to, "dtx: no address for rank");
                return;
            };
            let (ptx, prx) = channel::<PeerMsg>();
            let (events, from_addr) = (self.tx.clone(), self.my_addr.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("obj-dtx-to{to}"))
                .spawn(move || peer_sender(me, from_addr, to, addr, prx, events));
            if spawned.is_err() {
                warn!(to, "dtx: cannot start a sender thread");
                return;
            }
            self.peers.insert(to, ptx);
        }
        if let Some(p) = self.peers.get(&to) {
            let _ = p.send((m, peers));
        }
    }
}

/// One peer's sender: each message as a `DtxMsg` RPC on one connection;
/// a refused connection is reported, the message dropped (the core resends).
fn peer_sender(
    me: Rank,
    from_addr: String,
    to: Rank,
    addr: String,
    rx: Receiver<PeerMsg>,
    events: Sender<DtxEvent>,
) {
    let mut conn: Option<Client> = None;
    while let Ok((m, peers)) = rx.recv() {
        if crate::fault::drops_to_addr(&addr) {
            continue; // a cut link (fault injection): lost, as a packet
        }
        if conn.is_none() {
            match Client::connect_with(&addr, Duration::from_secs(2)) {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    debug!(to, %addr, error = %e, "dtx: peer unreachable");
                    if matches!(e, ClientError::Unreachable { .. }) {
                        let _ = events.send(DtxEvent::Unreachable { to });
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_ref() else { continue };
        if let Err(e) = c
            .dtx_msg(me, &from_addr, to, m, peers)
            .and_then(|p| p.get())
        {
            debug!(to, error = %e, "dtx: message not delivered");
            conn = None;
        }
    }
}

/// A number a restarted process never reuses (its transaction ids differ).
fn new_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(40)
}
