//! # vos — the versioned object store of one target (DAOS VOS's role)
//!
//! An index in [redb](https://docs.rs/redb) (an embedded ACID store: copy-on-write
//! B-trees, checksummed pages, fsync'd commits) keyed
//! `(container, oid, dkey, akey, epoch)` (layout in [`keys`]), with MVCC: a read
//! at epoch `e` sees exactly the versions with epoch ≤ `e`; punches are
//! tombstones; single values are replaced whole; arrays are extents, newest wins
//! per record index, holes read as zeroes. Values larger than
//! [`VosConfig::inline_max`] live on a [`bdev`] in blocks handed out by an extent
//! allocator whose free map is persisted in the same index ([`alloc`]); smaller
//! values are inline in the index. Snapshots are epochs kept by aggregation
//! ([`Vos::aggregate`], semantics in `aggregate.rs`).
//!
//! ## Durability
//! Large values are written to the bdev (into blocks no committed index
//! references) as the update runs. A batch of updates and punches commits
//! through the redo log ([`wal`], [`VosConfig::wal`]): the bdev flush is
//! started, the batch's index changes are appended to the log as one record
//! and `fdatasync`ed while the flush runs, then the index transaction is
//! committed without an fsync (with [`VosConfig::wal_defer_index`]: kept
//! open for the next batch; a rollback replays the acknowledged records
//! from the log). Any other change (containers, snapshots,
//! aggregation: everything that frees blocks), a full log, or the log
//! turned off makes the commit a *checkpoint*: (1) bdev flush, (2) the
//! allocator's changed extents and counters into the open transaction, (3)
//! a durable (`Durability::Immediate`, fsync) index commit that also starts
//! a new log generation. At open, the log records of the index's generation
//! that it does not hold yet are replayed (the last one only if its bdev
//! values match their CRCs: its flush ran beside its record). A crash before
//! a batch's record is durable leaves neither the record nor an index that
//! references the new blocks, so they are free again at restart. With
//! `auto_commit` every mutating call commits before it returns; without it
//! the engine applies a batch of requests, calls `commit` once (group
//! commit) and replies only then. Reads inside an open batch see its changes.

pub(crate) mod aggregate;
pub(crate) mod alloc;
pub(crate) mod extent;
pub(crate) mod keys;
mod txn;
pub(crate) mod wal;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdev::{AlignedBuf, BdevIo, BlockDevice, IoBuf, IoChannel, IoType};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

use crate::types::{
    AKey, AggregateStats, Anchor, ContId, DKey, Epoch, FetchOut, Iod, IodType, ObjectId,
    ObjectStore, Recx, SgList, Snapshot, SpaceInfo, StoreError, StoreResult, EPOCH_MAX,
    MAX_KEY_LEN,
};
use alloc::Allocator;
use extent::Ext;
use keys::{Ver, T_AFTER, T_CHILD, T_EXT, T_PUNCH, T_SV};
use txn::{Tables, Txn};
use wal::{Tab, Wal};

const IDX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idx");
const FREE: TableDefinition<u64, u64> = TableDefinition::new("free");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// container → aggregated-up-to epoch
const CONTS: TableDefinition<&[u8], u64> = TableDefinition::new("conts");
/// container ‖ epoch (BE) → name (empty = unnamed)
const SNAPS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("snaps");
/// akey prefix → longest extent (records) ever written there: bounds the
/// backwards reach of an overlap scan.
const EXTMAX: TableDefinition<&[u8], u64> = TableDefinition::new("extmax");
/// Containers that have ever held a punch record (cont id → 1). A container
/// not in it has none, so reads skip the punch lookups at the object, dkey
/// and akey levels (three B-tree descents per fetch). Never cleared by
/// aggregation: being in it only costs those lookups.
const PUNCHED: TableDefinition<&[u8], u64> = TableDefinition::new("punched");

const FORMAT_VERSION: u64 = 1;

/// The redo log of the index at `index`: `index` + `.wal`.
pub fn wal_path(index: &Path) -> PathBuf {
    let mut p = index.as_os_str().to_owned();
    p.push(".wal");
    PathBuf::from(p)
}

/// Store configuration.
#[derive(Debug, Clone)]
pub struct VosConfig {
    /// Values (single values, array extents) larger than this many bytes go to the
    /// bdev; smaller ones are inline in the index.
    pub inline_max: usize,
    /// Commit (durably) at the end of every mutating call. Off: the caller batches
    /// and calls [`ObjectStore::commit`] (group commit).
    pub auto_commit: bool,
    /// The index's page cache (bytes).
    pub cache_bytes: usize,
    /// Largest value one iod may carry (bytes).
    pub max_value: u64,
    /// The latest-value cache in front of the index (bytes; 0 = none): the
    /// newest single value of akeys read at the latest epoch, so a repeated
    /// read needs no index range scan. Filled by [`ObjectStore::fetch_owned`]
    /// (the engine's fetch); when full, one miss in 16 is admitted, in place
    /// of the oldest entries.
    pub value_cache_bytes: usize,
    /// Commit batches of updates and punches through the redo log
    /// ([`wal`]: one `fdatasync` of an appended record, the index committed
    /// without an fsync and made durable at checkpoints). Off: every commit
    /// is a durable index commit. A log left by an earlier run is replayed
    /// at open either way.
    pub wal: bool,
    /// Redo log bytes after which a commit is a checkpoint (a durable index
    /// commit, after which the log starts over): bounds the replay at open
    /// and the index pages redb keeps unreclaimed between durable commits.
    pub wal_checkpoint_bytes: u64,
    /// Log records after which a commit is a checkpoint: redb's commits
    /// without fsync get slower the longer their run since the last durable
    /// one (it tracks the pages each of them freed).
    pub wal_checkpoint_records: u64,
    /// Between checkpoints, keep the index's write transaction open across
    /// the batches committed through the redo log instead of committing it
    /// (without fsync) after each one: a batch then costs its inserts and
    /// its log record, and redb's copy-on-write, checksums and page writes
    /// happen once per checkpoint (or when a read-only call comes after the
    /// batch, which commits the transaction then). Durability rests on the
    /// log record either way; only with `auto_commit` off.
    pub wal_defer_index: bool,
    /// [`Vos::commit_start`] leaves a batch with bdev values committing
    /// (bdev flush, log write + fdatasync) while the caller executes the
    /// next batch. Off (the default): `commit_start` commits synchronously.
    /// Measured on a quiet machine it did not help (ior-hard write lost 11 %,
    /// docs/obj.md "The durable write path").
    pub commit_pipeline: bool,
}

impl Default for VosConfig {
    fn default() -> Self {
        VosConfig {
            inline_max: 4096,
            auto_commit: true,
            cache_bytes: 64 << 20,
            max_value: 64 << 20,
            value_cache_bytes: 64 << 20,
            wal: true,
            wal_checkpoint_bytes: 32 << 20,
            wal_checkpoint_records: 64,
            wal_defer_index: true,
            commit_pipeline: false,
        }
    }
}

/// Where a value's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Loc {
    Inline(Vec<u8>),
    Bdev {
        off: u64,
        blocks: u64,
        len: u64,
        crc: u32,
    },
}

impl Loc {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Loc::Inline(d) => {
                out.push(0);
                out.extend_from_slice(d);
            }
            Loc::Bdev {
                off,
                blocks,
                len,
                crc,
            } => {
                out.push(1);
                out.extend_from_slice(&off.to_le_bytes());
                out.extend_from_slice(&blocks.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&crc.to_le_bytes());
            }
        }
    }
    fn decode(b: &[u8]) -> StoreResult<Loc> {
        let bad = || StoreError::Corrupt("bad value record".into());
        let (&t, rest) = b.split_first().ok_or_else(bad)?;
        let u = |r: std::ops::Range<usize>| -> StoreResult<u64> {
            Ok(u64::from_le_bytes(
                rest.get(r).ok_or_else(bad)?.try_into().map_err(|_| bad())?,
            ))
        };
        match t {
            0 => Ok(Loc::Inline(rest.to_vec())),
            1 => Ok(Loc::Bdev {
                off: u(0..8)?,
                blocks: u(8..16)?,
                len: u(16..24)?,
                crc: u32::from_le_bytes(
                    rest.get(24..28)
                        .ok_or_else(bad)?
                        .try_into()
                        .map_err(|_| bad())?,
                ),
            }),
            _ => Err(bad()),
        }
    }
    pub(crate) fn len(&self) -> u64 {
        match self {
            Loc::Inline(d) => d.len() as u64,
            Loc::Bdev { len, .. } => *len,
        }
    }
    fn inline_len(&self) -> u64 {
        match self {
            Loc::Inline(d) => d.len() as u64,
            Loc::Bdev { .. } => 0,
        }
    }
    fn bdev_extent(&self) -> Option<(u64, u64)> {
        match self {
            Loc::Bdev { off, blocks, .. } => Some((*off, *blocks)),
            Loc::Inline(_) => None,
        }
    }
}

/// An array extent record: `[rec_size u64][nr u64]` then the [`Loc`].
pub(crate) fn decode_ext(b: &[u8]) -> StoreResult<(u64, u64, Loc)> {
    let bad = || StoreError::Corrupt("bad extent record".into());
    let rs = u64::from_le_bytes(b.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let nr = u64::from_le_bytes(
        b.get(8..16)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    Ok((rs, nr, Loc::decode(&b[16..])?))
}

/// The value of any record kind: its [`Loc`] (punches have none).
pub(crate) fn record_loc(kind: keys::Kind, v: &[u8]) -> StoreResult<Option<Loc>> {
    Ok(match kind {
        keys::Kind::Single => Some(Loc::decode(v)?),
        keys::Kind::Extent(_) => Some(decode_ext(v)?.2),
        _ => None,
    })
}

pub(crate) fn ix<E: Display>(e: E) -> StoreError {
    StoreError::Index(e.to_string())
}

/// Read access to the index, from a read transaction or from the open write
/// transaction (object-safe, so the logic is written once).
pub(crate) trait Reader {
    /// Visit `[lo, hi)` in order while `f` returns true.
    fn scan(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()>;
    fn extmax(&self, akey_prefix: &[u8]) -> StoreResult<u64>;
    fn cont(&self, cont: ContId) -> StoreResult<Option<u64>>;
    fn snaps(&self, cont: ContId) -> StoreResult<Vec<Snapshot>>;
    /// The lowest epoch a change may have: above the aggregated epoch and above
    /// the newest snapshot (a snapshot's view never changes).
    fn write_floor(&self, cont: ContId) -> StoreResult<u64>;
    /// Whether the container of `prefix` (its first 16 bytes) has never held
    /// a punch (false for a prefix too short to name one).
    fn never_punched(&self, prefix: &[u8]) -> bool;
}

pub(crate) struct View<'a, I, X, C, S> {
    idx: &'a I,
    extmax: &'a X,
    conts: &'a C,
    snaps: &'a S,
    punched: &'a HashSet<[u8; 16]>,
}

impl<I, X, C, S> Reader for View<'_, I, X, C, S>
where
    I: ReadableTable<&'static [u8], &'static [u8]>,
    X: ReadableTable<&'static [u8], u64>,
    C: ReadableTable<&'static [u8], u64>,
    S: ReadableTable<&'static [u8], &'static [u8]>,
{
    fn scan(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        let it = match hi {
            Some(h) => self.idx.range::<&[u8]>(lo..h),
            None => self.idx.range::<&[u8]>(lo..),
        }
        .map_err(ix)?;
        for r in it {
            let (k, v) = r.map_err(ix)?;
            if !f(k.value(), v.value()) {
                break;
            }
        }
        Ok(())
    }
    fn extmax(&self, ap: &[u8]) -> StoreResult<u64> {
        Ok(self.extmax.get(ap).map_err(ix)?.map_or(0, |g| g.value()))
    }
    fn never_punched(&self, prefix: &[u8]) -> bool {
        prefix
            .get(..16)
            .and_then(|c| <[u8; 16]>::try_from(c).ok())
            .is_some_and(|c| !self.punched.contains(&c))
    }
    fn cont(&self, cont: ContId) -> StoreResult<Option<u64>> {
        Ok(self
            .conts
            .get(&cont.as_bytes()[..])
            .map_err(ix)?
            .map(|g| g.value()))
    }
    fn write_floor(&self, cont: ContId) -> StoreResult<u64> {
        let hwm = self.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
        let p = keys::cont_prefix(cont);
        let end = keys::prefix_end(&p);
        let last = match &end {
            Some(e) => self.snaps.range::<&[u8]>(p.as_slice()..e.as_slice()),
            None => self.snaps.range::<&[u8]>(p.as_slice()..),
        }
        .map_err(ix)?
        .next_back();
        let snap = match last {
            Some(r) => {
                let (k, _) = r.map_err(ix)?;
                k.value()
                    .get(16..24)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| StoreError::Corrupt("bad snapshot key".into()))?
            }
            None => 0,
        };
        Ok(hwm.max(snap))
    }
    fn snaps(&self, cont: ContId) -> StoreResult<Vec<Snapshot>> {
        let p = keys::cont_prefix(cont);
        let mut out = Vec::new();
        for r in self.snaps.range::<&[u8]>(p.as_slice()..).map_err(ix)? {
            let (k, v) = r.map_err(ix)?;
            if !k.value().starts_with(&p) {
                break;
            }
            let e = u64::from_be_bytes(
                k.value()
                    .get(16..24)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| StoreError::Corrupt("bad snapshot key".into()))?,
            );
            let name =
                (!v.value().is_empty()).then(|| String::from_utf8_lossy(v.value()).into_owned());
            out.push(Snapshot {
                epoch: Epoch(e),
                name,
            });
        }
        Ok(out)
    }
}

/// Largest staging buffer a store keeps between bdev writes or reads (a
/// value's blocks; bigger ones are allocated per I/O and freed).
const MAX_WBUF_KEEP: usize = (16 << 20) + (64 << 10);
/// Least start alignment of the staging buffers (the bdev may ask for more:
/// O_DIRECT wants its block size).
const STAGE_ALIGN: usize = 64;

/// Mutable state next to the index: allocator, bdev channel, counters.
pub(crate) struct St {
    pub(crate) alloc: Allocator,
    chan: Box<dyn IoChannel>,
    done: Vec<BdevIo>,
    bs: u64,
    can_flush: bool,
    bdev_dirty: bool,
    pub(crate) seq: u64,
    /// Highest epoch of any change (persisted: restarts an HLC above it).
    pub(crate) max_epoch: u64,
    pub(crate) inline_bytes: u64,
    /// The latest-value cache ([`VosConfig::value_cache_bytes`]).
    pub(crate) svc: SvCache,
    /// The bdev write staging buffer, reused (its allocation kept) from one
    /// write to the next: no allocation, page faults or zeroing of a fresh
    /// buffer per large value. Aligned as the bdev wants its buffers
    /// (O_DIRECT: the block size), so the bdev needs no bounce copy.
    wbuf: Option<AlignedBuf>,
    /// The same for bdev reads (the value is copied out of it).
    rbuf: Option<AlignedBuf>,
    /// The bdev's buffer alignment ([`BlockDevice::buf_align`]).
    align: usize,
    /// The flush [`St::start_flush`] started: `Some(None)` while it runs,
    /// `Some(Some(outcome))` once completed and not yet taken.
    flush_run: Option<Option<StoreResult<()>>>,
}

/// `ctx` of the flush [`St::start_flush`] starts (other I/O of the store
/// uses 0): its completion can arrive while a later batch's writes wait.
const FLUSH_CTX: u64 = u64::MAX;

/// The newest single value of recently read akeys: akey prefix → (epoch of
/// that version, where its bytes are). DAOS keeps its VOS trees in memory;
/// this keeps just what the engine's latest reads need. Rules that keep it
/// true: an entry is only made by a read at the latest epoch of a container
/// that never held a punch (so no punch hides it), used only by reads of
/// such containers at or above its epoch; an update drops the entries of the
/// akeys it writes; any other change of the index (punch, aggregation,
/// container create/destroy) and any rollback (abort, a failed commit)
/// drops them all.
#[derive(Debug, Default)]
pub(crate) struct SvCache {
    map: HashMap<Vec<u8>, (u64, Loc)>,
    bytes: usize,
    limit: usize,
    /// Misses offered while full (drives [`ADMIT_WHEN_FULL`]).
    full_puts: u32,
    /// Keys in the order they were admitted: the oldest goes first when room
    /// is needed (a key dropped since is skipped; compacted when mostly stale).
    order: VecDeque<Vec<u8>>,
}

/// When the latest-value cache is full, one offered entry in this many is
/// admitted (the oldest admitted entries make room for it); the others are not
/// kept. Admitting every miss (and shedding a quarter of the cache for it) made
/// a cyclic read of more keys than fit (mdtest-hard's read phase) churn it: an
/// entry lived less than one cycle, so most reads missed and paid the index
/// scan plus the insert and the shed (issue 12's profile: 41 % + 14 % of the
/// target). Sampled admission keeps most of what is cached for a cycle, so
/// about limit ÷ working set of the reads hit; a new hot set still replaces an
/// old one, ADMIT_WHEN_FULL times more slowly.
const ADMIT_WHEN_FULL: u32 = 16;

impl SvCache {
    fn cost(ap: &[u8], loc: &Loc) -> usize {
        ap.len() + loc.inline_len() as usize + 64
    }
    /// The cached newest version of `ap` if a read at `e` sees it.
    fn get(&self, ap: &[u8], e: u64) -> Option<&Loc> {
        self.map
            .get(ap)
            .filter(|(epoch, _)| *epoch <= e)
            .map(|(_, l)| l)
    }
    fn put(&mut self, ap: &[u8], epoch: u64, loc: &Loc) {
        let cost = Self::cost(ap, loc);
        if cost > self.limit {
            return;
        }
        if let Some((e, l)) = self.map.get_mut(ap) {
            // another version of a cached key: replaced in place
            let old = Self::cost(ap, l);
            if self.bytes - old + cost <= self.limit {
                (*e, *l) = (epoch, loc.clone());
                self.bytes = self.bytes - old + cost;
                return;
            }
        }
        self.remove(ap);
        if self.bytes + cost > self.limit {
            self.full_puts = self.full_puts.wrapping_add(1);
            if !self.full_puts.is_multiple_of(ADMIT_WHEN_FULL) {
                return;
            }
            self.make_room(cost);
        }
        self.map.insert(ap.to_vec(), (epoch, loc.clone()));
        self.order.push_back(ap.to_vec());
        self.bytes += cost;
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order.retain(|k| map.contains_key(k));
        }
    }
    fn remove(&mut self, ap: &[u8]) {
        if let Some((_, old)) = self.map.remove(ap) {
            self.bytes -= Self::cost(ap, &old);
        }
    }
    /// Makes room for `cost` bytes: drops the oldest admitted entries.
    fn make_room(&mut self, cost: usize) {
        while self.bytes + cost > self.limit {
            match self.order.pop_front() {
                Some(k) => self.remove(&k),
                None => {
                    self.clear();
                    return;
                }
            }
        }
    }
    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
        self.bytes = 0;
    }
}

impl St {
    fn io(&mut self, io: BdevIo) -> StoreResult<BdevIo> {
        self.submit(io)?;
        self.complete()
    }

    /// Submits one I/O (nothing else in flight).
    fn submit(&mut self, io: BdevIo) -> StoreResult<()> {
        let mut io = io;
        loop {
            match self.chan.submit(io) {
                Ok(()) => return Ok(()),
                Err(r) if matches!(r.error, bdev::Error::Busy) => {
                    io = r.io;
                    self.chan.poll(&mut self.done);
                    std::thread::yield_now();
                }
                Err(r) => return Err(StoreError::Bdev(r.error.to_string())),
            }
        }
    }

    /// Waits for the submitted I/O.
    fn complete(&mut self) -> StoreResult<BdevIo> {
        loop {
            self.sort_flush();
            if let Some(io) = self.done.pop() {
                return Self::status(io);
            }
            // blocks in the kernel (io_uring) rather than spinning: on a
            // machine with fewer cores than threads a spin steals the CPU from
            // the threads the I/O and the replies need
            if self.chan.wait(&mut self.done) > 0 {
                continue;
            }
            if self.chan.in_flight() == 0 {
                return Err(StoreError::Bdev("lost I/O".into()));
            }
        }
    }

    /// Moves a completion of the started flush out of `done`.
    fn sort_flush(&mut self) {
        if let Some(i) = self
            .done
            .iter()
            .position(|io| io.ctx == FLUSH_CTX && io.io_type == Some(IoType::Flush))
        {
            let io = self.done.swap_remove(i);
            self.flush_run = Some(Some(Self::status(io).map(|_| ())));
        }
    }

    fn status(io: BdevIo) -> StoreResult<BdevIo> {
        match io.status {
            bdev::IoStatus::Success => Ok(io),
            bdev::IoStatus::Failed(e) => Err(StoreError::Bdev(e.to_string())),
            bdev::IoStatus::Pending => Err(StoreError::Bdev("I/O not completed".into())),
        }
    }

    /// A staging buffer of `len` bytes: `kept` if it is large and aligned
    /// enough, else a new one.
    fn stage(kept: Option<AlignedBuf>, len: usize, align: usize) -> AlignedBuf {
        let mut b = match kept {
            Some(b) if b.capacity() >= len && b.align() >= align => b,
            _ => AlignedBuf::zeroed(len, align.max(STAGE_ALIGN)),
        };
        b.set_len(len);
        b
    }

    /// Keeps a staging buffer that came back with its I/O for the next one.
    fn keep(buf: Option<IoBuf>) -> Option<AlignedBuf> {
        match buf {
            Some(IoBuf::Aligned(b)) if b.capacity() <= MAX_WBUF_KEEP => Some(b),
            _ => None,
        }
    }

    /// Write `data` into `blocks` blocks at `off` (padded with zeroes).
    fn write(&mut self, off: u64, blocks: u64, data: &[u8]) -> StoreResult<()> {
        let len = (blocks * self.bs) as usize;
        let mut buf = Self::stage(self.wbuf.take(), len, self.align);
        buf[..data.len()].copy_from_slice(data);
        // only the padding of the last block is zeroed
        buf[data.len()..].fill(0);
        let io = self.io(BdevIo::write(off, blocks, vec![IoBuf::Aligned(buf)], 0))?;
        self.bdev_dirty = true;
        // the buffer comes back with the completed I/O
        self.wbuf = Self::keep(io.bufs.into_iter().next());
        Ok(())
    }

    fn flush(&mut self) -> StoreResult<()> {
        if self.bdev_dirty && self.can_flush {
            self.io(BdevIo::flush(0))?;
        }
        self.bdev_dirty = false;
        Ok(())
    }

    /// Starts the bdev flush [`St::flush`] would do; true if one is running
    /// ([`St::finish_flush`] waits for it).
    fn start_flush(&mut self) -> StoreResult<bool> {
        let run = self.bdev_dirty && self.can_flush;
        if run {
            self.submit(BdevIo::flush(FLUSH_CTX))?;
            self.flush_run = Some(None);
            // a channel queues SQEs until polled: hand the flush to the
            // kernel now, so it runs beside the log's write and fdatasync
            // (without this poll it was submitted only when awaited, after
            // them); a completion polled here stays for `finish_flush`
            self.chan.poll(&mut self.done);
        }
        self.bdev_dirty = false;
        Ok(run)
    }

    /// Waits for the flush [`St::start_flush`] started (`Ok` if none).
    fn finish_flush(&mut self) -> StoreResult<()> {
        loop {
            self.sort_flush();
            match self.flush_run.take() {
                None => return Ok(()),
                Some(Some(r)) => return r,
                Some(None) => self.flush_run = Some(None),
            }
            if self.chan.wait(&mut self.done) == 0 && self.chan.in_flight() == 0 {
                self.flush_run = None;
                return Err(StoreError::Bdev("lost flush".into()));
            }
        }
    }

    /// Whether the started flush (if any) has completed; does not wait.
    fn flush_ready(&mut self) -> bool {
        if matches!(self.flush_run, Some(None)) {
            self.chan.poll(&mut self.done);
            self.sort_flush();
        }
        !matches!(self.flush_run, Some(None))
    }

    /// A value's bytes (bdev values are checked against their CRC-32C).
    pub(crate) fn load(&mut self, loc: &Loc) -> StoreResult<Vec<u8>> {
        match loc {
            Loc::Inline(d) => Ok(d.clone()),
            Loc::Bdev {
                off,
                blocks,
                len,
                crc,
            } => {
                // read into the kept staging buffer (not zeroed, no bounce
                // copy under O_DIRECT), then the value's bytes copied out
                let n = (blocks * self.bs) as usize;
                if *len as usize > n {
                    return Err(StoreError::Corrupt(format!(
                        "value of {len} B in {blocks} blocks"
                    )));
                }
                let buf = Self::stage(self.rbuf.take(), n, self.align);
                let io = self.io(BdevIo::read(*off, *blocks, vec![IoBuf::Aligned(buf)], 0))?;
                let buf = io.bufs.into_iter().next();
                let v = buf
                    .as_deref()
                    .map(|b| b[..*len as usize].to_vec())
                    .unwrap_or_default();
                self.rbuf = Self::keep(buf);
                if crc32c::crc32c(&v) != *crc {
                    return Err(StoreError::Corrupt(format!(
                        "checksum mismatch in bdev blocks {off}+{blocks}"
                    )));
                }
                Ok(v)
            }
        }
    }
}

/// What [`Vos::check`] found (it fails with [`StoreError::Corrupt`] otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReport {
    /// Index records.
    pub records: u64,
    /// Blocks referenced by records.
    pub used_blocks: u64,
    /// Blocks in the free map.
    pub free_blocks: u64,
    /// Inline bytes counted by walking the index.
    pub inline_bytes: u64,
}

/// The index tables of one read transaction.
struct ReadTables {
    idx: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    extmax: redb::ReadOnlyTable<&'static [u8], u64>,
    conts: redb::ReadOnlyTable<&'static [u8], u64>,
    snaps: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
}

/// The versioned store of one target.
pub struct Vos {
    db: Database,
    /// Tables of one read transaction, kept between reads while no batch is
    /// open (a batch's reads go through its write transaction; beginning a
    /// batch drops this, so a later read sees what it committed).
    rview: Option<ReadTables>,
    /// Containers that have held a punch (the [`PUNCHED`] table, in memory).
    punched: HashSet<[u8; 16]>,
    /// The open write transaction, with its index tables kept open.
    txn: Option<Txn>,
    st: St,
    cfg: VosConfig,
    path: PathBuf,
    bdev: Arc<dyn BlockDevice>,
    /// Set when an internal error rolled back an open batch.
    lost: Option<String>,
    /// The redo log ([`VosConfig::wal`]).
    wal: Option<Wal>,
    /// The open batch made a change the log does not record (anything but
    /// an update or a punch): its commit is a checkpoint.
    need_ckpt: bool,
    /// Changes in the open transaction that no `commit` has acknowledged yet.
    pending: bool,
    /// Acknowledged batches (redo log records) the open transaction holds
    /// and no redb commit does yet ([`VosConfig::wal_defer_index`]): a
    /// rollback must replay them from the log.
    deferred: u64,
    /// The commit [`Vos::commit_start`] left in flight.
    inflight: Option<Inflight>,
    /// Its outcome, when something else had to wait for it before the
    /// caller polled ([`Vos::commit_poll`] hands it out).
    commit_done: Option<StoreResult<()>>,
}

/// A batch's commit in flight: its log record's write + fdatasync and the
/// bdev flush run; the batch is acknowledged when both have completed.
#[derive(Debug)]
struct Inflight {
    lsn: u64,
    log: Option<StoreResult<()>>,
    flush: Option<StoreResult<()>>,
}

impl Drop for Vos {
    fn drop(&mut self) {
        // an open batch was never acknowledged: rolled back before the
        // database closes (redb's close makes everything committed durable,
        // with the redo log position the index records)
        self.rview = None;
        // a commit in flight completes first (the kernel still reads its
        // record; if it succeeds its batch is acknowledged)
        self.finish_inflight();
        // acknowledged batches held open are committed (redb's close then
        // makes them durable); if that fails they are still in the log
        let _ = self.settle();
        if let Some(t) = self.txn.take() {
            let _ = t.into_inner().abort();
        }
    }
}

impl std::fmt::Debug for Vos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vos")
            .field("path", &self.path)
            .field("bdev", &self.bdev.name())
            .finish()
    }
}

/// A read epoch: `EPOCH_MAX` and anything above are "latest".
fn read_epoch(e: Epoch) -> StoreResult<u64> {
    if e.0 == 0 {
        return Err(StoreError::BadEpoch(e, "epoch 0 is never valid"));
    }
    Ok(e.0)
}

/// A fetch's object, dkey, epoch and akeys checked; the epoch as read.
fn fetch_args_ok(oid: ObjectId, dkey: &DKey, epoch: Epoch, iods: &[Iod]) -> StoreResult<u64> {
    oid.validate()?;
    key_ok(&dkey.0, "dkey")?;
    let e = read_epoch(epoch)?;
    for iod in iods {
        key_ok(&iod.akey.0, "akey")?;
    }
    Ok(e)
}

fn key_ok(k: &[u8], what: &str) -> StoreResult<()> {
    if k.is_empty() {
        return Err(StoreError::InvalidArg(format!("empty {what}")));
    }
    if k.len() > MAX_KEY_LEN {
        return Err(StoreError::TooLarge {
            size: k.len() as u64,
            limit: MAX_KEY_LEN as u64,
        });
    }
    Ok(())
}

// ---- read logic over any Reader ------------------------------------------------

/// The newest punch at `prefix` with epoch ≤ `e`.
pub(crate) fn newest_punch(r: &dyn Reader, prefix: &[u8], e: u64) -> StoreResult<Option<Ver>> {
    if r.never_punched(prefix) {
        return Ok(None);
    }
    let lo = keys::ver_key(prefix, T_PUNCH, Ver::top(e));
    let hi = keys::with_tag(prefix, T_PUNCH + 1);
    let mut found = None;
    r.scan(&lo, Some(&hi), &mut |k, _| {
        found = Ver::parse(&k[k.len() - Ver::LEN..]);
        false
    })?;
    Ok(found)
}

/// The newest single value at `ap` with epoch ≤ `e` and newer than `floor`.
fn sv_at(r: &dyn Reader, ap: &[u8], e: u64, floor: Option<Ver>) -> StoreResult<Option<Loc>> {
    Ok(sv_ver_at(r, ap, e, floor)?.map(|(_, l)| l))
}

/// [`sv_at`] with the version found.
fn sv_ver_at(
    r: &dyn Reader,
    ap: &[u8],
    e: u64,
    floor: Option<Ver>,
) -> StoreResult<Option<(Ver, Loc)>> {
    let lo = keys::ver_key(ap, T_SV, Ver::top(e));
    let hi = keys::with_tag(ap, T_SV + 1);
    let mut found = None;
    r.scan(&lo, Some(&hi), &mut |k, v| {
        found = Some((Ver::parse(&k[k.len() - Ver::LEN..]), v.to_vec()));
        false
    })?;
    match found {
        Some((Some(ver), v)) if Some(ver) > floor => Ok(Some((ver, Loc::decode(&v)?))),
        _ => Ok(None),
    }
}

/// An extent found by a scan.
struct ExtRec {
    ext: Ext,
    rec_size: u64,
    loc: Loc,
}

/// Extents at `ap` visible candidates at `e` (epoch ≤ e, newer than `floor`)
/// overlapping `[lo, hi)`.
fn extents_in(
    r: &dyn Reader,
    ap: &[u8],
    e: u64,
    floor: Option<Ver>,
    lo: u64,
    hi: u64,
) -> StoreResult<Vec<ExtRec>> {
    let reach = r.extmax(ap)?;
    if reach == 0 {
        return Ok(Vec::new());
    }
    let start = lo.saturating_sub(reach - 1);
    let k_lo = keys::ext_key(ap, start, Ver::top(u64::MAX));
    let k_hi = if hi == u64::MAX {
        keys::with_tag(ap, T_EXT + 1)
    } else {
        let mut k = keys::with_tag(ap, T_EXT);
        k.extend_from_slice(&hi.to_be_bytes());
        k
    };
    let mut out = Vec::new();
    let mut err = None;
    r.scan(&k_lo, Some(&k_hi), &mut |k, v| {
        let tail = &k[ap.len() + 1..];
        let (Some(idx), Some(ver)) = (
            tail.get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes),
            tail.get(8..).and_then(Ver::parse),
        ) else {
            err = Some(StoreError::Corrupt("bad extent key".into()));
            return false;
        };
        if ver.epoch > e || Some(ver) <= floor {
            return true;
        }
        match decode_ext(v) {
            Ok((rec_size, nr, loc)) => {
                let ext = Ext { ver, idx, nr };
                if ext.idx < hi && ext.end() > lo {
                    out.push(ExtRec { ext, rec_size, loc });
                }
                true
            }
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Whether the akey at `ap` has anything visible at `e` above `floor`.
fn akey_visible(r: &dyn Reader, ap: &[u8], e: u64, floor: Option<Ver>) -> StoreResult<bool> {
    if sv_at(r, ap, e, floor)?.is_some() {
        return Ok(true);
    }
    let lo = keys::with_tag(ap, T_EXT);
    let hi = keys::with_tag(ap, T_EXT + 1);
    let mut vis = false;
    r.scan(&lo, Some(&hi), &mut |k, _| {
        if let Some(ver) = Ver::parse(&k[k.len() - Ver::LEN..]) {
            if ver.epoch <= e && Some(ver) > floor {
                vis = true;
                return false;
            }
        }
        true
    })?;
    Ok(vis)
}

/// The first key in `[lo, hi)`.
fn first_key(r: &dyn Reader, lo: &[u8], hi: Option<&[u8]>) -> StoreResult<Option<Vec<u8>>> {
    let mut out = None;
    r.scan(lo, hi, &mut |k, _| {
        out = Some(k.to_vec());
        false
    })?;
    Ok(out)
}

/// A visitor of [`walk_children`]: `(encoded child, child prefix)` → go on?
type ChildFn<'a> = dyn FnMut(&[u8], &[u8]) -> StoreResult<bool> + 'a;

/// Walk the children (dkeys under an object, akeys under a dkey) of `parent`
/// from the encoded child `after` (exclusive), calling `f(encoded child,
/// child prefix)` until it returns false. Returns whether the walk reached the end.
fn walk_children(
    r: &dyn Reader,
    parent: &[u8],
    after: Option<&[u8]>,
    f: &mut ChildFn<'_>,
) -> StoreResult<bool> {
    let base = keys::with_tag(parent, T_CHILD);
    let hi = keys::with_tag(parent, T_CHILD + 1);
    let mut lo = base.clone();
    if let Some(a) = after {
        lo.extend_from_slice(a);
        lo.push(T_AFTER);
    }
    loop {
        let Some(k) = first_key(r, &lo, Some(&hi))? else {
            return Ok(true);
        };
        let (_, n) = keys::dec(&k[base.len()..])
            .ok_or_else(|| StoreError::Corrupt("bad key encoding".into()))?;
        let child_prefix = &k[..base.len() + n];
        let enc = &k[base.len()..base.len() + n];
        if !f(enc, child_prefix)? {
            return Ok(false);
        }
        lo = child_prefix.to_vec();
        lo.push(T_AFTER);
    }
}

fn dkey_visible(r: &dyn Reader, dp: &[u8], e: u64, ofloor: Option<Ver>) -> StoreResult<bool> {
    let dfloor = ofloor.max(newest_punch(r, dp, e)?);
    let mut vis = false;
    walk_children(r, dp, None, &mut |_, ap| {
        let floor = dfloor.max(newest_punch(r, ap, e)?);
        vis = akey_visible(r, ap, e, floor)?;
        Ok(!vis)
    })?;
    Ok(vis)
}

/// List children of `parent` visible at `e` (dkeys if `dkeys`, else akeys).
fn list_children(
    r: &dyn Reader,
    parent: &[u8],
    e: u64,
    floor: Option<Ver>,
    dkeys: bool,
    anchor: &mut Anchor,
    limit: usize,
) -> StoreResult<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if anchor.eof || limit == 0 {
        return Ok(out);
    }
    let after = anchor.started.then(|| anchor.after.clone());
    let mut last = None;
    let done = walk_children(r, parent, after.as_deref(), &mut |enc, cp| {
        let vis = if dkeys {
            dkey_visible(r, cp, e, floor)?
        } else {
            let f = floor.max(newest_punch(r, cp, e)?);
            akey_visible(r, cp, e, f)?
        };
        if vis {
            let (raw, _) =
                keys::dec(enc).ok_or_else(|| StoreError::Corrupt("bad key encoding".into()))?;
            out.push(raw);
            last = Some(enc.to_vec());
        }
        Ok(out.len() < limit)
    })?;
    anchor.started = true;
    if let Some(l) = last {
        anchor.after = l;
    }
    anchor.eof = done;
    Ok(out)
}

/// Per recx of an array iod: the visible candidate extents and the pieces
/// that resolve it (newest wins), and the record size found (0 = nothing
/// visible). Extents of different record sizes are an error.
#[allow(clippy::type_complexity)]
fn array_pieces(
    r: &dyn Reader,
    ap: &[u8],
    e: u64,
    floor: Option<Ver>,
    iod: &Iod,
) -> StoreResult<(Vec<Vec<ExtRec>>, Vec<Vec<extent::Piece>>, u64)> {
    let mut size = 0u64;
    let mut recs_all = Vec::with_capacity(iod.recxs.len());
    let mut pieces_all = Vec::with_capacity(iod.recxs.len());
    for rx in &iod.recxs {
        if rx.nr == 0 {
            pieces_all.push(Vec::new());
            recs_all.push(Vec::new());
            continue;
        }
        let recs = extents_in(r, ap, e, floor, rx.idx, rx.end())?;
        let exts: Vec<Ext> = recs.iter().map(|x| x.ext).collect();
        let pieces = extent::resolve(&exts, rx.idx, rx.end());
        for p in &pieces {
            let rs = recs[p.src].rec_size;
            if size == 0 {
                size = rs;
            } else if size != rs {
                return Err(StoreError::InvalidArg(
                    "extents of different record sizes".into(),
                ));
            }
        }
        pieces_all.push(pieces);
        recs_all.push(recs);
    }
    Ok((recs_all, pieces_all, size))
}

/// Visible runs of an array at `e` and the newest visible extent's record size.
fn visible_runs(
    r: &dyn Reader,
    ap: &[u8],
    e: u64,
    floor: Option<Ver>,
) -> StoreResult<(Vec<(u64, u64)>, u64)> {
    let recs = extents_in(r, ap, e, floor, 0, u64::MAX)?;
    let exts: Vec<Ext> = recs.iter().map(|x| x.ext).collect();
    let pieces = extent::resolve(&exts, 0, u64::MAX);
    let rec_size = pieces
        .iter()
        .map(|p| &recs[p.src])
        .max_by_key(|x| x.ext.ver)
        .map_or(0, |x| x.rec_size);
    Ok((extent::runs(&pieces), rec_size))
}

impl Vos {
    /// Open (or create) the store whose index is the file `index_path`, its large
    /// values on `bdev`. A new index claims the whole bdev; an existing one must
    /// be reopened with a bdev of the same geometry.
    pub fn open(
        index_path: impl AsRef<Path>,
        bdev: Arc<dyn BlockDevice>,
        cfg: VosConfig,
    ) -> StoreResult<Vos> {
        let path = index_path.as_ref().to_path_buf();
        let db = Database::builder()
            .set_cache_size(cfg.cache_bytes)
            .create(&path)
            .map_err(ix)?;
        let chan = bdev
            .open_channel()
            .map_err(|e| StoreError::Bdev(e.to_string()))?;
        let bs = u64::from(bdev.block_size());
        let mut st = St {
            alloc: Allocator::new_empty(0),
            chan,
            done: Vec::new(),
            bs,
            can_flush: bdev.io_type_supported(IoType::Flush),
            bdev_dirty: false,
            seq: 0,
            max_epoch: 0,
            inline_bytes: 0,
            svc: SvCache {
                limit: cfg.value_cache_bytes,
                ..SvCache::default()
            },
            wbuf: None,
            rbuf: None,
            align: bdev.buf_align(),
            flush_run: None,
        };
        let txn = db.begin_write().map_err(ix)?;
        {
            // create every table
            txn.open_table(IDX).map_err(ix)?;
            txn.open_table(CONTS).map_err(ix)?;
            txn.open_table(SNAPS).map_err(ix)?;
            txn.open_table(EXTMAX).map_err(ix)?;
            let mut meta = txn.open_table(META).map_err(ix)?;
            let mut free = txn.open_table(FREE).map_err(ix)?;
            let got = |m: &redb::Table<&str, u64>, k: &str| -> StoreResult<Option<u64>> {
                Ok(m.get(k).map_err(ix)?.map(|g| g.value()))
            };
            match got(&meta, "format")? {
                None => {
                    meta.insert("format", FORMAT_VERSION).map_err(ix)?;
                    meta.insert("block_size", bs).map_err(ix)?;
                    meta.insert("bdev_blocks", bdev.num_blocks()).map_err(ix)?;
                    meta.insert("seq", 0).map_err(ix)?;
                    meta.insert("max_epoch", 0).map_err(ix)?;
                    meta.insert("inline_bytes", 0).map_err(ix)?;
                    st.alloc = Allocator::new_empty(bdev.num_blocks());
                    for (k, v) in st.alloc.take_dirty() {
                        if let Some(l) = v {
                            free.insert(k, l).map_err(ix)?;
                        }
                    }
                }
                Some(FORMAT_VERSION) => {
                    let obs = got(&meta, "block_size")?.unwrap_or(0);
                    let onb = got(&meta, "bdev_blocks")?.unwrap_or(0);
                    if obs != bs || onb != bdev.num_blocks() {
                        return Err(StoreError::InvalidArg(format!(
                            "bdev {} has {}×{} B blocks, the index was made for {onb}×{obs} B",
                            bdev.name(),
                            bdev.num_blocks(),
                            bs
                        )));
                    }
                    st.seq = got(&meta, "seq")?.unwrap_or(0);
                    st.max_epoch = got(&meta, "max_epoch")?.unwrap_or(0);
                    st.inline_bytes = got(&meta, "inline_bytes")?.unwrap_or(0);
                    let mut ext = Vec::new();
                    for r in free.iter().map_err(ix)? {
                        let (k, v) = r.map_err(ix)?;
                        ext.push((k.value(), v.value()));
                    }
                    st.alloc = Allocator::from_extents(onb, ext);
                }
                Some(v) => {
                    return Err(StoreError::Corrupt(format!("unknown index format {v}")));
                }
            }
        }
        let mut punched = HashSet::new();
        {
            let mut pt = txn.open_table(PUNCHED).map_err(ix)?;
            let mut meta = txn.open_table(META).map_err(ix)?;
            if meta.get("punch_tracking").map_err(ix)?.is_none() {
                // a store from before the table: any container may hold punches
                let conts = txn.open_table(CONTS).map_err(ix)?;
                for r in conts.iter().map_err(ix)? {
                    let (k, _) = r.map_err(ix)?;
                    pt.insert(k.value(), 1).map_err(ix)?;
                }
                meta.insert("punch_tracking", 1).map_err(ix)?;
            }
            for r in pt.iter().map_err(ix)? {
                let (k, _) = r.map_err(ix)?;
                let c = <[u8; 16]>::try_from(k.value())
                    .map_err(|_| StoreError::Corrupt("bad punched-container key".into()))?;
                punched.insert(c);
            }
        }
        txn.commit().map_err(ix)?;
        let mut v = Vos {
            db,
            rview: None,
            punched,
            txn: None,
            st,
            cfg,
            path,
            bdev,
            lost: None,
            wal: None,
            need_ckpt: false,
            pending: false,
            deferred: 0,
            inflight: None,
            commit_done: None,
        };
        v.replay_wal(None)?;
        Ok(v)
    }

    /// Applies the redo log's batches of the index's generation (what was
    /// acknowledged since the last checkpoint), commits them durably under a
    /// new generation, and opens the log for appending (if
    /// [`VosConfig::wal`]).
    ///
    /// Only the last record can be of a batch that was not acknowledged
    /// (the next record is appended only after a batch's log record, bdev
    /// flush and index commit all succeeded; a failure voids the
    /// generation), and its bdev values were flushed beside the record, not
    /// before it: its values are checked against their CRCs and the batch is
    /// dropped if one does not match (nothing of it was acknowledged).
    ///
    /// `below`: replay only the records below this lsn (a rollback of the
    /// open transaction at run time: they are all acknowledged, the CRC
    /// check of the last one is skipped).
    fn replay_wal(&mut self, below: Option<u64>) -> StoreResult<()> {
        let wpath = wal_path(&self.path);
        let (gen, done) = {
            let rt = self.db.begin_read().map_err(ix)?;
            let meta = rt.open_table(META).map_err(ix)?;
            let get =
                |k| -> StoreResult<u64> { Ok(meta.get(k).map_err(ix)?.map_or(0, |g| g.value())) };
            (get("wal_gen")?, get("wal_lsn")?)
        };
        let mut batches = Wal::scan(&wpath, gen)
            .map_err(|e| StoreError::Index(format!("redo log {}: {e}", wpath.display())))?;
        // what the index already holds (it records the last applied lsn:
        // redb's own commit when the database is closed made it durable)
        batches.retain(|b| b.lsn > done && below.is_none_or(|x| b.lsn < x));
        if let Some(last) = batches.last().filter(|_| below.is_none()) {
            let mut intact = true;
            for (tab, k, v) in &last.puts {
                if *tab != Tab::Idx {
                    continue;
                }
                let kind = keys::parse(k)
                    .ok_or_else(|| StoreError::Corrupt("redo log: bad key".into()))?
                    .kind;
                if let Some(loc @ Loc::Bdev { .. }) = record_loc(kind, v)? {
                    match self.st.load(&loc) {
                        Ok(_) => {}
                        Err(StoreError::Corrupt(_)) => {
                            intact = false;
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            if !intact {
                tracing::info!(index = %self.path.display(), "redo log: the last batch's values are not all on the bdev (not acknowledged): dropped");
                batches.pop();
            }
        }
        if batches.is_empty() && !self.cfg.wal {
            return Ok(());
        }
        // a new generation either way: the log is overwritten from its start
        let n = batches.len();
        let txn = self.db.begin_write().map_err(ix)?;
        let r = (|| -> StoreResult<()> {
            let mut idx = txn.open_table(IDX).map_err(ix)?;
            let mut extmax = txn.open_table(EXTMAX).map_err(ix)?;
            let mut pt = txn.open_table(PUNCHED).map_err(ix)?;
            for b in batches {
                for (tab, k, v) in &b.puts {
                    match tab {
                        Tab::Idx => {
                            let kind = keys::parse(k)
                                .ok_or_else(|| StoreError::Corrupt("redo log: bad key".into()))?
                                .kind;
                            if let Some((o, nb)) =
                                record_loc(kind, v)?.and_then(|l| l.bdev_extent())
                            {
                                if !self.st.alloc.take(o, nb) {
                                    return Err(StoreError::Corrupt(format!(
                                        "redo log: blocks {o}+{nb} of a logged value are not free"
                                    )));
                                }
                            }
                            idx.insert(k.as_slice(), v.as_slice()).map_err(ix)?;
                        }
                        Tab::Extmax => {
                            let n = v
                                .as_slice()
                                .try_into()
                                .map(u64::from_le_bytes)
                                .map_err(|_| StoreError::Corrupt("redo log: extmax".into()))?;
                            extmax.insert(k.as_slice(), n).map_err(ix)?;
                        }
                        Tab::Punched => {
                            let c = <[u8; 16]>::try_from(k.as_slice()).map_err(|_| {
                                StoreError::Corrupt("redo log: punched container".into())
                            })?;
                            pt.insert(&c[..], 1).map_err(ix)?;
                            self.punched.insert(c);
                        }
                    }
                }
                [self.st.seq, self.st.max_epoch, self.st.inline_bytes] = b.counters;
            }
            Ok(())
        })();
        let r = r
            .and_then(|()| self.write_state(&txn, Some(gen + 1), 0))
            .and_then(|()| txn.commit().map_err(ix));
        if let Err(e) = r {
            self.reload_state()?;
            return Err(e);
        }
        if n > 0 {
            tracing::info!(index = %self.path.display(), batches = n, "redo log replayed");
        }
        if self.cfg.wal {
            self.wal =
                Some(Wal::open(&wpath, gen + 1).map_err(|e| {
                    StoreError::Index(format!("redo log {}: {e}", wpath.display()))
                })?);
        }
        Ok(())
    }

    /// The allocator's changed extents and the counters into `txn`, and the
    /// redo log's position the index holds everything of: the log
    /// generation `gen` when given (a checkpoint), the record `lsn`.
    fn write_state(
        &mut self,
        txn: &WriteTransaction,
        gen: Option<u64>,
        lsn: u64,
    ) -> StoreResult<()> {
        let mut free = txn.open_table(FREE).map_err(ix)?;
        for (k, v) in self.st.alloc.take_dirty() {
            match v {
                Some(l) => free.insert(k, l).map_err(ix)?,
                None => free.remove(k).map_err(ix)?,
            };
        }
        let mut meta = txn.open_table(META).map_err(ix)?;
        meta.insert("seq", self.st.seq).map_err(ix)?;
        meta.insert("max_epoch", self.st.max_epoch).map_err(ix)?;
        meta.insert("inline_bytes", self.st.inline_bytes)
            .map_err(ix)?;
        if let Some(g) = gen {
            meta.insert("wal_gen", g).map_err(ix)?;
        }
        if gen.is_some() || lsn > 0 {
            meta.insert("wal_lsn", lsn).map_err(ix)?;
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &VosConfig {
        &self.cfg
    }

    /// Switch auto-commit (see [`VosConfig::auto_commit`]); turning it on commits.
    pub fn set_auto_commit(&mut self, on: bool) -> StoreResult<()> {
        self.cfg.auto_commit = on;
        if on {
            self.commit()?;
        }
        Ok(())
    }

    /// Whether changes are waiting for [`ObjectStore::commit`].
    pub fn has_pending(&self) -> bool {
        self.pending
    }

    /// Drop the changes since the last commit (their bdev blocks are free again).
    pub fn abort(&mut self) -> StoreResult<()> {
        self.finish_inflight();
        self.lost = None;
        let below = self.wal.as_ref().map_or(0, |w| w.next_lsn());
        self.rollback(below)
    }

    /// Back to the acknowledged state: the open transaction is dropped, the
    /// state of the last redb commit reloaded, and if the transaction held
    /// acknowledged batches ([`VosConfig::wal_defer_index`]) the log's
    /// records below `below` are replayed and committed durably under a new
    /// log generation (so a record at or above `below` is never replayed).
    fn rollback(&mut self, below: u64) -> StoreResult<()> {
        self.pending = false;
        self.rview = None;
        let aborted = match self.txn.take() {
            Some(t) => t.into_inner().abort().map_err(ix),
            None => Ok(()),
        };
        self.reload_state()?;
        if self.deferred > 0 {
            if let Err(e) = self.replay_wal(Some(below)) {
                // the acknowledged batches are in the log only: no batch may
                // commit (a checkpoint would start a new generation without
                // them) until a rollback has replayed them
                self.lost = Some(format!("replaying the redo log after a rollback: {e}"));
                return Err(e);
            }
            self.deferred = 0;
        }
        aborted
    }

    /// Commits (without fsync) an open transaction that holds only
    /// acknowledged batches, so reads can use a cached read view again.
    fn settle(&mut self) -> StoreResult<()> {
        if self.pending || self.deferred == 0 || self.inflight.is_some() {
            // (a commit in flight: reads go through the open transaction)
            return Ok(());
        }
        let Some(txn) = self.txn.take() else {
            self.deferred = 0;
            return Ok(());
        };
        let mut txn = txn.into_inner();
        let r = txn
            .set_durability(Durability::None)
            .map_err(ix)
            .and_then(|()| txn.commit().map_err(ix));
        match r {
            Ok(()) => {
                self.deferred = 0;
                Ok(())
            }
            Err(e) => {
                let below = self.wal.as_ref().map_or(0, |w| w.next_lsn());
                self.rollback(below)?;
                tracing::warn!(index = %self.path.display(), error = %e, "index commit of logged batches failed: replayed from the redo log");
                Ok(())
            }
        }
    }

    fn reload_state(&mut self) -> StoreResult<()> {
        // a rollback: cached entries may name versions that are gone
        self.st.svc.clear();
        if let Some(w) = &mut self.wal {
            w.clear();
        }
        let rt = self.db.begin_read().map_err(ix)?;
        let meta = rt.open_table(META).map_err(ix)?;
        let free = rt.open_table(FREE).map_err(ix)?;
        self.st.seq = meta.get("seq").map_err(ix)?.map_or(0, |g| g.value());
        self.st.max_epoch = meta.get("max_epoch").map_err(ix)?.map_or(0, |g| g.value());
        self.st.inline_bytes = meta
            .get("inline_bytes")
            .map_err(ix)?
            .map_or(0, |g| g.value());
        let total = self.st.alloc.total_blocks();
        let mut ext = Vec::new();
        for r in free.iter().map_err(ix)? {
            let (k, v) = r.map_err(ix)?;
            ext.push((k.value(), v.value()));
        }
        self.st.alloc = Allocator::from_extents(total, ext);
        self.st.bdev_dirty = false;
        Ok(())
    }

    /// Run `f` with read access (through the open batch if there is one).
    pub(crate) fn with_view<R>(
        &mut self,
        f: impl FnOnce(&dyn Reader, &mut St) -> StoreResult<R>,
    ) -> StoreResult<R> {
        // a read-only call: an open transaction of acknowledged batches is
        // committed first, so the cached read view serves the reads again
        self.settle()?;
        self.view_inner(f)
    }

    /// [`Vos::with_view`] for the checks of a mutation: through the open
    /// transaction if there is one (the batch continues in it).
    fn view_inner<R>(
        &mut self,
        f: impl FnOnce(&dyn Reader, &mut St) -> StoreResult<R>,
    ) -> StoreResult<R> {
        if let Some(txn) = &mut self.txn {
            let (t, _) = txn.tables()?;
            let v = View {
                idx: &t.idx,
                extmax: &t.extmax,
                conts: &t.conts,
                snaps: &t.snaps,
                punched: &self.punched,
            };
            f(&v, &mut self.st)
        } else {
            if self.rview.is_none() {
                let rt = self.db.begin_read().map_err(ix)?;
                self.rview = Some(ReadTables {
                    idx: rt.open_table(IDX).map_err(ix)?,
                    extmax: rt.open_table(EXTMAX).map_err(ix)?,
                    conts: rt.open_table(CONTS).map_err(ix)?,
                    snaps: rt.open_table(SNAPS).map_err(ix)?,
                });
            }
            let Some(t) = &self.rview else {
                return Err(StoreError::Index("no read view".into()));
            };
            let v = View {
                idx: &t.idx,
                extmax: &t.extmax,
                conts: &t.conts,
                snaps: &t.snaps,
                punched: &self.punched,
            };
            f(&v, &mut self.st)
        }
    }

    /// Run a mutation in the open transaction (begun if needed). `f` must
    /// validate before it changes anything: an error from it aborts the whole
    /// transaction only if it is an internal one (index, bdev, corruption).
    pub(crate) fn with_write<R>(
        &mut self,
        f: impl FnOnce(&mut W<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        // a change other than an update's (which drops its own akeys' entries)
        self.st.svc.clear();
        self.write_inner(false, f)
    }

    /// [`Vos::with_write`] for a change the redo log records (a punch: its
    /// `W::put`s and punched-container marks).
    fn with_logged_write<R>(
        &mut self,
        f: impl FnOnce(&mut W<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        self.st.svc.clear();
        self.write_inner(true, f)
    }

    /// [`Vos::with_write`] that leaves the latest-value cache to the caller;
    /// `logged`: the change goes through `W`'s logging methods only, so the
    /// batch can commit through the redo log (else its commit is a checkpoint).
    fn write_inner<R>(
        &mut self,
        logged: bool,
        f: impl FnOnce(&mut W<'_>) -> StoreResult<R>,
    ) -> StoreResult<R> {
        if !logged {
            self.need_ckpt = true;
        }
        if self.txn.is_none() {
            // the cached read view would not see this batch once committed
            self.rview = None;
            self.txn = Some(Txn::new(self.db.begin_write().map_err(ix)?));
        }
        self.pending = true;
        let res = {
            let Some(txn) = self.txn.as_mut() else {
                return Err(StoreError::Index("no transaction".into()));
            };
            match txn.tables() {
                Ok((t, txn)) => {
                    let Tables {
                        idx,
                        extmax,
                        conts,
                        snaps,
                    } = t;
                    let mut w = W {
                        idx,
                        extmax,
                        conts,
                        snaps,
                        st: Some(&mut self.st),
                        txn,
                        punched: &mut self.punched,
                        wal: if logged { self.wal.as_mut() } else { None },
                    };
                    f(&mut w)
                }
                Err(e) => Err(e),
            }
        };
        match res {
            Ok(v) => {
                if self.cfg.auto_commit {
                    self.commit()?;
                }
                Ok(v)
            }
            Err(e) => {
                let internal = matches!(
                    e,
                    StoreError::Index(_) | StoreError::Bdev(_) | StoreError::Corrupt(_)
                );
                if internal && !self.cfg.auto_commit {
                    // the whole batch is gone: make the batch's commit fail too
                    self.lost = Some(e.to_string());
                }
                if internal || self.cfg.auto_commit {
                    self.abort()?;
                }
                Err(e)
            }
        }
    }

    /// Verify the store: every bdev extent referenced by a record and every free
    /// extent are disjoint and together cover the device exactly; the inline
    /// byte counter matches the index. (A full scan: for tests and tools.)
    pub fn check(&mut self) -> StoreResult<CheckReport> {
        self.commit()?;
        if let Some(Err(e)) = self.commit_done.take() {
            return Err(e);
        }
        let total = self.st.alloc.total_blocks();
        let mut spans: Vec<(u64, u64, bool)> =
            self.st.alloc.extents().map(|(o, n)| (o, n, true)).collect();
        let free_blocks = self.st.alloc.free_blocks();
        let counted_inline = self.st.inline_bytes;
        let (records, inline) = self.with_view(|r, _| {
            let mut records = 0u64;
            let mut inline = 0u64;
            let mut err = None;
            r.scan(&[], None, &mut |k, v| {
                records += 1;
                let res = keys::parse(k)
                    .ok_or_else(|| StoreError::Corrupt("unparsable key".into()))
                    .and_then(|p| record_loc(p.kind, v));
                match res {
                    Ok(Some(loc)) => {
                        inline += loc.inline_len();
                        if let Some((o, n)) = loc.bdev_extent() {
                            spans.push((o, n, false));
                        }
                        true
                    }
                    Ok(None) => true,
                    Err(e) => {
                        err = Some(e);
                        false
                    }
                }
            })?;
            match err {
                Some(e) => Err(e),
                None => Ok((records, inline)),
            }
        })?;
        spans.sort_unstable();
        let mut pos = 0u64;
        let mut used = 0u64;
        for &(o, n, is_free) in &spans {
            if o != pos {
                return Err(StoreError::Corrupt(format!(
                    "space map: blocks {pos}..{o} neither free nor used, or overlap at {o}"
                )));
            }
            pos = o + n;
            if !is_free {
                used += n;
            }
        }
        if pos != total {
            return Err(StoreError::Corrupt(format!(
                "space map ends at block {pos}, device has {total}"
            )));
        }
        if inline != counted_inline {
            return Err(StoreError::Corrupt(format!(
                "inline bytes: index holds {inline}, counter says {counted_inline}"
            )));
        }
        Ok(CheckReport {
            records,
            used_blocks: used,
            free_blocks,
            inline_bytes: inline,
        })
    }

    /// The highest epoch of any change made (committed, or pending in the open
    /// batch): start an [`crate::types::Hlc`] above it after a restart.
    pub fn max_epoch(&self) -> Epoch {
        Epoch(self.st.max_epoch)
    }
}

/// The open write transaction's tables plus the store state.
pub(crate) struct W<'t> {
    pub(crate) idx: &'t mut redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) extmax: &'t mut redb::Table<'t, &'static [u8], u64>,
    pub(crate) conts: &'t mut redb::Table<'t, &'static [u8], u64>,
    pub(crate) snaps: &'t mut redb::Table<'t, &'static [u8], &'static [u8]>,
    st: Option<&'t mut St>,
    txn: &'t WriteTransaction,
    punched: &'t mut HashSet<[u8; 16]>,
    /// The redo log, for a logged change (`put`, `set_extmax`, `mark_punched`
    /// record what they do).
    wal: Option<&'t mut Wal>,
}

type WView<'a, 't> = View<
    'a,
    redb::Table<'t, &'static [u8], &'static [u8]>,
    redb::Table<'t, &'static [u8], u64>,
    redb::Table<'t, &'static [u8], u64>,
    redb::Table<'t, &'static [u8], &'static [u8]>,
>;

impl<'t> W<'t> {
    pub(crate) fn view(&self) -> WView<'_, 't> {
        View {
            idx: &*self.idx,
            extmax: &*self.extmax,
            conts: &*self.conts,
            snaps: &*self.snaps,
            punched: &*self.punched,
        }
    }
    /// Record that `cont` holds a punch (in this transaction and in memory;
    /// before the punch record itself is read by anything).
    fn mark_punched(&mut self, cont: ContId) -> StoreResult<()> {
        let c = *cont.as_bytes();
        if self.punched.insert(c) {
            let mut t = self.txn.open_table(PUNCHED).map_err(ix)?;
            t.insert(&c[..], 1).map_err(ix)?;
            if let Some(l) = self.wal.as_deref_mut() {
                l.log(Tab::Punched, &c, &1u64.to_le_bytes());
            }
        }
        Ok(())
    }
    /// Raise the akey's longest-extent bound to `nr` records.
    fn set_extmax(&mut self, ap: &[u8], nr: u64) -> StoreResult<()> {
        self.extmax.insert(ap, nr).map_err(ix)?;
        if let Some(l) = self.wal.as_deref_mut() {
            l.log(Tab::Extmax, ap, &nr.to_le_bytes());
        }
        Ok(())
    }
    pub(crate) fn st(&mut self) -> StoreResult<&mut St> {
        self.st
            .as_deref_mut()
            .ok_or_else(|| StoreError::Index("store state not lent".into()))
    }
    /// The container's aggregated-up-to epoch, or `NoContainer`.
    fn cont_hwm(&self, cont: ContId) -> StoreResult<u64> {
        self.view().cont(cont)?.ok_or(StoreError::NoContainer(cont))
    }
    /// Check an update epoch against the container.
    fn write_epoch(&self, cont: ContId, e: Epoch) -> StoreResult<()> {
        if e.0 == 0 || e == EPOCH_MAX {
            return Err(StoreError::BadEpoch(
                e,
                "updates need an epoch in 1..EPOCH_MAX",
            ));
        }
        if e.0 <= self.view().write_floor(cont)? {
            return Err(StoreError::BadEpoch(
                e,
                "at or below the container's newest snapshot or aggregated epoch",
            ));
        }
        Ok(())
    }
    fn next_ver(&mut self, e: Epoch) -> StoreResult<Ver> {
        let st = self.st()?;
        st.seq += 1;
        st.max_epoch = st.max_epoch.max(e.0);
        Ok(Ver {
            epoch: e.0,
            seq: st.seq,
        })
    }
    fn put(&mut self, k: &[u8], v: &[u8]) -> StoreResult<()> {
        self.idx.insert(k, v).map_err(ix)?;
        if let Some(l) = self.wal.as_deref_mut() {
            l.log(Tab::Idx, k, v);
        }
        Ok(())
    }
    /// Delete a record and release what it holds (bdev space after commit).
    pub(crate) fn delete(&mut self, k: &[u8], loc: Option<&Loc>) -> StoreResult<()> {
        self.idx.remove(k).map_err(ix)?;
        if let Some(loc) = loc {
            let st = self.st()?;
            st.inline_bytes = st.inline_bytes.saturating_sub(loc.inline_len());
            if let Some((o, n)) = loc.bdev_extent() {
                st.alloc.defer_free(o, n);
            }
        }
        Ok(())
    }
}

/// One value of an update, placed.
struct Placed {
    key: Vec<u8>,
    rec: Vec<u8>,
    extmax: Option<(Vec<u8>, u64)>,
    inline: u64,
}

impl Vos {
    fn commit_inner(&mut self) -> StoreResult<()> {
        // a commit in flight completes first (its outcome stays for
        // `commit_poll`; if it failed, this batch is lost with it)
        self.finish_inflight();
        if let Some(why) = self.lost.take() {
            // an internal error rolled back part of this batch: commit none of it
            self.abort()?;
            return Err(StoreError::Index(format!(
                "batch rolled back by an earlier error: {why}"
            )));
        }
        if !self.pending {
            // nothing since the last commit (the open transaction, if any,
            // holds acknowledged batches only)
            return Ok(());
        }
        self.pending = false;
        let Some(txn) = self.txn.take() else {
            return Ok(());
        };
        let logged = self.wal.as_ref().is_some_and(|w| {
            !self.need_ckpt
                && !self.st.alloc.has_deferred()
                && w.size() < self.cfg.wal_checkpoint_bytes
                && w.next_lsn() <= self.cfg.wal_checkpoint_records
        });
        if logged && self.wal.as_ref().is_some_and(|w| w.is_empty()) {
            // only refused changes (nothing logged, nothing to keep)
            self.txn = Some(txn);
            return self.abort();
        }
        if logged {
            self.commit_logged(txn)
        } else {
            self.checkpoint(txn)
        }
    }

    /// A durable index commit (of the batch and of every batch committed
    /// through the log since the last one); the log starts a new generation.
    fn checkpoint(&mut self, txn: Txn) -> StoreResult<()> {
        // every record in the log is acknowledged: a failed checkpoint keeps
        // them (replayed if the open transaction held them)
        let below = self.wal.as_ref().map_or(0, |w| w.next_lsn());
        // 1. the data the index will reference is durable first
        if let Err(e) = self.st.flush() {
            self.txn = Some(txn);
            self.rollback(below)?;
            return Err(e);
        }
        // 2. allocator and counters (and the log's next generation) into the
        // same transaction
        self.st.alloc.apply_deferred();
        let gen = self.wal.as_ref().map(|w| w.gen() + 1);
        let r = self.write_state(txn.txn(), gen, 0);
        // 3. one fsync'd commit
        let r = r.and_then(|()| txn.into_inner().commit().map_err(ix));
        if let Err(e) = r {
            self.rollback(below)?;
            return Err(e);
        }
        self.deferred = 0;
        if let (Some(w), Some(g)) = (&mut self.wal, gen) {
            w.reset(g);
        }
        self.need_ckpt = false;
        Ok(())
    }

    /// Group commit through the redo log: the bdev flush is started, the
    /// batch's log record is written and `fdatasync`ed while it runs, then
    /// the index transaction is committed without an fsync (visible to later
    /// reads and batches; made durable by the next checkpoint, and meanwhile
    /// by the log). Any failure voids the log's generation (a checkpoint of
    /// the state before this batch), so no record of a batch that failed is
    /// ever replayed.
    ///
    /// With [`VosConfig::wal_defer_index`] the transaction is not committed
    /// but kept open for the next batch; a failure then replays the
    /// acknowledged records below this batch's from the log (a new
    /// generation, as voiding does).
    fn commit_logged(&mut self, txn: Txn) -> StoreResult<()> {
        let lsn = self.wal.as_ref().map_or(0, |w| w.next_lsn());
        let flushing = match self.st.start_flush() {
            Ok(f) => f,
            Err(e) => {
                self.txn = Some(txn);
                self.rollback(lsn)?;
                return Err(e);
            }
        };
        let counters = [self.st.seq, self.st.max_epoch, self.st.inline_bytes];
        let r = self.write_state(txn.txn(), None, lsn).and_then(|()| {
            let w = self
                .wal
                .as_mut()
                .ok_or_else(|| StoreError::Index("no redo log".into()))?;
            w.append(counters)
                .map_err(|e| StoreError::Index(format!("redo log: {e}")))
        });
        // the bdev values are durable too before anything is acknowledged
        let f = if flushing {
            self.st.finish_flush()
        } else {
            Ok(())
        };
        let defer = self.cfg.wal_defer_index && !self.cfg.auto_commit;
        let r = match r.and(f) {
            Ok(()) if defer => {
                // acknowledged: its record is durable; the index commit waits
                self.txn = Some(txn);
                self.deferred += 1;
                return Ok(());
            }
            Ok(()) => {
                let mut txn = txn.into_inner();
                let r = txn
                    .set_durability(Durability::None)
                    .map_err(ix)
                    .and_then(|()| txn.commit().map_err(ix));
                if r.is_ok() {
                    self.deferred = 0;
                }
                r
            }
            Err(e) => {
                self.txn = Some(txn);
                Err(e)
            }
        };
        if let Err(e) = r {
            if self.deferred > 0 {
                // earlier acknowledged batches are in the open transaction:
                // back to them from the log (below this batch's record)
                self.rollback(lsn)?;
                return Err(e);
            }
            if let Some(t) = self.txn.take() {
                let _ = t.into_inner().abort();
            }
            if let Err(v) = self.void_wal() {
                // no log record is appended before a checkpoint has voided
                // this generation
                tracing::warn!(index = %self.path.display(), error = %v, "voiding the redo log failed: the next commit is a checkpoint");
                self.need_ckpt = true;
            }
            return Err(e);
        }
        Ok(())
    }

    /// [`ObjectStore::commit_start`]: a batch with bdev values that would
    /// commit through the redo log with the index commit deferred (the
    /// engine's case) starts its bdev flush and its log record's write +
    /// `fdatasync` and returns
    /// `Ok(true)`; the caller executes the next batch meanwhile (it goes
    /// into the same open transaction) and polls. Any other commit is done
    /// synchronously (`Ok(false)`).
    ///
    /// Durability is the synchronous commit's: [`Vos::commit_poll`] says
    /// `Ok` only after the record's `fdatasync` and the bdev flush have both
    /// completed, and the next record is started only after that, so at most
    /// the last record of the log is of an unacknowledged batch (the replay
    /// rule). A failure rolls the open transaction back to the acknowledged
    /// batches (replayed from the log below this record) and loses a later
    /// batch executed meanwhile (its commit fails).
    pub fn commit_start(&mut self) -> StoreResult<bool> {
        self.finish_inflight();
        if self.commit_done.is_some() {
            return Err(StoreError::Index(
                "commit started before the previous commit's outcome was polled".into(),
            ));
        }
        let defer = self.cfg.wal_defer_index && !self.cfg.auto_commit;
        // a batch without bdev values commits in place: its log fdatasync
        // alone (~0.3 ms here) costs less done by this thread than handed to
        // an io_uring worker and polled for (mdtest-hard write lost 15 % that
        // way); the pipeline is for batches whose bdev flush writes data back
        let logged = defer
            && self.cfg.commit_pipeline
            && self.st.bdev_dirty
            && self.st.can_flush
            && self.lost.is_none()
            && self.pending
            && self.txn.is_some()
            && !self.need_ckpt
            && !self.st.alloc.has_deferred()
            && self.wal.as_ref().is_some_and(|w| {
                !w.is_empty()
                    && w.size() < self.cfg.wal_checkpoint_bytes
                    && w.next_lsn() <= self.cfg.wal_checkpoint_records
            });
        if !logged {
            return self.commit_inner().map(|()| false);
        }
        self.pending = false;
        let Some(txn) = self.txn.take() else {
            return Ok(false);
        };
        let lsn = self.wal.as_ref().map_or(0, |w| w.next_lsn());
        let flushing = match self.st.start_flush() {
            Ok(f) => f,
            Err(e) => {
                self.txn = Some(txn);
                self.fail_inflight(lsn)?;
                return Err(e);
            }
        };
        let counters = [self.st.seq, self.st.max_epoch, self.st.inline_bytes];
        let r = self.write_state(txn.txn(), None, lsn).and_then(|()| {
            let w = self
                .wal
                .as_mut()
                .ok_or_else(|| StoreError::Index("no redo log".into()))?;
            w.append_start(counters)
                .map_err(|e| StoreError::Index(format!("redo log: {e}")))
        });
        // the batch stays in the open transaction (acknowledged when durable)
        self.txn = Some(txn);
        if let Err(e) = r {
            if flushing {
                let _ = self.st.finish_flush();
            }
            if let Some(w) = &mut self.wal {
                // a record submitted before the error: wait for the kernel
                let _ = w.append_poll(true);
            }
            self.fail_inflight(lsn)?;
            return Err(e);
        }
        self.inflight = Some(Inflight {
            lsn,
            log: None,
            flush: None,
        });
        Ok(true)
    }

    /// [`ObjectStore::commit_poll`]: the started commit's outcome once its
    /// log record and bdev flush are both durable (`None` while they run
    /// and not `wait`; `Some(Ok)` if none was started).
    pub fn commit_poll(&mut self, wait: bool) -> Option<StoreResult<()>> {
        if let Some(r) = self.commit_done.take() {
            return Some(r);
        }
        let Some(mut inf) = self.inflight.take() else {
            return Some(Ok(()));
        };
        if inf.log.is_none() {
            inf.log = match self.wal.as_mut() {
                Some(w) => w
                    .append_poll(wait)
                    .map(|r| r.map_err(|e| StoreError::Index(format!("redo log: {e}")))),
                None => Some(Err(StoreError::Index("no redo log".into()))),
            };
        }
        if inf.flush.is_none() && (wait || self.st.flush_ready()) {
            inf.flush = Some(self.st.finish_flush());
        }
        if inf.log.is_none() || inf.flush.is_none() {
            self.inflight = Some(inf);
            return None;
        }
        let (Some(log), Some(flush)) = (inf.log.take(), inf.flush.take()) else {
            return None;
        };
        match log.and(flush) {
            Ok(()) => {
                // acknowledged: its record is durable; the index commit waits
                self.deferred += 1;
                Some(Ok(()))
            }
            Err(e) => Some(self.fail_inflight(inf.lsn).and(Err(e))),
        }
    }

    /// Waits for a commit in flight; its outcome is kept for `commit_poll`.
    fn finish_inflight(&mut self) {
        if self.inflight.is_some() && self.commit_done.is_none() {
            self.commit_done = self.commit_poll(true);
        }
    }

    /// After a failed (started) log commit of record `lsn`: back to the
    /// acknowledged state (as `commit_logged`'s failure does); a batch
    /// executed after it in the same transaction is lost (its commit fails).
    fn fail_inflight(&mut self, lsn: u64) -> StoreResult<()> {
        let later = self.pending;
        if self.deferred > 0 {
            self.rollback(lsn)?;
        } else {
            self.pending = false;
            self.rview = None;
            if let Some(t) = self.txn.take() {
                let _ = t.into_inner().abort();
            }
            if let Err(v) = self.void_wal() {
                tracing::warn!(index = %self.path.display(), error = %v, "voiding the redo log failed: the next commit is a checkpoint");
                self.need_ckpt = true;
            }
        }
        if later {
            self.lost = Some("an earlier batch's commit failed".into());
        }
        Ok(())
    }

    /// After a failed log commit: back to the last committed state, made
    /// durable under a new log generation (the failed batch's record, if it
    /// reached the disk, is never replayed).
    fn void_wal(&mut self) -> StoreResult<()> {
        self.reload_state()?;
        let txn = self.db.begin_write().map_err(ix)?;
        let gen = self.wal.as_ref().map_or(0, |w| w.gen()) + 1;
        {
            let mut meta = txn.open_table(META).map_err(ix)?;
            meta.insert("wal_gen", gen).map_err(ix)?;
            meta.insert("wal_lsn", 0).map_err(ix)?;
        }
        txn.commit().map_err(ix)?;
        if let Some(w) = &mut self.wal {
            w.reset(gen);
        }
        Ok(())
    }

    /// Allocate and write the large values of an update; undo on failure.
    /// `None`: the value stays inline (its record is encoded from the
    /// caller's bytes, no copy of its own).
    fn place_values(&mut self, vals: &[(Vec<u8>, &[u8])]) -> StoreResult<Vec<Option<Loc>>> {
        let bs = self.st.bs;
        let mut locs = Vec::with_capacity(vals.len());
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut fail = None;
        for (_, data) in vals {
            if data.len() <= self.cfg.inline_max {
                locs.push(None);
                continue;
            }
            let blocks = (data.len() as u64).div_ceil(bs);
            let Some(off) = self.st.alloc.alloc(blocks) else {
                fail = Some(StoreError::NoSpace {
                    need: blocks * bs,
                    free: self.st.alloc.free_blocks() * bs,
                });
                break;
            };
            taken.push((off, blocks));
            if let Err(e) = self.st.write(off, blocks, data) {
                fail = Some(e);
                break;
            }
            locs.push(Some(Loc::Bdev {
                off,
                blocks,
                len: data.len() as u64,
                crc: crc32c::crc32c(data),
            }));
        }
        if let Some(e) = fail {
            for (o, n) in taken {
                self.st.alloc.release_now(o, n);
            }
            return Err(e);
        }
        Ok(locs)
    }
}

impl Vos {
    /// The body of [`ObjectStore::update`] and [`ObjectStore::update_flat`]:
    /// `datas[i]` holds iod `i`'s bytes (one per iod: `update`'s sgls, each
    /// gathered, or `update_flat`'s buffers).
    fn update_datas(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        datas: &[&[u8]],
    ) -> StoreResult<()> {
        // ---- validate everything before touching anything
        oid.validate()?;
        key_ok(&dkey.0, "dkey")?;
        if iods.is_empty() || iods.len() != datas.len() {
            return Err(StoreError::InvalidArg(format!(
                "{} iods, {} sgls",
                iods.len(),
                datas.len()
            )));
        }
        let dp = keys::dkey_prefix(cont, oid, &dkey.0);
        // (key prefix, data) per stored value; extents carry their recx
        let mut vals: Vec<(Vec<u8>, &[u8])> = Vec::new();
        let mut metas: Vec<(Vec<u8>, IodType, u64, Recx)> = Vec::new();
        for (iod, data) in iods.iter().zip(datas) {
            key_ok(&iod.akey.0, "akey")?;
            let n = iod.data_len();
            if n != data.len() as u64 {
                return Err(StoreError::InvalidArg(format!(
                    "akey {:?}: iod describes {n} bytes, sgl holds {}",
                    String::from_utf8_lossy(&iod.akey.0),
                    data.len()
                )));
            }
            if n > self.cfg.max_value {
                return Err(StoreError::TooLarge {
                    size: n,
                    limit: self.cfg.max_value,
                });
            }
            match iod.iod_type {
                IodType::Single => {
                    if n == 0 || !iod.recxs.is_empty() {
                        return Err(StoreError::InvalidArg(
                            "a single value needs a size > 0 and no recxs".into(),
                        ));
                    }
                }
                IodType::Array => {
                    if iod.rec_size == 0 || iod.recxs.is_empty() {
                        return Err(StoreError::InvalidArg(
                            "an array iod needs rec_size > 0 and recxs".into(),
                        ));
                    }
                    for r in &iod.recxs {
                        if r.nr == 0 || r.idx.checked_add(r.nr).is_none_or(|e| e == u64::MAX) {
                            return Err(StoreError::InvalidArg(format!("bad recx {r:?}")));
                        }
                    }
                }
            }
        }
        for (iod, data) in iods.iter().zip(datas) {
            let ap = keys::akey_prefix(&dp, &iod.akey.0);
            match iod.iod_type {
                IodType::Single => {
                    vals.push((ap.clone(), &data[..]));
                    metas.push((ap, IodType::Single, iod.rec_size, Recx::default()));
                }
                IodType::Array => {
                    let mut pos = 0usize;
                    for r in &iod.recxs {
                        let len = (r.nr * iod.rec_size) as usize;
                        vals.push((ap.clone(), &data[pos..pos + len]));
                        metas.push((ap.clone(), IodType::Array, iod.rec_size, *r));
                        pos += len;
                    }
                }
            }
        }
        // container and epoch checks need the index
        self.view_inner(|r, _| {
            let floor = r.write_floor(cont)?;
            if epoch.0 == 0 || epoch == EPOCH_MAX {
                return Err(StoreError::BadEpoch(
                    epoch,
                    "updates need an epoch in 1..EPOCH_MAX",
                ));
            }
            if epoch.0 <= floor {
                return Err(StoreError::BadEpoch(
                    epoch,
                    "at or below the container's newest snapshot or aggregated epoch",
                ));
            }
            Ok(())
        })?;
        // ---- bdev first (blocks nobody committed references), then the index
        let locs = self.place_values(&vals)?;
        let mut placed = Vec::with_capacity(locs.len());
        for (((ap, t, rec_size, recx), loc), (_, data)) in metas.into_iter().zip(locs).zip(&vals) {
            // the record at its final size: header, then the Loc encoding
            // (an inline value: tag 0 and the caller's bytes, as Loc::encode)
            let mut rec = Vec::with_capacity(16 + 1 + loc.as_ref().map_or(data.len(), |_| 28));
            let inline = if loc.is_none() { data.len() as u64 } else { 0 };
            let encode = |rec: &mut Vec<u8>| match &loc {
                Some(l) => l.encode(rec),
                None => {
                    rec.push(0);
                    rec.extend_from_slice(data);
                }
            };
            match t {
                IodType::Single => {
                    encode(&mut rec);
                    placed.push(Placed {
                        key: ap,
                        rec,
                        extmax: None,
                        inline,
                    });
                }
                IodType::Array => {
                    rec.extend_from_slice(&rec_size.to_le_bytes());
                    rec.extend_from_slice(&recx.nr.to_le_bytes());
                    encode(&mut rec);
                    let mut k = ap.clone();
                    k.extend_from_slice(&recx.idx.to_be_bytes());
                    placed.push(Placed {
                        key: k,
                        rec,
                        extmax: Some((ap, recx.nr)),
                        inline,
                    });
                }
            }
        }
        for p in placed.iter().filter(|p| p.extmax.is_none()) {
            self.st.svc.remove(&p.key);
        }
        self.write_inner(true, |w| {
            for p in placed {
                let ver = w.next_ver(epoch)?;
                let key = match &p.extmax {
                    None => keys::ver_key(&p.key, T_SV, ver),
                    Some((ap, _)) => {
                        let idx = u64::from_be_bytes(
                            p.key[ap.len()..]
                                .try_into()
                                .map_err(|_| StoreError::Corrupt("extent key".into()))?,
                        );
                        keys::ext_key(ap, idx, ver)
                    }
                };
                w.put(&key, &p.rec)?;
                if let Some((ap, nr)) = &p.extmax {
                    let cur = w.view().extmax(ap)?;
                    if *nr > cur {
                        w.set_extmax(ap, *nr)?;
                    }
                }
                let st = w.st()?;
                st.inline_bytes += p.inline;
            }
            Ok(())
        })
    }
}

impl ObjectStore for Vos {
    fn cont_create(&mut self, cont: ContId) -> StoreResult<()> {
        self.with_write(|w| {
            if w.view().cont(cont)?.is_some() {
                return Err(StoreError::ContainerExists(cont));
            }
            w.conts.insert(&cont.as_bytes()[..], 0).map_err(ix)?;
            Ok(())
        })
    }

    fn cont_destroy(&mut self, cont: ContId) -> StoreResult<()> {
        self.with_write(|w| {
            w.cont_hwm(cont)?;
            let p = keys::cont_prefix(cont);
            let end = keys::prefix_end(&p);
            let mut recs = Vec::new();
            w.view().scan(&p, end.as_deref(), &mut |k, v| {
                recs.push((k.to_vec(), v.to_vec()));
                true
            })?;
            for (k, v) in recs {
                let p = keys::parse(&k).ok_or_else(|| StoreError::Corrupt("bad key".into()))?;
                let loc = record_loc(p.kind, &v)?;
                w.delete(&k, loc.as_ref())?;
            }
            let mut ks = Vec::new();
            for r in w.extmax.range::<&[u8]>(p.as_slice()..).map_err(ix)? {
                let k = r.map_err(ix)?.0.value().to_vec();
                if !k.starts_with(&p) {
                    break;
                }
                ks.push(k);
            }
            for k in ks {
                w.extmax.remove(k.as_slice()).map_err(ix)?;
            }
            for s in w.view().snaps(cont)? {
                let mut k = p.clone();
                k.extend_from_slice(&s.epoch.0.to_be_bytes());
                w.snaps.remove(k.as_slice()).map_err(ix)?;
            }
            w.conts.remove(&cont.as_bytes()[..]).map_err(ix)?;
            Ok(())
        })
    }

    fn cont_list(&mut self) -> StoreResult<Vec<ContId>> {
        let db_list = |it: &mut dyn Iterator<Item = Vec<u8>>| -> Vec<ContId> {
            it.filter_map(|b| <[u8; 16]>::try_from(b.as_slice()).ok())
                .map(ContId::from_bytes)
                .collect()
        };
        if let Some(txn) = &mut self.txn {
            let (t, _) = txn.tables()?;
            let v: Vec<Vec<u8>> = t
                .conts
                .iter()
                .map_err(ix)?
                .filter_map(|r| r.ok().map(|(k, _)| k.value().to_vec()))
                .collect();
            Ok(db_list(&mut v.into_iter()))
        } else {
            let rt = self.db.begin_read().map_err(ix)?;
            let t = rt.open_table(CONTS).map_err(ix)?;
            let v: Vec<Vec<u8>> = t
                .iter()
                .map_err(ix)?
                .filter_map(|r| r.ok().map(|(k, _)| k.value().to_vec()))
                .collect();
            Ok(db_list(&mut v.into_iter()))
        }
    }

    fn update(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &[SgList],
    ) -> StoreResult<()> {
        // an sgl of one buffer is used in place (no concatenated copy)
        let datas: Vec<std::borrow::Cow<'_, [u8]>> = sgls
            .iter()
            .map(|sgl| match &sgl.iovs[..] {
                [one] => std::borrow::Cow::Borrowed(one.as_slice()),
                _ => std::borrow::Cow::Owned(sgl.concat()),
            })
            .collect();
        let datas: Vec<&[u8]> = datas.iter().map(|d| &d[..]).collect();
        self.update_datas(cont, oid, epoch, dkey, iods, &datas)
    }

    fn update_flat(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        datas: &[&[u8]],
    ) -> StoreResult<()> {
        self.update_datas(cont, oid, epoch, dkey, iods, datas)
    }

    fn fetch(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &mut [SgList],
    ) -> StoreResult<FetchOut> {
        oid.validate()?;
        key_ok(&dkey.0, "dkey")?;
        let e = read_epoch(epoch)?;
        if iods.len() != sgls.len() {
            return Err(StoreError::InvalidArg(format!(
                "{} iods, {} sgls",
                iods.len(),
                sgls.len()
            )));
        }
        for iod in iods {
            key_ok(&iod.akey.0, "akey")?;
        }
        let dp = keys::dkey_prefix(cont, oid, &dkey.0);
        self.with_view(|r, st| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let op = keys::obj_prefix(cont, oid);
            let dfloor = newest_punch(r, &op, e)?.max(newest_punch(r, &dp, e)?);
            let mut out = FetchOut::default();
            for (iod, sgl) in iods.iter().zip(sgls.iter_mut()) {
                let ap = keys::akey_prefix(&dp, &iod.akey.0);
                let floor = dfloor.max(newest_punch(r, &ap, e)?);
                match iod.iod_type {
                    IodType::Single => {
                        let Some(loc) = sv_at(r, &ap, e, floor)? else {
                            out.sizes.push(0);
                            continue;
                        };
                        let cap = sgl.len();
                        out.sizes.push(loc.len());
                        if cap == 0 {
                            continue;
                        }
                        if cap < loc.len() {
                            return Err(StoreError::BufferTooSmall {
                                need: loc.len(),
                                have: cap,
                            });
                        }
                        let data = st.load(&loc)?;
                        scatter(&data, sgl);
                    }
                    IodType::Array => {
                        let cap = sgl.len();
                        let mut buf: Vec<u8> = Vec::new();
                        let mut cache: HashMap<usize, Vec<u8>> = HashMap::new();
                        let (recs_all, pieces_all, size) = array_pieces(r, &ap, e, floor, iod)?;
                        if iod.rec_size != 0 && size != 0 && iod.rec_size != size {
                            return Err(StoreError::InvalidArg(format!(
                                "record size {} asked, {} stored",
                                iod.rec_size, size
                            )));
                        }
                        out.sizes.push(size);
                        let rs = if iod.rec_size != 0 {
                            iod.rec_size
                        } else {
                            size
                        };
                        if cap == 0 || rs == 0 {
                            continue;
                        }
                        let total: u64 = iod.recxs.iter().map(|x| x.nr * rs).sum();
                        if cap < total {
                            return Err(StoreError::BufferTooSmall {
                                need: total,
                                have: cap,
                            });
                        }
                        buf.resize(total as usize, 0);
                        let mut base = 0u64;
                        for ((rx, pieces), recs) in iod.recxs.iter().zip(&pieces_all).zip(&recs_all)
                        {
                            cache.clear();
                            for p in pieces {
                                let x = &recs[p.src];
                                if let std::collections::hash_map::Entry::Vacant(slot) =
                                    cache.entry(p.src)
                                {
                                    slot.insert(st.load(&x.loc)?);
                                }
                                let d = &cache[&p.src];
                                let so = ((p.idx - x.ext.idx) * rs) as usize;
                                let dofs = (base + (p.idx - rx.idx) * rs) as usize;
                                let n = (p.nr * rs) as usize;
                                let src = d.get(so..so + n).ok_or_else(|| {
                                    StoreError::Corrupt("extent shorter than its records".into())
                                })?;
                                buf[dofs..dofs + n].copy_from_slice(src);
                            }
                            base += rx.nr * rs;
                        }
                        scatter(&buf, sgl);
                    }
                }
            }
            Ok(out)
        })
    }

    fn fetch_epochs(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
    ) -> StoreResult<Vec<Epoch>> {
        let e = fetch_args_ok(oid, dkey, epoch, iods)?;
        let dp = keys::dkey_prefix(cont, oid, &dkey.0);
        self.with_view(|r, _st| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let op = keys::obj_prefix(cont, oid);
            let dfloor = newest_punch(r, &op, e)?.max(newest_punch(r, &dp, e)?);
            let mut out = Vec::with_capacity(iods.len());
            for iod in iods {
                let ap = keys::akey_prefix(&dp, &iod.akey.0);
                let floor = dfloor.max(newest_punch(r, &ap, e)?);
                let found = match iod.iod_type {
                    IodType::Single => sv_ver_at(r, &ap, e, floor)?.map_or(0, |(v, _)| v.epoch),
                    IodType::Array => {
                        let (recs_all, pieces_all, _) = array_pieces(r, &ap, e, floor, iod)?;
                        pieces_all
                            .iter()
                            .zip(&recs_all)
                            .flat_map(|(ps, recs)| ps.iter().map(|p| recs[p.src].ext.ver.epoch))
                            .max()
                            .unwrap_or(0)
                    }
                };
                out.push(Epoch(found));
            }
            Ok(out)
        })
    }

    /// One pass over the index (the default looks a value up twice when its
    /// size is open), and the bytes read from the bdev or the index become the
    /// reply buffer itself when one extent (or one single value) covers the
    /// whole request: no zeroed buffer, no copy.
    fn fetch_owned(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        limit: u64,
    ) -> StoreResult<(FetchOut, Vec<Vec<u8>>)> {
        let e = fetch_args_ok(oid, dkey, epoch, iods)?;
        let dp = keys::dkey_prefix(cont, oid, &dkey.0);
        self.with_view(|r, st| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let op = keys::obj_prefix(cont, oid);
            let dfloor = newest_punch(r, &op, e)?.max(newest_punch(r, &dp, e)?);
            let mut out = FetchOut::default();
            let mut bufs = Vec::with_capacity(iods.len());
            let mut total = 0u64;
            let mut budget = |n: u64| -> StoreResult<()> {
                total = total.saturating_add(n);
                if total > limit {
                    return Err(StoreError::TooLarge { size: total, limit });
                }
                Ok(())
            };
            for iod in iods {
                let ap = keys::akey_prefix(&dp, &iod.akey.0);
                let floor = dfloor.max(newest_punch(r, &ap, e)?);
                match iod.iod_type {
                    IodType::Single => {
                        if iod.rec_size != 0 {
                            budget(iod.rec_size)?;
                        }
                        // the latest-value cache holds only never-punched
                        // containers' newest versions (floor is None there)
                        let cacheable = r.never_punched(&op);
                        let hit = if cacheable {
                            st.svc.get(&ap, e).cloned()
                        } else {
                            None
                        };
                        let loc = match hit {
                            Some(l) => Some(l),
                            None => match sv_ver_at(r, &ap, e, floor)? {
                                Some((ver, l)) => {
                                    if cacheable && e == EPOCH_MAX.0 {
                                        st.svc.put(&ap, ver.epoch, &l);
                                    }
                                    Some(l)
                                }
                                None => None,
                            },
                        };
                        let Some(loc) = loc else {
                            out.sizes.push(0);
                            bufs.push(Vec::new());
                            continue;
                        };
                        let size = loc.len();
                        out.sizes.push(size);
                        if iod.rec_size == 0 {
                            budget(size)?;
                        } else if iod.rec_size < size {
                            return Err(StoreError::BufferTooSmall {
                                need: size,
                                have: iod.rec_size,
                            });
                        }
                        bufs.push(match loc {
                            Loc::Inline(d) => d,
                            l => st.load(&l)?,
                        });
                    }
                    IodType::Array => {
                        let (recs_all, pieces_all, size) = array_pieces(r, &ap, e, floor, iod)?;
                        if iod.rec_size != 0 && size != 0 && iod.rec_size != size {
                            return Err(StoreError::InvalidArg(format!(
                                "record size {} asked, {} stored",
                                iod.rec_size, size
                            )));
                        }
                        out.sizes.push(size);
                        let rs = if iod.rec_size != 0 {
                            iod.rec_size
                        } else {
                            size
                        };
                        let want = iod
                            .recxs
                            .iter()
                            .map(|x| x.nr.saturating_mul(rs))
                            .fold(0u64, u64::saturating_add);
                        budget(want)?;
                        if want == 0 {
                            bufs.push(Vec::new());
                            continue;
                        }
                        // one extent read whole covers the request: its bytes are the reply
                        if let ([rx], [pieces], [recs]) =
                            (&iod.recxs[..], &pieces_all[..], &recs_all[..])
                        {
                            if let [p] = &pieces[..] {
                                let x = &recs[p.src];
                                if p.idx == rx.idx
                                    && p.nr == rx.nr
                                    && x.ext.idx == rx.idx
                                    && x.ext.nr == rx.nr
                                {
                                    let mut d = st.load(&x.loc)?;
                                    if (d.len() as u64) < want {
                                        return Err(StoreError::Corrupt(
                                            "extent shorter than its records".into(),
                                        ));
                                    }
                                    d.truncate(want as usize);
                                    bufs.push(d);
                                    continue;
                                }
                            }
                        }
                        let mut buf = vec![0u8; want as usize];
                        let mut base = 0u64;
                        let mut cache: HashMap<usize, Vec<u8>> = HashMap::new();
                        for ((rx, pieces), recs) in iod.recxs.iter().zip(&pieces_all).zip(&recs_all)
                        {
                            cache.clear();
                            for p in pieces {
                                let x = &recs[p.src];
                                if let std::collections::hash_map::Entry::Vacant(slot) =
                                    cache.entry(p.src)
                                {
                                    slot.insert(st.load(&x.loc)?);
                                }
                                let d = &cache[&p.src];
                                let so = ((p.idx - x.ext.idx) * rs) as usize;
                                let dofs = (base + (p.idx - rx.idx) * rs) as usize;
                                let n = (p.nr * rs) as usize;
                                let src = d.get(so..so + n).ok_or_else(|| {
                                    StoreError::Corrupt("extent shorter than its records".into())
                                })?;
                                buf[dofs..dofs + n].copy_from_slice(src);
                            }
                            base += rx.nr * rs;
                        }
                        bufs.push(buf);
                    }
                }
            }
            Ok((out, bufs))
        })
    }

    fn punch_obj(&mut self, cont: ContId, oid: ObjectId, epoch: Epoch) -> StoreResult<()> {
        oid.validate()?;
        self.with_logged_write(|w| {
            w.write_epoch(cont, epoch)?;
            w.mark_punched(cont)?;
            let ver = w.next_ver(epoch)?;
            w.put(
                &keys::ver_key(&keys::obj_prefix(cont, oid), T_PUNCH, ver),
                &[],
            )
        })
    }

    fn punch_dkeys(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkeys: &[DKey],
    ) -> StoreResult<()> {
        oid.validate()?;
        for d in dkeys {
            key_ok(&d.0, "dkey")?;
        }
        self.with_logged_write(|w| {
            w.write_epoch(cont, epoch)?;
            w.mark_punched(cont)?;
            for d in dkeys {
                let ver = w.next_ver(epoch)?;
                w.put(
                    &keys::ver_key(&keys::dkey_prefix(cont, oid, &d.0), T_PUNCH, ver),
                    &[],
                )?;
            }
            Ok(())
        })
    }

    fn punch_akeys(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akeys: &[AKey],
    ) -> StoreResult<()> {
        oid.validate()?;
        key_ok(&dkey.0, "dkey")?;
        for a in akeys {
            key_ok(&a.0, "akey")?;
        }
        let dp = keys::dkey_prefix(cont, oid, &dkey.0);
        self.with_logged_write(|w| {
            w.write_epoch(cont, epoch)?;
            w.mark_punched(cont)?;
            for a in akeys {
                let ver = w.next_ver(epoch)?;
                w.put(
                    &keys::ver_key(&keys::akey_prefix(&dp, &a.0), T_PUNCH, ver),
                    &[],
                )?;
            }
            Ok(())
        })
    }

    fn list_obj(
        &mut self,
        cont: ContId,
        epoch: Epoch,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<ObjectId>> {
        let e = read_epoch(epoch)?;
        self.with_view(|r, _| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let cp = keys::cont_prefix(cont);
            let hi = keys::prefix_end(&cp);
            let mut out = Vec::new();
            if anchor.eof || limit == 0 {
                return Ok(out);
            }
            let mut lo = cp.clone();
            if anchor.started {
                match keys::prefix_end(&[cp.as_slice(), &anchor.after].concat()) {
                    Some(k) => lo = k,
                    None => {
                        anchor.eof = true;
                        return Ok(out);
                    }
                }
            }
            anchor.started = true;
            loop {
                let Some(k) = first_key(r, &lo, hi.as_deref())? else {
                    anchor.eof = true;
                    return Ok(out);
                };
                let ob: [u8; 16] = k
                    .get(16..32)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| StoreError::Corrupt("short key".into()))?;
                let oid = ObjectId::from_bytes(ob);
                let op = keys::obj_prefix(cont, oid);
                let ofloor = newest_punch(r, &op, e)?;
                let mut vis = false;
                walk_children(r, &op, None, &mut |_, dp| {
                    vis = dkey_visible(r, dp, e, ofloor)?;
                    Ok(!vis)
                })?;
                if vis {
                    out.push(oid);
                    anchor.after = ob.to_vec();
                }
                match keys::prefix_end(&op) {
                    Some(n) => lo = n,
                    None => {
                        anchor.eof = true;
                        return Ok(out);
                    }
                }
                if out.len() >= limit {
                    anchor.after = ob.to_vec();
                    return Ok(out);
                }
            }
        })
    }

    fn list_dkey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<DKey>> {
        oid.validate()?;
        let e = read_epoch(epoch)?;
        self.with_view(|r, _| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let op = keys::obj_prefix(cont, oid);
            let ofloor = newest_punch(r, &op, e)?;
            Ok(list_children(r, &op, e, ofloor, true, anchor, limit)?
                .into_iter()
                .map(DKey)
                .collect())
        })
    }

    fn list_akey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<AKey>> {
        oid.validate()?;
        key_ok(&dkey.0, "dkey")?;
        let e = read_epoch(epoch)?;
        self.with_view(|r, _| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            let op = keys::obj_prefix(cont, oid);
            let dp = keys::dkey_prefix(cont, oid, &dkey.0);
            let floor = newest_punch(r, &op, e)?.max(newest_punch(r, &dp, e)?);
            Ok(list_children(r, &dp, e, floor, false, anchor, limit)?
                .into_iter()
                .map(AKey)
                .collect())
        })
    }

    fn list_recx(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akey: &AKey,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<(Vec<Recx>, u64)> {
        oid.validate()?;
        key_ok(&dkey.0, "dkey")?;
        key_ok(&akey.0, "akey")?;
        let e = read_epoch(epoch)?;
        self.with_view(|r, _| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            if anchor.eof || limit == 0 {
                return Ok((Vec::new(), 0));
            }
            let op = keys::obj_prefix(cont, oid);
            let dp = keys::dkey_prefix(cont, oid, &dkey.0);
            let ap = keys::akey_prefix(&dp, &akey.0);
            let floor = newest_punch(r, &op, e)?
                .max(newest_punch(r, &dp, e)?)
                .max(newest_punch(r, &ap, e)?);
            let (runs, rs) = visible_runs(r, &ap, e, floor)?;
            let from = if anchor.started {
                anchor
                    .after
                    .as_slice()
                    .try_into()
                    .map(u64::from_be_bytes)
                    .map_err(|_| StoreError::InvalidArg("bad anchor".into()))?
            } else {
                0
            };
            let rest: Vec<Recx> = runs
                .into_iter()
                .filter(|&(i, _)| i >= from)
                .map(|(idx, nr)| Recx { idx, nr })
                .collect();
            anchor.started = true;
            let page: Vec<Recx> = rest.iter().take(limit).copied().collect();
            anchor.eof = page.len() == rest.len();
            if let Some(l) = page.last() {
                anchor.after = l.end().to_be_bytes().to_vec();
            }
            Ok((page, rs))
        })
    }

    fn query_max_dkey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
    ) -> StoreResult<Option<DKey>> {
        let (otype, _) = oid.validate()?;
        let numeric = otype.numeric_dkeys();
        let mut anchor = Anchor::default();
        let mut best: Option<DKey> = None;
        while !anchor.is_eof() {
            for d in self.list_dkey(cont, oid, epoch, &mut anchor, 1024)? {
                if best.as_ref().is_none_or(|b| d.sorts_above(b, numeric)) {
                    best = Some(d);
                }
            }
        }
        Ok(best)
    }

    fn query_max_recx(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akey: &AKey,
    ) -> StoreResult<Option<Recx>> {
        let mut anchor = Anchor::default();
        let (all, _) = self.list_recx(cont, oid, epoch, dkey, akey, &mut anchor, usize::MAX)?;
        Ok(all.last().copied())
    }

    fn snap_create(&mut self, cont: ContId, epoch: Epoch, name: Option<&str>) -> StoreResult<()> {
        if epoch.0 == 0 || epoch == EPOCH_MAX {
            return Err(StoreError::BadEpoch(
                epoch,
                "a snapshot needs an epoch in 1..EPOCH_MAX",
            ));
        }
        self.with_write(|w| {
            let hwm = w.cont_hwm(cont)?;
            if epoch.0 <= hwm {
                return Err(StoreError::BadEpoch(
                    epoch,
                    "at or below the container's aggregated epoch",
                ));
            }
            let mut k = keys::cont_prefix(cont);
            k.extend_from_slice(&epoch.0.to_be_bytes());
            w.snaps
                .insert(k.as_slice(), name.unwrap_or("").as_bytes())
                .map_err(ix)?;
            Ok(())
        })
    }

    fn snap_list(&mut self, cont: ContId) -> StoreResult<Vec<Snapshot>> {
        self.with_view(|r, _| {
            r.cont(cont)?.ok_or(StoreError::NoContainer(cont))?;
            r.snaps(cont)
        })
    }

    fn snap_destroy(&mut self, cont: ContId, epoch: Epoch) -> StoreResult<()> {
        self.with_write(|w| {
            w.cont_hwm(cont)?;
            let mut k = keys::cont_prefix(cont);
            k.extend_from_slice(&epoch.0.to_be_bytes());
            if w.snaps.remove(k.as_slice()).map_err(ix)?.is_none() {
                return Err(StoreError::NoSnapshot(epoch));
            }
            Ok(())
        })
    }

    fn aggregate(&mut self, cont: ContId, upto: Epoch) -> StoreResult<AggregateStats> {
        if upto.0 == 0 || upto == EPOCH_MAX {
            return Err(StoreError::BadEpoch(
                upto,
                "aggregation needs an epoch in 1..EPOCH_MAX (updates at or below it are refused afterwards)",
            ));
        }
        self.with_write(|w| aggregate::run(w, cont, upto.0))
    }

    fn space(&mut self) -> StoreResult<SpaceInfo> {
        let bs = self.st.bs;
        Ok(SpaceInfo {
            bdev_total: self.st.alloc.total_blocks() * bs,
            bdev_free: self.st.alloc.free_blocks() * bs,
            inline_bytes: self.st.inline_bytes,
            index_file_bytes: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
        })
    }

    fn epoch_high_water(&mut self) -> StoreResult<Epoch> {
        let conts = self.cont_list()?;
        let max = self.st.max_epoch;
        self.with_view(|r, _| {
            let mut m = max;
            for c in conts {
                m = m.max(r.write_floor(c)?);
            }
            Ok(Epoch(m))
        })
    }

    fn commit(&mut self) -> StoreResult<()> {
        self.commit_inner()
    }

    fn commit_start(&mut self) -> StoreResult<bool> {
        Vos::commit_start(self)
    }

    fn commit_poll(&mut self, wait: bool) -> Option<StoreResult<()>> {
        Vos::commit_poll(self, wait)
    }
}

/// Copy `data` into the sgl's buffers front to back.
fn scatter(data: &[u8], sgl: &mut SgList) {
    let mut pos = 0;
    for iov in &mut sgl.iovs {
        if pos >= data.len() {
            break;
        }
        let n = iov.len().min(data.len() - pos);
        iov[..n].copy_from_slice(&data[pos..pos + n]);
        pos += n;
    }
}

#[cfg(test)]
mod tests;
