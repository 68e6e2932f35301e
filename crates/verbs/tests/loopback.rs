//! Two soft devices over real UDP sockets on loopback addresses (poller threads).

mod common;
use common::*;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

struct Dev {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn dev(ip: [u8; 4], mode: IoMode, qp_type: QpType) -> Dev {
    let mut o = DeviceOptions::new(Ipv4Addr::from(ip));
    o.mode = mode;
    let ctx = o.open().expect("bind 4791 on a loopback address");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024, None).unwrap();
    let mut init = QpInitAttr::new(qp_type, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.reg_mr(1 << 20, full_access()).unwrap();
    Dev {
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

fn pair(a: [u8; 4], b: [u8; 4], mode: IoMode) -> (Dev, Dev) {
    let (x, y) = (dev(a, mode, QpType::Rc), dev(b, mode, QpType::Rc));
    let p = RcParams {
        mtu: Mtu::Mtu4096,
        timeout: 14,
        ..Default::default()
    };
    connect_rc(&x.qp, p.psn_a, b, y.qp.qp_num(), p.psn_b, &p);
    connect_rc(&y.qp, p.psn_b, a, x.qp.qp_num(), p.psn_a, &p);
    (x, y)
}

fn wait(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut out = vec![];
    let t0 = Instant::now();
    while out.len() < n && t0.elapsed() < Duration::from_secs(10) {
        poll_all(cq, &mut out);
        std::thread::yield_now();
    }
    out
}

#[test]
fn rc_send_write_read_atomic_over_udp_loopback() {
    let (a, b) = pair([127, 0, 0, 1], [127, 0, 0, 2], IoMode::Threaded);
    let data = pattern(3, 300_000);
    a.mr.write(0, &data);
    let r = [b.mr.sge(0, 300_000)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &r,
    }])
    .unwrap();
    let s = [a.mr.sge(0, 200_000), a.mr.sge(200_000, 100_000)];
    let mut w1 = SendWr::new(1, WrOpcode::SendWithImm, &s);
    w1.imm_data = 7;
    let s2 = [a.mr.sge(0, 65536)];
    let mut w2 = SendWr::new(2, WrOpcode::RdmaWrite, &s2);
    w2.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 400_000,
        rkey: b.mr.rkey(),
    };
    b.mr.write(600_000, &data[..50_000]);
    let s3 = [a.mr.sge(700_000, 50_000)];
    let mut w3 = SendWr::new(3, WrOpcode::RdmaRead, &s3);
    w3.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 600_000,
        rkey: b.mr.rkey(),
    };
    let s4 = [a.mr.sge(800_000, 8)];
    let mut w4 = SendWr::new(4, WrOpcode::AtomicFetchAndAdd, &s4);
    w4.wr = WrDetail::Atomic {
        remote_addr: b.mr.addr() + 900_000,
        compare_add: 5,
        swap: 0,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[w1, w2, w3, w4]).unwrap();
    let ca = wait(&a.cq, 4);
    let cb = wait(&b.cq, 1);
    assert_eq!(ca.len(), 4, "{ca:?}");
    assert!(ca.iter().all(|w| w.status == WcStatus::Success), "{ca:?}");
    assert_eq!((cb[0].byte_len, cb[0].imm_data), (300_000, 7));
    let bm = b.mr.to_vec();
    assert_eq!(&bm[..300_000], &data[..]);
    assert_eq!(&bm[400_000..465_536], &data[..65536]);
    let am = a.mr.to_vec();
    assert_eq!(&am[700_000..750_000], &data[..50_000]);
    assert_eq!(b.mr.load_u64(900_000), Some(5));
    assert_eq!(
        a.ctx.soft().unwrap().counters().drop_no_qp + b.ctx.soft().unwrap().counters().drop_no_qp,
        0
    );
}

#[test]
fn manual_progress_mode_and_ud() {
    let a = dev([127, 0, 1, 1], IoMode::Manual, QpType::Ud);
    let b = dev([127, 0, 1, 2], IoMode::Manual, QpType::Ud);
    for s in [&a, &b] {
        let mut at = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: 0x11111111,
            ..Default::default()
        };
        s.qp.modify(
            &at,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )
        .unwrap();
        at.qp_state = QpState::Rtr;
        s.qp.modify(&at, QpAttrMask::STATE).unwrap();
        at.qp_state = QpState::Rts;
        s.qp.modify(&at, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
            .unwrap();
    }
    let r = [b.mr.sge(0, 4096 + 40)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &r,
    }])
    .unwrap();
    a.mr.write(0, &pattern(1, 4096));
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: b.ctx.query_gid(1, 1).unwrap(),
            ..Default::default()
        })
        .unwrap();
    let s = [a.mr.sge(0, 4096)];
    let mut w = SendWr::new(1, WrOpcode::Send, &s);
    w.wr = WrDetail::Ud {
        ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x11111111,
    };
    a.qp.post_send(&[w]).unwrap();
    // nothing moves without progress on the receiver
    std::thread::sleep(Duration::from_millis(20));
    let mut wc = [Wc::default(); 1];
    let t0 = Instant::now();
    let mut got = 0;
    while got == 0 && t0.elapsed() < Duration::from_secs(5) {
        got = b.cq.poll(&mut wc).unwrap(); // poll() drives progress in manual mode
    }
    assert_eq!(got, 1);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 4136));
    let mut buf = vec![0u8; 4096];
    b.mr.read(40, &mut buf);
    assert_eq!(buf, pattern(1, 4096));
    assert_eq!(a.ctx.name(), "dps_127_0_1_1");
    assert!(device_list()
        .iter()
        .any(|(n, ip)| n == "dps_127_0_0_1" && ip.is_loopback()));
    assert_eq!(
        parse_device("dps_127_0_1_1").unwrap(),
        Ipv4Addr::new(127, 0, 1, 1)
    );
}

#[test]
fn many_writes_pipelined() {
    let (a, b) = pair([127, 0, 2, 1], [127, 0, 2, 2], IoMode::Threaded);
    a.mr.write(0, &pattern(5, 1 << 20));
    let n = 2000;
    let mut posted = 0;
    let mut done = 0;
    let mut wc = [Wc::default(); 64];
    let t0 = Instant::now();
    while done < n && t0.elapsed() < Duration::from_secs(20) {
        while posted < n && posted - done < 64 {
            let off = (posted % 16) * 65536;
            let s = [a.mr.sge(off, 65536)];
            let mut w = SendWr::new(posted as u64, WrOpcode::RdmaWrite, &s);
            w.wr = WrDetail::Rdma {
                remote_addr: b.mr.addr() + off as u64,
                rkey: b.mr.rkey(),
            };
            a.qp.post_send(&[w]).unwrap();
            posted += 1;
        }
        let k = a.cq.poll(&mut wc).unwrap();
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success);
            assert_eq!(w.wr_id, done as u64);
            done += 1;
        }
    }
    assert_eq!(done, n);
    assert_eq!(b.mr.to_vec(), a.mr.to_vec());
    // the work counters of the per-packet breakdown (scripts/roce_profile.sh)
    let (ca, cb) = (
        a.ctx.soft().unwrap().counters(),
        b.ctx.soft().unwrap().counters(),
    );
    let qa = a.ctx.soft().unwrap().qp_counters(a.qp.qp_num()).unwrap();
    let qb = b.ctx.soft().unwrap().qp_counters(b.qp.qp_num()).unwrap();
    let bytes = (n * 65536) as u64;
    // one CPU copy each side: registered memory -> packet, packet -> memory
    // (retransmitted packets are copied again: count what was sent)
    assert!(qa.tx_copy_bytes >= bytes, "{qa:?}");
    assert_eq!(qb.rx_copy_bytes, bytes, "{qb:?}");
    assert_eq!(qa.rx_copy_bytes + qb.tx_copy_bytes, 0);
    // every packet sent went through the ICRC once
    assert_eq!(ca.icrc_bytes, ca.tx_bytes);
    assert_eq!(cb.icrc_bytes, cb.tx_bytes);
    for c in [&ca, &cb] {
        assert!(c.send_calls > 0 && c.send_calls <= c.tx_packets, "{c:?}");
        assert!(
            c.recv_calls > c.recv_empty && c.recv_calls >= c.rx_packets / 1024,
            "{c:?}"
        );
        assert!(c.device_locks > 0 && c.rx_locks > 0, "{c:?}");
    }
    eprintln!(
        "{} MB/s, qp {:?}",
        (n * 65536) as f64 / t0.elapsed().as_secs_f64() / 1e6,
        a.qp.context()
            .soft()
            .unwrap()
            .qp_counters(a.qp.qp_num())
            .unwrap()
    );
}

/// Manual progress over RC, as `perf --mode single` drives it: one thread, no
/// poller threads, nothing but `Cq::poll` and posts. Received packets' ACKs and
/// responses are deferred until the next post or empty poll: a ping-pong, a READ
/// (its response is deferred at the responder) and a stream of 64 KiB WRITEs must
/// all complete without retransmit timeouts.
#[test]
fn manual_progress_rc_deferred_tx() {
    let (a, b) = pair([127, 0, 5, 1], [127, 0, 5, 2], IoMode::Manual);
    let mut wc = [Wc::default(); 32];
    // polls both CQs until `want` completions arrived on `a` (b's are returned)
    let drive = |want: usize, bout: &mut Vec<Wc>| -> Vec<Wc> {
        let mut got = vec![];
        let mut wc = [Wc::default(); 32];
        let t0 = Instant::now();
        while got.len() < want && t0.elapsed() < Duration::from_secs(10) {
            let n = b.cq.poll(&mut wc).unwrap();
            bout.extend_from_slice(&wc[..n]);
            let n = a.cq.poll(&mut wc).unwrap();
            got.extend_from_slice(&wc[..n]);
        }
        got
    };
    // ping-pong: WRITE_WITH_IMM each way, 50 rounds
    let ra = [a.mr.sge(0, 8)];
    let rb = [b.mr.sge(0, 8)];
    let sa = [a.mr.sge(64, 8)];
    let sb = [b.mr.sge(64, 8)];
    for i in 0..50u64 {
        b.qp.post_recv(&[RecvWr {
            wr_id: 100 + i,
            sg_list: &rb,
        }])
        .unwrap();
        a.qp.post_recv(&[RecvWr {
            wr_id: 200 + i,
            sg_list: &ra,
        }])
        .unwrap();
        let mut w = SendWr::new(i, WrOpcode::RdmaWriteWithImm, &sa);
        w.wr = WrDetail::Rdma {
            remote_addr: b.mr.addr() + 128,
            rkey: b.mr.rkey(),
        };
        a.qp.post_send(&[w]).unwrap();
        // b answers as soon as its receive completes
        let t0 = Instant::now();
        loop {
            let n = b.cq.poll(&mut wc).unwrap();
            if n > 0 {
                assert_eq!(wc[0].status, WcStatus::Success, "{:?}", &wc[..n]);
                break;
            }
            let _ = a.cq.poll(&mut []).unwrap(); // progresses a (nothing returned)
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "round {i}: b got nothing"
            );
        }
        let mut e = SendWr::new(1000 + i, WrOpcode::RdmaWriteWithImm, &sb);
        e.send_flags = SendFlags::empty();
        e.wr = WrDetail::Rdma {
            remote_addr: a.mr.addr() + 128,
            rkey: a.mr.rkey(),
        };
        b.qp.post_send(&[e]).unwrap();
        let mut bout = vec![];
        let got = drive(2, &mut bout);
        assert_eq!(got.len(), 2, "round {i}: {got:?}");
        assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    }
    // a READ, then 200 pipelined 64 KiB WRITEs
    let data = pattern(9, 65536);
    b.mr.write(300_000, &data);
    let s = [a.mr.sge(300_000, 65536)];
    let mut r = SendWr::new(7, WrOpcode::RdmaRead, &s);
    r.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 300_000,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[r]).unwrap();
    let got = drive(1, &mut vec![]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(&a.mr.to_vec()[300_000..365_536], &data[..]);
    let s = [a.mr.sge(300_000, 65536)];
    let mut done = 0;
    for i in 0..200u64 {
        let mut w = SendWr::new(i, WrOpcode::RdmaWrite, &s);
        w.wr = WrDetail::Rdma {
            remote_addr: b.mr.addr() + 500_000,
            rkey: b.mr.rkey(),
        };
        while a.qp.post_send(&[w]).is_err() {
            done += drive(1, &mut vec![]).len();
        }
    }
    while done < 200 {
        let n = drive(200 - done, &mut vec![]).len();
        assert!(n > 0, "stream stalled at {done}");
        done += n;
    }
    assert_eq!(&b.mr.to_vec()[500_000..565_536], &data[..]);
    let c =
        a.qp.context()
            .soft()
            .unwrap()
            .qp_counters(a.qp.qp_num())
            .unwrap();
    assert_eq!((c.timeouts, c.retransmits), (0, 0), "{c:?}");
}

/// UC over real UDP sockets: multi-packet SENDs and WRITE_WITH_IMMs in lock
/// step (no retransmission on UC, so nothing may be outstanding that a full
/// socket buffer could drop), intact, with no packet back from the responder.
#[test]
fn uc_over_udp_loopback() {
    let (a, b) = (
        dev([127, 0, 77, 1], IoMode::Threaded, QpType::Uc),
        dev([127, 0, 77, 2], IoMode::Threaded, QpType::Uc),
    );
    connect_uc(
        &a.qp,
        0xff_fffe,
        [127, 0, 77, 2],
        b.qp.qp_num(),
        7,
        Mtu::Mtu1024,
    );
    connect_uc(
        &b.qp,
        7,
        [127, 0, 77, 1],
        a.qp.qp_num(),
        0xff_fffe,
        Mtu::Mtu1024,
    );
    for i in 0..20u32 {
        let len = 1 + (i as usize * 7919) % 60_000;
        let data = pattern(i as u64 + 1, len);
        a.mr.write(0, &data);
        let r = [b.mr.sge(0, 65536)];
        b.qp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: &r,
        }])
        .unwrap();
        let s = [a.mr.sge(0, len as u32)];
        let mut w = if i % 2 == 0 {
            SendWr::new(i as u64, WrOpcode::SendWithImm, &s)
        } else {
            let mut w = SendWr::new(i as u64, WrOpcode::RdmaWriteWithImm, &s);
            w.wr = WrDetail::Rdma {
                remote_addr: b.mr.addr() + 100_000,
                rkey: b.mr.rkey(),
            };
            w
        };
        w.imm_data = i;
        a.qp.post_send(&[w]).unwrap();
        let ca = wait(&a.cq, 1);
        let cb = wait(&b.cq, 1);
        assert_eq!(ca.len(), 1, "message {i}: no send completion");
        assert_eq!((ca[0].wr_id, ca[0].status), (i as u64, WcStatus::Success));
        assert_eq!(cb.len(), 1, "message {i} ({len} B) not received");
        assert_eq!(
            (cb[0].wr_id, cb[0].status, cb[0].byte_len, cb[0].imm_data),
            (i as u64, WcStatus::Success, len as u32, i)
        );
        let mut got = vec![0u8; len];
        b.mr.read(if i % 2 == 0 { 0 } else { 100_000 }, &mut got);
        assert!(got == data, "message {i} corrupted");
    }
    assert_eq!(
        b.ctx.soft().unwrap().counters().tx_packets,
        0,
        "the UC responder answered"
    );
    assert_eq!(
        b.qp.context()
            .soft()
            .unwrap()
            .qp_counters(b.qp.qp_num())
            .unwrap()
            .uc_drops,
        0
    );
}

/// A receiver that busy-polls its last message and closes at once (as
/// ibv_rc_pingpong's last iteration): the ACK its busy-poll receive deferred
/// must still leave, or the sender retransmits into nothing and fails (Linux's
/// ibv_rc_pingpong hung in interop 10-netem before the QP's drop flushed it).
#[test]
fn ack_deferred_by_a_busy_poll_leaves_when_the_receiver_closes() {
    ack_deferred_by_a_busy_poll_leaves(0, false);
}

/// As above, but the receiver first moves its QP to ERR, as `rdma_disconnect`
/// does, and stays open: moving to ERR drops the responder's queued ACKs, so
/// what a busy poll deferred must leave before the state changes (interop
/// 04-cm in CI: Linux's rdma_server waited out rxe's retries, killed at 40 s,
/// after ours disconnected right after its last receive).
#[test]
fn ack_deferred_by_a_busy_poll_leaves_when_the_receiver_moves_to_err() {
    ack_deferred_by_a_busy_poll_leaves(10, true);
}

fn ack_deferred_by_a_busy_poll_leaves(base: u8, to_err: bool) {
    for round in 0..5u8 {
        let (a, b) = pair(
            [127, 0, 64, base + 1 + 2 * round],
            [127, 0, 64, base + 2 + 2 * round],
            IoMode::Threaded,
        );
        let r = [b.mr.sge(0, 64)];
        b.qp.post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
        // b busy-polls before the message is there: its receive is the busy poll's
        let t0 = Instant::now();
        let mut wc = [Wc::default(); 4];
        let mut sent = false;
        loop {
            if !sent && t0.elapsed() > Duration::from_millis(2) {
                a.mr.write(0, b"last message");
                let s = [a.mr.sge(0, 64)];
                a.qp.post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
                    .unwrap();
                sent = true;
            }
            if b.cq.poll(&mut wc).unwrap() > 0 {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no receive");
        }
        assert_eq!(wc[0].status, WcStatus::Success);
        if to_err {
            let attr = QpAttr {
                qp_state: QpState::Err,
                ..Default::default()
            };
            b.qp.modify(&attr, QpAttrMask::STATE).unwrap();
        } else {
            drop(b); // QP, CQ, MR, PD, device: at once, no further poll or post
        }
        let ca = wait(&a.cq, 1);
        assert_eq!(ca.len(), 1, "round {round}: no completion for the sender");
        assert_eq!(
            ca[0].status,
            WcStatus::Success,
            "round {round}: {:?}",
            ca[0]
        );
    }
}
