//! PRP (Physical Region Page) data pointers: PRP1/PRP2 and PRP lists chained
//! across list pages; a builder from buffers and a walker back into buffers.
//!
//! Rules (Base 2.0 §4.1.1), with memory page size `P = 2^(12 + CC.MPS)`:
//! - PRP1 may start anywhere dword aligned inside a page; it covers up to the end
//!   of that page.
//! - If the rest fits in one page, PRP2 is that page's address (offset 0).
//!   Otherwise PRP2 points to a PRP list (qword aligned, may have an offset).
//! - Every list entry is a page address with offset 0. When a list page has room
//!   for fewer entries than remain, its last entry points to the next list page
//!   (page aligned).
//!
//! So a buffer list is expressible only if: the first buffer starts dword aligned;
//! every later buffer starts on a page boundary; every buffer but the last ends on
//! a page boundary. [`build`] rejects anything else with a [`PrpError`].

use crate::memory::{merge_adjacent, GuestMemory, GuestMemoryMut, IoVec, MemoryError};
use crate::status::{GenericStatus, Status};

/// Memory page size from CC.MPS: `2^(12 + mps)` bytes.
pub fn page_size_from_mps(mps: u8) -> Option<u64> {
    if mps > 15 {
        None
    } else {
        Some(1u64 << (12 + u32::from(mps)))
    }
}

/// Why a buffer list cannot be described by PRPs, or a PRP chain is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PrpError {
    /// No data (PRPs describe at least one byte).
    #[error("empty transfer")]
    Empty,
    /// The page size is not a power of two of at least 4 KiB.
    #[error("invalid memory page size {0}")]
    BadPageSize(u64),
    /// The first buffer (PRP1) is not dword aligned.
    #[error("first buffer at {addr:#x} is not dword aligned")]
    UnalignedFirst { addr: u64 },
    /// A buffer after the first does not start on a page boundary.
    #[error("buffer {index} starts at {addr:#x}, not on a page boundary")]
    UnalignedStart { index: usize, addr: u64 },
    /// A buffer before the last does not end on a page boundary.
    #[error("buffer {index} ends at {end:#x}, not on a page boundary")]
    UnalignedEnd { index: usize, end: u64 },
    /// A PRP entry (PRP2 data pointer or list entry) has a non-zero page offset.
    #[error("PRP entry {addr:#x} has a non-zero offset")]
    EntryOffset { addr: u64 },
    /// PRP2 as a list pointer is not qword aligned.
    #[error("PRP list pointer {addr:#x} is not qword aligned")]
    ListPointerUnaligned { addr: u64 },
    /// A transfer length that overflows the address space.
    #[error("transfer length overflows")]
    Overflow,
    /// Reading a list page or writing one failed.
    #[error("memory: {0}")]
    Memory(#[from] MemoryError),
}

impl PrpError {
    /// The NVMe status a controller returns for this error.
    pub fn status(&self) -> Status {
        match self {
            PrpError::Memory(_) | PrpError::Overflow => {
                Status::generic(GenericStatus::DataTransferError)
            }
            PrpError::Empty | PrpError::BadPageSize(_) => {
                Status::generic(GenericStatus::InvalidField)
            }
            _ => Status::generic(GenericStatus::PrpOffsetInvalid),
        }
    }
}

/// A built PRP data pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prp {
    /// PRP entry 1.
    pub prp1: u64,
    /// PRP entry 2: zero, a data page, or a list pointer.
    pub prp2: u64,
    /// Addresses of the list pages allocated (in chain order), to free after completion.
    pub list_pages: Vec<u64>,
}

fn check_page_size(page: u64) -> Result<(), PrpError> {
    if page < 4096 || !page.is_power_of_two() {
        return Err(PrpError::BadPageSize(page));
    }
    Ok(())
}

/// Check that `bufs` can be described by PRPs and return the page entries
/// (first entry may carry an offset).
pub fn page_entries(bufs: &[IoVec], page: u64) -> Result<Vec<u64>, PrpError> {
    check_page_size(page)?;
    let bufs = merge_adjacent(bufs);
    if bufs.is_empty() {
        return Err(PrpError::Empty);
    }
    let mask = page - 1;
    let last = bufs.len() - 1;
    let mut entries = Vec::new();
    for (i, b) in bufs.iter().enumerate() {
        let end = b.addr.checked_add(b.len).ok_or(PrpError::Overflow)?;
        if i == 0 && b.addr & 3 != 0 {
            return Err(PrpError::UnalignedFirst { addr: b.addr });
        }
        if i > 0 && b.addr & mask != 0 {
            return Err(PrpError::UnalignedStart {
                index: i,
                addr: b.addr,
            });
        }
        if i < last && end & mask != 0 {
            return Err(PrpError::UnalignedEnd { index: i, end });
        }
        let mut a = b.addr;
        while a < end {
            entries.push(a);
            a = (a & !mask) + page;
        }
    }
    Ok(entries)
}

/// Build PRP1/PRP2 (and list pages, allocated from `mem`) describing `bufs`.
pub fn build(bufs: &[IoVec], page: u64, mem: &mut impl GuestMemoryMut) -> Result<Prp, PrpError> {
    let entries = page_entries(bufs, page)?;
    let prp1 = entries[0];
    match entries.len() {
        1 => {
            return Ok(Prp {
                prp1,
                prp2: 0,
                list_pages: Vec::new(),
            })
        }
        2 => {
            return Ok(Prp {
                prp1,
                prp2: entries[1],
                list_pages: Vec::new(),
            })
        }
        _ => {}
    }
    let per_page = (page / 8) as usize;
    let mut rest = &entries[1..];
    let mut list_pages = Vec::new();
    let first = mem.alloc(page as usize, page)?;
    list_pages.push(first);
    let mut cur = first;
    let mut raw = Vec::with_capacity(page as usize);
    loop {
        raw.clear();
        if rest.len() <= per_page {
            for e in rest {
                raw.extend_from_slice(&e.to_le_bytes());
            }
            mem.write(cur, &raw)?;
            break;
        }
        let next = mem.alloc(page as usize, page)?;
        list_pages.push(next);
        for e in &rest[..per_page - 1] {
            raw.extend_from_slice(&e.to_le_bytes());
        }
        raw.extend_from_slice(&next.to_le_bytes());
        mem.write(cur, &raw)?;
        rest = &rest[per_page - 1..];
        cur = next;
    }
    Ok(Prp {
        prp1,
        prp2: first,
        list_pages,
    })
}

/// Walk PRP1/PRP2 for a transfer of `len` bytes back into (merged) buffers.
pub fn walk(
    prp1: u64,
    prp2: u64,
    len: u64,
    page: u64,
    mem: &impl GuestMemory,
) -> Result<Vec<IoVec>, PrpError> {
    check_page_size(page)?;
    if len == 0 {
        return Err(PrpError::Empty);
    }
    let mask = page - 1;
    if prp1 & 3 != 0 {
        return Err(PrpError::UnalignedFirst { addr: prp1 });
    }
    let mut out: Vec<IoVec> = Vec::new();
    let push = |out: &mut Vec<IoVec>, addr: u64, n: u64| match out.last_mut() {
        Some(l) if l.end() == addr => l.len += n,
        _ => out.push(IoVec::new(addr, n)),
    };
    let first = len.min(page - (prp1 & mask));
    prp1.checked_add(first).ok_or(PrpError::Overflow)?;
    push(&mut out, prp1, first);
    let mut left = len - first;
    if left == 0 {
        return Ok(out);
    }
    if left <= page {
        if prp2 & mask != 0 {
            return Err(PrpError::EntryOffset { addr: prp2 });
        }
        push(&mut out, prp2, left);
        return Ok(out);
    }
    if prp2 & 7 != 0 {
        return Err(PrpError::ListPointerUnaligned { addr: prp2 });
    }
    let mut list = prp2;
    let mut raw = vec![0u8; page as usize];
    while left > 0 {
        let pages_left = left.div_ceil(page);
        let slots = (page - (list & mask)) / 8;
        let (data_slots, chained) = if pages_left <= slots {
            (pages_left, false)
        } else {
            (slots - 1, true)
        };
        let n = (if chained { slots } else { data_slots }) as usize * 8;
        mem.read(list, &mut raw[..n])?;
        for i in 0..data_slots as usize {
            let mut e = [0u8; 8];
            e.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            let e = u64::from_le_bytes(e);
            if e & mask != 0 {
                return Err(PrpError::EntryOffset { addr: e });
            }
            let take = left.min(page);
            e.checked_add(take).ok_or(PrpError::Overflow)?;
            push(&mut out, e, take);
            left -= take;
        }
        if chained {
            let i = data_slots as usize;
            let mut e = [0u8; 8];
            e.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            list = u64::from_le_bytes(e);
            // Chained list pages start on a page boundary (only PRP2 may carry an
            // offset); this also guarantees progress, so a list that points to
            // itself cannot loop forever.
            if list & mask != 0 {
                return Err(PrpError::EntryOffset { addr: list });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{total_len, FakeMemory};
    use proptest::prelude::*;

    const P: u64 = 4096;

    #[test]
    fn page_size() {
        assert_eq!(page_size_from_mps(0), Some(4096));
        assert_eq!(page_size_from_mps(4), Some(65536));
        assert_eq!(page_size_from_mps(16), None);
    }

    #[test]
    fn one_and_two_pages() {
        let mut m = FakeMemory::default();
        let p = build(&[IoVec::new(0x10_0200, 512)], P, &mut m).unwrap();
        assert_eq!((p.prp1, p.prp2), (0x10_0200, 0));
        let p = build(&[IoVec::new(0x10_0200, 4096)], P, &mut m).unwrap();
        assert_eq!((p.prp1, p.prp2), (0x10_0200, 0x10_1000));
        assert!(p.list_pages.is_empty());
        assert_eq!(
            walk(p.prp1, p.prp2, 4096, P, &m).unwrap(),
            vec![IoVec::new(0x10_0200, 4096)]
        );
        // two separate pages
        let p = build(
            &[IoVec::new(0x5000, 4096), IoVec::new(0x9000, 100)],
            P,
            &mut m,
        )
        .unwrap();
        assert_eq!((p.prp1, p.prp2), (0x5000, 0x9000));
    }

    #[test]
    fn list_with_chaining() {
        let mut m = FakeMemory::default();
        // 600 separate pages: PRP1 + 599 entries; 511 data entries + chain in page 1, 88 in page 2
        let bufs: Vec<IoVec> = (0..600)
            .map(|i| IoVec::new(0x100_0000 + i * 2 * P, P))
            .collect();
        let p = build(&bufs, P, &mut m).unwrap();
        assert_eq!(p.list_pages.len(), 2);
        assert_eq!(p.prp2, p.list_pages[0]);
        let mut chain = [0u8; 8];
        m.read(p.list_pages[0] + 511 * 8, &mut chain).unwrap();
        assert_eq!(u64::from_le_bytes(chain), p.list_pages[1]);
        assert_eq!(walk(p.prp1, p.prp2, 600 * P, P, &m).unwrap(), bufs);
        // exactly 512 list entries fit one page without chaining
        let bufs: Vec<IoVec> = (0..513)
            .map(|i| IoVec::new(0x100_0000 + i * 2 * P, P))
            .collect();
        let p = build(&bufs, P, &mut m).unwrap();
        assert_eq!(p.list_pages.len(), 1);
        assert_eq!(walk(p.prp1, p.prp2, 513 * P, P, &m).unwrap(), bufs);
    }

    #[test]
    fn rejects_what_prp_cannot_express() {
        let mut m = FakeMemory::default();
        assert_eq!(build(&[], P, &mut m), Err(PrpError::Empty));
        assert_eq!(
            build(&[IoVec::new(0x1002, 10)], P, &mut m),
            Err(PrpError::UnalignedFirst { addr: 0x1002 })
        );
        // unaligned middle buffer
        let e = build(
            &[
                IoVec::new(0x1000, 4096),
                IoVec::new(0x3200, 3584),
                IoVec::new(0x5000, 10),
            ],
            P,
            &mut m,
        )
        .unwrap_err();
        assert_eq!(
            e,
            PrpError::UnalignedStart {
                index: 1,
                addr: 0x3200
            }
        );
        assert_eq!(e.status(), Status::generic(GenericStatus::PrpOffsetInvalid));
        // first buffer not ending on a page boundary
        let e = build(
            &[IoVec::new(0x1000, 100), IoVec::new(0x3000, 10)],
            P,
            &mut m,
        )
        .unwrap_err();
        assert_eq!(
            e,
            PrpError::UnalignedEnd {
                index: 0,
                end: 0x1064
            }
        );
        // adjacent buffers merge, so a split inside a page is fine
        let p = build(
            &[IoVec::new(0x1000, 100), IoVec::new(0x1064, 3996)],
            P,
            &mut m,
        )
        .unwrap();
        assert_eq!((p.prp1, p.prp2), (0x1000, 0));
        assert_eq!(
            build(&[IoVec::new(0, 1)], 1000, &mut m),
            Err(PrpError::BadPageSize(1000))
        );
    }

    #[test]
    fn walker_rejects_bad_entries() {
        let mut m = FakeMemory::default();
        assert_eq!(
            walk(0x1000, 0x2010, 8192, P, &m),
            Err(PrpError::EntryOffset { addr: 0x2010 })
        );
        assert_eq!(
            walk(0x1001, 0, 10, P, &m),
            Err(PrpError::UnalignedFirst { addr: 0x1001 })
        );
        assert_eq!(
            walk(0x1000, 0x2004, 3 * P, P, &m),
            Err(PrpError::ListPointerUnaligned { addr: 0x2004 })
        );
        // list pointer to unmapped memory
        assert!(matches!(
            walk(0x1000, 0x9_0000, 3 * P, P, &m),
            Err(PrpError::Memory(_))
        ));
        // list entry with an offset
        m.write(0x8000, &0x3000u64.to_le_bytes()).unwrap();
        m.write(0x8008, &0x4008u64.to_le_bytes()).unwrap();
        assert_eq!(
            walk(0x1000, 0x8000, 3 * P, P, &m),
            Err(PrpError::EntryOffset { addr: 0x4008 })
        );
        // PRP2 list pointer with an offset: the list runs to the end of its page, then chains
        let base = 0x20_0000u64;
        let list = base + P - 16; // room for 2 slots: 1 data + chain
        m.write(list, &0x5000u64.to_le_bytes()).unwrap();
        m.write(list + 8, &(base + 2 * P).to_le_bytes()).unwrap();
        m.write(base + 2 * P, &0x7000u64.to_le_bytes()).unwrap();
        m.write(base + 2 * P + 8, &0x8000u64.to_le_bytes()).unwrap();
        let got = walk(0x1000, list, 4 * P, P, &m).unwrap();
        assert_eq!(
            got,
            vec![
                IoVec::new(0x1000, P),
                IoVec::new(0x5000, P),
                IoVec::new(0x7000, 2 * P)
            ]
        );
    }

    #[test]
    fn self_referencing_list_terminates() {
        let mut m = FakeMemory::default();
        // PRP2 points at the last slot of a page, which points back at itself
        let list = 0x30_0000 + P - 8;
        m.write(list, &list.to_le_bytes()).unwrap();
        assert_eq!(
            walk(0x1000, list, 8 * P, P, &m),
            Err(PrpError::EntryOffset { addr: list })
        );
        // a page-aligned list whose chain entry points to itself: progress each page
        let page = 0x40_0000u64;
        for i in 0..511u64 {
            m.write(page + i * 8, &(0x100_0000 + i * P).to_le_bytes())
                .unwrap();
        }
        m.write(page + 511 * 8, &page.to_le_bytes()).unwrap();
        // 2000 pages: walks the same list page ~4 times, then stops at the length
        let got = walk(0x1000, page, 2000 * P, P, &m).unwrap();
        assert_eq!(total_len(&got), 2000 * P);
    }

    /// A random PRP-expressible layout: first buffer at a dword offset, then whole
    /// pages, last one of any length; gaps between buffers.
    fn layout() -> impl Strategy<Value = (u64, Vec<IoVec>)> {
        (
            0u8..=2,
            prop::collection::vec((0u64..4, 1u64..4, 0u64..4096), 1..40),
            0u64..1024,
            1u64..4096,
        )
            .prop_map(|(mps, segs, first_off, last_len)| {
                let page = 4096u64 << mps;
                let mut addr = 0x10_0000u64 + (first_off * 4) % page;
                let n = segs.len();
                let mut v = Vec::new();
                for (i, (gap, pages, _)) in segs.into_iter().enumerate() {
                    addr = (addr + gap * page) & if i == 0 { !3 } else { !(page - 1) };
                    let start = addr;
                    let end_full = (start & !(page - 1)) + pages * page;
                    let len = if i == n - 1 {
                        (end_full - start).min(last_len * 16).max(1)
                    } else {
                        end_full - start
                    };
                    v.push(IoVec::new(start, len));
                    addr = start + len + page;
                }
                (page, v)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn build_walk_round_trip((page, bufs) in layout()) {
            let mut m = FakeMemory::default();
            let p = build(&bufs, page, &mut m).unwrap();
            let len = total_len(&bufs);
            let got = walk(p.prp1, p.prp2, len, page, &m).unwrap();
            prop_assert_eq!(got, merge_adjacent(&bufs));
        }

        /// The walker never panics, whatever the list pages hold.
        #[test]
        fn walker_total_on_garbage(
            prp1 in proptest::prelude::any::<u64>(),
            prp2 in 0u64..0x4000,
            len in 1u64..100_000,
            page in prop::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        ) {
            let mut m = FakeMemory::new(0x100_0000);
            m.zero_fill_reads = true;
            m.write(0, &page).unwrap();
            let _ = walk(prp1, prp2, len, P, &m);
        }

        /// Any layout: build either succeeds and round-trips, or is rejected with a
        /// reason that really holds.
        #[test]
        fn arbitrary_layouts_round_trip_or_reject(
            bufs in prop::collection::vec((0u64..64, 1u64..10_000), 1..12)
        ) {
            let page = 4096u64;
            let mut addr = 0x100_0000u64;
            let v: Vec<IoVec> = bufs.iter().map(|(gap, len)| {
                addr += gap * 512;
                let b = IoVec::new(addr, *len);
                addr += len;
                b
            }).collect();
            let mut m = FakeMemory::default();
            match build(&v, page, &mut m) {
                Ok(p) => {
                    let got = walk(p.prp1, p.prp2, total_len(&v), page, &m).unwrap();
                    prop_assert_eq!(got, merge_adjacent(&v));
                }
                Err(PrpError::UnalignedFirst { addr }) => prop_assert!(addr % 4 != 0),
                Err(PrpError::UnalignedStart { addr, .. }) => prop_assert!(addr % page != 0),
                Err(PrpError::UnalignedEnd { end, .. }) => prop_assert!(end % page != 0),
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }
    }
}
