//! The live switch with hw-offload on (pcap ports, no privileges): the replayed
//! flow is offloaded by the tc provider of the emulated NIC, `dump-flows` shows it
//! (`offloaded:yes, dp:tc`), `offload-stats` counts it, `config` turns offload off
//! and changes max-idle / flow-limit live, bad settings are refused.

use std::time::Duration;

use switch::control::{channel, Command, Control};
use switch::{DatapathOpts, StopHandle, SwitchOpts};

fn frame(dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 60];
    p[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    p[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    p[12..14].copy_from_slice(&[0x08, 0]);
    p[14] = 0x45;
    p[16..18].copy_from_slice(&46u16.to_be_bytes());
    p[22] = 64;
    p[23] = 17;
    p[26..30].copy_from_slice(&[10, 0, 0, 1]);
    p[30..34].copy_from_slice(&[10, 0, 0, 2]);
    p[34..36].copy_from_slice(&1000u16.to_be_bytes());
    p[36..38].copy_from_slice(&dport.to_be_bytes());
    p[38..40].copy_from_slice(&26u16.to_be_bytes());
    flow::exec::fix_checksums(&mut p);
    p
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = wire::pcap::PcapWriter::new(Vec::new(), wire::pcap::LinkType::Ethernet).unwrap();
    for f in frames {
        w.write(Duration::ZERO, f).unwrap();
    }
    w.into_inner()
}

/// Polls the switch until `pred` holds for the answer to `cmd` (bounded).
fn wait_for(ctl: &Control, cmd: Command, pred: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..1000 {
        if let Ok(r) = ctl.text(cmd.clone()) {
            if pred(&r) {
                return r;
            }
            last = r;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{cmd:?}: never as expected; last answer:\n{last}");
}

#[test]
fn live_switch_offloads_and_shows_it() {
    let dir = std::env::temp_dir().join(format!("dpustack-offload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rx, tx, flows) = (
        dir.join("in.pcap"),
        dir.join("out.pcap"),
        dir.join("flows.txt"),
    );
    std::fs::write(&rx, pcap(&[frame(53), frame(53), frame(54)])).unwrap();
    std::fs::write(
        &flows,
        "priority=10,udp,tp_dst=53,actions=output:3\npriority=0,actions=drop\n",
    )
    .unwrap();
    let opts = SwitchOpts {
        flows: Some(flows),
        groups: None,
        vlans: Vec::new(),
        mac_aging_s: 300,
        mac_table_size: 8192,
        ports: vec![
            format!("1=pcap-rx:{}", rx.display()),
            format!("3=pcap-tx:{}", tx.display()),
        ],
        duration: Some(Duration::from_secs(30)),
        max_idle_ms: 10_000,
        openflow: Default::default(),
        dp: DatapathOpts {
            hw_offload: true,
            offload_priority: "tc,rte".into(),
            n_offload_threads: 2,
            ..Default::default()
        },
    };
    let (ctl, crx) = channel().unwrap();
    let sw = std::thread::spawn(move || {
        let mut log = Vec::new();
        let r = switch::run(&opts, &StopHandle::new(), &crx, &mut log);
        (r, String::from_utf8(log).unwrap())
    });
    let d = wait_for(&ctl, Command::DumpFlows, |d| {
        d.lines().count() == 2 && d.lines().all(|l| l.contains("offloaded:yes, dp:tc"))
    });
    assert!(d.contains("actions:3"), "{d}");
    let st = wait_for(&ctl, Command::OffloadStats, |s| {
        s.contains("full 2 partial 0 failed 0")
    });
    assert!(
        st.contains("hw-offload: true, providers: tc,rte, offload threads: 2"),
        "{st}"
    );
    assert!(st.contains("megaflows: 2 (offloaded full 2"), "{st}");
    // Settings live; a bad one is refused and changes nothing.
    let cfg = |s: &str| ctl.text(Command::Config(s.into()));
    let e = cfg("n-offload-threads=0").unwrap_err();
    assert!(matches!(e, switch::Error::Remote(_)), "{e:?}");
    let r = cfg("max-idle=5000 flow-limit=5000").unwrap();
    assert!(r.contains("max-idle=5000 flow-limit=5000"), "{r}");
    let r = cfg("hw-offload=false").unwrap();
    assert!(r.contains("hw-offload=false"), "{r}");
    let d = ctl.text(Command::DumpFlows).unwrap();
    assert!(!d.contains("offloaded"), "{d}");
    assert_eq!(ctl.text(Command::Stop).unwrap(), "stopping\n");
    let (r, log) = sw.join().unwrap();
    r.unwrap();
    assert!(
        log.contains(
            "hw-offload on: providers tc,rte (tc, rte: an EMULATED NIC, no hardware is programmed"
        ),
        "{log}"
    );
    assert!(log.contains("switch stopped: rx 3 tx 2"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
