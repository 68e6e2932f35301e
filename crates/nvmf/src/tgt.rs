//! The target (SPDK `spdk_nvmf_tgt`): subsystems, listeners, the controller
//! registry (dynamic cntlid), Fabrics Connect, and the discovery log page.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use nvme::cmd::ConnectData;
use nvme::status::{FabricsStatus, GenericStatus};
use nvme::{Sqe, Status};
use tracing::{info, warn};

use crate::ctrlr::{Ctrlr, DiscoveryService, MAX_QUEUE_DEPTH};
use crate::subsystem::{Subsystem, SubsystemError, SubsystemType, DISCOVERY_NQN};
use crate::transport::{TransportId, TransportLimits};
use nvme::log::{DiscoveryEntry, DiscoveryLog, SubType};

/// Target-wide parameters.
#[derive(Debug, Clone, Copy)]
pub struct TgtParams {
    /// Grant header/data digests when a host asks (transports that have them).
    pub digests: bool,
    /// I/O queues a controller may have.
    pub max_io_queues: u16,
    /// Idle passes a poll group spins before sleeping in poll(2); 0 = sleep at once
    /// (event driven, for CPU-starved machines such as an emulated guest).
    pub idle_spins: u32,
    /// Most transport connections (queue pairs, connected or not yet) held at
    /// once; one more is closed at accept and counted ([`Tgt::refusals`]).
    pub max_connections: usize,
    /// Most controllers at once; an admin-queue Connect past it is answered
    /// "Connect Controller Busy" and counted.
    pub max_controllers: usize,
}

impl Default for TgtParams {
    fn default() -> Self {
        TgtParams {
            digests: true,
            max_io_queues: 16,
            idle_spins: 200,
            max_connections: 4096,
            max_controllers: 1024,
        }
    }
}

/// A listening address (SPDK `spdk_nvmf_listener`).
#[derive(Debug, Clone)]
pub struct Listener {
    /// Transport type, address family and address.
    pub trid: TransportId,
    pub portid: u16,
    /// Serves only the discovery subsystem (the 8009 discovery port).
    pub discovery_only: bool,
    /// The transport's part of this listener's discovery log entries
    /// (`listener_discover`): TRTYPE, ADRFAM, TRADDR, TRSVCID, TREQ, TSAS.
    pub entry: DiscoveryEntry,
    /// What controllers connected here report (`cdata_init`).
    pub limits: TransportLimits,
}

/// Connect parameters that a new queue pair takes on.
#[derive(Debug)]
pub struct Connected {
    pub ctrlr: Arc<Ctrlr>,
    pub qid: u16,
    /// 0's based submission queue size.
    pub sqsize: u16,
    /// SQ flow control disabled by the host (CATTR bit 2).
    pub sqflow_disabled: bool,
}

/// A refused Connect: status and DW0 (IATTR/IPO for Invalid Parameters).
#[derive(Debug, Clone, Copy)]
pub struct ConnectRefused {
    pub status: Status,
    pub dw0: u32,
}

fn refuse_sqe(field_off: u32) -> ConnectRefused {
    ConnectRefused {
        status: Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true),
        dw0: field_off,
    }
}
fn refuse_data(field_off: u32) -> ConnectRefused {
    ConnectRefused {
        status: Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true),
        dw0: (1 << 16) | field_off,
    }
}

/// The target.
#[derive(Debug)]
pub struct Tgt {
    pub params: TgtParams,
    /// Copy-on-write at run time (management plane): a change swaps an `Arc`
    /// and hands it to the connected controllers (`Ctrlr::update_subsys`).
    subsystems: RwLock<Vec<Arc<Subsystem>>>,
    listeners: Mutex<Vec<Listener>>,
    ctrlrs: Mutex<Vec<Arc<Ctrlr>>>,
    next_cntlid: AtomicU16,
    genctr: AtomicU64,
    epoch: Instant,
    /// Count I/O per namespace (and time it) on qpairs opened from now on.
    io_stats: AtomicBool,
    poll_groups: Mutex<Vec<Arc<crate::stats::PollGroupStats>>>,
    /// Transport connections accepted and not yet closed.
    live_connections: AtomicUsize,
    refused_connections: AtomicU64,
    refused_controllers: AtomicU64,
}

/// What the target refused at its bounds ([`TgtParams::max_connections`],
/// [`TgtParams::max_controllers`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    pub connections: u64,
    pub controllers: u64,
}

impl Tgt {
    /// A target with the discovery subsystem.
    pub fn new(params: TgtParams) -> Self {
        Tgt {
            params,
            subsystems: RwLock::new(vec![Arc::new(Subsystem::discovery())]),
            listeners: Mutex::new(Vec::new()),
            ctrlrs: Mutex::new(Vec::new()),
            next_cntlid: AtomicU16::new(1),
            genctr: AtomicU64::new(0),
            epoch: Instant::now(),
            io_stats: AtomicBool::new(false),
            poll_groups: Mutex::new(Vec::new()),
            live_connections: AtomicUsize::new(0),
            refused_connections: AtomicU64::new(0),
            refused_controllers: AtomicU64::new(0),
        }
    }

    /// Adds an NVM subsystem (before serving).
    pub fn add_subsystem(&mut self, s: Subsystem) -> Result<Arc<Subsystem>, SubsystemError> {
        self.insert_subsystem(s)
    }

    /// Adds an NVM subsystem while serving (management plane).
    pub fn insert_subsystem(&self, s: Subsystem) -> Result<Arc<Subsystem>, SubsystemError> {
        let mut subs = self
            .subsystems
            .write()
            .map_err(|_| SubsystemError::Poisoned)?;
        if subs.iter().any(|x| x.nqn == s.nqn) || s.subtype == SubsystemType::Discovery {
            return Err(SubsystemError::BadNqn(s.nqn));
        }
        let s = Arc::new(s);
        subs.push(s.clone());
        self.genctr.fetch_add(1, Ordering::Relaxed);
        Ok(s)
    }

    /// Replaces the subsystem of the same NQN (a changed copy); new connections
    /// get the new one, connected controllers see its namespaces too (added
    /// ones with a Namespace Attribute Changed AEN and the Changed Namespace
    /// List, as SPDK). `false` if absent.
    pub fn replace_subsystem(&self, s: Subsystem) -> bool {
        let new = {
            let Ok(mut subs) = self.subsystems.write() else {
                return false;
            };
            let Some(slot) = subs
                .iter_mut()
                .find(|x| x.nqn == s.nqn && x.subtype == SubsystemType::Nvme)
            else {
                return false;
            };
            *slot = Arc::new(s);
            self.genctr.fetch_add(1, Ordering::Relaxed);
            slot.clone()
        };
        for c in self.ctrlrs() {
            if c.subsys.nqn == new.nqn {
                c.update_subsys(new.clone());
            }
        }
        true
    }

    /// Removes an NVM subsystem; connected controllers keep it until they go.
    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let mut subs = self.subsystems.write().ok()?;
        let i = subs
            .iter()
            .position(|x| x.nqn == nqn && x.subtype == SubsystemType::Nvme)?;
        self.genctr.fetch_add(1, Ordering::Relaxed);
        Some(subs.remove(i))
    }

    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let subs = self.subsystems.read().ok()?;
        subs.iter().find(|s| s.nqn == nqn).cloned()
    }
    /// The NVM subsystems (not discovery).
    /// (A snapshot: the list may change while serving.)
    pub fn subsystems(&self) -> impl Iterator<Item = Arc<Subsystem>> {
        let snapshot: Vec<Arc<Subsystem>> = match self.subsystems.read() {
            Ok(subs) => subs
                .iter()
                .filter(|s| s.subtype == SubsystemType::Nvme)
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        snapshot.into_iter()
    }

    /// Registers a bound listener with its transport's discovery entry template
    /// and limits; returns its port id.
    pub fn add_listener(
        &self,
        trid: TransportId,
        discovery_only: bool,
        entry: DiscoveryEntry,
        limits: TransportLimits,
    ) -> u16 {
        let Ok(mut l) = self.listeners.lock() else {
            return 0;
        };
        let portid = l.len() as u16 + 1;
        l.push(Listener {
            trid,
            portid,
            discovery_only,
            entry,
            limits,
        });
        self.genctr.fetch_add(1, Ordering::Relaxed);
        portid
    }
    pub fn listeners(&self) -> Vec<Listener> {
        self.listeners.lock().map(|l| l.clone()).unwrap_or_default()
    }
    /// (discovery only, limits) of listener `portid`; a qpair without a
    /// listener (joined in memory) gets the defaults.
    fn listener_info(&self, portid: u16) -> (bool, TransportLimits) {
        let Ok(l) = self.listeners.lock() else {
            return (false, TransportLimits::default());
        };
        l.iter()
            .find(|l| l.portid == portid)
            .map_or((false, TransportLimits::default()), |l| {
                (l.discovery_only, l.limits)
            })
    }

    /// Turns per-namespace I/O counters and latency histograms on or off for
    /// qpairs that open a namespace from now on (metrics, `bdev_get_iostat`).
    pub fn set_io_stats(&self, on: bool) {
        self.io_stats.store(on, Ordering::Relaxed);
    }
    pub fn io_stats(&self) -> bool {
        self.io_stats.load(Ordering::Relaxed)
    }
    /// Registers a poll group's counters (its thread calls this once).
    pub fn register_poll_group(&self, s: Arc<crate::stats::PollGroupStats>) {
        if let Ok(mut g) = self.poll_groups.lock() {
            g.push(s);
        }
    }
    /// The poll groups' counters, in start order.
    pub fn poll_group_stats(&self) -> Vec<Arc<crate::stats::PollGroupStats>> {
        self.poll_groups
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }
    /// Live controllers (admin queue connected).
    /// A transport connection was accepted: false (and counted) when the
    /// target already holds `max_connections`; the caller closes it then.
    pub fn admit_connection(&self) -> bool {
        let r = self
            .live_connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.params.max_connections).then_some(n + 1)
            });
        if r.is_err() {
            self.refused_connections.fetch_add(1, Ordering::Relaxed);
            warn!(
                max = self.params.max_connections,
                "nvmf: connection refused, the target holds max_connections"
            );
        }
        r.is_ok()
    }

    /// An admitted connection closed.
    pub fn connection_closed(&self) {
        let _ = self
            .live_connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Transport connections held now.
    pub fn connections(&self) -> usize {
        self.live_connections.load(Ordering::Relaxed)
    }

    /// Refusals at the target's bounds since start.
    pub fn refusals(&self) -> Refusals {
        Refusals {
            connections: self.refused_connections.load(Ordering::Relaxed),
            controllers: self.refused_controllers.load(Ordering::Relaxed),
        }
    }

    pub fn ctrlrs(&self) -> Vec<Arc<Ctrlr>> {
        self.ctrlrs.lock().map(|r| r.clone()).unwrap_or_default()
    }
    /// Fails (disconnects) the controllers of `subnqn` that `pred` selects;
    /// returns how many.
    pub fn disconnect(&self, subnqn: &str, why: &str, pred: impl Fn(&Ctrlr) -> bool) -> usize {
        let mut n = 0;
        for c in self.ctrlrs() {
            if c.subsys.nqn == subnqn && pred(&c) {
                c.fail(why);
                n += 1;
            }
        }
        n
    }
    /// Unregisters listener `trid` (the socket stays bound: the transport has no
    /// stop-listen; no subsystem accepts connections through it any more unless
    /// it is registered again). Returns whether it was registered.
    pub fn remove_listener(&self, trid: &TransportId) -> bool {
        let Ok(mut l) = self.listeners.lock() else {
            return false;
        };
        let n = l.len();
        l.retain(|x| &x.trid != trid);
        self.genctr.fetch_add(1, Ordering::Relaxed);
        n != l.len()
    }
    /// The trid of listener `portid`.
    pub fn listener_trid(&self, portid: u16) -> Option<TransportId> {
        self.listeners
            .lock()
            .ok()?
            .iter()
            .find(|l| l.portid == portid)
            .map(|l| l.trid.clone())
    }

    /// Milliseconds since the target was created (the time base of keep-alive).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The discovery log generation counter.
    pub fn genctr(&self) -> u64 {
        self.genctr.load(Ordering::Relaxed)
    }

    /// The discovery log page for `hostnqn`: one entry per (subsystem the host may
    /// use, I/O listener).
    pub fn discovery_log_page(&self, hostnqn: &str) -> Vec<u8> {
        let listeners = self.listeners();
        let mut entries = Vec::new();
        for s in self.subsystems() {
            if !s.host_allowed(hostnqn) {
                continue;
            }
            for l in listeners
                .iter()
                .filter(|l| !l.discovery_only && s.listener_allowed(&l.trid))
            {
                let mut e = l.entry.clone();
                e.subtype = SubType::Nvme;
                e.subnqn = s.nqn.clone();
                e.portid = l.portid;
                entries.push(e);
            }
        }
        DiscoveryLog {
            genctr: self.genctr(),
            recfmt: 0,
            entries,
        }
        .to_bytes()
    }

    /// Handles Fabrics Connect arriving on listener `portid`.
    pub fn connect(
        &self,
        sqe: &Sqe,
        data: &[u8],
        portid: u16,
    ) -> Result<Connected, ConnectRefused> {
        let generic = |g| ConnectRefused {
            status: Status::generic(g).with_dnr(true),
            dw0: 0,
        };
        if sqe.connect_recfmt() != 0 {
            return Err(ConnectRefused {
                status: Status::fabrics(FabricsStatus::IncompatibleFormat).with_dnr(true),
                dw0: 0,
            });
        }
        let Ok(cd) = ConnectData::from_bytes(data) else {
            return Err(generic(GenericStatus::DataSglLengthInvalid));
        };
        let qid = sqe.connect_qid();
        let sqsize = sqe.connect_sqsize();
        let subnqn = cd.subnqn().unwrap_or("");
        let hostnqn = cd.hostnqn().unwrap_or("");
        let Some(subsys) = self.subsystem(subnqn) else {
            warn!(subnqn, hostnqn, "connect: unknown subsystem");
            return Err(refuse_data(256));
        };
        let (discovery_only, limits) = self.listener_info(portid);
        if subsys.subtype == SubsystemType::Nvme && discovery_only {
            warn!(subnqn, "connect: NVM subsystem on the discovery-only port");
            return Err(refuse_data(256));
        }
        if let Some(trid) = self.listener_trid(portid) {
            if !subsys.listener_allowed(&trid) {
                warn!(subnqn, trid = %trid.uri(), "connect: subsystem does not listen here");
                return Err(refuse_data(256));
            }
        }
        if hostnqn.is_empty() {
            return Err(refuse_data(512));
        }
        if !subsys.host_allowed(hostnqn) {
            warn!(subnqn, hostnqn, "connect: host not allowed");
            return Err(ConnectRefused {
                status: Status::fabrics(FabricsStatus::InvalidHost).with_dnr(true),
                dw0: 0,
            });
        }
        // SQSIZE is 0's based: at least 2 entries, at most MQES + 1
        if sqsize == 0 || sqsize >= MAX_QUEUE_DEPTH {
            return Err(refuse_sqe(44));
        }
        let cattr = sqe.connect_cattr();
        let sqflow_disabled = cattr & 0x4 != 0;
        if qid == 0 {
            if cd.cntlid() != 0xffff {
                return Err(refuse_data(16));
            }
            let kato = sqe.connect_kato();
            let Ok(mut reg) = self.ctrlrs.lock() else {
                return Err(generic(GenericStatus::InternalError));
            };
            if reg.len() >= self.params.max_controllers {
                self.refused_controllers.fetch_add(1, Ordering::Relaxed);
                warn!(
                    subnqn,
                    hostnqn,
                    max = self.params.max_controllers,
                    "connect: controller refused, the target holds max_controllers"
                );
                return Err(ConnectRefused {
                    status: Status::fabrics(FabricsStatus::ControllerBusy),
                    dw0: 0,
                });
            }
            let cntlid = self.alloc_cntlid(&reg);
            let ctrlr = Arc::new(
                Ctrlr::new(
                    cntlid,
                    subsys.clone(),
                    hostnqn,
                    cd.hostid(),
                    kato,
                    if subsys.subtype == SubsystemType::Discovery {
                        0
                    } else {
                        self.params.max_io_queues
                    },
                    self.now_ms(),
                )
                .with_limits(limits)
                .with_portid(portid),
            );
            reg.push(ctrlr.clone());
            info!(
                cntlid,
                subnqn, hostnqn, kato, "controller created (admin queue connected)"
            );
            return Ok(Connected {
                ctrlr,
                qid,
                sqsize,
                sqflow_disabled,
            });
        }
        let cntlid = cd.cntlid();
        let ctrlr = {
            let Ok(reg) = self.ctrlrs.lock() else {
                return Err(generic(GenericStatus::InternalError));
            };
            reg.iter()
                .find(|c| c.cntlid == cntlid && c.subsys.nqn == subnqn)
                .cloned()
        };
        let Some(ctrlr) = ctrlr else {
            warn!(
                cntlid,
                subnqn, "connect: I/O queue for an unknown controller"
            );
            return Err(refuse_data(16));
        };
        if ctrlr.hostnqn != hostnqn {
            return Err(refuse_data(512));
        }
        if !ctrlr.is_ready() {
            return Err(generic(GenericStatus::CommandSequenceError));
        }
        if !ctrlr.claim_qid(qid) {
            warn!(cntlid, qid, "connect: bad or duplicate I/O queue id");
            return Err(refuse_sqe(42));
        }
        Ok(Connected {
            ctrlr,
            qid,
            sqsize,
            sqflow_disabled,
        })
    }

    fn alloc_cntlid(&self, reg: &[Arc<Ctrlr>]) -> u16 {
        // 1..=0xffef are valid dynamic controller ids
        loop {
            let id = self.next_cntlid.fetch_add(1, Ordering::Relaxed);
            let id = if (1..=0xffef).contains(&id) {
                id
            } else {
                self.next_cntlid.store(2, Ordering::Relaxed);
                1
            };
            if !reg.iter().any(|c| c.cntlid == id) {
                return id;
            }
        }
    }

    /// Drops a controller from the registry (its admin queue went away).
    pub fn remove_ctrlr(&self, ctrlr: &Arc<Ctrlr>) {
        if let Ok(mut reg) = self.ctrlrs.lock() {
            reg.retain(|c| !Arc::ptr_eq(c, ctrlr));
        }
    }
    /// Live controllers.
    pub fn ctrlr_count(&self) -> usize {
        self.ctrlrs.lock().map(|r| r.len()).unwrap_or(0)
    }
}

impl DiscoveryService for Tgt {
    fn discovery_log_page(&self, hostnqn: &str) -> Vec<u8> {
        Tgt::discovery_log_page(self, hostnqn)
    }
}

/// Is `nqn` the discovery NQN?
pub fn is_discovery_nqn(nqn: &str) -> bool {
    nqn == DISCOVERY_NQN
}
