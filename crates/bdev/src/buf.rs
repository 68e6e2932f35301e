//! I/O buffers: the ownership model.
//!
//! A [`BdevIo`](crate::BdevIo) *owns* its data buffers for its whole life: the
//! caller moves the buffers into the I/O at submit time and gets them back, with
//! the I/O, from [`IoChannel::poll`](crate::IoChannel::poll). Nothing else can
//! touch the memory while the device (a memcpy, or the kernel through io_uring)
//! is using it, so there is no `unsafe` contract for callers and no lifetime to
//! thread through a poller. A caller that keeps a pool of `Vec<u8>` (the NVMe/TCP
//! target keeps one per connection) moves a pooled vector in, and takes the same
//! allocation back out: no copy and, in steady state, no allocation.
//!
//! [`IoBuf`] is either a plain `Vec<u8>` or an [`AlignedBuf`] (for O_DIRECT,
//! which needs addresses and lengths aligned to the logical block size). Devices
//! that need alignment bounce unaligned `Vec` buffers through an aligned copy; so
//! alignment is an optimisation, never a correctness requirement.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// One data buffer of an I/O (one iovec).
#[derive(Debug)]
pub enum IoBuf {
    /// An ordinary heap vector (its `len()` is the iovec length).
    Vec(Vec<u8>),
    /// A buffer with a guaranteed start alignment.
    Aligned(AlignedBuf),
}

impl IoBuf {
    /// A zero-filled `Vec` buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        IoBuf::Vec(vec![0; len])
    }
    /// A zero-filled buffer of `len` bytes aligned to `align` (a power of two).
    pub fn aligned(len: usize, align: usize) -> Self {
        IoBuf::Aligned(AlignedBuf::zeroed(len, align))
    }
    /// Take the bytes back as a `Vec` (free for the `Vec` variant; copies an
    /// aligned buffer).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            IoBuf::Vec(v) => v,
            IoBuf::Aligned(a) => a.to_vec(),
        }
    }
    /// Whether the start address is a multiple of `align`.
    pub fn is_aligned_to(&self, align: usize) -> bool {
        align <= 1 || (self.as_ptr() as usize).is_multiple_of(align)
    }
}

impl From<Vec<u8>> for IoBuf {
    fn from(v: Vec<u8>) -> Self {
        IoBuf::Vec(v)
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            IoBuf::Vec(v) => v,
            IoBuf::Aligned(a) => a,
        }
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            IoBuf::Vec(v) => v,
            IoBuf::Aligned(a) => a,
        }
    }
}

/// A zero-initialised heap buffer whose start is aligned to a power of two.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf uniquely owns its allocation (like Vec<u8>), so moving it to
// another thread or sharing `&AlignedBuf` (read-only access to bytes) is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: see above; `&AlignedBuf` only gives `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes aligned to `align` (rounded up to a power of two, at least 1).
    ///
    /// # Panics
    /// If the size overflows `isize` (as `Vec` would), or on allocation failure
    /// (through `handle_alloc_error`, as `Vec` does).
    pub fn zeroed(len: usize, align: usize) -> Self {
        let align = align.max(1).next_power_of_two();
        // A zero-size layout may not be allocated; allocate at least one byte.
        let layout =
            Layout::from_size_align(len.max(1), align).expect("buffer size overflows isize");
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = match NonNull::new(p) {
            Some(p) => p,
            None => alloc::handle_alloc_error(layout),
        };
        AlignedBuf { ptr, len, layout }
    }
    /// The alignment guaranteed for the start address.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() >= len initialised (zeroed) bytes,
        // uniquely owned, and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned() {
        for align in [1usize, 512, 4096] {
            let mut b = IoBuf::aligned(8192, align);
            assert!(b.is_aligned_to(align));
            assert_eq!(b.len(), 8192);
            assert!(b.iter().all(|&x| x == 0));
            b[100] = 7;
            assert_eq!(b.into_vec()[100], 7);
        }
        let z = AlignedBuf::zeroed(0, 4096);
        assert!(z.is_empty());
    }

    #[test]
    fn vec_round_trip_keeps_allocation() {
        let v = vec![1u8; 4096];
        let p = v.as_ptr();
        let b = IoBuf::from(v);
        assert_eq!(b.as_ptr(), p);
        let back = b.into_vec();
        assert_eq!(back.as_ptr(), p);
    }
}
