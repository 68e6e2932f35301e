//! SPDK's own JSON-RPC client (PyPI package `spdk`, `python3 -m spdk.spdk_rpc`)
//! against `dpustack nvmf serve`: a target built from nothing, dpustack's host
//! connecting to it, save_config → a restart with --json → the same
//! nvmf_get_subsystems / bdev_get_bdevs; spdkcli's `ls` shows the tree. Ignored by
//! default (needs `pip install spdk configshell-fb`); says so loudly when absent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");
const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn spdk_present() -> bool {
    Command::new("python3")
        .args(["-c", "import spdk.spdk_rpc, configshell_fb"])
        .status()
        .is_ok_and(|s| s.success())
}

fn rpc(sock: &Path, args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(["-m", "spdk.spdk_rpc", "-s"])
        .arg(sock)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "spdk_rpc {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(sock: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&rpc(sock, args)).unwrap()
}

struct Target(Child);
impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(sock: &Path, extra: &[&str]) -> Target {
    let child = Command::new(BIN)
        .args(["nvmf", "serve", "--idle-spins", "0", "--for", "120", "-r"])
        .arg(sock)
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "RPC socket never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Target(child)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
#[ignore = "needs SPDK's Python client: pip install spdk configshell-fb"]
fn spdk_rpc_builds_saves_and_reloads_a_target() {
    if !spdk_present() {
        panic!("SKIPPED LOUDLY: the PyPI packages `spdk` and `configshell-fb` are not installed (pip install spdk configshell-fb); this test cannot run");
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("dpustack-spdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("a.sock");
    let port = free_port().to_string();
    let t = serve(&sock, &["--empty"]);
    rpc(&sock, &["framework_wait_init"]);
    assert_eq!(
        rpc(&sock, &["bdev_malloc_create", "-b", "Malloc0", "32", "512"]).trim(),
        "Malloc0"
    );
    rpc(&sock, &["nvmf_create_transport", "-t", "TCP"]);
    rpc(
        &sock,
        &[
            "nvmf_create_subsystem",
            NQN,
            "-a",
            "-s",
            "SPDK00000000000001",
        ],
    );
    rpc(&sock, &["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    rpc(
        &sock,
        &[
            "nvmf_subsystem_add_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    let subs = json(&sock, &["nvmf_get_subsystems"]);
    let bdevs = json(&sock, &["bdev_get_bdevs"]);
    assert_eq!(bdevs[0]["num_blocks"], 65536);
    // dpustack's host on what SPDK's client built
    let out = Command::new(BIN)
        .args([
            "nvme",
            "identify",
            "-a",
            &format!("tcp://127.0.0.1:{port}"),
            "-n",
            NQN,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("SPDK00000000000001"),
        "{text}"
    );
    // an error the way rpc.py shows it
    let bad = Command::new("python3")
        .args(["-m", "spdk.spdk_rpc", "-s"])
        .arg(&sock)
        .args(["bdev_malloc_delete", "nope"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&bad.stdout),
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        said.contains("-19") && said.contains("No such device"),
        "{said}"
    );
    // spdkcli's tree (needs configshell-fb beside spdk)
    let ls = Command::new("python3")
        .args(["-m", "spdk.spdk_cli", "-s"])
        .arg(&sock)
        .arg("ls")
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&ls.stdout);
    assert!(
        ls.status.success()
            && tree.contains(NQN)
            && tree.contains("Malloc0")
            && tree.contains("[TCP]"),
        "spdkcli ls: {tree}{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    let cfg = rpc(&sock, &["save_config"]);
    let file = dir.join("config.json");
    std::fs::write(&file, &cfg).unwrap();
    drop(t);
    // restart from the saved config
    let sock2 = dir.join("b.sock");
    let _t2 = serve(&sock2, &["--json", file.to_str().unwrap()]);
    assert_eq!(json(&sock2, &["nvmf_get_subsystems"]), subs);
    assert_eq!(json(&sock2, &["bdev_get_bdevs"]), bdevs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The methods this issue added, the way SPDK's client sends them: io_uring and
/// aio file bdevs, the subsystem queries and nvmf_get_stats with a host connected,
/// bdev_get_iostat counting its reads, remove_host and remove_listener.
#[test]
#[ignore = "needs SPDK's Python client: pip install spdk configshell-fb"]
fn spdk_rpc_queries_file_bdevs_and_removals() {
    if !spdk_present() {
        panic!("SKIPPED LOUDLY: the PyPI packages `spdk` and `configshell-fb` are not installed (pip install spdk configshell-fb); this test cannot run");
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("dpustack-spdk2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("u.img");
    std::fs::write(&img, vec![0u8; 8 << 20]).unwrap();
    let img = img.to_str().unwrap();
    let sock = dir.join("c.sock");
    let port = free_port().to_string();
    let _t = serve(&sock, &["--empty", "--metrics-listen", "0"]);
    assert_eq!(
        rpc(&sock, &["bdev_uring_create", img, "U0", "512"]).trim(),
        "U0"
    );
    assert_eq!(rpc(&sock, &["bdev_aio_create", img, "A0"]).trim(), "A0");
    let b = json(&sock, &["bdev_get_bdevs", "-b", "U0"]);
    assert_eq!(b[0]["num_blocks"], 16384);
    assert_eq!(b[0]["driver_specific"]["uring"]["filename"], img);
    rpc(&sock, &["nvmf_create_transport", "-t", "TCP"]);
    rpc(&sock, &["nvmf_create_subsystem", NQN, "-a"]);
    rpc(&sock, &["nvmf_subsystem_add_ns", NQN, "U0"]);
    let la = ["-t", "tcp", "-a", "127.0.0.1", "-s", port.as_str()];
    rpc(
        &sock,
        &[&["nvmf_subsystem_add_listener", NQN][..], &la].concat(),
    );
    let host = "nqn.2014-08.org.nvmexpress:uuid:spdk-test";
    rpc(&sock, &["nvmf_subsystem_add_host", NQN, host]);
    let l = json(&sock, &["nvmf_subsystem_get_listeners", NQN]);
    assert_eq!(l[0]["address"]["trsvcid"], port.as_str());
    // a host holds a connection while the queries run, then reads 4 blocks
    let traddr = format!("tcp://127.0.0.1:{port}");
    let mut hold = Command::new(BIN)
        .args([
            "nvme",
            "connect",
            "-a",
            &traddr,
            "-n",
            NQN,
            "--hostnqn",
            host,
        ])
        .args(["--hold", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let ctrlrs = loop {
        let c = json(&sock, &["nvmf_subsystem_get_controllers", NQN]);
        if c.as_array().is_some_and(|a| !a.is_empty()) {
            break c;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no controller");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ctrlrs[0]["hostnqn"], host);
    let q = json(&sock, &["nvmf_subsystem_get_qpairs", NQN]);
    assert!(q.as_array().unwrap().iter().any(|x| x["qid"] == 0));
    let st = json(&sock, &["nvmf_get_stats"]);
    assert!(
        st["poll_groups"][0]["current_admin_qpairs"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let out = Command::new(BIN)
        .args(["nvme", "read", "-a", &traddr, "-n", NQN, "--hostnqn", host])
        .args(["--blocks", "4"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let io = json(&sock, &["bdev_get_iostat", "--names", "U0"]);
    assert_eq!(io["bdevs"][0]["num_read_ops"], 1);
    assert_eq!(io["bdevs"][0]["bytes_read"], 2048);
    // removing the host drops the held controller
    rpc(&sock, &["nvmf_subsystem_remove_host", NQN, host]);
    let t = Instant::now();
    while json(&sock, &["nvmf_subsystem_get_controllers", NQN])
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        assert!(t.elapsed() < Duration::from_secs(10), "host not dropped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = hold.kill();
    let _ = hold.wait();
    rpc(
        &sock,
        &[&["nvmf_subsystem_remove_listener", NQN][..], &la].concat(),
    );
    assert_eq!(
        json(&sock, &["nvmf_subsystem_get_listeners", NQN]),
        serde_json::json!([])
    );
    rpc(&sock, &["bdev_aio_delete", "A0"]);
    let _ = std::fs::remove_dir_all(&dir);
}
