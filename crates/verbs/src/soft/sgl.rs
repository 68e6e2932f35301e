//! Scatter/gather lists stored inline in WQEs (no allocation per work request)
//! and the copies between them and packet buffers.

use super::mr::{MrInner, MrTable};
use crate::types::{AccessFlags, Sge};
use std::sync::Arc;

/// Most SGEs per WQE.
pub const MAX_SGE: usize = 8;
/// Most inline bytes per send WQE.
pub const MAX_INLINE: usize = 256;

#[derive(Clone, Copy, Default)]
pub(crate) struct SgList {
    n: u8,
    sge: [Sge; MAX_SGE],
}

impl SgList {
    pub(crate) fn from_slice(s: &[Sge]) -> Option<SgList> {
        if s.len() > MAX_SGE {
            return None;
        }
        let mut l = SgList {
            n: s.len() as u8,
            ..Default::default()
        };
        l.sge[..s.len()].copy_from_slice(s);
        Some(l)
    }
    pub(crate) fn as_slice(&self) -> &[Sge] {
        &self.sge[..self.n as usize]
    }
    pub(crate) fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }
    /// Every SGE names a live MR of `pd` with `need` access and lies inside it.
    pub(crate) fn validate(&self, mrs: &MrTable, pd: u32, need: AccessFlags) -> bool {
        self.as_slice().iter().all(|s| {
            s.length == 0
                || mrs.get(s.lkey).is_some_and(|m| {
                    m.pd == pd
                        && m.access.contains(need)
                        && m.offset_of(s.addr, s.length as u64).is_some()
                })
        })
    }
    /// Walks the byte range `[off, off+len)` of the list, calling `f(mr, mr_offset,
    /// range_in_caller_buffer)`. False if an MR is gone or the range is too long.
    fn walk(
        &self,
        mrs: &MrTable,
        mut off: usize,
        len: usize,
        mut f: impl FnMut(&Arc<MrInner>, usize, std::ops::Range<usize>),
    ) -> bool {
        let mut done = 0;
        for s in self.as_slice() {
            if done == len {
                break;
            }
            let sl = s.length as usize;
            if off >= sl {
                off -= sl;
                continue;
            }
            let n = (sl - off).min(len - done);
            let Some(m) = mrs.get(s.lkey) else {
                return false;
            };
            let Some(mo) = m.offset_of(s.addr + off as u64, n as u64) else {
                return false;
            };
            f(m, mo, done..done + n);
            done += n;
            off = 0;
        }
        done == len
    }
    /// Gathers `dst.len()` bytes starting at byte `off` of the list.
    pub(crate) fn copy_out(&self, mrs: &MrTable, off: usize, dst: &mut [u8]) -> bool {
        let len = dst.len();
        self.walk(mrs, off, len, |m, mo, r| m.copy_out(mo, &mut dst[r]))
    }
    /// Scatters `src` starting at byte `off` of the list.
    pub(crate) fn copy_in(&self, mrs: &MrTable, off: usize, src: &[u8]) -> bool {
        self.walk(mrs, off, src.len(), |m, mo, r| m.copy_in(mo, &src[r]))
    }
}
