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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::device::Pd;
use crate::provider::{MrImpl, PdImpl};
use crate::soft::provider as sp;
use crate::types::AccessFlags;

/// A registered memory region (`ibv_mr`). Cloning shares the same registration;
/// it is deregistered when the last handle is dropped (see [`Mr::dereg`]).
#[derive(Clone)]
pub struct Mr(Arc<MrReg>);

struct MrReg {
    // dropped first: the registration goes before the PD it holds
    imp: MrImpl,
    _pd: Pd,
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

impl Pd {
    /// `ibv_reg_mr`: allocates and registers `len` bytes (the MR owns them; see
    /// [`crate::mr`]).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> crate::Result<Mr> {
        let imp = match &self.inner().imp {
            PdImpl::Soft(p) => MrImpl::Soft(sp::reg_mr(p, len, access)?),
            #[cfg(feature = "rdma-core")]
            PdImpl::RdmaCore(p) => {
                MrImpl::RdmaCore(crate::rdma_core::provider::reg_mr(p, len, access)?)
            }
        };
        Ok(Mr(Arc::new(MrReg {
            imp,
            _pd: self.clone(),
        })))
    }
}

impl Mr {
    /// The registration: keys and the buffer the MR owns (both providers
    /// keep the same kind; rdma-core's is registered in place with the NIC).
    fn soft(&self) -> &crate::region::MrInner {
        match &self.0.imp {
            MrImpl::Soft(m) => &m.inner,
            #[cfg(feature = "rdma-core")]
            MrImpl::RdmaCore(m) => &m.inner,
        }
    }

    pub fn addr(&self) -> u64 {
        self.soft().addr()
    }
    pub fn len(&self) -> usize {
        self.soft().len()
    }
    pub fn is_empty(&self) -> bool {
        self.soft().len() == 0
    }
    pub fn lkey(&self) -> u32 {
        self.soft().lkey
    }
    pub fn rkey(&self) -> u32 {
        self.soft().rkey
    }
    pub fn access(&self) -> AccessFlags {
        self.soft().access
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
            self.soft().copy_in(off, src);
            true
        } else {
            false
        }
    }
    /// Copies from the region at `off` into `dst`; false if out of bounds.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if off.checked_add(dst.len()).is_some_and(|e| e <= self.len()) {
            self.soft().copy_out(off, dst);
            true
        } else {
            false
        }
    }
    /// Reads the whole region into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        self.soft().copy_out(0, &mut v);
        v
    }
    /// The 64-bit word at `off` (8-aligned), read atomically.
    pub fn load_u64(&self, off: usize) -> Option<u64> {
        (off & 7 == 0 && off + 8 <= self.len())
            .then(|| self.soft().atomic(off).load(Ordering::SeqCst))
    }
    /// # Safety
    /// No posted operation and no remote peer may write these bytes while the
    /// slice lives (the usual RDMA buffer-ownership rule).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the pointer is this MR's allocation of `len()` bytes, alive as
        // long as `self` (which holds it); no concurrent writer by the caller's
        // contract above.
        unsafe { std::slice::from_raw_parts(self.soft().as_ptr(), self.len()) }
    }
    /// # Safety
    /// As [`Mr::as_slice`], and no other slice of this MR may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the pointer is this MR's allocation of `len()` bytes, alive as
        // long as `self`; exclusive by the caller's contract above.
        unsafe { std::slice::from_raw_parts_mut(self.soft().as_ptr(), self.len()) }
    }
    /// `ibv_dereg_mr`: the keys stop working at once; the memory is freed when
    /// the last in-flight operation using it is gone. `EBUSY` while other
    /// handles (clones) share the registration: it then ends with the last one.
    pub fn dereg(self) -> crate::Result<()> {
        match Arc::try_unwrap(self.0) {
            Ok(reg) => {
                drop(reg);
                Ok(())
            }
            Err(_) => Err(crate::Error::Busy),
        }
    }
}
