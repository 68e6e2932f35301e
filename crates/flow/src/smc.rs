//! The signature match cache (OVS dpif-netdev's `smc_cache`, `smc_lookup_batch`,
//! `smc_insert`): a fixed-size table consulted after the EMC and before the
//! megaflow classifier. Each entry is a 16-bit signature of a packet key's hash and
//! the place the key matched last time: a classifier subtable and a slot in it; a
//! bucket holds [`SMC_WAYS`] entries. A signature hit is only a candidate: the caller
//! validates it by comparing the key, under the subtable's mask, with the compact
//! masked key the subtable keeps in that slot (no megaflow record is fetched), so a
//! stale or colliding entry (slot emptied, moved by a rehash, refilled by another
//! flow, subtable gone) never yields a wrong flow.
//!
//! Compared with the EMC (whole keys, 192 B per entry) an entry is 8 bytes, so the
//! cache holds far more exact flows (OVS: 1 M entries, 4 MB with 16-bit flow
//! indices; here 1 M entries in 8 MB: a bucket is 32 bytes, aligned, so it never
//! straddles two cache lines). Nothing is allocated after [`Smc::new`]; entries are
//! never removed (validation makes stale ones harmless, as in OVS).

/// Entries per bucket (OVS `SMC_ENTRY_PER_BUCKET`).
pub const SMC_WAYS: usize = 4;
/// Default number of entries (OVS `SMC_ENTRIES`, 1 << 20).
pub const SMC_ENTRIES: usize = 1 << 20;
/// Subtables past this index are not cached (the entry's subtable field is 16 bits).
pub const SMC_MAX_SUBTABLE: u32 = u16::MAX as u32 - 1;

/// A hint to the CPU to bring the cache line of `r` into the cache (x86-64:
/// `prefetcht0`; elsewhere nothing). Never faults, changes no state a program sees.
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint that never faults and does not read the memory
    // in a way the program observes; the pointer comes from a live reference, and
    // SSE (which the intrinsic's target_feature names) is in every x86-64 baseline.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(r as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

#[derive(Debug, Clone, Copy, Default)]
#[repr(align(32))]
struct Bucket {
    sig: [u16; SMC_WAYS],
    /// Subtable index + 1 (0 = empty).
    sub: [u16; SMC_WAYS],
    /// Slot in that subtable.
    slot: [u32; SMC_WAYS],
}

/// The signature table.
#[derive(Debug, Clone)]
pub struct Smc {
    buckets: Vec<Bucket>,
    mask: usize,
}

#[inline(always)]
fn sig_of(hash: u64) -> u16 {
    (hash >> 48) as u16
}

impl Smc {
    /// A table of about `entries` entries (rounded up to a power of two, at least
    /// one bucket).
    pub fn new(entries: usize) -> Smc {
        let n = (entries / SMC_WAYS).max(1).next_power_of_two();
        Smc {
            buckets: vec![Bucket::default(); n],
            mask: n - 1,
        }
    }

    /// Number of entries.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * SMC_WAYS
    }

    /// Asks the CPU to fetch the bucket of this hash (a batch of lookups prefetches
    /// every bucket first, then reads them: the cache misses overlap).
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        prefetch(&self.buckets[(hash as usize) & self.mask]);
    }

    /// The candidate (subtable, slot) places for a key of this hash (entries whose
    /// signature matches), to be validated by the caller. No allocation.
    #[inline(always)]
    pub fn candidates(&self, hash: u64) -> impl Iterator<Item = (u32, u32)> + '_ {
        let b = &self.buckets[(hash as usize) & self.mask];
        let sig = sig_of(hash);
        (0..SMC_WAYS)
            .filter(move |&w| b.sub[w] != 0 && b.sig[w] == sig)
            .map(move |w| (b.sub[w] as u32 - 1, b.slot[w]))
    }

    /// Remembers that the key of this hash matched the flow in `slot` of subtable
    /// `sub` (OVS `smc_insert`): an entry with the same signature is updated, else
    /// an empty way is taken, else one way (chosen by other hash bits) is replaced.
    /// A subtable past [`SMC_MAX_SUBTABLE`] is not cached.
    #[inline]
    pub fn insert(&mut self, hash: u64, sub: u32, slot: u32) {
        if sub > SMC_MAX_SUBTABLE {
            return;
        }
        let b = &mut self.buckets[(hash as usize) & self.mask];
        let sig = sig_of(hash);
        let w = (0..SMC_WAYS)
            .find(|&w| b.sub[w] != 0 && b.sig[w] == sig)
            .or_else(|| (0..SMC_WAYS).find(|&w| b.sub[w] == 0))
            .unwrap_or(((hash >> 32) as usize) & (SMC_WAYS - 1));
        b.sig[w] = sig;
        b.sub[w] = sub as u16 + 1;
        b.slot[w] = slot;
    }

    /// Empties the table (no allocation).
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }

    /// Entries in use (a full scan: for tests and statistics).
    pub fn used(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| b.sub.iter().filter(|&&f| f != 0).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_updates_same_signature_and_replaces_when_full() {
        let mut s = Smc::new(16); // 4 buckets
        assert_eq!(s.capacity(), 16);
        let h = |bucket: u64, sig: u64, other: u64| bucket | (other << 32) | (sig << 48);
        s.insert(h(1, 7, 0), 0, 10);
        assert_eq!(s.candidates(h(1, 7, 0)).collect::<Vec<_>>(), vec![(0, 10)]);
        assert_eq!(s.candidates(h(1, 8, 0)).count(), 0, "other signature");
        assert_eq!(s.candidates(h(2, 7, 0)).count(), 0, "other bucket");
        s.insert(h(1, 7, 0), 3, 11); // same signature: updated, not duplicated
        assert_eq!(s.candidates(h(1, 7, 0)).collect::<Vec<_>>(), vec![(3, 11)]);
        for sig in 1..=3 {
            s.insert(h(1, sig, 0), 0, sig as u32);
        }
        assert_eq!(s.used(), 4);
        // full bucket: way (hash >> 32) & 3 = 2 is replaced
        s.insert(h(1, 9, 2), 1, 99);
        assert_eq!(s.used(), 4);
        assert_eq!(s.candidates(h(1, 9, 0)).collect::<Vec<_>>(), vec![(1, 99)]);
        assert_eq!(s.candidates(h(1, 2, 0)).count(), 0, "way 2 held sig 2");
        // subtables past the 16-bit field are not cached
        s.insert(h(2, 5, 0), SMC_MAX_SUBTABLE + 1, 1);
        assert_eq!(s.candidates(h(2, 5, 0)).count(), 0);
        s.insert(h(2, 5, 0), SMC_MAX_SUBTABLE, 1);
        assert_eq!(
            s.candidates(h(2, 5, 0)).collect::<Vec<_>>(),
            vec![(SMC_MAX_SUBTABLE, 1)]
        );
        assert_eq!(std::mem::size_of::<Bucket>(), 32);
        s.clear();
        assert_eq!(s.used(), 0);
    }
}
