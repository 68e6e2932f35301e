//! `dpustack switch run -r SOCK` serves the switch's control commands over JSON-RPC,
//! and every `dpustack switch <command> -s SOCK` is a JSON-RPC client call: a replayed
//! pcap frame counted, flows and groups changed and dumped, port liveness, stats,
//! refusals as errors, the socket 0600 and in use for a second switch, `stop` ends
//! the process and removes the socket. No privileges needed (pcap ports).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

const FRAME: &str = "020000000002020000000001080045000068000000004006aed8c0a801070a0000099c40005000000000000000005000000063580000000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = wire::pcap::PcapWriter::new(Vec::new(), wire::pcap::LinkType::Ethernet).unwrap();
    for f in frames {
        w.write(Duration::ZERO, f).unwrap();
    }
    w.into_inner()
}

fn sw(sock: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("switch")
        .args(args)
        .arg("-s")
        .arg(sock)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

fn ok(sock: &Path, args: &[&str]) -> String {
    let o = sw(sock, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn switch_run_is_controlled_over_json_rpc() {
    let dir = std::env::temp_dir().join(format!("dpustack-switch-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let frame: Vec<u8> = (0..FRAME.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&FRAME[i..i + 2], 16).unwrap())
        .collect();
    std::fs::write(dir.join("in.pcap"), pcap(&[frame])).unwrap();
    std::fs::write(
        dir.join("flows.txt"),
        "priority=200,in_port=1,tcp,actions=output:3\npriority=0,actions=drop\n",
    )
    .unwrap();
    let sock = dir.join("rpc.sock");
    let mut child = Command::new(BIN)
        .args(["switch", "run", "--duration", "60", "--flows"])
        .arg(dir.join("flows.txt"))
        .arg("--port")
        .arg(format!("1=pcap-rx:{}", dir.join("in.pcap").display()))
        .arg("--port")
        .arg(format!("3=pcap-tx:{}", dir.join("out.pcap").display()))
        .arg("-r")
        .arg(&sock)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the first answered call means the loop runs; the frame went through by then or soon
    let t0 = Instant::now();
    let stats = loop {
        let o = sw(&sock, &["stats"]);
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        if o.status.success() && s.contains("rx_packets 1\n") {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no stats: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        stats.contains("tx_packets 1\n")
            && stats.contains("upcalls 1\n")
            && stats.contains("rules 2\n"),
        "{stats}"
    );
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let rules = ok(&sock, &["dump-rules"]);
    assert!(rules.contains("n_packets=1, n_bytes=118"), "{rules}");
    assert!(ok(&sock, &["dump-flows"]).contains("actions:3"));
    std::fs::write(dir.join("add.txt"), "table=1,udp,actions=output:3\n").unwrap();
    let add = dir.join("add.txt").display().to_string();
    assert_eq!(
        ok(&sock, &["add-flows", &add]),
        "1 flows added, 3 in table\n"
    );
    assert_eq!(ok(&sock, &["dump-rules", "table=1"]).lines().count(), 1);
    assert_eq!(
        ok(&sock, &["del-flows", "table=1,udp"]),
        "1 flows deleted, 2 in table\n"
    );
    std::fs::write(
        dir.join("g.txt"),
        "group_id=4,type=ff,bucket=watch_port:3,output:3\n",
    )
    .unwrap();
    let g = dir.join("g.txt").display().to_string();
    assert_eq!(
        ok(&sock, &["add-groups", &g]),
        "1 groups added, 1 in table\n"
    );
    assert!(ok(&sock, &["dump-groups"]).starts_with("group_id=4,type=ff"));
    assert_eq!(ok(&sock, &["port-down", "3"]), "port 3 down\n");
    assert_eq!(ok(&sock, &["port-up", "3"]), "port 3 up\n");
    assert_eq!(
        ok(&sock, &["del-groups", "group_id=4"]),
        "1 groups deleted (0 rules that used them), 0 in table\n"
    );
    assert_eq!(ok(&sock, &["fdb-flush"]), "0 MAC entries flushed\n");
    // a refusal is an error with the switch's reason
    let o = sw(&sock, &["del-flows", "bogus=1"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("dpustack_switch_del_flows") && e.contains("bogus"),
        "{e}"
    );
    // the same socket through the generic client: the switch's methods are listed
    let o = Command::new(BIN)
        .args(["rpc", "rpc_get_methods", "-s"])
        .arg(&sock)
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&o.stdout);
    assert!(
        m.contains("dpustack_switch_port_down") && m.contains("dpustack_switch_stop"),
        "{m}"
    );
    // a second switch on the same socket is refused before it opens a port
    let o = Command::new(BIN)
        .args(["switch", "run", "--port"])
        .arg(format!("1=pcap-rx:{}", dir.join("in.pcap").display()))
        .arg("-r")
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(ok(&sock, &["stop"]), "stopping\n");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "switch did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("switch stopped: rx 1 tx 1"), "{log}");
    assert!(!sock.exists(), "the socket is removed at exit");
    let o = sw(&sock, &["stats"]);
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
