//! Update throughput of the versioned store, next to the raw bdev of the same run.
//!
//! `cargo test -p obj --test vos_bench -- --ignored --nocapture` (`VOS_BENCH_OPS=N`).
//! On one io_uring file bdev + redb index in a temp dir:
//! - baseline: raw 8 KiB bdev writes with a flush after each (what one durable
//!   write costs at least), and with one flush per 64 writes;
//! - vos, auto-commit (one durable commit per update) and group commit of 64,
//!   for 64 B values (inline in the index) and 8 KiB values (on the bdev).

use std::sync::Arc;
use std::time::Instant;

use bdev::{BdevIo, BlockDevice, IoBuf};
use obj::types::*;
use obj::vos::{Vos, VosConfig};

const CONT: Uuid = Uuid::from_u128(0xbe7c);

fn ops() -> u64 {
    std::env::var("VOS_BENCH_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

fn file_bdev(dir: &std::path::Path) -> Arc<dyn BlockDevice> {
    Arc::new(
        bdev::file::FileBdev::open(
            "bench",
            dir.join("bdev.img"),
            bdev::file::FileOptions {
                block_size: 4096,
                size: Some(256 << 20),
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

fn wait(ch: &mut Box<dyn bdev::IoChannel>, done: &mut Vec<BdevIo>) {
    done.clear();
    while ch.poll(done) == 0 {}
    assert!(done[0].is_success());
}

/// Raw bdev: 8 KiB writes, a flush every `per_flush` writes. Ops/s.
fn raw(n: u64, per_flush: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let dev = file_bdev(dir.path());
    let mut ch = dev.open_channel().unwrap();
    let mut done = Vec::new();
    let t = Instant::now();
    for i in 0..n {
        ch.submit(BdevIo::write(
            (i * 2) % 60_000,
            2,
            vec![IoBuf::zeroed(8192)],
            0,
        ))
        .unwrap();
        wait(&mut ch, &mut done);
        if (i + 1).is_multiple_of(per_flush) {
            ch.submit(BdevIo::flush(0)).unwrap();
            wait(&mut ch, &mut done);
        }
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// Vos updates of `size`-byte single values, a commit every `batch`. Ops/s.
fn vos(n: u64, size: usize, batch: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let cfg = VosConfig {
        auto_commit: batch == 1,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("index.redb"), file_bdev(dir.path()), cfg).unwrap();
    v.cont_create(CONT).unwrap();
    v.commit().unwrap();
    let oid = ObjectId::generate(0, 1, ObjType::MultiHashed, ObjClass::S1).unwrap();
    let t = Instant::now();
    for i in 0..n {
        v.update(
            CONT,
            oid,
            Epoch(i + 1),
            &DKey(format!("k{i}").into_bytes()),
            &[Iod::single("v", size as u64)],
            &[SgList::one(vec![i as u8; size])],
        )
        .unwrap();
        if batch > 1 && (i + 1).is_multiple_of(batch) {
            v.commit().unwrap();
        }
    }
    v.commit().unwrap();
    n as f64 / t.elapsed().as_secs_f64()
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn update_throughput() {
    let n = ops();
    let raw1 = raw(n, 1);
    let raw64 = raw(n, 64);
    let rows = [
        ("vos 64 B inline, auto-commit", vos(n, 64, 1), raw1),
        ("vos 8 KiB bdev, auto-commit", vos(n, 8192, 1), raw1),
        ("vos 64 B inline, group commit 64", vos(n, 64, 64), raw64),
        ("vos 8 KiB bdev, group commit 64", vos(n, 8192, 64), raw64),
    ];
    println!("raw bdev 8 KiB write+flush: {raw1:.0} ops/s; 64 writes per flush: {raw64:.0} ops/s");
    for (name, ops, base) in rows {
        println!(
            "{name}: {ops:.0} updates/s ({:.2} x the raw bdev with the same flush rate)",
            ops / base
        );
    }
}
