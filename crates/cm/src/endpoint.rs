//! `CmEndpoint`: the sans-IO connection manager of one CM port (QP1 of a device).
//!
//! Inputs: application calls (`create_id`, `bind_addr`, `resolve_addr`,
//! `resolve_route`, `listen`, `connect`, `accept`, `reject`, `establish`,
//! `notify`, `disconnect`, `destroy_id`, …), received MADs (`handle_mad`) and time
//! (`handle_timeout`). Outputs, drained by the driver **in this order** after every
//! input: `poll_event` (CM events; the driver moves QPs to RTR/RTS on
//! ESTABLISHED/CONNECT_RESPONSE before any further MAD leaves), `poll_transmit`
//! (256-byte MADs for QP1 of the peer: UD SEND_ONLY, Q_Key 0x80010000), then
//! `poll_timeout` (the next deadline). A spurious `handle_timeout` is a no-op.
//!
//! Timeouts follow the kernel CM: a REQ waits `4.096 µs · 2^remote_cm_response_timeout`
//! plus twice the packet lifetime, is retried `max_cm_retries` times, and an MRA
//! extends the wait by its service timeout. Every outstanding operation ends in an
//! event: ESTABLISHED, REJECTED, UNREACHABLE (`-ETIMEDOUT`), DISCONNECTED, …

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tracing::{debug, trace, warn};
use wire::mad::{
    gid_from_ip, parse_service_id, service_id, CmMadRepr, CmMsgRepr, CmPathRepr, CmaHdr,
    CmaHdrRepr, DrepRepr, DreqRepr, Mad, MraRepr, MsgResponse, PortSpace, RejReason, RejRepr,
    RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, TransportType, CMA_HDR_LEN,
    MAD_LEN, RDMA_UDP_QKEY, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN,
    SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};

use crate::event::{CmEvent, ConnParam, Ece, EventType, UdParam, EHOSTUNREACH, ENODEV, ETIMEDOUT};
use crate::id::{ChannelId, CmIdHandle, CmOption, CmState};
use crate::Error;

/// Consumer private data of `connect` (REQ, 92 − 36-byte CMA header), as librdmacm.
pub const CONNECT_PRIVATE_DATA_MAX: usize = REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
/// Consumer private data of `accept` (REP).
pub const ACCEPT_PRIVATE_DATA_MAX: usize = REP_PRIVATE_DATA_LEN;
/// Consumer private data of `reject` (REJ).
pub const REJECT_PRIVATE_DATA_MAX: usize = REJ_PRIVATE_DATA_LEN;
/// Consumer private data of a UDP `connect` (SIDR_REQ, 216 − 36).
pub const SIDR_CONNECT_PRIVATE_DATA_MAX: usize = SIDR_REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
/// Consumer private data of a UDP `accept`/`reject` (SIDR_REP).
pub const SIDR_ACCEPT_PRIVATE_DATA_MAX: usize = SIDR_REP_PRIVATE_DATA_LEN;

/// `4.096 µs · 2^t` rounded as the kernel's `cm_convert_to_ms` (at least 1 ms).
pub fn cm_timeout(t: u8) -> Duration {
    let t = t.min(31);
    Duration::from_millis(if t <= 8 { 1 } else { 1u64 << (t - 8) })
}

/// Configuration of an endpoint.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// Local IP addresses (RoCEv2 GIDs are their IPv4-mapped forms).
    pub local_addrs: Vec<IpAddr>,
    /// The CA GUID put in REQ/REP.
    pub ca_guid: u64,
    /// CM response timeout we announce and use for REQ/DREQ/SIDR retries (CMA: 20 ≈ 4.3 s).
    pub cm_response_timeout: u8,
    /// MAD retries before giving up (CMA: 15).
    pub max_cm_retries: u8,
    /// Packet lifetime (IB time encoding) added twice to every wait.
    pub packet_life_time: u8,
    /// Service timeout announced in an MRA (CMA: 24).
    pub mra_service_timeout: u8,
    /// How long a closed connection stays in TIMEWAIT.
    pub timewait: Duration,
    /// Local ACK timeout put in the REQ path (rxe's REQs carry 19).
    pub local_ack_timeout: u8,
    /// Target ACK delay announced in the REP (rxe: 15).
    pub target_ack_delay: u8,
    /// Path MTU (IB encoding, 3 = 1024, rxe on a 1500-byte link).
    pub path_mtu: u8,
    /// Hop limit of the REQ path.
    pub hop_limit: u8,
    /// Seed for comm IDs, transaction IDs, PSNs and ephemeral ports.
    pub seed: u64,
    /// Most ids held at once. A REQ (or SIDR_REQ) from a peer that would make
    /// one more is refused with REJ "no resources" (SIDR_REP "no QP") and
    /// counted in [`CmStats::refused_ids`]; ids the application creates itself
    /// are not bounded here.
    pub max_ids: usize,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            local_addrs: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            ca_guid: 0x0200_00ff_fe00_0001,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            mra_service_timeout: 24,
            timewait: Duration::from_secs(1),
            local_ack_timeout: 19,
            target_ack_delay: 15,
            path_mtu: 3,
            hop_limit: 64,
            seed: 0x5eed,
            max_ids: 16384,
        }
    }
}

/// A MAD to send to QP1 of `dst` from the local address `src`.
#[derive(Clone)]
pub struct Transmit {
    /// Local address (source GID).
    pub src: IpAddr,
    /// Peer address (destination GID).
    pub dst: IpAddr,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

impl core::fmt::Debug for Transmit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match CmMadRepr::parse_bytes(&self.mad) {
            Ok(r) => write!(f, "{} -> {}: {}", self.src, self.dst, r),
            Err(e) => write!(f, "{} -> {}: bad MAD ({e})", self.src, self.dst),
        }
    }
}

/// Negotiated attributes a QP needs for INIT→RTR→RTS (`rdma_init_qp_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConnAttrs {
    /// Remote QPN (`dest_qp_num`).
    pub dest_qp_num: u32,
    /// Expected PSN of incoming requests (`rq_psn`): the starting PSN we advertised.
    pub rq_psn: u32,
    /// Our first PSN (`sq_psn`): the starting PSN the peer advertised.
    pub sq_psn: u32,
    /// Path MTU (IB encoding).
    pub path_mtu: u8,
    /// `max_dest_rd_atomic` (our responder resources).
    pub max_dest_rd_atomic: u8,
    /// `max_rd_atomic` (our initiator depth).
    pub max_rd_atomic: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Local address.
    pub local: IpAddr,
    /// Remote address (AH destination).
    pub remote: IpAddr,
    /// Traffic class (TOS).
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

/// What the driver must do to a CM-managed QP (see [`CmEndpoint::attach_qp`]),
/// drained by [`CmEndpoint::poll_qp_action`] before `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpAction {
    /// Move the QP INIT→RTR→RTS with these attributes (active side, REP received:
    /// the RTU queued behind this action must not leave before).
    ReadyToSend(QpConnAttrs),
    /// Move the QP to ERR (disconnect).
    Error,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs handed to `handle_mad`.
    pub mads_in: u64,
    /// MADs queued for transmission.
    pub mads_out: u64,
    /// MADs dropped: malformed or not CM.
    pub dropped_malformed: u64,
    /// MADs dropped: no matching id or wrong state.
    pub dropped_unmatched: u64,
    /// Retransmissions.
    pub retransmits: u64,
    /// Operations that ran out of retries.
    pub timeouts: u64,
    /// Connection requests refused because the endpoint held `max_ids` ids.
    pub refused_ids: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Retry,
    TimeWait,
}

#[derive(Debug)]
struct Id {
    ps: PortSpace,
    channel: Option<ChannelId>,
    context: u64,
    state: CmState,
    destroyed: bool,
    explicit_bind: bool,
    listening_parent: Option<usize>,
    backlog: usize,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    local_comm_id: u32,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    tid: u64,
    managed_qp: bool,
    local_qpn: u32,
    remote_qpn: u32,
    local_psn: u32,
    remote_psn: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    path_mtu: u8,
    peer_response_timeout: u8,
    peer_max_retries: u8,
    local_ece: Ece,
    remote_ece: Ece,
    tos: u8,
    reuse_addr: bool,
    ack_timeout: Option<u8>,
    disconnect_reported: bool,
    // retransmission
    last: Option<Transmit>,
    retries_left: u8,
    retry_timeout: Duration,
    deadline: Option<Instant>,
    timer: Timer,
}

impl Id {
    fn new(ps: PortSpace, channel: Option<ChannelId>, context: u64) -> Id {
        Id {
            ps,
            channel,
            context,
            state: CmState::Idle,
            destroyed: false,
            explicit_bind: false,
            listening_parent: None,
            backlog: 0,
            local: None,
            remote: None,
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            tid: 0,
            managed_qp: false,
            local_qpn: 0,
            remote_qpn: 0,
            local_psn: 0,
            remote_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            peer_response_timeout: 20,
            peer_max_retries: 15,
            local_ece: Ece::default(),
            remote_ece: Ece::default(),
            tos: 0,
            reuse_addr: false,
            ack_timeout: None,
            disconnect_reported: false,
            last: None,
            retries_left: 0,
            retry_timeout: Duration::ZERO,
            deadline: None,
            timer: Timer::Retry,
        }
    }
    fn is_pending_child(&self) -> bool {
        matches!(
            self.state,
            CmState::ReqRcvd | CmState::MraReqSent | CmState::SidrReqRcvd
        )
    }
}

struct Slot {
    gen: u32,
    id: Option<Id>,
}

/// One live cm_id as the management plane lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdInfo {
    pub state: CmState,
    pub ps: PortSpace,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub local_qpn: u32,
    pub remote_qpn: u32,
}

/// The connection manager of one CM port. See the module doc for the poll order.
pub struct CmEndpoint {
    cfg: CmConfig,
    rng: u64,
    slots: Vec<Slot>,
    free: Vec<usize>,
    by_local_comm: HashMap<u32, usize>,
    by_remote: HashMap<(u32, u64), usize>,
    sidr_seen: HashMap<(IpAddr, u32), usize>,
    tx: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    qp_actions: VecDeque<(CmIdHandle, QpAction)>,
    tid_hi: u32,
    tid_lo: u32,
    next_port: u16,
    next_channel: u32,
    /// The device is gone ([`CmEndpoint::device_removal`]): calls fail with `NoDevice`.
    removed: bool,
    /// Counters.
    pub stats: CmStats,
}

/// What the host's routing table says about a destination, for
/// [`CmEndpoint::resolve_addr_routed`]. The driver asks the kernel (a connected UDP
/// socket); the core never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteHint {
    /// Not looked up: any local address of the destination's family will do.
    Any,
    /// The kernel would send to the destination from this address.
    Source(IpAddr),
    /// The kernel has no route (the positive errno, e.g. `ENETUNREACH`):
    /// `rdma_resolve_addr` fails at once with it, as the kernel's `rdma_resolve_ip`.
    Unreachable(i32),
}

fn rand24(x: u64) -> u32 {
    (x as u32) & 0x00ff_ffff
}

fn with_cma(hdr: CmaHdrRepr, user: &[u8], out: &mut [u8]) {
    hdr.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
    out[CMA_HDR_LEN..CMA_HDR_LEN + user.len()].copy_from_slice(user);
}

fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    a
}

fn check_pd(len: usize, max: usize) -> Result<(), Error> {
    if len > max {
        Err(Error::PrivateDataTooLong { len, max })
    } else {
        Ok(())
    }
}

impl CmEndpoint {
    /// A new endpoint.
    pub fn new(cfg: CmConfig) -> CmEndpoint {
        let mut e = CmEndpoint {
            rng: cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
            cfg,
            slots: Vec::new(),
            free: Vec::new(),
            by_local_comm: HashMap::new(),
            by_remote: HashMap::new(),
            sidr_seen: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            qp_actions: VecDeque::new(),
            tid_hi: 0,
            tid_lo: 0,
            next_port: 0,
            next_channel: 0,
            removed: false,
            stats: CmStats::default(),
        };
        e.tid_hi = e.next_rand() as u32;
        e.next_port = 32768 + (e.next_rand() % 28000) as u16;
        e
    }

    /// The live (not destroyed) ids.
    pub fn ids(&self) -> Vec<IdInfo> {
        self.slots
            .iter()
            .filter_map(|s| s.id.as_ref())
            .filter(|i| !i.destroyed)
            .map(|i| IdInfo {
                state: i.state,
                ps: i.ps,
                local: i.local,
                remote: i.remote,
                local_qpn: i.local_qpn,
                remote_qpn: i.remote_qpn,
            })
            .collect()
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn new_tid(&mut self) -> u64 {
        self.tid_lo = self.tid_lo.wrapping_add(1);
        (u64::from(self.tid_hi) << 32) | u64::from(self.tid_lo)
    }

    fn new_comm_id(&mut self, idx: usize) -> u32 {
        loop {
            let c = self.next_rand() as u32;
            if c != 0 && !self.by_local_comm.contains_key(&c) {
                self.by_local_comm.insert(c, idx);
                return c;
            }
        }
    }

    fn retry_wait(&self, response_timeout: u8) -> Duration {
        cm_timeout(response_timeout) + 2 * cm_timeout(self.cfg.packet_life_time)
    }

    // ---- handles ---------------------------------------------------------

    fn handle(&self, idx: usize) -> CmIdHandle {
        CmIdHandle {
            index: idx as u32,
            gen: self.slots[idx].gen,
        }
    }

    fn index(&self, h: CmIdHandle) -> Result<usize, Error> {
        let i = h.index as usize;
        match self.slots.get(i) {
            Some(s) if s.gen == h.gen && s.id.as_ref().is_some_and(|id| !id.destroyed) => Ok(i),
            _ => Err(Error::InvalidId),
        }
    }

    /// `index` for calls that need the device: `NoDevice` once it is removed.
    fn live(&self, h: CmIdHandle) -> Result<usize, Error> {
        let idx = self.index(h)?;
        if self.removed {
            return Err(Error::NoDevice);
        }
        Ok(idx)
    }

    /// Whether [`CmEndpoint::device_removal`] happened.
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    fn id(&self, idx: usize) -> &Id {
        self.slots[idx].id.as_ref().expect("live slot")
    }

    fn id_mut(&mut self, idx: usize) -> &mut Id {
        self.slots[idx].id.as_mut().expect("live slot")
    }

    /// Live ids reach `max_ids`: count the refusal of a peer's request.
    fn at_id_bound(&mut self) -> bool {
        let live = self.slots.len() - self.free.len();
        if live >= self.cfg.max_ids {
            self.stats.refused_ids += 1;
            warn!(
                live,
                max = self.cfg.max_ids,
                "CM: connection request refused, id table full"
            );
            return true;
        }
        false
    }

    fn alloc(&mut self, id: Id) -> usize {
        if let Some(i) = self.free.pop() {
            self.slots[i].id = Some(id);
            i
        } else {
            self.slots.push(Slot {
                gen: 1,
                id: Some(id),
            });
            self.slots.len() - 1
        }
    }

    fn release(&mut self, idx: usize) {
        if let Some(id) = self.slots[idx].id.take() {
            if self.by_local_comm.get(&id.local_comm_id) == Some(&idx) {
                self.by_local_comm.remove(&id.local_comm_id);
            }
            let key = (id.remote_comm_id, id.remote_ca_guid);
            if self.by_remote.get(&key) == Some(&idx) {
                self.by_remote.remove(&key);
            }
            self.sidr_seen.retain(|_, v| *v != idx);
            self.slots[idx].gen = self.slots[idx].gen.wrapping_add(1);
            self.free.push(idx);
        }
    }

    /// Release a destroyed id once nothing (TIMEWAIT) holds it.
    fn maybe_release(&mut self, idx: usize) {
        if self.slots[idx]
            .id
            .as_ref()
            .is_some_and(|id| id.destroyed && id.state != CmState::TimeWait)
        {
            self.release(idx);
        }
    }

    // ---- channels and events ----------------------------------------------

    /// `rdma_create_event_channel`.
    pub fn create_channel(&mut self) -> ChannelId {
        self.next_channel += 1;
        ChannelId(self.next_channel)
    }

    /// `rdma_migrate_id`: move an id, and its queued events, to another channel
    /// (`None`: synchronous).
    pub fn migrate_id(&mut self, h: CmIdHandle, channel: Option<ChannelId>) -> Result<(), Error> {
        let idx = self.index(h)?;
        self.id_mut(idx).channel = channel;
        for ev in self.events.iter_mut().filter(|e| e.id == h) {
            ev.channel = channel;
        }
        Ok(())
    }

    fn push_event(
        &mut self,
        idx: usize,
        event: EventType,
        status: i32,
        param: ConnParam,
        ud: Option<UdParam>,
        ece: Ece,
        listen_id: Option<CmIdHandle>,
    ) {
        let id = self.id(idx);
        if id.destroyed {
            return;
        }
        let ev = CmEvent {
            id: self.handle(idx),
            listen_id,
            channel: id.channel,
            event,
            status,
            param,
            ud,
            ece,
        };
        debug!(id = %ev.id, "{}", ev);
        self.events.push_back(ev);
    }

    fn simple_event(&mut self, idx: usize, event: EventType, status: i32) {
        self.push_event(
            idx,
            event,
            status,
            ConnParam::default(),
            None,
            Ece::default(),
            None,
        );
    }

    /// The next event of `channel` (`None`: of synchronous ids). Drain before
    /// `poll_transmit`.
    #[must_use]
    pub fn poll_event(&mut self, channel: Option<ChannelId>) -> Option<CmEvent> {
        let pos = self.events.iter().position(|e| e.channel == channel)?;
        self.events.remove(pos)
    }

    /// The next event of one id (synchronous mode: the blocking call's result).
    #[must_use]
    pub fn poll_id_event(&mut self, h: CmIdHandle) -> Option<CmEvent> {
        let pos = self.events.iter().position(|e| e.id == h)?;
        self.events.remove(pos)
    }

    /// The first queued event that `pred` selects (e.g. a synchronous listener's
    /// CONNECT_REQUEST: `|e| e.listen_id == Some(l)`).
    #[must_use]
    pub fn poll_event_where(&mut self, pred: impl Fn(&CmEvent) -> bool) -> Option<CmEvent> {
        let pos = self.events.iter().position(pred)?;
        self.events.remove(pos)
    }

    /// The next event of any channel.
    #[must_use]
    pub fn poll_any_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// The next QP transition the driver must make (drain before `poll_transmit`).
    #[must_use]
    pub fn poll_qp_action(&mut self) -> Option<(CmIdHandle, QpAction)> {
        self.qp_actions.pop_front()
    }

    /// How many events are queued (all channels).
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// How many events are queued for `channel`.
    pub fn pending_for(&self, channel: Option<ChannelId>) -> usize {
        self.events.iter().filter(|e| e.channel == channel).count()
    }

    /// The next MAD to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.tx.pop_front()
    }

    /// The earliest deadline, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter_map(|s| s.id.as_ref().and_then(|id| id.deadline))
            .min()
    }

    // ---- sending -------------------------------------------------------------

    fn send(&mut self, src: IpAddr, dst: IpAddr, mad: &CmMadRepr) -> Transmit {
        let t = Transmit {
            src,
            dst,
            mad: mad.to_bytes(),
        };
        trace!("tx {:?}", t);
        self.stats.mads_out += 1;
        self.tx.push_back(t.clone());
        t
    }

    fn addrs(&self, idx: usize) -> (IpAddr, IpAddr) {
        let id = self.id(idx);
        let unspec = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        (
            id.local.map_or(unspec, |a| a.ip()),
            id.remote.map_or(unspec, |a| a.ip()),
        )
    }

    /// Send a MAD for id `idx` and (re)arm its retry timer.
    fn send_armed(
        &mut self,
        idx: usize,
        now: Instant,
        mad: &CmMadRepr,
        wait: Duration,
        retries: u8,
    ) {
        let (src, dst) = self.addrs(idx);
        let t = self.send(src, dst, mad);
        let id = self.id_mut(idx);
        id.last = Some(t);
        id.retries_left = retries;
        id.retry_timeout = wait;
        id.deadline = Some(now + wait);
        id.timer = Timer::Retry;
    }

    fn send_id(&mut self, idx: usize, mad: &CmMadRepr) {
        let (src, dst) = self.addrs(idx);
        let t = self.send(src, dst, mad);
        self.id_mut(idx).last = Some(t);
    }

    fn disarm(&mut self, idx: usize) {
        let id = self.id_mut(idx);
        id.deadline = None;
    }

    fn enter_timewait(&mut self, idx: usize, now: Instant) {
        let tw = self.cfg.timewait;
        let id = self.id_mut(idx);
        id.state = CmState::TimeWait;
        id.deadline = Some(now + tw);
        id.timer = Timer::TimeWait;
    }

    /// DISCONNECTED to the user. `err_qp`: also move a CM-managed QP to ERR (the connection is
    /// gone: REJ, DREP, DREQ timeout). A received DREQ does not: as with Linux's CM the QP stays
    /// usable until the user's own `rdma_disconnect` (which librdmacm's `ucma_modify_qp_err` and
    /// ours move to ERR), so an ACK still in flight completes the user's last SEND.
    fn report_disconnect(&mut self, idx: usize, err_qp: bool) {
        if !self.id(idx).disconnect_reported {
            self.id_mut(idx).disconnect_reported = true;
            if err_qp && self.id(idx).managed_qp {
                let h = self.handle(idx);
                self.qp_actions.push_back((h, QpAction::Error));
            }
            self.simple_event(idx, EventType::Disconnected, 0);
        }
    }

    fn rej_mad(&self, idx: usize, msg: MsgResponse, reason: RejReason, pd: &[u8]) -> CmMadRepr {
        let id = self.id(idx);
        let mut ari = [0u8; 72];
        let mut ari_length = 0;
        if reason == RejReason::Timeout {
            ari[..8].copy_from_slice(&self.cfg.ca_guid.to_be_bytes());
            ari_length = 8;
        }
        CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::Rej(RejRepr {
                local_comm_id: id.local_comm_id,
                remote_comm_id: id.remote_comm_id,
                message_rejected: msg,
                ari_length,
                reason,
                ari,
                private_data: padded(pd),
            }),
        }
    }

    fn dreq_mad(&self, idx: usize) -> CmMadRepr {
        let id = self.id(idx);
        CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::Dreq(DreqRepr {
                local_comm_id: id.local_comm_id,
                remote_comm_id: id.remote_comm_id,
                remote_qpn: id.remote_qpn,
                private_data: [0; 220],
            }),
        }
    }

    fn drep_mad(&self, idx: usize) -> CmMadRepr {
        let id = self.id(idx);
        CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::Drep(DrepRepr {
                local_comm_id: id.local_comm_id,
                remote_comm_id: id.remote_comm_id,
                private_data: [0; 224],
            }),
        }
    }

    fn rtu_mad(&self, idx: usize) -> CmMadRepr {
        let id = self.id(idx);
        CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::Rtu(RtuRepr {
                local_comm_id: id.local_comm_id,
                remote_comm_id: id.remote_comm_id,
                private_data: [0; 224],
            }),
        }
    }

    fn mra_mad(&self, idx: usize) -> CmMadRepr {
        let id = self.id(idx);
        CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::Mra(MraRepr {
                local_comm_id: id.local_comm_id,
                remote_comm_id: id.remote_comm_id,
                message_mraed: MsgResponse::Req,
                service_timeout: self.cfg.mra_service_timeout,
                private_data: [0; 222],
            }),
        }
    }

    // ---- application calls -------------------------------------------------------

    /// `rdma_create_id` on `channel` (`None`: synchronous id).
    pub fn create_id(
        &mut self,
        channel: Option<ChannelId>,
        ps: PortSpace,
        context: u64,
    ) -> CmIdHandle {
        let idx = self.alloc(Id::new(ps, channel, context));
        self.handle(idx)
    }

    /// The context given to `create_id` (children inherit the listener's).
    pub fn context(&self, h: CmIdHandle) -> Result<u64, Error> {
        Ok(self.id(self.index(h)?).context)
    }

    /// The state of an id.
    pub fn state(&self, h: CmIdHandle) -> Result<CmState, Error> {
        Ok(self.id(self.index(h)?).state)
    }

    /// Port space of an id.
    pub fn port_space(&self, h: CmIdHandle) -> Result<PortSpace, Error> {
        Ok(self.id(self.index(h)?).ps)
    }

    /// `rdma_get_local_addr`.
    pub fn local_addr(&self, h: CmIdHandle) -> Result<Option<SocketAddr>, Error> {
        Ok(self.id(self.index(h)?).local)
    }

    /// `rdma_get_peer_addr`.
    pub fn peer_addr(&self, h: CmIdHandle) -> Result<Option<SocketAddr>, Error> {
        Ok(self.id(self.index(h)?).remote)
    }

    /// `rdma_set_option`.
    pub fn set_option(&mut self, h: CmIdHandle, opt: CmOption) -> Result<(), Error> {
        let idx = self.live(h)?;
        let id = self.id_mut(idx);
        match opt {
            CmOption::Tos(t) => id.tos = t,
            CmOption::ReuseAddr(r) => id.reuse_addr = r,
            CmOption::AckTimeout(t) => id.ack_timeout = Some(t & 0x1f),
        }
        Ok(())
    }

    /// `rdma_set_local_ece`.
    pub fn set_local_ece(&mut self, h: CmIdHandle, ece: Ece) -> Result<(), Error> {
        let idx = self.live(h)?;
        self.id_mut(idx).local_ece = Ece {
            vendor_id: ece.vendor_id & 0x00ff_ffff,
            options: ece.options,
        };
        Ok(())
    }

    /// `rdma_get_remote_ece`.
    pub fn remote_ece(&self, h: CmIdHandle) -> Result<Ece, Error> {
        Ok(self.id(self.index(h)?).remote_ece)
    }

    /// Tell the CM that a QP (number `qp_num`) is attached to the id
    /// (`rdma_create_qp`): the REP is then answered with RTU at once and reported as
    /// ESTABLISHED (the driver moves the QP to RTR/RTS on that event).
    pub fn attach_qp(&mut self, h: CmIdHandle, qp_num: u32) -> Result<(), Error> {
        let idx = self.live(h)?;
        let id = self.id_mut(idx);
        id.managed_qp = true;
        id.local_qpn = qp_num & 0x00ff_ffff;
        Ok(())
    }

    /// `rdma_init_qp_attr`: what the QP needs for RTR/RTS, once both sides' numbers are known.
    pub fn qp_attrs(&self, h: CmIdHandle) -> Result<QpConnAttrs, Error> {
        let idx = self.index(h)?;
        let id = self.id(idx);
        if id.remote_qpn == 0 && !matches!(id.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(Error::InvalidState(id.state));
        }
        let (local, remote) = self.addrs(idx);
        // Linux convention (cm.c: ib_send_cm_req/rep set rq_psn to the PSN they
        // advertise; cm_req_handler/cm_rep_handler set sq_psn to the peer's): the
        // "starting PSN" of a REQ/REP is the PSN its *sender receives* from.
        Ok(QpConnAttrs {
            dest_qp_num: id.remote_qpn,
            rq_psn: id.local_psn,
            sq_psn: id.remote_psn,
            path_mtu: id.path_mtu,
            max_dest_rd_atomic: id.responder_resources,
            max_rd_atomic: id.initiator_depth,
            retry_cnt: id.retry_count,
            rnr_retry: id.rnr_retry_count,
            timeout: id.ack_timeout.unwrap_or(self.cfg.local_ack_timeout),
            local,
            remote,
            traffic_class: id.tos,
            hop_limit: self.cfg.hop_limit,
        })
    }

    fn port_in_use(&self, me: usize, ps: PortSpace, addr: SocketAddr, reuse: bool) -> bool {
        self.slots.iter().enumerate().any(|(i, s)| {
            let Some(id) = s.id.as_ref() else {
                return false;
            };
            i != me
                && !id.destroyed
                && id.ps == ps
                && (id.explicit_bind || id.state == CmState::Listen)
                && id.listening_parent.is_none()
                && id.local.is_some_and(|l| {
                    l.port() == addr.port()
                        && (l.ip().is_unspecified()
                            || addr.ip().is_unspecified()
                            || l.ip() == addr.ip())
                })
                && !(reuse && id.reuse_addr)
        })
    }

    fn ephemeral_port(&mut self, me: usize, ps: PortSpace) -> Result<u16, Error> {
        for _ in 0..28000 {
            let p = self.next_port;
            self.next_port = if p >= 60999 { 32768 } else { p + 1 };
            let used = self.slots.iter().enumerate().any(|(i, s)| {
                s.id.as_ref().is_some_and(|id| {
                    i != me
                        && !id.destroyed
                        && id.ps == ps
                        && id.listening_parent.is_none()
                        && id.local.is_some_and(|l| l.port() == p)
                })
            });
            if !used {
                return Ok(p);
            }
        }
        Err(Error::AddrInUse)
    }

    /// `rdma_bind_addr` (port 0: an ephemeral port).
    pub fn bind_addr(&mut self, h: CmIdHandle, addr: SocketAddr) -> Result<(), Error> {
        let idx = self.live(h)?;
        let id = self.id(idx);
        if id.state != CmState::Idle {
            return Err(Error::InvalidState(id.state));
        }
        if !addr.ip().is_unspecified() && !self.cfg.local_addrs.contains(&addr.ip()) {
            return Err(Error::AddrNotAvailable(addr.ip()));
        }
        let ps = id.ps;
        let reuse = id.reuse_addr;
        let port = if addr.port() == 0 {
            self.ephemeral_port(idx, ps)?
        } else {
            if self.port_in_use(idx, ps, addr, reuse) {
                return Err(Error::AddrInUse);
            }
            addr.port()
        };
        let id = self.id_mut(idx);
        id.local = Some(SocketAddr::new(addr.ip(), port));
        id.explicit_bind = true;
        id.state = CmState::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr` without a route lookup ([`RouteHint::Any`]).
    pub fn resolve_addr(
        &mut self,
        h: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), Error> {
        self.resolve_addr_routed(h, src, dst, timeout, RouteHint::Any)
    }

    /// `rdma_resolve_addr`: picks the source address (`src`, the bound address, the
    /// destination itself if local, else the address `route` says the kernel sends
    /// from; [`RouteHint::Any`]: the first local address of the family) and reports
    /// ADDR_RESOLVED or ADDR_ERROR at once (no ARP: the lower layer routes by IP).
    ///
    /// As the kernel's `cma.c`/`addr.c`: no route fails the call itself
    /// ([`Error::NoRoute`], `rdma_resolve_addr` returns −1 with `ENETUNREACH`); a
    /// source address with no device of ours is ADDR_ERROR `-ENODEV` (`addr_handler`
    /// failing `cma_acquire_dev_by_src_ip`).
    pub fn resolve_addr_routed(
        &mut self,
        h: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout: Duration,
        route: RouteHint,
    ) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        if !matches!(st, CmState::Idle | CmState::AddrBound) {
            return Err(Error::InvalidState(st));
        }
        if let Some(s) = src {
            if st == CmState::Idle {
                self.bind_addr(h, s)?;
            }
        }
        if let RouteHint::Unreachable(errno) = route {
            return Err(Error::NoRoute(errno));
        }
        let bound = self.id(idx).local;
        let same_family = |a: &IpAddr| a.is_ipv4() == dst.ip().is_ipv4();
        let local_ip = match bound.map(|b| b.ip()).filter(|ip| !ip.is_unspecified()) {
            Some(ip) => Some(ip),
            None if self.cfg.local_addrs.contains(&dst.ip()) => Some(dst.ip()),
            None => match route {
                RouteHint::Source(s) if self.cfg.local_addrs.contains(&s) => Some(s),
                // every 127/8 address is on `lo`: a loopback route may leave from
                // any of them, so from our loopback device if we have one
                RouteHint::Source(s) if s.is_loopback() => self
                    .cfg
                    .local_addrs
                    .iter()
                    .copied()
                    .find(|a| a.is_loopback() && same_family(a)),
                RouteHint::Source(s) => {
                    debug!(%s, dst = %dst.ip(), "ADDR_ERROR: no device for the route's source");
                    self.simple_event(idx, EventType::AddrError, ENODEV);
                    return Ok(());
                }
                _ => self.cfg.local_addrs.iter().copied().find(same_family),
            },
        };
        let ok = !dst.ip().is_unspecified()
            && !dst.ip().is_multicast()
            && local_ip.is_some_and(|l| l.is_ipv4() == dst.ip().is_ipv4());
        if !ok {
            self.simple_event(idx, EventType::AddrError, EHOSTUNREACH);
            return Ok(());
        }
        let local_ip = local_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let ps = self.id(idx).ps;
        let port = match bound {
            Some(b) => b.port(),
            None => self.ephemeral_port(idx, ps)?,
        };
        let id = self.id_mut(idx);
        id.local = Some(SocketAddr::new(local_ip, port));
        id.remote = Some(dst);
        id.state = CmState::AddrResolved;
        self.simple_event(idx, EventType::AddrResolved, 0);
        Ok(())
    }

    /// `rdma_resolve_route`: RoCE paths come from the addresses; reports ROUTE_RESOLVED.
    pub fn resolve_route(&mut self, h: CmIdHandle, _timeout: Duration) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        if st != CmState::AddrResolved {
            return Err(Error::InvalidState(st));
        }
        self.id_mut(idx).state = CmState::RouteResolved;
        self.simple_event(idx, EventType::RouteResolved, 0);
        Ok(())
    }

    /// `rdma_listen` (binds to `0.0.0.0:ephemeral` first if unbound).
    pub fn listen(&mut self, h: CmIdHandle, backlog: usize) -> Result<(), Error> {
        let idx = self.live(h)?;
        if self.id(idx).state == CmState::Idle {
            self.bind_addr(h, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
        }
        let st = self.id(idx).state;
        if st != CmState::AddrBound {
            return Err(Error::InvalidState(st));
        }
        let id = self.id_mut(idx);
        id.state = CmState::Listen;
        id.backlog = if backlog == 0 { 1024 } else { backlog };
        Ok(())
    }

    /// `rdma_connect`: REQ (TCP/IB port spaces) or SIDR_REQ (UDP), with the CMA
    /// header in front of `param.private_data` (at most 56 / 180 bytes).
    pub fn connect(&mut self, now: Instant, h: CmIdHandle, param: &ConnParam) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        if st != CmState::RouteResolved {
            return Err(Error::InvalidState(st));
        }
        let (local, remote) = {
            let id = self.id(idx);
            (
                id.local.ok_or(Error::InvalidState(st))?,
                id.remote.ok_or(Error::InvalidState(st))?,
            )
        };
        let ps = self.id(idx).ps;
        let cma = CmaHdrRepr {
            port: local.port(),
            src: local.ip(),
            dst: remote.ip(),
        };
        let comm = self.new_comm_id(idx);
        let tid = self.new_tid();
        if ps == PortSpace::Udp {
            check_pd(param.private_data.len(), SIDR_CONNECT_PRIVATE_DATA_MAX)?;
            let mut pd = [0u8; SIDR_REQ_PRIVATE_DATA_LEN];
            with_cma(cma, &param.private_data, &mut pd);
            let mad = CmMadRepr {
                tid,
                attr_mod: 0,
                msg: CmMsgRepr::SidrReq(SidrReqRepr {
                    request_id: comm,
                    pkey: 0xffff,
                    service_id: service_id(ps, remote.port()),
                    private_data: pd,
                }),
            };
            let id = self.id_mut(idx);
            id.local_comm_id = comm;
            id.tid = tid;
            id.state = CmState::SidrReqSent;
            let wait = self.retry_wait(self.cfg.cm_response_timeout);
            self.send_armed(idx, now, &mad, wait, self.cfg.max_cm_retries);
            return Ok(());
        }
        check_pd(param.private_data.len(), CONNECT_PRIVATE_DATA_MAX)?;
        let mut pd = [0u8; REQ_PRIVATE_DATA_LEN];
        with_cma(cma, &param.private_data, &mut pd);
        let psn = rand24(self.next_rand());
        let cfg = &self.cfg;
        let id = self.id(idx);
        let qpn = if id.managed_qp {
            id.local_qpn
        } else {
            param.qp_num & 0x00ff_ffff
        };
        let req = ReqRepr {
            local_comm_id: comm,
            vendor_id: id.local_ece.vendor_id,
            service_id: service_id(ps, remote.port()),
            local_ca_guid: cfg.ca_guid,
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: param.responder_resources,
            local_eecn: 0,
            initiator_depth: param.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            transport_type: TransportType::Rc,
            flow_control: param.flow_control,
            starting_psn: psn,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: param.retry_count & 7,
            pkey: 0xffff,
            path_mtu: cfg.path_mtu,
            rdc_exists: false,
            rnr_retry_count: param.rnr_retry_count & 7,
            max_cm_retries: cfg.max_cm_retries,
            srq: param.srq,
            extended_transport_type: 0,
            primary_path: CmPathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid_from_ip(local.ip()),
                remote_gid: gid_from_ip(remote.ip()),
                flow_label: 0,
                packet_rate: 0,
                traffic_class: id.tos,
                hop_limit: cfg.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: id.ack_timeout.unwrap_or(cfg.local_ack_timeout),
            },
            alternate_path: CmPathRepr::default(),
            sap_supported: false,
            private_data: pd,
        };
        let mad = CmMadRepr {
            tid,
            attr_mod: id.local_ece.options,
            msg: CmMsgRepr::Req(req),
        };
        let path_mtu = cfg.path_mtu;
        let wait = self.retry_wait(self.cfg.cm_response_timeout);
        let retries = self.cfg.max_cm_retries;
        let resp_to = self.cfg.cm_response_timeout;
        let id = self.id_mut(idx);
        id.local_comm_id = comm;
        id.tid = tid;
        id.local_qpn = qpn;
        id.local_psn = psn;
        id.responder_resources = param.responder_resources;
        id.initiator_depth = param.initiator_depth;
        id.retry_count = param.retry_count & 7;
        id.rnr_retry_count = param.rnr_retry_count & 7;
        id.path_mtu = path_mtu;
        id.peer_response_timeout = resp_to;
        id.state = CmState::ReqSent;
        self.send_armed(idx, now, &mad, wait, retries);
        Ok(())
    }

    /// `rdma_accept`: REP (at most 196 bytes of private data) or, for UDP, SIDR_REP
    /// (136). For RC the driver must have moved the QP to RTR/RTS (see `qp_attrs`)
    /// before the REP leaves.
    pub fn accept(&mut self, now: Instant, h: CmIdHandle, param: &ConnParam) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        match st {
            CmState::SidrReqRcvd => {
                check_pd(param.private_data.len(), SIDR_ACCEPT_PRIVATE_DATA_MAX)?;
                let id = self.id(idx);
                let qpn = if id.managed_qp {
                    id.local_qpn
                } else {
                    param.qp_num & 0x00ff_ffff
                };
                let mad = CmMadRepr {
                    tid: id.tid,
                    attr_mod: 0,
                    msg: CmMsgRepr::SidrRep(SidrRepRepr {
                        request_id: id.remote_comm_id,
                        status: SidrStatus::Success,
                        info_length: 0,
                        vendor_id: id.local_ece.vendor_id,
                        qpn,
                        service_id: service_id(id.ps, id.local.map_or(0, |l| l.port())),
                        qkey: RDMA_UDP_QKEY,
                        info: [0; 72],
                        private_data: padded(&param.private_data),
                    }),
                };
                self.send_id(idx, &mad);
                self.id_mut(idx).state = CmState::SidrRepSent;
                Ok(())
            }
            CmState::ReqRcvd | CmState::MraReqSent => {
                check_pd(param.private_data.len(), ACCEPT_PRIVATE_DATA_MAX)?;
                // Chosen when the REQ arrived, so `qp_attrs` (RTR/RTS before the REP
                // leaves) and the REP agree.
                let psn = self.id(idx).local_psn;
                let id = self.id(idx);
                let qpn = if id.managed_qp {
                    id.local_qpn
                } else {
                    param.qp_num & 0x00ff_ffff
                };
                let mad = CmMadRepr {
                    tid: id.tid,
                    attr_mod: id.local_ece.options,
                    msg: CmMsgRepr::Rep(RepRepr {
                        local_comm_id: id.local_comm_id,
                        remote_comm_id: id.remote_comm_id,
                        local_qkey: 0,
                        local_qpn: qpn,
                        local_eecn: 0,
                        starting_psn: psn,
                        responder_resources: param.responder_resources,
                        initiator_depth: param.initiator_depth,
                        target_ack_delay: self.cfg.target_ack_delay,
                        failover_accepted: 0,
                        flow_control: param.flow_control,
                        rnr_retry_count: param.rnr_retry_count & 7,
                        srq: param.srq,
                        local_ca_guid: self.cfg.ca_guid,
                        vendor_id: id.local_ece.vendor_id,
                        private_data: padded(&param.private_data),
                    }),
                };
                let wait = self.retry_wait(id.peer_response_timeout);
                let retries = id.peer_max_retries;
                let id = self.id_mut(idx);
                id.local_qpn = qpn;
                id.local_psn = psn;
                id.responder_resources = param.responder_resources;
                id.initiator_depth = param.initiator_depth;
                id.state = CmState::RepSent;
                self.send_armed(idx, now, &mad, wait, retries);
                Ok(())
            }
            _ => Err(Error::InvalidState(st)),
        }
    }

    /// `rdma_reject` with `reason` (default: consumer reject, 28); for UDP a
    /// SIDR_REP with status Reject.
    pub fn reject(
        &mut self,
        h: CmIdHandle,
        private_data: &[u8],
        reason: Option<RejReason>,
    ) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        match st {
            CmState::SidrReqRcvd => {
                check_pd(private_data.len(), SIDR_ACCEPT_PRIVATE_DATA_MAX)?;
                self.sidr_reply(idx, SidrStatus::Reject, private_data);
                self.id_mut(idx).state = CmState::SidrRepSent;
                Ok(())
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd => {
                check_pd(private_data.len(), REJECT_PRIVATE_DATA_MAX)?;
                let msg = if st == CmState::RepRcvd {
                    MsgResponse::Rep
                } else {
                    MsgResponse::Req
                };
                let mad = self.rej_mad(
                    idx,
                    msg,
                    reason.unwrap_or(RejReason::ConsumerDefined),
                    private_data,
                );
                self.send_id(idx, &mad);
                self.disarm(idx);
                self.id_mut(idx).state = CmState::Idle;
                Ok(())
            }
            _ => Err(Error::InvalidState(st)),
        }
    }

    /// `rdma_reject_ece`: reject because the remote ECE options are unsupported (reason 35).
    pub fn reject_ece(&mut self, h: CmIdHandle) -> Result<(), Error> {
        self.reject(h, &[], Some(RejReason::VendorOptionNotSupported))
    }

    fn sidr_reply(&mut self, idx: usize, status: SidrStatus, pd: &[u8]) {
        let id = self.id(idx);
        let mad = CmMadRepr {
            tid: id.tid,
            attr_mod: 0,
            msg: CmMsgRepr::SidrRep(SidrRepRepr {
                request_id: id.remote_comm_id,
                status,
                info_length: 0,
                vendor_id: 0,
                qpn: 0,
                service_id: service_id(id.ps, id.local.map_or(0, |l| l.port())),
                qkey: 0,
                info: [0; 72],
                private_data: padded(pd),
            }),
        };
        self.send_id(idx, &mad);
    }

    /// `rdma_establish` (active side without a CM-managed QP, after CONNECT_RESPONSE): sends RTU.
    pub fn establish(&mut self, h: CmIdHandle) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        if st != CmState::RepRcvd {
            return Err(Error::InvalidState(st));
        }
        let mad = self.rtu_mad(idx);
        self.send_id(idx, &mad);
        self.id_mut(idx).state = CmState::Established;
        Ok(())
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`: data arrived before the RTU (lost RTU).
    pub fn notify(&mut self, h: CmIdHandle) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        if st == CmState::RepSent {
            self.disarm(idx);
            self.id_mut(idx).state = CmState::Established;
            self.simple_event(idx, EventType::Established, 0);
        }
        Ok(())
    }

    /// `rdma_disconnect`: DREQ (or the DREP owed after a received DREQ).
    pub fn disconnect(&mut self, now: Instant, h: CmIdHandle) -> Result<(), Error> {
        let idx = self.live(h)?;
        let st = self.id(idx).state;
        match st {
            CmState::Established | CmState::RepSent | CmState::RepRcvd => {
                if self.id(idx).ps == PortSpace::Udp {
                    return Ok(());
                }
                let mad = self.dreq_mad(idx);
                let wait = self.retry_wait(self.id(idx).peer_response_timeout);
                if self.id(idx).managed_qp {
                    self.qp_actions.push_back((h, QpAction::Error));
                }
                self.send_armed(idx, now, &mad, wait, self.cfg.max_cm_retries);
                self.id_mut(idx).state = CmState::DreqSent;
                Ok(())
            }
            CmState::DreqRcvd => {
                if self.id(idx).managed_qp {
                    self.qp_actions.push_back((h, QpAction::Error));
                }
                let mad = self.drep_mad(idx);
                self.send_id(idx, &mad);
                self.enter_timewait(idx, now);
                Ok(())
            }
            CmState::DreqSent | CmState::TimeWait => Ok(()),
            _ => Err(Error::InvalidState(st)),
        }
    }

    /// `rdma_destroy_id`: the handle dies at once; whatever the peer is owed (REJ,
    /// DREQ, DREP) is sent, and the comm ID is held through TIMEWAIT.
    pub fn destroy_id(&mut self, now: Instant, h: CmIdHandle) -> Result<(), Error> {
        let idx = self.index(h)?;
        if self.removed {
            // the device is gone: nothing is owed to anyone, no TIMEWAIT to hold
            self.id_mut(idx).state = CmState::Idle;
        }
        let st = self.id(idx).state;
        match st {
            CmState::ReqSent => {
                let mad = self.rej_mad(idx, MsgResponse::Req, RejReason::Timeout, &[]);
                self.send_id(idx, &mad);
                self.id_mut(idx).state = CmState::Idle;
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepSent => {
                let mad = self.rej_mad(idx, MsgResponse::Req, RejReason::ConsumerDefined, &[]);
                self.send_id(idx, &mad);
                self.id_mut(idx).state = CmState::Idle;
            }
            CmState::MraReqRcvd | CmState::RepRcvd => {
                let msg = if st == CmState::RepRcvd {
                    MsgResponse::Rep
                } else {
                    MsgResponse::Req
                };
                let mad = self.rej_mad(idx, msg, RejReason::ConsumerDefined, &[]);
                self.send_id(idx, &mad);
                self.id_mut(idx).state = CmState::Idle;
            }
            CmState::Established if self.id(idx).ps != PortSpace::Udp => {
                let mad = self.dreq_mad(idx);
                self.send_id(idx, &mad);
                self.enter_timewait(idx, now);
            }
            CmState::DreqSent => self.enter_timewait(idx, now),
            CmState::DreqRcvd => {
                if self.id(idx).managed_qp {
                    self.qp_actions.push_back((h, QpAction::Error));
                }
                let mad = self.drep_mad(idx);
                self.send_id(idx, &mad);
                self.enter_timewait(idx, now);
            }
            CmState::SidrReqRcvd => {
                self.sidr_reply(idx, SidrStatus::Reject, &[]);
                self.id_mut(idx).state = CmState::Idle;
            }
            _ => {}
        }
        if self.id(idx).state != CmState::TimeWait {
            self.disarm(idx);
        }
        self.id_mut(idx).destroyed = true;
        self.events.retain(|e| e.id != h);
        // The handle must die now even if the slot is held for TIMEWAIT.
        if self.id(idx).state == CmState::TimeWait {
            self.slots[idx].gen = self.slots[idx].gen.wrapping_add(1);
        }
        self.maybe_release(idx);
        Ok(())
    }

    /// The device is gone (kernel `cma_process_remove`): every id with an address
    /// on it (bound, resolved, listening — wildcard listeners too, they listen on
    /// this device only — or connected) gets DEVICE_REMOVAL (status 0, as
    /// `cma_send_device_removal_put`); ids never bound get none. Timers stop, nothing
    /// more is sent, MADs are ignored, and every later call on any id fails with
    /// [`Error::NoDevice`] (`ENODEV`) except `destroy_id`. Idempotent.
    pub fn device_removal(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        self.tx.clear();
        for idx in 0..self.slots.len() {
            let Some((destroyed, bound, state)) = self.slots[idx]
                .id
                .as_ref()
                .map(|id| (id.destroyed, id.local.is_some(), id.state))
            else {
                continue;
            };
            if destroyed {
                // held only for TIMEWAIT: nothing will be reported for it
                self.id_mut(idx).state = CmState::Idle;
                self.release(idx);
                continue;
            }
            self.disarm(idx);
            if bound || state != CmState::Idle {
                self.simple_event(idx, EventType::DeviceRemoval, 0);
            }
        }
    }

    /// A local address went away or changed: ids bound to it get ADDR_CHANGE
    /// (status 0). They stay usable; librdmacm applications destroy and re-resolve.
    pub fn addr_change(&mut self, ip: IpAddr) {
        if self.removed {
            return;
        }
        for idx in 0..self.slots.len() {
            let hit = self.slots[idx]
                .id
                .as_ref()
                .is_some_and(|id| !id.destroyed && id.local.is_some_and(|l| l.ip() == ip));
            if hit {
                self.simple_event(idx, EventType::AddrChange, 0);
            }
        }
    }

    // ---- time ----------------------------------------------------------------------

    /// Run every timer due at `now` (idempotent).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.removed {
            return;
        }
        for idx in 0..self.slots.len() {
            let due = self.slots[idx]
                .id
                .as_ref()
                .is_some_and(|id| id.deadline.is_some_and(|d| d <= now));
            if due {
                self.on_timer(idx, now);
            }
        }
    }

    fn on_timer(&mut self, idx: usize, now: Instant) {
        let id = self.id_mut(idx);
        id.deadline = None;
        if id.timer == Timer::TimeWait {
            id.state = CmState::Idle;
            let key = (id.remote_comm_id, id.remote_ca_guid);
            let comm = id.local_comm_id;
            if self.by_remote.get(&key) == Some(&idx) {
                self.by_remote.remove(&key);
            }
            if self.by_local_comm.get(&comm) == Some(&idx) {
                self.by_local_comm.remove(&comm);
            }
            self.simple_event(idx, EventType::TimewaitExit, 0);
            self.maybe_release(idx);
            return;
        }
        if id.retries_left > 0 {
            id.retries_left -= 1;
            id.deadline = Some(now + id.retry_timeout);
            if let Some(t) = id.last.clone() {
                self.stats.retransmits += 1;
                self.stats.mads_out += 1;
                trace!("retransmit {:?}", t);
                self.tx.push_back(t);
            }
            return;
        }
        let st = id.state;
        self.stats.timeouts += 1;
        debug!(id = %self.handle(idx), ?st, "CM timeout");
        match st {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent => {
                let mad = self.rej_mad(idx, MsgResponse::Req, RejReason::Timeout, &[]);
                self.send_id(idx, &mad);
                self.id_mut(idx).state = CmState::Idle;
                self.simple_event(idx, EventType::Unreachable, ETIMEDOUT);
            }
            CmState::SidrReqSent => {
                self.id_mut(idx).state = CmState::Idle;
                self.simple_event(idx, EventType::Unreachable, ETIMEDOUT);
            }
            CmState::DreqSent => {
                self.enter_timewait(idx, now);
                self.report_disconnect(idx, true);
            }
            _ => {}
        }
        self.maybe_release(idx);
    }

    // ---- receive -------------------------------------------------------------------

    /// A MAD arrived on QP1 from `src` (the sender's IP / GID) for local address `dst`.
    pub fn handle_mad(&mut self, now: Instant, src: IpAddr, dst: IpAddr, bytes: &[u8]) {
        self.stats.mads_in += 1;
        if self.removed {
            return;
        }
        let mad = match Mad::new_checked(bytes).and_then(|m| CmMadRepr::parse(&m)) {
            Ok(m) => m,
            Err(e) => {
                trace!("drop MAD from {src}: {e}");
                self.stats.dropped_malformed += 1;
                return;
            }
        };
        trace!("rx {src} -> {dst}: {mad}");
        let tid = mad.tid;
        let attr_mod = mad.attr_mod;
        match mad.msg {
            CmMsgRepr::Req(r) => self.on_req(src, dst, tid, attr_mod, r),
            CmMsgRepr::Rep(r) => self.on_rep(src, dst, tid, attr_mod, r),
            CmMsgRepr::Rtu(r) => self.on_rtu(r),
            CmMsgRepr::Rej(r) => self.on_rej(now, src, r),
            CmMsgRepr::Mra(r) => self.on_mra(now, r),
            CmMsgRepr::Dreq(r) => self.on_dreq(now, src, dst, tid, r),
            CmMsgRepr::Drep(r) => self.on_drep(now, r),
            CmMsgRepr::SidrReq(r) => self.on_sidr_req(src, dst, tid, r),
            CmMsgRepr::SidrRep(r) => self.on_sidr_rep(src, r),
        }
    }

    fn unmatched(&mut self, what: &str) {
        trace!("unmatched {what}");
        self.stats.dropped_unmatched += 1;
    }

    fn lookup_local(&self, comm: u32) -> Option<usize> {
        self.by_local_comm.get(&comm).copied()
    }

    fn find_listener(&self, ps: PortSpace, port: u16, dst: IpAddr) -> Option<usize> {
        let mut wildcard = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(id) = s.id.as_ref() else { continue };
            if id.destroyed || id.state != CmState::Listen || id.ps != ps {
                continue;
            }
            let Some(l) = id.local else { continue };
            if l.port() != port {
                continue;
            }
            if l.ip() == dst {
                return Some(i);
            }
            if l.ip().is_unspecified() {
                wildcard = Some(i);
            }
        }
        wildcard
    }

    fn pending_children(&self, listener: usize) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.id.as_ref())
            .filter(|id| {
                id.listening_parent == Some(listener) && !id.destroyed && id.is_pending_child()
            })
            .count()
    }

    /// A REJ for a REQ we have no id for.
    fn reject_stray_req(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        tid: u64,
        remote_comm: u32,
        reason: RejReason,
    ) {
        let mad = CmMadRepr {
            tid,
            attr_mod: 0,
            msg: CmMsgRepr::Rej(RejRepr {
                local_comm_id: 0,
                remote_comm_id: remote_comm,
                message_rejected: MsgResponse::Req,
                ari_length: 0,
                reason,
                ari: [0; 72],
                private_data: [0; REJ_PRIVATE_DATA_LEN],
            }),
        };
        self.send(dst, src, &mad);
    }

    fn on_req(&mut self, src: IpAddr, dst: IpAddr, tid: u64, attr_mod: u32, r: ReqRepr) {
        let key = (r.local_comm_id, r.local_ca_guid);
        if let Some(&idx) = self.by_remote.get(&key) {
            // A duplicate (our answer was lost or is slow) or a stale REQ.
            match self.id(idx).state {
                CmState::ReqRcvd | CmState::MraReqSent => {
                    let mad = self.mra_mad(idx);
                    let (s, d) = self.addrs(idx);
                    self.send(s, d, &mad);
                    self.id_mut(idx).state = CmState::MraReqSent;
                }
                CmState::RepSent => {
                    if let Some(t) = self.id(idx).last.clone() {
                        self.stats.mads_out += 1;
                        self.tx.push_back(t);
                    }
                }
                CmState::TimeWait => {
                    let mad = self.rej_mad(idx, MsgResponse::Req, RejReason::StaleConn, &[]);
                    let (s, d) = self.addrs(idx);
                    self.send(s, d, &mad);
                }
                CmState::Idle => {
                    // We rejected it: our REJ was lost, send it again.
                    let last = self.id(idx).last.clone();
                    match last {
                        Some(t)
                            if matches!(
                                CmMadRepr::parse_bytes(&t.mad).map(|m| m.msg),
                                Ok(CmMsgRepr::Rej(_))
                            ) =>
                        {
                            self.stats.mads_out += 1;
                            self.tx.push_back(t);
                        }
                        _ => self.unmatched("duplicate REQ"),
                    }
                }
                _ => self.unmatched("duplicate REQ"),
            }
            return;
        }
        let Some((ps, port)) = parse_service_id(r.service_id) else {
            self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::InvalidServiceId);
            return;
        };
        let Some(lidx) = self.find_listener(ps, port, dst) else {
            self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::InvalidServiceId);
            return;
        };
        if r.transport_type != TransportType::Rc {
            self.reject_stray_req(
                src,
                dst,
                tid,
                r.local_comm_id,
                RejReason::InvalidTransportType,
            );
            return;
        }
        let cma = match CmaHdr::new_checked(&r.private_data[..]).and_then(|h| CmaHdrRepr::parse(&h))
        {
            Ok(c) => c,
            Err(_) => {
                self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::ConsumerDefined);
                return;
            }
        };
        if self.pending_children(lidx) >= self.id(lidx).backlog {
            self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::ConsumerDefined);
            return;
        }
        if self.at_id_bound() {
            self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::NoResources);
            return;
        }
        // Stale: the peer reuses a QPN we still think is connected.
        let stale = self.slots.iter().filter_map(|s| s.id.as_ref()).any(|id| {
            matches!(id.state, CmState::Established | CmState::RepSent)
                && id.remote_qpn == r.local_qpn
                && id.remote.is_some_and(|a| a.ip() == src)
                && id.remote_ca_guid == r.local_ca_guid
        });
        if stale {
            self.reject_stray_req(src, dst, tid, r.local_comm_id, RejReason::StaleConn);
            return;
        }
        let (channel, context) = {
            let l = self.id(lidx);
            (l.channel, l.context)
        };
        let mut child = Id::new(ps, channel, context);
        child.state = CmState::ReqRcvd;
        child.listening_parent = Some(lidx);
        child.local = Some(SocketAddr::new(dst, port));
        // Replies go to the sender of the REQ; the CMA header gives the peer's port.
        child.remote = Some(SocketAddr::new(src, cma.port));
        child.remote_comm_id = r.local_comm_id;
        child.remote_ca_guid = r.local_ca_guid;
        child.tid = tid;
        child.remote_qpn = r.local_qpn;
        child.remote_psn = r.starting_psn;
        child.responder_resources = r.initiator_depth;
        child.initiator_depth = r.responder_resources;
        child.retry_count = r.retry_count;
        child.rnr_retry_count = r.rnr_retry_count;
        child.path_mtu = r.path_mtu.min(self.cfg.path_mtu);
        child.peer_response_timeout = r.local_cm_response_timeout;
        child.peer_max_retries = r.max_cm_retries;
        child.remote_ece = Ece {
            vendor_id: r.vendor_id,
            options: attr_mod,
        };
        child.local_psn = rand24(self.next_rand());
        child.tos = r.primary_path.traffic_class;
        child.ack_timeout = Some(r.primary_path.local_ack_timeout);
        let idx = self.alloc(child);
        let comm = self.new_comm_id(idx);
        self.id_mut(idx).local_comm_id = comm;
        self.by_remote.insert(key, idx);
        let param = ConnParam {
            private_data: r.private_data[CMA_HDR_LEN..].to_vec(),
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        let ece = self.id(idx).remote_ece;
        let listen = self.handle(lidx);
        self.push_event(
            idx,
            EventType::ConnectRequest,
            0,
            param,
            None,
            ece,
            Some(listen),
        );
    }

    fn on_rep(&mut self, src: IpAddr, dst: IpAddr, tid: u64, attr_mod: u32, r: RepRepr) {
        let Some(idx) = self.lookup_local(r.remote_comm_id) else {
            // Unknown connection: tell the peer (kernel: REJ invalid comm ID).
            let mad = CmMadRepr {
                tid,
                attr_mod: 0,
                msg: CmMsgRepr::Rej(RejRepr {
                    local_comm_id: 0,
                    remote_comm_id: r.local_comm_id,
                    message_rejected: MsgResponse::Rep,
                    ari_length: 0,
                    reason: RejReason::InvalidCommId,
                    ari: [0; 72],
                    private_data: [0; REJ_PRIVATE_DATA_LEN],
                }),
            };
            self.send(dst, src, &mad);
            self.stats.dropped_unmatched += 1;
            return;
        };
        let st = self.id(idx).state;
        match st {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.disarm(idx);
                let managed = {
                    let id = self.id_mut(idx);
                    id.remote_comm_id = r.local_comm_id;
                    id.remote_ca_guid = r.local_ca_guid;
                    id.remote_qpn = r.local_qpn;
                    id.remote_psn = r.starting_psn;
                    id.remote_ece = Ece {
                        vendor_id: r.vendor_id,
                        options: attr_mod,
                    };
                    // The kernel CM: our initiator depth is the peer's responder resources.
                    id.initiator_depth = r.responder_resources;
                    id.responder_resources = r.initiator_depth;
                    id.rnr_retry_count = r.rnr_retry_count;
                    id.managed_qp
                };
                self.by_remote
                    .insert((r.local_comm_id, r.local_ca_guid), idx);
                let param = ConnParam {
                    private_data: r.private_data.to_vec(),
                    responder_resources: r.initiator_depth,
                    initiator_depth: r.responder_resources,
                    flow_control: r.flow_control,
                    retry_count: self.id(idx).retry_count,
                    rnr_retry_count: r.rnr_retry_count,
                    srq: r.srq,
                    qp_num: r.local_qpn,
                };
                let ece = self.id(idx).remote_ece;
                if managed {
                    let mad = self.rtu_mad(idx);
                    self.id_mut(idx).state = CmState::Established;
                    if let Ok(attrs) = self.qp_attrs(self.handle(idx)) {
                        let h = self.handle(idx);
                        self.qp_actions.push_back((h, QpAction::ReadyToSend(attrs)));
                    }
                    self.push_event(idx, EventType::Established, 0, param, None, ece, None);
                    self.send_id(idx, &mad);
                } else {
                    self.id_mut(idx).state = CmState::RepRcvd;
                    self.push_event(idx, EventType::ConnectResponse, 0, param, None, ece, None);
                }
            }
            CmState::Established if self.id(idx).remote_comm_id == r.local_comm_id => {
                // Our RTU was lost: resend it.
                let mad = self.rtu_mad(idx);
                self.send_id(idx, &mad);
            }
            _ => self.unmatched("REP"),
        }
    }

    fn on_rtu(&mut self, r: RtuRepr) {
        let Some(idx) = self.lookup_local(r.remote_comm_id) else {
            return self.unmatched("RTU");
        };
        if self.id(idx).state == CmState::RepSent && self.id(idx).remote_comm_id == r.local_comm_id
        {
            self.disarm(idx);
            self.id_mut(idx).state = CmState::Established;
            self.simple_event(idx, EventType::Established, 0);
        } else {
            self.unmatched("RTU");
        }
    }

    fn on_rej(&mut self, now: Instant, src: IpAddr, r: RejRepr) {
        // As the kernel's cm_rej_handler: a REJ(timeout) names the sender's CA GUID in
        // its ARI, so the receiver can find the connection by the sender's comm ID even
        // if the sender never learnt ours (active side giving up on its REQ).
        let by_ari = || {
            (r.reason == RejReason::Timeout && r.ari_length >= 8).then(|| {
                let mut g = [0u8; 8];
                g.copy_from_slice(&r.ari[..8]);
                (r.local_comm_id, u64::from_be_bytes(g))
            })
        };
        let found = self
            .lookup_local(r.remote_comm_id)
            .or_else(|| by_ari().and_then(|k| self.by_remote.get(&k).copied()))
            .or_else(|| {
                (r.remote_comm_id == 0 && r.local_comm_id != 0)
                    .then(|| {
                        self.slots.iter().position(|s| {
                            s.id.as_ref().is_some_and(|id| {
                                id.listening_parent.is_some()
                                    && id.remote_comm_id == r.local_comm_id
                                    && id.remote.is_some_and(|a| a.ip() == src)
                            })
                        })
                    })
                    .flatten()
            });
        let Some(idx) = found else {
            return self.unmatched("REJ");
        };
        let st = self.id(idx).state;
        let param = ConnParam {
            private_data: r.private_data.to_vec(),
            ..ConnParam::default()
        };
        let status = i32::from(u16::from(r.reason));
        match st {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepRcvd
            | CmState::RepSent
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                self.disarm(idx);
                self.id_mut(idx).state = CmState::Idle;
                self.push_event(
                    idx,
                    EventType::Rejected,
                    status,
                    param,
                    None,
                    Ece::default(),
                    None,
                );
                self.maybe_release(idx);
            }
            CmState::Established | CmState::DreqSent => {
                self.disarm(idx);
                self.enter_timewait(idx, now);
                self.report_disconnect(idx, true);
            }
            _ => self.unmatched("REJ"),
        }
    }

    fn on_mra(&mut self, now: Instant, r: MraRepr) {
        let Some(idx) = self.lookup_local(r.remote_comm_id) else {
            return self.unmatched("MRA");
        };
        let st = self.id(idx).state;
        let ok = matches!(
            (st, r.message_mraed),
            (CmState::ReqSent | CmState::MraReqRcvd, MsgResponse::Req)
                | (CmState::RepSent, MsgResponse::Rep)
        );
        if !ok {
            return self.unmatched("MRA");
        }
        let wait = cm_timeout(r.service_timeout) + 2 * cm_timeout(self.cfg.packet_life_time);
        let id = self.id_mut(idx);
        if st != CmState::RepSent {
            id.state = CmState::MraReqRcvd;
            id.remote_comm_id = r.local_comm_id;
        }
        id.deadline = Some(now + wait);
    }

    fn on_dreq(&mut self, now: Instant, src: IpAddr, dst: IpAddr, tid: u64, r: DreqRepr) {
        let found = self
            .lookup_local(r.remote_comm_id)
            .filter(|&i| self.id(i).remote_comm_id == r.local_comm_id);
        let Some(idx) = found else {
            // Kernel behaviour: answer an unknown DREQ with a DREP.
            let mad = CmMadRepr {
                tid,
                attr_mod: 0,
                msg: CmMsgRepr::Drep(DrepRepr {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    private_data: [0; 224],
                }),
            };
            self.send(dst, src, &mad);
            self.stats.dropped_unmatched += 1;
            return;
        };
        match self.id(idx).state {
            CmState::Established | CmState::RepSent | CmState::RepRcvd => {
                self.disarm(idx);
                self.id_mut(idx).state = CmState::DreqRcvd;
                self.id_mut(idx).tid = tid;
                self.report_disconnect(idx, false);
            }
            CmState::DreqSent => {
                // Both sides disconnect at once.
                let mad = self.drep_mad(idx);
                self.send_id(idx, &mad);
                self.enter_timewait(idx, now);
                self.report_disconnect(idx, true);
            }
            CmState::TimeWait => {
                let mad = self.drep_mad(idx);
                let (s, d) = self.addrs(idx);
                self.send(s, d, &mad);
            }
            _ => self.unmatched("DREQ"),
        }
    }

    fn on_drep(&mut self, now: Instant, r: DrepRepr) {
        let Some(idx) = self.lookup_local(r.remote_comm_id) else {
            return self.unmatched("DREP");
        };
        if self.id(idx).state == CmState::DreqSent {
            self.disarm(idx);
            self.enter_timewait(idx, now);
            self.report_disconnect(idx, true);
        } else {
            self.unmatched("DREP");
        }
    }

    fn on_sidr_req(&mut self, src: IpAddr, dst: IpAddr, tid: u64, r: SidrReqRepr) {
        if let Some(&idx) = self.sidr_seen.get(&(src, r.request_id)) {
            if self.id(idx).state == CmState::SidrRepSent {
                if let Some(t) = self.id(idx).last.clone() {
                    self.stats.mads_out += 1;
                    self.tx.push_back(t);
                }
            }
            return;
        }
        let stray = |e: &mut Self, status: SidrStatus| {
            let mad = CmMadRepr {
                tid,
                attr_mod: 0,
                msg: CmMsgRepr::SidrRep(SidrRepRepr {
                    request_id: r.request_id,
                    status,
                    info_length: 0,
                    vendor_id: 0,
                    qpn: 0,
                    service_id: r.service_id,
                    qkey: 0,
                    info: [0; 72],
                    private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
                }),
            };
            e.send(dst, src, &mad);
        };
        let Some((ps, port)) = parse_service_id(r.service_id) else {
            return stray(self, SidrStatus::Unsupported);
        };
        let Some(lidx) = self.find_listener(ps, port, dst) else {
            return stray(self, SidrStatus::Unsupported);
        };
        let cma = match CmaHdr::new_checked(&r.private_data[..]).and_then(|h| CmaHdrRepr::parse(&h))
        {
            Ok(c) => c,
            Err(_) => return stray(self, SidrStatus::Reject),
        };
        if self.pending_children(lidx) >= self.id(lidx).backlog || self.at_id_bound() {
            return stray(self, SidrStatus::NoQp);
        }
        let (channel, context) = {
            let l = self.id(lidx);
            (l.channel, l.context)
        };
        let mut child = Id::new(ps, channel, context);
        child.state = CmState::SidrReqRcvd;
        child.listening_parent = Some(lidx);
        child.local = Some(SocketAddr::new(dst, port));
        child.remote = Some(SocketAddr::new(src, cma.port));
        child.remote_comm_id = r.request_id;
        child.tid = tid;
        let idx = self.alloc(child);
        self.sidr_seen.insert((src, r.request_id), idx);
        let param = ConnParam {
            private_data: r.private_data[CMA_HDR_LEN..].to_vec(),
            ..ConnParam::default()
        };
        let ud = UdParam {
            qp_num: 0,
            qkey: 0,
            remote: src,
        };
        let listen = self.handle(lidx);
        self.push_event(
            idx,
            EventType::ConnectRequest,
            0,
            param,
            Some(ud),
            Ece::default(),
            Some(listen),
        );
    }

    fn on_sidr_rep(&mut self, src: IpAddr, r: SidrRepRepr) {
        let Some(idx) = self.lookup_local(r.request_id) else {
            return self.unmatched("SIDR_REP");
        };
        if self.id(idx).state != CmState::SidrReqSent {
            return self.unmatched("SIDR_REP");
        }
        self.disarm(idx);
        if r.status == SidrStatus::Success {
            let id = self.id_mut(idx);
            id.state = CmState::Established;
            id.remote_qpn = r.qpn;
            id.remote_ece = Ece {
                vendor_id: r.vendor_id,
                options: 0,
            };
            let param = ConnParam {
                private_data: r.private_data.to_vec(),
                qp_num: r.qpn,
                ..ConnParam::default()
            };
            let ud = UdParam {
                qp_num: r.qpn,
                qkey: r.qkey,
                remote: src,
            };
            self.push_event(
                idx,
                EventType::Established,
                0,
                param,
                Some(ud),
                Ece::default(),
                None,
            );
        } else {
            self.id_mut(idx).state = CmState::Idle;
            let param = ConnParam {
                private_data: r.private_data.to_vec(),
                ..ConnParam::default()
            };
            self.push_event(
                idx,
                EventType::Unreachable,
                i32::from(u8::from(r.status)),
                param,
                None,
                Ece::default(),
                None,
            );
        }
    }
}
