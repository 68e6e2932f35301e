//! The soft provider's verbs: what the public handles (`Context`, `Pd`, `Cq`,
//! `Qp`, `Srq`, `Mr`, `CompChannel`) dispatch to when their device is a soft
//! RoCEv2 device. Each object here holds its device and destroys its engine
//! object when dropped; the public handles hold these, so the resource
//! hierarchy (a QP holds its PD and CQs, ...) is enforced one level up.
//!
//! Also the soft device's own surface ([`Device::counters`],
//! [`Device::progress`], the sans-IO datagram interface, [`Device::with_engine`]),
//! reached through `Context::soft`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use super::device::{Device, DeviceOptions, IoMode};
use super::engine::{ChannelInner, Counters, Engine, Transmit};
use super::mr::MrInner;
use super::qp::QpCounters;
use super::transmit::TxState;
use crate::event::EventFd;
use crate::types::*;
use crate::{BadWr, Error, Result};

/// Opens a soft device: binds `ip:port` (unless `External`), starts the poller
/// (`Threaded`).
pub(crate) fn open(o: DeviceOptions) -> Result<Arc<Device>> {
    let mtu = o.mtu.unwrap_or(if o.ip.is_loopback() {
        Mtu::Mtu4096
    } else {
        Mtu::Mtu1024
    });
    // the AF_XDP datapath carries a packet in one 4 KiB UMEM frame, and on an
    // interface as rxe does: the largest IB MTU its IP MTU holds
    let mtu = match o.mode {
        IoMode::External => mtu,
        _ => match super::xdp::port_active(o.ip)? {
            Some(if_mtu) => {
                let cap = Mtu::for_ip_mtu(if_mtu as usize).min(Mtu::Mtu2048);
                o.mtu.unwrap_or(cap).min(cap)
            }
            None => mtu,
        },
    };
    let mut engine = Engine::new(o.ip.octets(), mtu);
    engine.limits = o.limits;
    let io = if o.mode == IoMode::External {
        None
    } else {
        let mut s =
            netio::udp::UdpBatchSocket::bind(SocketAddrV4::new(o.ip, o.port)).map_err(|e| {
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
        let rx = if o.gro && s.enable_gro() {
            netio::udp::RxBatch::new_gro(16)
        } else {
            netio::udp::RxBatch::new(maxp + 64)
        };
        Some((Arc::new(s), TxState::new(o.ip, sport, maxp), rx))
    };
    let name = o.name.unwrap_or_else(|| super::device::device_name(o.ip));
    let dev = Arc::new(Device::new(engine, io, name, o.ip, o.mode)?);
    if o.mode == IoMode::Threaded {
        super::driver::spawn_poller(&dev)?;
    }
    Ok(dev)
}

// ------------------------------------------------------------ the device's own surface
impl Device {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    pub fn mode(&self) -> IoMode {
        self.mode
    }

    /// Manual progress (any mode with a socket): receive what is queued, fire
    /// timers, send. Returns datagrams received.
    pub fn progress(&self) -> Result<usize> {
        super::driver::progress(self)
    }

    /// Device counters (drops by reason, packets).
    pub fn counters(&self) -> Counters {
        self.all_counters()
    }

    /// Per-QP counters (retransmits, NAKs, ...) of QP `qpn`.
    pub fn qp_counters(&self, qpn: u32) -> Result<QpCounters> {
        let g = self.lock();
        g.engine.qp(qpn).map(|q| q.counters).ok_or(Error::Inval)
    }

    /// Runs `f` on the engine (diagnostics, tests).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let mut g = self.lock();
        let r = f(&mut g.engine);
        self.after(&mut g);
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
        let mut g = self.lock();
        g.engine.handle_datagram(now, src, ip, data);
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }
    #[must_use]
    pub fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.lock().engine.poll_transmit(now, buf)
    }
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.lock().engine.poll_timeout()
    }
    pub fn handle_timeout(&self, now: Instant) {
        let mut g = self.lock();
        g.engine.handle_timeout(now);
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }

    // ---- verbs on the device
    pub(crate) fn query_device(&self) -> DeviceAttr {
        let o = self.ip.octets();
        let lim = self.lock().engine.limits;
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION"),
            node_guid: u64::from_be_bytes([0x02, 0, 0, 0, o[0], o[1], o[2], o[3]]),
            vendor_id: 0xffffff,
            max_mr_size: u32::MAX as u64,
            max_qp: lim.max_qp,
            max_qp_wr: 16384,
            max_sge: super::sgl::MAX_SGE as u32,
            max_cq: lim.max_cq,
            max_cqe: 1 << 20,
            max_mr: lim.max_mr,
            max_pd: lim.max_pd,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: lim.max_srq,
            max_srq_wr: 16384,
            max_inline_data: super::sgl::MAX_INLINE as u32,
            atomic_cap_hca: true,
            phys_port_cnt: 1,
        }
    }

    pub(crate) fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::Inval);
        }
        let m = self.lock().engine.port_mtu;
        Ok(PortAttr {
            state_active: true,
            max_mtu: m,
            active_mtu: m,
            gid_tbl_len: 2,
            lid: 0,
        })
    }

    /// `ibv_query_gid`: index 0 and 1 are both the IPv4-mapped RoCEv2 GID
    /// (rxe has a RoCEv1 link-local GID at 0; pingpong users pass `-g 1`).
    pub(crate) fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        if port != 1 || index > 1 {
            return Err(Error::Inval);
        }
        Ok(Gid::from_ipv4(self.ip))
    }

    pub(crate) fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.async_efd.drain();
        let mut g = self.lock();
        let e = g.engine.poll_event();
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
        e
    }

    pub(crate) fn async_fd(&self) -> RawFd {
        self.async_efd.raw()
    }
}

// ------------------------------------------------------------ objects
/// A protection domain of a soft device.
pub(crate) struct SoftPd {
    pub(crate) dev: Arc<Device>,
    pub(crate) id: u32,
}

pub(crate) fn alloc_pd(dev: &Arc<Device>) -> Result<SoftPd> {
    let id = dev.lock().engine.alloc_pd()?;
    Ok(SoftPd {
        dev: dev.clone(),
        id,
    })
}

impl Drop for SoftPd {
    fn drop(&mut self) {
        self.dev.lock().engine.dealloc_pd();
    }
}

/// A completion channel of a soft device: an eventfd plus the CQs that fired.
#[derive(Clone)]
pub(crate) struct SoftChannel(pub(crate) Arc<ChannelInner>);

impl SoftChannel {
    pub(crate) fn new() -> Result<SoftChannel> {
        Ok(SoftChannel(Arc::new(ChannelInner {
            efd: EventFd::new()?,
            fired: Mutex::new(std::collections::VecDeque::with_capacity(64)),
        })))
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.0.efd.raw()
    }
    pub(crate) fn get_cq_event(&self, timeout_ms: i32) -> Result<u32> {
        let inner = &self.0;
        loop {
            if let Some(id) = inner.fired.lock().ok().and_then(|mut f| f.pop_front()) {
                return Ok(id);
            }
            inner.efd.drain();
            if let Some(id) = inner.fired.lock().ok().and_then(|mut f| f.pop_front()) {
                return Ok(id);
            }
            if !inner.efd.wait(timeout_ms) {
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

/// A completion queue of a soft device.
pub(crate) struct SoftCq {
    dev: Arc<Device>,
    pub(crate) id: usize,
    /// Entries queued, readable without the device lock.
    count: Arc<AtomicUsize>,
    /// Empty polls in a row (drives the busy-poll heuristics).
    empty_polls: AtomicU32,
}

impl Drop for SoftCq {
    fn drop(&mut self) {
        self.dev.lock().engine.destroy_cq(self.id);
    }
}

pub(crate) fn create_cq(
    dev: &Arc<Device>,
    cqe: usize,
    channel: Option<&SoftChannel>,
) -> Result<SoftCq> {
    let (id, count) = dev
        .lock()
        .engine
        .create_cq(cqe, channel.map(|c| c.0.clone()))?;
    Ok(SoftCq {
        dev: dev.clone(),
        id,
        count,
        empty_polls: AtomicU32::new(0),
    })
}

impl SoftCq {
    /// `ibv_poll_cq`, with the soft device's progress heuristics: in manual
    /// mode a poll receives (and leaves what that makes ready to send for the
    /// next post); in threaded mode an empty poll now and then receives itself
    /// instead of waiting for the poller thread (deferring what that makes ready
    /// to send until the next post or poll, which sends it), and yields the CPU.
    pub(crate) fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let s = &*self.dev;
        if s.mode == IoMode::Manual {
            // receive; what that makes ready to send (ACKs, responses) stays queued
            // if completions are returned now: it leaves with the application's
            // next post (one sendmmsg for an ACK and a reply) or poll
            let k = self.empty_polls.load(Ordering::Relaxed);
            super::driver::progress_deferred(s, k.is_multiple_of(TIMER_EVERY))?;
            if self.count.load(Ordering::Acquire) == 0
                && s.tx_deferred.swap(false, Ordering::Relaxed)
            {
                s.after(&mut s.lock());
            }
        } else if s.mode == IoMode::Threaded {
            // what the last busy-poll receive deferred and no post took out
            super::driver::flush_deferred(s);
        }
        if self.count.load(Ordering::Acquire) == 0 || wc.is_empty() {
            // busy pollers share few cores with the device's poller thread: let it
            // run now and then instead of burning the whole time slice
            let k = self.empty_polls.fetch_add(1, Ordering::Relaxed);
            if s.mode == IoMode::Threaded && k % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
                super::driver::try_progress(s);
                if self.count.load(Ordering::Acquire) > 0 {
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

    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let mut g = self.dev.lock();
        let c = g
            .engine
            .cqs
            .get_mut(self.id)
            .and_then(|c| c.as_mut())
            .ok_or(Error::Inval)?;
        c.armed = Some(solicited_only);
        Ok(())
    }

    pub(crate) fn ack_events(&self, n: u32) {
        let mut g = self.dev.lock();
        if let Some(Some(c)) = g.engine.cqs.get_mut(self.id) {
            c.events += n as u64;
        }
    }
}

/// A shared receive queue of a soft device.
pub(crate) struct SoftSrq {
    dev: Arc<Device>,
    pub(crate) id: usize,
}

impl Drop for SoftSrq {
    fn drop(&mut self) {
        self.dev.lock().engine.destroy_srq(self.id);
    }
}

pub(crate) fn create_srq(pd: &SoftPd, max_wr: u32, max_sge: u32, limit: u32) -> Result<SoftSrq> {
    let id = pd
        .dev
        .lock()
        .engine
        .create_srq(pd.id, max_wr as usize, max_sge as usize, limit)?;
    Ok(SoftSrq {
        dev: pd.dev.clone(),
        id,
    })
}

impl SoftSrq {
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        let mut g = self.dev.lock();
        for (index, wr) in wrs.iter().enumerate() {
            g.engine
                .post_srq_recv(self.id, wr)
                .map_err(|error| BadWr { index, error })?;
        }
        Ok(())
    }

    pub(crate) fn set_limit(&self, limit: u32) -> Result<()> {
        let mut g = self.dev.lock();
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
}

/// What the engine needs to create a QP (the public `QpInitAttr` resolved to
/// soft objects).
pub(crate) struct QpSpec<'a> {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: &'a SoftCq,
    pub(crate) recv_cq: &'a SoftCq,
    pub(crate) srq: Option<&'a SoftSrq>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    /// QP1, the GSI QP (see `gsi::create_gsi_qp`).
    pub(crate) gsi: bool,
}

/// A queue pair of a soft device.
pub(crate) struct SoftQp {
    dev: Arc<Device>,
    pub(crate) qpn: u32,
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        let mut g = self.dev.lock();
        self.dev.flush_deferred(&mut g);
        g.engine.destroy_qp(self.qpn);
    }
}

pub(crate) fn create_qp(pd: &SoftPd, spec: &QpSpec) -> Result<SoftQp> {
    let qpn = pd.dev.lock().engine.create_qp(
        pd.id,
        spec.qp_type,
        spec.send_cq.id,
        spec.recv_cq.id,
        spec.srq.map(|s| s.id),
        spec.cap,
        spec.sq_sig_all,
        spec.gsi,
    )?;
    Ok(SoftQp {
        dev: pd.dev.clone(),
        qpn,
    })
}

impl SoftQp {
    pub(crate) fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let s = &*self.dev;
        let mut g = s.lock();
        s.flush_deferred(&mut g);
        let (qp, mut ctx) = g.engine.qp_mut(self.qpn)?;
        let mut a = *attr;
        if a.ah_attr.dport == 0 {
            a.ah_attr.dport = wire::roce::ROCE_PORT;
        }
        qp.modify(&mut ctx, &a, mask)?;
        s.after(&mut g);
        Ok(())
    }

    pub(crate) fn query(&self) -> Result<QpAttr> {
        let mut g = self.dev.lock();
        let (qp, _) = g.engine.qp_mut(self.qpn)?;
        Ok(qp.query())
    }

    pub(crate) fn post_send(&self, wrs: &[SendWr]) -> std::result::Result<(), BadWr> {
        let s = &*self.dev;
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

    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        let mut g = self.dev.lock();
        let (qp, mut ctx) = g
            .engine
            .qp_mut(self.qpn)
            .map_err(|error| BadWr { index: 0, error })?;
        for (index, wr) in wrs.iter().enumerate() {
            qp.post_recv(&mut ctx, wr)
                .map_err(|error| BadWr { index, error })?;
        }
        // a receive may unblock an RNR-waiting peer only via its retry; nothing to send
        Ok(())
    }
}

/// A memory registration of a soft device: the memory (shared with in-flight
/// operations of the engine) and the device whose key table holds it.
pub(crate) struct SoftMr {
    pub(crate) inner: Arc<MrInner>,
    dev: Weak<Device>,
}

impl Drop for SoftMr {
    /// `ibv_dereg_mr`: the keys stop working at once; the memory is freed when
    /// the last in-flight operation holding it is gone.
    fn drop(&mut self) {
        if let Some(d) = self.dev.upgrade() {
            d.lock().engine.mrs.remove(self.inner.lkey);
        }
    }
}

pub(crate) fn reg_mr(pd: &SoftPd, len: usize, access: AccessFlags) -> Result<SoftMr> {
    let inner = pd.dev.lock().engine.reg_mr(pd.id, len, access)?;
    Ok(SoftMr {
        inner,
        dev: Arc::downgrade(&pd.dev),
    })
}
