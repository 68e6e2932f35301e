//! The UDP driver under the sans-IO engine: a socket on `ip:4791`, batched
//! receive (`recvmmsg`) and send (`sendmmsg` + UDP GSO), one poller thread per
//! device or manual progress. Buffers are allocated once per device; the steady
//! state allocates nothing per packet (checked by `tests/alloc.rs`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use netio::udp::{TxBatch, UdpBatchSocket};
use wire::roce::icrc::fill_icrc_ipv4;
use wire::roce::Ipv4Pseudo;

use crate::device::{Inner, Shared};
use crate::soft::Engine;

/// Transmit side state (lives under the device mutex).
pub(crate) struct TxState {
    src: [u8; 4],
    /// The device socket's UDP port (4791 unless a test bound another).
    sport: u16,
    tx: TxBatch,
    /// Per-QP source ports (rxe's `0xc000 + hash(qpn)`): the wanted port and the
    /// socket bound to it (None if the port was taken: such QPs send from the
    /// device socket). Grows once per new port, never per packet.
    ports: Vec<(u16, Option<UdpBatchSocket>)>,
}

impl TxState {
    pub(crate) fn new(src: Ipv4Addr, sport: u16, max_pkt: usize) -> TxState {
        TxState {
            src: src.octets(),
            sport,
            tx: TxBatch::new(max_pkt),
            ports: Vec::new(),
        }
    }

    /// The batch tag for a wanted source port: 0 = the device socket, k = ports[k-1].
    fn tag_for(&mut self, want: u16, main: &UdpBatchSocket) -> u16 {
        if want == self.sport {
            return 0;
        }
        let i = match self.ports.iter().position(|(p, _)| *p == want) {
            Some(i) => i,
            None => {
                let s = UdpBatchSocket::bind(SocketAddrV4::new(Ipv4Addr::from(self.src), want))
                    .map(|mut s| {
                        s.set_gso(main.gso());
                        s
                    })
                    .map_err(|e| {
                        tracing::debug!("source port {want}: {e}; using the device socket")
                    })
                    .ok();
                self.ports.push((want, s));
                self.ports.len() - 1
            }
        };
        if self.ports[i].1.is_some() {
            i as u16 + 1
        } else {
            0
        }
    }

    /// Drains the engine's transmit queue into batches and sends them.
    pub(crate) fn pump(&mut self, engine: &mut Engine, sock: &UdpBatchSocket, now: Instant) {
        if let Some(port) = xdp_io::port_for(Ipv4Addr::from(self.src)) {
            return xdp_io::pump(port, engine, self.src, now);
        }
        loop {
            while self.tx.slot().is_some() {
                let Some(slot) = self.tx.slot() else { break };
                match engine.poll_transmit(now, slot) {
                    Some(t) => {
                        let tag = self.tag_for(t.sport, sock);
                        self.tx.commit_tagged(
                            SocketAddrV4::new(Ipv4Addr::from(t.dst), t.dport),
                            t.len,
                            tag,
                        )
                    }
                    None => break,
                }
            }
            if self.tx.is_empty() {
                return;
            }
            let src = self.src;
            let main_port = self.sport;
            let ports = &self.ports;
            let port_of = |tag: u16| {
                if tag == 0 {
                    main_port
                } else {
                    ports[tag as usize - 1].0
                }
            };
            let sock_of = |tag: u16| -> &UdpBatchSocket {
                match tag {
                    0 => sock,
                    t => ports[t as usize - 1].1.as_ref().unwrap_or(sock),
                }
            };
            self.tx.for_each_tagged(
                |tag| sock_of(tag).gso(),
                |pkt, dst, id, tag| {
                    let ip = Ipv4Pseudo {
                        id,
                        ..Ipv4Pseudo::df(src, dst.ip().octets(), port_of(tag), dst.port())
                    };
                    let _ = fill_icrc_ipv4(&ip, pkt);
                },
            );
            let full = self.tx.len() >= netio::udp::MAX_BATCH;
            if let Err(e) = self.tx.flush_tagged(sock_of) {
                tracing::warn!("roce tx: {e}");
            }
            if !full {
                return;
            }
        }
    }
}

/// One receive + timers + transmit round. Returns datagrams received.
fn round(shared: &Shared, rx: &mut netio::udp::RxBatch, tx: bool) -> crate::Result<usize> {
    let Some(sock) = shared.sock.as_ref() else {
        return Ok(0);
    };
    if let Some(port) = xdp_io::port_for(shared.ip) {
        return Ok(xdp_io::round(shared, port, tx));
    }
    let n = rx.recv(sock)?;
    if n == 0 {
        return Ok(0); // timers are the caller's business when nothing arrived
    }
    let now = Instant::now();
    let mut g = shared.lock();
    for i in 0..n {
        if let Some((src, data)) = rx.get(i) {
            g.engine.handle_datagram(now, src.ip().octets(), None, data);
        }
    }
    finish_round(shared, &mut g, now, tx);
    Ok(n)
}

/// The end of a receive round that got packets: fire due timers, then send what
/// became ready (`tx`) or leave it queued for the caller's next post, with the
/// round's time for it to reuse.
fn finish_round(shared: &Shared, g: &mut Inner, now: Instant, tx: bool) {
    if g.engine.poll_timeout().is_some_and(|t| t <= now) {
        g.engine.handle_timeout(now);
    }
    if tx {
        shared.after(g);
    } else {
        g.rx_now = Some((now, coarse_ns()));
        shared.after_no_tx(g);
    }
}

/// Manual progress: drain the socket, fire timers, send.
pub(crate) fn progress(shared: &Shared) -> crate::Result<usize> {
    drain(shared, true, true)
}

/// Manual progress from `Cq::poll`: as [`progress`], but what the received
/// packets make ready to send is left queued (`Shared::tx_deferred`) for the
/// caller to send with its next post, or at its next empty poll.
/// Timers are only looked at when `timers` (a caller polling in a loop passes
/// it every few calls: reading the clock costs an HPET access in the guest).
pub(crate) fn progress_deferred(shared: &Shared, timers: bool) -> crate::Result<usize> {
    drain(shared, false, timers)
}

/// Receive rounds until the socket is drained (`tx`: send what they make ready
/// at once); without traffic, fire due timers when `timers`.
fn drain(shared: &Shared, tx: bool, timers: bool) -> crate::Result<usize> {
    let mut guard = shared.rx.lock().unwrap_or_else(|p| p.into_inner());
    let Some(rx) = guard.as_mut() else {
        return Ok(0);
    };
    let mut total = 0;
    loop {
        let n = round(shared, rx, tx)?;
        total += n;
        if n < netio::udp::MAX_BATCH {
            break;
        }
    }
    if total == 0 && timers {
        // timers still need firing without traffic
        let now = Instant::now();
        let mut g = shared.lock();
        if g.engine.poll_timeout().is_some_and(|t| t <= now) {
            g.engine.handle_timeout(now);
            shared.after(&mut g);
        }
    }
    Ok(total)
}

/// Opportunistic progress from an application thread that is busy polling an
/// empty CQ: if nobody is receiving right now, drain the socket here instead of
/// waiting for the poller thread to wake up (polling mode, as SPDK/DPDK do).
pub(crate) fn try_progress(shared: &Shared) {
    shared
        .busy_poll_at
        .store(mono_ns(), std::sync::atomic::Ordering::Relaxed);
    let Ok(mut g) = shared.rx.try_lock() else {
        return;
    };
    if let Some(rx) = g.as_mut() {
        while let Ok(n) = round(shared, rx, true) {
            if n < netio::udp::MAX_BATCH {
                break;
            }
        }
    }
}

/// CLOCK_MONOTONIC_COARSE in ns: read from the vDSO page without touching the
/// clocksource (which is an emulated HPET in the test guest), tick resolution.
pub(crate) fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

thread_local! {
    /// (last exact reading, coarse clock then) for [`clock`].
    static CLOCK: std::cell::Cell<Option<(Instant, u64)>> = const { std::cell::Cell::new(None) };
}

/// The engine's "now" for a receive round of the AF_XDP path (the UDP path reads
/// `Instant::now()`; measured in the guest, this saved ~1 us there). `Instant::now()` is an emulated
/// HPET read in the TCG test guest (its clocksource; ~6 us, a syscall and a device
/// exit, as much as a frame's kernel path), so this reads it at most once per
/// coarse-clock tick (per thread) and otherwise adds the coarse clock's advance
/// (vDSO, no hardware access) to the last reading. It is monotonic and at most a
/// tick (1-4 ms) behind: a deadline set from it comes at most a tick early,
/// against retransmit timeouts of tens of ms (4.096 us x 2^TIMEOUT) and RNR
/// timers that only pace retries. With `DPUSTACK_ROCE_CLOCK=exact` every call
/// reads `Instant::now()` (`DPUSTACK_XDP_CLOCK=exact` too).
pub(crate) fn clock() -> Instant {
    static EXACT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *EXACT.get_or_init(|| {
        ["DPUSTACK_ROCE_CLOCK", "DPUSTACK_XDP_CLOCK"]
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| v == "exact"))
    }) {
        return Instant::now();
    }
    let c = coarse_ns();
    CLOCK.with(|cell| match cell.get() {
        Some((t, c0)) if c.saturating_sub(c0) < 4_000_000 => t + Duration::from_nanos(c - c0),
        _ => {
            let t = Instant::now();
            cell.set(Some((t, coarse_ns())));
            t
        }
    })
}

/// Nanoseconds on a process-wide monotonic clock.
pub(crate) fn mono_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// While an application thread busy-polls (and so receives itself), the poller
/// thread stays out of its way for this long after the last busy poll.
const BUSY_POLL_GRACE_NS: u64 = 200_000;

/// How long the poller keeps polling an idle socket before blocking in poll().
const POLLER_SPIN: Duration = Duration::from_micros(10);

/// How long the poller of a device on the AF_XDP datapath sleeps between receive rounds.
const XDP_POLLER_NAP: Duration = Duration::from_micros(50);

/// Starts the device's poller thread. It holds only a weak reference and exits
/// when the last handle of the device is dropped.
pub(crate) fn spawn_poller(shared: &Arc<Shared>) -> std::io::Result<()> {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let sock = shared
        .sock
        .clone()
        .ok_or_else(|| std::io::Error::other("no socket"))?;
    // the AF_XDP port has no fd to sleep on here: its poller wakes every
    // XDP_POLLER_NAP to receive (applications that busy-poll receive at once)
    let xdp = xdp_io::port_for(shared.ip).is_some();
    let h = std::thread::Builder::new()
        .name(format!("roce-{}", shared.name))
        .spawn(move || loop {
            let timeout = {
                let Some(s) = weak.upgrade() else { return };
                let now = Instant::now();
                let t = s.lock().engine.poll_timeout();
                t.map_or(Duration::from_millis(50), |t| {
                    t.saturating_duration_since(now)
                        .min(Duration::from_millis(50))
                })
            };
            if xdp {
                std::thread::sleep(timeout.min(XDP_POLLER_NAP));
            } else if !sock.wait_readable(Some(timeout)).unwrap_or(false) {
                let Some(s) = weak.upgrade() else { return };
                let now = Instant::now();
                let mut g = s.lock();
                if g.engine.poll_timeout().is_some_and(|t| t <= now) {
                    g.engine.handle_timeout(now);
                    s.after(&mut g);
                }
                continue;
            }
            let Some(s) = weak.upgrade() else { return };
            let since =
                mono_ns().saturating_sub(s.busy_poll_at.load(std::sync::atomic::Ordering::Relaxed));
            if since < BUSY_POLL_GRACE_NS {
                // the busy poller receives; timers remain ours
                let now = Instant::now();
                let mut eg = s.lock();
                if eg.engine.poll_timeout().is_some_and(|t| t <= now) {
                    eg.engine.handle_timeout(now);
                    s.after(&mut eg);
                }
                drop(eg);
                drop(s);
                std::thread::sleep(Duration::from_nanos(BUSY_POLL_GRACE_NS - since));
                continue;
            }
            // the receive batch is shared with busy pollers (`try_progress`)
            let mut g = s.rx.lock().unwrap_or_else(|p| p.into_inner());
            let Some(rx) = g.as_mut() else { return };
            // drain, then keep polling the socket for a short while: during a
            // stream this saves a wake-up (and a context switch) per datagram
            let mut last = Instant::now();
            loop {
                match round(&s, rx, true) {
                    Ok(0) => {
                        if last.elapsed() > POLLER_SPIN {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    Ok(_) => last = Instant::now(),
                    Err(e) => {
                        tracing::warn!("roce rx: {e}");
                        break;
                    }
                }
            }
            let now = Instant::now();
            let mut eg = s.lock();
            if eg.engine.poll_timeout().is_some_and(|t| t <= now) {
                eg.engine.handle_timeout(now);
                s.after(&mut eg);
            }
        })?;
    *shared.poller.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    Ok(())
}

/// Whether the opt-in AF_XDP datapath carries the packets of a device on `ip`
/// (opens the shared port on first use); its frames hold packets of path MTU
/// 2048 at most, so the device's port MTU is capped there. When it was asked for
/// (`DPUSTACK_ROCE_IO=xdp`) and cannot serve this device, opening the device
/// fails rather than silently falling back to UDP sockets.
pub(crate) fn xdp_port_active(ip: Ipv4Addr) -> crate::Result<bool> {
    if std::env::var("DPUSTACK_ROCE_IO").ok().as_deref() != Some("xdp") {
        return Ok(false);
    }
    if let Some(port) = xdp_io::port_for(ip) {
        // an endpoint from the start: frames for it that another device's
        // receive round takes off the ring are queued for it, not dropped
        port.rx().register(ip);
        return Ok(true);
    }
    Err(crate::Error::Io(std::io::Error::other(format!(
        "DPUSTACK_ROCE_IO=xdp: no AF_XDP port for {ip} (only 127.0.0.0/8 devices, as root, \
         one process per network namespace; see the warning above)"
    ))))
}

/// Opt-in AF_XDP datapath, an experiment (see docs in `netio::xdp`): with
/// `DPUSTACK_ROCE_IO=xdp` in the environment, devices on 127.0.0.0/8 receive and
/// send through one AF_XDP socket on `lo` shared by the process
/// (`netio::xdp::port::XdpPort`, generic XDP, copy mode) instead of their UDP
/// sockets: no syscall to receive, one `sendto` kick per batch (receive and
/// transmit halves locked separately, so a receiver is not held up by a kick), frames built here
/// with IPv4 ID 0 + DF exactly as the UDP path's datagrams (same ICRC), received
/// ICRCs checked against the real IPv4 header. ACKs are put on the ring after the
/// other packets of a batch. Needs root, and a private netns (it takes every UDP
/// 4791 frame to 127/8 on that `lo`: a second process asking for it fails to
/// open its device). Receiving happens in `round` (manual progress, busy polling,
/// and the threaded poller, which naps `XDP_POLLER_NAP` between rounds instead of
/// sleeping on a socket). Packets must fit a 4 KiB UMEM frame: the port MTU is
/// capped at 2048, so a UD message is at most 2048 bytes. Without the variable
/// nothing changes.
mod xdp_io {
    use std::cell::RefCell;
    use std::net::Ipv4Addr;
    use std::sync::OnceLock;
    use std::time::Instant;

    use netio::xdp::frame::UdpFlow;
    use netio::xdp::port::XdpPort;
    use netio::xdp::XdpConfig;
    use wire::ethernet::Ipv4Packet;
    use wire::roce::icrc::fill_icrc_ipv4;
    use wire::roce::Ipv4Pseudo;

    use crate::device::Shared;
    use crate::soft::Engine;

    static PORT: OnceLock<Option<XdpPort>> = OnceLock::new();

    /// The shared port if the datapath is on and `ip` is a loopback address.
    pub(super) fn port_for(ip: Ipv4Addr) -> Option<&'static XdpPort> {
        if !ip.is_loopback() {
            return None;
        }
        PORT.get_or_init(|| {
            if std::env::var("DPUSTACK_ROCE_IO").ok()? != "xdp" {
                return None;
            }
            let cfg = XdpConfig {
                frame_size: 4096,
                ring_size: 2048,
            };
            match XdpPort::open("lo", Ipv4Addr::new(127, 0, 0, 0), 8, 4791, cfg) {
                Ok(p) => {
                    tracing::info!("roce io: AF_XDP on lo (127.0.0.0/8, UDP 4791)");
                    Some(p)
                }
                Err(e) => {
                    tracing::warn!("roce io: AF_XDP unavailable ({e}); using UDP sockets");
                    None
                }
            }
        })
        .as_ref()
    }

    /// Received packets copied out of the port (so its lock is not held while
    /// the engine's is taken): bytes + (IP fields, offset, length).
    type RxCopy = (Vec<u8>, Vec<(Ipv4Pseudo, usize, usize)>);

    thread_local! {
        static RX: RefCell<RxCopy> = const { RefCell::new((Vec::new(), Vec::new())) };
    }

    /// As `super::round` for the AF_XDP port. Returns packets received.
    pub(super) fn round(shared: &Shared, port: &XdpPort, tx: bool) -> usize {
        RX.with_borrow_mut(|(bytes, pkts)| {
            bytes.clear();
            pkts.clear();
            {
                // never wait for the receive half here: whoever holds it is
                // receiving and queues our frames for us; a busy poller comes back
                let Some(mut p) = port.try_rx() else {
                    return 0;
                };
                p.register(shared.ip);
                p.recv_for(shared.ip, netio::udp::MAX_BATCH, |u| {
                    let ip = Ipv4Packet::new_unchecked(u.ip_header);
                    let pseudo = Ipv4Pseudo {
                        src: u.src_ip.octets(),
                        dst: u.dst_ip.octets(),
                        id: ip.ident(),
                        frag: ip.frag_field(),
                        sport: u.src_port,
                        dport: u.dst_port,
                    };
                    let off = bytes.len();
                    bytes.extend_from_slice(u.payload);
                    pkts.push((pseudo, off, u.payload.len()));
                });
            }
            if pkts.is_empty() {
                return 0;
            }
            let now = super::clock();
            let mut g = shared.lock();
            for (ip, off, len) in pkts.iter() {
                if let Some(data) = bytes.get(*off..off + len) {
                    g.engine.handle_datagram(now, ip.src, Some(ip), data);
                }
            }
            super::finish_round(shared, &mut g, now, tx);
            pkts.len()
        })
    }

    /// As `TxState::pump` for the AF_XDP port.
    pub(super) fn pump(port: &XdpPort, engine: &mut Engine, src: [u8; 4], now: Instant) {
        let mut p = port.tx();
        let mac = p.mac();
        let mut n = 0;
        loop {
            let staged = p.stage(|body| {
                let t = engine.poll_transmit(now, body)?;
                let pkt = body.get_mut(..t.len)?;
                let _ = fill_icrc_ipv4(&Ipv4Pseudo::df(src, t.dst, t.sport, t.dport), pkt);
                let flow = UdpFlow {
                    src_mac: mac,
                    dst_mac: mac,
                    src_ip: Ipv4Addr::from(src),
                    dst_ip: Ipv4Addr::from(t.dst),
                    src_port: t.sport,
                    dst_port: t.dport,
                    tos: 0,
                };
                // RC ACKNOWLEDGE: after the batch's other packets (the peer
                // waits for the data, the ACK only frees our send queue)
                let late = pkt.first() == Some(&0x11);
                Some((t.len, flow, late))
            });
            if !staged {
                break;
            }
            n += 1;
            if n % netio::udp::MAX_BATCH == 0 {
                if let Err(e) = p.flush() {
                    tracing::warn!("roce xdp tx: {e}");
                }
            }
        }
        if let Err(e) = p.flush() {
            tracing::warn!("roce xdp tx: {e}");
        }
    }
}
