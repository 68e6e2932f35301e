//! Accessors of the Ethernet/IP/UDP views and of the MAD header that wire's own tests
//! did not read back (issue 21: mutants missed in the round-robin sample 1/50 of wire,
//! docs/mutants.md). Expected values are written out from the specs, not taken from
//! the code under test.

use wire::ethernet::{ethertype, is_vlan_tpid, Ipv6Packet, UdpPacket, IPV6_HEADER_LEN};
use wire::mad::{Mad, MAD_LEN};

/// 802.1Q (0x8100) and 802.1ad (0x88a8) are VLAN TPIDs; other EtherTypes are not.
#[test]
fn vlan_tpids() {
    assert!(is_vlan_tpid(0x8100));
    assert!(is_vlan_tpid(0x88a8));
    assert!(is_vlan_tpid(ethertype::VLAN) && is_vlan_tpid(ethertype::QINQ));
    for t in [0x0800, 0x86dd, 0x0806, 0x9100, 0x8847, 0x0000, 0xffff] {
        assert!(!is_vlan_tpid(t), "{t:#06x} is not a VLAN TPID");
    }
}

/// An IPv6 payload is exactly the payload-length bytes after the 40-byte header, even
/// when the buffer holds more (Ethernet padding, a trailer).
#[test]
fn ipv6_payload_is_the_payload_length_bytes() {
    let mut b = [0u8; IPV6_HEADER_LEN + 12];
    b[0] = 0x60; // version 6
    b[4..6].copy_from_slice(&5u16.to_be_bytes()); // payload length 5
    b[6] = 17; // UDP
    b[IPV6_HEADER_LEN..IPV6_HEADER_LEN + 5].copy_from_slice(b"hello");
    b[IPV6_HEADER_LEN + 5..].fill(0xee); // not payload
    let p = Ipv6Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.payload_len(), 5);
    assert_eq!(p.payload(), b"hello");
    // an empty payload is empty, not one byte
    let mut e = [0u8; IPV6_HEADER_LEN + 4];
    e[0] = 0x60;
    let p = Ipv6Packet::new_checked(&e[..]).unwrap();
    assert_eq!(p.payload(), b"");
}

/// UDP `is_empty`: the length field covers only the 8-byte header.
#[test]
fn udp_is_empty_from_the_length_field() {
    let mut h = [0u8; 8];
    h[4..6].copy_from_slice(&8u16.to_be_bytes());
    assert!(UdpPacket::new_checked(&h[..]).unwrap().is_empty());
    h[4..6].copy_from_slice(&9u16.to_be_bytes());
    let u = UdpPacket::new_checked(&h[..]).unwrap();
    assert!(!u.is_empty());
    assert_eq!(u.len(), 9);
}

/// The MAD class-specific field is bytes 6..8 of the common header, big-endian
/// (IBA 13.4.3), and setting it leaves the neighbouring status and TID alone.
#[test]
fn mad_class_specific_round_trips_at_bytes_6_7() {
    let mut b = vec![0u8; MAD_LEN];
    let mut m = Mad::new_checked(&mut b[..]).unwrap();
    m.set_status(0x1234);
    m.set_tid(0x0102_0304_0506_0708);
    m.set_class_specific(0xbeef);
    assert_eq!(m.class_specific(), 0xbeef);
    assert_eq!(m.status(), 0x1234);
    assert_eq!(m.tid(), 0x0102_0304_0506_0708);
    assert_eq!(&b[4..10], &[0x12, 0x34, 0xbe, 0xef, 0x01, 0x02]);
}
