//! Never write around a live replica (issue 13, docs/obj-dist.md "Writes
//! never go around a serving replica"): a write is acknowledged only when
//! every replica serving in the map it was placed with has it. A replica
//! that a client (or the DTX leader) cannot reach while it still talks to
//! the pool service stays UP-IN; writing around it under that map would
//! leave it serving the old value after the cut heals.
//!
//! 3 engine processes (`--fault-injection`), an RP_2 key whose replicas are
//! E (a pool-service follower, first: the DTX leader) and L (the third rank
//! is the leader S of the pool service, E's spare):
//! 1. client X writes `v1`;
//! 2. X cut off from E (this test process installs the fault table: X's
//!    requests to E are lost; E, L and S still talk): X writes `v2` — it
//!    must be acknowledged only if E has it (L leads, E follows) or E is
//!    DOWN in the map X wrote under. Before the fix X marked E DOWN in its
//!    own map and wrote L + S: acknowledged, E UP-IN with `v1`;
//! 3. also L → E cut (`system fault L --drop-to E`): X writes `v3` — it
//!    cannot reach E, nor can L: not acknowledged (E is still UP-IN: the
//!    pool service reaches it), or only if E has it / is DOWN;
//! 4. healed: a fresh client and direct reads of both replicas return the
//!    last acknowledged value, never an older one.
//!
//! `cargo test -p dpustack --test system_writearound` (~15 s).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use obj::client::{Client, Error as ClientError};
use obj::dist::DistClient;
use obj::placement::{layout, PoolMap, TargetState};
use obj::types::{ObjClass, ObjType, ObjectId, Redundancy};

mod common;
use common::soak::*;
use common::*;

/// A client at the pool service's current map ([`map_client`]).
fn client(ms: &[Member]) -> DistClient {
    let map = svc_map(&mut svc_client(ms)).expect("map");
    map_client(ms, map)
}

/// Engine `addr`'s value of `key` (direct, map version `v`, "in progress"
/// retried: a follower commits asynchronously).
fn direct_get(addr: &str, v: u32, oid: ObjectId, key: &[u8]) -> Result<Vec<u8>, ClientError> {
    let c = Client::connect_with(addr, Duration::from_secs(3))?;
    c.set_map_version(Some(v));
    let poh = c.pool_connect("dp", None)?.get()?;
    let coh = c.cont_open(&poh, "dc", None)?.get()?;
    let kv = c.kv_open(&coh, oid, None)?.get()?;
    let t0 = Instant::now();
    loop {
        match c.kv_get(&kv, key, None)?.get() {
            Err(
                ClientError::Engine(obj::rpc::Status::InProgress) | ClientError::StaleMap { .. },
            ) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r,
        }
    }
}

fn state(map: &PoolMap, rank: usize) -> TargetState {
    map.target(rank as u32).unwrap().state
}

/// The rule: a write acknowledged under map version `v` is on E, or E was
/// not serving in the pool service's map `v`.
fn check_ack(
    what: &str,
    ms: &[Member],
    e: usize,
    v: u32,
    svc_now: &PoolMap,
    oid: ObjectId,
    key: &[u8],
    want: &str,
) {
    let on_e = direct_get(&ms[e].addr, svc_now.version(), oid, key)
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let e_out = svc_now.version() == v && !state(svc_now, e).is_serving();
    assert!(
        on_e.as_deref().ok() == Some(want) || e_out,
        "{what}: `{want}` acknowledged under map v{v} without E (rank {e}): E has {on_e:?}, \
         E {:?} in the service's map v{}",
        state(svc_now, e),
        svc_now.version()
    );
}

#[test]
fn a_write_never_goes_around_a_serving_replica() {
    let ip = "127.0.0.180";
    let dir = std::env::temp_dir().join(format!(
        "dpustack-system-writearound-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let _g = Guard(dir.clone(), Vec::new());
    start_system(
        &dir,
        ip,
        3,
        &[
            "--exclude-after-ms",
            "0",
            "--fault-injection",
            "--return-from-down=false",
        ],
    );
    ok(&dir, &["create", "dp", "dc", "64M"]);
    let ms = members(&dir);
    let mut svc = svc_client(&ms);
    let t0 = Instant::now();
    let s = loop {
        if let Some(l) = svc
            .statuses()
            .into_values()
            .flatten()
            .find(|s| s.role == "leader")
        {
            break l.id as usize;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no leader");
        std::thread::sleep(Duration::from_millis(20));
    };
    let e = (0..3).find(|r| *r != s).unwrap();
    let l = (0..3).find(|r| *r != s && *r != e).unwrap();
    let map1 = svc_map(&mut svc).unwrap();
    let class = ObjClass {
        redundancy: Redundancy::Replicas(2),
        groups: 1,
    };
    let key = b"k".as_slice();
    // an RP_2 object on [E, L]: E leads its DTX, S is the spare
    let oid = (1..5000)
        .map(|lo| ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap())
        .find(|oid| layout(*oid, &map1).unwrap().groups[0] == vec![e as u32, l as u32])
        .expect("an object on [E, L]");

    // 1.
    let mut x = client(&ms);
    x.kv_put(oid, key, b"v1").unwrap();
    let mut last = "v1".to_string();

    // the test process's own fault table: X's messages to E are lost
    let addrs: BTreeMap<u64, Vec<String>> = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, vec![m.addr.clone(), m.svc.clone()]))
        .collect();
    obj::fault::install(addrs).unwrap();
    let cut_client = |on: bool| {
        obj::fault::set(obj::fault::Rules {
            drop_to: if on {
                [e as u64].into()
            } else {
                Default::default()
            },
            drop_from: Default::default(),
        })
        .unwrap()
    };

    // 2. X cannot reach E; E talks to everyone else
    cut_client(true);
    let r2 = x.kv_put(oid, key, b"v2");
    let v2 = x.sent_map_version().unwrap();
    let svc2 = svc_map(&mut svc).unwrap();
    eprintln!(
        "step 2: put {r2:?} under v{v2}; the service at v{}: E {:?}; reports {}",
        svc2.version(),
        state(&svc2, e),
        x.unreachable_reports()
    );
    if r2.is_ok() {
        check_ack("client cut from E", &ms, e, v2, &svc2, oid, key, "v2");
        last = "v2".into();
    }
    assert!(
        r2.is_ok(),
        "E is reachable by the DTX leader L: the write should go through it ({r2:?})"
    );

    // 3. L cannot reach E either (E and the pool service still talk)
    ok(&dir, &["fault", &l.to_string(), &format!("--drop-to={e}")]);
    let t3 = Instant::now();
    let r3 = x.kv_put(oid, key, b"v3");
    let v3 = x.sent_map_version().unwrap();
    let svc3 = svc_map(&mut svc).unwrap();
    eprintln!(
        "step 3: put {r3:?} after {:?} under v{v3}; the service at v{}: E {:?}; reports {}",
        t3.elapsed(),
        svc3.version(),
        state(&svc3, e),
        x.unreachable_reports()
    );
    match &r3 {
        Ok(_) => {
            check_ack(
                "client and leader cut from E",
                &ms,
                e,
                v3,
                &svc3,
                oid,
                key,
                "v3",
            );
            last = "v3".into();
        }
        Err(err) => {
            assert!(
                state(&svc3, e).is_serving(),
                "E DOWN in the service's map, yet the write failed: {err}"
            );
            assert!(x.unreachable_reports() >= 1, "E not reported");
        }
    }

    // 4. healed: nothing older than the last acknowledged value
    cut_client(false);
    ok(&dir, &["fault", &l.to_string()]);
    std::thread::sleep(Duration::from_millis(300));
    let mut z = client(&ms);
    let got = String::from_utf8(z.kv_get(oid, key).unwrap()).unwrap();
    let vnow = svc_map(&mut svc).unwrap();
    assert!(
        got == last || (r3.is_err() && got == "v3"),
        "fresh client read {got:?}, last acknowledged {last:?}"
    );
    for r in [e, l] {
        if !state(&vnow, r).is_serving() {
            continue;
        }
        let d = direct_get(&ms[r].addr, vnow.version(), oid, key).map(String::from_utf8);
        let d = d.unwrap().unwrap();
        assert!(
            d == last || (r3.is_err() && d == "v3"),
            "rank {r} serves {d:?} at map v{}, last acknowledged {last:?} (stale: written around)",
            vnow.version()
        );
    }
    eprintln!(
        "writearound: E = rank {e}, L = {l}, S = {s}; last acknowledged {last}; step 3 {}",
        if r3.is_ok() {
            "acknowledged"
        } else {
            "refused"
        }
    );
}
