//! The `NORMAL` action: Open vSwitch 3.1's L2 learning switch
//! (ofproto-dpif-xlate.c `xlate_normal`, lib/mac-learning.c): per-port VLAN modes as
//! ovs-vsctl configures them (`tag`, `trunks`, `vlan_mode`), MAC learning per VLAN
//! with aging and a table limit (fair eviction), flooding in the bridge's port order.
//! Multicast snooping, bonds, mirrors, STP and dot1q-tunnel ports are not modelled.

use std::collections::{BTreeSet, HashMap};

/// `vlan_mode` of a port (OVS `enum port_vlan_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlanMode {
    Access,
    Trunk,
    NativeTagged,
    NativeUntagged,
}

/// One port's VLAN configuration, already resolved like OVS's `bundle_set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortVlan {
    pub mode: VlanMode,
    /// Access / native VLAN (0 for trunks).
    pub vlan: u16,
    /// Trunked VLANs (None: all).
    pub trunks: Option<BTreeSet<u16>>,
}

impl Default for PortVlan {
    fn default() -> Self {
        PortVlan {
            mode: VlanMode::Trunk,
            vlan: 0,
            trunks: None,
        }
    }
}

impl PortVlan {
    /// From the ovs-vsctl columns `tag`, `trunks`, `vlan_mode` (bridge.c
    /// `port_configure` + ofproto-dpif.c `bundle_set`): without `vlan_mode`, a tag
    /// means access (trunks ignored) and no tag a trunk; native modes always trunk
    /// their native VLAN and never VLAN 0.
    pub fn configure(
        tag: Option<u16>,
        trunks: Option<Vec<u16>>,
        mode: Option<&str>,
    ) -> Result<PortVlan, String> {
        if let Some(t) = tag {
            if t > 4095 {
                return Err(format!("tag {t} out of range (0-4095)"));
            }
        }
        for &v in trunks.iter().flatten() {
            if v > 4095 {
                return Err(format!("trunk VLAN {v} out of range (0-4095)"));
            }
        }
        let mode = match mode {
            Some("access") => VlanMode::Access,
            Some("trunk") => VlanMode::Trunk,
            Some("native-tagged") => VlanMode::NativeTagged,
            Some("native-untagged") => VlanMode::NativeUntagged,
            Some(o) => {
                return Err(format!(
                    "vlan_mode `{o}`: access, trunk, native-tagged or native-untagged (dot1q-tunnel is not supported)"
                ))
            }
            None if tag.is_some() => VlanMode::Access,
            None => VlanMode::Trunk,
        };
        let vlan = if mode == VlanMode::Trunk {
            0
        } else {
            tag.unwrap_or(0)
        };
        let set: Option<BTreeSet<u16>> = trunks.map(|v| v.into_iter().collect());
        let trunks = match mode {
            VlanMode::Access => None,
            VlanMode::Trunk => set,
            VlanMode::NativeTagged | VlanMode::NativeUntagged => {
                if vlan != 0
                    && set
                        .as_ref()
                        .is_none_or(|s| !s.contains(&vlan) || s.contains(&0))
                {
                    let mut s = set.unwrap_or_else(|| (0..4096).collect());
                    s.insert(vlan);
                    s.remove(&0);
                    Some(s)
                } else {
                    set
                }
            }
        };
        Ok(PortVlan { mode, vlan, trunks })
    }

    fn trunks_vlan(&self, vid: u16) -> bool {
        self.mode != VlanMode::Access && self.trunks.as_ref().is_none_or(|s| s.contains(&vid))
    }

    /// `xbundle_includes_vlan`.
    pub fn includes_vlan(&self, vid: u16) -> bool {
        match self.mode {
            VlanMode::Access => vid == self.vlan,
            _ => self.trunks_vlan(vid),
        }
    }

    /// `input_vid_is_valid`.
    pub fn input_vid_valid(&self, vid: u16) -> bool {
        match self.mode {
            VlanMode::Access => vid == 0,
            VlanMode::NativeTagged | VlanMode::NativeUntagged if vid == 0 => true,
            _ => self.trunks_vlan(vid),
        }
    }

    /// `xvlan_input_translate`: the VLAN the packet belongs to inside the switch.
    pub fn input_vlan(&self, vid: u16) -> u16 {
        match self.mode {
            VlanMode::Access => self.vlan,
            VlanMode::Trunk => vid,
            VlanMode::NativeTagged | VlanMode::NativeUntagged => {
                if vid == 0 {
                    self.vlan
                } else {
                    vid
                }
            }
        }
    }

    /// `xvlan_output_translate`: whether the packet leaves tagged with `vid`.
    pub fn output_tagged(&self, vid: u16) -> bool {
        match self.mode {
            VlanMode::Access => false,
            VlanMode::Trunk | VlanMode::NativeTagged => true,
            VlanMode::NativeUntagged => vid != self.vlan,
        }
    }
}

/// Most changed (MAC, VLAN) entries a [`MacTable`] remembers between two
/// [`MacTable::take_changes`]; beyond it the change is "everything".
pub const MAX_CHANGED_KEYS: usize = 1024;

/// What changed in a [`MacTable`] since the last [`MacTable::take_changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MacChanges {
    /// These (MAC, VLAN) entries were learned, moved, expired or evicted.
    Keys(Vec<(u64, u16)>),
    /// Too many to list: every decision may have changed.
    All,
}

/// A learned MAC (`ovs-appctl fdb/show` row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacEntry {
    pub port: u32,
    /// Last refresh (ms); the entry expires at `refreshed + idle_ms`.
    pub refreshed: u64,
    /// LRU order (higher = used more recently).
    seq: u64,
}

/// OVS `struct mac_learning`: (MAC, VLAN) → port, aging `idle_ms` (default 300 s),
/// at most `max_entries` (default 8192; when full, the least recently used entry of
/// the port with the most entries goes, OVS `evict_mac_entry_fairly`).
#[derive(Debug, Clone)]
pub struct MacTable {
    pub entries: HashMap<(u64, u16), MacEntry>,
    pub idle_ms: u64,
    pub max_entries: usize,
    seq: u64,
    /// Entries learned, moved, expired or evicted since the last `take_changes`
    /// (their keys, up to [`MAX_CHANGED_KEYS`]; `changed_all` past that).
    changed: bool,
    changed_keys: Vec<(u64, u16)>,
    changed_all: bool,
    pub learned: u64,
    pub moved: u64,
    pub expired: u64,
    pub evicted: u64,
}

impl Default for MacTable {
    fn default() -> Self {
        MacTable {
            entries: HashMap::new(),
            idle_ms: 300_000,
            max_entries: 8192,
            seq: 0,
            changed: false,
            changed_keys: Vec::new(),
            changed_all: false,
            learned: 0,
            moved: 0,
            expired: 0,
            evicted: 0,
        }
    }
}

fn is_multicast(mac: u64) -> bool {
    (mac >> 40) & 1 != 0
}

impl MacTable {
    /// The port `mac` was learned on in `vlan` (multicast: none).
    pub fn lookup(&self, mac: u64, vlan: u16) -> Option<u32> {
        if is_multicast(mac) {
            return None;
        }
        self.entries.get(&(mac, vlan)).map(|e| e.port)
    }

    /// `mac_learning_update` at `now` (ms): learn or move `mac` to `port`, refresh it
    /// at most once a second (OVS compares whole seconds of age). Returns whether the
    /// table changed (a new entry or a move: forwarding decisions may differ).
    pub fn learn(&mut self, mac: u64, vlan: u16, port: u32, now: u64) -> bool {
        if is_multicast(mac) {
            return false;
        }
        if let Some(e) = self.entries.get(&(mac, vlan)) {
            let aged = now.saturating_sub(e.refreshed) >= 1000;
            if e.port == port && !aged {
                return false;
            }
        } else if self.entries.len() >= self.max_entries {
            self.evict_fairly();
        }
        self.seq += 1;
        let seq = self.seq;
        match self.entries.get_mut(&(mac, vlan)) {
            None => {
                self.entries.insert(
                    (mac, vlan),
                    MacEntry {
                        port,
                        refreshed: now,
                        seq,
                    },
                );
                self.learned += 1;
                self.note_change((mac, vlan));
                true
            }
            Some(e) => {
                e.refreshed = now;
                e.seq = seq;
                if e.port != port {
                    e.port = port;
                    self.moved += 1;
                    self.note_change((mac, vlan));
                    true
                } else {
                    false
                }
            }
        }
    }

    fn evict_fairly(&mut self) {
        let mut per_port: HashMap<u32, usize> = HashMap::new();
        for e in self.entries.values() {
            *per_port.entry(e.port).or_default() += 1;
        }
        let Some((&port, _)) = per_port
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
        else {
            return;
        };
        if let Some((&k, _)) = self
            .entries
            .iter()
            .filter(|(_, e)| e.port == port)
            .min_by_key(|(_, e)| e.seq)
        {
            self.entries.remove(&k);
            self.evicted += 1;
            self.note_change(k);
        }
    }

    /// `mac_learning_run`: expires entries not refreshed for `idle_ms` (and any over
    /// the limit). Returns how many went.
    pub fn run(&mut self, now: u64) -> usize {
        let idle = self.idle_ms;
        let gone: Vec<(u64, u16)> = self
            .entries
            .iter()
            .filter(|(_, e)| now >= e.refreshed.saturating_add(idle))
            .map(|(k, _)| *k)
            .collect();
        for k in &gone {
            self.entries.remove(k);
            self.note_change(*k);
        }
        self.expired += gone.len() as u64;
        let before = self.entries.len();
        while self.entries.len() > self.max_entries {
            self.evict_fairly();
        }
        gone.len() + (before - self.entries.len())
    }

    /// Removes every entry (`fdb/flush`); returns how many there were.
    pub fn flush(&mut self) -> usize {
        let n = self.entries.len();
        let keys: Vec<(u64, u16)> = self.entries.keys().copied().collect();
        self.entries.clear();
        for k in keys {
            self.note_change(k);
        }
        n
    }

    fn note_change(&mut self, k: (u64, u16)) {
        self.changed = true;
        if self.changed_all {
            return;
        }
        if self.changed_keys.len() >= MAX_CHANGED_KEYS {
            self.changed_all = true;
            self.changed_keys = Vec::new();
        } else if !self.changed_keys.contains(&k) {
            self.changed_keys.push(k);
        }
    }

    /// Whether the table changed since the last call (forgets which entries did).
    pub fn take_changed(&mut self) -> bool {
        self.take_changes().is_some()
    }

    /// Which entries changed since the last call (None: none). The datapath
    /// revalidates the megaflows whose NORMAL decision looked them up (OVS of old
    /// tagged flows with the MACs they depend on; 3.x revalidates all flows).
    pub fn take_changes(&mut self) -> Option<MacChanges> {
        if !std::mem::take(&mut self.changed) {
            return None;
        }
        let keys = std::mem::take(&mut self.changed_keys);
        Some(if std::mem::take(&mut self.changed_all) {
            MacChanges::All
        } else {
            MacChanges::Keys(keys)
        })
    }

    /// `ovs-appctl fdb/show` lines (LRU order, oldest first): ` port  VLAN  MAC  Age`.
    pub fn show(&self, now: u64) -> Vec<String> {
        let mut v: Vec<(&(u64, u16), &MacEntry)> = self.entries.iter().collect();
        v.sort_by_key(|(_, e)| e.seq);
        let mut out = vec![" port  VLAN  MAC                Age".to_string()];
        for ((mac, vlan), e) in v {
            let m = mac.to_be_bytes();
            out.push(format!(
                "{:>5}  {:>4}  {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}  {:>3}",
                e.port,
                vlan,
                m[2],
                m[3],
                m[4],
                m[5],
                m[6],
                m[7],
                now.saturating_sub(e.refreshed) / 1000
            ));
        }
        out
    }
}

/// The bridge NORMAL runs on: its ports in flood order with their VLAN
/// configuration, and the MAC learning table.
#[derive(Debug, Clone, Default)]
pub struct Bridge {
    /// (OpenFlow port, VLAN config) in the order NORMAL floods (OVS: its bundle list).
    pub ports: Vec<(u32, PortVlan)>,
    pub ml: std::cell::RefCell<MacTable>,
}

impl Bridge {
    pub fn port(&self, p: u32) -> Option<&PortVlan> {
        self.ports.iter().find(|(n, _)| *n == p).map(|x| &x.1)
    }
    /// Sets (or adds, at the end of the flood order) port `p`'s VLAN configuration.
    pub fn set_port(&mut self, p: u32, v: PortVlan) {
        match self.ports.iter_mut().find(|(n, _)| *n == p) {
            Some(x) => x.1 = v,
            None => self.ports.push((p, v)),
        }
    }
}

/// Parses `N:tag=V;trunks=A,B;vlan_mode=M` (the switch's `--vlan` option).
pub fn parse_port_vlan(spec: &str) -> Result<(u32, PortVlan), String> {
    let (n, rest) = spec
        .split_once(':')
        .ok_or_else(|| format!("`{spec}`: expected N:tag=V;trunks=A,B;vlan_mode=M"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("`{spec}`: bad port number"))?;
    let (mut tag, mut trunks, mut mode) = (None, None, None);
    for kv in rest.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("`{kv}`: expected KEY=VALUE"))?;
        let num = |s: &str| {
            s.trim()
                .parse::<u16>()
                .map_err(|_| format!("`{kv}`: bad VLAN `{s}`"))
        };
        match k.trim() {
            "tag" => tag = Some(num(v)?),
            "trunks" => {
                trunks = Some(
                    v.split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(num)
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            "vlan_mode" => mode = Some(v.trim().to_string()),
            o => return Err(format!("`{o}`: tag, trunks or vlan_mode")),
        }
    }
    Ok((n, PortVlan::configure(tag, trunks, mode.as_deref())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_modes_as_ovs_resolves_them() {
        let p = PortVlan::configure(Some(10), Some(vec![20]), None).unwrap();
        assert_eq!((p.mode, p.vlan, p.trunks), (VlanMode::Access, 10, None));
        let p = PortVlan::configure(Some(10), Some(vec![20, 0]), Some("native-untagged")).unwrap();
        assert_eq!(p.trunks, Some([10, 20].into_iter().collect()));
        assert!(p.input_vid_valid(0) && p.input_vid_valid(20) && !p.input_vid_valid(30));
        assert_eq!(p.input_vlan(0), 10);
        assert!(!p.output_tagged(10) && p.output_tagged(20));
        let t = PortVlan::configure(None, Some(vec![10, 20]), None).unwrap();
        assert!(
            !t.input_vid_valid(0),
            "a trunk without VLAN 0 drops untagged frames"
        );
        assert!(parse_port_vlan("1:vlan_mode=dot1q-tunnel").is_err());
        assert_eq!(parse_port_vlan("3:tag=7").unwrap().1.vlan, 7);
    }

    #[test]
    fn learning_ages_moves_and_evicts_fairly() {
        let mut ml = MacTable {
            max_entries: 3,
            idle_ms: 10_000,
            ..Default::default()
        };
        assert!(ml.learn(0x0200_0000_0001, 0, 1, 0));
        assert!(ml.take_changed());
        assert!(
            !ml.learn(0x0200_0000_0001, 0, 1, 500),
            "same port within 1 s"
        );
        assert!(!ml.take_changed());
        assert!(ml.learn(0x0200_0000_0001, 0, 2, 600), "moved");
        assert!(
            !ml.learn(0x0100_0000_0001, 0, 1, 600),
            "multicast never learned"
        );
        ml.learn(0x0200_0000_0002, 0, 2, 700);
        ml.learn(0x0200_0000_0003, 0, 3, 800);
        // full: port 2 has the most entries, its oldest (…01) goes
        ml.learn(0x0200_0000_0004, 0, 4, 900);
        assert_eq!(ml.lookup(0x0200_0000_0001, 0), None);
        assert_eq!(ml.lookup(0x0200_0000_0002, 0), Some(2));
        assert_eq!(ml.evicted, 1);
        assert_eq!(ml.run(10_699), 0);
        assert_eq!(ml.run(10_700), 1, "…02 not refreshed for 10 s");
        assert_eq!(ml.show(10_700).len(), 3);
    }
}
