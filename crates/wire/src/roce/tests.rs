//! Byte tests on real captured bytes (the project's reference pcap) and property
//! tests for every header.

use super::icrc::{check_icrc_ipv4, fill_icrc_ipv4};
use super::*;
use proptest::prelude::*;

// UDP payloads of the three frames of shared/oracles/tshark/rocev2-send-write-ack.pcap
// (ICRC bytes are zero there: the generator did not compute them).
const SEND_ONLY: [u8; 48] = [
    0x04, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x01, 0x00, 0x01, 0x02, 0x03,
    0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13,
    0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x00, 0x00, 0x00, 0x00,
];
fn write_only() -> Vec<u8> {
    let mut v = vec![
        0x0a, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x02, 0x00, 0x00, 0x7f,
        0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x40,
    ];
    v.extend_from_slice(&[0u8; 64 + 4]);
    v
}
const ACK: [u8; 20] = [
    0x11, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x00,
];

#[test]
fn deconstruct_send_only() {
    let b = Bth::new_checked(&SEND_ONLY[..]).unwrap();
    assert_eq!(b.opcode(), 0x04);
    assert!(!b.se());
    assert!(b.mig_req());
    assert_eq!(b.pad_cnt(), 0);
    assert_eq!(b.tver(), 0);
    assert_eq!(b.pkey(), 0xffff);
    assert_eq!(b.dest_qp(), 0x11);
    assert!(b.ack_req());
    assert_eq!(b.psn(), Psn::new(1));
    let (r, payload) = RocePacketRepr::parse(&SEND_ONLY).unwrap();
    assert_eq!(r.opcode(), Opcode::RC_SEND_ONLY);
    assert_eq!(payload, &SEND_ONLY[12..44]);
    assert_eq!(r.reth, None);
}

#[test]
fn construct_send_only() {
    let mut r = RocePacketRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(1), 32).unwrap();
    r.bth.mig_req = true;
    r.bth.ack_req = true;
    let mut buf = vec![0xaau8; r.buffer_len()];
    r.emit(&mut buf);
    buf[r.payload_range()].copy_from_slice(&SEND_ONLY[12..44]);
    buf[44..].fill(0);
    assert_eq!(&buf[..], &SEND_ONLY[..]);
}

#[test]
fn write_only_reth() {
    let w = write_only();
    let (r, p) = RocePacketRepr::parse(&w).unwrap();
    assert_eq!(r.opcode(), Opcode::RC_RDMA_WRITE_ONLY);
    let reth = r.reth.unwrap();
    assert_eq!(reth.va, 0x7f00_0000_1000);
    assert_eq!(reth.rkey, 0x1234);
    assert_eq!(reth.dma_len, 64);
    assert_eq!(p.len(), 64);
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut out);
    assert_eq!(out, w);
}

#[test]
fn ack_aeth() {
    let (r, p) = RocePacketRepr::parse(&ACK).unwrap();
    assert_eq!(r.opcode(), Opcode::RC_ACKNOWLEDGE);
    assert!(p.is_empty());
    let a = r.aeth.unwrap();
    assert_eq!(
        AethSyndrome::from(a.syndrome),
        AethSyndrome::Ack { credits: 0 }
    );
    assert_eq!(a.msn, 5);
    assert_eq!(r.bth.psn, Psn::new(2));
    assert!(!r.bth.ack_req);
}

#[test]
fn impossible_lengths() {
    assert_eq!(
        RocePacketRepr::parse(&SEND_ONLY[..11]),
        Err(crate::Error::Truncated)
    );
    // ACK without room for AETH + ICRC
    assert_eq!(
        RocePacketRepr::parse(&ACK[..19]),
        Err(crate::Error::Truncated)
    );
    // payload on an ACK
    let mut a = ACK.to_vec();
    a.extend_from_slice(&[0; 4]);
    assert_eq!(RocePacketRepr::parse(&a), Err(crate::Error::BadLength));
    // pad larger than body
    let mut s = [0u8; 16];
    s[..12].copy_from_slice(&SEND_ONLY[..12]);
    s[1] |= 0x30;
    assert_eq!(RocePacketRepr::parse(&s), Err(crate::Error::BadLength));
    // unknown opcode
    let mut u = SEND_ONLY;
    u[0] = 0x15;
    assert_eq!(RocePacketRepr::parse(&u), Err(crate::Error::BadOpcode));
    // version 1
    let mut v = SEND_ONLY;
    v[1] |= 1;
    assert_eq!(RocePacketRepr::parse(&v), Err(crate::Error::BadVersion));
}

/// Vectors computed with the harness's ICRC recipe (tests/peers/probes/roce_probe.py
/// `icrc()`, which kernel rxe accepts and whose twin icrc_check.py validates rxe's
/// own traffic): SEND_ONLY to QP 0x11, PSN 1, A=1, MigReq, payload 0..31.
#[test]
fn icrc_matches_rxe_recipe() {
    let mut p = SEND_ONLY;
    let ip = Ipv4Pseudo::df([10, 99, 0, 1], [10, 99, 0, 2], 4791, 4791);
    fill_icrc_ipv4(&ip, &mut p).unwrap();
    assert_eq!(&p[44..], &[0xfa, 0x79, 0xad, 0x39]);
    check_icrc_ipv4(&ip, &p).unwrap();
    let ip3 = Ipv4Pseudo {
        id: 3,
        ..Ipv4Pseudo::df([127, 0, 0, 1], [127, 0, 0, 2], 4791, 4791)
    };
    fill_icrc_ipv4(&ip3, &mut p).unwrap();
    assert_eq!(&p[44..], &[0xc9, 0xe2, 0xc5, 0x60]);
    // masked fields do not matter, covered ones do
    p[4] = 0x55; // resv8a masked
    check_icrc_ipv4(&ip3, &p).unwrap();
    p[20] ^= 1;
    assert_eq!(check_icrc_ipv4(&ip3, &p), Err(crate::Error::BadIcrc));
    p[20] ^= 1;
    let other = Ipv4Pseudo { id: 4, ..ip3 };
    assert_eq!(check_icrc_ipv4(&other, &p), Err(crate::Error::BadIcrc));
}

#[test]
fn table_rows_match_ibta() {
    // (opcode, header length incl. BTH) from IBA vol 1 table 38 / rxe_opcode.c
    let rows: &[(u8, usize)] = &[
        (0x00, 12),
        (0x01, 12),
        (0x02, 12),
        (0x03, 16),
        (0x04, 12),
        (0x05, 16),
        (0x06, 28),
        (0x07, 12),
        (0x08, 12),
        (0x09, 16),
        (0x0a, 28),
        (0x0b, 32),
        (0x0c, 28),
        (0x0d, 16),
        (0x0e, 12),
        (0x0f, 16),
        (0x10, 16),
        (0x11, 16),
        (0x12, 24),
        (0x13, 40),
        (0x14, 40),
        (0x16, 16),
        (0x17, 16),
        (0x20, 12),
        (0x24, 12),
        (0x25, 16),
        (0x26, 28),
        (0x2b, 32),
        (0x64, 20),
        (0x65, 24),
    ];
    for &(op, len) in rows {
        let i = Opcode(op)
            .info()
            .unwrap_or_else(|| panic!("{op:#x} missing"));
        assert_eq!(i.hdr_len(), len, "{}", i.name);
    }
    let defined = OPCODES_COUNT;
    assert_eq!(
        (0..=255u8).filter(|&o| Opcode(o).info().is_some()).count(),
        defined
    );
    assert_eq!(Opcode(0x0b).info().unwrap().offset(ExtHdr::ImmDt), Some(28));
    assert_eq!(Opcode(0x65).info().unwrap().offset(ExtHdr::ImmDt), Some(20));
    assert_eq!(
        Opcode(0x12).info().unwrap().offset(ExtHdr::AtomicAckEth),
        Some(16)
    );
}
const OPCODES_COUNT: usize = 23 + 12 + 2;

#[test]
fn psn_wraps() {
    let a = Psn::new(0xff_fffe);
    assert_eq!(a.add(3), Psn::new(1));
    assert!(a.before(Psn::new(1)));
    assert!(Psn::new(1).after(a));
    assert_eq!(Psn::new(1).diff(a), 3);
    assert_eq!(Psn::new(0).sub(1), Psn::new(0xff_ffff));
}

#[test]
fn syndromes() {
    for v in 0..=255u8 {
        assert_eq!(u8::from(AethSyndrome::from(v)), v);
    }
    assert_eq!(
        u8::from(AethSyndrome::Nak(NakCode::RemoteAccessError)),
        0x62
    );
    assert_eq!(u8::from(AethSyndrome::ACK), 0x1f);
}

fn arb_repr() -> impl Strategy<Value = RocePacketRepr> {
    let ops: Vec<u8> = (0..=255u8)
        .filter(|&o| Opcode(o).info().is_some())
        .collect();
    (
        proptest::sample::select(ops),
        any::<(bool, bool, u16, u32, bool, u32)>(),
        any::<(u64, u32, u32, u8, u64, u64)>(),
        any::<(u32, u32, u32, u32)>(),
        0usize..300,
    )
        .prop_map(
            |(op, (se, m, pkey, qp, a, psn), (va, rk, dl, syn, x, y), (imm, ie, qk, sq), pl)| {
                let info = Opcode(op).info().unwrap();
                let pl = if info.has(OpFlags::PAYLOAD) { pl } else { 0 };
                let mut r =
                    RocePacketRepr::new(Opcode(op), qp & 0xff_ffff, Psn::new(psn), pl).unwrap();
                r.bth.se = se;
                r.bth.mig_req = m;
                r.bth.pkey = pkey;
                r.bth.ack_req = a;
                r.reth = r.reth.map(|_| RethRepr {
                    va,
                    rkey: rk,
                    dma_len: dl,
                });
                r.aeth = r.aeth.map(|_| AethRepr {
                    syndrome: syn,
                    msn: rk & 0xff_ffff,
                });
                r.atomic_eth = r.atomic_eth.map(|_| AtomicEthRepr {
                    va,
                    rkey: rk,
                    swap_add: x,
                    compare: y,
                });
                r.atomic_ack = r.atomic_ack.map(|_| x);
                r.imm = r.imm.map(|_| imm);
                r.ieth = r.ieth.map(|_| ie);
                r.deth = r.deth.map(|_| DethRepr {
                    qkey: qk,
                    src_qp: sq & 0xff_ffff,
                });
                r
            },
        )
}

proptest! {
    #[test]
    fn parse_emit_roundtrip(r in arb_repr(), fill in any::<u8>()) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        buf[r.payload_range()].fill(fill);
        let (p, payload) = RocePacketRepr::parse(&buf).unwrap();
        prop_assert_eq!(p, r);
        prop_assert!(payload.iter().all(|&b| b == fill));
        prop_assert_eq!(buf.len() % 4, 0);
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = RocePacketRepr::parse(&bytes);
        let ip = Ipv4Pseudo::df([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
        let _ = check_icrc_ipv4(&ip, &bytes);
        for h in [Bth::<&[u8]>::LEN, Reth::<&[u8]>::LEN, AtomicEth::<&[u8]>::LEN] {
            prop_assert_eq!(bytes.len() >= h, match h {
                12 => Bth::new_checked(&bytes[..]).is_ok(),
                16 => Reth::new_checked(&bytes[..]).is_ok(),
                _ => AtomicEth::new_checked(&bytes[..]).is_ok(),
            });
        }
    }

    #[test]
    fn icrc_roundtrip(r in arb_repr(), id in any::<u16>()) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        let ip = Ipv4Pseudo { id, ..Ipv4Pseudo::df([127, 0, 0, 1], [127, 0, 0, 2], 4791, 4791) };
        fill_icrc_ipv4(&ip, &mut buf).unwrap();
        prop_assert!(check_icrc_ipv4(&ip, &buf).is_ok());
    }
}
