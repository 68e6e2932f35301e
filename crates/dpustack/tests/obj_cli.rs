//! The object store end to end through the CLI over TCP: `dpustack engine`
//! in the background, then pool / cont / obj / kv commands, including their
//! error messages.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

struct Engine(Child);
impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(addr: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .env("DPUSTACK_ENGINE", addr)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(b) = stdin {
        // a command that fails early never reads its stdin
        let _ = c.stdin.take().unwrap().write_all(b);
    }
    drop(c.stdin.take());
    c.wait_with_output().unwrap()
}

fn ok(addr: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
    let o = run(addr, args, stdin);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fails(addr: &str, args: &[&str], want: &str) {
    let o = run(addr, args, Some(b"x"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
}

#[test]
fn engine_pool_cont_obj_kv_through_the_cli() {
    let dir = std::env::temp_dir().join(format!("dpustack-obj-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = TcpListener::bind("127.0.0.9:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.9:{port}");
    let _eng = Engine(
        Command::new(BIN)
            .args([
                "engine",
                "--listen",
                &addr,
                "--targets",
                "2",
                "--rdma-listen",
                "127.0.0.9:7481",
                "--data-dir",
            ])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while run(&addr, &["pool", "list"], None).status.code() != Some(0) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "engine did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ok(&addr, &["pool", "create", "tank", "--size", "32M"], None).contains("tank"));
    assert!(ok(&addr, &["pool", "list"], None).contains("size     33554432"));
    ok(
        &addr,
        &["cont", "create", "tank", "c1", "--prop", "layout=test"],
        None,
    );
    assert!(ok(&addr, &["cont", "list", "tank"], None).contains("layout=test"));

    let value: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
    ok(
        &addr,
        &["obj", "put", "tank", "c1", "42", "d1", "a1"],
        Some(&value),
    );
    let file = dir.join("v.bin");
    std::fs::write(&file, b"second").unwrap();
    ok(
        &addr,
        &[
            "obj",
            "put",
            "tank",
            "c1",
            "42",
            "d2",
            "a1",
            file.to_str().unwrap(),
        ],
        None,
    );
    let got = run(&addr, &["obj", "get", "tank", "c1", "42", "d1", "a1"], None);
    assert_eq!(got.stdout, value);
    let out = dir.join("out.bin");
    ok(
        &addr,
        &[
            "obj",
            "get",
            "tank",
            "c1",
            "42",
            "d2",
            "a1",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"second");
    assert_eq!(
        ok(&addr, &["obj", "list", "tank", "c1", "42"], None),
        "d1\nd2\n"
    );
    let snap = ok(&addr, &["cont", "snap", "create", "tank", "c1"], None);
    let snap = snap.trim();
    ok(&addr, &["obj", "punch", "tank", "c1", "42", "d1"], None);
    assert_eq!(
        ok(&addr, &["obj", "list", "tank", "c1", "42"], None),
        "d2\n"
    );
    assert_eq!(
        ok(
            &addr,
            &["obj", "list", "tank", "c1", "42", "--epoch", snap],
            None
        ),
        "d1\nd2\n"
    );
    assert_eq!(
        ok(&addr, &["cont", "snap", "list", "tank", "c1"], None).trim(),
        snap
    );

    ok(
        &addr,
        &["kv", "put", "tank", "c1", "7", "alpha"],
        Some(b"one"),
    );
    ok(
        &addr,
        &["kv", "put", "tank", "c1", "7", "beta"],
        Some(b"two"),
    );
    assert_eq!(
        ok(&addr, &["kv", "get", "tank", "c1", "7", "alpha"], None),
        "one"
    );
    ok(&addr, &["kv", "remove", "tank", "c1", "7", "alpha"], None);
    assert_eq!(
        ok(&addr, &["kv", "list", "tank", "c1", "7"], None),
        "beta\n"
    );

    // a striped KV (class SX): its keys spread over both targets, listed
    // whole and in order through the CLI, over TCP and over RDMA
    for i in 0..20 {
        let k = format!("k{i:02}");
        let v = format!("v{i}");
        ok(
            &addr,
            &["kv", "put", "tank", "c1", "8", &k, "--class", "SX"],
            Some(v.as_bytes()),
        );
    }
    let want: String = (0..20).map(|i| format!("k{i:02}\n")).collect();
    assert_eq!(
        ok(
            &addr,
            &["kv", "list", "tank", "c1", "8", "--class", "SX"],
            None
        ),
        want
    );
    assert_eq!(
        ok(
            &addr,
            &["kv", "get", "tank", "c1", "8", "k13", "--class", "SX"],
            None
        ),
        "v13"
    );
    assert_eq!(
        ok(
            "rdma://127.0.0.9:7481",
            &[
                "kv",
                "list",
                "--rdma-src",
                "127.0.0.19",
                "tank",
                "c1",
                "8",
                "--class",
                "SX"
            ],
            None
        ),
        want
    );

    // the same engine over RPC over RDMA (soft RoCE on 127.0.0.19)
    let rdma = "rdma://127.0.0.9:7481";
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    ok(
        rdma,
        &[
            "kv",
            "put",
            "--rdma-src",
            "127.0.0.19",
            "tank",
            "c1",
            "7",
            "gamma",
        ],
        Some(&big),
    );
    let got = run(
        rdma,
        &[
            "kv",
            "get",
            "--rdma-src",
            "127.0.0.19",
            "tank",
            "c1",
            "7",
            "beta",
        ],
        None,
    );
    assert_eq!(
        got.stdout,
        b"two",
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(
        run(&addr, &["kv", "get", "tank", "c1", "7", "gamma"], None).stdout,
        big
    );
    fails(rdma, &["pool", "list"], "--rdma-src");

    // clear errors
    fails(
        &addr,
        &["pool", "query", "nope"],
        "pool \"nope\": does not exist",
    );
    fails(
        &addr,
        &["obj", "get", "tank", "nope", "42", "d", "a"],
        "container \"nope\" in pool \"tank\": does not exist",
    );
    fails(
        &addr,
        &["kv", "get", "tank", "c1", "7", "alpha"],
        "key \"alpha\": does not exist",
    );
    fails(
        &addr,
        &["obj", "get", "tank", "c1", "42", "zz", "a1"],
        "no value under dkey",
    );
    fails(
        &addr,
        &["obj", "get", "tank", "c1", "1.2", "d", "a"],
        "bad OID or class",
    );
    fails(
        &addr,
        &[
            "obj", "get", "tank", "c1", "42", "--class", "RP_1G1", "d", "a",
        ],
        "bad OID or class",
    );
    fails(
        &addr,
        &["pool", "create", "tank", "--size", "32M"],
        "already exists",
    );
    fails(
        &addr,
        &["pool", "create", "huge", "--size", "1000T"],
        "out of space",
    );
    // a full pool: 1 MiB per target, a 3 MiB value cannot fit
    ok(&addr, &["pool", "create", "small", "--size", "2M"], None);
    ok(&addr, &["cont", "create", "small", "c"], None);
    let o = run(
        &addr,
        &["obj", "put", "small", "c", "5", "d", "a"],
        Some(&vec![9u8; 3 << 20]),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("out of space"), "{err}");
    let big = vec![1u8; 17 << 20];
    let o = run(&addr, &["kv", "put", "tank", "c1", "7", "big"], Some(&big));
    assert!(String::from_utf8_lossy(&o.stderr).contains("value too large"));
    let dead = TcpListener::bind("127.0.0.9:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    fails(&dead, &["pool", "list"], "engine unreachable");

    ok(&addr, &["cont", "destroy", "tank", "c1"], None);
    ok(&addr, &["pool", "destroy", "tank"], None);
    ok(&addr, &["pool", "destroy", "small"], None);
    assert_eq!(ok(&addr, &["pool", "list"], None), "no pools\n");
    let _ = std::fs::remove_dir_all(&dir);
}
