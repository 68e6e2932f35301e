//! "No allocation per packet in steady state": a counting global allocator
//! (this test binary only) sees zero allocations, on any thread (the poller
//! threads included), while 64 KiB RDMA WRITEs and SENDs stream between two
//! devices over UDP loopback after a warm-up, on RC and then on UC.

mod common;
use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use verbs::soft::DeviceOptions;
use verbs::*;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn steady_state_does_not_allocate() {
    let mk = |ip: [u8; 4]| {
        let ctx = DeviceOptions::new(Ipv4Addr::from(ip)).open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, None).unwrap();
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap.max_send_wr = 256;
        init.cap.max_recv_wr = 256;
        let qp = pd.create_qp(&init).unwrap();
        let mr = pd.reg_mr(1 << 20, full_access()).unwrap();
        (ctx, pd, cq, qp, mr)
    };
    let (_ca, _pa, cqa, qpa, mra) = mk([127, 0, 9, 1]);
    let (_cb, _pb, cqb, qpb, mrb) = mk([127, 0, 9, 2]);
    let p = RcParams {
        mtu: Mtu::Mtu4096,
        timeout: 14,
        ..Default::default()
    };
    connect_rc(&qpa, p.psn_a, [127, 0, 9, 2], qpb.qp_num(), p.psn_b, &p);
    connect_rc(&qpb, p.psn_b, [127, 0, 9, 1], qpa.qp_num(), p.psn_a, &p);
    let sge = [mra.sge(0, 65536)];
    let rsge = [mrb.sge(0, 65536)];
    let mut wc = [Wc::default(); 64];
    let mut run = |iters: usize| -> usize {
        let mut done = 0;
        let mut posted = 0;
        let t0 = Instant::now();
        while done < iters && t0.elapsed() < Duration::from_secs(20) {
            while posted < iters && posted - done < 32 {
                let mut w = if posted % 2 == 0 {
                    let mut w = SendWr::new(posted as u64, WrOpcode::RdmaWrite, &sge);
                    w.wr = WrDetail::Rdma {
                        remote_addr: mrb.addr() + 65536,
                        rkey: mrb.rkey(),
                    };
                    w
                } else {
                    qpb.post_recv(&[RecvWr {
                        wr_id: posted as u64,
                        sg_list: &rsge,
                    }])
                    .unwrap();
                    SendWr::new(posted as u64, WrOpcode::Send, &sge)
                };
                w.send_flags = SendFlags::SIGNALED;
                qpa.post_send(&[w]).unwrap();
                posted += 1;
            }
            let k = cqa.poll(&mut wc).unwrap();
            assert!(wc[..k].iter().all(|w| w.status == WcStatus::Success));
            done += k;
            while cqb.poll(&mut wc).unwrap() > 0 {}
        }
        done
    };
    assert_eq!(run(2000), 2000); // warm-up: queues and batches reach their size
    let before = ALLOCS.load(Ordering::SeqCst);
    let n = 4000;
    assert_eq!(run(n), n);
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    eprintln!(
        "{allocs} allocations for {n} x 64 KiB WRITE/SEND ({} data packets + ACKs)",
        n * 16
    );
    assert_eq!(allocs, 0, "allocations in steady state");

    // the same for UC (in the same test: the counter is process-wide). The
    // sender completes as soon as a message is out, so it may outrun the
    // receiver; a message dropped there is fine (UC), and the responder's
    // drop path allocates nothing either.
    let mk_uc = |ip: [u8; 4]| {
        let ctx = DeviceOptions::new(Ipv4Addr::from(ip)).open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, None).unwrap();
        let mut init = QpInitAttr::new(QpType::Uc, &cq, &cq);
        init.cap.max_send_wr = 256;
        init.cap.max_recv_wr = 256;
        let qp = pd.create_qp(&init).unwrap();
        let mr = pd.reg_mr(1 << 20, full_access()).unwrap();
        (ctx, pd, cq, qp, mr)
    };
    let (_ua, _upa, ucqa, uqpa, umra) = mk_uc([127, 0, 9, 3]);
    let (ub, _upb, ucqb, uqpb, umrb) = mk_uc([127, 0, 9, 4]);
    connect_uc(&uqpa, 5, [127, 0, 9, 4], uqpb.qp_num(), 9, Mtu::Mtu4096);
    connect_uc(&uqpb, 9, [127, 0, 9, 3], uqpa.qp_num(), 5, Mtu::Mtu4096);
    let sge = [umra.sge(0, 65536)];
    let rsge = [umrb.sge(0, 65536)];
    let mut recvs_posted = 0usize;
    let mut received = 0usize;
    let mut run_uc = |iters: usize| -> usize {
        let mut done = 0;
        let mut posted = 0;
        let t0 = Instant::now();
        while done < iters && t0.elapsed() < Duration::from_secs(20) {
            while posted < iters && posted - done < 32 {
                let mut w = if posted % 2 == 0 {
                    let mut w = SendWr::new(posted as u64, WrOpcode::RdmaWrite, &sge);
                    w.wr = WrDetail::Rdma {
                        remote_addr: umrb.addr() + 65536,
                        rkey: umrb.rkey(),
                    };
                    w
                } else {
                    if recvs_posted - received < 128 {
                        uqpb.post_recv(&[RecvWr {
                            wr_id: posted as u64,
                            sg_list: &rsge,
                        }])
                        .unwrap();
                        recvs_posted += 1;
                    }
                    SendWr::new(posted as u64, WrOpcode::Send, &sge)
                };
                w.send_flags = SendFlags::SIGNALED;
                uqpa.post_send(&[w]).unwrap();
                posted += 1;
            }
            let k = ucqa.poll(&mut wc).unwrap();
            assert!(wc[..k].iter().all(|w| w.status == WcStatus::Success));
            done += k;
            loop {
                let k = ucqb.poll(&mut wc).unwrap();
                if k == 0 {
                    break;
                }
                assert!(wc[..k].iter().all(|w| w.status == WcStatus::Success));
                received += k;
            }
        }
        done
    };
    assert_eq!(run_uc(2000), 2000);
    let before = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(run_uc(n), n);
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    let c = ub.soft().unwrap().counters();
    let q = ub.soft().unwrap().qp_counters(uqpb.qp_num()).unwrap();
    eprintln!(
        "UC: {allocs} allocations for {n} x 64 KiB WRITE/SEND, {received} SENDs received, {} packets dropped by the responder, {} received",
        q.uc_drops, c.rx_packets
    );
    assert!(received > 0);
    assert_eq!(allocs, 0, "allocations in steady state (UC)");
}
