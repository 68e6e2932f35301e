//! `tests/data/admin_pages.golden` is a **regression guard**: it was recorded from the
//! target itself (`ctrlr.rs`'s `golden_identify_and_log_pages` compares the target's
//! pages with it, and `NVMF_BLESS=1` re-records it), so on its own it proves only that
//! the pages did not change. This test checks the recorded pages' fields against the
//! NVMe specifications independently, by offset, from the set-up that test uses
//! (subsystem `nqn.2024-01.io.dpustack:golden`, serial `SN0042`, model `dpustack`,
//! cntlid 7; namespace 1: 2048 blocks of 4096 bytes; namespace 3: 100 blocks of 512
//! bytes, NGUID 0x11 x 16; listeners 127.0.0.1:4420, [::1]:4421 and a discovery-only
//! 127.0.0.1:8009). A re-recorded file that breaks the spec fails here.
//!
//! References: NVM Express Base Specification 2.0 (Identify Controller, Figure 275;
//! Identify Namespace, NVM Command Set 1.0 Figure 97; Namespace Identification
//! Descriptor, Figure 274; Firmware Slot Information log, Figure 210) and NVMe over
//! Fabrics 1.1 (Discovery Log Page, Figures 38/39) and the TCP transport (TRTYPE 3).

use std::collections::HashMap;

/// The golden file's sections: name -> bytes (rows of zeros are not recorded).
fn pages() -> HashMap<String, Vec<u8>> {
    let text = include_str!("data/admin_pages.golden");
    let mut out = HashMap::new();
    let mut cur: Option<(String, Vec<u8>)> = None;
    for line in text.lines() {
        if let Some((name, len)) = line.rsplit_once(" len ") {
            if let Some((n, b)) = cur.take() {
                out.insert(n, b);
            }
            cur = Some((name.to_string(), vec![0; len.parse().unwrap()]));
            continue;
        }
        let (off, hex) = line.split_once(": ").expect("row");
        let off = usize::from_str_radix(off, 16).unwrap();
        let b = &mut cur.as_mut().expect("a row before a section").1;
        for (i, h) in hex.split(' ').enumerate() {
            b[off + i] = u8::from_str_radix(h, 16).unwrap();
        }
    }
    if let Some((n, b)) = cur {
        out.insert(n, b);
    }
    out
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
/// An ASCII field padded with spaces to `len`.
fn ascii(s: &str, len: usize) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.resize(len, b' ');
    v
}
/// A UTF-8 NQN field, NUL padded to 256 bytes.
fn nqn(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.resize(256, 0);
    v
}

#[test]
fn golden_io_controller_identify_follows_the_spec() {
    let p = pages();
    let c = &p["io ctrlr"];
    assert_eq!(c.len(), 4096);
    assert_eq!(&c[4..24], &ascii("SN0042", 20)[..], "SN (bytes 23:04)");
    assert_eq!(&c[24..64], &ascii("dpustack", 40)[..], "MN (bytes 63:24)");
    assert_eq!(
        &c[64..72],
        b"########",
        "FR (71:64), blanked by the recorder"
    );
    assert_eq!(le16(c, 78), 7, "CNTLID (79:78)");
    let ver = le32(c, 80);
    assert!(
        ver >= 0x0001_0300,
        "VER (83:80) {ver:#x}: NVMe-oF needs 1.3+"
    );
    assert_eq!(c[111], 1, "CNTRLTYPE (111): I/O controller");
    assert!(
        le16(c, 320) > 0,
        "KAS (321:320): fabrics controllers support keep alive"
    );
    assert_eq!(c[512] & 0xf, 6, "SQES (512) minimum: 64-byte entries");
    assert_eq!(c[513] & 0xf, 4, "CQES (513) minimum: 16-byte entries");
    assert!(le32(c, 516) >= 3, "NN (519:516) covers namespace 3");
    assert_ne!(
        le32(c, 536) & 0x3,
        0,
        "SGLS (539:536): SGLs supported (required on fabrics)"
    );
    assert_eq!(
        &c[768..1024],
        &nqn("nqn.2024-01.io.dpustack:golden")[..],
        "SUBNQN (1023:768)"
    );
    // fabrics fields (NVMe-oF 1.1, Identify Controller 2047:1792)
    assert!(
        le32(c, 1792) >= 4,
        "IOCCSZ (1795:1792): at least the 64-byte SQE"
    );
    assert!(
        le32(c, 1796) >= 1,
        "IORCSZ (1799:1796): at least the 16-byte CQE"
    );
    assert_eq!(c[1802], 0, "FCATT (1802): dynamic controller model");
}

#[test]
fn golden_discovery_controller_identify_follows_the_spec() {
    let p = pages();
    let c = &p["disc ctrlr"];
    assert_eq!(c[111], 2, "CNTRLTYPE (111): discovery controller");
    assert_eq!(
        &c[768..1024],
        &nqn("nqn.2014-08.org.nvmexpress.discovery")[..],
        "SUBNQN: the well-known discovery NQN"
    );
    assert_eq!(
        le32(c, 516),
        0,
        "NN: a discovery controller has no namespaces"
    );
}

#[test]
fn golden_namespace_pages_follow_the_spec() {
    let p = pages();
    for (name, blocks, lbads, nguid) in [
        ("ns 1", 2048u64, 12u8, None),
        ("ns 3", 100, 9, Some([0x11u8; 16])),
    ] {
        let n = &p[name];
        assert_eq!(le64(n, 0), blocks, "{name}: NSZE (7:0)");
        assert_eq!(le64(n, 8), blocks, "{name}: NCAP (15:8)");
        let flbas = n[26] & 0xf;
        assert!(flbas <= n[25], "{name}: FLBAS (26) within NLBAF (25)");
        let lbaf = 128 + 4 * flbas as usize;
        assert_eq!(n[lbaf + 2], lbads, "{name}: LBADS of the format in use");
        assert_eq!(le16(n, lbaf), 0, "{name}: no metadata");
        let g = &n[104..120];
        assert!(g.iter().any(|&b| b != 0), "{name}: NGUID (119:104) set");
        if let Some(want) = nguid {
            assert_eq!(g, &want[..], "{name}: the NGUID it was given");
        }
        // the descriptor list (CNS 03h) repeats the identifiers: EUI64 (type 1, 8
        // bytes), NGUID (type 2, 16), UUID (type 3, 16), each after a 4-byte header
        let d = &p[&format!("{name} descriptors")];
        let mut o = 0;
        let mut seen = Vec::new();
        while o + 4 <= d.len() && d[o] != 0 {
            let (nidt, nidl) = (d[o], d[o + 1] as usize);
            let want_len = match nidt {
                1 => 8,
                2 | 3 => 16,
                t => panic!("{name}: unknown NIDT {t}"),
            };
            assert_eq!(nidl, want_len, "{name}: NIDL of type {nidt}");
            let id = &d[o + 4..o + 4 + nidl];
            match nidt {
                1 => assert_eq!(id, &n[120..128], "{name}: EUI64 = Identify NS EUI64"),
                2 => assert_eq!(id, g, "{name}: NGUID = Identify NS NGUID"),
                _ => assert!(id.iter().any(|&b| b != 0), "{name}: UUID set"),
            }
            seen.push(nidt);
            o += 4 + nidl;
        }
        assert!(seen.contains(&2), "{name}: an NGUID descriptor ({seen:?})");
    }
    // an allocated but inactive namespace id: a zero-filled structure
    assert!(p["ns 2 inactive"].iter().all(|&b| b == 0));
    // active namespace lists (CNS 02h): ids greater than NSID, ascending, 0-terminated
    let list = |name: &str| -> Vec<u32> {
        let b = &p[name];
        (0..1024)
            .map(|i| le32(b, 4 * i))
            .take_while(|&x| x != 0)
            .collect()
    };
    assert_eq!(list("ns list >0"), [1, 3]);
    assert_eq!(list("ns list >1"), [3]);
}

#[test]
fn golden_log_pages_follow_the_spec() {
    let p = pages();
    // firmware slot information: AFI (0) names slot 1 active, FRS1 (15:8) the revision
    let fw = &p["log 3"];
    assert_eq!(fw[0] & 0x7, 1, "AFI: slot 1 active");
    assert_eq!(&fw[8..16], b"########", "FRS1, blanked by the recorder");
    // the discovery log page: header, then 1024-byte entries
    let d = &p["log 0x70"];
    assert!(le64(d, 0) > 0, "GENCTR");
    assert_eq!(
        le64(d, 8),
        2,
        "NUMREC: the two I/O listeners, not the discovery-only one"
    );
    assert_eq!(le16(d, 16), 0, "RECFMT");
    for (i, (adrfam, svcid, addr)) in [(1u8, "4420", "127.0.0.1"), (2, "4421", "::1")]
        .into_iter()
        .enumerate()
    {
        let e = &d[1024 * (i + 1)..1024 * (i + 2)];
        assert_eq!(e[0], 3, "entry {i}: TRTYPE TCP");
        assert_eq!(e[1], adrfam, "entry {i}: ADRFAM");
        assert_eq!(e[2], 2, "entry {i}: SUBTYPE NVM subsystem");
        assert_eq!(le16(e, 6), 0xffff, "entry {i}: CNTLID dynamic");
        assert!(
            le16(e, 8) >= 31,
            "entry {i}: ASQSZ at least 32 entries (0's based)"
        );
        assert_eq!(&e[32..64], &ascii(svcid, 32)[..], "entry {i}: TRSVCID");
        assert_eq!(&e[256..512], &nqn("nqn.2024-01.io.dpustack:golden")[..]);
        assert_eq!(&e[512..768], &ascii(addr, 256)[..], "entry {i}: TRADDR");
        assert_eq!(e[768], 0, "entry {i}: TSAS SECTYPE none");
    }
    // paging: the entry at offset 1024 is the first entry
    assert_eq!(&p["log 0x70 @1024"][..], &d[1024..2048]);
}
