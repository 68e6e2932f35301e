//! The data pointer of an NVMe/RDMA command capsule, decoded without I/O: an
//! in-capsule Offset SGL, one Keyed Data Block (Address or Invalidate Key), or a
//! Last Segment (Offset) list of keyed descriptors inside the capsule. The target
//! queue ([`super::target`]) acts on the result (RDMA READ, RDMA WRITE, copy of
//! the in-capsule data); the fuzz target `nvmf_rdma_capsule` drives this alone.

use nvme::opcode::DataDirection;
use nvme::sgl::{SglDescriptor, SglSubtype, SglType, SGL_DESC_LEN};
use nvme::{Psdt, Sqe};

use crate::tcp::{data_direction, SGL_IN_CAPSULE};
use crate::transport::DataError;

/// Keyed SGL data block, subtype Address (0x40) and Invalidate Key (0x4f).
pub const SGL_KEYED: u8 = 0x40;
pub const SGL_KEYED_INV: u8 = 0x4f;

/// Most keyed data block descriptors in one command (Identify MSDBD; SPDK's default
/// for its RDMA transport is 16). Several come as a Last Segment list in the capsule.
pub const MAX_KEYED: usize = 16;

/// One keyed data block of the host's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keyed {
    pub addr: u64,
    pub key: u32,
    pub len: u32,
}

/// The keyed data blocks of one command, in order (no allocation per I/O).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyedList {
    pub(crate) n: u8,
    pub(crate) d: [Keyed; MAX_KEYED],
    /// The R_Key the host asked to invalidate (Invalidate Key subtype); None when
    /// none did, or when blocks named different keys (one key per response).
    pub invalidate: Option<u32>,
}

impl KeyedList {
    pub(crate) fn one(addr: u64, key: u32, len: u32, invalidate: bool) -> Self {
        let mut l = KeyedList {
            invalidate: invalidate.then_some(key),
            ..Default::default()
        };
        l.d[0] = Keyed { addr, key, len };
        l.n = 1;
        l
    }
    pub fn blocks(&self) -> &[Keyed] {
        &self.d[..self.n as usize]
    }
    /// Bytes the blocks name.
    pub fn total(&self) -> u64 {
        self.blocks().iter().map(|k| k.len as u64).sum()
    }
}

/// Where a command's data is.
// returned by value once per capsule: boxing the keyed list would allocate per I/O
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy)]
pub enum CapsuleData {
    /// No data (no direction, or a zero length).
    None,
    /// `len` bytes of in-capsule data right after the SQE (host to controller).
    InCapsule { len: u32 },
    /// Host memory named by keyed blocks: read from it (host to controller) or
    /// written to it (controller to host). Its total is not checked against the
    /// transfer limit here (the caller answers that with SGL Length Invalid).
    Keyed {
        list: KeyedList,
        dir: DataDirection,
        /// The blocks came as a Last Segment list in the capsule.
        segment: bool,
    },
}

/// Decodes the data pointer of `sqe`, whose capsule carried `icd_len` bytes
/// after the SQE; `read_icd(offset, buf)` fills `buf` from the in-capsule data at
/// `offset` (false: out of the receive buffer). `icd_max` is the in-capsule data
/// the queue accepts (IOCCSZ). Reads only inside `icd_len`; never panics.
pub fn decode(
    sqe: &Sqe,
    icd_len: usize,
    icd_max: u32,
    mut read_icd: impl FnMut(usize, &mut [u8]) -> bool,
) -> Result<CapsuleData, DataError> {
    let dir = data_direction(sqe);
    let sgl = sqe.sgl1();
    let sgl_id = sgl.id();
    let dlen = sgl.data_length();
    // in-capsule data for a command that moves none, or moves it the other way
    let stray_icd = dir != DataDirection::HostToController
        && icd_len > 0
        && dlen > 0
        && sgl_id == SGL_IN_CAPSULE;
    let data = match dir {
        DataDirection::None => CapsuleData::None,
        _ if dlen == 0 => CapsuleData::None,
        _ if sqe.psdt() != Psdt::SglMptrContig => return Err(DataError::SglTypeInvalid),
        DataDirection::HostToController if sgl_id == SGL_IN_CAPSULE => {
            if sgl.address() != 0 {
                return Err(DataError::SglOffsetInvalid);
            }
            if dlen as usize > icd_len || dlen > icd_max {
                return Err(DataError::SglLengthInvalid);
            }
            CapsuleData::InCapsule { len: dlen }
        }
        DataDirection::HostToController | DataDirection::ControllerToHost
            if sgl.sgl_type() == SglType::KeyedDataBlock
                && (sgl_id == SGL_KEYED || sgl_id == SGL_KEYED_INV) =>
        {
            CapsuleData::Keyed {
                list: KeyedList::one(sgl.address(), sgl.key(), dlen, sgl_id == SGL_KEYED_INV),
                dir,
                segment: false,
            }
        }
        DataDirection::HostToController | DataDirection::ControllerToHost
            if sgl.sgl_type() == SglType::LastSegment && sgl.subtype() == SglSubtype::Offset =>
        {
            CapsuleData::Keyed {
                list: keyed_list(&sgl, icd_len, &mut read_icd)?,
                dir,
                segment: true,
            }
        }
        _ => return Err(DataError::SglTypeInvalid),
    };
    if stray_icd {
        return Err(DataError::SglTypeInvalid);
    }
    Ok(data)
}

/// The keyed descriptors of a Last Segment (Offset) list in the in-capsule data.
fn keyed_list(
    seg: &SglDescriptor,
    icd_len: usize,
    read_icd: &mut impl FnMut(usize, &mut [u8]) -> bool,
) -> Result<KeyedList, DataError> {
    let (start, len) = (seg.address(), seg.length() as usize);
    if len == 0 || len % SGL_DESC_LEN != 0 || len / SGL_DESC_LEN > MAX_KEYED {
        return Err(DataError::SglCountInvalid);
    }
    if start > icd_len as u64 || start as usize + len > icd_len {
        return Err(DataError::SglOffsetInvalid);
    }
    let mut l = KeyedList::default();
    let mut several_inv = false;
    let mut raw = [0u8; SGL_DESC_LEN];
    for i in 0..len / SGL_DESC_LEN {
        if !read_icd(start as usize + i * SGL_DESC_LEN, &mut raw) {
            return Err(DataError::SglOffsetInvalid);
        }
        let d = SglDescriptor::from_bytes(&raw).map_err(|_| DataError::SglTypeInvalid)?;
        match d.id() {
            SGL_KEYED => {}
            // one key to invalidate per response: a list naming several is
            // answered with a plain SEND (the host then invalidates its keys)
            SGL_KEYED_INV if l.invalidate.is_none() || l.invalidate == Some(d.key()) => {
                l.invalidate = Some(d.key())
            }
            SGL_KEYED_INV => several_inv = true,
            _ => return Err(DataError::SglTypeInvalid),
        }
        l.d[i] = Keyed {
            addr: d.address(),
            key: d.key(),
            len: d.keyed_length(),
        };
        l.n += 1;
    }
    if several_inv {
        l.invalidate = None;
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqe(opcode: u8, sgl: [u8; 16]) -> Sqe {
        let mut b = [0u8; 64];
        b[0] = opcode;
        b[1] = 0x40; // PSDT: SGL, MPTR contiguous
        b[24..40].copy_from_slice(&sgl);
        Sqe::from_bytes(&b).unwrap()
    }
    fn desc(addr: u64, len: u32, id: u8) -> [u8; 16] {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[15] = id;
        d
    }
    fn keyed(addr: u64, len: u32, key: u32, id: u8) -> [u8; 16] {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
        d[11..15].copy_from_slice(&key.to_le_bytes());
        d[15] = id;
        d
    }
    fn run(s: &Sqe, icd: &[u8], max: u32) -> Result<CapsuleData, DataError> {
        decode(s, icd.len(), max, |at, buf| {
            buf.copy_from_slice(&icd[at..at + buf.len()]);
            true
        })
    }

    #[test]
    fn in_capsule_keyed_and_segment_lists() {
        // write, 512 B in the capsule
        let r = run(&sqe(1, desc(0, 512, 0x01)), &[0; 512], 8192);
        assert!(matches!(r, Ok(CapsuleData::InCapsule { len: 512 })));
        // ... longer than arrived, or than the queue takes, or at an offset
        assert_eq!(
            run(&sqe(1, desc(0, 512, 0x01)), &[0; 100], 8192).unwrap_err(),
            DataError::SglLengthInvalid
        );
        assert_eq!(
            run(&sqe(1, desc(0, 512, 0x01)), &[0; 512], 256).unwrap_err(),
            DataError::SglLengthInvalid
        );
        assert_eq!(
            run(&sqe(1, desc(8, 512, 0x01)), &[0; 520], 8192).unwrap_err(),
            DataError::SglOffsetInvalid
        );
        // read into one keyed block, invalidate its key
        let Ok(CapsuleData::Keyed { list, dir, segment }) =
            run(&sqe(2, keyed(0x1000, 4096, 0x1234, SGL_KEYED_INV)), &[], 0)
        else {
            panic!()
        };
        assert_eq!((dir, segment), (DataDirection::ControllerToHost, false));
        assert_eq!((list.total(), list.invalidate), (4096, Some(0x1234)));
        // write from a Last Segment list of two blocks; two different keys to
        // invalidate: none is (one key per response)
        let mut icd = Vec::new();
        icd.extend_from_slice(&keyed(0x1000, 4096, 0x11, SGL_KEYED_INV));
        icd.extend_from_slice(&keyed(0x9000, 512, 0x22, SGL_KEYED_INV));
        let Ok(CapsuleData::Keyed { list, segment, .. }) =
            run(&sqe(1, desc(0, 32, 0x31)), &icd, 8192)
        else {
            panic!()
        };
        assert!(segment);
        assert_eq!((list.blocks().len(), list.total()), (2, 4608));
        assert_eq!(list.invalidate, None);
        // a list that is not whole descriptors, or past what arrived
        assert_eq!(
            run(&sqe(1, desc(0, 24, 0x31)), &icd, 8192).unwrap_err(),
            DataError::SglCountInvalid
        );
        assert_eq!(
            run(&sqe(1, desc(16, 32, 0x31)), &icd, 8192).unwrap_err(),
            DataError::SglOffsetInvalid
        );
        // in-capsule data on a read: refused
        assert_eq!(
            run(&sqe(2, desc(0, 512, 0x01)), &[0; 512], 8192).unwrap_err(),
            DataError::SglTypeInvalid
        );
    }
}
