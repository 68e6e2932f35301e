//! The whole receive path of a soft RoCE device (classification, responder,
//! completer) with an RC QP left in Init, RTR or RTS (with a SEND posted) and a
//! UD QP: arbitrary datagrams never panic, and
//! - the device counts every datagram and byte it was given (rx counters),
//! - drops by reason never exceed the datagrams received,
//! - completions never exceed the work requests posted (a forged ACK cannot
//!   complete work that does not exist),
//! - transmit stays bounded (no packet storm from a handful of inputs).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mut o = DeviceOptions::new(Ipv4Addr::new(10, 0, 0, 1));
    o.mode = IoMode::External;
    let ctx = o.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::all()).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let ud = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::all(),
        qkey: 0x1111_1111,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    ud.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    ud.modify(&a, QpAttrMask::STATE).unwrap();
    let r = [mr.sge(0, 1024)];
    let mut posted = 0u64;
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &r,
    }])
    .unwrap();
    ud.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &r,
    }])
    .unwrap();
    posted += 2;
    let state = ctl % 3; // 0 Init, 1 RTR, 2 RTS
    if state >= 1 {
        a.dest_qp_num = 0x11;
        a.max_dest_rd_atomic = 4;
        a.ah_attr.dgid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2));
        qp.modify(
            &a,
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )
        .unwrap();
    }
    if state == 2 {
        a.qp_state = QpState::Rts;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        qp.modify(
            &a,
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
        let s = [mr.sge(1024, 256)];
        let mut w = SendWr::new(3, WrOpcode::Send, &s);
        w.send_flags = SendFlags::SIGNALED;
        qp.post_send(&[w]).unwrap();
        posted += 1;
    }
    let dev = ctx.soft().unwrap();
    let mut now = Instant::now();
    let mut buf = vec![0u8; 9000];
    let mut tx = 0usize;
    while dev.poll_transmit(now, &mut buf).is_some() {
        tx += 1;
    }
    // datagrams: [len u8][bytes]...; bit 0 of a datagram's first byte retargets
    // its BTH DestQP to the RC QP, bit 1 to the UD QP
    let mut rest = rest;
    let (mut n_dgrams, mut n_bytes) = (0u64, 0u64);
    let before = dev.counters();
    while let Some((&len, tail)) = rest.split_first() {
        let len = (len as usize).min(tail.len());
        let mut d = tail[..len].to_vec();
        rest = &tail[len..];
        if d.len() >= 8 {
            let q = match d[0] & 3 {
                1 => Some(qp.qp_num()),
                2 => Some(ud.qp_num()),
                _ => None,
            };
            if let Some(q) = q {
                d[5..8].copy_from_slice(&q.to_be_bytes()[1..]);
            }
        }
        dev.handle_datagram(now, [10, 0, 0, 2], None, &d);
        n_dgrams += 1;
        n_bytes += d.len() as u64;
        now += Duration::from_millis(1);
        while dev.poll_transmit(now, &mut buf).is_some() {
            tx += 1;
            assert!(
                tx < 64 + 8 * n_dgrams as usize,
                "transmit storm: {tx} packets"
            );
        }
    }
    let c = dev.counters();
    assert_eq!(c.rx_packets - before.rx_packets, n_dgrams);
    assert_eq!(c.rx_bytes - before.rx_bytes, n_bytes);
    let drops = |c: &verbs::soft::Counters| {
        c.drop_truncated
            + c.drop_bad_opcode
            + c.drop_bad_length
            + c.drop_bad_version
            + c.drop_bad_icrc
            + c.drop_pkey
            + c.drop_no_qp
            + c.drop_qp_type
            + c.drop_qp_state
            + c.drop_qkey
            + c.drop_src
    };
    assert!(
        drops(&c) - drops(&before) <= n_dgrams,
        "more drops than datagrams: {c:?}"
    );
    let mut wc = [Wc::default(); 16];
    let mut done = 0u64;
    while let Ok(n) = cq.poll(&mut wc) {
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    assert!(
        done <= posted,
        "{done} completions for {posted} work requests"
    );
});
