//! # bdev — block devices (SPDK's bdev model)
//!
//! Owns: the [`BlockDevice`] trait (a device: geometry, supported I/O types, stats,
//! and per-thread [`IoChannel`]s), the [`BdevIo`] request with its scatter-gather
//! buffers, asynchronous submit with polled completion (no callbacks), and the
//! devices: [`malloc::MallocBdev`] (RAM), [`null::NullBdev`] (discard / zeroes) and,
//! with the default `uring` feature, `file::FileBdev` (a regular file or block
//! device through io_uring, O_DIRECT optional, bounded queue depth), plus
//! [`inject::ErrorInjectBdev`] (failure injection around any device) and
//! [`spec::create`] (`malloc:64M`, `null:1G`, `file:PATH,size=..,direct,qd=..`).
//!
//! Does not: know NVMe (the NVMe-oF target maps [`IoError`]s to NVMe statuses), split
//! I/O across devices, or keep caches.
//!
//! ## Life of an I/O
//! 1. Open one [`IoChannel`] per polling thread with [`BlockDevice::open_channel`].
//! 2. Build a [`BdevIo`] (e.g. [`BdevIo::read`]) that *owns* its buffers (see
//!    [`buf`] for the ownership model) and a caller tag `ctx`.
//! 3. [`IoChannel::submit`] it. Caller mistakes (range, buffer length, unsupported
//!    type) and a full queue ([`Error::Busy`]) come back at once as [`Rejected`],
//!    which hands the I/O back.
//! 4. Call [`IoChannel::poll`] from the same thread's poll loop; completed I/Os
//!    (buffers included) are appended to the caller's vector with
//!    [`BdevIo::status`] set. Reuse them for the next I/O: steady state allocates
//!    nothing.

pub mod buf;
#[cfg(feature = "uring")]
pub mod file;
pub mod inject;
pub mod malloc;
pub mod null;
pub mod spec;
mod stats;
mod sync_channel;

use std::sync::Arc;

pub use buf::{AlignedBuf, ExternalBuf, IoBuf};
pub use stats::{OpStats, Stats, StatsCell};

/// The operation an I/O performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoType {
    /// Read `num_blocks` from `offset_blocks` into the buffers.
    Read,
    /// Write the buffers to `num_blocks` at `offset_blocks`.
    Write,
    /// Make previously completed writes durable (range is advisory; `0, 0` = all).
    Flush,
    /// Write zeroes to the range (no buffers).
    WriteZeroes,
    /// Deallocate the range (no buffers); it reads back as zeroes afterwards.
    Unmap,
}

impl IoType {
    /// All I/O types.
    pub const ALL: [IoType; 5] = [
        IoType::Read,
        IoType::Write,
        IoType::Flush,
        IoType::WriteZeroes,
        IoType::Unmap,
    ];
    /// Whether the I/O carries data buffers.
    pub fn has_data(self) -> bool {
        matches!(self, IoType::Read | IoType::Write)
    }
}

/// Why a completed I/O failed (in [`BdevIo::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum IoError {
    /// The device returned an OS error (errno).
    #[error("device I/O error (errno {0})")]
    Os(i32),
    /// The device transferred fewer bytes than asked.
    #[error("short transfer: {done} of {expected} bytes")]
    Short { expected: u64, done: u64 },
    /// The I/O was aborted (channel closed while it was queued).
    #[error("aborted")]
    Aborted,
}

/// The state of an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IoStatus {
    /// Not submitted yet, or in flight.
    #[default]
    Pending,
    /// Completed successfully.
    Success,
    /// Completed with an error.
    Failed(IoError),
}

/// A block I/O request: what to do, where, the data buffers it owns, and a caller tag.
#[derive(Debug, Default)]
pub struct BdevIo {
    /// The operation.
    pub io_type: Option<IoType>,
    /// First block.
    pub offset_blocks: u64,
    /// Number of blocks.
    pub num_blocks: u64,
    /// Scatter-gather buffers (Read/Write only), filled or drained in order; their
    /// lengths must add up to exactly `num_blocks * block_size`.
    pub bufs: Vec<IoBuf>,
    /// Caller's tag (request slot, command id, ...), untouched by the device.
    pub ctx: u64,
    /// Set by the device on completion.
    pub status: IoStatus,
}

impl BdevIo {
    fn new(t: IoType, offset_blocks: u64, num_blocks: u64, bufs: Vec<IoBuf>, ctx: u64) -> Self {
        BdevIo {
            io_type: Some(t),
            offset_blocks,
            num_blocks,
            bufs,
            ctx,
            status: IoStatus::Pending,
        }
    }
    /// Read into `bufs`.
    pub fn read(offset_blocks: u64, num_blocks: u64, bufs: Vec<IoBuf>, ctx: u64) -> Self {
        Self::new(IoType::Read, offset_blocks, num_blocks, bufs, ctx)
    }
    /// Write from `bufs`.
    pub fn write(offset_blocks: u64, num_blocks: u64, bufs: Vec<IoBuf>, ctx: u64) -> Self {
        Self::new(IoType::Write, offset_blocks, num_blocks, bufs, ctx)
    }
    /// Flush the whole device.
    pub fn flush(ctx: u64) -> Self {
        Self::new(IoType::Flush, 0, 0, Vec::new(), ctx)
    }
    /// Write zeroes.
    pub fn write_zeroes(offset_blocks: u64, num_blocks: u64, ctx: u64) -> Self {
        Self::new(
            IoType::WriteZeroes,
            offset_blocks,
            num_blocks,
            Vec::new(),
            ctx,
        )
    }
    /// Unmap (deallocate).
    pub fn unmap(offset_blocks: u64, num_blocks: u64, ctx: u64) -> Self {
        Self::new(IoType::Unmap, offset_blocks, num_blocks, Vec::new(), ctx)
    }
    /// Sum of the buffer lengths.
    pub fn buf_len(&self) -> u64 {
        self.bufs.iter().map(|b| b.len() as u64).sum()
    }
    /// Whether the I/O completed successfully.
    pub fn is_success(&self) -> bool {
        self.status == IoStatus::Success
    }
    /// Copy the buffers' contents into one vector (a convenience for tests and tools).
    pub fn data(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.buf_len() as usize);
        for b in &self.bufs {
            v.extend_from_slice(b);
        }
        v
    }
}

/// Errors from the block-device API. Submit-time errors are caller mistakes or
/// resource limits; device failures arrive in [`BdevIo::status`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The block range is beyond the end of the device.
    #[error("blocks {offset_blocks}+{num_blocks} out of range (device has {device_blocks})")]
    OutOfRange {
        offset_blocks: u64,
        num_blocks: u64,
        device_blocks: u64,
    },
    /// The buffers do not add up to `num_blocks * block_size`.
    #[error("buffers hold {got} bytes, the I/O needs {expected}")]
    BufferLength { expected: u64, got: u64 },
    /// The I/O has no type set.
    #[error("I/O type not set")]
    NoIoType,
    /// The device does not support this I/O type.
    #[error("{0:?} not supported by this device")]
    Unsupported(IoType),
    /// The channel's queue is full; poll and resubmit.
    #[error("queue full")]
    Busy,
    /// Bad device parameters (size, block size, queue depth).
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// Opening or sizing the backing file failed.
    #[error("{what} {path}: {source}")]
    Os {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// io_uring cannot be used here (kernel without it, disabled by sysctl, seccomp).
    #[error("io_uring unavailable: {0} (check /proc/sys/kernel/io_uring_disabled, seccomp, kernel >= 5.6)")]
    UringUnavailable(std::io::Error),
}

/// A rejected submit: why, and the I/O handed back untouched.
#[derive(Debug)]
pub struct Rejected {
    pub error: Error,
    pub io: BdevIo,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Rejected {}

/// A block device. Shared between threads (`Arc<dyn BlockDevice>`); I/O goes through
/// per-thread channels.
pub trait BlockDevice: Send + Sync {
    /// Device name.
    fn name(&self) -> &str;
    /// Logical block size in bytes.
    fn block_size(&self) -> u32;
    /// Number of logical blocks.
    fn num_blocks(&self) -> u64;
    /// Size in bytes.
    fn size_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size())
    }
    /// Buffer start alignment that avoids a bounce copy (1 = none needed).
    fn buf_align(&self) -> usize {
        1
    }
    /// Whether the device accepts this I/O type.
    fn io_type_supported(&self, t: IoType) -> bool;
    /// Whether deallocated blocks read back as zeroes (NVMe DLFEAT read behaviour).
    fn unmap_reads_zeroes(&self) -> bool {
        true
    }
    /// Open an I/O channel for the calling thread.
    fn open_channel(&self) -> Result<Box<dyn IoChannel>, Error>;
    /// Totals over all channels ever opened.
    fn stats(&self) -> Stats;
}

/// A per-thread queue to a device. Not shared: one poller owns it.
pub trait IoChannel: Send {
    /// Queue an I/O. On `Err` the I/O is handed back in [`Rejected`].
    // Handing the I/O back by value is the point; boxing would allocate on the Busy path.
    #[allow(clippy::result_large_err)]
    fn submit(&mut self, io: BdevIo) -> Result<(), Rejected>;
    /// Make progress (submit queued work, reap completions) and append completed
    /// I/Os to `done`. Returns how many were appended. Never blocks.
    fn poll(&mut self, done: &mut Vec<BdevIo>) -> usize;
    /// [`IoChannel::poll`] for a caller with nothing else to do: while I/Os
    /// are in flight and none has completed, it waits (in the kernel where
    /// the device can, else yielding the CPU between polls) instead of
    /// spinning. Returns how many were appended (0 only with nothing in flight).
    fn wait(&mut self, done: &mut Vec<BdevIo>) -> usize {
        loop {
            let n = self.poll(done);
            if n > 0 || self.in_flight() == 0 {
                return n;
            }
            std::thread::yield_now();
        }
    }
    /// I/Os submitted and not yet returned by `poll`.
    fn in_flight(&self) -> usize;
    /// Maximum I/Os in flight before `submit` returns [`Error::Busy`].
    fn queue_depth(&self) -> usize;
    /// This channel's stats.
    fn stats(&self) -> Stats;
}

/// Checks an I/O against a device's geometry; every device calls this at submit.
pub fn validate(io: &BdevIo, block_size: u32, device_blocks: u64) -> Result<IoType, Error> {
    let t = io.io_type.ok_or(Error::NoIoType)?;
    let end = io.offset_blocks.checked_add(io.num_blocks);
    let in_range = matches!(end, Some(e) if e <= device_blocks);
    if !in_range {
        return Err(Error::OutOfRange {
            offset_blocks: io.offset_blocks,
            num_blocks: io.num_blocks,
            device_blocks,
        });
    }
    if t.has_data() {
        let expected = io.num_blocks.saturating_mul(u64::from(block_size));
        let got = io.buf_len();
        if expected != got {
            return Err(Error::BufferLength { expected, got });
        }
    }
    Ok(t)
}

/// Shared device-level stats: one cell per open channel, summed on demand
/// (control plane). Cells of closed channels are folded into `retired` so that
/// opening and closing channels does not grow the list.
#[derive(Debug, Default)]
pub(crate) struct StatsRegistry {
    inner: std::sync::Mutex<(Vec<Arc<StatsCell>>, Stats)>,
}

impl StatsRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Arc<StatsCell>>, Stats)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Fold cells that only the registry still holds (their channel is gone).
    fn prune(g: &mut (Vec<Arc<StatsCell>>, Stats)) {
        let (cells, retired) = g;
        cells.retain(|c| {
            if Arc::strong_count(c) == 1 {
                *retired = *retired + c.snapshot();
                false
            } else {
                true
            }
        });
    }
    pub(crate) fn register(&self) -> Arc<StatsCell> {
        let c = Arc::new(StatsCell::default());
        let mut g = self.lock();
        Self::prune(&mut g);
        g.0.push(c.clone());
        c
    }
    pub(crate) fn total(&self) -> Stats {
        let mut g = self.lock();
        Self::prune(&mut g);
        g.0.iter().fold(g.1, |acc, c| acc + c.snapshot())
    }
    #[cfg(test)]
    pub(crate) fn open_cells(&self) -> usize {
        self.lock().0.len()
    }
}

/// Iterate the `(buffer, range in device bytes)` pieces of a data I/O.
pub(crate) fn for_each_piece(
    bufs: &mut [IoBuf],
    start_byte: u64,
    mut f: impl FnMut(&mut [u8], u64),
) {
    let mut pos = start_byte;
    for b in bufs.iter_mut() {
        let n = b.len() as u64;
        f(b, pos);
        pos += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_survive_closed_channels_without_growing() {
        let r = StatsRegistry::default();
        for _ in 0..100 {
            let c = r.register();
            c.record(IoType::Read, 512, true);
        }
        let live = r.register();
        live.record(IoType::Write, 4096, true);
        live.record(IoType::Write, 0, false);
        let t = r.total();
        assert_eq!(
            t.read,
            OpStats {
                ops: 100,
                bytes: 51_200
            }
        );
        assert_eq!(
            t.write,
            OpStats {
                ops: 1,
                bytes: 4096
            }
        );
        assert_eq!(t.errors, 1);
        assert_eq!(r.open_cells(), 1);
    }

    #[test]
    fn validate_rules() {
        let io = BdevIo::read(10, 2, vec![IoBuf::zeroed(512), IoBuf::zeroed(512)], 0);
        assert_eq!(validate(&io, 512, 12).unwrap(), IoType::Read);
        assert!(matches!(
            validate(&io, 512, 11),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            validate(&io, 4096, 100),
            Err(Error::BufferLength {
                expected: 8192,
                got: 1024
            })
        ));
        let io = BdevIo::unmap(u64::MAX, 2, 0);
        assert!(matches!(
            validate(&io, 512, 100),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            validate(&BdevIo::default(), 512, 100),
            Err(Error::NoIoType)
        ));
        assert_eq!(
            validate(&BdevIo::flush(0), 512, 100).unwrap(),
            IoType::Flush
        );
    }
}
