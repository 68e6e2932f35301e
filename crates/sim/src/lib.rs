//! # sim — deterministic simulated network for sans-IO protocol tests
//!
//! Owns: a virtual clock, seeded lossy/duplicating/reordering/delaying links, and a
//! pcap writer, so that every protocol core (RoCE QP engines, CM, NVMe/TCP, Raft
//! glue) is tested reproducibly. Used only as a dev-dependency.
//!
//! Nothing here knows a protocol: a [`Link`] carries opaque datagrams (`Vec<u8>`
//! plus a caller-chosen metadata value) from one side to the other. Time is a
//! [`Clock`] that only moves when the test says so; all randomness comes from one
//! seed, so a failing seed is a reproducible bug.
//!
//! Depends on nothing inside dpustack.

#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A virtual monotonic clock: `Instant`s derived from a fixed base plus an offset
/// that only [`Clock::advance`]/[`Clock::advance_to`] change.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
    now: Duration,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            base: Instant::now(),
            now: Duration::ZERO,
        }
    }
    pub fn now(&self) -> Instant {
        self.base + self.now
    }
    /// Time since the clock was made.
    pub fn elapsed(&self) -> Duration {
        self.now
    }
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }
    /// Moves to `t` if it is in the future (never backwards).
    pub fn advance_to(&mut self, t: Instant) {
        if t > self.now() {
            self.now = t - self.base;
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Impairments of one direction of a link. Probabilities are in [0, 1].
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// One-way base latency.
    pub delay: Duration,
    /// Extra uniformly random delay in [0, jitter): with jitter > 0, packets reorder.
    pub jitter: Duration,
    pub loss: f64,
    pub dup: f64,
    /// Probability that a packet is held back by an extra `reorder_delay`.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Probability that one random byte of the packet is flipped.
    pub corrupt: f64,
    /// Link rate in bits per second (0 = infinite): packets leave one after the
    /// other, so a burst is spread in time and jitter reorders only near neighbours.
    pub rate_bps: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_micros(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(50),
            corrupt: 0.0,
            rate_bps: 10_000_000_000,
        }
    }
}

impl LinkConfig {
    /// A lossy, duplicating, reordering link.
    pub fn lossy(loss: f64) -> LinkConfig {
        LinkConfig {
            loss,
            dup: loss / 2.0,
            reorder: loss,
            jitter: Duration::from_micros(5),
            ..Default::default()
        }
    }
}

/// Counters of what a link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

struct InFlight<M> {
    at: Instant,
    seq: u64,
    meta: M,
    data: Vec<u8>,
}
impl<M> PartialEq for InFlight<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<M> Eq for InFlight<M> {}
impl<M> PartialOrd for InFlight<M> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for InFlight<M> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// One direction of a simulated link carrying datagrams with metadata `M`.
pub struct Link<M> {
    pub cfg: LinkConfig,
    rng: SmallRng,
    q: BinaryHeap<Reverse<InFlight<M>>>,
    seq: u64,
    /// When the transmitter is free again (serialization at `rate_bps`).
    busy_until: Option<Instant>,
    pub stats: LinkStats,
}

impl<M: Clone> Link<M> {
    pub fn new(cfg: LinkConfig, seed: u64) -> Link<M> {
        Link {
            cfg,
            rng: SmallRng::seed_from_u64(seed),
            q: BinaryHeap::new(),
            seq: 0,
            busy_until: None,
            stats: LinkStats::default(),
        }
    }

    /// Hands a datagram to the link at time `now`.
    pub fn send(&mut self, now: Instant, meta: M, data: &[u8]) {
        self.stats.sent += 1;
        let depart = match self.busy_until {
            Some(t) if t > now => t,
            _ => now,
        };
        if let Some(ns) = (data.len() as u64 * 8)
            .saturating_mul(1_000_000_000)
            .checked_div(self.cfg.rate_bps)
        {
            self.busy_until = Some(depart + Duration::from_nanos(ns));
        }
        let now = depart;
        if self.rng.gen_bool(self.cfg.loss.clamp(0.0, 1.0)) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.gen_bool(self.cfg.dup.clamp(0.0, 1.0)) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = now + self.cfg.delay;
            if !self.cfg.jitter.is_zero() {
                at +=
                    Duration::from_nanos(self.rng.gen_range(0..self.cfg.jitter.as_nanos() as u64));
            }
            if self.rng.gen_bool(self.cfg.reorder.clamp(0.0, 1.0)) {
                self.stats.reordered += 1;
                at += self.cfg.reorder_delay;
            }
            let mut d = data.to_vec();
            if !d.is_empty() && self.rng.gen_bool(self.cfg.corrupt.clamp(0.0, 1.0)) {
                self.stats.corrupted += 1;
                let i = self.rng.gen_range(0..d.len());
                d[i] ^= 1 << self.rng.gen_range(0..8);
            }
            self.seq += 1;
            self.q.push(Reverse(InFlight {
                at,
                seq: self.seq,
                meta: meta.clone(),
                data: d,
            }));
        }
    }

    /// The next datagram due at or before `now`.
    pub fn recv(&mut self, now: Instant) -> Option<(M, Vec<u8>)> {
        if self.q.peek().is_some_and(|Reverse(p)| p.at <= now) {
            let Reverse(p) = self.q.pop()?;
            self.stats.delivered += 1;
            Some((p.meta, p.data))
        } else {
            None
        }
    }

    /// When the next datagram becomes deliverable.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.q.peek().map(|Reverse(p)| p.at)
    }

    pub fn in_flight(&self) -> usize {
        self.q.len()
    }
}

/// Writes a classic pcap file with LINKTYPE_RAW (IPv4/IPv6 packets, no L2), which
/// tshark decodes (UDP 4791 as RoCE, TCP 4420 as NVMe/TCP).
pub struct PcapWriter<W: Write> {
    out: wire::pcap::PcapWriter<W>,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(out: W) -> io::Result<Self> {
        Ok(PcapWriter {
            out: wire::pcap::PcapWriter::new(out, wire::pcap::LinkType::Raw)?,
        })
    }

    /// One raw IP packet at virtual time `t` (since the clock's start).
    pub fn write_packet(&mut self, t: Duration, ip_packet: &[u8]) -> io::Result<()> {
        self.out.write(t, ip_packet)
    }

    /// Wraps `payload` in an IPv4 (DF, given ID, TTL 64, valid checksum) + UDP
    /// (checksum 0) header and writes it.
    pub fn write_ipv4_udp(
        &mut self,
        t: Duration,
        src: ([u8; 4], u16),
        dst: ([u8; 4], u16),
        ip_id: u16,
        payload: &[u8],
    ) -> io::Result<()> {
        let p = ipv4_udp_packet(src, dst, ip_id, payload);
        self.write_packet(t, &p)
    }

    pub fn into_inner(self) -> W {
        self.out.into_inner()
    }
}

/// An IPv4 (DF, TTL 64, checksum filled) + UDP (checksum 0) datagram around `payload`.
pub fn ipv4_udp_packet(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    ip_id: u16,
    payload: &[u8],
) -> Vec<u8> {
    let tot = 28 + payload.len();
    let mut p = Vec::with_capacity(tot);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(tot as u16).to_be_bytes());
    p.extend_from_slice(&ip_id.to_be_bytes());
    p.extend_from_slice(&0x4000u16.to_be_bytes());
    p.extend_from_slice(&[64, 17, 0, 0]);
    p.extend_from_slice(&src.0);
    p.extend_from_slice(&dst.0);
    let mut sum = 0u32;
    for c in p[..20].chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p.extend_from_slice(&src.1.to_be_bytes());
    p.extend_from_slice(&dst.1.to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_is_deterministic_and_impairs() {
        let run = |seed| {
            let mut c = Clock::new();
            let mut l: Link<u32> = Link::new(LinkConfig::lossy(0.1), seed);
            for i in 0..1000u32 {
                l.send(c.now(), i, &i.to_be_bytes());
                c.advance(Duration::from_micros(1));
            }
            c.advance(Duration::from_millis(1));
            let mut got = vec![];
            while let Some((m, _)) = l.recv(c.now()) {
                got.push(m);
            }
            (got, l.stats)
        };
        let (a, sa) = run(7);
        let (b, sb) = run(7);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert!(sa.lost > 50 && sa.lost < 150, "{sa:?}");
        assert!(sa.duplicated > 0 && sa.reordered > 0);
        assert!(a.windows(2).any(|w| w[0] > w[1]), "some reordering");
        let (c2, _) = run(8);
        assert_ne!(a, c2);
    }

    #[test]
    fn clock_and_delay() {
        let mut c = Clock::new();
        let mut l: Link<()> = Link::new(LinkConfig::default(), 1);
        l.send(c.now(), (), b"x");
        assert!(l.recv(c.now()).is_none());
        c.advance_to(l.next_delivery().unwrap());
        assert_eq!(l.recv(c.now()).unwrap().1, b"x");
        assert_eq!(c.elapsed(), Duration::from_micros(10));
    }

    #[test]
    fn pcap_header_and_record() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_ipv4_udp(
            Duration::from_micros(3),
            ([127, 0, 0, 1], 4791),
            ([127, 0, 0, 2], 4791),
            0,
            &[1, 2, 3, 4],
        )
        .unwrap();
        let b = w.into_inner();
        assert_eq!(b.len(), 24 + 16 + 32);
        assert_eq!(&b[20..24], &101u32.to_le_bytes());
        let ip = &b[40..];
        assert_eq!(ip[0], 0x45);
        // header checksum verifies to 0
        let mut s = 0u32;
        for c in ip[..20].chunks(2) {
            s += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        assert_eq!(s, 0xffff);
    }
}
