//! Typed RPC bodies: one [`Request`] and one [`Reply`] variant per opcode,
//! each with `parse` (checked: every length, count, enum tag and bulk
//! descriptor is validated; bad input is a [`WireError`], never a panic) and
//! `emit`.
//!
//! Values travel in the frame's bulk region (see [`super::header`]); the
//! arguments carry [`BulkSeg`] descriptors `(offset, length)` into it, which
//! `parse` checks against the bulk region's length, as an RDMA engine checks
//! a remote descriptor against the client's registered buffer.

use super::codec::{Reader, Writer};
use super::header::Opcode;
use super::WireError;

/// Longest dkey/akey accepted on the wire.
pub const MAX_KEY_LEN: usize = 4096;
/// Longest label (pool, container) and property string.
pub const MAX_LABEL_LEN: usize = 127;
/// Longest listing anchor.
pub const MAX_ANCHOR_LEN: usize = 512;
/// Most iods in one update/fetch, akeys in one punch, segments per iod.
pub const MAX_IODS: usize = 1024;
/// Most recxs per iod.
pub const MAX_RECXS: usize = 4096;
/// Most entries in one listing reply.
pub const MAX_LIST: usize = 65536;

/// A 128-bit object ID as it travels (`hi` carries the object class bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct WireOid {
    pub hi: u64,
    pub lo: u64,
}

/// A pool or container named by UUID or by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRef {
    Uuid([u8; 16]),
    Label(String),
}

impl NameRef {
    fn emit(&self, w: &mut Writer<'_>) {
        match self {
            NameRef::Uuid(u) => {
                w.u8(0).uuid(u);
            }
            NameRef::Label(l) => {
                w.u8(1).str(l);
            }
        }
    }
    fn parse(r: &mut Reader<'_>) -> Result<NameRef, WireError> {
        match r.u8()? {
            0 => Ok(NameRef::Uuid(r.uuid()?)),
            1 => Ok(NameRef::Label(r.str(MAX_LABEL_LEN)?)),
            v => Err(WireError::BadValue {
                field: "name kind",
                value: u64::from(v),
            }),
        }
    }
}

/// What `pool_query`/`pool_list` say about a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub uuid: [u8; 16],
    pub label: String,
    /// Capacity in bytes (all targets together).
    pub size: u64,
    /// Bytes in use (all targets together).
    pub used: u64,
    pub targets: u32,
    pub conts: u32,
}

impl PoolInfo {
    fn emit(&self, w: &mut Writer<'_>) {
        w.uuid(&self.uuid)
            .str(&self.label)
            .u64(self.size)
            .u64(self.used)
            .u32(self.targets)
            .u32(self.conts);
    }
    fn parse(r: &mut Reader<'_>) -> Result<PoolInfo, WireError> {
        Ok(PoolInfo {
            uuid: r.uuid()?,
            label: r.str(MAX_LABEL_LEN)?,
            size: r.u64()?,
            used: r.u64()?,
            targets: r.u32()?,
            conts: r.u32()?,
        })
    }
}

/// What `cont_query`/`cont_list` say about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContInfo {
    pub uuid: [u8; 16],
    pub label: String,
    pub props: Vec<(String, String)>,
    /// Snapshot epochs, ascending.
    pub snapshots: Vec<u64>,
}

impl ContInfo {
    fn emit(&self, w: &mut Writer<'_>) {
        w.uuid(&self.uuid).str(&self.label).count(self.props.len());
        for (k, v) in &self.props {
            w.str(k).str(v);
        }
        w.count(self.snapshots.len());
        for e in &self.snapshots {
            w.u64(*e);
        }
    }
    fn parse(r: &mut Reader<'_>) -> Result<ContInfo, WireError> {
        let uuid = r.uuid()?;
        let label = r.str(MAX_LABEL_LEN)?;
        let n = r.count(256, 8)?;
        let mut props = Vec::with_capacity(n);
        for _ in 0..n {
            props.push((r.str(MAX_LABEL_LEN)?, r.str(4096)?));
        }
        let n = r.count(MAX_LIST, 8)?;
        let mut snapshots = Vec::with_capacity(n);
        for _ in 0..n {
            snapshots.push(r.u64()?);
        }
        Ok(ContInfo {
            uuid,
            label,
            props,
            snapshots,
        })
    }
}

/// A record extent of an array akey: `nr` records from index `idx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WireRecx {
    pub idx: u64,
    pub nr: u64,
}

/// A range of the frame's bulk region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkSeg {
    pub off: u32,
    pub len: u32,
}

impl BulkSeg {
    fn check(self, bulk_len: usize) -> Result<BulkSeg, WireError> {
        let end = self.off as u64 + self.len as u64;
        if end > bulk_len as u64 {
            return Err(WireError::BulkOutOfRange {
                off: self.off,
                len: self.len,
                bulk_len: bulk_len as u32,
            });
        }
        Ok(self)
    }
    /// The bytes this segment names (checked at parse time).
    pub fn slice<'a>(&self, bulk: &'a [u8]) -> &'a [u8] {
        bulk.get(self.off as usize..(self.off as usize + self.len as usize))
            .unwrap_or(&[])
    }
}

/// Kind of value under an akey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IodType {
    /// One atomic value, replaced whole.
    Single,
    /// An array of `rsize`-byte records addressed by extents.
    Array,
}

/// One I/O descriptor (`daos_iod_t`): an akey, its kind, the record size
/// (single: the value's size; 0 in a fetch = whatever is stored) and the
/// extents (arrays). In updates it carries the bulk segments holding the
/// data, concatenated in order (the engine-side SGL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireIod {
    pub akey: Vec<u8>,
    pub kind: IodType,
    pub rsize: u64,
    pub recxs: Vec<WireRecx>,
    pub sgl: Vec<BulkSeg>,
}

impl WireIod {
    fn emit(&self, w: &mut Writer<'_>) {
        w.blob(&self.akey)
            .u8(match self.kind {
                IodType::Single => 1,
                IodType::Array => 2,
            })
            .u64(self.rsize)
            .count(self.recxs.len());
        for x in &self.recxs {
            w.u64(x.idx).u64(x.nr);
        }
        w.count(self.sgl.len());
        for s in &self.sgl {
            w.u32(s.off).u32(s.len);
        }
    }
    fn parse(r: &mut Reader<'_>, bulk_len: usize) -> Result<WireIod, WireError> {
        let akey = r.blob(MAX_KEY_LEN)?.to_vec();
        let kind = match r.u8()? {
            1 => IodType::Single,
            2 => IodType::Array,
            v => {
                return Err(WireError::BadValue {
                    field: "iod type",
                    value: u64::from(v),
                })
            }
        };
        let rsize = r.u64()?;
        let n = r.count(MAX_RECXS, 16)?;
        let mut recxs = Vec::with_capacity(n);
        for _ in 0..n {
            recxs.push(WireRecx {
                idx: r.u64()?,
                nr: r.u64()?,
            });
        }
        let n = r.count(MAX_IODS, 8)?;
        let mut sgl = Vec::with_capacity(n);
        for _ in 0..n {
            sgl.push(
                BulkSeg {
                    off: r.u32()?,
                    len: r.u32()?,
                }
                .check(bulk_len)?,
            );
        }
        Ok(WireIod {
            akey,
            kind,
            rsize,
            recxs,
            sgl,
        })
    }

    /// Bytes this iod moves: `rsize` (single) or `rsize * Σ nr` (array);
    /// `None` on overflow.
    pub fn data_len(&self) -> Option<u64> {
        match self.kind {
            IodType::Single => Some(self.rsize),
            IodType::Array => self
                .recxs
                .iter()
                .try_fold(0u64, |a, x| a.checked_add(x.nr.checked_mul(self.rsize)?)),
        }
    }
}

/// What a punch removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PunchWhat {
    Object,
    Dkey(Vec<u8>),
    Akeys { dkey: Vec<u8>, akeys: Vec<Vec<u8>> },
}

/// `query_key` flags (`DAOS_GET_*`).
pub const QUERY_MAX_DKEY: u8 = 1;
pub const QUERY_MAX_AKEY: u8 = 2;
pub const QUERY_MAX_RECX: u8 = 4;

/// Object I/O arguments common to every object RPC (the routing prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjTarget {
    /// Container handle.
    pub coh: u64,
    pub oid: WireOid,
    /// Epoch to read at / write at (0 = latest / now).
    pub epoch: u64,
    /// The engine target of a striped object (see [`is_striped`]) that an
    /// operation without a dkey is for (object punch, dkey listing, max-dkey
    /// query: the client sends one to each target); ignored otherwise (an
    /// operation with a dkey goes to [`stripe_of`] its dkey).
    pub stripe: u32,
}

impl ObjTarget {
    fn emit(&self, w: &mut Writer<'_>) {
        w.u64(self.coh)
            .u64(self.oid.hi)
            .u64(self.oid.lo)
            .u64(self.epoch)
            .u32(self.stripe);
    }
    fn parse(r: &mut Reader<'_>) -> Result<ObjTarget, WireError> {
        Ok(ObjTarget {
            coh: r.u64()?,
            oid: WireOid {
                hi: r.u64()?,
                lo: r.u64()?,
            },
            epoch: r.u64()?,
            stripe: r.u32()?,
        })
    }
}

/// Whether the engine stripes `oid`'s dkeys over its targets: a class of
/// several redundancy groups (`S<n>` with n > 1, `SX`, `RP_<r>G<n>`,
/// `..GX`), as DAOS spreads such an object's shards over targets. Other
/// objects (one group: `S1`, `RP_<r>G1`) live on one target, [`route`] of
/// the OID.
pub fn is_striped(oid: WireOid) -> bool {
    crate::types::ObjectId {
        hi: oid.hi,
        lo: oid.lo,
    }
    .is_striped()
}

/// The target among `n` that holds `dkey` of a striped object: a hash of the
/// dkey salted apart from [`crate::placement::group_of`] (the dkeys that one
/// engine's group gets must still spread over that engine's targets).
pub fn stripe_of(dkey: &[u8], n: usize) -> usize {
    // FNV-1a from a different basis, then a finaliser
    let mut h: u64 = 0x6c62_272e_07bb_0142;
    for &b in dkey {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    ((h >> 16) % n.max(1) as u64) as usize
}

/// The target among `n` an object request goes to: a striped object's
/// request with a dkey to [`stripe_of`] it, one without to the target it
/// names (`None` if out of range); any other object's to [`route`] of the
/// OID. The engine admits by it and a run-to-completion client picks the
/// connection by it, so they agree.
pub fn object_target(oid: WireOid, dkey: Option<&[u8]>, stripe: u32, n: usize) -> Option<usize> {
    if !is_striped(oid) {
        return Some(route(oid, n));
    }
    match dkey {
        Some(d) => Some(stripe_of(d, n)),
        None => ((stripe as usize) < n.max(1)).then_some(stripe as usize),
    }
}

/// The dkey an object request is routed by, read from its body `args`
/// without parsing the rest (`None`: an operation on the whole object or
/// on all its dkeys: object punch, dkey listing, max-dkey query).
pub fn routing_dkey(op: Opcode, args: &[u8]) -> Result<Option<&[u8]>, WireError> {
    let mut r = Reader::new(args);
    ObjTarget::parse(&mut r)?;
    Ok(match op {
        Opcode::ObjUpdate
        | Opcode::ObjFetch
        | Opcode::ObjFetchEpochs
        | Opcode::ObjUpdateAt
        | Opcode::ObjListAkey
        | Opcode::ObjListRecx => Some(r.blob(MAX_KEY_LEN)?),
        Opcode::ObjPunch | Opcode::ObjPunchAt => match r.u8()? {
            0 => None,
            _ => Some(r.blob(MAX_KEY_LEN)?),
        },
        Opcode::ObjQueryKey => {
            let flags = r.u8()?;
            let d = r.blob(MAX_KEY_LEN)?;
            (flags & QUERY_MAX_DKEY == 0).then_some(d)
        }
        _ => None,
    })
}

/// The routing prefix of an object I/O body: container handle, OID and
/// stripe, read without parsing the rest (the network thread routes on it).
pub fn route_prefix(args: &[u8]) -> Result<(u64, WireOid, u32), WireError> {
    let mut r = Reader::new(args);
    let t = ObjTarget::parse(&mut r)?;
    Ok((t.coh, t.oid, t.stripe))
}

/// The routing prefix of an `obj_list_obj` body: container handle and the
/// engine target (shard) it lists.
pub fn list_obj_prefix(args: &[u8]) -> Result<(u64, u32), WireError> {
    let mut r = Reader::new(args);
    Ok((r.u64()?, r.u32()?))
}

/// The target owning the object `oid` among an engine's `n` targets (the
/// engine routes by it; a run-to-completion client sends the object's I/O
/// to that target's own connection).
pub fn route(oid: WireOid, n: usize) -> usize {
    let h = (oid.hi ^ oid.lo.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 32) % n.max(1) as u64) as usize
}

/// Most targets one engine advertises endpoints for.
pub const MAX_TARGETS: usize = 4096;

/// Every request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Ping,
    TargetPorts,
    PoolCreate {
        label: String,
        size: u64,
    },
    PoolDestroy {
        pool: NameRef,
        force: bool,
    },
    PoolList,
    PoolQuery {
        pool: NameRef,
    },
    PoolConnect {
        pool: NameRef,
    },
    PoolDisconnect {
        poh: u64,
    },
    ContCreate {
        poh: u64,
        label: String,
        props: Vec<(String, String)>,
    },
    ContDestroy {
        poh: u64,
        cont: NameRef,
        force: bool,
    },
    ContList {
        poh: u64,
    },
    ContOpen {
        poh: u64,
        cont: NameRef,
    },
    ContClose {
        coh: u64,
    },
    ContQuery {
        coh: u64,
    },
    SnapCreate {
        coh: u64,
    },
    SnapList {
        coh: u64,
    },
    SnapDestroy {
        coh: u64,
        epoch: u64,
    },
    ObjUpdate {
        t: ObjTarget,
        dkey: Vec<u8>,
        iods: Vec<WireIod>,
    },
    ObjFetch {
        t: ObjTarget,
        dkey: Vec<u8>,
        iods: Vec<WireIod>,
    },
    /// An `ObjFetch` answered with the epoch of each iod's visible version
    /// (single value: its version's; array: the newest extent read).
    ObjFetchEpochs {
        t: ObjTarget,
        dkey: Vec<u8>,
        iods: Vec<WireIod>,
    },
    /// An `ObjUpdate` written at `t.epoch` (a rebuild copy at its source
    /// version's epoch).
    ObjUpdateAt {
        t: ObjTarget,
        dkey: Vec<u8>,
        iods: Vec<WireIod>,
    },
    ObjPunch {
        t: ObjTarget,
        what: PunchWhat,
    },
    /// An `ObjPunch` at `t.epoch` (reintegration's removal of a stale
    /// version).
    ObjPunchAt {
        t: ObjTarget,
        what: PunchWhat,
    },
    ObjListDkey {
        t: ObjTarget,
        anchor: Vec<u8>,
        max: u32,
    },
    ObjListAkey {
        t: ObjTarget,
        dkey: Vec<u8>,
        anchor: Vec<u8>,
        max: u32,
    },
    ObjListRecx {
        t: ObjTarget,
        dkey: Vec<u8>,
        akey: Vec<u8>,
        anchor: Vec<u8>,
        max: u32,
    },
    ObjQueryKey {
        t: ObjTarget,
        flags: u8,
        dkey: Vec<u8>,
        akey: Vec<u8>,
    },
    /// The objects of container `coh` held by the engine's target `shard`
    /// (an engine spreads objects over its targets; the client walks shards
    /// `0..PoolInfo::targets`), resuming from `anchor`, at most `max`
    /// (rebuild's scan; DAOS's object-table enumeration).
    ObjListObj {
        coh: u64,
        shard: u32,
        epoch: u64,
        anchor: Vec<u8>,
        max: u32,
    },
    /// An update or punch (`op`: an encoded `dtx_op::DtxOp`)
    /// replicated through this engine as the DTX leader; `replicas`: (rank,
    /// address) of every replica, this engine first; `pool`/`cont`: labels
    /// (the same on every engine).
    DtxUpdate {
        t: ObjTarget,
        pool: String,
        cont: String,
        op: Vec<u8>,
        replicas: Vec<(u32, String)>,
    },
    /// Engine to engine: `msg` (an encoded `engine::dtx::Msg`) from rank
    /// `from` at `from_addr` to rank `to`; `peers`: addresses of the other
    /// participants (sent with a prepare, so a follower can resolve without
    /// the leader).
    DtxMsg {
        from: u32,
        from_addr: String,
        to: u32,
        msg: Vec<u8>,
        peers: Vec<(u32, String)>,
    },
}

/// Most replicas a DTX update names; largest DTX value and message.
pub const MAX_DTX_REPLICAS: usize = 16;
pub const MAX_DTX_VALUE: usize = 1 << 20;
/// Largest encoded DTX operation (its data plus keys and extents).
pub const MAX_DTX_OP: usize = MAX_DTX_VALUE + (512 << 10);
pub const MAX_DTX_MSG: usize = 2 << 20;
const MAX_ADDR_LEN: usize = 255;

impl Request {
    /// The object (handle, OID, epoch) an object I/O or DTX update names.
    pub fn obj_target(&self) -> Option<&ObjTarget> {
        match self {
            Request::ObjUpdate { t, .. }
            | Request::ObjFetch { t, .. }
            | Request::ObjFetchEpochs { t, .. }
            | Request::ObjUpdateAt { t, .. }
            | Request::ObjPunch { t, .. }
            | Request::ObjPunchAt { t, .. }
            | Request::ObjListDkey { t, .. }
            | Request::ObjListAkey { t, .. }
            | Request::ObjListRecx { t, .. }
            | Request::ObjQueryKey { t, .. }
            | Request::DtxUpdate { t, .. } => Some(t),
            _ => None,
        }
    }

    /// [`routing_dkey`] of this request.
    pub fn routing_dkey(&self) -> Option<&[u8]> {
        match self {
            Request::ObjUpdate { dkey, .. }
            | Request::ObjFetch { dkey, .. }
            | Request::ObjFetchEpochs { dkey, .. }
            | Request::ObjUpdateAt { dkey, .. }
            | Request::ObjListAkey { dkey, .. }
            | Request::ObjListRecx { dkey, .. } => Some(dkey),
            Request::ObjPunch { what, .. } | Request::ObjPunchAt { what, .. } => match what {
                PunchWhat::Object => None,
                PunchWhat::Dkey(d) | PunchWhat::Akeys { dkey: d, .. } => Some(d),
            },
            Request::ObjQueryKey { flags, dkey, .. } if flags & QUERY_MAX_DKEY == 0 => Some(dkey),
            _ => None,
        }
    }

    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Ping => Opcode::Ping,
            Request::TargetPorts => Opcode::TargetPorts,
            Request::PoolCreate { .. } => Opcode::PoolCreate,
            Request::PoolDestroy { .. } => Opcode::PoolDestroy,
            Request::PoolList => Opcode::PoolList,
            Request::PoolQuery { .. } => Opcode::PoolQuery,
            Request::PoolConnect { .. } => Opcode::PoolConnect,
            Request::PoolDisconnect { .. } => Opcode::PoolDisconnect,
            Request::ContCreate { .. } => Opcode::ContCreate,
            Request::ContDestroy { .. } => Opcode::ContDestroy,
            Request::ContList { .. } => Opcode::ContList,
            Request::ContOpen { .. } => Opcode::ContOpen,
            Request::ContClose { .. } => Opcode::ContClose,
            Request::ContQuery { .. } => Opcode::ContQuery,
            Request::SnapCreate { .. } => Opcode::SnapCreate,
            Request::SnapList { .. } => Opcode::SnapList,
            Request::SnapDestroy { .. } => Opcode::SnapDestroy,
            Request::ObjUpdate { .. } => Opcode::ObjUpdate,
            Request::ObjFetch { .. } => Opcode::ObjFetch,
            Request::ObjFetchEpochs { .. } => Opcode::ObjFetchEpochs,
            Request::ObjUpdateAt { .. } => Opcode::ObjUpdateAt,
            Request::ObjPunch { .. } => Opcode::ObjPunch,
            Request::ObjPunchAt { .. } => Opcode::ObjPunchAt,
            Request::ObjListDkey { .. } => Opcode::ObjListDkey,
            Request::ObjListAkey { .. } => Opcode::ObjListAkey,
            Request::ObjListRecx { .. } => Opcode::ObjListRecx,
            Request::ObjQueryKey { .. } => Opcode::ObjQueryKey,
            Request::ObjListObj { .. } => Opcode::ObjListObj,
            Request::DtxUpdate { .. } => Opcode::DtxUpdate,
            Request::DtxMsg { .. } => Opcode::DtxMsg,
        }
    }

    /// Appends the argument part of the body (the bulk region, if any, is
    /// appended by the caller after it).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        match self {
            Request::Ping | Request::PoolList | Request::TargetPorts => {}
            Request::PoolCreate { label, size } => {
                w.str(label).u64(*size);
            }
            Request::PoolDestroy { pool, force } => {
                pool.emit(&mut w);
                w.bool(*force);
            }
            Request::PoolQuery { pool } | Request::PoolConnect { pool } => pool.emit(&mut w),
            Request::PoolDisconnect { poh } | Request::ContList { poh } => {
                w.u64(*poh);
            }
            Request::ContCreate { poh, label, props } => {
                w.u64(*poh).str(label).count(props.len());
                for (k, v) in props {
                    w.str(k).str(v);
                }
            }
            Request::ContDestroy { poh, cont, force } => {
                w.u64(*poh);
                cont.emit(&mut w);
                w.bool(*force);
            }
            Request::ContOpen { poh, cont } => {
                w.u64(*poh);
                cont.emit(&mut w);
            }
            Request::ContClose { coh }
            | Request::ContQuery { coh }
            | Request::SnapCreate { coh }
            | Request::SnapList { coh } => {
                w.u64(*coh);
            }
            Request::SnapDestroy { coh, epoch } => {
                w.u64(*coh).u64(*epoch);
            }
            Request::ObjUpdate { t, dkey, iods }
            | Request::ObjFetch { t, dkey, iods }
            | Request::ObjFetchEpochs { t, dkey, iods }
            | Request::ObjUpdateAt { t, dkey, iods } => {
                t.emit(&mut w);
                w.blob(dkey).count(iods.len());
                for iod in iods {
                    iod.emit(&mut w);
                }
            }
            Request::ObjPunch { t, what } | Request::ObjPunchAt { t, what } => {
                t.emit(&mut w);
                match what {
                    PunchWhat::Object => {
                        w.u8(0);
                    }
                    PunchWhat::Dkey(d) => {
                        w.u8(1).blob(d);
                    }
                    PunchWhat::Akeys { dkey, akeys } => {
                        w.u8(2).blob(dkey).count(akeys.len());
                        for a in akeys {
                            w.blob(a);
                        }
                    }
                }
            }
            Request::ObjListDkey { t, anchor, max } => {
                t.emit(&mut w);
                w.blob(anchor).u32(*max);
            }
            Request::ObjListObj {
                coh,
                shard,
                epoch,
                anchor,
                max,
            } => {
                w.u64(*coh).u32(*shard).u64(*epoch).blob(anchor).u32(*max);
            }
            Request::ObjListAkey {
                t,
                dkey,
                anchor,
                max,
            } => {
                t.emit(&mut w);
                w.blob(dkey).blob(anchor).u32(*max);
            }
            Request::ObjListRecx {
                t,
                dkey,
                akey,
                anchor,
                max,
            } => {
                t.emit(&mut w);
                w.blob(dkey).blob(akey).blob(anchor).u32(*max);
            }
            Request::ObjQueryKey {
                t,
                flags,
                dkey,
                akey,
            } => {
                t.emit(&mut w);
                w.u8(*flags).blob(dkey).blob(akey);
            }
            Request::DtxUpdate {
                t,
                pool,
                cont,
                op,
                replicas,
            } => {
                t.emit(&mut w);
                w.str(pool).str(cont).blob(op).count(replicas.len());
                for (r, a) in replicas {
                    w.u32(*r).str(a);
                }
            }
            Request::DtxMsg {
                from,
                from_addr,
                to,
                msg,
                peers,
            } => {
                w.u32(*from)
                    .str(from_addr)
                    .u32(*to)
                    .blob(msg)
                    .count(peers.len());
                for (r, a) in peers {
                    w.u32(*r).str(a);
                }
            }
        }
    }

    /// Parses the argument part `args` of a request body whose bulk region
    /// is `bulk_len` bytes long.
    pub fn parse(op: Opcode, args: &[u8], bulk_len: usize) -> Result<Request, WireError> {
        let mut r = Reader::new(args);
        let req = match op {
            Opcode::Ping => Request::Ping,
            Opcode::TargetPorts => Request::TargetPorts,
            Opcode::PoolList => Request::PoolList,
            Opcode::PoolCreate => Request::PoolCreate {
                label: r.str(MAX_LABEL_LEN)?,
                size: r.u64()?,
            },
            Opcode::PoolDestroy => Request::PoolDestroy {
                pool: NameRef::parse(&mut r)?,
                force: r.bool()?,
            },
            Opcode::PoolQuery => Request::PoolQuery {
                pool: NameRef::parse(&mut r)?,
            },
            Opcode::PoolConnect => Request::PoolConnect {
                pool: NameRef::parse(&mut r)?,
            },
            Opcode::PoolDisconnect => Request::PoolDisconnect { poh: r.u64()? },
            Opcode::ContList => Request::ContList { poh: r.u64()? },
            Opcode::ContCreate => {
                let poh = r.u64()?;
                let label = r.str(MAX_LABEL_LEN)?;
                let n = r.count(256, 8)?;
                let mut props = Vec::with_capacity(n);
                for _ in 0..n {
                    props.push((r.str(MAX_LABEL_LEN)?, r.str(4096)?));
                }
                Request::ContCreate { poh, label, props }
            }
            Opcode::ContDestroy => Request::ContDestroy {
                poh: r.u64()?,
                cont: NameRef::parse(&mut r)?,
                force: r.bool()?,
            },
            Opcode::ContOpen => Request::ContOpen {
                poh: r.u64()?,
                cont: NameRef::parse(&mut r)?,
            },
            Opcode::ContClose => Request::ContClose { coh: r.u64()? },
            Opcode::ContQuery => Request::ContQuery { coh: r.u64()? },
            Opcode::SnapCreate => Request::SnapCreate { coh: r.u64()? },
            Opcode::SnapList => Request::SnapList { coh: r.u64()? },
            Opcode::SnapDestroy => Request::SnapDestroy {
                coh: r.u64()?,
                epoch: r.u64()?,
            },
            Opcode::ObjUpdate | Opcode::ObjFetch | Opcode::ObjFetchEpochs | Opcode::ObjUpdateAt => {
                let t = ObjTarget::parse(&mut r)?;
                let dkey = r.blob(MAX_KEY_LEN)?.to_vec();
                let n = r.count(MAX_IODS, 14)?;
                let mut iods = Vec::with_capacity(n);
                for _ in 0..n {
                    iods.push(WireIod::parse(&mut r, bulk_len)?);
                }
                match op {
                    Opcode::ObjUpdate => Request::ObjUpdate { t, dkey, iods },
                    Opcode::ObjUpdateAt => Request::ObjUpdateAt { t, dkey, iods },
                    Opcode::ObjFetchEpochs => Request::ObjFetchEpochs { t, dkey, iods },
                    _ => Request::ObjFetch { t, dkey, iods },
                }
            }
            Opcode::ObjPunch | Opcode::ObjPunchAt => {
                let t = ObjTarget::parse(&mut r)?;
                let what = match r.u8()? {
                    0 => PunchWhat::Object,
                    1 => PunchWhat::Dkey(r.blob(MAX_KEY_LEN)?.to_vec()),
                    2 => {
                        let dkey = r.blob(MAX_KEY_LEN)?.to_vec();
                        let n = r.count(MAX_IODS, 4)?;
                        let mut akeys = Vec::with_capacity(n);
                        for _ in 0..n {
                            akeys.push(r.blob(MAX_KEY_LEN)?.to_vec());
                        }
                        PunchWhat::Akeys { dkey, akeys }
                    }
                    v => {
                        return Err(WireError::BadValue {
                            field: "punch kind",
                            value: u64::from(v),
                        })
                    }
                };
                if op == Opcode::ObjPunchAt {
                    Request::ObjPunchAt { t, what }
                } else {
                    Request::ObjPunch { t, what }
                }
            }
            Opcode::ObjListDkey => Request::ObjListDkey {
                t: ObjTarget::parse(&mut r)?,
                anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                max: r.u32()?,
            },
            Opcode::ObjListAkey => Request::ObjListAkey {
                t: ObjTarget::parse(&mut r)?,
                dkey: r.blob(MAX_KEY_LEN)?.to_vec(),
                anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                max: r.u32()?,
            },
            Opcode::ObjListRecx => Request::ObjListRecx {
                t: ObjTarget::parse(&mut r)?,
                dkey: r.blob(MAX_KEY_LEN)?.to_vec(),
                akey: r.blob(MAX_KEY_LEN)?.to_vec(),
                anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                max: r.u32()?,
            },
            Opcode::ObjQueryKey => Request::ObjQueryKey {
                t: ObjTarget::parse(&mut r)?,
                flags: r.u8()?,
                dkey: r.blob(MAX_KEY_LEN)?.to_vec(),
                akey: r.blob(MAX_KEY_LEN)?.to_vec(),
            },
            Opcode::ObjListObj => Request::ObjListObj {
                coh: r.u64()?,
                shard: r.u32()?,
                epoch: r.u64()?,
                anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                max: r.u32()?,
            },
            Opcode::DtxUpdate => {
                let t = ObjTarget::parse(&mut r)?;
                let pool = r.str(MAX_LABEL_LEN)?;
                let cont = r.str(MAX_LABEL_LEN)?;
                let op = r.blob(MAX_DTX_OP)?.to_vec();
                let n = r.count(MAX_DTX_REPLICAS, 8)?;
                let mut replicas = Vec::with_capacity(n);
                for _ in 0..n {
                    replicas.push((r.u32()?, r.str(MAX_ADDR_LEN)?));
                }
                Request::DtxUpdate {
                    t,
                    pool,
                    cont,
                    op,
                    replicas,
                }
            }
            Opcode::DtxMsg => {
                let from = r.u32()?;
                let from_addr = r.str(MAX_ADDR_LEN)?;
                let to = r.u32()?;
                let msg = r.blob(MAX_DTX_MSG)?.to_vec();
                let n = r.count(MAX_DTX_REPLICAS, 8)?;
                let mut peers = Vec::with_capacity(n);
                for _ in 0..n {
                    peers.push((r.u32()?, r.str(MAX_ADDR_LEN)?));
                }
                Request::DtxMsg {
                    from,
                    from_addr,
                    to,
                    msg,
                    peers,
                }
            }
            Opcode::Unknown(v) => return Err(WireError::UnknownOpcode(v)),
        };
        r.finish()?;
        Ok(req)
    }
}

/// The result of one fetched iod: the size found (single value: its length,
/// 0 = no value; array: the record size) and where its data sits in the
/// reply's bulk region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedIod {
    pub size: u64,
    pub seg: BulkSeg,
}

/// Every reply body (for status `Ok`; an error reply has an empty body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Empty,
    /// A ping's answer from an engine that names its incarnation (a number
    /// a restarted engine process never reuses: the pool service's restart
    /// detection). An engine that sends none answers `Empty`.
    Pong {
        incarnation: u64,
        /// The engine's targets (what a striped object's dkeys spread over).
        targets: u32,
    },
    /// `target_ports`: one TCP port per target, in target order.
    Ports(Vec<u16>),
    Pool(PoolInfo),
    Pools(Vec<PoolInfo>),
    Handle {
        hdl: u64,
        uuid: [u8; 16],
    },
    Cont(ContInfo),
    Conts(Vec<ContInfo>),
    Epoch(u64),
    Epochs(Vec<u64>),
    /// Update: the epoch the update was written at.
    Updated {
        epoch: u64,
    },
    Fetched(Vec<FetchedIod>),
    Keys {
        keys: Vec<Vec<u8>>,
        anchor: Vec<u8>,
        eof: bool,
    },
    Recxs {
        rsize: u64,
        recxs: Vec<WireRecx>,
        anchor: Vec<u8>,
        eof: bool,
    },
    QueryKey {
        dkey: Vec<u8>,
        akey: Vec<u8>,
        recx: WireRecx,
    },
    /// Object IDs of one listing batch (`obj_list_obj`).
    Oids {
        oids: Vec<WireOid>,
        anchor: Vec<u8>,
        eof: bool,
    },
}

/// The reply shape of each opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Empty,
    /// `Empty`, or `Pong` when the engine sends its incarnation.
    Ping,
    Ports,
    Pool,
    Pools,
    Handle,
    Cont,
    Conts,
    Epoch,
    Epochs,
    Updated,
    Fetched,
    Keys,
    Recxs,
    QueryKey,
    Oids,
}

fn shape(op: Opcode) -> Option<Shape> {
    Some(match op {
        Opcode::Ping => Shape::Ping,
        Opcode::TargetPorts => Shape::Ports,
        Opcode::PoolDestroy
        | Opcode::PoolDisconnect
        | Opcode::ContDestroy
        | Opcode::ContClose
        | Opcode::SnapDestroy => Shape::Empty,
        Opcode::PoolCreate | Opcode::PoolQuery => Shape::Pool,
        Opcode::PoolList => Shape::Pools,
        Opcode::PoolConnect | Opcode::ContOpen => Shape::Handle,
        Opcode::ContCreate | Opcode::ContQuery => Shape::Cont,
        Opcode::ContList => Shape::Conts,
        Opcode::SnapCreate => Shape::Epoch,
        Opcode::SnapList | Opcode::ObjFetchEpochs => Shape::Epochs,
        // a punch answers with its epoch, as an update does
        Opcode::ObjUpdate
        | Opcode::DtxUpdate
        | Opcode::ObjUpdateAt
        | Opcode::ObjPunch
        | Opcode::ObjPunchAt => Shape::Updated,
        Opcode::DtxMsg => Shape::Empty,
        Opcode::ObjFetch => Shape::Fetched,
        Opcode::ObjListDkey | Opcode::ObjListAkey => Shape::Keys,
        Opcode::ObjListRecx => Shape::Recxs,
        Opcode::ObjQueryKey => Shape::QueryKey,
        Opcode::ObjListObj => Shape::Oids,
        Opcode::Unknown(_) => return None,
    })
}

impl Reply {
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut w = Writer::new(out);
        match self {
            Reply::Empty => {}
            Reply::Pong {
                incarnation,
                targets,
            } => {
                w.u64(*incarnation).u32(*targets);
            }
            Reply::Ports(ps) => {
                w.count(ps.len());
                for p in ps {
                    w.u32(u32::from(*p));
                }
            }
            Reply::Pool(p) => p.emit(&mut w),
            Reply::Pools(ps) => {
                w.count(ps.len());
                for p in ps {
                    p.emit(&mut w);
                }
            }
            Reply::Handle { hdl, uuid } => {
                w.u64(*hdl).uuid(uuid);
            }
            Reply::Cont(c) => c.emit(&mut w),
            Reply::Conts(cs) => {
                w.count(cs.len());
                for c in cs {
                    c.emit(&mut w);
                }
            }
            Reply::Epoch(e) | Reply::Updated { epoch: e } => {
                w.u64(*e);
            }
            Reply::Epochs(es) => {
                w.count(es.len());
                for e in es {
                    w.u64(*e);
                }
            }
            Reply::Fetched(v) => {
                w.count(v.len());
                for f in v {
                    w.u64(f.size).u32(f.seg.off).u32(f.seg.len);
                }
            }
            Reply::Keys { keys, anchor, eof } => {
                w.count(keys.len());
                for k in keys {
                    w.blob(k);
                }
                w.blob(anchor).bool(*eof);
            }
            Reply::Recxs {
                rsize,
                recxs,
                anchor,
                eof,
            } => {
                w.u64(*rsize).count(recxs.len());
                for x in recxs {
                    w.u64(x.idx).u64(x.nr);
                }
                w.blob(anchor).bool(*eof);
            }
            Reply::QueryKey { dkey, akey, recx } => {
                w.blob(dkey).blob(akey).u64(recx.idx).u64(recx.nr);
            }
            Reply::Oids { oids, anchor, eof } => {
                w.count(oids.len());
                for o in oids {
                    w.u64(o.hi).u64(o.lo);
                }
                w.blob(anchor).bool(*eof);
            }
        }
    }

    /// Parses the reply to `op` (status `Ok`).
    pub fn parse(op: Opcode, args: &[u8], bulk_len: usize) -> Result<Reply, WireError> {
        let mut r = Reader::new(args);
        let Some(sh) = shape(op) else {
            return Err(WireError::UnknownOpcode(u16::from(op)));
        };
        let rep = match sh {
            Shape::Empty => Reply::Empty,
            Shape::Ping if args.is_empty() => Reply::Empty,
            Shape::Ping => Reply::Pong {
                incarnation: r.u64()?,
                targets: r.u32()?,
            },
            Shape::Ports => {
                let n = r.count(MAX_TARGETS, 4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let p = r.u32()?;
                    v.push(u16::try_from(p).map_err(|_| WireError::BadValue {
                        field: "port",
                        value: u64::from(p),
                    })?);
                }
                Reply::Ports(v)
            }
            Shape::Pool => Reply::Pool(PoolInfo::parse(&mut r)?),
            Shape::Pools => {
                let n = r.count(MAX_LIST, 40)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(PoolInfo::parse(&mut r)?);
                }
                Reply::Pools(v)
            }
            Shape::Handle => Reply::Handle {
                hdl: r.u64()?,
                uuid: r.uuid()?,
            },
            Shape::Cont => Reply::Cont(ContInfo::parse(&mut r)?),
            Shape::Conts => {
                let n = r.count(MAX_LIST, 28)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(ContInfo::parse(&mut r)?);
                }
                Reply::Conts(v)
            }
            Shape::Epoch => Reply::Epoch(r.u64()?),
            Shape::Updated => Reply::Updated { epoch: r.u64()? },
            Shape::Epochs => {
                let n = r.count(MAX_LIST, 8)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(r.u64()?);
                }
                Reply::Epochs(v)
            }
            Shape::Fetched => {
                let n = r.count(MAX_IODS, 16)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(FetchedIod {
                        size: r.u64()?,
                        seg: BulkSeg {
                            off: r.u32()?,
                            len: r.u32()?,
                        }
                        .check(bulk_len)?,
                    });
                }
                Reply::Fetched(v)
            }
            Shape::Keys => {
                let n = r.count(MAX_LIST, 4)?;
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    keys.push(r.blob(MAX_KEY_LEN)?.to_vec());
                }
                Reply::Keys {
                    keys,
                    anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                    eof: r.bool()?,
                }
            }
            Shape::Recxs => {
                let rsize = r.u64()?;
                let n = r.count(MAX_LIST, 16)?;
                let mut recxs = Vec::with_capacity(n);
                for _ in 0..n {
                    recxs.push(WireRecx {
                        idx: r.u64()?,
                        nr: r.u64()?,
                    });
                }
                Reply::Recxs {
                    rsize,
                    recxs,
                    anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                    eof: r.bool()?,
                }
            }
            Shape::QueryKey => Reply::QueryKey {
                dkey: r.blob(MAX_KEY_LEN)?.to_vec(),
                akey: r.blob(MAX_KEY_LEN)?.to_vec(),
                recx: WireRecx {
                    idx: r.u64()?,
                    nr: r.u64()?,
                },
            },
            Shape::Oids => {
                let n = r.count(MAX_LIST, 16)?;
                let mut oids = Vec::with_capacity(n);
                for _ in 0..n {
                    oids.push(WireOid {
                        hi: r.u64()?,
                        lo: r.u64()?,
                    });
                }
                Reply::Oids {
                    oids,
                    anchor: r.blob(MAX_ANCHOR_LEN)?.to_vec(),
                    eof: r.bool()?,
                }
            }
        };
        r.finish()?;
        Ok(rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> ObjTarget {
        ObjTarget {
            coh: 9,
            oid: WireOid {
                hi: 1 << 56,
                lo: 42,
            },
            epoch: 0,
            stripe: 3,
        }
    }

    fn samples() -> Vec<Request> {
        vec![
            Request::Ping,
            Request::PoolCreate {
                label: "tank".into(),
                size: 1 << 30,
            },
            Request::PoolDestroy {
                pool: NameRef::Label("tank".into()),
                force: true,
            },
            Request::PoolConnect {
                pool: NameRef::Uuid([7; 16]),
            },
            Request::ContCreate {
                poh: 3,
                label: "c".into(),
                props: vec![("layout".into(), "posix".into())],
            },
            Request::SnapDestroy { coh: 1, epoch: 77 },
            Request::ObjUpdate {
                t: t(),
                dkey: b"d".to_vec(),
                iods: vec![WireIod {
                    akey: b"a".to_vec(),
                    kind: IodType::Array,
                    rsize: 1,
                    recxs: vec![WireRecx { idx: 0, nr: 4 }],
                    sgl: vec![BulkSeg { off: 0, len: 4 }],
                }],
            },
            Request::ObjPunch {
                t: t(),
                what: PunchWhat::Akeys {
                    dkey: b"d".to_vec(),
                    akeys: vec![b"x".to_vec(), b"y".to_vec()],
                },
            },
            Request::ObjListRecx {
                t: t(),
                dkey: b"d".to_vec(),
                akey: b"a".to_vec(),
                anchor: vec![1, 2],
                max: 16,
            },
            Request::ObjQueryKey {
                t: t(),
                flags: QUERY_MAX_DKEY,
                dkey: vec![],
                akey: vec![],
            },
            Request::ObjListObj {
                coh: 4,
                shard: 1,
                epoch: 0,
                anchor: vec![1, 7],
                max: 64,
            },
            Request::TargetPorts,
        ]
    }

    #[test]
    fn requests_round_trip() {
        for req in samples() {
            let mut b = Vec::new();
            req.emit(&mut b);
            assert_eq!(
                Request::parse(req.opcode(), &b, 4),
                Ok(req.clone()),
                "{req:?}"
            );
            // every strict prefix is refused, without panicking
            for cut in 0..b.len() {
                assert!(Request::parse(req.opcode(), &b[..cut], 4).is_err());
            }
            // so is trailing garbage
            b.push(0);
            assert!(Request::parse(req.opcode(), &b, 4).is_err());
        }
    }

    #[test]
    fn routing_dkey_of_the_bytes_is_the_requests() {
        let mut seen = 0;
        for req in samples() {
            let mut b = Vec::new();
            req.emit(&mut b);
            if req.opcode().is_object_io() {
                assert_eq!(
                    routing_dkey(req.opcode(), &b).unwrap(),
                    req.routing_dkey(),
                    "{req:?}"
                );
                seen += usize::from(req.routing_dkey().is_some());
            }
        }
        assert!(seen >= 3, "samples with a dkey: {seen}");
        // object punch, dkey listing, max-dkey query: none
        let none = [
            Request::ObjPunch {
                t: t(),
                what: PunchWhat::Object,
            },
            Request::ObjListDkey {
                t: t(),
                anchor: vec![],
                max: 1,
            },
            Request::ObjQueryKey {
                t: t(),
                flags: QUERY_MAX_DKEY | QUERY_MAX_RECX,
                dkey: vec![],
                akey: b"0".to_vec(),
            },
        ];
        for req in none {
            let mut b = Vec::new();
            req.emit(&mut b);
            assert_eq!(routing_dkey(req.opcode(), &b).unwrap(), None);
            assert_eq!(req.routing_dkey(), None);
        }
    }

    #[test]
    fn striped_objects_spread_their_dkeys_apart_from_the_groups() {
        use crate::types::{ObjClass, ObjType, ObjectId};
        let w = |c| {
            let o = ObjectId::generate(0, 7, ObjType::KvHashed, c).unwrap();
            WireOid { hi: o.hi, lo: o.lo }
        };
        let (sx, s1, s4, rp) = (
            w(ObjClass::SX),
            w(ObjClass::S1),
            w(ObjClass::parse("S4").unwrap()),
            w(ObjClass::RP_2G1),
        );
        assert!(is_striped(sx) && is_striped(s4));
        assert!(!is_striped(s1) && !is_striped(rp));
        // one-group objects: the OID's target whatever the dkey
        for d in 0..100u64 {
            let k = d.to_be_bytes();
            assert_eq!(object_target(s1, Some(&k), 0, 4), Some(route(s1, 4)));
        }
        // striped: every target gets dkeys, also among the dkeys of one
        // engine group (placement's hash is not the stripe's)
        let mut per = [0usize; 2];
        for d in 0..4000u64 {
            let k = d.to_be_bytes();
            if crate::placement::group_of(&k, 2) == 0 {
                per[object_target(sx, Some(&k), 0, 2).unwrap()] += 1;
            }
        }
        assert!(per.iter().all(|&c| c > 800), "{per:?}");
        // without a dkey: the named target, in range only
        assert_eq!(object_target(sx, None, 1, 2), Some(1));
        assert_eq!(object_target(sx, None, 2, 2), None);
    }

    #[test]
    fn bulk_descriptor_outside_the_region_is_refused() {
        let req = &samples()[6];
        let mut b = Vec::new();
        req.emit(&mut b);
        assert_eq!(
            Request::parse(Opcode::ObjUpdate, &b, 3),
            Err(WireError::BulkOutOfRange {
                off: 0,
                len: 4,
                bulk_len: 3
            })
        );
    }

    #[test]
    fn replies_round_trip() {
        let reps = [
            (Opcode::TargetPorts, Reply::Ports(vec![41001, 7, 65535])),
            (
                Opcode::PoolList,
                Reply::Pools(vec![PoolInfo {
                    uuid: [1; 16],
                    label: "p".into(),
                    size: 10,
                    used: 2,
                    targets: 2,
                    conts: 1,
                }]),
            ),
            (
                Opcode::ObjFetch,
                Reply::Fetched(vec![FetchedIod {
                    size: 3,
                    seg: BulkSeg { off: 1, len: 3 },
                }]),
            ),
            (
                Opcode::ObjListDkey,
                Reply::Keys {
                    keys: vec![b"k1".to_vec()],
                    anchor: vec![9],
                    eof: false,
                },
            ),
            (
                Opcode::ContOpen,
                Reply::Handle {
                    hdl: 5,
                    uuid: [2; 16],
                },
            ),
            (
                Opcode::ObjListObj,
                Reply::Oids {
                    oids: vec![WireOid { hi: 1 << 48, lo: 3 }],
                    anchor: vec![3, 0],
                    eof: true,
                },
            ),
        ];
        for (op, rep) in reps {
            let mut b = Vec::new();
            rep.emit(&mut b);
            assert_eq!(Reply::parse(op, &b, 4), Ok(rep.clone()));
            for cut in 0..b.len() {
                assert!(Reply::parse(op, &b[..cut], 4).is_err());
            }
        }
    }

    #[test]
    fn unknown_opcode_is_a_typed_error() {
        assert_eq!(
            Request::parse(Opcode::Unknown(0x99), &[], 0),
            Err(WireError::UnknownOpcode(0x99))
        );
    }
}
