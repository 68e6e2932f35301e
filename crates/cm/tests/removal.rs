//! DEVICE_REMOVAL, ADDR_CHANGE and ADDR_ERROR through the driver.
//!
//! Without privileges: devices on 127.0.4.6x; `CmDevice::close` removes the
//! device, `CmDevice::addr_removed` is the hook the rtnetlink watcher calls.
//! As root: each `netns_*` test runs in a thread moved into a network namespace
//! of its own (`unshare(CLONE_NEWNET)`, only `lo` and a veth pair we create), where
//! it really deletes addresses and links and looks routes up. They are `#[ignore]`d
//! (they need root); scripts/test-all.sh runs them with `--ignored` as root (CI),
//! where not being root or a namespace that cannot be made is a failure, not a skip.
//! Nothing outside those namespaces is touched.
#![cfg(feature = "driver")]

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, DriverError};
use cm::{CmConfig, Error, EventType, PortSpace};
use verbs::Context;

const T: Duration = Duration::from_secs(5);

fn dev(ip: &str) -> CmDevice {
    let ctx = Context::open(ip).expect("open soft device");
    let cfg = CmConfig {
        timewait: Duration::from_millis(100),
        cm_response_timeout: 14,
        packet_life_time: 8,
        max_cm_retries: 3,
        ..CmConfig::default()
    };
    CmDevice::open(&ctx, cfg).unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn enodev<T: std::fmt::Debug>(r: Result<T, DriverError>) {
    match r {
        Err(e @ DriverError::Cm(Error::NoDevice)) => assert_eq!(e.errno(), 19),
        other => panic!("expected ENODEV, got {other:?}"),
    }
}

#[test]
fn close_gives_device_removal_and_enodev() {
    let s = dev("127.0.4.61");
    let c = dev("127.0.4.62");
    let ch = s.create_event_channel();
    // an established connection, an async listener, a sync listener blocked in
    // get_request, a bound id, an idle id
    let listener = s.create_id(Some(&ch), PortSpace::Tcp);
    listener.bind_addr(sa("127.0.4.61:7100")).unwrap();
    listener.listen(4).unwrap();
    let mut cid = c.create_id(None, PortSpace::Tcp);
    cid.resolve_addr(None, sa("127.0.4.61:7100"), T).unwrap();
    cid.resolve_route(T).unwrap();
    cid.create_qp_default(verbs::QpCap::default()).unwrap();
    let client = std::thread::spawn(move || {
        cid.connect(&cm::ConnParam::default(), T).unwrap();
        cid
    });
    let ev = ch.get_event(Some(T)).unwrap();
    assert_eq!(ev.event, EventType::ConnectRequest);
    let mut child = cm::driver::CmId::from_request(&s, &ev);
    drop(ev);
    child.create_qp_default(verbs::QpCap::default()).unwrap();
    child.accept(&cm::ConnParam::default(), T).unwrap();
    assert_eq!(ch.get_event(Some(T)).unwrap().event, EventType::Established);
    let cid = client.join().unwrap();

    let sync_l = s.create_id(None, PortSpace::Tcp);
    sync_l.bind_addr(sa("127.0.4.61:7101")).unwrap();
    sync_l.listen(1).unwrap();
    let blocked = std::thread::spawn(move || {
        let r = sync_l.get_request(Some(Duration::from_secs(20)));
        (r.map(|(_, ev)| ev.event), sync_l)
    });
    let bound = s.create_id(Some(&ch), PortSpace::Udp);
    bound.bind_addr(sa("127.0.4.61:0")).unwrap();
    let idle = s.create_id(Some(&ch), PortSpace::Tcp);
    std::thread::sleep(Duration::from_millis(50));

    let t0 = Instant::now();
    s.close();
    assert!(s.is_removed());
    // the blocked rdma_get_request ends with the listener's DEVICE_REMOVAL
    let (r, sync_l) = blocked.join().unwrap();
    match r {
        Err(DriverError::Event {
            event: EventType::DeviceRemoval,
            status: 0,
        }) => {}
        other => panic!("get_request: {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    // one DEVICE_REMOVAL per id with an address on the device, none for the idle one
    let mut got = Vec::new();
    while let Some(ev) = ch.try_get_event() {
        assert_eq!((ev.event, ev.status), (EventType::DeviceRemoval, 0));
        got.push(ev.id);
    }
    got.sort();
    let mut want = vec![listener.handle(), child.handle(), bound.handle()];
    want.sort();
    assert_eq!(got, want);
    // later calls: ENODEV, and nothing blocks
    enodev(sync_l.listen(1));
    enodev(idle.bind_addr(sa("127.0.4.61:7102")));
    enodev(idle.resolve_addr(None, sa("127.0.4.62:7100"), T));
    enodev(child.disconnect());
    enodev(ch.get_event(Some(T)));
    let r = s
        .create_id(None, PortSpace::Tcp)
        .bind_addr(sa("127.0.4.61:7103"));
    enodev(r);
    drop((listener, child, bound, idle, sync_l));
    // the peer's connection ends by itself: its DREQ goes unanswered
    cid.disconnect().unwrap();
    let ev = cid.get_event(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(ev.event, EventType::Disconnected);
}

#[test]
fn addr_removed_hook_gives_addr_change() {
    let s = dev("127.0.4.63");
    let ch = s.create_event_channel();
    let bound = s.create_id(Some(&ch), PortSpace::Tcp);
    bound.bind_addr(sa("127.0.4.63:7110")).unwrap();
    bound.listen(1).unwrap();
    let wildcard = s.create_id(Some(&ch), PortSpace::Tcp);
    wildcard.bind_addr(sa("0.0.0.0:7111")).unwrap();
    let _idle = s.create_id(Some(&ch), PortSpace::Tcp);
    s.addr_removed();
    let ev = ch.get_event(Some(T)).unwrap();
    assert_eq!(
        (ev.event, ev.status, ev.id),
        (EventType::AddrChange, 0, bound.handle())
    );
    drop(ev);
    assert!(
        ch.try_get_event().is_none(),
        "only the id bound to the address"
    );
    // the id stays usable (librdmacm applications destroy and re-resolve)
    assert!(!s.is_removed());
    let id = s.create_id(None, PortSpace::Tcp);
    id.bind_addr(sa("127.0.4.63:7112")).unwrap();
}

// ---- as root, in network namespaces of our own ---------------------------------

/// Runs `f` in a new thread moved into a fresh network namespace with `lo` up;
/// panics (the test fails) when that cannot be done.
fn in_netns(name: &str, f: impl FnOnce() + Send + 'static) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "{name} needs root (network namespaces, addresses, links): run --ignored only as root"
    );
    let ok = std::thread::spawn(move || {
        // SAFETY: unshare of this thread's network namespace only.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        if !ip(&["link", "set", "lo", "up"]) {
            return Err("ip link set lo up failed (iproute2 missing?)".into());
        }
        f();
        Ok(())
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p));
    if let Err(e) = ok {
        panic!("{name}: cannot make a network namespace: {e}");
    }
}

/// `ip ARGS` in the calling thread's network namespace (the child inherits it).
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

fn veth_with(addr: &str) {
    assert!(ip(&[
        "link", "add", "v0", "type", "veth", "peer", "name", "v1"
    ]));
    assert!(ip(&["addr", "add", addr, "dev", "v0"]));
    assert!(ip(&["link", "set", "v0", "up"]));
    assert!(ip(&["link", "set", "v1", "up"]));
}

#[test]
#[ignore = "needs root (network namespaces): run with --ignored as root"]
fn netns_deleted_address_gives_addr_change() {
    in_netns("netns_deleted_address_gives_addr_change", || {
        // an address on lo, as `ip addr add 127.0.9.9/32 dev lo`, and one on a veth
        assert!(ip(&["addr", "add", "10.9.8.1/32", "dev", "lo"]));
        let s = dev("10.9.8.1");
        let ch = s.create_event_channel();
        let l = s.create_id(Some(&ch), PortSpace::Tcp);
        l.bind_addr(sa("10.9.8.1:7120")).unwrap();
        l.listen(1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(ip(&["addr", "del", "10.9.8.1/32", "dev", "lo"]));
        let ev = ch
            .get_event(Some(T))
            .expect("ADDR_CHANGE after ip addr del");
        assert_eq!(
            (ev.event, ev.status, ev.id),
            (EventType::AddrChange, 0, l.handle())
        );
        drop(ev);
        assert!(!s.is_removed());
        // an unrelated address coming and going says nothing
        assert!(ip(&["addr", "add", "10.9.8.2/32", "dev", "lo"]));
        assert!(ip(&["addr", "del", "10.9.8.2/32", "dev", "lo"]));
        std::thread::sleep(Duration::from_millis(200));
        assert!(ch.try_get_event().is_none());
    });
}

#[test]
#[ignore = "needs root (network namespaces): run with --ignored as root"]
fn netns_deleted_link_gives_device_removal() {
    in_netns("netns_deleted_link_gives_device_removal", || {
        veth_with("10.9.7.1/24");
        let s = dev("10.9.7.1");
        let ch = s.create_event_channel();
        let l = s.create_id(Some(&ch), PortSpace::Tcp);
        l.bind_addr(sa("10.9.7.1:7130")).unwrap();
        l.listen(1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(ip(&["link", "del", "v0"]));
        let t0 = Instant::now();
        while !s.is_removed() {
            assert!(t0.elapsed() < T, "no DEVICE_REMOVAL after ip link del");
            std::thread::sleep(Duration::from_millis(10));
        }
        // the address went first (ADDR_CHANGE may come before), then the device
        let mut kinds = Vec::new();
        while let Some(ev) = ch.try_get_event() {
            assert_eq!(ev.id, l.handle());
            kinds.push(ev.event);
        }
        assert_eq!(kinds.last(), Some(&EventType::DeviceRemoval), "{kinds:?}");
        enodev(l.listen(1));
    });
}

#[test]
#[ignore = "needs root (network namespaces): run with --ignored as root"]
fn netns_resolve_addr_no_route_and_no_device() {
    in_netns("netns_resolve_addr_no_route_and_no_device", || {
        let s = dev("127.0.4.64");
        // no route at all (only lo here): the call fails with ENETUNREACH
        let id = s.create_id(None, PortSpace::Tcp);
        match id.resolve_addr(None, sa("10.1.2.3:7140"), T) {
            Err(e @ DriverError::Cm(Error::NoRoute(_))) => {
                assert_eq!(e.errno(), libc::ENETUNREACH)
            }
            other => panic!("expected ENETUNREACH, got {other:?}"),
        }
        // a route whose source address has no device of ours: ADDR_ERROR -ENODEV
        veth_with("10.9.6.1/24");
        let ch = s.create_event_channel();
        let id = s.create_id(Some(&ch), PortSpace::Tcp);
        id.resolve_addr(None, sa("10.9.6.2:7140"), T).unwrap();
        let ev = ch.get_event(Some(T)).unwrap();
        assert_eq!((ev.event, ev.status), (EventType::AddrError, -libc::ENODEV));
        drop(ev);
        // with our device's address as the source, a loopback destination resolves
        id.resolve_addr(Some(sa("127.0.4.64:0")), sa("127.0.4.65:7140"), T)
            .unwrap();
        let ev = ch.get_event(Some(T)).unwrap();
        assert_eq!(ev.event, EventType::AddrResolved);
        assert_eq!(
            id.local_addr().map(|a| a.ip()),
            Some(IpAddr::from([127, 0, 4, 64]))
        );
    });
}
