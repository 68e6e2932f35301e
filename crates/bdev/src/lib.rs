//! # bdev — block devices (SPDK's bdev model)
//!
//! Owns: the block-device trait with asynchronous submit and polled completion,
//! scatter-gather read/write, flush, write-zeroes, unmap and stats, and the
//! malloc (RAM), null and file (io_uring) devices.
//!
//! Depends on nothing inside dpustack.
