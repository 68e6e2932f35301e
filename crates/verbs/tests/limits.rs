//! A soft device's bounds on objects held at once (`DeviceLimits`): past each
//! bound a creation fails with EINVAL (as rxe's pools), the refusal is counted,
//! `query_device` reports the bounds, and freeing one object admits the next.

use std::net::Ipv4Addr;

use verbs::soft::{DeviceLimits, DeviceOptions, IoMode};
use verbs::*;

fn open(limits: DeviceLimits) -> Context {
    let mut o = DeviceOptions::new(Ipv4Addr::new(10, 9, 8, 1));
    o.mode = IoMode::External;
    o.limits = limits;
    o.open().unwrap()
}

fn refused(ctx: &Context) -> u64 {
    ctx.soft().unwrap().counters().refused_resources
}

const LIM: DeviceLimits = DeviceLimits {
    max_qp: 3,
    max_cq: 2,
    max_mr: 4,
    max_pd: 2,
    max_srq: 1,
};

#[test]
fn query_device_reports_the_bounds() {
    let a = open(LIM).query_device();
    assert_eq!(
        (a.max_qp, a.max_cq, a.max_mr, a.max_pd, a.max_srq),
        (3, 2, 4, 2, 1)
    );
}

#[test]
fn each_bound_refuses_cleanly_and_frees_on_destroy() {
    let ctx = open(LIM);
    // PDs
    let pd = ctx.alloc_pd().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    assert!(matches!(ctx.alloc_pd(), Err(Error::Inval)));
    assert_eq!(refused(&ctx), 1);
    pd2.dealloc().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    // CQs
    let cq = ctx.create_cq(16, None).unwrap();
    let cq2 = ctx.create_cq(16, None).unwrap();
    assert!(matches!(ctx.create_cq(16, None), Err(Error::Inval)));
    assert_eq!(refused(&ctx), 2);
    cq2.destroy().unwrap();
    let _cq2 = ctx.create_cq(16, None).unwrap();
    // MRs
    let mut mrs: Vec<_> = (0..4)
        .map(|_| pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap())
        .collect();
    assert!(matches!(
        pd2.reg_mr(4096, AccessFlags::LOCAL_WRITE),
        Err(Error::Inval)
    ));
    assert_eq!(refused(&ctx), 3);
    mrs.pop();
    mrs.push(pd2.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap());
    // SRQs
    let a = SrqInitAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = pd.create_srq(&a).unwrap();
    assert!(matches!(pd.create_srq(&a), Err(Error::Inval)));
    assert_eq!(refused(&ctx), 4);
    // QPs
    let mut qps: Vec<_> = (0..3)
        .map(|_| {
            pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
                .unwrap()
        })
        .collect();
    assert!(matches!(
        pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq)),
        Err(Error::Inval)
    ));
    assert_eq!(refused(&ctx), 5);
    let n = ctx.soft().unwrap().with_engine(|e| e.qp_count());
    assert_eq!(n, 3, "a refused QP must not be left in the device");
    qps.pop();
    qps.push(
        pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
            .unwrap(),
    );
    drop(srq);
    assert!(pd.create_srq(&a).is_ok());
    assert_eq!(refused(&ctx), 5, "admissions after a free are not refusals");
}

#[test]
fn the_default_bounds_are_the_ones_always_reported() {
    let a = open(DeviceLimits::default()).query_device();
    assert_eq!((a.max_qp, a.max_cq, a.max_pd), (1 << 16, 1 << 16, 1 << 16));
}
