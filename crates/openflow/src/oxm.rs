//! OXM TLVs (OpenFlow 1.3 §7.2.3) and the `ofp_match` that holds them: the basic
//! class, the Nicira NXM classes Open vSwitch uses for fields OpenFlow 1.3 lacks
//! (registers, `nw_ttl`, `nw_frag`, `tcp_flags`, ...), OpenFlow 1.5's packet-register
//! class (`xreg`) and ONF experimenter OXMs.

use std::borrow::Cow;

use crate::consts::ONF_EXPERIMENTER_ID;
use crate::{Error, Put, Reader, Result};

/// OXM classes.
pub mod class {
    pub const NXM_0: u16 = 0x0000;
    pub const NXM_1: u16 = 0x0001;
    pub const OPENFLOW_BASIC: u16 = 0x8000;
    /// OpenFlow 1.5 `OFPXMC_PACKET_REGS` (OVS: `xreg0`–`xreg7` as `OXM_OF_PKT_REG`).
    pub const PACKET_REGS: u16 = 0x8001;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Fields of the basic class.
pub mod basic {
    pub const IN_PORT: u8 = 0;
    pub const IN_PHY_PORT: u8 = 1;
    pub const METADATA: u8 = 2;
    pub const ETH_DST: u8 = 3;
    pub const ETH_SRC: u8 = 4;
    pub const ETH_TYPE: u8 = 5;
    pub const VLAN_VID: u8 = 6;
    pub const VLAN_PCP: u8 = 7;
    pub const IP_DSCP: u8 = 8;
    pub const IP_ECN: u8 = 9;
    pub const IP_PROTO: u8 = 10;
    pub const IPV4_SRC: u8 = 11;
    pub const IPV4_DST: u8 = 12;
    pub const TCP_SRC: u8 = 13;
    pub const TCP_DST: u8 = 14;
    pub const UDP_SRC: u8 = 15;
    pub const UDP_DST: u8 = 16;
    pub const SCTP_SRC: u8 = 17;
    pub const SCTP_DST: u8 = 18;
    pub const ICMPV4_TYPE: u8 = 19;
    pub const ICMPV4_CODE: u8 = 20;
    pub const ARP_OP: u8 = 21;
    pub const ARP_SPA: u8 = 22;
    pub const ARP_TPA: u8 = 23;
    pub const ARP_SHA: u8 = 24;
    pub const ARP_THA: u8 = 25;
    pub const IPV6_SRC: u8 = 26;
    pub const IPV6_DST: u8 = 27;
    pub const IPV6_FLABEL: u8 = 28;
    pub const ICMPV6_TYPE: u8 = 29;
    pub const ICMPV6_CODE: u8 = 30;
    pub const IPV6_ND_TARGET: u8 = 31;
    pub const IPV6_ND_SLL: u8 = 32;
    pub const IPV6_ND_TLL: u8 = 33;
    pub const MPLS_LABEL: u8 = 34;
    pub const MPLS_TC: u8 = 35;
    pub const MPLS_BOS: u8 = 36;
    pub const PBB_ISID: u8 = 37;
    pub const TUNNEL_ID: u8 = 38;
    pub const IPV6_EXTHDR: u8 = 39;
}

/// Nicira NXM fields (class [`class::NXM_0`] = `NXM_OF_*`, [`class::NXM_1`] = `NXM_NX_*`).
pub mod nxm {
    /// NXM_0
    pub const OF_IN_PORT: u8 = 0;
    pub const OF_VLAN_TCI: u8 = 4;
    pub const OF_IP_TOS: u8 = 5;
    /// NXM_1: `NXM_NX_REG0` .. `NXM_NX_REG15` are fields 0..15.
    pub const NX_REG0: u8 = 0;
    pub const NX_IP_FRAG: u8 = 26;
    pub const NX_IP_TTL: u8 = 29;
    pub const NX_TCP_FLAGS: u8 = 34;
    /// `NXM_NX_XXREG0` .. `NXM_NX_XXREG3` are fields 111..114 (16 bytes).
    pub const NX_XXREG0: u8 = 111;
}

/// ONF experimenter OXM fields (OpenFlow 1.3 extension of OVS: `ONFOXM_ET_*`).
pub mod onf {
    pub const TCP_FLAGS: u8 = 42;
}

/// The value length of a known field (None: not known here; the caller decides).
pub fn field_len(class: u16, field: u8, experimenter: Option<u32>) -> Option<usize> {
    use basic::*;
    Some(match class {
        class::OPENFLOW_BASIC => match field {
            IN_PORT | IN_PHY_PORT => 4,
            METADATA | TUNNEL_ID => 8,
            ETH_DST | ETH_SRC | ARP_SHA | ARP_THA | IPV6_ND_SLL | IPV6_ND_TLL => 6,
            ETH_TYPE | VLAN_VID | TCP_SRC | TCP_DST | UDP_SRC | UDP_DST | SCTP_SRC | SCTP_DST
            | ARP_OP | IPV6_EXTHDR => 2,
            VLAN_PCP | IP_DSCP | IP_ECN | IP_PROTO | ICMPV4_TYPE | ICMPV4_CODE | ICMPV6_TYPE
            | ICMPV6_CODE | MPLS_TC | MPLS_BOS => 1,
            IPV4_SRC | IPV4_DST | ARP_SPA | ARP_TPA | IPV6_FLABEL | MPLS_LABEL => 4,
            IPV6_SRC | IPV6_DST | IPV6_ND_TARGET => 16,
            PBB_ISID => 3,
            _ => return None,
        },
        class::NXM_0 => match field {
            0 | 3 | 4 | 9..=12 | 15 => 2,
            1 | 2 => 6,
            5 | 6 | 13 | 14 => 1,
            7 | 8 | 16 | 17 => 4,
            _ => return None,
        },
        class::NXM_1 => match field {
            0..=15 => 4,
            16 => 8,
            17 | 18 | 24 | 25 => 6,
            19 | 20 | 23 => 16,
            21 | 22 | 26 | 28 | 29 => 1,
            27 => 4,
            34 => 2,
            111..=114 => 16,
            _ => return None,
        },
        class::PACKET_REGS if field < 8 => 8,
        class::EXPERIMENTER if experimenter == Some(ONF_EXPERIMENTER_ID) => match field {
            onf::TCP_FLAGS => 2,
            _ => return None,
        },
        _ => return None,
    })
}

/// One OXM TLV: class, field, value and optional mask (both the field's width).
/// Parsed TLVs borrow their bytes from the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oxm<'a> {
    pub class: u16,
    pub field: u8,
    /// The experimenter id of an experimenter-class OXM.
    pub experimenter: Option<u32>,
    pub value: Cow<'a, [u8]>,
    pub mask: Option<Cow<'a, [u8]>>,
}

impl<'a> Oxm<'a> {
    /// A basic-class field with an exact value.
    pub fn basic(field: u8, value: &[u8]) -> Oxm<'static> {
        Oxm {
            class: class::OPENFLOW_BASIC,
            field,
            experimenter: None,
            value: Cow::Owned(value.to_vec()),
            mask: None,
        }
    }
    /// A field of `class` with `value` and a mask unless it is all ones.
    pub fn masked(class: u16, field: u8, value: &[u8], mask: &[u8]) -> Oxm<'static> {
        let m = if mask.iter().all(|&b| b == 0xff) {
            None
        } else {
            Some(Cow::Owned(mask.to_vec()))
        };
        Oxm {
            class,
            field,
            experimenter: None,
            value: Cow::Owned(value.to_vec()),
            mask: m,
        }
    }
    /// The value as an unsigned big-endian integer (up to 16 bytes).
    pub fn value_u128(&self) -> u128 {
        be(&self.value)
    }
    /// The mask as an integer (all ones of the value's width when there is none).
    pub fn mask_u128(&self) -> u128 {
        match &self.mask {
            Some(m) => be(m),
            None => ones(self.value.len()),
        }
    }
    /// The 32-bit OXM header (the experimenter id is not part of it).
    pub fn header(&self) -> u32 {
        let exp = if self.experimenter.is_some() { 4 } else { 0 };
        let len = self.value.len() * if self.mask.is_some() { 2 } else { 1 } + exp;
        ((self.class as u32) << 16)
            | ((self.field as u32) << 9)
            | ((self.mask.is_some() as u32) << 8)
            | len as u32
    }
    /// Appends the TLV.
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.put_u32(self.header());
        if let Some(e) = self.experimenter {
            buf.put_u32(e);
        }
        buf.extend_from_slice(&self.value);
        if let Some(m) = &self.mask {
            buf.extend_from_slice(m);
        }
    }
    /// Owned copy.
    pub fn into_owned(self) -> Oxm<'static> {
        Oxm {
            class: self.class,
            field: self.field,
            experimenter: self.experimenter,
            value: Cow::Owned(self.value.into_owned()),
            mask: self.mask.map(|m| Cow::Owned(m.into_owned())),
        }
    }
}

/// Big-endian bytes (at most 16) as an integer.
pub fn be(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |a, &x| (a << 8) | x as u128)
}

/// All ones of `n` bytes.
pub fn ones(n: usize) -> u128 {
    if n >= 16 {
        u128::MAX
    } else {
        (1u128 << (8 * n)) - 1
    }
}

/// Parses one TLV from `r`. Lengths are checked against the field's known width
/// (value, or value + mask when masked); an unknown field only needs to fit.
pub fn parse_one<'a>(r: &mut Reader<'a>) -> Result<Oxm<'a>> {
    let h = r.u32()?;
    let class = (h >> 16) as u16;
    let field = ((h >> 9) & 0x7f) as u8;
    let has_mask = h & 0x100 != 0;
    let mut len = (h & 0xff) as usize;
    let mut experimenter = None;
    if class == class::EXPERIMENTER {
        if len < 4 {
            return Err(Error::BadOxmLen(h));
        }
        experimenter = Some(r.u32().map_err(|_| Error::BadOxmLen(h))?);
        len -= 4;
    }
    let body = r.bytes(len).map_err(|_| Error::BadOxmLen(h))?;
    let vlen = if has_mask {
        if !len.is_multiple_of(2) || len == 0 {
            return Err(Error::BadOxmLen(h));
        }
        len / 2
    } else {
        len
    };
    if let Some(want) = field_len(class, field, experimenter) {
        if vlen != want {
            return Err(Error::BadOxmLen(h));
        }
    }
    Ok(Oxm {
        class,
        field,
        experimenter,
        value: Cow::Borrowed(&body[..vlen]),
        mask: has_mask.then(|| Cow::Borrowed(&body[vlen..])),
    })
}

/// Parses a run of TLVs filling `buf` exactly.
pub fn parse_fields(buf: &[u8]) -> Result<Vec<Oxm<'_>>> {
    let mut r = Reader::new(buf, "oxm");
    let mut v = Vec::new();
    while r.remaining() > 0 {
        v.push(parse_one(&mut r)?);
    }
    Ok(v)
}

/// `OFPMT_OXM`.
pub const MATCH_TYPE_OXM: u16 = 1;

/// Parses an `ofp_match` (type OXM, length without padding, TLVs, padding to 8) from
/// `r`, consuming the padding too.
pub fn parse_match<'a>(r: &mut Reader<'a>) -> Result<Vec<Oxm<'a>>> {
    let ty = r.u16()?;
    let len = r.u16()? as usize;
    if ty != MATCH_TYPE_OXM {
        return Err(Error::BadMatchType(ty));
    }
    if len < 4 {
        return Err(Error::BadLength {
            what: "ofp_match",
            len,
        });
    }
    let body = r.bytes(len - 4).map_err(|_| Error::BadLength {
        what: "ofp_match",
        len,
    })?;
    let pad = len.next_multiple_of(8) - len;
    r.skip(pad)?;
    parse_fields(body)
}

/// Appends an `ofp_match` holding `fields`, padded to 8 bytes.
pub fn emit_match(buf: &mut Vec<u8>, fields: &[Oxm<'_>]) {
    let start = buf.len();
    buf.put_u16(MATCH_TYPE_OXM);
    buf.put_u16(0);
    for f in fields {
        f.emit(buf);
    }
    let len = buf.len() - start;
    buf.set_u16(start + 2, len as u16);
    buf.pad8_from(start);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The match of the FLOW_MOD ovs-ofctl 3.1 sends for
    /// `add-flow -O OpenFlow13 tcp,in_port=1,nw_dst=10.0.0.0/8,tp_dst=80,...`
    /// (captured with tshark on loopback against `dpustack switch run`).
    const MATCH: &[u8] = &[
        0x00, 0x01, 0x00, 0x29, // OXM, length 41
        0x80, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, // in_port=1
        0x80, 0x00, 0x0a, 0x02, 0x08, 0x00, // eth_type=0x0800
        0x80, 0x00, 0x19, 0x08, 0x0a, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00, 0x00, // ipv4_dst/8
        0x80, 0x00, 0x14, 0x01, 0x06, // ip_proto=6
        0x80, 0x00, 0x1c, 0x02, 0x00, 0x50, // tcp_dst=80
        0, 0, 0, 0, 0, 0, 0, // padding
    ];

    #[test]
    fn match_parse_emit_round_trip() {
        let mut r = Reader::new(MATCH, "t");
        let f = parse_match(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        assert_eq!(f.len(), 5);
        assert_eq!((f[0].field, f[0].value_u128()), (basic::IN_PORT, 1));
        assert_eq!(f[2].field, basic::IPV4_DST);
        assert_eq!(f[2].mask_u128(), 0xff00_0000);
        assert_eq!(f[4].value_u128(), 80);
        let mut out = Vec::new();
        emit_match(&mut out, &f);
        assert_eq!(out, MATCH);
    }

    #[test]
    fn bad_lengths_are_errors() {
        // in_port with 2 bytes
        let b = [0x80, 0x00, 0x00, 0x02, 0, 1];
        assert!(matches!(parse_fields(&b), Err(Error::BadOxmLen(_))));
        // TLV past the end
        let b = [0x80, 0x00, 0x00, 0x04, 0, 1];
        assert!(matches!(parse_fields(&b), Err(Error::BadOxmLen(_))));
        // masked with odd length
        let b = [0x80, 0x00, 0x19, 0x07, 1, 2, 3, 4, 5, 6, 7];
        assert!(parse_fields(&b).is_err());
        // match length below 4
        let b = [0, 1, 0, 2, 0, 0, 0, 0];
        assert!(parse_match(&mut Reader::new(&b, "t")).is_err());
        // standard match type
        let b = [0, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(
            parse_match(&mut Reader::new(&b, "t")),
            Err(Error::BadMatchType(0))
        );
        // experimenter OXM shorter than its id
        let b = [0xff, 0xff, 0x54, 0x02, 0x4f, 0x4e];
        assert!(parse_fields(&b).is_err());
    }

    #[test]
    fn experimenter_oxm() {
        let o = Oxm {
            class: class::EXPERIMENTER,
            field: onf::TCP_FLAGS,
            experimenter: Some(ONF_EXPERIMENTER_ID),
            value: Cow::Owned(vec![0, 2]),
            mask: Some(Cow::Owned(vec![0, 0x12])),
        };
        let mut b = Vec::new();
        o.emit(&mut b);
        assert_eq!(b.len(), 12);
        assert_eq!(&b[..4], &[0xff, 0xff, 0x55, 0x08]);
        let p = parse_fields(&b).unwrap();
        assert_eq!(p[0], o);
    }
}
