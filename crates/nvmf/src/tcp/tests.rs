//! Host and target connections joined in memory.

use super::*;
use crate::transport::DataError;
use nvme::{Cqe, SglDescriptor, SglSubtype, Sqe};
use wire::nvme_tcp::{self as pdu, Digests, Fes, PduRepr};

fn pump(h: &mut HostConn, t: &mut TargetConn) {
    for _ in 0..8 {
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        t.handle_bytes(&b);
        let b = t.drain_tx();
        h.handle_bytes(&b);
    }
}

fn pair(hp: HostParams, tp: TargetParams) -> (HostConn, TargetConn) {
    let mut h = HostConn::new(hp);
    let mut t = TargetConn::new(tp);
    pump(&mut h, &mut t);
    assert!(matches!(t.poll_event(), Some(TargetEvent::Established)));
    assert!(matches!(h.poll_event(), Some(HostEvent::Established)));
    (h, t)
}

fn sqe(opc: u8, cid: u16) -> Sqe {
    let mut s = Sqe::zeroed();
    s.set_opcode(opc);
    s.set_cid(cid);
    s
}

fn cqe(cid: u16, status: u16) -> Cqe {
    let mut c = Cqe::zeroed();
    c.set_cid(cid);
    c.set_status_raw(status << 1);
    c
}

#[test]
fn write_in_capsule_and_r2t_read_c2h_with_digests() {
    for dig in [false, true] {
        let hp = HostParams {
            hdgst: dig,
            ddgst: dig,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        assert_eq!(h.digests().header, dig);
        for (cid, len) in [(1u16, 512usize), (2, 300_000)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + cid as usize) as u8).collect();
            h.submit(sqe(0x01, cid), &data, 0, 8192).unwrap();
            pump(&mut h, &mut t);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!(req.cid(), cid);
            assert_eq!(req.error, None);
            assert_eq!(&req.data[..], &data[..]);
            t.complete(&cqe(cid, 0), bdev::IoBuf::from(Vec::new()));
            pump(&mut h, &mut t);
            let Some(HostEvent::Completion { cqe, .. }) = h.poll_event() else {
                panic!()
            };
            assert_eq!(cqe.cid(), cid);
        }
        assert_eq!(t.stats().r2t, 1);
        // read 200 KiB: C2HData in two chunks, then CapsuleResp / SUCCESS
        for success in [false, true] {
            t.set_c2h_success(success);
            let data: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
            h.submit(sqe(0x02, 9), &[], data.len() as u32, 8192)
                .unwrap();
            pump(&mut h, &mut t);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!()
            };
            assert_eq!(req.c2h_len, 200_000);
            t.complete(&cqe(9, 0), bdev::IoBuf::from(data.clone()));
            pump(&mut h, &mut t);
            let Some(HostEvent::Completion { data: got, cqe, .. }) = h.poll_event() else {
                panic!()
            };
            assert_eq!(got, data);
            assert_eq!(cqe.status_raw(), 0);
        }
        assert_eq!(t.stats().c2h_success, 1);
    }
}

#[test]
fn zero_copy_tx_partial_writes_and_pool_return() {
    let hp = HostParams {
        hdgst: true,
        ddgst: true,
        hpda: 3,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
    for cid in [1u16, 2] {
        h.submit(sqe(0x02, cid), &[], data.len() as u32, 8192)
            .unwrap();
    }
    pump(&mut h, &mut t);
    for cid in [1u16, 2] {
        let Some(TargetEvent::Command(_)) = t.poll_event() else {
            panic!()
        };
        t.complete(&cqe(cid, 0), bdev::IoBuf::from(data.clone()));
    }
    // drain with vectored "writes" of odd sizes, across segment boundaries
    let mut wire = Vec::new();
    let mut step = 1usize;
    while t.tx_backlog() > 0 {
        let mut iov = [std::io::IoSlice::new(&[]); 5];
        let n = t.poll_transmit_vectored(&mut iov);
        let mut take = step.min(t.tx_backlog());
        let mut sent = 0;
        for s in &iov[..n] {
            let k = s.len().min(take);
            wire.extend_from_slice(&s[..k]);
            take -= k;
            sent += k;
            if take == 0 {
                break;
            }
        }
        t.advance_tx(sent);
        step = step * 7 % 70_001 + 13;
    }
    assert_eq!(t.pool.len(), 2, "both data buffers back in the pool");
    h.handle_bytes(&wire);
    for cid in [1u16, 2] {
        let Some(HostEvent::Completion {
            cqe,
            data: got,
            ddgst_error,
        }) = h.poll_event()
        else {
            panic!()
        };
        assert_eq!(cqe.cid(), cid);
        assert!(!ddgst_error);
        assert_eq!(got, data);
    }
}

#[test]
fn header_digest_error_terminates() {
    let hp = HostParams {
        hdgst: true,
        ddgst: true,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    h.submit(sqe(0x00, 3), &[], 0, 8192).unwrap();
    let mut b = h.poll_transmit().to_vec();
    b[20] ^= 0xff;
    t.handle_bytes(&b);
    assert!(matches!(
        t.poll_event(),
        Some(TargetEvent::Terminated {
            fes: Some(Fes::HeaderDigestError),
            by_peer: false
        })
    ));
    let out = t.drain_tx();
    assert_eq!(out[0], 0x03); // C2HTermReq
    h.handle_bytes(&out);
    assert!(matches!(
        h.poll_event(),
        Some(HostEvent::Terminated { by_peer: true, .. })
    ));
}

#[test]
fn header_digest_error_on_c2h_terminates_the_host() {
    let hp = HostParams {
        hdgst: true,
        ddgst: true,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    h.submit(sqe(0x02, 5), &[], 512, 8192).unwrap();
    pump(&mut h, &mut t);
    let Some(TargetEvent::Command(_)) = t.poll_event() else {
        panic!()
    };
    t.complete(&cqe(5, 0), bdev::IoBuf::from(vec![0x5a; 512]));
    let mut b = t.drain_tx();
    assert_eq!(b[0], 0x07, "C2HData first");
    b[10] ^= 0xff; // a reserved byte of the header: only the HDGST notices
    h.handle_bytes(&b);
    assert!(matches!(
        h.poll_event(),
        Some(HostEvent::Terminated {
            fes: Some(Fes::HeaderDigestError),
            by_peer: false
        })
    ));
    assert_eq!(h.stats.hdgst_errors, 1);
    let out = h.poll_transmit().to_vec();
    assert_eq!(out[0], 0x02, "H2CTermReq");
}

#[test]
fn data_digest_error_fails_the_command_only() {
    let hp = HostParams {
        hdgst: false,
        ddgst: true,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    h.submit(sqe(0x01, 4), &[5u8; 1000], 0, 8192).unwrap();
    let mut b = h.poll_transmit().to_vec();
    h.advance_tx(b.len());
    b[100] ^= 1;
    t.handle_bytes(&b);
    let Some(TargetEvent::Command(req)) = t.poll_event() else {
        panic!()
    };
    assert_eq!(req.error, Some(DataError::DataDigest));
    assert!(!t.is_terminated());
}

/// Sends the host's capsule to the target and the target's R2T back; returns
/// the host's H2CData stream (not delivered).
fn r2t_then_h2c(h: &mut HostConn, t: &mut TargetConn) -> Vec<u8> {
    let b = h.poll_transmit().to_vec();
    h.advance_tx(b.len());
    t.handle_bytes(&b);
    let b = t.drain_tx();
    h.handle_bytes(&b);
    let b = h.poll_transmit().to_vec();
    h.advance_tx(b.len());
    b
}

fn iov_lens(t: &mut TargetConn) -> Vec<usize> {
    let mut iov = [(); 3].map(|_| std::io::IoSliceMut::new(&mut []));
    let k = t.recv_iovecs(&mut iov);
    iov[..k].iter().map(|v| v.len()).collect()
}

/// H2C data goes from the "socket" (`recv_iovecs`) straight into the command's
/// buffer: after an R2T only a header is asked for, then exactly the data;
/// digests are checked over the data in place; data that arrives with its
/// header in one read is copied, and the rest still lands in place.
#[test]
fn h2c_data_received_in_place() {
    for dig in [false, true] {
        let hp = HostParams {
            hdgst: dig,
            ddgst: dig,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 253) as u8).collect();
        h.submit(sqe(0x01, 3), &data, 0, 8192).unwrap();
        pump(&mut h, &mut t);
        let Some(TargetEvent::Command(req)) = t.poll_event() else {
            panic!()
        };
        assert_eq!((req.error, req.data[..] == data[..]), (None, true));
        let st = t.stats();
        assert_eq!(
            (st.h2c_in_place, st.h2c_copied),
            (300_000, 0),
            "digests {dig}"
        );
        t.complete(&cqe(3, 0), bdev::IoBuf::from(Vec::new()));
        t.recycle_buf(req.data);
        pump(&mut h, &mut t);
        assert!(matches!(h.poll_event(), Some(HostEvent::Completion { .. })));

        // by hand: the read sizes the target asks for
        h.submit(sqe(0x01, 4), &data[..20_000], 0, 8192).unwrap();
        let stream = r2t_then_h2c(&mut h, &mut t);
        let hdr = pdu::data_offset(pdu::DATA_HLEN, dig, 0);
        assert_eq!(stream.len(), hdr + 20_000 + if dig { 4 } else { 0 });
        assert_eq!(iov_lens(&mut t), vec![hdr, 20_000, 64 * 1024]);
        t.handle_bytes(&stream[..hdr]);
        assert_eq!(iov_lens(&mut t), vec![20_000]);
        let mut bad = stream[hdr..].to_vec();
        bad[777] ^= 0x40; // caught by the data digest (when on)
        t.handle_bytes(&bad);
        let Some(TargetEvent::Command(req)) = t.poll_event() else {
            panic!()
        };
        assert_eq!(req.data.len(), 20_000);
        if dig {
            assert_eq!(req.error, Some(DataError::DataDigest));
            assert_eq!(t.stats().ddgst_errors, 1);
        } else {
            assert_eq!(req.error, None);
            assert_eq!(req.data[777], data[777] ^ 0x40);
        }
        assert!(!t.is_terminated());
        t.complete(&cqe(4, 0), bdev::IoBuf::from(Vec::new()));
        pump(&mut h, &mut t);
        assert!(matches!(h.poll_event(), Some(HostEvent::Completion { .. })));

        // header and part of the data in one read: that part is copied
        let before = t.stats();
        h.submit(sqe(0x01, 5), &data[..20_000], 0, 8192).unwrap();
        let stream = r2t_then_h2c(&mut h, &mut t);
        t.rx.push(&stream[..hdr + 1000]);
        t.handle_received(0);
        assert_eq!(iov_lens(&mut t), vec![19_000]);
        t.handle_bytes(&stream[hdr + 1000..]);
        let Some(TargetEvent::Command(req)) = t.poll_event() else {
            panic!()
        };
        assert_eq!(
            (req.error, &req.data[..], t.is_terminated()),
            (None, &data[..20_000], false)
        );
        let st = t.stats();
        assert_eq!(st.h2c_copied - before.h2c_copied, 1000);
        assert_eq!(st.h2c_in_place - before.h2c_in_place, 19_000);
    }
}

/// Capsules arriving where H2C data was expected (the host has not seen our
/// R2T yet): each read that put capsule bytes in the write's buffer is undone,
/// commands come out intact, and the receive buffer does not grow.
#[test]
fn mispredicted_h2c_placement_is_undone() {
    for dig in [false, true] {
        let hp = HostParams {
            hdgst: dig,
            ddgst: dig,
            ..Default::default()
        };
        let (mut h, mut t) = pair(hp, TargetParams::default());
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
        h.submit(sqe(0x01, 1), &data, 0, 8192).unwrap();
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        t.handle_bytes(&b); // R2T queued, not delivered yet
        let r2t = t.drain_tx();
        let mut sizes = Vec::new();
        for cid in 2..200u16 {
            // in-capsule writes of varying size, delivered in one piece
            let icd: Vec<u8> = (0..(cid as usize * 37) % 8000 + 1)
                .map(|i| (i + cid as usize) as u8)
                .collect();
            h.submit(sqe(0x01, cid), &icd, 0, 8192).unwrap();
            let b = h.poll_transmit().to_vec();
            h.advance_tx(b.len());
            assert_eq!(iov_lens(&mut t).len(), 3, "a placement is predicted");
            t.handle_bytes(&b);
            let Some(TargetEvent::Command(req)) = t.poll_event() else {
                panic!("cid {cid}")
            };
            assert_eq!(
                (req.cid(), req.error, req.data[..] == icd[..]),
                (cid, None, true)
            );
            sizes.push(t.rx.buf.len());
        }
        assert!(*sizes.iter().max().unwrap() <= 256 * 1024, "{sizes:?}");
        assert!(t.stats().h2c_copied > 0);
        // then the write's data, in place
        h.handle_bytes(&r2t);
        pump(&mut h, &mut t);
        let Some(TargetEvent::Command(req)) = t.poll_event() else {
            panic!()
        };
        assert_eq!(
            (req.cid(), req.error, req.data[..] == data[..]),
            (1, None, true)
        );
    }
}

#[test]
fn first_pdu_must_be_icreq_and_garbage_terminates() {
    let mut t = TargetConn::new(TargetParams::default());
    let mut s = Vec::new();
    PduRepr::CapsuleCmd { sqe: [0; 64] }.emit_to_vec(&mut s, &[], Digests::default(), 0);
    t.handle_bytes(&s);
    assert!(matches!(
        t.poll_event(),
        Some(TargetEvent::Terminated {
            fes: Some(Fes::PduSequenceError),
            ..
        })
    ));
    let (_h, mut t) = pair(HostParams::default(), TargetParams::default());
    t.handle_bytes(&[0x04, 0, 72, 0, 0xff, 0xff, 0xff, 0x7f]);
    assert!(matches!(
        t.poll_event(),
        Some(TargetEvent::Terminated { .. })
    ));
    // a term request is at most 152 bytes
    assert!(t.tx_backlog() <= 152);
}

#[test]
fn h2c_data_out_of_range_terminates() {
    let (mut h, mut t) = pair(HostParams::default(), TargetParams::default());
    h.submit(sqe(0x01, 1), &[1u8; 20000], 0, 0).unwrap();
    pump(&mut h, &mut t);
    // the host answered the R2T already; forge another H2CData beyond the range
    let mut b = Vec::new();
    PduRepr::H2cData {
        cccid: 1,
        ttag: 0,
        datao: 20000,
        datal: 4,
        last: true,
    }
    .emit_to_vec(&mut b, &[0; 4], Digests::default(), 0);
    t.handle_bytes(&b);
    let _ = t.poll_event(); // the completed write
    assert!(matches!(
        t.poll_event(),
        Some(TargetEvent::Terminated { .. })
    ));
}

#[test]
fn arbitrary_bytes_never_panic() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(200), |(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..6))| {
        let (mut h, mut t) = pair(HostParams::default(), TargetParams::default());
        for c in &chunks {
            t.handle_bytes(c);
            h.handle_bytes(c);
            while t.poll_event().is_some() {}
            while h.poll_event().is_some() {}
        }
    });
}

fn event_summary(t: &mut TargetConn) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(e) = t.poll_event() {
        v.push(match e {
            TargetEvent::Established => "est".to_string(),
            TargetEvent::Command(r) => {
                format!(
                    "cmd {} {:?} {} {:?}",
                    r.cid(),
                    &r.data[..],
                    r.c2h_len,
                    r.error
                )
            }
            TargetEvent::Terminated { fes, by_peer } => format!("term {fes:?} {by_peer}"),
        });
    }
    v
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    /// A stream of plausible host PDUs: ICReq, then capsules (some with in-capsule
    /// data, some asking for R2T) and H2CData for the first R2T.
    fn stream(cmds: &[(u8, u16, u16)], dg: bool) -> Vec<u8> {
        let d = Digests {
            header: dg,
            data: dg,
        };
        let mut v = Vec::new();
        PduRepr::IcReq {
            pfv: 0,
            hpda: 0,
            hdgst: dg,
            ddgst: dg,
            maxr2t: 0,
        }
        .emit_to_vec(&mut v, &[], Digests::default(), 0);
        for &(opc, cid, len) in cmds {
            let mut sqe = sqe(opc, cid);
            let data = vec![opc; len as usize];
            if opc & 3 == 1 && len <= 4096 {
                sqe.set_sgl(SglDescriptor::data_block(SglSubtype::Offset, 0, len as u32));
                let sqe = *sqe.as_bytes();
                PduRepr::CapsuleCmd { sqe }.emit_to_vec(&mut v, &data, d, 0);
            } else {
                sqe.set_sgl(SglDescriptor::transport_data_block(len as u32));
                let sqe = *sqe.as_bytes();
                PduRepr::CapsuleCmd { sqe }.emit_to_vec(&mut v, &[], d, 0);
                if opc & 3 == 1 && len > 0 {
                    PduRepr::H2cData {
                        cccid: cid,
                        ttag: 0,
                        datao: 0,
                        datal: len as u32,
                        last: true,
                    }
                    .emit_to_vec(&mut v, &data, d, 0);
                }
            }
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Framing does not depend on how TCP segments the stream.
        #[test]
        fn segmentation_does_not_matter(cmds in proptest::collection::vec((0u8..4, 0u16..4, 0u16..6000), 1..4),
                                        dg in any::<bool>(), cuts in proptest::collection::vec(1usize..700, 1..20)) {
            let s = stream(&cmds, dg);
            let mut whole = TargetConn::new(TargetParams::default());
            whole.handle_bytes(&s);
            let want = event_summary(&mut whole);
            let mut t = TargetConn::new(TargetParams::default());
            let mut off = 0;
            let mut i = 0;
            while off < s.len() {
                let n = cuts[i % cuts.len()].min(s.len() - off);
                t.handle_bytes(&s[off..off + n]);
                off += n;
                i += 1;
            }
            prop_assert_eq!(event_summary(&mut t), want);
        }

        /// A corrupted byte anywhere never panics either side.
        #[test]
        fn corrupted_streams_never_panic(cmds in proptest::collection::vec((0u8..4, 0u16..4, 0u16..6000), 1..4),
                                         dg in any::<bool>(), pos in any::<usize>(), val in any::<u8>()) {
            let mut s = stream(&cmds, dg);
            let p = pos % s.len();
            s[p] = val;
            let mut t = TargetConn::new(TargetParams::default());
            t.handle_bytes(&s);
            let _ = event_summary(&mut t);
            let mut h = HostConn::new(HostParams { hdgst: dg, ddgst: dg, ..Default::default() });
            h.handle_bytes(&s);
            while h.poll_event().is_some() {}
        }
    }
}

/// The target's answer to a read of `data.len()` bytes from the host (command
/// `cid`), not yet delivered to the host.
fn read_stream(h: &mut HostConn, t: &mut TargetConn, cid: u16, data: &[u8]) -> Vec<u8> {
    h.submit(sqe(0x02, cid), &[], data.len() as u32, 8192)
        .unwrap();
    let b = h.poll_transmit().to_vec();
    h.advance_tx(b.len());
    t.handle_bytes(&b);
    let Some(TargetEvent::Command(req)) = t.poll_event() else {
        panic!()
    };
    assert_eq!(req.c2h_len as usize, data.len());
    t.complete(&cqe(cid, 0), bdev::IoBuf::from(data.to_vec()));
    t.drain_tx()
}

#[test]
fn c2h_data_received_in_place() {
    for dig in [false, true] {
        for success in [false, true] {
            for chunk in [1usize, 13, 4096, 65_536, 1 << 20] {
                let hp = HostParams {
                    hdgst: dig,
                    ddgst: dig,
                    ..Default::default()
                };
                let (mut h, mut t) = pair(hp, TargetParams::default());
                t.set_c2h_success(success);
                let before = h.stats();
                let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
                let s = read_stream(&mut h, &mut t, 3, &data);
                // fed as the socket would deliver it, `chunk` bytes per read,
                // each read going where recv_buf says
                for c in s.chunks(chunk) {
                    h.handle_bytes(c);
                }
                let Some(HostEvent::Completion {
                    data: got,
                    cqe,
                    ddgst_error,
                }) = h.poll_event()
                else {
                    panic!("dig {dig} success {success} chunk {chunk}: no completion")
                };
                assert_eq!(got, data, "dig {dig} chunk {chunk}");
                assert_eq!((cqe.cid(), cqe.status_raw(), ddgst_error), (3, 0, false));
                let st = h.stats();
                let (placed, copied) = (
                    st.c2h_in_place - before.c2h_in_place,
                    st.c2h_copied - before.c2h_copied,
                );
                assert_eq!(placed + copied, 300_000, "chunk {chunk}");
                if chunk < 65_536 {
                    // every read after a PDU's header goes to the command's buffer
                    assert!(placed > 250_000, "chunk {chunk}: {placed} in place");
                } else {
                    // reads of up to 64 KiB (the receive buffer's spare room):
                    // the data past the first read of each PDU is placed
                    assert!(placed > 100_000, "chunk {chunk}: {placed} in place");
                }
                assert!(!h.is_terminated());
            }
        }
    }
}

#[test]
fn c2h_in_place_data_digest_error_fails_the_command_only() {
    let hp = HostParams {
        hdgst: true,
        ddgst: true,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    t.set_c2h_success(true);
    let data = vec![0x5au8; 100_000];
    let mut s = read_stream(&mut h, &mut t, 4, &data);
    s[5000] ^= 0x10; // in the first C2HData PDU's data, past its header
    for c in s.chunks(1000) {
        h.handle_bytes(c);
    }
    let Some(HostEvent::Completion {
        cqe, ddgst_error, ..
    }) = h.poll_event()
    else {
        panic!()
    };
    assert!(ddgst_error);
    assert_eq!(cqe.status_raw(), 0x04 << 1, "Data Transfer Error");
    assert!(h.stats().c2h_in_place > 0);
    assert_eq!(h.stats().ddgst_errors, 1);
    assert!(!h.is_terminated());
    // the connection goes on
    let s = read_stream(&mut h, &mut t, 5, &data);
    for c in s.chunks(1000) {
        h.handle_bytes(c);
    }
    let Some(HostEvent::Completion {
        data: got,
        ddgst_error,
        ..
    }) = h.poll_event()
    else {
        panic!()
    };
    assert!(!ddgst_error);
    assert_eq!(got, data);
}

#[test]
fn c2h_in_place_header_digest_error_terminates_the_host() {
    let hp = HostParams {
        hdgst: true,
        ddgst: false,
        ..Default::default()
    };
    let (mut h, mut t) = pair(hp, TargetParams::default());
    let data = vec![7u8; 100_000];
    let mut s = read_stream(&mut h, &mut t, 6, &data);
    s[12] ^= 1; // DATAO of the first C2HData PDU: its header digest fails
    for c in s.chunks(1000) {
        h.handle_bytes(c);
    }
    assert!(h.is_terminated(), "a bad header is never read in place");
    assert_eq!(h.stats().c2h_in_place, 0);
}

#[test]
fn pooled_read_buffer_never_shows_an_earlier_commands_bytes() {
    let (mut h, mut t) = pair(HostParams::default(), TargetParams::default());
    let data = vec![0xeeu8; 8192];
    let s = read_stream(&mut h, &mut t, 1, &data);
    h.handle_bytes(&s);
    let Some(HostEvent::Completion { data: got, .. }) = h.poll_event() else {
        panic!()
    };
    assert_eq!(got, data);
    h.recycle(got);
    // the same size again, answered with an error and no data
    h.submit(sqe(0x02, 2), &[], 8192, 8192).unwrap();
    let b = h.poll_transmit().to_vec();
    h.advance_tx(b.len());
    t.handle_bytes(&b);
    let Some(TargetEvent::Command(_)) = t.poll_event() else {
        panic!()
    };
    t.complete(&cqe(2, 0x81), bdev::IoBuf::from(Vec::new()));
    h.handle_bytes(&t.drain_tx());
    let Some(HostEvent::Completion { data: got, cqe, .. }) = h.poll_event() else {
        panic!()
    };
    assert_ne!(cqe.status_raw(), 0);
    assert!(got.iter().all(|&b| b == 0), "stale bytes of command 1");
}
