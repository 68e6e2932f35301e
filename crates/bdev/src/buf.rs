//! I/O buffers: the ownership model.
//!
//! A [`BdevIo`](crate::BdevIo) *owns* its data buffers for its whole life: the
//! caller moves the buffers into the I/O at submit time and gets them back, with
//! the I/O, from [`IoChannel::poll`](crate::IoChannel::poll). Nothing else can
//! touch the memory while the device (a memcpy, or the kernel through io_uring)
//! is using it, so there is no `unsafe` contract for callers and no lifetime to
//! thread through a poller (only implementers of [`ExternalBuf`] promise, in an
//! `unsafe impl`, that their memory stays put). A caller that keeps a pool of `Vec<u8>` (the NVMe/TCP
//! target keeps one per connection) moves a pooled vector in, and takes the same
//! allocation back out: no copy and, in steady state, no allocation.
//!
//! [`IoBuf`] is a plain `Vec<u8>`, an [`AlignedBuf`] (for O_DIRECT, which needs
//! addresses and lengths aligned to the logical block size), or memory that
//! belongs to someone else ([`ExternalBuf`]: a transport's registered memory, so
//! that an RDMA NIC can READ/WRITE straight into the bdev I/O's buffer). Devices
//! that need alignment bounce unaligned buffers through an aligned copy; so
//! alignment is an optimisation, never a correctness requirement.
//!
//! An external buffer travels as `Box<dyn ExternalBuf>`: its owner keeps the
//! boxes in a pool and gets its own type back with [`IoBuf::into_external`] and
//! `into_any` + `downcast`, so moving one through an I/O allocates nothing.

use std::alloc::{self, Layout};
use std::any::Any;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// One data buffer of an I/O (one iovec).
#[derive(Debug)]
pub enum IoBuf {
    /// An ordinary heap vector (its `len()` is the iovec length).
    Vec(Vec<u8>),
    /// A buffer with a guaranteed start alignment.
    Aligned(AlignedBuf),
    /// Memory owned by someone else (a transport's registered memory).
    External(Box<dyn ExternalBuf>),
}

/// Memory that an I/O borrows from its owner for the I/O's lifetime, e.g. a slice
/// of an RDMA memory region that a NIC reads or writes directly.
///
/// # Safety
///
/// Devices hand the address of these bytes to the kernel (io_uring) and rely on
/// it while the I/O is in flight, so an implementation must guarantee that
/// `as_slice` and `as_mut_slice` always return the same memory (same address and
/// length) for as long as the value lives, that this memory stays valid until the
/// value is dropped, and that nothing else writes it while the value is alive.
pub unsafe trait ExternalBuf: Send + std::fmt::Debug + 'static {
    fn as_slice(&self) -> &[u8];
    fn as_mut_slice(&mut self) -> &mut [u8];
    /// The owner's own type back (`downcast` it) when the I/O returns.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
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
    /// aligned or external buffer).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            IoBuf::Vec(v) => v,
            IoBuf::Aligned(a) => a.to_vec(),
            IoBuf::External(e) => e.as_slice().to_vec(),
        }
    }
    /// The external buffer, or `self` back if it is not one.
    pub fn into_external(self) -> Result<Box<dyn ExternalBuf>, IoBuf> {
        match self {
            IoBuf::External(e) => Ok(e),
            other => Err(other),
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
            IoBuf::External(e) => e.as_slice(),
        }
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            IoBuf::Vec(v) => v,
            IoBuf::Aligned(a) => a,
            IoBuf::External(e) => e.as_mut_slice(),
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
    /// Bytes allocated (at least `len`): [`AlignedBuf::set_len`] may grow
    /// the buffer up to this without reallocating.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }
    /// Makes the buffer `len` bytes long, keeping its allocation (a staging
    /// buffer reused for I/Os of different sizes). Bytes that come into view
    /// hold what they held before (zeroes if never written).
    ///
    /// # Panics
    /// If `len` exceeds [`AlignedBuf::capacity`].
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "set_len beyond the allocation");
        self.len = len;
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
        // a reused staging buffer: shorter and longer within its allocation
        let mut s = AlignedBuf::zeroed(8192, 4096);
        s[8000] = 9;
        s.set_len(4096);
        assert_eq!(s.len(), 4096);
        s.set_len(8192);
        assert_eq!(s[8000], 9);
        assert!(s.capacity() >= 8192);
        assert!(std::panic::catch_unwind(move || s.set_len(8193)).is_err());
    }

    /// An owner's buffer: a fixed heap slice that is never resized.
    #[derive(Debug)]
    struct Owned(Box<[u8]>);
    // SAFETY: the boxed slice is never reallocated or shared, so both accessors
    // return the same memory for the value's whole life.
    unsafe impl ExternalBuf for Owned {
        fn as_slice(&self) -> &[u8] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [u8] {
            &mut self.0
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    #[test]
    fn external_buffer_goes_through_malloc_io_and_comes_back() {
        use crate::{BdevIo, BlockDevice};
        let d = crate::malloc::MallocBdev::new("m", 16, 512).unwrap();
        let mut ch = d.open_channel().unwrap();
        let ext = Box::new(Owned(vec![0x6bu8; 1024].into_boxed_slice()));
        let p = ext.0.as_ptr();
        ch.submit(BdevIo::write(2, 2, vec![IoBuf::External(ext)], 1))
            .unwrap();
        let mut done = Vec::new();
        while done.is_empty() {
            ch.poll(&mut done);
        }
        let mut io = done.pop().unwrap();
        assert!(io.is_success());
        // the owner gets its own allocation back
        let back = io.bufs.pop().unwrap().into_external().unwrap();
        let back = back.into_any().downcast::<Owned>().unwrap();
        assert_eq!(back.0.as_ptr(), p);
        // and a read into an external buffer sees the data
        let ext = Box::new(Owned(vec![0u8; 512].into_boxed_slice()));
        ch.submit(BdevIo::read(3, 1, vec![IoBuf::External(ext)], 2))
            .unwrap();
        let mut done = Vec::new();
        while done.is_empty() {
            ch.poll(&mut done);
        }
        assert!(done[0].bufs[0].iter().all(|&b| b == 0x6b));
        assert!(IoBuf::zeroed(4).into_external().is_err());
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
