//! The responder (rxe_resp.c): RC request packets -> memory effects (SEND into
//! receive WQEs, RDMA WRITE, READ, atomics), receive completions, and the
//! responses (ACK/NAK, READ response, atomic ACK) in wire order; duplicates are
//! answered from the READ/atomic history.

use super::*;

pub(super) struct RecvInProgress {
    pub(super) wqe: RecvWqe,
    pub(super) off: usize,
    pub(super) from_srq: bool,
}

pub(super) struct WriteInProgress {
    pub(super) mr: Arc<MrInner>,
    pub(super) off: usize,
    pub(super) remaining: u32,
    pub(super) total: u32,
}

/// Output of the responder, in wire order.
pub(super) enum RespOut {
    Ack {
        psn: Psn,
        syndrome: u8,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    Read {
        mr: Option<Arc<MrInner>>,
        off: usize,
        remaining: u32,
        psn: Psn,
        first: bool,
        msn: u32,
        last_psn: Psn,
    },
}

/// Responder state (rxe's `struct rxe_resp_info`, plus the receive queue).
pub(crate) struct Responder {
    pub(super) rq: VecDeque<RecvWqe>,
    /// The next PSN expected.
    pub(super) epsn: Psn,
    pub(super) msn: u32,
    pub(super) nak_sent: bool,
    pub(super) cur_recv: Option<RecvInProgress>,
    pub(super) cur_write: Option<WriteInProgress>,
    pub(super) resp_q: VecDeque<RespOut>,
    pub(super) atomic_hist: VecDeque<(Psn, u64)>,
    /// Recent READ requests (first, last PSN): duplicates are replayed only from here.
    pub(super) read_hist: VecDeque<(Psn, Psn)>,
    /// UC: drop packets until the next FIRST/ONLY (rxe's `resp.drop_msg`).
    pub(super) drop_msg: bool,
    /// A request packet left ahead of the plain ACK at the head of `resp_q`
    /// (see `poll_output`); the ACK goes next.
    pub(super) ack_waited: bool,
}

impl Responder {
    pub(super) fn new(max_recv_wr: usize) -> Responder {
        Responder {
            rq: VecDeque::with_capacity(max_recv_wr),
            epsn: Psn::new(0),
            msn: 0,
            nak_sent: false,
            cur_recv: None,
            cur_write: None,
            resp_q: VecDeque::with_capacity(64),
            atomic_hist: VecDeque::with_capacity(ATOMIC_HISTORY),
            read_hist: VecDeque::with_capacity(ATOMIC_HISTORY),
            drop_msg: false,
            ack_waited: false,
        }
    }
}

impl QpCore {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_recv_wc(
        &mut self,
        ctx: &mut Ctx,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: u32,
        flags: WcFlags,
        src_qp: u32,
    ) {
        let wc = Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            imm_data: imm,
            qp_num: self.qpn,
            src_qp,
            wc_flags: flags,
            ..Default::default()
        };
        ctx.push_wc(self.recv_cq, wc);
    }

    /// A receive WQE that ends in error: no data, no immediate.
    pub(super) fn fail_recv(&mut self, ctx: &mut Ctx, wr_id: u64, status: WcStatus, src_qp: u32) {
        self.push_recv_wc(
            ctx,
            wr_id,
            status,
            WcOpcode::Recv,
            0,
            0,
            WcFlags::empty(),
            src_qp,
        );
    }

    /// The last packet of a connected-QP message that consumed a receive WQE
    /// (SEND or RDMA WRITE with immediate): complete it successfully, with the
    /// packet's immediate and solicited-event bit.
    pub(super) fn complete_recv(
        &mut self,
        ctx: &mut Ctx,
        wr_id: u64,
        opcode: WcOpcode,
        byte_len: u32,
        r: &RocePacketRepr,
    ) {
        let mut fl = WcFlags::empty();
        if r.imm.is_some() || opcode == WcOpcode::RecvRdmaWithImm {
            fl |= WcFlags::WITH_IMM;
        }
        if r.ieth.is_some() {
            fl |= WcFlags::WITH_INV;
        }
        if r.bth.se {
            fl |= WcFlags::SOLICITED;
        }
        let src_qp = self.attr.dest_qp_num;
        self.push_recv_wc(
            ctx,
            wr_id,
            WcStatus::Success,
            opcode,
            byte_len,
            r.imm.or(r.ieth).unwrap_or(0),
            fl,
            src_qp,
        );
    }

    pub(super) fn push_ack(&mut self, psn: Psn) {
        if let Some(RespOut::Ack {
            psn: p,
            syndrome,
            msn,
        }) = self.resp.resp_q.back_mut()
        {
            if *syndrome == u8::from(AethSyndrome::ACK) {
                *p = psn;
                *msn = self.resp.msn;
                return;
            }
        }
        self.resp.resp_q.push_back(RespOut::Ack {
            psn,
            syndrome: AethSyndrome::ACK.into(),
            msn: self.resp.msn,
        });
    }

    pub(super) fn push_nak(&mut self, psn: Psn, s: AethSyndrome) {
        self.resp.resp_q.push_back(RespOut::Ack {
            psn,
            syndrome: s.into(),
            msn: self.resp.msn,
        });
    }

    /// A fatal responder error: NAK and move to ERR (rxe: RESPST_ERR_* → error).
    pub(super) fn resp_fatal(&mut self, ctx: &mut Ctx, psn: Psn, code: NakCode) -> Option<RespOut> {
        self.push_nak(psn, AethSyndrome::Nak(code));
        let nak = self.resp.resp_q.pop_back();
        self.enter_error(ctx, None);
        nak
    }

    pub(super) fn take_recv_wqe(&mut self, ctx: &mut Ctx) -> Option<(RecvWqe, bool)> {
        match self.srq {
            Some(s) => ctx.srq_pop(s).map(|w| (w, true)),
            None => self.resp.rq.pop_front().map(|w| (w, false)),
        }
    }

    pub(super) fn check_rkey(
        &self,
        ctx: &Ctx,
        rkey: u32,
        va: u64,
        len: u32,
        need: AccessFlags,
    ) -> Option<(Arc<MrInner>, usize)> {
        if !self.attr.qp_access_flags.contains(need) {
            return None;
        }
        let mr = ctx.mrs.get(rkey)?;
        if mr.pd != self.pd
            || !mr.access.contains(need)
            || mr.remote_invalid.load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        let off = mr.offset_of(va, len as u64)?;
        Some((mr.clone(), off))
    }

    /// The responder. Returns an urgent packet to send when the QP just died
    /// (the NAK must still leave although the QP is now in ERR).
    pub(crate) fn handle_request(
        &mut self,
        ctx: &mut Ctx,
        r: &RocePacketRepr,
        payload: &[u8],
        src: [u8; 4],
    ) -> Option<RespOutPkt> {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return None;
        }
        let info = r.info()?;
        if self.qp_type == QpType::Ud {
            self.ud_receive(ctx, r, payload, src);
            return None;
        }
        if self.qp_type == QpType::Uc {
            self.uc_receive(ctx, r, info, payload);
            return None;
        }
        let psn = r.bth.psn;
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                self.push_nak(self.resp.epsn, AethSyndrome::Nak(NakCode::PsnSeqError));
            }
            return None;
        }
        if d < 0 {
            self.counters.dup_requests += 1;
            self.duplicate(ctx, r, psn);
            return None;
        }
        self.resp.nak_sent = false;
        let first = info.has(OpFlags::FIRST);
        let last = info.has(OpFlags::LAST);
        // opcode sequence
        let seq_ok = if info.has(OpFlags::SEND) {
            self.resp.cur_write.is_none() && (first == self.resp.cur_recv.is_none())
        } else if info.has(OpFlags::WRITE) {
            self.resp.cur_recv.is_none() && (first == self.resp.cur_write.is_none())
        } else {
            self.resp.cur_recv.is_none() && self.resp.cur_write.is_none()
        };
        if !seq_ok {
            return self
                .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                .map(RespOutPkt);
        }
        if info.has(OpFlags::SEND) {
            if first {
                match self.take_recv_wqe(ctx) {
                    Some((wqe, from_srq)) => {
                        self.resp.cur_recv = Some(RecvInProgress {
                            wqe,
                            off: 0,
                            from_srq,
                        })
                    }
                    None => {
                        self.counters.rnr_naks_sent += 1;
                        self.push_nak(
                            psn,
                            AethSyndrome::RnrNak {
                                timer: self.attr.min_rnr_timer,
                            },
                        );
                        return None;
                    }
                }
            }
            self.counters.rx_copy_bytes += payload.len() as u64;
            let cur = self.resp.cur_recv.as_mut()?;
            if cur.off + payload.len() > cur.wqe.sgl.total_len() as usize
                || !cur.wqe.sgl.copy_in(ctx.mrs, cur.off, payload)
            {
                let wqe = self.resp.cur_recv.take()?;
                let st = if wqe.off + payload.len() > wqe.wqe.sgl.total_len() as usize {
                    WcStatus::LocLenErr
                } else {
                    WcStatus::LocProtErr
                };
                self.fail_recv(ctx, wqe.wqe.wr_id, st, 0);
                return self
                    .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                    .map(RespOutPkt);
            }
            cur.off += payload.len();
            if last {
                let c = self.resp.cur_recv.take()?;
                if let Some(rkey) = r.ieth {
                    // SEND with Invalidate: the R_Key must name a memory region of this
                    // QP's PD (rxe_invalidate_mr); it loses remote access. An unknown
                    // key fails the receive and the QP, as rxe's RESPST_ERROR does.
                    match ctx
                        .mrs
                        .get(rkey)
                        .filter(|m| m.pd == self.pd && m.rkey == rkey)
                    {
                        Some(m) => m
                            .remote_invalid
                            .store(true, std::sync::atomic::Ordering::Relaxed),
                        None => {
                            self.fail_recv(ctx, c.wqe.wr_id, WcStatus::LocProtErr, 0);
                            return self
                                .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                                .map(RespOutPkt);
                        }
                    }
                }
                self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::Recv, c.off as u32, r);
                self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
            }
        } else if info.has(OpFlags::WRITE) {
            if first {
                let reth = r.reth?;
                if reth.dma_len == 0 {
                    self.resp.cur_write = Some(WriteInProgress {
                        mr: ctx.dummy_mr.clone(),
                        off: 0,
                        remaining: 0,
                        total: 0,
                    });
                } else {
                    match self.check_rkey(
                        ctx,
                        reth.rkey,
                        reth.va,
                        reth.dma_len,
                        AccessFlags::REMOTE_WRITE,
                    ) {
                        Some((mr, off)) => {
                            self.resp.cur_write = Some(WriteInProgress {
                                mr,
                                off,
                                remaining: reth.dma_len,
                                total: reth.dma_len,
                            })
                        }
                        None => {
                            return self
                                .resp_fatal(ctx, psn, NakCode::RemoteAccessError)
                                .map(RespOutPkt)
                        }
                    }
                }
            }
            let mtu = mtu_bytes(&self.attr);
            let bad_len = {
                let w = self.resp.cur_write.as_ref()?;
                payload.len() as u32 > w.remaining
                    || (!last && payload.len() != mtu)
                    || (last && payload.len() as u32 != w.remaining)
            };
            if bad_len {
                self.resp.cur_write = None;
                return self
                    .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                    .map(RespOutPkt);
            }
            if info.has(OpFlags::RWR) && self.resp.cur_recv.is_none() {
                match self.take_recv_wqe(ctx) {
                    Some((wqe, from_srq)) => {
                        self.resp.cur_recv = Some(RecvInProgress {
                            wqe,
                            off: 0,
                            from_srq,
                        })
                    }
                    None => {
                        if first {
                            self.resp.cur_write = None;
                        }
                        self.counters.rnr_naks_sent += 1;
                        self.push_nak(
                            psn,
                            AethSyndrome::RnrNak {
                                timer: self.attr.min_rnr_timer,
                            },
                        );
                        return None;
                    }
                }
            }
            self.counters.rx_copy_bytes += payload.len() as u64;
            let w = self.resp.cur_write.as_mut()?;
            if !payload.is_empty() {
                w.mr.copy_in(w.off, payload);
            }
            w.off += payload.len();
            w.remaining -= payload.len() as u32;
            if last {
                let total = w.total;
                self.resp.cur_write = None;
                if let Some(c) = self.resp.cur_recv.take() {
                    self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::RecvRdmaWithImm, total, r);
                }
                self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
            }
        } else if info.has(OpFlags::READ) {
            let reth = r.reth?;
            let reads = self
                .resp
                .resp_q
                .iter()
                .filter(|o| matches!(o, RespOut::Read { .. } | RespOut::AtomicAck { .. }))
                .count();
            if reads >= self.attr.max_dest_rd_atomic.max(1) as usize {
                return self
                    .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                    .map(RespOutPkt);
            }
            let (mr, off) = if reth.dma_len == 0 {
                (None, 0)
            } else {
                match self.check_rkey(
                    ctx,
                    reth.rkey,
                    reth.va,
                    reth.dma_len,
                    AccessFlags::REMOTE_READ,
                ) {
                    Some((m, o)) => (Some(m), o),
                    None => {
                        return self
                            .resp_fatal(ctx, psn, NakCode::RemoteAccessError)
                            .map(RespOutPkt)
                    }
                }
            };
            self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
            let n = npkts(reth.dma_len, mtu_bytes(&self.attr));
            let last_psn = psn.add(n - 1);
            if self.resp.read_hist.len() >= ATOMIC_HISTORY {
                self.resp.read_hist.pop_front();
            }
            self.resp.read_hist.push_back((psn, last_psn));
            self.resp.resp_q.push_back(RespOut::Read {
                mr,
                off,
                remaining: reth.dma_len,
                psn,
                first: true,
                msn: self.resp.msn,
                last_psn,
            });
            self.resp.epsn = self.resp.epsn.add(n);
            return None;
        } else if info.has(OpFlags::ATOMIC) {
            let a = r.atomic_eth?;
            if a.va & 7 != 0 {
                return self
                    .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                    .map(RespOutPkt);
            }
            let Some((mr, off)) = self.check_rkey(ctx, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            else {
                return self
                    .resp_fatal(ctx, psn, NakCode::RemoteAccessError)
                    .map(RespOutPkt);
            };
            let cell = mr.atomic(off);
            let orig = if r.opcode() == Opcode::RC_COMPARE_SWAP {
                match cell.compare_exchange(
                    a.compare,
                    a.swap_add,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(v) | Err(v) => v,
                }
            } else {
                cell.fetch_add(a.swap_add, Ordering::SeqCst)
            };
            if self.resp.atomic_hist.len() >= ATOMIC_HISTORY {
                self.resp.atomic_hist.pop_front();
            }
            self.resp.atomic_hist.push_back((psn, orig));
            self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
            self.resp.resp_q.push_back(RespOut::AtomicAck {
                psn,
                orig,
                msn: self.resp.msn,
            });
            self.resp.epsn = self.resp.epsn.add(1);
            return None;
        }
        self.resp.epsn = self.resp.epsn.add(1);
        if r.bth.ack_req {
            self.push_ack(psn);
        }
        None
    }

    pub(super) fn duplicate(&mut self, ctx: &mut Ctx, r: &RocePacketRepr, psn: Psn) {
        let Some(info) = r.info() else { return };
        if info.has(OpFlags::READ) {
            let Some(reth) = r.reth else { return };
            // replay only a READ we still hold a resource for (rxe: find_resource)
            let Some(&(_, last_psn)) = self
                .resp
                .read_hist
                .iter()
                .find(|(f, l)| !psn.before(*f) && !psn.after(*l))
            else {
                return;
            };
            let mr = if reth.dma_len == 0 {
                None
            } else {
                match self.check_rkey(
                    ctx,
                    reth.rkey,
                    reth.va,
                    reth.dma_len,
                    AccessFlags::REMOTE_READ,
                ) {
                    Some((m, o)) => Some((m, o)),
                    None => return,
                }
            };
            // a replay of the same READ supersedes one still queued
            self.resp
                .resp_q
                .retain(|o| !matches!(o, RespOut::Read { last_psn: l, .. } if *l == last_psn));
            let (mr, off) = match mr {
                Some((m, o)) => (Some(m), o),
                None => (None, 0),
            };
            self.resp.resp_q.push_back(RespOut::Read {
                mr,
                off,
                remaining: reth.dma_len,
                psn,
                first: true,
                msn: self.resp.msn,
                last_psn,
            });
        } else if info.has(OpFlags::ATOMIC) {
            if let Some(&(_, orig)) = self.resp.atomic_hist.iter().find(|(p, _)| *p == psn) {
                self.resp.resp_q.push_back(RespOut::AtomicAck {
                    psn,
                    orig,
                    msn: self.resp.msn,
                });
            }
        } else {
            // SEND/WRITE already executed: (re)acknowledge what we have
            self.push_ack(self.resp.epsn.sub(1));
        }
    }

    /// The QP's next packet: responses first (they unblock the peer), except
    /// that a plain ACK lets one ready request packet go ahead of it. The peer
    /// waits for the request (an RDMA WRITE's data), the ACK only frees its send
    /// queue; and the two, to one destination with the shorter last, leave as
    /// one UDP GSO datagram (one skb through the kernel instead of two) on the
    /// 2-byte latency path, where each side sends the ACK of the peer's WRITE
    /// and its own WRITE together.
    pub(crate) fn poll_output(
        &mut self,
        ctx: &mut Ctx,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(usize, [u8; 4], u16)> {
        let plain_ack = matches!(
            self.resp.resp_q.front(),
            Some(RespOut::Ack { syndrome, .. }) if *syndrome == u8::from(AethSyndrome::ACK)
        );
        if plain_ack && !self.resp.ack_waited {
            if let Some(out) = self.poll_request(ctx, now, buf) {
                self.resp.ack_waited = true;
                return Some(out);
            }
        }
        self.poll_response(buf)
            .or_else(|| self.poll_request(ctx, now, buf))
    }

    /// The next responder packet (ACK/NAK, atomic ACK, read response).
    pub(crate) fn poll_response(&mut self, buf: &mut [u8]) -> Option<(usize, [u8; 4], u16)> {
        self.resp.ack_waited = false;
        let out = self.resp.resp_q.front_mut()?;
        let mtu = self.attr.path_mtu.bytes();
        let dqp = self.attr.dest_qp_num;
        let dst = self.attr.ah_attr.dgid.to_ipv4()?.octets();
        let dport = self.attr.ah_attr.dport;
        let (len, pop) = match out {
            RespOut::Ack { psn, syndrome, msn } => {
                let mut r = RocePacketRepr::new(Opcode::RC_ACKNOWLEDGE, dqp, *psn, 0).ok()?;
                r.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                let n = r.buffer_len();
                r.emit(buf.get_mut(..n)?);
                (n, true)
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                let mut r =
                    RocePacketRepr::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, dqp, *psn, 0).ok()?;
                r.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::ACK.into(),
                    msn: *msn,
                });
                r.atomic_ack = Some(*orig);
                let n = r.buffer_len();
                r.emit(buf.get_mut(..n)?);
                (n, true)
            }
            RespOut::Read {
                mr,
                off,
                remaining,
                psn,
                first,
                msn,
                ..
            } => {
                let plen = (*remaining as usize).min(mtu);
                let last = plen as u32 == *remaining;
                let op = match (*first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                };
                let mut r = RocePacketRepr::new(op, dqp, *psn, plen).ok()?;
                if r.aeth.is_some() {
                    r.aeth = Some(AethRepr {
                        syndrome: AethSyndrome::ACK.into(),
                        msn: *msn,
                    });
                }
                let n = r.buffer_len();
                if buf.len() < n {
                    return None;
                }
                r.emit(buf);
                if let Some(m) = mr {
                    m.copy_out(*off, &mut buf[r.payload_range()]);
                    self.counters.tx_copy_bytes += plen as u64;
                }
                *off += plen;
                *remaining -= plen as u32;
                *psn = psn.add(1);
                *first = false;
                (n, last)
            }
        };
        if pop {
            self.resp.resp_q.pop_front();
        }
        Some((len, dst, dport))
    }
}

/// An urgent responder packet produced while the QP went to ERR.
pub(crate) struct RespOutPkt(RespOut);

impl RespOutPkt {
    pub(crate) fn emit(&self, qp: &QpCore, buf: &mut [u8]) -> Option<(usize, [u8; 4], u16)> {
        let RespOut::Ack { psn, syndrome, msn } = self.0 else {
            return None;
        };
        let mut r =
            RocePacketRepr::new(Opcode::RC_ACKNOWLEDGE, qp.attr.dest_qp_num, psn, 0).ok()?;
        r.aeth = Some(AethRepr { syndrome, msn });
        let n = r.buffer_len();
        r.emit(buf.get_mut(..n)?);
        Some((
            n,
            qp.attr.ah_attr.dgid.to_ipv4()?.octets(),
            qp.attr.ah_attr.dport,
        ))
    }
}
