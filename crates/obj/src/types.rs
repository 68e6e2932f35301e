//! The object-store data model shared by the versioned store (`vos`), the engine,
//! the RPC layer and the client: libdaos's names where they exist.
//!
//! - A *pool* and a *container* are named by UUIDs ([`PoolId`], [`ContId`]).
//! - An *object* is a 128-bit [`ObjectId`] whose top 32 bits of `hi` carry the
//!   object type and class (DAOS's layout; see [`ObjectId::generate`]).
//! - Under an object: distribution keys ([`DKey`]) → attribute keys ([`AKey`]) → a
//!   value, either a single value ([`IodType::Single`], replaced whole) or an array
//!   of fixed-size records ([`IodType::Array`], addressed by [`Recx`] extents,
//!   partial overwrite, holes read as zeroes).
//! - Every change is tagged with an [`Epoch`] (from a [`Hlc`]); reads at an epoch see
//!   exactly the changes with epoch ≤ it ([`EPOCH_MAX`] = latest).
//! - [`ObjectStore`] is the store API one target exposes for one pool shard
//!   (`daos_obj_update/fetch/punch/list_*/query_key`, `daos_cont_*_snap`, aggregation,
//!   space query).

use std::fmt;

pub use uuid::Uuid;

/// A pool's UUID.
pub type PoolId = Uuid;
/// A container's UUID.
pub type ContId = Uuid;

// ---------------------------------------------------------------------------
// Object ids and classes
// ---------------------------------------------------------------------------

/// Bits of `ObjectId::hi` reserved for the type and class (the top 32, as in DAOS).
pub const OID_RESERVED_BITS: u32 = 32;
const TYPE_SHIFT: u32 = 56;
const REDUN_SHIFT: u32 = 48;
const GRP_SHIFT: u32 = 32;

/// A 128-bit object id (`daos_obj_id_t`). The top 32 bits of `hi` hold
/// `type:8 | redundancy:8 | groups:16` (DAOS's `OID_FMT_*` layout); the caller owns
/// the low 32 bits of `hi` and all of `lo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ObjectId {
    pub hi: u64,
    pub lo: u64,
}

/// The object's key layout (`daos_otype_t`; the numbering here is ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjType {
    /// Opaque dkeys and akeys (the default).
    MultiHashed = 0,
    /// dkeys are u64s (8 bytes, little-endian as in DAOS), for max-dkey queries.
    DkeyUint64 = 1,
    /// A flat key-value object (`daos_kv_*`): one akey per dkey.
    KvHashed = 2,
    /// A byte array (`daos_array_*`): dkey = chunk number as u64.
    Array = 3,
}

impl ObjType {
    /// Whether a max-dkey query orders this type's dkeys as u64 values
    /// (`DkeyUint64`, and arrays, whose chunk dkeys are u64).
    pub fn numeric_dkeys(self) -> bool {
        matches!(self, ObjType::DkeyUint64 | ObjType::Array)
    }
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => ObjType::MultiHashed,
            1 => ObjType::DkeyUint64,
            2 => ObjType::KvHashed,
            3 => ObjType::Array,
            _ => return None,
        })
    }
}

/// Data protection of an object class (`daos_obj_redun`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Redundancy {
    /// No protection (`OC_S*`).
    None,
    /// `n`-way replication, `n` in 2..=15 (`OC_RP_nG*`).
    Replicas(u8),
    /// Erasure code with `k` data cells (2, 4, 8 or 16) and `p` parity cells (1 or 2).
    Ec { k: u8, p: u8 },
}

/// An object class: protection and number of redundancy groups (`daos_oclass_id_t`).
/// `groups == 0` means "as many as there are targets" (`OC_SX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjClass {
    pub redundancy: Redundancy,
    pub groups: u16,
}

impl ObjClass {
    /// `OC_S1`: one shard, no protection.
    pub const S1: ObjClass = ObjClass {
        redundancy: Redundancy::None,
        groups: 1,
    };
    /// `OC_SX`: striped over all targets, no protection.
    pub const SX: ObjClass = ObjClass {
        redundancy: Redundancy::None,
        groups: 0,
    };
    /// `OC_RP_2G1`.
    pub const RP_2G1: ObjClass = ObjClass {
        redundancy: Redundancy::Replicas(2),
        groups: 1,
    };

    fn redun_code(self) -> Result<u8, OidError> {
        match self.redundancy {
            Redundancy::None => Ok(0x01),
            Redundancy::Replicas(n) if (2..=15).contains(&n) => Ok(0x20 | n),
            Redundancy::Ec { k, p } if matches!(k, 2 | 4 | 8 | 16) && matches!(p, 1 | 2) => {
                Ok(0x80 | ((k.trailing_zeros() as u8) << 2) | p)
            }
            _ => Err(OidError::BadClass(format!("{:?}", self.redundancy))),
        }
    }

    fn from_code(code: u8, groups: u16) -> Result<Self, OidError> {
        let redundancy = match code {
            0x01 => Redundancy::None,
            c if c & 0xf0 == 0x20 && (2..=15).contains(&(c & 0x0f)) => {
                Redundancy::Replicas(c & 0x0f)
            }
            c if c & 0x80 != 0 && c & 0x60 == 0 && matches!(c & 0x03, 1 | 2) => {
                let k = 1u8 << ((c >> 2) & 0x07);
                if !matches!(k, 2 | 4 | 8 | 16) {
                    return Err(OidError::BadClass(format!("redundancy code {code:#04x}")));
                }
                Redundancy::Ec { k, p: c & 0x03 }
            }
            _ => return Err(OidError::BadClass(format!("redundancy code {code:#04x}"))),
        };
        Ok(ObjClass { redundancy, groups })
    }

    /// Parse a DAOS class name: `S1`, `SX`, `S<n>`, `RP_<r>G<n>`, `RP_<r>GX`,
    /// `EC_<k>P<p>G<n>`, `EC_<k>P<p>GX` (an optional `OC_` prefix is accepted).
    pub fn parse(s: &str) -> Result<Self, OidError> {
        let bad = || OidError::BadClass(s.to_string());
        let t = s.strip_prefix("OC_").unwrap_or(s);
        let groups = |g: &str| -> Result<u16, OidError> {
            if g == "X" {
                Ok(0)
            } else {
                g.parse::<u16>().ok().filter(|&n| n > 0).ok_or_else(bad)
            }
        };
        let class = if let Some(g) = t.strip_prefix('S') {
            ObjClass {
                redundancy: Redundancy::None,
                groups: groups(g)?,
            }
        } else if let Some(rest) = t.strip_prefix("RP_") {
            let (r, g) = rest.split_once('G').ok_or_else(bad)?;
            ObjClass {
                redundancy: Redundancy::Replicas(r.parse().map_err(|_| bad())?),
                groups: groups(g)?,
            }
        } else if let Some(rest) = t.strip_prefix("EC_") {
            let (kp, g) = rest.split_once('G').ok_or_else(bad)?;
            let (k, p) = kp.split_once('P').ok_or_else(bad)?;
            ObjClass {
                redundancy: Redundancy::Ec {
                    k: k.parse().map_err(|_| bad())?,
                    p: p.parse().map_err(|_| bad())?,
                },
                groups: groups(g)?,
            }
        } else {
            return Err(bad());
        };
        class.redun_code().map_err(|_| bad())?;
        Ok(class)
    }
}

impl fmt::Display for ObjClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = |f: &mut fmt::Formatter<'_>| {
            if self.groups == 0 {
                write!(f, "X")
            } else {
                write!(f, "{}", self.groups)
            }
        };
        match self.redundancy {
            Redundancy::None => write!(f, "S")?,
            Redundancy::Replicas(r) => write!(f, "RP_{r}G")?,
            Redundancy::Ec { k, p } => write!(f, "EC_{k}P{p}G")?,
        }
        g(f)
    }
}

/// A bad object id or class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidError {
    /// The caller's `hi` uses the reserved top 32 bits.
    #[error("object id hi {0:#x} uses the top 32 bits reserved for type and class")]
    ReservedBits(u64),
    /// Unknown or unsupported object class.
    #[error("bad object class {0}")]
    BadClass(String),
    /// Unknown object type code.
    #[error("bad object type code {0}")]
    BadType(u8),
    /// Not `HI.LO` in hex.
    #[error("bad object id text {0:?} (want HI.LO in hex)")]
    BadText(String),
}

impl ObjectId {
    /// `daos_obj_generate_oid`: fill the reserved top 32 bits of `hi` with type and
    /// class. The caller's `hi` must leave them zero.
    pub fn generate(hi: u64, lo: u64, otype: ObjType, class: ObjClass) -> Result<Self, OidError> {
        if hi >> GRP_SHIFT != 0 {
            return Err(OidError::ReservedBits(hi));
        }
        let hdr = (u64::from(otype as u8) << TYPE_SHIFT)
            | (u64::from(class.redun_code()?) << REDUN_SHIFT)
            | (u64::from(class.groups) << GRP_SHIFT);
        Ok(ObjectId { hi: hi | hdr, lo })
    }
    /// The object type from the top bits.
    pub fn otype(&self) -> Result<ObjType, OidError> {
        let t = (self.hi >> TYPE_SHIFT) as u8;
        ObjType::from_u8(t).ok_or(OidError::BadType(t))
    }
    /// The object class from the top bits.
    pub fn class(&self) -> Result<ObjClass, OidError> {
        ObjClass::from_code(
            (self.hi >> REDUN_SHIFT) as u8,
            (self.hi >> GRP_SHIFT) as u16,
        )
    }
    /// Whether an engine stripes this object's dkeys over its targets (see
    /// [`crate::rpc::msg::is_striped`]): a class of several groups.
    pub fn is_striped(&self) -> bool {
        self.class().is_ok_and(|c| c.groups != 1)
    }
    /// Check that type and class decode (what the engine does with a client's OID).
    pub fn validate(&self) -> Result<(ObjType, ObjClass), OidError> {
        Ok((self.otype()?, self.class()?))
    }
    /// The 16-byte big-endian form (`hi` then `lo`): sorts like `(hi, lo)`.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.hi.to_be_bytes());
        b[8..].copy_from_slice(&self.lo.to_be_bytes());
        b
    }
    /// Inverse of [`ObjectId::to_bytes`].
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let mut hi = [0u8; 8];
        let mut lo = [0u8; 8];
        hi.copy_from_slice(&b[..8]);
        lo.copy_from_slice(&b[8..]);
        ObjectId {
            hi: u64::from_be_bytes(hi),
            lo: u64::from_be_bytes(lo),
        }
    }
}

impl fmt::Display for ObjectId {
    /// `HI.LO` in hex, as `daos` tools print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}.{:x}", self.hi, self.lo)
    }
}

impl std::str::FromStr for ObjectId {
    type Err = OidError;
    fn from_str(s: &str) -> Result<Self, OidError> {
        let bad = || OidError::BadText(s.to_string());
        let (h, l) = s.split_once('.').ok_or_else(bad)?;
        Ok(ObjectId {
            hi: u64::from_str_radix(h, 16).map_err(|_| bad())?,
            lo: u64::from_str_radix(l, 16).map_err(|_| bad())?,
        })
    }
}

// ---------------------------------------------------------------------------
// Epochs and the hybrid logical clock
// ---------------------------------------------------------------------------

/// An epoch (`daos_epoch_t`): a hybrid-logical-clock timestamp. Ordered; 0 is
/// never used by an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

/// The latest epoch (`DAOS_EPOCH_MAX`): a read at it sees everything committed.
pub const EPOCH_MAX: Epoch = Epoch(u64::MAX);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == EPOCH_MAX {
            write!(f, "latest")
        } else {
            write!(f, "{:#x}", self.0)
        }
    }
}

/// Low bits of an HLC timestamp used by the logical counter (DAOS uses 18).
pub const HLC_LOGICAL_BITS: u32 = 18;
const HLC_LOGICAL_MASK: u64 = (1 << HLC_LOGICAL_BITS) - 1;

/// A hybrid logical clock (sans-IO: the caller passes physical time in).
///
/// A timestamp is physical nanoseconds with the low [`HLC_LOGICAL_BITS`] replaced
/// by a logical counter, so timestamps track wall time (to ~0.26 ms) yet are
/// strictly increasing and respect causality across nodes through
/// [`Hlc::observe`].
#[derive(Debug, Clone, Default)]
pub struct Hlc {
    last: u64,
}

impl Hlc {
    /// A clock that has issued nothing yet.
    pub fn new() -> Self {
        Hlc { last: 0 }
    }
    /// A clock that will only issue timestamps above `last` (e.g. the highest
    /// epoch found in a store at restart).
    pub fn starting_after(last: Epoch) -> Self {
        Hlc { last: last.0 }
    }
    /// A new timestamp, strictly above every one issued or observed before.
    /// `phys_ns` is the caller's wall clock in nanoseconds.
    pub fn now(&mut self, phys_ns: u64) -> Epoch {
        let phys = phys_ns & !HLC_LOGICAL_MASK;
        let t = if phys > self.last {
            phys
        } else {
            self.last.saturating_add(1)
        };
        // Never reach EPOCH_MAX: it means "latest".
        let t = t.clamp(1, u64::MAX - 1);
        self.last = t;
        Epoch(t)
    }
    /// Merge a timestamp seen from another node (message receipt).
    pub fn observe(&mut self, remote: Epoch) {
        if remote != EPOCH_MAX && remote.0 > self.last {
            self.last = remote.0;
        }
    }
    /// The last timestamp issued or observed.
    pub fn last(&self) -> Epoch {
        Epoch(self.last)
    }
}

// ---------------------------------------------------------------------------
// Keys, I/O descriptors, scatter-gather lists, anchors
// ---------------------------------------------------------------------------

/// Longest dkey or akey the store accepts (bytes).
pub const MAX_KEY_LEN: usize = 4096;

/// A distribution key (`daos_key_t` used as dkey): bytes, compared bytewise.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DKey(pub Vec<u8>);

/// An attribute key (`daos_key_t` used as akey).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AKey(pub Vec<u8>);

impl DKey {
    /// A dkey of a `DkeyUint64` / array object: the u64 little-endian (DAOS's convention).
    pub fn from_u64(v: u64) -> Self {
        DKey(v.to_le_bytes().to_vec())
    }
    /// Whether this dkey is greater than `other` in the order of a max-dkey
    /// query: as u64 where `numeric` (see [`ObjType::numeric_dkeys`]) and
    /// both are 8 bytes (one that is not counts as smaller), else bytewise.
    pub fn sorts_above(&self, other: &DKey, numeric: bool) -> bool {
        match (numeric, self.as_u64()) {
            (true, Some(v)) => other.as_u64().is_none_or(|o| v > o),
            _ => self > other,
        }
    }
    /// The u64 of an 8-byte dkey.
    pub fn as_u64(&self) -> Option<u64> {
        <[u8; 8]>::try_from(self.0.as_slice())
            .ok()
            .map(u64::from_le_bytes)
    }
}

impl From<&str> for DKey {
    fn from(s: &str) -> Self {
        DKey(s.as_bytes().to_vec())
    }
}
impl From<&[u8]> for DKey {
    fn from(s: &[u8]) -> Self {
        DKey(s.to_vec())
    }
}
impl From<&str> for AKey {
    fn from(s: &str) -> Self {
        AKey(s.as_bytes().to_vec())
    }
}
impl From<&[u8]> for AKey {
    fn from(s: &[u8]) -> Self {
        AKey(s.to_vec())
    }
}

/// The kind of value under an akey (`daos_iod_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IodType {
    /// One atomic value, replaced whole by each update (`DAOS_IOD_SINGLE`).
    Single,
    /// An array of `rec_size`-byte records addressed by extents (`DAOS_IOD_ARRAY`).
    Array,
}

/// A record extent: `nr` records from index `idx` (`daos_recx_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Recx {
    pub idx: u64,
    pub nr: u64,
}

impl Recx {
    /// One past the last index (saturating).
    pub fn end(&self) -> u64 {
        self.idx.saturating_add(self.nr)
    }
}

/// An I/O descriptor: one akey of an update or fetch (`daos_iod_t`).
///
/// - `Single`: `recxs` is empty; `rec_size` is the value size (update), or the size
///   of the caller's buffer / 0 = "just tell me the size" (fetch, `DAOS_REC_ANY`).
/// - `Array`: `rec_size` is the record size (fetch: 0 = any, return it), `recxs`
///   the extents; the sgl holds their records in `recxs` order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Iod {
    pub akey: AKey,
    pub iod_type: IodType,
    pub rec_size: u64,
    pub recxs: Vec<Recx>,
}

impl Iod {
    /// A single-value descriptor.
    pub fn single(akey: impl Into<AKey>, size: u64) -> Self {
        Iod {
            akey: akey.into(),
            iod_type: IodType::Single,
            rec_size: size,
            recxs: Vec::new(),
        }
    }
    /// An array descriptor.
    pub fn array(akey: impl Into<AKey>, rec_size: u64, recxs: Vec<Recx>) -> Self {
        Iod {
            akey: akey.into(),
            iod_type: IodType::Array,
            rec_size,
            recxs,
        }
    }
    /// Bytes this descriptor moves (`Array`: records × size; `Single`: `rec_size`).
    pub fn data_len(&self) -> u64 {
        match self.iod_type {
            IodType::Single => self.rec_size,
            IodType::Array => self
                .recxs
                .iter()
                .map(|r| r.nr.saturating_mul(self.rec_size))
                .fold(0u64, u64::saturating_add),
        }
    }
}

/// A scatter-gather list (`d_sg_list_t`): buffers filled or drained in order.
/// For a fetch, each buffer's `len()` is its capacity (`iov_buf_len`); the store
/// fills them front to back and reports sizes in [`FetchOut`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SgList {
    pub iovs: Vec<Vec<u8>>,
}

impl SgList {
    /// One buffer.
    pub fn one(buf: Vec<u8>) -> Self {
        SgList { iovs: vec![buf] }
    }
    /// Total bytes (capacity for a fetch).
    pub fn len(&self) -> u64 {
        self.iovs.iter().map(|v| v.len() as u64).sum()
    }
    /// Whether the list holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes concatenated (a convenience for tests and tools).
    pub fn concat(&self) -> Vec<u8> {
        self.iovs.concat()
    }
}

/// What a fetch found for each iod, in iod order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchOut {
    /// Per iod: the single value's size, or the array's record size if any
    /// record in the requested extents is visible; 0 = nothing visible at the
    /// epoch.
    pub sizes: Vec<u64>,
}

/// A listing cursor (`daos_anchor_t`): opaque, resumable, serialisable for RPC.
/// Start with `Anchor::default()`; pass the same anchor to the next call; stop
/// when [`Anchor::is_eof`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Anchor {
    /// The last key (encoded) returned, resume strictly after it; empty = start.
    pub(crate) after: Vec<u8>,
    pub(crate) started: bool,
    pub(crate) eof: bool,
}

impl Anchor {
    /// Whether the listing is complete (`daos_anchor_is_eof`).
    pub fn is_eof(&self) -> bool {
        self.eof
    }
    /// Wire form: flags byte then the resume key.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + self.after.len());
        v.push(u8::from(self.started) | (u8::from(self.eof) << 1));
        v.extend_from_slice(&self.after);
        v
    }
    /// Parse the wire form ([`Anchor::to_bytes`]); `None` if malformed.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let (&f, rest) = b.split_first()?;
        if f & !0x03 != 0 {
            return None;
        }
        Some(Anchor {
            after: rest.to_vec(),
            started: f & 1 != 0,
            eof: f & 2 != 0,
        })
    }
}

/// A snapshot: a named epoch whose versions aggregation keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Snapshot {
    pub epoch: Epoch,
    pub name: Option<String>,
}

/// What aggregation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateStats {
    /// Versions (values, extents, tombstones) dropped.
    pub versions_removed: u64,
    /// Bytes of bdev space freed.
    pub bdev_bytes_freed: u64,
    /// Bytes of inline (index) values dropped.
    pub inline_bytes_freed: u64,
}

/// Space of one store (`daos_pool_space` for one target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpaceInfo {
    /// Bdev bytes managed by the allocator.
    pub bdev_total: u64,
    /// Bdev bytes free.
    pub bdev_free: u64,
    /// Bytes of values stored inline in the index.
    pub inline_bytes: u64,
    /// Size of the index file.
    pub index_file_bytes: u64,
}

/// Errors of the store API. Engine and client map them to wire status codes.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such container in this store.
    #[error("container {0} not found")]
    NoContainer(ContId),
    /// The container already exists.
    #[error("container {0} already exists")]
    ContainerExists(ContId),
    /// Bad object id or class.
    #[error(transparent)]
    Oid(#[from] OidError),
    /// A caller mistake (mismatched iods/sgls, empty key, zero epoch, ...).
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    /// A value or key bigger than the store accepts.
    #[error("value too large: {size} bytes (limit {limit})")]
    TooLarge { size: u64, limit: u64 },
    /// The fetch buffer is smaller than the value (`-DER_REC2BIG`); `need` bytes.
    #[error("buffer too small: value needs {need} bytes, buffer has {have}")]
    BufferTooSmall { need: u64, have: u64 },
    /// Not enough free space on the bdev.
    #[error("out of space: need {need} bytes, {free} free")]
    NoSpace { need: u64, free: u64 },
    /// The epoch is not allowed here (zero, `EPOCH_MAX` for an update, or at or
    /// below the aggregated range for a snapshot).
    #[error("bad epoch {0}: {1}")]
    BadEpoch(Epoch, &'static str),
    /// No snapshot at that epoch.
    #[error("no snapshot at epoch {0}")]
    NoSnapshot(Epoch),
    /// Stored data failed its checksum (or the index is inconsistent).
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// The bdev failed an I/O.
    #[error("bdev: {0}")]
    Bdev(String),
    /// The index database failed.
    #[error("index: {0}")]
    Index(String),
}

/// Result of the store API.
pub type StoreResult<T> = Result<T, StoreError>;

/// The versioned-store API of one target's shard of a pool (DAOS VOS's role;
/// libdaos names). All calls are synchronous and run on the owning target's
/// poller thread (no locks on the data path).
///
/// Durability: a change made by `update`, `punch_*`, `snap_*`, `aggregate` or
/// `cont_*` is durable once [`ObjectStore::commit`] returns (and at once when the
/// store is in auto-commit mode). An engine that batches (group commit) applies
/// every request of one poll round, calls `commit` once, and only then replies.
pub trait ObjectStore {
    /// Create an empty container.
    fn cont_create(&mut self, cont: ContId) -> StoreResult<()>;
    /// Destroy a container and everything in it (its bdev space is freed).
    fn cont_destroy(&mut self, cont: ContId) -> StoreResult<()>;
    /// The containers of this store.
    fn cont_list(&mut self) -> StoreResult<Vec<ContId>>;

    /// `daos_obj_update`: write several akeys of one dkey at `epoch`. `sgls[i]`
    /// holds exactly `iods[i].data_len()` bytes. `epoch` (like a punch's) must be
    /// above the container's newest snapshot and aggregated epoch
    /// ([`StoreError::BadEpoch`] otherwise): a snapshot's view never changes.
    fn update(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &[SgList],
    ) -> StoreResult<()>;

    /// [`ObjectStore::update`] with each iod's bytes in one borrowed buffer
    /// (`datas[i]` for `iods[i]`): the engine passes slices of the RPC's
    /// bulk region, with no copy into an owned [`SgList`]. The default copies
    /// them into one and calls `update`.
    fn update_flat(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        datas: &[&[u8]],
    ) -> StoreResult<()> {
        let sgls: Vec<SgList> = datas.iter().map(|d| SgList::one(d.to_vec())).collect();
        self.update(cont, oid, epoch, dkey, iods, &sgls)
    }

    /// `daos_obj_fetch`: read several akeys of one dkey as of `epoch`. Fills
    /// `sgls[i]` front to back. Arrays: holes read as zeroes (the whole range
    /// when nothing is visible, if the iod gives the record size). A missing
    /// single value reports size 0 and leaves its buffer untouched.
    /// A single value larger than its sgl fails with [`StoreError::BufferTooSmall`];
    /// an sgl of zero bytes just asks for sizes.
    fn fetch(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &mut [SgList],
    ) -> StoreResult<FetchOut>;

    /// A fetch that hands back what it found, one buffer per iod (the RPC
    /// server's form: no caller buffers to fill). An iod with record size 0
    /// takes the stored size; a single value's buffer is exactly the value
    /// (empty when nothing is visible); an array's is its records, holes as
    /// zeroes. More than `limit` bytes in all fails with [`StoreError::TooLarge`]
    /// before anything is read. The default runs [`ObjectStore::fetch`] twice
    /// when a size is open (sizes, then data); a store may do it in one pass.
    fn fetch_owned(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        limit: u64,
    ) -> StoreResult<(FetchOut, Vec<Vec<u8>>)> {
        let mut iods = iods.to_vec();
        if iods.iter().any(|i| i.rec_size == 0) {
            let mut empty = vec![SgList::default(); iods.len()];
            let sizes = self.fetch(cont, oid, epoch, dkey, &iods, &mut empty)?;
            for (i, s) in iods.iter_mut().zip(sizes.sizes) {
                if i.rec_size == 0 {
                    i.rec_size = s;
                }
            }
        }
        let mut total = 0u64;
        let mut sgls = Vec::with_capacity(iods.len());
        for i in &iods {
            total = total.saturating_add(i.data_len());
            if total > limit {
                return Err(StoreError::TooLarge { size: total, limit });
            }
            sgls.push(SgList::one(vec![0u8; i.data_len() as usize]));
        }
        let out = self.fetch(cont, oid, epoch, dkey, &iods, &mut sgls)?;
        let bufs = iods
            .iter()
            .zip(sgls)
            .zip(&out.sizes)
            .map(|((iod, sgl), &size)| {
                let mut buf = sgl.iovs.into_iter().next().unwrap_or_default();
                if iod.iod_type == IodType::Single {
                    buf.truncate(size as usize);
                }
                buf
            })
            .collect();
        Ok((out, bufs))
    }

    /// The epoch of the version each iod of a fetch at `epoch` would return
    /// (single value: its version's; array: the newest extent among the
    /// records read), `Epoch(0)` when nothing is visible. Rebuild copies a
    /// value at this epoch (read at it, written at it), so a copy never hides
    /// a newer write. Stores without versions answer `InvalidArg`.
    fn fetch_epochs(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
    ) -> StoreResult<Vec<Epoch>> {
        let _ = (cont, oid, epoch, dkey, iods);
        Err(StoreError::InvalidArg(
            "this store does not report version epochs".into(),
        ))
    }

    /// `daos_obj_punch`: the whole object reads as empty from `epoch` on.
    fn punch_obj(&mut self, cont: ContId, oid: ObjectId, epoch: Epoch) -> StoreResult<()>;
    /// `daos_obj_punch_dkeys`.
    fn punch_dkeys(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkeys: &[DKey],
    ) -> StoreResult<()>;
    /// `daos_obj_punch_akeys`.
    fn punch_akeys(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akeys: &[AKey],
    ) -> StoreResult<()>;

    /// Objects of a container with anything visible at `epoch` (the object
    /// index table's role), at most `limit`, resuming from `anchor`.
    fn list_obj(
        &mut self,
        cont: ContId,
        epoch: Epoch,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<ObjectId>>;
    /// `daos_obj_list_dkey`: dkeys with a visible value at `epoch`, in bytewise
    /// order, at most `limit`, resuming from `anchor`.
    fn list_dkey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<DKey>>;
    /// `daos_obj_list_akey`.
    fn list_akey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<Vec<AKey>>;
    /// `daos_obj_list_recx`: the array's visible extents at `epoch` (maximal runs
    /// of written records, ascending), at most `limit`; also the record size
    /// (0 if none visible).
    fn list_recx(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akey: &AKey,
        anchor: &mut Anchor,
        limit: usize,
    ) -> StoreResult<(Vec<Recx>, u64)>;

    /// `daos_obj_query_key(DAOS_GET_DKEY | DAOS_GET_MAX)`: the greatest visible
    /// dkey (bytewise for opaque keys; numerically for 8-byte u64 dkeys of
    /// `DkeyUint64`/`Array` objects).
    fn query_max_dkey(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
    ) -> StoreResult<Option<DKey>>;
    /// `daos_obj_query_key(DAOS_GET_RECX | DAOS_GET_MAX)`: the visible extent with
    /// the highest end (the last run of written records).
    fn query_max_recx(
        &mut self,
        cont: ContId,
        oid: ObjectId,
        epoch: Epoch,
        dkey: &DKey,
        akey: &AKey,
    ) -> StoreResult<Option<Recx>>;

    /// `daos_cont_create_snap`: keep the versions visible at `epoch` (which must
    /// be above the container's aggregated range).
    fn snap_create(&mut self, cont: ContId, epoch: Epoch, name: Option<&str>) -> StoreResult<()>;
    /// `daos_cont_list_snap`, ascending.
    fn snap_list(&mut self, cont: ContId) -> StoreResult<Vec<Snapshot>>;
    /// `daos_cont_destroy_snap`.
    fn snap_destroy(&mut self, cont: ContId, epoch: Epoch) -> StoreResult<()>;

    /// VOS aggregation over `(0, upto]`: drop every version no read at a snapshot
    /// or at an epoch ≥ `upto` can see, and free its space. Afterwards reads at
    /// non-snapshot epochs below `upto` are no longer guaranteed.
    fn aggregate(&mut self, cont: ContId, upto: Epoch) -> StoreResult<AggregateStats>;

    /// Space used and free.
    fn space(&mut self) -> StoreResult<SpaceInfo>;

    /// The highest epoch this store has used: of any update or punch, any
    /// container's newest snapshot and aggregated epoch. An engine that opens
    /// the store after a restart starts its clock above it, so that no new
    /// update is tagged below an acknowledged one (or refused as below a
    /// snapshot) when the wall clock is behind.
    fn epoch_high_water(&mut self) -> StoreResult<Epoch>;

    /// Make every change so far durable (bdev data flushed, then the index
    /// transaction committed with fsync).
    fn commit(&mut self) -> StoreResult<()>;

    /// Starts making every change so far durable without waiting for it:
    /// `Ok(true)` if the commit is in flight (its outcome comes from
    /// [`ObjectStore::commit_poll`], which must be asked before the next
    /// `commit_start`; nothing of the batch may be acknowledged before it
    /// says `Ok`), `Ok(false)` if it completed (as [`ObjectStore::commit`]).
    /// Changes made while it runs belong to the next commit. The default is
    /// the synchronous commit.
    fn commit_start(&mut self) -> StoreResult<bool> {
        self.commit().map(|()| false)
    }

    /// The outcome of the commit [`ObjectStore::commit_start`] left in
    /// flight: `None` while it runs (only if not `wait`); `Some(Ok(()))`
    /// also when none was started.
    fn commit_poll(&mut self, _wait: bool) -> Option<StoreResult<()>> {
        Some(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oid_roundtrip_and_errors() {
        for class in [
            ObjClass::S1,
            ObjClass::SX,
            ObjClass::RP_2G1,
            ObjClass::parse("EC_4P2GX").unwrap(),
            ObjClass::parse("OC_EC_16P1G8").unwrap(),
            ObjClass::parse("RP_3G12").unwrap(),
        ] {
            let oid = ObjectId::generate(0xdead_beef, 42, ObjType::Array, class).unwrap();
            assert_eq!(oid.class().unwrap(), class);
            assert_eq!(oid.otype().unwrap(), ObjType::Array);
            assert_eq!(oid.hi & 0xffff_ffff, 0xdead_beef);
            assert_eq!(ObjClass::parse(&class.to_string()).unwrap(), class);
            assert_eq!(oid.to_string().parse::<ObjectId>().unwrap(), oid);
            assert_eq!(ObjectId::from_bytes(oid.to_bytes()), oid);
        }
        assert!(matches!(
            ObjectId::generate(1 << 40, 0, ObjType::MultiHashed, ObjClass::S1),
            Err(OidError::ReservedBits(_))
        ));
        for bad in [
            "", "S0", "RP_1G1", "RP_16G1", "EC_3P1G1", "EC_4P3G1", "Q1", "RP_2",
        ] {
            assert!(ObjClass::parse(bad).is_err(), "{bad}");
        }
        // An id made by hand with garbage in the class bits is rejected.
        assert!(ObjectId { hi: 0, lo: 1 }.validate().is_err());
        assert!(ObjectId {
            hi: 0x09u64 << 56 | 0x01 << 48,
            lo: 1
        }
        .validate()
        .is_err());
        assert!("12".parse::<ObjectId>().is_err());
    }

    #[test]
    fn hlc_monotonic_and_causal() {
        let mut c = Hlc::new();
        let a = c.now(1_000_000_000);
        let b = c.now(1_000_000_000);
        let d = c.now(999); // clock went backwards
        assert!(a < b && b < d);
        c.observe(Epoch(d.0 + 1_000_000));
        assert!(c.now(0).0 > d.0 + 1_000_000);
        let later = c.now(1 << 50);
        assert_eq!(later.0, 1 << 50);
        assert_ne!(c.now(u64::MAX), EPOCH_MAX);
    }

    #[test]
    fn anchor_wire_form() {
        let a = Anchor {
            after: b"abc".to_vec(),
            started: true,
            eof: false,
        };
        assert_eq!(Anchor::from_bytes(&a.to_bytes()).unwrap(), a);
        assert!(Anchor::from_bytes(&[]).is_none());
        assert!(Anchor::from_bytes(&[0x80]).is_none());
    }
}
