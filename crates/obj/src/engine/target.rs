//! One target: a poller thread that owns its shard of every pool (one
//! [`ObjectStore`] per pool) and the container handles opened on it. Object
//! I/O arrives from the network thread, control operations from the
//! management thread, both over the target's channel; nothing else touches
//! the stores, so the data path takes no lock.
//!
//! Group commit: the thread takes every message already queued (up to
//! [`BATCH`]), executes them, calls `commit` once per pool it changed (data
//! flushed, index fsynced) and only then sends the replies, so an update is
//! acknowledged only when it will survive a crash. The commit can be
//! pipelined (`commit_start` / `commit_poll`; vos: `VosConfig::commit_pipeline`,
//! off by default): while a batch's commit runs, the thread
//! executes the messages that arrive meanwhile as the next batch, and sends
//! the first batch's replies when its commit reports durable (before the
//! next batch's commit starts).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SendError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::backend::StoreBackend;
use super::hlc::SharedHlc;
use super::status_of;
use super::target_net::{TargetNet, TargetReplies};
use crate::rpc::frame::{encode_reply, encode_reply_head, split_body};
use crate::rpc::msg::{
    BulkSeg, FetchedIod, IodType as WireIodType, PunchWhat, Reply, Request, WireIod, WireRecx,
    MAX_LIST, QUERY_MAX_DKEY, QUERY_MAX_RECX,
};
use crate::rpc::tcp::{ConnId, ReplySender};
use crate::rpc::{HeaderRepr, Status};
use crate::types::{
    AKey, AggregateStats, Anchor, ContId, DKey, Epoch, Iod, IodType, ObjectId, ObjectStore, PoolId,
    Recx, SgList, Snapshot, SpaceInfo, StoreError, EPOCH_MAX,
};

/// Most messages executed between two commits.
pub const BATCH: usize = 64;
/// Most keys or extents one listing reply carries.
pub const MAX_LIST_REPLY: usize = 1024;

/// A control operation from the management thread.
#[derive(Debug)]
pub enum CtlOp {
    /// Open (or create) this target's shard of `pool` in `dir`.
    OpenPool {
        pool: PoolId,
        dir: PathBuf,
        size: u64,
        create: bool,
    },
    /// Close the shard and delete its files.
    DestroyPool {
        pool: PoolId,
        dir: PathBuf,
    },
    ContCreate {
        pool: PoolId,
        cont: ContId,
    },
    ContDestroy {
        pool: PoolId,
        cont: ContId,
    },
    /// Make `coh` name `(pool, cont)` on this target.
    OpenHandle {
        coh: u64,
        pool: PoolId,
        cont: ContId,
    },
    CloseHandle {
        coh: u64,
    },
    SnapCreate {
        pool: PoolId,
        cont: ContId,
        epoch: Epoch,
    },
    SnapDestroy {
        pool: PoolId,
        cont: ContId,
        epoch: Epoch,
    },
    SnapList {
        pool: PoolId,
        cont: ContId,
    },
    Space {
        pool: PoolId,
    },
    /// VOS aggregation of this target's shard of `(pool, cont)` up to `upto`
    /// (versions no snapshot and no read at or above `upto` needs are dropped,
    /// their space freed), committed.
    Aggregate {
        pool: PoolId,
        cont: ContId,
        upto: Epoch,
    },
}

/// What a control operation returns.
#[derive(Debug)]
pub enum CtlOut {
    Done,
    Snapshots(Vec<Snapshot>),
    Space(SpaceInfo),
    Aggregated(AggregateStats),
}

pub type CtlResult = Result<CtlOut, Status>;

/// A message to a target thread.
pub enum TargetMsg {
    /// An object I/O request from client connection `conn`.
    Io {
        conn: ConnId,
        hdr: HeaderRepr,
        body: Vec<u8>,
        received: Instant,
    },
    /// Several `Io` messages of one network-thread round.
    IoBatch(Vec<TargetMsg>),
    Ctl {
        op: CtlOp,
        reply: Sender<CtlResult>,
    },
    /// DTX (`super::dtx_service`): an update or punch at the transaction's
    /// epoch (the one epoch of every replica; the engine's clock observes
    /// it). `done` runs after the batch's commit (durable) or failure.
    DtxApply {
        coh: u64,
        oid: ObjectId,
        op: crate::dtx_op::DtxOp,
        epoch: Epoch,
        done: DtxDone,
    },
    Stop,
}

/// The sending side of a target's channel: `send` also wakes the target
/// when it sleeps in `poll(2)` (management, DTX, the network threads).
#[derive(Debug, Clone)]
pub struct TargetTx {
    tx: Sender<TargetMsg>,
    waker: Option<Arc<super::target_net::TargetWaker>>,
}

impl TargetTx {
    /// A sender of a target that blocks on its channel (no wake-up needed).
    pub fn plain(tx: Sender<TargetMsg>) -> TargetTx {
        TargetTx { tx, waker: None }
    }

    pub fn with_waker(
        tx: Sender<TargetMsg>,
        waker: Arc<super::target_net::TargetWaker>,
    ) -> TargetTx {
        TargetTx {
            tx,
            waker: Some(waker),
        }
    }

    pub fn send(&self, m: TargetMsg) -> Result<(), SendError<TargetMsg>> {
        self.tx.send(m)?;
        if let Some(w) = &self.waker {
            w.wake();
        }
        Ok(())
    }
}

/// What a target's own connections hand it (admitted requests): queued as
/// [`TargetMsg::Io`] for its next batch.
fn queue_io(
    queued: &mut std::collections::VecDeque<TargetMsg>,
) -> impl FnMut(ConnId, HeaderRepr, Vec<u8>, Instant) + '_ {
    |conn, hdr, body, received| {
        queued.push_back(TargetMsg::Io {
            conn,
            hdr,
            body,
            received,
        })
    }
}

/// Called with the outcome of a [`TargetMsg::DtxApply`].
pub type DtxDone = Box<dyn FnOnce(Result<(), Status>) + Send>;

/// A reply waiting for the batch's commit.
struct Outgoing {
    conn: ConnId,
    hdr: HeaderRepr,
    result: Result<(Reply, Vec<Vec<u8>>), Status>,
    /// The pool this request changed (its reply waits for that commit).
    dirtied: Option<PoolId>,
    /// Not a client's: a DTX apply's completion (no reply frame).
    done: Option<DtxDone>,
}

/// A batch whose commit is in flight: its replies and the pools whose
/// commits run.
struct Committing {
    out: Vec<Outgoing>,
    running: Vec<PoolId>,
    failed: Vec<PoolId>,
}

/// How long the thread waits for a message before it looks at a running
/// commit again.
const COMMIT_POLL: Duration = Duration::from_micros(200);

/// A target's state, owned by its thread.
pub struct Target {
    id: usize,
    backend: Arc<dyn StoreBackend>,
    hlc: Arc<SharedHlc>,
    replies: TargetReplies,
    stores: HashMap<PoolId, Box<dyn ObjectStore>>,
    handles: HashMap<u64, (PoolId, ContId)>,
    /// Containers with versions an aggregation pass may still drop: the
    /// highest epoch written (or snapshot destroyed) since a pass last covered
    /// them. A pass skips the others (it would scan the container for nothing).
    unaggregated: HashMap<(PoolId, ContId), u64>,
    /// Requests executed (for logs).
    pub executed: u64,
}

impl Target {
    pub fn new(
        id: usize,
        backend: Arc<dyn StoreBackend>,
        hlc: Arc<SharedHlc>,
        replies: ReplySender,
    ) -> Self {
        Target {
            id,
            backend,
            hlc,
            replies: TargetReplies::new(replies),
            stores: HashMap::new(),
            handles: HashMap::new(),
            unaggregated: HashMap::new(),
            executed: 0,
        }
    }

    /// The thread's loop: until `Stop` or every sender is gone. With `net`
    /// (run to completion, [`super::target_net`]) the thread also serves its
    /// own connections: it sleeps in `poll(2)` instead of on the channel.
    pub fn run(mut self, rx: Receiver<TargetMsg>, mut net: Option<TargetNet>) {
        debug!(target_id = self.id, rtc = net.is_some(), "target started");
        let mut out: Vec<Outgoing> = Vec::with_capacity(BATCH);
        let mut dirty: Vec<PoolId> = Vec::new();
        let mut frame = Vec::new();
        let mut queued: std::collections::VecDeque<TargetMsg> = Default::default();
        let mut committing: Option<Committing> = None;
        'run: loop {
            // a message taken while a commit ran comes first
            let first = match queued.pop_front() {
                Some(m) => m,
                None => match &mut net {
                    None => match rx.recv() {
                        Ok(m) => m,
                        Err(_) => break 'run,
                    },
                    Some(net) => match self.next_work(net, &rx, &mut queued) {
                        Some(m) => m,
                        None => break 'run,
                    },
                },
            };
            let mut next = Some(first);
            let mut n = 0;
            while let Some(msg) = next.take() {
                match msg {
                    TargetMsg::IoBatch(v) => queued.extend(v),
                    TargetMsg::Stop => {
                        self.finish_commit(&mut committing, true, &mut frame);
                        self.flush(&mut out, &mut dirty, &mut frame);
                        break 'run;
                    }
                    TargetMsg::Ctl { op, reply } => {
                        // control operations commit on their own; earlier
                        // I/O of this batch is committed first
                        self.finish_commit(&mut committing, true, &mut frame);
                        self.flush(&mut out, &mut dirty, &mut frame);
                        let r = self.ctl(op);
                        let _ = reply.send(r);
                    }
                    TargetMsg::DtxApply {
                        coh,
                        oid,
                        op,
                        epoch,
                        done,
                    } => {
                        let o = self.dtx_apply(coh, oid, op, epoch, done);
                        if let Some(p) = o.dirtied {
                            if !dirty.contains(&p) {
                                dirty.push(p);
                            }
                        }
                        out.push(o);
                    }
                    TargetMsg::Io {
                        conn,
                        hdr,
                        body,
                        received,
                    } => {
                        let o = self.io(conn, hdr, &body, received);
                        if let Some(p) = o.dirtied {
                            if !dirty.contains(&p) {
                                dirty.push(p);
                            }
                        }
                        out.push(o);
                    }
                }
                n += 1;
                // a batch's messages are all executed; then more up to BATCH
                next =
                    queued
                        .pop_front()
                        .or_else(|| if n < BATCH { rx.try_recv().ok() } else { None });
            }
            // the commit pipeline: while the previous batch's commit runs,
            // messages that arrive are executed into this batch; once it is
            // durable (its replies sent), this batch's commit starts, and
            // the next messages gather beside it
            loop {
                if self.finish_commit(&mut committing, false, &mut frame) {
                    if !out.is_empty() || !dirty.is_empty() {
                        committing = self.commit_start(&mut out, &mut dirty, &mut frame);
                    }
                    if committing.is_none() {
                        break;
                    }
                } else if out.len() >= BATCH {
                    self.finish_commit(&mut committing, true, &mut frame);
                    continue;
                }
                match &mut net {
                    None => match rx.recv_timeout(COMMIT_POLL) {
                        Ok(m) => {
                            queued.push_back(m);
                            continue 'run;
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                            self.finish_commit(&mut committing, true, &mut frame);
                        }
                    },
                    Some(net) => {
                        // replies sent above leave now (this thread writes them)
                        net.write_all(&mut self.replies);
                        if let Some(m) = net.round(
                            &mut self.replies,
                            queue_io(&mut queued),
                            COMMIT_POLL,
                            || rx.try_recv().ok(),
                        ) {
                            queued.push_back(m);
                        }
                        match rx.try_recv() {
                            Ok(m) => queued.push_back(m),
                            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                                self.finish_commit(&mut committing, true, &mut frame);
                            }
                            Err(std::sync::mpsc::TryRecvError::Empty) => {}
                        }
                        if !queued.is_empty() {
                            continue 'run;
                        }
                    }
                }
            }
            if let Some(net) = &mut net {
                net.write_all(&mut self.replies);
            }
        }
        self.finish_commit(&mut committing, true, &mut frame);
        if let Some(net) = &mut net {
            net.write_all(&mut self.replies);
            net.close_all(&mut self.replies);
        }
        for (pool, s) in self.stores.iter_mut() {
            if let Err(e) = s.commit() {
                warn!(target_id = self.id, %pool, error = %e, "final commit failed");
            }
        }
        debug!(
            target_id = self.id,
            executed = self.executed,
            "target stopped"
        );
    }

    /// Starts the commits of the pools the batch changed; the batch's
    /// replies wait in the returned [`Committing`] for the ones still
    /// running (sent now if none is).
    fn commit_start(
        &mut self,
        out: &mut Vec<Outgoing>,
        dirty: &mut Vec<PoolId>,
        frame: &mut Vec<u8>,
    ) -> Option<Committing> {
        let mut c = Committing {
            out: Vec::new(),
            running: Vec::new(),
            failed: Vec::new(),
        };
        for p in dirty.drain(..) {
            if let Some(s) = self.stores.get_mut(&p) {
                match s.commit_start() {
                    Ok(true) => c.running.push(p),
                    Ok(false) => {}
                    Err(e) => {
                        warn!(target_id = self.id, pool = %p, error = %e, "commit failed");
                        c.failed.push(p);
                    }
                }
            }
        }
        if c.running.is_empty() {
            self.send(out, &c.failed, frame);
            return None;
        }
        c.out = std::mem::take(out);
        Some(c)
    }

    /// Polls (`wait`: waits for) the running commits of `c`; once all are
    /// done, sends the batch's replies and empties `c`. True when `c` is
    /// empty.
    fn finish_commit(
        &mut self,
        c: &mut Option<Committing>,
        wait: bool,
        frame: &mut Vec<u8>,
    ) -> bool {
        let Some(cm) = c.as_mut() else {
            return true;
        };
        let mut i = 0;
        while i < cm.running.len() {
            let p = cm.running[i];
            let r = match self.stores.get_mut(&p) {
                Some(s) => s.commit_poll(wait),
                None => Some(Err(StoreError::Index("pool closed".into()))),
            };
            match r {
                None => i += 1,
                Some(r) => {
                    cm.running.swap_remove(i);
                    if let Err(e) = r {
                        warn!(target_id = self.id, pool = %p, error = %e, "commit failed");
                        cm.failed.push(p);
                    }
                }
            }
        }
        if !cm.running.is_empty() {
            return false;
        }
        if let Some(mut cm) = c.take() {
            self.send(&mut cm.out, &cm.failed, frame);
        }
        true
    }

    /// The next message (run to completion): what the target's connections
    /// or its channel hold; sleeps in `poll(2)` when there is nothing. `None`
    /// when every sender is gone.
    fn next_work(
        &mut self,
        net: &mut TargetNet,
        rx: &Receiver<TargetMsg>,
        queued: &mut std::collections::VecDeque<TargetMsg>,
    ) -> Option<TargetMsg> {
        let mut wait = Duration::ZERO;
        loop {
            if let Some(m) = net.round(&mut self.replies, queue_io(queued), wait, || {
                rx.try_recv().ok()
            }) {
                return Some(m);
            }
            if let Some(m) = queued.pop_front() {
                return Some(m);
            }
            match rx.try_recv() {
                Ok(m) => return Some(m),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            // answers given at once (pings, refusals); closed connections go
            net.write_all(&mut self.replies);
            wait = Duration::MAX;
        }
    }

    /// Commits the pools the batch changed, then sends its replies (a failed
    /// commit turns the replies of that pool's changes into I/O errors).
    fn flush(&mut self, out: &mut Vec<Outgoing>, dirty: &mut Vec<PoolId>, frame: &mut Vec<u8>) {
        let mut failed: Vec<PoolId> = Vec::new();
        for p in dirty.drain(..) {
            if let Some(s) = self.stores.get_mut(&p) {
                if let Err(e) = s.commit() {
                    warn!(target_id = self.id, pool = %p, error = %e, "commit failed");
                    failed.push(p);
                }
            }
        }
        self.send(out, &failed, frame);
    }

    /// Sends a committed batch's replies (those of changes to a `failed`
    /// pool as I/O errors).
    fn send(&mut self, out: &mut Vec<Outgoing>, failed: &[PoolId], frame: &mut Vec<u8>) {
        let mut owe_wake = false;
        for o in out.drain(..) {
            let result = match (o.dirtied, o.result) {
                (Some(p), Ok(_)) if failed.contains(&p) => Err(Status::Io),
                (_, r) => r,
            };
            if let Some(done) = o.done {
                done(result.map(|_| ()));
                continue;
            }
            frame.clear();
            match result {
                Ok((rep, bulk)) => {
                    // the bulk leaves from the buffers the store filled
                    let n = bulk.iter().map(Vec::len).sum();
                    encode_reply_head(frame, o.hdr.rpc_id, o.hdr.opcode, &rep, n);
                    owe_wake |= self
                        .replies
                        .send_parts_quiet(o.conn, std::mem::take(frame), bulk);
                }
                Err(st) => {
                    encode_reply(frame, o.hdr.rpc_id, o.hdr.opcode, st, &Reply::Empty, &[]);
                    owe_wake |= self.replies.send_quiet(o.conn, std::mem::take(frame));
                }
            }
        }
        if owe_wake {
            self.replies.wake();
        }
    }

    fn ctl(&mut self, op: CtlOp) -> CtlResult {
        match op {
            CtlOp::OpenPool {
                pool,
                dir,
                size,
                create,
            } => {
                if self.stores.contains_key(&pool) {
                    return Ok(CtlOut::Done);
                }
                let s = self
                    .backend
                    .open(&dir, size, create)
                    .map_err(|e| {
                        warn!(target_id = self.id, %pool, dir = %dir.display(), error = %e, "opening pool shard failed");
                        status_of(&e)
                    })?;
                // restart: the clock goes above every epoch the shard holds
                // (updates, punches, snapshots, aggregation), whatever the wall
                // clock says
                let mut s = s;
                let high = s.epoch_high_water().map_err(|e| status_of(&e))?;
                self.hlc.observe(high);
                // what an earlier run left unaggregated is not known: one pass each
                for c in s.cont_list().map_err(|e| status_of(&e))? {
                    self.unaggregated.insert((pool, c), high.0);
                }
                self.stores.insert(pool, s);
                Ok(CtlOut::Done)
            }
            CtlOp::DestroyPool { pool, dir } => {
                self.stores.remove(&pool);
                self.handles.retain(|_, (p, _)| *p != pool);
                self.unaggregated.retain(|(p, _), _| *p != pool);
                self.backend.destroy(&dir).map_err(|e| {
                    warn!(target_id = self.id, %pool, error = %e, "removing pool shard failed");
                    Status::Io
                })?;
                Ok(CtlOut::Done)
            }
            CtlOp::ContCreate { pool, cont } => {
                let s = self.store(pool)?;
                s.cont_create(cont).map_err(|e| status_of(&e))?;
                s.commit().map_err(|e| status_of(&e))?;
                Ok(CtlOut::Done)
            }
            CtlOp::ContDestroy { pool, cont } => {
                let s = self.store(pool)?;
                match s.cont_destroy(cont) {
                    Ok(()) | Err(StoreError::NoContainer(_)) => {}
                    Err(e) => return Err(status_of(&e)),
                }
                s.commit().map_err(|e| status_of(&e))?;
                self.handles.retain(|_, (p, c)| !(*p == pool && *c == cont));
                self.unaggregated.remove(&(pool, cont));
                Ok(CtlOut::Done)
            }
            CtlOp::Aggregate { pool, cont, upto } => {
                let Some(&written) = self.unaggregated.get(&(pool, cont)) else {
                    return Ok(CtlOut::Aggregated(AggregateStats::default()));
                };
                if written <= upto.0 {
                    self.unaggregated.remove(&(pool, cont));
                }
                let s = self.store(pool)?;
                let st = match s.aggregate(cont, upto) {
                    Ok(st) => st,
                    // destroyed meanwhile, or a snapshot / earlier pass above `upto`
                    Err(StoreError::NoContainer(_)) | Err(StoreError::BadEpoch(..)) => {
                        AggregateStats::default()
                    }
                    Err(e) => return Err(status_of(&e)),
                };
                s.commit().map_err(|e| status_of(&e))?;
                Ok(CtlOut::Aggregated(st))
            }
            CtlOp::OpenHandle { coh, pool, cont } => {
                self.handles.insert(coh, (pool, cont));
                Ok(CtlOut::Done)
            }
            CtlOp::CloseHandle { coh } => {
                self.handles.remove(&coh);
                Ok(CtlOut::Done)
            }
            CtlOp::SnapCreate { pool, cont, epoch } => {
                let s = self.store(pool)?;
                s.snap_create(cont, epoch, None)
                    .map_err(|e| status_of(&e))?;
                s.commit().map_err(|e| status_of(&e))?;
                Ok(CtlOut::Done)
            }
            CtlOp::SnapDestroy { pool, cont, epoch } => {
                let s = self.store(pool)?;
                s.snap_destroy(cont, epoch).map_err(|e| status_of(&e))?;
                s.commit().map_err(|e| status_of(&e))?;
                // the versions only this snapshot kept can go now
                let u = self.unaggregated.entry((pool, cont)).or_default();
                *u = (*u).max(epoch.0);
                Ok(CtlOut::Done)
            }
            CtlOp::SnapList { pool, cont } => {
                let s = self.store(pool)?;
                Ok(CtlOut::Snapshots(
                    s.snap_list(cont).map_err(|e| status_of(&e))?,
                ))
            }
            CtlOp::Space { pool } => {
                let s = self.store(pool)?;
                Ok(CtlOut::Space(s.space().map_err(|e| status_of(&e))?))
            }
        }
    }

    fn store(&mut self, pool: PoolId) -> Result<&mut Box<dyn ObjectStore>, Status> {
        self.stores.get_mut(&pool).ok_or(Status::NonExist)
    }

    /// A DTX apply: the KV value at the transaction's epoch.
    fn dtx_apply(
        &mut self,
        coh: u64,
        oid: ObjectId,
        op: crate::dtx_op::DtxOp,
        epoch: Epoch,
        done: DtxDone,
    ) -> Outgoing {
        use crate::dtx_op::DtxOp;
        self.executed += 1;
        let mut o = Outgoing {
            conn: 0,
            hdr: HeaderRepr {
                response: true,
                opcode: crate::rpc::Opcode::DtxMsg,
                rpc_id: 0,
                status: 0,
                timeout_ms: 0,
                body_len: 0,
                bulk_len: 0,
                map_version: None,
            },
            result: Err(Status::NoHandle),
            dirtied: None,
            done: Some(done),
        };
        let Some(&(pool, cont)) = self.handles.get(&coh) else {
            return o;
        };
        let Some(store) = self.stores.get_mut(&pool) else {
            return o;
        };
        self.hlc.observe(epoch);
        let r = match op {
            DtxOp::Update { dkey, iods, data } => {
                let sgls: Vec<SgList> = data.into_iter().map(SgList::one).collect();
                store.update(cont, oid, epoch, &DKey(dkey), &iods, &sgls)
            }
            DtxOp::PunchObj => store.punch_obj(cont, oid, epoch),
            DtxOp::PunchDkey { dkey } => store.punch_dkeys(cont, oid, epoch, &[DKey(dkey)]),
            DtxOp::PunchAkeys { dkey, akeys } => {
                let akeys: Vec<AKey> = akeys.into_iter().map(AKey).collect();
                store.punch_akeys(cont, oid, epoch, &DKey(dkey), &akeys)
            }
        };
        o.result = r
            .map(|()| (Reply::Empty, Vec::new()))
            .map_err(|e| status_of(&e));
        if o.result.is_ok() {
            let u = self.unaggregated.entry((pool, cont)).or_default();
            *u = (*u).max(epoch.0);
            o.dirtied = Some(pool);
        }
        o
    }

    fn io(&mut self, conn: ConnId, hdr: HeaderRepr, body: &[u8], received: Instant) -> Outgoing {
        self.executed += 1;
        let mut o = Outgoing {
            conn,
            hdr,
            result: Err(Status::Misc),
            dirtied: None,
            done: None,
        };
        if hdr.timeout_ms > 0
            && received.elapsed() > Duration::from_millis(u64::from(hdr.timeout_ms))
        {
            o.result = Err(Status::TimedOut);
            return o;
        }
        let (args, bulk) = split_body(&hdr, body);
        let req = match Request::parse(hdr.opcode, args, bulk.len()) {
            Ok(r) => r,
            Err(e) => {
                debug!(target_id = self.id, %hdr, error = %e, "malformed object request");
                // a descriptor outside the client's bulk region is an invalid
                // argument; anything else could not be parsed
                o.result = Err(match e {
                    crate::rpc::WireError::BulkOutOfRange { .. } => Status::Invalid,
                    _ => Status::Proto,
                });
                return o;
            }
        };
        let (pool, r) = self.exec(req, bulk);
        o.dirtied = pool;
        o.result = r;
        o
    }

    /// Executes one object request; returns the pool it changed (if any).
    #[allow(clippy::type_complexity)]
    fn exec(
        &mut self,
        req: Request,
        bulk: &[u8],
    ) -> (Option<PoolId>, Result<(Reply, Vec<Vec<u8>>), Status>) {
        if let Request::ObjListObj {
            coh,
            epoch,
            anchor,
            max,
            ..
        } = &req
        {
            return (None, self.list_obj(*coh, *epoch, anchor, *max));
        }
        let t = match &req {
            Request::ObjUpdate { t, .. }
            | Request::ObjFetch { t, .. }
            | Request::ObjFetchEpochs { t, .. }
            | Request::ObjUpdateAt { t, .. }
            | Request::ObjPunchAt { t, .. }
            | Request::ObjPunch { t, .. }
            | Request::ObjListDkey { t, .. }
            | Request::ObjListAkey { t, .. }
            | Request::ObjListRecx { t, .. }
            | Request::ObjQueryKey { t, .. } => *t,
            _ => return (None, Err(Status::NoSys)),
        };
        let Some(&(pool, cont)) = self.handles.get(&t.coh) else {
            return (None, Err(Status::NoHandle));
        };
        let oid = ObjectId {
            hi: t.oid.hi,
            lo: t.oid.lo,
        };
        if oid.validate().is_err() {
            return (None, Err(Status::Invalid));
        }
        let read_epoch = if t.epoch == 0 {
            EPOCH_MAX
        } else {
            Epoch(t.epoch)
        };
        // writes take their epoch from the engine's clock: an explicit one
        // could rewrite history under a snapshot, or push the clock to its end
        let writes = matches!(req, Request::ObjUpdate { .. } | Request::ObjPunch { .. });
        if writes && t.epoch != 0 {
            return (None, Err(Status::Invalid));
        }
        // a rebuild copy names its epoch (its source version's): one in the
        // engine's future (beyond a second of clock skew) would push the
        // clock ahead; below a snapshot or aggregation the store refuses it
        if let Request::ObjUpdateAt { t, .. } | Request::ObjPunchAt { t, .. } = &req {
            let slack = 1u64 << 30; // ~1.07 s of HLC nanoseconds
            if t.epoch == 0 || t.epoch > self.hlc.now().0.saturating_add(slack) {
                return (None, Err(Status::Invalid));
            }
            self.hlc.observe(Epoch(t.epoch));
        }
        let hlc = self.hlc.clone();
        let write_epoch = || hlc.now();
        let Some(store) = self.stores.get_mut(&pool) else {
            return (None, Err(Status::NoHandle));
        };
        let st = |e: StoreError| status_of(&e);
        match req {
            Request::ObjUpdate { dkey, iods, .. } => {
                let r = (|| {
                    let dkey = check_key(dkey)?;
                    let (iods, datas) = update_iods(&iods, bulk)?;
                    let e = write_epoch();
                    store
                        .update_flat(cont, oid, e, &DKey(dkey), &iods, &flat(&datas))
                        .map_err(st)?;
                    Ok((Reply::Updated { epoch: e.0 }, Vec::new()))
                })();
                if let Ok((Reply::Updated { epoch }, _)) = &r {
                    let u = self.unaggregated.entry((pool, cont)).or_default();
                    *u = (*u).max(*epoch);
                }
                (Some(pool).filter(|_| r.is_ok()), r)
            }
            Request::ObjUpdateAt { t, dkey, iods } => {
                let r = (|| {
                    let dkey = check_key(dkey)?;
                    let (iods, datas) = update_iods(&iods, bulk)?;
                    let e = Epoch(t.epoch);
                    store
                        .update_flat(cont, oid, e, &DKey(dkey), &iods, &flat(&datas))
                        .map_err(st)?;
                    Ok((Reply::Updated { epoch: e.0 }, Vec::new()))
                })();
                if let Ok((Reply::Updated { epoch }, _)) = &r {
                    let u = self.unaggregated.entry((pool, cont)).or_default();
                    *u = (*u).max(*epoch);
                }
                (Some(pool).filter(|_| r.is_ok()), r)
            }
            Request::ObjFetchEpochs { dkey, iods, .. } => {
                let r = (|| {
                    let dkey = DKey(check_key(dkey)?);
                    if iods.is_empty() {
                        return Err(Status::Invalid);
                    }
                    let iods: Vec<Iod> = iods.iter().map(to_iod).collect::<Result<_, _>>()?;
                    let es = store
                        .fetch_epochs(cont, oid, read_epoch, &dkey, &iods)
                        .map_err(st)?;
                    Ok((
                        Reply::Epochs(es.into_iter().map(|e| e.0).collect()),
                        Vec::new(),
                    ))
                })();
                (None, r)
            }
            Request::ObjFetch { dkey, iods, .. } => {
                let r = (|| {
                    let dkey = DKey(check_key(dkey)?);
                    fetch(store.as_mut(), cont, oid, read_epoch, &dkey, &iods)
                })();
                (None, r)
            }
            Request::ObjPunch { what, .. } | Request::ObjPunchAt { what, .. } => {
                let e = match t.epoch {
                    0 => write_epoch(),
                    e => Epoch(e), // ObjPunchAt (ObjPunch with one: refused above)
                };
                let r = match what {
                    PunchWhat::Object => store.punch_obj(cont, oid, e),
                    PunchWhat::Dkey(d) => store.punch_dkeys(cont, oid, e, &[DKey(d)]),
                    PunchWhat::Akeys { dkey, akeys } => {
                        let akeys: Vec<AKey> = akeys.into_iter().map(AKey).collect();
                        store.punch_akeys(cont, oid, e, &DKey(dkey), &akeys)
                    }
                }
                .map(|()| (Reply::Updated { epoch: e.0 }, Vec::new()))
                .map_err(st);
                if r.is_ok() {
                    let u = self.unaggregated.entry((pool, cont)).or_default();
                    *u = (*u).max(e.0);
                }
                (Some(pool).filter(|_| r.is_ok()), r)
            }
            Request::ObjListDkey { anchor, max, .. } => {
                let r = (|| {
                    let mut a = parse_anchor(&anchor)?;
                    let keys = store
                        .list_dkey(cont, oid, read_epoch, &mut a, list_max(max))
                        .map_err(st)?;
                    Ok((
                        Reply::Keys {
                            keys: keys.into_iter().map(|k| k.0).collect(),
                            anchor: a.to_bytes(),
                            eof: a.is_eof(),
                        },
                        Vec::new(),
                    ))
                })();
                (None, r)
            }
            Request::ObjListAkey {
                dkey, anchor, max, ..
            } => {
                let r = (|| {
                    let mut a = parse_anchor(&anchor)?;
                    let keys = store
                        .list_akey(cont, oid, read_epoch, &DKey(dkey), &mut a, list_max(max))
                        .map_err(st)?;
                    Ok((
                        Reply::Keys {
                            keys: keys.into_iter().map(|k| k.0).collect(),
                            anchor: a.to_bytes(),
                            eof: a.is_eof(),
                        },
                        Vec::new(),
                    ))
                })();
                (None, r)
            }
            Request::ObjListRecx {
                dkey,
                akey,
                anchor,
                max,
                ..
            } => {
                let r = (|| {
                    let mut a = parse_anchor(&anchor)?;
                    let (recxs, rsize) = store
                        .list_recx(
                            cont,
                            oid,
                            read_epoch,
                            &DKey(dkey),
                            &AKey(akey),
                            &mut a,
                            list_max(max),
                        )
                        .map_err(st)?;
                    Ok((
                        Reply::Recxs {
                            rsize,
                            recxs: recxs
                                .into_iter()
                                .map(|x| WireRecx {
                                    idx: x.idx,
                                    nr: x.nr,
                                })
                                .collect(),
                            anchor: a.to_bytes(),
                            eof: a.is_eof(),
                        },
                        Vec::new(),
                    ))
                })();
                (None, r)
            }
            Request::ObjQueryKey {
                flags, dkey, akey, ..
            } => {
                let r = (|| {
                    let mut dkey = DKey(dkey);
                    if flags & QUERY_MAX_DKEY != 0 {
                        dkey = store
                            .query_max_dkey(cont, oid, read_epoch)
                            .map_err(st)?
                            .ok_or(Status::NonExist)?;
                    }
                    let mut recx = Recx::default();
                    if flags & QUERY_MAX_RECX != 0 {
                        recx = store
                            .query_max_recx(cont, oid, read_epoch, &dkey, &AKey(akey.clone()))
                            .map_err(st)?
                            .ok_or(Status::NonExist)?;
                    }
                    Ok((
                        Reply::QueryKey {
                            dkey: dkey.0,
                            akey,
                            recx: WireRecx {
                                idx: recx.idx,
                                nr: recx.nr,
                            },
                        },
                        Vec::new(),
                    ))
                })();
                (None, r)
            }
            _ => (None, Err(Status::NoSys)),
        }
    }
}

impl Target {
    /// `obj_list_obj`: this target's objects of the container `coh` names.
    fn list_obj(
        &mut self,
        coh: u64,
        epoch: u64,
        anchor: &[u8],
        max: u32,
    ) -> Result<(Reply, Vec<Vec<u8>>), Status> {
        let &(pool, cont) = self.handles.get(&coh).ok_or(Status::NoHandle)?;
        let store = self.stores.get_mut(&pool).ok_or(Status::NoHandle)?;
        let epoch = if epoch == 0 { EPOCH_MAX } else { Epoch(epoch) };
        let mut a = parse_anchor(anchor)?;
        let oids = store
            .list_obj(cont, epoch, &mut a, list_max(max))
            .map_err(|e| status_of(&e))?;
        Ok((
            Reply::Oids {
                oids: oids
                    .into_iter()
                    .map(|o| crate::rpc::msg::WireOid { hi: o.hi, lo: o.lo })
                    .collect(),
                anchor: a.to_bytes(),
                eof: a.is_eof(),
            },
            Vec::new(),
        ))
    }
}

fn list_max(max: u32) -> usize {
    (max as usize).clamp(1, MAX_LIST_REPLY.min(MAX_LIST))
}

fn parse_anchor(b: &[u8]) -> Result<Anchor, Status> {
    if b.is_empty() {
        return Ok(Anchor::default());
    }
    Anchor::from_bytes(b).ok_or(Status::Invalid)
}

fn check_key(k: Vec<u8>) -> Result<Vec<u8>, Status> {
    if k.is_empty() {
        return Err(Status::Invalid);
    }
    Ok(k)
}

fn wire_type(k: WireIodType) -> IodType {
    match k {
        WireIodType::Single => IodType::Single,
        WireIodType::Array => IodType::Array,
    }
}

fn to_iod(w: &WireIod) -> Result<Iod, Status> {
    if w.akey.is_empty() {
        return Err(Status::Invalid);
    }
    Ok(Iod {
        akey: AKey(w.akey.clone()),
        iod_type: wire_type(w.kind),
        rec_size: w.rsize,
        recxs: w
            .recxs
            .iter()
            .map(|x| Recx {
                idx: x.idx,
                nr: x.nr,
            })
            .collect(),
    })
}

/// The update's iods and their data, gathered from the bulk region; each
/// iod's segments must add up to exactly what it describes.
/// One iod's bytes: a slice of the RPC's bulk region, or gathered.
type IodData<'b> = Cow<'b, [u8]>;

/// An iod of one segment (the client's usual case) is a slice of the bulk
/// region, borrowed (no copy: the store copies it once, into the index or
/// the bdev's staging buffer); several segments are gathered.
fn update_iods<'b>(w: &[WireIod], bulk: &'b [u8]) -> Result<(Vec<Iod>, Vec<IodData<'b>>), Status> {
    if w.is_empty() {
        return Err(Status::Invalid);
    }
    let mut iods = Vec::with_capacity(w.len());
    let mut datas = Vec::with_capacity(w.len());
    for wi in w {
        let iod = to_iod(wi)?;
        let want = wi.data_len().ok_or(Status::RecTooBig)?;
        let have: u64 = wi.sgl.iter().map(|s| u64::from(s.len)).sum();
        if want != have || (wi.kind == WireIodType::Array && wi.rsize == 0) {
            return Err(Status::Invalid);
        }
        datas.push(match &wi.sgl[..] {
            [one] => Cow::Borrowed(one.slice(bulk)),
            segs => Cow::Owned(segs.iter().flat_map(|s| s.slice(bulk)).copied().collect()),
        });
        iods.push(iod);
    }
    Ok((iods, datas))
}

fn flat<'a>(datas: &'a [Cow<'_, [u8]>]) -> Vec<&'a [u8]> {
    datas.iter().map(|d| &d[..]).collect()
}

/// A fetch: the store hands back one buffer per iod (sizes taken from the
/// store where the caller left them open), returned in the reply's bulk region.
fn fetch(
    store: &mut dyn ObjectStore,
    cont: ContId,
    oid: ObjectId,
    epoch: Epoch,
    dkey: &DKey,
    w: &[WireIod],
) -> Result<(Reply, Vec<Vec<u8>>), Status> {
    if w.is_empty() {
        return Err(Status::Invalid);
    }
    let iods: Vec<Iod> = w.iter().map(to_iod).collect::<Result<_, _>>()?;
    // the reply must fit in one frame with its header and descriptors
    let limit = (crate::rpc::MAX_BODY - 64 * 1024) as u64;
    let (out, bufs) = store
        .fetch_owned(cont, oid, epoch, dkey, &iods, limit)
        .map_err(|e| status_of(&e))?;
    let mut fetched = Vec::with_capacity(iods.len());
    let mut off = 0u32;
    for (buf, size) in bufs.iter().zip(out.sizes) {
        let len = buf.len() as u32;
        fetched.push(FetchedIod {
            size,
            seg: BulkSeg { off, len },
        });
        off += len;
    }
    Ok((Reply::Fetched(fetched), bufs))
}
