//! Stream framing: [`FrameDecoder`] cuts a byte stream (TCP) into frames,
//! and [`encode_request`]/[`encode_reply`] build them.
//!
//! A header that cannot be trusted (bad magic or version) is fatal for the
//! stream (there is no way to find the next frame). A frame whose body is
//! longer than the limit is *not*: its body is skipped as it arrives and the
//! decoder yields [`Decoded::Oversized`], so the receiver can answer that
//! request with an error and keep the connection.

use super::header::{Header, HeaderRepr, Opcode, HEADER_LEN};
use super::msg::{Reply, Request};
use super::status::Status;
use super::WireError;

/// Most initialised spare room an idle decoder keeps.
const SPARE_KEEP: usize = 4 << 20;

/// What the decoder produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A whole frame: header and body (arguments + bulk region).
    Frame { hdr: HeaderRepr, body: Vec<u8> },
    /// A frame longer than the limit; its body is being discarded.
    Oversized { hdr: HeaderRepr },
}

/// Incremental frame decoder over a byte stream.
#[derive(Debug)]
pub struct FrameDecoder {
    /// Received bytes are `buf[start..end]`; `buf[end..]` is initialised
    /// spare room kept between reads (zeroed once when it grows, not per read).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Body bytes of an oversized frame still to discard.
    skip: u64,
    max_body: usize,
    failed: Option<WireError>,
}

impl FrameDecoder {
    pub fn new(max_body: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            end: 0,
            skip: 0,
            max_body,
            failed: None,
        }
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// A writable tail of at least `n` bytes to receive into; call
    /// [`FrameDecoder::filled`] with what was written.
    pub fn spare(&mut self, n: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > SPARE_KEEP {
                // a burst of big frames is over: give the memory back
                self.buf = Vec::new();
            }
        } else if self.start > 0
            && (self.start > self.buf.len() / 2 || self.end + n > self.buf.len())
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.end + n {
            self.buf.resize(self.end + n, 0);
        }
        &mut self.buf[self.end..self.end + n]
    }

    /// Marks `n` bytes of the last [`FrameDecoder::spare`] as received (the
    /// rest is dropped).
    pub fn filled(&mut self, spare_len: usize, n: usize) {
        self.end += n.min(spare_len);
    }

    /// Appends received bytes.
    pub fn input(&mut self, data: &[u8]) {
        let s = self.spare(data.len());
        s.copy_from_slice(data);
        self.filled(data.len(), data.len());
    }

    /// The next decoded frame, `Ok(None)` when more bytes are needed, or the
    /// fatal error that broke the stream (repeated on every later call).
    pub fn decode(&mut self) -> Result<Option<Decoded>, WireError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.skip > 0 {
            let n = (self.skip as usize).min(self.buffered());
            self.start += n;
            self.skip -= n as u64;
            if self.skip > 0 {
                return Ok(None);
            }
        }
        let avail = &self.buf[self.start..self.end];
        if avail.len() < HEADER_LEN {
            return Ok(None);
        }
        let hdr =
            match Header::new_checked(&avail[..HEADER_LEN]).and_then(|h| HeaderRepr::parse(&h)) {
                Ok(h) => h,
                Err(e) => {
                    self.failed = Some(e);
                    return Err(e);
                }
            };
        let body_len = hdr.body_len as usize;
        if body_len > self.max_body {
            self.start += HEADER_LEN;
            self.skip = hdr.body_len as u64;
            let n = (self.skip as usize).min(self.buffered());
            self.start += n;
            self.skip -= n as u64;
            return Ok(Some(Decoded::Oversized { hdr }));
        }
        if avail.len() < HEADER_LEN + body_len {
            return Ok(None);
        }
        let body = avail[HEADER_LEN..HEADER_LEN + body_len].to_vec();
        self.start += HEADER_LEN + body_len;
        Ok(Some(Decoded::Frame { hdr, body }))
    }
}

/// Appends one request frame: header, `req`'s arguments, then the bulk
/// region gathered from `bulk` (in order).
pub fn encode_request(
    out: &mut Vec<u8>,
    rpc_id: u64,
    timeout_ms: u32,
    req: &Request,
    bulk: &[&[u8]],
) {
    encode_request_at(out, rpc_id, timeout_ms, None, req, bulk)
}

/// [`encode_request`] carrying the client's pool-map version (object I/O).
pub fn encode_request_at(
    out: &mut Vec<u8>,
    rpc_id: u64,
    timeout_ms: u32,
    map_version: Option<u32>,
    req: &Request,
    bulk: &[&[u8]],
) {
    encode(
        out,
        false,
        req.opcode(),
        rpc_id,
        0,
        timeout_ms,
        map_version,
        |o| req.emit(o),
        bulk,
    )
}

/// Appends a `DER_STALE` refusal carrying the engine's map version.
pub fn encode_stale_map(out: &mut Vec<u8>, rpc_id: u64, op: Opcode, engine_version: u32) {
    encode(
        out,
        true,
        op,
        rpc_id,
        Status::StaleMap.code(),
        0,
        Some(engine_version),
        |_| {},
        &[],
    )
}

/// Appends one reply frame; an error status carries no body.
pub fn encode_reply(
    out: &mut Vec<u8>,
    rpc_id: u64,
    op: Opcode,
    status: Status,
    rep: &Reply,
    bulk: &[&[u8]],
) {
    if status.is_ok() {
        encode(
            out,
            true,
            op,
            rpc_id,
            status.code(),
            0,
            None,
            |o| rep.emit(o),
            bulk,
        )
    } else {
        encode(out, true, op, rpc_id, status.code(), 0, None, |_| {}, &[])
    }
}

/// Appends the head of an OK reply whose bulk region (`bulk_len` bytes)
/// the caller sends right behind it from its own buffers (no copy into the
/// frame; `writev`).
pub fn encode_reply_head(out: &mut Vec<u8>, rpc_id: u64, op: Opcode, rep: &Reply, bulk_len: usize) {
    encode_with(
        out,
        true,
        op,
        rpc_id,
        Status::Ok.code(),
        0,
        None,
        |o| rep.emit(o),
        &[],
        bulk_len,
    )
}

#[allow(clippy::too_many_arguments)]
fn encode(
    out: &mut Vec<u8>,
    response: bool,
    opcode: Opcode,
    rpc_id: u64,
    status: i32,
    timeout_ms: u32,
    map_version: Option<u32>,
    args: impl FnOnce(&mut Vec<u8>),
    bulk: &[&[u8]],
) {
    encode_with(
        out,
        response,
        opcode,
        rpc_id,
        status,
        timeout_ms,
        map_version,
        args,
        bulk,
        0,
    )
}

/// `encode`, with `trailing` bulk bytes that follow outside `out`.
#[allow(clippy::too_many_arguments)]
fn encode_with(
    out: &mut Vec<u8>,
    response: bool,
    opcode: Opcode,
    rpc_id: u64,
    status: i32,
    timeout_ms: u32,
    map_version: Option<u32>,
    args: impl FnOnce(&mut Vec<u8>),
    bulk: &[&[u8]],
    trailing: usize,
) {
    let at = out.len();
    out.resize(at + HEADER_LEN, 0);
    args(out);
    let mut bulk_len = trailing;
    for b in bulk {
        out.extend_from_slice(b);
        bulk_len += b.len();
    }
    let body_len = out.len() - at - HEADER_LEN + trailing;
    HeaderRepr {
        response,
        opcode,
        rpc_id,
        status,
        timeout_ms,
        body_len: body_len as u32,
        bulk_len: bulk_len as u32,
        map_version,
    }
    .emit(&mut Header::new_unchecked(&mut out[at..at + HEADER_LEN]));
}

/// Splits a frame body into (arguments, bulk region).
pub fn split_body<'a>(hdr: &HeaderRepr, body: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    let bulk = (hdr.bulk_len as usize).min(body.len());
    body.split_at(body.len() - bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_reads_and_back_to_back() {
        let mut s = Vec::new();
        encode_request(&mut s, 1, 0, &Request::Ping, &[]);
        encode_request(&mut s, 2, 50, &Request::PoolList, &[b"xyz"]);
        let mut d = FrameDecoder::new(1024);
        let mut got = Vec::new();
        for byte in &s {
            d.input(std::slice::from_ref(byte));
            while let Some(f) = d.decode().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 2);
        let Decoded::Frame { hdr, body } = &got[1] else {
            panic!("{got:?}")
        };
        assert_eq!(
            (hdr.rpc_id, hdr.timeout_ms, hdr.opcode),
            (2, 50, Opcode::PoolList)
        );
        assert_eq!(split_body(hdr, body), (&[][..], &b"xyz"[..]));
    }

    #[test]
    fn oversized_frame_is_skipped_and_the_stream_continues() {
        let mut s = Vec::new();
        encode_request(&mut s, 7, 0, &Request::Ping, &[&[0u8; 100]]);
        encode_request(&mut s, 8, 0, &Request::Ping, &[]);
        let mut d = FrameDecoder::new(64);
        d.input(&s[..40]);
        assert!(matches!(d.decode(), Ok(Some(Decoded::Oversized { hdr })) if hdr.rpc_id == 7));
        assert_eq!(d.decode(), Ok(None));
        d.input(&s[40..]);
        assert!(matches!(d.decode(), Ok(Some(Decoded::Frame { hdr, .. })) if hdr.rpc_id == 8));
    }

    #[test]
    fn garbage_is_fatal_and_stays_fatal() {
        let mut d = FrameDecoder::new(64);
        d.input(&[0xff; 40]);
        assert_eq!(d.decode(), Err(WireError::BadMagic));
        assert_eq!(d.decode(), Err(WireError::BadMagic));
    }
}
