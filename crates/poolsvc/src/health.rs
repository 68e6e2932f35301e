//! Engine failure handling by the pool-service leader, sans-IO: the leader
//! probes the engines (heartbeats, `obj::membership`'s detector); an engine
//! declared dead is marked `DOWN` in every pool's map, and `EXCLUDED` once it
//! has been DOWN for `exclude_after` (DAOS: DOWN, then out of the pool).
//!
//! The caller sends the probes and passes the clock; [`Monitor::step`]
//! returns the commands to replicate. Engine rank `r` is fault domain `r` of
//! every pool map (as `dpustack system` lays pools out).
//!
//! An engine that answers again stays DOWN (until EXCLUDED) and EXCLUDED
//! until the rebuild driver ([`crate::rebuild`]) reintegrates it: it then
//! calls [`Monitor::revive`] and the engine is judged afresh.
//!
//! **Restarts** (an engine killed and restarted faster than `dead_after`):
//! a probe's answer carries the engine's incarnation
//! ([`Monitor::heard_incarnation`]); one that differs from the replicated
//! record ([`PoolSvcState::incarnations`]) is replicated as
//! [`Command::EngineIncarnation`], whose apply sets the engine DOWN; a rank
//! the state lists as restarted is then taken as dead here (DOWN, EXCLUDED
//! after `exclude_after`, reintegrated when it answers) — by whichever leader
//! runs the monitor, since the record is replicated.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use obj::membership::{Detector, DetectorConfig, Liveness};
use obj::placement::TargetState;

use crate::state::{Command, PoolSvcState};

/// Monitor settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorConfig {
    pub detector: DetectorConfig,
    /// DOWN for this long (and still dead) → EXCLUDED; `None`: never.
    pub exclude_after: Option<Duration>,
}

/// The leader's view of the engines.
pub struct Monitor {
    cfg: MonitorConfig,
    /// Number of engines (ranks `0..n`).
    n: usize,
    det: Detector,
    /// When this monitor first saw each rank DOWN (leader-local: a new leader
    /// starts counting again, which only delays exclusion).
    down_since: BTreeMap<u32, Instant>,
    /// Ranks already warned about (answering, but DOWN/EXCLUDED in a map).
    warned: std::collections::BTreeSet<u32>,
    /// The incarnation each rank last answered a probe with.
    incarnations: Vec<Option<u64>>,
    /// When this monitor started (this replica became leader): a lease an
    /// earlier leader granted was asked for before that.
    started: Instant,
    /// The engines' lease length (the fence), `None`: no fence.
    lease: Option<Duration>,
    /// When this leader last granted each rank a lease.
    lease_grants: BTreeMap<u32, Instant>,
}

impl Monitor {
    /// Engines `0..n`, all considered alive (heard) at `now`.
    pub fn new(cfg: MonitorConfig, n: usize, now: Instant) -> Monitor {
        Monitor {
            cfg,
            n,
            det: Detector::new(cfg.detector, n, now),
            down_since: BTreeMap::new(),
            warned: Default::default(),
            incarnations: vec![None; n],
            started: now,
            lease: None,
            lease_grants: BTreeMap::new(),
        }
    }

    /// The engines renew a lease of `lease` (the fence): an engine is marked
    /// DOWN only once its lease can have lapsed — `lease` after the later
    /// of this monitor's start and its last grant — so it has fenced itself
    /// (refuses every versioned request) before anyone writes around it.
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = lease;
        self
    }

    /// This leader granted `rank` a lease at `at` (after the engine asked).
    pub fn lease_granted(&mut self, rank: u32, at: Instant) {
        let e = self.lease_grants.entry(rank).or_insert(at);
        if at > *e {
            *e = at;
        }
    }

    /// A client reported `rank` unreachable: probe it at once. Nothing
    /// more: only the monitor's own probes (and the lease) decide DOWN.
    pub fn suspect(&mut self, rank: usize) {
        if rank < self.n {
            self.det.probe_soon(rank);
        }
    }

    /// Whether `rank`'s lease can have lapsed at `now` (always without a
    /// fence).
    fn lease_lapsed(&self, rank: u32, now: Instant) -> bool {
        let Some(l) = self.lease else { return true };
        let from = self
            .lease_grants
            .get(&rank)
            .map_or(self.started, |g| (*g).max(self.started));
        now >= from + l
    }

    /// Engines to probe now.
    pub fn probes_due(&mut self, now: Instant) -> Vec<usize> {
        self.det.probes_due(now)
    }

    /// Engine `rank` answered a probe at `now`.
    pub fn heard(&mut self, rank: usize, now: Instant) {
        self.det.heard(rank, now)
    }

    /// Engine `rank` answered a probe at `now` as `incarnation` (`None`: an
    /// engine that names none; then only [`Monitor::heard`]).
    pub fn heard_incarnation(&mut self, rank: usize, now: Instant, incarnation: Option<u64>) {
        self.det.heard(rank, now);
        if let (Some(i), Some(slot)) = (incarnation, self.incarnations.get_mut(rank)) {
            *slot = Some(i);
        }
    }

    /// Engine `rank` is being reintegrated: alive from `now`, probed again
    /// (dead again later → DOWN again).
    pub fn revive(&mut self, rank: usize, now: Instant) {
        if rank < self.n {
            self.det.revive(rank, now);
            self.down_since.remove(&(rank as u32));
            self.warned.remove(&(rank as u32));
        }
    }

    /// What the detector believes about `rank`.
    pub fn liveness(&self, rank: usize) -> Liveness {
        self.det.state(rank)
    }

    /// Advance to `now` against the replicated `state`: the commands to
    /// replicate (DOWN for newly dead engines, EXCLUDED for long-DOWN ones).
    pub fn step(&mut self, now: Instant, state: &PoolSvcState) -> Vec<Command> {
        for (r, l) in self.det.tick(now) {
            tracing::info!(rank = r, liveness = ?l, "pool service: engine liveness");
        }
        let mut out = Vec::new();
        // restarts: an incarnation the replicated record does not have is
        // replicated (a different recorded one: the apply sets it DOWN)
        for (r, inc) in self.incarnations.iter().enumerate() {
            let Some(inc) = *inc else { continue };
            let rank = r as u32;
            match state.incarnations.get(&rank) {
                Some(old) if *old == inc => {}
                old => {
                    if old.is_some() {
                        tracing::warn!(
                            rank,
                            old = ?old,
                            new = inc,
                            "pool service: engine restarted (new incarnation): DOWN, to be \
                             reintegrated"
                        );
                    }
                    out.push(Command::EngineIncarnation {
                        rank,
                        incarnation: inc,
                    });
                }
            }
        }
        if !out.is_empty() {
            // the next step judges with the record applied
            return out;
        }
        for &rank in &state.restarted {
            if (rank as usize) < self.n && self.det.declare_dead(rank as usize) {
                tracing::info!(rank, "pool service: restarted engine taken as dead");
            }
        }
        for (name, pool) in &state.pools {
            let map = pool.map();
            for d in 0..map.domains() as u32 {
                if d as usize >= self.n {
                    continue;
                }
                if self.det.state(d as usize) != Liveness::Dead {
                    let out_of_pool = map.domain_targets(d).is_ok_and(|ts| {
                        ts.iter().any(|t| {
                            map.target(*t).is_ok_and(|t| {
                                matches!(t.state, TargetState::Down | TargetState::Excluded)
                            })
                        })
                    });
                    if out_of_pool && self.warned.insert(d) {
                        tracing::warn!(
                            rank = d,
                            pool = %name,
                            "engine answers but is DOWN/EXCLUDED in the pool map: it stays out \
                             until the rebuild driver reintegrates it (once EXCLUDED)"
                        );
                    }
                    continue;
                }
                let Ok(ts) = map.domain_targets(d) else {
                    continue;
                };
                let states: Vec<TargetState> = ts
                    .iter()
                    .filter_map(|t| map.target(*t).ok().map(|t| t.state))
                    .collect();
                if states
                    .iter()
                    .any(|s| matches!(s, TargetState::UpIn | TargetState::Up))
                {
                    if !state.restarted.contains(&d) && !self.lease_lapsed(d, now) {
                        // dead to our probes, but its lease may still run:
                        // it could serve an old-map client what a write
                        // around it under the new map replaces
                        tracing::info!(
                            rank = d,
                            "pool service: engine dead, DOWN once its lease lapsed"
                        );
                        continue;
                    }
                    out.push(Command::SetDomainState {
                        pool: name.clone(),
                        domain: d,
                        state: "DOWN".into(),
                    });
                    self.down_since.entry(d).or_insert(now);
                } else if states.iter().all(|s| *s == TargetState::Down) {
                    let since = *self.down_since.entry(d).or_insert(now);
                    if self
                        .cfg
                        .exclude_after
                        .is_some_and(|x| now.duration_since(since) >= x)
                    {
                        out.push(Command::SetDomainState {
                            pool: name.clone(),
                            domain: d,
                            state: "EXCLUDED".into(),
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(exclude_ms: u64) -> MonitorConfig {
        MonitorConfig {
            detector: DetectorConfig {
                interval: Duration::from_millis(100),
                suspect_after: Duration::from_millis(300),
                dead_after: Duration::from_millis(500),
            },
            exclude_after: Some(Duration::from_millis(exclude_ms)),
        }
    }

    fn pool_state(n: u32) -> PoolSvcState {
        let mut s = PoolSvcState::default();
        s.apply(&Command::CreatePool {
            pool: "p".into(),
            domains: n,
            per_domain: 1,
        });
        s
    }

    /// Run the monitor on an injected clock (10 ms steps) for `ms`, engines in
    /// `dead` never answering, applying its commands; when each command came.
    fn run(
        m: &mut Monitor,
        s: &mut PoolSvcState,
        t0: Instant,
        from: u64,
        ms: u64,
        dead: &[usize],
    ) -> Vec<(u64, Command)> {
        drive(m, s, t0, from, ms, |m, r, now, _| {
            if !dead.contains(&r) {
                m.heard(r, now);
            }
        })
    }

    /// Steps the monitor every 10 ms of `[from, from + ms]` after `t0`,
    /// `hear(monitor, rank, now, t)` for every probe due, applying what it
    /// decides to `s`; returns the commands with their time in ms.
    fn drive(
        m: &mut Monitor,
        s: &mut PoolSvcState,
        t0: Instant,
        from: u64,
        ms: u64,
        hear: impl Fn(&mut Monitor, usize, Instant, u64),
    ) -> Vec<(u64, Command)> {
        let mut out = Vec::new();
        let mut t = from;
        while t <= from + ms {
            let now = t0 + Duration::from_millis(t);
            for r in m.probes_due(now) {
                hear(m, r, now, t);
            }
            for c in m.step(now, s) {
                s.apply(&c);
                out.push((t, c));
            }
            t += 10;
        }
        out
    }

    #[test]
    fn dead_engine_goes_down_then_excluded_on_time() {
        let t0 = Instant::now();
        let mut s = pool_state(3);
        let mut m = Monitor::new(cfg(2000), 3, t0);
        // all answer for a second: nothing to do
        assert!(run(&mut m, &mut s, t0, 0, 1000, &[]).is_empty());
        // rank 1 stops answering at 1000 ms (last answer at 1000 at the latest)
        let cmds = run(&mut m, &mut s, t0, 1010, 4000, &[1]);
        assert_eq!(cmds.len(), 2, "{cmds:?}");
        let (t_down, c) = &cmds[0];
        assert_eq!(
            c,
            &Command::SetDomainState {
                pool: "p".into(),
                domain: 1,
                state: "DOWN".into()
            }
        );
        // dead_after (500 ms) after its last answer, within one probe interval
        assert!((1400..=1510).contains(t_down), "DOWN at {t_down} ms");
        let (t_ex, c) = &cmds[1];
        assert_eq!(
            c,
            &Command::SetDomainState {
                pool: "p".into(),
                domain: 1,
                state: "EXCLUDED".into()
            }
        );
        assert_eq!(t_ex - t_down, 2000, "EXCLUDED exclude_after after DOWN");
        let map = s.pools["p"].map();
        assert_eq!(map.target(1).unwrap().state, TargetState::Excluded);
        assert_eq!(map.target(0).unwrap().state, TargetState::UpIn);
        assert_eq!(map.version(), 3);
    }

    /// As `run`, every engine answering every probe, with the incarnation
    /// `inc(rank, t)`.
    fn run_inc(
        m: &mut Monitor,
        s: &mut PoolSvcState,
        t0: Instant,
        from: u64,
        ms: u64,
        inc: impl Fn(usize, u64) -> u64,
    ) -> Vec<(u64, Command)> {
        drive(m, s, t0, from, ms, |m, r, now, t| {
            m.heard_incarnation(r, now, Some(inc(r, t)))
        })
    }

    #[test]
    fn a_restart_faster_than_the_detector_is_down_at_the_next_probe() {
        let t0 = Instant::now();
        let mut s = pool_state(3);
        let mut m = Monitor::new(cfg(2000), 3, t0);
        // rank 1 restarts at 1000 ms and never misses a probe
        let inc = |r: usize, t: u64| if r == 1 && t >= 1000 { 99 } else { r as u64 };
        let cmds = run_inc(&mut m, &mut s, t0, 0, 1500, inc);
        // first sightings recorded, then the restart
        let recs: Vec<_> = cmds
            .iter()
            .filter(|(_, c)| matches!(c, Command::EngineIncarnation { .. }))
            .collect();
        assert_eq!(recs.len(), 4, "{cmds:?}");
        let (t_restart, c) = recs[3];
        assert_eq!(
            c,
            &Command::EngineIncarnation {
                rank: 1,
                incarnation: 99
            }
        );
        // within one probe interval of the restart (not dead_after)
        assert!((1000..=1110).contains(t_restart), "seen at {t_restart} ms");
        let map = s.pools["p"].map();
        assert_eq!(map.target(1).unwrap().state, TargetState::Down);
        assert_eq!(m.liveness(1), Liveness::Dead, "taken as dead");
        assert_eq!(m.liveness(0), Liveness::Alive);
        // it answers, yet goes EXCLUDED exclude_after later (then the driver
        // reintegrates it)
        let more = run_inc(&mut m, &mut s, t0, 1510, 2500, inc);
        assert_eq!(
            more.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            vec![Command::SetDomainState {
                pool: "p".into(),
                domain: 1,
                state: "EXCLUDED".into()
            }]
        );
        // a new leader's monitor, from the replicated state only: rank 1 is
        // still restarted (not reintegrated): taken as dead there too
        let mut s2 = pool_state(3);
        for r in 0..3 {
            s2.apply(&Command::EngineIncarnation {
                rank: r,
                incarnation: r as u64,
            });
        }
        s2.apply(&Command::EngineIncarnation {
            rank: 1,
            incarnation: 99,
        });
        let mut m2 = Monitor::new(cfg(500), 3, t0);
        let c2 = run_inc(&mut m2, &mut s2, t0, 0, 1000, inc);
        assert_eq!(m2.liveness(1), Liveness::Dead);
        assert!(c2.iter().any(|(_, c)| c
            == &Command::SetDomainState {
                pool: "p".into(),
                domain: 1,
                state: "EXCLUDED".into()
            }));
        // and a new leader that never saw the old incarnation still catches
        // a restart against the record
        let mut s3 = pool_state(3);
        s3.apply(&Command::EngineIncarnation {
            rank: 2,
            incarnation: 5,
        });
        let mut m3 = Monitor::new(cfg(500), 3, t0);
        run_inc(&mut m3, &mut s3, t0, 0, 300, |r, _| r as u64 + 40);
        assert_eq!(
            s3.pools["p"].map().target(2).unwrap().state,
            TargetState::Down
        );
        assert_eq!(
            s3.pools["p"].map().target(0).unwrap().state,
            TargetState::UpIn
        );
    }

    #[test]
    fn down_reported_by_a_client_is_excluded_only_if_dead_and_never_with_none() {
        let t0 = Instant::now();
        let mut s = pool_state(2);
        // a client marked rank 0 DOWN, but it answers the monitor: left DOWN
        s.apply(&Command::SetDomainState {
            pool: "p".into(),
            domain: 0,
            state: "DOWN".into(),
        });
        let mut m = Monitor::new(cfg(100), 2, t0);
        assert!(run(&mut m, &mut s, t0, 0, 2000, &[]).is_empty());
        // exclusion disabled: a dead engine goes DOWN and stays DOWN
        let mut s = pool_state(2);
        let mut m = Monitor::new(
            MonitorConfig {
                exclude_after: None,
                ..cfg(0)
            },
            2,
            t0,
        );
        let cmds = run(&mut m, &mut s, t0, 0, 5000, &[1]);
        assert_eq!(cmds.len(), 1, "{cmds:?}");
        assert_eq!(
            s.pools["p"].map().target(1).unwrap().state,
            TargetState::Down
        );
    }

    #[test]
    fn dead_to_probes_goes_down_only_once_its_lease_lapsed() {
        let t0 = Instant::now();
        let down_at = |lease: Option<u64>, grants: &[u64]| -> Option<u64> {
            let mut s = pool_state(3);
            let mut m = Monitor::new(cfg(0), 3, t0).with_lease(lease.map(Duration::from_millis));
            // rank 1's probes fail from 0 ms on; its lease keeps being
            // granted at `grants` (another path than the probes)
            let mut out = Vec::new();
            for t in (0..=3000u64).step_by(10) {
                let now = t0 + Duration::from_millis(t);
                if grants.contains(&t) {
                    m.lease_granted(1, now);
                }
                out.extend(drive(&mut m, &mut s, t0, t, 0, |m, r, now, _| {
                    if r != 1 {
                        m.heard(r, now)
                    }
                }));
            }
            out.iter()
                .find(|(_, c)| matches!(c, Command::SetDomainState { domain: 1, state, .. } if state == "DOWN"))
                .map(|(t, _)| *t)
        };
        // no fence: dead_after (500 ms) after the monitor started
        let plain = down_at(None, &[]).expect("DOWN");
        assert!((490..=610).contains(&plain), "{plain}");
        // lease 300 ms, granted every 100 ms until 1000 ms: not before 1300
        let grants: Vec<u64> = (0..=1000).step_by(100).collect();
        let fenced = down_at(Some(300), &grants).expect("DOWN");
        assert!((1300..=1310).contains(&fenced), "DOWN at {fenced} ms");
        // a lease longer than the detector: its length after the start
        let long = down_at(Some(900), &[]).expect("DOWN");
        assert!((900..=910).contains(&long), "DOWN at {long} ms");
    }

    #[test]
    fn a_reported_engine_is_probed_at_once_and_only_probes_decide() {
        let t0 = Instant::now();
        let mut s = pool_state(2);
        let mut m = Monitor::new(cfg(0), 2, t0);
        assert_eq!(m.probes_due(t0), vec![0, 1]);
        let t = t0 + Duration::from_millis(20);
        assert!(m.probes_due(t).is_empty(), "interval 100 ms");
        m.suspect(1);
        assert_eq!(m.probes_due(t), vec![1], "reported: probed now");
        // it answers: the report changes nothing
        m.heard(1, t);
        assert!(run(&mut m, &mut s, t0, 20, 2000, &[]).is_empty());
        assert_eq!(
            s.pools["p"].map().target(1).unwrap().state,
            TargetState::UpIn
        );
    }
}
