//! The switch's ports: `N=afpacket:IFNAME` (a Linux interface, AF_PACKET),
//! `N=pcap-rx:FILE` (frames replayed once as received on N), `N=pcap-tx:FILE`
//! (what is output to N is written there).

use flow::driver::{read_pcap, AfPacket, LinkType, PcapWriter};

use crate::{Error, Result};

/// One open port.
pub enum Port {
    Af(AfPacket),
    PcapRx(Vec<Vec<u8>>),
    PcapTx(PcapWriter<std::fs::File>),
}

/// Opens the port a `N=KIND:ARG` spec names.
pub fn open_port(spec: &str) -> Result<(u32, Port)> {
    let (n, rest) = spec
        .split_once('=')
        .ok_or_else(|| Error::Config(format!("port `{spec}`: expected N=SPEC")))?;
    let n: u32 = n
        .parse()
        .map_err(|_| Error::Config(format!("port `{spec}`: bad port number")))?;
    let (kind, arg) = rest.split_once(':').ok_or_else(|| {
        Error::Config(format!(
            "port `{spec}`: expected afpacket:IF, pcap-rx:FILE or pcap-tx:FILE"
        ))
    })?;
    let open = |what: String| move |source| Error::Open { what, source };
    let p = match kind {
        "afpacket" => Port::Af(AfPacket::open(arg).map_err(open(format!("AF_PACKET on {arg}")))?),
        "pcap-rx" => Port::PcapRx(read_pcap(
            std::fs::File::open(arg).map_err(open(format!("opening {arg}")))?,
        )?),
        "pcap-tx" => Port::PcapTx(PcapWriter::new(
            std::fs::File::create(arg).map_err(open(format!("creating {arg}")))?,
            LinkType::Ethernet,
        )?),
        _ => {
            return Err(Error::Config(format!(
                "port `{spec}`: unknown kind `{kind}`"
            )))
        }
    };
    Ok((n, p))
}

/// Linux's ENOBUFS (a full device queue, as EAGAIN for AF_PACKET sends).
const ENOBUFS: i32 = 105;

/// Default bound of a port's transmit queue (frames).
pub const DEFAULT_TX_QUEUE: usize = 1024;

/// What became of a frame handed to [`TxQueue::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// The kernel took it.
    Sent,
    /// The kernel had no room: it waits in the queue.
    Queued,
    /// The queue was at its bound: dropped (counted in [`TxStats::dropped`]).
    Dropped,
    /// The kernel refused it for another reason (too big, link down): dropped
    /// (counted in [`TxStats::errors`]).
    Error,
}

/// Counters of a port's transmit queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Frames the kernel took (at once or from the queue).
    pub sent: u64,
    /// Frames dropped because the queue was at its bound.
    pub dropped: u64,
    /// Frames the kernel refused for another reason than room.
    pub errors: u64,
}

/// A port's transmit queue: frames the kernel had no room for (EAGAIN /
/// ENOBUFS) wait here, in order, at most `cap` of them; past it a frame is
/// dropped and counted, so a peer that floods a slow port cannot grow the
/// switch's memory (and a refused send never stops the switch loop).
#[derive(Debug)]
pub struct TxQueue {
    q: std::collections::VecDeque<Vec<u8>>,
    cap: usize,
    pub stats: TxStats,
}

fn no_room(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(ENOBUFS)
}

impl TxQueue {
    pub fn new(cap: usize) -> TxQueue {
        TxQueue {
            q: std::collections::VecDeque::new(),
            cap,
            stats: TxStats::default(),
        }
    }

    /// Frames waiting now.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Sends `frame` with `send` (the kernel), behind the frames still queued.
    pub fn send(
        &mut self,
        frame: &[u8],
        mut send: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> TxOutcome {
        if self.q.is_empty() {
            match send(frame) {
                Ok(()) => {
                    self.stats.sent += 1;
                    return TxOutcome::Sent;
                }
                Err(e) if !no_room(&e) => {
                    self.stats.errors += 1;
                    tracing::debug!("port send refused: {e}");
                    return TxOutcome::Error;
                }
                Err(_) => {}
            }
        }
        if self.q.len() >= self.cap {
            self.stats.dropped += 1;
            return TxOutcome::Dropped;
        }
        self.q.push_back(frame.to_vec());
        TxOutcome::Queued
    }

    /// Retries the queued frames in order until the kernel has no room again;
    /// returns how many it took.
    pub fn flush(&mut self, mut send: impl FnMut(&[u8]) -> std::io::Result<()>) -> usize {
        let mut n = 0;
        while let Some(f) = self.q.front() {
            match send(f) {
                Ok(()) => {
                    self.stats.sent += 1;
                    n += 1;
                }
                Err(e) if no_room(&e) => break,
                Err(_) => self.stats.errors += 1,
            }
            self.q.pop_front();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn tx_queue_bounds_and_counts() {
        let mut q = TxQueue::new(3);
        let full = |_: &[u8]| Err(Error::from(ErrorKind::WouldBlock));
        assert_eq!(q.send(b"a", |_| Ok(())), TxOutcome::Sent);
        // The kernel has no room: three wait, the next ones are dropped.
        for f in [b"b", b"c", b"d"] {
            assert_eq!(q.send(f, full), TxOutcome::Queued);
        }
        assert_eq!(q.send(b"e", full), TxOutcome::Dropped);
        assert_eq!(
            q.send(b"f", |_| Ok(())),
            TxOutcome::Dropped,
            "behind the queue"
        );
        assert_eq!(q.len(), 3);
        // ENOBUFS is "no room" too; another error drops the frame.
        assert_eq!(
            q.send(b"g", |_| Err(Error::from_raw_os_error(ENOBUFS))),
            TxOutcome::Dropped
        );
        // Room again: the queue drains in order.
        let mut out = Vec::new();
        assert_eq!(
            q.flush(|f| {
                out.push(f.to_vec());
                Ok(())
            }),
            3
        );
        assert_eq!(out, [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        assert_eq!(
            q.send(b"h", |_| Err(Error::from_raw_os_error(90))),
            TxOutcome::Error
        );
        assert_eq!(
            q.stats,
            TxStats {
                sent: 4,
                dropped: 3,
                errors: 1
            }
        );
    }
}
