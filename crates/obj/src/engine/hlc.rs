//! The engine's epoch source: one hybrid logical clock shared by every
//! target and the management thread, lock-free (a compare-and-swap on one
//! `AtomicU64`). Same format as [`crate::types::Hlc`]: wall-clock
//! nanoseconds with the low [`HLC_LOGICAL_BITS`] as a logical counter.
//! Sharing it means a snapshot's epoch is above every update acknowledged
//! before the snapshot was requested, on every target.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::types::{Epoch, EPOCH_MAX, HLC_LOGICAL_BITS};

const MASK: u64 = (1 << HLC_LOGICAL_BITS) - 1;

/// A lock-free hybrid logical clock.
#[derive(Debug, Default)]
pub struct SharedHlc {
    last: AtomicU64,
}

impl SharedHlc {
    pub fn new() -> Self {
        SharedHlc {
            last: AtomicU64::new(0),
        }
    }

    /// A timestamp strictly above every one issued or observed before,
    /// given the wall clock `phys_ns`.
    pub fn now_at(&self, phys_ns: u64) -> Epoch {
        let phys = phys_ns & !MASK;
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let t = if phys > last {
                phys
            } else {
                last.saturating_add(1)
            };
            let t = t.clamp(1, EPOCH_MAX.0 - 1);
            match self
                .last
                .compare_exchange_weak(last, t, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Epoch(t),
                Err(seen) => last = seen,
            }
        }
    }

    /// [`SharedHlc::now_at`] with the system's wall clock.
    pub fn now(&self) -> Epoch {
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.now_at(ns)
    }

    /// Never issue anything at or below `e` (restart: the highest epoch the
    /// stores hold; a remote timestamp).
    pub fn observe(&self, e: Epoch) {
        if e != EPOCH_MAX {
            self.last.fetch_max(e.0, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictly_increasing_across_threads() {
        let h = std::sync::Arc::new(SharedHlc::new());
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || (0..2000).map(|_| h.now_at(5 << 20)).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<Epoch> = ts.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "no epoch issued twice");
        h.observe(Epoch(1 << 40));
        assert!(h.now_at(0).0 > 1 << 40);
    }
}
