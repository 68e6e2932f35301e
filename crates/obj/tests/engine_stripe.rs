//! Striped objects (`SX`, `S<n>`): an engine spreads such an object's dkeys
//! over its targets (DAOS: a dkey's shard is a hash of the dkey); every
//! operation of libdaos works on it as on a one-target object, whichever
//! path the client takes (its own connection per target, or the engine's
//! network thread): dkey I/O goes to the dkey's target, and operations
//! without a dkey (object punch, dkey listing, max-dkey query, and the KV
//! and array conveniences on them) go to every target.

use std::collections::BTreeSet;
use std::sync::Arc;

use obj::client::{Client, ContHandle, DEFAULT_TIMEOUT};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::rpc::msg::{
    stripe_of, BulkSeg, IodType, ObjTarget, Request, WireIod, WireOid, QUERY_MAX_DKEY,
};
use obj::rpc::Status;
use obj::types::{Anchor, DKey, Iod, ObjClass, ObjType, ObjectId, SgList};

const TARGETS: usize = 3;

fn start(dir: &std::path::Path, ip: &str) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets: TARGETS,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn setup(c: &Client) -> ContHandle {
    c.pool_create("p", 64 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("p", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    c.cont_open(&poh, "c", None).unwrap().get().unwrap()
}

/// The targets (shards) whose object listing names `oid`.
fn shards_holding(c: &Client, coh: &ContHandle, oid: ObjectId) -> Vec<u32> {
    let mut v = Vec::new();
    for s in 0..TARGETS as u32 {
        let mut a = Anchor::default();
        while !a.is_eof() {
            let (oids, next) = c
                .obj_list_obj(coh, s, None, &a, 64, None)
                .unwrap()
                .get()
                .unwrap();
            if oids.contains(&oid) {
                v.push(s);
            }
            a = next;
        }
    }
    v.dedup();
    v
}

fn kv_keys(c: &Client, kv: &obj::client::Kv, max: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut a = Anchor::default();
    while !a.is_eof() {
        let (ks, next) = c.kv_list(kv, &a, max, None).unwrap().get().unwrap();
        assert!(ks.len() <= max as usize);
        out.extend(ks);
        a = next;
    }
    out
}

/// Everything a KV and an array do, on striped objects, over one client.
fn exercise(c: &Client, coh: &ContHandle, rtc: bool) {
    assert_eq!(c.engine_targets(), TARGETS);
    assert_eq!(c.target_connections(), if rtc { TARGETS } else { 0 });
    let sx = ObjectId::generate(0, 10, ObjType::KvHashed, ObjClass::SX).unwrap();
    let kv = c.kv_open(coh, sx, None).unwrap().get().unwrap();
    let keys: Vec<Vec<u8>> = (0..120u32)
        .map(|i| format!("key-{i:03}").into_bytes())
        .collect();
    for k in &keys {
        let mut v = k.clone();
        v.extend_from_slice(b"=value");
        c.kv_put(&kv, k, &v, None).unwrap().get().unwrap();
    }
    // the dkeys went to every target
    assert_eq!(
        shards_holding(c, coh, sx),
        (0..TARGETS as u32).collect::<Vec<_>>()
    );
    for k in &keys {
        let v = c.kv_get(&kv, k, None).unwrap().get().unwrap();
        assert_eq!(&v[..k.len()], &k[..]);
    }
    // listing merges the targets: every key once, in order, in any page size
    let want: Vec<Vec<u8>> = keys
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for max in [1, 7, 50, 1000] {
        assert_eq!(kv_keys(c, &kv, max), want, "kv_list, max {max}");
    }
    let mut listed = Vec::new();
    let mut a = Anchor::default();
    while !a.is_eof() {
        let (ks, next) = c
            .obj_list_dkey(&kv.oh, None, &a, 9, None)
            .unwrap()
            .get()
            .unwrap();
        listed.extend(ks.into_iter().map(|d| d.0));
        a = next;
    }
    assert_eq!(listed, want);
    // removal of some keys
    for k in keys.iter().step_by(3) {
        c.kv_remove(&kv, k, None).unwrap().get().unwrap();
    }
    let left: Vec<Vec<u8>> = want
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(kv_keys(c, &kv, 11), left);

    // the greatest u64 dkey of a striped object, over all targets
    let nu = ObjectId::generate(0, 11, ObjType::DkeyUint64, ObjClass::SX).unwrap();
    let oh = c.obj_open(coh, nu, None).unwrap().get().unwrap();
    for d in [3u64, 900, 17, 256, 5] {
        c.obj_update(
            &oh,
            &DKey::from_u64(d),
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])],
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    }
    let q = c
        .obj_query_key(
            &oh,
            None,
            QUERY_MAX_DKEY,
            &DKey(Vec::new()),
            &"a".into(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(q.dkey.as_u64(), Some(900));

    // a striped array: chunks on several targets; size, shrink, grow
    let ao = ObjectId::generate(0, 12, ObjType::Array, ObjClass::SX).unwrap();
    let arr = c.array_create(coh, ao, 1, 64, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 0);
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    c.array_write(&arr, 0, &data, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 1000);
    assert!(shards_holding(c, coh, ao).len() > 1);
    assert_eq!(
        c.array_read(&arr, 0, 1000, None).unwrap().get().unwrap(),
        data
    );
    c.array_set_size(&arr, 300, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 300);
    let back = c.array_read(&arr, 0, 1000, None).unwrap().get().unwrap();
    assert_eq!(&back[..300], &data[..300]);
    assert!(back[300..].iter().all(|&b| b == 0));
    c.array_set_size(&arr, 5000, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 5000);

    // a snapshot, then the object punched on every target
    let snap = c.cont_create_snap(coh, None).unwrap().get().unwrap();
    c.obj_punch(&kv.oh, None).unwrap().get().unwrap();
    assert!(kv_keys(c, &kv, 10).is_empty());
    for k in keys.iter().take(10) {
        assert_eq!(
            c.kv_get(&kv, k, None).unwrap().get().unwrap_err().status(),
            Some(Status::NonExist)
        );
    }
    // the snapshot still lists what was there
    let (ks, _) = c
        .obj_list_dkey(&kv.oh, Some(snap), &Anchor::default(), 1000, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(ks.into_iter().map(|d| d.0).collect::<Vec<_>>(), left);
}

#[test]
fn striped_objects_over_target_connections() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.51");
    let c = Client::connect_opts(&eng.addr().to_string(), DEFAULT_TIMEOUT, true).unwrap();
    let coh = setup(&c);
    exercise(&c, &coh, true);
    assert_eq!(eng.op_counters().wrong_target(), 0);
}

#[test]
fn striped_objects_through_the_network_thread() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.52");
    let c = Client::connect_opts(&eng.addr().to_string(), DEFAULT_TIMEOUT, false).unwrap();
    let coh = setup(&c);
    exercise(&c, &coh, false);
}

/// The same object written over one path and read over the other: both
/// place a dkey on the same target.
#[test]
fn both_paths_agree_on_a_dkeys_target() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.53");
    let addr = eng.addr().to_string();
    let rtc = Client::connect_opts(&addr, DEFAULT_TIMEOUT, true).unwrap();
    let coh = setup(&rtc);
    let old = Client::connect_opts(&addr, DEFAULT_TIMEOUT, false).unwrap();
    let poh = old.pool_connect("p", None).unwrap().get().unwrap();
    let coh2 = old.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let sx = ObjectId::generate(0, 20, ObjType::KvHashed, ObjClass::SX).unwrap();
    let a = rtc.kv_open(&coh, sx, None).unwrap().get().unwrap();
    let b = old.kv_open(&coh2, sx, None).unwrap().get().unwrap();
    for i in 0..60u32 {
        let k = i.to_be_bytes();
        if i % 2 == 0 {
            rtc.kv_put(&a, &k, b"via-target", None)
                .unwrap()
                .get()
                .unwrap();
        } else {
            old.kv_put(&b, &k, b"via-net", None).unwrap().get().unwrap();
        }
    }
    for i in 0..60u32 {
        let k = i.to_be_bytes();
        let want: &[u8] = if i % 2 == 0 {
            b"via-target"
        } else {
            b"via-net"
        };
        assert_eq!(old.kv_get(&b, &k, None).unwrap().get().unwrap(), want);
        assert_eq!(rtc.kv_get(&a, &k, None).unwrap().get().unwrap(), want);
    }
    assert_eq!(kv_keys(&rtc, &a, 8).len(), 60);
    assert_eq!(kv_keys(&old, &b, 8).len(), 60);
}

/// By hand on one target's connection: a striped object's dkey that
/// another target holds is refused (`DER_INVAL`); a dkey-less operation
/// naming a target out of range is refused on the network thread's path.
#[test]
fn a_striped_dkey_sent_to_the_wrong_target_is_refused() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.54");
    let addr = eng.addr().to_string();
    let c = Client::connect_opts(&addr, DEFAULT_TIMEOUT, false).unwrap();
    let coh = setup(&c);
    let sx = ObjectId::generate(0, 30, ObjType::KvHashed, ObjClass::SX).unwrap();
    let t = |stripe| ObjTarget {
        coh: coh.coh,
        oid: WireOid {
            hi: sx.hi,
            lo: sx.lo,
        },
        epoch: 0,
        stripe,
    };
    // a dkey that target 0 does not hold
    let dkey = (0u32..)
        .map(|i| i.to_be_bytes().to_vec())
        .find(|d| stripe_of(d, TARGETS) != 0)
        .unwrap();
    let upd = |dkey: Vec<u8>| Request::ObjUpdate {
        t: t(0),
        dkey,
        iods: vec![WireIod {
            akey: b"a".to_vec(),
            kind: IodType::Single,
            rsize: 3,
            recxs: Vec::new(),
            sgl: vec![BulkSeg { off: 0, len: 3 }],
        }],
    };
    let status = |addr: std::net::SocketAddr, req: &Request, bulk: &[&[u8]]| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut b = Vec::new();
        obj::rpc::frame::encode_request(&mut b, 1, 0, req, bulk);
        s.write_all(&b).unwrap();
        let mut dec = obj::rpc::frame::FrameDecoder::new(obj::rpc::MAX_BODY);
        loop {
            if let Ok(Some(obj::rpc::frame::Decoded::Frame { hdr, .. })) = dec.decode() {
                return Status::from_code(hdr.status);
            }
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed");
            dec.input(&buf[..n]);
        }
    };
    let t0 = eng.target_addrs()[0];
    assert_eq!(status(t0, &upd(dkey.clone()), &[b"xyz"]), Status::Invalid);
    assert_eq!(eng.op_counters().wrong_target(), 1);
    // the right target takes it
    let right = eng.target_addrs()[stripe_of(&dkey, TARGETS)];
    assert_eq!(status(right, &upd(dkey.clone()), &[b"xyz"]), Status::Ok);
    // a dkey listing naming target 3 of 3
    let list = Request::ObjListDkey {
        t: t(TARGETS as u32),
        anchor: Anchor::default().to_bytes(),
        max: 8,
    };
    assert_eq!(status(eng.addr(), &list, &[]), Status::Invalid);
    // what the raw connection wrote is read back through the client
    let oh = c.obj_open(&coh, sx, None).unwrap().get().unwrap();
    let f = c
        .obj_fetch(
            &oh,
            None,
            &DKey(dkey),
            &[Iod::single("a", 0)],
            Vec::new(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(f.sgls[0].concat(), b"xyz");
}

/// A striped object's punch takes one epoch on every target (the first
/// target's, then `ObjPunchAt` on the others): at every epoch its dkeys are
/// all there or all gone, never some.
#[test]
fn a_striped_punch_is_at_one_epoch_on_every_target() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.55");
    let c = Client::connect_opts(&eng.addr().to_string(), DEFAULT_TIMEOUT, true).unwrap();
    let coh = setup(&c);
    let sx = ObjectId::generate(0, 40, ObjType::KvHashed, ObjClass::SX).unwrap();
    let oh = c.obj_open(&coh, sx, None).unwrap().get().unwrap();
    let put = |d: &[u8]| {
        c.obj_update(
            &oh,
            &DKey(d.to_vec()),
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])],
            None,
        )
        .unwrap()
        .get()
        .unwrap()
    };
    let mut before = 0;
    for i in 0..60u32 {
        before = before.max(put(format!("d{i:02}").as_bytes()).0);
    }
    assert!(shards_holding(&c, &coh, sx).len() == TARGETS);
    c.obj_punch(&oh, None).unwrap().get().unwrap();
    let after = put(b"zz-after").0;
    // the punched dkeys visible at epoch e
    let count = |e: u64| {
        let (ks, a) = c
            .obj_list_dkey(
                &oh,
                Some(obj::types::Epoch(e)),
                &Anchor::default(),
                1000,
                None,
            )
            .unwrap()
            .get()
            .unwrap();
        assert!(a.is_eof());
        ks.iter().filter(|k| k.0 != b"zz-after").count()
    };
    assert_eq!(count(before), 60);
    assert_eq!(count(after), 0);
    // the first epoch at which any is gone: all are gone there
    let (mut lo, mut hi) = (before, after);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if count(mid) == 60 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert_eq!(
        count(hi),
        0,
        "at epoch {hi} the punch reached some targets only"
    );
}
