//! Rebuild and reintegration, the object side (DAOS's `rebuild` module):
//! what to copy where, the throttle, and the copy of one dkey between two
//! engines. The pool service's leader drives it (`poolsvc::rebuild`).
//!
//! - [`plan`] (pure): for one dkey of one object, the targets that must get
//!   a copy and the one replica that sends it. A rebuild goes from the map
//!   of the last completed rebuild (`base`) to the current map; a target is a
//!   destination when it is in the dkey's group now (`UP` targets — being
//!   reintegrated — count as in, [`rebuild_map`]) and was not a serving
//!   member of the group under `base`, or is named in `extra` (the
//!   reintegrated targets, once more after they turn `UP-IN`). The source is
//!   the first member of the group that served under `base` and still
//!   serves: a replica that left the group (a spare whose original came
//!   back) is never read, so its stale copies are never spread.
//! - [`Throttle`] (sans-IO, injected clock): records per second.
//! - [`copy_dkey`] (I/O, [`Client`]): every akey of the dkey — single values
//!   and array extents, the latest visible version — read from the source
//!   with its epoch and written at that epoch (`obj_update_at`) where the
//!   destination has nothing as new: under MVCC a copy never hides a newer
//!   client write, whatever the interleaving.

use std::time::{Duration, Instant};

use crate::client::{Client, ContHandle, Error as ClientError, ObjHandle};
use crate::placement::{group_of, layout, MapError, PoolMap, TargetId, TargetState};
use crate::types::{AKey, Anchor, DKey, Epoch, Iod, ObjectId, Recx, SgList};

/// Keys or extents asked for per listing RPC.
pub const LIST_BATCH: u32 = 256;
/// Extents copied per update (bounds one RPC's bulk together with the
/// client's `MAX_IO_BYTES` check).
const RECX_BATCH: usize = 64;

/// The map rebuild places with: `UP` targets (reintegrating, being filled)
/// count as `UP-IN`, so the layout names them where they will serve.
pub fn rebuild_map(map: &PoolMap) -> PoolMap {
    let mut m = map.clone();
    let up: Vec<TargetId> = m
        .targets()
        .iter()
        .filter(|t| t.state == TargetState::Up)
        .map(|t| t.id)
        .collect();
    for t in up {
        // UP -> UP-IN is a DAOS transition: cannot fail
        let _ = m.set_state(t, TargetState::UpIn);
    }
    m
}

/// Whether `oid` has more than one replica per group (only those can be
/// rebuilt: a single-replica shard on a lost target has no other copy).
pub fn is_replicated(oid: ObjectId, map: &PoolMap) -> bool {
    oid.class()
        .ok()
        .and_then(|c| crate::placement::geometry(c, map).ok())
        .is_some_and(|(_, r)| r > 1)
}

/// What one rebuild pass does for one dkey of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkeyPlan {
    /// The replica that sends (reads are served by it).
    pub source: TargetId,
    /// The targets that get a copy.
    pub dests: Vec<TargetId>,
}

/// The dkey's group under `current` (as rebuild places it) and the members
/// of its group under `base` that were serving there; None: no such group.
#[allow(clippy::type_complexity)]
fn group_now_and_before(
    oid: ObjectId,
    dkey: &[u8],
    base: &PoolMap,
    current: &PoolMap,
) -> Result<Option<(Vec<TargetId>, Vec<TargetId>)>, MapError> {
    let now = layout(oid, &rebuild_map(current))?;
    let before = layout(oid, base)?;
    let g = group_of(dkey, now.groups.len());
    let Some(grp) = now.groups.get(g) else {
        return Ok(None);
    };
    let was: Vec<TargetId> = before
        .groups
        .get(g)
        .map(|b| {
            b.iter()
                .copied()
                .filter(|&t| base.target(t).is_ok_and(|t| t.state.is_serving()))
                .collect()
        })
        .unwrap_or_default();
    Ok(Some((grp.clone(), was)))
}

/// See the module doc. `None`: nothing to copy, or no replica left to copy
/// from (every member of the group under `base` is gone: data lost).
pub fn plan(
    oid: ObjectId,
    dkey: &[u8],
    base: &PoolMap,
    current: &PoolMap,
    extra: &[TargetId],
) -> Result<Option<DkeyPlan>, MapError> {
    let Some((grp, was)) = group_now_and_before(oid, dkey, base, current)? else {
        return Ok(None);
    };
    let serving_now = |t: TargetId| current.target(t).is_ok_and(|t| t.state.is_serving());
    let dests: Vec<TargetId> = grp
        .iter()
        .copied()
        .filter(|t| !was.contains(t) || extra.contains(t))
        .filter(|&t| serving_now(t) || current.target(t).is_ok_and(|x| x.state == TargetState::Up))
        .collect();
    if dests.is_empty() {
        return Ok(None);
    }
    let source = grp
        .iter()
        .copied()
        .find(|&t| was.contains(&t) && !extra.contains(&t) && serving_now(t));
    Ok(source.map(|source| DkeyPlan { source, dests }))
}

/// [`plan`] for filling (a rebuild pass): when no replica outside `extra`
/// can be the source, a returning target of `extra` that was a member under
/// `base` is — it holds the only copy (its data reconciled, kept: a group
/// whose other replicas are all out) — so the spares that replace the
/// others are filled from it. Without this, a group both of whose replicas
/// were out (a partition's minority) had its spare counted complete once
/// the job was done though nothing filled it: reads of it answered
/// `NonExist` (the partition test with the quick return, 5 engines, seed 4).
pub fn fill_plan(
    oid: ObjectId,
    dkey: &[u8],
    base: &PoolMap,
    current: &PoolMap,
    extra: &[TargetId],
) -> Result<Option<DkeyPlan>, MapError> {
    if let Some(p) = plan(oid, dkey, base, current, extra)? {
        return Ok(Some(p));
    }
    let Some((grp, was)) = group_now_and_before(oid, dkey, base, current)? else {
        return Ok(None);
    };
    let avail = |t: TargetId| {
        current
            .target(t)
            .is_ok_and(|x| x.state.is_serving() || x.state == TargetState::Up)
    };
    if grp
        .iter()
        .any(|&t| was.contains(&t) && !extra.contains(&t) && avail(t))
    {
        return Ok(None); // a source outside `extra` exists: plan decided
    }
    let Some(source) = grp
        .iter()
        .copied()
        .find(|&t| was.contains(&t) && extra.contains(&t) && avail(t))
    else {
        return Ok(None);
    };
    let dests: Vec<TargetId> = grp
        .iter()
        .copied()
        .filter(|&t| t != source && (!was.contains(&t) || extra.contains(&t)) && avail(t))
        .collect();
    Ok((!dests.is_empty()).then_some(DkeyPlan { source, dests }))
}

/// A records-per-second limit (token bucket with debt), on an injected
/// clock: [`Throttle::take`] says how long to wait before going on.
#[derive(Debug, Clone)]
pub struct Throttle {
    /// Records per second; 0 = unlimited.
    rate: u64,
    /// Tokens (records) available; negative = debt to wait off.
    tokens: f64,
    last: Option<Instant>,
}

impl Throttle {
    pub fn new(rate: u64) -> Throttle {
        Throttle {
            rate,
            tokens: 0.0,
            last: None,
        }
    }

    /// `n` records were just copied at `now`: how long to pause so the
    /// average stays at the rate (a burst of up to one second's worth is
    /// allowed after an idle spell).
    pub fn take(&mut self, n: u64, now: Instant) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let rate = self.rate as f64;
        let last = *self.last.get_or_insert(now);
        let dt = now.saturating_duration_since(last).as_secs_f64();
        self.last = Some(now.max(last));
        self.tokens = (self.tokens + dt * rate).min(rate);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / rate)
        }
    }
}

/// What [`copy_dkey`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Values (single values, array extents) written to the destination.
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Values the destination already had, equal.
    pub same: u64,
}

/// An open container on one engine (a connection and its handle).
pub struct Side<'a> {
    pub client: &'a Client,
    pub coh: &'a ContHandle,
}

fn oh(s: &Side<'_>, oid: ObjectId) -> ObjHandle {
    ObjHandle {
        coh: s.coh.coh,
        oid,
    }
}

/// Every akey of `dkey` in `oid`, read from `src` (latest visible version,
/// with its epoch), written to `dst` at that epoch where `dst` has nothing
/// as new (single values: an older epoch; extents: other bytes). Older
/// versions are not copied (see docs/obj-dist.md).
pub fn copy_dkey(
    src: &Side<'_>,
    dst: &Side<'_>,
    oid: ObjectId,
    dkey: &DKey,
) -> Result<CopyStats, ClientError> {
    let (so, dob) = (oh(src, oid), oh(dst, oid));
    let mut st = CopyStats::default();
    let mut anchor = Anchor::default();
    while !anchor.is_eof() {
        let (akeys, a) = src
            .client
            .obj_list_akey(&so, None, dkey, &anchor, LIST_BATCH, None)?
            .get()?;
        anchor = a;
        for akey in akeys {
            // array extents first: a single value lists none
            let mut recxs: Vec<Recx> = Vec::new();
            let mut rsize = 0;
            let mut ra = Anchor::default();
            while !ra.is_eof() {
                let (x, rs, a) = src
                    .client
                    .obj_list_recx(&so, None, dkey, &akey, &ra, LIST_BATCH, None)?
                    .get()?;
                recxs.extend(x);
                rsize = rsize.max(rs);
                ra = a;
            }
            if recxs.is_empty() || rsize == 0 {
                copy_single(src, dst, &so, &dob, dkey, &akey, &mut st)?;
            } else {
                for chunk in recxs.chunks(RECX_BATCH) {
                    copy_array(src, dst, &so, &dob, dkey, &akey, rsize, chunk, &mut st)?;
                }
            }
        }
    }
    Ok(st)
}

fn fetch_one(
    side: &Side<'_>,
    o: &ObjHandle,
    epoch: Option<Epoch>,
    dkey: &DKey,
    iod: Iod,
) -> Result<(u64, Vec<u8>), ClientError> {
    let iods = [iod];
    let f = unheld(|| {
        side.client
            .obj_fetch(o, epoch, dkey, &iods, Vec::new(), None)?
            .get()
    })?;
    let size = f.sizes.first().copied().unwrap_or(0);
    let data = f
        .sgls
        .into_iter()
        .next()
        .map(|s| s.concat())
        .unwrap_or_default();
    Ok((size, data))
}

/// `f` again while it answers "in progress" (a prepared DTX holds the key
/// on that replica: it resolves within milliseconds), up to about a second;
/// before, one held key failed the whole rebuild job (retried after 1 s,
/// and under a steady load on few keys it failed again and again).
fn unheld<T>(mut f: impl FnMut() -> Result<T, ClientError>) -> Result<T, ClientError> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.status() == Some(crate::rpc::Status::InProgress) && tries < 500 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            r => return r,
        }
    }
}

/// The epoch of the version a latest fetch of `iod` returns on `side`
/// (`Epoch(0)`: nothing; a destination without the object: nothing).
fn epoch_of(side: &Side<'_>, o: &ObjHandle, dkey: &DKey, iod: Iod) -> Result<Epoch, ClientError> {
    let iods = [iod];
    match unheld(|| {
        side.client
            .obj_fetch_epochs(o, None, dkey, &iods, None)?
            .get()
    }) {
        Ok(v) => Ok(v.first().copied().unwrap_or_default()),
        Err(e) if e.status() == Some(crate::rpc::Status::NonExist) => Ok(Epoch(0)),
        Err(e) => Err(e),
    }
}

/// A single value: the source's latest version (its epoch, then the value
/// read at exactly that epoch), written at that epoch where the destination
/// has nothing as new. A client write the destination took meanwhile is at
/// a newer epoch and stays the visible one.
fn copy_single(
    src: &Side<'_>,
    dst: &Side<'_>,
    so: &ObjHandle,
    dob: &ObjHandle,
    dkey: &DKey,
    akey: &AKey,
    st: &mut CopyStats,
) -> Result<(), ClientError> {
    let iod = Iod::single(akey.clone(), 0);
    let e = epoch_of(src, so, dkey, iod.clone())?;
    if e.0 == 0 {
        return Ok(()); // punched since it was listed
    }
    if epoch_of(dst, dob, dkey, iod.clone())? >= e {
        st.same += 1; // the same version, or a newer one
        return Ok(());
    }
    let (size, value) = fetch_one(src, so, Some(e), dkey, iod)?;
    if size == 0 {
        return Ok(());
    }
    let n = value.len() as u64;
    dst.client
        .obj_update_at(
            dob,
            e,
            dkey,
            &[Iod::single(akey.clone(), n)],
            &[SgList::one(value)],
            None,
        )?
        .get()?;
    st.records += 1;
    st.bytes += n;
    Ok(())
}

/// Array extents: read at the newest epoch among them (what a latest read
/// returns), written at that epoch where the destination's bytes differ
/// (records it has newer stay visible).
#[allow(clippy::too_many_arguments)]
fn copy_array(
    src: &Side<'_>,
    dst: &Side<'_>,
    so: &ObjHandle,
    dob: &ObjHandle,
    dkey: &DKey,
    akey: &AKey,
    rsize: u64,
    recxs: &[Recx],
    st: &mut CopyStats,
) -> Result<(), ClientError> {
    let iod = Iod::array(akey.clone(), rsize, recxs.to_vec());
    let e = epoch_of(src, so, dkey, iod.clone())?;
    if e.0 == 0 {
        return Ok(()); // punched since it was listed
    }
    let (_, data) = fetch_one(src, so, Some(e), dkey, iod.clone())?;
    let have = match fetch_one(dst, dob, None, dkey, iod.clone()) {
        Ok((_, d)) => Some(d),
        Err(e) if e.status() == Some(crate::rpc::Status::NonExist) => None,
        Err(e) => return Err(e),
    };
    if have.as_deref() == Some(&data[..]) {
        st.same += recxs.len() as u64;
        return Ok(());
    }
    let n = data.len() as u64;
    dst.client
        .obj_update_at(dob, e, dkey, &[iod], &[SgList::one(data)], None)?
        .get()?;
    st.records += recxs.len() as u64;
    st.bytes += n;
    Ok(())
}

/// The newest epoch of anything visible in `akey` on `side` (a single value
/// or any array extent; `Epoch(0)`: nothing).
fn akey_epoch(
    side: &Side<'_>,
    o: &ObjHandle,
    dkey: &DKey,
    akey: &AKey,
) -> Result<Epoch, ClientError> {
    let iods = [
        Iod::single(akey.clone(), 0),
        Iod::array(
            akey.clone(),
            0,
            vec![Recx {
                idx: 0,
                nr: 1 << 62,
            }],
        ),
    ];
    match unheld(|| {
        side.client
            .obj_fetch_epochs(o, None, dkey, &iods, None)?
            .get()
    }) {
        Ok(v) => Ok(v.into_iter().max().unwrap_or_default()),
        Err(e) if e.status() == Some(crate::rpc::Status::NonExist) => Ok(Epoch(0)),
        Err(e) => Err(e),
    }
}

/// Reintegration, before the returning engine `dst` is filled: its data of
/// `dkey` is reconciled, not trusted. Every akey it has that `src` (the
/// group's source replica) does not — removed while it was out — or every
/// akey when `src` is `None` (`dst` is not in the dkey's group any more: a
/// leftover of its time as a spare) is punched on `dst` just above its own
/// newest version, so nothing newer (a copy, a client write) is hidden.
/// What both have is left to [`copy_dkey`] (newer versions win by epoch).
/// Returns the akeys punched.
pub fn reconcile_dkey(
    src: Option<&Side<'_>>,
    dst: &Side<'_>,
    oid: ObjectId,
    dkey: &DKey,
) -> Result<u64, ClientError> {
    let dob = oh(dst, oid);
    let so = src.map(|s| oh(s, oid));
    let mut punched = 0;
    let mut anchor = Anchor::default();
    while !anchor.is_eof() {
        let (akeys, a) = dst
            .client
            .obj_list_akey(&dob, None, dkey, &anchor, LIST_BATCH, None)?
            .get()?;
        anchor = a;
        for akey in akeys {
            let mine = akey_epoch(dst, &dob, dkey, &akey)?;
            if mine.0 == 0 {
                continue;
            }
            let stale = match (src, &so) {
                (Some(s), Some(so)) => akey_epoch(s, so, dkey, &akey)?.0 == 0,
                _ => true,
            };
            if stale {
                dst.client
                    .obj_punch_akeys_at(&dob, Epoch(mine.0 + 1), dkey, &[akey], None)?
                    .get()?;
                punched += 1;
            }
        }
    }
    Ok(punched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ObjClass, ObjType};

    fn oid(lo: u64, class: &str) -> ObjectId {
        ObjectId::generate(
            0,
            lo,
            ObjType::KvHashed,
            ObjClass::parse(class).expect("class"),
        )
        .expect("oid")
    }

    #[test]
    fn exclusion_copies_to_the_spare_from_the_survivor() {
        let base = PoolMap::uniform(4, 1);
        let mut cur = base.clone();
        cur.set_domain_state(2, TargetState::Down).unwrap();
        cur.set_domain_state(2, TargetState::Excluded).unwrap();
        let (mut planned, mut untouched) = (0, 0);
        for lo in 0..2000 {
            let o = oid(lo, "RP_2G1");
            let old = layout(o, &base).unwrap().groups[0].clone();
            let new = layout(o, &cur).unwrap().groups[0].clone();
            let p = plan(o, b"k", &base, &cur, &[]).unwrap();
            if old.contains(&2) {
                let p = p.expect("a group that lost a replica is rebuilt");
                // the spare is the new member; the survivor sends
                let spare: Vec<_> = new.iter().copied().filter(|t| !old.contains(t)).collect();
                assert_eq!(p.dests, spare, "{o}");
                assert!(old.contains(&p.source) && p.source != 2);
                planned += 1;
            } else {
                assert_eq!(p, None, "{o}: nothing moved, nothing to copy");
                untouched += 1;
            }
        }
        assert!(planned > 500 && untouched > 500, "{planned} {untouched}");
    }

    #[test]
    fn single_replica_objects_have_no_source() {
        let base = PoolMap::uniform(3, 1);
        let mut cur = base.clone();
        cur.set_domain_state(1, TargetState::Down).unwrap();
        cur.set_domain_state(1, TargetState::Excluded).unwrap();
        for lo in 0..500 {
            let o = oid(lo, "S1");
            assert!(!is_replicated(o, &cur));
            let p = plan(o, b"k", &base, &cur, &[]).unwrap();
            // moved S1 shards have nobody to copy from
            assert_eq!(p, None);
        }
        assert!(is_replicated(oid(1, "RP_3G1"), &cur));
    }

    #[test]
    fn reintegration_fills_the_returning_target_never_reads_it() {
        // rank 1 was excluded and rebuilt (base), now comes back UP
        let mut base = PoolMap::uniform(3, 1);
        base.set_domain_state(1, TargetState::Down).unwrap();
        base.set_domain_state(1, TargetState::Excluded).unwrap();
        let mut cur = base.clone();
        cur.set_domain_state(1, TargetState::Up).unwrap();
        let mut n = 0;
        for lo in 0..1000 {
            let o = oid(lo, "RP_2G1");
            let orig = layout(o, &base.all_in()).unwrap().groups[0].clone();
            let p = plan(o, b"k", &base, &cur, &[]).unwrap();
            if orig.contains(&1) {
                let p = p.expect("the returning target is filled");
                assert_eq!(p.dests, vec![1]);
                assert_ne!(p.source, 1);
                n += 1;
            } else {
                assert_eq!(p, None);
            }
            // second pass, after UP-IN: the same target again, on request
            let mut after = cur.clone();
            after.set_domain_state(1, TargetState::UpIn).unwrap();
            let p2 = plan(o, b"k", &after, &after, &[1]).unwrap();
            assert_eq!(p2.is_some(), orig.contains(&1));
            assert!(plan(o, b"k", &after, &after, &[]).unwrap().is_none());
        }
        assert!(n > 300, "{n}");
    }

    #[test]
    fn a_group_whose_only_copy_returns_fills_its_spare_from_it() {
        // ranks 0 and 4 (a partition's minority) out; 0 returns (UP), 4
        // stays DOWN: groups on [0, 4] have their only copy on 0
        let base = PoolMap::uniform(5, 1);
        let mut cur = base.clone();
        cur.set_domain_state(0, TargetState::Down).unwrap();
        cur.set_domain_state(4, TargetState::Down).unwrap();
        cur.set_domain_state(0, TargetState::Up).unwrap();
        let mut n = 0;
        for lo in 0..2000 {
            let o = oid(lo, "RP_2G1");
            let orig = layout(o, &base).unwrap().groups[0].clone();
            let p = plan(o, b"k", &base, &cur, &[0]).unwrap();
            let f = fill_plan(o, b"k", &base, &cur, &[0]).unwrap();
            if orig.contains(&0) && orig.contains(&4) {
                assert_eq!(p, None, "plan never reads a returning target");
                let f = f.expect("the spare is filled from the returning target");
                assert_eq!(f.source, 0);
                assert!(!f.dests.contains(&0) && f.dests.len() == 1, "{f:?}");
                assert!(!orig.contains(&f.dests[0]), "the dest is the spare");
                n += 1;
            } else {
                assert_eq!(f, p, "{o}: only the no-source case differs");
            }
        }
        assert!(n > 50, "{n}");
    }

    #[test]
    fn a_spare_that_left_the_group_is_never_a_source() {
        // rank 2 was a spare while rank 1 was out; rank 1 is back in the base
        let base = PoolMap::uniform(4, 1);
        let mut cur = base.clone();
        cur.set_domain_state(0, TargetState::Down).unwrap();
        cur.set_domain_state(0, TargetState::Excluded).unwrap();
        for lo in 0..1000 {
            let o = oid(lo, "RP_2G1");
            if let Some(p) = plan(o, b"k", &base, &cur, &[]).unwrap() {
                let before = &layout(o, &base).unwrap().groups[0];
                assert!(
                    before.contains(&p.source),
                    "{o}: source outside the old group"
                );
            }
        }
    }

    #[test]
    fn throttle_holds_the_rate_on_an_injected_clock() {
        let t0 = Instant::now();
        let mut th = Throttle::new(100);
        // 10 records at once: 0.1 s of debt
        assert_eq!(th.take(10, t0), Duration::from_millis(100));
        // after waiting it off, one more record costs 10 ms
        let t1 = t0 + Duration::from_millis(100);
        let w = th.take(1, t1);
        assert!((w.as_secs_f64() - 0.01).abs() < 1e-9, "{w:?}");
        // 1000 records spread over 10 s of clock: never more than ~1 s ahead
        let mut now = t1 + w;
        let mut waited = Duration::ZERO;
        for _ in 0..1000 {
            let w = th.take(1, now);
            waited += w;
            now += w;
        }
        let rate = 1000.0
            / now
                .duration_since(t1 + Duration::from_millis(10))
                .as_secs_f64();
        assert!((95.0..=105.0).contains(&rate), "{rate} records/s");
        assert!(waited > Duration::from_secs(9));
        assert_eq!(Throttle::new(0).take(1_000_000, t0), Duration::ZERO);
    }
}
