//! Registered memory.
//!
//! # Ownership model
//! A memory region **owns** its buffer: [`crate::Pd::reg_mr`] allocates `len`
//! page-aligned, zeroed bytes that never move and live until the last handle
//! (the user's [`Mr`] or an in-flight operation of the engine) is dropped, so a
//! remote peer can never write into freed memory, even after `dereg_mr`.
//!
//! Like a NIC's DMA, the engine reads and writes the buffer while the application
//! may also be using it. Therefore safe code never gets a `&[u8]`/`&mut [u8]` to
//! the bytes: it copies in and out with [`Mr::read`]/[`Mr::write`] (which copy
//! through raw pointers, never forming references, as `vm-memory`'s volatile
//! slices do) or borrows them explicitly with the `unsafe` [`Mr::as_slice`] /
//! [`Mr::as_mut_slice`], whose contract is the RDMA one: do not touch bytes that
//! a posted operation or a remote peer with the rkey may be accessing.
//! Atomic operations use real 64-bit atomics on the buffer.
//!
//! Virtual addresses are the buffer's own addresses (`Mr::addr`), exactly as with
//! rdma-core where `iova == addr`, so peers use them in RETH/AtomicETH.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::types::AccessFlags;

pub(crate) struct MrMem {
    ptr: *mut u8,
    len: usize,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes owned by this struct; concurrent access goes
// through raw-pointer copies and atomics only (the DMA contract documented above).
unsafe impl Send for MrMem {}
// SAFETY: see above.
unsafe impl Sync for MrMem {}

impl MrMem {
    pub(crate) fn new(len: usize) -> Option<MrMem> {
        let layout = Layout::from_size_align(len.max(1), 4096).ok()?;
        // SAFETY: non-zero size layout.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        Some(MrMem { ptr, len, layout })
    }
}

impl Drop for MrMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

pub(crate) struct MrInner {
    pub(crate) mem: MrMem,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: AccessFlags,
    pub(crate) pd: u32,
}

impl MrInner {
    pub(crate) fn addr(&self) -> u64 {
        self.mem.ptr as u64
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
        // SAFETY: bounds checked.
        unsafe { std::ptr::copy(self.mem.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }
    /// The 64-bit atomic at `off` (8-aligned, checked by the caller).
    pub(crate) fn atomic(&self, off: usize) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.mem.len);
        // SAFETY: in bounds, 8-aligned (the buffer is page-aligned), lives as long as self.
        unsafe { &*(self.mem.ptr.add(off) as *const AtomicU64) }
    }
}

/// A registered memory region (`ibv_mr`). Cloning shares the same registration.
#[derive(Clone)]
pub struct Mr {
    pub(crate) inner: Arc<MrInner>,
    pub(crate) dev: std::sync::Weak<crate::device::Shared>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Mr(addr={:#x} len={} lkey={:#x} rkey={:#x})",
            self.addr(),
            self.len(),
            self.lkey(),
            self.rkey()
        )
    }
}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }
    pub fn len(&self) -> usize {
        self.inner.len()
    }
    pub fn is_empty(&self) -> bool {
        self.inner.len() == 0
    }
    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.inner.rkey
    }
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }
    /// An SGE over `[off, off+len)` of this MR.
    pub fn sge(&self, off: usize, len: u32) -> crate::Sge {
        crate::Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.lkey(),
        }
    }
    /// Copies `src` into the region at `off`; false if out of bounds.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if off.checked_add(src.len()).is_some_and(|e| e <= self.len()) {
            self.inner.copy_in(off, src);
            true
        } else {
            false
        }
    }
    /// Copies from the region at `off` into `dst`; false if out of bounds.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if off.checked_add(dst.len()).is_some_and(|e| e <= self.len()) {
            self.inner.copy_out(off, dst);
            true
        } else {
            false
        }
    }
    /// Reads the whole region into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        self.inner.copy_out(0, &mut v);
        v
    }
    /// The 64-bit word at `off` (8-aligned), read atomically.
    pub fn load_u64(&self, off: usize) -> Option<u64> {
        (off & 7 == 0 && off + 8 <= self.len())
            .then(|| self.inner.atomic(off).load(Ordering::SeqCst))
    }
    /// # Safety
    /// No posted operation and no remote peer may write these bytes while the
    /// slice lives (the usual RDMA buffer-ownership rule).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts(self.inner.mem.ptr, self.len()) }
    }
    /// # Safety
    /// As [`Mr::as_slice`], and no other slice of this MR may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.inner.mem.ptr, self.len()) }
    }
    /// `ibv_dereg_mr`: the keys stop working at once; the memory is freed when
    /// the last handle (including in-flight operations) is gone.
    pub fn dereg(self) -> crate::Result<()> {
        if let Some(d) = self.dev.upgrade() {
            d.lock().engine.mrs.remove(self.inner.lkey);
        }
        Ok(())
    }
}

/// Key → MR table. Keys are `index << 8 | tag`; the tag changes on reuse so a
/// stale key never reaches a new registration.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Option<Arc<MrInner>>>,
    tags: Vec<u8>,
    free: Vec<usize>,
}

impl MrTable {
    pub(crate) fn alloc_key(&mut self) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.tags.push(0);
                self.slots.len() - 1
            }
        };
        self.tags[i] = self.tags[i].wrapping_add(1);
        ((i as u32 + 1) << 8) | self.tags[i] as u32
    }
    pub(crate) fn insert(&mut self, mr: Arc<MrInner>) {
        let i = (mr.lkey >> 8) as usize - 1;
        self.slots[i] = Some(mr);
    }
    pub(crate) fn get(&self, key: u32) -> Option<&Arc<MrInner>> {
        let i = ((key >> 8) as usize).checked_sub(1)?;
        self.slots.get(i)?.as_ref().filter(|m| m.lkey == key)
    }
    pub(crate) fn remove(&mut self, key: u32) {
        if self.get(key).is_some() {
            let i = (key >> 8) as usize - 1;
            self.slots[i] = None;
            self.free.push(i);
        }
    }
}
