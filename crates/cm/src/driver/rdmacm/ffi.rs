//! The part of librdmacm (`<rdma/rdma_cma.h>`, rdma-core 44) the backend
//! calls, declared by hand as the verbs crate declares libibverbs (whose
//! `ibv_qp_attr` / `ibv_ah_attr` / `ibv_context` are reused from
//! `verbs::rdma_core::ffi`). The unit test `abi` below compiles a C probe
//! against the installed headers (librdmacm-dev) and compares every size and
//! field offset used.

#![allow(non_camel_case_types, dead_code)]

use libc::{c_int, c_void, size_t, sockaddr};
use verbs::rdma_core::ffi::{IbvAhAttr, IbvContext, IbvQp, IbvQpAttr};

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct RdmaEventChannel {
    pub fd: c_int,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage` (128
/// bytes, 8-aligned), then `struct rdma_ib_addr` (two GIDs + pkey, 40 bytes).
#[repr(C)]
pub struct RdmaAddr {
    pub src: [u64; 16],
    pub dst: [u64; 16],
    pub ibaddr: [u64; 5],
}

/// `struct rdma_route`.
#[repr(C)]
pub struct RdmaRoute {
    pub addr: RdmaAddr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct RdmaCmId {
    pub verbs: *mut IbvContext,
    pub channel: *mut RdmaEventChannel,
    pub context: *mut c_void,
    pub qp: *mut IbvQp,
    pub route: RdmaRoute,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut RdmaCmEvent,
    pub send_cq_channel: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq_channel: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub pd: *mut c_void,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaConnParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaUdParam {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: IbvAhAttr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaEventParam {
    pub conn: RdmaConnParam,
    pub ud: RdmaUdParam,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct RdmaCmEvent {
    pub id: *mut RdmaCmId,
    pub listen_id: *mut RdmaCmId,
    pub event: c_int,
    pub status: c_int,
    pub param: RdmaEventParam,
}

/// `struct ibv_ece` (verbs.h; used only through librdmacm here).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_MAX_RESP_RES: u8 = 0xff;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

#[link(name = "rdmacm")]
extern "C" {
    pub fn rdma_create_event_channel() -> *mut RdmaEventChannel;
    pub fn rdma_destroy_event_channel(channel: *mut RdmaEventChannel);
    pub fn rdma_create_id(
        channel: *mut RdmaEventChannel,
        id: *mut *mut RdmaCmId,
        context: *mut c_void,
        ps: c_int,
    ) -> c_int;
    pub fn rdma_destroy_id(id: *mut RdmaCmId) -> c_int;
    pub fn rdma_bind_addr(id: *mut RdmaCmId, addr: *mut sockaddr) -> c_int;
    pub fn rdma_resolve_addr(
        id: *mut RdmaCmId,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int;
    pub fn rdma_resolve_route(id: *mut RdmaCmId, timeout_ms: c_int) -> c_int;
    pub fn rdma_init_qp_attr(
        id: *mut RdmaCmId,
        qp_attr: *mut IbvQpAttr,
        qp_attr_mask: *mut c_int,
    ) -> c_int;
    pub fn rdma_connect(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int;
    pub fn rdma_establish(id: *mut RdmaCmId) -> c_int;
    pub fn rdma_listen(id: *mut RdmaCmId, backlog: c_int) -> c_int;
    pub fn rdma_accept(id: *mut RdmaCmId, conn_param: *mut RdmaConnParam) -> c_int;
    pub fn rdma_reject(id: *mut RdmaCmId, private_data: *const c_void, len: u8) -> c_int;
    pub fn rdma_disconnect(id: *mut RdmaCmId) -> c_int;
    pub fn rdma_get_cm_event(channel: *mut RdmaEventChannel, event: *mut *mut RdmaCmEvent)
        -> c_int;
    pub fn rdma_ack_cm_event(event: *mut RdmaCmEvent) -> c_int;
    pub fn rdma_set_option(
        id: *mut RdmaCmId,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: size_t,
    ) -> c_int;
    pub fn rdma_set_local_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int;
    pub fn rdma_get_remote_ece(id: *mut RdmaCmId, ece: *mut IbvEce) -> c_int;
}

#[cfg(test)]
mod abi {
    //! Sizes and offsets against the installed headers (librdmacm-dev): a C
    //! probe printing `name value` lines, compiled with the system C compiler.
    use super::*;
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};

    const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <rdma/rdma_cma.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t));
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f));
int main(void) {
  S(rdma_event_channel) S(rdma_addr) S(rdma_route) S(rdma_cm_id) S(rdma_conn_param)
  S(rdma_ud_param) S(rdma_cm_event) S(ibv_ece)
  O(rdma_addr, dst_addr) O(rdma_addr, addr)
  O(rdma_route, path_rec) O(rdma_route, num_paths)
  O(rdma_cm_id, verbs) O(rdma_cm_id, context) O(rdma_cm_id, qp) O(rdma_cm_id, route)
  O(rdma_cm_id, ps) O(rdma_cm_id, port_num) O(rdma_cm_id, event) O(rdma_cm_id, pd)
  O(rdma_cm_id, qp_type)
  O(rdma_conn_param, private_data_len) O(rdma_conn_param, responder_resources)
  O(rdma_conn_param, initiator_depth) O(rdma_conn_param, flow_control)
  O(rdma_conn_param, retry_count) O(rdma_conn_param, rnr_retry_count) O(rdma_conn_param, srq)
  O(rdma_conn_param, qp_num)
  O(rdma_ud_param, private_data_len) O(rdma_ud_param, ah_attr) O(rdma_ud_param, qp_num)
  O(rdma_ud_param, qkey)
  O(rdma_cm_event, listen_id) O(rdma_cm_event, event) O(rdma_cm_event, status)
  O(rdma_cm_event, param)
  O(ibv_ece, options) O(ibv_ece, comp_mask)
  printf("RDMA_PS_TCP %d\n", (int)RDMA_PS_TCP);
  printf("RDMA_PS_UDP %d\n", (int)RDMA_PS_UDP);
  printf("RDMA_CM_EVENT_TIMEWAIT_EXIT %d\n", (int)RDMA_CM_EVENT_TIMEWAIT_EXIT);
  printf("RDMA_CM_EVENT_CONNECT_RESPONSE %d\n", (int)RDMA_CM_EVENT_CONNECT_RESPONSE);
  printf("RDMA_OPTION_ID_ACK_TIMEOUT %d\n", (int)RDMA_OPTION_ID_ACK_TIMEOUT);
  printf("RDMA_OPTION_ID_REUSEADDR %d\n", (int)RDMA_OPTION_ID_REUSEADDR);
  return 0;
}
"#;

    fn probe() -> HashMap<String, usize> {
        verbs::rdma_core::ffi::abi_probe("cm", PROBE, "librdmacm-dev")
    }

    #[test]
    fn layouts_match_the_installed_headers() {
        let c = probe();
        let mut bad = Vec::new();
        let mut check = |k: &str, rust: usize| match c.get(k) {
            Some(&v) if v == rust => {}
            other => bad.push(format!("{k}: C {other:?}, Rust {rust}")),
        };
        check("rdma_event_channel", size_of::<RdmaEventChannel>());
        check("rdma_addr", size_of::<RdmaAddr>());
        check("rdma_route", size_of::<RdmaRoute>());
        check("rdma_cm_id", size_of::<RdmaCmId>());
        check("rdma_conn_param", size_of::<RdmaConnParam>());
        check("rdma_ud_param", size_of::<RdmaUdParam>());
        check("rdma_cm_event", size_of::<RdmaCmEvent>());
        check("ibv_ece", size_of::<IbvEce>());
        check("rdma_addr.dst_addr", offset_of!(RdmaAddr, dst));
        check("rdma_addr.addr", offset_of!(RdmaAddr, ibaddr));
        check("rdma_route.path_rec", offset_of!(RdmaRoute, path_rec));
        check("rdma_route.num_paths", offset_of!(RdmaRoute, num_paths));
        check("rdma_cm_id.verbs", offset_of!(RdmaCmId, verbs));
        check("rdma_cm_id.context", offset_of!(RdmaCmId, context));
        check("rdma_cm_id.qp", offset_of!(RdmaCmId, qp));
        check("rdma_cm_id.route", offset_of!(RdmaCmId, route));
        check("rdma_cm_id.ps", offset_of!(RdmaCmId, ps));
        check("rdma_cm_id.port_num", offset_of!(RdmaCmId, port_num));
        check("rdma_cm_id.event", offset_of!(RdmaCmId, event));
        check("rdma_cm_id.pd", offset_of!(RdmaCmId, pd));
        check("rdma_cm_id.qp_type", offset_of!(RdmaCmId, qp_type));
        check(
            "rdma_conn_param.private_data_len",
            offset_of!(RdmaConnParam, private_data_len),
        );
        check(
            "rdma_conn_param.responder_resources",
            offset_of!(RdmaConnParam, responder_resources),
        );
        check(
            "rdma_conn_param.initiator_depth",
            offset_of!(RdmaConnParam, initiator_depth),
        );
        check(
            "rdma_conn_param.flow_control",
            offset_of!(RdmaConnParam, flow_control),
        );
        check(
            "rdma_conn_param.retry_count",
            offset_of!(RdmaConnParam, retry_count),
        );
        check(
            "rdma_conn_param.rnr_retry_count",
            offset_of!(RdmaConnParam, rnr_retry_count),
        );
        check("rdma_conn_param.srq", offset_of!(RdmaConnParam, srq));
        check("rdma_conn_param.qp_num", offset_of!(RdmaConnParam, qp_num));
        check(
            "rdma_ud_param.private_data_len",
            offset_of!(RdmaUdParam, private_data_len),
        );
        check("rdma_ud_param.ah_attr", offset_of!(RdmaUdParam, ah_attr));
        check("rdma_ud_param.qp_num", offset_of!(RdmaUdParam, qp_num));
        check("rdma_ud_param.qkey", offset_of!(RdmaUdParam, qkey));
        check(
            "rdma_cm_event.listen_id",
            offset_of!(RdmaCmEvent, listen_id),
        );
        check("rdma_cm_event.event", offset_of!(RdmaCmEvent, event));
        check("rdma_cm_event.status", offset_of!(RdmaCmEvent, status));
        check("rdma_cm_event.param", offset_of!(RdmaCmEvent, param));
        check("ibv_ece.options", offset_of!(IbvEce, options));
        check("ibv_ece.comp_mask", offset_of!(IbvEce, comp_mask));
        check("RDMA_PS_TCP", 0x0106);
        check("RDMA_PS_UDP", 0x0111);
        check(
            "RDMA_CM_EVENT_TIMEWAIT_EXIT",
            crate::EventType::TimewaitExit as usize,
        );
        check(
            "RDMA_CM_EVENT_CONNECT_RESPONSE",
            crate::EventType::ConnectResponse as usize,
        );
        check(
            "RDMA_OPTION_ID_ACK_TIMEOUT",
            RDMA_OPTION_ID_ACK_TIMEOUT as usize,
        );
        check(
            "RDMA_OPTION_ID_REUSEADDR",
            RDMA_OPTION_ID_REUSEADDR as usize,
        );
        assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    }
}
