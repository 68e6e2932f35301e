//! The device engine: tables, receive classification, transmit and timers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use wire::roce::icrc::{check_icrc_ipv4, fill_icrc_ipv4};
use wire::roce::{Ipv4Pseudo, OpFlags, RocePacketRepr};

use super::mr::{MrInner, MrMem, MrTable};
use super::qp::{QpCore, QpCounters};
use super::sgl::SgList;
pub use super::shared::Counters;
pub(crate) use super::shared::{ChannelInner, CqState, Ctx, SrqState};
use crate::types::*;
use crate::Error;

/// A packet produced by [`Engine::poll_transmit`]: `len` bytes at the start of the
/// caller's buffer (BTH .. ICRC, i.e. the UDP payload) for `dst:dport`, sent from
/// the device's IP and UDP port 4791.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub dst: [u8; 4],
    pub dport: u16,
    pub len: usize,
    /// The UDP source port this QP's packets should leave from (rxe's
    /// `0xc000 + hash_32(qpn, 14)`); the ICRC covers it.
    pub sport: u16,
}

/// Transmit/receive capabilities of the I/O underneath.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Fill the ICRC in `poll_transmit` (assuming IPv4 ID 0, DF). A driver that
    /// knows better (GSO renumbers IDs) turns this off and fills it itself.
    pub tx_icrc: bool,
}

/// Bounds on the objects a soft device holds at once, reported by
/// `ibv_query_device` (`max_qp`, ...). Past a bound a creation fails with
/// EINVAL, as rxe's object pools refuse (`__rxe_add_to_pool`), and
/// [`Counters::refused_resources`] counts it. The defaults are the values the
/// device always reported; a node serving untrusted peers lowers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_srq: u32,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_qp: 1 << 16,
            max_cq: 1 << 16,
            max_mr: 1 << 20,
            max_pd: 1 << 16,
            max_srq: 1 << 16,
        }
    }
}

/// One software RoCE device, sans-IO.
pub struct Engine {
    pub(crate) ip: [u8; 4],
    pub caps: Caps,
    pub(crate) port_mtu: Mtu,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: Vec<Option<CqState>>,
    pub(crate) srqs: Vec<Option<SrqState>>,
    pub(crate) qps: Vec<Option<QpCore>>,
    qpn_map: HashMap<u32, usize>,
    next_qpn: u32,
    pub(crate) next_pd: u32,
    /// PDs allocated and not yet deallocated.
    pub(crate) live_pds: u32,
    pub limits: DeviceLimits,
    pub(crate) events: VecDeque<AsyncEvent>,
    pub counters: Counters,
    /// Counters of destroyed QPs (for device totals that never go down).
    retired_qp_counters: QpCounters,
    tx_rr: usize,
    urgent: VecDeque<(usize, super::qp::RespOutPkt)>,
    dummy_mr: Arc<MrInner>,
    /// Default in-flight packet window for new RC QPs.
    pub max_inflight: u32,
}

impl Engine {
    pub fn new(ip: [u8; 4], port_mtu: Mtu) -> Engine {
        let dummy = Arc::new(MrInner {
            mem: MrMem::new(0).expect("zero-size layout"),
            lkey: 0,
            rkey: 0,
            access: AccessFlags::empty(),
            pd: u32::MAX,
            remote_invalid: Default::default(),
        });
        Engine {
            ip,
            caps: Caps { tx_icrc: true },
            port_mtu,
            mrs: MrTable::default(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            qpn_map: HashMap::new(),
            // rxe's first QPN; start per-device at a distinct value so logs differ
            next_qpn: 0x11 + (ip[3] as u32) * 0x100,
            next_pd: 1,
            live_pds: 0,
            limits: DeviceLimits::default(),
            events: VecDeque::new(),
            counters: Counters::default(),
            retired_qp_counters: QpCounters::default(),
            tx_rr: 0,
            urgent: VecDeque::new(),
            dummy_mr: dummy,
            max_inflight: super::qp::DEFAULT_MAX_INFLIGHT,
        }
    }

    pub(crate) fn split(&mut self) -> (&mut Vec<Option<QpCore>>, Ctx<'_>) {
        let Engine {
            qps,
            mrs,
            cqs,
            srqs,
            events,
            counters,
            port_mtu,
            ip,
            dummy_mr,
            ..
        } = self;
        (
            qps,
            Ctx {
                mrs,
                cqs,
                srqs,
                events,
                counters,
                port_mtu: *port_mtu,
                ip: *ip,
                dummy_mr,
            },
        )
    }

    // ------------------------------------------------------------ objects
    /// Refuses a creation when `live` objects of `kind` already reach `max`.
    fn admit(&mut self, kind: &'static str, live: usize, max: u32) -> crate::Result<()> {
        if live >= max as usize {
            self.counters.refused_resources += 1;
            tracing::warn!(
                kind,
                max,
                "soft device: creation refused, the device holds its bound"
            );
            return Err(Error::Inval);
        }
        Ok(())
    }

    /// `ibv_alloc_pd`: a new PD id.
    pub(crate) fn alloc_pd(&mut self) -> crate::Result<u32> {
        self.admit("pd", self.live_pds as usize, self.limits.max_pd)?;
        let id = self.next_pd;
        self.next_pd = self.next_pd.wrapping_add(1);
        self.live_pds += 1;
        Ok(id)
    }

    /// `ibv_dealloc_pd`.
    pub(crate) fn dealloc_pd(&mut self) {
        self.live_pds = self.live_pds.saturating_sub(1);
    }

    pub(crate) fn reg_mr(
        &mut self,
        pd: u32,
        len: usize,
        access: AccessFlags,
    ) -> crate::Result<Arc<MrInner>> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::Inval); // as ibv_reg_mr
        }
        self.admit("mr", self.mrs.live(), self.limits.max_mr)?;
        let mem = MrMem::new(len).ok_or(Error::NoMem)?;
        let key = self.mrs.alloc_key();
        let mr = Arc::new(MrInner {
            mem,
            lkey: key,
            rkey: key,
            access,
            pd,
            remote_invalid: Default::default(),
        });
        self.mrs.insert(mr.clone());
        Ok(mr)
    }

    pub(crate) fn create_cq(
        &mut self,
        depth: usize,
        channel: Option<Arc<ChannelInner>>,
    ) -> crate::Result<(usize, Arc<std::sync::atomic::AtomicUsize>)> {
        if depth == 0 || depth > 1 << 20 {
            return Err(Error::Inval);
        }
        let live = self.cqs.iter().flatten().count();
        self.admit("cq", live, self.limits.max_cq)?;
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = CqState {
            depth,
            q: VecDeque::with_capacity(depth),
            armed: None,
            channel,
            events: 0,
            count: count.clone(),
        };
        Ok((insert(&mut self.cqs, c), count))
    }

    pub(crate) fn create_srq(
        &mut self,
        pd: u32,
        max_wr: usize,
        max_sge: usize,
        limit: u32,
    ) -> crate::Result<usize> {
        if max_wr == 0 || max_sge == 0 || max_sge > super::sgl::MAX_SGE {
            return Err(Error::Inval);
        }
        let live = self.srqs.iter().flatten().count();
        self.admit("srq", live, self.limits.max_srq)?;
        Ok(insert(
            &mut self.srqs,
            SrqState {
                pd,
                max_wr,
                max_sge,
                q: VecDeque::with_capacity(max_wr),
                limit,
            },
        ))
    }

    pub(crate) fn post_srq_recv(&mut self, srq: usize, wr: &RecvWr) -> crate::Result<()> {
        let s = self
            .srqs
            .get_mut(srq)
            .and_then(|s| s.as_mut())
            .ok_or(Error::Inval)?;
        if s.q.len() >= s.max_wr {
            return Err(Error::NoMem);
        }
        if wr.sg_list.len() > s.max_sge {
            return Err(Error::Inval);
        }
        let sgl = SgList::from_slice(wr.sg_list).ok_or(Error::Inval)?;
        let _ = s.pd;
        s.q.push_back(super::shared::RecvWqe {
            wr_id: wr.wr_id,
            sgl,
        });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_qp(
        &mut self,
        pd: u32,
        qp_type: QpType,
        send_cq: usize,
        recv_cq: usize,
        srq: Option<usize>,
        cap: QpCap,
        sq_sig_all: bool,
        gsi: bool,
    ) -> crate::Result<u32> {
        if !matches!(self.cqs.get(send_cq), Some(Some(_)))
            || !matches!(self.cqs.get(recv_cq), Some(Some(_)))
        {
            return Err(Error::Inval);
        }
        if cap.max_send_wr == 0 || cap.max_send_wr > 16384 || cap.max_recv_wr > 16384 {
            return Err(Error::Inval);
        }
        if cap.max_send_sge as usize > super::sgl::MAX_SGE
            || cap.max_recv_sge as usize > super::sgl::MAX_SGE
        {
            return Err(Error::Inval);
        }
        if cap.max_inline_data as usize > super::sgl::MAX_INLINE {
            return Err(Error::Inval);
        }
        self.admit("qp", self.qpn_map.len(), self.limits.max_qp)?;
        let qpn = if gsi {
            if self.qpn_map.contains_key(&1) || qp_type != QpType::Ud {
                return Err(Error::Busy);
            }
            1
        } else {
            let q = self.next_qpn;
            self.next_qpn = (self.next_qpn + 1) & 0xff_ffff;
            if self.next_qpn < 0x11 {
                self.next_qpn = 0x11;
            }
            q
        };
        let mut core = QpCore::new(qpn, qp_type, pd, send_cq, recv_cq, srq, cap, sq_sig_all);
        core.max_inflight = self.max_inflight;
        if qp_type == QpType::Ud {
            core.attr.path_mtu = self.port_mtu;
        }
        let idx = insert(&mut self.qps, core);
        self.qpn_map.insert(qpn, idx);
        Ok(qpn)
    }

    /// `ibv_destroy_cq` (the public handles keep a CQ alive while a QP uses it).
    pub(crate) fn destroy_cq(&mut self, cq: usize) {
        if let Some(c) = self.cqs.get_mut(cq) {
            *c = None;
        }
    }

    /// `ibv_destroy_srq` (the public handles keep an SRQ alive while a QP uses it).
    pub(crate) fn destroy_srq(&mut self, srq: usize) {
        if let Some(s) = self.srqs.get_mut(srq) {
            *s = None;
        }
    }

    pub(crate) fn destroy_qp(&mut self, qpn: u32) {
        if let Some(i) = self.qpn_map.remove(&qpn) {
            if let Some(q) = self.qps[i].take() {
                self.retired_qp_counters.add(&q.counters);
            }
        }
    }

    /// Per-QP counters summed over every QP the device had (live and destroyed).
    pub fn qp_counter_totals(&self) -> QpCounters {
        let mut t = self.retired_qp_counters;
        for q in self.qps.iter().flatten() {
            t.add(&q.counters);
        }
        t
    }

    /// Live QPs.
    pub fn qp_count(&self) -> usize {
        self.qpn_map.len()
    }

    pub(crate) fn qp_mut(&mut self, qpn: u32) -> crate::Result<(&mut QpCore, Ctx<'_>)> {
        let i = *self.qpn_map.get(&qpn).ok_or(Error::Inval)?;
        let (qps, ctx) = self.split();
        let qp = qps
            .get_mut(i)
            .and_then(|q| q.as_mut())
            .ok_or(Error::Inval)?;
        Ok((qp, ctx))
    }

    /// Read-only view of a QP (tests, diagnostics).
    pub fn qp(&self, qpn: u32) -> Option<&QpCore> {
        self.qps.get(*self.qpn_map.get(&qpn)?)?.as_ref()
    }

    pub(crate) fn poll_cq(&mut self, cq: usize, out: &mut [Wc]) -> crate::Result<usize> {
        let c = self
            .cqs
            .get_mut(cq)
            .and_then(|c| c.as_mut())
            .ok_or(Error::Inval)?;
        let mut n = 0;
        while n < out.len() {
            match c.q.pop_front() {
                Some(w) => {
                    out[n] = w;
                    n += 1;
                }
                None => break,
            }
        }
        c.count.fetch_sub(n, std::sync::atomic::Ordering::Release);
        Ok(n)
    }

    // ------------------------------------------------------------ receive
    /// Feeds one received UDP payload (from `src`). With `ip` given (the real
    /// IPv4 header was visible), the ICRC is checked; from a plain UDP socket the
    /// sender's IPv4 ID is unknown, so it cannot be (see docs/roce.md).
    /// Classification order follows rxe's `hdr_check`: length/opcode/version →
    /// P_Key → QP lookup → QP type → QP state → ICRC → dispatch.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        src: [u8; 4],
        ip: Option<&Ipv4Pseudo>,
        data: &[u8],
    ) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += data.len() as u64;
        let (r, payload) = match RocePacketRepr::parse(data) {
            Ok(x) => x,
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    wire::Error::Truncated => c.drop_truncated += 1,
                    wire::Error::BadOpcode => c.drop_bad_opcode += 1,
                    wire::Error::BadVersion => c.drop_bad_version += 1,
                    _ => c.drop_bad_length += 1,
                }
                return;
            }
        };
        tracing::trace!(target: "roce", "rx {r} from {}.{}.{}.{}", src[0], src[1], src[2], src[3]);
        if r.bth.pkey & 0x7fff != 0x7fff {
            self.counters.drop_pkey += 1;
            return;
        }
        let Some(&i) = self.qpn_map.get(&r.bth.dest_qp) else {
            self.counters.drop_no_qp += 1;
            return;
        };
        let Some(info) = r.info() else { return };
        let Some(Some(qp)) = self.qps.get(i) else {
            self.counters.drop_no_qp += 1;
            return;
        };
        let type_ok = match qp.qp_type {
            QpType::Rc => info.has(OpFlags::RC),
            QpType::Uc => info.has(OpFlags::UC),
            QpType::Ud => info.has(OpFlags::UD),
        };
        if !type_ok {
            self.counters.drop_qp_type += 1;
            return;
        }
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
            self.counters.drop_qp_state += 1;
            return;
        }
        if qp.qp_type != QpType::Ud
            && qp.attr.ah_attr.dgid.to_ipv4().map(|a| a.octets()) != Some(src)
        {
            self.counters.drop_src += 1;
            return;
        }
        if let Some(ip) = ip {
            self.counters.icrc_bytes += data.len() as u64;
            if check_icrc_ipv4(ip, data).is_err() {
                self.counters.drop_bad_icrc += 1;
                return;
            }
        }
        let (qps, mut ctx) = self.split();
        let Some(Some(qp)) = qps.get_mut(i) else {
            return;
        };
        if info.has(OpFlags::REQ) {
            if let Some(urgent) = qp.handle_request(&mut ctx, &r, payload, src) {
                self.urgent.push_back((i, urgent));
            }
        } else {
            qp.handle_response(&mut ctx, now, &r, payload);
        }
    }

    // ------------------------------------------------------------ transmit
    /// The next packet to send, written at the start of `buf` (which should hold
    /// at least `max_packet_len()` bytes).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.poll_transmit_inner(now, buf)?;
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += t.len as u64;
        if self.caps.tx_icrc {
            self.counters.icrc_bytes += t.len as u64;
            let ip = Ipv4Pseudo::df(self.ip, t.dst, t.sport, t.dport);
            let _ = fill_icrc_ipv4(&ip, &mut buf[..t.len]);
        }
        Some(t)
    }

    fn poll_transmit_inner(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some((i, u)) = self.urgent.pop_front() {
            if let Some(Some(qp)) = self.qps.get(i) {
                if let Some((len, dst, dport)) = u.emit(qp, buf) {
                    return Some(Transmit {
                        dst,
                        dport,
                        len,
                        sport: qp.sport,
                    });
                }
            }
        }
        let n = self.qps.len();
        for k in 0..n {
            let i = (self.tx_rr + k) % n;
            let (qps, mut ctx) = self.split();
            let Some(Some(qp)) = qps.get_mut(i) else {
                continue;
            };
            // responses first (ACKs unblock the peer), then requests; a plain
            // ACK lets one request go first (`poll_output`)
            let out = qp.poll_output(&mut ctx, now, buf);
            if let Some((len, dst, dport)) = out {
                let sport = qp.sport;
                self.tx_rr = i; // stay on this QP while it has data (batches per QP)
                return Some(Transmit {
                    dst,
                    dport,
                    len,
                    sport,
                });
            }
        }
        None
    }

    /// Whether `poll_transmit` would return something now.
    pub fn wants_transmit(&self, now: Instant) -> bool {
        !self.urgent.is_empty() || self.qps.iter().flatten().any(|q| q.has_output(now))
    }

    /// Largest packet this device emits (UDP payload).
    pub fn max_packet_len(&self) -> usize {
        self.port_mtu.bytes() + 64
    }

    /// The earliest timer deadline (retransmit, RNR back-off).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.qps
            .iter()
            .flatten()
            .filter_map(|q| q.poll_timeout())
            .min()
    }

    /// Fires due timers; a no-op if none is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let (qps, mut ctx) = self.split();
        for qp in qps.iter_mut().flatten() {
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                qp.handle_timeout(&mut ctx, now);
            }
        }
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    pub fn ip(&self) -> [u8; 4] {
        self.ip
    }
}

fn insert<T>(v: &mut Vec<Option<T>>, x: T) -> usize {
    if let Some(i) = v.iter().position(|s| s.is_none()) {
        v[i] = Some(x);
        i
    } else {
        v.push(Some(x));
        v.len() - 1
    }
}
