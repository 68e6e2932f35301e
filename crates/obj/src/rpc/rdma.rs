//! RPC over RDMA: the same frames as over TCP, one frame per RDMA SEND on an
//! RC QP set up with the RDMA CM (`cm`, `verbs`: the soft RoCEv2 provider),
//! and values larger than a message slot moved by RDMA READ:
//!
//! - a request whose frame exceeds [`SLOT`] is sent with [`FLAG_RDMA_BULK`]
//!   and a 16-byte descriptor `(addr u64, rkey u32, len u32)` of a client
//!   buffer registered for remote reads as its bulk region; the engine READs
//!   the bulk and serves the request as if it had come inline;
//! - a reply larger than a slot comes the same way (the engine registers the
//!   bulk, the client READs it and sends a one-way [`FLAG_RELEASE`] message
//!   so the engine can drop the registration).
//!
//! Both sides post [`NSLOT`] receives of [`SLOT`] bytes; a client keeps at
//! most `NSLOT / 2` requests in flight, so neither side overruns the other.
//! The driver is a frame transformer around the same sans-IO cores as TCP
//! ([`ClientCore`], [`ServerConn`]).
//!
//! Limits, said loudly: the soft provider's memory regions own their bytes,
//! so data is copied into and out of them (no zero copy); completions are
//! polled (the engine's RDMA thread naps 50 us when idle).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId, DriverError};
use cm::{CmConfig, ConnParam, EventType, PortSpace};
use tracing::{debug, info, warn};
use verbs::{Context, Mr, QpCap, WcOpcode, WcStatus};

use super::core::{ClientCore, Incoming, ServerConn};
use super::header::{Header, HeaderRepr, Opcode, HEADER_LEN};
use super::tcp::{ConnId, Dispatch};
pub use super::RDMA_CONN_BIT;

/// Bytes of one message slot (a SEND carries at most this).
pub const SLOT: usize = 64 * 1024;
/// Receives posted per connection (and send slots).
pub const NSLOT: usize = 16;
/// Header flag: the bulk region is a remote descriptor, not the data.
pub const FLAG_RDMA_BULK: u8 = 0x02;
/// Header flag: one-way "I have read the reply bulk of `rpc_id`".
pub const FLAG_RELEASE: u8 = 0x04;
const DESC_LEN: usize = 16;

const KIND_SEND: u64 = 1 << 60;
const KIND_READ: u64 = 2 << 60;
const KIND_MASK: u64 = 0xf << 60;
const T: Duration = Duration::from_secs(5);

/// Why the RDMA transport could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error("no RDMA device on {ip}: {source}")]
    Device { ip: String, source: verbs::Error },
    #[error("RDMA CM: {0}")]
    Cm(#[from] DriverError),
    #[error("verbs: {0}")]
    Verbs(#[from] verbs::Error),
    #[error("RDMA peer broke the protocol: {0}")]
    Protocol(&'static str),
}

fn open_device(ip: &str) -> Result<CmDevice, RdmaError> {
    let ctx = Context::open(ip).map_err(|source| RdmaError::Device {
        ip: ip.to_string(),
        source,
    })?;
    Ok(CmDevice::open(&ctx, CmConfig::default())?)
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: (NSLOT * 4) as u32,
        max_recv_wr: NSLOT as u32,
        ..QpCap::default()
    }
}

/// A frame's header and total length, if `b` starts with a whole frame.
fn frame_at(b: &[u8]) -> Option<(HeaderRepr, usize)> {
    let h = Header::new_checked(b.get(..HEADER_LEN)?).ok()?;
    let r = HeaderRepr::parse(&h).ok()?;
    let len = HEADER_LEN + r.body_len as usize;
    (b.len() >= len).then_some((r, len))
}

fn set_flags(frame: &mut [u8], flags: u8) {
    if let Some(f) = frame.get_mut(5) {
        *f |= flags;
    }
}

/// Rewrites a frame whose bulk region is `bulk_len` bytes into one whose
/// bulk region is the descriptor of `mr`.
fn with_descriptor(frame: &[u8], hdr: &HeaderRepr, mr: &Mr) -> Vec<u8> {
    let body = &frame[HEADER_LEN..];
    let args = &body[..body.len() - hdr.bulk_len as usize];
    let mut out = Vec::with_capacity(HEADER_LEN + args.len() + DESC_LEN);
    HeaderRepr {
        body_len: (args.len() + DESC_LEN) as u32,
        bulk_len: DESC_LEN as u32,
        ..*hdr
    }
    .emit_to(&mut out);
    set_flags(&mut out, FLAG_RDMA_BULK);
    out.extend_from_slice(args);
    out.extend_from_slice(&mr.addr().to_le_bytes());
    out.extend_from_slice(&mr.rkey().to_le_bytes());
    out.extend_from_slice(&(hdr.bulk_len).to_le_bytes());
    out
}

/// The descriptor at the end of a [`FLAG_RDMA_BULK`] frame body.
fn descriptor(body: &[u8]) -> Option<(u64, u32, u32)> {
    let d = body.get(body.len().checked_sub(DESC_LEN)?..)?;
    Some((
        u64::from_le_bytes(d[..8].try_into().ok()?),
        u32::from_le_bytes(d[8..12].try_into().ok()?),
        u32::from_le_bytes(d[12..16].try_into().ok()?),
    ))
}

/// The frame with its descriptor replaced by the bulk `data` (TCP form).
fn inline_form(hdr: &HeaderRepr, body: &[u8], data: &[u8]) -> Vec<u8> {
    let args = &body[..body.len().saturating_sub(DESC_LEN)];
    let mut out = Vec::with_capacity(HEADER_LEN + args.len() + data.len());
    HeaderRepr {
        body_len: (args.len() + data.len()) as u32,
        bulk_len: data.len() as u32,
        ..*hdr
    }
    .emit_to(&mut out);
    out.extend_from_slice(args);
    out.extend_from_slice(data);
    out
}

/// One RC connection's message slots.
struct Ep {
    id: CmId,
    send_mr: Mr,
    recv_mr: Mr,
    free: Vec<usize>,
    dead: bool,
}

impl Ep {
    /// Registers the slots and posts every receive (before the connection
    /// is established, so the peer's first SEND finds one).
    fn new(id: CmId) -> Result<Ep, RdmaError> {
        let send_mr = id.reg_msgs(SLOT * NSLOT)?;
        let recv_mr = id.reg_msgs(SLOT * NSLOT)?;
        for i in 0..NSLOT {
            id.post_recv(i as u64, &recv_mr, i * SLOT, SLOT as u32)?;
        }
        Ok(Ep {
            id,
            send_mr,
            recv_mr,
            free: (0..NSLOT).collect(),
            dead: false,
        })
    }

    /// SENDs one frame (at most [`SLOT`] bytes); `false` when no slot is free.
    fn send(&mut self, frame: &[u8]) -> Result<bool, RdmaError> {
        if frame.len() > SLOT {
            return Err(RdmaError::Protocol("frame larger than a slot"));
        }
        let Some(slot) = self.free.pop() else {
            return Ok(false);
        };
        self.send_mr.write(slot * SLOT, frame);
        self.id.post_send(
            KIND_SEND | slot as u64,
            &self.send_mr,
            slot * SLOT,
            frame.len() as u32,
        )?;
        Ok(true)
    }

    /// Reaps completions: received messages (copied out, receive reposted)
    /// go to `recv`, finished READs (by wr_id) to `read_done`.
    fn poll(
        &mut self,
        mut recv: impl FnMut(Vec<u8>),
        mut read_done: impl FnMut(u64, bool),
    ) -> usize {
        let mut n = 0;
        while let Ok(wc) = self.id.get_send_comp(Duration::ZERO) {
            n += 1;
            let ok = wc.status == WcStatus::Success;
            match wc.wr_id & KIND_MASK {
                KIND_SEND => self.free.push((wc.wr_id & !KIND_MASK) as usize),
                KIND_READ => read_done(wc.wr_id & !KIND_MASK, ok),
                _ => {}
            }
            if !ok {
                debug!(status = ?wc.status, "RDMA work request failed: connection broken");
                self.dead = true;
            }
        }
        while let Ok(wc) = self.id.get_recv_comp(Duration::ZERO) {
            n += 1;
            if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
                self.dead = true;
                continue;
            }
            let slot = wc.wr_id as usize;
            let mut m = vec![0u8; wc.byte_len as usize];
            self.recv_mr.read(slot * SLOT, &mut m);
            if self
                .id
                .post_recv(slot as u64, &self.recv_mr, slot * SLOT, SLOT as u32)
                .is_err()
            {
                self.dead = true;
            }
            recv(m);
        }
        if let Ok(ev) = self.id.get_event(Some(Duration::ZERO)) {
            if matches!(ev.event, EventType::Disconnected | EventType::DeviceRemoval) {
                self.dead = true;
            }
        }
        n
    }
}

/// One client connection over RDMA (the counterpart of
/// [`super::tcp::TcpClient`]).
pub struct RdmaClient {
    _dev: CmDevice,
    ep: Ep,
    pub core: ClientCore,
    queued: VecDeque<Vec<u8>>,
    requests: usize,
    /// Request bulk the engine may read, by RPC id.
    req_bulk: HashMap<u64, Mr>,
    /// READs of reply bulk in flight: id → (reply frame, landing region).
    reads: HashMap<u64, (Vec<u8>, Mr)>,
    next_read: u64,
    peer: SocketAddr,
}

impl std::fmt::Debug for RdmaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaClient({})", self.peer)
    }
}

impl RdmaClient {
    /// Opens a soft RoCE device on `local_ip` (UDP 4791 of that address) and
    /// connects to the engine's RDMA listener at `server`.
    pub fn connect(server: SocketAddr, local_ip: &str) -> Result<RdmaClient, RdmaError> {
        let dev = open_device(local_ip)?;
        let mut id = dev.create_id(None, PortSpace::Tcp);
        id.resolve_addr(None, server, T)?;
        id.resolve_route(T)?;
        id.create_qp_default(cap())?;
        let ep = Ep::new(id)?;
        ep.id.connect(&ConnParam::default(), T)?;
        Ok(RdmaClient {
            _dev: dev,
            ep,
            core: ClientCore::new(),
            queued: VecDeque::new(),
            requests: 0,
            req_bulk: HashMap::new(),
            reads: HashMap::new(),
            next_read: 1,
            peer: server,
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Queues a frame exactly as given, bypassing the core (for tests and
    /// tools that need to send what a well-behaved client never would).
    pub fn send_raw(&mut self, frame: Vec<u8>) {
        self.queued.push_back(frame);
    }

    /// Sends what the core queued, reaps completions, READs large reply
    /// bulk, times out RPCs; naps (at most `wait`) when nothing happened.
    pub fn progress(&mut self, wait: Duration) {
        if self.core.is_closed() {
            return;
        }
        let deadline = Instant::now() + wait;
        loop {
            let n = self.round();
            self.core.handle_timeout(Instant::now());
            if self.ep.dead {
                self.core.handle_close();
                return;
            }
            if n > 0 || Instant::now() >= deadline || self.core.in_flight() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    fn round(&mut self) -> usize {
        let mut n = 0;
        // cut the core's byte stream into frames
        let tx = self.core.transmit().to_vec();
        let mut at = 0;
        while let Some((hdr, len)) = frame_at(&tx[at..]) {
            let frame = &tx[at..at + len];
            if len <= SLOT {
                self.queued.push_back(frame.to_vec());
            } else {
                match self.ep.id.reg_read(hdr.bulk_len as usize) {
                    Ok(mr) => {
                        let body = &frame[HEADER_LEN..];
                        mr.write(0, &body[body.len() - hdr.bulk_len as usize..]);
                        self.queued.push_back(with_descriptor(frame, &hdr, &mr));
                        self.req_bulk.insert(hdr.rpc_id, mr);
                    }
                    Err(e) => {
                        warn!(error = %e, "registering request bulk failed");
                        self.ep.dead = true;
                    }
                }
            }
            at += len;
            n += 1;
        }
        self.core.transmitted(at);
        while let Some(f) = self.queued.front() {
            let is_req = f.get(5).is_some_and(|fl| fl & (FLAG_RELEASE | 1) == 0);
            if is_req && self.requests >= NSLOT / 2 {
                break;
            }
            match self.ep.send(f) {
                Ok(true) => {
                    self.queued.pop_front();
                    if is_req {
                        self.requests += 1;
                    }
                    n += 1;
                }
                Ok(false) => break,
                Err(_) => {
                    self.ep.dead = true;
                    break;
                }
            }
        }
        let mut msgs = Vec::new();
        let mut done_reads = Vec::new();
        n += self
            .ep
            .poll(|m| msgs.push(m), |id, ok| done_reads.push((id, ok)));
        for m in msgs {
            let Some((hdr, len)) = frame_at(&m) else {
                self.ep.dead = true;
                continue;
            };
            let flags = m[5];
            if flags & FLAG_RDMA_BULK != 0 {
                let Some((addr, rkey, blen)) = descriptor(&m[HEADER_LEN..len]) else {
                    self.ep.dead = true;
                    continue;
                };
                let read_id = self.next_read;
                self.next_read += 1;
                let r = self.ep.id.reg_msgs(blen as usize).and_then(|mr| {
                    self.ep
                        .id
                        .post_read(KIND_READ | read_id, &mr, 0, blen, addr, rkey)
                        .map(|()| mr)
                });
                match r {
                    Ok(mr) => {
                        self.reads.insert(read_id, (m[..len].to_vec(), mr));
                    }
                    Err(_) => self.ep.dead = true,
                }
            } else {
                self.deliver(&hdr, &m[..len]);
            }
        }
        for (id, ok) in done_reads {
            let Some((m, mr)) = self.reads.remove(&id) else {
                continue;
            };
            if !ok {
                continue;
            }
            let Some((hdr, len)) = frame_at(&m) else {
                continue;
            };
            let data = mr.to_vec();
            let frame = inline_form(&hdr, &m[HEADER_LEN..len], &data);
            // the engine may drop its registration now
            let mut rel = Vec::new();
            HeaderRepr {
                response: false,
                opcode: Opcode::Ping,
                rpc_id: hdr.rpc_id,
                status: 0,
                timeout_ms: 0,
                body_len: 0,
                bulk_len: 0,
            }
            .emit_to(&mut rel);
            set_flags(&mut rel, FLAG_RELEASE);
            self.queued.push_back(rel);
            self.deliver(&hdr, &frame);
        }
        n
    }

    fn deliver(&mut self, hdr: &HeaderRepr, frame: &[u8]) {
        self.requests = self.requests.saturating_sub(1);
        self.req_bulk.remove(&hdr.rpc_id);
        self.core.handle_input(frame);
    }
}

/// Where replies for RDMA connections go (the RDMA thread's queue).
pub type RdmaReplies = Sender<(ConnId, Vec<u8>)>;

struct SrvConn {
    ep: Ep,
    io: ServerConn,
    /// Reply bulk registered for the client to READ, by RPC id.
    reply_bulk: HashMap<u64, Mr>,
    /// READs of request bulk in flight: id → (request frame, landing region).
    reads: HashMap<u64, (Vec<u8>, Mr)>,
    queued: VecDeque<Vec<u8>>,
}

/// The engine's RDMA listener and connections, on one thread.
pub struct RdmaServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RdmaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaServer({})", self.addr)
    }
}

impl RdmaServer {
    /// Opens a soft RoCE device on `listen`'s IP, listens with the CM on its
    /// port, and serves requests through `dispatch`; replies for its
    /// connections (ids with [`RDMA_CONN_BIT`]) arrive on `rx` (see
    /// [`super::tcp::ReplySender::with_rdma`]).
    pub fn start(
        listen: SocketAddr,
        dispatch: impl Dispatch,
        rx: Receiver<(ConnId, Vec<u8>)>,
    ) -> Result<RdmaServer, RdmaError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = channel();
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("obj-rdma".into())
            .spawn(move || {
                let setup = (|| -> Result<(CmDevice, CmId), RdmaError> {
                    let dev = open_device(&listen.ip().to_string())?;
                    let l = dev.listen_ep(listen, PortSpace::Tcp, 64)?;
                    Ok((dev, l))
                })();
                match setup {
                    Ok((dev, l)) => {
                        let _ = ready_tx.send(Ok(()));
                        server_loop(dev, l, dispatch, rx, s2);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|_| RdmaError::Protocol("could not start the RDMA thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(RdmaError::Protocol("RDMA thread died")),
        }
        info!(%listen, "object engine listening (RDMA, soft RoCE)");
        Ok(RdmaServer {
            addr: listen,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn server_loop(
    _dev: CmDevice,
    listener: CmId,
    mut dispatch: impl Dispatch,
    rx: Receiver<(ConnId, Vec<u8>)>,
    stop: Arc<AtomicBool>,
) {
    let mut conns: HashMap<ConnId, SrvConn> = HashMap::new();
    let mut next: ConnId = RDMA_CONN_BIT | 1;
    let mut next_read = 1u64;
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let mut work = 0usize;
        // new connections (a short wait doubles as the idle nap)
        let wait = if idle > 64 {
            Duration::from_micros(50)
        } else {
            Duration::ZERO
        };
        if let Ok((mut id, _ev)) = listener.get_request(Some(wait)) {
            let r = match id.create_qp_default(cap()) {
                Ok(_) => Ep::new(id),
                Err(e) => Err(e.into()),
            };
            match r {
                Ok(ep) => match ep.id.accept(&ConnParam::default(), T) {
                    Ok(_) => {
                        debug!(conn = next, "RDMA client connected");
                        conns.insert(
                            next,
                            SrvConn {
                                ep,
                                io: ServerConn::new(),
                                reply_bulk: HashMap::new(),
                                reads: HashMap::new(),
                                queued: VecDeque::new(),
                            },
                        );
                        next += 1;
                        work += 1;
                    }
                    Err(e) => warn!(error = %e, "RDMA accept failed"),
                },
                Err(e) => warn!(error = %e, "RDMA connection setup failed"),
            }
        }
        // replies from the targets and the management thread
        while let Ok((conn, frame)) = rx.try_recv() {
            work += 1;
            if let Some(c) = conns.get_mut(&conn) {
                queue_reply(c, frame);
            }
        }
        for (cid, c) in conns.iter_mut() {
            let mut msgs = Vec::new();
            let mut reads = Vec::new();
            work += c.ep.poll(|m| msgs.push(m), |id, ok| reads.push((id, ok)));
            for m in msgs {
                let Some((hdr, len)) = frame_at(&m) else {
                    c.ep.dead = true;
                    continue;
                };
                let flags = m[5];
                if flags & FLAG_RELEASE != 0 {
                    c.reply_bulk.remove(&hdr.rpc_id);
                } else if flags & FLAG_RDMA_BULK != 0 {
                    let Some((addr, rkey, blen)) = descriptor(&m[HEADER_LEN..len]) else {
                        c.io.reply_error(&hdr, super::Status::Proto);
                        continue;
                    };
                    if blen as usize > super::MAX_BODY {
                        c.io.reply_error(&hdr, super::Status::RecTooBig);
                        continue;
                    }
                    let rid = next_read;
                    next_read += 1;
                    let r = c.ep.id.reg_msgs(blen as usize).and_then(|mr| {
                        c.ep.id
                            .post_read(KIND_READ | rid, &mr, 0, blen, addr, rkey)
                            .map(|()| mr)
                    });
                    match r {
                        Ok(mr) => {
                            c.reads.insert(rid, (m[..len].to_vec(), mr));
                        }
                        Err(_) => c.io.reply_error(&hdr, super::Status::Io),
                    }
                } else {
                    c.io.handle_input(&m[..len]);
                }
            }
            for (rid, ok) in reads {
                let Some((m, mr)) = c.reads.remove(&rid) else {
                    continue;
                };
                let Some((hdr, len)) = frame_at(&m) else {
                    continue;
                };
                if !ok {
                    // a descriptor outside the client's registered memory: the
                    // READ failed, which breaks the RC connection (IBTA: remote
                    // access error); only this client is affected
                    continue;
                }
                let data = mr.to_vec();
                c.io.handle_input(&inline_form(&hdr, &m[HEADER_LEN..len], &data));
            }
            while let Some(inc) = c.io.poll_incoming() {
                match inc {
                    Incoming::Request { hdr, body } => dispatch.request(*cid, hdr, body, &mut c.io),
                    Incoming::Reject { hdr, status } => c.io.reply_error(&hdr, status),
                }
            }
            // inline replies (errors, ping) written by the core
            let tx = c.io.transmit().to_vec();
            c.io.transmitted(tx.len());
            let mut at = 0;
            while let Some((_, len)) = frame_at(&tx[at..]) {
                queue_reply(c, tx[at..at + len].to_vec());
                at += len;
            }
            while let Some(f) = c.queued.front() {
                match c.ep.send(f) {
                    Ok(true) => {
                        c.queued.pop_front();
                        work += 1;
                    }
                    Ok(false) => break,
                    Err(_) => {
                        c.ep.dead = true;
                        break;
                    }
                }
            }
        }
        conns.retain(|cid, c| {
            if c.ep.dead || c.io.is_closing() {
                debug!(conn = cid, "RDMA client gone");
                let _ = c.ep.id.disconnect();
                dispatch.closed(*cid);
                false
            } else {
                true
            }
        });
        idle = if work > 0 { 0 } else { idle.saturating_add(1) };
    }
    for (cid, c) in conns.drain() {
        let _ = c.ep.id.disconnect();
        dispatch.closed(cid);
    }
}

/// Queues a reply frame, registering its bulk for the client to READ when
/// the frame exceeds a slot.
fn queue_reply(c: &mut SrvConn, frame: Vec<u8>) {
    if frame.len() <= SLOT {
        c.queued.push_back(frame);
        return;
    }
    let Some((hdr, len)) = frame_at(&frame) else {
        return;
    };
    let body = &frame[HEADER_LEN..len];
    match c.ep.id.reg_read(hdr.bulk_len as usize) {
        Ok(mr) => {
            mr.write(0, &body[body.len() - hdr.bulk_len as usize..]);
            c.queued
                .push_back(with_descriptor(&frame[..len], &hdr, &mr));
            c.reply_bulk.insert(hdr.rpc_id, mr);
        }
        Err(e) => {
            warn!(error = %e, "registering reply bulk failed");
            c.ep.dead = true;
        }
    }
}
