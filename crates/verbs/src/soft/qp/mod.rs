//! One queue pair, as plain state driven by the engine. Sans-IO: time is an
//! argument; output is drained by the engine.
//!
//! The QP's common part lives here (attributes and the `modify_qp` state machine,
//! posting, the move to ERR, timers); the engines are split as rxe splits them,
//! each file with its own state struct:
//!
//! * `requester` (rxe_req.c): send WQEs -> request packets (segmentation,
//!   PSNs, the in-flight window, go-back-N repositioning);
//! * `completer` (rxe_comp.c): ACKs, NAKs and READ/atomic responses -> send
//!   completions, retry and RNR back-off;
//! * `responder` (rxe_resp.c): RC request packets -> memory effects, receive
//!   completions, ACK/NAK/READ/atomic responses, duplicate handling;
//! * `unreliable`: the receive side of UC and UD (no ACKs, no retries).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::roce::{
    AethRepr, AethSyndrome, DethRepr, NakCode, OpFlags, OpInfo, Opcode, Psn, RethRepr,
    RocePacketRepr,
};

use super::sgl::{SgList, MAX_INLINE};
use super::shared::{Ctx, RecvWqe};
use crate::soft::mr::MrInner;
use crate::types::*;
use crate::Error;

/// How many request packets the requester may have unacknowledged.
pub const DEFAULT_MAX_INFLIGHT: u32 = 512;
/// rxe's RXE_MAX_PKT_PER_ACK: ask for an ACK at least this often.
const MAX_PKT_PER_ACK: u32 = 64;
/// Atomic results kept for duplicate replay.
const ATOMIC_HISTORY: usize = 16;

/// IBA "RNR NAK timer field" encoding (microseconds), index = 5-bit code.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// rxe's UDP source port for a QP: `RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff)`.
pub fn udp_sport(qpn: u32) -> u16 {
    0xc000 + ((qpn.wrapping_mul(0x61c8_8647) >> (32 - 14)) & 0x3fff) as u16
}

/// Local ACK timeout: 4.096 µs * 2^t (t = 0: none).
pub fn ack_timeout(t: u8) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

#[derive(Clone, Copy)]
pub(crate) struct SendWqe {
    wr_id: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    sgl: SgList,
    inline_len: u16,
    inline: [u8; MAX_INLINE],
    length: u32,
    remote_addr: u64,
    rkey: u32,
    imm: u32,
    compare_add: u64,
    swap: u64,
    ud: Option<(crate::types::Ah, u32, u32)>,
    started: bool,
    first_psn: Psn,
    last_psn: Psn,
    /// Set at post time when the WQE is already known to fail (completed in order).
    status: WcStatus,
}

/// Per-QP counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct QpCounters {
    pub retransmits: u64,
    pub timeouts: u64,
    pub rnr_naks_rcvd: u64,
    pub seq_naks_rcvd: u64,
    pub rnr_naks_sent: u64,
    pub seq_naks_sent: u64,
    pub dup_requests: u64,
    pub ud_drops: u64,
    /// UC responder: packets dropped (PSN gap, rest of a message being
    /// dropped, no receive WQE, remote access or length error).
    pub uc_drops: u64,
    /// UC responder: messages abandoned after their FIRST was accepted (a
    /// later packet was missing or bad); never completed.
    pub uc_torn: u64,
    /// Payload bytes the CPU copied from registered memory (or from the
    /// caller's buffer into a WQE's inline area, then from there) into packets,
    /// and from packets into registered memory.
    pub tx_copy_bytes: u64,
    pub rx_copy_bytes: u64,
}

impl QpCounters {
    /// Adds `o` field by field.
    pub fn add(&mut self, o: &QpCounters) {
        self.retransmits += o.retransmits;
        self.timeouts += o.timeouts;
        self.rnr_naks_rcvd += o.rnr_naks_rcvd;
        self.seq_naks_rcvd += o.seq_naks_rcvd;
        self.rnr_naks_sent += o.rnr_naks_sent;
        self.seq_naks_sent += o.seq_naks_sent;
        self.dup_requests += o.dup_requests;
        self.ud_drops += o.ud_drops;
        self.uc_drops += o.uc_drops;
        self.uc_torn += o.uc_torn;
        self.tx_copy_bytes += o.tx_copy_bytes;
        self.rx_copy_bytes += o.rx_copy_bytes;
    }
}

pub struct QpCore {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) state: QpState,
    pub(crate) pd: u32,
    pub(crate) send_cq: usize,
    pub(crate) recv_cq: usize,
    pub(crate) srq: Option<usize>,
    pub(crate) sq_sig_all: bool,
    pub(crate) attr: QpAttr,
    pub(crate) max_inflight: u32,
    /// UDP source port of this QP's packets (ECMP entropy, as rxe).
    pub(crate) sport: u16,
    pub counters: QpCounters,
    /// rxe's `qp->req`: work requests -> request packets.
    pub(super) req: Requester,
    /// rxe's `qp->comp`: responses -> send completions, retry, RNR back-off.
    pub(super) comp: Completer,
    /// rxe's `qp->resp` (and the receive queue): request packets -> memory
    /// effects, receive completions, ACK/NAK/READ responses.
    pub(super) resp: Responder,
}

fn mtu_bytes(a: &QpAttr) -> usize {
    a.path_mtu.bytes()
}

fn npkts(len: u32, mtu: usize) -> u32 {
    (len as usize).div_ceil(mtu).max(1) as u32
}

type Masks = crate::Result<(QpAttrMask, QpAttrMask)>;

/// Required and optional attributes of an RC transition (the kernel's
/// `qp_state_table`, RC column).
fn rc_masks(cur: QpState, next: QpState) -> Masks {
    use QpAttrMask as M;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    Ok(match (cur, next) {
        (_, Reset) | (_, QpState::Err) => (M::empty(), M::empty()),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, M::empty()),
        (Init, Init) => (M::empty(), M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (
            M::empty(),
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
        ),
        (Rts, Sqd) => (M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            M::empty(),
            M::AV
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC,
        ),
        _ => return Err(Error::Inval),
    })
}

/// The UC column of the kernel's `qp_state_table`: like RC without anything
/// about acknowledgements (no TIMEOUT, RETRY_CNT, RNR_RETRY, MIN_RNR_TIMER,
/// MAX_QP_RD_ATOMIC, MAX_DEST_RD_ATOMIC), so RTR->RTS needs only SQ_PSN.
fn uc_masks(cur: QpState, next: QpState) -> Masks {
    use QpAttrMask as M;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    Ok(match (cur, next) {
        (_, Reset) | (_, QpState::Err) => (M::empty(), M::empty()),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, M::empty()),
        (Init, Init) => (M::empty(), M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::SQ_PSN,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            M::empty(),
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
        ),
        (Sqe, Rts) => (M::empty(), M::CUR_STATE | M::ACCESS_FLAGS),
        (Rts, Sqd) => (M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            M::empty(),
            M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
        ),
        _ => return Err(Error::Inval),
    })
}

/// The UD column of the kernel's `qp_state_table`.
fn ud_masks(cur: QpState, next: QpState) -> Masks {
    use QpAttrMask as M;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    Ok(match (cur, next) {
        (_, Reset) | (_, QpState::Err) => (M::empty(), M::empty()),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::QKEY, M::empty()),
        (Init, Init) => (M::empty(), M::PKEY_INDEX | M::PORT | M::QKEY),
        (Init, Rtr) => (M::empty(), M::PKEY_INDEX | M::QKEY),
        (Rtr, Rts) => (M::SQ_PSN, M::CUR_STATE | M::QKEY),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (M::empty(), M::CUR_STATE | M::QKEY),
        (Rts, Sqd) => (M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (M::empty(), M::PKEY_INDEX | M::QKEY),
        _ => return Err(Error::Inval),
    })
}

mod completer;
mod requester;
mod responder;
mod unreliable;

use completer::Completer;
use requester::Requester;
pub(crate) use responder::RespOutPkt;
use responder::Responder;

impl QpCore {
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        pd: u32,
        send_cq: usize,
        recv_cq: usize,
        srq: Option<usize>,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> QpCore {
        QpCore {
            qpn,
            qp_type,
            state: QpState::Reset,
            pd,
            send_cq,
            recv_cq,
            srq,
            sq_sig_all,
            attr: QpAttr {
                cap,
                path_mtu: Mtu::Mtu1024,
                ..Default::default()
            },
            max_inflight: DEFAULT_MAX_INFLIGHT,
            sport: udp_sport(qpn),
            counters: QpCounters::default(),
            req: Requester::new(cap.max_send_wr as usize),
            comp: Completer::default(),
            resp: Responder::new(cap.max_recv_wr as usize),
        }
    }

    /// `ibv_modify_qp`: checks the transition and the attribute mask as the
    /// kernel's `ib_modify_qp_is_ok` does, then applies.
    pub(crate) fn modify(
        &mut self,
        ctx: &mut Ctx,
        a: &QpAttr,
        mask: QpAttrMask,
    ) -> crate::Result<()> {
        use QpAttrMask as M;
        use QpState::Reset;
        let cur = if mask.contains(M::CUR_STATE) {
            a.cur_qp_state
        } else {
            self.state
        };
        if cur != self.state {
            return Err(Error::Inval);
        }
        let next = if mask.contains(M::STATE) {
            a.qp_state
        } else {
            cur
        };
        let (req, opt): (M, M) = match self.qp_type {
            QpType::Rc => rc_masks(cur, next)?,
            QpType::Uc => uc_masks(cur, next)?,
            QpType::Ud => ud_masks(cur, next)?,
        };
        let given = mask - M::STATE;
        if !given.contains(req) || !(given - M::CUR_STATE).difference(req | opt).is_empty() {
            return Err(Error::Inval);
        }
        // value checks
        if mask.contains(M::PORT) && a.port_num != 1 {
            return Err(Error::Inval);
        }
        if mask.contains(M::PKEY_INDEX) && a.pkey_index != 0 {
            return Err(Error::Inval);
        }
        if mask.contains(M::AV) && a.ah_attr.dgid.to_ipv4().is_none() {
            return Err(Error::Inval);
        }
        if mask.contains(M::RETRY_CNT) && a.retry_cnt > 7
            || mask.contains(M::RNR_RETRY) && a.rnr_retry > 7
        {
            return Err(Error::Inval);
        }
        if mask.contains(M::TIMEOUT) && a.timeout > 31
            || mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31
        {
            return Err(Error::Inval);
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) && a.max_rd_atomic > 128
            || mask.contains(M::MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > 128
        {
            return Err(Error::Inval);
        }
        // apply
        let t = &mut self.attr;
        if mask.contains(M::ACCESS_FLAGS) {
            t.qp_access_flags = a.qp_access_flags;
        }
        if mask.contains(M::PKEY_INDEX) {
            t.pkey_index = a.pkey_index;
        }
        if mask.contains(M::PORT) {
            t.port_num = a.port_num;
        }
        if mask.contains(M::QKEY) {
            t.qkey = a.qkey;
        }
        if mask.contains(M::AV) {
            t.ah_attr = a.ah_attr;
        }
        if mask.contains(M::PATH_MTU) {
            t.path_mtu = a.path_mtu.min(ctx.port_mtu);
        }
        if mask.contains(M::DEST_QPN) {
            t.dest_qp_num = a.dest_qp_num & 0xff_ffff;
        }
        if mask.contains(M::RQ_PSN) {
            t.rq_psn = a.rq_psn & 0xff_ffff;
            self.resp.epsn = Psn::new(a.rq_psn);
        }
        if mask.contains(M::SQ_PSN) {
            t.sq_psn = a.sq_psn & 0xff_ffff;
            self.req.psn = Psn::new(a.sq_psn);
            self.comp.comp_psn = self.req.psn;
            self.req.max_psn = self.req.psn;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            t.max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            t.max_rd_atomic = a.max_rd_atomic;
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            t.min_rnr_timer = a.min_rnr_timer;
        }
        if mask.contains(M::TIMEOUT) {
            t.timeout = a.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            t.retry_cnt = a.retry_cnt;
            self.comp.retry_left = a.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            t.rnr_retry = a.rnr_retry;
            self.comp.rnr_left = a.rnr_retry;
        }
        match next {
            Reset => self.reset(ctx),
            QpState::Err if self.state != QpState::Err => self.enter_error(ctx, None),
            _ => {}
        }
        tracing::debug!(target: "roce", qpn = self.qpn, from = ?cur, to = ?next, ?mask, "modify_qp");
        self.state = next;
        self.attr.qp_state = next;
        if self.qp_type == QpType::Ud {
            self.attr.path_mtu = ctx.port_mtu;
        }
        Ok(())
    }

    fn reset(&mut self, _ctx: &mut Ctx) {
        self.req.sq.clear();
        self.resp.rq.clear();
        self.req.sq_next = 0;
        self.req.sq_next_off = 0;
        self.req.rd_outstanding = 0;
        self.comp.retry_deadline = None;
        self.comp.rnr_until = None;
        self.resp.cur_recv = None;
        self.resp.cur_write = None;
        self.resp.resp_q.clear();
        self.resp.atomic_hist.clear();
        self.resp.read_hist.clear();
        self.resp.msn = 0;
        self.resp.nak_sent = false;
        self.comp.rewound_at = None;
        self.resp.drop_msg = false;
    }

    pub(crate) fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.sq_draining = self.state == QpState::Sqd && self.req.sq_next > 0;
        a
    }

    /// `ibv_post_send` for one WR (the caller reports the failing index).
    pub(crate) fn post_send(&mut self, ctx: &mut Ctx, wr: &SendWr) -> crate::Result<()> {
        match self.state {
            QpState::Reset | QpState::Init | QpState::Rtr => return Err(Error::Inval),
            _ => {}
        }
        if self.req.sq.len() >= self.attr.cap.max_send_wr as usize {
            return Err(Error::NoMem);
        }
        if wr.sg_list.len() > self.attr.cap.max_send_sge as usize {
            return Err(Error::Inval);
        }
        let sgl = SgList::from_slice(wr.sg_list).ok_or(Error::Inval)?;
        let length = sgl.total_len();
        if length > u32::MAX as u64 {
            return Err(Error::Inval);
        }
        let mut w = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.send_flags,
            sgl,
            inline_len: 0,
            inline: [0; MAX_INLINE],
            length: length as u32,
            remote_addr: 0,
            rkey: 0,
            imm: wr.imm_data,
            compare_add: 0,
            swap: 0,
            ud: None,
            started: false,
            first_psn: Psn::new(0),
            last_psn: Psn::new(0),
            status: WcStatus::Success,
        };
        match (self.qp_type, wr.opcode, wr.wr) {
            (
                QpType::Ud,
                WrOpcode::Send | WrOpcode::SendWithImm,
                WrDetail::Ud {
                    ah,
                    remote_qpn,
                    remote_qkey,
                },
            ) => {
                w.ud = Some((ah, remote_qpn & 0xff_ffff, remote_qkey));
                if length as usize > self.attr.path_mtu.bytes() {
                    w.status = WcStatus::LocLenErr;
                }
            }
            (QpType::Ud, _, _) => return Err(Error::Inval),
            (QpType::Rc | QpType::Uc, WrOpcode::Send | WrOpcode::SendWithImm, _) => {}
            (QpType::Rc, WrOpcode::SendWithInv, _) => {}
            (
                QpType::Rc,
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead,
                WrDetail::Rdma { remote_addr, rkey },
            )
            | (
                QpType::Uc,
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm,
                WrDetail::Rdma { remote_addr, rkey },
            ) => {
                w.remote_addr = remote_addr;
                w.rkey = rkey;
            }
            // UC has no READ or atomics: EINVAL as the kernel's rxe_post_send
            // (validate_send_wr: no opcode mask for the QP type)
            (
                QpType::Rc,
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd,
                WrDetail::Atomic {
                    remote_addr,
                    compare_add,
                    swap,
                    rkey,
                },
            ) => {
                if length != 8 || wr.sg_list.len() != 1 {
                    return Err(Error::Inval);
                }
                w.remote_addr = remote_addr;
                w.rkey = rkey;
                w.compare_add = compare_add;
                w.swap = swap;
            }
            _ => return Err(Error::Inval),
        }
        if wr.send_flags.contains(SendFlags::INLINE) {
            if wr.opcode.is_read_or_atomic() {
                return Err(Error::Inval);
            }
            if length as usize > (self.attr.cap.max_inline_data as usize).min(MAX_INLINE) {
                return Err(Error::Inval);
            }
            self.counters.tx_copy_bytes += length;
            if !sgl.copy_out(ctx.mrs, 0, &mut w.inline[..length as usize]) {
                // inline data need not be registered: the SGE addresses are read
                // from our own MRs only (we cannot read arbitrary process memory safely)
                return Err(Error::Inval);
            }
            w.inline_len = length as u16;
        } else {
            let need = if wr.opcode.is_read_or_atomic() {
                AccessFlags::LOCAL_WRITE
            } else {
                AccessFlags::empty()
            };
            if !sgl.validate(ctx.mrs, self.pd, need) {
                w.status = WcStatus::LocProtErr;
            }
        }
        if self.state == QpState::Err {
            w.status = WcStatus::WrFlushErr;
            self.complete_send(ctx, &w, WcStatus::WrFlushErr);
            return Ok(());
        }
        self.req.sq.push_back(w);
        Ok(())
    }

    /// `ibv_post_recv` for one WR.
    pub(crate) fn post_recv(&mut self, ctx: &mut Ctx, wr: &RecvWr) -> crate::Result<()> {
        if self.srq.is_some() || self.state == QpState::Reset {
            return Err(Error::Inval);
        }
        if self.resp.rq.len() >= self.attr.cap.max_recv_wr as usize {
            return Err(Error::NoMem);
        }
        if wr.sg_list.len() > self.attr.cap.max_recv_sge as usize {
            return Err(Error::Inval);
        }
        let sgl = SgList::from_slice(wr.sg_list).ok_or(Error::Inval)?;
        let w = RecvWqe {
            wr_id: wr.wr_id,
            sgl,
        };
        if self.state == QpState::Err {
            self.fail_recv(ctx, w.wr_id, WcStatus::WrFlushErr, 0);
            return Ok(());
        }
        self.resp.rq.push_back(w);
        Ok(())
    }

    /// Moves to ERR: completes `first` (the failing WQE's status) for the head of
    /// the SQ, flushes everything else, raises QP_FATAL.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx, first: Option<WcStatus>) {
        if self.state != QpState::Err {
            tracing::debug!(target: "roce", qpn = self.qpn, ?first, "QP to ERR, flushing");
        }
        let mut first = first;
        while let Some(w) = self.req.sq.pop_front() {
            let st = first.take().unwrap_or(WcStatus::WrFlushErr);
            // flushed WQEs always complete (IBA 10.8.3.3)
            let wc = Wc {
                wr_id: w.wr_id,
                status: st,
                opcode: w.opcode.into(),
                qp_num: self.qpn,
                ..Default::default()
            };
            ctx.push_wc(self.send_cq, wc);
        }
        if let Some(r) = self.resp.cur_recv.take() {
            self.fail_recv(ctx, r.wqe.wr_id, WcStatus::WrFlushErr, 0);
        }
        while let Some(r) = self.resp.rq.pop_front() {
            self.fail_recv(ctx, r.wr_id, WcStatus::WrFlushErr, 0);
        }
        self.req.sq_next = 0;
        self.req.sq_next_off = 0;
        self.req.rd_outstanding = 0;
        self.comp.retry_deadline = None;
        self.comp.rnr_until = None;
        self.resp.cur_write = None;
        self.resp.resp_q.clear();
        if self.state != QpState::Err {
            ctx.async_event(AsyncEvent::QpFatal { qp_num: self.qpn });
        }
        self.state = QpState::Err;
        self.attr.qp_state = QpState::Err;
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match (self.comp.retry_deadline, self.comp.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx, now: Instant) {
        if self.comp.rnr_until.is_some_and(|t| t <= now) {
            self.comp.rnr_until = None;
        }
        if self.comp.retry_deadline.is_some_and(|t| t <= now) {
            self.comp.retry_deadline = None;
            if self.state != QpState::Rts && self.state != QpState::Sqd
                || self.comp.comp_psn == self.req.psn
            {
                return;
            }
            self.counters.timeouts += 1;
            if self.comp.retry_left == 0 {
                self.enter_error(ctx, Some(WcStatus::RetryExcErr));
                return;
            }
            self.comp.retry_left -= 1;
            self.rewind(self.comp.comp_psn);
            self.comp.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
        }
    }

    pub(crate) fn has_output(&self, now: Instant) -> bool {
        !self.resp.resp_q.is_empty() || !self.requester_blocked(now)
    }

    /// One-line internal state for debugging.
    pub fn debug_state(&self) -> String {
        format!(
            "state={:?} psn={} max={} comp={} sq={} next={} off={} rd={} retry_left={} deadline={:?} rnr={:?} rewound={:?} epsn={} nak_sent={} resp_q={} cur_recv={} cur_write={}",
            self.state, self.req.psn, self.req.max_psn, self.comp.comp_psn, self.req.sq.len(), self.req.sq_next, self.req.sq_next_off, self.req.rd_outstanding,
            self.comp.retry_left, self.comp.retry_deadline.is_some(), self.comp.rnr_until.is_some(), self.comp.rewound_at, self.resp.epsn, self.resp.nak_sent,
            self.resp.resp_q.len(), self.resp.cur_recv.is_some(), self.resp.cur_write.is_some()
        )
    }

    /// Outstanding send WQEs (posted, not completed).
    pub fn sq_len(&self) -> usize {
        self.req.sq.len()
    }

    pub fn rq_len(&self) -> usize {
        self.resp.rq.len()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sport_as_rxe() {
        // hash_32(qpn, 14) = (qpn * 0x61c88647) >> 18
        assert_eq!(
            super::udp_sport(0x11),
            0xc000 + ((0x11u32.wrapping_mul(0x61c88647) >> 18) & 0x3fff) as u16
        );
        assert!((0xc000..=0xffff).contains(&super::udp_sport(0x12345)));
        assert_ne!(super::udp_sport(0x11), super::udp_sport(0x12));
    }
}
