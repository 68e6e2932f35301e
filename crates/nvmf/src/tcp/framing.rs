//! NVMe/TCP PDU framing, one framer for both sides: the receive buffer and the
//! checks every PDU passes before a side looks at its meaning (common header
//! lengths, the first PDU of a connection, `Pdu::check_len`, header digest,
//! `PduRepr::parse`, data digest presence and value), the transmit buffers, and
//! the data of a term request. The target ([`super::target`]) and the host
//! ([`super::host`]) differ only in what they do with a checked PDU.

use std::collections::VecDeque;

use bdev::IoBuf;

use wire::nvme_tcp::{self as pdu, Digests, Fes, Pdu, PduRepr, PduType};

/// Connection state, the same on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    AwaitIc,
    Ready,
    Terminated,
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
    /// Host side: C2H data bytes read from the socket straight into their
    /// command's buffer.
    pub c2h_in_place: u64,
    /// Host side: C2H data bytes copied from the receive buffer (data that
    /// arrived in one read with its header or earlier PDUs; whole PDUs included).
    pub c2h_copied: u64,
}

/// Shared receive framing: an accumulation buffer with a read cursor.
#[derive(Debug, Default)]
pub(super) struct RxBuf {
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl RxBuf {
    #[inline]
    pub(super) fn spare(&mut self, min: usize) -> &mut [u8] {
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
    #[inline]
    pub(super) fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
    #[cfg(test)]
    pub(super) fn push(&mut self, data: &[u8]) {
        let s = self.spare(data.len());
        s[..data.len()].copy_from_slice(data);
        self.commit(data.len());
    }
    #[inline]
    pub(super) fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// Transmit buffer: PDUs appended, drained by the driver.
#[derive(Debug, Default)]
pub(super) struct TxBuf {
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
}

impl TxBuf {
    #[inline]
    pub(super) fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }
    pub(super) fn advance(&mut self, n: usize) {
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
pub(super) struct SegTx {
    pub(super) hdr: Vec<u8>,
    pub(super) segs: VecDeque<Seg>,
    /// Owned data buffers and how many segments still refer to them.
    pub(super) datas: Vec<Option<(IoBuf, u32)>>,
    pub(super) free_datas: Vec<usize>,
    /// Bytes of the front segment already sent.
    pub(super) front: usize,
    pub(super) total: usize,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Seg {
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
    #[inline]
    pub(super) fn seg_bytes(&self, s: Seg) -> &[u8] {
        match s {
            Seg::Hdr { start, end } => &self.hdr[start..end],
            Seg::Data { slot, start, end } => match &self.datas[slot] {
                Some((v, _)) => &v[start..end],
                None => &[],
            },
        }
    }
    /// Appends header bytes written by `f` into the header buffer.
    pub(super) fn push_hdr(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
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
    pub(super) fn add_data(&mut self, v: IoBuf) -> usize {
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
    pub(super) fn push_data(&mut self, slot: usize, start: usize, end: usize) {
        if let Some(Some((_, refs))) = self.datas.get_mut(slot) {
            *refs += 1;
            self.total += end - start;
            self.segs.push_back(Seg::Data { slot, start, end });
        }
    }
    #[inline]
    pub(super) fn pending(&self) -> &[u8] {
        match self.segs.front() {
            Some(&s) => &self.seg_bytes(s)[self.front..],
            None => &[],
        }
    }
    pub(super) fn vectored<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
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
    pub(super) fn advance(&mut self, mut n: usize, pool: &mut Vec<Vec<u8>>) {
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
                        if let Some((IoBuf::Vec(v), _)) = self.datas[slot].take() {
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
    pub(super) fn compact(&mut self) {
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
pub(super) fn term_data(offending: &[u8]) -> &[u8] {
    let max = pdu::TERM_REQ_MAX_LEN - pdu::DATA_HLEN;
    let hlen = offending.get(2).map_or(0, |&h| h as usize);
    let n = hlen.max(pdu::CH_LEN).min(offending.len()).min(max);
    &offending[..n]
}
pub(super) fn header_digest_fault(p: &Pdu<&[u8]>, negotiated: bool) -> Option<(Fes, u32)> {
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

/// What the front of a receive buffer holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Next {
    /// Not even a common header yet.
    Nothing,
    /// A PDU of this type whose bytes are not all in yet.
    Partial(PduType),
    /// A whole PDU at `buf[start..start + plen]`.
    Whole { start: usize, plen: usize },
    /// The connection cannot go on: term request with this FES and FEI, carrying
    /// the common header.
    Fatal(Fes, u32, [u8; pdu::CH_LEN]),
}

impl RxBuf {
    /// Frames the next PDU: `plen` within `CH_LEN..=max_pdu` (else FEI 4, the
    /// PDU length field), `hlen` within `plen` (else FEI 2), and, while `first`
    /// is given (no ICReq/ICResp exchanged yet), one of those types (else a PDU
    /// sequence error).
    #[inline]
    pub(super) fn next_pdu(&self, max_pdu: usize, first: Option<&[PduType]>) -> Next {
        let avail = self.avail();
        let Ok((ty, _fl, hlen, _pdo, plen)) = pdu::peek_common_header(avail) else {
            return Next::Nothing;
        };
        let fatal = |fes, fei| {
            let mut ch = [0u8; pdu::CH_LEN];
            ch.copy_from_slice(&avail[..pdu::CH_LEN]);
            Next::Fatal(fes, fei, ch)
        };
        let plen = plen as usize;
        if plen > max_pdu || plen < pdu::CH_LEN {
            // plen beyond our limit: a data transfer limit we never advertised
            return fatal(Fes::InvalidHeaderField, 4);
        }
        if hlen as usize > plen {
            return fatal(Fes::InvalidHeaderField, 2);
        }
        if first.is_some_and(|f| !f.contains(&ty)) {
            return fatal(Fes::PduSequenceError, 0);
        }
        if avail.len() < plen {
            return Next::Partial(ty);
        }
        Next::Whole {
            start: self.start,
            plen,
        }
    }
}

/// The header of a data PDU (H2CData or C2HData) at the front of a receive
/// buffer whose data may not be all there yet.
#[derive(Debug, Clone, Copy)]
pub(super) struct DataHeader {
    /// Header bytes, with the header digest and padding: where the data starts.
    pub(super) start: usize,
    pub(super) cccid: u16,
    pub(super) ttag: u16,
    pub(super) datao: usize,
    pub(super) datal: usize,
    /// A data digest follows the data.
    pub(super) ddgst: bool,
    pub(super) last: bool,
    pub(super) success: bool,
}

/// Checks the header of a data PDU of type `ty` at the front of `a` the way
/// [`check_pdu`] and `PduRepr::parse` would with the whole PDU there (lengths,
/// flags, digests as negotiated, the header digest's value, DATAL against
/// PLEN); None for anything else, which then takes the ordinary whole-PDU path
/// and its errors. The caller checks the fields against its command.
pub(super) fn check_data_header(
    a: &[u8],
    ty: PduType,
    dg: Digests,
    max_pdu: usize,
) -> Option<DataHeader> {
    let (t, f, hlen, pdo, plen) = pdu::peek_common_header(a).ok()?;
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
    let allowed = pdu::flags::HDGSTF
        | pdu::flags::DDGSTF
        | pdu::flags::LAST_PDU
        | if ty == PduType::C2hData {
            pdu::flags::SUCCESS
        } else {
            0
        };
    let last = f & pdu::flags::LAST_PDU != 0;
    let success = f & pdu::flags::SUCCESS != 0;
    if t != ty
        || hlen != pdu::DATA_HLEN
        || f & !allowed != 0
        || (success && !last)
        || (hd != 0) != dg.header
        || (dd != 0) != dg.data
        || start < hlen + hd
        || a.len() < start
        || plen < start + dd + 1
        || plen > max_pdu
    {
        return None;
    }
    let h = &a[..hlen];
    if hd != 0
        && pdu::crc32c(h) != u32::from_le_bytes([a[hlen], a[hlen + 1], a[hlen + 2], a[hlen + 3]])
    {
        return None;
    }
    let le16 = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as usize;
    let datal = le32(16);
    if datal != plen - start - dd {
        return None;
    }
    Some(DataHeader {
        start,
        cccid: le16(8),
        ttag: le16(10),
        datao: le32(12),
        datal,
        ddgst: dd != 0,
        last,
        success,
    })
}

/// A PDU that passed every check of [`check_pdu`].
pub(super) struct Checked<'a> {
    pub(super) pdu: Pdu<&'a [u8]>,
    pub(super) repr: PduRepr,
    /// The data digest, if the PDU carries one, matches.
    pub(super) dd_ok: bool,
}

/// The checks both ends make on a whole PDU (`raw`, as framed by
/// [`RxBuf::next_pdu`]): lengths per type, the header digest once negotiated
/// (`ready`), the fields, and a data digest present whenever negotiated and data
/// is carried. Returns the term request's FES and FEI on a fatal error; a data
/// digest mismatch is not fatal (`dd_ok` false). Digest errors are counted.
#[inline]
pub(super) fn check_pdu<'a>(
    raw: &'a [u8],
    dg: Digests,
    ready: bool,
    stats: &mut ConnStats,
) -> Result<Checked<'a>, (Fes, u32)> {
    let p = match Pdu::new_checked(raw) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(?e, "bad PDU lengths");
            let hlen = PduType::from(raw[0]).hlen().unwrap_or(0);
            let fei = if raw[2] as usize != hlen { 2 } else { 3 };
            return Err((Fes::InvalidHeaderField, fei));
        }
    };
    let ty = p.pdu_type();
    if ready {
        if let Some((fes, fei)) = header_digest_fault(&p, dg.header) {
            if fes == Fes::HeaderDigestError {
                stats.hdgst_errors += 1;
            }
            return Err((fes, fei));
        }
    }
    let repr = match PduRepr::parse(&p) {
        Ok(r) => r,
        Err(wire::Error::BadChecksum) => {
            stats.hdgst_errors += 1;
            return Err((Fes::HeaderDigestError, 0));
        }
        Err(wire::Error::BadVersion) => return Err((Fes::UnsupportedParameter, 8)),
        Err(e) => {
            tracing::debug!(?e, ?ty, "bad PDU");
            let fei = if matches!(ty, PduType::Unknown(_)) {
                0
            } else {
                1
            };
            return Err((Fes::InvalidHeaderField, fei));
        }
    };
    // data digest must be present when negotiated and data is carried
    if dg.data && ty.may_have_ddgst() && p.data_len() > 0 && p.ddgst().is_none() {
        return Err((Fes::InvalidHeaderField, 1));
    }
    let dd_ok = p.ddgst().is_none() || p.verify_ddgst().is_ok();
    if !dd_ok {
        stats.ddgst_errors += 1;
    }
    Ok(Checked {
        pdu: p,
        repr,
        dd_ok,
    })
}
