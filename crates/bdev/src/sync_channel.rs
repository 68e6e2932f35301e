//! A channel for devices that finish an I/O inside `submit` (malloc, null): the
//! work is done at once and the completion is queued until the next `poll`, so
//! callers see the same asynchronous contract as with a real device (SPDK's malloc
//! bdev does the same).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::{
    validate, BdevIo, Error, IoChannel, IoError, IoStatus, IoType, Rejected, Stats, StatsCell,
};

/// What a synchronous device does with an I/O.
pub(crate) trait SyncBackend: Send + Sync + 'static {
    fn block_size(&self) -> u32;
    fn num_blocks(&self) -> u64;
    fn supported(&self, t: IoType) -> bool;
    fn execute(&self, t: IoType, io: &mut BdevIo) -> Result<(), IoError>;
}

pub(crate) struct SyncChannel<B: SyncBackend> {
    backend: Arc<B>,
    done: VecDeque<BdevIo>,
    depth: usize,
    stats: Arc<StatsCell>,
}

impl<B: SyncBackend> SyncChannel<B> {
    pub(crate) fn new(backend: Arc<B>, depth: usize, stats: Arc<StatsCell>) -> Self {
        SyncChannel {
            backend,
            done: VecDeque::with_capacity(depth),
            depth,
            stats,
        }
    }
}

impl<B: SyncBackend> IoChannel for SyncChannel<B> {
    #[allow(clippy::result_large_err)]
    fn submit(&mut self, mut io: BdevIo) -> Result<(), Rejected> {
        let t = match validate(&io, self.backend.block_size(), self.backend.num_blocks()) {
            Ok(t) => t,
            Err(error) => return Err(Rejected { error, io }),
        };
        if !self.backend.supported(t) {
            return Err(Rejected {
                error: Error::Unsupported(t),
                io,
            });
        }
        if self.done.len() >= self.depth {
            return Err(Rejected {
                error: Error::Busy,
                io,
            });
        }
        let r = self.backend.execute(t, &mut io);
        let bytes = io.num_blocks * u64::from(self.backend.block_size());
        self.stats.record(t, bytes, r.is_ok());
        io.status = match r {
            Ok(()) => IoStatus::Success,
            Err(e) => IoStatus::Failed(e),
        };
        self.done.push_back(io);
        Ok(())
    }

    fn poll(&mut self, done: &mut Vec<BdevIo>) -> usize {
        let n = self.done.len();
        done.extend(self.done.drain(..));
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn stats(&self) -> Stats {
        self.stats.snapshot()
    }
}
