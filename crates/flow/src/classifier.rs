//! The OpenFlow table classifier with Open vSwitch's megaflow semantics (lib/classifier.c):
//!
//! * one subtable per distinct mask, visited in order of the highest rule priority they
//!   hold, stopping as soon as no subtable can beat the best match found;
//! * **staged lookup**: a subtable is probed stage by stage (metadata, L2, L3, L4); when a
//!   stage already rules every rule out, only the fields of the stages consulted so far
//!   are added to the wildcard mask;
//! * **prefix tracking** on `nw_dst` and `nw_src` (two prefix tries over all rules): a
//!   subtable whose prefix length cannot match is skipped after un-wildcarding only the
//!   prefix bits the trie needed;
//! * **port-bit narrowing**: when the final stage holds `tp_src`/`tp_dst` and nothing
//!   matches, a per-subtable trie over the rules' ports decides how many leading port bits
//!   had to be looked at.
//!
//! This is the slow path (the "upcall" side). The fast path is [`crate::dp`].

use crate::key::{f, FlowKey, NW, STAGES};
use crate::ofctl::Match;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

/// A fast, deterministic hasher for flow keys (word-wise multiply/rotate); the keys are
/// not attacker-chosen hash-flooding material in this slow-path table (packets are,
/// but a table lookup hashes at most one key per subtable stage).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(a));
        }
        for &b in it.remainder() {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// HashMap keyed by flow keys with [`WordHasher`].
pub type KeyMap<V> = HashMap<FlowKey, V, BuildHasherDefault<WordHasher>>;

/// A binary prefix trie over 32-bit values, with OVS's lookup semantics
/// (`trie_lookup_value`). Nodes are uncompressed; each node counts the rule prefixes
/// ending at it (`n_rules`) and at or below it (`n_below`).
#[derive(Debug, Clone)]
pub struct PrefixTrie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Clone, Copy, Default)]
struct TrieNode {
    child: [u32; 2],
    n_rules: u32,
    n_below: u32,
}

impl Default for PrefixTrie {
    fn default() -> Self {
        PrefixTrie {
            nodes: vec![TrieNode::default()],
        }
    }
}

#[inline]
fn bit_at(v: u32, i: u32) -> usize {
    ((v >> (31 - i)) & 1) as usize
}

impl PrefixTrie {
    /// Adds (or with `add = false` removes) a prefix of `plen` leading bits of `v`.
    pub fn update(&mut self, v: u32, plen: u32, add: bool) {
        if plen == 0 {
            return;
        }
        let mut n = 0usize;
        self.bump(n, add, false);
        for i in 0..plen {
            let b = bit_at(v, i);
            let mut c = self.nodes[n].child[b] as usize;
            if c == 0 {
                if !add {
                    return;
                }
                self.nodes.push(TrieNode::default());
                c = self.nodes.len() - 1;
                self.nodes[n].child[b] = c as u32;
            }
            n = c;
            self.bump(n, add, i + 1 == plen);
        }
    }
    fn bump(&mut self, n: usize, add: bool, end: bool) {
        let node = &mut self.nodes[n];
        if add {
            node.n_below += 1;
            if end {
                node.n_rules += 1;
            }
        } else {
            node.n_below = node.n_below.saturating_sub(1);
            if end {
                node.n_rules = node.n_rules.saturating_sub(1);
            }
        }
    }
    fn live_child(&self, n: usize, b: usize) -> usize {
        let c = self.nodes[n].child[b] as usize;
        if c != 0 && self.nodes[c].n_below > 0 {
            c
        } else {
            0
        }
    }
    /// Returns (bits needed to decide, bitmap of matching prefix lengths: bit L-1 set when a
    /// prefix of length L matches `v`).
    pub fn lookup(&self, v: u32, n_bits: u32) -> (u32, u64) {
        let mut plens = 0u64;
        if self.nodes[0].n_below == 0 {
            return (0, 0);
        }
        let mut n = 0usize;
        let mut d = 0u32;
        loop {
            if d > 0 && self.nodes[n].n_rules > 0 {
                plens |= 1u64 << (d - 1);
            }
            if d >= n_bits {
                return (n_bits, plens);
            }
            let c = self.live_child(n, bit_at(v, d));
            if c == 0 {
                let other = self.live_child(n, 1 - bit_at(v, d));
                return (if other != 0 { d + 1 } else { d }, plens);
            }
            n = c;
            d += 1;
        }
    }
}

#[inline]
fn prefix_mask32(bits: u32) -> u32 {
    if bits == 0 {
        0
    } else if bits >= 32 {
        u32::MAX
    } else {
        u32::MAX << (32 - bits)
    }
}

/// CIDR prefix length of a 32-bit mask, 0 when not a (non-empty) prefix.
fn cidr_len(m: u32) -> u32 {
    if m != 0 && m.leading_ones() + m.trailing_zeros() == 32 {
        m.leading_ones()
    } else {
        0
    }
}

/// The prefix-tracked fields, in OVS's default order (`nw_dst`, then `nw_src`).
const TRIE_FIELDS: [crate::key::Fd; 2] = [f::NW_DST, f::NW_SRC];

#[derive(Debug, Clone)]
struct Subtable {
    mask: FlowKey,
    /// Word ranges of the non-empty stages; the last one is the final stage.
    stages: Vec<Range<usize>>,
    /// Cumulative masks for stages 0..=i (for the indices).
    cum_masks: Vec<FlowKey>,
    /// One index per stage but the last: how many rules have each masked prefix.
    indices: Vec<KeyMap<u32>>,
    /// Rules by masked value: (priority, id), highest priority first.
    rules: KeyMap<Vec<(u16, u32)>>,
    max_priority: i32,
    n_rules: usize,
    trie_plen: [u32; 2],
    ports_mask: u32,
    ports_mask_len: u32,
    ports_trie: PrefixTrie,
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let mut stages = Vec::new();
        for r in STAGES.iter() {
            if mask.w[r.clone()].iter().any(|&w| w != 0) {
                stages.push(r.clone());
            }
        }
        let mut cum_masks = Vec::new();
        let mut acc = FlowKey::ZERO;
        for r in stages.iter() {
            for i in r.clone() {
                acc.w[i] = mask.w[i];
            }
            cum_masks.push(acc);
        }
        let n_idx = stages.len().saturating_sub(1);
        let mut trie_plen = [0; 2];
        for (j, fd) in TRIE_FIELDS.iter().enumerate() {
            trie_plen[j] = cidr_len(mask.get(*fd) as u32);
        }
        let ports_mask = mask.ports();
        Subtable {
            mask,
            stages,
            cum_masks,
            indices: vec![KeyMap::default(); n_idx],
            rules: KeyMap::default(),
            max_priority: -1,
            n_rules: 0,
            trie_plen,
            ports_mask,
            ports_mask_len: if ports_mask != 0 {
                32 - ports_mask.trailing_zeros()
            } else {
                0
            },
            ports_trie: PrefixTrie::default(),
        }
    }

    fn fold_stages(&self, wc: &mut FlowKey, upto: usize) {
        for r in self.stages[..upto].iter() {
            for i in r.clone() {
                wc.w[i] |= self.mask.w[i];
            }
        }
    }
}

/// Per-lookup cache of the prefix trie lookups (done on demand, at most once each).
#[derive(Default, Clone, Copy)]
struct TrieCtx {
    done: bool,
    maskbits: u32,
    plens: u64,
}

/// A priority classifier with OVS's wildcard (megaflow) tracking.
#[derive(Debug, Clone)]
pub struct Classifier {
    subtables: Vec<Subtable>,
    by_mask: KeyMap<usize>,
    /// Subtable indices, highest max_priority first.
    order: Vec<usize>,
    tries: [PrefixTrie; 2],
    use_tries: bool,
    n_rules: usize,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::new()
    }
}

impl Classifier {
    pub fn new() -> Classifier {
        Classifier {
            subtables: Vec::new(),
            by_mask: KeyMap::default(),
            order: Vec::new(),
            tries: [PrefixTrie::default(), PrefixTrie::default()],
            use_tries: true,
            n_rules: 0,
        }
    }
    /// Enables/disables the nw_src/nw_dst prefix tries (OVS `prefixes=none`).
    pub fn set_prefix_tracking(&mut self, on: bool) {
        self.use_tries = on;
    }
    pub fn prefix_tracking(&self) -> bool {
        self.use_tries
    }
    pub fn len(&self) -> usize {
        self.n_rules
    }
    pub fn is_empty(&self) -> bool {
        self.n_rules == 0
    }
    /// Number of distinct masks (subtables) holding rules.
    pub fn n_subtables(&self) -> usize {
        self.subtables.iter().filter(|s| s.n_rules > 0).count()
    }

    fn reorder(&mut self) {
        let mut order: Vec<usize> = (0..self.subtables.len())
            .filter(|&i| self.subtables[i].n_rules > 0)
            .collect();
        order.sort_by(|&a, &b| {
            self.subtables[b]
                .max_priority
                .cmp(&self.subtables[a].max_priority)
                .then(a.cmp(&b))
        });
        self.order = order;
    }

    /// Inserts a rule; a rule with the same match and priority is replaced and its id
    /// returned.
    pub fn insert(&mut self, m: &Match, priority: u16, id: u32) -> Option<u32> {
        let si = match self.by_mask.get(&m.mask) {
            Some(&i) => i,
            None => {
                self.subtables.push(Subtable::new(m.mask));
                let i = self.subtables.len() - 1;
                self.by_mask.insert(m.mask, i);
                i
            }
        };
        let key = m.key.and(&m.mask);
        let st = &mut self.subtables[si];
        let list = st.rules.entry(key).or_default();
        if let Some(pos) = list.iter().position(|&(p, _)| p == priority) {
            let old = list[pos].1;
            list[pos].1 = id;
            return Some(old);
        }
        let pos = list
            .iter()
            .position(|&(p, _)| p < priority)
            .unwrap_or(list.len());
        list.insert(pos, (priority, id));
        st.n_rules += 1;
        st.max_priority = st.max_priority.max(priority as i32);
        for i in 0..st.indices.len() {
            *st.indices[i].entry(key.and(&st.cum_masks[i])).or_insert(0) += 1;
        }
        if st.ports_mask_len > 0 {
            st.ports_trie.update(key.ports(), st.ports_mask_len, true);
        }
        let plens = st.trie_plen;
        for j in 0..2 {
            if plens[j] > 0 {
                self.tries[j].update(key.get(TRIE_FIELDS[j]) as u32, plens[j], true);
            }
        }
        self.n_rules += 1;
        self.reorder();
        None
    }

    /// The id of the rule with exactly this match and priority (an OpenFlow strict
    /// lookup), without a scan of the rules.
    pub fn find(&self, m: &Match, priority: u16) -> Option<u32> {
        let si = *self.by_mask.get(&m.mask)?;
        let list = self.subtables[si].rules.get(&m.key.and(&m.mask))?;
        list.iter()
            .find(|&&(p, _)| p == priority)
            .map(|&(_, id)| id)
    }

    /// Removes the rule with exactly this match and priority; returns its id.
    pub fn remove(&mut self, m: &Match, priority: u16) -> Option<u32> {
        let si = *self.by_mask.get(&m.mask)?;
        let key = m.key.and(&m.mask);
        let st = &mut self.subtables[si];
        let list = st.rules.get_mut(&key)?;
        let pos = list.iter().position(|&(p, _)| p == priority)?;
        let (_, id) = list.remove(pos);
        if list.is_empty() {
            st.rules.remove(&key);
        }
        st.n_rules -= 1;
        for i in 0..st.indices.len() {
            let k = key.and(&st.cum_masks[i]);
            if let Some(c) = st.indices[i].get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    st.indices[i].remove(&k);
                }
            }
        }
        if st.ports_mask_len > 0 {
            st.ports_trie.update(key.ports(), st.ports_mask_len, false);
        }
        st.max_priority = st
            .rules
            .values()
            .filter_map(|l| l.first().map(|&(p, _)| p as i32))
            .max()
            .unwrap_or(-1);
        let plens = st.trie_plen;
        for j in 0..2 {
            if plens[j] > 0 {
                self.tries[j].update(key.get(TRIE_FIELDS[j]) as u32, plens[j], false);
            }
        }
        self.n_rules -= 1;
        self.reorder();
        Some(id)
    }

    /// Returns true if the tries say this subtable cannot match (and un-wildcards the bits
    /// that decided it).
    fn check_tries(
        &self,
        st: &Subtable,
        range: &Range<usize>,
        flow: &FlowKey,
        wc: &mut FlowKey,
        ctx: &mut [TrieCtx; 2],
        use_tries: bool,
    ) -> bool {
        if !use_tries {
            return false;
        }
        for j in 0..2 {
            let plen = st.trie_plen[j];
            let fd = TRIE_FIELDS[j];
            if plen == 0 || !range.contains(&(fd.word as usize)) {
                continue;
            }
            let c = &mut ctx[j];
            if !c.done {
                c.done = true;
                if flow.is_ipv4() {
                    let (mb, pl) = self.tries[j].lookup(flow.get(fd) as u32, 32);
                    c.maskbits = mb;
                    c.plens = pl;
                } else {
                    c.maskbits = 0;
                    c.plens = u64::MAX;
                }
            }
            if c.plens & (1u64 << (plen - 1)) == 0 {
                let pm = prefix_mask32(c.maskbits) as u64;
                if c.maskbits <= plen {
                    wc.or(fd, pm);
                    return true;
                }
                if wc.get(fd) & pm == pm {
                    return true;
                }
            }
        }
        false
    }

    fn find_match_wc(
        &self,
        st: &Subtable,
        flow: &FlowKey,
        wc: &mut FlowKey,
        ctx: &mut [TrieCtx; 2],
        use_tries: bool,
    ) -> Option<(u16, u32)> {
        let n = st.stages.len();
        let n_idx = n.saturating_sub(1);
        for i in 0..n_idx {
            if self.check_tries(st, &st.stages[i], flow, wc, ctx, use_tries) {
                st.fold_stages(wc, i);
                return None;
            }
            if !st.indices[i].contains_key(&flow.and(&st.cum_masks[i])) {
                st.fold_stages(wc, i + 1);
                return None;
            }
        }
        if n > 0 && self.check_tries(st, &st.stages[n - 1], flow, wc, ctx, use_tries) {
            st.fold_stages(wc, n_idx);
            return None;
        }
        let found = st
            .rules
            .get(&flow.and(&st.mask))
            .and_then(|l| l.first().copied());
        if found.is_none() && st.ports_mask_len > 0 {
            // OVS 3.1 (with "classifier: Fix missing masks on a final stage with ports
            // trie", in Debian's 3.1.0-2+deb12u1): every looked-at stage is folded in,
            // the final one included, but the ports get only the bits the ports trie
            // needed (on top of what was already un-wildcarded).
            let value = flow.ports() & st.ports_mask;
            let (mbits, _) = st.ports_trie.lookup(value, 32);
            let before = wc.ports();
            let ports = before | (st.ports_mask & prefix_mask32(mbits));
            st.fold_stages(wc, n);
            let pw = f::TP_SRC.word as usize;
            wc.w[pw] = (wc.w[pw] & 0xffff_ffff) | ((ports as u64) << 32);
            return None;
        }
        for i in 0..NW {
            wc.w[i] |= st.mask.w[i];
        }
        found
    }

    /// Looks `flow` up; ORs into `wc` every bit the lookup depended on. Returns the id of
    /// the highest-priority matching rule.
    pub fn lookup(&self, flow: &FlowKey, wc: &mut FlowKey) -> Option<u32> {
        self.lookup_with(flow, wc, self.use_tries)
    }

    /// [`Self::lookup`] with the prefix tries used or not regardless of this
    /// classifier's own setting (a pipeline applies one setting to all its tables).
    pub fn lookup_with(&self, flow: &FlowKey, wc: &mut FlowKey, use_tries: bool) -> Option<u32> {
        let mut ctx = [TrieCtx::default(); 2];
        let mut best: Option<(u16, u32)> = None;
        for &si in &self.order {
            let st = &self.subtables[si];
            if let Some((bp, _)) = best {
                if st.max_priority <= bp as i32 {
                    break;
                }
            }
            if let Some((p, id)) = self.find_match_wc(st, flow, wc, &mut ctx, use_tries) {
                if best.is_none_or(|(bp, _)| p > bp) {
                    best = Some((p, id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// Plain lookup without wildcard tracking (highest priority match).
    pub fn lookup_plain(&self, flow: &FlowKey) -> Option<u32> {
        let mut best: Option<(u16, u32)> = None;
        for &si in &self.order {
            let st = &self.subtables[si];
            if let Some((bp, _)) = best {
                if st.max_priority <= bp as i32 {
                    break;
                }
            }
            if let Some(&(p, id)) = st.rules.get(&flow.and(&st.mask)).and_then(|l| l.first()) {
                if best.is_none_or(|(bp, _)| p > bp) {
                    best = Some((p, id));
                }
            }
        }
        best.map(|(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_semantics() {
        let mut t = PrefixTrie::default();
        assert_eq!(t.lookup(0x0a000009, 32), (0, 0));
        // 10.0.0.5/32 and 10.0.0.0/24
        t.update(0x0a000005, 32, true);
        t.update(0x0a000000, 24, true);
        let (mb, pl) = t.lookup(0x0a000009, 32);
        assert_eq!(mb, 29); // 10.0.0.8/29 rules out .5
        assert_ne!(pl & (1 << 23), 0);
        assert_eq!(pl & (1 << 31), 0);
        // leaf case: only a /24, value inside it
        let mut t2 = PrefixTrie::default();
        t2.update(0xc0a80100, 24, true);
        let (mb, _) = t2.lookup(0x0a000001, 32);
        assert_eq!(mb, 1);
        t2.update(0xc0a80100, 24, false);
        assert_eq!(t2.lookup(0x0a000001, 32).0, 0);
    }

    #[test]
    fn cidr() {
        assert_eq!(cidr_len(0xffffff00), 24);
        assert_eq!(cidr_len(0xffffffff), 32);
        assert_eq!(cidr_len(0xff00ff00), 0);
        assert_eq!(cidr_len(0), 0);
    }
}
