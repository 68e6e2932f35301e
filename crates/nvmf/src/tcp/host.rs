//! The host side of an NVMe/TCP connection ([`HostConn`]), sans-IO: ICReq at
//! creation, commands submitted with their data, [`HostEvent`]s out, R2Ts
//! answered with H2CData by itself.

use std::collections::VecDeque;

use nvme::{Cqe, SglDescriptor, SglSubtype, Sqe};
use tracing::warn;
use wire::nvme_tcp::{self as pdu, Digests, Fes, PduRepr, PduType};

pub use crate::transport::SubmitError;

use super::framing::{
    check_data_header, check_pdu, term_data, Checked, ConnStats, Next, RxBuf, State, TxBuf,
};

/// Largest PDU the host accepts (a C2HData PDU larger than any read we submit
/// is refused by its offset check anyway).
const MAX_C2H_PDU: usize = 16 * 1024 * 1024;

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
        cqe: Cqe,
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

/// A C2HData PDU whose data is being read straight into its command's buffer.
#[derive(Debug, Clone, Copy)]
struct DirectRx {
    cid: u16,
    /// Where this PDU's data starts in the command's buffer (DATAO).
    start: usize,
    /// Next byte to receive.
    pos: usize,
    end: usize,
    ddgst: bool,
    /// The PDU completes the command (SUCCESS; checked with LAST and the length).
    success: bool,
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
    direct: Option<DirectRx>,
    pub(super) stats: ConnStats,
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
            direct: None,
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

    /// Where the next socket bytes go (`read` into it, then
    /// [`HostConn::handle_received`]). Never empty. C2H data avoids the receive
    /// buffer: while a C2HData PDU's data is on its way (its header checked),
    /// this is the rest of that data's place in the command's read buffer.
    pub fn recv_buf(&mut self) -> &mut [u8] {
        if let Some(d) = self.direct {
            if d.pos < d.end {
                if let Some(Some(cmd)) = self.cmds.get_mut(d.cid as usize) {
                    return &mut cmd.read[d.pos..d.end];
                }
                // the command went away under us (cannot happen): forget the PDU
                self.direct = None;
            }
        }
        self.rx.spare(64 * 1024)
    }
    /// `n` bytes were written at the start of [`HostConn::recv_buf`].
    pub fn handle_received(&mut self, n: usize) {
        self.stats.bytes_rx += n as u64;
        match &mut self.direct {
            Some(d) if d.pos < d.end => {
                d.pos = (d.pos + n).min(d.end);
                self.stats.c2h_in_place += n as u64;
            }
            _ => self.rx.commit(n),
        }
        self.process();
    }
    /// Feeds bytes received from the controller (copied as a socket read would
    /// write them, so this takes the same paths as [`HostConn::recv_buf`]).
    pub fn handle_bytes(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let b = self.recv_buf();
            let n = b.len().min(data.len());
            b[..n].copy_from_slice(&data[..n]);
            data = &data[n..];
            self.handle_received(n);
        }
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
    pub fn recycle(&mut self, v: Vec<u8>) {
        if self.pool.len() < 256 && v.capacity() > 0 {
            self.pool.push(v);
        }
    }
    /// A buffer of `len` bytes. Pooled buffers keep their length, so only
    /// growth is zeroed: a read buffer's bytes are all overwritten by C2H data
    /// before it completes with success, and `finish` zeroes what a command
    /// ending otherwise left unwritten.
    fn alloc_buf(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0);
        } else {
            v.truncate(len);
        }
        v
    }

    /// Submits a command. `write` is host-to-controller data: carried in the
    /// capsule when it is at most `in_capsule` bytes, else sent on the target's
    /// R2T. `read_len` bytes of controller-to-host data are expected. SGL1 of
    /// `sqe` is filled in here.
    pub fn submit(
        &mut self,
        mut sqe: Sqe,
        write: &[u8],
        read_len: u32,
        in_capsule: u32,
    ) -> Result<(), SubmitError> {
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        let cid = sqe.cid() as usize;
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
            sqe.set_sgl(SglDescriptor::data_block(
                SglSubtype::Offset,
                0,
                write.len() as u32,
            ));
            write
        } else if !write.is_empty() {
            sqe.set_sgl(SglDescriptor::transport_data_block(write.len() as u32));
            let mut w = self.alloc_buf(write.len());
            w.copy_from_slice(write);
            cmd.write = w;
            &[]
        } else {
            sqe.set_sgl(SglDescriptor::transport_data_block(read_len));
            &[]
        };
        PduRepr::CapsuleCmd {
            sqe: *sqe.as_bytes(),
        }
        .emit_to_vec(&mut self.tx.buf, icd, self.dg, self.cpda);
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
            if let Some(d) = self.direct {
                // data received in place; its digest comes through the rx buffer
                if d.pos < d.end || (d.ddgst && self.rx.avail().len() < pdu::DIGEST_LEN) {
                    return;
                }
                let dg = d.ddgst.then(|| {
                    let a = self.rx.avail();
                    u32::from_le_bytes([a[0], a[1], a[2], a[3]])
                });
                if d.ddgst {
                    self.rx.start += pdu::DIGEST_LEN;
                }
                self.finish_direct(dg);
                continue;
            }
            let first = (self.state == State::AwaitIc)
                .then_some(&[PduType::IcResp, PduType::C2hTermReq][..]);
            let (start, plen) = match self.rx.next_pdu(MAX_C2H_PDU, first) {
                Next::Nothing => return,
                Next::Partial(ty) => {
                    if ty == PduType::C2hData && self.try_direct() {
                        continue;
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
                let cqe = Cqe::from_array(cqe);
                let cid = cqe.cid() as usize;
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
                self.stats.c2h_copied += data.len() as u64;
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
                    let mut cqe = Cqe::zeroed();
                    cqe.set_cid(cccid);
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

    /// Checks the C2HData header at the front of the rx buffer the way
    /// `handle_pdu` would with the whole PDU there; returns (header bytes incl.
    /// digest and padding, cccid, datao, datal, data digest follows, success),
    /// or None for anything unusual, which then takes the ordinary
    /// path (and its errors) once the whole PDU is in.
    fn check_c2h_header(&self) -> Option<(usize, u16, usize, usize, bool, bool)> {
        if self.state != State::Ready {
            return None;
        }
        let h = check_data_header(self.rx.avail(), PduType::C2hData, self.dg, MAX_C2H_PDU)?;
        let cmd = self.cmds.get(h.cccid as usize)?.as_ref()?;
        let end = h.datao + h.datal;
        if h.datao != cmd.received || end > cmd.read.len() || (h.success && end != cmd.read.len()) {
            return None;
        }
        Some((h.start, h.cccid, h.datao, h.datal, h.ddgst, h.success))
    }

    /// A C2HData PDU whose header is in the rx buffer but whose data is not all
    /// there yet: when the header is one `handle_pdu` would accept, the data
    /// received so far is copied to the command's buffer and the rest is read
    /// in place ([`HostConn::recv_buf`]). True when it went direct.
    fn try_direct(&mut self) -> bool {
        let Some((hdr, cid, datao, datal, ddgst, success)) = self.check_c2h_header() else {
            return false;
        };
        let HostConn {
            rx, cmds, stats, ..
        } = self;
        let a = rx.avail();
        let got = (a.len() - hdr).min(datal);
        let Some(Some(cmd)) = cmds.get_mut(cid as usize) else {
            return false;
        };
        cmd.read[datao..datao + got].copy_from_slice(&a[hdr..hdr + got]);
        rx.start += hdr + got;
        stats.c2h_copied += got as u64;
        self.direct = Some(DirectRx {
            cid,
            start: datao,
            pos: datao + got,
            end: datao + datal,
            ddgst,
            success,
        });
        true
    }

    /// The in-place C2HData PDU is complete (with its data digest, if any).
    fn finish_direct(&mut self, ddgst: Option<u32>) {
        let Some(d) = self.direct.take() else {
            return;
        };
        self.stats.pdus_rx += 1;
        let Some(Some(cmd)) = self.cmds.get_mut(d.cid as usize) else {
            return;
        };
        let dd_ok = ddgst.is_none_or(|g| g == pdu::crc32c(&cmd.read[d.start..d.end]));
        if !dd_ok {
            self.stats.ddgst_errors += 1;
        }
        cmd.received = d.end;
        cmd.ddgst_bad |= !dd_ok;
        if d.success {
            // checked with the header: last, and the whole read is in
            let Some(cmd) = self.cmds.get_mut(d.cid as usize).and_then(Option::take) else {
                return;
            };
            let mut cqe = Cqe::zeroed();
            cqe.set_cid(d.cid);
            self.finish(cqe, cmd);
        }
    }

    fn finish(&mut self, mut cqe: Cqe, mut cmd: HostCmd) {
        if !cmd.write.is_empty() {
            self.recycle(cmd.write);
        }
        // a pooled buffer may hold an earlier command's bytes where no data came
        let got = cmd.received.min(cmd.read.len());
        cmd.read[got..].fill(0);
        if cmd.ddgst_bad {
            // Data Transfer Error, as Linux's host reports a data digest mismatch
            cqe.set_status_raw(0x04 << 1);
        }
        self.events.push_back(HostEvent::Completion {
            cqe,
            data: cmd.read,
            ddgst_error: cmd.ddgst_bad,
        });
    }
}
