//! Three engines on 127.0.0.51–53 (in this process), a distributed client
//! placing RP_2 / RP_3 / S1 KV objects with the pool map: values on the
//! replicas the layout names, RP_2 data readable while one engine is gone,
//! writes during the outage landing on survivor + spare, a dead engine found
//! by heartbeats within the configured bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::client::Client;
use obj::dist::DistClient;
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::membership::DetectorConfig;
use obj::placement::{layout, TargetState};
use obj::types::{ObjClass, ObjType, ObjectId, Redundancy};

fn start(dir: &std::path::Path, ip: &str) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets: 1,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn system(n: usize, base: u8) -> (Vec<tempfile::TempDir>, Vec<Option<Engine>>, Vec<String>) {
    let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    let engines: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| Some(start(d.path(), &format!("127.0.0.{}", base + i as u8))))
        .collect();
    let addrs = engines
        .iter()
        .map(|e| e.as_ref().unwrap().addr().to_string())
        .collect();
    (dirs, engines, addrs)
}

fn rp(r: u8) -> ObjClass {
    ObjClass {
        redundancy: Redundancy::Replicas(r),
        groups: 1,
    }
}

fn kv_oid(lo: u64, class: ObjClass) -> ObjectId {
    ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap()
}

fn val(o: u64, k: u32, round: u32) -> Vec<u8> {
    format!("obj {o} key {k} round {round} ")
        .repeat(1 + (k as usize % 7))
        .into_bytes()
}

/// Whether engine `addr` holds `key` of `oid` (asked directly, not through
/// placement).
fn holds(addr: &str, oid: ObjectId, key: &[u8]) -> bool {
    let c = Client::connect(addr).unwrap();
    let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    // A DTX leader commits on its followers asynchronously (DAOS's batched
    // commit): a follower asked right after the put may still hold the entry
    // prepared and answer "in progress" (a reader is told to retry). Retry
    // that answer for a while; any other answer decides.
    let t0 = Instant::now();
    loop {
        match c.kv_get(&kv, key, None).unwrap().get() {
            Err(obj::client::Error::Engine(obj::rpc::Status::InProgress))
                if t0.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            r => return r.is_ok(),
        }
    }
}

#[test]
fn rp2_survives_an_engine_and_replicas_are_where_the_layout_says() {
    let (_dirs, mut engines, addrs) = system(3, 51);
    DistClient::create(&addrs, "dp", 64 << 20, "dc").unwrap();
    let mut dc = DistClient::connect(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(2),
        DetectorConfig::default(),
    )
    .unwrap();
    assert_eq!(dc.map().version(), 1);

    // 30 RP_2 objects × 8 keys, 6 RP_3 and 6 S1 objects × 4 keys
    let mut objs: Vec<(ObjectId, u32)> = (0..30).map(|i| (kv_oid(i, rp(2)), 8)).collect();
    objs.extend((100..106).map(|i| (kv_oid(i, rp(3)), 4)));
    objs.extend((200..206).map(|i| (kv_oid(i, ObjClass::S1), 4)));
    for &(o, n) in &objs {
        for k in 0..n {
            dc.kv_put(o, format!("k{k}").as_bytes(), &val(o.lo, k, 0))
                .unwrap();
        }
    }
    // every replica the layout names has the value, and no other engine
    let map = dc.map().clone();
    let mut on_engine1 = 0;
    for &(o, _) in &objs {
        let l = layout(o, &map).unwrap();
        let ranks: Vec<usize> = l.groups[0]
            .iter()
            .map(|&t| map.target(t).unwrap().domain as usize)
            .collect();
        let want = match o.class().unwrap().redundancy {
            Redundancy::Replicas(r) => r as usize,
            _ => 1,
        };
        assert_eq!(ranks.len(), want);
        for (r, a) in addrs.iter().enumerate() {
            assert_eq!(holds(a, o, b"k0"), ranks.contains(&r), "{o} on engine {r}");
        }
        if o.class().unwrap() == rp(2) && ranks.contains(&1) {
            on_engine1 += 1;
        }
    }
    assert!(
        on_engine1 > 3,
        "engine 1 holds too few RP_2 objects to test"
    );

    // engine 1 goes away; every RP_2 / RP_3 value still reads, S1 ones on
    // engine 1 are lost (no redundancy), the rest read
    engines[1].take().unwrap().stop();
    let t0 = Instant::now();
    for &(o, n) in &objs {
        for k in 0..n {
            let got = dc.kv_get(o, format!("k{k}").as_bytes());
            let class = o.class().unwrap();
            let was_on_1 = layout(o, &map)
                .unwrap()
                .shards()
                .any(|t| map.target(t).unwrap().domain == 1);
            if class == ObjClass::S1 && was_on_1 {
                assert!(got.is_err(), "{o}: S1 value on a dead engine read back");
            } else {
                assert_eq!(got.unwrap(), val(o.lo, k, 0), "{o} k{k}");
            }
        }
    }
    println!(
        "reads of {} keys during the outage (incl. detection on first failure): {:?}",
        objs.iter().map(|o| o.1).sum::<u32>(),
        t0.elapsed()
    );
    assert_eq!(
        dc.map().target(1).unwrap().state,
        TargetState::Down,
        "the failed engine is DOWN in the client's map"
    );
    assert!(dc.map().version() > 1);

    // writes during the outage: RP_2 goes to the survivor + a spare (distinct
    // engines), and reads back
    for &(o, _) in objs.iter().take(30) {
        dc.kv_put(o, b"during", &val(o.lo, 99, 1)).unwrap();
        let l = layout(o, dc.map()).unwrap();
        assert_eq!(l.groups[0].len(), 2);
        assert!(!l.groups[0].contains(&1));
        for &t in &l.groups[0] {
            assert!(holds(&addrs[t as usize], o, b"during"), "{o} on {t}");
        }
        assert_eq!(dc.kv_get(o, b"during").unwrap(), val(o.lo, 99, 1));
        // the old value too (from the surviving original replica)
        assert_eq!(dc.kv_get(o, b"k1").unwrap(), val(o.lo, 1, 0));
    }
}

/// Every original replica of an RP_2 object out (DOWN in the client's map;
/// the engines keep running, as when the pool service marked them DOWN), the
/// spare not rebuilt: a key written before reads as `Unavailable`, never
/// `NonExist` or empty (the spare has nothing for it), and a write is
/// `Unavailable` too (the spare is not complete). Once the rebuild view says
/// the spare was filled (a completed rebuild's map), its "nothing" is an
/// answer (`NonExist`) and writes go there. A target still being filled is
/// not complete.
#[test]
fn every_original_replica_out_reads_unavailable_not_nonexist() {
    use obj::client::kv::KV_AKEY;
    use obj::dist::{Error as DistError, RebuildView};
    use obj::types::Iod;
    let (_dirs, _engines, addrs) = system(3, 61);
    DistClient::create(&addrs, "dp", 16 << 20, "dc").unwrap();
    let mut dc = DistClient::connect(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(2),
        DetectorConfig::default(),
    )
    .unwrap();
    let o = kv_oid(7, rp(2));
    let orig: Vec<u32> = layout(o, dc.map()).unwrap().groups[0].clone();
    dc.kv_put(o, b"old", b"before").unwrap();
    for &t in &orig {
        dc.mark_down(t as usize).unwrap();
    }
    let spare = layout(o, dc.map()).unwrap().groups[0]
        .iter()
        .copied()
        .find(|t| !orig.contains(t))
        .expect("a spare");
    let unavailable =
        |r: Result<Vec<u8>, DistError>| matches!(r, Err(DistError::Unavailable { .. }));
    match dc.kv_get(o, b"old") {
        Err(DistError::Unavailable { oid }) => assert_eq!(oid, o),
        r => panic!("a key written before, every original replica out: {r:?}"),
    }
    let f = dc.fetch(o, b"old", &[Iod::single(KV_AKEY, 0)]);
    assert!(
        matches!(f, Err(DistError::Unavailable { .. })),
        "fetch: {f:?}"
    );
    // nor is it written: the spare would take it and the originals, when
    // they return, never read a spare
    match dc.kv_put(o, b"new", b"during") {
        Err(DistError::Unavailable { .. }) => {}
        r => panic!("a write with every original replica out: {r:?}"),
    }
    assert!(!holds(&addrs[spare as usize], o, b"new"));
    assert!(unavailable(dc.kv_get(o, b"never")));

    // a rebuild fills the spare (here by hand) and completes at this map
    {
        let c = Client::connect(&addrs[spare as usize]).unwrap();
        let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
        let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
        let kv = c.kv_open(&coh, o, None).unwrap().get().unwrap();
        c.kv_put(&kv, b"old", b"before", None)
            .unwrap()
            .get()
            .unwrap();
    }
    let rebuilt = dc.map().clone();
    // still being filled (pass 2 of a job): not complete yet
    dc = dc.with_rebuild_view(RebuildView {
        base: Some(rebuilt.clone()),
        filling: vec![spare],
        ..Default::default()
    });
    assert!(unavailable(dc.kv_get(o, b"never")));
    // nor read at all: its value may be one a write it missed replaced
    assert!(unavailable(dc.kv_get(o, b"old")));
    // the pool service marked the container's redundancy lost (both
    // original replicas out at once, rebuilt from nothing): its I/O is
    // refused, not answered "not found"
    dc = dc.with_rebuild_view(RebuildView {
        base: Some(rebuilt.clone()),
        redundancy_lost: vec!["dc".into()],
        ..Default::default()
    });
    for r in [
        dc.kv_get(o, b"never").map(|_| ()),
        dc.kv_put(o, b"x", b"y").map(|_| ()),
        dc.fetch(o, b"old", &[Iod::single(KV_AKEY, 0)]).map(|_| ()),
        dc.list_dkeys(o, None, &obj::types::Anchor::default(), 8)
            .map(|_| ()),
    ] {
        assert!(
            matches!(&r, Err(DistError::RedundancyLost { pool, cont }) if pool == "dp" && cont == "dc"),
            "{r:?}"
        );
    }
    dc = dc.with_rebuild_view(RebuildView {
        base: Some(rebuilt),
        filling: Vec::new(),
        ..Default::default()
    });
    assert_eq!(dc.kv_get(o, b"old").unwrap(), b"before");
    // complete: written again, and read back from it
    dc.kv_put(o, b"new", b"after").unwrap();
    assert!(holds(&addrs[spare as usize], o, b"new"));
    assert_eq!(dc.kv_get(o, b"new").unwrap(), b"after");
    match dc.kv_get(o, b"never") {
        Err(DistError::Engine { source, .. })
            if source.status() == Some(obj::rpc::Status::NonExist) => {}
        r => panic!("a rebuilt spare's nothing is NonExist: {r:?}"),
    }
}

/// Rebuild copies carry their source epoch: a destination that took a newer
/// client write keeps it visible (the copy is stored under it), one with an
/// older version gets the source's at the source's epoch; an update at an
/// epoch in the engine's future is refused. (The copy before this overwrote
/// the newer write: the soak's stale reads with `--return-from-down`.)
#[test]
fn rebuild_copies_carry_their_source_epoch() {
    use obj::client::ObjHandle;
    use obj::rebuild::{copy_dkey, Side};
    use obj::types::{DKey, Epoch, Iod, Recx, SgList};
    let (_dirs, _engines, addrs) = system(2, 64);
    DistClient::create(&addrs, "dp", 16 << 20, "dc").unwrap();
    let side = |a: &str| {
        let c = Client::connect(a).unwrap();
        let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
        let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
        (c, coh)
    };
    let ((c1, h1), (c2, h2)) = (side(&addrs[0]), side(&addrs[1]));
    let o = ObjectId::generate(0, 9, ObjType::MultiHashed, rp(2)).unwrap();
    let (o1, o2) = (
        ObjHandle {
            coh: h1.coh,
            oid: o,
        },
        ObjHandle {
            coh: h2.coh,
            oid: o,
        },
    );
    let d = DKey(b"d".to_vec());
    let put = |c: &Client, oh: &ObjHandle, iod: Iod, v: &[u8]| {
        c.obj_update(oh, &d, &[iod], &[SgList::one(v.to_vec())], None)
            .unwrap()
            .get()
            .unwrap()
    };
    let arr = |idx, nr| Iod::array("a", 1, vec![Recx { idx, nr }]);
    let get = |c: &Client, oh: &ObjHandle, iod: Iod, at: Option<Epoch>| {
        c.obj_fetch(oh, at, &d, &[iod], Vec::new(), None)
            .unwrap()
            .get()
            .unwrap()
            .sgls[0]
            .concat()
    };
    // the destination has an older "t"; the source's is newer
    put(&c2, &o2, Iod::single("t", 5), b"t-old");
    // the source: "s" and an array, then "t"
    let e_s = put(&c1, &o1, Iod::single("s", 6), b"s-copy");
    let e_a = put(&c1, &o1, arr(0, 8), b"AAAAAAAA");
    let e_t = put(&c1, &o1, Iod::single("t", 5), b"t-new");
    // a client writes "s" and half the array on the destination after the
    // source's versions (the race: between the copy's read and its write)
    let e_c = put(&c2, &o2, Iod::single("s", 8), b"s-client");
    put(&c2, &o2, arr(4, 4), b"BBBB");
    assert!(e_c > e_s && e_c > e_a);
    let es = c1
        .obj_fetch_epochs(&o1, None, &d, &[Iod::single("s", 0), arr(0, 8)], None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(es, vec![e_s, e_a], "the fetch reports each version's epoch");
    let none = c1
        .obj_fetch_epochs(&o1, None, &d, &[Iod::single("nothing", 0)], None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(none, vec![Epoch(0)]);

    let (src, dst) = (
        Side {
            client: &c1,
            coh: &h1,
        },
        Side {
            client: &c2,
            coh: &h2,
        },
    );
    copy_dkey(&src, &dst, o, &d).unwrap();
    assert_eq!(
        get(&c2, &o2, Iod::single("s", 0), None),
        b"s-client",
        "a copy hid a newer client write"
    );
    assert_eq!(
        get(&c2, &o2, arr(0, 8), None),
        b"AAAABBBB",
        "the copy's extent is under the client's newer records"
    );
    assert_eq!(get(&c2, &o2, Iod::single("t", 0), None), b"t-new");
    let et = c2
        .obj_fetch_epochs(&o2, None, &d, &[Iod::single("t", 0)], None)
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(et, vec![e_t], "copied at the source's epoch");
    // an update in the engine's future is refused (it would push the clock)
    let far = Epoch(e_t.0 + (60u64 << 30));
    let r = c2
        .obj_update_at(
            &o2,
            far,
            &d,
            &[Iod::single("u", 1)],
            &[SgList::one(b"x".to_vec())],
            None,
        )
        .unwrap()
        .get();
    assert_eq!(r.unwrap_err().status(), Some(obj::rpc::Status::Invalid));
}

#[test]
fn heartbeats_find_a_dead_engine_within_the_bound() {
    let (_dirs, mut engines, addrs) = system(3, 55);
    DistClient::create(&addrs, "dp", 16 << 20, "dc").unwrap();
    let cfg = DetectorConfig {
        interval: Duration::from_millis(50),
        suspect_after: Duration::from_millis(150),
        dead_after: Duration::from_millis(400),
    };
    let mut dc = DistClient::connect(&addrs, "dp", "dc", Duration::from_millis(200), cfg).unwrap();
    // a healthy period: nobody is marked down
    let until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < until {
        assert!(dc.heartbeat(Instant::now()).unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(10));
    }
    // from the moment the engine starts going away (stop closes its
    // connections, then joins its threads)
    let killed = Instant::now();
    engines[2].take().unwrap().stop();
    let detected = loop {
        let down = dc.heartbeat(Instant::now()).unwrap();
        if !down.is_empty() {
            assert_eq!(down, vec![2]);
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(5), "never detected");
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("dead engine detected after {detected:?} (bound: dead_after 400 ms + interval 50 ms + a ping timeout 200 ms)");
    // the bound: dead_after + interval + one probe's timeout, plus scheduling
    // slack on a loaded machine
    assert!(
        detected <= Duration::from_millis(400 + 50 + 200 + 500),
        "{detected:?}"
    );
    assert_eq!(dc.map().target(2).unwrap().state, TargetState::Down);
    assert_eq!(dc.map().target(0).unwrap().state, TargetState::UpIn);
}

fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value (plain integers).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Aggregate KV put bandwidth with 1, 2, 4 engines (S1 objects, 64 KiB values,
/// 3 client threads each with its own `DistClient`), next to the CPU time per
/// GiB of the whole process (clients + engines: all in this process).
/// `BENCH_ENGINES=1,2,3` picks other counts.
/// `cargo test -p obj --release --test dist_e2e -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_aggregate_put_bandwidth() {
    const VALUE: usize = 64 << 10;
    const PER_THREAD: u64 = 256; // 16 MiB per thread, 48 MiB per run
    let counts: Vec<usize> = std::env::var("BENCH_ENGINES")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("BENCH_ENGINES: counts, comma-separated")
        })
        .collect();
    for n in counts {
        assert!((1..=8).contains(&n), "1 to 8 engines");
        let (_dirs, _engines, addrs) = system(n, 60 + 5 * n as u8);
        DistClient::create(&addrs, "dp", 256 << 20, "dc").unwrap();
        let (t0, c0) = (Instant::now(), cpu_time());
        std::thread::scope(|s| {
            for th in 0..3u64 {
                let addrs = addrs.clone();
                s.spawn(move || {
                    let mut dc = DistClient::connect(
                        &addrs,
                        "dp",
                        "dc",
                        Duration::from_secs(10),
                        DetectorConfig::default(),
                    )
                    .unwrap();
                    let v = vec![th as u8; VALUE];
                    for i in 0..PER_THREAD {
                        dc.kv_put(kv_oid(th * 1_000_000 + i, ObjClass::S1), b"v", &v)
                            .unwrap();
                    }
                });
            }
        });
        let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
        let gib = (3 * PER_THREAD * VALUE as u64) as f64 / f64::from(1u32 << 30);
        println!(
            "{n} engine(s): {:.1} MiB/s aggregate put ({} x 64 KiB S1 values, 3 clients), CPU {:.2} s per GiB (wall {:.2} s)",
            gib * 1024.0 / wall.as_secs_f64(),
            3 * PER_THREAD,
            cpu.as_secs_f64() / gib,
            wall.as_secs_f64()
        );
    }
}
