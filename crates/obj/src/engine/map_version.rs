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
//!
//! **Lease (the fence)**: an engine cut off from the pool service keeps the
//! map it had, and so may a client that did not talk to anyone else: without
//! more, it would serve that client data that missed writes the others
//! acknowledged under a newer map. With a lease ([`MapVersions::enable_lease`],
//! set by the pool-service replica the engine hosts) the engine serves
//! versioned object I/O only while its lease is valid: renewed
//! ([`MapVersions::renew_lease`]) by each answer of a pool-service leader that
//! confirmed its leadership with a quorum (a linearizable read) and sent the
//! current map versions, counted from when the request was *sent*. A lapsed
//! lease refuses every versioned request as a stale map (with the engine's
//! version, which is then not newer than the client's: the client goes to
//! another replica); the next renewal — a fetch of the current map — lifts
//! it. Not valid before the first renewal (a restarted engine fetches the map
//! first). Time is passed in ([`MapVersions::check_at`]): the rule is tested
//! on an injected clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::placement::PoolMap;

#[derive(Default)]
struct Inner {
    /// Pool label → the newest map version this engine has seen.
    by_label: HashMap<String, u32>,
    /// Open container handle → its pool's label.
    by_coh: HashMap<u64, String>,
    /// Pool label → (map version, engine ranks — fault domains — with a
    /// target DOWN or EXCLUDED in that map): the DTX driver's "peer down".
    down: HashMap<String, (u32, Vec<u32>)>,
    /// Pool label → its newest map: a DTX leader places the write with it
    /// and refuses a client's participant list that disagrees.
    maps: HashMap<String, Arc<PoolMap>>,
    /// The fence: `None` when the engine has no lease (no pool service).
    lease: Option<Lease>,
}

/// The engine's lease on its map (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    duration: Duration,
    /// `None` until the first renewal.
    valid_until: Option<Instant>,
}

/// Shared by the engine's threads and the pool-service replica.
pub struct MapVersions {
    inner: RwLock<Inner>,
    refused: AtomicU64,
    fenced: AtomicU64,
    /// This engine instance's incarnation (see [`MapVersions::incarnation`]).
    incarnation: u64,
}

impl Default for MapVersions {
    fn default() -> Self {
        MapVersions {
            inner: RwLock::default(),
            refused: AtomicU64::new(0),
            fenced: AtomicU64::new(0),
            incarnation: new_incarnation(),
        }
    }
}

/// A number another engine instance (a restarted process, or another
/// engine in the same process) does not draw: wall-clock nanoseconds, the
/// process id and a per-process counter mixed (SWIM's / DAOS's incarnation
/// number, here not persisted: a restart draws a new one).
fn new_incarnation() -> u64 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = ns
        ^ u64::from(std::process::id()).rotate_left(40)
        ^ SEQ.fetch_add(1, Ordering::Relaxed).rotate_left(20);
    // splitmix64's finalizer: nearby inputs give unrelated numbers; never 0
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

impl std::fmt::Debug for MapVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapVersions")
            .field("refused", &self.refused())
            .field("fenced", &self.fenced())
            .finish_non_exhaustive()
    }
}

impl MapVersions {
    pub fn new() -> Self {
        Self::default()
    }

    /// This engine instance's incarnation: drawn when the engine starts,
    /// answered to pings (`Reply::Pong`) and sent with lease requests. The
    /// pool service that sees a rank's incarnation change marks it DOWN (a
    /// restarted engine missed writes: it is reintegrated, never trusted).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
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
    ///
    /// With a lease, also refused (`Some(engine's version, 0 if none)`)
    /// while the lease is not valid: see the module doc.
    pub fn check(&self, coh: u64, client: u32) -> Option<u32> {
        self.check_at(coh, client, None)
    }

    /// [`Self::check`] at `now` (`None`: the clock is read only when the
    /// engine has a lease).
    pub fn check_at(&self, coh: u64, client: u32, now: Option<Instant>) -> Option<u32> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let label = g.by_coh.get(&coh)?;
        let known = g.by_label.get(label).copied();
        if let Some(l) = &g.lease {
            let now = now.unwrap_or_else(Instant::now);
            if l.valid_until.is_none_or(|u| now >= u) {
                self.fenced.fetch_add(1, Ordering::Relaxed);
                return Some(known.unwrap_or(0));
            }
        }
        let v = known?;
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

    /// Pool `label`'s map (the pool-service replica publishes every applied
    /// one; an older version than the one known is ignored).
    pub fn publish_map(&self, label: &str, map: PoolMap) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match g.maps.get(label) {
            Some(m) if m.version() > map.version() => {}
            _ => {
                g.maps.insert(label.to_string(), Arc::new(map));
            }
        }
    }

    /// Pool `label`'s newest published map (`None`: none, e.g. an engine
    /// without a pool service).
    pub fn pool_map(&self, label: &str) -> Option<Arc<PoolMap>> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.maps.get(label).cloned()
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

    /// Requests refused as stale so far (fenced ones not counted).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Requests refused because the lease was not valid, so far.
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Serve versioned object I/O only under a lease of `duration` (not
    /// valid until the first [`Self::renew_lease`]). Called once, by the
    /// pool-service replica the engine hosts.
    pub fn enable_lease(&self, duration: Duration) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.lease = Some(Lease {
            duration,
            valid_until: None,
        });
    }

    /// A pool-service leader answered a lease request sent at `sent_at`
    /// with the current map `versions` (pool label → version), after
    /// confirming its leadership: the versions are raised, then the lease is
    /// valid until `sent_at + duration` (never shortened). An answer that
    /// took longer than the lease renews nothing that is still in the future.
    pub fn renew_lease<'a>(
        &self,
        sent_at: Instant,
        versions: impl IntoIterator<Item = (&'a str, u32)>,
    ) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        for (label, version) in versions {
            let v = g.by_label.entry(label.to_string()).or_insert(0);
            if version > *v {
                tracing::debug!(
                    pool = label,
                    from = *v,
                    to = version,
                    "pool map version (lease)"
                );
                *v = version;
            }
        }
        if let Some(l) = &mut g.lease {
            let until = sent_at + l.duration;
            if l.valid_until.is_none_or(|u| until > u) {
                l.valid_until = Some(until);
            }
        }
    }

    /// Whether the engine has a lease and it is valid at `now` (`None`: no
    /// lease, nothing fenced).
    pub fn lease_valid(&self, now: Instant) -> Option<bool> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.lease.map(|l| l.valid_until.is_some_and(|u| now < u))
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
    fn lease_fences_versioned_io_until_renewed() {
        let m = MapVersions::new();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        m.open_coh(1, "a");
        m.raise("a", 3);
        // no lease: only older maps are refused, whatever the time
        assert_eq!(m.check_at(1, 3, Some(ms(10_000))), None);
        assert_eq!(m.lease_valid(ms(0)), None);
        m.enable_lease(Duration::from_millis(450));
        // not valid before the first renewal: refused with the engine's
        // version even for a current (or newer) client map
        assert_eq!(m.lease_valid(ms(0)), Some(false));
        assert_eq!(m.check_at(1, 3, Some(ms(0))), Some(3));
        assert_eq!(m.check_at(1, 9, Some(ms(0))), Some(3));
        assert_eq!(
            m.check_at(7, 3, Some(ms(0))),
            None,
            "unknown handle: the target answers"
        );
        // a renewal sent at 100 ms: valid until 550 ms
        m.renew_lease(ms(100), [("a", 3)]);
        assert_eq!(m.check_at(1, 3, Some(ms(120))), None);
        assert_eq!(m.check_at(1, 3, Some(ms(549))), None);
        assert_eq!(
            m.check_at(1, 2, Some(ms(549))),
            Some(3),
            "a stale map still is"
        );
        assert_eq!(m.check_at(1, 3, Some(ms(550))), Some(3), "lapsed");
        assert_eq!(m.lease_valid(ms(550)), Some(false));
        // an older renewal (an answer overtaken) does not shorten it
        m.renew_lease(ms(300), []);
        m.renew_lease(ms(200), []);
        assert_eq!(m.check_at(1, 3, Some(ms(749))), None);
        assert_eq!(m.check_at(1, 3, Some(ms(750))), Some(3));
        // cut off for a while; the fetch that lifts the fence brings the
        // newer map: the old client is refused with it, the new one served
        m.renew_lease(ms(2000), [("a", 5), ("b", 1)]);
        assert_eq!(m.check_at(1, 3, Some(ms(2100))), Some(5));
        assert_eq!(m.check_at(1, 5, Some(ms(2100))), None);
        assert_eq!(m.get("b"), Some(1));
        // a renewal whose answer came after its whole lease lifts nothing
        assert_eq!(m.check_at(1, 5, Some(ms(3000))), Some(5));
        m.renew_lease(ms(2400), []);
        assert_eq!(m.check_at(1, 5, Some(ms(3000))), Some(5));
        assert_eq!(m.fenced(), 6);
        assert_eq!(m.refused(), 2);
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

    #[test]
    fn pool_maps_only_move_forward() {
        let m = MapVersions::new();
        assert!(m.pool_map("a").is_none());
        let mut map = PoolMap::uniform(3, 1);
        let v1 = map.clone();
        map.set_domain_state(2, crate::placement::TargetState::Down)
            .unwrap();
        m.publish_map("a", map.clone());
        m.publish_map("a", v1);
        assert_eq!(*m.pool_map("a").unwrap(), map, "an older map is ignored");
    }
}
