//! Crash test: a child process (this test binary re-executed, running the
//! ignored `crash_child_process` helper) does write-heavy updates on a store
//! (redb index + io_uring file bdev), printing `ACK key epoch` for each write
//! once the store has acknowledged it (durable). The parent kills it with
//! SIGKILL at a random point, reopens the store and checks: every acknowledged
//! write is readable and intact (a version at least as new as the acknowledged
//! one, self-checking header and CRC), every visible value is intact (nothing
//! half-written), and the space map is consistent (free + referenced blocks
//! cover the device exactly, inline byte counter matches). Repeated for many
//! kill points; the store carries over between rounds. Rounds alternate between
//! auto-commit and group commit (a batch acknowledged after one commit).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::types::*;
use obj::vos::{Vos, VosConfig};
use rand::{Rng, SeedableRng};

const CONT: Uuid = Uuid::from_u128(0xc0ffee);
const KEYS: u32 = 48;
const BDEV_BYTES: u64 = 32 << 20;
/// Array akey "arr": 16-byte records in [0, ARR_SPAN).
const ARR_SPAN: u64 = 2048;
const REC: u64 = 16;

fn oid() -> ObjectId {
    ObjectId::generate(1, 1, ObjType::MultiHashed, ObjClass::S1).unwrap()
}

fn open(dir: &std::path::Path, auto_commit: bool, wal: bool) -> Vos {
    let bdev = bdev::file::FileBdev::open(
        "crash",
        dir.join("bdev.img"),
        bdev::file::FileOptions {
            size: Some(BDEV_BYTES),
            ..Default::default()
        },
    )
    .expect("io_uring file bdev");
    let cfg = VosConfig {
        inline_max: 4096,
        auto_commit,
        wal,
        ..VosConfig::default()
    };
    Vos::open(dir.join("index.redb"), Arc::new(bdev), cfg).unwrap()
}

/// A self-describing value: key, epoch, payload length, payload CRC, payload.
fn make_value(key: u32, epoch: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(epoch ^ (u64::from(key) << 48));
    let payload: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let mut v = Vec::with_capacity(20 + len);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&epoch.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    v.extend_from_slice(&payload);
    v
}

/// Check a value read back: `Some((key, epoch))` if intact.
fn verify_value(v: &[u8]) -> Option<(u32, u64)> {
    let key = u32::from_le_bytes(v.get(0..4)?.try_into().ok()?);
    let epoch = u64::from_le_bytes(v.get(4..12)?.try_into().ok()?);
    let len = u32::from_le_bytes(v.get(12..16)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(v.get(16..20)?.try_into().ok()?);
    let payload = v.get(20..)?;
    (payload.len() == len && crc32c::crc32c(payload) == crc && make_value(key, epoch, len) == v)
        .then_some((key, epoch))
}

/// A self-checking array record: epoch, index, CRC of both.
fn make_record(epoch: u64, idx: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&epoch.to_le_bytes());
    r[8..12].copy_from_slice(&(idx as u32).to_le_bytes());
    let crc = crc32c::crc32c(&r[..12]);
    r[12..].copy_from_slice(&crc.to_le_bytes());
    r
}

/// A record read back: `None` = hole, `Some(epoch)` if intact; panics if damaged.
fn check_record(r: &[u8], idx: u64, what: &str) -> Option<u64> {
    if r.iter().all(|&b| b == 0) {
        return None;
    }
    let crc = u32::from_le_bytes(r[12..16].try_into().unwrap());
    let i = u32::from_le_bytes(r[8..12].try_into().unwrap());
    assert!(
        crc == crc32c::crc32c(&r[..12]) && u64::from(i) == idx,
        "{what}: damaged array record at {idx}"
    );
    Some(u64::from_le_bytes(r[..8].try_into().unwrap()))
}

/// `ACK key epoch idx nr`.
fn parse_ack(line: &str) -> Option<(u32, u64, u64, u64)> {
    let mut it = line.strip_prefix("ACK ")?.split(' ');
    Some((
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

fn dkey(k: u32) -> DKey {
    DKey(format!("key-{k:03}").into_bytes())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The child: write until killed.
#[test]
#[ignore = "helper process of crash_kill9_many_points"]
fn crash_child_process() {
    let Ok(dir) = std::env::var("VOS_CRASH_DIR") else {
        return;
    };
    let batch: usize = std::env::var("VOS_CRASH_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let env = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    // commits through the redo log (or durable index commits only), and
    // aggregation (a checkpoint: a durable index commit) every `agg` updates
    let wal = env("VOS_CRASH_WAL", 1) == 1;
    let agg = env("VOS_CRASH_AGG", 16);
    let dir = std::path::PathBuf::from(dir);
    let mut vos = open(&dir, batch == 1, wal);
    if vos.cont_list().unwrap().is_empty() {
        vos.cont_create(CONT).unwrap();
        vos.commit().unwrap();
    }
    let mut hlc = Hlc::starting_after(vos.max_epoch());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(now_ns());
    let out = std::io::stdout();
    let mut pending: Vec<(u32, u64, Recx)> = Vec::new();
    let mut n = 0u64;
    loop {
        let k = rng.gen_range(0..KEYS);
        let len = [16usize, 1000, 5000, 20_000, 70_000][rng.gen_range(0..5)];
        let e = hlc.now(now_ns());
        let v = make_value(k, e.0, len);
        // a partial overwrite of the key's array (inline or on the bdev)
        let nr = [1u64, 8, 300, 1500][rng.gen_range(0..4)];
        let rx = Recx {
            idx: rng.gen_range(0..ARR_SPAN - nr),
            nr,
        };
        let recs: Vec<u8> = (rx.idx..rx.end())
            .flat_map(|i| make_record(e.0, i))
            .collect();
        vos.update(
            CONT,
            oid(),
            e,
            &dkey(k),
            &[
                Iod::single("v", v.len() as u64),
                Iod::array("arr", REC, vec![rx]),
            ],
            &[SgList::one(v), SgList::one(recs)],
        )
        .unwrap();
        pending.push((k, e.0, rx));
        if pending.len() >= batch {
            vos.commit().unwrap();
            let mut o = out.lock();
            for (k, e, rx) in pending.drain(..) {
                writeln!(o, "ACK {k} {e} {} {}", rx.idx, rx.nr).unwrap();
            }
            o.flush().unwrap();
        }
        n += 1;
        if n.is_multiple_of(agg) {
            // drop old versions so the bdev space is reused (and freed under fire)
            let upto = Epoch(hlc.last().0 - 1);
            // (in group-commit mode this shares the batch's transaction: its
            // frees must not be reused before the commit)
            vos.aggregate(CONT, upto).unwrap();
        }
    }
}

#[test]
fn crash_kill9_many_points() {
    if let Err(e) = bdev::file::probe_uring() {
        panic!("io_uring unavailable, the crash test cannot run: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(now_ns());
    let mut acked: HashMap<u32, u64> = HashMap::new();
    let mut acked_ext: HashMap<u32, Vec<(u64, Recx)>> = HashMap::new();
    let rounds = 20;
    let t0 = Instant::now();
    let mut total_acks = 0usize;
    for round in 0..rounds {
        let batch = if round % 2 == 0 {
            1
        } else {
            rng.gen_range(2..16)
        };
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("VOS_CRASH_DIR", dir.path())
            .env("VOS_CRASH_BATCH", batch.to_string())
            // most rounds through the redo log, one in five with durable
            // index commits only; some with long stretches of log between
            // checkpoints
            .env("VOS_CRASH_WAL", if round % 5 == 4 { "0" } else { "1" })
            .env("VOS_CRASH_AGG", if round % 3 == 1 { "400" } else { "16" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = rng.gen_range(1..120usize);
        let extra_us = rng.gen_range(0..3000u64);
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen < kill_after && Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some((k, e, idx, nr)) = parse_ack(&line) {
                let slot = acked.entry(k).or_insert(0);
                *slot = (*slot).max(e);
                acked_ext.entry(k).or_default().push((e, Recx { idx, nr }));
                seen += 1;
            }
        }
        assert!(seen > 0, "round {round}: the child acknowledged nothing");
        std::thread::sleep(Duration::from_micros(extra_us));
        child.kill().unwrap(); // SIGKILL
                               // acks already written to the pipe before the kill count too
        for line in lines.map_while(Result::ok) {
            if let Some((k, e, idx, nr)) = parse_ack(&line) {
                let slot = acked.entry(k).or_insert(0);
                *slot = (*slot).max(e);
                acked_ext.entry(k).or_default().push((e, Recx { idx, nr }));
                seen += 1;
            }
        }
        child.wait().unwrap();
        total_acks += seen;

        // ---- recover and check
        let mut vos = open(dir.path(), true, true);
        let report = vos.check().unwrap_or_else(|e| panic!("round {round}: {e}"));
        let mut anchor = Anchor::default();
        let mut visible = 0;
        while !anchor.is_eof() {
            for d in vos
                .list_dkey(CONT, oid(), EPOCH_MAX, &mut anchor, 16)
                .unwrap()
            {
                let mut sgl = [
                    SgList::one(vec![0; 128 << 10]),
                    SgList::one(vec![0xee; (ARR_SPAN * REC) as usize]),
                ];
                let iods = [
                    Iod::single("v", 0),
                    Iod::array(
                        "arr",
                        REC,
                        vec![Recx {
                            idx: 0,
                            nr: ARR_SPAN,
                        }],
                    ),
                ];
                let out = vos
                    .fetch(CONT, oid(), EPOCH_MAX, &d, &iods, &mut sgl)
                    .unwrap();
                let v = &sgl[0].iovs[0][..out.sizes[0] as usize];
                let arr = &sgl[1].iovs[0];
                let what = format!("round {round}, {d:?}");
                let rec_epochs: Vec<Option<u64>> = (0..ARR_SPAN)
                    .map(|i| {
                        let o = (i * REC) as usize;
                        check_record(&arr[o..o + REC as usize], i, &what)
                    })
                    .collect();
                let (k, e) = verify_value(v)
                    .unwrap_or_else(|| panic!("round {round}: {d:?} holds a damaged value"));
                assert_eq!(dkey(k), d, "round {round}: value under the wrong key");
                if let Some(&a) = acked.get(&k) {
                    assert!(
                        e >= a,
                        "round {round}: key {k} went back from epoch {a} to {e}"
                    );
                }
                for (ae, rx) in acked_ext.get(&k).into_iter().flatten() {
                    for i in rx.idx..rx.end() {
                        let got = rec_epochs[i as usize];
                        assert!(
                            got.is_some_and(|g| g >= *ae),
                            "{what}: acknowledged record {i}@{ae} reads as {got:?}"
                        );
                    }
                }
                visible += 1;
            }
        }
        for (&k, &e) in &acked {
            let mut sgl = [SgList::one(vec![0; 128 << 10])];
            let out = vos
                .fetch(
                    CONT,
                    oid(),
                    EPOCH_MAX,
                    &dkey(k),
                    &[Iod::single("v", 0)],
                    &mut sgl,
                )
                .unwrap();
            assert!(
                out.sizes[0] > 0,
                "round {round}: acknowledged key {k}@{e} lost"
            );
            let (_, got) = verify_value(&sgl[0].iovs[0][..out.sizes[0] as usize]).unwrap();
            assert!(got >= e);
        }
        assert!(
            visible >= acked.len(),
            "round {round}: {visible} keys visible, {} acknowledged",
            acked.len()
        );
        eprintln!(
            "round {round}: batch {batch}, {seen} acks, {} keys, {} records, {} blocks used, {} free",
            acked.len(),
            report.records,
            report.used_blocks,
            report.free_blocks
        );
    }
    assert!(total_acks >= rounds);
    eprintln!(
        "{rounds} kill points, {total_acks} acknowledged writes, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
