//! The rdma_cm-like API over a device's connection manager: event channels,
//! [`CmId`]s (asynchronous on a channel or synchronous), `create_qp` moving the
//! QP through INIT/RTR/RTS.
//!
//! The CM itself is a backend chosen per device by its verbs provider
//! (`backend.rs`, the `CmBackend` trait; the public API here does not change
//! between backends): for a soft device, our own CM (`own.rs`: the sans-IO
//! [`crate::CmEndpoint`] over the device's QP1, MADs as UD SEND_ONLY to QP1 of
//! the peer with Q_Key 0x80010000); for kernel devices (the next verbs
//! provider), librdmacm. Application calls take the device's mutex, run the
//! backend, let it apply QP transitions and send, and wake waiters.
//!
//! One thread per [`CmDevice`] runs the backend's rounds (the own CM: poll the
//! GSI QP's CQ, timers, sends) and sleeps on what the backend gives it between
//! them. The same thread watches the host's addresses and links (rtnetlink,
//! `RTMGRP_IPV4_IFADDR | RTMGRP_LINK`): the device's address going away (or being
//! replaced) gives ADDR_CHANGE to the ids bound to it; the interface carrying it
//! being deleted removes the device (as rxe goes with its netdev): DEVICE_REMOVAL,
//! as does [`CmDevice::close`]. After that every call fails with `ENODEV`.
//! `rdma_resolve_addr` asks the kernel's routing table for the source address (a
//! connected UDP socket, no packet sent): no route fails the call with
//! `ENETUNREACH`, a source that is not this device's gives ADDR_ERROR `-ENODEV`.

mod backend;
mod own;
#[cfg(feature = "rdma-core")]
mod rdmacm;

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, Cq, Mr, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendFlags, SendWr, Wc, WcOpcode, WrDetail, WrOpcode,
};
use wire::mad::{PortSpace, RDMA_UDP_QKEY};

use self::backend::{CmBackend, Waiter};
use crate::addrwatch::{AddrWatch, NlEvent};
use crate::{ChannelId, CmConfig, CmEvent, CmIdHandle, ConnParam, EventType, RouteHint};

/// How often the poller reads the rtnetlink socket.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// Errors of the driver API.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A CM call failed.
    #[error(transparent)]
    Cm(#[from] crate::Error),
    /// A verbs call failed.
    #[error("verbs: {0}")]
    Verbs(#[from] verbs::Error),
    /// A synchronous call ended with an error event.
    #[error("{event} (status {status})")]
    Event {
        /// The event.
        event: EventType,
        /// Its status.
        status: i32,
    },
    /// No event within the timeout.
    #[error("timed out waiting for a CM event")]
    Timeout,
    /// The id has no QP.
    #[error("no QP on this cm_id")]
    NoQp,
}

impl DriverError {
    /// The positive errno librdmacm would set (`ENODEV` after DEVICE_REMOVAL,
    /// `ENETUNREACH` for a destination without a route, …).
    pub fn errno(&self) -> i32 {
        match self {
            DriverError::Cm(e) => e.errno(),
            DriverError::Verbs(e) => e.errno(),
            DriverError::Event { status, .. } => status.abs(),
            DriverError::Timeout => libc::ETIMEDOUT,
            DriverError::NoQp => libc::EINVAL,
        }
    }
}

type Result<T> = std::result::Result<T, DriverError>;

struct Dev {
    ctx: verbs::Context,
    pd: Pd,
    ip: Ipv4Addr,
    /// The device's CM, chosen by its verbs provider.
    st: Mutex<Box<dyn CmBackend>>,
    /// What the poller sleeps on between rounds.
    waiter: Waiter,
    cv: Condvar,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// eventfd of each event channel: readable while the channel has events.
    efds: Mutex<Vec<(ChannelId, Efd)>>,
    /// Host address/link changes (None: no rtnetlink socket could be opened).
    watch: Mutex<Option<Watch>>,
}

/// The poller's view of the host's addresses.
struct Watch {
    nl: AddrWatch,
    /// The device's address is local now.
    local: bool,
    /// The interface that carries exactly the device's address (deleting it
    /// removes the device).
    ifindex: Option<u32>,
    last: Instant,
}

/// An eventfd (nonblocking, close-on-exec) owned by one event channel.
struct Efd(std::os::fd::OwnedFd);

impl Efd {
    fn new() -> std::io::Result<Efd> {
        // SAFETY: eventfd(2) with valid flags; the result is checked before use and
        // owned exactly once by the OwnedFd.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Efd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }
    fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
    fn set(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own nonblocking eventfd.
        let _ = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// The CM of one device. Cheap to clone; the poller stops when the last clone drops
/// (or on [`CmDevice::close`]).
#[derive(Clone)]
pub struct CmDevice {
    dev: Arc<Dev>,
}

fn v4(ip: IpAddr) -> Ipv4Addr {
    match ip {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

impl Dev {
    fn lock(&self) -> MutexGuard<'_, Box<dyn CmBackend>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One round of the backend (input, timers, output), then wake waiters.
    /// Returns input handled.
    fn round(&self) -> usize {
        let mut st = self.lock();
        let n = st.round(Instant::now());
        self.signal(&**st);
        n
    }

    /// Wake blocked `get_event`s and make channel fds with queued events readable.
    fn signal(&self, st: &dyn CmBackend) {
        if st.pending_events() == 0 {
            return;
        }
        self.cv.notify_all();
        for (ch, efd) in self.efds.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if st.pending_for(Some(*ch)) > 0 {
                efd.set();
            }
        }
    }

    /// Read rtnetlink (at most every [`WATCH_EVERY`]) and report what it means for
    /// this device. Returns false once the device is removed.
    fn watch_round(&self) -> bool {
        let mut w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        let Some(w) = w.as_mut() else { return true };
        if w.last.elapsed() < WATCH_EVERY {
            return true;
        }
        w.last = Instant::now();
        let mut evs = Vec::new();
        w.nl.poll(&mut evs);
        if evs.is_empty() {
            return true;
        }
        let mut changed = false;
        let mut removed = false;
        for e in &evs {
            match *e {
                // our own address removed (even if re-added since)
                NlEvent::AddrRemoved(ip, _) if ip == self.ip => changed = true,
                NlEvent::LinkRemoved(i) if Some(i) == w.ifindex => removed = true,
                NlEvent::AddrAdded(ip, i) if ip == self.ip => w.ifindex = Some(i),
                _ => {}
            }
        }
        // any address event may change whether ours is still local (e.g. the
        // 127.0.0.1/8 of `lo` covers a 127.0.4.x device)
        let local = crate::addrwatch::is_local(self.ip);
        if w.local && !local {
            changed = true;
        }
        w.local = local;
        if changed && !removed {
            tracing::info!("cm {}: address changed/removed: ADDR_CHANGE", self.ip);
            self.addr_changed();
        }
        if removed {
            tracing::info!("cm {}: its interface was deleted: DEVICE_REMOVAL", self.ip);
            self.remove();
            return false;
        }
        true
    }

    fn addr_changed(&self) {
        let mut st = self.lock();
        st.addr_change(IpAddr::V4(self.ip));
        st.flush();
        self.signal(&**st);
    }

    /// DEVICE_REMOVAL to every id; later calls fail with ENODEV; the poller stops.
    fn remove(&self) {
        let mut st = self.lock();
        st.device_removal();
        self.stop.store(true, Ordering::Relaxed);
        // blocked `get_event`s return ENODEV if nothing is queued for them
        self.cv.notify_all();
        self.signal(&**st);
    }

    fn next_wait(&self) -> i32 {
        let st = self.lock();
        let now = Instant::now();
        match st.poll_timeout() {
            Some(t) if t <= now => 0,
            Some(t) => (t - now).as_millis().clamp(1, 50) as i32,
            None => 50,
        }
    }
}

impl CmDevice {
    /// Bind a CM to the device `ctx` (takes its GSI QP) and start its poller.
    pub fn open(ctx: &verbs::Context, mut cfg: CmConfig) -> Result<CmDevice> {
        let ip = ctx.ip();
        cfg.local_addrs = vec![IpAddr::V4(ip)];
        if cfg.ca_guid == CmConfig::default().ca_guid {
            cfg.ca_guid = ctx.query_device().node_guid;
        }
        if cfg.seed == CmConfig::default().seed {
            // comm IDs must differ from the last run's (the kernel starts them at a
            // random value): with the same CA GUID (the address) a restarted tool
            // would otherwise repeat its REQ comm IDs and meet its previous
            // connections in the peer's TIMEWAIT (REJ 10, stale connection)
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            cfg.seed = t ^ (u64::from(std::process::id()) << 32) ^ u64::from(u32::from(ip));
        }
        let pd = ctx.alloc_pd()?;
        // the CM of the device's provider: our own over QP1 of a soft device,
        // librdmacm for a kernel device (the kernel owns QP1 there)
        let backend: Box<dyn CmBackend> = match ctx.provider() {
            verbs::Provider::Soft => Box::new(own::OwnCm::open(ctx, &pd, cfg)?),
            #[cfg(feature = "rdma-core")]
            verbs::Provider::RdmaCore => Box::new(rdmacm::RdmaCm::open(ctx)?),
            #[cfg(not(feature = "rdma-core"))]
            verbs::Provider::RdmaCore => {
                let msg = "this build has no CM for kernel (rdma-core) devices: rebuild with \
                           `--features rdma-core` (needs librdmacm-dev), or use a soft device \
                           (--provider soft)";
                tracing::error!("{msg}");
                return Err(DriverError::Verbs(verbs::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    msg,
                ))));
            }
        };
        let waiter = backend.waiter();
        let dev = Arc::new(Dev {
            ctx: ctx.clone(),
            pd,
            ip,
            st: Mutex::new(backend),
            waiter,
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            efds: Mutex::new(Vec::new()),
            watch: Mutex::new(match AddrWatch::open() {
                Ok(nl) => Some(Watch {
                    nl,
                    local: crate::addrwatch::is_local(ip),
                    ifindex: crate::addrwatch::ifindex_of(ip),
                    last: Instant::now(),
                }),
                Err(e) => {
                    tracing::warn!("cm {ip}: no rtnetlink socket, ADDR_CHANGE off: {e}");
                    None
                }
            }),
        });
        let weak = Arc::downgrade(&dev);
        let th = std::thread::Builder::new()
            .name(format!("cm-{ip}"))
            .spawn(move || loop {
                let Some(dev) = weak.upgrade() else { return };
                if dev.stop.load(Ordering::Relaxed) || !dev.watch_round() {
                    return;
                }
                if dev.round() == 0 {
                    let wait = dev.next_wait();
                    if wait > 0 {
                        let waiter = dev.waiter.clone();
                        drop(dev);
                        waiter(wait);
                    }
                }
            })
            .map_err(verbs::Error::Io)?;
        *dev.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(th);
        Ok(CmDevice { dev })
    }

    /// Remove the device from the CM (`ib_unregister_device` as the kernel CMA sees
    /// it): every id with an address on it gets DEVICE_REMOVAL, blocked calls
    /// return, later calls fail with `ENODEV` (only dropping ids still works), and
    /// the poller stops. Queued events stay readable. Idempotent.
    pub fn close(&self) {
        self.dev.remove();
        if let Some(t) = self
            .dev
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = t.join();
        }
    }

    /// The verbs device.
    pub fn context(&self) -> &verbs::Context {
        &self.dev.ctx
    }

    /// A protection domain for the application's QPs and MRs.
    pub fn pd(&self) -> &Pd {
        &self.dev.pd
    }

    /// The device's IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.dev.ip
    }

    /// Counters of the endpoint.
    pub fn stats(&self) -> crate::CmStats {
        self.dev.lock().stats()
    }

    /// The live cm_ids with their states.
    pub fn ids(&self) -> Vec<crate::IdInfo> {
        self.dev.lock().ids()
    }

    /// Whether the device was removed ([`CmDevice::close`], or its interface deleted).
    pub fn is_removed(&self) -> bool {
        self.dev.lock().is_removed()
    }

    /// The device's address went away or changed: ADDR_CHANGE to the ids bound to
    /// it. The poller calls this from rtnetlink; public for a caller with its own
    /// address monitor (and for tests without the privilege to change addresses).
    pub fn addr_removed(&self) {
        self.dev.addr_changed();
    }

    /// `rdma_create_ep`, active side: a synchronous id with its address and route
    /// resolved and a QP (own send/receive CQs); call [`CmId::connect`] next.
    pub fn connect_ep(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ps: PortSpace,
        cap: QpCap,
    ) -> Result<CmId> {
        let mut id = self.create_id(None, ps);
        id.resolve_addr(src, dst, Duration::from_secs(2))?;
        id.resolve_route(Duration::from_secs(2))?;
        id.create_qp_default(cap)?;
        Ok(id)
    }

    /// `rdma_create_ep`, passive side: a synchronous listening id; then
    /// [`CmId::get_request`], `create_qp_default`, `accept`.
    pub fn listen_ep(&self, addr: SocketAddr, ps: PortSpace, backlog: usize) -> Result<CmId> {
        let id = self.create_id(None, ps);
        id.bind_addr(addr)?;
        id.listen(backlog)?;
        Ok(id)
    }

    /// `rdma_create_event_channel`.
    pub fn create_event_channel(&self) -> EventChannel {
        let ch = self.dev.lock().create_channel();
        match Efd::new() {
            Ok(efd) => self
                .dev
                .efds
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((ch, efd)),
            Err(e) => tracing::warn!("cm: no eventfd for channel {ch}: {e}"),
        }
        EventChannel {
            dev: self.clone(),
            ch,
        }
    }

    /// `rdma_create_id` on `channel` (`None`: synchronous id whose calls block
    /// until their event and return it).
    pub fn create_id(&self, channel: Option<&EventChannel>, ps: PortSpace) -> CmId {
        let h = self.dev.lock().create_id(channel.map(|c| c.ch), ps);
        CmId {
            dev: self.clone(),
            h,
            sync: AtomicBool::new(channel.is_none()),
            qp: None,
            cqs: None,
            stash: Mutex::new(VecDeque::new()),
        }
    }

    fn call<R>(&self, f: impl FnOnce(&mut dyn CmBackend, Instant) -> Result<R>) -> Result<R> {
        let mut st = self.dev.lock();
        let r = f(&mut **st, Instant::now());
        st.flush();
        self.dev.signal(&**st);
        r
    }

    fn wait_event(
        &self,
        timeout: Option<Duration>,
        pred: impl Fn(&CmEvent) -> bool,
    ) -> Result<CmEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.dev.lock();
        loop {
            if let Some(ev) = st.poll_event_where(&pred) {
                if let Some(ch) = ev.channel {
                    if st.pending_for(Some(ch)) == 0 {
                        let efds = self.dev.efds.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some((_, efd)) = efds.iter().find(|(c, _)| *c == ch) {
                            efd.clear();
                        }
                    }
                }
                return Ok(ev);
            }
            if st.is_removed() {
                return Err(DriverError::Cm(crate::Error::NoDevice));
            }
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(DriverError::Timeout);
                    }
                    (d - now).min(Duration::from_millis(100))
                }
                None => Duration::from_millis(100),
            };
            st = self
                .dev
                .cv
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `struct rdma_event_channel`.
pub struct EventChannel {
    dev: CmDevice,
    ch: ChannelId,
}

impl EventChannel {
    /// `rdma_get_cm_event`: blocks up to `timeout` (`None`: forever). Dropping the
    /// event acknowledges it.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        let ch = self.ch;
        self.dev.wait_event(timeout, |e| e.channel == Some(ch))
    }

    /// The channel's id.
    pub fn id(&self) -> ChannelId {
        self.ch
    }

    /// An fd (eventfd) that is readable while this channel has events queued: for
    /// poll/epoll/tokio `AsyncFd`. Never read it; call [`EventChannel::get_event`].
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        let efds = self.dev.dev.efds.lock().unwrap_or_else(|p| p.into_inner());
        efds.iter()
            .find(|(c, _)| *c == self.ch)
            .map(|(_, e)| e.raw())
    }

    /// `rdma_get_cm_event` without blocking.
    pub fn try_get_event(&self) -> Option<CmEvent> {
        self.get_event(Some(Duration::ZERO)).ok()
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        let ch = self.ch;
        self.dev
            .dev
            .efds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(c, _)| *c != ch);
    }
}

/// `struct rdma_cm_id`. Dropping it destroys it (`rdma_destroy_id`).
pub struct CmId {
    dev: CmDevice,
    h: CmIdHandle,
    sync: AtomicBool,
    qp: Option<Qp>,
    cqs: Option<(Cq, Cq)>,
    /// Completions polled by `get_send_comp` that were receives (and vice versa)
    /// when both share one CQ.
    stash: Mutex<VecDeque<Wc>>,
}

impl CmId {
    /// The endpoint handle.
    pub fn handle(&self) -> CmIdHandle {
        self.h
    }

    /// The device.
    pub fn device(&self) -> &CmDevice {
        &self.dev
    }

    /// The QP made by [`CmId::create_qp`].
    pub fn qp(&self) -> Option<&Qp> {
        self.qp.as_ref()
    }

    /// Wrap the new id of a CONNECT_REQUEST event.
    pub fn from_request(dev: &CmDevice, ev: &CmEvent) -> CmId {
        CmId {
            dev: dev.clone(),
            h: ev.id,
            sync: AtomicBool::new(ev.channel.is_none()),
            qp: None,
            cqs: None,
            stash: Mutex::new(VecDeque::new()),
        }
    }

    fn sync_wait(&self, timeout: Duration, ok: &[EventType]) -> Result<Option<CmEvent>> {
        if !self.sync.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let h = self.h;
        let ev = self.dev.wait_event(Some(timeout), |e| e.id == h)?;
        if ok.contains(&ev.event) {
            Ok(Some(ev))
        } else {
            Err(DriverError::Event {
                event: ev.event,
                status: ev.status,
            })
        }
    }

    /// `rdma_migrate_id`: move the id (and its queued events) to `channel`
    /// (`None`: synchronous).
    pub fn migrate(&self, channel: Option<&EventChannel>) -> Result<()> {
        let h = self.h;
        let ch = channel.map(|c| c.ch);
        self.dev.call(|be, _| be.migrate_id(h, ch))?;
        self.sync.store(ch.is_none(), Ordering::Relaxed);
        Ok(())
    }

    /// `rdma_bind_addr`.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, _| be.bind_addr(h, addr))
    }

    /// `rdma_resolve_addr` (sync ids return the ADDR_RESOLVED event).
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Option<CmEvent>> {
        let h = self.h;
        let route = self.route_hint(src, dst);
        self.dev
            .call(|be, _| be.resolve_addr(h, src, dst, timeout, route))?;
        self.sync_wait(
            timeout.max(Duration::from_secs(1)) + Duration::from_secs(1),
            &[EventType::AddrResolved],
        )
    }

    /// Ask the kernel how it would reach `dst` (from the bound/given address).
    fn route_hint(&self, src: Option<SocketAddr>, dst: SocketAddr) -> RouteHint {
        let IpAddr::V4(d) = dst.ip() else {
            return RouteHint::Any;
        };
        if d.is_unspecified() || d.is_multicast() || d.is_broadcast() {
            return RouteHint::Any; // the core reports these
        }
        let bound = self.local_addr().map(|a| a.ip());
        let from = src
            .map(|s| s.ip())
            .or(bound)
            .filter(|ip| !ip.is_unspecified())
            .map(v4);
        match crate::addrwatch::route_source(from, d) {
            Ok(s) => RouteHint::Source(IpAddr::V4(s)),
            // a source address that is not local at all: the core's bind check reports it
            Err(e) if e == libc::EADDRNOTAVAIL => RouteHint::Any,
            Err(e) => RouteHint::Unreachable(e),
        }
    }

    /// `rdma_resolve_route`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let h = self.h;
        self.dev.call(|be, _| be.resolve_route(h, timeout))?;
        self.sync_wait(
            timeout.max(Duration::from_secs(1)) + Duration::from_secs(1),
            &[EventType::RouteResolved],
        )
    }

    /// `rdma_listen`.
    pub fn listen(&self, backlog: usize) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, _| be.listen(h, backlog))
    }

    /// `rdma_get_request` (sync listener): the next CONNECT_REQUEST and its new id.
    /// Any other event of the listener itself (DEVICE_REMOVAL, ADDR_CHANGE) ends
    /// the wait as `Err(Event)`, as librdmacm's `rdma_get_request` (`EINVAL` there).
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<(CmId, CmEvent)> {
        let h = self.h;
        let ev = self
            .dev
            .wait_event(timeout, |e| e.listen_id == Some(h) || e.id == h)?;
        if ev.event != EventType::ConnectRequest || ev.id == h {
            return Err(DriverError::Event {
                event: ev.event,
                status: ev.status,
            });
        }
        Ok((CmId::from_request(&self.dev, &ev), ev))
    }

    /// `rdma_create_qp`: an RC (TCP/IB port space) or UD (UDP) QP on the id's
    /// device, moved to INIT (UD: to RTS); the CM moves an RC QP to RTR/RTS itself.
    pub fn create_qp(&mut self, send_cq: &Cq, recv_cq: &Cq, cap: QpCap) -> Result<&Qp> {
        let h = self.h;
        let ps = self.dev.dev.lock().port_space(h)?;
        let ud = ps == PortSpace::Udp;
        let mut init = QpInitAttr::new(if ud { QpType::Ud } else { QpType::Rc }, send_cq, recv_cq);
        init.cap = cap;
        let qp = self.dev.pd().create_qp(&init)?;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_ATOMIC,
            qkey: RDMA_UDP_QKEY,
            ..QpAttr::default()
        };
        if ud {
            qp.modify(
                &a,
                QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
            )?;
            a.qp_state = QpState::Rtr;
            qp.modify(&a, QpAttrMask::STATE)?;
            a.qp_state = QpState::Rts;
            qp.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
        } else {
            qp.modify(
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::ACCESS_FLAGS,
            )?;
        }
        {
            let mut st = self.dev.dev.lock();
            st.attach_qp(h, &qp)?;
        }
        self.qp = Some(qp);
        self.cqs = Some((send_cq.clone(), recv_cq.clone()));
        self.qp.as_ref().ok_or(DriverError::NoQp)
    }

    /// `rdma_create_qp` with no CQs given: a send and a receive CQ of their own.
    pub fn create_qp_default(&mut self, cap: QpCap) -> Result<&Qp> {
        let ctx = self.dev.context().clone();
        let scq = ctx.create_cq(cap.max_send_wr.max(1) as usize, None)?;
        let rcq = ctx.create_cq(cap.max_recv_wr.max(1) as usize, None)?;
        self.create_qp(&scq, &rcq, cap)
    }

    // ---- rdma_verbs.h-style helpers ------------------------------------------

    /// `rdma_reg_msgs`: a buffer for SEND/RECV.
    pub fn reg_msgs(&self, len: usize) -> Result<Mr> {
        Ok(self.dev.pd().reg_mr(len, AccessFlags::LOCAL_WRITE)?)
    }

    /// `rdma_reg_read`: a buffer the peer may RDMA READ.
    pub fn reg_read(&self, len: usize) -> Result<Mr> {
        Ok(self
            .dev
            .pd()
            .reg_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?)
    }

    /// `rdma_reg_write`: a buffer the peer may RDMA WRITE.
    pub fn reg_write(&self, len: usize) -> Result<Mr> {
        Ok(self
            .dev
            .pd()
            .reg_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?)
    }

    fn post(
        &self,
        wr_id: u64,
        op: WrOpcode,
        mr: &Mr,
        off: usize,
        len: u32,
        rdma: Option<(u64, u32)>,
    ) -> Result<()> {
        let qp = self.qp.as_ref().ok_or(DriverError::NoQp)?;
        let sge = [mr.sge(off, len)];
        let mut wr = SendWr::new(wr_id, op, &sge);
        wr.send_flags = SendFlags::SIGNALED;
        if let Some((remote_addr, rkey)) = rdma {
            wr.wr = WrDetail::Rdma { remote_addr, rkey };
        }
        qp.post_send(&[wr]).map_err(|e| DriverError::Verbs(e.error))
    }

    /// `rdma_post_recv`.
    pub fn post_recv(&self, wr_id: u64, mr: &Mr, off: usize, len: u32) -> Result<()> {
        let qp = self.qp.as_ref().ok_or(DriverError::NoQp)?;
        let sge = [mr.sge(off, len)];
        qp.post_recv(&[RecvWr {
            wr_id,
            sg_list: &sge,
        }])
        .map_err(|e| DriverError::Verbs(e.error))
    }

    /// `rdma_post_send` (signaled).
    pub fn post_send(&self, wr_id: u64, mr: &Mr, off: usize, len: u32) -> Result<()> {
        self.post(wr_id, WrOpcode::Send, mr, off, len, None)
    }

    /// `rdma_post_read`: READ `len` bytes at `remote_addr`/`rkey` into `mr[off..]`.
    pub fn post_read(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(
            wr_id,
            WrOpcode::RdmaRead,
            mr,
            off,
            len,
            Some((remote_addr, rkey)),
        )
    }

    /// `rdma_post_write`: WRITE `mr[off..off+len]` to `remote_addr`/`rkey`.
    pub fn post_write(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(
            wr_id,
            WrOpcode::RdmaWrite,
            mr,
            off,
            len,
            Some((remote_addr, rkey)),
        )
    }

    fn get_comp(&self, recv: bool, timeout: Duration) -> Result<Wc> {
        let (scq, rcq) = self.cqs.as_ref().ok_or(DriverError::NoQp)?;
        let cq = if recv { rcq } else { scq };
        let is_recv = |w: &Wc| matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
        let t0 = Instant::now();
        loop {
            {
                let mut stash = self.stash.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(i) = stash.iter().position(|w| is_recv(w) == recv) {
                    if let Some(w) = stash.remove(i) {
                        return Ok(w);
                    }
                }
            }
            let mut wc = [Wc::default(); 1];
            if cq.poll(&mut wc)? == 1 {
                if is_recv(&wc[0]) == recv {
                    return Ok(wc[0]);
                }
                self.stash
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(wc[0]);
                continue;
            }
            if t0.elapsed() >= timeout {
                return Err(DriverError::Timeout);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// `rdma_get_send_comp`: the next send-side completion (any status).
    pub fn get_send_comp(&self, timeout: Duration) -> Result<Wc> {
        self.get_comp(false, timeout)
    }

    /// `rdma_get_recv_comp`: the next receive completion (any status).
    pub fn get_recv_comp(&self, timeout: Duration) -> Result<Wc> {
        self.get_comp(true, timeout)
    }

    /// `rdma_connect` (sync ids: until ESTABLISHED, or the error event as `Err`).
    pub fn connect(&self, param: &ConnParam, timeout: Duration) -> Result<Option<CmEvent>> {
        let h = self.h;
        self.dev.call(|be, now| be.connect(now, h, param))?;
        self.sync_wait(
            timeout,
            &[EventType::Established, EventType::ConnectResponse],
        )
    }

    /// `rdma_accept`: moves the QP to RTR/RTS first, then sends REP (sync ids:
    /// until ESTABLISHED).
    pub fn accept(&self, param: &ConnParam, timeout: Duration) -> Result<Option<CmEvent>> {
        let h = self.h;
        let ps = self.dev.dev.lock().port_space(h)?;
        let qp = self.qp.as_ref();
        self.dev.call(|be, now| be.accept(now, h, param, qp))?;
        if ps == PortSpace::Udp {
            return Ok(None);
        }
        self.sync_wait(timeout, &[EventType::Established])
    }

    /// `rdma_reject`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, _| be.reject(h, private_data))
    }

    /// `rdma_establish`.
    pub fn establish(&self) -> Result<()> {
        let h = self.h;
        let qp = self.qp.as_ref();
        self.dev.call(|be, _| be.establish(h, qp))
    }

    /// `rdma_disconnect`.
    pub fn disconnect(&self) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, now| be.disconnect(now, h))
    }

    /// Sync ids: wait for this id's next event (e.g. DISCONNECTED).
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        let h = self.h;
        self.dev.wait_event(timeout, |e| e.id == h)
    }

    /// `rdma_set_option`.
    pub fn set_option(&self, opt: crate::CmOption) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, _| be.set_option(h, opt))
    }

    /// `rdma_set_local_ece`.
    pub fn set_local_ece(&self, ece: crate::Ece) -> Result<()> {
        let h = self.h;
        self.dev.call(|be, _| be.set_local_ece(h, ece))
    }

    /// `rdma_get_remote_ece`.
    pub fn remote_ece(&self) -> Result<crate::Ece> {
        self.dev.dev.lock().remote_ece(self.h)
    }

    /// `rdma_get_peer_addr`.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.dev.dev.lock().peer_addr(self.h)
    }

    /// `rdma_get_local_addr`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.dev.dev.lock().local_addr(self.h)
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        let h = self.h;
        let _ = self.dev.call(|be, now| be.destroy_id(now, h));
        if let Some(qp) = self.qp.take() {
            let _ = qp.destroy();
        }
    }
}
