//! `dpustack system start|query|create|kv|stop`: three engine processes on
//! 127.0.0.70–72, an RP_2 KV value, kill -9 of one of its replicas, the value
//! still read, `system query` showing the dead engine; the engine restarted
//! after missing writes is kept DOWN by the shared pool map (no stale read):
//! the pool service's map (each engine runs a replica; `system_raft.rs`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{ok, run, BIN};

fn pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("system.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect()
}

/// Kills whatever the test's system still runs, even on a failed assert.
struct Guard(PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        for p in pids(&self.0) {
            let _ = Command::new("kill").arg("-9").arg(p.to_string()).status();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn three_engine_processes_rp2_value_survives_kill_9() {
    let dir = std::env::temp_dir().join(format!("dpustack-system-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = Guard(dir.clone());
    let port = TcpListener::bind("127.0.0.70:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let out = ok(
        &dir,
        &[
            "start",
            "--engines",
            "3",
            "--first-ip",
            "127.0.0.70",
            "--port",
            &port,
        ],
    );
    assert!(out.contains("system of 3 engines"), "{out}");
    assert_eq!(pids(&dir).len(), 3);
    // a second start is refused while it runs
    let o = run(&dir, &["start", "--engines", "3", "--port", &port]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already running"));

    ok(&dir, &["create", "dp", "dc", "16M"]);
    for k in 0..5 {
        ok(
            &dir,
            &[
                "kv",
                "dp",
                "dc",
                "7",
                "--class",
                "RP_2G1",
                "put",
                &format!("k{k}"),
                &format!("value {k}"),
            ],
        );
    }
    let w = ok(&dir, &["kv", "dp", "dc", "7", "--class", "RP_2G1", "where"]);
    let ranks: Vec<usize> = w
        .split("rank ")
        .skip(1)
        .map(|s| s.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ranks.len(), 2, "{w}");
    assert_ne!(ranks[0], ranks[1]);

    // kill -9 the first replica's engine
    let victim = pids(&dir)[ranks[0]];
    assert!(Command::new("kill")
        .arg("-9")
        .arg(victim.to_string())
        .status()
        .unwrap()
        .success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    for k in 0..5 {
        let o = run(
            &dir,
            &[
                "kv",
                "dp",
                "dc",
                "7",
                "--class",
                "RP_2G1",
                "get",
                &format!("k{k}"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("value {k}\n"));
        assert!(String::from_utf8_lossy(&o.stderr).contains("are DOWN"));
    }
    let q = ok(&dir, &["query"]);
    let line = q
        .lines()
        .find(|l| l.starts_with(&ranks[0].to_string()))
        .unwrap();
    assert!(line.contains("NOT ANSWERING"), "{q}");
    // the shared pool map (the pool service's, replicated by the engines;
    // DIR/poolmap.txt before it) has it DOWN, version 2
    assert!(line.contains("DOWN"), "{q}");
    assert!(q.starts_with("pool dp: map version 2"), "{q}");
    assert_eq!(q.matches("answers").count(), 2, "{q}");
    // a write during the outage, read back
    ok(
        &dir,
        &[
            "kv", "dp", "dc", "7", "--class", "RP_2G1", "put", "new", "during",
        ],
    );
    assert_eq!(
        ok(
            &dir,
            &["kv", "dp", "dc", "7", "--class", "RP_2G1", "get", "new"]
        ),
        "during\n"
    );
    // the victim comes back (same data dir, same address) having missed the
    // writes above: the shared map keeps it DOWN, so nothing stale is read
    ok(
        &dir,
        &[
            "kv", "dp", "dc", "7", "--class", "RP_2G1", "put", "k0", "newer",
        ],
    );
    let victim_addr = w
        .split(&format!("rank {} (", ranks[0]))
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap()
        .to_string();
    let mut back = Command::new(BIN)
        .args([
            "engine",
            "--listen",
            &victim_addr,
            "--targets",
            "1",
            "--data-dir",
        ])
        .arg(dir.join(format!("engine{}", ranks[0])))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while ok(&dir, &["query"]).matches("answers").count() < 3 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "engine did not come back"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for _ in 0..3 {
        assert_eq!(
            ok(
                &dir,
                &["kv", "dp", "dc", "7", "--class", "RP_2G1", "get", "k0"]
            ),
            "newer\n"
        );
    }
    let q = ok(&dir, &["query"]);
    let line = q
        .lines()
        .find(|l| l.starts_with(&ranks[0].to_string()))
        .unwrap();
    assert!(line.contains("DOWN") && line.contains("answers"), "{q}");
    let _ = back.kill();
    let _ = back.wait();
    let s = ok(&dir, &["stop"]);
    assert_eq!(s.matches("stopped").count(), 2, "{s}");
    assert!(!dir.join("system.txt").exists());
    drop(g);
}
