//! A rebuild resumes where it stopped when the pool-service leader changes
//! at the same map version: three engines on 127.0.0.77–79 (in this
//! process), each hosting a replica; RP_2 keys written; rank 2 EXCLUDED by
//! hand; the leader's rebuild (throttled to 40 values/s) is interrupted by
//! stopping the leader's replica (its engine keeps serving: the map does not
//! change); the new leader takes the job up from the replicated cursor —
//! its counters go on from where they were, never back to zero — and the
//! rebuild completes: every key on both replicas of the new layout.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::client::Client;
use obj::dist::DistClient;
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::membership::DetectorConfig;
use obj::placement::{group_of, layout};
use obj::types::{ObjClass, ObjType, ObjectId};
use poolsvc::client::BlockingClient;
use poolsvc::health::MonitorConfig;
use poolsvc::rebuild::RebuildConfig;
use poolsvc::runner::{Replica, ReplicaConfig};
use poolsvc::state::{Command, RebuildStatus, Reply};

const POOL: &str = "rp";
const CONT: &str = "rc";

fn free_port(ip: &str) -> u16 {
    TcpListener::bind(format!("{ip}:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn svc(members: &BTreeMap<u64, String>) -> BlockingClient {
    let mut c = BlockingClient::new(members.clone()).unwrap();
    c.inner.deadline = Duration::from_secs(10);
    c.inner.rpc_timeout = Duration::from_millis(300);
    c
}

fn oid(lo: u64) -> ObjectId {
    ObjectId::generate(0, lo, ObjType::KvHashed, ObjClass::parse("RP_2G1").unwrap()).unwrap()
}

fn value_on(addr: &str, oid: ObjectId, key: &[u8]) -> Option<Vec<u8>> {
    let c = Client::connect(addr).unwrap();
    let poh = c.pool_connect(POOL, None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, CONT, None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    c.kv_get(&kv, key, None).unwrap().get().ok()
}

#[test]
fn a_new_leader_resumes_the_rebuild_from_the_cursor() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ips: Vec<String> = (0..3).map(|i| format!("127.0.0.{}", 77 + i)).collect();
    let engines: Vec<Engine> = (0..3)
        .map(|i| {
            let cfg = EngineConfig {
                listen: format!("{}:0", ips[i]).parse().unwrap(),
                data_dir: dirs[i].path().join("engine"),
                targets: 2,
                rdma_listen: None,
                aggregation: Default::default(),
            };
            Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
        })
        .collect();
    let addrs: Vec<String> = engines.iter().map(|e| e.addr().to_string()).collect();
    let members: BTreeMap<u64, String> = (0..3)
        .map(|i| (i as u64, format!("{}:{}", ips[i], free_port(&ips[i]))))
        .collect();
    let mut replicas: Vec<Option<Replica>> = (0..3)
        .map(|i| {
            let cfg = ReplicaConfig {
                id: i as u64,
                listen: members[&(i as u64)].clone(),
                members: members.clone(),
                initialize: i == 0,
                heartbeat_ms: 30,
                election_min_ms: 150,
                election_max_ms: 450,
                engines: (0..3).map(|r| (r as u64, addrs[r].clone())).collect(),
                monitor: MonitorConfig {
                    detector: Default::default(),
                    exclude_after: None,
                },
                rebuild: RebuildConfig {
                    rate: 40,
                    batch: 2,
                    progress_every: Duration::from_millis(50),
                    ..Default::default()
                },
                map_versions: Some(engines[i].map_versions()),
                lease: None,
            };
            Some(Replica::spawn(cfg, &dirs[i].path().join("pool_svc.redb")).unwrap())
        })
        .collect();
    DistClient::create(&addrs, POOL, 64 << 20, CONT).unwrap();
    let mut c = svc(&members);
    assert_eq!(
        c.write(Command::CreatePool {
            pool: POOL.into(),
            domains: 3,
            per_domain: 1,
        })
        .unwrap(),
        Reply::MapVersion(1)
    );
    c.write(Command::CreateCont {
        pool: POOL.into(),
        cont: CONT.into(),
        props: Default::default(),
    })
    .unwrap();
    let map = c.read().unwrap().pools[POOL].map();
    let mut dc = DistClient::connect_with_map(
        &addrs,
        POOL,
        CONT,
        Duration::from_secs(2),
        DetectorConfig::default(),
        Some(map.clone()),
    )
    .unwrap();
    // 12 objects x 10 keys; about 2/3 of them have a replica on rank 2
    let mut keys = Vec::new();
    for o in 0..12u64 {
        for k in 0..10 {
            let key = format!("k{k}");
            dc.kv_put(oid(o), key.as_bytes(), format!("v{o}.{k}").as_bytes())
                .unwrap();
            keys.push((o, key));
        }
    }
    // rank 2 out by hand (its engine keeps running: never reintegrated)
    for st in ["DOWN", "EXCLUDED"] {
        c.write(Command::SetDomainState {
            pool: POOL.into(),
            domain: 2,
            state: st.into(),
        })
        .unwrap();
    }
    let version = c.read().unwrap().pools[POOL].map().version();
    let rebuild =
        |c: &mut BlockingClient| -> RebuildStatus { c.read().unwrap().pools[POOL].rebuild.clone() };
    // wait for some progress, then stop the leader's replica
    let t = Instant::now();
    let before = loop {
        let r = rebuild(&mut c);
        if r.version == version && r.recs_copied >= 10 && r.state != "done" {
            break r;
        }
        assert!(
            r.state != "done",
            "the rebuild finished before it was interrupted: {r:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(10), "no progress: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(before.cursor.is_some(), "{before:?}");
    let leader = c
        .statuses()
        .into_values()
        .filter_map(|s| s.ok())
        .find(|s| s.role == "leader")
        .unwrap()
        .id;
    replicas[leader as usize].take().unwrap().stop();
    let mut live = members.clone();
    live.remove(&leader);
    let mut c = svc(&live);
    // the new leader's job carries on: counters never reset
    let t = Instant::now();
    let done = loop {
        let r = rebuild(&mut c);
        assert_eq!(r.version, version, "{r:?}");
        assert!(
            r.recs_copied >= before.recs_copied && r.objs_scanned >= before.objs_scanned,
            "progress went back: before the leader change {before:?}, now {r:?}"
        );
        if r.state == "done" {
            break r;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "not done: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    println!(
        "interrupted at {} values copied / {} objects scanned; done at {} / {} (resumed by replica {})",
        before.recs_copied,
        before.objs_scanned,
        done.recs_copied,
        done.objs_scanned,
        c.inner.leader().map_or("?".into(), |l| l.to_string())
    );
    let map = c.read().unwrap().pools[POOL].map();
    // each source's objects scanned once (rank 2 is not a source), plus the
    // copies a source received before it was scanned itself (a spare scanned
    // after it was filled lists them too; they are not sent again), give or
    // take the batch in flight at the stop
    let expected: u64 = (0..12u64)
        .map(|o| {
            layout(oid(o), &map.all_in()).unwrap().groups[0]
                .iter()
                .filter(|&&t| t != 2)
                .count() as u64
        })
        .sum();
    assert!(
        (expected..=expected + done.objs_copied + 2).contains(&done.objs_scanned),
        "{expected} expected; {done:?}"
    );
    for (o, key) in &keys {
        let l = layout(oid(*o), &map).unwrap();
        for &tg in &l.groups[group_of(key.as_bytes(), l.groups.len())] {
            let rank = map.target(tg).unwrap().domain as usize;
            assert_ne!(rank, 2);
            assert_eq!(
                value_on(&addrs[rank], oid(*o), key.as_bytes()),
                Some(format!("v{o}.{key}").replace(".k", ".").into_bytes()),
                "object {o} {key} on rank {rank}"
            );
        }
    }
    drop(replicas);
    drop(engines);
}
