//! The store's redo log: what a batch of updates and punches changed in the
//! index, appended and made durable with one `fdatasync`, so the index
//! itself (redb) can be committed without an fsync per batch and made
//! durable only at checkpoints.
//!
//! ```text
//! record = header (32 B) ‖ payload ‖ zero padding to a multiple of 4 KiB
//! header = "VOSW" | gen u64 | lsn u64 | payload len u32 | crc32c u32 | 0u32
//! payload = seq u64 | max_epoch u64 | inline_bytes u64 | count u32
//!           ‖ count × (table u8 | key len u32 | key | value len u32 | value)
//! ```
//!
//! `gen` is the index's `wal_gen` when the record was written: a checkpoint
//! (a durable index commit) raises it in the same commit, so older records
//! are ignored from then on and the file is overwritten from offset 0. The
//! CRC covers gen, lsn, length and payload; a replay stops at the first
//! record that is torn, of another generation or out of sequence. Records
//! are only ever appended after the previous one was made durable, so what
//! follows an invalid record was never acknowledged.
//!
//! An append can run asynchronously ([`Wal::append_start`] /
//! [`Wal::append_poll`]): the record's write and its `fdatasync` are linked
//! SQEs on the log's own small io_uring, so the store's thread executes the
//! next batch meanwhile (the engine's commit pipeline). The next record is
//! started only after this one completed.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use io_uring::{opcode, squeue, types, IoUring};

const MAGIC: &[u8; 4] = b"VOSW";
const HDR: usize = 32;
const ALIGN: usize = 4096;
/// The file grows by written zeroes this much ahead of the records: an
/// `fdatasync` of a record then rarely has a file size or block allocation
/// to journal (ext4 would commit its journal for that on every append).
const GROW: u64 = 1 << 20;

/// The index table a logged change goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Idx = 0,
    Extmax = 1,
    Punched = 2,
}

impl Tab {
    fn from_u8(b: u8) -> Option<Tab> {
        match b {
            0 => Some(Tab::Idx),
            1 => Some(Tab::Extmax),
            2 => Some(Tab::Punched),
            _ => None,
        }
    }
}

/// One replayable batch.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Its place in the generation (1, 2, ...).
    pub lsn: u64,
    /// seq, max_epoch, inline_bytes after the batch.
    pub counters: [u64; 3],
    pub puts: Vec<(Tab, Vec<u8>, Vec<u8>)>,
}

/// The log file and the open batch's changes.
pub(crate) struct Wal {
    file: File,
    gen: u64,
    lsn: u64,
    off: u64,
    /// The file's length (written through, never sparse).
    len: u64,
    /// Encoded changes of the open batch.
    buf: Vec<u8>,
    count: u32,
    /// The record being (or last) written: the kernel reads it while an
    /// append is in flight, so it is not touched until that completes.
    rec: Vec<u8>,
    /// The log's ring (None where io_uring cannot be set up: appends are
    /// then synchronous, `append_start` completes them).
    ring: Option<IoUring>,
    /// The append in flight.
    inflight: Option<Append>,
}

/// An append whose write and fdatasync were submitted.
#[derive(Debug)]
struct Append {
    lsn: u64,
    len: u64,
    /// Completions still to come (write, fdatasync).
    left: u32,
    err: Option<io::Error>,
}

const UD_WRITE: u64 = 1;
const UD_SYNC: u64 = 2;

impl Wal {
    /// Opens (creates) the log at `path` for appending records of generation
    /// `gen` from its start.
    pub fn open(path: &Path, gen: u64) -> io::Result<Wal> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        let ring = match IoUring::new(4) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "redo log: no io_uring, appends are synchronous");
                None
            }
        };
        Ok(Wal {
            file,
            gen,
            lsn: 0,
            off: 0,
            len,
            buf: Vec::new(),
            count: 0,
            rec: Vec::new(),
            ring,
            inflight: None,
        })
    }

    pub fn gen(&self) -> u64 {
        self.gen
    }

    /// The sequence number the next record gets.
    pub fn next_lsn(&self) -> u64 {
        self.lsn + 1
    }

    /// Bytes of log since the last checkpoint (plus the open batch).
    pub fn size(&self) -> u64 {
        self.off + self.buf.len() as u64
    }

    /// Records the open batch's change `key → val` in `tab`.
    pub fn log(&mut self, tab: Tab, key: &[u8], val: &[u8]) {
        self.buf.push(tab as u8);
        self.buf
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(key);
        self.buf
            .extend_from_slice(&(val.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(val);
        self.count += 1;
    }

    /// Whether the open batch logged nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forgets the open batch's changes (rolled back, or committed by a
    /// checkpoint).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
    }

    /// After a checkpoint that recorded `gen` in the index: the next record
    /// is the first of `gen`, at the start of the file.
    pub fn reset(&mut self, gen: u64) {
        self.gen = gen;
        self.lsn = 0;
        self.off = 0;
        self.clear();
    }

    /// Writes the open batch as one record and makes it durable
    /// (`fdatasync`). On an error the record may or may not be on disk: the
    /// caller must void this generation (a checkpoint) before appending again.
    pub fn append(&mut self, counters: [u64; 3]) -> io::Result<()> {
        self.append_start(counters)?;
        self.append_poll(true).unwrap_or(Ok(()))
    }

    /// Starts [`Wal::append`]: the record is encoded (the open batch is
    /// empty again, the next batch may log) and its write and `fdatasync`
    /// submitted; [`Wal::append_poll`] reports the outcome. Errors as
    /// `append`'s (the record may be on disk).
    pub fn append_start(&mut self, counters: [u64; 3]) -> io::Result<()> {
        if self.inflight.is_some() {
            return Err(io::Error::other("redo log: an append is still in flight"));
        }
        let lsn = self.lsn + 1;
        let rec = &mut self.rec;
        rec.clear();
        rec.extend_from_slice(MAGIC);
        rec.extend_from_slice(&self.gen.to_le_bytes());
        rec.extend_from_slice(&lsn.to_le_bytes());
        let plen = 3 * 8 + 4 + self.buf.len();
        rec.extend_from_slice(&(plen as u32).to_le_bytes());
        rec.extend_from_slice(&[0u8; 8]); // crc + reserved, filled below
        for c in counters {
            rec.extend_from_slice(&c.to_le_bytes());
        }
        rec.extend_from_slice(&self.count.to_le_bytes());
        rec.extend_from_slice(&self.buf);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&rec[4..24]), &rec[HDR..]);
        rec[24..28].copy_from_slice(&crc.to_le_bytes());
        rec.resize(rec.len().next_multiple_of(ALIGN), 0);
        let end = self.off + rec.len() as u64;
        if end > self.len {
            let to = end.next_multiple_of(GROW);
            let zeros = vec![0u8; (to - end) as usize];
            self.file.write_all_at(&zeros, end)?;
            self.len = to;
        }
        let len = rec.len() as u64;
        match &mut self.ring {
            None => {
                self.file.write_all_at(rec, self.off)?;
                self.file.sync_data()?;
                self.inflight = Some(Append {
                    lsn,
                    len,
                    left: 0,
                    err: None,
                });
            }
            Some(ring) => {
                let fd = types::Fd(self.file.as_raw_fd());
                let w = opcode::Write::new(fd, rec.as_ptr(), rec.len() as u32)
                    .offset(self.off)
                    .build()
                    .flags(squeue::Flags::IO_LINK)
                    .user_data(UD_WRITE);
                let f = opcode::Fsync::new(fd)
                    .flags(types::FsyncFlags::DATASYNC)
                    .build()
                    .user_data(UD_SYNC);
                // SAFETY: the write reads `self.rec`, which is neither
                // changed nor freed until both completions are reaped
                // (`append_start` refuses while in flight; `Drop` waits).
                let pushed = unsafe {
                    let mut sq = ring.submission();
                    sq.push(&w).is_ok() && sq.push(&f).is_ok()
                };
                if !pushed {
                    return Err(io::Error::other("redo log: ring full"));
                }
                ring.submit()?;
                self.inflight = Some(Append {
                    lsn,
                    len,
                    left: 2,
                    err: None,
                });
            }
        }
        self.clear();
        Ok(())
    }

    /// The outcome of the append in flight once its write and `fdatasync`
    /// completed; `None` while they run and `wait` is false, or when no
    /// append is in flight.
    pub fn append_poll(&mut self, wait: bool) -> Option<io::Result<()>> {
        let a = self.inflight.as_mut()?;
        if let Some(ring) = &mut self.ring {
            loop {
                for cqe in ring.completion() {
                    a.left = a.left.saturating_sub(1);
                    let res = cqe.result();
                    let bad = if cqe.user_data() == UD_WRITE {
                        res < 0 || res as u64 != a.len
                    } else {
                        res < 0
                    };
                    if bad && a.err.is_none() {
                        a.err = Some(if res < 0 {
                            io::Error::from_raw_os_error(-res)
                        } else {
                            io::Error::other(format!("redo log: short write {res} of {}", a.len))
                        });
                    }
                }
                if a.left == 0 {
                    break;
                }
                if !wait {
                    return None;
                }
                if let Err(e) = ring.submit_and_wait(1) {
                    if e.kind() != io::ErrorKind::Interrupted {
                        a.err.get_or_insert(e);
                        // the SQEs may still complete: keep waiting for them
                        std::thread::yield_now();
                    }
                }
            }
        }
        let a = self.inflight.take()?;
        if let Some(e) = a.err {
            return Some(Err(e));
        }
        self.off += a.len;
        self.lsn = a.lsn;
        Some(Ok(()))
    }

    /// The valid records of generation `gen` in the log at `path` (none if
    /// there is no file), in order, up to the first torn, stale or
    /// out-of-sequence one.
    pub fn scan(path: &Path, gen: u64) -> io::Result<Vec<Batch>> {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        let mut off = 0usize;
        let mut lsn = 1u64;
        while let Some(h) = data.get(off..off + HDR) {
            let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
            let plen = u32::from_le_bytes(h[20..24].try_into().unwrap_or([0; 4])) as usize;
            let crc = u32::from_le_bytes(h[24..28].try_into().unwrap_or([0; 4]));
            if &h[..4] != MAGIC || u64_at(4) != gen || u64_at(12) != lsn {
                break;
            }
            let Some(p) = data.get(off + HDR..off + HDR + plen) else {
                break;
            };
            if crc32c::crc32c_append(crc32c::crc32c(&h[4..24]), p) != crc {
                break;
            }
            let Some(mut b) = parse_payload(p) else {
                break;
            };
            b.lsn = lsn;
            out.push(b);
            off += (HDR + plen).next_multiple_of(ALIGN);
            lsn += 1;
        }
        Ok(out)
    }
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("gen", &self.gen)
            .field("lsn", &self.lsn)
            .field("off", &self.off)
            .field("inflight", &self.inflight)
            .finish()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // the kernel may still read `rec`
        let _ = self.append_poll(true);
    }
}

fn parse_payload(p: &[u8]) -> Option<Batch> {
    let mut pos = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = p.get(pos..pos + n)?;
        pos += n;
        Some(s)
    };
    let mut b = Batch::default();
    for c in &mut b.counters {
        *c = u64::from_le_bytes(take(8)?.try_into().ok()?);
    }
    let n = u32::from_le_bytes(take(4)?.try_into().ok()?);
    for _ in 0..n {
        let tab = Tab::from_u8(take(1)?[0])?;
        let kl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let k = take(kl)?.to_vec();
        let vl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let v = take(vl)?.to_vec();
        b.puts.push((tab, k, v));
    }
    (pos == p.len()).then_some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_scan_stops_at_the_first_bad_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w");
        let mut w = Wal::open(&p, 7).unwrap();
        for i in 0..3u8 {
            w.log(Tab::Idx, &[i; 5], &[i; 5000]);
            w.log(Tab::Extmax, &[i], &9u64.to_le_bytes());
            w.append([i as u64, 2, 3]).unwrap();
        }
        assert!(w.is_empty());
        let b = Wal::scan(&p, 7).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b[2].counters, [2, 2, 3]);
        assert_eq!(b[2].lsn, 3);
        assert_eq!(b[1].puts[0], (Tab::Idx, vec![1; 5], vec![1; 5000]));
        assert_eq!(b[1].puts[1].0, Tab::Extmax);
        // another generation: nothing
        assert!(Wal::scan(&p, 8).unwrap().is_empty());
        // a torn second record hides the second and the third
        let mut data = std::fs::read(&p).unwrap();
        data[8192 + HDR + 100] ^= 1;
        std::fs::write(&p, &data).unwrap();
        assert_eq!(Wal::scan(&p, 7).unwrap().len(), 1);
        // a new generation overwrites from the start; the old tail is stale
        let mut w = Wal::open(&p, 8).unwrap();
        w.log(Tab::Punched, b"c", &1u64.to_le_bytes());
        w.append([1, 1, 1]).unwrap();
        assert_eq!(Wal::scan(&p, 8).unwrap().len(), 1);
        assert!(Wal::scan(&p, 7).unwrap().is_empty());
        assert!(Wal::scan(&d.path().join("none"), 1).unwrap().is_empty());
    }
}
