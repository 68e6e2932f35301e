//! One AF_XDP socket (queue 0) on one interface shared by several local UDP
//! endpoints (IPv4 addresses in one prefix, one UDP port): the redirect program
//! matches the prefix, and whoever polls takes every frame off the RX ring,
//! keeping those for other registered endpoints in small per-endpoint queues
//! until their owner polls.
//!
//! Transmit stages frames first and puts them on the TX ring at [`PortTx::flush`],
//! the frames marked `late` after the others (a RoCE sender marks ACKs, so the
//! data frame the peer is waiting for leaves first; see the ping-pong example's
//! "data first" figures). Destination MACs come from the port's neighbour cache
//! ([`crate::neigh::NeighCache`]: on `lo` the interface's own MAC, elsewhere the
//! kernel's ARP entry of the route's next hop); a flow's `dst_mac` is ignored.

use std::collections::VecDeque;
use std::io;
use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use super::bpf::{XdpRedirect, XDP_FLAGS_SKB_MODE};
use super::frame::{self, UdpFlow, UdpFrame};
use super::{if_mac, ifindex, TxFrame, XdpConfig, XdpRx, XdpSocket, XdpTx};
use crate::neigh::NeighCache;

/// Most frames kept for an endpoint that does not poll.
const PENDING_MAX: usize = 1024;

/// A shared AF_XDP port (see the module doc). The receive and transmit halves
/// have their own locks, so one thread can take frames off the RX ring while
/// another is inside the `sendto` kick (which, in copy mode, delivers the first
/// frame of a batch to the receiver before building the next).
pub struct XdpPort {
    rx: Mutex<PortRx>,
    tx: Mutex<PortTx>,
    _prog: XdpRedirect,
}

/// The receive half of an [`XdpPort`].
pub struct PortRx {
    sock: XdpRx,
    port: u16,
    endpoints: Vec<(Ipv4Addr, VecDeque<Vec<u8>>)>,
    /// Frames for no registered endpoint, or that did not parse, or overflowed a queue.
    pub dropped: u64,
}

/// The transmit half of an [`XdpPort`].
pub struct PortTx {
    sock: XdpTx,
    mac: [u8; 6],
    staged: Vec<TxFrame>,
    late: Vec<TxFrame>,
    neigh: NeighCache,
    /// Frames the TX ring had no room for.
    pub dropped: u64,
    /// Frames not sent because their next hop did not resolve.
    pub unresolved: u64,
}

type LockResult<'a, T> = Result<MutexGuard<'a, T>, PoisonError<MutexGuard<'a, T>>>;

fn unpoison<T>(r: LockResult<'_, T>) -> MutexGuard<'_, T> {
    r.unwrap_or_else(|e| e.into_inner())
}

impl XdpPort {
    /// Attaches the redirect program for `net/prefix`, UDP `port` to `ifname`
    /// (generic XDP) and binds a copy-mode socket on queue 0. Frames leave from
    /// `net` (neighbour solicitations too: on an interface other than `lo`, give
    /// the endpoint's own address with prefix 32).
    pub fn open(
        ifname: &str,
        net: Ipv4Addr,
        prefix: u8,
        port: u16,
        cfg: XdpConfig,
    ) -> io::Result<XdpPort> {
        let ifi = ifindex(ifname)?;
        let mac = if_mac(ifname)?;
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix.min(32)))
        };
        let prog = XdpRedirect::attach_net(ifi, u32::from(net), mask, port, 1, XDP_FLAGS_SKB_MODE)?;
        let sock = XdpSocket::open(ifi, 0, cfg)?;
        prog.register(0, sock.fd())?;
        let (rx, tx) = sock.split();
        Ok(XdpPort {
            rx: Mutex::new(PortRx {
                sock: rx,
                port,
                endpoints: Vec::new(),
                dropped: 0,
            }),
            tx: Mutex::new(PortTx {
                sock: tx,
                mac,
                staged: Vec::new(),
                late: Vec::new(),
                neigh: NeighCache::new(ifname, net, mac),
                dropped: 0,
                unresolved: 0,
            }),
            _prog: prog,
        })
    }

    /// The receive half (waits for it).
    pub fn rx(&self) -> MutexGuard<'_, PortRx> {
        unpoison(self.rx.lock())
    }

    /// The receive half if nobody holds it.
    pub fn try_rx(&self) -> Option<MutexGuard<'_, PortRx>> {
        match self.rx.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The transmit half (waits for it).
    pub fn tx(&self) -> MutexGuard<'_, PortTx> {
        unpoison(self.tx.lock())
    }
}

impl PortRx {
    /// Makes `ip` an endpoint (idempotent).
    pub fn register(&mut self, ip: Ipv4Addr) {
        if !self.endpoints.iter().any(|(a, _)| *a == ip) {
            self.endpoints.push((ip, VecDeque::new()));
        }
    }

    /// Hands up to `max` frames for `ip` to `f`: first those queued for it, then
    /// from the RX ring (frames for other endpoints are queued for them).
    pub fn recv_for(
        &mut self,
        ip: Ipv4Addr,
        max: usize,
        mut f: impl FnMut(&UdpFrame<'_>),
    ) -> usize {
        let mut n = 0;
        let port = self.port;
        if let Some((_, q)) = self.endpoints.iter_mut().find(|(a, _)| *a == ip) {
            while n < max {
                let Some(buf) = q.pop_front() else { break };
                if let Ok(u) = frame::parse(&buf) {
                    f(&u);
                    n += 1;
                }
            }
        }
        if n >= max {
            return n;
        }
        let (endpoints, dropped) = (&mut self.endpoints, &mut self.dropped);
        self.sock.recv(max - n, |buf| match frame::parse(buf) {
            Ok(u) if u.dst_port == port && u.dst_ip == ip => {
                f(&u);
                n += 1;
            }
            Ok(u) if u.dst_port == port => {
                match endpoints.iter_mut().find(|(a, _)| *a == u.dst_ip) {
                    Some((_, q)) if q.len() < PENDING_MAX => q.push_back(buf.to_vec()),
                    _ => *dropped += 1,
                }
            }
            _ => *dropped += 1,
        });
        n
    }

    /// Frames taken off the RX ring so far.
    pub fn rx_frames(&self) -> u64 {
        self.sock.rx_frames
    }
}

impl PortTx {
    /// The interface's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Writes one frame: `payload` writes the UDP payload into the buffer it is
    /// given (after room for the headers) and returns its length, the flow, and
    /// whether the frame is `late` (None: nothing to send, the frame goes back to
    /// the pool). Staged until [`Self::flush`]; `late` frames go after the others.
    /// Returns false when no frame was staged (also when no UMEM frame was free:
    /// `payload` is then not called).
    pub fn stage(
        &mut self,
        payload: impl FnOnce(&mut [u8]) -> Option<(usize, UdpFlow, bool)>,
    ) -> bool {
        let mut ok = false;
        let mut late = false;
        let (neigh, unresolved) = (&mut self.neigh, &mut self.unresolved);
        let d = self.sock.prepare(|buf| {
            let Some(body) = buf.get_mut(frame::HEADERS_LEN..) else {
                return 0;
            };
            let Some((len, mut flow, l)) = payload(body) else {
                return 0;
            };
            late = l;
            let Some(mac) = neigh.mac_for(flow.dst_ip) else {
                *unresolved += 1;
                return 0;
            };
            flow.dst_mac = mac;
            match flow.emit_headers(buf, len) {
                Some(total) => {
                    ok = true;
                    total
                }
                None => 0,
            }
        });
        match d {
            Some(d) if ok => {
                if late {
                    self.late.push(d);
                } else {
                    self.staged.push(d);
                }
                true
            }
            _ => false,
        }
    }

    /// Puts the staged frames on the TX ring (`late` ones last) and kicks once.
    pub fn flush(&mut self) -> io::Result<()> {
        for d in self.staged.drain(..).chain(self.late.drain(..)) {
            if !self.sock.queue(d) {
                self.dropped += 1;
            }
        }
        self.sock.flush()
    }

    /// Frames put on the TX ring so far.
    pub fn tx_frames(&self) -> u64 {
        self.sock.tx_frames
    }
}
