//! The tc-linux provider against the running kernel, in a network namespace of its
//! own (a thread that unshared CLONE_NEWNET; `ip` runs as its child, so in the same
//! namespace) with a veth pair. Needs root (says so and does nothing otherwise).
//!
//! * a kernel without cls_flower (this project's host): the probe fails, every put is
//!   refused with the kernel's errno + extack ("TC classifier not found") as the
//!   reason, and nothing is left in the kernel;
//! * a kernel with cls_flower (the QEMU guest: run this test binary there): put ->
//!   `tc filter show` lists the filter (flower, skip_hw, cookie = ufid), counters
//!   read back after frames hit it, MOD replaces it, a put the kernel refuses (prio
//!   held by another protocol's filter) fails with EINVAL and leaves nothing,
//!   del/flush remove everything.

use std::process::Command;

use flow::key::{f, FlowKey, VLAN_CFI};
use flow::offload::tc_linux::TcLinuxProvider;
use flow::offload::{FlowSpec, OffloadError, OffloadProvider};
use flow::xlate::OdpAction;

fn ip(args: &str) -> String {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("ip");
    assert!(
        o.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tc(args: &str) -> (bool, String) {
    let o = Command::new("tc")
        .args(args.split_whitespace())
        .output()
        .expect("tc");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

fn spec(dst: u64, out: u32) -> FlowSpec {
    let mut m = FlowKey::ZERO;
    for fd in [f::IN_PORT, f::DL_DST, f::DL_TYPE] {
        m.full(fd);
    }
    m.set(f::VLAN0_TCI, VLAN_CFI as u64);
    let mut k = FlowKey::ZERO;
    k.set(f::IN_PORT, 1);
    k.set(f::DL_DST, dst);
    k.set(f::DL_TYPE, 0x0800);
    FlowSpec {
        key: k,
        mask: m,
        actions: vec![OdpAction::Output(out)],
    }
}

/// A minimal IPv4 frame to `dst` sent out of `dev` (AF_PACKET).
fn send(dev: &str, dst: u64, n: usize) {
    let c = std::ffi::CString::new(dev).unwrap();
    // SAFETY: plain libc calls on valid buffers; the fd is closed at the end.
    unsafe {
        let ix = libc::if_nametoindex(c.as_ptr());
        assert!(ix != 0);
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(fd >= 0);
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ix as i32;
        let mut fr = [0u8; 60];
        fr[..6].copy_from_slice(&dst.to_be_bytes()[2..]);
        fr[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        fr[12..14].copy_from_slice(&[8, 0]);
        fr[14] = 0x45;
        fr[16..18].copy_from_slice(&46u16.to_be_bytes());
        fr[22] = 64;
        fr[23] = 17;
        for _ in 0..n {
            let r = libc::sendto(
                fd,
                fr.as_ptr() as *const libc::c_void,
                fr.len(),
                0,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(r, 60);
        }
        libc::close(fd);
    }
}

fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread (not shared with other threads
        // of the test process: CLONE_NEWNET is per thread).
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "unshare: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

#[test]
fn tc_linux_provider_in_the_kernel() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("tc_linux_provider_in_the_kernel: SKIPPED (needs root for a netns and tc)");
        return;
    }
    in_netns(|| {
        // tl1 -> tl0 (port 1, the filters' device); port 2 = tl2 -> tl3 (no loop)
        ip("link add tl0 type veth peer name tl1");
        ip("link add tl2 type veth peer name tl3");
        for d in ["tl0", "tl1", "tl2", "tl3"] {
            ip(&format!("link set {d} up"));
        }
        let p = TcLinuxProvider::new(&[(1, "tl0".into()), (2, "tl2".into())]).expect("provider");
        let (_, q) = tc("qdisc show dev tl0");
        assert!(q.contains("clsact"), "clsact added: {q}");
        let (has_flower, out) =
            tc("filter add dev tl0 ingress protocol ip prio 9 flower skip_hw action pass");
        if has_flower {
            assert!(tc("filter del dev tl0 ingress protocol ip prio 9").0);
        } else {
            assert!(out.contains("classifier not found"), "{out}");
        }
        if !has_flower {
            // The kernel refuses: the reason is its errno and extack, nothing stays.
            let e = p.put(1, &spec(0x0200_0000_0b02, 2), 0).unwrap_err();
            match &e {
                OffloadError::Device(s) => assert!(
                    s.contains("TC classifier not found") && s.contains("errno 2 (ENOENT)"),
                    "{s}"
                ),
                e => panic!("{e:?}"),
            }
            assert_eq!(p.len(), 0);
            let (_, show) = tc("filter show dev tl0 ingress");
            assert!(show.trim().is_empty(), "{show}");
            eprintln!("kernel without cls_flower: put refused with {e}");
            return;
        }
        // cls_flower: put, show, counters, MOD, refusal, del, flush.
        p.put(0x11, &spec(0x0200_0000_0b02, 2), 0).expect("put");
        let (_, show) = tc("-s filter show dev tl0 ingress");
        assert!(
            show.contains("flower") && show.contains("skip_hw"),
            "{show}"
        );
        assert!(show.contains("dst_mac 02:00:00:00:0b:02"), "{show}");
        assert!(show.contains("cookie 0000000000000011"), "{show}");
        assert!(show.contains("Egress Redirect to device tl2"), "{show}");
        send("tl1", 0x0200_0000_0b02, 3); // tl1 -> tl0 ingress
        let st = p.stats(0x11, true).expect("stats");
        assert_eq!(st.packets, 3, "{show}");
        assert_eq!(p.stats(0x11, false).unwrap().packets, 0, "reset");
        // MOD: a different destination replaces the filter
        p.put(0x11, &spec(0x0200_0000_0b03, 2), 0).expect("mod");
        let (_, show) = tc("filter show dev tl0 ingress");
        assert!(!show.contains("0b:02") && show.contains("0b:03"), "{show}");
        assert_eq!(show.matches("handle").count(), 1, "{show}");
        // someone else's filter on the next prio with another protocol: refused
        let mut s6 = spec(0x0200_0000_0b04, 2);
        s6.key.set(f::DL_TYPE, 0x86dd);
        let (ok, out) =
            tc("filter add dev tl0 ingress prio 2 protocol arp flower skip_hw action pass");
        assert!(ok, "{out}");
        let e = p.put(0x12, &s6, 0).unwrap_err();
        assert!(e.to_string().contains("errno 22 (EINVAL)"), "{e}");
        let (_, show) = tc("filter show dev tl0 ingress");
        assert!(!show.contains("ipv6"), "nothing half-installed: {show}");
        assert_eq!(p.len(), 1);
        let last = p.del(0x11).expect("del");
        assert_eq!(last.packets, 0);
        assert!(matches!(p.del(0x11), Err(OffloadError::NotFound(0x11))));
        p.put(0x13, &spec(0x0200_0000_0b05, 2), 0).expect("put");
        assert_eq!(p.flush(), 1);
        let (_, show) = tc("filter show dev tl0 ingress");
        assert_eq!(
            show.matches("handle").count(),
            1,
            "only the foreign filter: {show}"
        );
    });
}
