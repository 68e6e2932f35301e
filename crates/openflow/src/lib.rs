//! # openflow — the OpenFlow 1.3 wire format
//!
//! Owns: checked parsing and emitting of OpenFlow 1.3 messages (and the OpenFlow 1.0
//! HELLO / ECHO / ERROR that version negotiation needs): the header ([`header`]),
//! OXM match fields ([`oxm`]), actions and instructions ([`action`]), the messages a
//! switch receives and sends ([`msg`]) and multipart bodies ([`multipart`]).
//!
//! Every parse checks every length against the buffer it reads and answers a typed
//! [`Error`] (never a panic); [`Error::ofp_error`] says which `OFPT_ERROR` type and
//! code a switch sends back for it. Large payloads (packet data, unknown bodies) are
//! borrowed from the input (zero-copy); the small fixed parts are copied into plain
//! structs. Emitting appends to a `Vec<u8>` and fixes the lengths up.
//!
//! Does not own: what the messages mean to a switch (the connection state machine and
//! the conversion to flow rules live in `switch::openflow*`).
//!
//! Depends on nothing but `thiserror`.

#![forbid(unsafe_code)]

pub mod action;
pub mod consts;
pub mod header;
pub mod msg;
pub mod multipart;
pub mod oxm;

pub use header::{Header, HEADER_LEN};
pub use msg::Message;

/// A parse error: what was wrong, and (through [`Error::ofp_error`]) the OpenFlow
/// error a switch answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the structure needs.
    #[error("{what}: truncated (need {need} bytes, have {have})")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A length field that is impossible (too short, not a multiple of 8, past the end).
    #[error("{what}: bad length {len}")]
    BadLength { what: &'static str, len: usize },
    /// The header's version is not one this crate parses.
    #[error("unsupported OpenFlow version {0:#04x}")]
    BadVersion(u8),
    /// A message type this crate does not parse.
    #[error("unsupported message type {0}")]
    BadType(u8),
    /// A multipart type this crate does not parse.
    #[error("unsupported multipart type {0}")]
    BadMultipart(u16),
    /// A match type other than OXM (1).
    #[error("match type {0} is not OXM")]
    BadMatchType(u16),
    /// A malformed OXM TLV (length that does not fit the field, ...).
    #[error("OXM {0:#010x}: bad length")]
    BadOxmLen(u32),
    /// An action with a bad length.
    #[error("action type {0}: bad length")]
    BadActionLen(u16),
    /// An action type not parsed here.
    #[error("unsupported action type {0:#x}")]
    BadActionType(u16),
    /// An experimenter (vendor) action not parsed here.
    #[error("unsupported experimenter action {experimenter:#x}/{subtype}")]
    BadExperimenterAction { experimenter: u32, subtype: u16 },
    /// An instruction with a bad length.
    #[error("instruction type {0}: bad length")]
    BadInstructionLen(u16),
    /// An instruction type not parsed here.
    #[error("unsupported instruction type {0:#x}")]
    BadInstructionType(u16),
}

impl Error {
    /// The `(type, code)` of the OFPT_ERROR a switch sends for this parse error.
    pub fn ofp_error(&self) -> (u16, u16) {
        use consts::err::*;
        match self {
            Error::Truncated { .. } | Error::BadLength { .. } => (BAD_REQUEST, BRC_BAD_LEN),
            Error::BadVersion(_) => (BAD_REQUEST, BRC_BAD_VERSION),
            Error::BadType(_) => (BAD_REQUEST, BRC_BAD_TYPE),
            Error::BadMultipart(_) => (BAD_REQUEST, BRC_BAD_MULTIPART),
            Error::BadMatchType(_) => (BAD_MATCH, BMC_BAD_TYPE),
            Error::BadOxmLen(_) => (BAD_MATCH, BMC_BAD_LEN),
            Error::BadActionLen(_) => (BAD_ACTION, BAC_BAD_LEN),
            Error::BadActionType(_) => (BAD_ACTION, BAC_BAD_TYPE),
            Error::BadExperimenterAction { .. } => (BAD_ACTION, BAC_BAD_EXP_TYPE),
            Error::BadInstructionLen(_) => (BAD_INSTRUCTION, BIC_BAD_LEN),
            Error::BadInstructionType(_) => (BAD_INSTRUCTION, BIC_UNKNOWN_INST),
        }
    }
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// A NUL-padded string field of `n` bytes: what comes before the first NUL, at
/// most `n - 1` bytes (emit keeps one NUL, as OVS's strlcpy does), bytes that are
/// not UTF-8 read as `?` each. Emitted again it gives the same string (a lossy
/// U+FFFD would take 3 bytes and be cut on the way out).
pub(crate) fn c_string(b: &[u8], n: usize) -> String {
    let b = &b[..b.len().min(n.saturating_sub(1))];
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let mut s = String::with_capacity(end);
    for chunk in b[..end].utf8_chunks() {
        s.push_str(chunk.valid());
        s.extend(std::iter::repeat_n('?', chunk.invalid().len()));
    }
    s
}

/// A bounds-checked reader over a byte slice (big-endian).
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, what }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(Error::Truncated {
                what: self.what,
                need: self.pos + n,
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn skip(&mut self, n: usize) -> Result<()> {
        self.bytes(n).map(|_| ())
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
}

/// Appends big-endian integers and padding to a buffer.
pub trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_zeros(&mut self, n: usize);
    /// Pads with zeros to a multiple of 8 bytes counted from `start`.
    fn pad8_from(&mut self, start: usize);
    /// Writes `v` as a big-endian u16 at `at` (a length fixed up after the fact).
    fn set_u16(&mut self, at: usize, v: u16);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v)
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0)
    }
    fn pad8_from(&mut self, start: usize) {
        let n = (self.len() - start).next_multiple_of(8) - (self.len() - start);
        self.put_zeros(n)
    }
    fn set_u16(&mut self, at: usize, v: u16) {
        self[at..at + 2].copy_from_slice(&v.to_be_bytes())
    }
}
