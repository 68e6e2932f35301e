//! The CM backend seam: what the public API ([`super::CmDevice`],
//! [`super::CmId`], [`super::EventChannel`]) needs from the connection manager of
//! one device, chosen per device by its verbs provider when the device is opened.
//!
//! * [`super::own::OwnCm`]: our own CM, the sans-IO [`crate::CmEndpoint`]
//!   exchanging CM MADs over QP1 of a soft device (the only provider that gives
//!   QP1 to user space: `verbs::gsi::create_gsi_qp`).
//! * (later) a librdmacm backend for kernel devices: each call maps to the
//!   `rdma_*` call of the same name on its own `rdma_cm_id`s; the kernel CM moves
//!   the QPs and sends the MADs; its events are translated into [`CmEvent`]s.
//!
//! The public API never sees which one serves a device: it calls these methods
//! under the device's mutex (one dynamic call per CM call; nothing here is on
//! a datapath), then wakes waiters from `pending_events`/`pending_for`.
//! Errors are the ones librdmacm's calls fail with.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use verbs::Qp;
use wire::mad::PortSpace;

use super::Result;
use crate::{ChannelId, CmEvent, CmIdHandle, CmOption, CmStats, ConnParam, Ece, RouteHint};

/// Blocks the device's poller thread, without the device mutex, until input may
/// have arrived or the time (ms) has passed.
pub(crate) type Waiter = Arc<dyn Fn(i32) + Send + Sync>;

/// The connection manager of one device (librdmacm's calls on its ids).
pub(crate) trait CmBackend: Send {
    // ---- ids and channels
    fn create_channel(&mut self) -> ChannelId;
    fn create_id(&mut self, channel: Option<ChannelId>, ps: PortSpace) -> CmIdHandle;
    /// `rdma_destroy_id` (the backend lets go of the id's QP too).
    fn destroy_id(&mut self, now: Instant, h: CmIdHandle) -> Result<()>;
    fn migrate_id(&mut self, h: CmIdHandle, channel: Option<ChannelId>) -> Result<()>;
    fn port_space(&self, h: CmIdHandle) -> Result<PortSpace>;
    fn local_addr(&self, h: CmIdHandle) -> Option<SocketAddr>;
    fn peer_addr(&self, h: CmIdHandle) -> Option<SocketAddr>;
    fn set_option(&mut self, h: CmIdHandle, opt: CmOption) -> Result<()>;
    fn set_local_ece(&mut self, h: CmIdHandle, ece: Ece) -> Result<()>;
    fn remote_ece(&self, h: CmIdHandle) -> Result<Ece>;

    // ---- addresses
    fn bind_addr(&mut self, h: CmIdHandle, addr: SocketAddr) -> Result<()>;
    /// `rdma_resolve_addr`; `route` is what the host's routing table says
    /// (a backend over the kernel CM may ignore it: the kernel asks itself).
    fn resolve_addr(
        &mut self,
        h: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
        route: RouteHint,
    ) -> Result<()>;
    fn resolve_route(&mut self, h: CmIdHandle, timeout: Duration) -> Result<()>;

    // ---- connections
    /// `rdma_create_qp` after the QP was made and moved to INIT (UD: RTS): the
    /// backend takes its part of the QP (the own CM moves it to RTR/RTS/ERR).
    fn attach_qp(&mut self, h: CmIdHandle, qp: &Qp) -> Result<()>;
    fn listen(&mut self, h: CmIdHandle, backlog: usize) -> Result<()>;
    fn connect(&mut self, now: Instant, h: CmIdHandle, param: &ConnParam) -> Result<()>;
    /// `rdma_accept`; `qp` (RC) is moved to RTR/RTS before the reply leaves.
    fn accept(
        &mut self,
        now: Instant,
        h: CmIdHandle,
        param: &ConnParam,
        qp: Option<&Qp>,
    ) -> Result<()>;
    fn reject(&mut self, h: CmIdHandle, private_data: &[u8]) -> Result<()>;
    /// `rdma_establish`; `qp` is moved to RTR/RTS first.
    fn establish(&mut self, h: CmIdHandle, qp: Option<&Qp>) -> Result<()>;
    fn disconnect(&mut self, now: Instant, h: CmIdHandle) -> Result<()>;

    // ---- events
    fn poll_event_where(&mut self, pred: &dyn Fn(&CmEvent) -> bool) -> Option<CmEvent>;
    fn pending_events(&self) -> usize;
    fn pending_for(&self, channel: Option<ChannelId>) -> usize;

    // ---- the device
    fn stats(&self) -> CmStats;
    /// The live cm_ids (management plane).
    fn ids(&self) -> Vec<crate::IdInfo>;
    fn is_removed(&self) -> bool;
    /// The device's address went away or changed: ADDR_CHANGE to its ids.
    fn addr_change(&mut self, ip: IpAddr);
    /// DEVICE_REMOVAL to every id; the ids' QPs go to ERR.
    fn device_removal(&mut self);

    // ---- progress
    /// After every call: do what it made due (QP transitions, sends).
    fn flush(&mut self);
    /// One round of the poller thread: take what arrived, fire due timers,
    /// flush. Returns how much input it handled (0: the poller may sleep).
    fn round(&mut self, now: Instant) -> usize;
    /// The next timer deadline.
    fn poll_timeout(&self) -> Option<Instant>;
    /// What the poller sleeps on between rounds.
    fn waiter(&self) -> Waiter;
}
