//! rtnetlink messages for tc flower filters, sans-IO: [`FilterMsg`] encodes
//! RTM_NEWTFILTER / RTM_DELTFILTER / RTM_GETTFILTER (and RTM_NEWQDISC for the clsact
//! qdisc) from a [`Filter`] of the tc translation; [`Replies`] walks what the kernel
//! answers with checked lengths: acks and errors ([`NlError`], errno + extack
//! message) and a filter's action counters ([`parse_filter_stats`]).
//!
//! Attribute order follows iproute2's `tc filter add ... flower` (keys, `TCA_FLOWER_ACT`,
//! `TCA_FLOWER_FLAGS`, key flags, `TCA_FLOWER_KEY_ETH_TYPE` last), so the unit tests
//! compare our bytes with what `tc` itself sends (captured with `strace -xx`).
//! Constants are from the kernel's uapi (`linux/rtnetlink.h`, `pkt_cls.h`,
//! `tc_act/*.h`).

use super::nic::PeditHdr;
use super::tc::{Filter, FlowerKey, TcAction, TcPolicy};
use wire::ethernet::{ethertype, ipproto};

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const RTM_NEWQDISC: u16 = 36;
pub const RTM_NEWTFILTER: u16 = 44;
pub const RTM_DELTFILTER: u16 = 45;
pub const RTM_GETTFILTER: u16 = 46;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_ECHO: u16 = 0x8;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
/// In an NLMSG_ERROR: the original message was capped (NETLINK_CAP_ACK).
pub const NLM_F_CAPPED: u16 = 0x100;
/// In an NLMSG_ERROR: extended-ack TLVs follow.
pub const NLM_F_ACK_TLVS: u16 = 0x200;
pub const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_CHAIN: u16 = 11;

/// clsact's ingress hook: TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS).
pub const PARENT_INGRESS: u32 = 0xffff_fff2;
/// TC_H_CLSACT (the clsact qdisc's handle/parent).
pub const TC_H_CLSACT: u32 = 0xffff_fff1;
const ETH_P_ALL: u16 = 0x0003;

// flower keys
const FL_ACT: u16 = 3;
const FL_ETH_DST: u16 = 4;
const FL_ETH_SRC: u16 = 6;
const FL_ETH_TYPE: u16 = 8;
const FL_IP_PROTO: u16 = 9;
const FL_IPV4_SRC: u16 = 10;
const FL_IPV4_DST: u16 = 12;
const FL_IPV6_SRC: u16 = 14;
const FL_IPV6_DST: u16 = 16;
const FL_TCP_SRC: u16 = 18;
const FL_TCP_DST: u16 = 19;
const FL_UDP_SRC: u16 = 20;
const FL_UDP_DST: u16 = 21;
const FL_FLAGS: u16 = 22;
const FL_VLAN_ID: u16 = 23;
const FL_VLAN_PRIO: u16 = 24;
const FL_VLAN_ETH_TYPE: u16 = 25;
const FL_TCP_SRC_MASK: u16 = 35;
const FL_TCP_DST_MASK: u16 = 36;
const FL_UDP_SRC_MASK: u16 = 37;
const FL_UDP_DST_MASK: u16 = 38;
const FL_SCTP_SRC_MASK: u16 = 39;
const FL_SCTP_DST_MASK: u16 = 40;
const FL_SCTP_SRC: u16 = 41;
const FL_SCTP_DST: u16 = 42;
const FL_KEY_FLAGS: u16 = 47;
const FL_KEY_FLAGS_MASK: u16 = 48;
const FL_ICMPV4_CODE: u16 = 49;
const FL_ICMPV4_TYPE: u16 = 51;
const FL_ICMPV6_CODE: u16 = 53;
const FL_ICMPV6_TYPE: u16 = 55;
const FL_ARP_SIP: u16 = 57;
const FL_ARP_TIP: u16 = 59;
const FL_ARP_OP: u16 = 61;
const FL_ARP_SHA: u16 = 63;
const FL_ARP_THA: u16 = 65;
const FL_TCP_FLAGS: u16 = 71;
const FL_IP_TOS: u16 = 73;
const FL_IP_TTL: u16 = 75;
const TCA_CLS_FLAGS_SKIP_HW: u32 = 1;
const TCA_CLS_FLAGS_SKIP_SW: u32 = 2;

// actions
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_ACT_STATS: u16 = 4;
const TCA_ACT_COOKIE: u16 = 6;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_PKT64: u16 = 8;
const TC_ACT_SHOT: i32 = 2;
const TC_ACT_PIPE: i32 = 3;
const TC_ACT_STOLEN: i32 = 4;
const TCA_MIRRED_PARMS: u16 = 2;
const TCA_EGRESS_REDIR: i32 = 1;
const TCA_EGRESS_MIRROR: i32 = 2;
const TCA_GACT_PARMS: u16 = 2;
const TCA_VLAN_PARMS: u16 = 2;
const TCA_VLAN_PUSH_VLAN_ID: u16 = 3;
const TCA_VLAN_PUSH_VLAN_PROTOCOL: u16 = 4;
const TCA_VLAN_PUSH_VLAN_PRIORITY: u16 = 6;
const TCA_VLAN_ACT_POP: i32 = 1;
const TCA_VLAN_ACT_PUSH: i32 = 2;
const TCA_PEDIT_PARMS_EX: u16 = 4;
const TCA_PEDIT_KEYS_EX: u16 = 5;
const TCA_PEDIT_KEY_EX: u16 = 6;
const TCA_PEDIT_KEY_EX_HTYPE: u16 = 1;
const TCA_PEDIT_KEY_EX_CMD: u16 = 2;
const TCA_CSUM_PARMS: u16 = 1;
const CSUM_IPV4HDR: u32 = 1;
const CSUM_TCP: u32 = 8;
const CSUM_UDP: u32 = 16;

/// Where a filter lives: the device, the hook, chain / prio / protocol / handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterId {
    pub ifindex: u32,
    pub chain: u32,
    pub prio: u16,
    /// Outer EtherType (host order); ETH_P_ALL when the filter matches any.
    pub protocol: u16,
    pub handle: u32,
}

impl FilterId {
    /// The id of a translated filter on `ifindex`.
    pub fn of(f: &Filter, ifindex: u32) -> FilterId {
        FilterId {
            ifindex,
            chain: f.chain,
            prio: f.prio,
            protocol: f.key.protocol.unwrap_or(ETH_P_ALL),
            handle: f.handle,
        }
    }
}

/// Why a filter cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A mirred action names a datapath port with no Linux interface.
    #[error("output to port {0}: no Linux interface (only afpacket ports can be tc targets)")]
    NoIfindex(u32),
    /// The message would not fit a netlink length field.
    #[error("filter message too long")]
    TooLong,
}

/// A netlink message under construction (one reusable buffer; nests are patched
/// when closed).
#[derive(Debug, Default)]
pub struct FilterMsg {
    pub buf: Vec<u8>,
}

impl FilterMsg {
    fn begin(&mut self, ty: u16, flags: u16, seq: u32) {
        self.buf.clear();
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
    }
    /// struct tcmsg.
    fn tcmsg(&mut self, ifindex: u32, handle: u32, parent: u32, info: u32) {
        self.buf.extend_from_slice(&[0, 0, 0, 0]); // family AF_UNSPEC, pads
        self.buf.extend_from_slice(&ifindex.to_ne_bytes());
        self.buf.extend_from_slice(&handle.to_ne_bytes());
        self.buf.extend_from_slice(&parent.to_ne_bytes());
        self.buf.extend_from_slice(&info.to_ne_bytes());
    }
    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
    fn attr(&mut self, ty: u16, data: &[u8]) {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
    }
    fn u8(&mut self, ty: u16, v: u8) {
        self.attr(ty, &[v]);
    }
    fn u16(&mut self, ty: u16, v: u16) {
        self.attr(ty, &v.to_ne_bytes());
    }
    fn u32(&mut self, ty: u16, v: u32) {
        self.attr(ty, &v.to_ne_bytes());
    }
    fn be16(&mut self, ty: u16, v: u16) {
        self.attr(ty, &v.to_be_bytes());
    }
    fn be32(&mut self, ty: u16, v: u32) {
        self.attr(ty, &v.to_be_bytes());
    }
    fn str(&mut self, ty: u16, s: &str) {
        let mut b = [0u8; 16];
        let n = s.len().min(15);
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        self.attr(ty, &b[..n + 1]);
    }
    /// A value and its mask, when the mask is not zero (the mask attribute is `ty + 1`).
    fn masked(&mut self, ty: u16, v: &[u8], m: &[u8]) {
        if m.iter().all(|&b| b == 0) {
            return;
        }
        self.attr(ty, v);
        self.attr(ty + 1, m);
    }
    /// A value with an optional mask attribute (`mty`), left out when exact (as tc).
    fn masked_at(&mut self, ty: u16, mty: u16, v: &[u8], m: &[u8]) {
        if m.iter().all(|&b| b == 0) {
            return;
        }
        self.attr(ty, v);
        if !m.iter().all(|&b| b == 0xff) {
            self.attr(mty, m);
        }
    }
    fn nest(&mut self, ty: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        at
    }
    fn end(&mut self, at: usize) -> Result<(), EncodeError> {
        let len = u16::try_from(self.buf.len() - at).map_err(|_| EncodeError::TooLong)?;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        Ok(())
    }
    fn finish(&mut self) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        &self.buf
    }

    fn filter_head(&mut self, ty: u16, flags: u16, seq: u32, id: &FilterId) {
        self.begin(ty, flags, seq);
        let proto = u16::from_ne_bytes(id.protocol.to_be_bytes()) as u32;
        self.tcmsg(
            id.ifindex,
            id.handle,
            PARENT_INGRESS,
            (id.prio as u32) << 16 | proto,
        );
        if id.chain != 0 {
            self.u32(TCA_CHAIN, id.chain); // tc leaves chain 0 (the default) out
        }
        self.str(TCA_KIND, "flower");
    }

    /// RTM_NEWTFILTER (create, exclusive) of `f` on `ifindex`; `ifindex_of` maps
    /// datapath ports (mirred targets) to interfaces.
    pub fn new_filter(
        &mut self,
        seq: u32,
        ifindex: u32,
        f: &Filter,
        ifindex_of: &dyn Fn(u32) -> Option<u32>,
    ) -> Result<&[u8], EncodeError> {
        let id = FilterId::of(f, ifindex);
        self.filter_head(
            RTM_NEWTFILTER,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE,
            seq,
            &id,
        );
        let opts = self.nest(TCA_OPTIONS);
        self.flower_keys(&f.key);
        let acts = self.nest(FL_ACT);
        for (i, a) in f.actions.iter().enumerate() {
            // the ufid on every action (as tc does with one `cookie`)
            self.action(i as u16 + 1, a, Some(f.cookie), ifindex_of)?;
        }
        self.end(acts)?;
        let flags = match f.policy {
            TcPolicy::SkipHw => TCA_CLS_FLAGS_SKIP_HW,
            TcPolicy::SkipSw => TCA_CLS_FLAGS_SKIP_SW,
            TcPolicy::None => 0,
        };
        self.u32(FL_FLAGS, flags);
        if f.key.ip_flags.1 != 0 {
            self.be32(FL_KEY_FLAGS, f.key.ip_flags.0 as u32);
            self.be32(FL_KEY_FLAGS_MASK, f.key.ip_flags.1 as u32);
        }
        if id.protocol != ETH_P_ALL {
            self.be16(FL_ETH_TYPE, id.protocol);
        }
        self.end(opts)?;
        Ok(self.finish())
    }

    /// RTM_DELTFILTER of one filter (as `tc filter del ... handle H flower`).
    pub fn del_filter(&mut self, seq: u32, id: &FilterId) -> &[u8] {
        self.filter_head(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, seq, id);
        self.id_opts(id);
        self.finish()
    }

    /// RTM_GETTFILTER of one filter (as `tc filter get`: NLM_F_ECHO, the kernel
    /// answers with an RTM_NEWTFILTER carrying its actions' counters, or an error).
    pub fn get_filter(&mut self, seq: u32, id: &FilterId) -> &[u8] {
        self.filter_head(RTM_GETTFILTER, NLM_F_REQUEST | NLM_F_ECHO, seq, id);
        self.id_opts(id);
        self.finish()
    }

    /// The options tc sends with a del/get: flags 0 and the EtherType.
    fn id_opts(&mut self, id: &FilterId) {
        let o = self.nest(TCA_OPTIONS);
        self.u32(FL_FLAGS, 0);
        if id.protocol != ETH_P_ALL {
            self.be16(FL_ETH_TYPE, id.protocol);
        }
        // a few dozen bytes: cannot overflow
        let len = (self.buf.len() - o) as u16;
        self.buf[o..o + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// RTM_NEWQDISC: a clsact qdisc on `ifindex` (NLM_F_EXCL: EEXIST when there is one).
    pub fn new_clsact(&mut self, seq: u32, ifindex: u32) -> &[u8] {
        self.begin(
            RTM_NEWQDISC,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE,
            seq,
        );
        self.tcmsg(ifindex, 0xffff_0000, TC_H_CLSACT, 0);
        self.str(TCA_KIND, "clsact");
        self.finish()
    }

    fn flower_keys(&mut self, k: &FlowerKey) {
        let mac = |x: u64| {
            let b = x.to_be_bytes();
            [b[2], b[3], b[4], b[5], b[6], b[7]]
        };
        self.masked(FL_ETH_DST, &mac(k.dst_mac.0), &mac(k.dst_mac.1));
        self.masked(FL_ETH_SRC, &mac(k.src_mac.0), &mac(k.src_mac.1));
        if let Some(v) = k.vlan_id {
            self.u16(FL_VLAN_ID, v);
        }
        if let Some(p) = k.vlan_prio {
            self.u8(FL_VLAN_PRIO, p);
        }
        if let Some(e) = k.vlan_ethtype {
            self.be16(FL_VLAN_ETH_TYPE, e);
        }
        if let Some(p) = k.ip_proto {
            self.u8(FL_IP_PROTO, p);
        }
        let b4 = |x: u32| x.to_be_bytes();
        self.masked(FL_IPV4_SRC, &b4(k.src_ip.0), &b4(k.src_ip.1));
        self.masked(FL_IPV4_DST, &b4(k.dst_ip.0), &b4(k.dst_ip.1));
        let b6 = |x: u128| x.to_be_bytes();
        self.masked(FL_IPV6_SRC, &b6(k.src_ipv6.0), &b6(k.src_ipv6.1));
        self.masked(FL_IPV6_DST, &b6(k.dst_ipv6.0), &b6(k.dst_ipv6.1));
        let b2 = |x: u16| x.to_be_bytes();
        let ports = match k.ip_proto {
            Some(ipproto::TCP) => Some((FL_TCP_SRC, FL_TCP_SRC_MASK, FL_TCP_DST, FL_TCP_DST_MASK)),
            Some(ipproto::UDP) => Some((FL_UDP_SRC, FL_UDP_SRC_MASK, FL_UDP_DST, FL_UDP_DST_MASK)),
            Some(ipproto::SCTP) => {
                Some((FL_SCTP_SRC, FL_SCTP_SRC_MASK, FL_SCTP_DST, FL_SCTP_DST_MASK))
            }
            _ => None,
        };
        if let Some((s, sm, d, dm)) = ports {
            self.masked_at(s, sm, &b2(k.src_port.0), &b2(k.src_port.1));
            self.masked_at(d, dm, &b2(k.dst_port.0), &b2(k.dst_port.1));
        }
        self.masked(FL_TCP_FLAGS, &b2(k.tcp_flags.0), &b2(k.tcp_flags.1));
        let (ty, code) = if k.protocol == Some(ethertype::IPV6) {
            (FL_ICMPV6_TYPE, FL_ICMPV6_CODE)
        } else {
            (FL_ICMPV4_TYPE, FL_ICMPV4_CODE)
        };
        self.masked(ty, &[k.icmp_type.0], &[k.icmp_type.1]);
        self.masked(code, &[k.icmp_code.0], &[k.icmp_code.1]);
        self.masked(FL_ARP_SIP, &b4(k.arp_sip.0), &b4(k.arp_sip.1));
        self.masked(FL_ARP_TIP, &b4(k.arp_tip.0), &b4(k.arp_tip.1));
        self.masked(FL_ARP_OP, &[k.arp_op.0], &[k.arp_op.1]);
        self.masked(FL_ARP_SHA, &mac(k.arp_sha.0), &mac(k.arp_sha.1));
        self.masked(FL_ARP_THA, &mac(k.arp_tha.0), &mac(k.arp_tha.1));
        self.masked(FL_IP_TOS, &[k.ip_tos.0], &[k.ip_tos.1]);
        self.masked(FL_IP_TTL, &[k.ip_ttl.0], &[k.ip_ttl.1]);
    }

    /// struct tc_gen: index, capab, action, refcnt, bindcnt.
    fn tc_gen(&mut self, action: i32) {
        for v in [0i32, 0, action, 0, 0] {
            self.buf.extend_from_slice(&v.to_ne_bytes());
        }
    }
    /// An attribute holding a struct that starts with tc_gen, then `tail` bytes.
    fn parms(&mut self, ty: u16, action: i32, tail: &[u8]) {
        let at = self.nest(ty);
        self.tc_gen(action);
        self.buf.extend_from_slice(tail);
        self.pad();
        // lengths here are tiny (<= 24 + 24 * 255)
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn action(
        &mut self,
        order: u16,
        a: &TcAction,
        cookie: Option<u64>,
        ifindex_of: &dyn Fn(u32) -> Option<u32>,
    ) -> Result<(), EncodeError> {
        let kind = match a {
            TcAction::Mirred { .. } => "mirred",
            TcAction::VlanPush { .. } | TcAction::VlanPop => "vlan",
            TcAction::Pedit(_) => "pedit",
            TcAction::Csum => "csum",
            TcAction::Drop => "gact",
        };
        let at = self.nest(order);
        self.str(TCA_ACT_KIND, kind);
        let o = self.nest(TCA_ACT_OPTIONS | NLA_F_NESTED);
        match a {
            TcAction::Mirred { redirect, dev } => {
                let ifx = ifindex_of(*dev).ok_or(EncodeError::NoIfindex(*dev))?;
                let (act, ea) = if *redirect {
                    (TC_ACT_STOLEN, TCA_EGRESS_REDIR)
                } else {
                    (TC_ACT_PIPE, TCA_EGRESS_MIRROR)
                };
                let mut t = [0u8; 8];
                t[..4].copy_from_slice(&ea.to_ne_bytes());
                t[4..].copy_from_slice(&ifx.to_ne_bytes());
                self.parms(TCA_MIRRED_PARMS, act, &t);
            }
            TcAction::VlanPop => {
                self.parms(TCA_VLAN_PARMS, TC_ACT_PIPE, &TCA_VLAN_ACT_POP.to_ne_bytes());
            }
            TcAction::VlanPush { tpid, vid, prio } => {
                self.parms(
                    TCA_VLAN_PARMS,
                    TC_ACT_PIPE,
                    &TCA_VLAN_ACT_PUSH.to_ne_bytes(),
                );
                self.u16(TCA_VLAN_PUSH_VLAN_ID, *vid);
                if *tpid != ethertype::VLAN {
                    self.be16(TCA_VLAN_PUSH_VLAN_PROTOCOL, *tpid);
                }
                self.u8(TCA_VLAN_PUSH_VLAN_PRIORITY, *prio);
            }
            TcAction::Pedit(keys) => {
                let mut t = Vec::with_capacity(4 + 24 * keys.len());
                t.extend_from_slice(&[keys.len().min(255) as u8, 0, 0, 0]);
                for k in keys.iter().take(255) {
                    // mask and val in the packet's byte order (the kernel applies them
                    // to a raw 32-bit load of the header word)
                    t.extend_from_slice(&k.keep.to_be_bytes());
                    t.extend_from_slice(&k.val.to_be_bytes());
                    t.extend_from_slice(&k.off.to_ne_bytes());
                    t.extend_from_slice(&[0u8; 12]); // at, offmask, shift
                }
                self.parms(TCA_PEDIT_PARMS_EX, TC_ACT_PIPE, &t);
                let ex = self.nest(TCA_PEDIT_KEYS_EX | NLA_F_NESTED);
                for k in keys.iter().take(255) {
                    let e = self.nest(TCA_PEDIT_KEY_EX | NLA_F_NESTED);
                    let h: u16 = match k.hdr {
                        PeditHdr::Eth => 1,
                        PeditHdr::Ip4 => 2,
                        PeditHdr::Ip6 => 3,
                        PeditHdr::Tcp => 4,
                        PeditHdr::Udp => 5,
                    };
                    self.u16(TCA_PEDIT_KEY_EX_HTYPE, h);
                    self.u16(TCA_PEDIT_KEY_EX_CMD, 0); // SET
                    self.end(e)?;
                }
                self.end(ex)?;
            }
            TcAction::Csum => {
                let fl = CSUM_IPV4HDR | CSUM_TCP | CSUM_UDP;
                self.parms(TCA_CSUM_PARMS, TC_ACT_PIPE, &fl.to_ne_bytes());
            }
            TcAction::Drop => self.parms(TCA_GACT_PARMS, TC_ACT_SHOT, &[]),
        }
        self.end(o)?;
        if let Some(c) = cookie {
            self.attr(TCA_ACT_COOKIE, &c.to_be_bytes());
        }
        self.end(at)
    }
}

/// A netlink error the kernel answered (NLMSG_ERROR with a negative errno).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlError {
    /// Positive errno.
    pub errno: i32,
    /// The kernel's extended-ack message, if any.
    pub msg: Option<String>,
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.msg {
            write!(f, "{m} ")?;
        }
        write!(f, "errno {}{}", self.errno, errno_name(self.errno))
    }
}

impl std::error::Error for NlError {}

fn errno_name(e: i32) -> String {
    let n = match e {
        1 => "EPERM",
        2 => "ENOENT",
        12 => "ENOMEM",
        16 => "EBUSY",
        17 => "EEXIST",
        19 => "ENODEV",
        22 => "EINVAL",
        95 => "EOPNOTSUPP",
        _ => return String::new(),
    };
    format!(" ({n})")
}

/// One message of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// NLMSG_ERROR with error 0 (an ack) for `seq`.
    Ack {
        seq: u32,
    },
    Err {
        seq: u32,
        err: NlError,
    },
    Done {
        seq: u32,
    },
    /// Any other message: type, seq, payload after the header.
    Msg {
        ty: u16,
        seq: u32,
        body: &'a [u8],
    },
}

/// Why a reply could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed netlink reply: {0}")]
pub struct Malformed(pub &'static str);

fn rd_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn rd_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn rd_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Iterates the messages of one `recv` buffer, checking every length.
#[derive(Debug)]
pub struct Replies<'a> {
    buf: &'a [u8],
}

impl<'a> Replies<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Replies { buf }
    }
}

impl<'a> Iterator for Replies<'a> {
    type Item = Result<Reply<'a>, Malformed>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let b = self.buf;
        let (Some(len), Some(ty), Some(flags), Some(seq)) =
            (rd_u32(b, 0), rd_u16(b, 4), rd_u16(b, 6), rd_u32(b, 8))
        else {
            self.buf = &[];
            return Some(Err(Malformed("short header")));
        };
        let len = len as usize;
        if len < 16 || len > b.len() {
            self.buf = &[];
            return Some(Err(Malformed("bad message length")));
        }
        let body = &b[16..len];
        self.buf = &b[((len + 3) & !3).min(b.len())..];
        Some(Ok(match ty {
            NLMSG_DONE => Reply::Done { seq },
            NLMSG_ERROR => {
                let Some(e) = rd_u32(body, 0) else {
                    return Some(Err(Malformed("short error")));
                };
                let e = e as i32;
                if e == 0 {
                    Reply::Ack { seq }
                } else {
                    Reply::Err {
                        seq,
                        err: NlError {
                            errno: -e,
                            msg: extack_msg(body, flags),
                        },
                    }
                }
            }
            _ => Reply::Msg { ty, seq, body },
        }))
    }
}

/// The extack message of an NLMSG_ERROR body (after the error code and the original
/// message: its header only when capped).
fn extack_msg(body: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let olen = rd_u32(body, 4)? as usize;
    let skip = 4 + if flags & NLM_F_CAPPED != 0 { 16 } else { olen };
    let tlvs = body.get(skip..)?;
    for (ty, v) in Attrs::new(tlvs) {
        if ty == NLMSGERR_ATTR_MSG {
            let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
            return Some(String::from_utf8_lossy(&v[..end]).into_owned());
        }
    }
    None
}

/// Iterates netlink attributes (type without the NESTED/BYTEORDER bits, value),
/// stopping at the first malformed one.
#[derive(Debug)]
pub struct Attrs<'a> {
    b: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Attrs { b }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let len = rd_u16(self.b, 0)? as usize;
        let ty = rd_u16(self.b, 2)? & 0x3fff;
        if len < 4 || len > self.b.len() {
            self.b = &[];
            return None;
        }
        let v = &self.b[4..len];
        self.b = &self.b[((len + 3) & !3).min(self.b.len())..];
        Some((ty, v))
    }
}

fn find(b: &[u8], ty: u16) -> Option<&[u8]> {
    Attrs::new(b).find(|&(t, _)| t == ty).map(|(_, v)| v)
}

/// Counters of a filter (from its first action: every packet the filter matches
/// goes through it) and the cookie of that action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterStats {
    pub packets: u64,
    pub bytes: u64,
    pub cookie: Option<u64>,
}

/// Parses the body of an RTM_NEWTFILTER (tcmsg + attributes) into the first
/// action's counters. None when it carries no flower actions.
pub fn parse_filter_stats(body: &[u8]) -> Option<FilterStats> {
    let attrs = body.get(20..)?;
    let opts = find(attrs, TCA_OPTIONS)?;
    let acts = find(opts, FL_ACT)?;
    let (_, first) = Attrs::new(acts).next()?;
    let mut s = FilterStats::default();
    if let Some(c) = find(first, TCA_ACT_COOKIE) {
        if c.len() == 8 {
            s.cookie = Some(u64::from_be_bytes(c.try_into().ok()?));
        }
    }
    let st = find(first, TCA_ACT_STATS)?;
    let basic = find(st, TCA_STATS_BASIC)?;
    s.bytes = rd_u64(basic, 0)?;
    s.packets = rd_u32(basic, 8)? as u64;
    if let Some(p) = find(st, TCA_STATS_PKT64) {
        s.packets = rd_u64(p, 0)?;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    //! Golden bytes: what iproute2's `tc` sends for the same filters, captured with
    //! `strace -e trace=sendmsg -e write=3 tc filter add dev tcnla ingress ...` in a
    //! scratch netns (tcnla ifindex 3, tcnlb ifindex 2; the commands are in
    //! `testdata/README`). Only the sequence number (tc's is a timestamp) is taken
    //! from the capture.
    use super::*;
    use crate::key::{f, FlowKey, VLAN_CFI};
    use crate::offload::nic::PeditHdr;
    use crate::offload::tc::{translate_actions, translate_match, PeditKey};
    use crate::offload::FlowSpec;
    use crate::xlate::OdpAction;

    fn golden(text: &str) -> Vec<u8> {
        let hex: String = text.split_whitespace().collect();
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }
    fn seq_of(b: &[u8]) -> u32 {
        u32::from_ne_bytes(b[8..12].try_into().unwrap())
    }
    fn same(ours: &[u8], tc: &[u8]) {
        if ours != tc {
            let at = ours.iter().zip(tc).position(|(a, b)| a != b);
            panic!(
                "differs from tc at byte {at:?} (ours {} bytes, tc {} bytes)\nours {:02x?}\ntc   {:02x?}",
                ours.len(),
                tc.len(),
                ours,
                tc
            );
        }
    }
    fn port2(p: u32) -> Option<u32> {
        (p == 2).then_some(2)
    }
    fn filter(
        chain: u32,
        prio: u16,
        handle: u32,
        cookie: u64,
        key: FlowerKey,
        actions: Vec<TcAction>,
    ) -> Filter {
        Filter {
            chain,
            prio,
            handle,
            cookie,
            policy: TcPolicy::SkipHw,
            key,
            actions,
        }
    }

    /// The megaflow → flower → netlink path against `tc filter add ... protocol ip
    /// prio 3 chain 2 handle 7 flower skip_hw dst_mac .. src_mac 02:00:00:00:0a:00/ff:ff:ff:ff:ff:00
    /// ip_proto udp src_ip 10.7.0.1 dst_ip 10.7.0.0/24 dst_port 4000 ip_tos 0x10/0xfc
    /// ip_ttl 64 ip_flags nofrag action pedit ex munge eth dst set aa:bb:cc:dd:ee:ff
    /// pipe cookie ..0abc action csum iph and tcp and udp pipe action vlan push id 42
    /// priority 3 pipe action mirred egress mirror dev tcnlb action mirred egress
    /// redirect dev tcnlb`.
    #[test]
    fn new_ipv4_filter_matches_tc() {
        let tc = golden(include_str!("testdata/tc-new-ipv4.hex"));
        let (mut k, mut m) = (FlowKey::ZERO, FlowKey::ZERO);
        let mut put = |fd, v: u64, mask: u64| {
            k.set(fd, v & mask);
            m.set(fd, mask);
        };
        put(f::RECIRC_ID, 2, 0xffff_ffff);
        put(f::IN_PORT, 1, 0xffff_ffff);
        put(f::DL_DST, 0x0200_0000_0b02, 0xffff_ffff_ffff);
        put(f::DL_SRC, 0x0200_0000_0a01, 0xffff_ffff_ff00);
        put(f::DL_TYPE, 0x0800, 0xffff);
        put(f::VLAN0_TCI, 0, VLAN_CFI as u64);
        put(f::NW_SRC, 0x0a07_0001, 0xffff_ffff);
        put(f::NW_DST, 0x0a07_0000, 0xffff_ff00);
        put(f::NW_PROTO, 17, 0xff);
        put(f::NW_TOS, 0x10, 0xfc);
        put(f::NW_TTL, 64, 0xff);
        put(f::NW_FRAG, 0, 1);
        put(f::TP_DST, 4000, 0xffff);
        let spec = FlowSpec {
            key: k,
            mask: m,
            actions: vec![
                OdpAction::SetEth {
                    src: (0, 0),
                    dst: (0xaabb_ccdd_eeff, 0xffff_ffff_ffff),
                },
                OdpAction::PushVlan {
                    tpid: 0x8100,
                    tci: (3 << 13) | 42,
                },
                OdpAction::Output(2),
                OdpAction::Output(2),
            ],
        };
        let (chain, key) = translate_match(&spec).unwrap();
        let acts = translate_actions(&spec.actions).unwrap();
        let fl = filter(chain, 3, 7, 0xabc, key, acts);
        let mut m = FilterMsg::default();
        same(m.new_filter(seq_of(&tc), 3, &fl, &port2).unwrap(), &tc);
    }

    /// `protocol 802.1Q prio 5 handle 9 flower skip_hw vlan_id 10 vlan_prio 2
    /// vlan_ethtype ip ip_proto tcp src_port 80 dst_port 8000 tcp_flags 0x2/0x12
    /// action vlan pop pipe cookie ..ff action mirred egress redirect dev tcnlb`.
    #[test]
    fn new_vlan_tcp_filter_matches_tc() {
        let tc = golden(include_str!("testdata/tc-new-vlan.hex"));
        let key = FlowerKey {
            protocol: Some(0x8100),
            vlan_id: Some(10),
            vlan_prio: Some(2),
            vlan_ethtype: Some(0x0800),
            ip_proto: Some(6),
            src_port: (80, 0xffff),
            dst_port: (8000, 0xffff),
            tcp_flags: (0x2, 0x12),
            ..Default::default()
        };
        let acts = vec![
            TcAction::VlanPop,
            TcAction::Mirred {
                redirect: true,
                dev: 2,
            },
        ];
        let fl = filter(0, 5, 9, 0xff, key, acts);
        let mut m = FilterMsg::default();
        same(m.new_filter(seq_of(&tc), 3, &fl, &port2).unwrap(), &tc);
    }

    /// `protocol ipv6 prio 4 handle 11 flower skip_hw ip_proto icmpv6 src_ip
    /// 2001:db8::1 dst_ip 2001:db8::/32 type 128 code 0 action drop cookie ..01`.
    #[test]
    fn new_ipv6_icmp_filter_matches_tc() {
        let tc = golden(include_str!("testdata/tc-new-ipv6.hex"));
        let a: u128 = 0x2001_0db8 << 96;
        let key = FlowerKey {
            protocol: Some(0x86dd),
            ip_proto: Some(58),
            src_ipv6: (a | 1, u128::MAX),
            dst_ipv6: (a, u128::MAX << 96),
            icmp_type: (128, 0xff),
            icmp_code: (0, 0xff),
            ..Default::default()
        };
        let fl = filter(0, 4, 11, 1, key, vec![TcAction::Drop]);
        let mut m = FilterMsg::default();
        same(m.new_filter(seq_of(&tc), 3, &fl, &port2).unwrap(), &tc);
    }

    /// `protocol arp prio 6 handle 12 flower skip_hw arp_sip 10.0.0.1 arp_op request
    /// arp_sha 02:00:00:00:00:01 action drop cookie ..02`; and `protocol all prio 8
    /// handle 13 flower skip_hw dst_mac 01:../01:.. action drop cookie ..03`.
    #[test]
    fn new_arp_and_any_protocol_filters_match_tc() {
        let tc = golden(include_str!("testdata/tc-new-arp.hex"));
        let key = FlowerKey {
            protocol: Some(0x0806),
            arp_sip: (0x0a00_0001, u32::MAX),
            arp_op: (1, 0xff),
            arp_sha: (0x0200_0000_0001, 0xffff_ffff_ffff),
            ..Default::default()
        };
        let fl = filter(0, 6, 12, 2, key, vec![TcAction::Drop]);
        let mut m = FilterMsg::default();
        same(m.new_filter(seq_of(&tc), 3, &fl, &port2).unwrap(), &tc);

        let tc = golden(include_str!("testdata/tc-new-all.hex"));
        let key = FlowerKey {
            dst_mac: (0x0100_0000_0000, 0x0100_0000_0000),
            ..Default::default()
        };
        let fl = filter(0, 8, 13, 3, key, vec![TcAction::Drop]);
        same(m.new_filter(seq_of(&tc), 3, &fl, &port2).unwrap(), &tc);
    }

    /// `tc filter del|get dev tcnla ingress protocol ip prio 3 chain 2 handle 7
    /// flower`, `tc qdisc add dev tcnla clsact`.
    #[test]
    fn del_get_and_clsact_match_tc() {
        let id = FilterId {
            ifindex: 3,
            chain: 2,
            prio: 3,
            protocol: 0x0800,
            handle: 7,
        };
        let mut m = FilterMsg::default();
        let tc = golden(include_str!("testdata/tc-del.hex"));
        same(m.del_filter(seq_of(&tc), &id), &tc);
        let tc = golden(include_str!("testdata/tc-get.hex"));
        same(m.get_filter(seq_of(&tc), &id), &tc);
        let tc = golden(include_str!("testdata/tc-clsact.hex"));
        same(m.new_clsact(seq_of(&tc), 3), &tc);
    }

    #[test]
    fn pedit_keys_are_in_packet_byte_order() {
        let keys = vec![PeditKey {
            hdr: PeditHdr::Udp,
            off: 0,
            keep: 0xffff_0000,
            val: 0x0000_0fa1,
        }];
        let fl = filter(
            0,
            1,
            1,
            1,
            FlowerKey::default(),
            vec![TcAction::Pedit(keys)],
        );
        let mut m = FilterMsg::default();
        let b = m.new_filter(1, 3, &fl, &port2).unwrap().to_vec();
        let needle = [0xff, 0xff, 0, 0, 0, 0, 0x0f, 0xa1];
        assert!(b.windows(8).any(|w| w == needle), "{b:02x?}");
    }

    #[test]
    fn mirred_to_a_port_without_interface_is_refused() {
        let fl = filter(
            0,
            1,
            1,
            1,
            FlowerKey::default(),
            vec![TcAction::Mirred {
                redirect: true,
                dev: 7,
            }],
        );
        let mut m = FilterMsg::default();
        assert_eq!(
            m.new_filter(1, 3, &fl, &port2).unwrap_err(),
            EncodeError::NoIfindex(7)
        );
    }

    /// What the kernel answered to `tc filter add ... flower` on a kernel without
    /// cls_flower (captured with `strace -e trace=recvmsg -e read=3`).
    #[test]
    fn kernel_error_with_extack_is_parsed() {
        let b = golden(include_str!("testdata/kernel-err-reply.hex"));
        let r: Vec<_> = Replies::new(&b).collect();
        assert_eq!(r.len(), 1);
        match &r[0] {
            Ok(Reply::Err { seq, err }) => {
                assert_eq!(*seq, seq_of(&b));
                assert_eq!(err.errno, 2);
                assert_eq!(err.msg.as_deref(), Some("TC classifier not found"));
                assert_eq!(err.to_string(), "TC classifier not found errno 2 (ENOENT)");
            }
            x => panic!("{x:?}"),
        }
        // every truncation is an error or ends the walk, never a panic
        for n in 0..b.len() {
            for r in Replies::new(&b[..n]) {
                let _ = r;
            }
        }
    }

    /// A filter reply as the kernel builds it (tcmsg, kind, options with the
    /// action list; the first action with cookie and stats) gives its counters.
    #[test]
    fn filter_stats_are_parsed() {
        let mut m = FilterMsg::default();
        m.begin(RTM_NEWTFILTER, 0, 9);
        m.tcmsg(3, 7, PARENT_INGRESS, 0);
        m.str(TCA_KIND, "flower");
        let o = m.nest(TCA_OPTIONS);
        m.u32(FL_FLAGS, 1);
        let acts = m.nest(FL_ACT);
        let a = m.nest(1);
        m.str(TCA_ACT_KIND, "mirred");
        let st = m.nest(TCA_ACT_STATS | NLA_F_NESTED);
        let mut basic = [0u8; 16];
        basic[..8].copy_from_slice(&1234u64.to_ne_bytes());
        basic[8..12].copy_from_slice(&17u32.to_ne_bytes());
        m.attr(TCA_STATS_BASIC, &basic);
        m.end(st).unwrap();
        m.attr(TCA_ACT_COOKIE, &0xabcu64.to_be_bytes());
        m.end(a).unwrap();
        m.end(acts).unwrap();
        m.end(o).unwrap();
        let b = m.finish().to_vec();
        let body = match Replies::new(&b).next() {
            Some(Ok(Reply::Msg { ty, body, .. })) if ty == RTM_NEWTFILTER => body,
            x => panic!("{x:?}"),
        };
        let s = parse_filter_stats(body).unwrap();
        assert_eq!(
            s,
            FilterStats {
                packets: 17,
                bytes: 1234,
                cookie: Some(0xabc)
            }
        );
        for n in 0..body.len() {
            let _ = parse_filter_stats(&body[..n]);
        }
    }
}
