//! The Raft pool service in `dpustack system`: three engine processes, each
//! with a pool-service replica; `system query` shows the leader; kill -9 of
//! the leader's engine → a new leader, pool operations go on (`pool-query`,
//! `set-state`, `kv`); the killed engine restarted rejoins from its redb.
//! Fail-over time measured per kill (printed; `SYSTEM_RAFT_KILLS=N` for N
//! kills, default 2).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use poolsvc::client::BlockingClient;
use poolsvc::state::{Command as SvcCmd, Reply};

mod common;
use common::*;

/// The leader some live replica reports as itself, with its term.
fn leader(c: &BlockingClient) -> Option<(u64, u64)> {
    c.statuses()
        .into_values()
        .filter_map(|s| s.ok())
        .filter(|s| s.role == "leader")
        .map(|s| (s.id, s.term))
        .max_by_key(|x| x.1)
}

#[test]
fn pool_service_survives_kill_9_of_its_leader() {
    let dir = std::env::temp_dir().join(format!("dpustack-system-raft-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut g = Guard(dir.clone(), Vec::new());
    let out = start_system(&dir, "127.0.0.90", 3, &[]);
    assert!(out.contains("pool service leader: rank"), "{out}");
    ok(&dir, &["create", "dp", "dc", "16M"]);
    // the third replica joins as a learner and is made a voter by the leader
    // shortly after start: wait (bounded) for that before checking the roles
    let t0 = std::time::Instant::now();
    let mut q = ok(&dir, &["query"]);
    while q.contains("learner t") && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        q = ok(&dir, &["query"]);
    }
    assert!(q.contains("pool service leader: rank"), "{q}");
    assert_eq!(q.matches("leader t").count(), 1, "{q}");
    assert_eq!(q.matches("follower t").count(), 2, "{q}");
    let pq = ok(&dir, &["pool-query", "dp"]);
    assert!(pq.contains("pool map version 1"), "{pq}");
    assert!(pq.contains("container dc"), "{pq}");
    ok(
        &dir,
        &["kv", "dp", "dc", "7", "--class", "RP_3G1", "put", "k", "v1"],
    );

    let ms = members(&dir);
    let replicas: BTreeMap<u64, String> = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, m.svc.clone()))
        .collect();
    let mut pids: Vec<i32> = ms.iter().map(|m| m.pid).collect();
    let mut c = BlockingClient::new(replicas).unwrap();
    c.inner.rpc_timeout = Duration::from_millis(1000);
    c.inner.backoff = Duration::from_millis(10);

    let kills: usize = std::env::var("SYSTEM_RAFT_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let mut elect_ms = Vec::new();
    let mut write_ms = Vec::new();
    for k in 0..kills {
        let (l0, term0) = {
            let t = Instant::now();
            loop {
                if let Some(l) = leader(&c) {
                    break l;
                }
                assert!(t.elapsed() < Duration::from_secs(10), "no leader");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let victim = pids[l0 as usize];
        let t0 = Instant::now();
        let args = kill_9(victim);
        // a new leader, in a newer term
        let (l1, term1) = loop {
            if let Some((l, t)) = leader(&c) {
                if l != l0 && t > term0 {
                    break (l, t);
                }
            }
            if t0.elapsed() >= Duration::from_secs(15) {
                panic!("no new leader after killing {l0}\n{}", diagnose(&c, &dir));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elect = t0.elapsed();
        // and a pool-map change acknowledged through it
        let r = c
            .write(SvcCmd::SetContProp {
                pool: "dp".into(),
                cont: "dc".into(),
                key: format!("kill{k}"),
                value: l0.to_string(),
            })
            .unwrap();
        assert_eq!(r, Reply::Done);
        let write = t0.elapsed();
        eprintln!(
            "kill {k}: leader rank {l0} (term {term0}) killed; rank {l1} leads (term {term1}) after {:.0} ms, first write acknowledged after {:.0} ms",
            elect.as_secs_f64() * 1e3,
            write.as_secs_f64() * 1e3
        );
        elect_ms.push(elect.as_secs_f64() * 1e3);
        write_ms.push(write.as_secs_f64() * 1e3);

        // pool operations through the CLI still work
        let q = ok(&dir, &["query"]);
        assert!(
            q.contains(&format!("pool service leader: rank {l1}")),
            "{q}"
        );
        if k == 0 {
            // (only after the first kill: a restarted engine stays DOWN — no
            // reintegration yet — so later kills leave too few serving engines)
            ok(
                &dir,
                &["kv", "dp", "dc", "7", "--class", "RP_3G1", "put", "k", "v2"],
            );
            let got = ok(
                &dir,
                &["kv", "dp", "dc", "7", "--class", "RP_3G1", "get", "k"],
            );
            assert_eq!(got.trim(), "v2");
            // the kv client reported the dead engine to the pool service
            let pq = ok(&dir, &["pool-query", "dp"]);
            assert!(pq.contains(&format!("{l0}       DOWN")), "{pq}");
        }
        let pq = ok(&dir, &["pool-query", "dp"]);
        assert!(pq.contains(&format!("kill{k}={l0}")), "{pq}");

        // restart the killed engine (same command line): its replica rejoins
        // from its redb and catches up
        let log = std::fs::File::create(dir.join(format!("engine{l0}.restart{k}.log"))).unwrap();
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        pids[l0 as usize] = child.id() as i32;
        g.1.push(child);
        let t = Instant::now();
        loop {
            let st = c.statuses();
            if let Some(Ok(s)) = st.get(&l0) {
                let lead = st
                    .get(&l1)
                    .and_then(|s| s.as_ref().ok())
                    .and_then(|s| s.last_applied);
                if s.role == "follower" && s.last_applied.is_some() && s.last_applied >= lead {
                    break;
                }
            }
            if t.elapsed() >= Duration::from_secs(20) {
                panic!(
                    "restarted rank {l0} did not catch up\n{}",
                    diagnose(&c, &dir)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // the map changes made through the leaders are all there
    let st = c.read().unwrap();
    let props = &st.pools["dp"].containers["dc"].props;
    for k in 0..kills {
        assert!(props.contains_key(&format!("kill{k}")), "{props:?}");
    }
    let mut e = elect_ms.clone();
    e.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut w = write_ms.clone();
    w.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "fail-over over {kills} kills: new leader median {:.0} ms (min {:.0}, max {:.0}); first acknowledged write median {:.0} ms (min {:.0}, max {:.0})",
        e[e.len() / 2], e[0], e[e.len() - 1], w[w.len() / 2], w[0], w[w.len() - 1]
    );
    // every engine of the system.txt list is stopped by `stop` (the restarted
    // ones are not in it: the guard kills them)
    let _ = run(&dir, &["stop"]);
}

/// What each replica says of itself, and the end of every engine log in
/// `dir` (first runs and restarts): printed when a wait of the test runs out.
fn diagnose(c: &BlockingClient, dir: &std::path::Path) -> String {
    let mut out = String::new();
    for (id, s) in c.statuses() {
        out += &format!("replica {id}: {s:?}\n");
    }
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    logs.retain(|p| p.extension().is_some_and(|e| e == "log"));
    logs.sort();
    for p in logs {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out += &format!("--- {} (last 25 of {} lines)\n", p.display(), lines.len());
        for l in &lines[lines.len().saturating_sub(25)..] {
            out += l;
            out.push('\n');
        }
    }
    out
}

/// The state of `rank`'s target in pool `dp`, as the pool service has it.
fn target_state(c: &mut BlockingClient, rank: u32) -> Option<String> {
    let st = c.read().ok()?;
    let map = st.pools.get("dp")?.map();
    Some(map.target(rank).ok()?.state.name().to_string())
}

#[test]
fn pool_service_marks_a_dead_engine_down_then_excluded() {
    let dir = std::env::temp_dir().join(format!("dpustack-system-excl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _g = Guard(dir.clone(), Vec::new());
    start_system(&dir, "127.0.0.93", 3, &["--exclude-after-ms", "1500"]);
    ok(&dir, &["create", "dp", "dc", "16M"]);
    let ms = members(&dir);
    let replicas: BTreeMap<u64, String> = ms
        .iter()
        .enumerate()
        .map(|(r, m)| (r as u64, m.svc.clone()))
        .collect();
    let mut c = BlockingClient::new(replicas).unwrap();
    c.inner.rpc_timeout = Duration::from_millis(300);
    let (l, _) = leader(&c).expect("a leader");
    // kill a follower's engine: the leader's monitor sees it die
    let victim = (l as usize + 1) % 3;
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .arg("-9")
        .arg(ms[victim].pid.to_string())
        .status()
        .unwrap()
        .success());
    let mut t_down = None;
    let t_excl = loop {
        let s = target_state(&mut c, victim as u32);
        if s.as_deref() == Some("DOWN") && t_down.is_none() {
            t_down = Some(t0.elapsed());
        }
        if s.as_deref() == Some("EXCLUDED") {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "rank {victim}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let t_down = t_down.expect("DOWN before EXCLUDED");
    eprintln!(
        "rank {victim} killed: DOWN after {} ms, EXCLUDED after {} ms",
        t_down.as_millis(),
        t_excl.as_millis()
    );
    // the detector's defaults: dead 1.5 s after the last answer (+ a probe
    // interval and timeout); EXCLUDED 1.5 s after the monitor decided DOWN.
    // The test sees DOWN only once its Raft write committed (an fsync on each
    // replica: slow on a busy disk), so EXCLUDED is bounded from the kill: the
    // last answer came at most a probe interval + timeout (0.4 s) before it,
    // hence DOWN was decided >= 1.1 s and EXCLUDED made >= 2.6 s after the kill
    assert!(t_down < Duration::from_millis(3000), "{t_down:?}");
    assert!(
        t_excl >= Duration::from_millis(2500) && t_excl > t_down,
        "DOWN {t_down:?}, EXCLUDED {t_excl:?}"
    );
    let pq = ok(&dir, &["pool-query", "dp"]);
    assert!(pq.contains("pool map version 3"), "{pq}");
    let _ = run(&dir, &["stop"]);
}
