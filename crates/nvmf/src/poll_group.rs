//! Poll groups (SPDK `spdk_nvmf_poll_group`): one thread per poll group runs its
//! qpairs to completion; an acceptor thread owns the [`Transport`] and hands new
//! qpairs out round-robin. Nothing on the I/O path takes a lock. The transport's
//! part of a poll group ([`TransportPollGroup`]) moves the bytes; this loop runs
//! the core: commands, bdev I/O, timers.
//!
//! A poll group busy-polls while it has work and sleeps in the transport's `wait`
//! (1 ms at most) after `TgtParams::idle_spins` idle iterations, so an idle target
//! costs no CPU.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nvme::log::DiscoveryEntry;
use tracing::{debug, info};

use crate::qpair::Qpair;
use crate::tcp::{TargetParams, TcpTransport};
use crate::tgt::Tgt;
use crate::transport::{Accepted, Transport, TransportId, TransportPollGroup, TransportQpair};

/// A running target: acceptor + poll group threads.
pub struct NvmfServer {
    tgt: Arc<Tgt>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    trids: Vec<TransportId>,
    listen_tx: Sender<ListenRequest>,
    trtype: nvme::log::TrType,
}

/// A listener to add while serving (with where to send the bound trid), or one to
/// stop (with where to say whether it was listening).
enum ListenRequest {
    Add(Listen, Sender<io::Result<TransportId>>),
    Remove(TransportId, Sender<bool>),
}

/// Adds and removes listeners of a running server (the acceptor thread binds and
/// closes them); cloneable, for the management plane.
#[derive(Debug, Clone)]
pub struct ListenerHandle {
    tx: Sender<ListenRequest>,
    trtype: nvme::log::TrType,
}

impl ListenerHandle {
    /// The server's transport type.
    pub fn trtype(&self) -> nvme::log::TrType {
        self.trtype
    }

    /// Binds `l` on the server's transport and registers it with the target;
    /// returns the bound trid (port 0 resolved).
    pub fn add(&self, l: Listen) -> io::Result<TransportId> {
        let (rtx, rrx) = channel();
        let gone = || io::Error::new(io::ErrorKind::NotConnected, "nvmf server stopped");
        self.tx
            .send(ListenRequest::Add(l, rtx))
            .map_err(|_| gone())?;
        rrx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| gone())?
    }

    /// Stops listening at `trid` and takes it off the target (the discovery log no
    /// longer lists it): the socket is closed at once, its port free. `Ok(false)`
    /// when the server did not listen there. Connections made through it are the
    /// caller's to close (they stay up: a socket's accepted connections outlive it).
    pub fn remove(&self, trid: &TransportId) -> io::Result<bool> {
        let (rtx, rrx) = channel();
        let gone = || io::Error::new(io::ErrorKind::NotConnected, "nvmf server stopped");
        self.tx
            .send(ListenRequest::Remove(trid.clone(), rtx))
            .map_err(|_| gone())?;
        rrx.recv_timeout(Duration::from_secs(5)).map_err(|_| gone())
    }
}

impl std::fmt::Debug for NvmfServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmfServer")
            .field("trids", &self.trids)
            .finish()
    }
}

/// An NVMe/TCP listen request: address and whether it is a discovery-only port.
#[derive(Debug, Clone, Copy)]
pub struct ListenSpec {
    pub addr: SocketAddr,
    pub discovery_only: bool,
}

/// A listen request for any transport.
#[derive(Debug, Clone)]
pub struct Listen {
    pub trid: TransportId,
    pub discovery_only: bool,
}

/// A new qpair on its way to a poll group: (transport qpair, port id).
type NewQpair<Q> = (Q, u16);

impl NvmfServer {
    /// NVMe/TCP on every listener of `listen` (digests as `tgt.params.digests`):
    /// see [`NvmfServer::start_with`].
    pub fn start(tgt: Tgt, listen: &[ListenSpec], poll_groups: usize) -> io::Result<NvmfServer> {
        let params = TargetParams {
            hdgst: tgt.params.digests,
            ddgst: tgt.params.digests,
            ..TargetParams::default()
        };
        let listen: Vec<Listen> = listen
            .iter()
            .map(|l| Listen {
                trid: TransportId::tcp(l.addr),
                discovery_only: l.discovery_only,
            })
            .collect();
        Self::start_with(tgt, TcpTransport::new(params), &listen, poll_groups)
    }

    /// Listens with `transport` on every listener, starts `poll_groups` poll
    /// group threads (0 = one per available CPU) and the acceptor.
    pub fn start_with<T: Transport>(
        tgt: Tgt,
        mut transport: T,
        listen: &[Listen],
        poll_groups: usize,
    ) -> io::Result<NvmfServer> {
        let poll_groups = if poll_groups == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            poll_groups
        };
        let tgt = Arc::new(tgt);
        let mut portids = Vec::new();
        let mut addrs = Vec::new();
        let mut trids = Vec::new();
        for l in listen {
            let bound = transport.listen(&l.trid)?;
            let mut entry = DiscoveryEntry::default();
            transport.listener_discover(&bound, &mut entry);
            let portid =
                tgt.add_listener(bound.clone(), l.discovery_only, entry, transport.limits());
            info!(trid = %bound.uri(), portid, discovery_only = l.discovery_only, "nvmf listening");
            addrs.extend(bound.socket_addr());
            trids.push(bound);
            portids.push(portid);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut txs = Vec::new();
        let event_driven = tgt.params.idle_spins == 0;
        let trtype = transport.trtype();
        let trname = match trtype {
            nvme::log::TrType::Rdma => "RDMA",
            _ => "TCP",
        };
        for i in 0..poll_groups.max(1) {
            let pg = Arc::new(crate::stats::PollGroupStats::new(i, trname));
            tgt.register_poll_group(pg.clone());
            let (tx, rx) = channel::<NewQpair<T::Qpair>>();
            txs.push(tx);
            let (tgt, stop) = (tgt.clone(), stop.clone());
            let group = transport.poll_group_create(event_driven);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nvmf-pg{i}"))
                    .spawn(move || poll_group_loop(pg, tgt, group, rx, stop))?,
            );
        }
        let stop2 = stop.clone();
        let (listen_tx, listen_rx) = channel::<ListenRequest>();
        let tgt2 = tgt.clone();
        threads.push(
            std::thread::Builder::new()
                .name("nvmf-accept".into())
                .spawn(move || acceptor(transport, tgt2, portids, txs, listen_rx, stop2))?,
        );
        Ok(NvmfServer {
            tgt,
            stop,
            threads,
            addrs,
            trids,
            listen_tx,
            trtype,
        })
    }

    /// Bound listener addresses of IP transports, in the order given.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
    /// Bound listener transport ids, in the order given.
    pub fn trids(&self) -> &[TransportId] {
        &self.trids
    }
    pub fn tgt(&self) -> &Arc<Tgt> {
        &self.tgt
    }
    /// A handle that adds listeners while serving.
    pub fn listener_handle(&self) -> ListenerHandle {
        ListenerHandle {
            tx: self.listen_tx.clone(),
            trtype: self.trtype,
        }
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

fn acceptor<T: Transport>(
    mut transport: T,
    tgt: Arc<Tgt>,
    mut portids: Vec<u16>,
    txs: Vec<Sender<NewQpair<T::Qpair>>>,
    listen_rx: Receiver<ListenRequest>,
    stop: Arc<AtomicBool>,
) {
    let mut rr = 0usize;
    let mut new: Vec<Accepted<T::Qpair>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        while let Ok(req) = listen_rx.try_recv() {
            match req {
                ListenRequest::Add(l, reply) => {
                    let r = transport.listen(&l.trid).inspect(|bound| {
                        let mut entry = DiscoveryEntry::default();
                        transport.listener_discover(bound, &mut entry);
                        let portid = tgt.add_listener(
                            bound.clone(),
                            l.discovery_only,
                            entry,
                            transport.limits(),
                        );
                        info!(trid = %bound.uri(), portid, "nvmf listening (added while serving)");
                        portids.push(portid);
                    });
                    let _ = reply.send(r);
                }
                ListenRequest::Remove(trid, reply) => {
                    let r = match transport.stop_listen(&trid) {
                        Some(i) => {
                            if i < portids.len() {
                                portids.remove(i);
                            }
                            tgt.remove_listener(&trid);
                            info!(trid = %trid.uri(), "nvmf listener closed");
                            true
                        }
                        None => false,
                    };
                    let _ = reply.send(r);
                }
            }
        }
        if let Err(e) = transport.accept(Duration::from_millis(50), &mut new) {
            debug!(%e, "accept");
        }
        for a in new.drain(..) {
            if !tgt.admit_connection() {
                // closed here: the peer sees its connection end at once
                drop(a);
                continue;
            }
            let portid = portids.get(a.listener).copied().unwrap_or(0);
            if txs.is_empty() || txs[rr % txs.len()].send((a.qpair, portid)).is_err() {
                return;
            }
            rr += 1;
        }
    }
}

fn poll_group_loop<G: TransportPollGroup>(
    pg: Arc<crate::stats::PollGroupStats>,
    tgt: Arc<Tgt>,
    mut group: G,
    rx: Receiver<NewQpair<G::Qpair>>,
    stop: Arc<AtomicBool>,
) {
    let mut qpairs: Vec<Qpair<G::Qpair>> = Vec::new();
    let mut idle = 0u32;
    let mut last_timer = 0u64;
    let mut passes = 0u32;
    let mut slept = false;
    let event_mode = tgt.params.idle_spins == 0;
    let id = pg.id;
    debug!(id, "poll group started");
    while !stop.load(Ordering::Relaxed) {
        let mut progress = false;
        while let Ok((tq, portid)) = rx.try_recv() {
            let peer = tq.peer();
            let mut qp = Qpair::new(tq, portid, peer);
            qp.set_group(pg.clone());
            qpairs.push(qp);
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
        progress |= group.poll(&mut qpairs);
        for qp in qpairs.iter_mut() {
            progress |= qp.process_events(&tgt);
            progress |= qp.poll_bdev();
            if timers {
                qp.check_timers(now);
            }
        }
        progress |= group.flush(&mut qpairs);
        let before = qpairs.len();
        let mut i = 0;
        while i < qpairs.len() {
            if qpairs[i].is_closing() {
                let mut qp = qpairs.remove(i);
                qp.teardown(&tgt);
                debug!(peer = %qp.peer, "qpair closed");
                group.remove(qp.into_transport());
                tgt.connection_closed();
            } else {
                i += 1;
            }
        }
        progress |= qpairs.len() != before;
        if progress {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < tgt.params.idle_spins || qpairs.iter().any(|c| c.in_flight() > 0) {
            std::hint::spin_loop();
            continue;
        }
        // event-driven mode sleeps longer: new connections wait for at most 10 ms
        let timeout = Duration::from_millis(if event_mode { 10 } else { 1 });
        // woken by traffic: the clock can wait for the next 256 passes
        slept = !group.wait(&mut qpairs, timeout);
    }
    for mut qp in qpairs {
        qp.teardown(&tgt);
        group.remove(qp.into_transport());
        tgt.connection_closed();
    }
    debug!(id, "poll group stopped");
}
