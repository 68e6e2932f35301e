//! The NVMe/RDMA target transport: [`RdmaTransport`] (CM listeners, connection
//! requests with the NVMe/RDMA private data), [`RdmaQpair`] (one RC QP, its CQ,
//! receive and response regions, a registered buffer pool) and [`RdmaPollGroup`].

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bdev::IoBuf;
use cm::driver::{CmDevice, CmId, EventChannel};
use cm::{CmIdHandle, ConnParam, EventType, PortSpace};
use nvme::log::{DiscoveryEntry, TrType};
use nvme::opcode::DataDirection;
use nvme::{Cqe, Sqe};
use tracing::{debug, info, warn};
use verbs::{
    AccessFlags, CompChannel, Cq, Mr, Qp, QpCap, RecvWr, SendWr, Sge, Wc, WcStatus, WrDetail,
    WrOpcode,
};
use wire::nvme_rdma::{CmRej, CmRejStatus, CmRep, CmReq, RECFMT_1_0};

use super::pool::{BufPool, RdmaBuf};
use super::{discovery_entry, wrid, RdmaCounters, CQE_LEN, SQE_LEN};
use crate::transport::{
    Accepted, DataError, QpairEvent, Request, Transport, TransportId, TransportLimits,
    TransportPollGroup, TransportQpair,
};

pub use super::capsule::MAX_KEYED;
use super::capsule::{CapsuleData, KeyedList};

/// Fault injection for tests: make the target behave as if the provider refused
/// some of its work requests at post time (no provider can be made to do so on
/// demand). Shared by the transport and all its queues.
#[derive(Debug, Default)]
pub struct RdmaFaults {
    /// The next this many reads' RDMA WRITE posts are refused: the last WRITE of
    /// the read is rejected, the ones before it are posted.
    pub refuse_write_posts: std::sync::atomic::AtomicU32,
}

impl RdmaFaults {
    /// Index of the WRITE to refuse among `n` (None: post normally).
    fn refuse_write(&self, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        self.refuse_write_posts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
            .ok()
            .map(|_| n - 1)
    }
}

/// Target parameters of the RDMA transport.
#[derive(Debug, Clone, Copy)]
pub struct RdmaParams {
    /// MDTS in bytes.
    pub max_xfer: u32,
    /// In-capsule data per command on I/O queues (IOCCSZ = (64 + this) / 16).
    pub in_capsule: u32,
    /// Largest queue (HSQSIZE + 1) a host may ask for (CAP.MQES + 1).
    pub max_queue_size: u16,
}

impl Default for RdmaParams {
    /// 1 MiB transfers, 4 KiB in-capsule (Linux nvmet-rdma's default), 128 entries.
    fn default() -> Self {
        RdmaParams {
            max_xfer: 1024 * 1024,
            in_capsule: 4096,
            max_queue_size: 128,
        }
    }
}

/// The NVMe/RDMA transport, target side, on one CM device (a soft RoCE device).
pub struct RdmaTransport {
    params: RdmaParams,
    dev: CmDevice,
    ch: EventChannel,
    listeners: Vec<CmId>,
    /// Termination flags of live connections by cm_id (the poll groups' qpairs
    /// hold the other reference).
    conns: HashMap<CmIdHandle, Arc<AtomicBool>>,
    counters: Arc<RdmaCounters>,
    faults: Arc<RdmaFaults>,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("params", &self.params)
            .field("ip", &self.dev.ip())
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

impl RdmaTransport {
    pub fn new(dev: CmDevice, params: RdmaParams) -> Self {
        let ch = dev.create_event_channel();
        RdmaTransport {
            params,
            dev,
            ch,
            listeners: Vec::new(),
            conns: HashMap::new(),
            counters: Arc::default(),
            faults: Arc::default(),
        }
    }

    /// The fault injection switches of this transport's queues (tests).
    pub fn faults(&self) -> Arc<RdmaFaults> {
        self.faults.clone()
    }

    /// Live queue pairs, MRs and lent buffers of this transport's queues.
    pub fn counters(&self) -> Arc<RdmaCounters> {
        self.counters.clone()
    }

    fn reject(id: &CmId, sts: CmRejStatus) {
        debug!(?sts, "NVMe/RDMA connection rejected");
        if let Err(e) = id.reject(&CmRej::new(sts).emit()) {
            warn!(%e, "rdma_reject failed");
        }
    }

    fn on_connect_request(&mut self, ev: &cm::CmEvent, out: &mut Vec<Accepted<RdmaQpair>>) {
        let id = CmId::from_request(&self.dev, ev);
        let listener = self
            .listeners
            .iter()
            .position(|l| Some(l.handle()) == ev.listen_id)
            .unwrap_or(0);
        let req = match CmReq::parse(&ev.param.private_data) {
            Ok(r) => r,
            Err(wire::Error::BadVersion) => return Self::reject(&id, CmRejStatus::InvalidRecfmt),
            Err(_) => return Self::reject(&id, CmRejStatus::InvalidLength),
        };
        let qsize = req.hsqsize as u32 + 1;
        if qsize < 2 || qsize > self.params.max_queue_size as u32 {
            return Self::reject(&id, CmRejStatus::InvalidHsqsize);
        }
        if (req.hrqsize as u32) < qsize {
            return Self::reject(&id, CmRejStatus::InvalidHrqsize);
        }
        let icd = if req.qid == 0 {
            0
        } else {
            self.params.in_capsule
        };
        let flag = Arc::new(AtomicBool::new(false));
        let qp = match RdmaQpair::new(
            id,
            qsize as u16,
            (req.qid, icd),
            self.params,
            flag.clone(),
            (self.counters.clone(), self.faults.clone()),
        ) {
            Ok(q) => q,
            Err((id, e)) => {
                warn!(%e, "NVMe/RDMA queue set-up failed");
                return Self::reject(&id, CmRejStatus::NoResources);
            }
        };
        let rep = CmRep {
            recfmt: RECFMT_1_0,
            crqsize: qsize as u16,
        };
        let param = ConnParam {
            private_data: rep.emit().to_vec(),
            responder_resources: ev.param.responder_resources.min(16),
            initiator_depth: ev.param.initiator_depth.min(16),
            flow_control: true,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        if let Err(e) = qp.id.accept(&param, Duration::from_secs(5)) {
            warn!(%e, "rdma_accept failed");
            return;
        }
        debug!(peer = %qp.peer, qid = req.qid, qsize, "NVMe/RDMA queue accepted");
        self.conns.insert(qp.id.handle(), flag);
        out.push(Accepted {
            qpair: qp,
            listener,
        });
    }
}

impl Transport for RdmaTransport {
    type Qpair = RdmaQpair;
    type PollGroup = RdmaPollGroup;

    fn trtype(&self) -> TrType {
        TrType::Rdma
    }
    fn limits(&self) -> TransportLimits {
        TransportLimits {
            max_xfer: self.params.max_xfer,
            in_capsule: self.params.in_capsule,
            sgls: nvme::identify::sgls::SUPPORTED
                | nvme::identify::sgls::KEYED
                | nvme::identify::sgls::OFFSET,
            msdbd: MAX_KEYED as u8,
        }
    }
    fn listen(&mut self, trid: &TransportId) -> io::Result<TransportId> {
        let addr = trid.socket_addr().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an IP address: {trid}"),
            )
        })?;
        let id = self.dev.create_id(Some(&self.ch), PortSpace::Tcp);
        id.bind_addr(addr)
            .and_then(|_| id.listen(128))
            .map_err(|e| io::Error::other(format!("rdma listen {addr}: {e}")))?;
        let bound = id.local_addr().unwrap_or(addr);
        self.listeners.push(id);
        Ok(TransportId::ip(TrType::Rdma, bound))
    }
    fn listener_discover(&self, trid: &TransportId, entry: &mut DiscoveryEntry) {
        *entry = discovery_entry(trid);
    }
    fn stop_listen(&mut self, trid: &TransportId) -> Option<usize> {
        let i = self.listeners.iter().position(|id| {
            id.local_addr()
                .map(|a| TransportId::ip(TrType::Rdma, a))
                .as_ref()
                == Some(trid)
        })?;
        // dropping the CM id destroys it (rdma_destroy_id): the port is free again
        drop(self.listeners.remove(i));
        Some(i)
    }
    fn accept(&mut self, timeout: Duration, out: &mut Vec<Accepted<RdmaQpair>>) -> io::Result<()> {
        let mut next = self.ch.get_event(Some(timeout)).ok();
        while let Some(ev) = next {
            match ev.event {
                EventType::ConnectRequest => self.on_connect_request(&ev, out),
                EventType::Established => debug!(id = %ev.id, "established"),
                EventType::Disconnected
                | EventType::Rejected
                | EventType::Unreachable
                | EventType::ConnectError
                | EventType::DeviceRemoval => {
                    debug!(id = %ev.id, event = ?ev.event, status = ev.status, "connection over");
                    if let Some(f) = self.conns.get(&ev.id) {
                        f.store(true, Ordering::Release);
                    }
                }
                _ => {}
            }
            next = self.ch.try_get_event();
        }
        // forget connections whose qpair is gone
        self.conns.retain(|_, f| Arc::strong_count(f) > 1);
        Ok(())
    }
    fn poll_group_create(&self, event_driven: bool) -> RdmaPollGroup {
        RdmaPollGroup {
            spin: !event_driven,
            traffic: false,
            fds: Vec::with_capacity(16),
            counters: self.counters.clone(),
        }
    }
}

/// Per-command state kept for a read's data (keyed SGL of the host's buffer).
#[derive(Debug, Clone, Copy)]
struct C2hDest {
    cid: u16,
    dest: KeyedList,
}

/// Counters of one queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct RdmaQpairStats {
    pub capsules: u64,
    pub in_capsule: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub responses: u64,
    /// Keyed SGLs asking for remote invalidation.
    pub invalidate_asked: u64,
    /// Responses sent as SEND with Invalidate (the host's R_Key).
    pub invalidate_sent: u64,
    /// Commands whose data came as a list of several keyed descriptors.
    pub keyed_lists: u64,
    /// Admin data copied into registered memory (control path).
    pub copied: u64,
    /// Responses that waited for a response slot (all held by unacknowledged SENDs).
    pub rsp_waited: u64,
    pub wc_errors: u64,
}

/// One NVMe/RDMA queue pair, target side.
pub struct RdmaQpair {
    id: CmId,
    qp: Qp,
    cq: Cq,
    /// The CQ's completion channel: the poll group sleeps on it when idle.
    ch: CompChannel,
    qsize: usize,
    /// Receive slot size: SQE + in-capsule data.
    rsz: usize,
    recv_mr: Mr,
    rsp_mr: Mr,
    rsp_free: Vec<u16>,
    /// Per response slot: the read's data buffer, recycled when the SEND completes.
    rsp_data: Vec<Option<Box<RdmaBuf>>>,
    pool: BufPool,
    c2h: Vec<C2hDest>,
    /// Commands whose host asked for remote invalidation: (CID, R_Key).
    inv: Vec<(u16, u32)>,
    /// Outstanding RDMA READs: the command, the buffer being filled and how many of
    /// its READs (one per keyed descriptor) are still to complete.
    reads: Vec<Option<(Sqe, Box<RdmaBuf>, u8)>>,
    read_free: Vec<u16>,
    events: VecDeque<QpairEvent>,
    /// Send-queue WRs queued during a poll pass, posted together by the flush.
    sq_pending: Vec<PendingWr>,
    /// Fault injection: the provider "refuses" the queued WR at this index at the
    /// next flush (it and those after it are not posted; the queue fails).
    refuse_at: Option<usize>,
    /// Completions waiting for a response slot, in order.
    pending: VecDeque<(Cqe, IoBuf)>,
    terminated: Arc<AtomicBool>,
    qp_error: bool,
    told_terminated: bool,
    peer: String,
    max_xfer: u32,
    icd: u32,
    stats: RdmaQpairStats,
    wcs: Vec<Wc>,
    counters: Arc<RdmaCounters>,
    faults: Arc<RdmaFaults>,
}

impl std::fmt::Debug for RdmaQpair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaQpair")
            .field("peer", &self.peer)
            .field("qsize", &self.qsize)
            .field("stats", &self.stats)
            .finish()
    }
}

impl RdmaQpair {
    #[allow(clippy::result_large_err)]
    fn new(
        mut id: CmId,
        qsize: u16,
        (qid, icd): (u16, u32),
        params: RdmaParams,
        terminated: Arc<AtomicBool>,
        (counters, faults): (Arc<RdmaCounters>, Arc<RdmaFaults>),
    ) -> Result<Self, (CmId, String)> {
        let qsize = qsize as usize;
        let rsz = SQE_LEN + icd as usize;
        let setup = |id: &mut CmId| -> Result<(Cq, CompChannel, Qp, Mr, Mr), String> {
            let ctx = id.device().context().clone();
            let pd = id.device().pd().clone();
            // per command: a response SEND and up to MAX_KEYED READs or WRITEs
            let max_send = qsize * (2 + MAX_KEYED);
            let ch = ctx.create_comp_channel().map_err(|e| e.to_string())?;
            let cq = ctx
                .create_cq(max_send + qsize + 8, Some(&ch))
                .map_err(|e| e.to_string())?;
            let cap = QpCap {
                max_send_wr: max_send as u32,
                max_recv_wr: qsize as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let qp = id
                .create_qp(&cq, &cq, cap)
                .map_err(|e| e.to_string())?
                .clone();
            let recv_mr = pd
                .reg_mr(qsize * rsz, AccessFlags::LOCAL_WRITE)
                .map_err(|e| e.to_string())?;
            let rsp_mr = pd
                .reg_mr(qsize * CQE_LEN, AccessFlags::LOCAL_WRITE)
                .map_err(|e| e.to_string())?;
            for i in 0..qsize {
                let sge = [recv_mr.sge(i * rsz, rsz as u32)];
                qp.post_recv(&[RecvWr {
                    wr_id: wrid::RECV | i as u64,
                    sg_list: &sge,
                }])
                .map_err(|e| format!("post_recv: {e:?}"))?;
            }
            Ok((cq, ch, qp, recv_mr, rsp_mr))
        };
        let (cq, ch, qp, recv_mr, rsp_mr) = match setup(&mut id) {
            Ok(x) => x,
            Err(e) => return Err((id, e)),
        };
        let pool = BufPool::new(
            id.device().pd(),
            AccessFlags::LOCAL_WRITE,
            params.max_xfer as usize,
            counters.clone(),
        );
        RdmaCounters::add(&counters.qpairs, 1);
        RdmaCounters::add(&counters.mrs, 2);
        let peer = id
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        debug!(%peer, qid, qsize, icd, "NVMe/RDMA qpair");
        Ok(RdmaQpair {
            id,
            qp,
            cq,
            ch,
            qsize,
            rsz,
            recv_mr,
            rsp_mr,
            rsp_free: (0..qsize as u16).rev().collect(),
            rsp_data: (0..qsize).map(|_| None).collect(),
            pool,
            c2h: Vec::with_capacity(qsize),
            inv: Vec::with_capacity(qsize),
            reads: (0..qsize).map(|_| None).collect(),
            read_free: (0..qsize as u16).rev().collect(),
            events: VecDeque::with_capacity(qsize),
            sq_pending: Vec::with_capacity(qsize * (2 + MAX_KEYED)),
            refuse_at: None,
            pending: VecDeque::with_capacity(qsize),
            terminated,
            qp_error: false,
            told_terminated: false,
            peer,
            max_xfer: params.max_xfer,
            icd,
            stats: RdmaQpairStats::default(),
            wcs: vec![Wc::default(); 32],
            counters,
            faults,
        })
    }

    /// Counters.
    pub fn stats(&self) -> RdmaQpairStats {
        self.stats
    }

    fn fail_qp(&mut self, why: &str) {
        if !self.qp_error {
            debug!(peer = %self.peer, why, "NVMe/RDMA queue failed");
        }
        self.qp_error = true;
    }

    /// Polls the CQ; returns progress.
    fn poll_cq(&mut self) -> bool {
        let mut progress = false;
        loop {
            let mut wcs = std::mem::take(&mut self.wcs);
            let n = self.cq.poll(&mut wcs).unwrap_or(0);
            for wc in &wcs[..n] {
                self.on_wc(wc);
            }
            self.wcs = wcs;
            progress |= n > 0;
            if n < self.wcs.len() {
                break;
            }
        }
        progress
    }

    /// Arms the CQ's completion channel, then polls once more (completions queued
    /// before arming do not fire). Returns the channel's fd to sleep on, or None
    /// when that poll found completions (no sleep).
    fn arm(&mut self) -> Option<std::os::fd::RawFd> {
        if self.cq.req_notify(false).is_err() {
            return None; // cannot sleep on it: keep polling
        }
        if self.poll_cq() {
            return None;
        }
        Some(self.ch.fd())
    }

    /// Consumes the channel's events after a sleep.
    fn disarm(&mut self) {
        while self.ch.get_cq_event(0).is_ok() {
            self.cq.ack_events(1);
        }
    }

    fn on_wc(&mut self, wc: &Wc) {
        let slot = wrid::slot(wc.wr_id);
        let kind = wrid::kind(wc.wr_id);
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                self.stats.wc_errors += 1;
                warn!(peer = %self.peer, status = wc.status.as_str(), kind = kind >> 56,
                    "NVMe/RDMA work request failed; the queue is torn down");
            }
            // give buffers back; the QP is in error, so nothing else completes normally
            match kind {
                wrid::SEND => self.release_rsp(slot),
                wrid::READ => {
                    if let Some((_, b, _)) = self.reads.get_mut(slot).and_then(Option::take) {
                        self.pool.put(b);
                        self.read_free.push(slot as u16);
                    }
                }
                _ => {}
            }
            self.fail_qp("work completion error");
            return;
        }
        match kind {
            wrid::RECV => self.on_recv(slot, wc.byte_len as usize),
            wrid::SEND => self.release_rsp(slot),
            wrid::READ => {
                let Some(Some((_, _, left))) = self.reads.get_mut(slot) else {
                    return;
                };
                *left = left.saturating_sub(1);
                if *left > 0 {
                    return;
                }
                if let Some((sqe, b, _)) = self.reads.get_mut(slot).and_then(Option::take) {
                    self.read_free.push(slot as u16);
                    self.events.push_back(QpairEvent::Command(Request {
                        sqe,
                        data: IoBuf::External(b),
                        c2h_len: 0,
                        error: None,
                    }));
                }
            }
            _ => {}
        }
    }

    fn release_rsp(&mut self, slot: usize) {
        if slot < self.rsp_data.len() {
            if let Some(b) = self.rsp_data[slot].take() {
                self.pool.put(b);
            }
            self.rsp_free.push(slot as u16);
        }
        if !self.qp_error {
            // the oldest waiting response takes the slot just freed
            if let Some((cqe, data)) = self.pending.pop_front() {
                self.respond(&cqe, data);
            }
        }
    }

    fn on_recv(&mut self, slot: usize, len: usize) {
        self.stats.capsules += 1;
        let mut sqe_b = [0u8; SQE_LEN];
        let off = slot * self.rsz;
        let ok = len >= SQE_LEN && self.recv_mr.read(off, &mut sqe_b);
        let sqe = Sqe::from_bytes(&sqe_b).ok().filter(|_| ok);
        let icd_len = len.saturating_sub(SQE_LEN);
        // the in-capsule data is copied into a pool buffer below, so the receive
        // can be posted again before the command runs
        let mut req = Request {
            sqe: sqe.unwrap_or_default(),
            data: IoBuf::Vec(Vec::new()),
            c2h_len: 0,
            error: None,
        };
        let repost = |q: &mut Self| {
            let sge = [q.recv_mr.sge(off, q.rsz as u32)];
            if q.qp
                .post_recv(&[RecvWr {
                    wr_id: wrid::RECV | slot as u64,
                    sg_list: &sge,
                }])
                .is_err()
            {
                q.fail_qp("post_recv");
            }
        };
        let Some(sqe) = sqe else {
            repost(self);
            self.fail_qp("capsule shorter than an SQE");
            return;
        };
        let (recv_mr, icd_at) = (&self.recv_mr, off + SQE_LEN);
        let decoded = super::capsule::decode(&sqe, icd_len, self.icd, |at, buf| {
            at.checked_add(buf.len()).is_some_and(|end| end <= icd_len)
                && recv_mr.read(icd_at + at, buf)
        });
        match decoded {
            Err(e) => req.error = Some(e),
            Ok(CapsuleData::None) => {}
            Ok(CapsuleData::InCapsule { len }) => match self.pool.get(len as usize) {
                Some(mut b) => {
                    // copy out of the receive slot into the command's buffer
                    let dst = bdev::ExternalBuf::as_mut_slice(&mut *b);
                    self.recv_mr.read(icd_at, dst);
                    self.stats.in_capsule += 1;
                    req.data = IoBuf::External(b);
                }
                None => {
                    repost(self);
                    self.fail_qp("buffer pool exhausted");
                    return;
                }
            },
            Ok(CapsuleData::Keyed { list, dir, segment }) => {
                if segment {
                    self.stats.keyed_lists += 1;
                }
                // the response goes as SEND with Invalidate of the host's key when it
                // asked (Linux nvme-rdma does for its fast-registered MRs), one key
                self.inv.retain(|(c, _)| *c != sqe.cid());
                if let Some(key) = list.invalidate {
                    self.stats.invalidate_asked += 1;
                    self.inv.push((sqe.cid(), key));
                }
                if list.total() > self.max_xfer as u64 {
                    req.error = Some(DataError::SglLengthInvalid);
                } else if dir == DataDirection::HostToController {
                    self.start_read(sqe, &list);
                    repost(self);
                    return;
                } else {
                    self.c2h.retain(|d| d.cid != sqe.cid());
                    self.c2h.push(C2hDest {
                        cid: sqe.cid(),
                        dest: list,
                    });
                    req.c2h_len = list.total() as u32;
                }
            }
        }
        repost(self);
        self.events.push_back(QpairEvent::Command(req));
    }

    /// Sends the response of a completed command (and a read's data before it) from a
    /// free response slot.
    fn respond(&mut self, cqe: &Cqe, data: IoBuf) {
        let cid = cqe.cid();
        let dest = self
            .c2h
            .iter()
            .position(|d| d.cid == cid)
            .map(|i| self.c2h.swap_remove(i));
        let Some(slot) = self.rsp_free.pop() else {
            self.put_buf(data);
            self.fail_qp("more responses than the host's receive queue");
            return;
        };
        let rs = slot as usize;
        self.rsp_mr.write(rs * CQE_LEN, cqe.as_bytes());
        let mut send = PendingWr {
            wr_id: wrid::SEND | rs as u64,
            opcode: WrOpcode::Send,
            signaled: true,
            sge: self.rsp_mr.sge(rs * CQE_LEN, CQE_LEN as u32),
            remote: (0, 0),
            imm: 0,
        };
        if let Some(i) = self.inv.iter().position(|(c, _)| *c == cid) {
            let (_, key) = self.inv.swap_remove(i);
            send.opcode = WrOpcode::SendWithInv;
            send.imm = key;
            self.stats.invalidate_sent += 1;
        }
        self.stats.responses += 1;
        match (dest, data.is_empty()) {
            (Some(d), false) => {
                // the data as a registered buffer (reads: already one; admin pages: copied)
                let buf = match BufPool::own(data) {
                    Ok(b) => Some(b),
                    Err(v) => {
                        self.stats.copied += 1;
                        self.pool.get(v.len()).map(|mut b| {
                            bdev::ExternalBuf::as_mut_slice(&mut *b).copy_from_slice(&v);
                            b
                        })
                    }
                };
                let Some(b) = buf else {
                    self.fail_qp("no registered buffer for a response's data");
                    self.release_rsp(rs);
                    return;
                };
                // the data by RDMA WRITEs (one per keyed block, scattered from the
                // buffer in order) and the response SEND behind them, queued in this
                // order for the next flush's post: if the provider refuses a WRITE,
                // the WRs after it (the SEND among them) are not posted, so no
                // success response goes out for data not sent; the queue is torn
                // down instead. The WRITEs are unsignaled: the SEND's completion
                // says they are done (an error completes them anyway).
                let mut writes = 0usize;
                let mut left = b.len();
                let mut at = 0usize;
                for k in d.dest.blocks() {
                    let len = (k.len as usize).min(left);
                    if len == 0 {
                        break;
                    }
                    self.sq_pending.push(PendingWr {
                        wr_id: wrid::WRITE | rs as u64,
                        opcode: WrOpcode::RdmaWrite,
                        signaled: false,
                        sge: b.mr().sge(at, len as u32),
                        remote: (k.addr, k.key),
                        imm: 0,
                    });
                    writes += 1;
                    at += len;
                    left -= len;
                }
                self.stats.rdma_writes += writes as u64;
                // WRITEs may be under way from the buffer: it stays with the
                // response slot until the SEND completes or the queue goes
                self.rsp_data[rs] = Some(b);
                if let Some(i) = self.faults.refuse_write(writes) {
                    // injected: the provider refuses WRITE `i` at the flush (those
                    // before it go, nothing after it)
                    let at = self.sq_pending.len() - (writes - i);
                    self.refuse_at.get_or_insert(at);
                }
                self.sq_pending.push(send);
            }
            (_, _) => {
                self.put_buf(data);
                self.sq_pending.push(send);
            }
        }
    }

    /// Posts the queued send-queue WRs (reads' WRITEs + responses, RDMA READs) in
    /// as few posts as possible: one doorbell (one `sendmmsg` on the soft device)
    /// for all the responses and READs of a poll pass. Returns progress.
    fn post_pending(&mut self) -> bool {
        if self.sq_pending.is_empty() {
            return false;
        }
        if self.qp_error {
            // the queue is going: nothing more is posted (its buffers go with it)
            self.sq_pending.clear();
            return false;
        }
        const CHUNK: usize = 32;
        let refuse_at = self.refuse_at.take();
        let end = refuse_at.unwrap_or(usize::MAX).min(self.sq_pending.len());
        let mut at = 0;
        while at < end {
            let n = (end - at).min(CHUNK);
            let p = &self.sq_pending[at..at + n];
            let wrs: [SendWr; CHUNK] = std::array::from_fn(|i| p[i.min(n - 1)].wr());
            if let Err(e) = self.qp.post_send(&wrs[..n]) {
                debug!(peer = %self.peer, index = at + e.index, "post_send refused a WR");
                self.sq_pending.clear();
                self.fail_qp("post RDMA WRITE/READ/response");
                return true;
            }
            at += n;
        }
        self.sq_pending.clear();
        if refuse_at.is_some() {
            self.fail_qp("post RDMA WRITE + response");
        }
        true
    }

    /// RDMA READs of a host write's data (one per keyed block, into one registered
    /// buffer), queued for the next flush; the command goes to the core when the
    /// last of them completes.
    fn start_read(&mut self, sqe: Sqe, list: &KeyedList) {
        let len = list.total() as usize;
        let (Some(slot), Some(b)) = (self.read_free.pop(), self.pool.get(len)) else {
            self.fail_qp("no READ slot or buffer");
            return;
        };
        let mut at = 0usize;
        let mut n = 0u8;
        for k in list.blocks().iter().filter(|k| k.len > 0) {
            self.sq_pending.push(PendingWr {
                wr_id: wrid::READ | slot as u64,
                opcode: WrOpcode::RdmaRead,
                signaled: true,
                sge: b.mr().sge(at, k.len),
                remote: (k.addr, k.key),
                imm: 0,
            });
            at += k.len as usize;
            n += 1;
            self.stats.rdma_reads += 1;
        }
        if n == 0 {
            // nothing to move (all blocks empty): the command runs at once
            self.read_free.push(slot);
            self.events.push_back(QpairEvent::Command(Request {
                sqe,
                data: IoBuf::External(b),
                c2h_len: 0,
                error: None,
            }));
            return;
        }
        self.reads[slot as usize] = Some((sqe, b, n));
    }
}

/// A send-queue WR waiting for the next flush (owned: no borrowed SGE list).
#[derive(Debug, Clone, Copy)]
struct PendingWr {
    wr_id: u64,
    opcode: WrOpcode,
    signaled: bool,
    sge: Sge,
    /// (remote address, R_Key) of RDMA READ/WRITE.
    remote: (u64, u32),
    /// SEND with Invalidate: the R_Key.
    imm: u32,
}

impl PendingWr {
    fn wr(&self) -> SendWr<'_> {
        let mut w = SendWr::new(self.wr_id, self.opcode, std::slice::from_ref(&self.sge));
        if !self.signaled {
            w.send_flags = verbs::SendFlags::empty();
        }
        w.imm_data = self.imm;
        if matches!(self.opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaRead) {
            w.wr = WrDetail::Rdma {
                remote_addr: self.remote.0,
                rkey: self.remote.1,
            };
        }
        w
    }
}

impl TransportQpair for RdmaQpair {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if self.is_terminated() && !self.told_terminated {
            self.told_terminated = true;
            return Some(QpairEvent::Terminated {
                by_peer: self.terminated.load(Ordering::Acquire),
            });
        }
        None
    }

    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        // every response slot still held by a SEND not yet acknowledged (the host has
        // seen the response and sent a new command while the target's SEND waits for
        // its ACK, e.g. a lost one): the response waits for a slot (FIFO)
        if (self.rsp_free.is_empty() || !self.pending.is_empty())
            && !self.qp_error
            && self.pending.len() < self.qsize
        {
            self.stats.rsp_waited += 1;
            self.pending.push_back((*cqe, data));
            return;
        }
        self.respond(cqe, data);
    }

    fn get_buf(&mut self, len: usize) -> IoBuf {
        match self.pool.get(len) {
            Some(b) => IoBuf::External(b),
            None => {
                warn!(
                    len,
                    "no registered buffer; using an unregistered one (copied)"
                );
                IoBuf::Vec(vec![0; len])
            }
        }
    }
    fn put_buf(&mut self, buf: IoBuf) {
        self.pool.put_iobuf(buf);
    }
    fn connected(&mut self, _sqflow_disabled: bool) {}
    fn is_terminated(&self) -> bool {
        self.qp_error || self.terminated.load(Ordering::Acquire)
    }
    fn peer(&self) -> String {
        self.peer.clone()
    }
    fn describe_stats(&self) -> String {
        format!("{:?} pool {:?}", self.stats, self.pool.stats())
    }
}

impl Drop for RdmaQpair {
    fn drop(&mut self) {
        let _ = self.id.disconnect();
        // buffers still out in READs/responses go with the pool's MRs
        for b in self.rsp_data.iter_mut().filter_map(Option::take) {
            self.pool.put(b);
        }
        for (_, b, _) in self.reads.iter_mut().filter_map(Option::take) {
            self.pool.put(b);
        }
        for (_, data) in std::mem::take(&mut self.pending) {
            self.pool.put_iobuf(data);
        }
        RdmaCounters::add(&self.counters.qpairs, -1);
        RdmaCounters::add(&self.counters.mrs, -2);
    }
}

/// After traffic, `wait` keeps polling this long before it sleeps on the
/// completion channels: at queue depth the next capsule is microseconds away,
/// while a sleep costs a wake-up (and the soft device's poller thread, kept out
/// of a busy poller's way, then has to take over receiving).
const SPIN_AFTER_TRAFFIC: Duration = Duration::from_millis(1);

/// The RDMA part of a poll group: polls each qpair's CQ; when idle, sleeps on
/// the CQs' completion channels.
#[derive(Debug)]
pub struct RdmaPollGroup {
    /// Poll on after traffic (not in event-driven mode, `idle_spins` 0: there the
    /// group sleeps as soon as a pass finds nothing, leaving the CPU to others).
    spin: bool,
    /// `poll` found completions since the last `wait`.
    traffic: bool,
    /// The completion channels' fds of the last sleep (reused).
    fds: Vec<libc::pollfd>,
    counters: Arc<RdmaCounters>,
}

impl TransportPollGroup for RdmaPollGroup {
    type Qpair = RdmaQpair;

    fn poll<Q: AsMut<RdmaQpair>>(&mut self, qpairs: &mut [Q]) -> bool {
        let mut progress = false;
        for q in qpairs.iter_mut() {
            progress |= q.as_mut().poll_cq();
        }
        self.traffic |= progress;
        progress
    }
    fn flush<Q: AsMut<RdmaQpair>>(&mut self, qpairs: &mut [Q]) -> bool {
        let mut progress = false;
        for q in qpairs.iter_mut() {
            progress |= q.as_mut().post_pending();
        }
        progress
    }
    fn wait<Q: AsMut<RdmaQpair>>(&mut self, qpairs: &mut [Q], timeout: Duration) -> bool {
        if qpairs.is_empty() {
            std::thread::sleep(timeout);
            return false;
        }
        if std::mem::take(&mut self.traffic) && self.spin {
            // traffic a moment ago: keep polling (the CQ poll yields the CPU now and
            // then and receives from the socket itself)
            let t0 = std::time::Instant::now();
            let spin = timeout.min(SPIN_AFTER_TRAFFIC);
            let mut n = 0u32;
            loop {
                let mut p = false;
                for q in qpairs.iter_mut() {
                    p |= q.as_mut().poll_cq();
                }
                if p {
                    self.traffic = true;
                    return true;
                }
                // the clock every few rounds only (it can be slow in a guest); but
                // often enough: an empty CQ poll yields the CPU now and then, and a
                // yield on a loaded machine can last a time slice
                n = n.wrapping_add(1);
                if n.is_multiple_of(8) && t0.elapsed() >= spin {
                    return false;
                }
            }
        }
        // idle: sleep on the completion channels until a completion or the timeout
        self.fds.clear();
        for q in qpairs.iter_mut() {
            match q.as_mut().arm() {
                Some(fd) => self.fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
                None => {
                    self.traffic = true;
                    return true;
                }
            }
        }
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let r = crate::tcp::driver::poll_fds(&mut self.fds, ms);
        for q in qpairs.iter_mut() {
            q.as_mut().disarm();
        }
        RdmaCounters::add(&self.counters.sleeps, 1);
        if r > 0 {
            RdmaCounters::add(&self.counters.woken, 1);
        }
        r > 0
    }
    fn remove(&mut self, q: RdmaQpair) {
        info!(peer = %q.peer, stats = %q.describe_stats(), "NVMe/RDMA qpair closed");
        drop(q);
    }
}
