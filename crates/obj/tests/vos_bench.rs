//! Update throughput of the versioned store, next to the raw bdev of the same run.
//!
//! `cargo test -p obj --test vos_bench -- --ignored --nocapture` (`VOS_BENCH_OPS=N`).
//! On one io_uring file bdev + redb index in a temp dir:
//! - baseline: raw 8 KiB bdev writes with a flush after each (what one durable
//!   write costs at least), and with one flush per 64 writes;
//! - vos, auto-commit (one durable commit per update) and group commit of 64,
//!   for 64 B values (inline in the index) and 8 KiB values (on the bdev);
//! - `commit_chain`: wall and CPU time per group commit along a long run of
//!   commits, through the redo log (checkpoints never, every 64 or 16 records)
//!   and with the log off (`VOS_BENCH_SIZE`: value bytes, default 3901);
//! - `fetch_cycle`: CPU per latest-epoch fetch of a 3901-byte value, cycling
//!   over more keys than the latest-value cache holds (`VOS_BENCH_KEYS`,
//!   `VOS_BENCH_CACHE`).

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

/// This thread's CPU time (s).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Time per group commit along a long run of commits through the redo log
/// (no checkpoint) and with the log off: `VOS_BENCH_OPS` commits of 32
/// 3901-byte values (mdtest-hard's), printed per 250 commits.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn commit_chain() {
    let size: usize = std::env::var("VOS_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3901);
    for (wal, recs, defer) in [
        (true, 64, false),
        (true, 64, true),
        (true, 16, false),
        (true, 16, true),
        (false, 0, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = VosConfig {
            auto_commit: false,
            wal,
            wal_checkpoint_records: recs,
            wal_defer_index: defer,
            ..VosConfig::default()
        };
        let mut v = Vos::open(dir.path().join("index.redb"), file_bdev(dir.path()), cfg).unwrap();
        v.cont_create(CONT).unwrap();
        v.commit().unwrap();
        let oid = ObjectId::generate(0, 1, ObjType::KvHashed, ObjClass::S1).unwrap();
        let mut t = Instant::now();
        let mut cpu = thread_cpu();
        let mut e = 1;
        let mut row = Vec::new();
        for c in 0..ops() {
            for _ in 0..32 {
                e += 1;
                v.update(
                    CONT,
                    oid,
                    Epoch(e),
                    &DKey(e.to_be_bytes().to_vec()),
                    &[Iod::single("kv", size as u64)],
                    &[SgList::one(vec![e as u8; size])],
                )
                .unwrap();
            }
            v.commit().unwrap();
            if (c + 1) % 250 == 0 {
                let c2 = thread_cpu();
                row.push(format!(
                    "{:.2}/{:.2}",
                    t.elapsed().as_secs_f64() * 1e3 / 250.0,
                    (c2 - cpu) * 1e3 / 250.0
                ));
                t = Instant::now();
                cpu = c2;
            }
        }
        eprintln!(
            "wal {wal} checkpoint every {recs} records, index commit deferred {defer}: ms per commit (wall/CPU), per 250: {}",
            row.join(" ")
        );
    }
}

/// CPU per latest-epoch fetch of one 3901-byte single value (mdtest-hard's
/// read), cycling over `VOS_BENCH_KEYS` keys (default 4000, ~16 MB) with the
/// latest-value cache at `VOS_BENCH_CACHE` bytes: the default 4 MiB holds a
/// quarter of them, so most reads miss (as mdtest-hard's cyclic read of more
/// keys than the 64 MiB cache holds); `VOS_BENCH_CACHE=0` turns it off,
/// a large one makes every read after the first pass a hit.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn fetch_cycle() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let keys = env("VOS_BENCH_KEYS", 4000);
    let cache = env("VOS_BENCH_CACHE", 4 << 20) as usize;
    let dir = tempfile::tempdir().unwrap();
    let cfg = VosConfig {
        auto_commit: false,
        value_cache_bytes: cache,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("index.redb"), file_bdev(dir.path()), cfg).unwrap();
    v.cont_create(CONT).unwrap();
    v.commit().unwrap();
    let oid = ObjectId::generate(0, 1, ObjType::KvHashed, ObjClass::S1).unwrap();
    for k in 0..keys {
        v.update(
            CONT,
            oid,
            Epoch(k + 2),
            &DKey(k.to_be_bytes().to_vec()),
            &[Iod::single("kv", 3901)],
            &[SgList::one(vec![k as u8; 3901])],
        )
        .unwrap();
        if k % 32 == 31 {
            v.commit().unwrap();
        }
    }
    v.commit().unwrap();
    let iod = [Iod::single("kv", 0)];
    let mut row = Vec::new();
    for _pass in 0..4 {
        let cpu = thread_cpu();
        for k in 0..keys {
            let (out, bufs) = v
                .fetch_owned(
                    CONT,
                    oid,
                    EPOCH_MAX,
                    &DKey(k.to_be_bytes().to_vec()),
                    &iod,
                    1 << 20,
                )
                .unwrap();
            assert_eq!(out.sizes, [3901]);
            assert_eq!(bufs[0][0], k as u8);
        }
        row.push(format!("{:.2}", (thread_cpu() - cpu) * 1e6 / keys as f64));
    }
    eprintln!(
        "fetch of 3901 B over {keys} keys, value cache {cache} B: CPU µs per fetch, per pass: {}",
        row.join(" ")
    );
}
