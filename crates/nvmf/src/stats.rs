//! I/O statistics of the target for the management plane (metrics, `nvmf_get_stats`,
//! `nvmf_subsystem_get_qpairs`).
//!
//! The I/O path never takes a lock or allocates for them: each qpair owns one
//! [`IoStatsCell`] per namespace it touched (written only by its poll group's
//! thread, relaxed loads and stores, no read-modify-write), registered once with
//! the namespace's [`IoStatsRegistry`] when the qpair opens its bdev channel.
//! A scrape sums the live cells; cells of closed qpairs are folded into a retired
//! total, so counters only grow and the list does not. Latency is recorded only
//! while [`crate::Tgt::set_io_stats`] is on (a clock read at submit and at
//! completion); off, no cell is registered and nothing is counted.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// Latency histogram buckets: bucket `i` holds I/Os of at most `1024 ns << i`
/// (about 1 µs to 0.5 s); one more bucket for longer ones (+Inf).
pub const LAT_BUCKETS: usize = 20;

/// The upper bound of latency bucket `i` in nanoseconds.
pub fn bucket_bound_ns(i: usize) -> u64 {
    1024u64 << i
}

fn bucket_of(ns: u64) -> usize {
    let v = ns.saturating_sub(1) >> 10;
    ((64 - v.leading_zeros()) as usize).min(LAT_BUCKETS)
}

/// One thread's add: a relaxed load and store (the cell has one writer).
#[inline]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A latency histogram (non-cumulative bucket counts, sum in ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; LAT_BUCKETS + 1],
    pub sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: [0; LAT_BUCKETS + 1],
            sum_ns: 0,
        }
    }
}

impl Histogram {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
    fn add(&mut self, o: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets.iter()) {
            *a += b;
        }
        self.sum_ns += o.sum_ns;
    }
}

/// Totals of one namespace (or of one qpair on it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    /// Flush, write zeroes, dataset management, compare.
    pub other_ops: u64,
    /// Commands completed with an error status by the bdev.
    pub errors: u64,
    pub read_latency: Histogram,
    pub write_latency: Histogram,
}

impl IoStats {
    pub fn add(&mut self, o: &IoStats) {
        self.read_ops += o.read_ops;
        self.read_bytes += o.read_bytes;
        self.write_ops += o.write_ops;
        self.write_bytes += o.write_bytes;
        self.other_ops += o.other_ops;
        self.errors += o.errors;
        self.read_latency.add(&o.read_latency);
        self.write_latency.add(&o.write_latency);
    }
}

/// What kind of I/O completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    Read,
    Write,
    Other,
}

#[derive(Debug, Default)]
struct HistCell {
    buckets: [AtomicU64; LAT_BUCKETS + 1],
    sum_ns: AtomicU64,
}

impl HistCell {
    fn record(&self, ns: u64) {
        bump(&self.buckets[bucket_of(ns)], 1);
        bump(&self.sum_ns, ns);
    }
    fn snapshot(&self) -> Histogram {
        let mut h = Histogram::default();
        for (d, s) in h.buckets.iter_mut().zip(self.buckets.iter()) {
            *d = s.load(Relaxed);
        }
        h.sum_ns = self.sum_ns.load(Relaxed);
        h
    }
}

/// One qpair's counters on one namespace: written by one thread only.
#[derive(Debug, Default)]
pub struct IoStatsCell {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
    other_ops: AtomicU64,
    errors: AtomicU64,
    read_lat: HistCell,
    write_lat: HistCell,
}

impl IoStatsCell {
    /// Counts one completed command (`lat_ns` from submit to completion).
    #[inline]
    pub fn record(&self, class: IoClass, bytes: u64, ok: bool, lat_ns: u64) {
        if !ok {
            bump(&self.errors, 1);
            return;
        }
        match class {
            IoClass::Read => {
                bump(&self.read_ops, 1);
                bump(&self.read_bytes, bytes);
                self.read_lat.record(lat_ns);
            }
            IoClass::Write => {
                bump(&self.write_ops, 1);
                bump(&self.write_bytes, bytes);
                self.write_lat.record(lat_ns);
            }
            IoClass::Other => bump(&self.other_ops, 1),
        }
    }
    pub fn snapshot(&self) -> IoStats {
        IoStats {
            read_ops: self.read_ops.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_ops: self.write_ops.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            other_ops: self.other_ops.load(Relaxed),
            errors: self.errors.load(Relaxed),
            read_latency: self.read_lat.snapshot(),
            write_latency: self.write_lat.snapshot(),
        }
    }
}

/// A namespace's cells (one per qpair that did I/O on it) and the retired total.
#[derive(Debug, Default)]
pub struct IoStatsRegistry {
    inner: Mutex<(Vec<Arc<IoStatsCell>>, IoStats)>,
}

impl IoStatsRegistry {
    fn lock(&self) -> MutexGuard<'_, (Vec<Arc<IoStatsCell>>, IoStats)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn prune(g: &mut (Vec<Arc<IoStatsCell>>, IoStats)) {
        let (cells, retired) = g;
        cells.retain(|c| {
            if Arc::strong_count(c) == 1 {
                retired.add(&c.snapshot());
                false
            } else {
                true
            }
        });
    }
    /// A new cell for one qpair (control path: once per qpair and namespace).
    pub fn register(&self) -> Arc<IoStatsCell> {
        let c = Arc::new(IoStatsCell::default());
        let mut g = self.lock();
        Self::prune(&mut g);
        g.0.push(c.clone());
        c
    }
    /// The namespace's totals so far.
    pub fn total(&self) -> IoStats {
        let mut g = self.lock();
        Self::prune(&mut g);
        let mut t = g.1;
        for c in &g.0 {
            t.add(&c.snapshot());
        }
        t
    }
    /// Cells of live qpairs.
    pub fn live_cells(&self) -> usize {
        let mut g = self.lock();
        Self::prune(&mut g);
        g.0.len()
    }
}

/// A poll group's counters (SPDK `spdk_nvmf_poll_group_stat`), written by its
/// thread, read by `nvmf_get_stats`.
#[derive(Debug, Default)]
pub struct PollGroupStats {
    pub id: usize,
    pub transport: String,
    pub admin_qpairs: AtomicU64,
    pub io_qpairs: AtomicU64,
    pub current_admin_qpairs: AtomicU64,
    pub current_io_qpairs: AtomicU64,
    pub completed_nvme_io: AtomicU64,
    /// bdev I/Os submitted and not yet completed.
    pub pending_bdev_io: AtomicU64,
}

impl PollGroupStats {
    pub fn new(id: usize, transport: &str) -> Self {
        PollGroupStats {
            id,
            transport: transport.to_string(),
            ..Default::default()
        }
    }
    /// A queue connected (`admin` = qid 0).
    pub fn connected(&self, admin: bool) {
        if admin {
            self.admin_qpairs.fetch_add(1, Relaxed);
            self.current_admin_qpairs.fetch_add(1, Relaxed);
        } else {
            self.io_qpairs.fetch_add(1, Relaxed);
            self.current_io_qpairs.fetch_add(1, Relaxed);
        }
    }
    /// A connected queue went away.
    pub fn disconnected(&self, admin: bool) {
        let c = if admin {
            &self.current_admin_qpairs
        } else {
            &self.current_io_qpairs
        };
        let _ = c.fetch_update(Relaxed, Relaxed, |v| v.checked_sub(1));
    }
    #[inline]
    pub fn io_submitted(&self) {
        bump(&self.pending_bdev_io, 1);
    }
    /// `n` submitted I/Os that will not be completed (their qpair went away).
    pub fn ios_dropped(&self, n: u64) {
        let p = &self.pending_bdev_io;
        p.store(p.load(Relaxed).saturating_sub(n), Relaxed);
    }
    #[inline]
    pub fn io_completed(&self) {
        bump(&self.completed_nvme_io, 1);
        let p = &self.pending_bdev_io;
        p.store(p.load(Relaxed).saturating_sub(1), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values() {
        for ns in [0u64, 1, 1023, 1024, 1025, 2048, 2049, 1 << 20, 1 << 40] {
            let b = bucket_of(ns);
            if b < LAT_BUCKETS {
                assert!(ns <= bucket_bound_ns(b), "{ns} in {b}");
            }
            if b > 0 {
                assert!(ns > bucket_bound_ns(b - 1), "{ns} in {b}");
            }
        }
        assert_eq!(bucket_of(1 << 40), LAT_BUCKETS);
    }

    #[test]
    fn retired_cells_keep_their_counts() {
        let r = IoStatsRegistry::default();
        let a = r.register();
        a.record(IoClass::Read, 4096, true, 5000);
        a.record(IoClass::Write, 512, true, 100);
        a.record(IoClass::Write, 512, false, 100);
        let b = r.register();
        b.record(IoClass::Read, 4096, true, 3_000_000);
        drop(a);
        let t = r.total();
        assert_eq!(r.live_cells(), 1);
        assert_eq!((t.read_ops, t.read_bytes), (2, 8192));
        assert_eq!((t.write_ops, t.write_bytes, t.errors), (1, 512, 1));
        assert_eq!(t.read_latency.count(), 2);
        assert_eq!(t.read_latency.sum_ns, 3_005_000);
        assert_eq!(t.read_latency.buckets[bucket_of(5000)], 1);
        drop(b);
        assert_eq!(r.total().read_ops, 2);
        assert_eq!(r.live_cells(), 0);
    }
}
