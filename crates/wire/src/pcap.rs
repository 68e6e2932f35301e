//! Classic pcap capture files (the format tshark/tcpdump read): one writer and
//! one reader for the whole project — `sim` captures simulated traffic as raw IP,
//! `flow` replays and records Ethernet frames on pcap ports.

use std::io::{self, Read, Write};
use std::time::Duration;

/// The link type in the file header: what each record starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET: records are Ethernet frames.
    Ethernet,
    /// LINKTYPE_RAW: records are IPv4/IPv6 packets without L2.
    Raw,
}

impl LinkType {
    pub fn code(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
        }
    }
}

/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of each record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// Writes a little-endian, microsecond-resolution pcap file.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header (snaplen 65535).
    pub fn new(mut out: W, link: LinkType) -> io::Result<Self> {
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&0xa1b2c3d4u32.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone 0, sigfigs 0
        h[16..20].copy_from_slice(&65535u32.to_le_bytes());
        h[20..24].copy_from_slice(&link.code().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Appends one record stamped `t` (since any epoch the caller chooses).
    pub fn write(&mut self, t: Duration, data: &[u8]) -> io::Result<()> {
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&(t.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&t.subsec_micros().to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(data.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads every record of a classic pcap file (either byte order, µs or ns
/// timestamps); a truncated last record is ignored, as tcpdump does.
pub fn read_pcap(mut r: impl Read) -> io::Result<Vec<Vec<u8>>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("pcap: {what}"));
    let mut all = Vec::new();
    r.read_to_end(&mut all)?;
    let magic = all.get(0..4).ok_or_else(|| bad("short header"))?;
    let magic = u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]);
    let le = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => true,
        0xd4c3b2a1 | 0x4d3cb2a1 => false,
        _ => return Err(bad("bad magic")),
    };
    if all.len() < FILE_HEADER_LEN {
        return Err(bad("short header"));
    }
    let mut off = FILE_HEADER_LEN;
    let mut out = Vec::new();
    while let Some(h) = all.get(off..off + RECORD_HEADER_LEN) {
        let b = [h[8], h[9], h[10], h[11]];
        let caplen = if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        } as usize;
        off += RECORD_HEADER_LEN;
        match all.get(off..off.saturating_add(caplen)) {
            Some(rec) => out.push(rec.to_vec()),
            None => break,
        }
        off += caplen;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_link_types() {
        for link in [LinkType::Ethernet, LinkType::Raw] {
            let mut w = PcapWriter::new(Vec::new(), link).unwrap();
            w.write(Duration::from_micros(1), &[1, 2, 3]).unwrap();
            w.write(Duration::from_micros(2_000_001), &[4; 60]).unwrap();
            let buf = w.into_inner();
            assert_eq!(
                u32::from_le_bytes(buf[20..24].try_into().unwrap()),
                link.code()
            );
            // second record: 2 s + 1 µs
            let r2 = FILE_HEADER_LEN + RECORD_HEADER_LEN + 3;
            assert_eq!(u32::from_le_bytes(buf[r2..r2 + 4].try_into().unwrap()), 2);
            assert_eq!(
                u32::from_le_bytes(buf[r2 + 4..r2 + 8].try_into().unwrap()),
                1
            );
            assert_eq!(
                read_pcap(&buf[..]).unwrap(),
                vec![vec![1, 2, 3], vec![4; 60]]
            );
        }
    }

    #[test]
    fn bad_and_truncated_input() {
        assert!(read_pcap(&[0u8; 3][..]).is_err());
        assert!(read_pcap(&[0u8; 24][..]).is_err());
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        w.write(Duration::ZERO, &[9; 10]).unwrap();
        let mut buf = w.into_inner();
        buf.truncate(buf.len() - 1);
        assert!(read_pcap(&buf[..]).unwrap().is_empty());
    }
}
