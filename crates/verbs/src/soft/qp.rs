//! One queue pair: rxe's requester (WQE -> packets), responder (requests -> memory
//! effects, receive completions, ACK/NAK/read responses) and completer
//! (responses -> send completions, retry, RNR back-off), as plain state driven by
//! the engine. Sans-IO: time is an argument; output is drained by the engine.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::roce::{
    AethRepr, AethSyndrome, DethRepr, NakCode, OpFlags, OpInfo, Opcode, Psn, RethRepr,
    RocePacketRepr,
};

use super::engine::Ctx;
use super::sgl::{SgList, MAX_INLINE};
use crate::mr::MrInner;
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
    ud: Option<(crate::Ah, u32, u32)>,
    started: bool,
    first_psn: Psn,
    last_psn: Psn,
    /// Set at post time when the WQE is already known to fail (completed in order).
    status: WcStatus,
}

#[derive(Clone, Copy)]
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) sgl: SgList,
}

struct RecvInProgress {
    wqe: RecvWqe,
    off: usize,
    from_srq: bool,
}

struct WriteInProgress {
    mr: Arc<MrInner>,
    off: usize,
    remaining: u32,
    total: u32,
}

/// Output of the responder, in wire order.
enum RespOut {
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
    // requester
    sq: VecDeque<SendWqe>,
    sq_next: usize,
    sq_next_off: u32,
    psn: Psn,
    /// One past the highest PSN ever sent (responses up to it are valid).
    max_psn: Psn,
    noack_pkts: u32,
    // completer
    comp_psn: Psn,
    rd_outstanding: u32,
    retry_left: u8,
    rnr_left: u8,
    retry_deadline: Option<Instant>,
    rnr_until: Option<Instant>,
    rewound_at: Option<Psn>,
    // responder
    rq: VecDeque<RecvWqe>,
    epsn: Psn,
    msn: u32,
    nak_sent: bool,
    cur_recv: Option<RecvInProgress>,
    cur_write: Option<WriteInProgress>,
    resp_q: VecDeque<RespOut>,
    atomic_hist: VecDeque<(Psn, u64)>,
    /// Recent READ requests (first, last PSN): duplicates are replayed only from here.
    read_hist: VecDeque<(Psn, Psn)>,
    /// UC: drop packets until the next FIRST/ONLY (rxe's `resp.drop_msg`).
    drop_msg: bool,
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
            sq: VecDeque::with_capacity(cap.max_send_wr as usize),
            sq_next: 0,
            sq_next_off: 0,
            psn: Psn::new(0),
            max_psn: Psn::new(0),
            noack_pkts: 0,
            comp_psn: Psn::new(0),
            rd_outstanding: 0,
            retry_left: 0,
            rnr_left: 0,
            retry_deadline: None,
            rnr_until: None,
            rewound_at: None,
            rq: VecDeque::with_capacity(cap.max_recv_wr as usize),
            epsn: Psn::new(0),
            msn: 0,
            nak_sent: false,
            cur_recv: None,
            cur_write: None,
            resp_q: VecDeque::with_capacity(64),
            atomic_hist: VecDeque::with_capacity(ATOMIC_HISTORY),
            read_hist: VecDeque::with_capacity(ATOMIC_HISTORY),
            drop_msg: false,
        }
    }

    // ------------------------------------------------------------ modify
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
            self.epsn = Psn::new(a.rq_psn);
        }
        if mask.contains(M::SQ_PSN) {
            t.sq_psn = a.sq_psn & 0xff_ffff;
            self.psn = Psn::new(a.sq_psn);
            self.comp_psn = self.psn;
            self.max_psn = self.psn;
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
            self.retry_left = a.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            t.rnr_retry = a.rnr_retry;
            self.rnr_left = a.rnr_retry;
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
        self.sq.clear();
        self.rq.clear();
        self.sq_next = 0;
        self.sq_next_off = 0;
        self.rd_outstanding = 0;
        self.retry_deadline = None;
        self.rnr_until = None;
        self.cur_recv = None;
        self.cur_write = None;
        self.resp_q.clear();
        self.atomic_hist.clear();
        self.read_hist.clear();
        self.msn = 0;
        self.nak_sent = false;
        self.rewound_at = None;
        self.drop_msg = false;
    }

    pub(crate) fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.sq_draining = self.state == QpState::Sqd && self.sq_next > 0;
        a
    }

    // ------------------------------------------------------------ posting
    /// `ibv_post_send` for one WR (the caller reports the failing index).
    pub(crate) fn post_send(&mut self, ctx: &mut Ctx, wr: &SendWr) -> crate::Result<()> {
        match self.state {
            QpState::Reset | QpState::Init | QpState::Rtr => return Err(Error::Inval),
            _ => {}
        }
        if self.sq.len() >= self.attr.cap.max_send_wr as usize {
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
        self.sq.push_back(w);
        Ok(())
    }

    /// `ibv_post_recv` for one WR.
    pub(crate) fn post_recv(&mut self, ctx: &mut Ctx, wr: &RecvWr) -> crate::Result<()> {
        if self.srq.is_some() || self.state == QpState::Reset {
            return Err(Error::Inval);
        }
        if self.rq.len() >= self.attr.cap.max_recv_wr as usize {
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
        self.rq.push_back(w);
        Ok(())
    }

    // ------------------------------------------------------------ completions
    fn complete_send(&mut self, ctx: &mut Ctx, w: &SendWqe, status: WcStatus) {
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

    #[allow(clippy::too_many_arguments)]
    fn push_recv_wc(
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
    fn fail_recv(&mut self, ctx: &mut Ctx, wr_id: u64, status: WcStatus, src_qp: u32) {
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
    fn complete_recv(
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
            r.imm.unwrap_or(0),
            fl,
            src_qp,
        );
    }

    /// Moves to ERR: completes `first` (the failing WQE's status) for the head of
    /// the SQ, flushes everything else, raises QP_FATAL.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx, first: Option<WcStatus>) {
        if self.state != QpState::Err {
            tracing::debug!(target: "roce", qpn = self.qpn, ?first, "QP to ERR, flushing");
        }
        let mut first = first;
        while let Some(w) = self.sq.pop_front() {
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
        if let Some(r) = self.cur_recv.take() {
            self.fail_recv(ctx, r.wqe.wr_id, WcStatus::WrFlushErr, 0);
        }
        while let Some(r) = self.rq.pop_front() {
            self.fail_recv(ctx, r.wr_id, WcStatus::WrFlushErr, 0);
        }
        self.sq_next = 0;
        self.sq_next_off = 0;
        self.rd_outstanding = 0;
        self.retry_deadline = None;
        self.rnr_until = None;
        self.cur_write = None;
        self.resp_q.clear();
        if self.state != QpState::Err {
            ctx.async_event(AsyncEvent::QpFatal { qp_num: self.qpn });
        }
        self.state = QpState::Err;
        self.attr.qp_state = QpState::Err;
    }

    // ------------------------------------------------------------ timers
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match (self.retry_deadline, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx, now: Instant) {
        if self.rnr_until.is_some_and(|t| t <= now) {
            self.rnr_until = None;
        }
        if self.retry_deadline.is_some_and(|t| t <= now) {
            self.retry_deadline = None;
            if self.state != QpState::Rts && self.state != QpState::Sqd || self.comp_psn == self.psn
            {
                return;
            }
            self.counters.timeouts += 1;
            if self.retry_left == 0 {
                self.enter_error(ctx, Some(WcStatus::RetryExcErr));
                return;
            }
            self.retry_left -= 1;
            self.rewind(self.comp_psn);
            self.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
        }
    }

    fn arm_retry(&mut self, now: Instant) {
        if self.comp_psn != self.psn {
            self.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
        } else {
            self.retry_deadline = None;
        }
    }

    // ------------------------------------------------------------ requester
    fn wqe_npkts(&self, w: &SendWqe) -> u32 {
        if w.opcode.is_atomic() {
            1
        } else {
            npkts(w.length, mtu_bytes(&self.attr))
        }
    }

    /// Go-back-N: the next packet sent will be the one with PSN `psn`.
    fn rewind(&mut self, psn: Psn) {
        self.counters.retransmits += 1;
        self.reposition(psn);
    }

    /// Points the requester at the packet with PSN `psn` (within the started WQEs,
    /// which form a prefix of the SQ).
    fn reposition(&mut self, psn: Psn) {
        let mtu = mtu_bytes(&self.attr) as u32;
        let started = self.sq.iter().take_while(|w| w.started).count();
        let idx = self
            .sq
            .iter()
            .take(started)
            .position(|w| !w.last_psn.before(psn))
            .unwrap_or(started);
        self.rd_outstanding = self
            .sq
            .iter()
            .take(idx)
            .filter(|w| w.opcode.is_read_or_atomic())
            .count() as u32;
        self.sq_next = idx;
        self.noack_pkts = 0;
        if idx < started {
            let w = &self.sq[idx];
            let k = psn.diff(w.first_psn).max(0) as u32;
            let k = if w.opcode.is_atomic() { 0 } else { k };
            self.sq_next_off = k * mtu;
            self.psn = w.first_psn.add(k);
        } else {
            self.sq_next_off = 0;
            self.psn = if psn.after(self.max_psn) {
                self.max_psn
            } else {
                psn
            };
            // WQEs beyond `started` are fresh: they take PSNs from here
        }
    }

    /// Removes the head WQE (fully acknowledged / answered) and completes it.
    fn pop_head(&mut self, ctx: &mut Ctx, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else { return };
        if self.sq_next > 0 {
            self.sq_next -= 1;
            if w.opcode.is_read_or_atomic() {
                self.rd_outstanding = self.rd_outstanding.saturating_sub(1);
            }
        } else {
            self.sq_next_off = 0;
        }
        self.complete_send(ctx, &w, status);
    }

    fn requester_blocked(&self, now: Instant) -> bool {
        !matches!(self.state, QpState::Rts | QpState::Sqd)
            || self.rnr_until.is_some_and(|t| t > now)
            || self.sq_next >= self.sq.len()
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
            let i = self.sq_next;
            let w = self.sq[i];
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
                        let w = self.sq.pop_front()?;
                        self.complete_send(ctx, &w, w.status);
                        continue;
                    }
                    self.enter_error(ctx, Some(w.status));
                    return None;
                }
                if w.flags.contains(SendFlags::FENCE) && i != 0 && self.rd_outstanding > 0 {
                    return None;
                }
                if w.opcode.is_read_or_atomic()
                    && self.rd_outstanding >= self.attr.max_rd_atomic.max(1) as u32
                {
                    return None;
                }
                let n = self.wqe_npkts(&w);
                if self.qp_type == QpType::Rc
                    && self.psn.add(n).diff(self.comp_psn) as u32 > self.max_inflight.max(n)
                {
                    return None;
                }
                let w = &mut self.sq[i];
                w.started = true;
                w.first_psn = self.psn;
                w.last_psn = self.psn.add(n - 1);
            } else if self.qp_type == QpType::Rc
                && self.psn.diff(self.comp_psn) as u32 >= self.max_inflight
            {
                return None;
            }
            let w = self.sq[i];
            if self.qp_type == QpType::Ud {
                let (ah, dqpn, qkey) = w.ud?;
                let op = if w.opcode == WrOpcode::SendWithImm {
                    Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
                } else {
                    Opcode::UD_SEND_ONLY
                };
                let mut r = RocePacketRepr::new(op, dqpn, self.psn, w.length as usize).ok()?;
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
                self.psn = self.psn.add(1);
                let w = self.sq.pop_front()?;
                self.complete_send(ctx, &w, WcStatus::Success);
                return Some((len, ah.ip.octets(), ah.dport));
            }
            // RC and UC (same segmentation; UC has no READ/atomics, no AckReq,
            // and a WQE completes once its last packet is out)
            let uc = self.qp_type == QpType::Uc;
            let off = self.sq_next_off as usize;
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
                    let send = matches!(o, WrOpcode::Send | WrOpcode::SendWithImm);
                    let op = match (send, first, last, imm) {
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
            let mut r = RocePacketRepr::new(op, self.attr.dest_qp_num, self.psn, plen).ok()?;
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
            r.bth.se = info.has(OpFlags::LAST) && w.flags.contains(SendFlags::SOLICITED);
            if !uc {
                // UC: never (as rxe since "Don't set BTH_ACK_MASK for UC or UD QPs")
                self.noack_pkts += 1;
                r.bth.ack_req = done || self.noack_pkts >= MAX_PKT_PER_ACK;
                if r.bth.ack_req {
                    self.noack_pkts = 0;
                }
            }
            let len = self.emit_req(ctx, &r, &w, off, buf)?;
            if w.opcode.is_read_or_atomic() {
                self.psn = w.last_psn.add(1);
                self.rd_outstanding += 1;
            } else {
                self.psn = self.psn.add(1);
            }
            if done {
                self.sq_next += 1;
                self.sq_next_off = 0;
            } else {
                self.sq_next_off += plen as u32;
            }
            if self.psn.after(self.max_psn) {
                self.max_psn = self.psn;
            }
            if uc {
                // nothing to wait for: complete when the last packet leaves
                // (rxe_xmit_packet: wqe_state_done for non-RC at END)
                self.comp_psn = self.psn;
                if done {
                    self.pop_head(ctx, WcStatus::Success);
                }
            } else if self.retry_deadline.is_none() {
                self.retry_deadline = ack_timeout(self.attr.timeout).map(|d| now + d);
            }
            let ip = self.attr.ah_attr.dgid.to_ipv4()?.octets();
            return Some((len, ip, self.attr.ah_attr.dport));
        }
    }

    fn emit_req(
        &self,
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

    // ------------------------------------------------------------ completer
    /// Retires (completes) WQEs acknowledged up to and including `psn`. Returns
    /// false if a READ/atomic was implicitly acknowledged without its response.
    fn retire_upto(&mut self, ctx: &mut Ctx, now: Instant, psn: Psn) -> bool {
        if psn.diff(self.max_psn) >= 0 {
            return true; // acks something never sent: ignore
        }
        let mut progress = false;
        let mut ok = true;
        let mut np = psn.add(1);
        while let Some(w) = self.sq.front() {
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
        if np.after(self.comp_psn) {
            self.comp_psn = np;
            progress = true;
        }
        if self.comp_psn.after(self.psn) {
            let c = self.comp_psn;
            self.reposition(c);
        }
        if progress {
            self.on_progress(now);
        }
        ok
    }

    fn on_progress(&mut self, now: Instant) {
        self.retry_left = self.attr.retry_cnt;
        self.rnr_left = self.attr.rnr_retry;
        self.rewound_at = None;
        self.arm_retry(now);
    }

    fn retry(&mut self, ctx: &mut Ctx, psn: Psn) {
        if self.rewound_at == Some(psn) {
            return;
        }
        if self.retry_left == 0 {
            self.enter_error(ctx, Some(WcStatus::RetryExcErr));
            return;
        }
        self.retry_left -= 1;
        self.rewound_at = Some(psn);
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
            let d = psn.diff(self.comp_psn);
            if d < 0 || psn.diff(self.max_psn) >= 0 {
                return; // duplicate or bogus
            }
            if d > 0 {
                // a response went missing: go back
                let c = self.comp_psn;
                self.retry(ctx, c);
                return;
            }
            // implicitly acks everything before it
            if !self.retire_upto(ctx, now, psn.sub(1)) {
                // an earlier READ/atomic not answered yet
                let c = self.comp_psn;
                self.retry(ctx, c);
                return;
            }
            let Some(w) = self.sq.front().copied() else {
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
                if !w.sgl.copy_in(ctx.mrs, off, payload) {
                    self.enter_error(ctx, Some(WcStatus::LocProtErr));
                    return;
                }
                if !last {
                    self.comp_psn = psn.add(1);
                    if self.comp_psn.after(self.psn) {
                        let c = self.comp_psn;
                        self.reposition(c);
                    }
                    self.on_progress(now);
                    return;
                }
            }
            self.pop_head(ctx, WcStatus::Success);
            self.comp_psn = psn.add(1);
            if self.comp_psn.after(self.psn) {
                let c = self.comp_psn;
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
                    let c = self.comp_psn;
                    self.retry(ctx, c);
                }
            }
            AethSyndrome::RnrNak { timer } => {
                if psn.before(self.comp_psn) || psn.diff(self.max_psn) >= 0 {
                    return;
                }
                self.counters.rnr_naks_rcvd += 1;
                let psn = if self.retire_upto(ctx, now, psn.sub(1)) {
                    psn
                } else {
                    self.comp_psn
                };
                if self.attr.rnr_retry != 7 {
                    if self.rnr_left == 0 {
                        self.enter_error(ctx, Some(WcStatus::RnrRetryExcErr));
                        return;
                    }
                    self.rnr_left -= 1;
                }
                self.rewind(psn);
                self.rnr_until =
                    Some(now + Duration::from_micros(RNR_TIMER_US[timer as usize & 31] as u64));
                self.retry_deadline = None;
            }
            AethSyndrome::Nak(code) => {
                if psn.before(self.comp_psn) || psn.diff(self.max_psn) >= 0 {
                    return;
                }
                let ok = self.retire_upto(ctx, now, psn.sub(1));
                let st = match code {
                    NakCode::PsnSeqError => {
                        self.counters.seq_naks_rcvd += 1;
                        // an unanswered READ/atomic before the NAK'd PSN goes first
                        let target = if ok { psn } else { self.comp_psn };
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

    // ------------------------------------------------------------ responder
    fn push_ack(&mut self, psn: Psn) {
        if let Some(RespOut::Ack {
            psn: p,
            syndrome,
            msn,
        }) = self.resp_q.back_mut()
        {
            if *syndrome == u8::from(AethSyndrome::ACK) {
                *p = psn;
                *msn = self.msn;
                return;
            }
        }
        self.resp_q.push_back(RespOut::Ack {
            psn,
            syndrome: AethSyndrome::ACK.into(),
            msn: self.msn,
        });
    }

    fn push_nak(&mut self, psn: Psn, s: AethSyndrome) {
        self.resp_q.push_back(RespOut::Ack {
            psn,
            syndrome: s.into(),
            msn: self.msn,
        });
    }

    /// A fatal responder error: NAK and move to ERR (rxe: RESPST_ERR_* → error).
    fn resp_fatal(&mut self, ctx: &mut Ctx, psn: Psn, code: NakCode) -> Option<RespOut> {
        self.push_nak(psn, AethSyndrome::Nak(code));
        let nak = self.resp_q.pop_back();
        self.enter_error(ctx, None);
        nak
    }

    fn take_recv_wqe(&mut self, ctx: &mut Ctx) -> Option<(RecvWqe, bool)> {
        match self.srq {
            Some(s) => ctx.srq_pop(s).map(|w| (w, true)),
            None => self.rq.pop_front().map(|w| (w, false)),
        }
    }

    fn check_rkey(
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
        if mr.pd != self.pd || !mr.access.contains(need) {
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
        let d = psn.diff(self.epsn);
        if d > 0 {
            if !self.nak_sent {
                self.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                self.push_nak(self.epsn, AethSyndrome::Nak(NakCode::PsnSeqError));
            }
            return None;
        }
        if d < 0 {
            self.counters.dup_requests += 1;
            self.duplicate(ctx, r, psn);
            return None;
        }
        self.nak_sent = false;
        let first = info.has(OpFlags::FIRST);
        let last = info.has(OpFlags::LAST);
        // opcode sequence
        let seq_ok = if info.has(OpFlags::SEND) {
            self.cur_write.is_none() && (first == self.cur_recv.is_none())
        } else if info.has(OpFlags::WRITE) {
            self.cur_recv.is_none() && (first == self.cur_write.is_none())
        } else {
            self.cur_recv.is_none() && self.cur_write.is_none()
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
                        self.cur_recv = Some(RecvInProgress {
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
            let cur = self.cur_recv.as_mut()?;
            if cur.off + payload.len() > cur.wqe.sgl.total_len() as usize
                || !cur.wqe.sgl.copy_in(ctx.mrs, cur.off, payload)
            {
                let wqe = self.cur_recv.take()?;
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
                let c = self.cur_recv.take()?;
                self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::Recv, c.off as u32, r);
                self.msn = (self.msn + 1) & 0xff_ffff;
            }
        } else if info.has(OpFlags::WRITE) {
            if first {
                let reth = r.reth?;
                if reth.dma_len == 0 {
                    self.cur_write = Some(WriteInProgress {
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
                            self.cur_write = Some(WriteInProgress {
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
                let w = self.cur_write.as_ref()?;
                payload.len() as u32 > w.remaining
                    || (!last && payload.len() != mtu)
                    || (last && payload.len() as u32 != w.remaining)
            };
            if bad_len {
                self.cur_write = None;
                return self
                    .resp_fatal(ctx, psn, NakCode::InvalidRequest)
                    .map(RespOutPkt);
            }
            if info.has(OpFlags::RWR) && self.cur_recv.is_none() {
                match self.take_recv_wqe(ctx) {
                    Some((wqe, from_srq)) => {
                        self.cur_recv = Some(RecvInProgress {
                            wqe,
                            off: 0,
                            from_srq,
                        })
                    }
                    None => {
                        if first {
                            self.cur_write = None;
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
            let w = self.cur_write.as_mut()?;
            if !payload.is_empty() {
                w.mr.copy_in(w.off, payload);
            }
            w.off += payload.len();
            w.remaining -= payload.len() as u32;
            if last {
                let total = w.total;
                self.cur_write = None;
                if let Some(c) = self.cur_recv.take() {
                    self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::RecvRdmaWithImm, total, r);
                }
                self.msn = (self.msn + 1) & 0xff_ffff;
            }
        } else if info.has(OpFlags::READ) {
            let reth = r.reth?;
            let reads = self
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
            self.msn = (self.msn + 1) & 0xff_ffff;
            let n = npkts(reth.dma_len, mtu_bytes(&self.attr));
            let last_psn = psn.add(n - 1);
            if self.read_hist.len() >= ATOMIC_HISTORY {
                self.read_hist.pop_front();
            }
            self.read_hist.push_back((psn, last_psn));
            self.resp_q.push_back(RespOut::Read {
                mr,
                off,
                remaining: reth.dma_len,
                psn,
                first: true,
                msn: self.msn,
                last_psn,
            });
            self.epsn = self.epsn.add(n);
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
            if self.atomic_hist.len() >= ATOMIC_HISTORY {
                self.atomic_hist.pop_front();
            }
            self.atomic_hist.push_back((psn, orig));
            self.msn = (self.msn + 1) & 0xff_ffff;
            self.resp_q.push_back(RespOut::AtomicAck {
                psn,
                orig,
                msn: self.msn,
            });
            self.epsn = self.epsn.add(1);
            return None;
        }
        self.epsn = self.epsn.add(1);
        if r.bth.ack_req {
            self.push_ack(psn);
        }
        None
    }

    fn duplicate(&mut self, ctx: &mut Ctx, r: &RocePacketRepr, psn: Psn) {
        let Some(info) = r.info() else { return };
        if info.has(OpFlags::READ) {
            let Some(reth) = r.reth else { return };
            // replay only a READ we still hold a resource for (rxe: find_resource)
            let Some(&(_, last_psn)) = self
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
            self.resp_q
                .retain(|o| !matches!(o, RespOut::Read { last_psn: l, .. } if *l == last_psn));
            let (mr, off) = match mr {
                Some((m, o)) => (Some(m), o),
                None => (None, 0),
            };
            self.resp_q.push_back(RespOut::Read {
                mr,
                off,
                remaining: reth.dma_len,
                psn,
                first: true,
                msn: self.msn,
                last_psn,
            });
        } else if info.has(OpFlags::ATOMIC) {
            if let Some(&(_, orig)) = self.atomic_hist.iter().find(|(p, _)| *p == psn) {
                self.resp_q.push_back(RespOut::AtomicAck {
                    psn,
                    orig,
                    msn: self.msn,
                });
            }
        } else {
            // SEND/WRITE already executed: (re)acknowledge what we have
            self.push_ack(self.epsn.sub(1));
        }
    }

    /// The UC responder (rxe's `check_psn`/`check_op_seq` for UC and the IBA
    /// class D/E error handling): never answers. A PSN gap, a missing receive
    /// WQE, a bad rkey or length drops the rest of the message; the next
    /// FIRST/ONLY packet starts a new one, whatever its PSN. A message whose
    /// LAST was lost is abandoned when the next FIRST/ONLY arrives: its
    /// receive WQE (non-SRQ) is reused from the start for the next message.
    fn uc_receive(&mut self, ctx: &mut Ctx, r: &RocePacketRepr, info: &OpInfo, payload: &[u8]) {
        let psn = r.bth.psn;
        let first = info.has(OpFlags::FIRST);
        let last = info.has(OpFlags::LAST);
        if self.drop_msg || psn != self.epsn {
            if !first {
                self.uc_drop(ctx);
                return;
            }
            self.drop_msg = false;
        }
        let send = info.has(OpFlags::SEND);
        let in_msg = self.cur_recv.is_some() || self.cur_write.is_some();
        if first {
            if in_msg {
                // the LAST of the message in progress went missing
                self.uc_abandon(ctx);
            }
        } else if !(send && self.cur_recv.is_some() || !send && self.cur_write.is_some()) {
            // MIDDLE/LAST without its FIRST (or of another kind)
            self.uc_drop(ctx);
            return;
        }
        let mtu = mtu_bytes(&self.attr);
        if send {
            if first && !self.uc_begin_recv(ctx) {
                return;
            }
            let Some(cur) = self.cur_recv.as_mut() else {
                return;
            };
            if cur.off + payload.len() > cur.wqe.sgl.total_len() as usize
                || !last && payload.len() != mtu
            {
                self.uc_drop(ctx);
                return;
            }
            if !cur.wqe.sgl.copy_in(ctx.mrs, cur.off, payload) {
                // the receive WQE names memory we cannot write: as RC
                let wr_id = cur.wqe.wr_id;
                self.cur_recv = None;
                self.fail_recv(ctx, wr_id, WcStatus::LocProtErr, 0);
                self.enter_error(ctx, None);
                return;
            }
            cur.off += payload.len();
            self.epsn = psn.add(1);
            if last {
                let Some(c) = self.cur_recv.take() else {
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
            self.cur_write = Some(WriteInProgress {
                mr,
                off,
                remaining: reth.dma_len,
                total: reth.dma_len,
            });
        }
        let bad_len = match self.cur_write.as_ref() {
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
        let Some(w) = self.cur_write.as_mut() else {
            return;
        };
        if !payload.is_empty() {
            w.mr.copy_in(w.off, payload);
        }
        w.off += payload.len();
        w.remaining -= payload.len() as u32;
        self.epsn = psn.add(1);
        if last {
            let total = w.total;
            self.cur_write = None;
            if let Some(c) = self.cur_recv.take() {
                self.complete_recv(ctx, c.wqe.wr_id, WcOpcode::RecvRdmaWithImm, total, r);
            }
        }
    }

    /// UC: drop this packet and the rest of its message (abandoning a
    /// message in progress).
    fn uc_drop(&mut self, ctx: &mut Ctx) {
        self.counters.uc_drops += 1;
        self.drop_msg = true;
        if self.cur_recv.is_some() || self.cur_write.is_some() {
            self.uc_abandon(ctx);
        }
    }

    /// UC: takes the receive WQE a message consumes into `cur_recv`; without one
    /// the message is dropped (no RNR NAK on UC: it is lost, class D) and this
    /// returns false.
    fn uc_begin_recv(&mut self, ctx: &mut Ctx) -> bool {
        match self.take_recv_wqe(ctx) {
            Some((wqe, from_srq)) => {
                self.cur_recv = Some(RecvInProgress {
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
    fn uc_abandon(&mut self, ctx: &mut Ctx) {
        self.counters.uc_torn += 1;
        self.cur_write = None;
        if let Some(c) = self.cur_recv.take() {
            if c.from_srq {
                self.fail_recv(
                    ctx,
                    c.wqe.wr_id,
                    WcStatus::RemInvReqErr,
                    self.attr.dest_qp_num,
                );
            } else {
                self.rq.push_front(c.wqe);
            }
        }
    }

    fn ud_receive(&mut self, ctx: &mut Ctx, r: &RocePacketRepr, payload: &[u8], src: [u8; 4]) {
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

    /// The next responder packet (ACK/NAK, atomic ACK, read response).
    pub(crate) fn poll_response(&mut self, buf: &mut [u8]) -> Option<(usize, [u8; 4], u16)> {
        let out = self.resp_q.front_mut()?;
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
                }
                *off += plen;
                *remaining -= plen as u32;
                *psn = psn.add(1);
                *first = false;
                (n, last)
            }
        };
        if pop {
            self.resp_q.pop_front();
        }
        Some((len, dst, dport))
    }

    pub(crate) fn has_output(&self, now: Instant) -> bool {
        !self.resp_q.is_empty() || !self.requester_blocked(now)
    }

    /// One-line internal state for debugging.
    pub fn debug_state(&self) -> String {
        format!(
            "state={:?} psn={} max={} comp={} sq={} next={} off={} rd={} retry_left={} deadline={:?} rnr={:?} rewound={:?} epsn={} nak_sent={} resp_q={} cur_recv={} cur_write={}",
            self.state, self.psn, self.max_psn, self.comp_psn, self.sq.len(), self.sq_next, self.sq_next_off, self.rd_outstanding,
            self.retry_left, self.retry_deadline.is_some(), self.rnr_until.is_some(), self.rewound_at, self.epsn, self.nak_sent,
            self.resp_q.len(), self.cur_recv.is_some(), self.cur_write.is_some()
        )
    }

    /// Outstanding send WQEs (posted, not completed).
    pub fn sq_len(&self) -> usize {
        self.sq.len()
    }
    pub fn rq_len(&self) -> usize {
        self.rq.len()
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
