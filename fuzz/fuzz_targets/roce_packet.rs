//! RoCEv2 transport packets (BTH .. ICRC views): no panic on any input; whatever
//! parses re-emits to bytes that parse to the *same* Repr and payload; a packet
//! with its ICRC filled in checks, and one flipped byte makes it fail.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::roce::{icrc, Ipv4Pseudo, RocePacketRepr};

fuzz_target!(|data: &[u8]| {
    let ip = Ipv4Pseudo::df([127, 0, 0, 1], [127, 0, 0, 2], 4791, 4791);
    let _ = icrc::check_icrc_ipv4(&ip, data);
    if let Ok((r, payload)) = RocePacketRepr::parse(data) {
        assert_eq!(payload.len(), r.payload_len);
        // The parser keeps the wire's pad count (rxe accepts a packet whose
        // length is not a multiple of 4), emit derives it from the payload
        // length: compare against the canonical pad.
        let mut canon = r;
        canon.bth.pad_cnt = ((4 - r.payload_len % 4) % 4) as u8;
        let mut buf = vec![0u8; r.buffer_len()];
        assert!(
            buf.len() <= data.len() + 3,
            "re-emitted packet is longer than the input"
        );
        r.emit(&mut buf);
        buf[r.payload_range()].copy_from_slice(payload);
        assert_eq!(buf.len() % 4, 0, "emitted packet not 4-byte aligned");
        let (r2, p2) = RocePacketRepr::parse(&buf).expect("re-parse of an emitted packet");
        assert_eq!(r2, canon, "parse -> emit -> parse changed the Repr");
        assert_eq!(p2, payload);
        icrc::fill_icrc_ipv4(&ip, &mut buf).expect("fill ICRC");
        icrc::check_icrc_ipv4(&ip, &buf).expect("ICRC just filled must check");
        let i = data.len() % (buf.len() - 4);
        buf[i] ^= 0x01;
        // the ICRC masks some fields to ones (the variant fields); flipping their
        // bits legitimately keeps the ICRC valid, so only invariant bytes are checked
        if !icrc_masked(i) {
            assert!(
                icrc::check_icrc_ipv4(&ip, &buf).is_err(),
                "bit flip at {i} not caught by ICRC"
            );
        }
    }
});

/// Bytes of the BTH masked by the ICRC computation (IBTA 9.4.4 / RoCEv2 A17.8):
/// byte 4 (the reserved 8 bits before DestQP, "resv8a") is masked to ones.
fn icrc_masked(i: usize) -> bool {
    i == 4
}
