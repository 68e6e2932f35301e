//! The engine end to end over TCP loopback, through the client library:
//! pools, containers, objects (several akeys, SGLs on both sides, arrays
//! with holes), punches, listings with anchors, query_key, snapshots, the
//! KV and array conveniences, blocking and event-driven calls, restart.

use std::sync::Arc;

use obj::client::{Client, Error};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::rpc::msg::{QUERY_MAX_DKEY, QUERY_MAX_RECX};
use obj::rpc::Status;
use obj::types::{AKey, Anchor, DKey, Iod, ObjClass, ObjType, ObjectId, Recx, SgList};
use tse::Wait;

fn start(dir: &std::path::Path, ip: &str, targets: usize) -> Engine {
    start_with(dir, ip, targets, Default::default())
}

fn start_with(
    dir: &std::path::Path,
    ip: &str,
    targets: usize,
    aggregation: obj::engine::AggregationPolicy,
) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets,
        rdma_listen: None,
        aggregation,
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

/// Pool "tank" (64 MiB) and its container "c1", created and opened.
fn new_pool_and_cont(c: &Client) -> obj::client::ContHandle {
    c.pool_create("tank", 64 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    let poh = c.pool_connect("tank", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c1", &[], None).unwrap().get().unwrap();
    c.cont_open(&poh, "c1", None).unwrap().get().unwrap()
}

fn oid(lo: u64, t: ObjType) -> ObjectId {
    ObjectId::generate(0, lo, t, ObjClass::S1).unwrap()
}

#[test]
fn pools_containers_objects_snapshots_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.2", 2);
    let addr = eng.addr().to_string();
    let c = Client::connect(&addr).unwrap();

    let p = c
        .pool_create("tank", 64 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!((p.label.as_str(), p.size, p.targets), ("tank", 64 << 20, 2));
    assert_eq!(
        c.pool_create("tank", 64 << 20, None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(Status::Exists)
    );
    assert_eq!(
        c.pool_query("nope", None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(Status::NonExist)
    );
    let poh = c.pool_connect("tank", None).unwrap().get().unwrap();
    let ci = c
        .cont_create(&poh, "c1", &[("layout", "test")], None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(ci.props, vec![("layout".to_string(), "test".to_string())]);
    let coh = c.cont_open(&poh, "c1", None).unwrap().get().unwrap();
    let oh = c
        .obj_open(&coh, oid(1, ObjType::MultiHashed), None)
        .unwrap()
        .get()
        .unwrap();

    // two akeys in one update: a single value gathered from two buffers and
    // an array extent; then a fetch scattering into two buffers
    let d = DKey::from("d1");
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let iods = [
        Iod::single("sv", 10 + big.len() as u64),
        Iod::array("arr", 4, vec![Recx { idx: 2, nr: 3 }]),
    ];
    let sgls = [
        SgList {
            iovs: vec![b"0123456789".to_vec(), big.clone()],
        },
        SgList::one(b"aaaabbbbcccc".to_vec()),
    ];
    let e1 = c
        .obj_update(&oh, &d, &iods, &sgls, None)
        .unwrap()
        .get()
        .unwrap();
    let f = c
        .obj_fetch(
            &oh,
            None,
            &d,
            &[
                Iod::single("sv", 0),
                Iod::array("arr", 4, vec![Recx { idx: 0, nr: 6 }]),
            ],
            Vec::new(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(f.sizes, vec![20_010, 4]);
    assert_eq!(&f.sgls[0].concat()[..10], b"0123456789");
    assert_eq!(&f.sgls[0].concat()[10..], &big[..]);
    assert_eq!(f.sgls[1].concat(), b"\0\0\0\0\0\0\0\0aaaabbbbcccc\0\0\0\0");
    let into = SgList {
        iovs: vec![vec![0; 5], vec![0; 7]],
    };
    let f = c
        .obj_fetch(
            &oh,
            None,
            &d,
            &[Iod::array("arr", 4, vec![Recx { idx: 2, nr: 3 }])],
            vec![into],
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(f.sgls[0].iovs, vec![b"aaaab".to_vec(), b"bbbcccc".to_vec()]);

    // snapshot, overwrite, read both epochs
    let snap = c.cont_create_snap(&coh, None).unwrap().get().unwrap();
    assert!(snap > e1);
    let e2 = c
        .obj_update(
            &oh,
            &d,
            &[Iod::single("sv", 3)],
            &[SgList::one(b"new".to_vec())],
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert!(e2 > snap);
    let at = |e| {
        c.obj_fetch(&oh, e, &d, &[Iod::single("sv", 0)], Vec::new(), None)
            .unwrap()
            .get()
            .unwrap()
            .sgls[0]
            .concat()
    };
    assert_eq!(at(None), b"new");
    assert_eq!(at(Some(snap)).len(), 20_010);
    assert_eq!(
        c.cont_list_snap(&coh, None).unwrap().get().unwrap(),
        vec![snap]
    );

    // many dkeys, listed with anchors in small pages
    let keys: Vec<DKey> = (0..25)
        .map(|i| DKey(format!("k{i:03}").into_bytes()))
        .collect();
    for k in &keys {
        c.obj_update(
            &oh,
            k,
            &[Iod::single("v", 1)],
            &[SgList::one(vec![1])],
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    }
    let mut anchor = Anchor::default();
    let mut listed = Vec::new();
    let mut pages = 0;
    while !anchor.is_eof() {
        let (ks, a) = c
            .obj_list_dkey(&oh, None, &anchor, 7, None)
            .unwrap()
            .get()
            .unwrap();
        assert!(ks.len() <= 7);
        listed.extend(ks);
        anchor = a;
        pages += 1;
    }
    assert!(pages >= 4);
    let mut want = keys.clone();
    want.push(d.clone());
    want.sort();
    assert_eq!(listed, want);
    let (akeys, _) = c
        .obj_list_akey(&oh, None, &d, &Anchor::default(), 100, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(akeys, vec![AKey::from("arr"), AKey::from("sv")]);
    let (recxs, rsize, _) = c
        .obj_list_recx(
            &oh,
            None,
            &d,
            &AKey::from("arr"),
            &Anchor::default(),
            100,
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!((recxs, rsize), (vec![Recx { idx: 2, nr: 3 }], 4));
    let q = c
        .obj_query_key(
            &oh,
            None,
            QUERY_MAX_DKEY,
            &DKey::default(),
            &AKey::default(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(q.dkey, DKey::from("k024"));
    let q = c
        .obj_query_key(&oh, None, QUERY_MAX_RECX, &d, &AKey::from("arr"), None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(q.recx, Recx { idx: 2, nr: 3 });

    // punches: akey, dkey, object
    c.obj_punch_akeys(&oh, &d, &[AKey::from("arr")], None)
        .unwrap()
        .get()
        .unwrap();
    let (akeys, _) = c
        .obj_list_akey(&oh, None, &d, &Anchor::default(), 100, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(akeys, vec![AKey::from("sv")]);
    c.obj_punch_dkey(&oh, &keys[0], None)
        .unwrap()
        .get()
        .unwrap();
    let (ks, _) = c
        .obj_list_dkey(&oh, None, &Anchor::default(), 100, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(ks.len(), 25);
    // the snapshot still sees the punched akey
    let (akeys, _) = c
        .obj_list_akey(&oh, Some(snap), &d, &Anchor::default(), 100, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(akeys.len(), 2);
    c.obj_punch(&oh, None).unwrap().get().unwrap();
    let (ks, a) = c
        .obj_list_dkey(&oh, None, &Anchor::default(), 100, None)
        .unwrap()
        .get()
        .unwrap();
    assert!(ks.is_empty() && a.is_eof());

    // KV
    let kv = c
        .kv_open(&coh, oid(2, ObjType::KvHashed), None)
        .unwrap()
        .get()
        .unwrap();
    c.kv_put(&kv, b"alpha", b"one", None)
        .unwrap()
        .get()
        .unwrap();
    c.kv_put(&kv, b"beta", &vec![7u8; 100_000], None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(
        c.kv_get(&kv, b"alpha", None).unwrap().get().unwrap(),
        b"one"
    );
    assert_eq!(
        c.kv_get(&kv, b"beta", None).unwrap().get().unwrap().len(),
        100_000
    );
    assert_eq!(
        c.kv_get(&kv, b"gamma", None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(Status::NonExist)
    );
    c.kv_remove(&kv, b"alpha", None).unwrap().get().unwrap();
    let (ks, _) = c
        .kv_list(&kv, &Anchor::default(), 10, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(ks, vec![b"beta".to_vec()]);
    assert!(matches!(
        c.kv_open(&coh, oid(3, ObjType::Array), None).unwrap().get(),
        Err(Error::Invalid(_))
    ));

    // array: writes across chunks, holes, get/set size
    let arr = c
        .array_create(&coh, oid(4, ObjType::Array), 1, 1000, None)
        .unwrap()
        .get()
        .unwrap();
    let data: Vec<u8> = (0..2500u32).map(|i| (i % 200) as u8 + 1).collect();
    c.array_write(&arr, 500, &data, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 3000);
    let back = c.array_read(&arr, 0, 3200, None).unwrap().get().unwrap();
    assert!(back[..500].iter().all(|&b| b == 0));
    assert_eq!(&back[500..3000], &data[..]);
    assert!(back[3000..].iter().all(|&b| b == 0));
    c.array_set_size(&arr, 1200, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 1200);
    let back = c.array_read(&arr, 0, 3000, None).unwrap().get().unwrap();
    assert_eq!(&back[500..1200], &data[..700]);
    assert!(back[1200..].iter().all(|&b| b == 0));
    c.array_set_size(&arr, 5000, None).unwrap().get().unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 5000);
    let arr2 = c
        .array_open(&coh, oid(4, ObjType::Array), None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!((arr2.cell, arr2.chunk), (1, 1000));

    // event-driven: 16 updates in flight, then polled
    let evs: Vec<_> = (0..16).map(|_| c.event(None).unwrap()).collect();
    let mut pend = Vec::new();
    for (i, ev) in evs.iter().enumerate() {
        let k = DKey(format!("async{i}").into_bytes());
        pend.push(
            c.obj_update(
                &oh,
                &k,
                &[Iod::single("v", 2)],
                &[SgList::one(vec![i as u8; 2])],
                Some(ev),
            )
            .unwrap(),
        );
    }
    assert!(c.in_flight() + pend.iter().filter(|p| p.is_done()).count() <= 16);
    let mut done = Vec::new();
    while done.len() < 16 {
        c.poll(Wait::Forever, 16, &mut done).unwrap();
    }
    assert!(done.iter().all(|(_, r)| r.is_ok()));
    for p in pend {
        p.get().unwrap();
    }
    for ev in evs {
        c.event_fini(ev).unwrap();
    }

    // restart: everything acknowledged is there
    c.cont_close(&coh, None).unwrap().get().unwrap();
    drop(c);
    eng.stop();
    let eng = start(dir.path(), "127.0.0.2", 2);
    let c = Client::connect(&eng.addr().to_string()).unwrap();
    let pools = c.pool_list(None).unwrap().get().unwrap();
    assert_eq!(pools.len(), 1);
    assert!(pools[0].used > 0);
    let poh = c.pool_connect("tank", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c1", None).unwrap().get().unwrap();
    let kv = c
        .kv_open(&coh, oid(2, ObjType::KvHashed), None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(
        c.kv_get(&kv, b"beta", None).unwrap().get().unwrap().len(),
        100_000
    );
    let arr = c
        .array_open(&coh, oid(4, ObjType::Array), None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(c.array_get_size(&arr, None).unwrap().get().unwrap(), 5000);
    assert_eq!(
        c.cont_list_snap(&coh, None).unwrap().get().unwrap(),
        vec![snap]
    );

    // busy container / pool; destroy
    assert_eq!(
        c.cont_destroy(&poh, "c1", false, None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(Status::Busy)
    );
    c.cont_close(&coh, None).unwrap().get().unwrap();
    c.cont_destroy(&poh, "c1", false, None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(
        c.pool_destroy("tank", false, None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(Status::Busy)
    );
    c.pool_disconnect(&poh, None).unwrap().get().unwrap();
    c.pool_destroy("tank", false, None).unwrap().get().unwrap();
    assert!(c.pool_list(None).unwrap().get().unwrap().is_empty());
}

/// After a restart the engine's clock starts above every epoch its shards hold
/// (updates, snapshots), even when the wall clock is behind them (a clock that
/// was stepped back, or a shard written by a host whose clock ran ahead): a new
/// update is tagged above the acknowledged ones, so it is the one a read at the
/// latest epoch sees, and it is not refused as below a snapshot.
#[test]
fn restart_clock_starts_above_the_stored_epochs() {
    use obj::engine::backend::StoreBackend;
    use obj::types::Epoch;
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.2", 1);
    let c = Client::connect(&eng.addr().to_string()).unwrap();
    let coh = new_pool_and_cont(&c);
    let kv_oid = oid(9, ObjType::KvHashed);
    let kv = c.kv_open(&coh, kv_oid, None).unwrap().get().unwrap();
    let e1 = c.kv_put(&kv, b"k", b"old", None).unwrap().get().unwrap();
    c.cont_close(&coh, None).unwrap().get().unwrap();
    drop(c);
    eng.stop();

    // one hour ahead of the engine's clock: a value and a snapshot above it
    let ahead = Epoch(e1.0 + 3_600_000_000_000);
    let shard = std::fs::read_dir(dir.path().join("pools"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("t0");
    {
        let mut s = VosBackend::default().open(&shard, 0, false).unwrap();
        let cont = s.cont_list().unwrap()[0];
        s.update(
            cont,
            kv_oid,
            ahead,
            &DKey(b"k".to_vec()),
            &[Iod::single(obj::client::kv::KV_AKEY, 6)],
            &[SgList::one(b"future".to_vec())],
        )
        .unwrap();
        s.snap_create(cont, Epoch(ahead.0 + 1), None).unwrap();
        s.commit().unwrap();
        assert_eq!(s.epoch_high_water().unwrap(), Epoch(ahead.0 + 1));
    }

    let eng = start(dir.path(), "127.0.0.2", 1);
    let c = Client::connect(&eng.addr().to_string()).unwrap();
    let poh = c.pool_connect("tank", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c1", None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, kv_oid, None).unwrap().get().unwrap();
    assert_eq!(c.kv_get(&kv, b"k", None).unwrap().get().unwrap(), b"future");
    let e2 =
        c.kv_put(&kv, b"k", b"new", None).unwrap().get().expect(
            "an update after the restart is refused: its epoch is below the stored snapshot",
        );
    assert!(
        e2.0 > ahead.0 + 1,
        "new epoch {e2:?} not above the stored {ahead:?}"
    );
    assert_eq!(c.kv_get(&kv, b"k", None).unwrap().get().unwrap(), b"new");
    c.cont_close(&coh, None).unwrap().get().unwrap();
    drop(c);
    eng.stop();
}

/// The engine aggregates in the background: 40 overwrites of an 8 KiB value
/// (on the bdev) keep 40 versions' space without aggregation; with it, the
/// pool's used space comes down to the versions still needed (the latest and
/// the one a snapshot keeps), and both still read back.
#[test]
fn background_aggregation_reclaims_overwritten_versions() {
    use obj::engine::AggregationPolicy;
    use std::time::{Duration, Instant};
    const N: usize = 40;
    const LEN: usize = 8192;
    let run = |policy: AggregationPolicy, ip: &str| -> (u64, u64) {
        let dir = tempfile::tempdir().unwrap();
        let eng = start_with(dir.path(), ip, 1, policy);
        let c = Client::connect(&eng.addr().to_string()).unwrap();
        let coh = new_pool_and_cont(&c);
        let oh = c
            .obj_open(&coh, oid(11, ObjType::MultiHashed), None)
            .unwrap()
            .get()
            .unwrap();
        let dkey = DKey(b"d".to_vec());
        let put = |i: usize| {
            c.obj_update(
                &oh,
                &dkey,
                &[Iod::single(&b"a"[..], LEN as u64)],
                &[SgList::one(vec![i as u8; LEN])],
                None,
            )
            .unwrap()
            .get()
            .unwrap();
        };
        let get = |epoch| {
            let f = c
                .obj_fetch(
                    &oh,
                    epoch,
                    &dkey,
                    &[Iod::single(&b"a"[..], 0)],
                    vec![SgList::one(vec![0; LEN])],
                    None,
                )
                .unwrap()
                .get()
                .unwrap();
            f.sgls[0].concat()
        };
        let mut snap = None;
        for i in 1..=N {
            put(i);
            if i == 10 {
                snap = Some(c.cont_create_snap(&coh, None).unwrap().get().unwrap());
            }
        }
        let used = || c.pool_query("tank", None).unwrap().get().unwrap().used;
        let before = used();
        // wait (bounded) for the space to come back, if it does
        let t0 = Instant::now();
        let mut after = used();
        while policy.interval.is_some()
            && after > 4 * LEN as u64
            && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(50));
            after = used();
        }
        if policy.interval.is_none() {
            std::thread::sleep(Duration::from_millis(300));
            after = used();
        }
        assert_eq!(get(None), vec![N as u8; LEN], "latest value");
        assert_eq!(get(snap), vec![10u8; LEN], "the snapshot's value");
        eprintln!(
            "aggregation {:?}: {before} bytes used after {N} overwrites, {after} after {:?}",
            policy.interval,
            t0.elapsed()
        );
        drop(c);
        eng.stop();
        (before, after)
    };
    let off = AggregationPolicy {
        interval: None,
        delay: Duration::ZERO,
    };
    let (b, a) = run(off, "127.0.0.2");
    assert!(
        b >= (N * LEN) as u64 && a == b,
        "without aggregation: {b} then {a}"
    );
    let on = AggregationPolicy {
        interval: Some(Duration::from_millis(50)),
        delay: Duration::ZERO,
    };
    let (_, a) = run(on, "127.0.0.3");
    assert!(
        a <= 4 * LEN as u64,
        "with aggregation the versions' space stays: {a} bytes used after 10 s"
    );
}
