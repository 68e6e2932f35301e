//! The NVMe/RDMA host transport: one RC QP per queue through the RDMA CM, capsules
//! by SEND from a registered capsule region, CQEs into pre-posted receives, data in
//! registered pool buffers named to the target by keyed SGLs (the caller's slices
//! are copied in and out: the host library's `HostQueue` API hands over `&[u8]` and
//! takes back `Vec<u8>`).

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId, EventChannel};
use cm::{ConnParam, EventType, PortSpace};
use nvme::log::TrType;
use nvme::sgl::{SglDescriptor, SglSubtype, SGL_DESC_LEN};
use nvme::{Cqe, Sqe};
use tracing::debug;
use verbs::{AccessFlags, Cq, Mr, Qp, QpCap, RecvWr, SendWr, Wc, WcStatus, WrOpcode};
use wire::nvme_rdma::{CmRej, CmRejStatus, CmRep, CmReq, RECFMT_1_0};

use super::pool::{BufPool, RdmaBuf};
use super::{wrid, RdmaCounters, CQE_LEN, SQE_LEN};
use crate::transport::{
    HostCompletion, HostQueue, HostQueueParams, HostTransport, QueueError, SubmitError, TransportId,
};

/// In-capsule data this host sends at most (I/O queues only, as Linux).
const HOST_ICD: u32 = 4096;
/// Largest transfer the host's buffers take.
const HOST_MAX_XFER: usize = 1024 * 1024;
/// How long a blocking `progress` busy-polls the CQ before it naps between polls.
const BUSY_POLL: Duration = Duration::from_millis(2);

/// The NVMe/RDMA transport, host side, on one CM device (its address is the source).
#[derive(Clone)]
pub struct RdmaHostTransport {
    dev: CmDevice,
    counters: Arc<RdmaCounters>,
    keyed_split: usize,
}

impl std::fmt::Debug for RdmaHostTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaHostTransport({})", self.dev.ip())
    }
}

impl RdmaHostTransport {
    pub fn new(dev: CmDevice) -> Self {
        RdmaHostTransport {
            dev,
            counters: Arc::default(),
            keyed_split: 1,
        }
    }

    /// Names each transfer that is not in-capsule on an I/O queue with up to `n` keyed
    /// data blocks (a Last Segment list in the capsule, as SPDK's host does for
    /// scattered payloads) instead of one; 1 (the default) sends one keyed block, as
    /// Linux's nvme-rdma does. Capped at the list that fits the in-capsule area.
    pub fn with_keyed_split(mut self, n: usize) -> Self {
        self.keyed_split = n.clamp(1, HOST_ICD as usize / SGL_DESC_LEN);
        self
    }

    /// Live queue pairs, MRs and lent buffers of this transport's queues.
    pub fn counters(&self) -> Arc<RdmaCounters> {
        self.counters.clone()
    }
}

/// The NVMe/RDMA REJ status as text (for `QueueError::Terminated`).
pub fn rej_text(sts: CmRejStatus) -> &'static str {
    match sts {
        CmRejStatus::InvalidLength => "NVMe/RDMA CM REJ: invalid private data length",
        CmRejStatus::InvalidRecfmt => "NVMe/RDMA CM REJ: invalid RECFMT",
        CmRejStatus::InvalidQid => "NVMe/RDMA CM REJ: invalid QID",
        CmRejStatus::InvalidHsqsize => "NVMe/RDMA CM REJ: invalid HSQSIZE",
        CmRejStatus::InvalidHrqsize => "NVMe/RDMA CM REJ: invalid HRQSIZE",
        CmRejStatus::NoResources => "NVMe/RDMA CM REJ: no resources",
        CmRejStatus::InvalidIrd => "NVMe/RDMA CM REJ: invalid IRD",
        CmRejStatus::InvalidOrd => "NVMe/RDMA CM REJ: invalid ORD",
        CmRejStatus::InvalidCntlid => "NVMe/RDMA CM REJ: invalid CNTLID",
        CmRejStatus::Unknown(_) => "NVMe/RDMA CM REJ: unknown status",
    }
}

fn cm_err(e: cm::driver::DriverError) -> QueueError {
    QueueError::Io(io::Error::other(e.to_string()))
}

impl HostTransport for RdmaHostTransport {
    fn trtype(&self) -> TrType {
        TrType::Rdma
    }
    fn connect(
        &self,
        trid: &TransportId,
        params: &HostQueueParams,
    ) -> Result<Box<dyn HostQueue>, QueueError> {
        let addr = trid.socket_addr().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an IP address: {trid}"),
            )
        })?;
        let depth = params.depth.max(2) as usize;
        let t = params.timeout;
        let mut id = self.dev.create_id(None, PortSpace::Tcp);
        id.resolve_addr(None, addr, t).map_err(cm_err)?;
        id.resolve_route(t).map_err(cm_err)?;
        let ctx = self.dev.context().clone();
        let pd = self.dev.pd().clone();
        let verr = |e: verbs::Error| QueueError::Io(io::Error::other(e.to_string()));
        let cq = ctx.create_cq(depth * 4 + 8, None).map_err(verr)?;
        let cap = QpCap {
            max_send_wr: depth as u32 * 2,
            max_recv_wr: depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = id.create_qp(&cq, &cq, cap).map_err(cm_err)?.clone();
        let csz = SQE_LEN + HOST_ICD as usize;
        let cap_mr = pd
            .reg_mr(depth * csz, AccessFlags::LOCAL_WRITE)
            .map_err(verr)?;
        let rsp_mr = pd
            .reg_mr(depth * CQE_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(verr)?;
        for i in 0..depth {
            let sge = [rsp_mr.sge(i * CQE_LEN, CQE_LEN as u32)];
            qp.post_recv(&[RecvWr {
                wr_id: wrid::RECV | i as u64,
                sg_list: &sge,
            }])
            .map_err(|e| QueueError::Io(io::Error::other(format!("post_recv: {e:?}"))))?;
        }
        let ch = self.dev.create_event_channel();
        id.migrate(Some(&ch)).map_err(cm_err)?;
        let req = CmReq {
            recfmt: RECFMT_1_0,
            qid: params.qid,
            hrqsize: depth as u16,
            hsqsize: depth as u16 - 1,
            cntlid: 0,
        };
        let param = ConnParam {
            private_data: req.emit().to_vec(),
            responder_resources: 16,
            initiator_depth: 16,
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        id.connect(&param, t).map_err(cm_err)?;
        let ev = ch
            .get_event(Some(t))
            .map_err(|_| QueueError::Timeout("CM REP"))?;
        match ev.event {
            EventType::Established => {
                if let Ok(rep) = CmRep::parse(&ev.param.private_data) {
                    debug!(
                        crqsize = rep.crqsize,
                        qid = params.qid,
                        "NVMe/RDMA queue connected"
                    );
                    if (rep.crqsize as usize) < depth {
                        return Err(QueueError::Terminated(
                            "NVMe/RDMA CM REP: CRQSIZE below the queue size",
                        ));
                    }
                }
            }
            EventType::Rejected => {
                return Err(QueueError::Terminated(
                    // only a consumer reject (reason 28) carries the NVMe/RDMA
                    // private data (Linux: rdma_consumer_reject)
                    match (ev.status, CmRej::parse(&ev.param.private_data)) {
                        (28, Ok(r)) => rej_text(r.sts),
                        (8, _) => "RDMA CM REJ: no listener (invalid service ID)",
                        _ => "RDMA CM REJ without NVMe/RDMA private data",
                    },
                ));
            }
            EventType::Unreachable => return Err(QueueError::Terminated("RDMA CM: unreachable")),
            _ => return Err(QueueError::Terminated("RDMA CM: connect failed")),
        }
        let pool = BufPool::new(
            &pd,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            HOST_MAX_XFER,
            self.counters.clone(),
        );
        RdmaCounters::add(&self.counters.qpairs, 1);
        RdmaCounters::add(&self.counters.mrs, 2);
        Ok(Box::new(RdmaHostQueue {
            id,
            ch,
            qp,
            cq,
            qid: params.qid,
            csz,
            cap_mr,
            rsp_mr,
            pool,
            slots: (0..depth).map(|_| Slot::default()).collect(),
            sends: Vec::with_capacity(depth),
            polls: 0,
            vecs: Vec::new(),
            wcs: vec![Wc::default(); 32],
            dead: None,
            keyed_split: self.keyed_split,
            counters: self.counters.clone(),
        }))
    }
}

/// One command in flight, by CID.
#[derive(Debug, Default)]
struct Slot {
    busy: bool,
    send_done: bool,
    cqe: Option<Cqe>,
    buf: Option<Box<RdmaBuf>>,
    read_len: u32,
}

struct RdmaHostQueue {
    id: CmId,
    ch: EventChannel,
    qp: Qp,
    cq: Cq,
    qid: u16,
    csz: usize,
    cap_mr: Mr,
    rsp_mr: Mr,
    pool: BufPool,
    slots: Vec<Slot>,
    /// CQ polls (the CM's events are looked at every 64th empty one).
    polls: u32,
    /// Capsule SENDs submitted, not posted yet: (wr_id, SGE).
    sends: Vec<(u64, verbs::Sge)>,
    vecs: Vec<Vec<u8>>,
    wcs: Vec<Wc>,
    dead: Option<&'static str>,
    counters: Arc<RdmaCounters>,
    keyed_split: usize,
}

impl RdmaHostQueue {
    fn finish(&mut self, cid: usize, done: &mut VecDeque<HostCompletion>) {
        let s = &mut self.slots[cid];
        if !(s.busy && s.send_done && s.cqe.is_some()) {
            return;
        }
        let cqe = s.cqe.take().unwrap_or_default();
        s.busy = false;
        let n = if s.buf.is_some() {
            s.read_len as usize
        } else {
            0
        };
        // the recycled vector that fits best (the smallest with room for n), so
        // a mix of sizes settles with no growth in steady state: taking the last
        // one let a 4 KiB vector grow for a 128 KiB read now and then
        let fit = self
            .vecs
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= n)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        let mut data = match fit {
            Some(i) => self.vecs.swap_remove(i),
            None => self.vecs.pop().unwrap_or_default(),
        };
        // a recycled vector keeps its length: zero only what it grows by (the copy
        // below overwrites all n bytes)
        data.truncate(n);
        data.resize(n, 0);
        if let Some(b) = s.buf.take() {
            if n > 0 {
                b.mr().read(0, &mut data);
            }
            self.pool.put(b);
        }
        done.push_back(HostCompletion { cqe, data });
    }

    /// Posts the capsules submitted since the last call, in one post.
    fn post_sends(&mut self) -> Result<(), QueueError> {
        const CHUNK: usize = 32;
        let mut at = 0;
        while at < self.sends.len() {
            let n = (self.sends.len() - at).min(CHUNK);
            let p = &self.sends[at..at + n];
            let wrs: [SendWr; CHUNK] = std::array::from_fn(|i| {
                let (id, sge) = &p[i.min(n - 1)];
                SendWr::new(*id, WrOpcode::Send, std::slice::from_ref(sge))
            });
            if self.qp.post_send(&wrs[..n]).is_err() {
                self.sends.clear();
                self.dead = Some("post_send failed");
                return Err(QueueError::Terminated("post_send failed"));
            }
            at += n;
        }
        self.sends.clear();
        Ok(())
    }

    fn poll_cq(&mut self, done: &mut VecDeque<HostCompletion>) -> Result<bool, QueueError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = self.cq.poll(&mut wcs).unwrap_or(0);
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                if wc.status != WcStatus::WrFlushErr {
                    debug!(
                        status = wc.status.as_str(),
                        "NVMe/RDMA host work request failed"
                    );
                }
                self.dead = Some("RDMA work request failed (QP in error)");
                continue;
            }
            let slot = wrid::slot(wc.wr_id);
            match wrid::kind(wc.wr_id) {
                wrid::SEND => {
                    if let Some(s) = self.slots.get_mut(slot) {
                        s.send_done = true;
                    }
                    self.finish(slot, done);
                }
                wrid::RECV => {
                    let mut b = [0u8; CQE_LEN];
                    self.rsp_mr.read(slot * CQE_LEN, &mut b);
                    let sge = [self.rsp_mr.sge(slot * CQE_LEN, CQE_LEN as u32)];
                    if self
                        .qp
                        .post_recv(&[RecvWr {
                            wr_id: wc.wr_id,
                            sg_list: &sge,
                        }])
                        .is_err()
                    {
                        self.dead = Some("post_recv failed");
                    }
                    let Ok(cqe) = Cqe::from_bytes(&b) else {
                        continue;
                    };
                    let cid = cqe.cid() as usize;
                    match self.slots.get_mut(cid) {
                        Some(s) if s.busy => {
                            s.cqe = Some(cqe);
                            self.finish(cid, done);
                        }
                        _ => debug!(cid, "response for a command not in flight"),
                    }
                }
                _ => {}
            }
        }
        self.wcs = wcs;
        // the CM's events (a peer gone) every 64th poll, not on every one
        self.polls = self.polls.wrapping_add(1);
        while self.polls.is_multiple_of(64) {
            let Some(ev) = self.ch.try_get_event() else {
                break;
            };
            if matches!(
                ev.event,
                EventType::Disconnected | EventType::DeviceRemoval | EventType::Unreachable
            ) {
                self.dead = Some("RDMA CM: peer disconnected");
            }
        }
        if let Some(why) = self.dead {
            return Err(QueueError::Terminated(why));
        }
        Ok(n > 0)
    }
}

impl HostQueue for RdmaHostQueue {
    fn submit(
        &mut self,
        mut sqe: Sqe,
        write: &[u8],
        read_len: u32,
        in_capsule: u32,
    ) -> Result<(), SubmitError> {
        if self.dead.is_some() {
            return Err(SubmitError::NotReady);
        }
        let cid = sqe.cid();
        let c = cid as usize;
        match self.slots.get(c) {
            Some(s) if !s.busy => {}
            _ => return Err(SubmitError::CidBusy(cid)),
        }
        let off = c * self.csz;
        let mut send_len = SQE_LEN;
        let mut buf = None;
        let icd = in_capsule.min(HOST_ICD) as usize;
        if !write.is_empty() && self.qid != 0 && write.len() <= icd {
            sqe.set_sgl(SglDescriptor::data_block(
                SglSubtype::Offset,
                0,
                write.len() as u32,
            ));
            self.cap_mr.write(off + SQE_LEN, write);
            send_len += write.len();
        } else if !write.is_empty() || read_len > 0 {
            let len = if write.is_empty() {
                read_len as usize
            } else {
                write.len()
            };
            let Some(b) = self.pool.get(len) else {
                return Err(SubmitError::NotReady);
            };
            if !write.is_empty() {
                b.mr().write(0, write);
            }
            let n = if self.qid != 0 {
                self.keyed_split.min(len)
            } else {
                1
            };
            if n > 1 {
                // a Last Segment list of n keyed blocks in the capsule, in order
                let chunk = len.div_ceil(n);
                let mut at = 0;
                let mut k = 0;
                while at < len {
                    let l = chunk.min(len - at);
                    let d = SglDescriptor::keyed_data_block(
                        b.mr().addr() + at as u64,
                        l as u32,
                        b.mr().rkey(),
                        false,
                    );
                    self.cap_mr
                        .write(off + SQE_LEN + k * SGL_DESC_LEN, d.as_bytes());
                    at += l;
                    k += 1;
                }
                let list = (k * SGL_DESC_LEN) as u32;
                sqe.set_sgl(SglDescriptor::last_segment(SglSubtype::Offset, 0, list));
                send_len += list as usize;
            } else {
                sqe.set_sgl(SglDescriptor::keyed_data_block(
                    b.mr().addr(),
                    len as u32,
                    b.mr().rkey(),
                    false,
                ));
            }
            buf = Some(b);
        } else {
            sqe.set_sgl(SglDescriptor::keyed_data_block(0, 0, 0, false));
        }
        self.cap_mr.write(off, sqe.as_bytes());
        // posted by the next `progress`, with the other capsules submitted before it
        // (one doorbell, one sendmmsg on the soft device, for a batch of commands)
        self.sends
            .push((wrid::SEND | c as u64, self.cap_mr.sge(off, send_len as u32)));
        self.slots[c] = Slot {
            busy: true,
            send_done: false,
            cqe: None,
            buf,
            read_len: if write.is_empty() { read_len } else { 0 },
        };
        Ok(())
    }

    fn progress(
        &mut self,
        block: bool,
        done: &mut VecDeque<HostCompletion>,
    ) -> Result<bool, QueueError> {
        let before = done.len();
        self.post_sends()?;
        let moved = self.poll_cq(done)?;
        if moved || !block || done.len() > before {
            return Ok(moved);
        }
        // busy poll first (as SPDK's host does): a completion is usually a few
        // microseconds away, and the soft device receives from this thread while it
        // polls (its poller thread keeps out of the way of a busy poller); a nap here
        // costs a timer slack of ~50 us per wait and left the socket unread meanwhile
        // (the soft CQ receives itself only every few empty polls). After BUSY_POLL
        // without anything, nap between polls, receiving after each nap.
        let t0 = Instant::now();
        let mut waited = Duration::ZERO;
        let mut i = 0u32;
        loop {
            i = i.wrapping_add(1);
            if i.is_multiple_of(32) || waited >= BUSY_POLL {
                // the clock now and then while busy polling (it showed in profiles)
                waited = t0.elapsed();
            }
            if waited >= Duration::from_millis(100) {
                return Ok(false);
            }
            if waited >= BUSY_POLL {
                std::thread::sleep(Duration::from_micros(50));
                if let Some(d) = self.cq.context().soft() {
                    let _ = d.progress();
                }
            }
            if self.poll_cq(done)? {
                return Ok(true);
            }
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        // up to two per slot; when full, a larger vector replaces the smallest
        // kept (keeping whatever came first left the pool short of large ones
        // with a mix of sizes, and a large read then grew a small one)
        if self.vecs.len() < 2 * self.slots.len() {
            self.vecs.push(buf);
        } else if let Some((i, _)) = self
            .vecs
            .iter()
            .enumerate()
            .min_by_key(|(_, v)| v.capacity())
            .filter(|(_, v)| v.capacity() < buf.capacity())
        {
            self.vecs[i] = buf;
        }
    }
}

impl Drop for RdmaHostQueue {
    fn drop(&mut self) {
        // wait (briefly) for the target's DREP before the cm_id goes, as librdmacm
        // programs wait for DISCONNECTED: destroying it stops the DREQ retries, and a
        // target that missed the one DREQ sent would keep the queue (no traffic tells it)
        let sent = self.id.disconnect().is_ok();
        if sent && self.dead.is_none() {
            let t0 = Instant::now();
            let wait = Duration::from_millis(1000);
            while let Some(left) = wait.checked_sub(t0.elapsed()) {
                match self.ch.get_event(Some(left)) {
                    Ok(ev)
                        if matches!(
                            ev.event,
                            EventType::Disconnected
                                | EventType::DeviceRemoval
                                | EventType::Unreachable
                        ) =>
                    {
                        break
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        for s in self.slots.iter_mut() {
            if let Some(b) = s.buf.take() {
                self.pool.put(b);
            }
        }
        RdmaCounters::add(&self.counters.qpairs, -1);
        RdmaCounters::add(&self.counters.mrs, -2);
    }
}
