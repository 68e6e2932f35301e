//! The management service (DAOS's pool and container services on one
//! engine): pools (UUID, label, size, one shard per target), containers
//! (UUID, label, properties), pool/container handles, snapshots. Runs on its
//! own thread; every change is fanned out to the targets (which own the
//! stores) and recorded in `engine.meta` in the data directory (written to a
//! temporary file, fsynced, renamed).
//!
//! Order of durable steps: a pool or container is created in the stores
//! first and recorded second (a crash in between leaves unrecorded files,
//! which the next start ignores); it is unrecorded first and destroyed
//! second.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::hlc::SharedHlc;
use super::target::{CtlOp, CtlOut, TargetMsg};
use crate::rpc::codec::{Reader, Writer};
use crate::rpc::frame::{encode_reply, split_body};
use crate::rpc::msg::{ContInfo, NameRef, PoolInfo, Reply, Request};
use crate::rpc::tcp::{ConnId, ReplySender};
use crate::rpc::{HeaderRepr, Status, WireError};
use crate::types::{Epoch, SpaceInfo, Uuid};

/// Smallest shard a pool may give a target.
pub const MIN_TARGET_SIZE: u64 = 1 << 20;
const META_MAGIC: &[u8; 8] = b"DOBJMETA";
const META_VERSION: u32 = 1;

/// A message to the management thread.
pub enum MgmtMsg {
    Rpc {
        conn: ConnId,
        hdr: HeaderRepr,
        body: Vec<u8>,
    },
    ConnClosed(ConnId),
    Stop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContMeta {
    pub uuid: Uuid,
    pub label: String,
    pub props: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMeta {
    pub uuid: Uuid,
    pub label: String,
    pub size: u64,
    pub conts: Vec<ContMeta>,
}

/// What `engine.meta` holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    pub targets: u32,
    pub pools: Vec<PoolMeta>,
}

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut w = Writer::new(&mut v);
        w.raw(META_MAGIC).u32(META_VERSION).u32(self.targets);
        w.count(self.pools.len());
        for p in &self.pools {
            w.uuid(p.uuid.as_bytes()).str(&p.label).u64(p.size);
            w.count(p.conts.len());
            for c in &p.conts {
                w.uuid(c.uuid.as_bytes()).str(&c.label).count(c.props.len());
                for (k, val) in &c.props {
                    w.str(k).str(val);
                }
            }
        }
        v
    }

    fn decode(b: &[u8]) -> Result<Meta, WireError> {
        let mut r = Reader::new(b);
        if r.bytes(8)? != META_MAGIC {
            return Err(WireError::BadMagic);
        }
        let v = r.u32()?;
        if v != META_VERSION {
            return Err(WireError::BadVersion(v as u8));
        }
        let targets = r.u32()?;
        let n = r.count(1 << 20, 29)?;
        let mut pools = Vec::with_capacity(n);
        for _ in 0..n {
            let uuid = Uuid::from_bytes(r.uuid()?);
            let label = r.str(4096)?;
            let size = r.u64()?;
            let nc = r.count(1 << 20, 24)?;
            let mut conts = Vec::with_capacity(nc);
            for _ in 0..nc {
                let uuid = Uuid::from_bytes(r.uuid()?);
                let label = r.str(4096)?;
                let np = r.count(1 << 16, 8)?;
                let mut props = Vec::with_capacity(np);
                for _ in 0..np {
                    props.push((r.str(4096)?, r.str(1 << 16)?));
                }
                conts.push(ContMeta { uuid, label, props });
            }
            pools.push(PoolMeta {
                uuid,
                label,
                size,
                conts,
            });
        }
        r.finish()?;
        Ok(Meta { targets, pools })
    }

    /// Reads `dir/engine.meta` (`None` if there is none yet).
    pub fn load(dir: &Path) -> std::io::Result<Option<Meta>> {
        let p = dir.join("engine.meta");
        match std::fs::read(&p) {
            Ok(b) => Meta::decode(&b).map(Some).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", p.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `dir/engine.meta` atomically and durably.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join("engine.meta.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&self.encode())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join("engine.meta"))?;
        std::fs::File::open(dir)?.sync_all()
    }
}

/// Where target `t`'s shard of `pool` lives.
pub fn shard_dir(data_dir: &Path, pool: Uuid, t: usize) -> PathBuf {
    data_dir
        .join("pools")
        .join(pool.to_string())
        .join(format!("t{t}"))
}

struct PoolHdl {
    pool: Uuid,
    conn: ConnId,
}

struct ContHdl {
    pool: Uuid,
    cont: Uuid,
    conn: ConnId,
    poh: u64,
}

/// When the engine aggregates (DAOS runs VOS aggregation in the background
/// on epochs old enough that no reader at a non-snapshot epoch needs them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregationPolicy {
    /// Time between two passes over every container; `None`: never (space of
    /// overwritten versions is then reclaimed only by destroying the container).
    pub interval: Option<Duration>,
    /// A pass aggregates up to `now - delay`: reads at epochs younger than
    /// that (and at every snapshot) keep their versions.
    pub delay: Duration,
}

impl Default for AggregationPolicy {
    fn default() -> Self {
        AggregationPolicy {
            interval: Some(Duration::from_secs(10)),
            delay: Duration::from_secs(30),
        }
    }
}

/// The management thread's state.
pub struct Mgmt {
    data_dir: PathBuf,
    meta: Meta,
    targets: Vec<super::target::TargetTx>,
    replies: ReplySender,
    hlc: Arc<SharedHlc>,
    next_hdl: u64,
    pohs: HashMap<u64, PoolHdl>,
    cohs: HashMap<u64, ContHdl>,
    aggregation: AggregationPolicy,
    map_versions: Arc<super::MapVersions>,
}

type Answer = Result<Reply, Status>;

impl Mgmt {
    pub fn new(
        data_dir: PathBuf,
        meta: Meta,
        targets: Vec<super::target::TargetTx>,
        replies: ReplySender,
        hlc: Arc<SharedHlc>,
    ) -> Self {
        Mgmt {
            data_dir,
            meta,
            targets,
            replies,
            hlc,
            // handles are not small integers: a stale or guessed one misses
            next_hdl: 0x5eed_0000_0000_0001 ^ (std::process::id() as u64) << 20,
            pohs: HashMap::new(),
            cohs: HashMap::new(),
            aggregation: AggregationPolicy::default(),
            map_versions: Arc::default(),
        }
    }

    /// Where open container handles are recorded with their pool's label
    /// (for the network threads' stale-map check).
    pub fn with_map_versions(mut self, m: Arc<super::MapVersions>) -> Self {
        self.map_versions = m;
        self
    }

    /// Sets when the engine aggregates.
    pub fn with_aggregation(mut self, p: AggregationPolicy) -> Self {
        self.aggregation = p;
        self
    }

    /// One aggregation pass: every container of every pool, on every target,
    /// up to `now - delay`. Returns the versions dropped and bytes freed.
    pub fn aggregate_all(&self) -> (u64, u64) {
        let now = self.hlc.now();
        let delay = self.aggregation.delay.as_nanos() as u64;
        let Some(upto) = now.0.checked_sub(delay).filter(|&e| e > 0) else {
            return (0, 0);
        };
        let (mut versions, mut bytes) = (0, 0);
        for p in &self.meta.pools {
            for c in &p.conts {
                let r = self.fan_out(|_| CtlOp::Aggregate {
                    pool: p.uuid,
                    cont: c.uuid,
                    upto: Epoch(upto),
                });
                match r {
                    Ok(outs) => {
                        for o in outs {
                            if let CtlOut::Aggregated(st) = o {
                                versions += st.versions_removed;
                                bytes += st.bdev_bytes_freed + st.inline_bytes_freed;
                            }
                        }
                    }
                    Err(st) => {
                        warn!(pool = %p.label, cont = %c.label, status = ?st, "aggregation failed")
                    }
                }
            }
        }
        if versions > 0 {
            debug!(versions, bytes, upto, "aggregated");
        }
        (versions, bytes)
    }

    /// Opens every recorded pool's shards on the targets (engine start).
    pub fn open_pools(&mut self) -> Result<(), Status> {
        for p in self.meta.pools.clone() {
            let per = p.size / self.targets.len() as u64;
            self.fan_out(|t| CtlOp::OpenPool {
                pool: p.uuid,
                dir: shard_dir(&self.data_dir, p.uuid, t),
                size: per,
                create: false,
            })?;
            info!(pool = %p.uuid, label = %p.label, conts = p.conts.len(), "pool opened");
        }
        Ok(())
    }

    pub fn run(mut self, rx: Receiver<MgmtMsg>) {
        let mut next_pass = self.aggregation.interval.map(|i| Instant::now() + i);
        loop {
            let m = match next_pass {
                None => match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                },
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => {
                        self.aggregate_all();
                        next_pass = self.aggregation.interval.map(|i| Instant::now() + i);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                },
            };
            match m {
                MgmtMsg::Stop => break,
                MgmtMsg::ConnClosed(conn) => self.conn_closed(conn),
                MgmtMsg::Rpc { conn, hdr, body } => {
                    let (args, bulk) = split_body(&hdr, &body);
                    let ans = match Request::parse(hdr.opcode, args, bulk.len()) {
                        Ok(req) => self.handle(conn, req),
                        Err(e) => {
                            debug!(%hdr, error = %e, "malformed management request");
                            Err(Status::Proto)
                        }
                    };
                    let mut frame = Vec::new();
                    match ans {
                        Ok(rep) => {
                            encode_reply(&mut frame, hdr.rpc_id, hdr.opcode, Status::Ok, &rep, &[])
                        }
                        Err(st) => {
                            encode_reply(&mut frame, hdr.rpc_id, hdr.opcode, st, &Reply::Empty, &[])
                        }
                    }
                    self.replies.send(conn, frame);
                }
            }
        }
    }

    /// Sends one control operation to every target and waits for all.
    fn fan_out(&self, mk: impl Fn(usize) -> CtlOp) -> Result<Vec<CtlOut>, Status> {
        // all targets work in parallel; answers are collected in order
        let mut rxs = Vec::with_capacity(self.targets.len());
        for (t, q) in self.targets.iter().enumerate() {
            let (tx, rx) = channel();
            q.send(TargetMsg::Ctl {
                op: mk(t),
                reply: tx,
            })
            .map_err(|_| Status::Shutdown)?;
            rxs.push(rx);
        }
        let mut outs = Vec::with_capacity(rxs.len());
        let mut first_err = None;
        for rx in rxs {
            match rx.recv().unwrap_or(Err(Status::Shutdown)) {
                Ok(o) => outs.push(o),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(outs),
        }
    }

    fn save(&self) -> Result<(), Status> {
        self.meta.save(&self.data_dir).map_err(|e| {
            warn!(error = %e, "writing engine.meta failed");
            Status::Io
        })
    }

    fn pool_idx(&self, r: &NameRef) -> Result<usize, Status> {
        self.meta
            .pools
            .iter()
            .position(|p| match r {
                NameRef::Uuid(u) => p.uuid.as_bytes() == u,
                NameRef::Label(l) => &p.label == l,
            })
            .ok_or(Status::NonExist)
    }

    fn pool_of(&self, poh: u64) -> Result<usize, Status> {
        let h = self.pohs.get(&poh).ok_or(Status::NoHandle)?;
        self.meta
            .pools
            .iter()
            .position(|p| p.uuid == h.pool)
            .ok_or(Status::NoHandle)
    }

    fn pool_info(&self, i: usize) -> Result<PoolInfo, Status> {
        let p = &self.meta.pools[i];
        let spaces = self.fan_out(|_| CtlOp::Space { pool: p.uuid })?;
        let used = spaces
            .iter()
            .map(|o| match o {
                CtlOut::Space(s) => used_bytes(s),
                _ => 0,
            })
            .sum();
        Ok(PoolInfo {
            uuid: *p.uuid.as_bytes(),
            label: p.label.clone(),
            size: p.size,
            used,
            targets: self.targets.len() as u32,
            conts: p.conts.len() as u32,
        })
    }

    fn cont_info(&self, pool: Uuid, c: &ContMeta) -> Result<ContInfo, Status> {
        let snaps = match self.targets.first() {
            Some(q) => {
                let (tx, rx) = channel();
                q.send(TargetMsg::Ctl {
                    op: CtlOp::SnapList { pool, cont: c.uuid },
                    reply: tx,
                })
                .map_err(|_| Status::Shutdown)?;
                match rx.recv().map_err(|_| Status::Shutdown)?? {
                    CtlOut::Snapshots(v) => v.into_iter().map(|s| s.epoch.0).collect(),
                    _ => Vec::new(),
                }
            }
            None => Vec::new(),
        };
        Ok(ContInfo {
            uuid: *c.uuid.as_bytes(),
            label: c.label.clone(),
            props: c.props.clone(),
            snapshots: snaps,
        })
    }

    fn close_coh(&mut self, coh: u64) {
        self.map_versions.close_coh(coh);
        if self.cohs.remove(&coh).is_some() {
            let _ = self.fan_out(|_| CtlOp::CloseHandle { coh });
        }
    }

    fn conn_closed(&mut self, conn: ConnId) {
        let cohs: Vec<u64> = self
            .cohs
            .iter()
            .filter(|(_, h)| h.conn == conn)
            .map(|(k, _)| *k)
            .collect();
        for c in cohs {
            self.close_coh(c);
        }
        self.pohs.retain(|_, h| h.conn != conn);
    }

    fn new_hdl(&mut self) -> u64 {
        self.next_hdl = self.next_hdl.wrapping_add(0x9e37_79b9_7f4a_7c15) | 1;
        self.next_hdl
    }

    fn handle(&mut self, conn: ConnId, req: Request) -> Answer {
        match req {
            Request::Ping => Ok(Reply::Empty),
            Request::PoolCreate { label, size } => self.pool_create(label, size),
            Request::PoolList => {
                let mut v = Vec::new();
                for i in 0..self.meta.pools.len() {
                    v.push(self.pool_info(i)?);
                }
                Ok(Reply::Pools(v))
            }
            Request::PoolQuery { pool } => {
                let i = self.pool_idx(&pool)?;
                Ok(Reply::Pool(self.pool_info(i)?))
            }
            Request::PoolDestroy { pool, force } => self.pool_destroy(&pool, force),
            Request::PoolConnect { pool } => {
                let i = self.pool_idx(&pool)?;
                let uuid = self.meta.pools[i].uuid;
                let hdl = self.new_hdl();
                self.pohs.insert(hdl, PoolHdl { pool: uuid, conn });
                Ok(Reply::Handle {
                    hdl,
                    uuid: *uuid.as_bytes(),
                })
            }
            Request::PoolDisconnect { poh } => {
                self.pohs.remove(&poh).ok_or(Status::NoHandle)?;
                let cohs: Vec<u64> = self
                    .cohs
                    .iter()
                    .filter(|(_, h)| h.poh == poh)
                    .map(|(k, _)| *k)
                    .collect();
                for c in cohs {
                    self.close_coh(c);
                }
                Ok(Reply::Empty)
            }
            Request::ContCreate { poh, label, props } => {
                let i = self.pool_of(poh)?;
                if !label.is_empty() && self.meta.pools[i].conts.iter().any(|c| c.label == label) {
                    return Err(Status::Exists);
                }
                let pool = self.meta.pools[i].uuid;
                let cont = Uuid::new_v4();
                self.fan_out(|_| CtlOp::ContCreate { pool, cont })?;
                let c = ContMeta {
                    uuid: cont,
                    label,
                    props,
                };
                self.meta.pools[i].conts.push(c.clone());
                self.save()?;
                info!(%pool, %cont, label = %c.label, "container created");
                Ok(Reply::Cont(self.cont_info(pool, &c)?))
            }
            Request::ContDestroy { poh, cont, force } => {
                let i = self.pool_of(poh)?;
                let pool = self.meta.pools[i].uuid;
                let ci = cont_idx(&self.meta.pools[i].conts, &cont)?;
                let cuuid = self.meta.pools[i].conts[ci].uuid;
                let open: Vec<u64> = self
                    .cohs
                    .iter()
                    .filter(|(_, h)| h.cont == cuuid)
                    .map(|(k, _)| *k)
                    .collect();
                if !open.is_empty() && !force {
                    return Err(Status::Busy);
                }
                for c in open {
                    self.close_coh(c);
                }
                self.meta.pools[i].conts.remove(ci);
                self.save()?;
                self.fan_out(|_| CtlOp::ContDestroy { pool, cont: cuuid })?;
                info!(%pool, cont = %cuuid, "container destroyed");
                Ok(Reply::Empty)
            }
            Request::ContList { poh } => {
                let i = self.pool_of(poh)?;
                let pool = self.meta.pools[i].uuid;
                let mut v = Vec::new();
                for c in &self.meta.pools[i].conts {
                    v.push(self.cont_info(pool, c)?);
                }
                Ok(Reply::Conts(v))
            }
            Request::ContOpen { poh, cont } => {
                let i = self.pool_of(poh)?;
                let pool = self.meta.pools[i].uuid;
                let ci = cont_idx(&self.meta.pools[i].conts, &cont)?;
                let cuuid = self.meta.pools[i].conts[ci].uuid;
                let coh = self.new_hdl();
                self.fan_out(|_| CtlOp::OpenHandle {
                    coh,
                    pool,
                    cont: cuuid,
                })?;
                self.map_versions.open_coh(coh, &self.meta.pools[i].label);
                self.cohs.insert(
                    coh,
                    ContHdl {
                        pool,
                        cont: cuuid,
                        conn,
                        poh,
                    },
                );
                Ok(Reply::Handle {
                    hdl: coh,
                    uuid: *cuuid.as_bytes(),
                })
            }
            Request::ContClose { coh } => {
                if !self.cohs.contains_key(&coh) {
                    return Err(Status::NoHandle);
                }
                self.close_coh(coh);
                Ok(Reply::Empty)
            }
            Request::ContQuery { coh } => {
                let (pool, cont) = self.coh(coh)?;
                let c = self.cont_meta(pool, cont)?;
                Ok(Reply::Cont(self.cont_info(pool, &c)?))
            }
            Request::SnapCreate { coh } => {
                let (pool, cont) = self.coh(coh)?;
                let epoch = self.hlc.now();
                self.fan_out(|_| CtlOp::SnapCreate { pool, cont, epoch })?;
                Ok(Reply::Epoch(epoch.0))
            }
            Request::SnapList { coh } => {
                let (pool, cont) = self.coh(coh)?;
                let c = self.cont_meta(pool, cont)?;
                Ok(Reply::Epochs(self.cont_info(pool, &c)?.snapshots))
            }
            Request::SnapDestroy { coh, epoch } => {
                let (pool, cont) = self.coh(coh)?;
                self.fan_out(|_| CtlOp::SnapDestroy {
                    pool,
                    cont,
                    epoch: Epoch(epoch),
                })?;
                Ok(Reply::Empty)
            }
            // object I/O goes to the targets, never here
            _ => Err(Status::NoSys),
        }
    }

    fn coh(&self, coh: u64) -> Result<(Uuid, Uuid), Status> {
        let h = self.cohs.get(&coh).ok_or(Status::NoHandle)?;
        Ok((h.pool, h.cont))
    }

    fn cont_meta(&self, pool: Uuid, cont: Uuid) -> Result<ContMeta, Status> {
        self.meta
            .pools
            .iter()
            .find(|p| p.uuid == pool)
            .and_then(|p| p.conts.iter().find(|c| c.uuid == cont))
            .cloned()
            .ok_or(Status::NonExist)
    }

    fn pool_create(&mut self, label: String, size: u64) -> Answer {
        if label.is_empty() {
            return Err(Status::Invalid);
        }
        if self.meta.pools.iter().any(|p| p.label == label) {
            return Err(Status::Exists);
        }
        let n = self.targets.len() as u64;
        let per = size / n.max(1);
        if per < MIN_TARGET_SIZE {
            return Err(Status::Invalid);
        }
        // shards are sparse files: refuse a pool the file system cannot hold
        if let Some(free) = fs_free_bytes(&self.data_dir) {
            if size > free {
                warn!(
                    size,
                    free, "pool larger than the free space of the data directory"
                );
                return Err(Status::NoSpace);
            }
        }
        let uuid = Uuid::new_v4();
        let r = self.fan_out(|t| CtlOp::OpenPool {
            pool: uuid,
            dir: shard_dir(&self.data_dir, uuid, t),
            size: per,
            create: true,
        });
        if let Err(st) = r {
            let _ = self.fan_out(|t| CtlOp::DestroyPool {
                pool: uuid,
                dir: shard_dir(&self.data_dir, uuid, t),
            });
            let _ = std::fs::remove_dir_all(self.data_dir.join("pools").join(uuid.to_string()));
            return Err(st);
        }
        self.meta.pools.push(PoolMeta {
            uuid,
            label: label.clone(),
            size: per * n,
            conts: Vec::new(),
        });
        if let Err(st) = self.save() {
            self.meta.pools.pop();
            return Err(st);
        }
        info!(pool = %uuid, %label, size = per * n, "pool created");
        Ok(Reply::Pool(self.pool_info(self.meta.pools.len() - 1)?))
    }

    fn pool_destroy(&mut self, pool: &NameRef, force: bool) -> Answer {
        let i = self.pool_idx(pool)?;
        let uuid = self.meta.pools[i].uuid;
        let connected = self.pohs.values().any(|h| h.pool == uuid);
        if connected && !force {
            return Err(Status::Busy);
        }
        let cohs: Vec<u64> = self
            .cohs
            .iter()
            .filter(|(_, h)| h.pool == uuid)
            .map(|(k, _)| *k)
            .collect();
        for c in cohs {
            self.close_coh(c);
        }
        self.pohs.retain(|_, h| h.pool != uuid);
        let removed = self.meta.pools.remove(i);
        if let Err(st) = self.save() {
            self.meta.pools.insert(i, removed);
            return Err(st);
        }
        self.fan_out(|t| CtlOp::DestroyPool {
            pool: uuid,
            dir: shard_dir(&self.data_dir, uuid, t),
        })?;
        let _ = std::fs::remove_dir_all(self.data_dir.join("pools").join(uuid.to_string()));
        info!(pool = %uuid, "pool destroyed");
        Ok(Reply::Empty)
    }
}

fn cont_idx(conts: &[ContMeta], r: &NameRef) -> Result<usize, Status> {
    conts
        .iter()
        .position(|c| match r {
            NameRef::Uuid(u) => c.uuid.as_bytes() == u,
            NameRef::Label(l) => !l.is_empty() && &c.label == l,
        })
        .ok_or(Status::NonExist)
}

/// Free bytes (for unprivileged users) of the file system holding `dir`.
fn fs_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized,
    // writable statvfs for the duration of the call.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (r == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Bytes a shard uses: allocated bdev space plus inline values.
pub fn used_bytes(s: &SpaceInfo) -> u64 {
    s.bdev_total.saturating_sub(s.bdev_free) + s.inline_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_garbage() {
        let m = Meta {
            targets: 2,
            pools: vec![PoolMeta {
                uuid: Uuid::from_bytes([3; 16]),
                label: "tank".into(),
                size: 1 << 30,
                conts: vec![ContMeta {
                    uuid: Uuid::from_bytes([4; 16]),
                    label: "c1".into(),
                    props: vec![("layout".into(), "posix".into())],
                }],
            }],
        };
        let b = m.encode();
        assert_eq!(Meta::decode(&b), Ok(m));
        for cut in 0..b.len() {
            assert!(Meta::decode(&b[..cut]).is_err());
        }
    }
}
