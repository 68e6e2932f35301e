//! The RoCEv2 invariant CRC, exactly as Linux rdma_rxe computes it (IBA Annex
//! A17): CRC-32 (the zlib/IEEE polynomial, reflected, init and final xor all ones)
//! over 8 bytes of 0xFF (the masked LRH), the IPv4 header with TOS, TTL and
//! header checksum set to all ones, the UDP header with the checksum set to all
//! ones, the BTH with byte 4 (resv8a) set to 0xFF, then everything after the BTH
//! up to (not including) the ICRC. It is appended little-endian.
//!
//! The IPv4 Identification and flags/fragment fields are covered; a sender must
//! know the ID its kernel will put in the header (0 for a DF datagram sent with
//! `sendto` on an unconnected socket; `i` for the i-th segment of a UDP GSO send).

use super::headers::BTH_LEN;
use super::ICRC_LEN;
use crate::{Error, Result};

/// The IPv4/UDP fields the ICRC covers (what a RoCE endpoint must know about the
/// datagram beyond the RoCE bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Pseudo {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// IPv4 Identification.
    pub id: u16,
    /// IPv4 flags + fragment offset (0x4000 = DF).
    pub frag: u16,
    pub sport: u16,
    pub dport: u16,
}

impl Ipv4Pseudo {
    /// The usual case: DF set, ID 0.
    pub fn df(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Ipv4Pseudo {
        Ipv4Pseudo {
            src,
            dst,
            id: 0,
            frag: 0x4000,
            sport,
            dport,
        }
    }
}

/// ICRC of a RoCEv2-over-IPv4 packet. `roce` is the UDP payload from the BTH up
/// to and including the 4 ICRC bytes (their content is ignored).
pub fn icrc_ipv4(ip: &Ipv4Pseudo, roce: &[u8]) -> Result<u32> {
    if roce.len() < BTH_LEN + ICRC_LEN || roce.len() > 65535 - 28 {
        return Err(Error::Truncated);
    }
    let udp_len = (8 + roce.len()) as u16;
    let tot_len = 20 + udp_len;
    let mut hdr = [0u8; 8 + 20 + 8 + BTH_LEN];
    hdr[..8].fill(0xff);
    let iph = &mut hdr[8..28];
    iph[0] = 0x45;
    iph[1] = 0xff; // TOS masked
    iph[2..4].copy_from_slice(&tot_len.to_be_bytes());
    iph[4..6].copy_from_slice(&ip.id.to_be_bytes());
    iph[6..8].copy_from_slice(&ip.frag.to_be_bytes());
    iph[8] = 0xff; // TTL masked
    iph[9] = 17;
    iph[10] = 0xff; // checksum masked
    iph[11] = 0xff;
    iph[12..16].copy_from_slice(&ip.src);
    iph[16..20].copy_from_slice(&ip.dst);
    let udp = &mut hdr[28..36];
    udp[0..2].copy_from_slice(&ip.sport.to_be_bytes());
    udp[2..4].copy_from_slice(&ip.dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6] = 0xff;
    udp[7] = 0xff;
    hdr[36..].copy_from_slice(&roce[..BTH_LEN]);
    hdr[36 + 4] = 0xff; // BTH resv8a masked
    let mut h = crc32fast::Hasher::new();
    h.update(&hdr);
    h.update(&roce[BTH_LEN..roce.len() - ICRC_LEN]);
    Ok(h.finalize())
}

/// Writes the ICRC into the last 4 bytes of `roce`.
pub fn fill_icrc_ipv4(ip: &Ipv4Pseudo, roce: &mut [u8]) -> Result<()> {
    let c = icrc_ipv4(ip, roce)?;
    let n = roce.len();
    roce[n - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    Ok(())
}

/// Checks the ICRC in the last 4 bytes of `roce`.
pub fn check_icrc_ipv4(ip: &Ipv4Pseudo, roce: &[u8]) -> Result<()> {
    let c = icrc_ipv4(ip, roce)?;
    let n = roce.len();
    if roce[n - ICRC_LEN..] == c.to_le_bytes() {
        Ok(())
    } else {
        Err(Error::BadIcrc)
    }
}
