//! Registered buffers: one MR per buffer, kept by power-of-two size class and
//! reused, so registration happens only while a class grows (the first I/Os of a
//! size), never in steady state. [`RdmaBuf`] is such a buffer lent to the core as
//! `bdev::IoBuf::External` (bdev I/O into registered memory, no copy).

// The one unsafe use in this module: `ExternalBuf` (an unsafe trait: the memory
// stays at one address while the value lives) and the slices over the MR.
#![allow(unsafe_code)]

use std::any::Any;
use std::sync::Arc;

use super::RdmaCounters;

use bdev::{ExternalBuf, IoBuf};
use verbs::{AccessFlags, Mr, Pd};

/// Smallest class (4 KiB).
const MIN_SHIFT: u32 = 12;

/// A registered buffer of `len` bytes (its MR may be larger: the class size).
#[derive(Debug)]
pub struct RdmaBuf {
    mr: Mr,
    len: usize,
    counters: Arc<RdmaCounters>,
}

impl Drop for RdmaBuf {
    fn drop(&mut self) {
        RdmaCounters::add(&self.counters.mrs, -1);
    }
}

impl RdmaBuf {
    pub fn mr(&self) -> &Mr {
        &self.mr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// An SGE over the buffer's `len` bytes.
    pub fn sge(&self) -> verbs::Sge {
        self.mr.sge(0, self.len as u32)
    }
}

// SAFETY: the MR owns its allocation (verbs::mr: page-aligned, never moves, freed
// with the last handle, which this value holds), so the address is stable for the
// value's life. The transports register these MRs without remote access when lent
// to the core (target) and post local operations on one only while no `IoBuf`
// holds it: a READ completes before the buffer is handed over, a WRITE is posted
// after the core gave it back in `complete`. So no one else touches the bytes
// while a slice of them exists.
unsafe impl ExternalBuf for RdmaBuf {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: see the impl's comment: exclusive while lent; len <= mr.len().
        unsafe { &self.mr.as_slice()[..self.len] }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only slice.
        unsafe { &mut self.mr.as_mut_slice()[..self.len] }
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Counters of a pool (for the "qpair closed" line and leak checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// MRs registered (ever).
    pub registered: u64,
    /// Buffers lent out now.
    pub outstanding: u64,
}

/// Registered buffers by size class.
pub struct BufPool {
    pd: Pd,
    access: AccessFlags,
    max_len: usize,
    /// Boxed on purpose: the box goes into `IoBuf::External` and comes back, so
    /// lending a buffer allocates nothing.
    #[allow(clippy::vec_box)]
    free: Vec<Vec<Box<RdmaBuf>>>,
    stats: PoolStats,
    counters: Arc<RdmaCounters>,
}

impl BufPool {
    /// Buffers up to `max_len` bytes on `pd` with `access`.
    pub fn new(pd: &Pd, access: AccessFlags, max_len: usize, counters: Arc<RdmaCounters>) -> Self {
        let classes = class_of(max_len.max(1)) + 1;
        BufPool {
            pd: pd.clone(),
            access,
            max_len,
            free: (0..classes).map(|_| Vec::new()).collect(),
            stats: PoolStats::default(),
            counters,
        }
    }

    /// A buffer of `len` bytes (≤ max_len), from the free list or newly
    /// registered; `None` if registration failed or len is too large.
    pub fn get(&mut self, len: usize) -> Option<Box<RdmaBuf>> {
        if len > self.max_len {
            return None;
        }
        let c = class_of(len.max(1));
        let mut b = match self.free[c].pop() {
            Some(b) => b,
            None => {
                let mr = self
                    .pd
                    .reg_mr(1 << (c as u32 + MIN_SHIFT), self.access)
                    .ok()?;
                self.stats.registered += 1;
                RdmaCounters::add(&self.counters.mrs, 1);
                Box::new(RdmaBuf {
                    mr,
                    len,
                    counters: self.counters.clone(),
                })
            }
        };
        b.len = len;
        self.stats.outstanding += 1;
        RdmaCounters::add(&self.counters.bufs_lent, 1);
        Some(b)
    }

    /// Back to its class (the box too: no allocation per I/O).
    pub fn put(&mut self, b: Box<RdmaBuf>) {
        let c = class_of(b.mr.len());
        self.stats.outstanding = self.stats.outstanding.saturating_sub(1);
        RdmaCounters::add(&self.counters.bufs_lent, -1);
        if let Some(l) = self.free.get_mut(c) {
            l.push(b);
        }
    }

    /// The registered buffer inside `b`, if it is one of ours; else `b` back
    /// (an `IoBuf::Vec`: admin pages, or another owner's external buffer).
    pub fn own(b: IoBuf) -> Result<Box<RdmaBuf>, IoBuf> {
        match b.into_external() {
            Ok(e) => match e.into_any().downcast::<RdmaBuf>() {
                Ok(r) => Ok(r),
                Err(_) => Err(IoBuf::Vec(Vec::new())), // not ours: dropped
            },
            Err(b) => Err(b),
        }
    }

    /// Takes back an `IoBuf` if it is one of ours; drops anything else.
    pub fn put_iobuf(&mut self, b: IoBuf) {
        if let Ok(r) = Self::own(b) {
            self.put(r);
        }
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("max_len", &self.max_len)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Size class: 0 = 4 KiB, 1 = 8 KiB, ...
fn class_of(len: usize) -> usize {
    let bits = usize::BITS - (len.max(1) - 1).leading_zeros();
    bits.saturating_sub(MIN_SHIFT) as usize
}

#[cfg(test)]
mod tests {
    use super::class_of;

    #[test]
    fn classes() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(4096), 0);
        assert_eq!(class_of(4097), 1);
        assert_eq!(class_of(8192), 1);
        assert_eq!(class_of(1 << 20), 8);
    }
}
