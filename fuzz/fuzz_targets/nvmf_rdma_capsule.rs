//! NVMe/RDMA command capsules: the data pointer decoder of the target queue
//! (`nvmf::rdma::capsule::decode`) over an arbitrary SQE and in-capsule data.
//! Invariants:
//! - it never panics and reads in-capsule data only inside what arrived;
//! - in-capsule data is accepted only host-to-controller, no longer than what
//!   arrived nor than the queue's in-capsule size;
//! - a keyed list has 1..=MAX_KEYED blocks; a single Keyed Data Block carries
//!   exactly the SQE's data length; the key to invalidate is one the blocks name;
//! - the decode is deterministic (same input, same answer).
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::opcode::DataDirection;
use nvme::{Sqe, SQE_LEN};
use nvmf::rdma::capsule::{decode, CapsuleData, MAX_KEYED};

fuzz_target!(|data: &[u8]| {
    if data.len() < SQE_LEN + 1 {
        return;
    }
    let sqe = Sqe::from_bytes(&data[..SQE_LEN]).expect("64 bytes");
    // the queue's in-capsule size: 0 (admin queue) up to 8 KiB
    let icd_max = u32::from(data[SQE_LEN]) * 32;
    let icd = &data[SQE_LEN + 1..];
    let run = || {
        decode(&sqe, icd.len(), icd_max, |at, buf| {
            assert!(
                at.checked_add(buf.len()).is_some_and(|e| e <= icd.len()),
                "read of {} at {at} past {} bytes of in-capsule data",
                buf.len(),
                icd.len()
            );
            buf.copy_from_slice(&icd[at..at + buf.len()]);
            true
        })
    };
    let r = run();
    match &r {
        Ok(CapsuleData::InCapsule { len }) => {
            assert!(*len as usize <= icd.len() && *len <= icd_max);
            assert_eq!(
                nvmf::tcp::data_direction(&sqe),
                DataDirection::HostToController
            );
        }
        Ok(CapsuleData::Keyed { list, dir, segment }) => {
            let n = list.blocks().len();
            assert!((1..=MAX_KEYED).contains(&n), "{n} blocks");
            assert_ne!(*dir, DataDirection::None);
            if !segment {
                assert_eq!(n, 1);
                assert_eq!(list.total(), u64::from(sqe.sgl1().data_length()));
            }
            if let Some(k) = list.invalidate {
                assert!(list.blocks().iter().any(|b| b.key == k));
            }
        }
        Ok(CapsuleData::None) | Err(_) => {}
    }
    assert_eq!(format!("{r:?}"), format!("{:?}", run()), "not deterministic");
});
