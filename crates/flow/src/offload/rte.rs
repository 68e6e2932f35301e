//! rte_flow-like provider (OVS `netdev-offload-dpdk` model): a megaflow becomes
//! attributes (group = recirc_id, port = in_port) + pattern items (ETH, VLAN, IPV4,
//! IPV6, TCP, UDP, SCTP, ICMP, ICMP6) + actions. Every mask bit must be consumed by an
//! item or the flow is refused. Actions that translate give a **full** offload (with
//! COUNT); otherwise the flow is **partially** offloaded: `MARK` + `RSS`, software runs
//! the actions of the flow it finds by the mark.

use std::collections::HashMap;
use std::sync::Mutex;

use super::nic::{EmuNic, HwOp, NicConfig};
use super::{Caps, FlowSpec, HwRx, HwStats, MaskCursor, OffloadError, OffloadProvider, Offloaded};
use crate::key::{f, FlowKey, VLAN_CFI};
use crate::xlate::OdpAction;
use wire::ethernet::{ethertype, ipproto};

/// (spec, mask) of a header field.
pub type Sm<T> = (T, T);

/// rte_flow attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attr {
    pub group: u32,
    pub priority: u32,
    pub ingress: bool,
    /// Port the flow is created on (the megaflow's in_port).
    pub port_id: u32,
}

/// Pattern items (only the fields OVS fills).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Eth {
        dst: Sm<u64>,
        src: Sm<u64>,
        /// EtherType of the outer header (the TPID when tagged).
        ty: Sm<u16>,
        /// `has_vlan` (spec, mask).
        has_vlan: Sm<bool>,
    },
    Vlan {
        tci: Sm<u16>,
        inner_type: Sm<u16>,
    },
    Ipv4 {
        src: Sm<u32>,
        dst: Sm<u32>,
        tos: Sm<u8>,
        ttl: Sm<u8>,
        proto: Sm<u8>,
        /// fragment_offset field (MF | offset): spec, last (range end; 0 = none), mask.
        frag: (u16, u16, u16),
    },
    Ipv6 {
        src: Sm<u128>,
        dst: Sm<u128>,
        tc: Sm<u8>,
        hop: Sm<u8>,
        proto: Sm<u8>,
        /// `has_frag_ext` (spec, mask).
        has_frag_ext: Sm<bool>,
    },
    Tcp {
        src: Sm<u16>,
        dst: Sm<u16>,
        flags: Sm<u8>,
    },
    Udp {
        src: Sm<u16>,
        dst: Sm<u16>,
    },
    Sctp {
        src: Sm<u16>,
        dst: Sm<u16>,
    },
    Icmp {
        ty: Sm<u8>,
        code: Sm<u8>,
    },
    Icmp6 {
        ty: Sm<u8>,
        code: Sm<u8>,
    },
}

/// rte_flow actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    PortId(u32),
    Drop,
    Count,
    Mark(u32),
    Rss,
    OfPushVlan(u16),
    OfSetVlanVid(u16),
    OfSetVlanPcp(u8),
    OfPopVlan,
    SetMacSrc(u64),
    SetMacDst(u64),
    SetIpv4Src(u32),
    SetIpv4Dst(u32),
    SetIpv4Dscp(u8),
    SetIpv6Src(u128),
    SetIpv6Dst(u128),
    SetIpv6Dscp(u8),
    SetTtl(u8),
    SetTpSrc(u16),
    SetTpDst(u16),
}

/// One rte_flow rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RteFlow {
    pub attr: Attr,
    pub pattern: Vec<Item>,
    pub actions: Vec<Action>,
}

/// Translates a megaflow's match into attributes + pattern items.
pub fn translate_match(spec: &FlowSpec) -> Result<(Attr, Vec<Item>), OffloadError> {
    let mut c = MaskCursor::new(spec);
    let unsup = |s: String| Err(OffloadError::Unsupported(s));
    let mut attr = Attr {
        ingress: true,
        ..Default::default()
    };
    attr.group = c.take_exact(f::RECIRC_ID, "recirc_id")?.unwrap_or(0) as u32;
    match c.take_exact(f::IN_PORT, "in_port")? {
        Some(p) => attr.port_id = p as u32,
        None => return unsup("a flow must match in_port (rte flows live on a port)".into()),
    }
    let mut items = Vec::new();
    let (dst, dm) = c.take(f::DL_DST);
    let (src, sm) = c.take(f::DL_SRC);
    let (dlt, dltm) = c.take(f::DL_TYPE);
    let (tci, tcim) = c.take(f::VLAN0_TCI);
    let (tpid, tpidm) = c.take(f::VLAN0_TPID);
    let tagged = tci as u16 & VLAN_CFI != 0;
    let cfi_m = tcim as u16 & VLAN_CFI != 0;
    if c.peek_mask(f::VLAN1_TCI) != 0 || c.peek_mask(f::VLAN1_TPID) != 0 {
        return unsup("second VLAN header (QinQ) not supported".into());
    }
    if tagged {
        items.push(Item::Eth {
            dst: (dst, dm),
            src: (src, sm),
            ty: (tpid as u16, tpidm as u16),
            has_vlan: (true, true),
        });
        items.push(Item::Vlan {
            tci: (tci as u16 & !VLAN_CFI, tcim as u16 & !VLAN_CFI),
            inner_type: (dlt as u16, dltm as u16),
        });
    } else {
        if tcim as u16 & !VLAN_CFI != 0 || tpidm != 0 {
            return unsup("VLAN fields matched on an untagged flow".into());
        }
        items.push(Item::Eth {
            dst: (dst, dm),
            src: (src, sm),
            ty: (dlt as u16, dltm as u16),
            has_vlan: (false, cfi_m),
        });
    }
    let l4proto = match (dlt as u16, dltm) {
        (ethertype::IPV4, 0xffff) => {
            let (s, smk) = c.take(f::NW_SRC);
            let (d, dmk) = c.take(f::NW_DST);
            let (tos, tosm) = c.take(f::NW_TOS);
            let (ttl, ttlm) = c.take(f::NW_TTL);
            let (p, pm) = c.take(f::NW_PROTO);
            let (fr, frm) = c.take(f::NW_FRAG);
            let frag = match (frm as u8, fr as u8) {
                (0, _) => (0, 0, 0),
                (3, 0) | (1, 0) => (0, 0, 0x3fff),
                (3, 1) => (0x2000, 0, 0x3fff),
                (3, 3) | (2, 2) => (1, 0x1fff, 0x1fff),
                (1, 1) => (1, 0x3fff, 0x3fff),
                (2, 0) => (0, 0, 0x1fff),
                (m, v) => return unsup(format!("nw_frag={v:#x}/{m:#x}")),
            };
            items.push(Item::Ipv4 {
                src: (s as u32, smk as u32),
                dst: (d as u32, dmk as u32),
                tos: (tos as u8, tosm as u8),
                ttl: (ttl as u8, ttlm as u8),
                proto: (p as u8, pm as u8),
                frag,
            });
            (pm == 0xff && fr & 2 == 0).then_some(p as u8)
        }
        (ethertype::IPV6, 0xffff) => {
            let s = (c.take(f::IPV6_SRC_HI), c.take(f::IPV6_SRC_LO));
            let d = (c.take(f::IPV6_DST_HI), c.take(f::IPV6_DST_LO));
            let w = |x: ((u64, u64), (u64, u64))| {
                (
                    ((x.0 .0 as u128) << 64) | x.1 .0 as u128,
                    ((x.0 .1 as u128) << 64) | x.1 .1 as u128,
                )
            };
            if c.peek_mask(f::IPV6_LABEL) != 0 {
                return unsup("ipv6_label not supported".into());
            }
            let (tc, tcm) = c.take(f::NW_TOS);
            let (hop, hopm) = c.take(f::NW_TTL);
            let (p, pm) = c.take(f::NW_PROTO);
            let (fr, frm) = c.take(f::NW_FRAG);
            let has_frag_ext = match (frm as u8 & 1, fr as u8) {
                (0, _) if frm == 0 => (false, false),
                (1, 0) => (false, true),
                (1, 1) if frm == 1 => (true, true),
                _ => return unsup(format!("ipv6 nw_frag={fr:#x}/{frm:#x}")),
            };
            items.push(Item::Ipv6 {
                src: w(s),
                dst: w(d),
                tc: (tc as u8, tcm as u8),
                hop: (hop as u8, hopm as u8),
                proto: (p as u8, pm as u8),
                has_frag_ext,
            });
            (pm == 0xff && fr & 2 == 0).then_some(p as u8)
        }
        _ => None,
    };
    if let Some(p) = l4proto {
        let (ts, tsm) = c.take(f::TP_SRC);
        let (td, tdm) = c.take(f::TP_DST);
        let (s, d) = ((ts as u16, tsm as u16), (td as u16, tdm as u16));
        match p {
            ipproto::TCP => {
                let (fl, flm) = c.take(f::TCP_FLAGS);
                if flm > 0xff {
                    return unsup("tcp_flags above the low 8 bits".into());
                }
                items.push(Item::Tcp {
                    src: s,
                    dst: d,
                    flags: (fl as u8, flm as u8),
                });
            }
            ipproto::UDP => items.push(Item::Udp { src: s, dst: d }),
            ipproto::SCTP => items.push(Item::Sctp { src: s, dst: d }),
            ipproto::ICMP | ipproto::ICMPV6 if tsm > 0xff || tdm > 0xff => {
                return unsup("ICMP type/code above 8 bits".into())
            }
            ipproto::ICMP if dlt as u16 == ethertype::IPV4 => items.push(Item::Icmp {
                ty: (s.0 as u8, s.1 as u8),
                code: (d.0 as u8, d.1 as u8),
            }),
            ipproto::ICMPV6 if dlt as u16 == ethertype::IPV6 => items.push(Item::Icmp6 {
                ty: (s.0 as u8, s.1 as u8),
                code: (d.0 as u8, d.1 as u8),
            }),
            _ => {
                if tsm != 0 || tdm != 0 {
                    return unsup(format!("L4 ports of IP protocol {p}"));
                }
            }
        }
    }
    c.finish()?;
    Ok((attr, items))
}

/// What the NIC makes of attributes + items: the match it programs.
pub fn decode_match(attr: &Attr, items: &[Item]) -> (FlowKey, FlowKey) {
    let mut k = FlowKey::ZERO;
    let mut m = FlowKey::ZERO;
    let mut put = |fd, (v, mk): (u64, u64)| {
        k.set(fd, v & mk);
        m.set(fd, mk);
    };
    put(f::RECIRC_ID, (attr.group as u64, u32::MAX as u64));
    put(f::IN_PORT, (attr.port_id as u64, u32::MAX as u64));
    let mut tagged = false;
    for it in items {
        match *it {
            Item::Eth {
                dst,
                src,
                ty,
                has_vlan,
            } => {
                put(f::DL_DST, dst);
                put(f::DL_SRC, src);
                if has_vlan.0 {
                    tagged = true;
                    put(f::VLAN0_TPID, (ty.0 as u64, ty.1 as u64));
                } else {
                    put(f::DL_TYPE, (ty.0 as u64, ty.1 as u64));
                }
                if has_vlan.1 {
                    // has_vlan: the "tag present" bit (set later with the TCI when tagged).
                    put(
                        f::VLAN0_TCI,
                        (
                            if has_vlan.0 { VLAN_CFI as u64 } else { 0 },
                            VLAN_CFI as u64,
                        ),
                    );
                }
            }
            Item::Vlan { tci, inner_type } => {
                let cfi = if tagged { VLAN_CFI } else { 0 };
                put(
                    f::VLAN0_TCI,
                    ((tci.0 | cfi) as u64, (tci.1 | VLAN_CFI) as u64),
                );
                put(f::DL_TYPE, (inner_type.0 as u64, inner_type.1 as u64));
            }
            Item::Ipv4 {
                src,
                dst,
                tos,
                ttl,
                proto,
                frag,
            } => {
                put(f::NW_SRC, (src.0 as u64, src.1 as u64));
                put(f::NW_DST, (dst.0 as u64, dst.1 as u64));
                put(f::NW_TOS, (tos.0 as u64, tos.1 as u64));
                put(f::NW_TTL, (ttl.0 as u64, ttl.1 as u64));
                put(f::NW_PROTO, (proto.0 as u64, proto.1 as u64));
                let fr = match frag {
                    (0, 0, 0) => (0, 0),
                    (0, 0, 0x3fff) => (0, 3),
                    (0x2000, 0, 0x3fff) => (1, 3),
                    (1, 0x1fff, 0x1fff) => (3, 3),
                    (1, 0x3fff, 0x3fff) => (1, 1),
                    (0, 0, 0x1fff) => (0, 2),
                    _ => (0, 0),
                };
                put(f::NW_FRAG, fr);
            }
            Item::Ipv6 {
                src,
                dst,
                tc,
                hop,
                proto,
                has_frag_ext,
            } => {
                put(f::IPV6_SRC_HI, ((src.0 >> 64) as u64, (src.1 >> 64) as u64));
                put(f::IPV6_SRC_LO, (src.0 as u64, src.1 as u64));
                put(f::IPV6_DST_HI, ((dst.0 >> 64) as u64, (dst.1 >> 64) as u64));
                put(f::IPV6_DST_LO, (dst.0 as u64, dst.1 as u64));
                put(f::NW_TOS, (tc.0 as u64, tc.1 as u64));
                put(f::NW_TTL, (hop.0 as u64, hop.1 as u64));
                put(f::NW_PROTO, (proto.0 as u64, proto.1 as u64));
                if has_frag_ext.1 {
                    put(f::NW_FRAG, (has_frag_ext.0 as u64, 1));
                }
            }
            Item::Tcp { src, dst, flags } => {
                put(f::TP_SRC, (src.0 as u64, src.1 as u64));
                put(f::TP_DST, (dst.0 as u64, dst.1 as u64));
                put(f::TCP_FLAGS, (flags.0 as u64, flags.1 as u64));
            }
            Item::Udp { src, dst } | Item::Sctp { src, dst } => {
                put(f::TP_SRC, (src.0 as u64, src.1 as u64));
                put(f::TP_DST, (dst.0 as u64, dst.1 as u64));
            }
            Item::Icmp { ty, code } | Item::Icmp6 { ty, code } => {
                put(f::TP_SRC, (ty.0 as u64, ty.1 as u64));
                put(f::TP_DST, (code.0 as u64, code.1 as u64));
            }
        }
    }
    (k, m)
}

/// Translates datapath actions into rte_flow actions (full offload), or says why not.
pub fn translate_actions(acts: &[OdpAction]) -> Result<Vec<Action>, OffloadError> {
    let unsup = |s: &str| Err(OffloadError::Unsupported(s.to_string()));
    let mut out = Vec::new();
    for a in acts {
        match *a {
            OdpAction::Output(p) => out.push(Action::PortId(p)),
            OdpAction::PushVlan { tpid, tci } => {
                out.push(Action::OfPushVlan(tpid));
                out.push(Action::OfSetVlanVid(tci & 0x0fff));
                out.push(Action::OfSetVlanPcp((tci >> 13) as u8));
            }
            OdpAction::PopVlan => out.push(Action::OfPopVlan),
            OdpAction::SetEth { src, dst } => {
                for ((v, m), mk) in [
                    (src, Action::SetMacSrc as fn(u64) -> Action),
                    (dst, Action::SetMacDst),
                ] {
                    match m {
                        0 => {}
                        0xffff_ffff_ffff => out.push(mk(v)),
                        _ => return unsup("partial MAC rewrite"),
                    }
                }
            }
            OdpAction::SetIpv4 { src, dst, tos, ttl } => {
                for ((v, m), mk) in [
                    (src, Action::SetIpv4Src as fn(u32) -> Action),
                    (dst, Action::SetIpv4Dst),
                ] {
                    match m {
                        0 => {}
                        u32::MAX => out.push(mk(v)),
                        _ => return unsup("partial IPv4 address rewrite"),
                    }
                }
                match tos.1 {
                    0 => {}
                    0xfc => out.push(Action::SetIpv4Dscp(tos.0 >> 2)),
                    _ => return unsup("ECN rewrite"),
                }
                match ttl.1 {
                    0 => {}
                    0xff => out.push(Action::SetTtl(ttl.0)),
                    _ => return unsup("partial TTL rewrite"),
                }
            }
            OdpAction::SetIpv6 {
                src,
                dst,
                label,
                tclass,
                hlimit,
            } => {
                if label.1 != 0 {
                    return unsup("IPv6 flow label rewrite");
                }
                for ((v, m), mk) in [
                    (src, Action::SetIpv6Src as fn(u128) -> Action),
                    (dst, Action::SetIpv6Dst),
                ] {
                    match m {
                        0 => {}
                        u128::MAX => out.push(mk(v)),
                        _ => return unsup("partial IPv6 address rewrite"),
                    }
                }
                match tclass.1 {
                    0 => {}
                    0xfc => out.push(Action::SetIpv6Dscp(tclass.0 >> 2)),
                    _ => return unsup("ECN rewrite"),
                }
                match hlimit.1 {
                    0 => {}
                    0xff => out.push(Action::SetTtl(hlimit.0)),
                    _ => return unsup("partial hop limit rewrite"),
                }
            }
            OdpAction::SetL4 { src, dst, .. } => {
                for ((v, m), mk) in [
                    (src, Action::SetTpSrc as fn(u16) -> Action),
                    (dst, Action::SetTpDst),
                ] {
                    match m {
                        0 => {}
                        0xffff => out.push(mk(v)),
                        _ => return unsup("partial L4 port rewrite"),
                    }
                }
            }
            OdpAction::HashSymL4(_) | OdpAction::Recirc(_) => {
                return unsup("hash/recirc (select group) in hardware")
            }
            OdpAction::Controller { .. } => return unsup("controller action"),
            OdpAction::SetArp { .. } => return unsup("ARP rewrite"),
            OdpAction::SetNd { .. } => return unsup("ND rewrite"),
            OdpAction::SetIcmp { .. } => return unsup("ICMP type/code rewrite"),
        }
    }
    if !out.iter().any(|a| matches!(a, Action::PortId(_))) {
        out.push(Action::Drop);
    }
    out.push(Action::Count);
    Ok(out)
}

/// What the NIC runs for rte_flow actions.
pub fn decode_actions(acts: &[Action]) -> Vec<HwOp> {
    let mut ops = Vec::new();
    let mut i = 0;
    let set4 = |src: (u32, u32), dst: (u32, u32), tos: (u8, u8), ttl: (u8, u8)| {
        HwOp::Odp(OdpAction::SetIpv4 { src, dst, tos, ttl })
    };
    let set6 = |src: (u128, u128), dst: (u128, u128), tclass: (u8, u8), hlimit: (u8, u8)| {
        HwOp::Odp(OdpAction::SetIpv6 {
            src,
            dst,
            label: (0, 0),
            tclass,
            hlimit,
        })
    };
    while i < acts.len() {
        match acts[i] {
            Action::PortId(p) => ops.push(HwOp::Odp(OdpAction::Output(p))),
            Action::Drop | Action::Count | Action::Rss => {}
            Action::Mark(m) => ops.push(HwOp::Mark(m)),
            Action::OfPushVlan(tpid) => {
                let mut tci = VLAN_CFI;
                while let Some(a) = acts.get(i + 1) {
                    match *a {
                        Action::OfSetVlanVid(v) => tci |= v & 0x0fff,
                        Action::OfSetVlanPcp(p) => tci |= (p as u16 & 7) << 13,
                        _ => break,
                    }
                    i += 1;
                }
                ops.push(HwOp::Odp(OdpAction::PushVlan { tpid, tci }));
            }
            Action::OfSetVlanVid(_) | Action::OfSetVlanPcp(_) => {}
            Action::OfPopVlan => ops.push(HwOp::Odp(OdpAction::PopVlan)),
            Action::SetMacSrc(v) => ops.push(HwOp::Odp(OdpAction::SetEth {
                src: (v, 0xffff_ffff_ffff),
                dst: (0, 0),
            })),
            Action::SetMacDst(v) => ops.push(HwOp::Odp(OdpAction::SetEth {
                src: (0, 0),
                dst: (v, 0xffff_ffff_ffff),
            })),
            Action::SetIpv4Src(v) => ops.push(set4((v, u32::MAX), (0, 0), (0, 0), (0, 0))),
            Action::SetIpv4Dst(v) => ops.push(set4((0, 0), (v, u32::MAX), (0, 0), (0, 0))),
            Action::SetIpv4Dscp(d) => ops.push(set4((0, 0), (0, 0), (d << 2, 0xfc), (0, 0))),
            Action::SetIpv6Src(v) => ops.push(set6((v, u128::MAX), (0, 0), (0, 0), (0, 0))),
            Action::SetIpv6Dst(v) => ops.push(set6((0, 0), (v, u128::MAX), (0, 0), (0, 0))),
            Action::SetIpv6Dscp(d) => ops.push(set6((0, 0), (0, 0), (d << 2, 0xfc), (0, 0))),
            Action::SetTtl(t) => {
                // The NIC applies it to whichever IP header the frame has.
                ops.push(set4((0, 0), (0, 0), (0, 0), (t, 0xff)));
                ops.push(set6((0, 0), (0, 0), (0, 0), (t, 0xff)));
            }
            Action::SetTpSrc(p) | Action::SetTpDst(p) => {
                let s = matches!(acts[i], Action::SetTpSrc(_));
                let (src, dst) = if s {
                    ((p, 0xffff), (0, 0))
                } else {
                    ((0, 0), (p, 0xffff))
                };
                for proto in [ipproto::TCP, ipproto::UDP, ipproto::SCTP] {
                    ops.push(HwOp::Odp(OdpAction::SetL4 { proto, src, dst }));
                }
            }
        }
        i += 1;
    }
    ops
}

/// Translates a megaflow into one rte_flow rule: full offload if the actions
/// translate, else partial (MARK + RSS); `Err` if the match cannot be expressed.
pub fn translate(spec: &FlowSpec, mark: u32) -> Result<(RteFlow, Offloaded), OffloadError> {
    let (attr, pattern) = translate_match(spec)?;
    match translate_actions(&spec.actions) {
        Ok(actions) => Ok((
            RteFlow {
                attr,
                pattern,
                actions,
            },
            Offloaded::Full { in_hw: true },
        )),
        Err(e) => {
            tracing::debug!("rte: partial offload ({e})");
            Ok((
                RteFlow {
                    attr,
                    pattern,
                    actions: vec![Action::Mark(mark), Action::Rss, Action::Count],
                },
                Offloaded::Partial { mark },
            ))
        }
    }
}

/// The rte_flow provider on an emulated NIC.
#[derive(Debug)]
pub struct RteProvider {
    nic: Mutex<EmuNic>,
    /// ufid -> the flow as created (the "rte_flow handle").
    flows: Mutex<HashMap<u64, RteFlow>>,
    /// Allow partial offload (OVS: only on physical ports; on here).
    pub partial: bool,
}

impl RteProvider {
    pub fn new(cfg: NicConfig) -> RteProvider {
        RteProvider {
            nic: Mutex::new(EmuNic::new(cfg)),
            flows: Mutex::new(HashMap::new()),
            partial: true,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OffloadProvider for RteProvider {
    fn name(&self) -> &'static str {
        "rte"
    }
    fn caps(&self) -> Caps {
        let n = lock(&self.nic);
        Caps {
            full: true,
            partial: self.partial,
            fields: n.cfg.fields,
            capacity: n.cfg.capacity,
        }
    }
    fn put(&self, ufid: u64, spec: &FlowSpec, mark: u32) -> Result<Offloaded, OffloadError> {
        let res = translate(spec, mark).and_then(|(fl, how)| {
            if !self.partial && matches!(how, Offloaded::Partial { .. }) {
                return Err(OffloadError::Unsupported(
                    "actions not offloadable and partial offload off".into(),
                ));
            }
            let (k, m) = decode_match(&fl.attr, &fl.pattern);
            let ops = decode_actions(&fl.actions);
            super::nic::pay_insert_cost(&self.nic);
            let mut nic = lock(&self.nic);
            // A MOD replaces the old rule: it goes first (and stays gone on failure).
            nic.remove(ufid);
            nic.admit(&m)?;
            nic.insert(ufid, k, m, fl.attr.priority, ops);
            Ok((fl, how))
        });
        let mut flows = lock(&self.flows);
        match res {
            Ok((fl, how)) => {
                flows.insert(ufid, fl);
                Ok(how)
            }
            Err(e) => {
                if flows.remove(&ufid).is_some() {
                    lock(&self.nic).remove(ufid);
                }
                Err(e)
            }
        }
    }
    fn del(&self, ufid: u64) -> Result<HwStats, OffloadError> {
        lock(&self.flows).remove(&ufid);
        lock(&self.nic)
            .remove(ufid)
            .ok_or(OffloadError::NotFound(ufid))
    }
    fn stats(&self, ufid: u64, reset: bool) -> Result<HwStats, OffloadError> {
        lock(&self.nic)
            .query(ufid, reset)
            .ok_or(OffloadError::NotFound(ufid))
    }
    fn flush(&self) -> usize {
        lock(&self.flows).clear();
        lock(&self.nic).clear()
    }
    fn len(&self) -> usize {
        lock(&self.nic).len()
    }
    fn rx_key(&self, k: &FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx {
        lock(&self.nic).rx(k, frame, now)
    }
}
