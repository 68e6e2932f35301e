//! The CM API, one scenario run on each CM backend (chosen by the device's verbs
//! provider): a synchronous RC connection with private data both ways and ECE,
//! SEND and RDMA WRITE over the CM-connected QPs, disconnect; a consumer reject
//! (28) and no listener (8) through an asynchronous channel whose fd becomes
//! readable; UD (SIDR) resolution to the server's QPN and Q_Key and a UD SEND.
//!
//! * soft (own CM over QP1): runs everywhere, two soft devices on loopback;
//! * rdma-core (librdmacm, `--features rdma-core`): `#[ignore]`d, needs two
//!   kernel RDMA devices that reach each other (the guest of tests/peers:
//!   rxe_a 10.99.1.1, rxe_b 10.99.1.2 of `guest/rxe-pair.sh`; override with
//!   `CM_RC_IPS=ip_a,ip_b`); afterwards the kernel's resource counts (cm_id,
//!   qp, cq, mr, pd) are back where they were.
#![cfg(feature = "driver")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, DriverError};
use cm::{CmConfig, ConnParam, Ece, EventType, PortSpace};
use verbs::{AccessFlags, Ah, Context, QpCap, RecvWr, SendFlags, SendWr, Wc, WcStatus, WrDetail};
use verbs::{WcOpcode, WrOpcode};

const T: Duration = Duration::from_secs(20);

fn poll_one(cq: &verbs::Cq) -> Wc {
    let mut wc = [Wc::default(); 1];
    let t0 = Instant::now();
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(t0.elapsed() < T, "no completion");
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn sa(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip), port)
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn scenario(a: Context, b: Context, port: u16) {
    let cfg = CmConfig {
        timewait: Duration::from_millis(100),
        ..CmConfig::default()
    };
    let (ca, cb) = (
        CmDevice::open(&a, cfg.clone()).unwrap(),
        CmDevice::open(&b, cfg).unwrap(),
    );
    let (ia, ib) = (a.ip(), b.ip());

    // ---- RC, synchronous ids: private data both ways, ECE, SEND + WRITE
    let listener = cb.create_id(None, PortSpace::Tcp);
    listener.bind_addr(sa(ib, port)).unwrap();
    listener.listen(4).unwrap();
    assert_eq!(listener.local_addr(), Some(sa(ib, port)));
    let srv = std::thread::spawn({
        let cb = cb.clone();
        move || {
            let (mut id, ev) = listener.get_request(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::ConnectRequest);
            assert_eq!(&ev.param.private_data[..5], b"hello");
            assert_eq!(
                ev.ece,
                Ece {
                    vendor_id: 0x15b3,
                    options: 5
                },
                "the client's ECE reaches the CONNECT_REQUEST"
            );
            assert_eq!(id.peer_addr().map(|p| p.ip()), Some(IpAddr::V4(ia)));
            let cq = cb.context().create_cq(16, None).unwrap();
            let mr = cb
                .pd()
                .reg_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
                .unwrap();
            id.create_qp(&cq, &cq, cap()).unwrap();
            id.qp()
                .unwrap()
                .post_recv(&[RecvWr {
                    wr_id: 7,
                    sg_list: &[mr.sge(0, 64)],
                }])
                .unwrap();
            let mut pd = mr.addr().to_be_bytes().to_vec();
            pd.extend_from_slice(&mr.rkey().to_be_bytes());
            let est = id
                .accept(
                    &ConnParam {
                        private_data: pd,
                        ..ConnParam::default()
                    },
                    T,
                )
                .unwrap();
            assert_eq!(est.unwrap().event, EventType::Established);
            let wc = poll_one(&cq);
            assert_eq!(
                (wc.status, wc.wr_id, wc.byte_len),
                (WcStatus::Success, 7, 4)
            );
            let mut b4 = [0u8; 4];
            mr.read(0, &mut b4);
            assert_eq!(&b4, b"ping");
            // the client's WRITE lands at offset 16, then it disconnects
            let ev = id.get_event(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::Disconnected);
            let mut b = [0u8; 10];
            mr.read(16, &mut b);
            assert_eq!(&b, b"written!!!");
            id.disconnect().unwrap();
        }
    });
    let mut id = ca.create_id(None, PortSpace::Tcp);
    let ev = id
        .resolve_addr(Some(sa(ia, 0)), sa(ib, port), Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(ev.event, EventType::AddrResolved);
    id.resolve_route(Duration::from_secs(5)).unwrap();
    let cq = ca.context().create_cq(16, None).unwrap();
    id.create_qp(&cq, &cq, cap()).unwrap();
    id.set_local_ece(Ece {
        vendor_id: 0x15b3,
        options: 5,
    })
    .unwrap();
    let ev = id
        .connect(
            &ConnParam {
                private_data: b"hello".to_vec(),
                ..ConnParam::default()
            },
            T,
        )
        .unwrap()
        .unwrap();
    assert_eq!(ev.event, EventType::Established);
    let raddr = u64::from_be_bytes(ev.param.private_data[..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(ev.param.private_data[8..12].try_into().unwrap());
    let mr = ca.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    mr.write(0, b"ping");
    mr.write(16, b"written!!!");
    let qp = id.qp().unwrap();
    let sge = [mr.sge(0, 4)];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    wr.send_flags = SendFlags::SIGNALED;
    qp.post_send(&[wr]).unwrap();
    assert_eq!(poll_one(&cq).status, WcStatus::Success);
    let sge = [mr.sge(16, 10)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaWrite, &sge);
    wr.send_flags = SendFlags::SIGNALED;
    wr.wr = WrDetail::Rdma {
        remote_addr: raddr + 16,
        rkey,
    };
    qp.post_send(&[wr]).unwrap();
    let wc = poll_one(&cq);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    id.disconnect().unwrap();
    srv.join().unwrap();
    // the client sees DISCONNECTED for its own DREQ (DREP or timeout)
    let ev = id.get_event(Some(T)).unwrap();
    assert_eq!(ev.event, EventType::Disconnected);
    drop(id);

    // ---- async channel: consumer reject (28) and no listener (8)
    let sch = cb.create_event_channel();
    let l2 = cb.create_id(Some(&sch), PortSpace::Tcp);
    l2.bind_addr(sa(ib, port + 1)).unwrap();
    l2.listen(4).unwrap();
    let cch = ca.create_event_channel();
    let fd = cch.fd().expect("the channel's fd");
    let try_connect = |p: u16| -> cm::CmEvent {
        let mut id = ca.create_id(Some(&cch), PortSpace::Tcp);
        id.resolve_addr(Some(sa(ia, 0)), sa(ib, p), Duration::from_secs(5))
            .unwrap();
        let ev = cch.get_event(Some(T)).unwrap();
        assert_eq!(ev.event, EventType::AddrResolved);
        id.resolve_route(Duration::from_secs(5)).unwrap();
        assert_eq!(
            cch.get_event(Some(T)).unwrap().event,
            EventType::RouteResolved
        );
        let cq = ca.context().create_cq(4, None).unwrap();
        id.create_qp(&cq, &cq, cap()).unwrap();
        id.connect(&ConnParam::default(), T).unwrap();
        if p == port + 1 {
            let ev = sch.get_event(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::ConnectRequest);
            let nid = cm::driver::CmId::from_request(&cb, &ev);
            nid.reject(b"no thanks").unwrap();
        }
        // the fd is readable once the answer is queued
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, T.as_millis() as i32) };
        assert_eq!(n, 1, "the channel fd became readable");
        let ev = cch.get_event(Some(T)).unwrap();
        drop(id);
        ev
    };
    let ev = try_connect(port + 1);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    assert_eq!(&ev.param.private_data[..9], b"no thanks");
    let ev = try_connect(port + 2);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
    drop(l2);

    // ---- UD: SIDR to the server's QPN and Q_Key, one UD SEND
    let ul = cb.create_id(None, PortSpace::Udp);
    ul.bind_addr(sa(ib, port + 3)).unwrap();
    ul.listen(4).unwrap();
    let usrv = std::thread::spawn({
        let cb = cb.clone();
        move || {
            let (mut id, ev) = ul.get_request(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::ConnectRequest);
            assert_eq!(&ev.param.private_data[..3], b"sid");
            let cq = cb.context().create_cq(8, None).unwrap();
            id.create_qp(&cq, &cq, cap()).unwrap();
            let mr = cb.pd().reg_mr(40 + 64, AccessFlags::LOCAL_WRITE).unwrap();
            id.qp()
                .unwrap()
                .post_recv(&[RecvWr {
                    wr_id: 9,
                    sg_list: &[mr.sge(0, 40 + 64)],
                }])
                .unwrap();
            let qpn = id.qp().unwrap().qp_num();
            id.accept(&ConnParam::default(), T).unwrap();
            let wc = poll_one(&cq);
            assert_eq!(
                (wc.status, wc.wr_id, wc.byte_len),
                (WcStatus::Success, 9, 40 + 5)
            );
            let mut b = [0u8; 5];
            mr.read(40, &mut b);
            assert_eq!(&b, b"udmsg");
            qpn
        }
    });
    let mut uid = ca.create_id(None, PortSpace::Udp);
    uid.resolve_addr(Some(sa(ia, 0)), sa(ib, port + 3), Duration::from_secs(5))
        .unwrap();
    uid.resolve_route(Duration::from_secs(5)).unwrap();
    let ucq = ca.context().create_cq(8, None).unwrap();
    uid.create_qp(&ucq, &ucq, cap()).unwrap();
    let ev = uid
        .connect(
            &ConnParam {
                private_data: b"sid".to_vec(),
                ..ConnParam::default()
            },
            T,
        )
        .unwrap()
        .unwrap();
    assert_eq!(ev.event, EventType::Established);
    let ud = ev.ud.expect("UD parameters in ESTABLISHED");
    assert_eq!(ud.qkey, wire::mad::RDMA_UDP_QKEY);
    assert_eq!(ud.remote, IpAddr::V4(ib));
    let umr = ca.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    umr.write(0, b"udmsg");
    let sge = [umr.sge(0, 5)];
    let mut wr = SendWr::new(3, WrOpcode::Send, &sge);
    wr.send_flags = SendFlags::SIGNALED;
    wr.wr = WrDetail::Ud {
        ah: Ah {
            ip: ib,
            ..Ah::default()
        },
        remote_qpn: ud.qp_num,
        remote_qkey: ud.qkey,
    };
    uid.qp().unwrap().post_send(&[wr]).unwrap();
    assert_eq!(poll_one(&ucq).status, WcStatus::Success);
    let qpn = usrv.join().unwrap();
    assert_eq!(ud.qp_num, qpn, "SIDR gave the server's QPN");
    drop(uid);

    // calls on a closed device fail with ENODEV
    let idle = ca.create_id(None, PortSpace::Tcp);
    idle.bind_addr(sa(ia, 0)).unwrap();
    ca.close();
    let ev = idle.get_event(Some(T)).unwrap();
    assert_eq!(ev.event, EventType::DeviceRemoval);
    let e = idle.listen(1).unwrap_err();
    assert!(matches!(e, DriverError::Cm(cm::Error::NoDevice)), "{e}");
    assert_eq!(e.errno(), libc::ENODEV);
}

#[test]
fn soft_provider() {
    let open = |ip| Context::open(ip).unwrap();
    scenario(open("127.0.62.1"), open("127.0.62.2"), 7600);
}

#[cfg(feature = "rdma-core")]
#[test]
#[ignore = "needs two kernel RDMA devices (run in the guest of tests/peers)"]
fn rdma_core_provider() {
    let ips = std::env::var("CM_RC_IPS").unwrap_or_else(|_| "10.99.1.1,10.99.1.2".into());
    let (a, b) = ips.split_once(',').expect("CM_RC_IPS=ip_a,ip_b");
    let ca = verbs::rdma_core::open(a).unwrap();
    let cb = verbs::rdma_core::open(b).unwrap();
    assert_eq!(ca.provider(), verbs::Provider::RdmaCore);
    let (na, nb) = (ca.name().to_string(), cb.name().to_string());
    let before = (kernel_resources(&na), kernel_resources(&nb));
    scenario(ca, cb, 7600);
    // every rdma_cm_id and ibv_* object went with its last handle (the CM
    // devices' poller threads may hold them a last moment: up to 5 s)
    let t0 = Instant::now();
    let mut after = (kernel_resources(&na), kernel_resources(&nb));
    while after != before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        after = (kernel_resources(&na), kernel_resources(&nb));
    }
    assert_eq!(after, before);
}

/// `rdma resource show`'s counters for `dev`: cm_id, pd, cq, qp, mr.
#[cfg(feature = "rdma-core")]
fn kernel_resources(dev: &str) -> Vec<(String, u64)> {
    let out = std::process::Command::new("rdma")
        .args(["resource", "show"])
        .output()
        .expect("the `rdma` tool (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("{dev}:")))
        .unwrap_or_else(|| panic!("{dev} not in `rdma resource show`: {text}"));
    let w: Vec<&str> = line.split_whitespace().skip(2).collect();
    let r: Vec<(String, u64)> = w
        .chunks(2)
        .filter(|c| c.len() == 2 && ["cm_id", "pd", "cq", "qp", "mr"].contains(&c[0]))
        .map(|c| (c[0].to_string(), c[1].parse().unwrap_or(u64::MAX)))
        .collect();
    assert!(r.len() >= 4, "unexpected `rdma resource show` line: {line}");
    r
}
