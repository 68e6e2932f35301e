//! Array extents at a read epoch: which stored extent supplies each record
//! (newest version wins per index; indices no extent covers are holes).
//! Pure functions; the store feeds them the extents its index scan found.

use std::collections::BinaryHeap;

use super::keys::Ver;

/// A stored extent as the resolver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ext {
    pub ver: Ver,
    pub idx: u64,
    pub nr: u64,
}

impl Ext {
    pub fn end(&self) -> u64 {
        self.idx.saturating_add(self.nr)
    }
}

/// A run of records `[idx, idx + nr)` supplied by `exts[src]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub idx: u64,
    pub nr: u64,
    pub src: usize,
}

/// For `[lo, hi)`, the pieces of the newest extents covering it, ascending by
/// index. Indices in no piece are holes. A sweep over the extents' clipped
/// boundaries with a max-heap of the extents covering the current point:
/// O(n log n) for n extents.
pub(crate) fn resolve(exts: &[Ext], lo: u64, hi: u64) -> Vec<Piece> {
    let clip = |e: &Ext| (e.idx.max(lo), e.end().min(hi));
    let mut order: Vec<usize> = (0..exts.len())
        .filter(|&i| exts[i].idx < hi && exts[i].end() > lo)
        .collect();
    order.sort_by_key(|&i| clip(&exts[i]).0);
    let mut bps: Vec<u64> = order
        .iter()
        .flat_map(|&i| {
            let (a, b) = clip(&exts[i]);
            [a, b]
        })
        .collect();
    bps.sort_unstable();
    bps.dedup();
    let mut heap: BinaryHeap<(Ver, usize)> = BinaryHeap::new();
    let mut next = 0;
    let mut pieces: Vec<Piece> = Vec::new();
    for w in bps.windows(2) {
        let (s, e) = (w[0], w[1]);
        while next < order.len() && clip(&exts[order[next]]).0 <= s {
            let i = order[next];
            heap.push((exts[i].ver, i));
            next += 1;
        }
        while heap.peek().is_some_and(|&(_, i)| clip(&exts[i]).1 <= s) {
            heap.pop();
        }
        let Some(&(_, src)) = heap.peek() else {
            continue;
        };
        match pieces.last_mut() {
            Some(p) if p.src == src && p.idx + p.nr == s => p.nr += e - s,
            _ => pieces.push(Piece {
                idx: s,
                nr: e - s,
                src,
            }),
        }
    }
    pieces
}

/// Which of `exts` supply at least one record (are visible anywhere).
pub(crate) fn visible_set(exts: &[Ext]) -> Vec<bool> {
    let mut vis = vec![false; exts.len()];
    for p in resolve(exts, 0, u64::MAX) {
        vis[p.src] = true;
    }
    vis
}

/// Merge pieces into maximal runs of written records.
pub(crate) fn runs(pieces: &[Piece]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in pieces {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == p.idx => last.1 += p.nr,
            _ => out.push((p.idx, p.nr)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(epoch: u64, idx: u64, nr: u64) -> Ext {
        Ext {
            ver: Ver { epoch, seq: 0 },
            idx,
            nr,
        }
    }

    #[test]
    fn newest_wins_and_holes_stay() {
        let exts = [e(1, 0, 10), e(2, 4, 2), e(3, 20, 5)];
        let p = resolve(&exts, 0, 30);
        assert_eq!(
            p,
            vec![
                Piece {
                    idx: 0,
                    nr: 4,
                    src: 0
                },
                Piece {
                    idx: 4,
                    nr: 2,
                    src: 1
                },
                Piece {
                    idx: 6,
                    nr: 4,
                    src: 0
                },
                Piece {
                    idx: 20,
                    nr: 5,
                    src: 2
                },
            ]
        );
        assert_eq!(runs(&p), vec![(0, 10), (20, 5)]);
        assert_eq!(visible_set(&[e(1, 4, 2), e(2, 0, 10)]), [false, true]);
        assert_eq!(visible_set(&[e(1, 4, 2), e(2, 0, 5)]), [true, true]);
        assert_eq!(visible_set(&[e(3, 4, 2), e(2, 0, 10)]), [true, true]);
        assert_eq!(
            visible_set(&[e(3, 4, 2), e(2, 0, 10), e(4, 0, 3), e(5, 3, 7)]),
            [false, false, true, true]
        );
    }

    /// The sweep agrees with painting record by record.
    fn naive(exts: &[Ext], lo: u64, hi: u64) -> Vec<Option<usize>> {
        (lo..hi)
            .map(|x| {
                (0..exts.len())
                    .filter(|&i| exts[i].idx <= x && x < exts[i].end())
                    .max_by_key(|&i| exts[i].ver)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn sweep_matches_naive(raw in proptest::collection::vec((0u64..40, 1u64..12), 0..12), lo in 0u64..30, len in 0u64..30) {
            let exts: Vec<Ext> = raw.iter().enumerate().map(|(i, &(idx, nr))| Ext { ver: Ver { epoch: (i as u64 * 7) % 5, seq: i as u64 }, idx, nr }).collect();
            let hi = lo + len;
            let mut got = vec![None; len as usize];
            let mut prev_end = lo;
            for p in resolve(&exts, lo, hi) {
                prop_assert!(p.idx >= prev_end && p.nr > 0);
                prev_end = p.idx + p.nr;
                for x in p.idx..p.idx + p.nr {
                    got[(x - lo) as usize] = Some(p.src);
                }
            }
            prop_assert_eq!(got, naive(&exts, lo, hi));
        }
    }
}
