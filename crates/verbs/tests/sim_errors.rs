//! Error paths, the state machine, UD/GSI, SRQ and notification, in the sim.

mod common;
use common::*;
use sim::LinkConfig;
use std::net::Ipv4Addr;
use std::time::Duration;
use verbs::*;

fn drive_wcs(n: &mut Net, want_a: usize, want_b: usize) -> (Vec<Wc>, Vec<Wc>) {
    let (mut ca, mut cb) = (vec![], vec![]);
    n.drive_until(200_000, |n| {
        poll_all(&n.a.cq, &mut ca);
        poll_all(&n.b.cq, &mut cb);
        ca.len() >= want_a && cb.len() >= want_b
    });
    (ca, cb)
}

#[test]
fn rnr_retry_exceeded_then_flush() {
    let p = RcParams {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..Default::default()
    };
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let s = [n.a.mr.sge(0, 10)];
    n.a.qp
        .post_send(&[
            SendWr::new(1, WrOpcode::Send, &s),
            SendWr::new(2, WrOpcode::Send, &s),
        ])
        .unwrap();
    let (ca, _) = drive_wcs(&mut n, 2, 0);
    assert_eq!(ca[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!((ca[1].wr_id, ca[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(n.a.qp.query().unwrap().qp_state, QpState::Err);
    assert_eq!(
        n.a.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.a.qp.qp_num())
            .unwrap()
            .rnr_naks_rcvd,
        3
    );
    assert_eq!(
        n.a.ctx.poll_async_event(),
        Some(AsyncEvent::QpFatal {
            qp_num: n.a.qp.qp_num()
        })
    );
    // posting to an ERR QP completes with a flush at once
    n.a.qp
        .post_send(&[SendWr::new(3, WrOpcode::Send, &s)])
        .unwrap();
    let mut wc = [Wc::default(); 4];
    assert_eq!(n.a.cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn rnr_infinite_recovers_when_recv_posted() {
    let p = RcParams {
        rnr_retry: 7,
        min_rnr_timer: 14,
        ..Default::default()
    }; // 1.28 ms
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let s = [n.a.mr.sge(0, 10)];
    n.a.qp
        .post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
        .unwrap();
    // 20 ms of RNR back-off
    let t0 = n.now();
    n.drive_until(100_000, |n| n.now() - t0 > Duration::from_millis(20));
    assert!(
        n.a.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.a.qp.qp_num())
            .unwrap()
            .rnr_naks_rcvd
            >= 10
    );
    let r = [n.b.mr.sge(0, 100)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let (ca, cb) = drive_wcs(&mut n, 1, 1);
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!((cb[0].wr_id, cb[0].byte_len), (9, 10));
}

#[test]
fn remote_access_errors() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let r = [n.b.mr.sge(0, 100)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let s = [n.a.mr.sge(0, 64)];
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &s);
    // out of bounds of B's MR
    w.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr() + 4090,
        rkey: n.b.mr.rkey(),
    };
    n.a.qp
        .post_send(&[w, SendWr::new(2, WrOpcode::Send, &s)])
        .unwrap();
    let (ca, cb) = drive_wcs(&mut n, 2, 1);
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemAccessErr));
    assert_eq!((ca[1].wr_id, ca[1].status), (2, WcStatus::WrFlushErr));
    // the responder moved to ERR and flushed its receive
    assert_eq!((cb[0].wr_id, cb[0].status), (9, WcStatus::WrFlushErr));
    assert_eq!(n.b.qp.query().unwrap().qp_state, QpState::Err);
}

#[test]
fn bad_rkey_read_and_missing_qp_access() {
    for case in 0..2 {
        let mut p = RcParams::default();
        if case == 1 {
            p.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE; // no REMOTE_READ on the QP
        }
        let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
        let s = [n.a.mr.sge(0, 64)];
        let mut w = SendWr::new(1, WrOpcode::RdmaRead, &s);
        let rkey = if case == 0 {
            n.b.mr.rkey() ^ 0x55
        } else {
            n.b.mr.rkey()
        };
        w.wr = WrDetail::Rdma {
            remote_addr: n.b.mr.addr(),
            rkey,
        };
        n.a.qp.post_send(&[w]).unwrap();
        let (ca, _) = drive_wcs(&mut n, 1, 0);
        assert_eq!(ca[0].status, WcStatus::RemAccessErr, "case {case}");
    }
}

#[test]
fn recv_too_small_is_loc_len_and_rem_inv_req() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 8192, &p);
    let r = [n.b.mr.sge(0, 100)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let s = [n.a.mr.sge(0, 3000)];
    n.a.qp
        .post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
        .unwrap();
    let (ca, cb) = drive_wcs(&mut n, 1, 1);
    assert_eq!(ca[0].status, WcStatus::RemInvReqErr);
    assert_eq!(cb[0].status, WcStatus::LocLenErr);
}

#[test]
fn local_protection_error() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let s = [Sge {
        addr: n.a.mr.addr(),
        length: 10,
        lkey: 0xdead_0001,
    }];
    n.a.qp
        .post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
        .unwrap();
    let (ca, _) = drive_wcs(&mut n, 1, 0);
    assert_eq!(ca[0].status, WcStatus::LocProtErr);
}

#[test]
fn transport_retry_exceeded() {
    let p = RcParams {
        retry_cnt: 3,
        timeout: 10,
        ..Default::default()
    };
    let mut n = Net::rc(
        LinkConfig {
            loss: 1.0,
            ..Default::default()
        },
        1,
        4096,
        &p,
    );
    let s = [n.a.mr.sge(0, 10)];
    n.a.qp
        .post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
        .unwrap();
    let t0 = n.now();
    let (ca, _) = drive_wcs(&mut n, 1, 0);
    assert_eq!(ca[0].status, WcStatus::RetryExcErr);
    assert_eq!(
        n.a.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.a.qp.qp_num())
            .unwrap()
            .timeouts,
        4
    );
    // 4 timeouts of 4.096 us * 2^10 = 4.19 ms each
    let el = n.now() - t0;
    assert!(
        el >= Duration::from_micros(16_700) && el < Duration::from_millis(20),
        "{el:?}"
    );
}

#[test]
fn qp_state_machine_and_masks() {
    let s = side(IP_A, QpType::Rc, 4096);
    let qp = &s.qp;
    let m = QpAttrMask::STATE;
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    // RESET -> RTR is not a transition
    assert_eq!(qp.modify(&a, m).unwrap_err().errno(), libc::EINVAL);
    // RESET -> INIT without required attributes
    a.qp_state = QpState::Init;
    assert!(matches!(qp.modify(&a, m), Err(Error::Inval)));
    // with an attribute not allowed in this transition (DEST_QPN)
    a.port_num = 1;
    let init =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    assert!(qp.modify(&a, init | QpAttrMask::DEST_QPN).is_err());
    qp.modify(&a, init).unwrap();
    assert_eq!(qp.query().unwrap().qp_state, QpState::Init);
    // post_send in INIT: EINVAL
    let sg = [s.mr.sge(0, 1)];
    let e = qp
        .post_send(&[SendWr::new(1, WrOpcode::Send, &sg)])
        .unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, libc::EINVAL));
    // INIT -> RTR missing DEST_QPN
    a.qp_state = QpState::Rtr;
    a.ah_attr.dgid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2));
    let rtr = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    assert!(qp.modify(&a, rtr).is_err());
    qp.modify(&a, rtr | QpAttrMask::DEST_QPN).unwrap();
    // RTR -> RTS needs SQ_PSN, TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC
    a.qp_state = QpState::Rts;
    assert!(qp
        .modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .is_err());
    a.retry_cnt = 9; // out of range
    let rts = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    assert!(qp.modify(&a, rts).is_err());
    a.retry_cnt = 7;
    qp.modify(&a, rts).unwrap();
    // RTS -> SQD -> RTS, any -> ERR -> RESET -> INIT
    a.qp_state = QpState::Sqd;
    qp.modify(&a, m).unwrap();
    a.qp_state = QpState::Rts;
    qp.modify(&a, m).unwrap();
    a.qp_state = QpState::Err;
    qp.modify(&a, m).unwrap();
    a.qp_state = QpState::Rts;
    assert!(qp.modify(&a, m).is_err());
    a.qp_state = QpState::Reset;
    qp.modify(&a, m).unwrap();
    a.qp_state = QpState::Init;
    qp.modify(&a, init).unwrap();
    // CUR_STATE mismatch
    a.cur_qp_state = QpState::Rts;
    assert!(qp.modify(&a, init | QpAttrMask::CUR_STATE).is_err());
}

#[test]
fn bad_wr_index_reported() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let r = [n.b.mr.sge(0, 100)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let s = [n.a.mr.sge(0, 10)];
    let many = [n.a.mr.sge(0, 1); 9];
    let e =
        n.a.qp
            .post_send(&[
                SendWr::new(1, WrOpcode::Send, &s),
                SendWr::new(2, WrOpcode::Send, &many),
            ])
            .unwrap_err();
    assert_eq!(e.index, 1);
    // UD opcode detail on an RC QP
    let mut w = SendWr::new(3, WrOpcode::RdmaWrite, &s);
    w.wr = WrDetail::None;
    assert_eq!(n.a.qp.post_send(&[w]).unwrap_err().index, 0);
    let (ca, cb) = drive_wcs(&mut n, 1, 1);
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::Success));
    assert_eq!(cb[0].byte_len, 10);
}

#[test]
fn unsignaled_and_sq_sig_all() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 4096, &p);
    let s = [n.a.mr.sge(0, 8)];
    let mut w1 = SendWr::new(1, WrOpcode::RdmaWrite, &s);
    w1.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr(),
        rkey: n.b.mr.rkey(),
    };
    w1.send_flags = SendFlags::empty();
    let mut w2 = w1;
    w2.wr_id = 2;
    w2.send_flags = SendFlags::SIGNALED;
    n.a.qp.post_send(&[w1, w2]).unwrap();
    let (ca, _) = drive_wcs(&mut n, 1, 0);
    n.drive_until(1000, |_| false);
    let mut more = vec![];
    poll_all(&n.a.cq, &mut more);
    assert_eq!(ca.len() + more.len(), 1);
    assert_eq!(ca[0].wr_id, 2);
    // with sq_sig_all every WR completes, SIGNALED or not
    let mut a = side(IP_A, QpType::Rc, 4096);
    let b = side(IP_B, QpType::Rc, 4096);
    let mut init = QpInitAttr::new(QpType::Rc, &a.cq, &a.cq);
    init.sq_sig_all = true;
    a.qp = a.pd.create_qp(&init).unwrap();
    connect_rc(&a.qp, p.psn_a, IP_B, b.qp.qp_num(), p.psn_b, &p);
    connect_rc(&b.qp, p.psn_b, IP_A, a.qp.qp_num(), p.psn_a, &p);
    let s = [a.mr.sge(0, 8)];
    let mut w = SendWr::new(7, WrOpcode::RdmaWrite, &s);
    w.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    w.send_flags = SendFlags::empty();
    let mut w2 = w;
    w2.wr_id = 8;
    a.qp.post_send(&[w, w2]).unwrap();
    let mut n = Net::new(a, b, LinkConfig::default(), 5);
    let (ca, _) = drive_wcs(&mut n, 2, 0);
    assert_eq!(ca.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [7, 8]);
}

#[test]
fn ud_send_recv_grh_qkey_and_gsi() {
    let a = side(IP_A, QpType::Ud, 8192);
    let b = side(IP_B, QpType::Ud, 8192);
    for (s, qkey) in [(&a, 0x1111), (&b, 0x2222)] {
        let mut at = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey,
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
    let gsi_cq = b.ctx.create_cq(16, None).unwrap();
    let gsi = gsi::create_gsi_qp(&b.pd, &gsi_cq, &gsi_cq, QpCap::default()).unwrap();
    assert_eq!(gsi.qp_num(), 1);
    assert!(gsi::create_gsi_qp(&b.pd, &gsi_cq, &gsi_cq, QpCap::default()).is_err());
    let r = [b.mr.sge(0, 40 + 100)];
    b.qp.post_recv(&[
        RecvWr {
            wr_id: 5,
            sg_list: &r,
        },
        RecvWr {
            wr_id: 6,
            sg_list: &r,
        },
    ])
    .unwrap();
    let g = [b.mr.sge(4096, 40 + 256)];
    gsi.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: &g,
    }])
    .unwrap();
    a.mr.write(0, b"hello ud");
    let ah =
        a.pd.create_ah(&AhAttr {
            dgid: Gid::from_ipv4(Ipv4Addr::from(IP_B)),
            ..Default::default()
        })
        .unwrap();
    let s = [a.mr.sge(0, 8)];
    let mut w = SendWr::new(1, WrOpcode::SendWithImm, &s);
    w.imm_data = 0xabcd;
    w.wr = WrDetail::Ud {
        ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x2222,
    };
    let mut bad = w;
    bad.wr_id = 2;
    bad.wr = WrDetail::Ud {
        ah,
        remote_qpn: b.qp.qp_num(),
        remote_qkey: 0x3333,
    }; // wrong Q_Key: dropped
       // a MAD from A's GSI QP to B's QP1 (Q_Key with the high bit set: the QP's own)
    let a_gsi = gsi::create_gsi_qp(&a.pd, &a.cq, &a.cq, QpCap::default()).unwrap();
    let mad = [a.mr.sge(0, 256)];
    let mut m = SendWr::new(3, WrOpcode::Send, &mad);
    m.wr = WrDetail::Ud {
        ah,
        remote_qpn: 1,
        remote_qkey: wire::roce::GSI_QKEY,
    };
    a.qp.post_send(&[w, bad]).unwrap();
    a_gsi.post_send(&[m]).unwrap();
    let mut n = Net::new(a, b, LinkConfig::default(), 3);
    let (ca, mut cb) = drive_wcs(&mut n, 3, 1);
    n.drive_until(10_000, |_| false);
    poll_all(&n.b.cq, &mut cb);
    assert!(ca.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].byte_len, cb[0].imm_data),
        (5, 48, 0xabcd)
    );
    assert!(cb[0].wc_flags.contains(WcFlags::GRH | WcFlags::WITH_IMM));
    assert_eq!(cb[0].src_qp, n.a.qp.qp_num());
    let mut got = [0u8; 48];
    n.b.mr.read(0, &mut got);
    assert_eq!(&got[40..], b"hello ud");
    assert_eq!(got[20], 0x45, "IPv4 header in the GRH slot");
    assert_eq!(&got[32..36], &IP_A);
    assert_eq!(n.b.ctx.soft().unwrap().counters().drop_qkey, 1);
    let mut wc = [Wc::default(); 2];
    assert_eq!(gsi_cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].byte_len, wc[0].src_qp), (77, 296, 1));
}

#[test]
fn srq_limit_event_and_shared_receives() {
    let a = side(IP_A, QpType::Rc, 8192);
    let mut b = side(IP_B, QpType::Rc, 8192);
    let srq =
        b.pd.create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    let mut init = QpInitAttr::new(QpType::Rc, &b.cq, &b.cq);
    init.srq = Some(&srq);
    b.qp = b.pd.create_qp(&init).unwrap();
    let p = RcParams::default();
    connect_rc(&a.qp, p.psn_a, IP_B, b.qp.qp_num(), p.psn_b, &p);
    connect_rc(&b.qp, p.psn_b, IP_A, a.qp.qp_num(), p.psn_a, &p);
    for i in 0..4 {
        let r = [b.mr.sge(i * 100, 100)];
        srq.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: &r,
        }])
        .unwrap();
    }
    // post_recv on a QP with an SRQ is invalid
    let r = [b.mr.sge(0, 1)];
    assert!(b
        .qp
        .post_recv(&[RecvWr {
            wr_id: 0,
            sg_list: &r
        }])
        .is_err());
    srq.set_limit(3).unwrap();
    let s = [a.mr.sge(0, 10)];
    a.qp.post_send(&[
        SendWr::new(1, WrOpcode::Send, &s),
        SendWr::new(2, WrOpcode::Send, &s),
    ])
    .unwrap();
    let mut n = Net::new(a, b, LinkConfig::default(), 3);
    let (_, cb) = drive_wcs(&mut n, 2, 2);
    assert_eq!(cb.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(
        n.b.ctx.poll_async_event(),
        Some(AsyncEvent::SrqLimitReached { srq: srq.id() })
    );
    assert_eq!(n.b.ctx.poll_async_event(), None, "one-shot");
}

#[test]
fn completion_channel_solicited_only() {
    let a = side(IP_A, QpType::Rc, 8192);
    let mut b = side(IP_B, QpType::Rc, 8192);
    let ch = b.ctx.create_comp_channel().unwrap();
    b.cq = b.ctx.create_cq(64, Some(&ch)).unwrap();
    b.qp =
        b.pd.create_qp(&QpInitAttr::new(QpType::Rc, &b.cq, &b.cq))
            .unwrap();
    let p = RcParams::default();
    connect_rc(&a.qp, p.psn_a, IP_B, b.qp.qp_num(), p.psn_b, &p);
    connect_rc(&b.qp, p.psn_b, IP_A, a.qp.qp_num(), p.psn_a, &p);
    let r = [b.mr.sge(0, 100)];
    b.qp.post_recv(&[
        RecvWr {
            wr_id: 1,
            sg_list: &r,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &r,
        },
    ])
    .unwrap();
    b.cq.req_notify(true).unwrap();
    let s = [a.mr.sge(0, 10)];
    a.qp.post_send(&[SendWr::new(1, WrOpcode::Send, &s)])
        .unwrap();
    let mut n = Net::new(a, b, LinkConfig::default(), 3);
    n.drive_until(10_000, |_| false);
    assert!(
        matches!(ch.get_cq_event(0), Err(Error::Again)),
        "unsolicited must not fire"
    );
    let mut w = SendWr::new(2, WrOpcode::Send, &s);
    w.send_flags |= SendFlags::SOLICITED;
    n.a.qp.post_send(&[w]).unwrap();
    n.drive_until(10_000, |_| false);
    // the fd is readable (epoll-able) and the event names our CQ
    let mut pfd = libc::pollfd {
        fd: ch.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
    assert_eq!(ch.get_cq_event(0).unwrap(), n.b.cq.id());
    n.b.cq.ack_events(1);
    let mut wc = [Wc::default(); 4];
    assert_eq!(n.b.cq.poll(&mut wc).unwrap(), 2);
    assert!(wc[1].wc_flags.contains(WcFlags::SOLICITED));
}

/// The receive path (classify, responder, completer) on random and mutated
/// packets aimed at live QPs: counted drops or protocol errors, never a panic.
#[test]
fn garbage_datagrams_never_panic() {
    let p = RcParams::default();
    let n = Net::rc(LinkConfig::default(), 1, 1 << 16, &p);
    let r = [n.b.mr.sge(0, 4096)];
    for i in 0..32 {
        n.b.qp
            .post_recv(&[RecvWr {
                wr_id: i,
                sg_list: &r,
            }])
            .unwrap();
    }
    // real packets to mutate
    let s = [n.a.mr.sge(0, 3000)];
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &s);
    w.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr(),
        rkey: n.b.mr.rkey(),
    };
    n.a.qp
        .post_send(&[w, SendWr::new(2, WrOpcode::Send, &s)])
        .unwrap();
    let mut seeds = vec![];
    let mut buf = vec![0u8; 9000];
    while let Some(t) = n.a.ctx.soft().unwrap().poll_transmit(n.now(), &mut buf) {
        seeds.push(buf[..t.len].to_vec());
    }
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let qpn_b = n.b.qp.qp_num().to_be_bytes();
    for k in 0..20_000 {
        let mut d = if k % 2 == 0 && !seeds.is_empty() {
            seeds[(rnd() as usize) % seeds.len()].clone()
        } else {
            (0..(rnd() % 200) as usize).map(|_| rnd() as u8).collect()
        };
        for _ in 0..(rnd() % 4) {
            if !d.is_empty() {
                let i = (rnd() as usize) % d.len();
                d[i] = rnd() as u8;
            }
        }
        if d.len() > 12 && k % 3 == 0 {
            d[5..8].copy_from_slice(&qpn_b[1..]); // aim at the live QP
            d[1] &= 0xf0; // version 0
        }
        let now = n.now();
        for (ctx, src) in [(&n.b.ctx, IP_A), (&n.a.ctx, IP_B)] {
            ctx.soft().unwrap().handle_datagram(now, src, None, &d);
            while ctx.soft().unwrap().poll_transmit(now, &mut buf).is_some() {}
        }
    }
    let c = n.b.ctx.soft().unwrap().counters();
    assert!(
        c.drop_bad_opcode + c.drop_truncated + c.drop_bad_length + c.drop_no_qp > 1000,
        "{c:?}"
    );
}

/// max_rd_atomic bounds READs in flight; FENCE holds a WR until earlier
/// READ/atomics complete; then everything completes in order.
#[test]
fn max_rd_atomic_and_fence() {
    let p = RcParams {
        rd_atomic: 1,
        ..Default::default()
    };
    let mut n = Net::rc(LinkConfig::default(), 1, 1 << 16, &p);
    let drain = |ctx: &Context, now| {
        let mut buf = vec![0u8; 9000];
        let mut ops = vec![];
        while let Some(t) = ctx.soft().unwrap().poll_transmit(now, &mut buf) {
            ops.push(
                wire::roce::RocePacketRepr::parse(&buf[..t.len])
                    .unwrap()
                    .0
                    .opcode(),
            );
        }
        ops
    };
    let s = [n.a.mr.sge(0, 100)];
    let mut rd = SendWr::new(1, WrOpcode::RdmaRead, &s);
    rd.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr(),
        rkey: n.b.mr.rkey(),
    };
    let mut rd2 = rd;
    rd2.wr_id = 2;
    n.a.qp.post_send(&[rd, rd2]).unwrap();
    let ops = drain(&n.a.ctx, n.now());
    assert_eq!(
        ops,
        [wire::roce::Opcode::RC_RDMA_READ_REQUEST],
        "one READ in flight with max_rd_atomic = 1"
    );
    // the packet was consumed by `drain`: the retransmit timer brings it back
    let (ca, _) = drive_wcs(&mut n, 2, 0);
    assert_eq!(
        ca.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );

    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 1 << 16, &p);
    let r = [n.b.mr.sge(0, 100)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let s = [n.a.mr.sge(0, 100)];
    let mut rd = SendWr::new(1, WrOpcode::RdmaRead, &s);
    rd.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr(),
        rkey: n.b.mr.rkey(),
    };
    let mut fenced = SendWr::new(2, WrOpcode::Send, &s);
    fenced.send_flags |= SendFlags::FENCE;
    n.a.qp.post_send(&[rd, fenced]).unwrap();
    let ops = drain(&n.a.ctx, n.now());
    assert_eq!(
        ops,
        [wire::roce::Opcode::RC_RDMA_READ_REQUEST],
        "the fenced SEND waits for the READ"
    );
    let (ca, cb) = drive_wcs(&mut n, 2, 1);
    assert_eq!(ca.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(cb[0].wr_id, 9);
}

/// SEND with Invalidate (IBV_WR_SEND_WITH_INV): the receive completes with
/// WITH_INV and the invalidated R_Key (rdma-core's union with imm_data), the named
/// region loses remote access (a later RDMA WRITE to it is a remote access error),
/// over one packet (SEND_ONLY_WITH_INVALIDATE) and several (…_LAST_WITH_INVALIDATE).
/// An R_Key naming no region fails the receive and the QP, as rxe does.
#[test]
fn send_with_invalidate() {
    // MTU 1024: 64 bytes go in one packet, 3000 in three
    for len in [64usize, 3000] {
        let mut n = Net::rc(LinkConfig::default(), 3, 8192, &RcParams::default());
        let r = [n.b.mr.sge(0, 4096)];
        n.b.qp
            .post_recv(&[RecvWr {
                wr_id: 9,
                sg_list: &r,
            }])
            .unwrap();
        let s = [n.a.mr.sge(0, len as u32)];
        let mut w = SendWr::new(1, WrOpcode::SendWithInv, &s);
        w.imm_data = n.b.mr.rkey();
        n.a.qp.post_send(&[w]).unwrap();
        let (ca, cb) = drive_wcs(&mut n, 1, 1);
        assert_eq!(
            (ca[0].status, ca[0].opcode),
            (WcStatus::Success, WcOpcode::Send)
        );
        assert_eq!(
            (cb[0].status, cb[0].byte_len),
            (WcStatus::Success, len as u32)
        );
        assert!(cb[0].wc_flags.contains(WcFlags::WITH_INV), "{:?}", cb[0]);
        assert!(!cb[0].wc_flags.contains(WcFlags::WITH_IMM));
        assert_eq!(cb[0].imm_data, n.b.mr.rkey(), "invalidated_rkey");
        // the region is invalid for remote access now
        let mut w = SendWr::new(2, WrOpcode::RdmaWrite, &s);
        w.wr = WrDetail::Rdma {
            remote_addr: n.b.mr.addr(),
            rkey: n.b.mr.rkey(),
        };
        n.a.qp.post_send(&[w]).unwrap();
        let (ca, _) = drive_wcs(&mut n, 1, 0);
        assert_eq!((ca[0].wr_id, ca[0].status), (2, WcStatus::RemAccessErr));
    }
    // an R_Key nobody registered
    let mut n = Net::rc(LinkConfig::default(), 4, 8192, &RcParams::default());
    let r = [n.b.mr.sge(0, 4096)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &r,
        }])
        .unwrap();
    let s = [n.a.mr.sge(0, 64)];
    let mut w = SendWr::new(1, WrOpcode::SendWithInv, &s);
    w.imm_data = n.b.mr.rkey() ^ 0x5a5a;
    n.a.qp.post_send(&[w]).unwrap();
    let (ca, cb) = drive_wcs(&mut n, 1, 1);
    assert_eq!(ca[0].status, WcStatus::RemInvReqErr);
    assert_eq!(cb[0].status, WcStatus::LocProtErr);
    assert_eq!(n.b.qp.query().unwrap().qp_state, QpState::Err);
}
