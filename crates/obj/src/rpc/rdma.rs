//! RPC over RDMA: the same frames as over TCP, one frame per RDMA SEND on an
//! RC QP set up with the RDMA CM (`cm`, `verbs`: the soft RoCEv2 provider),
//! and values larger than a message slot moved by RDMA READ and WRITE
//! between registered buffers:
//!
//! - both sides register a pool of large buffers ([`BufPool`]) when the
//!   connection is set up and lend them per request; a pool grows (and counts
//!   it, [`RdmaStats::pool_grown`]) only when none of its free buffers is big
//!   enough, so the I/O path does no memory registration in steady state;
//! - a request whose frame exceeds [`SLOT`] is sent with [`FLAG_RDMA_BULK`]
//!   and a 16-byte descriptor `(addr u64, rkey u32, len u32)` of a client
//!   pool buffer as its bulk region; the engine READs the bulk into one of
//!   its own pool buffers and serves the request as if it had come inline;
//! - a fetch request carries [`FLAG_SINK`] and the descriptor of a client
//!   pool buffer the engine may WRITE (the sink, sized for what the fetch can
//!   return); a reply too big for a slot is RDMA-WRITten into the sink and
//!   then SENT (back to back: RC ordering makes the data land before the
//!   reply is seen) with [`FLAG_SINK`] and the written length as its bulk
//!   region. A reply bulk larger than the sink is refused with
//!   [`Status::RecTooBig`](super::Status::RecTooBig) (nothing is written),
//!   unless the sink was *open* ([`FLAG_SINK_OPEN`]: a fetch of unknown size
//!   lends one standard pool buffer); then it comes the READ way below;
//! - any other reply larger than a slot (listings, a fetch without a sink)
//!   comes the old way: the engine exposes a pool buffer for READ, the client
//!   READs it and sends a one-way [`FLAG_RELEASE`] message so the engine can
//!   take the buffer back.
//!
//! Both sides post [`NSLOT`] receives of [`SLOT`] bytes; a client keeps at
//! most `NSLOT / 2` requests in flight, so neither side overruns the other.
//! The driver is a frame transformer around the same sans-IO cores as TCP
//! ([`ClientCore`], [`ServerConn`]).
//!
//! Copies that remain (the soft provider's memory regions own their bytes,
//! and the client API and the engine's dispatch take and return `Vec`s):
//! client side, request bulk from the operation's buffers into a pool buffer
//! ([`RdmaClient::start`]), and reply bulk from the sink (or READ landing
//! buffer) into the reply's body;
//! engine side, request bulk from the READ landing buffer into the request
//! body handed to the dispatch, and reply bulk from the target's frame into
//! the WRITE source. Inline messages are copied once out of their receive
//! slot (and once into a send slot). Completions are polled (the engine's
//! RDMA thread naps 50 us when idle).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId, DriverError};
use cm::{CmConfig, ConnParam, EventType, PortSpace};
use tracing::{debug, info, warn};
use verbs::{AccessFlags, Context, Mr, Pd, QpCap, WcOpcode, WcStatus};

use super::core::{ClientCore, ServerConn};
use super::frame::encode_reply;
use super::header::{Header, HeaderRepr, Opcode, HEADER_LEN};
use super::msg::{IodType, Reply, Request};
use super::tcp::{ConnId, Dispatch};
use super::Status;
pub use super::RDMA_CONN_BIT;

/// Bytes of one message slot (a SEND carries at most this).
pub const SLOT: usize = 64 * 1024;
/// Receives posted per connection (and send slots).
pub const NSLOT: usize = 64;
/// Header flag: the bulk region is a remote descriptor to READ, not the data.
pub const FLAG_RDMA_BULK: u8 = 0x02;
/// Header flag: one-way "I have read the reply bulk of `rpc_id`".
pub const FLAG_RELEASE: u8 = 0x04;
/// Header flag: in a request, the bulk region is the descriptor of a sink
/// the engine may RDMA WRITE the reply bulk into; in a reply, the bulk was
/// written there and the bulk region is its length (u32).
pub const FLAG_SINK: u8 = 0x08;
/// Header flag, with [`FLAG_SINK`] in a request: the sink's size is a guess
/// (a fetch whose size is open, as `kv_get`'s): a reply bulk larger than it
/// comes the READ way (exposed in an engine pool buffer), not as
/// `RecTooBig`. (0x10 is the header's map-version flag.)
pub const FLAG_SINK_OPEN: u8 = 0x20;
/// Size of a pool buffer registered at connect (a larger need registers a
/// buffer of the next power of two, kept in the pool afterwards).
pub const POOL_BUF: usize = 1 << 20;
/// Pool buffers registered at connect, per side.
pub const POOL_INIT: usize = 8;
const DESC_LEN: usize = 16;
/// The most a fetch can return (the engine refuses more).
const FETCH_MAX: usize = super::MAX_BODY - SLOT;
/// Bytes past a capped sink checked for stray writes (see
/// [`RdmaClient::set_sink_cap`]).
const CANARY: usize = 4096;
const CANARY_BYTE: u8 = 0xa5;

const KIND_SEND: u64 = 1 << 60;
const KIND_READ: u64 = 2 << 60;
const KIND_WRITE: u64 = 3 << 60;
const KIND_MASK: u64 = 0xf << 60;
const T: Duration = Duration::from_secs(5);
/// Empty progress rounds a client yields the CPU on before it naps.
const YIELDS_BEFORE_NAP: u32 = 32;

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

/// Counters of one RDMA client, or of all connections of one engine
/// listener ([`server_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmaStats {
    /// Connections alive (engine) / 1 (client).
    pub conns: usize,
    /// Pool buffers registered (free + lent).
    pub pool_buffers: usize,
    /// Bytes of those buffers.
    pub pool_bytes: usize,
    /// Pool buffers lent right now (in use by a request or reply).
    pub pool_lent: usize,
    /// Buffers registered after connect because the pool had none big
    /// enough free (memory registration on the I/O path).
    pub pool_grown: u64,
    /// Times a pool buffer was lent.
    pub pool_lends: u64,
    /// Fetch replies pushed by RDMA WRITE into a client's sink.
    pub sink_writes: u64,
    /// Fetch replies refused because the sink was too small.
    pub sink_too_small: u64,
    /// Request or reply bulk moved by RDMA READ.
    pub bulk_reads: u64,
    /// Client: writes found outside a capped sink (must stay 0).
    pub sink_overruns: u64,
}

#[derive(Debug, Default)]
struct Counters {
    conns: AtomicUsize,
    pool_buffers: AtomicUsize,
    pool_bytes: AtomicUsize,
    pool_lent: AtomicUsize,
    pool_grown: AtomicU64,
    pool_lends: AtomicU64,
    sink_writes: AtomicU64,
    sink_too_small: AtomicU64,
    bulk_reads: AtomicU64,
    sink_overruns: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RdmaStats {
        let l = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let q = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RdmaStats {
            conns: l(&self.conns),
            pool_buffers: l(&self.pool_buffers),
            pool_bytes: l(&self.pool_bytes),
            pool_lent: l(&self.pool_lent),
            pool_grown: q(&self.pool_grown),
            pool_lends: q(&self.pool_lends),
            sink_writes: q(&self.sink_writes),
            sink_too_small: q(&self.sink_too_small),
            bulk_reads: q(&self.bulk_reads),
            sink_overruns: q(&self.sink_overruns),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Counters of the running engine listeners, by listen address.
static SERVERS: Mutex<Vec<(SocketAddr, Arc<Counters>)>> = Mutex::new(Vec::new());

/// The counters of the engine's RDMA listener at `listen` (all its
/// connections together), while it runs.
pub fn server_stats(listen: SocketAddr) -> Option<RdmaStats> {
    let g = SERVERS.lock().unwrap_or_else(|p| p.into_inner());
    g.iter()
        .find(|(a, _)| *a == listen)
        .map(|(_, c)| c.snapshot())
}

/// Registered buffers lent per request: taken with [`BufPool::take`] (the
/// smallest free one big enough, or a new registration, counted), returned
/// with [`BufPool::give`]. Dropping the pool deregisters its free buffers
/// (lent ones go when their last handle does) and takes them off the counters.
struct BufPool {
    pd: Pd,
    access: AccessFlags,
    free: Vec<Mr>,
    buffers: usize,
    bytes: usize,
    lent: usize,
    counters: Arc<Counters>,
}

impl BufPool {
    fn new(
        pd: &Pd,
        access: AccessFlags,
        n: usize,
        counters: Arc<Counters>,
    ) -> Result<BufPool, RdmaError> {
        let mut p = BufPool {
            pd: pd.clone(),
            access,
            free: Vec::with_capacity(n),
            buffers: 0,
            bytes: 0,
            lent: 0,
            counters,
        };
        for _ in 0..n {
            let mr = p.register(POOL_BUF)?;
            p.free.push(mr);
        }
        Ok(p)
    }

    fn register(&mut self, len: usize) -> Result<Mr, RdmaError> {
        let mr = self.pd.reg_mr(len, self.access)?;
        self.buffers += 1;
        self.bytes += len;
        self.counters.pool_buffers.fetch_add(1, Ordering::Relaxed);
        self.counters.pool_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(mr)
    }

    /// Whether a free buffer of at least `need` bytes is there.
    fn has(&self, need: usize) -> bool {
        self.free.iter().any(|m| m.len() >= need)
    }

    /// A buffer of at least `need` bytes.
    fn take(&mut self, need: usize) -> Result<Mr, RdmaError> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, m)| m.len() >= need)
            .min_by_key(|(_, m)| m.len())
            .map(|(i, _)| i);
        let mr = match best {
            Some(i) => self.free.swap_remove(i),
            None => {
                bump(&self.counters.pool_grown);
                self.register(need.max(1).next_power_of_two().max(POOL_BUF))?
            }
        };
        self.lent += 1;
        self.counters.pool_lent.fetch_add(1, Ordering::Relaxed);
        bump(&self.counters.pool_lends);
        Ok(mr)
    }

    fn give(&mut self, mr: Mr) {
        self.lent -= 1;
        self.counters.pool_lent.fetch_sub(1, Ordering::Relaxed);
        self.free.push(mr);
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        let c = &self.counters;
        c.pool_buffers.fetch_sub(self.buffers, Ordering::Relaxed);
        c.pool_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        c.pool_lent.fetch_sub(self.lent, Ordering::Relaxed);
    }
}

/// The kernel RDMA device of `ip` (rdma-core provider, librdmacm CM) if there
/// is one, else a soft RoCE device on it.
fn open_device(ip: &str) -> Result<CmDevice, RdmaError> {
    let dev_err = |source| RdmaError::Device {
        ip: ip.to_string(),
        source,
    };
    let kernel = match ip.parse() {
        Ok(v4) => verbs::rdma_core::open_by_ip_if_kernel(v4).map_err(dev_err)?,
        Err(_) => None,
    };
    let ctx = match kernel {
        Some(c) => c,
        None => Context::open(ip).map_err(dev_err)?,
    };
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

/// A frame of `hdr` with arguments `args` and, as its bulk region, `tail`
/// (a descriptor or a length), with `flags` set.
fn with_tail(hdr: &HeaderRepr, args: &[u8], tail: &[u8], flags: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + args.len() + tail.len());
    HeaderRepr {
        body_len: (args.len() + tail.len()) as u32,
        bulk_len: tail.len() as u32,
        ..*hdr
    }
    .emit_to(&mut out);
    set_flags(&mut out, flags);
    out.extend_from_slice(args);
    out.extend_from_slice(tail);
    out
}

fn desc_bytes(addr: u64, rkey: u32, len: u32) -> [u8; DESC_LEN] {
    let mut d = [0u8; DESC_LEN];
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&rkey.to_le_bytes());
    d[12..].copy_from_slice(&len.to_le_bytes());
    d
}

/// The descriptor at the end of a [`FLAG_RDMA_BULK`]/[`FLAG_SINK`] body.
fn descriptor(body: &[u8]) -> Option<(u64, u32, u32)> {
    let d = body.get(body.len().checked_sub(DESC_LEN)?..)?;
    Some((
        u64::from_le_bytes(d[..8].try_into().ok()?),
        u32::from_le_bytes(d[8..12].try_into().ok()?),
        u32::from_le_bytes(d[12..16].try_into().ok()?),
    ))
}

/// The arguments of a frame body whose bulk region is `bulk_len` bytes.
fn args_of(body: &[u8], bulk_len: u32) -> &[u8] {
    &body[..body.len().saturating_sub(bulk_len as usize)]
}

/// A body of `args` followed by the first `n` bytes of `mr` (one copy).
fn body_from_mr(args: &[u8], mr: &Mr, n: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(args.len() + n);
    body.extend_from_slice(args);
    // SAFETY: callers pass a buffer no posted operation and no peer writes
    // any more: an engine READ landing buffer whose READ completed (clients
    // have no write access to engine buffers); a client READ landing buffer
    // whose READ completed, or a sink whose reply arrived (the engine writes
    // a client buffer only as a sink, once, before that sink's reply).
    let src = unsafe { mr.as_slice() };
    body.extend_from_slice(&src[..n.min(src.len())]);
    body
}

/// The largest reply bulk a fetch request `args` can bring (exact when
/// every iod names its record size; [`FETCH_MAX`] otherwise).
/// The sink a fetch needs: `(bytes, open)`; `open` when a record size is
/// open (the reply's size is not known: the sink is one standard pool buffer
/// and a larger reply comes the READ way, [`FLAG_SINK_OPEN`]).
fn fetch_need(args: &[u8]) -> (usize, bool) {
    let Ok(Request::ObjFetch { iods, .. }) = Request::parse(Opcode::ObjFetch, args, 0) else {
        return (FETCH_MAX, false);
    };
    let mut total = 0u64;
    for i in &iods {
        if i.rsize == 0 {
            return (POOL_BUF, true);
        }
        let n = match i.kind {
            IodType::Single => i.rsize,
            IodType::Array => i
                .recxs
                .iter()
                .map(|r| r.nr.saturating_mul(i.rsize))
                .fold(0, u64::saturating_add),
        };
        total = total.saturating_add(n);
    }
    (total.min(FETCH_MAX as u64) as usize, false)
}

/// One RC connection's message slots.
/// A received frame: header, flags byte, body.
type RecvFrame = (HeaderRepr, u8, Vec<u8>);

struct Ep {
    id: CmId,
    send_mr: Mr,
    /// One region per receive slot, so a completed slot can be borrowed
    /// while the others are being received into.
    recv_mrs: Vec<Mr>,
    free: Vec<usize>,
    /// READ/WRITE completions reaped by [`Ep::reap_sends`], handed out by
    /// the next [`Ep::poll`].
    early: Vec<(u64, bool)>,
    dead: bool,
}

impl Ep {
    /// Registers the slots and posts every receive (before the connection
    /// is established, so the peer's first SEND finds one).
    fn new(id: CmId) -> Result<Ep, RdmaError> {
        let send_mr = id.reg_msgs(SLOT * NSLOT)?;
        let mut recv_mrs = Vec::with_capacity(NSLOT);
        for i in 0..NSLOT {
            let mr = id.reg_msgs(SLOT)?;
            id.post_recv(i as u64, &mr, 0, SLOT as u32)?;
            recv_mrs.push(mr);
        }
        Ok(Ep {
            id,
            send_mr,
            recv_mrs,
            free: (0..NSLOT).collect(),
            early: Vec::new(),
            dead: false,
        })
    }

    fn pd(&self) -> &Pd {
        self.id.device().pd()
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

    /// Reaps send-side completions: SEND slots come free, READ/WRITE
    /// completions wait in `early` for the next [`Ep::poll`].
    fn reap_sends(&mut self) -> usize {
        let mut n = 0;
        while let Ok(wc) = self.id.get_send_comp(Duration::ZERO) {
            n += 1;
            let ok = wc.status == WcStatus::Success;
            match wc.wr_id & KIND_MASK {
                KIND_SEND => self.free.push((wc.wr_id & !KIND_MASK) as usize),
                KIND_READ | KIND_WRITE => self.early.push((wc.wr_id, ok)),
                _ => {}
            }
            if !ok {
                debug!(status = ?wc.status, "RDMA work request failed: connection broken");
                self.dead = true;
            }
        }
        n
    }

    /// Reaps completions: each received message is shown to `recv` (borrowed
    /// from its slot, which is reposted afterwards); finished READs and
    /// WRITEs (by wr_id, kind bits included) go to `done`.
    /// [`Ep::poll`] collecting the received frames (header, flags byte, body)
    /// and the completed RDMA operations (id, ok); a receive that is not a
    /// frame marks the endpoint dead. Returns the work done with them.
    fn poll_frames(&mut self) -> (usize, Vec<RecvFrame>, Vec<(u64, bool)>) {
        let mut msgs = Vec::new();
        let mut done = Vec::new();
        let mut bad = false;
        let n = self.poll(
            |m| match frame_at(m) {
                Some((hdr, len)) => msgs.push((hdr, m[5], m[HEADER_LEN..len].to_vec())),
                None => bad = true,
            },
            |id, ok| done.push((id, ok)),
        );
        if bad {
            self.dead = true;
        }
        (n, msgs, done)
    }

    fn poll(&mut self, mut recv: impl FnMut(&[u8]), mut done: impl FnMut(u64, bool)) -> usize {
        let mut n = self.reap_sends();
        for (wr, ok) in self.early.drain(..) {
            done(wr, ok);
        }
        while let Ok(wc) = self.id.get_recv_comp(Duration::ZERO) {
            n += 1;
            if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
                self.dead = true;
                continue;
            }
            let slot = wc.wr_id as usize;
            let Some(mr) = self.recv_mrs.get(slot) else {
                self.dead = true;
                continue;
            };
            {
                // SAFETY: this slot's receive completed and is reposted only
                // below, after the borrow ends; the region is LOCAL_WRITE only
                // (no peer can write it), so nothing writes it meanwhile.
                let m = unsafe { mr.as_slice() };
                recv(&m[..(wc.byte_len as usize).min(m.len())]);
            }
            if self.id.post_recv(slot as u64, mr, 0, SLOT as u32).is_err() {
                self.dead = true;
            }
        }
        if let Ok(ev) = self.id.get_event(Some(Duration::ZERO)) {
            if matches!(ev.event, EventType::Disconnected | EventType::DeviceRemoval) {
                self.dead = true;
            }
        }
        n
    }
}

/// A reply whose bulk is being READ by the client.
struct ClientRead {
    hdr: HeaderRepr,
    args: Vec<u8>,
    mr: Mr,
    len: usize,
}

/// What turns the client core's frames into wire frames (the client's
/// fields it needs, borrowed apart from the core whose bytes it reads).
struct Outgoing<'a> {
    pool: &'a mut BufPool,
    sinks: &'a mut HashMap<u64, (Mr, usize)>,
    req_bulk: &'a mut HashMap<u64, Mr>,
    sink_cap: Option<usize>,
}

impl Outgoing<'_> {
    /// One frame of the core's stream as it goes on the wire: a fetch with
    /// its sink's descriptor, a large request with its bulk in a pool buffer
    /// (one copy) and that buffer's descriptor, anything else as it is.
    fn frame(&mut self, hdr: &HeaderRepr, frame: &[u8]) -> Result<Vec<u8>, RdmaError> {
        let body = &frame[HEADER_LEN..];
        if !hdr.response && hdr.opcode == Opcode::ObjFetch && hdr.bulk_len == 0 {
            let (need, open) = fetch_need(body);
            // a capped sink (tests, tools) is never open: too small is refused
            let open = open && self.sink_cap.is_none();
            let (len, mr) = match self.sink_cap {
                None => (need, self.pool.take(need)?),
                Some(c) => {
                    let len = c.min(need);
                    let mr = self.pool.take(len + CANARY)?;
                    mr.write(len, &[CANARY_BYTE; CANARY]);
                    (len, mr)
                }
            };
            let d = desc_bytes(mr.addr(), mr.rkey(), len as u32);
            if let Some((old, _)) = self.sinks.insert(hdr.rpc_id, (mr, len)) {
                self.pool.give(old);
            }
            let flags = if open {
                FLAG_SINK | FLAG_SINK_OPEN
            } else {
                FLAG_SINK
            };
            return Ok(with_tail(hdr, body, &d, flags));
        }
        if frame.len() <= SLOT || frame[5] & FLAG_RDMA_BULK != 0 {
            // (a frame from [`RdmaClient::start`] has its descriptor already)
            return Ok(frame.to_vec());
        }
        let bulk = &body[body.len() - hdr.bulk_len as usize..];
        let mr = self.pool.take(bulk.len())?;
        mr.write(0, bulk);
        let d = desc_bytes(mr.addr(), mr.rkey(), bulk.len() as u32);
        let out = with_tail(hdr, args_of(body, hdr.bulk_len), &d, FLAG_RDMA_BULK);
        if let Some(old) = self.req_bulk.insert(hdr.rpc_id, mr) {
            self.pool.give(old);
        }
        Ok(out)
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
    pool: BufPool,
    counters: Arc<Counters>,
    /// Request bulk the engine may read, by RPC id (lent until the reply).
    req_bulk: HashMap<u64, Mr>,
    /// Sinks the engine may write, by RPC id: (buffer, advertised length).
    /// Lent until the reply comes (even after a timeout or cancel: the
    /// engine may still write).
    sinks: HashMap<u64, (Mr, usize)>,
    /// READs of reply bulk in flight.
    reads: HashMap<u64, ClientRead>,
    next_read: u64,
    sink_cap: Option<usize>,
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
        let counters = Arc::new(Counters::default());
        counters.conns.store(1, Ordering::Relaxed);
        let pool = BufPool::new(
            ep.pd(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            POOL_INIT,
            counters.clone(),
        )?;
        ep.id.connect(&ConnParam::default(), T)?;
        Ok(RdmaClient {
            _dev: dev,
            ep,
            core: ClientCore::new(),
            queued: VecDeque::new(),
            requests: 0,
            pool,
            counters,
            req_bulk: HashMap::new(),
            sinks: HashMap::new(),
            reads: HashMap::new(),
            next_read: 1,
            sink_cap: None,
            peer: server,
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This connection's counters (its buffer pool, sinks, READs).
    pub fn stats(&self) -> RdmaStats {
        self.counters.snapshot()
    }

    /// Advertises sinks of at most `cap` bytes from now on (`None`: as big
    /// as the fetch can return). With a cap, a fetch whose reply is larger
    /// gets `RecTooBig`; the bytes just past the advertised length are
    /// filled with a canary and checked when the reply comes (a change is
    /// counted in [`RdmaStats::sink_overruns`]). For tests and tools.
    pub fn set_sink_cap(&mut self, cap: Option<usize>) {
        self.sink_cap = cap;
    }

    /// Starts `req` (as [`ClientCore::start`]) with its bulk region gathered
    /// from `bulk`; bulk larger than a slot is copied once, straight into a
    /// pool buffer the engine READs (not through the core's byte stream).
    pub fn start(
        &mut self,
        now: Instant,
        req: &Request,
        bulk: &[&[u8]],
        timeout: Option<Duration>,
    ) -> u64 {
        let total: usize = bulk.iter().map(|b| b.len()).sum();
        if total <= SLOT || self.core.is_closed() {
            return self.core.start(now, req, bulk, timeout);
        }
        let mr = match self.pool.take(total) {
            Ok(mr) => mr,
            Err(e) => {
                warn!(error = %e, "no buffer for request bulk");
                self.ep.dead = true;
                return self.core.start(now, req, bulk, timeout);
            }
        };
        let mut at = 0;
        for b in bulk {
            mr.write(at, b);
            at += b.len();
        }
        let d = desc_bytes(mr.addr(), mr.rkey(), total as u32);
        let mv = self
            .core
            .map_version()
            .filter(|_| req.opcode().carries_map_version());
        let id = self.core.start_with(now, req, timeout, |tx, id, ms| {
            let start = tx.len();
            super::frame::encode_request_at(tx, id, ms, mv, req, &[]);
            tx.extend_from_slice(&d);
            let body_len = (tx.len() - start - HEADER_LEN) as u32;
            let f = &mut tx[start..];
            f[5] |= FLAG_RDMA_BULK;
            f[24..28].copy_from_slice(&body_len.to_le_bytes());
            f[28..32].copy_from_slice(&(DESC_LEN as u32).to_le_bytes());
        });
        if let Some(old) = self.req_bulk.insert(id, mr) {
            self.pool.give(old);
        }
        id
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
        let mut empty = 0u32;
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
            // a reply is usually due within a few µs: yield the CPU a few
            // times before a nap (which lasts ~60 µs or more with timer slack)
            empty += 1;
            if empty <= YIELDS_BEFORE_NAP {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    fn round(&mut self) -> usize {
        let mut n = 0;
        // cut the core's byte stream into frames, only as many as may be sent
        // now (the rest waits in the core), so buffers are lent (sinks) for
        // at most the requests in flight
        let is_req = |f: &[u8]| f.get(5).is_some_and(|fl| fl & (FLAG_RELEASE | 1) == 0);
        let waiting = self.queued.iter().filter(|f| is_req(f)).count();
        let mut room = (NSLOT / 2).saturating_sub(self.requests + waiting);
        let mut at = 0;
        let tx = self.core.transmit();
        let mut out = Outgoing {
            pool: &mut self.pool,
            sinks: &mut self.sinks,
            req_bulk: &mut self.req_bulk,
            sink_cap: self.sink_cap,
        };
        while room > 0 {
            let Some((hdr, len)) = frame_at(&tx[at..]) else {
                break;
            };
            room -= 1;
            match out.frame(&hdr, &tx[at..at + len]) {
                Ok(f) => self.queued.push_back(f),
                Err(e) => {
                    warn!(error = %e, "preparing an RDMA request failed");
                    self.ep.dead = true;
                }
            }
            at += len;
            n += 1;
        }
        self.core.transmitted(at);
        while let Some(f) = self.queued.front() {
            let is_req = is_req(f);
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
        let (k, msgs, done_reads) = self.ep.poll_frames();
        n += k;
        for (hdr, flags, body) in msgs {
            if flags & FLAG_SINK != 0 {
                self.sink_reply(hdr, &body);
            } else if flags & FLAG_RDMA_BULK != 0 {
                let Some((addr, rkey, blen)) = descriptor(&body) else {
                    self.ep.dead = true;
                    continue;
                };
                let read_id = self.next_read;
                self.next_read += 1;
                let r = self.pool.take(blen as usize).and_then(|mr| {
                    match self
                        .ep
                        .id
                        .post_read(KIND_READ | read_id, &mr, 0, blen, addr, rkey)
                    {
                        Ok(()) => Ok(mr),
                        Err(e) => {
                            self.pool.give(mr);
                            Err(e.into())
                        }
                    }
                });
                match r {
                    Ok(mr) => {
                        self.reads.insert(
                            read_id,
                            ClientRead {
                                hdr,
                                args: args_of(&body, hdr.bulk_len).to_vec(),
                                mr,
                                len: blen as usize,
                            },
                        );
                    }
                    Err(_) => self.ep.dead = true,
                }
            } else {
                self.deliver(hdr, body);
            }
        }
        for (id, ok) in done_reads {
            let Some(r) = self.reads.remove(&(id & !KIND_MASK)) else {
                continue;
            };
            if !ok {
                self.pool.give(r.mr);
                continue;
            }
            bump(&self.counters.bulk_reads);
            let body = body_from_mr(&r.args, &r.mr, r.len);
            self.pool.give(r.mr);
            // the engine may take its buffer back now
            let mut rel = Vec::new();
            HeaderRepr {
                response: false,
                opcode: Opcode::Ping,
                rpc_id: r.hdr.rpc_id,
                status: 0,
                timeout_ms: 0,
                body_len: 0,
                bulk_len: 0,
                map_version: None,
            }
            .emit_to(&mut rel);
            set_flags(&mut rel, FLAG_RELEASE);
            self.queued.push_back(rel);
            let hdr = HeaderRepr {
                body_len: body.len() as u32,
                bulk_len: r.len as u32,
                ..r.hdr
            };
            self.deliver(hdr, body);
        }
        n
    }

    /// A reply whose bulk the engine wrote into this RPC's sink.
    fn sink_reply(&mut self, hdr: HeaderRepr, body: &[u8]) {
        let Some(d) = body
            .get(body.len().saturating_sub(4)..)
            .filter(|d| d.len() == 4)
        else {
            self.ep.dead = true;
            return;
        };
        let written = u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize;
        let Some((mr, len)) = self.sinks.get(&hdr.rpc_id) else {
            self.ep.dead = true;
            return;
        };
        if hdr.bulk_len != 4 || written > *len {
            warn!("engine claims more bytes written than the sink holds");
            self.ep.dead = true;
            return;
        }
        bump(&self.counters.sink_writes);
        let body = body_from_mr(args_of(body, 4), mr, written);
        let hdr = HeaderRepr {
            body_len: body.len() as u32,
            bulk_len: written as u32,
            ..hdr
        };
        self.deliver(hdr, body);
    }

    /// A whole reply (TCP form) for the core; the RPC's buffers go back to
    /// the pool.
    fn deliver(&mut self, hdr: HeaderRepr, body: Vec<u8>) {
        self.requests = self.requests.saturating_sub(1);
        if let Some(mr) = self.req_bulk.remove(&hdr.rpc_id) {
            self.pool.give(mr);
        }
        if let Some((mr, len)) = self.sinks.remove(&hdr.rpc_id) {
            if self.sink_cap.is_some() {
                let mut c = [0u8; CANARY];
                if !mr.read(len, &mut c) || c.iter().any(|&b| b != CANARY_BYTE) {
                    bump(&self.counters.sink_overruns);
                }
            }
            self.pool.give(mr);
        }
        self.core.handle_frame(hdr, body);
    }
}

impl Drop for RdmaClient {
    fn drop(&mut self) {
        self.counters.conns.store(0, Ordering::Relaxed);
    }
}

/// Where replies for RDMA connections go (the RDMA thread's queue).
pub type RdmaReplies = Sender<(ConnId, Vec<u8>)>;

/// A request whose bulk the engine is READing.
struct SrvRead {
    hdr: HeaderRepr,
    args: Vec<u8>,
    mr: Mr,
    len: usize,
}

struct SrvConn {
    ep: Ep,
    io: ServerConn,
    pool: BufPool,
    /// Reply bulk exposed for the client to READ, by RPC id (until release).
    reply_bulk: HashMap<u64, Mr>,
    /// READs of request bulk in flight, by work request id.
    reads: HashMap<u64, SrvRead>,
    /// WRITE sources in flight, by work request id.
    writes: HashMap<u64, Mr>,
    /// Sinks of fetches being served, by RPC id: (addr, rkey, len).
    /// (address, rkey, length, open: a larger reply is exposed for READ).
    sinks: HashMap<u64, (u64, u32, u32, bool)>,
    queued: VecDeque<Vec<u8>>,
}

impl SrvConn {
    /// A pool buffer of at least `need` bytes; before growing the pool,
    /// takes back the sources of WRITEs that completed meanwhile.
    fn take(&mut self, need: usize) -> Result<Mr, RdmaError> {
        if !self.pool.has(need) && !self.writes.is_empty() {
            self.ep.reap_sends();
            let (pool, writes) = (&mut self.pool, &mut self.writes);
            self.ep.early.retain(|&(wr, _)| {
                if wr & KIND_MASK != KIND_WRITE {
                    return true;
                }
                if let Some(mr) = writes.remove(&(wr & !KIND_MASK)) {
                    pool.give(mr);
                }
                false
            });
        }
        self.pool.take(need)
    }
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
    /// `limit` bounds the connected clients (shared with the TCP server): past it
    /// a connection request is rejected and counted.
    pub fn start(
        listen: SocketAddr,
        dispatch: impl Dispatch,
        rx: Receiver<(ConnId, Vec<u8>)>,
        limit: Arc<super::limit::ClientLimit>,
    ) -> Result<RdmaServer, RdmaError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = channel();
        let s2 = stop.clone();
        let counters = Arc::new(Counters::default());
        let c2 = counters.clone();
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
                        server_loop(dev, l, dispatch, rx, s2, c2, limit);
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
        SERVERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((listen, counters));
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
            SERVERS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(a, _)| *a != self.addr);
        }
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Hands one request (TCP form: arguments + bulk) to the dispatch, with the
/// checks [`ServerConn::poll_incoming`] makes on the TCP path.
fn serve(
    dispatch: &mut impl Dispatch,
    cid: ConnId,
    c: &mut SrvConn,
    hdr: HeaderRepr,
    body: Vec<u8>,
) {
    if hdr.response {
        c.io.rejected += 1;
        c.io.reply_error(&hdr, Status::Proto);
        return;
    }
    dispatch.request(cid, hdr, body, &mut c.io);
}

/// Time without work before the server loop naps 1 ms. (It was a count of
/// 20 000 polls with 50 µs naps, meant as about 1 s; on a loaded machine a
/// nap lasts several times longer, and an idle RDMA connection kept the
/// poller waking every ~50 µs for many seconds: 8 % of the samples of an
/// ior-hard read profile over TCP went to it.)
const IDLE_DEEP: Duration = Duration::from_secs(1);

fn server_loop(
    _dev: CmDevice,
    listener: CmId,
    mut dispatch: impl Dispatch,
    rx: Receiver<(ConnId, Vec<u8>)>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    limit: Arc<super::limit::ClientLimit>,
) {
    let mut conns: HashMap<ConnId, SrvConn> = HashMap::new();
    let mut next: ConnId = RDMA_CONN_BIT | 1;
    let mut next_wr = 1u64;
    let mut idle = 0u32;
    let mut last_work = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut work = 0usize;
        // new connections (a short wait doubles as the idle nap)
        // (no connection, or ~1 s without work: 1 ms naps, so an idle engine's
        // RDMA poller does not take a tenth of a core from its TCP clients; the
        // first request after such a pause waits up to 1 ms)
        let wait = if conns.is_empty() || (idle > 64 && last_work.elapsed() > IDLE_DEEP) {
            Duration::from_millis(1)
        } else if idle > 64 {
            Duration::from_micros(50)
        } else {
            Duration::ZERO
        };
        if let Ok((mut id, _ev)) = listener.get_request(Some(wait)) {
            if !limit.try_admit() {
                let n = limit.refused();
                if n.is_power_of_two() {
                    warn!(
                        max = limit.max(),
                        refused = n,
                        "object engine: RDMA client refused (max_clients reached)"
                    );
                }
                let _ = id.reject(&[]);
                continue;
            }
            let r = match id.create_qp_default(cap()) {
                Ok(_) => Ep::new(id).and_then(|ep| {
                    let pool = BufPool::new(
                        ep.pd(),
                        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                        POOL_INIT,
                        counters.clone(),
                    )?;
                    Ok((ep, pool))
                }),
                Err(e) => Err(e.into()),
            };
            match r {
                Ok((ep, pool)) => match ep.id.accept(&ConnParam::default(), T) {
                    Ok(_) => {
                        debug!(conn = next, "RDMA client connected");
                        counters.conns.fetch_add(1, Ordering::Relaxed);
                        conns.insert(
                            next,
                            SrvConn {
                                ep,
                                io: ServerConn::new(),
                                pool,
                                reply_bulk: HashMap::new(),
                                reads: HashMap::new(),
                                writes: HashMap::new(),
                                sinks: HashMap::new(),
                                queued: VecDeque::new(),
                            },
                        );
                        next += 1;
                        work += 1;
                    }
                    Err(e) => {
                        limit.release();
                        warn!(error = %e, "RDMA accept failed")
                    }
                },
                Err(e) => {
                    limit.release();
                    warn!(error = %e, "RDMA connection setup failed")
                }
            }
        }
        // replies from the targets and the management thread
        while let Ok((conn, frame)) = rx.try_recv() {
            work += 1;
            if let Some(c) = conns.get_mut(&conn) {
                queue_reply(c, &frame, &mut next_wr, &counters);
            }
        }
        for (cid, c) in conns.iter_mut() {
            let (k, msgs, done) = c.ep.poll_frames();
            work += k;
            for (hdr, flags, body) in msgs {
                if flags & FLAG_RELEASE != 0 {
                    if let Some(mr) = c.reply_bulk.remove(&hdr.rpc_id) {
                        c.pool.give(mr);
                    }
                } else if flags & FLAG_SINK != 0 {
                    let d = descriptor(&body);
                    match d {
                        Some(d)
                            if hdr.bulk_len as usize == DESC_LEN && flags & FLAG_RDMA_BULK == 0 =>
                        {
                            let (a, k, l) = d;
                            c.sinks
                                .insert(hdr.rpc_id, (a, k, l, flags & FLAG_SINK_OPEN != 0));
                            let mut body = body;
                            body.truncate(body.len() - DESC_LEN);
                            let hdr = HeaderRepr {
                                body_len: body.len() as u32,
                                bulk_len: 0,
                                ..hdr
                            };
                            serve(&mut dispatch, *cid, c, hdr, body);
                        }
                        _ => c.io.reply_error(&hdr, Status::Proto),
                    }
                } else if flags & FLAG_RDMA_BULK != 0 {
                    let Some((addr, rkey, blen)) = descriptor(&body) else {
                        c.io.reply_error(&hdr, Status::Proto);
                        continue;
                    };
                    if hdr.bulk_len as usize != DESC_LEN {
                        c.io.reply_error(&hdr, Status::Proto);
                        continue;
                    }
                    if blen as usize > super::MAX_BODY {
                        c.io.reply_error(&hdr, Status::RecTooBig);
                        continue;
                    }
                    let wr = next_wr;
                    next_wr += 1;
                    let r = c.take(blen as usize).and_then(|mr| {
                        match c.ep.id.post_read(KIND_READ | wr, &mr, 0, blen, addr, rkey) {
                            Ok(()) => Ok(mr),
                            Err(e) => {
                                c.pool.give(mr);
                                Err(e.into())
                            }
                        }
                    });
                    match r {
                        Ok(mr) => {
                            c.reads.insert(
                                wr,
                                SrvRead {
                                    hdr,
                                    args: args_of(&body, hdr.bulk_len).to_vec(),
                                    mr,
                                    len: blen as usize,
                                },
                            );
                        }
                        Err(_) => c.io.reply_error(&hdr, Status::Io),
                    }
                } else {
                    serve(&mut dispatch, *cid, c, hdr, body);
                }
            }
            for (wr, ok) in done {
                if wr & KIND_MASK == KIND_WRITE {
                    // the WRITE's data is out: its source goes back
                    if let Some(mr) = c.writes.remove(&(wr & !KIND_MASK)) {
                        c.pool.give(mr);
                    }
                    continue;
                }
                let Some(r) = c.reads.remove(&(wr & !KIND_MASK)) else {
                    continue;
                };
                if !ok {
                    // a descriptor outside the client's registered memory: the
                    // READ failed, which breaks the RC connection (IBTA: remote
                    // access error); only this client is affected
                    c.pool.give(r.mr);
                    continue;
                }
                bump(&counters.bulk_reads);
                let body = body_from_mr(&r.args, &r.mr, r.len);
                c.pool.give(r.mr);
                let hdr = HeaderRepr {
                    body_len: body.len() as u32,
                    bulk_len: r.len as u32,
                    ..r.hdr
                };
                serve(&mut dispatch, *cid, c, hdr, body);
            }
            // inline replies (errors, ping) written by the core
            let tx = c.io.transmit().to_vec();
            c.io.transmitted(tx.len());
            let mut at = 0;
            while let Some((_, len)) = frame_at(&tx[at..]) {
                queue_reply(c, &tx[at..at + len], &mut next_wr, &counters);
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
        dispatch.flush();
        let gone: Vec<ConnId> = conns
            .iter()
            .filter(|(_, c)| c.ep.dead || c.io.is_closing())
            .map(|(id, _)| *id)
            .collect();
        for cid in gone {
            if let Some(c) = conns.remove(&cid) {
                debug!(conn = cid, "RDMA client gone");
                let _ = c.ep.id.disconnect();
                dispatch.closed(cid);
                // counted gone once its pool is deregistered
                drop(c);
                counters.conns.fetch_sub(1, Ordering::Relaxed);
                limit.release();
            }
        }
        if work > 0 {
            idle = 0;
            last_work = Instant::now();
        } else {
            idle = idle.saturating_add(1);
        }
    }
    for (cid, c) in conns.drain() {
        let _ = c.ep.id.disconnect();
        dispatch.closed(cid);
        drop(c);
        counters.conns.fetch_sub(1, Ordering::Relaxed);
        limit.release();
    }
}

/// Queues a reply frame: inline when it fits a slot; else its bulk is
/// WRITten into the request's sink (then the reply SENT), or exposed in a
/// pool buffer for the client to READ when the request had no sink.
fn queue_reply(c: &mut SrvConn, frame: &[u8], next_wr: &mut u64, counters: &Counters) {
    let Some((hdr, len)) = frame_at(frame) else {
        return;
    };
    let sink = c.sinks.remove(&hdr.rpc_id);
    if len <= SLOT {
        c.queued.push_back(frame[..len].to_vec());
        return;
    }
    let body = &frame[HEADER_LEN..len];
    let bulk = &body[body.len() - hdr.bulk_len as usize..];
    let args = args_of(body, hdr.bulk_len);
    // an open sink too small for the reply: exposed for READ, as without one
    let sink = sink.filter(|&(_, _, slen, open)| !(open && bulk.len() > slen as usize));
    if let Some((addr, rkey, slen, _)) = sink {
        if bulk.len() > slen as usize {
            bump(&counters.sink_too_small);
            let mut e = Vec::new();
            encode_reply(
                &mut e,
                hdr.rpc_id,
                hdr.opcode,
                Status::RecTooBig,
                &Reply::Empty,
                &[],
            );
            c.queued.push_back(e);
            return;
        }
        let wr = *next_wr;
        *next_wr += 1;
        let r = c.take(bulk.len()).and_then(|mr| {
            mr.write(0, bulk);
            match c
                .ep
                .id
                .post_write(KIND_WRITE | wr, &mr, 0, bulk.len() as u32, addr, rkey)
            {
                Ok(()) => Ok(mr),
                Err(e) => {
                    c.pool.give(mr);
                    Err(e.into())
                }
            }
        });
        match r {
            Ok(mr) => {
                bump(&counters.sink_writes);
                c.writes.insert(wr, mr);
                // posted after the WRITE on the same QP: RC delivers the data
                // before the client sees this reply
                let n = (bulk.len() as u32).to_le_bytes();
                c.queued.push_back(with_tail(&hdr, args, &n, FLAG_SINK));
            }
            Err(e) => {
                warn!(error = %e, "posting a reply WRITE failed");
                c.ep.dead = true;
            }
        }
        return;
    }
    match c.take(bulk.len()) {
        Ok(mr) => {
            mr.write(0, bulk);
            let d = desc_bytes(mr.addr(), mr.rkey(), bulk.len() as u32);
            c.queued
                .push_back(with_tail(&hdr, args, &d, FLAG_RDMA_BULK));
            if let Some(old) = c.reply_bulk.insert(hdr.rpc_id, mr) {
                c.pool.give(old);
            }
        }
        Err(e) => {
            warn!(error = %e, "registering reply bulk failed");
            c.ep.dead = true;
        }
    }
}
