//! The replicated state: pools (pool map, containers with properties, open
//! handles). Commands are applied in log order on every replica; applying is
//! deterministic (no clock, no randomness), so replicas agree.

use std::collections::{BTreeMap, BTreeSet};

use obj::placement::{PoolMap, TargetId, TargetState};
use serde::{Deserialize, Serialize};

/// A change to the pool service's state: the Raft log's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A pool of `domains` fault domains (engines) with `per_domain` targets
    /// each, all `UP-IN`.
    CreatePool {
        pool: String,
        domains: u32,
        per_domain: u32,
    },
    /// Change one target's state (DAOS transitions only).
    SetTargetState {
        pool: String,
        target: TargetId,
        state: String,
    },
    /// Change every target of a fault domain (an engine).
    SetDomainState {
        pool: String,
        domain: u32,
        state: String,
    },
    /// A container with properties (`key=value`).
    CreateCont {
        pool: String,
        cont: String,
        props: BTreeMap<String, String>,
    },
    /// Forget a container (`dpustack cont destroy` against a system).
    DestroyCont { pool: String, cont: String },
    /// Forget a pool, its map, containers and handles (`dpustack pool
    /// destroy` against a system).
    DestroyPool { pool: String },
    /// Set one container property.
    SetContProp {
        pool: String,
        cont: String,
        key: String,
        value: String,
    },
    /// Open a pool handle for `client`; the reply carries its id.
    OpenHandle { pool: String, client: String },
    /// Close a pool handle.
    CloseHandle { pool: String, handle: u64 },
    /// The rebuild driver's progress for `pool` (written by the leader's
    /// driver only; refused when older than what is recorded).
    SetRebuild {
        pool: String,
        status: Box<RebuildStatus>,
    },
    /// Set one pool property (`class`, `replicas`: the defaults of
    /// `pool create --class --replicas`).
    SetPoolProp {
        pool: String,
        key: String,
        value: String,
    },
    /// Engine `rank` answers as incarnation `incarnation` (its ping answer
    /// or lease request; a number a restarted engine process never reuses).
    /// The first one is recorded; the same one again changes nothing; a
    /// different one is a **restart** (the engine may have missed writes
    /// however short its absence): it is recorded, the rank is put in
    /// [`PoolSvcState::restarted`] and its `UP`/`UP-IN` targets are set
    /// `DOWN` in every pool, in this one entry — so the map that lifts the
    /// restarted engine's fence already has it DOWN, and it comes back only
    /// through reintegration (DAOS: a new incarnation is excluded and
    /// reintegrated, SWIM's incarnation numbers).
    EngineIncarnation { rank: u32, incarnation: u64 },
    /// `cmd` sent by client `client` as its request number `seq` (client
    /// sessions, Raft thesis §6.3): applied once; the same `seq` again (a
    /// retry after a lost answer, maybe to a new leader) answers the reply
    /// recorded the first time and changes nothing; an older `seq` is
    /// refused. One request at a time per client.
    Session {
        client: u64,
        seq: u64,
        cmd: Box<Command>,
    },
}

/// The most client sessions kept; beyond, the least recently used is
/// forgotten (a retry of its last request would apply again).
pub const MAX_SESSIONS: usize = 1024;

/// A client's session: its last request and the reply it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub seq: u64,
    pub reply: Reply,
    /// `session_clock` when last used (for eviction).
    pub used: u64,
}

/// Where a pool's rebuild stands (DAOS's rebuild status in `pool query`).
/// A rebuild goes from the map of the last completed rebuild (`base_map`)
/// to the map of `version`; see `crate::rebuild`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildStatus {
    /// The pool-map version being (or last) rebuilt to; 0: never.
    pub version: u32,
    /// `idle`, `scanning`, `pulling`, `done`, or `failed: why`.
    pub state: String,
    /// Why: `exclude` (targets went EXCLUDED) or `reintegrate` (targets UP).
    pub kind: String,
    /// Pass 1 (to the new layout), pass 2 (reintegrated targets once more
    /// after they turned UP-IN: writes they missed while UP).
    pub pass: u32,
    pub objs_scanned: u64,
    pub keys_scanned: u64,
    /// Objects of which something was copied.
    pub objs_copied: u64,
    /// Values (single values, array extents) copied.
    pub recs_copied: u64,
    pub bytes_copied: u64,
    /// Milliseconds since the job started (its start on this leader).
    pub elapsed_ms: u64,
    /// Where a new leader resumes: (source rank, container, engine shard,
    /// object anchor), the pass and the map version it was for.
    pub cursor: Option<RebuildCursor>,
    /// Targets filled on request in pass 2 (the reintegrated ones).
    pub extra: Vec<TargetId>,
    /// The map (text) of the last completed rebuild; empty: the pool's first
    /// map (every target in).
    pub base_map: String,
}

/// A rebuild's resume point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildCursor {
    pub rank: u32,
    pub cont: String,
    pub shard: u32,
    pub anchor: Vec<u8>,
}

/// What applying a command answered (the same on every replica).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Nothing to return (also: a membership or blank entry).
    #[default]
    Done,
    /// The pool map's version after the change.
    MapVersion(u32),
    /// A new handle's id.
    Handle(u64),
    /// The command was refused (no such pool, bad transition, ...); the log
    /// entry is committed but changed nothing.
    Refused(String),
}

/// One container's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub props: BTreeMap<String, String>,
}

/// One pool's replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// The pool map, as [`PoolMap::to_text`] (the map type itself has no serde).
    pub map_text: String,
    pub containers: BTreeMap<String, Container>,
    /// Open handles: id → client name.
    pub handles: BTreeMap<u64, String>,
    /// Rebuild status (absent in states written before rebuild existed).
    #[serde(default)]
    pub rebuild: RebuildStatus,
    /// Pool properties (`class`, `replicas`).
    #[serde(default)]
    pub props: BTreeMap<String, String>,
}

impl Pool {
    /// The pool map.
    pub fn map(&self) -> PoolMap {
        // map_text is only ever written from a PoolMap by apply()
        PoolMap::from_text(&self.map_text).expect("pool map text written by apply")
    }

    /// What a client reads with (`obj::dist::PoolView`): the map, the map of
    /// the last completed rebuild (the replicas of a group under it hold all
    /// of its data) and the targets a running job still fills (pass 2).
    pub fn view(&self) -> obj::dist::PoolView {
        let rb = &self.rebuild;
        let base = if rb.base_map.is_empty() {
            None
        } else {
            // written by the rebuild driver from a PoolMap; unreadable text
            // leaves the client trusting the original replicas only
            PoolMap::from_text(&rb.base_map).ok()
        };
        let running = matches!(rb.state.as_str(), "scanning" | "pulling");
        obj::dist::PoolView {
            map: self.map(),
            rebuild: obj::dist::RebuildView {
                base,
                filling: if running {
                    rb.extra.clone()
                } else {
                    Vec::new()
                },
            },
        }
    }
}

/// Everything the pool service replicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSvcState {
    pub pools: BTreeMap<String, Pool>,
    /// Next handle id (handles are numbered by the log, the same on every replica).
    pub next_handle: u64,
    /// Client sessions by client id (see [`Command::Session`]).
    #[serde(default)]
    pub sessions: BTreeMap<u64, Session>,
    /// Counts session requests (an order for eviction, the same everywhere).
    #[serde(default)]
    pub session_clock: u64,
    /// Each engine rank's last known incarnation
    /// ([`Command::EngineIncarnation`]).
    #[serde(default)]
    pub incarnations: BTreeMap<u32, u64>,
    /// Ranks seen restarted and not reintegrated since (their targets not
    /// set `UP`/`UP-IN` since): the leader's monitor takes them as dead (DOWN,
    /// then EXCLUDED after `exclude_after`, then reintegrated when they
    /// answer), whichever leader saw the restart.
    #[serde(default)]
    pub restarted: BTreeSet<u32>,
}

/// Parse a state name as `pool query` prints it.
pub fn parse_state(s: &str) -> Option<TargetState> {
    Some(match s.to_ascii_uppercase().as_str() {
        "UP" => TargetState::Up,
        "UP-IN" | "UPIN" => TargetState::UpIn,
        "DOWN" => TargetState::Down,
        "EXCLUDED" | "DOWNOUT" => TargetState::Excluded,
        _ => return None,
    })
}

impl PoolSvcState {
    /// Apply one committed command.
    pub fn apply(&mut self, cmd: &Command) -> Reply {
        match self.try_apply(cmd) {
            Ok(r) => r,
            Err(e) => Reply::Refused(e),
        }
    }

    fn pool_mut(&mut self, pool: &str) -> Result<&mut Pool, String> {
        self.pools
            .get_mut(pool)
            .ok_or_else(|| format!("no pool {pool:?}"))
    }

    fn try_apply(&mut self, cmd: &Command) -> Result<Reply, String> {
        match cmd {
            Command::Session { client, seq, cmd } => {
                if matches!(**cmd, Command::Session { .. }) {
                    return Err("nested session".into());
                }
                self.session_clock += 1;
                let clock = self.session_clock;
                if let Some(s) = self.sessions.get_mut(client) {
                    if *seq == s.seq {
                        tracing::debug!(
                            client,
                            seq,
                            "pool service: a retried request, answered again"
                        );
                        s.used = clock;
                        return Ok(s.reply.clone());
                    }
                    if *seq < s.seq {
                        return Err(format!(
                            "request {seq} of client {client:#x} is older than its last ({})",
                            s.seq
                        ));
                    }
                } else if self.sessions.len() >= MAX_SESSIONS {
                    if let Some(old) = self
                        .sessions
                        .iter()
                        .min_by_key(|(_, s)| s.used)
                        .map(|(c, _)| *c)
                    {
                        self.sessions.remove(&old);
                    }
                }
                let reply = self.apply(cmd);
                self.sessions.insert(
                    *client,
                    Session {
                        seq: *seq,
                        reply: reply.clone(),
                        used: clock,
                    },
                );
                Ok(reply)
            }
            Command::CreatePool {
                pool,
                domains,
                per_domain,
            } => {
                if self.pools.contains_key(pool) {
                    return Err(format!("pool {pool:?} exists"));
                }
                if *domains == 0 || *per_domain == 0 || *domains * *per_domain > 4096 {
                    return Err(format!("bad pool geometry {domains}x{per_domain}"));
                }
                let m = PoolMap::uniform(*domains, *per_domain);
                let v = m.version();
                self.pools.insert(
                    pool.clone(),
                    Pool {
                        map_text: m.to_text(),
                        containers: BTreeMap::new(),
                        handles: BTreeMap::new(),
                        rebuild: RebuildStatus::default(),
                        props: BTreeMap::new(),
                    },
                );
                Ok(Reply::MapVersion(v))
            }
            Command::SetTargetState {
                pool,
                target,
                state,
            } => {
                let to = parse_state(state).ok_or_else(|| format!("no state {state:?}"))?;
                let p = self.pool_mut(pool)?;
                let mut m = p.map();
                let v = m.set_state(*target, to).map_err(|e| e.to_string())?;
                p.map_text = m.to_text();
                if to.is_serving() || to == TargetState::Up {
                    if let Ok(t) = m.target(*target) {
                        self.restarted.remove(&t.domain);
                    }
                }
                Ok(Reply::MapVersion(v))
            }
            Command::SetDomainState {
                pool,
                domain,
                state,
            } => {
                let to = parse_state(state).ok_or_else(|| format!("no state {state:?}"))?;
                let p = self.pool_mut(pool)?;
                let mut m = p.map();
                // all or nothing: a refused transition leaves the map as it was
                let v = m.set_domain_state(*domain, to).map_err(|e| e.to_string())?;
                p.map_text = m.to_text();
                if matches!(to, TargetState::Up | TargetState::UpIn) {
                    // being reintegrated (or set back by hand): no longer
                    // "restarted, to be taken out"
                    self.restarted.remove(domain);
                }
                Ok(Reply::MapVersion(v))
            }
            Command::EngineIncarnation { rank, incarnation } => {
                match self.incarnations.insert(*rank, *incarnation) {
                    None => return Ok(Reply::Done),
                    Some(old) if old == *incarnation => return Ok(Reply::Done),
                    Some(_) => {}
                }
                self.restarted.insert(*rank);
                for p in self.pools.values_mut() {
                    let mut m = p.map();
                    let Ok(ts) = m.domain_targets(*rank).map(<[TargetId]>::to_vec) else {
                        continue; // a pool without this engine
                    };
                    let mut changed = false;
                    for t in ts {
                        let serving = m
                            .target(t)
                            .is_ok_and(|t| matches!(t.state, TargetState::Up | TargetState::UpIn));
                        // UP/UP-IN -> DOWN is a DAOS transition: cannot fail
                        if serving && m.set_state(t, TargetState::Down).is_ok() {
                            changed = true;
                        }
                    }
                    if changed {
                        p.map_text = m.to_text();
                    }
                }
                Ok(Reply::Done)
            }
            Command::SetRebuild { pool, status } => {
                let p = self.pool_mut(pool)?;
                if status.version < p.rebuild.version {
                    return Err(format!(
                        "rebuild status for map version {} older than the recorded {}",
                        status.version, p.rebuild.version
                    ));
                }
                p.rebuild = (**status).clone();
                Ok(Reply::Done)
            }
            Command::SetPoolProp { pool, key, value } => {
                let p = self.pool_mut(pool)?;
                p.props.insert(key.clone(), value.clone());
                Ok(Reply::Done)
            }
            Command::CreateCont { pool, cont, props } => {
                let p = self.pool_mut(pool)?;
                if p.containers.contains_key(cont) {
                    return Err(format!("container {cont:?} exists"));
                }
                p.containers.insert(
                    cont.clone(),
                    Container {
                        props: props.clone(),
                    },
                );
                Ok(Reply::Done)
            }
            Command::DestroyCont { pool, cont } => {
                let p = self.pool_mut(pool)?;
                p.containers
                    .remove(cont)
                    .ok_or_else(|| format!("no container {cont:?}"))?;
                Ok(Reply::Done)
            }
            Command::DestroyPool { pool } => {
                self.pools
                    .remove(pool)
                    .ok_or_else(|| format!("no pool {pool:?}"))?;
                Ok(Reply::Done)
            }
            Command::SetContProp {
                pool,
                cont,
                key,
                value,
            } => {
                let p = self.pool_mut(pool)?;
                let c = p
                    .containers
                    .get_mut(cont)
                    .ok_or_else(|| format!("no container {cont:?}"))?;
                c.props.insert(key.clone(), value.clone());
                Ok(Reply::Done)
            }
            Command::OpenHandle { pool, client } => {
                let id = self.next_handle + 1;
                let p = self.pool_mut(pool)?;
                p.handles.insert(id, client.clone());
                self.next_handle = id;
                Ok(Reply::Handle(id))
            }
            Command::CloseHandle { pool, handle } => {
                let p = self.pool_mut(pool)?;
                p.handles
                    .remove(handle)
                    .ok_or_else(|| format!("no handle {handle}"))?;
                Ok(Reply::Done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_map_changes_follow_daos_transitions() {
        let mut s = PoolSvcState::default();
        let create = Command::CreatePool {
            pool: "p".into(),
            domains: 3,
            per_domain: 1,
        };
        assert_eq!(s.apply(&create), Reply::MapVersion(1));
        assert!(matches!(s.apply(&create), Reply::Refused(_)));
        let down = |t, st: &str| Command::SetTargetState {
            pool: "p".into(),
            target: t,
            state: st.into(),
        };
        assert_eq!(s.apply(&down(1, "DOWN")), Reply::MapVersion(2));
        assert_eq!(s.apply(&down(1, "EXCLUDED")), Reply::MapVersion(3));
        // EXCLUDED -> UP-IN is not a DAOS transition (it goes through UP)
        assert!(matches!(s.apply(&down(1, "UP-IN")), Reply::Refused(_)));
        assert!(matches!(s.apply(&down(9, "DOWN")), Reply::Refused(_)));
        let m = s.pools["p"].map();
        assert_eq!(m.version(), 3);
        assert_eq!(m.targets()[1].state, TargetState::Excluded);
    }

    #[test]
    fn a_new_incarnation_is_a_restart_marked_down_at_once() {
        let mut s = PoolSvcState::default();
        for p in ["p", "q"] {
            s.apply(&Command::CreatePool {
                pool: p.into(),
                domains: 3,
                per_domain: 2,
            });
        }
        let inc = |rank, incarnation| Command::EngineIncarnation { rank, incarnation };
        // first sighting: recorded, nothing else
        assert_eq!(s.apply(&inc(1, 7)), Reply::Done);
        assert_eq!(s.apply(&inc(1, 7)), Reply::Done);
        assert_eq!(s.pools["p"].map().version(), 1);
        assert!(s.restarted.is_empty());
        // another number: a restart, DOWN in every pool in the same entry
        assert_eq!(s.apply(&inc(1, 8)), Reply::Done);
        assert_eq!(s.incarnations[&1], 8);
        assert!(s.restarted.contains(&1));
        for p in ["p", "q"] {
            let m = s.pools[p].map();
            for t in m.domain_targets(1).unwrap() {
                assert_eq!(m.target(*t).unwrap().state, TargetState::Down, "{p}");
            }
            for t in m.domain_targets(0).unwrap() {
                assert_eq!(m.target(*t).unwrap().state, TargetState::UpIn);
            }
            assert!(m.version() > 1);
        }
        // restarted again while DOWN: still DOWN, the version does not move
        let v = s.pools["p"].map().version();
        assert_eq!(s.apply(&inc(1, 9)), Reply::Done);
        assert_eq!(s.pools["p"].map().version(), v);
        // reintegration (UP) clears the mark
        s.apply(&Command::SetDomainState {
            pool: "p".into(),
            domain: 1,
            state: "UP".into(),
        });
        assert!(s.restarted.is_empty());
        // a restart while UP (being filled) takes it DOWN again
        s.apply(&inc(1, 10));
        let m = s.pools["p"].map();
        assert_eq!(
            m.target(m.domain_targets(1).unwrap()[0]).unwrap().state,
            TargetState::Down
        );
        // a rank no pool has: recorded only
        assert_eq!(s.apply(&inc(9, 1)), Reply::Done);
        assert_eq!(s.apply(&inc(9, 2)), Reply::Done);
    }

    #[test]
    fn containers_and_handles() {
        let mut s = PoolSvcState::default();
        s.apply(&Command::CreatePool {
            pool: "p".into(),
            domains: 1,
            per_domain: 2,
        });
        let c = Command::CreateCont {
            pool: "p".into(),
            cont: "c".into(),
            props: [("label".to_string(), "c".to_string())].into(),
        };
        assert_eq!(s.apply(&c), Reply::Done);
        assert!(matches!(s.apply(&c), Reply::Refused(_)));
        let h = Command::OpenHandle {
            pool: "p".into(),
            client: "x".into(),
        };
        assert_eq!(s.apply(&h), Reply::Handle(1));
        assert_eq!(s.apply(&h), Reply::Handle(2));
        let close = Command::CloseHandle {
            pool: "p".into(),
            handle: 1,
        };
        assert_eq!(s.apply(&close), Reply::Done);
        assert!(matches!(s.apply(&close), Reply::Refused(_)));
        assert_eq!(s.pools["p"].handles.len(), 1);
        let dc = Command::DestroyCont {
            pool: "p".into(),
            cont: "c".into(),
        };
        assert_eq!(s.apply(&dc), Reply::Done);
        assert!(!s.pools["p"].containers.contains_key("c"));
        assert!(matches!(s.apply(&dc), Reply::Refused(_)));
        let dp = Command::DestroyPool { pool: "p".into() };
        assert_eq!(s.apply(&dp), Reply::Done);
        assert!(s.pools.is_empty());
        assert!(matches!(s.apply(&dp), Reply::Refused(_)));
    }

    #[test]
    fn sessions_apply_a_request_once() {
        let mut s = PoolSvcState::default();
        s.apply(&Command::CreatePool {
            pool: "p".into(),
            domains: 1,
            per_domain: 1,
        });
        let open = |client, seq| Command::Session {
            client,
            seq,
            cmd: Box::new(Command::OpenHandle {
                pool: "p".into(),
                client: format!("c{client}"),
            }),
        };
        assert_eq!(s.apply(&open(7, 1)), Reply::Handle(1));
        // the retry: the same answer, no second handle
        assert_eq!(s.apply(&open(7, 1)), Reply::Handle(1));
        assert_eq!(s.pools["p"].handles.len(), 1);
        assert_eq!(s.apply(&open(8, 1)), Reply::Handle(2));
        assert_eq!(s.apply(&open(7, 2)), Reply::Handle(3));
        assert!(matches!(s.apply(&open(7, 1)), Reply::Refused(_)));
        assert_eq!(s.pools["p"].handles.len(), 3);
        // a refused command's answer is recorded too
        let bad = Command::Session {
            client: 9,
            seq: 1,
            cmd: Box::new(Command::CloseHandle {
                pool: "p".into(),
                handle: 99,
            }),
        };
        assert!(matches!(s.apply(&bad), Reply::Refused(_)));
        assert_eq!(s.apply(&bad), s.sessions[&9].reply);
        assert!(matches!(
            s.apply(&Command::Session {
                client: 1,
                seq: 1,
                cmd: Box::new(open(1, 1))
            }),
            Reply::Refused(_)
        ));
        // bounded: the least recently used session goes
        for c in 100..100 + MAX_SESSIONS as u64 {
            s.apply(&open(c, 1));
        }
        assert_eq!(s.sessions.len(), MAX_SESSIONS);
        assert!(!s.sessions.contains_key(&7) && s.sessions.contains_key(&100));
    }
}
