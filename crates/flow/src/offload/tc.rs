//! tc-flower-like provider (OVS `netdev-offload-tc` model): a megaflow becomes one
//! flower filter — chain = recirc_id, priority allocated per (mask, ethertype) like
//! OVS's `get_prio_for_tc_flower`, the ufid kept as the filter's cookie — with
//! flower keys and actions (mirred, vlan push/pop, pedit + csum, drop). The policy
//! is tc's: `skip_sw` (hardware only), `skip_hw` (software tc only), `none` (hardware
//! if it takes the rule, else software tc).
//!
//! Both the hardware and the kernel's software classifier are emulated here (the
//! real netlink backend is later work): the hardware is an [`EmuNic`] with the
//! configured limits, the software classifier one without limits.

use std::collections::HashMap;
use std::sync::Mutex;

use super::nic::{EmuNic, HwOp, NicConfig, PeditHdr};
use super::{Caps, FlowSpec, HwRx, HwStats, MaskCursor, OffloadError, OffloadProvider, Offloaded};
use crate::key::{f, FlowKey, VLAN_CFI};
use crate::xlate::OdpAction;
use wire::ethernet::{ethertype, ipproto};

/// (value, mask).
pub type Sm<T> = (T, T);

/// tc's `skip_sw` / `skip_hw` flags (OVS other_config:tc-policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TcPolicy {
    #[default]
    None,
    SkipSw,
    SkipHw,
}

impl std::str::FromStr for TcPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(TcPolicy::None),
            "skip_sw" => Ok(TcPolicy::SkipSw),
            "skip_hw" => Ok(TcPolicy::SkipHw),
            _ => Err(format!("tc policy {s:?}: none, skip_sw or skip_hw")),
        }
    }
}

/// Flower keys (`tc filter add ... flower KEYS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowerKey {
    pub indev: u32,
    /// Outer EtherType (802.1Q when tagged); None = any.
    pub protocol: Option<u16>,
    pub vlan_id: Option<u16>,
    pub vlan_prio: Option<u8>,
    pub vlan_ethtype: Option<u16>,
    pub dst_mac: Sm<u64>,
    pub src_mac: Sm<u64>,
    pub ip_proto: Option<u8>,
    pub ip_tos: Sm<u8>,
    pub ip_ttl: Sm<u8>,
    /// `ip_flags`: bit 0 `frag`, bit 1 `firstfrag`.
    pub ip_flags: Sm<u8>,
    pub src_ip: Sm<u32>,
    pub dst_ip: Sm<u32>,
    pub src_ipv6: Sm<u128>,
    pub dst_ipv6: Sm<u128>,
    pub src_port: Sm<u16>,
    pub dst_port: Sm<u16>,
    pub tcp_flags: Sm<u16>,
    pub icmp_type: Sm<u8>,
    pub icmp_code: Sm<u8>,
    pub arp_op: Sm<u8>,
    pub arp_sip: Sm<u32>,
    pub arp_tip: Sm<u32>,
    pub arp_sha: Sm<u64>,
    pub arp_tha: Sm<u64>,
}

/// One pedit key (kernel `tc_pedit_key`): `w = (w & keep) ^ val` at `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeditKey {
    pub hdr: PeditHdr,
    pub off: u32,
    pub keep: u32,
    pub val: u32,
}

/// tc actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcAction {
    /// `mirred egress redirect|mirror dev PORT`.
    Mirred {
        redirect: bool,
        dev: u32,
    },
    VlanPush {
        tpid: u16,
        vid: u16,
        prio: u8,
    },
    VlanPop,
    Pedit(Vec<PeditKey>),
    /// `csum iph and tcp and udp`.
    Csum,
    /// `gact drop`.
    Drop,
}

/// One flower filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub chain: u32,
    pub prio: u16,
    pub handle: u32,
    /// The megaflow's ufid (OVS keeps it as the filter's cookie).
    pub cookie: u64,
    pub policy: TcPolicy,
    pub key: FlowerKey,
    pub actions: Vec<TcAction>,
}

fn unsup<T>(s: impl Into<String>) -> Result<T, OffloadError> {
    Err(OffloadError::Unsupported(s.into()))
}

/// Translates a megaflow's match into chain + flower keys.
pub fn translate_match(spec: &FlowSpec) -> Result<(u32, FlowerKey), OffloadError> {
    let mut c = MaskCursor::new(spec);
    let chain = c.take_exact(f::RECIRC_ID, "recirc_id")?.unwrap_or(0) as u32;
    let mut k = FlowerKey {
        indev: match c.take_exact(f::IN_PORT, "in_port")? {
            Some(p) => p as u32,
            None => return unsup("a filter must match in_port (its ingress device)"),
        },
        ..Default::default()
    };
    k.dst_mac = c.take(f::DL_DST);
    k.src_mac = c.take(f::DL_SRC);
    let dlt = c.take_exact(f::DL_TYPE, "dl_type")?;
    let (tci, tcim) = c.take(f::VLAN0_TCI);
    let (tpid, tpidm) = c.take(f::VLAN0_TPID);
    if c.peek_mask(f::VLAN1_TCI) != 0 || c.peek_mask(f::VLAN1_TPID) != 0 {
        return unsup("second VLAN header (QinQ)");
    }
    let tagged = tci as u16 & VLAN_CFI != 0;
    if dlt.is_some() && tcim as u16 & VLAN_CFI == 0 {
        return unsup(
            "flower's protocol implies tagged or not: the VLAN present bit must be matched",
        );
    }
    if tagged {
        k.protocol = Some(if tpidm != 0 {
            tpid as u16
        } else {
            ethertype::VLAN
        });
        let (vid, vm) = (tci as u16 & 0x0fff, tcim as u16 & 0x0fff);
        match vm {
            0 => {}
            0x0fff => k.vlan_id = Some(vid),
            _ => return unsup("vlan_id can only be matched exactly"),
        }
        let (pcp, pm) = ((tci as u16 >> 13) as u8, (tcim as u16 >> 13) as u8);
        match pm {
            0 => {}
            7 => k.vlan_prio = Some(pcp),
            _ => return unsup("vlan_prio can only be matched exactly"),
        }
        k.vlan_ethtype = dlt.map(|d| d as u16);
    } else {
        if tcim as u16 & !VLAN_CFI != 0 || tpidm != 0 {
            return unsup("VLAN fields matched on an untagged flow");
        }
        k.protocol = dlt.map(|d| d as u16);
    }
    let et = dlt.map(|d| d as u16);
    let mut l4 = None;
    match et {
        Some(ethertype::IPV4) | Some(ethertype::IPV6) => {
            let v4 = et == Some(ethertype::IPV4);
            if v4 {
                k.src_ip = sm32(c.take(f::NW_SRC));
                k.dst_ip = sm32(c.take(f::NW_DST));
            } else {
                if c.peek_mask(f::IPV6_LABEL) != 0 {
                    return unsup("ipv6_label");
                }
                let (sh, sl) = (c.take(f::IPV6_SRC_HI), c.take(f::IPV6_SRC_LO));
                let (dh, dl) = (c.take(f::IPV6_DST_HI), c.take(f::IPV6_DST_LO));
                k.src_ipv6 = (w128(sh.0, sl.0), w128(sh.1, sl.1));
                k.dst_ipv6 = (w128(dh.0, dl.0), w128(dh.1, dl.1));
            }
            let t = c.take(f::NW_TOS);
            k.ip_tos = (t.0 as u8, t.1 as u8);
            let t = c.take(f::NW_TTL);
            k.ip_ttl = (t.0 as u8, t.1 as u8);
            k.ip_proto = c.take_exact(f::NW_PROTO, "nw_proto")?.map(|p| p as u8);
            let (fr, frm) = c.take(f::NW_FRAG);
            // OVS: FRAG_ANY <-> frag; FRAG_LATER <-> frag and not firstfrag.
            k.ip_flags = match (frm as u8, fr as u8) {
                (0, _) => (0, 0),
                (1, v) => (v & 1, 1),
                (3, 0) => (0, 1),
                (3, 1) => (3, 3),
                (3, 3) | (2, 2) => (1, 3),
                (m, v) => return unsup(format!("nw_frag={v:#x}/{m:#x}")),
            };
            if fr & 2 == 0 {
                l4 = k.ip_proto;
            }
        }
        Some(ethertype::ARP) | Some(ethertype::RARP) => {
            k.arp_sip = sm32(c.take(f::NW_SRC));
            k.arp_tip = sm32(c.take(f::NW_DST));
            let o = c.take(f::NW_PROTO);
            k.arp_op = (o.0 as u8, o.1 as u8);
            k.arp_sha = c.take(f::ARP_SHA);
            k.arp_tha = c.take(f::ARP_THA);
        }
        _ => {}
    }
    match l4 {
        Some(ipproto::TCP) | Some(ipproto::UDP) | Some(ipproto::SCTP) => {
            k.src_port = sm16(c.take(f::TP_SRC));
            k.dst_port = sm16(c.take(f::TP_DST));
            if l4 == Some(ipproto::TCP) {
                k.tcp_flags = sm16(c.take(f::TCP_FLAGS));
            }
        }
        Some(ipproto::ICMP) | Some(ipproto::ICMPV6) => {
            let (t, tm) = c.take(f::TP_SRC);
            let (cd, cm) = c.take(f::TP_DST);
            if tm > 0xff || cm > 0xff {
                return unsup("ICMP type/code above 8 bits");
            }
            k.icmp_type = (t as u8, tm as u8);
            k.icmp_code = (cd as u8, cm as u8);
        }
        _ => {}
    }
    c.finish()?;
    Ok((chain, k))
}

fn sm32(x: (u64, u64)) -> Sm<u32> {
    (x.0 as u32, x.1 as u32)
}
fn sm16(x: (u64, u64)) -> Sm<u16> {
    (x.0 as u16, x.1 as u16)
}
fn w128(hi: u64, lo: u64) -> u128 {
    ((hi as u128) << 64) | lo as u128
}

/// What the NIC (or software tc) makes of a filter's keys: the match it programs.
pub fn decode_match(chain: u32, k: &FlowerKey) -> (FlowKey, FlowKey) {
    let mut key = FlowKey::ZERO;
    let mut mask = FlowKey::ZERO;
    let mut put = |fd, v: u64, m: u64| {
        key.set(fd, v & m);
        mask.set(fd, m);
    };
    put(f::RECIRC_ID, chain as u64, u32::MAX as u64);
    put(f::IN_PORT, k.indev as u64, u32::MAX as u64);
    put(f::DL_DST, k.dst_mac.0, k.dst_mac.1);
    put(f::DL_SRC, k.src_mac.0, k.src_mac.1);
    let mut tci = (0u64, 0u64);
    let dl = match k.protocol {
        Some(p) if p == ethertype::VLAN || p == ethertype::QINQ => {
            put(f::VLAN0_TPID, p as u64, 0xffff);
            tci = (VLAN_CFI as u64, VLAN_CFI as u64);
            if let Some(v) = k.vlan_id {
                tci.0 |= v as u64;
                tci.1 |= 0x0fff;
            }
            if let Some(p) = k.vlan_prio {
                tci.0 |= (p as u64) << 13;
                tci.1 |= 0xe000;
            }
            k.vlan_ethtype
        }
        Some(p) => {
            tci = (0, VLAN_CFI as u64);
            Some(p)
        }
        None => None,
    };
    put(f::VLAN0_TCI, tci.0, tci.1);
    if let Some(d) = dl {
        put(f::DL_TYPE, d as u64, 0xffff);
    }
    match dl {
        Some(ethertype::IPV4) | Some(ethertype::IPV6) => {
            if dl == Some(ethertype::IPV4) {
                put(f::NW_SRC, k.src_ip.0 as u64, k.src_ip.1 as u64);
                put(f::NW_DST, k.dst_ip.0 as u64, k.dst_ip.1 as u64);
            } else {
                let (s, d) = (k.src_ipv6, k.dst_ipv6);
                put(f::IPV6_SRC_HI, (s.0 >> 64) as u64, (s.1 >> 64) as u64);
                put(f::IPV6_SRC_LO, s.0 as u64, s.1 as u64);
                put(f::IPV6_DST_HI, (d.0 >> 64) as u64, (d.1 >> 64) as u64);
                put(f::IPV6_DST_LO, d.0 as u64, d.1 as u64);
            }
            put(f::NW_TOS, k.ip_tos.0 as u64, k.ip_tos.1 as u64);
            put(f::NW_TTL, k.ip_ttl.0 as u64, k.ip_ttl.1 as u64);
            if let Some(p) = k.ip_proto {
                put(f::NW_PROTO, p as u64, 0xff);
            }
            let fr = match k.ip_flags {
                (0, 0) => (0, 0),
                (v, 1) => (v as u64 & 1, 1),
                (3, 3) => (1, 3),
                (1, 3) => (3, 3),
                _ => (0, 0),
            };
            put(f::NW_FRAG, fr.0, fr.1);
            put(f::TP_SRC, k.src_port.0 as u64, k.src_port.1 as u64);
            put(f::TP_DST, k.dst_port.0 as u64, k.dst_port.1 as u64);
            put(f::TCP_FLAGS, k.tcp_flags.0 as u64, k.tcp_flags.1 as u64);
            if k.icmp_type.1 != 0 || k.icmp_code.1 != 0 {
                put(f::TP_SRC, k.icmp_type.0 as u64, k.icmp_type.1 as u64);
                put(f::TP_DST, k.icmp_code.0 as u64, k.icmp_code.1 as u64);
            }
        }
        Some(ethertype::ARP) | Some(ethertype::RARP) => {
            put(f::NW_SRC, k.arp_sip.0 as u64, k.arp_sip.1 as u64);
            put(f::NW_DST, k.arp_tip.0 as u64, k.arp_tip.1 as u64);
            put(f::NW_PROTO, k.arp_op.0 as u64, k.arp_op.1 as u64);
            put(f::ARP_SHA, k.arp_sha.0, k.arp_sha.1);
            put(f::ARP_THA, k.arp_tha.0, k.arp_tha.1);
        }
        _ => {}
    }
    (key, mask)
}

/// Adds pedit keys writing `val` under `mask` (big-endian bytes) at byte `off`.
fn munge(out: &mut Vec<PeditKey>, hdr: PeditHdr, off: usize, val: &[u8], mask: &[u8]) {
    let mut words: Vec<(u32, u32, u32)> = Vec::new(); // (word offset, val, set mask)
    for (i, (&v, &m)) in val.iter().zip(mask).enumerate() {
        if m == 0 {
            continue;
        }
        let at = off + i;
        let w = (at / 4 * 4) as u32;
        let sh = 8 * (3 - (at % 4)) as u32;
        match words.iter_mut().find(|x| x.0 == w) {
            Some(x) => {
                x.1 |= ((v & m) as u32) << sh;
                x.2 |= (m as u32) << sh;
            }
            None => words.push((w, ((v & m) as u32) << sh, (m as u32) << sh)),
        }
    }
    for (w, v, m) in words {
        out.push(PeditKey {
            hdr,
            off: w,
            keep: !m,
            val: v,
        });
    }
}

/// Translates datapath actions into tc actions, or says why not.
pub fn translate_actions(acts: &[OdpAction]) -> Result<Vec<TcAction>, OffloadError> {
    let mut out = Vec::new();
    let n_out = acts
        .iter()
        .filter(|a| matches!(a, OdpAction::Output(_)))
        .count();
    let mut seen_out = 0;
    for a in acts {
        let mut keys = Vec::new();
        match *a {
            OdpAction::Output(p) => {
                seen_out += 1;
                out.push(TcAction::Mirred {
                    redirect: seen_out == n_out,
                    dev: p,
                });
            }
            OdpAction::PushVlan { tpid, tci } => out.push(TcAction::VlanPush {
                tpid,
                vid: tci & 0x0fff,
                prio: (tci >> 13) as u8,
            }),
            OdpAction::PopVlan => out.push(TcAction::VlanPop),
            OdpAction::SetEth { src, dst } => {
                let b = |x: u64| x.to_be_bytes()[2..].to_vec();
                munge(&mut keys, PeditHdr::Eth, 0, &b(dst.0), &b(dst.1));
                munge(&mut keys, PeditHdr::Eth, 6, &b(src.0), &b(src.1));
            }
            OdpAction::SetIpv4 { src, dst, tos, ttl } => {
                let h = PeditHdr::Ip4;
                munge(&mut keys, h, 1, &[tos.0], &[tos.1]);
                munge(&mut keys, h, 8, &[ttl.0], &[ttl.1]);
                munge(&mut keys, h, 12, &src.0.to_be_bytes(), &src.1.to_be_bytes());
                munge(&mut keys, h, 16, &dst.0.to_be_bytes(), &dst.1.to_be_bytes());
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
                let h = PeditHdr::Ip6;
                if tclass.1 != 0 {
                    let (v, m) = ((tclass.0 as u32) << 20, (tclass.1 as u32) << 20);
                    keys.push(PeditKey {
                        hdr: h,
                        off: 0,
                        keep: !m,
                        val: v & m,
                    });
                }
                munge(&mut keys, h, 7, &[hlimit.0], &[hlimit.1]);
                munge(&mut keys, h, 8, &src.0.to_be_bytes(), &src.1.to_be_bytes());
                munge(&mut keys, h, 24, &dst.0.to_be_bytes(), &dst.1.to_be_bytes());
            }
            OdpAction::SetL4 { proto, src, dst } => {
                let h = match proto {
                    ipproto::TCP => PeditHdr::Tcp,
                    ipproto::UDP => PeditHdr::Udp,
                    _ => return unsup(format!("port rewrite of IP protocol {proto}")),
                };
                munge(&mut keys, h, 0, &src.0.to_be_bytes(), &src.1.to_be_bytes());
                munge(&mut keys, h, 2, &dst.0.to_be_bytes(), &dst.1.to_be_bytes());
            }
            OdpAction::HashSymL4(_) | OdpAction::Recirc(_) => {
                return unsup("hash/recirc (select group)")
            }
            OdpAction::Controller { .. } => return unsup("controller action"),
            OdpAction::SetArp { .. } => return unsup("ARP rewrite"),
            OdpAction::SetNd { .. } => return unsup("ND rewrite"),
            OdpAction::SetIcmp { .. } => return unsup("ICMP type/code rewrite"),
        }
        if !keys.is_empty() {
            out.push(TcAction::Pedit(keys));
            out.push(TcAction::Csum);
        }
    }
    if n_out == 0 {
        out.push(TcAction::Drop);
    }
    Ok(out)
}

/// What the NIC runs for tc actions.
pub fn decode_actions(acts: &[TcAction]) -> Vec<HwOp> {
    let mut ops = Vec::new();
    for a in acts {
        match a {
            TcAction::Mirred { dev, .. } => ops.push(HwOp::Odp(OdpAction::Output(*dev))),
            TcAction::VlanPush { tpid, vid, prio } => ops.push(HwOp::Odp(OdpAction::PushVlan {
                tpid: *tpid,
                tci: VLAN_CFI | (vid & 0x0fff) | ((*prio as u16 & 7) << 13),
            })),
            TcAction::VlanPop => ops.push(HwOp::Odp(OdpAction::PopVlan)),
            TcAction::Pedit(keys) => {
                for k in keys {
                    ops.push(HwOp::Pedit {
                        hdr: k.hdr,
                        off: k.off,
                        keep: k.keep,
                        val: k.val,
                    });
                }
            }
            TcAction::Csum => ops.push(HwOp::Csum),
            TcAction::Drop => break,
        }
    }
    ops
}

#[derive(Debug, Default)]
struct TcState {
    /// (mask, ethertype) -> prio (OVS allocates one prio per pair).
    prios: HashMap<(FlowKey, u16), u16>,
    next_prio: u16,
    next_handle: u32,
    filters: HashMap<u64, (Filter, bool)>,
}

/// The tc-flower provider: a hardware table (emulated NIC) and the kernel's software
/// classifier (emulated, unlimited).
#[derive(Debug)]
pub struct TcProvider {
    hw: Mutex<EmuNic>,
    sw: Mutex<EmuNic>,
    pub policy: TcPolicy,
    state: Mutex<TcState>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TcProvider {
    pub fn new(cfg: NicConfig, policy: TcPolicy) -> TcProvider {
        TcProvider {
            hw: Mutex::new(EmuNic::new(cfg)),
            sw: Mutex::new(EmuNic::new(NicConfig::default())),
            policy,
            state: Mutex::new(TcState {
                next_prio: 1,
                next_handle: 1,
                ..Default::default()
            }),
        }
    }
    /// The filter installed for `ufid` and whether it is in hardware (`in_hw`).
    pub fn filter(&self, ufid: u64) -> Option<(Filter, bool)> {
        lock(&self.state).filters.get(&ufid).cloned()
    }
    /// Translates a megaflow into a filter (prio and handle allocated).
    pub fn translate(&self, ufid: u64, spec: &FlowSpec) -> Result<Filter, OffloadError> {
        let (chain, key) = translate_match(spec)?;
        let actions = translate_actions(&spec.actions)?;
        let mut st = lock(&self.state);
        let pk = (spec.mask, key.protocol.unwrap_or(0));
        let prio = match st.prios.get(&pk) {
            Some(&p) => p,
            None => {
                let p = st.next_prio;
                st.next_prio = st.next_prio.checked_add(1).ok_or_else(|| {
                    OffloadError::Device("out of tc priorities (65535 masks)".into())
                })?;
                st.prios.insert(pk, p);
                p
            }
        };
        let handle = st.next_handle;
        st.next_handle = st.next_handle.wrapping_add(1).max(1);
        Ok(Filter {
            chain,
            prio,
            handle,
            cookie: ufid,
            policy: self.policy,
            key,
            actions,
        })
    }
}

impl OffloadProvider for TcProvider {
    fn name(&self) -> &'static str {
        "tc"
    }
    fn caps(&self) -> Caps {
        let n = lock(&self.hw);
        Caps {
            full: true,
            partial: false,
            fields: n.cfg.fields,
            capacity: n.cfg.capacity,
        }
    }
    fn put(&self, ufid: u64, spec: &FlowSpec, _mark: u32) -> Result<Offloaded, OffloadError> {
        // A MOD replaces: the old filter goes first (and stays gone on failure).
        if lock(&self.state).filters.remove(&ufid).is_some() {
            lock(&self.hw).remove(ufid);
            lock(&self.sw).remove(ufid);
        }
        let fl = self.translate(ufid, spec)?;
        let (k, m) = decode_match(fl.chain, &fl.key);
        let ops = decode_actions(&fl.actions);
        if self.policy != TcPolicy::SkipHw {
            super::nic::pay_insert_cost(&self.hw);
        }
        let in_hw = match self.policy {
            TcPolicy::SkipHw => false,
            TcPolicy::SkipSw => {
                let mut hw = lock(&self.hw);
                hw.admit(&m)?;
                hw.insert(ufid, k, m, fl.prio as u32, ops.clone());
                true
            }
            TcPolicy::None => {
                let mut hw = lock(&self.hw);
                match hw.admit(&m) {
                    Ok(()) => {
                        hw.insert(ufid, k, m, fl.prio as u32, ops.clone());
                        true
                    }
                    Err(e) => {
                        tracing::debug!("tc: not in hardware ({e}), software tc");
                        false
                    }
                }
            }
        };
        if !in_hw {
            lock(&self.sw).insert(ufid, k, m, fl.prio as u32, ops);
        }
        lock(&self.state).filters.insert(ufid, (fl, in_hw));
        Ok(Offloaded::Full { in_hw })
    }
    fn del(&self, ufid: u64) -> Result<HwStats, OffloadError> {
        let (_, in_hw) = lock(&self.state)
            .filters
            .remove(&ufid)
            .ok_or(OffloadError::NotFound(ufid))?;
        let t = if in_hw { &self.hw } else { &self.sw };
        lock(t).remove(ufid).ok_or(OffloadError::NotFound(ufid))
    }
    fn stats(&self, ufid: u64, reset: bool) -> Result<HwStats, OffloadError> {
        let in_hw = lock(&self.state)
            .filters
            .get(&ufid)
            .map(|x| x.1)
            .ok_or(OffloadError::NotFound(ufid))?;
        let t = if in_hw { &self.hw } else { &self.sw };
        lock(t)
            .query(ufid, reset)
            .ok_or(OffloadError::NotFound(ufid))
    }
    fn flush(&self) -> usize {
        let mut st = lock(&self.state);
        let n = st.filters.len();
        st.filters.clear();
        lock(&self.hw).clear();
        lock(&self.sw).clear();
        n
    }
    fn len(&self) -> usize {
        lock(&self.state).filters.len()
    }
    fn rx_key(&self, k: &FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx {
        match lock(&self.hw).rx(k, frame, now) {
            HwRx::Miss => lock(&self.sw).rx(k, frame, now),
            r => r,
        }
    }
}
