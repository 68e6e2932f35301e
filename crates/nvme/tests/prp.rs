//! PRP edge rules not covered by the unit tests in `src/prp.rs`: the CC.MPS range, the
//! page-size check, and the NVMe status of each kind of PRP error (written for the
//! mutants cargo-mutants found unchecked, docs/mutants.md).

use nvme::memory::{IoVec, MemoryError};
use nvme::prp::{page_entries, page_size_from_mps, PrpError};
use nvme::status::{GenericStatus, Status};

#[test]
fn page_size_from_mps_covers_0_to_15() {
    assert_eq!(page_size_from_mps(0), Some(4096));
    assert_eq!(page_size_from_mps(15), Some(1 << 27));
    assert_eq!(page_size_from_mps(16), None);
    assert_eq!(page_size_from_mps(255), None);
}

#[test]
fn page_size_must_be_a_power_of_two_of_at_least_4k() {
    let buf = [IoVec {
        addr: 0x10000,
        len: 512,
    }];
    for page in [4096, 8192, 1 << 27] {
        assert_eq!(page_entries(&buf, page), Ok(vec![0x10000]), "page {page}");
    }
    // a power of two below 4 KiB, and a size of 4 KiB or more that is not one
    for page in [0, 512, 2048, 4095, 6144, 12288] {
        assert_eq!(
            page_entries(&buf, page),
            Err(PrpError::BadPageSize(page)),
            "page {page}"
        );
    }
}

#[test]
fn each_error_has_its_status() {
    let g = Status::generic;
    let unmapped = MemoryError::Unmapped {
        addr: 0x1000,
        len: 8,
    };
    for (e, want) in [
        (
            PrpError::Memory(unmapped),
            g(GenericStatus::DataTransferError),
        ),
        (
            PrpError::Memory(MemoryError::OutOfMemory),
            g(GenericStatus::DataTransferError),
        ),
        (PrpError::Overflow, g(GenericStatus::DataTransferError)),
        (PrpError::Empty, g(GenericStatus::InvalidField)),
        (PrpError::BadPageSize(2048), g(GenericStatus::InvalidField)),
        (
            PrpError::UnalignedFirst { addr: 2 },
            g(GenericStatus::PrpOffsetInvalid),
        ),
        (
            PrpError::EntryOffset { addr: 0x1008 },
            g(GenericStatus::PrpOffsetInvalid),
        ),
    ] {
        assert_eq!(e.status(), want, "{e:?}");
    }
}
