//! A deterministic drive of the target's I/O path for instruction counts: one
//! thread, no sockets, no poll group. A [`Qpair`] is connected (admin Connect, CC.EN,
//! I/O Connect) to a subsystem with a null bdev; then batches of `depth` 4 KiB reads
//! are handed to it as one arrival (`process_events`) and completed (`poll_bdev`),
//! what a poll group does per pass. [`Framing::Tcp`]: the qpair is the NVMe/TCP
//! target connection ([`crate::tcp::TargetConn`], as the socket driver's) fed the
//! bytes of a [`crate::tcp::HostConn`], so the PDU parsing and emitting are on the
//! path; [`Framing::None`]: commands go straight to the qpair. The target's work is
//! in the functions named `target_*` (`valgrind --toggle-collect=*iopath::target_*`
//! counts only them, not the host's).
//!
//! Run under `valgrind --tool=callgrind` with the I/O stats off and on, the
//! difference of the instructions per I/O is what the metrics add to the I/O path
//! (callgrind counts instructions, so the figure does not move with the machine's
//! load). The denominator leaves out the kernel (and, without framing, the PDUs), so
//! the share it gives is an upper bound of the share on a real connection.
//! `dpustack bench nvmf` runs it (when valgrind is installed); `dpustack nvmf
//! iopath` is the entry point it runs under callgrind.

use std::collections::VecDeque;
use std::sync::Arc;

use bdev::IoBuf;
use nvme::cmd::{ConnectData, CNTLID_DYNAMIC};
use nvme::{Cqe, IoOpcode, Sqe};

use crate::qpair::Qpair;
use crate::subsystem::Subsystem;
use crate::tgt::{Tgt, TgtParams};
use crate::transport::{QpairEvent, Request, TransportQpair};

const NQN: &str = "nqn.2024-01.io.dpustack:iopath";
const HOSTNQN: &str = "nqn.2024-01.io.dpustack:iopath-host";

/// An in-memory transport qpair: commands pushed by the harness, completions counted,
/// data buffers recycled (as a real transport's pool: no allocation per I/O).
#[derive(Debug, Default)]
struct MemQpair {
    events: VecDeque<QpairEvent>,
    done: Vec<Cqe>,
    bytes: u64,
    pool: Vec<IoBuf>,
}

impl TransportQpair for MemQpair {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        self.events.pop_front()
    }
    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        self.done.push(*cqe);
        self.bytes += data.len() as u64;
        self.put_buf(data);
    }
    fn get_buf(&mut self, len: usize) -> IoBuf {
        match self.pool.iter().rposition(|b| b.len() == len) {
            Some(i) => self.pool.swap_remove(i),
            None => IoBuf::zeroed(len),
        }
    }
    fn put_buf(&mut self, buf: IoBuf) {
        if !buf.is_empty() && self.pool.len() < 256 {
            self.pool.push(buf);
        }
    }
    fn connected(&mut self, _sqflow_disabled: bool) {}
    fn is_terminated(&self) -> bool {
        false
    }
    fn peer(&self) -> String {
        "iopath".into()
    }
    fn describe_stats(&self) -> String {
        String::new()
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoPathRun {
    /// Reads completed successfully.
    pub ios: u64,
    /// Data bytes returned.
    pub bytes: u64,
    /// Reads the target's I/O statistics counted (0 with the stats off).
    pub counted: u64,
}

/// Errors of the harness (the set-up commands failed, or reads did).
#[derive(Debug, thiserror::Error)]
#[error("iopath: {0}")]
pub struct IoPathError(String);

/// What carries the commands to the qpair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Commands handed to the qpair as they are.
    None,
    /// NVMe/TCP PDUs: a host connection's bytes into the target connection.
    Tcp,
}

/// The harness's view of a connected qpair: submit commands, run the target.
trait Side {
    fn submit(&mut self, sqe: Sqe, data: Vec<u8>, c2h_len: u32) -> Result<(), IoPathError>;
    /// Runs the target until the submitted commands completed; their CQEs.
    fn run(&mut self, tgt: &Tgt, out: &mut Vec<Cqe>) -> Result<u64, IoPathError>;
}

/// The target's work of one pass: the arrival, then completion of what it started.
/// (Callers named `target_*` mark it as the target's; callgrind's toggle is an XOR,
/// so a `target_*` function must not call another.)
fn pass<Q: TransportQpair>(q: &mut Qpair<Q>, tgt: &Tgt) {
    q.process_events(tgt);
    let mut spins = 0u32;
    while q.in_flight() > 0 && spins < 1_000_000 {
        q.poll_bdev();
        spins += 1;
    }
}

struct Mem(Qpair<MemQpair>);

impl Side for Mem {
    fn submit(&mut self, sqe: Sqe, data: Vec<u8>, c2h_len: u32) -> Result<(), IoPathError> {
        self.0
            .transport_mut()
            .events
            .push_back(QpairEvent::Command(Request {
                sqe,
                data: IoBuf::Vec(data),
                c2h_len,
                error: None,
            }));
        Ok(())
    }
    fn run(&mut self, tgt: &Tgt, out: &mut Vec<Cqe>) -> Result<u64, IoPathError> {
        target_pass(&mut self.0, tgt);
        let t = self.0.transport_mut();
        out.append(&mut t.done);
        Ok(std::mem::take(&mut t.bytes))
    }
}

struct Tcp {
    q: Qpair<crate::tcp::TargetConn>,
    host: crate::tcp::HostConn,
    wire: Vec<u8>,
}

/// Bytes from the host arrive at the target (a socket read's copy is the kernel's;
/// here it is `handle_bytes`'s, a 72-byte capsule per read).
#[inline(never)]
fn target_rx(q: &mut Qpair<crate::tcp::TargetConn>, tgt: &Tgt, bytes: &[u8]) {
    q.transport_mut().handle_bytes(bytes);
    pass(q, tgt);
}

/// A pass of the target with nothing new arriving.
#[inline(never)]
fn target_pass<Q: TransportQpair>(q: &mut Qpair<Q>, tgt: &Tgt) {
    pass(q, tgt);
}

/// The target's transmit queue was written out (`n` bytes).
#[inline(never)]
fn target_tx_done(q: &mut Qpair<crate::tcp::TargetConn>, n: usize) {
    q.transport_mut().advance_tx(n);
}

impl Tcp {
    fn new(tgt: &Tgt) -> Result<Tcp, IoPathError> {
        let mut t = Tcp {
            q: Qpair::new(
                crate::tcp::TargetConn::new(Default::default()),
                0,
                "iopath".into(),
            ),
            host: crate::tcp::HostConn::new(Default::default()),
            wire: Vec::new(),
        };
        let mut out = Vec::new();
        t.exchange(tgt, &mut out)?;
        if !t.host.is_established() {
            return Err(IoPathError("no ICResp".into()));
        }
        Ok(t)
    }

    /// Moves bytes both ways until both sides are quiet.
    fn exchange(&mut self, tgt: &Tgt, out: &mut Vec<Cqe>) -> Result<u64, IoPathError> {
        let mut bytes = 0u64;
        for _ in 0..10_000 {
            let mut moved = false;
            let b = self.host.poll_transmit();
            if !b.is_empty() {
                self.wire.clear();
                self.wire.extend_from_slice(b);
                let n = b.len();
                self.host.advance_tx(n);
                target_rx(&mut self.q, tgt, &self.wire);
                moved = true;
            } else {
                target_pass(&mut self.q, tgt);
            }
            let b = self.q.transport().poll_transmit();
            if !b.is_empty() {
                self.wire.clear();
                self.wire.extend_from_slice(b);
                let n = b.len();
                target_tx_done(&mut self.q, n);
                self.host.handle_bytes(&self.wire);
                moved = true;
            }
            while let Some(ev) = self.host.poll_event() {
                match ev {
                    crate::tcp::HostEvent::Established => {}
                    crate::tcp::HostEvent::Completion { cqe, data, .. } => {
                        bytes += data.len() as u64;
                        self.host.recycle(data);
                        out.push(cqe);
                    }
                    crate::tcp::HostEvent::Terminated { .. } => {
                        return Err(IoPathError("the connection terminated".into()))
                    }
                }
            }
            if !moved {
                return Ok(bytes);
            }
        }
        Err(IoPathError("the connection did not settle".into()))
    }
}

impl Side for Tcp {
    fn submit(&mut self, sqe: Sqe, data: Vec<u8>, c2h_len: u32) -> Result<(), IoPathError> {
        self.host
            .submit(sqe, &data, c2h_len, 8192)
            .map_err(|e| IoPathError(format!("submit: {e:?}")))
    }
    fn run(&mut self, tgt: &Tgt, out: &mut Vec<Cqe>) -> Result<u64, IoPathError> {
        self.exchange(tgt, out)
    }
}

fn exec(s: &mut dyn Side, tgt: &Tgt, sqe: Sqe, data: Vec<u8>) -> Result<Cqe, IoPathError> {
    s.submit(sqe, data, 0)?;
    let mut out = Vec::new();
    for _ in 0..100 {
        s.run(tgt, &mut out)?;
        if let Some(c) = out.pop() {
            if !c.status().is_success() {
                return Err(IoPathError(format!("{:?}: {:?}", sqe.opcode(), c.status())));
            }
            return Ok(c);
        }
    }
    Err(IoPathError("a set-up command did not complete".into()))
}

fn side(tgt: &Tgt, framing: Framing) -> Result<Box<dyn Side>, IoPathError> {
    Ok(match framing {
        Framing::None => Box::new(Mem(Qpair::new(MemQpair::default(), 0, "iopath".into()))),
        Framing::Tcp => Box::new(Tcp::new(tgt)?),
    })
}

fn connect(
    tgt: &Tgt,
    framing: Framing,
    qid: u16,
    cntlid: u16,
) -> Result<(Box<dyn Side>, u16), IoPathError> {
    let mut q = side(tgt, framing)?;
    let d = ConnectData::new([7; 16], cntlid, NQN, HOSTNQN);
    let c = exec(
        &mut *q,
        tgt,
        Sqe::connect(1, qid, 127, 0),
        d.as_bytes().to_vec(),
    )?;
    Ok((q, (c.dw0() & 0xffff) as u16))
}

/// A connected controller on its own target, ready for reads.
pub struct IoPath {
    tgt: Tgt,
    q: Box<dyn Side>,
    _admin: Box<dyn Side>,
    lba: u64,
    out: Vec<Cqe>,
}

impl std::fmt::Debug for IoPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoPath").finish_non_exhaustive()
    }
}

impl IoPath {
    /// A target with a null bdev, the target's I/O statistics `stats` (on: what
    /// `[metrics] listen` turns on), and a controller connected over `framing`.
    pub fn new(stats: bool, framing: Framing) -> Result<IoPath, IoPathError> {
        let e = |x: &dyn std::fmt::Display| IoPathError(x.to_string());
        let mut tgt = Tgt::new(TgtParams::default());
        let mut s = Subsystem::new(NQN, "IOPATH", "dpustack iopath").map_err(|x| e(&x))?;
        let null = bdev::null::NullBdev::new("null0", 1 << 20, 512).map_err(|x| e(&x))?;
        s.add_ns(1, Arc::new(null), None).map_err(|x| e(&x))?;
        tgt.add_subsystem(s).map_err(|x| e(&x))?;
        tgt.set_io_stats(stats);
        let (mut admin, cntlid) = connect(&tgt, framing, 0, CNTLID_DYNAMIC)?;
        // CC: EN, CSS NVM, MPS 4 KiB, IOSQES 6, IOCQES 4
        exec(
            &mut *admin,
            &tgt,
            Sqe::property_set(2, 0x14, false, 1 | (6 << 16) | (4 << 20)),
            Vec::new(),
        )?;
        let (q, _) = connect(&tgt, framing, 1, cntlid)?;
        Ok(IoPath {
            tgt,
            q,
            _admin: admin,
            lba: 0,
            out: Vec::new(),
        })
    }

    /// Reads `ios` 4 KiB blocks in batches of `depth`; returns the data bytes.
    pub fn reads(&mut self, ios: u64, depth: u16) -> Result<u64, IoPathError> {
        let depth = depth.clamp(1, 127);
        let (mut done, mut bytes) = (0u64, 0u64);
        while done < ios {
            let n = u64::from(depth).min(ios - done) as u16;
            for cid in 0..n {
                // 8 blocks of 512 B = 4 KiB, a stride through the device
                self.lba = (self.lba + 8 * 97) % ((1 << 20) - 8);
                self.q.submit(
                    Sqe::rw(IoOpcode::Read, cid, 1, self.lba, 8),
                    Vec::new(),
                    4096,
                )?;
            }
            self.out.clear();
            bytes += self.q.run(&self.tgt, &mut self.out)?;
            if self.out.len() != n as usize {
                return Err(IoPathError(format!(
                    "{} of {n} reads completed",
                    self.out.len()
                )));
            }
            if let Some(c) = self.out.iter().find(|c| !c.status().is_success()) {
                return Err(IoPathError(format!("read failed: {:?}", c.status())));
            }
            done += n as u64;
        }
        Ok(bytes)
    }

    /// Reads the target's I/O statistics counted (0 with the stats off).
    pub fn counted(&self) -> u64 {
        self.tgt
            .subsystems()
            .flat_map(|s| {
                s.namespaces()
                    .iter()
                    .map(|n| n.stats.total().read_ops)
                    .collect::<Vec<_>>()
            })
            .sum()
    }
}

/// Connects a controller and reads `ios` 4 KiB blocks in batches of `depth` over
/// `framing`, with the target's I/O statistics `stats`.
pub fn run(ios: u64, depth: u16, stats: bool, framing: Framing) -> Result<IoPathRun, IoPathError> {
    let mut p = IoPath::new(stats, framing)?;
    let bytes = p.reads(ios, depth)?;
    Ok(IoPathRun {
        ios,
        bytes,
        counted: p.counted(),
    })
}

/// Timed rounds, the stats off and on alternating (off-on, then on-off) on two
/// targets set up once: `(off, on)` nanoseconds per read of each round, `ios` reads
/// per round in batches of `depth`. One thread, no syscalls on the path, so a round
/// moves only when the thread is preempted; the median of the per-round ratios
/// leaves those out.
pub fn timed_rounds(
    rounds: usize,
    ios: u64,
    depth: u16,
    framing: Framing,
) -> Result<Vec<(f64, f64)>, IoPathError> {
    let mut paths = [IoPath::new(false, framing)?, IoPath::new(true, framing)?];
    for p in paths.iter_mut() {
        p.reads(ios, depth)?; // warm-up: buffers, pools, caches
    }
    let mut v = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let mut t = [0f64; 2];
        for k in 0..2 {
            let which = k ^ (r % 2);
            let t0 = std::time::Instant::now();
            paths[which].reads(ios, depth)?;
            t[which] = t0.elapsed().as_nanos() as f64 / ios as f64;
        }
        v.push((t[0], t[1]));
    }
    if paths[1].counted() == 0 || paths[0].counted() != 0 {
        return Err(IoPathError(
            "the stats were not on (or off) as asked".into(),
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness moves real reads through the target: every read completes with
    /// 4 KiB, and the target's counters see them exactly when the stats are on.
    #[test]
    fn reads_go_through_and_are_counted_only_with_stats_on() {
        for f in [Framing::None, Framing::Tcp] {
            let off = run(100, 32, false, f).unwrap();
            assert_eq!(
                off,
                IoPathRun {
                    ios: 100,
                    bytes: 100 * 4096,
                    counted: 0
                },
                "{f:?}"
            );
            let on = run(100, 32, true, f).unwrap();
            assert_eq!(
                on,
                IoPathRun {
                    ios: 100,
                    bytes: 100 * 4096,
                    counted: 100
                },
                "{f:?}"
            );
            let one = run(5, 1, true, f).unwrap();
            assert_eq!((one.ios, one.counted), (5, 5), "{f:?}");
            let t = timed_rounds(4, 50, 8, f).unwrap();
            assert_eq!(t.len(), 4);
            assert!(t.iter().all(|&(a, b)| a > 0.0 && b > 0.0), "{t:?}");
        }
    }
}
