//! Aggregation (VOS's): drop the versions that no guaranteed read can see.
//!
//! Aggregating a container up to epoch `U` keeps reads exact at every snapshot
//! epoch and at every epoch ≥ `U`. The read points are the snapshots ≤ `U`
//! plus `U` itself; each version with epoch ≤ `U` belongs to the bucket of the
//! lowest read point `r` at or above its epoch, and survives only if it is
//! visible at `r`:
//! - a single value: it is the newest value ≤ `r` and no punch (object, dkey or
//!   akey) between it and `r` hides it;
//! - an array extent: some record of it is still the newest at `r` (not covered
//!   by newer extents ≤ `r`, not under a punch ≤ `r`);
//! - a punch: kept unless it is in the lowest bucket (everything it hides is
//!   older and dropped with it) or a newer punch of the same key in the same
//!   bucket makes it redundant.
//!
//! A version invisible at `r` is invisible at every later read point too (what
//! hides it is newer, ≤ `r`, and survives or is itself hidden by something that
//! survives), so reads at the read points do not change. Versions above `U` are
//! untouched. Afterwards the container refuses updates and snapshots at epochs
//! ≤ `U` (a write below dropped tombstones would resurface). Freed bdev blocks
//! rejoin the allocator at commit. Extents are dropped whole, never rewritten or
//! merged (DAOS also merges partially covered extents; not done here).

use std::collections::{BTreeMap, HashMap};

use super::extent::{self, Ext};
use super::keys::{self, Kind, Ver};
use super::{record_loc, Loc, Reader, W};
use crate::types::{AggregateStats, ContId, ObjectId, StoreError, StoreResult};

#[derive(Default)]
struct AkeyRecs {
    punches: Vec<(Ver, Vec<u8>)>,
    svs: Vec<(Ver, Vec<u8>, Loc)>,
    exts: Vec<(Ext, Vec<u8>, Loc)>,
}

#[derive(Default)]
struct DkeyRecs {
    punches: Vec<(Ver, Vec<u8>)>,
    akeys: BTreeMap<Vec<u8>, AkeyRecs>,
}

struct Points {
    pts: Vec<u64>,
    upto: u64,
}

impl Points {
    /// The bucket of a version with this epoch (`None`: above `upto`).
    fn bucket(&self, epoch: u64) -> Option<usize> {
        (epoch <= self.upto).then(|| self.pts.partition_point(|&p| p < epoch))
    }
}

/// Punches of one key at one level that can go.
fn redundant_punches(p: &[(Ver, Vec<u8>)], pts: &Points, drops: &mut Vec<(Vec<u8>, Option<Loc>)>) {
    for (v, k) in p {
        let Some(b) = pts.bucket(v.epoch) else {
            continue;
        };
        let r = pts.pts[b];
        let shadowed = p.iter().any(|(q, _)| q > v && q.epoch <= r);
        if b == 0 || shadowed {
            drops.push((k.clone(), None));
        }
    }
}

fn floor_at(punches: &[Ver], r: u64) -> Option<Ver> {
    punches.iter().filter(|v| v.epoch <= r).max().copied()
}

fn akey_drops(a: &AkeyRecs, upper: &[Ver], pts: &Points, drops: &mut Vec<(Vec<u8>, Option<Loc>)>) {
    let mut all: Vec<Ver> = upper.to_vec();
    all.extend(a.punches.iter().map(|p| p.0));
    for (v, k, loc) in &a.svs {
        let Some(b) = pts.bucket(v.epoch) else {
            continue;
        };
        let r = pts.pts[b];
        let newest = a.svs.iter().map(|s| s.0).filter(|s| s.epoch <= r).max();
        if newest != Some(*v) || Some(*v) <= floor_at(&all, r) {
            drops.push((k.clone(), Some(loc.clone())));
        }
    }
    // per bucket: which extents supply a record at its read point
    let mut vis_at: HashMap<usize, Vec<bool>> = HashMap::new();
    for (i, (x, k, loc)) in a.exts.iter().enumerate() {
        let Some(b) = pts.bucket(x.ver.epoch) else {
            continue;
        };
        let r = pts.pts[b];
        let floor = floor_at(&all, r);
        if Some(x.ver) <= floor {
            drops.push((k.clone(), Some(loc.clone())));
            continue;
        }
        let vis = vis_at.entry(b).or_insert_with(|| {
            // candidates: extents ≤ r above the floor (the others hide nothing)
            let cand: Vec<usize> = (0..a.exts.len())
                .filter(|&j| a.exts[j].0.ver.epoch <= r && Some(a.exts[j].0.ver) > floor)
                .collect();
            let exts: Vec<Ext> = cand.iter().map(|&j| a.exts[j].0).collect();
            let mut vis = vec![false; a.exts.len()];
            for (j, on) in cand.into_iter().zip(extent::visible_set(&exts)) {
                vis[j] = on;
            }
            vis
        });
        if !vis[i] {
            drops.push((k.clone(), Some(loc.clone())));
        }
    }
    redundant_punches(&a.punches, pts, drops);
}

/// Aggregate one container up to `upto` inside the open transaction.
pub(crate) fn run(w: &mut W<'_>, cont: ContId, upto: u64) -> StoreResult<AggregateStats> {
    let hwm = w.cont_hwm(cont)?;
    let mut pts: Vec<u64> = w
        .view()
        .snaps(cont)?
        .iter()
        .map(|s| s.epoch.0)
        .filter(|&e| e <= upto)
        .collect();
    if pts.last() != Some(&upto) {
        pts.push(upto);
    }
    let pts = Points { pts, upto };
    let cp = keys::cont_prefix(cont);
    let hi = keys::prefix_end(&cp);
    let mut stats = AggregateStats::default();
    let mut lo = cp.clone();
    loop {
        // one object at a time
        let mut first = None;
        w.view().scan(&lo, hi.as_deref(), &mut |k, _| {
            first = Some(k.to_vec());
            false
        })?;
        let Some(k) = first else { break };
        let ob: [u8; 16] = k
            .get(16..32)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| StoreError::Corrupt("short key".into()))?;
        let op = keys::obj_prefix(cont, ObjectId::from_bytes(ob));
        let op_end = keys::prefix_end(&op);
        let mut obj_punches: Vec<(Ver, Vec<u8>)> = Vec::new();
        let mut dkeys: BTreeMap<Vec<u8>, DkeyRecs> = BTreeMap::new();
        let mut err = None;
        w.view().scan(&op, op_end.as_deref(), &mut |k, v| {
            let res = keys::parse(k)
                .ok_or_else(|| StoreError::Corrupt("unparsable key".into()))
                .and_then(|p| Ok((record_loc(p.kind, v)?, p)));
            let (loc, p) = match res {
                Ok(x) => x,
                Err(e) => {
                    err = Some(e);
                    return false;
                }
            };
            let key = k.to_vec();
            match p.kind {
                Kind::ObjPunch => obj_punches.push((p.ver, key)),
                Kind::DkeyPunch => dkeys
                    .entry(p.dkey.unwrap_or_default())
                    .or_default()
                    .punches
                    .push((p.ver, key)),
                kind => {
                    let a = dkeys
                        .entry(p.dkey.unwrap_or_default())
                        .or_default()
                        .akeys
                        .entry(p.akey.unwrap_or_default())
                        .or_default();
                    match (kind, loc) {
                        (Kind::AkeyPunch, _) => a.punches.push((p.ver, key)),
                        (Kind::Single, Some(loc)) => a.svs.push((p.ver, key, loc)),
                        (Kind::Extent(idx), Some(loc)) => {
                            let nr = super::decode_ext(v).map(|x| x.1).unwrap_or(0);
                            a.exts.push((
                                Ext {
                                    ver: p.ver,
                                    idx,
                                    nr,
                                },
                                key,
                                loc,
                            ));
                        }
                        _ => {}
                    }
                }
            }
            true
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        let mut drops = Vec::new();
        let overs: Vec<Ver> = obj_punches.iter().map(|p| p.0).collect();
        for d in dkeys.values() {
            let mut upper = overs.clone();
            upper.extend(d.punches.iter().map(|p| p.0));
            for a in d.akeys.values() {
                akey_drops(a, &upper, &pts, &mut drops);
            }
            redundant_punches(&d.punches, &pts, &mut drops);
        }
        redundant_punches(&obj_punches, &pts, &mut drops);
        let bs = w.st()?.bs;
        for (k, loc) in drops {
            stats.versions_removed += 1;
            if let Some(l) = &loc {
                match l {
                    Loc::Inline(d) => stats.inline_bytes_freed += d.len() as u64,
                    Loc::Bdev { blocks, .. } => stats.bdev_bytes_freed += blocks * bs,
                }
            }
            w.delete(&k, loc.as_ref())?;
        }
        match op_end {
            Some(n) => lo = n,
            None => break,
        }
    }
    w.conts
        .insert(&cont.as_bytes()[..], hwm.max(upto))
        .map_err(super::ix)?;
    Ok(stats)
}
