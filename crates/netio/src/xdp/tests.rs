//! Root-only end-to-end checks on `lo` inside a private network namespace (the
//! test thread unshares its own; nothing touches the host's interfaces).
//! `#[ignore]`d: they need root, AF_XDP and BPF. scripts/test-all.sh runs them with
//! `--ignored` as root (CI), where not being root, a failed unshare or a port that
//! does not open is a failure, not a skip.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use super::frame::UdpFlow;
use super::port::XdpPort;
use super::XdpConfig;

/// Runs `f` in a new thread inside a fresh network namespace with `lo` up; panics
/// (the test fails) when that cannot be done.
fn in_private_netns(f: impl FnOnce() + Send + 'static) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "xdp lo test needs root (run with --ignored only as root)"
    );
    std::thread::spawn(move || {
        // SAFETY: affects only this thread (and what it spawns/forks).
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
        }
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        assert!(
            up.is_ok_and(|s| s.success()),
            "ip link set lo up failed (iproute2 missing?)"
        );
        f();
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

#[test]
#[ignore = "needs root, AF_XDP and BPF: run with --ignored as root"]
fn port_on_lo_steers_only_its_prefix_and_port() {
    in_private_netns(|| {
        let net = Ipv4Addr::new(127, 0, 0, 0);
        let p = XdpPort::open("lo", net, 8, 4791, XdpConfig::default())
            .unwrap_or_else(|e| panic!("AF_XDP port on lo, as root: {e}"));
        let (a, b) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
        p.rx().register(a);
        p.rx().register(b);
        let mac = p.tx().mac();
        let flow = UdpFlow {
            src_mac: mac,
            dst_mac: mac,
            src_ip: a,
            dst_ip: b,
            src_port: 4791,
            dst_port: 4791,
            tos: 0,
        };
        // Two frames, the first staged late: it must arrive second.
        {
            let mut tx = p.tx();
            assert!(tx.stage(|buf| {
                buf[..3].copy_from_slice(b"ack");
                Some((3, flow, true))
            }));
            assert!(tx.stage(|buf| {
                buf[..4].copy_from_slice(b"data");
                Some((4, flow, false))
            }));
            tx.flush().unwrap();
        }
        // A kernel UDP socket sending to b:4791 is steered too; to b:4792 it is not.
        let k = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind(SocketAddrV4::new(b, 4792)).unwrap();
        other
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        k.send_to(b"sock", SocketAddrV4::new(b, 4791)).unwrap();
        k.send_to(b"pass", SocketAddrV4::new(b, 4792)).unwrap();
        // Polling for `a` takes b's frames off the ring and queues them for b.
        let t0 = Instant::now();
        let mut for_a = 0;
        let mut got: Vec<Vec<u8>> = Vec::new();
        while got.len() < 3 && t0.elapsed() < Duration::from_secs(2) {
            for_a += p.rx().recv_for(a, 64, |_| ());
            if t0.elapsed() > Duration::from_millis(100) {
                p.rx().recv_for(b, 64, |u| {
                    assert_eq!((u.dst_ip, u.dst_port), (b, 4791));
                    got.push(u.payload.to_vec());
                });
            }
        }
        assert_eq!(for_a, 0);
        assert_eq!(
            got,
            vec![b"data".to_vec(), b"ack".to_vec(), b"sock".to_vec()]
        );
        let mut buf = [0u8; 16];
        let (n, _) = other
            .recv_from(&mut buf)
            .expect("port 4792 goes to the kernel");
        assert_eq!(&buf[..n], b"pass");
        assert_eq!(p.tx().tx_frames(), 2);
        assert_eq!(p.rx().rx_frames(), 3);
    });
}
