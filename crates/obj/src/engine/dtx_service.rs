//! The engine's DTX driver: the thread `obj-dtx` runs the [`super::dtx`]
//! core with real messages, the wall clock and the engine's targets.
//!
//! - A client's `DtxUpdate` (this engine is the leader) and engine-to-engine
//!   `DtxMsg`s come from the network thread ([`DtxEvent`]); a `DtxMsg` is
//!   answered at once (empty) and handled here: the DTX messages are one-way
//!   datagrams, the core resends and asks on its timers.
//! - Messages to another engine go through one sender thread per peer (a
//!   blocking [`Client`]); a peer whose connection is refused is reported
//!   down to the core (TCP on the engines' addresses: refused = the process
//!   is gone; a timeout is not taken as down).
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
//! The engine's rank is the one the first DTX request names for it (the
//! client's placement); a later request naming another rank is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use super::dtx::{Action, Dtx, DtxConfig, DtxId, Msg, Outcome, Rank, Update};
use super::hlc::SharedHlc;
use super::route;
use super::target::TargetMsg;
use crate::client::{Client, Error as ClientError};
use crate::rpc::codec::{Reader, Writer};
use crate::rpc::frame::encode_reply;
use crate::rpc::msg::{Request, WireOid, MAX_KEY_LEN, MAX_LABEL_LEN};
use crate::rpc::tcp::{ConnId, ReplySender};
use crate::rpc::{HeaderRepr, Reply, Status, WireError};
use crate::types::{Epoch, ObjectId};

/// The key readers are held on: OID and dkey (containers are not told
/// apart: a key of another container with the same OID and dkey waits too).
pub fn held_key(oid: WireOid, dkey: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + dkey.len());
    k.extend_from_slice(&oid.hi.to_be_bytes());
    k.extend_from_slice(&oid.lo.to_be_bytes());
    k.extend_from_slice(dkey);
    k
}

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
    pub fn any(&self) -> bool {
        self.n.load(Ordering::Acquire) > 0
    }
    fn hold(&self, key: Vec<u8>) {
        if let Ok(mut k) = self.keys.lock() {
            *k.entry(key).or_default() += 1;
            self.n.store(k.len(), Ordering::Release);
        }
    }
    fn release(&self, key: &[u8]) {
        if let Ok(mut k) = self.keys.lock() {
            if let Some(c) = k.get_mut(key) {
                *c -= 1;
                if *c == 0 {
                    k.remove(key);
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
    pub fn start(
        my_addr: String,
        hlc: Arc<SharedHlc>,
        held: Arc<HeldKeys>,
        targets: Vec<Sender<TargetMsg>>,
        replies: ReplySender,
    ) -> std::io::Result<DtxService> {
        let (tx, rx) = channel();
        let me_tx = tx.clone();
        let thread = std::thread::Builder::new()
            .name("obj-dtx".into())
            .spawn(move || {
                Driver {
                    me: None,
                    core: None,
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
                }
                .run(rx)
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

/// What `Update::payload` holds in an engine: a KV put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPut {
    pub pool: String,
    pub cont: String,
    pub oid: WireOid,
    pub dkey: Vec<u8>,
    pub value: Vec<u8>,
}

impl KvPut {
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.value.len() + self.dkey.len() + 64);
        let mut w = Writer::new(&mut v);
        w.str(&self.pool)
            .str(&self.cont)
            .u64(self.oid.hi)
            .u64(self.oid.lo)
            .blob(&self.dkey)
            .blob(&self.value);
        v
    }
    pub fn parse(b: &[u8]) -> Result<KvPut, WireError> {
        let mut r = Reader::new(b);
        let p = KvPut {
            pool: r.str(MAX_LABEL_LEN)?,
            cont: r.str(MAX_LABEL_LEN)?,
            oid: WireOid {
                hi: r.u64()?,
                lo: r.u64()?,
            },
            dkey: r.blob(MAX_KEY_LEN)?.to_vec(),
            value: r.blob(super::dtx::MAX_PAYLOAD)?.to_vec(),
        };
        r.finish()?;
        Ok(p)
    }
}

struct Driver {
    me: Option<Rank>,
    core: Option<Dtx>,
    my_addr: String,
    hlc: Arc<SharedHlc>,
    held: Arc<HeldKeys>,
    targets: Vec<Sender<TargetMsg>>,
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
    /// Transactions being applied, with the keys to release afterwards.
    applying: HashMap<DtxId, Vec<Vec<u8>>>,
}

/// To a peer's sender thread: an encoded message and the addresses to send
/// with it.
type PeerMsg = (Vec<u8>, Vec<(Rank, String)>);

const TICK: Duration = Duration::from_millis(5);

impl Driver {
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
                let incarnation = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    ^ u64::from(std::process::id()).rotate_left(40);
                info!(rank, incarnation, "dtx: this engine is rank {rank}");
                self.me = Some(rank);
                self.core = Some(Dtx::new(rank, incarnation, DtxConfig::default()));
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
                let Some(core) = self.core_for(to) else {
                    return;
                };
                core.peer_up(from);
                let a = core.handle(now, from, msg);
                self.run_actions(a);
            }
            DtxEvent::Applied { id, result } => {
                for k in self.applying.remove(&id).unwrap_or_default() {
                    self.held.release(&k);
                }
                if let Err(st) = result {
                    error!(?id, status = %st, "DTX apply failed on this replica");
                }
                if let Some(core) = self.core.as_mut() {
                    if core.is_leading(&id) {
                        let a = core.applied(now, id, result.is_ok());
                        self.run_actions(a);
                    }
                }
            }
            DtxEvent::Unreachable { to } => {
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
                dkey,
                value,
                replicas,
            }) if !replicas.is_empty() && !dkey.is_empty() && !value.is_empty() && t.epoch == 0 => {
                (t, pool, cont, dkey, value, replicas)
            }
            Ok(_) => return self.reply(conn, &hdr, Err(Status::Invalid)),
            Err(_) => return self.reply(conn, &hdr, Err(Status::Proto)),
        };
        let (t, pool, cont, dkey, value, replicas) = req;
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
            key: held_key(t.oid, &dkey),
            payload: KvPut {
                pool,
                cont,
                oid: t.oid,
                dkey,
                value,
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

    fn run_actions(&mut self, actions: Vec<Action>) {
        let mut q: std::collections::VecDeque<Action> = actions.into();
        while let Some(a) = q.pop_front() {
            match a {
                Action::Send { to, msg } => self.send(to, &msg),
                Action::Hold { key } => self.held.hold(key),
                Action::Release { key } => self.held.release(&key),
                Action::Apply { id, epoch, update } => {
                    // a follower's commit is Apply then Release of the same
                    // key: the release waits until the apply is durable
                    let release = q
                        .front()
                        .and_then(|n| match n {
                            Action::Release { key } if *key == update.key => Some(key.clone()),
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
    }

    /// Sends `update` to its target at `epoch`; `release`: the key is
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
            if release {
                vec![update.key.clone()]
            } else {
                Vec::new()
            },
        );
        let p = KvPut::parse(&update.payload).map_err(|_| Status::Proto)?;
        let coh = self.local_coh(&p.pool, &p.cont)?;
        let t = route(p.oid, self.targets.len());
        let tx = self.tx.clone();
        self.targets[t]
            .send(TargetMsg::DtxApply {
                coh,
                oid: ObjectId {
                    hi: p.oid.hi,
                    lo: p.oid.lo,
                },
                dkey: p.dkey,
                value: p.value,
                epoch: Epoch(epoch),
                done: Box::new(move |result| {
                    let _ = tx.send(DtxEvent::Applied { id, result });
                }),
            })
            .map_err(|_| Status::Shutdown)
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
