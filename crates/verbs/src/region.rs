//! Registered memory shared by the providers: the buffer an MR owns
//! ([`MrMem`], page-aligned, never moves) and its registration ([`MrInner`]:
//! keys, access, PD). A leaf module: the soft engine and the rdma-core provider
//! both build on it. The ownership and DMA model is described in `crate::mr`.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::AtomicU64;

use crate::types::AccessFlags;

pub(crate) struct MrMem {
    ptr: *mut u8,
    len: usize,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes owned by this struct; concurrent access goes
// through raw-pointer copies and atomics only (the DMA contract in `crate::mr`).
unsafe impl Send for MrMem {}
// SAFETY: as for Send: shared access is raw-pointer copies and atomics only.
unsafe impl Sync for MrMem {}

impl MrMem {
    pub(crate) fn new(len: usize) -> Option<MrMem> {
        let layout = Layout::from_size_align(len.max(1), 4096).ok()?;
        // SAFETY: `layout` has a non-zero size (len.max(1)); null is checked below.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        Some(MrMem { ptr, len, layout })
    }
}

impl Drop for MrMem {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated in `new` with exactly this layout and is freed
        // only here, once (MrMem is not Clone).
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

pub(crate) struct MrInner {
    pub(crate) mem: MrMem,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: AccessFlags,
    pub(crate) pd: u32,
    /// Invalidated by a peer's SEND with Invalidate (IETH): no remote access any more.
    pub(crate) remote_invalid: std::sync::atomic::AtomicBool,
}

impl MrInner {
    pub(crate) fn addr(&self) -> u64 {
        self.mem.ptr as u64
    }
    /// The buffer's first byte (valid for `len()` bytes while `self` lives).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.mem.len
    }
    /// Offset of `[va, va+len)` inside the buffer, if wholly inside.
    pub(crate) fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let off = va.checked_sub(self.addr())?;
        if off.checked_add(len)? <= self.mem.len as u64 {
            Some(off as usize)
        } else {
            None
        }
    }
    /// Copies `src` into the buffer at `off`. Caller checked bounds.
    pub(crate) fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.mem.len);
        // SAFETY: bounds checked; `src` cannot overlap (it is not MR memory
        // handed out by safe code; the engine copies between MR and packet buffers).
        unsafe { std::ptr::copy(src.as_ptr(), self.mem.ptr.add(off), src.len()) }
    }
    /// Copies out of the buffer at `off` into `dst`. Caller checked bounds.
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.mem.len);
        // SAFETY: `off + dst.len() <= len` (asserted above), so the source range
        // lies inside the live allocation; `ptr::copy` tolerates overlap.
        unsafe { std::ptr::copy(self.mem.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }
    /// The 64-bit atomic at `off` (8-aligned, checked by the caller).
    pub(crate) fn atomic(&self, off: usize) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.mem.len);
        // SAFETY: in bounds, 8-aligned (the buffer is page-aligned), lives as long as self.
        unsafe { &*(self.mem.ptr.add(off) as *const AtomicU64) }
    }
}
