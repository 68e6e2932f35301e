//! The memory model seen by the PRP and SGL builders and walkers.
//!
//! NVMe data pointers name addresses in some address space (host memory on PCIe,
//! an offset into a capsule or a remote key on fabrics). PRP lists and SGL segments
//! themselves live in that memory, so walking them needs to read it. The
//! [`GuestMemory`] trait is that access; [`FakeMemory`] is a sparse in-process
//! address space for tests and simulations.

use std::collections::BTreeMap;

/// One contiguous piece of a data buffer in the command's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IoVec {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

impl IoVec {
    pub const fn new(addr: u64, len: u64) -> Self {
        IoVec { addr, len }
    }
    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.addr.saturating_add(self.len)
    }
}

/// Total length of a list of iovecs.
pub fn total_len(iov: &[IoVec]) -> u64 {
    iov.iter().map(|v| v.len).sum()
}

/// Merge adjacent iovecs (`a.end() == b.addr`) and drop empty ones.
pub fn merge_adjacent(iov: &[IoVec]) -> Vec<IoVec> {
    let mut out: Vec<IoVec> = Vec::with_capacity(iov.len());
    for v in iov.iter().filter(|v| v.len > 0) {
        match out.last_mut() {
            Some(last) if last.end() == v.addr => last.len += v.len,
            _ => out.push(*v),
        }
    }
    out
}

/// Access failure in a [`GuestMemory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MemoryError {
    /// The range is not backed by memory.
    #[error("address {addr:#x} (+{len}) is not mapped")]
    Unmapped { addr: u64, len: usize },
    /// No memory is left to allocate a list page or segment.
    #[error("out of list memory")]
    OutOfMemory,
}

/// Read access to the address space that PRP lists and SGL segments live in.
pub trait GuestMemory {
    /// Fill `buf` from `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;
}

/// Write access plus allocation of list pages / segments, for the builders.
pub trait GuestMemoryMut: GuestMemory {
    /// Write `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError>;
    /// Allocate `len` bytes aligned to `align` (a power of two) for a PRP list page
    /// or an SGL segment; return its address.
    fn alloc(&mut self, len: usize, align: u64) -> Result<u64, MemoryError>;
}

/// A byte slice seen as an address space starting at 0: in-capsule data and
/// in-capsule SGL segments (Offset subtype) on fabrics.
#[derive(Debug, Clone, Copy)]
pub struct SliceMemory<'a>(pub &'a [u8]);

impl GuestMemory for SliceMemory<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let err = MemoryError::Unmapped {
            addr,
            len: buf.len(),
        };
        let start = usize::try_from(addr).map_err(|_| err)?;
        let end = start.checked_add(buf.len()).ok_or(err)?;
        let src = self.0.get(start..end).ok_or(err)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A growable byte vector as address space 0..len: `alloc` appends. Used to lay
/// out in-capsule SGL segments (Offset subtype) when building a fabrics command;
/// the receiver walks them with [`SliceMemory`] over the capsule data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VecMemory(pub Vec<u8>);

impl GuestMemory for VecMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        SliceMemory(&self.0).read(addr, buf)
    }
}

impl GuestMemoryMut for VecMemory {
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        let err = MemoryError::Unmapped {
            addr,
            len: data.len(),
        };
        let start = usize::try_from(addr).map_err(|_| err)?;
        let end = start.checked_add(data.len()).ok_or(err)?;
        self.0.get_mut(start..end).ok_or(err)?.copy_from_slice(data);
        Ok(())
    }
    fn alloc(&mut self, len: usize, align: u64) -> Result<u64, MemoryError> {
        let align = usize::try_from(align.max(1)).map_err(|_| MemoryError::OutOfMemory)?;
        let start = self.0.len().div_ceil(align) * align;
        self.0.resize(start + len, 0);
        Ok(start as u64)
    }
}

/// A sparse address space made of 4 KiB frames, created on write. Reads of
/// never-written frames fail unless `zero_fill_reads` is set.
#[derive(Debug, Clone)]
pub struct FakeMemory {
    frames: BTreeMap<u64, Box<[u8; FRAME]>>,
    next_alloc: u64,
    /// Reads of unwritten memory return zeroes instead of failing.
    pub zero_fill_reads: bool,
}

const FRAME: usize = 4096;

impl Default for FakeMemory {
    fn default() -> Self {
        FakeMemory::new(0x7000_0000_0000)
    }
}

impl FakeMemory {
    /// An empty space whose allocator hands out addresses from `alloc_base` upwards.
    pub fn new(alloc_base: u64) -> Self {
        FakeMemory {
            frames: BTreeMap::new(),
            next_alloc: alloc_base,
            zero_fill_reads: false,
        }
    }
    /// Number of 4 KiB frames touched.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }
}

impl GuestMemory for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.checked_add(done as u64).ok_or(MemoryError::Unmapped {
                addr,
                len: buf.len(),
            })?;
            let frame = a & !(FRAME as u64 - 1);
            let off = (a - frame) as usize;
            let n = (FRAME - off).min(buf.len() - done);
            match self.frames.get(&frame) {
                Some(f) => buf[done..done + n].copy_from_slice(&f[off..off + n]),
                None if self.zero_fill_reads => buf[done..done + n].fill(0),
                None => {
                    return Err(MemoryError::Unmapped {
                        addr,
                        len: buf.len(),
                    })
                }
            }
            done += n;
        }
        Ok(())
    }
}

impl GuestMemoryMut for FakeMemory {
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr.checked_add(done as u64).ok_or(MemoryError::Unmapped {
                addr,
                len: data.len(),
            })?;
            let frame = a & !(FRAME as u64 - 1);
            let off = (a - frame) as usize;
            let n = (FRAME - off).min(data.len() - done);
            let f = self
                .frames
                .entry(frame)
                .or_insert_with(|| Box::new([0; FRAME]));
            f[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn alloc(&mut self, len: usize, align: u64) -> Result<u64, MemoryError> {
        let align = align.max(1);
        let a = self
            .next_alloc
            .checked_add(align - 1)
            .ok_or(MemoryError::OutOfMemory)?
            & !(align - 1);
        self.next_alloc = a.checked_add(len as u64).ok_or(MemoryError::OutOfMemory)?;
        // Touch the range so that reads succeed.
        let zeros = vec![0u8; len];
        self.write(a, &zeros)?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_memory_rw() {
        let mut m = FakeMemory::new(0x10000);
        m.write(0xffe, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 4];
        m.read(0xffe, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(m.read(0x5000, &mut b).is_err());
        let a = m.alloc(100, 4096).unwrap();
        assert_eq!(a % 4096, 0);
        let c = m.alloc(16, 16).unwrap();
        assert!(c >= a + 100);
        m.read(a, &mut b).unwrap();
    }

    #[test]
    fn slice_memory() {
        let data = [1u8, 2, 3, 4, 5];
        let m = SliceMemory(&data);
        let mut b = [0u8; 2];
        m.read(3, &mut b).unwrap();
        assert_eq!(b, [4, 5]);
        assert!(m.read(4, &mut b).is_err());
        assert!(m.read(u64::MAX, &mut b).is_err());
    }

    #[test]
    fn merge() {
        let v = merge_adjacent(&[
            IoVec::new(0, 10),
            IoVec::new(10, 5),
            IoVec::new(20, 0),
            IoVec::new(30, 1),
        ]);
        assert_eq!(v, vec![IoVec::new(0, 15), IoVec::new(30, 1)]);
        assert_eq!(total_len(&v), 16);
    }
}
