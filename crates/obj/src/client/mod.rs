//! The Rust client library (libdaos's role): pool connect, containers,
//! objects, snapshots, and the KV ([`kv`]) and array ([`array`])
//! conveniences.
//!
//! Every call takes an optional TSE [`Event`] (DAOS's convention, through
//! [`tse::call`]): without one it blocks until the engine answered; with one
//! it returns as soon as the operation is launched and the result lands in
//! the event (poll the client's EQ with [`Client::poll`] or test the event).
//! Either way the call returns a [`Pending`] slot holding the operation's
//! output: [`Pending::get`] takes it once the operation completed.
//! Polling the EQ drives the RPC transport (the EQ's poller sends, receives,
//! and times out RPCs), so one loop drives tasks, network and completions.
//!
//! A `Client` is single-threaded (like a DAOS EQ); open one per thread.

pub mod array;
pub mod dtx;
pub mod kv;
pub mod obj;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use tse::{
    call, CallError, Event, EventQueue, Poller, Scheduler, TaskError, TaskId, TaskResult, Wait,
};

use crate::rpc::core::ClientCore;
use crate::rpc::msg::{ContInfo, NameRef, PoolInfo, Reply, Request};
use crate::rpc::rdma::RdmaClient;
use crate::rpc::tcp::TcpClient;
use crate::rpc::{RawReply, RpcError, Status, WireError};
use crate::types::{Epoch, OidError, Uuid};

pub use array::Array;
pub use kv::Kv;
pub use obj::{FetchReply, ObjHandle, QueryKeyOut};

/// Default deadline of one RPC.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest value (all iods of one update or fetch together) one RPC moves.
pub const MAX_IO_BYTES: u64 = 16 * 1024 * 1024;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No engine answers at that address.
    #[error("engine unreachable at {addr}: {source}")]
    Unreachable {
        addr: String,
        source: std::io::Error,
    },
    /// The engine refused the operation.
    #[error("{0}")]
    Engine(Status),
    /// No reply in time.
    #[error("request timed out")]
    TimedOut,
    /// The operation was aborted.
    #[error("operation cancelled")]
    Cancelled,
    /// The connection to the engine broke.
    #[error("connection to the engine lost")]
    Disconnected,
    /// The engine's reply could not be parsed.
    #[error("malformed reply from the engine: {0}")]
    BadReply(WireError),
    /// A bad object ID or class.
    #[error(transparent)]
    Oid(#[from] OidError),
    /// A value bigger than one RPC may carry.
    #[error("value too large: {size} bytes (limit {limit})")]
    ValueTooLarge { size: u64, limit: u64 },
    /// The caller's buffers cannot hold what was fetched.
    #[error("buffer too small: {need} bytes needed, {have} given")]
    BufferTooSmall { need: u64, have: u64 },
    /// A caller mistake caught before sending.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Misuse of the event queue (event busy, wrong EQ, ...).
    #[error("event queue: {0}")]
    Tse(#[from] tse::Error),
    /// [`Pending::get`] before the operation completed.
    #[error("operation still in flight")]
    NotDone,
    /// The engine refused: its pool map (`version`) is newer than the one
    /// the request carried ([`Client::set_map_version`]); refresh and retry.
    #[error("stale pool map: the engine has map version {version}")]
    StaleMap { version: u32 },
}

impl Error {
    /// The engine status behind this error, if any.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Engine(s) => Some(*s),
            Error::StaleMap { .. } => Some(Status::StaleMap),
            _ => None,
        }
    }

    /// The event/task result code of this error (DAOS: the negative `DER_*`).
    pub fn task_error(&self) -> TaskError {
        match self {
            Error::Engine(s) => TaskError::Code(s.code()),
            Error::TimedOut => TaskError::TimedOut,
            Error::Cancelled => TaskError::Cancelled,
            Error::Unreachable { .. } | Error::Disconnected => TaskError::Code(-1006),
            Error::BadReply(_) => TaskError::Code(Status::Proto.code()),
            Error::StaleMap { .. } => TaskError::Code(Status::StaleMap.code()),
            Error::ValueTooLarge { .. } => TaskError::Code(Status::RecTooBig.code()),
            Error::BufferTooSmall { .. } => TaskError::Code(Status::Trunc.code()),
            Error::Oid(_) | Error::Invalid(_) | Error::Tse(_) | Error::NotDone => {
                TaskError::Code(Status::Invalid.code())
            }
        }
    }
}

impl From<RpcError> for Error {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Status(s) => Error::Engine(s),
            RpcError::TimedOut => Error::TimedOut,
            RpcError::Cancelled => Error::Cancelled,
            RpcError::Disconnected => Error::Disconnected,
            RpcError::BadReply(w) => Error::BadReply(w),
            RpcError::StaleMap { version } => Error::StaleMap { version },
        }
    }
}

impl From<TaskError> for Error {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Cancelled => Error::Cancelled,
            TaskError::TimedOut => Error::TimedOut,
            TaskError::Code(c) => Error::Engine(Status::from_code(c)),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The output slot of one operation.
pub struct Pending<T>(Rc<RefCell<Option<Result<T>>>>);

impl<T> Pending<T> {
    fn new() -> Self {
        Pending(Rc::new(RefCell::new(None)))
    }
    fn slot(&self) -> Slot<T> {
        self.0.clone()
    }
    /// Whether the operation completed (its output is waiting).
    pub fn is_done(&self) -> bool {
        self.0.borrow().is_some()
    }
    /// The operation's output; [`Error::NotDone`] while it is in flight.
    pub fn get(self) -> Result<T> {
        self.0.borrow_mut().take().unwrap_or(Err(Error::NotDone))
    }
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending(done: {})", self.is_done())
    }
}

type Slot<T> = Rc<RefCell<Option<Result<T>>>>;
type Callback = Box<dyn FnOnce(&mut Scheduler, std::result::Result<RawReply, RpcError>)>;

/// The transport under a client: the same RPC core over TCP or RDMA.
enum Link {
    Tcp(Box<TcpClient>),
    Rdma(Box<RdmaClient>),
}

impl Link {
    fn core(&mut self) -> &mut ClientCore {
        match self {
            Link::Tcp(t) => &mut t.core,
            Link::Rdma(r) => &mut r.core,
        }
    }
    fn progress(&mut self, wait: Duration) {
        match self {
            Link::Tcp(t) => t.progress(wait),
            Link::Rdma(r) => r.progress(wait),
        }
    }
}

struct Net {
    link: Link,
    /// Run to completion: one connection per engine target, to the target's
    /// own listener; object I/O of target `i` (by [`route`]) goes over
    /// `targets[i]`. Empty: everything over `link` (RDMA, an engine without
    /// target endpoints, `DPUSTACK_OBJ_RTC=0`).
    targets: Vec<TcpClient>,
    /// The engine's targets (from its answer to the connect's ping): what a
    /// striped object's dkeys spread over, and how many targets a dkey-less
    /// operation on one is sent to.
    stripes: usize,
    /// Callbacks by (connection: 0 = `link`, `i + 1` = `targets[i]`; RPC id).
    pending: HashMap<(usize, u64), Callback>,
    timeout: Duration,
    /// poll(2) scratch for `targets`.
    fds: Vec<libc::pollfd>,
}

impl Net {
    fn progress(&mut self, wait: Duration) {
        match &mut self.link {
            Link::Tcp(main) if !self.targets.is_empty() => {
                crate::rpc::tcp::progress_all(main, &mut self.targets, &mut self.fds, wait)
            }
            link => link.progress(wait),
        }
    }

    /// The connection `req` goes over (see `pending`).
    fn route(&self, req: &Request) -> usize {
        if self.targets.is_empty() {
            return 0;
        }
        let n = self.targets.len();
        match req {
            Request::ObjListObj { shard, .. } if (*shard as usize) < n => *shard as usize + 1,
            // a stripe out of range goes to the engine, which refuses it
            r => match r.obj_target() {
                Some(t) if r.opcode().is_object_io() => {
                    crate::rpc::msg::object_target(t.oid, r.routing_dkey(), t.stripe, n)
                        .map_or(0, |i| i + 1)
                }
                _ => 0,
            },
        }
    }

    fn core(&mut self, conn: usize) -> &mut ClientCore {
        match conn {
            0 => self.link.core(),
            i => &mut self.targets[i - 1].core,
        }
    }
}

/// The EQ's poller: progresses the connection and completes the tasks of
/// answered RPCs.
struct NetPoller(Rc<RefCell<Net>>);

impl Poller for NetPoller {
    fn poll(&mut self, sched: &mut Scheduler, timeout: Duration) -> usize {
        let mut done = Vec::new();
        {
            let mut n = self.0.borrow_mut();
            n.progress(timeout);
            for conn in 0..=n.targets.len() {
                while let Some(c) = n.core(conn).poll_completion() {
                    if let Some(cb) = n.pending.remove(&(conn, c.rpc_id)) {
                        done.push((cb, c.result));
                    }
                }
            }
        }
        // callbacks run without the connection borrowed: they may start RPCs
        let k = done.len();
        for (cb, r) in done {
            cb(sched, r);
        }
        k
    }
}

/// A pool connection (`daos_handle_t` of a pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolHandle {
    pub poh: u64,
    pub uuid: Uuid,
}

/// An open container (`daos_handle_t` of a container).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContHandle {
    pub coh: u64,
    pub uuid: Uuid,
}

/// One connection to an engine, with its event queue.
pub struct Client {
    eq: RefCell<EventQueue>,
    net: Rc<RefCell<Net>>,
    addr: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("addr", &self.addr).finish()
    }
}

impl Client {
    /// Connects to the engine at `addr` (`host:port`) and checks it answers.
    pub fn connect(addr: &str) -> Result<Client> {
        Self::connect_with(addr, DEFAULT_TIMEOUT)
    }

    /// [`Client::connect`] with a per-RPC deadline.
    pub fn connect_with(addr: &str, timeout: Duration) -> Result<Client> {
        Self::connect_opts(addr, timeout, crate::rpc::rtc_enabled())
    }

    /// [`Client::connect_with`], choosing the path of object I/O: with `rtc`
    /// (the default; `DPUSTACK_OBJ_RTC=0` turns it off) the client asks the
    /// engine for its targets' endpoints and opens one connection to each,
    /// so a target's object I/O goes straight to the target's thread; an
    /// engine without them (or `rtc` false) gets everything over the one
    /// connection, through its network thread.
    pub fn connect_opts(addr: &str, timeout: Duration, rtc: bool) -> Result<Client> {
        let connect_timeout = timeout.min(Duration::from_secs(5));
        let tcp =
            TcpClient::connect(addr, connect_timeout).map_err(|source| Error::Unreachable {
                addr: addr.to_string(),
                source,
            })?;
        let ip = tcp.peer().ip();
        let c = Self::over(Link::Tcp(Box::new(tcp)), addr, timeout)?;
        if rtc {
            c.open_targets(ip, connect_timeout)?;
        }
        Ok(c)
    }

    /// Run to completion: one connection per target of the engine.
    fn open_targets(&self, ip: std::net::IpAddr, connect_timeout: Duration) -> Result<()> {
        let ports = match self
            .rpc(None, Request::TargetPorts, Vec::new(), |r| match r.reply {
                Reply::Ports(p) => Ok(p),
                _ => Err(unexpected()),
            })?
            .get()
        {
            Ok(p) => p,
            // an engine without target endpoints (older, or RTC off)
            Err(Error::Engine(Status::NoSys)) => return Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "asking for the engine's target endpoints failed: object I/O goes through its network thread");
                return Ok(());
            }
        };
        let mut targets = Vec::with_capacity(ports.len());
        for p in ports {
            let a = std::net::SocketAddr::new(ip, p);
            match TcpClient::connect(a, connect_timeout) {
                Ok(t) => targets.push(t),
                Err(e) => {
                    // the main connection still serves everything
                    tracing::warn!(addr = %a, error = %e, "target endpoint unreachable: object I/O goes through the engine's network thread");
                    return Ok(());
                }
            }
        }
        let mut n = self.net.borrow_mut();
        let mv = n.link.core().map_version();
        for t in &mut targets {
            t.core.set_map_version(mv);
        }
        n.targets = targets;
        Ok(())
    }

    /// Connections to the engine's targets (run to completion; 0: object
    /// I/O goes over the main connection).
    pub fn target_connections(&self) -> usize {
        self.net.borrow().targets.len()
    }

    /// Connects over RDMA (RC QP through the RDMA CM; a soft RoCE device is
    /// opened on `local_ip`, which needs UDP 4791 of that address) to the
    /// engine's RDMA listener at `server`.
    pub fn connect_rdma(server: std::net::SocketAddr, local_ip: &str) -> Result<Client> {
        let r = RdmaClient::connect(server, local_ip).map_err(|e| Error::Unreachable {
            addr: format!("rdma://{server}"),
            source: std::io::Error::other(e.to_string()),
        })?;
        Self::over(
            Link::Rdma(Box::new(r)),
            &format!("rdma://{server}"),
            DEFAULT_TIMEOUT,
        )
    }

    fn over(link: Link, addr: &str, timeout: Duration) -> Result<Client> {
        let net = Rc::new(RefCell::new(Net {
            link,
            targets: Vec::new(),
            stripes: 1,
            pending: HashMap::new(),
            timeout,
            fds: Vec::new(),
        }));
        let eq = EventQueue::with_poller(Scheduler::new(), Box::new(NetPoller(net.clone())));
        let c = Client {
            eq: RefCell::new(eq),
            net,
            addr: addr.to_string(),
        };
        let stripes = c.ping_targets(None)?.get().map_err(|e| match e {
            Error::Disconnected | Error::BadReply(_) | Error::TimedOut => Error::Unreachable {
                addr: addr.to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("no object engine answered ({e})"),
                ),
            },
            e => e,
        })?;
        c.net.borrow_mut().stripes = stripes.max(1);
        Ok(c)
    }

    /// The engine's targets, as its ping answered: a striped object's dkeys
    /// spread over them.
    pub fn engine_targets(&self) -> usize {
        self.net.borrow().stripes
    }

    /// The engine's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Changes the deadline of RPCs started from now on.
    pub fn set_timeout(&self, t: Duration) {
        self.net.borrow_mut().timeout = t;
    }

    /// The RDMA transport's counters (buffer pool, sinks, READs); `None`
    /// over TCP.
    pub fn rdma_stats(&self) -> Option<crate::rpc::rdma::RdmaStats> {
        match &self.net.borrow().link {
            Link::Rdma(r) => Some(r.stats()),
            Link::Tcp(_) => None,
        }
    }

    /// RPCs in flight.
    pub fn in_flight(&self) -> usize {
        self.net.borrow().pending.len()
    }

    // ---- the event queue -----------------------------------------------------

    /// A new event on this client's EQ (`daos_event_init`).
    pub fn event(&self, parent: Option<Event>) -> Result<Event> {
        Ok(self.eq.borrow_mut().event_init(parent)?)
    }

    /// Finalises an event (`daos_event_fini`).
    pub fn event_fini(&self, ev: Event) -> Result<()> {
        Ok(self.eq.borrow_mut().event_fini(ev)?)
    }

    /// Polls the EQ (`daos_eq_poll`): completed events go into `out`.
    pub fn poll(
        &self,
        wait: Wait,
        max: usize,
        out: &mut Vec<(Event, TaskResult)>,
    ) -> Result<usize> {
        Ok(self.eq.borrow_mut().poll(wait, max, out)?)
    }

    /// Tests one event (`daos_event_test`).
    pub fn test(&self, ev: Event, wait: Wait) -> Result<Option<TaskResult>> {
        Ok(self.eq.borrow_mut().test(ev, wait)?)
    }

    /// Aborts an event's operation (`daos_event_abort`); its RPC's late reply
    /// is ignored.
    pub fn abort(&self, ev: Event) -> Result<()> {
        Ok(self.eq.borrow_mut().abort(ev)?)
    }

    /// The EQ itself (parent events, barriers, callbacks).
    pub fn eq(&self) -> std::cell::RefMut<'_, EventQueue> {
        self.eq.borrow_mut()
    }

    // ---- plumbing --------------------------------------------------------------

    /// Runs `op` (which creates the operation's task) under the NULL-event
    /// convention.
    fn launch<T: 'static>(
        &self,
        ev: Option<&Event>,
        p: Pending<T>,
        op: impl FnOnce(&mut Scheduler) -> TaskId,
    ) -> Result<Pending<T>> {
        let slot = p.slot();
        let r = {
            let mut eq = self.eq.borrow_mut();
            call(&mut eq, ev, |s| {
                let task = op(s);
                // an operation that ends without its output (aborted,
                // cancelled with the EQ) leaves the reason in the slot
                s.register_comp_cb(task, move |_, _, r| {
                    if let Err(e) = r {
                        let mut g = slot.borrow_mut();
                        if g.is_none() {
                            *g = Some(Err(e.into()));
                        }
                    }
                    r
                })?;
                Ok(task)
            })
        };
        match r {
            Ok(()) => Ok(p),
            Err(CallError::Op(te)) => {
                let mut s = p.0.borrow_mut();
                if s.is_none() {
                    *s = Some(Err(te.into()));
                }
                drop(s);
                Ok(p)
            }
            Err(CallError::Tse(e)) => Err(Error::Tse(e)),
        }
    }

    /// One RPC as an operation: its task sends `req` (with `bulk` as the bulk
    /// region) and completes when the reply is decoded by `decode`.
    fn rpc<T: 'static>(
        &self,
        ev: Option<&Event>,
        req: Request,
        bulk: Vec<Vec<u8>>,
        decode: impl FnOnce(RawReply) -> Result<T> + 'static,
    ) -> Result<Pending<T>> {
        let p = Pending::new();
        let slot = p.slot();
        let net = self.net.clone();
        self.launch(ev, p, move |s| rpc_task(s, net, req, bulk, decode, slot))
    }

    /// An operation made of several RPCs: `start` runs in the operation's
    /// task body with the connection and a [`Done`] to call when finished
    /// (from the last RPC's continuation).
    fn custom<T: 'static>(
        &self,
        ev: Option<&Event>,
        start: impl FnOnce(&Rc<RefCell<Net>>, Done<T>) + 'static,
    ) -> Result<Pending<T>> {
        let p = Pending::new();
        let slot = p.slot();
        let net = self.net.clone();
        let mut once = Some(start);
        self.launch(ev, p, move |s| {
            s.create(move |_s, id| {
                let Some(start) = once.take() else { return };
                start(
                    &net,
                    Done {
                        id,
                        slot: slot.clone(),
                    },
                );
            })
        })
    }

    /// A client-side operation that completes at once (no RPC).
    fn local<T: 'static>(
        &self,
        ev: Option<&Event>,
        f: impl FnOnce() -> Result<T> + 'static,
    ) -> Result<Pending<T>> {
        let p = Pending::new();
        let slot = p.slot();
        let mut once = Some(f);
        self.launch(ev, p, move |s| {
            s.create(move |s, id| {
                let Some(f) = once.take() else { return };
                let out = f();
                finish(s, id, &slot, out);
            })
        })
    }

    // ---- pools -----------------------------------------------------------------

    /// Checks the engine answers (an RPC round trip).
    /// Sets the pool-map version every object I/O request started from now
    /// on carries (`None`: none, the engine does not check). An engine whose
    /// map is newer refuses with [`Error::StaleMap`].
    pub fn set_map_version(&self, v: Option<u32>) {
        let mut n = self.net.borrow_mut();
        n.link.core().set_map_version(v);
        for t in &mut n.targets {
            t.core.set_map_version(v);
        }
    }

    pub fn ping(&self, ev: Option<&Event>) -> Result<Pending<()>> {
        self.rpc(ev, Request::Ping, Vec::new(), |_| Ok(()))
    }

    /// A ping that returns the engine's incarnation (`None`: the engine
    /// sends none). A different number from the same address is a
    /// restarted engine process.
    pub fn ping_incarnation(&self, ev: Option<&Event>) -> Result<Pending<Option<u64>>> {
        self.rpc(ev, Request::Ping, Vec::new(), |r| match r.reply {
            Reply::Pong { incarnation, .. } => Ok(Some(incarnation)),
            Reply::Empty => Ok(None),
            _ => Err(unexpected()),
        })
    }

    /// A ping that returns the engine's target count (1 if it sends none).
    fn ping_targets(&self, ev: Option<&Event>) -> Result<Pending<usize>> {
        self.rpc(ev, Request::Ping, Vec::new(), |r| match r.reply {
            Reply::Pong { targets, .. } => Ok(targets as usize),
            Reply::Empty => Ok(1),
            _ => Err(unexpected()),
        })
    }

    /// `dmg pool create`: a pool of `size` bytes over all targets.
    pub fn pool_create(
        &self,
        label: &str,
        size: u64,
        ev: Option<&Event>,
    ) -> Result<Pending<PoolInfo>> {
        check_label(label)?;
        let req = Request::PoolCreate {
            label: label.to_string(),
            size,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Pool(p) => Ok(p),
            _ => Err(unexpected()),
        })
    }

    /// `dmg pool list`.
    pub fn pool_list(&self, ev: Option<&Event>) -> Result<Pending<Vec<PoolInfo>>> {
        self.rpc(ev, Request::PoolList, Vec::new(), |r| match r.reply {
            Reply::Pools(p) => Ok(p),
            _ => Err(unexpected()),
        })
    }

    /// `daos_pool_query` (by label or UUID text).
    pub fn pool_query(&self, pool: &str, ev: Option<&Event>) -> Result<Pending<PoolInfo>> {
        let req = Request::PoolQuery {
            pool: name_ref(pool)?,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Pool(p) => Ok(p),
            _ => Err(unexpected()),
        })
    }

    /// `dmg pool destroy`; refused while connected unless `force`.
    pub fn pool_destroy(&self, pool: &str, force: bool, ev: Option<&Event>) -> Result<Pending<()>> {
        let req = Request::PoolDestroy {
            pool: name_ref(pool)?,
            force,
        };
        self.rpc(ev, req, Vec::new(), |_| Ok(()))
    }

    /// `daos_pool_connect` (by label or UUID text).
    pub fn pool_connect(&self, pool: &str, ev: Option<&Event>) -> Result<Pending<PoolHandle>> {
        let req = Request::PoolConnect {
            pool: name_ref(pool)?,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Handle { hdl, uuid } => Ok(PoolHandle {
                poh: hdl,
                uuid: Uuid::from_bytes(uuid),
            }),
            _ => Err(unexpected()),
        })
    }

    /// `daos_pool_disconnect`.
    pub fn pool_disconnect(&self, poh: &PoolHandle, ev: Option<&Event>) -> Result<Pending<()>> {
        self.rpc(
            ev,
            Request::PoolDisconnect { poh: poh.poh },
            Vec::new(),
            |_| Ok(()),
        )
    }

    // ---- containers --------------------------------------------------------------

    /// `daos_cont_create_with_label`, with properties.
    pub fn cont_create(
        &self,
        poh: &PoolHandle,
        label: &str,
        props: &[(&str, &str)],
        ev: Option<&Event>,
    ) -> Result<Pending<ContInfo>> {
        if !label.is_empty() {
            check_label(label)?;
        }
        let req = Request::ContCreate {
            poh: poh.poh,
            label: label.to_string(),
            props: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Cont(c) => Ok(c),
            _ => Err(unexpected()),
        })
    }

    /// `daos_cont_list`.
    pub fn cont_list(
        &self,
        poh: &PoolHandle,
        ev: Option<&Event>,
    ) -> Result<Pending<Vec<ContInfo>>> {
        self.rpc(
            ev,
            Request::ContList { poh: poh.poh },
            Vec::new(),
            |r| match r.reply {
                Reply::Conts(c) => Ok(c),
                _ => Err(unexpected()),
            },
        )
    }

    /// `daos_cont_destroy` (by label or UUID text); refused while open
    /// unless `force`.
    pub fn cont_destroy(
        &self,
        poh: &PoolHandle,
        cont: &str,
        force: bool,
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        let req = Request::ContDestroy {
            poh: poh.poh,
            cont: name_ref(cont)?,
            force,
        };
        self.rpc(ev, req, Vec::new(), |_| Ok(()))
    }

    /// `daos_cont_open` (by label or UUID text).
    pub fn cont_open(
        &self,
        poh: &PoolHandle,
        cont: &str,
        ev: Option<&Event>,
    ) -> Result<Pending<ContHandle>> {
        let req = Request::ContOpen {
            poh: poh.poh,
            cont: name_ref(cont)?,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Handle { hdl, uuid } => Ok(ContHandle {
                coh: hdl,
                uuid: Uuid::from_bytes(uuid),
            }),
            _ => Err(unexpected()),
        })
    }

    /// `daos_cont_close`.
    pub fn cont_close(&self, coh: &ContHandle, ev: Option<&Event>) -> Result<Pending<()>> {
        self.rpc(ev, Request::ContClose { coh: coh.coh }, Vec::new(), |_| {
            Ok(())
        })
    }

    /// `daos_cont_query`.
    pub fn cont_query(&self, coh: &ContHandle, ev: Option<&Event>) -> Result<Pending<ContInfo>> {
        self.rpc(
            ev,
            Request::ContQuery { coh: coh.coh },
            Vec::new(),
            |r| match r.reply {
                Reply::Cont(c) => Ok(c),
                _ => Err(unexpected()),
            },
        )
    }

    /// `daos_cont_create_snap`: the new snapshot's epoch.
    pub fn cont_create_snap(&self, coh: &ContHandle, ev: Option<&Event>) -> Result<Pending<Epoch>> {
        self.rpc(
            ev,
            Request::SnapCreate { coh: coh.coh },
            Vec::new(),
            |r| match r.reply {
                Reply::Epoch(e) => Ok(Epoch(e)),
                _ => Err(unexpected()),
            },
        )
    }

    /// `daos_cont_list_snap`, ascending.
    pub fn cont_list_snap(
        &self,
        coh: &ContHandle,
        ev: Option<&Event>,
    ) -> Result<Pending<Vec<Epoch>>> {
        self.rpc(
            ev,
            Request::SnapList { coh: coh.coh },
            Vec::new(),
            |r| match r.reply {
                Reply::Epochs(v) => Ok(v.into_iter().map(Epoch).collect()),
                _ => Err(unexpected()),
            },
        )
    }

    /// `daos_cont_destroy_snap`.
    pub fn cont_destroy_snap(
        &self,
        coh: &ContHandle,
        epoch: Epoch,
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        let req = Request::SnapDestroy {
            coh: coh.coh,
            epoch: epoch.0,
        };
        self.rpc(ev, req, Vec::new(), |_| Ok(()))
    }
}

/// The body of an RPC task: start the RPC; its reply completes the task.
fn rpc_task<T: 'static>(
    s: &mut Scheduler,
    net: Rc<RefCell<Net>>,
    req: Request,
    bulk: Vec<Vec<u8>>,
    decode: impl FnOnce(RawReply) -> Result<T> + 'static,
    slot: Slot<T>,
) -> TaskId {
    let mut once = Some((req, bulk, decode));
    s.create(move |_s, id| {
        let Some((req, bulk, decode)) = once.take() else {
            return;
        };
        let slot = slot.clone();
        send_rpc(&net, req, bulk, move |s, r| {
            let out = r.and_then(decode);
            finish(s, id, &slot, out);
        });
    })
}

/// Starts an RPC now; `k` runs with its outcome when the reply (or a
/// timeout, or a disconnect) comes, from the EQ's poller. Call it from a
/// task body or from another RPC's continuation (never while the connection
/// is borrowed).
fn send_rpc(
    net: &Rc<RefCell<Net>>,
    req: Request,
    bulk: Vec<Vec<u8>>,
    k: impl FnOnce(&mut Scheduler, Result<RawReply>) + 'static,
) {
    let mut n = net.borrow_mut();
    let parts: Vec<&[u8]> = bulk.iter().map(Vec::as_slice).collect();
    let timeout = n.timeout;
    let now = std::time::Instant::now();
    let conn = n.route(&req);
    let rpc_id = match (&mut n.link, conn) {
        (Link::Tcp(t), 0) => t.core.start(now, &req, &parts, Some(timeout)),
        (Link::Rdma(r), 0) => r.start(now, &req, &parts, Some(timeout)),
        (_, i) => n.targets[i - 1]
            .core
            .start(now, &req, &parts, Some(timeout)),
    };
    n.pending.insert(
        (conn, rpc_id),
        Box::new(move |s: &mut Scheduler, r| k(s, r.map_err(Error::from))),
    );
}

/// Finishes a multi-RPC operation (see [`Client::custom`]).
struct Done<T> {
    id: TaskId,
    slot: Slot<T>,
}

impl<T> Done<T> {
    fn finish(self, s: &mut Scheduler, out: Result<T>) {
        finish(s, self.id, &self.slot, out);
    }
}

/// Stores an operation's output and completes its task with the matching
/// result code.
fn finish<T>(s: &mut Scheduler, id: TaskId, slot: &Slot<T>, out: Result<T>) {
    let tr: TaskResult = match &out {
        Ok(_) => Ok(()),
        Err(e) => Err(e.task_error()),
    };
    *slot.borrow_mut() = Some(out);
    let _ = s.complete(id, tr);
}

fn unexpected() -> Error {
    Error::BadReply(WireError::BadValue {
        field: "reply shape",
        value: 0,
    })
}

fn check_label(label: &str) -> Result<()> {
    if label.is_empty() || label.len() > crate::rpc::msg::MAX_LABEL_LEN {
        return Err(Error::Invalid("labels are 1 to 127 bytes"));
    }
    if Uuid::parse_str(label).is_ok() {
        return Err(Error::Invalid("a label may not look like a UUID"));
    }
    Ok(())
}

/// A pool or container named by UUID text or by label.
pub fn name_ref(s: &str) -> Result<NameRef> {
    if s.is_empty() {
        return Err(Error::Invalid("empty pool/container name"));
    }
    Ok(match Uuid::parse_str(s) {
        Ok(u) => NameRef::Uuid(*u.as_bytes()),
        Err(_) => NameRef::Label(s.to_string()),
    })
}
