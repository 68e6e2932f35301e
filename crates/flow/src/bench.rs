//! Workloads for `dpustack bench flow` (single core): EMC hits, megaflow-classifier
//! lookups with many masks, upcall (miss -> xlate -> install) rate, and the same-run
//! baseline (hashing a flow key). Deterministic (seeded), no I/O.

use crate::dp::{hash_key, Datapath, LOOKUP_BATCH};
use crate::key::{f, FlowKey};
use crate::ofctl::parse_flows;
use crate::xlate::{FlowTable, OdpAction};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// A tiny deterministic PRNG (xorshift64*), so benches need no extra dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A random IPv4 TCP/UDP flow key (addresses in 10.0.0.0/8, ports random).
pub fn random_key(r: &mut Rng) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(f::IN_PORT, 1 + r.below(4));
    k.set(f::DL_SRC, 0x0200_0000_0000 | r.below(1 << 16));
    k.set(f::DL_DST, 0x0200_0000_0000 | r.below(1 << 16));
    k.set(f::DL_TYPE, 0x0800);
    k.set(f::NW_SRC, 0x0a00_0000 | r.below(1 << 24));
    k.set(f::NW_DST, 0x0a00_0000 | r.below(1 << 24));
    k.set(f::NW_TTL, 64);
    k.set(f::NW_PROTO, if r.below(2) == 0 { 6 } else { 17 });
    k.set(f::TP_SRC, r.below(65536));
    k.set(f::TP_DST, r.below(65536));
    k
}

fn prefix(bits: u64, width: u32) -> u64 {
    if bits == 0 {
        0
    } else {
        ((1u64 << bits) - 1) << (width as u64 - bits)
    }
}

/// `n` distinct megaflow masks over in_port, nw_src/nw_dst prefixes, nw_proto, tp ports.
pub fn random_masks(r: &mut Rng, n: usize) -> Vec<FlowKey> {
    let mut set = std::collections::HashSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let mut m = FlowKey::ZERO;
        m.full(f::RECIRC_ID);
        m.full(f::IN_PORT);
        m.full(f::DL_TYPE);
        // Every megaflow matches dl_dst exactly; the bench gives each megaflow its own
        // dl_dst so megaflows are disjoint (a packet matches exactly one of them).
        m.full(f::DL_DST);
        m.or(f::NW_FRAG, 3);
        m.or(f::NW_SRC, prefix(r.below(33), 32));
        m.or(f::NW_DST, prefix(r.below(33), 32));
        if r.below(2) == 0 {
            m.full(f::NW_PROTO);
            m.or(f::TP_DST, prefix(r.below(17), 16));
            if r.below(4) == 0 {
                m.or(f::TP_SRC, prefix(r.below(17), 16));
            }
        }
        if set.insert(m) {
            out.push(m);
        }
    }
    out
}

/// Ops per second of `f` over at least `t` (f returns the ops it did).
fn rate(t: Duration, mut f: impl FnMut() -> u64) -> f64 {
    let _ = f(); // warm-up
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < t {
        ops += f();
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

const BATCH: usize = 4096;

/// This thread's time on a CPU so far (ns), from `/proc/thread-self/schedstat`
/// (None where that file does not exist).
pub fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Ops per second of this thread's CPU time, running `f` until it has had `t` of CPU
/// (on a machine with more runnable threads than cores a wall-clock rate measures
/// the share of a core the thread got; this measures the work). Returns (ops per
/// CPU-second, ops per wall-second); without schedstat both are wall-clock rates.
pub fn rate_cpu(t: Duration, mut f: impl FnMut() -> u64) -> (f64, f64) {
    let _ = f(); // warm-up
    let (w0, c0) = (Instant::now(), thread_cpu_ns());
    let mut ops = 0u64;
    loop {
        for _ in 0..4 {
            ops += f();
        }
        let cpu = c0.and_then(|c0| Some(thread_cpu_ns()?.saturating_sub(c0)));
        let done = match cpu {
            Some(ns) => ns >= t.as_nanos() as u64,
            None => w0.elapsed() >= t,
        };
        if done {
            let wall = ops as f64 / w0.elapsed().as_secs_f64();
            let cpu = cpu.map_or(wall, |ns| ops as f64 / (ns as f64 / 1e9));
            return (cpu, wall);
        }
    }
}

/// Baseline: hashing `BATCH` pre-built flow keys (the EMC's hash over all 15 words).
pub fn baseline_hash(t: Duration) -> f64 {
    let mut r = Rng::new(1);
    let keys: Vec<FlowKey> = (0..BATCH).map(|_| random_key(&mut r)).collect();
    rate(t, || {
        let mut acc = 0u64;
        for k in &keys {
            acc ^= hash_key(black_box(k));
        }
        black_box(acc);
        BATCH as u64
    })
}

/// [`baseline_hash`] per second of the thread's CPU time ([`rate_cpu`]).
pub fn baseline_hash_cpu(t: Duration) -> f64 {
    let mut r = Rng::new(1);
    let keys: Vec<FlowKey> = (0..BATCH).map(|_| random_key(&mut r)).collect();
    rate_cpu(t, || {
        let mut acc = 0u64;
        for k in &keys {
            acc ^= hash_key(black_box(k));
        }
        black_box(acc);
        BATCH as u64
    })
    .0
}

/// Baseline: copying a flow key per op (192 bytes since the pipeline registers and
/// metadata joined the key; the EMC hash still covers only the 15 packet words).
pub fn baseline_memcpy(t: Duration) -> f64 {
    let mut r = Rng::new(2);
    let keys: Vec<FlowKey> = (0..BATCH).map(|_| random_key(&mut r)).collect();
    let mut dst = vec![FlowKey::ZERO; BATCH];
    rate(t, || {
        for (d, s) in dst.iter_mut().zip(keys.iter()) {
            *d = *black_box(s);
        }
        black_box(&dst);
        BATCH as u64
    })
}

/// (a) EMC hits: `n_keys` distinct exact flows (fit in the EMC) hitting installed
/// megaflows; full hit path incl. hash and stats update. Returns (lookups/s, EMC hit %).
pub fn emc_hits(t: Duration, n_keys: usize) -> (f64, f64) {
    let table = FlowTable::from_rules(
        parse_flows(
            "priority=10,tcp,nw_dst=10.0.0.0/9,actions=output:2\npriority=5,udp,actions=output:3\npriority=0,actions=drop\n",
        )
        .unwrap_or_default(),
    );
    let mut r = Rng::new(3);
    let keys: Vec<FlowKey> = (0..n_keys).map(|_| random_key(&mut r)).collect();
    let mut dp = Datapath::new();
    for k in &keys {
        dp.process(&table, k, 64, 1);
    }
    for k in &keys {
        dp.process(&table, k, 64, 1);
    }
    let s0 = dp.stats;
    let mut now = 2;
    let v = rate(t, || {
        now += 1;
        for k in &keys {
            black_box(dp.process(&table, k, 64, now).0.len());
        }
        keys.len() as u64
    });
    let s = dp.stats;
    let emc = (s.emc_hits - s0.emc_hits) as f64;
    let all = emc + (s.megaflow_hits - s0.megaflow_hits) as f64 + (s.upcalls - s0.upcalls) as f64;
    (v, 100.0 * emc / all.max(1.0))
}

/// A 64-byte Ethernet/IPv4/TCP frame for `k`'s addresses and ports.
pub fn frame_for(k: &FlowKey) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    p[0..6].copy_from_slice(&k.get(f::DL_DST).to_be_bytes()[2..]);
    p[6..12].copy_from_slice(&k.get(f::DL_SRC).to_be_bytes()[2..]);
    p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    p[14] = 0x45;
    p[16..18].copy_from_slice(&50u16.to_be_bytes());
    p[22] = 64;
    p[23] = k.nw_proto();
    p[26..30].copy_from_slice(&(k.get(f::NW_SRC) as u32).to_be_bytes());
    p[30..34].copy_from_slice(&(k.get(f::NW_DST) as u32).to_be_bytes());
    p[34..36].copy_from_slice(&k.tp_src().to_be_bytes());
    p[36..38].copy_from_slice(&k.tp_dst().to_be_bytes());
    if k.nw_proto() == 6 {
        p[46] = 0x50;
        p[47] = 0x10;
    } else {
        p[38..40].copy_from_slice(&30u16.to_be_bytes());
    }
    p
}

/// (a') EMC hits including parsing the 64-byte frame into a flow key (what a real
/// datapath pays per packet, I/O excluded). Returns packets/s.
pub fn emc_hits_with_parse(t: Duration, n_keys: usize) -> f64 {
    let table = FlowTable::from_rules(
        parse_flows("priority=10,tcp,nw_dst=10.0.0.0/9,actions=output:2\npriority=5,udp,actions=output:3\npriority=0,actions=drop\n")
            .unwrap_or_default(),
    );
    let mut r = Rng::new(3);
    let frames: Vec<(u32, Vec<u8>)> = (0..n_keys)
        .map(|_| {
            let k = random_key(&mut r);
            (k.in_port(), frame_for(&k))
        })
        .collect();
    let mut dp = Datapath::new();
    for (p, fr) in &frames {
        dp.receive(&table, *p, fr, 1);
    }
    let mut now = 2;
    rate(t, || {
        now += 1;
        for (p, fr) in &frames {
            black_box(dp.receive(&table, *p, fr, now).0.len());
        }
        frames.len() as u64
    })
}

/// (b) Megaflow classifier lookups (EMC off) with `n_masks` masks and `n_flows`
/// disjoint megaflows; packets pick a megaflow uniformly. Returns (lookups/s, avg subtables probed).
pub fn dpcls_lookups(t: Duration, n_masks: usize, n_flows: usize) -> (f64, f64) {
    let mut r = Rng::new(4 + n_masks as u64 * 7 + n_flows as u64);
    let masks = random_masks(&mut r, n_masks);
    let mut dp = Datapath::new();
    dp.set_emc(false);
    let mut flows = Vec::with_capacity(n_flows);
    for i in 0..n_flows {
        let m = masks[i % n_masks];
        let mut k = random_key(&mut r);
        k.set(f::DL_DST, 0x0200_0000_0000 | i as u64);
        let k = k.and(&m);
        dp.install(&k, &m, vec![OdpAction::Output(1 + (i % 4) as u32)]);
        flows.push((k, m));
    }
    let keys: Vec<FlowKey> = (0..BATCH)
        .map(|_| {
            let (fk, m) = flows[r.below(n_flows as u64) as usize];
            let mut k = random_key(&mut r);
            for i in 0..k.w.len() {
                k.w[i] = (k.w[i] & !m.w[i]) | fk.w[i];
            }
            k
        })
        .collect();
    // Let the hit counters order the subtables once, as the PMD optimiser would.
    for k in &keys {
        dp.dpcls_lookup(k);
    }
    dp.sort_subtables();
    let p0 = dp.stats.subtable_probes;
    let mut n = 0u64;
    let v = rate(t, || {
        let mut hits = 0u64;
        for k in &keys {
            hits += dp.dpcls_lookup(k).is_some() as u64;
        }
        n += BATCH as u64;
        black_box(hits);
        BATCH as u64
    });
    let probes = (dp.stats.subtable_probes - p0) as f64 / n.max(1) as f64;
    (v, probes)
}

/// Traffic shape of the classifier-with-caches workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Every connection equally likely.
    Uniform,
    /// Megaflow popularity Zipf-distributed ([`ZIPF_S`], ranks in random order, so
    /// popularity follows neither creation order nor masks); a packet's connection is
    /// uniform among its megaflow's connections.
    Zipf,
}

/// Connections (distinct exact keys) of the classifier-with-caches workloads: more
/// than the EMC holds (8 k), fewer than the SMC (1 M).
pub const CONNS: usize = 1 << 17;
/// Packets of the replayed stream (indices into the connections).
pub const STREAM: usize = 1 << 18;
/// Zipf exponent of [`Traffic::Zipf`] (P(rank r) ~ 1/r^s).
pub const ZIPF_S: f64 = 1.0;

/// Which caches a [`ClsWorkload::measure`] run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caches {
    pub emc: bool,
    pub smc: bool,
    /// Subtables re-sorted by recent hits (off: creation order).
    pub ranking: bool,
}

/// One [`ClsWorkload::measure`] result.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClsFigure {
    /// Lookups per second of the thread's CPU time (hash + EMC / SMC / classifier).
    pub rate: f64,
    /// Lookups per wall-clock second (what the thread got of a shared core).
    pub wall_rate: f64,
    /// Share of lookups resolved by the EMC, the SMC, the classifier (%).
    pub emc_pct: f64,
    pub smc_pct: f64,
    pub dpcls_pct: f64,
    /// Subtables probed per classifier lookup.
    pub probes: f64,
}

/// `n_masks` masks, `n_flows` (at most [`CONNS`]) disjoint megaflows (flow i has mask
/// i % n_masks and its own dl_dst), [`CONNS`] connections (connection c is an exact
/// key inside megaflow c % n_flows, its other bits random) and a stream of [`STREAM`]
/// packets drawn by `traffic`. Built once; [`Self::measure`] then runs each cache
/// configuration on the same datapath and stream.
pub struct ClsWorkload {
    dp: Datapath,
    /// The stream's packets as keys, read in order (a datapath looks up the key of
    /// the packet it just parsed: it is in cache, not fetched from a random place).
    keys: Vec<FlowKey>,
    /// Connection of each packet.
    stream: Vec<u32>,
    pos: usize,
}

impl ClsWorkload {
    pub fn new(n_masks: usize, n_flows: usize, traffic: Traffic) -> ClsWorkload {
        let n_flows = n_flows.clamp(1, CONNS);
        let mut r = Rng::new(40 + n_masks as u64 * 7 + n_flows as u64);
        let masks = random_masks(&mut r, n_masks);
        let mut dp = Datapath::new();
        let mut flows = Vec::with_capacity(n_flows);
        for i in 0..n_flows {
            let m = masks[i % n_masks];
            let mut k = random_key(&mut r);
            k.set(f::DL_DST, 0x0200_0000_0000 | i as u64);
            let k = k.and(&m);
            dp.install(&k, &m, vec![OdpAction::Output(1 + (i % 4) as u32)]);
            flows.push((k, m));
        }
        let conns: Vec<FlowKey> = (0..CONNS)
            .map(|c| {
                let (fk, m) = flows[c % n_flows];
                let mut k = random_key(&mut r);
                for i in 0..k.w.len() {
                    k.w[i] = (k.w[i] & !m.w[i]) | fk.w[i];
                }
                k
            })
            .collect();
        let stream: Vec<u32> = match traffic {
            Traffic::Uniform => (0..STREAM).map(|_| r.below(CONNS as u64) as u32).collect(),
            Traffic::Zipf => {
                // rank -> megaflow: a random permutation
                let mut perm: Vec<u32> = (0..n_flows as u32).collect();
                for i in (1..perm.len()).rev() {
                    perm.swap(i, r.below(i as u64 + 1) as usize);
                }
                let mut cdf = Vec::with_capacity(n_flows);
                let mut acc = 0.0;
                for rank in 1..=n_flows {
                    acc += 1.0 / (rank as f64).powf(ZIPF_S);
                    cdf.push(acc);
                }
                (0..STREAM)
                    .map(|_| {
                        let u = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * acc;
                        let rank = cdf.partition_point(|&c| c < u).min(n_flows - 1);
                        let m = perm[rank] as usize;
                        // the megaflow's connections: m, m + n_flows, ... < CONNS
                        let n = (CONNS - m).div_ceil(n_flows);
                        (m + n_flows * r.below(n as u64) as usize) as u32
                    })
                    .collect()
            }
        };
        let keys = stream.iter().map(|&c| conns[c as usize]).collect();
        ClsWorkload {
            dp,
            keys,
            stream,
            pos: 0,
        }
    }

    /// Share of the stream's packets that go to the `top` most frequent megaflows
    /// (shows how skewed the traffic is).
    pub fn top_share(&self, top: usize, n_flows: usize) -> f64 {
        let mut cnt = vec![0u32; n_flows];
        for &c in &self.stream {
            cnt[c as usize % n_flows] += 1;
        }
        cnt.sort_unstable_by(|a, b| b.cmp(a));
        cnt.iter().take(top).map(|&c| c as f64).sum::<f64>() / self.stream.len() as f64
    }

    /// Lookups per CPU-second over at least `t` of CPU time ([`rate_cpu`]) with these
    /// caches (fresh EMC / SMC; one pass over the stream first, untimed, fills them
    /// and ranks the subtables; without caches only 2 * `RANK_INTERVAL` lookups). Every lookup hashes the key (as `Datapath::process`
    /// does) and must find its megaflow. Lookups go in groups of [`LOOKUP_BATCH`]
    /// through [`Datapath::lookup_batch`].
    pub fn measure(&mut self, t: Duration, c: Caches) -> ClsFigure {
        self.measure_with(t, c, true)
    }

    /// [`Self::measure`], with `batched = false` one [`Datapath::lookup`] per packet
    /// (to tell what the batching brings).
    pub fn measure_with(&mut self, t: Duration, c: Caches, batched: bool) -> ClsFigure {
        let dp = &mut self.dp;
        dp.set_emc(c.emc);
        dp.set_smc(c.smc);
        dp.set_ranking(c.ranking);
        let keys = &self.keys;
        let mut missed = 0u64;
        // Warm-up (untimed): with a cache, the whole stream (every connection seen,
        // the caches filled); classifier only, 2 * RANK_INTERVAL lookups (two
        // re-sorts by hits): nothing to fill, and a whole pass at 1000 masks took
        // minutes of CPU.
        let warm = if c.emc || c.smc {
            STREAM
        } else {
            (2 * crate::dp::RANK_INTERVAL as usize).min(STREAM)
        };
        for k in &keys[..warm] {
            missed += dp.lookup(k, hash_key(k)).is_none() as u64;
        }
        let s0 = dp.stats;
        let pos = &mut self.pos;
        let mut hashes = [0u64; LOOKUP_BATCH];
        let mut out = [None; LOOKUP_BATCH];
        let (rate, wall_rate) = rate_cpu(t, || {
            // groups of LOOKUP_BATCH packets, as a PMD receives them (STREAM and
            // BATCH are multiples of it)
            if !batched {
                for _ in 0..BATCH {
                    let k = &keys[*pos];
                    *pos = (*pos + 1) & (STREAM - 1);
                    let r = dp.lookup(black_box(k), hash_key(k));
                    missed += r.is_none() as u64;
                    black_box(r);
                }
                return BATCH as u64;
            }
            for _ in 0..BATCH / LOOKUP_BATCH {
                let group = black_box(&keys[*pos..*pos + LOOKUP_BATCH]);
                *pos = (*pos + LOOKUP_BATCH) & (STREAM - 1);
                for (h, k) in hashes.iter_mut().zip(group) {
                    *h = hash_key(k);
                }
                dp.lookup_batch(group, &hashes, &mut out);
                missed += out.iter().filter(|r| r.is_none()).count() as u64;
                black_box(&out);
            }
            BATCH as u64
        });
        assert_eq!(missed, 0, "every packet is inside an installed megaflow");
        let s = dp.stats;
        let (e, sm, m) = (
            (s.emc_hits - s0.emc_hits) as f64,
            (s.smc_hits - s0.smc_hits) as f64,
            (s.megaflow_hits - s0.megaflow_hits) as f64,
        );
        let all = (e + sm + m).max(1.0);
        ClsFigure {
            rate,
            wall_rate,
            emc_pct: 100.0 * e / all,
            smc_pct: 100.0 * sm / all,
            dpcls_pct: 100.0 * m / all,
            probes: (s.subtable_probes - s0.subtable_probes) as f64 / m.max(1.0),
        }
    }
}

/// A random OpenFlow table of `n` rules with overlapping prefixes and port masks.
pub fn random_table(r: &mut Rng, n: usize) -> FlowTable {
    let mut s = String::new();
    for i in 0..n {
        let prio = 1 + i;
        let proto = ["ip", "tcp", "udp"][r.below(3) as usize];
        let mut m = format!("priority={prio},{proto}");
        if r.below(2) == 0 {
            m += &format!(
                ",nw_dst=10.{}.{}.0/{}",
                r.below(4),
                r.below(256),
                [8, 16, 20, 24, 28, 32][r.below(6) as usize]
            );
        }
        if r.below(3) == 0 {
            m += &format!(
                ",nw_src=10.{}.0.0/{}",
                r.below(8),
                [8, 12, 16][r.below(3) as usize]
            );
        }
        if proto != "ip" && r.below(2) == 0 {
            m += &format!(",tp_dst={}", [22, 80, 443, 4420, 4791][r.below(5) as usize]);
        }
        if r.below(4) == 0 {
            m += &format!(",in_port={}", 1 + r.below(4));
        }
        s += &format!("{m},actions=output:{}\n", 1 + r.below(4));
    }
    s += "priority=0,actions=drop\n";
    FlowTable::from_rules(parse_flows(&s).unwrap_or_default())
}

/// (c) Upcall rate: every packet is a miss handled like OVS's upcall handler: translate
/// through a random table of `n_rules` (classifier with OVS megaflow semantics + actions)
/// and install the megaflow. Returns (upcalls/s, avg megaflows per mask at the end).
pub fn upcalls(t: Duration, n_rules: usize) -> (f64, f64) {
    let mut r = Rng::new(5);
    let table = random_table(&mut r, n_rules);
    let mut dp = Datapath::new();
    let keys: Vec<FlowKey> = (0..BATCH).map(|_| random_key(&mut r)).collect();
    let mut salt = 0u64;
    let v = rate(t, || {
        salt += 1;
        for k in &keys {
            let mut k = *k;
            k.set(f::TP_SRC, (k.tp_src() as u64 ^ salt) & 0xffff);
            black_box(dp.upcall(&table, &k, hash_key(&k)));
        }
        if dp.n_flows() > 200_000 {
            dp.flush();
        }
        BATCH as u64
    });
    (v, dp.n_flows() as f64 / dp.n_masks().max(1) as f64)
}

/// A random pipeline of `n_tables` tables of `n_rules` each: every rule of table
/// i < last loads a register and goes to table i+1, whose rules also match that
/// register; the last table outputs (rules as [`random_table`]'s, with `table=N`).
pub fn random_pipeline(r: &mut Rng, n_tables: usize, n_rules: usize) -> FlowTable {
    let mut s = String::new();
    for t in 0..n_tables {
        for i in 0..n_rules {
            let prio = 1 + i;
            let proto = ["ip", "tcp", "udp"][r.below(3) as usize];
            let mut m = format!("table={t},priority={prio},{proto}");
            if r.below(2) == 0 {
                m += &format!(
                    ",nw_dst=10.{}.{}.0/{}",
                    r.below(4),
                    r.below(256),
                    [8, 16, 20, 24, 28, 32][r.below(6) as usize]
                );
            }
            if proto != "ip" && r.below(2) == 0 {
                m += &format!(",tp_dst={}", [22, 80, 443, 4420, 4791][r.below(5) as usize]);
            }
            if t > 0 && r.below(2) == 0 {
                m += &format!(",reg0={}", r.below(4));
            }
            if t + 1 < n_tables {
                s += &format!(
                    "{m},actions=load:{}->NXM_NX_REG0[0..3],goto_table:{}\n",
                    r.below(4),
                    t + 1
                );
            } else {
                s += &format!("{m},actions=output:{}\n", 1 + r.below(4));
            }
        }
        if t + 1 < n_tables {
            s += &format!("table={t},priority=0,actions=goto_table:{}\n", t + 1);
        } else {
            s += &format!("table={t},priority=0,actions=drop\n");
        }
    }
    FlowTable::from_rules(parse_flows(&s).unwrap_or_default())
}

/// Upcalls (translate + install, EMC on) through `table` for random keys, and then
/// megaflow hits (EMC off) on the megaflows those upcalls installed. Returns
/// (upcalls/s, megaflow hits/s, megaflows installed, masks).
pub fn table_rates(t: Duration, table: &FlowTable) -> (f64, f64, usize, usize) {
    let mut r = Rng::new(11);
    let keys: Vec<FlowKey> = (0..BATCH).map(|_| random_key(&mut r)).collect();
    let mut dp = Datapath::new();
    let mut salt = 0u64;
    let up = rate(t, || {
        salt += 1;
        for k in &keys {
            let mut k = *k;
            k.set(f::TP_SRC, (k.tp_src() as u64 ^ salt) & 0xffff);
            black_box(dp.upcall(table, &k, hash_key(&k)));
        }
        if dp.n_flows() > 200_000 {
            dp.flush();
        }
        BATCH as u64
    });
    let mut dp = Datapath::new();
    dp.set_emc(false);
    for k in &keys {
        dp.process(table, k, 64, 1);
    }
    let (n_flows, n_masks) = (dp.n_flows(), dp.n_masks());
    let mut now = 2;
    let hits = rate(t, || {
        now += 1;
        for k in &keys {
            black_box(dp.process(table, k, 64, now).0.len());
        }
        BATCH as u64
    });
    (up, hits, n_flows, n_masks)
}

/// `n` distinct megaflows (10 masks, each megaflow its own dl_dst, the VLAN-present
/// bit in every mask as the datapath installs it) with a MAC rewrite + output.
pub fn offload_specs(n: usize) -> Vec<crate::offload::FlowSpec> {
    let mut r = Rng::new(21);
    let masks = random_masks(&mut r, 10);
    (0..n)
        .map(|i| {
            let mut m = masks[i % masks.len()];
            m.or(f::VLAN0_TCI, crate::key::VLAN_CFI as u64);
            let mut k = random_key(&mut r);
            k.set(f::DL_DST, 0x0200_0000_0000 | i as u64);
            crate::offload::FlowSpec {
                key: k.and(&m),
                mask: m,
                actions: vec![
                    OdpAction::SetEth {
                        src: (0, 0),
                        dst: (0x0200_0000_00ff, 0xffff_ffff_ffff),
                    },
                    OdpAction::Output(1 + (i % 4) as u32),
                ],
            }
        })
        .collect()
}

/// Offload insertion: puts every spec into a fresh provider (`tc` or `rte`, on an
/// emulated NIC without insert cost, large enough) on this thread. Returns
/// (flows/s, failures, same-run baseline: software megaflow installs/s of the same
/// specs into a datapath).
pub fn offload_insert_rate(
    provider: &str,
    specs: &[crate::offload::FlowSpec],
) -> (f64, usize, f64) {
    use crate::offload::nic::NicConfig;
    use crate::offload::OffloadProvider;
    let nic = NicConfig {
        capacity: specs.len() + 1,
        ..Default::default()
    };
    let p: Box<dyn OffloadProvider> = match provider {
        "tc" => Box::new(crate::offload::tc::TcProvider::new(
            nic,
            crate::offload::tc::TcPolicy::SkipSw,
        )),
        _ => Box::new(crate::offload::rte::RteProvider::new(nic)),
    };
    let t0 = Instant::now();
    let mut failed = 0;
    for (i, s) in specs.iter().enumerate() {
        failed += p.put(i as u64 + 1, s, i as u32 + 1).is_err() as usize;
    }
    let put = specs.len() as f64 / t0.elapsed().as_secs_f64();
    let mut dp = Datapath::new();
    let t0 = Instant::now();
    for s in specs {
        black_box(dp.install(&s.key, &s.mask, s.actions.clone()));
    }
    let base = specs.len() as f64 / t0.elapsed().as_secs_f64();
    (put, failed, base)
}

/// Offload insertion through the pipeline: ADD ops enqueued to `threads` offload
/// threads (providers "tc,rte"), timed until every result is back. Returns flows/s.
pub fn offload_pipeline_rate(specs: &[crate::offload::FlowSpec], threads: usize) -> f64 {
    use crate::offload::{Offload, OffloadConfig, OffloadOp};
    let mut o = Offload::new(OffloadConfig {
        enabled: true,
        n_threads: threads,
        nic: crate::offload::nic::NicConfig {
            capacity: specs.len() + 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("providers");
    let t0 = Instant::now();
    for (i, s) in specs.iter().enumerate() {
        o.enqueue(OffloadOp::Add {
            ufid: i as u64 + 1,
            spec: s.clone(),
        });
    }
    let mut got = 0;
    while got < specs.len() {
        match o.try_result() {
            Some(_) => got += 1,
            None => std::thread::yield_now(),
        }
    }
    specs.len() as f64 / t0.elapsed().as_secs_f64()
}

/// A datapath holding `n` megaflows translated through a random 1 k-rule table (each
/// with its own dl_dst), for revalidator timings; returns it with the table.
pub fn reval_setup(n: usize) -> (Datapath, FlowTable) {
    let mut r = Rng::new(22);
    let table = random_table(&mut r, 1000);
    let mut dp = Datapath::new();
    for i in 0..n {
        let mut k = random_key(&mut r);
        k.set(f::DL_DST, 0x0200_0000_0000 | i as u64);
        let x = table.xlate(&k);
        let mut m = x.wc;
        m.or(f::VLAN0_TCI, crate::key::VLAN_CFI as u64);
        m.full(f::DL_DST);
        dp.install_rules(&k, &m, x.actions, &x.rules);
    }
    (dp, table)
}

/// Revalidator round times on `n` megaflows: (ms of a round without a table change:
/// stats push + idle check + rebuild-free pass, ms of a round after a table change:
/// every megaflow translated again, same-run baseline: ms to translate the n upcall
/// keys alone).
pub fn reval_times(n: usize) -> (f64, f64, f64) {
    let (mut dp, mut table) = reval_setup(n);
    assert_eq!(dp.n_flows(), n, "distinct megaflows");
    let t0 = Instant::now();
    let sw = dp.sweep(&mut table, 1, u64::MAX / 2);
    let plain = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(sw.megaflows_expired, 0);
    dp.table_changed();
    let t0 = Instant::now();
    let sw = dp.sweep(&mut table, 2, u64::MAX / 2);
    let full = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(sw.kept + sw.modified, n, "every megaflow revalidated");
    let keys: Vec<FlowKey> = dp.flows().map(|f| f.orig_key).collect();
    let t0 = Instant::now();
    for k in &keys {
        black_box(table.xlate(k).actions.len());
    }
    let base = t0.elapsed().as_secs_f64() * 1e3;
    (plain, full, base)
}

/// Forwarding with hw-offload on (`provider` Some) vs off, `n` flows (distinct
/// dl_dst, each its own megaflow): (a) the first packet of every flow (upcall +
/// install, + an ADD queued to one offload thread when on: what forwarding pays
/// while the NIC is filled), (b) then packets of offloaded flows (the emulated NIC
/// forwards them: its lookup + actions run on this core) vs the software cache.
/// Returns (new-flow packets/s, hit packets/s, flows offloaded at the end).
pub fn forwarding_rate(t: Duration, provider: Option<&str>, n: usize) -> (f64, f64, usize) {
    let table = FlowTable::from_rules(
        parse_flows("priority=10,dl_dst=02:00:00:00:00:01,actions=output:3\npriority=1,ip,actions=mod_nw_tos:8,output:2\n")
            .unwrap_or_default(),
    );
    let mut r = Rng::new(23);
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut k = random_key(&mut r);
            k.set(f::DL_DST, 0x0200_0000_1000 + i as u64);
            k.set(f::NW_PROTO, 17);
            let mut fr = frame_for(&k);
            crate::exec::fix_checksums(&mut fr);
            fr
        })
        .collect();
    let mut dp = Datapath::new();
    if let Some(p) = provider {
        dp.set_offload(Some(
            crate::offload::Offload::new(crate::offload::OffloadConfig {
                enabled: true,
                priority: vec![p.to_string()],
                n_threads: 1,
                nic: crate::offload::nic::NicConfig {
                    capacity: n + 1,
                    ..Default::default()
                },
                tc_policy: crate::offload::tc::TcPolicy::SkipSw,
                ..Default::default()
            })
            .expect("provider"),
        ));
    }
    let t0 = Instant::now();
    for fr in &frames {
        black_box(
            dp.receive_execute(&table, 1, &mut fr.clone(), 1)
                .outputs
                .len(),
        );
    }
    let new_rate = n as f64 / t0.elapsed().as_secs_f64();
    // Let the offload thread finish (not timed).
    if dp.offload().is_some() {
        loop {
            dp.offload_poll();
            if dp.offload().is_some_and(|o| o.queued() == 0)
                && dp
                    .flows()
                    .all(|f| f.offload != crate::offload::OffloadState::Pending)
            {
                break;
            }
            std::thread::yield_now();
        }
    }
    let offloaded = dp
        .flows()
        .filter(|f| matches!(f.offload, crate::offload::OffloadState::Full { .. }))
        .count();
    let mut now = 2;
    let mut i = 0;
    let hits = rate(t, || {
        now += 1;
        for _ in 0..BATCH {
            let fr = &frames[i % n];
            i += 1;
            black_box(
                dp.receive_execute(&table, 1, &mut fr.clone(), now)
                    .outputs
                    .len(),
            );
        }
        BATCH as u64
    });
    (new_rate, hits, offloaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_run() {
        let t = Duration::from_millis(5);
        assert!(baseline_hash(t) > 0.0);
        let (v, emc) = emc_hits(t, 100);
        assert!(v > 0.0 && emc > 99.0, "emc {emc}");
        assert!(emc_hits_with_parse(t, 100) > 0.0);
        let mut r = Rng::new(9);
        let k = random_key(&mut r);
        let k2 = FlowKey::from_packet(k.in_port(), &frame_for(&k));
        assert_eq!(k2.get(f::NW_DST), k.get(f::NW_DST));
        assert_eq!(k2.tp_dst(), k.tp_dst());
        let (v, probes) = dpcls_lookups(t, 10, 100);
        assert!(v > 0.0 && (1.0..=10.0).contains(&probes), "probes {probes}");
        for tr in [Traffic::Uniform, Traffic::Zipf] {
            let mut w = ClsWorkload::new(20, 200, tr);
            let plain = w.measure(
                t,
                Caches {
                    emc: false,
                    smc: false,
                    ranking: false,
                },
            );
            assert!(plain.rate > 0.0 && plain.dpcls_pct == 100.0, "{plain:?}");
            let smc = w.measure(
                t,
                Caches {
                    emc: false,
                    smc: true,
                    ranking: true,
                },
            );
            assert!(
                smc.smc_pct > 99.0,
                "{tr:?}: every connection fits the SMC: {smc:?}"
            );
            let emc = w.measure(
                t,
                Caches {
                    emc: true,
                    smc: false,
                    ranking: true,
                },
            );
            assert!(
                emc.emc_pct > 0.0 && emc.emc_pct < 90.0,
                "{tr:?}: more connections than the EMC holds: {emc:?}"
            );
        }
        let z = ClsWorkload::new(20, 200, Traffic::Zipf).top_share(10, 200);
        let u = ClsWorkload::new(20, 200, Traffic::Uniform).top_share(10, 200);
        assert!(z > 0.3 && u < 0.1, "zipf top-10 share {z}, uniform {u}");
        let (v, per_mask) = upcalls(t, 50);
        assert!(v > 0.0 && per_mask > 0.0);
        let p = random_pipeline(&mut r, 4, 50);
        assert_eq!((p.table_len(0), p.table_len(3), p.len()), (51, 51, 204));
        let (up, hits, flows, _) = table_rates(t, &p);
        assert!(up > 0.0 && hits > 0.0 && flows > 0);
        let specs = offload_specs(200);
        for p in ["tc", "rte"] {
            let (v, failed, base) = offload_insert_rate(p, &specs);
            assert!(v > 0.0 && base > 0.0 && failed == 0, "{p}: {failed} failed");
        }
        assert!(offload_pipeline_rate(&specs, 1) > 0.0);
        let (a, b, c) = reval_times(300);
        assert!(a > 0.0 && b > 0.0 && c > 0.0);
        for p in [None, Some("tc"), Some("rte")] {
            let (nw, hits, off) = forwarding_rate(t, p, 100);
            assert!(nw > 0.0 && hits > 0.0);
            assert_eq!(off, if p.is_some() { 100 } else { 0 }, "{p:?}");
        }
        // Every packet went through all four tables: some output or drop, never a
        // translation error.
        let mut r = Rng::new(12);
        for _ in 0..100 {
            let x = p.xlate(&random_key(&mut r));
            assert!(x.error.is_none() && x.rules.len() >= 4, "{:?}", x.rules);
        }
    }
}
