//! The device state a QP touches besides its own: CQs (and their completion
//! channels), SRQs, the MR table, async events and the device counters. The
//! engine owns it; [`Ctx`] is the split borrow of it that QP code gets, so
//! `qp` depends on this module and not on the engine.

use std::collections::VecDeque;
use std::sync::Arc;

use super::mr::{MrInner, MrTable};
use super::sgl::SgList;
use crate::types::*;

/// Why received datagrams were dropped, and other device counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// RoCE bytes (UDP payload: BTH to ICRC) received and sent.
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub drop_truncated: u64,
    pub drop_bad_opcode: u64,
    pub drop_bad_length: u64,
    pub drop_bad_version: u64,
    pub drop_bad_icrc: u64,
    pub drop_pkey: u64,
    pub drop_no_qp: u64,
    pub drop_qp_type: u64,
    pub drop_qp_state: u64,
    pub drop_qkey: u64,
    pub drop_src: u64,
    pub cq_overflow: u64,
    pub local_sgl_errors: u64,
    /// PD/CQ/SRQ/QP/MR creations refused because the device held its bound
    /// of that kind ([`DeviceLimits`](super::engine::DeviceLimits)).
    pub refused_resources: u64,
    // The driver's work, for per-packet cost breakdowns (issue 19,
    // `scripts/roce_profile.sh`); zero on an `External` device.
    /// Bytes run through the ICRC (filled on send, checked on receive).
    pub icrc_bytes: u64,
    /// `sendmmsg` calls (the AF_XDP datapath's kicks are not counted).
    pub send_calls: u64,
    /// `recvmmsg` calls, and those of them that found nothing.
    pub recv_calls: u64,
    pub recv_empty: u64,
    /// Acquisitions of the device mutex (engine + transmit state; reading
    /// these counters takes one) and of the receive-batch mutex.
    pub device_locks: u64,
    pub rx_locks: u64,
    /// Poller thread wake-ups: `poll()` said readable, or a nap ended (AF_XDP, or
    /// while an application thread busy-polls).
    pub poller_wakeups: u64,
}

/// A posted receive WQE (on a QP's receive queue or an SRQ).
#[derive(Clone, Copy)]
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) sgl: SgList,
}

/// Completion channel: an eventfd plus the CQs that fired.
pub(crate) struct ChannelInner {
    pub(crate) efd: crate::event::EventFd,
    pub(crate) fired: std::sync::Mutex<VecDeque<u32>>,
}

pub(crate) struct CqState {
    pub(crate) depth: usize,
    pub(crate) q: VecDeque<Wc>,
    /// Some(solicited_only) while armed by req_notify.
    pub(crate) armed: Option<bool>,
    pub(crate) channel: Option<Arc<ChannelInner>>,
    pub(crate) events: u64,
    /// Entries queued, readable without the device lock (so an idle poll_cq
    /// never contends with the poller thread).
    pub(crate) count: Arc<std::sync::atomic::AtomicUsize>,
}

pub(crate) struct SrqState {
    pub(crate) pd: u32,
    pub(crate) max_wr: usize,
    pub(crate) max_sge: usize,
    pub(crate) q: VecDeque<RecvWqe>,
    pub(crate) limit: u32,
}

/// What QP code may touch besides its own state (split borrow of the engine).
pub(crate) struct Ctx<'a> {
    pub(crate) mrs: &'a MrTable,
    pub(crate) cqs: &'a mut Vec<Option<CqState>>,
    pub(crate) srqs: &'a mut Vec<Option<SrqState>>,
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
    pub(crate) counters: &'a mut Counters,
    pub(crate) port_mtu: Mtu,
    pub(crate) ip: [u8; 4],
    pub(crate) dummy_mr: &'a Arc<MrInner>,
}

impl Ctx<'_> {
    pub(crate) fn push_wc(&mut self, cq: usize, wc: Wc) {
        let Some(Some(c)) = self.cqs.get_mut(cq) else {
            return;
        };
        if c.q.len() >= c.depth {
            self.counters.cq_overflow += 1;
            self.events.push_back(AsyncEvent::CqErr { cq: cq as u32 });
            return;
        }
        let sol = wc.wc_flags.contains(WcFlags::SOLICITED) || wc.status != WcStatus::Success;
        c.q.push_back(wc);
        c.count.fetch_add(1, std::sync::atomic::Ordering::Release);
        if let Some(solicited_only) = c.armed {
            if !solicited_only || sol {
                c.armed = None;
                if let Some(ch) = &c.channel {
                    if let Ok(mut f) = ch.fired.lock() {
                        f.push_back(cq as u32);
                    }
                    ch.efd.notify();
                }
            }
        }
    }
    pub(crate) fn srq_pop(&mut self, s: usize) -> Option<RecvWqe> {
        let srq = self.srqs.get_mut(s)?.as_mut()?;
        let w = srq.q.pop_front()?;
        if srq.limit > 0 && (srq.q.len() as u32) < srq.limit {
            srq.limit = 0; // one-shot, re-armed by modify_srq
            self.events
                .push_back(AsyncEvent::SrqLimitReached { srq: s as u32 });
        }
        Some(w)
    }
    pub(crate) fn async_event(&mut self, e: AsyncEvent) {
        self.events.push_back(e);
    }
}
