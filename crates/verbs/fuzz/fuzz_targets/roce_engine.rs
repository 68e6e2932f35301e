//! The whole receive path of a soft device (classification, responder,
//! completer) with a connected RC QP and a UD QP: arbitrary datagrams never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use std::time::Instant;
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

fuzz_target!(|data: &[u8]| {
    let mut o = DeviceOptions::new(Ipv4Addr::new(10, 0, 0, 1));
    o.mode = IoMode::External;
    let ctx = o.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::all()).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
    let mut a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: AccessFlags::all(), ..Default::default() };
    qp.modify(&a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS).unwrap();
    a.qp_state = QpState::Rtr;
    a.dest_qp_num = 0x11;
    a.max_dest_rd_atomic = 4;
    a.ah_attr.dgid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2));
    qp.modify(&a, QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER).unwrap();
    let r = [mr.sge(0, 1024)];
    let _ = qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &r }]);
    let now = Instant::now();
    // first 4 bytes pick the dest QP number to reach the QP or not
    let mut d = data.to_vec();
    if d.len() >= 8 && d[0] & 1 == 1 {
        let q = qp.qp_num().to_be_bytes();
        d[5..8].copy_from_slice(&q[1..]);
    }
    ctx.soft().unwrap().handle_datagram(now, [10, 0, 0, 2], None, &d);
    let mut buf = vec![0u8; 9000];
    while ctx.soft().unwrap().poll_transmit(now, &mut buf).is_some() {}
    let mut wc = [Wc::default(); 8];
    let _ = cq.poll(&mut wc);
});
