//! Engines refuse stale-map requests (DAOS `DER_STALE`), end to end in one
//! process: three object engines on 127.0.0.74–76, each hosting a pool-service
//! replica wired to the engine's map versions. Rank 2 is taken out of the
//! pool (DOWN, then EXCLUDED) through the pool service; clients still holding
//! the version-1 map are refused by the engines, fetch the map from the
//! service, re-place and retry: the write lands on the new placement (and
//! not on the excluded engine), the read returns the new value (not the
//! excluded engine's old one). A client with no map source gets the typed
//! refusal. A request without a map version (an old client) is served.
//! Second test: the same through the pool-service leader's health monitor —
//! engine 2 stopped, marked DOWN then EXCLUDED by the leader; a client still
//! at version 1 loses rank 2 at the transport level, is refused by a
//! survivor, refreshes and writes the new placement.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::client::Client;
use obj::dist::{DistClient, Error as DistError, MapSource};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::membership::DetectorConfig;
use obj::placement::{group_of, layout, PoolMap};
use obj::types::{ObjClass, ObjType, ObjectId, Redundancy};
use poolsvc::client::BlockingClient;
use poolsvc::health::MonitorConfig;
use poolsvc::runner::{Replica, ReplicaConfig};
use poolsvc::state::{Command, Reply};

const POOL: &str = "sp";
const CONT: &str = "sc";

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
    c
}

fn svc_map(members: &BTreeMap<u64, String>) -> PoolMap {
    svc(members).read().unwrap().pools[POOL].map()
}

fn source(members: &BTreeMap<u64, String>) -> MapSource {
    let mut c = svc(members);
    Box::new(move || {
        let st = c.read().map_err(|e| e.to_string())?;
        st.pools
            .get(POOL)
            .map(|p| p.map())
            .ok_or_else(|| "no pool".to_string())
    })
}

/// `key` of `oid` as engine `addr` has it, asked without a map version.
fn value_on(addr: &str, oid: ObjectId, key: &[u8]) -> Option<Vec<u8>> {
    let c = Client::connect(addr).unwrap();
    let poh = c.pool_connect(POOL, None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, CONT, None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    // a replica whose DTX commit has not landed yet holds the key (the put
    // was acknowledged by the leader): a reader retries, as DistClient does
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match c.kv_get(&kv, key, None).unwrap().get() {
            Err(e)
                if e.status() == Some(obj::rpc::Status::InProgress)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(1))
            }
            r => return r.ok(),
        }
    }
}

/// Waits until every engine's replica has applied map version `v`.
fn wait_version(engines: &[&Engine], v: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while engines
        .iter()
        .any(|e| e.map_versions().get(POOL) != Some(v))
    {
        assert!(
            Instant::now() < deadline,
            "engines did not reach map version {v}: {:?}",
            engines
                .iter()
                .map(|e| e.map_versions().get(POOL))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct System {
    dirs: Vec<tempfile::TempDir>,
    engines: Vec<Option<Engine>>,
    addrs: Vec<String>,
    members: BTreeMap<u64, String>,
    replicas: Vec<Option<Replica>>,
    cfgs: Vec<ReplicaConfig>,
}

impl System {
    fn live(&self) -> Vec<&Engine> {
        self.engines.iter().flatten().collect()
    }
}

/// Three engines on 127.0.0.`base`.. each hosting a replica wired to its map
/// versions; the pool and container on every engine and in the service (v1).
fn system(base: u8, monitor: Option<MonitorConfig>) -> System {
    system_with(base, monitor, None)
}

/// [`system`], the engines fenced by a lease of `lease` when given.
fn system_with(base: u8, monitor: Option<MonitorConfig>, lease: Option<Duration>) -> System {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ips: Vec<String> = (0..3).map(|i| format!("127.0.0.{}", base + i)).collect();
    let engines: Vec<Engine> = (0..3)
        .map(|i| {
            let cfg = EngineConfig {
                listen: format!("{}:0", ips[i]).parse().unwrap(),
                data_dir: dirs[i].path().join("engine"),
                targets: 1,
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
    let cfgs: Vec<ReplicaConfig> = (0..3)
        .map(|i| ReplicaConfig {
            id: i as u64,
            listen: members[&(i as u64)].clone(),
            members: members.clone(),
            initialize: i == 0,
            heartbeat_ms: 30,
            election_min_ms: 150,
            election_max_ms: 450,
            engines: match monitor {
                Some(_) => (0..3).map(|r| (r as u64, addrs[r].clone())).collect(),
                None => BTreeMap::new(),
            },
            monitor: monitor.unwrap_or(MonitorConfig {
                detector: Default::default(),
                exclude_after: None,
            }),
            rebuild: poolsvc::rebuild::RebuildConfig::off(),
            map_versions: Some(engines[i].map_versions()),
            lease,
        })
        .collect();
    let replicas: Vec<Option<Replica>> = (0..3)
        .map(|i| {
            Some(Replica::spawn(cfgs[i].clone(), &dirs[i].path().join("pool_svc.redb")).unwrap())
        })
        .collect();
    DistClient::create(&addrs, POOL, 64 << 20, CONT).unwrap();
    assert_eq!(
        svc(&members)
            .write(Command::CreatePool {
                pool: POOL.into(),
                domains: 3,
                per_domain: 1,
            })
            .unwrap(),
        Reply::MapVersion(1)
    );
    let sys = System {
        dirs,
        engines: engines.into_iter().map(Some).collect(),
        addrs,
        members,
        replicas,
        cfgs,
    };
    wait_version(&sys.live(), 1);
    sys
}

fn ranks_of(map: &PoolMap, oid: ObjectId, key: &[u8]) -> Vec<usize> {
    let l = layout(oid, map).unwrap();
    l.groups[group_of(key, l.groups.len())]
        .iter()
        .map(|&t| map.target(t).unwrap().domain as usize)
        .collect()
}

/// An RP_2 object whose replicas of `key` under `map` include rank 2.
fn object_on_rank2(map: &PoolMap, key: &[u8]) -> (ObjectId, Vec<usize>) {
    let class = ObjClass {
        redundancy: Redundancy::Replicas(2),
        groups: 1,
    };
    (0..1000u64)
        .find_map(|lo| {
            let oid = ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap();
            let ranks = ranks_of(map, oid, key);
            ranks.contains(&2).then_some((oid, ranks))
        })
        .unwrap()
}

fn client_at(sys: &System, map: &PoolMap, src: Option<MapSource>) -> DistClient {
    let dc = DistClient::connect_with_map(
        &sys.addrs,
        POOL,
        CONT,
        Duration::from_secs(2),
        DetectorConfig::default(),
        Some(map.clone()),
    )
    .unwrap();
    match src {
        Some(s) => dc.with_map_source(s),
        None => dc,
    }
}

#[test]
fn stale_map_is_refused_and_the_client_refreshes_and_retries() {
    let sys = system(74, None);
    let (addrs, members) = (&sys.addrs, &sys.members);
    let engines = sys.live();
    let mut c = svc(members);
    let v1 = svc_map(members);
    assert_eq!(v1.version(), 1);
    let key = b"k".as_slice();
    let (oid, old_ranks) = object_on_rank2(&v1, key);
    // clients built from the version-1 map: A writes, B reads, C has no source
    let connect = |src: Option<MapSource>| client_at(&sys, &v1, src);
    let mut a = connect(Some(source(members)));
    let mut b = connect(Some(source(members)));
    let mut no_src = connect(None);
    assert_eq!(a.sent_map_version(), Some(1));
    a.kv_put(oid, key, b"old").unwrap();
    assert_eq!(a.refreshes(), 0, "a current map is not refused");
    for &r in &old_ranks {
        assert_eq!(value_on(&addrs[r], oid, key).as_deref(), Some(&b"old"[..]));
    }

    // rank 2 leaves the pool: DOWN (v2), then EXCLUDED (v3)
    for (state, v) in [("DOWN", 2), ("EXCLUDED", 3)] {
        assert_eq!(
            c.write(Command::SetDomainState {
                pool: POOL.into(),
                domain: 2,
                state: state.into(),
            })
            .unwrap(),
            Reply::MapVersion(v)
        );
    }
    wait_version(&engines, 3);
    let v3 = svc_map(members);
    let new_ranks = ranks_of(&v3, oid, key);
    assert!(!new_ranks.contains(&2), "{new_ranks:?}");
    let refused_before: u64 = engines.iter().map(|e| e.map_versions().refused()).sum();

    // A (version 1) writes: refused, refreshes to 3, lands on the new placement
    a.kv_put(oid, key, b"new").unwrap();
    assert_eq!(a.refreshes(), 1);
    assert_eq!(a.sent_map_version(), Some(3));
    assert_eq!(a.map().version(), 3);
    for &r in &new_ranks {
        assert_eq!(
            value_on(&addrs[r], oid, key).as_deref(),
            Some(&b"new"[..]),
            "rank {r} of the new placement {new_ranks:?}"
        );
    }
    // the excluded engine did not take it (it refused, or was not asked)
    assert_eq!(value_on(&addrs[2], oid, key).as_deref(), Some(&b"old"[..]));
    let refused_after_a: u64 = engines.iter().map(|e| e.map_versions().refused()).sum();
    assert!(refused_after_a > refused_before, "an engine refused A");

    // B (version 1) reads: refused, refreshes, reads the new value (with its
    // old map it would have asked rank 2 first or second: the old value there)
    assert_eq!(b.kv_get(oid, key).unwrap(), b"new");
    assert_eq!(b.refreshes(), 1);
    assert_eq!(b.sent_map_version(), Some(3));

    // C (version 1, no map source): the typed refusal
    match no_src.kv_put(oid, key, b"lost") {
        Err(DistError::StaleMap { engine, ours, .. }) => {
            assert_eq!((engine, ours), (3, 1));
        }
        other => panic!("want StaleMap, got {other:?}"),
    }
    assert_eq!(
        value_on(&addrs[new_ranks[0]], oid, key).as_deref(),
        Some(&b"new"[..])
    );

    // A again: current now, nothing refused
    let before = engines
        .iter()
        .map(|e| e.map_versions().refused())
        .sum::<u64>();
    a.kv_put(oid, key, b"newer").unwrap();
    assert_eq!(b.kv_get(oid, key).unwrap(), b"newer");
    assert_eq!(
        engines
            .iter()
            .map(|e| e.map_versions().refused())
            .sum::<u64>(),
        before
    );
    assert_eq!((a.refreshes(), b.refreshes()), (1, 1));
}

#[test]
fn engines_refuse_after_the_monitor_excludes_a_dead_engine() {
    let monitor = MonitorConfig {
        detector: DetectorConfig {
            interval: Duration::from_millis(50),
            suspect_after: Duration::from_millis(150),
            dead_after: Duration::from_millis(300),
        },
        exclude_after: Some(Duration::from_millis(300)),
    };
    let mut sys = system(77, Some(monitor));
    let v1 = svc_map(&sys.members);
    let key = b"m".as_slice();
    let (oid, _) = object_on_rank2(&v1, key);
    let mut a = client_at(&sys, &v1, Some(source(&sys.members)));
    a.kv_put(oid, key, b"old").unwrap();

    // engine 2 stops (its replica keeps running): the leader's monitor marks
    // it DOWN, then EXCLUDED
    drop(sys.engines[2].take());
    let deadline = Instant::now() + Duration::from_secs(15);
    let excluded = loop {
        let m = svc_map(&sys.members);
        if m.target(2).unwrap().state.name() == "EXCLUDED" {
            break m;
        }
        assert!(Instant::now() < deadline, "rank 2 not excluded: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    wait_version(&sys.live(), excluded.version());
    let new_ranks = ranks_of(&excluded, oid, key);
    assert!(!new_ranks.contains(&2));

    // A (version 1): rank 2 gone at the transport level, a survivor refuses
    // the old map, A refreshes and writes the new placement
    a.kv_put(oid, key, b"new").unwrap();
    assert_eq!(a.refreshes(), 1);
    assert_eq!(a.sent_map_version(), Some(excluded.version()));
    for &r in &new_ranks {
        assert_eq!(
            value_on(&sys.addrs[r], oid, key).as_deref(),
            Some(&b"new"[..]),
            "rank {r} of {new_ranks:?}"
        );
    }
    assert_eq!(a.kv_get(oid, key).unwrap(), b"new");
    assert!(
        sys.live()
            .iter()
            .map(|e| e.map_versions().refused())
            .sum::<u64>()
            >= 1
    );
}

/// What a refusal costs: a put sent with a map one version old (refused,
/// map fetched from the service, retried) against the next put with the
/// current map, same client, same key. Rank 2 is toggled DOWN / UP-IN in the
/// service to make each new version. Prints median and spread.
#[test]
#[ignore]
fn bench_stale_refresh_cost() {
    let sys = system(80, None);
    let mut c = svc(&sys.members);
    let key = b"b".as_slice();
    let v1 = svc_map(&sys.members);
    let (oid, _) = object_on_rank2(&v1, key);
    let (mut stale, mut fresh) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let old = svc_map(&sys.members);
        let state = if i % 2 == 0 { "DOWN" } else { "UP-IN" };
        let r = c
            .write(Command::SetDomainState {
                pool: POOL.into(),
                domain: 2,
                state: state.into(),
            })
            .unwrap();
        assert_eq!(r, Reply::MapVersion(old.version() + 1));
        wait_version(&sys.live(), old.version() + 1);
        let mut a = client_at(&sys, &old, Some(source(&sys.members)));
        let t = Instant::now();
        a.kv_put(oid, key, b"x").unwrap();
        stale.push(t.elapsed());
        assert_eq!(a.refreshes(), 1);
        let t = Instant::now();
        a.kv_put(oid, key, b"y").unwrap();
        fresh.push(t.elapsed());
        assert_eq!(a.refreshes(), 1);
    }
    let stats = |v: &mut Vec<Duration>| {
        v.sort();
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (sm, smin, smax) = stats(&mut stale);
    let (fm, fmin, fmax) = stats(&mut fresh);
    println!(
        "put refused+refreshed+retried: median {sm:?} ({smin:?}..{smax:?}); \
         put with the current map: median {fm:?} ({fmin:?}..{fmax:?}); ratio of medians {:.1}",
        sm.as_secs_f64() / fm.as_secs_f64()
    );
}

/// A refreshed map in which an engine the client had no connection to
/// serves again (set UP-IN in the service): the client connects to it and
/// the retried write lands on it too.
#[test]
fn refresh_connects_to_an_engine_serving_again() {
    let sys = system(83, None);
    let mut c = svc(&sys.members);
    let key = b"u".as_slice();
    let v1 = svc_map(&sys.members);
    let (oid, ranks) = object_on_rank2(&v1, key);
    let set = |c: &mut BlockingClient, state: &str| {
        c.write(Command::SetDomainState {
            pool: POOL.into(),
            domain: 2,
            state: state.into(),
        })
        .unwrap()
    };
    assert_eq!(set(&mut c, "DOWN"), Reply::MapVersion(2));
    wait_version(&sys.live(), 2);
    let v2 = svc_map(&sys.members);
    // built from v2: rank 2 is DOWN there, so not connected
    let mut a = client_at(&sys, &v2, Some(source(&sys.members)));
    assert_eq!(set(&mut c, "UP-IN"), Reply::MapVersion(3));
    wait_version(&sys.live(), 3);
    a.kv_put(oid, key, b"back").unwrap();
    assert_eq!(a.refreshes(), 1);
    assert!(a.map().target(2).unwrap().state.is_serving());
    for &r in &ranks {
        assert_eq!(
            value_on(&sys.addrs[r], oid, key).as_deref(),
            Some(&b"back"[..]),
            "rank {r} of {ranks:?}"
        );
    }
}

/// The fence (issue 13): a follower engine's pool-service replica stopped (the engine
/// keeps serving object RPCs, as when only its pool-service link is cut):
/// once its lease lapses it refuses versioned reads and writes as a stale
/// map with a version not newer than the client's; a client at the current
/// map reads from another replica and writes through another DTX leader
/// (the fenced engine, reachable by its peers, still takes the update as a
/// follower); a request without a map version is served (no pool service,
/// no fence); the replica restarted → the lease is renewed and the engine
/// serves again. Without a lease (the other tests) nothing of this happens.
#[test]
fn a_fenced_engine_refuses_and_clients_go_elsewhere() {
    let lease = Duration::from_millis(300);
    let mut sys = system_with(160, None, Some(lease));
    let valid = |sys: &System, r: usize| {
        sys.engines[r]
            .as_ref()
            .unwrap()
            .map_versions()
            .lease_valid(Instant::now())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while (0..3).any(|r| valid(&sys, r) != Some(true)) {
        assert!(Instant::now() < deadline, "leases not renewed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let v1 = svc_map(&sys.members);
    // a follower of the pool service (stopping the leader's replica would
    // leave every engine without a leader for an election)
    let leader = svc(&sys.members)
        .statuses()
        .into_values()
        .flatten()
        .find(|s| s.role == "leader")
        .map(|s| s.id as usize)
        .expect("a leader");
    let f = (0..3).rev().find(|r| *r != leader).unwrap();
    // an RP_3 object whose first replica (read first, leads its DTX) is f
    let class = ObjClass {
        redundancy: Redundancy::Replicas(3),
        groups: 1,
    };
    let key = b"f".as_slice();
    let oid = (0..1000u64)
        .map(|lo| ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap())
        .find(|oid| ranks_of(&v1, *oid, key)[0] == f)
        .unwrap();
    let mut a = client_at(&sys, &v1, Some(source(&sys.members)));
    a.kv_put(oid, key, b"one").unwrap();
    assert_eq!(a.kv_get(oid, key).unwrap(), b"one");
    assert_eq!(a.fenced_refusals(), 0);

    // engine f loses its pool service
    sys.replicas[f].take().unwrap().stop();
    let t = Instant::now();
    while valid(&sys, f) != Some(false) {
        assert!(t.elapsed() < lease * 3, "engine {f}'s lease did not lapse");
        std::thread::sleep(Duration::from_millis(10));
    }
    let lapsed_after = t.elapsed();
    // refused directly, reads and writes, with the current map
    let c = Client::connect(&sys.addrs[f]).unwrap();
    c.set_map_version(Some(v1.version()));
    let poh = c.pool_connect(POOL, None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, CONT, None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    match c.kv_get(&kv, key, None).unwrap().get() {
        Err(obj::client::Error::StaleMap { version }) => assert_eq!(version, v1.version()),
        r => panic!("a fenced engine served a read: {r:?}"),
    }
    match c.kv_put(&kv, b"g", b"x", None).unwrap().get() {
        Err(obj::client::Error::StaleMap { .. }) => {}
        r => panic!("a fenced engine took a write: {r:?}"),
    }
    // without a map version: not checked (no fence for unversioned clients)
    assert_eq!(
        value_on(&sys.addrs[f], oid, key).as_deref(),
        Some(&b"one"[..])
    );
    let fenced_before = sys.engines[f].as_ref().unwrap().map_versions().fenced();
    assert!(fenced_before >= 2);

    // the client goes elsewhere: reads from rank 0/1, writes led by them
    assert_eq!(a.kv_get(oid, key).unwrap(), b"one");
    assert!(a.fenced_refusals() >= 1);
    a.kv_put(oid, key, b"two").unwrap();
    assert!(a.fenced_refusals() >= 2);
    assert_eq!(a.kv_get(oid, key).unwrap(), b"two");
    assert_eq!(
        a.sent_map_version(),
        Some(v1.version()),
        "the map did not change"
    );
    for r in 0..3 {
        assert_eq!(
            value_on(&sys.addrs[r], oid, key).as_deref(),
            Some(&b"two"[..]),
            "rank {r}: the DTX reached every replica, the fenced one as a follower"
        );
    }

    // the replica back: the lease renewed, engine 2 serves again
    sys.replicas[f] = Some(
        Replica::spawn(
            sys.cfgs[f].clone(),
            &sys.dirs[f].path().join("pool_svc.redb"),
        )
        .unwrap(),
    );
    let t = Instant::now();
    while valid(&sys, f) != Some(true) {
        assert!(t.elapsed() < Duration::from_secs(10), "lease not renewed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.kv_get(&kv, key, None).unwrap().get().unwrap(), b"two");
    let n = a.fenced_refusals();
    let mut b = client_at(&sys, &v1, Some(source(&sys.members)));
    assert_eq!(b.kv_get(oid, key).unwrap(), b"two");
    assert_eq!((a.fenced_refusals(), b.fenced_refusals()), (n, 0));
    eprintln!("engine {f} fenced {lapsed_after:?} after its replica stopped (lease {lease:?})");
}

/// The DTX leader places the write with its own pool map (issue 13): a
/// client's participant list that leaves out a replica serving in the
/// engine's map — an old client, or one that made its own map and marked a
/// live engine DOWN — is refused as a stale map with the engine's version,
/// and nothing is written; the list the map gives is taken, whichever of
/// its members leads. Before, the leader trusted the list: the write
/// committed on the other replica alone.
#[test]
fn dtx_leader_refuses_participants_that_leave_out_a_serving_replica() {
    let sys = system(164, None);
    let (addrs, members) = (&sys.addrs, &sys.members);
    let v1 = svc_map(members);
    let key = b"k".as_slice();
    let (oid, ranks) = object_on_rank2(&v1, key);
    let (a, b) = (ranks[0], ranks[1]);
    let spare = (0..3).find(|r| !ranks.contains(r)).unwrap();
    let rep = |r: usize| (r as u32, addrs[r].clone());
    let op = |v: &[u8]| obj::dtx_op::DtxOp::Update {
        dkey: key.to_vec(),
        iods: vec![obj::types::Iod::single(
            obj::client::kv::KV_AKEY,
            v.len() as u64,
        )],
        data: vec![v.to_vec()],
    };
    let raw = |leader: usize, version: Option<u32>| {
        let c = Client::connect(&addrs[leader]).unwrap();
        let poh = c.pool_connect(POOL, None).unwrap().get().unwrap();
        let coh = c.cont_open(&poh, CONT, None).unwrap().get().unwrap();
        let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
        c.set_map_version(version);
        (c, kv)
    };
    // the list the map gives: committed, either member leading
    for (leader, list) in [(a, vec![rep(a), rep(b)]), (b, vec![rep(b), rep(a)])] {
        let (c, kv) = raw(leader, Some(1));
        c.obj_dtx(&kv.oh, POOL, CONT, &op(b"v1"), &list, None)
            .unwrap()
            .get()
            .unwrap();
    }
    for r in [a, b] {
        assert_eq!(value_on(&addrs[r], oid, key).as_deref(), Some(&b"v1"[..]));
    }
    // b left out (with the current version, without one, with the spare
    // instead): refused with the engine's version, written nowhere
    for (version, list) in [
        (Some(1), vec![rep(a)]),
        (None, vec![rep(a)]),
        (None, vec![rep(a), rep(spare)]),
        (Some(1), vec![rep(a), rep(b), rep(spare)]),
    ] {
        let (c, kv) = raw(a, version);
        match c
            .obj_dtx(&kv.oh, POOL, CONT, &op(b"around"), &list, None)
            .unwrap()
            .get()
        {
            Err(obj::client::Error::StaleMap { version }) => assert_eq!(version, 1),
            other => panic!(
                "participants {list:?} (map {version:?}): want a stale-map refusal, got {other:?}"
            ),
        }
    }
    // a client that made its own map (no pool service) and marked b DOWN
    // while b serves: it places on [a, spare]; refused, it has no source
    let mut own = DistClient::connect(
        addrs,
        POOL,
        CONT,
        Duration::from_secs(2),
        DetectorConfig::default(),
    )
    .unwrap();
    own.mark_down(b).unwrap();
    match own.kv_put(oid, key, b"around") {
        Err(DistError::StaleMap { engine, .. }) => assert_eq!(engine, 1),
        other => panic!("want a stale-map refusal, got {other:?}"),
    }
    for r in [a, b] {
        assert_eq!(value_on(&addrs[r], oid, key).as_deref(), Some(&b"v1"[..]));
    }
    assert_eq!(value_on(&addrs[spare], oid, key), None);
}
