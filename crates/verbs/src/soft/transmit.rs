//! The transmit side of the soft driver: the engine's packets into `sendmmsg`
//! batches (UDP GSO where on), one socket per rxe-style per-QP source port,
//! ICRCs filled knowing each datagram's IPv4 ID. Lives under the device mutex;
//! allocates nothing per packet.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use netio::udp::{TxBatch, UdpBatchSocket};
use wire::roce::icrc::fill_icrc_ipv4;
use wire::roce::Ipv4Pseudo;

use super::engine::Engine;

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

    /// `sendmmsg` calls made so far (every socket of the device).
    pub(crate) fn syscalls(&self) -> u64 {
        self.tx.syscalls()
    }

    /// Drains the engine's transmit queue into batches and sends them.
    pub(crate) fn pump(&mut self, engine: &mut Engine, sock: &UdpBatchSocket, now: Instant) {
        if let Some(port) = super::xdp::port_for(Ipv4Addr::from(self.src)) {
            return super::xdp::pump(port, engine, self.src, now);
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
            let icrc_bytes = &mut engine.counters.icrc_bytes;
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
                    *icrc_bytes += pkt.len() as u64;
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
