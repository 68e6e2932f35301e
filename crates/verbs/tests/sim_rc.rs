//! Deterministic simulation of the RC engine over seeded lossy links.

mod common;
use common::*;
use sim::LinkConfig;
use verbs::*;

fn send_wr<'a>(wr_id: u64, op: WrOpcode, sgl: &'a [Sge]) -> SendWr<'a> {
    SendWr::new(wr_id, op, sgl)
}

#[test]
fn all_opcodes_lossless() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 1 << 20, &p);
    let (a, b) = (&n.a, &n.b);
    let data = pattern(7, 10_000);
    a.mr.write(0, &data);
    // B posts two receives with 3 SGEs each
    let r1 = [
        b.mr.sge(0, 3000),
        b.mr.sge(5000, 3000),
        b.mr.sge(9000, 6000),
    ];
    let r2 = [b.mr.sge(20000, 100)];
    b.qp.post_recv(&[
        RecvWr {
            wr_id: 11,
            sg_list: &r1,
        },
        RecvWr {
            wr_id: 12,
            sg_list: &r2,
        },
        RecvWr {
            wr_id: 13,
            sg_list: &r2,
        },
    ])
    .unwrap();
    // SEND 10000 bytes from 2 SGEs (10 packets at MTU 1024)
    let s1 = [a.mr.sge(0, 4000), a.mr.sge(4000, 6000)];
    let mut w1 = send_wr(1, WrOpcode::Send, &s1);
    w1.send_flags |= SendFlags::SOLICITED;
    let s2 = [a.mr.sge(0, 50)];
    let mut w2 = send_wr(2, WrOpcode::SendWithImm, &s2);
    w2.imm_data = 0xdead_beef;
    // WRITE 5000 bytes to B at 100_000
    let s3 = [a.mr.sge(0, 5000)];
    let mut w3 = send_wr(3, WrOpcode::RdmaWrite, &s3);
    w3.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 100_000,
        rkey: b.mr.rkey(),
    };
    // WRITE_WITH_IMM 2000 bytes at 200_000, consumes recv 13
    let s4 = [a.mr.sge(1000, 2000)];
    let mut w4 = send_wr(4, WrOpcode::RdmaWriteWithImm, &s4);
    w4.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 200_000,
        rkey: b.mr.rkey(),
    };
    w4.imm_data = 0x1234;
    // READ B's 300_000.. (filled below) into A at 400_000, 3500 bytes
    let rd = pattern(9, 3500);
    b.mr.write(300_000, &rd);
    let s5 = [a.mr.sge(400_000, 1000), a.mr.sge(500_000, 2500)];
    let mut w5 = send_wr(5, WrOpcode::RdmaRead, &s5);
    w5.wr = WrDetail::Rdma {
        remote_addr: b.mr.addr() + 300_000,
        rkey: b.mr.rkey(),
    };
    // atomics on B's word at 600_000
    assert!(b.mr.write(600_000, &40u64.to_ne_bytes()));
    let s6 = [a.mr.sge(700_000, 8)];
    let mut w6 = send_wr(6, WrOpcode::AtomicFetchAndAdd, &s6);
    w6.wr = WrDetail::Atomic {
        remote_addr: b.mr.addr() + 600_000,
        compare_add: 2,
        swap: 0,
        rkey: b.mr.rkey(),
    };
    let s7 = [a.mr.sge(700_008, 8)];
    let mut w7 = send_wr(7, WrOpcode::AtomicCmpAndSwp, &s7);
    w7.wr = WrDetail::Atomic {
        remote_addr: b.mr.addr() + 600_000,
        compare_add: 42,
        swap: 99,
        rkey: b.mr.rkey(),
    };
    // inline SEND (no lkey needed for the data at post time; copied at once)
    let s8 = [a.mr.sge(0, 40)];
    let mut w8 = send_wr(8, WrOpcode::Send, &s8);
    w8.send_flags |= SendFlags::INLINE;
    b.qp.post_recv(&[RecvWr {
        wr_id: 14,
        sg_list: &r2,
    }])
    .unwrap();
    a.qp.post_send(&[w1, w2, w3, w4, w5, w6, w7, w8]).unwrap();
    let (mut ca, mut cb) = (vec![], vec![]);
    let ok = n.drive_until(100_000, |n| {
        poll_all(&n.a.cq, &mut ca);
        poll_all(&n.b.cq, &mut cb);
        ca.len() == 8 && cb.len() == 4
    });
    assert!(ok, "a={ca:?} b={cb:?}");
    let (a, b) = (&n.a, &n.b);
    assert!(ca.iter().all(|w| w.status == WcStatus::Success), "{ca:?}");
    assert_eq!(
        ca.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    assert_eq!(ca[4].opcode, WcOpcode::RdmaRead);
    assert_eq!(ca[4].byte_len, 3500);
    assert!(cb.iter().all(|w| w.status == WcStatus::Success), "{cb:?}");
    assert_eq!(cb[0].wr_id, 11);
    assert_eq!(cb[0].byte_len, 10_000);
    assert!(cb[0].wc_flags.contains(WcFlags::SOLICITED));
    assert_eq!(cb[1].wr_id, 12);
    assert_eq!((cb[1].byte_len, cb[1].imm_data), (50, 0xdead_beef));
    assert!(cb[1].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(cb[2].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((cb[2].byte_len, cb[2].imm_data), (2000, 0x1234));
    assert_eq!(cb[3].byte_len, 40);
    assert_eq!(cb[0].src_qp, a.qp.qp_num());
    // data
    let bm = b.mr.to_vec();
    let got: Vec<u8> = [&bm[0..3000], &bm[5000..8000], &bm[9000..13000]].concat();
    assert_eq!(got, data);
    assert_eq!(&bm[100_000..105_000], &data[..5000]);
    assert_eq!(&bm[200_000..202_000], &data[1000..3000]);
    let am = a.mr.to_vec();
    assert_eq!([&am[400_000..401_000], &am[500_000..502_500]].concat(), rd);
    assert_eq!(a.mr.load_u64(700_000), Some(40));
    assert_eq!(a.mr.load_u64(700_008), Some(42));
    assert_eq!(b.mr.load_u64(600_000), Some(99));
    let c = n.b.ctx.soft().unwrap().counters();
    assert_eq!(c.drop_bad_icrc, 0);
}

/// Random mix of SEND/WRITE/READ/atomics of random sizes and SGL shapes over a
/// lossy, duplicating, reordering link: every message exactly once, intact, in
/// order; retries bounded (no RETRY_EXC).
/// Layout: A: source pattern [0,1M), atomic results 1M+8i, read targets 4M+20000i.
/// B: receive buffers 20000i, write targets 4M+20000i, read source 8M.., atomic word 8.9M.
fn lossy_run(loss: f64, seed: u64, msgs: usize, mtu: Mtu) {
    assert!(msgs <= 200);
    let p = RcParams {
        mtu,
        ..Default::default()
    };
    let cfg = LinkConfig::lossy(loss);
    let mut n = Net::rc(cfg, seed, 9 << 20, &p);
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rnd = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let src = pattern(seed, 1 << 20);
    n.a.mr.write(0, &src);
    let bpat = pattern(seed ^ 5, 1 << 20);
    n.b.mr.write(8 << 20, &bpat);
    n.b.mr.write((8 << 20) + 900_000, &[0u8; 8]);
    const MB: u64 = 1 << 20;
    let mut ops = vec![]; // (op, len, src off)
    let mut sgls: Vec<Vec<Sge>> = vec![];
    for i in 0..msgs {
        let op = match rnd(10) {
            0..=3 => WrOpcode::Send,
            4 => WrOpcode::SendWithImm,
            5..=6 => WrOpcode::RdmaWrite,
            7 => WrOpcode::RdmaRead,
            8 => WrOpcode::AtomicFetchAndAdd,
            _ => WrOpcode::RdmaWriteWithImm,
        };
        let len = match rnd(4) {
            0 => rnd(64),
            1 => rnd(5000),
            _ => rnd(20_000),
        } as u32;
        let so = rnd(500_000) as usize;
        let nsge = 1 + rnd(4) as usize;
        let base = if op == WrOpcode::RdmaRead {
            (4 * MB) as usize + i * 20_000
        } else {
            so
        };
        let mut sgl = vec![];
        let mut done = 0;
        for k in 0..nsge {
            let l = if k + 1 == nsge {
                len - done
            } else {
                (len - done) / 2
            };
            sgl.push(n.a.mr.sge(base + done as usize, l));
            done += l;
        }
        if op == WrOpcode::AtomicFetchAndAdd {
            sgl = vec![n.a.mr.sge((MB as usize) + i * 8, 8)];
        }
        ops.push((op, if op.is_atomic() { 8 } else { len }, so));
        sgls.push(sgl);
    }
    let consumers: Vec<usize> = (0..msgs)
        .filter(|&i| {
            matches!(
                ops[i].0,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
            )
        })
        .collect();
    for &i in &consumers {
        let sg = [
            n.b.mr.sge(i * 20_000, 10_000),
            n.b.mr.sge(i * 20_000 + 10_000, 10_000),
        ];
        n.b.qp
            .post_recv(&[RecvWr {
                wr_id: i as u64,
                sg_list: &sg,
            }])
            .unwrap();
    }
    let mut next_post = 0;
    let (mut ca, mut cb) = (vec![], vec![]);
    let ok = n.drive_until(3_000_000, |n| {
        poll_all(&n.a.cq, &mut ca);
        poll_all(&n.b.cq, &mut cb);
        while next_post < msgs && next_post - ca.len() < 32 {
            let i = next_post;
            let (op, _, _) = ops[i];
            let mut w = SendWr::new(i as u64, op, &sgls[i]);
            w.imm_data = 0x1000_0000 + i as u32;
            let b = n.b.mr.addr();
            w.wr = match op {
                WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WrDetail::Rdma {
                    remote_addr: b + 4 * MB + i as u64 * 20_000,
                    rkey: n.b.mr.rkey(),
                },
                WrOpcode::RdmaRead => WrDetail::Rdma {
                    remote_addr: b + 8 * MB + (i as u64 % 40) * 20_000,
                    rkey: n.b.mr.rkey(),
                },
                WrOpcode::AtomicFetchAndAdd => WrDetail::Atomic {
                    remote_addr: b + 8 * MB + 900_000,
                    compare_add: 1,
                    swap: 0,
                    rkey: n.b.mr.rkey(),
                },
                _ => WrDetail::None,
            };
            n.a.qp.post_send(&[w]).unwrap();
            next_post += 1;
        }
        ca.len() == msgs && cb.len() == consumers.len()
    });
    if !ok {
        let msg = format!(
        "loss={loss} seed={seed}: {} of {msgs} send completions, {} of {} recv; last a={:?} next ops {:?} qa {:?} qb {:?}",
        ca.len(),
        cb.len(),
        consumers.len(),
        (ca.iter().find(|w| w.status != WcStatus::Success), cb.iter().find(|w| w.status != WcStatus::Success)),
        &ops[ca.len()..(ca.len() + 3).min(msgs)],
        n.a.qp.context().soft().unwrap().qp_counters(n.a.qp.qp_num()),
        n.b.qp.context().soft().unwrap().qp_counters(n.b.qp.qp_num())
    ) + &format!("\nA {}\nB {}", n.a.ctx.soft().unwrap().with_engine(|e| e.qp(n.a.qp.qp_num()).unwrap().debug_state()), n.b.ctx.soft().unwrap().with_engine(|e| e.qp(n.b.qp.qp_num()).unwrap().debug_state()));
        panic!("{msg}");
    }
    for (k, wc) in ca.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status),
            (k as u64, WcStatus::Success),
            "send completion {k}"
        );
        assert_eq!(wc.opcode, WcOpcode::from(ops[k].0));
    }
    let am = n.a.mr.to_vec();
    let bm = n.b.mr.to_vec();
    for (k, wc) in cb.iter().enumerate() {
        let i = consumers[k];
        assert_eq!(
            (wc.wr_id, wc.status),
            (i as u64, WcStatus::Success),
            "recv completion {k}"
        );
        let (op, len, so) = ops[i];
        assert_eq!(wc.byte_len, len, "msg {i}");
        if op != WrOpcode::Send {
            assert_eq!(wc.imm_data, 0x1000_0000 + i as u32);
        }
        if op != WrOpcode::RdmaWriteWithImm {
            assert_eq!(
                &bm[i * 20_000..i * 20_000 + len as usize],
                &src[so..so + len as usize],
                "send {i} payload"
            );
        }
    }
    for (i, &(op, len, so)) in ops.iter().enumerate() {
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                let d = (4 * MB) as usize + i * 20_000;
                assert_eq!(
                    &bm[d..d + len as usize],
                    &src[so..so + len as usize],
                    "write {i}"
                );
            }
            WrOpcode::RdmaRead => {
                let d = (4 * MB) as usize + i * 20_000;
                let s = (i % 40) * 20_000;
                assert_eq!(
                    &am[d..d + len as usize],
                    &bpat[s..s + len as usize],
                    "read {i}"
                );
            }
            _ => {}
        }
    }
    // fetch-add executed exactly once per WR despite duplicates, and each got a distinct old value
    let fas: Vec<usize> = (0..msgs)
        .filter(|&i| ops[i].0 == WrOpcode::AtomicFetchAndAdd)
        .collect();
    assert_eq!(
        n.b.mr.load_u64((8 * MB) as usize + 900_000),
        Some(fas.len() as u64),
        "atomics exactly once"
    );
    let mut olds: Vec<u64> = fas
        .iter()
        .map(|&i| n.a.mr.load_u64(MB as usize + i * 8).unwrap())
        .collect();
    olds.sort();
    assert_eq!(olds, (0..fas.len() as u64).collect::<Vec<_>>());
    let qa =
        n.a.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.a.qp.qp_num())
            .unwrap();
    let qb =
        n.b.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.b.qp.qp_num())
            .unwrap();
    eprintln!(
        "loss={loss} seed={seed}: a->b {:?}\n  req {:?}\n  resp {:?}",
        n.ab.stats, qa, qb
    );
    assert_eq!(
        n.a.ctx.soft().unwrap().counters().drop_bad_icrc
            + n.b.ctx.soft().unwrap().counters().drop_bad_icrc,
        0
    );
}

#[test]
fn lossy_0pct() {
    lossy_run(0.0, 1, 200, Mtu::Mtu1024);
}
#[test]
fn lossy_1pct() {
    lossy_run(0.01, 2, 150, Mtu::Mtu4096);
}
#[test]
fn lossy_5pct() {
    lossy_run(0.05, 3, 120, Mtu::Mtu256);
}
#[test]
fn lossy_10pct() {
    lossy_run(0.10, 4, 100, Mtu::Mtu1024);
}
#[test]
#[ignore = "sweep: many seeds, ~1 min"]
fn lossy_sweep() {
    for seed in 10..40 {
        for loss in [0.0, 0.02, 0.05, 0.1] {
            lossy_run(
                loss,
                seed,
                80,
                [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][seed as usize % 3],
            );
        }
    }
}

#[test]
fn dbg_read_then_send() {
    let p = RcParams::default();
    let mut n = Net::rc(LinkConfig::default(), 1, 1 << 20, &p);
    let rd = pattern(9, 14778);
    n.b.mr.write(300_000, &rd);
    let s5 = [n.a.mr.sge(400_000, 14778)];
    let mut w5 = SendWr::new(5, WrOpcode::RdmaRead, &s5);
    w5.wr = WrDetail::Rdma {
        remote_addr: n.b.mr.addr() + 300_000,
        rkey: n.b.mr.rkey(),
    };
    let s6 = [n.a.mr.sge(0, 100)];
    let w6 = SendWr::new(6, WrOpcode::Send, &s6);
    let r = [n.b.mr.sge(0, 1000)];
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &r,
        }])
        .unwrap();
    n.a.qp.post_send(&[w6, w5, w6]).unwrap();
    n.b.qp
        .post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &r,
        }])
        .unwrap();
    let mut ca = vec![];
    let ok = n.drive_until(10_000, |n| {
        poll_all(&n.a.cq, &mut ca);
        ca.len() == 3
    });
    assert!(
        ok,
        "{ca:?} {:?} {:?}",
        n.a.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.a.qp.qp_num()),
        n.b.qp
            .context()
            .soft()
            .unwrap()
            .qp_counters(n.b.qp.qp_num())
    );
}
