//! Object operations of the client (`daos_obj_*`).

use std::cell::RefCell;
use std::rc::Rc;

use tse::{Event, Scheduler};

use super::{send_rpc, unexpected, Client, ContHandle, Error, Net, Pending, Result, MAX_IO_BYTES};
use crate::rpc::msg::{
    BulkSeg, IodType as WireIodType, ObjTarget, PunchWhat, Reply, Request, WireIod, WireOid,
    WireRecx, MAX_KEY_LEN,
};
use crate::rpc::msg::{QUERY_MAX_DKEY, QUERY_MAX_RECX};
use crate::rpc::{RawReply, Status};
use crate::types::{AKey, Anchor, DKey, Epoch, Iod, IodType, ObjectId, Recx, SgList};

/// An open object (`daos_obj_open`): container handle + OID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjHandle {
    pub coh: u64,
    pub oid: ObjectId,
}

impl ObjHandle {
    pub(crate) fn target(&self, epoch: Option<Epoch>) -> ObjTarget {
        self.target_on(epoch, 0)
    }

    /// [`Self::target`] naming the engine target `stripe` (an operation
    /// without a dkey on a striped object).
    pub(crate) fn target_on(&self, epoch: Option<Epoch>, stripe: u32) -> ObjTarget {
        ObjTarget {
            coh: self.coh,
            oid: WireOid {
                hi: self.oid.hi,
                lo: self.oid.lo,
            },
            epoch: epoch.map_or(0, |e| e.0),
            stripe,
        }
    }

    /// How many engine targets an operation on this object without a dkey
    /// goes to: each of the engine's targets for a striped object, else 1.
    pub(super) fn stripes(&self, net: &Rc<RefCell<Net>>) -> usize {
        if self.oid.is_striped() {
            net.borrow().stripes.max(1)
        } else {
            1
        }
    }
}

/// Sends `reqs` together; `k` runs once with every outcome (decoded), in
/// the order of `reqs`, when the last one answered.
pub(super) fn fan_out<R: 'static>(
    net: &Rc<RefCell<Net>>,
    reqs: Vec<Request>,
    decode: impl Fn(RawReply) -> Result<R> + Clone + 'static,
    k: impl FnOnce(&mut Scheduler, Vec<Result<R>>) + 'static,
) {
    type Then<R> = Box<dyn FnOnce(&mut Scheduler, Vec<Result<R>>)>;
    /// Outcomes still awaited, the outcomes by request, the continuation.
    struct FanOut<R> {
        left: usize,
        outs: Vec<Option<Result<R>>>,
        k: Option<Then<R>>,
    }
    let n = reqs.len();
    let state = Rc::new(RefCell::new(FanOut {
        left: n,
        outs: (0..n).map(|_| None).collect(),
        k: Some(Box::new(k)),
    }));
    for (i, req) in reqs.into_iter().enumerate() {
        let (state, decode) = (state.clone(), decode.clone());
        send_rpc(net, req, Vec::new(), move |s, r| {
            let fin = {
                let mut g = state.borrow_mut();
                g.outs[i] = Some(r.and_then(decode));
                g.left -= 1;
                if g.left == 0 {
                    let out = g
                        .outs
                        .iter_mut()
                        .map(|o| o.take().unwrap_or(Err(Error::NotDone)))
                        .collect();
                    g.k.take().map(|k| (k, out))
                } else {
                    None
                }
            };
            if let Some((k, out)) = fin {
                k(s, out);
            }
        });
    }
}

/// Lists the dkeys of `oh` after `anchor` (each engine target of a striped
/// object, merged in key order, see [`crate::listing`]); `k` gets them.
pub(super) fn list_dkeys(
    net: &Rc<RefCell<Net>>,
    oh: &ObjHandle,
    epoch: Option<Epoch>,
    anchor: &Anchor,
    max: u32,
    k: impl FnOnce(&mut Scheduler, Result<(Vec<Vec<u8>>, Anchor)>) + 'static,
) {
    let n = oh.stripes(net);
    let reqs = (0..n)
        .map(|s| Request::ObjListDkey {
            t: oh.target_on(epoch, s as u32),
            anchor: anchor.to_bytes(),
            max,
        })
        .collect();
    let anchor = anchor.clone();
    fan_out(
        net,
        reqs,
        |r| keys(r.reply, |k| k),
        move |s, outs| {
            if n == 1 {
                let out = outs.into_iter().next().unwrap_or(Err(Error::NotDone));
                return k(s, out);
            }
            let mut pages = Vec::with_capacity(n);
            for o in outs {
                match o {
                    Ok((ks, a)) => pages.push(crate::listing::Page::new(ks, &a)),
                    Err(e) => return k(s, Err(e)),
                }
            }
            k(s, Ok(crate::listing::merge(&anchor, pages, max)))
        },
    )
}

/// `query_key` of `oh` (see [`Client::obj_query_key`]); on a striped
/// object a max-dkey query asks every engine target for its greatest dkey,
/// takes the greatest, and asks that dkey's target for the extent.
pub(super) fn query_key(
    net: &Rc<RefCell<Net>>,
    oh: &ObjHandle,
    epoch: Option<Epoch>,
    flags: u8,
    dkey: Vec<u8>,
    akey: Vec<u8>,
    k: impl FnOnce(&mut Scheduler, Result<QueryKeyOut>) + 'static,
) {
    let n = oh.stripes(net);
    let one = |t, flags, dkey| Request::ObjQueryKey {
        t,
        flags,
        dkey,
        akey: akey.clone(),
    };
    if n == 1 || flags & QUERY_MAX_DKEY == 0 {
        let req = one(oh.target(epoch), flags, dkey);
        return send_rpc(net, req, Vec::new(), move |s, r| {
            k(s, r.and_then(decode_query))
        });
    }
    let reqs = (0..n)
        .map(|s| one(oh.target_on(epoch, s as u32), QUERY_MAX_DKEY, Vec::new()))
        .collect();
    let numeric = oh.oid.otype().is_ok_and(|t| t.numeric_dkeys());
    let (net2, oh, akey2) = (net.clone(), *oh, akey.clone());
    fan_out(net, reqs, decode_query, move |s, outs| {
        let mut best: Option<DKey> = None;
        for o in outs {
            match o {
                // the store's order of a max-dkey query
                Ok(q) => {
                    if best.as_ref().is_none_or(|b| q.dkey.sorts_above(b, numeric)) {
                        best = Some(q.dkey);
                    }
                }
                Err(e) if e.status() == Some(Status::NonExist) => {}
                Err(e) => return k(s, Err(e)),
            }
        }
        let Some(best) = best else {
            return k(s, Err(Error::Engine(Status::NonExist)));
        };
        if flags & QUERY_MAX_RECX == 0 {
            return k(
                s,
                Ok(QueryKeyOut {
                    dkey: best,
                    akey: AKey(akey2),
                    recx: Recx::default(),
                }),
            );
        }
        let req = Request::ObjQueryKey {
            t: oh.target(epoch),
            flags: QUERY_MAX_RECX,
            dkey: best.0,
            akey: akey2,
        };
        send_rpc(&net2, req, Vec::new(), move |s, r| {
            k(s, r.and_then(decode_query))
        })
    })
}

fn decode_query(r: RawReply) -> Result<QueryKeyOut> {
    match r.reply {
        Reply::QueryKey { dkey, akey, recx } => Ok(QueryKeyOut {
            dkey: DKey(dkey),
            akey: AKey(akey),
            recx: Recx {
                idx: recx.idx,
                nr: recx.nr,
            },
        }),
        _ => Err(unexpected()),
    }
}

/// What a fetch returns: per iod the size found (single value: its length,
/// 0 = none; array: the record size) and the caller's SGLs, filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchReply {
    pub sizes: Vec<u64>,
    pub sgls: Vec<SgList>,
}

/// What `query_key` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryKeyOut {
    pub dkey: DKey,
    pub akey: AKey,
    pub recx: Recx,
}

fn check_key(k: &[u8]) -> Result<()> {
    if k.is_empty() {
        return Err(Error::Invalid("empty key"));
    }
    if k.len() > MAX_KEY_LEN {
        return Err(Error::Invalid("key longer than 4096 bytes"));
    }
    Ok(())
}

fn wire_iod(iod: &Iod, sgl: Vec<BulkSeg>) -> Result<WireIod> {
    check_key(&iod.akey.0)?;
    Ok(WireIod {
        akey: iod.akey.0.clone(),
        kind: match iod.iod_type {
            IodType::Single => WireIodType::Single,
            IodType::Array => WireIodType::Array,
        },
        rsize: iod.rec_size,
        recxs: iod
            .recxs
            .iter()
            .map(|x| WireRecx {
                idx: x.idx,
                nr: x.nr,
            })
            .collect(),
        sgl,
    })
}

impl Client {
    /// `daos_obj_open`: checks the OID's type and class bits (a local
    /// operation; the engine checks them again on every I/O).
    pub fn obj_open(
        &self,
        coh: &ContHandle,
        oid: ObjectId,
        ev: Option<&Event>,
    ) -> Result<Pending<ObjHandle>> {
        let coh = coh.coh;
        self.local(ev, move || {
            oid.validate()?;
            Ok(ObjHandle { coh, oid })
        })
    }

    /// `daos_obj_update`: writes several akeys of `dkey`; `sgls[i]` (any
    /// number of buffers) holds exactly iod `i`'s bytes. The engine picks the
    /// epoch (its clock); returns it.
    pub fn obj_update(
        &self,
        oh: &ObjHandle,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &[SgList],
        ev: Option<&Event>,
    ) -> Result<Pending<Epoch>> {
        // the caller's buffers are borrowed and the RPC may start later: one copy
        let (req, bulk) = update_req(oh, dkey, iods, sgls.to_vec())?;
        self.rpc(ev, req, bulk, decode_update)
    }

    /// `daos_obj_fetch`: reads several akeys of `dkey` as of `epoch` (`None`
    /// = latest). With `sgls` empty the reply carries one buffer per iod
    /// holding exactly what was found; otherwise each iod's data is scattered
    /// over its SGL's buffers (their lengths are the capacities). Array holes
    /// read as zeros; a record size of 0 asks the engine for the stored one.
    pub fn obj_fetch(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        dkey: &DKey,
        iods: &[Iod],
        sgls: Vec<SgList>,
        ev: Option<&Event>,
    ) -> Result<Pending<FetchReply>> {
        let req = fetch_req(oh, epoch, dkey, iods, &sgls)?;
        let niods = iods.len();
        self.rpc(ev, req, Vec::new(), move |r| decode_fetch(r, niods, sgls))
    }

    /// Rebuild: the epoch of the version each iod of a fetch at `epoch`
    /// would return (`Epoch(0)`: nothing visible). A fetch at the epoch
    /// returned reads exactly that version.
    pub fn obj_fetch_epochs(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        dkey: &DKey,
        iods: &[Iod],
        ev: Option<&Event>,
    ) -> Result<Pending<Vec<Epoch>>> {
        let Request::ObjFetch { t, dkey, iods } = fetch_req(oh, epoch, dkey, iods, &[])? else {
            return Err(unexpected());
        };
        let n = iods.len();
        let req = Request::ObjFetchEpochs { t, dkey, iods };
        self.rpc(ev, req, Vec::new(), move |r| match r.reply {
            Reply::Epochs(v) if v.len() == n => Ok(v.into_iter().map(Epoch).collect()),
            _ => Err(unexpected()),
        })
    }

    /// Rebuild: [`Client::obj_update`] at `epoch` (the source version's)
    /// instead of the engine's clock. Under a newer version it is stored but
    /// not visible: a copy never hides a newer write.
    pub fn obj_update_at(
        &self,
        oh: &ObjHandle,
        epoch: Epoch,
        dkey: &DKey,
        iods: &[Iod],
        sgls: &[SgList],
        ev: Option<&Event>,
    ) -> Result<Pending<Epoch>> {
        let (req, bulk) = update_req(oh, dkey, iods, sgls.to_vec())?;
        let Request::ObjUpdate { t, dkey, iods } = req else {
            return Err(unexpected());
        };
        let t = ObjTarget {
            epoch: epoch.0,
            ..t
        };
        self.rpc(
            ev,
            Request::ObjUpdateAt { t, dkey, iods },
            bulk,
            decode_update,
        )
    }

    /// Reintegration: a punch of `akeys` of `dkey` at `epoch` (not the
    /// engine's clock): hides the versions below it, not newer ones.
    pub fn obj_punch_akeys_at(
        &self,
        oh: &ObjHandle,
        epoch: Epoch,
        dkey: &DKey,
        akeys: &[AKey],
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        let req = Request::ObjPunchAt {
            t: oh.target(Some(epoch)),
            what: PunchWhat::Akeys {
                dkey: dkey.0.clone(),
                akeys: akeys.iter().map(|a| a.0.clone()).collect(),
            },
        };
        self.rpc(ev, req, Vec::new(), |_| Ok(()))
    }

    /// `daos_obj_punch`: the whole object.
    pub fn obj_punch(&self, oh: &ObjHandle, ev: Option<&Event>) -> Result<Pending<()>> {
        self.punch(oh, PunchWhat::Object, ev)
    }

    /// `daos_obj_punch_dkeys` (one dkey).
    pub fn obj_punch_dkey(
        &self,
        oh: &ObjHandle,
        dkey: &DKey,
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        check_key(&dkey.0)?;
        self.punch(oh, PunchWhat::Dkey(dkey.0.clone()), ev)
    }

    /// `daos_obj_punch_akeys`.
    pub fn obj_punch_akeys(
        &self,
        oh: &ObjHandle,
        dkey: &DKey,
        akeys: &[AKey],
        ev: Option<&Event>,
    ) -> Result<Pending<()>> {
        check_key(&dkey.0)?;
        for a in akeys {
            check_key(&a.0)?;
        }
        self.punch(
            oh,
            PunchWhat::Akeys {
                dkey: dkey.0.clone(),
                akeys: akeys.iter().map(|a| a.0.clone()).collect(),
            },
            ev,
        )
    }

    fn punch(&self, oh: &ObjHandle, what: PunchWhat, ev: Option<&Event>) -> Result<Pending<()>> {
        let n = oh.stripes(&self.net);
        if n == 1 || what != PunchWhat::Object {
            return self.rpc(ev, punch_req(oh, what), Vec::new(), |_| Ok(()));
        }
        // a striped object: punched on target 0 at the epoch the engine
        // takes, then on every other target at that same epoch (ObjPunchAt),
        // so every epoch sees it whole or punched on all targets
        let oh = *oh;
        self.custom(ev, move |net, done| {
            let first = Request::ObjPunch {
                t: oh.target_on(None, 0),
                what: PunchWhat::Object,
            };
            let net2 = net.clone();
            send_rpc(net, first, Vec::new(), move |s, r| {
                let e = match r.and_then(decode_update) {
                    Ok(e) => e,
                    Err(e) => return done.finish(s, Err(e)),
                };
                let rest: Vec<Request> = (1..n)
                    .map(|t| Request::ObjPunchAt {
                        t: oh.target_on(Some(e), t as u32),
                        what: PunchWhat::Object,
                    })
                    .collect();
                fan_out(
                    &net2,
                    rest,
                    |_| Ok(()),
                    move |s, outs| {
                        done.finish(s, outs.into_iter().collect::<Result<Vec<()>>>().map(|_| ()))
                    },
                )
            })
        })
    }

    /// `daos_obj_list_dkey`: up to `max` dkeys after `anchor`; returns them
    /// and the anchor to resume from ([`Anchor::is_eof`] at the end).
    pub fn obj_list_dkey(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        anchor: &Anchor,
        max: u32,
        ev: Option<&Event>,
    ) -> Result<Pending<(Vec<DKey>, Anchor)>> {
        let (oh, anchor) = (*oh, anchor.clone());
        self.custom(ev, move |net, done| {
            list_dkeys(net, &oh, epoch, &anchor, max, move |s, r| {
                done.finish(s, r.map(|(ks, a)| (ks.into_iter().map(DKey).collect(), a)))
            })
        })
    }

    /// The objects of container `coh` on the engine's target `shard` (an
    /// engine spreads objects over `PoolInfo::targets` shards; walk them all
    /// to enumerate the engine): up to `max` after `anchor`, and the anchor to
    /// resume from ([`Anchor::is_eof`] when this shard is done). A shard the
    /// engine does not have is `Engine(Invalid)`.
    #[allow(clippy::type_complexity)]
    pub fn obj_list_obj(
        &self,
        coh: &ContHandle,
        shard: u32,
        epoch: Option<Epoch>,
        anchor: &Anchor,
        max: u32,
        ev: Option<&Event>,
    ) -> Result<Pending<(Vec<ObjectId>, Anchor)>> {
        let req = Request::ObjListObj {
            coh: coh.coh,
            shard,
            epoch: epoch.map_or(0, |e| e.0),
            anchor: anchor.to_bytes(),
            max,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Oids { oids, anchor, .. } => Ok((
                oids.into_iter()
                    .map(|o| ObjectId { hi: o.hi, lo: o.lo })
                    .collect(),
                Anchor::from_bytes(&anchor).ok_or_else(unexpected)?,
            )),
            _ => Err(unexpected()),
        })
    }

    /// `daos_obj_list_akey`.
    pub fn obj_list_akey(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        dkey: &DKey,
        anchor: &Anchor,
        max: u32,
        ev: Option<&Event>,
    ) -> Result<Pending<(Vec<AKey>, Anchor)>> {
        check_key(&dkey.0)?;
        let req = Request::ObjListAkey {
            t: oh.target(epoch),
            dkey: dkey.0.clone(),
            anchor: anchor.to_bytes(),
            max,
        };
        self.rpc(ev, req, Vec::new(), |r| keys(r.reply, AKey))
    }

    /// `daos_obj_list_recx`: visible extents (ascending) and the record size.
    #[allow(clippy::type_complexity)]
    pub fn obj_list_recx(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        dkey: &DKey,
        akey: &AKey,
        anchor: &Anchor,
        max: u32,
        ev: Option<&Event>,
    ) -> Result<Pending<(Vec<Recx>, u64, Anchor)>> {
        check_key(&dkey.0)?;
        check_key(&akey.0)?;
        let req = Request::ObjListRecx {
            t: oh.target(epoch),
            dkey: dkey.0.clone(),
            akey: akey.0.clone(),
            anchor: anchor.to_bytes(),
            max,
        };
        self.rpc(ev, req, Vec::new(), |r| match r.reply {
            Reply::Recxs {
                rsize,
                recxs,
                anchor,
                ..
            } => Ok((
                recxs
                    .into_iter()
                    .map(|x| Recx {
                        idx: x.idx,
                        nr: x.nr,
                    })
                    .collect(),
                rsize,
                Anchor::from_bytes(&anchor).ok_or_else(unexpected)?,
            )),
            _ => Err(unexpected()),
        })
    }

    /// `daos_obj_query_key`: with [`crate::rpc::msg::QUERY_MAX_DKEY`] the
    /// greatest dkey; with [`crate::rpc::msg::QUERY_MAX_RECX`] the extent
    /// with the highest end under (that or the given) `dkey` and `akey`.
    /// Nothing there: `Engine(NonExist)`.
    pub fn obj_query_key(
        &self,
        oh: &ObjHandle,
        epoch: Option<Epoch>,
        flags: u8,
        dkey: &DKey,
        akey: &AKey,
        ev: Option<&Event>,
    ) -> Result<Pending<QueryKeyOut>> {
        let (oh, dkey, akey) = (*oh, dkey.0.clone(), akey.0.clone());
        self.custom(ev, move |net, done| {
            query_key(net, &oh, epoch, flags, dkey, akey, move |s, r| {
                done.finish(s, r)
            })
        })
    }
}

/// The request of an update and its bulk region (each SGL buffer a part,
/// moved, not copied).
pub(crate) fn update_req(
    oh: &ObjHandle,
    dkey: &DKey,
    iods: &[Iod],
    sgls: Vec<SgList>,
) -> Result<(Request, Vec<Vec<u8>>)> {
    check_key(&dkey.0)?;
    if iods.is_empty() || iods.len() != sgls.len() {
        return Err(Error::Invalid("one SGL per iod, at least one iod"));
    }
    let total: u64 = iods.iter().map(Iod::data_len).fold(0, u64::saturating_add);
    if total > MAX_IO_BYTES {
        return Err(Error::ValueTooLarge {
            size: total,
            limit: MAX_IO_BYTES,
        });
    }
    let mut bulk = Vec::new();
    let mut off = 0u32;
    let mut wiods = Vec::with_capacity(iods.len());
    for (iod, sgl) in iods.iter().zip(sgls) {
        if sgl.len() != iod.data_len() {
            return Err(Error::Invalid(
                "an SGL does not hold exactly its iod's bytes",
            ));
        }
        if iod.iod_type == IodType::Array && (iod.rec_size == 0 || iod.recxs.is_empty()) {
            return Err(Error::Invalid(
                "an array iod needs a record size and extents",
            ));
        }
        let mut segs = Vec::with_capacity(sgl.iovs.len());
        for iov in sgl.iovs {
            segs.push(BulkSeg {
                off,
                len: iov.len() as u32,
            });
            off += iov.len() as u32;
            bulk.push(iov);
        }
        wiods.push(wire_iod(iod, segs)?);
    }
    Ok((
        Request::ObjUpdate {
            t: oh.target(None),
            dkey: dkey.0.clone(),
            iods: wiods,
        },
        bulk,
    ))
}

pub(crate) fn decode_update(r: crate::rpc::RawReply) -> Result<Epoch> {
    match r.reply {
        Reply::Updated { epoch } => Ok(Epoch(epoch)),
        _ => Err(unexpected()),
    }
}

/// The request of a fetch (checks the iods against the optional SGLs).
pub(crate) fn fetch_req(
    oh: &ObjHandle,
    epoch: Option<Epoch>,
    dkey: &DKey,
    iods: &[Iod],
    sgls: &[SgList],
) -> Result<Request> {
    check_key(&dkey.0)?;
    if iods.is_empty() || (!sgls.is_empty() && sgls.len() != iods.len()) {
        return Err(Error::Invalid(
            "at least one iod, and no SGLs or one per iod",
        ));
    }
    let total: u64 = iods.iter().map(Iod::data_len).fold(0, u64::saturating_add);
    if total > MAX_IO_BYTES {
        return Err(Error::ValueTooLarge {
            size: total,
            limit: MAX_IO_BYTES,
        });
    }
    let wiods = iods
        .iter()
        .map(|i| wire_iod(i, Vec::new()))
        .collect::<Result<Vec<_>>>()?;
    Ok(Request::ObjFetch {
        t: oh.target(epoch),
        dkey: dkey.0.clone(),
        iods: wiods,
    })
}

/// Decodes a fetch reply into the caller's SGLs (or fresh buffers).
pub(crate) fn decode_fetch(
    r: crate::rpc::RawReply,
    niods: usize,
    mut sgls: Vec<SgList>,
) -> Result<FetchReply> {
    let Reply::Fetched(f) = &r.reply else {
        return Err(unexpected());
    };
    if f.len() != niods {
        return Err(unexpected());
    }
    let bulk = r.bulk();
    let sizes: Vec<u64> = f.iter().map(|x| x.size).collect();
    if sgls.is_empty() {
        let out = f
            .iter()
            .map(|x| SgList::one(x.seg.slice(bulk).to_vec()))
            .collect();
        return Ok(FetchReply { sizes, sgls: out });
    }
    for (x, sgl) in f.iter().zip(sgls.iter_mut()) {
        let data = x.seg.slice(bulk);
        if data.len() as u64 > sgl.len() {
            return Err(Error::BufferTooSmall {
                need: data.len() as u64,
                have: sgl.len(),
            });
        }
        let mut at = 0;
        for iov in sgl.iovs.iter_mut() {
            let n = iov.len().min(data.len() - at);
            iov[..n].copy_from_slice(&data[at..at + n]);
            at += n;
        }
    }
    Ok(FetchReply { sizes, sgls })
}

/// The bytes a one-iod fetch reply carries, handed to `f` in place (no
/// copy out of the reply frame; [`decode_fetch`] copies into SGLs).
pub(crate) fn with_fetched_one(r: &crate::rpc::RawReply, f: impl FnOnce(&[u8])) -> Result<()> {
    let Reply::Fetched(fe) = &r.reply else {
        return Err(unexpected());
    };
    let [x] = fe.as_slice() else {
        return Err(unexpected());
    };
    f(x.seg.slice(r.bulk()));
    Ok(())
}

pub(crate) fn punch_req(oh: &ObjHandle, what: PunchWhat) -> Request {
    Request::ObjPunch {
        t: oh.target(None),
        what,
    }
}

pub(crate) fn keys<K>(rep: Reply, mk: impl Fn(Vec<u8>) -> K) -> Result<(Vec<K>, Anchor)> {
    match rep {
        Reply::Keys { keys, anchor, .. } => Ok((
            keys.into_iter().map(mk).collect(),
            Anchor::from_bytes(&anchor).ok_or_else(unexpected)?,
        )),
        _ => Err(unexpected()),
    }
}
