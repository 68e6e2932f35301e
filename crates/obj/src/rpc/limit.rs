//! The engine's bound on RPC clients: connections over TCP and RDMA together.
//! Past [`ClientLimit::max`] a new TCP connection is closed at accept and an RDMA
//! connection request is rejected; both are counted ([`ClientLimit::refused`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Default bound on connected clients (as the JSON-RPC server's and NVMe-oF's).
pub const DEFAULT_MAX_CLIENTS: usize = 4096;

/// Connected clients, their bound, and the refusals (shared by the engine's
/// network threads and read by the management plane).
#[derive(Debug)]
pub struct ClientLimit {
    max: AtomicUsize,
    clients: AtomicUsize,
    refused: AtomicU64,
}

impl Default for ClientLimit {
    fn default() -> Self {
        ClientLimit::new(DEFAULT_MAX_CLIENTS)
    }
}

impl ClientLimit {
    /// A bound of `max` clients (0: none is admitted).
    pub fn new(max: usize) -> ClientLimit {
        ClientLimit {
            max: AtomicUsize::new(max),
            clients: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Sets the bound (clients already connected stay).
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Relaxed);
    }

    pub fn max(&self) -> usize {
        self.max.load(Relaxed)
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.clients.load(Relaxed)
    }

    /// Connections refused because the bound was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Admits one more client if the bound allows (true), else counts a refusal.
    pub fn try_admit(&self) -> bool {
        let max = self.max();
        let ok = self
            .clients
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_ok();
        if !ok {
            self.refused.fetch_add(1, Relaxed);
        }
        ok
    }

    /// A client admitted by [`ClientLimit::try_admit`] went.
    pub fn release(&self) {
        let _ = self
            .clients
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_bound_and_counts_refusals() {
        let l = ClientLimit::new(2);
        assert!(l.try_admit() && l.try_admit());
        assert!(!l.try_admit());
        assert_eq!((l.clients(), l.refused()), (2, 1));
        l.release();
        assert!(l.try_admit());
        assert!(!l.try_admit());
        assert_eq!((l.clients(), l.refused()), (2, 2));
        l.set_max(3);
        assert!(l.try_admit());
        l.release();
        l.release();
        l.release();
        l.release();
        assert_eq!(l.clients(), 0);
    }
}
