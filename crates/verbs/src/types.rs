//! The verbs vocabulary with rdma-core's names: access flags, opcodes, statuses,
//! QP states/attributes/masks, work requests and completions.

use std::net::Ipv4Addr;

bitflags::bitflags! {
    /// `ibv_access_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        const LOCAL_WRITE = 1;
        const REMOTE_WRITE = 1 << 1;
        const REMOTE_READ = 1 << 2;
        const REMOTE_ATOMIC = 1 << 3;
    }
}

bitflags::bitflags! {
    /// `ibv_send_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        const FENCE = 1;
        const SIGNALED = 1 << 1;
        const SOLICITED = 1 << 2;
        const INLINE = 1 << 3;
    }
}

bitflags::bitflags! {
    /// `ibv_wc_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        const GRH = 1;
        const WITH_IMM = 1 << 1;
        const WITH_INV = 1 << 3;
        /// Not in rdma-core's enum: set when the message had the Solicited Event bit.
        const SOLICITED = 1 << 31;
    }
}

bitflags::bitflags! {
    /// `ibv_qp_attr_mask`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        const STATE = 1;
        const CUR_STATE = 1 << 1;
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        const ACCESS_FLAGS = 1 << 3;
        const PKEY_INDEX = 1 << 4;
        const PORT = 1 << 5;
        const QKEY = 1 << 6;
        const AV = 1 << 7;
        const PATH_MTU = 1 << 8;
        const TIMEOUT = 1 << 9;
        const RETRY_CNT = 1 << 10;
        const RNR_RETRY = 1 << 11;
        const RQ_PSN = 1 << 12;
        const MAX_QP_RD_ATOMIC = 1 << 13;
        const ALT_PATH = 1 << 14;
        const MIN_RNR_TIMER = 1 << 15;
        const SQ_PSN = 1 << 16;
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        const PATH_MIG_STATE = 1 << 18;
        const CAP = 1 << 19;
        const DEST_QPN = 1 << 20;
    }
}

/// `ibv_wr_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    RdmaWrite,
    RdmaWriteWithImm,
    Send,
    SendWithImm,
    /// SEND that asks the responder to invalidate an R_Key (`IBV_WR_SEND_WITH_INV`,
    /// RC only): the key travels in [`SendWr::imm_data`], which is rdma-core's union
    /// of `imm_data` and `invalidate_rkey` (the key in host order).
    SendWithInv,
    RdmaRead,
    AtomicCmpAndSwp,
    AtomicFetchAndAdd,
}

impl WrOpcode {
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
}

/// `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
}

impl From<WrOpcode> for WcOpcode {
    fn from(o: WrOpcode) -> Self {
        match o {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }
}

/// `ibv_wc_status` (same numbering as rdma-core).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum WcStatus {
    #[default]
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    /// `ibv_wc_status_str`.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data in network byte order, as rdma-core's `__be32 imm_data`
    /// (i.e. `u32::from_be_bytes` of the 4 wire bytes); with [`WcFlags::WITH_INV`]
    /// the R_Key the sender invalidated (rdma-core's `invalidated_rkey` union member).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: WcFlags,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    #[default]
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

/// `ibv_qp_type` (RC, UC, UD), with rdma-core's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc = 2,
    /// Unreliable Connected: SEND and RDMA WRITE (with or without immediate)
    /// only; no ACKs, no retransmission (see docs/roce.md).
    Uc = 3,
    Ud = 4,
}

/// `ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    #[default]
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    pub fn bytes(self) -> usize {
        128 << (self as u32)
    }
    /// From 256..4096 (rdma-core's `pp_mtu_to_enum`).
    pub fn from_bytes(n: usize) -> Option<Mtu> {
        Some(match n {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The largest MTU not above an IP MTU, leaving room for IP/UDP/BTH headers.
    pub fn for_ip_mtu(ip_mtu: usize) -> Mtu {
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() + 20 + 8 + 12 + 28 + 4 <= ip_mtu)
            .unwrap_or(Mtu::Mtu256)
    }
}

/// A 16-byte GID. RoCEv2 over IPv4 uses the IPv4-mapped IPv6 form `::ffff:a.b.c.d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub fn from_ipv4(ip: Ipv4Addr) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip.octets());
        Gid(g)
    }
    pub fn to_ipv4(self) -> Option<Ipv4Addr> {
        if self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff {
            Some(Ipv4Addr::new(
                self.0[12], self.0[13], self.0[14], self.0[15],
            ))
        } else {
            None
        }
    }
}

/// Address vector (`ibv_ah_attr` reduced to what RoCEv2 needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    pub dgid: Gid,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub port_num: u8,
    /// Destination UDP port (4791 unless a test says otherwise).
    pub dport: u16,
}

/// `ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 0,
        }
    }
}

/// `ibv_qp_attr` (the fields RC/UD use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub qp_state: QpState,
    pub cur_qp_state: QpState,
    pub path_mtu: Mtu,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: AccessFlags,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub pkey_index: u16,
    pub sq_draining: bool,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 µs * 2^timeout (0 = infinite).
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7 = infinite.
    pub rnr_retry: u8,
}

/// Scatter/gather element: `addr` is a virtual address inside the MR named by `lkey`.
/// `repr(C)`: the layout of rdma-core's `ibv_sge`, so the rdma-core provider
/// hands SG lists to libibverbs as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The opcode-specific part of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WrDetail {
    #[default]
    None,
    Rdma {
        remote_addr: u64,
        rkey: u32,
    },
    Atomic {
        remote_addr: u64,
        compare_add: u64,
        swap: u64,
        rkey: u32,
    },
    Ud {
        ah: Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    },
}

/// `ibv_send_wr` (a slice of these replaces the `next` list).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
    pub opcode: WrOpcode,
    pub send_flags: SendFlags,
    /// Immediate data, network order as in rdma-core; for
    /// [`WrOpcode::SendWithInv`] the R_Key to invalidate (rdma-core's union).
    pub imm_data: u32,
    pub wr: WrDetail,
}

impl<'a> SendWr<'a> {
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            sg_list,
            opcode,
            send_flags: SendFlags::SIGNALED,
            imm_data: 0,
            wr: WrDetail::None,
        }
    }
}

/// `ibv_recv_wr`.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

/// `ibv_device_attr` (the fields that mean something here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: &'static str,
    pub node_guid: u64,
    pub vendor_id: u32,
    pub max_mr_size: u64,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_inline_data: u32,
    /// `IBV_ATOMIC_HCA`.
    pub atomic_cap_hca: bool,
    pub phys_port_cnt: u8,
}

/// `ibv_port_attr` (subset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    pub state_active: bool,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub lid: u16,
}

/// `ibv_event_type` (the ones this provider raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` for the SRQ with this handle.
    SrqLimitReached { srq: u32 },
    /// `IBV_EVENT_QP_FATAL`: a QP went to ERR.
    QpFatal { qp_num: u32 },
    /// `IBV_EVENT_CQ_ERR` (overrun).
    CqErr { cq: u32 },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    QpLastWqeReached { qp_num: u32 },
    /// `IBV_EVENT_PORT_ACTIVE`: the port came (back) up. rdma-core provider
    /// (the kernel raises it when the netdev of a RoCE port goes up).
    PortActive { port: u8 },
    /// `IBV_EVENT_PORT_ERR`: the port went down (its netdev down or gone).
    /// rdma-core provider. QPs stay in their state; what their work requests
    /// do next is the kernel driver's (docs/roce.md, "Port down").
    PortErr { port: u8 },
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable (a driver that
    /// disassociates user contexts on removal raises it; rxe does not, see
    /// docs/roce.md): only destroying objects and closing the context are left.
    DeviceFatal,
}

/// Address handle (`ibv_ah`): where UD sends go. A value (the soft provider
/// needs nothing else); a provider whose NIC needs a created `ibv_ah` makes and
/// caches one per (PD, destination) when a WR names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ah {
    pub ip: Ipv4Addr,
    pub dport: u16,
}

impl Default for Ah {
    fn default() -> Self {
        Ah {
            ip: Ipv4Addr::UNSPECIFIED,
            dport: wire::roce::ROCE_PORT,
        }
    }
}
