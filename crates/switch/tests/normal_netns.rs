//! Live NORMAL (issue 20): `switch` with `actions=NORMAL` on AF_PACKET ports, veths to
//! three network namespaces and one trunk:
//!
//! * h1 — port 1, access VLAN 10 (`tag=10`), 10.20.10.1/24;
//! * h2 — port 2, `tag=10;trunks=20;vlan_mode=native-untagged`: its untagged frames are
//!   VLAN 10, 10.20.10.2/24;
//! * h3 — port 3, access VLAN 20, 10.20.20.3/24 and also 10.20.10.3/24 (h1's subnet,
//!   the wrong VLAN);
//! * port 4 — trunk of VLANs 10 and 20 (`trunks=10,20`). This machine's kernel has no
//!   802.1Q or bridge support for a namespace host to tag frames, so the test itself is
//!   the trunk host on the veth's other end (AF_PACKET): it answers ARP and ping for
//!   10.20.10.4 in VLAN 10 and 10.20.20.4 in VLAN 20, only when the frame carries that tag.
//!
//! Pings in the same VLAN succeed (h1 ↔ h2, h1 → .4 over the trunk tagged 10, h3 → .4
//! tagged 20), none across VLANs (h1/h2 → 10.20.10.3 on h3); the switch's fdb holds
//! each MAC on its port and VLAN and forgets them after the aging time.
//!
//! `#[ignore]`d: needs root (namespaces, veths, AF_PACKET); scripts/test-all.sh runs it
//! with `--ignored` as root. Only namespaces and veths it creates, no addresses outside
//! them.

use std::process::Command;
use std::time::{Duration, Instant};

use switch::control::Command as Ctl;
use switch::{Switch, SwitchOpts};

mod common;
use common::{add_host, must, ns_exec, sh, Topo};

fn ping(ns: &str, addr: &str) -> bool {
    sh(&ns_exec(
        ns,
        &["ping", "-q", "-c", "2", "-i", "0.3", "-W", "1", addr],
    ))
}

#[test]
#[ignore = "needs root (network namespaces, veths, AF_PACKET): run with --ignored as root"]
fn netns_normal_vlans_ping_and_fdb_ages() {
    let id = std::process::id() % 100_000;
    let topo = Topo {
        ns: (1..=3).map(|i| format!("d20h{i}-{id}")).collect(),
    };
    let sw_if = |i: usize| format!("d20s{i}{id}");
    for (i, n) in topo.ns.iter().enumerate() {
        add_host(n, &sw_if(i + 1));
    }
    let (h1, h2, h3) = (&topo.ns[0], &topo.ns[1], &topo.ns[2]);
    must(&ns_exec(
        h1,
        &["ip", "addr", "add", "10.20.10.1/24", "dev", "eth0"],
    ));
    must(&ns_exec(
        h2,
        &["ip", "addr", "add", "10.20.10.2/24", "dev", "eth0"],
    ));
    must(&ns_exec(
        h3,
        &["ip", "addr", "add", "10.20.20.3/24", "dev", "eth0"],
    ));
    must(&ns_exec(
        h3,
        &["ip", "addr", "add", "10.20.10.3/24", "dev", "eth0"],
    ));
    // the trunk: both ends here, the test answers on the far one
    let (t_sw, t_host) = (sw_if(4), format!("d20t{id}"));
    must(&[
        "ip", "link", "add", &t_sw, "type", "veth", "peer", "name", &t_host,
    ]);
    for d in [&t_sw, &t_host] {
        must(&[
            "sysctl",
            "-q",
            "-w",
            &format!("net.ipv6.conf.{d}.disable_ipv6=1"),
        ]);
        must(&["ip", "link", "set", d, "up"]);
    }
    let trunk = TrunkHost::start(&t_host);

    let dir = std::env::temp_dir().join(format!("dpustack-normal-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let flows = dir.join("flows.txt");
    std::fs::write(&flows, "actions=NORMAL\n").unwrap();
    let sw = Switch::start(SwitchOpts {
        flows: Some(flows),
        groups: None,
        ports: (1..=4)
            .map(|i| format!("{i}=afpacket:{}", sw_if(i)))
            .collect(),
        duration: Some(Duration::from_secs(120)),
        max_idle_ms: 10_000,
        openflow: Default::default(),
        dp: Default::default(),
        vlans: vec![
            "1:tag=10".into(),
            "2:tag=10;trunks=20;vlan_mode=native-untagged".into(),
            "3:tag=20".into(),
            "4:trunks=10,20".into(),
        ],
        mac_aging_s: 4,
        mac_table_size: 8192,
    })
    .expect("switch start");
    let ctl = sw.control();

    let dump = |what: &str| {
        format!(
            "{what}\nfdb:\n{}\ndatapath:\n{}",
            ctl.text(Ctl::FdbShow).unwrap_or_default(),
            ctl.text(Ctl::DumpFlows).unwrap_or_default()
        )
    };
    assert!(
        ping(h1, "10.20.10.2"),
        "{}",
        dump("h1 -> h2 (VLAN 10: access and native-untagged)")
    );
    assert!(ping(h1, "10.20.10.4"), "h1 -> trunk host (tagged 10)");
    assert!(ping(h3, "10.20.20.4"), "h3 -> trunk host (tagged 20)");
    assert!(ping(h2, "10.20.10.1"), "h2 -> h1");
    let seen = trunk.seen();
    eprintln!("trunk host saw tags {seen:?}");
    assert!(seen.contains(&10) && seen.contains(&20), "{seen:?}");
    assert!(!seen.contains(&0), "untagged frame on the trunk: {seen:?}");

    let mac = |ns: &str, dev: &str| -> String {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/address"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let fdb = ctl.text(Ctl::FdbShow).unwrap();
    eprintln!("fdb after the pings:\n{fdb}");
    let has = |fdb: &str, port: u32, vlan: u16, m: &str| {
        fdb.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 3 && w[0] == port.to_string() && w[1] == vlan.to_string() && w[2] == m
        })
    };
    let (m1, m2, m3) = (mac(h1, "eth0"), mac(h2, "eth0"), mac(h3, "eth0"));
    assert!(has(&fdb, 1, 10, &m1), "h1 on port 1 VLAN 10:\n{fdb}");
    assert!(has(&fdb, 2, 10, &m2), "h2 on port 2 VLAN 10:\n{fdb}");
    assert!(has(&fdb, 3, 20, &m3), "h3 on port 3 VLAN 20:\n{fdb}");
    assert!(
        has(&fdb, 4, 10, TRUNK_MAC_S),
        "trunk host on port 4 VLAN 10:\n{fdb}"
    );
    assert!(
        has(&fdb, 4, 20, TRUNK_MAC_S),
        "trunk host on port 4 VLAN 20:\n{fdb}"
    );
    assert!(!has(&fdb, 3, 10, &m3), "h3 never in VLAN 10:\n{fdb}");

    // none across VLANs (the trunk host's entries may age meanwhile)
    assert!(
        !ping(h1, "10.20.10.3"),
        "h1 -> h3 must fail: h3 is in VLAN 20"
    );
    assert!(
        !ping(h2, "10.20.10.3"),
        "h2 -> h3 must fail: h3 is in VLAN 20"
    );
    assert!(
        !ping(h3, "10.20.10.4"),
        "h3 -> 10.20.10.4 must fail: only in VLAN 10"
    );
    let fdb = ctl.text(Ctl::FdbShow).unwrap();
    assert!(!has(&fdb, 3, 10, &m3), "h3 never in VLAN 10:\n{fdb}");

    // aging: 4 s without traffic (the sweep runs every 0.5 s)
    let t0 = Instant::now();
    let mut left = fdb.lines().count() - 1;
    while left > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(250));
        let f = ctl.text(Ctl::FdbShow).unwrap();
        left = f.lines().count() - 1;
    }
    let aged = t0.elapsed();
    assert_eq!(left, 0, "fdb not empty 10 s after the traffic stopped");
    eprintln!(
        "fdb empty {:.1} s after the last ping (aging 4 s)",
        aged.as_secs_f64()
    );
    assert!(
        aged >= Duration::from_secs(1),
        "entries went too early: {aged:?}"
    );
    // and learning starts over: by an upcall, or -- when the ping hits a megaflow the
    // revalidator kept through the aging -- at the next stats push of that megaflow
    // (OVS's xlate cache learns there too), within a revalidator round (0.5 s)
    assert!(ping(h1, "10.20.10.2"), "h1 -> h2 again");
    let t0 = Instant::now();
    let mut fdb = ctl.text(Ctl::FdbShow).unwrap();
    while !has(&fdb, 1, 10, &m1) && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        fdb = ctl.text(Ctl::FdbShow).unwrap();
    }
    assert!(
        has(&fdb, 1, 10, &m1),
        "h1 not learned again within 3 s:\n{fdb}"
    );
    eprintln!(
        "h1 learned again {:.2} s after the ping",
        t0.elapsed().as_secs_f64()
    );
    let stats = ctl.text(Ctl::DumpRules(String::new())).unwrap();
    eprintln!("{stats}");
    sw.stop().unwrap();
    trunk.stop();
    let _ = sh(&["ip", "link", "del", &t_sw]);
    let _ = std::fs::remove_dir_all(&dir);
}

const TRUNK_MAC: [u8; 6] = [0x02, 0x20, 0, 0, 0, 0x04];
const TRUNK_MAC_S: &str = "02:20:00:00:00:04";

/// The trunk host: answers ARP requests and pings for 10.20.V.4 arriving tagged V
/// (V = 10, 20), tagged V; records the tags it sees (0 = untagged).
struct TrunkHost {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<u16>>>,
    th: std::thread::JoinHandle<()>,
}

impl TrunkHost {
    fn start(ifname: &str) -> TrunkHost {
        let sock = flow::driver::AfPacket::open(ifname).expect("AF_PACKET on the trunk host");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let (s2, seen2) = (stop.clone(), seen.clone());
        let th = std::thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !s2.load(std::sync::atomic::Ordering::SeqCst) {
                flow::driver::poll_readable(&[sock.fd()], 20);
                while let Ok(Some(n)) = sock.recv(&mut buf) {
                    let f = &buf[..n];
                    if n < 14 || f[6..12] == TRUNK_MAC {
                        continue;
                    }
                    let tagged = f[12..14] == [0x81, 0x00];
                    let vid = if tagged {
                        u16::from_be_bytes([f[14], f[15]]) & 0xfff
                    } else {
                        0
                    };
                    seen2.lock().unwrap().insert(vid);
                    if let Some(r) = answer(f, vid) {
                        let _ = sock.send(&r);
                    }
                }
            }
        });
        TrunkHost { stop, seen, th }
    }
    fn seen(&self) -> std::collections::BTreeSet<u16> {
        self.seen.lock().unwrap().clone()
    }
    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.th.join();
    }
}

fn csum(b: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The reply to `f` (tagged `vid`), if it is an ARP request or an echo request for
/// 10.20.vid.4.
fn answer(f: &[u8], vid: u16) -> Option<Vec<u8>> {
    if vid != 10 && vid != 20 {
        return None;
    }
    let me = [10u8, 20, vid as u8, 4];
    let p = &f[18..];
    let et = u16::from_be_bytes([f[16], f[17]]);
    let mut out = Vec::with_capacity(f.len());
    out.extend_from_slice(&f[6..12]);
    out.extend_from_slice(&TRUNK_MAC);
    out.extend_from_slice(&f[12..16]);
    if et == 0x0806 && p.len() >= 28 && p[6..8] == [0, 1] && p[24..28] == me {
        out.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
        out.extend_from_slice(&TRUNK_MAC);
        out.extend_from_slice(&me);
        out.extend_from_slice(&p[8..14]);
        out.extend_from_slice(&p[14..18]);
        return Some(out);
    }
    if et == 0x0800 && p.len() >= 28 && p[9] == 1 && p[16..20] == me {
        let ihl = usize::from(p[0] & 0xf) * 4;
        let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
        if p.len() < total || total < ihl + 8 || p[ihl] != 8 {
            return None;
        }
        let mut ip = p[..total].to_vec();
        let (src, dst) = (ip[12..16].to_vec(), ip[16..20].to_vec());
        ip[12..16].copy_from_slice(&dst);
        ip[16..20].copy_from_slice(&src);
        ip[8] = 64;
        ip[10..12].copy_from_slice(&[0, 0]);
        let c = csum(&ip[..ihl]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[ihl] = 0; // echo reply
        ip[ihl + 2..ihl + 4].copy_from_slice(&[0, 0]);
        let c = csum(&ip[ihl..]);
        ip[ihl + 2..ihl + 4].copy_from_slice(&c.to_be_bytes());
        out.extend_from_slice(&[0x08, 0x00]);
        out.extend_from_slice(&ip);
        return Some(out);
    }
    None
}
