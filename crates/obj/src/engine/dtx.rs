//! DTX: a replicated update as a distributed transaction through a leader
//! replica (DAOS's `src/dtx`), as a sans-IO state machine.
//!
//! The client sends the update to the *leader* (the first serving replica of
//! the placement). The leader takes ONE epoch (its HLC) and sends `Prepare`
//! to the other replicas; each holds the update aside (it is not in the store
//! yet) and marks its key *held*: a reader of a held key gets "in progress"
//! and retries (DAOS's `DER_INPROGRESS`), so a prepared update is never
//! visible. On every `Ack` the leader applies the update to its own store at
//! the epoch, answers the client, and sends `Commit` (followers apply at the
//! same epoch and release the key); a refusal, an unreachable follower or the
//! deadline aborts (`Abort` to the followers: the update is dropped).
//!
//! Lost messages: `Prepare` is resent every `retry` until acked; a lost
//! `Commit`/`Abort` is recovered by the follower, which asks (`Query`) the
//! leader about a prepared entry older than `resolve_after`. When the leader
//! is gone (the driver reports it down, or it answers `Lost`: a restarted
//! leader does not know its previous incarnation's transactions), the
//! followers resolve among themselves as DAOS's DTX resync does: committed
//! anywhere → commit; refused or unknown on any other follower → abort (a
//! follower asked about a transaction it never saw records it aborted, so a
//! late `Prepare` is refused and the leader cannot commit it); prepared on
//! every other follower → commit (the leader may have committed and
//! answered).
//!
//! Outcomes the client sees: `Committed { epoch }`; `Aborted` (definite: a
//! follower refused, was unreachable, or the leader's store failed: the
//! update is nowhere); `Unknown` (the deadline passed with an ack missing:
//! indeterminate, as a lost reply — with the leader gone, followers that had
//! prepared may still commit it).
//!
//! Nothing here does I/O or reads a clock: the driver
//! ([`super::dtx_service`] in an engine, a seeded simulation in the tests)
//! passes messages and `now` in, and executes the [`Action`]s in order.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::rpc::codec::{Reader, Writer};
use crate::rpc::WireError;

/// An engine's rank (its fault domain in the pool map).
pub type Rank = u32;

/// A transaction: its leader, the leader process's incarnation (random at
/// start, so a restarted leader never reuses an id) and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DtxId {
    pub leader: Rank,
    pub incarnation: u64,
    pub seq: u64,
}

/// What a transaction writes: `keys` are what readers are held on (the
/// driver chooses them; the engine uses OID + dkey, or OID alone for an
/// object punch), `payload` is opaque here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub keys: Vec<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// A record the driver must make durable (DAOS keeps its DTX entries in
/// VOS): a replica that restarts reloads them ([`Dtx::restore`]) and
/// resolves its prepared entries by the resync rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRec {
    /// A follower's prepared entry, or the leader's intent (written before
    /// its `Prepare`s go out). Durable before the actions after it run (the
    /// follower's `Ack`, the leader's `Prepare`s).
    Prepared {
        id: DtxId,
        epoch: u64,
        participants: Vec<Rank>,
        update: Update,
    },
    /// The entry is resolved (its `Prepared` record can go). A commit's
    /// record is written once the preceding `Apply` is durable; it need not
    /// be durable at once (a lost one makes the entry resolve again after a
    /// restart: the apply is redone at the same epoch).
    Resolved { id: DtxId, committed: bool },
}

/// What a replica knows of a transaction (answer to `Query`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Prepared = 1,
    Committed = 2,
    Aborted = 3,
    /// The leader is still collecting acks.
    Pending = 4,
    /// A follower that never saw it (it now records it aborted).
    Unknown = 5,
    /// Asked of the leader's rank, which runs another incarnation (restarted).
    Lost = 6,
}

impl Known {
    fn from_u8(v: u8) -> Result<Known, WireError> {
        Ok(match v {
            1 => Known::Prepared,
            2 => Known::Committed,
            3 => Known::Aborted,
            4 => Known::Pending,
            5 => Known::Unknown,
            6 => Known::Lost,
            v => {
                return Err(WireError::BadValue {
                    field: "dtx state",
                    value: u64::from(v),
                })
            }
        })
    }
}

/// Engine-to-engine messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Prepare {
        id: DtxId,
        epoch: u64,
        /// Every replica, the leader first.
        participants: Vec<Rank>,
        update: Update,
    },
    Ack {
        id: DtxId,
        ok: bool,
    },
    Commit {
        id: DtxId,
    },
    Abort {
        id: DtxId,
    },
    Query {
        id: DtxId,
    },
    Answer {
        id: DtxId,
        state: Known,
    },
}

/// Largest key / payload a message carries; most held keys per update.
pub const MAX_KEY: usize = 64 * 1024;
pub const MAX_KEYS: usize = 64;
pub const MAX_PAYLOAD: usize = 4 << 20;
const MAX_PARTICIPANTS: usize = 16;

impl Update {
    fn emit(&self, w: &mut Writer<'_>) {
        w.count(self.keys.len());
        for k in &self.keys {
            w.blob(k);
        }
        w.blob(&self.payload);
    }
    fn parse(r: &mut Reader<'_>) -> Result<Update, WireError> {
        let n = r.count(MAX_KEYS, 4)?;
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push(r.blob(MAX_KEY)?.to_vec());
        }
        let payload = r.blob(MAX_PAYLOAD)?.to_vec();
        Ok(Update { keys, payload })
    }
}

impl LogRec {
    pub fn id(&self) -> DtxId {
        match self {
            LogRec::Prepared { id, .. } | LogRec::Resolved { id, .. } => *id,
        }
    }

    /// The record's key in a store (big-endian: ordered by leader, seq).
    pub fn key(id: &DtxId) -> [u8; 20] {
        let mut k = [0u8; 20];
        k[..4].copy_from_slice(&id.leader.to_be_bytes());
        k[4..12].copy_from_slice(&id.incarnation.to_be_bytes());
        k[12..].copy_from_slice(&id.seq.to_be_bytes());
        k
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        match self {
            LogRec::Prepared {
                id,
                epoch,
                participants,
                update,
            } => {
                w.u8(1);
                id.emit(&mut w);
                w.u64(*epoch).count(participants.len());
                for p in participants {
                    w.u32(*p);
                }
                update.emit(&mut w);
            }
            LogRec::Resolved { id, committed } => {
                w.u8(2);
                id.emit(&mut w);
                w.bool(*committed);
            }
        }
    }

    /// Parses a stored record (a damaged one is a typed error).
    pub fn parse(b: &[u8]) -> Result<LogRec, WireError> {
        let mut r = Reader::new(b);
        let kind = r.u8()?;
        let id = DtxId::parse(&mut r)?;
        let rec = match kind {
            1 => {
                let epoch = r.u64()?;
                let n = r.count(MAX_PARTICIPANTS, 4)?;
                let mut participants = Vec::with_capacity(n);
                for _ in 0..n {
                    participants.push(r.u32()?);
                }
                LogRec::Prepared {
                    id,
                    epoch,
                    participants,
                    update: Update::parse(&mut r)?,
                }
            }
            2 => LogRec::Resolved {
                id,
                committed: r.bool()?,
            },
            v => {
                return Err(WireError::BadValue {
                    field: "dtx record kind",
                    value: u64::from(v),
                })
            }
        };
        r.finish()?;
        Ok(rec)
    }
}

impl DtxId {
    fn emit(&self, w: &mut Writer<'_>) {
        w.u32(self.leader).u64(self.incarnation).u64(self.seq);
    }
    fn parse(r: &mut Reader<'_>) -> Result<DtxId, WireError> {
        Ok(DtxId {
            leader: r.u32()?,
            incarnation: r.u64()?,
            seq: r.u64()?,
        })
    }
}

impl Msg {
    pub fn id(&self) -> DtxId {
        match self {
            Msg::Prepare { id, .. }
            | Msg::Ack { id, .. }
            | Msg::Commit { id }
            | Msg::Abort { id }
            | Msg::Query { id }
            | Msg::Answer { id, .. } => *id,
        }
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        match self {
            Msg::Prepare {
                id,
                epoch,
                participants,
                update,
            } => {
                w.u8(1);
                id.emit(&mut w);
                w.u64(*epoch).count(participants.len());
                for p in participants {
                    w.u32(*p);
                }
                update.emit(&mut w);
            }
            Msg::Ack { id, ok } => {
                w.u8(2);
                id.emit(&mut w);
                w.bool(*ok);
            }
            Msg::Commit { id } => {
                w.u8(3);
                id.emit(&mut w);
            }
            Msg::Abort { id } => {
                w.u8(4);
                id.emit(&mut w);
            }
            Msg::Query { id } => {
                w.u8(5);
                id.emit(&mut w);
            }
            Msg::Answer { id, state } => {
                w.u8(6);
                id.emit(&mut w);
                w.u8(*state as u8);
            }
        }
    }

    /// Parses one message; anything malformed is a typed error.
    pub fn parse(b: &[u8]) -> Result<Msg, WireError> {
        let mut r = Reader::new(b);
        let kind = r.u8()?;
        let id = DtxId::parse(&mut r)?;
        let m = match kind {
            1 => {
                let epoch = r.u64()?;
                let n = r.count(MAX_PARTICIPANTS, 4)?;
                let mut participants = Vec::with_capacity(n);
                for _ in 0..n {
                    participants.push(r.u32()?);
                }
                let update = Update::parse(&mut r)?;
                Msg::Prepare {
                    id,
                    epoch,
                    participants,
                    update,
                }
            }
            2 => Msg::Ack { id, ok: r.bool()? },
            3 => Msg::Commit { id },
            4 => Msg::Abort { id },
            5 => Msg::Query { id },
            6 => Msg::Answer {
                id,
                state: Known::from_u8(r.u8()?)?,
            },
            v => {
                return Err(WireError::BadValue {
                    field: "dtx message kind",
                    value: u64::from(v),
                })
            }
        };
        r.finish()?;
        Ok(m)
    }
}

/// What the leader tells the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        epoch: u64,
    },
    /// Definitely not applied anywhere. `unreachable`: followers the driver
    /// reported down (the client re-places without them and retries).
    Aborted {
        refused_by: Option<Rank>,
        unreachable: Vec<Rank>,
    },
    /// The deadline passed with an ack missing: may or may not be applied.
    Unknown,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send {
        to: Rank,
        msg: Msg,
    },
    /// Make `0` durable before running the actions after it (see
    /// [`LogRec`] for the one exception).
    Persist(LogRec),
    /// Readers of `keys` get "in progress" until the matching `Release`
    /// (counted: a key may be held by several transactions).
    Hold {
        keys: Vec<Vec<u8>>,
    },
    Release {
        keys: Vec<Vec<u8>>,
    },
    /// Write `update` durably at `epoch`. On the leader the driver then calls
    /// [`Dtx::applied`] with the result.
    Apply {
        id: DtxId,
        epoch: u64,
        update: Update,
    },
    /// The leader's answer to the client of `id`.
    Reply {
        id: DtxId,
        outcome: Outcome,
    },
}

/// Timing.
#[derive(Debug, Clone, Copy)]
pub struct DtxConfig {
    /// `Prepare` resent, and `Query` repeated, this often.
    pub retry: Duration,
    /// The leader gives up on missing acks after this (outcome `Unknown`).
    pub deadline: Duration,
    /// A follower asks about a prepared entry this old.
    pub resolve_after: Duration,
    /// Outcomes are remembered this long (to answer queries and late
    /// duplicates).
    pub keep: Duration,
}

impl Default for DtxConfig {
    fn default() -> Self {
        DtxConfig {
            retry: Duration::from_millis(20),
            deadline: Duration::from_secs(2),
            resolve_after: Duration::from_millis(100),
            keep: Duration::from_secs(120),
        }
    }
}

struct Lead {
    epoch: u64,
    update: Update,
    followers: Vec<Rank>,
    acked: BTreeSet<Rank>,
    started: Instant,
    last_send: Instant,
    /// All acks in: the driver is applying locally; no abort any more.
    applying: bool,
}

struct Prep {
    epoch: u64,
    update: Update,
    participants: Vec<Rank>,
    since: Instant,
    last_query: Option<Instant>,
    /// Held longer than [`HELD_WARN`] has been logged.
    warned: bool,
    answers: HashMap<Rank, Known>,
}

/// A prepared entry held this long is logged (once).
const HELD_WARN: Duration = Duration::from_secs(5);

/// Counters (for logs and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DtxStats {
    pub begun: u64,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Prepared entries a follower resolved by asking (commit or abort).
    pub resolved: u64,
    /// Of those, resolved without the leader (it was down or lost).
    pub resynced: u64,
}

/// One replica's DTX state: the transactions it leads and the ones it holds
/// prepared for other leaders.
pub struct Dtx {
    me: Rank,
    incarnation: u64,
    next_seq: u64,
    cfg: DtxConfig,
    leading: HashMap<DtxId, Lead>,
    prepared: HashMap<DtxId, Prep>,
    outcomes: HashMap<DtxId, (Known, Instant)>,
    down: HashSet<Rank>,
    /// Peers out of the pool map (DOWN / EXCLUDED there; also in `down`):
    /// the resync does not wait for their answers.
    out: HashSet<Rank>,
    pub stats: DtxStats,
}

impl Dtx {
    /// `incarnation` must differ between two runs of the same rank (random).
    pub fn new(me: Rank, incarnation: u64, cfg: DtxConfig) -> Dtx {
        Dtx {
            me,
            incarnation,
            next_seq: 1,
            cfg,
            leading: HashMap::new(),
            prepared: HashMap::new(),
            outcomes: HashMap::new(),
            down: HashSet::new(),
            out: HashSet::new(),
            stats: DtxStats::default(),
        }
    }

    /// A replica restarted with its persisted records (in the order they
    /// were written; a `Resolved` drops the `Prepared` of the same id): the
    /// prepared entries are held again and resolved by asking (the ones
    /// this rank led in a previous incarnation too, as a follower of it),
    /// the outcomes answer queries. Returns the `Hold`s to run.
    pub fn restore(
        me: Rank,
        incarnation: u64,
        cfg: DtxConfig,
        now: Instant,
        recs: impl IntoIterator<Item = LogRec>,
    ) -> (Dtx, Vec<Action>) {
        let mut d = Dtx::new(me, incarnation, cfg);
        for r in recs {
            match r {
                LogRec::Prepared {
                    id,
                    epoch,
                    participants,
                    update,
                } => {
                    d.prepared.insert(
                        id,
                        Prep {
                            epoch,
                            update,
                            participants,
                            since: now,
                            last_query: None,
                            warned: false,
                            answers: HashMap::new(),
                        },
                    );
                }
                LogRec::Resolved { id, committed } => {
                    d.prepared.remove(&id);
                    let k = if committed {
                        Known::Committed
                    } else {
                        Known::Aborted
                    };
                    d.outcomes.insert(id, (k, now));
                }
            }
        }
        let out = d
            .prepared
            .values()
            .map(|p| Action::Hold {
                keys: p.update.keys.clone(),
            })
            .collect();
        (d, out)
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Transactions led and not finished, entries held prepared.
    pub fn in_flight(&self) -> (usize, usize) {
        (self.leading.len(), self.prepared.len())
    }

    /// Whether this replica leads `id` and waits for its local apply.
    pub fn is_leading(&self, id: &DtxId) -> bool {
        self.leading.contains_key(id)
    }

    /// Leader: starts a transaction writing `update` at `epoch` on this
    /// replica and `followers`.
    pub fn begin(
        &mut self,
        now: Instant,
        epoch: u64,
        update: Update,
        followers: Vec<Rank>,
    ) -> (DtxId, Vec<Action>) {
        let id = DtxId {
            leader: self.me,
            incarnation: self.incarnation,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.stats.begun += 1;
        let mut out = Vec::new();
        let followers: Vec<Rank> = followers.into_iter().filter(|&f| f != self.me).collect();
        // the client places with its map: try them (the driver reports a
        // follower down again if it does not answer)
        for f in &followers {
            self.down.remove(f);
        }
        let mut participants = vec![self.me];
        participants.extend(&followers);
        if !followers.is_empty() {
            // the intent: a restarted leader resolves it with the followers
            out.push(Action::Persist(LogRec::Prepared {
                id,
                epoch,
                participants: participants.clone(),
                update: update.clone(),
            }));
        }
        for &f in &followers {
            out.push(Action::Send {
                to: f,
                msg: Msg::Prepare {
                    id,
                    epoch,
                    participants: participants.clone(),
                    update: update.clone(),
                },
            });
        }
        let applying = followers.is_empty();
        if applying {
            out.push(Action::Apply {
                id,
                epoch,
                update: update.clone(),
            });
        }
        self.leading.insert(
            id,
            Lead {
                epoch,
                update,
                followers,
                acked: BTreeSet::new(),
                started: now,
                last_send: now,
                applying,
            },
        );
        (id, out)
    }

    /// Leader: the local apply of `id` finished (`ok`: durable).
    pub fn applied(&mut self, now: Instant, id: DtxId, ok: bool) -> Vec<Action> {
        let Some(l) = self.leading.remove(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if ok {
            self.outcomes.insert(id, (Known::Committed, now));
            self.stats.committed += 1;
            out.push(Action::Persist(LogRec::Resolved {
                id,
                committed: true,
            }));
            out.push(Action::Reply {
                id,
                outcome: Outcome::Committed { epoch: l.epoch },
            });
            for &f in &l.followers {
                out.push(Action::Send {
                    to: f,
                    msg: Msg::Commit { id },
                });
            }
        } else {
            self.outcomes.insert(id, (Known::Aborted, now));
            self.stats.aborted += 1;
            out.push(Action::Persist(LogRec::Resolved {
                id,
                committed: false,
            }));
            out.push(Action::Reply {
                id,
                outcome: Outcome::Aborted {
                    refused_by: Some(self.me),
                    unreachable: Vec::new(),
                },
            });
            for &f in &l.followers {
                out.push(Action::Send {
                    to: f,
                    msg: Msg::Abort { id },
                });
            }
        }
        out
    }

    fn abort_lead(&mut self, now: Instant, id: DtxId, outcome: Outcome, out: &mut Vec<Action>) {
        let Some(l) = self.leading.remove(&id) else {
            return;
        };
        self.outcomes.insert(id, (Known::Aborted, now));
        if !l.followers.is_empty() {
            out.push(Action::Persist(LogRec::Resolved {
                id,
                committed: false,
            }));
        }
        if outcome == Outcome::Unknown {
            self.stats.unknown += 1;
        } else {
            self.stats.aborted += 1;
        }
        for &f in &l.followers {
            if !self.down.contains(&f) {
                out.push(Action::Send {
                    to: f,
                    msg: Msg::Abort { id },
                });
            }
        }
        out.push(Action::Reply { id, outcome });
    }

    /// The driver learnt that `rank` is down (connection refused, failure
    /// detector): transactions waiting for its ack abort; prepared entries
    /// it leads are resolved without it.
    pub fn peer_down(&mut self, now: Instant, rank: Rank) -> Vec<Action> {
        if rank == self.me {
            return Vec::new();
        }
        self.down.insert(rank);
        let mut out = Vec::new();
        let waiting: Vec<DtxId> = self
            .leading
            .iter()
            .filter(|(_, l)| !l.applying && l.followers.contains(&rank) && !l.acked.contains(&rank))
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.abort_lead(
                now,
                id,
                Outcome::Aborted {
                    refused_by: None,
                    unreachable: vec![rank],
                },
                &mut out,
            );
        }
        let orphans: Vec<DtxId> = self
            .prepared
            .keys()
            .filter(|id| id.leader == rank)
            .copied()
            .collect();
        for id in orphans {
            self.decide(now, id, &mut out);
        }
        out
    }

    /// The pool map has `rank` DOWN or EXCLUDED: down as in
    /// [`Self::peer_down`], and out of the placement — it serves again only
    /// after reintegration (its data reconciled from the survivors), so a
    /// prepared entry whose leader is gone no longer waits for its answer
    /// (DAOS's resync asks only the participants the map has UP-IN).
    pub fn peer_out(&mut self, now: Instant, rank: Rank) -> Vec<Action> {
        if rank == self.me {
            return Vec::new();
        }
        self.out.insert(rank);
        let mut out = self.peer_down(now, rank);
        let waiting: Vec<DtxId> = self
            .prepared
            .iter()
            .filter(|(id, p)| {
                id.leader != rank && p.participants.contains(&rank) && self.leader_gone(id)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.decide(now, id, &mut out);
        }
        out
    }

    /// `rank` answers again (a restarted engine: a new incarnation), or is
    /// back in the pool map.
    pub fn peer_up(&mut self, rank: Rank) {
        self.down.remove(&rank);
        self.out.remove(&rank);
    }

    /// A message from `from`.
    pub fn handle(&mut self, now: Instant, from: Rank, msg: Msg) -> Vec<Action> {
        let mut out = Vec::new();
        match msg {
            Msg::Ack { id, ok } => {
                let Some(l) = self.leading.get_mut(&id) else {
                    return out; // late or duplicate
                };
                if l.applying || !l.followers.contains(&from) {
                    return out;
                }
                if ok {
                    l.acked.insert(from);
                    if l.acked.len() == l.followers.len() {
                        l.applying = true;
                        out.push(Action::Apply {
                            id,
                            epoch: l.epoch,
                            update: l.update.clone(),
                        });
                    }
                } else {
                    self.abort_lead(
                        now,
                        id,
                        Outcome::Aborted {
                            refused_by: Some(from),
                            unreachable: Vec::new(),
                        },
                        &mut out,
                    );
                }
            }
            Msg::Prepare {
                id,
                epoch,
                participants,
                update,
            } => {
                // a message from it: it is up (a restarted leader sends with
                // its new incarnation)
                self.down.remove(&from);
                let ok = match self.outcomes.get(&id) {
                    Some((Known::Committed, _)) => true,
                    Some(_) => false,
                    None => {
                        if let std::collections::hash_map::Entry::Vacant(e) =
                            self.prepared.entry(id)
                        {
                            // durable before the ack: a restarted follower
                            // still has what it promised
                            out.push(Action::Persist(LogRec::Prepared {
                                id,
                                epoch,
                                participants: participants.clone(),
                                update: update.clone(),
                            }));
                            out.push(Action::Hold {
                                keys: update.keys.clone(),
                            });
                            e.insert(Prep {
                                epoch,
                                update,
                                participants,
                                since: now,
                                last_query: None,
                                warned: false,
                                answers: HashMap::new(),
                            });
                        }
                        true
                    }
                };
                out.push(Action::Send {
                    to: from,
                    msg: Msg::Ack { id, ok },
                });
            }
            Msg::Commit { id } => self.finish(now, id, true, false, &mut out),
            Msg::Abort { id } => self.finish(now, id, false, false, &mut out),
            Msg::Query { id } => {
                let state = if let Some(l) = self.leading.get(&id) {
                    let _ = l;
                    Known::Pending
                } else if let Some((k, _)) = self.outcomes.get(&id) {
                    *k
                } else if id.leader == self.me && id.incarnation != self.incarnation {
                    // a previous incarnation's: its intent, if reloaded, is
                    // resolved here like a follower's entry
                    Known::Lost
                } else if self.prepared.contains_key(&id) {
                    Known::Prepared
                } else {
                    // never seen (or forgotten): it can no longer be acked
                    // here, so it cannot commit (durably: a restart must not
                    // forget it)
                    self.outcomes.insert(id, (Known::Aborted, now));
                    out.push(Action::Persist(LogRec::Resolved {
                        id,
                        committed: false,
                    }));
                    Known::Unknown
                };
                out.push(Action::Send {
                    to: from,
                    msg: Msg::Answer { id, state },
                });
            }
            Msg::Answer { id, state } => {
                if let Some(p) = self.prepared.get_mut(&id) {
                    if state == Known::Lost && from == id.leader {
                        self.down.insert(from);
                    }
                    p.answers.insert(from, state);
                    self.decide(now, id, &mut out);
                }
            }
        }
        out
    }

    /// Follower: commits or aborts a prepared entry.
    fn finish(
        &mut self,
        now: Instant,
        id: DtxId,
        commit: bool,
        asked: bool,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.prepared.remove(&id) else {
            // never prepared here (or already finished): remember an abort
            // so a late Prepare is refused; a commit we never prepared
            // cannot be applied (this replica missed it)
            if !commit {
                self.outcomes.entry(id).or_insert((Known::Aborted, now));
            } else if let std::collections::hash_map::Entry::Vacant(e) = self.outcomes.entry(id) {
                tracing::warn!(?id, "commit of a transaction never prepared here");
                e.insert((Known::Committed, now));
            }
            return;
        };
        if asked {
            self.stats.resolved += 1;
            if self.leader_gone(&id) {
                self.stats.resynced += 1;
            }
        }
        if commit {
            self.outcomes.insert(id, (Known::Committed, now));
            self.stats.committed += 1;
            out.push(Action::Apply {
                id,
                epoch: p.epoch,
                update: p.update.clone(),
            });
            out.push(Action::Release {
                keys: p.update.keys,
            });
            // after the apply is durable (the driver defers it)
            out.push(Action::Persist(LogRec::Resolved {
                id,
                committed: true,
            }));
        } else {
            self.outcomes.insert(id, (Known::Aborted, now));
            self.stats.aborted += 1;
            out.push(Action::Persist(LogRec::Resolved {
                id,
                committed: false,
            }));
            out.push(Action::Release {
                keys: p.update.keys,
            });
        }
    }

    /// The leader of `id` is down, restarted (answered `Lost`), or this
    /// replica's own previous incarnation.
    fn leader_gone(&self, id: &DtxId) -> bool {
        self.down.contains(&id.leader)
            || (id.leader == self.me && id.incarnation != self.incarnation)
    }

    /// Follower: decides a prepared entry from the answers so far.
    fn decide(&mut self, now: Instant, id: DtxId, out: &mut Vec<Action>) {
        let Some(p) = self.prepared.get(&id) else {
            return;
        };
        let leader = id.leader;
        let mut verdict = None;
        for (&r, &k) in &p.answers {
            match k {
                Known::Committed => verdict = Some(true),
                Known::Aborted | Known::Unknown if verdict.is_none() => verdict = Some(false),
                _ => {}
            }
            let _ = r;
        }
        if verdict.is_none() && self.leader_gone(&id) {
            // resync without the leader (DAOS's `dtx_check`): prepared on
            // every *available* other participant → commit. A participant
            // out of the pool map too (DOWN / EXCLUDED: [`Dtx::peer_out`]) is
            // not waited for: it may never answer (a minority cut off with
            // the leader stays DOWN), the leader may have committed and
            // answered the client, and it returns only through
            // reintegration, which reconciles its copy from the survivors.
            // One merely silent or refusing connections (no map) may come
            // back with its store as it is: waited for
            let others: Vec<Rank> = p
                .participants
                .iter()
                .copied()
                .filter(|&r| r != leader && r != self.me)
                .collect();
            let all = others.iter().all(|r| {
                self.out.contains(r)
                    || matches!(
                        p.answers.get(r),
                        Some(Known::Prepared) | Some(Known::Committed)
                    )
            });
            if all {
                let unavailable: Vec<Rank> = others
                    .iter()
                    .copied()
                    .filter(|r| self.out.contains(r))
                    .collect();
                if !unavailable.is_empty() {
                    tracing::info!(
                        ?id,
                        ?unavailable,
                        "dtx: leader gone, prepared on every available participant: commit"
                    );
                }
                verdict = Some(true);
            }
        }
        if let Some(c) = verdict {
            self.finish(now, id, c, true, out);
        }
    }

    /// Timers: resends, leader deadlines, follower queries, forgetting old
    /// outcomes. Call at least every `retry`.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let cfg = self.cfg;
        let mut expired = Vec::new();
        for (id, l) in self.leading.iter_mut() {
            if l.applying {
                continue;
            }
            if now.saturating_duration_since(l.started) >= cfg.deadline {
                expired.push(*id);
            } else if now.saturating_duration_since(l.last_send) >= cfg.retry {
                l.last_send = now;
                let mut participants = vec![self.me];
                participants.extend(&l.followers);
                for &f in &l.followers {
                    if !l.acked.contains(&f) {
                        out.push(Action::Send {
                            to: f,
                            msg: Msg::Prepare {
                                id: *id,
                                epoch: l.epoch,
                                participants: participants.clone(),
                                update: l.update.clone(),
                            },
                        });
                    }
                }
            }
        }
        for id in expired {
            self.abort_lead(now, id, Outcome::Unknown, &mut out);
        }
        let mut ask = Vec::new();
        for (id, p) in self.prepared.iter_mut() {
            if now.saturating_duration_since(p.since) < cfg.resolve_after {
                continue;
            }
            if p.last_query
                .is_some_and(|t| now.saturating_duration_since(t) < cfg.retry)
            {
                continue;
            }
            p.last_query = Some(now);
            if !p.warned && now.saturating_duration_since(p.since) >= HELD_WARN {
                p.warned = true;
                let silent: Vec<Rank> = p
                    .participants
                    .iter()
                    .copied()
                    .filter(|r| *r != self.me && !p.answers.contains_key(r))
                    .collect();
                tracing::warn!(
                    ?id,
                    ?silent,
                    down = ?self.down,
                    "dtx: a prepared entry holds its keys for {HELD_WARN:?}: no outcome yet \
                     (its leader and the participants still in the map have not answered)"
                );
            }
            ask.push((*id, p.participants.clone()));
        }
        for (id, parts) in ask {
            for r in parts {
                if r != self.me && !self.down.contains(&r) {
                    out.push(Action::Send {
                        to: r,
                        msg: Msg::Query { id },
                    });
                }
            }
            self.decide(now, id, &mut out);
        }
        let keep = cfg.keep;
        self.outcomes
            .retain(|_, (_, t)| now.saturating_duration_since(*t) < keep);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upd(k: &str, v: &str) -> Update {
        Update {
            keys: vec![k.as_bytes().to_vec()],
            payload: v.as_bytes().to_vec(),
        }
    }

    #[test]
    fn messages_round_trip_and_bad_input_is_an_error() {
        let id = DtxId {
            leader: 2,
            incarnation: 77,
            seq: 9,
        };
        let msgs = [
            Msg::Prepare {
                id,
                epoch: 5,
                participants: vec![2, 0, 1],
                update: upd("k", "v"),
            },
            Msg::Ack { id, ok: false },
            Msg::Commit { id },
            Msg::Abort { id },
            Msg::Query { id },
            Msg::Answer {
                id,
                state: Known::Lost,
            },
        ];
        for m in msgs {
            let mut b = Vec::new();
            m.emit(&mut b);
            assert_eq!(Msg::parse(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::parse(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            b.push(0);
            assert!(Msg::parse(&b).is_err(), "trailing byte");
        }
        assert!(Msg::parse(&[9, 0, 0, 0, 0]).is_err());
    }

    /// Leader + one follower, by hand: prepare holds the key, the ack makes
    /// the leader apply, then commit applies on the follower at the same
    /// epoch and releases the key.
    #[test]
    fn commit_path_by_hand() {
        let t0 = Instant::now();
        let mut l = Dtx::new(0, 1, DtxConfig::default());
        let mut f = Dtx::new(1, 2, DtxConfig::default());
        let (id, a) = l.begin(t0, 42, upd("k", "v"), vec![1]);
        // the leader's intent is durable before its prepare goes out
        let [Action::Persist(LogRec::Prepared { .. }), Action::Send { to: 1, msg }] = a.as_slice()
        else {
            panic!("{a:?}")
        };
        let a = f.handle(t0, 0, msg.clone());
        // the follower's entry too, before its ack
        assert!(matches!(
            &a[0],
            Action::Persist(LogRec::Prepared { epoch: 42, .. })
        ));
        assert_eq!(
            a[1],
            Action::Hold {
                keys: vec![b"k".to_vec()]
            }
        );
        let Action::Send { to: 0, msg: ack } = &a[2] else {
            panic!("{a:?}")
        };
        let a = l.handle(t0, 1, ack.clone());
        assert!(matches!(a.as_slice(), [Action::Apply { epoch: 42, .. }]));
        let a = l.applied(t0, id, true);
        assert_eq!(
            a[0],
            Action::Persist(LogRec::Resolved {
                id,
                committed: true
            })
        );
        assert_eq!(
            a[1],
            Action::Reply {
                id,
                outcome: Outcome::Committed { epoch: 42 }
            }
        );
        let Action::Send { msg: commit, .. } = &a[2] else {
            panic!()
        };
        let a = f.handle(t0, 0, commit.clone());
        assert!(matches!(&a[0], Action::Apply { epoch: 42, .. }));
        assert_eq!(
            a[1],
            Action::Release {
                keys: vec![b"k".to_vec()]
            }
        );
        assert_eq!(
            a[2],
            Action::Persist(LogRec::Resolved {
                id,
                committed: true
            })
        );
        assert_eq!(f.in_flight(), (0, 0));
    }

    /// A refusal aborts; a follower asked about a transaction it never saw
    /// refuses its late Prepare.
    #[test]
    fn unknown_to_a_follower_means_it_can_never_commit() {
        let t0 = Instant::now();
        let mut l = Dtx::new(0, 1, DtxConfig::default());
        let mut f = Dtx::new(2, 3, DtxConfig::default());
        let (id, a) = l.begin(t0, 7, upd("k", "v"), vec![1, 2]);
        let prep = a
            .iter()
            .find_map(|x| match x {
                Action::Send { to: 2, msg } => Some(msg.clone()),
                _ => None,
            })
            .unwrap();
        // follower 1 asks follower 2 before the Prepare reached it
        let a = f.handle(t0, 1, Msg::Query { id });
        assert_eq!(
            a,
            vec![
                Action::Persist(LogRec::Resolved {
                    id,
                    committed: false
                }),
                Action::Send {
                    to: 1,
                    msg: Msg::Answer {
                        id,
                        state: Known::Unknown
                    }
                }
            ]
        );
        let a = f.handle(t0, 0, prep);
        assert_eq!(
            a,
            vec![Action::Send {
                to: 0,
                msg: Msg::Ack { id, ok: false }
            }]
        );
        let a = l.handle(t0, 2, Msg::Ack { id, ok: false });
        assert!(a.contains(&Action::Reply {
            id,
            outcome: Outcome::Aborted {
                refused_by: Some(2),
                unreachable: vec![]
            }
        }));
    }

    /// The prepare's `Send` to `to` among `a`.
    fn prepare_to(a: &[Action], to: Rank) -> Msg {
        a.iter()
            .find_map(|x| match x {
                Action::Send { to: t, msg } if *t == to => Some(msg.clone()),
                _ => None,
            })
            .unwrap()
    }

    fn applied_at(a: &[Action]) -> Option<u64> {
        a.iter().find_map(|x| match x {
            Action::Apply { epoch, .. } => Some(*epoch),
            _ => None,
        })
    }

    /// RP_3 with the leader and the other follower cut off together (a
    /// minority of two, DOWN in the map for good): the follower's commit
    /// is lost, nobody answers its queries. It must not hold the key
    /// forever: prepared on every participant the map still has in →
    /// commit (DAOS's resync). While the other follower is only silent or
    /// refuses connections (not out of the map) it waits; a leader that
    /// answers "unknown" (outcome forgotten) aborts.
    #[test]
    fn prepared_entry_resolves_when_leader_and_other_follower_are_down() {
        let t0 = Instant::now();
        let cfg = DtxConfig::default();
        let mut l = Dtx::new(0, 1, cfg);
        let mut f = Dtx::new(2, 3, cfg);
        let (id, a) = l.begin(t0, 11, upd("k", "v"), vec![4, 2]);
        let a = f.handle(t0, 0, prepare_to(&a, 2));
        assert!(a.contains(&Action::Hold {
            keys: vec![b"k".to_vec()]
        }));
        // the leader commits (rank 4 acked), the Commit to 2 is lost
        let _ = l.handle(t0, 4, Msg::Ack { id, ok: true });
        let _ = l.handle(t0, 2, Msg::Ack { id, ok: true });
        let _ = l.applied(t0, id, true);
        // the leader alone down: rank 4 is asked and stays silent → held
        let a = f.peer_down(t0, 0);
        assert_eq!(applied_at(&a), None);
        let mut t = t0;
        for _ in 0..20 {
            t += cfg.retry;
            let a = f.tick(t);
            assert_eq!(applied_at(&a), None, "committed without asking rank 4");
            assert!(a.iter().all(|x| !matches!(x, Action::Send { to: 0, .. })));
        }
        assert_eq!(f.in_flight(), (0, 1));
        // rank 4's connection refused (no pool map: it may come back with
        // its store as it is, e.g. a restarted process): still waited for
        let _ = f.peer_down(t, 4);
        for _ in 0..20 {
            t += cfg.retry;
            assert_eq!(applied_at(&f.tick(t)), None, "committed without rank 4");
        }
        // the pool map has both out: resolved at once
        let _ = f.peer_out(t, 0);
        let a = f.peer_out(t, 4);
        assert_eq!(applied_at(&a), Some(11), "{a:?}");
        assert!(a.contains(&Action::Release {
            keys: vec![b"k".to_vec()]
        }));
        assert_eq!(f.in_flight(), (0, 0));
        assert_eq!(f.stats.resynced, 1);

        // a leader that no longer knows the transaction (its outcome
        // window passed) answers "unknown": the follower aborts
        let mut f = Dtx::new(2, 4, cfg);
        let gone = DtxId {
            leader: 0,
            incarnation: 1,
            seq: 99,
        };
        let _ = f.handle(
            t0,
            0,
            Msg::Prepare {
                id: gone,
                epoch: 12,
                participants: vec![0, 2],
                update: upd("j", "w"),
            },
        );
        let a = f.tick(t0 + cfg.resolve_after);
        assert!(a.contains(&Action::Send {
            to: 0,
            msg: Msg::Query { id: gone }
        }));
        let ans = l.handle(t0 + cfg.resolve_after, 2, Msg::Query { id: gone });
        assert!(ans.contains(&Action::Send {
            to: 2,
            msg: Msg::Answer {
                id: gone,
                state: Known::Unknown
            }
        }));
        let a = f.handle(
            t0 + cfg.resolve_after,
            0,
            Msg::Answer {
                id: gone,
                state: Known::Unknown,
            },
        );
        assert_eq!(applied_at(&a), None);
        assert!(a.contains(&Action::Release {
            keys: vec![b"j".to_vec()]
        }));
        assert_eq!(f.in_flight(), (0, 0));
    }

    /// A follower restarted from its records still holds the key and
    /// commits what its leader committed; the records round-trip and a
    /// damaged one is an error.
    #[test]
    fn restored_follower_holds_and_resolves() {
        let t0 = Instant::now();
        let cfg = DtxConfig::default();
        let mut l = Dtx::new(0, 1, cfg);
        let mut f = Dtx::new(1, 2, cfg);
        let (id, a) = l.begin(t0, 9, upd("k", "v"), vec![1]);
        let Action::Send { msg, .. } = &a[1] else {
            panic!("{a:?}")
        };
        let mut log = Vec::new();
        for x in f.handle(t0, 0, msg.clone()) {
            if let Action::Persist(r) = x {
                let mut b = Vec::new();
                r.emit(&mut b);
                assert_eq!(LogRec::parse(&b).unwrap(), r);
                assert!(LogRec::parse(&b[..b.len() - 1]).is_err());
                log.push(r);
            }
        }
        let _ = l.handle(t0, 1, Msg::Ack { id, ok: true });
        let _ = l.applied(t0, id, true);
        // the follower restarts before the commit reaches it
        let (mut f, holds) = Dtx::restore(1, 3, cfg, t0, log);
        assert_eq!(
            holds,
            vec![Action::Hold {
                keys: vec![b"k".to_vec()]
            }]
        );
        let t1 = t0 + cfg.resolve_after;
        let a = f.tick(t1);
        assert!(a.contains(&Action::Send {
            to: 0,
            msg: Msg::Query { id }
        }));
        let ans = l.handle(t1, 1, Msg::Query { id });
        let [Action::Send { msg: ans, .. }] = ans.as_slice() else {
            panic!("{ans:?}")
        };
        let a = f.handle(t1, 0, ans.clone());
        assert!(matches!(&a[0], Action::Apply { epoch: 9, .. }));
        assert_eq!(f.in_flight(), (0, 0));
    }
}
