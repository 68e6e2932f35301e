//! Poll groups and the TCP driver (SPDK `spdk_nvmf_poll_group` + the TCP
//! transport's socket handling): one thread per poll group runs its qpairs to
//! completion over nonblocking sockets. New connections are handed out
//! round-robin by the acceptor thread; nothing on the I/O path takes a lock.
//!
//! A poll group busy-polls while it has work and sleeps in `poll(2)` (1 ms at most)
//! after `TgtParams::idle_spins` idle iterations, so an idle target costs no CPU.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use tracing::{debug, info, warn};

use crate::qpair::Qpair;
use crate::tcp::TargetConn;
use crate::tgt::Tgt;

/// Above this many queued transmit bytes a qpair stops reading new commands.
const TX_HIGH_WATER: usize = 4 * 1024 * 1024;

struct Conn {
    sock: TcpStream,
    qp: Qpair,
    /// Worth a read(2): poll(2) said so, or the last read filled the buffer. Only
    /// consulted in event-driven mode (idle_spins 0), where a read that would
    /// return EAGAIN is a wasted syscall.
    readable: bool,
}

/// A running target: acceptor + poll group threads.
pub struct NvmfServer {
    tgt: Arc<Tgt>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
}

impl std::fmt::Debug for NvmfServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmfServer")
            .field("addrs", &self.addrs)
            .finish()
    }
}

/// A listen request: address and whether it is a discovery-only port.
#[derive(Debug, Clone, Copy)]
pub struct ListenSpec {
    pub addr: SocketAddr,
    pub discovery_only: bool,
}

impl NvmfServer {
    /// Binds every listener, starts `poll_groups` poll group threads (0 = one per
    /// available CPU) and the acceptor.
    pub fn start(tgt: Tgt, listen: &[ListenSpec], poll_groups: usize) -> io::Result<NvmfServer> {
        let poll_groups = if poll_groups == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            poll_groups
        };
        let tgt = Arc::new(tgt);
        let mut socks = Vec::new();
        let mut addrs = Vec::new();
        for l in listen {
            let s = TcpListener::bind(l.addr)?;
            s.set_nonblocking(true)?;
            let a = s.local_addr()?;
            let portid = tgt.add_listener(a, l.discovery_only);
            info!(addr = %a, portid, discovery_only = l.discovery_only, "nvmf listening (NVMe/TCP)");
            addrs.push(a);
            socks.push((s, portid));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut txs = Vec::new();
        for i in 0..poll_groups.max(1) {
            let (tx, rx) = channel::<(TcpStream, u16)>();
            txs.push(tx);
            let (tgt, stop) = (tgt.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nvmf-pg{i}"))
                    .spawn(move || poll_group_loop(i, tgt, rx, stop))?,
            );
        }
        let stop2 = stop.clone();
        threads.push(
            std::thread::Builder::new()
                .name("nvmf-accept".into())
                .spawn(move || acceptor(socks, txs, stop2))?,
        );
        Ok(NvmfServer {
            tgt,
            stop,
            threads,
            addrs,
        })
    }

    /// Bound listener addresses, in the order given.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
    pub fn tgt(&self) -> &Arc<Tgt> {
        &self.tgt
    }

    /// Stops all threads and closes every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for NvmfServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn acceptor(
    socks: Vec<(TcpListener, u16)>,
    txs: Vec<Sender<(TcpStream, u16)>>,
    stop: Arc<AtomicBool>,
) {
    let mut rr = 0usize;
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|(s, _)| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        for (s, portid) in &socks {
            loop {
                match s.accept() {
                    Ok((c, peer)) => {
                        debug!(%peer, portid, "accepted");
                        let _ = c.set_nodelay(true);
                        if c.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if txs.is_empty() || txs[rr % txs.len()].send((c, *portid)).is_err() {
                            return;
                        }
                        rr += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        warn!(%e, "accept failed");
                        break;
                    }
                }
            }
        }
        for f in fds.iter_mut() {
            f.revents = 0;
        }
    }
}

fn poll_group_loop(
    id: usize,
    tgt: Arc<Tgt>,
    rx: Receiver<(TcpStream, u16)>,
    stop: Arc<AtomicBool>,
) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut idle = 0u32;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut last_timer = 0u64;
    let mut passes = 0u32;
    let mut slept = false;
    let event_mode = tgt.params.idle_spins == 0;
    debug!(id, "poll group started");
    while !stop.load(Ordering::Relaxed) {
        let mut progress = false;
        while let Ok((sock, portid)) = rx.try_recv() {
            let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            let conn = TargetConn::new(tgt.params.tcp);
            conns.push(Conn {
                sock,
                qp: Qpair::new(conn, portid, peer),
                readable: true,
            });
            progress = true;
        }
        // reading the clock can be a syscall (an emulated HPET, say): not every pass
        passes = passes.wrapping_add(1);
        let (timers, now) = if slept || passes & 255 == 0 {
            let now = tgt.now_ms();
            let due = now >= last_timer + 100;
            if due {
                last_timer = now;
            }
            (due, now)
        } else {
            (false, 0)
        };
        slept = false;
        for c in conns.iter_mut() {
            if !event_mode {
                c.readable = true;
            }
            progress |= poll_conn(&tgt, c, timers, now);
        }
        let before = conns.len();
        conns.retain_mut(|c| {
            let dead = c.qp.is_closing();
            if dead {
                // best effort: flush what is queued (a term request) before closing
                let _ = c.sock.set_nonblocking(false);
                let _ = c
                    .sock
                    .set_write_timeout(Some(std::time::Duration::from_millis(100)));
                let pending = c.qp.conn.drain_tx();
                let _ = c.sock.write_all(&pending);
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                c.qp.teardown(&tgt);
                debug!(peer = %c.qp.peer, "qpair closed");
            }
            !dead
        });
        progress |= conns.len() != before;
        if progress {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < tgt.params.idle_spins || conns.iter().any(|c| c.qp.in_flight() > 0) {
            std::hint::spin_loop();
            continue;
        }
        fds.clear();
        fds.extend(conns.iter().map(|c| libc::pollfd {
            fd: c.sock.as_raw_fd(),
            events: libc::POLLIN
                | if c.qp.conn.tx_backlog() > 0 {
                    libc::POLLOUT
                } else {
                    0
                },
            revents: 0,
        }));
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        // event-driven mode sleeps longer: new connections wait for at most 10 ms
        let timeout = if event_mode { 10 } else { 1 };
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        // woken by traffic: the clock can wait for the next 256 passes
        slept = ready <= 0;
        for (c, f) in conns.iter_mut().zip(fds.iter()) {
            if f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                c.readable = true;
            }
        }
    }
    for mut c in conns {
        c.qp.teardown(&tgt);
    }
    debug!(id, "poll group stopped");
}

/// One pass over a connection: read, execute, poll the bdevs, write.
fn poll_conn(tgt: &Tgt, c: &mut Conn, timers: bool, now: u64) -> bool {
    let mut progress = false;
    if c.readable && !c.qp.is_closing() && c.qp.conn.tx_backlog() < TX_HIGH_WATER {
        // read a bounded amount per pass so one connection cannot starve the others
        c.readable = false;
        for _ in 0..4 {
            let mut iov = [(); 3].map(|_| io::IoSliceMut::new(&mut []));
            let k = c.qp.conn.recv_iovecs(&mut iov);
            let cap: usize = iov[..k].iter().map(|v| v.len()).sum();
            match c.sock.read_vectored(&mut iov[..k]) {
                Ok(0) => {
                    debug!(peer = %c.qp.peer, "peer closed");
                    c.qp.close();
                    break;
                }
                Ok(n) => {
                    c.qp.conn.handle_received(n);
                    progress = true;
                    if n < cap {
                        break;
                    }
                    c.readable = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(peer = %c.qp.peer, %e, "read error");
                    c.qp.close();
                    break;
                }
            }
        }
    }
    progress |= c.qp.process_events(tgt);
    progress |= c.qp.poll_bdev();
    if timers {
        c.qp.check_timers(now);
    }
    while c.qp.conn.tx_backlog() > 0 {
        // headers and read data leave in one writev, the data without a copy
        let r = {
            let mut iov = [io::IoSlice::new(&[]); 64];
            let n = c.qp.conn.poll_transmit_vectored(&mut iov);
            c.sock.write_vectored(&iov[..n])
        };
        match r {
            Ok(0) => break,
            Ok(n) => {
                c.qp.conn.advance_tx(n);
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                debug!(peer = %c.qp.peer, %e, "write error");
                c.qp.close();
                // drop what cannot be sent
                let n = c.qp.conn.tx_backlog();
                c.qp.conn.advance_tx(n);
                break;
            }
        }
    }
    progress
}
