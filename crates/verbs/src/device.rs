//! The public verbs objects (`ibv_context`, `ibv_pd`, `ibv_cq`, `ibv_qp`, ...) over
//! the soft engine. Every object keeps its device alive; the engine sits behind
//! one mutex per device, taken once per verb call or per received batch.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::event::EventFd;
use crate::soft::engine::{ChannelInner, Engine};
use crate::types::*;
use crate::{BadWr, Error, Mr, Result};

/// How a device moves packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// A UDP socket on ip:4791 and one poller thread (default).
    Threaded,
    /// A UDP socket, no thread: the application calls [`Context::progress`].
    Manual,
    /// No socket at all: the caller moves datagrams with
    /// [`Context::handle_datagram`] / [`Context::poll_transmit`] (tests, sim).
    External,
}

/// Options of [`Context::open_with`].
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    pub ip: Ipv4Addr,
    pub name: Option<String>,
    pub mode: IoMode,
    /// Port MTU (IB MTU enum); default 4096 on loopback addresses, else 1024.
    pub mtu: Option<Mtu>,
    /// UDP port to bind (4791; another value only for tests).
    pub port: u16,
    /// Use UDP GSO when sending (default on where the kernel has it).
    pub gso: bool,
}

impl DeviceOptions {
    pub fn new(ip: Ipv4Addr) -> Self {
        DeviceOptions {
            ip,
            name: None,
            mode: IoMode::Threaded,
            mtu: None,
            port: wire::roce::ROCE_PORT,
            // GSO only on loopback: a GSO burst leaves with IPv4 IDs 0,1,2,.. (the ICRC
            // covers the ID); only our own devices are on loopback and they do not
            // check ICRCs arriving through UDP sockets. See docs/roce.md.
            gso: ip.is_loopback(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) io: Option<crate::driver::TxState>,
    /// Manual mode: the time of the last receive round and the coarse clock
    /// then, reused by the next transmit if still within a tick (see `after`).
    pub(crate) rx_now: Option<(Instant, u64)>,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    pub(crate) mode: IoMode,
    pub(crate) async_efd: EventFd,
    pub(crate) sock: Option<Arc<netio::udp::UdpBatchSocket>>,
    pub(crate) rx: Mutex<Option<netio::udp::RxBatch>>,
    pub(crate) poller: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// When an application thread last received by busy polling (driver::mono_ns).
    pub(crate) busy_poll_at: std::sync::atomic::AtomicU64,
    /// Manual mode: a `Cq::poll` received packets but left what they made ready to
    /// send (ACKs, responses) queued, to go out with the application's next post
    /// or poll (see `driver::progress_deferred`).
    pub(crate) tx_deferred: std::sync::atomic::AtomicBool,
}

impl Drop for Shared {
    /// The last handle is gone: wake the poller (shutdown makes its poll return),
    /// and wait for it so the UDP port is free when this returns.
    fn drop(&mut self) {
        if let Some(s) = &self.sock {
            // SAFETY: plain syscall on our own fd.
            unsafe { libc::shutdown(s.fd(), libc::SHUT_RDWR) };
        }
        let h = self.poller.get_mut().ok().and_then(|h| h.take());
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// After a verb changed engine state: send what became ready, raise async events.
    pub(crate) fn after(&self, g: &mut Inner) {
        self.tx_deferred
            .store(false, std::sync::atomic::Ordering::Relaxed);
        // in manual mode a post usually follows the receive round that completed
        // what it answers: reuse that round's time if the coarse clock (vDSO,
        // no hardware access) says it is at most a tick old. Deadlines set from
        // it are at most ~2 ticks early, against retransmit timeouts of ms.
        let now = match g.rx_now.take() {
            Some((t, c)) if crate::driver::coarse_ns().saturating_sub(c) <= 4_000_000 => t,
            _ => Instant::now(),
        };
        if let (Some(sock), Some(io)) = (&self.sock, g.io.as_mut()) {
            io.pump(&mut g.engine, sock, now);
        }
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }
    /// As [`Shared::after`] without transmitting (the caller sends later).
    pub(crate) fn after_no_tx(&self, g: &mut Inner) {
        self.tx_deferred
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }
}

/// A device context (`ibv_context`). Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({} {})", self.shared.name, self.shared.ip)
    }
}

/// Device name for an IP: `dps_<a>_<b>_<c>_<d>`.
pub fn device_name(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("dps_{}_{}_{}_{}", o[0], o[1], o[2], o[3])
}

/// `ibv_get_device_list`: one soft device per IPv4 address of an interface that is
/// up (name, address). Opening one binds UDP 4791 on that address.
pub fn device_list() -> Vec<(String, Ipv4Addr)> {
    netio::ifaddr::ipv4_addrs()
        .into_iter()
        .map(|(_, ip)| (device_name(ip), ip))
        .collect()
}

/// Parses a device spec: an IPv4 address or a `dps_a_b_c_d` name.
pub fn parse_device(spec: &str) -> Result<Ipv4Addr> {
    if let Ok(ip) = spec.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    let rest = spec.strip_prefix("dps_").ok_or(Error::NoDev)?;
    rest.replace('_', ".").parse().map_err(|_| Error::NoDev)
}

impl Context {
    /// Opens the device bound to `spec` (an IPv4 address or its name), with a
    /// poller thread.
    pub fn open(spec: &str) -> Result<Context> {
        Context::open_with(DeviceOptions::new(parse_device(spec)?))
    }

    pub fn open_with(o: DeviceOptions) -> Result<Context> {
        let mtu = o.mtu.unwrap_or(if o.ip.is_loopback() {
            Mtu::Mtu4096
        } else {
            Mtu::Mtu1024
        });
        // the AF_XDP datapath carries a packet in one 4 KiB UMEM frame
        let mtu = if o.mode != IoMode::External && crate::driver::xdp_port_active(o.ip)? {
            mtu.min(Mtu::Mtu2048)
        } else {
            mtu
        };
        let mut engine = Engine::new(o.ip.octets(), mtu);
        let (sock, io, rx) = if o.mode == IoMode::External {
            (None, None, None)
        } else {
            let mut s = netio::udp::UdpBatchSocket::bind(std::net::SocketAddrV4::new(o.ip, o.port))
                .map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AddrNotAvailable {
                        Error::NoDev
                    } else {
                        Error::Io(e)
                    }
                })?;
            s.set_gso(o.gso);
            engine.caps.tx_icrc = false; // the driver fills it, knowing each IPv4 ID
            let maxp = engine.max_packet_len();
            let sport = s.local_addr().map(|a| a.port()).unwrap_or(o.port);
            (
                Some(Arc::new(s)),
                Some(crate::driver::TxState::new(o.ip, sport, maxp)),
                Some(netio::udp::RxBatch::new(maxp + 64)),
            )
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                engine,
                io,
                rx_now: None,
            }),
            name: o.name.unwrap_or_else(|| device_name(o.ip)),
            ip: o.ip,
            mode: o.mode,
            async_efd: EventFd::new()?,
            sock,
            rx: Mutex::new(rx),
            poller: Mutex::new(None),
            busy_poll_at: Default::default(),
            tx_deferred: Default::default(),
        });
        if o.mode == IoMode::Threaded {
            crate::driver::spawn_poller(&shared)?;
        }
        Ok(Context { shared })
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }
    pub fn ip(&self) -> Ipv4Addr {
        self.shared.ip
    }
    pub fn mode(&self) -> IoMode {
        self.shared.mode
    }

    /// `ibv_query_gid`: index 0 and 1 are both the IPv4-mapped RoCEv2 GID
    /// (rxe has a RoCEv1 link-local GID at 0; pingpong users pass `-g 1`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        if port != 1 || index > 1 {
            return Err(Error::Inval);
        }
        Ok(Gid::from_ipv4(self.shared.ip))
    }

    pub fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION"),
            node_guid: u64::from_be_bytes([
                0x02,
                0,
                0,
                0,
                self.shared.ip.octets()[0],
                self.shared.ip.octets()[1],
                self.shared.ip.octets()[2],
                self.shared.ip.octets()[3],
            ]),
            vendor_id: 0xffffff,
            max_mr_size: u32::MAX as u64,
            max_qp: 1 << 16,
            max_qp_wr: 16384,
            max_sge: crate::soft::qp_limits::MAX_SGE as u32,
            max_cq: 1 << 16,
            max_cqe: 1 << 20,
            max_mr: 1 << 20,
            max_pd: 1 << 16,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 1 << 16,
            max_srq_wr: 16384,
            max_inline_data: crate::soft::qp_limits::MAX_INLINE as u32,
            atomic_cap_hca: true,
            phys_port_cnt: 1,
        }
    }

    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::Inval);
        }
        let m = self.shared.lock().engine.port_mtu;
        Ok(PortAttr {
            state_active: true,
            max_mtu: m,
            active_mtu: m,
            gid_tbl_len: 2,
            lid: 0,
        })
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        let mut g = self.shared.lock();
        let id = g.engine.next_pd;
        g.engine.next_pd += 1;
        Ok(Pd {
            ctx: self.clone(),
            id,
        })
    }

    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                efd: EventFd::new()?,
                fired: Mutex::new(Default::default()),
            }),
        })
    }

    /// `ibv_create_cq` with `cqe` entries.
    pub fn create_cq(&self, cqe: usize, channel: Option<&CompChannel>) -> Result<Cq> {
        let (id, count) = self
            .shared
            .lock()
            .engine
            .create_cq(cqe, channel.map(|c| c.inner.clone()))?;
        Ok(Cq {
            ctx: self.clone(),
            id,
            count,
            empty_polls: Default::default(),
        })
    }

    /// `ibv_get_async_event` without blocking.
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.shared.async_efd.drain();
        let mut g = self.shared.lock();
        let e = g.engine.poll_event();
        if !g.engine.events.is_empty() {
            self.shared.async_efd.notify();
        }
        e
    }

    /// fd that becomes readable when an async event is queued.
    pub fn async_fd(&self) -> RawFd {
        self.shared.async_efd.raw()
    }

    /// Manual progress (any mode with a socket): receive what is queued, fire
    /// timers, send. Returns datagrams received.
    pub fn progress(&self) -> Result<usize> {
        crate::driver::progress(&self.shared)
    }

    /// Device counters (drops by reason, packets).
    pub fn counters(&self) -> crate::soft::Counters {
        self.shared.lock().engine.counters
    }

    /// Runs `f` on the engine (diagnostics, tests).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let mut g = self.shared.lock();
        let r = f(&mut g.engine);
        self.shared.after(&mut g);
        r
    }

    // ---- external I/O (IoMode::External): the sans-IO surface
    pub fn handle_datagram(
        &self,
        now: Instant,
        src: [u8; 4],
        ip: Option<&wire::roce::Ipv4Pseudo>,
        data: &[u8],
    ) {
        let mut g = self.shared.lock();
        g.engine.handle_datagram(now, src, ip, data);
        if !g.engine.events.is_empty() {
            self.shared.async_efd.notify();
        }
    }
    #[must_use]
    pub fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> Option<crate::soft::Transmit> {
        self.shared.lock().engine.poll_transmit(now, buf)
    }
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.shared.lock().engine.poll_timeout()
    }
    pub fn handle_timeout(&self, now: Instant) {
        let mut g = self.shared.lock();
        g.engine.handle_timeout(now);
        if !g.engine.events.is_empty() {
            self.shared.async_efd.notify();
        }
    }
}

/// Protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct Pd {
    ctx: Context,
    id: u32,
}

/// `ibv_qp_init_attr`.
#[derive(Clone, Copy)]
pub struct QpInitAttr<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub srq: Option<&'a Srq>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

/// `ibv_srq_init_attr`.
#[derive(Debug, Clone, Copy)]
pub struct SrqInitAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// Address handle (`ibv_ah`): where UD sends go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ah {
    pub ip: Ipv4Addr,
    pub dport: u16,
}

impl Default for Ah {
    fn default() -> Self {
        Ah {
            ip: Ipv4Addr::UNSPECIFIED,
            dport: wire::roce::ROCE_PORT,
        }
    }
}

impl Pd {
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `ibv_reg_mr`: allocates and registers `len` bytes (the MR owns them; see
    /// [`crate::mr`]).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        let inner = self.ctx.shared.lock().engine.reg_mr(self.id, len, access)?;
        Ok(Mr {
            inner,
            dev: Arc::downgrade(&self.ctx.shared),
        })
    }

    pub fn create_qp(&self, init: &QpInitAttr) -> Result<Qp> {
        self.create(init, false)
    }

    /// The GSI QP (QP1, UD, Q_Key 0x80010000) for MADs (CM): the caller owns it
    /// like any UD QP; datagrams to QPN 1 on this device land in its receive
    /// queue with the 40-byte GRH slot; sends take a UD WR with `remote_qpn = 1`
    /// and `remote_qkey = 0x80010000`. One per device (EBUSY otherwise).
    pub fn create_gsi_qp(&self, send_cq: &Cq, recv_cq: &Cq, cap: QpCap) -> Result<Qp> {
        let mut init = QpInitAttr::new(QpType::Ud, send_cq, recv_cq);
        init.cap = cap;
        let qp = self.create(&init, true)?;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: wire::roce::GSI_QKEY,
            ..Default::default()
        };
        qp.modify(
            &a,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        a.qp_state = QpState::Rtr;
        qp.modify(&a, QpAttrMask::STATE)?;
        a.qp_state = QpState::Rts;
        qp.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
        Ok(qp)
    }

    fn create(&self, init: &QpInitAttr, gsi: bool) -> Result<Qp> {
        let qpn = self
            .ctx
            .shared
            .lock()
            .engine
            .create_qp(self.id, init, gsi)?;
        Ok(Qp {
            ctx: self.ctx.clone(),
            qpn,
        })
    }

    pub fn create_srq(&self, a: &SrqInitAttr) -> Result<Srq> {
        let id = self.ctx.shared.lock().engine.create_srq(
            self.id,
            a.max_wr as usize,
            a.max_sge as usize,
            a.srq_limit,
        )?;
        Ok(Srq {
            ctx: self.ctx.clone(),
            id,
        })
    }

    /// `ibv_create_ah`: the destination GID must be IPv4-mapped.
    pub fn create_ah(&self, a: &AhAttr) -> Result<Ah> {
        let ip = a.dgid.to_ipv4().ok_or(Error::Inval)?;
        Ok(Ah {
            ip,
            dport: if a.dport == 0 {
                wire::roce::ROCE_PORT
            } else {
                a.dport
            },
        })
    }
}

/// Completion channel (`ibv_comp_channel`): its fd is readable when a CQ armed
/// with [`Cq::req_notify`] got a (matching) completion.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    /// For epoll / tokio `AsyncFd`.
    pub fn fd(&self) -> RawFd {
        self.inner.efd.raw()
    }
    /// `ibv_get_cq_event`: blocks up to `timeout_ms` (-1 forever); the id of the
    /// CQ that fired ([`Cq::id`]).
    pub fn get_cq_event(&self, timeout_ms: i32) -> Result<u32> {
        loop {
            if let Some(id) = self.inner.fired.lock().ok().and_then(|mut f| f.pop_front()) {
                return Ok(id);
            }
            self.inner.efd.drain();
            if let Some(id) = self.inner.fired.lock().ok().and_then(|mut f| f.pop_front()) {
                return Ok(id);
            }
            if !self.inner.efd.wait(timeout_ms) {
                return Err(Error::Again);
            }
        }
    }
}

/// An empty `Cq::poll` yields the CPU every this many calls: busy pollers share
/// few cores with the poller threads (2 vCPUs in the test guest).
const YIELD_EVERY: u32 = 32;
/// An empty `Cq::poll` in threaded mode tries to receive itself every this many
/// calls (see `driver::try_progress`).
const PROGRESS_EVERY: u32 = 4;

/// In manual mode, an empty `Cq::poll` checks the device's timers every this many
/// calls (a clock read each time is costly: an HPET access in the TCG guest).
const TIMER_EVERY: u32 = 16;

/// Completion queue (`ibv_cq`).
#[derive(Clone)]
pub struct Cq {
    ctx: Context,
    pub(crate) id: usize,
    count: Arc<std::sync::atomic::AtomicUsize>,
    empty_polls: Arc<std::sync::atomic::AtomicU32>,
}

impl Cq {
    pub fn id(&self) -> u32 {
        self.id as u32
    }
    /// `ibv_poll_cq`: fills `wc` from the front; returns how many.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let s = &self.ctx.shared;
        if s.mode == IoMode::Manual {
            // receive; what that makes ready to send (ACKs, responses) stays queued
            // if completions are returned now: it leaves with the application's
            // next post (one sendmmsg for an ACK and a reply) or poll
            let k = self.empty_polls.load(std::sync::atomic::Ordering::Relaxed);
            crate::driver::progress_deferred(s, k.is_multiple_of(TIMER_EVERY))?;
            if self.count.load(std::sync::atomic::Ordering::Acquire) == 0
                && s.tx_deferred
                    .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                s.after(&mut s.lock());
            }
        }
        if self.count.load(std::sync::atomic::Ordering::Acquire) == 0 || wc.is_empty() {
            // busy pollers share few cores with the device's poller thread: let it
            // run now and then instead of burning the whole time slice
            let k = self
                .empty_polls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if s.mode == IoMode::Threaded && k % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
                crate::driver::try_progress(s);
                if self.count.load(std::sync::atomic::Ordering::Acquire) > 0 {
                    return s.lock().engine.poll_cq(self.id, wc);
                }
            }
            if k % YIELD_EVERY == YIELD_EVERY - 1 {
                std::thread::yield_now();
            }
            return Ok(0);
        }
        s.lock().engine.poll_cq(self.id, wc)
    }
    /// `ibv_req_notify_cq`: arm for the next completion added to the CQ (or the
    /// next solicited / error one); one-shot, re-arm after each event. As in
    /// rdma-core, completions already queued do not fire: poll after arming.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let mut g = self.ctx.shared.lock();
        let c = g
            .engine
            .cqs
            .get_mut(self.id)
            .and_then(|c| c.as_mut())
            .ok_or(Error::Inval)?;
        c.armed = Some(solicited_only);
        Ok(())
    }
    /// `ibv_ack_cq_events` (bookkeeping only).
    pub fn ack_events(&self, n: u32) {
        let mut g = self.ctx.shared.lock();
        if let Some(Some(c)) = g.engine.cqs.get_mut(self.id) {
            c.events += n as u64;
        }
    }
}

/// Shared receive queue (`ibv_srq`).
#[derive(Clone)]
pub struct Srq {
    ctx: Context,
    pub(crate) id: usize,
}

impl Srq {
    pub fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        let mut g = self.ctx.shared.lock();
        for (index, wr) in wrs.iter().enumerate() {
            g.engine
                .post_srq_recv(self.id, wr)
                .map_err(|error| BadWr { index, error })?;
        }
        Ok(())
    }
    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        let mut g = self.ctx.shared.lock();
        let s = g
            .engine
            .srqs
            .get_mut(self.id)
            .and_then(|s| s.as_mut())
            .ok_or(Error::Inval)?;
        if limit as usize > s.max_wr {
            return Err(Error::Inval);
        }
        s.limit = limit;
        Ok(())
    }
    pub fn id(&self) -> u32 {
        self.id as u32
    }
}

/// Queue pair (`ibv_qp`). Dropping the last handle does not destroy it; call
/// [`Qp::destroy`].
#[derive(Clone)]
pub struct Qp {
    ctx: Context,
    qpn: u32,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({:#x})", self.qpn)
    }
}

impl Qp {
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let s = &self.ctx.shared;
        let mut g = s.lock();
        let (qp, mut ctx) = g.engine.qp_mut(self.qpn)?;
        let mut a = *attr;
        if a.ah_attr.dport == 0 {
            a.ah_attr.dport = wire::roce::ROCE_PORT;
        }
        qp.modify(&mut ctx, &a, mask)?;
        s.after(&mut g);
        Ok(())
    }
    /// `ibv_query_qp` (all attributes).
    pub fn query(&self) -> Result<QpAttr> {
        let mut g = self.ctx.shared.lock();
        let (qp, _) = g.engine.qp_mut(self.qpn)?;
        Ok(qp.query())
    }
    /// `ibv_post_send` of a list of WRs; on error, `BadWr.index` is the first
    /// rejected WR (the ones before it were posted).
    pub fn post_send(&self, wrs: &[SendWr]) -> std::result::Result<(), BadWr> {
        let s = &self.ctx.shared;
        let mut g = s.lock();
        let res = (|| {
            let (qp, mut ctx) = g
                .engine
                .qp_mut(self.qpn)
                .map_err(|error| BadWr { index: 0, error })?;
            for (index, wr) in wrs.iter().enumerate() {
                qp.post_send(&mut ctx, wr)
                    .map_err(|error| BadWr { index, error })?;
            }
            Ok(())
        })();
        s.after(&mut g);
        res
    }
    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        let s = &self.ctx.shared;
        let mut g = s.lock();
        let res = (|| {
            let (qp, mut ctx) = g
                .engine
                .qp_mut(self.qpn)
                .map_err(|error| BadWr { index: 0, error })?;
            for (index, wr) in wrs.iter().enumerate() {
                qp.post_recv(&mut ctx, wr)
                    .map_err(|error| BadWr { index, error })?;
            }
            Ok(())
        })();
        // a receive may unblock an RNR-waiting peer only via its retry; nothing to send
        res
    }
    /// `ibv_destroy_qp`.
    pub fn destroy(self) -> Result<()> {
        self.ctx.shared.lock().engine.destroy_qp(self.qpn);
        Ok(())
    }
    /// Per-QP counters (retransmits, NAKs, ...).
    pub fn counters(&self) -> Result<crate::soft::qp::QpCounters> {
        let g = self.ctx.shared.lock();
        g.engine
            .qp(self.qpn)
            .map(|q| q.counters)
            .ok_or(Error::Inval)
    }
}
