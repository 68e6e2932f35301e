//! A RAM disk.
//!
//! The memory is split into 1 MiB chunks, each behind its own `RwLock`; an I/O
//! copies chunk by chunk, holding one lock at a time. Channels on different
//! threads therefore only meet when they touch the same megabyte at the same
//! moment, and the device needs no `unsafe`. (Like an NVMe device, it does not
//! promise atomicity across chunks for concurrent overlapping writes.)
//! Unmap and write-zeroes fill zeroes, so deallocated blocks read back as zeroes.
//! The memory comes from `calloc`, so untouched pages cost nothing.

use std::sync::{Arc, RwLock};

use crate::sync_channel::{SyncBackend, SyncChannel};
use crate::{
    for_each_piece, BdevIo, BlockDevice, Error, IoChannel, IoError, IoType, Stats, StatsRegistry,
};

const CHUNK: usize = 1 << 20;
const DEFAULT_DEPTH: usize = 1024;

/// A RAM-backed block device.
pub struct MallocBdev {
    name: String,
    inner: Arc<Inner>,
    stats: StatsRegistry,
    depth: usize,
}

struct Inner {
    block_size: u32,
    num_blocks: u64,
    chunks: Vec<RwLock<Box<[u8]>>>,
}

impl MallocBdev {
    /// A device of `num_blocks` blocks of `block_size` bytes (a power of two, 512..=64 KiB).
    pub fn new(name: &str, num_blocks: u64, block_size: u32) -> Result<Self, Error> {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(Error::Config(
                "block size must be a power of two in 512..=65536",
            ));
        }
        if num_blocks == 0 {
            return Err(Error::Config("device must have at least one block"));
        }
        let size = num_blocks
            .checked_mul(u64::from(block_size))
            .and_then(|s| usize::try_from(s).ok())
            .ok_or(Error::Config("device size overflows"))?;
        let mut chunks = Vec::with_capacity(size.div_ceil(CHUNK));
        let mut left = size;
        while left > 0 {
            let n = left.min(CHUNK);
            chunks.push(RwLock::new(vec![0u8; n].into_boxed_slice()));
            left -= n;
        }
        Ok(MallocBdev {
            name: name.to_string(),
            inner: Arc::new(Inner {
                block_size,
                num_blocks,
                chunks,
            }),
            stats: StatsRegistry::default(),
            depth: DEFAULT_DEPTH,
        })
    }

    /// A device of `bytes` bytes (rounded down to whole blocks).
    pub fn with_size(name: &str, bytes: u64, block_size: u32) -> Result<Self, Error> {
        Self::new(name, bytes / u64::from(block_size.max(1)), block_size)
    }

    /// Set the per-channel queue depth (completions waiting for `poll`).
    pub fn set_queue_depth(&mut self, depth: usize) {
        self.depth = depth.max(1);
    }
}

impl Inner {
    /// Apply `f(chunk_slice, buf_slice)` over device bytes `[pos, pos + len)`.
    fn copy(&self, pos: u64, buf: &mut [u8], write: bool) {
        let mut done = 0usize;
        let mut pos = pos as usize;
        while done < buf.len() {
            let ci = pos / CHUNK;
            let off = pos % CHUNK;
            let n = (CHUNK - off).min(buf.len() - done);
            let Some(chunk) = self.chunks.get(ci) else {
                return;
            };
            if write {
                let mut c = chunk.write().unwrap_or_else(|p| p.into_inner());
                c[off..off + n].copy_from_slice(&buf[done..done + n]);
            } else {
                let c = chunk.read().unwrap_or_else(|p| p.into_inner());
                buf[done..done + n].copy_from_slice(&c[off..off + n]);
            }
            done += n;
            pos += n;
        }
    }

    fn zero(&self, pos: u64, len: u64) {
        let mut pos = pos as usize;
        let mut left = len as usize;
        while left > 0 {
            let ci = pos / CHUNK;
            let off = pos % CHUNK;
            let n = (CHUNK - off).min(left);
            let Some(chunk) = self.chunks.get(ci) else {
                return;
            };
            chunk.write().unwrap_or_else(|p| p.into_inner())[off..off + n].fill(0);
            pos += n;
            left -= n;
        }
    }
}

impl SyncBackend for Inner {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn supported(&self, _t: IoType) -> bool {
        true
    }
    fn execute(&self, t: IoType, io: &mut BdevIo) -> Result<(), IoError> {
        let bs = u64::from(self.block_size);
        let start = io.offset_blocks * bs;
        match t {
            IoType::Read => for_each_piece(&mut io.bufs, start, |b, pos| self.copy(pos, b, false)),
            IoType::Write => for_each_piece(&mut io.bufs, start, |b, pos| self.copy(pos, b, true)),
            IoType::Flush => {}
            IoType::WriteZeroes | IoType::Unmap => self.zero(start, io.num_blocks * bs),
        }
        Ok(())
    }
}

impl BlockDevice for MallocBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks
    }
    fn io_type_supported(&self, _t: IoType) -> bool {
        true
    }
    fn open_channel(&self) -> Result<Box<dyn IoChannel>, Error> {
        Ok(Box::new(SyncChannel::new(
            self.inner.clone(),
            self.depth,
            self.stats.register(),
        )))
    }
    fn stats(&self) -> Stats {
        self.stats.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IoBuf, IoStatus};

    fn run(ch: &mut dyn IoChannel, io: BdevIo) -> BdevIo {
        ch.submit(io).unwrap();
        let mut done = Vec::new();
        assert_eq!(ch.poll(&mut done), 1);
        done.pop().unwrap()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn write_read_back_across_chunks() {
        let d = MallocBdev::with_size("m0", 4 << 20, 512).unwrap();
        assert_eq!(d.num_blocks(), 8192);
        let mut ch = d.open_channel().unwrap();
        // 3 iovecs, crossing the 1 MiB chunk boundary
        let start_block = (CHUNK as u64 / 512) - 3;
        let data = pattern(512 * 8, 7);
        let bufs = vec![
            IoBuf::from(data[..1000].to_vec()),
            IoBuf::from(data[1000..1024].to_vec()),
            IoBuf::from(data[1024..].to_vec()),
        ];
        let w = run(&mut *ch, BdevIo::write(start_block, 8, bufs, 42));
        assert_eq!(w.status, IoStatus::Success);
        assert_eq!(w.ctx, 42);
        let r = run(
            &mut *ch,
            BdevIo::read(
                start_block,
                8,
                vec![IoBuf::zeroed(512 * 3), IoBuf::zeroed(512 * 5)],
                1,
            ),
        );
        assert!(r.is_success());
        assert_eq!(r.data(), data);
        // a neighbouring block is untouched
        let r = run(
            &mut *ch,
            BdevIo::read(start_block + 8, 1, vec![IoBuf::zeroed(512)], 1),
        );
        assert!(r.data().iter().all(|&b| b == 0));
        let s = d.stats();
        assert_eq!(s.write.ops, 1);
        assert_eq!(s.write.bytes, 4096);
        assert_eq!(s.read.ops, 2);
        assert_eq!(s.read.bytes, 4096 + 512);
    }

    #[test]
    fn out_of_range_and_bad_buffers_are_rejected() {
        let d = MallocBdev::new("m1", 16, 4096).unwrap();
        let mut ch = d.open_channel().unwrap();
        let e = ch
            .submit(BdevIo::read(15, 2, vec![IoBuf::zeroed(8192)], 9))
            .unwrap_err();
        assert!(matches!(
            e.error,
            Error::OutOfRange {
                device_blocks: 16,
                ..
            }
        ));
        assert_eq!(e.io.ctx, 9);
        assert_eq!(e.io.bufs.len(), 1);
        let e = ch
            .submit(BdevIo::write(0, 1, vec![IoBuf::zeroed(4095)], 0))
            .unwrap_err();
        assert!(matches!(
            e.error,
            Error::BufferLength {
                expected: 4096,
                got: 4095
            }
        ));
        let e = ch.submit(BdevIo::unmap(16, 1, 0)).unwrap_err();
        assert!(matches!(e.error, Error::OutOfRange { .. }));
        assert_eq!(ch.in_flight(), 0);
        assert!(MallocBdev::new("x", 1, 1000).is_err());
        assert!(MallocBdev::new("x", 0, 512).is_err());
    }

    #[test]
    fn unmap_and_write_zeroes_read_back_zeroes() {
        let d = MallocBdev::new("m2", 64, 512).unwrap();
        let mut ch = d.open_channel().unwrap();
        let data = pattern(64 * 512, 3);
        assert!(run(
            &mut *ch,
            BdevIo::write(0, 64, vec![IoBuf::from(data.clone())], 0)
        )
        .is_success());
        assert!(run(&mut *ch, BdevIo::write_zeroes(4, 4, 0)).is_success());
        assert!(run(&mut *ch, BdevIo::unmap(20, 10, 0)).is_success());
        assert!(run(&mut *ch, BdevIo::flush(0)).is_success());
        let r = run(
            &mut *ch,
            BdevIo::read(0, 64, vec![IoBuf::zeroed(64 * 512)], 0),
        );
        let got = r.data();
        for blk in 0..64usize {
            let b = &got[blk * 512..(blk + 1) * 512];
            if (4..8).contains(&blk) || (20..30).contains(&blk) {
                assert!(b.iter().all(|&x| x == 0), "block {blk} not zero");
            } else {
                assert_eq!(b, &data[blk * 512..(blk + 1) * 512], "block {blk}");
            }
        }
        let s = d.stats();
        assert_eq!(s.write_zeroes.ops, 1);
        assert_eq!(s.unmap.bytes, 5120);
        assert_eq!(s.flush.ops, 1);
    }

    #[test]
    fn queue_depth_busy_then_poll() {
        let mut d = MallocBdev::new("m3", 8, 512).unwrap();
        d.set_queue_depth(2);
        let mut ch = d.open_channel().unwrap();
        ch.submit(BdevIo::flush(1)).unwrap();
        ch.submit(BdevIo::flush(2)).unwrap();
        let e = ch.submit(BdevIo::flush(3)).unwrap_err();
        assert!(matches!(e.error, Error::Busy));
        let mut done = Vec::new();
        assert_eq!(ch.poll(&mut done), 2);
        assert_eq!(done.iter().map(|i| i.ctx).collect::<Vec<_>>(), vec![1, 2]);
        ch.submit(e.io).unwrap();
        assert_eq!(ch.poll(&mut done), 1);
        assert_eq!(ch.poll(&mut done), 0);
    }

    #[test]
    fn channels_on_threads_share_data() {
        let d = Arc::new(MallocBdev::new("m4", 256, 4096).unwrap());
        let hs: Vec<_> = (0..2u8)
            .map(|t| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let mut ch = d.open_channel().unwrap();
                    for i in 0..64u64 {
                        let blk = i * 2 + u64::from(t);
                        let buf = vec![t + 1 + i as u8; 4096];
                        ch.submit(BdevIo::write(blk, 1, vec![IoBuf::from(buf)], blk))
                            .unwrap();
                    }
                    let mut done = Vec::new();
                    ch.poll(&mut done);
                    assert!(done.iter().all(|i| i.is_success()));
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let mut ch = d.open_channel().unwrap();
        for blk in 0..128u64 {
            let r = run(&mut *ch, BdevIo::read(blk, 1, vec![IoBuf::zeroed(4096)], 0));
            let want = (blk % 2) as u8 + 1 + (blk / 2) as u8;
            assert!(r.data().iter().all(|&b| b == want), "block {blk}");
        }
        assert_eq!(d.stats().write.ops, 128);
    }
}
