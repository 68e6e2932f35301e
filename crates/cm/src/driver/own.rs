//! Our own CM for a soft device: the sans-IO [`CmEndpoint`] exchanging CM MADs
//! over the device's GSI QP (QP1, `verbs::gsi::create_gsi_qp`). MADs come in
//! through the GSI QP's CQ (the 40-byte GRH slot gives the sender's IPv4
//! address) and leave as UD SEND_ONLY to QP1 of the peer with Q_Key 0x80010000;
//! the endpoint's QP transitions are applied to the ids' QPs here.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, Ah, AhAttr, CompChannel, Context, Cq, Gid, Mr, Mtu, Pd, Qp, QpAttr, QpAttrMask,
    QpCap, QpState, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrDetail, WrOpcode,
};
use wire::mad::{PortSpace, MAD_LEN, QP1_QKEY};

use super::backend::{CmBackend, Waiter};
use super::{v4, Result};
use crate::{
    ChannelId, CmConfig, CmEndpoint, CmEvent, CmIdHandle, CmOption, CmStats, ConnParam, Ece,
    QpAction, QpConnAttrs, RouteHint, Transmit,
};

const NRECV: usize = 512;
const NSEND: usize = 256;
const RECV_SLOT: usize = 40 + MAD_LEN;
const SEND_TAG: u64 = 1 << 32;

/// The own CM of one soft device (lives under the device's mutex).
pub(crate) struct OwnCm {
    ip: Ipv4Addr,
    /// The GSI QP's CQ and its channel (the poller sleeps on it).
    cq: Cq,
    chan: CompChannel,
    ep: CmEndpoint,
    gsi: Qp,
    recv_mr: Mr,
    send_mr: Mr,
    send_free: Vec<usize>,
    pending: VecDeque<Transmit>,
    qps: Vec<(CmIdHandle, Qp)>,
}

fn mtu(m: u8) -> Mtu {
    match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

/// Move an RC QP INIT→RTR→RTS with the CM-negotiated attributes.
fn qp_rtr_rts(qp: &Qp, a: &QpConnAttrs) -> std::result::Result<(), verbs::Error> {
    let mut attr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu(a.path_mtu),
        dest_qp_num: a.dest_qp_num,
        rq_psn: a.rq_psn,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4(v4(a.remote)),
            sgid_index: 1,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            sl: 0,
            port_num: 1,
            dport: 0,
        },
        ..QpAttr::default()
    };
    qp.modify(
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )?;
    attr.qp_state = QpState::Rts;
    attr.sq_psn = a.sq_psn;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    attr.max_rd_atomic = a.max_rd_atomic;
    qp.modify(
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
}

impl OwnCm {
    /// Takes the device's GSI QP and posts its receive buffers.
    pub(crate) fn open(ctx: &Context, pd: &Pd, cfg: CmConfig) -> Result<OwnCm> {
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(NRECV + NSEND + 16, Some(&chan))?;
        let cap = QpCap {
            max_send_wr: NSEND as u32,
            max_recv_wr: NRECV as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let gsi = verbs::gsi::create_gsi_qp(pd, &cq, &cq, cap)?;
        let recv_mr = pd.reg_mr(NRECV * RECV_SLOT, AccessFlags::LOCAL_WRITE)?;
        let send_mr = pd.reg_mr(NSEND * MAD_LEN, AccessFlags::LOCAL_WRITE)?;
        let st = OwnCm {
            ip: ctx.ip(),
            cq,
            chan,
            ep: CmEndpoint::new(cfg),
            gsi,
            recv_mr,
            send_mr,
            send_free: (0..NSEND).collect(),
            pending: VecDeque::new(),
            qps: Vec::new(),
        };
        for slot in 0..NRECV {
            st.post_recv(slot);
        }
        Ok(st)
    }

    /// Apply QP transitions, then send what the endpoint queued.
    fn pump(&mut self) {
        while let Some((h, act)) = self.ep.poll_qp_action() {
            let Some((_, qp)) = self.qps.iter().find(|(k, _)| *k == h) else {
                continue;
            };
            let r = match act {
                QpAction::ReadyToSend(a) => qp_rtr_rts(qp, &a),
                QpAction::Error => qp.modify(
                    &QpAttr {
                        qp_state: QpState::Err,
                        ..QpAttr::default()
                    },
                    QpAttrMask::STATE,
                ),
            };
            if let Err(e) = r {
                tracing::warn!("cm: QP {:#x} transition {:?} failed: {e}", qp.qp_num(), act);
            }
        }
        while let Some(t) = self.ep.poll_transmit() {
            self.pending.push_back(t);
        }
        while !self.pending.is_empty() {
            let Some(slot) = self.send_free.pop() else {
                break;
            };
            let Some(t) = self.pending.pop_front() else {
                break;
            };
            self.send_mr.write(slot * MAD_LEN, &t.mad);
            let sge = [self.send_mr.sge(slot * MAD_LEN, MAD_LEN as u32)];
            let mut wr = SendWr::new(SEND_TAG | slot as u64, WrOpcode::Send, &sge);
            wr.send_flags = SendFlags::SIGNALED;
            wr.wr = WrDetail::Ud {
                ah: Ah {
                    ip: v4(t.dst),
                    ..Ah::default()
                },
                remote_qpn: 1,
                remote_qkey: QP1_QKEY,
            };
            if let Err(e) = self.gsi.post_send(&[wr]) {
                tracing::warn!("cm: GSI post_send: {:?}", e.error);
                self.send_free.push(slot);
                break;
            }
        }
    }

    fn post_recv(&self, slot: usize) {
        let sge = [self.recv_mr.sge(slot * RECV_SLOT, RECV_SLOT as u32)];
        let _ = self.gsi.post_recv(&[RecvWr {
            wr_id: slot as u64,
            sg_list: &sge,
        }]);
    }
}

impl CmBackend for OwnCm {
    fn create_channel(&mut self) -> ChannelId {
        self.ep.create_channel()
    }
    fn create_id(&mut self, channel: Option<ChannelId>, ps: PortSpace) -> CmIdHandle {
        self.ep.create_id(channel, ps, 0)
    }
    fn destroy_id(&mut self, now: Instant, h: CmIdHandle) -> Result<()> {
        let r = self.ep.destroy_id(now, h);
        self.qps.retain(|(k, _)| *k != h);
        Ok(r?)
    }
    fn migrate_id(&mut self, h: CmIdHandle, channel: Option<ChannelId>) -> Result<()> {
        Ok(self.ep.migrate_id(h, channel)?)
    }
    fn port_space(&self, h: CmIdHandle) -> Result<PortSpace> {
        Ok(self.ep.port_space(h)?)
    }
    fn local_addr(&self, h: CmIdHandle) -> Option<SocketAddr> {
        self.ep.local_addr(h).ok().flatten()
    }
    fn peer_addr(&self, h: CmIdHandle) -> Option<SocketAddr> {
        self.ep.peer_addr(h).ok().flatten()
    }
    fn set_option(&mut self, h: CmIdHandle, opt: CmOption) -> Result<()> {
        Ok(self.ep.set_option(h, opt)?)
    }
    fn set_local_ece(&mut self, h: CmIdHandle, ece: Ece) -> Result<()> {
        Ok(self.ep.set_local_ece(h, ece)?)
    }
    fn remote_ece(&self, h: CmIdHandle) -> Result<Ece> {
        Ok(self.ep.remote_ece(h)?)
    }

    fn bind_addr(&mut self, h: CmIdHandle, addr: SocketAddr) -> Result<()> {
        Ok(self.ep.bind_addr(h, addr)?)
    }
    fn resolve_addr(
        &mut self,
        h: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
        route: RouteHint,
    ) -> Result<()> {
        Ok(self.ep.resolve_addr_routed(h, src, dst, timeout, route)?)
    }
    fn resolve_route(&mut self, h: CmIdHandle, timeout: Duration) -> Result<()> {
        Ok(self.ep.resolve_route(h, timeout)?)
    }

    fn attach_qp(&mut self, h: CmIdHandle, qp: &Qp) -> Result<()> {
        self.ep.attach_qp(h, qp.qp_num())?;
        self.qps.retain(|(k, _)| *k != h);
        self.qps.push((h, qp.clone()));
        Ok(())
    }
    fn listen(&mut self, h: CmIdHandle, backlog: usize) -> Result<()> {
        Ok(self.ep.listen(h, backlog)?)
    }
    fn connect(&mut self, now: Instant, h: CmIdHandle, param: &ConnParam) -> Result<()> {
        Ok(self.ep.connect(now, h, param)?)
    }
    fn accept(
        &mut self,
        now: Instant,
        h: CmIdHandle,
        param: &ConnParam,
        qp: Option<&Qp>,
    ) -> Result<()> {
        if let (Some(qp), false) = (qp, self.ep.port_space(h)? == PortSpace::Udp) {
            qp_rtr_rts(qp, &self.ep.qp_attrs(h)?)?;
        }
        Ok(self.ep.accept(now, h, param)?)
    }
    fn reject(&mut self, h: CmIdHandle, private_data: &[u8]) -> Result<()> {
        Ok(self.ep.reject(h, private_data, None)?)
    }
    fn establish(&mut self, h: CmIdHandle, qp: Option<&Qp>) -> Result<()> {
        if let Some(qp) = qp {
            qp_rtr_rts(qp, &self.ep.qp_attrs(h)?)?;
        }
        Ok(self.ep.establish(h)?)
    }
    fn disconnect(&mut self, now: Instant, h: CmIdHandle) -> Result<()> {
        Ok(self.ep.disconnect(now, h)?)
    }

    fn poll_event_where(&mut self, pred: &dyn Fn(&CmEvent) -> bool) -> Option<CmEvent> {
        self.ep.poll_event_where(pred)
    }
    fn pending_events(&self) -> usize {
        self.ep.pending_events()
    }
    fn pending_for(&self, channel: Option<ChannelId>) -> usize {
        self.ep.pending_for(channel)
    }

    fn stats(&self) -> CmStats {
        self.ep.stats
    }
    fn ids(&self) -> Vec<crate::IdInfo> {
        self.ep.ids()
    }
    fn is_removed(&self) -> bool {
        self.ep.is_removed()
    }
    fn addr_change(&mut self, ip: IpAddr) {
        self.ep.addr_change(ip);
    }
    fn device_removal(&mut self) {
        self.ep.device_removal();
        // the device's QPs are of no use any more
        for (_, qp) in &self.qps {
            let _ = qp.modify(
                &QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                },
                QpAttrMask::STATE,
            );
        }
    }

    fn flush(&mut self) {
        self.pump();
    }

    /// One poll of the GSI CQ + timers + transmit. Returns completions handled.
    fn round(&mut self, now: Instant) -> usize {
        let _ = self.cq.req_notify(false);
        let mut wcs = [Wc::default(); 32];
        let n = self.cq.poll(&mut wcs).unwrap_or(0);
        for wc in &wcs[..n] {
            if wc.wr_id & SEND_TAG != 0 {
                self.send_free.push((wc.wr_id & 0xffff_ffff) as usize);
                continue;
            }
            let slot = wc.wr_id as usize;
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                let mut buf = [0u8; RECV_SLOT];
                self.recv_mr.read(slot * RECV_SLOT, &mut buf);
                let src = Ipv4Addr::new(buf[32], buf[33], buf[34], buf[35]);
                let len = (wc.byte_len as usize).min(RECV_SLOT);
                if len >= 40 {
                    self.ep
                        .handle_mad(now, IpAddr::V4(src), IpAddr::V4(self.ip), &buf[40..len]);
                }
            }
            self.post_recv(slot);
        }
        self.ep.handle_timeout(now);
        self.pump();
        n
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    fn waiter(&self) -> Waiter {
        let chan = self.chan.clone();
        Arc::new(move |ms| {
            let _ = chan.get_cq_event(ms);
        })
    }
}
