//! DTX requests: a replicated update or punch through a leader replica
//! (`Opcode::DtxUpdate`, see `engine::dtx`; a KV put is an update of the
//! akey `KV_AKEY`) and the engine-to-engine DTX message (`Opcode::DtxMsg`,
//! sent by engines).

use tse::Event;

use super::kv::{Kv, KV_AKEY};
use super::obj::{decode_update, ObjHandle};
use super::{Client, Error, Pending, Result};
use crate::dtx_op::DtxOp;
use crate::rpc::msg::{Request, MAX_DTX_VALUE};
use crate::types::{Epoch, Iod};

impl Client {
    /// KV put of `value` under `key`, replicated by the engine this client
    /// is connected to as the DTX leader over `replicas` ((rank, address),
    /// that engine first). `pool`/`cont`: the labels every replica knows.
    /// `Ok(epoch)`: committed at that one epoch on every replica.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_put_dtx(
        &self,
        kv: &Kv,
        pool: &str,
        cont: &str,
        key: &[u8],
        value: &[u8],
        replicas: &[(u32, String)],
        ev: Option<&Event>,
    ) -> Result<Pending<Epoch>> {
        if value.is_empty() {
            return Err(Error::Invalid("empty value (use kv_remove)"));
        }
        if key.is_empty() {
            return Err(Error::Invalid("empty key"));
        }
        if value.len() > MAX_DTX_VALUE {
            return Err(Error::ValueTooLarge {
                size: value.len() as u64,
                limit: MAX_DTX_VALUE as u64,
            });
        }
        let op = DtxOp::Update {
            dkey: key.to_vec(),
            iods: vec![Iod::single(KV_AKEY, value.len() as u64)],
            data: vec![value.to_vec()],
        };
        self.obj_dtx(&kv.oh, pool, cont, &op, replicas, ev)
    }

    /// An update or punch of `oh` (`op`), replicated by the engine this
    /// client is connected to as the DTX leader over `replicas` (that engine
    /// first). `Ok(epoch)`: applied at that one epoch on every replica.
    pub fn obj_dtx(
        &self,
        oh: &ObjHandle,
        pool: &str,
        cont: &str,
        op: &DtxOp,
        replicas: &[(u32, String)],
        ev: Option<&Event>,
    ) -> Result<Pending<Epoch>> {
        if replicas.is_empty() {
            return Err(Error::Invalid("a DTX update needs its replicas"));
        }
        if let Err(e) = op.validate() {
            tracing::debug!(error = %e, "DTX operation refused");
            return Err(Error::Invalid("malformed DTX operation (sizes or keys)"));
        }
        let req = Request::DtxUpdate {
            t: oh.target(None),
            pool: pool.to_string(),
            cont: cont.to_string(),
            op: op.to_bytes(),
            replicas: replicas.to_vec(),
        };
        self.rpc(ev, req, Vec::new(), decode_update)
    }

    /// Engine to engine: one encoded DTX message (answered at once, empty);
    /// `peers`: the other participants' addresses (with a prepare).
    pub fn dtx_msg(
        &self,
        from: u32,
        from_addr: &str,
        to: u32,
        msg: Vec<u8>,
        peers: Vec<(u32, String)>,
    ) -> Result<Pending<()>> {
        let req = Request::DtxMsg {
            from,
            from_addr: from_addr.to_string(),
            to,
            msg,
            peers,
        };
        self.rpc(None, req, Vec::new(), |_| Ok(()))
    }
}
