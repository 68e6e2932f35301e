//! A regular file or block device driven through io_uring.
//!
//! Each [`IoChannel`] owns its own ring (one per polling thread, no sharing) of
//! `queue_depth` entries over a shared file descriptor. `submit` turns the I/O
//! into SQEs (readv/writev over the I/O's own buffers, fsync, fallocate) without
//! a syscall; `poll` submits what is queued (one `io_uring_enter` for the batch)
//! and reaps the completion ring (no syscall when nothing is queued).
//!
//! O_DIRECT is optional. With it, buffers whose address or length is not a
//! multiple of the block size go through an aligned bounce buffer (a copy, still
//! correct); callers that care allocate with [`IoBuf::aligned`](crate::IoBuf::aligned)
//! using [`BlockDevice::buf_align`].
//!
//! Write zeroes and unmap use `fallocate` (ZERO_RANGE / PUNCH_HOLE, both with
//! KEEP_SIZE); on a file system without them the channel falls back to writing
//! zeroes (so unmapped blocks always read back as zeroes).
//!
//! If io_uring cannot be used (old kernel, `kernel.io_uring_disabled`, seccomp),
//! [`FileBdev::open`] fails with [`Error::UringUnavailable`]; there is no silent
//! fallback to another I/O method.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use io_uring::{opcode, squeue, types, IoUring};

use crate::{
    validate, AlignedBuf, BdevIo, BlockDevice, Error, IoChannel, IoError, IoStatus, IoType,
    Rejected, Stats, StatsCell, StatsRegistry,
};

/// How to open a file device.
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// Logical block size (a power of two, 512..=65536).
    pub block_size: u32,
    /// Open with O_DIRECT (bypass the page cache).
    pub direct: bool,
    /// Per-channel queue depth (I/Os in flight).
    pub queue_depth: u32,
    /// For regular files: create the file if missing and set its size to this
    /// many bytes (rounded down to whole blocks). `None` uses the existing size.
    pub size: Option<u64>,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            block_size: 512,
            direct: false,
            queue_depth: 128,
            size: None,
        }
    }
}

/// A file- or block-device-backed bdev.
pub struct FileBdev {
    name: String,
    path: PathBuf,
    file: Arc<File>,
    block_size: u32,
    num_blocks: u64,
    direct: bool,
    depth: u32,
    is_blockdev: bool,
    stats: StatsRegistry,
    /// Tests: behave as if fallocate were unsupported.
    force_zero_writes: bool,
}

fn os(what: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Os {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Whether io_uring can be set up in this process (creates and drops a tiny ring).
pub fn probe_uring() -> Result<(), Error> {
    IoUring::new(2).map(drop).map_err(Error::UringUnavailable)
}

impl FileBdev {
    /// Open `path` as a block device named `name`.
    pub fn open(name: &str, path: impl AsRef<Path>, opts: FileOptions) -> Result<Self, Error> {
        let path = path.as_ref();
        let bs = opts.block_size;
        if !bs.is_power_of_two() || !(512..=65536).contains(&bs) {
            return Err(Error::Config(
                "block size must be a power of two in 512..=65536",
            ));
        }
        if opts.queue_depth == 0 || opts.queue_depth > 4096 {
            return Err(Error::Config("queue depth must be in 1..=4096"));
        }
        probe_uring()?;
        let mut oo = OpenOptions::new();
        oo.read(true).write(true);
        if opts.size.is_some() {
            oo.create(true);
        }
        if opts.direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let mut file = oo.open(path).map_err(|e| os("open", path, e))?;
        let meta = file.metadata().map_err(|e| os("stat", path, e))?;
        let is_blockdev = meta.file_type().is_block_device();
        if let Some(size) = opts.size {
            if is_blockdev {
                return Err(Error::Config("cannot set the size of a block device"));
            }
            let size = size / u64::from(bs) * u64::from(bs);
            file.set_len(size).map_err(|e| os("resize", path, e))?;
        }
        let bytes = file
            .seek(SeekFrom::End(0))
            .map_err(|e| os("size", path, e))?;
        let num_blocks = bytes / u64::from(bs);
        if num_blocks == 0 {
            return Err(Error::Config("file is smaller than one block"));
        }
        Ok(FileBdev {
            name: name.to_string(),
            path: path.to_path_buf(),
            file: Arc::new(file),
            block_size: bs,
            num_blocks,
            direct: opts.direct,
            depth: opts.queue_depth,
            is_blockdev,
            stats: StatsRegistry::default(),
            force_zero_writes: false,
        })
    }

    /// The backing path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Whether the backing file is a block device.
    pub fn is_block_device(&self) -> bool {
        self.is_blockdev
    }
}

impl BlockDevice for FileBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn buf_align(&self) -> usize {
        if self.direct {
            self.block_size as usize
        } else {
            1
        }
    }
    fn io_type_supported(&self, _t: IoType) -> bool {
        true
    }
    fn open_channel(&self) -> Result<Box<dyn IoChannel>, Error> {
        let entries = self.depth.next_power_of_two();
        let ring = IoUring::new(entries).map_err(Error::UringUnavailable)?;
        Ok(Box::new(UringChannel {
            ring,
            file: self.file.clone(),
            slots: (0..self.depth).map(|_| None).collect(),
            free: (0..self.depth).rev().collect(),
            done: VecDeque::new(),
            queued: 0,
            depth: self.depth as usize,
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            align: if self.direct {
                self.block_size as usize
            } else {
                1
            },
            no_fallocate: self.force_zero_writes,
            zero: None,
            stats: self.stats.register(),
        }))
    }
    fn stats(&self) -> Stats {
        self.stats.total()
    }
}

/// iovecs pointing into the slot's own buffers.
struct IoVecs(Vec<libc::iovec>);
// SAFETY: the raw pointers refer to buffers owned by the same Slot (or the
// channel's zero buffer), which moves between threads together with them.
unsafe impl Send for IoVecs {}

struct Slot {
    io: BdevIo,
    t: IoType,
    iov: IoVecs,
    bounce: Option<AlignedBuf>,
    /// SQEs not yet completed.
    pending: u32,
    /// Bytes each data SQE should transfer, summed, and bytes done.
    expected: u64,
    done: u64,
    error: Option<IoError>,
}

struct UringChannel {
    ring: IoUring,
    file: Arc<File>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    done: VecDeque<BdevIo>,
    /// SQEs pushed but not yet submitted to the kernel.
    queued: u32,
    depth: usize,
    block_size: u32,
    num_blocks: u64,
    align: usize,
    /// fallocate unsupported here: write zeroes instead.
    no_fallocate: bool,
    /// Shared zero buffer for the write-zeroes fallback (aligned for O_DIRECT).
    zero: Option<AlignedBuf>,
    stats: Arc<StatsCell>,
}

const ZERO_CHUNK: usize = 1 << 20;
const MAX_IOV: usize = 1024;

impl UringChannel {
    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    /// Push one SQE, submitting first if the submission ring is full.
    /// Returns false if the ring stayed full (the kernel refused submissions).
    fn push(&mut self, e: squeue::Entry) -> bool {
        for _ in 0..10_000 {
            // SAFETY: every SQE points only at memory owned by a Slot (buffers,
            // iovec arrays, bounce buffers) or by the channel (zero buffer); slots
            // are kept until their CQEs arrive, and Drop waits for all of them.
            // An external buffer's memory stays put and valid while the Slot owns
            // it: that is the `unsafe trait ExternalBuf` contract.
            let pushed = unsafe { self.ring.submission().push(&e) }.is_ok();
            if pushed {
                self.queued += 1;
                return true;
            }
            // The ring is full: hand it to the kernel, which consumes the SQEs.
            match self.ring.submit() {
                Ok(n) => self.queued = self.queued.saturating_sub(n as u32),
                Err(_) => std::thread::yield_now(),
            }
        }
        false
    }

    fn needs_bounce(&self, io: &BdevIo) -> bool {
        self.align > 1
            && io
                .bufs
                .iter()
                .any(|b| !b.is_aligned_to(self.align) || b.len() % self.align != 0)
    }

    fn start(&mut self, idx: u32, t: IoType, mut io: BdevIo) {
        let bs = u64::from(self.block_size);
        let off = io.offset_blocks * bs;
        let len = io.num_blocks * bs;
        let mut slot = Slot {
            io: BdevIo::default(),
            t,
            iov: IoVecs(Vec::new()),
            bounce: None,
            pending: 0,
            expected: 0,
            done: 0,
            error: None,
        };
        let ud = u64::from(idx);
        let mut sqes = Vec::with_capacity(1);
        match t {
            IoType::Read | IoType::Write => {
                if self.needs_bounce(&io) {
                    let mut b = AlignedBuf::zeroed(len as usize, self.align);
                    if t == IoType::Write {
                        let mut o = 0;
                        for x in &io.bufs {
                            b[o..o + x.len()].copy_from_slice(x);
                            o += x.len();
                        }
                    }
                    slot.iov.0.push(libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: b.len(),
                    });
                    slot.bounce = Some(b);
                } else {
                    for b in io.bufs.iter_mut() {
                        slot.iov.0.push(libc::iovec {
                            iov_base: b.as_mut_ptr().cast(),
                            iov_len: b.len(),
                        });
                    }
                }
                // Linux caps an iovec array at IOV_MAX (1024): split into several SQEs.
                let mut pos = off;
                for chunk in slot.iov.0.chunks(MAX_IOV) {
                    let n: u64 = chunk.iter().map(|v| v.iov_len as u64).sum();
                    let e = if t == IoType::Read {
                        opcode::Readv::new(self.fd(), chunk.as_ptr(), chunk.len() as u32)
                            .offset(pos)
                            .build()
                    } else {
                        opcode::Writev::new(self.fd(), chunk.as_ptr(), chunk.len() as u32)
                            .offset(pos)
                            .build()
                    };
                    sqes.push(e.user_data(ud));
                    slot.expected += n;
                    pos += n;
                }
            }
            IoType::Flush => {
                sqes.push(opcode::Fsync::new(self.fd()).build().user_data(ud));
            }
            IoType::WriteZeroes | IoType::Unmap if !self.no_fallocate => {
                let mode = libc::FALLOC_FL_KEEP_SIZE
                    | if t == IoType::Unmap {
                        libc::FALLOC_FL_PUNCH_HOLE
                    } else {
                        libc::FALLOC_FL_ZERO_RANGE
                    };
                sqes.push(
                    opcode::Fallocate::new(self.fd(), len)
                        .offset(off)
                        .mode(mode)
                        .build()
                        .user_data(ud),
                );
            }
            IoType::WriteZeroes | IoType::Unmap => {
                let zero = self
                    .zero
                    .get_or_insert_with(|| AlignedBuf::zeroed(ZERO_CHUNK, 4096));
                let zp = zero.as_ptr() as *mut libc::c_void;
                let mut left = len;
                while left > 0 {
                    let n = left.min(ZERO_CHUNK as u64);
                    slot.iov.0.push(libc::iovec {
                        iov_base: zp,
                        iov_len: n as usize,
                    });
                    left -= n;
                }
                let mut pos = off;
                for chunk in slot.iov.0.chunks(MAX_IOV) {
                    let n: u64 = chunk.iter().map(|v| v.iov_len as u64).sum();
                    let e = opcode::Writev::new(self.fd(), chunk.as_ptr(), chunk.len() as u32)
                        .offset(pos)
                        .build();
                    sqes.push(e.user_data(ud));
                    slot.expected += n;
                    pos += n;
                }
            }
        }
        slot.pending = sqes.len() as u32;
        slot.io = io;
        self.slots[idx as usize] = Some(slot);
        let total = sqes.len() as u32;
        let mut pushed = 0u32;
        for e in sqes {
            if !self.push(e) {
                break;
            }
            pushed += 1;
        }
        if pushed < total {
            // Only the pushed SQEs will complete; fail the I/O when they have.
            if let Some(slot) = self.slots[idx as usize].as_mut() {
                slot.pending = pushed;
                slot.error = Some(IoError::Os(libc::EAGAIN));
            }
            if pushed == 0 {
                if let Some(slot) = self.slots[idx as usize].take() {
                    self.finish(idx, slot);
                }
            }
        }
    }

    fn reap(&mut self) {
        let mut finished = Vec::new();
        for cqe in self.ring.completion() {
            let idx = cqe.user_data() as usize;
            let Some(Some(slot)) = self.slots.get_mut(idx) else {
                continue;
            };
            let res = cqe.result();
            if res < 0 {
                slot.error.get_or_insert(IoError::Os(-res));
            } else if slot.t.has_data() || slot.expected > 0 {
                slot.done += res as u64;
            }
            slot.pending = slot.pending.saturating_sub(1);
            if slot.pending == 0 {
                finished.push(idx);
            }
        }
        for idx in finished {
            let Some(slot) = self.slots[idx].take() else {
                continue;
            };
            self.finish(idx as u32, slot);
        }
    }

    fn finish(&mut self, idx: u32, mut slot: Slot) {
        let fallocate_unsupported = matches!(slot.error, Some(IoError::Os(e)) if e == libc::EOPNOTSUPP || e == libc::EINVAL)
            && matches!(slot.t, IoType::WriteZeroes | IoType::Unmap)
            && slot.expected == 0;
        if fallocate_unsupported && !self.no_fallocate {
            tracing::debug!("fallocate unsupported; writing zeroes instead");
            self.no_fallocate = true;
            let t = slot.t;
            self.start(idx, t, slot.io);
            return;
        }
        let status = match slot.error {
            Some(e) => IoStatus::Failed(e),
            None if slot.done < slot.expected => IoStatus::Failed(IoError::Short {
                expected: slot.expected,
                done: slot.done,
            }),
            None => IoStatus::Success,
        };
        if let (Some(b), IoType::Read, IoStatus::Success) = (&slot.bounce, slot.t, status) {
            let mut o = 0;
            for x in slot.io.bufs.iter_mut() {
                let n = x.len();
                x.copy_from_slice(&b[o..o + n]);
                o += n;
            }
        }
        let bytes = slot.io.num_blocks * u64::from(self.block_size);
        self.stats
            .record(slot.t, bytes, status == IoStatus::Success);
        slot.io.status = status;
        self.free.push(idx);
        self.done.push_back(slot.io);
    }

    fn flush_submissions(&mut self) {
        if self.queued > 0 {
            if let Ok(n) = self.ring.submit() {
                self.queued = self.queued.saturating_sub(n as u32);
            }
        }
    }
}

impl IoChannel for UringChannel {
    #[allow(clippy::result_large_err)]
    fn submit(&mut self, io: BdevIo) -> Result<(), Rejected> {
        let t = match validate(&io, self.block_size, self.num_blocks) {
            Ok(t) => t,
            Err(error) => return Err(Rejected { error, io }),
        };
        let Some(idx) = self.free.pop() else {
            return Err(Rejected {
                error: Error::Busy,
                io,
            });
        };
        self.start(idx, t, io);
        Ok(())
    }

    fn poll(&mut self, done: &mut Vec<BdevIo>) -> usize {
        self.flush_submissions();
        self.reap();
        // a fallback may have queued new SQEs
        self.flush_submissions();
        let n = self.done.len();
        done.extend(self.done.drain(..));
        n
    }

    fn wait(&mut self, done: &mut Vec<BdevIo>) -> usize {
        loop {
            let n = self.poll(done);
            if n > 0 || self.in_flight() == 0 {
                return n;
            }
            // everything queued was submitted by poll: sleep until a completion
            // (EINTR and the like: poll again)
            let _ = self.ring.submit_and_wait(1);
        }
    }

    fn in_flight(&self) -> usize {
        self.depth - self.free.len() + self.done.len()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn stats(&self) -> Stats {
        self.stats.snapshot()
    }
}

impl Drop for UringChannel {
    fn drop(&mut self) {
        // The kernel may still write into buffers owned by in-flight slots: wait
        // for every outstanding SQE before the memory is freed.
        let mut spins = 0u32;
        while self.slots.iter().any(Option::is_some) {
            let pending: u32 = self.slots.iter().flatten().map(|s| s.pending).sum();
            if self.ring.submit_and_wait(pending.max(1) as usize).is_err() {
                spins += 1;
                if spins > 1_000_000 {
                    // Never free memory the kernel may still use.
                    std::mem::forget(std::mem::take(&mut self.slots));
                    return;
                }
            }
            self.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IoBuf;

    struct TempFile(PathBuf);
    impl TempFile {
        fn new(tag: &str) -> Self {
            let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            TempFile(dir.join(format!("dpustack-bdev-{tag}-{}", std::process::id())))
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn wait(ch: &mut dyn IoChannel, want: usize) -> Vec<BdevIo> {
        let mut done = Vec::new();
        for _ in 0..1_000_000 {
            ch.poll(&mut done);
            if done.len() >= want {
                return done;
            }
            std::thread::yield_now();
        }
        panic!("only {} of {want} I/Os completed", done.len());
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    fn roundtrip(direct: bool) {
        let tf = TempFile::new(if direct { "direct" } else { "buffered" });
        let opts = FileOptions {
            block_size: 4096,
            direct,
            queue_depth: 8,
            size: Some(1 << 20),
        };
        let d =
            FileBdev::open("f0", &tf.0, opts).expect("open (io_uring and O_DIRECT must work here)");
        assert_eq!(d.num_blocks(), 256);
        let mut ch = d.open_channel().unwrap();
        let data = pattern(4 * 4096, 5);
        // one aligned buffer, and an unaligned split (bounced under O_DIRECT)
        let aligned = {
            let mut b = IoBuf::aligned(2 * 4096, d.buf_align());
            b.copy_from_slice(&data[..8192]);
            b
        };
        ch.submit(BdevIo::write(10, 2, vec![aligned], 1)).unwrap();
        ch.submit(BdevIo::write(
            12,
            2,
            vec![
                IoBuf::from(data[8192..9000].to_vec()),
                IoBuf::from(data[9000..].to_vec()),
            ],
            2,
        ))
        .unwrap();
        let done = wait(&mut *ch, 2);
        assert!(
            done.iter().all(|io| io.is_success()),
            "{:?}",
            done.iter().map(|i| i.status).collect::<Vec<_>>()
        );
        ch.submit(BdevIo::flush(3)).unwrap();
        assert!(wait(&mut *ch, 1)[0].is_success());
        let r = BdevIo::read(
            10,
            4,
            vec![IoBuf::zeroed(100), IoBuf::zeroed(4 * 4096 - 100)],
            4,
        );
        ch.submit(r).unwrap();
        let r = wait(&mut *ch, 1).pop().unwrap();
        assert!(r.is_success(), "{:?}", r.status);
        assert_eq!(r.data(), data);
        // write zeroes and unmap read back as zeroes, neighbours intact
        ch.submit(BdevIo::write_zeroes(10, 1, 5)).unwrap();
        ch.submit(BdevIo::unmap(13, 1, 6)).unwrap();
        assert!(wait(&mut *ch, 2).iter().all(|io| io.is_success()));
        ch.submit(BdevIo::read(10, 4, vec![IoBuf::aligned(4 * 4096, 4096)], 7))
            .unwrap();
        let got = wait(&mut *ch, 1).pop().unwrap().data();
        assert!(got[..4096].iter().all(|&b| b == 0));
        assert_eq!(&got[4096..3 * 4096], &data[4096..3 * 4096]);
        assert!(got[3 * 4096..].iter().all(|&b| b == 0));
        // out of range
        let e = ch
            .submit(BdevIo::read(255, 2, vec![IoBuf::zeroed(8192)], 0))
            .unwrap_err();
        assert!(matches!(e.error, Error::OutOfRange { .. }));
        let s = d.stats();
        assert_eq!(s.write.ops, 2);
        assert_eq!(s.read.bytes, 8 * 4096);
        assert_eq!((s.write_zeroes.ops, s.unmap.ops, s.flush.ops), (1, 1, 1));
    }

    #[test]
    fn buffered_read_write_zeroes() {
        roundtrip(false);
    }

    #[test]
    fn direct_read_write_zeroes() {
        roundtrip(true);
    }

    #[test]
    fn zero_write_fallback() {
        let tf = TempFile::new("fallback");
        let opts = FileOptions {
            block_size: 512,
            direct: false,
            queue_depth: 4,
            size: Some(3 << 20),
        };
        let mut d = FileBdev::open("f2", &tf.0, opts).unwrap();
        d.force_zero_writes = true;
        let mut ch = d.open_channel().unwrap();
        let n = 3 * 2048; // 3 MiB: several 1 MiB iovecs
        ch.submit(BdevIo::write(
            0,
            n,
            vec![IoBuf::from(vec![0xee; 3 << 20])],
            0,
        ))
        .unwrap();
        assert!(wait(&mut *ch, 1)[0].is_success());
        ch.submit(BdevIo::write_zeroes(1, n - 2, 1)).unwrap();
        assert!(wait(&mut *ch, 1)[0].is_success());
        ch.submit(BdevIo::read(0, n, vec![IoBuf::zeroed(3 << 20)], 2))
            .unwrap();
        let got = wait(&mut *ch, 1).pop().unwrap().data();
        assert!(got[..512].iter().all(|&b| b == 0xee));
        assert!(got[512..(3 << 20) - 512].iter().all(|&b| b == 0));
        assert!(got[(3 << 20) - 512..].iter().all(|&b| b == 0xee));
    }

    #[test]
    fn queue_depth_and_data_across_many_ios() {
        let tf = TempFile::new("qd");
        let opts = FileOptions {
            block_size: 512,
            direct: false,
            queue_depth: 4,
            size: Some(64 * 512),
        };
        let d = FileBdev::open("f1", &tf.0, opts).unwrap();
        let mut ch = d.open_channel().unwrap();
        for i in 0..4u64 {
            ch.submit(BdevIo::write(
                i,
                1,
                vec![IoBuf::from(vec![i as u8 + 1; 512])],
                i,
            ))
            .unwrap();
        }
        let e = ch.submit(BdevIo::flush(9)).unwrap_err();
        assert!(matches!(e.error, Error::Busy));
        assert_eq!(ch.in_flight(), 4);
        let done = wait(&mut *ch, 4);
        assert!(done.iter().all(|io| io.is_success()));
        // drop a channel with I/O in flight: Drop waits for the kernel
        for i in 0..4u64 {
            ch.submit(BdevIo::read(i, 1, vec![IoBuf::zeroed(512)], i))
                .unwrap();
        }
        drop(ch);
        let mut ch = d.open_channel().unwrap();
        ch.submit(BdevIo::read(0, 4, vec![IoBuf::zeroed(2048)], 0))
            .unwrap();
        let r = wait(&mut *ch, 1).pop().unwrap();
        let want: Vec<u8> = (1..=4u8).flat_map(|v| vec![v; 512]).collect();
        assert_eq!(r.data(), want);
    }

    /// Against a real block device (e.g. a loop device): set
    /// DPUSTACK_TEST_BLOCKDEV=/dev/loopN (its contents are overwritten) and run
    /// `cargo test -p bdev -- --ignored block_device`.
    #[test]
    #[ignore = "needs a scratch block device in DPUSTACK_TEST_BLOCKDEV"]
    fn block_device() {
        let path = std::env::var("DPUSTACK_TEST_BLOCKDEV").expect("DPUSTACK_TEST_BLOCKDEV");
        for direct in [false, true] {
            let opts = FileOptions {
                block_size: 4096,
                direct,
                queue_depth: 8,
                size: None,
            };
            let d = FileBdev::open("bd", &path, opts).unwrap();
            assert!(d.is_block_device());
            let mut ch = d.open_channel().unwrap();
            let data = pattern(8 * 4096, 9);
            ch.submit(BdevIo::write(1, 8, vec![IoBuf::from(data.clone())], 0))
                .unwrap();
            assert!(wait(&mut *ch, 1)[0].is_success());
            ch.submit(BdevIo::write_zeroes(2, 1, 0)).unwrap();
            ch.submit(BdevIo::unmap(4, 1, 0)).unwrap();
            let st: Vec<_> = wait(&mut *ch, 2).iter().map(|i| i.status).collect();
            assert!(st.iter().all(|s| *s == IoStatus::Success), "{st:?}");
            ch.submit(BdevIo::read(1, 8, vec![IoBuf::aligned(8 * 4096, 4096)], 0))
                .unwrap();
            let got = wait(&mut *ch, 1).pop().unwrap().data();
            assert_eq!(&got[..4096], &data[..4096]);
            assert!(got[4096..8192].iter().all(|&b| b == 0));
            assert_eq!(&got[8192..3 * 4096], &data[8192..3 * 4096]);
            assert!(got[3 * 4096..4 * 4096].iter().all(|&b| b == 0));
            assert_eq!(&got[4 * 4096..], &data[4 * 4096..]);
        }
    }

    #[test]
    fn open_errors_are_clear() {
        let e = FileBdev::open("x", "/nonexistent/dir/file", FileOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/dir/file"), "{e}");
        let e = FileBdev::open(
            "x",
            "/dev/null",
            FileOptions {
                block_size: 1000,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert!(matches!(e, Error::Config(_)));
        assert!(
            probe_uring().is_ok(),
            "io_uring is expected to work on the project's machines"
        );
    }
}
