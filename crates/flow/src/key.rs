//! The flow key: the header fields Open vSwitch's `struct flow` holds for Ethernet,
//! VLAN, ARP, IPv4/IPv6, TCP/UDP/SCTP and ICMP/ICMPv6, packed into 64-bit words so that
//! masking, hashing and staged (per-segment) lookup are plain word loops.
//!
//! The words are grouped in the same four lookup stages as OVS's classifier
//! (metadata | L2 | L3 | L4), see [`STAGES`]; the order of the fields inside a stage
//! does not matter for the semantics, only the stage a field belongs to.

use wire::ethernet::{
    ethertype, ipproto, ipv6_walk_ext, is_vlan_tpid, ArpPacket, EthernetFrame, IcmpPacket,
    Ipv4Packet, Ipv6Packet, NdRepr, TcpPacket, UdpPacket, VlanTag,
};

/// Number of 64-bit words in a [`FlowKey`].
pub const NW: usize = 24;

/// A field's place in the key: word index, bit shift inside the word, width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fd {
    pub word: u8,
    pub shift: u8,
    pub bits: u8,
}

impl Fd {
    const fn new(word: u8, shift: u8, bits: u8) -> Fd {
        Fd { word, shift, bits }
    }
    /// All-ones value of this field's width.
    pub const fn ones(self) -> u64 {
        if self.bits == 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
}

/// Field descriptors.
pub mod f {
    use super::Fd;
    pub const IN_PORT: Fd = Fd::new(0, 32, 32);
    pub const RECIRC_ID: Fd = Fd::new(0, 0, 32);
    /// Pipeline metadata (never in a packet's key nor a megaflow): reg0–reg15, two per
    /// word (reg 2i in the high half, so word 1+i is `xreg i`), and `metadata`.
    pub const REGS: [Fd; 16] = {
        let mut a = [Fd::new(0, 0, 32); 16];
        let mut i = 0;
        while i < 16 {
            a[i] = Fd::new(1 + (i / 2) as u8, if i % 2 == 0 { 32 } else { 0 }, 32);
            i += 1;
        }
        a
    };
    /// `xreg0`–`xreg7`: 64-bit views of register pairs (xreg i = reg 2i << 32 | reg 2i+1).
    pub const XREGS: [Fd; 8] = {
        let mut a = [Fd::new(0, 0, 64); 8];
        let mut i = 0;
        while i < 8 {
            a[i] = Fd::new(1 + i as u8, 0, 64);
            i += 1;
        }
        a
    };
    pub const METADATA: Fd = Fd::new(9, 0, 64);
    pub const DL_DST: Fd = Fd::new(10, 16, 48);
    pub const DL_TYPE: Fd = Fd::new(10, 0, 16);
    pub const DL_SRC: Fd = Fd::new(11, 16, 48);
    pub const VLAN0_TPID: Fd = Fd::new(12, 48, 16);
    pub const VLAN0_TCI: Fd = Fd::new(12, 32, 16);
    pub const VLAN1_TPID: Fd = Fd::new(12, 16, 16);
    pub const VLAN1_TCI: Fd = Fd::new(12, 0, 16);
    pub const NW_SRC: Fd = Fd::new(13, 32, 32);
    pub const NW_DST: Fd = Fd::new(13, 0, 32);
    pub const IPV6_SRC_HI: Fd = Fd::new(14, 0, 64);
    pub const IPV6_SRC_LO: Fd = Fd::new(15, 0, 64);
    pub const IPV6_DST_HI: Fd = Fd::new(16, 0, 64);
    pub const IPV6_DST_LO: Fd = Fd::new(17, 0, 64);
    pub const IPV6_LABEL: Fd = Fd::new(18, 32, 32);
    pub const NW_FRAG: Fd = Fd::new(18, 24, 8);
    pub const NW_TOS: Fd = Fd::new(18, 16, 8);
    pub const NW_TTL: Fd = Fd::new(18, 8, 8);
    pub const NW_PROTO: Fd = Fd::new(18, 0, 8);
    pub const ND_TARGET_HI: Fd = Fd::new(19, 0, 64);
    pub const ND_TARGET_LO: Fd = Fd::new(20, 0, 64);
    pub const ARP_SHA: Fd = Fd::new(21, 16, 48);
    pub const TCP_FLAGS: Fd = Fd::new(21, 0, 16);
    pub const ARP_THA: Fd = Fd::new(22, 16, 48);
    pub const TP_SRC: Fd = Fd::new(23, 48, 16);
    pub const TP_DST: Fd = Fd::new(23, 32, 16);
    /// The datapath's `hash()` result, set for a recirculated packet (0 = not computed;
    /// never matched by OpenFlow rules here, only by megaflows of select groups).
    pub const DP_HASH: Fd = Fd::new(23, 0, 32);
}

/// Word ranges of the four lookup stages (OVS: metadata, L2, L3 up to `nd_target`, L4).
/// The metadata stage holds in_port/recirc_id, the registers and `metadata`, as in
/// OVS's `struct flow` (everything before `dl_dst`).
pub const STAGES: [core::ops::Range<usize>; 4] = [0..10, 10..13, 13..19, 19..24];

/// The words of the pipeline registers and `metadata` (zero in every packet's key;
/// cleared from every megaflow, as OVS's `flow_wildcards_clear_non_packet_fields`).
pub const META_WORDS: core::ops::Range<usize> = 1..10;

/// `nw_frag` bits (OVS `FLOW_NW_FRAG_*`).
pub const FRAG_ANY: u8 = 1;
pub const FRAG_LATER: u8 = 2;
pub const FRAG_MASK: u8 = 3;
/// VLAN TCI bits; OVS keeps the "present" marker in the CFI/DEI bit.
pub const VLAN_CFI: u16 = 0x1000;
pub const VLAN_VID_MASK: u16 = 0x0fff;
pub const VLAN_PCP_MASK: u16 = 0xe000;

/// A flow key (or, used as a mask, a set of wildcard bits: 1 = significant).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    pub w: [u64; NW],
}

impl core::fmt::Debug for FlowKey {
    fn fmt(&self, fm: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(fm, "FlowKey[")?;
        for (i, w) in self.w.iter().enumerate() {
            if *w != 0 {
                write!(fm, " {i}:{w:#x}")?;
            }
        }
        write!(fm, " ]")
    }
}

impl FlowKey {
    pub const ZERO: FlowKey = FlowKey { w: [0; NW] };

    #[inline]
    pub fn get(&self, fd: Fd) -> u64 {
        (self.w[fd.word as usize] >> fd.shift) & fd.ones()
    }
    #[inline]
    pub fn set(&mut self, fd: Fd, v: u64) {
        let m = fd.ones() << fd.shift;
        let w = &mut self.w[fd.word as usize];
        *w = (*w & !m) | ((v << fd.shift) & m);
    }
    /// ORs bits into a field (for masks).
    #[inline]
    pub fn or(&mut self, fd: Fd, v: u64) {
        self.w[fd.word as usize] |= (v & fd.ones()) << fd.shift;
    }
    /// Sets a field to all ones (for masks).
    #[inline]
    pub fn full(&mut self, fd: Fd) {
        self.or(fd, fd.ones());
    }
    pub fn get128(&self, hi: Fd, lo: Fd) -> u128 {
        ((self.get(hi) as u128) << 64) | self.get(lo) as u128
    }
    pub fn set128(&mut self, hi: Fd, lo: Fd, v: u128) {
        self.set(hi, (v >> 64) as u64);
        self.set(lo, v as u64);
    }
    pub fn ipv6_src(&self) -> u128 {
        self.get128(f::IPV6_SRC_HI, f::IPV6_SRC_LO)
    }
    pub fn ipv6_dst(&self) -> u128 {
        self.get128(f::IPV6_DST_HI, f::IPV6_DST_LO)
    }
    pub fn in_port(&self) -> u32 {
        self.get(f::IN_PORT) as u32
    }
    pub fn dl_type(&self) -> u16 {
        self.get(f::DL_TYPE) as u16
    }
    pub fn nw_proto(&self) -> u8 {
        self.get(f::NW_PROTO) as u8
    }
    pub fn nw_frag(&self) -> u8 {
        self.get(f::NW_FRAG) as u8
    }
    pub fn vlan0_tci(&self) -> u16 {
        self.get(f::VLAN0_TCI) as u16
    }
    pub fn tp_src(&self) -> u16 {
        self.get(f::TP_SRC) as u16
    }
    pub fn tp_dst(&self) -> u16 {
        self.get(f::TP_DST) as u16
    }
    /// tp_src << 16 | tp_dst, the value the ports trie works on.
    #[inline]
    pub fn ports(&self) -> u32 {
        (self.w[f::TP_SRC.word as usize] >> 32) as u32
    }
    pub fn is_ipv4(&self) -> bool {
        self.dl_type() == ethertype::IPV4
    }
    pub fn is_ipv6(&self) -> bool {
        self.dl_type() == ethertype::IPV6
    }
    pub fn is_ip_any(&self) -> bool {
        self.is_ipv4() || self.is_ipv6()
    }
    pub fn is_arp(&self) -> bool {
        self.dl_type() == ethertype::ARP || self.dl_type() == ethertype::RARP
    }
    pub fn is_icmp_any(&self) -> bool {
        (self.is_ipv4() && self.nw_proto() == ipproto::ICMP)
            || (self.is_ipv6() && self.nw_proto() == ipproto::ICMPV6)
    }
    /// `self & mask`, word by word.
    #[inline]
    pub fn and(&self, mask: &FlowKey) -> FlowKey {
        let mut r = *self;
        for i in 0..NW {
            r.w[i] &= mask.w[i];
        }
        r
    }
    #[inline]
    pub fn or_with(&mut self, other: &FlowKey) {
        for i in 0..NW {
            self.w[i] |= other.w[i];
        }
    }
    pub fn is_zero(&self) -> bool {
        self.w.iter().all(|&w| w == 0)
    }
    /// Number of VLAN headers (tags whose TCI carries the CFI "present" marker).
    pub fn n_vlans(&self) -> usize {
        if self.get(f::VLAN0_TCI) as u16 & VLAN_CFI == 0 {
            0
        } else if self.get(f::VLAN1_TCI) as u16 & VLAN_CFI == 0 {
            1
        } else {
            2
        }
    }

    /// Parses an Ethernet frame received on `in_port` the way OVS's `flow_extract` does
    /// (one VLAN header, OVS's default `vlan-limit`). Truncated or malformed headers end
    /// the parse: the fields found so far are kept, the rest stay zero. Never panics.
    pub fn from_packet(in_port: u32, pkt: &[u8]) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(f::IN_PORT, in_port as u64);
        parse_into(&mut k, pkt);
        k
    }
}

fn mac_u64(m: [u8; 6]) -> u64 {
    m.iter().fold(0u64, |a, &b| (a << 8) | b as u64)
}

fn parse_into(k: &mut FlowKey, pkt: &[u8]) {
    let Ok(eth) = EthernetFrame::new_checked(pkt) else {
        return;
    };
    k.set(f::DL_DST, mac_u64(eth.dst()));
    k.set(f::DL_SRC, mac_u64(eth.src()));
    let mut etype = eth.ethertype();
    let mut rest = eth.payload();
    if is_vlan_tpid(etype) {
        if let Ok(tag) = VlanTag::new_checked(rest) {
            k.set(f::VLAN0_TPID, etype as u64);
            k.set(f::VLAN0_TCI, (tag.tci() | VLAN_CFI) as u64);
            etype = tag.ethertype();
            rest = rest.get(4..).unwrap_or(&[]);
        } else {
            // OVS: a truncated tag is not parsed; its TPID is the EtherType.
            k.set(f::DL_TYPE, etype as u64);
            return;
        }
    }
    // 802.3 length field: LLC/SNAP (OVS parse_ethertype).
    if etype < 0x600 {
        let snap = rest.len() >= 8 && rest[..6] == [0xaa, 0xaa, 0x03, 0, 0, 0];
        etype = if snap {
            u16::from_be_bytes([rest[6], rest[7]])
        } else {
            ethertype::NONE
        };
        if etype < 0x600 {
            etype = ethertype::NONE;
        }
        k.set(f::DL_TYPE, etype as u64);
        if etype == ethertype::NONE {
            return;
        }
        rest = &rest[8..];
    }
    k.set(f::DL_TYPE, etype as u64);
    match etype {
        ethertype::IPV4 => parse_ipv4(k, rest),
        ethertype::IPV6 => parse_ipv6(k, rest),
        ethertype::ARP | ethertype::RARP => {
            if let Ok(arp) = ArpPacket::new_checked(rest) {
                if arp.is_eth_ipv4() {
                    if arp.op() <= 0xff {
                        k.set(f::NW_PROTO, arp.op() as u64);
                    }
                    k.set(f::NW_SRC, arp.spa() as u64);
                    k.set(f::NW_DST, arp.tpa() as u64);
                    k.set(f::ARP_SHA, mac_u64(arp.sha()));
                    k.set(f::ARP_THA, mac_u64(arp.tha()));
                }
            }
        }
        _ => {}
    }
}

fn parse_ipv4(k: &mut FlowKey, b: &[u8]) {
    let Ok(ip) = Ipv4Packet::new_checked(b) else {
        return;
    };
    k.set(f::NW_SRC, ip.src() as u64);
    k.set(f::NW_DST, ip.dst() as u64);
    k.set(f::NW_TOS, ip.tos() as u64);
    k.set(f::NW_TTL, ip.ttl() as u64);
    k.set(f::NW_PROTO, ip.protocol() as u64);
    let mut frag = 0u8;
    if ip.is_fragment() {
        frag |= FRAG_ANY;
        if ip.frag_offset() != 0 {
            frag |= FRAG_LATER;
        }
    }
    k.set(f::NW_FRAG, frag as u64);
    if frag & FRAG_LATER == 0 {
        parse_l4(k, ip.protocol(), ip.payload(), false);
    }
}

fn parse_ipv6(k: &mut FlowKey, b: &[u8]) {
    let Ok(ip) = Ipv6Packet::new_checked(b) else {
        return;
    };
    k.set128(
        f::IPV6_SRC_HI,
        f::IPV6_SRC_LO,
        u128::from_be_bytes(ip.src()),
    );
    k.set128(
        f::IPV6_DST_HI,
        f::IPV6_DST_LO,
        u128::from_be_bytes(ip.dst()),
    );
    let payload = ip.payload();
    // OVS: a truncated extension header leaves everything after the addresses unset.
    let Ok(ext) = ipv6_walk_ext(ip.next_header(), payload) else {
        return;
    };
    k.set(f::IPV6_LABEL, ip.flow_label() as u64);
    k.set(f::NW_TOS, ip.traffic_class() as u64);
    k.set(f::NW_TTL, ip.hop_limit() as u64);
    k.set(f::NW_PROTO, ext.proto as u64);
    let mut frag = 0u8;
    if ext.fragment {
        frag |= FRAG_ANY;
        if ext.later_fragment {
            frag |= FRAG_LATER;
        }
    }
    k.set(f::NW_FRAG, frag as u64);
    if !ext.later_fragment {
        parse_l4(k, ext.proto, payload.get(ext.offset..).unwrap_or(&[]), true);
    }
}

fn parse_l4(k: &mut FlowKey, proto: u8, b: &[u8], v6: bool) {
    match proto {
        ipproto::TCP => {
            if let Ok(t) = TcpPacket::new_checked(b) {
                k.set(f::TP_SRC, t.src_port() as u64);
                k.set(f::TP_DST, t.dst_port() as u64);
                k.set(f::TCP_FLAGS, t.flags() as u64);
            }
        }
        ipproto::UDP => {
            if let Ok(u) = UdpPacket::new_checked(b) {
                k.set(f::TP_SRC, u.src_port() as u64);
                k.set(f::TP_DST, u.dst_port() as u64);
            }
        }
        ipproto::SCTP if b.len() >= 12 => {
            k.set(f::TP_SRC, u16::from_be_bytes([b[0], b[1]]) as u64);
            k.set(f::TP_DST, u16::from_be_bytes([b[2], b[3]]) as u64);
        }
        // OVS needs the full 8-byte ICMP / ICMPv6 header.
        ipproto::ICMP if !v6 && b.len() >= 8 => {
            if let Ok(i) = IcmpPacket::new_checked(b) {
                k.set(f::TP_SRC, i.msg_type() as u64);
                k.set(f::TP_DST, i.code() as u64);
            }
        }
        ipproto::ICMPV6 if v6 && b.len() >= 8 => {
            if let Ok(i) = IcmpPacket::new_checked(b) {
                k.set(f::TP_SRC, i.msg_type() as u64);
                k.set(f::TP_DST, i.code() as u64);
                if (i.msg_type() == 135 || i.msg_type() == 136) && i.code() == 0 {
                    if let Ok(nd) = NdRepr::parse(i.body()) {
                        k.set128(
                            f::ND_TARGET_HI,
                            f::ND_TARGET_LO,
                            u128::from_be_bytes(nd.target),
                        );
                        k.set(f::ARP_SHA, mac_u64(nd.sll));
                        k.set(f::ARP_THA, mac_u64(nd.tll));
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn parses_vlan_udp() {
        let p = hex("0200000000020200000000018100600a08004500005c000000004011748c010101010202020203e807d00048099d00010203");
        // The sample frame is truncated here (total length says more): IP is not parsed.
        let k = FlowKey::from_packet(1, &p);
        assert_eq!(k.vlan0_tci(), 0x700a);
        assert_eq!(k.dl_type(), 0x0800);
        assert_eq!(k.get(f::NW_SRC), 0);
    }

    #[test]
    fn parses_tcp() {
        let p = hex("020000000002020000000001080045000028000000004006aed8c0a801070a0000099c40005000000000000000005012000063580000");
        let k = FlowKey::from_packet(1, &p);
        assert_eq!(k.get(f::NW_SRC), 0xc0a80107);
        assert_eq!(k.tp_dst(), 80);
        assert_eq!(k.get(f::TCP_FLAGS), 0x012);
        assert_eq!(k.get(f::NW_TTL), 64);
    }
}
