//! A bounded Jepsen-style soak of replicated (RP_2, DTX) KV updates: three
//! engine processes (`dpustack system start`, each with a pool-service
//! replica), several client threads writing unique values and reading keys
//! while engines are killed with SIGKILL and restarted; every operation is
//! recorded (invoke / ok / fail / info, with values and times), then checked
//! against a register per key:
//! - no phantom: a read returns the initial value (none) or a value whose
//!   write was invoked before the read completed;
//! - no stale read: a read never returns a value (or none) that a write
//!   acknowledged before the read began had definitely replaced (the
//!   replacing write was invoked after the value's write completed);
//! - no acknowledged write lost: the final reads (after the load, from a
//!   fresh client on the service's map) obey the same rule;
//! - monotonic reads per client thread: a later read never returns a value
//!   that definitely precedes the one an earlier read returned.
//!
//! Failed or timed-out writes are `info` (indeterminate: a DTX whose reply
//! was lost may have committed), never `fail`.
//!
//! Half the writes are KV puts (the value under the KV akey), half are
//! multi-akey DTX updates writing the value both as that single value and
//! as an array extent under a second akey; half the reads fetch both akeys
//! at once: a single value written by a two-akey update must come with the
//! same array bytes (a torn update — one akey applied, not the other — is a
//! violation, checked in the history as `torn`).
//!
//! Kills: the first kill hits a random engine under load (a DTX leader or
//! follower with transactions in flight); the pool service marks it DOWN;
//! it is restarted, and (`system start --return-from-down`, on by default;
//! `SOAK_RETURN_FROM_DOWN=0` turns it off: it then stays DOWN and later
//! kills hit it while DOWN) it is reconciled, filled and set UP-IN again, and later kills
//! hit the same engine — by then usually serving again — and restart it
//! 0.2–0.7 s later, inside the failure detector's 1.5 s: only its new
//! incarnation tells the pool service (docs/obj-dist.md "Restarts").
//! Killing a second serving engine would lose RP_2 data that only rebuild
//! restores.
//!
//! `cargo test -p dpustack --test system_soak` (~20 s); the ignored
//! `soak_long` repeats rounds for `SOAK_SECS` seconds (default 120).

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use obj::client::kv::KV_AKEY;
use obj::dist::{DistClient, PoolView};
use obj::membership::DetectorConfig;
use obj::placement::PoolMap;
use obj::types::{Iod, ObjClass, ObjType, ObjectId, Recx, Redundancy};
use poolsvc::client::BlockingClient;

mod common;
use common::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `true`: the two-akey update (single value + array extent).
    Write(String, bool),
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Res {
    /// A write acknowledged, or a read with what it returned (`None`: the
    /// initial value, no value).
    Ok(Option<String>),
    /// A read of both akeys whose array did not hold the single value
    /// (only a problem when that value's write was a two-akey update).
    Torn(Option<String>, String),
    /// Definitely had no effect (reads only here).
    Fail,
    /// Indeterminate (a write whose outcome is unknown).
    Info,
}

#[derive(Debug, Clone)]
struct Op {
    client: usize,
    key: usize,
    kind: Kind,
    invoke: Duration,
    complete: Duration,
    res: Res,
}

/// Checks a history (see the module doc); returns the violations.
fn check(history: &[Op]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut by_key: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for o in history {
        by_key.entry(o.key).or_default().push(o);
    }
    for (key, ops) in by_key {
        // value -> its write (values are unique)
        let mut writes: HashMap<&str, &Op> = HashMap::new();
        for o in &ops {
            if let Kind::Write(v, _) = &o.kind {
                assert!(writes.insert(v, o).is_none(), "value {v} written twice");
            }
        }
        // atomicity of two-akey updates
        for r in &ops {
            if let Res::Torn(Some(v), arr) = &r.res {
                if let Some(Op {
                    kind: Kind::Write(_, true),
                    ..
                }) = writes.get(v.as_str())
                {
                    bad.push(format!(
                        "key {key}: torn update: single value {v:?} with array {arr:?}: {r:?}"
                    ));
                }
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
                .filter(|w| matches!(w.kind, Kind::Write(..)) && w.res == Res::Ok(None))
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
            let v = match &r.res {
                Res::Ok(v) | Res::Torn(v, _) => v,
                _ => continue,
            };
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
        let read_value = |o: &Op| match &o.res {
            Res::Ok(Some(v)) | Res::Torn(Some(v), _) => Some(v.clone()),
            _ => None,
        };
        for r in reads {
            let Some(v) = read_value(r) else { continue };
            let Some(w) = writes.get(v.as_str()) else {
                continue;
            };
            if let Some(prev) = last.get(&r.client) {
                if let Some(pv) = read_value(prev) {
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

#[test]
fn checker_finds_what_it_must() {
    let d = Duration::from_millis;
    let w = |c, v: &str, i, e, res| Op {
        client: c,
        key: 0,
        kind: Kind::Write(v.into(), false),
        invoke: d(i),
        complete: d(e),
        res,
    };
    let r = |c, v: Option<&str>, i, e| Op {
        client: c,
        key: 0,
        kind: Kind::Read,
        invoke: d(i),
        complete: d(e),
        res: Res::Ok(v.map(Into::into)),
    };
    let okw = Res::Ok(None);
    // a good history: concurrent read may see either
    let good = vec![
        w(0, "a", 0, 10, okw.clone()),
        w(1, "b", 20, 30, okw.clone()),
        r(2, Some("a"), 25, 26),
        r(2, Some("b"), 31, 32),
        w(1, "c", 40, 50, Res::Info),
        r(0, Some("c"), 60, 61),
    ];
    assert!(check(&good).is_empty(), "{:?}", check(&good));
    // stale read after an acknowledged replacement
    let mut h = good.clone();
    h.push(r(0, Some("a"), 35, 36));
    assert_eq!(check(&h).len(), 1, "{:?}", check(&h));
    // lost write: none after an acknowledged write
    let mut h = good.clone();
    h.push(r(0, None, 35, 36));
    assert_eq!(check(&h).len(), 1);
    // phantom
    let mut h = good.clone();
    h.push(r(0, Some("zz"), 35, 36));
    assert!(!check(&h).is_empty());
    // non-monotonic for one client (b then a, a definitely older)
    let h = vec![
        w(0, "a", 0, 10, okw.clone()),
        w(1, "b", 20, 30, Res::Info),
        r(2, Some("b"), 25, 26),
        r(2, Some("a"), 27, 28),
    ];
    assert_eq!(check(&h).len(), 1, "{:?}", check(&h));
    // a torn two-akey update (its single value read with other array
    // bytes); the same read of a KV put's value is fine
    let mut h = good.clone();
    h.push(Op {
        client: 3,
        key: 0,
        kind: Kind::Write("t".into(), true),
        invoke: d(70),
        complete: d(80),
        res: okw.clone(),
    });
    let mut torn = r(3, None, 90, 91);
    torn.res = Res::Torn(Some("t".into()), "c".into());
    h.push(torn.clone());
    assert_eq!(check(&h).len(), 1, "{:?}", check(&h));
    let mut h = good.clone();
    torn.res = Res::Torn(Some("c".into()), "b".into());
    h.push(torn);
    assert!(check(&h).is_empty(), "{:?}", check(&h));
}

// ---------------------------------------------------------------- the soak

fn kv_oid(lo: u64) -> ObjectId {
    let class = ObjClass {
        redundancy: Redundancy::Replicas(2),
        groups: 1,
    };
    ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap()
}

/// The second akey of a two-akey update: the value as bytes 0.. of an
/// array of 1-byte records, zero-padded to `ARR_LEN`.
const ARR_AKEY: &[u8] = b"arr";
const ARR_LEN: u64 = 24;

fn arr_of(v: &str) -> Vec<u8> {
    let mut a = v.as_bytes().to_vec();
    a.resize(ARR_LEN as usize, 0);
    a
}

const OBJS: usize = 2;
const KEYS_PER_OBJ: usize = 6;

fn key_of(k: usize) -> (ObjectId, Vec<u8>) {
    (
        kv_oid(1 + (k % OBJS) as u64),
        format!("key{}", k / OBJS).into_bytes(),
    )
}

fn svc_client(ms: &[Member]) -> BlockingClient {
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

fn svc_map(c: &mut BlockingClient) -> Option<PoolMap> {
    c.read().ok()?.pools.get("dp").map(|p| p.map())
}

/// The pool's map and rebuild view (which replicas are complete).
fn svc_view(c: &mut BlockingClient) -> Option<PoolView> {
    c.read().ok()?.pools.get("dp").map(|p| p.view())
}

fn dist_client(ms: &[Member]) -> Option<DistClient> {
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

struct Round {
    ops: usize,
    writes_ok: usize,
    writes_info: usize,
    reads_ok: usize,
    reads_fail: usize,
    kills: Vec<String>,
}

/// One soak round: a fresh 3-engine system, `load` of client traffic with
/// kills, final reads, the check. `ip`: the first engine's address.
fn round(ip: &str, seed: u64, load: Duration, clients: usize) -> Round {
    let dir = std::env::temp_dir().join(format!(
        "dpustack-system-soak-{}-{seed}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut g = Guard(dir.clone(), Vec::new());
    let port = free_port(ip).to_string();
    let svc_port = free_port(ip).to_string();
    let mut args: Vec<&str> = vec![
        "start",
        "--engines",
        "3",
        "--first-ip",
        ip,
        "--port",
        &port,
        "--svc-port",
        &svc_port,
        "--exclude-after-ms",
        "0",
    ];
    let lease = std::env::var("SOAK_LEASE_MS").unwrap_or_else(|_| "450".into());
    args.extend(["--lease-ms", &lease]);
    // the quick DOWN -> UP-IN return (on by default in `system start`):
    // SOAK_RETURN_FROM_DOWN=0 turns it off, =1 says on explicitly
    match std::env::var("SOAK_RETURN_FROM_DOWN").as_deref() {
        Ok("0") => args.push("--return-from-down=false"),
        Ok(_) => args.push("--return-from-down"),
        Err(_) => {}
    }
    ok(&dir, &args);
    ok(&dir, &["create", "dp", "dc", "64M"]);
    let ms = members(&dir);
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::<Op>::new()));

    let mut threads = Vec::new();
    for c in 0..clients {
        let (ms, stop, history) = (ms.clone(), stop.clone(), history.clone());
        threads.push(std::thread::spawn(move || {
            let mut dc = dist_client(&ms).expect("client");
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (c as u64 + 1);
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let k = (rnd() % (OBJS * KEYS_PER_OBJ) as u64) as usize;
                let (oid, key) = key_of(k);
                let invoke = start.elapsed();
                let (kind, res) = if rnd() % 2 == 0 {
                    n += 1;
                    let v = format!("c{c}-{n}");
                    let both = rnd() % 2 == 0;
                    let r = if both {
                        let iods = [
                            Iod::single(KV_AKEY, v.len() as u64),
                            Iod::array(
                                ARR_AKEY,
                                1,
                                vec![Recx {
                                    idx: 0,
                                    nr: ARR_LEN,
                                }],
                            ),
                        ];
                        dc.update(oid, &key, &iods, vec![v.clone().into_bytes(), arr_of(&v)])
                    } else {
                        dc.kv_put(oid, &key, v.as_bytes())
                    };
                    let res = match r {
                        Ok(_) => Res::Ok(None),
                        Err(_) => Res::Info,
                    };
                    (Kind::Write(v, both), res)
                } else if rnd() % 2 == 0 {
                    let iods = [
                        Iod::single(KV_AKEY, 0),
                        Iod::array(
                            ARR_AKEY,
                            1,
                            vec![Recx {
                                idx: 0,
                                nr: ARR_LEN,
                            }],
                        ),
                    ];
                    let res = match dc.fetch(oid, &key, &iods) {
                        Ok(b) if b[0].is_empty() => Res::Ok(None),
                        Ok(b) => {
                            let v = String::from_utf8(b[0].clone()).unwrap();
                            if arr_of(&v) == b[1] {
                                Res::Ok(Some(v))
                            } else {
                                Res::Torn(Some(v), String::from_utf8_lossy(&b[1]).into_owned())
                            }
                        }
                        Err(_) => Res::Fail,
                    };
                    (Kind::Read, res)
                } else {
                    let res = match dc.kv_get(oid, &key) {
                        Ok(v) => Res::Ok(Some(String::from_utf8(v).unwrap())),
                        Err(obj::dist::Error::Engine { source, .. })
                            if source.status() == Some(obj::rpc::Status::NonExist) =>
                        {
                            Res::Ok(None)
                        }
                        Err(_) => Res::Fail,
                    };
                    (Kind::Read, res)
                };
                let op = Op {
                    client: c,
                    key: k,
                    kind,
                    invoke,
                    complete: start.elapsed(),
                    res,
                };
                history.lock().unwrap().push(op);
            }
        }));
    }

    // the killer
    let mut x = seed | 1;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut kills = Vec::new();
    let mut svc = svc_client(&ms);
    let mut pids: Vec<i32> = ms.iter().map(|m| m.pid).collect();
    let mut down: Option<usize> = None;
    let mut next_kill = load / 5 + Duration::from_millis(rnd(500));
    while start.elapsed() < load {
        if start.elapsed() < next_kill {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let victim = down.unwrap_or(rnd(3) as usize);
        let pid = pids[victim];
        let t = start.elapsed();
        let args = kill_9(pid);
        // the pool service marks it DOWN (the first time)
        let t0 = Instant::now();
        while down.is_none() {
            if let Some(m) = svc_map(&mut svc) {
                if !m.target(victim as u32).unwrap().state.is_serving() {
                    break;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "rank {victim} never marked DOWN"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let detected = t0.elapsed();
        std::thread::sleep(Duration::from_millis(200 + rnd(500)));
        let log =
            std::fs::File::create(dir.join(format!("engine{victim}.restart{}.log", kills.len())))
                .unwrap();
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        pids[victim] = child.id() as i32;
        g.1.push(child);
        kills.push(format!(
            "rank {victim} killed at {:.1} s ({}), DOWN after {:.0} ms, restarted",
            t.as_secs_f64(),
            if down.is_none() {
                "serving"
            } else {
                "already DOWN"
            },
            detected.as_secs_f64() * 1e3
        ));
        down = Some(victim);
        next_kill = start.elapsed() + load / 4 + Duration::from_millis(rnd(1000));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // final reads from a fresh client on the service's map
    let mut dc = dist_client(&members(&dir)).expect("final client");
    let mut history = std::mem::take(&mut *history.lock().unwrap());
    for k in 0..OBJS * KEYS_PER_OBJ {
        let (oid, key) = key_of(k);
        let invoke = start.elapsed();
        let res = match dc.kv_get(oid, &key) {
            Ok(v) => Res::Ok(Some(String::from_utf8(v).unwrap())),
            Err(obj::dist::Error::Engine { source, .. })
                if source.status() == Some(obj::rpc::Status::NonExist) =>
            {
                Res::Ok(None)
            }
            Err(e) => panic!("final read of key {k}: {e}"),
        };
        history.push(Op {
            client: usize::MAX,
            key: k,
            kind: Kind::Read,
            invoke,
            complete: start.elapsed(),
            res,
        });
    }
    // where the pool service stands at the end: the victim's state and the
    // last rebuild (with the quick return: reintegrated or being so)
    if let Ok(st) = svc_client(&members(&dir)).read() {
        if let Some(p) = st.pools.get("dp") {
            let m = p.map();
            let states: Vec<String> = m
                .targets()
                .iter()
                .map(|t| format!("{}:{:?}", t.id, t.state))
                .collect();
            let rb = &p.rebuild;
            kills.push(format!(
                "final map v{} [{}], rebuild {} ({}) pass {} to v{}: {} values copied",
                m.version(),
                states.join(" "),
                rb.state,
                rb.kind,
                rb.pass,
                rb.version,
                rb.recs_copied
            ));
        }
    }
    let bad = check(&history);
    let count = |f: &dyn Fn(&Op) -> bool| history.iter().filter(|o| f(o)).count();
    let r = Round {
        ops: history.len(),
        writes_ok: count(&|o| matches!(o.kind, Kind::Write(..)) && o.res == Res::Ok(None)),
        writes_info: count(&|o| matches!(o.kind, Kind::Write(..)) && o.res == Res::Info),
        reads_ok: count(&|o| o.kind == Kind::Read && matches!(o.res, Res::Ok(_))),
        reads_fail: count(&|o| o.kind == Kind::Read && o.res == Res::Fail),
        kills,
    };
    if !bad.is_empty() {
        let keep = std::env::temp_dir().join(format!("dpustack-soak-history-{seed}.txt"));
        let _ = std::fs::write(
            &keep,
            history
                .iter()
                .map(|o| format!("{o:?}\n"))
                .collect::<String>(),
        );
        panic!(
            "seed {seed}: {} violations (history in {}), kills {:?}:\n{}",
            bad.len(),
            keep.display(),
            r.kills,
            bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    assert!(r.writes_ok > 20, "seed {seed}: too few writes acknowledged");
    assert!(!r.kills.is_empty(), "seed {seed}: no kill happened");
    r
}

fn report(seed: u64, r: &Round) {
    eprintln!(
        "seed {seed}: {} ops, writes {} ok / {} info, reads {} ok / {} fail; {}",
        r.ops,
        r.writes_ok,
        r.writes_info,
        r.reads_ok,
        r.reads_fail,
        r.kills.join("; ")
    );
}

#[test]
fn soak_rp2_dtx_with_kills() {
    let seed = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let r = round("127.0.0.110", seed, Duration::from_secs(10), 3);
    report(seed, &r);
}

#[test]
#[ignore]
fn soak_long() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let t = Instant::now();
    let mut seed = 100;
    while t.elapsed() < Duration::from_secs(secs) {
        seed += 1;
        let r = round("127.0.0.120", seed, Duration::from_secs(15), 4);
        report(seed, &r);
    }
}
