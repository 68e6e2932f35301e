//! NVMe/TCP PDUs (NVMe/TCP Transport Specification 1.0): ICReq/ICResp,
//! CapsuleCmd/CapsuleResp, H2CData, C2HData, R2T, H2C/C2H TermReq, header and data
//! digests (CRC32C) and PDU data alignment.
//!
//! [`Pdu`] is a zero-copy view over one whole PDU (`plen` bytes). Its
//! [`Pdu::check_len`] trusts nothing: it checks the common header (`hlen` against
//! the PDU type, `pdo`, `plen`, the digest flags) so that afterwards every accessor
//! is infallible. [`PduRepr`] holds the meaningful header fields of each PDU type;
//! [`PduRepr::parse`] checks semantics (reserved values, flags allowed for the type),
//! [`PduRepr::emit`] writes a whole PDU (header, header digest, alignment padding,
//! data, data digest) into a buffer of exactly [`PduRepr::buffer_len`] bytes.
//!
//! Digests: a 4-byte CRC32C (Castagnoli) stored little-endian, as Linux and SPDK do.
//! The header digest covers the `hlen` header bytes; the data digest covers the data
//! (without padding). Which PDU types may carry which digest is in [`PduType`].

use core::fmt;

use crate::{Error, Result};

/// Length of the common header (CH) every PDU starts with.
pub const CH_LEN: usize = 8;
/// Length of a header or data digest.
pub const DIGEST_LEN: usize = 4;
/// Length of the ICReq/ICResp PDU.
pub const IC_LEN: usize = 128;
/// Header length of a CapsuleCmd (CH + 64-byte SQE).
pub const CAPSULE_CMD_HLEN: usize = 72;
/// Header length of a CapsuleResp (CH + 16-byte CQE).
pub const CAPSULE_RESP_HLEN: usize = 24;
/// Header length of H2CData, C2HData, R2T and the term requests.
pub const DATA_HLEN: usize = 24;
/// Largest term request PDU (header + the offending PDU header).
pub const TERM_REQ_MAX_LEN: usize = 152;
/// The only PDU format version defined (PFV 0).
pub const PFV_1_0: u16 = 0;

/// Byte ranges of the fields (offsets from the start of the PDU).
mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const HLEN: usize = 2;
    pub const PDO: usize = 3;
    pub const PLEN: Range<usize> = 4..8;
    // ICReq / ICResp
    pub const PFV: Range<usize> = 8..10;
    pub const PDA: usize = 10; // HPDA in ICReq, CPDA in ICResp
    pub const DGST: usize = 11;
    pub const MAXR2T_MAXH2C: Range<usize> = 12..16; // MAXR2T in ICReq, MAXH2CDATA in ICResp
                                                    // CapsuleCmd / CapsuleResp
    pub const SQE: Range<usize> = 8..72;
    pub const CQE: Range<usize> = 8..24;
    // H2CData / C2HData / R2T
    pub const CCCID: Range<usize> = 8..10;
    pub const TTAG: Range<usize> = 10..12;
    pub const DATAO: Range<usize> = 12..16;
    pub const DATAL: Range<usize> = 16..20;
    // TermReq
    pub const FES: Range<usize> = 8..10;
    pub const FEI: Range<usize> = 10..14;
}

/// PDU type codes. Unknown codes survive as `Unknown(raw)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PduType {
    IcReq,
    IcResp,
    H2cTermReq,
    C2hTermReq,
    CapsuleCmd,
    CapsuleResp,
    H2cData,
    C2hData,
    R2t,
    Unknown(u8),
}

impl From<u8> for PduType {
    fn from(v: u8) -> Self {
        match v {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2cTermReq,
            0x03 => PduType::C2hTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2cData,
            0x07 => PduType::C2hData,
            0x09 => PduType::R2t,
            x => PduType::Unknown(x),
        }
    }
}

impl From<PduType> for u8 {
    fn from(t: PduType) -> u8 {
        match t {
            PduType::IcReq => 0x00,
            PduType::IcResp => 0x01,
            PduType::H2cTermReq => 0x02,
            PduType::C2hTermReq => 0x03,
            PduType::CapsuleCmd => 0x04,
            PduType::CapsuleResp => 0x05,
            PduType::H2cData => 0x06,
            PduType::C2hData => 0x07,
            PduType::R2t => 0x09,
            PduType::Unknown(x) => x,
        }
    }
}

impl PduType {
    /// The fixed header length (`hlen`) of this type; `None` for unknown types.
    pub const fn hlen(self) -> Option<usize> {
        match self {
            PduType::IcReq | PduType::IcResp => Some(IC_LEN),
            PduType::CapsuleCmd => Some(CAPSULE_CMD_HLEN),
            PduType::CapsuleResp => Some(CAPSULE_RESP_HLEN),
            PduType::H2cTermReq
            | PduType::C2hTermReq
            | PduType::H2cData
            | PduType::C2hData
            | PduType::R2t => Some(DATA_HLEN),
            PduType::Unknown(_) => None,
        }
    }
    /// Whether this type may carry a header digest.
    pub const fn may_have_hdgst(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd
                | PduType::CapsuleResp
                | PduType::H2cData
                | PduType::C2hData
                | PduType::R2t
        )
    }
    /// Whether this type may carry data with a data digest.
    pub const fn may_have_ddgst(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd | PduType::H2cData | PduType::C2hData
        )
    }
    /// Whether this type may carry data at all.
    pub const fn may_have_data(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd
                | PduType::H2cData
                | PduType::C2hData
                | PduType::H2cTermReq
                | PduType::C2hTermReq
        )
    }
    /// tshark's name for the type.
    pub const fn name(self) -> &'static str {
        match self {
            PduType::IcReq => "ICReq",
            PduType::IcResp => "ICResp",
            PduType::H2cTermReq => "H2CTermReq",
            PduType::C2hTermReq => "C2HTermReq",
            PduType::CapsuleCmd => "CapsuleCommand",
            PduType::CapsuleResp => "CapsuleResponse",
            PduType::H2cData => "H2CData",
            PduType::C2hData => "C2HData",
            PduType::R2t => "Ready To Transfer",
            PduType::Unknown(_) => "Unknown",
        }
    }
}

/// Common-header flag bits.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 0x01;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 0x02;
    /// H2CData/C2HData: last data PDU of the transfer.
    pub const LAST_PDU: u8 = 0x04;
    /// C2HData: the command succeeded, no CapsuleResp follows.
    pub const SUCCESS: u8 = 0x08;
}

/// Fatal Error Status of a term request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fes {
    /// FEI = byte offset of the bad field in the offending PDU header.
    InvalidHeaderField,
    PduSequenceError,
    HeaderDigestError,
    DataTransferOutOfRange,
    /// R2T limit exceeded (more outstanding R2Ts than MAXR2T).
    R2tLimitExceeded,
    /// FEI = byte offset of the unsupported parameter.
    UnsupportedParameter,
    Unknown(u16),
}

impl From<u16> for Fes {
    fn from(v: u16) -> Self {
        match v {
            0x01 => Fes::InvalidHeaderField,
            0x02 => Fes::PduSequenceError,
            0x03 => Fes::HeaderDigestError,
            0x04 => Fes::DataTransferOutOfRange,
            0x05 => Fes::R2tLimitExceeded,
            0x06 => Fes::UnsupportedParameter,
            x => Fes::Unknown(x),
        }
    }
}

impl From<Fes> for u16 {
    fn from(f: Fes) -> u16 {
        match f {
            Fes::InvalidHeaderField => 0x01,
            Fes::PduSequenceError => 0x02,
            Fes::HeaderDigestError => 0x03,
            Fes::DataTransferOutOfRange => 0x04,
            Fes::R2tLimitExceeded => 0x05,
            Fes::UnsupportedParameter => 0x06,
            Fes::Unknown(x) => x,
        }
    }
}

/// CRC32C of `data`, the NVMe/TCP header/data digest.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32C over more bytes (for data that arrives in pieces).
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// Reads the common header of a buffer that holds at least [`CH_LEN`] bytes:
/// `(type, flags, hlen, pdo, plen)`. Used by framers to learn how many bytes the
/// whole PDU needs before viewing it.
pub fn peek_common_header(buf: &[u8]) -> Result<(PduType, u8, u8, u8, u32)> {
    if buf.len() < CH_LEN {
        return Err(Error::Truncated);
    }
    let plen = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    Ok((PduType::from(buf[0]), buf[1], buf[2], buf[3], plen))
}

/// Offset of the data in a PDU with a header of `hlen` bytes, a header digest
/// (`hdgst`) and a PDU data alignment of `pda` (0's based, in dwords: the data must
/// start at a multiple of `(pda + 1) * 4` bytes when `pda > 0`).
pub const fn data_offset(hlen: usize, hdgst: bool, pda: u8) -> usize {
    let raw = hlen + if hdgst { DIGEST_LEN } else { 0 };
    if pda == 0 {
        raw
    } else {
        let a = (pda as usize + 1) * 4;
        raw.div_ceil(a) * a
    }
}

/// A zero-copy view of one whole NVMe/TCP PDU.
#[derive(Debug, Clone)]
pub struct Pdu<B> {
    buf: B,
}

impl<B: AsRef<[u8]>> Pdu<B> {
    /// Wraps without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buf: B) -> Self {
        Pdu { buf }
    }

    /// Wraps and runs [`Pdu::check_len`].
    pub fn new_checked(buf: B) -> Result<Self> {
        let p = Pdu { buf };
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer against the common header. Trusts nothing: `plen` must equal
    /// the buffer length, `hlen` must be the fixed length of the (known) type, the
    /// header digest (if flagged) must fit, `pdo` (if non-zero) must lie between the
    /// end of the header(+digest) and the data digest, and the data digest must fit.
    /// Unknown PDU types pass only the length checks (callers reject them).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buf.as_ref();
        if b.len() < CH_LEN {
            return Err(Error::Truncated);
        }
        let plen = self.plen() as usize;
        if plen > b.len() {
            return Err(Error::Truncated);
        }
        if plen != b.len() {
            return Err(Error::BadLength);
        }
        let hlen = self.hlen() as usize;
        let ty = self.pdu_type();
        match ty.hlen() {
            Some(want) if want != hlen => return Err(Error::BadLength),
            Some(_) => {}
            None if hlen < CH_LEN => return Err(Error::BadLength),
            None => {}
        }
        if hlen > plen {
            return Err(Error::BadLength);
        }
        let f = self.flags();
        let hd = if f & flags::HDGSTF != 0 {
            DIGEST_LEN
        } else {
            0
        };
        let dd = if f & flags::DDGSTF != 0 {
            DIGEST_LEN
        } else {
            0
        };
        if hlen + hd > plen {
            return Err(Error::BadLength);
        }
        let pdo = self.pdo() as usize;
        let start = if pdo == 0 { hlen + hd } else { pdo };
        if start < hlen + hd {
            return Err(Error::BadLength);
        }
        if start > plen || plen - start < dd {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    pub fn pdu_type(&self) -> PduType {
        PduType::from(self.buf.as_ref()[field::TYPE])
    }
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    pub fn hlen(&self) -> u8 {
        self.buf.as_ref()[field::HLEN]
    }
    pub fn pdo(&self) -> u8 {
        self.buf.as_ref()[field::PDO]
    }
    pub fn plen(&self) -> u32 {
        le32(&self.buf.as_ref()[field::PLEN])
    }
    fn hd_len(&self) -> usize {
        if self.flags() & flags::HDGSTF != 0 {
            DIGEST_LEN
        } else {
            0
        }
    }
    fn dd_len(&self) -> usize {
        if self.flags() & flags::DDGSTF != 0 {
            DIGEST_LEN
        } else {
            0
        }
    }
    /// The `hlen` header bytes (what the header digest covers).
    pub fn header(&self) -> &[u8] {
        &self.buf.as_ref()[..self.hlen() as usize]
    }
    /// The header digest as carried, if HDGSTF is set.
    pub fn hdgst(&self) -> Option<u32> {
        let h = self.hlen() as usize;
        (self.hd_len() != 0).then(|| le32(&self.buf.as_ref()[h..h + DIGEST_LEN]))
    }
    /// The data digest as carried, if DDGSTF is set.
    pub fn ddgst(&self) -> Option<u32> {
        let b = self.buf.as_ref();
        let p = self.plen() as usize;
        (self.dd_len() != 0).then(|| le32(&b[p - DIGEST_LEN..p]))
    }
    fn data_range(&self) -> core::ops::Range<usize> {
        let hlen = self.hlen() as usize;
        let pdo = self.pdo() as usize;
        let start = if pdo == 0 { hlen + self.hd_len() } else { pdo };
        start..self.plen() as usize - self.dd_len()
    }
    /// Length of the data (between `pdo` and the data digest).
    pub fn data_len(&self) -> usize {
        self.data_range().len()
    }
    /// Checks the header digest (if present).
    pub fn verify_hdgst(&self) -> Result<()> {
        match self.hdgst() {
            Some(d) if d != crc32c(self.header()) => Err(Error::BadChecksum),
            _ => Ok(()),
        }
    }
    /// Checks the data digest (if present).
    pub fn verify_ddgst(&self) -> Result<()> {
        match self.ddgst() {
            Some(d) if d != crc32c(&self.buf.as_ref()[self.data_range()]) => {
                Err(Error::BadChecksum)
            }
            _ => Ok(()),
        }
    }
    // type-specific fields (meaningful only for the matching type)
    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buf.as_ref()[r];
        u16::from_le_bytes([b[0], b[1]])
    }
    fn u32_at(&self, r: core::ops::Range<usize>) -> u32 {
        le32(&self.buf.as_ref()[r])
    }
}

impl<'a, B: AsRef<[u8]> + ?Sized> Pdu<&'a B> {
    /// The data of the PDU (in-capsule data, H2C/C2H data, or the offending header
    /// of a term request), borrowed for the buffer's lifetime.
    pub fn data(&self) -> &'a [u8] {
        let r = self.data_range();
        &self.buf.as_ref()[r]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Pdu<B> {
    /// The data area, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let r = self.data_range();
        &mut self.buf.as_mut()[r]
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Which digests a PDU carries (decided by the connection's negotiation and by
/// whether the PDU type allows them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// The meaningful header fields of one PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PduRepr {
    IcReq {
        pfv: u16,
        /// Host PDU data alignment (0's based dwords) wanted for C2H data.
        hpda: u8,
        hdgst: bool,
        ddgst: bool,
        /// Maximum outstanding R2Ts per command, 0's based.
        maxr2t: u32,
    },
    IcResp {
        pfv: u16,
        /// Controller PDU data alignment wanted for H2C data.
        cpda: u8,
        hdgst: bool,
        ddgst: bool,
        /// Largest H2CData data length the controller accepts (>= 4096).
        maxh2cdata: u32,
    },
    H2cTermReq {
        fes: Fes,
        fei: u32,
    },
    C2hTermReq {
        fes: Fes,
        fei: u32,
    },
    CapsuleCmd {
        sqe: [u8; 64],
    },
    CapsuleResp {
        cqe: [u8; 16],
    },
    H2cData {
        cccid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        last: bool,
    },
    C2hData {
        cccid: u16,
        datao: u32,
        datal: u32,
        last: bool,
        success: bool,
    },
    R2t {
        cccid: u16,
        ttag: u16,
        r2to: u32,
        r2tl: u32,
    },
}

impl PduRepr {
    /// The PDU type of this repr.
    pub const fn pdu_type(&self) -> PduType {
        match self {
            PduRepr::IcReq { .. } => PduType::IcReq,
            PduRepr::IcResp { .. } => PduType::IcResp,
            PduRepr::H2cTermReq { .. } => PduType::H2cTermReq,
            PduRepr::C2hTermReq { .. } => PduType::C2hTermReq,
            PduRepr::CapsuleCmd { .. } => PduType::CapsuleCmd,
            PduRepr::CapsuleResp { .. } => PduType::CapsuleResp,
            PduRepr::H2cData { .. } => PduType::H2cData,
            PduRepr::C2hData { .. } => PduType::C2hData,
            PduRepr::R2t { .. } => PduType::R2t,
        }
    }

    /// Parses a checked PDU. Verifies the header digest if present (the data digest
    /// is left to [`Pdu::verify_ddgst`], as the caller may check it as data streams).
    /// Rejects unknown types, flags not allowed for the type, digests on types that
    /// cannot carry them, data on types that cannot carry it, and H2C/C2H data
    /// whose `datal` disagrees with the data carried.
    pub fn parse<B: AsRef<[u8]>>(p: &Pdu<B>) -> Result<PduRepr> {
        let ty = p.pdu_type();
        if let PduType::Unknown(_) = ty {
            return Err(Error::BadOpcode);
        }
        let f = p.flags();
        if f & flags::HDGSTF != 0 && !ty.may_have_hdgst() {
            return Err(Error::Malformed);
        }
        if f & flags::DDGSTF != 0 && !ty.may_have_ddgst() {
            return Err(Error::Malformed);
        }
        if !ty.may_have_data() && p.data_len() != 0 {
            return Err(Error::BadLength);
        }
        if f & flags::DDGSTF != 0 && p.data_len() == 0 {
            return Err(Error::Malformed);
        }
        p.verify_hdgst()?;
        let data_flags_ok = match ty {
            PduType::H2cData => f & !(flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU) == 0,
            PduType::C2hData => {
                f & !(flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU | flags::SUCCESS) == 0
                    && (f & flags::SUCCESS == 0 || f & flags::LAST_PDU != 0)
            }
            _ => f & !(flags::HDGSTF | flags::DDGSTF) == 0,
        };
        if !data_flags_ok {
            return Err(Error::Malformed);
        }
        let b = p.buf.as_ref();
        Ok(match ty {
            PduType::IcReq | PduType::IcResp => {
                let pfv = p.u16_at(field::PFV);
                if pfv != PFV_1_0 {
                    return Err(Error::BadVersion);
                }
                let pda = b[field::PDA];
                if pda > 31 {
                    return Err(Error::Malformed);
                }
                let dg = b[field::DGST];
                let (hdgst, ddgst) = (dg & 1 != 0, dg & 2 != 0);
                let v = p.u32_at(field::MAXR2T_MAXH2C);
                if ty == PduType::IcReq {
                    PduRepr::IcReq {
                        pfv,
                        hpda: pda,
                        hdgst,
                        ddgst,
                        maxr2t: v,
                    }
                } else {
                    if v < 4096 || v & 3 != 0 {
                        return Err(Error::Malformed);
                    }
                    PduRepr::IcResp {
                        pfv,
                        cpda: pda,
                        hdgst,
                        ddgst,
                        maxh2cdata: v,
                    }
                }
            }
            PduType::H2cTermReq | PduType::C2hTermReq => {
                if p.plen() as usize > TERM_REQ_MAX_LEN {
                    return Err(Error::BadLength);
                }
                let fes = Fes::from(p.u16_at(field::FES));
                let fei = p.u32_at(field::FEI);
                if ty == PduType::H2cTermReq {
                    PduRepr::H2cTermReq { fes, fei }
                } else {
                    PduRepr::C2hTermReq { fes, fei }
                }
            }
            PduType::CapsuleCmd => {
                let mut sqe = [0u8; 64];
                sqe.copy_from_slice(&b[field::SQE]);
                PduRepr::CapsuleCmd { sqe }
            }
            PduType::CapsuleResp => {
                let mut cqe = [0u8; 16];
                cqe.copy_from_slice(&b[field::CQE]);
                PduRepr::CapsuleResp { cqe }
            }
            PduType::H2cData | PduType::C2hData => {
                let cccid = p.u16_at(field::CCCID);
                let ttag = p.u16_at(field::TTAG);
                let datao = p.u32_at(field::DATAO);
                let datal = p.u32_at(field::DATAL);
                if datal as usize != p.data_len() || datal == 0 {
                    return Err(Error::BadLength);
                }
                let last = f & flags::LAST_PDU != 0;
                if ty == PduType::H2cData {
                    PduRepr::H2cData {
                        cccid,
                        ttag,
                        datao,
                        datal,
                        last,
                    }
                } else {
                    PduRepr::C2hData {
                        cccid,
                        datao,
                        datal,
                        last,
                        success: f & flags::SUCCESS != 0,
                    }
                }
            }
            PduType::R2t => PduRepr::R2t {
                cccid: p.u16_at(field::CCCID),
                ttag: p.u16_at(field::TTAG),
                r2to: p.u32_at(field::DATAO),
                r2tl: p.u32_at(field::DATAL),
            },
            PduType::Unknown(_) => return Err(Error::BadOpcode),
        })
    }

    /// The header length of this PDU type.
    pub const fn hlen(&self) -> usize {
        match self.pdu_type().hlen() {
            Some(h) => h,
            None => CH_LEN,
        }
    }

    /// Digests actually carried: those asked for, limited to what the type allows
    /// (a data digest only with data).
    pub fn effective_digests(&self, dg: Digests, data_len: usize) -> Digests {
        let t = self.pdu_type();
        Digests {
            header: dg.header && t.may_have_hdgst(),
            data: dg.data && t.may_have_ddgst() && data_len > 0,
        }
    }

    /// Offset of the data in the emitted PDU (`pdo`, or `hlen`+digest when no data).
    pub fn data_offset(&self, dg: Digests, data_len: usize, pda: u8) -> usize {
        let e = self.effective_digests(dg, data_len);
        if data_len == 0 {
            self.hlen() + if e.header { DIGEST_LEN } else { 0 }
        } else {
            data_offset(self.hlen(), e.header, pda)
        }
    }

    /// Total PDU length (`plen`) with `data_len` bytes of data.
    pub fn buffer_len(&self, dg: Digests, data_len: usize, pda: u8) -> usize {
        let e = self.effective_digests(dg, data_len);
        self.data_offset(dg, data_len, pda) + data_len + if e.data { DIGEST_LEN } else { 0 }
    }

    /// Writes the header, header digest and alignment padding into `buf`, which must
    /// be at least `data_offset` bytes; `plen` and `pdo` are computed for `data_len`
    /// bytes of data. Returns the data offset. The caller then writes the data and,
    /// if [`PduRepr::effective_digests`] says so, the data digest
    /// ([`crc32c`] little-endian) after it.
    pub fn emit_header(&self, buf: &mut [u8], dg: Digests, data_len: usize, pda: u8) -> usize {
        let e = self.effective_digests(dg, data_len);
        let hlen = self.hlen();
        let doff = self.data_offset(dg, data_len, pda);
        let plen = self.buffer_len(dg, data_len, pda);
        buf[..doff].fill(0);
        buf[field::TYPE] = self.pdu_type().into();
        let mut f = 0u8;
        if e.header {
            f |= flags::HDGSTF;
        }
        if e.data {
            f |= flags::DDGSTF;
        }
        buf[field::HLEN] = hlen as u8;
        // pdo is 0 when there is no data (the spec requires it for PDUs without data)
        buf[field::PDO] = if data_len > 0 { doff as u8 } else { 0 };
        buf[field::PLEN].copy_from_slice(&(plen as u32).to_le_bytes());
        match *self {
            PduRepr::IcReq {
                pfv,
                hpda: pda,
                hdgst,
                ddgst,
                maxr2t: v,
            }
            | PduRepr::IcResp {
                pfv,
                cpda: pda,
                hdgst,
                ddgst,
                maxh2cdata: v,
            } => {
                buf[field::PFV].copy_from_slice(&pfv.to_le_bytes());
                buf[field::PDA] = pda;
                buf[field::DGST] = u8::from(hdgst) | (u8::from(ddgst) << 1);
                buf[field::MAXR2T_MAXH2C].copy_from_slice(&v.to_le_bytes());
            }
            PduRepr::H2cTermReq { fes, fei } | PduRepr::C2hTermReq { fes, fei } => {
                buf[field::FES].copy_from_slice(&u16::from(fes).to_le_bytes());
                buf[field::FEI].copy_from_slice(&fei.to_le_bytes());
            }
            PduRepr::CapsuleCmd { sqe } => buf[field::SQE].copy_from_slice(&sqe),
            PduRepr::CapsuleResp { cqe } => buf[field::CQE].copy_from_slice(&cqe),
            PduRepr::H2cData {
                cccid,
                ttag,
                datao,
                datal,
                last,
            } => {
                if last {
                    f |= flags::LAST_PDU;
                }
                put_data_fields(buf, cccid, ttag, datao, datal);
            }
            PduRepr::C2hData {
                cccid,
                datao,
                datal,
                last,
                success,
            } => {
                if last {
                    f |= flags::LAST_PDU;
                }
                if success {
                    f |= flags::SUCCESS;
                }
                put_data_fields(buf, cccid, 0, datao, datal);
            }
            PduRepr::R2t {
                cccid,
                ttag,
                r2to,
                r2tl,
            } => put_data_fields(buf, cccid, ttag, r2to, r2tl),
        }
        buf[field::FLAGS] = f;
        if e.header {
            let d = crc32c(&buf[..hlen]);
            buf[hlen..hlen + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
        }
        doff
    }

    /// Emits a whole PDU with `data` into `buf` of exactly
    /// [`PduRepr::buffer_len`]`(dg, data.len(), pda)` bytes.
    pub fn emit(&self, buf: &mut [u8], data: &[u8], dg: Digests, pda: u8) {
        let doff = self.emit_header(buf, dg, data.len(), pda);
        buf[doff..doff + data.len()].copy_from_slice(data);
        if self.effective_digests(dg, data.len()).data {
            let d = crc32c(data);
            let end = doff + data.len();
            buf[end..end + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
        }
    }

    /// Appends a whole PDU with `data` to `out`.
    pub fn emit_to_vec(&self, out: &mut Vec<u8>, data: &[u8], dg: Digests, pda: u8) {
        let start = out.len();
        out.resize(start + self.buffer_len(dg, data.len(), pda), 0);
        self.emit(&mut out[start..], data, dg, pda);
    }
}

fn put_data_fields(buf: &mut [u8], cccid: u16, ttag: u16, o: u32, l: u32) {
    buf[field::CCCID].copy_from_slice(&cccid.to_le_bytes());
    buf[field::TTAG].copy_from_slice(&ttag.to_le_bytes());
    buf[field::DATAO].copy_from_slice(&o.to_le_bytes());
    buf[field::DATAL].copy_from_slice(&l.to_le_bytes());
}

impl fmt::Display for PduRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NVMe/TCP {}", self.pdu_type().name())?;
        match *self {
            PduRepr::IcReq {
                pfv,
                hpda,
                hdgst,
                ddgst,
                maxr2t,
            } => write!(
                f,
                " pfv={pfv} hpda={hpda} hdgst={hdgst} ddgst={ddgst} maxr2t={maxr2t}"
            ),
            PduRepr::IcResp {
                pfv,
                cpda,
                hdgst,
                ddgst,
                maxh2cdata,
            } => write!(
                f,
                " pfv={pfv} cpda={cpda} hdgst={hdgst} ddgst={ddgst} maxh2cdata={maxh2cdata}"
            ),
            PduRepr::H2cTermReq { fes, fei } | PduRepr::C2hTermReq { fes, fei } => {
                write!(f, " fes={fes:?} fei={fei:#x}")
            }
            PduRepr::CapsuleCmd { sqe } => write!(
                f,
                " opc={:#04x} cid={}",
                sqe[0],
                u16::from_le_bytes([sqe[2], sqe[3]])
            ),
            PduRepr::CapsuleResp { cqe } => write!(
                f,
                " cid={} status={:#06x}",
                u16::from_le_bytes([cqe[12], cqe[13]]),
                u16::from_le_bytes([cqe[14], cqe[15]]) >> 1
            ),
            PduRepr::H2cData {
                cccid,
                ttag,
                datao,
                datal,
                last,
            } => write!(
                f,
                " cccid={cccid} ttag={ttag} datao={datao} datal={datal} last={last}"
            ),
            PduRepr::C2hData {
                cccid,
                datao,
                datal,
                last,
                success,
            } => write!(
                f,
                " cccid={cccid} datao={datao} datal={datal} last={last} success={success}"
            ),
            PduRepr::R2t {
                cccid,
                ttag,
                r2to,
                r2tl,
            } => write!(f, " cccid={cccid} ttag={ttag} r2to={r2to} r2tl={r2tl}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Bytes from /work/shared/oracles/tshark/nvmetcp-icreq-connect-read.pcap (frames 4,
    // 6, 9, 10 of the port-4420 conversation), decoded by tshark 4.0 as NVMe/TCP.
    fn icreq_bytes() -> Vec<u8> {
        let mut v = hex("0000800080000000");
        v.resize(128, 0);
        v
    }
    fn icresp_bytes() -> Vec<u8> {
        let mut v = hex("01008000800000000000000000200000");
        v.resize(128, 0);
        v
    }
    const CQE_PDU: &str = "050018001800000000000000000000000000010001000000";
    const READ_PDU: &str = "04004800480000000240020001000000000000000000000000000000000000000000000000000000001000000000005a001000000000000007000000000000000000000000000000";

    #[test]
    fn deconstruct_icreq() {
        let b = icreq_bytes();
        let p = Pdu::new_checked(&b[..]).unwrap();
        assert_eq!(p.pdu_type(), PduType::IcReq);
        assert_eq!(p.hlen(), 128);
        assert_eq!(p.pdo(), 0);
        assert_eq!(p.plen(), 128);
        assert_eq!(p.data_len(), 0);
        assert_eq!(
            PduRepr::parse(&p).unwrap(),
            PduRepr::IcReq {
                pfv: 0,
                hpda: 0,
                hdgst: false,
                ddgst: false,
                maxr2t: 0
            }
        );
    }

    #[test]
    fn icresp_parse_emit_roundtrip_real_bytes() {
        let b = icresp_bytes();
        let p = Pdu::new_checked(&b[..]).unwrap();
        let r = PduRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            PduRepr::IcResp {
                pfv: 0,
                cpda: 0,
                hdgst: false,
                ddgst: false,
                maxh2cdata: 8192
            }
        );
        let mut out = vec![0xffu8; r.buffer_len(Digests::default(), 0, 0)];
        r.emit(&mut out, &[], Digests::default(), 0);
        assert_eq!(out, b);
    }

    #[test]
    fn capsule_resp_and_read_cmd_real_bytes() {
        let b = hex(CQE_PDU);
        let p = Pdu::new_checked(&b[..]).unwrap();
        let r = PduRepr::parse(&p).unwrap();
        match r {
            PduRepr::CapsuleResp { cqe } => {
                assert_eq!(u16::from_le_bytes([cqe[12], cqe[13]]), 1); // CID
                assert_eq!(u16::from_le_bytes([cqe[10], cqe[11]]), 1); // SQID
            }
            _ => panic!("{r:?}"),
        }
        let mut out = Vec::new();
        r.emit_to_vec(&mut out, &[], Digests::default(), 0);
        assert_eq!(out, b);

        let b = hex(READ_PDU);
        let p = Pdu::new_checked(&b[..]).unwrap();
        let r = PduRepr::parse(&p).unwrap();
        let PduRepr::CapsuleCmd { sqe } = r else {
            panic!()
        };
        assert_eq!(sqe[0], 0x02); // NVM Read
        assert_eq!(u16::from_le_bytes([sqe[2], sqe[3]]), 2); // CID 2
        assert_eq!(sqe[39], 0x5a); // SGL transport data block
        assert_eq!(r.to_string(), "NVMe/TCP CapsuleCommand opc=0x02 cid=2");
        let mut out = Vec::new();
        r.emit_to_vec(&mut out, &[], Digests::default(), 0);
        assert_eq!(out, b);
    }

    #[test]
    fn connect_capsule_with_in_capsule_data() {
        // frame 8: CapsuleCmd hlen 72, pdo 72, plen 1096 (1024 B Connect data)
        let mut sqe = [0u8; 64];
        sqe[0] = 0x7f;
        sqe[1] = 0x40;
        sqe[2] = 1;
        sqe[4] = 1;
        let mut data = vec![0u8; 1024];
        data[16] = 0xff;
        data[17] = 0xff;
        let r = PduRepr::CapsuleCmd { sqe };
        let mut out = Vec::new();
        r.emit_to_vec(&mut out, &data, Digests::default(), 0);
        assert_eq!(&out[..8], &hex("0400484848040000")[..]);
        let p = Pdu::new_checked(&out[..]).unwrap();
        assert_eq!(p.data(), &data[..]);
    }

    #[test]
    fn digests_and_alignment() {
        let sqe = [7u8; 64];
        let data = vec![0xa5u8; 100];
        let r = PduRepr::CapsuleCmd { sqe };
        let dg = Digests {
            header: true,
            data: true,
        };
        let mut out = Vec::new();
        r.emit_to_vec(&mut out, &data, dg, 3); // 16-byte alignment
        assert_eq!(out[1], flags::HDGSTF | flags::DDGSTF);
        assert_eq!(out[3], 80); // 72 + 4 -> 80
        assert_eq!(out.len(), 80 + 100 + 4);
        let p = Pdu::new_checked(&out[..]).unwrap();
        assert_eq!(PduRepr::parse(&p).unwrap(), r);
        p.verify_ddgst().unwrap();
        assert_eq!(p.data(), &data[..]);
        // corrupt header -> header digest error; corrupt data -> data digest error
        let mut bad = out.clone();
        bad[20] ^= 1;
        assert_eq!(
            PduRepr::parse(&Pdu::new_checked(&bad[..]).unwrap()),
            Err(Error::BadChecksum)
        );
        let mut bad = out.clone();
        bad[90] ^= 1;
        let p = Pdu::new_checked(&bad[..]).unwrap();
        assert!(PduRepr::parse(&p).is_ok());
        assert_eq!(p.verify_ddgst(), Err(Error::BadChecksum));
        // known CRC32C check value
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn data_pdus_and_r2t_roundtrip() {
        let dg = Digests {
            header: true,
            data: false,
        };
        for r in [
            PduRepr::H2cData {
                cccid: 9,
                ttag: 3,
                datao: 4096,
                datal: 16,
                last: true,
            },
            PduRepr::C2hData {
                cccid: 9,
                datao: 0,
                datal: 16,
                last: true,
                success: true,
            },
        ] {
            let mut out = Vec::new();
            r.emit_to_vec(&mut out, &[1u8; 16], dg, 0);
            let p = Pdu::new_checked(&out[..]).unwrap();
            assert_eq!(PduRepr::parse(&p).unwrap(), r);
        }
        let r = PduRepr::R2t {
            cccid: 1,
            ttag: 2,
            r2to: 0,
            r2tl: 65536,
        };
        let mut out = Vec::new();
        r.emit_to_vec(&mut out, &[], dg, 0);
        assert_eq!(out.len(), 28);
        assert_eq!(
            PduRepr::parse(&Pdu::new_checked(&out[..]).unwrap()).unwrap(),
            r
        );
        let t = PduRepr::C2hTermReq {
            fes: Fes::HeaderDigestError,
            fei: 0,
        };
        let mut out = Vec::new();
        t.emit_to_vec(&mut out, &[0u8; 24], dg, 0);
        assert_eq!(out[1], 0, "term requests carry no digests");
        assert_eq!(
            PduRepr::parse(&Pdu::new_checked(&out[..]).unwrap()).unwrap(),
            t
        );
    }

    #[test]
    fn impossible_lengths() {
        let mut b = icreq_bytes();
        assert_eq!(Pdu::new_checked(&b[..100]).err(), Some(Error::Truncated));
        b[2] = 72; // wrong hlen for ICReq
        assert_eq!(Pdu::new_checked(&b[..]).err(), Some(Error::BadLength));
        let mut b = hex(CQE_PDU);
        b[3] = 30; // pdo beyond plen
        assert_eq!(Pdu::new_checked(&b[..]).err(), Some(Error::BadLength));
        let mut b = hex(CQE_PDU);
        b[3] = 10; // pdo inside the header
        assert_eq!(Pdu::new_checked(&b[..]).err(), Some(Error::BadLength));
        let mut b = hex(CQE_PDU);
        b[1] = flags::HDGSTF; // digest does not fit
        assert_eq!(Pdu::new_checked(&b[..]).err(), Some(Error::BadLength));
        let mut b = hex(CQE_PDU);
        b[0] = 0x42;
        let p = Pdu::new_checked(&b[..]).unwrap();
        assert_eq!(p.pdu_type(), PduType::Unknown(0x42));
        assert_eq!(PduRepr::parse(&p), Err(Error::BadOpcode));
        // SUCCESS without LAST_PDU is malformed
        let mut out = Vec::new();
        PduRepr::C2hData {
            cccid: 1,
            datao: 0,
            datal: 4,
            last: false,
            success: false,
        }
        .emit_to_vec(&mut out, &[0; 4], Digests::default(), 0);
        out[1] |= flags::SUCCESS;
        assert_eq!(
            PduRepr::parse(&Pdu::new_checked(&out[..]).unwrap()),
            Err(Error::Malformed)
        );
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn no_panic_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
                let _ = peek_common_header(&b);
                if let Ok(p) = Pdu::new_checked(&b[..]) {
                    let _ = p.data();
                    let _ = p.verify_ddgst();
                    let _ = p.hdgst();
                    let _ = PduRepr::parse(&p);
                }
            }

            #[test]
            fn no_panic_on_mutated_header(ty in 0u8..10, fl in any::<u8>(), hlen in any::<u8>(),
                                          pdo in any::<u8>(), extra in 0usize..200) {
                let len = (hlen as usize).max(8) + extra;
                let mut b = vec![0u8; len];
                b[0] = ty; b[1] = fl; b[2] = hlen; b[3] = pdo;
                b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
                if let Ok(p) = Pdu::new_checked(&b[..]) {
                    let _ = p.data();
                    let _ = PduRepr::parse(&p);
                }
            }

            #[test]
            fn data_pdu_roundtrip(cccid in any::<u16>(), ttag in any::<u16>(), datao in any::<u32>(),
                                  len in 1usize..600, hd in any::<bool>(), dd in any::<bool>(),
                                  pda in 0u8..8, last in any::<bool>()) {
                let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let r = PduRepr::H2cData { cccid, ttag, datao, datal: len as u32, last };
                let dg = Digests { header: hd, data: dd };
                let mut out = Vec::new();
                r.emit_to_vec(&mut out, &data, dg, pda);
                prop_assert_eq!(out.len(), r.buffer_len(dg, len, pda));
                let p = Pdu::new_checked(&out[..]).unwrap();
                prop_assert_eq!(PduRepr::parse(&p).unwrap(), r);
                prop_assert!(p.verify_ddgst().is_ok());
                prop_assert_eq!(p.data(), &data[..]);
                if pda > 0 { prop_assert_eq!(p.pdo() as usize % ((pda as usize + 1) * 4), 0); }
            }
        }
    }
}
