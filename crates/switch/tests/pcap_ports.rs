//! The switch loop on pcap ports (no privileges needed): a replayed frame is
//! switched by the table into the capture port, control commands are answered and
//! stop the loop, a handle to a stopped loop says so.

use std::time::Duration;

use switch::control::{channel, Command, Reply};
use switch::{StopHandle, Switch, SwitchOpts};

const FRAME: &str = "020000000002020000000001080045000068000000004006aed8c0a801070a0000099c40005000000000000000005000000063580000000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

fn frame() -> Vec<u8> {
    (0..FRAME.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&FRAME[i..i + 2], 16).unwrap())
        .collect()
}

/// A classic pcap (microsecond, Ethernet) holding `frames`.
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = wire::pcap::PcapWriter::new(Vec::new(), wire::pcap::LinkType::Ethernet).unwrap();
    for f in frames {
        w.write(Duration::ZERO, f).unwrap();
    }
    w.into_inner()
}

/// Frames of a classic pcap file.
fn frames_of(p: &[u8]) -> Vec<Vec<u8>> {
    let mut b = &p[24..];
    let mut out = Vec::new();
    while b.len() >= 16 {
        let l = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        out.push(b[16..16 + l].to_vec());
        b = &b[16 + l..];
    }
    out
}

#[test]
fn pcap_replay_through_the_table_and_ctl_stop() {
    let dir = std::env::temp_dir().join(format!("dpustack-switch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rx, tx, flows) = (
        dir.join("in.pcap"),
        dir.join("out.pcap"),
        dir.join("flows.txt"),
    );
    std::fs::write(&rx, pcap(&[frame()])).unwrap();
    std::fs::write(
        &flows,
        "priority=200,in_port=1,tcp,nw_src=192.168.1.0/24,tp_dst=80,actions=mod_vlan_vid:100,output:3\npriority=0,actions=drop\n",
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
        duration: Some(Duration::from_secs(20)),
        max_idle_ms: 10_000,
        openflow: Default::default(),
        dp: Default::default(),
    };
    let (ctl, crx) = channel().unwrap();
    let sw = std::thread::spawn(move || {
        let mut log = Vec::new();
        let r = switch::run(&opts, &StopHandle::new(), &crx, &mut log);
        (r, String::from_utf8(log).unwrap())
    });
    // read the rule's counters once the frame went through
    let mut rules = String::new();
    for _ in 0..500 {
        rules = ctl.text(Command::DumpRules(String::new())).unwrap();
        if rules.contains("n_packets=1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(rules.contains("n_packets=1, n_bytes=118"), "{rules}");
    let st = ctl.stats().unwrap();
    assert_eq!(
        (st.rx_packets, st.tx_packets, st.rules),
        (1, 1, 2),
        "{st:?}"
    );
    assert_eq!(st.upcalls, 1, "{st:?}");
    // an error answer from the running switch
    let e = ctl.call(Command::DelFlows("bogus=1".into())).unwrap_err();
    assert!(matches!(e, switch::Error::Remote(_)), "{e:?}");
    assert_eq!(ctl.call(Command::Stop).unwrap(), Reply::Stopping);
    let (r, log) = sw.join().unwrap();
    r.unwrap();
    assert!(log.starts_with("switch running: 2 ports, 2 rules"), "{log}");
    assert!(log.contains("switch stopped: rx 1 tx 1"), "{log}");
    let e = ctl.call(Command::DumpFlows).unwrap_err();
    assert!(matches!(e, switch::Error::Stopped), "{e:?}");
    let out = frames_of(&std::fs::read(&tx).unwrap());
    assert_eq!(out.len(), 1);
    // VLAN 100 pushed: TPID 0x8100 after the MACs, 4 bytes longer
    assert_eq!(&out[0][12..14], &[0x81, 0x00]);
    assert_eq!(u16::from_be_bytes([out[0][14], out[0][15]]) & 0xfff, 100);
    assert_eq!(out[0].len(), frame().len() + 4);
    // a missing port file keeps the threaded switch from starting, with the cause
    let bad = SwitchOpts {
        flows: None,
        groups: None,
        vlans: Vec::new(),
        mac_aging_s: 300,
        mac_table_size: 8192,
        ports: vec![format!("1=pcap-rx:{}", dir.join("missing.pcap").display())],
        duration: None,
        max_idle_ms: 10_000,
        openflow: Default::default(),
        dp: Default::default(),
    };
    let e = Switch::start(bad).err().expect("start fails");
    assert!(e.to_string().starts_with("opening "), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
