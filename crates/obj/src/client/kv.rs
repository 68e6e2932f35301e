//! The KV convenience (`daos_kv_put/get/remove/list`): a flat key-value
//! object (type [`ObjType::KvHashed`]); each key is a dkey holding one single
//! value under the akey [`KV_AKEY`].

use tse::Event;

use super::obj::{decode_fetch, fetch_req, update_req, ObjHandle};
use super::{Client, ContHandle, Error, Pending, Result};
use crate::rpc::msg::PunchWhat;
use crate::rpc::Status;
use crate::types::{Anchor, DKey, Epoch, Iod, ObjType, ObjectId, SgList};

/// The akey under which a KV object keeps each value.
pub const KV_AKEY: &[u8] = b"kv";

/// An open KV object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kv {
    pub oh: ObjHandle,
}

impl Client {
    /// `daos_kv_open`: the OID must be of type `KvHashed`.
    pub fn kv_open(
        &self,
        coh: &ContHandle,
        oid: ObjectId,
        ev: Option<&Event>,
    ) -> Result<Pending<Kv>> {
        let coh = coh.coh;
        self.local(ev, move || {
            let (t, _) = oid.validate()?;
            if t != ObjType::KvHashed {
                return Err(Error::Invalid("not a KV object (type must be KvHashed)"));
            }
            Ok(Kv {
                oh: ObjHandle { coh, oid },
            })
        })
    }

    /// `daos_kv_put`: replaces the value of `key`.
    pub fn kv_put(
        &self,
        kv: &Kv,
        key: &[u8],
        value: &[u8],
        ev: Option<&Event>,
    ) -> Result<Pending<Epoch>> {
        let iods = [Iod::single(KV_AKEY, value.len() as u64)];
        let sgls = vec![SgList::one(value.to_vec())];
        let (req, bulk) = update_req(&kv.oh, &DKey(key.to_vec()), &iods, sgls)?;
        if value.is_empty() {
            return Err(Error::Invalid("empty value (use kv_remove)"));
        }
        self.rpc(ev, req, bulk, super::obj::decode_update)
    }

    /// `daos_kv_get`: the value of `key` (`Engine(NonExist)` if there is none).
    pub fn kv_get(&self, kv: &Kv, key: &[u8], ev: Option<&Event>) -> Result<Pending<Vec<u8>>> {
        let iods = [Iod::single(KV_AKEY, 0)];
        let req = fetch_req(&kv.oh, None, &DKey(key.to_vec()), &iods, &[])?;
        self.rpc(ev, req, Vec::new(), |r| {
            let mut f = decode_fetch(r, 1, Vec::new())?;
            if f.sizes.first().copied().unwrap_or(0) == 0 {
                return Err(Error::Engine(Status::NonExist));
            }
            // decode_fetch made one buffer per iod: taken as it is, not concatenated
            Ok(f.sgls
                .pop()
                .and_then(|s| s.iovs.into_iter().next())
                .unwrap_or_default())
        })
    }

    /// `daos_kv_remove`.
    pub fn kv_remove(&self, kv: &Kv, key: &[u8], ev: Option<&Event>) -> Result<Pending<()>> {
        if key.is_empty() {
            return Err(Error::Invalid("empty key"));
        }
        let req = super::obj::punch_req(&kv.oh, PunchWhat::Dkey(key.to_vec()));
        self.rpc(ev, req, Vec::new(), |_| Ok(()))
    }

    /// `daos_kv_list`: up to `max` keys after `anchor`, and the next anchor.
    #[allow(clippy::type_complexity)]
    pub fn kv_list(
        &self,
        kv: &Kv,
        anchor: &Anchor,
        max: u32,
        ev: Option<&Event>,
    ) -> Result<Pending<(Vec<Vec<u8>>, Anchor)>> {
        let (oh, anchor) = (kv.oh, anchor.clone());
        self.custom(ev, move |net, done| {
            super::obj::list_dkeys(net, &oh, None, &anchor, max, move |s, r| done.finish(s, r))
        })
    }
}
