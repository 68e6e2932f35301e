//! Run-to-completion targets (DAOS: each target xstream has its own CaRT
//! context; SPDK: a connection belongs to one poll group).
//!
//! Each target thread has its own TCP listener (the engine's IP, an
//! ephemeral port, advertised by `target_ports`) and sleeps in `poll(2)`
//! over that listener, its own connections and an eventfd that its channel's
//! senders ([`TargetTx`]) write when it sleeps. A request read on one of its
//! connections is checked here (the same checks as the network thread's
//! dispatch: counters, stale map, DTX held keys, frame limits, and the
//! object's owner), executed in the target's batch, and its reply is queued
//! on the connection after the batch's commit and written by the same
//! thread ([`TargetReplies`]): nothing crosses a thread.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::{Admit, IoChecks, OpCounters};
use crate::rpc::core::{Incoming, ServerConn};
use crate::rpc::tcp::{
    poll_fds_precise, read_conn, write_conn, Conn, ConnId, ReplySender, TX_HIGH_WATER,
};
use crate::rpc::{HeaderRepr, Opcode, Reply, Status, TARGET_CONN_BIT};

/// How long an idle target sleeps in `poll(2)` before it looks again (a
/// safety net: every sender wakes it).
const IDLE_POLL: Duration = Duration::from_millis(500);

/// Wakes a target sleeping in `poll(2)`: an eventfd, written only while the
/// target says it sleeps (so a busy target costs its senders no syscall).
#[derive(Debug)]
pub struct TargetWaker {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl TargetWaker {
    pub fn new() -> io::Result<TargetWaker> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TargetWaker {
            // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// After a message was queued: wake the target if it sleeps.
    pub fn wake(&self) {
        // pairs with the fence in `Sleep::start`: either the target sees the
        // message in its channel, or this sees `sleeping`
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
            let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64 from our eventfd.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Where a target's replies go: its own connections (ids with
/// [`TARGET_CONN_BIT`]) get them queued here, written by the target after
/// its batch; the others go to the network threads ([`ReplySender`]).
pub struct TargetReplies {
    remote: ReplySender,
    local: HashMap<ConnId, Conn>,
}

impl TargetReplies {
    pub fn new(remote: ReplySender) -> TargetReplies {
        TargetReplies {
            remote,
            local: HashMap::new(),
        }
    }

    /// As [`ReplySender::send_quiet`].
    pub fn send_quiet(&mut self, conn: ConnId, frame: Vec<u8>) -> bool {
        self.send_parts_quiet(conn, frame, Vec::new())
    }

    /// As [`ReplySender::send_parts_quiet`]; a reply to a connection of this
    /// target is queued on it (dropped if it is gone) and owes no wake-up.
    pub fn send_parts_quiet(&mut self, conn: ConnId, head: Vec<u8>, bulk: Vec<Vec<u8>>) -> bool {
        if conn & TARGET_CONN_BIT == 0 {
            return self.remote.send_parts_quiet(conn, head, bulk);
        }
        if let Some(c) = self.local.get_mut(&conn) {
            c.io.queue_owned(head);
            for b in bulk {
                c.io.queue_owned(b);
            }
        }
        false
    }

    /// Wakes the TCP network thread.
    pub fn wake(&self) {
        self.remote.wake();
    }
}

/// What a target needs to serve its own connections.
pub struct TargetNet {
    id: usize,
    listener: TcpListener,
    waker: Arc<TargetWaker>,
    stats: Arc<OpCounters>,
    checks: IoChecks,
    next_id: u64,
    fds: Vec<libc::pollfd>,
    order: Vec<ConnId>,
}

impl TargetNet {
    /// Binds target `id`'s listener on `ip` (an ephemeral port).
    pub(crate) fn bind(
        id: usize,
        ip: std::net::IpAddr,
        waker: Arc<TargetWaker>,
        stats: Arc<OpCounters>,
        checks: IoChecks,
    ) -> io::Result<TargetNet> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        listener.set_nonblocking(true)?;
        Ok(TargetNet {
            id,
            listener,
            waker,
            stats,
            checks,
            next_id: 1,
            fds: Vec::new(),
            order: Vec::new(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// One round: `poll(2)` for up to `wait` (0: just look), accept, read
    /// every readable connection and hand its admitted requests to `push`
    /// (others are answered at once: refusals, pings). With `wait` > 0 the
    /// target sleeps: `recheck` looks at its channel once more first (the
    /// channel's senders wake the eventfd only while `sleeping` is set); what
    /// it finds is returned without sleeping.
    pub(super) fn round<M>(
        &mut self,
        replies: &mut TargetReplies,
        mut push: impl FnMut(ConnId, HeaderRepr, Vec<u8>, Instant),
        wait: Duration,
        recheck: impl FnOnce() -> Option<M>,
    ) -> Option<M> {
        self.fds.clear();
        self.order.clear();
        self.fds.push(libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.fds.push(libc::pollfd {
            fd: self.waker.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for (id, c) in &replies.local {
            let backlog = c.io.backlog();
            let mut ev = 0;
            if backlog < TX_HIGH_WATER {
                ev |= libc::POLLIN;
            }
            if backlog > 0 {
                ev |= libc::POLLOUT;
            }
            self.fds.push(libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events: ev,
                revents: 0,
            });
            self.order.push(*id);
        }
        let mut wait = wait;
        if !wait.is_zero() {
            self.waker.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if let Some(m) = recheck() {
                self.waker.sleeping.store(false, Ordering::SeqCst);
                return Some(m);
            }
            wait = wait.min(IDLE_POLL);
        }
        if let Err(e) = poll_fds_precise(&mut self.fds, wait) {
            warn!(target_id = self.id, error = %e, "poll failed in a target");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.waker.sleeping.store(false, Ordering::SeqCst);
        if self.fds[1].revents != 0 {
            self.waker.drain();
        }
        if self.fds[0].revents != 0 {
            self.accept(replies);
        }
        for (i, id) in self.order.iter().enumerate() {
            let rev = self.fds[i + 2].revents;
            if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
                continue;
            }
            let Some(c) = replies.local.get_mut(id) else {
                continue;
            };
            read_conn(c);
            let received = Instant::now();
            while let Some(inc) = c.io.poll_incoming() {
                match inc {
                    Incoming::Request { hdr, body } => {
                        if self.admit(&hdr, &body, &mut c.io) {
                            push(*id, hdr, body, received);
                        }
                    }
                    Incoming::Reject { hdr, status } => {
                        debug!(target_id = self.id, peer = %c.peer, %hdr, %status, "request refused");
                        c.io.reply_error(&hdr, status)
                    }
                }
            }
        }
        None
    }

    fn accept(&mut self, replies: &mut TargetReplies) {
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    // as many connections per target as the engine has clients
                    if replies.local.len() >= self.stats.clients.max() {
                        warn!(target_id = self.id, %peer, max = self.stats.clients.max(), "target connection refused (max_clients reached)");
                        continue;
                    }
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    let id = TARGET_CONN_BIT | self.next_id;
                    self.next_id += 1;
                    debug!(target_id = self.id, %peer, conn = id, "target connection");
                    self.stats.target_conns.fetch_add(1, Ordering::Relaxed);
                    replies.local.insert(
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
                    warn!(target_id = self.id, error = %e, "accept failed");
                    break;
                }
            }
        }
    }

    /// The network thread's checks for a request on a target connection:
    /// true to execute it here (else it was answered).
    fn admit(&self, hdr: &HeaderRepr, body: &[u8], io: &mut ServerConn) -> bool {
        self.stats.record(hdr.opcode, hdr.bulk_len as u64);
        self.stats
            .target_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match hdr.opcode {
            Opcode::Ping => {
                io.reply(
                    hdr,
                    Status::Ok,
                    &Reply::Pong {
                        incarnation: self.checks.map_versions.incarnation(),
                        targets: self.checks.ntargets as u32,
                    },
                    &[],
                );
                false
            }
            Opcode::Unknown(_) => {
                io.reply_error(hdr, Status::NoSys);
                false
            }
            op if op.is_object_io() || op == Opcode::ObjListObj => {
                match self.checks.admit(hdr, body) {
                    Admit::To(t) if t == self.id => true,
                    Admit::To(t) => {
                        // not this target's object: a client with another
                        // routing (or another target count) than the engine's
                        debug!(target_id = self.id, owner = t, %hdr, "object I/O for another target");
                        self.stats
                            .wrong_target
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        io.reply_error(hdr, Status::Invalid);
                        false
                    }
                    Admit::Stale(v) => {
                        io.reply_stale_map(hdr, v);
                        false
                    }
                    Admit::Refuse(st) => {
                        io.reply_error(hdr, st);
                        false
                    }
                }
            }
            // pool, container, DTX: the engine's main connection serves them
            _ => {
                io.reply_error(hdr, Status::Invalid);
                false
            }
        }
    }

    /// Writes what the batch queued on every connection; drops the ones that
    /// went away (their requests were executed, their replies dropped).
    pub(super) fn write_all(&mut self, replies: &mut TargetReplies) {
        for c in replies.local.values_mut() {
            write_conn(c);
        }
        let stats = &self.stats;
        let id = self.id;
        replies.local.retain(|cid, c| {
            let done = c.dead || (c.io.is_closing() && c.io.transmit().is_empty());
            if done {
                debug!(target_id = id, peer = %c.peer, conn = cid, "target connection closed");
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                stats.target_conns.fetch_sub(1, Ordering::Relaxed);
            }
            !done
        });
    }

    /// Closes every connection (the target stops).
    pub(super) fn close_all(&mut self, replies: &mut TargetReplies) {
        for (_, c) in replies.local.drain() {
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            self.stats.target_conns.fetch_sub(1, Ordering::Relaxed);
        }
        debug!(target_id = self.id, "target connections closed");
    }
}
