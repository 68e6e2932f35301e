//! NVMe SQE data pointers: the PRP and SGL walkers over fuzzed memory, and
//! build -> walk round trips. Invariants:
//! - `dptr::walk` never panics; on success the entries cover exactly `len`
//!   bytes, PRP pieces stay inside the walked transfer, an SGL walk visits at
//!   most `max_descriptors` descriptors (no segment loop runs away);
//! - a PRP or SGL built from buffers walks back to the same (merged) buffers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::memory::{merge_adjacent, IoVec, SliceMemory, VecMemory};
use nvme::sgl::{self, BuildOptions};
use nvme::{dptr, prp, Psdt, SglSubtype, Sqe, SQE_LEN};

const MAX_DESC: usize = 64;

fn u32_at(b: &[u8], i: usize) -> u32 {
    let mut a = [0u8; 4];
    for (k, x) in a.iter_mut().enumerate() {
        *x = b.get(i + k).copied().unwrap_or(0);
    }
    u32::from_le_bytes(a)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < SQE_LEN + 6 {
        return;
    }
    let (head, mem) = data.split_at(SQE_LEN + 6);
    let sqe = Sqe::from_bytes(&head[..SQE_LEN]).expect("64 bytes");
    // a transfer of up to 16 MiB (the walkers' callers bound it by MDTS)
    let len = u64::from(u32_at(head, SQE_LEN) & 0x00ff_ffff);
    let page = 4096u64 << (head[SQE_LEN + 4] % 5);
    let mode = head[SQE_LEN + 5];

    // 1. the walker over arbitrary SQEs and memory
    let m = SliceMemory(mem);
    if let Ok(entries) = dptr::walk(&sqe, len, page, &m, MAX_DESC) {
        let total: u64 = entries.iter().map(|e| e.len()).sum();
        assert_eq!(
            total, len,
            "walk covers {total} bytes of {len}: {entries:?}"
        );
        if sqe.psdt() != Psdt::Prp {
            assert!(
                entries.len() <= MAX_DESC,
                "{} entries > {MAX_DESC} descriptors",
                entries.len()
            );
        }
        if let Ok(iov) = dptr::walk_iovecs(&sqe, len, page, &m, MAX_DESC) {
            assert!(iov.iter().map(|v| v.len).sum::<u64>() <= len);
        }
    }

    // 2. build -> walk round trip over buffers taken from the memory bytes
    let mut bufs = Vec::new();
    for c in mem.chunks_exact(8).take(24) {
        let addr = u64::from(u32_at(c, 0)) << (mode % 8);
        let l = u64::from(u32_at(c, 4) & 0x000f_ffff); // < 1 MiB each
        bufs.push(IoVec::new(addr, l));
    }
    let want = merge_adjacent(&bufs);
    if want.is_empty() {
        return;
    }
    let total: u64 = want.iter().map(|v| v.len).sum();
    if mode & 0x80 == 0 {
        let mut vm = VecMemory::default();
        if let Ok(p) = prp::build(&bufs, page, &mut vm) {
            let got = prp::walk(p.prp1, p.prp2, total, page, &vm).expect("walk of a built PRP");
            assert_eq!(merge_adjacent(&got), want, "PRP build -> walk");
        }
    } else {
        let opts = BuildOptions {
            descriptors_per_segment: 2 + usize::from(mode >> 3 & 7),
            segment_subtype: SglSubtype::Address,
        };
        let mut vm = VecMemory::default();
        if let Ok(s) = sgl::build_from_iovecs(&bufs, opts, &mut vm) {
            let e = sgl::walk(&s.sgl1, &vm, 1 << 16).expect("walk of a built SGL");
            let got = sgl::data_iovecs(&e).expect("data blocks only");
            assert_eq!(merge_adjacent(&got), want, "SGL build -> walk");
        }
    }
});
