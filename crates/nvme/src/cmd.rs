//! Submission queue entries (64 B) and completion queue entries (16 B).
//!
//! [`Sqe`] holds the raw 64 bytes with typed accessors for the common command
//! layout (opcode, flags with FUSE and PSDT, CID, NSID, MPTR, DPTR as PRP1/PRP2 or
//! an SGL descriptor, CDW10..15), the NVM I/O fields (SLBA, NLB), and the fabrics
//! command layout (FCTYPE, Connect, Property Get/Set). [`Cqe`] likewise for the
//! completion (DW0/DW1 result, SQHD, SQID, CID, phase + status).

use crate::opcode::{AdminOpcode, FabricsType, IoOpcode, FABRICS_OPCODE};
use crate::sgl::SglDescriptor;
use crate::status::Status;
use crate::{le16, le32, le64, put16, put32, put64, Error};

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// Byte offsets of the common command fields (Base 2.0 Figure 88).
pub mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const CID: usize = 2;
    pub const NSID: usize = 4;
    pub const CDW2: usize = 8;
    pub const CDW3: usize = 12;
    pub const MPTR: usize = 16;
    pub const DPTR: usize = 24;
    pub const PRP1: usize = 24;
    pub const PRP2: usize = 32;
    pub const CDW10: usize = 40;
    pub const CDW11: usize = 44;
    pub const CDW12: usize = 48;
    pub const CDW13: usize = 52;
    pub const CDW14: usize = 56;
    pub const CDW15: usize = 60;
    /// Fabrics: command type (byte 4, where NSID sits in other commands).
    pub const FCTYPE: usize = 4;
    /// Fabrics Connect: record format (u16).
    pub const CONNECT_RECFMT: usize = 40;
    /// Fabrics Connect: queue id (u16).
    pub const CONNECT_QID: usize = 42;
    /// Fabrics Connect: submission queue size, 0's based (u16).
    pub const CONNECT_SQSIZE: usize = 44;
    /// Fabrics Connect: connect attributes (u8).
    pub const CONNECT_CATTR: usize = 46;
    /// Fabrics Connect: keep-alive timeout in ms (u32).
    pub const CONNECT_KATO: usize = 48;
    /// Property Get/Set: attributes (u8; bits 2:0 size, 0 = 4 bytes, 1 = 8 bytes).
    pub const PROP_ATTRIB: usize = 40;
    /// Property Get/Set: property offset (u32).
    pub const PROP_OFFSET: usize = 44;
    /// Property Set: value (u64).
    pub const PROP_VALUE: usize = 48;

    // Completion queue entry (Base 2.0 Figure 89).
    pub const CQE_DW0: usize = 0;
    pub const CQE_DW1: usize = 4;
    pub const CQE_SQHD: usize = 8;
    pub const CQE_SQID: usize = 10;
    pub const CQE_CID: usize = 12;
    pub const CQE_STATUS: usize = 14;
}

/// PRP or SGL for Data Transfer (flags bits 7:6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Psdt {
    /// 00b: PRPs are used.
    Prp,
    /// 01b: SGLs; MPTR is the address of a contiguous metadata buffer.
    SglMptrContig,
    /// 10b: SGLs; MPTR is the address of an SGL segment (one descriptor).
    SglMptrSgl,
    /// 11b: reserved.
    Reserved,
}

impl Psdt {
    pub fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Psdt::Prp,
            1 => Psdt::SglMptrContig,
            2 => Psdt::SglMptrSgl,
            _ => Psdt::Reserved,
        }
    }
    pub fn bits(self) -> u8 {
        match self {
            Psdt::Prp => 0,
            Psdt::SglMptrContig => 1,
            Psdt::SglMptrSgl => 2,
            Psdt::Reserved => 3,
        }
    }
    /// Whether the data pointer is an SGL descriptor.
    pub fn is_sgl(self) -> bool {
        matches!(self, Psdt::SglMptrContig | Psdt::SglMptrSgl)
    }
}

/// Fused operation (flags bits 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fuse {
    Normal,
    First,
    Second,
    Reserved,
}

impl Fuse {
    pub fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Fuse::Normal,
            1 => Fuse::First,
            2 => Fuse::Second,
            _ => Fuse::Reserved,
        }
    }
    pub fn bits(self) -> u8 {
        match self {
            Fuse::Normal => 0,
            Fuse::First => 1,
            Fuse::Second => 2,
            Fuse::Reserved => 3,
        }
    }
}

/// The data pointer interpreted according to PSDT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dptr {
    /// PRP entry 1 and PRP entry 2 (or a PRP list pointer).
    Prp { prp1: u64, prp2: u64 },
    /// SGL descriptor 1.
    Sgl(SglDescriptor),
}

/// A submission queue entry: 64 bytes, little-endian fields.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(8))]
pub struct Sqe {
    bytes: [u8; SQE_LEN],
}

impl Default for Sqe {
    fn default() -> Self {
        Sqe::zeroed()
    }
}

impl Sqe {
    /// An all-zero entry.
    pub const fn zeroed() -> Self {
        Sqe {
            bytes: [0; SQE_LEN],
        }
    }

    /// Copy an entry out of a buffer; the first 64 bytes are used.
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        if b.len() < SQE_LEN {
            return Err(Error::Truncated {
                need: SQE_LEN,
                have: b.len(),
            });
        }
        let mut s = Sqe::zeroed();
        s.bytes.copy_from_slice(&b[..SQE_LEN]);
        Ok(s)
    }

    /// Wrap raw bytes.
    pub const fn from_array(bytes: [u8; SQE_LEN]) -> Self {
        Sqe { bytes }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; SQE_LEN] {
        &self.bytes
    }

    /// The raw bytes, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8; SQE_LEN] {
        &mut self.bytes
    }

    /// Command dword `n` (0..=15).
    ///
    /// # Panics
    /// If `n > 15` (a programming error, not an input error).
    pub fn cdw(&self, n: usize) -> u32 {
        assert!(n < 16, "cdw index {n}");
        le32(&self.bytes, n * 4)
    }

    /// Set command dword `n` (0..=15).
    ///
    /// # Panics
    /// If `n > 15`.
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        assert!(n < 16, "cdw index {n}");
        put32(&mut self.bytes, n * 4, v)
    }

    // ---- common fields ----

    pub fn opcode(&self) -> u8 {
        self.bytes[field::OPCODE]
    }
    pub fn set_opcode(&mut self, v: u8) {
        self.bytes[field::OPCODE] = v;
    }
    /// The opcode as an admin opcode.
    pub fn admin_opcode(&self) -> AdminOpcode {
        AdminOpcode::from(self.opcode())
    }
    /// The opcode as an NVM I/O opcode.
    pub fn io_opcode(&self) -> IoOpcode {
        IoOpcode::from(self.opcode())
    }
    /// Whether this is a fabrics command (opcode 0x7f).
    pub fn is_fabrics(&self) -> bool {
        self.opcode() == FABRICS_OPCODE
    }

    /// The raw flags byte (CDW0 bits 15:8).
    pub fn flags(&self) -> u8 {
        self.bytes[field::FLAGS]
    }
    pub fn set_flags(&mut self, v: u8) {
        self.bytes[field::FLAGS] = v;
    }
    pub fn fuse(&self) -> Fuse {
        Fuse::from_bits(self.flags())
    }
    pub fn set_fuse(&mut self, f: Fuse) {
        self.bytes[field::FLAGS] = (self.flags() & !0x03) | f.bits();
    }
    pub fn psdt(&self) -> Psdt {
        Psdt::from_bits(self.flags() >> 6)
    }
    pub fn set_psdt(&mut self, p: Psdt) {
        self.bytes[field::FLAGS] = (self.flags() & 0x3f) | (p.bits() << 6);
    }

    /// Command identifier.
    pub fn cid(&self) -> u16 {
        le16(&self.bytes, field::CID)
    }
    pub fn set_cid(&mut self, v: u16) {
        put16(&mut self.bytes, field::CID, v)
    }
    /// Namespace identifier (not meaningful in fabrics commands, where byte 4 is FCTYPE).
    pub fn nsid(&self) -> u32 {
        le32(&self.bytes, field::NSID)
    }
    pub fn set_nsid(&mut self, v: u32) {
        put32(&mut self.bytes, field::NSID, v)
    }
    pub fn cdw2(&self) -> u32 {
        le32(&self.bytes, field::CDW2)
    }
    pub fn set_cdw2(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW2, v)
    }
    pub fn cdw3(&self) -> u32 {
        le32(&self.bytes, field::CDW3)
    }
    pub fn set_cdw3(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW3, v)
    }
    /// Metadata pointer.
    pub fn mptr(&self) -> u64 {
        le64(&self.bytes, field::MPTR)
    }
    pub fn set_mptr(&mut self, v: u64) {
        put64(&mut self.bytes, field::MPTR, v)
    }

    /// PRP entry 1 (DPTR bytes 0..8).
    pub fn prp1(&self) -> u64 {
        le64(&self.bytes, field::PRP1)
    }
    pub fn set_prp1(&mut self, v: u64) {
        put64(&mut self.bytes, field::PRP1, v)
    }
    /// PRP entry 2 (DPTR bytes 8..16).
    pub fn prp2(&self) -> u64 {
        le64(&self.bytes, field::PRP2)
    }
    pub fn set_prp2(&mut self, v: u64) {
        put64(&mut self.bytes, field::PRP2, v)
    }
    /// The DPTR as SGL descriptor 1 (regardless of PSDT).
    pub fn sgl1(&self) -> SglDescriptor {
        let mut d = [0u8; 16];
        d.copy_from_slice(&self.bytes[field::DPTR..field::DPTR + 16]);
        SglDescriptor::from_array(d)
    }
    /// Set the DPTR to an SGL descriptor (PSDT is not changed; see [`Sqe::set_sgl`]).
    pub fn set_sgl1(&mut self, d: SglDescriptor) {
        self.bytes[field::DPTR..field::DPTR + 16].copy_from_slice(d.as_bytes());
    }
    /// Set the DPTR to an SGL descriptor and PSDT to "SGL, MPTR contiguous".
    pub fn set_sgl(&mut self, d: SglDescriptor) {
        self.set_sgl1(d);
        self.set_psdt(Psdt::SglMptrContig);
    }
    /// Set the DPTR to PRP1/PRP2 and PSDT to PRP.
    pub fn set_prp(&mut self, prp1: u64, prp2: u64) {
        self.set_prp1(prp1);
        self.set_prp2(prp2);
        self.set_psdt(Psdt::Prp);
    }
    /// The data pointer as PSDT says (reserved PSDT reads as PRP: check PSDT first).
    pub fn dptr(&self) -> Dptr {
        if self.psdt().is_sgl() {
            Dptr::Sgl(self.sgl1())
        } else {
            Dptr::Prp {
                prp1: self.prp1(),
                prp2: self.prp2(),
            }
        }
    }

    pub fn cdw10(&self) -> u32 {
        le32(&self.bytes, field::CDW10)
    }
    pub fn set_cdw10(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW10, v)
    }
    pub fn cdw11(&self) -> u32 {
        le32(&self.bytes, field::CDW11)
    }
    pub fn set_cdw11(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW11, v)
    }
    pub fn cdw12(&self) -> u32 {
        le32(&self.bytes, field::CDW12)
    }
    pub fn set_cdw12(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW12, v)
    }
    pub fn cdw13(&self) -> u32 {
        le32(&self.bytes, field::CDW13)
    }
    pub fn set_cdw13(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW13, v)
    }
    pub fn cdw14(&self) -> u32 {
        le32(&self.bytes, field::CDW14)
    }
    pub fn set_cdw14(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW14, v)
    }
    pub fn cdw15(&self) -> u32 {
        le32(&self.bytes, field::CDW15)
    }
    pub fn set_cdw15(&mut self, v: u32) {
        put32(&mut self.bytes, field::CDW15, v)
    }

    // ---- NVM I/O (Read/Write/Compare/Write Zeroes/Verify) ----

    /// Starting LBA (CDW10 | CDW11 << 32).
    pub fn slba(&self) -> u64 {
        le64(&self.bytes, field::CDW10)
    }
    pub fn set_slba(&mut self, v: u64) {
        put64(&mut self.bytes, field::CDW10, v)
    }
    /// Number of logical blocks, 0's based (CDW12 bits 15:0).
    pub fn nlb(&self) -> u16 {
        le16(&self.bytes, field::CDW12)
    }
    pub fn set_nlb(&mut self, v: u16) {
        put16(&mut self.bytes, field::CDW12, v)
    }
    /// Number of logical blocks as a count (NLB + 1).
    pub fn num_blocks(&self) -> u32 {
        u32::from(self.nlb()) + 1
    }
    /// Force Unit Access (CDW12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw12() & (1 << 30) != 0
    }
    /// Limited Retry (CDW12 bit 31).
    pub fn limited_retry(&self) -> bool {
        self.cdw12() & (1 << 31) != 0
    }
    /// Write Zeroes: Deallocate (CDW12 bit 25).
    pub fn write_zeroes_deac(&self) -> bool {
        self.cdw12() & (1 << 25) != 0
    }
    /// Dataset Management: number of ranges, 0's based (CDW10 bits 7:0).
    pub fn dsm_nr(&self) -> u8 {
        self.bytes[field::CDW10]
    }
    /// Dataset Management: attribute Deallocate (CDW11 bit 2).
    pub fn dsm_deallocate(&self) -> bool {
        self.cdw11() & (1 << 2) != 0
    }

    // ---- fabrics command layout (NVMe-oF 1.1 Figure 9) ----

    /// Fabrics command type (byte 4).
    pub fn fctype(&self) -> FabricsType {
        FabricsType::from(self.bytes[field::FCTYPE])
    }
    pub fn set_fctype(&mut self, t: FabricsType) {
        self.bytes[field::FCTYPE] = t.raw();
    }
    /// Connect: record format (must be 0).
    pub fn connect_recfmt(&self) -> u16 {
        le16(&self.bytes, field::CONNECT_RECFMT)
    }
    pub fn set_connect_recfmt(&mut self, v: u16) {
        put16(&mut self.bytes, field::CONNECT_RECFMT, v)
    }
    /// Connect: queue id (0 = admin queue).
    pub fn connect_qid(&self) -> u16 {
        le16(&self.bytes, field::CONNECT_QID)
    }
    pub fn set_connect_qid(&mut self, v: u16) {
        put16(&mut self.bytes, field::CONNECT_QID, v)
    }
    /// Connect: submission queue size, 0's based.
    pub fn connect_sqsize(&self) -> u16 {
        le16(&self.bytes, field::CONNECT_SQSIZE)
    }
    pub fn set_connect_sqsize(&mut self, v: u16) {
        put16(&mut self.bytes, field::CONNECT_SQSIZE, v)
    }
    /// Connect: attributes (bits 1:0 priority class; bit 2 I/O queue deletion disabled).
    pub fn connect_cattr(&self) -> u8 {
        self.bytes[field::CONNECT_CATTR]
    }
    pub fn set_connect_cattr(&mut self, v: u8) {
        self.bytes[field::CONNECT_CATTR] = v;
    }
    /// Connect: keep-alive timeout in milliseconds (admin queue only).
    pub fn connect_kato(&self) -> u32 {
        le32(&self.bytes, field::CONNECT_KATO)
    }
    pub fn set_connect_kato(&mut self, v: u32) {
        put32(&mut self.bytes, field::CONNECT_KATO, v)
    }
    /// Property Get/Set: size is 8 bytes (ATTRIB bits 2:0 == 1) rather than 4.
    pub fn prop_size8(&self) -> bool {
        self.bytes[field::PROP_ATTRIB] & 0x7 == 1
    }
    pub fn set_prop_size8(&mut self, eight: bool) {
        self.bytes[field::PROP_ATTRIB] = (self.bytes[field::PROP_ATTRIB] & !0x7) | u8::from(eight);
    }
    /// Property Get/Set: property offset (e.g. 0x00 CAP, 0x08 VS, 0x14 CC, 0x1c CSTS).
    pub fn prop_offset(&self) -> u32 {
        le32(&self.bytes, field::PROP_OFFSET)
    }
    pub fn set_prop_offset(&mut self, v: u32) {
        put32(&mut self.bytes, field::PROP_OFFSET, v)
    }
    /// Property Set: value.
    pub fn prop_value(&self) -> u64 {
        le64(&self.bytes, field::PROP_VALUE)
    }
    pub fn set_prop_value(&mut self, v: u64) {
        put64(&mut self.bytes, field::PROP_VALUE, v)
    }

    // ---- constructors for common commands ----

    /// A fabrics command of type `t` with command id `cid`.
    pub fn fabrics(t: FabricsType, cid: u16) -> Self {
        let mut s = Sqe::zeroed();
        s.set_opcode(FABRICS_OPCODE);
        s.set_cid(cid);
        s.set_fctype(t);
        s
    }

    /// A Connect command (data: 1024-byte [`ConnectData`], via SGL set by the transport).
    pub fn connect(cid: u16, qid: u16, sqsize: u16, kato_ms: u32) -> Self {
        let mut s = Sqe::fabrics(FabricsType::Connect, cid);
        s.set_connect_qid(qid);
        s.set_connect_sqsize(sqsize);
        s.set_connect_kato(kato_ms);
        s
    }

    /// A Property Get command.
    pub fn property_get(cid: u16, offset: u32, size8: bool) -> Self {
        let mut s = Sqe::fabrics(FabricsType::PropertyGet, cid);
        s.set_prop_size8(size8);
        s.set_prop_offset(offset);
        s
    }

    /// A Property Set command.
    pub fn property_set(cid: u16, offset: u32, size8: bool, value: u64) -> Self {
        let mut s = Sqe::fabrics(FabricsType::PropertySet, cid);
        s.set_prop_size8(size8);
        s.set_prop_offset(offset);
        s.set_prop_value(value);
        s
    }

    /// An NVM Read/Write/Compare-style command: `nlb_count` is a block count,
    /// clamped to 1..=65536 (NLB is 16 bits, 0's based).
    pub fn rw(op: IoOpcode, cid: u16, nsid: u32, slba: u64, nlb_count: u32) -> Self {
        let mut s = Sqe::zeroed();
        s.set_opcode(op.raw());
        s.set_cid(cid);
        s.set_nsid(nsid);
        s.set_slba(slba);
        s.set_nlb(nlb_count.saturating_sub(1).min(0xffff) as u16);
        s
    }

    /// An admin command with opcode `op`.
    pub fn admin(op: AdminOpcode, cid: u16, nsid: u32) -> Self {
        let mut s = Sqe::zeroed();
        s.set_opcode(op.raw());
        s.set_cid(cid);
        s.set_nsid(nsid);
        s
    }
}

impl core::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("Sqe");
        d.field("opcode", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &self.cid())
            .field("psdt", &self.psdt());
        if self.is_fabrics() {
            d.field("fctype", &self.fctype());
        } else {
            d.field("nsid", &self.nsid());
        }
        d.field("dptr", &self.dptr())
            .field("cdw10", &format_args!("{:#x}", self.cdw10()))
            .field("cdw11", &format_args!("{:#x}", self.cdw11()))
            .field("cdw12", &format_args!("{:#x}", self.cdw12()))
            .finish()
    }
}

/// One line in the terms tshark's NVMe dissector uses, for logs.
impl core::fmt::Display for Sqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.is_fabrics() {
            write!(f, "Fabrics {} cid={}", self.fctype(), self.cid())?;
            match self.fctype() {
                FabricsType::Connect => write!(
                    f,
                    " qid={} sqsize={} kato={}",
                    self.connect_qid(),
                    self.connect_sqsize(),
                    self.connect_kato()
                ),
                FabricsType::PropertyGet | FabricsType::PropertySet => {
                    write!(
                        f,
                        " offset={:#x} size={}",
                        self.prop_offset(),
                        if self.prop_size8() { 8 } else { 4 }
                    )
                }
                _ => Ok(()),
            }
        } else {
            write!(
                f,
                "opc={:#04x} cid={} nsid={}",
                self.opcode(),
                self.cid(),
                self.nsid()
            )?;
            match self.io_opcode() {
                IoOpcode::Read | IoOpcode::Write | IoOpcode::Compare | IoOpcode::WriteZeroes => {
                    write!(f, " slba={} nlb={}", self.slba(), self.num_blocks())
                }
                _ => Ok(()),
            }
        }
    }
}

impl core::fmt::Display for Cqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "cid={} sqid={} sqhd={} dw0={:#x} status={}",
            self.cid(),
            self.sqid(),
            self.sqhd(),
            self.dw0(),
            self.status()
        )
    }
}

/// A completion queue entry: 16 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C, align(8))]
pub struct Cqe {
    bytes: [u8; CQE_LEN],
}

impl Cqe {
    pub const fn zeroed() -> Self {
        Cqe {
            bytes: [0; CQE_LEN],
        }
    }
    /// Copy an entry out of a buffer; the first 16 bytes are used.
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        if b.len() < CQE_LEN {
            return Err(Error::Truncated {
                need: CQE_LEN,
                have: b.len(),
            });
        }
        let mut c = Cqe::zeroed();
        c.bytes.copy_from_slice(&b[..CQE_LEN]);
        Ok(c)
    }
    pub const fn from_array(bytes: [u8; CQE_LEN]) -> Self {
        Cqe { bytes }
    }
    pub fn as_bytes(&self) -> &[u8; CQE_LEN] {
        &self.bytes
    }
    pub fn as_bytes_mut(&mut self) -> &mut [u8; CQE_LEN] {
        &mut self.bytes
    }

    /// A completion for `cid` with status `status` (phase 0, result 0).
    pub fn new(cid: u16, status: Status) -> Self {
        let mut c = Cqe::zeroed();
        c.set_cid(cid);
        c.set_status(status);
        c
    }

    /// Command specific DW0.
    pub fn dw0(&self) -> u32 {
        le32(&self.bytes, field::CQE_DW0)
    }
    pub fn set_dw0(&mut self, v: u32) {
        put32(&mut self.bytes, field::CQE_DW0, v)
    }
    /// DW1 (reserved in most commands).
    pub fn dw1(&self) -> u32 {
        le32(&self.bytes, field::CQE_DW1)
    }
    pub fn set_dw1(&mut self, v: u32) {
        put32(&mut self.bytes, field::CQE_DW1, v)
    }
    /// DW0 | DW1 << 32 (Property Get returns an 8-byte value here).
    pub fn result64(&self) -> u64 {
        le64(&self.bytes, field::CQE_DW0)
    }
    pub fn set_result64(&mut self, v: u64) {
        put64(&mut self.bytes, field::CQE_DW0, v)
    }
    /// Connect response: controller id (DW0 bits 15:0).
    pub fn connect_cntlid(&self) -> u16 {
        le16(&self.bytes, field::CQE_DW0)
    }
    pub fn set_connect_cntlid(&mut self, v: u16) {
        put16(&mut self.bytes, field::CQE_DW0, v)
    }
    /// Submission queue head pointer.
    pub fn sqhd(&self) -> u16 {
        le16(&self.bytes, field::CQE_SQHD)
    }
    pub fn set_sqhd(&mut self, v: u16) {
        put16(&mut self.bytes, field::CQE_SQHD, v)
    }
    /// Submission queue identifier.
    pub fn sqid(&self) -> u16 {
        le16(&self.bytes, field::CQE_SQID)
    }
    pub fn set_sqid(&mut self, v: u16) {
        put16(&mut self.bytes, field::CQE_SQID, v)
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        le16(&self.bytes, field::CQE_CID)
    }
    pub fn set_cid(&mut self, v: u16) {
        put16(&mut self.bytes, field::CQE_CID, v)
    }
    /// The raw status field including the phase tag (bit 0).
    pub fn status_raw(&self) -> u16 {
        le16(&self.bytes, field::CQE_STATUS)
    }
    pub fn set_status_raw(&mut self, v: u16) {
        put16(&mut self.bytes, field::CQE_STATUS, v)
    }
    /// Phase tag.
    pub fn phase(&self) -> bool {
        self.status_raw() & 1 != 0
    }
    pub fn set_phase(&mut self, p: bool) {
        self.set_status_raw((self.status_raw() & !1) | u16::from(p));
    }
    /// The status (without the phase tag).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_raw() >> 1)
    }
    /// Set the status, keeping the phase tag.
    pub fn set_status(&mut self, s: Status) {
        self.set_status_raw((s.to_field() << 1) | (self.status_raw() & 1));
    }
}

impl core::fmt::Debug for Cqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cqe")
            .field("cid", &self.cid())
            .field("status", &self.status())
            .field("dw0", &format_args!("{:#x}", self.dw0()))
            .field("dw1", &format_args!("{:#x}", self.dw1()))
            .field("sqhd", &self.sqhd())
            .field("sqid", &self.sqid())
            .field("phase", &self.phase())
            .finish()
    }
}

/// Size of one Dataset Management range.
pub const DSM_RANGE_LEN: usize = 16;

/// One Dataset Management range (NVM Command Set Figure 48): context attributes,
/// length in logical blocks, starting LBA. The command's data holds NR + 1 of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DsmRange {
    pub context_attributes: u32,
    /// Number of logical blocks (a count, not 0's based).
    pub nlb: u32,
    pub slba: u64,
}

impl DsmRange {
    /// The 16-byte image.
    pub fn to_bytes(&self) -> [u8; DSM_RANGE_LEN] {
        let mut b = [0u8; DSM_RANGE_LEN];
        put32(&mut b, 0, self.context_attributes);
        put32(&mut b, 4, self.nlb);
        put64(&mut b, 8, self.slba);
        b
    }
    /// Parse the ranges in a Dataset Management data buffer: `count` ranges
    /// (NR + 1); fails if the buffer holds fewer.
    pub fn parse_list(b: &[u8], count: usize) -> Result<Vec<DsmRange>, Error> {
        let need = count.saturating_mul(DSM_RANGE_LEN);
        if b.len() < need {
            return Err(Error::Truncated {
                need,
                have: b.len(),
            });
        }
        Ok(b[..need]
            .chunks_exact(DSM_RANGE_LEN)
            .map(|r| DsmRange {
                context_attributes: le32(r, 0),
                nlb: le32(r, 4),
                slba: le64(r, 8),
            })
            .collect())
    }
}

/// Length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Length of an NQN field (NUL-padded string).
pub const NQN_LEN: usize = 256;

/// The Connect command's 1024-byte data (NVMe-oF 1.1 Figure 20): host identifier,
/// controller id, subsystem NQN, host NQN.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectData {
    bytes: Box<[u8; CONNECT_DATA_LEN]>,
}

mod connect_field {
    pub const HOSTID: usize = 0;
    pub const CNTLID: usize = 16;
    pub const SUBNQN: usize = 256;
    pub const HOSTNQN: usize = 512;
}

/// Controller id meaning "any controller" in Connect data (dynamic controller model).
pub const CNTLID_DYNAMIC: u16 = 0xffff;

impl ConnectData {
    /// A Connect data block.
    pub fn new(hostid: [u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Self {
        let mut d = ConnectData {
            bytes: Box::new([0; CONNECT_DATA_LEN]),
        };
        d.bytes[connect_field::HOSTID..connect_field::HOSTID + 16].copy_from_slice(&hostid);
        put16(&mut d.bytes[..], connect_field::CNTLID, cntlid);
        put_str(
            &mut d.bytes[connect_field::SUBNQN..connect_field::SUBNQN + NQN_LEN],
            subnqn,
        );
        put_str(
            &mut d.bytes[connect_field::HOSTNQN..connect_field::HOSTNQN + NQN_LEN],
            hostnqn,
        );
        d
    }
    /// Copy out of a buffer (at least 1024 bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        if b.len() < CONNECT_DATA_LEN {
            return Err(Error::Truncated {
                need: CONNECT_DATA_LEN,
                have: b.len(),
            });
        }
        let mut d = ConnectData {
            bytes: Box::new([0; CONNECT_DATA_LEN]),
        };
        d.bytes.copy_from_slice(&b[..CONNECT_DATA_LEN]);
        Ok(d)
    }
    pub fn as_bytes(&self) -> &[u8; CONNECT_DATA_LEN] {
        &self.bytes
    }
    pub fn hostid(&self) -> [u8; 16] {
        let mut h = [0u8; 16];
        h.copy_from_slice(&self.bytes[0..16]);
        h
    }
    pub fn cntlid(&self) -> u16 {
        le16(&self.bytes[..], connect_field::CNTLID)
    }
    /// Subsystem NQN (up to the first NUL; invalid UTF-8 yields `None`).
    pub fn subnqn(&self) -> Option<&str> {
        get_str(&self.bytes[connect_field::SUBNQN..connect_field::SUBNQN + NQN_LEN])
    }
    /// Host NQN (up to the first NUL; invalid UTF-8 yields `None`).
    pub fn hostnqn(&self) -> Option<&str> {
        get_str(&self.bytes[connect_field::HOSTNQN..connect_field::HOSTNQN + NQN_LEN])
    }
}

impl core::fmt::Debug for ConnectData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConnectData")
            .field("cntlid", &self.cntlid())
            .field("subnqn", &self.subnqn())
            .field("hostnqn", &self.hostnqn())
            .finish()
    }
}

/// Write `s` into a fixed field, truncated to the field length, the rest NUL-filled.
pub(crate) fn put_str(dst: &mut [u8], s: &str) {
    dst.fill(0);
    let n = s.len().min(dst.len());
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Write `s` into a fixed ASCII field padded with spaces (serial/model/firmware).
pub(crate) fn put_str_space(dst: &mut [u8], s: &str) {
    dst.fill(b' ');
    let n = s.len().min(dst.len());
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Read a NUL-terminated (or full-length) string field.
pub(crate) fn get_str(src: &[u8]) -> Option<&str> {
    let end = src.iter().position(|&c| c == 0).unwrap_or(src.len());
    core::str::from_utf8(&src[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgl::{SglDescriptor, SglSubtype};
    use crate::status::{GenericStatus, Sct};

    #[test]
    fn sizes() {
        assert_eq!(core::mem::size_of::<Sqe>(), 64);
        assert_eq!(core::mem::size_of::<Cqe>(), 16);
        assert_eq!(field::CDW15 + 4, SQE_LEN);
        assert_eq!(field::CQE_STATUS + 2, CQE_LEN);
    }

    /// A Read command built by hand the way Linux nvme.h `struct nvme_rw_command` lays it out:
    /// opcode@0 flags@1 command_id@2 nsid@4 cdw2@8 metadata@16 dptr@24 slba@40 length@48
    /// control@50 dsmgmt@52 reftag@56 apptag@60 appmask@62.
    #[test]
    fn deconstruct_read() {
        let mut b = [0u8; 64];
        b[0] = 0x02;
        b[1] = 0x40; // PSDT = 01b
        b[2..4].copy_from_slice(&0x1234u16.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        // SGL: transport data block, transport-specific subtype (NVMe/TCP: 0x5a)
        b[24 + 8..24 + 12].copy_from_slice(&8192u32.to_le_bytes());
        b[24 + 15] = 0x5a;
        b[40..48].copy_from_slice(&0x1_0000_0010u64.to_le_bytes());
        b[48..50].copy_from_slice(&15u16.to_le_bytes());
        let s = Sqe::from_bytes(&b).unwrap();
        assert_eq!(s.io_opcode(), IoOpcode::Read);
        assert_eq!(s.psdt(), Psdt::SglMptrContig);
        assert_eq!(s.cid(), 0x1234);
        assert_eq!(s.nsid(), 1);
        assert_eq!(s.slba(), 0x1_0000_0010);
        assert_eq!(s.nlb(), 15);
        assert_eq!(s.num_blocks(), 16);
        let d = s.sgl1();
        assert_eq!(d.length(), 8192);
        assert_eq!(d.subtype(), SglSubtype::TransportSpecific);

        // construct: setters reproduce it
        let mut t = Sqe::rw(IoOpcode::Read, 0x1234, 1, 0x1_0000_0010, 16);
        t.set_sgl(SglDescriptor::transport_data_block(8192));
        assert_eq!(t.as_bytes(), &b);
        assert!(Sqe::from_bytes(&b[..63]).is_err());
    }

    /// Linux `struct nvmf_connect_command`: opcode@0 resv1@1 command_id@2 fctype@4 resv2[19]@5
    /// dptr@24 recfmt@40 qid@42 sqsize@44 cattr@46 resv3@47 kato@48 resv4[12]@52.
    #[test]
    fn connect_layout() {
        let s = Sqe::connect(7, 3, 127, 0);
        let b = s.as_bytes();
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[2..4], &7u16.to_le_bytes());
        assert_eq!(&b[42..44], &3u16.to_le_bytes());
        assert_eq!(&b[44..46], &127u16.to_le_bytes());
        let mut s = Sqe::connect(1, 0, 31, 120_000);
        assert_eq!(&s.as_bytes()[48..52], &120_000u32.to_le_bytes());
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Offset, 0, 1024));
        assert!(s.is_fabrics());
        assert_eq!(s.fctype(), FabricsType::Connect);
        assert_eq!(s.connect_kato(), 120_000);
        assert_eq!(s.connect_sqsize(), 31);
        assert_eq!(s.as_bytes()[24 + 15], 0x01);
    }

    /// Linux `struct nvmf_property_set_command`: attrib@40 resv3[3]@41 offset@44 value@48;
    /// property get: attrib@40 offset@44.
    #[test]
    fn property_layout() {
        let s = Sqe::property_set(9, 0x14, false, 0x0046_0001);
        let b = s.as_bytes();
        assert_eq!(b[4], 0x00);
        assert_eq!(b[40], 0);
        assert_eq!(&b[44..48], &0x14u32.to_le_bytes());
        assert_eq!(&b[48..56], &0x0046_0001u64.to_le_bytes());
        let g = Sqe::property_get(9, 0x00, true);
        assert_eq!(g.as_bytes()[4], 0x04);
        assert_eq!(g.as_bytes()[40], 1);
        assert!(g.prop_size8());
        assert_eq!(g.fctype(), FabricsType::PropertyGet);
    }

    #[test]
    fn flags() {
        let mut s = Sqe::zeroed();
        s.set_fuse(Fuse::First);
        s.set_psdt(Psdt::SglMptrSgl);
        assert_eq!(s.flags(), 0x81);
        assert_eq!(s.fuse(), Fuse::First);
        s.set_prp(0x1000, 0x2000);
        assert_eq!(s.psdt(), Psdt::Prp);
        assert_eq!(s.flags(), 0x01);
        assert_eq!(
            s.dptr(),
            Dptr::Prp {
                prp1: 0x1000,
                prp2: 0x2000
            }
        );
        for n in 0..16 {
            s.set_cdw(n, n as u32 * 0x0101_0101);
        }
        assert_eq!(s.cdw10(), 10 * 0x0101_0101);
        assert_eq!(s.cdw15(), 15 * 0x0101_0101);
    }

    /// Linux `struct nvme_completion`: result@0 (u64) sq_head@8 sq_id@10 command_id@12 status@14.
    #[test]
    fn cqe_layout() {
        let mut c = Cqe::new(0xbeef, Status::generic(GenericStatus::LbaOutOfRange));
        c.set_phase(true);
        c.set_sqhd(5);
        c.set_sqid(2);
        c.set_result64(0x1122_3344_5566_7788);
        let b = c.as_bytes();
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..10], &5u16.to_le_bytes());
        assert_eq!(&b[10..12], &2u16.to_le_bytes());
        assert_eq!(&b[12..14], &0xbeefu16.to_le_bytes());
        // SC 0x80 in bits 8:1, SCT 0 in 11:9, phase 1
        assert_eq!(u16::from_le_bytes([b[14], b[15]]), (0x80 << 1) | 1);
        let d = Cqe::from_bytes(b).unwrap();
        assert_eq!(d.status().sct(), Sct::Generic);
        assert_eq!(d.status().sc(), 0x80);
        assert!(d.phase());
        let mut c = Cqe::zeroed();
        c.set_status(Status::new(Sct::MediaError, 0x81).with_dnr(true));
        assert_eq!(c.status_raw(), (1 << 15) | (2 << 9) | (0x81 << 1));
        c.set_connect_cntlid(0x12);
        assert_eq!(c.connect_cntlid(), 0x12);
    }

    /// Linux `struct nvme_dsm_range { __le32 cattr; __le32 nlb; __le64 slba; }`.
    #[test]
    fn dsm_ranges() {
        let r = DsmRange {
            context_attributes: 1,
            nlb: 8,
            slba: 0x1_0000_0000,
        };
        let b = r.to_bytes();
        assert_eq!(&b[4..8], &8u32.to_le_bytes());
        assert_eq!(&b[8..16], &0x1_0000_0000u64.to_le_bytes());
        let mut two = b.to_vec();
        two.extend_from_slice(
            &DsmRange {
                nlb: 1,
                ..Default::default()
            }
            .to_bytes(),
        );
        let l = DsmRange::parse_list(&two, 2).unwrap();
        assert_eq!(l[0], r);
        assert_eq!(l[1].nlb, 1);
        assert!(DsmRange::parse_list(&two, 3).is_err());
        let mut s = Sqe::rw(IoOpcode::DatasetManagement, 1, 1, 0, 1);
        s.set_cdw10(1);
        s.set_cdw11(1 << 2);
        assert_eq!(s.dsm_nr(), 1);
        assert!(s.dsm_deallocate());
    }

    #[test]
    fn display() {
        let s = Sqe::rw(IoOpcode::Read, 3, 1, 100, 8);
        assert_eq!(s.to_string(), "opc=0x02 cid=3 nsid=1 slba=100 nlb=8");
        assert_eq!(
            Sqe::connect(1, 2, 127, 0).to_string(),
            "Fabrics Connect cid=1 qid=2 sqsize=127 kato=0"
        );
        let c = Cqe::new(3, Status::generic(GenericStatus::InvalidField));
        assert_eq!(
            c.to_string(),
            "cid=3 sqid=0 sqhd=0 dw0=0x0 status=Invalid Field in Command (sct 0x0, sc 0x02)"
        );
        assert_eq!(
            Sqe::rw(IoOpcode::Read, 0, 1, 0, 100_000).num_blocks(),
            65536
        );
    }

    proptest::proptest! {
        /// Any 64/16 bytes parse, and every accessor is total on them.
        #[test]
        fn accessors_total(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            if let Ok(s) = Sqe::from_bytes(&b) {
                let _ = (s.to_string(), format!("{s:?}"), s.dptr(), s.fctype(), s.slba(), s.num_blocks());
                let mut t = s;
                t.set_psdt(s.psdt());
                t.set_fuse(s.fuse());
                proptest::prop_assert_eq!(t, s);
            } else {
                proptest::prop_assert!(b.len() < SQE_LEN);
            }
            if let Ok(c) = Cqe::from_bytes(&b) {
                let mut d = Cqe::zeroed();
                d.set_status_raw(c.status_raw());
                let st = c.status();
                d.set_status(st);
                proptest::prop_assert_eq!(d.status_raw(), c.status_raw());
                let _ = (c.to_string(), st.name(), st.fabrics_name());
            }
        }
    }

    #[test]
    fn connect_data() {
        let d = ConnectData::new([7; 16], CNTLID_DYNAMIC, "nqn.sub", "nqn.host");
        let b = d.as_bytes();
        assert_eq!(&b[16..18], &[0xff, 0xff]);
        assert_eq!(&b[256..263], b"nqn.sub");
        assert_eq!(&b[512..520], b"nqn.host");
        let e = ConnectData::from_bytes(b).unwrap();
        assert_eq!(e.subnqn(), Some("nqn.sub"));
        assert_eq!(e.hostnqn(), Some("nqn.host"));
        assert_eq!(e.cntlid(), 0xffff);
        assert_eq!(e.hostid(), [7; 16]);
        assert!(ConnectData::from_bytes(&b[..1000]).is_err());
    }
}
