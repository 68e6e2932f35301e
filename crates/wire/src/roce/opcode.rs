//! The opcode table (rxe's `rxe_opcode[]`): for every defined BTH opcode, its
//! name, its flags and the ordered extension headers that follow the BTH. Header
//! offsets and lengths are computed at compile time from the ordered list, never
//! hand-typed.

use core::fmt;

use super::headers::*;

/// An extension header kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExtHdr {
    Reth = 0,
    Aeth = 1,
    AtomicEth = 2,
    AtomicAckEth = 3,
    ImmDt = 4,
    Ieth = 5,
    Deth = 6,
}

impl ExtHdr {
    /// Length on the wire.
    #[allow(clippy::len_without_is_empty)]
    pub const fn len(self) -> usize {
        match self {
            ExtHdr::Reth => Reth::<&[u8]>::LEN,
            ExtHdr::Aeth => Aeth::<&[u8]>::LEN,
            ExtHdr::AtomicEth => AtomicEth::<&[u8]>::LEN,
            ExtHdr::AtomicAckEth => AtomicAckEth::<&[u8]>::LEN,
            ExtHdr::ImmDt => ImmDt::<&[u8]>::LEN,
            ExtHdr::Ieth => Ieth::<&[u8]>::LEN,
            ExtHdr::Deth => Deth::<&[u8]>::LEN,
        }
    }
}

bitflags::bitflags! {
    /// Per-opcode properties (rxe's `RXE_*_MASK`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OpFlags: u32 {
        /// A request (goes to the responder).
        const REQ = 1 << 0;
        /// A response: ACK, atomic ACK, read response (goes to the completer).
        const RESP = 1 << 1;
        const SEND = 1 << 2;
        const WRITE = 1 << 3;
        const READ = 1 << 4;
        const ATOMIC = 1 << 5;
        const IMM = 1 << 6;
        const INV = 1 << 7;
        const FIRST = 1 << 8;
        const MIDDLE = 1 << 9;
        const LAST = 1 << 10;
        /// Carries payload bytes.
        const PAYLOAD = 1 << 11;
        /// Consumes a receive WQE at the responder (SEND*, WRITE_*_WITH_IMM last/only).
        const RWR = 1 << 12;
        /// Completes a receive WQE (last/only of a message using one).
        const COMP = 1 << 13;
        const RC = 1 << 14;
        const UC = 1 << 15;
        const UD = 1 << 16;
        /// Acknowledgement of any kind (ACK, atomic ACK).
        const ACK = 1 << 17;
        /// FIRST | LAST == ONLY
        const ONLY = Self::FIRST.bits() | Self::LAST.bits();
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct OpInfo {
    pub name: &'static str,
    pub flags: OpFlags,
    /// Extension headers after the BTH, in wire order.
    pub ext: &'static [ExtHdr],
    /// Offset of each extension header from the start of the BTH (0 = absent),
    /// indexed by `ExtHdr as usize`.
    offsets: [u8; 7],
    /// BTH + all extension headers.
    hdr_len: u8,
}

impl OpInfo {
    const fn new(name: &'static str, flags: OpFlags, ext: &'static [ExtHdr]) -> OpInfo {
        let mut offsets = [0u8; 7];
        let mut off = BTH_LEN;
        let mut i = 0;
        while i < ext.len() {
            offsets[ext[i] as usize] = off as u8;
            off += ext[i].len();
            i += 1;
        }
        OpInfo {
            name,
            flags,
            ext,
            offsets,
            hdr_len: off as u8,
        }
    }
    /// Offset of `h` from the start of the BTH, if this opcode carries it.
    pub const fn offset(&self, h: ExtHdr) -> Option<usize> {
        match self.offsets[h as usize] {
            0 => None,
            o => Some(o as usize),
        }
    }
    /// BTH plus extension headers.
    pub const fn hdr_len(&self) -> usize {
        self.hdr_len as usize
    }
    pub const fn has(&self, f: OpFlags) -> bool {
        self.flags.contains(f)
    }
}

/// A BTH opcode. Lossless for unknown code points (`Opcode(raw)`); [`Opcode::info`]
/// says whether it is defined here.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($( $val:literal $name:ident $flags:expr, [$($e:ident),*] ;)*) => {
        impl Opcode {
            $( pub const $name: Opcode = Opcode($val); )*
        }
        /// The 256-row table (None = undefined / reserved).
        pub static OPCODES: [Option<OpInfo>; 256] = {
            let mut t: [Option<OpInfo>; 256] = [None; 256];
            $( t[$val] = Some(OpInfo::new(stringify!($name), $flags, &[$(ExtHdr::$e),*])); )*
            t
        };
    };
}

const fn f(bits: u32) -> OpFlags {
    OpFlags::from_bits_retain(bits)
}
const REQ: u32 = OpFlags::REQ.bits();
const RESP: u32 = OpFlags::RESP.bits();
const SEND: u32 = OpFlags::SEND.bits() | OpFlags::PAYLOAD.bits() | OpFlags::RWR.bits();
const WRITE: u32 = OpFlags::WRITE.bits() | OpFlags::PAYLOAD.bits();
const READ: u32 = OpFlags::READ.bits();
const ATOMIC: u32 = OpFlags::ATOMIC.bits();
const IMM: u32 = OpFlags::IMM.bits();
const INV: u32 = OpFlags::INV.bits();
const FIRST: u32 = OpFlags::FIRST.bits();
const MIDDLE: u32 = OpFlags::MIDDLE.bits();
const LAST: u32 = OpFlags::LAST.bits();
const ONLY: u32 = FIRST | LAST;
const PAY: u32 = OpFlags::PAYLOAD.bits();
const RWR: u32 = OpFlags::RWR.bits();
const COMP: u32 = OpFlags::COMP.bits();
const RC: u32 = OpFlags::RC.bits();
const UC: u32 = OpFlags::UC.bits();
const UD: u32 = OpFlags::UD.bits();
const ACK: u32 = OpFlags::ACK.bits();

opcodes! {
    0x00 RC_SEND_FIRST f(RC | REQ | SEND | FIRST), [];
    0x01 RC_SEND_MIDDLE f(RC | REQ | SEND | MIDDLE), [];
    0x02 RC_SEND_LAST f(RC | REQ | SEND | LAST | COMP), [];
    0x03 RC_SEND_LAST_WITH_IMMEDIATE f(RC | REQ | SEND | LAST | COMP | IMM), [ImmDt];
    0x04 RC_SEND_ONLY f(RC | REQ | SEND | ONLY | COMP), [];
    0x05 RC_SEND_ONLY_WITH_IMMEDIATE f(RC | REQ | SEND | ONLY | COMP | IMM), [ImmDt];
    0x06 RC_RDMA_WRITE_FIRST f(RC | REQ | WRITE | FIRST), [Reth];
    0x07 RC_RDMA_WRITE_MIDDLE f(RC | REQ | WRITE | MIDDLE), [];
    0x08 RC_RDMA_WRITE_LAST f(RC | REQ | WRITE | LAST), [];
    0x09 RC_RDMA_WRITE_LAST_WITH_IMMEDIATE f(RC | REQ | WRITE | LAST | IMM | RWR | COMP), [ImmDt];
    0x0a RC_RDMA_WRITE_ONLY f(RC | REQ | WRITE | ONLY), [Reth];
    0x0b RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE f(RC | REQ | WRITE | ONLY | IMM | RWR | COMP), [Reth, ImmDt];
    0x0c RC_RDMA_READ_REQUEST f(RC | REQ | READ | ONLY), [Reth];
    0x0d RC_RDMA_READ_RESPONSE_FIRST f(RC | RESP | READ | FIRST | PAY), [Aeth];
    0x0e RC_RDMA_READ_RESPONSE_MIDDLE f(RC | RESP | READ | MIDDLE | PAY), [];
    0x0f RC_RDMA_READ_RESPONSE_LAST f(RC | RESP | READ | LAST | PAY), [Aeth];
    0x10 RC_RDMA_READ_RESPONSE_ONLY f(RC | RESP | READ | ONLY | PAY), [Aeth];
    0x11 RC_ACKNOWLEDGE f(RC | RESP | ACK | ONLY), [Aeth];
    0x12 RC_ATOMIC_ACKNOWLEDGE f(RC | RESP | ACK | ATOMIC | ONLY), [Aeth, AtomicAckEth];
    0x13 RC_COMPARE_SWAP f(RC | REQ | ATOMIC | ONLY), [AtomicEth];
    0x14 RC_FETCH_ADD f(RC | REQ | ATOMIC | ONLY), [AtomicEth];
    0x16 RC_SEND_LAST_WITH_INVALIDATE f(RC | REQ | SEND | LAST | COMP | INV), [Ieth];
    0x17 RC_SEND_ONLY_WITH_INVALIDATE f(RC | REQ | SEND | ONLY | COMP | INV), [Ieth];
    0x20 UC_SEND_FIRST f(UC | REQ | SEND | FIRST), [];
    0x21 UC_SEND_MIDDLE f(UC | REQ | SEND | MIDDLE), [];
    0x22 UC_SEND_LAST f(UC | REQ | SEND | LAST | COMP), [];
    0x23 UC_SEND_LAST_WITH_IMMEDIATE f(UC | REQ | SEND | LAST | COMP | IMM), [ImmDt];
    0x24 UC_SEND_ONLY f(UC | REQ | SEND | ONLY | COMP), [];
    0x25 UC_SEND_ONLY_WITH_IMMEDIATE f(UC | REQ | SEND | ONLY | COMP | IMM), [ImmDt];
    0x26 UC_RDMA_WRITE_FIRST f(UC | REQ | WRITE | FIRST), [Reth];
    0x27 UC_RDMA_WRITE_MIDDLE f(UC | REQ | WRITE | MIDDLE), [];
    0x28 UC_RDMA_WRITE_LAST f(UC | REQ | WRITE | LAST), [];
    0x29 UC_RDMA_WRITE_LAST_WITH_IMMEDIATE f(UC | REQ | WRITE | LAST | IMM | RWR | COMP), [ImmDt];
    0x2a UC_RDMA_WRITE_ONLY f(UC | REQ | WRITE | ONLY), [Reth];
    0x2b UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE f(UC | REQ | WRITE | ONLY | IMM | RWR | COMP), [Reth, ImmDt];
    0x64 UD_SEND_ONLY f(UD | REQ | SEND | ONLY | COMP), [Deth];
    0x65 UD_SEND_ONLY_WITH_IMMEDIATE f(UD | REQ | SEND | ONLY | COMP | IMM), [Deth, ImmDt];
}

// silence "unused" for helper consts only used by some rows
const _: u32 = PAY;

impl Opcode {
    /// The table row, or None for an undefined opcode.
    pub fn info(self) -> Option<&'static OpInfo> {
        OPCODES[self.0 as usize].as_ref()
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => write!(f, "{}", i.name),
            None => write!(f, "Unknown({:#04x})", self.0),
        }
    }
}
impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
