//! The 8-byte OpenFlow header (`ofp_header`): version, type, length, xid; framing of
//! a byte stream into messages.

use crate::{Error, Put, Result};

/// Length of the header.
pub const HEADER_LEN: usize = 8;

/// The largest message (the length field is 16 bits).
pub const MAX_MESSAGE_LEN: usize = 0xffff;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    /// Length of the whole message, header included.
    pub length: u16,
    pub xid: u32,
}

impl Header {
    /// Parses the header of a message held whole in `buf` (`buf` may hold more: the
    /// message is `buf[..length]`). Checks `8 <= length <= buf.len()`.
    pub fn parse(buf: &[u8]) -> Result<Header> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "ofp_header",
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let h = Header {
            version: buf[0],
            msg_type: buf[1],
            length: u16::from_be_bytes([buf[2], buf[3]]),
            xid: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        };
        if (h.length as usize) < HEADER_LEN {
            return Err(Error::BadLength {
                what: "ofp_header",
                len: h.length as usize,
            });
        }
        if buf.len() < h.length as usize {
            return Err(Error::Truncated {
                what: "message",
                need: h.length as usize,
                have: buf.len(),
            });
        }
        Ok(h)
    }

    /// Appends this header (its `length` is fixed up by [`finish`]); returns where
    /// the message starts.
    pub fn emit(&self, buf: &mut Vec<u8>) -> usize {
        let start = buf.len();
        buf.put_u8(self.version);
        buf.put_u8(self.msg_type);
        buf.put_u16(self.length);
        buf.put_u32(self.xid);
        start
    }
}

/// Starts a message at the end of `buf`: header with length 0; returns its start for
/// [`finish`].
pub fn start(buf: &mut Vec<u8>, version: u8, msg_type: u8, xid: u32) -> usize {
    Header {
        version,
        msg_type,
        length: 0,
        xid,
    }
    .emit(buf)
}

/// Writes the length of the message started at `start` (everything after it in
/// `buf`). Messages longer than 65535 bytes cannot be expressed: callers split them
/// (multipart) before; a longer one is cut to the limit's length field and flagged by
/// the returned `false`.
pub fn finish(buf: &mut [u8], start: usize) -> bool {
    let len = buf.len() - start;
    let ok = len <= MAX_MESSAGE_LEN;
    buf[start + 2..start + 4].copy_from_slice(&(len.min(MAX_MESSAGE_LEN) as u16).to_be_bytes());
    ok
}

/// Framing of a byte stream: `Ok(Some(n))` when `buf` starts with a whole message of
/// `n` bytes, `Ok(None)` when more bytes are needed, an error when the length field is
/// impossible (< 8: the stream cannot be resynchronised; close the connection).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    if len < HEADER_LEN {
        return Err(Error::BadLength {
            what: "ofp_header",
            len,
        });
    }
    Ok((buf.len() >= len).then_some(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checks() {
        let mut b = Vec::new();
        let s = start(&mut b, 4, 2, 0x1234_5678);
        b.extend_from_slice(b"abc");
        assert!(finish(&mut b, s));
        assert_eq!(b, [4, 2, 0, 11, 0x12, 0x34, 0x56, 0x78, b'a', b'b', b'c']);
        let h = Header::parse(&b).unwrap();
        assert_eq!(
            (h.version, h.msg_type, h.length, h.xid),
            (4, 2, 11, 0x1234_5678)
        );
        assert!(matches!(
            Header::parse(&b[..10]),
            Err(Error::Truncated { need: 11, .. })
        ));
        assert!(Header::parse(&[4, 0, 0, 7, 0, 0, 0, 0]).is_err());
        assert_eq!(frame_len(&b[..3]).unwrap(), None);
        assert_eq!(frame_len(&b[..9]).unwrap(), None);
        assert_eq!(frame_len(&b).unwrap(), Some(11));
        assert!(frame_len(&[4, 0, 0, 3]).is_err());
    }
}
