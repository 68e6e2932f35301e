//! The OpenFlow channel's bounds, on a running switch (pcap ports, no root): past
//! `max_connections` a connection is closed at accept; a controller that does not
//! read loses PACKET_INs at `async_backlog` (counted, connection kept); a peer
//! that sends requests without reading the replies is closed past `max_backlog`.
//! Each shows in `switch stats` (`Command::Stats`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use openflow::action::Action;
use openflow::consts::{port, OFP13_VERSION};
use openflow::msg::{Message, PacketOut};
use switch::control::{channel, Command, Stats};
use switch::{StopHandle, SwitchOpts};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn hello(s: &mut TcpStream) {
    s.write_all(
        &Message::Hello {
            bitmap: Some(1 << OFP13_VERSION),
        }
        .to_vec(OFP13_VERSION, 1),
    )
    .unwrap();
}

fn wait_for(ctl: &switch::control::Control, what: &str, f: impl Fn(&Stats) -> bool) -> Stats {
    let t0 = Instant::now();
    loop {
        let st = ctl.stats().unwrap();
        if f(&st) {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}: {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connections_packet_ins_and_backlog_are_bounded() {
    let dir = std::env::temp_dir().join(format!("dpustack-of-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = free_port();
    let mut opts = SwitchOpts {
        flows: None,
        groups: None,
        vlans: Vec::new(),
        mac_aging_s: 300,
        mac_table_size: 8192,
        ports: vec![
            format!("1=pcap-tx:{}", dir.join("p1.pcap").display()),
            format!("2=pcap-tx:{}", dir.join("p2.pcap").display()),
        ],
        duration: Some(Duration::from_secs(60)),
        max_idle_ms: 10_000,
        openflow: Default::default(),
        dp: Default::default(),
    };
    opts.openflow.listen = vec![format!("ptcp:{p}:127.0.0.1")];
    opts.openflow.probe_ms = 0;
    opts.openflow.max_connections = 2;
    opts.openflow.async_backlog = 64 << 10;
    opts.openflow.max_backlog = 1 << 20;
    let (ctl, crx) = channel().unwrap();
    let stop = StopHandle::new();
    let s2 = stop.clone();
    let sw = std::thread::spawn(move || {
        let mut log = Vec::new();
        let r = switch::run(&opts, &s2, &crx, &mut log);
        (r, String::from_utf8(log).unwrap())
    });
    let addr = format!("127.0.0.1:{p}");
    let connect = || {
        let t0 = Instant::now();
        loop {
            match TcpStream::connect(&addr) {
                Ok(s) => return s,
                Err(e) => assert!(t0.elapsed() < Duration::from_secs(10), "{e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // Two connections up; the third is closed at accept.
    let mut a = connect();
    let mut b = connect();
    hello(&mut a);
    hello(&mut b);
    wait_for(&ctl, "two connections up", |s| s.of_connections == 2);
    let mut c = connect();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "third connection served");
    let st = wait_for(&ctl, "refusal counted", |s| s.of_connections_refused == 1);
    assert_eq!(st.of_connections, 2, "{st:?}");

    // PACKET_OUTs to CONTROLLER, nobody reads: PACKET_INs are dropped at the
    // async bound, the connections stay.
    let po = Message::PacketOut(PacketOut {
        buffer_id: u32::MAX,
        in_port: port::CONTROLLER,
        actions: vec![Action::Output {
            port: port::CONTROLLER,
            max_len: 0xffff,
        }],
        data: &[0x5a; 1400],
    })
    .to_vec(OFP13_VERSION, 7);
    let mut burst = Vec::new();
    for _ in 0..1000 {
        burst.extend_from_slice(&po);
    }
    for _ in 0..20 {
        a.write_all(&burst).unwrap();
    }
    let st = wait_for(&ctl, "packet-ins dropped", |s| s.of_packet_ins_dropped > 0);
    assert!(st.of_async_dropped >= st.of_packet_ins_dropped, "{st:?}");
    assert_eq!((st.of_connections, st.of_backlog_closes), (2, 0), "{st:?}");

    // Requests whose replies are never read: closed past max_backlog.
    let echo = Message::EchoRequest(&[0xee; 60_000]).to_vec(OFP13_VERSION, 9);
    let t = std::thread::spawn(move || {
        for _ in 0..1000 {
            if b.write_all(&echo).is_err() {
                break;
            }
        }
    });
    let st = wait_for(&ctl, "backlog close", |s| s.of_backlog_closes == 1);
    t.join().unwrap();
    // Its slot is free again.
    let mut d = connect();
    hello(&mut d);
    wait_for(&ctl, "new connection up", |s| s.of_connections == 2);
    assert_eq!(st.of_connections_refused, 1, "{st:?}");
    let text = ctl.text(Command::Stats).unwrap();
    for k in [
        "of_connections_refused 1",
        "of_backlog_closes 1",
        "of_packet_ins_dropped ",
    ] {
        assert!(text.contains(k), "{k} not in {text}");
    }
    stop.stop();
    let (r, log) = sw.join().unwrap();
    r.unwrap();
    assert!(log.contains("refused"), "{log}");
    assert!(log.contains("output backlog"), "{log}");
    drop((a, c, d));
    let _ = std::fs::remove_dir_all(&dir);
}
