//! NVMe transport wire formats: NVMe/TCP PDUs (`wire::nvme_tcp`), the NVMe-oF
//! RDMA CM private data (`wire::nvme_rdma`) and single SGL descriptors (keyed
//! SGLs of NVMe-oF RDMA included). Invariants: a PDU that parses re-emits
//! (same digests, PDA 0) to a PDU that parses to the same Repr and data, and
//! whose digests verify; CM REQ/REP/REJ parse -> emit -> parse equality; an
//! SGL descriptor that decodes builds back to an SGL describing the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::memory::VecMemory;
use nvme::sgl::{self, BuildOptions};
use nvme::SglDescriptor;
use wire::nvme_rdma::{CmRej, CmRep, CmReq};
use wire::nvme_tcp::{Digests, Pdu, PduRepr};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, b)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => {
            let Ok(p) = Pdu::new_checked(b) else { return };
            let Ok(r) = PduRepr::parse(&p) else { return };
            let dg = Digests {
                header: p.hdgst().is_some(),
                data: p.ddgst().is_some(),
            };
            let d = p.data();
            let mut out = Vec::new();
            r.emit_to_vec(&mut out, d, dg, 0);
            let p2 = Pdu::new_checked(&out[..]).expect("re-emitted PDU checks");
            let r2 = PduRepr::parse(&p2).expect("re-emitted PDU parses");
            assert_eq!(r2, r, "PDU parse -> emit -> parse");
            assert_eq!(p2.data(), d, "PDU data");
            p2.verify_hdgst().expect("header digest we computed");
            p2.verify_ddgst().expect("data digest we computed");
        }
        1 => {
            if let Ok(r) = CmReq::parse(b) {
                assert_eq!(CmReq::parse(&r.emit()), Ok(r));
            }
            if let Ok(r) = CmRep::parse(b) {
                assert_eq!(CmRep::parse(&r.emit()), Ok(r));
            }
            if let Ok(r) = CmRej::parse(b) {
                assert_eq!(CmRej::parse(&r.emit()), Ok(r));
            }
        }
        _ => {
            let Ok(d) = SglDescriptor::from_bytes(b) else {
                return;
            };
            let Ok(e) = sgl::entry_of(&d) else { return };
            let mut vm = VecMemory::default();
            if let Ok(s) = sgl::build(&[e], BuildOptions::default(), &mut vm) {
                let w = sgl::walk(&s.sgl1, &vm, 1 << 16).expect("walk of a built SGL");
                let total: u64 = w.iter().map(|x| x.len()).sum();
                assert_eq!(total, e.len(), "built SGL of {e:?} walks to {w:?}");
            }
        }
    }
});
