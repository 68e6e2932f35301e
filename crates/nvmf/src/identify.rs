//! The data structures the target returns: Identify Controller / Namespace /
//! active namespace list / namespace identification descriptors, and the
//! discovery log page (0x70). Byte offsets follow NVMe Base 2.0 and NVMe-oF 1.1
//! (the same layout as Linux `include/linux/nvme.h`).
//!
//! These are filled by the target from its object model; the `nvme` crate holds
//! the spec's types, this module only the target's way of filling them.

/// Identify / log page buffer sizes.
pub const IDENTIFY_LEN: usize = 4096;
pub const DISC_ENTRY_LEN: usize = 1024;
pub const DISC_HDR_LEN: usize = 1024;

/// Controller type (CNTRLTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlrType {
    Io = 1,
    Discovery = 2,
}

fn put_str(b: &mut [u8], s: &str, pad: u8) {
    b.fill(pad);
    let n = s.len().min(b.len());
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
}
fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// What Identify Controller says about a controller.
#[derive(Debug, Clone)]
pub struct CtrlrInfo<'a> {
    pub cntlid: u16,
    pub serial: &'a str,
    pub model: &'a str,
    pub firmware: &'a str,
    pub subnqn: &'a str,
    pub ctrlr_type: CtrlrType,
    /// Number of namespaces (NN: largest valid NSID).
    pub nn: u32,
    /// MDTS as a power of two of 4 KiB pages (0 = no limit).
    pub mdts: u8,
    /// Max commands outstanding (MAXCMD).
    pub maxcmd: u16,
    /// In-capsule data size on I/O queues, bytes.
    pub in_capsule: u32,
    /// Keep-alive granularity in 100 ms units (KAS).
    pub kas: u16,
    /// Async event request limit, 0's based (AERL).
    pub aerl: u8,
    pub version: u32,
}

/// Identify Controller (CNS 01h), 4096 bytes.
pub fn identify_ctrlr(c: &CtrlrInfo<'_>) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    put16(&mut b, 0, 0); // VID: none (as Linux nvmet)
    put16(&mut b, 2, 0); // SSVID
    put_str(&mut b[4..24], c.serial, b' ');
    put_str(&mut b[24..64], c.model, b' ');
    put_str(&mut b[64..72], c.firmware, b' ');
    b[72] = 6; // RAB
    b[76] = 0x3; // CMIC: multi-port, multi-controller subsystem
    b[77] = c.mdts;
    put16(&mut b, 78, c.cntlid);
    put32(&mut b, 80, c.version);
    // OAES: namespace attribute notices (bit 8) only for I/O controllers
    if c.ctrlr_type == CtrlrType::Io {
        put32(&mut b, 92, 1 << 8);
    } else {
        put32(&mut b, 92, 1 << 31); // discovery log page change notices
    }
    put32(&mut b, 96, 0); // CTRATT
    b[111] = c.ctrlr_type as u8;
    b[258] = 3; // ACL
    b[259] = c.aerl; // AERL
    b[260] = 0x3; // FRMW: slot 1 read-only, 1 slot
    b[261] = 0x4; // LPA: extended data for Get Log Page
    b[262] = 0; // ELPE (0's based)
    put16(&mut b, 320, c.kas);
    if c.ctrlr_type == CtrlrType::Io {
        b[512] = 0x66; // SQES
        b[513] = 0x44; // CQES
    }
    put16(&mut b, 514, c.maxcmd);
    put32(&mut b, 516, c.nn);
    if c.ctrlr_type == CtrlrType::Io {
        // ONCS: compare (0), DSM (2), write zeroes (3)
        put16(&mut b, 520, (1 << 0) | (1 << 2) | (1 << 3));
        b[525] = 0x1; // VWC present
        put16(&mut b, 526, 0); // AWUN
        put16(&mut b, 528, 0); // AWUPF
    }
    // SGLS: SGLs supported (no alignment), offset-based in-capsule data (bit 20)
    put32(&mut b, 536, 1 | (1 << 20));
    put_str(&mut b[768..1024], c.subnqn, 0);
    // fabrics: IOCCSZ (16-byte units: SQE + in-capsule data), IORCSZ, ICDOFF, FCATT, MSDBD
    put32(&mut b, 1792, (64 + c.in_capsule) / 16);
    put32(&mut b, 1796, 1);
    put16(&mut b, 1800, 0);
    b[1802] = 0; // dynamic controller model
    b[1803] = 1; // MSDBD
                 // power state 0: max power 0 (not reported), entry/exit latency 0
    b
}

/// What Identify Namespace says about a namespace.
#[derive(Debug, Clone, Copy)]
pub struct NsInfo {
    pub blocks: u64,
    pub block_size: u32,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
}

/// Identify Namespace (CNS 00h), 4096 bytes.
pub fn identify_ns(n: &NsInfo) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    put64(&mut b, 0, n.blocks); // NSZE
    put64(&mut b, 8, n.blocks); // NCAP
    put64(&mut b, 16, n.blocks); // NUSE
    b[24] = 0x4; // NSFEAT: deallocated or unwritten logical block error (DAE) support
    b[25] = 0; // NLBAF: one format
    b[26] = 0; // FLBAS: format 0
    b[30] = 1; // NMIC: may be attached to several controllers
    b[33] = 0x9; // DLFEAT: deallocated blocks read as zeroes, write zeroes deallocates
    b[104..120].copy_from_slice(&n.nguid);
    b[120..128].copy_from_slice(&n.eui64);
    // LBA format 0: MS 0, LBADS, RP 0 (best)
    b[130] = n.block_size.trailing_zeros() as u8;
    b
}

/// Active namespace ID list (CNS 02h): NSIDs greater than `after`, ascending.
pub fn active_ns_list(nsids: &[u32], after: u32) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let mut ids: Vec<u32> = nsids.iter().copied().filter(|&n| n > after).collect();
    ids.sort_unstable();
    for (i, id) in ids.iter().take(1024).enumerate() {
        put32(&mut b, i * 4, *id);
    }
    b
}

/// Namespace Identification Descriptor list (CNS 03h): EUI64, NGUID, UUID.
pub fn ns_id_descriptors(n: &NsInfo) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let mut off = 0;
    for (nidt, id) in [(1u8, &n.eui64[..]), (2, &n.nguid[..]), (3, &n.uuid[..])] {
        b[off] = nidt;
        b[off + 1] = id.len() as u8;
        b[off + 4..off + 4 + id.len()].copy_from_slice(id);
        off += 4 + id.len();
    }
    b
}

/// One discovery log page entry.
#[derive(Debug, Clone)]
pub struct DiscEntry {
    /// SUBTYPE: 2 = NVM subsystem, 3 = current discovery subsystem.
    pub subtype: u8,
    pub portid: u16,
    pub trsvcid: String,
    pub traddr: String,
    pub subnqn: String,
    /// IPv4 (1) or IPv6 (2).
    pub adrfam: u8,
}

/// The whole discovery log page (header + entries).
pub fn discovery_log(genctr: u64, entries: &[DiscEntry]) -> Vec<u8> {
    let mut b = vec![0u8; DISC_HDR_LEN + entries.len() * DISC_ENTRY_LEN];
    put64(&mut b, 0, genctr);
    put64(&mut b, 8, entries.len() as u64);
    put16(&mut b, 16, 0); // RECFMT
    for (i, e) in entries.iter().enumerate() {
        let o = DISC_HDR_LEN + i * DISC_ENTRY_LEN;
        let d = &mut b[o..o + DISC_ENTRY_LEN];
        d[0] = 3; // TRTYPE: TCP
        d[1] = e.adrfam;
        d[2] = e.subtype;
        // TREQ: secure channel not specified; SQ flow control disable supported (bit 2)
        d[3] = 0x4;
        put16(d, 4, e.portid);
        put16(d, 6, 0xffff); // CNTLID: dynamic
        put16(d, 8, 32); // ASQSZ
        put_str(&mut d[32..64], &e.trsvcid, b' ');
        put_str(&mut d[256..512], &e.subnqn, 0);
        put_str(&mut d[512..768], &e.traddr, b' ');
        d[768] = 0; // TSAS: SECTYPE none
    }
    b
}

/// Parses a discovery log page (for the host side).
pub fn parse_discovery_log(b: &[u8]) -> Option<(u64, Vec<DiscEntry>)> {
    let hdr = b.get(..DISC_HDR_LEN)?;
    let le64 = |s: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&s[..8]);
        u64::from_le_bytes(a)
    };
    let genctr = le64(&hdr[0..8]);
    let numrec = le64(&hdr[8..16]);
    let trim = |s: &[u8]| {
        String::from_utf8_lossy(s)
            .trim_end_matches(['\0', ' '])
            .to_string()
    };
    let mut v = Vec::new();
    for i in 0..numrec as usize {
        let o = DISC_HDR_LEN + i * DISC_ENTRY_LEN;
        let Some(d) = b.get(o..o + DISC_ENTRY_LEN) else {
            break;
        };
        v.push(DiscEntry {
            adrfam: d[1],
            subtype: d[2],
            portid: u16::from_le_bytes([d[4], d[5]]),
            trsvcid: trim(&d[32..64]),
            subnqn: trim(&d[256..512]),
            traddr: trim(&d[512..768]),
        });
    }
    Some((genctr, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_ctrlr_offsets() {
        let b = identify_ctrlr(&CtrlrInfo {
            cntlid: 7,
            serial: "SN1",
            model: "dpustack",
            firmware: "0.1",
            subnqn: "nqn.x",
            ctrlr_type: CtrlrType::Io,
            nn: 3,
            mdts: 8,
            maxcmd: 128,
            in_capsule: 8192,
            kas: 1,
            aerl: 3,
            version: 0x10300,
        });
        assert_eq!(&b[4..8], b"SN1 ");
        assert_eq!(u16::from_le_bytes([b[78], b[79]]), 7);
        assert_eq!(b[111], 1);
        assert_eq!(&b[768..773], b"nqn.x");
        assert_eq!(
            u32::from_le_bytes([b[1792], b[1793], b[1794], b[1795]]),
            516
        );
        assert_eq!(u32::from_le_bytes([b[516], b[517], b[518], b[519]]), 3);
    }

    #[test]
    fn discovery_log_roundtrip() {
        let e = DiscEntry {
            subtype: 2,
            portid: 1,
            trsvcid: "4420".into(),
            traddr: "127.0.0.1".into(),
            subnqn: "nqn.2024-01.io.dpustack:a".into(),
            adrfam: 1,
        };
        let b = discovery_log(5, &[e.clone(), e]);
        assert_eq!(b.len(), 3072);
        let (g, v) = parse_discovery_log(&b).unwrap();
        assert_eq!(g, 5);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].traddr, "127.0.0.1");
        assert_eq!(v[1].trsvcid, "4420");
        assert_eq!(v[0].subnqn, "nqn.2024-01.io.dpustack:a");
    }
}
