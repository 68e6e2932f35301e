//! The datapath flow cache, shaped after OVS's userspace datapath (lib/dpif-netdev.c):
//!
//! * an **exact-match cache** (EMC): a direct-mapped, 2-way array keyed by the full flow
//!   key's hash, pointing at megaflows;
//! * a **megaflow classifier** (`dpcls`): one subtable per distinct mask (tuple space
//!   search), each an open-addressing hash table over only the mask's non-zero words;
//!   subtables are probed in order of hits ([`Datapath::sort_subtables`]);
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

use crate::key::{f, FlowKey, NW};
use crate::xlate::{format_actions, format_megaflow, FlowTable, OdpAction};

/// Hash of a (masked) flow key over the given words: multiply-xorshift, like a
/// word-at-a-time FxHash; deterministic (no random state).
#[inline]
pub fn hash_words(k: &FlowKey, words: &[u8], basis: u64) -> u64 {
    let mut h = basis ^ 0x9e37_79b9_7f4a_7c15;
    for &i in words {
        h = (h.rotate_left(5) ^ k.w[i as usize]).wrapping_mul(0x517c_c1b7_2722_0a95);
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

#[inline(always)]
fn hash_slice(v: &[u64]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for &x in v {
        h = (h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
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
    #[inline(always)]
    fn lookup(&self, k: &FlowKey) -> Option<u32> {
        let mut m = [0u64; NW];
        self.extract(k, &mut m);
        let mv = &m[..self.nw];
        let h = hash_slice(mv);
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        loop {
            let s = self.slots[i];
            if s.flow == 0 {
                return None;
            }
            if s.hash == h
                && self.keys[i * self.nw..(i + 1) * self.nw]
                    .iter()
                    .zip(mv)
                    .all(|(a, b)| a == b)
            {
                return Some(s.flow - 1);
            }
            i = (i + 1) & mask;
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
        let h = hash_slice(&m[..self.nw]);
        let kw = m;
        self.place(h, id + 1, &kw[..self.nw]);
        self.n += 1;
    }
}

/// EMC geometry (OVS: 8192 entries, 2 hash segments).
pub const EMC_ENTRIES: usize = 8192;

#[derive(Debug, Clone, Copy)]
struct EmcEntry {
    key: FlowKey,
    /// Megaflow index + 1 (0 = empty).
    flow: u32,
}

/// Where a lookup was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    Emc,
    Megaflow,
    Upcall,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpStats {
    pub emc_hits: u64,
    pub megaflow_hits: u64,
    pub upcalls: u64,
    /// Subtables probed by megaflow lookups (avg = probes / lookups).
    pub subtable_probes: u64,
    /// Recirculations executed (select groups).
    pub recirculations: u64,
    /// Packets dropped for recirculating more than [`MAX_RECIRC_DEPTH`] times.
    pub recirc_too_deep: u64,
}

/// dpif-netdev's `MAX_RECIRC_DEPTH`.
pub const MAX_RECIRC_DEPTH: usize = 6;

/// What one [`Datapath::sweep`] did.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// Megaflows removed for being idle.
    pub megaflows_expired: usize,
    /// OpenFlow rules removed by their idle/hard timeout (the megaflows were flushed).
    pub rules_expired: Vec<crate::ofproto::Expired>,
}

/// The datapath cache.
#[derive(Debug, Clone)]
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
    /// Latest time seen by `process` (install time of new megaflows).
    clock: u64,
    /// Megaflows flushed during an upcall (NORMAL's table changed) whose traffic was
    /// not credited yet: credited at the next [`Self::push_stats`].
    orphans: Vec<Megaflow>,
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
                    key: FlowKey::ZERO,
                    flow: 0
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
            clock: 0,
            orphans: Vec::new(),
        }
    }
    /// Turns the EMC on/off (off: every lookup goes to the megaflow classifier).
    pub fn set_emc(&mut self, on: bool) {
        self.emc_enabled = on;
        self.emc_clear();
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
    /// Removes every megaflow (e.g. after the OpenFlow table changed).
    /// Flushes every megaflow, keeping their uncredited traffic for the next push.
    fn flush_after_fdb_change(&mut self, _table: &FlowTable) {
        let old = std::mem::take(&mut self.flows);
        self.orphans.extend(
            old.into_iter()
                .filter(|f| f.alive && (f.stats.packets > f.pushed.0 || f.upcall_credit.0 > 0)),
        );
        self.flush();
    }

    pub fn flush(&mut self) {
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
            pushed: (0, 0),
            upcall_credit: (0, 0),
            subtable: st,
            alive: true,
        });
        self.subtables[st as usize].insert(&mk, id);
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
            let dp = fl.stats.packets - p0 + up;
            let db = fl.stats.bytes - b0 + ub;
            if dp > 0 {
                // The upcall's packet was used at install time.
                let used = if up > 0 {
                    fl.stats.used.max(fl.created)
                } else {
                    fl.stats.used
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
                if !fl.learned.is_empty() {
                    let mut ml = table.bridge.ml.borrow_mut();
                    for &(mac, vlan, port) in fl.learned.iter() {
                        ml.learn(mac, vlan, port, used);
                    }
                }
            }
            fl.pushed = (fl.stats.packets, fl.stats.bytes);
            fl.upcall_credit = (0, 0);
        }
    }

    /// The periodic job (`now` in ms): push megaflow stats to the rules, remove
    /// megaflows idle for `max_idle` ms, then expire OpenFlow rules whose timeouts passed
    /// (OVS runs `rule_expire` after each revalidator dump, when stats are fresh). An
    /// expired rule is a table change: all megaflows are flushed (no revalidator yet).
    pub fn sweep(&mut self, table: &mut FlowTable, now: u64, max_idle: u64) -> Sweep {
        self.push_stats(table);
        // NORMAL's MAC aging (mac_learning_run); a change makes megaflows stale.
        let fdb = {
            let mut ml = table.bridge.ml.borrow_mut();
            ml.run(now);
            ml.take_changed()
        };
        if fdb {
            self.flush();
        }
        let megaflows_expired = self.expire_idle(now, max_idle);
        let rules_expired = table.expire(now);
        if !rules_expired.is_empty() {
            self.flush();
        }
        Sweep {
            megaflows_expired,
            rules_expired,
        }
    }

    /// Removes megaflows not used (or, if never used, not installed) within `max_idle`
    /// of `now` — OVS's max-idle (default 10 s). Rebuilds the tables (the caller runs it
    /// periodically, e.g. once a second). Returns how many were removed. Their stats not
    /// yet pushed are lost: use [`Self::sweep`], which pushes first.
    pub fn expire_idle(&mut self, now: u64, max_idle: u64) -> usize {
        let old = std::mem::take(&mut self.flows);
        let before = old.iter().filter(|f| f.alive).count();
        let keep: Vec<Megaflow> = old
            .into_iter()
            .filter(|f| f.alive && f.stats.used.max(f.created).saturating_add(max_idle) > now)
            .collect();
        let removed = before - keep.len();
        if removed == 0 {
            self.flows = keep;
            return 0;
        }
        let clock = self.clock;
        self.flush();
        for fl in keep {
            self.clock = fl.created;
            let id = self.install_for(&fl.key, &fl.mask, fl.actions, fl.rule);
            let n = &mut self.flows[id as usize];
            n.later_rules = fl.later_rules;
            n.groups = fl.groups;
            n.learned = fl.learned;
            n.stats = fl.stats;
            n.pushed = fl.pushed;
            n.upcall_credit = fl.upcall_credit;
        }
        self.clock = clock;
        removed
    }

    /// Re-sorts the subtables by hits (most first) and halves the counters (aging).
    pub fn sort_subtables(&mut self) {
        let subs = &self.subtables;
        self.order
            .sort_by(|&a, &b| subs[b as usize].hits.cmp(&subs[a as usize].hits));
        for s in self.subtables.iter_mut() {
            s.hits /= 2;
        }
        self.lookups_since_sort = 0;
    }

    /// Megaflow classifier lookup only (no EMC, no stats). No allocation.
    #[inline]
    pub fn dpcls_lookup(&mut self, k: &FlowKey) -> Option<u32> {
        let mut probes = 0u64;
        let mut found = None;
        for &si in &self.order {
            probes += 1;
            let st = &self.subtables[si as usize];
            if let Some(id) = st.lookup(k) {
                found = Some((si, id));
                break;
            }
        }
        self.stats.subtable_probes += probes;
        let (si, id) = found?;
        self.subtables[si as usize].hits += 1;
        self.lookups_since_sort += 1;
        if self.lookups_since_sort >= 1 << 16 {
            self.sort_subtables();
        }
        Some(id)
    }

    /// Cache lookup (EMC, then megaflows). `hash` = [`hash_key`] of `k`. No allocation.
    #[inline]
    pub fn lookup(&mut self, k: &FlowKey, hash: u64) -> Option<(u32, Hit)> {
        if self.emc_enabled {
            let i0 = (hash as usize) & (EMC_ENTRIES - 1);
            let i1 = ((hash >> 32) as usize) & (EMC_ENTRIES - 1);
            for i in [i0, i1] {
                let e = &self.emc[i];
                if e.flow != 0 && e.key == *k {
                    self.stats.emc_hits += 1;
                    return Some((e.flow - 1, Hit::Emc));
                }
            }
        }
        let id = self.dpcls_lookup(k)?;
        self.stats.megaflow_hits += 1;
        if self.emc_enabled {
            self.emc_insert(k, hash, id);
        }
        Some((id, Hit::Megaflow))
    }

    fn emc_insert(&mut self, k: &FlowKey, hash: u64, id: u32) {
        let i0 = (hash as usize) & (EMC_ENTRIES - 1);
        let i1 = ((hash >> 32) as usize) & (EMC_ENTRIES - 1);
        // Prefer an empty way, else replace the second way (OVS replaces by hash order).
        let i = if self.emc[i0].flow == 0 { i0 } else { i1 };
        self.emc[i] = EmcEntry {
            key: *k,
            flow: id + 1,
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
            None => (self.upcall(table, k, hash), Hit::Upcall),
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
    /// install the resulting megaflow (and an EMC entry). Returns the megaflow index.
    pub fn upcall(&mut self, table: &FlowTable, k: &FlowKey, hash: u64) -> u32 {
        self.stats.upcalls += 1;
        let mut x = table.xlate_upcall(k, self.clock);
        // OVS's datapath key tells tagged from untagged frames by its structure
        // (`eth_type(0x8100),vlan(..),encap(..)` vs `eth_type(..)`), even where the
        // megaflow leaves the VLAN out: an untagged frame's flow must not match tagged
        // frames. The CFI bit (our "tag present" marker) is therefore always in the
        // installed mask (and hidden again by `dump`).
        x.wc.or(f::VLAN0_TCI, crate::key::VLAN_CFI as u64);
        if table.bridge.ml.borrow_mut().take_changed() {
            // NORMAL learned or moved a MAC: decisions of installed megaflows may be
            // stale; no revalidator, so they go (their stats first).
            self.flush_after_fdb_change(table);
        }
        let id = self.install_rules(k, &x.wc, x.actions, &x.rules);
        if !x.learned.is_empty() {
            self.flows[id as usize].learned = x.learned.into();
        }
        if !x.groups.is_empty() {
            self.flows[id as usize].groups = x.groups.into();
        }
        if self.emc_enabled {
            self.emc_insert(k, hash, id);
        }
        id
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
        let len = frame.len();
        let (acts, _) = self.process(table, &k, len, now);
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
            queue.extend(ex.recircs.into_iter().map(|(i, h, f)| (i, h, f, depth + 1)));
        }
        all
    }

    /// Lines like `ovs-appctl dpctl/dump-flows`, in OpenFlow match syntax:
    /// `<megaflow>, packets:N, bytes:N, used:Ts|never, flags:F, actions:A`.
    pub fn dump(&self, now: u64, ms_per_unit: f64) -> Vec<String> {
        self.flows()
            .map(|fl| {
                let used = if fl.stats.used == 0 && fl.stats.packets == 0 {
                    "never".to_string()
                } else {
                    format!(
                        "{:.3}s",
                        now.saturating_sub(fl.stats.used) as f64 * ms_per_unit / 1000.0
                    )
                };
                let mut m = fl.mask;
                if fl.key.get(f::VLAN0_TCI) == 0
                    && m.get(f::VLAN0_TCI) == crate::key::VLAN_CFI as u64
                {
                    m.set(f::VLAN0_TCI, 0); // only the implicit "untagged" bit
                }
                format!(
                    "{}, packets:{}, bytes:{}, used:{}, flags:{:#05x}, actions:{}",
                    format_megaflow(&fl.key, &m),
                    fl.stats.packets,
                    fl.stats.bytes,
                    used,
                    fl.stats.tcp_flags,
                    format_actions(&fl.actions)
                )
            })
            .collect()
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
