//! The AF_XDP datapath (`DPUSTACK_ROCE_IO=xdp`) on an interface other than `lo`:
//! two network namespaces joined by a veth pair (IP MTU 1500, then 9000), the
//! dpustack tools in each, talking over AF_XDP on both ends or AF_XDP against
//! the UDP-socket path. Shows the neighbour resolution (the first frame to a
//! peer waits for the kernel's ARP entry), the port MTU taken from the
//! interface (1024 at 1500, 2048 — the UMEM cap — at 9000), the CM over it
//! (rping -V), and that a device the datapath cannot serve fails loudly.
//! `#[ignore]`d: needs root, iproute2, AF_XDP and BPF; scripts/test-all.sh
//! (CI, as root) runs it with `--ignored`, where any of that missing fails.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

/// Two namespaces `<p>a`/`<p>b` with veth `<p>a`/`<p>b` holding 10.78.0.1/.2;
/// deleted on drop.
struct Veth {
    a: String,
    b: String,
}

fn ip(args: &[&str]) {
    let s = Command::new("ip")
        .args(args)
        .status()
        .expect("ip (iproute2)");
    assert!(s.success(), "ip {args:?}");
}

impl Veth {
    fn new() -> Veth {
        let p = format!("dx{}", std::process::id() % 100_000);
        let (a, b) = (format!("{p}a"), format!("{p}b"));
        for n in [&a, &b] {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        ip(&[
            "link", "add", &a, "netns", &a, "type", "veth", "peer", "name", &b, "netns", &b,
        ]);
        ip(&["-n", &a, "addr", "add", "10.78.0.1/24", "dev", &a]);
        ip(&["-n", &b, "addr", "add", "10.78.0.2/24", "dev", &b]);
        ip(&["-n", &a, "link", "set", &a, "up"]);
        ip(&["-n", &b, "link", "set", &b, "up"]);
        Veth { a, b }
    }

    fn mtu(&self, mtu: u32) {
        let m = mtu.to_string();
        ip(&["-n", &self.a, "link", "set", &self.a, "mtu", &m]);
        ip(&["-n", &self.b, "link", "set", &self.b, "mtu", &m]);
    }

    fn cmd(&self, ns: &str, xdp: bool, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, BIN]).args(args);
        c.env("RUST_BACKTRACE", "0").env("RUST_LOG", "warn");
        if xdp {
            c.env("DPUSTACK_ROCE_IO", "xdp");
        } else {
            c.env_remove("DPUSTACK_ROCE_IO");
        }
        c
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for a child with a bound; kills it past the bound.
fn wait_out(mut c: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if c.try_wait().unwrap().is_some() {
            return c.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    c.wait_with_output().unwrap()
}

/// A server in namespace a and a client in b; both must exit 0 and our tools
/// must have validated every byte of all `n` buffers.
fn pair(v: &Veth, what: &str, srv_xdp: bool, cli_xdp: bool, args: &[&str], n: u32) {
    let ns = n.to_string();
    let mut sa = vec![what, "-d", "10.78.0.1", "-g", "1", "-n", &ns, "-c"];
    sa.extend_from_slice(args);
    let srv = v
        .cmd(&v.a, srv_xdp, &sa)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut ca = vec![what, "-d", "10.78.0.2", "-g", "1", "-n", &ns, "-c"];
    ca.extend_from_slice(args);
    ca.push("10.78.0.1");
    let mut cli = v.cmd(&v.b, cli_xdp, &ca);
    let co = cli.output().unwrap();
    let so = wait_out(srv, Duration::from_secs(20));
    let want = format!("data check: {n} received buffers validated (every byte)");
    for (side, o) in [("server", &so), ("client", &co)] {
        assert!(
            o.status.success() && text(o).contains(&want),
            "{what} {args:?} (server xdp {srv_xdp}, client xdp {cli_xdp}): {side} failed:\n{}",
            text(o)
        );
    }
}

fn active_mtu(v: &Veth) -> String {
    let o = v.cmd(&v.a, true, &["devices"]).output().unwrap();
    let t = text(&o);
    let mut lines = t.lines().skip_while(|l| !l.starts_with("dps_10_78_0_1 "));
    let head = lines.next().unwrap_or_default().to_string();
    assert!(
        head.contains("datapath af_xdp on "),
        "devices does not show the AF_XDP datapath: {t}"
    );
    lines.next().unwrap_or_default().to_string()
}

#[test]
#[ignore = "root, iproute2, AF_XDP: scripts/test-all.sh runs it with --ignored"]
fn af_xdp_over_a_veth_pair_with_neighbour_resolution() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root");
    let v = Veth::new();
    assert!(active_mtu(&v).contains("active MTU 1024"), "IP MTU 1500");
    // both ends on AF_XDP: 4 KiB messages in 4 packets of 1024
    pair(&v, "rc-pingpong", true, true, &[], 200);
    // AF_XDP against the UDP-socket path, both directions
    pair(&v, "ud-pingpong", true, false, &["-s", "1024"], 100);
    pair(&v, "rc-pingpong", false, true, &["-s", "8192"], 100);
    // the interface MTU decides the port MTU, up to the 4 KiB UMEM frame's 2048
    v.mtu(9000);
    assert!(active_mtu(&v).contains("active MTU 2048"), "IP MTU 9000");
    pair(&v, "uc-pingpong", true, true, &["-s", "8192"], 100);
    // the CM over it: rping -V (the client compares the whole buffer)
    let srv = v
        .cmd(
            &v.a,
            true,
            &["rping", "-s", "-a", "10.78.0.1", "-C", "5", "-S", "8192"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let co = v
        .cmd(
            &v.b,
            true,
            &[
                "rping",
                "-c",
                "-a",
                "10.78.0.1",
                "-I",
                "10.78.0.2",
                "-C",
                "5",
                "-S",
                "8192",
                "-V",
                "-v",
            ],
        )
        .output()
        .unwrap();
    let so = wait_out(srv, Duration::from_secs(20));
    let t = text(&co);
    assert!(
        co.status.success() && t.matches("ping data: rdma-ping-").count() == 5,
        "rping client: {t}\nserver: {}",
        text(&so)
    );
    // asked for and impossible: an address no interface holds fails to open
    let o = v
        .cmd(&v.a, true, &["rc-pingpong", "-d", "10.78.0.9", "-n", "1"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("no AF_XDP port for 10.78.0.9"),
        "{}",
        text(&o)
    );
}
