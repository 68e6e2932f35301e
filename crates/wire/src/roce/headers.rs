//! Zero-copy views of the BTH and the RoCE extension headers, each with a `Repr`.

use crate::{Error, Result};

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}
#[inline]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
#[inline]
fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
#[inline]
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
#[inline]
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Declares a fixed-length view type with the standard constructors.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<B> {
            buf: B,
        }
        impl<B: AsRef<[u8]>> $name<B> {
            /// Length of this header on the wire.
            pub const LEN: usize = $len;
            /// Wraps without checking (for emitting into a sized buffer).
            pub const fn new_unchecked(buf: B) -> Self {
                $name { buf }
            }
            /// Wraps after [`Self::check_len`].
            pub fn new_checked(buf: B) -> Result<Self> {
                let v = Self::new_unchecked(buf);
                v.check_len()?;
                Ok(v)
            }
            /// The buffer holds at least the whole header (the only thing trusted).
            pub fn check_len(&self) -> Result<()> {
                if self.buf.as_ref().len() < Self::LEN {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                }
            }
            /// Returns the underlying buffer.
            pub fn into_inner(self) -> B {
                self.buf
            }
        }
    };
}

// ---------------------------------------------------------------- BTH
mod bth_field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1; // SE | M | PadCnt(2) | TVer(4)
    pub const PKEY: usize = 2;
    pub const RESV8A: usize = 4; // (F/B ECN bits on some fabrics) masked by the ICRC
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8; // A | resv7
    pub const PSN: usize = 9;
    pub const END: usize = 12;
}

view!(
    /// Base Transport Header (12 bytes).
    Bth,
    bth_field::END
);

/// Length of the BTH.
pub const BTH_LEN: usize = bth_field::END;

impl<B: AsRef<[u8]>> Bth<B> {
    pub fn opcode(&self) -> u8 {
        self.buf.as_ref()[bth_field::OPCODE]
    }
    /// Solicited event.
    pub fn se(&self) -> bool {
        self.buf.as_ref()[bth_field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.buf.as_ref()[bth_field::FLAGS] & 0x40 != 0
    }
    pub fn pad_cnt(&self) -> u8 {
        (self.buf.as_ref()[bth_field::FLAGS] >> 4) & 3
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buf.as_ref()[bth_field::FLAGS] & 0xf
    }
    pub fn pkey(&self) -> u16 {
        be16(self.buf.as_ref(), bth_field::PKEY)
    }
    pub fn resv8a(&self) -> u8 {
        self.buf.as_ref()[bth_field::RESV8A]
    }
    pub fn dest_qp(&self) -> u32 {
        be24(self.buf.as_ref(), bth_field::DEST_QP)
    }
    pub fn ack_req(&self) -> bool {
        self.buf.as_ref()[bth_field::ACK_REQ] & 0x80 != 0
    }
    pub fn psn(&self) -> super::Psn {
        super::Psn::new(be24(self.buf.as_ref(), bth_field::PSN))
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Bth<B> {
    pub fn set_opcode(&mut self, v: u8) {
        self.buf.as_mut()[bth_field::OPCODE] = v;
    }
    /// Sets SE, M, PadCnt and TVer at once.
    pub fn set_flags(&mut self, se: bool, mig: bool, pad: u8, tver: u8) {
        self.buf.as_mut()[bth_field::FLAGS] =
            (se as u8) << 7 | (mig as u8) << 6 | (pad & 3) << 4 | (tver & 0xf);
    }
    pub fn set_pkey(&mut self, v: u16) {
        put16(self.buf.as_mut(), bth_field::PKEY, v);
    }
    pub fn set_resv8a(&mut self, v: u8) {
        self.buf.as_mut()[bth_field::RESV8A] = v;
    }
    pub fn set_dest_qp(&mut self, v: u32) {
        put24(self.buf.as_mut(), bth_field::DEST_QP, v);
    }
    pub fn set_ack_req(&mut self, a: bool) {
        self.buf.as_mut()[bth_field::ACK_REQ] = (a as u8) << 7;
    }
    pub fn set_psn(&mut self, v: super::Psn) {
        put24(self.buf.as_mut(), bth_field::PSN, v.value());
    }
}

/// The meaningful BTH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: u8,
    pub se: bool,
    pub mig_req: bool,
    pub pad_cnt: u8,
    pub pkey: u16,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: super::Psn,
}

impl BthRepr {
    /// Parses; rejects a transport version other than 0.
    pub fn parse<B: AsRef<[u8]>>(b: &Bth<B>) -> Result<BthRepr> {
        if b.tver() != 0 {
            return Err(Error::BadVersion);
        }
        Ok(BthRepr {
            opcode: b.opcode(),
            se: b.se(),
            mig_req: b.mig_req(),
            pad_cnt: b.pad_cnt(),
            pkey: b.pkey(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            psn: b.psn(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Bth<B>) {
        b.set_opcode(self.opcode);
        b.set_flags(self.se, self.mig_req, self.pad_cnt, 0);
        b.set_pkey(self.pkey);
        b.set_resv8a(0);
        b.set_dest_qp(self.dest_qp);
        b.set_ack_req(self.ack_req);
        b.set_psn(self.psn);
    }
}

// ---------------------------------------------------------------- RETH
view!(
    /// RDMA Extended Transport Header: VA(8) R_Key(4) DMA length(4).
    Reth,
    16
);
impl<B: AsRef<[u8]>> Reth<B> {
    pub fn va(&self) -> u64 {
        be64(self.buf.as_ref(), 0)
    }
    pub fn rkey(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }
    pub fn dma_len(&self) -> u32 {
        be32(self.buf.as_ref(), 12)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> Reth<B> {
    pub fn set_va(&mut self, v: u64) {
        put64(self.buf.as_mut(), 0, v)
    }
    pub fn set_rkey(&mut self, v: u32) {
        put32(self.buf.as_mut(), 8, v)
    }
    pub fn set_dma_len(&mut self, v: u32) {
        put32(self.buf.as_mut(), 12, v)
    }
}
/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}
impl RethRepr {
    pub fn parse<B: AsRef<[u8]>>(h: &Reth<B>) -> RethRepr {
        RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        }
    }
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<B>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}

// ---------------------------------------------------------------- AETH
view!(
    /// ACK Extended Transport Header: syndrome(1) MSN(3).
    Aeth,
    4
);
impl<B: AsRef<[u8]>> Aeth<B> {
    pub fn syndrome(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    pub fn msn(&self) -> u32 {
        be24(self.buf.as_ref(), 1)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> Aeth<B> {
    pub fn set_syndrome(&mut self, v: u8) {
        self.buf.as_mut()[0] = v
    }
    pub fn set_msn(&mut self, v: u32) {
        put24(self.buf.as_mut(), 1, v)
    }
}
/// AETH fields (the syndrome raw; decode with [`super::AethSyndrome::from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    pub syndrome: u8,
    pub msn: u32,
}
impl AethRepr {
    pub fn parse<B: AsRef<[u8]>>(h: &Aeth<B>) -> AethRepr {
        AethRepr {
            syndrome: h.syndrome(),
            msn: h.msn(),
        }
    }
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<B>) {
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn & 0xff_ffff);
    }
}

// ---------------------------------------------------------------- AtomicETH
view!(
    /// Atomic Extended Transport Header: VA(8) R_Key(4) swap/add(8) compare(8).
    AtomicEth,
    28
);
impl<B: AsRef<[u8]>> AtomicEth<B> {
    pub fn va(&self) -> u64 {
        be64(self.buf.as_ref(), 0)
    }
    pub fn rkey(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }
    pub fn swap_add(&self) -> u64 {
        be64(self.buf.as_ref(), 12)
    }
    pub fn compare(&self) -> u64 {
        be64(self.buf.as_ref(), 20)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<B> {
    pub fn set_va(&mut self, v: u64) {
        put64(self.buf.as_mut(), 0, v)
    }
    pub fn set_rkey(&mut self, v: u32) {
        put32(self.buf.as_mut(), 8, v)
    }
    pub fn set_swap_add(&mut self, v: u64) {
        put64(self.buf.as_mut(), 12, v)
    }
    pub fn set_compare(&mut self, v: u64) {
        put64(self.buf.as_mut(), 20, v)
    }
}
/// AtomicETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}
impl AtomicEthRepr {
    pub fn parse<B: AsRef<[u8]>>(h: &AtomicEth<B>) -> AtomicEthRepr {
        AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        }
    }
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<B>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

// ---------------------------------------------------------------- AtomicAckETH
view!(
    /// Atomic ACK Extended Transport Header: original remote data (8).
    AtomicAckEth,
    8
);
impl<B: AsRef<[u8]>> AtomicAckEth<B> {
    pub fn orig(&self) -> u64 {
        be64(self.buf.as_ref(), 0)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<B> {
    pub fn set_orig(&mut self, v: u64) {
        put64(self.buf.as_mut(), 0, v)
    }
}

// ---------------------------------------------------------------- ImmDt / IETH
view!(
    /// Immediate data (4 bytes, opaque to the transport; kept in network order).
    ImmDt,
    4
);
impl<B: AsRef<[u8]>> ImmDt<B> {
    /// The 4 bytes as a big-endian number (rdma-core hands them to the user as
    /// `__be32`, i.e. the raw bytes).
    pub fn imm(&self) -> u32 {
        be32(self.buf.as_ref(), 0)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> ImmDt<B> {
    pub fn set_imm(&mut self, v: u32) {
        put32(self.buf.as_mut(), 0, v)
    }
}
view!(
    /// Invalidate ETH: the R_Key to invalidate (4).
    Ieth,
    4
);
impl<B: AsRef<[u8]>> Ieth<B> {
    pub fn rkey(&self) -> u32 {
        be32(self.buf.as_ref(), 0)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> Ieth<B> {
    pub fn set_rkey(&mut self, v: u32) {
        put32(self.buf.as_mut(), 0, v)
    }
}

// ---------------------------------------------------------------- DETH
view!(
    /// Datagram ETH: Q_Key(4) reserved(1) source QP(3).
    Deth,
    8
);
impl<B: AsRef<[u8]>> Deth<B> {
    pub fn qkey(&self) -> u32 {
        be32(self.buf.as_ref(), 0)
    }
    pub fn src_qp(&self) -> u32 {
        be24(self.buf.as_ref(), 5)
    }
}
impl<B: AsRef<[u8]> + AsMut<[u8]>> Deth<B> {
    pub fn set_qkey(&mut self, v: u32) {
        put32(self.buf.as_mut(), 0, v)
    }
    pub fn set_src_qp(&mut self, v: u32) {
        self.buf.as_mut()[4] = 0;
        put24(self.buf.as_mut(), 5, v)
    }
}
/// DETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    pub qkey: u32,
    pub src_qp: u32,
}
impl DethRepr {
    pub fn parse<B: AsRef<[u8]>>(h: &Deth<B>) -> DethRepr {
        DethRepr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        }
    }
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<B>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp & 0xff_ffff);
    }
}
