//! The soft provider's registered memory: the key table the engine looks keys
//! up in (the buffer and registration types, [`MrMem`] and [`MrInner`], are in
//! `crate::region`, shared with the rdma-core provider). The ownership and DMA model
//! is described in the public `verbs::mr` module.

use std::sync::Arc;

pub(crate) use crate::region::{MrInner, MrMem};

/// Key → MR table. Keys are `index << 8 | tag`; the tag changes on reuse so a
/// stale key never reaches a new registration.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Option<Arc<MrInner>>>,
    tags: Vec<u8>,
    free: Vec<usize>,
}

impl MrTable {
    pub(crate) fn alloc_key(&mut self) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.tags.push(0);
                self.slots.len() - 1
            }
        };
        self.tags[i] = self.tags[i].wrapping_add(1);
        ((i as u32 + 1) << 8) | self.tags[i] as u32
    }
    pub(crate) fn insert(&mut self, mr: Arc<MrInner>) {
        let i = (mr.lkey >> 8) as usize - 1;
        self.slots[i] = Some(mr);
    }
    pub(crate) fn get(&self, key: u32) -> Option<&Arc<MrInner>> {
        let i = ((key >> 8) as usize).checked_sub(1)?;
        self.slots.get(i)?.as_ref().filter(|m| m.lkey == key)
    }
    /// Registrations in the table.
    pub(crate) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    pub(crate) fn remove(&mut self, key: u32) {
        if self.get(key).is_some() {
            let i = (key >> 8) as usize - 1;
            self.slots[i] = None;
            self.free.push(i);
        }
    }
}
