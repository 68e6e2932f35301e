//! The signature match cache (OVS dpif-netdev's `smc_cache`, `smc_lookup_batch`,
//! `smc_insert`): a fixed-size table consulted after the EMC and before the
//! megaflow classifier. Each entry is a 16-bit signature of a packet key's hash and
//! the index of the megaflow that key matched last time; a bucket holds
//! [`SMC_WAYS`] entries. A signature hit is only a candidate: the caller validates
//! it with a full masked compare of the key against the megaflow (and that the
//! megaflow still exists), so a stale or colliding entry never yields a wrong flow.
//!
//! Compared with the EMC (whole keys, 192 B per entry) an entry is 6 bytes, so the
//! cache holds far more exact flows (OVS: 1 M entries, 4 MB; here 1 M entries in
//! 6 MB because a megaflow index is 32 bits, OVS's is 16). Nothing is allocated
//! after [`Smc::new`]; entries are never removed (validation makes stale ones
//! harmless, as in OVS).

/// Entries per bucket (OVS `SMC_ENTRY_PER_BUCKET`).
pub const SMC_WAYS: usize = 4;
/// Default number of entries (OVS `SMC_ENTRIES`, 1 << 20).
pub const SMC_ENTRIES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    sig: [u16; SMC_WAYS],
    /// Megaflow index + 1 (0 = empty).
    flow: [u32; SMC_WAYS],
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

    /// The candidate megaflow indices for a key of this hash (entries whose
    /// signature matches), to be validated by the caller. No allocation.
    #[inline(always)]
    pub fn candidates(&self, hash: u64) -> impl Iterator<Item = u32> + '_ {
        let b = &self.buckets[(hash as usize) & self.mask];
        let sig = sig_of(hash);
        (0..SMC_WAYS)
            .filter(move |&w| b.flow[w] != 0 && b.sig[w] == sig)
            .map(move |w| b.flow[w] - 1)
    }

    /// Remembers that the key of this hash matched megaflow `flow` (OVS
    /// `smc_insert`): an entry with the same signature is updated, else an empty
    /// way is taken, else one way (chosen by other hash bits) is replaced.
    #[inline]
    pub fn insert(&mut self, hash: u64, flow: u32) {
        let b = &mut self.buckets[(hash as usize) & self.mask];
        let sig = sig_of(hash);
        let w = (0..SMC_WAYS)
            .find(|&w| b.flow[w] != 0 && b.sig[w] == sig)
            .or_else(|| (0..SMC_WAYS).find(|&w| b.flow[w] == 0))
            .unwrap_or(((hash >> 32) as usize) & (SMC_WAYS - 1));
        b.sig[w] = sig;
        b.flow[w] = flow + 1;
    }

    /// Empties the table (no allocation).
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }

    /// Entries in use (a full scan: for tests and statistics).
    pub fn used(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| b.flow.iter().filter(|&&f| f != 0).count())
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
        s.insert(h(1, 7, 0), 10);
        assert_eq!(s.candidates(h(1, 7, 0)).collect::<Vec<_>>(), vec![10]);
        assert_eq!(s.candidates(h(1, 8, 0)).count(), 0, "other signature");
        assert_eq!(s.candidates(h(2, 7, 0)).count(), 0, "other bucket");
        s.insert(h(1, 7, 0), 11); // same signature: updated, not duplicated
        assert_eq!(s.candidates(h(1, 7, 0)).collect::<Vec<_>>(), vec![11]);
        for sig in 1..=3 {
            s.insert(h(1, sig, 0), sig as u32);
        }
        assert_eq!(s.used(), 4);
        // full bucket: way (hash >> 32) & 3 = 2 is replaced
        s.insert(h(1, 9, 2), 99);
        assert_eq!(s.used(), 4);
        assert_eq!(s.candidates(h(1, 9, 0)).collect::<Vec<_>>(), vec![99]);
        assert_eq!(s.candidates(h(1, 2, 0)).count(), 0, "way 2 held sig 2");
        s.clear();
        assert_eq!(s.used(), 0);
    }
}
