//! The NVMe/TCP transport over sockets: [`TcpTransport`] (listeners, accept),
//! [`TcpPollGroup`] (nonblocking reads and writes of a poll group's connections,
//! `poll(2)` to sleep) and [`TcpQpair`] (a socket and its [`TargetConn`]) on the
//! target side; [`TcpHostTransport`] and its queues on the host side.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bdev::IoBuf;
use nvme::log::{DiscoveryEntry, TrType};
use nvme::{Cqe, Sqe};
use tracing::{debug, warn};
use wire::nvme_tcp::Digests;

use super::host::{HostConn, HostEvent, HostParams};
use super::target::{discovery_entry, TargetConn, TargetParams};
use crate::transport::{
    Accepted, HostCompletion, HostQueue, HostQueueParams, HostTransport, QpairEvent, QueueError,
    SubmitError, Transport, TransportId, TransportLimits, TransportPollGroup, TransportQpair,
};

/// Above this many queued transmit bytes a qpair stops reading new commands.
const TX_HIGH_WATER: usize = 4 * 1024 * 1024;

/// `poll(2)` on `fds` for at most `timeout_ms`; the number of ready descriptors
/// (0 on timeout, negative on error).
#[allow(unsafe_code)] // the crate's only unsafe: a libc call without a safe wrapper
pub(crate) fn poll_fds(fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd
    // structures for the duration of the call; poll(2) writes only `revents`.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}

/// The NVMe/TCP transport, target side.
#[derive(Debug)]
pub struct TcpTransport {
    params: TargetParams,
    listeners: Vec<TcpListener>,
    fds: Vec<libc::pollfd>,
}

impl TcpTransport {
    pub fn new(params: TargetParams) -> Self {
        TcpTransport {
            params,
            listeners: Vec::new(),
            fds: Vec::new(),
        }
    }
}

impl Transport for TcpTransport {
    type Qpair = TcpQpair;
    type PollGroup = TcpPollGroup;

    fn trtype(&self) -> TrType {
        TrType::Tcp
    }
    fn limits(&self) -> TransportLimits {
        self.params.limits()
    }
    fn listen(&mut self, trid: &TransportId) -> io::Result<TransportId> {
        let addr = trid.socket_addr().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an IP address: {trid}"),
            )
        })?;
        let s = TcpListener::bind(addr)?;
        s.set_nonblocking(true)?;
        let bound = TransportId::tcp(s.local_addr()?);
        self.fds.push(libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.listeners.push(s);
        Ok(bound)
    }
    fn listener_discover(&self, trid: &TransportId, entry: &mut DiscoveryEntry) {
        *entry = discovery_entry(trid);
    }
    fn stop_listen(&mut self, trid: &TransportId) -> Option<usize> {
        let i = self
            .listeners
            .iter()
            .position(|s| s.local_addr().ok().map(TransportId::tcp).as_ref() == Some(trid))?;
        // fds[i] is listeners[i]'s descriptor (pushed together in `listen`)
        self.fds.remove(i);
        drop(self.listeners.remove(i));
        Some(i)
    }
    fn accept(&mut self, timeout: Duration, out: &mut Vec<Accepted<TcpQpair>>) -> io::Result<()> {
        poll_fds(
            &mut self.fds,
            timeout.as_millis().min(i32::MAX as u128) as i32,
        );
        for f in self.fds.iter_mut() {
            f.revents = 0;
        }
        for (i, s) in self.listeners.iter().enumerate() {
            loop {
                match s.accept() {
                    Ok((c, peer)) => {
                        debug!(%peer, listener = i, "accepted");
                        let _ = c.set_nodelay(true);
                        if c.set_nonblocking(true).is_err() {
                            continue;
                        }
                        out.push(Accepted {
                            qpair: TcpQpair {
                                sock: c,
                                conn: TargetConn::new(self.params),
                                readable: true,
                                closed: false,
                                peer: peer.to_string(),
                            },
                            listener: i,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        warn!(%e, "accept failed");
                        break;
                    }
                }
            }
        }
        Ok(())
    }
    fn poll_group_create(&self, event_driven: bool) -> TcpPollGroup {
        TcpPollGroup {
            event_driven,
            fds: Vec::new(),
        }
    }
}

/// One NVMe/TCP queue pair: the socket and its sans-IO connection.
#[derive(Debug)]
pub struct TcpQpair {
    sock: TcpStream,
    conn: TargetConn,
    /// Worth a read(2): poll(2) said so, or the last read filled the buffer. Only
    /// consulted in event-driven mode, where a read that would return EAGAIN is a
    /// wasted syscall.
    readable: bool,
    /// The socket is done (peer closed, read or write error).
    closed: bool,
    peer: String,
}

impl TcpQpair {
    /// Reads a bounded amount (so one connection cannot starve the others).
    fn recv(&mut self) -> bool {
        let mut progress = false;
        if !self.readable
            || self.closed
            || self.conn.is_terminated()
            || self.conn.tx_backlog() >= TX_HIGH_WATER
        {
            return false;
        }
        self.readable = false;
        for _ in 0..4 {
            let mut iov = [(); 3].map(|_| io::IoSliceMut::new(&mut []));
            let k = self.conn.recv_iovecs(&mut iov);
            let cap: usize = iov[..k].iter().map(|v| v.len()).sum();
            match self.sock.read_vectored(&mut iov[..k]) {
                Ok(0) => {
                    debug!(peer = %self.peer, "peer closed");
                    self.closed = true;
                    break;
                }
                Ok(n) => {
                    self.conn.handle_received(n);
                    progress = true;
                    if n < cap {
                        break;
                    }
                    self.readable = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(peer = %self.peer, %e, "read error");
                    self.closed = true;
                    break;
                }
            }
        }
        progress
    }

    /// Writes what is queued: headers and read data in one writev, the data
    /// without a copy.
    fn send(&mut self) -> bool {
        let mut progress = false;
        while self.conn.tx_backlog() > 0 {
            let r = {
                let mut iov = [io::IoSlice::new(&[]); 64];
                let n = self.conn.poll_transmit_vectored(&mut iov);
                self.sock.write_vectored(&iov[..n])
            };
            match r {
                Ok(0) => break,
                Ok(n) => {
                    self.conn.advance_tx(n);
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(peer = %self.peer, %e, "write error");
                    self.closed = true;
                    // drop what cannot be sent
                    let n = self.conn.tx_backlog();
                    self.conn.advance_tx(n);
                    break;
                }
            }
        }
        progress
    }
}

impl TransportQpair for TcpQpair {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        TransportQpair::poll_event(&mut self.conn)
    }
    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        self.conn.complete(cqe, data);
    }
    fn get_buf(&mut self, len: usize) -> IoBuf {
        IoBuf::Vec(self.conn.alloc_buf(len))
    }
    fn put_buf(&mut self, buf: IoBuf) {
        self.conn.recycle_buf(buf);
    }
    fn connected(&mut self, sqflow_disabled: bool) {
        self.conn.set_c2h_success(sqflow_disabled);
    }
    fn is_terminated(&self) -> bool {
        self.closed || self.conn.is_terminated()
    }
    fn peer(&self) -> String {
        self.peer.clone()
    }
    fn describe_stats(&self) -> String {
        format!("{:?} digests {:?}", self.conn.stats(), self.conn.digests())
    }
}

/// The NVMe/TCP part of a poll group: reads and writes its connections'
/// sockets, sleeps in `poll(2)`.
#[derive(Debug)]
pub struct TcpPollGroup {
    event_driven: bool,
    fds: Vec<libc::pollfd>,
}

impl TransportPollGroup for TcpPollGroup {
    type Qpair = TcpQpair;

    fn poll<Q: AsMut<TcpQpair>>(&mut self, qpairs: &mut [Q]) -> bool {
        let mut progress = false;
        for q in qpairs.iter_mut() {
            let q = q.as_mut();
            if !self.event_driven {
                q.readable = true;
            }
            progress |= q.recv();
        }
        progress
    }
    fn flush<Q: AsMut<TcpQpair>>(&mut self, qpairs: &mut [Q]) -> bool {
        let mut progress = false;
        for q in qpairs.iter_mut() {
            progress |= q.as_mut().send();
        }
        progress
    }
    fn wait<Q: AsMut<TcpQpair>>(&mut self, qpairs: &mut [Q], timeout: Duration) -> bool {
        self.fds.clear();
        self.fds.extend(qpairs.iter_mut().map(|q| {
            let q = q.as_mut();
            libc::pollfd {
                fd: q.sock.as_raw_fd(),
                events: libc::POLLIN
                    | if q.conn.tx_backlog() > 0 {
                        libc::POLLOUT
                    } else {
                        0
                    },
                revents: 0,
            }
        }));
        let ready = poll_fds(
            &mut self.fds,
            timeout.as_millis().min(i32::MAX as u128) as i32,
        );
        for (q, f) in qpairs.iter_mut().zip(self.fds.iter()) {
            if f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                q.as_mut().readable = true;
            }
        }
        ready > 0
    }
    fn remove(&mut self, mut q: TcpQpair) {
        // best effort: flush what is queued (a term request) before closing
        let _ = q.sock.set_nonblocking(false);
        let _ = q.sock.set_write_timeout(Some(Duration::from_millis(100)));
        let pending = q.conn.drain_tx();
        let _ = q.sock.write_all(&pending);
        let _ = q.sock.shutdown(Shutdown::Both);
    }
}

// ---------------------------------------------------------------------------
// host side

/// The NVMe/TCP transport, host side.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpHostTransport;

impl HostTransport for TcpHostTransport {
    fn trtype(&self) -> TrType {
        TrType::Tcp
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
        let sock = TcpStream::connect_timeout(&addr, params.timeout)?;
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        let conn = HostConn::new(HostParams {
            hdgst: params.hdgst,
            ddgst: params.ddgst,
            hpda: 0,
            maxr2t: 0,
        });
        let mut q = TcpHostQueue { sock, conn };
        let deadline = Instant::now() + params.timeout;
        let mut done = VecDeque::new();
        while !q.conn.is_established() {
            if q.conn.is_terminated() {
                return Err(QueueError::Terminated("during ICReq"));
            }
            if Instant::now() > deadline {
                return Err(QueueError::Timeout("ICResp"));
            }
            q.progress(true, &mut done)?;
        }
        Ok(Box::new(q))
    }
}

/// One host queue over NVMe/TCP: a nonblocking socket and its [`HostConn`];
/// `progress` moves bytes both ways (so a large write never deadlocks against
/// responses the target is sending).
#[derive(Debug)]
struct TcpHostQueue {
    sock: TcpStream,
    conn: HostConn,
}

impl TcpHostQueue {
    fn pump(&mut self, done: &mut VecDeque<HostCompletion>) -> Result<bool, QueueError> {
        let mut moved = false;
        while self.conn.tx_backlog() > 0 {
            match self.sock.write(self.conn.poll_transmit()) {
                Ok(0) => return Err(QueueError::Terminated("peer closed")),
                Ok(n) => {
                    self.conn.advance_tx(n);
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        for _ in 0..8 {
            // C2H data of a PDU whose header is in goes straight to its
            // command's buffer (HostConn::recv_buf)
            let buf = self.conn.recv_buf();
            let cap = buf.len();
            match self.sock.read(buf) {
                Ok(0) => {
                    self.drain_events(done);
                    return Err(QueueError::Terminated("peer closed the connection"));
                }
                Ok(n) => {
                    self.conn.handle_received(n);
                    moved = true;
                    if n < cap {
                        break; // the socket had no more for now: no EAGAIN read
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.drain_events(done);
        if self.conn.is_terminated() {
            // flush our term request, if any
            let _ = self.sock.write(self.conn.poll_transmit());
            return Err(QueueError::Terminated("NVMe/TCP term request"));
        }
        Ok(moved)
    }

    fn drain_events(&mut self, done: &mut VecDeque<HostCompletion>) {
        while let Some(ev) = self.conn.poll_event() {
            if let HostEvent::Completion { cqe, data, .. } = ev {
                done.push_back(HostCompletion { cqe, data });
            }
        }
    }
}

impl HostQueue for TcpHostQueue {
    fn submit(
        &mut self,
        sqe: Sqe,
        write: &[u8],
        read_len: u32,
        in_capsule: u32,
    ) -> Result<(), SubmitError> {
        self.conn.submit(sqe, write, read_len, in_capsule)
    }
    fn progress(
        &mut self,
        block: bool,
        done: &mut VecDeque<HostCompletion>,
    ) -> Result<bool, QueueError> {
        let before = done.len();
        let moved = self.pump(done)?;
        if !moved && block && done.len() == before {
            let mut fds = [libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN
                    | if self.conn.tx_backlog() > 0 {
                        libc::POLLOUT
                    } else {
                        0
                    },
                revents: 0,
            }];
            poll_fds(&mut fds, 100);
            return self.pump(done);
        }
        Ok(moved)
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.conn.recycle(buf);
    }
    fn digests(&self) -> Digests {
        self.conn.digests()
    }
}
