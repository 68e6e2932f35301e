//! The completer (rxe_comp.c): ACKs, NAKs and READ/atomic responses ->
//! send completions in order; the retry counter, RNR back-off and the
//! retransmit timer.

use super::*;

/// Completer state (rxe's `struct rxe_comp_info`).
#[derive(Default)]
pub(crate) struct Completer {
    /// The oldest PSN not yet acknowledged.
    pub(super) comp_psn: Psn,
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    pub(super) retry_deadline: Option<Instant>,
    pub(super) rnr_until: Option<Instant>,
    /// The PSN the requester was last rewound to (one retry per NAK'd PSN).
    pub(super) rewound_at: Option<Psn>,
}

impl QpCore {
    pub(super) fn complete_send(&mut self, ctx: &mut Ctx, w: &SendWqe, status: WcStatus) {
        let signaled = self.sq_sig_all || w.flags.contains(SendFlags::SIGNALED);
        if status == WcStatus::Success && !signaled {
            return;
        }
        let wc = Wc {
            wr_id: w.wr_id,
            status,
            opcode: w.opcode.into(),
            byte_len: if w.opcode.is_read_or_atomic() {
                w.length
            } else {
                0
            },
            qp_num: self.qpn,
            ..Default::default()
        };
        ctx.push_wc(self.send_cq, wc);
    }

    pub(super) fn arm_retry(&mut self, now: Instant) {
        if self.comp.comp_psn != self.req.psn {
            self.comp.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
        } else {
            self.comp.retry_deadline = None;
        }
    }

    /// Retires (completes) WQEs acknowledged up to and including `psn`. Returns
    /// false if a READ/atomic was implicitly acknowledged without its response.
    pub(super) fn retire_upto(&mut self, ctx: &mut Ctx, now: Instant, psn: Psn) -> bool {
        if psn.diff(self.req.max_psn) >= 0 {
            return true; // acks something never sent: ignore
        }
        let mut progress = false;
        let mut ok = true;
        let mut np = psn.add(1);
        while let Some(w) = self.req.sq.front() {
            if !w.started || w.last_psn.after(psn) {
                break;
            }
            if w.opcode.is_read_or_atomic() {
                // acknowledged past an unanswered READ/atomic: its responses
                // were lost; the completer may only advance up to it
                ok = false;
                np = w.first_psn;
                break;
            }
            self.pop_head(ctx, WcStatus::Success);
            progress = true;
        }
        if np.after(self.comp.comp_psn) {
            self.comp.comp_psn = np;
            progress = true;
        }
        if self.comp.comp_psn.after(self.req.psn) {
            let c = self.comp.comp_psn;
            self.reposition(c);
        }
        if progress {
            self.on_progress(now);
        }
        ok
    }

    pub(super) fn on_progress(&mut self, now: Instant) {
        self.comp.retry_left = self.attr.retry_cnt;
        self.comp.rnr_left = self.attr.rnr_retry;
        self.comp.rewound_at = None;
        self.arm_retry(now);
    }

    pub(super) fn retry(&mut self, ctx: &mut Ctx, psn: Psn) {
        if self.comp.rewound_at == Some(psn) {
            return;
        }
        if self.comp.retry_left == 0 {
            self.enter_error(ctx, Some(WcStatus::RetryExcErr));
            return;
        }
        self.comp.retry_left -= 1;
        self.comp.rewound_at = Some(psn);
        self.rewind(psn);
    }

    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx,
        now: Instant,
        r: &RocePacketRepr,
        payload: &[u8],
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let Some(info) = r.info() else { return };
        let psn = r.bth.psn;
        if info.has(OpFlags::READ) || info.has(OpFlags::ATOMIC) {
            // read response / atomic ack: must be the next expected PSN
            let d = psn.diff(self.comp.comp_psn);
            if d < 0 || psn.diff(self.req.max_psn) >= 0 {
                return; // duplicate or bogus
            }
            if d > 0 {
                // a response went missing: go back
                let c = self.comp.comp_psn;
                self.retry(ctx, c);
                return;
            }
            // implicitly acks everything before it
            if !self.retire_upto(ctx, now, psn.sub(1)) {
                // an earlier READ/atomic not answered yet
                let c = self.comp.comp_psn;
                self.retry(ctx, c);
                return;
            }
            let Some(w) = self.req.sq.front().copied() else {
                return;
            };
            if !w.started || w.first_psn.after(psn) || w.last_psn.before(psn) {
                return;
            }
            if info.has(OpFlags::ATOMIC) {
                if !w.opcode.is_atomic() {
                    return;
                }
                let orig = r.atomic_ack.unwrap_or(0).to_ne_bytes();
                if !w.sgl.copy_in(ctx.mrs, 0, &orig) {
                    ctx.counters.local_sgl_errors += 1;
                }
            } else {
                if w.opcode != WrOpcode::RdmaRead {
                    return;
                }
                let mtu = mtu_bytes(&self.attr);
                let off = psn.diff(w.first_psn) as usize * mtu;
                let last = info.has(OpFlags::LAST);
                let exp = if last {
                    w.length as usize - off.min(w.length as usize)
                } else {
                    mtu
                };
                if payload.len() != exp {
                    self.enter_error(ctx, Some(WcStatus::BadRespErr));
                    return;
                }
                self.counters.rx_copy_bytes += payload.len() as u64;
                if !w.sgl.copy_in(ctx.mrs, off, payload) {
                    self.enter_error(ctx, Some(WcStatus::LocProtErr));
                    return;
                }
                if !last {
                    self.comp.comp_psn = psn.add(1);
                    if self.comp.comp_psn.after(self.req.psn) {
                        let c = self.comp.comp_psn;
                        self.reposition(c);
                    }
                    self.on_progress(now);
                    return;
                }
            }
            self.pop_head(ctx, WcStatus::Success);
            self.comp.comp_psn = psn.add(1);
            if self.comp.comp_psn.after(self.req.psn) {
                let c = self.comp.comp_psn;
                self.reposition(c);
            }
            self.on_progress(now);
            return;
        }
        // ACK / NAK
        let Some(aeth) = r.aeth else { return };
        match AethSyndrome::from(aeth.syndrome) {
            AethSyndrome::Ack { .. } => {
                if !self.retire_upto(ctx, now, psn) {
                    let c = self.comp.comp_psn;
                    self.retry(ctx, c);
                }
            }
            AethSyndrome::RnrNak { timer } => {
                if psn.before(self.comp.comp_psn) || psn.diff(self.req.max_psn) >= 0 {
                    return;
                }
                self.counters.rnr_naks_rcvd += 1;
                let psn = if self.retire_upto(ctx, now, psn.sub(1)) {
                    psn
                } else {
                    self.comp.comp_psn
                };
                if self.attr.rnr_retry != 7 {
                    if self.comp.rnr_left == 0 {
                        self.enter_error(ctx, Some(WcStatus::RnrRetryExcErr));
                        return;
                    }
                    self.comp.rnr_left -= 1;
                }
                self.rewind(psn);
                self.comp.rnr_until =
                    Some(now + Duration::from_micros(RNR_TIMER_US[timer as usize & 31] as u64));
                self.comp.retry_deadline = None;
            }
            AethSyndrome::Nak(code) => {
                if psn.before(self.comp.comp_psn) || psn.diff(self.req.max_psn) >= 0 {
                    return;
                }
                let ok = self.retire_upto(ctx, now, psn.sub(1));
                let st = match code {
                    NakCode::PsnSeqError => {
                        self.counters.seq_naks_rcvd += 1;
                        // an unanswered READ/atomic before the NAK'd PSN goes first
                        let target = if ok { psn } else { self.comp.comp_psn };
                        self.retry(ctx, target);
                        return;
                    }
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                    NakCode::Unknown(_) => WcStatus::BadRespErr,
                };
                self.enter_error(ctx, Some(st));
            }
            AethSyndrome::Reserved(_) => {}
        }
    }
}
