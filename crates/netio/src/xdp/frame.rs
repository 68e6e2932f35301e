//! Ethernet + IPv4 + UDP framing for the AF_XDP path, through `wire`'s views.
//!
//! Sent frames look like the UDP-socket path's datagrams (so a RoCEv2 ICRC
//! computed for one is right for the other): IPv4 without options, ID 0, DF, TTL
//! 64, UDP checksum 0 (allowed over IPv4; RoCEv2 relies on the ICRC).

use std::net::Ipv4Addr;
use wire::ethernet::{
    ethertype, ipproto, EthernetFrame, Ipv4Packet, UdpPacket, ETHERNET_HEADER_LEN,
    IPV4_MIN_HEADER_LEN, UDP_HEADER_LEN,
};

/// Bytes of headers in front of the UDP payload.
pub const HEADERS_LEN: usize = ETHERNET_HEADER_LEN + IPV4_MIN_HEADER_LEN + UDP_HEADER_LEN;

/// The addresses of one direction of a UDP flow at L2-L4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFlow {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    /// IPv4 TOS byte (DSCP << 2 | ECN).
    pub tos: u8,
}

impl UdpFlow {
    /// The flow back (addresses and ports swapped).
    pub fn reversed(&self) -> UdpFlow {
        UdpFlow {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            tos: self.tos,
        }
    }

    /// Writes the headers for a `payload_len`-byte payload into `buf[..HEADERS_LEN]`
    /// (the payload itself goes at `buf[HEADERS_LEN..]`). Returns the frame length,
    /// or None if `buf` cannot hold it or it exceeds the IPv4 total length.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Option<usize> {
        let total = HEADERS_LEN.checked_add(payload_len)?;
        let ip_len = u16::try_from(total - ETHERNET_HEADER_LEN).ok()?;
        let udp_len = ip_len - IPV4_MIN_HEADER_LEN as u16;
        if buf.len() < total {
            return None;
        }
        let mut eth = EthernetFrame::new_unchecked(&mut buf[..ETHERNET_HEADER_LEN]);
        eth.set_dst(self.dst_mac);
        eth.set_src(self.src_mac);
        eth.set_ethertype(ethertype::IPV4);

        let ip_buf = &mut buf[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + IPV4_MIN_HEADER_LEN];
        // wire's Ipv4Packet has no setters for version/IHL, total length, ID,
        // flags/fragment offset and protocol (the flow datapath never writes them):
        // those bytes are written here, the rest through the view.
        ip_buf[0] = 0x45;
        ip_buf[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip_buf[4..6].copy_from_slice(&[0, 0]); // ID 0
        ip_buf[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
        ip_buf[9] = ipproto::UDP;
        let mut ip = Ipv4Packet::new_unchecked(ip_buf);
        ip.set_tos(self.tos);
        ip.set_ttl(64);
        ip.set_src(u32::from(self.src_ip));
        ip.set_dst(u32::from(self.dst_ip));
        ip.fill_checksum();

        let udp_buf = &mut buf[ETHERNET_HEADER_LEN + IPV4_MIN_HEADER_LEN..HEADERS_LEN];
        // No length/checksum setters in wire's UdpPacket either.
        udp_buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp_buf[6..8].copy_from_slice(&[0, 0]);
        let mut udp = UdpPacket::new_unchecked(udp_buf);
        udp.set_src_port(self.src_port);
        udp.set_dst_port(self.dst_port);
        Some(total)
    }
}

/// A received UDP-in-IPv4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrame<'a> {
    pub src_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    /// The IPv4 header as received (ID, TOS, TTL: what an ICRC check needs).
    pub ip_header: &'a [u8],
    pub payload: &'a [u8],
}

/// Parses an Ethernet/IPv4/UDP frame (IP options allowed, fragments refused, IP
/// checksum checked, UDP length bounded by the IP total length).
pub fn parse(frame: &[u8]) -> wire::Result<UdpFrame<'_>> {
    let eth = EthernetFrame::new_checked(frame)?;
    if eth.ethertype() != ethertype::IPV4 {
        return Err(wire::Error::Malformed);
    }
    let src_mac = eth.src();
    let l3 = &frame[ETHERNET_HEADER_LEN..];
    let ip = Ipv4Packet::new_checked(l3)?;
    if ip.version() != 4 {
        return Err(wire::Error::BadVersion);
    }
    if ip.is_fragment() || ip.protocol() != ipproto::UDP {
        return Err(wire::Error::Malformed);
    }
    if ip.compute_checksum() != 0 {
        return Err(wire::Error::BadChecksum);
    }
    let hl = ip.header_len();
    let l4 = &l3[hl..ip.total_len() as usize];
    let udp = UdpPacket::new_checked(l4)?;
    let ulen = udp.len() as usize;
    if ulen < UDP_HEADER_LEN || ulen > l4.len() {
        return Err(wire::Error::BadLength);
    }
    Ok(UdpFrame {
        src_mac,
        src_ip: Ipv4Addr::from(ip.src()),
        dst_ip: Ipv4Addr::from(ip.dst()),
        src_port: udp.src_port(),
        dst_port: udp.dst_port(),
        ip_header: &l3[..hl],
        payload: &l4[UDP_HEADER_LEN..ulen],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> UdpFlow {
        UdpFlow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 77, 0, 1),
            dst_ip: Ipv4Addr::new(10, 77, 0, 2),
            src_port: 50000,
            dst_port: 4791,
            tos: 0,
        }
    }

    #[test]
    fn emit_then_parse() {
        let mut buf = [0xaau8; 128];
        let n = flow().emit_headers(&mut buf, 3).unwrap();
        assert_eq!(n, 45);
        buf[HEADERS_LEN..n].copy_from_slice(b"abc");
        let f = parse(&buf[..n]).unwrap();
        assert_eq!(f.src_mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!((f.src_ip, f.dst_ip), (flow().src_ip, flow().dst_ip));
        assert_eq!((f.src_port, f.dst_port), (50000, 4791));
        assert_eq!(f.payload, b"abc");
        // ID 0, DF, TTL 64, UDP checksum 0: the UDP-socket path's datagram shape.
        let ip = Ipv4Packet::new_unchecked(f.ip_header);
        assert_eq!((ip.ident(), ip.frag_field(), ip.ttl()), (0, 0x4000, 64));
        assert_eq!(ip.total_len(), 31);
        assert_eq!(&buf[40..42], &[0, 0]);
        // Known bytes: dst MAC, src MAC, EtherType, version/IHL.
        assert_eq!(&buf[..14], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]);
        assert_eq!(buf[14], 0x45);
        // Trailing Ethernet padding is ignored (IP total length rules).
        let mut padded = buf[..n].to_vec();
        padded.resize(60, 0);
        assert_eq!(parse(&padded).unwrap().payload, b"abc");
    }

    #[test]
    fn reversed_flow_round_trips() {
        let r = flow().reversed();
        let mut buf = [0u8; 64];
        let n = r.emit_headers(&mut buf, 0).unwrap();
        let f = parse(&buf[..n]).unwrap();
        assert_eq!((f.src_ip, f.dst_port), (flow().dst_ip, 50000));
        assert!(f.payload.is_empty());
    }

    #[test]
    fn emit_refuses_small_buffers() {
        let mut buf = [0u8; 44];
        assert_eq!(flow().emit_headers(&mut buf, 3), None);
        assert_eq!(flow().emit_headers(&mut buf, 2), Some(44));
        assert_eq!(flow().emit_headers(&mut [0u8; 70000], 65535), None);
    }

    #[test]
    fn parse_rejects_bad_frames() {
        let mut buf = [0u8; 64];
        let n = flow().emit_headers(&mut buf, 2).unwrap();
        assert!(parse(&buf[..n]).is_ok());
        for cut in [0, 13, 20, 33, 41] {
            assert!(parse(&buf[..cut]).is_err(), "cut at {cut}");
        }
        let mut b = buf;
        b[12] = 0x86; // not IPv4
        assert_eq!(parse(&b[..n]), Err(wire::Error::Malformed));
        let mut b = buf;
        b[23] = 6; // TCP
        assert!(parse(&b[..n]).is_err());
        let mut b = buf;
        b[26] ^= 1; // source address changed: checksum no longer matches
        assert_eq!(parse(&b[..n]), Err(wire::Error::BadChecksum));
        let mut b = buf;
        b[38..40].copy_from_slice(&100u16.to_be_bytes()); // UDP length too long
        assert_eq!(parse(&b[..n]), Err(wire::Error::BadLength));
        let mut b = buf;
        b[20] = 0x20; // more fragments
        let mut ip = Ipv4Packet::new_unchecked(&mut b[14..34]);
        ip.fill_checksum();
        assert_eq!(parse(&b[..n]), Err(wire::Error::Malformed));
    }
}
