//! A null device: writes are discarded, reads return zeroes (or, with
//! `read_zeroes = false`, leave the buffers untouched, to measure the stack alone).

use std::sync::Arc;

use crate::sync_channel::{SyncBackend, SyncChannel};
use crate::{BdevIo, BlockDevice, Error, IoChannel, IoError, IoType, Stats, StatsRegistry};

const DEFAULT_DEPTH: usize = 1024;

/// A device that stores nothing.
pub struct NullBdev {
    name: String,
    inner: Arc<Inner>,
    stats: StatsRegistry,
    depth: usize,
}

struct Inner {
    block_size: u32,
    num_blocks: u64,
    read_zeroes: bool,
}

impl NullBdev {
    /// A null device of `num_blocks` blocks of `block_size` bytes; reads return zeroes.
    pub fn new(name: &str, num_blocks: u64, block_size: u32) -> Result<Self, Error> {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(Error::Config(
                "block size must be a power of two in 512..=65536",
            ));
        }
        if num_blocks == 0 {
            return Err(Error::Config("device must have at least one block"));
        }
        num_blocks
            .checked_mul(u64::from(block_size))
            .ok_or(Error::Config("device size overflows"))?;
        Ok(NullBdev {
            name: name.to_string(),
            inner: Arc::new(Inner {
                block_size,
                num_blocks,
                read_zeroes: true,
            }),
            stats: StatsRegistry::default(),
            depth: DEFAULT_DEPTH,
        })
    }

    /// A null device of `bytes` bytes (rounded down to whole blocks).
    pub fn with_size(name: &str, bytes: u64, block_size: u32) -> Result<Self, Error> {
        Self::new(name, bytes / u64::from(block_size.max(1)), block_size)
    }

    /// Whether reads fill the buffers with zeroes (default) or leave them as they are.
    /// Affects channels opened afterwards.
    pub fn set_read_zeroes(&mut self, on: bool) {
        self.inner = Arc::new(Inner {
            read_zeroes: on,
            ..*self.inner
        });
    }

    /// Set the per-channel queue depth.
    pub fn set_queue_depth(&mut self, depth: usize) {
        self.depth = depth.max(1);
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
        if t == IoType::Read && self.read_zeroes {
            for b in io.bufs.iter_mut() {
                b.fill(0);
            }
        }
        Ok(())
    }
}

impl BlockDevice for NullBdev {
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
    fn unmap_reads_zeroes(&self) -> bool {
        self.inner.read_zeroes
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
    use crate::IoBuf;

    #[test]
    fn discards_writes_reads_zeroes() {
        let d = NullBdev::with_size("n0", 1 << 30, 4096).unwrap();
        assert_eq!(d.num_blocks(), 262_144);
        let mut ch = d.open_channel().unwrap();
        ch.submit(BdevIo::write(5, 1, vec![IoBuf::from(vec![0xaa; 4096])], 0))
            .unwrap();
        ch.submit(BdevIo::read(5, 1, vec![IoBuf::from(vec![0x55; 4096])], 1))
            .unwrap();
        ch.submit(BdevIo::unmap(0, 10, 2)).unwrap();
        ch.submit(BdevIo::write_zeroes(0, 10, 3)).unwrap();
        let mut done = Vec::new();
        assert_eq!(ch.poll(&mut done), 4);
        assert!(done.iter().all(|io| io.is_success()));
        assert!(done[1].data().iter().all(|&b| b == 0));
        let e = ch
            .submit(BdevIo::read(262_144, 1, vec![IoBuf::zeroed(4096)], 0))
            .unwrap_err();
        assert!(matches!(e.error, Error::OutOfRange { .. }));
        let s = d.stats();
        assert_eq!(
            (s.read.ops, s.write.ops, s.unmap.ops, s.write_zeroes.ops),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn untouched_reads_when_asked() {
        let mut d = NullBdev::new("n1", 8, 512).unwrap();
        d.set_read_zeroes(false);
        let mut ch = d.open_channel().unwrap();
        ch.submit(BdevIo::read(0, 1, vec![IoBuf::from(vec![0x55; 512])], 1))
            .unwrap();
        let mut done = Vec::new();
        ch.poll(&mut done);
        assert!(done[0].data().iter().all(|&b| b == 0x55));
    }
}
