//! The DTX protocol core (`obj::engine::dtx`) on `sim`'s seeded lossy network:
//! 4 replicas, RP_2 and RP_3 keys, concurrent writers and readers, message
//! loss / duplication / reordering, and one replica crashed mid-load (its
//! memory — prepared entries, the transactions it leads — is lost, its store
//! is kept) and restarted as a new incarnation (excluded from placement: no
//! reintegration). Checked on every seed:
//! - a read never returns a value of a write that did not commit, and never
//!   an older value than a write acknowledged before the read began on a
//!   replica of that write (prepared entries hold readers);
//! - atomicity: a write is in the store of all its surviving replicas or of
//!   none, at one epoch; acknowledged → on all surviving replicas; definitely
//!   aborted → nowhere (crashed replicas' stores included);
//! - after the load, nothing stays prepared or held.
//!
//! A second scenario (`two_failures_with_persisted_records`): a leader with
//! transactions in flight and one of its followers crash at the same
//! instant (memory lost; store and DTX records kept: `Action::Persist`) and
//! restart from their records as new incarnations that stay in the
//! placement; the same checks over every replica, restarted ones included.
//!
//! `DTX_SIM_SEEDS=N` runs seeds 1..=N (default 16; 40 swept: all pass).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use obj::engine::dtx::{Action, Dtx, DtxConfig, DtxId, LogRec, Msg, Outcome, Rank, Update};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sim::{Clock, Link, LinkConfig};

const N: usize = 4;
const KEYS: u32 = 12;

struct Node {
    dtx: Dtx,
    /// Durable: key → epoch → value.
    store: HashMap<Vec<u8>, BTreeMap<u64, Vec<u8>>>,
    held: HashMap<Vec<u8>, u32>,
    /// Durable DTX records, in the order written.
    log: Vec<LogRec>,
    alive: bool,
    /// Crashed once: excluded from placement and reads for the rest of the run.
    excluded: bool,
    hlc: u64,
}

#[derive(Debug, Clone)]
struct Write {
    key: Vec<u8>,
    value: Vec<u8>,
    participants: Vec<Rank>,
    outcome: Option<Outcome>,
    acked_at: Option<Duration>,
}

struct Read {
    node: Rank,
    key: Vec<u8>,
    at: Duration,
    /// The epoch of the value returned (0: none).
    epoch: u64,
    value: Option<Vec<u8>>,
}

struct World {
    clock: Clock,
    nodes: Vec<Node>,
    links: Vec<Vec<Link<()>>>,
    writes: Vec<Write>,
    by_id: HashMap<DtxId, usize>,
    reads: Vec<Read>,
    in_progress_reads: u64,
}

impl World {
    fn new(seed: u64, loss: f64) -> World {
        let cfg = DtxConfig {
            retry: Duration::from_millis(5),
            deadline: Duration::from_millis(300),
            resolve_after: Duration::from_millis(20),
            keep: Duration::from_secs(60),
        };
        let nodes = (0..N)
            .map(|r| Node {
                dtx: Dtx::new(r as Rank, seed * 100 + r as u64, cfg),
                store: HashMap::new(),
                held: HashMap::new(),
                log: Vec::new(),
                alive: true,
                excluded: false,
                hlc: 0,
            })
            .collect();
        let lc = LinkConfig {
            delay: Duration::from_micros(100),
            jitter: Duration::from_micros(200),
            reorder_delay: Duration::from_micros(500),
            ..LinkConfig::lossy(loss)
        };
        let links = (0..N)
            .map(|a| {
                (0..N)
                    .map(|b| Link::new(lc, seed * 1000 + (a * N + b) as u64))
                    .collect()
            })
            .collect();
        World {
            clock: Clock::new(),
            nodes,
            links,
            writes: Vec::new(),
            by_id: HashMap::new(),
            reads: Vec::new(),
            in_progress_reads: 0,
        }
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn cfg() -> DtxConfig {
        DtxConfig {
            retry: Duration::from_millis(5),
            deadline: Duration::from_millis(300),
            resolve_after: Duration::from_millis(20),
            keep: Duration::from_secs(60),
        }
    }

    /// The key's replicas: a per-key permutation of the nodes, the first `r`
    /// not excluded (the spare takes a crashed replica's place).
    fn replicas(&self, key: u32, r: usize) -> Vec<Rank> {
        let mut order: Vec<Rank> = (0..N as Rank).collect();
        let mut h = u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for i in (1..N).rev() {
            h = h.rotate_left(17).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            order.swap(i, (h % (i as u64 + 1)) as usize);
        }
        order
            .into_iter()
            .filter(|&n| !self.nodes[n as usize].excluded)
            .take(r)
            .collect()
    }

    fn run_actions(&mut self, me: Rank, actions: Vec<Action>) {
        let mut q: std::collections::VecDeque<Action> = actions.into();
        while let Some(a) = q.pop_front() {
            let now = self.now();
            let node = &mut self.nodes[me as usize];
            match a {
                Action::Send { to, msg } => {
                    let mut b = Vec::new();
                    msg.emit(&mut b);
                    self.links[me as usize][to as usize].send(now, (), &b);
                }
                Action::Persist(rec) => node.log.push(rec),
                Action::Hold { keys } => {
                    for key in keys {
                        *node.held.entry(key).or_default() += 1
                    }
                }
                Action::Release { keys } => {
                    for key in keys {
                        let c = node.held.get_mut(&key).expect("release of a key not held");
                        *c -= 1;
                        if *c == 0 {
                            node.held.remove(&key);
                        }
                    }
                }
                Action::Apply { id, epoch, update } => {
                    node.hlc = node.hlc.max(epoch);
                    let prev = node
                        .store
                        .entry(update.keys[0].clone())
                        .or_default()
                        .insert(epoch, update.payload.clone());
                    assert!(
                        prev.is_none() || prev.as_ref() == Some(&update.payload),
                        "two values at one epoch"
                    );
                    if node.dtx.is_leading(&id) {
                        let more = node.dtx.applied(now, id, true);
                        q.extend(more);
                    }
                }
                Action::Reply { id, outcome } => {
                    let w = &mut self.writes[self.by_id[&id]];
                    assert!(w.outcome.is_none(), "two replies for {id:?}");
                    if matches!(outcome, Outcome::Committed { .. }) {
                        w.acked_at = Some(self.clock.elapsed());
                    }
                    w.outcome = Some(outcome);
                }
            }
        }
    }

    fn write(&mut self, key: u32, r: usize, value: Vec<u8>) {
        let reps = self.replicas(key, r);
        let leader = reps[0];
        if !self.nodes[leader as usize].alive {
            return; // the client cannot reach it
        }
        let now = self.now();
        let node = &mut self.nodes[leader as usize];
        let phys = self.clock.elapsed().as_nanos() as u64;
        node.hlc = (node.hlc + 1).max(phys);
        let epoch = node.hlc;
        let k = format!("k{key}").into_bytes();
        let (id, actions) = node.dtx.begin(
            now,
            epoch,
            Update {
                keys: vec![k.clone()],
                payload: value.clone(),
            },
            reps[1..].to_vec(),
        );
        self.by_id.insert(id, self.writes.len());
        self.writes.push(Write {
            key: k,
            value,
            participants: reps,
            outcome: None,
            acked_at: None,
        });
        self.run_actions(leader, actions);
    }

    fn read(&mut self, key: u32, r: usize, pick: usize) {
        let reps = self.replicas(key, r);
        let n = reps[pick % reps.len()];
        let node = &self.nodes[n as usize];
        if !node.alive {
            return;
        }
        let k = format!("k{key}").into_bytes();
        if node.held.contains_key(&k) {
            self.in_progress_reads += 1;
            return;
        }
        let (epoch, value) = match node.store.get(&k).and_then(|m| m.last_key_value()) {
            Some((e, v)) => (*e, Some(v.clone())),
            None => (0, None),
        };
        self.reads.push(Read {
            node: n,
            key: k,
            at: self.clock.elapsed(),
            epoch,
            value,
        });
    }

    fn crash(&mut self, n: Rank, seed: u64) {
        let node = &mut self.nodes[n as usize];
        node.alive = false;
        node.excluded = true;
        node.held.clear();
        // memory lost: a new incarnation when it comes back
        node.dtx = Dtx::new(n, seed * 100 + 50 + u64::from(n), DtxConfig::default());
    }

    /// Memory lost, store and records kept (`keep_log: false` — a mutant —
    /// loses the records too).
    fn crash_keeping_records(&mut self, n: Rank) {
        let node = &mut self.nodes[n as usize];
        node.alive = false;
        node.held.clear();
    }

    /// Restarts `n` from its records as incarnation `inc`.
    fn restart_from_records(&mut self, n: Rank, inc: u64, keep_log: bool) {
        let now = self.now();
        let node = &mut self.nodes[n as usize];
        if !keep_log {
            node.log.clear();
        }
        let (dtx, holds) = Dtx::restore(n, inc, World::cfg(), now, node.log.clone());
        node.dtx = dtx;
        node.alive = true;
        self.run_actions(n, holds);
    }

    /// Delivers due messages and runs timers.
    fn step(&mut self, tick: bool) {
        let now = self.now();
        for a in 0..N {
            for b in 0..N {
                while let Some(((), data)) = self.links[a][b].recv(now) {
                    if !self.nodes[b].alive {
                        continue;
                    }
                    let msg = Msg::parse(&data).expect("the sim does not corrupt");
                    // as the engine's driver: a message from a peer means up
                    self.nodes[b].dtx.peer_up(a as Rank);
                    let acts = self.nodes[b].dtx.handle(now, a as Rank, msg);
                    self.run_actions(b as Rank, acts);
                }
            }
        }
        if tick {
            for n in 0..N {
                if self.nodes[n].alive {
                    let acts = self.nodes[n].dtx.tick(now);
                    self.run_actions(n as Rank, acts);
                }
            }
        }
    }
}

fn run(seed: u64, loss: f64, crash: bool) {
    let mut w = World::new(seed, loss);
    let mut rng = SmallRng::seed_from_u64(seed);
    let step = Duration::from_micros(100);
    let load = Duration::from_millis(1500);
    let crash_at = Duration::from_millis(rng.gen_range(300..900));
    let victim: Rank = rng.gen_range(0..N as Rank);
    let detect = Duration::from_millis(rng.gen_range(5..60));
    let restart = Duration::from_millis(200);
    let (mut crashed, mut detected, mut restarted) = (false, false, false);
    let mut i = 0u64;
    while w.clock.elapsed() < load + Duration::from_secs(3) {
        let t = w.clock.elapsed();
        if crash && !crashed && t >= crash_at {
            crashed = true;
            w.crash(victim, seed);
        }
        if crashed && !detected && t >= crash_at + detect {
            detected = true;
            let now = w.now();
            for n in 0..N as Rank {
                if n != victim && w.nodes[n as usize].alive {
                    let acts = w.nodes[n as usize].dtx.peer_down(now, victim);
                    w.run_actions(n, acts);
                }
            }
        }
        if crashed && !restarted && t >= crash_at + restart {
            restarted = true;
            w.nodes[victim as usize].alive = true;
        }
        if t < load && rng.gen_bool(0.3) {
            let key = rng.gen_range(0..KEYS);
            let r = if key % 2 == 0 { 2 } else { 3 };
            if rng.gen_bool(0.5) {
                let v = format!("s{seed}w{}", w.writes.len()).into_bytes();
                w.write(key, r, v);
            } else {
                let pick = rng.gen_range(0..3);
                w.read(key, r, pick);
            }
        }
        w.step(i.is_multiple_of(10));
        w.clock.advance(step);
        i += 1;
    }
    check(&w, seed, crash.then_some(victim));
}

/// A leader with transactions in flight and one of its followers crash at
/// once, keeping their stores and records, and restart from them.
fn run_two_failures(seed: u64, loss: f64, keep_log: bool) {
    let mut w = World::new(seed, loss);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let step = Duration::from_micros(100);
    let load = Duration::from_millis(1500);
    let crash_at = Duration::from_millis(rng.gen_range(300..900));
    let detect = Duration::from_millis(rng.gen_range(5..60));
    let restart = Duration::from_millis(rng.gen_range(100..300));
    let mut victims: Vec<Rank> = Vec::new();
    let (mut detected, mut restarted) = (false, false);
    let mut i = 0u64;
    while w.clock.elapsed() < load + Duration::from_secs(3) {
        let t = w.clock.elapsed();
        if victims.is_empty() && t >= crash_at {
            // the newest write still waiting for its outcome: its leader and
            // a follower (the transaction is prepared there, maybe acked)
            let pick = w
                .writes
                .iter()
                .rev()
                .find(|x| x.outcome.is_none() && x.participants.len() > 1)
                .map(|x| (x.participants[0], x.participants[1]));
            let (l, f) = pick.unwrap_or((0, 1));
            victims = vec![l, f];
            for &v in &victims {
                w.crash_keeping_records(v);
            }
        }
        if !victims.is_empty() && !detected && t >= crash_at + detect {
            detected = true;
            let now = w.now();
            for n in 0..N as Rank {
                if w.nodes[n as usize].alive {
                    for &v in &victims {
                        let acts = w.nodes[n as usize].dtx.peer_down(now, v);
                        w.run_actions(n, acts);
                    }
                }
            }
        }
        if !victims.is_empty() && !restarted && t >= crash_at + restart {
            restarted = true;
            for &v in &victims.clone() {
                w.restart_from_records(v, seed * 100 + 70 + u64::from(v), keep_log);
            }
        }
        if t < load && rng.gen_bool(0.3) {
            let key = rng.gen_range(0..KEYS);
            let r = if key % 2 == 0 { 2 } else { 3 };
            if rng.gen_bool(0.5) {
                let v = format!("s{seed}w{}", w.writes.len()).into_bytes();
                w.write(key, r, v);
            } else {
                let pick = rng.gen_range(0..3);
                w.read(key, r, pick);
            }
        }
        w.step(i.is_multiple_of(10));
        w.clock.advance(step);
        i += 1;
    }
    // every replica counts: the restarted ones kept their records
    check(&w, seed, None);
}

fn check(w: &World, seed: u64, victim: Option<Rank>) {
    let ctx = format!("seed {seed}, crashed {victim:?}");
    // the committed writes: those a surviving replica applied
    let survivors =
        |ps: &[Rank]| -> Vec<Rank> { ps.iter().copied().filter(|&r| Some(r) != victim).collect() };
    let at = |n: Rank, key: &[u8], value: &[u8]| -> Option<u64> {
        w.nodes[n as usize].store.get(key).and_then(|m| {
            m.iter()
                .find(|(_, v)| v.as_slice() == value)
                .map(|(e, _)| *e)
        })
    };
    let mut committed: HashMap<(Vec<u8>, Vec<u8>), u64> = HashMap::new();
    let (mut acked, mut aborted, mut unknown) = (0, 0, 0);
    for wr in &w.writes {
        let s = survivors(&wr.participants);
        let have: Vec<(Rank, Option<u64>)> =
            s.iter().map(|&r| (r, at(r, &wr.key, &wr.value))).collect();
        let n_have = have.iter().filter(|(_, e)| e.is_some()).count();
        assert!(
            n_have == 0 || n_have == s.len(),
            "{ctx}: partial write {wr:?}: {have:?}"
        );
        let epochs: HashSet<u64> = have.iter().filter_map(|(_, e)| *e).collect();
        assert!(
            epochs.len() <= 1,
            "{ctx}: replicas at different epochs {wr:?}"
        );
        if let Some(&e) = epochs.iter().next() {
            committed.insert((wr.key.clone(), wr.value.clone()), e);
        }
        match &wr.outcome {
            Some(Outcome::Committed { epoch }) => {
                acked += 1;
                if !s.is_empty() {
                    assert_eq!(
                        epochs.iter().next(),
                        Some(epoch),
                        "{ctx}: acknowledged write lost or at another epoch {wr:?}: {have:?}"
                    );
                }
            }
            Some(Outcome::Aborted { .. }) => {
                aborted += 1;
                for n in 0..N as Rank {
                    assert!(
                        at(n, &wr.key, &wr.value).is_none(),
                        "{ctx}: definitely aborted write visible on {n}: {wr:?}"
                    );
                }
            }
            Some(Outcome::Unknown) | None => unknown += 1,
        }
    }
    for r in &w.reads {
        if let Some(v) = &r.value {
            assert!(
                committed.contains_key(&(r.key.clone(), v.clone())),
                "{ctx}: read on {} returned an uncommitted value {:?}",
                r.node,
                String::from_utf8_lossy(v)
            );
        }
        if Some(r.node) == victim {
            continue;
        }
        for wr in &w.writes {
            if wr.key == r.key && wr.participants.contains(&r.node) {
                if let (Some(t), Some(Outcome::Committed { epoch })) = (wr.acked_at, &wr.outcome) {
                    assert!(
                        t >= r.at || r.epoch >= *epoch,
                        "{ctx}: stale read on {} at {:?} (epoch {}) after write acked at {t:?} (epoch {epoch})",
                        r.node,
                        r.at,
                        r.epoch
                    );
                }
            }
        }
    }
    for (n, node) in w.nodes.iter().enumerate() {
        if node.alive {
            assert_eq!(
                node.dtx.in_flight(),
                (0, 0),
                "{ctx}: node {n} still has transactions in flight"
            );
            assert!(node.held.is_empty(), "{ctx}: node {n} still holds keys");
        }
    }
    assert!(acked > 0, "{ctx}: nothing acknowledged");
    eprintln!(
        "{ctx}: {} writes ({acked} acked, {aborted} aborted, {unknown} unknown), {} reads ({} in progress), resolved {:?}",
        w.writes.len(),
        w.reads.len(),
        w.in_progress_reads,
        w.nodes
            .iter()
            .map(|n| (n.dtx.stats.resolved, n.dtx.stats.resynced))
            .collect::<Vec<_>>()
    );
}

fn seeds() -> u64 {
    std::env::var("DTX_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

#[test]
fn no_loss_no_crash() {
    run(1, 0.0, false);
}

#[test]
fn lossy_network_with_a_replica_crash() {
    for seed in 1..=seeds() {
        run(seed, 0.05, true);
    }
}

#[test]
fn two_failures_with_persisted_records() {
    for seed in 1..=seeds() {
        run_two_failures(seed, 0.05, true);
    }
}

#[test]
fn heavy_loss_with_a_replica_crash() {
    for seed in 1..=seeds() / 4 {
        run(1000 + seed, 0.2, true);
    }
}
