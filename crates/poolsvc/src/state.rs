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
    /// Reintegration: dkeys deleted from engines that left their group (the
    /// spares' leftover copies, reclaimed once the returning engines are
    /// complete).
    #[serde(default)]
    pub reclaimed: u64,
    /// The reclaim after a reintegration: empty (none), `running`, `done in
    /// N ms`, or `stopped: why` (the leftovers stay, unreachable).
    #[serde(default)]
    pub reclaim: String,
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

/// Container property: `HEALTHY` or `UNCLEAN` (DAOS's container status,
/// `DAOS_PROP_CO_STATUS`); absent = healthy. `UNCLEAN`: a failure lost every
/// replica of some of the container's data ([`Pool::mark_redundancy_lost`]);
/// clients refuse its I/O (`obj::dist::Error::RedundancyLost`, DAOS's
/// `-DER_RF`) until it is set `healthy` again.
pub const STATUS: &str = "status";
pub const HEALTHY: &str = "HEALTHY";
pub const UNCLEAN: &str = "UNCLEAN";
/// Container property: the pool-map version at which `status` was last set.
pub const STATUS_VER: &str = "status_ver";
/// Container property: the redundancy factor (failures of fault domains its
/// objects survive, DAOS's `rf`); absent: the pool's `replicas` − 1, else 1
/// (the CLI's default class is RP_2).
pub const RF: &str = "rf";
/// Container property set with `UNCLEAN`: which ranks were lost, at which
/// map version.
pub const LOST: &str = "rf_lost";

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

    /// The redundancy factor of container `cont` ([`RF`]).
    pub fn cont_rf(&self, cont: &Container) -> u32 {
        if let Some(rf) = cont
            .props
            .get(RF)
            .and_then(|v| v.trim_start_matches("rf").parse().ok())
        {
            return rf;
        }
        self.props
            .get("replicas")
            .and_then(|r| r.parse::<u32>().ok())
            .map_or(1, |r| r.saturating_sub(1))
    }

    /// Containers whose status is `UNCLEAN` (redundancy lost).
    pub fn unclean(&self) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, c)| c.props.get(STATUS).is_some_and(|s| s == UNCLEAN))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// A rebuild completed: its map (`self.rebuild.base_map`) replaces
    /// `old_base` as the map whose group members hold all of the data. A
    /// fault domain that served under `old_base` and neither serves nor is
    /// being reintegrated (`UP`) under the new base lost its replicas for
    /// good: the rebuild could copy them only from a surviving member of the
    /// same group. A group of an object of redundancy factor `rf` has
    /// `min(rf + 1, serving domains)` members on distinct domains, any such
    /// set of domains possibly; so when at least that many domains were
    /// lost, some group may have lost every replica, and its new members
    /// (counted complete from now on) hold nothing: the container is marked
    /// `UNCLEAN` (DAOS: `ds_cont_rf_check`, the number of failed domains
    /// against the container's rf; its I/O then fails with `-DER_RF`).
    /// Before the job completes, reads of such a group answer "unavailable"
    /// (the replicas may return); after, without this mark, a read answered
    /// "not found": silent data loss.
    pub fn mark_redundancy_lost(&mut self, old_base: &str, version: u32) {
        let map = self.map();
        let before = if old_base.is_empty() {
            map.all_in()
        } else {
            match PoolMap::from_text(old_base) {
                Ok(m) => m,
                Err(_) => map.all_in(),
            }
        };
        let Ok(after) = PoolMap::from_text(&self.rebuild.base_map) else {
            return;
        };
        let domain_in = |m: &PoolMap, d: u32, up_too: bool| {
            m.domain_targets(d).is_ok_and(|ts| {
                ts.iter().any(|t| {
                    m.target(*t).is_ok_and(|t| {
                        t.state.is_serving() || (up_too && t.state == TargetState::Up)
                    })
                })
            })
        };
        let serving: Vec<u32> = (0..before.domains() as u32)
            .filter(|&d| domain_in(&before, d, false))
            .collect();
        let lost: Vec<u32> = serving
            .iter()
            .copied()
            .filter(|&d| !domain_in(&after, d, true))
            .collect();
        if lost.is_empty() {
            return;
        }
        let rfs: Vec<(String, u32)> = self
            .containers
            .iter()
            .map(|(n, c)| (n.clone(), self.cont_rf(c)))
            .collect();
        for (name, rf) in rfs {
            let members = (rf as usize + 1).min(serving.len());
            if lost.len() < members {
                continue;
            }
            let Some(c) = self.containers.get_mut(&name) else {
                continue;
            };
            if c.props.get(STATUS).is_some_and(|s| s == UNCLEAN) {
                continue;
            }
            tracing::error!(
                cont = %name,
                rf,
                ?lost,
                version,
                "redundancy lost: every replica of some of the container's data may be gone; \
                 its I/O is refused (-DER_RF) until `cont set-prop ... status:healthy`"
            );
            c.props.insert(STATUS.into(), UNCLEAN.into());
            c.props.insert(STATUS_VER.into(), version.to_string());
            c.props.insert(
                LOST.into(),
                format!(
                    "ranks {} lost at map version {version} (rf {rf})",
                    lost.iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            );
        }
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
                redundancy_lost: self.unclean(),
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
                let old_base = std::mem::take(&mut p.rebuild.base_map);
                p.rebuild = (**status).clone();
                if status.state == "done" && status.base_map != old_base {
                    p.mark_redundancy_lost(&old_base, status.version);
                }
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
                let version = p.map().version();
                let c = p
                    .containers
                    .get_mut(cont)
                    .ok_or_else(|| format!("no container {cont:?}"))?;
                if key == STATUS {
                    // DAOS's `daos cont set-prop --properties status:healthy`:
                    // the operator accepts the loss; I/O is allowed again
                    let v = value.to_ascii_uppercase();
                    if v != HEALTHY && v != UNCLEAN {
                        return Err(format!(
                            "container status {value:?}: must be healthy (or unclean)"
                        ));
                    }
                    c.props.insert(STATUS.into(), v);
                    c.props.insert(STATUS_VER.into(), version.to_string());
                    return Ok(Reply::Done);
                }
                if key == RF && value.trim_start_matches("rf").parse::<u32>().is_err() {
                    return Err(format!("container rf {value:?}: not a number"));
                }
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
    fn a_rebuild_that_lost_every_replica_of_a_group_marks_the_container_unclean() {
        let mut s = PoolSvcState::default();
        s.apply(&Command::CreatePool {
            pool: "p".into(),
            domains: 4,
            per_domain: 1,
        });
        for (c, rf) in [("c", None), ("c0", Some("0")), ("c2", Some("rf2"))] {
            let props = rf
                .map(|v| [(RF.to_string(), v.to_string())].into())
                .unwrap_or_default();
            s.apply(&Command::CreateCont {
                pool: "p".into(),
                cont: c.into(),
                props,
            });
        }
        let set = |s: &mut PoolSvcState, d: u32, st: &str| {
            let r = s.apply(&Command::SetDomainState {
                pool: "p".into(),
                domain: d,
                state: st.into(),
            });
            assert!(matches!(r, Reply::MapVersion(_)), "{r:?}");
        };
        let done = |s: &mut PoolSvcState| {
            let m = s.pools["p"].map();
            let r = s.apply(&Command::SetRebuild {
                pool: "p".into(),
                status: Box::new(RebuildStatus {
                    version: m.version(),
                    state: "done".into(),
                    base_map: m.to_text(),
                    ..Default::default()
                }),
            });
            assert_eq!(r, Reply::Done);
        };
        let unclean = |s: &PoolSvcState| s.pools["p"].view().rebuild.redundancy_lost;
        let pool = |s: &PoolSvcState| s.pools["p"].clone();
        assert_eq!(pool(&s).cont_rf(&pool(&s).containers["c"]), 1);
        assert_eq!(pool(&s).cont_rf(&pool(&s).containers["c2"]), 2);
        // one domain lost and rebuilt: only the rf 0 container lost data
        set(&mut s, 1, "DOWN");
        set(&mut s, 1, "EXCLUDED");
        assert!(unclean(&s).is_empty(), "not before the rebuild completes");
        done(&mut s);
        assert_eq!(unclean(&s), vec!["c0".to_string()]);
        assert!(pool(&s).containers["c0"].props[LOST].contains("ranks 1 lost"));
        // a second loss after that rebuild completed: the groups were whole
        // again (rebuilt from the survivors): nothing more lost
        set(&mut s, 2, "DOWN");
        set(&mut s, 2, "EXCLUDED");
        done(&mut s);
        assert_eq!(unclean(&s), vec!["c0".to_string()]);
        // the operator accepts the loss
        let clear = |s: &mut PoolSvcState, c: &str, v: &str| {
            s.apply(&Command::SetContProp {
                pool: "p".into(),
                cont: c.into(),
                key: STATUS.into(),
                value: v.into(),
            })
        };
        assert_eq!(clear(&mut s, "c0", "healthy"), Reply::Done);
        assert!(unclean(&s).is_empty());
        assert_eq!(pool(&s).containers["c0"].props[STATUS], HEALTHY);
        assert!(matches!(clear(&mut s, "c0", "fine"), Reply::Refused(_)));
        // two domains out at once (one EXCLUDED, one only DOWN: the rebuild
        // does not wait for it, its replicas are replaced from nothing)
        set(&mut s, 1, "UP");
        set(&mut s, 1, "UP-IN");
        set(&mut s, 2, "UP");
        set(&mut s, 2, "UP-IN");
        done(&mut s);
        assert!(unclean(&s).is_empty(), "returns lose nothing");
        set(&mut s, 0, "DOWN");
        set(&mut s, 0, "EXCLUDED");
        set(&mut s, 3, "DOWN");
        done(&mut s);
        assert_eq!(unclean(&s), vec!["c".to_string(), "c0".to_string()]);
        // a fresh pool of 4 domains with one container "c" (no rf property)
        let pool_with_c = || {
            let mut x = PoolSvcState::default();
            x.apply(&Command::CreatePool {
                pool: "p".into(),
                domains: 4,
                per_domain: 1,
            });
            x.apply(&Command::CreateCont {
                pool: "p".into(),
                cont: "c".into(),
                props: BTreeMap::new(),
            });
            x
        };
        // a returning (UP) domain keeps its data: not counted lost
        let mut t = pool_with_c();
        set(&mut t, 0, "DOWN");
        set(&mut t, 3, "DOWN");
        set(&mut t, 0, "UP");
        done(&mut t);
        assert!(unclean(&t).is_empty());
        // the pool's replicas give the default rf: RP_3 survives two
        let mut u = pool_with_c();
        u.apply(&Command::SetPoolProp {
            pool: "p".into(),
            key: "replicas".into(),
            value: "3".into(),
        });
        assert_eq!(pool(&u).cont_rf(&pool(&u).containers["c"]), 2);
        for d in [1, 3] {
            set(&mut u, d, "DOWN");
            set(&mut u, d, "EXCLUDED");
        }
        done(&mut u);
        assert!(
            unclean(&u).is_empty(),
            "rf 2: two lost domains are survived"
        );
        // the groups have 2 serving members now (2 domains left): losing
        // one of them is survived, losing both is not
        set(&mut u, 2, "DOWN");
        let mut v = u.clone();
        set(&mut v, 2, "EXCLUDED");
        done(&mut v);
        assert!(unclean(&v).is_empty());
        set(&mut u, 0, "DOWN");
        done(&mut u);
        assert_eq!(unclean(&u), vec!["c".to_string()]);
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
