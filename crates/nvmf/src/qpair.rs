//! Queue pairs (SPDK `spdk_nvmf_qpair`): one connection's transport side (a
//! [`TransportQpair`]), its controller once connected, and the commands it has in
//! flight on bdev channels.
//!
//! A qpair is owned by one poll group and never shared: the I/O path touches only
//! the qpair, its own bdev channels and atomics of its controller.

use std::sync::Arc;
use std::time::Instant;

use bdev::{BdevIo, IoBuf, IoChannel, IoType};
use nvme::status::{GenericStatus, MediaStatus};
use nvme::{Cqe, FabricsType, IoOpcode, Sct, Sqe, Status};
use tracing::{debug, info, warn};

use crate::ctrlr::{AdminOutcome, Ctrlr, QpairInfo};
use crate::stats::{IoClass, IoStatsCell, PollGroupStats};
use crate::subsystem::Namespace;
use crate::tgt::Tgt;
use crate::transport::{QpairEvent, Request, TransportQpair};

/// What an in-flight bdev I/O is for.
#[derive(Debug)]
enum IoKind {
    Read,
    Write,
    Compare(IoBuf),
    /// Flush, write zeroes, one or more unmaps: count of bdev I/Os left, any failure.
    Simple {
        left: u32,
        failed: bool,
    },
}

#[derive(Debug)]
struct IoCtx {
    cid: u16,
    kind: IoKind,
    /// Index into `channels` (counters of its namespace).
    ch: usize,
    /// Submit time, when I/O stats are on.
    t0: Option<Instant>,
}

/// (nsid, bdev channel, counters when I/O stats are on).
type NsChannel = (u32, Box<dyn IoChannel>, Option<Arc<IoStatsCell>>);

/// Counters of a qpair.
#[derive(Debug, Default, Clone, Copy)]
pub struct QpairStats {
    pub commands: u64,
    pub errors: u64,
}

/// No data.
fn no_data() -> IoBuf {
    IoBuf::Vec(Vec::new())
}

/// One queue pair over the transport qpair `Q`.
pub struct Qpair<Q: TransportQpair> {
    tq: Q,
    portid: u16,
    ctrlr: Option<Arc<Ctrlr>>,
    qid: u16,
    sqsize: u16,
    sqhd: u16,
    sqflow_disabled: bool,
    aers: Vec<u16>,
    /// (nsid, bdev channel, this qpair's counters on the namespace when I/O
    /// stats were on at open).
    channels: Vec<NsChannel>,
    group: Option<Arc<PollGroupStats>>,
    /// The controller's subsystem as of generation `.0` (namespaces may change
    /// while connected; refreshed when the controller's generation moves).
    subsys_cache: Option<(u64, Arc<crate::subsystem::Subsystem>)>,
    /// One clock read per batch (a `process_events` or `poll_bdev` call) for
    /// the I/O stats' latency, taken at the batch's first timed I/O.
    batch_now: Option<Instant>,
    /// The last latency computed in this batch, by submit time: the I/Os of one
    /// submit batch completing in one completion batch share it (one clock
    /// subtraction per batch pair, not per I/O).
    batch_lat: Option<(Instant, u64)>,
    ios: Vec<Option<IoCtx>>,
    free_ios: Vec<usize>,
    busy: std::collections::VecDeque<(u32, BdevIo)>,
    done: Vec<BdevIo>,
    /// Empty iovec lists kept for reuse (no allocation per I/O).
    iov_pool: Vec<Vec<IoBuf>>,
    closing: bool,
    pub stats: QpairStats,
    pub peer: String,
}

impl<Q: TransportQpair> std::fmt::Debug for Qpair<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qpair")
            .field("peer", &self.peer)
            .field("qid", &self.qid)
            .field("cntlid", &self.ctrlr.as_ref().map(|c| c.cntlid))
            .finish()
    }
}

fn st(g: GenericStatus) -> Status {
    Status::generic(g)
}

impl<Q: TransportQpair> AsMut<Q> for Qpair<Q> {
    fn as_mut(&mut self) -> &mut Q {
        &mut self.tq
    }
}

impl<Q: TransportQpair> Qpair<Q> {
    pub fn new(tq: Q, portid: u16, peer: String) -> Self {
        Qpair {
            tq,
            portid,
            ctrlr: None,
            qid: 0,
            sqsize: 0,
            sqhd: 0,
            sqflow_disabled: false,
            aers: Vec::new(),
            channels: Vec::new(),
            group: None,
            batch_now: None,
            batch_lat: None,
            subsys_cache: None,
            ios: Vec::new(),
            free_ios: Vec::new(),
            busy: Default::default(),
            done: Vec::new(),
            iov_pool: Vec::new(),
            closing: false,
            stats: QpairStats::default(),
            peer,
        }
    }

    /// Counts this qpair's connects and completions in its poll group's stats.
    pub fn set_group(&mut self, g: Arc<PollGroupStats>) {
        self.group = Some(g);
    }

    /// The transport side.
    pub fn transport(&self) -> &Q {
        &self.tq
    }
    pub fn transport_mut(&mut self) -> &mut Q {
        &mut self.tq
    }
    /// The transport side back, after [`Qpair::teardown`] (for `qpair_fini`).
    pub fn into_transport(self) -> Q {
        self.tq
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }
    pub fn ctrlr(&self) -> Option<&Arc<Ctrlr>> {
        self.ctrlr.as_ref()
    }
    /// Whether the qpair should be closed (after flushing its transmit buffer).
    pub fn is_closing(&self) -> bool {
        self.closing || self.tq.is_terminated()
    }
    pub fn close(&mut self) {
        self.closing = true;
    }
    /// bdev I/Os in flight (the poll group must not sleep while > 0).
    pub fn in_flight(&self) -> usize {
        self.ios.len() - self.free_ios.len()
    }

    /// Drains transport events and executes commands. Returns whether anything happened.
    pub fn process_events(&mut self, tgt: &Tgt) -> bool {
        let mut progress = false;
        self.batch_now = None;
        self.batch_lat = None;
        while let Some(ev) = self.tq.poll_event() {
            progress = true;
            match ev {
                QpairEvent::Established => {
                    debug!(peer = %self.peer, "transport connection established");
                }
                QpairEvent::Command(req) => self.dispatch(tgt, req),
                QpairEvent::Terminated { by_peer } => {
                    if by_peer {
                        info!(peer = %self.peer, "host terminated the connection");
                    } else {
                        warn!(peer = %self.peer, "terminated the connection (protocol error)");
                    }
                    self.closing = true;
                }
            }
        }
        progress |= self.deliver_aen();
        progress
    }

    /// Completes a held AER with the controller's pending event (admin queue).
    fn deliver_aen(&mut self) -> bool {
        if self.qid != 0 || self.aers.is_empty() {
            return false;
        }
        let Some(c) = self.ctrlr.clone() else {
            return false;
        };
        let Some(dw0) = c.take_aen() else {
            return false;
        };
        let cid = self.aers.remove(0);
        c.aer_done();
        debug!(cntlid = c.cntlid, cid, dw0, "async event");
        self.respond(cid, Status::SUCCESS, dw0 as u64, no_data());
        true
    }

    /// Checks the controller's health (keep-alive on the admin queue).
    pub fn check_timers(&mut self, now_ms: u64) {
        if let Some(c) = &self.ctrlr {
            if self.qid == 0 {
                c.check_keep_alive(now_ms);
            }
            if c.is_failed() {
                self.closing = true;
            }
        }
    }

    /// Called once when the qpair is removed.
    pub fn teardown(&mut self, tgt: &Tgt) {
        debug!(peer = %self.peer, qid = self.qid, stats = %self.tq.describe_stats(), "qpair closed");
        if let Some(c) = self.ctrlr.take() {
            for _ in self.aers.drain(..) {
                c.aer_done();
            }
            c.qpair_gone(self.qid);
            if let Some(g) = &self.group {
                g.disconnected(self.qid == 0);
                g.ios_dropped(self.in_flight() as u64);
            }
            if self.qid == 0 {
                c.fail("admin queue disconnected");
                tgt.remove_ctrlr(&c);
                info!(cntlid = c.cntlid, "controller destroyed");
            } else {
                c.release_qid(self.qid);
            }
        }
    }

    fn respond(&mut self, cid: u16, status: Status, result: u64, data: IoBuf) {
        let mut cqe = Cqe::new(cid, status);
        cqe.set_result64(result);
        cqe.set_sqid(self.qid);
        cqe.set_sqhd(if self.sqflow_disabled {
            0xffff
        } else {
            self.sqhd
        });
        if !status.is_success() {
            self.stats.errors += 1;
        }
        self.tq.complete(&cqe, data);
    }

    /// Completes `cid` with an error status and no data, and gives the command's
    /// (unused) data buffer back to the pool.
    fn fail(&mut self, cid: u16, status: Status, data: IoBuf) {
        self.respond(cid, status, 0, no_data());
        self.tq.put_buf(data);
    }

    fn dispatch(&mut self, tgt: &Tgt, req: Request) {
        let sqe = req.sqe;
        let cid = sqe.cid();
        self.stats.commands += 1;
        if self.sqsize > 0 {
            self.sqhd = (self.sqhd + 1) % (self.sqsize + 1);
        }
        if let Some(e) = req.error {
            let (sct, sc) = e.status();
            debug!(cid, ?e, "command data error");
            self.fail(
                cid,
                Status::new(Sct::from(sct), sc).with_dnr(true),
                req.data,
            );
            return;
        }
        if sqe.is_fabrics() && sqe.fctype() == FabricsType::Connect {
            self.connect(tgt, &sqe, req);
            return;
        }
        let Some(ctrlr) = self.ctrlr.clone() else {
            debug!(cid, opc = sqe.opcode(), "command before Connect");
            self.fail(
                cid,
                st(GenericStatus::CommandSequenceError).with_dnr(true),
                req.data,
            );
            return;
        };
        if self.qid == 0 {
            match ctrlr.exec_admin(tgt, &sqe, &req.data, tgt.now_ms()) {
                AdminOutcome::Done(s, r, mut data) => {
                    data.truncate(req.c2h_len as usize);
                    self.respond(cid, s, r, IoBuf::Vec(data));
                }
                AdminOutcome::Aer => self.aers.push(cid),
            }
            self.tq.put_buf(req.data);
            return;
        }
        self.exec_io(ctrlr, sqe, req, tgt.io_stats());
    }

    fn connect(&mut self, tgt: &Tgt, sqe: &Sqe, req: Request) {
        let cid = sqe.cid();
        if self.ctrlr.is_some() {
            self.respond(
                cid,
                st(GenericStatus::CommandSequenceError).with_dnr(true),
                0,
                no_data(),
            );
            return;
        }
        match tgt.connect(sqe, &req.data, self.portid) {
            Ok(c) => {
                self.qid = c.qid;
                self.sqsize = c.sqsize;
                self.sqhd = 1 % (c.sqsize + 1);
                self.sqflow_disabled = c.sqflow_disabled;
                self.tq.connected(c.sqflow_disabled);
                let cntlid = c.ctrlr.cntlid;
                c.ctrlr.qpair_connected(QpairInfo {
                    qid: c.qid,
                    portid: self.portid,
                    peer: self.peer.clone(),
                    poll_group: self.group.as_ref().map_or(0, |g| g.id),
                });
                if let Some(g) = &self.group {
                    g.connected(c.qid == 0);
                }
                debug!(peer = %self.peer, cntlid, qid = c.qid, sqsize = c.sqsize, "queue connected");
                self.ctrlr = Some(c.ctrlr);
                self.respond(cid, Status::SUCCESS, cntlid as u64, no_data());
            }
            Err(e) => {
                warn!(peer = %self.peer, status = e.status.fabrics_name(), dw0 = e.dw0, "connect refused");
                self.respond(cid, e.status, e.dw0 as u64, no_data());
            }
        }
        self.tq.put_buf(req.data);
    }

    fn channel(&mut self, ns: &Namespace, io_stats: bool) -> Option<usize> {
        if let Some(i) = self.channels.iter().position(|(n, ..)| *n == ns.nsid) {
            return Some(i);
        }
        match ns.bdev.open_channel() {
            Ok(ch) => {
                let cell = io_stats.then(|| ns.stats.register());
                self.channels.push((ns.nsid, ch, cell));
                Some(self.channels.len() - 1)
            }
            Err(e) => {
                warn!(nsid = ns.nsid, %e, "cannot open a bdev channel");
                None
            }
        }
    }

    fn iov(&mut self, buf: IoBuf) -> Vec<IoBuf> {
        let mut v = self.iov_pool.pop().unwrap_or_default();
        v.push(buf);
        v
    }

    fn alloc_io(&mut self, cid: u16, kind: IoKind, ch: usize) -> u64 {
        let t0 = match self.channels[ch].2 {
            Some(_) => Some(*self.batch_now.get_or_insert_with(Instant::now)),
            None => None,
        };
        if let Some(g) = &self.group {
            g.io_submitted();
        }
        let ctx = IoCtx { cid, kind, ch, t0 };
        if let Some(i) = self.free_ios.pop() {
            self.ios[i] = Some(ctx);
            i as u64
        } else {
            self.ios.push(Some(ctx));
            (self.ios.len() - 1) as u64
        }
    }

    fn submit(&mut self, ch: usize, io: BdevIo) {
        let nsid = self.channels[ch].0;
        if !self.busy.is_empty() {
            self.busy.push_back((nsid, io));
            return;
        }
        if let Err(rej) = self.channels[ch].1.submit(io) {
            if matches!(rej.error, bdev::Error::Busy) {
                self.busy.push_back((nsid, rej.io));
            } else {
                warn!(error = %rej.error, "bdev refused an I/O");
                let mut io = rej.io;
                io.status = bdev::IoStatus::Failed(bdev::IoError::Aborted);
                self.done.push(io);
            }
        }
    }

    fn exec_io(&mut self, ctrlr: Arc<Ctrlr>, sqe: Sqe, req: Request, io_stats: bool) {
        let cid = sqe.cid();
        if !ctrlr.is_ready() {
            self.respond(cid, st(GenericStatus::CommandSequenceError), 0, no_data());
            self.tq.put_buf(req.data);
            return;
        }
        if sqe.is_fabrics() {
            self.fail(
                cid,
                st(GenericStatus::InvalidOpcode).with_dnr(true),
                req.data,
            );
            return;
        }
        let op = sqe.io_opcode();
        let nsid = sqe.nsid();
        if op == IoOpcode::Flush && nsid == u32::MAX {
            // broadcast flush: every namespace of this controller is RAM/null or
            // written through; nothing to write back
            self.respond(cid, Status::SUCCESS, 0, no_data());
            return;
        }
        let gen = ctrlr.live_gen();
        if self.subsys_cache.as_ref().is_none_or(|(g, _)| *g != gen) {
            self.subsys_cache = Some((gen, ctrlr.live_subsys()));
        }
        let Some(ns) = self
            .subsys_cache
            .as_ref()
            .and_then(|(_, s)| s.ns(nsid))
            .cloned()
        else {
            self.fail(
                cid,
                st(GenericStatus::InvalidNamespaceOrFormat).with_dnr(true),
                req.data,
            );
            return;
        };
        let bs = ns.block_size() as u64;
        let nlb = sqe.num_blocks() as u64;
        let slba = sqe.slba();
        let in_range = |n: u64| slba.checked_add(n).is_some_and(|e| e <= ns.num_blocks());
        let Some(ch) = self.channel(&ns, io_stats) else {
            self.respond(cid, st(GenericStatus::InternalError), 0, no_data());
            self.tq.put_buf(req.data);
            return;
        };
        match op {
            IoOpcode::Read | IoOpcode::Compare => {
                let bytes = nlb * bs;
                let have = if op == IoOpcode::Read {
                    req.c2h_len as u64
                } else {
                    req.data.len() as u64
                };
                if !in_range(nlb) {
                    self.fail(
                        cid,
                        st(GenericStatus::LbaOutOfRange).with_dnr(true),
                        req.data,
                    );
                    return;
                }
                if have != bytes {
                    self.fail(
                        cid,
                        st(GenericStatus::DataSglLengthInvalid).with_dnr(true),
                        req.data,
                    );
                    return;
                }
                let buf = self.tq.get_buf(bytes as usize);
                let kind = if op == IoOpcode::Read {
                    self.tq.put_buf(req.data);
                    IoKind::Read
                } else {
                    IoKind::Compare(req.data)
                };
                let ctx = self.alloc_io(cid, kind, ch);
                let iov = self.iov(buf);
                self.submit(ch, BdevIo::read(slba, nlb, iov, ctx));
            }
            IoOpcode::Write => {
                if !in_range(nlb) {
                    self.fail(
                        cid,
                        st(GenericStatus::LbaOutOfRange).with_dnr(true),
                        req.data,
                    );
                    return;
                }
                if req.data.len() as u64 != nlb * bs {
                    self.fail(
                        cid,
                        st(GenericStatus::DataSglLengthInvalid).with_dnr(true),
                        req.data,
                    );
                    return;
                }
                let ctx = self.alloc_io(cid, IoKind::Write, ch);
                let iov = self.iov(req.data);
                self.submit(ch, BdevIo::write(slba, nlb, iov, ctx));
            }
            IoOpcode::Flush => {
                let ctx = self.alloc_io(
                    cid,
                    IoKind::Simple {
                        left: 1,
                        failed: false,
                    },
                    ch,
                );
                self.submit(ch, BdevIo::flush(ctx));
            }
            IoOpcode::WriteZeroes => {
                if !in_range(nlb) {
                    self.respond(
                        cid,
                        st(GenericStatus::LbaOutOfRange).with_dnr(true),
                        0,
                        no_data(),
                    );
                    return;
                }
                if !ns.bdev.io_type_supported(IoType::WriteZeroes) {
                    self.respond(
                        cid,
                        st(GenericStatus::InvalidOpcode).with_dnr(true),
                        0,
                        no_data(),
                    );
                    return;
                }
                let ctx = self.alloc_io(
                    cid,
                    IoKind::Simple {
                        left: 1,
                        failed: false,
                    },
                    ch,
                );
                self.submit(ch, BdevIo::write_zeroes(slba, nlb, ctx));
            }
            IoOpcode::DatasetManagement => {
                let nr = sqe.dsm_nr() as usize + 1;
                let data = req.data;
                if data.len() < nr * 16 {
                    self.respond(
                        cid,
                        st(GenericStatus::DataSglLengthInvalid).with_dnr(true),
                        0,
                        no_data(),
                    );
                    self.tq.put_buf(data);
                    return;
                }
                if !sqe.dsm_deallocate() || !ns.bdev.io_type_supported(IoType::Unmap) {
                    // only deallocate has an effect; attributes alone are hints
                    self.respond(cid, Status::SUCCESS, 0, no_data());
                    self.tq.put_buf(data);
                    return;
                }
                let mut ranges = Vec::with_capacity(nr);
                for r in data[..nr * 16].chunks_exact(16) {
                    let len = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as u64;
                    let mut s = [0u8; 8];
                    s.copy_from_slice(&r[8..16]);
                    let start = u64::from_le_bytes(s);
                    if start.checked_add(len).is_none_or(|e| e > ns.num_blocks()) {
                        self.respond(
                            cid,
                            st(GenericStatus::LbaOutOfRange).with_dnr(true),
                            0,
                            no_data(),
                        );
                        self.tq.put_buf(data);
                        return;
                    }
                    if len > 0 {
                        ranges.push((start, len));
                    }
                }
                self.tq.put_buf(data);
                if ranges.is_empty() {
                    self.respond(cid, Status::SUCCESS, 0, no_data());
                    return;
                }
                let ctx = self.alloc_io(
                    cid,
                    IoKind::Simple {
                        left: ranges.len() as u32,
                        failed: false,
                    },
                    ch,
                );
                for (s, l) in ranges {
                    self.submit(ch, BdevIo::unmap(s, l, ctx));
                }
            }
            _ => {
                debug!(opc = sqe.opcode(), "unsupported I/O opcode");
                self.fail(
                    cid,
                    st(GenericStatus::InvalidOpcode).with_dnr(true),
                    req.data,
                );
            }
        }
    }

    /// Polls the bdev channels and completes finished commands.
    pub fn poll_bdev(&mut self) -> bool {
        let mut progress = false;
        self.batch_now = None;
        self.batch_lat = None;
        // resubmit what a full channel handed back
        while let Some((nsid, io)) = self.busy.pop_front() {
            let Some(ch) = self.channels.iter().position(|(n, ..)| *n == nsid) else {
                continue;
            };
            if let Err(rej) = self.channels[ch].1.submit(io) {
                if matches!(rej.error, bdev::Error::Busy) {
                    self.busy.push_front((nsid, rej.io));
                    break;
                }
                let mut io = rej.io;
                io.status = bdev::IoStatus::Failed(bdev::IoError::Aborted);
                self.done.push(io);
            }
            progress = true;
        }
        let mut done = std::mem::take(&mut self.done);
        for (_, ch, _) in self.channels.iter_mut() {
            if ch.in_flight() > 0 {
                ch.poll(&mut done);
            }
        }
        for io in done.drain(..) {
            progress = true;
            self.complete_io(io);
        }
        self.done = done;
        progress
    }

    fn complete_io(&mut self, mut io: BdevIo) {
        let slot = io.ctx as usize;
        let ok = io.is_success();
        let Some(Some(ctx)) = self.ios.get_mut(slot) else {
            return;
        };
        if let IoKind::Simple { left, failed } = &mut ctx.kind {
            *left -= 1;
            *failed |= !ok;
            if *left > 0 {
                return;
            }
        }
        let Some(ctx) = self.ios[slot].take() else {
            return;
        };
        self.free_ios.push(slot);
        let buf = io.bufs.pop().unwrap_or_else(no_data);
        if io.bufs.capacity() > 0 && self.iov_pool.len() < 256 {
            io.bufs.clear();
            self.iov_pool.push(std::mem::take(&mut io.bufs));
        }
        let cid = ctx.cid;
        if let Some(g) = &self.group {
            g.io_completed();
        }
        if let (Some(t0), Some((_, _, Some(cell)))) = (ctx.t0, self.channels.get(ctx.ch)) {
            let class = match ctx.kind {
                IoKind::Read => IoClass::Read,
                IoKind::Write => IoClass::Write,
                _ => IoClass::Other,
            };
            let ns = match self.batch_lat {
                Some((t, ns)) if t == t0 => ns,
                _ => {
                    let now = *self.batch_now.get_or_insert_with(Instant::now);
                    let ns = now.saturating_duration_since(t0).as_nanos() as u64;
                    self.batch_lat = Some((t0, ns));
                    ns
                }
            };
            cell.record(class, buf.len() as u64, ok, ns);
        }
        match ctx.kind {
            IoKind::Read => {
                if ok {
                    self.respond(cid, Status::SUCCESS, 0, buf);
                } else {
                    self.tq.put_buf(buf);
                    self.respond(
                        cid,
                        Status::media(MediaStatus::UnrecoveredReadError),
                        0,
                        no_data(),
                    );
                }
            }
            IoKind::Write => {
                let s = if ok {
                    Status::SUCCESS
                } else {
                    Status::media(MediaStatus::WriteFault)
                };
                self.respond(cid, s, 0, no_data());
                self.tq.put_buf(buf);
            }
            IoKind::Compare(want) => {
                let s = if !ok {
                    Status::media(MediaStatus::UnrecoveredReadError)
                } else if buf[..] == want[..] {
                    Status::SUCCESS
                } else {
                    Status::media(MediaStatus::CompareFailure)
                };
                self.respond(cid, s, 0, no_data());
                self.tq.put_buf(buf);
                self.tq.put_buf(want);
            }
            IoKind::Simple { failed, .. } => {
                let s = if failed {
                    st(GenericStatus::InternalError)
                } else {
                    Status::SUCCESS
                };
                self.respond(cid, s, 0, no_data());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The target core without sockets: a `HostConn` and qpairs joined in memory.
    use super::*;
    use crate::subsystem::Subsystem;
    use crate::tcp::{HostConn, HostEvent, HostParams, TargetConn, TargetParams};
    use crate::tgt::TgtParams;
    use nvme::cmd::ConnectData;
    use nvme::AdminOpcode;

    const NQN: &str = "nqn.2024-01.io.dpustack:core";

    struct Link {
        h: HostConn,
        q: Qpair<TargetConn>,
    }

    impl Link {
        fn new() -> Link {
            let mut l = Link {
                h: HostConn::new(HostParams::default()),
                q: Qpair::new(TargetConn::new(TargetParams::default()), 1, "mem".into()),
            };
            l.h.handle_bytes(&[]);
            l
        }
        fn step(&mut self, tgt: &Tgt) {
            for _ in 0..16 {
                let b = self.h.poll_transmit().to_vec();
                self.h.advance_tx(b.len());
                self.q.transport_mut().handle_bytes(&b);
                self.q.process_events(tgt);
                self.q.poll_bdev();
                let b = self.q.transport_mut().drain_tx();
                self.h.handle_bytes(&b);
            }
        }
        fn exec(&mut self, tgt: &Tgt, sqe: Sqe, write: &[u8], read: u32) -> (Cqe, Vec<u8>) {
            self.h.submit(sqe, write, read, 8192).unwrap();
            self.step(tgt);
            loop {
                match self.h.poll_event() {
                    Some(HostEvent::Completion { cqe, data, .. }) => return (cqe, data),
                    Some(_) => continue,
                    None => panic!("no completion"),
                }
            }
        }
    }

    fn tgt() -> Tgt {
        let mut t = Tgt::new(TgtParams::default());
        let mut s = Subsystem::new(NQN, "SN", "model").unwrap();
        let m = bdev::malloc::MallocBdev::new("m", 256, 512).unwrap();
        s.add_ns(1, std::sync::Arc::new(m), None).unwrap();
        t.add_subsystem(s).unwrap();
        t
    }

    fn connect(l: &mut Link, t: &Tgt, qid: u16, cntlid: u16) -> Cqe {
        let sqe = Sqe::connect(1, qid, 31, 0);
        let d = ConnectData::new([1; 16], cntlid, NQN, "nqn.2024-01.io.dpustack:h");
        l.exec(t, sqe, d.as_bytes(), 0).0
    }

    #[test]
    fn admin_and_io_queue_without_sockets() {
        let t = tgt();
        let mut admin = Link::new();
        admin.step(&t);
        // a command before Connect is a sequence error
        let (c, _) = admin.exec(&t, Sqe::admin(AdminOpcode::KeepAlive, 2, 0), &[], 0);
        assert!(c
            .status()
            .is_generic(nvme::status::GenericStatus::CommandSequenceError));
        let c = connect(&mut admin, &t, 0, 0xffff);
        assert!(c.status().is_success());
        let cntlid = c.connect_cntlid();
        // Identify before CC.EN: sequence error; an I/O queue before CC.EN: refused
        let mut id = Sqe::admin(AdminOpcode::Identify, 3, 0);
        id.set_cdw10(1);
        let (c, _) = admin.exec(&t, id, &[], 4096);
        assert!(!c.status().is_success());
        let mut io = Link::new();
        io.step(&t);
        assert!(!connect(&mut io, &t, 1, cntlid).status().is_success());
        // enable
        let (c, _) = admin.exec(
            &t,
            Sqe::property_set(4, 0x14, false, 1 | (6 << 16) | (4 << 20)),
            &[],
            0,
        );
        assert!(c.status().is_success());
        let (c, _) = admin.exec(&t, Sqe::property_get(5, 0x1c, false), &[], 0);
        assert_eq!(c.dw0() & 1, 1);
        let (c, d) = admin.exec(&t, id, &[], 4096);
        assert!(c.status().is_success());
        assert_eq!(u16::from_le_bytes([d[78], d[79]]), cntlid);
        // I/O queue: connect, write, read back
        let mut io = Link::new();
        io.step(&t);
        assert!(connect(&mut io, &t, 1, cntlid).status().is_success());
        // the same qid twice is refused
        let mut dup = Link::new();
        dup.step(&t);
        assert!(!connect(&mut dup, &t, 1, cntlid).status().is_success());
        let data: Vec<u8> = (0..16384u32).map(|i| (i % 253) as u8).collect();
        let (c, _) = io.exec(&t, Sqe::rw(IoOpcode::Write, 7, 1, 3, 32), &data, 0);
        assert!(c.status().is_success());
        let (c, back) = io.exec(&t, Sqe::rw(IoOpcode::Read, 8, 1, 3, 32), &[], 16384);
        assert!(c.status().is_success());
        assert_eq!(back, data);
        assert_eq!(c.sqid(), 1);
        // shutdown: I/O afterwards is a sequence error; losing the admin queue
        // destroys the controller and closes its I/O queues
        let (c, _) = admin.exec(&t, Sqe::property_set(9, 0x14, false, 1 | (1 << 14)), &[], 0);
        assert!(c.status().is_success());
        let (c, _) = admin.exec(&t, Sqe::property_get(10, 0x1c, false), &[], 0);
        assert_eq!((c.dw0() >> 2) & 3, 2);
        let (c, _) = io.exec(&t, Sqe::rw(IoOpcode::Read, 11, 1, 3, 1), &[], 512);
        assert!(c
            .status()
            .is_generic(nvme::status::GenericStatus::CommandSequenceError));
        admin.q.teardown(&t);
        assert_eq!(t.ctrlr_count(), 0);
        io.q.check_timers(0);
        assert!(io.q.is_closing());
    }

    /// A namespace added (and one removed) while a host is connected: the held
    /// AER completes with Namespace Attribute Changed (log page 04h), the
    /// Changed Namespace List names the NSID once, the active list and the
    /// connected I/O queue see the change.
    #[test]
    fn namespace_changes_while_connected_raise_an_aen() {
        use crate::ctrlr::AEN_NS_ATTR_CHANGED;
        let t = tgt();
        let mut admin = Link::new();
        admin.step(&t);
        let cntlid = connect(&mut admin, &t, 0, 0xffff).connect_cntlid();
        admin.exec(
            &t,
            Sqe::property_set(4, 0x14, false, 1 | (6 << 16) | (4 << 20)),
            &[],
            0,
        );
        let mut aec = Sqe::admin(AdminOpcode::SetFeatures, 5, 0);
        aec.set_cdw10(0x0b);
        aec.set_cdw11(1 << 8);
        assert!(admin.exec(&t, aec, &[], 0).0.status().is_success());
        let mut io = Link::new();
        io.step(&t);
        assert!(connect(&mut io, &t, 1, cntlid).status().is_success());
        let aer = |l: &mut Link, cid| {
            l.h.submit(
                Sqe::admin(AdminOpcode::AsyncEventRequest, cid, 0),
                &[],
                0,
                0,
            )
            .unwrap();
        };
        aer(&mut admin, 20);
        admin.step(&t);
        assert!(admin.h.poll_event().is_none(), "no event yet");
        // NSID 2 is not there yet
        let (c, _) = io.exec(&t, Sqe::rw(IoOpcode::Read, 6, 2, 0, 1), &[], 512);
        assert!(c
            .status()
            .is_generic(nvme::status::GenericStatus::InvalidNamespaceOrFormat));
        let mut s = (*t.subsystem(NQN).unwrap()).clone();
        let m = bdev::malloc::MallocBdev::new("m2", 64, 512).unwrap();
        s.add_ns(2, std::sync::Arc::new(m), None).unwrap();
        assert!(t.replace_subsystem(s));
        admin.step(&t);
        let ev = loop {
            match admin.h.poll_event() {
                Some(HostEvent::Completion { cqe, .. }) => break cqe,
                Some(_) => continue,
                None => panic!("the AER did not complete"),
            }
        };
        assert_eq!(ev.cid(), 20);
        assert_eq!(ev.dw0(), AEN_NS_ATTR_CHANGED);
        let log = |l: &mut Link, cid| {
            let mut g = Sqe::admin(AdminOpcode::GetLogPage, cid, 0);
            g.set_cdw10(0x04 | ((4096 / 4 - 1) << 16));
            let (c, d) = l.exec(&t, g, &[], 4096);
            assert!(c.status().is_success());
            let n =
                |i: usize| u32::from_le_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]]);
            (n(0), n(1))
        };
        assert_eq!(log(&mut admin, 21), (2, 0));
        assert_eq!(log(&mut admin, 22), (0, 0), "read clears the list");
        let mut id = Sqe::admin(AdminOpcode::Identify, 23, 0);
        id.set_cdw10(2);
        let (_, d) = admin.exec(&t, id, &[], 4096);
        assert_eq!(&d[..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
        // the connected I/O queue reads the new namespace
        let (c, _) = io.exec(&t, Sqe::rw(IoOpcode::Read, 7, 2, 0, 1), &[], 512);
        assert!(c.status().is_success());
        // removal: another event, and NSID 1 is gone for the I/O queue
        aer(&mut admin, 24);
        let mut s = (*t.subsystem(NQN).unwrap()).clone();
        assert!(s.remove_ns(1));
        t.replace_subsystem(s);
        admin.step(&t);
        let got = std::iter::from_fn(|| admin.h.poll_event()).any(|e| {
            matches!(e, HostEvent::Completion { cqe, .. } if cqe.cid() == 24 && cqe.dw0() == AEN_NS_ATTR_CHANGED)
        });
        assert!(got, "no AEN for the removal");
        assert_eq!(log(&mut admin, 25), (1, 0));
        let (c, _) = io.exec(&t, Sqe::rw(IoOpcode::Read, 8, 1, 0, 1), &[], 512);
        assert!(c
            .status()
            .is_generic(nvme::status::GenericStatus::InvalidNamespaceOrFormat));
    }

    #[test]
    fn aer_limit_and_keep_alive_timer() {
        let t = tgt();
        let mut admin = Link::new();
        admin.step(&t);
        let sqe = Sqe::connect(1, 0, 31, 100);
        let d = ConnectData::new([1; 16], 0xffff, NQN, "nqn.2024-01.io.dpustack:h");
        assert!(admin.exec(&t, sqe, d.as_bytes(), 0).0.status().is_success());
        admin.exec(
            &t,
            Sqe::property_set(4, 0x14, false, 1 | (6 << 16) | (4 << 20)),
            &[],
            0,
        );
        for cid in 10..14 {
            admin
                .h
                .submit(
                    Sqe::admin(AdminOpcode::AsyncEventRequest, cid, 0),
                    &[],
                    0,
                    0,
                )
                .unwrap();
        }
        admin.step(&t);
        assert!(admin.h.poll_event().is_none(), "AERs are held");
        let (c, _) = admin.exec(
            &t,
            Sqe::admin(AdminOpcode::AsyncEventRequest, 14, 0),
            &[],
            0,
        );
        assert_eq!(c.status().sc(), 0x05); // AER limit exceeded
                                           // keep-alive: KATO 100 ms
        admin.q.check_timers(t.now_ms());
        assert!(!admin.q.is_closing());
        admin.q.check_timers(t.now_ms() + 1000);
        assert!(admin.q.is_closing());
    }
}
