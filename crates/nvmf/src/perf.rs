//! An I/O generator over the host library, shaped like `spdk_nvme_perf`: queue
//! depth, I/O size, read/write/randread/randwrite/randrw with a read mix, time.
//! One thread drives every I/O queue of one controller, round-robin.

use std::time::{Duration, Instant};

use crate::host::{read_sqe, write_sqe, Controller, HostError, Result};

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
    /// Sequential, reads and writes mixed.
    Rw,
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s {
            "read" => Workload::Read,
            "write" => Workload::Write,
            "randread" => Workload::RandRead,
            "randwrite" => Workload::RandWrite,
            "randrw" => Workload::RandRw,
            "rw" => Workload::Rw,
            _ => {
                return Err(format!(
                    "unknown workload {s:?} (read, write, randread, randwrite, randrw, rw)"
                ))
            }
        })
    }
}

/// Perf parameters.
#[derive(Debug, Clone, Copy)]
pub struct PerfOpts {
    /// Outstanding I/Os per queue.
    pub depth: u16,
    /// Bytes per I/O (a multiple of the block size).
    pub io_size: u32,
    pub workload: Workload,
    /// Percentage of reads for mixed workloads.
    pub read_pct: u8,
    pub time: Duration,
    pub nsid: u32,
    /// Warm-up before measuring.
    pub warmup: Duration,
}

/// Perf results.
#[derive(Debug, Clone, Default)]
pub struct PerfResult {
    pub ios: u64,
    pub bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
    pub secs: f64,
    /// Per-I/O latency in ns (submit to completion), unsorted.
    pub lat_ns: Vec<u64>,
}

impl PerfResult {
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.secs.max(1e-9)
    }
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-9)
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Runs the workload on every I/O queue of `c`.
pub fn run(c: &mut Controller, o: &PerfOpts) -> Result<PerfResult> {
    let ns = c.identify_ns(o.nsid)?;
    let bs = ns.block_size;
    if o.io_size == 0 || !o.io_size.is_multiple_of(bs) {
        return Err(HostError::Protocol(
            "I/O size must be a multiple of the block size",
        ));
    }
    let nlb = o.io_size / bs;
    let slots = ns.blocks / nlb as u64;
    if slots == 0 {
        return Err(HostError::Protocol("namespace smaller than one I/O"));
    }
    let nq = c.io.len();
    if nq == 0 {
        return Err(HostError::Protocol("no I/O queues"));
    }
    let wbuf: Vec<u8> = (0..o.io_size as usize).map(|i| (i * 7) as u8).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = 0u64;
    let mut res = PerfResult {
        lat_ns: Vec::with_capacity(1 << 20),
        ..Default::default()
    };
    // submit time per (queue, cid)
    let mut started: Vec<Vec<Instant>> =
        c.io.iter()
            .map(|q| vec![Instant::now(); q.depth() as usize])
            .collect();
    let t0 = Instant::now();
    let measure_from = t0 + o.warmup;
    let end = measure_from + o.time;
    let mut measuring = false;
    let mut mstart = measure_from;
    let mut last_ka = Instant::now();
    loop {
        let now = Instant::now();
        if !measuring && now >= measure_from {
            measuring = true;
            mstart = now;
            res = PerfResult {
                lat_ns: std::mem::take(&mut res.lat_ns),
                ..Default::default()
            };
            res.lat_ns.clear();
        }
        let stop = now >= end;
        let mut outstanding = 0;
        for (qi, q) in c.io.iter_mut().enumerate() {
            while !stop && q.can_submit() && (q.outstanding() as u16) < o.depth {
                let is_read = match o.workload {
                    Workload::Read | Workload::RandRead => true,
                    Workload::Write | Workload::RandWrite => false,
                    Workload::RandRw | Workload::Rw => (rng.next() % 100) < o.read_pct as u64,
                };
                let slot = match o.workload {
                    Workload::Read | Workload::Write | Workload::Rw => {
                        seq = (seq + 1) % slots;
                        seq
                    }
                    _ => rng.next() % slots,
                };
                let slba = slot * nlb as u64;
                let cid = if is_read {
                    q.submit(read_sqe(o.nsid, slba, nlb), &[], o.io_size)?
                } else {
                    q.submit(write_sqe(o.nsid, slba, nlb), &wbuf, 0)?
                };
                if let Some(s) = started[qi].get_mut(cid as usize) {
                    *s = Instant::now();
                }
                if is_read {
                    res.reads += 1;
                } else {
                    res.writes += 1;
                }
            }
            q.progress(nq == 1)?;
            let done_at = Instant::now();
            while let Some(comp) = q.pop_completion() {
                let cid = comp.cqe.cid() as usize;
                if !comp.cqe.status().is_success() {
                    res.errors += 1;
                }
                if measuring {
                    res.ios += 1;
                    res.bytes += o.io_size as u64;
                    if let Some(s) = started[qi].get(cid) {
                        res.lat_ns
                            .push(done_at.duration_since(*s).as_nanos() as u64);
                    }
                }
                q.recycle(comp.data);
            }
            outstanding += q.outstanding();
        }
        if stop && outstanding == 0 {
            break;
        }
        if last_ka.elapsed() > Duration::from_secs(1) {
            c.maybe_keep_alive()?;
            last_ka = Instant::now();
        }
    }
    res.secs = (Instant::now().min(end) - mstart).as_secs_f64().max(1e-9);
    Ok(res)
}
