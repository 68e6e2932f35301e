//! A deterministic drive of the target's I/O path for instruction counts: one
//! thread, no sockets, no poll group. A [`Qpair`] over an in-memory transport
//! qpair is connected (admin Connect, CC.EN, I/O Connect) to a subsystem with a null
//! bdev; then batches of `depth` 4 KiB reads are handed to it as one arrival
//! (`process_events`) and completed (`poll_bdev`) — what a poll group does per pass,
//! minus the transport's framing and syscalls.
//!
//! Run under `valgrind --tool=callgrind` with the I/O stats off and on, the
//! difference of the instructions per I/O is what the metrics add to the I/O path
//! (callgrind counts instructions, so the figure does not move with the machine's
//! load). The denominator leaves out the NVMe/TCP framing and the kernel, so the
//! share it gives is an upper bound of the share on a real connection.
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

/// An in-memory transport qpair: commands pushed by the harness, completions counted.
#[derive(Debug, Default)]
struct MemQpair {
    events: VecDeque<QpairEvent>,
    done: Vec<Cqe>,
    bytes: u64,
}

impl TransportQpair for MemQpair {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        self.events.pop_front()
    }
    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        self.done.push(*cqe);
        self.bytes += data.len() as u64;
    }
    fn get_buf(&mut self, len: usize) -> IoBuf {
        IoBuf::zeroed(len)
    }
    fn put_buf(&mut self, _buf: IoBuf) {}
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

fn exec(q: &mut Qpair<MemQpair>, tgt: &Tgt, sqe: Sqe, data: Vec<u8>) -> Result<Cqe, IoPathError> {
    q.transport_mut()
        .events
        .push_back(QpairEvent::Command(Request {
            sqe,
            data: IoBuf::Vec(data),
            c2h_len: 0,
            error: None,
        }));
    for _ in 0..1000 {
        q.process_events(tgt);
        q.poll_bdev();
        if let Some(c) = q.transport_mut().done.pop() {
            if !c.status().is_success() {
                return Err(IoPathError(format!("{:?}: {:?}", sqe.opcode(), c.status())));
            }
            return Ok(c);
        }
    }
    Err(IoPathError("a set-up command did not complete".into()))
}

fn connect(
    tgt: &Tgt,
    qid: u16,
    cntlid: u16,
) -> Result<(Qpair<MemQpair>, u16), IoPathError> {
    let mut q = Qpair::new(MemQpair::default(), 0, "iopath".into());
    let d = ConnectData::new([7; 16], cntlid, NQN, HOSTNQN);
    let c = exec(
        &mut q,
        tgt,
        Sqe::connect(1, qid, 127, 0),
        d.as_bytes().to_vec(),
    )?;
    Ok((q, (c.dw0() & 0xffff) as u16))
}

/// Connects a controller and reads `ios` 4 KiB blocks in batches of `depth`, with
/// the target's I/O statistics `stats` (on: what `[metrics] listen` turns on).
pub fn run(ios: u64, depth: u16, stats: bool) -> Result<IoPathRun, IoPathError> {
    let e = |x: &dyn std::fmt::Display| IoPathError(x.to_string());
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "IOPATH", "dpustack iopath").map_err(|x| e(&x))?;
    let null = bdev::null::NullBdev::new("null0", 1 << 20, 512).map_err(|x| e(&x))?;
    s.add_ns(1, Arc::new(null), None).map_err(|x| e(&x))?;
    tgt.add_subsystem(s).map_err(|x| e(&x))?;
    tgt.set_io_stats(stats);
    let (mut admin, cntlid) = connect(&tgt, 0, CNTLID_DYNAMIC)?;
    // CC: EN, CSS NVM, MPS 4 KiB, IOSQES 6, IOCQES 4
    exec(
        &mut admin,
        &tgt,
        Sqe::property_set(2, 0x14, false, 1 | (6 << 16) | (4 << 20)),
        Vec::new(),
    )?;
    let (mut q, _) = connect(&tgt, 1, cntlid)?;
    let depth = depth.clamp(1, 127);
    let (mut done, mut bytes, mut lba) = (0u64, 0u64, 0u64);
    while done < ios {
        let n = u64::from(depth).min(ios - done) as u16;
        for cid in 0..n {
            // 8 blocks of 512 B = 4 KiB, a stride through the device
            lba = (lba + 8 * 97) % ((1 << 20) - 8);
            q.transport_mut()
                .events
                .push_back(QpairEvent::Command(Request {
                    sqe: Sqe::rw(IoOpcode::Read, cid, 1, lba, 8),
                    data: IoBuf::Vec(Vec::new()),
                    c2h_len: 4096,
                    error: None,
                }));
        }
        q.process_events(&tgt);
        let mut spins = 0;
        while q.in_flight() > 0 {
            q.poll_bdev();
            spins += 1;
            if spins > 1_000_000 {
                return Err(IoPathError("reads did not complete".into()));
            }
        }
        let t = q.transport_mut();
        for c in t.done.drain(..) {
            if !c.status().is_success() {
                return Err(IoPathError(format!("read failed: {:?}", c.status())));
            }
            done += 1;
        }
        bytes += std::mem::take(&mut t.bytes);
    }
    let counted = tgt
        .subsystems()
        .flat_map(|s| {
            s.namespaces()
                .iter()
                .map(|n| n.stats.total().read_ops)
                .collect::<Vec<_>>()
        })
        .sum();
    Ok(IoPathRun {
        ios: done,
        bytes,
        counted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness moves real reads through the target: every read completes with
    /// 4 KiB, and the target's counters see them exactly when the stats are on.
    #[test]
    fn reads_go_through_and_are_counted_only_with_stats_on() {
        let off = run(100, 32, false).unwrap();
        assert_eq!(off, IoPathRun { ios: 100, bytes: 100 * 4096, counted: 0 });
        let on = run(100, 32, true).unwrap();
        assert_eq!(on, IoPathRun { ios: 100, bytes: 100 * 4096, counted: 100 });
        let one = run(5, 1, true).unwrap();
        assert_eq!(one.counted, 5);
    }
}
