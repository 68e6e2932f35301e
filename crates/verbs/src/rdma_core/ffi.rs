//! The part of libibverbs (`<infiniband/verbs.h>`, rdma-core 44) this provider
//! calls, declared by hand. Every struct here has the C layout of Debian's
//! headers; the unit test `abi` below compiles a C probe against the installed
//! headers and compares each size and each field offset we use.
//!
//! The data-path verbs of verbs.h (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) are `static inline`
//! C functions that call through `context->ops`: they are not exported by
//! libibverbs.so.1, so [`IbvContextOps`] declares the function pointers and the
//! provider calls them the same way.

#![allow(non_camel_case_types, dead_code)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t};

/// `union ibv_gid`: 16 bytes, 8-aligned (its `global` view is two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct IbvGid {
    pub raw: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvGidEntry {
    pub gid: IbvGid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// Opaque: read only through `ibv_get_device_name` / `ibv_get_device_guid`.
#[repr(C)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// `struct ibv_context_ops`: 32 pointers; the five the inline verbs use are
/// named, the others (compat entries, memory windows) are padding.
#[repr(C)]
pub struct IbvContextOps {
    _pad0: [*mut c_void; 11],
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    _pad1: [*mut c_void; 7],
    pub post_srq_recv: Option<PostSrqRecvFn>,
    _pad2: [*mut c_void; 4],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    _pad3: [*mut c_void; 5],
}

#[repr(C)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: IbvContextOps,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

#[repr(C)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

pub const IBV_ATOMIC_HCA: c_int = 1;

#[repr(C)]
pub struct IbvPortAttr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

pub const IBV_PORT_ACTIVE: c_int = 4;

#[repr(C)]
pub struct IbvAsyncEvent {
    /// The union `element` (cq / qp / srq / wq pointer, or port_num).
    pub element: *mut c_void,
    pub event_type: c_int,
}

pub const IBV_EVENT_CQ_ERR: c_int = 0;
pub const IBV_EVENT_QP_FATAL: c_int = 1;
pub const IBV_EVENT_QP_REQ_ERR: c_int = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
pub const IBV_EVENT_DEVICE_FATAL: c_int = 8;
pub const IBV_EVENT_PORT_ACTIVE: c_int = 9;
pub const IBV_EVENT_PORT_ERR: c_int = 10;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: c_int = 16;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

pub const IBV_WC_RECV: c_int = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_int = IBV_WC_RECV + 1;

#[repr(C)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

#[repr(C)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: size_t,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// Opaque.
#[repr(C)]
pub struct IbvAh {
    _opaque: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

#[repr(C)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`; `crate::Sge` has the same `repr(C)` layout (asserted in
/// the `abi` test), so SG lists are passed to the provider without copying.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr` union of `ibv_send_wr` in its largest form (atomic); `rdma` and
/// `ud` overlay its first fields.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvSendWrWr {
    /// rdma.remote_addr / atomic.remote_addr / ud.ah (pointer)
    pub a: u64,
    /// rdma.rkey (low 32 bits) / atomic.compare_add / ud.remote_qpn + remote_qkey
    pub b: u64,
    /// atomic.swap
    pub c: u64,
    /// atomic.rkey
    pub d: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: IbvSendWrWr,
    /// `qp_type` union (xrc remote_srqn).
    pub qp_type: u32,
    /// The bind_mw / tso union (unused here): 48 bytes, 8-aligned.
    pub tail: [u64; 6],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

pub const IBV_QP_ALL_MASK: c_int = (1 << 21) - 1;

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice;
    pub fn ibv_free_device_list(list: *mut *mut IbvDevice);
    pub fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char;
    pub fn ibv_get_device_guid(device: *mut IbvDevice) -> u64;
    pub fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext;
    pub fn ibv_close_device(context: *mut IbvContext) -> c_int;
    pub fn ibv_query_device(context: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int;
    /// The exported (compat) symbol: fills the `ibv_port_attr` fields up to
    /// `link_layer` (the header's inline wrapper prefers a newer op; the
    /// fields we read are in both).
    pub fn ibv_query_port(context: *mut IbvContext, port: u8, attr: *mut IbvPortAttr) -> c_int;
    pub fn ibv_query_gid(
        context: *mut IbvContext,
        port: u8,
        index: c_int,
        gid: *mut IbvGid,
    ) -> c_int;
    pub fn _ibv_query_gid_ex(
        context: *mut IbvContext,
        port_num: u32,
        gid_index: u32,
        entry: *mut IbvGidEntry,
        flags: u32,
        entry_size: size_t,
    ) -> c_int;
    pub fn ibv_get_async_event(context: *mut IbvContext, event: *mut IbvAsyncEvent) -> c_int;
    pub fn ibv_ack_async_event(event: *mut IbvAsyncEvent);
    pub fn ibv_alloc_pd(context: *mut IbvContext) -> *mut IbvPd;
    pub fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int;
    pub fn ibv_reg_mr(
        pd: *mut IbvPd,
        addr: *mut c_void,
        length: size_t,
        access: c_int,
    ) -> *mut IbvMr;
    pub fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
    pub fn ibv_create_comp_channel(context: *mut IbvContext) -> *mut IbvCompChannel;
    pub fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int;
    pub fn ibv_create_cq(
        context: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut IbvCompChannel,
        comp_vector: c_int,
    ) -> *mut IbvCq;
    pub fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    pub fn ibv_get_cq_event(
        channel: *mut IbvCompChannel,
        cq: *mut *mut IbvCq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut IbvCq, nevents: c_uint);
    pub fn ibv_create_srq(pd: *mut IbvPd, attr: *mut IbvSrqInitAttr) -> *mut IbvSrq;
    pub fn ibv_modify_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr, mask: c_int) -> c_int;
    pub fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int;
    pub fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    pub fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int;
    pub fn ibv_query_qp(
        qp: *mut IbvQp,
        attr: *mut IbvQpAttr,
        mask: c_int,
        init_attr: *mut IbvQpInitAttr,
    ) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
    pub fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh;
    pub fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int;
}

/// Compiles and runs a C program `src` printing `name value` lines (struct
/// sizes, field offsets, constants taken from the installed headers) and
/// returns them: the ABI checks of the hand-written bindings here and in the
/// `cm` crate's librdmacm binding. Panics when the probe does not build
/// (`pkg`: the Debian package with the headers) or does not run.
#[doc(hidden)]
pub fn abi_probe(tag: &str, src: &str, pkg: &str) -> std::collections::HashMap<String, usize> {
    let dir = std::env::temp_dir().join(format!("{tag}-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("probe directory");
    let (c, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&c, src).expect("writing the probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = std::process::Command::new(&cc)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("running the C compiler");
    assert!(
        st.success(),
        "the C probe did not compile ({pkg} installed?)"
    );
    let out = std::process::Command::new(&exe)
        .output()
        .expect("running the probe");
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("a `name value` line");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

#[cfg(test)]
mod abi {
    //! Sizes and offsets against the installed headers: a C probe printing
    //! `name value` lines, compiled with the system C compiler.
    use super::*;
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};

    const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <infiniband/verbs.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t));
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f));
int main(void) {
  S(ibv_gid_entry) S(ibv_context_ops) S(ibv_context) S(ibv_device_attr) S(ibv_port_attr)
  S(ibv_async_event) S(ibv_wc) S(ibv_pd) S(ibv_mr) S(ibv_global_route) S(ibv_ah_attr)
  S(ibv_srq_attr) S(ibv_srq_init_attr) S(ibv_srq) S(ibv_comp_channel) S(ibv_cq) S(ibv_qp_cap)
  S(ibv_qp_init_attr) S(ibv_qp) S(ibv_qp_attr) S(ibv_sge) S(ibv_send_wr) S(ibv_recv_wr)
  O(ibv_context_ops, poll_cq) O(ibv_context_ops, req_notify_cq) O(ibv_context_ops, post_srq_recv)
  O(ibv_context_ops, post_send) O(ibv_context_ops, post_recv)
  O(ibv_context, ops) O(ibv_context, async_fd)
  O(ibv_device_attr, node_guid) O(ibv_device_attr, max_qp) O(ibv_device_attr, atomic_cap)
  O(ibv_device_attr, max_srq_sge) O(ibv_device_attr, phys_port_cnt)
  O(ibv_port_attr, gid_tbl_len) O(ibv_port_attr, lid) O(ibv_port_attr, link_layer)
  O(ibv_async_event, event_type)
  O(ibv_wc, imm_data) O(ibv_wc, wc_flags) O(ibv_wc, dlid_path_bits)
  O(ibv_mr, lkey) O(ibv_mr, rkey)
  O(ibv_ah_attr, dlid) O(ibv_ah_attr, is_global) O(ibv_ah_attr, port_num)
  O(ibv_global_route, sgid_index)
  O(ibv_srq_init_attr, attr) O(ibv_cq, cq_context) O(ibv_comp_channel, fd)
  O(ibv_qp_init_attr, cap) O(ibv_qp_init_attr, qp_type) O(ibv_qp_init_attr, sq_sig_all)
  O(ibv_qp, qp_num) O(ibv_qp, state)
  O(ibv_qp_attr, qp_access_flags) O(ibv_qp_attr, cap) O(ibv_qp_attr, ah_attr)
  O(ibv_qp_attr, pkey_index) O(ibv_qp_attr, max_rd_atomic) O(ibv_qp_attr, rnr_retry)
  O(ibv_qp_attr, rate_limit)
  O(ibv_send_wr, num_sge) O(ibv_send_wr, imm_data) O(ibv_send_wr, wr)
  O(ibv_send_wr, wr.atomic.rkey) O(ibv_send_wr, wr.ud.remote_qpn) O(ibv_send_wr, wr.ud.remote_qkey)
  O(ibv_send_wr, wr.rdma.rkey) O(ibv_send_wr, qp_type) O(ibv_send_wr, bind_mw)
  O(ibv_recv_wr, num_sge)
  printf("IBV_WC_RECV %d\n", (int)IBV_WC_RECV);
  printf("IBV_EVENT_QP_LAST_WQE_REACHED %d\n", (int)IBV_EVENT_QP_LAST_WQE_REACHED);
  printf("IBV_PORT_ACTIVE %d\n", (int)IBV_PORT_ACTIVE);
  printf("IBV_EVENT_DEVICE_FATAL %d\n", (int)IBV_EVENT_DEVICE_FATAL);
  printf("IBV_EVENT_PORT_ACTIVE %d\n", (int)IBV_EVENT_PORT_ACTIVE);
  printf("IBV_EVENT_PORT_ERR %d\n", (int)IBV_EVENT_PORT_ERR);
  return 0;
}
"#;

    fn probe() -> HashMap<String, usize> {
        abi_probe("verbs", PROBE, "libibverbs-dev")
    }

    #[test]
    fn layouts_match_the_installed_headers() {
        let c = probe();
        let mut bad = Vec::new();
        let mut check = |k: &str, rust: usize| match c.get(k) {
            Some(&v) if v == rust => {}
            other => bad.push(format!("{k}: C {other:?}, Rust {rust}")),
        };
        check("ibv_gid_entry", size_of::<IbvGidEntry>());
        check("ibv_context_ops", size_of::<IbvContextOps>());
        check("ibv_context", size_of::<IbvContext>());
        check("ibv_device_attr", size_of::<IbvDeviceAttr>());
        check("ibv_port_attr", size_of::<IbvPortAttr>());
        check("ibv_async_event", size_of::<IbvAsyncEvent>());
        check("ibv_wc", size_of::<IbvWc>());
        check("ibv_pd", size_of::<IbvPd>());
        check("ibv_mr", size_of::<IbvMr>());
        check("ibv_global_route", size_of::<IbvGlobalRoute>());
        check("ibv_ah_attr", size_of::<IbvAhAttr>());
        check("ibv_srq_attr", size_of::<IbvSrqAttr>());
        check("ibv_srq_init_attr", size_of::<IbvSrqInitAttr>());
        check("ibv_srq", size_of::<IbvSrq>());
        check("ibv_comp_channel", size_of::<IbvCompChannel>());
        check("ibv_cq", size_of::<IbvCq>());
        check("ibv_qp_cap", size_of::<IbvQpCap>());
        check("ibv_qp_init_attr", size_of::<IbvQpInitAttr>());
        check("ibv_qp", size_of::<IbvQp>());
        check("ibv_qp_attr", size_of::<IbvQpAttr>());
        check("ibv_sge", size_of::<IbvSge>());
        check("ibv_send_wr", size_of::<IbvSendWr>());
        check("ibv_recv_wr", size_of::<IbvRecvWr>());
        check(
            "ibv_context_ops.poll_cq",
            offset_of!(IbvContextOps, poll_cq),
        );
        check(
            "ibv_context_ops.req_notify_cq",
            offset_of!(IbvContextOps, req_notify_cq),
        );
        check(
            "ibv_context_ops.post_srq_recv",
            offset_of!(IbvContextOps, post_srq_recv),
        );
        check(
            "ibv_context_ops.post_send",
            offset_of!(IbvContextOps, post_send),
        );
        check(
            "ibv_context_ops.post_recv",
            offset_of!(IbvContextOps, post_recv),
        );
        check("ibv_context.ops", offset_of!(IbvContext, ops));
        check("ibv_context.async_fd", offset_of!(IbvContext, async_fd));
        check(
            "ibv_device_attr.node_guid",
            offset_of!(IbvDeviceAttr, node_guid),
        );
        check("ibv_device_attr.max_qp", offset_of!(IbvDeviceAttr, max_qp));
        check(
            "ibv_device_attr.atomic_cap",
            offset_of!(IbvDeviceAttr, atomic_cap),
        );
        check(
            "ibv_device_attr.max_srq_sge",
            offset_of!(IbvDeviceAttr, max_srq_sge),
        );
        check(
            "ibv_device_attr.phys_port_cnt",
            offset_of!(IbvDeviceAttr, phys_port_cnt),
        );
        check(
            "ibv_port_attr.gid_tbl_len",
            offset_of!(IbvPortAttr, gid_tbl_len),
        );
        check("ibv_port_attr.lid", offset_of!(IbvPortAttr, lid));
        check(
            "ibv_port_attr.link_layer",
            offset_of!(IbvPortAttr, link_layer),
        );
        check(
            "ibv_async_event.event_type",
            offset_of!(IbvAsyncEvent, event_type),
        );
        check("ibv_wc.imm_data", offset_of!(IbvWc, imm_data));
        check("ibv_wc.wc_flags", offset_of!(IbvWc, wc_flags));
        check("ibv_wc.dlid_path_bits", offset_of!(IbvWc, dlid_path_bits));
        check("ibv_mr.lkey", offset_of!(IbvMr, lkey));
        check("ibv_mr.rkey", offset_of!(IbvMr, rkey));
        check("ibv_ah_attr.dlid", offset_of!(IbvAhAttr, dlid));
        check("ibv_ah_attr.is_global", offset_of!(IbvAhAttr, is_global));
        check("ibv_ah_attr.port_num", offset_of!(IbvAhAttr, port_num));
        check(
            "ibv_global_route.sgid_index",
            offset_of!(IbvGlobalRoute, sgid_index),
        );
        check("ibv_srq_init_attr.attr", offset_of!(IbvSrqInitAttr, attr));
        check("ibv_cq.cq_context", offset_of!(IbvCq, cq_context));
        check("ibv_comp_channel.fd", offset_of!(IbvCompChannel, fd));
        check("ibv_qp_init_attr.cap", offset_of!(IbvQpInitAttr, cap));
        check(
            "ibv_qp_init_attr.qp_type",
            offset_of!(IbvQpInitAttr, qp_type),
        );
        check(
            "ibv_qp_init_attr.sq_sig_all",
            offset_of!(IbvQpInitAttr, sq_sig_all),
        );
        check("ibv_qp.qp_num", offset_of!(IbvQp, qp_num));
        check("ibv_qp.state", offset_of!(IbvQp, state));
        check(
            "ibv_qp_attr.qp_access_flags",
            offset_of!(IbvQpAttr, qp_access_flags),
        );
        check("ibv_qp_attr.cap", offset_of!(IbvQpAttr, cap));
        check("ibv_qp_attr.ah_attr", offset_of!(IbvQpAttr, ah_attr));
        check("ibv_qp_attr.pkey_index", offset_of!(IbvQpAttr, pkey_index));
        check(
            "ibv_qp_attr.max_rd_atomic",
            offset_of!(IbvQpAttr, max_rd_atomic),
        );
        check("ibv_qp_attr.rnr_retry", offset_of!(IbvQpAttr, rnr_retry));
        check("ibv_qp_attr.rate_limit", offset_of!(IbvQpAttr, rate_limit));
        check("ibv_send_wr.num_sge", offset_of!(IbvSendWr, num_sge));
        check("ibv_send_wr.imm_data", offset_of!(IbvSendWr, imm_data));
        check("ibv_send_wr.wr", offset_of!(IbvSendWr, wr));
        let wr = offset_of!(IbvSendWr, wr);
        check(
            "ibv_send_wr.wr.atomic.rkey",
            wr + offset_of!(IbvSendWrWr, d),
        );
        check(
            "ibv_send_wr.wr.ud.remote_qpn",
            wr + offset_of!(IbvSendWrWr, b),
        );
        check(
            "ibv_send_wr.wr.ud.remote_qkey",
            wr + offset_of!(IbvSendWrWr, b) + 4,
        );
        check("ibv_send_wr.wr.rdma.rkey", wr + offset_of!(IbvSendWrWr, b));
        check("ibv_send_wr.qp_type", offset_of!(IbvSendWr, qp_type));
        check("ibv_send_wr.bind_mw", offset_of!(IbvSendWr, tail));
        check("ibv_recv_wr.num_sge", offset_of!(IbvRecvWr, num_sge));
        check("IBV_WC_RECV", IBV_WC_RECV as usize);
        check(
            "IBV_EVENT_QP_LAST_WQE_REACHED",
            IBV_EVENT_QP_LAST_WQE_REACHED as usize,
        );
        check("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE as usize);
        check("IBV_EVENT_DEVICE_FATAL", IBV_EVENT_DEVICE_FATAL as usize);
        check("IBV_EVENT_PORT_ACTIVE", IBV_EVENT_PORT_ACTIVE as usize);
        check("IBV_EVENT_PORT_ERR", IBV_EVENT_PORT_ERR as usize);
        // crate::Sge is handed to libibverbs as an ibv_sge array
        check("ibv_sge", size_of::<crate::Sge>());
        assert_eq!(offset_of!(crate::Sge, length), offset_of!(IbvSge, length));
        assert_eq!(offset_of!(crate::Sge, lkey), offset_of!(IbvSge, lkey));
        assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    }
}
