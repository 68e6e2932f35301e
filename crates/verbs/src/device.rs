//! The public verbs objects (`ibv_context`, `ibv_pd`, `ibv_cq`, `ibv_qp`, ...),
//! provider-neutral: each dispatches every verb call to its provider's object
//! (one `match` per call, never per packet; see `provider.rs`).
//!
//! Ownership: see the crate docs (*Ownership*): handles are `Arc`s, children
//! hold their parents, explicit destruction of a held resource is `EBUSY`.

use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::provider::{ChannelImpl, CqImpl, DeviceImpl, PdImpl, QpImpl, SrqImpl};
#[cfg(feature = "rdma-core")]
use crate::rdma_core::provider as rp;
use crate::soft::provider as sp;
use crate::types::*;
use crate::{BadWr, Error, Result};

/// Which provider serves a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The software RoCEv2 provider ([`crate::soft`]), a device per IPv4 address.
    Soft,
    /// Kernel RDMA devices through libibverbs ([`crate::rdma_core`]; cargo
    /// feature `rdma-core`).
    RdmaCore,
}

/// A device context (`ibv_context`). Cheap to clone; the device is closed when
/// the last handle (including those its objects hold) is gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) imp: DeviceImpl,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({} {})", self.name(), self.ip())
    }
}

/// `ibv_get_device_list`: (name, address) of each device [`Context::open`] can
/// open. The soft provider has one per IPv4 address of an interface that is up
/// (opening one binds UDP 4791 on that address).
pub fn device_list() -> Vec<(String, Ipv4Addr)> {
    crate::soft::device_list()
}

impl Context {
    /// `ibv_open_device`: the device named by `spec` (an IPv4 address or a
    /// `dps_a_b_c_d` name: the soft provider, with a poller thread; options in
    /// [`crate::soft::DeviceOptions`]).
    pub fn open(spec: &str) -> Result<Context> {
        let o = crate::soft::DeviceOptions::new(crate::soft::parse_device(spec)?);
        Ok(Context::from_soft(sp::open(o)?))
    }

    pub(crate) fn from_soft(dev: Arc<crate::soft::Device>) -> Context {
        Context {
            imp: DeviceImpl::Soft(dev),
        }
    }

    #[cfg(feature = "rdma-core")]
    pub(crate) fn from_rdma_core(dev: Arc<rp::RcDevice>) -> Context {
        Context {
            imp: DeviceImpl::RdmaCore(dev),
        }
    }

    /// The rdma-core device's own surface (node GUID, GID table with types,
    /// port state); None for another provider.
    #[cfg(feature = "rdma-core")]
    pub fn rdma_core(&self) -> Option<&Arc<rp::RcDevice>> {
        match &self.imp {
            DeviceImpl::RdmaCore(d) => Some(d),
            _ => None,
        }
    }

    /// The provider serving this device.
    pub fn provider(&self) -> Provider {
        match &self.imp {
            DeviceImpl::Soft(_) => Provider::Soft,
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(_) => Provider::RdmaCore,
        }
    }

    /// The soft device's own surface (counters, manual progress, the sans-IO
    /// datagram interface); None for another provider.
    pub fn soft(&self) -> Option<&Arc<crate::soft::Device>> {
        match &self.imp {
            DeviceImpl::Soft(d) => Some(d),
            #[cfg(feature = "rdma-core")]
            _ => None,
        }
    }

    pub fn name(&self) -> &str {
        match &self.imp {
            DeviceImpl::Soft(d) => &d.name,
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => &d.name,
        }
    }
    /// The device's IPv4 address (its RoCEv2 GID: index 1 on a soft device;
    /// on a kernel device the first RoCE v2 IPv4 GID of port 1, see
    /// [`Context::ip_gid_index`]; UNSPECIFIED if it has none).
    pub fn ip(&self) -> Ipv4Addr {
        match &self.imp {
            DeviceImpl::Soft(d) => d.ip,
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.ip,
        }
    }

    /// The GID index of [`Context::ip`] on port 1 (1 on a soft device).
    pub fn ip_gid_index(&self) -> u32 {
        match &self.imp {
            DeviceImpl::Soft(_) => 1,
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.ip_gid_index,
        }
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        match &self.imp {
            DeviceImpl::Soft(d) => d.query_gid(port, index),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.query_gid(port, index),
        }
    }

    /// `ibv_query_device`, as the provider reports it.
    pub fn query_device(&self) -> DeviceAttr {
        match &self.imp {
            DeviceImpl::Soft(d) => d.query_device(),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.query_device(),
        }
    }

    /// `ibv_query_port`, as the provider reports it.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        match &self.imp {
            DeviceImpl::Soft(d) => d.query_port(port),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.query_port(port),
        }
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let imp = match &self.imp {
            DeviceImpl::Soft(d) => PdImpl::Soft(sp::alloc_pd(d)?),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => PdImpl::RdmaCore(rp::alloc_pd(d)?),
        };
        Ok(Pd(Arc::new(PdInner {
            imp,
            ctx: self.clone(),
        })))
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let imp = match &self.imp {
            DeviceImpl::Soft(_) => ChannelImpl::Soft(sp::SoftChannel::new()?),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => ChannelImpl::RdmaCore(rp::RcChannel::new(d)?),
        };
        Ok(CompChannel { imp })
    }

    /// `ibv_create_cq` with `cqe` entries.
    pub fn create_cq(&self, cqe: usize, channel: Option<&CompChannel>) -> Result<Cq> {
        let imp = match &self.imp {
            DeviceImpl::Soft(d) => {
                let ch = match channel.map(|c| &c.imp) {
                    None => None,
                    Some(ChannelImpl::Soft(s)) => Some(s),
                    #[cfg(feature = "rdma-core")]
                    Some(_) => return Err(Error::Inval),
                };
                CqImpl::Soft(sp::create_cq(d, cqe, ch)?)
            }
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => {
                let ch = match channel.map(|c| &c.imp) {
                    None => None,
                    Some(ChannelImpl::RdmaCore(s)) => Some(s),
                    Some(_) => return Err(Error::Inval),
                };
                CqImpl::RdmaCore(rp::create_cq(d, cqe, ch)?)
            }
        };
        Ok(Cq(Arc::new(CqInner {
            imp,
            ctx: self.clone(),
            _channel: channel.cloned(),
        })))
    }

    /// `ibv_close_device`, checked: `EBUSY` while PDs, CQs, channels or other
    /// clones still hold the device (it then closes with the last of them:
    /// this handle is gone either way), as the other `destroy`s.
    pub fn close(self) -> Result<()> {
        match self.imp {
            DeviceImpl::Soft(d) => release(d),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => release(d),
        }
    }

    /// `ibv_get_async_event` without blocking.
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        match &self.imp {
            DeviceImpl::Soft(d) => d.poll_async_event(),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.poll_async_event(),
        }
    }

    /// fd that becomes readable when an async event is queued.
    pub fn async_fd(&self) -> RawFd {
        match &self.imp {
            DeviceImpl::Soft(d) => d.async_fd(),
            #[cfg(feature = "rdma-core")]
            DeviceImpl::RdmaCore(d) => d.async_fd(),
        }
    }
}

/// Protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct Pd(Arc<PdInner>);

pub(crate) struct PdInner {
    pub(crate) imp: PdImpl,
    ctx: Context,
}

/// `ibv_qp_init_attr`.
#[derive(Clone, Copy)]
pub struct QpInitAttr<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub srq: Option<&'a Srq>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

/// `ibv_srq_init_attr`.
#[derive(Debug, Clone, Copy)]
pub struct SrqInitAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

impl Pd {
    pub(crate) fn inner(&self) -> &PdInner {
        &self.0
    }
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<Qp> {
        self.create_qp_on(init, false)
    }

    /// `create_qp`, or (`gsi`, soft provider only) the device's QP1.
    pub(crate) fn create_qp_on(&self, init: &QpInitAttr, gsi: bool) -> Result<Qp> {
        let imp = match &self.0.imp {
            PdImpl::Soft(pd) => {
                let (send_cq, recv_cq) = match (&init.send_cq.0.imp, &init.recv_cq.0.imp) {
                    (CqImpl::Soft(s), CqImpl::Soft(r)) => (s, r),
                    #[cfg(feature = "rdma-core")]
                    _ => return Err(Error::Inval),
                };
                let srq = match init.srq.map(|s| &s.0.imp) {
                    None => None,
                    Some(SrqImpl::Soft(s)) => Some(s),
                    #[cfg(feature = "rdma-core")]
                    Some(_) => return Err(Error::Inval),
                };
                QpImpl::Soft(sp::create_qp(
                    pd,
                    &sp::QpSpec {
                        qp_type: init.qp_type,
                        send_cq,
                        recv_cq,
                        srq,
                        cap: init.cap,
                        sq_sig_all: init.sq_sig_all,
                        gsi,
                    },
                )?)
            }
            #[cfg(feature = "rdma-core")]
            PdImpl::RdmaCore(pd) => {
                let (CqImpl::RdmaCore(send_cq), CqImpl::RdmaCore(recv_cq)) =
                    (&init.send_cq.0.imp, &init.recv_cq.0.imp)
                else {
                    return Err(Error::Inval);
                };
                let srq = match init.srq.map(|s| &s.0.imp) {
                    None => None,
                    Some(SrqImpl::RdmaCore(s)) => Some(s),
                    Some(_) => return Err(Error::Inval),
                };
                if gsi {
                    // the kernel owns QP1 of its devices
                    return Err(Error::Inval);
                }
                QpImpl::RdmaCore(rp::create_qp(
                    pd,
                    &rp::RcQpSpec {
                        qp_type: init.qp_type,
                        send_cq,
                        recv_cq,
                        srq,
                        cap: init.cap,
                        sq_sig_all: init.sq_sig_all,
                    },
                )?)
            }
        };
        let qpn = match &imp {
            QpImpl::Soft(q) => q.qpn,
            #[cfg(feature = "rdma-core")]
            QpImpl::RdmaCore(q) => q.qpn,
        };
        Ok(Qp(Arc::new(QpInner {
            imp,
            qpn,
            pd: self.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            _srq: init.srq.cloned(),
        })))
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&self, a: &SrqInitAttr) -> Result<Srq> {
        let imp = match &self.0.imp {
            PdImpl::Soft(pd) => {
                SrqImpl::Soft(sp::create_srq(pd, a.max_wr, a.max_sge, a.srq_limit)?)
            }
            #[cfg(feature = "rdma-core")]
            PdImpl::RdmaCore(pd) => {
                SrqImpl::RdmaCore(rp::create_srq(pd, a.max_wr, a.max_sge, a.srq_limit)?)
            }
        };
        Ok(Srq(Arc::new(SrqInner {
            imp,
            _pd: self.clone(),
        })))
    }

    /// `ibv_create_ah`: the destination GID must be IPv4-mapped. (rdma-core:
    /// the `ibv_ah` is created now with these attributes and kept in the PD for
    /// the UD sends to this address.)
    pub fn create_ah(&self, a: &AhAttr) -> Result<Ah> {
        let ip = a.dgid.to_ipv4().ok_or(Error::Inval)?;
        #[cfg(feature = "rdma-core")]
        if let PdImpl::RdmaCore(pd) = &self.0.imp {
            pd.create_ah(a)?;
        }
        Ok(Ah {
            ip,
            dport: if a.dport == 0 {
                wire::roce::ROCE_PORT
            } else {
                a.dport
            },
        })
    }

    /// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or other handles hold it.
    pub fn dealloc(self) -> Result<()> {
        release(self.0)
    }
}

/// Releases the caller's reference to a resource: `EBUSY` if others remain
/// (the resource then lives until the last of them is dropped), else the
/// resource is destroyed now.
fn release<T>(r: Arc<T>) -> Result<()> {
    match Arc::try_unwrap(r) {
        Ok(inner) => {
            drop(inner);
            Ok(())
        }
        Err(_) => Err(Error::Busy),
    }
}

/// Completion channel (`ibv_comp_channel`): its fd is readable when a CQ armed
/// with [`Cq::req_notify`] got a (matching) completion.
#[derive(Clone)]
pub struct CompChannel {
    imp: ChannelImpl,
}

impl CompChannel {
    /// For epoll / tokio `AsyncFd`.
    pub fn fd(&self) -> RawFd {
        match &self.imp {
            ChannelImpl::Soft(c) => c.fd(),
            #[cfg(feature = "rdma-core")]
            ChannelImpl::RdmaCore(c) => c.fd(),
        }
    }
    /// `ibv_get_cq_event`: blocks up to `timeout_ms` (-1 forever); the id of the
    /// CQ that fired ([`Cq::id`]).
    pub fn get_cq_event(&self, timeout_ms: i32) -> Result<u32> {
        match &self.imp {
            ChannelImpl::Soft(c) => c.get_cq_event(timeout_ms),
            #[cfg(feature = "rdma-core")]
            ChannelImpl::RdmaCore(c) => c.get_cq_event(timeout_ms),
        }
    }
}

/// Completion queue (`ibv_cq`).
#[derive(Clone)]
pub struct Cq(Arc<CqInner>);

pub(crate) struct CqInner {
    imp: CqImpl,
    ctx: Context,
    _channel: Option<CompChannel>,
}

impl Cq {
    pub fn id(&self) -> u32 {
        match &self.0.imp {
            CqImpl::Soft(c) => c.id as u32,
            #[cfg(feature = "rdma-core")]
            CqImpl::RdmaCore(c) => c.id,
        }
    }
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }
    /// `ibv_poll_cq`: fills `wc` from the front; returns how many. (A provider
    /// may progress its device here: the soft one does in manual mode.)
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        match &self.0.imp {
            CqImpl::Soft(c) => c.poll(wc),
            #[cfg(feature = "rdma-core")]
            CqImpl::RdmaCore(c) => c.poll(wc),
        }
    }
    /// `ibv_req_notify_cq`: arm for the next completion added to the CQ (or the
    /// next solicited / error one); one-shot, re-arm after each event. As in
    /// rdma-core, completions already queued do not fire: poll after arming.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        match &self.0.imp {
            CqImpl::Soft(c) => c.req_notify(solicited_only),
            #[cfg(feature = "rdma-core")]
            CqImpl::RdmaCore(c) => c.req_notify(solicited_only),
        }
    }
    /// `ibv_ack_cq_events` (bookkeeping only).
    pub fn ack_events(&self, n: u32) {
        match &self.0.imp {
            CqImpl::Soft(c) => c.ack_events(n),
            // acked as get_cq_event returned them
            #[cfg(feature = "rdma-core")]
            CqImpl::RdmaCore(_) => {}
        }
    }
    /// `ibv_destroy_cq`: `EBUSY` while QPs or other handles hold it.
    pub fn destroy(self) -> Result<()> {
        release(self.0)
    }
}

/// Shared receive queue (`ibv_srq`).
#[derive(Clone)]
pub struct Srq(Arc<SrqInner>);

pub(crate) struct SrqInner {
    imp: SrqImpl,
    _pd: Pd,
}

impl Srq {
    pub fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        match &self.0.imp {
            SrqImpl::Soft(s) => s.post_recv(wrs),
            #[cfg(feature = "rdma-core")]
            SrqImpl::RdmaCore(s) => s.post_recv(wrs),
        }
    }
    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        match &self.0.imp {
            SrqImpl::Soft(s) => s.set_limit(limit),
            #[cfg(feature = "rdma-core")]
            SrqImpl::RdmaCore(s) => s.set_limit(limit),
        }
    }
    pub fn id(&self) -> u32 {
        match &self.0.imp {
            SrqImpl::Soft(s) => s.id as u32,
            #[cfg(feature = "rdma-core")]
            SrqImpl::RdmaCore(s) => s.id,
        }
    }
    /// `ibv_destroy_srq`: `EBUSY` while QPs or other handles hold it.
    pub fn destroy(self) -> Result<()> {
        release(self.0)
    }
}

/// Queue pair (`ibv_qp`). Destroyed when the last handle is dropped (or by
/// [`Qp::destroy`] when it is the only one).
#[derive(Clone)]
pub struct Qp(Arc<QpInner>);

pub(crate) struct QpInner {
    // dropped first: the provider's QP goes before the parents below
    imp: QpImpl,
    qpn: u32,
    pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
    _srq: Option<Srq>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({:#x})", self.0.qpn)
    }
}

impl Qp {
    pub fn qp_num(&self) -> u32 {
        self.0.qpn
    }
    pub fn context(&self) -> &Context {
        self.0.pd.context()
    }
    pub fn pd(&self) -> &Pd {
        &self.0.pd
    }
    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        match &self.0.imp {
            QpImpl::Soft(q) => q.modify(attr, mask),
            #[cfg(feature = "rdma-core")]
            QpImpl::RdmaCore(q) => q.modify(attr, mask),
        }
    }
    /// `ibv_query_qp` (all attributes).
    pub fn query(&self) -> Result<QpAttr> {
        match &self.0.imp {
            QpImpl::Soft(q) => q.query(),
            #[cfg(feature = "rdma-core")]
            QpImpl::RdmaCore(q) => q.query(),
        }
    }
    /// `ibv_post_send` of a list of WRs; on error, `BadWr.index` is the first
    /// rejected WR (the ones before it were posted).
    pub fn post_send(&self, wrs: &[SendWr]) -> std::result::Result<(), BadWr> {
        match &self.0.imp {
            QpImpl::Soft(q) => q.post_send(wrs),
            #[cfg(feature = "rdma-core")]
            QpImpl::RdmaCore(q) => q.post_send(wrs),
        }
    }
    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        match &self.0.imp {
            QpImpl::Soft(q) => q.post_recv(wrs),
            #[cfg(feature = "rdma-core")]
            QpImpl::RdmaCore(q) => q.post_recv(wrs),
        }
    }
    /// `ibv_destroy_qp`: `EBUSY` while other handles hold it.
    pub fn destroy(self) -> Result<()> {
        release(self.0)
    }
}

impl crate::soft::DeviceOptions {
    /// Opens the soft device: binds `ip:port` (unless `IoMode::External`) and
    /// starts its poller (`IoMode::Threaded`).
    pub fn open(self) -> Result<Context> {
        Ok(Context::from_soft(crate::soft::provider::open(self)?))
    }
}
