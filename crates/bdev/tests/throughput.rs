//! Single-thread throughput of each device through the public API (4 KiB random
//! reads and writes at queue depth 32). Ignored by default (it measures, it does
//! not check much); run with
//! `cargo test -p bdev --release --test throughput -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bdev::{BdevIo, BlockDevice, IoBuf};

fn run(d: Arc<dyn BlockDevice>, write: bool, dur: Duration) -> f64 {
    let mut ch = d.open_channel().unwrap();
    let bs = 4096u64;
    let blocks_per_io = bs / u64::from(d.block_size());
    let span = d.num_blocks() / blocks_per_io;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % span) * blocks_per_io
    };
    let mut free: Vec<BdevIo> = (0..32).map(|_| BdevIo::default()).collect();
    let mut done = Vec::new();
    let mut ops = 0u64;
    let start = Instant::now();
    while start.elapsed() < dur {
        while let Some(mut io) = free.pop() {
            let buf = io
                .bufs
                .pop()
                .unwrap_or_else(|| IoBuf::aligned(bs as usize, 4096));
            io = if write {
                BdevIo::write(next(), blocks_per_io, vec![buf], 0)
            } else {
                BdevIo::read(next(), blocks_per_io, vec![buf], 0)
            };
            if let Err(r) = ch.submit(io) {
                free.push(r.io);
                break;
            }
        }
        ch.poll(&mut done);
        for io in done.drain(..) {
            assert!(io.is_success(), "{:?}", io.status);
            ops += 1;
            free.push(io);
        }
    }
    while ch.in_flight() > 0 {
        ch.poll(&mut done);
        done.clear();
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

#[test]
#[ignore = "measurement; run explicitly"]
fn throughput() {
    let dur = Duration::from_millis(1500);
    let path = std::env::temp_dir().join(format!("dpustack-bdev-bench-{}", std::process::id()));
    let spec_file = format!("file:{},size=32M,direct,qd=32", path.display());
    for (name, spec) in [
        ("null", "null:1G"),
        ("malloc", "malloc:256M"),
        ("file O_DIRECT", spec_file.as_str()),
    ] {
        let d = bdev::spec::create(name, spec, 512).unwrap();
        // first pass touches every page (page faults for malloc, extent allocation
        // for a sparse file); the reported figures are from the second pass
        let w0 = run(d.clone(), true, dur);
        let r = run(d.clone(), false, dur);
        let w = run(d, true, dur);
        println!(
            "{name:>14}: 4KiB randread {r:>10.0} IOPS, randwrite {w:>10.0} IOPS (first-touch randwrite {w0:.0}; 1 thread, qd 32)"
        );
    }
    let _ = std::fs::remove_file(&path);
}
