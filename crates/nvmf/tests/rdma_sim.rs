//! NVMe/RDMA target and host over a lossy simulated path: both soft RoCE devices in
//! `IoMode::External` (no sockets), a pump thread moves every RoCEv2 datagram (CM MADs
//! on QP1 and the RC traffic of the NVMe queues) through a seeded impaired link that
//! drops, duplicates and reorders packets. Connect, then I/O of several sizes at queue
//! depth on two queues, every byte compared, at 1 % to 5 % loss, several seeds.
//!
//! The link is this file's own (the `sim` crate's `Link` is not a dependency of nvmf):
//! the same impairments (loss, duplication at half the loss rate, reordering at the
//! loss rate by a hold-back, jitter), seeded, but on the wall clock, since the CM
//! driver and the target's poll groups run on their own threads in real time. The
//! impairment pattern depends on the seed; which packet meets it depends on timing.
//!
//! Found with it: under lost ACKs the target ran out of response slots (every one
//! held by a SEND still waiting for its ACK while the host, which had the response,
//! sent the next command) and tore the queue down ("more responses than the host's
//! receive queue", 4 of 6 runs); responses now wait for a slot. Then a stall of that
//! first version (a waiting response taken for a freed slot went back to the end of
//! the queue when others waited: with no SEND left to complete, a few reads never
//! completed; 2 of 5 runs at 1 %). Then a queue left on the target after the host's
//! shutdown (4 of 6 runs at 3-5 %): the host destroyed its cm_id right after
//! rdma_disconnect, which stops the DREQ retries (as Linux's CM), so one lost DREQ left
//! an idle target queue nothing would tear down; the host now waits up to 1 s for the
//! DREP (DISCONNECTED), as librdmacm programs do. 12 of 12 runs passed after it.
//! The link runs on the wall clock, so a heavily loaded machine could starve the pump
//! past the RC retry budget: the 1 % test runs by default, the 3 % and 5 % ones are
//! `#[ignore]`d (`cargo test -p nvmf --test rdma_sim -- --ignored`).

#![cfg(feature = "rdma")]

mod rdma_common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cm::driver::CmDevice;
use cm::CmConfig;
use nvme::log::TrType;
use nvmf::host::{Controller, HostOpts};
use nvmf::rdma::{RdmaHostTransport, RdmaParams, RdmaTransport};
use nvmf::subsystem::Subsystem;
use nvmf::transport::TransportId;
use nvmf::{Listen, NvmfServer, Tgt, TgtParams};
use verbs::soft::{DeviceOptions, IoMode};
use wire::roce::{Ipv4Pseudo, ROCE_PORT};

const NQN: &str = "nqn.2024-01.io.dpustack:rdma-sim";

/// What the link did, both directions together.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    sent: u64,
    dropped: u64,
    duplicated: u64,
    held_back: u64,
    delivered: u64,
}

/// A packet on the link: (delivery time, sequence, to device, UDP source port, bytes).
type InFlight = (Instant, u64, usize, u16, Vec<u8>);

/// One impaired link for both directions (each packet keeps its destination).
struct Lossy {
    rng: u64,
    loss: f64,
    heap: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Latest delivery time scheduled per direction (in-order packets).
    last: [Instant; 2],
    stats: Stats,
}

impl Lossy {
    fn new(loss: f64, seed: u64) -> Self {
        Lossy {
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            loss,
            heap: BinaryHeap::new(),
            seq: 0,
            last: [Instant::now(); 2],
            stats: Stats::default(),
        }
    }
    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }
    fn send(&mut self, now: Instant, to: usize, sport: u16, data: &[u8]) {
        self.stats.sent += 1;
        if self.uniform() < self.loss {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.uniform() < self.loss / 2.0 {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            // 10 us + up to 20 us of jitter, in order (as one wire: a packet leaves
            // no earlier than the one before it), except those held back 300 us
            // (overtaken by the ones after them)
            let d = Duration::from_micros(10 + (self.uniform() * 20.0) as u64);
            let at = if self.uniform() < self.loss {
                self.stats.held_back += 1;
                now + d + Duration::from_micros(300)
            } else {
                let t = (now + d).max(self.last[to]);
                self.last[to] = t;
                t
            };
            self.seq += 1;
            self.heap
                .push(Reverse((at, self.seq, to, sport, data.to_vec())));
        }
    }
    fn recv(&mut self, now: Instant) -> Option<(usize, u16, Vec<u8>)> {
        if self.heap.peek().is_some_and(|Reverse(p)| p.0 <= now) {
            let Reverse((_, _, to, sport, d)) = self.heap.pop()?;
            self.stats.delivered += 1;
            return Some((to, sport, d));
        }
        None
    }
}

/// Moves datagrams between the two external devices through the lossy link until
/// `stop`; returns what the link did.
fn pump(
    devs: [(verbs::Context, [u8; 4]); 2],
    loss: f64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Stats> {
    std::thread::spawn(move || {
        let mut link = Lossy::new(loss, seed);
        let mut buf = vec![0u8; 16384];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut active = false;
            for (i, (ctx, _)) in devs.iter().enumerate() {
                let dev = ctx.soft().expect("a soft device");
                while let Some(t) = dev.poll_transmit(now, &mut buf) {
                    active = true;
                    if t.dst == devs[1 - i].1 {
                        link.send(now, 1 - i, t.sport, &buf[..t.len]);
                    }
                }
            }
            while let Some((to, sport, d)) = link.recv(now) {
                active = true;
                let (src, dst) = (devs[1 - to].1, devs[to].1);
                let ip = Ipv4Pseudo::df(src, dst, sport, ROCE_PORT);
                devs[to]
                    .0
                    .soft()
                    .unwrap()
                    .handle_datagram(now, src, Some(&ip), &d);
            }
            for (ctx, _) in &devs {
                ctx.soft().unwrap().handle_timeout(now);
            }
            if !active {
                std::thread::sleep(Duration::from_micros(10));
            }
        }
        link.stats
    })
}

fn external(ip: [u8; 4]) -> verbs::Context {
    let mut o = DeviceOptions::new(Ipv4Addr::from(ip));
    o.mode = IoMode::External;
    o.open().expect("external soft device")
}

fn cm_dev(ctx: &verbs::Context) -> CmDevice {
    CmDevice::open(
        ctx,
        CmConfig {
            cm_response_timeout: 14, // 67 ms between CM retries
            packet_life_time: 8,
            local_ack_timeout: 12, // RC retransmit after ~16 ms
            timewait: Duration::from_millis(100),
            ..CmConfig::default()
        },
    )
    .unwrap()
}

fn lossy_run(loss: f64, seed: u64, ips: ([u8; 4], [u8; 4])) {
    let (tctx, hctx) = (external(ips.0), external(ips.1));
    let stop = Arc::new(AtomicBool::new(false));
    let pumper = pump(
        [(tctx.clone(), ips.0), (hctx.clone(), ips.1)],
        loss,
        seed,
        stop.clone(),
    );
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "SN-RDMA-SIM", "dpustack rdma sim").unwrap();
    let m = bdev::malloc::MallocBdev::new("m0", 32768, 512).unwrap(); // 16 MiB
    s.add_ns(1, Arc::new(m), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let transport = RdmaTransport::new(cm_dev(&tctx), RdmaParams::default());
    let tc = transport.counters();
    let addr = SocketAddr::from((Ipv4Addr::from(ips.0), 4420));
    let trid = TransportId::ip(TrType::Rdma, addr);
    let listen = [Listen {
        trid: trid.clone(),
        discovery_only: false,
    }];
    let srv = NvmfServer::start_with(tgt, transport, &listen, 2).unwrap();
    let host = RdmaHostTransport::new(cm_dev(&hctx));
    let opts = HostOpts {
        timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut c = Controller::connect_with(&host, &trid, NQN, &opts, 2, 16)
        .unwrap_or_else(|e| panic!("loss {loss} seed {seed}: connect: {e}"));
    let sizes = [512, 4096, 4608, 36352, 131072, 1 << 20];
    let ios = rdma_common::qd_sweep(&mut c, &sizes, 16, 8 << 20);
    c.shutdown().unwrap();
    let took = t0.elapsed();
    let t1 = Instant::now();
    while tc.snapshot() != (0, 0, 0) && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        tc.snapshot(),
        (0, 0, 0),
        "target: (qpairs, MRs, buffers) left"
    );
    assert_eq!(host.counters().snapshot(), (0, 0, 0), "host side");
    srv.stop();
    stop.store(true, Ordering::Relaxed);
    let st = pumper.join().unwrap();
    eprintln!("loss {loss} seed {seed}: {ios} I/Os compared in {took:?}; link {st:?}");
    // the path really was impaired
    assert!(st.sent > 1000, "{st:?}");
    assert!(
        st.dropped > 0 && st.duplicated > 0 && st.held_back > 0,
        "{st:?}"
    );
}

#[test]
fn lossy_1pct_seeds() {
    for seed in [1u64, 2, 3] {
        lossy_run(0.01, seed, ([127, 0, 3, 1], [127, 0, 3, 2]));
    }
}

#[test]
#[ignore = "wall-clock simulation with 3-5 % loss: heavier, timing-sensitive on a loaded machine (issue 11)"]
fn lossy_3pct_seeds() {
    for seed in [11u64, 12] {
        lossy_run(0.03, seed, ([127, 0, 3, 3], [127, 0, 3, 4]));
    }
}

#[test]
#[ignore = "wall-clock simulation with 3-5 % loss: heavier, timing-sensitive on a loaded machine (issue 11)"]
fn lossy_5pct_seeds() {
    for seed in [21u64, 22] {
        lossy_run(0.05, seed, ([127, 0, 3, 5], [127, 0, 3, 6]));
    }
}
