//! OpenFlow table 0 + action translation into datapath actions, with the megaflow mask
//! Open vSwitch would install (ofproto/ofproto-dpif-xlate.c + lib/odp-util.c commit
//! logic), and the OVS text formats of both (`Megaflow:` / `Datapath actions:`).

use crate::classifier::Classifier;
use crate::field::Field;
use crate::group::{GroupEntry, GroupError};
use crate::key::{f, FlowKey, FRAG_ANY, FRAG_LATER, FRAG_MASK, VLAN_CFI, VLAN_PCP_MASK};
use crate::ofctl::{tcp_flag_name, Action, Group, GroupType, Match, Rule, SetField};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ethernet::{ethertype, ipproto};

/// A datapath action (the ODP actions OVS prints). Set actions carry (value, mask) per
/// field; a zero mask means "not set".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OdpAction {
    Output(u32),
    PushVlan {
        tpid: u16,
        tci: u16,
    },
    PopVlan,
    SetEth {
        src: (u64, u64),
        dst: (u64, u64),
    },
    SetIpv4 {
        src: (u32, u32),
        dst: (u32, u32),
        tos: (u8, u8),
        ttl: (u8, u8),
    },
    SetIpv6 {
        src: (u128, u128),
        dst: (u128, u128),
        /// Flow label (20 bits).
        label: (u32, u32),
        tclass: (u8, u8),
        hlimit: (u8, u8),
    },
    /// `set(arp(sip=,tip=,op=,sha=,tha=))` (masked; ARP only, not RARP).
    SetArp {
        sip: (u32, u32),
        tip: (u32, u32),
        op: (u16, u16),
        sha: (u64, u64),
        tha: (u64, u64),
    },
    /// `set(nd(target=,sll=,tll=))` (masked): the ICMPv6 ND target and options.
    SetNd {
        target: (u128, u128),
        sll: (u64, u64),
        tll: (u64, u64),
    },
    /// `set(icmp(type=,code=))` / `set(icmpv6(...))`: always both, unmasked.
    SetIcmp {
        v6: bool,
        icmp_type: u8,
        code: u8,
    },
    SetL4 {
        proto: u8,
        src: (u16, u16),
        dst: (u16, u16),
    },
    /// `hash(sym_l4(basis))`: the datapath computes `dp_hash` (select groups).
    HashSymL4(u32),
    /// `recirc(ID)`: look the packet up again with `recirc_id=ID`.
    Recirc(u32),
    /// `userspace(pid=0,controller(...))`: a packet-in.
    Controller {
        reason: u8,
        dont_send: bool,
        recirc_id: u32,
        cookie: u64,
        max_len: u16,
        /// The table of the rule whose action this is (OpenFlow packet-in `table_id`;
        /// not part of OVS's datapath action text).
        table_id: u8,
    },
}

/// C's `%#x`: "0" for zero, "0x.." otherwise.
fn hash_x(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

fn mac_str(v: u64) -> String {
    let b = v.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn ip4(v: u32) -> String {
    Ipv4Addr::from(v).to_string()
}
fn ip6(v: u128) -> String {
    Ipv6Addr::from(v).to_string()
}

impl std::fmt::Display for OdpAction {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        match *self {
            OdpAction::Output(p) => write!(fm, "{p}"),
            OdpAction::HashSymL4(b) => write!(fm, "hash(sym_l4({b}))"),
            OdpAction::Recirc(id) => write!(fm, "recirc({id:#x})"),
            OdpAction::PopVlan => write!(fm, "pop_vlan"),
            OdpAction::PushVlan { tpid, tci } => {
                write!(fm, "push_vlan(")?;
                if tpid != ethertype::VLAN {
                    write!(fm, "tpid={tpid:#06x},")?;
                }
                write!(fm, "vid={},pcp={}", tci & 0xfff, tci >> 13)?;
                if tci & VLAN_CFI == 0 {
                    write!(fm, ",cfi=0")?;
                }
                write!(fm, ")")
            }
            OdpAction::Controller {
                reason,
                dont_send,
                recirc_id,
                cookie,
                max_len,
                ..
            } => {
                write!(
                    fm,
                    "userspace(pid=0,controller(reason={reason},dont_send={},continuation=0,recirc_id={recirc_id},rule_cookie={},controller_id=0,max_len={max_len}))",
                    dont_send as u8,
                    hash_x(cookie)
                )
            }
            OdpAction::SetEth { src, dst } => {
                for (n, (v, m)) in [("src", src), ("dst", dst)] {
                    if m != 0 {
                        if m == 0xffff_ffff_ffff {
                            parts.push(format!("{n}={}", mac_str(v)));
                        } else {
                            parts.push(format!("{n}={}/{}", mac_str(v & m), mac_str(m)));
                        }
                    }
                }
                write!(fm, "set(eth({}))", parts.join(","))
            }
            OdpAction::SetIpv4 { src, dst, tos, ttl } => {
                for (n, (v, m)) in [("src", src), ("dst", dst)] {
                    if m != 0 {
                        if m == u32::MAX {
                            parts.push(format!("{n}={}", ip4(v)));
                        } else {
                            parts.push(format!("{n}={}/{}", ip4(v & m), ip4(m)));
                        }
                    }
                }
                if tos.1 != 0 {
                    let (v, m) = tos;
                    if m == 0xff {
                        parts.push(format!("tos={}", hash_x(v as u64)));
                    } else {
                        parts.push(format!(
                            "tos={}/{}",
                            hash_x((v & m) as u64),
                            hash_x(m as u64)
                        ));
                    }
                }
                if ttl.1 != 0 {
                    let (v, m) = ttl;
                    if m == 0xff {
                        parts.push(format!("ttl={v}"));
                    } else {
                        parts.push(format!("ttl={}/{}", v & m, hash_x(m as u64)));
                    }
                }
                write!(fm, "set(ipv4({}))", parts.join(","))
            }
            OdpAction::SetIpv6 {
                src,
                dst,
                label,
                tclass,
                hlimit,
            } => {
                for (n, (v, m)) in [("src", src), ("dst", dst)] {
                    if m != 0 {
                        if m == u128::MAX {
                            parts.push(format!("{n}={}", ip6(v)));
                        } else {
                            parts.push(format!("{n}={}/{}", ip6(v & m), ip6(m)));
                        }
                    }
                }
                if label.1 != 0 {
                    // OVS format_ipv6_label: %#x, the mask only when partial.
                    parts.push(format!("label={}", hash_x(label.0 as u64)));
                    if label.1 & 0xfffff != 0xfffff {
                        let last = parts.len() - 1;
                        parts[last].push_str(&format!("/{}", hash_x(label.1 as u64)));
                    }
                }
                if tclass.1 != 0 {
                    let (v, m) = tclass;
                    if m == 0xff {
                        parts.push(format!("tclass={}", hash_x(v as u64)));
                    } else {
                        parts.push(format!(
                            "tclass={}/{}",
                            hash_x((v & m) as u64),
                            hash_x(m as u64)
                        ));
                    }
                }
                if hlimit.1 != 0 {
                    let (v, m) = hlimit;
                    if m == 0xff {
                        parts.push(format!("hlimit={v}"));
                    } else {
                        parts.push(format!("hlimit={}/{}", v & m, hash_x(m as u64)));
                    }
                }
                write!(fm, "set(ipv6({}))", parts.join(","))
            }
            OdpAction::SetArp {
                sip,
                tip,
                op,
                sha,
                tha,
            } => {
                for (n, (v, m)) in [("sip", sip), ("tip", tip)] {
                    if m != 0 {
                        if m == u32::MAX {
                            parts.push(format!("{n}={}", ip4(v)));
                        } else {
                            parts.push(format!("{n}={}/{}", ip4(v & m), ip4(m)));
                        }
                    }
                }
                if op.1 != 0 {
                    if op.1 == 0xffff {
                        parts.push(format!("op={}", op.0));
                    } else {
                        parts.push(format!("op={}/{:#x}", op.0 & op.1, op.1));
                    }
                }
                mac_masked(&mut parts, "sha", sha.0, sha.1);
                mac_masked(&mut parts, "tha", tha.0, tha.1);
                write!(fm, "set(arp({}))", parts.join(","))
            }
            OdpAction::SetNd { target, sll, tll } => {
                let (v, m) = target;
                if m != 0 {
                    if m == u128::MAX {
                        parts.push(format!("target={}", ip6(v)));
                    } else {
                        parts.push(format!("target={}/{}", ip6(v & m), ip6(m)));
                    }
                }
                mac_masked(&mut parts, "sll", sll.0, sll.1);
                mac_masked(&mut parts, "tll", tll.0, tll.1);
                write!(fm, "set(nd({}))", parts.join(","))
            }
            OdpAction::SetIcmp {
                v6,
                icmp_type,
                code,
            } => write!(
                fm,
                "set({}(type={icmp_type},code={code}))",
                if v6 { "icmpv6" } else { "icmp" }
            ),
            OdpAction::SetL4 { proto, src, dst } => {
                for (n, (v, m)) in [("src", src), ("dst", dst)] {
                    if m != 0 {
                        if m == 0xffff {
                            parts.push(format!("{n}={v}"));
                        } else {
                            parts.push(format!("{n}={}/{}", v & m, hash_x(m as u64)));
                        }
                    }
                }
                let name = match proto {
                    ipproto::TCP => "tcp",
                    ipproto::UDP => "udp",
                    _ => "sctp",
                };
                write!(fm, "set({name}({}))", parts.join(","))
            }
        }
    }
}

/// Formats a datapath action list like OVS (`drop` when empty).
pub fn format_actions(a: &[OdpAction]) -> String {
    if a.is_empty() {
        return "drop".into();
    }
    a.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// OVS `MAX_DEPTH`: resubmits to the same or an earlier table may nest this deep.
pub const MAX_DEPTH: u32 = 64;
/// OVS `MAX_RESUBMITS` (`MAX_DEPTH * MAX_DEPTH`): resubmits + goto_tables per translation.
pub const MAX_RESUBMITS: u32 = MAX_DEPTH * MAX_DEPTH;

/// Why a translation failed (OVS `enum xlate_error`, `xlate_strerror` text). The packet
/// is dropped: the megaflow gets no actions (OVS: "Make sure we return a drop flow in
/// case of an error").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XlateError {
    /// More than [`MAX_DEPTH`] nested resubmits to the same or an earlier table.
    RecursionTooDeep,
    /// More than [`MAX_RESUBMITS`] resubmits/goto_tables in one translation.
    TooManyResubmits,
    /// A recirculated packet whose `recirc_id` is unknown (the table changed).
    NoRecircContext,
}

impl std::fmt::Display for XlateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XlateError::RecursionTooDeep => "Recursion too deep",
            XlateError::TooManyResubmits => "Too many resubmits",
            XlateError::NoRecircContext => "Recirculation context not found",
        })
    }
}

/// The OpenFlow tables 0–254: the rules plus one classifier per table.
#[derive(Debug, Clone, Default)]
pub struct FlowTable {
    /// Table 0's classifier. Its prefix-tracking setting (`set_prefix_tracking`) applies
    /// to every table.
    pub cls: Classifier,
    /// Tables 1–254 that hold (or held) rules.
    others: std::collections::BTreeMap<u8, Classifier>,
    pub rules: HashMap<u32, Rule>,
    next_id: u32,
    /// Recirculation id counter for packet-in (controller) actions, like OVS's allocator.
    next_recirc: std::cell::Cell<u32>,
    /// The switch's ports, when known: outputs to other ports are dropped, as OVS does
    /// ("Nonexistent output port"). `None`: every port exists.
    pub ports: Option<std::collections::BTreeSet<u32>>,
    /// Per-rule lifetime and statistics (see [`crate::ofproto`]), same keys as `rules`.
    pub(crate) life: HashMap<u32, crate::rule_stats::RuleStats>,
    /// The group table.
    pub groups: std::collections::BTreeMap<u32, GroupEntry>,
    /// The bridge `NORMAL` switches on: port VLAN modes, flood order, MAC learning.
    pub bridge: crate::normal::Bridge,
    /// Ports that exist but are down (not live for fast-failover / select buckets).
    pub ports_down: std::collections::BTreeSet<u32>,
    /// Frozen translations (select groups recirculate): recirc_id → state, and the
    /// reverse map so that equal states share an id (OVS `recirc_alloc_id_ctx`).
    frozen: std::cell::RefCell<(HashMap<u32, Frozen>, HashMap<Frozen, u32>)>,
}

/// What a recirculated packet resumes with (OVS `struct frozen_state`): the pipeline
/// metadata (registers, metadata, in_port), the table and the frozen actions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Frozen {
    table: u8,
    in_port: u64,
    meta: [u64; 9],
    actions: Vec<Action>,
}

/// The result of translating one flow.
#[derive(Debug, Clone)]
pub struct Xlated {
    /// The megaflow mask (1 = significant).
    pub wc: FlowKey,
    pub actions: Vec<OdpAction>,
    /// The rule matched in table 0 (None = table miss, dropped).
    pub rule: Option<u32>,
    /// Every rule the translation executed, in order (table 0's first; one per
    /// goto_table / resubmit that matched): the rules whose stats a megaflow credits.
    pub rules: Vec<u32>,
    /// Translation failed (resubmit limits): the packet is dropped.
    pub error: Option<XlateError>,
    /// Groups executed: (group id, bucket index; None = all buckets), for group stats.
    pub groups: Vec<(u32, Option<u32>)>,
    /// NORMAL learned (MAC, VLAN, port) while translating an upcall: refreshed again
    /// whenever the megaflow has traffic (OVS's xlate cache `XC_NORMAL`).
    pub learned: Vec<(u64, u16, u32)>,
    /// The (MAC, VLAN) entries NORMAL looked up in the MAC table: the megaflow's
    /// decision depends on them (the datapath revalidates it when one changes).
    pub mac_deps: Vec<(u64, u16)>,
    /// For each `recirc(N)` in `actions`: the packet's key as the datapath recirculates
    /// it (after the actions before it), with `recirc_id=N` and `dp_hash` 0.
    pub recirc_keys: Vec<FlowKey>,
}

impl FlowTable {
    pub fn new() -> FlowTable {
        FlowTable {
            next_recirc: std::cell::Cell::new(1),
            ..Default::default()
        }
    }
    pub fn from_rules(rules: Vec<Rule>) -> FlowTable {
        let mut t = FlowTable::new();
        for r in rules {
            t.add(r);
        }
        t
    }
    /// Adds a rule (replacing one with the same match and priority) at time 0; see
    /// [`Self::add_at`].
    pub fn add(&mut self, r: Rule) -> u32 {
        self.add_at(r, 0)
    }
    /// Adds a rule installed at `now` (ms; the clock of [`Self::expire`]), replacing one
    /// with the same match and priority. The new rule starts with zero counters, like an
    /// OpenFlow 1.0 `add` (ovs-ofctl's default protocol: add resets counts).
    pub fn add_at(&mut self, r: Rule, now: u64) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(old) = self.cls_mut(r.table).insert(&r.m, r.priority, id) {
            self.rules.remove(&old);
            self.life.remove(&old);
        }
        self.rules.insert(id, r);
        self.life.insert(id, crate::rule_stats::RuleStats::new(now));
        self.clear_frozen();
        id
    }
    /// Deletes rules whose match is covered by `m` (non-strict `del-flows`).
    pub fn del_matching(&mut self, m: &Match) -> usize {
        self.del_matching_in(None, m)
    }
    /// [`Self::del_matching`] in table `table` only (None: every table; `del-flows
    /// table=N,...`).
    pub fn del_matching_in(&mut self, table: Option<u8>, m: &Match) -> usize {
        let victims: Vec<(u32, Match, u16, u8)> = self
            .rules
            .iter()
            .filter(|(_, r)| table.is_none_or(|t| t == r.table))
            .filter(|(_, r)| {
                // rule's mask must include m's mask and values agree under m's mask
                r.m.mask.and(&m.mask) == m.mask && r.m.key.and(&m.mask) == m.key
            })
            .map(|(&id, r)| (id, r.m, r.priority, r.table))
            .collect();
        for (id, mm, p, t) in &victims {
            self.cls_mut(*t).remove(mm, *p);
            self.rules.remove(id);
            self.life.remove(id);
        }
        self.clear_frozen();
        victims.len()
    }
    pub fn clear(&mut self) {
        let tries = self.cls.prefix_tracking();
        self.cls = Classifier::new();
        self.cls.set_prefix_tracking(tries);
        self.others.clear();
        self.rules.clear();
        self.life.clear();
        self.clear_frozen();
    }

    /// Forgets frozen translations (after any table or group change: recirculated
    /// packets then miss, as OVS's recirc ids die with their datapath flows).
    pub fn clear_frozen(&mut self) {
        let fz = self.frozen.get_mut();
        fz.0.clear();
        fz.1.clear();
    }

    /// Adds or replaces (`mod-group`) a group; its counters start at zero.
    pub fn add_group(&mut self, g: Group) -> Result<(), GroupError> {
        let e = GroupEntry::new(g)?;
        self.groups.insert(e.group.group_id, e);
        self.clear_frozen();
        Ok(())
    }

    /// Deletes a group (None: all groups); returns how many went. Like OVS, rules
    /// that point to a deleted group are deleted with it.
    pub fn del_group(&mut self, id: Option<u32>) -> usize {
        let gone: Vec<u32> = match id {
            Some(i) => self.groups.remove(&i).map(|_| i).into_iter().collect(),
            None => std::mem::take(&mut self.groups).into_keys().collect(),
        };
        if !gone.is_empty() {
            let victims: Vec<(u32, Match, u16, u8)> = self
                .rules
                .iter()
                .filter(|(_, r)| {
                    r.actions
                        .iter()
                        .any(|a| matches!(a, Action::Group(g) if gone.contains(g)))
                })
                .map(|(&id, r)| (id, r.m, r.priority, r.table))
                .collect();
            for (rid, mm, p, t) in &victims {
                self.cls_mut(*t).remove(mm, *p);
                self.rules.remove(rid);
                self.life.remove(rid);
            }
        }
        self.clear_frozen();
        gone.len()
    }

    /// Credits `packets`/`bytes` to group `id` (bucket `bucket`, or every bucket).
    pub fn credit_group(&mut self, id: u32, bucket: Option<u32>, packets: u64, bytes: u64) {
        if let Some(e) = self.groups.get_mut(&id) {
            e.stats.packets += packets;
            e.stats.bytes += bytes;
            for (i, c) in e.stats.buckets.iter_mut().enumerate() {
                if bucket.is_none_or(|b| b as usize == i) {
                    c.0 += packets;
                    c.1 += bytes;
                }
            }
        }
    }

    /// Whether OpenFlow port `p` is live (exists and is up), OVS `odp_port_is_alive`.
    pub fn port_alive(&self, p: u32) -> bool {
        self.ports.as_ref().is_none_or(|ps| ps.contains(&p)) && !self.ports_down.contains(&p)
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }
    /// The classifier of table `t`, created on first use.
    pub(crate) fn cls_mut(&mut self, t: u8) -> &mut Classifier {
        if t == 0 {
            &mut self.cls
        } else {
            self.others.entry(t).or_default()
        }
    }
    /// The classifier of table `t` (None: no rule was ever added there).
    pub fn table_cls(&self, t: u8) -> Option<&Classifier> {
        if t == 0 {
            Some(&self.cls)
        } else {
            self.others.get(&t)
        }
    }
    /// Number of rules in table `t`.
    pub fn table_len(&self, t: u8) -> usize {
        self.table_cls(t).map_or(0, Classifier::len)
    }
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Translates `flow` (an upcall): classifier lookup + actions, returning the megaflow
    /// mask and the datapath actions exactly as OVS 3.1 computes them.
    pub fn xlate(&self, flow: &FlowKey) -> Xlated {
        self.xlate_with(flow, false)
    }

    /// [`Self::xlate`]; `dont_send` marks packet-ins as not to be sent (what OVS does
    /// when tracing a flow without packet bytes).
    pub fn xlate_with(&self, flow: &FlowKey, dont_send: bool) -> Xlated {
        self.xlate_full(flow, dont_send, None, None)
    }

    /// Translates the actions of an OpenFlow PACKET_OUT for the packet `flow` at `now`
    /// (ms): `actions` run as if a rule in table 0 had matched (resubmit / groups see
    /// the real tables), packet-ins are sent (reason action).
    pub fn xlate_packet_out(&self, flow: &FlowKey, actions: &[Action], now: u64) -> Xlated {
        self.xlate_full(flow, false, Some(now), Some(actions))
    }

    /// Translates an upcall at `now` (ms): like [`Self::xlate`], and `NORMAL` learns
    /// source MACs (a trace does not, as OVS's `ofproto/trace`).
    pub fn xlate_upcall(&self, flow: &FlowKey, now: u64) -> Xlated {
        self.xlate_full(flow, false, Some(now), None)
    }

    fn xlate_full(
        &self,
        flow: &FlowKey,
        dont_send: bool,
        learn_now: Option<u64>,
        packet_out: Option<&[Action]>,
    ) -> Xlated {
        let mut wc = FlowKey::ZERO;
        // xlate_wc_init
        wc.full(f::IN_PORT);
        wc.full(f::RECIRC_ID);
        wc.full(f::DL_TYPE);
        if flow.is_ip_any() {
            wc.or(f::NW_FRAG, FRAG_MASK as u64);
        }
        let mut x = Ctx {
            dont_send,
            flow: *flow,
            base: *flow,
            wc,
            out: Vec::new(),
            table_id: 0,
            cookie: 0,
            depth: 0,
            resubmits: 0,
            rules: Vec::new(),
            error: None,
            exit: false,
            freezing: false,
            freeze_hash: false,
            frozen: Vec::new(),
            groups: Vec::new(),
            recirc_keys: Vec::new(),
            learn_now,
            learned: Vec::new(),
            mac_deps: Vec::new(),
        };
        let recirc = flow.get(f::RECIRC_ID) as u32;
        let mut rule = None;
        if recirc != 0 {
            // Thaw (xlate_actions with a frozen state): restore the metadata, resume
            // the frozen actions; no table lookup.
            let fz = self.frozen.borrow().0.get(&recirc).cloned();
            match fz {
                None => x.error = Some(XlateError::NoRecircContext),
                Some(fz) => {
                    x.flow.w[crate::key::META_WORDS].copy_from_slice(&fz.meta);
                    x.flow.set(f::IN_PORT, fz.in_port);
                    x.base = x.flow;
                    x.table_id = fz.table;
                    self.do_actions(&mut x, &fz.actions, false);
                }
            }
        } else if let Some(acts) = packet_out {
            self.do_actions(&mut x, acts, false);
        } else {
            rule = self.lookup_in(&mut x, 0, flow.in_port());
            if let Some(id) = rule {
                if let Some(r) = self.rules.get(&id) {
                    x.rules.push(id);
                    x.cookie = r.cookie;
                    self.do_actions(&mut x, &r.actions, is_miss_rule(r));
                }
            }
        }
        if x.error.is_none() && x.freezing {
            self.finish_freezing(&mut x);
        }
        if let Some(e) = x.error {
            // OVS returns a drop flow on a translation error, with the mask as it was
            // when translation stopped: `goto exit` skips xlate_wc_finish (so registers
            // looked at stay in it, at their initial value 0).
            tracing::warn!(error = %e, "translation failed, packet is dropped");
            return Xlated {
                wc: x.wc,
                actions: Vec::new(),
                rule,
                rules: x.rules,
                error: x.error,
                groups: x.groups,
                recirc_keys: Vec::new(),
                learned: x.learned,
                mac_deps: x.mac_deps,
            };
        }
        let mut wc = x.wc;
        // xlate_wc_finish: registers and metadata are not part of a megaflow.
        for i in crate::key::META_WORDS {
            wc.w[i] = 0;
        }
        if flow.is_icmp_any() {
            let w = wc.get(f::TP_SRC) & 0xff;
            wc.set(f::TP_SRC, w);
            let w = wc.get(f::TP_DST) & 0xff;
            wc.set(f::TP_DST, w);
        }
        for fd in [f::VLAN0_TCI, f::VLAN1_TCI] {
            if wc.get(fd) != 0 {
                wc.or(fd, VLAN_CFI as u64);
            }
        }
        if flow.nw_frag() & FRAG_LATER != 0 {
            wc.set(f::TP_SRC, 0);
            wc.set(f::TP_DST, 0);
        }
        let nv = flow.n_vlans();
        if nv < 1 {
            wc.set(f::VLAN0_TCI, 0);
            wc.set(f::VLAN0_TPID, 0);
        }
        if nv < 2 {
            wc.set(f::VLAN1_TCI, 0);
            wc.set(f::VLAN1_TPID, 0);
        }
        Xlated {
            wc,
            actions: x.out,
            rule,
            rules: x.rules,
            error: x.error,
            groups: x.groups,
            recirc_keys: x.recirc_keys,
            learned: x.learned,
            mac_deps: x.mac_deps,
        }
    }

    /// OVS `finish_freezing`: commit, then `hash(...)` (select groups) and `recirc(ID)`
    /// with an id for the frozen state (the same id for an equal state).
    fn finish_freezing(&self, x: &mut Ctx) {
        x.commit();
        let mut meta = [0u64; 9];
        meta.copy_from_slice(&x.flow.w[crate::key::META_WORDS]);
        let fz = Frozen {
            table: 0,
            in_port: x.flow.get(f::IN_PORT),
            meta,
            actions: std::mem::take(&mut x.frozen),
        };
        let mut st = self.frozen.borrow_mut();
        let id = match st.1.get(&fz) {
            Some(&id) => id,
            None => {
                let id = self.next_recirc.get();
                self.next_recirc.set(id.wrapping_add(1).max(1));
                st.0.insert(id, fz.clone());
                st.1.insert(fz, id);
                id
            }
        };
        if x.freeze_hash {
            x.out.push(OdpAction::HashSymL4(0));
        }
        x.out.push(OdpAction::Recirc(id));
        let mut rk = x.base;
        for i in crate::key::META_WORDS {
            rk.w[i] = 0;
        }
        rk.set(f::RECIRC_ID, id as u64);
        rk.set(f::DP_HASH, 0);
        x.recirc_keys.push(rk);
        x.freezing = false;
        x.freeze_hash = false;
    }

    /// `rule_dpif_lookup_in_table` of table `table` for the current flow, with `in_port`
    /// as the input port for this lookup only and, for IP fragments, the transport ports
    /// looked up as 0 (frag_handling=normal); un-wildcards what the lookup looked at.
    fn lookup_in(&self, x: &mut Ctx, table: u8, in_port: u32) -> Option<u32> {
        let cls = self.table_cls(table)?;
        let mut lk = x.flow;
        if lk.is_ip_any() && lk.nw_frag() & FRAG_ANY != 0 {
            lk.set(f::TP_SRC, 0);
            lk.set(f::TP_DST, 0);
        }
        lk.set(f::IN_PORT, in_port as u64);
        cls.lookup_with(&lk, &mut x.wc, self.cls.prefix_tracking())
    }

    /// OVS `xlate_resubmit_resource_check`.
    fn resource_check(x: &mut Ctx) -> bool {
        if x.depth >= MAX_DEPTH {
            x.error = Some(XlateError::RecursionTooDeep);
            false
        } else if x.resubmits >= MAX_RESUBMITS {
            x.error = Some(XlateError::TooManyResubmits);
            false
        } else {
            true
        }
    }

    /// OVS `xlate_table_action` + `xlate_recursively` for `resubmit` / `goto_table`:
    /// resource check (depth, total), lookup in `table`, then the matched rule's actions.
    /// A miss runs nothing (the hidden miss rule has no actions: no controller here)
    /// but still counts as a resubmit, as in OVS.
    fn table_action(&self, x: &mut Ctx, in_port: u32, table: u8) {
        if !Self::resource_check(x) {
            return;
        }
        let old_table = x.table_id;
        x.table_id = table;
        let rule = self.lookup_in(x, table, in_port);
        x.resubmits += 1;
        let deepens = u32::from(table <= old_table);
        x.depth += deepens;
        if let Some(r) = rule.and_then(|id| self.rules.get(&id).map(|r| (id, r))) {
            x.rules.push(r.0);
            let old_cookie = x.cookie;
            x.cookie = r.1.cookie;
            self.do_actions(x, &r.1.actions, is_miss_rule(r.1));
            x.cookie = old_cookie;
        }
        x.depth -= deepens;
        x.table_id = old_table;
    }

    /// OVS `xlate_group_action`: false when the group does not exist (the rest of the
    /// action list is skipped, the pipeline goes on).
    fn group_action(&self, x: &mut Ctx, gid: u32) -> bool {
        if !Self::resource_check(x) {
            return true;
        }
        let Some(e) = self.groups.get(&gid) else {
            tracing::warn!(group = gid, "output to nonexistent group");
            return false;
        };
        let g = &e.group;
        match g.kind {
            GroupType::All | GroupType::Indirect => {
                for b in &g.buckets {
                    self.group_bucket(x, b);
                }
                x.groups.push((gid, None));
            }
            GroupType::Select | GroupType::FastFailover => {
                let pick = if g.kind == GroupType::FastFailover {
                    g.buckets.iter().position(|b| self.bucket_alive(g, b, 0))
                } else if x.flow.get(f::DP_HASH) == 0 {
                    // pick_dp_hash_select_group without a hash: recirculate with one.
                    x.exit = true;
                    x.freezing = true;
                    x.freeze_hash = true;
                    None
                } else {
                    x.wc.or(f::DP_HASH, e.hash_mask as u64);
                    let h = x.flow.get(f::DP_HASH) as u32;
                    (0..=e.hash_mask)
                        .map(|i| e.hash_map[(h.wrapping_add(i) & e.hash_mask) as usize])
                        .find(|&bi| self.bucket_alive(g, &g.buckets[bi], 0))
                };
                if let Some(bi) = pick {
                    self.group_bucket(x, &g.buckets[bi]);
                    x.groups.push((gid, Some(bi as u32)));
                }
            }
        }
        true
    }

    /// OVS `xlate_group_bucket`: the bucket's action set as an action list, one level
    /// deeper, on a clone of the flow (restored afterwards).
    fn group_bucket(&self, x: &mut Ctx, b: &crate::ofctl::Bucket) {
        let old = x.flow;
        let list = b.action_list();
        x.depth += 1;
        self.do_actions(x, &list, false);
        x.depth -= 1;
        if x.freezing && x.error.is_none() {
            self.finish_freezing(x);
        }
        x.flow = old;
        x.exit = false;
    }

    /// OVS `bucket_is_alive` (`MAX_LIVENESS_RECURSION` 128).
    fn bucket_alive(&self, g: &Group, b: &crate::ofctl::Bucket, depth: u32) -> bool {
        if depth >= 128 {
            return false;
        }
        if g.kind == GroupType::Select && b.weight == 0 {
            return false;
        }
        (b.watch_port.is_none() && b.watch_group.is_none())
            || b.watch_port
                .is_some_and(|p| p != crate::group::OFPP_CONTROLLER && self.port_alive(p))
            || b.watch_group.is_some_and(|w| {
                self.groups.get(&w).is_some_and(|e| {
                    e.group
                        .buckets
                        .iter()
                        .any(|bb| self.bucket_alive(&e.group, bb, depth + 1))
                })
            })
    }

    /// OVS `freeze_unroll_actions`: copies the rest of an action list into the frozen
    /// actions, with the table/cookie markers packet-ins and `resubmit(,255)` need, and
    /// the instructions as actions.
    fn unroll(x: &mut Ctx, rest: &[Action]) {
        for a in rest {
            match *a {
                Action::Output(_)
                | Action::InPort
                | Action::Normal
                | Action::Group(_)
                | Action::Controller(_)
                | Action::DecTtl
                | Action::Resubmit { table: None, .. } => {
                    let need = match x.frozen.iter().rev().find_map(|a| match *a {
                        Action::UnrollXlate { table, cookie } => Some((table, cookie)),
                        _ => None,
                    }) {
                        Some((t, c)) => t != x.table_id || c != x.cookie,
                        None => true,
                    };
                    if need {
                        x.frozen.push(Action::UnrollXlate {
                            table: x.table_id,
                            cookie: x.cookie,
                        });
                    }
                }
                Action::GotoTable(t) => {
                    x.frozen.push(Action::Resubmit {
                        port: None,
                        table: Some(t),
                    });
                    continue;
                }
                Action::WriteMetadata { value, mask } => {
                    x.frozen.push(Action::Load {
                        dst: crate::ofctl::MetaField::Metadata,
                        value,
                        mask,
                    });
                    continue;
                }
                _ => {}
            }
            x.frozen.push(a.clone());
        }
    }

    /// OVS `do_xlate_actions` over `actions`; `miss`: they are a table-miss rule's
    /// (packet-in reason no_match).
    fn do_actions(&self, x: &mut Ctx, actions: &[Action], miss: bool) {
        for (i, a) in actions.iter().enumerate() {
            // The flow's in_port (OVS `ctx->xin->flow.in_port`): a set_field/load/move
            // may have changed it; outputs to it are skipped, IN_PORT outputs to it.
            let in_port = x.flow.in_port();
            if x.error.is_some() {
                return;
            }
            if x.exit {
                if x.freezing {
                    Self::unroll(x, &actions[i..]);
                }
                return;
            }
            match *a {
                Action::Resubmit { port, table } => {
                    let p = port.unwrap_or(in_port);
                    self.table_action(x, p, table.unwrap_or(x.table_id));
                }
                Action::GotoTable(t) => self.table_action(x, in_port, t),
                Action::Group(g) => {
                    if !self.group_action(x, g) {
                        return;
                    }
                }
                Action::UnrollXlate { table, cookie } => {
                    x.table_id = table;
                    x.cookie = cookie;
                }
                Action::Load { dst, value, mask } => x.load(dst.fd(), value, mask),
                Action::WriteMetadata { value, mask } => {
                    // OVS writes the flow only (no un-wildcarding, unlike set_field).
                    let old = x.flow.get(f::METADATA);
                    x.flow.set(f::METADATA, (old & !mask) | (value & mask));
                }
                Action::Move {
                    src,
                    src_ofs,
                    dst,
                    dst_ofs,
                    n_bits,
                } => x.move_bits(src, src_ofs, dst, dst_ofs, n_bits),
                Action::LoadField {
                    dst, value, mask, ..
                } => {
                    // OVS OFPACT_SET_FIELD (`load` is one too): only if the packet has
                    // the field; the L3/ARP rewrites also need nw_proto in the megaflow.
                    if dst.prereqs_ok(&x.flow, Some(&mut x.wc)) {
                        dst.mask_l3_prereqs(&x.flow, &mut x.wc);
                        dst.unwildcard(&mut x.wc, mask);
                        dst.set_masked(&mut x.flow, value, mask);
                    }
                }
                Action::Output(p) => {
                    let exists = self.ports.as_ref().is_none_or(|ps| ps.contains(&p));
                    if p != in_port && exists {
                        x.commit();
                        x.out.push(OdpAction::Output(p));
                    }
                }
                Action::InPort => {
                    x.commit();
                    x.out.push(OdpAction::Output(in_port));
                }
                Action::Normal => self.xlate_normal(x),
                Action::Controller(max_len) => {
                    self.controller(x, if miss { 3 } else { 1 }, x.cookie, max_len);
                }
                Action::StripVlan => {
                    let n = x.flow.n_vlans();
                    if n > 1 {
                        x.wc.full(f::VLAN1_TCI);
                        x.wc.full(f::VLAN1_TPID);
                        let (t, c) = (x.flow.get(f::VLAN1_TPID), x.flow.get(f::VLAN1_TCI));
                        x.flow.set(f::VLAN0_TPID, t);
                        x.flow.set(f::VLAN0_TCI, c);
                        x.flow.set(f::VLAN1_TPID, 0);
                        x.flow.set(f::VLAN1_TCI, 0);
                    } else if n == 1 {
                        x.flow.set(f::VLAN0_TPID, 0);
                        x.flow.set(f::VLAN0_TCI, 0);
                    }
                }
                Action::PushVlan(tpid) => {
                    let n = x.flow.n_vlans();
                    if n >= 1 {
                        x.wc.full(f::VLAN0_TCI);
                        x.wc.full(f::VLAN0_TPID);
                    }
                    if n >= 2 {
                        x.wc.full(f::VLAN1_TCI);
                        x.wc.full(f::VLAN1_TPID);
                    }
                    let (t, c) = (x.flow.get(f::VLAN0_TPID), x.flow.get(f::VLAN0_TCI));
                    x.flow.set(f::VLAN1_TPID, t);
                    x.flow.set(f::VLAN1_TCI, c);
                    x.flow.set(f::VLAN0_TPID, tpid as u64);
                    x.flow.set(f::VLAN0_TCI, VLAN_CFI as u64);
                }
                Action::SetField(sf, v) => self.set_field(x, sf, v),
                Action::ModNwTtl(t) => {
                    // OVS OFPACT_SET_IP_TTL.
                    if x.flow.is_ip_any() {
                        x.wc.full(f::NW_PROTO);
                        x.wc.full(f::NW_TTL);
                        x.flow.set(f::NW_TTL, t as u64);
                    }
                }
                Action::DecTtl => {
                    x.wc.full(f::NW_TTL);
                    x.wc.full(f::NW_PROTO);
                    if !x.flow.is_ip_any() {
                        continue;
                    }
                    let ttl = x.flow.get(f::NW_TTL);
                    if ttl > 1 {
                        x.flow.set(f::NW_TTL, ttl - 1);
                    } else {
                        self.controller(x, 2, x.cookie, 0xffff);
                        return;
                    }
                }
            }
            // "Check if need to store this and the remaining actions for later
            // execution" (a select group froze the translation).
            if x.error.is_none() && x.exit && x.frozen.is_empty() {
                Self::unroll(x, &actions[i..]);
                return;
            }
        }
    }

    /// OVS `xlate_normal` (no mcast snooping, bonds, mirrors, STP).
    fn xlate_normal(&self, x: &mut Ctx) {
        x.wc.full(f::DL_SRC);
        x.wc.full(f::DL_DST);
        x.wc.or(f::VLAN0_TCI, 0x1fff);
        let br = &self.bridge;
        let in_port = x.flow.in_port();
        let Some(inb) = br.port(in_port) else {
            tracing::debug!(port = in_port, "NORMAL: no input bundle, dropping");
            return;
        };
        let tci = x.flow.vlan0_tci();
        if wire::ethernet::is_vlan_tpid(x.flow.dl_type()) && tci & VLAN_CFI == 0 {
            return; // partial VLAN tag
        }
        let (in_vid, pcp) = if tci & VLAN_CFI != 0 {
            (tci & 0x0fff, tci & VLAN_PCP_MASK)
        } else {
            (0, 0)
        };
        let tpid = if tci & VLAN_CFI != 0 {
            x.flow.get(f::VLAN0_TPID) as u16
        } else {
            0
        };
        if !inb.input_vid_valid(in_vid) {
            tracing::debug!(
                port = in_port,
                vid = in_vid,
                "NORMAL: disallowed VLAN, dropping"
            );
            return;
        }
        let vlan = inb.input_vlan(in_vid);
        let tpid = if tpid == 0 { ethertype::VLAN } else { tpid };
        let dst = x.flow.get(f::DL_DST);
        // is_admissible: reserved multicast (01:80:c2:00:00:0x) without forward_bpdu
        if dst & !0xf == 0x0180_c200_0000 {
            return;
        }
        // is_gratuitous_arp: only its un-wildcarding matters without bonds
        if x.flow.dl_type() == ethertype::ARP {
            x.wc.full(f::DL_DST);
            if dst == 0xffff_ffff_ffff {
                x.wc.full(f::NW_PROTO);
                if x.flow.nw_proto() == 1 {
                    x.wc.full(f::NW_SRC);
                    x.wc.full(f::NW_DST);
                }
            }
        }
        let src = x.flow.get(f::DL_SRC);
        if let Some(now) = x.learn_now {
            br.ml.borrow_mut().learn(src, vlan, in_port, now);
            x.learned.push((src, vlan, in_port));
        }
        let learned = br.ml.borrow().lookup(dst, vlan);
        if dst & (1 << 40) == 0 && !x.mac_deps.contains(&(dst, vlan)) {
            x.mac_deps.push((dst, vlan)); // unicast: the MAC table decided
        }
        match learned {
            Some(p) if p != in_port => {
                if let Some(ob) = br.port(p) {
                    self.output_normal(x, p, ob, vlan, pcp, tpid);
                }
            }
            Some(_) => {} // learned port is the input port
            None => {
                for (p, ob) in &br.ports {
                    if *p != in_port && ob.includes_vlan(vlan) {
                        self.output_normal(x, *p, ob, vlan, pcp, tpid);
                    }
                }
            }
        }
    }

    /// OVS `output_normal`: the VLAN the output port wants (`xvlan_put`), output, and
    /// the flow's VLAN back.
    fn output_normal(
        &self,
        x: &mut Ctx,
        port: u32,
        ob: &crate::normal::PortVlan,
        vlan: u16,
        pcp: u16,
        tpid: u16,
    ) {
        let (old_t, old_c) = (x.flow.get(f::VLAN0_TPID), x.flow.get(f::VLAN0_TCI));
        let tci = if ob.output_tagged(vlan) {
            vlan | pcp
        } else {
            0
        };
        if tci != 0 {
            x.flow.set(f::VLAN0_TCI, (tci | VLAN_CFI) as u64);
            x.flow.set(f::VLAN0_TPID, tpid as u64);
        } else {
            x.flow.set(f::VLAN0_TCI, 0);
        }
        let exists = self.ports.as_ref().is_none_or(|ps| ps.contains(&port));
        if port != x.flow.in_port() && exists {
            x.commit();
            x.out.push(OdpAction::Output(port));
        }
        x.flow.set(f::VLAN0_TPID, old_t);
        x.flow.set(f::VLAN0_TCI, old_c);
    }

    fn controller(&self, x: &mut Ctx, reason: u8, cookie: u64, max_len: u16) {
        x.commit();
        let id = self.next_recirc.get();
        self.next_recirc.set(id.wrapping_add(1).max(1));
        x.out.push(OdpAction::Controller {
            reason,
            dont_send: x.dont_send,
            recirc_id: id,
            cookie,
            max_len,
            table_id: x.table_id,
        });
    }

    fn set_field(&self, x: &mut Ctx, sf: SetField, v: u128) {
        let fl = &mut x.flow;
        let wc = &mut x.wc;
        match sf {
            SetField::EthSrc => {
                wc.full(f::DL_SRC);
                fl.set(f::DL_SRC, v as u64);
            }
            SetField::EthDst => {
                wc.full(f::DL_DST);
                fl.set(f::DL_DST, v as u64);
            }
            SetField::Ipv4Src | SetField::Ipv4Dst => {
                if fl.is_ipv4() {
                    wc.full(f::NW_PROTO);
                    let fd = if sf == SetField::Ipv4Src {
                        f::NW_SRC
                    } else {
                        f::NW_DST
                    };
                    wc.full(fd);
                    fl.set(fd, v as u64);
                }
            }
            SetField::Ipv6Src | SetField::Ipv6Dst => {
                if fl.is_ipv6() {
                    wc.full(f::NW_PROTO);
                    let (hi, lo) = if sf == SetField::Ipv6Src {
                        (f::IPV6_SRC_HI, f::IPV6_SRC_LO)
                    } else {
                        (f::IPV6_DST_HI, f::IPV6_DST_LO)
                    };
                    wc.full(hi);
                    wc.full(lo);
                    fl.set128(hi, lo, v);
                }
            }
            SetField::IpDscp | SetField::NwTos => {
                if fl.is_ip_any() {
                    if sf == SetField::NwTos {
                        wc.full(f::NW_PROTO);
                    }
                    wc.or(f::NW_TOS, 0xfc);
                    let t = (fl.get(f::NW_TOS) & 0x03) | (v as u64 & 0xfc);
                    fl.set(f::NW_TOS, t);
                }
            }
            SetField::TcpSrc | SetField::TcpDst | SetField::UdpSrc | SetField::UdpDst => {
                let want = if matches!(sf, SetField::TcpSrc | SetField::TcpDst) {
                    ipproto::TCP
                } else {
                    ipproto::UDP
                };
                if fl.is_ip_any() {
                    wc.full(f::NW_PROTO);
                    if fl.nw_proto() == want && fl.nw_frag() & FRAG_LATER == 0 {
                        let fd = if matches!(sf, SetField::TcpSrc | SetField::UdpSrc) {
                            f::TP_SRC
                        } else {
                            f::TP_DST
                        };
                        wc.full(fd);
                        fl.set(fd, v as u64);
                    }
                }
            }
            SetField::VlanVid | SetField::VlanPcp => {
                wc.or(f::VLAN0_TCI, VLAN_CFI as u64);
                if fl.vlan0_tci() & VLAN_CFI != 0 {
                    let tci = fl.vlan0_tci();
                    let new = if sf == SetField::VlanVid {
                        wc.or(f::VLAN0_TCI, 0x1fff);
                        (tci & !0x1fff) | (v as u16 & 0x0fff) | VLAN_CFI
                    } else {
                        wc.or(f::VLAN0_TCI, VLAN_PCP_MASK as u64);
                        (tci & !VLAN_PCP_MASK) | ((v as u16 & 7) << 13) | VLAN_CFI
                    };
                    fl.set(f::VLAN0_TCI, new as u64);
                }
            }
        }
    }
}

/// A table-miss rule (priority 0, matches everything): its packet-ins say no_match.
fn is_miss_rule(r: &Rule) -> bool {
    r.priority == 0 && r.m.mask.is_zero()
}

struct Ctx {
    dont_send: bool,
    flow: FlowKey,
    base: FlowKey,
    wc: FlowKey,
    out: Vec<OdpAction>,
    /// The table whose rule is executing (`resubmit(,255)` means this one).
    table_id: u8,
    /// That rule's cookie (packet-ins).
    cookie: u64,
    /// Translation stops here (freezing for a select group's recirculation).
    exit: bool,
    freezing: bool,
    /// The recirculation computes `dp_hash` first.
    freeze_hash: bool,
    /// Frozen actions (OVS `ctx->frozen_actions`).
    frozen: Vec<Action>,
    groups: Vec<(u32, Option<u32>)>,
    recirc_keys: Vec<FlowKey>,
    /// Side effects allowed (an upcall, not a trace): NORMAL learns at this time (ms).
    learn_now: Option<u64>,
    learned: Vec<(u64, u16, u32)>,
    mac_deps: Vec<(u64, u16)>,
    /// Nesting of resubmits to the same or an earlier table (OVS `ctx->depth`).
    depth: u32,
    /// goto_table + resubmit lookups so far (OVS `ctx->resubmits`).
    resubmits: u32,
    rules: Vec<u32>,
    error: Option<XlateError>,
}

impl Ctx {
    /// `mf_set_flow_value_masked` + `mf_mask_field_masked` on a pipeline field.
    fn load(&mut self, fd: crate::key::Fd, value: u64, mask: u64) {
        self.wc.or(fd, mask);
        let old = self.flow.get(fd);
        self.flow.set(fd, (old & !mask) | (value & mask));
    }

    /// OVS `mf_subfield_copy`: only when the destination's and the source's
    /// prerequisites hold (checking them un-wildcards what they look at, e.g.
    /// `nw_proto` for TCP/UDP); un-wildcards the source and destination bits.
    fn move_bits(&mut self, src: Field, sofs: u8, dst: Field, dofs: u8, n: u8) {
        if !(dst.prereqs_ok(&self.flow, Some(&mut self.wc))
            && src.prereqs_ok(&self.flow, Some(&mut self.wc)))
        {
            return;
        }
        let ones = if n >= 128 {
            u128::MAX
        } else {
            (1u128 << n) - 1
        };
        src.unwildcard(&mut self.wc, ones << sofs);
        dst.unwildcard(&mut self.wc, ones << dofs);
        let v = (src.get(&self.flow) >> sofs) & ones;
        dst.set_masked(&mut self.flow, v << dofs, ones << dofs);
    }

    /// commit_odp_actions: emit set/push/pop actions for what changed since `base`.
    fn commit(&mut self) {
        let b0 = self.base;
        let (fl, b, wc) = (&self.flow, &b0, &self.wc);
        let nb = &mut self.base;
        // Ethernet.
        let pick = |fd| {
            if fl.get(fd) != b.get(fd) {
                (fl.get(fd) & wc.get(fd), wc.get(fd))
            } else {
                (0, 0)
            }
        };
        let (s, d) = (pick(f::DL_SRC), pick(f::DL_DST));
        if s.1 != 0 || d.1 != 0 {
            self.out.push(OdpAction::SetEth { src: s, dst: d });
            nb.set(f::DL_SRC, fl.get(f::DL_SRC));
            nb.set(f::DL_DST, fl.get(f::DL_DST));
        }
        if fl.nw_proto() != 0 && b.is_ipv4() {
            let p32 = |fd| {
                let (v, m) = pick(fd);
                (v as u32, m as u32)
            };
            let p8 = |fd| {
                let (v, m) = pick(fd);
                (v as u8, m as u8)
            };
            let (s, d, tos, ttl) = (p32(f::NW_SRC), p32(f::NW_DST), p8(f::NW_TOS), p8(f::NW_TTL));
            if s.1 != 0 || d.1 != 0 || tos.1 != 0 || ttl.1 != 0 {
                self.out.push(OdpAction::SetIpv4 {
                    src: s,
                    dst: d,
                    tos,
                    ttl,
                });
                for fd in [f::NW_SRC, f::NW_DST, f::NW_TOS, f::NW_TTL] {
                    nb.set(fd, fl.get(fd));
                }
            }
        } else if fl.nw_proto() != 0 && b.is_ipv6() {
            let p128 = |hi, lo| {
                if fl.get128(hi, lo) != b.get128(hi, lo) {
                    let m = wc.get128(hi, lo);
                    (fl.get128(hi, lo) & m, m)
                } else {
                    (0, 0)
                }
            };
            let p8 = |fd| {
                let (v, m) = pick(fd);
                (v as u8, m as u8)
            };
            let s = p128(f::IPV6_SRC_HI, f::IPV6_SRC_LO);
            let d = p128(f::IPV6_DST_HI, f::IPV6_DST_LO);
            let (tc, hl) = (p8(f::NW_TOS), p8(f::NW_TTL));
            let label = {
                let (v, m) = pick(f::IPV6_LABEL);
                (v as u32 & 0xfffff, m as u32 & 0xfffff)
            };
            if s.1 != 0 || d.1 != 0 || tc.1 != 0 || hl.1 != 0 || label.1 != 0 {
                self.out.push(OdpAction::SetIpv6 {
                    src: s,
                    dst: d,
                    label,
                    tclass: tc,
                    hlimit: hl,
                });
                for fd in [
                    f::IPV6_SRC_HI,
                    f::IPV6_SRC_LO,
                    f::IPV6_DST_HI,
                    f::IPV6_DST_LO,
                    f::IPV6_LABEL,
                    f::NW_TOS,
                    f::NW_TTL,
                ] {
                    nb.set(fd, fl.get(fd));
                }
            }
            // commit_set_nd_action (masked set) for ICMPv6.
            if b.nw_proto() == ipproto::ICMPV6 {
                let t = p128(f::ND_TARGET_HI, f::ND_TARGET_LO);
                let (sll, tll) = (pick(f::ARP_SHA), pick(f::ARP_THA));
                if t.1 != 0 || sll.1 != 0 || tll.1 != 0 {
                    self.out.push(OdpAction::SetNd {
                        target: t,
                        sll,
                        tll,
                    });
                    for fd in [f::ND_TARGET_HI, f::ND_TARGET_LO, f::ARP_SHA, f::ARP_THA] {
                        nb.set(fd, fl.get(fd));
                    }
                }
            }
        } else if fl.nw_proto() != 0 && b.dl_type() == ethertype::ARP {
            // commit_set_arp_action: always a masked set.
            let p32 = |fd| {
                let (v, m) = pick(fd);
                (v as u32, m as u32)
            };
            let (sip, tip) = (p32(f::NW_SRC), p32(f::NW_DST));
            let op = {
                let (v, m) = pick(f::NW_PROTO);
                // The ARP key's op is 16 bits; OVS widens a full nw_proto mask to 0xffff.
                (v as u16, if m == 0xff { 0xffff } else { m as u16 })
            };
            let (sha, tha) = (pick(f::ARP_SHA), pick(f::ARP_THA));
            if sip.1 != 0 || tip.1 != 0 || op.1 != 0 || sha.1 != 0 || tha.1 != 0 {
                self.out.push(OdpAction::SetArp {
                    sip,
                    tip,
                    op,
                    sha,
                    tha,
                });
                for fd in [f::NW_SRC, f::NW_DST, f::NW_PROTO, f::ARP_SHA, f::ARP_THA] {
                    nb.set(fd, fl.get(fd));
                }
            }
        }
        if fl.nw_proto() != 0
            && b.is_ip_any()
            && matches!(fl.nw_proto(), ipproto::TCP | ipproto::UDP | ipproto::SCTP)
        {
            let p16 = |fd| {
                let (v, m) = pick(fd);
                (v as u16, m as u16)
            };
            let (s, d) = (p16(f::TP_SRC), p16(f::TP_DST));
            if s.1 != 0 || d.1 != 0 {
                self.out.push(OdpAction::SetL4 {
                    proto: fl.nw_proto(),
                    src: s,
                    dst: d,
                });
                nb.set(f::TP_SRC, fl.get(f::TP_SRC));
                nb.set(f::TP_DST, fl.get(f::TP_DST));
            }
        }
        // commit_set_icmp_action: a plain (unmasked) set of type and code; both become
        // exact in the megaflow.
        let v6 = fl.is_ipv6() && fl.nw_proto() == ipproto::ICMPV6;
        if (fl.is_ipv4() && fl.nw_proto() == ipproto::ICMP) || v6 {
            let b = self.base;
            let ty = (self.flow.get(f::TP_SRC) & 0xff, b.get(f::TP_SRC) & 0xff);
            let code = (self.flow.get(f::TP_DST) & 0xff, b.get(f::TP_DST) & 0xff);
            if ty.0 != ty.1 || code.0 != code.1 {
                self.out.push(OdpAction::SetIcmp {
                    v6,
                    icmp_type: ty.0 as u8,
                    code: code.0 as u8,
                });
                self.wc.set(f::TP_SRC, 0xff);
                self.wc.set(f::TP_DST, 0xff);
                self.base.set(f::TP_SRC, self.flow.get(f::TP_SRC));
                self.base.set(f::TP_DST, self.flow.get(f::TP_DST));
            }
        }
        let b1 = self.base;
        let (fl, b) = (&self.flow, &b1);
        // VLANs: skip the common inner headers, pop the rest of base, push the rest of flow.
        let stack = |k: &FlowKey| -> Vec<u32> {
            let mut v = Vec::new();
            for (t, c) in [(f::VLAN0_TPID, f::VLAN0_TCI), (f::VLAN1_TPID, f::VLAN1_TCI)] {
                if k.get(c) as u16 & VLAN_CFI == 0 {
                    break;
                }
                v.push(((k.get(t) as u32) << 16) | k.get(c) as u32);
            }
            v
        };
        let bs = stack(b);
        let fs = stack(fl);
        let (mut bn, mut fnn) = (bs.len() as isize - 1, fs.len() as isize - 1);
        // compare from the innermost (last) header
        let (mut bi, mut fi) = (bs.len() as isize - 1, fs.len() as isize - 1);
        while bi >= 0 && fi >= 0 && bs[bi as usize] == fs[fi as usize] {
            bi -= 1;
            fi -= 1;
        }
        bn = bn.min(bi);
        fnn = fnn.min(fi);
        while bn >= 0 {
            self.out.push(OdpAction::PopVlan);
            let (t, c) = if bn == 0 {
                (f::VLAN0_TPID, f::VLAN0_TCI)
            } else {
                (f::VLAN1_TPID, f::VLAN1_TCI)
            };
            self.wc.full(t);
            self.wc.full(c);
            bn -= 1;
        }
        while fnn >= 0 {
            let q = fs[fnn as usize];
            self.out.push(OdpAction::PushVlan {
                tpid: (q >> 16) as u16,
                tci: q as u16,
            });
            fnn -= 1;
        }
        for fd in [f::VLAN0_TPID, f::VLAN0_TCI, f::VLAN1_TPID, f::VLAN1_TCI] {
            self.base.set(fd, self.flow.get(fd));
        }
    }
}

fn ip4_masked(v: u32, m: u32) -> String {
    if m == u32::MAX {
        ip4(v)
    } else if m.leading_ones() + m.trailing_zeros() == 32 {
        format!("{}/{}", ip4(v), m.leading_ones())
    } else {
        format!("{}/{}", ip4(v), ip4(m))
    }
}

fn ip6_masked(v: u128, m: u128) -> String {
    if m == u128::MAX {
        ip6(v)
    } else if m.leading_ones() + m.trailing_zeros() == 128 {
        format!("{}/{}", ip6(v), m.leading_ones())
    } else {
        format!("{}/{}", ip6(v), ip6(m))
    }
}

fn be16_masked(out: &mut Vec<String>, name: &str, v: u64, m: u64) {
    if m != 0 {
        if m == 0xffff {
            out.push(format!("{name}={v}"));
        } else {
            out.push(format!("{name}={:#x}/{:#x}", v & m, m));
        }
    }
}

fn mac_masked(out: &mut Vec<String>, name: &str, v: u64, m: u64) {
    if m != 0 {
        if m == 0xffff_ffff_ffff {
            out.push(format!("{name}={}", mac_str(v)));
        } else {
            out.push(format!("{name}={}/{}", mac_str(v & m), mac_str(m)));
        }
    }
}

/// Formats a megaflow (flow + mask) like OVS's `match_format` does for `Megaflow:`.
pub fn format_megaflow(flow: &FlowKey, wc: &FlowKey) -> String {
    match_items(flow, wc, true).join(",")
}

/// Formats an OpenFlow rule's match like OVS's `match_format` with the rule's priority
/// (as `ovs-ofctl dump-flows` prints it): `priority=N,` first unless N is the default
/// 32768, no packet type (`eth`), fields in OVS's order; "" for a catch-all at the
/// default priority.
pub fn format_rule_match(m: &Match, priority: u16) -> String {
    let mut o = Vec::new();
    if priority != crate::ofctl::DEFAULT_PRIORITY {
        o.push(format!("priority={priority}"));
    }
    o.extend(match_items(&m.key, &m.mask, false));
    o.join(",")
}

/// The comma-separated items of OVS's `match_format`; `megaflow`: a datapath flow
/// (OVS prints the packet type `eth` for those).
fn match_items(flow: &FlowKey, wc: &FlowKey, megaflow: bool) -> Vec<String> {
    let fv = flow.and(wc);
    let mut o: Vec<String> = Vec::new();
    if wc.get(f::RECIRC_ID) != 0 {
        o.push(format!("recirc_id={}", hash_x(fv.get(f::RECIRC_ID))));
    }
    if wc.get(f::DP_HASH) != 0 {
        let m = wc.get(f::DP_HASH);
        if m == 0xffff_ffff {
            o.push(format!("dp_hash={}", hash_x(fv.get(f::DP_HASH))));
        } else {
            o.push(format!("dp_hash={}/{m:#x}", hash_x(fv.get(f::DP_HASH))));
        }
    }
    if megaflow {
        o.push("eth".into());
    }

    let dl_type = fv.dl_type();
    let mut skip_type = false;
    let mut skip_proto = false;
    if wc.get(f::DL_TYPE) != 0 {
        skip_type = true;
        let proto_m = wc.get(f::NW_PROTO) != 0;
        let p = fv.nw_proto();
        let s = match dl_type {
            ethertype::IPV4 => {
                if proto_m {
                    skip_proto = true;
                    match p {
                        ipproto::ICMP => "icmp",
                        ipproto::TCP => "tcp",
                        ipproto::UDP => "udp",
                        ipproto::SCTP => "sctp",
                        _ => {
                            skip_proto = false;
                            "ip"
                        }
                    }
                } else {
                    "ip"
                }
            }
            ethertype::IPV6 => {
                if proto_m {
                    skip_proto = true;
                    match p {
                        ipproto::ICMPV6 => "icmp6",
                        ipproto::TCP => "tcp6",
                        ipproto::UDP => "udp6",
                        ipproto::SCTP => "sctp6",
                        _ => {
                            skip_proto = false;
                            "ipv6"
                        }
                    }
                } else {
                    "ipv6"
                }
            }
            ethertype::ARP => "arp",
            ethertype::RARP => "rarp",
            ethertype::MPLS => "mpls",
            ethertype::MPLS_MCAST => "mplsm",
            _ => {
                skip_type = false;
                ""
            }
        };
        if !s.is_empty() {
            o.push(s.into());
        }
    }
    // OVS match_format: registers (an xreg shows as its two registers), then
    // metadata, then in_port.
    for (i, fd) in f::REGS.iter().enumerate() {
        let (v, m) = (fv.get(*fd), wc.get(*fd));
        if m == 0xffff_ffff {
            o.push(format!("reg{i}={}", hash_x(v)));
        } else if m != 0 {
            o.push(format!("reg{i}={}/{m:#x}", hash_x(v)));
        }
    }
    let (v, m) = (fv.get(f::METADATA), wc.get(f::METADATA));
    if m == u64::MAX {
        o.push(format!("metadata={}", hash_x(v)));
    } else if m != 0 {
        o.push(format!("metadata={}/{m:#x}", hash_x(v)));
    }
    if wc.get(f::IN_PORT) != 0 {
        o.push(format!("in_port={}", fv.in_port()));
    }
    for (i, fd) in [f::VLAN0_TCI, f::VLAN1_TCI].into_iter().enumerate() {
        let m = wc.get(fd) as u16;
        if m == 0 {
            break;
        }
        let sfx = if i == 0 { String::new() } else { i.to_string() };
        let t = flow.get(fd) as u16;
        let vid_m = m & 0x0fff;
        let pcp_m = m & VLAN_PCP_MASK;
        let cfi = m & VLAN_CFI;
        if cfi != 0
            && t & VLAN_CFI != 0
            && (vid_m == 0 || vid_m == 0x0fff)
            && (pcp_m == 0 || pcp_m == VLAN_PCP_MASK)
            && (vid_m != 0 || pcp_m != 0)
        {
            if vid_m != 0 {
                o.push(format!("dl_vlan{sfx}={}", t & 0x0fff));
            }
            if pcp_m != 0 {
                o.push(format!("dl_vlan_pcp{sfx}={}", t >> 13));
            }
        } else if m == 0xffff {
            o.push(format!("vlan_tci{sfx}={:#06x}", t));
        } else {
            o.push(format!("vlan_tci{sfx}={:#06x}/{:#06x}", t & m, m));
        }
    }
    mac_masked(&mut o, "dl_src", flow.get(f::DL_SRC), wc.get(f::DL_SRC));
    mac_masked(&mut o, "dl_dst", flow.get(f::DL_DST), wc.get(f::DL_DST));
    if !skip_type && wc.get(f::DL_TYPE) != 0 {
        o.push(format!("dl_type={:#06x}", dl_type));
    }
    let ip4m = |o: &mut Vec<String>, n: &str, fd| {
        let m = wc.get(fd) as u32;
        if m != 0 {
            o.push(format!("{n}={}", ip4_masked(fv.get(fd) as u32, m)));
        }
    };
    if dl_type == ethertype::IPV6 {
        for (n, hi, lo) in [
            ("ipv6_src", f::IPV6_SRC_HI, f::IPV6_SRC_LO),
            ("ipv6_dst", f::IPV6_DST_HI, f::IPV6_DST_LO),
        ] {
            let m = wc.get128(hi, lo);
            if m != 0 {
                o.push(format!("{n}={}", ip6_masked(fv.get128(hi, lo), m)));
            }
        }
        let lm = wc.get(f::IPV6_LABEL);
        if lm != 0 {
            if lm == 0xffff_ffff {
                o.push(format!("ipv6_label={:#07x}", fv.get(f::IPV6_LABEL)));
            } else {
                o.push(format!(
                    "ipv6_label={:#07x}/{:#07x}",
                    fv.get(f::IPV6_LABEL),
                    lm
                ));
            }
        }
    } else if dl_type == ethertype::ARP || dl_type == ethertype::RARP {
        ip4m(&mut o, "arp_spa", f::NW_SRC);
        ip4m(&mut o, "arp_tpa", f::NW_DST);
    } else {
        ip4m(&mut o, "nw_src", f::NW_SRC);
        ip4m(&mut o, "nw_dst", f::NW_DST);
    }
    if !skip_proto && wc.get(f::NW_PROTO) != 0 {
        if dl_type == ethertype::ARP || dl_type == ethertype::RARP {
            o.push(format!("arp_op={}", fv.nw_proto()));
        } else {
            o.push(format!("nw_proto={}", fv.nw_proto()));
        }
    }
    if dl_type == ethertype::ARP || dl_type == ethertype::RARP {
        mac_masked(&mut o, "arp_sha", flow.get(f::ARP_SHA), wc.get(f::ARP_SHA));
        mac_masked(&mut o, "arp_tha", flow.get(f::ARP_THA), wc.get(f::ARP_THA));
    }
    let tos_m = wc.get(f::NW_TOS);
    if tos_m & 0xfc != 0 {
        o.push(format!("nw_tos={}", fv.get(f::NW_TOS) & 0xfc));
    }
    if tos_m & 0x03 != 0 {
        o.push(format!("nw_ecn={}", fv.get(f::NW_TOS) & 0x03));
    }
    if wc.get(f::NW_TTL) != 0 {
        o.push(format!("nw_ttl={}", fv.get(f::NW_TTL)));
    }
    let fr = flow.nw_frag();
    match wc.nw_frag() & FRAG_MASK {
        3 => o.push(format!(
            "nw_frag={}",
            if fr & FRAG_ANY != 0 {
                if fr & FRAG_LATER != 0 {
                    "later"
                } else {
                    "first"
                }
            } else if fr & FRAG_LATER != 0 {
                "<error>"
            } else {
                "no"
            }
        )),
        1 => o.push(format!(
            "nw_frag={}",
            if fr & FRAG_ANY != 0 { "yes" } else { "no" }
        )),
        2 => o.push(format!(
            "nw_frag={}",
            if fr & FRAG_LATER != 0 {
                "later"
            } else {
                "not_later"
            }
        )),
        _ => {}
    }
    let p = flow.nw_proto();
    if (dl_type == ethertype::IPV4 && p == ipproto::ICMP)
        || (dl_type == ethertype::IPV6 && p == ipproto::ICMPV6)
    {
        be16_masked(&mut o, "icmp_type", fv.get(f::TP_SRC), wc.get(f::TP_SRC));
        be16_masked(&mut o, "icmp_code", fv.get(f::TP_DST), wc.get(f::TP_DST));
        if dl_type == ethertype::IPV6 {
            let m = wc.get128(f::ND_TARGET_HI, f::ND_TARGET_LO);
            if m != 0 {
                o.push(format!(
                    "nd_target={}",
                    ip6_masked(fv.get128(f::ND_TARGET_HI, f::ND_TARGET_LO), m)
                ));
            }
            mac_masked(&mut o, "nd_sll", flow.get(f::ARP_SHA), wc.get(f::ARP_SHA));
            mac_masked(&mut o, "nd_tll", flow.get(f::ARP_THA), wc.get(f::ARP_THA));
        }
    } else {
        be16_masked(&mut o, "tp_src", fv.get(f::TP_SRC), wc.get(f::TP_SRC));
        be16_masked(&mut o, "tp_dst", fv.get(f::TP_DST), wc.get(f::TP_DST));
    }
    let tfm = wc.get(f::TCP_FLAGS) as u16 & 0x0fff;
    if flow.is_ip_any() && p == ipproto::TCP && tfm != 0 {
        let v = flow.get(f::TCP_FLAGS) as u16;
        let mut s = String::from("tcp_flags=");
        if tfm == 0x0fff {
            if v == 0 {
                s.push('0');
            } else {
                let mut names = Vec::new();
                for i in 0..12 {
                    let bit = 1u16 << i;
                    if v & bit != 0 {
                        names.push(match tcp_flag_name(bit) {
                            Some(n) => n.to_string(),
                            None => format!("[{:x}]", bit),
                        });
                    }
                }
                s.push_str(&names.join("|"));
            }
        } else {
            for i in 0..12 {
                let bit = 1u16 << i;
                if tfm & bit != 0 {
                    let _ = write!(
                        s,
                        "{}{}",
                        if v & bit != 0 { '+' } else { '-' },
                        tcp_flag_name(bit).unwrap_or("[Unknown]")
                    );
                }
            }
        }
        o.push(s);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ofctl::{parse_exact_flow, parse_flows};

    fn tr(flows: &str, pkt: &str) -> (String, String) {
        let t = FlowTable::from_rules(parse_flows(flows).unwrap());
        let k = parse_exact_flow(pkt).unwrap();
        let x = t.xlate_with(&k, true);
        (format_megaflow(&k, &x.wc), format_actions(&x.actions))
    }

    // Cases first found by the OVS oracle (tests/ovs_oracle.rs), pinned here.
    #[test]
    fn final_stage_fields_folded_with_ports_trie() {
        let (m, a) = tr(
            "priority=10,tcp,tp_src=0x3e0/0xfff0,tcp_flags=+syn,actions=output:2",
            "in_port=1,tcp,tcp_src=443",
        );
        assert_eq!(
            m,
            "recirc_id=0,eth,tcp,in_port=1,nw_frag=no,tp_src=0x0/0xfe00,tcp_flags=-syn"
        );
        assert_eq!(a, "drop");
    }

    #[test]
    fn l3_rewrites_unwildcard_nw_proto() {
        let (m, a) = tr(
            "priority=10,ip,in_port=1,actions=output:2,set_field:172.16.0.230->ip_src,output:2",
            "in_port=1,ip,nw_src=1.2.3.4,nw_dst=5.6.7.8",
        );
        assert_eq!(
            m,
            "recirc_id=0,eth,ip,in_port=1,nw_src=1.2.3.4,nw_proto=0,nw_frag=no"
        );
        assert_eq!(a, "2,2"); // nw_proto 0: OVS does not commit L3 sets
        let (m, _) = tr(
            "priority=10,ip,in_port=1,actions=set_field:46->ip_dscp,output:2",
            "in_port=1,ip,nw_src=1.2.3.4",
        );
        assert_eq!(m, "recirc_id=0,eth,ip,in_port=1,nw_tos=0,nw_frag=no");
    }

    #[test]
    fn nonexistent_ports_are_skipped() {
        let mut t = FlowTable::from_rules(
            parse_flows(
                "priority=5,ip,actions=output:7,set_field:1.2.3.4->ip_dst,output:2,output:9",
            )
            .unwrap(),
        );
        t.ports = Some([1, 2, 3, 4].into_iter().collect());
        let k = parse_exact_flow("in_port=1,udp,nw_dst=5.5.5.5").unwrap();
        let x = t.xlate(&k);
        // Verified with ovs.sh (ports p1..p4).
        assert_eq!(format_actions(&x.actions), "set(ipv4(dst=1.2.3.4)),2");
    }

    #[test]
    fn dec_ttl_exception_and_in_port_skip() {
        let (m, a) = tr(
            "priority=5,cookie=0x7,ip,actions=output:1,dec_ttl,output:3",
            "in_port=1,udp,nw_ttl=1",
        );
        assert_eq!(m, "recirc_id=0,eth,udp,in_port=1,nw_ttl=1,nw_frag=no");
        assert_eq!(
            a,
            "userspace(pid=0,controller(reason=2,dont_send=1,continuation=0,recirc_id=1,rule_cookie=0x7,controller_id=0,max_len=65535))"
        );
    }

    #[test]
    fn vlan_push_on_tagged_packet_and_pop() {
        let (m, a) = tr(
            "priority=5,dl_vlan=10,actions=mod_vlan_vid:20,output:2\npriority=4,ip,actions=push_vlan:0x88a8,set_field:4099->vlan_vid,output:2",
            "in_port=1,dl_vlan=10,dl_vlan_pcp=1,ip",
        );
        assert_eq!(
            m,
            "recirc_id=0,eth,ip,in_port=1,dl_vlan=10,dl_vlan_pcp=1,nw_frag=no"
        );
        assert_eq!(a, "pop_vlan,push_vlan(vid=20,pcp=1),2");
        let (_, a) = tr(
            "priority=4,ip,actions=push_vlan:0x88a8,set_field:4099->vlan_vid,output:2",
            "in_port=1,ip",
        );
        assert_eq!(a, "push_vlan(tpid=0x88a8,vid=3,pcp=0),2");
    }
}
