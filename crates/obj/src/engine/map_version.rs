//! What the engine knows of each pool's map version, for refusing object
//! I/O sent with a stale map (DAOS: `DER_STALE`).
//!
//! The versions come from outside the engine: the pool service replica the
//! engine process hosts (`poolsvc`) raises them as it applies map changes
//! ([`MapVersions::raise`], keyed by pool label, the service's key). The
//! management thread records which pool each open container handle is in;
//! the network threads check each object I/O request that carries a map
//! version ([`MapVersions::check`]) before routing it to a target.
//!
//! An engine without a pool service (a single engine, `obj engine` without
//! `--pool-svc-*`) knows no version and refuses nothing; a request without a
//! version (an old client) is not checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

#[derive(Default)]
struct Inner {
    /// Pool label → the newest map version this engine has seen.
    by_label: HashMap<String, u32>,
    /// Open container handle → its pool's label.
    by_coh: HashMap<u64, String>,
    /// Pool label → (map version, engine ranks — fault domains — with a
    /// target DOWN or EXCLUDED in that map): the DTX driver's "peer down".
    down: HashMap<String, (u32, Vec<u32>)>,
}

/// Shared by the engine's threads and the pool-service replica.
#[derive(Default)]
pub struct MapVersions {
    inner: RwLock<Inner>,
    refused: AtomicU64,
}

impl std::fmt::Debug for MapVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapVersions")
            .field("refused", &self.refused())
            .finish_non_exhaustive()
    }
}

impl MapVersions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Pool `label`'s map is at `version` (never lowered: applied state only
    /// moves forward, and a lower number seen late is old news).
    pub fn raise(&self, label: &str, version: u32) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let v = g.by_label.entry(label.to_string()).or_insert(0);
        if version > *v {
            tracing::debug!(pool = label, from = *v, to = version, "pool map version");
            *v = version;
        }
    }

    /// The newest map version known for pool `label`.
    pub fn get(&self, label: &str) -> Option<u32> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.by_label.get(label).copied()
    }

    pub(crate) fn open_coh(&self, coh: u64, label: &str) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.by_coh.insert(coh, label.to_string());
    }

    pub(crate) fn close_coh(&self, coh: u64) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.by_coh.remove(&coh);
    }

    /// A request on container handle `coh` carrying map version `client`:
    /// `Some(engine's version)` when the engine's map of that pool is newer
    /// (refuse), `None` to serve it (same or newer client map, unknown
    /// handle — the target answers that — or no version known).
    pub fn check(&self, coh: u64, client: u32) -> Option<u32> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let label = g.by_coh.get(&coh)?;
        let v = *g.by_label.get(label)?;
        if v > client {
            self.refused.fetch_add(1, Ordering::Relaxed);
            Some(v)
        } else {
            None
        }
    }

    /// Pool `label`'s map at `version` has the engines `ranks` DOWN or
    /// EXCLUDED (an older version than the one known is ignored).
    pub fn publish_down(&self, label: &str, version: u32, ranks: Vec<u32>) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let e = g.down.entry(label.to_string()).or_insert((0, Vec::new()));
        if version >= e.0 {
            *e = (version, ranks);
        }
    }

    /// The engines down in any pool's map; `None` when no map is known
    /// (an engine without a pool service).
    pub fn down_ranks(&self) -> Option<Vec<u32>> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        if g.down.is_empty() {
            return None;
        }
        let mut v: Vec<u32> = g
            .down
            .values()
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        Some(v)
    }

    /// Requests refused as stale so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_only_older_maps_of_the_handles_pool() {
        let m = MapVersions::new();
        m.open_coh(1, "a");
        m.open_coh(2, "b");
        // nothing known yet: served
        assert_eq!(m.check(1, 1), None);
        m.raise("a", 3);
        assert_eq!(m.check(1, 2), Some(3));
        assert_eq!(m.check(1, 3), None);
        assert_eq!(m.check(1, 4), None, "a newer client map is served");
        assert_eq!(m.check(2, 1), None, "pool b's version is not pool a's");
        assert_eq!(m.check(9, 1), None, "unknown handle: the target answers");
        m.raise("a", 2);
        assert_eq!(m.get("a"), Some(3), "never lowered");
        m.close_coh(1);
        assert_eq!(m.check(1, 1), None);
        assert_eq!(m.refused(), 1);
    }

    #[test]
    fn down_ranks_from_the_newest_maps() {
        let m = MapVersions::new();
        assert_eq!(m.down_ranks(), None, "no map: no opinion");
        m.publish_down("a", 2, vec![1]);
        m.publish_down("b", 5, vec![]);
        assert_eq!(m.down_ranks(), Some(vec![1]));
        m.publish_down("a", 1, vec![0, 2]);
        assert_eq!(m.down_ranks(), Some(vec![1]), "an older map is ignored");
        m.publish_down("a", 3, vec![]);
        assert_eq!(m.down_ranks(), Some(vec![]));
    }
}
