//! SGL descriptors (16 bytes) and the SGL builder / walker.
//!
//! A descriptor's byte 15 holds the type (bits 7:4) and subtype (bits 3:0).
//! Data Block, Bit Bucket, Segment, Last Segment and Transport Data Block carry
//! address (bytes 0..8) and a 32-bit length (bytes 8..12); Keyed Data Block carries
//! address, a 24-bit length (bytes 8..11) and a 32-bit key (bytes 11..15).

use crate::memory::{GuestMemory, GuestMemoryMut, IoVec, MemoryError};
use crate::status::{GenericStatus, Status};
use crate::{le32, le64, put32, put64};

/// Size of an SGL descriptor.
pub const SGL_DESC_LEN: usize = 16;

enum_with_unknown! {
    /// SGL descriptor type (Base 2.0 Figure 116).
    pub enum SglType(u8) {
        DataBlock = 0x0 => "Data Block",
        BitBucket = 0x1 => "Bit Bucket",
        Segment = 0x2 => "Segment",
        LastSegment = 0x3 => "Last Segment",
        KeyedDataBlock = 0x4 => "Keyed Data Block",
        TransportDataBlock = 0x5 => "Transport Data Block",
        VendorSpecific = 0xf => "Vendor Specific",
    }
}

enum_with_unknown! {
    /// SGL descriptor subtype (Base 2.0 Figure 117).
    pub enum SglSubtype(u8) {
        Address = 0x0 => "Address",
        Offset = 0x1 => "Offset",
        TransportSpecific = 0xa => "Transport Specific",
        InvalidateKey = 0xf => "Invalidate Key",
    }
}

/// One 16-byte SGL descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SglDescriptor {
    bytes: [u8; SGL_DESC_LEN],
}

impl SglDescriptor {
    pub const fn from_array(bytes: [u8; SGL_DESC_LEN]) -> Self {
        SglDescriptor { bytes }
    }
    /// Copy a descriptor out of a slice of at least 16 bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Self, crate::Error> {
        if b.len() < SGL_DESC_LEN {
            return Err(crate::Error::Truncated {
                need: SGL_DESC_LEN,
                have: b.len(),
            });
        }
        let mut d = [0u8; SGL_DESC_LEN];
        d.copy_from_slice(&b[..SGL_DESC_LEN]);
        Ok(SglDescriptor { bytes: d })
    }
    pub fn as_bytes(&self) -> &[u8; SGL_DESC_LEN] {
        &self.bytes
    }

    fn with(ty: SglType, sub: SglSubtype) -> Self {
        let mut d = SglDescriptor::default();
        d.bytes[15] = (ty.raw() << 4) | (sub.raw() & 0xf);
        d
    }

    /// Data Block with subtype Address or Offset.
    pub fn data_block(sub: SglSubtype, addr: u64, len: u32) -> Self {
        let mut d = Self::with(SglType::DataBlock, sub);
        d.set_address(addr);
        d.set_length(len);
        d
    }
    /// Bit Bucket of `len` bytes (controller-to-host data to discard).
    pub fn bit_bucket(len: u32) -> Self {
        let mut d = Self::with(SglType::BitBucket, SglSubtype::Address);
        d.set_length(len);
        d
    }
    /// Segment: `len` bytes of descriptors at `addr`, the last of which points on.
    pub fn segment(sub: SglSubtype, addr: u64, len: u32) -> Self {
        let mut d = Self::with(SglType::Segment, sub);
        d.set_address(addr);
        d.set_length(len);
        d
    }
    /// Last Segment: `len` bytes of descriptors at `addr`, none of them a segment.
    pub fn last_segment(sub: SglSubtype, addr: u64, len: u32) -> Self {
        let mut d = Self::with(SglType::LastSegment, sub);
        d.set_address(addr);
        d.set_length(len);
        d
    }
    /// Keyed Data Block (RDMA): 24-bit length, 32-bit key; `invalidate` sets subtype
    /// Invalidate Key, else Address.
    pub fn keyed_data_block(addr: u64, len: u32, key: u32, invalidate: bool) -> Self {
        let sub = if invalidate {
            SglSubtype::InvalidateKey
        } else {
            SglSubtype::Address
        };
        let mut d = Self::with(SglType::KeyedDataBlock, sub);
        d.set_address(addr);
        d.set_keyed_length(len);
        d.set_key(key);
        d
    }
    /// Transport Data Block with the transport-specific subtype (NVMe/TCP: data moves
    /// in C2HData/H2CData PDUs; byte 15 = 0x5a).
    pub fn transport_data_block(len: u32) -> Self {
        let mut d = Self::with(SglType::TransportDataBlock, SglSubtype::TransportSpecific);
        d.set_length(len);
        d
    }

    pub fn sgl_type(&self) -> SglType {
        SglType::from(self.bytes[15] >> 4)
    }
    pub fn subtype(&self) -> SglSubtype {
        SglSubtype::from(self.bytes[15] & 0xf)
    }
    /// Raw identifier byte (type << 4 | subtype).
    pub fn id(&self) -> u8 {
        self.bytes[15]
    }
    /// Address (or offset, per subtype).
    pub fn address(&self) -> u64 {
        le64(&self.bytes, 0)
    }
    pub fn set_address(&mut self, v: u64) {
        put64(&mut self.bytes, 0, v)
    }
    /// Length of a non-keyed descriptor (bytes 8..12).
    pub fn length(&self) -> u32 {
        le32(&self.bytes, 8)
    }
    pub fn set_length(&mut self, v: u32) {
        put32(&mut self.bytes, 8, v)
    }
    /// Length of a Keyed Data Block (24 bits, bytes 8..11).
    pub fn keyed_length(&self) -> u32 {
        u32::from_le_bytes([self.bytes[8], self.bytes[9], self.bytes[10], 0])
    }
    /// Set the 24-bit keyed length (truncated to 24 bits).
    pub fn set_keyed_length(&mut self, v: u32) {
        self.bytes[8..11].copy_from_slice(&v.to_le_bytes()[..3]);
    }
    /// Key of a Keyed Data Block (bytes 11..15).
    pub fn key(&self) -> u32 {
        le32(&self.bytes, 11)
    }
    pub fn set_key(&mut self, v: u32) {
        put32(&mut self.bytes, 11, v)
    }
    /// The data length this descriptor describes, per its type (keyed: 24-bit).
    pub fn data_length(&self) -> u32 {
        if self.sgl_type() == SglType::KeyedDataBlock {
            self.keyed_length()
        } else {
            self.length()
        }
    }
}

impl core::fmt::Debug for SglDescriptor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("SglDescriptor");
        d.field("type", &self.sgl_type())
            .field("subtype", &self.subtype());
        d.field("addr", &format_args!("{:#x}", self.address()));
        d.field("len", &self.data_length());
        if self.sgl_type() == SglType::KeyedDataBlock {
            d.field("key", &format_args!("{:#x}", self.key()));
        }
        d.finish()
    }
}

/// Largest length a non-keyed descriptor can carry.
pub const MAX_DATA_LEN: u64 = u32::MAX as u64;
/// Largest length a Keyed Data Block can carry (24 bits).
pub const MAX_KEYED_LEN: u64 = 0x00ff_ffff;

/// One element of a described transfer, as the builder takes it and the walker
/// returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SglEntry {
    /// A Data Block: `addr` is an address, or an offset (into the capsule) when
    /// `offset` is set (subtype Offset).
    Data { addr: u64, len: u64, offset: bool },
    /// A Bit Bucket: `len` bytes of controller-to-host data to discard.
    BitBucket { len: u64 },
    /// A Keyed Data Block (RDMA remote buffer); `invalidate` asks the target to
    /// invalidate the key (subtype Invalidate Key).
    Keyed {
        addr: u64,
        len: u64,
        key: u32,
        invalidate: bool,
    },
    /// A Transport Data Block (the transport moves the data, e.g. NVMe/TCP).
    Transport { len: u64 },
}

impl SglEntry {
    /// A Data Block with the Address subtype.
    pub fn data(v: IoVec) -> Self {
        SglEntry::Data {
            addr: v.addr,
            len: v.len,
            offset: false,
        }
    }
    /// Bytes this entry covers.
    pub fn len(&self) -> u64 {
        match *self {
            SglEntry::Data { len, .. }
            | SglEntry::BitBucket { len }
            | SglEntry::Keyed { len, .. }
            | SglEntry::Transport { len } => len,
        }
    }
    /// Whether the entry covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn max_len(&self) -> u64 {
        match self {
            SglEntry::Keyed { .. } => MAX_KEYED_LEN,
            _ => MAX_DATA_LEN,
        }
    }
    /// Merge `next` into `self` when contiguous and of the same kind (the result may
    /// exceed a descriptor's limit; [`build`] splits afterwards).
    fn try_merge(&mut self, next: &SglEntry) -> bool {
        let max = u64::MAX / 2;
        match (self, next) {
            (
                SglEntry::Data { addr, len, offset },
                SglEntry::Data {
                    addr: a2,
                    len: l2,
                    offset: o2,
                },
            ) if *offset == *o2 && addr.checked_add(*len) == Some(*a2) && *len + *l2 <= max => {
                *len += *l2;
                true
            }
            (
                SglEntry::Keyed {
                    addr,
                    len,
                    key,
                    invalidate,
                },
                SglEntry::Keyed {
                    addr: a2,
                    len: l2,
                    key: k2,
                    invalidate: i2,
                },
            ) if *key == *k2
                && *invalidate == *i2
                && addr.checked_add(*len) == Some(*a2)
                && *len + *l2 <= max =>
            {
                *len += *l2;
                true
            }
            (SglEntry::BitBucket { len }, SglEntry::BitBucket { len: l2 }) if *len + *l2 <= max => {
                *len += *l2;
                true
            }
            _ => false,
        }
    }
    fn descriptor(&self) -> SglDescriptor {
        match *self {
            SglEntry::Data { addr, len, offset } => SglDescriptor::data_block(
                if offset {
                    SglSubtype::Offset
                } else {
                    SglSubtype::Address
                },
                addr,
                len as u32,
            ),
            SglEntry::BitBucket { len } => SglDescriptor::bit_bucket(len as u32),
            SglEntry::Keyed {
                addr,
                len,
                key,
                invalidate,
            } => SglDescriptor::keyed_data_block(addr, len as u32, key, invalidate),
            SglEntry::Transport { len } => SglDescriptor::transport_data_block(len as u32),
        }
    }
}

/// The data buffers of a walked SGL (Data Blocks only; bit buckets are skipped).
/// Fails with [`SglError::NotData`] if the list holds keyed or transport blocks.
pub fn data_iovecs(entries: &[SglEntry]) -> Result<Vec<IoVec>, SglError> {
    let mut out: Vec<IoVec> = Vec::with_capacity(entries.len());
    for e in entries {
        match *e {
            SglEntry::Data { addr, len, .. } => match out.last_mut() {
                Some(l) if l.end() == addr => l.len += len,
                _ => out.push(IoVec::new(addr, len)),
            },
            SglEntry::BitBucket { .. } => {}
            _ => return Err(SglError::NotData),
        }
    }
    Ok(out)
}

/// Why an SGL could not be built or walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SglError {
    /// Nothing to describe.
    #[error("empty SGL")]
    Empty,
    /// A descriptor type that is not valid here (unknown, vendor specific, or a
    /// segment descriptor inside a Last Segment / not last in a Segment).
    #[error("SGL descriptor type {id:#04x} invalid here")]
    TypeInvalid { id: u8 },
    /// A subtype the descriptor type does not allow.
    #[error("SGL descriptor {id:#04x} has an invalid subtype")]
    SubtypeInvalid { id: u8 },
    /// A Segment / Last Segment length that is zero or not a multiple of 16.
    #[error("SGL segment length {len} invalid")]
    SegmentLength { len: u32 },
    /// A Segment whose last descriptor does not point to another segment.
    #[error("SGL segment does not end in a segment descriptor")]
    SegmentNotChained,
    /// More descriptors than the walker's limit (or a segment loop).
    #[error("more than {limit} SGL descriptors")]
    TooManyDescriptors { limit: usize },
    /// The list holds entries that are not plain data blocks.
    #[error("SGL holds non-data descriptors")]
    NotData,
    /// Options out of range (segment capacity below 2).
    #[error("invalid SGL build options")]
    BadOptions,
    /// Reading or writing a segment failed.
    #[error("memory: {0}")]
    Memory(#[from] MemoryError),
}

impl SglError {
    /// The NVMe status a controller returns for this error.
    pub fn status(&self) -> Status {
        let g = match self {
            SglError::Empty => GenericStatus::DataSglLengthInvalid,
            SglError::TypeInvalid { .. } | SglError::SubtypeInvalid { .. } | SglError::NotData => {
                GenericStatus::SglDescriptorTypeInvalid
            }
            SglError::SegmentLength { .. } | SglError::SegmentNotChained => {
                GenericStatus::InvalidSglSegmentDescriptor
            }
            SglError::TooManyDescriptors { .. } => GenericStatus::InvalidNumberOfSglDescriptors,
            SglError::BadOptions => GenericStatus::InvalidField,
            SglError::Memory(_) => GenericStatus::DataTransferError,
        };
        Status::generic(g)
    }
}

/// How [`build`] lays out segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// Descriptors per segment (>= 2), including the chaining descriptor.
    pub descriptors_per_segment: usize,
    /// Subtype of Segment / Last Segment descriptors: Address (host memory) or
    /// Offset (in-capsule, fabrics).
    pub segment_subtype: SglSubtype,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            descriptors_per_segment: 256,
            segment_subtype: SglSubtype::Address,
        }
    }
}

/// A built SGL: descriptor 1 (for the SQE) and the segments written to memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sgl {
    /// SGL descriptor 1, for [`Sqe::set_sgl`](crate::Sqe::set_sgl).
    pub sgl1: SglDescriptor,
    /// Segments allocated (address, bytes), in chain order.
    pub segments: Vec<(u64, u32)>,
}

/// Build an SGL from entries: adjacent contiguous entries of one kind are merged,
/// entries longer than a descriptor allows are split, and when more than one
/// descriptor remains they go into segments allocated from `mem` (chained Segment
/// descriptors, the final one a Last Segment).
pub fn build(
    entries: &[SglEntry],
    opts: BuildOptions,
    mem: &mut impl GuestMemoryMut,
) -> Result<Sgl, SglError> {
    let per = opts.descriptors_per_segment;
    if per < 2 || per > (u32::MAX as usize / SGL_DESC_LEN) {
        return Err(SglError::BadOptions);
    }
    // merge contiguous entries of one kind, then split to descriptor limits
    let mut joined: Vec<SglEntry> = Vec::with_capacity(entries.len());
    for e in entries.iter().filter(|e| !e.is_empty()) {
        let merged_into_last = joined.last_mut().is_some_and(|l| l.try_merge(e));
        if !merged_into_last {
            joined.push(*e);
        }
    }
    let mut merged: Vec<SglEntry> = Vec::with_capacity(joined.len());
    for mut e in joined {
        let max = e.max_len();
        while e.len() > max {
            let (head, tail) = split(e, max);
            merged.push(head);
            e = tail;
        }
        merged.push(e);
    }
    if merged.is_empty() {
        return Err(SglError::Empty);
    }
    if merged.len() == 1 {
        return Ok(Sgl {
            sgl1: merged[0].descriptor(),
            segments: Vec::new(),
        });
    }
    let mut segments = Vec::new();
    let mut rest: &[SglEntry] = &merged;
    let seg_desc = |last: bool, addr: u64, n: usize| {
        let len = (n * SGL_DESC_LEN) as u32;
        if last {
            SglDescriptor::last_segment(opts.segment_subtype, addr, len)
        } else {
            SglDescriptor::segment(opts.segment_subtype, addr, len)
        }
    };
    let mut n = rest.len().min(per);
    let mut addr = mem.alloc(n * SGL_DESC_LEN, 16)?;
    let sgl1 = seg_desc(rest.len() <= per, addr, n);
    let mut raw = Vec::with_capacity(per * SGL_DESC_LEN);
    loop {
        raw.clear();
        segments.push((addr, (n * SGL_DESC_LEN) as u32));
        if rest.len() <= per {
            for e in rest {
                raw.extend_from_slice(e.descriptor().as_bytes());
            }
            mem.write(addr, &raw)?;
            break;
        }
        for e in &rest[..per - 1] {
            raw.extend_from_slice(e.descriptor().as_bytes());
        }
        rest = &rest[per - 1..];
        let next_n = rest.len().min(per);
        let next = mem.alloc(next_n * SGL_DESC_LEN, 16)?;
        raw.extend_from_slice(seg_desc(rest.len() <= per, next, next_n).as_bytes());
        mem.write(addr, &raw)?;
        addr = next;
        n = next_n;
    }
    Ok(Sgl { sgl1, segments })
}

/// Build an SGL of Data Blocks (subtype Address) from buffers.
pub fn build_from_iovecs(
    bufs: &[IoVec],
    opts: BuildOptions,
    mem: &mut impl GuestMemoryMut,
) -> Result<Sgl, SglError> {
    let entries: Vec<SglEntry> = bufs.iter().map(|v| SglEntry::data(*v)).collect();
    build(&entries, opts, mem)
}

fn split(e: SglEntry, at: u64) -> (SglEntry, SglEntry) {
    match e {
        SglEntry::Data { addr, len, offset } => (
            SglEntry::Data {
                addr,
                len: at,
                offset,
            },
            SglEntry::Data {
                addr: addr + at,
                len: len - at,
                offset,
            },
        ),
        SglEntry::BitBucket { len } => (
            SglEntry::BitBucket { len: at },
            SglEntry::BitBucket { len: len - at },
        ),
        SglEntry::Keyed {
            addr,
            len,
            key,
            invalidate,
        } => (
            SglEntry::Keyed {
                addr,
                len: at,
                key,
                invalidate,
            },
            SglEntry::Keyed {
                addr: addr + at,
                len: len - at,
                key,
                invalidate,
            },
        ),
        SglEntry::Transport { len } => (
            SglEntry::Transport { len: at },
            SglEntry::Transport { len: len - at },
        ),
    }
}

/// Default limit on descriptors visited by [`walk`].
pub const DEFAULT_MAX_DESCRIPTORS: usize = 4096;

/// Decode one non-segment descriptor.
pub fn entry_of(d: &SglDescriptor) -> Result<SglEntry, SglError> {
    let id = d.id();
    let sub = d.subtype();
    match d.sgl_type() {
        SglType::DataBlock => match sub {
            SglSubtype::Address | SglSubtype::Offset => Ok(SglEntry::Data {
                addr: d.address(),
                len: u64::from(d.length()),
                offset: sub == SglSubtype::Offset,
            }),
            _ => Err(SglError::SubtypeInvalid { id }),
        },
        SglType::BitBucket => Ok(SglEntry::BitBucket {
            len: u64::from(d.length()),
        }),
        SglType::KeyedDataBlock => match sub {
            SglSubtype::Address | SglSubtype::InvalidateKey => Ok(SglEntry::Keyed {
                addr: d.address(),
                len: u64::from(d.keyed_length()),
                key: d.key(),
                invalidate: sub == SglSubtype::InvalidateKey,
            }),
            _ => Err(SglError::SubtypeInvalid { id }),
        },
        SglType::TransportDataBlock => match sub {
            SglSubtype::TransportSpecific => Ok(SglEntry::Transport {
                len: u64::from(d.length()),
            }),
            _ => Err(SglError::SubtypeInvalid { id }),
        },
        _ => Err(SglError::TypeInvalid { id }),
    }
}

fn is_segment(d: &SglDescriptor) -> bool {
    matches!(d.sgl_type(), SglType::Segment | SglType::LastSegment)
}

/// Walk an SGL from descriptor 1, reading segments from `mem`, into its entries
/// (in order; adjacent contiguous entries are not merged, so the shape is
/// preserved). At most `max_descriptors` descriptors are visited, which also
/// stops segment loops.
pub fn walk(
    sgl1: &SglDescriptor,
    mem: &impl GuestMemory,
    max_descriptors: usize,
) -> Result<Vec<SglEntry>, SglError> {
    let mut out = Vec::new();
    let mut visited = 1usize;
    let mut d = *sgl1;
    let mut raw = Vec::new();
    loop {
        if !is_segment(&d) {
            out.push(entry_of(&d)?);
            return Ok(out);
        }
        let last = d.sgl_type() == SglType::LastSegment;
        match d.subtype() {
            SglSubtype::Address | SglSubtype::Offset => {}
            _ => return Err(SglError::SubtypeInvalid { id: d.id() }),
        }
        let len = d.length();
        if len == 0 || !(len as usize).is_multiple_of(SGL_DESC_LEN) {
            return Err(SglError::SegmentLength { len });
        }
        let n = len as usize / SGL_DESC_LEN;
        if visited + n > max_descriptors {
            return Err(SglError::TooManyDescriptors {
                limit: max_descriptors,
            });
        }
        visited += n;
        raw.resize(len as usize, 0);
        mem.read(d.address(), &mut raw)?;
        let mut next = None;
        for (i, chunk) in raw.chunks_exact(SGL_DESC_LEN).enumerate() {
            let mut b = [0u8; SGL_DESC_LEN];
            b.copy_from_slice(chunk);
            let e = SglDescriptor::from_array(b);
            if is_segment(&e) {
                if last || i != n - 1 {
                    return Err(SglError::TypeInvalid { id: e.id() });
                }
                next = Some(e);
            } else {
                out.push(entry_of(&e)?);
            }
        }
        match next {
            Some(e) => d = e,
            None if last => return Ok(out),
            None => return Err(SglError::SegmentNotChained),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::memory::{merge_adjacent, total_len, FakeMemory};
    use proptest::prelude::*;

    #[test]
    fn single_descriptor_no_segment() {
        let mut m = FakeMemory::default();
        let s = build_from_iovecs(
            &[IoVec::new(0x1000, 100), IoVec::new(0x1064, 28)],
            BuildOptions::default(),
            &mut m,
        )
        .unwrap();
        assert!(s.segments.is_empty());
        assert_eq!(
            s.sgl1,
            SglDescriptor::data_block(SglSubtype::Address, 0x1000, 128)
        );
        let w = walk(&s.sgl1, &m, DEFAULT_MAX_DESCRIPTORS).unwrap();
        assert_eq!(data_iovecs(&w).unwrap(), vec![IoVec::new(0x1000, 128)]);
    }

    #[test]
    fn last_segment_and_chain() {
        let mut m = FakeMemory::default();
        let bufs: Vec<IoVec> = (0..10)
            .map(|i| IoVec::new(0x10_0000 + i * 0x1000, 512))
            .collect();
        let opts = BuildOptions {
            descriptors_per_segment: 4,
            ..Default::default()
        };
        let s = build_from_iovecs(&bufs, opts, &mut m).unwrap();
        // 10 data descriptors at 4 per segment: 3 + link, 3 + link, 4 (last)
        assert_eq!(s.sgl1.sgl_type(), SglType::Segment);
        assert_eq!(s.segments.len(), 3);
        assert_eq!(
            s.segments.iter().map(|x| x.1).collect::<Vec<_>>(),
            vec![64, 64, 64]
        );
        let mut link = [0u8; 16];
        m.read(s.segments[1].0 + 48, &mut link).unwrap();
        let link = SglDescriptor::from_array(link);
        assert_eq!(link.sgl_type(), SglType::LastSegment);
        assert_eq!(link.address(), s.segments[2].0);
        let w = walk(&s.sgl1, &m, DEFAULT_MAX_DESCRIPTORS).unwrap();
        assert_eq!(w.len(), 10);
        assert_eq!(data_iovecs(&w).unwrap(), bufs);
        // a walker limit below the descriptor count fails
        assert_eq!(
            walk(&s.sgl1, &m, 8),
            Err(SglError::TooManyDescriptors { limit: 8 })
        );
        // exactly fitting one segment: a Last Segment
        let s = build_from_iovecs(&bufs[..4], opts, &mut m).unwrap();
        assert_eq!(s.sgl1.sgl_type(), SglType::LastSegment);
        assert_eq!(s.sgl1.length(), 64);
    }

    #[test]
    fn keyed_bit_bucket_transport_and_split() {
        let mut m = FakeMemory::default();
        let entries = [
            SglEntry::Keyed {
                addr: 0x1000,
                len: 0x80_0000,
                key: 7,
                invalidate: false,
            },
            SglEntry::Keyed {
                addr: 0x80_1000,
                len: 0x90_0000,
                key: 7,
                invalidate: false,
            },
            SglEntry::BitBucket { len: 512 },
            SglEntry::BitBucket { len: 512 },
            SglEntry::Keyed {
                addr: 0x5000,
                len: 16,
                key: 9,
                invalidate: true,
            },
        ];
        let s = build(&entries, BuildOptions::default(), &mut m).unwrap();
        let w = walk(&s.sgl1, &m, DEFAULT_MAX_DESCRIPTORS).unwrap();
        // merged to 0x1100000 bytes, split at the 24-bit limit
        assert_eq!(
            w,
            vec![
                SglEntry::Keyed {
                    addr: 0x1000,
                    len: MAX_KEYED_LEN,
                    key: 7,
                    invalidate: false
                },
                SglEntry::Keyed {
                    addr: 0x1000 + MAX_KEYED_LEN,
                    len: 0x110_0000 - MAX_KEYED_LEN,
                    key: 7,
                    invalidate: false
                },
                SglEntry::BitBucket { len: 1024 },
                SglEntry::Keyed {
                    addr: 0x5000,
                    len: 16,
                    key: 9,
                    invalidate: true
                },
            ]
        );
        assert_eq!(data_iovecs(&w), Err(SglError::NotData));
        let t = build(
            &[SglEntry::Transport { len: 4096 }],
            BuildOptions::default(),
            &mut m,
        )
        .unwrap();
        assert_eq!(t.sgl1.id(), 0x5a);
        assert_eq!(
            walk(&t.sgl1, &m, 16).unwrap(),
            vec![SglEntry::Transport { len: 4096 }]
        );
        assert_eq!(
            build(&[], BuildOptions::default(), &mut m),
            Err(SglError::Empty)
        );
        let bad = BuildOptions {
            descriptors_per_segment: 1,
            ..Default::default()
        };
        assert_eq!(build(&entries, bad, &mut m), Err(SglError::BadOptions));
        // bit buckets are holes in the data iovecs
        let w = [
            SglEntry::Data {
                addr: 0,
                len: 8,
                offset: false,
            },
            SglEntry::BitBucket { len: 8 },
            SglEntry::Data {
                addr: 8,
                len: 8,
                offset: false,
            },
        ];
        assert_eq!(data_iovecs(&w).unwrap(), vec![IoVec::new(0, 16)]);
    }

    /// NVMe/RDMA style: several keyed descriptors in-capsule behind a Last Segment
    /// with the Offset subtype, walked back from the capsule bytes.
    #[test]
    fn in_capsule_keyed_list() {
        use crate::memory::{SliceMemory, VecMemory};
        let entries: Vec<SglEntry> = (0..3u64)
            .map(|i| SglEntry::Keyed {
                addr: 0x10_0000 * (i + 1),
                len: 4096,
                key: 0x100 + i as u32,
                invalidate: false,
            })
            .collect();
        let mut capsule = VecMemory::default();
        let opts = BuildOptions {
            segment_subtype: SglSubtype::Offset,
            ..Default::default()
        };
        let s = build(&entries, opts, &mut capsule).unwrap();
        assert_eq!(s.sgl1.id(), 0x31); // Last Segment, Offset
        assert_eq!(s.sgl1.address(), 0);
        assert_eq!(capsule.0.len(), 48);
        let w = walk(&s.sgl1, &SliceMemory(&capsule.0), 16).unwrap();
        assert_eq!(w, entries);
        let mut sqe = crate::Sqe::rw(crate::IoOpcode::Write, 1, 1, 0, 3);
        sqe.set_sgl(s.sgl1);
        assert_eq!(
            crate::rules::check_data_pointer(
                &sqe,
                crate::rules::Transport::Rdma,
                crate::rules::QueueKind::Io,
                true
            ),
            Ok(())
        );
    }

    #[test]
    fn walker_rejects_malformed() {
        let mut m = FakeMemory::default();
        let unknown = SglDescriptor::from_array([0xe0; 16]);
        assert!(matches!(
            walk(&unknown, &m, 16),
            Err(SglError::TypeInvalid { .. })
        ));
        let e = SglError::TypeInvalid { id: 0xe0 };
        assert_eq!(
            e.status(),
            Status::generic(GenericStatus::SglDescriptorTypeInvalid)
        );
        let bad_sub = SglDescriptor::from_array({
            let mut b = [0u8; 16];
            b[15] = 0x0a; // data block, transport-specific subtype
            b
        });
        assert!(matches!(
            walk(&bad_sub, &m, 16),
            Err(SglError::SubtypeInvalid { id: 0x0a })
        ));
        let odd = SglDescriptor::last_segment(SglSubtype::Address, 0x1000, 24);
        assert_eq!(walk(&odd, &m, 16), Err(SglError::SegmentLength { len: 24 }));
        assert_eq!(
            SglError::SegmentLength { len: 24 }.status(),
            Status::generic(GenericStatus::InvalidSglSegmentDescriptor)
        );
        // unmapped segment
        let far = SglDescriptor::last_segment(SglSubtype::Address, 0xdead_0000, 32);
        assert!(matches!(walk(&far, &m, 16), Err(SglError::Memory(_))));
        // a Last Segment containing a segment descriptor
        m.write(
            0x2000,
            SglDescriptor::data_block(SglSubtype::Address, 0, 8).as_bytes(),
        )
        .unwrap();
        m.write(
            0x2010,
            SglDescriptor::segment(SglSubtype::Address, 0x3000, 16).as_bytes(),
        )
        .unwrap();
        let ls = SglDescriptor::last_segment(SglSubtype::Address, 0x2000, 32);
        assert!(matches!(
            walk(&ls, &m, 16),
            Err(SglError::TypeInvalid { id: 0x20 })
        ));
        // a Segment not ending in a segment descriptor
        let sg = SglDescriptor::segment(SglSubtype::Address, 0x2000, 16);
        assert_eq!(walk(&sg, &m, 16), Err(SglError::SegmentNotChained));
        // a segment that points to itself: stopped by the limit
        m.write(
            0x4000,
            SglDescriptor::segment(SglSubtype::Address, 0x4000, 16).as_bytes(),
        )
        .unwrap();
        let lp = SglDescriptor::segment(SglSubtype::Address, 0x4000, 16);
        assert_eq!(
            walk(&lp, &m, 100),
            Err(SglError::TooManyDescriptors { limit: 100 })
        );
    }

    fn layout() -> impl Strategy<Value = Vec<IoVec>> {
        prop::collection::vec((0u64..3, 1u64..20_000), 1..60).prop_map(|v| {
            let mut addr = 0x100_0000u64;
            v.into_iter()
                .map(|(gap, len)| {
                    addr += gap * 100;
                    let b = IoVec::new(addr, len);
                    addr += len;
                    b
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn build_walk_round_trip(bufs in layout(), per in 2usize..8) {
            let mut m = FakeMemory::default();
            let opts = BuildOptions { descriptors_per_segment: per, ..Default::default() };
            let s = build_from_iovecs(&bufs, opts, &mut m).unwrap();
            let w = walk(&s.sgl1, &m, DEFAULT_MAX_DESCRIPTORS).unwrap();
            let merged = merge_adjacent(&bufs);
            prop_assert_eq!(w.len(), merged.len());
            prop_assert_eq!(w.iter().map(|e| e.len()).sum::<u64>(), total_len(&bufs));
            prop_assert_eq!(data_iovecs(&w).unwrap(), merged);
        }

        /// The walker never panics on arbitrary descriptors and segment bytes.
        #[test]
        fn walker_total_on_garbage(d in prop::array::uniform16(any::<u8>()), seg in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut m = FakeMemory::default();
            m.zero_fill_reads = true;
            m.write(0, &seg).unwrap();
            let _ = walk(&SglDescriptor::from_array(d), &m, 64);
        }
    }

    /// Linux nvme.h: `struct nvme_sgl_desc { __le64 addr; __le32 length; __u8 rsvd[3]; __u8 type; }`,
    /// `struct nvme_keyed_sgl_desc { __le64 addr; __u8 length[3]; __u8 key[4]; __u8 type; }`;
    /// NVME_SGL_FMT_DATA_DESC = 0x00, NVME_SGL_FMT_SEG_DESC = 0x02, NVME_SGL_FMT_LAST_SEG_DESC = 0x03,
    /// NVME_KEY_SGL_FMT_DATA_DESC = 0x04, NVME_TRANSPORT_SGL_DATA_DESC = 0x05;
    /// subtypes ADDRESS 0, OFFSET 1, TRANSPORT_A 0xA, INVALIDATE 0xF.
    #[test]
    fn descriptor_bytes() {
        let d = SglDescriptor::data_block(SglSubtype::Offset, 0x10, 0x200);
        let mut want = [0u8; 16];
        want[0] = 0x10;
        want[8..12].copy_from_slice(&0x200u32.to_le_bytes());
        want[15] = 0x01;
        assert_eq!(d.as_bytes(), &want);

        let k =
            SglDescriptor::keyed_data_block(0x1122_3344_5566_7788, 0x12_3456, 0xdead_beef, true);
        let b = k.as_bytes();
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..11], &[0x56, 0x34, 0x12]);
        assert_eq!(&b[11..15], &0xdead_beefu32.to_le_bytes());
        assert_eq!(b[15], 0x4f);
        assert_eq!(k.keyed_length(), 0x12_3456);
        assert_eq!(k.data_length(), 0x12_3456);
        assert_eq!(k.key(), 0xdead_beef);
        assert_eq!(k.subtype(), SglSubtype::InvalidateKey);

        assert_eq!(SglDescriptor::transport_data_block(4096).id(), 0x5a);
        assert_eq!(
            SglDescriptor::segment(SglSubtype::Address, 0, 32).id(),
            0x20
        );
        assert_eq!(
            SglDescriptor::last_segment(SglSubtype::Offset, 0, 32).id(),
            0x31
        );
        assert_eq!(SglDescriptor::bit_bucket(8).sgl_type(), SglType::BitBucket);
        let u = SglDescriptor::from_bytes(&[0xe0; 16]).unwrap();
        assert_eq!(u.sgl_type(), SglType::Unknown(0xe));
        assert!(SglDescriptor::from_bytes(&[0; 15]).is_err());
    }
}
