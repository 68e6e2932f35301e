//! How a target opens its shard of a pool: a [`StoreBackend`] makes an
//! [`ObjectStore`] in a directory. The engine runs on the versioned store
//! (`vos`); tests may plug in another implementation of the trait.

use std::io;
use std::path::Path;

use crate::types::{ObjectStore, StoreResult};

/// Opens and destroys pool shards.
pub trait StoreBackend: Send + Sync + 'static {
    /// Opens the shard in `dir`, creating it (with `size` bytes of space) when
    /// `create`. Durability: changes become durable at `commit`.
    fn open(&self, dir: &Path, size: u64, create: bool) -> StoreResult<Box<dyn ObjectStore>>;

    /// Deletes a closed shard's files.
    fn destroy(&self, dir: &Path) -> io::Result<()> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// A name for logs and `pool query`.
    fn name(&self) -> &'static str;
}
