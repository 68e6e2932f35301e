//! Object enumeration (`obj_list_obj`) and rebuild's copy of a dkey between
//! two engines (in this process, on 127.0.0.54–55).

use std::collections::BTreeSet;
use std::sync::Arc;

use obj::client::{Client, ContHandle, ObjHandle};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::rebuild::{copy_dkey, Side};
use obj::rpc::Status;
use obj::types::{Anchor, DKey, Iod, ObjClass, ObjType, ObjectId, Recx, SgList};

fn start(dir: &std::path::Path, ip: &str, targets: usize) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn open(addr: &str) -> (Client, ContHandle) {
    let c = Client::connect(addr).unwrap();
    c.pool_create("ep", 64 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("ep", None).unwrap().get().unwrap();
    c.cont_create(&poh, "ec", &[], None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "ec", None).unwrap().get().unwrap();
    (c, coh)
}

fn oid(lo: u64) -> ObjectId {
    ObjectId::generate(7, lo, ObjType::KvHashed, ObjClass::parse("RP_2G1").unwrap()).unwrap()
}

/// Every object of the engine, walking its shards with small batches.
fn list_all(c: &Client, coh: &ContHandle, shards: u32, max: u32) -> (Vec<ObjectId>, usize) {
    let mut out = Vec::new();
    let mut rpcs = 0;
    for s in 0..shards {
        let mut a = Anchor::default();
        while !a.is_eof() {
            let (oids, next) = c
                .obj_list_obj(coh, s, None, &a, max, None)
                .unwrap()
                .get()
                .unwrap();
            assert!(oids.len() <= max as usize);
            rpcs += 1;
            out.extend(oids);
            a = next;
        }
    }
    (out, rpcs)
}

#[test]
fn list_obj_walks_every_shard_resumably_and_bounded() {
    let d = tempfile::tempdir().unwrap();
    let e = start(d.path(), "127.0.0.54", 3);
    let (c, coh) = open(&e.addr().to_string());
    let info = c.pool_query("ep", None).unwrap().get().unwrap();
    assert_eq!(info.targets, 3);
    let kv_of = |o| c.kv_open(&coh, o, None).unwrap().get().unwrap();
    let want: BTreeSet<ObjectId> = (0..200).map(oid).collect();
    for &o in &want {
        c.kv_put(&kv_of(o), b"k", b"v", None)
            .unwrap()
            .get()
            .unwrap();
    }
    // a punched object is not listed
    let gone = oid(999);
    c.kv_put(&kv_of(gone), b"k", b"v", None)
        .unwrap()
        .get()
        .unwrap();
    c.obj_punch(
        &ObjHandle {
            coh: coh.coh,
            oid: gone,
        },
        None,
    )
    .unwrap()
    .get()
    .unwrap();
    let (got, rpcs) = list_all(&c, &coh, info.targets, 7);
    let set: BTreeSet<ObjectId> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "an object listed twice");
    assert_eq!(set, want);
    assert!(rpcs >= 200 / 7, "{rpcs} listing RPCs");
    // one big batch per shard gives the same
    assert_eq!(list_all(&c, &coh, info.targets, 100_000).0.len(), 200);
    // a shard the engine does not have is a typed refusal
    let e3 = c
        .obj_list_obj(&coh, 3, None, &Anchor::default(), 8, None)
        .unwrap()
        .get();
    assert_eq!(e3.unwrap_err().status(), Some(Status::Invalid));
    // an unknown handle too
    let bad = ContHandle {
        coh: 0xdead,
        uuid: coh.uuid,
    };
    let eh = c
        .obj_list_obj(&bad, 0, None, &Anchor::default(), 8, None)
        .unwrap()
        .get();
    assert_eq!(eh.unwrap_err().status(), Some(Status::NoHandle));
}

#[test]
fn copy_dkey_copies_singles_and_extents_and_skips_equal_values() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (e1, e2) = (
        start(d1.path(), "127.0.0.54", 2),
        start(d2.path(), "127.0.0.55", 1),
    );
    let (c1, h1) = open(&e1.addr().to_string());
    let (c2, h2) = open(&e2.addr().to_string());
    let o = ObjectId::generate(
        7,
        1,
        ObjType::MultiHashed,
        ObjClass::parse("RP_2G1").unwrap(),
    )
    .unwrap();
    let oh1 = ObjHandle {
        coh: h1.coh,
        oid: o,
    };
    let dkey = DKey(b"d".to_vec());
    let arr: Vec<u8> = (0..64u8).collect();
    c1.obj_update(
        &oh1,
        &dkey,
        &[
            Iod::single("s", 5),
            Iod::array(
                "a",
                4,
                vec![Recx { idx: 0, nr: 8 }, Recx { idx: 100, nr: 8 }],
            ),
        ],
        &[SgList::one(b"hello".to_vec()), SgList::one(arr.clone())],
        None,
    )
    .unwrap()
    .get()
    .unwrap();
    let src = Side {
        client: &c1,
        coh: &h1,
    };
    let dst = Side {
        client: &c2,
        coh: &h2,
    };
    let st = copy_dkey(&src, &dst, o, &dkey).unwrap();
    assert_eq!((st.records, st.bytes, st.same), (3, 5 + 64, 0));
    let oh2 = ObjHandle {
        coh: h2.coh,
        oid: o,
    };
    let f = c2
        .obj_fetch(
            &oh2,
            None,
            &dkey,
            &[
                Iod::single("s", 0),
                Iod::array(
                    "a",
                    4,
                    vec![Recx { idx: 0, nr: 8 }, Recx { idx: 100, nr: 8 }],
                ),
            ],
            Vec::new(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(f.sgls[0].concat(), b"hello");
    assert_eq!(f.sgls[1].concat(), arr);
    // again: nothing differs, nothing written
    let st = copy_dkey(&src, &dst, o, &dkey).unwrap();
    assert_eq!((st.records, st.same), (0, 3));
    // the source changes one value: only it is copied
    c1.obj_update(
        &oh1,
        &dkey,
        &[Iod::single("s", 3)],
        &[SgList::one(b"new".to_vec())],
        None,
    )
    .unwrap()
    .get()
    .unwrap();
    let st = copy_dkey(&src, &dst, o, &dkey).unwrap();
    assert_eq!((st.records, st.bytes, st.same), (1, 3, 2));
}
