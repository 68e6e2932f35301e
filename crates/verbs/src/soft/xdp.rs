//! Opt-in AF_XDP datapath, an experiment (see docs in `netio::xdp`): with
//! `DPUSTACK_ROCE_IO=xdp` in the environment, devices on 127.0.0.0/8 receive and
//! send through one AF_XDP socket on `lo` shared by the process
//! (`netio::xdp::port::XdpPort`, generic XDP, copy mode) instead of their UDP
//! sockets: no syscall to receive, one `sendto` kick per batch (receive and
//! transmit halves locked separately, so a receiver is not held up by a kick), frames built here
//! with IPv4 ID 0 + DF exactly as the UDP path's datagrams (same ICRC), received
//! ICRCs checked against the real IPv4 header. ACKs are put on the ring after the
//! other packets of a batch. Needs root, and a private netns (it takes every UDP
//! 4791 frame to 127/8 on that `lo`: a second process asking for it fails to
//! open its device). Receiving happens in the driver's receive round (manual
//! progress, busy polling, and the threaded poller, which naps between rounds
//! instead of sleeping on a socket). Packets must fit a 4 KiB UMEM frame: the
//! port MTU is capped at 2048, so a UD message is at most 2048 bytes. Without the
//! variable nothing changes.

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

use super::engine::Engine;

static PORT: OnceLock<Option<XdpPort>> = OnceLock::new();

/// The shared port if the datapath is on and `ip` is a loopback address.
pub(crate) fn port_for(ip: Ipv4Addr) -> Option<&'static XdpPort> {
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

/// Whether the opt-in AF_XDP datapath carries the packets of a device on `ip`
/// (opens the shared port on first use); its frames hold packets of path MTU
/// 2048 at most, so the device's port MTU is capped there. When it was asked for
/// (`DPUSTACK_ROCE_IO=xdp`) and cannot serve this device, opening the device
/// fails rather than silently falling back to UDP sockets.
pub(crate) fn port_active(ip: Ipv4Addr) -> crate::Result<bool> {
    if std::env::var("DPUSTACK_ROCE_IO").ok().as_deref() != Some("xdp") {
        return Ok(false);
    }
    if let Some(port) = port_for(ip) {
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
