//! The CM over two soft RoCE devices on loopback addresses (real UDP 4791 sockets):
//! sync and async APIs, RC data over the CM-connected QPs, reject, no listener, UD.
#![cfg(feature = "driver")]

use std::net::SocketAddr;
use std::time::Duration;

use cm::driver::{CmDevice, CmId, DriverError};
use cm::{CmConfig, ConnParam, EventType, PortSpace};
use verbs::{AccessFlags, Context, QpCap, SendWr, Sge, Wc, WcStatus, WrDetail, WrOpcode};

const T: Duration = Duration::from_secs(5);

fn dev(ip: &str) -> CmDevice {
    let ctx = Context::open(ip).expect("open soft device");
    let cfg = CmConfig {
        timewait: Duration::from_millis(100),
        cm_response_timeout: 16,
        ..CmConfig::default()
    };
    CmDevice::open(&ctx, cfg).unwrap()
}

fn poll_one(cq: &verbs::Cq) -> Wc {
    let mut wc = [Wc::default(); 1];
    let t0 = std::time::Instant::now();
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(t0.elapsed() < T, "no completion");
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[test]
fn rc_connect_send_write_disconnect_sync() {
    let s = dev("127.0.4.2");
    let c = dev("127.0.4.1");
    let addr: SocketAddr = "127.0.4.2:7471".parse().unwrap();
    let listener = s.create_id(None, PortSpace::Tcp);
    listener.bind_addr(addr).unwrap();
    listener.listen(8).unwrap();

    let srv = std::thread::spawn({
        let s = s.clone();
        move || {
            let (mut id, ev) = listener.get_request(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::ConnectRequest);
            assert_eq!(&ev.param.private_data[..5], b"hello");
            let cq = s.context().create_cq(16, None).unwrap();
            let mr = s
                .pd()
                .reg_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
                .unwrap();
            id.create_qp(&cq, &cq, QpCap::default()).unwrap();
            let qp = id.qp().unwrap();
            qp.post_recv(&[verbs::RecvWr {
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
            let mut b = [0u8; 10];
            mr.read(0, &mut b);
            assert_eq!(&b[..4], b"ping");
            // server -> client: a SEND (the server's sq_psn must match what the REP said)
            mr.write(0, b"pong");
            let sge = [mr.sge(0, 4)];
            qp.post_send(&[SendWr::new(8, WrOpcode::Send, &sge)])
                .unwrap();
            assert_eq!(poll_one(&cq).status, WcStatus::Success);
            let ev = id.get_event(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::Disconnected);
            id.disconnect().unwrap();
            // the client's RDMA WRITE landed before it disconnected
            mr.read(0, &mut b);
            assert_eq!(&b[..10], b"pongwrite!"); // our "pong" + the client's WRITE at offset 4
        }
    });

    let mut id = c.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, addr, T).unwrap();
    id.resolve_route(T).unwrap();
    let cq = c.context().create_cq(16, None).unwrap();
    id.create_qp(&cq, &cq, QpCap::default()).unwrap();
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
    let mr = c.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let rmr = c.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    mr.write(0, b"pingwrite!");
    let qp = id.qp().unwrap();
    qp.post_recv(&[verbs::RecvWr {
        wr_id: 9,
        sg_list: &[rmr.sge(0, 64)],
    }])
    .unwrap();
    let sge = [mr.sge(0, 4)];
    qp.post_send(&[SendWr::new(1, WrOpcode::Send, &sge)])
        .unwrap();
    assert_eq!(poll_one(&cq).status, WcStatus::Success);
    let sge = [mr.sge(4, 6)];
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite, &sge);
    w.wr = WrDetail::Rdma {
        remote_addr: raddr + 4,
        rkey,
    };
    qp.post_send(&[w]).unwrap();
    // the WRITE's completion and the server's SEND, in either order
    let mut ids = [poll_one(&cq), poll_one(&cq)].map(|wc| {
        assert_eq!(wc.status, WcStatus::Success);
        wc.wr_id
    });
    ids.sort();
    assert_eq!(ids, [2, 9], "the server's SEND arrives");
    let mut b = [0u8; 4];
    rmr.read(0, &mut b);
    assert_eq!(&b, b"pong");
    id.disconnect().unwrap();
    let ev = id.get_event(Some(T)).unwrap();
    assert_eq!(ev.event, EventType::Disconnected);
    srv.join().unwrap();
    drop(id);
    let _ = Sge::default;
}

#[test]
fn reject_and_no_listener_async() {
    let s = dev("127.0.4.4");
    let c = dev("127.0.4.3");
    let ch = s.create_event_channel();
    let listener = s.create_id(Some(&ch), PortSpace::Tcp);
    listener
        .bind_addr("127.0.4.4:7000".parse().unwrap())
        .unwrap();
    listener.listen(8).unwrap();
    let srv = std::thread::spawn({
        let s = s.clone();
        move || {
            let ev = ch.get_event(Some(T)).unwrap();
            assert_eq!(ev.event, EventType::ConnectRequest);
            let id = CmId::from_request(&s, &ev);
            id.reject(b"nope").unwrap();
            drop(listener);
        }
    });
    let id = c.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, "127.0.4.4:7000".parse().unwrap(), T)
        .unwrap();
    id.resolve_route(T).unwrap();
    match id.connect(&ConnParam::default(), T) {
        Err(DriverError::Event {
            event: EventType::Rejected,
            status: 28,
        }) => {}
        other => panic!("{other:?}"),
    }
    srv.join().unwrap();
    // no listener on 7001: REJ 8
    let id = c.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, "127.0.4.4:7001".parse().unwrap(), T)
        .unwrap();
    id.resolve_route(T).unwrap();
    match id.connect(&ConnParam::default(), T) {
        Err(DriverError::Event {
            event: EventType::Rejected,
            status: 8,
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// rdma_verbs.h-style helpers over create_ep-style ids, and a pollable channel fd.
#[test]
fn verbs_helpers_and_pollable_channel() {
    let s = dev("127.0.4.6");
    let c = dev("127.0.4.5");
    let addr: SocketAddr = "127.0.4.6:7100".parse().unwrap();
    let ch = s.create_event_channel();
    let fd = ch.fd().expect("channel fd");
    let listener = s.create_id(Some(&ch), PortSpace::Tcp);
    listener.bind_addr(addr).unwrap();
    listener.listen(4).unwrap();
    let srv = std::thread::spawn({
        let s = s.clone();
        move || {
            // the fd becomes readable when the CONNECT_REQUEST is queued
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, 5 s timeout.
            let n = unsafe { libc::poll(&mut p, 1, 5000) };
            assert_eq!(n, 1, "channel fd not readable");
            let ev = ch.try_get_event().expect("event after poll");
            assert_eq!(ev.event, EventType::ConnectRequest);
            let mut id = CmId::from_request(&s, &ev);
            id.create_qp_default(QpCap::default()).unwrap();
            let msg = id.reg_msgs(16).unwrap();
            let rd = id.reg_read(16).unwrap();
            rd.write(0, b"readable by peer");
            id.post_recv(1, &msg, 0, 16).unwrap();
            let mut pd = rd.addr().to_be_bytes().to_vec();
            pd.extend_from_slice(&rd.rkey().to_be_bytes());
            id.accept(
                &ConnParam {
                    private_data: pd,
                    ..ConnParam::default()
                },
                T,
            )
            .unwrap();
            let wc = id.get_recv_comp(T).unwrap();
            assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 5));
            let mut b = [0u8; 5];
            msg.read(0, &mut b);
            assert_eq!(&b, b"hello");
            loop {
                let ev = ch.get_event(Some(T)).unwrap();
                if ev.event == EventType::Disconnected {
                    break;
                }
                assert_eq!(ev.event, EventType::Established);
            }
            // drained: the fd is not readable while the channel is empty ...
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: as above, 0 ms timeout.
            assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
            id.disconnect().unwrap();
            // ... and readable again when TIMEWAIT_EXIT (100 ms later) is queued.
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1);
            assert_eq!(ch.try_get_event().unwrap().event, EventType::TimewaitExit);
            drop(listener);
        }
    });
    let id = c
        .connect_ep(None, addr, PortSpace::Tcp, QpCap::default())
        .unwrap();
    let ev = id.connect(&ConnParam::default(), T).unwrap().unwrap();
    let raddr = u64::from_be_bytes(ev.param.private_data[..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(ev.param.private_data[8..12].try_into().unwrap());
    let buf = id.reg_msgs(32).unwrap();
    buf.write(0, b"hello");
    id.post_send(7, &buf, 0, 5).unwrap();
    assert_eq!(id.get_send_comp(T).unwrap().status, WcStatus::Success);
    id.post_read(8, &buf, 16, 16, raddr, rkey).unwrap();
    let wc = id.get_send_comp(T).unwrap();
    assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 8));
    let mut b = [0u8; 16];
    buf.read(16, &mut b);
    assert_eq!(&b, b"readable by peer");
    id.disconnect().unwrap();
    srv.join().unwrap();
}
