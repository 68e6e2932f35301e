//! Unreliable Connected QPs over the seeded simulated network: no ACKs, no
//! retransmission, a sender completion when the last packet leaves, and a
//! responder that drops the rest of a message after a PSN gap and starts over
//! on the next FIRST/ONLY packet (rxe's UC `check_psn`).

mod common;
use std::time::Instant;

use common::*;
use sim::LinkConfig;
use verbs::*;
use wire::roce::{Ipv4Pseudo, OpFlags, Opcode, RocePacketRepr};

const SLOT: usize = 16 << 10;
/// Where WRITEs land in B's MR (message i at WOFF + i * SLOT).
const WOFF: usize = 8 << 20;
const MR_LEN: usize = 16 << 20;

/// Message `i` of `len` bytes: its index in the first 8 bytes (when they fit).
fn msg(i: u64, len: usize) -> Vec<u8> {
    let mut v = pattern(i + 1, len);
    if len >= 8 {
        v[..8].copy_from_slice(&i.to_le_bytes());
    }
    v
}

fn recv_all(s: &Side, n: usize) {
    let sg: Vec<[Sge; 1]> = (0..n).map(|j| [s.mr.sge(j * SLOT, SLOT as u32)]).collect();
    let wrs: Vec<RecvWr> = sg
        .iter()
        .enumerate()
        .map(|(j, sg_list)| RecvWr {
            wr_id: j as u64,
            sg_list,
        })
        .collect();
    s.qp.post_recv(&wrs).unwrap();
}

/// Posts message `i` (written at A's slot i) as `op`.
fn post(n: &Net, i: u64, op: WrOpcode, len: usize) {
    let (a, b) = (&n.a, &n.b);
    let off = i as usize * SLOT;
    a.mr.write(off, &msg(i, len));
    let sg = [a.mr.sge(off, len as u32)];
    let mut w = SendWr::new(i, op, &sg);
    w.imm_data = i as u32;
    if matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
        w.wr = WrDetail::Rdma {
            remote_addr: b.mr.addr() + (WOFF + off) as u64,
            rkey: b.mr.rkey(),
        };
    }
    a.qp.post_send(&[w]).unwrap();
}

fn check_delivered(n: &Net, wc: &Wc, ops: &[(WrOpcode, usize)]) -> u64 {
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert!(wc.wc_flags.contains(WcFlags::WITH_IMM), "{wc:?}");
    assert_eq!(wc.src_qp, n.a.qp.qp_num());
    let i = wc.imm_data as u64;
    let (op, len) = ops[i as usize];
    assert_eq!(wc.byte_len as usize, len, "message {i}: {wc:?}");
    let mut got = vec![0u8; len];
    match wc.opcode {
        WcOpcode::Recv => {
            assert_eq!(op, WrOpcode::SendWithImm);
            n.b.mr.read(wc.wr_id as usize * SLOT, &mut got);
        }
        WcOpcode::RecvRdmaWithImm => {
            assert_eq!(op, WrOpcode::RdmaWriteWithImm);
            n.b.mr.read(WOFF + i as usize * SLOT, &mut got);
        }
        o => panic!("unexpected {o:?}"),
    }
    assert!(got == msg(i, len), "message {i} ({op:?}, {len} B) torn");
    i
}

fn sender_all_ok(n: &Net, count: usize) {
    let mut ca = vec![];
    poll_all(&n.a.cq, &mut ca);
    assert_eq!(ca.len(), count, "sender completions");
    for (k, w) in ca.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (k as u64, WcStatus::Success), "{w:?}");
    }
}

#[test]
fn lossless_every_opcode_arrives_intact_in_order_without_acks() {
    let mut n = Net::uc(LinkConfig::default(), 1, MR_LEN, Mtu::Mtu1024);
    n.log = Some(vec![]);
    let sizes = [0usize, 1, 100, 1024, 1025, 3 * 1024 + 17, 10_000];
    let kinds = [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
    ];
    let ops: Vec<(WrOpcode, usize)> = (0..56).map(|i| (kinds[i % 4], sizes[i % 7])).collect();
    recv_all(&n.b, ops.len());
    for (i, &(op, len)) in ops.iter().enumerate() {
        post(&n, i as u64, op, len);
    }
    n.drive_until(100_000, |_| false);
    sender_all_ok(&n, ops.len());
    let mut cb = vec![];
    poll_all(&n.b.cq, &mut cb);
    // every message that consumes a receive, in order, on consecutive WQEs
    let expect: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].0 != WrOpcode::RdmaWrite)
        .collect();
    assert_eq!(cb.len(), expect.len(), "{cb:?}");
    for (k, (wc, &i)) in cb.iter().zip(&expect).enumerate() {
        let (op, len) = ops[i];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.wr_id, k as u64);
        assert_eq!(wc.byte_len as usize, len, "{wc:?}");
        match op {
            WrOpcode::Send => {
                assert_eq!(wc.opcode, WcOpcode::Recv);
                assert!(!wc.wc_flags.contains(WcFlags::WITH_IMM));
                let mut got = vec![0u8; len];
                n.b.mr.read(k * SLOT, &mut got);
                assert!(got == msg(i as u64, len), "SEND {i} torn");
            }
            _ => assert_eq!(check_delivered(&n, wc, &ops), i as u64),
        }
    }
    for (i, &(op, len)) in ops.iter().enumerate() {
        if op == WrOpcode::RdmaWrite {
            let mut got = vec![0u8; len];
            n.b.mr.read(WOFF + i * SLOT, &mut got);
            assert!(got == msg(i as u64, len), "WRITE {i} torn");
        }
    }
    // the wire: UC opcodes only, never AckReq, consecutive PSNs across 2^24,
    // nothing at all from the responder, every ICRC good
    let log = n.log.take().unwrap();
    assert!(
        log.iter().all(|(src, _)| *src == IP_A),
        "the UC responder sent something"
    );
    let mut psn = log[0].1.bth.psn;
    assert_eq!(psn.value(), 0xff_fff0);
    for (_, r) in &log {
        let info = r.info().unwrap();
        assert!(info.has(OpFlags::UC) && info.has(OpFlags::REQ), "{r}");
        assert!(!r.bth.ack_req, "{r}");
        assert_eq!(r.bth.psn, psn);
        psn = psn.add(1);
    }
    assert!(psn.value() < 0xff_fff0, "PSNs wrapped");
    assert!(log
        .iter()
        .any(|(_, r)| r.opcode() == Opcode::UC_RDMA_WRITE_MIDDLE));
    assert_eq!(n.b.ctx.soft().unwrap().counters().tx_packets, 0);
    assert_eq!(n.b.ctx.soft().unwrap().counters().drop_bad_icrc, 0);
    let c =
        n.b.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.b.qp.qp_num())
            .unwrap();
    assert_eq!((c.uc_drops, c.uc_torn), (0, 0));
}

/// Many multi-packet messages over links that lose packets: every delivered
/// message is intact, delivered once and in order; every send completes OK.
#[test]
fn loss_delivers_whole_messages_at_most_once_in_order() {
    let (mut sent, mut delivered, mut multi) = (0, 0, 0);
    for seed in 1..=4u64 {
        let cfg = LinkConfig {
            loss: 0.04,
            ..Default::default()
        };
        let mut n = Net::uc(cfg, seed, MR_LEN, Mtu::Mtu1024);
        let ops: Vec<(WrOpcode, usize)> = (0..240u64)
            .map(|i| {
                let len = 8 + (pattern(seed * 1000 + i, 2)[0] as usize * 23) % 5000;
                let op = match i % 3 {
                    0 => WrOpcode::SendWithImm,
                    1 => WrOpcode::RdmaWriteWithImm,
                    _ => WrOpcode::RdmaWrite,
                };
                (op, len)
            })
            .collect();
        recv_all(&n.b, ops.len());
        for (i, &(op, len)) in ops.iter().enumerate() {
            post(&n, i as u64, op, len);
        }
        n.drive_until(200_000, |_| false);
        sender_all_ok(&n, ops.len());
        let mut cb = vec![];
        poll_all(&n.b.cq, &mut cb);
        let mut last = None;
        for wc in &cb {
            let i = check_delivered(&n, wc, &ops);
            assert!(last.is_none_or(|l| i > l), "message {i} after {last:?}");
            last = Some(i);
            if ops[i as usize].1 > 1024 {
                multi += 1;
            }
        }
        sent += ops.iter().filter(|o| o.0 != WrOpcode::RdmaWrite).count();
        delivered += cb.len();
        let c =
            n.b.qp
                .context()
                .soft()
                .unwrap()
                .qp_counters(n.b.qp.qp_num())
                .unwrap();
        assert!(c.uc_drops > 0 && c.uc_torn > 0, "{c:?}");
        assert_eq!(n.b.ctx.soft().unwrap().counters().tx_packets, 0);
        assert_eq!(n.b.qp.query().unwrap().qp_state, QpState::Rts);
        assert_eq!(n.a.qp.query().unwrap().qp_state, QpState::Rts);
    }
    // ~4 % packet loss over ~3 packets a message: most, not all, get through
    assert!(
        delivered < sent && delivered > sent / 2,
        "{delivered} of {sent}"
    );
    assert!(multi > 50, "{multi} multi-packet messages delivered");
}

/// Loss, duplication and reordering: delivered messages are still never torn
/// (a duplicated ONLY packet may be delivered twice: UC does not detect
/// duplicates, as rxe).
#[test]
fn dup_and_reorder_never_tear_a_message() {
    for seed in 5..=7u64 {
        let mut n = Net::uc(LinkConfig::lossy(0.06), seed, MR_LEN, Mtu::Mtu512);
        let ops: Vec<(WrOpcode, usize)> = (0..150u64)
            .map(|i| {
                let len = 8 + (pattern(seed * 77 + i, 2)[0] as usize * 11) % 2500;
                let op = if i % 2 == 0 {
                    WrOpcode::SendWithImm
                } else {
                    WrOpcode::RdmaWriteWithImm
                };
                (op, len)
            })
            .collect();
        recv_all(&n.b, ops.len() + 50);
        for (i, &(op, len)) in ops.iter().enumerate() {
            post(&n, i as u64, op, len);
        }
        n.drive_until(200_000, |_| false);
        sender_all_ok(&n, ops.len());
        let mut cb = vec![];
        poll_all(&n.b.cq, &mut cb);
        // reordering within a message tears it: fewer get through, none torn
        assert!(cb.len() > 20, "{} delivered", cb.len());
        for wc in &cb {
            check_delivered(&n, wc, &ops);
        }
    }
}

#[test]
fn read_and_atomics_are_rejected_at_post() {
    let n = Net::uc(LinkConfig::default(), 1, 1 << 20, Mtu::Mtu1024);
    let a = &n.a;
    let sg = [a.mr.sge(0, 8)];
    let send = SendWr::new(1, WrOpcode::Send, &sg);
    let mut read = SendWr::new(2, WrOpcode::RdmaRead, &sg);
    read.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr(),
        rkey: n.b.mr.rkey(),
    };
    let e = a.qp.post_send(&[send, read]).unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(e.error.errno(), libc::EINVAL);
    for op in [WrOpcode::AtomicFetchAndAdd, WrOpcode::AtomicCmpAndSwp] {
        let mut w = SendWr::new(3, op, &sg);
        w.wr = WrDetail::Atomic {
            remote_addr: n.b.mr.addr(),
            compare_add: 1,
            swap: 2,
            rkey: n.b.mr.rkey(),
        };
        let e = a.qp.post_send(&[w]).unwrap_err();
        assert_eq!((e.index, e.error.errno()), (0, libc::EINVAL));
    }
    // the SEND before the READ was posted; the QP is still usable
    assert_eq!(a.qp.query().unwrap().qp_state, QpState::Rts);
    assert_eq!(
        n.a.ctx
            .soft()
            .unwrap()
            .with_engine(|e| e.qp(a.qp.qp_num()).unwrap().sq_len()),
        1
    );
}

#[test]
fn uc_attribute_masks_as_the_kernel() {
    let s = side(IP_A, QpType::Uc, 4096);
    let qp = &s.qp;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: 7,
        ..Default::default()
    };
    use QpAttrMask as M;
    let base = M::STATE | M::PKEY_INDEX | M::PORT;
    // INIT needs ACCESS_FLAGS (not QKEY, that is UD)
    assert!(qp.modify(&a, base).is_err());
    assert!(qp.modify(&a, base | M::QKEY).is_err());
    qp.modify(&a, base | M::ACCESS_FLAGS).unwrap();
    a.qp_state = QpState::Rtr;
    a.ah_attr.dgid = Gid::from_ipv4(IP_B.into());
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = 0x99;
    let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    assert!(
        qp.modify(&a, rtr - M::RQ_PSN).is_err(),
        "RQ_PSN is required"
    );
    assert!(qp.modify(&a, rtr - M::AV).is_err(), "AV is required");
    // RC-only attributes are rejected on UC
    for extra in [M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER, M::QKEY, M::TIMEOUT] {
        assert!(qp.modify(&a, rtr | extra).is_err(), "{extra:?}");
    }
    qp.modify(&a, rtr | M::ACCESS_FLAGS | M::PKEY_INDEX)
        .unwrap();
    a.qp_state = QpState::Rts;
    for extra in [
        M::TIMEOUT,
        M::RETRY_CNT,
        M::RNR_RETRY,
        M::MAX_QP_RD_ATOMIC,
        M::MIN_RNR_TIMER,
    ] {
        assert!(
            qp.modify(&a, M::STATE | M::SQ_PSN | extra).is_err(),
            "{extra:?}"
        );
    }
    assert!(qp.modify(&a, M::STATE).is_err(), "SQ_PSN is required");
    qp.modify(&a, M::STATE | M::SQ_PSN | M::ACCESS_FLAGS)
        .unwrap();
    assert!(qp.modify(&a, M::STATE | M::MIN_RNR_TIMER).is_err());
    qp.modify(&a, M::STATE | M::ACCESS_FLAGS).unwrap();
    a.qp_state = QpState::Sqd;
    qp.modify(&a, M::STATE).unwrap();
    // SQD->SQD: AV allowed, PORT and TIMEOUT are RC's
    qp.modify(&a, M::STATE | M::AV).unwrap();
    assert!(qp.modify(&a, M::STATE | M::PORT).is_err());
    assert!(qp.modify(&a, M::STATE | M::TIMEOUT).is_err());
    assert_eq!(qp.query().unwrap().qp_state, QpState::Sqd);
}

/// Packets from A, one by one, handed to B unless `drop` says otherwise.
fn pump(a: &Side, b: &Side, mut drop: impl FnMut(&RocePacketRepr) -> bool) -> usize {
    let now = Instant::now();
    let mut buf = vec![0u8; 9000];
    let mut sent = 0;
    while let Some(t) = a.ctx.soft().unwrap().poll_transmit(now, &mut buf) {
        let (r, _) = RocePacketRepr::parse(&buf[..t.len]).unwrap();
        sent += 1;
        if !drop(&r) {
            let ip = Ipv4Pseudo::df(IP_A, IP_B, t.sport, t.dport);
            b.ctx
                .soft()
                .unwrap()
                .handle_datagram(now, IP_A, Some(&ip), &buf[..t.len]);
        }
    }
    if let Some(t) = b.ctx.soft().unwrap().poll_transmit(now, &mut buf) {
        panic!("the UC responder sent {t:?}");
    }
    sent
}

fn pair() -> (Side, Side) {
    let a = side(IP_A, QpType::Uc, MR_LEN);
    let b = side(IP_B, QpType::Uc, MR_LEN);
    connect_uc(&a.qp, 100, IP_B, b.qp.qp_num(), 100, Mtu::Mtu1024);
    connect_uc(&b.qp, 100, IP_A, a.qp.qp_num(), 100, Mtu::Mtu1024);
    (a, b)
}

fn send(a: &Side, i: u64, len: usize) {
    let off = i as usize * SLOT;
    a.mr.write(off, &msg(i, len));
    let sg = [a.mr.sge(off, len as u32)];
    let mut w = SendWr::new(i, WrOpcode::SendWithImm, &sg);
    w.imm_data = i as u32;
    a.qp.post_send(&[w]).unwrap();
}

fn recvs(b: &Side) -> Vec<(u64, u32, u32)> {
    let mut cb = vec![];
    poll_all(&b.cq, &mut cb);
    cb.iter()
        .map(|w| {
            assert_eq!(w.status, WcStatus::Success);
            (w.wr_id, w.imm_data, w.byte_len)
        })
        .collect()
}

/// A lost MIDDLE or LAST packet: the message is dropped, its receive WQE is
/// reused for the next message, which (FIRST/ONLY, PSN jumped) is accepted.
#[test]
fn a_gap_drops_the_rest_of_the_message_and_resyncs_on_first() {
    let (a, b) = pair();
    let sg: Vec<[Sge; 1]> = (0..4).map(|j| [b.mr.sge(j * SLOT, SLOT as u32)]).collect();
    for (j, sg_list) in sg.iter().enumerate() {
        b.qp.post_recv(&[RecvWr {
            wr_id: j as u64,
            sg_list,
        }])
        .unwrap();
    }
    // 0: 3 packets, MIDDLE lost; 1: ONLY; 2: 3 packets, LAST lost; 3: 2 packets
    send(&a, 0, 3000);
    send(&a, 1, 500);
    send(&a, 2, 2500);
    send(&a, 3, 2000);
    let mut k = 0;
    let n = pump(&a, &b, |r| {
        k += 1;
        let drop = (k == 2 && r.opcode() == Opcode::UC_SEND_MIDDLE)
            || (k == 7 && r.opcode() == Opcode::UC_SEND_LAST_WITH_IMMEDIATE);
        assert!(k != 2 && k != 7 || drop, "packet {k} is {r}");
        drop
    });
    assert_eq!(n, 9);
    // sender: all four complete successfully although two never arrived
    let mut ca = vec![];
    poll_all(&a.cq, &mut ca);
    assert_eq!(ca.len(), 4);
    assert!(ca.iter().all(|w| w.status == WcStatus::Success));
    // receiver: 1 lands in WQE 0 (reused after 0 was torn), 3 in WQE 1 (reused
    // after 2 lost its LAST)
    assert_eq!(recvs(&b), vec![(0, 1, 500), (1, 3, 2000)]);
    let mut got = vec![0u8; 2000];
    b.mr.read(SLOT, &mut got);
    assert!(got == msg(3, 2000));
    let c =
        b.qp.context()
            .soft()
            .unwrap()
            .qp_counters(b.qp.qp_num())
            .unwrap();
    assert_eq!((c.uc_drops, c.uc_torn), (1, 2), "{c:?}");
    assert_eq!(b.qp.query().unwrap().qp_state, QpState::Rts);
    assert_eq!(
        b.ctx
            .soft()
            .unwrap()
            .with_engine(|e| e.qp(b.qp.qp_num()).unwrap().rq_len()),
        2
    );
}

/// No receive WQE: the SEND is dropped silently (no RNR NAK), and the next
/// one, once a receive is posted, arrives.
#[test]
fn send_without_receive_is_dropped_silently() {
    let (a, b) = pair();
    send(&a, 0, 3000);
    send(&a, 1, 10);
    assert_eq!(pump(&a, &b, |_| false), 4);
    let mut ca = vec![];
    poll_all(&a.cq, &mut ca);
    assert_eq!(ca.len(), 2);
    assert!(ca.iter().all(|w| w.status == WcStatus::Success));
    assert!(recvs(&b).is_empty());
    assert_eq!(
        b.qp.context()
            .soft()
            .unwrap()
            .qp_counters(b.qp.qp_num())
            .unwrap()
            .uc_drops,
        4
    );
    let sg = [b.mr.sge(0, SLOT as u32)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &sg,
    }])
    .unwrap();
    send(&a, 2, 1500);
    pump(&a, &b, |_| false);
    assert_eq!(recvs(&b), vec![(9, 2, 1500)]);
    assert_eq!(b.qp.query().unwrap().qp_state, QpState::Rts);
}

/// A WRITE with a bad rkey, or beyond the MR, is dropped: nothing lands, no
/// NAK, both QPs stay in RTS; a too-long SEND is dropped and its WQE reused.
#[test]
fn remote_errors_drop_the_message_not_the_qp() {
    let (a, b) = pair();
    let sg = [a.mr.sge(0, 2000)];
    a.mr.write(0, &[0xab; 2000]);
    for (rkey, addr) in [
        (b.mr.rkey() ^ 0x100, b.mr.addr()),
        (b.mr.rkey(), b.mr.addr() + MR_LEN as u64 - 100),
    ] {
        let mut w = SendWr::new(5, WrOpcode::RdmaWrite, &sg);
        w.wr = WrDetail::Rdma {
            remote_addr: addr,
            rkey,
        };
        a.qp.post_send(&[w]).unwrap();
    }
    let small = [b.mr.sge(0, 100)];
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &small,
    }])
    .unwrap();
    send(&a, 1, 1500); // longer than the receive: dropped, WQE kept
    send(&a, 2, 60); // fits: lands in the same WQE
    pump(&a, &b, |_| false);
    let mut ca = vec![];
    poll_all(&a.cq, &mut ca);
    assert_eq!(ca.len(), 4);
    assert!(ca.iter().all(|w| w.status == WcStatus::Success), "{ca:?}");
    assert!(
        b.mr.to_vec().iter().all(|&x| x != 0xab),
        "a bad WRITE landed"
    );
    assert_eq!(recvs(&b), vec![(1, 2, 60)]);
    assert_eq!(b.qp.query().unwrap().qp_state, QpState::Rts);
    assert_eq!(a.qp.query().unwrap().qp_state, QpState::Rts);
}

/// With an SRQ the receive WQE of a torn message cannot go back: it completes
/// with REM_INV_REQ_ERR (class E, as rxe) and the QP stays in RTS.
#[test]
fn srq_receive_of_a_torn_message_completes_in_error() {
    let a = side(IP_A, QpType::Uc, MR_LEN);
    let mut b = side(IP_B, QpType::Uc, MR_LEN);
    let srq =
        b.pd.create_srq(&SrqInitAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut init = QpInitAttr::new(QpType::Uc, &b.cq, &b.cq);
    init.srq = Some(&srq);
    b.qp = b.pd.create_qp(&init).unwrap();
    connect_uc(&a.qp, 100, IP_B, b.qp.qp_num(), 100, Mtu::Mtu1024);
    connect_uc(&b.qp, 100, IP_A, a.qp.qp_num(), 100, Mtu::Mtu1024);
    for j in 0..2u64 {
        let sg = [b.mr.sge(j as usize * SLOT, SLOT as u32)];
        srq.post_recv(&[RecvWr {
            wr_id: j,
            sg_list: &sg,
        }])
        .unwrap();
    }
    send(&a, 0, 3000); // MIDDLE lost
    send(&a, 1, 700);
    let mut k = 0;
    pump(&a, &b, |_| {
        k += 1;
        k == 2
    });
    let mut cb = vec![];
    poll_all(&b.cq, &mut cb);
    assert_eq!(cb.len(), 2, "{cb:?}");
    assert_eq!((cb[0].wr_id, cb[0].status), (0, WcStatus::RemInvReqErr));
    assert_eq!(
        (cb[1].wr_id, cb[1].status, cb[1].imm_data, cb[1].byte_len),
        (1, WcStatus::Success, 1, 700)
    );
    assert_eq!(b.qp.query().unwrap().qp_state, QpState::Rts);
}
