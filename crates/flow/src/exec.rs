//! Executes datapath actions on packet bytes (what the datapath does after a lookup):
//! header rewrites with checksum fix-up, VLAN push/pop, and outputs.

use crate::key::VLAN_CFI;
use crate::xlate::OdpAction;
use wire::ethernet::{
    ethertype, ipproto, is_vlan_tpid, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket,
};

/// What executing an action list produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Executed {
    /// (port, frame) for every output action, in order.
    pub outputs: Vec<(u32, Vec<u8>)>,
    /// Packet-ins (controller/userspace actions), counted.
    pub packet_ins: usize,
    /// The packet-ins to send (not those of a trace, `dont_send`): the frame as it
    /// was at the controller action, with the action's reason, cookie, table, max_len.
    pub to_controller: Vec<ToController>,
    /// Every `recirc(ID)`: (recirc_id, dp_hash, the packet as it was then) to look up
    /// again (each is a clone, as dpif-netdev forks a recirculation that is not the
    /// last action); dp_hash is 0 unless a `hash()` action computed it.
    pub recircs: Vec<(u32, u32, Vec<u8>)>,
}

/// A packet for the controller (OpenFlow packet-in), from a `userspace(controller)`
/// datapath action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToController {
    /// OVS's reason: 1 action, 2 invalid TTL, 3 table-miss rule (OpenFlow NO_MATCH).
    pub reason: u8,
    pub cookie: u64,
    pub table_id: u8,
    pub max_len: u16,
    pub frame: Vec<u8>,
}

/// Offset of the L3 header and its EtherType (after at most two VLAN tags).
pub(crate) fn l3(pkt: &[u8]) -> Option<(usize, u16)> {
    if pkt.len() < 14 {
        return None;
    }
    let mut off = 12;
    let mut t = u16::from_be_bytes([pkt[off], pkt[off + 1]]);
    while is_vlan_tpid(t) && pkt.len() >= off + 6 {
        off += 4;
        t = u16::from_be_bytes([pkt[off], pkt[off + 1]]);
    }
    Some((off + 2, t))
}

fn put_mac(pkt: &mut [u8], at: usize, v: u64, m: u64) {
    for i in 0..6 {
        let sh = 8 * (5 - i);
        let mb = (m >> sh) as u8;
        let vb = (v >> sh) as u8;
        pkt[at + i] = (pkt[at + i] & !mb) | (vb & mb);
    }
}

/// Recomputes the TCP/UDP checksum of an IPv4/IPv6 packet at `l3off` (full recompute).
fn fix_l4_checksum(pkt: &mut [u8], l3off: usize, et: u16) {
    let (proto, l4off, l4len, pseudo): (u8, usize, usize, Vec<u8>) = match et {
        ethertype::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&pkt[l3off..]) else {
                return;
            };
            if ip.is_fragment() {
                return;
            }
            let hl = ip.header_len();
            let tl = ip.total_len() as usize;
            let mut ps = Vec::with_capacity(12);
            ps.extend_from_slice(&ip.src().to_be_bytes());
            ps.extend_from_slice(&ip.dst().to_be_bytes());
            ps.extend_from_slice(&[0, ip.protocol()]);
            ps.extend_from_slice(&((tl - hl) as u16).to_be_bytes());
            (ip.protocol(), l3off + hl, tl - hl, ps)
        }
        ethertype::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&pkt[l3off..]) else {
                return;
            };
            // Only the simple case (no extension headers) is fixed up here.
            let pl = ip.payload_len() as usize;
            let mut ps = Vec::with_capacity(40);
            ps.extend_from_slice(&ip.src());
            ps.extend_from_slice(&ip.dst());
            ps.extend_from_slice(&(pl as u32).to_be_bytes());
            ps.extend_from_slice(&[0, 0, 0, ip.next_header()]);
            (ip.next_header(), l3off + 40, pl, ps)
        }
        _ => return,
    };
    let csum_at = match proto {
        ipproto::TCP if TcpPacket::new_checked(&pkt[l4off..l4off + l4len]).is_ok() => l4off + 16,
        ipproto::UDP if UdpPacket::new_checked(&pkt[l4off..l4off + l4len]).is_ok() => {
            if et == ethertype::IPV4 && pkt[l4off + 6] == 0 && pkt[l4off + 7] == 0 {
                return; // IPv4 UDP without checksum stays without.
            }
            l4off + 6
        }
        _ => return,
    };
    pkt[csum_at] = 0;
    pkt[csum_at + 1] = 0;
    let mut buf = pseudo;
    buf.extend_from_slice(&pkt[l4off..l4off + l4len]);
    let mut c = wire::ethernet::checksum(&buf);
    if c == 0 && proto == ipproto::UDP {
        c = 0xffff;
    }
    pkt[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Offset of the L4 header when the packet's (IPv4 protocol / IPv6 next header) is
/// `proto` (IPv6: no extension headers).
fn l4_offset(pkt: &[u8], off: usize, et: u16, proto: u8) -> Option<usize> {
    match et {
        ethertype::IPV4 => match Ipv4Packet::new_checked(&pkt[off..]) {
            Ok(ip) if ip.protocol() == proto && !ip.is_fragment() => Some(off + ip.header_len()),
            _ => None,
        },
        ethertype::IPV6 => match Ipv6Packet::new_checked(&pkt[off..]) {
            Ok(ip) if ip.next_header() == proto => Some(off + 40),
            _ => None,
        },
        _ => None,
    }
}

/// Recomputes the ICMP (IPv4: over the message) or ICMPv6 (with the pseudo-header)
/// checksum of the message at `l4`.
fn fix_icmp_checksum(pkt: &mut [u8], l3off: usize, et: u16, l4: usize) {
    let end = match et {
        ethertype::IPV4 => match Ipv4Packet::new_checked(&pkt[l3off..]) {
            Ok(ip) => l3off + ip.total_len() as usize,
            Err(_) => return,
        },
        _ => match Ipv6Packet::new_checked(&pkt[l3off..]) {
            Ok(ip) => l3off + 40 + ip.payload_len() as usize,
            Err(_) => return,
        },
    };
    if end > pkt.len() || end < l4 + 4 {
        return;
    }
    pkt[l4 + 2] = 0;
    pkt[l4 + 3] = 0;
    let mut buf = Vec::with_capacity(end - l4 + 40);
    if et == ethertype::IPV6 {
        buf.extend_from_slice(&pkt[l3off + 8..l3off + 40]);
        buf.extend_from_slice(&((end - l4) as u32).to_be_bytes());
        buf.extend_from_slice(&[0, 0, 0, ipproto::ICMPV6]);
    }
    buf.extend_from_slice(&pkt[l4..end]);
    let c = wire::ethernet::checksum(&buf);
    pkt[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
}

/// CRC32c (Castagnoli, reflected), as SCTP uses; returns the value as the checksum
/// field's 4 bytes (OVS `crc32c`: `~crc` stored in host = little-endian order).
fn crc32c(data: &[u8]) -> [u8; 4] {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    (!crc).to_le_bytes()
}

/// OVS `packet_set_sctp_port`: new ports, and the CRC32c updated so that a wrong
/// checksum stays exactly as wrong (old ^ correct(old) ^ correct(new)).
fn set_sctp_ports(pkt: &mut [u8], l3off: usize, et: u16, l4: usize, sp: u16, dp: u16) {
    let end = match et {
        ethertype::IPV4 => match Ipv4Packet::new_checked(&pkt[l3off..]) {
            Ok(ip) => l3off + ip.total_len() as usize,
            Err(_) => return,
        },
        _ => match Ipv6Packet::new_checked(&pkt[l3off..]) {
            Ok(ip) => l3off + 40 + ip.payload_len() as usize,
            Err(_) => return,
        },
    };
    if end > pkt.len() || end < l4 + 12 {
        return;
    }
    let old: [u8; 4] = pkt[l4 + 8..l4 + 12].try_into().expect("4 bytes");
    pkt[l4 + 8..l4 + 12].fill(0);
    let old_ok = crc32c(&pkt[l4..end]);
    pkt[l4..l4 + 2].copy_from_slice(&sp.to_be_bytes());
    pkt[l4 + 2..l4 + 4].copy_from_slice(&dp.to_be_bytes());
    let new_ok = crc32c(&pkt[l4..end]);
    for i in 0..4 {
        pkt[l4 + 8 + i] = old[i] ^ old_ok[i] ^ new_ok[i];
    }
}

/// Recomputes the IPv4 header checksum and the TCP/UDP checksum of a frame (what tc's
/// `csum iph and tcp and udp` does after a pedit).
pub fn fix_checksums(pkt: &mut [u8]) {
    let Some((off, et)) = l3(pkt) else { return };
    if et == ethertype::IPV4 {
        if let Ok(mut ip) = Ipv4Packet::new_checked(&mut pkt[off..]) {
            ip.fill_checksum();
        } else {
            return;
        }
    }
    fix_l4_checksum(pkt, off, et);
}

/// Applies `actions` to `pkt` (modified in place), collecting outputs.
pub fn execute(actions: &[OdpAction], pkt: &mut Vec<u8>) -> Executed {
    let mut ex = Executed::default();
    let mut dp_hash = 0u32;
    for a in actions {
        match *a {
            OdpAction::Output(p) => ex.outputs.push((p, pkt.clone())),
            OdpAction::HashSymL4(basis) => {
                dp_hash = crate::group::hash_sym_l4(&crate::FlowKey::from_packet(0, pkt), basis);
            }
            OdpAction::Recirc(id) => ex.recircs.push((id, dp_hash, pkt.clone())),
            OdpAction::Controller {
                reason,
                dont_send,
                cookie,
                max_len,
                table_id,
                ..
            } => {
                ex.packet_ins += 1;
                if !dont_send {
                    ex.to_controller.push(ToController {
                        reason,
                        cookie,
                        table_id,
                        max_len,
                        frame: pkt.clone(),
                    });
                }
            }
            OdpAction::PushVlan { tpid, tci } => {
                if pkt.len() >= 12 {
                    // The CFI bit is OVS's "tag present" marker, not sent (eth_push_vlan).
                    let wire_tci = tci & !VLAN_CFI;
                    let tag = [
                        (tpid >> 8) as u8,
                        tpid as u8,
                        (wire_tci >> 8) as u8,
                        wire_tci as u8,
                    ];
                    pkt.splice(12..12, tag);
                }
            }
            OdpAction::PopVlan => {
                if pkt.len() >= 18 && is_vlan_tpid(u16::from_be_bytes([pkt[12], pkt[13]])) {
                    pkt.drain(12..16);
                }
            }
            OdpAction::SetEth { src, dst } => {
                if pkt.len() >= 14 {
                    put_mac(pkt, 0, dst.0, dst.1);
                    put_mac(pkt, 6, src.0, src.1);
                }
            }
            OdpAction::SetIpv4 { src, dst, tos, ttl } => {
                let Some((off, et)) = l3(pkt) else { continue };
                if et != ethertype::IPV4 {
                    continue;
                }
                let addr_changed = src.1 != 0 || dst.1 != 0;
                if let Ok(mut ip) = Ipv4Packet::new_checked(&mut pkt[off..]) {
                    let s = (ip.src() & !src.1) | (src.0 & src.1);
                    let d = (ip.dst() & !dst.1) | (dst.0 & dst.1);
                    let t = (ip.tos() & !tos.1) | (tos.0 & tos.1);
                    let l = (ip.ttl() & !ttl.1) | (ttl.0 & ttl.1);
                    ip.set_src(s);
                    ip.set_dst(d);
                    ip.set_tos(t);
                    ip.set_ttl(l);
                    ip.fill_checksum();
                } else {
                    continue;
                }
                if addr_changed {
                    fix_l4_checksum(pkt, off, et);
                }
            }
            OdpAction::SetIpv6 {
                src,
                dst,
                label,
                tclass,
                hlimit,
            } => {
                let Some((off, et)) = l3(pkt) else { continue };
                if et != ethertype::IPV6 {
                    continue;
                }
                if let Ok(mut ip) = Ipv6Packet::new_checked(&mut pkt[off..]) {
                    let s = (u128::from_be_bytes(ip.src()) & !src.1) | (src.0 & src.1);
                    let d = (u128::from_be_bytes(ip.dst()) & !dst.1) | (dst.0 & dst.1);
                    ip.set_src(s.to_be_bytes());
                    ip.set_dst(d.to_be_bytes());
                    let tc = (ip.traffic_class() & !tclass.1) | (tclass.0 & tclass.1);
                    ip.set_traffic_class(tc);
                    let hl = (ip.hop_limit() & !hlimit.1) | (hlimit.0 & hlimit.1);
                    ip.set_hop_limit(hl);
                } else {
                    continue;
                }
                if label.1 != 0 {
                    // The flow label: the low 20 bits of the first word.
                    let w = &mut pkt[off..off + 4];
                    let old = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    let m = label.1 & 0xfffff;
                    w.copy_from_slice(&((old & !m) | (label.0 & m)).to_be_bytes());
                }
                if src.1 != 0 || dst.1 != 0 {
                    fix_l4_checksum(pkt, off, et);
                }
            }
            OdpAction::SetArp {
                sip,
                tip,
                op,
                sha,
                tha,
            } => {
                let Some((off, et)) = l3(pkt) else { continue };
                if et != ethertype::ARP || pkt.len() < off + 28 {
                    continue;
                }
                // Ethernet/IPv4 ARP: op at 6, sha 8, spa 14, tha 18, tpa 24.
                let a = &mut pkt[off..off + 28];
                let o = u16::from_be_bytes([a[6], a[7]]);
                a[6..8].copy_from_slice(&((o & !op.1) | (op.0 & op.1)).to_be_bytes());
                put_mac(a, 8, sha.0, sha.1);
                put_mac(a, 18, tha.0, tha.1);
                for (at, (v, m)) in [(14usize, sip), (24, tip)] {
                    let old = u32::from_be_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]);
                    a[at..at + 4].copy_from_slice(&((old & !m) | (v & m)).to_be_bytes());
                }
            }
            OdpAction::SetIcmp {
                v6,
                icmp_type,
                code,
            } => {
                let Some((off, et)) = l3(pkt) else { continue };
                let Some(l4) = l4_offset(
                    pkt,
                    off,
                    et,
                    if v6 { ipproto::ICMPV6 } else { ipproto::ICMP },
                ) else {
                    continue;
                };
                if pkt.len() < l4 + 4 {
                    continue;
                }
                pkt[l4] = icmp_type;
                pkt[l4 + 1] = code;
                fix_icmp_checksum(pkt, off, et, l4);
            }
            OdpAction::SetNd { target, sll, tll } => {
                let Some((off, et)) = l3(pkt) else { continue };
                let Some(l4) = l4_offset(pkt, off, ethertype::IPV6, ipproto::ICMPV6) else {
                    continue;
                };
                if et != ethertype::IPV6 || pkt.len() < l4 + 24 {
                    continue;
                }
                let ty = pkt[l4];
                let t = &mut pkt[l4 + 8..l4 + 24];
                let old = u128::from_be_bytes(t.try_into().expect("16 bytes"));
                t.copy_from_slice(&((old & !target.1) | (target.0 & target.1)).to_be_bytes());
                // The link-layer address option: source (1) in a solicitation, target (2)
                // in an advertisement (OVS packet_set_nd).
                let (want, (v, m)) = if ty == 135 { (1u8, sll) } else { (2u8, tll) };
                let mut o = l4 + 24;
                while pkt.len() >= o + 8 {
                    let (ot, ol) = (pkt[o], pkt[o + 1] as usize * 8);
                    if ol == 0 || pkt.len() < o + ol {
                        break;
                    }
                    if ot == want && ol == 8 && m != 0 {
                        put_mac(pkt, o + 2, v, m);
                    }
                    o += ol;
                }
                fix_icmp_checksum(pkt, off, et, l4);
            }
            OdpAction::SetL4 { proto, src, dst } => {
                let Some((off, et)) = l3(pkt) else { continue };
                let l4off = match et {
                    ethertype::IPV4 => match Ipv4Packet::new_checked(&pkt[off..]) {
                        Ok(ip) if ip.protocol() == proto => off + ip.header_len(),
                        _ => continue,
                    },
                    ethertype::IPV6 => match Ipv6Packet::new_checked(&pkt[off..]) {
                        Ok(ip) if ip.next_header() == proto => off + 40,
                        _ => continue,
                    },
                    _ => continue,
                };
                if pkt.len() < l4off + 4 {
                    continue;
                }
                let sp = u16::from_be_bytes([pkt[l4off], pkt[l4off + 1]]);
                let dp = u16::from_be_bytes([pkt[l4off + 2], pkt[l4off + 3]]);
                let sp = (sp & !src.1) | (src.0 & src.1);
                let dp = (dp & !dst.1) | (dst.0 & dst.1);
                if proto == ipproto::SCTP {
                    set_sctp_ports(pkt, off, et, l4off, sp, dp);
                    continue;
                }
                pkt[l4off..l4off + 2].copy_from_slice(&sp.to_be_bytes());
                pkt[l4off + 2..l4off + 4].copy_from_slice(&dp.to_be_bytes());
                fix_l4_checksum(pkt, off, et);
            }
        }
    }
    ex
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_flows, FlowKey, FlowTable};

    fn udp_frame() -> Vec<u8> {
        let mut p = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, // eth
            0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 2, 3, // ipv4
            0x03, 0xe8, 0x07, 0xd0, 0, 12, 0, 0, // udp
            1, 2, 3, 4,
        ];
        let mut ip = Ipv4Packet::new_unchecked(&mut p[14..34]);
        ip.fill_checksum();
        fix_l4_checksum(&mut p, 14, ethertype::IPV4);
        p
    }

    #[test]
    fn crc32c_known_value() {
        // RFC 3720 B.4: 32 bytes of zeros -> 0x8a9136aa.
        assert_eq!(u32::from_le_bytes(crc32c(&[0u8; 32])), 0x8a91_36aa);
        assert_eq!(u32::from_le_bytes(crc32c(b"123456789")), 0xe306_9283);
    }

    #[test]
    fn executes_sample_rewrite_rule() {
        let t = FlowTable::from_rules(
            parse_flows("priority=120,ip,nw_dst=10.0.2.0/24,actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,mod_vlan_vid:7,output:3\n").unwrap(),
        );
        let orig = udp_frame();
        let mut p = orig.clone();
        let k = FlowKey::from_packet(2, &p);
        let x = t.xlate(&k);
        let ex = execute(&x.actions, &mut p);
        assert_eq!(ex.outputs.len(), 1);
        let (port, out) = &ex.outputs[0];
        assert_eq!(*port, 3);
        let k2 = FlowKey::from_packet(3, out);
        assert_eq!(k2.get(crate::key::f::DL_DST), 0xaabbccddeeff);
        assert_eq!(k2.get(crate::key::f::NW_TTL), 63);
        assert_eq!(k2.vlan0_tci() & 0x0fff, 7);
        // IPv4 header checksum is valid after the rewrite.
        let ip = Ipv4Packet::new_checked(&out[18..]).unwrap();
        assert_eq!(ip.compute_checksum(), 0);
        // Pop it again.
        let mut o = out.clone();
        execute(&[OdpAction::PopVlan], &mut o);
        assert_eq!(o.len(), orig.len());
        assert_eq!(FlowKey::from_packet(3, &o).vlan0_tci(), 0);
    }
}
