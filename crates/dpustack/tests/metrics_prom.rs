//! The Prometheus endpoint of `dpustack nvmf serve` against Prometheus's own
//! tools (Debian package `prometheus`): I/O from dpustack's host moves the
//! per-namespace counters by exactly what it did, `promtool check metrics`
//! accepts a scrape, and a short-lived Prometheus server (127.0.0.1, temp config
//! and storage) scrapes the endpoint and answers a query over its HTTP API with
//! the counters the I/O run just moved. Ignored by default (needs promtool and
//! prometheus; scripts/test-all.sh installs them and runs it with --ignored).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");
const NQN: &str = "nqn.2024-01.io.dpustack:metrics";

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A GET over plain HTTP/1.0 (the body after the headers; no chunking in 1.0).
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// The value of the sample `name{labels...}` whose labels include `want`.
fn sample(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|l| {
        let (series, v) = l.rsplit_once(' ')?;
        let (n, labels) = series.split_once('{').unwrap_or((series, ""));
        if n != name {
            return None;
        }
        want.iter()
            .all(|(k, val)| labels.contains(&format!("{k}=\"{val}\"")))
            .then(|| v.parse().ok())?
    })
}

fn dpustack(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "dpustack {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tools_present() -> bool {
    ["promtool", "prometheus"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
#[ignore = "needs Prometheus (apt-get install prometheus); scripts/test-all.sh runs it"]
fn prometheus_scrapes_the_io_counters() {
    assert!(
        tools_present(),
        "promtool/prometheus missing (apt-get install prometheus)"
    );
    let dir = std::env::temp_dir().join(format!("dpustack-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (nvmf_port, mport) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{nvmf_port}");
    let maddr = format!("127.0.0.1:{mport}");
    let sock = dir.join("rpc.sock");
    let _srv = Proc(
        Command::new(BIN)
            .args(["nvmf", "serve", "--for", "120", "--discovery-port", "0"])
            .args(["--bdev", "malloc:16M", "--nqn", NQN, "--listen", &listen])
            .args(["--metrics-listen", &maddr, "-r"])
            .arg(&sock)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    let before = loop {
        if let Ok((200, body)) = http_get(mport, "/metrics") {
            break body;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no metrics endpoint");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(http_get(mport, "/nope").unwrap().0, 404);
    let ns = [("subsystem", NQN), ("nsid", "1")];
    let get = |text: &str, n: &str| sample(text, n, &ns).unwrap_or_else(|| panic!("{n}:\n{text}"));
    assert_eq!(get(&before, "dpustack_nvmf_read_bytes_total"), 0.0);
    assert_eq!(
        sample(&before, "dpustack_nvmf_io_stats_enabled", &[]),
        Some(1.0)
    );

    // exact: one write of 8 blocks, one read of 16 (512-byte blocks)
    let traddr = format!("tcp://{listen}");
    let t_args = ["-a", traddr.as_str(), "-n", NQN];
    dpustack(&[&["nvme", "write"][..], &t_args, &["--blocks", "8"]].concat());
    dpustack(&[&["nvme", "read"][..], &t_args, &["--blocks", "16"]].concat());
    let (_, after) = http_get(mport, "/metrics").unwrap();
    assert_eq!(get(&after, "dpustack_nvmf_write_bytes_total"), 8.0 * 512.0);
    assert_eq!(get(&after, "dpustack_nvmf_write_ops_total"), 1.0);
    assert_eq!(get(&after, "dpustack_nvmf_read_bytes_total"), 16.0 * 512.0);
    assert_eq!(get(&after, "dpustack_nvmf_read_ops_total"), 1.0);
    assert_eq!(get(&after, "dpustack_nvmf_read_latency_seconds_count"), 1.0);
    // the malloc bdev under it saw the same bytes
    assert_eq!(
        sample(&after, "dpustack_bdev_bytes_total", &[("type", "read")]),
        Some(16.0 * 512.0)
    );

    // a perf run: at least the I/Os it reports (plus its warm-up)
    let perf = dpustack(
        &[
            &["nvme", "perf"][..],
            &t_args,
            &[
                "-w", "randread", "-o", "4096", "-q", "8", "-t", "1", "--json",
            ],
        ]
        .concat(),
    );
    let perf: serde_json::Value = serde_json::from_str(&perf).unwrap();
    let ios = perf["ios"].as_u64().unwrap() as f64;
    assert!(ios > 100.0, "perf did too little: {perf}");
    let (_, scrape) = http_get(mport, "/metrics").unwrap();
    let reads = get(&scrape, "dpustack_nvmf_read_ops_total");
    assert!(reads >= ios + 1.0, "{reads} reads counted, perf did {ios}");
    let rbytes = get(&scrape, "dpustack_nvmf_read_bytes_total");
    assert_eq!(rbytes, 16.0 * 512.0 + (reads - 1.0) * 4096.0);
    assert_eq!(
        get(&scrape, "dpustack_nvmf_read_latency_seconds_count"),
        reads
    );

    // promtool's linter accepts the scrape
    let scrape_file = dir.join("scrape.txt");
    std::fs::write(&scrape_file, &scrape).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "promtool check metrics < {}",
            scrape_file.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // a real Prometheus scrapes it; its query API returns the same counters
    let pport = free_port();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dpustack\n    static_configs:\n      - targets: ['{maddr}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let _prom = Proc(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{pport}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let q = format!(
        "/api/v1/query?query=dpustack_nvmf_read_bytes_total%7Bsubsystem%3D%22{}%22%7D",
        NQN.replace(':', "%3A")
    );
    let t = Instant::now();
    let got = loop {
        if let Ok((200, body)) = http_get(pport, &q) {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(r) = v["data"]["result"].as_array().and_then(|a| a.first()) {
                break (r.clone(), v);
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "Prometheus never returned the series; log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let (r, whole) = got;
    assert_eq!(r["metric"]["job"], "dpustack", "{whole}");
    assert_eq!(r["metric"]["nsid"], "1", "{whole}");
    let v: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
    assert_eq!(v, rbytes, "Prometheus has {v}, the endpoint said {rbytes}");
    // and the scrape health Prometheus keeps: up == 1
    let (_, up) = http_get(pport, "/api/v1/query?query=up").unwrap();
    assert!(up.contains("\"1\""), "{up}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dpustack up` on its own address: the scrape has every part's families (RoCE,
/// CM, NVMe-oF, bdev, object store) and `promtool check metrics` accepts it.
#[test]
#[ignore = "needs Prometheus (apt-get install prometheus); scripts/test-all.sh runs it"]
fn up_scrape_has_every_part_and_passes_promtool() {
    assert!(
        tools_present(),
        "promtool/prometheus missing (apt-get install prometheus)"
    );
    let dir = std::env::temp_dir().join(format!("dpustack-metrics-up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mport = free_port();
    let cfg = dir.join("node.toml");
    std::fs::write(
        &cfg,
        format!(
            "[node]\nlisten_ip = \"127.0.6.1\"\ndata_dir = \"{d}\"\n[obj]\nlisten = \"127.0.6.1:10001\"\ntargets = 1\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let _up = Proc(
        Command::new(BIN)
            .arg("--config")
            .arg(&cfg)
            .args(["up", "--for", "60", "-r"])
            .arg(dir.join("rpc.sock"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    let text = loop {
        if let Ok((200, body)) = http_get(mport, "/metrics") {
            if body.contains("dpustack_obj_requests_total") {
                break body;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no metrics from up");
        std::thread::sleep(Duration::from_millis(100));
    };
    for fam in [
        "dpustack_roce_rx_packets_total",
        "dpustack_roce_naks_total",
        "dpustack_cm_connections",
        "dpustack_nvmf_read_bytes_total",
        "dpustack_nvmf_read_latency_seconds_bucket",
        "dpustack_bdev_ops_total",
        "dpustack_obj_requests_total",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(fam)),
            "{fam} missing:\n{text}"
        );
    }
    assert_eq!(
        sample(&text, "dpustack_cm_connections", &[("state", "listen")]),
        Some(1.0),
        "the rping server's listening id"
    );
    let f = dir.join("scrape.txt");
    std::fs::write(&f, &text).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", f.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
