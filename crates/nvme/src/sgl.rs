//! SGL descriptors (16 bytes) and the SGL builder / walker.
//!
//! A descriptor's byte 15 holds the type (bits 7:4) and subtype (bits 3:0).
//! Data Block, Bit Bucket, Segment, Last Segment and Transport Data Block carry
//! address (bytes 0..8) and a 32-bit length (bytes 8..12); Keyed Data Block carries
//! address, a 24-bit length (bytes 8..11) and a 32-bit key (bytes 11..15).

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

#[cfg(test)]
mod tests {
    use super::*;

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
