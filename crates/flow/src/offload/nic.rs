//! The emulated NIC: a flow table with a capacity, a set of fields it can match, a
//! per-insert cost and injectable failures (all set by [`NicConfig`]), and a receive
//! path that parses frames, looks them up and runs the rule's hardware operations
//! (full offload), returns the mark (partial offload) or misses (software).
//!
//! Providers translate megaflows into their own rule formats (rte_flow items, flower
//! keys) and program the NIC with what those formats decode to: a masked match and
//! a list of [`HwOp`]. The NIC never sees a megaflow.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{HwRx, HwStats, OffloadError};
use crate::exec::Executed;
use crate::key::FlowKey;
use crate::xlate::OdpAction;

/// Hasher of the NIC's match tables (word-wise multiply-rotate like the datapath's;
/// the default SipHash over a 192-byte key costs more than the lookup itself).
#[derive(Debug, Default, Clone, Copy)]
pub struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type KeyHash = std::hash::BuildHasherDefault<WordHasher>;

/// Hasher for keys that already are hashes.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// One mask's table (like a datapath subtable: only the mask's non-zero words are
/// hashed and compared): hash -> (masked key, rule handle, prio), latest last.
#[derive(Debug)]
struct MaskTable {
    mask: FlowKey,
    words: Vec<u8>,
    map: HashMap<u64, Vec<(FlowKey, u64, u32)>, std::hash::BuildHasherDefault<IdHasher>>,
    n: usize,
}

impl MaskTable {
    fn new(mask: FlowKey) -> MaskTable {
        MaskTable {
            mask,
            words: (0..mask.w.len() as u8)
                .filter(|&i| mask.w[i as usize] != 0)
                .collect(),
            map: HashMap::default(),
            n: 0,
        }
    }
    #[inline]
    fn hash(&self, k: &FlowKey) -> u64 {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        for &i in &self.words {
            let w = k.w[i as usize] & self.mask.w[i as usize];
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        h ^ (h >> 29)
    }
    #[inline]
    fn matches(&self, masked: &FlowKey, k: &FlowKey) -> bool {
        self.words
            .iter()
            .all(|&i| masked.w[i as usize] == k.w[i as usize] & self.mask.w[i as usize])
    }
}

/// Configuration of an emulated NIC (tests set every knob).
#[derive(Debug, Clone)]
pub struct NicConfig {
    /// Entries the table holds.
    pub capacity: usize,
    /// Key bits the NIC can match ([`super::field_mask`] / [`super::all_fields`]).
    pub fields: FlowKey,
    /// Busy time per insert (models the device's rule-programming cost; 0 = none).
    pub insert_cost: Duration,
    /// The n-th insert (1-based, counted over the NIC's life) fails.
    pub fail_nth_insert: Option<u64>,
    /// Every insert after the first N fails (a device that breaks mid-batch).
    pub fail_after: Option<u64>,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            capacity: 1 << 20,
            fields: super::all_fields(),
            insert_cost: Duration::ZERO,
            fail_nth_insert: None,
            fail_after: None,
        }
    }
}

/// Header a `pedit` munge is relative to (tc `pedit ex munge <htype>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeditHdr {
    Eth,
    Ip4,
    Ip6,
    Tcp,
    Udp,
}

/// One hardware operation, run in order on a matched frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwOp {
    /// A field-level operation the NIC implements like the software datapath
    /// (rewrites, VLAN push/pop, output).
    Odp(OdpAction),
    /// 32-bit masked write at `off` bytes into the header: `w = (w & keep) ^ val`
    /// (the kernel's pedit semantics).
    Pedit {
        hdr: PeditHdr,
        off: u32,
        keep: u32,
        val: u32,
    },
    /// Recompute IPv4 header and TCP/UDP checksums (tc `csum`).
    Csum,
    /// Mark the frame and hand it to software (partial offload).
    Mark(u32),
}

#[derive(Debug, Clone)]
struct NicRule {
    mask: FlowKey,
    key: FlowKey,
    ops: Vec<HwOp>,
    stats: HwStats,
}

/// The emulated NIC table.
#[derive(Debug)]
pub struct EmuNic {
    pub cfg: NicConfig,
    rules: HashMap<u64, NicRule, KeyHash>,
    /// One table per mask.
    tables: Vec<MaskTable>,
    inserts: u64,
}

impl EmuNic {
    pub fn new(cfg: NicConfig) -> EmuNic {
        EmuNic {
            cfg,
            rules: HashMap::default(),
            tables: Vec::new(),
            inserts: 0,
        }
    }
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    /// Inserts attempted so far.
    pub fn inserts(&self) -> u64 {
        self.inserts
    }

    /// Checks a rule against the NIC's capabilities and failure plan: call before
    /// [`Self::insert`]. The insert cost is paid by [`pay_insert_cost`] before the
    /// NIC is locked, so programming never stalls the receive path.
    pub fn admit(&mut self, mask: &FlowKey) -> Result<(), OffloadError> {
        self.inserts += 1;
        let n = self.inserts;
        let extra = {
            let mut m = *mask;
            for i in 0..m.w.len() {
                m.w[i] &= !self.cfg.fields.w[i];
            }
            m
        };
        if !extra.is_zero() {
            return Err(OffloadError::Unsupported(format!(
                "NIC cannot match {}",
                super::field_names(&extra).join(", ")
            )));
        }
        if self.cfg.fail_nth_insert == Some(n) {
            return Err(OffloadError::Device(format!(
                "injected failure of insert {n}"
            )));
        }
        if self.cfg.fail_after.is_some_and(|a| n > a) {
            return Err(OffloadError::Device(format!(
                "injected failure: device broken after {} inserts",
                self.cfg.fail_after.unwrap_or(0)
            )));
        }
        if self.rules.len() >= self.cfg.capacity {
            return Err(OffloadError::TableFull(self.cfg.capacity));
        }
        Ok(())
    }

    /// Programs a rule under `handle` (replacing one with the same handle).
    pub fn insert(&mut self, handle: u64, key: FlowKey, mask: FlowKey, prio: u32, ops: Vec<HwOp>) {
        self.remove(handle);
        let key = key.and(&mask);
        let t = match self.tables.iter().position(|t| t.mask == mask) {
            Some(i) => i,
            None => {
                self.tables.push(MaskTable::new(mask));
                self.tables.len() - 1
            }
        };
        let tab = &mut self.tables[t];
        let h = tab.hash(&key);
        tab.map.entry(h).or_default().push((key, handle, prio));
        tab.n += 1;
        self.rules.insert(
            handle,
            NicRule {
                mask,
                key,
                ops,
                stats: HwStats::default(),
            },
        );
    }

    /// Removes a rule; returns its counters.
    pub fn remove(&mut self, handle: u64) -> Option<HwStats> {
        let r = self.rules.remove(&handle)?;
        if let Some(t) = self.tables.iter().position(|t| t.mask == r.mask) {
            let tab = &mut self.tables[t];
            let h = tab.hash(&r.key);
            if let Some(v) = tab.map.get_mut(&h) {
                let before = v.len();
                v.retain(|e| e.1 != handle);
                tab.n -= before - v.len();
                if v.is_empty() {
                    tab.map.remove(&h);
                }
            }
            if tab.n == 0 {
                self.tables.swap_remove(t);
            }
        }
        Some(r.stats)
    }

    /// Counters of a rule (since the last reset); `reset` zeroes packets and bytes.
    pub fn query(&mut self, handle: u64, reset: bool) -> Option<HwStats> {
        let r = self.rules.get_mut(&handle)?;
        let s = r.stats;
        if reset {
            r.stats.packets = 0;
            r.stats.bytes = 0;
        }
        Some(s)
    }

    /// Removes every rule; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.rules.len();
        self.rules.clear();
        self.tables.clear();
        n
    }

    /// The best rule (lowest `prio`) matching `k`.
    pub fn lookup(&self, k: &FlowKey) -> Option<u64> {
        let mut best: Option<(u32, u64)> = None;
        for tab in &self.tables {
            if let Some(v) = tab.map.get(&tab.hash(k)) {
                if let Some(&(_, h, p)) = v.iter().rev().find(|e| tab.matches(&e.0, k)) {
                    if best.is_none_or(|(bp, _)| p < bp) {
                        best = Some((p, h));
                    }
                }
            }
        }
        best.map(|(_, h)| h)
    }

    /// The receive path: look up (the frame parsed into `k`), count, run the
    /// operations.
    pub fn rx(&mut self, k: &FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx {
        let Some(h) = self.lookup(k) else {
            return HwRx::Miss;
        };
        let r = self.rules.get_mut(&h).expect("rule of a table entry");
        r.stats.packets += 1;
        r.stats.bytes += frame.len() as u64;
        r.stats.used = now;
        run_ops(&r.ops, frame)
    }
}

/// Busy time of one insert (`NicConfig::insert_cost`), spent without holding the NIC.
pub fn pay_insert_cost(nic: &std::sync::Mutex<EmuNic>) {
    let cost = nic
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .cfg
        .insert_cost;
    if !cost.is_zero() {
        let t = Instant::now();
        while t.elapsed() < cost {
            std::hint::spin_loop();
        }
    }
}

/// Runs hardware operations on a frame.
pub fn run_ops(ops: &[HwOp], frame: &mut Vec<u8>) -> HwRx {
    let mut ex = Executed::default();
    for op in ops {
        match op {
            HwOp::Mark(m) => return HwRx::Mark(*m),
            HwOp::Odp(a) => {
                let e = crate::exec::execute(std::slice::from_ref(a), frame);
                ex.outputs.extend(e.outputs);
                ex.packet_ins += e.packet_ins;
                ex.recircs.extend(e.recircs);
            }
            HwOp::Pedit {
                hdr,
                off,
                keep,
                val,
            } => {
                if let Some(base) = header_offset(frame, *hdr) {
                    let at = base + *off as usize;
                    if frame.len() >= at + 4 {
                        let w = u32::from_be_bytes([
                            frame[at],
                            frame[at + 1],
                            frame[at + 2],
                            frame[at + 3],
                        ]);
                        let w = (w & keep) ^ val;
                        frame[at..at + 4].copy_from_slice(&w.to_be_bytes());
                    }
                }
            }
            HwOp::Csum => crate::exec::fix_checksums(frame),
        }
    }
    HwRx::Done(ex)
}

/// Offset of a header in the frame (after VLAN tags for L3/L4).
fn header_offset(frame: &[u8], hdr: PeditHdr) -> Option<usize> {
    if hdr == PeditHdr::Eth {
        return Some(0);
    }
    let (l3, et) = crate::exec::l3(frame)?;
    match hdr {
        PeditHdr::Ip4 | PeditHdr::Ip6 => Some(l3),
        _ => match et {
            wire::ethernet::ethertype::IPV4 => Some(l3 + (*frame.get(l3)? & 0x0f) as usize * 4),
            wire::ethernet::ethertype::IPV6 => Some(l3 + 40),
            _ => None,
        },
    }
}
