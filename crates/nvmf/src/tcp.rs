//! Sans-IO NVMe/TCP connection cores: [`TargetConn`] (controller side) and
//! [`HostConn`] (host side). Bytes in, PDUs/commands/events out; no sockets, no
//! clocks, no threads inside (STYLE.md §2).
//!
//! Poll order for a driver, per connection:
//! 1. read from the socket into [`TargetConn::recv_iovecs`] (`readv`) and call
//!    [`TargetConn::handle_received`] (or hand any slice to `handle_bytes`);
//! 2. drain [`TargetConn::poll_event`] (commands ready to execute, termination);
//! 3. complete commands with [`TargetConn::complete`] (any time later);
//! 4. write [`TargetConn::poll_transmit_vectored`] (or the contiguous
//!    [`TargetConn::poll_transmit`]) to the socket and [`TargetConn::advance_tx`].
//!
//! After `Terminated` the driver flushes the transmit buffer (which then holds the
//! term request, if we sent one) and closes the socket.
//!
//! What the transport does by itself: ICReq/ICResp negotiation (digests, PDU data
//! alignment, MAXH2CDATA), in-capsule data, R2T + H2CData for writes, C2HData for
//! reads (with the SUCCESS flag when allowed), digest checks, and term requests on
//! protocol errors. What it leaves to the caller: everything inside the SQE.

use std::collections::VecDeque;

use tracing::{debug, warn};
use wire::nvme_tcp::{self as pdu, Digests, Fes, Pdu, PduRepr, PduType};

/// SGL descriptor type byte (byte 15 of the descriptor, SQE byte 39) for data
/// carried in the capsule: Data Block, subtype Offset.
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL type byte for data moved by the transport (R2T/H2CData or C2HData):
/// Transport Data Block, subtype Transport Specific.
pub const SGL_TRANSPORT: u8 = 0x5a;

/// Data transfer direction of a command (opcode bits 1:0, fctype bits 1:0 for
/// fabrics commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XferDir {
    None,
    HostToCtrl,
    CtrlToHost,
    Bidirectional,
}

impl XferDir {
    /// Direction of the command in `sqe`.
    pub fn of(sqe: &[u8; 64]) -> XferDir {
        let code = if sqe[0] == 0x7f { sqe[4] } else { sqe[0] };
        match code & 3 {
            0 => XferDir::None,
            1 => XferDir::HostToCtrl,
            2 => XferDir::CtrlToHost,
            _ => XferDir::Bidirectional,
        }
    }
}

fn sqe_cid(sqe: &[u8; 64]) -> u16 {
    u16::from_le_bytes([sqe[2], sqe[3]])
}
fn sgl_addr(sqe: &[u8; 64]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&sqe[24..32]);
    u64::from_le_bytes(a)
}
fn sgl_len(sqe: &[u8; 64]) -> u32 {
    u32::from_le_bytes([sqe[32], sqe[33], sqe[34], sqe[35]])
}

/// Writes SGL1 into an SQE (PSDT = SGL, single descriptor).
pub fn set_sgl(sqe: &mut [u8; 64], ty: u8, addr: u64, len: u32) {
    sqe[1] = (sqe[1] & 0x3f) | 0x40;
    sqe[24..32].copy_from_slice(&addr.to_le_bytes());
    sqe[32..36].copy_from_slice(&len.to_le_bytes());
    sqe[36..39].fill(0);
    sqe[39] = ty;
}

/// A transport-level problem with how a command's data was described; the caller
/// completes the command with the matching NVMe status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataError {
    /// SGL descriptor type invalid (generic 0x11).
    SglTypeInvalid,
    /// Data SGL length invalid (generic 0x0f): in-capsule length disagrees, or too long.
    SglLengthInvalid,
    /// SGL offset invalid (generic 0x16).
    SglOffsetInvalid,
    /// Data digest mismatch on H2C data (generic 0x04, data transfer error).
    DataDigest,
}

impl DataError {
    /// (SCT, SC) of the NVMe status to complete with.
    pub fn status(self) -> (u8, u8) {
        match self {
            DataError::SglTypeInvalid => (0, 0x11),
            DataError::SglLengthInvalid => (0, 0x0f),
            DataError::SglOffsetInvalid => (0, 0x16),
            DataError::DataDigest => (0, 0x04),
        }
    }
}

/// A command ready to execute: the SQE, the host's data (for host-to-controller
/// commands, complete), and the length of data the host expects back.
#[derive(Debug)]
pub struct Request {
    pub sqe: [u8; 64],
    pub data: Vec<u8>,
    /// Bytes the host's SGL allows for controller-to-host data.
    pub c2h_len: u32,
    /// The data could not be taken in; complete with this error's status.
    pub error: Option<DataError>,
}

impl Request {
    pub fn cid(&self) -> u16 {
        sqe_cid(&self.sqe)
    }
}

/// What the target connection reports.
#[derive(Debug)]
pub enum TargetEvent {
    /// ICReq answered; parameters negotiated.
    Established,
    /// A command to execute.
    Command(Request),
    /// The connection is over: flush transmit and close. `fes` is the error we
    /// reported in our C2HTermReq, or the host's in its H2CTermReq.
    Terminated { fes: Option<Fes>, by_peer: bool },
}

/// Target-side transport parameters.
#[derive(Debug, Clone, Copy)]
pub struct TargetParams {
    /// Accept header digests when the host asks.
    pub hdgst: bool,
    /// Accept data digests when the host asks.
    pub ddgst: bool,
    /// Largest H2CData PDU data length we accept.
    pub maxh2cdata: u32,
    /// Our PDU data alignment (0's based dwords) for in-capsule and H2C data.
    pub cpda: u8,
    /// Largest in-capsule data on I/O queues (IOCCSZ*16 - 64).
    pub in_capsule: u32,
    /// Largest data transfer of one command (MDTS).
    pub max_xfer: u32,
    /// Largest C2HData PDU we send.
    pub c2h_chunk: u32,
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams {
            hdgst: true,
            ddgst: true,
            maxh2cdata: 128 * 1024,
            cpda: 0,
            in_capsule: 8192,
            max_xfer: 1024 * 1024,
            c2h_chunk: 128 * 1024,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitIc,
    Ready,
    Terminated,
}

/// A command waiting for H2C data (after our R2T).
#[derive(Debug)]
struct H2cPending {
    sqe: [u8; 64],
    buf: Vec<u8>,
    received: usize,
    ddgst_bad: bool,
}

/// The H2CData PDU being received without a copy: its header was checked, its
/// data goes to `h2c[ttag].buf[pos..end]`, then `ddgst` digest bytes follow in the
/// stream.
#[derive(Debug, Clone, Copy)]
struct DirectRx {
    ttag: u16,
    /// Where this PDU's data starts in the command's buffer (DATAO).
    start: usize,
    /// Next byte to receive.
    pos: usize,
    end: usize,
    ddgst: bool,
    last: bool,
}

/// A read laid out as: `pre` bytes to the rx buffer (a digest still due, then a
/// PDU header), `len` bytes to `h2c[ttag].buf[start..]`, the rest to the rx buffer.
#[derive(Debug, Clone, Copy)]
struct RxPlan {
    pre: usize,
    ttag: u16,
    start: usize,
    len: usize,
}

/// `got` bytes read to `h2c[ttag].buf[start..]`; in the stream they belong at rx
/// index `at` (after the digest due and the PDU header).
#[derive(Debug, Clone, Copy)]
struct Prefill {
    ttag: u16,
    start: usize,
    got: usize,
    at: usize,
}

/// Counters of one connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnStats {
    pub pdus_rx: u64,
    pub pdus_tx: u64,
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    pub r2t: u64,
    pub c2h_success: u64,
    pub hdgst_errors: u64,
    pub ddgst_errors: u64,
    pub term_reqs: u64,
    /// H2C data bytes read from the socket straight into their command's buffer.
    pub h2c_in_place: u64,
    /// H2C data bytes copied from the receive buffer (data that arrived in one read
    /// with earlier PDUs).
    pub h2c_copied: u64,
}

/// Shared receive framing: an accumulation buffer with a read cursor.
#[derive(Debug, Default)]
struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RxBuf {
    fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < min && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < min {
            self.buf.resize(self.end + min, 0);
        }
        &mut self.buf[self.end..]
    }
    fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
    fn push(&mut self, data: &[u8]) {
        let s = self.spare(data.len());
        s[..data.len()].copy_from_slice(data);
        self.commit(data.len());
    }
    fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// Transmit buffer: PDUs appended, drained by the driver.
#[derive(Debug, Default)]
struct TxBuf {
    buf: Vec<u8>,
    pos: usize,
}

impl TxBuf {
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }
    fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }
}

/// The target's transmit queue: PDU headers (and small PDUs) in one byte buffer,
/// C2H data as owned buffers referenced in place, so read data reaches the socket
/// without a copy (`write_vectored`). Buffers come back to the connection's pool
/// once sent.
#[derive(Debug, Default)]
struct SegTx {
    hdr: Vec<u8>,
    segs: VecDeque<Seg>,
    /// Owned data buffers and how many segments still refer to them.
    datas: Vec<Option<(Vec<u8>, u32)>>,
    free_datas: Vec<usize>,
    /// Bytes of the front segment already sent.
    front: usize,
    total: usize,
}

#[derive(Debug, Clone, Copy)]
enum Seg {
    Hdr {
        start: usize,
        end: usize,
    },
    Data {
        slot: usize,
        start: usize,
        end: usize,
    },
}

impl SegTx {
    fn seg_bytes(&self, s: Seg) -> &[u8] {
        match s {
            Seg::Hdr { start, end } => &self.hdr[start..end],
            Seg::Data { slot, start, end } => match &self.datas[slot] {
                Some((v, _)) => &v[start..end],
                None => &[],
            },
        }
    }
    /// Appends header bytes written by `f` into the header buffer.
    fn push_hdr(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.hdr.len();
        f(&mut self.hdr);
        let end = self.hdr.len();
        if end == start {
            return;
        }
        self.total += end - start;
        if let Some(Seg::Hdr { end: e, .. }) = self.segs.back_mut() {
            if *e == start {
                *e = end;
                return;
            }
        }
        self.segs.push_back(Seg::Hdr { start, end });
    }
    fn add_data(&mut self, v: Vec<u8>) -> usize {
        match self.free_datas.pop() {
            Some(i) => {
                self.datas[i] = Some((v, 0));
                i
            }
            None => {
                self.datas.push(Some((v, 0)));
                self.datas.len() - 1
            }
        }
    }
    fn push_data(&mut self, slot: usize, start: usize, end: usize) {
        if let Some(Some((_, refs))) = self.datas.get_mut(slot) {
            *refs += 1;
            self.total += end - start;
            self.segs.push_back(Seg::Data { slot, start, end });
        }
    }
    fn pending(&self) -> &[u8] {
        match self.segs.front() {
            Some(&s) => &self.seg_bytes(s)[self.front..],
            None => &[],
        }
    }
    fn vectored<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (i, &s) in self.segs.iter().enumerate() {
            if n == out.len() {
                break;
            }
            let b = self.seg_bytes(s);
            let b = if i == 0 { &b[self.front..] } else { b };
            out[n] = std::io::IoSlice::new(b);
            n += 1;
        }
        n
    }
    fn advance(&mut self, mut n: usize, pool: &mut Vec<Vec<u8>>) {
        n = n.min(self.total);
        self.total -= n;
        while n > 0 {
            let Some(&s) = self.segs.front() else { break };
            let len = self.seg_bytes(s).len() - self.front;
            if n < len {
                self.front += n;
                return;
            }
            n -= len;
            self.front = 0;
            self.segs.pop_front();
            if let Seg::Data { slot, .. } = s {
                if let Some(Some((_, refs))) = self.datas.get_mut(slot) {
                    *refs -= 1;
                    if *refs == 0 {
                        if let Some((v, _)) = self.datas[slot].take() {
                            if pool.len() < 256 {
                                pool.push(v);
                            }
                        }
                        self.free_datas.push(slot);
                    }
                }
            }
        }
        if self.segs.is_empty() {
            self.hdr.clear();
            self.front = 0;
        } else if self.hdr.len() > 256 * 1024 {
            self.compact();
        }
    }
    /// Drops header bytes no segment refers to any more (a queue that never
    /// drains must not grow without bound).
    fn compact(&mut self) {
        let first = self.segs.iter().find_map(|s| match s {
            Seg::Hdr { start, .. } => Some(*start),
            _ => None,
        });
        let first = first.unwrap_or(self.hdr.len());
        if first == 0 {
            return;
        }
        self.hdr.drain(..first);
        for s in self.segs.iter_mut() {
            if let Seg::Hdr { start, end } = s {
                *start -= first;
                *end -= first;
            }
        }
    }
}

/// Builds the data of a term request: the offending PDU header (up to hlen, and at
/// most what fits a 152-byte term request).
fn term_data(offending: &[u8]) -> &[u8] {
    let max = pdu::TERM_REQ_MAX_LEN - pdu::DATA_HLEN;
    let hlen = offending.get(2).map_or(0, |&h| h as usize);
    let n = hlen.max(pdu::CH_LEN).min(offending.len()).min(max);
    &offending[..n]
}

/// The controller side of one NVMe/TCP connection (one queue pair).
#[derive(Debug)]
pub struct TargetConn {
    params: TargetParams,
    state: State,
    dg: Digests,
    hpda: u8,
    rx: RxBuf,
    tx: SegTx,
    events: VecDeque<TargetEvent>,
    /// Commands waiting for H2C data, indexed by TTAG.
    h2c: Vec<Option<H2cPending>>,
    free_ttags: Vec<u16>,
    /// An H2CData PDU whose data is being read from the socket straight into its
    /// command's buffer (see [`TargetConn::recv_iovecs`]).
    direct: Option<DirectRx>,
    /// TTAGs in the order their R2Ts went out (predicts the next H2CData).
    r2t_order: VecDeque<u16>,
    /// How the last [`TargetConn::recv_iovecs`] split the stream.
    plan: Option<RxPlan>,
    /// Data a read put in place ahead of its H2CData header being checked.
    prefilled: Option<Prefill>,
    /// Whether C2HData may carry the SUCCESS flag (SQ flow control disabled).
    c2h_success: bool,
    /// Largest in-capsule data accepted now (admin queues take 8 KiB too).
    pool: Vec<Vec<u8>>,
    stats: ConnStats,
}

impl TargetConn {
    pub fn new(params: TargetParams) -> Self {
        TargetConn {
            params,
            state: State::AwaitIc,
            dg: Digests::default(),
            hpda: 0,
            rx: RxBuf::default(),
            tx: SegTx::default(),
            events: VecDeque::new(),
            h2c: Vec::new(),
            free_ttags: Vec::new(),
            direct: None,
            r2t_order: VecDeque::new(),
            plan: None,
            prefilled: None,
            c2h_success: false,
            pool: Vec::new(),
            stats: ConnStats::default(),
        }
    }

    /// Negotiated digests.
    pub fn digests(&self) -> Digests {
        self.dg
    }
    pub fn stats(&self) -> ConnStats {
        self.stats
    }
    pub fn is_terminated(&self) -> bool {
        self.state == State::Terminated
    }
    /// Allow the C2HData SUCCESS optimisation (the queue was connected with SQ flow
    /// control disabled, so no SQHD needs to reach the host).
    pub fn set_c2h_success(&mut self, on: bool) {
        self.c2h_success = on;
    }

    /// A buffer of `len` bytes from the connection's pool (for read data).
    pub fn alloc_buf(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }
    /// Returns a buffer to the pool.
    pub fn recycle(&mut self, mut v: Vec<u8>) {
        // empty vectors (commands without data) would only pollute the pool
        if self.pool.len() < 256 && v.capacity() > 0 && v.capacity() <= 4 * 1024 * 1024 {
            v.clear();
            self.pool.push(v);
        }
    }

    fn max_pdu(&self) -> usize {
        let ic = 16 + 4096 + self.params.in_capsule.max(self.params.maxh2cdata) as usize;
        ic + 2 * pdu::DIGEST_LEN + 128
    }

    /// Where to read socket bytes (`readv` into `out[..k]`, `k` returned; `out`
    /// needs 3 slots); then call [`TargetConn::handle_received`]. Never all empty.
    ///
    /// H2C data avoids the receive buffer: while an H2CData PDU's data is on its
    /// way, the first slice is the rest of that data's place in the command's
    /// buffer; while writes wait for data (R2T sent) and nothing is buffered, the
    /// slices are a PDU header's worth of the receive buffer, the place of the data
    /// the next H2CData PDU most likely carries (the oldest R2T's next bytes), then
    /// the receive buffer again. A different PDU arriving there costs one copy.
    pub fn recv_iovecs<'a>(&'a mut self, out: &mut [std::io::IoSliceMut<'a>]) -> usize {
        self.plan = None;
        let d = self.direct;
        if let Some(d) = d {
            if d.pos < d.end {
                if matches!(self.h2c.get(d.ttag as usize), Some(Some(_))) {
                    if let Some(p) = &mut self.h2c[d.ttag as usize] {
                        out[0] = std::io::IoSliceMut::new(&mut p.buf[d.pos..d.end]);
                    }
                    return 1;
                }
                // the command went away under us (cannot happen): forget the PDU
                self.direct = None;
            }
        }
        // bytes still missing before the next PDU header: none, or a data digest
        let need = match self.direct {
            None if self.rx.avail().is_empty() => Some(0),
            Some(d) if d.ddgst => Some(pdu::DIGEST_LEN.saturating_sub(self.rx.avail().len())),
            _ => None,
        };
        let guess = match need {
            Some(need) if self.state == State::Ready && out.len() >= 3 => {
                self.predict_h2c().map(|g| (need, g))
            }
            _ => None,
        };
        let Some((need, (ttag, start, len))) = guess else {
            out[0] = std::io::IoSliceMut::new(self.rx.spare(64 * 1024));
            return 1;
        };
        if !matches!(self.h2c.get(ttag as usize), Some(Some(_))) {
            out[0] = std::io::IoSliceMut::new(self.rx.spare(64 * 1024));
            return 1;
        }
        let pre = need + pdu::data_offset(pdu::DATA_HLEN, self.dg.header, self.params.cpda);
        // more H2C data to come: stop after this PDU's digest, so that the next
        // read starts at the next header; else take whatever follows
        let dd = if self.dg.data { pdu::DIGEST_LEN } else { 0 };
        let buf_len = self.h2c[ttag as usize].as_ref().map_or(0, |p| p.buf.len());
        let more = start + len < buf_len || self.r2t_order.len() > 1;
        let tail = if more { dd } else { 64 * 1024 };
        self.plan = Some(RxPlan {
            pre,
            ttag,
            start,
            len,
        });
        let TargetConn { rx, h2c, .. } = self;
        let (head, rest) = rx.spare(pre + tail.max(1)).split_at_mut(pre);
        let Some(p) = h2c[ttag as usize].as_mut() else {
            return 0; // checked above
        };
        out[0] = std::io::IoSliceMut::new(head);
        out[1] = std::io::IoSliceMut::new(&mut p.buf[start..start + len]);
        if tail == 0 {
            return 2;
        }
        out[2] = std::io::IoSliceMut::new(&mut rest[..tail]);
        3
    }

    /// The data the next H2CData PDU most likely carries: (ttag, offset, length).
    /// The PDU after an H2CData PDU that is not the last of its R2T continues it;
    /// otherwise the oldest R2T still waiting for data goes first.
    fn predict_h2c(&self) -> Option<(u16, usize, usize)> {
        let max = self.params.maxh2cdata as usize;
        let at = |ttag: u16, start: usize| match self.h2c.get(ttag as usize) {
            Some(Some(p)) if start < p.buf.len() => {
                Some((ttag, start, (p.buf.len() - start).min(max)))
            }
            _ => None,
        };
        if let Some(d) = self.direct {
            if !d.last {
                return at(d.ttag, d.end);
            }
        }
        self.r2t_order.iter().find_map(|&t| {
            // the PDU whose digest is due has its data in already (not yet counted)
            let start = match self.direct {
                Some(d) if d.ttag == t => d.end,
                _ => self.h2c.get(t as usize)?.as_ref()?.received,
            };
            at(t, start)
        })
    }

    /// `n` bytes were written into the slices of [`TargetConn::recv_iovecs`].
    pub fn handle_received(&mut self, n: usize) {
        self.stats.bytes_rx += n as u64;
        if let Some(p) = self.plan.take() {
            let head = n.min(p.pre);
            self.rx.commit(head);
            let got = (n - head).min(p.len);
            if got > 0 {
                // the header (and digest) are in; the data is in place, unchecked
                self.prefilled = Some(Prefill {
                    ttag: p.ttag,
                    start: p.start,
                    got,
                    at: self.rx.end,
                });
                self.rx.commit(n - head - got);
            }
        } else {
            match &mut self.direct {
                Some(d) if d.pos < d.end => {
                    d.pos = (d.pos + n).min(d.end);
                    self.stats.h2c_in_place += n as u64;
                    if d.pos == d.end && !d.ddgst {
                        self.finish_direct(None);
                    }
                }
                _ => self.rx.commit(n),
            }
        }
        self.process();
    }
    /// Feeds bytes received from the host (copied as a socket read would write
    /// them, so this takes the same paths as [`TargetConn::recv_iovecs`]).
    pub fn handle_bytes(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let mut iov = [(); 3].map(|_| std::io::IoSliceMut::new(&mut []));
            let k = self.recv_iovecs(&mut iov);
            let mut n = 0;
            for v in iov[..k].iter_mut() {
                let m = v.len().min(data.len() - n);
                v[..m].copy_from_slice(&data[n..n + m]);
                n += m;
            }
            data = &data[n..];
            self.handle_received(n);
        }
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<TargetEvent> {
        self.events.pop_front()
    }
    /// The next contiguous bytes waiting to be sent (one segment; see
    /// [`TargetConn::poll_transmit_vectored`] for all of them).
    #[must_use]
    pub fn poll_transmit(&self) -> &[u8] {
        self.tx.pending()
    }
    /// Fills `out` with the bytes waiting to be sent, in order, without copying;
    /// returns how many slices were filled (for `write_vectored`).
    #[must_use]
    pub fn poll_transmit_vectored<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
        self.tx.vectored(out)
    }
    /// `n` bytes were sent.
    pub fn advance_tx(&mut self, n: usize) {
        self.stats.bytes_tx += n as u64;
        self.tx.advance(n, &mut self.pool);
    }
    /// Everything waiting, copied into one vector and consumed (for tests and for a
    /// last flush before closing).
    pub fn drain_tx(&mut self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.tx.total);
        while self.tx.total > 0 {
            let b = self.tx.pending();
            if b.is_empty() {
                break;
            }
            v.extend_from_slice(b);
            let n = b.len();
            self.advance_tx(n);
        }
        v
    }
    /// Bytes queued for transmission (for back-pressure).
    pub fn tx_backlog(&self) -> usize {
        self.tx.total
    }

    fn send(&mut self, r: &PduRepr, data: &[u8], pda: u8) {
        let dg = self.dg;
        self.tx.push_hdr(|v| r.emit_to_vec(v, data, dg, pda));
        self.stats.pdus_tx += 1;
    }

    fn terminate(&mut self, fes: Fes, fei: u32, offending: &[u8]) {
        if self.state == State::Terminated {
            return;
        }
        warn!(?fes, fei, "nvme/tcp: protocol error, sending C2HTermReq");
        self.direct = None;
        self.plan = None;
        self.prefilled = None;
        let d = term_data(offending).to_vec();
        self.send(&PduRepr::C2hTermReq { fes, fei }, &d, 0);
        self.stats.term_reqs += 1;
        self.state = State::Terminated;
        self.events.push_back(TargetEvent::Terminated {
            fes: Some(fes),
            by_peer: false,
        });
    }

    fn process(&mut self) {
        while self.state != State::Terminated {
            if let Some(d) = self.direct {
                // data received in place; its digest comes through the rx buffer
                if d.pos < d.end || self.rx.avail().len() < pdu::DIGEST_LEN {
                    return;
                }
                let a = self.rx.avail();
                let dg = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
                self.rx.start += pdu::DIGEST_LEN;
                self.finish_direct(Some(dg));
                continue;
            }
            if let Some(pf) = self.prefilled.take() {
                self.place_prefilled(pf);
                continue;
            }
            let avail = self.rx.avail();
            let Ok((ty, _fl, hlen, _pdo, plen)) = pdu::peek_common_header(avail) else {
                return;
            };
            let plen = plen as usize;
            if plen > self.max_pdu() || plen < pdu::CH_LEN || (hlen as usize) > plen {
                let h = avail[..pdu::CH_LEN].to_vec();
                let fei = if plen > self.max_pdu() || plen < pdu::CH_LEN {
                    4
                } else {
                    2
                };
                // plen beyond our limit: a data transfer limit we never advertised
                self.terminate(Fes::InvalidHeaderField, fei, &h);
                return;
            }
            if self.state == State::AwaitIc && ty != PduType::IcReq {
                let h = avail[..pdu::CH_LEN].to_vec();
                self.terminate(Fes::PduSequenceError, 0, &h);
                return;
            }
            if avail.len() < plen {
                if ty == PduType::H2cData {
                    self.try_direct();
                }
                return;
            }
            let start = self.rx.start;
            self.rx.start += plen;
            // take the PDU out of the rx buffer temporarily to satisfy the borrow checker
            let buf = std::mem::take(&mut self.rx.buf);
            self.handle_pdu(&buf[start..start + plen]);
            self.rx.buf = buf;
            self.stats.pdus_rx += 1;
        }
    }

    fn handle_pdu(&mut self, raw: &[u8]) {
        let p = match Pdu::new_checked(raw) {
            Ok(p) => p,
            Err(e) => {
                debug!(?e, "bad PDU lengths");
                let fei = if raw[2] as usize != PduType::from(raw[0]).hlen().unwrap_or(0) {
                    2
                } else {
                    3
                };
                self.terminate(Fes::InvalidHeaderField, fei, raw);
                return;
            }
        };
        let ty = p.pdu_type();
        if self.state == State::Ready {
            if let Some((fes, fei)) = header_digest_fault(&p, self.dg.header) {
                if fes == Fes::HeaderDigestError {
                    self.stats.hdgst_errors += 1;
                }
                self.terminate(fes, fei, raw);
                return;
            }
        }
        let repr = match PduRepr::parse(&p) {
            Ok(r) => r,
            Err(wire::Error::BadChecksum) => {
                self.stats.hdgst_errors += 1;
                self.terminate(Fes::HeaderDigestError, 0, raw);
                return;
            }
            Err(wire::Error::BadVersion) => {
                self.terminate(Fes::UnsupportedParameter, 8, raw);
                return;
            }
            Err(e) => {
                debug!(?e, ?ty, "bad PDU");
                let fei = if matches!(ty, PduType::Unknown(_)) {
                    0
                } else {
                    1
                };
                self.terminate(Fes::InvalidHeaderField, fei, raw);
                return;
            }
        };
        // data digest must be present when negotiated and data is carried
        let dd_ok = if self.dg.data && ty.may_have_ddgst() && p.data_len() > 0 {
            if p.ddgst().is_none() {
                self.terminate(Fes::InvalidHeaderField, 1, raw);
                return;
            }
            p.verify_ddgst().is_ok()
        } else {
            p.ddgst().is_none() || p.verify_ddgst().is_ok()
        };
        if !dd_ok {
            self.stats.ddgst_errors += 1;
        }
        match repr {
            PduRepr::IcReq {
                hpda, hdgst, ddgst, ..
            } => {
                if self.state != State::AwaitIc {
                    self.terminate(Fes::PduSequenceError, 0, raw);
                    return;
                }
                self.hpda = hpda;
                let resp = PduRepr::IcResp {
                    pfv: pdu::PFV_1_0,
                    cpda: self.params.cpda,
                    hdgst: hdgst && self.params.hdgst,
                    ddgst: ddgst && self.params.ddgst,
                    maxh2cdata: self.params.maxh2cdata,
                };
                self.send(&resp, &[], 0);
                self.dg = Digests {
                    header: hdgst && self.params.hdgst,
                    data: ddgst && self.params.ddgst,
                };
                self.state = State::Ready;
                self.events.push_back(TargetEvent::Established);
            }
            PduRepr::CapsuleCmd { sqe } => self.on_capsule(sqe, p.data(), dd_ok),
            PduRepr::H2cData {
                cccid,
                ttag,
                datao,
                datal,
                last,
            } => self.on_h2c_data(raw, cccid, ttag, datao, datal, last, p.data(), dd_ok),
            PduRepr::H2cTermReq { fes, fei } => {
                warn!(?fes, fei, "nvme/tcp: host sent H2CTermReq");
                self.state = State::Terminated;
                self.events.push_back(TargetEvent::Terminated {
                    fes: Some(fes),
                    by_peer: true,
                });
            }
            // PDUs only a controller sends
            _ => self.terminate(Fes::InvalidHeaderField, 0, raw),
        }
    }

    /// Checks the H2CData header at the front of the rx buffer the way
    /// `handle_pdu` would (with the whole PDU there); returns (header bytes incl.
    /// digest and padding, ttag, datao, datal, data digest follows, last), or None
    /// for anything unusual, which then takes the ordinary path (and its errors).
    fn check_h2c_header(&self) -> Option<(usize, u16, usize, usize, bool, bool)> {
        let a = self.rx.avail();
        let (ty, f, hlen, pdo, plen) = pdu::peek_common_header(a).ok()?;
        let (hlen, plen) = (hlen as usize, plen as usize);
        let hd = if f & pdu::flags::HDGSTF != 0 {
            pdu::DIGEST_LEN
        } else {
            0
        };
        let dd = if f & pdu::flags::DDGSTF != 0 {
            pdu::DIGEST_LEN
        } else {
            0
        };
        let start = if pdo == 0 { hlen + hd } else { pdo as usize };
        let allowed = pdu::flags::HDGSTF | pdu::flags::DDGSTF | pdu::flags::LAST_PDU;
        if ty != PduType::H2cData
            || self.state != State::Ready
            || hlen != pdu::DATA_HLEN
            || f & !allowed != 0
            || (hd != 0) != self.dg.header
            || (dd != 0) != self.dg.data
            || start < hlen + hd
            || a.len() < start
            || plen < start + dd + 1
            || plen > self.max_pdu()
        {
            return None;
        }
        let h = &a[..hlen];
        if hd != 0
            && pdu::crc32c(h)
                != u32::from_le_bytes([a[hlen], a[hlen + 1], a[hlen + 2], a[hlen + 3]])
        {
            return None;
        }
        let le16 = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as usize;
        let (cccid, ttag, datao, datal) = (le16(8), le16(10), le32(12), le32(16));
        let last = f & pdu::flags::LAST_PDU != 0;
        if datal != plen - start - dd || datal > self.params.maxh2cdata as usize {
            return None;
        }
        let pend = self.h2c.get(ttag as usize)?.as_ref()?;
        let end = datao + datal;
        if sqe_cid(&pend.sqe) != cccid
            || datao != pend.received
            || end > pend.buf.len()
            || last != (end == pend.buf.len())
        {
            return None;
        }
        Some((start, ttag, datao, datal, dd != 0, last))
    }

    /// An H2CData PDU whose header is in the rx buffer but whose data is not all
    /// there yet: when the header is one `handle_pdu` would accept, the data
    /// received so far is moved to the command's buffer and the rest is read in
    /// place ([`TargetConn::recv_iovecs`]).
    fn try_direct(&mut self) {
        let Some((hdr, ttag, datao, datal, ddgst, last)) = self.check_h2c_header() else {
            return;
        };
        let a = self.rx.avail();
        let got = (a.len() - hdr).min(datal);
        let Some(Some(pend)) = self.h2c.get_mut(ttag as usize) else {
            return;
        };
        // the data that came with the header: copied; the rest: read in place
        pend.buf[datao..datao + got].copy_from_slice(&a[hdr..hdr + got]);
        self.rx.start += hdr + got;
        self.stats.h2c_copied += got as u64;
        self.direct = Some(DirectRx {
            ttag,
            start: datao,
            pos: datao + got,
            end: datao + datal,
            ddgst,
            last,
        });
        if got == datal && !ddgst {
            self.finish_direct(None);
        }
    }

    /// A read put data in place ahead of its header (see [`TargetConn::recv_iovecs`]):
    /// if the header that came is the one expected, the data stays; otherwise it
    /// goes back into the rx buffer where it was in the stream.
    fn place_prefilled(&mut self, pf: Prefill) {
        if let Some((hdr, ttag, datao, datal, ddgst, last)) = self.check_h2c_header() {
            if ttag == pf.ttag
                && datao == pf.start
                && pf.got <= datal
                && self.rx.start + hdr == pf.at
            {
                self.rx.start += hdr;
                self.stats.h2c_in_place += pf.got as u64;
                self.direct = Some(DirectRx {
                    ttag,
                    start: datao,
                    pos: datao + pf.got,
                    end: datao + datal,
                    ddgst,
                    last,
                });
                if pf.got == datal && !ddgst {
                    self.finish_direct(None);
                }
                return;
            }
        }
        let TargetConn { rx, h2c, .. } = self;
        if let Some(Some(p)) = h2c.get(pf.ttag as usize) {
            if (rx.start..=rx.end).contains(&pf.at) {
                // open a gap at `at` (the buffer grows only if it must) and fill it
                let (at, got, end) = (pf.at, pf.got, rx.end);
                if rx.buf.len() < end + got {
                    rx.buf.resize(end + got, 0);
                }
                rx.buf.copy_within(at..end, at + got);
                rx.buf[at..at + got].copy_from_slice(&p.buf[pf.start..pf.start + got]);
                rx.end += got;
                self.stats.h2c_copied += got as u64;
            }
        }
    }

    /// The in-place H2CData PDU is complete (with its data digest, if any).
    fn finish_direct(&mut self, ddgst: Option<u32>) {
        let Some(d) = self.direct.take() else {
            return;
        };
        self.stats.pdus_rx += 1;
        let Some(Some(pend)) = self.h2c.get_mut(d.ttag as usize) else {
            return;
        };
        let dd_ok = ddgst.is_none_or(|g| g == pdu::crc32c(&pend.buf[d.start..d.end]));
        if !dd_ok {
            self.stats.ddgst_errors += 1;
        }
        pend.received = d.end;
        pend.ddgst_bad |= !dd_ok;
        if d.last {
            self.h2c_done(d.ttag);
        }
    }

    /// All of a write's data is in: the command goes to the caller.
    fn h2c_done(&mut self, ttag: u16) {
        let Some(p) = self.h2c.get_mut(ttag as usize).and_then(Option::take) else {
            return;
        };
        self.free_ttags.push(ttag);
        if let Some(i) = self.r2t_order.iter().position(|&t| t == ttag) {
            self.r2t_order.remove(i);
        }
        self.events.push_back(TargetEvent::Command(Request {
            sqe: p.sqe,
            data: p.buf,
            c2h_len: 0,
            error: p.ddgst_bad.then_some(DataError::DataDigest),
        }));
    }

    fn on_capsule(&mut self, sqe: [u8; 64], icd: &[u8], dd_ok: bool) {
        let dir = XferDir::of(&sqe);
        let sgl_ty = sqe[39];
        let len = sgl_len(&sqe);
        let mut req = Request {
            sqe,
            data: Vec::new(),
            c2h_len: 0,
            error: None,
        };
        let psdt_sgl = sqe[1] & 0xc0 == 0x40;
        match dir {
            _ if !icd.is_empty() && !dd_ok => req.error = Some(DataError::DataDigest),
            XferDir::None => {}
            _ if len == 0 => {}
            _ if !psdt_sgl => req.error = Some(DataError::SglTypeInvalid),
            XferDir::HostToCtrl => match sgl_ty {
                SGL_IN_CAPSULE => {
                    let off = sgl_addr(&sqe);
                    if off != 0 {
                        req.error = Some(DataError::SglOffsetInvalid);
                    } else if len as usize != icd.len() || len > self.params.in_capsule {
                        req.error = Some(DataError::SglLengthInvalid);
                    } else {
                        let mut b = self.alloc_buf(0);
                        b.extend_from_slice(icd);
                        req.data = b;
                    }
                }
                SGL_TRANSPORT => {
                    if len > self.params.max_xfer || !icd.is_empty() {
                        req.error = Some(DataError::SglLengthInvalid);
                    } else {
                        // ask for all of it with one R2T (the host splits by MAXH2CDATA)
                        let buf = self.alloc_buf(len as usize);
                        let ttag = match self.free_ttags.pop() {
                            Some(t) => t,
                            None => {
                                self.h2c.push(None);
                                (self.h2c.len() - 1) as u16
                            }
                        };
                        self.h2c[ttag as usize] = Some(H2cPending {
                            sqe,
                            buf,
                            received: 0,
                            ddgst_bad: false,
                        });
                        let r2t = PduRepr::R2t {
                            cccid: sqe_cid(&sqe),
                            ttag,
                            r2to: 0,
                            r2tl: len,
                        };
                        self.send(&r2t, &[], 0);
                        self.stats.r2t += 1;
                        self.r2t_order.push_back(ttag);
                        return;
                    }
                }
                _ => req.error = Some(DataError::SglTypeInvalid),
            },
            XferDir::CtrlToHost => {
                if sgl_ty != SGL_TRANSPORT {
                    req.error = Some(DataError::SglTypeInvalid);
                } else if len > self.params.max_xfer {
                    req.error = Some(DataError::SglLengthInvalid);
                } else {
                    req.c2h_len = len;
                }
            }
            XferDir::Bidirectional => req.error = Some(DataError::SglTypeInvalid),
        }
        if dir != XferDir::HostToCtrl && !icd.is_empty() && req.error.is_none() {
            req.error = Some(DataError::SglLengthInvalid);
        }
        self.events.push_back(TargetEvent::Command(req));
    }

    #[allow(clippy::too_many_arguments)]
    fn on_h2c_data(
        &mut self,
        raw: &[u8],
        cccid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        last: bool,
        data: &[u8],
        dd_ok: bool,
    ) {
        if datal > self.params.maxh2cdata {
            self.terminate(Fes::R2tLimitExceeded, 0, raw);
            return;
        }
        let Some(Some(pend)) = self.h2c.get_mut(ttag as usize) else {
            self.terminate(Fes::InvalidHeaderField, 10, raw);
            return;
        };
        if sqe_cid(&pend.sqe) != cccid {
            self.terminate(Fes::InvalidHeaderField, 8, raw);
            return;
        }
        if datao as usize != pend.received {
            self.terminate(Fes::DataTransferOutOfRange, 12, raw);
            return;
        }
        let end = pend.received + data.len();
        if end > pend.buf.len() {
            self.terminate(Fes::DataTransferOutOfRange, 16, raw);
            return;
        }
        if last != (end == pend.buf.len()) {
            // LAST_PDU must mark the end of the R2T's range
            self.terminate(Fes::InvalidHeaderField, 1, raw);
            return;
        }
        pend.buf[pend.received..end].copy_from_slice(data);
        self.stats.h2c_copied += data.len() as u64;
        pend.received = end;
        pend.ddgst_bad |= !dd_ok;
        if last {
            self.h2c_done(ttag);
        }
    }

    /// Completes a command: sends `data` (controller-to-host) as C2HData PDUs and
    /// the CQE as a CapsuleResp, or folds the CQE into the last C2HData with the
    /// SUCCESS flag when allowed and the status is success. The data buffer is
    /// sent in place (no copy) and returns to the pool once on the wire.
    pub fn complete(&mut self, cqe: &[u8; 16], data: Vec<u8>) {
        if self.state != State::Ready {
            self.recycle(data);
            return;
        }
        let cid = u16::from_le_bytes([cqe[12], cqe[13]]);
        let status = u16::from_le_bytes([cqe[14], cqe[15]]) >> 1;
        // SUCCESS also requires DW0/DW1 to be zero: the host synthesises a zero CQE
        let fold = self.c2h_success && status == 0 && cqe[..8].iter().all(|&b| b == 0);
        let chunk = self.params.c2h_chunk.max(4096) as usize;
        let len = data.len();
        let dg = self.dg;
        let hpda = self.hpda;
        let slot = (len > 0).then(|| self.tx.add_data(data));
        let mut off = 0usize;
        while let Some(slot) = slot {
            if off >= len {
                break;
            }
            let n = (len - off).min(chunk);
            let last = off + n == len;
            let r = PduRepr::C2hData {
                cccid: cid,
                datao: off as u32,
                datal: n as u32,
                last,
                success: last && fold,
            };
            let e = r.effective_digests(dg, n);
            let doff = r.data_offset(dg, n, hpda);
            self.tx.push_hdr(|v| {
                let at = v.len();
                v.resize(at + doff, 0);
                r.emit_header(&mut v[at..], dg, n, hpda);
            });
            self.tx.push_data(slot, off, off + n);
            if e.data {
                let crc = match self.tx.datas.get(slot) {
                    Some(Some((v, _))) => pdu::crc32c(&v[off..off + n]),
                    _ => 0,
                };
                self.tx
                    .push_hdr(|v| v.extend_from_slice(&crc.to_le_bytes()));
            }
            self.stats.pdus_tx += 1;
            off += n;
        }
        if let Some(slot) = slot {
            // no segment refers to an empty buffer: give it back at once
            if let Some(Some((_, 0))) = self.tx.datas.get(slot) {
                if let Some((v, _)) = self.tx.datas[slot].take() {
                    self.recycle(v);
                }
                self.tx.free_datas.push(slot);
            }
        }
        if fold && len > 0 {
            self.stats.c2h_success += 1;
            return;
        }
        self.send(&PduRepr::CapsuleResp { cqe: *cqe }, &[], 0);
    }
}

// ---------------------------------------------------------------------------
// host side

/// Host-side transport parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostParams {
    pub hdgst: bool,
    pub ddgst: bool,
    /// Our PDU data alignment for C2H data.
    pub hpda: u8,
    /// Max outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

/// What the host connection reports.
#[derive(Debug)]
pub enum HostEvent {
    /// ICResp received; commands may be submitted.
    Established,
    /// A command completed. `data` holds the controller-to-host data (read length).
    Completion {
        cqe: [u8; 16],
        data: Vec<u8>,
        /// Data arrived with a bad data digest (the CQE status was replaced by
        /// Data Transfer Error).
        ddgst_error: bool,
    },
    /// The connection is over.
    Terminated { fes: Option<Fes>, by_peer: bool },
}

#[derive(Debug)]
struct HostCmd {
    write: Vec<u8>,
    read: Vec<u8>,
    received: usize,
    ddgst_bad: bool,
}

/// Why a submission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("connection not established")]
    NotReady,
    #[error("command id {0} already in flight")]
    CidBusy(u16),
}

/// The host side of one NVMe/TCP connection.
#[derive(Debug)]
pub struct HostConn {
    params: HostParams,
    state: State,
    dg: Digests,
    cpda: u8,
    maxh2cdata: u32,
    rx: RxBuf,
    tx: TxBuf,
    events: VecDeque<HostEvent>,
    cmds: Vec<Option<HostCmd>>,
    pool: Vec<Vec<u8>>,
    stats: ConnStats,
}

impl HostConn {
    /// A new connection; the ICReq is queued for transmission at once.
    pub fn new(params: HostParams) -> Self {
        let mut h = HostConn {
            params,
            state: State::AwaitIc,
            dg: Digests::default(),
            cpda: 0,
            maxh2cdata: 4096,
            rx: RxBuf::default(),
            tx: TxBuf::default(),
            events: VecDeque::new(),
            cmds: Vec::new(),
            pool: Vec::new(),
            stats: ConnStats::default(),
        };
        let ic = PduRepr::IcReq {
            pfv: pdu::PFV_1_0,
            hpda: params.hpda,
            hdgst: params.hdgst,
            ddgst: params.ddgst,
            maxr2t: params.maxr2t,
        };
        ic.emit_to_vec(&mut h.tx.buf, &[], Digests::default(), 0);
        h
    }

    pub fn is_established(&self) -> bool {
        self.state == State::Ready
    }
    pub fn is_terminated(&self) -> bool {
        self.state == State::Terminated
    }
    pub fn digests(&self) -> Digests {
        self.dg
    }
    pub fn maxh2cdata(&self) -> u32 {
        self.maxh2cdata
    }
    pub fn stats(&self) -> ConnStats {
        self.stats
    }
    /// Commands in flight.
    pub fn in_flight(&self) -> usize {
        self.cmds.iter().filter(|c| c.is_some()).count()
    }

    pub fn recv_buf(&mut self) -> &mut [u8] {
        self.rx.spare(64 * 1024)
    }
    pub fn handle_received(&mut self, n: usize) {
        self.rx.commit(n);
        self.stats.bytes_rx += n as u64;
        self.process();
    }
    pub fn handle_bytes(&mut self, data: &[u8]) {
        self.rx.push(data);
        self.stats.bytes_rx += data.len() as u64;
        self.process();
    }
    #[must_use]
    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }
    #[must_use]
    pub fn poll_transmit(&self) -> &[u8] {
        self.tx.pending()
    }
    pub fn advance_tx(&mut self, n: usize) {
        self.stats.bytes_tx += n as u64;
        self.tx.advance(n);
    }
    pub fn tx_backlog(&self) -> usize {
        self.tx.pending().len()
    }
    /// Returns a completion's data buffer for reuse.
    pub fn recycle(&mut self, mut v: Vec<u8>) {
        if self.pool.len() < 256 && v.capacity() > 0 {
            v.clear();
            self.pool.push(v);
        }
    }
    fn alloc_buf(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Submits a command. `write` is host-to-controller data: carried in the
    /// capsule when it is at most `in_capsule` bytes, else sent on the target's
    /// R2T. `read_len` bytes of controller-to-host data are expected. SGL1 of
    /// `sqe` is filled in here.
    pub fn submit(
        &mut self,
        mut sqe: [u8; 64],
        write: &[u8],
        read_len: u32,
        in_capsule: u32,
    ) -> Result<(), SubmitError> {
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        let cid = sqe_cid(&sqe) as usize;
        if self.cmds.len() <= cid {
            self.cmds.resize_with(cid + 1, || None);
        }
        if self.cmds[cid].is_some() {
            return Err(SubmitError::CidBusy(cid as u16));
        }
        let mut cmd = HostCmd {
            write: Vec::new(),
            read: self.alloc_buf(read_len as usize),
            received: 0,
            ddgst_bad: false,
        };
        let icd: &[u8] = if !write.is_empty() && write.len() as u32 <= in_capsule {
            set_sgl(&mut sqe, SGL_IN_CAPSULE, 0, write.len() as u32);
            write
        } else if !write.is_empty() {
            set_sgl(&mut sqe, SGL_TRANSPORT, 0, write.len() as u32);
            let mut w = self.alloc_buf(0);
            w.extend_from_slice(write);
            cmd.write = w;
            &[]
        } else {
            set_sgl(&mut sqe, SGL_TRANSPORT, 0, read_len);
            &[]
        };
        PduRepr::CapsuleCmd { sqe }.emit_to_vec(&mut self.tx.buf, icd, self.dg, self.cpda);
        self.stats.pdus_tx += 1;
        self.cmds[cid] = Some(cmd);
        Ok(())
    }

    fn terminate(&mut self, fes: Fes, fei: u32, offending: &[u8]) {
        if self.state == State::Terminated {
            return;
        }
        warn!(
            ?fes,
            fei, "nvme/tcp host: protocol error, sending H2CTermReq"
        );
        let d = term_data(offending).to_vec();
        PduRepr::H2cTermReq { fes, fei }.emit_to_vec(&mut self.tx.buf, &d, self.dg, 0);
        self.stats.term_reqs += 1;
        self.state = State::Terminated;
        self.events.push_back(HostEvent::Terminated {
            fes: Some(fes),
            by_peer: false,
        });
    }

    fn process(&mut self) {
        while self.state != State::Terminated {
            let avail = self.rx.avail();
            let Ok((ty, _, _, _, plen)) = pdu::peek_common_header(avail) else {
                return;
            };
            let plen = plen as usize;
            let max = 16 * 1024 * 1024;
            if !(pdu::CH_LEN..=max).contains(&plen) {
                let h = avail[..pdu::CH_LEN].to_vec();
                self.terminate(Fes::InvalidHeaderField, 4, &h);
                return;
            }
            if self.state == State::AwaitIc && ty != PduType::IcResp && ty != PduType::C2hTermReq {
                let h = avail[..pdu::CH_LEN].to_vec();
                self.terminate(Fes::PduSequenceError, 0, &h);
                return;
            }
            if avail.len() < plen {
                return;
            }
            let start = self.rx.start;
            self.rx.start += plen;
            let buf = std::mem::take(&mut self.rx.buf);
            self.handle_pdu(&buf[start..start + plen]);
            self.rx.buf = buf;
            self.stats.pdus_rx += 1;
        }
    }

    fn handle_pdu(&mut self, raw: &[u8]) {
        let p = match Pdu::new_checked(raw) {
            Ok(p) => p,
            Err(_) => {
                self.terminate(Fes::InvalidHeaderField, 2, raw);
                return;
            }
        };
        let ty = p.pdu_type();
        if self.state == State::Ready {
            if let Some((fes, fei)) = header_digest_fault(&p, self.dg.header) {
                if fes == Fes::HeaderDigestError {
                    self.stats.hdgst_errors += 1;
                }
                self.terminate(fes, fei, raw);
                return;
            }
        }
        let repr = match PduRepr::parse(&p) {
            Ok(r) => r,
            Err(wire::Error::BadChecksum) => {
                self.terminate(Fes::HeaderDigestError, 0, raw);
                return;
            }
            Err(_) => {
                self.terminate(Fes::InvalidHeaderField, 0, raw);
                return;
            }
        };
        let dd_ok = p.ddgst().is_none() || p.verify_ddgst().is_ok();
        if self.dg.data && ty.may_have_ddgst() && p.data_len() > 0 && p.ddgst().is_none() {
            self.terminate(Fes::InvalidHeaderField, 1, raw);
            return;
        }
        if !dd_ok {
            self.stats.ddgst_errors += 1;
        }
        match repr {
            PduRepr::IcResp {
                cpda,
                hdgst,
                ddgst,
                maxh2cdata,
                ..
            } => {
                if self.state != State::AwaitIc
                    || (hdgst && !self.params.hdgst)
                    || (ddgst && !self.params.ddgst)
                {
                    self.terminate(Fes::InvalidHeaderField, 11, raw);
                    return;
                }
                self.cpda = cpda;
                self.maxh2cdata = maxh2cdata;
                self.dg = Digests {
                    header: hdgst,
                    data: ddgst,
                };
                self.state = State::Ready;
                self.events.push_back(HostEvent::Established);
            }
            PduRepr::C2hTermReq { fes, fei } => {
                warn!(?fes, fei, "nvme/tcp host: controller sent C2HTermReq");
                self.state = State::Terminated;
                self.events.push_back(HostEvent::Terminated {
                    fes: Some(fes),
                    by_peer: true,
                });
            }
            PduRepr::CapsuleResp { cqe } => {
                let cid = u16::from_le_bytes([cqe[12], cqe[13]]) as usize;
                let Some(cmd) = self.cmds.get_mut(cid).and_then(Option::take) else {
                    self.terminate(Fes::InvalidHeaderField, 20, raw);
                    return;
                };
                self.finish(cqe, cmd);
            }
            PduRepr::C2hData {
                cccid,
                datao,
                last,
                success,
                ..
            } => {
                let data = p.data();
                let Some(Some(cmd)) = self.cmds.get_mut(cccid as usize) else {
                    self.terminate(Fes::InvalidHeaderField, 8, raw);
                    return;
                };
                let end = datao as usize + data.len();
                if datao as usize != cmd.received || end > cmd.read.len() {
                    self.terminate(Fes::DataTransferOutOfRange, 12, raw);
                    return;
                }
                cmd.read[datao as usize..end].copy_from_slice(data);
                cmd.received = end;
                cmd.ddgst_bad |= !dd_ok;
                if success {
                    if !last || end != cmd.read.len() {
                        self.terminate(Fes::InvalidHeaderField, 1, raw);
                        return;
                    }
                    let Some(cmd) = self.cmds.get_mut(cccid as usize).and_then(Option::take) else {
                        return;
                    };
                    let mut cqe = [0u8; 16];
                    cqe[12..14].copy_from_slice(&cccid.to_le_bytes());
                    self.finish(cqe, cmd);
                }
            }
            PduRepr::R2t {
                cccid,
                ttag,
                r2to,
                r2tl,
            } => {
                let Some(Some(cmd)) = self.cmds.get_mut(cccid as usize) else {
                    self.terminate(Fes::InvalidHeaderField, 8, raw);
                    return;
                };
                let end = r2to as u64 + r2tl as u64;
                if r2tl == 0 || end > cmd.write.len() as u64 {
                    self.terminate(Fes::DataTransferOutOfRange, 12, raw);
                    return;
                }
                let write = std::mem::take(&mut cmd.write);
                let chunk = self.maxh2cdata.max(4096) as usize;
                let mut off = r2to as usize;
                let end = end as usize;
                while off < end {
                    let n = (end - off).min(chunk);
                    let r = PduRepr::H2cData {
                        cccid,
                        ttag,
                        datao: off as u32,
                        datal: n as u32,
                        last: off + n == end,
                    };
                    r.emit_to_vec(&mut self.tx.buf, &write[off..off + n], self.dg, self.cpda);
                    self.stats.pdus_tx += 1;
                    off += n;
                }
                if let Some(Some(cmd)) = self.cmds.get_mut(cccid as usize) {
                    cmd.write = write;
                }
                self.stats.r2t += 1;
            }
            _ => self.terminate(Fes::InvalidHeaderField, 0, raw),
        }
    }

    fn finish(&mut self, mut cqe: [u8; 16], cmd: HostCmd) {
        if !cmd.write.is_empty() {
            self.recycle(cmd.write);
        }
        if cmd.ddgst_bad {
            // Data Transfer Error, as Linux's host reports a data digest mismatch
            let st: u16 = 0x04 << 1;
            cqe[14..16].copy_from_slice(&st.to_le_bytes());
        }
        self.events.push_back(HostEvent::Completion {
            cqe,
            data: cmd.read,
            ddgst_error: cmd.ddgst_bad,
        });
    }
}

/// The header-digest checks both ends make on a PDU once the connection is up:
/// a type that carries HDGST must have it when it was negotiated (else an
/// invalid header field at byte 1, the flags), and it must match. Returns the
/// fatal error status and field index for the C2HTermReq / H2CTermReq.
fn header_digest_fault(p: &Pdu<&[u8]>, negotiated: bool) -> Option<(Fes, u32)> {
    if !negotiated || !p.pdu_type().may_have_hdgst() {
        return None;
    }
    if p.hdgst().is_none() {
        return Some((Fes::InvalidHeaderField, 1));
    }
    if p.verify_hdgst().is_err() {
        return Some((Fes::HeaderDigestError, 0));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pump(h: &mut HostConn, t: &mut TargetConn) {
        for _ in 0..8 {
            let b = h.poll_transmit().to_vec();
            h.advance_tx(b.len());
            t.handle_bytes(&b);
            let b = t.drain_tx();
            h.handle_bytes(&b);
        }
    }

    fn pair(hp: HostParams, tp: TargetParams) -> (HostConn, TargetConn) {
        let mut h = HostConn::new(hp);
        let mut t = TargetConn::new(tp);
        pump(&mut h, &mut t);
        assert!(matches!(t.poll_event(), Some(TargetEvent::Established)));
        assert!(matches!(h.poll_event(), Some(HostEvent::Established)));
        (h, t)
    }

    fn sqe(opc: u8, cid: u16) -> [u8; 64] {
        let mut s = [0u8; 64];
        s[0] = opc;
        s[2..4].copy_from_slice(&cid.to_le_bytes());
        s
    }

    fn cqe(cid: u16, status: u16) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[12..14].copy_from_slice(&cid.to_le_bytes());
        c[14..16].copy_from_slice(&(status << 1).to_le_bytes());
        c
    }

    #[test]
    fn write_in_capsule_and_r2t_read_c2h_with_digests() {
        for dig in [false, true] {
            let hp = HostParams {
                hdgst: dig,
                ddgst: dig,
                ..Default::default()
            };
            let (mut h, mut t) = pair(hp, TargetParams::default());
            assert_eq!(h.digests().header, dig);
            for (cid, len) in [(1u16, 512usize), (2, 300_000)] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + cid as usize) as u8).collect();
                h.submit(sqe(0x01, cid), &data, 0, 8192).unwrap();
                pump(&mut h, &mut t);
                let Some(TargetEvent::Command(req)) = t.poll_event() else {
                    panic!()
                };
                assert_eq!(req.cid(), cid);
                assert_eq!(req.error, None);
                assert_eq!(req.data, data);
                t.complete(&cqe(cid, 0), Vec::new());
                pump(&mut h, &mut t);
                let Some(HostEvent::Completion { cqe, .. }) = h.poll_event() else {
                    panic!()
                };
                assert_eq!(u16::from_le_bytes([cqe[12], cqe[13]]), cid);
            }
            assert_eq!(t.stats().r2t, 1);
            // read 200 KiB: C2HData in two chunks, then CapsuleResp / SUCCESS
            for success in [false, true] {
                t.set_c2h_success(success);
                let data: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
                h.submit(sqe(0x02, 9), &[], data.len() as u32, 8192)
                    .unwrap();
                pump(&mut h, &mut t);
                let Some(TargetEvent::Command(req)) = t.poll_event() else {
                    panic!()
                };
                assert_eq!(req.c2h_len, 200_000);
                t.complete(&cqe(9, 0), data.clone());
                pump(&mut h, &mut t);
                let Some(HostEvent::Completion { data: got, cqe, .. }) = h.poll_event() else {
                    panic!()
                };
                assert_eq!(got, data);
                assert_eq!(cqe[14..16], [0, 0]);
            }
            assert_eq!(t.stats().c2h_success, 1);
        }
    }

    #[test]
    fn zero_copy_tx_partial_writes_and_pool_return() {
        let hp = HostParams {
            hdgst: true,
            ddgst: true,
            hpda: 3,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
        for cid in [1u16, 2] {
            h.submit(sqe(0x02, cid), &[], data.len() as u32, 8192)
                .unwrap();
        }
        pump(&mut h, &mut t);
        for cid in [1u16, 2] {
            let Some(TargetEvent::Command(_)) = t.poll_event() else {
                panic!()
            };
            t.complete(&cqe(cid, 0), data.clone());
        }
        // drain with vectored "writes" of odd sizes, across segment boundaries
        let mut wire = Vec::new();
        let mut step = 1usize;
        while t.tx_backlog() > 0 {
            let mut iov = [std::io::IoSlice::new(&[]); 5];
            let n = t.poll_transmit_vectored(&mut iov);
            let mut take = step.min(t.tx_backlog());
            let mut sent = 0;
            for s in &iov[..n] {
                let k = s.len().min(take);
                wire.extend_from_slice(&s[..k]);
                take -= k;
                sent += k;
                if take == 0 {
                    break;
                }
            }
            t.advance_tx(sent);
            step = step * 7 % 70_001 + 13;
        }
        assert_eq!(t.pool.len(), 2, "both data buffers back in the pool");
        h.handle_bytes(&wire);
        for cid in [1u16, 2] {
            let Some(HostEvent::Completion {
                cqe,
                data: got,
                ddgst_error,
            }) = h.poll_event()
            else {
                panic!()
            };
            assert_eq!(u16::from_le_bytes([cqe[12], cqe[13]]), cid);
            assert!(!ddgst_error);
            assert_eq!(got, data);
        }
    }

    #[test]
    fn header_digest_error_terminates() {
        let hp = HostParams {
            hdgst: true,
            ddgst: true,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        h.submit(sqe(0x00, 3), &[], 0, 8192).unwrap();
        let mut b = h.poll_transmit().to_vec();
        b[20] ^= 0xff;
        t.handle_bytes(&b);
        assert!(matches!(
            t.poll_event(),
            Some(TargetEvent::Terminated {
                fes: Some(Fes::HeaderDigestError),
                by_peer: false
            })
        ));
        let out = t.drain_tx();
        assert_eq!(out[0], 0x03); // C2HTermReq
        h.handle_bytes(&out);
        assert!(matches!(
            h.poll_event(),
            Some(HostEvent::Terminated { by_peer: true, .. })
        ));
    }

    #[test]
    fn header_digest_error_on_c2h_terminates_the_host() {
        let hp = HostParams {
            hdgst: true,
            ddgst: true,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        h.submit(sqe(0x02, 5), &[], 512, 8192).unwrap();
        pump(&mut h, &mut t);
        let Some(TargetEvent::Command(_)) = t.poll_event() else {
            panic!()
        };
        t.complete(&cqe(5, 0), vec![0x5a; 512]);
        let mut b = t.drain_tx();
        assert_eq!(b[0], 0x07, "C2HData first");
        b[10] ^= 0xff; // a reserved byte of the header: only the HDGST notices
        h.handle_bytes(&b);
        assert!(matches!(
            h.poll_event(),
            Some(HostEvent::Terminated {
                fes: Some(Fes::HeaderDigestError),
                by_peer: false
            })
        ));
        assert_eq!(h.stats.hdgst_errors, 1);
        let out = h.poll_transmit().to_vec();
        assert_eq!(out[0], 0x02, "H2CTermReq");
    }

    #[test]
    fn data_digest_error_fails_the_command_only() {
        let hp = HostParams {
            hdgst: false,
            ddgst: true,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        h.submit(sqe(0x01, 4), &[5u8; 1000], 0, 8192).unwrap();
        let mut b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        b[100] ^= 1;
        t.handle_bytes(&b);
        let Some(TargetEvent::Command(req)) = t.poll_event() else {
            panic!()
        };
        assert_eq!(req.error, Some(DataError::DataDigest));
        assert!(!t.is_terminated());
    }

    /// Sends the host's capsule to the target and the target's R2T back; returns
    /// the host's H2CData stream (not delivered).
    fn r2t_then_h2c(h: &mut HostConn, t: &mut TargetConn) -> Vec<u8> {
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        t.handle_bytes(&b);
        let b = t.drain_tx();
        h.handle_bytes(&b);
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        b
    }

    fn iov_lens(t: &mut TargetConn) -> Vec<usize> {
        let mut iov = [(); 3].map(|_| std::io::IoSliceMut::new(&mut []));
        let k = t.recv_iovecs(&mut iov);
        iov[..k].iter().map(|v| v.len()).collect()
    }

    /// H2C data goes from the "socket" (`recv_iovecs`) straight into the command's
    /// buffer: after an R2T only a header is asked for, then exactly the data;
    /// digests are checked over the data in place; data that arrives with its
    /// header in one read is copied, and the rest still lands in place.
    #[test]
    fn h2c_data_received_in_place() {
        for dig in [false, true] {
            let hp = HostParams {
                hdgst: dig,
                ddgst: dig,
                ..Default::default()
            };
            let (mut h, mut t) = pair(hp, TargetParams::default());
            let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 253) as u8).collect();
            h.submit(sqe(0x01, 3), &data, 0, 8192).unwrap();
            pump(&mut h, &mut t);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!((req.error, req.data == data), (None, true));
            let st = t.stats();
            assert_eq!(
                (st.h2c_in_place, st.h2c_copied),
                (300_000, 0),
                "digests {dig}"
            );
            t.complete(&cqe(3, 0), Vec::new());
            t.recycle(req.data);
            pump(&mut h, &mut t);
            assert!(matches!(h.poll_event(), Some(HostEvent::Completion { .. })));

            // by hand: the read sizes the target asks for
            h.submit(sqe(0x01, 4), &data[..20_000], 0, 8192).unwrap();
            let stream = r2t_then_h2c(&mut h, &mut t);
            let hdr = pdu::data_offset(pdu::DATA_HLEN, dig, 0);
            assert_eq!(stream.len(), hdr + 20_000 + if dig { 4 } else { 0 });
            assert_eq!(iov_lens(&mut t), vec![hdr, 20_000, 64 * 1024]);
            t.handle_bytes(&stream[..hdr]);
            assert_eq!(iov_lens(&mut t), vec![20_000]);
            let mut bad = stream[hdr..].to_vec();
            bad[777] ^= 0x40; // caught by the data digest (when on)
            t.handle_bytes(&bad);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!(req.data.len(), 20_000);
            if dig {
                assert_eq!(req.error, Some(DataError::DataDigest));
                assert_eq!(t.stats().ddgst_errors, 1);
            } else {
                assert_eq!(req.error, None);
                assert_eq!(req.data[777], data[777] ^ 0x40);
            }
            assert!(!t.is_terminated());
            t.complete(&cqe(4, 0), Vec::new());
            pump(&mut h, &mut t);
            assert!(matches!(h.poll_event(), Some(HostEvent::Completion { .. })));

            // header and part of the data in one read: that part is copied
            let before = t.stats();
            h.submit(sqe(0x01, 5), &data[..20_000], 0, 8192).unwrap();
            let stream = r2t_then_h2c(&mut h, &mut t);
            t.rx.push(&stream[..hdr + 1000]);
            t.handle_received(0);
            assert_eq!(iov_lens(&mut t), vec![19_000]);
            t.handle_bytes(&stream[hdr + 1000..]);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!(
                (req.error, &req.data[..], t.is_terminated()),
                (None, &data[..20_000], false)
            );
            let st = t.stats();
            assert_eq!(st.h2c_copied - before.h2c_copied, 1000);
            assert_eq!(st.h2c_in_place - before.h2c_in_place, 19_000);
        }
    }

    /// Capsules arriving where H2C data was expected (the host has not seen our
    /// R2T yet): each read that put capsule bytes in the write's buffer is undone,
    /// commands come out intact, and the receive buffer does not grow.
    #[test]
    fn mispredicted_h2c_placement_is_undone() {
        for dig in [false, true] {
            let hp = HostParams {
                hdgst: dig,
                ddgst: dig,
                ..Default::default()
            };
            let (mut h, mut t) = pair(hp, TargetParams::default());
            let data: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
            h.submit(sqe(0x01, 1), &data, 0, 8192).unwrap();
            let b = h.poll_transmit().to_vec();
            h.advance_tx(b.len());
            t.handle_bytes(&b); // R2T queued, not delivered yet
            let r2t = t.drain_tx();
            let mut sizes = Vec::new();
            for cid in 2..200u16 {
                // in-capsule writes of varying size, delivered in one piece
                let icd: Vec<u8> = (0..(cid as usize * 37) % 8000 + 1)
                    .map(|i| (i + cid as usize) as u8)
                    .collect();
                h.submit(sqe(0x01, cid), &icd, 0, 8192).unwrap();
                let b = h.poll_transmit().to_vec();
                h.advance_tx(b.len());
                assert_eq!(iov_lens(&mut t).len(), 3, "a placement is predicted");
                t.handle_bytes(&b);
                let Some(TargetEvent::Command(req)) = t.poll_event() else {
                    panic!("cid {cid}")
                };
                assert_eq!((req.cid(), req.error, req.data == icd), (cid, None, true));
                sizes.push(t.rx.buf.len());
            }
            assert!(*sizes.iter().max().unwrap() <= 256 * 1024, "{sizes:?}");
            assert!(t.stats().h2c_copied > 0);
            // then the write's data, in place
            h.handle_bytes(&r2t);
            pump(&mut h, &mut t);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!((req.cid(), req.error, req.data == data), (1, None, true));
        }
    }

    #[test]
    fn first_pdu_must_be_icreq_and_garbage_terminates() {
        let mut t = TargetConn::new(TargetParams::default());
        let mut s = Vec::new();
        PduRepr::CapsuleCmd { sqe: [0; 64] }.emit_to_vec(&mut s, &[], Digests::default(), 0);
        t.handle_bytes(&s);
        assert!(matches!(
            t.poll_event(),
            Some(TargetEvent::Terminated {
                fes: Some(Fes::PduSequenceError),
                ..
            })
        ));
        let (_h, mut t) = pair(HostParams::default(), TargetParams::default());
        t.handle_bytes(&[0x04, 0, 72, 0, 0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(
            t.poll_event(),
            Some(TargetEvent::Terminated { .. })
        ));
        // a term request is at most 152 bytes
        assert!(t.tx_backlog() <= 152);
    }

    #[test]
    fn h2c_data_out_of_range_terminates() {
        let (mut h, mut t) = pair(HostParams::default(), TargetParams::default());
        h.submit(sqe(0x01, 1), &[1u8; 20000], 0, 0).unwrap();
        pump(&mut h, &mut t);
        // the host answered the R2T already; forge another H2CData beyond the range
        let mut b = Vec::new();
        PduRepr::H2cData {
            cccid: 1,
            ttag: 0,
            datao: 20000,
            datal: 4,
            last: true,
        }
        .emit_to_vec(&mut b, &[0; 4], Digests::default(), 0);
        t.handle_bytes(&b);
        let _ = t.poll_event(); // the completed write
        assert!(matches!(
            t.poll_event(),
            Some(TargetEvent::Terminated { .. })
        ));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(200), |(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..6))| {
            let (mut h, mut t) = pair(HostParams::default(), TargetParams::default());
            for c in &chunks {
                t.handle_bytes(c);
                h.handle_bytes(c);
                while t.poll_event().is_some() {}
                while h.poll_event().is_some() {}
            }
        });
    }

    fn event_summary(t: &mut TargetConn) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(e) = t.poll_event() {
            v.push(match e {
                TargetEvent::Established => "est".to_string(),
                TargetEvent::Command(r) => {
                    format!("cmd {} {:?} {} {:?}", r.cid(), r.data, r.c2h_len, r.error)
                }
                TargetEvent::Terminated { fes, by_peer } => format!("term {fes:?} {by_peer}"),
            });
        }
        v
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        /// A stream of plausible host PDUs: ICReq, then capsules (some with in-capsule
        /// data, some asking for R2T) and H2CData for the first R2T.
        fn stream(cmds: &[(u8, u16, u16)], dg: bool) -> Vec<u8> {
            let d = Digests {
                header: dg,
                data: dg,
            };
            let mut v = Vec::new();
            PduRepr::IcReq {
                pfv: 0,
                hpda: 0,
                hdgst: dg,
                ddgst: dg,
                maxr2t: 0,
            }
            .emit_to_vec(&mut v, &[], Digests::default(), 0);
            for &(opc, cid, len) in cmds {
                let mut sqe = [0u8; 64];
                sqe[0] = opc;
                sqe[2..4].copy_from_slice(&cid.to_le_bytes());
                let data = vec![opc; len as usize];
                if opc & 3 == 1 && len <= 4096 {
                    set_sgl(&mut sqe, SGL_IN_CAPSULE, 0, len as u32);
                    PduRepr::CapsuleCmd { sqe }.emit_to_vec(&mut v, &data, d, 0);
                } else {
                    set_sgl(&mut sqe, SGL_TRANSPORT, 0, len as u32);
                    PduRepr::CapsuleCmd { sqe }.emit_to_vec(&mut v, &[], d, 0);
                    if opc & 3 == 1 && len > 0 {
                        PduRepr::H2cData {
                            cccid: cid,
                            ttag: 0,
                            datao: 0,
                            datal: len as u32,
                            last: true,
                        }
                        .emit_to_vec(&mut v, &data, d, 0);
                    }
                }
            }
            v
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Framing does not depend on how TCP segments the stream.
            #[test]
            fn segmentation_does_not_matter(cmds in proptest::collection::vec((0u8..4, 0u16..4, 0u16..6000), 1..4),
                                            dg in any::<bool>(), cuts in proptest::collection::vec(1usize..700, 1..20)) {
                let s = stream(&cmds, dg);
                let mut whole = TargetConn::new(TargetParams::default());
                whole.handle_bytes(&s);
                let want = event_summary(&mut whole);
                let mut t = TargetConn::new(TargetParams::default());
                let mut off = 0;
                let mut i = 0;
                while off < s.len() {
                    let n = cuts[i % cuts.len()].min(s.len() - off);
                    t.handle_bytes(&s[off..off + n]);
                    off += n;
                    i += 1;
                }
                prop_assert_eq!(event_summary(&mut t), want);
            }

            /// A corrupted byte anywhere never panics either side.
            #[test]
            fn corrupted_streams_never_panic(cmds in proptest::collection::vec((0u8..4, 0u16..4, 0u16..6000), 1..4),
                                             dg in any::<bool>(), pos in any::<usize>(), val in any::<u8>()) {
                let mut s = stream(&cmds, dg);
                let p = pos % s.len();
                s[p] = val;
                let mut t = TargetConn::new(TargetParams::default());
                t.handle_bytes(&s);
                let _ = event_summary(&mut t);
                let mut h = HostConn::new(HostParams { hdgst: dg, ddgst: dg, ..Default::default() });
                h.handle_bytes(&s);
                while h.poll_event().is_some() {}
            }
        }
    }
}
