//! Handle ownership as rdma-core's resource hierarchy: children hold their
//! parents, destroying a resource that is still held is EBUSY, and the provider
//! object goes when its last handle does.

use std::net::Ipv4Addr;

use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

fn open() -> Context {
    let mut o = DeviceOptions::new(Ipv4Addr::new(10, 9, 9, 1));
    o.mode = IoMode::External;
    o.open().unwrap()
}

fn qp_exists(ctx: &Context, qpn: u32) -> bool {
    ctx.soft().unwrap().with_engine(|e| e.qp(qpn).is_some())
}

#[test]
fn parents_are_busy_while_children_hold_them() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qpn = qp.qp_num();
    assert!(matches!(pd.clone().dealloc(), Err(Error::Busy)));
    assert!(matches!(cq.clone().destroy(), Err(Error::Busy)));
    // the failed calls released only the clones: everything still works
    assert!(qp_exists(&ctx, qpn));
    assert_eq!(cq.poll(&mut [Wc::default(); 4]).unwrap(), 0);
    // a QP keeps its PD and CQs alive after the caller dropped them
    drop(cq);
    drop(mr);
    assert!(matches!(pd.clone().dealloc(), Err(Error::Busy)));
    drop(pd);
    assert!(qp_exists(&ctx, qpn));
    assert_eq!(qp.pd().context().ip(), ctx.ip());
    qp.destroy().unwrap();
    assert!(!qp_exists(&ctx, qpn));
}

#[test]
fn a_cloned_handle_keeps_the_resource() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    let qpn = qp.qp_num();
    let other = qp.clone();
    assert!(matches!(qp.destroy(), Err(Error::Busy)));
    // still usable through the clone: no handle ever names a destroyed QP
    assert!(qp_exists(&ctx, qpn));
    assert_eq!(other.query().unwrap().qp_state, QpState::Reset);
    drop(other);
    assert!(!qp_exists(&ctx, qpn));
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let m2 = mr.clone();
    assert!(matches!(mr.dereg(), Err(Error::Busy)));
    assert!(m2.write(0, b"still registered"));
    m2.dereg().unwrap();
    cq.destroy().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn the_gsi_qp_is_a_soft_capability_once_per_device() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let gsi = verbs::gsi::create_gsi_qp(&pd, &cq, &cq, QpCap::default()).unwrap();
    assert_eq!(gsi.qp_num(), 1);
    assert!(matches!(
        verbs::gsi::create_gsi_qp(&pd, &cq, &cq, QpCap::default()),
        Err(Error::Busy)
    ));
    drop(gsi);
    // QP1 is free again once its last handle is gone
    let gsi = verbs::gsi::create_gsi_qp(&pd, &cq, &cq, QpCap::default()).unwrap();
    assert_eq!(gsi.query().unwrap().qp_state, QpState::Rts);
    assert_eq!(ctx.provider(), Provider::Soft);
}
