//! Ethernet, 802.1Q/802.1ad VLAN, ARP, IPv4, IPv6 (with extension headers), TCP, UDP,
//! ICMP/ICMPv6 views (used by `flow` and the drivers).
//!
//! Every view follows the crate contract: `new_checked` validates the buffer length (and
//! the length fields listed in each view's doc) once; afterwards every accessor is
//! infallible. Setters exist where the flow datapath rewrites headers.

use crate::{Error, Result};

/// EtherType values used by the L2–L4 parsers.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const RARP: u16 = 0x8035;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
    pub const MPLS: u16 = 0x8847;
    pub const MPLS_MCAST: u16 = 0x8848;
    /// OVS's "no EtherType" marker for 802.2 LLC frames without SNAP.
    pub const NONE: u16 = 0x05ff;
}

/// IP protocol numbers used by the parsers.
pub mod ipproto {
    pub const HOPOPTS: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NONE: u8 = 59;
    pub const DSTOPTS: u8 = 60;
    pub const SCTP: u8 = 132;
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn mac(b: &[u8], at: usize) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

macro_rules! view {
    ($(#[$m:meta])* $name:ident, $min:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T> {
            buf: T,
        }
        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps without checking (for emitting into a buffer of known size).
            pub fn new_unchecked(buf: T) -> Self {
                $name { buf }
            }
            /// Wraps after [`Self::check_len`].
            pub fn new_checked(buf: T) -> Result<Self> {
                let v = $name { buf };
                v.check_len()?;
                Ok(v)
            }
            /// Consumes the view, returning the buffer.
            pub fn into_inner(self) -> T {
                self.buf
            }
            fn b(&self) -> &[u8] {
                self.buf.as_ref()
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn bm(&mut self) -> &mut [u8] {
                self.buf.as_mut()
            }
        }
        #[allow(dead_code)]
        const _: usize = $min;
    };
}

view!(
    /// An Ethernet II header (14 bytes) followed by its payload.
    EthernetFrame,
    14
);
/// Length of an Ethernet header.
pub const ETHERNET_HEADER_LEN: usize = 14;

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the 14-byte header is present.
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < ETHERNET_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    pub fn dst(&self) -> [u8; 6] {
        mac(self.b(), 0)
    }
    pub fn src(&self) -> [u8; 6] {
        mac(self.b(), 6)
    }
    /// The EtherType/length field (the first one: a VLAN TPID when tagged).
    pub fn ethertype(&self) -> u16 {
        be16(self.b(), 12)
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[ETHERNET_HEADER_LEN..]
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    pub fn set_dst(&mut self, m: [u8; 6]) {
        self.bm()[0..6].copy_from_slice(&m)
    }
    pub fn set_src(&mut self, m: [u8; 6]) {
        self.bm()[6..12].copy_from_slice(&m)
    }
    pub fn set_ethertype(&mut self, t: u16) {
        self.bm()[12..14].copy_from_slice(&t.to_be_bytes())
    }
}

view!(
    /// An 802.1Q / 802.1ad tag body as it follows the TPID: TCI (2) + inner EtherType (2).
    VlanTag,
    4
);
/// Length of a VLAN tag body (TCI + EtherType) after the TPID.
pub const VLAN_TAG_LEN: usize = 4;

impl<T: AsRef<[u8]>> VlanTag<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < VLAN_TAG_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// Tag control information: PCP (3 bits), DEI (1), VID (12).
    pub fn tci(&self) -> u16 {
        be16(self.b(), 0)
    }
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }
    pub fn ethertype(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[VLAN_TAG_LEN..]
    }
}

/// Whether an EtherType is a VLAN TPID (802.1Q or 802.1ad).
pub fn is_vlan_tpid(t: u16) -> bool {
    t == ethertype::VLAN || t == ethertype::QINQ
}

view!(
    /// An ARP packet for Ethernet/IPv4 (28 bytes).
    ArpPacket,
    28
);
/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_ETH_IPV4_LEN: usize = 28;

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Checks the 28-byte Ethernet/IPv4 form.
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < ARP_ETH_IPV4_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    pub fn htype(&self) -> u16 {
        be16(self.b(), 0)
    }
    pub fn ptype(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn hlen(&self) -> u8 {
        self.b()[4]
    }
    pub fn plen(&self) -> u8 {
        self.b()[5]
    }
    pub fn op(&self) -> u16 {
        be16(self.b(), 6)
    }
    pub fn sha(&self) -> [u8; 6] {
        mac(self.b(), 8)
    }
    pub fn spa(&self) -> u32 {
        be32(self.b(), 14)
    }
    pub fn tha(&self) -> [u8; 6] {
        mac(self.b(), 18)
    }
    pub fn tpa(&self) -> u32 {
        be32(self.b(), 24)
    }
    /// Ethernet hardware + IPv4 protocol addresses (the only form the flow key holds).
    pub fn is_eth_ipv4(&self) -> bool {
        self.htype() == 1 && self.ptype() == ethertype::IPV4 && self.hlen() == 6 && self.plen() == 4
    }
}

view!(
    /// An IPv4 header. `check_len` trusts IHL and total length: IHL >= 5, header and
    /// total length within the buffer, total length >= header length.
    Ipv4Packet,
    20
);
/// Minimum IPv4 header length.
pub const IPV4_MIN_HEADER_LEN: usize = 20;

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < IPV4_MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < IPV4_MIN_HEADER_LEN {
            return Err(Error::BadLength);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        let tl = self.total_len() as usize;
        if tl < hl {
            return Err(Error::BadLength);
        }
        if tl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// The version field (`check_len` does not require 4, like OVS's flow extraction).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn header_len(&self) -> usize {
        ((self.b()[0] & 0x0f) as usize) * 4
    }
    /// The whole TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }
    pub fn total_len(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// Flags (3 bits) and fragment offset (13 bits, in 8-byte units).
    pub fn frag_field(&self) -> u16 {
        be16(self.b(), 6)
    }
    pub fn more_frags(&self) -> bool {
        self.frag_field() & 0x2000 != 0
    }
    pub fn frag_offset(&self) -> u16 {
        self.frag_field() & 0x1fff
    }
    /// A fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }
    pub fn src(&self) -> u32 {
        be32(self.b(), 12)
    }
    pub fn dst(&self) -> u32 {
        be32(self.b(), 16)
    }
    /// The payload within the total length (trailing padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len() as usize]
    }
    /// RFC 1071 header checksum over the header as it is (0 when correct).
    pub fn compute_checksum(&self) -> u16 {
        checksum(&self.b()[..self.header_len()])
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    pub fn set_src(&mut self, a: u32) {
        self.bm()[12..16].copy_from_slice(&a.to_be_bytes())
    }
    pub fn set_dst(&mut self, a: u32) {
        self.bm()[16..20].copy_from_slice(&a.to_be_bytes())
    }
    pub fn set_tos(&mut self, t: u8) {
        self.bm()[1] = t
    }
    pub fn set_ttl(&mut self, t: u8) {
        self.bm()[8] = t
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.bm()[10..12].copy_from_slice(&[0, 0]);
        let c = self.compute_checksum();
        self.bm()[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// RFC 1071 one's-complement checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [x] = chunks.remainder() {
        sum += (*x as u32) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

view!(
    /// An IPv6 fixed header. `check_len` trusts the payload length (within the buffer).
    Ipv6Packet,
    40
);
/// IPv6 fixed header length.
pub const IPV6_HEADER_LEN: usize = 40;

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < IPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if IPV6_HEADER_LEN + self.payload_len() as usize > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// The version field (not checked by `check_len`).
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        ((be16(self.b(), 0) >> 4) & 0xff) as u8
    }
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), 4)
    }
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        a
    }
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        a
    }
    /// The payload within the payload length (extension headers included).
    pub fn payload(&self) -> &[u8] {
        &self.b()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + self.payload_len() as usize]
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.bm()[8..24].copy_from_slice(&a)
    }
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.bm()[24..40].copy_from_slice(&a)
    }
    pub fn set_hop_limit(&mut self, h: u8) {
        self.bm()[7] = h
    }
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.bm();
        b[0] = (b[0] & 0xf0) | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }
}

/// Result of walking IPv6 extension headers to the upper-layer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Ext {
    /// The upper-layer protocol (or the header where the walk stopped; 44 for a
    /// non-first fragment).
    pub proto: u8,
    /// Offset of the upper-layer header within the IPv6 payload.
    pub offset: usize,
    /// A Fragment header was seen.
    pub fragment: bool,
    /// The fragment offset is non-zero (not the first fragment): L4 not present.
    pub later_fragment: bool,
}

/// Walks hop-by-hop, routing, destination options, AH and fragment headers of an IPv6
/// payload. Stops (with `Err(Truncated)`) at a header that does not fit.
pub fn ipv6_walk_ext(first: u8, payload: &[u8]) -> Result<Ipv6Ext> {
    let mut proto = first;
    let mut off = 0usize;
    let mut fragment = false;
    loop {
        match proto {
            ipproto::HOPOPTS | ipproto::ROUTING | ipproto::DSTOPTS | ipproto::AH => {
                if payload.len() < off + 8 {
                    return Err(Error::Truncated);
                }
                let nh = payload[off];
                let len = if proto == ipproto::AH {
                    (payload[off + 1] as usize + 2) * 4
                } else {
                    (payload[off + 1] as usize + 1) * 8
                };
                if payload.len() < off + len {
                    return Err(Error::Truncated);
                }
                proto = nh;
                off += len;
            }
            ipproto::FRAGMENT => {
                if payload.len() < off + 8 {
                    return Err(Error::Truncated);
                }
                let nh = payload[off];
                let offlg = be16(payload, off + 2);
                off += 8;
                // Like OVS: a fragment header with offset, M flag and reserved bits all
                // zero (an "atomic fragment") is not a fragment.
                if offlg != 0 {
                    fragment = true;
                    if offlg & 0xfff8 != 0 {
                        // Not the first fragment: no upper-layer header; the protocol
                        // stays "fragment" (44).
                        return Ok(Ipv6Ext {
                            proto: ipproto::FRAGMENT,
                            offset: off,
                            fragment,
                            later_fragment: true,
                        });
                    }
                }
                proto = nh;
            }
            _ => {
                return Ok(Ipv6Ext {
                    proto,
                    offset: off,
                    fragment,
                    later_fragment: false,
                })
            }
        }
    }
}

view!(
    /// A TCP header. `check_len` trusts the data offset (>= 5 words, within the buffer).
    TcpPacket,
    20
);
pub const TCP_MIN_HEADER_LEN: usize = 20;

impl<T: AsRef<[u8]>> TcpPacket<T> {
    pub fn check_len(&self) -> Result<()> {
        let b = self.b();
        if b.len() < TCP_MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < TCP_MIN_HEADER_LEN {
            return Err(Error::BadLength);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }
    pub fn header_len(&self) -> usize {
        ((self.b()[12] >> 4) as usize) * 4
    }
    /// The 12 flag bits (NS, CWR, ECE, URG, ACK, PSH, RST, SYN, FIN and 3 reserved).
    pub fn flags(&self) -> u16 {
        be16(self.b(), 12) & 0x0fff
    }
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    pub fn set_src_port(&mut self, p: u16) {
        self.bm()[0..2].copy_from_slice(&p.to_be_bytes())
    }
    pub fn set_dst_port(&mut self, p: u16) {
        self.bm()[2..4].copy_from_slice(&p.to_be_bytes())
    }
}

view!(
    /// A UDP header (8 bytes).
    UdpPacket,
    8
);
pub const UDP_HEADER_LEN: usize = 8;

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < UDP_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }
    pub fn len(&self) -> u16 {
        be16(self.b(), 4)
    }
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= UDP_HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 6)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    pub fn set_src_port(&mut self, p: u16) {
        self.bm()[0..2].copy_from_slice(&p.to_be_bytes())
    }
    pub fn set_dst_port(&mut self, p: u16) {
        self.bm()[2..4].copy_from_slice(&p.to_be_bytes())
    }
}

view!(
    /// An ICMP or ICMPv6 header: type, code, checksum (4 bytes; the rest is type-specific).
    IcmpPacket,
    4
);
pub const ICMP_HEADER_LEN: usize = 4;

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    pub fn check_len(&self) -> Result<()> {
        if self.b().len() < ICMP_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }
    pub fn code(&self) -> u8 {
        self.b()[1]
    }
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// Bytes after the 4-byte common header.
    pub fn body(&self) -> &[u8] {
        &self.b()[ICMP_HEADER_LEN..]
    }
}

/// ICMPv6 neighbour discovery (NS 135 / NA 136) target and link-layer address options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NdRepr {
    pub target: [u8; 16],
    pub sll: [u8; 6],
    pub tll: [u8; 6],
}

impl NdRepr {
    /// Parses the body of an NS/NA message (after type/code/checksum): reserved (4),
    /// target (16), options — OVS's rules: a truncated or zero-length option ends the walk
    /// (what was found is kept); a second source (or target) link-layer address option
    /// makes the message invalid (`Err(Malformed)`).
    pub fn parse(body: &[u8]) -> Result<NdRepr> {
        if body.len() < 20 {
            return Err(Error::Truncated);
        }
        let mut nd = NdRepr::default();
        nd.target.copy_from_slice(&body[4..20]);
        let mut opts = &body[20..];
        while opts.len() >= 8 {
            let ty = opts[0];
            let len = opts[1] as usize * 8;
            if len == 0 || len > opts.len() {
                break;
            }
            if len == 8 && (ty == 1 || ty == 2) {
                let slot = if ty == 1 { &mut nd.sll } else { &mut nd.tll };
                if *slot != [0; 6] {
                    return Err(Error::Malformed);
                }
                *slot = mac(opts, 2);
            }
            opts = &opts[len..];
        }
        Ok(nd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checks_lengths() {
        let mut b = [0u8; 20];
        b[0] = 0x45;
        b[3] = 20;
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        b[3] = 40;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        b[0] = 0x44;
        b[3] = 20;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadLength
        );
    }

    #[test]
    fn ipv6_ext_walk_stops_at_later_fragment() {
        // hop-by-hop (8 bytes) -> fragment (offset 8) -> udp
        let mut p = vec![0u8; 16];
        p[0] = ipproto::FRAGMENT;
        p[8] = ipproto::UDP;
        p[10] = 0;
        p[11] = 8; // offset 1 (8 bytes)
        let e = ipv6_walk_ext(ipproto::HOPOPTS, &p).unwrap();
        assert_eq!(e.proto, ipproto::FRAGMENT);
        assert!(e.later_fragment);
        // atomic fragment (offset 0, M=0): not a fragment, walk continues to UDP
        p[11] = 0;
        let e = ipv6_walk_ext(ipproto::HOPOPTS, &p).unwrap();
        assert_eq!((e.proto, e.fragment), (ipproto::UDP, false));
        assert_eq!(
            ipv6_walk_ext(ipproto::HOPOPTS, &p[..4]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn checksum_roundtrip() {
        let mut b = [
            0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        assert_eq!(p.compute_checksum(), 0);
    }
}
