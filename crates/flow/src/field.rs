//! The OpenFlow fields of the flow table as ovs-fields(7) names them: every name and
//! alias, the NXM/OXM names `load`/`move` also take, the width, the prerequisites, the
//! access (read-only or read/write), and where each field lives in a [`FlowKey`].
//!
//! Values are held in the field's own width (`arp_op` 16 bits, `ip_dscp` 6 bits,
//! `ipv6_label` 20 bits, ...), as OVS's `union mf_value`; [`Field::get`] / [`Field::set`]
//! convert to and from the key's layout the way OVS's `mf_get_value` /
//! `mf_set_flow_value` do (so a write to `arp_op` keeps the low 8 bits, as OVS's
//! `flow->nw_proto`).

use crate::key::{f, Fd, FlowKey, FRAG_LATER, VLAN_CFI};
use wire::ethernet::{ethertype, ipproto};

/// A pipeline field (not part of any packet): `reg0`–`reg15`, `xreg0`–`xreg7`,
/// `metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaField {
    Reg(u8),
    Xreg(u8),
    Metadata,
}

impl MetaField {
    pub fn fd(self) -> Fd {
        match self {
            MetaField::Reg(i) => f::REGS[i as usize],
            MetaField::Xreg(i) => f::XREGS[i as usize],
            MetaField::Metadata => f::METADATA,
        }
    }
    /// OVS's NXM/OXM name (as `load` / `move` print it).
    pub fn nxm_name(self) -> String {
        match self {
            MetaField::Reg(i) => format!("NXM_NX_REG{i}"),
            MetaField::Xreg(i) => format!("OXM_OF_PKT_REG{i}"),
            MetaField::Metadata => "OXM_OF_METADATA".into(),
        }
    }
    /// OVS's (OpenFlow 1.3 dump) name.
    pub fn name(self) -> String {
        match self {
            MetaField::Reg(i) => format!("reg{i}"),
            MetaField::Xreg(i) => format!("xreg{i}"),
            MetaField::Metadata => "metadata".into(),
        }
    }
    /// `regN`, `xregN`, `metadata` and their NXM/OXM names.
    pub fn parse(s: &str) -> Option<MetaField> {
        let idx = |p: &str, n: u8| s.strip_prefix(p)?.parse::<u8>().ok().filter(|&i| i < n);
        if s == "metadata" || s == "OXM_OF_METADATA" {
            return Some(MetaField::Metadata);
        }
        if let Some(i) = idx("reg", 16).or_else(|| idx("NXM_NX_REG", 16)) {
            return Some(MetaField::Reg(i));
        }
        idx("xreg", 8)
            .or_else(|| idx("OXM_OF_PKT_REG", 8))
            .map(MetaField::Xreg)
    }
}

/// OVS's field prerequisites (`enum mf_prereqs`), as far as the table's fields need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prereq {
    None,
    Ipv4,
    Ipv6,
    IpAny,
    Arp,
    Tcp,
    Udp,
    Sctp,
    Icmpv4,
    Icmpv6,
    /// ICMPv6 neighbour solicitation or advertisement with code 0.
    Nd,
    NdSolicit,
    NdAdvert,
}

/// A field of the flow table (ovs-fields(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Meta(MetaField),
    /// `in_port` (NXM, 16 bits).
    InPort,
    /// `in_port_oxm` (OXM, 32 bits).
    InPortOxm,
    EthSrc,
    EthDst,
    EthType,
    VlanTci,
    IpSrc,
    IpDst,
    Ipv6Src,
    Ipv6Dst,
    Ipv6Label,
    NwProto,
    NwTtl,
    IpFrag,
    /// `nw_tos` (OVS `MFF_IP_DSCP`: the TOS byte, low 2 bits never set).
    NwTos,
    /// `ip_dscp` (OVS `MFF_IP_DSCP_SHIFTED`: 6 bits).
    IpDscp,
    NwEcn,
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    TcpSrc,
    TcpDst,
    TcpFlags,
    UdpSrc,
    UdpDst,
    SctpSrc,
    SctpDst,
    IcmpType,
    IcmpCode,
    Icmpv6Type,
    Icmpv6Code,
    NdTarget,
    NdSll,
    NdTll,
}

/// Static facts about a packet field: (name, alias, NXM name, OXM name, bits, prereq,
/// writable).
type Info = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    u8,
    Prereq,
    bool,
);

/// Every packet field (the [`Field::Meta`] ones are separate).
pub const PACKET_FIELDS: [Field; 36] = [
    Field::InPort,
    Field::InPortOxm,
    Field::EthSrc,
    Field::EthDst,
    Field::EthType,
    Field::VlanTci,
    Field::IpSrc,
    Field::IpDst,
    Field::Ipv6Src,
    Field::Ipv6Dst,
    Field::Ipv6Label,
    Field::NwProto,
    Field::NwTtl,
    Field::IpFrag,
    Field::NwTos,
    Field::IpDscp,
    Field::NwEcn,
    Field::ArpOp,
    Field::ArpSpa,
    Field::ArpTpa,
    Field::ArpSha,
    Field::ArpTha,
    Field::TcpSrc,
    Field::TcpDst,
    Field::TcpFlags,
    Field::UdpSrc,
    Field::UdpDst,
    Field::SctpSrc,
    Field::SctpDst,
    Field::IcmpType,
    Field::IcmpCode,
    Field::Icmpv6Type,
    Field::Icmpv6Code,
    Field::NdTarget,
    Field::NdSll,
    Field::NdTll,
];

impl Field {
    fn info(self) -> Info {
        use Prereq as P;
        match self {
            // Meta fields: only `bits` and `writable` are read from here.
            Field::Meta(m) => ("", None, None, None, m.fd().bits, P::None, true),
            Field::InPort => (
                "in_port",
                None,
                Some("NXM_OF_IN_PORT"),
                None,
                16,
                P::None,
                true,
            ),
            Field::InPortOxm => (
                "in_port_oxm",
                None,
                None,
                Some("OXM_OF_IN_PORT"),
                32,
                P::None,
                true,
            ),
            Field::EthSrc => (
                "eth_src",
                Some("dl_src"),
                Some("NXM_OF_ETH_SRC"),
                Some("OXM_OF_ETH_SRC"),
                48,
                P::None,
                true,
            ),
            Field::EthDst => (
                "eth_dst",
                Some("dl_dst"),
                Some("NXM_OF_ETH_DST"),
                Some("OXM_OF_ETH_DST"),
                48,
                P::None,
                true,
            ),
            Field::EthType => (
                "eth_type",
                Some("dl_type"),
                Some("NXM_OF_ETH_TYPE"),
                Some("OXM_OF_ETH_TYPE"),
                16,
                P::None,
                false,
            ),
            Field::VlanTci => (
                "vlan_tci",
                None,
                Some("NXM_OF_VLAN_TCI"),
                None,
                16,
                P::None,
                true,
            ),
            Field::IpSrc => (
                "ip_src",
                Some("nw_src"),
                Some("NXM_OF_IP_SRC"),
                Some("OXM_OF_IPV4_SRC"),
                32,
                P::Ipv4,
                true,
            ),
            Field::IpDst => (
                "ip_dst",
                Some("nw_dst"),
                Some("NXM_OF_IP_DST"),
                Some("OXM_OF_IPV4_DST"),
                32,
                P::Ipv4,
                true,
            ),
            Field::Ipv6Src => (
                "ipv6_src",
                None,
                Some("NXM_NX_IPV6_SRC"),
                Some("OXM_OF_IPV6_SRC"),
                128,
                P::Ipv6,
                true,
            ),
            Field::Ipv6Dst => (
                "ipv6_dst",
                None,
                Some("NXM_NX_IPV6_DST"),
                Some("OXM_OF_IPV6_DST"),
                128,
                P::Ipv6,
                true,
            ),
            Field::Ipv6Label => (
                "ipv6_label",
                None,
                Some("NXM_NX_IPV6_LABEL"),
                Some("OXM_OF_IPV6_FLABEL"),
                20,
                P::Ipv6,
                true,
            ),
            Field::NwProto => (
                "nw_proto",
                Some("ip_proto"),
                Some("NXM_OF_IP_PROTO"),
                Some("OXM_OF_IP_PROTO"),
                8,
                P::IpAny,
                false,
            ),
            Field::NwTtl => (
                "nw_ttl",
                None,
                Some("NXM_NX_IP_TTL"),
                None,
                8,
                P::IpAny,
                true,
            ),
            Field::IpFrag => (
                "ip_frag",
                Some("nw_frag"),
                Some("NXM_NX_IP_FRAG"),
                None,
                8,
                P::IpAny,
                false,
            ),
            Field::NwTos => (
                "nw_tos",
                None,
                Some("NXM_OF_IP_TOS"),
                None,
                8,
                P::IpAny,
                true,
            ),
            Field::IpDscp => (
                "ip_dscp",
                None,
                None,
                Some("OXM_OF_IP_DSCP"),
                6,
                P::IpAny,
                true,
            ),
            Field::NwEcn => (
                "nw_ecn",
                Some("ip_ecn"),
                Some("NXM_NX_IP_ECN"),
                Some("OXM_OF_IP_ECN"),
                2,
                P::IpAny,
                true,
            ),
            Field::ArpOp => (
                "arp_op",
                None,
                Some("NXM_OF_ARP_OP"),
                Some("OXM_OF_ARP_OP"),
                16,
                P::Arp,
                true,
            ),
            Field::ArpSpa => (
                "arp_spa",
                None,
                Some("NXM_OF_ARP_SPA"),
                Some("OXM_OF_ARP_SPA"),
                32,
                P::Arp,
                true,
            ),
            Field::ArpTpa => (
                "arp_tpa",
                None,
                Some("NXM_OF_ARP_TPA"),
                Some("OXM_OF_ARP_TPA"),
                32,
                P::Arp,
                true,
            ),
            Field::ArpSha => (
                "arp_sha",
                None,
                Some("NXM_NX_ARP_SHA"),
                Some("OXM_OF_ARP_SHA"),
                48,
                P::Arp,
                true,
            ),
            Field::ArpTha => (
                "arp_tha",
                None,
                Some("NXM_NX_ARP_THA"),
                Some("OXM_OF_ARP_THA"),
                48,
                P::Arp,
                true,
            ),
            Field::TcpSrc => (
                "tcp_src",
                Some("tp_src"),
                Some("NXM_OF_TCP_SRC"),
                Some("OXM_OF_TCP_SRC"),
                16,
                P::Tcp,
                true,
            ),
            Field::TcpDst => (
                "tcp_dst",
                Some("tp_dst"),
                Some("NXM_OF_TCP_DST"),
                Some("OXM_OF_TCP_DST"),
                16,
                P::Tcp,
                true,
            ),
            Field::TcpFlags => (
                "tcp_flags",
                None,
                Some("NXM_NX_TCP_FLAGS"),
                Some("ONFOXM_ET_TCP_FLAGS"),
                12,
                P::Tcp,
                false,
            ),
            Field::UdpSrc => (
                "udp_src",
                None,
                Some("NXM_OF_UDP_SRC"),
                Some("OXM_OF_UDP_SRC"),
                16,
                P::Udp,
                true,
            ),
            Field::UdpDst => (
                "udp_dst",
                None,
                Some("NXM_OF_UDP_DST"),
                Some("OXM_OF_UDP_DST"),
                16,
                P::Udp,
                true,
            ),
            Field::SctpSrc => (
                "sctp_src",
                None,
                None,
                Some("OXM_OF_SCTP_SRC"),
                16,
                P::Sctp,
                true,
            ),
            Field::SctpDst => (
                "sctp_dst",
                None,
                None,
                Some("OXM_OF_SCTP_DST"),
                16,
                P::Sctp,
                true,
            ),
            Field::IcmpType => (
                "icmp_type",
                None,
                Some("NXM_OF_ICMP_TYPE"),
                Some("OXM_OF_ICMPV4_TYPE"),
                8,
                P::Icmpv4,
                true,
            ),
            Field::IcmpCode => (
                "icmp_code",
                None,
                Some("NXM_OF_ICMP_CODE"),
                Some("OXM_OF_ICMPV4_CODE"),
                8,
                P::Icmpv4,
                true,
            ),
            Field::Icmpv6Type => (
                "icmpv6_type",
                None,
                Some("NXM_NX_ICMPV6_TYPE"),
                Some("OXM_OF_ICMPV6_TYPE"),
                8,
                P::Icmpv6,
                true,
            ),
            Field::Icmpv6Code => (
                "icmpv6_code",
                None,
                Some("NXM_NX_ICMPV6_CODE"),
                Some("OXM_OF_ICMPV6_CODE"),
                8,
                P::Icmpv6,
                true,
            ),
            Field::NdTarget => (
                "nd_target",
                None,
                Some("NXM_NX_ND_TARGET"),
                Some("OXM_OF_IPV6_ND_TARGET"),
                128,
                P::Nd,
                true,
            ),
            Field::NdSll => (
                "nd_sll",
                None,
                Some("NXM_NX_ND_SLL"),
                Some("OXM_OF_IPV6_ND_SLL"),
                48,
                P::NdSolicit,
                true,
            ),
            Field::NdTll => (
                "nd_tll",
                None,
                Some("NXM_NX_ND_TLL"),
                Some("OXM_OF_IPV6_ND_TLL"),
                48,
                P::NdAdvert,
                true,
            ),
        }
    }

    /// The OVS name (ovs-fields(7) "Name:").
    pub fn name(self) -> String {
        match self {
            Field::Meta(m) => m.name(),
            _ => self.info().0.to_string(),
        }
    }
    /// The alias ("aka"), if any.
    pub fn alias(self) -> Option<&'static str> {
        self.info().1
    }
    /// The name `load`/`move` print: the NXM name, else the OXM name (OVS
    /// `mf_format_subfield`).
    pub fn nxm_name(self) -> String {
        match self {
            Field::Meta(m) => m.nxm_name(),
            _ => {
                let i = self.info();
                i.2.or(i.3).unwrap_or(i.0).to_string()
            }
        }
    }
    /// Whether OVS's `mf_nxm_header` has a header for the field (an NXM or a basic OXM
    /// one): a partial write is then encoded as `NXAST_REG_LOAD` and printed as `load`;
    /// otherwise (`metadata`, `xregN`: `NXAST_REG_LOAD2`) as `set_field:V/M->F`.
    pub fn has_nxm(self) -> bool {
        match self {
            Field::Meta(MetaField::Reg(_)) => true,
            Field::Meta(_) => false,
            _ => self.info().2.is_some() || self.info().3.is_some(),
        }
    }
    /// The NXM header (class, field, bytes) OVS uses for the field (class 0 =
    /// `NXM_OF_*`, 1 = `NXM_NX_*`), if it has one.
    pub fn nxm_header(self) -> Option<(u16, u8, u8)> {
        let h = |c: u16, f: u8, n: u8| Some((c, f, n));
        match self {
            Field::Meta(MetaField::Reg(i)) => h(1, i, 4),
            Field::Meta(_) => None,
            Field::InPort => h(0, 0, 2),
            Field::EthDst => h(0, 1, 6),
            Field::EthSrc => h(0, 2, 6),
            Field::EthType => h(0, 3, 2),
            Field::VlanTci => h(0, 4, 2),
            Field::NwTos => h(0, 5, 1),
            Field::NwProto => h(0, 6, 1),
            Field::IpSrc => h(0, 7, 4),
            Field::IpDst => h(0, 8, 4),
            Field::TcpSrc => h(0, 9, 2),
            Field::TcpDst => h(0, 10, 2),
            Field::UdpSrc => h(0, 11, 2),
            Field::UdpDst => h(0, 12, 2),
            Field::IcmpType => h(0, 13, 1),
            Field::IcmpCode => h(0, 14, 1),
            Field::ArpOp => h(0, 15, 2),
            Field::ArpSpa => h(0, 16, 4),
            Field::ArpTpa => h(0, 17, 4),
            Field::ArpSha => h(1, 17, 6),
            Field::ArpTha => h(1, 18, 6),
            Field::Ipv6Src => h(1, 19, 16),
            Field::Ipv6Dst => h(1, 20, 16),
            Field::Icmpv6Type => h(1, 21, 1),
            Field::Icmpv6Code => h(1, 22, 1),
            Field::NdTarget => h(1, 23, 16),
            Field::NdSll => h(1, 24, 6),
            Field::NdTll => h(1, 25, 6),
            Field::IpFrag => h(1, 26, 1),
            Field::Ipv6Label => h(1, 27, 4),
            Field::NwEcn => h(1, 28, 1),
            Field::NwTtl => h(1, 29, 1),
            Field::TcpFlags => h(1, 34, 2),
            Field::InPortOxm | Field::IpDscp | Field::SctpSrc | Field::SctpDst => None,
        }
    }

    /// The OpenFlow basic OXM header (class 0x8000, or 0x8001 for `xregN`), if any.
    pub fn oxm_header(self) -> Option<(u16, u8, u8)> {
        let h = |f: u8, n: u8| Some((0x8000, f, n));
        match self {
            Field::Meta(MetaField::Xreg(i)) => Some((0x8001, i, 8)),
            Field::Meta(MetaField::Metadata) => h(2, 8),
            Field::Meta(MetaField::Reg(_)) => None,
            Field::InPortOxm => h(0, 4),
            Field::EthDst => h(3, 6),
            Field::EthSrc => h(4, 6),
            Field::EthType => h(5, 2),
            Field::IpDscp => h(8, 1),
            Field::NwEcn => h(9, 1),
            Field::NwProto => h(10, 1),
            Field::IpSrc => h(11, 4),
            Field::IpDst => h(12, 4),
            Field::TcpSrc => h(13, 2),
            Field::TcpDst => h(14, 2),
            Field::UdpSrc => h(15, 2),
            Field::UdpDst => h(16, 2),
            Field::SctpSrc => h(17, 2),
            Field::SctpDst => h(18, 2),
            Field::IcmpType => h(19, 1),
            Field::IcmpCode => h(20, 1),
            Field::ArpOp => h(21, 2),
            Field::ArpSpa => h(22, 4),
            Field::ArpTpa => h(23, 4),
            Field::ArpSha => h(24, 6),
            Field::ArpTha => h(25, 6),
            Field::Ipv6Src => h(26, 16),
            Field::Ipv6Dst => h(27, 16),
            Field::Ipv6Label => h(28, 4),
            Field::Icmpv6Type => h(29, 1),
            Field::Icmpv6Code => h(30, 1),
            Field::NdTarget => h(31, 16),
            Field::NdSll => h(32, 6),
            Field::NdTll => h(33, 6),
            _ => None,
        }
    }

    /// The field an NXM or basic OXM header (class, field) names.
    pub fn from_header(class: u16, field: u8) -> Option<Field> {
        let metas = (0..16)
            .map(|i| Field::Meta(MetaField::Reg(i)))
            .chain((0..8).map(|i| Field::Meta(MetaField::Xreg(i))))
            .chain([Field::Meta(MetaField::Metadata)]);
        metas.chain(PACKET_FIELDS).find(|fl| {
            let hit =
                |h: Option<(u16, u8, u8)>| h.is_some_and(|(c, f, _)| c == class && f == field);
            hit(fl.nxm_header()) || hit(fl.oxm_header())
        })
    }

    /// Width in bits.
    pub fn bits(self) -> u8 {
        self.info().4
    }
    pub fn prereq(self) -> Prereq {
        self.info().5
    }
    /// Read/write access in OVS (`set_field`, `load`, `move` destinations).
    pub fn writable(self) -> bool {
        self.info().6
    }
    /// All-ones value of the field's width.
    pub fn ones(self) -> u128 {
        let b = self.bits() as u32;
        if b >= 128 {
            u128::MAX
        } else {
            (1u128 << b) - 1
        }
    }

    /// The field named by its OVS name or alias (what `set_field` and matches take).
    pub fn from_name(s: &str) -> Option<Field> {
        if let Some(m) = MetaField::parse(s).filter(|_| !s.starts_with(['N', 'O'])) {
            return Some(Field::Meta(m));
        }
        PACKET_FIELDS.iter().copied().find(|fl| {
            !matches!(fl, Field::Meta(_)) && (fl.info().0 == s || fl.info().1 == Some(s))
        })
    }

    /// The field named by its OVS name, alias, NXM or OXM name (what `load` and `move`
    /// sub-fields take, OVS `mf_parse_subfield`).
    pub fn from_any_name(s: &str) -> Option<Field> {
        if let Some(m) = MetaField::parse(s) {
            return Some(Field::Meta(m));
        }
        PACKET_FIELDS.iter().copied().find(|fl| {
            let i = fl.info();
            !matches!(fl, Field::Meta(_))
                && (i.0 == s || i.1 == Some(s) || i.2 == Some(s) || i.3 == Some(s))
        })
    }

    /// The value of the field in `k`, in the field's width (OVS `mf_get_value`).
    pub fn get(self, k: &FlowKey) -> u128 {
        let g = |fd: Fd| k.get(fd) as u128;
        match self {
            Field::Meta(m) => g(m.fd()),
            Field::InPort => g(f::IN_PORT) & 0xffff,
            Field::InPortOxm => g(f::IN_PORT),
            Field::EthSrc => g(f::DL_SRC),
            Field::EthDst => g(f::DL_DST),
            Field::EthType => g(f::DL_TYPE),
            Field::VlanTci => g(f::VLAN0_TCI),
            Field::IpSrc | Field::ArpSpa => g(f::NW_SRC),
            Field::IpDst | Field::ArpTpa => g(f::NW_DST),
            Field::Ipv6Src => k.get128(f::IPV6_SRC_HI, f::IPV6_SRC_LO),
            Field::Ipv6Dst => k.get128(f::IPV6_DST_HI, f::IPV6_DST_LO),
            Field::Ipv6Label => g(f::IPV6_LABEL) & 0xfffff,
            Field::NwProto | Field::ArpOp => g(f::NW_PROTO),
            Field::NwTtl => g(f::NW_TTL),
            Field::IpFrag => g(f::NW_FRAG),
            Field::NwTos => g(f::NW_TOS) & 0xfc,
            Field::IpDscp => g(f::NW_TOS) >> 2,
            Field::NwEcn => g(f::NW_TOS) & 0x03,
            Field::ArpSha | Field::NdSll => g(f::ARP_SHA),
            Field::ArpTha | Field::NdTll => g(f::ARP_THA),
            Field::TcpSrc | Field::UdpSrc | Field::SctpSrc => g(f::TP_SRC),
            Field::TcpDst | Field::UdpDst | Field::SctpDst => g(f::TP_DST),
            Field::TcpFlags => g(f::TCP_FLAGS) & 0x0fff,
            Field::IcmpType | Field::Icmpv6Type => g(f::TP_SRC) & 0xff,
            Field::IcmpCode | Field::Icmpv6Code => g(f::TP_DST) & 0xff,
            Field::NdTarget => k.get128(f::ND_TARGET_HI, f::ND_TARGET_LO),
        }
    }

    /// Writes the whole field (OVS `mf_set_flow_value`); `v` is cut to the width.
    pub fn set(self, k: &mut FlowKey, v: u128) {
        let v = v & self.ones();
        let w = v as u64;
        match self {
            Field::Meta(m) => k.set(m.fd(), w),
            Field::InPort | Field::InPortOxm => k.set(f::IN_PORT, w),
            Field::EthSrc => k.set(f::DL_SRC, w),
            Field::EthDst => k.set(f::DL_DST, w),
            Field::EthType => k.set(f::DL_TYPE, w),
            Field::VlanTci => k.set(f::VLAN0_TCI, w),
            Field::IpSrc | Field::ArpSpa => k.set(f::NW_SRC, w),
            Field::IpDst | Field::ArpTpa => k.set(f::NW_DST, w),
            Field::Ipv6Src => k.set128(f::IPV6_SRC_HI, f::IPV6_SRC_LO, v),
            Field::Ipv6Dst => k.set128(f::IPV6_DST_HI, f::IPV6_DST_LO, v),
            // OVS: `ipv6_label = value & IPV6_LABEL_MASK`, the whole 32-bit word (so
            // un-wildcarding it also cuts a classifier's all-ones mask to 20 bits).
            Field::Ipv6Label => k.set(f::IPV6_LABEL, w),
            // OVS keeps the low 8 bits of arp_op in nw_proto.
            Field::NwProto | Field::ArpOp => k.set(f::NW_PROTO, w & 0xff),
            Field::NwTtl => k.set(f::NW_TTL, w),
            Field::IpFrag => k.set(f::NW_FRAG, w),
            Field::NwTos => {
                let old = k.get(f::NW_TOS);
                k.set(f::NW_TOS, (old & 0x03) | (w & 0xfc));
            }
            Field::IpDscp => {
                let old = k.get(f::NW_TOS);
                k.set(f::NW_TOS, (old & 0x03) | (w << 2));
            }
            Field::NwEcn => {
                let old = k.get(f::NW_TOS);
                k.set(f::NW_TOS, (old & 0xfc) | w);
            }
            Field::ArpSha | Field::NdSll => k.set(f::ARP_SHA, w),
            Field::ArpTha | Field::NdTll => k.set(f::ARP_THA, w),
            Field::TcpSrc | Field::UdpSrc | Field::SctpSrc => k.set(f::TP_SRC, w),
            Field::TcpDst | Field::UdpDst | Field::SctpDst => k.set(f::TP_DST, w),
            Field::TcpFlags => k.set(f::TCP_FLAGS, w),
            // OVS: tp_src = htons(type), the high byte cleared.
            Field::IcmpType | Field::Icmpv6Type => k.set(f::TP_SRC, w),
            Field::IcmpCode | Field::Icmpv6Code => k.set(f::TP_DST, w),
            Field::NdTarget => k.set128(f::ND_TARGET_HI, f::ND_TARGET_LO, v),
        }
    }

    /// Writes the bits of `mask` into a packet's flow (OVS `mf_set_flow_value_masked`;
    /// a `vlan_tci` that gains a tag gets TPID 0x8100, OVS `flow_fix_vlan_tpid`).
    pub fn set_masked(self, k: &mut FlowKey, v: u128, mask: u128) {
        let old = self.get(k);
        self.set(k, (old & !mask) | (v & mask));
        if self == Field::VlanTci && k.vlan0_tci() & VLAN_CFI != 0 && k.get(f::VLAN0_TPID) == 0 {
            k.set(f::VLAN0_TPID, ethertype::VLAN as u64);
        }
    }

    /// Un-wildcards the bits of `mask` in `wc` (OVS `mf_mask_field_masked`).
    pub fn unwildcard(self, wc: &mut FlowKey, mask: u128) {
        let old = self.get(wc);
        self.set(wc, old | (mask & self.ones()));
    }

    /// OVS `mf_are_prereqs_ok` on a packet's flow: whether the packet has the field;
    /// with `wc`, un-wildcards what the check looked at (`nw_proto` for L4 and ICMP,
    /// the ICMPv6 type and code for ND, the CFI bit for VLAN fields).
    pub fn prereqs_ok(self, flow: &FlowKey, wc: Option<&mut FlowKey>) -> bool {
        prereq_ok(self.prereq(), flow, wc)
    }

    /// OVS `mf_set_mask_l3_prereqs` (set_field only): the L3 rewrites that need
    /// `nw_proto` in the megaflow.
    pub fn mask_l3_prereqs(self, flow: &FlowKey, wc: &mut FlowKey) {
        let l3 = matches!(
            self,
            Field::IpSrc
                | Field::IpDst
                | Field::Ipv6Src
                | Field::Ipv6Dst
                | Field::Ipv6Label
                | Field::NwTos
                | Field::NwEcn
                | Field::NwTtl
        );
        let arp = matches!(
            self,
            Field::ArpOp | Field::ArpSha | Field::ArpTha | Field::ArpSpa | Field::ArpTpa
        );
        // (OVS: the ARP op lives in nw_proto, so ARP rewrites need it too; only ARP,
        // not RARP)
        if (flow.is_ip_any() && l3) || (flow.dl_type() == ethertype::ARP && arp) {
            wc.full(f::NW_PROTO);
        }
    }
}

/// OVS `mf_are_prereqs_ok__` for one prerequisite; `wc` as in [`Field::prereqs_ok`].
pub fn prereq_ok(p: Prereq, flow: &FlowKey, mut wc: Option<&mut FlowKey>) -> bool {
    let ip_proto = |proto: u8, wc: &mut Option<&mut FlowKey>| -> bool {
        if flow.is_ip_any() {
            if let Some(w) = wc.as_deref_mut() {
                w.full(f::NW_PROTO);
            }
            flow.nw_proto() == proto
        } else {
            false
        }
    };
    let not_later = flow.nw_frag() & FRAG_LATER == 0;
    match p {
        Prereq::None => true,
        Prereq::Ipv4 => flow.is_ipv4(),
        Prereq::Ipv6 => flow.is_ipv6(),
        Prereq::IpAny => flow.is_ip_any(),
        Prereq::Arp => flow.is_arp(),
        Prereq::Tcp => ip_proto(ipproto::TCP, &mut wc) && not_later,
        Prereq::Udp => ip_proto(ipproto::UDP, &mut wc) && not_later,
        Prereq::Sctp => ip_proto(ipproto::SCTP, &mut wc) && not_later,
        Prereq::Icmpv4 => flow.is_ipv4() && ip_proto(ipproto::ICMP, &mut wc),
        Prereq::Icmpv6 => flow.is_ipv6() && ip_proto(ipproto::ICMPV6, &mut wc),
        Prereq::Nd | Prereq::NdSolicit | Prereq::NdAdvert => {
            // OVS is_nd(): ICMPv6, then tp_dst (code) == 0, then tp_src (type) 135/136.
            if !(flow.is_ipv6() && ip_proto(ipproto::ICMPV6, &mut wc)) {
                return false;
            }
            if let Some(w) = wc.as_deref_mut() {
                w.full(f::TP_DST);
            }
            if flow.tp_dst() != 0 {
                return false;
            }
            if let Some(w) = wc {
                w.full(f::TP_SRC);
            }
            let t = flow.tp_src();
            match p {
                Prereq::NdSolicit => t == 135,
                Prereq::NdAdvert => t == 136,
                _ => t == 135 || t == 136,
            }
        }
    }
}

/// Whether a VLAN header is present (OVS `is_vlan`), un-wildcarding the CFI bit.
pub fn has_vlan(flow: &FlowKey, wc: &mut FlowKey) -> bool {
    wc.or(f::VLAN0_TCI, VLAN_CFI as u64);
    flow.vlan0_tci() & VLAN_CFI != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_alias_and_nxm_oxm_name_resolves() {
        for fl in PACKET_FIELDS {
            let n = fl.name();
            assert_eq!(Field::from_name(&n), Some(fl), "{n}");
            assert_eq!(Field::from_any_name(&n), Some(fl), "{n}");
            if let Some(a) = fl.alias() {
                assert_eq!(Field::from_name(a), Some(fl), "{a}");
            }
            let i = fl.info();
            for x in [i.2, i.3].into_iter().flatten() {
                assert_eq!(Field::from_any_name(x), Some(fl), "{x}");
                // set_field takes only the OVS names (OVS: "not a valid OXM field name").
                if !matches!(fl, Field::Meta(_)) {
                    assert_eq!(Field::from_name(x), None, "{x}");
                }
            }
        }
        assert_eq!(Field::from_name("tp_dst"), Some(Field::TcpDst));
        assert_eq!(Field::from_name("ip_ecn"), Some(Field::NwEcn));
        assert_eq!(Field::from_name("nw_frag"), Some(Field::IpFrag));
        assert_eq!(Field::from_any_name("OXM_OF_IPV4_SRC"), Some(Field::IpSrc));
        assert_eq!(
            Field::from_any_name("NXM_NX_REG3"),
            Some(Field::Meta(MetaField::Reg(3)))
        );
        assert_eq!(Field::from_name("ipv4_src"), None);
    }

    #[test]
    fn headers_name_their_field() {
        for fl in PACKET_FIELDS {
            for h in [fl.nxm_header(), fl.oxm_header()].into_iter().flatten() {
                assert_eq!(Field::from_header(h.0, h.1), Some(fl), "{fl:?} {h:?}");
                assert!(h.2 as u32 * 8 >= fl.bits() as u32, "{fl:?}");
            }
            assert!(
                fl.nxm_header().is_some() || fl.oxm_header().is_some(),
                "{fl:?}"
            );
        }
        assert_eq!(
            Field::from_header(1, 3),
            Some(Field::Meta(MetaField::Reg(3)))
        );
        assert_eq!(
            Field::from_header(0x8001, 2),
            Some(Field::Meta(MetaField::Xreg(2)))
        );
    }

    #[test]
    fn get_set_follow_ovs_layout() {
        let mut k = FlowKey::ZERO;
        k.set(f::NW_TOS, 0xb9);
        assert_eq!(Field::IpDscp.get(&k), 0x2e);
        assert_eq!(Field::NwEcn.get(&k), 1);
        assert_eq!(Field::NwTos.get(&k), 0xb8);
        Field::NwEcn.set(&mut k, 2);
        assert_eq!(k.get(f::NW_TOS), 0xba);
        Field::IpDscp.set(&mut k, 1);
        assert_eq!(k.get(f::NW_TOS), 0x06);
        Field::ArpOp.set(&mut k, 0x0102);
        assert_eq!(k.get(f::NW_PROTO), 0x02);
        Field::TcpDst.set_masked(&mut k, 0x1234, 0x00ff);
        assert_eq!(k.tp_dst(), 0x0034);
        let mut wc = FlowKey::ZERO;
        Field::ArpOp.unwildcard(&mut wc, 0xffff);
        assert_eq!(wc.get(f::NW_PROTO), 0xff);
        Field::Ipv6Label.set(&mut k, 0xfffff_u128 + 1);
        assert_eq!(Field::Ipv6Label.get(&k), 0);
        let mut wc = FlowKey::ZERO;
        wc.full(f::IPV6_LABEL);
        Field::Ipv6Label.unwildcard(&mut wc, 0xfffff);
        assert_eq!(
            wc.get(f::IPV6_LABEL),
            0xfffff,
            "OVS cuts the mask to 20 bits"
        );
    }

    #[test]
    fn nd_prereqs_unwildcard_like_ovs() {
        let mut k = FlowKey::ZERO;
        k.set(f::DL_TYPE, ethertype::IPV6 as u64);
        k.set(f::NW_PROTO, ipproto::ICMPV6 as u64);
        k.set(f::TP_SRC, 136);
        let mut wc = FlowKey::ZERO;
        assert!(!Field::NdSll.prereqs_ok(&k, Some(&mut wc)));
        assert!(Field::NdTll.prereqs_ok(&k, Some(&mut wc)));
        assert_eq!(wc.get(f::TP_SRC), 0xffff);
        assert_eq!(wc.get(f::NW_PROTO), 0xff);
        k.set(f::TP_DST, 1);
        let mut wc = FlowKey::ZERO;
        assert!(!Field::NdTarget.prereqs_ok(&k, Some(&mut wc)));
        assert_eq!(
            wc.get(f::TP_SRC),
            0,
            "the type is not looked at when the code is not 0"
        );
    }
}
