//! The sans-IO RPC cores: [`ClientCore`] (request ids, deadlines,
//! cancellation, matching replies) and [`ServerConn`] (one client connection
//! on the engine: frames in, replies out). No sockets, clocks or threads:
//! bytes and `now` go in; bytes, completions and deadlines come out.
//!
//! Poll order for a driver: feed received bytes ([`ClientCore::recv_buf`] +
//! [`ClientCore::received`]), call [`ClientCore::handle_timeout`], drain
//! [`ClientCore::poll_completion`], then write [`ClientCore::transmit`] and
//! report it with [`ClientCore::transmitted`]; sleep until
//! [`ClientCore::poll_timeout`] or I/O.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::frame::{
    encode_reply, encode_request_at, encode_stale_map, split_body, Decoded, FrameDecoder,
};
use super::header::{HeaderRepr, Opcode};
use super::msg::{Reply, Request};
use super::status::Status;
use super::{WireError, MAX_BODY};

/// Why an RPC did not produce a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The engine answered with an error status.
    #[error("engine: {0}")]
    Status(Status),
    /// No reply before the deadline.
    #[error("RPC timed out")]
    TimedOut,
    /// Cancelled by the caller.
    #[error("RPC cancelled")]
    Cancelled,
    /// The connection closed before the reply came.
    #[error("connection to the engine lost")]
    Disconnected,
    /// The engine refused the request: its pool map (`version`) is newer
    /// than the one the request carried (`DER_STALE`).
    #[error("stale pool map: the engine has map version {version}")]
    StaleMap { version: u32 },
    /// The reply could not be parsed.
    #[error("malformed reply: {0}")]
    BadReply(WireError),
}

/// A reply: its opcode and parsed arguments, with the bulk region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawReply {
    pub reply: Reply,
    pub body: Vec<u8>,
    pub bulk_len: usize,
}

impl RawReply {
    /// The reply's bulk region.
    pub fn bulk(&self) -> &[u8] {
        &self.body[self.body.len() - self.bulk_len.min(self.body.len())..]
    }
}

/// One finished RPC.
#[derive(Debug)]
pub struct Completion {
    pub rpc_id: u64,
    pub result: Result<RawReply, RpcError>,
}

#[derive(Debug)]
struct Pending {
    opcode: Opcode,
    deadline: Option<Instant>,
}

/// Client side of one connection.
#[derive(Debug)]
pub struct ClientCore {
    next_id: u64,
    pending: HashMap<u64, Pending>,
    deadlines: BTreeSet<(Instant, u64)>,
    tx: Vec<u8>,
    tx_off: usize,
    dec: FrameDecoder,
    done: VecDeque<Completion>,
    closed: bool,
    /// Replies that matched no pending RPC (late, after a timeout or cancel).
    pub stray_replies: u64,
    /// The pool-map version object I/O requests carry (`None`: none sent,
    /// the engine does not check).
    map_version: Option<u32>,
}

impl Default for ClientCore {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientCore {
    pub fn new() -> Self {
        ClientCore {
            next_id: 1,
            pending: HashMap::new(),
            deadlines: BTreeSet::new(),
            tx: Vec::new(),
            tx_off: 0,
            dec: FrameDecoder::new(MAX_BODY),
            done: VecDeque::new(),
            closed: false,
            stray_replies: 0,
            map_version: None,
        }
    }

    /// Queues `req` (bulk region gathered from `bulk`) and returns its RPC id.
    /// `timeout` bounds the wait for its reply (and is sent to the engine,
    /// which drops the request if it could not start it in time).
    pub fn start(
        &mut self,
        now: Instant,
        req: &Request,
        bulk: &[&[u8]],
        timeout: Option<Duration>,
    ) -> u64 {
        let mv = self
            .map_version
            .filter(|_| req.opcode().carries_map_version());
        self.start_with(now, req, timeout, |tx, id, ms| {
            encode_request_at(tx, id, ms, mv, req, bulk)
        })
    }

    /// Sets the pool-map version that object I/O requests started from now
    /// on carry (DAOS: the client's map version in every object RPC).
    pub fn set_map_version(&mut self, v: Option<u32>) {
        self.map_version = v;
    }

    /// The pool-map version object I/O requests carry.
    pub fn map_version(&self) -> Option<u32> {
        self.map_version
    }

    /// [`ClientCore::start`] with the frame written by `encode(tx, rpc_id,
    /// timeout_ms)` (a transport that moves the bulk itself appends a frame
    /// of its own form, e.g. RDMA with a bulk descriptor). Not called when
    /// the connection is closed.
    pub fn start_with(
        &mut self,
        now: Instant,
        req: &Request,
        timeout: Option<Duration>,
        encode: impl FnOnce(&mut Vec<u8>, u64, u32),
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u32::MAX as u128) as u32);
        if self.closed {
            self.done.push_back(Completion {
                rpc_id: id,
                result: Err(RpcError::Disconnected),
            });
            return id;
        }
        encode(&mut self.tx, id, ms);
        let deadline = timeout.map(|t| now + t);
        if let Some(d) = deadline {
            self.deadlines.insert((d, id));
        }
        self.pending.insert(
            id,
            Pending {
                opcode: req.opcode(),
                deadline,
            },
        );
        id
    }

    /// RPCs waiting for a reply.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Bytes to send.
    #[must_use]
    pub fn transmit(&self) -> &[u8] {
        &self.tx[self.tx_off..]
    }

    /// `n` bytes of [`ClientCore::transmit`] were sent.
    pub fn transmitted(&mut self, n: usize) {
        self.tx_off = (self.tx_off + n).min(self.tx.len());
        if self.tx_off == self.tx.len() {
            self.tx.clear();
            self.tx_off = 0;
        }
    }

    /// A buffer of `n` bytes to receive into; then call [`ClientCore::received`].
    pub fn recv_buf(&mut self, n: usize) -> &mut [u8] {
        self.dec.spare(n)
    }

    /// `n` bytes were received into the last [`ClientCore::recv_buf`] of
    /// `buf_len` bytes. Completes the RPCs whose replies are now whole.
    pub fn received(&mut self, buf_len: usize, n: usize) {
        self.dec.filled(buf_len, n);
        self.decode();
    }

    /// Feeds received bytes (copying variant of [`ClientCore::received`]).
    pub fn handle_input(&mut self, data: &[u8]) {
        self.dec.input(data);
        self.decode();
    }

    /// Feeds one whole reply frame already cut by the transport (RDMA: one
    /// message), without copying it through the stream decoder. `hdr` must
    /// describe `body` (its `body_len`); a body over the limit fails the RPC
    /// as the decoder would.
    pub fn handle_frame(&mut self, hdr: HeaderRepr, body: Vec<u8>) {
        if body.len() > MAX_BODY || hdr.body_len as usize != body.len() {
            self.finish(
                hdr.rpc_id,
                Err(RpcError::BadReply(WireError::BadLength {
                    field: "body_len",
                    len: body.len(),
                })),
            );
            return;
        }
        self.on_reply(hdr, body);
    }

    fn decode(&mut self) {
        loop {
            match self.dec.decode() {
                Ok(None) => break,
                Ok(Some(Decoded::Frame { hdr, body })) => self.on_reply(hdr, body),
                Ok(Some(Decoded::Oversized { hdr })) => {
                    self.finish(
                        hdr.rpc_id,
                        Err(RpcError::BadReply(WireError::BadLength {
                            field: "body_len",
                            len: hdr.body_len as usize,
                        })),
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "engine sent an undecodable frame: closing");
                    self.handle_close();
                    break;
                }
            }
        }
    }

    fn on_reply(&mut self, hdr: HeaderRepr, body: Vec<u8>) {
        let Some(p) = self.pending.get(&hdr.rpc_id) else {
            self.stray_replies += 1;
            return;
        };
        let r = if !hdr.response || hdr.opcode != p.opcode {
            Err(RpcError::BadReply(WireError::UnknownOpcode(u16::from(
                hdr.opcode,
            ))))
        } else if hdr.status != 0 {
            match (Status::from_code(hdr.status), hdr.map_version) {
                (Status::StaleMap, Some(version)) => Err(RpcError::StaleMap { version }),
                (s, _) => Err(RpcError::Status(s)),
            }
        } else {
            let (args, bulk) = split_body(&hdr, &body);
            match Reply::parse(hdr.opcode, args, bulk.len()) {
                Ok(reply) => Ok(RawReply {
                    reply,
                    bulk_len: bulk.len(),
                    body,
                }),
                Err(e) => Err(RpcError::BadReply(e)),
            }
        };
        self.finish(hdr.rpc_id, r);
    }

    fn finish(&mut self, id: u64, result: Result<RawReply, RpcError>) {
        if let Some(p) = self.pending.remove(&id) {
            if let Some(d) = p.deadline {
                self.deadlines.remove(&(d, id));
            }
            self.done.push_back(Completion { rpc_id: id, result });
        } else {
            self.stray_replies += 1;
        }
    }

    /// Times out the RPCs whose deadline passed (a spurious call is a no-op).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(d, id)) = self.deadlines.first() {
            if d > now {
                break;
            }
            self.finish(id, Err(RpcError::TimedOut));
        }
    }

    /// The earliest deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(d, _)| d)
    }

    /// Cancels an RPC: it completes with [`RpcError::Cancelled`]; a late
    /// reply is ignored. `false` if it was not in flight.
    pub fn cancel(&mut self, id: u64) -> bool {
        if self.pending.contains_key(&id) {
            self.finish(id, Err(RpcError::Cancelled));
            true
        } else {
            false
        }
    }

    /// The connection is gone: every RPC in flight fails.
    pub fn handle_close(&mut self) {
        self.closed = true;
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            self.finish(id, Err(RpcError::Disconnected));
        }
        self.tx.clear();
        self.tx_off = 0;
    }

    #[must_use]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }
}

/// A request received by the engine.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A whole request frame (not parsed beyond its header).
    Request { hdr: HeaderRepr, body: Vec<u8> },
    /// A request refused at the framing level; answer it with `status`.
    Reject { hdr: HeaderRepr, status: Status },
}

/// Engine side of one client connection.
#[derive(Debug)]
pub struct ServerConn {
    dec: FrameDecoder,
    /// The buffer being sent (from `tx_off`), then `queue`'s in order: large
    /// frames and bulk segments handed over by their owners are queued as
    /// they are (no copy), small ones are appended to the last buffer.
    tx: Vec<u8>,
    tx_off: usize,
    queue: std::collections::VecDeque<Vec<u8>>,
    /// Bytes in `queue`.
    queued: usize,
    /// The last buffer (`queue`'s, else `tx`) was handed over by its owner:
    /// small bytes go into a new buffer behind it, not into it.
    last_owned: bool,
    closing: bool,
    /// Requests refused (oversized, replies sent by a client, ...).
    pub rejected: u64,
}

impl Default for ServerConn {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerConn {
    pub fn new() -> Self {
        ServerConn {
            dec: FrameDecoder::new(MAX_BODY),
            tx: Vec::new(),
            tx_off: 0,
            queue: Default::default(),
            queued: 0,
            last_owned: false,
            closing: false,
            rejected: 0,
        }
    }

    /// Encodes small bytes behind everything queued: into the last buffer,
    /// unless that is a large one someone handed over (appending could
    /// reallocate and copy it), then into a new one.
    fn encode_tail(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        if self.last_owned {
            self.queue.push_back(Vec::new());
            self.last_owned = false;
        }
        match self.queue.back_mut() {
            Some(b) => {
                let before = b.len();
                f(b);
                self.queued += b.len() - before;
            }
            None => f(&mut self.tx),
        }
    }

    pub fn recv_buf(&mut self, n: usize) -> &mut [u8] {
        self.dec.spare(n)
    }
    pub fn received(&mut self, buf_len: usize, n: usize) {
        self.dec.filled(buf_len, n);
    }
    pub fn handle_input(&mut self, data: &[u8]) {
        self.dec.input(data);
    }

    /// The next request. A stream that cannot be decoded any more gets one
    /// `Proto` reply (RPC id 0) and is marked closing.
    #[must_use]
    pub fn poll_incoming(&mut self) -> Option<Incoming> {
        if self.closing {
            return None;
        }
        match self.dec.decode() {
            Ok(None) => None,
            Ok(Some(Decoded::Frame { hdr, body })) => {
                if hdr.response {
                    self.rejected += 1;
                    return Some(Incoming::Reject {
                        hdr,
                        status: Status::Proto,
                    });
                }
                Some(Incoming::Request { hdr, body })
            }
            Ok(Some(Decoded::Oversized { hdr })) => {
                self.rejected += 1;
                Some(Incoming::Reject {
                    hdr,
                    status: Status::RecTooBig,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, "undecodable stream from client: closing it");
                self.rejected += 1;
                self.encode_tail(|t| {
                    encode_reply(t, 0, Opcode::Ping, Status::Proto, &Reply::Empty, &[])
                });
                self.closing = true;
                None
            }
        }
    }

    /// Queues an error reply to `hdr`'s request.
    pub fn reply_error(&mut self, hdr: &HeaderRepr, status: Status) {
        self.encode_tail(|t| encode_reply(t, hdr.rpc_id, hdr.opcode, status, &Reply::Empty, &[]));
    }

    /// Refuses `hdr`'s request: the engine's pool map (`engine_version`) is
    /// newer than the request's (`DER_STALE` with the engine's version).
    pub fn reply_stale_map(&mut self, hdr: &HeaderRepr, engine_version: u32) {
        self.encode_tail(|t| encode_stale_map(t, hdr.rpc_id, hdr.opcode, engine_version));
    }

    /// Queues a reply frame built elsewhere (by a target).
    pub fn queue_frame(&mut self, frame: &[u8]) {
        self.encode_tail(|t| t.extend_from_slice(frame));
    }

    /// Buffers at least this long are queued as they are, not copied.
    const OWN_MIN: usize = 16 * 1024;

    /// Queues bytes it takes over (a frame, or a part of one: a reply's bulk
    /// segments follow its head): a large buffer is queued without a copy
    /// (or becomes the transmit buffer when nothing is waiting); small ones
    /// are copied behind what is queued (buffers keep their capacity).
    pub fn queue_owned(&mut self, frame: Vec<u8>) {
        if frame.len() < Self::OWN_MIN {
            self.encode_tail(|t| t.extend_from_slice(&frame));
        } else if self.tx_off == self.tx.len() && self.queue.is_empty() {
            self.tx = frame;
            self.tx_off = 0;
            self.last_owned = true;
        } else {
            self.queued += frame.len();
            self.queue.push_back(frame);
            self.last_owned = true;
        }
    }

    /// Queues a reply.
    pub fn reply(&mut self, hdr: &HeaderRepr, status: Status, rep: &Reply, bulk: &[&[u8]]) {
        self.encode_tail(|t| encode_reply(t, hdr.rpc_id, hdr.opcode, status, rep, bulk));
    }

    /// Bytes queued and not yet sent.
    pub fn backlog(&self) -> usize {
        self.tx.len() - self.tx_off + self.queued
    }

    /// The unsent bytes as slices in order (at most `out.len()` of them;
    /// returns how many were filled), for one `writev(2)`.
    pub fn transmit_vectored<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        let first = std::iter::once(&self.tx[self.tx_off..]);
        for b in first.chain(self.queue.iter().map(Vec::as_slice)) {
            if n == out.len() {
                break;
            }
            if !b.is_empty() {
                out[n] = std::io::IoSlice::new(b);
                n += 1;
            }
        }
        n
    }

    /// The connection should close once its queued bytes are sent.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The unsent bytes of the first buffer (empty only when nothing is
    /// queued at all).
    #[must_use]
    pub fn transmit(&self) -> &[u8] {
        &self.tx[self.tx_off..]
    }
    /// `n` bytes were sent (they may span several buffers).
    pub fn transmitted(&mut self, n: usize) {
        let mut n = n;
        loop {
            let here = n.min(self.tx.len() - self.tx_off);
            self.tx_off += here;
            n -= here;
            if self.tx_off < self.tx.len() {
                return;
            }
            match self.queue.pop_front() {
                Some(next) => {
                    self.queued -= next.len();
                    self.tx = next;
                    self.tx_off = 0;
                }
                None => {
                    self.tx.clear();
                    self.tx_off = 0;
                    self.last_owned = false;
                    return;
                }
            }
            if n == 0 && !self.tx.is_empty() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map version rides on object I/O only; a `DER_STALE` answer with
    /// the engine's version completes the RPC with `StaleMap { version }`;
    /// a `DER_STALE` without a version (not this engine's form) stays a
    /// plain status.
    #[test]
    fn map_version_and_stale_map_refusal() {
        let now = Instant::now();
        let mut c = ClientCore::new();
        c.set_map_version(Some(4));
        let fetch = Request::ObjFetch {
            t: super::super::msg::ObjTarget {
                coh: 7,
                oid: Default::default(),
                epoch: 0,
                stripe: 0,
            },
            dkey: b"d".to_vec(),
            iods: Vec::new(),
        };
        let f = c.start(now, &fetch, &[], None);
        c.start(now, &Request::PoolList, &[], None);
        let g = c.start(now, &fetch, &[], None);
        let bytes = c.transmit().to_vec();
        c.transmitted(bytes.len());

        let mut s = ServerConn::new();
        s.handle_input(&bytes);
        let mut seen = Vec::new();
        while let Some(inc) = s.poll_incoming() {
            let Incoming::Request { hdr, .. } = inc else {
                panic!("{inc:?}")
            };
            seen.push((hdr.opcode, hdr.map_version));
            match hdr.rpc_id {
                id if id == f => s.reply_stale_map(&hdr, 6),
                id if id == g => s.reply_error(&hdr, Status::StaleMap),
                _ => s.reply(&hdr, Status::Ok, &Reply::Empty, &[]),
            }
        }
        assert_eq!(
            seen,
            [
                (Opcode::ObjFetch, Some(4)),
                (Opcode::PoolList, None),
                (Opcode::ObjFetch, Some(4))
            ]
        );
        let back = s.transmit().to_vec();
        c.handle_input(&back);
        let mut done = HashMap::new();
        while let Some(x) = c.poll_completion() {
            done.insert(x.rpc_id, x.result);
        }
        assert_eq!(done[&f], Err(RpcError::StaleMap { version: 6 }));
        assert_eq!(done[&g], Err(RpcError::Status(Status::StaleMap)));
        // no version set: none sent
        c.set_map_version(None);
        c.start(now, &fetch, &[], None);
        let mut s = ServerConn::new();
        s.handle_input(c.transmit());
        match s.poll_incoming() {
            Some(Incoming::Request { hdr, .. }) => assert_eq!(hdr.map_version, None),
            other => panic!("{other:?}"),
        }
    }

    /// Everything queued, sent by `writev`-sized steps of at most `step` bytes.
    fn drain(c: &mut ServerConn, step: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while c.backlog() > 0 {
            let mut sl = [std::io::IoSlice::new(&[]); 4];
            let n = c.transmit_vectored(&mut sl);
            assert!(n > 0, "bytes queued but nothing to send");
            let mut took = 0;
            for s in &sl[..n] {
                let k = s.len().min(step - took);
                out.extend_from_slice(&s[..k]);
                took += k;
                if took == step {
                    break;
                }
            }
            c.transmitted(took);
        }
        assert!(c.transmit().is_empty());
        out
    }

    #[test]
    fn owned_buffers_and_small_replies_leave_in_queue_order() {
        for step in [1usize, 7, 16 * 1024 + 3, usize::MAX / 2] {
            let mut c = ServerConn::new();
            let mut want = Vec::new();
            let big = vec![7u8; 100 * 1024];
            c.queue_owned(big.clone());
            want.extend_from_slice(&big);
            c.transmitted(5);
            want.drain(..5);
            // a reply's head, then its large bulk segment, then small ones
            c.queue_owned(b"head".to_vec());
            want.extend_from_slice(b"head");
            let seg: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
            c.queue_owned(seg.clone());
            want.extend_from_slice(&seg);
            c.queue_frame(b"f1");
            want.extend_from_slice(b"f1");
            c.queue_owned(b"f2".to_vec());
            want.extend_from_slice(b"f2");
            assert_eq!(c.backlog(), want.len());
            assert_eq!(drain(&mut c, step), want, "step {step}");
            // nothing left; a small frame starts the buffer again
            c.queue_owned(b"g".to_vec());
            assert_eq!(c.transmit(), b"g");
        }
    }

    #[test]
    fn owned_frames_queue_in_order_behind_unsent_bytes() {
        let mut c = ServerConn::new();
        let big = vec![7u8; 100 * 1024];
        c.queue_owned(big.clone());
        c.transmitted(big.len() - 1);
        c.queue_owned(b"x".to_vec());
        // the large buffer is not appended to: its last byte, then "x"
        assert_eq!(c.transmit(), &[7]);
        c.transmitted(1);
        assert_eq!(c.transmit(), b"x");
        c.transmitted(1);
        c.queue_owned(b"abc".to_vec());
        assert_eq!(c.transmit(), b"abc");
        c.transmitted(1);
        c.queue_owned(b"de".to_vec());
        assert_eq!(c.transmit(), b"bcde");
        c.transmitted(4);
        assert!(c.transmit().is_empty());
        c.queue_owned(b"f".to_vec());
        c.queue_frame(b"g");
        assert_eq!(c.transmit(), b"fg");
    }
    use crate::rpc::msg::NameRef;

    /// Client and server cores wired back to back; the server answers Ping
    /// and PoolQuery with `status`.
    fn exchange(c: &mut ClientCore, s: &mut ServerConn, status: Status) {
        let bytes = c.transmit().to_vec();
        c.transmitted(bytes.len());
        s.handle_input(&bytes);
        while let Some(inc) = s.poll_incoming() {
            match inc {
                Incoming::Request { hdr, .. } => s.reply(&hdr, status, &Reply::Empty, &[]),
                Incoming::Reject { hdr, status } => s.reply_error(&hdr, status),
            }
        }
        let back = s.transmit().to_vec();
        s.transmitted(back.len());
        c.handle_input(&back);
    }

    #[test]
    fn request_reply_and_error_status() {
        let now = Instant::now();
        let mut c = ClientCore::new();
        let mut s = ServerConn::new();
        let a = c.start(now, &Request::Ping, &[], None);
        exchange(&mut c, &mut s, Status::Ok);
        let done = c.poll_completion().unwrap();
        assert_eq!(done.rpc_id, a);
        assert_eq!(done.result.unwrap().reply, Reply::Empty);
        let b = c.start(now, &Request::Ping, &[], None);
        exchange(&mut c, &mut s, Status::NonExist);
        let done = c.poll_completion().unwrap();
        assert_eq!(
            (done.rpc_id, done.result),
            (b, Err(RpcError::Status(Status::NonExist)))
        );
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn timeout_cancel_and_late_replies() {
        let now = Instant::now();
        let mut c = ClientCore::new();
        let mut s = ServerConn::new();
        let a = c.start(now, &Request::Ping, &[], Some(Duration::from_millis(10)));
        let b = c.start(now, &Request::Ping, &[], None);
        assert_eq!(c.poll_timeout(), Some(now + Duration::from_millis(10)));
        c.handle_timeout(now + Duration::from_millis(5));
        assert!(c.poll_completion().is_none());
        c.handle_timeout(now + Duration::from_millis(10));
        let t = c.poll_completion().unwrap();
        assert_eq!((t.rpc_id, t.result), (a, Err(RpcError::TimedOut)));
        assert!(c.cancel(b));
        assert!(!c.cancel(b));
        assert_eq!(
            c.poll_completion().unwrap().result,
            Err(RpcError::Cancelled)
        );
        // the engine's late answers to both are counted and dropped
        exchange(&mut c, &mut s, Status::Ok);
        assert!(c.poll_completion().is_none());
        assert_eq!(c.stray_replies, 2);
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn disconnect_fails_everything_in_flight() {
        let now = Instant::now();
        let mut c = ClientCore::new();
        c.start(now, &Request::PoolList, &[], None);
        c.start(
            now,
            &Request::PoolQuery {
                pool: NameRef::Label("x".into()),
            },
            &[],
            None,
        );
        c.handle_close();
        let mut n = 0;
        while let Some(d) = c.poll_completion() {
            assert_eq!(d.result, Err(RpcError::Disconnected));
            n += 1;
        }
        assert_eq!(n, 2);
        let late = c.start(now, &Request::Ping, &[], None);
        assert_eq!(c.poll_completion().unwrap().rpc_id, late);
    }

    #[test]
    fn server_rejects_oversized_then_keeps_serving_and_closes_on_garbage() {
        let now = Instant::now();
        let mut c = ClientCore::new();
        let mut s = ServerConn::new();
        let big = vec![0u8; MAX_BODY + 1];
        let a = c.start(now, &Request::Ping, &[&big], None);
        let b = c.start(now, &Request::Ping, &[], None);
        exchange(&mut c, &mut s, Status::Ok);
        let ra = c.poll_completion().unwrap();
        assert_eq!(
            (ra.rpc_id, ra.result),
            (a, Err(RpcError::Status(Status::RecTooBig)))
        );
        let rb = c.poll_completion().unwrap();
        assert_eq!(rb.rpc_id, b);
        assert!(rb.result.is_ok());
        s.handle_input(&[0xab; 64]);
        assert!(s.poll_incoming().is_none());
        assert!(s.is_closing());
        assert!(!s.transmit().is_empty());
    }
}
