//! What the soak (system_soak.rs) and the partition test
//! (system_partition.rs) share: the history of operations on registers (one
//! per key), the Jepsen-style checker (rules in system_soak.rs's module doc),
//! and clients of the system (pool service, DistClient on its map).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use obj::dist::{DistClient, PoolView};
use obj::membership::DetectorConfig;
use obj::placement::PoolMap;
use poolsvc::client::BlockingClient;

use super::Member;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Write(String),
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res {
    /// A write acknowledged, or a read with what it returned (`None`: the
    /// initial value, no value).
    Ok(Option<String>),
    /// Definitely had no effect (reads only here).
    Fail,
    /// Indeterminate (a write whose outcome is unknown).
    Info,
}

#[derive(Debug, Clone)]
pub struct Op {
    pub client: usize,
    pub key: usize,
    pub kind: Kind,
    pub invoke: Duration,
    pub complete: Duration,
    pub res: Res,
}

/// Checks a history (rules in system_soak.rs's module doc); returns the
/// violations.
pub fn check(history: &[Op]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut by_key: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for o in history {
        by_key.entry(o.key).or_default().push(o);
    }
    for (key, ops) in by_key {
        // value -> its write (values are unique)
        let mut writes: HashMap<&str, &Op> = HashMap::new();
        for o in &ops {
            if let Kind::Write(v) = &o.kind {
                assert!(writes.insert(v, o).is_none(), "value {v} written twice");
            }
        }
        // when a write's effect is certainly over: its completion if
        // acknowledged, never if indeterminate
        let done = |w: &Op| match w.res {
            Res::Ok(_) => Some(w.complete),
            _ => None,
        };
        // whether an acknowledged write definitely replaced `v` (none: the
        // initial value) before `t`
        let replaced_before = |v: Option<&str>, t: Duration| -> Option<String> {
            let vw = v.and_then(|v| writes.get(v));
            ops.iter()
                .filter(|w| matches!(w.kind, Kind::Write(_)) && w.res == Res::Ok(None))
                .find(|w2| {
                    w2.complete < t
                        && match vw {
                            None => true,
                            Some(vw) => done(vw).is_some_and(|c| c < w2.invoke),
                        }
                })
                .map(|w2| format!("{:?} (acked at {:?})", w2.kind, w2.complete))
        };
        for r in ops.iter().filter(|o| o.kind == Kind::Read) {
            let Res::Ok(v) = &r.res else { continue };
            if let Some(v) = v {
                match writes.get(v.as_str()) {
                    None => bad.push(format!("key {key}: read {v:?} never written: {r:?}")),
                    Some(w) if w.invoke > r.complete => bad.push(format!(
                        "key {key}: read {v:?} before its write was invoked: {r:?}"
                    )),
                    _ => {}
                }
            }
            if let Some(w2) = replaced_before(v.as_deref(), r.invoke) {
                bad.push(format!(
                    "key {key}: stale read {v:?} by client {} at {:?}: {w2} replaced it before",
                    r.client, r.invoke
                ));
            }
        }
        // monotonic reads per client
        let mut last: HashMap<usize, &Op> = HashMap::new();
        let mut reads: Vec<&&Op> = ops.iter().filter(|o| o.kind == Kind::Read).collect();
        reads.sort_by_key(|o| o.invoke);
        for r in reads {
            let Res::Ok(Some(v)) = &r.res else { continue };
            let Some(w) = writes.get(v.as_str()) else {
                continue;
            };
            if let Some(prev) = last.get(&r.client) {
                if let Res::Ok(Some(pv)) = &prev.res {
                    if let Some(pw) = writes.get(pv.as_str()) {
                        if done(w).is_some_and(|c| c < pw.invoke) {
                            bad.push(format!(
                                "key {key}: client {} read {pv:?} then older {v:?}",
                                r.client
                            ));
                        }
                    }
                }
            }
            last.insert(r.client, r);
        }
    }
    bad
}

pub fn svc_client(ms: &[Member]) -> BlockingClient {
    let replicas = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, m.svc.clone()))
        .collect();
    let mut c = BlockingClient::new(replicas).unwrap();
    c.inner.rpc_timeout = Duration::from_millis(500);
    c.inner.backoff = Duration::from_millis(20);
    c
}

pub fn svc_map(c: &mut BlockingClient) -> Option<PoolMap> {
    c.read().ok()?.pools.get("dp").map(|p| p.map())
}

/// The pool's map and rebuild view (which replicas are complete).
pub fn svc_view(c: &mut BlockingClient) -> Option<PoolView> {
    c.read().ok()?.pools.get("dp").map(|p| p.view())
}

pub fn dist_client(ms: &[Member]) -> Option<DistClient> {
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    let mut svc = svc_client(ms);
    let view = svc_view(&mut svc)?;
    let dc = DistClient::connect_with_map(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(3),
        DetectorConfig::default(),
        Some(view.map),
    )
    .ok()?;
    // reads from any replica (not always the leader): followers' held keys
    // are exercised
    Some(
        dc.with_read_spread(true)
            .with_rebuild_view(view.rebuild)
            .with_view_source(Box::new(move || {
                svc_view(&mut svc).ok_or_else(|| "no map from the pool service".to_string())
            })),
    )
}

/// One client operation on a KV key: a put of `write`, or a get; recorded
/// with its outcome (a failed put is indeterminate).
pub fn kv_op(
    dc: &mut DistClient,
    oid: obj::types::ObjectId,
    key: &[u8],
    write: Option<String>,
) -> (Kind, Res) {
    match write {
        Some(v) => {
            let res = match dc.kv_put(oid, key, v.as_bytes()) {
                Ok(_) => Res::Ok(None),
                Err(_) => Res::Info,
            };
            (Kind::Write(v), res)
        }
        None => (Kind::Read, kv_read(dc, oid, key)),
    }
}

/// A get as a history result: a value, none (`NonExist`), or a failure.
pub fn kv_read(dc: &mut DistClient, oid: obj::types::ObjectId, key: &[u8]) -> Res {
    match dc.kv_get(oid, key) {
        Ok(v) => Res::Ok(Some(String::from_utf8(v).unwrap())),
        Err(obj::dist::Error::Engine { source, .. })
            if source.status() == Some(obj::rpc::Status::NonExist) =>
        {
            Res::Ok(None)
        }
        Err(_) => Res::Fail,
    }
}

/// A client on `map`, reading the first replica first (no read spread),
/// fetching the map from the service on a refusal.
pub fn map_client(ms: &[Member], map: PoolMap) -> DistClient {
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    let mut svc = svc_client(ms);
    DistClient::connect_with_map(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(5),
        DetectorConfig::default(),
        Some(map),
    )
    .expect("client")
    .with_map_source(Box::new(move || {
        svc_map(&mut svc).ok_or_else(|| "no map from the pool service".to_string())
    }))
}
