//! Array extents at a read epoch: which stored extent supplies each record
//! (newest version wins per index; indices no extent covers are holes).
//! Pure functions; the store feeds them the extents its index scan found.

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
/// index. Indices in no piece are holes.
pub(crate) fn resolve(exts: &[Ext], lo: u64, hi: u64) -> Vec<Piece> {
    let mut order: Vec<usize> = (0..exts.len())
        .filter(|&i| exts[i].idx < hi && exts[i].end() > lo)
        .collect();
    order.sort_by(|&a, &b| exts[b].ver.cmp(&exts[a].ver));
    let mut uncovered = vec![(lo, hi)];
    let mut pieces = Vec::new();
    for i in order {
        if uncovered.is_empty() {
            break;
        }
        let e = exts[i];
        let mut next = Vec::with_capacity(uncovered.len() + 1);
        for &(u0, u1) in &uncovered {
            let a = u0.max(e.idx);
            let b = u1.min(e.end());
            if a >= b {
                next.push((u0, u1));
                continue;
            }
            pieces.push(Piece {
                idx: a,
                nr: b - a,
                src: i,
            });
            if u0 < a {
                next.push((u0, a));
            }
            if b < u1 {
                next.push((b, u1));
            }
        }
        uncovered = next;
    }
    pieces.sort_by_key(|p| p.idx);
    pieces
}

/// Whether any record of `exts[which]` is still visible given the others
/// (only newer ones can hide it).
pub(crate) fn any_visible(exts: &[Ext], which: usize) -> bool {
    let x = exts[which];
    let newer: Vec<Ext> = exts
        .iter()
        .filter(|e| e.ver > x.ver && e.idx < x.end() && e.end() > x.idx)
        .copied()
        .collect();
    let covered: u64 = resolve(&newer, x.idx, x.end()).iter().map(|p| p.nr).sum();
    covered < x.nr
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
        assert!(!any_visible(&[e(1, 4, 2), e(2, 0, 10)], 0));
        assert!(any_visible(&[e(1, 4, 2), e(2, 0, 5)], 0));
        assert!(any_visible(&[e(3, 4, 2), e(2, 0, 10)], 0));
    }
}
