//! Opt-in AF_XDP datapath (see docs in `netio::xdp`): with `DPUSTACK_ROCE_IO=xdp`
//! in the environment, soft devices receive and send through AF_XDP sockets
//! (`netio::xdp::port::XdpPort`, generic XDP, copy mode) instead of their UDP
//! sockets: devices on 127.0.0.0/8 share one port on `lo`; a device on any other
//! address gets a port on the interface that holds it (a redirect of UDP 4791 to
//! that address only; everything else, ARP included, goes to the kernel), with
//! destination MACs from the kernel's neighbour table (`netio::neigh`: the route's
//! next hop, resolved on first use) and the port MTU that interface's MTU holds,
//! as rxe computes it. No syscall to receive, one `sendto` kick per batch (receive
//! and transmit halves locked separately, so a receiver is not held up by a kick),
//! frames built here with IPv4 ID 0 + DF exactly as the UDP path's datagrams (same
//! ICRC), received ICRCs checked against the real IPv4 header. ACKs are put on the
//! ring after the other packets of a batch. Needs root; on `lo` a private netns (it
//! takes every UDP 4791 frame to 127/8 there: a second process asking for it fails
//! to open its device). Receiving happens in the driver's receive round (manual
//! progress, busy polling, and the threaded poller, which naps between rounds
//! instead of sleeping on a socket). Packets must fit a 4 KiB UMEM frame: the port
//! MTU is capped at 2048, so a UD message is at most 2048 bytes. Without the
//! variable nothing changes; with it, a device it cannot serve fails to open.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use netio::xdp::frame::UdpFlow;
use netio::xdp::port::XdpPort;
use netio::xdp::XdpConfig;
use wire::ethernet::Ipv4Packet;
use wire::roce::icrc::fill_icrc_ipv4;
use wire::roce::Ipv4Pseudo;

use super::engine::Engine;

static LO_PORT: OnceLock<Option<XdpPort>> = OnceLock::new();

/// Ports on other interfaces, one per device address (prefix 32), opened by
/// [`port_active`] and kept for the life of the process: slot `i` holds the
/// address in `SLOT_IP[i]` (0: free) and its port in `SLOT_PORT[i]`. Read with
/// atomics only (a receive round looks its port up without a lock).
const SLOTS: usize = 16;
static SLOT_IP: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static SLOT_PORT: [AtomicPtr<XdpPort>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];
/// Serialises opening (and the failure cache): (address, why it failed).
static OPENING: Mutex<Vec<(Ipv4Addr, String)>> = Mutex::new(Vec::new());

fn xdp_asked() -> bool {
    std::env::var("DPUSTACK_ROCE_IO").ok().as_deref() == Some("xdp")
}

fn cfg() -> XdpConfig {
    XdpConfig {
        frame_size: 4096,
        ring_size: 2048,
    }
}

/// The port of a device on `ip`, if the datapath is on and serves it: the
/// shared `lo` port for 127.0.0.0/8, else the one [`port_active`] opened.
pub(crate) fn port_for(ip: Ipv4Addr) -> Option<&'static XdpPort> {
    if ip.is_loopback() {
        return LO_PORT
            .get_or_init(|| {
                if !xdp_asked() {
                    return None;
                }
                match XdpPort::open("lo", Ipv4Addr::new(127, 0, 0, 0), 8, 4791, cfg()) {
                    Ok(p) => {
                        tracing::info!("roce io: AF_XDP on lo (127.0.0.0/8, UDP 4791)");
                        Some(p)
                    }
                    Err(e) => {
                        tracing::warn!("roce io: AF_XDP unavailable on lo ({e})");
                        None
                    }
                }
            })
            .as_ref();
    }
    let want = u32::from(ip);
    for i in 0..SLOTS {
        if SLOT_IP[i].load(Ordering::Acquire) == want {
            let p = SLOT_PORT[i].load(Ordering::Acquire);
            // SAFETY: a slot's pointer is a leaked Box (never freed), stored
            // before its address was published (Release/Acquire).
            return (!p.is_null()).then(|| unsafe { &*p });
        }
    }
    None
}

/// Opens the AF_XDP port of a device on a non-loopback `ip`: the interface
/// that holds the address, a redirect of UDP 4791 to `ip`/32.
fn open_if_port(ip: Ipv4Addr) -> Result<(), String> {
    let mut opening = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    if port_for(ip).is_some() {
        return Ok(());
    }
    if let Some((_, why)) = opening.iter().find(|(a, _)| *a == ip) {
        return Err(why.clone());
    }
    let r = (|| -> Result<(), String> {
        let ifname = netio::neigh::iface_of(ip)
            .ok_or_else(|| format!("{ip} is not an address of an interface that is up"))?;
        let port = XdpPort::open(&ifname, ip, 32, 4791, cfg())
            .map_err(|e| format!("AF_XDP on {ifname}: {e}"))?;
        let slot = (0..SLOTS)
            .find(|&i| SLOT_IP[i].load(Ordering::Acquire) == 0)
            .ok_or_else(|| format!("more than {SLOTS} AF_XDP devices in one process"))?;
        SLOT_PORT[slot].store(Box::into_raw(Box::new(port)), Ordering::Release);
        SLOT_IP[slot].store(u32::from(ip), Ordering::Release);
        tracing::info!("roce io: AF_XDP on {ifname} for {ip} (UDP 4791)");
        Ok(())
    })();
    if let Err(why) = &r {
        opening.push((ip, why.clone()));
    }
    r
}

/// Whether the opt-in AF_XDP datapath carries the packets of a device on `ip`
/// (opens its port on first use) and, if so, the interface MTU the device's
/// port MTU must fit (its frames also hold packets of path MTU 2048 at most).
/// When it was asked for (`DPUSTACK_ROCE_IO=xdp`) and cannot serve this device,
/// opening the device fails rather than silently falling back to UDP sockets.
pub(crate) fn port_active(ip: Ipv4Addr) -> crate::Result<Option<u32>> {
    if !xdp_asked() {
        return Ok(None);
    }
    let why = if ip.is_loopback() {
        match port_for(ip) {
            Some(port) => {
                // an endpoint from the start: frames for it that another
                // device's receive round takes off the ring are queued for it
                port.rx().register(ip);
                return Ok(Some(netio::neigh::if_mtu("lo").unwrap_or(65536)));
            }
            None => "one process per network namespace on lo; see the warning above".to_string(),
        }
    } else {
        match open_if_port(ip) {
            Ok(()) => {
                if let Some(port) = port_for(ip) {
                    port.rx().register(ip);
                }
                let ifname = netio::neigh::iface_of(ip).unwrap_or_default();
                return Ok(Some(netio::neigh::if_mtu(&ifname).unwrap_or(1500)));
            }
            Err(why) => why,
        }
    };
    Err(crate::Error::Io(std::io::Error::other(format!(
        "DPUSTACK_ROCE_IO=xdp: no AF_XDP port for {ip} ({why}; needs root and XDP sockets)"
    ))))
}

/// The datapath a device on `ip` uses or would use, for `dpustack devices`/`up`.
pub fn datapath(ip: Ipv4Addr) -> String {
    if !xdp_asked() {
        return "udp".to_string();
    }
    match netio::neigh::iface_of(ip) {
        Some(i) => format!("af_xdp on {i} (DPUSTACK_ROCE_IO=xdp)"),
        None => "af_xdp (DPUSTACK_ROCE_IO=xdp; no interface holds this address)".to_string(),
    }
}

/// Received packets copied out of the port (so its lock is not held while
/// the engine's is taken): bytes + (IP fields, offset, length).
type RxCopy = (Vec<u8>, Vec<(Ipv4Pseudo, usize, usize)>);

thread_local! {
    static RX: RefCell<RxCopy> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Takes up to a batch of the frames for `ip` off the port and hands them to
/// `f` as (IP fields, UDP payload) pairs; returns how many. Never waits for the
/// receive half: whoever holds it is receiving and queues our frames for us.
pub(crate) fn recv(ip: Ipv4Addr, port: &XdpPort, f: impl FnOnce(&RxPackets<'_>)) -> usize {
    RX.with_borrow_mut(|(bytes, pkts)| {
        bytes.clear();
        pkts.clear();
        {
            let Some(mut p) = port.try_rx() else {
                return 0;
            };
            p.register(ip);
            p.recv_for(ip, netio::udp::MAX_BATCH, |u| {
                let iph = Ipv4Packet::new_unchecked(u.ip_header);
                let pseudo = Ipv4Pseudo {
                    src: u.src_ip.octets(),
                    dst: u.dst_ip.octets(),
                    id: iph.ident(),
                    frag: iph.frag_field(),
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
        f(&RxPackets { bytes, pkts });
        pkts.len()
    })
}

/// A received batch (see [`recv`]).
pub(crate) struct RxPackets<'a> {
    bytes: &'a [u8],
    pkts: &'a [(Ipv4Pseudo, usize, usize)],
}

impl RxPackets<'_> {
    /// Each packet's IP fields and UDP payload.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Ipv4Pseudo, &[u8])> {
        self.pkts
            .iter()
            .filter_map(|(ip, off, len)| Some((ip, self.bytes.get(*off..off + len)?)))
    }
}

/// As `TxState::pump` for the AF_XDP port.
pub(crate) fn pump(port: &XdpPort, engine: &mut Engine, src: [u8; 4], now: Instant) {
    let mut p = port.tx();
    let mac = p.mac();
    let mut n = 0;
    loop {
        let staged = p.stage(|body| {
            let t = engine.poll_transmit(now, body)?;
            let pkt = body.get_mut(..t.len)?;
            engine.counters.icrc_bytes += t.len as u64;
            let _ = fill_icrc_ipv4(&Ipv4Pseudo::df(src, t.dst, t.sport, t.dport), pkt);
            let flow = UdpFlow {
                src_mac: mac,
                dst_mac: mac, // replaced by the port's neighbour cache
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
