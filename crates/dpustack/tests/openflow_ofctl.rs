//! The real `ovs-ofctl -O OpenFlow13` against `dpustack switch run --listen
//! ptcp:PORT:127.0.0.1` (four pcap-tx ports, no privileges), and the same commands
//! against Open vSwitch 3.1 in the oracle sandbox (`tests/oracles/ovs.sh`, ports
//! p1..p4): add-flows, mod-flows, del-flows (strict and not, cookie masks), and a
//! refused flow; `dump-flows` equal after durations are normalised, the error
//! lines equal after xids are. Then dump-aggregate, dump-tables, dump-ports, show
//! and packet-out against dpustack alone (their counters/descriptions differ from
//! OVS by design).
//!
//! `#[ignore]`d: needs `openvswitch-common` (ovs-ofctl) and `openvswitch-switch`
//! (the oracle), as the flow crate's oracle tests:
//!
//! ```sh
//! cargo test -p dpustack --test openflow_ofctl -- --ignored --nocapture
//! ```

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

struct Sw {
    child: Child,
    target: String,
    dir: PathBuf,
}

impl Sw {
    fn start(dir: &Path) -> Sw {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["switch", "run"]);
        for p in 1..=4 {
            cmd.arg("--port").arg(format!(
                "{p}=pcap-tx:{}",
                dir.join(format!("p{p}.pcap")).display()
            ));
        }
        cmd.arg("-r")
            .arg(dir.join("rpc.sock"))
            .arg("--listen")
            .arg(format!("ptcp:{port}:127.0.0.1"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "switch did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Sw {
            child,
            target: format!("tcp:127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Sw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ofctl(target: &str, args: &[&str]) -> Output {
    let (cmd, rest) = args.split_first().unwrap();
    Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", cmd, target])
        .args(rest)
        .output()
        .expect("run ovs-ofctl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Durations, xids and OVS's own reply header line differ between runs/switches.
fn normalise(s: &str) -> String {
    let mut out = Vec::new();
    for l in s.lines() {
        let mut l = l.to_string();
        for key in ["duration=", "xid=0x"] {
            while let Some(p) = l.find(key) {
                let rest = &l[p + key.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == 's'))
                    .unwrap_or(rest.len());
                l = format!("{}{}#{}", &l[..p], key.replace('=', "~"), &rest[end..]);
            }
        }
        out.push(l);
    }
    out.join("\n")
}

fn sorted(s: &str) -> String {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort_unstable();
    v.join("\n")
}

struct Oracle {
    sh: PathBuf,
    dir: PathBuf,
}

impl Oracle {
    fn start() -> Oracle {
        let sh = std::env::var_os("OVS_SH")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/oracles/ovs.sh")
            });
        let dir = PathBuf::from(format!("/tmp/dps-ofovs-{}", std::process::id()));
        let o = Oracle { sh, dir };
        let st = o.sh(&["start", o.dir.to_str().unwrap()]);
        assert!(st.status.success(), "ovs.sh start: {}", text(&st));
        o
    }
    fn sh(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(&self.sh)
            .args(args)
            .env("OVS_ORACLE_DIR", &self.dir)
            .output()
            .unwrap()
    }
    fn target(&self) -> String {
        format!("unix:{}/br0.mgmt", self.dir.display())
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.sh(&["stop"]);
    }
}

const FLOWS: &str = "\
priority=200,in_port=1,tcp,nw_dst=10.0.0.0/8,tp_dst=80,actions=output:2
priority=100,cookie=0x11,in_port=2,actions=output:1
priority=100,cookie=0x12,udp,udp_dst=53,actions=set_field:10.9.9.9->ip_dst,output:3
cookie=0x21,table=0,priority=50,dl_vlan=100,actions=strip_vlan,output:4
cookie=0x22,priority=40,arp,actions=NORMAL
cookie=0x23,priority=30,ip,nw_ttl=5,actions=dec_ttl,output:2
cookie=0x24,priority=10,ipv6,ipv6_src=fd00::/64,actions=push_vlan:0x8100,set_field:4196->vlan_vid,output:3
cookie=0x25,priority=5,reg0=0x5/0xff,actions=load:0x3->NXM_NX_REG3[4..7],resubmit(,2)
cookie=0x26,table=2,priority=5,tcp,actions=set_field:8080->tcp_dst,goto_table:3
cookie=0x27,table=3,priority=1,idle_timeout=60,hard_timeout=120,actions=controller:128
priority=0,actions=drop
";

/// The same ovs-ofctl commands against dpustack and OVS: the dumps and errors match.
#[test]
#[ignore]
fn ovs_ofctl_against_dpustack_and_ovs() {
    let dir = std::env::temp_dir().join(format!("dpustack-of13-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flows = dir.join("flows.txt");
    std::fs::write(&flows, FLOWS).unwrap();
    let sw = Sw::start(&dir);
    let ovs = Oracle::start();
    // OVS's sandbox starts with its own rules; begin both from an empty table.
    for t in [sw.target.clone(), ovs.target()] {
        let o = ofctl(&t, &["del-flows"]);
        assert!(o.status.success(), "{t}: {}", text(&o));
    }
    let f = flows.to_str().unwrap();
    let steps: Vec<Vec<&str>> = vec![
        vec!["add-flows", f],
        vec!["mod-flows", "in_port=2,actions=output:3"],
        vec![
            "mod-flows",
            "--strict",
            "priority=200,in_port=1,tcp,nw_dst=10.0.0.0/8,tp_dst=80,actions=output:4",
        ],
        vec!["mod-flows", "cookie=0x20/0xf0,actions=output:1"],
        vec![
            "del-flows",
            "--strict",
            "priority=100,cookie=0x12,udp,udp_dst=53",
        ],
        vec!["del-flows", "cookie=0x24/-1"],
        vec!["add-flow", "priority=7,tcp,tp_src=22,actions=group:9"],
        vec!["add-flow", "priority=7,tcp,tp_src=22,actions=output:2"],
        vec!["del-flows", "table=2"],
        vec!["del-flows", "ip"],
    ];
    for st in &steps {
        let a = ofctl(&sw.target, st);
        let b = ofctl(&ovs.target(), st);
        assert_eq!(
            (a.status.success(), normalise(&text(&a))),
            (b.status.success(), normalise(&text(&b))),
            "{st:?}: dpustack (left) vs OVS (right)"
        );
        // Rules of equal priority come in classifier order, which differs: compare
        // the dumps as sets of lines.
        let da = ofctl(&sw.target, &["dump-flows", "--sort"]);
        let db = ofctl(&ovs.target(), &["dump-flows", "--sort"]);
        assert!(da.status.success(), "{}", text(&da));
        let (na, nb) = (
            sorted(&normalise(&text(&da))),
            sorted(&normalise(&text(&db))),
        );
        println!("after {st:?}:\n{na}");
        assert_eq!(
            na, nb,
            "dump-flows after {st:?}: dpustack (left) vs OVS (right)"
        );
    }
    // Non-strict dump with a match and a table, and cookie filters, too.
    for q in [
        vec!["dump-flows", "--sort", "cookie=0x11/-1"],
        vec!["dump-flows", "--sort", "table=3"],
        vec!["dump-flows", "--sort", "arp"],
    ] {
        let (a, b) = (ofctl(&sw.target, &q), ofctl(&ovs.target(), &q));
        assert_eq!(
            sorted(&normalise(&text(&a))),
            sorted(&normalise(&text(&b))),
            "{q:?}"
        );
    }
    let agg = text(&ofctl(&sw.target, &["dump-aggregate"]));
    let agg_ovs = text(&ofctl(&ovs.target(), &["dump-aggregate"]));
    assert_eq!(normalise(&agg), normalise(&agg_ovs), "dump-aggregate");
    drop(sw);
}

/// show, dump-ports, dump-tables, packet-out and errors against dpustack alone.
#[test]
#[ignore]
fn ovs_ofctl_show_ports_tables_packet_out() {
    let dir = std::env::temp_dir().join(format!("dpustack-of13b-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sw = Sw::start(&dir);
    let show = text(&ofctl(&sw.target, &["show"]));
    assert!(show.contains("OFPT_FEATURES_REPLY (OF1.3)"), "{show}");
    assert!(show.contains("dpid:0000000000000001"), "{show}");
    for p in 1..=4 {
        assert!(show.contains(&format!(" {p}(p{p}): addr:")), "{show}");
    }
    let o = ofctl(
        &sw.target,
        &["add-flow", "table=0,priority=1,in_port=1,actions=output:2"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let tables = text(&ofctl(&sw.target, &["dump-tables"]));
    assert!(
        tables.contains("table 0:") && tables.contains("active=1"),
        "{tables}"
    );
    // packet-out: a frame from the controller out of port 3.
    let frame =
        "ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002";
    let po = format!("in_port=CONTROLLER,packet={frame},actions=output:3");
    let o = ofctl(&sw.target, &["packet-out", &po]);
    assert!(o.status.success(), "{}", text(&o));
    // Port 3 counted one frame out.
    let t0 = Instant::now();
    loop {
        let ports = text(&ofctl(&sw.target, &["dump-ports", "3"]));
        if ports.contains("tx pkts=1,") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{ports}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A truncated FLOW_MOD on a raw connection gets OFPBRC_BAD_LEN; others go on.
    let o = ofctl(&sw.target, &["dump-flows"]);
    assert!(
        text(&o).contains("in_port=1 actions=output:2"),
        "{}",
        text(&o)
    );
    let _ = sw.dir.clone();
}

/// A minimal OpenFlow 1.3 client over any stream (TCP to dpustack, the Unix
/// management socket to OVS): HELLO, then FLOW_MODs and a BARRIER.
struct Client<S: std::io::Read + std::io::Write> {
    s: S,
    buf: Vec<u8>,
}

impl<S: std::io::Read + std::io::Write> Client<S> {
    fn new(mut s: S) -> Client<S> {
        use openflow::msg::Message;
        s.write_all(
            &Message::Hello {
                bitmap: Some(1 << 4),
            }
            .to_vec(4, 1),
        )
        .unwrap();
        let mut c = Client { s, buf: Vec::new() };
        let (t, _) = c.recv();
        assert_eq!(t, openflow::consts::t::HELLO);
        c
    }
    /// The next message: (type, xid).
    fn recv(&mut self) -> (u8, u32) {
        loop {
            if let Ok(Some(n)) = openflow::header::frame_len(&self.buf) {
                let h = openflow::Header::parse(&self.buf).unwrap();
                self.buf.drain(..n);
                return (h.msg_type, h.xid);
            }
            let mut b = [0u8; 65536];
            let n = self.s.read(&mut b).unwrap();
            assert!(n > 0, "peer closed");
            self.buf.extend_from_slice(&b[..n]);
        }
    }
    /// Adds `n` distinct flows (one write of all FLOW_MODs + a BARRIER), waits for
    /// the BARRIER reply; returns the seconds it took.
    fn add_flows(&mut self, base: u32, n: u32) -> f64 {
        use openflow::action::{Action, Instruction};
        use openflow::msg::{FlowMod, Message};
        use openflow::oxm::{basic, Oxm};
        let mut out = Vec::new();
        for i in 0..n {
            let ip = (10u32 << 24) | (base + i);
            Message::FlowMod(FlowMod {
                cookie: 0,
                cookie_mask: 0,
                table_id: 0,
                command: openflow::consts::fc::ADD,
                idle_timeout: 0,
                hard_timeout: 0,
                priority: 100,
                buffer_id: u32::MAX,
                out_port: u32::MAX,
                out_group: u32::MAX,
                flags: 0,
                matches: vec![
                    Oxm::basic(basic::ETH_TYPE, &[8, 0]),
                    Oxm::basic(basic::IPV4_DST, &ip.to_be_bytes()),
                ],
                instructions: vec![Instruction::ApplyActions(vec![Action::Output {
                    port: 2,
                    max_len: 0,
                }])],
            })
            .emit(4, 100 + i, &mut out);
        }
        Message::BarrierRequest.emit(4, 7, &mut out);
        let t0 = Instant::now();
        self.s.write_all(&out).unwrap();
        loop {
            let (t, x) = self.recv();
            assert_ne!(t, openflow::consts::t::ERROR, "flow mod refused");
            if t == openflow::consts::t::BARRIER_REPLY && x == 7 {
                return t0.elapsed().as_secs_f64();
            }
        }
    }
}

fn median_spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// FLOW_MOD add rate with a BARRIER (flows/s), dpustack and OVS in the same run:
/// `RUNS` rounds of `N` new flows each (distinct nw_dst), alternating the two.
/// Prints median and spread (min..max) and the ratio dpustack / OVS.
#[test]
#[ignore]
fn flow_mod_rate_vs_ovs() {
    const N: u32 = 2000;
    let runs: usize = std::env::var("DPUSTACK_OF_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = std::env::temp_dir().join(format!("dpustack-of13c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sw = Sw::start(&dir);
    let ovs = Oracle::start();
    let o = ofctl(&ovs.target(), &["del-flows"]);
    assert!(o.status.success());
    let port: u16 = sw.target.rsplit(':').next().unwrap().parse().unwrap();
    let mut a = Client::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    let mut b =
        Client::new(std::os::unix::net::UnixStream::connect(ovs.dir.join("br0.mgmt")).unwrap());
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for r in 0..runs {
        let base = (r as u32 + 1) * 100_000;
        ra.push(N as f64 / a.add_flows(base, N));
        rb.push(N as f64 / b.add_flows(base, N));
    }
    let (ma, la, ha) = median_spread(ra);
    let (mb, lb, hb) = median_spread(rb);
    println!(
        "FLOW_MOD add + BARRIER, {N} flows per round, {runs} rounds (table growing to {} flows):",
        N as usize * runs
    );
    println!("  dpustack: median {ma:.0} flows/s (min {la:.0}, max {ha:.0})");
    println!("  OVS 3.1 : median {mb:.0} flows/s (min {lb:.0}, max {hb:.0})");
    println!("  ratio dpustack/OVS: {:.2}", ma / mb);
    // Both tables hold every flow.
    let agg = text(&ofctl(&sw.target, &["dump-aggregate"]));
    assert!(
        agg.contains(&format!("flow_count={}", N as usize * runs)),
        "{agg}"
    );
}

/// Issue 17 (field syntax): rules written with ovs-fields(7) aliases and writes to every
/// writable field, sent by ovs-ofctl over OpenFlow 1.3 (set-field, NXAST_REG_LOAD,
/// NXAST_REG_MOVE, set_nw_ttl) to dpustack and to OVS: the same dump-flows, and the same
/// refusals (a set_field whose prerequisites the match does not meet, a write to a
/// read-only field).
const FIELD_FLOWS: &str = "\
priority=100,in_port=1,tcp,actions=set_field:8080->tp_dst,set_field:81->tp_src,output:2
priority=100,in_port=1,udp,actions=set_field:53->udp_dst,load:0x35->NXM_OF_UDP_SRC[],set_field:5/0xf->udp_src,output:2
priority=100,in_port=1,sctp,actions=set_field:99->sctp_dst,set_field:0x5/0xf->sctp_src,move:OXM_OF_SCTP_DST[0..7]->OXM_OF_SCTP_SRC[8..15],output:2
priority=100,in_port=1,icmp,actions=set_field:0->icmp_type,move:NXM_OF_ICMP_TYPE[]->NXM_OF_ICMP_CODE[],output:2
priority=100,in_port=1,arp,actions=set_field:2->arp_op,set_field:1.1.1.1->arp_spa,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],output:2
priority=90,in_port=2,ipv4,actions=set_field:7->nw_ttl,set_field:1->ip_ecn,mod_nw_ttl:5,load:0x3f->NXM_OF_IP_TOS[2..7],set_field:1.2.3.4/255.255.0.0->ip_src,output:3
priority=90,in_port=2,ip6,ipv6_label=0x5,actions=set_field:0x12345->ipv6_label,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],output:3
priority=95,in_port=2,icmp6,icmpv6_type=135,icmpv6_code=0,actions=set_field:fe80::1->nd_target,set_field:00:11:22:33:44:55->nd_sll,output:3
priority=80,in_port_oxm=3,eth_type=0x0800,ip_proto=17,ip_frag=no,tp_dst=53,actions=move:NXM_OF_IN_PORT[]->NXM_NX_REG0[0..15],set_field:4->in_port,output:1
priority=80,in_port=4,dl_vlan=5,actions=load:7->NXM_OF_VLAN_TCI[0..11],output:1
";

#[test]
#[ignore]
fn field_writes_over_openflow_against_dpustack_and_ovs() {
    let dir = std::env::temp_dir().join(format!("dpustack-of17-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flows = dir.join("flows.txt");
    std::fs::write(&flows, FIELD_FLOWS).unwrap();
    let sw = Sw::start(&dir);
    let ovs = Oracle::start();
    for t in [sw.target.clone(), ovs.target()] {
        let o = ofctl(&t, &["del-flows"]);
        assert!(o.status.success(), "{t}: {}", text(&o));
    }
    let f = flows.to_str().unwrap();
    let steps: Vec<Vec<&str>> = vec![
        vec!["add-flows", f],
        // refused by both: tp_dst is TCP's; nw_proto is read-only
        vec!["add-flow", "priority=7,udp,actions=set_field:80->tp_dst"],
        vec![
            "add-flow",
            "priority=7,ip,actions=move:NXM_NX_REG0[0..7]->NXM_OF_IP_PROTO[]",
        ],
        vec![
            "mod-flows",
            "in_port=2,ipv4,actions=set_field:9->nw_ttl,output:1",
        ],
    ];
    for st in &steps {
        let a = ofctl(&sw.target, st);
        let b = ofctl(&ovs.target(), st);
        assert_eq!(
            a.status.success(),
            b.status.success(),
            "{st:?}: dpustack {} / OVS {}",
            text(&a),
            text(&b)
        );
        let da = ofctl(&sw.target, &["dump-flows", "--sort"]);
        let db = ofctl(&ovs.target(), &["dump-flows", "--sort"]);
        assert!(da.status.success(), "{}", text(&da));
        let (na, nb) = (
            sorted(&normalise(&text(&da))),
            sorted(&normalise(&text(&db))),
        );
        println!("after {st:?}:\n{na}");
        assert_eq!(
            na, nb,
            "dump-flows after {st:?}: dpustack (left) vs OVS (right)"
        );
    }
    drop(sw);
}
