//! The bdev space allocator: a map of free block extents, always fully
//! coalesced, allocated first-fit.
//!
//! The index holds an exact copy of the map (table `free`). The in-memory map
//! changes as values are allocated; every start offset inserted or removed is
//! remembered as dirty, and [`Allocator::sync`] writes exactly those keys into the
//! open index transaction, so the copy on disk equals the map after every commit.
//! Space freed by a transaction (aggregation, container destroy) is *deferred*:
//! it joins the map only at commit ([`Allocator::apply_deferred`]), so no block
//! still referenced by the last committed index can be handed out and
//! overwritten before that index is replaced.

use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Default, Clone)]
pub(crate) struct Allocator {
    free: BTreeMap<u64, u64>,
    free_blocks: u64,
    total_blocks: u64,
    dirty: HashSet<u64>,
    deferred: Vec<(u64, u64)>,
}

impl Allocator {
    /// All of `[0, total)` free.
    pub fn new_empty(total_blocks: u64) -> Self {
        let mut a = Allocator {
            total_blocks,
            ..Default::default()
        };
        if total_blocks > 0 {
            a.free.insert(0, total_blocks);
            a.dirty.insert(0);
            a.free_blocks = total_blocks;
        }
        a
    }

    /// From the extents stored in the index (already coalesced).
    pub fn from_extents(total_blocks: u64, ext: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let free: BTreeMap<u64, u64> = ext.into_iter().collect();
        Allocator {
            free_blocks: free.values().sum(),
            free,
            total_blocks,
            dirty: HashSet::new(),
            deferred: Vec::new(),
        }
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }
    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&o, &l)| (o, l))
    }

    /// First fit: the start block of `n` contiguous free blocks.
    pub fn alloc(&mut self, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let (&off, &len) = self.free.iter().find(|(_, &l)| l >= n)?;
        self.free.remove(&off);
        self.dirty.insert(off);
        if len > n {
            self.free.insert(off + n, len - n);
            self.dirty.insert(off + n);
        }
        self.free_blocks -= n;
        Some(off)
    }

    /// Return blocks to the map at once (undo of an allocation that was never
    /// referenced by a committed index).
    pub fn release_now(&mut self, off: u64, n: u64) {
        if n == 0 {
            return;
        }
        let mut start = off;
        let mut len = n;
        if let Some((&po, &pl)) = self.free.range(..off).next_back() {
            debug_assert!(po + pl <= off, "double free at {off}");
            if po + pl == off {
                self.free.remove(&po);
                self.dirty.insert(po);
                start = po;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(off + n)) {
            self.free.remove(&(off + n));
            self.dirty.insert(off + n);
            len += nl;
        }
        self.free.insert(start, len);
        self.dirty.insert(start);
        self.free_blocks += n;
    }

    /// Take exactly `[off, off + n)` out of the map (a redo-log replay
    /// re-allocating what a logged update was given); false, changing
    /// nothing, if any of it is not free.
    pub fn take(&mut self, off: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let Some((&po, &pl)) = self.free.range(..=off).next_back() else {
            return false;
        };
        let Some(end) = off.checked_add(n) else {
            return false;
        };
        if po + pl < end {
            return false;
        }
        self.free.remove(&po);
        self.dirty.insert(po);
        if po < off {
            self.free.insert(po, off - po);
        }
        if end < po + pl {
            self.free.insert(end, po + pl - end);
            self.dirty.insert(end);
        }
        self.free_blocks -= n;
        true
    }

    /// Whether frees wait for the next commit.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Free blocks once the current transaction commits.
    pub fn defer_free(&mut self, off: u64, n: u64) {
        if n > 0 {
            self.deferred.push((off, n));
        }
    }

    /// Join the deferred frees (just before the commit that makes them safe).
    pub fn apply_deferred(&mut self) {
        for (o, n) in std::mem::take(&mut self.deferred) {
            self.release_now(o, n);
        }
    }

    /// The dirty keys: `(start, Some(len))` to write, `(start, None)` to delete.
    pub fn take_dirty(&mut self) -> Vec<(u64, Option<u64>)> {
        let d: Vec<(u64, Option<u64>)> = self
            .dirty
            .drain()
            .map(|k| (k, self.free.get(&k).copied()))
            .collect();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn apply(db: &mut BTreeMap<u64, u64>, a: &mut Allocator) {
        for (k, v) in a.take_dirty() {
            match v {
                Some(l) => {
                    db.insert(k, l);
                }
                None => {
                    db.remove(&k);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn mirror_stays_exact_and_coalesced(ops in proptest::collection::vec((any::<bool>(), 1u64..20), 1..200)) {
            let mut a = Allocator::new_empty(256);
            let mut db = BTreeMap::new();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (is_alloc, n) in ops {
                if is_alloc || live.is_empty() {
                    if let Some(o) = a.alloc(n) {
                        if n % 3 == 0 {
                            // a replay takes exactly what an allocation gave
                            a.release_now(o, n);
                            prop_assert!(a.take(o, n));
                            prop_assert!(!a.take(o, 1), "taken twice");
                        }
                        live.push((o, n));
                    }
                } else {
                    let (o, n) = live.swap_remove((n as usize) % live.len());
                    if n % 2 == 0 { a.release_now(o, n) } else { a.defer_free(o, n); a.apply_deferred() }
                }
                apply(&mut db, &mut a);
                prop_assert_eq!(&db, &a.free);
                let used: u64 = live.iter().map(|l| l.1).sum();
                prop_assert_eq!(a.free_blocks() + used, 256);
                // coalesced and disjoint
                let mut prev_end = None;
                for (&o, &l) in &a.free {
                    prop_assert!(l > 0);
                    if let Some(e) = prev_end { prop_assert!(o > e); }
                    prev_end = Some(o + l);
                }
            }
            for (o, n) in live { a.release_now(o, n); }
            prop_assert_eq!(a.free.len(), 1);
        }
    }
}
