//! The controller side of an NVMe/TCP connection ([`TargetConn`]), sans-IO:
//! bytes in, [`TargetEvent`]s out, a transmit queue drained by the driver.
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

use nvme::opcode::DataDirection;
use nvme::{Cqe, Psdt, Sqe};
use tracing::warn;
use wire::nvme_tcp::{self as pdu, Digests, Fes, PduRepr, PduType};

use super::framing::{
    check_data_header, check_pdu, term_data, Checked, ConnStats, Next, RxBuf, SegTx, State,
};
use crate::transport::{
    DataError, QpairEvent, Request, TransportId, TransportLimits, TransportQpair,
};
use bdev::IoBuf;
use nvme::log::{treq, DiscoveryEntry, TrType};

/// SGL descriptor type byte (byte 15 of the descriptor, SQE byte 39) for data
/// carried in the capsule: Data Block, subtype Offset.
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL type byte for data moved by the transport (R2T/H2CData or C2HData):
/// Transport Data Block, subtype Transport Specific.
pub const SGL_TRANSPORT: u8 = 0x5a;

/// Direction of the command's data (the opcode's low bits; FCTYPE's for fabrics
/// commands).
pub fn data_direction(sqe: &Sqe) -> DataDirection {
    if sqe.is_fabrics() {
        sqe.fctype().data_direction()
    } else {
        DataDirection::from_opcode(sqe.opcode())
    }
}

/// The NVMe/TCP part of the discovery log entries for a listener at `trid`
/// (`listener_discover`): TRTYPE TCP, its address family and address, TREQ
/// "secure channel not specified, SQ flow control disable supported", TSAS
/// SECTYPE none; CNTLID 0xffff (dynamic) and ASQSZ 32 as for any transport.
pub fn discovery_entry(trid: &TransportId) -> DiscoveryEntry {
    DiscoveryEntry {
        trtype: TrType::Tcp,
        adrfam: trid.adrfam,
        traddr: trid.traddr.clone(),
        trsvcid: trid.trsvcid.clone(),
        treq: treq::SECURE_NOT_SPECIFIED | treq::DISABLE_SQFLOW,
        ..Default::default()
    }
}

impl TargetParams {
    /// What controllers of NVMe/TCP queues report (`cdata_init`).
    pub fn limits(&self) -> TransportLimits {
        TransportLimits {
            max_xfer: self.max_xfer,
            in_capsule: self.in_capsule,
            ..TransportLimits::default()
        }
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
/// A command waiting for H2C data (after our R2T).
#[derive(Debug)]
struct H2cPending {
    sqe: Sqe,
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

/// The controller side of one NVMe/TCP connection (one queue pair).
#[derive(Debug)]
pub struct TargetConn {
    params: TargetParams,
    state: State,
    dg: Digests,
    hpda: u8,
    pub(super) rx: RxBuf,
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
    pub(super) pool: Vec<Vec<u8>>,
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
    /// Returns a buffer to the pool (transport buffers are vectors; others are
    /// dropped).
    pub fn recycle_buf(&mut self, b: IoBuf) {
        if let IoBuf::Vec(v) = b {
            self.recycle(v);
        }
    }
    /// Returns a vector to the pool.
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
            let first = (self.state == State::AwaitIc).then_some(&[PduType::IcReq][..]);
            let (start, plen) = match self.rx.next_pdu(self.max_pdu(), first) {
                Next::Nothing => return,
                Next::Partial(ty) => {
                    if ty == PduType::H2cData {
                        self.try_direct();
                    }
                    return;
                }
                Next::Fatal(fes, fei, h) => {
                    self.terminate(fes, fei, &h);
                    return;
                }
                Next::Whole { start, plen } => (start, plen),
            };
            self.rx.start += plen;
            // take the PDU out of the rx buffer temporarily to satisfy the borrow checker
            let buf = std::mem::take(&mut self.rx.buf);
            self.handle_pdu(&buf[start..start + plen]);
            self.rx.buf = buf;
            self.stats.pdus_rx += 1;
        }
    }

    fn handle_pdu(&mut self, raw: &[u8]) {
        let ready = self.state == State::Ready;
        let Checked {
            pdu: p,
            repr,
            dd_ok,
        } = match check_pdu(raw, self.dg, ready, &mut self.stats) {
            Ok(c) => c,
            Err((fes, fei)) => {
                self.terminate(fes, fei, raw);
                return;
            }
        };
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
            PduRepr::CapsuleCmd { sqe } => self.on_capsule(Sqe::from_array(sqe), p.data(), dd_ok),
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
        if self.state != State::Ready {
            return None;
        }
        let h = check_data_header(self.rx.avail(), PduType::H2cData, self.dg, self.max_pdu())?;
        if h.datal > self.params.maxh2cdata as usize {
            return None;
        }
        let pend = self.h2c.get(h.ttag as usize)?.as_ref()?;
        let end = h.datao + h.datal;
        if pend.sqe.cid() != h.cccid
            || h.datao != pend.received
            || end > pend.buf.len()
            || h.last != (end == pend.buf.len())
        {
            return None;
        }
        Some((h.start, h.ttag, h.datao, h.datal, h.ddgst, h.last))
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
            data: IoBuf::Vec(p.buf),
            c2h_len: 0,
            error: p.ddgst_bad.then_some(DataError::DataDigest),
        }));
    }

    fn on_capsule(&mut self, sqe: Sqe, icd: &[u8], dd_ok: bool) {
        let dir = data_direction(&sqe);
        let sgl = sqe.sgl1();
        let sgl_ty = sgl.id();
        let len = sgl.length();
        let mut req = Request {
            sqe,
            data: IoBuf::Vec(Vec::new()),
            c2h_len: 0,
            error: None,
        };
        let psdt_sgl = sqe.psdt() == Psdt::SglMptrContig;
        match dir {
            _ if !icd.is_empty() && !dd_ok => req.error = Some(DataError::DataDigest),
            DataDirection::None => {}
            _ if len == 0 => {}
            _ if !psdt_sgl => req.error = Some(DataError::SglTypeInvalid),
            DataDirection::HostToController => match sgl_ty {
                SGL_IN_CAPSULE => {
                    let off = sgl.address();
                    if off != 0 {
                        req.error = Some(DataError::SglOffsetInvalid);
                    } else if len as usize != icd.len() || len > self.params.in_capsule {
                        req.error = Some(DataError::SglLengthInvalid);
                    } else {
                        let mut b = self.alloc_buf(0);
                        b.extend_from_slice(icd);
                        req.data = IoBuf::Vec(b);
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
                            cccid: sqe.cid(),
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
            DataDirection::ControllerToHost => {
                if sgl_ty != SGL_TRANSPORT {
                    req.error = Some(DataError::SglTypeInvalid);
                } else if len > self.params.max_xfer {
                    req.error = Some(DataError::SglLengthInvalid);
                } else {
                    req.c2h_len = len;
                }
            }
            DataDirection::Bidirectional => req.error = Some(DataError::SglTypeInvalid),
        }
        if dir != DataDirection::HostToController && !icd.is_empty() && req.error.is_none() {
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
        if pend.sqe.cid() != cccid {
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
    pub fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        if self.state != State::Ready {
            self.recycle_buf(data);
            return;
        }
        let cid = cqe.cid();
        // SUCCESS also requires DW0/DW1 to be zero: the host synthesises a zero CQE
        let fold =
            self.c2h_success && cqe.status_raw() >> 1 == 0 && cqe.dw0() == 0 && cqe.dw1() == 0;
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
                    self.recycle_buf(v);
                }
                self.tx.free_datas.push(slot);
            }
        }
        if fold && len > 0 {
            self.stats.c2h_success += 1;
            return;
        }
        self.send(
            &PduRepr::CapsuleResp {
                cqe: *cqe.as_bytes(),
            },
            &[],
            0,
        );
    }
}

/// The sans-IO connection is itself a transport qpair: the TCP driver's
/// [`super::driver::TcpQpair`] adds the socket, tests join it to a [`super::HostConn`]
/// in memory.
impl TransportQpair for TargetConn {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        Some(match TargetConn::poll_event(self)? {
            TargetEvent::Established => QpairEvent::Established,
            TargetEvent::Command(r) => QpairEvent::Command(r),
            TargetEvent::Terminated { by_peer, .. } => QpairEvent::Terminated { by_peer },
        })
    }
    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        TargetConn::complete(self, cqe, data);
    }
    fn get_buf(&mut self, len: usize) -> IoBuf {
        IoBuf::Vec(self.alloc_buf(len))
    }
    fn put_buf(&mut self, buf: IoBuf) {
        self.recycle_buf(buf);
    }
    fn connected(&mut self, sqflow_disabled: bool) {
        self.set_c2h_success(sqflow_disabled);
    }
    fn is_terminated(&self) -> bool {
        TargetConn::is_terminated(self)
    }
    fn peer(&self) -> String {
        "memory".into()
    }
    fn describe_stats(&self) -> String {
        format!("{:?} digests {:?}", self.stats, self.dg)
    }
}
