//! The CM of a kernel RDMA device (the rdma-core verbs provider): librdmacm.
//! Each backend call is the `rdma_*` call of the same name on the id's own
//! `rdma_cm_id`; the kernel CM sends and answers the MADs (it owns QP1 there).
//!
//! * One `rdma_event_channel` per device, nonblocking: every `rdma_cm_id` of
//!   the device is on it; the poller thread sleeps in `poll(2)` on its fd and
//!   each round reads what arrived (`rdma_get_cm_event`), copies it into a
//!   [`CmEvent`] (private data, UD and ECE parameters), acks it at once, and
//!   queues it for the public channel (or synchronous id) the id belongs to.
//! * QPs: the application's QP is made by the `verbs` rdma-core provider on the
//!   CM device's PD and CQs (`CmId::create_qp`), as for the soft provider. It is
//!   not given to librdmacm (`rdma_create_qp` refuses a PD of another
//!   `ibv_context` than its own, `EINVAL`): it is librdmacm's "QP not on the
//!   id" case, so the QP number travels in `rdma_conn_param.qp_num` and this
//!   backend does what librdmacm does to an id's QP, with the attributes of
//!   `rdma_init_qp_attr`: INIT→INIT→RTR→RTS before `rdma_accept`, the same at
//!   CONNECT_RESPONSE followed by `rdma_establish` (the RTU) and an ESTABLISHED
//!   event (librdmacm's `ucma_process_conn_resp`), ERR at `rdma_disconnect`,
//!   DISCONNECTED, REJECTED, UNREACHABLE and DEVICE_REMOVAL. ECE goes through
//!   `rdma_set_local_ece` / `rdma_get_remote_ece`, which librdmacm offers for
//!   exactly this case.
//! * Ids must be on this backend's device: `resolve_addr` without a source (on an
//!   unbound id) resolves from the device's address; an address resolved or bound to
//!   another kernel device gives ADDR_ERROR `-ENODEV` / `EADDRNOTAVAIL`, and a
//!   CONNECT_REQUEST that arrived on another device (a wildcard listener hears
//!   every device) is rejected, as the own CM's listeners hear their device only.
//! * Timeouts and retries are the kernel CM's (`cm_response_timeout`,
//!   `max_cm_retries`, `timewait` of `CmConfig` do not apply); `CmStats` stay 0
//!   (the kernel counts MADs in `/sys/class/infiniband/*/ports/*/cm_*`).

mod ffi;

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, c_void};
use verbs::rdma_core::ffi::{ibv_get_device_name, IbvQpAttr};
use verbs::{AccessFlags, AhAttr, Gid, Mtu, Qp, QpAttr, QpAttrMask, QpCap, QpState};
use wire::mad::PortSpace;

use self::ffi::*;
use super::backend::{CmBackend, Waiter};
use super::{DriverError, Result};
use crate::{
    ChannelId, CmEvent, CmIdHandle, CmOption, CmState, CmStats, ConnParam, Ece, EventType,
    RouteHint, UdParam, ACCEPT_PRIVATE_DATA_MAX, CONNECT_PRIVATE_DATA_MAX, REJECT_PRIVATE_DATA_MAX,
    SIDR_ACCEPT_PRIVATE_DATA_MAX, SIDR_CONNECT_PRIVATE_DATA_MAX,
};

struct Entry {
    raw: *mut RdmaCmId,
    channel: Option<ChannelId>,
    ps: PortSpace,
    /// The application's QP (made by `CmId::create_qp`), moved by this backend.
    qp: Option<Qp>,
    /// Coarse state, for the error of a refused call.
    state: CmState,
    removal_reported: bool,
}

/// librdmacm for one kernel device (lives under the device's mutex).
pub(crate) struct RdmaCm {
    ch: *mut RdmaEventChannel,
    fd: c_int,
    dev_name: String,
    /// The device's IPv4 address (its RoCE v2 GID): the source of ids that
    /// resolve without one.
    ip: Ipv4Addr,
    ids: HashMap<CmIdHandle, Entry>,
    by_raw: HashMap<usize, CmIdHandle>,
    next_id: u32,
    next_ch: u32,
    events: VecDeque<CmEvent>,
    removed: bool,
}

// SAFETY: the raw pointers are librdmacm objects this value owns (the channel,
// the ids); they are only touched through `&mut self` / `&self` under the CM
// device's mutex, one thread at a time, and librdmacm does not tie them to the
// thread that made them.
unsafe impl Send for RdmaCm {}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// librdmacm's errno as the CM API's error.
fn cm_err(errno: i32, state: CmState, addr: Option<IpAddr>) -> DriverError {
    match errno {
        libc::ENODEV => DriverError::Cm(crate::Error::NoDevice),
        libc::EADDRINUSE => DriverError::Cm(crate::Error::AddrInUse),
        libc::EADDRNOTAVAIL => DriverError::Cm(crate::Error::AddrNotAvailable(
            addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        )),
        libc::ENETUNREACH | libc::EHOSTUNREACH => DriverError::Cm(crate::Error::NoRoute(errno)),
        libc::EINVAL => DriverError::Cm(crate::Error::InvalidState(state)),
        e => DriverError::Verbs(verbs::Error::Io(std::io::Error::from_raw_os_error(e))),
    }
}

/// A `sockaddr_storage`-sized buffer holding `a` (IPv4: `sockaddr_in`).
fn to_storage(a: SocketAddr) -> [u64; 16] {
    let mut st = [0u64; 16];
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in (16 bytes) fits the 128-byte, 8-aligned buffer.
            unsafe { std::ptr::write(st.as_mut_ptr().cast::<libc::sockaddr_in>(), sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_in6 (28 bytes) fits the 128-byte, 8-aligned buffer.
            unsafe { std::ptr::write(st.as_mut_ptr().cast::<libc::sockaddr_in6>(), sin6) };
        }
    }
    st
}

/// The address in a `sockaddr_storage` (None: family unset).
fn from_storage(st: &[u64; 16]) -> Option<SocketAddr> {
    // SAFETY: the buffer is 128 bytes, 8-aligned: room for either form; the
    // family field is read first and selects the form.
    unsafe {
        let fam = std::ptr::read(st.as_ptr().cast::<libc::sa_family_t>());
        match i32::from(fam) {
            libc::AF_INET => {
                let sin = std::ptr::read(st.as_ptr().cast::<libc::sockaddr_in>());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s6 = std::ptr::read(st.as_ptr().cast::<libc::sockaddr_in6>());
                let ip = Ipv6Addr::from(s6.sin6_addr.s6_addr);
                let port = u16::from_be(s6.sin6_port);
                Some(match ip.to_ipv4_mapped() {
                    Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                    None => SocketAddr::V6(SocketAddrV6::new(
                        ip,
                        port,
                        s6.sin6_flowinfo,
                        s6.sin6_scope_id,
                    )),
                })
            }
            _ => None,
        }
    }
}

fn event_type(v: c_int) -> Option<EventType> {
    use EventType::*;
    Some(match v {
        0 => AddrResolved,
        1 => AddrError,
        2 => RouteResolved,
        3 => RouteError,
        4 => ConnectRequest,
        5 => ConnectResponse,
        6 => ConnectError,
        7 => Unreachable,
        8 => Rejected,
        9 => Established,
        10 => Disconnected,
        11 => DeviceRemoval,
        12 => MulticastJoin,
        13 => MulticastError,
        14 => AddrChange,
        15 => TimewaitExit,
        _ => return None,
    })
}

fn qp_state(v: c_int) -> QpState {
    match v {
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => QpState::Reset,
    }
}

fn mtu(v: c_int) -> Mtu {
    match v {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

/// `rdma_init_qp_attr`'s answer as the verbs API's attributes.
fn qp_attr(a: &IbvQpAttr) -> QpAttr {
    let g = &a.ah_attr.grh;
    QpAttr {
        qp_state: qp_state(a.qp_state),
        cur_qp_state: qp_state(a.cur_qp_state),
        path_mtu: mtu(a.path_mtu),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: AccessFlags::from_bits_truncate(a.qp_access_flags),
        cap: QpCap {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        },
        ah_attr: AhAttr {
            dgid: Gid(g.dgid.raw),
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: a.ah_attr.sl,
            port_num: a.ah_attr.port_num,
            dport: wire::roce::ROCE_PORT,
        },
        pkey_index: a.pkey_index,
        sq_draining: false,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    }
}

fn to_err(qp: &Qp) {
    let _ = qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    );
}

/// The kernel device an id is on (None: not bound to one yet).
///
/// # Safety
/// `raw` is a live `rdma_cm_id`.
unsafe fn id_device(raw: *mut RdmaCmId) -> Option<String> {
    // SAFETY: the caller's contract; `verbs` and its `device` are librdmacm's
    // live objects while the id is; the name is a NUL-terminated string.
    unsafe {
        let v = (*raw).verbs;
        if v.is_null() || (*v).device.is_null() {
            return None;
        }
        let n = ibv_get_device_name((*v).device);
        (!n.is_null()).then(|| CStr::from_ptr(n).to_string_lossy().into_owned())
    }
}

/// What to do with an event after it was copied and acked.
enum After {
    Queue(CmEvent),
    /// A CONNECT_RESPONSE for an id with a QP: RTR/RTS, `rdma_establish`, then
    /// ESTABLISHED (CONNECT_ERROR if that fails).
    Establish(CmEvent),
    /// A CONNECT_REQUEST nobody here can take: reject and destroy the new id.
    Refuse(*mut RdmaCmId, &'static str),
    Nothing,
}

impl RdmaCm {
    /// An event channel for the device `ctx` (an rdma-core context).
    pub(crate) fn open(ctx: &verbs::Context) -> Result<RdmaCm> {
        // SAFETY: no arguments; the result is checked.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            let e = std::io::Error::last_os_error();
            tracing::error!(
                "cm {}: rdma_create_event_channel failed ({e}): is the rdma_ucm module \
                 loaded (/dev/infiniband/rdma_cm)?",
                ctx.name()
            );
            return Err(DriverError::Verbs(verbs::Error::Io(e)));
        }
        // SAFETY: `ch` is a live channel; fcntl on its own fd.
        let fd = unsafe { (*ch).fd };
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        tracing::debug!(
            "cm {}: librdmacm backend (the kernel CM's timeouts, retries and TIMEWAIT apply)",
            ctx.name()
        );
        Ok(RdmaCm {
            ch,
            fd,
            dev_name: ctx.name().to_string(),
            ip: ctx.ip(),
            ids: HashMap::new(),
            by_raw: HashMap::new(),
            next_id: 1,
            next_ch: 1,
            events: VecDeque::new(),
            removed: false,
        })
    }

    fn new_handle(&mut self) -> CmIdHandle {
        let h = CmIdHandle {
            index: self.next_id,
            gen: 1,
        };
        self.next_id = self.next_id.wrapping_add(1);
        h
    }

    /// The id's `rdma_cm_id` (ENODEV after DEVICE_REMOVAL).
    fn raw(&self, h: CmIdHandle) -> Result<*mut RdmaCmId> {
        if self.removed {
            return Err(DriverError::Cm(crate::Error::NoDevice));
        }
        match self.ids.get(&h) {
            Some(e) if !e.raw.is_null() => Ok(e.raw),
            _ => Err(DriverError::Cm(crate::Error::InvalidId)),
        }
    }

    fn state(&self, h: CmIdHandle) -> CmState {
        self.ids.get(&h).map_or(CmState::Idle, |e| e.state)
    }

    fn set_state(&mut self, h: CmIdHandle, s: CmState) {
        if let Some(e) = self.ids.get_mut(&h) {
            e.state = s;
        }
    }

    /// `rc` of an `rdma_*` call as a result.
    fn check(&self, h: CmIdHandle, rc: c_int, addr: Option<IpAddr>) -> Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(cm_err(errno(), self.state(h), addr))
        }
    }

    /// One `rdma_init_qp_attr` + `ibv_modify_qp` step (librdmacm's
    /// `ucma_modify_qp_*`); `depth` overrides the RTR/RTS read depth unless
    /// `RDMA_MAX_*`.
    fn qp_step(raw: *mut RdmaCmId, qp: &Qp, st: QpState, depth: u8) -> Result<()> {
        let mut a = IbvQpAttr {
            qp_state: st as c_int,
            ..IbvQpAttr::default()
        };
        let mut mask: c_int = 0;
        // SAFETY: raw is a live id; `a` and `mask` are live out-parameters.
        if unsafe { rdma_init_qp_attr(raw, &mut a, &mut mask) } != 0 {
            return Err(DriverError::Verbs(verbs::Error::Io(
                std::io::Error::last_os_error(),
            )));
        }
        if st == QpState::Rtr && depth != RDMA_MAX_RESP_RES {
            a.max_dest_rd_atomic = depth;
        }
        if st == QpState::Rts && depth != RDMA_MAX_INIT_DEPTH {
            a.max_rd_atomic = depth;
        }
        // bits 21-24 (RoCE extras of old kernels) are dropped, as librdmacm does
        qp.modify(&qp_attr(&a), QpAttrMask::from_bits_truncate(mask as u32))?;
        Ok(())
    }

    /// INIT (again, with the CM's attributes) → RTR → RTS.
    fn qp_rtr_rts(raw: *mut RdmaCmId, qp: &Qp, resp_res: u8, init_depth: u8) -> Result<()> {
        let r = Self::qp_step(raw, qp, QpState::Init, 0)
            .and_then(|_| Self::qp_step(raw, qp, QpState::Rtr, resp_res))
            .and_then(|_| Self::qp_step(raw, qp, QpState::Rts, init_depth));
        if r.is_err() {
            to_err(qp);
        }
        r
    }

    fn conn_param(p: &ConnParam, qp_num: u32) -> RdmaConnParam {
        RdmaConnParam {
            private_data: if p.private_data.is_empty() {
                std::ptr::null()
            } else {
                p.private_data.as_ptr().cast()
            },
            private_data_len: p.private_data.len() as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: u8::from(p.flow_control),
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: u8::from(p.srq),
            qp_num,
        }
    }

    fn limit(len: usize, max: usize) -> Result<()> {
        if len > max {
            return Err(DriverError::Cm(crate::Error::PrivateDataTooLong {
                len,
                max,
            }));
        }
        Ok(())
    }

    fn qp_num(&self, h: CmIdHandle, p: &ConnParam) -> u32 {
        self.ids
            .get(&h)
            .and_then(|e| e.qp.as_ref())
            .map_or(p.qp_num, |q| q.qp_num())
    }

    fn remote_ece_of(raw: *mut RdmaCmId) -> Ece {
        let mut e = IbvEce::default();
        // SAFETY: raw is a live id; `e` a live out-parameter.
        if unsafe { rdma_get_remote_ece(raw, &mut e) } == 0 {
            Ece {
                vendor_id: e.vendor_id,
                options: e.options,
            }
        } else {
            Ece::default()
        }
    }

    /// Copies one librdmacm event (before it is acked).
    ///
    /// # Safety
    /// `ev` is an event returned by `rdma_get_cm_event` and not yet acked.
    unsafe fn take(&mut self, ev: &RdmaCmEvent) -> After {
        let Some(et) = event_type(ev.event) else {
            tracing::warn!("cm {}: unknown librdmacm event {}", self.dev_name, ev.event);
            return After::Nothing;
        };
        let (h, listen_id) = if et == EventType::ConnectRequest {
            let Some(&lh) = self.by_raw.get(&(ev.listen_id as usize)) else {
                return After::Refuse(ev.id, "its listener is gone");
            };
            // SAFETY: the new id of a CONNECT_REQUEST is live (ours to destroy).
            let dev = unsafe { id_device(ev.id) };
            if dev.as_deref() != Some(self.dev_name.as_str()) {
                return After::Refuse(ev.id, "it arrived on another device");
            }
            let (channel, ps) = match self.ids.get(&lh) {
                Some(l) => (l.channel, l.ps),
                None => return After::Refuse(ev.id, "its listener is gone"),
            };
            let h = self.new_handle();
            let state = if ps == PortSpace::Udp {
                CmState::SidrReqRcvd
            } else {
                CmState::ReqRcvd
            };
            self.ids.insert(
                h,
                Entry {
                    raw: ev.id,
                    channel,
                    ps,
                    qp: None,
                    state,
                    removal_reported: false,
                },
            );
            self.by_raw.insert(ev.id as usize, h);
            (h, Some(lh))
        } else {
            match self.by_raw.get(&(ev.id as usize)) {
                Some(&h) => (h, None),
                None => return After::Nothing, // destroyed meanwhile
            }
        };
        let Some(e) = self.ids.get(&h) else {
            return After::Nothing;
        };
        let (raw, ps, channel) = (e.raw, e.ps, e.channel);
        let ud_ps = ps == PortSpace::Udp;
        let mut out = CmEvent {
            id: h,
            listen_id,
            channel,
            event: et,
            status: ev.status,
            param: ConnParam {
                private_data: Vec::new(),
                ..ConnParam::default()
            },
            ud: None,
            ece: Ece::default(),
        };
        let with_param = matches!(
            et,
            EventType::ConnectRequest
                | EventType::ConnectResponse
                | EventType::Established
                | EventType::Rejected
                | EventType::Unreachable
        );
        if with_param {
            // SAFETY: librdmacm filled the union member of the id's port space;
            // private data (if any) lives until the ack, which comes after this.
            unsafe {
                if ud_ps {
                    let u = ev.param.ud;
                    out.param.private_data = copy_pd(u.private_data, u.private_data_len);
                    if matches!(et, EventType::ConnectRequest | EventType::Established) {
                        let g = u.ah_attr.grh.dgid.raw;
                        let remote = match Ipv6Addr::from(g).to_ipv4_mapped() {
                            Some(v4) => IpAddr::V4(v4),
                            None => from_storage(&(*raw).route.addr.dst)
                                .map_or(IpAddr::V6(Ipv6Addr::from(g)), |a| a.ip()),
                        };
                        out.ud = Some(UdParam {
                            qp_num: u.qp_num,
                            qkey: u.qkey,
                            remote,
                        });
                    }
                } else {
                    let c = ev.param.conn;
                    out.param = ConnParam {
                        private_data: copy_pd(c.private_data, c.private_data_len),
                        responder_resources: c.responder_resources,
                        initiator_depth: c.initiator_depth,
                        flow_control: c.flow_control != 0,
                        retry_count: c.retry_count,
                        rnr_retry_count: c.rnr_retry_count,
                        srq: c.srq != 0,
                        qp_num: c.qp_num,
                    };
                }
            }
        }
        if matches!(
            et,
            EventType::ConnectRequest | EventType::ConnectResponse | EventType::Established
        ) {
            out.ece = Self::remote_ece_of(raw);
        }
        self.after_event(h, out)
    }

    /// State, QP and device bookkeeping of an event of a known id.
    fn after_event(&mut self, h: CmIdHandle, mut out: CmEvent) -> After {
        let Some(e) = self.ids.get_mut(&h) else {
            return After::Nothing;
        };
        let et = out.event;
        match et {
            EventType::AddrResolved => {
                // SAFETY: e.raw is a live id (ours).
                let dev = unsafe { id_device(e.raw) };
                if dev.as_deref() != Some(self.dev_name.as_str()) {
                    tracing::info!(
                        "cm {}: address resolved through device {:?}, not this one: \
                         ADDR_ERROR -ENODEV",
                        self.dev_name,
                        dev
                    );
                    out.event = EventType::AddrError;
                    out.status = crate::event::ENODEV;
                    e.state = CmState::Idle;
                } else {
                    e.state = CmState::AddrResolved;
                }
            }
            EventType::RouteResolved => e.state = CmState::RouteResolved,
            EventType::ConnectResponse => {
                if e.qp.is_some() {
                    return After::Establish(out);
                }
                e.state = CmState::RepRcvd;
            }
            EventType::Established => e.state = CmState::Established,
            EventType::Disconnected => {
                e.state = if e.state == CmState::DreqSent {
                    CmState::TimeWait
                } else {
                    CmState::DreqRcvd
                };
                if let Some(qp) = &e.qp {
                    to_err(qp);
                }
            }
            EventType::Rejected
            | EventType::Unreachable
            | EventType::ConnectError
            | EventType::AddrError
            | EventType::RouteError => {
                e.state = CmState::Idle;
                if let Some(qp) = &e.qp {
                    to_err(qp);
                }
            }
            EventType::DeviceRemoval => {
                self.removed = true;
                if e.removal_reported {
                    return After::Nothing;
                }
                e.removal_reported = true;
                if let Some(qp) = &e.qp {
                    to_err(qp);
                }
            }
            EventType::TimewaitExit => e.state = CmState::Idle,
            _ => {}
        }
        After::Queue(out)
    }

    /// Reads every event that arrived. Returns how many.
    fn drain(&mut self) -> usize {
        let mut n = 0;
        loop {
            let mut ev: *mut RdmaCmEvent = std::ptr::null_mut();
            // SAFETY: the channel is live; `ev` a live out-parameter; the fd is
            // nonblocking, so this returns -1 (EAGAIN) when nothing is there.
            if unsafe { rdma_get_cm_event(self.ch, &mut ev) } != 0 || ev.is_null() {
                break;
            }
            n += 1;
            // SAFETY: `ev` was just returned and is acked only below.
            let after = unsafe { self.take(&*ev) };
            // SAFETY: as above.
            let (et, st) = unsafe { ((*ev).event, (*ev).status) };
            tracing::debug!("cm {}: librdmacm event {et} status {st}", self.dev_name);
            // SAFETY: acked exactly once; nothing of it is used afterwards.
            unsafe { rdma_ack_cm_event(ev) };
            match after {
                After::Queue(e) => self.events.push_back(e),
                After::Establish(e) => self.establish_active(e),
                After::Refuse(raw, why) => {
                    tracing::info!(
                        "cm {}: rejecting a connection request: {why}",
                        self.dev_name
                    );
                    // SAFETY: the new id is ours, acked, never handed out.
                    unsafe {
                        rdma_reject(raw, std::ptr::null(), 0);
                        rdma_destroy_id(raw);
                    }
                }
                After::Nothing => {}
            }
        }
        n
    }

    /// librdmacm's `ucma_process_conn_resp` for a QP not on the id.
    fn establish_active(&mut self, mut ev: CmEvent) {
        let h = ev.id;
        let Some(e) = self.ids.get(&h) else { return };
        let (raw, qp) = (e.raw, e.qp.clone());
        let r = match &qp {
            Some(qp) => Self::qp_rtr_rts(raw, qp, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH),
            None => Ok(()),
        };
        // SAFETY: raw is a live id; sends the RTU.
        let r = r.and_then(|_| self.check(h, unsafe { rdma_establish(raw) }, None));
        match r {
            Ok(()) => {
                ev.event = EventType::Established;
                self.set_state(h, CmState::Established);
            }
            Err(err) => {
                tracing::warn!("cm {}: establishing {h}: {err}", self.dev_name);
                if let Some(qp) = &qp {
                    to_err(qp);
                }
                // SAFETY: raw is a live id.
                unsafe { rdma_reject(raw, std::ptr::null(), 0) };
                ev.event = EventType::ConnectError;
                ev.status = -err.errno();
                self.set_state(h, CmState::Idle);
            }
        }
        self.events.push_back(ev);
    }
}

/// Copies `len` bytes of private data (none for a null pointer).
///
/// # Safety
/// `p` is null or points at `len` readable bytes.
unsafe fn copy_pd(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)).to_vec() }
}

impl Drop for RdmaCm {
    fn drop(&mut self) {
        for (_, e) in self.ids.drain() {
            if !e.raw.is_null() {
                // SAFETY: our id, destroyed once (its events were all acked).
                unsafe { rdma_destroy_id(e.raw) };
            }
        }
        // SAFETY: every id on the channel is destroyed above.
        unsafe { rdma_destroy_event_channel(self.ch) };
    }
}

impl CmBackend for RdmaCm {
    fn create_channel(&mut self) -> ChannelId {
        let c = ChannelId(self.next_ch);
        self.next_ch += 1;
        c
    }
    fn create_id(&mut self, channel: Option<ChannelId>, ps: PortSpace) -> CmIdHandle {
        let h = self.new_handle();
        let mut raw: *mut RdmaCmId = std::ptr::null_mut();
        // SAFETY: the channel is live; `raw` a live out-parameter.
        let rc = unsafe {
            rdma_create_id(
                self.ch,
                &mut raw,
                std::ptr::null_mut(),
                c_int::from(u16::from(ps)),
            )
        };
        if rc != 0 {
            // the trait's create_id cannot fail: every later call on it fails
            tracing::error!(
                "cm {}: rdma_create_id: {}",
                self.dev_name,
                std::io::Error::last_os_error()
            );
            raw = std::ptr::null_mut();
        } else {
            self.by_raw.insert(raw as usize, h);
        }
        self.ids.insert(
            h,
            Entry {
                raw,
                channel,
                ps,
                qp: None,
                state: CmState::Idle,
                removal_reported: false,
            },
        );
        h
    }
    fn destroy_id(&mut self, _now: Instant, h: CmIdHandle) -> Result<()> {
        let e = self
            .ids
            .remove(&h)
            .ok_or(DriverError::Cm(crate::Error::InvalidId))?;
        self.events.retain(|ev| ev.id != h);
        if !e.raw.is_null() {
            self.by_raw.remove(&(e.raw as usize));
            // SAFETY: our id, destroyed once; its events were acked as read.
            if unsafe { rdma_destroy_id(e.raw) } != 0 {
                return Err(cm_err(errno(), e.state, None));
            }
        }
        Ok(())
    }
    fn migrate_id(&mut self, h: CmIdHandle, channel: Option<ChannelId>) -> Result<()> {
        let e = self
            .ids
            .get_mut(&h)
            .ok_or(DriverError::Cm(crate::Error::InvalidId))?;
        e.channel = channel;
        for ev in self.events.iter_mut().filter(|ev| ev.id == h) {
            ev.channel = channel;
        }
        Ok(())
    }
    fn port_space(&self, h: CmIdHandle) -> Result<PortSpace> {
        self.ids
            .get(&h)
            .map(|e| e.ps)
            .ok_or(DriverError::Cm(crate::Error::InvalidId))
    }
    fn local_addr(&self, h: CmIdHandle) -> Option<SocketAddr> {
        let e = self.ids.get(&h).filter(|e| !e.raw.is_null())?;
        // SAFETY: a live id of ours.
        from_storage(unsafe { &(*e.raw).route.addr.src })
    }
    fn peer_addr(&self, h: CmIdHandle) -> Option<SocketAddr> {
        let e = self.ids.get(&h).filter(|e| !e.raw.is_null())?;
        // SAFETY: a live id of ours.
        from_storage(unsafe { &(*e.raw).route.addr.dst })
            .filter(|a| !a.ip().is_unspecified() || a.port() != 0)
    }
    fn set_option(&mut self, h: CmIdHandle, opt: CmOption) -> Result<()> {
        let raw = self.raw(h)?;
        let mut b: u8;
        let mut i: c_int;
        let (name, val, len): (c_int, *mut c_void, usize) = match opt {
            CmOption::Tos(t) => {
                b = t;
                (RDMA_OPTION_ID_TOS, (&mut b as *mut u8).cast(), 1)
            }
            CmOption::AckTimeout(t) => {
                b = t;
                (RDMA_OPTION_ID_ACK_TIMEOUT, (&mut b as *mut u8).cast(), 1)
            }
            CmOption::ReuseAddr(on) => {
                i = c_int::from(on);
                (
                    RDMA_OPTION_ID_REUSEADDR,
                    (&mut i as *mut c_int).cast(),
                    std::mem::size_of::<c_int>(),
                )
            }
        };
        // SAFETY: raw is live; `val` points at a live local of `len` bytes.
        let rc = unsafe { rdma_set_option(raw, RDMA_OPTION_ID, name, val, len) };
        self.check(h, rc, None)
    }
    fn set_local_ece(&mut self, h: CmIdHandle, ece: Ece) -> Result<()> {
        let raw = self.raw(h)?;
        let mut e = IbvEce {
            vendor_id: ece.vendor_id,
            options: ece.options,
            comp_mask: 0,
        };
        // SAFETY: raw is live; `e` a live in-parameter.
        let rc = unsafe { rdma_set_local_ece(raw, &mut e) };
        self.check(h, rc, None)
    }
    fn remote_ece(&self, h: CmIdHandle) -> Result<Ece> {
        Ok(Self::remote_ece_of(self.raw(h)?))
    }

    fn bind_addr(&mut self, h: CmIdHandle, addr: SocketAddr) -> Result<()> {
        let raw = self.raw(h)?;
        let mut st = to_storage(addr);
        // SAFETY: raw is live; `st` holds a sockaddr of the right family.
        let rc = unsafe { rdma_bind_addr(raw, st.as_mut_ptr().cast()) };
        self.check(h, rc, Some(addr.ip()))?;
        // SAFETY: raw is live.
        let dev = unsafe { id_device(raw) };
        if dev.is_some() && dev.as_deref() != Some(self.dev_name.as_str()) {
            tracing::info!(
                "cm {}: {addr} belongs to kernel device {dev:?}",
                self.dev_name
            );
            return Err(DriverError::Cm(crate::Error::AddrNotAvailable(addr.ip())));
        }
        self.set_state(h, CmState::AddrBound);
        Ok(())
    }
    fn resolve_addr(
        &mut self,
        h: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
        _route: RouteHint,
    ) -> Result<()> {
        // the kernel looks the route up itself (and fails at once without one);
        // an id neither bound nor given a source resolves from this device's
        // address (the kernel would take the route's source, which may be
        // another device: a local destination goes through its own device)
        let raw = self.raw(h)?;
        let bound = self.local_addr(h).is_some_and(|a| !a.ip().is_unspecified());
        let src = match src {
            None if !bound && !self.ip.is_unspecified() => {
                Some(SocketAddr::new(IpAddr::V4(self.ip), 0))
            }
            s => s,
        };
        let mut s = src.map(to_storage);
        let mut d = to_storage(dst);
        let sp = s
            .as_mut()
            .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr().cast());
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as c_int;
        // SAFETY: raw is live; the sockaddrs are live locals (or null).
        let rc = unsafe { rdma_resolve_addr(raw, sp, d.as_mut_ptr().cast(), ms) };
        self.check(h, rc, src.map(|a| a.ip()))
    }
    fn resolve_route(&mut self, h: CmIdHandle, timeout: Duration) -> Result<()> {
        let raw = self.raw(h)?;
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as c_int;
        // SAFETY: raw is live.
        let rc = unsafe { rdma_resolve_route(raw, ms) };
        self.check(h, rc, None)
    }

    fn attach_qp(&mut self, h: CmIdHandle, qp: &Qp) -> Result<()> {
        self.raw(h)?;
        if let Some(e) = self.ids.get_mut(&h) {
            e.qp = Some(qp.clone());
        }
        Ok(())
    }
    fn listen(&mut self, h: CmIdHandle, backlog: usize) -> Result<()> {
        let raw = self.raw(h)?;
        // SAFETY: raw is live.
        let rc = unsafe { rdma_listen(raw, backlog.min(i32::MAX as usize) as c_int) };
        self.check(h, rc, None)?;
        self.set_state(h, CmState::Listen);
        Ok(())
    }
    fn connect(&mut self, _now: Instant, h: CmIdHandle, param: &ConnParam) -> Result<()> {
        let raw = self.raw(h)?;
        let ud = self.port_space(h)? == PortSpace::Udp;
        let max = if ud {
            SIDR_CONNECT_PRIVATE_DATA_MAX
        } else {
            CONNECT_PRIVATE_DATA_MAX
        };
        Self::limit(param.private_data.len(), max)?;
        let mut cp = Self::conn_param(param, self.qp_num(h, param));
        // SAFETY: raw is live; `cp` and the private data it points at are live.
        let rc = unsafe { rdma_connect(raw, &mut cp) };
        self.check(h, rc, None)?;
        self.set_state(
            h,
            if ud {
                CmState::SidrReqSent
            } else {
                CmState::ReqSent
            },
        );
        Ok(())
    }
    fn accept(
        &mut self,
        _now: Instant,
        h: CmIdHandle,
        param: &ConnParam,
        qp: Option<&Qp>,
    ) -> Result<()> {
        let raw = self.raw(h)?;
        let ud = self.port_space(h)? == PortSpace::Udp;
        let max = if ud {
            SIDR_ACCEPT_PRIVATE_DATA_MAX
        } else {
            ACCEPT_PRIVATE_DATA_MAX
        };
        Self::limit(param.private_data.len(), max)?;
        if let (Some(qp), false) = (qp, ud) {
            Self::qp_rtr_rts(raw, qp, param.responder_resources, param.initiator_depth)?;
        }
        let qpn = qp.map_or_else(|| self.qp_num(h, param), |q| q.qp_num());
        let mut cp = Self::conn_param(param, qpn);
        // SAFETY: raw is live; `cp` and the private data it points at are live.
        let rc = unsafe { rdma_accept(raw, &mut cp) };
        if rc != 0 {
            if let (Some(qp), false) = (qp, ud) {
                to_err(qp);
            }
        }
        self.check(h, rc, None)?;
        self.set_state(
            h,
            if ud {
                CmState::SidrRepSent
            } else {
                CmState::RepSent
            },
        );
        Ok(())
    }
    fn reject(&mut self, h: CmIdHandle, private_data: &[u8]) -> Result<()> {
        let raw = self.raw(h)?;
        let max = if self.port_space(h)? == PortSpace::Udp {
            SIDR_ACCEPT_PRIVATE_DATA_MAX
        } else {
            REJECT_PRIVATE_DATA_MAX
        };
        Self::limit(private_data.len(), max)?;
        let p = if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: raw is live; `p` points at `len` bytes (or is null).
        let rc = unsafe { rdma_reject(raw, p, private_data.len() as u8) };
        self.check(h, rc, None)?;
        self.set_state(h, CmState::Idle);
        Ok(())
    }
    fn establish(&mut self, h: CmIdHandle, qp: Option<&Qp>) -> Result<()> {
        let raw = self.raw(h)?;
        if let Some(qp) = qp {
            Self::qp_rtr_rts(raw, qp, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH)?;
        }
        // SAFETY: raw is live.
        let rc = unsafe { rdma_establish(raw) };
        self.check(h, rc, None)?;
        self.set_state(h, CmState::Established);
        Ok(())
    }
    fn disconnect(&mut self, _now: Instant, h: CmIdHandle) -> Result<()> {
        let raw = self.raw(h)?;
        // librdmacm moves the id's QP to ERR first (IB transport)
        if let Some(qp) = self.ids.get(&h).and_then(|e| e.qp.as_ref()) {
            to_err(qp);
        }
        // SAFETY: raw is live.
        let rc = unsafe { rdma_disconnect(raw) };
        self.check(h, rc, None)?;
        let s = self.state(h);
        self.set_state(
            h,
            if s == CmState::DreqRcvd {
                CmState::TimeWait
            } else {
                CmState::DreqSent
            },
        );
        Ok(())
    }

    fn poll_event_where(&mut self, pred: &dyn Fn(&CmEvent) -> bool) -> Option<CmEvent> {
        let i = self.events.iter().position(pred)?;
        self.events.remove(i)
    }
    fn pending_events(&self) -> usize {
        self.events.len()
    }
    fn pending_for(&self, channel: Option<ChannelId>) -> usize {
        self.events.iter().filter(|e| e.channel == channel).count()
    }

    fn stats(&self) -> CmStats {
        CmStats::default()
    }
    fn ids(&self) -> Vec<crate::IdInfo> {
        // the kernel keeps the connection's remote QP number; the backend
        // knows the state it last saw and its own QP
        let mut out: Vec<(u32, crate::IdInfo)> = self
            .ids
            .iter()
            .map(|(h, e)| {
                (
                    h.index,
                    crate::IdInfo {
                        state: e.state,
                        ps: e.ps,
                        local: self.local_addr(*h),
                        remote: self.peer_addr(*h),
                        local_qpn: e.qp.as_ref().map_or(0, |q| q.qp_num()),
                        remote_qpn: 0,
                    },
                )
            })
            .collect();
        out.sort_by_key(|(h, _)| *h);
        out.into_iter().map(|(_, i)| i).collect()
    }
    fn is_removed(&self) -> bool {
        self.removed
    }
    fn addr_change(&mut self, ip: IpAddr) {
        let mut evs = Vec::new();
        for (&h, e) in &self.ids {
            if e.raw.is_null() {
                continue;
            }
            // SAFETY: a live id of ours.
            let local = from_storage(unsafe { &(*e.raw).route.addr.src });
            if local.is_some_and(|a| a.ip() == ip) {
                evs.push(simple_event(h, e.channel, EventType::AddrChange));
            }
        }
        self.events.extend(evs);
    }
    fn device_removal(&mut self) {
        self.removed = true;
        let mut evs = Vec::new();
        for (&h, e) in self.ids.iter_mut() {
            if e.raw.is_null() || e.removal_reported {
                continue;
            }
            // SAFETY: a live id of ours.
            let bound = unsafe { id_device(e.raw) }.is_some();
            if !bound {
                continue;
            }
            e.removal_reported = true;
            if let Some(qp) = &e.qp {
                to_err(qp);
            }
            evs.push(simple_event(h, e.channel, EventType::DeviceRemoval));
        }
        self.events.extend(evs);
    }

    fn flush(&mut self) {
        self.drain();
    }
    fn round(&mut self, _now: Instant) -> usize {
        self.drain()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn waiter(&self) -> Waiter {
        let fd = self.fd;
        Arc::new(move |ms| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd; the fd is the channel's (a stale number
            // after the backend is gone only makes this return early).
            unsafe { libc::poll(&mut p, 1, ms) };
        })
    }
}

fn simple_event(h: CmIdHandle, channel: Option<ChannelId>, event: EventType) -> CmEvent {
    CmEvent {
        id: h,
        listen_id: None,
        channel,
        event,
        status: 0,
        param: ConnParam {
            private_data: Vec::new(),
            ..ConnParam::default()
        },
        ud: None,
        ece: Ece::default(),
    }
}
