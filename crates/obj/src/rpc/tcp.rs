//! TCP drivers for the RPC cores: [`TcpClient`] (one connection, driven by
//! whoever polls it: the client's EQ) and [`TcpServer`] (the engine's
//! network thread: accepts clients, cuts frames, hands requests to a
//! [`Dispatch`], writes replies that other threads send back through a
//! [`ReplySender`]).
//!
//! The network thread sleeps in `poll(2)` on the listener, every client
//! socket and a wake-up pipe that [`ReplySender::send`] writes to, so a
//! reply from a target thread goes out at once and an idle engine costs no
//! CPU.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::core::{ClientCore, Incoming, ServerConn};
use super::header::HeaderRepr;

/// Bytes read per `read(2)`.
pub(crate) const READ_CHUNK: usize = 256 * 1024;
/// Above this many queued reply bytes a connection is not read from.
pub(crate) const TX_HIGH_WATER: usize = 32 * 1024 * 1024;

/// The result of `poll`/`ppoll`: ready fds; an interrupted call counts as
/// nothing ready.
fn poll_ret(r: libc::c_int) -> io::Result<usize> {
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

pub(crate) fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd for the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    poll_ret(r)
}

/// [`poll_fds`] with a timeout to the microsecond (`ppoll`): `poll`'s
/// milliseconds turn a wait under 1 ms into a spin. `Duration::MAX`: no bound.
pub(crate) fn poll_fds_precise(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts;
    let tsp = if timeout >= Duration::from_secs(1 << 30) {
        std::ptr::null()
    } else {
        ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        &ts as *const libc::timespec
    };
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd for the
    // call; `tsp` is null or points at `ts`, alive for the call; no sigmask.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    poll_ret(r)
}

/// One client connection over TCP.
#[derive(Debug)]
pub struct TcpClient {
    sock: TcpStream,
    pub core: ClientCore,
    peer: SocketAddr,
}

impl TcpClient {
    /// Connects (within `timeout`) to the first address `addr` resolves to.
    pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> io::Result<TcpClient> {
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "address resolves to nothing");
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(sock) => {
                    sock.set_nodelay(true)?;
                    sock.set_nonblocking(true)?;
                    return Ok(TcpClient {
                        sock,
                        core: ClientCore::new(),
                        peer: a,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends what is queued, waits up to `wait` (less if an RPC deadline is
    /// sooner) for replies, reads them, and times out expired RPCs. Drain
    /// [`ClientCore::poll_completion`] afterwards. I/O errors close the
    /// connection (every RPC in flight then fails with `Disconnected`).
    pub fn progress(&mut self, wait: Duration) {
        if self.core.is_closed() {
            return;
        }
        self.flush();
        let now = Instant::now();
        let mut wait = wait;
        if let Some(d) = self.core.poll_timeout() {
            wait = wait.min(d.saturating_duration_since(now));
        }
        if self.core.in_flight() == 0 && self.core.transmit().is_empty() {
            wait = Duration::ZERO;
        }
        let mut fd = [libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN
                | if self.core.transmit().is_empty() {
                    0
                } else {
                    libc::POLLOUT
                },
            revents: 0,
        }];
        if !wait.is_zero() {
            let _ = poll_fds(&mut fd, wait);
        }
        self.read_available();
        self.flush();
        self.core.handle_timeout(Instant::now());
    }

    fn flush(&mut self) {
        while !self.core.transmit().is_empty() {
            match self.sock.write(self.core.transmit()) {
                Ok(0) => {
                    self.core.handle_close();
                    return;
                }
                Ok(n) => self.core.transmitted(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(error = %e, "send to engine failed");
                    self.core.handle_close();
                    return;
                }
            }
        }
    }

    fn read_available(&mut self) {
        loop {
            let buf = self.core.recv_buf(READ_CHUNK);
            match self.sock.read(buf) {
                Ok(0) => {
                    self.core.received(READ_CHUNK, 0);
                    self.core.handle_close();
                    return;
                }
                Ok(n) => {
                    self.core.received(READ_CHUNK, n);
                    if n < READ_CHUNK {
                        return;
                    }
                }
                Err(e) => {
                    self.core.received(READ_CHUNK, 0);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return,
                        io::ErrorKind::Interrupted => {}
                        _ => {
                            debug!(error = %e, "receive from engine failed");
                            self.core.handle_close();
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// [`TcpClient::progress`] over several connections at once (a client's
/// main connection and its run-to-completion target connections): one
/// `poll(2)` over all of them, bounded by the earliest deadline of any; each
/// readable one is read, every one flushed and timed out. Closed ones are
/// skipped. `fds` is scratch kept by the caller (no allocation per call).
pub fn progress_all(
    main: &mut TcpClient,
    rest: &mut [TcpClient],
    fds: &mut Vec<libc::pollfd>,
    wait: Duration,
) {
    let now = Instant::now();
    let mut wait = wait;
    let mut busy = false;
    fds.clear();
    for c in std::iter::once(&mut *main).chain(rest.iter_mut()) {
        if c.core.is_closed() {
            fds.push(libc::pollfd {
                fd: -1,
                events: 0,
                revents: 0,
            });
            continue;
        }
        c.flush();
        if let Some(d) = c.core.poll_timeout() {
            wait = wait.min(d.saturating_duration_since(now));
        }
        busy |= c.core.in_flight() > 0 || !c.core.transmit().is_empty();
        fds.push(libc::pollfd {
            fd: c.sock.as_raw_fd(),
            events: libc::POLLIN
                | if c.core.transmit().is_empty() {
                    0
                } else {
                    libc::POLLOUT
                },
            revents: 0,
        });
    }
    if !busy {
        wait = Duration::ZERO;
    }
    let _ = poll_fds(fds, wait);
    let now = Instant::now();
    for (c, fd) in std::iter::once(&mut *main)
        .chain(rest.iter_mut())
        .zip(fds.iter())
    {
        if fd.fd < 0 {
            continue;
        }
        if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            c.read_available();
        }
        c.flush();
        c.core.handle_timeout(now);
    }
}

/// Identifies one client connection of a [`TcpServer`] (never reused).
pub type ConnId = u64;

/// What the engine does with requests arriving on the network thread.
pub trait Dispatch: Send + 'static {
    /// A whole request frame from `conn`. Answer at once through `conn_io`
    /// (errors, cheap requests) or hand it to another thread, which answers
    /// later through a [`ReplySender`].
    fn request(&mut self, conn: ConnId, hdr: HeaderRepr, body: Vec<u8>, conn_io: &mut ServerConn);
    /// `conn` is gone (closed by the client, or broken).
    fn closed(&mut self, conn: ConnId);
    /// The end of one round of the network thread's loop: hand on what
    /// `request` held back (so a round's requests cost one wake-up per
    /// receiving thread, not one each).
    fn flush(&mut self) {}
}

/// Sends reply frames to the network thread from any thread.
#[derive(Debug, Clone)]
pub struct ReplySender {
    /// (connection, frame or a reply's head, the reply's bulk segments)
    tx: Sender<(ConnId, Vec<u8>, Vec<Vec<u8>>)>,
    wake: Arc<UnixStream>,
    rdma: Option<Sender<(ConnId, Vec<u8>)>>,
}

impl ReplySender {
    /// Also route replies of RDMA connections (ids with
    /// [`super::RDMA_CONN_BIT`]) to `rdma`.
    pub fn with_rdma(mut self, rdma: Sender<(ConnId, Vec<u8>)>) -> Self {
        self.rdma = Some(rdma);
        self
    }

    /// Queues `frame` for `conn` (dropped if the connection is gone) and
    /// wakes the network thread.
    pub fn send(&self, conn: ConnId, frame: Vec<u8>) {
        if self.send_quiet(conn, frame) {
            self.wake();
        }
    }

    /// Queues `frame` for `conn` without waking the TCP network thread;
    /// true if a [`ReplySender::wake`] is owed (a batch of replies then costs
    /// one wake-up, not one each).
    pub fn send_quiet(&self, conn: ConnId, frame: Vec<u8>) -> bool {
        self.send_parts_quiet(conn, frame, Vec::new())
    }

    /// [`ReplySender::send_quiet`] for a reply in parts: `head` (from
    /// [`super::frame::encode_reply_head`]) and the bulk segments that follow
    /// it on the wire. TCP sends the segments from these buffers (`writev`,
    /// no copy into a frame); RDMA gets one frame.
    pub fn send_parts_quiet(&self, conn: ConnId, head: Vec<u8>, bulk: Vec<Vec<u8>>) -> bool {
        if conn & super::RDMA_CONN_BIT != 0 {
            if let Some(r) = &self.rdma {
                let mut frame = head;
                for b in &bulk {
                    frame.extend_from_slice(b);
                }
                let _ = r.send((conn, frame));
            }
            return false;
        }
        self.tx.send((conn, head, bulk)).is_ok()
    }

    /// Wakes the TCP network thread (a full pipe already means "wake up").
    pub fn wake(&self) {
        let _ = (&*self.wake).write(&[1]);
    }
}

/// One client connection of a server thread (the network thread's, or a
/// run-to-completion target's own).
pub(crate) struct Conn {
    pub(crate) sock: TcpStream,
    pub(crate) io: ServerConn,
    pub(crate) peer: SocketAddr,
    pub(crate) dead: bool,
}

/// The engine's network thread over TCP.
pub struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    wake: Arc<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl TcpServer {
    /// Binds `listen`. Returns the server (not started) and the reply sender
    /// other threads use; [`TcpServer::start`] runs the network thread.
    pub fn bind(listen: SocketAddr) -> io::Result<(TcpServerBuilder, ReplySender)> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        let (tx, rx) = channel();
        let wake = Arc::new(wake_tx);
        Ok((
            TcpServerBuilder {
                listener,
                limit: Arc::default(),
                wake_rx,
                rx,
                wake: wake.clone(),
            },
            ReplySender {
                tx,
                wake,
                rdma: None,
            },
        ))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the network thread and closes every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&*self.wake).write(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A bound, not yet running [`TcpServer`].
pub struct TcpServerBuilder {
    listener: TcpListener,
    limit: Arc<super::limit::ClientLimit>,
    wake_rx: UnixStream,
    rx: Receiver<(ConnId, Vec<u8>, Vec<Vec<u8>>)>,
    wake: Arc<UnixStream>,
}

impl TcpServerBuilder {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Bounds the connected clients by `limit` (shared with the RDMA server):
    /// past it a new connection is closed at accept and counted.
    pub fn with_limit(mut self, limit: Arc<super::limit::ClientLimit>) -> Self {
        self.limit = limit;
        self
    }

    /// Starts the network thread with `dispatch`.
    pub fn start(self, dispatch: impl Dispatch) -> io::Result<TcpServer> {
        let addr = self.listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let wake = self.wake.clone();
        info!(%addr, "object engine listening (TCP)");
        let thread = std::thread::Builder::new()
            .name("obj-net".into())
            .spawn(move || net_loop(self, dispatch, s2))?;
        Ok(TcpServer {
            addr,
            stop,
            wake,
            thread: Some(thread),
        })
    }
}

fn net_loop(b: TcpServerBuilder, mut dispatch: impl Dispatch, stop: Arc<AtomicBool>) {
    let TcpServerBuilder {
        listener,
        mut wake_rx,
        rx,
        limit,
        ..
    } = b;
    let mut conns: HashMap<ConnId, Conn> = HashMap::new();
    let mut next_id: ConnId = 1;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut order: Vec<ConnId> = Vec::new();
    let mut scratch = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        order.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.push(libc::pollfd {
            fd: wake_rx.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for (id, c) in &conns {
            let backlog = c.io.backlog();
            let mut ev = 0;
            if backlog < TX_HIGH_WATER {
                ev |= libc::POLLIN;
            }
            if backlog > 0 {
                ev |= libc::POLLOUT;
            }
            fds.push(libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events: ev,
                revents: 0,
            });
            order.push(*id);
        }
        if let Err(e) = poll_fds(&mut fds, Duration::from_millis(200)) {
            warn!(error = %e, "poll failed in the network thread");
            std::thread::sleep(Duration::from_millis(10));
        }
        // new clients
        loop {
            match listener.accept() {
                Ok((sock, peer)) => {
                    if !limit.try_admit() {
                        // closed at accept (dropped): the client sees EOF
                        let n = limit.refused();
                        if n.is_power_of_two() {
                            warn!(%peer, max = limit.max(), refused = n, "object engine: client refused (max_clients reached)");
                        }
                        continue;
                    }
                    if sock.set_nonblocking(true).is_err() {
                        limit.release();
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    let id = next_id;
                    next_id += 1;
                    debug!(%peer, conn = id, "client connected");
                    conns.insert(
                        id,
                        Conn {
                            sock,
                            io: ServerConn::new(),
                            peer,
                            dead: false,
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    break;
                }
            }
        }
        // replies from other threads
        while let Ok(n) = wake_rx.read(&mut scratch) {
            if n == 0 {
                break;
            }
        }
        while let Ok((id, head, bulk)) = rx.try_recv() {
            if let Some(c) = conns.get_mut(&id) {
                c.io.queue_owned(head);
                for b in bulk {
                    c.io.queue_owned(b);
                }
            }
        }
        // requests and replies on each connection
        for (i, id) in order.iter().enumerate() {
            let Some(c) = conns.get_mut(id) else { continue };
            let rev = fds[i + 2].revents;
            if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                read_conn(c);
                while let Some(inc) = c.io.poll_incoming() {
                    match inc {
                        Incoming::Request { hdr, body } => {
                            dispatch.request(*id, hdr, body, &mut c.io)
                        }
                        Incoming::Reject { hdr, status } => {
                            debug!(peer = %c.peer, %hdr, %status, "request refused");
                            c.io.reply_error(&hdr, status)
                        }
                    }
                }
            }
        }
        dispatch.flush();
        for c in conns.values_mut() {
            write_conn(c);
        }
        conns.retain(|id, c| {
            let done = c.dead || (c.io.is_closing() && c.io.transmit().is_empty());
            if done {
                debug!(peer = %c.peer, conn = id, "client connection closed");
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                dispatch.closed(*id);
                limit.release();
            }
            !done
        });
    }
    for (id, c) in conns.drain() {
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        dispatch.closed(id);
        limit.release();
    }
}

pub(crate) fn read_conn(c: &mut Conn) {
    // bounded per round so one busy client cannot starve the others
    for _ in 0..8 {
        let buf = c.io.recv_buf(READ_CHUNK);
        match c.sock.read(buf) {
            Ok(0) => {
                c.io.received(READ_CHUNK, 0);
                c.dead = true;
                return;
            }
            Ok(n) => {
                c.io.received(READ_CHUNK, n);
                if n < READ_CHUNK {
                    return;
                }
            }
            Err(e) => {
                c.io.received(READ_CHUNK, 0);
                match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted => {}
                    _ => {
                        c.dead = true;
                        return;
                    }
                }
            }
        }
    }
}

pub(crate) fn write_conn(c: &mut Conn) {
    while !c.dead && c.io.backlog() > 0 {
        let mut slices = [io::IoSlice::new(&[]); 16];
        let n = c.io.transmit_vectored(&mut slices);
        match c.sock.write_vectored(&slices[..n]) {
            Ok(0) => c.dead = true,
            Ok(n) => c.io.transmitted(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => c.dead = true,
        }
    }
}
