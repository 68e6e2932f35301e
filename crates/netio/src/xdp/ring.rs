//! The four AF_XDP rings: single-producer/single-consumer arrays shared with the
//! kernel, each a producer index, a consumer index, a flags word and a power-of-two
//! array of descriptors (`xdp_desc` for RX/TX, a `u64` UMEM address for fill and
//! completion).
//!
//! Indices are free-running `u32`s (they wrap; the slot is `index & mask`). The
//! side that owns an index caches it and publishes it with a release store; the
//! other side's index is read with an acquire load only when the cached copy says
//! the ring is full (producer) or empty (consumer), as libxdp's `xsk.h` does.

use std::sync::atomic::{AtomicU32, Ordering};

/// Free slots in a ring of `size` entries (a power of two) given the two indices.
#[inline]
pub fn free_slots(size: u32, prod: u32, cons: u32) -> u32 {
    size.wrapping_sub(prod.wrapping_sub(cons))
}

/// Filled slots (entries the consumer may take) given the two indices.
#[inline]
pub fn filled_slots(prod: u32, cons: u32) -> u32 {
    prod.wrapping_sub(cons)
}

/// The raw memory of one ring: pointers into a mapping (or, in tests, into a heap
/// buffer) that outlives the ring.
pub struct RingMem<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    size: u32,
}

impl<T: Copy> RingMem<T> {
    /// # Safety
    /// `producer`, `consumer` and `flags` must point to aligned `u32`s and `descs`
    /// to `size` (a power of two) aligned `T`s, all valid for reads and writes
    /// (shared with at most one other party that follows the ring protocol) for as
    /// long as the returned value and any ring built from it live.
    pub unsafe fn new(
        producer: *mut u32,
        consumer: *mut u32,
        flags: *mut u32,
        descs: *mut T,
        size: u32,
    ) -> RingMem<T> {
        debug_assert!(size.is_power_of_two());
        RingMem {
            producer: producer as *const AtomicU32,
            consumer: consumer as *const AtomicU32,
            flags: flags as *const AtomicU32,
            descs,
            size,
        }
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: `new`'s contract: an aligned u32 valid while `self` lives;
        // AtomicU32 has the layout of u32.
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as in `prod`.
        unsafe { &*self.consumer }
    }
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as in `prod`.
        unsafe { &*self.flags }
    }
    fn read(&self, idx: u32) -> T {
        // SAFETY: `idx & (size - 1)` < size, so inside the descriptor array of
        // `new`'s contract; the slot is owned by us (between consumer and producer).
        unsafe {
            self.descs
                .add((idx & (self.size - 1)) as usize)
                .read_volatile()
        }
    }
    fn write(&self, idx: u32, v: T) {
        // SAFETY: as in `read`; the slot is free (between producer and consumer + size).
        unsafe {
            self.descs
                .add((idx & (self.size - 1)) as usize)
                .write_volatile(v)
        }
    }
}

/// A ring we produce into (fill, TX).
pub struct ProdRing<T> {
    mem: RingMem<T>,
    cached_prod: u32,
    cached_cons: u32,
}

impl<T: Copy> ProdRing<T> {
    pub fn new(mem: RingMem<T>) -> ProdRing<T> {
        let cached_prod = mem.prod().load(Ordering::Relaxed);
        let cached_cons = mem.cons().load(Ordering::Acquire);
        ProdRing {
            mem,
            cached_prod,
            cached_cons,
        }
    }
    /// Free slots; reads the consumer index only if fewer than `want` look free.
    pub fn free(&mut self, want: u32) -> u32 {
        let f = free_slots(self.mem.size, self.cached_prod, self.cached_cons);
        if f >= want {
            return f;
        }
        self.cached_cons = self.mem.cons().load(Ordering::Acquire);
        free_slots(self.mem.size, self.cached_prod, self.cached_cons)
    }
    /// Writes `v` into the next slot (not visible to the consumer before
    /// [`Self::submit`]). False if the ring is full.
    pub fn push(&mut self, v: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        self.mem.write(self.cached_prod, v);
        self.cached_prod = self.cached_prod.wrapping_add(1);
        true
    }
    /// Publishes every pushed entry (release store of the producer index).
    pub fn submit(&mut self) {
        self.mem.prod().store(self.cached_prod, Ordering::Release);
    }
    /// Entries pushed and not yet taken by the consumer (as last seen).
    pub fn in_flight(&self) -> u32 {
        filled_slots(self.cached_prod, self.cached_cons)
    }
    /// The kernel asks for a wake-up (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.mem.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// A ring we consume from (RX, completion).
pub struct ConsRing<T> {
    mem: RingMem<T>,
    cached_prod: u32,
    cached_cons: u32,
}

impl<T: Copy> ConsRing<T> {
    pub fn new(mem: RingMem<T>) -> ConsRing<T> {
        let cached_cons = mem.cons().load(Ordering::Relaxed);
        let cached_prod = mem.prod().load(Ordering::Acquire);
        ConsRing {
            mem,
            cached_prod,
            cached_cons,
        }
    }
    /// Entries available; reads the producer index only if the cache says empty.
    pub fn available(&mut self) -> u32 {
        let n = filled_slots(self.cached_prod, self.cached_cons);
        if n > 0 {
            return n;
        }
        self.cached_prod = self.mem.prod().load(Ordering::Acquire);
        filled_slots(self.cached_prod, self.cached_cons)
    }
    /// Takes the next entry (its slot is handed back at [`Self::release`]).
    pub fn pop(&mut self) -> Option<T> {
        if self.available() == 0 {
            return None;
        }
        let v = self.mem.read(self.cached_cons);
        self.cached_cons = self.cached_cons.wrapping_add(1);
        Some(v)
    }
    /// Hands every popped slot back to the producer (release store).
    pub fn release(&mut self) {
        self.mem.cons().store(self.cached_cons, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heap stand-in for a mapped ring: [producer, consumer, flags] + descriptors,
    /// reached only through raw pointers (as the kernel's side is).
    struct Fake<T> {
        idx: *mut u32,
        descs: *mut T,
        size: u32,
    }
    impl<T: Copy + Default> Fake<T> {
        fn new(size: u32, start: u32) -> Fake<T> {
            let idx = Box::into_raw(Box::new([start, start, 0u32])) as *mut u32;
            let descs = Box::into_raw(vec![T::default(); size as usize].into_boxed_slice());
            Fake {
                idx,
                descs: descs as *mut T,
                size,
            }
        }
        fn mem(&self) -> RingMem<T> {
            // SAFETY: the Fake outlives every ring in these tests; the pointers are
            // aligned and in bounds (3 u32s, `size` descriptors).
            unsafe {
                RingMem::new(
                    self.idx,
                    self.idx.add(1),
                    self.idx.add(2),
                    self.descs,
                    self.size,
                )
            }
        }
        fn idx(&self, i: usize) -> u32 {
            assert!(i < 3);
            // SAFETY: in bounds of the 3-word allocation.
            unsafe { self.idx.add(i).read_volatile() }
        }
        fn set_idx(&self, i: usize, v: u32) {
            assert!(i < 3);
            // SAFETY: in bounds of the 3-word allocation.
            unsafe { self.idx.add(i).write_volatile(v) }
        }
        fn desc(&self, slot: u32) -> T {
            assert!(slot < self.size);
            // SAFETY: in bounds of the descriptor allocation.
            unsafe { self.descs.add(slot as usize).read_volatile() }
        }
        fn set_desc(&self, slot: u32, v: T) {
            assert!(slot < self.size);
            // SAFETY: in bounds of the descriptor allocation.
            unsafe { self.descs.add(slot as usize).write_volatile(v) }
        }
    }
    impl<T> Drop for Fake<T> {
        fn drop(&mut self) {
            // SAFETY: both came from Box::into_raw in `new` with these sizes.
            unsafe {
                drop(Box::from_raw(self.idx as *mut [u32; 3]));
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.descs,
                    self.size as usize,
                )));
            }
        }
    }

    #[test]
    fn index_arithmetic_wraps() {
        assert_eq!(free_slots(8, 0, 0), 8);
        assert_eq!(free_slots(8, 5, 1), 4);
        assert_eq!(free_slots(8, 3, u32::MAX - 4), 0);
        assert_eq!(filled_slots(3, u32::MAX - 4), 8);
        assert_eq!(filled_slots(u32::MAX, u32::MAX), 0);
        assert_eq!(filled_slots(2, u32::MAX), 3);
    }

    #[test]
    fn producer_fills_publishes_and_respects_consumer() {
        // Start near the wrap so indices cross u32::MAX.
        let start = u32::MAX - 2;
        let f = Fake::<u64>::new(4, start);
        let mut r = ProdRing::new(f.mem());
        for v in 0..4u64 {
            assert!(r.push(100 + v));
        }
        assert!(!r.push(9), "full ring accepts nothing");
        // Nothing visible before submit.
        assert_eq!(f.idx(0), start);
        r.submit();
        assert_eq!(f.idx(0), start.wrapping_add(4));
        assert_eq!(r.in_flight(), 4);
        // Slots are index & mask: start & 3 == 1, so 100 sits in slot 1.
        let slots: Vec<u64> = (0..4).map(|i| f.desc(i)).collect();
        assert_eq!(slots, vec![103, 100, 101, 102]);
        // "Kernel" consumes two; the producer sees room only after re-reading.
        f.set_idx(1, start.wrapping_add(2));
        assert!(r.push(7));
        assert!(r.push(8));
        assert!(!r.push(9));
        r.submit();
        assert_eq!(f.desc(start.wrapping_add(4) & 3), 7);
    }

    #[test]
    fn consumer_sees_only_published_entries() {
        let start = u32::MAX;
        let f = Fake::<u64>::new(4, start);
        let mut r = ConsRing::new(f.mem());
        assert_eq!(r.pop(), None);
        f.set_desc(start & 3, 11);
        f.set_desc(start.wrapping_add(1) & 3, 12);
        f.set_idx(0, start.wrapping_add(2));
        assert_eq!(r.available(), 2);
        assert_eq!(r.pop(), Some(11));
        assert_eq!(r.pop(), Some(12));
        assert_eq!(r.pop(), None);
        assert_eq!(f.idx(1), start, "consumer index moves only at release");
        r.release();
        assert_eq!(f.idx(1), start.wrapping_add(2));
    }

    #[test]
    fn wakeup_flag() {
        let f = Fake::<u64>::new(2, 0);
        let r = ProdRing::new(f.mem());
        assert!(!r.needs_wakeup());
        f.set_idx(2, libc::XDP_RING_NEED_WAKEUP);
        assert!(r.needs_wakeup());
    }
}
