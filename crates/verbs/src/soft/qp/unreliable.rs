//! The receive side of the unreliable transports: UC (rxe_resp.c's UC paths:
//! no ACKs, a message with a missing packet is dropped whole) and UD (one
//! packet per message, Q_Key check, GRH slot).

use super::responder::{RecvInProgress, WriteInProgress};
use super::*;

impl QpCore {
    /// The UC responder (rxe's `check_psn`/`check_op_seq` for UC and the IBA
    /// class D/E error handling): never answers. A PSN gap, a missing receive
    /// WQE, a bad rkey or length drops the rest of the message; the next
    /// FIRST/ONLY packet starts a new one, whatever its PSN. A message whose
    /// LAST was lost is abandoned when the next FIRST/ONLY arrives: its
    /// receive WQE (non-SRQ) is reused from the start for the next message.
    pub(super) fn uc_receive(
        &mut self,
        ctx: &mut Ctx,
        r: &RocePacketRepr,
        info: &OpInfo,
        payload: &[u8],
    ) {
        let psn = r.bth.psn;
        let first = info.has(OpFlags::FIRST);
        let last = info.has(OpFlags::LAST);
        if self.resp.drop_msg || psn != self.resp.epsn {
            if !first {
                self.uc_drop(ctx);
                return;
            }
            self.resp.drop_msg = false;
        }
        let send = info.has(OpFlags::SEND);
        let in_msg = self.resp.cur_recv.is_some() || self.resp.cur_write.is_some();
        if first {
            if in_msg {
                // the LAST of the message in progress went missing
                self.uc_abandon(ctx);
            }
        } else if !(send && self.resp.cur_recv.is_some() || !send && self.resp.cur_write.is_some())
        {
            // MIDDLE/LAST without its FIRST (or of another kind)
            self.uc_drop(ctx);
            return;
        }
        let mtu = mtu_bytes(&self.attr);
        if send {
            if first && !self.uc_begin_recv(ctx) {
                return;
            }
            let Some(cur) = self.resp.cur_recv.as_mut() else {
                return;
            };
            if cur.off + payload.len() > cur.wqe.sgl.total_len() as usize
                || !last && payload.len() != mtu
            {
                self.uc_drop(ctx);
                return;
            }
            self.counters.rx_copy_bytes += payload.len() as u64;
            if !cur.wqe.sgl.copy_in(ctx.mrs, cur.off, payload) {
                // the receive WQE names memory we cannot write: as RC
                let wr_id = cur.wqe.wr_id;
                self.resp.cur_recv = None;
                self.fail_recv(ctx, wr_id, WcStatus::LocProtErr, 0);
                self.enter_error(ctx, None);
                return;
            }
            cur.off += payload.len();
            self.resp.epsn = psn.add(1);
            if last {
                let Some(c) = self.resp.cur_recv.take() else {
                    return;
                };
                self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::Recv, c.off as u32, r);
            }
            return;
        }
        // RDMA WRITE
        if first {
            let Some(reth) = r.reth else { return };
            let w = if reth.dma_len == 0 {
                Some((ctx.dummy_mr.clone(), 0))
            } else {
                self.check_rkey(
                    ctx,
                    reth.rkey,
                    reth.va,
                    reth.dma_len,
                    AccessFlags::REMOTE_WRITE,
                )
            };
            let Some((mr, off)) = w else {
                // rkey violation on UC: the message is silently dropped
                self.uc_drop(ctx);
                return;
            };
            self.resp.cur_write = Some(WriteInProgress {
                mr,
                off,
                remaining: reth.dma_len,
                total: reth.dma_len,
            });
        }
        let bad_len = match self.resp.cur_write.as_ref() {
            Some(w) => {
                payload.len() as u32 > w.remaining
                    || (!last && payload.len() != mtu)
                    || (last && payload.len() as u32 != w.remaining)
            }
            None => return,
        };
        if bad_len {
            self.uc_drop(ctx);
            return;
        }
        // checked before the data lands, as rxe's check_resource
        if info.has(OpFlags::RWR) && !self.uc_begin_recv(ctx) {
            return;
        }
        let Some(w) = self.resp.cur_write.as_mut() else {
            return;
        };
        if !payload.is_empty() {
            w.mr.copy_in(w.off, payload);
            self.counters.rx_copy_bytes += payload.len() as u64;
        }
        w.off += payload.len();
        w.remaining -= payload.len() as u32;
        self.resp.epsn = psn.add(1);
        if last {
            let total = w.total;
            self.resp.cur_write = None;
            if let Some(c) = self.resp.cur_recv.take() {
                self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::RecvRdmaWithImm, total, r);
            }
        }
    }

    /// UC: drop this packet and the rest of its message (abandoning a
    /// message in progress).
    pub(super) fn uc_drop(&mut self, ctx: &mut Ctx) {
        self.counters.uc_drops += 1;
        self.resp.drop_msg = true;
        if self.resp.cur_recv.is_some() || self.resp.cur_write.is_some() {
            self.uc_abandon(ctx);
        }
    }

    /// UC: takes the receive WQE a message consumes into `cur_recv`; without one
    /// the message is dropped (no RNR NAK on UC: it is lost, class D) and this
    /// returns false.
    pub(super) fn uc_begin_recv(&mut self, ctx: &mut Ctx) -> bool {
        match self.take_recv_wqe(ctx) {
            Some((wqe, from_srq)) => {
                self.resp.cur_recv = Some(RecvInProgress {
                    wqe,
                    off: 0,
                    from_srq,
                });
                true
            }
            None => {
                self.uc_drop(ctx);
                false
            }
        }
    }

    /// UC: forget the message in progress. Its receive WQE goes back to the
    /// head of the RQ (rxe resets it for the next message); one from an SRQ
    /// cannot, and completes with REM_INV_REQ_ERR (class E, as rxe).
    pub(super) fn uc_abandon(&mut self, ctx: &mut Ctx) {
        self.counters.uc_torn += 1;
        self.resp.cur_write = None;
        if let Some(c) = self.resp.cur_recv.take() {
            if c.from_srq {
                self.fail_recv(
                    ctx,
                    c.wqe.wr_id,
                    WcStatus::RemInvReqErr,
                    self.attr.dest_qp_num,
                );
            } else {
                self.resp.rq.push_front(c.wqe);
            }
        }
    }

    pub(super) fn ud_receive(
        &mut self,
        ctx: &mut Ctx,
        r: &RocePacketRepr,
        payload: &[u8],
        src: [u8; 4],
    ) {
        let Some(deth) = r.deth else { return };
        if deth.qkey != self.attr.qkey {
            ctx.counters.drop_qkey += 1;
            return;
        }
        let Some((w, _)) = self.take_recv_wqe(ctx) else {
            self.counters.ud_drops += 1;
            return;
        };
        // 40-byte GRH slot: for RoCEv2/IPv4, 20 zero bytes then the IPv4 header (as rxe)
        let mut grh = [0u8; 40];
        let ip = &mut grh[20..];
        ip[0] = 0x45;
        let tot = (20 + 8 + payload.len() + 16) as u16;
        ip[2..4].copy_from_slice(&tot.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&ctx.ip);
        let need = 40 + payload.len();
        let mut fl = WcFlags::GRH;
        if r.imm.is_some() {
            fl |= WcFlags::WITH_IMM;
        }
        if r.bth.se {
            fl |= WcFlags::SOLICITED;
        }
        if (need as u64) > w.sgl.total_len() {
            self.fail_recv(ctx, w.wr_id, WcStatus::LocLenErr, deth.src_qp);
            return;
        }
        self.counters.rx_copy_bytes += payload.len() as u64;
        if !w.sgl.copy_in(ctx.mrs, 0, &grh) || !w.sgl.copy_in(ctx.mrs, 40, payload) {
            self.fail_recv(ctx, w.wr_id, WcStatus::LocProtErr, deth.src_qp);
            return;
        }
        self.push_recv_wc(
            ctx,
            w.wr_id,
            WcStatus::Success,
            WcOpcode::Recv,
            need as u32,
            r.imm.unwrap_or(0),
            fl,
            deth.src_qp,
        );
    }
}
