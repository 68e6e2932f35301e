//! The datapath flow cache, shaped after OVS's userspace datapath (lib/dpif-netdev.c):
//!
//! * an **exact-match cache** (EMC): a direct-mapped, 2-way array keyed by the full flow
//!   key's hash, pointing at megaflows;
//! * optionally a **signature match cache** (SMC, [`crate::smc`], OVS `smc-enable`):
//!   16-bit signature of the key's hash -> megaflow index, validated by a masked
//!   compare;
//! * a **megaflow classifier** (`dpcls`): one subtable per distinct mask (tuple space
//!   search), each an open-addressing hash table over only the mask's non-zero words;
//!   subtables are probed in order of their recent hits ([`Datapath::sort_subtables`],
//!   OVS `dpcls_sort_subtable_vector`);
//! * on a miss, an **upcall** to the OpenFlow table ([`crate::FlowTable::xlate`]) yields
//!   the megaflow (mask + actions), which is installed;
//! * per-megaflow stats: packets, bytes, last use, OR of TCP flags;
//! * each megaflow remembers the OpenFlow rule its translation went through (a stored
//!   rule id, no lookup on the hit path); [`Datapath::push_stats`] credits the traffic
//!   since the last push to that rule, and [`Datapath::sweep`] (push, megaflow idle
//!   expiry, OpenFlow rule expiry) is the periodic job OVS's revalidator + ofproto run.
//!
//! Sans-IO: the caller passes packets (or parsed keys) and the current time; nothing here
//! reads a clock. The hit path (EMC or megaflow) does not allocate.

use std::collections::HashMap;

use crate::key::{f, FlowKey, NW};
use crate::normal::MacChanges;
use crate::offload::{FlowSpec, HwRx, HwStats, Offload, OffloadOp, OffloadState};
use crate::smc::Smc;
use crate::xlate::{format_actions, format_megaflow, FlowTable, OdpAction};

/// Hash of a (masked) flow key over the given words: multiply-xorshift, like a
/// word-at-a-time FxHash; deterministic (no random state).
#[inline]
pub fn hash_words(k: &FlowKey, words: &[u8], basis: u64) -> u64 {
    mix_words(basis, words.iter().map(|&i| k.w[i as usize]))
}

/// The hash function of [`hash_words`] over any sequence of words (a subtable's
/// masked key words: placing a flow and looking a key up use it with basis 0).
#[inline(always)]
fn mix_words(basis: u64, v: impl IntoIterator<Item = u64>) -> u64 {
    let mut h = basis ^ 0x9e37_79b9_7f4a_7c15;
    for x in v {
        h = (h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
}

/// The words a packet's key can have non-zero: all but the pipeline metadata words
/// (registers, `metadata`), which are zero in every datapath key.
const ALL_WORDS: [u8; NW - 9] = [0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23];

/// Hash of a full flow key (all words), used by the EMC.
#[inline]
pub fn hash_key(k: &FlowKey) -> u64 {
    hash_words(k, &ALL_WORDS, 0)
}

/// Per-megaflow statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    pub packets: u64,
    pub bytes: u64,
    /// Time of last use, in the caller's clock (e.g. ms); 0 = never.
    pub used: u64,
    /// OR of the TCP flags seen.
    pub tcp_flags: u16,
}

/// An installed megaflow.
#[derive(Debug, Clone)]
pub struct Megaflow {
    /// Masked key (value & mask).
    pub key: FlowKey,
    pub mask: FlowKey,
    pub actions: Vec<OdpAction>,
    pub stats: FlowStats,
    /// Install time (the caller's clock, as for `stats.used`).
    pub created: u64,
    /// The table-0 rule the translation went through (None: table miss).
    pub rule: Option<u32>,
    /// The rules of later tables it went through (goto_table / resubmit), each credited
    /// like `rule`; the rules that were looked at and did not match are not credited (as
    /// in OVS, which credits the rules of its xlate cache: the matched rule of each
    /// table visited).
    pub later_rules: Box<[u32]>,
    /// The groups (and chosen bucket; None = all) it executed, credited like the rules.
    pub groups: Box<[(u32, Option<u32>)]>,
    /// MACs NORMAL learned for it, refreshed when it has traffic.
    pub learned: Box<[(u64, u16, u32)]>,
    /// The MAC-table entries (MAC, VLAN) its NORMAL decisions looked up: when one
    /// changes the megaflow is translated again (not the others).
    pub mac_deps: Box<[(u64, u16)]>,
    /// Unique flow id (stable for the megaflow's life; offload ops are keyed by it).
    pub ufid: u64,
    /// The key of the packet whose upcall installed it (what the revalidator
    /// translates again).
    pub orig_key: FlowKey,
    /// Hardware counters collected so far (full offload; the revalidator reads them).
    pub hw: HwStats,
    /// Where the flow is offloaded.
    pub offload: OffloadState,
    /// `stats` packets/bytes already credited to `rule`.
    pushed: (u64, u64),
    /// The upcall's packet(s)/bytes, credited to `rule` at the next push (not part of
    /// `stats`, as in OVS).
    upcall_credit: (u64, u64),
    subtable: u32,
    alive: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u64,
    /// Megaflow index + 1 (0 = empty).
    flow: u32,
}

const EMPTY: Slot = Slot { hash: 0, flow: 0 };

#[derive(Debug, Clone)]
struct Subtable {
    /// Indices of the non-zero mask words (what the hash and compare look at).
    words: [u8; NW],
    /// The mask values of those words.
    mwords: [u64; NW],
    nw: usize,
    slots: Vec<Slot>,
    /// Masked key words of the flow in each slot (`nw` per slot), so a probe never
    /// touches the megaflow records.
    keys: Vec<u64>,
    n: usize,
    hits: u64,
}

/// The indices of the set bits of a map of packets, lowest first.
struct SetBits(u64);

impl Iterator for SetBits {
    type Item = usize;
    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

#[inline(always)]
fn set_bits(m: u64) -> SetBits {
    SetBits(m)
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let mut words = [0u8; NW];
        let mut mwords = [0u64; NW];
        let mut nw = 0;
        for i in 0..NW {
            if mask.w[i] != 0 {
                words[nw] = i as u8;
                mwords[nw] = mask.w[i];
                nw += 1;
            }
        }
        Subtable {
            words,
            mwords,
            nw,
            slots: vec![EMPTY; 16],
            keys: vec![0; 16 * nw],
            n: 0,
            hits: 0,
        }
    }
    /// The masked non-zero words of `k`.
    #[inline(always)]
    fn extract(&self, k: &FlowKey, out: &mut [u64; NW]) {
        for ((o, &w), &m) in out
            .iter_mut()
            .zip(&self.words[..self.nw])
            .zip(&self.mwords[..self.nw])
        {
            *o = k.w[w as usize] & m;
        }
    }
    /// The slot of the flow whose masked key is `k`'s under this mask.
    #[inline(always)]
    fn find(&self, k: &FlowKey) -> Option<usize> {
        self.probe(k, self.hash_of(k))
    }
    /// Hash of `k` under this mask (what the slots are placed by).
    #[inline(always)]
    fn hash_of(&self, k: &FlowKey) -> u64 {
        // over the masked words, without storing them
        mix_words(
            0,
            self.words[..self.nw]
                .iter()
                .zip(&self.mwords[..self.nw])
                .map(|(&w, &m)| k.w[w as usize] & m),
        )
    }
    /// `k` under this mask equals the compact masked key in `slot` (in range).
    #[inline(always)]
    fn key_at_matches(&self, k: &FlowKey, slot: usize) -> bool {
        self.keys[slot * self.nw..(slot + 1) * self.nw]
            .iter()
            .zip(&self.words[..self.nw])
            .zip(&self.mwords[..self.nw])
            .all(|((&v, &w), &m)| k.w[w as usize] & m == v)
    }
    /// Prefetches the first slot a key of masked hash `h` probes (and its key words).
    #[inline(always)]
    fn prefetch_hash(&self, h: u64) {
        self.prefetch_slot((h as usize) & (self.slots.len() - 1));
    }
    /// [`Self::find`] with `h` = [`Self::hash_of`] `k`.
    #[inline(always)]
    fn probe(&self, k: &FlowKey, h: u64) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        loop {
            let s = self.slots[i];
            if s.flow == 0 {
                return None;
            }
            if s.hash == h && self.key_at_matches(k, i) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }
    /// The megaflow index in `slot` if `k` matches the flow there under this mask
    /// (an SMC candidate's validation: the slot's compact masked key is compared,
    /// the megaflow record is not fetched). Any slot number is safe: out of range or
    /// empty is None.
    #[inline(always)]
    fn matches_at(&self, k: &FlowKey, slot: usize) -> Option<u32> {
        let s = self.slots.get(slot)?;
        if s.flow == 0 {
            return None;
        }
        self.keys.get(slot * self.nw..(slot + 1) * self.nw)?;
        self.key_at_matches(k, slot).then_some(s.flow - 1)
    }
    /// Prefetches what [`Self::matches_at`] reads for `slot`.
    #[inline(always)]
    fn prefetch_slot(&self, slot: usize) {
        if let Some(s) = self.slots.get(slot) {
            crate::smc::prefetch(s);
        }
        if let Some(v) = self.keys.get(slot * self.nw) {
            crate::smc::prefetch(v);
        }
    }
    fn place(&mut self, h: u64, flow: u32, kw: &[u64]) {
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        while self.slots[i].flow != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot { hash: h, flow };
        self.keys[i * self.nw..(i + 1) * self.nw].copy_from_slice(kw);
    }
    fn insert(&mut self, key: &FlowKey, id: u32) {
        if (self.n + 1) * 2 > self.slots.len() {
            let new_len = self.slots.len() * 2;
            let old = std::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
            let old_keys = std::mem::replace(&mut self.keys, vec![0; new_len * self.nw]);
            for (j, s) in old.iter().enumerate() {
                if s.flow != 0 {
                    let kw: Vec<u64> = old_keys[j * self.nw..(j + 1) * self.nw].to_vec();
                    self.place(s.hash, s.flow, &kw);
                }
            }
        }
        let mut m = [0u64; NW];
        self.extract(key, &mut m);
        let h = mix_words(0, m[..self.nw].iter().copied());
        let kw = m;
        self.place(h, id + 1, &kw[..self.nw]);
        self.n += 1;
    }
}

/// EMC geometry (OVS: 8192 entries, 2 hash segments).
pub const EMC_ENTRIES: usize = 8192;

#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct EmcEntry {
    /// [`hash_key`] of `key`, compared first (OVS `emc_lookup`): a miss reads one
    /// cache line of the entry, not the key's three.
    hash: u64,
    /// Megaflow index + 1 (0 = empty).
    flow: u32,
    key: FlowKey,
}

/// Where a lookup was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    Emc,
    Megaflow,
    Upcall,
    /// Signature match cache (validated), no classifier lookup.
    Smc,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpStats {
    pub emc_hits: u64,
    /// Lookups the SMC resolved (OVS pmd-stats "smc hits").
    pub smc_hits: u64,
    /// SMC candidates that failed validation (stale or colliding entries).
    pub smc_rejects: u64,
    pub megaflow_hits: u64,
    pub upcalls: u64,
    /// Subtables probed by megaflow lookups (avg = probes / lookups).
    pub subtable_probes: u64,
    /// Recirculations executed (select groups).
    pub recirculations: u64,
    /// Packets dropped for recirculating more than [`MAX_RECIRC_DEPTH`] times.
    pub recirc_too_deep: u64,
    /// Packets the NIC forwarded (full offload): software never saw them.
    pub hw_forwarded: u64,
    /// Packets software ran by the NIC's mark (partial offload: no classifier lookup).
    pub mark_hits: u64,
    /// Upcalls whose megaflow was not installed because the datapath held
    /// [`Datapath::flow_limit`] flows (OVS coverage `upcall_flow_limit_hit`): the
    /// packet was executed by the slow path.
    pub flow_limit_hits: u64,
    /// Slow-path packets not credited to their rules because too many waited for
    /// the next stats push ([`MAX_SLOW_CREDITS`]).
    pub uncredited: u64,
    /// Megaflows translated again because a MAC they depend on was learned, moved,
    /// aged or evicted (instead of flushing every megaflow).
    pub mac_revalidated: u64,
}

/// OVS's default `flow-limit` (the revalidator's configured limit starts here).
pub const DEFAULT_FLOW_LIMIT: usize = 200_000;

/// Slow-path packets (over the flow limit) kept for crediting their rules at the
/// next [`Datapath::push_stats`]; more are counted in [`DpStats::uncredited`].
pub const MAX_SLOW_CREDITS: usize = 4096;

/// Classifier lookups between two re-sorts of the subtables by hits (OVS re-sorts
/// every second, `DPCLS_OPTIMIZATION_INTERVAL`; counting lookups keeps `dpcls_lookup`
/// free of a clock: at 1–10 M lookups/s this is every 6–60 ms).
pub const RANK_INTERVAL: u64 = 1 << 16;

/// Packets per group of [`Datapath::lookup_batch`] (OVS `NETDEV_MAX_BURST`).
pub const LOOKUP_BATCH: usize = 32;

/// dpif-netdev's `MAX_RECIRC_DEPTH`.
pub const MAX_RECIRC_DEPTH: usize = 6;

/// What one [`Datapath::sweep`] / [`Datapath::revalidate`] did.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// Megaflows removed for being idle.
    pub megaflows_expired: usize,
    /// OpenFlow rules removed by their idle/hard timeout (their megaflows were
    /// revalidated).
    pub rules_expired: Vec<crate::ofproto::Expired>,
    /// Megaflows translated again (the table changed) and kept as they were.
    pub kept: usize,
    /// Megaflows whose actions (or credited rules) changed: modified in place.
    pub modified: usize,
    /// Megaflows deleted because their match no longer holds for the new table.
    pub deleted_changed: usize,
    /// Megaflows deleted because the datapath held more than twice the flow limit.
    pub deleted_limit: usize,
    /// Of `kept + modified + deleted_changed`: megaflows translated again because a
    /// MAC-table entry their NORMAL decision looked up changed (no table change).
    pub mac_revalidated: usize,
    /// Hardware counters were read in this round.
    pub hw_queried: bool,
}

/// Per-round settings of [`Datapath::revalidate`].
#[derive(Debug, Clone, Copy)]
pub struct RevalParams {
    /// Idle time after which a megaflow goes (ms).
    pub max_idle: u64,
    /// Delete every megaflow (OVS: more than twice the flow limit).
    pub kill_all: bool,
    /// Read hardware counters in this round (offloaded-stats-delay passed).
    pub query_hw: bool,
}

/// What [`Datapath::reval_flow`] decided for one megaflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Keep,
    Modified,
    Delete,
}

/// The datapath cache.
#[derive(Debug)]
pub struct Datapath {
    emc: Vec<EmcEntry>,
    emc_enabled: bool,
    subtables: Vec<Subtable>,
    /// Probe order (indices into `subtables`), most hits first.
    order: Vec<u32>,
    by_mask: std::collections::HashMap<FlowKey, u32>,
    flows: Vec<Megaflow>,
    pub stats: DpStats,
    lookups_since_sort: u64,
    /// Subtables re-sorted by hits every [`RANK_INTERVAL`] classifier lookups (off:
    /// they stay in creation order).
    ranking: bool,
    /// The signature match cache (None: smc-enable=false, OVS's default).
    smc: Option<Box<Smc>>,
    /// Latest time seen by `process` (install time of new megaflows).
    clock: u64,
    /// Megaflows flushed during an upcall (NORMAL's table changed) whose traffic was
    /// not credited yet: credited at the next [`Self::push_stats`].
    orphans: Vec<Megaflow>,
    next_ufid: u64,
    /// ufid -> index into `flows`.
    by_ufid: HashMap<u64, u32>,
    /// Partial offload: mark -> ufid.
    by_mark: HashMap<u32, u64>,
    /// MAC-table entry -> ufids of the megaflows whose NORMAL decision looked it up
    /// (may hold ufids of flows gone or changed since: checked on use; rebuilt with
    /// the tables).
    by_mac: HashMap<(u64, u16), Vec<u64>>,
    /// The offload pipeline (hw-offload on).
    offload: Option<Offload>,
    /// The table changed since the last revalidation: every megaflow is translated
    /// again at the next [`Self::revalidate`].
    need_revalidate: bool,
    /// Most megaflows an upcall installs into (OVS `flow_limit`, kept by the
    /// revalidator); past it upcalls run in the slow path without installing.
    pub flow_limit: usize,
    /// The last slow-path translation (its actions are what `process` returns).
    slow: Option<Megaflow>,
}

impl Default for Datapath {
    fn default() -> Self {
        Datapath::new()
    }
}

impl Datapath {
    pub fn new() -> Datapath {
        Datapath {
            emc: vec![
                EmcEntry {
                    hash: 0,
                    flow: 0,
                    key: FlowKey::ZERO,
                };
                EMC_ENTRIES
            ],
            emc_enabled: true,
            subtables: Vec::new(),
            order: Vec::new(),
            by_mask: Default::default(),
            flows: Vec::new(),
            stats: DpStats::default(),
            lookups_since_sort: 0,
            ranking: true,
            smc: None,
            clock: 0,
            orphans: Vec::new(),
            next_ufid: 1,
            by_ufid: HashMap::new(),
            by_mark: HashMap::new(),
            by_mac: HashMap::new(),
            offload: None,
            need_revalidate: false,
            flow_limit: DEFAULT_FLOW_LIMIT,
            slow: None,
        }
    }

    /// Turns hardware offload on (`Some`) or off (`None`): the old pipeline's flows
    /// are flushed from its providers; with a new one every installed megaflow is
    /// queued for offload.
    pub fn set_offload(&mut self, o: Option<Offload>) {
        if let Some(old) = self.offload.as_mut() {
            old.enqueue(OffloadOp::Flush);
        }
        self.by_mark.clear();
        for fl in self.flows.iter_mut() {
            fl.offload = OffloadState::None;
        }
        self.offload = o;
        if self.offload.is_some() {
            let ids: Vec<u32> = (0..self.flows.len() as u32)
                .filter(|&i| self.flows[i as usize].alive)
                .collect();
            for i in ids {
                self.enqueue_put(i, false);
            }
        }
    }
    /// The offload pipeline, if hw-offload is on.
    pub fn offload(&self) -> Option<&Offload> {
        self.offload.as_ref()
    }
    pub fn offload_mut(&mut self) -> Option<&mut Offload> {
        self.offload.as_mut()
    }

    fn enqueue_put(&mut self, idx: u32, modify: bool) {
        let Some(o) = self.offload.as_mut() else {
            return;
        };
        let fl = &mut self.flows[idx as usize];
        let spec = FlowSpec {
            key: fl.key,
            mask: fl.mask,
            actions: fl.actions.clone(),
        };
        let ufid = fl.ufid;
        if let OffloadState::Partial { mark, .. } = fl.offload {
            self.by_mark.remove(&mark);
        }
        fl.offload = OffloadState::Pending;
        o.enqueue(if modify {
            OffloadOp::Mod { ufid, spec }
        } else {
            OffloadOp::Add { ufid, spec }
        });
    }

    /// Applies the offload threads' results: each flow's state, the mark map. Cheap
    /// when nothing is ready (the forwarding loop calls it every round).
    pub fn offload_poll(&mut self) -> usize {
        let Some(o) = self.offload.as_ref() else {
            return 0;
        };
        let mut n = 0;
        while let Some(d) = o.try_result() {
            n += 1;
            let Some(&i) = self.by_ufid.get(&d.ufid) else {
                continue; // deleted meanwhile (its Del is queued behind)
            };
            let fl = &mut self.flows[i as usize];
            if !fl.alive {
                continue;
            }
            // A flow's ops run in order on one thread: the last result is its state.
            if let OffloadState::Partial { mark, .. } = fl.offload {
                self.by_mark.remove(&mark);
            }
            fl.offload = d.state;
            if let OffloadState::Partial { mark, .. } = fl.offload {
                self.by_mark.insert(mark, fl.ufid);
            }
        }
        n
    }

    /// Marks the table as changed: the next [`Self::revalidate`] translates every
    /// megaflow again (what replaces flushing them).
    pub fn table_changed(&mut self) {
        self.need_revalidate = true;
    }
    /// Whether a table change waits for revalidation.
    pub fn needs_revalidation(&self) -> bool {
        self.need_revalidate
    }
    /// Turns the EMC on/off (off: every lookup goes to the megaflow classifier).
    pub fn set_emc(&mut self, on: bool) {
        self.emc_enabled = on;
        self.emc_clear();
    }
    /// Turns the signature match cache on (a fresh table of [`crate::smc::SMC_ENTRIES`]
    /// entries, allocated now) or off (freed). OVS `other_config:smc-enable`.
    pub fn set_smc(&mut self, on: bool) {
        self.set_smc_entries(on.then_some(crate::smc::SMC_ENTRIES));
    }
    /// Like [`Self::set_smc`] with a table of about `entries` entries.
    pub fn set_smc_entries(&mut self, entries: Option<usize>) {
        self.smc = entries.map(|n| Box::new(Smc::new(n)));
    }
    /// Whether the SMC is on.
    pub fn smc_enabled(&self) -> bool {
        self.smc.is_some()
    }
    /// Turns subtable ranking on (default) or off (subtables probed in creation
    /// order; for comparisons).
    pub fn set_ranking(&mut self, on: bool) {
        self.ranking = on;
        if !on {
            self.order.sort_unstable();
        }
    }
    fn emc_clear(&mut self) {
        for e in self.emc.iter_mut() {
            e.flow = 0;
        }
    }
    /// Number of installed megaflows.
    pub fn n_flows(&self) -> usize {
        self.flows.iter().filter(|f| f.alive).count()
    }
    /// Number of masks (subtables).
    pub fn n_masks(&self) -> usize {
        self.subtables.len()
    }
    pub fn flows(&self) -> impl Iterator<Item = &Megaflow> {
        self.flows.iter().filter(|f| f.alive)
    }
    /// Removes every megaflow (their uncredited traffic is lost: push first).
    pub fn flush(&mut self) {
        if let Some(o) = self.offload.as_mut() {
            o.enqueue(OffloadOp::Flush);
        }
        self.by_ufid.clear();
        self.by_mark.clear();
        self.by_mac.clear();
        self.emc_clear();
        self.subtables.clear();
        self.order.clear();
        self.by_mask.clear();
        self.flows.clear();
    }

    /// Installs a megaflow (masked key + mask + actions) that credits no rule; returns
    /// its index.
    pub fn install(&mut self, key: &FlowKey, mask: &FlowKey, actions: Vec<OdpAction>) -> u32 {
        self.install_for(key, mask, actions, None)
    }

    /// Installs a megaflow whose traffic is credited to `rules` (in order: the table-0
    /// rule first, then the rules of later tables).
    pub fn install_rules(
        &mut self,
        key: &FlowKey,
        mask: &FlowKey,
        actions: Vec<OdpAction>,
        rules: &[u32],
    ) -> u32 {
        let id = self.install_for(key, mask, actions, rules.first().copied());
        if rules.len() > 1 {
            self.flows[id as usize].later_rules = rules[1..].into();
        }
        id
    }

    /// Installs a megaflow whose traffic is credited to OpenFlow rule `rule`.
    pub fn install_for(
        &mut self,
        key: &FlowKey,
        mask: &FlowKey,
        actions: Vec<OdpAction>,
        rule: Option<u32>,
    ) -> u32 {
        let st = match self.by_mask.get(mask) {
            Some(&i) => i,
            None => {
                self.subtables.push(Subtable::new(*mask));
                let i = (self.subtables.len() - 1) as u32;
                self.by_mask.insert(*mask, i);
                self.order.push(i);
                i
            }
        };
        let id = self.flows.len() as u32;
        let mk = key.and(mask);
        let ufid = self.next_ufid;
        self.next_ufid += 1;
        self.by_ufid.insert(ufid, id);
        self.flows.push(Megaflow {
            key: mk,
            mask: *mask,
            actions,
            stats: FlowStats::default(),
            created: self.clock,
            rule,
            later_rules: Box::default(),
            groups: Box::default(),
            learned: Box::default(),
            mac_deps: Box::default(),
            ufid,
            orig_key: *key,
            hw: HwStats::default(),
            offload: OffloadState::None,
            pushed: (0, 0),
            upcall_credit: (0, 0),
            subtable: st,
            alive: true,
        });
        self.subtables[st as usize].insert(&mk, id);
        if self.offload.is_some() {
            self.enqueue_put(id, false);
        }
        id
    }

    /// Credits each megaflow's traffic since the last push (plus its upcall packet) to
    /// the OpenFlow rule its translation went through (OVS: the revalidator pushes the
    /// datapath flow stats delta to the rules of the ukey's xlate cache). Call before
    /// [`Self::flush`] / table changes so nothing is lost. Does not allocate.
    pub fn push_stats(&mut self, table: &mut FlowTable) {
        let mut orphans = std::mem::take(&mut self.orphans);
        for fl in self
            .flows
            .iter_mut()
            .filter(|f| f.alive)
            .chain(orphans.iter_mut())
        {
            let (p0, b0) = fl.pushed;
            let (up, ub) = fl.upcall_credit;
            let (tp, tb) = (
                fl.stats.packets + fl.hw.packets,
                fl.stats.bytes + fl.hw.bytes,
            );
            let dp = tp - p0 + up;
            let db = tb - b0 + ub;
            if dp > 0 {
                // The upcall's packet was used at install time.
                let used = if up > 0 {
                    fl.stats.used.max(fl.created).max(fl.hw.used)
                } else {
                    fl.stats.used.max(fl.hw.used)
                };
                if let Some(r) = fl.rule {
                    table.credit(r, dp, db, used);
                }
                for &r in fl.later_rules.iter() {
                    table.credit(r, dp, db, used);
                }
                for &(g, b) in fl.groups.iter() {
                    table.credit_group(g, b, dp, db);
                }
                // XC_NORMAL: only datapath traffic refreshes the MACs (the upcall
                // learned at its own time; re-learning for its credit would move a
                // MAC back to where it was before a later move)
                if !fl.learned.is_empty() && tp > p0 {
                    let mut ml = table.bridge.ml.borrow_mut();
                    for &(mac, vlan, port) in fl.learned.iter() {
                        ml.learn(mac, vlan, port, fl.stats.used.max(fl.hw.used));
                    }
                }
            }
            fl.pushed = (tp, tb);
            fl.upcall_credit = (0, 0);
        }
    }

    /// The periodic job (`now` in ms) with OVS's defaults otherwise: one
    /// [`Self::revalidate`] round with `max_idle`, hardware counters read every time.
    pub fn sweep(&mut self, table: &mut FlowTable, now: u64, max_idle: u64) -> Sweep {
        self.revalidate(
            table,
            now,
            RevalParams {
                max_idle,
                kill_all: false,
                query_hw: true,
            },
        )
    }

    /// Reads the hardware counters of fully offloaded flows (COUNT query with reset)
    /// into each flow's `hw`. Returns how many flows were read.
    pub fn query_hw_stats(&mut self) -> usize {
        let Some(o) = self.offload.as_ref() else {
            return 0;
        };
        let mut n = 0;
        for fl in self.flows.iter_mut().filter(|f| f.alive) {
            if let OffloadState::Full { provider, .. } = fl.offload {
                if let Ok(st) = o.provider(provider).stats(fl.ufid, true) {
                    fl.hw.packets += st.packets;
                    fl.hw.bytes += st.bytes;
                    fl.hw.used = fl.hw.used.max(st.used);
                    n += 1;
                }
            }
        }
        n
    }

    /// One revalidator round (OVS ofproto-dpif-upcall `revalidate` + `rule_expire`):
    /// apply offload results; read hardware counters (`p.query_hw`); push every
    /// megaflow's software + hardware traffic to its rules; run MAC aging and rule
    /// timeouts (each a table change); then, flow by flow: delete it when idle for
    /// `p.max_idle` (or `p.kill_all`); after a table change translate its upcall key
    /// again: **deleted** when the new megaflow needs bits the installed mask lacks
    /// (its match no longer holds), **modified** in place when only the actions (or
    /// the rules it credits) changed, **kept** otherwise. No flush.
    pub fn revalidate(&mut self, table: &mut FlowTable, now: u64, p: RevalParams) -> Sweep {
        let mut sw = Sweep::default();
        self.offload_poll();
        if p.query_hw {
            sw.hw_queried = self.offload.is_some();
            self.query_hw_stats();
        }
        self.push_stats(table);
        // NORMAL's MAC aging (mac_learning_run); the megaflows that looked up an
        // entry that went are translated again (all of them when too many went).
        let fdb = {
            let mut ml = table.bridge.ml.borrow_mut();
            ml.run(now);
            ml.take_changes()
        };
        sw.rules_expired = table.expire(now);
        if !sw.rules_expired.is_empty() || fdb == Some(MacChanges::All) {
            self.need_revalidate = true;
        }
        let reval = std::mem::take(&mut self.need_revalidate);
        if let (Some(ch), false) = (fdb, reval) {
            self.mac_changed(table, ch, &mut sw);
        }
        let mut remove = vec![false; self.flows.len()];
        let mut modified = Vec::new();
        #[allow(clippy::needless_range_loop)] // reval_flow needs &mut self
        for i in 0..self.flows.len() {
            let fl = &self.flows[i];
            if !fl.alive {
                remove[i] = true;
                continue;
            }
            if p.kill_all {
                remove[i] = true;
                sw.deleted_limit += 1;
                continue;
            }
            let used = fl.stats.used.max(fl.hw.used).max(fl.created);
            if used.saturating_add(p.max_idle) <= now {
                remove[i] = true;
                sw.megaflows_expired += 1;
                continue;
            }
            if !reval {
                continue;
            }
            match self.reval_flow(table, i as u32) {
                Verdict::Delete => {
                    remove[i] = true;
                    sw.deleted_changed += 1;
                }
                Verdict::Modified => {
                    modified.push(i as u32);
                    sw.modified += 1;
                }
                Verdict::Keep => sw.kept += 1,
            }
        }
        for i in modified {
            if self.offload.is_some() {
                self.enqueue_put(i, true);
            }
        }
        if remove.iter().any(|&r| r) {
            self.remove_flows(&remove);
        }
        sw
    }

    /// Translates megaflow `i`'s upcall key again with the current table (no side
    /// effects): [`Verdict::Delete`] when the new megaflow needs mask bits the
    /// installed one lacks (OVS `flow_wildcards_has_extra`: its match no longer
    /// holds), else its actions / credited rules / groups / MAC dependencies are
    /// updated in place ([`Verdict::Modified`] if the actions, rules or groups
    /// changed; the caller queues the offload MOD).
    fn reval_flow(&mut self, table: &FlowTable, i: u32) -> Verdict {
        let fl = &self.flows[i as usize];
        let mut x = table.xlate(&fl.orig_key);
        x.wc.or(f::VLAN0_TCI, crate::key::VLAN_CFI as u64);
        if (0..NW).any(|w| x.wc.w[w] & !fl.mask.w[w] != 0) {
            return Verdict::Delete;
        }
        let rules_same = x.rules.first().copied() == fl.rule
            && x.rules.get(1..).unwrap_or(&[]) == &fl.later_rules[..];
        let deps_same = x.mac_deps[..] == fl.mac_deps[..];
        let changed = x.actions != fl.actions || !rules_same || x.groups[..] != fl.groups[..];
        let fl = &mut self.flows[i as usize];
        if changed {
            fl.actions = x.actions;
            fl.rule = x.rules.first().copied();
            fl.later_rules = x.rules.get(1..).unwrap_or(&[]).into();
            fl.groups = x.groups.into();
            if !x.learned.is_empty() {
                fl.learned = x.learned.into();
            }
        }
        if !deps_same {
            fl.mac_deps = x.mac_deps.into();
            self.register_mac_deps(i);
        }
        if changed {
            Verdict::Modified
        } else {
            Verdict::Keep
        }
    }

    /// Adds megaflow `i` under each MAC-table entry it depends on.
    fn register_mac_deps(&mut self, i: u32) {
        let fl = &self.flows[i as usize];
        for d in fl.mac_deps.iter() {
            let v = self.by_mac.entry(*d).or_default();
            if !v.contains(&fl.ufid) {
                v.push(fl.ufid);
            }
        }
    }

    /// NORMAL's MAC table changed: translates again, now, only the megaflows whose
    /// NORMAL decision looked up a changed entry (every NORMAL megaflow for
    /// [`MacChanges::All`]); each is kept, modified in place (offload MOD) or deleted
    /// (its uncredited traffic kept for the next push). Counts go into `sw`.
    fn mac_changed(&mut self, table: &FlowTable, ch: MacChanges, sw: &mut Sweep) {
        let mut ids: Vec<u32> = match &ch {
            MacChanges::All => (0..self.flows.len() as u32)
                .filter(|&i| {
                    let fl = &self.flows[i as usize];
                    fl.alive && !fl.mac_deps.is_empty()
                })
                .collect(),
            MacChanges::Keys(keys) => {
                let mut v = Vec::new();
                for k in keys {
                    let Some(us) = self.by_mac.get(k) else {
                        continue;
                    };
                    for u in us {
                        if let Some(&i) = self.by_ufid.get(u) {
                            let fl = &self.flows[i as usize];
                            if fl.alive && fl.mac_deps.contains(k) {
                                v.push(i);
                            }
                        }
                    }
                }
                v
            }
        };
        if ids.is_empty() {
            return;
        }
        ids.sort_unstable();
        ids.dedup();
        let mut remove: Option<Vec<bool>> = None;
        for &i in &ids {
            sw.mac_revalidated += 1;
            self.stats.mac_revalidated += 1;
            match self.reval_flow(table, i) {
                Verdict::Keep => sw.kept += 1,
                Verdict::Modified => {
                    sw.modified += 1;
                    if self.offload.is_some() {
                        self.enqueue_put(i, true);
                    }
                }
                Verdict::Delete => {
                    sw.deleted_changed += 1;
                    let fl = &mut self.flows[i as usize];
                    let (tp, tb) = (
                        fl.stats.packets + fl.hw.packets,
                        fl.stats.bytes + fl.hw.bytes,
                    );
                    if tp > fl.pushed.0 || fl.upcall_credit.0 > 0 {
                        // credited at the next push; what remove_flows reads from
                        // the hardware on top of it is only the new part
                        let orphan = fl.clone();
                        fl.pushed = (tp, tb);
                        fl.upcall_credit = (0, 0);
                        self.orphans.push(orphan);
                    }
                    remove.get_or_insert_with(|| vec![false; self.flows.len()])[i as usize] = true;
                }
            }
        }
        if let Some(r) = remove {
            self.remove_flows(&r);
        }
    }

    /// Removes idle megaflows (see [`Self::revalidate`], which pushes their stats
    /// first). Returns how many were removed.
    pub fn expire_idle(&mut self, now: u64, max_idle: u64) -> usize {
        let remove: Vec<bool> = self
            .flows
            .iter()
            .map(|f| {
                !f.alive
                    || f.stats
                        .used
                        .max(f.hw.used)
                        .max(f.created)
                        .saturating_add(max_idle)
                        <= now
            })
            .collect();
        let n = self
            .flows
            .iter()
            .zip(&remove)
            .filter(|(f, &r)| f.alive && r)
            .count();
        if n > 0 {
            self.remove_flows(&remove);
        }
        n
    }

    /// Removes the flows flagged in `remove` (their offloads are deleted) and
    /// rebuilds the tables; the others keep their ufid, stats and offload state.
    fn remove_flows(&mut self, remove: &[bool]) {
        let old = std::mem::take(&mut self.flows);
        let mut keep = Vec::with_capacity(old.len());
        for (fl, &r) in old.into_iter().zip(remove) {
            if r {
                if !fl.alive {
                    continue;
                }
                if let OffloadState::Partial { mark, .. } = fl.offload {
                    self.by_mark.remove(&mark);
                }
                if !matches!(fl.offload, OffloadState::None | OffloadState::Failed(_)) {
                    if let Some(o) = self.offload.as_mut() {
                        // Its last hardware counters, credited at the next push.
                        if let OffloadState::Full { provider, .. } = fl.offload {
                            if let Ok(st) = o.provider(provider).stats(fl.ufid, true) {
                                if st.packets > 0 {
                                    let mut fl = fl.clone();
                                    fl.hw.packets += st.packets;
                                    fl.hw.bytes += st.bytes;
                                    fl.hw.used = fl.hw.used.max(st.used);
                                    self.orphans.push(fl);
                                }
                            }
                        }
                        o.enqueue(OffloadOp::Del { ufid: fl.ufid });
                    }
                }
            } else {
                keep.push(fl);
            }
        }
        let clock = self.clock;
        let offload = self.offload.take();
        let marks = std::mem::take(&mut self.by_mark);
        let next = self.next_ufid;
        self.flush();
        for fl in keep {
            self.clock = fl.created;
            let id = self.install_for(&fl.orig_key, &fl.mask, fl.actions, fl.rule);
            self.by_ufid.remove(&self.flows[id as usize].ufid);
            self.by_ufid.insert(fl.ufid, id);
            let n = &mut self.flows[id as usize];
            n.ufid = fl.ufid;
            n.key = fl.key;
            n.hw = fl.hw;
            n.offload = fl.offload;
            n.later_rules = fl.later_rules;
            n.groups = fl.groups;
            n.learned = fl.learned;
            n.mac_deps = fl.mac_deps;
            n.stats = fl.stats;
            n.pushed = fl.pushed;
            n.upcall_credit = fl.upcall_credit;
            self.register_mac_deps(id);
        }
        self.next_ufid = next;
        self.by_mark = marks;
        self.offload = offload;
        self.clock = clock;
    }

    /// Re-sorts the subtables by their hits (most first; ties by creation order) and
    /// halves the counters, so the order follows the recent traffic (OVS
    /// `dpcls_sort_subtable_vector`, run by each PMD every second, which resets the
    /// counts). In place, no allocation.
    pub fn sort_subtables(&mut self) {
        let subs = &self.subtables;
        self.order
            .sort_unstable_by_key(|&a| (std::cmp::Reverse(subs[a as usize].hits), a));
        for s in self.subtables.iter_mut() {
            s.hits /= 2;
        }
        self.lookups_since_sort = 0;
    }

    /// Megaflow classifier lookup only (no EMC, no stats). No allocation.
    #[inline]
    pub fn dpcls_lookup(&mut self, k: &FlowKey) -> Option<u32> {
        self.dpcls_find(k).map(|(_, _, id)| id)
    }

    /// [`Self::dpcls_lookup`] returning (subtable, slot, megaflow index).
    #[inline]
    fn dpcls_find(&mut self, k: &FlowKey) -> Option<(u32, u32, u32)> {
        let mut probes = 0u64;
        let mut found = None;
        for &si in &self.order {
            probes += 1;
            let st = &self.subtables[si as usize];
            if let Some(slot) = st.find(k) {
                found = Some((si, slot as u32, st.slots[slot].flow - 1));
                break;
            }
        }
        self.stats.subtable_probes += probes;
        let (si, slot, id) = found?;
        self.subtables[si as usize].hits += 1;
        self.lookups_since_sort += 1;
        if self.ranking && self.lookups_since_sort >= RANK_INTERVAL {
            self.sort_subtables();
        }
        Some((si, slot, id))
    }

    /// SMC lookup: the first candidate (subtable, slot) of `hash`'s bucket whose
    /// slot holds a flow that `k` matches under the subtable's mask (compared with
    /// the slot's compact masked key; flows in a subtable are always alive).
    #[inline]
    fn smc_lookup(&mut self, k: &FlowKey, hash: u64) -> Option<u32> {
        let smc = self.smc.as_deref()?;
        for (sub, slot) in smc.candidates(hash) {
            let hit = self
                .subtables
                .get(sub as usize)
                .and_then(|st| st.matches_at(k, slot as usize));
            if hit.is_some() {
                return hit;
            }
            self.stats.smc_rejects += 1;
        }
        None
    }

    /// Prefetches the subtable slot of the first candidate of `hash`'s SMC bucket.
    #[inline(always)]
    fn smc_prefetch_candidate(&self, hash: u64) {
        if let Some(smc) = self.smc.as_deref() {
            if let Some((sub, slot)) = smc.candidates(hash).next() {
                if let Some(st) = self.subtables.get(sub as usize) {
                    st.prefetch_slot(slot as usize);
                }
            }
        }
    }

    /// The EMC entry of `k`, if any.
    #[inline(always)]
    fn emc_find(&self, k: &FlowKey, hash: u64) -> Option<u32> {
        let i0 = (hash as usize) & (EMC_ENTRIES - 1);
        let i1 = ((hash >> 32) as usize) & (EMC_ENTRIES - 1);
        for i in [i0, i1] {
            let e = &self.emc[i];
            if e.hash == hash && e.flow != 0 && e.key == *k {
                return Some(e.flow - 1);
            }
        }
        None
    }

    /// [`Self::lookup`] for a batch of packets: `hashes[i]` is [`hash_key`] of
    /// `keys[i]`, the result goes to `out[i]` (as many as the shortest of the three).
    /// Done in groups of [`LOOKUP_BATCH`] as OVS's `dfc_processing` +
    /// `smc_lookup_batch`: the EMC for every packet of the group (the SMC bucket of
    /// each miss prefetched), then the candidates' subtable slots prefetched, then
    /// validation, then the classifier for what is left. Every packet gets what
    /// [`Self::lookup`] would give it (a matching megaflow; the same one when one
    /// matches), only where it is resolved may differ: an SMC / EMC entry inserted
    /// for one packet is not looked at by the later packets of the same group, which
    /// go to the classifier. No allocation.
    pub fn lookup_batch(
        &mut self,
        keys: &[FlowKey],
        hashes: &[u64],
        out: &mut [Option<(u32, Hit)>],
    ) {
        let n = keys.len().min(hashes.len()).min(out.len());
        let mut i = 0;
        while i < n {
            let end = (i + LOOKUP_BATCH).min(n);
            self.lookup_group(&keys[i..end], &hashes[i..end], &mut out[i..end]);
            i = end;
        }
    }

    /// One group of [`Self::lookup_batch`] (at most [`LOOKUP_BATCH`] packets).
    #[inline]
    fn lookup_group(&mut self, keys: &[FlowKey], hashes: &[u64], out: &mut [Option<(u32, Hit)>]) {
        debug_assert!(keys.len() <= LOOKUP_BATCH);
        if self.emc_enabled {
            for &h in hashes {
                crate::smc::prefetch(&self.emc[(h as usize) & (EMC_ENTRIES - 1)]);
                crate::smc::prefetch(&self.emc[((h >> 32) as usize) & (EMC_ENTRIES - 1)]);
            }
        }
        let mut miss = 0u64;
        for (i, (k, &h)) in keys.iter().zip(hashes).enumerate() {
            if self.emc_enabled {
                if let Some(id) = self.emc_find(k, h) {
                    self.stats.emc_hits += 1;
                    out[i] = Some((id, Hit::Emc));
                    continue;
                }
            }
            out[i] = None;
            miss |= 1 << i;
            if let Some(smc) = self.smc.as_deref() {
                smc.prefetch(h);
            }
        }
        if self.smc.is_some() {
            for i in set_bits(miss) {
                self.smc_prefetch_candidate(hashes[i]);
            }
            for i in set_bits(miss) {
                let (k, h) = (&keys[i], hashes[i]);
                if let Some(id) = self.smc_lookup(k, h) {
                    self.stats.smc_hits += 1;
                    if self.emc_enabled {
                        self.emc_insert(k, h, id);
                    }
                    out[i] = Some((id, Hit::Smc));
                    miss &= !(1 << i);
                }
            }
        }
        if miss == 0 {
            return;
        }
        let mut found = [(0u32, 0u32); LOOKUP_BATCH];
        let hit = self.dpcls_group(keys, miss, &mut found);
        for i in set_bits(hit) {
            let (si, slot) = found[i];
            let id = self.subtables[si as usize].slots[slot as usize].flow - 1;
            self.learn_megaflow_hit(&keys[i], hashes[i], si, slot, id);
            out[i] = Some((id, Hit::Megaflow));
        }
    }

    /// The classifier for the packets of `map` (bits of `keys`) in one sweep over
    /// the subtables, as OVS's `dpcls_lookup`: per subtable, every packet still
    /// unresolved is hashed under its mask and its slot prefetched, then they are
    /// compared. A packet gets the first subtable in probe order that matches, as
    /// in [`Self::dpcls_lookup`] (same probe and hit counts too). Returns the map of
    /// packets found, `found[i]` = (subtable, slot).
    #[inline]
    fn dpcls_group(
        &mut self,
        keys: &[FlowKey],
        map: u64,
        found: &mut [(u32, u32); LOOKUP_BATCH],
    ) -> u64 {
        let mut left = map;
        let mut hs = [0u64; LOOKUP_BATCH];
        let mut probes = 0u64;
        for &si in &self.order {
            if left == 0 {
                break;
            }
            probes += left.count_ones() as u64;
            let st = &mut self.subtables[si as usize];
            for i in set_bits(left) {
                hs[i] = st.hash_of(&keys[i]);
                st.prefetch_hash(hs[i]);
            }
            for i in set_bits(left) {
                if let Some(slot) = st.probe(&keys[i], hs[i]) {
                    found[i] = (si, slot as u32);
                    left &= !(1 << i);
                    st.hits += 1;
                }
            }
        }
        self.stats.subtable_probes += probes;
        let hit = map & !left;
        self.lookups_since_sort += hit.count_ones() as u64;
        if self.ranking && self.lookups_since_sort >= RANK_INTERVAL {
            self.sort_subtables();
        }
        hit
    }

    /// The classifier after the caches missed: on a hit the SMC and EMC learn it.
    #[inline]
    fn dpcls_resolve(&mut self, k: &FlowKey, hash: u64) -> Option<u32> {
        let (si, slot, id) = self.dpcls_find(k)?;
        self.learn_megaflow_hit(k, hash, si, slot, id);
        Some(id)
    }

    /// A classifier hit of `k` on megaflow `id` in `slot` of subtable `si`: counted,
    /// and the SMC and EMC learn it.
    #[inline(always)]
    fn learn_megaflow_hit(&mut self, k: &FlowKey, hash: u64, si: u32, slot: u32, id: u32) {
        self.stats.megaflow_hits += 1;
        if let Some(smc) = self.smc.as_deref_mut() {
            smc.insert(hash, si, slot);
        }
        if self.emc_enabled {
            self.emc_insert(k, hash, id);
        }
    }

    /// Cache lookup (EMC, then megaflows). `hash` = [`hash_key`] of `k`. No allocation.
    #[inline]
    pub fn lookup(&mut self, k: &FlowKey, hash: u64) -> Option<(u32, Hit)> {
        if self.emc_enabled {
            if let Some(id) = self.emc_find(k, hash) {
                self.stats.emc_hits += 1;
                return Some((id, Hit::Emc));
            }
        }
        if let Some(id) = self.smc_lookup(k, hash) {
            self.stats.smc_hits += 1;
            if self.emc_enabled {
                self.emc_insert(k, hash, id);
            }
            return Some((id, Hit::Smc));
        }
        let id = self.dpcls_resolve(k, hash)?;
        Some((id, Hit::Megaflow))
    }

    fn emc_insert(&mut self, k: &FlowKey, hash: u64, id: u32) {
        let i0 = (hash as usize) & (EMC_ENTRIES - 1);
        let i1 = ((hash >> 32) as usize) & (EMC_ENTRIES - 1);
        // Prefer an empty way, else replace the second way (OVS replaces by hash order).
        let i = if self.emc[i0].flow == 0 { i0 } else { i1 };
        self.emc[i] = EmcEntry {
            hash,
            flow: id + 1,
            key: *k,
        };
    }

    /// Processes one parsed packet of `len` bytes at time `now`: cache lookup, or upcall
    /// into `table` and install on a miss. Updates the megaflow's stats and returns its
    /// actions and where it was resolved. Only the upcall path allocates.
    pub fn process(
        &mut self,
        table: &FlowTable,
        k: &FlowKey,
        len: usize,
        now: u64,
    ) -> (&[OdpAction], Hit) {
        let hash = hash_key(k);
        self.clock = now;
        let (id, hit) = match self.lookup(k, hash) {
            Some(x) => x,
            None => match self.upcall(table, k, hash) {
                Some(id) => (id, Hit::Upcall),
                None => {
                    // over the flow limit: executed, not installed; its packet is
                    // credited to the rules at the next push (bounded)
                    let Some(fl) = self.slow.as_mut() else {
                        return (&[], Hit::Upcall);
                    };
                    fl.upcall_credit = (1, len as u64);
                    if self.orphans.len() < MAX_SLOW_CREDITS {
                        self.orphans.push(fl.clone());
                    } else {
                        self.stats.uncredited += 1;
                    }
                    return (&fl.actions, Hit::Upcall);
                }
            },
        };
        let fl = &mut self.flows[id as usize];
        // OVS: the packet that caused the upcall is executed by the upcall handler and
        // does not count in the new datapath flow's stats; it is credited to the rule.
        if hit != Hit::Upcall {
            fl.stats.packets += 1;
            fl.stats.bytes += len as u64;
            fl.stats.used = now;
            fl.stats.tcp_flags |= k.get(f::TCP_FLAGS) as u16;
        } else {
            fl.upcall_credit.0 += 1;
            fl.upcall_credit.1 += len as u64;
        }
        (&fl.actions, hit)
    }

    /// A miss: translate `k` through the OpenFlow table (OVS megaflow semantics) and
    /// install the resulting megaflow (and an EMC entry). Returns the megaflow index,
    /// or None when the datapath holds [`Self::flow_limit`] flows: then nothing is
    /// installed (OVS `should_install_flow`) and the translation is kept for the
    /// caller to execute (see [`Self::process`]).
    pub fn upcall(&mut self, table: &FlowTable, k: &FlowKey, hash: u64) -> Option<u32> {
        self.stats.upcalls += 1;
        let mut x = table.xlate_upcall(k, self.clock);
        // OVS's datapath key tells tagged from untagged frames by its structure
        // (`eth_type(0x8100),vlan(..),encap(..)` vs `eth_type(..)`), even where the
        // megaflow leaves the VLAN out: an untagged frame's flow must not match tagged
        // frames. The CFI bit (our "tag present" marker) is therefore always in the
        // installed mask (and hidden again by `dump`).
        x.wc.or(f::VLAN0_TCI, crate::key::VLAN_CFI as u64);
        let changes = table.bridge.ml.borrow_mut().take_changes();
        if let Some(ch) = changes {
            // NORMAL learned, moved or evicted a MAC: the megaflows whose decision
            // looked one of them up are translated again now (kept / modified /
            // deleted), so no packet meets a stale one; the others stay.
            let mut sw = Sweep::default();
            self.mac_changed(table, ch, &mut sw);
        }
        if self.flows.len() >= self.flow_limit {
            self.stats.flow_limit_hits += 1;
            if self.stats.flow_limit_hits.is_power_of_two() {
                tracing::warn!(
                    limit = self.flow_limit,
                    hits = self.stats.flow_limit_hits,
                    "upcall: datapath flow limit reached, packets run in the slow path"
                );
            }
            let mk = k.and(&x.wc);
            self.slow = Some(Megaflow {
                key: mk,
                mask: x.wc,
                actions: x.actions,
                stats: FlowStats::default(),
                created: self.clock,
                rule: x.rules.first().copied(),
                later_rules: x.rules.get(1..).unwrap_or_default().into(),
                groups: x.groups.into(),
                learned: x.learned.into(),
                mac_deps: Box::default(),
                ufid: 0,
                orig_key: *k,
                hw: HwStats::default(),
                offload: OffloadState::None,
                pushed: (0, 0),
                upcall_credit: (0, 0),
                subtable: 0,
                alive: false,
            });
            return None;
        }
        let id = self.install_rules(k, &x.wc, x.actions, &x.rules);
        if !x.learned.is_empty() {
            self.flows[id as usize].learned = x.learned.into();
        }
        if !x.mac_deps.is_empty() {
            self.flows[id as usize].mac_deps = x.mac_deps.into();
            self.register_mac_deps(id);
        }
        if !x.groups.is_empty() {
            self.flows[id as usize].groups = x.groups.into();
        }
        if let Some(smc) = self.smc.as_deref_mut() {
            let sub = self.flows[id as usize].subtable;
            if let Some(slot) = self.subtables[sub as usize].find(k) {
                smc.insert(hash, sub, slot as u32);
            }
        }
        if self.emc_enabled {
            self.emc_insert(k, hash, id);
        }
        Some(id)
    }

    /// Parses and processes a packet received on `in_port`.
    pub fn receive(
        &mut self,
        table: &FlowTable,
        in_port: u32,
        pkt: &[u8],
        now: u64,
    ) -> (&[OdpAction], Hit) {
        let k = FlowKey::from_packet(in_port, pkt);
        self.process(table, &k, pkt.len(), now)
    }

    /// Receives `frame` on `in_port` and executes the resulting actions, following
    /// recirculations (select groups: `hash(sym_l4(0)),recirc(N)`, then a lookup with
    /// `recirc_id=N,dp_hash=H` of the rewritten frame), at most [`MAX_RECIRC_DEPTH`]
    /// times like dpif-netdev. Returns every pass's outputs and packet-ins.
    pub fn receive_execute(
        &mut self,
        table: &FlowTable,
        in_port: u32,
        frame: &mut Vec<u8>,
        now: u64,
    ) -> crate::exec::Executed {
        let k = FlowKey::from_packet(in_port, frame);
        let mut marked = None;
        if let Some(o) = self.offload.as_ref() {
            match o.rx(&k, frame, now) {
                HwRx::Done(ex) => {
                    self.stats.hw_forwarded += 1;
                    return ex;
                }
                HwRx::Mark(m) => {
                    marked = self
                        .by_mark
                        .get(&m)
                        .and_then(|u| self.by_ufid.get(u))
                        .copied()
                }
                HwRx::Miss => {}
            }
        }
        let len = frame.len();
        let acts = match marked {
            Some(i) if self.flows[i as usize].alive => {
                // Partial offload: the NIC's mark names the flow; no EMC/classifier.
                self.stats.mark_hits += 1;
                self.clock = now;
                let fl = &mut self.flows[i as usize];
                fl.stats.packets += 1;
                fl.stats.bytes += len as u64;
                fl.stats.used = now;
                fl.stats.tcp_flags |= k.get(f::TCP_FLAGS) as u16;
                &fl.actions[..]
            }
            _ => self.process(table, &k, len, now).0,
        };
        let mut all = crate::exec::execute(acts, frame);
        if all.recircs.is_empty() {
            return all;
        }
        let mut queue: Vec<(u32, u32, Vec<u8>, usize)> = std::mem::take(&mut all.recircs)
            .into_iter()
            .map(|(id, h, f)| (id, h, f, 1))
            .collect();
        while let Some((id, h, mut fr, depth)) = queue.pop() {
            if depth > MAX_RECIRC_DEPTH {
                self.stats.recirc_too_deep += 1;
                tracing::warn!("recirculation too deep, packet dropped");
                continue;
            }
            self.stats.recirculations += 1;
            let mut k = FlowKey::from_packet(in_port, &fr);
            k.set(f::RECIRC_ID, id as u64);
            k.set(f::DP_HASH, h as u64);
            let len = fr.len();
            let (acts, _) = self.process(table, &k, len, now);
            let ex = crate::exec::execute(acts, &mut fr);
            all.outputs.extend(ex.outputs);
            all.packet_ins += ex.packet_ins;
            all.to_controller.extend(ex.to_controller);
            queue.extend(ex.recircs.into_iter().map(|(i, h, f)| (i, h, f, depth + 1)));
        }
        all
    }

    /// Lines like `ovs-appctl dpctl/dump-flows`, in OpenFlow match syntax:
    /// `<megaflow>, packets:N, bytes:N, used:Ts|never, flags:F, actions:A`.
    pub fn dump(&self, now: u64, ms_per_unit: f64) -> Vec<String> {
        self.flows()
            .map(|fl| {
                let last = fl.stats.used.max(fl.hw.used);
                let used = if last == 0 && fl.stats.packets + fl.hw.packets == 0 {
                    "never".to_string()
                } else {
                    format!(
                        "{:.3}s",
                        now.saturating_sub(last) as f64 * ms_per_unit / 1000.0
                    )
                };
                let mut m = fl.mask;
                if fl.key.get(f::VLAN0_TCI) == 0
                    && m.get(f::VLAN0_TCI) == crate::key::VLAN_CFI as u64
                {
                    m.set(f::VLAN0_TCI, 0); // only the implicit "untagged" bit
                }
                let off = match (&self.offload, &fl.offload) {
                    (None, _) => String::new(),
                    (Some(o), OffloadState::Full { provider, in_hw }) => format!(
                        "offloaded:{}, dp:{}, ",
                        if *in_hw { "yes" } else { "no" },
                        o.provider(*provider).name()
                    ),
                    (Some(o), OffloadState::Partial { provider, .. }) => {
                        format!("offloaded:partial, dp:{}, ", o.provider(*provider).name())
                    }
                    (Some(_), OffloadState::Failed(why)) => {
                        format!("offloaded:no ({why}), dp:ovs, ")
                    }
                    (Some(_), OffloadState::Pending) => "offloaded:pending, dp:ovs, ".into(),
                    (Some(_), OffloadState::None) => "offloaded:no, dp:ovs, ".into(),
                };
                format!(
                    "{}, packets:{}, bytes:{}, used:{}, flags:{:#05x}, {}actions:{}",
                    format_megaflow(&fl.key, &m),
                    fl.stats.packets + fl.hw.packets,
                    fl.stats.bytes + fl.hw.bytes,
                    used,
                    fl.stats.tcp_flags,
                    off,
                    format_actions(&fl.actions)
                )
            })
            .collect()
    }

    /// The megaflow with this ufid.
    pub fn flow_by_ufid(&self, ufid: u64) -> Option<&Megaflow> {
        self.by_ufid
            .get(&ufid)
            .map(|&i| &self.flows[i as usize])
            .filter(|f| f.alive)
    }

    /// The megaflow a given index refers to.
    pub fn flow(&self, id: u32) -> &Megaflow {
        &self.flows[id as usize]
    }

    /// Subtable index of a megaflow (for tests).
    pub fn flow_subtable(&self, id: u32) -> u32 {
        self.flows[id as usize].subtable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ofctl::parse_flows;

    #[test]
    fn upcall_install_then_hits_with_stats() {
        let table = FlowTable::from_rules(
            parse_flows(
                "priority=10,tcp,nw_dst=10.0.0.0/24,actions=output:2\npriority=0,actions=drop\n",
            )
            .unwrap(),
        );
        let mut dp = Datapath::new();
        let mut k = crate::ofctl::parse_exact_flow(
            "in_port=1,tcp,nw_dst=10.0.0.9,tcp_dst=80,tcp_flags=0x002",
        )
        .unwrap();
        let (a, h) = dp.process(&table, &k, 100, 5);
        assert_eq!(h, Hit::Upcall);
        assert_eq!(format_actions(a), "2");
        let (_, h) = dp.process(&table, &k, 100, 6);
        assert_eq!(h, Hit::Emc);
        // Same megaflow, different exact key: megaflow hit.
        k.set(f::TP_DST, 81);
        k.set(f::TCP_FLAGS, 0x010);
        let (_, h) = dp.process(&table, &k, 60, 7);
        assert_eq!(h, Hit::Megaflow);
        assert_eq!(dp.n_flows(), 1);
        let fl = dp.flows().next().unwrap();
        assert_eq!(fl.stats.packets, 2);
        assert_eq!(fl.stats.bytes, 160);
        assert_eq!(fl.stats.used, 7);
        assert_eq!(fl.stats.tcp_flags, 0x012);
        // A packet outside the megaflow: new upcall, second megaflow.
        k.set(f::NW_DST, 0x0b000001);
        let (a, h) = dp.process(&table, &k, 60, 8);
        assert_eq!(h, Hit::Upcall);
        assert_eq!(format_actions(a), "drop");
        assert_eq!(dp.n_flows(), 2);
        let d = dp.dump(8, 1.0);
        assert!(d[0].contains("packets:2, bytes:160"), "{d:?}");
    }

    #[test]
    fn idle_megaflows_expire() {
        let table = FlowTable::from_rules(
            parse_flows("priority=10,udp,actions=output:2\npriority=5,tcp,actions=output:3\n")
                .unwrap(),
        );
        let mut dp = Datapath::new();
        let u = crate::ofctl::parse_exact_flow("in_port=1,udp,udp_dst=1").unwrap();
        let t = crate::ofctl::parse_exact_flow("in_port=1,tcp,tcp_dst=1").unwrap();
        dp.process(&table, &u, 60, 1000);
        dp.process(&table, &t, 60, 1000);
        dp.process(&table, &u, 60, 9000);
        assert_eq!(dp.expire_idle(10_500, 10_000), 0);
        assert_eq!(dp.expire_idle(11_001, 10_000), 1); // tcp: installed at 1000, never used
        assert_eq!(dp.n_flows(), 1);
        let fl = dp.flows().next().unwrap();
        assert_eq!((fl.stats.packets, fl.stats.used), (1, 9000));
        let (_, h) = dp.process(&table, &u, 60, 11_002);
        assert_eq!(h, Hit::Megaflow);
        assert_eq!(dp.expire_idle(30_000, 10_000), 1);
        assert_eq!(dp.n_flows(), 0);
    }

    #[test]
    fn subtables_sorted_by_hits() {
        let mut dp = Datapath::new();
        dp.set_emc(false);
        let mut m1 = FlowKey::ZERO;
        m1.full(f::NW_DST);
        let mut m2 = FlowKey::ZERO;
        m2.full(f::TP_DST);
        let mut k1 = FlowKey::ZERO;
        k1.set(f::NW_DST, 1);
        let mut k2 = FlowKey::ZERO;
        k2.set(f::TP_DST, 7);
        dp.install(&k1, &m1, vec![OdpAction::Output(1)]);
        dp.install(&k2, &m2, vec![OdpAction::Output(2)]);
        for _ in 0..10 {
            assert!(dp.dpcls_lookup(&k2).is_some());
        }
        dp.sort_subtables();
        assert_eq!(dp.order[0], 1);
        let before = dp.stats.subtable_probes;
        dp.dpcls_lookup(&k2);
        assert_eq!(dp.stats.subtable_probes - before, 1);
    }
}
