//! The engine's default [`StoreBackend`]: the versioned store ([`crate::vos`])
//! over an io_uring file bdev.

use std::path::Path;

use super::backend::StoreBackend;
use crate::types::{ObjectStore, StoreResult};

/// The engine's default backend: each shard is a [`crate::vos::Vos`] whose
/// index is `dir/index.redb` and whose large values live on an io_uring
/// file bdev `dir/data.bdev` of the shard's size (group commit: the target
/// calls `commit` once per batch).
#[derive(Debug, Clone)]
pub struct VosBackend {
    /// Bdev block size.
    pub block_size: u32,
    /// Index page cache per shard (bytes).
    pub cache_bytes: usize,
    /// Open the data bdev with O_DIRECT (falls back to the page cache, with a
    /// warning, where the file system refuses it, e.g. tmpfs). Large values
    /// then go from the store's aligned staging buffer to the device: no copy
    /// into the page cache and no writeback of it at the commit's flush
    /// (docs/obj.md, "The durable write path": measured, not the default).
    /// Default from `DPUSTACK_OBJ_DIRECT` (`1` on; unset: off).
    pub direct: bool,
    /// [`crate::vos::VosConfig::commit_pipeline`]: a batch with bdev values
    /// commits while the target executes the next one. Default from
    /// `DPUSTACK_OBJ_COMMIT_PIPELINE` (`1` on, `0` off; unset: off).
    pub commit_pipeline: bool,
}

impl Default for VosBackend {
    fn default() -> Self {
        VosBackend {
            block_size: 4096,
            // a maximum, filled as pages are read (DAOS keeps the VOS index in
            // SCM/DRAM whole): small values live inline in
            // the index, and a miss is a pread plus an allocation per page
            cache_bytes: 256 << 20,
            // off: with the store's synchronous per-value I/O, O_DIRECT lost
            // reads (no page cache) and small writes (docs/obj.md)
            direct: std::env::var("DPUSTACK_OBJ_DIRECT")
                .map(|v| v == "1")
                .unwrap_or(false),
            commit_pipeline: std::env::var("DPUSTACK_OBJ_COMMIT_PIPELINE")
                .map(|v| v == "1")
                .unwrap_or(false),
        }
    }
}

impl StoreBackend for VosBackend {
    fn open(&self, dir: &Path, size: u64, create: bool) -> StoreResult<Box<dyn ObjectStore>> {
        use crate::types::StoreError;
        use crate::vos::{Vos, VosConfig};
        use bdev::file::{FileBdev, FileOptions};
        if create {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Bdev(format!("{}: {e}", dir.display())))?;
        } else if !dir.is_dir() {
            return Err(StoreError::Bdev(format!(
                "pool shard {} is missing",
                dir.display()
            )));
        }
        let name = dir
            .file_name()
            .map_or_else(|| "shard".into(), |n| n.to_string_lossy().into_owned());
        let open = |direct: bool| {
            FileBdev::open(
                &name,
                dir.join("data.bdev"),
                FileOptions {
                    block_size: self.block_size,
                    size: create.then_some(size),
                    direct,
                    ..Default::default()
                },
            )
        };
        let bdev = match open(self.direct) {
            Err(e) if self.direct => {
                let b = open(false).map_err(|e| StoreError::Bdev(e.to_string()))?;
                tracing::warn!(shard = %dir.display(), error = %e, "O_DIRECT refused: the data bdev goes through the page cache");
                b
            }
            r => r.map_err(|e| StoreError::Bdev(e.to_string()))?,
        };
        let cfg = VosConfig {
            auto_commit: false,
            cache_bytes: self.cache_bytes,
            commit_pipeline: self.commit_pipeline,
            ..Default::default()
        };
        let v = Vos::open(dir.join("index.redb"), std::sync::Arc::new(bdev), cfg)?;
        Ok(Box::new(v))
    }

    fn name(&self) -> &'static str {
        "vos (redb index + io_uring file bdev)"
    }
}
