//! Rebuild and reintegration in `dpustack system` (3 engine processes, each
//! with a pool-service replica): RP_2 values written, a follower's engine
//! killed (kill -9) → every value still reads during the outage; the pool
//! service marks it DOWN, then EXCLUDED, and its leader's rebuild copies the
//! lost replicas to the spares → every key on 2 serving replicas, checked by
//! asking each replica's engine directly; values overwritten while it is out;
//! the engine restarted → reintegrated (EXCLUDED → UP → UP-IN, its stale
//! data discarded and re-filled) → every replica of every key, the returning
//! engine included, holds the newest value.
//!
//! Figures: `REBUILD_KEYS` (default 200) keys of `REBUILD_VALUE_BYTES`
//! (default 64) over 20 objects; the rebuild's values/s and MB/s and the
//! time from the kill to restored redundancy are printed; `REBUILD_RATE=N`
//! throttles the rebuild to N values/s.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use obj::client::Client;
use obj::dist::DistClient;
use obj::membership::DetectorConfig;
use obj::placement::{group_of, layout, PoolMap, TargetState};
use obj::types::{ObjClass, ObjType, ObjectId};
use poolsvc::client::BlockingClient;
use poolsvc::state::Pool;

mod common;
use common::*;

fn env_or(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(d)
}

fn pool(c: &mut BlockingClient) -> Pool {
    c.read().unwrap().pools.get("dp").cloned().expect("pool dp")
}

/// Polls the pool service until `f` holds (or panics after `secs`).
fn wait_for(c: &mut BlockingClient, secs: u64, what: &str, f: impl Fn(&Pool) -> bool) -> Pool {
    let t = Instant::now();
    loop {
        let p = pool(c);
        if f(&p) {
            return p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s; map {:?}, rebuild {:?}",
            p.map().targets(),
            p.rebuild
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn oid(o: u64) -> ObjectId {
    ObjectId::generate(
        0,
        1000 + o,
        ObjType::KvHashed,
        ObjClass::parse("RP_2G1").unwrap(),
    )
    .unwrap()
}

fn value(o: u64, k: usize, round: u32, len: usize) -> Vec<u8> {
    let mut v = format!("o{o} k{k} r{round} ").into_bytes();
    v.resize(len.max(v.len()), b'a' + (k % 26) as u8);
    v
}

/// `key` of `oid` as engine `addr` has it (asked directly, not placed).
fn direct_get(addr: &str, oid: ObjectId, key: &[u8]) -> Option<Vec<u8>> {
    let c = Client::connect_with(addr, Duration::from_secs(2)).unwrap();
    let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    c.kv_get(&kv, key, None).unwrap().get().ok()
}

fn dist(addrs: &[String], svc: &BTreeMap<u64, String>, map: PoolMap) -> DistClient {
    let mut src = BlockingClient::new(svc.clone()).unwrap();
    src.inner.rpc_timeout = Duration::from_millis(500);
    DistClient::connect_with_map(
        addrs,
        "dp",
        "dc",
        Duration::from_secs(2),
        DetectorConfig::default(),
        Some(map),
    )
    .unwrap()
    .with_map_source(Box::new(move || {
        let st = src.read().map_err(|e| e.to_string())?;
        st.pools
            .get("dp")
            .map(|p| p.map())
            .ok_or_else(|| "no pool dp".to_string())
    }))
}

/// Every key is on the 2 replicas its group names under `map`, both serving,
/// with the expected value: asked of each replica's engine directly.
fn check_redundancy(addrs: &[String], map: &PoolMap, want: &BTreeMap<(u64, usize), Vec<u8>>) {
    for ((o, k), v) in want {
        let l = layout(oid(*o), map).unwrap();
        let key = format!("key{k}");
        let g = &l.groups[group_of(key.as_bytes(), l.groups.len())];
        assert_eq!(g.len(), 2);
        for &t in g {
            let tg = map.target(t).unwrap();
            assert_eq!(
                tg.state,
                TargetState::UpIn,
                "{o}/{k}: replica {t} not serving"
            );
            let got = direct_get(&addrs[tg.domain as usize], oid(*o), key.as_bytes());
            assert_eq!(
                got.as_deref(),
                Some(&v[..]),
                "object {o} key {k}: replica on rank {} has {:?}",
                tg.domain,
                got.as_ref()
                    .map(|g| String::from_utf8_lossy(&g[..g.len().min(24)]).into_owned())
            );
        }
    }
}

/// Keys held by an engine outside their group under `map` (asked of each
/// such engine directly): leftover copies.
fn leftovers(addrs: &[String], map: &PoolMap, want: &BTreeMap<(u64, usize), Vec<u8>>) -> usize {
    let mut n = 0;
    for (o, k) in want.keys() {
        let l = layout(oid(*o), map).unwrap();
        let key = format!("key{k}");
        let g = &l.groups[group_of(key.as_bytes(), l.groups.len())];
        for (r, a) in addrs.iter().enumerate() {
            if !g.contains(&(r as u32)) && direct_get(a, oid(*o), key.as_bytes()).is_some() {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn rp2_rebuild_restores_redundancy_and_the_killed_engine_is_reintegrated() {
    let nkeys = env_or("REBUILD_KEYS", 200);
    let vlen = env_or("REBUILD_VALUE_BYTES", 64);
    let nobj = 20u64;
    let dir = std::env::temp_dir().join(format!("dpustack-system-rebuild-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut g = Guard(dir.clone(), Vec::new());
    let port = free_port("127.0.0.94").to_string();
    let svc_port = free_port("127.0.0.94").to_string();
    let rate = env_or("REBUILD_RATE", 0).to_string();
    ok(
        &dir,
        &[
            "start",
            "--rebuild-rate",
            &rate,
            "--engines",
            "3",
            "--first-ip",
            "127.0.0.94",
            "--port",
            &port,
            "--svc-port",
            &svc_port,
            "--exclude-after-ms",
            "1000",
        ],
    );
    let out = ok(
        &dir,
        &[
            "create",
            "dp",
            "dc",
            "64M",
            "--class",
            "RP_2",
            "--replicas",
            "2",
        ],
    );
    assert!(out.contains("pool class RP_2G1, 2 replicas"), "{out}");
    let ms = members(&dir);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    let svc: BTreeMap<u64, String> = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, m.svc.clone()))
        .collect();
    let mut c = BlockingClient::new(svc.clone()).unwrap();
    c.inner.rpc_timeout = Duration::from_millis(300);
    c.inner.backoff = Duration::from_millis(10);

    // the CLI's kv takes the pool's class
    ok(&dir, &["kv", "dp", "dc", "5", "put", "cli", "v"]);
    let w = ok(&dir, &["kv", "dp", "dc", "5", "where"]);
    // one group of two replicas: the pool's class RP_2G1 was used
    assert_eq!(w.matches("rank ").count(), 2, "{w}");

    let mut want: BTreeMap<(u64, usize), Vec<u8>> = BTreeMap::new();
    let mut dc = dist(&addrs, &svc, pool(&mut c).map());
    // baseline of the same run: the client's replicated puts of the same
    // values (each put = one write on each of the 2 replicas, in turn)
    let t_put = Instant::now();
    for k in 0..nkeys {
        let o = k as u64 % nobj;
        let v = value(o, k, 0, vlen);
        dc.kv_put(oid(o), format!("key{k}").as_bytes(), &v).unwrap();
        want.insert((o, k), v);
    }
    let put_secs = t_put.elapsed().as_secs_f64();
    check_redundancy(&addrs, &pool(&mut c).map(), &want);

    // kill -9 a follower's engine
    let leader = c
        .statuses()
        .into_values()
        .filter_map(|s| s.ok())
        .find(|s| s.role == "leader")
        .expect("a leader")
        .id as usize;
    let victim = (leader + 1) % 3;
    let pid = ms[victim].pid;
    let t_kill = Instant::now();
    let args = kill_9(pid);

    // reads are served during the outage (the client finds the engine gone)
    for ((o, k), v) in &want {
        let got = dc.kv_get(oid(*o), format!("key{k}").as_bytes()).unwrap();
        assert_eq!(&got, v, "object {o} key {k} during the outage");
    }

    // DOWN, then EXCLUDED, then rebuild done for that map version
    let excl = wait_for(&mut c, 10, "victim EXCLUDED", |p| {
        p.map().target(victim as u32).unwrap().state == TargetState::Excluded
    })
    .map()
    .version();
    let t_excluded = t_kill.elapsed();
    let p = wait_for(&mut c, 20, "rebuild done", |p| {
        p.rebuild.state == "done" && p.rebuild.version >= excl
    });
    let t_redundant = t_kill.elapsed();
    let rb = p.rebuild.clone();
    assert_eq!(rb.kind, "exclude");
    assert!(rb.recs_copied > 0, "{rb:?}");
    assert!(rb.objs_scanned >= nobj, "{rb:?}");
    let map = p.map();
    check_redundancy(&addrs, &map, &want);
    // what moved to the spare is what was on the victim: about 2/3 of the keys
    let on_victim = want
        .keys()
        .filter(|(o, k)| {
            let l = layout(oid(*o), &map.all_in()).unwrap();
            l.groups[group_of(format!("key{k}").as_bytes(), l.groups.len())]
                .contains(&(victim as u32))
        })
        .count() as u64;
    // (+1: the `cli` key of the CLI's object, when it was on the victim)
    assert!(
        (on_victim..=on_victim + 1).contains(&rb.recs_copied),
        "{on_victim} keys were on the victim; {rb:?}"
    );
    let secs = rb.elapsed_ms.max(1) as f64 / 1000.0;
    println!(
        "rebuild: {} keys x {} B, {} values / {} bytes copied in {} ms: {:.0} values/s, {:.2} MB/s; \
         kill -> EXCLUDED {} ms, kill -> redundancy restored {} ms; baseline: client puts \
         {:.0} keys/s ({:.0} replica writes/s), rebuild values/s / replica writes/s = {:.2}",
        nkeys,
        vlen,
        rb.recs_copied,
        rb.bytes_copied,
        rb.elapsed_ms,
        rb.recs_copied as f64 / secs,
        rb.bytes_copied as f64 / secs / 1e6,
        t_excluded.as_millis(),
        t_redundant.as_millis(),
        nkeys as f64 / put_secs,
        2.0 * nkeys as f64 / put_secs,
        (rb.recs_copied as f64 / secs) / (2.0 * nkeys as f64 / put_secs)
    );
    let pq = ok(&dir, &["pool-query", "dp"]);
    assert!(pq.contains("rebuild done (exclude)"), "{pq}");
    assert!(pq.contains("EXCLUDED"), "{pq}");
    let js: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["pool-query", "dp", "--json"])).unwrap();
    assert_eq!(js["rebuild"]["state"], "done");
    assert_eq!(js["rebuild"]["recs_copied"], rb.recs_copied);

    // values change while the victim is out: its copies become stale
    let mut dc = dist(&addrs, &svc, map.clone());
    for k in (0..nkeys).step_by(2) {
        let o = k as u64 % nobj;
        let v = value(o, k, 1, vlen);
        dc.kv_put(oid(o), format!("key{k}").as_bytes(), &v).unwrap();
        want.insert((o, k), v);
    }

    // and one key the victim held is removed (from its serving replicas,
    // directly: the distributed client has no remove): the victim's stale
    // copy must not come back (its data is discarded, not merged)
    let (gone_o, gone_k) = *want
        .keys()
        .find(|(o, k)| {
            let l = layout(oid(*o), &map.all_in()).unwrap();
            l.groups[group_of(format!("key{k}").as_bytes(), l.groups.len())]
                .contains(&(victim as u32))
        })
        .expect("a key on the victim");
    let gone_key = format!("key{gone_k}");
    {
        let l = layout(oid(gone_o), &map).unwrap();
        for &t in &l.groups[group_of(gone_key.as_bytes(), l.groups.len())] {
            let a = &addrs[map.target(t).unwrap().domain as usize];
            let cl = Client::connect(a).unwrap();
            let poh = cl.pool_connect("dp", None).unwrap().get().unwrap();
            let coh = cl.cont_open(&poh, "dc", None).unwrap().get().unwrap();
            let kv = cl.kv_open(&coh, oid(gone_o), None).unwrap().get().unwrap();
            cl.kv_remove(&kv, gone_key.as_bytes(), None)
                .unwrap()
                .get()
                .unwrap();
        }
    }
    want.remove(&(gone_o, gone_k));

    // restart it (same command line): EXCLUDED -> UP -> UP-IN
    let t_restart = Instant::now();
    let log = std::fs::File::create(dir.join(format!("engine{victim}.restart.log"))).unwrap();
    let child = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    g.1.push(child);
    wait_for(&mut c, 20, "reintegration done", |p| {
        p.rebuild.kind == "reintegrate"
            && p.rebuild.state == "done"
            && p.map().target(victim as u32).unwrap().state == TargetState::UpIn
    });
    let t_back = t_restart.elapsed();
    // the spare's leftovers are reclaimed right after the job is done
    let p = wait_for(&mut c, 120, "reclaim", |p| {
        !p.rebuild.reclaim.is_empty() && p.rebuild.reclaim != "running"
    });
    assert!(p.rebuild.reclaim.starts_with("done"), "{:?}", p.rebuild);
    assert!(p.rebuild.reclaimed > 0, "{:?}", p.rebuild);
    let rb = p.rebuild.clone();
    println!(
        "reintegration: restart -> UP-IN and refilled {} ms; {} values / {} bytes copied; job {} ms with the reclaim",
        t_back.as_millis(),
        rb.recs_copied,
        rb.bytes_copied,
        rb.elapsed_ms
    );
    assert_eq!(rb.pass, 2, "{rb:?}");
    let map = p.map();
    // every replica (the returning engine included) has the newest values
    check_redundancy(&addrs, &map, &want);
    // the removed key is nowhere, not on the returning engine either
    for a in &addrs {
        assert_eq!(direct_get(a, oid(gone_o), gone_key.as_bytes()), None, "{a}");
    }
    // the spare's leftover copies (what it held for the victim's groups)
    // are deleted once the victim is complete again
    let left = leftovers(&addrs, &map, &want);
    assert_eq!(left, 0, "keys still on engines outside their group; {rb:?}");
    println!(
        "reclaim: {} dkeys deleted from the spare ({})",
        rb.reclaimed, rb.reclaim
    );
    // and clients read them with the new map
    let mut dc = dist(&addrs, &svc, map);
    for ((o, k), v) in &want {
        assert_eq!(
            &dc.kv_get(oid(*o), format!("key{k}").as_bytes()).unwrap(),
            v
        );
    }
    let _ = run(&dir, &["stop"]);
}

/// With `--return-from-down` (on by default), a DOWN engine
/// that answers again comes back without waiting for
/// EXCLUDED (which never comes here: `--exclude-after-ms 0`): DOWN → UP
/// (its data re-pulled: writes made while it was DOWN went to the spare)
/// → UP-IN, with the values written while it was out.
#[test]
fn down_engine_that_answers_again_returns_to_up_in() {
    let dir = std::env::temp_dir().join(format!("dpustack-system-down-up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut g = Guard(dir.clone(), Vec::new());
    let ip = "127.0.0.97";
    start_system(
        &dir,
        ip,
        3,
        &["--exclude-after-ms", "0", "--return-from-down"],
    );
    ok(&dir, &["create", "dp", "dc", "64M", "--class", "RP_2"]);
    let ms = members(&dir);
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    let svc: BTreeMap<u64, String> = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, m.svc.clone()))
        .collect();
    let mut c = BlockingClient::new(svc.clone()).unwrap();
    c.inner.rpc_timeout = Duration::from_millis(300);
    let (nobj, nkeys) = (10u64, 60usize);
    let mut want: BTreeMap<(u64, usize), Vec<u8>> = BTreeMap::new();
    let mut dc = dist(&addrs, &svc, pool(&mut c).map());
    for k in 0..nkeys {
        let o = k as u64 % nobj;
        let v = value(o, k, 0, 64);
        dc.kv_put(oid(o), format!("key{k}").as_bytes(), &v).unwrap();
        want.insert((o, k), v);
    }
    let leader = c
        .statuses()
        .into_values()
        .filter_map(|s| s.ok())
        .find(|s| s.role == "leader")
        .expect("a leader")
        .id as usize;
    let victim = (leader + 1) % 3;
    let pid = ms[victim].pid;
    let args = kill_9(pid);
    let p = wait_for(&mut c, 10, "victim DOWN", |p| {
        p.map().target(victim as u32).unwrap().state == TargetState::Down
    });
    // written while it is DOWN: to the survivor and the spare
    let mut dc = dist(&addrs, &svc, p.map());
    for k in (0..nkeys).step_by(2) {
        let o = k as u64 % nobj;
        let v = value(o, k, 1, 64);
        dc.kv_put(oid(o), format!("key{k}").as_bytes(), &v).unwrap();
        want.insert((o, k), v);
    }
    let t_restart = Instant::now();
    let log = std::fs::File::create(dir.join(format!("engine{victim}.restart.log"))).unwrap();
    g.1.push(
        Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let p = wait_for(&mut c, 20, "DOWN engine back UP-IN", |p| {
        p.rebuild.kind == "reintegrate"
            && p.rebuild.state == "done"
            && p.map().target(victim as u32).unwrap().state == TargetState::UpIn
    });
    let back = t_restart.elapsed();
    println!(
        "DOWN -> UP-IN: restart -> UP-IN and refilled in {} ms ({} values copied, pass {})",
        back.as_millis(),
        p.rebuild.recs_copied,
        p.rebuild.pass
    );
    assert_eq!(p.rebuild.pass, 2, "{:?}", p.rebuild);
    // never EXCLUDED: map versions 1 (create), 2 (DOWN), 3 (UP), 4 (UP-IN)
    assert_eq!(p.map().version(), 4, "{:?}", p.map().targets());
    // every replica (the returning engine included) has the newest values
    check_redundancy(&addrs, &p.map(), &want);
    // and the spares that took writes while it was DOWN hold none of them
    let p = wait_for(&mut c, 60, "reclaim", |p| {
        !p.rebuild.reclaim.is_empty() && p.rebuild.reclaim != "running"
    });
    assert!(p.rebuild.reclaim.starts_with("done"), "{:?}", p.rebuild);
    assert!(p.rebuild.reclaimed > 0, "{:?}", p.rebuild);
    assert_eq!(leftovers(&addrs, &p.map(), &want), 0, "{:?}", p.rebuild);
    let _ = run(&dir, &["stop"]);
}

/// The object CLI against the system at `dir` (`dpustack ... --system DIR`).
fn obj_cli(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--system")
        .arg(dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

/// Both replicas of RP_2 data lost at once (3 engines; the two excluded by
/// hand, DAOS's `dmg pool exclude`: killing two of three would take the pool
/// service's majority too): the rebuild finds no source for those groups and
/// their new members hold nothing. Before, the rebuild counted them complete
/// and a read answered "not found" (silent data loss); now the pool service
/// marks the container `UNCLEAN` when that rebuild completes, reads and
/// writes fail with "redundancy lost" (DAOS's -DER_RF), `pool-query` and
/// `cont query` say so, and `cont set-prop ... --properties status:healthy --system DIR`
/// (the operator accepting the loss) lets I/O through again.
#[test]
fn a_group_that_lost_every_replica_fails_with_redundancy_lost_not_none() {
    let dir = std::env::temp_dir().join(format!("dpustack-system-derf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _g = Guard(dir.clone(), Vec::new());
    start_system(&dir, "127.0.0.200", 3, &["--exclude-after-ms", "1000"]);
    ok(&dir, &["create", "dp", "dc", "64M", "--class", "RP_2"]);
    let ms = members(&dir);
    let mut c = soak::svc_client(&ms);
    // this test's bounds: 300 ms per call, the client's default back-off
    c.inner.rpc_timeout = Duration::from_millis(300);
    c.inner.backoff = Duration::from_millis(50);
    // the pool class RP_2G1: object 5's one group is two ranks
    ok(&dir, &["kv", "dp", "dc", "5", "put", "k", "lost"]);
    let w = ok(&dir, &["kv", "dp", "dc", "5", "where"]);
    let ranks: Vec<u32> = w
        .split("rank ")
        .skip(1)
        .map(|s| s.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ranks.len(), 2, "{w}");
    assert_eq!(
        ok(&dir, &["kv", "dp", "dc", "5", "get", "k"]).trim(),
        "lost"
    );
    // both replicas out at once (by hand: --force, the engines are live)
    for r in &ranks {
        ok(
            &dir,
            &["set-state", "dp", &r.to_string(), "DOWN", "--force"],
        );
    }
    for r in &ranks {
        ok(
            &dir,
            &["set-state", "dp", &r.to_string(), "EXCLUDED", "--force"],
        );
    }
    let excl = pool(&mut c).map().version();
    let p = wait_for(&mut c, 20, "rebuild done", |p| {
        p.rebuild.state == "done" && p.rebuild.version >= excl
    });
    // a read of the lost key: the error, not "not found"
    let o = run(&dir, &["kv", "dp", "dc", "5", "get", "k"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("redundancy lost (-DER_RF)"),
        "a read of a group that lost every replica: {:?} / {err}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(p.unclean(), vec!["dc".to_string()], "{:?}", p.containers);
    let o = run(&dir, &["kv", "dp", "dc", "5", "put", "k2", "x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("redundancy lost"),
        "a write: {err}"
    );
    // a client holding the view (as `system kv` builds it): the typed error
    let view = pool(&mut c).view();
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    let mut dc = DistClient::connect_with_map(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(2),
        DetectorConfig::default(),
        Some(view.map.clone()),
    )
    .unwrap()
    .with_rebuild_view(view.rebuild);
    let koid =
        ObjectId::generate(0, 5, ObjType::KvHashed, ObjClass::parse("RP_2G1").unwrap()).unwrap();
    match dc.kv_get(koid, b"k") {
        Err(obj::dist::Error::RedundancyLost { pool, cont }) => {
            assert_eq!((pool.as_str(), cont.as_str()), ("dp", "dc"))
        }
        r => panic!("{r:?}"),
    }
    let pq = ok(&dir, &["pool-query", "dp"]);
    assert!(pq.contains("container dc: REDUNDANCY LOST"), "{pq}");
    let js: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["pool-query", "dp", "--json"])).unwrap();
    assert_eq!(js["redundancy_lost"][0], "dc", "{js}");
    let o = obj_cli(&dir, &["cont", "query", "dp", "dc"]);
    let q = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && q.contains("status UNCLEAN"), "{q}");
    let lost_ranks = format!(
        "ranks {},{} lost",
        ranks[0].min(ranks[1]),
        ranks[0].max(ranks[1])
    );
    assert!(q.contains(&lost_ranks), "{q}");
    // the operator accepts the loss (DAOS: daos cont set-prop ... status:healthy)
    let o = obj_cli(
        &dir,
        &[
            "cont",
            "set-prop",
            "dp",
            "dc",
            "--properties",
            "status:healthy",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let q =
        String::from_utf8_lossy(&obj_cli(&dir, &["cont", "query", "dp", "dc"]).stdout).into_owned();
    assert!(q.contains("status HEALTHY"), "{q}");
    assert!(!ok(&dir, &["pool-query", "dp"]).contains("REDUNDANCY LOST"));
    // I/O again: the lost key is gone (accepted), new writes land
    let o = run(&dir, &["kv", "dp", "dc", "5", "get", "k"]);
    assert!(!o.status.success(), "the lost value cannot come back");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("redundancy lost"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    ok(&dir, &["kv", "dp", "dc", "5", "put", "k2", "after"]);
    assert_eq!(
        ok(&dir, &["kv", "dp", "dc", "5", "get", "k2"]).trim(),
        "after"
    );
    let _ = run(&dir, &["stop"]);
}
