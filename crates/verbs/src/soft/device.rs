//! A soft RoCE device's shared state: the engine and the transmit state behind
//! one mutex (taken once per verb call or per received batch), the UDP socket,
//! the poller thread and the async-event fd. The verbs over it are in
//! `provider.rs`, the receive rounds and the poller in `driver.rs`.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::engine::Engine;
use super::transmit::TxState;
use crate::event::EventFd;
use crate::types::Mtu;

/// How a soft device moves packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// A UDP socket on ip:4791 and one poller thread (default).
    Threaded,
    /// A UDP socket, no thread: the application calls [`Device::progress`]
    /// (and `Cq::poll` progresses the device).
    Manual,
    /// No socket at all: the caller moves datagrams with
    /// [`Device::handle_datagram`] / [`Device::poll_transmit`] (tests, sim).
    External,
}

/// Options of a soft device ([`DeviceOptions::open`]).
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
    /// Receive with UDP GRO: a GSO burst from a loopback peer arrives in one
    /// `recvmmsg` message, unsegmented, and is split by the segment size the
    /// kernel reports. On by default where the kernel takes `UDP_GRO`; off
    /// with the environment variable `DPUSTACK_NO_GRO=1` (for comparisons).
    /// `bench roce`, same machine, 3 alternating runs: WRITE 64 KiB 0.60 -> 0.90
    /// of UDP-GSO loopback, WRITE 4 KiB 0.24 -> 0.51; 2-byte latency +5 %.
    pub gro: bool,
    /// Bounds on PDs, CQs, SRQs, QPs and MRs held at once.
    pub limits: super::engine::DeviceLimits,
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
            gro: std::env::var_os("DPUSTACK_NO_GRO").is_none_or(|v| v == "0"),
            limits: Default::default(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) io: Option<TxState>,
    /// Manual mode: the time of the last receive round and the coarse clock
    /// then, reused by the next transmit if still within a tick (see `after`).
    pub(crate) rx_now: Option<(Instant, u64)>,
    /// Acquisitions of this mutex (counted under it: no atomic).
    pub(crate) locks: u64,
}

/// The receive batch (shared by the poller thread and busy pollers) and how
/// often its mutex was taken (counted under it).
pub(crate) struct RxSlot {
    pub(crate) batch: Option<netio::udp::RxBatch>,
    pub(crate) locks: u64,
}

/// One soft RoCE device (what a `verbs::Context` of the soft provider holds).
/// Its soft-only surface (counters, manual progress, the sans-IO datagram
/// interface, the engine itself) is reached through `Context::soft`.
pub struct Device {
    inner: Mutex<Inner>,
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    pub(crate) mode: IoMode,
    pub(crate) async_efd: EventFd,
    pub(crate) sock: Option<Arc<netio::udp::UdpBatchSocket>>,
    rx: Mutex<RxSlot>,
    pub(crate) poller: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// When an application thread last received by busy polling (clock::mono_ns).
    pub(crate) busy_poll_at: AtomicU64,
    /// Manual mode: a `Cq::poll` received packets but left what they made ready to
    /// send (ACKs, responses) queued, to go out with the application's next post
    /// or poll (see `driver::progress_deferred`).
    pub(crate) tx_deferred: AtomicBool,
    /// Poller thread wake-ups with the socket readable (only the poller writes).
    pub(crate) poller_wakeups: AtomicU64,
}

impl Drop for Device {
    /// The last handle is gone: wake the poller (shutdown makes its poll return),
    /// and wait for it so the UDP port is free when this returns.
    fn drop(&mut self) {
        if *self.tx_deferred.get_mut() {
            // deferred packets (ACKs) leave before the socket closes
            let d = &*self;
            let mut g = d.lock();
            d.after(&mut g);
        }
        if let Some(s) = &self.sock {
            // SAFETY: shutdown(2) on the socket's own fd, which `s` keeps open;
            // no memory is passed.
            unsafe { libc::shutdown(s.fd(), libc::SHUT_RDWR) };
        }
        let h = self.poller.get_mut().ok().and_then(|h| h.take());
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        if self.sock.is_some() {
            self.log_counters();
        }
    }
}

impl Device {
    /// One `info` line (target `verbs::soft::counters`) with the device's packet
    /// and drop counters and its QPs' totals (destroyed QPs included): what an
    /// interop run under packet loss reports (`RUST_LOG=verbs::soft::counters=info`).
    fn log_counters(&mut self) {
        let c = self.all_counters();
        let Ok(g) = self.inner.get_mut() else { return };
        let q = g.engine.qp_counter_totals();
        let drops = c.drop_truncated
            + c.drop_bad_opcode
            + c.drop_bad_length
            + c.drop_bad_version
            + c.drop_bad_icrc
            + c.drop_pkey
            + c.drop_no_qp
            + c.drop_qp_type
            + c.drop_qp_state
            + c.drop_qkey
            + c.drop_src;
        tracing::info!(
            target: "verbs::soft::counters",
            dev = %self.name,
            tx_packets = c.tx_packets,
            rx_packets = c.rx_packets,
            rx_dropped = drops,
            retransmits = q.retransmits,
            timeouts = q.timeouts,
            seq_naks_sent = q.seq_naks_sent,
            seq_naks_rcvd = q.seq_naks_rcvd,
            rnr_naks_sent = q.rnr_naks_sent,
            rnr_naks_rcvd = q.rnr_naks_rcvd,
            dup_requests = q.dup_requests,
            tx_bytes = c.tx_bytes,
            rx_bytes = c.rx_bytes,
            tx_copy_bytes = q.tx_copy_bytes,
            rx_copy_bytes = q.rx_copy_bytes,
            icrc_bytes = c.icrc_bytes,
            send_calls = c.send_calls,
            recv_calls = c.recv_calls,
            recv_empty = c.recv_empty,
            device_locks = c.device_locks,
            rx_locks = c.rx_locks,
            poller_wakeups = c.poller_wakeups,
            "soft RoCE device closed"
        );
    }
}

impl Device {
    pub(crate) fn new(
        engine: Engine,
        io: Option<(
            Arc<netio::udp::UdpBatchSocket>,
            TxState,
            netio::udp::RxBatch,
        )>,
        name: String,
        ip: Ipv4Addr,
        mode: IoMode,
    ) -> crate::Result<Device> {
        let (sock, io, rx) = match io {
            Some((s, t, r)) => (Some(s), Some(t), Some(r)),
            None => (None, None, None),
        };
        Ok(Device {
            inner: Mutex::new(Inner {
                engine,
                io,
                rx_now: None,
                locks: 0,
            }),
            name,
            ip,
            mode,
            async_efd: EventFd::new()?,
            sock,
            rx: Mutex::new(RxSlot {
                batch: rx,
                locks: 0,
            }),
            poller: Mutex::new(None),
            busy_poll_at: Default::default(),
            tx_deferred: Default::default(),
            poller_wakeups: Default::default(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.locks += 1;
        g
    }

    /// The engine if nobody holds it (the poller's timer turn: a holder is
    /// running the engine and will send what it makes ready).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Inner>> {
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        g.locks += 1;
        Some(g)
    }

    /// The receive batch, waiting for it.
    pub(crate) fn lock_rx(&self) -> MutexGuard<'_, RxSlot> {
        let mut g = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        g.locks += 1;
        g
    }

    /// The receive batch if nobody holds it.
    pub(crate) fn try_lock_rx(&self) -> Option<MutexGuard<'_, RxSlot>> {
        let mut g = match self.rx.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        g.locks += 1;
        Some(g)
    }

    /// The engine's counters with the driver's (syscalls, locks, wake-ups).
    pub(crate) fn all_counters(&self) -> super::engine::Counters {
        let (rx_calls, rx_empty, rx_locks) = {
            let g = self.lock_rx();
            let (c, e) = g.batch.as_ref().map_or((0, 0), |b| b.syscalls());
            (c, e, g.locks)
        };
        let g = self.lock();
        let mut c = g.engine.counters;
        c.send_calls = g.io.as_ref().map_or(0, |t| t.syscalls());
        c.recv_calls = rx_calls;
        c.recv_empty = rx_empty;
        c.rx_locks = rx_locks;
        c.device_locks = g.locks;
        c.poller_wakeups = self.poller_wakeups.load(Ordering::Relaxed);
        c
    }

    /// After a verb changed engine state: send what became ready, raise async events.
    pub(crate) fn after(&self, g: &mut Inner) {
        self.tx_deferred.store(false, Ordering::Relaxed);
        // in manual mode a post usually follows the receive round that completed
        // what it answers: reuse that round's time if the coarse clock (vDSO,
        // no hardware access) says it is at most a tick old. Deadlines set from
        // it are at most ~2 ticks early, against retransmit timeouts of ms.
        let now = match g.rx_now.take() {
            Some((t, c)) if super::clock::coarse_ns().saturating_sub(c) <= 4_000_000 => t,
            _ => Instant::now(),
        };
        if let (Some(sock), Some(io)) = (&self.sock, g.io.as_mut()) {
            io.pump(&mut g.engine, sock, now);
        }
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }

    /// Sends what a busy-poll receive left queued (`tx_deferred`: the ACK of a
    /// QP's last message), if anything, before a QP is destroyed or changes
    /// state: an application that exits after its last completion never posts
    /// or polls again, and moving to ERR (`rdma_disconnect`) drops the
    /// responder's queued ACKs; either way the peer would retransmit that
    /// message into a QP that no longer answers (interop 10-netem: Linux's
    /// ibv_rc_pingpong hung; 04-cm: Linux's rdma_server was killed at 40 s).
    pub(crate) fn flush_deferred(&self, g: &mut Inner) {
        if self.tx_deferred.load(Ordering::Relaxed) {
            self.after(g);
        }
    }

    /// As [`Device::after`] without transmitting (the caller sends later).
    pub(crate) fn after_no_tx(&self, g: &mut Inner) {
        self.tx_deferred.store(true, Ordering::Relaxed);
        if !g.engine.events.is_empty() {
            self.async_efd.notify();
        }
    }
}

/// Device name for an IP: `dps_<a>_<b>_<c>_<d>`.
pub fn device_name(ip: Ipv4Addr) -> String {
    let o = ip.octets();
    format!("dps_{}_{}_{}_{}", o[0], o[1], o[2], o[3])
}

/// The soft devices: one per IPv4 address of an interface that is up (name,
/// address).
pub fn device_list() -> Vec<(String, Ipv4Addr)> {
    netio::ifaddr::ipv4_addrs()
        .into_iter()
        .map(|(_, ip)| (device_name(ip), ip))
        .collect()
}

/// Parses a device spec: an IPv4 address or a `dps_a_b_c_d` name.
pub fn parse_device(spec: &str) -> crate::Result<Ipv4Addr> {
    if let Ok(ip) = spec.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    let rest = spec.strip_prefix("dps_").ok_or(crate::Error::NoDev)?;
    rest.replace('_', ".")
        .parse()
        .map_err(|_| crate::Error::NoDev)
}
