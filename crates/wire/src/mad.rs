//! InfiniBand MADs: the common MAD header and the CM messages (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR), and the CMA private-data header.
//!
//! A MAD is always [`MAD_LEN`] (256) bytes: the 24-byte common header
//! ([`Mad`] view, [`MadHdrRepr`]) followed by 232 bytes of class data. For the Communication
//! Management class (0x07, class version 2, method Send) the class data is one of
//! the messages of IBTA Vol. 1 chapter 12 (tables 106–120). Field positions follow
//! the spec's `Byte[Bit]` notation exactly as Linux's `include/rdma/ibta_vol1_c12.h`
//! (plus the ECE vendor-ID fields of IBA comment #9434): byte offsets count from
//! the start of the class data, bit offsets from the most significant bit of that
//! byte, and a field may span several bytes (big-endian).
//!
//! Every message has a zero-copy view (`CmReq`, `CmRep`, …; `new_checked` checks the
//! buffer holds a whole MAD, then every accessor is infallible) and a value `Repr`
//! (`ReqRepr`, …) gathered in [`CmMsgRepr`]; [`CmMadRepr`] adds the transaction ID
//! and attribute modifier (which carries ECE's `attr_mod` in REQ/REP).
//!
//! [`CmaHdr`] is the 36-byte header the Linux kernel CMA (and so every librdmacm
//! program) puts at the front of REQ and SIDR_REQ private data: version 0,
//! IP version in the upper nibble of byte 1, the active side's port, source and
//! destination addresses. [`service_id`] builds the IP-based service ID
//! `0x0000_0000_01PP_PPNN` from an RDMA port space and port.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{Error, Result};

/// Length of every MAD (IBTA 13.4.2).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HDR_LEN: usize = 24;
/// Length of the class data after the common header.
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HDR_LEN;
/// MAD base version.
pub const MAD_BASE_VERSION: u8 = 1;
/// Management class of Communication Management.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version spoken by Linux (`IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// The well-known Q_Key of QP1 (GSI).
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The Q_Key librdmacm uses for UDP port-space QPs (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Private data sizes of each CM message (IBTA table 106–120).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// MRA private data size.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// REJ private data size.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// REJ additional rejection information (ARI) size.
pub const REJ_ARI_LEN: usize = 72;
/// REP private data size.
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// RTU private data size.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// DREQ private data size.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// DREP private data size.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
/// SIDR_REQ private data size.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// SIDR_REP private data size.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
/// SIDR_REP additional information size.
pub const SIDR_REP_INFO_LEN: usize = 72;

/// Read `width` bits starting at bit `bit` (0 = MSB) of byte `byte`, big-endian.
/// The caller guarantees the range lies in `buf` (views check `MAD_LEN` once).
fn get_bits(buf: &[u8], byte: usize, bit: usize, width: usize) -> u64 {
    let nbytes = (bit + width).div_ceil(8);
    let mut acc: u128 = 0;
    for b in &buf[byte..byte + nbytes] {
        acc = (acc << 8) | u128::from(*b);
    }
    let shift = nbytes * 8 - bit - width;
    let mask: u128 = (1u128 << width) - 1;
    ((acc >> shift) & mask) as u64
}

/// Write `width` bits (value masked) at bit `bit` of byte `byte`, big-endian.
fn set_bits(buf: &mut [u8], byte: usize, bit: usize, width: usize, value: u64) {
    let nbytes = (bit + width).div_ceil(8);
    let mut acc: u128 = 0;
    for b in &buf[byte..byte + nbytes] {
        acc = (acc << 8) | u128::from(*b);
    }
    let shift = nbytes * 8 - bit - width;
    let mask: u128 = ((1u128 << width) - 1) << shift;
    acc = (acc & !mask) | ((u128::from(value) << shift) & mask);
    for (i, b) in buf[byte..byte + nbytes].iter_mut().enumerate() {
        *b = (acc >> ((nbytes - 1 - i) * 8)) as u8;
    }
}

macro_rules! enum_with_unknown {
    (
        $(#[$m:meta])* pub enum $name:ident($ty:ty) {
            $( $(#[$vm:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vm])* $variant, )+
            /// A code point this implementation does not name (kept verbatim).
            Unknown($ty),
        }
        impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                match v { $( $value => $name::$variant, )+ other => $name::Unknown(other) }
            }
        }
        impl From<$name> for $ty {
            fn from(v: $name) -> $ty {
                match v { $( $name::$variant => $value, )+ $name::Unknown(o) => o }
            }
        }
    };
}

enum_with_unknown! {
    /// MAD attribute IDs of the CM class.
    pub enum CmAttrId(u16) {
        /// ClassPortInfo.
        ClassPortInfo = 0x0001,
        /// ConnectRequest.
        Req = 0x0010,
        /// MessageReceiptAcknowledgement.
        Mra = 0x0011,
        /// ConnectReject.
        Rej = 0x0012,
        /// ConnectReply.
        Rep = 0x0013,
        /// ReadyToUse.
        Rtu = 0x0014,
        /// DisconnectRequest.
        Dreq = 0x0015,
        /// DisconnectReply.
        Drep = 0x0016,
        /// ServiceIDResReq.
        SidrReq = 0x0017,
        /// ServiceIDResReqResp.
        SidrRep = 0x0018,
        /// LoadAlternatePath.
        Lap = 0x0019,
        /// AlternatePathResponse.
        Apr = 0x001A,
    }
}

enum_with_unknown! {
    /// MAD methods (the response bit 0x80 included).
    pub enum MadMethod(u8) {
        /// Get.
        Get = 0x01,
        /// Set.
        Set = 0x02,
        /// Send (every CM message).
        Send = 0x03,
        /// GetResp.
        GetResp = 0x81,
    }
}

enum_with_unknown! {
    /// REJ reason codes (IBTA table 109; Linux `enum ib_cm_rej_reason`).
    pub enum RejReason(u16) {
        /// No QP available.
        NoQp = 1,
        /// No EE context available.
        NoEec = 2,
        /// No resources available.
        NoResources = 3,
        /// Timeout (ARI: the CA GUID of the node that timed out).
        Timeout = 4,
        /// Connection type not supported.
        Unsupported = 5,
        /// Invalid communication ID.
        InvalidCommId = 6,
        /// Invalid communication instance.
        InvalidCommInstance = 7,
        /// Invalid service ID: no listener ("connection refused").
        InvalidServiceId = 8,
        /// Invalid transport service type.
        InvalidTransportType = 9,
        /// Stale connection.
        StaleConn = 10,
        /// RDC does not exist.
        RdcNotExist = 11,
        /// Primary remote port GID rejected.
        InvalidGid = 12,
        /// Primary remote port LID rejected.
        InvalidLid = 13,
        /// Primary SL rejected.
        InvalidSl = 14,
        /// Primary traffic class rejected.
        InvalidTrafficClass = 15,
        /// Primary hop limit rejected.
        InvalidHopLimit = 16,
        /// Primary packet rate rejected.
        InvalidPacketRate = 17,
        /// Alternate remote port GID rejected.
        InvalidAltGid = 18,
        /// Alternate remote port LID rejected.
        InvalidAltLid = 19,
        /// Alternate SL rejected.
        InvalidAltSl = 20,
        /// Alternate traffic class rejected.
        InvalidAltTrafficClass = 21,
        /// Alternate hop limit rejected.
        InvalidAltHopLimit = 22,
        /// Alternate packet rate rejected.
        InvalidAltPacketRate = 23,
        /// Port redirection (CM).
        PortCmRedirect = 24,
        /// Port redirection.
        PortRedirect = 25,
        /// Invalid path MTU.
        InvalidMtu = 26,
        /// Insufficient responder resources.
        InsufficientRespResources = 27,
        /// Consumer reject (the reason of `rdma_reject`).
        ConsumerDefined = 28,
        /// Invalid RNR retry count.
        InvalidRnrRetry = 29,
        /// Duplicate local communication ID.
        DupLocalCommId = 30,
        /// Invalid class version.
        InvalidClassVersion = 31,
        /// Invalid flow label.
        InvalidFlowLabel = 32,
        /// Invalid alternate flow label.
        InvalidAltFlowLabel = 33,
        /// Vendor option (ECE) not supported.
        VendorOptionNotSupported = 35,
    }
}

enum_with_unknown! {
    /// Which message a REJ or MRA refers to (2-bit field).
    pub enum MsgResponse(u8) {
        /// The REQ.
        Req = 0,
        /// The REP.
        Rep = 1,
        /// Another message (LAP).
        Other = 2,
    }
}

enum_with_unknown! {
    /// Transport service type of a REQ (2 bits; 3 = see extended transport type).
    pub enum TransportType(u8) {
        /// Reliable connection.
        Rc = 0,
        /// Unreliable connection.
        Uc = 1,
        /// Reliable datagram.
        Rd = 2,
        /// Extended (XRC).
        Extended = 3,
    }
}

enum_with_unknown! {
    /// SIDR_REP status (IBTA table 121).
    pub enum SidrStatus(u8) {
        /// QPN and Q_Key valid.
        Success = 0,
        /// Service ID not supported (no listener).
        Unsupported = 1,
        /// Rejected by the service provider.
        Reject = 2,
        /// No QP available.
        NoQp = 3,
        /// Redirect.
        Redirect = 4,
        /// Class version not supported.
        UnsupportedVersion = 5,
    }
}

enum_with_unknown! {
    /// RDMA CM port spaces (librdmacm `enum rdma_port_space`).
    pub enum PortSpace(u16) {
        /// IPoIB.
        Ipoib = 0x0002,
        /// Reliable connected, TCP-like addressing.
        Tcp = 0x0106,
        /// Unreliable datagram, UDP-like addressing.
        Udp = 0x0111,
        /// IB native addressing (RC or UD).
        Ib = 0x013F,
    }
}

/// IP-based service ID of `port` in port space `ps` (kernel `cma_get_service_id`):
/// `0x0000_0000_0100_0000 | ps << 16 | port` for the 0x01xx port spaces.
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    (u64::from(u16::from(ps)) << 16) | u64::from(port)
}

/// Split an IP-based service ID into port space and port; `None` if its upper
/// 40 bits are not `0x00000000_01` (not an RDMA CM IP service ID).
pub fn parse_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 24 != 0x01 {
        return None;
    }
    Some((
        PortSpace::from(((sid >> 16) & 0xffff) as u16),
        (sid & 0xffff) as u16,
    ))
}

/// A 128-bit GID; for RoCEv2 the IPv4-mapped IPv6 address.
pub type Gid = [u8; 16];

/// The RoCEv2 GID of an IP address (IPv4 → `::ffff:a.b.c.d`).
pub fn gid_from_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address of a RoCEv2 GID (IPv4-mapped → IPv4).
pub fn ip_from_gid(gid: &Gid) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

// ---------------------------------------------------------------------------
// Common MAD header
// ---------------------------------------------------------------------------

mod hdr {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TID: Range<usize> = 8..16;
    pub const ATTR_ID: Range<usize> = 16..18;
    pub const RESV: Range<usize> = 18..20;
    pub const ATTR_MOD: Range<usize> = 20..24;
}

/// View of a whole MAD: the common header plus the class data.
#[derive(Debug, Clone)]
pub struct Mad<B> {
    buffer: B,
}

impl<B: AsRef<[u8]>> Mad<B> {
    /// Wrap without checking.
    pub const fn new_unchecked(buffer: B) -> Self {
        Mad { buffer }
    }
    /// Wrap and [`check_len`](Self::check_len).
    pub fn new_checked(buffer: B) -> Result<Self> {
        let m = Self::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }
    /// A MAD must hold all [`MAD_LEN`] bytes (trailing bytes, e.g. ICRC, are ignored).
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MAD_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Base version (1).
    pub fn base_version(&self) -> u8 {
        self.b()[hdr::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.b()[hdr::MGMT_CLASS]
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.b()[hdr::CLASS_VERSION]
    }
    /// Method.
    pub fn method(&self) -> MadMethod {
        MadMethod::from(self.b()[hdr::METHOD])
    }
    /// Status.
    pub fn status(&self) -> u16 {
        be16(&self.b()[hdr::STATUS])
    }
    /// Class-specific field.
    pub fn class_specific(&self) -> u16 {
        be16(&self.b()[hdr::CLASS_SPECIFIC])
    }
    /// Transaction ID.
    pub fn tid(&self) -> u64 {
        get_bits(self.b(), hdr::TID.start, 0, 64)
    }
    /// Attribute ID.
    pub fn attr_id(&self) -> CmAttrId {
        CmAttrId::from(be16(&self.b()[hdr::ATTR_ID]))
    }
    /// Attribute modifier (ECE `attr_mod` in REQ/REP).
    pub fn attr_mod(&self) -> u32 {
        get_bits(self.b(), hdr::ATTR_MOD.start, 0, 32) as u32
    }
    /// The 232 bytes of class data.
    pub fn data(&self) -> &[u8] {
        &self.b()[MAD_HDR_LEN..MAD_LEN]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Mad<B> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Set base version.
    pub fn set_base_version(&mut self, v: u8) {
        self.bm()[hdr::BASE_VERSION] = v;
    }
    /// Set management class.
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.bm()[hdr::MGMT_CLASS] = v;
    }
    /// Set class version.
    pub fn set_class_version(&mut self, v: u8) {
        self.bm()[hdr::CLASS_VERSION] = v;
    }
    /// Set method.
    pub fn set_method(&mut self, v: MadMethod) {
        self.bm()[hdr::METHOD] = v.into();
    }
    /// Set status.
    pub fn set_status(&mut self, v: u16) {
        self.bm()[hdr::STATUS].copy_from_slice(&v.to_be_bytes());
    }
    /// Set class-specific field.
    pub fn set_class_specific(&mut self, v: u16) {
        self.bm()[hdr::CLASS_SPECIFIC].copy_from_slice(&v.to_be_bytes());
    }
    /// Set transaction ID.
    pub fn set_tid(&mut self, v: u64) {
        self.bm()[hdr::TID].copy_from_slice(&v.to_be_bytes());
    }
    /// Set attribute ID (and zero the reserved field after it).
    pub fn set_attr_id(&mut self, v: CmAttrId) {
        self.bm()[hdr::ATTR_ID].copy_from_slice(&u16::from(v).to_be_bytes());
        self.bm()[hdr::RESV].fill(0);
    }
    /// Set attribute modifier.
    pub fn set_attr_mod(&mut self, v: u32) {
        self.bm()[hdr::ATTR_MOD].copy_from_slice(&v.to_be_bytes());
    }
    /// The class data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[MAD_HDR_LEN..MAD_LEN]
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// The common MAD header as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHdrRepr {
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method.
    pub method: MadMethod,
    /// Status.
    pub status: u16,
    /// Class-specific.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID.
    pub attr_id: CmAttrId,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadHdrRepr {
    /// Parse the header; only base version 1 is accepted.
    pub fn parse<B: AsRef<[u8]>>(mad: &Mad<B>) -> Result<Self> {
        mad.check_len()?;
        if mad.base_version() != MAD_BASE_VERSION {
            return Err(Error::BadVersion);
        }
        Ok(MadHdrRepr {
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            tid: mad.tid(),
            attr_id: mad.attr_id(),
            attr_mod: mad.attr_mod(),
        })
    }
    /// Header length (24).
    pub const fn buffer_len(&self) -> usize {
        MAD_HDR_LEN
    }
    /// Write the header.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<B>) {
        mad.set_base_version(MAD_BASE_VERSION);
        mad.set_mgmt_class(self.mgmt_class);
        mad.set_class_version(self.class_version);
        mad.set_method(self.method);
        mad.set_status(self.status);
        mad.set_class_specific(self.class_specific);
        mad.set_tid(self.tid);
        mad.set_attr_id(self.attr_id);
        mad.set_attr_mod(self.attr_mod);
    }
}

// ---------------------------------------------------------------------------
// CM message views
// ---------------------------------------------------------------------------

macro_rules! cm_view {
    (
        $(#[$m:meta])* $name:ident {
            $( $(#[$fm:meta])* $get:ident / $set:ident : $ty:ty = ($byte:expr, $bit:expr, $width:expr) ),* $(,)?
        }
        mem { $( $(#[$mm:meta])* $mget:ident / $mset:ident = ($mbyte:expr, $mlen:expr) ),* $(,)? }
    ) => {
        $(#[$m])*
        ///
        /// Field positions are `(byte, bit, width)` from the start of the CM class data
        /// (after the 24-byte MAD header), bit 0 = most significant, as in IBTA chapter 12.
        #[derive(Debug, Clone)]
        pub struct $name<B> {
            buffer: B,
        }
        impl<B: AsRef<[u8]>> $name<B> {
            /// Wrap without checking.
            pub const fn new_unchecked(buffer: B) -> Self {
                $name { buffer }
            }
            /// Wrap and [`check_len`](Self::check_len).
            pub fn new_checked(buffer: B) -> Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }
            /// The buffer must hold a whole MAD (header included).
            pub fn check_len(&self) -> Result<()> {
                if self.buffer.as_ref().len() < MAD_LEN {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                }
            }
            /// The underlying buffer.
            pub fn into_inner(self) -> B {
                self.buffer
            }
            /// The common MAD header.
            pub fn mad(&self) -> Mad<&[u8]> {
                Mad::new_unchecked(self.buffer.as_ref())
            }
            $(
                $(#[$fm])*
                pub fn $get(&self) -> $ty {
                    get_bits(self.buffer.as_ref(), MAD_HDR_LEN + $byte, $bit, $width) as $ty
                }
            )*
            $(
                $(#[$mm])*
                pub fn $mget(&self) -> &[u8] {
                    &self.buffer.as_ref()[MAD_HDR_LEN + $mbyte..MAD_HDR_LEN + $mbyte + $mlen]
                }
            )*
        }
        impl<B: AsRef<[u8]> + AsMut<[u8]>> $name<B> {
            $(
                /// Set the field of the same name (value masked to its width).
                pub fn $set(&mut self, v: $ty) {
                    set_bits(self.buffer.as_mut(), MAD_HDR_LEN + $byte, $bit, $width, v as u64)
                }
            )*
            $(
                /// The field of the same name, writable.
                pub fn $mset(&mut self) -> &mut [u8] {
                    &mut self.buffer.as_mut()[MAD_HDR_LEN + $mbyte..MAD_HDR_LEN + $mbyte + $mlen]
                }
            )*
        }
    };
}

cm_view! {
    /// ConnectRequest (IBTA table 106).
    CmReq {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        /// ECE vendor ID (IBA comment #9434).
        vendor_id / set_vendor_id: u32 = (5, 0, 24),
        service_id / set_service_id: u64 = (8, 0, 64),
        local_ca_guid / set_local_ca_guid: u64 = (16, 0, 64),
        local_qkey / set_local_qkey: u32 = (28, 0, 32),
        local_qpn / set_local_qpn: u32 = (32, 0, 24),
        responder_resources / set_responder_resources: u8 = (35, 0, 8),
        local_eecn / set_local_eecn: u32 = (36, 0, 24),
        initiator_depth / set_initiator_depth: u8 = (39, 0, 8),
        remote_eecn / set_remote_eecn: u32 = (40, 0, 24),
        remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = (43, 0, 5),
        transport_type / set_transport_type: u8 = (43, 5, 2),
        flow_control / set_flow_control: u8 = (43, 7, 1),
        starting_psn / set_starting_psn: u32 = (44, 0, 24),
        local_cm_response_timeout / set_local_cm_response_timeout: u8 = (47, 0, 5),
        retry_count / set_retry_count: u8 = (47, 5, 3),
        pkey / set_pkey: u16 = (48, 0, 16),
        path_mtu / set_path_mtu: u8 = (50, 0, 4),
        rdc_exists / set_rdc_exists: u8 = (50, 4, 1),
        rnr_retry_count / set_rnr_retry_count: u8 = (50, 5, 3),
        max_cm_retries / set_max_cm_retries: u8 = (51, 0, 4),
        srq / set_srq: u8 = (51, 4, 1),
        extended_transport_type / set_extended_transport_type: u8 = (51, 5, 3),
        sap_supported / set_sap_supported: u8 = (139, 5, 1),
    }
    mem {
        primary_path / primary_path_mut = (52, 44),
        alternate_path / alternate_path_mut = (96, 44),
        private_data / private_data_mut = (140, REQ_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// MessageReceiptAcknowledgement (IBTA table 107).
    CmMra {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
        message_mraed / set_message_mraed: u8 = (8, 0, 2),
        service_timeout / set_service_timeout: u8 = (9, 0, 5),
    }
    mem {
        private_data / private_data_mut = (10, MRA_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// ConnectReject (IBTA table 108).
    CmRej {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
        message_rejected / set_message_rejected: u8 = (8, 0, 2),
        ari_length / set_ari_length: u8 = (9, 0, 7),
        reason / set_reason: u16 = (10, 0, 16),
    }
    mem {
        ari / ari_mut = (12, REJ_ARI_LEN),
        private_data / private_data_mut = (84, REJ_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// ConnectReply (IBTA table 110).
    CmRep {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
        local_qkey / set_local_qkey: u32 = (8, 0, 32),
        local_qpn / set_local_qpn: u32 = (12, 0, 24),
        /// ECE vendor ID, bits 23..16.
        vendor_id_h / set_vendor_id_h: u8 = (15, 0, 8),
        local_eecn / set_local_eecn: u32 = (16, 0, 24),
        /// ECE vendor ID, bits 15..8.
        vendor_id_m / set_vendor_id_m: u8 = (19, 0, 8),
        starting_psn / set_starting_psn: u32 = (20, 0, 24),
        /// ECE vendor ID, bits 7..0.
        vendor_id_l / set_vendor_id_l: u8 = (23, 0, 8),
        responder_resources / set_responder_resources: u8 = (24, 0, 8),
        initiator_depth / set_initiator_depth: u8 = (25, 0, 8),
        target_ack_delay / set_target_ack_delay: u8 = (26, 0, 5),
        failover_accepted / set_failover_accepted: u8 = (26, 5, 2),
        flow_control / set_flow_control: u8 = (26, 7, 1),
        rnr_retry_count / set_rnr_retry_count: u8 = (27, 0, 3),
        srq / set_srq: u8 = (27, 3, 1),
        local_ca_guid / set_local_ca_guid: u64 = (28, 0, 64),
    }
    mem {
        private_data / private_data_mut = (36, REP_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// ReadyToUse (IBTA table 111).
    CmRtu {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
    }
    mem {
        private_data / private_data_mut = (8, RTU_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// DisconnectRequest (IBTA table 112).
    CmDreq {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
        remote_qpn / set_remote_qpn: u32 = (8, 0, 24),
    }
    mem {
        private_data / private_data_mut = (12, DREQ_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// DisconnectReply (IBTA table 113).
    CmDrep {
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32),
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32),
    }
    mem {
        private_data / private_data_mut = (8, DREP_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// ServiceIDResReq (IBTA table 119).
    CmSidrReq {
        request_id / set_request_id: u32 = (0, 0, 32),
        pkey / set_pkey: u16 = (4, 0, 16),
        service_id / set_service_id: u64 = (8, 0, 64),
    }
    mem {
        private_data / private_data_mut = (16, SIDR_REQ_PRIVATE_DATA_LEN),
    }
}

cm_view! {
    /// ServiceIDResReqResp (IBTA table 120).
    CmSidrRep {
        request_id / set_request_id: u32 = (0, 0, 32),
        status / set_status: u8 = (4, 0, 8),
        info_length / set_info_length: u8 = (5, 0, 8),
        /// ECE vendor ID, bits 23..8.
        vendor_id_h / set_vendor_id_h: u16 = (6, 0, 16),
        qpn / set_qpn: u32 = (8, 0, 24),
        /// ECE vendor ID, bits 7..0.
        vendor_id_l / set_vendor_id_l: u8 = (11, 0, 8),
        service_id / set_service_id: u64 = (12, 0, 64),
        qkey / set_qkey: u32 = (20, 0, 32),
    }
    mem {
        info / info_mut = (24, SIDR_REP_INFO_LEN),
        private_data / private_data_mut = (96, SIDR_REP_PRIVATE_DATA_LEN),
    }
}

// ---------------------------------------------------------------------------
// Reprs
// ---------------------------------------------------------------------------

/// One path of a REQ (primary or alternate): 44 bytes at class-data offset 52 / 96.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPathRepr {
    /// Local port LID (0xFFFF, permissive, on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: Gid,
    /// Remote port GID.
    pub remote_gid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 µs · 2^n).
    pub local_ack_timeout: u8,
}

impl CmPathRepr {
    fn parse(b: &[u8]) -> Self {
        let mut local_gid = [0u8; 16];
        let mut remote_gid = [0u8; 16];
        local_gid.copy_from_slice(&b[4..20]);
        remote_gid.copy_from_slice(&b[20..36]);
        CmPathRepr {
            local_lid: get_bits(b, 0, 0, 16) as u16,
            remote_lid: get_bits(b, 2, 0, 16) as u16,
            local_gid,
            remote_gid,
            flow_label: get_bits(b, 36, 0, 20) as u32,
            packet_rate: get_bits(b, 39, 2, 6) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: get_bits(b, 42, 0, 4) as u8,
            subnet_local: get_bits(b, 42, 4, 1) != 0,
            local_ack_timeout: get_bits(b, 43, 0, 5) as u8,
        }
    }
    /// Writes all 44 bytes except the bits after the ACK timeout in byte 43
    /// (SAP-supported for the alternate path), which the caller owns.
    fn emit(&self, b: &mut [u8]) {
        set_bits(b, 0, 0, 16, self.local_lid.into());
        set_bits(b, 2, 0, 16, self.remote_lid.into());
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        b[36..40].fill(0);
        set_bits(b, 36, 0, 20, self.flow_label.into());
        set_bits(b, 39, 2, 6, self.packet_rate.into());
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = 0;
        set_bits(b, 42, 0, 4, self.sl.into());
        set_bits(b, 42, 4, 1, self.subnet_local.into());
        set_bits(b, 43, 0, 5, self.local_ack_timeout.into());
        set_bits(b, 43, 6, 2, 0);
    }
}

/// ConnectRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits).
    pub vendor_id: u32,
    /// Service ID ([`service_id`]).
    pub service_id: u64,
    /// Sender's CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key (RD only).
    pub local_qkey: u32,
    /// Sender's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READ/atomic operations the sender accepts as responder.
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// RDMA READ/atomic operations the sender issues in parallel.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// How long the sender may take to answer (5 bits: 4.096 µs · 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service type.
    pub transport_type: TransportType,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// How long the sender waits for an answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits, IB encoding: 1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 = XRC).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary_path: CmPathRepr,
    /// Alternate path (all zero when there is none).
    pub alternate_path: CmPathRepr,
    /// SAP supported.
    pub sap_supported: bool,
    /// Private data (for RDMA CM: [`CmaHdr`] + consumer data).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

/// MessageReceiptAcknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MraRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID (0 when MRAing a REQ not yet answered… still the REQ's ID).
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MsgResponse,
    /// Extra time the sender needs (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

/// ConnectReject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejRepr {
    /// Sender's communication ID (0 if it has none, e.g. no listener).
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MsgResponse,
    /// Length of the valid part of `ari` (7 bits).
    pub ari_length: u8,
    /// Reason.
    pub reason: RejReason,
    /// Additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

/// ConnectReply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's (the REQ sender's) communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Sender's QPN (24 bits).
    pub local_qpn: u32,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// Sender's CA GUID.
    pub local_ca_guid: u64,
    /// ECE vendor ID (24 bits, split over three bytes on the wire).
    pub vendor_id: u32,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

/// ReadyToUse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtuRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

/// DisconnectRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DreqRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Receiver's QPN (24 bits).
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

/// DisconnectReply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrepRepr {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

/// ServiceIDResReq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqRepr {
    /// Request ID.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private data (for RDMA CM: [`CmaHdr`] + consumer data).
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

/// ServiceIDResReqResp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepRepr {
    /// Request ID of the SIDR_REQ answered.
    pub request_id: u32,
    /// Status.
    pub status: SidrStatus,
    /// Length of the valid part of `info`.
    pub info_length: u8,
    /// ECE vendor ID (24 bits).
    pub vendor_id: u32,
    /// QPN of the service (24 bits).
    pub qpn: u32,
    /// Service ID.
    pub service_id: u64,
    /// Q_Key of the service.
    pub qkey: u32,
    /// Additional information.
    pub info: [u8; SIDR_REP_INFO_LEN],
    /// Private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

/// One CM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMsgRepr {
    /// ConnectRequest.
    Req(ReqRepr),
    /// MessageReceiptAcknowledgement.
    Mra(MraRepr),
    /// ConnectReject.
    Rej(RejRepr),
    /// ConnectReply.
    Rep(RepRepr),
    /// ReadyToUse.
    Rtu(RtuRepr),
    /// DisconnectRequest.
    Dreq(DreqRepr),
    /// DisconnectReply.
    Drep(DrepRepr),
    /// ServiceIDResReq.
    SidrReq(SidrReqRepr),
    /// ServiceIDResReqResp.
    SidrRep(SidrRepRepr),
}

/// A whole CM MAD: transaction ID, attribute modifier and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMadRepr {
    /// Transaction ID.
    pub tid: u64,
    /// Attribute modifier (ECE `attr_mod` in REQ and REP; 0 otherwise).
    pub attr_mod: u32,
    /// The message.
    pub msg: CmMsgRepr,
}

fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

impl CmMsgRepr {
    /// The attribute ID of this message.
    pub fn attr_id(&self) -> CmAttrId {
        match self {
            CmMsgRepr::Req(_) => CmAttrId::Req,
            CmMsgRepr::Mra(_) => CmAttrId::Mra,
            CmMsgRepr::Rej(_) => CmAttrId::Rej,
            CmMsgRepr::Rep(_) => CmAttrId::Rep,
            CmMsgRepr::Rtu(_) => CmAttrId::Rtu,
            CmMsgRepr::Dreq(_) => CmAttrId::Dreq,
            CmMsgRepr::Drep(_) => CmAttrId::Drep,
            CmMsgRepr::SidrReq(_) => CmAttrId::SidrReq,
            CmMsgRepr::SidrRep(_) => CmAttrId::SidrRep,
        }
    }
    /// The name tshark prints for this message.
    pub fn name(&self) -> &'static str {
        match self {
            CmMsgRepr::Req(_) => "ConnectRequest",
            CmMsgRepr::Mra(_) => "MsgRcptAck",
            CmMsgRepr::Rej(_) => "ConnectReject",
            CmMsgRepr::Rep(_) => "ConnectReply",
            CmMsgRepr::Rtu(_) => "ReadyToUse",
            CmMsgRepr::Dreq(_) => "DisconnectRequest",
            CmMsgRepr::Drep(_) => "DisconnectReply",
            CmMsgRepr::SidrReq(_) => "ServiceIDResReq",
            CmMsgRepr::SidrRep(_) => "ServiceIDResReqResp",
        }
    }
}

impl CmMadRepr {
    /// Parse a CM MAD: base version 1, class 0x07, class version 2, method Send,
    /// and an attribute ID this module knows (LAP/APR/ClassPortInfo → `BadOpcode`).
    pub fn parse<B: AsRef<[u8]>>(mad: &Mad<B>) -> Result<Self> {
        let h = MadHdrRepr::parse(mad)?;
        if h.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::BadOpcode);
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(Error::BadVersion);
        }
        if h.method != MadMethod::Send {
            return Err(Error::BadOpcode);
        }
        let b = mad.buffer.as_ref();
        let msg = match h.attr_id {
            CmAttrId::Req => {
                let v = CmReq::new_unchecked(b);
                CmMsgRepr::Req(ReqRepr {
                    local_comm_id: v.local_comm_id(),
                    vendor_id: v.vendor_id(),
                    service_id: v.service_id(),
                    local_ca_guid: v.local_ca_guid(),
                    local_qkey: v.local_qkey(),
                    local_qpn: v.local_qpn(),
                    responder_resources: v.responder_resources(),
                    local_eecn: v.local_eecn(),
                    initiator_depth: v.initiator_depth(),
                    remote_eecn: v.remote_eecn(),
                    remote_cm_response_timeout: v.remote_cm_response_timeout(),
                    transport_type: TransportType::from(v.transport_type()),
                    flow_control: v.flow_control() != 0,
                    starting_psn: v.starting_psn(),
                    local_cm_response_timeout: v.local_cm_response_timeout(),
                    retry_count: v.retry_count(),
                    pkey: v.pkey(),
                    path_mtu: v.path_mtu(),
                    rdc_exists: v.rdc_exists() != 0,
                    rnr_retry_count: v.rnr_retry_count(),
                    max_cm_retries: v.max_cm_retries(),
                    srq: v.srq() != 0,
                    extended_transport_type: v.extended_transport_type(),
                    primary_path: CmPathRepr::parse(v.primary_path()),
                    alternate_path: CmPathRepr::parse(v.alternate_path()),
                    sap_supported: v.sap_supported() != 0,
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Mra => {
                let v = CmMra::new_unchecked(b);
                CmMsgRepr::Mra(MraRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    message_mraed: MsgResponse::from(v.message_mraed()),
                    service_timeout: v.service_timeout(),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Rej => {
                let v = CmRej::new_unchecked(b);
                CmMsgRepr::Rej(RejRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    message_rejected: MsgResponse::from(v.message_rejected()),
                    ari_length: v.ari_length(),
                    reason: RejReason::from(v.reason()),
                    ari: arr(v.ari()),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Rep => {
                let v = CmRep::new_unchecked(b);
                CmMsgRepr::Rep(RepRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    local_qkey: v.local_qkey(),
                    local_qpn: v.local_qpn(),
                    local_eecn: v.local_eecn(),
                    starting_psn: v.starting_psn(),
                    responder_resources: v.responder_resources(),
                    initiator_depth: v.initiator_depth(),
                    target_ack_delay: v.target_ack_delay(),
                    failover_accepted: v.failover_accepted(),
                    flow_control: v.flow_control() != 0,
                    rnr_retry_count: v.rnr_retry_count(),
                    srq: v.srq() != 0,
                    local_ca_guid: v.local_ca_guid(),
                    vendor_id: (u32::from(v.vendor_id_h()) << 16)
                        | (u32::from(v.vendor_id_m()) << 8)
                        | u32::from(v.vendor_id_l()),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Rtu => {
                let v = CmRtu::new_unchecked(b);
                CmMsgRepr::Rtu(RtuRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Dreq => {
                let v = CmDreq::new_unchecked(b);
                CmMsgRepr::Dreq(DreqRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    remote_qpn: v.remote_qpn(),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::Drep => {
                let v = CmDrep::new_unchecked(b);
                CmMsgRepr::Drep(DrepRepr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::SidrReq => {
                let v = CmSidrReq::new_unchecked(b);
                CmMsgRepr::SidrReq(SidrReqRepr {
                    request_id: v.request_id(),
                    pkey: v.pkey(),
                    service_id: v.service_id(),
                    private_data: arr(v.private_data()),
                })
            }
            CmAttrId::SidrRep => {
                let v = CmSidrRep::new_unchecked(b);
                CmMsgRepr::SidrRep(SidrRepRepr {
                    request_id: v.request_id(),
                    status: SidrStatus::from(v.status()),
                    info_length: v.info_length(),
                    vendor_id: (u32::from(v.vendor_id_h()) << 8) | u32::from(v.vendor_id_l()),
                    qpn: v.qpn(),
                    service_id: v.service_id(),
                    qkey: v.qkey(),
                    info: arr(v.info()),
                    private_data: arr(v.private_data()),
                })
            }
            _ => return Err(Error::BadOpcode),
        };
        Ok(CmMadRepr {
            tid: h.tid,
            attr_mod: h.attr_mod,
            msg,
        })
    }

    /// Parse from raw bytes (a UD SEND payload to QP1).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self> {
        Self::parse(&Mad::new_checked(bytes)?)
    }

    /// Always [`MAD_LEN`].
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Write the whole MAD (all 256 bytes; reserved bits zeroed).
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<B>) {
        mad.buffer.as_mut()[..MAD_LEN].fill(0);
        MadHdrRepr {
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: MadMethod::Send,
            status: 0,
            class_specific: 0,
            tid: self.tid,
            attr_id: self.msg.attr_id(),
            attr_mod: self.attr_mod,
        }
        .emit(mad);
        let b = mad.buffer.as_mut();
        match &self.msg {
            CmMsgRepr::Req(r) => {
                let mut v = CmReq::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_vendor_id(r.vendor_id);
                v.set_service_id(r.service_id);
                v.set_local_ca_guid(r.local_ca_guid);
                v.set_local_qkey(r.local_qkey);
                v.set_local_qpn(r.local_qpn);
                v.set_responder_resources(r.responder_resources);
                v.set_local_eecn(r.local_eecn);
                v.set_initiator_depth(r.initiator_depth);
                v.set_remote_eecn(r.remote_eecn);
                v.set_remote_cm_response_timeout(r.remote_cm_response_timeout);
                v.set_transport_type(r.transport_type.into());
                v.set_flow_control(r.flow_control.into());
                v.set_starting_psn(r.starting_psn);
                v.set_local_cm_response_timeout(r.local_cm_response_timeout);
                v.set_retry_count(r.retry_count);
                v.set_pkey(r.pkey);
                v.set_path_mtu(r.path_mtu);
                v.set_rdc_exists(r.rdc_exists.into());
                v.set_rnr_retry_count(r.rnr_retry_count);
                v.set_max_cm_retries(r.max_cm_retries);
                v.set_srq(r.srq.into());
                v.set_extended_transport_type(r.extended_transport_type);
                r.primary_path.emit(v.primary_path_mut());
                r.alternate_path.emit(v.alternate_path_mut());
                v.set_sap_supported(r.sap_supported.into());
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Mra(r) => {
                let mut v = CmMra::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.set_message_mraed(r.message_mraed.into());
                v.set_service_timeout(r.service_timeout);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Rej(r) => {
                let mut v = CmRej::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.set_message_rejected(r.message_rejected.into());
                v.set_ari_length(r.ari_length);
                v.set_reason(r.reason.into());
                v.ari_mut().copy_from_slice(&r.ari);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Rep(r) => {
                let mut v = CmRep::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.set_local_qkey(r.local_qkey);
                v.set_local_qpn(r.local_qpn);
                v.set_vendor_id_h((r.vendor_id >> 16) as u8);
                v.set_local_eecn(r.local_eecn);
                v.set_vendor_id_m((r.vendor_id >> 8) as u8);
                v.set_starting_psn(r.starting_psn);
                v.set_vendor_id_l(r.vendor_id as u8);
                v.set_responder_resources(r.responder_resources);
                v.set_initiator_depth(r.initiator_depth);
                v.set_target_ack_delay(r.target_ack_delay);
                v.set_failover_accepted(r.failover_accepted);
                v.set_flow_control(r.flow_control.into());
                v.set_rnr_retry_count(r.rnr_retry_count);
                v.set_srq(r.srq.into());
                v.set_local_ca_guid(r.local_ca_guid);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Rtu(r) => {
                let mut v = CmRtu::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Dreq(r) => {
                let mut v = CmDreq::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.set_remote_qpn(r.remote_qpn);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::Drep(r) => {
                let mut v = CmDrep::new_unchecked(b);
                v.set_local_comm_id(r.local_comm_id);
                v.set_remote_comm_id(r.remote_comm_id);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::SidrReq(r) => {
                let mut v = CmSidrReq::new_unchecked(b);
                v.set_request_id(r.request_id);
                v.set_pkey(r.pkey);
                v.set_service_id(r.service_id);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
            CmMsgRepr::SidrRep(r) => {
                let mut v = CmSidrRep::new_unchecked(b);
                v.set_request_id(r.request_id);
                v.set_status(r.status.into());
                v.set_info_length(r.info_length);
                v.set_vendor_id_h((r.vendor_id >> 8) as u16);
                v.set_qpn(r.qpn);
                v.set_vendor_id_l(r.vendor_id as u8);
                v.set_service_id(r.service_id);
                v.set_qkey(r.qkey);
                v.info_mut().copy_from_slice(&r.info);
                v.private_data_mut().copy_from_slice(&r.private_data);
            }
        }
    }

    /// Emit into a fresh 256-byte array.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut Mad::new_unchecked(&mut b[..]));
        b
    }
}

impl fmt::Display for CmMadRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CM: {} tid={:#x}", self.msg.name(), self.tid)?;
        match &self.msg {
            CmMsgRepr::Req(r) => write!(
                f,
                " local_comm_id={:#010x} service_id={:#018x} qpn={:#08x} psn={:#08x} rr={} id={}",
                r.local_comm_id,
                r.service_id,
                r.local_qpn,
                r.starting_psn,
                r.responder_resources,
                r.initiator_depth
            ),
            CmMsgRepr::Rep(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x} qpn={:#08x} psn={:#08x}",
                r.local_comm_id, r.remote_comm_id, r.local_qpn, r.starting_psn
            ),
            CmMsgRepr::Rej(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x} reason={:?}",
                r.local_comm_id, r.remote_comm_id, r.reason
            ),
            CmMsgRepr::Mra(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x} mraed={:?}",
                r.local_comm_id, r.remote_comm_id, r.message_mraed
            ),
            CmMsgRepr::Rtu(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x}",
                r.local_comm_id, r.remote_comm_id
            ),
            CmMsgRepr::Dreq(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn={:#08x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn
            ),
            CmMsgRepr::Drep(r) => write!(
                f,
                " local_comm_id={:#010x} remote_comm_id={:#010x}",
                r.local_comm_id, r.remote_comm_id
            ),
            CmMsgRepr::SidrReq(r) => write!(
                f,
                " request_id={:#010x} service_id={:#018x}",
                r.request_id, r.service_id
            ),
            CmMsgRepr::SidrRep(r) => write!(
                f,
                " request_id={:#010x} status={:?} qpn={:#08x} qkey={:#010x}",
                r.request_id, r.status, r.qpn, r.qkey
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// CMA private-data header
// ---------------------------------------------------------------------------

mod cma {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: Range<usize> = 2..4;
    pub const SRC: Range<usize> = 4..20;
    pub const DST: Range<usize> = 20..36;
}

/// Length of the CMA header at the front of REQ / SIDR_REQ private data.
pub const CMA_HDR_LEN: usize = cma::DST.end;
/// The only CMA header version (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// Consumer private data a PS_TCP/PS_UDP `rdma_connect` may carry (92 − 36).
pub const CMA_REQ_USER_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
/// Consumer private data of a UDP `rdma_connect` (SIDR_REQ, 216 − 36).
pub const CMA_SIDR_REQ_USER_DATA_LEN: usize = SIDR_REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;

/// View of the kernel CMA header (`struct cma_hdr`).
#[derive(Debug, Clone)]
pub struct CmaHdr<B> {
    buffer: B,
}

impl<B: AsRef<[u8]>> CmaHdr<B> {
    /// Wrap without checking.
    pub const fn new_unchecked(buffer: B) -> Self {
        CmaHdr { buffer }
    }
    /// Wrap and check the length.
    pub fn new_checked(buffer: B) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }
    /// Needs 36 bytes.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < CMA_HDR_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// CMA version (0).
    pub fn cma_version(&self) -> u8 {
        self.buffer.as_ref()[cma::VERSION]
    }
    /// IP version (upper nibble of byte 1).
    pub fn ip_version(&self) -> u8 {
        self.buffer.as_ref()[cma::IP_VERSION] >> 4
    }
    /// Port of the sender (the active side's source port).
    pub fn port(&self) -> u16 {
        be16(&self.buffer.as_ref()[cma::PORT])
    }
    /// Source address field (16 bytes; IPv4 in the last four).
    pub fn src_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[cma::SRC]
    }
    /// Destination address field.
    pub fn dst_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[cma::DST]
    }
    /// The consumer's private data after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[CMA_HDR_LEN..]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> CmaHdr<B> {
    /// Set CMA version.
    pub fn set_cma_version(&mut self, v: u8) {
        self.buffer.as_mut()[cma::VERSION] = v;
    }
    /// Set IP version (lower nibble zeroed).
    pub fn set_ip_version(&mut self, v: u8) {
        self.buffer.as_mut()[cma::IP_VERSION] = v << 4;
    }
    /// Set port.
    pub fn set_port(&mut self, v: u16) {
        self.buffer.as_mut()[cma::PORT].copy_from_slice(&v.to_be_bytes());
    }
    /// Source address field, writable.
    pub fn src_addr_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[cma::SRC]
    }
    /// Destination address field, writable.
    pub fn dst_addr_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[cma::DST]
    }
    /// Consumer private data, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[CMA_HDR_LEN..]
    }
}

/// The CMA header as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHdrRepr {
    /// The active side's port.
    pub port: u16,
    /// Source (active side) address.
    pub src: IpAddr,
    /// Destination (passive side) address.
    pub dst: IpAddr,
}

fn cma_addr(b: &[u8], v: u8) -> IpAddr {
    if v == 4 {
        IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

fn put_cma_addr(b: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            b[..12].fill(0);
            b[12..16].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => b[..16].copy_from_slice(&v6.octets()),
    }
}

impl CmaHdrRepr {
    /// Parse: version must be 0, IP version 4 or 6.
    pub fn parse<B: AsRef<[u8]>>(h: &CmaHdr<B>) -> Result<Self> {
        h.check_len()?;
        if h.cma_version() != CMA_VERSION {
            return Err(Error::BadVersion);
        }
        let v = h.ip_version();
        if v != 4 && v != 6 {
            return Err(Error::Malformed);
        }
        Ok(CmaHdrRepr {
            port: h.port(),
            src: cma_addr(h.src_addr(), v),
            dst: cma_addr(h.dst_addr(), v),
        })
    }
    /// 36.
    pub const fn buffer_len(&self) -> usize {
        CMA_HDR_LEN
    }
    /// Write the header (source and destination must be the same family; the
    /// IP version is taken from `src`).
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut CmaHdr<B>) {
        h.set_cma_version(CMA_VERSION);
        h.set_ip_version(if self.src.is_ipv4() { 4 } else { 6 });
        h.set_port(self.port);
        put_cma_addr(h.src_addr_mut(), self.src);
        put_cma_addr(h.dst_addr_mut(), self.dst);
    }
}

impl fmt::Display for CmaHdrRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IP CM src={}:{} dst={}", self.src, self.port, self.dst)
    }
}

#[cfg(test)]
mod tests;
