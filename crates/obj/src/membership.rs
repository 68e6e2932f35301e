//! Failure detection: heartbeats with suspicion (sans-IO: the caller sends the
//! probes and passes the clock in).
//!
//! Every member is probed each `interval`; a member not heard from for
//! `suspect_after` becomes [`Liveness::Suspect`], for `dead_after` becomes
//! [`Liveness::Dead`]. A dead member is therefore reported at most
//! `dead_after + interval` after its last answer (the bound the tests check).
//! A suspect that answers again is [`Liveness::Alive`]; a dead one stays dead
//! (it returns through reintegration, not by answering a ping).
//!
//! Why not SWIM: SWIM's indirect probes and gossip keep the load per node
//! constant with hundreds of nodes; a system of a handful of engines (what one
//! machine runs) is cheaper and simpler to reason about with direct
//! heartbeats, and the detection bound is a plain sum of two settings.

use std::time::{Duration, Instant};

/// Detector settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Time between two probes of one member.
    pub interval: Duration,
    /// Silence after which a member is suspected.
    pub suspect_after: Duration,
    /// Silence after which a member is declared dead.
    pub dead_after: Duration,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            interval: Duration::from_millis(200),
            suspect_after: Duration::from_millis(600),
            dead_after: Duration::from_millis(1500),
        }
    }
}

/// What the detector believes about one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Suspect,
    Dead,
}

#[derive(Debug, Clone)]
struct Member {
    last_heard: Instant,
    last_probe: Option<Instant>,
    state: Liveness,
}

/// Heartbeat failure detector over members `0..n`.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: DetectorConfig,
    members: Vec<Member>,
}

impl Detector {
    /// `n` members, all alive and heard at `now`.
    pub fn new(cfg: DetectorConfig, n: usize, now: Instant) -> Detector {
        Detector {
            cfg,
            members: vec![
                Member {
                    last_heard: now,
                    last_probe: None,
                    state: Liveness::Alive,
                };
                n
            ],
        }
    }

    pub fn config(&self) -> DetectorConfig {
        self.cfg
    }

    pub fn state(&self, m: usize) -> Liveness {
        self.members[m].state
    }

    /// Members to probe now (not dead, no probe within `interval`); marks them
    /// probed.
    pub fn probes_due(&mut self, now: Instant) -> Vec<usize> {
        let iv = self.cfg.interval;
        let mut due = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            if m.state == Liveness::Dead {
                continue;
            }
            if m.last_probe.is_none_or(|p| now.duration_since(p) >= iv) {
                m.last_probe = Some(now);
                due.push(i);
            }
        }
        due
    }

    /// Probe member `m` at the next [`Detector::probes_due`] (a client
    /// reported it unreachable: the failure detector checks for itself).
    pub fn probe_soon(&mut self, m: usize) {
        if let Some(mem) = self.members.get_mut(m) {
            mem.last_probe = None;
        }
    }

    /// Member `m` answered at `now`.
    pub fn heard(&mut self, m: usize, now: Instant) {
        let mem = &mut self.members[m];
        if mem.state == Liveness::Dead {
            return;
        }
        if now > mem.last_heard {
            mem.last_heard = now;
        }
        mem.state = Liveness::Alive;
    }

    /// Member `m` rejoined at `now` (reintegration decided it): alive again,
    /// probed and judged afresh, as a new member.
    pub fn revive(&mut self, m: usize, now: Instant) {
        self.members[m] = Member {
            last_heard: now,
            last_probe: None,
            state: Liveness::Alive,
        };
    }

    /// Member `m` is dead now, whatever it answers (its process restarted:
    /// a new incarnation missed what happened while it was gone); `true`
    /// when it was not dead already. It comes back through
    /// [`Detector::revive`] only.
    pub fn declare_dead(&mut self, m: usize) -> bool {
        let mem = &mut self.members[m];
        let was = mem.state != Liveness::Dead;
        mem.state = Liveness::Dead;
        was
    }

    /// Advance to `now`: the members whose state changed, with the new state.
    pub fn tick(&mut self, now: Instant) -> Vec<(usize, Liveness)> {
        let mut changes = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            if m.state == Liveness::Dead {
                continue;
            }
            let silent = now.saturating_duration_since(m.last_heard);
            let to = if silent >= self.cfg.dead_after {
                Liveness::Dead
            } else if silent >= self.cfg.suspect_after {
                Liveness::Suspect
            } else {
                Liveness::Alive
            };
            if to != m.state {
                m.state = to;
                changes.push((i, to));
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_bounded_and_suspects_recover() {
        let cfg = DetectorConfig {
            interval: Duration::from_millis(100),
            suspect_after: Duration::from_millis(300),
            dead_after: Duration::from_millis(700),
        };
        let t0 = Instant::now();
        let mut d = Detector::new(cfg, 3, t0);
        // simulate 10 ms steps: member 0 always answers, member 1 stops at
        // 1 s, member 2 is silent 400 ms at 0.5 s then answers again
        let mut dead_at = None;
        let mut suspected2 = false;
        for step in 0..300u64 {
            let now = t0 + Duration::from_millis(step * 10);
            for m in d.probes_due(now) {
                let answers = match m {
                    0 => true,
                    1 => step * 10 < 1000,
                    _ => !(500..900).contains(&(step * 10)),
                };
                if answers {
                    d.heard(m, now);
                }
            }
            for (m, s) in d.tick(now) {
                match (m, s) {
                    (1, Liveness::Dead) => dead_at = Some(step * 10),
                    (2, Liveness::Suspect) => suspected2 = true,
                    (2, Liveness::Dead) | (0, _) => panic!("member {m} -> {s:?}"),
                    _ => {}
                }
            }
        }
        let dead_at = dead_at.expect("member 1 never declared dead");
        // last answer at < 1000 ms (probes every 100 ms): dead within
        // dead_after + interval of it
        assert!(
            (1600..=1000 + 700 + 100).contains(&dead_at),
            "dead at {dead_at}"
        );
        assert!(suspected2);
        assert_eq!(d.state(2), Liveness::Alive);
        // a dead member is not probed and stays dead
        let later = t0 + Duration::from_secs(10);
        assert!(!d.probes_due(later).contains(&1));
        d.heard(1, later);
        assert_eq!(d.state(1), Liveness::Dead);
    }
}
