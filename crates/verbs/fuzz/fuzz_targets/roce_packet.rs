//! The RoCE packet parser: no panic on any input, and whatever parses re-emits
//! to a packet that parses to the same Repr.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::roce::{icrc, Ipv4Pseudo, RocePacketRepr};

fuzz_target!(|data: &[u8]| {
    let ip = Ipv4Pseudo::df([127, 0, 0, 1], [127, 0, 0, 2], 4791, 4791);
    let _ = icrc::check_icrc_ipv4(&ip, data);
    if let Ok((r, payload)) = RocePacketRepr::parse(data) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        buf[r.payload_range()].copy_from_slice(payload);
        let (r2, p2) = RocePacketRepr::parse(&buf).expect("re-parse");
        assert_eq!(r2.bth.opcode, r.bth.opcode);
        assert_eq!(p2, payload);
    }
});
