//! Restart / recovery time of the versioned store for many keys (1 M by default).
//!
//! `cargo test -p obj --release --test vos_recovery -- --ignored --nocapture`
//! (`VOS_BENCH_KEYS=N` to change the count). A child process fills a store
//! (N dkeys with a 16-byte inline value each, plus one 8 KiB bdev value per
//! 1000 keys, committed in batches of 10 000) and then aborts without closing
//! anything, like a crash; the parent then times (1) the first open after the
//! crash (redb's repair of an uncleanly closed file included), (2) a clean
//! reopen, each followed by reads of sampled keys, and prints the figures.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use obj::types::*;
use obj::vos::{Vos, VosConfig};

const CONT: Uuid = Uuid::from_u128(0xbe7c);

fn oid() -> ObjectId {
    ObjectId::generate(0, 1, ObjType::MultiHashed, ObjClass::S1).unwrap()
}

fn keys() -> u64 {
    std::env::var("VOS_BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

fn open(dir: &std::path::Path) -> Vos {
    let bdev = bdev::file::FileBdev::open(
        "bench",
        dir.join("bdev.img"),
        bdev::file::FileOptions {
            size: Some(256 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let cfg = VosConfig {
        auto_commit: false,
        ..VosConfig::default()
    };
    Vos::open(dir.join("index.redb"), Arc::new(bdev), cfg).unwrap()
}

fn dkey(i: u64) -> DKey {
    DKey(format!("key-{i:010}").into_bytes())
}

#[test]
#[ignore = "helper process of recovery_time"]
fn recovery_fill_then_crash() {
    let Ok(dir) = std::env::var("VOS_BENCH_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mut v = open(&dir);
    v.cont_create(CONT).unwrap();
    let n = keys();
    let t = Instant::now();
    for i in 0..n {
        let big = i.is_multiple_of(1000);
        let val = if big {
            vec![i as u8; 8192]
        } else {
            vec![i as u8; 16]
        };
        v.update(
            CONT,
            oid(),
            Epoch(i + 1),
            &dkey(i),
            &[Iod::single("v", val.len() as u64)],
            &[SgList::one(val)],
        )
        .unwrap();
        if (i + 1).is_multiple_of(10_000) {
            v.commit().unwrap();
        }
    }
    v.commit().unwrap();
    eprintln!(
        "fill: {n} keys in {:.1} s ({:.0} updates/s, batches of 10 000)",
        t.elapsed().as_secs_f64(),
        n as f64 / t.elapsed().as_secs_f64()
    );
    // crash: no destructor runs, the index file is left "open"
    std::process::abort();
}

fn sample_reads(v: &mut Vos, n: u64) -> f64 {
    let t = Instant::now();
    for j in 0..1000u64 {
        let i = (j * 7919) % n;
        let mut s = [SgList::one(vec![0; 8192])];
        let out = v
            .fetch(
                CONT,
                oid(),
                EPOCH_MAX,
                &dkey(i),
                &[Iod::single("v", 0)],
                &mut s,
            )
            .unwrap();
        let want = if i.is_multiple_of(1000) { 8192 } else { 16 };
        assert_eq!(out.sizes[0], want, "key {i}");
        assert!(s[0].iovs[0][..want as usize].iter().all(|&b| b == i as u8));
    }
    t.elapsed().as_secs_f64() * 1e3
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture (release)"]
fn recovery_time() {
    let dir = tempfile::tempdir().unwrap();
    let n = keys();
    let st = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "recovery_fill_then_crash",
            "--nocapture",
        ])
        .env("VOS_BENCH_DIR", dir.path())
        .status()
        .unwrap();
    assert!(!st.success(), "the fill child should have aborted");
    let t = Instant::now();
    let mut v = open(dir.path());
    let crash_open = t.elapsed().as_secs_f64() * 1e3;
    let crash_reads = sample_reads(&mut v, n);
    let size = v.space().unwrap().index_file_bytes;
    drop(v);
    let t = Instant::now();
    let mut v = open(dir.path());
    let clean_open = t.elapsed().as_secs_f64() * 1e3;
    let clean_reads = sample_reads(&mut v, n);
    let t = Instant::now();
    let rep = v.check().unwrap();
    let check = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(rep.records, n);
    println!(
        "vos recovery, {n} keys, index {:.0} MiB: open after crash {crash_open:.1} ms \
         (+1000 reads {crash_reads:.1} ms); clean open {clean_open:.1} ms (+1000 reads \
         {clean_reads:.1} ms); full consistency scan {check:.0} ms",
        size as f64 / (1 << 20) as f64
    );
}
