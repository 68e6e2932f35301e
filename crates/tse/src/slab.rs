//! A slab of values addressed by (index, generation). Removing a value bumps
//! its slot's generation, so a stale handle is rejected instead of reaching the
//! slot's next occupant, and a handle older than its slot is known to have been
//! removed (for tasks: completed and released).

pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
}

struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

/// Why a lookup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// The value was removed (the handle's generation is older than the slot's).
    Removed,
    /// The handle never named a value here.
    Invalid,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Inserts `val`, returning its (index, generation).
    pub(crate) fn insert(&mut self, val: T) -> (u32, u32) {
        self.live += 1;
        if let Some(idx) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(idx as usize) {
                slot.val = Some(val);
                return (idx, slot.gen);
            }
        }
        let idx = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Slot {
            gen: 0,
            val: Some(val),
        });
        (idx, 0)
    }

    fn miss(&self, idx: u32, gen: u32) -> Miss {
        match self.slots.get(idx as usize) {
            Some(s) if gen < s.gen => Miss::Removed,
            _ => Miss::Invalid,
        }
    }

    pub(crate) fn get(&self, idx: u32, gen: u32) -> Result<&T, Miss> {
        match self.slots.get(idx as usize) {
            Some(Slot {
                gen: g,
                val: Some(v),
            }) if *g == gen => Ok(v),
            _ => Err(self.miss(idx, gen)),
        }
    }

    pub(crate) fn get_mut(&mut self, idx: u32, gen: u32) -> Result<&mut T, Miss> {
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return Err(Miss::Invalid);
        };
        if slot.gen == gen && slot.val.is_some() {
            return slot.val.as_mut().ok_or(Miss::Invalid);
        }
        Err(if gen < slot.gen {
            Miss::Removed
        } else {
            Miss::Invalid
        })
    }

    pub(crate) fn remove(&mut self, idx: u32, gen: u32) -> Option<T> {
        let slot = self.slots.get_mut(idx as usize)?;
        if slot.gen != gen {
            return None;
        }
        let v = slot.val.take()?;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(idx);
        self.live = self.live.saturating_sub(1);
        Some(v)
    }

    /// Like `remove`, dropping the value in place.
    pub(crate) fn free(&mut self, idx: u32, gen: u32) -> bool {
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return false;
        };
        if slot.gen != gen || slot.val.is_none() {
            return false;
        }
        slot.val = None;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(idx);
        self.live = self.live.saturating_sub(1);
        true
    }

    /// (index, generation) of every live value.
    pub(crate) fn handles(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.val.is_some())
            .map(|(i, s)| (i as u32, s.gen))
    }

    /// Iterates over live values with their (index, generation).
    pub(crate) fn iter(&self) -> impl Iterator<Item = ((u32, u32), &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.val.as_ref().map(|v| ((i as u32, s.gen), v)))
    }

    /// Removes every value.
    pub(crate) fn clear(&mut self) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.val.take().is_some() {
                s.gen = s.gen.wrapping_add(1);
                self.free.push(i as u32);
            }
        }
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_reject_stale_handles() {
        let mut s = Slab::new();
        let (i, g) = s.insert("a");
        assert_eq!(s.get(i, g), Ok(&"a"));
        assert_eq!(s.remove(i, g), Some("a"));
        assert_eq!(s.get(i, g), Err(Miss::Removed));
        let (i2, g2) = s.insert("b");
        assert_eq!((i2, g2), (i, g + 1));
        assert_eq!(s.get(i, g), Err(Miss::Removed));
        assert_eq!(s.get(i, g + 5), Err(Miss::Invalid));
        assert_eq!(s.get(9, 0), Err(Miss::Invalid));
        assert_eq!(s.live(), 1);
        assert!(!s.free(i2, g2 + 1));
        assert!(s.free(i2, g2));
        assert!(!s.free(i2, g2));
        assert_eq!(s.get(i2, g2), Err(Miss::Removed));
        let (i3, g3) = s.insert("c");
        assert_eq!((i3, g3), (i2, g2 + 1));
        s.clear();
        assert_eq!(s.live(), 0);
        assert_eq!(s.get(i3, g3), Err(Miss::Removed));
    }

    /// `get_mut` tells a stale handle from one never issued exactly as `get` does: on a
    /// free slot, the slot's own (next) generation was never handed out.
    #[test]
    fn get_mut_misses_like_get() {
        let mut s = Slab::new();
        let (i, g) = s.insert(1u8);
        assert_eq!(s.remove(i, g), Some(1));
        for gen in [g, g + 1, g + 2] {
            assert_eq!(
                s.get_mut(i, gen).err(),
                s.get(i, gen).err(),
                "generation {gen}"
            );
        }
        assert_eq!(s.get_mut(i, g).err(), Some(Miss::Removed));
        assert_eq!(s.get_mut(i, g + 1).err(), Some(Miss::Invalid));
        assert_eq!(s.get_mut(7, 0).err(), Some(Miss::Invalid));
        let (i2, g2) = s.insert(2);
        *s.get_mut(i2, g2).unwrap() = 3;
        assert_eq!(s.get(i2, g2), Ok(&3));
    }
}
