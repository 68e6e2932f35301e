//! Checked little-endian body encoding shared by every message: a [`Reader`]
//! that fails with [`WireError`] instead of panicking on short or bad input,
//! and a [`Writer`] appending to a caller-owned buffer.
//!
//! Encoding: integers little-endian; byte strings and lists are prefixed
//! with a `u32` count; an optional value is a `u8` tag (0 = none) followed
//! by the value; UUIDs are 16 raw bytes.

use super::WireError;

/// Reads fields from a body; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless everything was read (trailing garbage is malformed).
    pub fn finish(&self) -> Result<(), WireError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(WireError::TrailingBytes(self.remaining()))
        }
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::BadValue {
                field: "bool",
                value: u64::from(v),
            }),
        }
    }
    pub fn uuid(&mut self) -> Result<[u8; 16], WireError> {
        self.array()
    }

    /// A `u32`-prefixed byte string of at most `max` bytes.
    pub fn blob(&mut self, max: usize) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(WireError::TooLong { len: n, max });
        }
        self.bytes(n)
    }

    /// A `u32`-prefixed UTF-8 string of at most `max` bytes.
    pub fn str(&mut self, max: usize) -> Result<String, WireError> {
        let b = self.blob(max)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| WireError::BadUtf8)
    }

    /// A list count, checked against `max` and against what is left (each
    /// element takes at least `min_elem` bytes), so a forged count cannot
    /// make the reader allocate.
    pub fn count(&mut self, max: usize, min_elem: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(WireError::TooLong { len: n, max });
        }
        if n.saturating_mul(min_elem.max(1)) > self.remaining() {
            return Err(WireError::Truncated);
        }
        Ok(n)
    }
}

/// Appends fields to a buffer.
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Writer { out }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    pub fn uuid(&mut self, v: &[u8; 16]) -> &mut Self {
        self.out.extend_from_slice(v);
        self
    }
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }
    /// A `u32`-prefixed byte string (callers keep lengths below 4 GiB: every
    /// message is limited far below that).
    pub fn blob(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.raw(b)
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.blob(s.as_bytes())
    }
    pub fn count(&mut self, n: usize) -> &mut Self {
        self.u32(n as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut v = Vec::new();
        Writer::new(&mut v)
            .u8(7)
            .u16(0x1234)
            .u32(5)
            .u64(u64::MAX)
            .i32(-1005)
            .bool(true)
            .blob(b"dkey")
            .str("label");
        let mut r = Reader::new(&v);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(0x1234));
        assert_eq!(r.u32(), Ok(5));
        assert_eq!(r.u64(), Ok(u64::MAX));
        assert_eq!(r.i32(), Ok(-1005));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.blob(16), Ok(&b"dkey"[..]));
        assert_eq!(r.str(3), Err(WireError::TooLong { len: 5, max: 3 }));
        assert_eq!(r.finish(), Err(WireError::TrailingBytes(5)));
        let mut short = Reader::new(&v[..3]);
        short.u8().unwrap();
        assert_eq!(short.u32(), Err(WireError::Truncated));
    }

    #[test]
    fn forged_counts_are_refused_before_allocating() {
        let mut v = Vec::new();
        Writer::new(&mut v).u32(1_000_000).u8(0);
        assert_eq!(
            Reader::new(&v).count(10, 1),
            Err(WireError::TooLong {
                len: 1_000_000,
                max: 10
            })
        );
        assert_eq!(
            Reader::new(&v).count(usize::MAX, 8),
            Err(WireError::Truncated)
        );
        let mut bad = Vec::new();
        Writer::new(&mut bad).u8(2);
        assert!(matches!(
            Reader::new(&bad).bool(),
            Err(WireError::BadValue { .. })
        ));
    }
}
