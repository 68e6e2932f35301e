//! One entry point from an SQE's data pointer to the list of pieces it
//! describes, whichever of PRP or SGL it uses (PSDT decides), with the total
//! length checked against the command's transfer length.

use crate::cmd::Psdt;
use crate::memory::{GuestMemory, IoVec};
use crate::prp::{self, PrpError};
use crate::sgl::{self, SglEntry, SglError};
use crate::status::{GenericStatus, Status};
use crate::Sqe;

/// Why a data pointer could not be turned into pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DataPtrError {
    #[error("PSDT is reserved (11b)")]
    PsdtReserved,
    #[error("PRP: {0}")]
    Prp(#[from] PrpError),
    #[error("SGL: {0}")]
    Sgl(#[from] SglError),
    /// The SGL describes fewer bytes than the command transfers.
    #[error("SGL describes {described} bytes, the command transfers {expected}")]
    Length { described: u64, expected: u64 },
}

impl DataPtrError {
    /// The NVMe status for this error.
    pub fn status(&self) -> Status {
        match self {
            DataPtrError::PsdtReserved => Status::generic(GenericStatus::InvalidField),
            DataPtrError::Prp(e) => e.status(),
            DataPtrError::Sgl(e) => e.status(),
            DataPtrError::Length { .. } => Status::generic(GenericStatus::DataSglLengthInvalid),
        }
    }
}

/// Walk the data pointer of `sqe` for a transfer of `len` bytes.
///
/// PRPs come back as `SglEntry::Data` pieces; SGLs as their entries, truncated to
/// `len` (a longer SGL is allowed, the excess is not transferred; a shorter one
/// is [`DataPtrError::Length`]). `page_size` is the PRP memory page size
/// (CC.MPS); `max_descriptors` bounds the SGL walk.
pub fn walk(
    sqe: &Sqe,
    len: u64,
    page_size: u64,
    mem: &impl GuestMemory,
    max_descriptors: usize,
) -> Result<Vec<SglEntry>, DataPtrError> {
    match sqe.psdt() {
        Psdt::Reserved => Err(DataPtrError::PsdtReserved),
        Psdt::Prp => Ok(prp::walk(sqe.prp1(), sqe.prp2(), len, page_size, mem)?
            .into_iter()
            .map(SglEntry::data)
            .collect()),
        Psdt::SglMptrContig | Psdt::SglMptrSgl => {
            let entries = sgl::walk(&sqe.sgl1(), mem, max_descriptors)?;
            let described: u64 = entries.iter().map(SglEntry::len).sum();
            if described < len {
                return Err(DataPtrError::Length {
                    described,
                    expected: len,
                });
            }
            Ok(truncate(entries, len))
        }
    }
}

/// Keep the first `len` bytes of a list of entries.
pub fn truncate(entries: Vec<SglEntry>, len: u64) -> Vec<SglEntry> {
    let mut left = len;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        if left == 0 {
            break;
        }
        let n = e.len().min(left);
        left -= n;
        out.push(match e {
            SglEntry::Data { addr, offset, .. } => SglEntry::Data {
                addr,
                len: n,
                offset,
            },
            SglEntry::BitBucket { .. } => SglEntry::BitBucket { len: n },
            SglEntry::Keyed {
                addr,
                key,
                invalidate,
                ..
            } => SglEntry::Keyed {
                addr,
                len: n,
                key,
                invalidate,
            },
            SglEntry::Transport { .. } => SglEntry::Transport { len: n },
        });
    }
    out
}

/// Walk the data pointer and return plain buffers (PRP, or SGL Data Blocks with
/// bit buckets skipped); fails on keyed / transport descriptors.
pub fn walk_iovecs(
    sqe: &Sqe,
    len: u64,
    page_size: u64,
    mem: &impl GuestMemory,
    max_descriptors: usize,
) -> Result<Vec<IoVec>, DataPtrError> {
    let e = walk(sqe, len, page_size, mem, max_descriptors)?;
    Ok(sgl::data_iovecs(&e)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::FakeMemory;
    use crate::sgl::{BuildOptions, SglDescriptor, SglSubtype};
    use crate::IoOpcode;

    #[test]
    fn prp_and_sgl_give_the_same_buffers() {
        let mut m = FakeMemory::default();
        let bufs = [
            IoVec::new(0x1_0200, 0xe00),
            IoVec::new(0x5_0000, 0x1000),
            IoVec::new(0x9_0000, 0x200),
        ];
        let len = 0xe00 + 0x1000 + 0x200;
        let p = prp::build(&bufs, 4096, &mut m).unwrap();
        let mut a = Sqe::rw(IoOpcode::Read, 1, 1, 0, 5);
        a.set_prp(p.prp1, p.prp2);
        let s = sgl::build_from_iovecs(&bufs, BuildOptions::default(), &mut m).unwrap();
        let mut b = Sqe::rw(IoOpcode::Read, 2, 1, 0, 5);
        b.set_sgl(s.sgl1);
        let va = walk_iovecs(&a, len, 4096, &m, 64).unwrap();
        let vb = walk_iovecs(&b, len, 4096, &m, 64).unwrap();
        assert_eq!(va, bufs.to_vec());
        assert_eq!(vb, va);
    }

    #[test]
    fn sgl_length_checks() {
        let m = FakeMemory::default();
        let mut s = Sqe::rw(IoOpcode::Write, 1, 1, 0, 1);
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Address, 0x1000, 512));
        let e = walk(&s, 4096, 4096, &m, 16).unwrap_err();
        assert_eq!(
            e,
            DataPtrError::Length {
                described: 512,
                expected: 4096
            }
        );
        assert_eq!(
            e.status(),
            Status::generic(GenericStatus::DataSglLengthInvalid)
        );
        // longer SGL: truncated to the transfer
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Address, 0x1000, 8192));
        assert_eq!(
            walk_iovecs(&s, 4096, 4096, &m, 16).unwrap(),
            vec![IoVec::new(0x1000, 4096)]
        );
        s.set_flags(0xc0);
        assert_eq!(walk(&s, 1, 4096, &m, 16), Err(DataPtrError::PsdtReserved));
        // keyed descriptors are not plain buffers
        let mut k = Sqe::rw(IoOpcode::Read, 1, 1, 0, 1);
        k.set_sgl(SglDescriptor::keyed_data_block(0x1000, 512, 7, false));
        assert_eq!(walk(&k, 512, 4096, &m, 16).unwrap().len(), 1);
        assert_eq!(
            walk_iovecs(&k, 512, 4096, &m, 16),
            Err(DataPtrError::Sgl(SglError::NotData))
        );
        // PRP errors carry through with their status
        let mut p = Sqe::rw(IoOpcode::Read, 1, 1, 0, 1);
        p.set_prp(0x1001, 0);
        let e = walk(&p, 512, 4096, &m, 16).unwrap_err();
        assert_eq!(e.status(), Status::generic(GenericStatus::PrpOffsetInvalid));
    }
}
