//! The rdma-core provider's objects: each owns one `ibv_*` pointer and destroys
//! it in `Drop`. The public handles hold these (and their parents), so a
//! destroy never runs while a child or another handle still uses the object.
//! Errors are the errno libibverbs returns (or sets, for the create calls).

use std::ffi::CStr;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::ffi::*;
use crate::region::{MrInner, MrMem};
use crate::types::*;
use crate::{BadWr, Error, Result};

/// errno → the crate's error, as rdma-core returned it.
pub(crate) fn errno_error(e: i32) -> Error {
    match e {
        libc::EINVAL => Error::Inval,
        libc::ENOMEM => Error::NoMem,
        libc::ENODEV => Error::NoDev,
        libc::EBUSY => Error::Busy,
        libc::EAGAIN => Error::Again,
        e => Error::Io(std::io::Error::from_raw_os_error(e)),
    }
}

fn last_errno() -> Error {
    errno_error(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

/// A verbs call's return value (0 or an errno) as a result.
fn rc(r: i32) -> Result<()> {
    match r {
        0 => Ok(()),
        e if e < 0 => Err(last_errno()),
        e => Err(errno_error(e)),
    }
}

/// Ids for CQs and SRQs (what `Cq::id` / `Srq::id` and the events name).
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Gid,
    /// RoCE v2 (UDP 4791); else RoCE v1 or IB.
    pub roce_v2: bool,
}

/// An open kernel device (`ibv_context`).
pub struct RcDevice {
    pub(crate) ctx: *mut IbvContext,
    pub(crate) name: String,
    pub(crate) guid: u64,
    /// The IPv4 of the device's first RoCE v2 IPv4-mapped GID on port 1
    /// (UNSPECIFIED if it has none), and that GID's index.
    pub(crate) ip: Ipv4Addr,
    pub(crate) ip_gid_index: u32,
}

// SAFETY: libibverbs objects may be used from any thread (rdma-core's verbs are
// thread-safe); the pointer is owned by this struct and closed once, in Drop.
unsafe impl Send for RcDevice {}
// SAFETY: as for Send: every call through `ctx` is a thread-safe verbs call.
unsafe impl Sync for RcDevice {}

impl Drop for RcDevice {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from ibv_open_device and every object created on it
        // holds an Arc of this device, so none is left when this runs.
        let r = unsafe { ibv_close_device(self.ctx) };
        if r != 0 {
            tracing::warn!(dev = %self.name, "ibv_close_device: {r}");
        }
    }
}

/// The kernel's device list: (name, node GUID, device pointer) for each,
/// handed to `f` while the list is alive.
fn with_device_list<R>(f: impl FnOnce(&[*mut IbvDevice]) -> R) -> Result<R> {
    let mut n = 0;
    // SAFETY: `n` is a live out-parameter; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        // ENOSYS: the kernel has no uverbs (no RDMA devices at all)
        return match last_errno() {
            Error::Io(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(f(&[])),
            e => Err(e),
        };
    }
    // SAFETY: libibverbs returned `n` device pointers at `list`.
    let devs = unsafe { std::slice::from_raw_parts(list, n.max(0) as usize) };
    let r = f(devs);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; devices
    // opened from it stay valid (rdma-core keeps them referenced).
    unsafe { ibv_free_device_list(list) };
    Ok(r)
}

fn device_name(d: *mut IbvDevice) -> String {
    // SAFETY: `d` is a device of a live list; the name is a NUL-terminated
    // string inside it, copied out at once.
    unsafe { CStr::from_ptr(ibv_get_device_name(d)) }
        .to_string_lossy()
        .into_owned()
}

/// The kernel devices' names (empty without rdma-core devices).
pub(crate) fn device_names() -> Result<Vec<String>> {
    with_device_list(|devs| devs.iter().map(|&d| device_name(d)).collect())
}

/// Opens the device named `name` (`rxe0`, `mlx5_0`).
pub(crate) fn open_by_name(name: &str) -> Result<Arc<RcDevice>> {
    with_device_list(|devs| {
        let d = *devs
            .iter()
            .find(|&&d| device_name(d) == name)
            .ok_or(Error::NoDev)?;
        // SAFETY: `d` is a device of the live list.
        let ctx = unsafe { ibv_open_device(d) };
        if ctx.is_null() {
            return Err(last_errno());
        }
        // SAFETY: as above.
        let guid = u64::from_be(unsafe { ibv_get_device_guid(d) });
        let mut dev = RcDevice {
            ctx,
            name: name.to_string(),
            guid,
            ip: Ipv4Addr::UNSPECIFIED,
            ip_gid_index: 0,
        };
        if let Some(e) = dev
            .gids(1)
            .into_iter()
            .find(|e| e.roce_v2 && e.gid.to_ipv4().is_some())
        {
            dev.ip = e.gid.to_ipv4().unwrap_or(Ipv4Addr::UNSPECIFIED);
            dev.ip_gid_index = e.index;
        }
        // async events are read without blocking (poll_async_event)
        // SAFETY: `ctx` is live; async_fd is the context's own descriptor.
        unsafe {
            let fd = (*ctx).async_fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Ok(Arc::new(dev))
    })?
}

/// Opens the device with a RoCE v2 GID for `ip` on port 1.
pub(crate) fn open_by_ip(ip: Ipv4Addr) -> Result<Arc<RcDevice>> {
    for n in device_names()? {
        let d = open_by_name(&n)?;
        let want = Gid::from_ipv4(ip);
        if d.gids(1).iter().any(|e| e.roce_v2 && e.gid == want) {
            return Ok(d);
        }
    }
    Err(Error::NoDev)
}

fn mtu_from(v: i32) -> Mtu {
    match v {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// Interned firmware version strings (`DeviceAttr::fw_ver` is `&'static`):
/// one leak per distinct string in the process, not per query.
fn intern(s: String) -> &'static str {
    static SEEN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&x) = g.iter().find(|&&x| x == s) {
        return x;
    }
    let x: &'static str = Box::leak(s.into_boxed_str());
    g.push(x);
    x
}

impl RcDevice {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Node GUID (host order of the big-endian value, as `ibv_devinfo` prints it).
    pub fn node_guid(&self) -> u64 {
        self.guid
    }
    /// The GID table of `port`, valid (non-zero) entries only.
    pub fn gids(&self, port: u8) -> Vec<GidEntry> {
        let Ok(p) = self.query_port(port) else {
            return Vec::new();
        };
        (0..p.gid_tbl_len)
            .filter_map(|i| {
                let mut e = IbvGidEntry::default();
                // SAFETY: ctx is live; `e` is a live out-parameter of the size passed.
                let r = unsafe {
                    _ibv_query_gid_ex(
                        self.ctx,
                        port as u32,
                        i,
                        &mut e,
                        0,
                        std::mem::size_of::<IbvGidEntry>(),
                    )
                };
                (r == 0 && e.gid.raw != [0; 16]).then_some(GidEntry {
                    index: i,
                    gid: Gid(e.gid.raw),
                    roce_v2: e.gid_type == IBV_GID_TYPE_ROCE_V2,
                })
            })
            .collect()
    }
    pub(crate) fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let mut g = IbvGid::default();
        // SAFETY: ctx is live; `g` is a live out-parameter.
        rc(unsafe { ibv_query_gid(self.ctx, port, index as i32, &mut g) })?;
        Ok(Gid(g.raw))
    }
    pub(crate) fn query_device(&self) -> DeviceAttr {
        // SAFETY: all-zero is a valid IbvDeviceAttr (integers and a char array).
        let mut a: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is live; `a` is a live out-parameter.
        let r = unsafe { ibv_query_device(self.ctx, &mut a) };
        if r != 0 {
            tracing::warn!(dev = %self.name, "ibv_query_device: {r}");
        }
        // SAFETY: fw_ver is NUL-terminated within its 64 bytes (zeroed first).
        let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let u = |v: i32| v.max(0) as u32;
        DeviceAttr {
            fw_ver: intern(fw),
            node_guid: u64::from_be(a.node_guid),
            vendor_id: a.vendor_id,
            max_mr_size: a.max_mr_size,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            max_sge: u(a.max_sge),
            max_cq: u(a.max_cq),
            max_cqe: u(a.max_cqe),
            max_mr: u(a.max_mr),
            max_pd: u(a.max_pd),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
            max_srq: u(a.max_srq),
            max_srq_wr: u(a.max_srq_wr),
            max_inline_data: 0,
            atomic_cap_hca: a.atomic_cap == IBV_ATOMIC_HCA,
            phys_port_cnt: a.phys_port_cnt,
        }
    }
    pub(crate) fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: all-zero is a valid IbvPortAttr (integers only).
        let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is live; `a` is a live out-parameter at least as large as
        // the compat struct the exported symbol fills.
        rc(unsafe { ibv_query_port(self.ctx, port, &mut a) })?;
        Ok(PortAttr {
            state_active: a.state == IBV_PORT_ACTIVE,
            max_mtu: mtu_from(a.max_mtu),
            active_mtu: mtu_from(a.active_mtu),
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            lid: a.lid,
        })
    }
    /// The port's state as `ibv_devinfo` names it.
    pub fn port_state(&self, port: u8) -> Result<&'static str> {
        // SAFETY: as in query_port.
        let mut a: IbvPortAttr = unsafe { std::mem::zeroed() };
        // SAFETY: as in query_port.
        rc(unsafe { ibv_query_port(self.ctx, port, &mut a) })?;
        Ok(match a.state {
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "NOP",
        })
    }
    pub(crate) fn async_fd(&self) -> RawFd {
        // SAFETY: ctx is live; reads a plain int field.
        unsafe { (*self.ctx).async_fd }
    }
    pub(crate) fn poll_async_event(&self) -> Option<AsyncEvent> {
        loop {
            let mut e = IbvAsyncEvent {
                element: null_mut(),
                event_type: 0,
            };
            // SAFETY: ctx is live (async fd non-blocking: -1 when none is queued).
            if unsafe { ibv_get_async_event(self.ctx, &mut e) } != 0 {
                return None;
            }
            // SAFETY: for QP/CQ/SRQ events `element` is the object's pointer,
            // alive until the event is acked (destroy waits for the ack).
            let ev = unsafe {
                match e.event_type {
                    IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR => {
                        Some(AsyncEvent::QpFatal {
                            qp_num: (*(e.element as *mut IbvQp)).qp_num,
                        })
                    }
                    IBV_EVENT_QP_LAST_WQE_REACHED => Some(AsyncEvent::QpLastWqeReached {
                        qp_num: (*(e.element as *mut IbvQp)).qp_num,
                    }),
                    IBV_EVENT_CQ_ERR => Some(AsyncEvent::CqErr {
                        cq: (*(e.element as *mut IbvCq)).cq_context as usize as u32,
                    }),
                    IBV_EVENT_SRQ_LIMIT_REACHED => Some(AsyncEvent::SrqLimitReached {
                        srq: (*(e.element as *mut IbvSrq)).srq_context as usize as u32,
                    }),
                    // for port events the union `element` holds `int port_num`
                    // (its first 4 bytes: the low half of the pointer-sized
                    // field on the little-endian targets this provider runs on)
                    IBV_EVENT_PORT_ACTIVE => Some(AsyncEvent::PortActive {
                        port: e.element as usize as u32 as u8,
                    }),
                    IBV_EVENT_PORT_ERR => Some(AsyncEvent::PortErr {
                        port: e.element as usize as u32 as u8,
                    }),
                    IBV_EVENT_DEVICE_FATAL => Some(AsyncEvent::DeviceFatal),
                    other => {
                        // COMM_EST, LID/PKEY/GID change, ...: not in the public
                        // AsyncEvent (logged, acked, skipped)
                        tracing::warn!(dev = %self.name, event = other, "rdma-core async event");
                        None
                    }
                }
            };
            // SAFETY: `e` was filled by ibv_get_async_event; acked once.
            unsafe { ibv_ack_async_event(&mut e) };
            if ev.is_some() {
                return ev;
            }
        }
    }
}

/// `ibv_pd`, with the address handles UD sends to (created on demand, one per
/// destination, destroyed before the PD).
pub(crate) struct RcPd {
    pub(crate) pd: *mut IbvPd,
    pub(crate) dev: Arc<RcDevice>,
    ahs: Mutex<Vec<(Ipv4Addr, usize)>>,
}

// SAFETY: see RcDevice; the AH list is behind a mutex.
unsafe impl Send for RcPd {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcPd {}

pub(crate) fn alloc_pd(dev: &Arc<RcDevice>) -> Result<RcPd> {
    // SAFETY: ctx is live.
    let pd = unsafe { ibv_alloc_pd(dev.ctx) };
    if pd.is_null() {
        return Err(last_errno());
    }
    Ok(RcPd {
        pd,
        dev: dev.clone(),
        ahs: Mutex::new(Vec::new()),
    })
}

impl RcPd {
    /// The `ibv_ah` for `ip`: the one `create_ah` made, or a new one over the
    /// device's RoCE v2 IPv4 GID (port 1, hop limit 1).
    fn ah_for(&self, a: &AhAttr) -> Result<*mut IbvAh> {
        let ip = a.dgid.to_ipv4().ok_or(Error::Inval)?;
        let mut g = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, ah)) = g.iter().find(|(i, _)| *i == ip) {
            return Ok(ah as *mut IbvAh);
        }
        let mut attr = IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: IbvGid { raw: a.dgid.0 },
                flow_label: 0,
                sgid_index: a.sgid_index,
                hop_limit: a.hop_limit.max(1),
                traffic_class: a.traffic_class,
            },
            sl: a.sl,
            is_global: 1,
            port_num: a.port_num.max(1),
            ..Default::default()
        };
        // SAFETY: pd is live; `attr` is a live, initialised ah attr.
        let ah = unsafe { ibv_create_ah(self.pd, &mut attr) };
        if ah.is_null() {
            return Err(last_errno());
        }
        g.push((ip, ah as usize));
        Ok(ah)
    }
    pub(crate) fn create_ah(&self, a: &AhAttr) -> Result<()> {
        self.ah_for(a).map(|_| ())
    }
}

impl Drop for RcPd {
    fn drop(&mut self) {
        for &(_, ah) in self.ahs.get_mut().unwrap_or_else(|e| e.into_inner()).iter() {
            // SAFETY: each AH was created on this PD and is destroyed once.
            unsafe { ibv_destroy_ah(ah as *mut IbvAh) };
        }
        // SAFETY: the public handles guarantee no MR/QP/SRQ of this PD is left.
        let r = unsafe { ibv_dealloc_pd(self.pd) };
        if r != 0 {
            tracing::warn!("ibv_dealloc_pd: {r}");
        }
    }
}

/// `ibv_mr` over memory the MR owns (allocated here, registered in place,
/// freed after deregistration): the same ownership model as the soft MR.
pub(crate) struct RcMr {
    mr: *mut IbvMr,
    /// Keys and buffer (`pd` field unused here).
    pub(crate) inner: MrInner,
}

// SAFETY: see RcDevice; the buffer follows the DMA contract of `crate::mr`.
unsafe impl Send for RcMr {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcMr {}

pub(crate) fn reg_mr(pd: &RcPd, len: usize, access: AccessFlags) -> Result<RcMr> {
    let mem = MrMem::new(len).ok_or(Error::NoMem)?;
    let mut inner = MrInner {
        mem,
        lkey: 0,
        rkey: 0,
        access,
        pd: 0,
        remote_invalid: Default::default(),
    };
    // SAFETY: pd is live; the buffer is `len` bytes we own and keep until after
    // ibv_dereg_mr (Drop below deregisters before `inner` is freed).
    let mr = unsafe {
        ibv_reg_mr(
            pd.pd,
            inner.as_ptr() as *mut libc::c_void,
            len,
            access.bits() as i32,
        )
    };
    if mr.is_null() {
        return Err(last_errno());
    }
    // SAFETY: mr is live.
    unsafe {
        inner.lkey = (*mr).lkey;
        inner.rkey = (*mr).rkey;
    }
    Ok(RcMr { mr, inner })
}

impl Drop for RcMr {
    fn drop(&mut self) {
        // SAFETY: registered in reg_mr, deregistered once; the buffer is freed
        // after this (field drop order).
        let r = unsafe { ibv_dereg_mr(self.mr) };
        if r != 0 {
            tracing::warn!("ibv_dereg_mr: {r}");
        }
    }
}

/// `ibv_comp_channel`.
pub(crate) struct RcChannel {
    ch: *mut IbvCompChannel,
    _dev: Arc<RcDevice>,
}

// SAFETY: see RcDevice.
unsafe impl Send for RcChannel {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcChannel {}

impl RcChannel {
    pub(crate) fn new(dev: &Arc<RcDevice>) -> Result<Arc<RcChannel>> {
        // SAFETY: ctx is live.
        let ch = unsafe { ibv_create_comp_channel(dev.ctx) };
        if ch.is_null() {
            return Err(last_errno());
        }
        Ok(Arc::new(RcChannel {
            ch,
            _dev: dev.clone(),
        }))
    }
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: ch is live; reads a plain int field.
        unsafe { (*self.ch).fd }
    }
    /// Waits up to `timeout_ms` for the channel's fd, then `ibv_get_cq_event`;
    /// the event is acked at once (so `ibv_destroy_cq` never waits on an
    /// un-acked event; `Cq::ack_events` has nothing left to do).
    pub(crate) fn get_cq_event(&self, timeout_ms: i32) -> Result<u32> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one live pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if n < 0 {
            return Err(Error::Io(std::io::Error::last_os_error()));
        }
        if n == 0 {
            return Err(Error::Again);
        }
        let mut cq = null_mut();
        let mut cq_ctx = null_mut();
        // SAFETY: ch is live; out-parameters are live locals.
        if unsafe { ibv_get_cq_event(self.ch, &mut cq, &mut cq_ctx) } != 0 {
            return Err(last_errno());
        }
        // SAFETY: `cq` is the CQ the event names, alive (destroy waits for acks).
        unsafe { ibv_ack_cq_events(cq, 1) };
        Ok(cq_ctx as usize as u32)
    }
}

impl Drop for RcChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on the channel holds it (public CompChannel clone), so
        // none is left; destroyed once.
        let r = unsafe { ibv_destroy_comp_channel(self.ch) };
        if r != 0 {
            tracing::warn!("ibv_destroy_comp_channel: {r}");
        }
    }
}

/// `ibv_cq`.
pub(crate) struct RcCq {
    pub(crate) cq: *mut IbvCq,
    pub(crate) id: u32,
}

// SAFETY: see RcDevice.
unsafe impl Send for RcCq {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcCq {}

pub(crate) fn create_cq(
    dev: &Arc<RcDevice>,
    cqe: usize,
    ch: Option<&Arc<RcChannel>>,
) -> Result<RcCq> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // SAFETY: ctx and (if any) the channel are live; cq_context carries the id.
    let cq = unsafe {
        ibv_create_cq(
            dev.ctx,
            cqe.min(i32::MAX as usize) as i32,
            id as usize as *mut libc::c_void,
            ch.map_or(null_mut(), |c| c.ch),
            0,
        )
    };
    if cq.is_null() {
        return Err(last_errno());
    }
    Ok(RcCq { cq, id })
}

fn wc_status(s: i32) -> WcStatus {
    use WcStatus::*;
    const T: [WcStatus; 22] = [
        Success,
        LocLenErr,
        LocQpOpErr,
        LocEecOpErr,
        LocProtErr,
        WrFlushErr,
        MwBindErr,
        BadRespErr,
        LocAccessErr,
        RemInvReqErr,
        RemAccessErr,
        RemOpErr,
        RetryExcErr,
        RnrRetryExcErr,
        LocRddViolErr,
        RemInvRdReqErr,
        RemAbortErr,
        InvEecnErr,
        InvEecStateErr,
        FatalErr,
        RespTimeoutErr,
        GeneralErr,
    ];
    T.get(s.max(0) as usize).copied().unwrap_or(GeneralErr)
}

fn wc_opcode(o: i32) -> WcOpcode {
    match o {
        0 => WcOpcode::Send,
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::CompSwap,
        4 => WcOpcode::FetchAdd,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Recv,
    }
}

impl RcCq {
    pub(crate) fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        // uninitialised: the provider writes the first `n` entries and only
        // those are read (zeroing 32 entries on every poll was ~1.5 KiB of
        // stores per empty poll in a busy loop)
        let mut raw = [const { std::mem::MaybeUninit::<IbvWc>::uninit() }; 32];
        let mut done = 0;
        while done < wc.len() {
            let want = (wc.len() - done).min(raw.len());
            // SAFETY: cq is live; `raw` has room for `want` entries; the op
            // pointer is the provider's poll_cq (the inline ibv_poll_cq).
            let n = unsafe {
                let f = (*(*self.cq).context).ops.poll_cq.ok_or(Error::Inval)?;
                f(self.cq, want as i32, raw.as_mut_ptr().cast::<IbvWc>())
            };
            if n < 0 {
                return Err(errno_error(-n));
            }
            for (d, s) in wc[done..].iter_mut().zip(&raw[..n as usize]) {
                // SAFETY: poll_cq wrote entries 0..n (n <= want <= raw.len()).
                let s = unsafe { s.assume_init_ref() };
                *d = Wc {
                    wr_id: s.wr_id,
                    status: wc_status(s.status),
                    opcode: wc_opcode(s.opcode),
                    vendor_err: s.vendor_err,
                    byte_len: s.byte_len,
                    // with IBV_WC_WITH_INV the union holds `invalidated_rkey`
                    // (host order), else the __be32 `imm_data`
                    imm_data: if WcFlags::from_bits_truncate(s.wc_flags).contains(WcFlags::WITH_INV)
                    {
                        s.imm_data
                    } else {
                        u32::from_be(s.imm_data)
                    },
                    qp_num: s.qp_num,
                    src_qp: s.src_qp,
                    wc_flags: WcFlags::from_bits_truncate(s.wc_flags),
                    pkey_index: s.pkey_index,
                    slid: s.slid,
                    sl: s.sl,
                    dlid_path_bits: s.dlid_path_bits,
                };
            }
            done += n as usize;
            if (n as usize) < want {
                break;
            }
        }
        Ok(done)
    }
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: cq is live; the provider's req_notify_cq (inline in verbs.h).
        rc(unsafe {
            let f = (*(*self.cq).context)
                .ops
                .req_notify_cq
                .ok_or(Error::Inval)?;
            f(self.cq, solicited_only as i32)
        })
    }
}

impl Drop for RcCq {
    fn drop(&mut self) {
        // SAFETY: no QP holds the CQ any more (public handles); events were
        // acked as they were read; destroyed once.
        let r = unsafe { ibv_destroy_cq(self.cq) };
        if r != 0 {
            tracing::warn!("ibv_destroy_cq: {r}");
        }
    }
}

/// Posts `wrs` in chunks of `N` linked WRs built on the stack (no allocation
/// per post). `fill` writes entry `i`; `post` posts a chain and returns the
/// index (within the chunk) of the bad WR on failure.
const CHUNK: usize = 16;

fn recv_chain(
    wrs: &[RecvWr],
    mut post: impl FnMut(*mut IbvRecvWr, &mut *mut IbvRecvWr) -> i32,
) -> std::result::Result<(), BadWr> {
    // uninitialised: each posted entry is written whole below
    let mut buf = [const { std::mem::MaybeUninit::<IbvRecvWr>::uninit() }; CHUNK];
    for (c, chunk) in wrs.chunks(CHUNK).enumerate() {
        let base = buf.as_mut_ptr().cast::<IbvRecvWr>();
        for (i, w) in chunk.iter().enumerate() {
            buf[i].write(IbvRecvWr {
                wr_id: w.wr_id,
                next: if i + 1 < chunk.len() {
                    // SAFETY: i + 1 < CHUNK, inside `buf`.
                    unsafe { base.add(i + 1) }
                } else {
                    null_mut()
                },
                // crate::Sge is repr(C) with ibv_sge's layout (abi test)
                sg_list: w.sg_list.as_ptr() as *mut IbvSge,
                num_sge: w.sg_list.len() as i32,
            });
        }
        let mut bad = null_mut();
        let r = post(base, &mut bad);
        if r != 0 {
            let i = if bad.is_null() {
                0
            } else {
                // SAFETY: `bad` points into `buf` (rdma-core names the failed WR).
                unsafe { bad.offset_from(base) }.max(0) as usize
            };
            return Err(BadWr {
                index: c * CHUNK + i,
                error: errno_error(r.abs()),
            });
        }
    }
    Ok(())
}

/// `ibv_srq`.
pub(crate) struct RcSrq {
    srq: *mut IbvSrq,
    pub(crate) id: u32,
}

// SAFETY: see RcDevice.
unsafe impl Send for RcSrq {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcSrq {}

pub(crate) fn create_srq(pd: &RcPd, max_wr: u32, max_sge: u32, limit: u32) -> Result<RcSrq> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut a = IbvSrqInitAttr {
        srq_context: id as usize as *mut libc::c_void,
        attr: IbvSrqAttr {
            max_wr,
            max_sge,
            srq_limit: limit,
        },
    };
    // SAFETY: pd is live; `a` is a live init attr.
    let srq = unsafe { ibv_create_srq(pd.pd, &mut a) };
    if srq.is_null() {
        return Err(last_errno());
    }
    Ok(RcSrq { srq, id })
}

impl RcSrq {
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        recv_chain(wrs, |w, bad| {
            // SAFETY: srq is live; `w` is a valid chain whose SG lists outlive
            // the call; the provider's post_srq_recv (inline in verbs.h).
            unsafe {
                match (*(*self.srq).context).ops.post_srq_recv {
                    Some(f) => f(self.srq, w, bad),
                    None => libc::EOPNOTSUPP,
                }
            }
        })
    }
    pub(crate) fn set_limit(&self, limit: u32) -> Result<()> {
        let mut a = IbvSrqAttr {
            srq_limit: limit,
            ..Default::default()
        };
        // SAFETY: srq is live; `a` is a live attr.
        rc(unsafe { ibv_modify_srq(self.srq, &mut a, IBV_SRQ_LIMIT) })
    }
}

impl Drop for RcSrq {
    fn drop(&mut self) {
        // SAFETY: no QP holds the SRQ any more; destroyed once.
        let r = unsafe { ibv_destroy_srq(self.srq) };
        if r != 0 {
            tracing::warn!("ibv_destroy_srq: {r}");
        }
    }
}

/// `ibv_qp`. Holds its PD's provider object for UD address handles.
pub(crate) struct RcQp {
    qp: *mut IbvQp,
    pub(crate) qpn: u32,
    pd: *const RcPd,
}

// SAFETY: see RcDevice; `pd` points into the public PdInner that the public QP
// holds (it outlives this object, which is dropped first).
unsafe impl Send for RcQp {}
// SAFETY: see RcDevice.
unsafe impl Sync for RcQp {}

pub(crate) struct RcQpSpec<'a> {
    pub qp_type: QpType,
    pub send_cq: &'a RcCq,
    pub recv_cq: &'a RcCq,
    pub srq: Option<&'a RcSrq>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

/// Creates a QP. `pd` must stay where it is while the QP lives (it is the
/// provider object inside the public `Pd`, which the public `Qp` holds).
pub(crate) fn create_qp(pd: &RcPd, s: &RcQpSpec) -> Result<RcQp> {
    let mut a = IbvQpInitAttr {
        qp_context: null_mut(),
        send_cq: s.send_cq.cq,
        recv_cq: s.recv_cq.cq,
        srq: s.srq.map_or(null_mut(), |x| x.srq),
        cap: IbvQpCap {
            max_send_wr: s.cap.max_send_wr,
            max_recv_wr: s.cap.max_recv_wr,
            max_send_sge: s.cap.max_send_sge,
            max_recv_sge: s.cap.max_recv_sge,
            max_inline_data: s.cap.max_inline_data,
        },
        qp_type: s.qp_type as i32,
        sq_sig_all: s.sq_sig_all as i32,
    };
    // SAFETY: pd, CQs and SRQ are live; `a` is a live init attr.
    let qp = unsafe { ibv_create_qp(pd.pd, &mut a) };
    if qp.is_null() {
        return Err(last_errno());
    }
    // SAFETY: qp is live.
    let qpn = unsafe { (*qp).qp_num };
    Ok(RcQp { qp, qpn, pd })
}

fn state_from(v: i32) -> QpState {
    match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        _ => QpState::Err,
    }
}

fn wr_opcode(o: WrOpcode) -> i32 {
    match o {
        WrOpcode::RdmaWrite => 0,
        WrOpcode::RdmaWriteWithImm => 1,
        WrOpcode::Send => 2,
        WrOpcode::SendWithImm => 3,
        WrOpcode::RdmaRead => 4,
        WrOpcode::AtomicCmpAndSwp => 5,
        WrOpcode::AtomicFetchAndAdd => 6,
        WrOpcode::SendWithInv => 9,
    }
}

impl RcQp {
    fn pd(&self) -> &RcPd {
        // SAFETY: see the Send impl: the PD object outlives the QP object.
        unsafe { &*self.pd }
    }
    pub(crate) fn modify(&self, a: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let ah = &a.ah_attr;
        let mut r = IbvQpAttr {
            qp_state: a.qp_state as i32,
            cur_qp_state: a.cur_qp_state as i32,
            path_mtu: a.path_mtu as i32,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: a.qp_access_flags.bits(),
            cap: IbvQpCap {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
            ah_attr: IbvAhAttr {
                grh: IbvGlobalRoute {
                    dgid: IbvGid { raw: ah.dgid.0 },
                    flow_label: 0,
                    sgid_index: ah.sgid_index,
                    hop_limit: ah.hop_limit,
                    traffic_class: ah.traffic_class,
                },
                sl: ah.sl,
                is_global: 1,
                port_num: ah.port_num,
                ..Default::default()
            },
            pkey_index: a.pkey_index,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: a.port_num,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            ..Default::default()
        };
        // SAFETY: qp is live; `r` is a live attr; the mask bits are rdma-core's.
        rc(unsafe { ibv_modify_qp(self.qp, &mut r, mask.bits() as i32) })
    }
    pub(crate) fn query(&self) -> Result<QpAttr> {
        let mut r = IbvQpAttr::default();
        // SAFETY: all-zero is a valid init attr (null pointers, integers).
        let mut init: IbvQpInitAttr = unsafe { std::mem::zeroed() };
        // SAFETY: qp is live; both out-parameters are live locals.
        rc(unsafe { ibv_query_qp(self.qp, &mut r, IBV_QP_ALL_MASK, &mut init) })?;
        let g = &r.ah_attr.grh;
        Ok(QpAttr {
            qp_state: state_from(r.qp_state),
            cur_qp_state: state_from(r.cur_qp_state),
            path_mtu: mtu_from(r.path_mtu),
            qkey: r.qkey,
            rq_psn: r.rq_psn,
            sq_psn: r.sq_psn,
            dest_qp_num: r.dest_qp_num,
            qp_access_flags: AccessFlags::from_bits_truncate(r.qp_access_flags),
            cap: QpCap {
                max_send_wr: r.cap.max_send_wr,
                max_recv_wr: r.cap.max_recv_wr,
                max_send_sge: r.cap.max_send_sge,
                max_recv_sge: r.cap.max_recv_sge,
                max_inline_data: r.cap.max_inline_data,
            },
            ah_attr: AhAttr {
                dgid: Gid(g.dgid.raw),
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
                sl: r.ah_attr.sl,
                port_num: r.ah_attr.port_num,
                dport: wire::roce::ROCE_PORT,
            },
            pkey_index: r.pkey_index,
            sq_draining: r.sq_draining != 0,
            max_rd_atomic: r.max_rd_atomic,
            max_dest_rd_atomic: r.max_dest_rd_atomic,
            min_rnr_timer: r.min_rnr_timer,
            port_num: r.port_num,
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
        })
    }
    pub(crate) fn post_send(&self, wrs: &[SendWr]) -> std::result::Result<(), BadWr> {
        let zero = IbvSendWr {
            wr_id: 0,
            next: null_mut(),
            sg_list: null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            wr: IbvSendWrWr::default(),
            qp_type: 0,
            tail: [0; 6],
        };
        // uninitialised: each posted entry is written whole below (a zeroed
        // array cost 16 x 128 B of stores per post, most posts carry one WR)
        let mut buf = [const { std::mem::MaybeUninit::<IbvSendWr>::uninit() }; CHUNK];
        for (c, chunk) in wrs.chunks(CHUNK).enumerate() {
            let base = buf.as_mut_ptr().cast::<IbvSendWr>();
            for (i, w) in chunk.iter().enumerate() {
                let wr = match w.wr {
                    WrDetail::None => IbvSendWrWr::default(),
                    WrDetail::Rdma { remote_addr, rkey } => IbvSendWrWr {
                        a: remote_addr,
                        b: rkey as u64,
                        ..Default::default()
                    },
                    WrDetail::Atomic {
                        remote_addr,
                        compare_add,
                        swap,
                        rkey,
                    } => IbvSendWrWr {
                        a: remote_addr,
                        b: compare_add,
                        c: swap,
                        d: rkey,
                    },
                    WrDetail::Ud {
                        ah,
                        remote_qpn,
                        remote_qkey,
                    } => {
                        let attr = AhAttr {
                            dgid: Gid::from_ipv4(ah.ip),
                            sgid_index: self.pd().dev.ip_gid_index as u8,
                            hop_limit: 1,
                            port_num: 1,
                            ..Default::default()
                        };
                        let ah = self.pd().ah_for(&attr).map_err(|error| BadWr {
                            index: c * CHUNK + i,
                            error,
                        })?;
                        IbvSendWrWr {
                            a: ah as u64,
                            // little-endian: remote_qpn at +8, remote_qkey at +12
                            b: remote_qpn as u64 | (remote_qkey as u64) << 32,
                            ..Default::default()
                        }
                    }
                };
                buf[i].write(IbvSendWr {
                    wr_id: w.wr_id,
                    next: if i + 1 < chunk.len() {
                        // SAFETY: i + 1 < CHUNK, inside `buf`.
                        unsafe { base.add(i + 1) }
                    } else {
                        null_mut()
                    },
                    sg_list: w.sg_list.as_ptr() as *mut IbvSge,
                    num_sge: w.sg_list.len() as i32,
                    opcode: wr_opcode(w.opcode),
                    send_flags: w.send_flags.bits(),
                    // `imm_data` is __be32; `invalidate_rkey` (its union twin,
                    // SEND_WITH_INV) is a host-order u32
                    imm_data: if w.opcode == WrOpcode::SendWithInv {
                        w.imm_data
                    } else {
                        w.imm_data.to_be()
                    },
                    wr,
                    ..zero
                });
            }
            let mut bad = null_mut();
            // SAFETY: qp is live; `buf[..chunk.len()]` is a valid chain whose SG
            // lists (the caller's slices) outlive the call; the provider's
            // post_send (inline ibv_post_send in verbs.h).
            let r = unsafe {
                match (*(*self.qp).context).ops.post_send {
                    Some(f) => f(self.qp, base, &mut bad),
                    None => libc::EOPNOTSUPP,
                }
            };
            if r != 0 {
                let i = if bad.is_null() {
                    0
                } else {
                    // SAFETY: `bad` points into `buf`.
                    unsafe { bad.offset_from(base) }.max(0) as usize
                };
                return Err(BadWr {
                    index: c * CHUNK + i,
                    error: errno_error(r.abs()),
                });
            }
        }
        Ok(())
    }
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> std::result::Result<(), BadWr> {
        recv_chain(wrs, |w, bad| {
            // SAFETY: qp is live; `w` is a valid chain (see recv_chain).
            unsafe {
                match (*(*self.qp).context).ops.post_recv {
                    Some(f) => f(self.qp, w, bad),
                    None => libc::EOPNOTSUPP,
                }
            }
        })
    }
}

impl Drop for RcQp {
    fn drop(&mut self) {
        // SAFETY: created in create_qp, destroyed once, before its PD/CQs/SRQ.
        let r = unsafe { ibv_destroy_qp(self.qp) };
        if r != 0 {
            tracing::warn!("ibv_destroy_qp: {r}");
        }
    }
}
