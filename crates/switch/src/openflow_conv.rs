//! Conversions between OpenFlow 1.3 wire structures (crate `openflow`) and the flow
//! table's rules (crate `flow`): OXM match fields <-> [`flow::ofctl::Match`]
//! (prerequisites checked as OVS does: `OFPBMC_BAD_PREREQ`), actions and
//! instructions <-> [`flow::ofctl::Action`]s. Everything the table cannot hold is
//! refused with the OpenFlow error a switch sends for it ([`OfError`]).

use flow::field::Field;
use flow::key::FlowKey;
use flow::key::{f, Fd, VLAN_CFI};
use flow::ofctl::{Action, Match, MetaField, SetField};
use openflow::action::{Action as OfAction, Instruction};
use openflow::consts::{err, port};
use openflow::oxm::{basic, class, nxm, onf, Oxm};

/// An OpenFlow error to send back: type, code and why (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfError {
    pub err_type: u16,
    pub code: u16,
    pub why: String,
}

impl OfError {
    pub fn new(err_type: u16, code: u16, why: impl Into<String>) -> OfError {
        OfError {
            err_type,
            code,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for OfError {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            fm,
            "{} (type {} code {})",
            self.why, self.err_type, self.code
        )
    }
}

impl From<openflow::Error> for OfError {
    fn from(e: openflow::Error) -> OfError {
        let (t, c) = e.ofp_error();
        OfError::new(t, c, e.to_string())
    }
}

const ETH_IP: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const ETH_ARP: u16 = 0x0806;
const ETH_RARP: u16 = 0x8035;

fn bad_match(code: u16, why: impl Into<String>) -> OfError {
    OfError::new(err::BAD_MATCH, code, why)
}

/// OpenFlow 1.3 port (32 bits) to the table's numbering (OVS: OpenFlow 1.0's 16-bit
/// reserved ports, `LOCAL` = 0xfffe).
pub fn port_from_of13(p: u32) -> Option<u32> {
    if p < port::MAX {
        Some(p)
    } else if p == port::LOCAL {
        Some(0xfffe)
    } else {
        None
    }
}

/// The table's port number to OpenFlow 1.3.
pub fn port_to_of13(p: u32) -> u32 {
    if (0xff00..=0xffff).contains(&p) {
        p + 0xffff_0000
    } else {
        p
    }
}

/// OXM match fields to a table match; prerequisites, duplicates, values and masks
/// checked (OFPET_BAD_MATCH with the code OpenFlow 1.3 gives each).
pub fn oxm_to_match(fields: &[Oxm<'_>]) -> Result<Match, OfError> {
    let mut m = Match::default();
    let mut seen: Vec<(u16, u8, Option<u32>)> = Vec::new();
    for o in fields {
        let id = (o.class, o.field, o.experimenter);
        if seen.contains(&id) {
            return Err(bad_match(
                err::BMC_DUP_FIELD,
                format!("field {:#x} twice", o.header()),
            ));
        }
        seen.push(id);
        set_field_match(&mut m, o)?;
    }
    check_prereqs(&m, fields)?;
    Ok(m)
}

fn exact_only(o: &Oxm<'_>) -> Result<(), OfError> {
    if o.mask.is_some() {
        return Err(bad_match(
            err::BMC_BAD_MASK,
            format!("field {:#x} cannot be masked", o.header()),
        ));
    }
    Ok(())
}

fn set_u128(m: &mut Match, hi: Fd, lo: Fd, v: u128, mk: u128) {
    m.set_masked(hi, (v >> 64) as u64, (mk >> 64) as u64);
    m.set_masked(lo, v as u64, mk as u64);
}

fn set_field_match(m: &mut Match, o: &Oxm<'_>) -> Result<(), OfError> {
    let v = o.value_u128();
    let mk = o.mask_u128();
    let vm = |fd: Fd| (v as u64, mk as u64, fd);
    // Value bits outside the mask are dropped (as OVS does).
    let masked = |m: &mut Match, (a, b, fd): (u64, u64, Fd)| -> Result<(), OfError> {
        m.set_masked(fd, a, b);
        Ok(())
    };
    match (o.class, o.field) {
        (class::OPENFLOW_BASIC, basic::IN_PORT) | (class::NXM_0, nxm::OF_IN_PORT) => {
            exact_only(o)?;
            let p = if o.class == class::NXM_0 {
                Some(v as u32).filter(|&p| p < 0xff00 || p == 0xfffe)
            } else {
                port_from_of13(v as u32)
            };
            let p = p.ok_or_else(|| bad_match(err::BMC_BAD_VALUE, format!("in_port {v:#x}")))?;
            m.set_exact(f::IN_PORT, p as u64);
        }
        (class::OPENFLOW_BASIC, basic::METADATA) => masked(m, vm(f::METADATA))?,
        (class::OPENFLOW_BASIC, basic::ETH_DST) => masked(m, vm(f::DL_DST))?,
        (class::OPENFLOW_BASIC, basic::ETH_SRC) => masked(m, vm(f::DL_SRC))?,
        (class::OPENFLOW_BASIC, basic::ETH_TYPE) => {
            exact_only(o)?;
            if v < 0x600 {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("eth_type {v:#x}")));
            }
            m.set_exact(f::DL_TYPE, v as u64);
        }
        (class::OPENFLOW_BASIC, basic::VLAN_VID) => {
            if v & !0x1fff != 0 || (o.mask.is_some() && mk & !0x1fff != 0) {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("vlan_vid {v:#x}")));
            }
            // OVS match_set_vlan_vid_masked: VID + CFI (= OFPVID_PRESENT) bits.
            let pcp_m = m.mask.get(f::VLAN0_TCI) & 0xe000;
            let pcp_v = m.key.get(f::VLAN0_TCI) & 0xe000;
            m.set_masked(
                f::VLAN0_TCI,
                pcp_v | (v as u64 & 0x1fff),
                pcp_m | (mk as u64 & 0x1fff),
            );
        }
        (class::OPENFLOW_BASIC, basic::VLAN_PCP) => {
            exact_only(o)?;
            if v > 7 {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("vlan_pcp {v}")));
            }
            m.or_masked(f::VLAN0_TCI, ((v as u64) << 13) | VLAN_CFI as u64, 0xf000);
        }
        (class::NXM_0, nxm::OF_VLAN_TCI) => masked(m, vm(f::VLAN0_TCI))?,
        (class::OPENFLOW_BASIC, basic::IP_DSCP) => {
            exact_only(o)?;
            if v > 63 {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("ip_dscp {v}")));
            }
            m.or_masked(f::NW_TOS, (v as u64) << 2, 0xfc);
        }
        (class::NXM_0, nxm::OF_IP_TOS) => {
            exact_only(o)?;
            m.or_masked(f::NW_TOS, v as u64 & 0xfc, 0xfc);
        }
        (class::OPENFLOW_BASIC, basic::IP_ECN) => {
            exact_only(o)?;
            if v > 3 {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("ip_ecn {v}")));
            }
            m.or_masked(f::NW_TOS, v as u64, 0x03);
        }
        (class::OPENFLOW_BASIC, basic::IP_PROTO) => {
            exact_only(o)?;
            m.set_exact(f::NW_PROTO, v as u64);
        }
        (class::OPENFLOW_BASIC, basic::IPV4_SRC | basic::ARP_SPA) => masked(m, vm(f::NW_SRC))?,
        (class::OPENFLOW_BASIC, basic::IPV4_DST | basic::ARP_TPA) => masked(m, vm(f::NW_DST))?,
        (class::OPENFLOW_BASIC, basic::TCP_SRC | basic::UDP_SRC | basic::SCTP_SRC) => {
            masked(m, vm(f::TP_SRC))?
        }
        (class::OPENFLOW_BASIC, basic::TCP_DST | basic::UDP_DST | basic::SCTP_DST) => {
            masked(m, vm(f::TP_DST))?
        }
        (class::OPENFLOW_BASIC, basic::ICMPV4_TYPE | basic::ICMPV6_TYPE) => {
            exact_only(o)?;
            m.set_exact(f::TP_SRC, v as u64);
        }
        (class::OPENFLOW_BASIC, basic::ICMPV4_CODE | basic::ICMPV6_CODE) => {
            exact_only(o)?;
            m.set_exact(f::TP_DST, v as u64);
        }
        (class::OPENFLOW_BASIC, basic::ARP_OP) => {
            exact_only(o)?;
            if v > 0xff {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("arp_op {v}")));
            }
            m.set_exact(f::NW_PROTO, v as u64);
        }
        (class::OPENFLOW_BASIC, basic::ARP_SHA | basic::IPV6_ND_SLL) => masked(m, vm(f::ARP_SHA))?,
        (class::OPENFLOW_BASIC, basic::ARP_THA | basic::IPV6_ND_TLL) => masked(m, vm(f::ARP_THA))?,
        (class::OPENFLOW_BASIC, basic::IPV6_SRC) => {
            set_u128(m, f::IPV6_SRC_HI, f::IPV6_SRC_LO, v & mk, mk)
        }
        (class::OPENFLOW_BASIC, basic::IPV6_DST) => {
            set_u128(m, f::IPV6_DST_HI, f::IPV6_DST_LO, v & mk, mk)
        }
        (class::OPENFLOW_BASIC, basic::IPV6_ND_TARGET) => {
            set_u128(m, f::ND_TARGET_HI, f::ND_TARGET_LO, v & mk, mk)
        }
        (class::OPENFLOW_BASIC, basic::IPV6_FLABEL) => {
            if v >> 20 != 0 {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("ipv6_label {v:#x}")));
            }
            // OVS match_set_ipv6_label: an exact label is an all-ones 32-bit mask.
            let mk = if o.mask.is_none() {
                0xffff_ffff
            } else {
                mk as u64 & 0xfffff
            };
            masked(m, (v as u64, mk, f::IPV6_LABEL))?
        }
        (class::NXM_1, r) if r < 16 => masked(m, vm(f::REGS[r as usize]))?,
        (class::NXM_1, x) if (nxm::NX_XXREG0..nxm::NX_XXREG0 + 4).contains(&x) => {
            let i = (x - nxm::NX_XXREG0) as usize;
            set_u128(m, f::XREGS[2 * i], f::XREGS[2 * i + 1], v & mk, mk)
        }
        (class::PACKET_REGS, x) if x < 8 => masked(m, vm(f::XREGS[x as usize]))?,
        (class::NXM_1, nxm::NX_IP_TTL) => {
            exact_only(o)?;
            m.set_exact(f::NW_TTL, v as u64);
        }
        (class::NXM_1, nxm::NX_IP_FRAG) => {
            if v & !3 != 0 || (o.mask.is_some() && mk & !3 != 0) {
                return Err(bad_match(err::BMC_BAD_VALUE, format!("nw_frag {v:#x}")));
            }
            masked(m, (v as u64 & mk as u64, mk as u64, f::NW_FRAG))?
        }
        (class::NXM_1, nxm::NX_TCP_FLAGS) => {
            masked(m, (v as u64, mk as u64 & 0xfff, f::TCP_FLAGS))?
        }
        (class::EXPERIMENTER, onf::TCP_FLAGS)
            if o.experimenter == Some(openflow::consts::ONF_EXPERIMENTER_ID) =>
        {
            masked(m, (v as u64, mk as u64 & 0xfff, f::TCP_FLAGS))?
        }
        _ => {
            return Err(bad_match(
                err::BMC_BAD_FIELD,
                format!(
                    "match field {:#010x} is not supported by the table",
                    o.header()
                ),
            ))
        }
    }
    Ok(())
}

/// OFPBMC_BAD_PREREQ checks: each field needs the match to pin what makes it exist.
fn check_prereqs(m: &Match, fields: &[Oxm<'_>]) -> Result<(), OfError> {
    let dl = (m.mask.get(f::DL_TYPE) == 0xffff).then(|| m.key.get(f::DL_TYPE) as u16);
    let proto = (m.mask.get(f::NW_PROTO) == 0xff).then(|| m.key.get(f::NW_PROTO) as u8);
    let ip = dl == Some(ETH_IP);
    let ip6 = dl == Some(ETH_IPV6);
    let arp = dl == Some(ETH_ARP) || dl == Some(ETH_RARP);
    let icmp6_type = (m.mask.get(f::TP_SRC) == 0xffff || m.mask.get(f::TP_SRC) == 0xff)
        .then(|| m.key.get(f::TP_SRC) as u8);
    let vlan = m.mask.get(f::VLAN0_TCI) & VLAN_CFI as u64 != 0
        && m.key.get(f::VLAN0_TCI) & VLAN_CFI as u64 != 0;
    for o in fields {
        let ok = match (o.class, o.field) {
            (class::OPENFLOW_BASIC, b) => match b {
                basic::VLAN_PCP => vlan,
                basic::IP_DSCP | basic::IP_ECN | basic::IP_PROTO => ip || ip6,
                basic::IPV4_SRC | basic::IPV4_DST => ip,
                basic::TCP_SRC | basic::TCP_DST => (ip || ip6) && proto == Some(6),
                basic::UDP_SRC | basic::UDP_DST => (ip || ip6) && proto == Some(17),
                basic::SCTP_SRC | basic::SCTP_DST => (ip || ip6) && proto == Some(132),
                basic::ICMPV4_TYPE | basic::ICMPV4_CODE => ip && proto == Some(1),
                basic::ARP_OP
                | basic::ARP_SPA
                | basic::ARP_TPA
                | basic::ARP_SHA
                | basic::ARP_THA => arp,
                basic::IPV6_SRC | basic::IPV6_DST | basic::IPV6_FLABEL => ip6,
                basic::ICMPV6_TYPE | basic::ICMPV6_CODE => ip6 && proto == Some(58),
                basic::IPV6_ND_TARGET => {
                    ip6 && proto == Some(58) && matches!(icmp6_type, Some(135) | Some(136))
                }
                basic::IPV6_ND_SLL => ip6 && proto == Some(58) && icmp6_type == Some(135),
                basic::IPV6_ND_TLL => ip6 && proto == Some(58) && icmp6_type == Some(136),
                _ => true,
            },
            (class::NXM_0, nxm::OF_IP_TOS)
            | (class::NXM_1, nxm::NX_IP_TTL)
            | (class::NXM_1, nxm::NX_IP_FRAG) => ip || ip6,
            (class::NXM_1, nxm::NX_TCP_FLAGS) | (class::EXPERIMENTER, onf::TCP_FLAGS) => {
                (ip || ip6) && proto == Some(6)
            }
            _ => true,
        };
        if !ok {
            return Err(bad_match(
                err::BMC_BAD_PREREQ,
                format!("prerequisites of match field {:#010x} not met", o.header()),
            ));
        }
    }
    Ok(())
}

fn bytes(v: u128, n: usize) -> Vec<u8> {
    v.to_be_bytes()[16 - n..].to_vec()
}

fn oxm(class: u16, field: u8, n: usize, v: u128, mk: u128) -> Oxm<'static> {
    Oxm::masked(class, field, &bytes(v, n), &bytes(mk, n))
}

/// A table match as OXM fields, the way OVS encodes a match for OpenFlow 1.3
/// (`nx_put_raw`): basic fields where OpenFlow 1.3 has them, NXM for the rest.
pub fn match_to_oxm(m: &Match) -> Vec<Oxm<'static>> {
    let mut o = Vec::new();
    let g = |fd: Fd| (m.key.get(fd) as u128, m.mask.get(fd) as u128);
    let has = |fd: Fd| m.mask.get(fd) != 0;
    let b = class::OPENFLOW_BASIC;
    if has(f::IN_PORT) {
        let p = port_to_of13(m.key.get(f::IN_PORT) as u32);
        o.push(Oxm::basic(basic::IN_PORT, &p.to_be_bytes()));
    }
    for (i, fd) in f::REGS.iter().enumerate() {
        if has(*fd) {
            let (v, mk) = g(*fd);
            o.push(oxm(class::NXM_1, i as u8, 4, v, mk));
        }
    }
    if has(f::METADATA) {
        let (v, mk) = g(f::METADATA);
        o.push(oxm(b, basic::METADATA, 8, v, mk));
    }
    for (fd, field) in [(f::DL_SRC, basic::ETH_SRC), (f::DL_DST, basic::ETH_DST)] {
        if has(fd) {
            let (v, mk) = g(fd);
            o.push(oxm(b, field, 6, v, mk));
        }
    }
    let dl = has(f::DL_TYPE).then(|| m.key.get(f::DL_TYPE) as u16);
    if let Some(t) = dl {
        o.push(Oxm::basic(basic::ETH_TYPE, &t.to_be_bytes()));
    }
    // VLAN (OVS nx_put_raw, OXM branch).
    let (tci, tci_m) = g(f::VLAN0_TCI);
    let vid = tci & 0x1fff;
    let vid_m = tci_m & 0x1fff;
    if vid_m == 0x1fff {
        o.push(Oxm::basic(basic::VLAN_VID, &(vid as u16).to_be_bytes()));
    } else if vid_m != 0 {
        o.push(oxm(b, basic::VLAN_VID, 2, vid, vid_m));
    }
    if vid != 0 && tci_m & 0xe000 != 0 {
        o.push(Oxm::basic(basic::VLAN_PCP, &[(tci >> 13) as u8]));
    }
    let proto = has(f::NW_PROTO).then(|| m.key.get(f::NW_PROTO) as u8);
    match dl {
        Some(ETH_IP) | Some(ETH_IPV6) => {
            if dl == Some(ETH_IP) {
                for (fd, field) in [(f::NW_SRC, basic::IPV4_SRC), (f::NW_DST, basic::IPV4_DST)] {
                    if has(fd) {
                        let (v, mk) = g(fd);
                        o.push(oxm(b, field, 4, v, mk));
                    }
                }
            } else {
                for (hi, lo, field) in [
                    (f::IPV6_SRC_HI, f::IPV6_SRC_LO, basic::IPV6_SRC),
                    (f::IPV6_DST_HI, f::IPV6_DST_LO, basic::IPV6_DST),
                ] {
                    if has(hi) || has(lo) {
                        let v = (g(hi).0 << 64) | g(lo).0;
                        let mk = (g(hi).1 << 64) | g(lo).1;
                        o.push(oxm(b, field, 16, v, mk));
                    }
                }
                if has(f::IPV6_LABEL) {
                    let (v, mk) = g(f::IPV6_LABEL);
                    let mk = if mk & 0xfffff == 0xfffff {
                        0xffff_ffff
                    } else {
                        mk
                    };
                    o.push(oxm(b, basic::IPV6_FLABEL, 4, v, mk));
                }
            }
            if has(f::NW_FRAG) {
                let (v, mk) = g(f::NW_FRAG);
                o.push(oxm(class::NXM_1, nxm::NX_IP_FRAG, 1, v, mk));
            }
            let (tos, tos_m) = g(f::NW_TOS);
            if tos_m & 0xfc != 0 {
                o.push(Oxm::basic(basic::IP_DSCP, &[(tos >> 2) as u8]));
            }
            if tos_m & 0x03 != 0 {
                o.push(Oxm::basic(basic::IP_ECN, &[(tos & 3) as u8]));
            }
            if has(f::NW_TTL) {
                o.push(Oxm {
                    class: class::NXM_1,
                    field: nxm::NX_IP_TTL,
                    experimenter: None,
                    value: vec![m.key.get(f::NW_TTL) as u8].into(),
                    mask: None,
                });
            }
            if let Some(p) = proto {
                o.push(Oxm::basic(basic::IP_PROTO, &[p]));
                let ports = match p {
                    6 => Some((basic::TCP_SRC, basic::TCP_DST)),
                    17 => Some((basic::UDP_SRC, basic::UDP_DST)),
                    132 => Some((basic::SCTP_SRC, basic::SCTP_DST)),
                    _ => None,
                };
                if let Some((s, d)) = ports {
                    for (fd, field) in [(f::TP_SRC, s), (f::TP_DST, d)] {
                        if has(fd) {
                            let (v, mk) = g(fd);
                            o.push(oxm(b, field, 2, v, mk));
                        }
                    }
                    if p == 6 && has(f::TCP_FLAGS) {
                        let (v, mk) = g(f::TCP_FLAGS);
                        o.push(oxm(class::NXM_1, nxm::NX_TCP_FLAGS, 2, v, mk));
                    }
                }
                let icmp = match (dl, p) {
                    (Some(ETH_IP), 1) => Some((basic::ICMPV4_TYPE, basic::ICMPV4_CODE)),
                    (Some(ETH_IPV6), 58) => Some((basic::ICMPV6_TYPE, basic::ICMPV6_CODE)),
                    _ => None,
                };
                if let Some((ty, code)) = icmp {
                    if has(f::TP_SRC) {
                        o.push(Oxm::basic(ty, &[m.key.get(f::TP_SRC) as u8]));
                    }
                    if has(f::TP_DST) {
                        o.push(Oxm::basic(code, &[m.key.get(f::TP_DST) as u8]));
                    }
                    if p == 58 {
                        if has(f::ND_TARGET_HI) || has(f::ND_TARGET_LO) {
                            let v = (g(f::ND_TARGET_HI).0 << 64) | g(f::ND_TARGET_LO).0;
                            let mk = (g(f::ND_TARGET_HI).1 << 64) | g(f::ND_TARGET_LO).1;
                            o.push(oxm(b, basic::IPV6_ND_TARGET, 16, v, mk));
                        }
                        if has(f::ARP_SHA) {
                            let (v, mk) = g(f::ARP_SHA);
                            o.push(oxm(b, basic::IPV6_ND_SLL, 6, v, mk));
                        }
                        if has(f::ARP_THA) {
                            let (v, mk) = g(f::ARP_THA);
                            o.push(oxm(b, basic::IPV6_ND_TLL, 6, v, mk));
                        }
                    }
                }
            }
        }
        Some(ETH_ARP) | Some(ETH_RARP) => {
            if let Some(p) = proto {
                o.push(Oxm::basic(basic::ARP_OP, &(p as u16).to_be_bytes()));
            }
            for (fd, field, n) in [
                (f::NW_SRC, basic::ARP_SPA, 4),
                (f::NW_DST, basic::ARP_TPA, 4),
                (f::ARP_SHA, basic::ARP_SHA, 6),
                (f::ARP_THA, basic::ARP_THA, 6),
            ] {
                if has(fd) {
                    let (v, mk) = g(fd);
                    o.push(oxm(b, field, n, v, mk));
                }
            }
        }
        _ => {}
    }
    o
}

fn bad_action(code: u16, why: impl Into<String>) -> OfError {
    OfError::new(err::BAD_ACTION, code, why)
}

/// The field a 32-bit NXM/OXM header names as a `move`/`load` end, with its width
/// (None: not a field of the table).
fn src_field(h: u32) -> Option<(Field, u8)> {
    let class = (h >> 16) as u16;
    let field = ((h >> 9) & 0x7f) as u8;
    Field::from_header(class, field).map(|f| (f, f.bits()))
}

fn nxm_header(class: u16, field: u8, len: u32) -> u32 {
    ((class as u32) << 16) | ((field as u32) << 9) | len
}

fn meta_header(m: MetaField) -> u32 {
    match m {
        MetaField::Reg(i) => nxm_header(class::NXM_1, i, 4),
        MetaField::Xreg(i) => nxm_header(class::PACKET_REGS, i, 8),
        MetaField::Metadata => nxm_header(class::OPENFLOW_BASIC, basic::METADATA, 8),
    }
}

/// The header `load`/`move` name a field by (OVS: NXM if it has one, else OXM).
fn src_header(s: Field) -> u32 {
    if let Field::Meta(m) = s {
        return meta_header(m);
    }
    let (c, f, n) = s
        .nxm_header()
        .or_else(|| s.oxm_header())
        .expect("every field of the table has a header");
    nxm_header(c, f, n as u32)
}

/// The header a whole-field set_field names a field by (OXM if it has one, else NXM).
fn set_field_header(s: Field) -> (u16, u8, u8) {
    s.oxm_header()
        .or_else(|| s.nxm_header())
        .expect("every field of the table has a header")
}

/// What the match guarantees, for set_field prerequisites (OVS: OFPBAC_MATCH_INCONSISTENT).
struct Pre {
    /// The match's values (prerequisites of the other fields, OVS
    /// `mf_are_match_prereqs_ok`).
    key: FlowKey,
    dl: Option<u16>,
    proto: Option<u8>,
    vlans: u8,
}

/// A write to a packet field other than the [`SetField`] ones (also masked).
fn field_write(
    fl: Field,
    value: u128,
    mask: u128,
    as_load: bool,
    pre: &Pre,
) -> Result<Action, OfError> {
    if !fl.writable() || fl == Field::InPortOxm {
        return Err(bad_action(
            err::BAC_BAD_SET_ARGUMENT,
            format!("{} is not writable", fl.name()),
        ));
    }
    if !fl.prereqs_ok(&pre.key, None) {
        return Err(bad_action(
            err::BAC_MATCH_INCONSISTENT,
            format!("{}: prerequisites not met by the match", fl.name()),
        ));
    }
    let mask = mask & fl.ones();
    Ok(Action::LoadField {
        dst: fl,
        value: value & mask,
        mask,
        as_load: as_load || mask != fl.ones(),
    })
}

fn set_field_action(o: &Oxm<'_>, pre: &Pre) -> Result<Action, OfError> {
    if o.mask.is_some() {
        return match Field::from_header(o.class, o.field) {
            Some(fl) if !matches!(fl, Field::Meta(_)) => {
                field_write(fl, o.value_u128(), o.mask_u128(), false, pre)
            }
            _ => Err(bad_action(err::BAC_BAD_SET_ARGUMENT, "masked set_field")),
        };
    }
    let v = o.value_u128();
    let ip = matches!(pre.dl, Some(ETH_IP) | Some(ETH_IPV6));
    let (sf, v, ok) = match (o.class, o.field) {
        (class::OPENFLOW_BASIC, basic::ETH_SRC) => (SetField::EthSrc, v, true),
        (class::OPENFLOW_BASIC, basic::ETH_DST) => (SetField::EthDst, v, true),
        (class::OPENFLOW_BASIC, basic::IPV4_SRC) => (SetField::Ipv4Src, v, pre.dl == Some(ETH_IP)),
        (class::OPENFLOW_BASIC, basic::IPV4_DST) => (SetField::Ipv4Dst, v, pre.dl == Some(ETH_IP)),
        (class::OPENFLOW_BASIC, basic::IPV6_SRC) => {
            (SetField::Ipv6Src, v, pre.dl == Some(ETH_IPV6))
        }
        (class::OPENFLOW_BASIC, basic::IPV6_DST) => {
            (SetField::Ipv6Dst, v, pre.dl == Some(ETH_IPV6))
        }
        (class::OPENFLOW_BASIC, basic::IP_DSCP) if v <= 63 => (SetField::IpDscp, v << 2, ip),
        (class::NXM_0, nxm::OF_IP_TOS) if v & 3 == 0 => (SetField::NwTos, v, ip),
        (class::OPENFLOW_BASIC, basic::TCP_SRC) => {
            (SetField::TcpSrc, v, ip && pre.proto == Some(6))
        }
        (class::OPENFLOW_BASIC, basic::TCP_DST) => {
            (SetField::TcpDst, v, ip && pre.proto == Some(6))
        }
        (class::OPENFLOW_BASIC, basic::UDP_SRC) => {
            (SetField::UdpSrc, v, ip && pre.proto == Some(17))
        }
        (class::OPENFLOW_BASIC, basic::UDP_DST) => {
            (SetField::UdpDst, v, ip && pre.proto == Some(17))
        }
        (class::OPENFLOW_BASIC, basic::VLAN_VID) if v <= 0x1fff => {
            (SetField::VlanVid, v & 0xfff, pre.vlans > 0)
        }
        (class::OPENFLOW_BASIC, basic::VLAN_PCP) if v <= 7 => (SetField::VlanPcp, v, pre.vlans > 0),
        _ => {
            let h = nxm_header(o.class, o.field, o.value.len() as u32);
            match src_field(h) {
                Some((Field::Meta(mf), _)) => {
                    let ones = mf.fd().ones();
                    return Ok(Action::Load {
                        dst: mf,
                        value: v as u64 & ones,
                        mask: ones,
                    });
                }
                Some((fl, _)) => return field_write(fl, v, u128::MAX, false, pre),
                None => {}
            }
            return Err(bad_action(
                err::BAC_BAD_SET_TYPE,
                format!("set_field to field {:#010x} is not supported", o.header()),
            ));
        }
    };
    if !ok {
        return Err(bad_action(
            err::BAC_MATCH_INCONSISTENT,
            format!("set_field {sf:?}: prerequisites not met by the match"),
        ));
    }
    Ok(Action::SetField(sf, v))
}

/// Converts OpenFlow actions to table actions (`in_rule`: of a flow rule, where
/// prerequisites come from `m`; PACKET_OUT actions have none).
pub fn actions_from_of(
    acts: &[OfAction<'_>],
    m: &Match,
    groups: &dyn Fn(u32) -> bool,
) -> Result<Vec<Action>, OfError> {
    let mut pre = Pre {
        key: m.key,
        dl: (m.mask.get(f::DL_TYPE) == 0xffff).then(|| m.key.get(f::DL_TYPE) as u16),
        proto: (m.mask.get(f::NW_PROTO) == 0xff).then(|| m.key.get(f::NW_PROTO) as u8),
        vlans: (m.mask.get(f::VLAN0_TCI) & VLAN_CFI as u64 != 0
            && m.key.get(f::VLAN0_TCI) & VLAN_CFI as u64 != 0) as u8,
    };
    let mut out = Vec::new();
    for a in acts {
        out.push(match a {
            OfAction::Output { port: p, max_len } => match *p {
                port::IN_PORT => Action::InPort,
                port::NORMAL => Action::Normal,
                port::CONTROLLER => Action::Controller(*max_len),
                p => match port_from_of13(p) {
                    Some(p) => Action::Output(p),
                    None => {
                        return Err(bad_action(
                            err::BAC_BAD_OUT_PORT,
                            format!("output to port {p:#x} is not supported"),
                        ))
                    }
                },
            },
            OfAction::Group(g) => {
                if !groups(*g) {
                    return Err(bad_action(
                        err::BAC_BAD_OUT_GROUP,
                        format!("group {g} does not exist"),
                    ));
                }
                Action::Group(*g)
            }
            OfAction::PushVlan(t) => {
                if *t != 0x8100 && *t != 0x88a8 {
                    return Err(bad_action(
                        err::BAC_BAD_ARGUMENT,
                        format!("push_vlan TPID {t:#x}"),
                    ));
                }
                pre.vlans += 1;
                Action::PushVlan(*t)
            }
            OfAction::PopVlan => {
                pre.vlans = pre.vlans.saturating_sub(1);
                Action::StripVlan
            }
            OfAction::DecNwTtl | OfAction::NxDecTtl => Action::DecTtl,
            OfAction::SetNwTtl(t) => {
                if !matches!(pre.dl, Some(ETH_IP) | Some(ETH_IPV6)) {
                    return Err(bad_action(
                        err::BAC_MATCH_INCONSISTENT,
                        "set_nw_ttl needs an ip or ipv6 match",
                    ));
                }
                Action::ModNwTtl(*t)
            }
            OfAction::SetField(o) => set_field_action(o, &pre)?,
            OfAction::Resubmit { in_port, table } => {
                let port = match *in_port {
                    0xfff8 => None,
                    p => Some(p as u32),
                };
                let table = table.filter(|&t| t != 255);
                if port.is_none() && table.is_none() {
                    return Err(bad_action(
                        err::BAC_BAD_ARGUMENT,
                        "resubmit without port or table",
                    ));
                }
                Action::Resubmit { port, table }
            }
            OfAction::RegLoad {
                ofs_nbits,
                dst,
                value,
            } => {
                let Some((fl, width)) = src_field(*dst) else {
                    return Err(bad_action(
                        err::BAC_BAD_ARGUMENT,
                        format!("load into field {dst:#010x} is not supported"),
                    ));
                };
                let ofs = (ofs_nbits >> 6) as u32;
                let n = (ofs_nbits & 63) as u32 + 1;
                let Field::Meta(mf) = fl else {
                    if ofs + n > width as u32 || (n < 64 && value >> n != 0) {
                        return Err(bad_action(err::BAC_BAD_ARGUMENT, "load outside the field"));
                    }
                    let m = if n >= 64 {
                        u64::MAX as u128
                    } else {
                        (1u128 << n) - 1
                    };
                    out.push(field_write(
                        fl,
                        (*value as u128) << ofs,
                        m << ofs,
                        true,
                        &pre,
                    )?);
                    continue;
                };
                if ofs + n > width as u32 || (n < 64 && value >> n != 0) {
                    return Err(bad_action(err::BAC_BAD_ARGUMENT, "load outside the field"));
                }
                let mask = if n >= 64 {
                    u64::MAX
                } else {
                    ((1u64 << n) - 1) << ofs
                };
                Action::Load {
                    dst: mf,
                    value: (value << ofs) & mask,
                    mask,
                }
            }
            OfAction::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => {
                let (Some((s, sw)), Some((d, dw))) = (src_field(*src), src_field(*dst)) else {
                    return Err(bad_action(
                        err::BAC_BAD_ARGUMENT,
                        "move between these fields is not supported",
                    ));
                };
                if *n_bits == 0 || src_ofs + n_bits > sw as u16 || dst_ofs + n_bits > dw as u16 {
                    return Err(bad_action(err::BAC_BAD_ARGUMENT, "move outside the fields"));
                }
                if !d.writable() || d == Field::InPortOxm {
                    return Err(bad_action(
                        err::BAC_BAD_SET_ARGUMENT,
                        format!("move into read-only {}", d.name()),
                    ));
                }
                for fl in [s, d] {
                    if !fl.prereqs_ok(&pre.key, None) {
                        return Err(bad_action(
                            err::BAC_MATCH_INCONSISTENT,
                            format!("move: {} prerequisites not met by the match", fl.name()),
                        ));
                    }
                }
                Action::Move {
                    src: s,
                    src_ofs: *src_ofs as u8,
                    dst: d,
                    dst_ofs: *dst_ofs as u8,
                    n_bits: *n_bits as u8,
                }
            }
        });
    }
    Ok(out)
}

/// A FLOW_MOD's instructions to the table's action list (apply-actions, then
/// write_metadata, then goto_table, as OpenFlow orders them). `table`: the rule's
/// table (goto_table must go forward).
pub fn instructions_from_of(
    ins: &[Instruction<'_>],
    table: u8,
    m: &Match,
    groups: &dyn Fn(u32) -> bool,
) -> Result<Vec<Action>, OfError> {
    let mut acts = Vec::new();
    let mut meta = None;
    let mut goto = None;
    let unsup = |why: &str| OfError::new(err::BAD_INSTRUCTION, err::BIC_UNSUP_INST, why);
    let mut seen = [false; 8];
    for i in ins {
        let k = match i {
            Instruction::GotoTable(_) => 1,
            Instruction::WriteMetadata { .. } => 2,
            Instruction::WriteActions(_) => 3,
            Instruction::ApplyActions(_) => 4,
            Instruction::ClearActions => 5,
            Instruction::Meter(_) => 6,
        };
        if seen[k] {
            return Err(OfError::new(
                err::BAD_INSTRUCTION,
                err::BIC_UNSUP_INST,
                "an instruction type twice",
            ));
        }
        seen[k] = true;
        match i {
            Instruction::ApplyActions(a) => acts = actions_from_of(a, m, groups)?,
            Instruction::WriteMetadata { value, mask } => meta = Some((*value, *mask)),
            Instruction::GotoTable(t) => {
                if *t <= table || *t > flow::ofctl::MAX_TABLE {
                    return Err(OfError::new(
                        err::BAD_INSTRUCTION,
                        err::BIC_BAD_TABLE_ID,
                        format!("goto_table:{t} from table {table}"),
                    ));
                }
                goto = Some(*t)
            }
            Instruction::WriteActions(_) => {
                return Err(unsup("write_actions: the table has no action set"))
            }
            Instruction::ClearActions => {
                return Err(unsup("clear_actions: the table has no action set"))
            }
            Instruction::Meter(_) => return Err(unsup("meters are not supported")),
        }
    }
    if let Some((value, mask)) = meta {
        acts.push(Action::WriteMetadata { value, mask });
    }
    if let Some(t) = goto {
        acts.push(Action::GotoTable(t));
    }
    Ok(acts)
}

fn set_field_oxm(sf: SetField, v: u128) -> Oxm<'static> {
    let (class, field, n, v) = match sf {
        SetField::EthSrc => (class::OPENFLOW_BASIC, basic::ETH_SRC, 6, v),
        SetField::EthDst => (class::OPENFLOW_BASIC, basic::ETH_DST, 6, v),
        SetField::Ipv4Src => (class::OPENFLOW_BASIC, basic::IPV4_SRC, 4, v),
        SetField::Ipv4Dst => (class::OPENFLOW_BASIC, basic::IPV4_DST, 4, v),
        SetField::Ipv6Src => (class::OPENFLOW_BASIC, basic::IPV6_SRC, 16, v),
        SetField::Ipv6Dst => (class::OPENFLOW_BASIC, basic::IPV6_DST, 16, v),
        SetField::IpDscp => (class::OPENFLOW_BASIC, basic::IP_DSCP, 1, v >> 2),
        SetField::NwTos => (class::NXM_0, nxm::OF_IP_TOS, 1, v),
        SetField::TcpSrc => (class::OPENFLOW_BASIC, basic::TCP_SRC, 2, v),
        SetField::TcpDst => (class::OPENFLOW_BASIC, basic::TCP_DST, 2, v),
        SetField::UdpSrc => (class::OPENFLOW_BASIC, basic::UDP_SRC, 2, v),
        SetField::UdpDst => (class::OPENFLOW_BASIC, basic::UDP_DST, 2, v),
        SetField::VlanVid => (class::OPENFLOW_BASIC, basic::VLAN_VID, 2, v | 0x1000),
        SetField::VlanPcp => (class::OPENFLOW_BASIC, basic::VLAN_PCP, 1, v),
    };
    Oxm::masked(class, field, &bytes(v, n), &bytes(u128::MAX, n))
}

/// The table's action list as OpenFlow 1.3 instructions (apply-actions, then
/// write_metadata and goto_table), as OVS encodes them.
pub fn actions_to_of(acts: &[Action]) -> Vec<Instruction<'static>> {
    let mut apply = Vec::new();
    let mut ins = Vec::new();
    let mut meta = None;
    let mut goto = None;
    for a in acts {
        apply.push(match *a {
            Action::Output(p) => OfAction::Output {
                port: port_to_of13(p),
                max_len: 0,
            },
            Action::InPort => OfAction::Output {
                port: port::IN_PORT,
                max_len: 0,
            },
            Action::Normal => OfAction::Output {
                port: port::NORMAL,
                max_len: 0,
            },
            Action::Controller(ml) => OfAction::Output {
                port: port::CONTROLLER,
                max_len: ml,
            },
            Action::StripVlan => OfAction::PopVlan,
            Action::PushVlan(t) => OfAction::PushVlan(t),
            Action::DecTtl => OfAction::DecNwTtl,
            Action::Group(g) => OfAction::Group(g),
            Action::SetField(sf, v) => OfAction::SetField(set_field_oxm(sf, v)),
            Action::Resubmit { port, table } => OfAction::Resubmit {
                in_port: port.map_or(0xfff8, |p| p as u16),
                table: if port.is_some() && table.is_none() {
                    None
                } else {
                    Some(table.unwrap_or(255))
                },
            },
            Action::Load { dst, value, mask } => {
                let ones = dst.fd().ones();
                let ofs = mask.trailing_zeros();
                let n = mask.count_ones();
                let contiguous = mask != 0 && (mask >> ofs).wrapping_add(1) & (mask >> ofs) == 0;
                if mask == ones {
                    let w = (dst.fd().bits / 8) as usize;
                    let h = meta_header(dst);
                    OfAction::SetField(Oxm::masked(
                        (h >> 16) as u16,
                        ((h >> 9) & 0x7f) as u8,
                        &bytes(value as u128, w),
                        &bytes(u128::MAX, w),
                    ))
                } else if contiguous {
                    OfAction::RegLoad {
                        ofs_nbits: ((ofs as u16) << 6) | (n as u16 - 1),
                        dst: meta_header(dst),
                        value: value >> ofs,
                    }
                } else {
                    // A non-contiguous mask: OVS would send a masked set_field
                    // (NXAST_REG_LOAD2); one load per run of bits does the same.
                    let mut rest = mask;
                    while rest != 0 {
                        let o = rest.trailing_zeros();
                        let run = (rest >> o).trailing_ones();
                        let m = if run >= 64 {
                            u64::MAX
                        } else {
                            ((1u64 << run) - 1) << o
                        };
                        apply.push(OfAction::RegLoad {
                            ofs_nbits: ((o as u16) << 6) | (run as u16 - 1),
                            dst: meta_header(dst),
                            value: (value & m) >> o,
                        });
                        rest &= !m;
                    }
                    continue;
                }
            }
            Action::Move {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } => OfAction::RegMove {
                n_bits: n_bits as u16,
                src_ofs: src_ofs as u16,
                dst_ofs: dst_ofs as u16,
                src: src_header(src),
                dst: src_header(dst),
            },
            Action::ModNwTtl(t) => OfAction::SetNwTtl(t),
            Action::LoadField {
                dst,
                value,
                mask,
                as_load,
            } => {
                if !as_load && mask == dst.ones() {
                    let (c, f, n) = set_field_header(dst);
                    OfAction::SetField(Oxm::masked(
                        c,
                        f,
                        &bytes(value, n as usize),
                        &bytes(u128::MAX, n as usize),
                    ))
                } else {
                    // One NXAST_REG_LOAD per contiguous run of at most 64 bits (OVS
                    // `set_field_to_nxast`).
                    let h = src_header(dst);
                    let mut rest = mask;
                    while rest != 0 {
                        let o = rest.trailing_zeros();
                        let run = (rest >> o).trailing_ones().min(64);
                        let m = if run >= 128 {
                            u128::MAX
                        } else {
                            ((1u128 << run) - 1) << o
                        };
                        apply.push(OfAction::RegLoad {
                            ofs_nbits: ((o as u16) << 6) | (run as u16 - 1),
                            dst: h,
                            value: ((value & m) >> o) as u64,
                        });
                        rest &= !m;
                    }
                    continue;
                }
            }
            Action::WriteMetadata { value, mask } => {
                meta = Some((value, mask));
                continue;
            }
            Action::GotoTable(t) => {
                goto = Some(t);
                continue;
            }
            // Never in a rule (internal to frozen translations).
            Action::UnrollXlate { .. } => continue,
        });
    }
    if !apply.is_empty() {
        ins.push(Instruction::ApplyActions(apply));
    }
    if let Some((value, mask)) = meta {
        ins.push(Instruction::WriteMetadata { value, mask });
    }
    if let Some(t) = goto {
        ins.push(Instruction::GotoTable(t));
    }
    ins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(line: &str) {
        let r = &flow::parse_flows(line).unwrap()[0];
        let o = match_to_oxm(&r.m);
        let m2 = oxm_to_match(&o).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(m2, r.m, "{line}: match");
        let ins = actions_to_of(&r.actions);
        let a2 = instructions_from_of(&ins, r.table, &r.m, &|_| true)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(a2, r.actions, "{line}: actions");
    }

    /// Rules of every field and action the table holds survive OXM/instructions
    /// and back unchanged.
    #[test]
    fn rules_round_trip_through_openflow() {
        for l in [
            "priority=100,in_port=1,actions=output:2",
            "tcp,nw_src=10.0.0.0/8,tp_dst=80,actions=set_field:8080->tcp_dst,output:3",
            "udp6,ipv6_src=fd00::/64,udp_dst=53,actions=dec_ttl,output:1",
            "arp,arp_op=1,arp_spa=10.0.0.1,arp_tha=00:00:00:00:00:00,actions=NORMAL",
            "dl_vlan=100,dl_vlan_pcp=3,actions=strip_vlan,output:4",
            "vlan_tci=0x0000/0x1fff,actions=push_vlan:0x8100,set_field:4196->vlan_vid,output:2",
            "icmp,icmp_type=8,icmp_code=0,nw_tos=16,nw_ecn=1,nw_ttl=64,actions=controller:128",
            "icmp6,icmpv6_type=135,nd_target=fd00::1,nd_sll=02:00:00:00:00:01,actions=drop",
            // issue 17: writes to every writable field, whole, masked and partial
            "udp,actions=set_field:53->udp_dst,load:0x35->NXM_OF_UDP_SRC[],set_field:5/0xf->udp_src,output:2",
            "sctp,actions=set_field:99->sctp_dst,set_field:0x5/0xf->sctp_src,move:OXM_OF_SCTP_DST[0..7]->OXM_OF_SCTP_SRC[8..15],output:2",
            "ip,actions=set_field:7->nw_ttl,set_field:1->nw_ecn,mod_nw_ttl:5,load:0x3f->NXM_OF_IP_TOS[2..7],set_field:1.2.3.4/255.255.0.0->ip_src,output:2",
            "ipv6,actions=set_field:0x12345->ipv6_label,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],load:1->NXM_NX_IPV6_DST[70..71],output:2",
            "arp,actions=set_field:2->arp_op,set_field:1.1.1.1->arp_spa,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],output:2",
            "icmp,actions=set_field:0->icmp_type,move:NXM_OF_ICMP_TYPE[]->NXM_OF_ICMP_CODE[],output:2",
            "icmp6,icmp_type=135,icmp_code=0,actions=set_field:fe80::1->nd_target,set_field:00:11:22:33:44:55->nd_sll,output:2",
            "dl_vlan=5,actions=load:7->NXM_OF_VLAN_TCI[0..11],set_field:3->in_port,output:2",
            "ip,nw_frag=later,actions=in_port",
            "tcp,tcp_flags=+syn-ack,actions=group:1",
            "reg0=0x5/0xff,metadata=0x1/0xff,actions=load:0x3->NXM_NX_REG3[4..7],set_field:0x7->reg2,move:NXM_OF_IN_PORT[]->NXM_NX_REG1[0..15],resubmit(,2),resubmit:3,write_metadata:0xa0/0xf0,goto_table:1",
            "dl_src=02:00:00:00:00:00/ff:00:00:00:00:00,dl_dst=02:00:00:00:00:02,ipv6,ipv6_label=0x12345,actions=set_field:fd00::9->ipv6_dst,output:1",
            "ip,actions=mod_nw_tos:32,set_field:10.1.1.1->ip_src,mod_dl_src:02:00:00:00:00:09,output:65534",
        ] {
            rt(l);
        }
    }

    #[test]
    fn refusals_carry_their_openflow_errors() {
        // tcp_dst without ip_proto=6: BAD_PREREQ.
        let o = [
            Oxm::basic(basic::ETH_TYPE, &[8, 0]),
            Oxm::basic(basic::TCP_DST, &[0, 80]),
        ];
        assert_eq!(oxm_to_match(&o).unwrap_err().code, err::BMC_BAD_PREREQ);
        let o = [
            Oxm::basic(basic::ETH_TYPE, &[8, 0]),
            Oxm::basic(basic::ETH_TYPE, &[8, 0]),
        ];
        assert_eq!(oxm_to_match(&o).unwrap_err().code, err::BMC_DUP_FIELD);
        let o = [Oxm::basic(basic::MPLS_LABEL, &[0, 0, 0, 1])];
        assert_eq!(oxm_to_match(&o).unwrap_err().code, err::BMC_BAD_FIELD);
        let m = Match::default();
        let e = actions_from_of(&[OfAction::Group(9)], &m, &|_| false).unwrap_err();
        assert_eq!(
            (e.err_type, e.code),
            (err::BAD_ACTION, err::BAC_BAD_OUT_GROUP)
        );
        let e = actions_from_of(
            &[OfAction::SetField(Oxm::basic(basic::TCP_DST, &[0, 1]))],
            &m,
            &|_| true,
        )
        .unwrap_err();
        assert_eq!(e.code, err::BAC_MATCH_INCONSISTENT);
        let e = actions_from_of(
            &[OfAction::Output {
                port: port::FLOOD,
                max_len: 0,
            }],
            &m,
            &|_| true,
        )
        .unwrap_err();
        assert_eq!(e.code, err::BAC_BAD_OUT_PORT);
        let e = instructions_from_of(&[Instruction::GotoTable(0)], 0, &m, &|_| true).unwrap_err();
        assert_eq!(
            (e.err_type, e.code),
            (err::BAD_INSTRUCTION, err::BIC_BAD_TABLE_ID)
        );
        let e = instructions_from_of(&[Instruction::ClearActions], 0, &m, &|_| true).unwrap_err();
        assert_eq!(e.code, err::BIC_UNSUP_INST);
    }
}
