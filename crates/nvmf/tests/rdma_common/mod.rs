//! Shared by the NVMe/RDMA tests: I/O at queue depth across several queues,
//! written, read back and compared.

#![allow(dead_code, clippy::needless_range_loop)]

use nvmf::host::Controller;

/// A data pattern that differs per (size, queue, index).
pub fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(7)) % 251) as u8)
        .collect()
}

/// Every size from 512 B to 1 MiB this sweep uses: each power of two and sizes
/// off them (one block past the in-capsule limit, odd block counts, one block short
/// of 128 KiB and of 1 MiB).
pub const SIZES: &[usize] = &[
    512, 1024, 1536, 2048, 3584, 4096, 4608, 8192, 12800, 16384, 32768, 36352, 65536, 130560,
    131072, 262144, 524288, 1048064, 1048576,
];

/// For each size: `qd` writes in flight on every I/O queue of `c` at once (fewer
/// when `qd` x queues x size would pass `max_bytes`: the namespace holds every
/// I/O's blocks apart), then as many reads of the same blocks, each compared.
/// Returns the number of I/Os done.
pub fn qd_sweep(c: &mut Controller, sizes: &[usize], qd: usize, max_bytes: usize) -> usize {
    let queues = c.io.len();
    let mut total = 0;
    for (si, &size) in sizes.iter().enumerate() {
        let nlb = (size / 512) as u32;
        let per_q = qd.min((max_bytes / size / queues).max(1));
        let slba = |q: usize, i: usize| ((q * per_q + i) as u64) * nlb as u64;
        let seed = |q: usize, i: usize| (si * 100_000 + q * 1000 + i) as u32;
        // writes: per_q in flight on each queue
        for q in 0..queues {
            for i in 0..per_q {
                let sqe = nvmf::host::write_sqe(1, slba(q, i), nlb);
                c.io[q]
                    .submit(sqe, &pattern(size, seed(q, i)), 0)
                    .unwrap_or_else(|e| panic!("size {size} q {q}: write submit: {e}"));
            }
        }
        for q in 0..queues {
            assert_eq!(c.io[q].outstanding(), per_q, "qd on queue {q}");
        }
        drain(c, queues * per_q, size, |_, q, done| {
            assert!(
                done.cqe.status().is_success(),
                "size {size} q {q} write: {:?}",
                done.cqe.status()
            );
        });
        // reads of the same blocks, from another queue than wrote them
        let mut cids = vec![Vec::new(); queues];
        for q in 0..queues {
            let from = (q + 1) % queues;
            for i in 0..per_q {
                let sqe = nvmf::host::read_sqe(1, slba(from, i), nlb);
                let cid = c.io[q]
                    .submit(sqe, &[], size as u32)
                    .unwrap_or_else(|e| panic!("size {size} q {q}: read submit: {e}"));
                cids[q].push((cid, from, i));
            }
        }
        drain(c, queues * per_q, size, |c, q, done| {
            let &(_, from, i) = cids[q]
                .iter()
                .find(|(cid, _, _)| *cid == done.cqe.cid())
                .expect("a read in flight");
            assert!(
                done.cqe.status().is_success(),
                "size {size} q {q} read: {:?}",
                done.cqe.status()
            );
            assert!(
                done.data == pattern(size, seed(from, i)),
                "size {size}: read {i} of queue {from}'s blocks (on queue {q}) differs"
            );
            c.io[q].recycle(done.data);
        });
        total += 2 * queues * per_q;
    }
    total
}

/// Progresses every I/O queue of `c` until `want` completions came, handing each
/// to `check` with its queue; fails after 30 s without them all.
fn drain(
    c: &mut Controller,
    want: usize,
    size: usize,
    mut check: impl FnMut(&mut Controller, usize, nvmf::host::Completion),
) {
    let mut got = 0;
    let t0 = std::time::Instant::now();
    while got < want {
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            let out: Vec<usize> = c.io.iter().map(|q| q.outstanding()).collect();
            panic!(
                "size {size}: {got} of {want} I/Os done after 30 s (outstanding per queue {out:?})"
            );
        }
        for q in 0..c.io.len() {
            c.io[q]
                .progress(false)
                .unwrap_or_else(|e| panic!("size {size} q {q}: {e}"));
            while let Some(done) = c.io[q].pop_completion() {
                check(c, q, done);
                got += 1;
            }
        }
    }
}
