//! OpenFlow 1.3 numbers (openflow-spec-v1.3.x, `openflow.h`) and the OpenFlow 1.0 ones
//! the version negotiation needs.

/// Protocol versions (`ofp_header.version`).
pub const OFP10_VERSION: u8 = 0x01;
pub const OFP13_VERSION: u8 = 0x04;

/// OpenFlow 1.3 message types.
pub mod t {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// Port numbers (OpenFlow 1.3, 32 bits).
pub mod port {
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const ANY: u32 = 0xffff_ffff;
}

/// `OFPG_ANY`: any group (flow mod / stats filters).
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// `OFP_NO_BUFFER`.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// `OFPTT_ALL`: every table.
pub const TABLE_ALL: u8 = 0xff;
/// `OFPCML_NO_BUFFER`: send the whole packet to the controller.
pub const CML_NO_BUFFER: u16 = 0xffff;

/// Flow mod commands.
pub mod fc {
    pub const ADD: u8 = 0;
    pub const MODIFY: u8 = 1;
    pub const MODIFY_STRICT: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const DELETE_STRICT: u8 = 4;
}

/// Flow mod flags.
pub mod ff {
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    pub const RESET_COUNTS: u16 = 1 << 2;
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// Packet-in reasons.
pub mod pir {
    pub const NO_MATCH: u8 = 0;
    pub const ACTION: u8 = 1;
    pub const INVALID_TTL: u8 = 2;
}

/// Flow removed reasons.
pub mod rr {
    pub const IDLE_TIMEOUT: u8 = 0;
    pub const HARD_TIMEOUT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const GROUP_DELETE: u8 = 3;
}

/// Port status reasons.
pub mod pr {
    pub const ADD: u8 = 0;
    pub const DELETE: u8 = 1;
    pub const MODIFY: u8 = 2;
}

/// Controller roles.
pub mod role {
    pub const NOCHANGE: u32 = 0;
    pub const EQUAL: u32 = 1;
    pub const MASTER: u32 = 2;
    pub const SLAVE: u32 = 3;
}

/// Switch capabilities (features reply).
pub mod cap {
    pub const FLOW_STATS: u32 = 1 << 0;
    pub const TABLE_STATS: u32 = 1 << 1;
    pub const PORT_STATS: u32 = 1 << 2;
    pub const GROUP_STATS: u32 = 1 << 3;
}

/// Port config / state bits.
pub mod pc {
    pub const PORT_DOWN: u32 = 1 << 0;
    pub const LINK_DOWN: u32 = 1 << 0;
    pub const LIVE: u32 = 1 << 2;
}

/// Multipart types.
pub mod mp {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
    pub const EXPERIMENTER: u16 = 0xffff;
    /// `OFPMPF_REQ_MORE` / `OFPMPF_REPLY_MORE`.
    pub const MORE: u16 = 1;
}

/// Error types and codes (OFPET_* / OFP*C_*).
pub mod err {
    pub const HELLO_FAILED: u16 = 0;
    pub const HFC_INCOMPATIBLE: u16 = 0;
    pub const BAD_REQUEST: u16 = 1;
    pub const BRC_BAD_VERSION: u16 = 0;
    pub const BRC_BAD_TYPE: u16 = 1;
    pub const BRC_BAD_MULTIPART: u16 = 2;
    pub const BRC_BAD_EXPERIMENTER: u16 = 3;
    pub const BRC_EPERM: u16 = 5;
    pub const BRC_BAD_LEN: u16 = 6;
    pub const BRC_BUFFER_UNKNOWN: u16 = 8;
    pub const BRC_BAD_TABLE_ID: u16 = 9;
    pub const BRC_IS_SLAVE: u16 = 10;
    pub const BRC_BAD_PORT: u16 = 11;
    pub const BRC_BAD_PACKET: u16 = 12;
    pub const BAD_ACTION: u16 = 2;
    pub const BAC_BAD_TYPE: u16 = 0;
    pub const BAC_BAD_LEN: u16 = 1;
    pub const BAC_BAD_EXP_TYPE: u16 = 3;
    pub const BAC_BAD_OUT_PORT: u16 = 4;
    pub const BAC_BAD_ARGUMENT: u16 = 5;
    pub const BAC_BAD_OUT_GROUP: u16 = 9;
    pub const BAC_MATCH_INCONSISTENT: u16 = 10;
    pub const BAC_BAD_SET_TYPE: u16 = 13;
    pub const BAC_BAD_SET_LEN: u16 = 14;
    pub const BAC_BAD_SET_ARGUMENT: u16 = 15;
    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BIC_UNKNOWN_INST: u16 = 0;
    pub const BIC_UNSUP_INST: u16 = 1;
    pub const BIC_BAD_TABLE_ID: u16 = 2;
    pub const BIC_BAD_LEN: u16 = 7;
    pub const BAD_MATCH: u16 = 4;
    pub const BMC_BAD_TYPE: u16 = 0;
    pub const BMC_BAD_LEN: u16 = 1;
    pub const BMC_BAD_FIELD: u16 = 6;
    pub const BMC_BAD_VALUE: u16 = 7;
    pub const BMC_BAD_MASK: u16 = 8;
    pub const BMC_BAD_PREREQ: u16 = 9;
    pub const BMC_DUP_FIELD: u16 = 10;
    pub const FLOW_MOD_FAILED: u16 = 5;
    pub const FMFC_UNKNOWN: u16 = 0;
    pub const FMFC_TABLE_FULL: u16 = 1;
    pub const FMFC_BAD_TABLE_ID: u16 = 2;
    pub const FMFC_OVERLAP: u16 = 3;
    pub const FMFC_BAD_TIMEOUT: u16 = 5;
    pub const FMFC_BAD_COMMAND: u16 = 6;
    pub const FMFC_BAD_FLAGS: u16 = 7;
    pub const GROUP_MOD_FAILED: u16 = 6;
    pub const PORT_MOD_FAILED: u16 = 7;
    pub const TABLE_MOD_FAILED: u16 = 8;
    pub const SWITCH_CONFIG_FAILED: u16 = 10;
    pub const ROLE_REQUEST_FAILED: u16 = 11;
    pub const RRFC_STALE: u16 = 0;
    pub const RRFC_UNSUP: u16 = 1;
    pub const RRFC_BAD_ROLE: u16 = 2;
    pub const METER_MOD_FAILED: u16 = 12;
}

/// Instruction types.
pub mod it {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Action types.
pub mod at {
    pub const OUTPUT: u16 = 0;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Nicira (OVS) extensions: experimenter id and the action subtypes parsed here.
pub mod nx {
    pub const VENDOR_ID: u32 = 0x0000_2320;
    pub const AST_RESUBMIT: u16 = 1;
    pub const AST_REG_MOVE: u16 = 6;
    pub const AST_REG_LOAD: u16 = 7;
    pub const AST_RESUBMIT_TABLE: u16 = 14;
    pub const AST_DEC_TTL: u16 = 18;
    pub const AST_CONTROLLER: u16 = 20;
}

/// `ONF_EXPERIMENTER_ID` (ONF extension OXMs such as tcp_flags in OpenFlow 1.3).
pub const ONF_EXPERIMENTER_ID: u32 = 0x4f4e_4600;
