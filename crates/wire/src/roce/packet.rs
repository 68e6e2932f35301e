//! A whole RoCE transport packet (BTH .. ICRC) as a `Repr`.

use core::fmt;

use super::headers::*;
use super::opcode::{ExtHdr, OpFlags, OpInfo, Opcode};
use super::{Psn, ICRC_LEN};
use crate::{Error, Result};

/// NAK codes (AETH syndrome `011xxxxx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSeqError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    Unknown(u8),
}

impl NakCode {
    pub fn from_raw(v: u8) -> NakCode {
        match v & 0x1f {
            0 => NakCode::PsnSeqError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Unknown(x),
        }
    }
    pub fn raw(self) -> u8 {
        match self {
            NakCode::PsnSeqError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Unknown(x) => x & 0x1f,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// ACK with a credit count (rxe always sends 0x1f, "unlimited").
    Ack {
        credits: u8,
    },
    /// RNR NAK with the encoded minimum RNR timer (5 bits, see the IBA table).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
    /// Reserved syndrome values, kept raw.
    Reserved(u8),
}

impl AethSyndrome {
    /// rxe's `AETH_ACK_UNLIMITED`.
    pub const ACK: AethSyndrome = AethSyndrome::Ack { credits: 0x1f };
}

impl From<u8> for AethSyndrome {
    fn from(v: u8) -> Self {
        match v >> 5 {
            0 => AethSyndrome::Ack { credits: v & 0x1f },
            1 => AethSyndrome::RnrNak { timer: v & 0x1f },
            3 => AethSyndrome::Nak(NakCode::from_raw(v)),
            _ => AethSyndrome::Reserved(v),
        }
    }
}
impl From<AethSyndrome> for u8 {
    fn from(s: AethSyndrome) -> u8 {
        match s {
            AethSyndrome::Ack { credits } => credits & 0x1f,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AethSyndrome::Nak(c) => 0x60 | c.raw(),
            AethSyndrome::Reserved(v) => v,
        }
    }
}

/// Every field of one RoCE transport packet except the payload bytes.
/// Which `Option`s are `Some` is decided by the opcode's table row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RocePacketRepr {
    pub bth: BthRepr,
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
    pub deth: Option<DethRepr>,
    /// Payload bytes (without pad and ICRC).
    pub payload_len: usize,
}

impl RocePacketRepr {
    /// A packet of `opcode` with the BTH filled and every extension header
    /// the opcode needs set to zero values (callers fill them in).
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn, payload_len: usize) -> Result<Self> {
        let info = opcode.info().ok_or(Error::BadOpcode)?;
        Ok(RocePacketRepr {
            bth: BthRepr {
                opcode: opcode.0,
                se: false,
                mig_req: false,
                pad_cnt: pad_for(payload_len),
                pkey: super::DEFAULT_PKEY,
                dest_qp,
                ack_req: false,
                psn,
            },
            reth: info.offset(ExtHdr::Reth).map(|_| RethRepr::default()),
            aeth: info.offset(ExtHdr::Aeth).map(|_| AethRepr::default()),
            atomic_eth: info
                .offset(ExtHdr::AtomicEth)
                .map(|_| AtomicEthRepr::default()),
            atomic_ack: info.offset(ExtHdr::AtomicAckEth).map(|_| 0),
            imm: info.offset(ExtHdr::ImmDt).map(|_| 0),
            ieth: info.offset(ExtHdr::Ieth).map(|_| 0),
            deth: info.offset(ExtHdr::Deth).map(|_| DethRepr::default()),
            payload_len,
        })
    }

    pub fn opcode(&self) -> Opcode {
        Opcode(self.bth.opcode)
    }

    /// The table row (None only for a hand-built Repr with an undefined opcode).
    pub fn info(&self) -> Option<&'static OpInfo> {
        self.opcode().info()
    }

    /// Checks and parses a UDP payload (BTH .. ICRC). Returns the Repr and the
    /// payload slice. Does not check the ICRC (that needs the IP header: see
    /// [`super::icrc`]). Order (as rxe's `hdr_check`): length, opcode, header
    /// length, version, pad, payload allowed.
    pub fn parse(buf: &[u8]) -> Result<(RocePacketRepr, &[u8])> {
        let bth = Bth::new_checked(buf)?;
        let info = Opcode(bth.opcode()).info().ok_or(Error::BadOpcode)?;
        let hl = info.hdr_len();
        if buf.len() < hl + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let b = BthRepr::parse(&bth)?;
        let body = buf.len() - hl - ICRC_LEN;
        let pad = b.pad_cnt as usize;
        if pad > body {
            return Err(Error::BadLength);
        }
        let payload_len = body - pad;
        if payload_len > 0 && !info.has(OpFlags::PAYLOAD) {
            return Err(Error::BadLength);
        }
        let at = |h: ExtHdr| info.offset(h);
        let r = RocePacketRepr {
            bth: b,
            reth: at(ExtHdr::Reth).map(|o| RethRepr::parse(&Reth::new_unchecked(&buf[o..]))),
            aeth: at(ExtHdr::Aeth).map(|o| AethRepr::parse(&Aeth::new_unchecked(&buf[o..]))),
            atomic_eth: at(ExtHdr::AtomicEth)
                .map(|o| AtomicEthRepr::parse(&AtomicEth::new_unchecked(&buf[o..]))),
            atomic_ack: at(ExtHdr::AtomicAckEth)
                .map(|o| AtomicAckEth::new_unchecked(&buf[o..]).orig()),
            imm: at(ExtHdr::ImmDt).map(|o| ImmDt::new_unchecked(&buf[o..]).imm()),
            ieth: at(ExtHdr::Ieth).map(|o| Ieth::new_unchecked(&buf[o..]).rkey()),
            deth: at(ExtHdr::Deth).map(|o| DethRepr::parse(&Deth::new_unchecked(&buf[o..]))),
            payload_len,
        };
        Ok((r, &buf[hl..hl + payload_len]))
    }

    /// Header length (BTH + extension headers). 12 for an undefined opcode.
    pub fn header_len(&self) -> usize {
        self.info().map_or(BTH_LEN, |i| i.hdr_len())
    }

    /// Bytes of the whole packet: headers, payload, pad, ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + pad_for(self.payload_len) as usize + ICRC_LEN
    }

    /// Range of the payload inside an emitted buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..self.header_len() + self.payload_len
    }

    /// Writes the headers and the pad into `buf` (at least `buffer_len()` bytes;
    /// only the first `buffer_len()` are touched). The pad count is derived from
    /// `payload_len`; absent fields the opcode needs are written as zeros. The
    /// payload is left for the caller (see [`Self::payload_range`]) and the ICRC
    /// must be filled afterwards ([`super::icrc::fill_icrc_ipv4`]).
    ///
    /// # Panics
    /// If `buf` is shorter than `buffer_len()` (a caller bug, not bad input).
    pub fn emit(&self, buf: &mut [u8]) {
        let n = self.buffer_len();
        let buf = &mut buf[..n];
        let mut b = self.bth;
        b.pad_cnt = pad_for(self.payload_len);
        b.emit(&mut Bth::new_unchecked(&mut buf[..]));
        if let Some(info) = self.info() {
            for &h in info.ext {
                let o = info.offset(h).unwrap_or(BTH_LEN);
                let s = &mut buf[o..];
                match h {
                    ExtHdr::Reth => self
                        .reth
                        .unwrap_or_default()
                        .emit(&mut Reth::new_unchecked(s)),
                    ExtHdr::Aeth => self
                        .aeth
                        .unwrap_or_default()
                        .emit(&mut Aeth::new_unchecked(s)),
                    ExtHdr::AtomicEth => self
                        .atomic_eth
                        .unwrap_or_default()
                        .emit(&mut AtomicEth::new_unchecked(s)),
                    ExtHdr::AtomicAckEth => {
                        AtomicAckEth::new_unchecked(s).set_orig(self.atomic_ack.unwrap_or(0))
                    }
                    ExtHdr::ImmDt => ImmDt::new_unchecked(s).set_imm(self.imm.unwrap_or(0)),
                    ExtHdr::Ieth => Ieth::new_unchecked(s).set_rkey(self.ieth.unwrap_or(0)),
                    ExtHdr::Deth => self
                        .deth
                        .unwrap_or_default()
                        .emit(&mut Deth::new_unchecked(s)),
                }
            }
        }
        let pad_at = self.header_len() + self.payload_len;
        buf[pad_at..n - ICRC_LEN].fill(0);
    }
}

/// Pad bytes needed after `payload_len` bytes to reach a 4-byte boundary.
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - (payload_len & 3)) & 3) as u8
}

impl fmt::Display for RocePacketRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} QP={:#08x} PSN={}{}{}",
            self.opcode(),
            self.bth.dest_qp,
            self.bth.psn,
            if self.bth.ack_req { " A" } else { "" },
            if self.bth.se { " SE" } else { "" }
        )?;
        if let Some(r) = self.reth {
            write!(
                f,
                " RETH(va={:#x} rkey={:#x} len={})",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = self.aeth {
            write!(
                f,
                " AETH({:?} msn={})",
                AethSyndrome::from(a.syndrome),
                a.msn
            )?;
        }
        if let Some(d) = self.deth {
            write!(f, " DETH(qkey={:#x} srcqp={:#x})", d.qkey, d.src_qp)?;
        }
        if let Some(i) = self.imm {
            write!(f, " imm={i:#x}")?;
        }
        write!(f, " len={}", self.payload_len)
    }
}
