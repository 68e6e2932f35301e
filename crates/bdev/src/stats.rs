//! Per-type operation and byte counters.

use std::ops::Add;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::IoType;

/// Operations and bytes of one I/O type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpStats {
    pub ops: u64,
    pub bytes: u64,
}

/// Completed-I/O counters (successful I/Os by type; failures counted in `errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    pub read: OpStats,
    pub write: OpStats,
    pub flush: OpStats,
    pub write_zeroes: OpStats,
    pub unmap: OpStats,
    /// I/Os completed with an error.
    pub errors: u64,
}

impl Stats {
    /// The counters of one type.
    pub fn of(&self, t: IoType) -> OpStats {
        match t {
            IoType::Read => self.read,
            IoType::Write => self.write,
            IoType::Flush => self.flush,
            IoType::WriteZeroes => self.write_zeroes,
            IoType::Unmap => self.unmap,
        }
    }
}

impl Add for OpStats {
    type Output = OpStats;
    fn add(self, o: OpStats) -> OpStats {
        OpStats {
            ops: self.ops + o.ops,
            bytes: self.bytes + o.bytes,
        }
    }
}

impl Add for Stats {
    type Output = Stats;
    fn add(self, o: Stats) -> Stats {
        Stats {
            read: self.read + o.read,
            write: self.write + o.write,
            flush: self.flush + o.flush,
            write_zeroes: self.write_zeroes + o.write_zeroes,
            unmap: self.unmap + o.unmap,
            errors: self.errors + o.errors,
        }
    }
}

/// A channel's counters: written only by the owning thread (relaxed, uncontended),
/// read by anyone for totals.
#[derive(Debug, Default)]
pub struct StatsCell {
    ops: [AtomicU64; 5],
    bytes: [AtomicU64; 5],
    errors: AtomicU64,
}

fn idx(t: IoType) -> usize {
    match t {
        IoType::Read => 0,
        IoType::Write => 1,
        IoType::Flush => 2,
        IoType::WriteZeroes => 3,
        IoType::Unmap => 4,
    }
}

impl StatsCell {
    /// Count one completed I/O.
    pub fn record(&self, t: IoType, bytes: u64, ok: bool) {
        if ok {
            self.ops[idx(t)].fetch_add(1, Relaxed);
            self.bytes[idx(t)].fetch_add(bytes, Relaxed);
        } else {
            self.errors.fetch_add(1, Relaxed);
        }
    }
    /// Current values.
    pub fn snapshot(&self) -> Stats {
        let g = |i: usize| OpStats {
            ops: self.ops[i].load(Relaxed),
            bytes: self.bytes[i].load(Relaxed),
        };
        Stats {
            read: g(0),
            write: g(1),
            flush: g(2),
            write_zeroes: g(3),
            unmap: g(4),
            errors: self.errors.load(Relaxed),
        }
    }
}
