//! The NVMe-oF host library: discover, connect an admin queue and I/O queues,
//! identify, read/write with buffers (SGL: in-capsule or transport data blocks),
//! queue depth (pipelined submissions), keep-alive, orderly shutdown.
//!
//! Each [`Queue`] is one connection of a host transport
//! ([`crate::transport::HostTransport`]; NVMe/TCP's is
//! [`crate::tcp::TcpHostTransport`], the default of the `SocketAddr` entry
//! points); [`Queue::progress`] moves data both ways.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme::cmd::ConnectData;
use nvme::identify::{ActiveNsList, Cns, IdentifyController, IdentifyNamespace};
use nvme::log::{DiscoveryEntry, DiscoveryLog, LogPageId, DISC_ENTRY_LEN, DISC_HDR_LEN};
use nvme::{AdminOpcode, IoOpcode, Sqe, Status};
use tracing::debug;

use crate::subsystem::DISCOVERY_NQN;
use crate::tcp::TcpHostTransport;
use crate::transport::{HostQueue, HostQueueParams, HostTransport, QueueError, TransportId};

/// Host errors.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("{what} failed: {name} ({status:?})")]
    Status {
        what: &'static str,
        status: Status,
        /// The status code's name (fabrics names for Connect).
        name: &'static str,
    },
    #[error("connection terminated ({0})")]
    Terminated(&'static str),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("protocol: {0}")]
    Protocol(&'static str),
}

pub type Result<T> = std::result::Result<T, HostError>;

/// Host options.
#[derive(Debug, Clone)]
pub struct HostOpts {
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub hdgst: bool,
    pub ddgst: bool,
    /// Keep-alive timeout asked for at Connect (ms, 0 = none).
    pub kato_ms: u32,
    /// Ask the target to disable SQ flow control (lets it use C2H SUCCESS).
    pub disable_sqflow: bool,
    /// How long to wait for a response.
    pub timeout: Duration,
}

impl Default for HostOpts {
    fn default() -> Self {
        HostOpts {
            hostnqn: default_hostnqn(),
            hostid: [0x11; 16],
            hdgst: false,
            ddgst: false,
            kato_ms: 0,
            disable_sqflow: true,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A host NQN derived from the machine id (or a fixed one).
pub fn default_hostnqn() -> String {
    let id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let id = id.trim();
    if id.len() >= 32 {
        format!(
            "nqn.2014-08.org.nvmexpress:uuid:{}-{}-{}-{}-{}",
            &id[0..8],
            &id[8..12],
            &id[12..16],
            &id[16..20],
            &id[20..32]
        )
    } else {
        "nqn.2024-01.io.dpustack:host".to_string()
    }
}

/// A completed command.
pub use crate::transport::HostCompletion as Completion;

impl From<QueueError> for HostError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::Io(e) => HostError::Io(e),
            QueueError::Terminated(w) => HostError::Terminated(w),
            QueueError::Timeout(w) => HostError::Timeout(w),
        }
    }
}

/// One queue (admin or I/O): a transport connection ([`HostQueue`]) plus the
/// command ids and completions of the host library.
pub struct Queue {
    tq: Box<dyn HostQueue>,
    pub qid: u16,
    free_cids: Vec<u16>,
    depth: u16,
    /// Largest write carried in the capsule.
    pub in_capsule: u32,
    done: VecDeque<Completion>,
    timeout: Duration,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("qid", &self.qid).finish()
    }
}

impl Queue {
    /// Opens an NVMe/TCP connection to `addr` and completes ICReq/ICResp.
    pub fn open(addr: SocketAddr, opts: &HostOpts, qid: u16, depth: u16) -> Result<Queue> {
        Self::open_with(&TcpHostTransport, &TransportId::tcp(addr), opts, qid, depth)
    }

    /// Opens a queue's connection over `transport` to `trid`.
    pub fn open_with(
        transport: &dyn HostTransport,
        trid: &TransportId,
        opts: &HostOpts,
        qid: u16,
        depth: u16,
    ) -> Result<Queue> {
        let tq = transport.connect(
            trid,
            &HostQueueParams {
                hdgst: opts.hdgst,
                ddgst: opts.ddgst,
                timeout: opts.timeout,
                qid,
                depth,
            },
        )?;
        Ok(Queue {
            tq,
            qid,
            free_cids: (0..depth).rev().collect(),
            depth,
            in_capsule: 8192,
            done: VecDeque::new(),
            timeout: opts.timeout,
        })
    }

    /// Negotiated digests.
    pub fn digests(&self) -> wire::nvme_tcp::Digests {
        self.tq.digests()
    }
    pub fn depth(&self) -> u16 {
        self.depth
    }
    /// Commands in flight.
    pub fn outstanding(&self) -> usize {
        self.depth as usize - self.free_cids.len()
    }
    /// Whether another command can be submitted.
    pub fn can_submit(&self) -> bool {
        !self.free_cids.is_empty()
    }

    /// Submits a command (CID assigned here). Returns the CID.
    pub fn submit(&mut self, mut sqe: Sqe, write: &[u8], read_len: u32) -> Result<u16> {
        let Some(cid) = self.free_cids.pop() else {
            return Err(HostError::Protocol("queue full"));
        };
        sqe.set_cid(cid);
        if let Err(e) = self.tq.submit(sqe, write, read_len, self.in_capsule) {
            self.free_cids.push(cid);
            debug!(%e, "submit refused");
            return Err(HostError::Protocol("submit refused by the transport"));
        }
        Ok(cid)
    }

    /// Moves data both ways; with `block`, waits (up to 100 ms) for something to
    /// happen first. Returns the number of new completions.
    pub fn progress(&mut self, block: bool) -> Result<usize> {
        let before = self.done.len();
        let r = self.tq.progress(block, &mut self.done);
        for c in self.done.range(before..) {
            let cid = c.cqe.cid();
            if cid < self.depth && !self.free_cids.contains(&cid) {
                self.free_cids.push(cid);
            }
        }
        r?;
        Ok(self.done.len() - before)
    }

    /// Takes one completion, if any arrived.
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }
    /// Returns a completion's buffer to the connection's pool. A completion's
    /// data comes in a pooled vector that fits it, and one is grown only when
    /// none does: an application that must not allocate on the I/O path gives
    /// the queue its vectors up front this way (twice the queue depth, each
    /// with the capacity of its largest read).
    pub fn recycle(&mut self, v: Vec<u8>) {
        self.tq.recycle(v);
    }

    /// Submits and waits for this command's completion.
    pub fn exec(&mut self, sqe: Sqe, write: &[u8], read_len: u32) -> Result<Completion> {
        let cid = self.submit(sqe, write, read_len)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.done.iter().position(|c| c.cqe.cid() == cid) {
                if let Some(c) = self.done.remove(i) {
                    return Ok(c);
                }
            }
            if Instant::now() > deadline {
                return Err(HostError::Timeout("command completion"));
            }
            self.progress(true)?;
        }
    }

    /// Fabrics Connect on this queue. Returns the controller id.
    pub fn connect(
        &mut self,
        opts: &HostOpts,
        subnqn: &str,
        cntlid: u16,
        sqsize: u16,
        kato_ms: u32,
    ) -> Result<u16> {
        let mut sqe = Sqe::connect(0, self.qid, sqsize, kato_ms);
        if opts.disable_sqflow {
            sqe.set_connect_cattr(0x4);
        }
        let data = ConnectData::new(opts.hostid, cntlid, subnqn, &opts.hostnqn);
        let c = self.exec(sqe, data.as_bytes(), 0)?;
        check("Connect", &c)?;
        Ok(c.cqe.connect_cntlid())
    }
}

fn check(what: &'static str, c: &Completion) -> Result<()> {
    let s = c.cqe.status();
    if s.is_success() {
        Ok(())
    } else {
        let name = if what == "Connect" {
            s.fabrics_name()
        } else {
            s.name()
        };
        Err(HostError::Status {
            what,
            status: s,
            name,
        })
    }
}

/// What Identify Controller said.
#[derive(Debug, Clone)]
pub struct CtrlrIdentity {
    pub cntlid: u16,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    pub subnqn: String,
    pub nn: u32,
    pub mdts: u8,
    pub ioccsz: u32,
    pub cntrltype: u8,
    pub version: u32,
    pub raw: Vec<u8>,
}

/// What Identify Namespace said.
#[derive(Debug, Clone, Copy)]
pub struct NsIdentity {
    pub nsid: u32,
    pub blocks: u64,
    pub block_size: u32,
    pub nguid: [u8; 16],
}

fn text(s: Option<&str>) -> String {
    s.unwrap_or("(not UTF-8)").to_string()
}

/// A connected controller: an admin queue and I/O queues.
#[derive(Debug)]
pub struct Controller {
    pub trid: TransportId,
    pub subnqn: String,
    pub cntlid: u16,
    pub admin: Queue,
    pub io: Vec<Queue>,
    pub identity: Option<CtrlrIdentity>,
    pub cap: u64,
    opts: HostOpts,
    last_ka: Instant,
}

impl Controller {
    /// Connects over NVMe/TCP to `addr`: see [`Controller::connect_with`].
    pub fn connect(
        addr: SocketAddr,
        subnqn: &str,
        opts: &HostOpts,
        io_queues: u16,
        depth: u16,
    ) -> Result<Controller> {
        let trid = TransportId::tcp(addr);
        Self::connect_with(&TcpHostTransport, &trid, subnqn, opts, io_queues, depth)
    }

    /// Connects the admin queue over `transport` to `trid`, enables the
    /// controller and identifies it; then connects `io_queues` I/O queues of
    /// `depth` entries each.
    pub fn connect_with(
        transport: &dyn HostTransport,
        trid: &TransportId,
        subnqn: &str,
        opts: &HostOpts,
        io_queues: u16,
        depth: u16,
    ) -> Result<Controller> {
        let mut admin = Queue::open_with(transport, trid, opts, 0, 32)?;
        let cntlid = admin.connect(opts, subnqn, 0xffff, 31, opts.kato_ms)?;
        let mut c = Controller {
            trid: trid.clone(),
            subnqn: subnqn.to_string(),
            cntlid,
            admin,
            io: Vec::new(),
            identity: None,
            cap: 0,
            opts: opts.clone(),
            last_ka: Instant::now(),
        };
        c.cap = c.property_get(0x0, true)?;
        let discovery = subnqn == DISCOVERY_NQN;
        // CC: EN, CSS NVM, MPS 4 KiB, IOSQES 6, IOCQES 4
        let cc: u64 = if discovery {
            1
        } else {
            1 | (6 << 16) | (4 << 20)
        };
        c.property_set(0x14, cc)?;
        let deadline = Instant::now() + opts.timeout;
        loop {
            let csts = c.property_get(0x1c, false)?;
            if csts & 2 != 0 {
                return Err(HostError::Protocol("controller fatal status (CSTS.CFS)"));
            }
            if csts & 1 != 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(HostError::Timeout("CSTS.RDY"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let id = c.identify_ctrlr()?;
        let in_capsule = (id.ioccsz * 16).saturating_sub(64);
        c.admin.in_capsule = in_capsule.min(8192);
        c.identity = Some(id);
        if !discovery && io_queues > 0 {
            let granted = c.set_num_queues(io_queues)?;
            let mqes = (c.cap & 0xffff) as u16 + 1;
            let depth = depth.clamp(1, mqes.saturating_sub(1).max(1));
            for qid in 1..=io_queues.min(granted) {
                let mut q = Queue::open_with(transport, trid, opts, qid, depth)?;
                q.in_capsule = in_capsule;
                // SQSIZE (0's based) one larger than our depth, as Linux does
                q.connect(opts, subnqn, cntlid, depth.min(mqes - 1), 0)?;
                c.io.push(q);
            }
        }
        Ok(c)
    }

    pub fn property_get(&mut self, off: u32, size8: bool) -> Result<u64> {
        let c = self.admin.exec(Sqe::property_get(0, off, size8), &[], 0)?;
        check("Property Get", &c)?;
        Ok(c.cqe.result64())
    }
    pub fn property_set(&mut self, off: u32, value: u64) -> Result<()> {
        let c = self
            .admin
            .exec(Sqe::property_set(0, off, false, value), &[], 0)?;
        check("Property Set", &c)
    }

    /// Identify Controller.
    pub fn identify_ctrlr(&mut self) -> Result<CtrlrIdentity> {
        let c = self
            .admin
            .exec(Sqe::identify(0, Cns::Controller, 0), &[], 4096)?;
        check("Identify Controller", &c)?;
        let id = IdentifyController::from_bytes(&c.data)
            .map_err(|_| HostError::Protocol("short Identify data"))?;
        Ok(CtrlrIdentity {
            cntlid: id.cntlid(),
            serial: text(id.sn()),
            model: text(id.mn()),
            firmware: text(id.fr()),
            subnqn: text(id.subnqn()),
            nn: id.nn(),
            mdts: id.mdts(),
            ioccsz: id.ioccsz(),
            cntrltype: id.cntrltype(),
            version: id.ver(),
            raw: c.data,
        })
    }

    /// Active namespace IDs.
    pub fn active_namespaces(&mut self) -> Result<Vec<u32>> {
        let c = self
            .admin
            .exec(Sqe::identify(0, Cns::ActiveNsList, 0), &[], 4096)?;
        check("Identify Active NS List", &c)?;
        let l = ActiveNsList::from_bytes(&c.data)
            .map_err(|_| HostError::Protocol("short Identify data"))?;
        Ok(l.nsids())
    }

    /// Identify Namespace.
    pub fn identify_ns(&mut self, nsid: u32) -> Result<NsIdentity> {
        let c = self
            .admin
            .exec(Sqe::identify(0, Cns::Namespace, nsid), &[], 4096)?;
        check("Identify Namespace", &c)?;
        let ns = IdentifyNamespace::from_bytes(&c.data)
            .map_err(|_| HostError::Protocol("short Identify data"))?;
        let block_size = match ns.block_size() {
            Some(bs) if bs <= 1 << 16 => bs,
            _ => return Err(HostError::Protocol("unsupported LBA data size")),
        };
        Ok(NsIdentity {
            nsid,
            blocks: ns.nsze(),
            block_size,
            nguid: ns.nguid(),
        })
    }

    /// Set Features: Number of Queues. Returns the granted I/O queue count.
    pub fn set_num_queues(&mut self, n: u16) -> Result<u16> {
        let mut sqe = Sqe::admin(AdminOpcode::SetFeatures, 0, 0);
        sqe.set_cdw10(0x07);
        let v = (n.max(1) - 1) as u32;
        sqe.set_cdw11(v | (v << 16));
        let c = self.admin.exec(sqe, &[], 0)?;
        check("Set Features (Number of Queues)", &c)?;
        let dw0 = c.cqe.dw0();
        Ok(((dw0 & 0xffff).min(dw0 >> 16) + 1) as u16)
    }

    /// Get Log Page: `len` bytes (a multiple of 4) of log `lid` from byte `offset`.
    pub fn get_log_page(
        &mut self,
        lid: impl Into<LogPageId>,
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>> {
        let sqe = Sqe::get_log_page(0, 0, lid.into(), len, offset);
        let c = self.admin.exec(sqe, &[], len)?;
        check("Get Log Page", &c)?;
        Ok(c.data)
    }

    /// Sends Keep Alive.
    pub fn keep_alive(&mut self) -> Result<()> {
        let c = self
            .admin
            .exec(Sqe::admin(AdminOpcode::KeepAlive, 0, 0), &[], 0)?;
        self.last_ka = Instant::now();
        check("Keep Alive", &c)
    }
    /// Sends Keep Alive if half the KATO passed since the last one.
    pub fn maybe_keep_alive(&mut self) -> Result<()> {
        let kato = self.opts.kato_ms as u64;
        if kato > 0 && self.last_ka.elapsed() >= Duration::from_millis(kato / 2) {
            self.keep_alive()?;
        }
        Ok(())
    }

    /// Reads `nlb` blocks at `slba` on I/O queue `q` (blocking).
    pub fn read(&mut self, q: usize, nsid: u32, slba: u64, nlb: u32, bs: u32) -> Result<Vec<u8>> {
        let queue = self
            .io
            .get_mut(q)
            .ok_or(HostError::Protocol("no such I/O queue"))?;
        let c = queue.exec(read_sqe(nsid, slba, nlb), &[], nlb * bs)?;
        check("Read", &c)?;
        Ok(c.data)
    }
    /// Writes `data` (a whole number of blocks) at `slba` on I/O queue `q` (blocking).
    pub fn write(&mut self, q: usize, nsid: u32, slba: u64, data: &[u8], bs: u32) -> Result<()> {
        let nlb = (data.len() / bs as usize) as u32;
        let queue = self
            .io
            .get_mut(q)
            .ok_or(HostError::Protocol("no such I/O queue"))?;
        let c = queue.exec(write_sqe(nsid, slba, nlb), data, 0)?;
        check("Write", &c)
    }
    /// Runs any I/O command on queue `q` and returns its completion (status unchecked).
    pub fn io_exec(
        &mut self,
        q: usize,
        sqe: Sqe,
        write: &[u8],
        read_len: u32,
    ) -> Result<Completion> {
        let queue = self
            .io
            .get_mut(q)
            .ok_or(HostError::Protocol("no such I/O queue"))?;
        queue.exec(sqe, write, read_len)
    }

    /// Orderly shutdown: CC.SHN = normal, wait for CSTS.SHST = complete.
    pub fn shutdown(mut self) -> Result<()> {
        let discovery = self.subnqn == DISCOVERY_NQN;
        let cc: u64 = if discovery {
            1
        } else {
            1 | (6 << 16) | (4 << 20)
        };
        self.property_set(0x14, cc | (1 << 14))?;
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            let csts = self.property_get(0x1c, false)?;
            if (csts >> 2) & 3 == 2 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HostError::Timeout("CSTS.SHST"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// An NVM Read SQE (CID is set at submit).
pub fn read_sqe(nsid: u32, slba: u64, nlb: u32) -> Sqe {
    Sqe::rw(IoOpcode::Read, 0, nsid, slba, nlb)
}
/// An NVM Write SQE.
pub fn write_sqe(nsid: u32, slba: u64, nlb: u32) -> Sqe {
    Sqe::rw(IoOpcode::Write, 0, nsid, slba, nlb)
}

/// Discovery: connects to the discovery subsystem at `addr`, reads the whole
/// discovery log page (header first, then all records), disconnects.
pub fn discover(addr: SocketAddr, opts: &HostOpts) -> Result<(u64, Vec<DiscoveryEntry>)> {
    discover_with(&TcpHostTransport, &TransportId::tcp(addr), opts)
}

/// [`discover`] over any host transport.
pub fn discover_with(
    transport: &dyn HostTransport,
    trid: &TransportId,
    opts: &HostOpts,
) -> Result<(u64, Vec<DiscoveryEntry>)> {
    let mut c = Controller::connect_with(transport, trid, DISCOVERY_NQN, opts, 0, 0)?;
    let hdr = c.get_log_page(LogPageId::Discovery, 0, DISC_HDR_LEN as u32)?;
    let (genctr, numrec, _) =
        DiscoveryLog::parse_header(&hdr).map_err(|_| HostError::Protocol("bad discovery log"))?;
    let numrec = numrec.min(1000) as usize;
    let len = DISC_HDR_LEN + numrec * DISC_ENTRY_LEN;
    let all = c.get_log_page(LogPageId::Discovery, 0, len as u32)?;
    // the generation counter must not have moved between the two reads
    if all.get(0..8) != hdr.get(0..8) {
        return Err(HostError::Protocol("discovery log changed while reading"));
    }
    let entries = (0..numrec)
        .map(|i| DiscoveryEntry::parse(all.get(DISC_HDR_LEN + i * DISC_ENTRY_LEN..).unwrap_or(&[])))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| HostError::Protocol("bad discovery log"))?;
    let _ = c.shutdown();
    Ok((genctr, entries))
}
