//! The requester (rxe_req.c): turns send WQEs into request packets —
//! segmentation by path MTU, PSN assignment, the in-flight window and the
//! READ/atomic limit, go-back-N repositioning after a NAK or timeout. UD sends
//! and UC messages complete here when their last packet leaves.

use super::*;

/// Requester state (rxe's `struct rxe_req_info`, plus the send queue).
pub(crate) struct Requester {
    pub(super) sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE the next packet belongs to.
    pub(super) sq_next: usize,
    /// Byte offset in that WQE of the next packet.
    pub(super) sq_next_off: u32,
    /// PSN of the next request packet.
    pub(super) psn: Psn,
    /// One past the highest PSN ever sent (responses up to it are valid).
    pub(super) max_psn: Psn,
    pub(super) noack_pkts: u32,
    /// READ/atomic requests sent and not yet answered.
    pub(super) rd_outstanding: u32,
}

impl Requester {
    pub(super) fn new(max_send_wr: usize) -> Requester {
        Requester {
            sq: VecDeque::with_capacity(max_send_wr),
            sq_next: 0,
            sq_next_off: 0,
            psn: Psn::new(0),
            max_psn: Psn::new(0),
            noack_pkts: 0,
            rd_outstanding: 0,
        }
    }
}

impl QpCore {
    pub(super) fn wqe_npkts(&self, w: &SendWqe) -> u32 {
        if w.opcode.is_atomic() {
            1
        } else {
            npkts(w.length, mtu_bytes(&self.attr))
        }
    }

    /// Go-back-N: the next packet sent will be the one with PSN `psn`.
    pub(super) fn rewind(&mut self, psn: Psn) {
        self.counters.retransmits += 1;
        self.reposition(psn);
    }

    /// Points the requester at the packet with PSN `psn` (within the started WQEs,
    /// which form a prefix of the SQ).
    pub(super) fn reposition(&mut self, psn: Psn) {
        let mtu = mtu_bytes(&self.attr) as u32;
        let started = self.req.sq.iter().take_while(|w| w.started).count();
        let idx = self
            .req
            .sq
            .iter()
            .take(started)
            .position(|w| !w.last_psn.before(psn))
            .unwrap_or(started);
        self.req.rd_outstanding = self
            .req
            .sq
            .iter()
            .take(idx)
            .filter(|w| w.opcode.is_read_or_atomic())
            .count() as u32;
        self.req.sq_next = idx;
        self.req.noack_pkts = 0;
        if idx < started {
            let w = &self.req.sq[idx];
            let k = psn.diff(w.first_psn).max(0) as u32;
            let k = if w.opcode.is_atomic() { 0 } else { k };
            self.req.sq_next_off = k * mtu;
            self.req.psn = w.first_psn.add(k);
        } else {
            self.req.sq_next_off = 0;
            self.req.psn = if psn.after(self.req.max_psn) {
                self.req.max_psn
            } else {
                psn
            };
            // WQEs beyond `started` are fresh: they take PSNs from here
        }
    }

    /// Removes the head WQE (fully acknowledged / answered) and completes it.
    pub(super) fn pop_head(&mut self, ctx: &mut Ctx, status: WcStatus) {
        let Some(w) = self.req.sq.pop_front() else {
            return;
        };
        if self.req.sq_next > 0 {
            self.req.sq_next -= 1;
            if w.opcode.is_read_or_atomic() {
                self.req.rd_outstanding = self.req.rd_outstanding.saturating_sub(1);
            }
        } else {
            self.req.sq_next_off = 0;
        }
        self.complete_send(ctx, &w, status);
    }

    pub(super) fn requester_blocked(&self, now: Instant) -> bool {
        !matches!(self.state, QpState::Rts | QpState::Sqd)
            || self.comp.rnr_until.is_some_and(|t| t > now)
            || self.req.sq_next >= self.req.sq.len()
    }

    /// Builds the next request packet into `buf` (returns its length and
    /// destination), or None. May complete WQEs (UD sends, local errors).
    pub(crate) fn poll_request(
        &mut self,
        ctx: &mut Ctx,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(usize, [u8; 4], u16)> {
        loop {
            if self.requester_blocked(now) {
                return None;
            }
            let mtu = mtu_bytes(&self.attr);
            let i = self.req.sq_next;
            let w = self.req.sq[i];
            if !w.started {
                if self.state == QpState::Sqd {
                    return None;
                }
                if w.status != WcStatus::Success {
                    // fails in order: complete and (RC) move to ERR
                    if i != 0 {
                        return None; // wait until earlier WQEs retire
                    }
                    if self.qp_type == QpType::Ud {
                        let w = self.req.sq.pop_front()?;
                        self.complete_send(ctx, &w, w.status);
                        continue;
                    }
                    self.enter_error(ctx, Some(w.status));
                    return None;
                }
                if w.flags.contains(SendFlags::FENCE) && i != 0 && self.req.rd_outstanding > 0 {
                    return None;
                }
                if w.opcode.is_read_or_atomic()
                    && self.req.rd_outstanding >= self.attr.max_rd_atomic.max(1) as u32
                {
                    return None;
                }
                let n = self.wqe_npkts(&w);
                if self.qp_type == QpType::Rc
                    && self.req.psn.add(n).diff(self.comp.comp_psn) as u32
                        > self.max_inflight.max(n)
                {
                    return None;
                }
                let w = &mut self.req.sq[i];
                w.started = true;
                w.first_psn = self.req.psn;
                w.last_psn = self.req.psn.add(n - 1);
            } else if self.qp_type == QpType::Rc
                && self.req.psn.diff(self.comp.comp_psn) as u32 >= self.max_inflight
            {
                return None;
            }
            let w = self.req.sq[i];
            if self.qp_type == QpType::Ud {
                let (ah, dqpn, qkey) = w.ud?;
                let op = if w.opcode == WrOpcode::SendWithImm {
                    Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
                } else {
                    Opcode::UD_SEND_ONLY
                };
                let mut r = RocePacketRepr::new(op, dqpn, self.req.psn, w.length as usize).ok()?;
                r.bth.se = w.flags.contains(SendFlags::SOLICITED);
                r.deth = Some(DethRepr {
                    qkey: if qkey & 0x8000_0000 != 0 {
                        self.attr.qkey
                    } else {
                        qkey
                    },
                    src_qp: self.qpn,
                });
                if r.imm.is_some() {
                    r.imm = Some(w.imm);
                }
                let len = self.emit_req(ctx, &r, &w, 0, buf)?;
                self.req.psn = self.req.psn.add(1);
                let w = self.req.sq.pop_front()?;
                self.complete_send(ctx, &w, WcStatus::Success);
                return Some((len, ah.ip.octets(), ah.dport));
            }
            // RC and UC (same segmentation; UC has no READ/atomics, no AckReq,
            // and a WQE completes once its last packet is out)
            let uc = self.qp_type == QpType::Uc;
            let off = self.req.sq_next_off as usize;
            let total = w.length as usize;
            let first = off == 0;
            let (op, plen, done) = match w.opcode {
                WrOpcode::RdmaRead => (Opcode::RC_RDMA_READ_REQUEST, 0, true),
                WrOpcode::AtomicCmpAndSwp => (Opcode::RC_COMPARE_SWAP, 0, true),
                WrOpcode::AtomicFetchAndAdd => (Opcode::RC_FETCH_ADD, 0, true),
                o => {
                    let plen = (total - off).min(mtu);
                    let last = off + plen >= total;
                    let imm = matches!(o, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
                    let send = matches!(
                        o,
                        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
                    );
                    let op = match (send, first, last, imm) {
                        // SEND with invalidate: the ONLY/LAST packets carry the IETH
                        (true, true, true, _) if o == WrOpcode::SendWithInv => {
                            Opcode::RC_SEND_ONLY_WITH_INVALIDATE
                        }
                        (true, false, true, _) if o == WrOpcode::SendWithInv => {
                            Opcode::RC_SEND_LAST_WITH_INVALIDATE
                        }
                        (true, true, true, false) => Opcode::RC_SEND_ONLY,
                        (true, true, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                        (true, true, false, _) => Opcode::RC_SEND_FIRST,
                        (true, false, false, _) => Opcode::RC_SEND_MIDDLE,
                        (true, false, true, false) => Opcode::RC_SEND_LAST,
                        (true, false, true, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                        (false, true, true, false) => Opcode::RC_RDMA_WRITE_ONLY,
                        (false, true, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                        (false, true, false, _) => Opcode::RC_RDMA_WRITE_FIRST,
                        (false, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
                        (false, false, true, false) => Opcode::RC_RDMA_WRITE_LAST,
                        (false, false, true, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    };
                    (op, plen, last)
                }
            };
            // IBA 9.2: the opcode's top 3 bits name the transport (RC 000, UC 001)
            let op = if uc { Opcode(0x20 | (op.0 & 0x1f)) } else { op };
            let mut r = RocePacketRepr::new(op, self.attr.dest_qp_num, self.req.psn, plen).ok()?;
            let info = op.info()?;
            if let Some(reth) = r.reth.as_mut() {
                // READ retried from the middle asks for the rest only
                *reth = RethRepr {
                    va: w.remote_addr + off as u64,
                    rkey: w.rkey,
                    dma_len: (total - off) as u32,
                };
                if w.opcode != WrOpcode::RdmaRead {
                    reth.dma_len = w.length;
                }
            }
            if let Some(a) = r.atomic_eth.as_mut() {
                a.va = w.remote_addr;
                a.rkey = w.rkey;
                a.swap_add = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                    w.swap
                } else {
                    w.compare_add
                };
                a.compare = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                    w.compare_add
                } else {
                    0
                };
            }
            if r.imm.is_some() {
                r.imm = Some(w.imm);
            }
            if r.ieth.is_some() {
                r.ieth = Some(w.imm);
            }
            r.bth.se = info.has(OpFlags::LAST) && w.flags.contains(SendFlags::SOLICITED);
            if !uc {
                // UC: never (as rxe since "Don't set BTH_ACK_MASK for UC or UD QPs")
                self.req.noack_pkts += 1;
                r.bth.ack_req = done || self.req.noack_pkts >= MAX_PKT_PER_ACK;
                if r.bth.ack_req {
                    self.req.noack_pkts = 0;
                }
            }
            let len = self.emit_req(ctx, &r, &w, off, buf)?;
            if w.opcode.is_read_or_atomic() {
                self.req.psn = w.last_psn.add(1);
                self.req.rd_outstanding += 1;
            } else {
                self.req.psn = self.req.psn.add(1);
            }
            if done {
                self.req.sq_next += 1;
                self.req.sq_next_off = 0;
            } else {
                self.req.sq_next_off += plen as u32;
            }
            if self.req.psn.after(self.req.max_psn) {
                self.req.max_psn = self.req.psn;
            }
            if uc {
                // nothing to wait for: complete when the last packet leaves
                // (rxe_xmit_packet: wqe_state_done for non-RC at END)
                self.comp.comp_psn = self.req.psn;
                if done {
                    self.pop_head(ctx, WcStatus::Success);
                }
            } else if self.comp.retry_deadline.is_none() {
                self.comp.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
            }
            let ip = self.attr.ah_attr.dgid.to_ipv4()?.octets();
            return Some((len, ip, self.attr.ah_attr.dport));
        }
    }

    pub(super) fn emit_req(
        &mut self,
        ctx: &mut Ctx,
        r: &RocePacketRepr,
        w: &SendWqe,
        off: usize,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = r.buffer_len();
        if buf.len() < n {
            return None;
        }
        r.emit(buf);
        if r.payload_len > 0 {
            self.counters.tx_copy_bytes += r.payload_len as u64;
            let dst = &mut buf[r.payload_range()];
            if w.inline_len > 0 {
                dst.copy_from_slice(&w.inline[off..off + r.payload_len]);
            } else if !w.sgl.copy_out(ctx.mrs, off, dst) {
                // MR deregistered under us: send zeros, the WQE will still complete
                ctx.counters.local_sgl_errors += 1;
            }
        }
        Some(n)
    }
}
