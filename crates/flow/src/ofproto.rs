//! OpenFlow rule lifetime and statistics, as `ovs-vswitchd`'s ofproto layer keeps them
//! (ofproto/ofproto.c, ofproto/ofproto-dpif.c):
//!
//! * each rule has `created` / `modified` times and counters `n_packets`, `n_bytes` and
//!   `used` (time of last use; **the install time for a rule never hit**, as
//!   `rule_construct` sets `stats.used = modified`);
//! * datapath traffic is credited to the rule a megaflow's translation went through
//!   when the megaflow's stats are pushed ([`crate::dp::Datapath::push_stats`], OVS's
//!   revalidator push); the packet that caused the upcall is credited too (OVS credits
//!   it during the upcall's translation), although it is not in the megaflow's own stats;
//! * [`FlowTable::expire`] removes rules whose `hard_timeout` or `idle_timeout` passed,
//!   with `rule_expire`'s tests: hard when `now > modified + hard_timeout·1000`, idle
//!   when `now > used + idle_timeout·1000` (strict: a rule is still there exactly at the
//!   timeout; OVS checks about every 0.5 s after each revalidator dump, `switch run`
//!   every 0.5 s);
//! * [`FlowTable::dump_rules`] prints rules like `ovs-ofctl dump-flows`.
//!
//! Sans-IO: every function takes `now` (milliseconds of the caller's clock).

use crate::field::Field;
use crate::ofctl::{Action, Rule, SetField};
use crate::xlate::{format_rule_match, FlowTable};
use std::net::{Ipv4Addr, Ipv6Addr};

pub use crate::rule_stats::RuleStats;

/// Why a rule expired (OpenFlow `OFPRR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireReason {
    Idle,
    Hard,
}

/// A rule removed by [`FlowTable::expire`], with its final statistics.
#[derive(Debug, Clone)]
pub struct Expired {
    pub id: u32,
    pub rule: Rule,
    pub stats: RuleStats,
    pub reason: ExpireReason,
}

impl FlowTable {
    /// Lifetime and counters of rule `id`.
    pub fn rule_stats(&self, id: u32) -> Option<&RuleStats> {
        self.life.get(&id)
    }

    /// Removes rule `id` (an OpenFlow strict delete or a modify's replacement);
    /// returns it with its statistics. A caller must mark its megaflows for
    /// revalidation.
    pub fn remove_rule(&mut self, id: u32) -> Option<(Rule, RuleStats)> {
        let rule = self.rules.remove(&id)?;
        self.cls_mut(rule.table).remove(&rule.m, rule.priority);
        let stats = self.life.remove(&id).unwrap_or_default();
        self.clear_frozen();
        Some((rule, stats))
    }

    /// Sets the lifetime and counters of rule `id` (an OpenFlow modify keeps them).
    pub fn set_rule_stats(&mut self, id: u32, s: RuleStats) {
        if let Some(l) = self.life.get_mut(&id) {
            *l = s;
        }
    }

    /// Credits `packets`/`bytes` used at `used` to rule `id` (OVS
    /// `rule_dpif_credit_stats`: counters add up, `used` only moves forward). A rule
    /// that no longer exists is ignored. Does not allocate.
    pub fn credit(&mut self, id: u32, packets: u64, bytes: u64, used: u64) {
        if let Some(s) = self.life.get_mut(&id) {
            s.packets += packets;
            s.bytes += bytes;
            s.used = s.used.max(used);
        }
    }

    /// The rule ids whose timeouts have passed at `now` (ms), with the reason; the hard
    /// timeout is checked first, as in OVS's `rule_expire`.
    pub fn expired_at(&self, now: u64) -> Vec<(u32, ExpireReason)> {
        let mut v: Vec<(u32, ExpireReason)> = self
            .rules
            .iter()
            .filter_map(|(&id, r)| {
                let s = self.life.get(&id).copied().unwrap_or_default();
                if r.hard_timeout != 0 && now > s.modified + r.hard_timeout as u64 * 1000 {
                    Some((id, ExpireReason::Hard))
                } else if r.idle_timeout != 0 && now > s.used + r.idle_timeout as u64 * 1000 {
                    Some((id, ExpireReason::Idle))
                } else {
                    None
                }
            })
            .collect();
        v.sort_by_key(|&(id, _)| id);
        v
    }

    /// Removes the rules whose idle or hard timeout has passed at `now` (ms) and returns
    /// them. Push the datapath's stats first ([`crate::dp::Datapath::sweep`] does), so
    /// that `used` is fresh; a caller that removed rules must flush its megaflows.
    pub fn expire(&mut self, now: u64) -> Vec<Expired> {
        let mut out = Vec::new();
        for (id, reason) in self.expired_at(now) {
            if let Some(rule) = self.rules.remove(&id) {
                self.cls_mut(rule.table).remove(&rule.m, rule.priority);
                let stats = self.life.remove(&id).unwrap_or_default();
                out.push(Expired {
                    id,
                    rule,
                    stats,
                    reason,
                });
            }
        }
        out
    }

    /// The rules as `ovs-ofctl dump-flows` prints them (one line each, with its leading
    /// space), by decreasing priority then install order; see [`format_rule_stats`].
    pub fn dump_rules(&self, now: u64) -> Vec<String> {
        self.dump_rules_matching(now, None, &crate::ofctl::Match::default())
    }

    /// [`Self::dump_rules`] of the rules in `table` (None: all) whose match is covered
    /// by `m` (`ovs-ofctl dump-flows br table=N,MATCH`, non-strict).
    pub fn dump_rules_matching(
        &self,
        now: u64,
        table: Option<u8>,
        m: &crate::ofctl::Match,
    ) -> Vec<String> {
        let mut ids: Vec<u32> = self
            .rules
            .iter()
            .filter(|(_, r)| table.is_none_or(|t| t == r.table))
            .filter(|(_, r)| r.m.mask.and(&m.mask) == m.mask && r.m.key.and(&m.mask) == m.key)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_by_key(|id| {
            let r = &self.rules[id];
            (r.table, std::cmp::Reverse(r.priority), *id)
        });
        ids.iter()
            .map(|id| {
                let s = self.life.get(id).copied().unwrap_or_default();
                format_rule_stats(&self.rules[id], &s, now)
            })
            .collect()
    }
}

/// OVS's `ofp_print_duration`: whole seconds, 3 decimals when there is a fraction.
fn duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}

/// OVS's `age_secs` (whole seconds, saturating at 65535).
fn age_secs(ms: u64) -> u64 {
    (ms / 1000).min(u16::MAX as u64)
}

/// One rule as `ovs-ofctl dump-flows` prints it (OVS `ofputil_flow_stats_format` with
/// the NXM flow stats that carry `idle_age`):
/// ` cookie=0x0, duration=1.5s, table=0, n_packets=2, n_bytes=212, idle_timeout=10,
/// hard_timeout=20, idle_age=1, priority=200,udp,in_port=1 actions=output:2`.
/// `hard_age` is printed only when it differs from the duration's seconds (never
/// here: no modify-flows). Actions in the OpenFlow 1.3 form the rule is held in.
pub fn format_rule_stats(r: &Rule, s: &RuleStats, now: u64) -> String {
    let mut o = format!(
        " cookie={:#x}, duration={}, table={}, n_packets={}, n_bytes={}, ",
        r.cookie,
        duration(now.saturating_sub(s.created)),
        r.table,
        s.packets,
        s.bytes
    );
    if r.idle_timeout != 0 {
        o += &format!("idle_timeout={}, ", r.idle_timeout);
    }
    if r.hard_timeout != 0 {
        o += &format!("hard_timeout={}, ", r.hard_timeout);
    }
    o += &format!("idle_age={}, ", age_secs(now.saturating_sub(s.used)));
    let hard_age = age_secs(now.saturating_sub(s.modified));
    if hard_age != now.saturating_sub(s.created) / 1000 {
        o += &format!("hard_age={hard_age}, ");
    }
    let m = format_rule_match(&r.m, r.priority);
    if !m.is_empty() {
        o += &m;
        o.push(' ');
    }
    o += "actions=";
    o += &format_ofpacts(&r.actions);
    o
}

fn mac(v: u128) -> String {
    let b = (v as u64).to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// OpenFlow actions as OVS's `ofpacts_format` prints them after an OpenFlow 1.3 round
/// trip (the form rules are held in): `output:N`, `IN_PORT`, `pop_vlan`,
/// `push_vlan:0x8100`, `set_field:V->FIELD`, `dec_ttl`, `CONTROLLER:N`; `drop` if none.
pub fn format_ofpacts(actions: &[Action]) -> String {
    if actions.is_empty() {
        return "drop".into();
    }
    let items: Vec<String> = actions
        .iter()
        .map(|a| match *a {
            Action::Output(p) => format!("output:{p}"),
            Action::InPort => "IN_PORT".into(),
            Action::StripVlan => "pop_vlan".into(),
            Action::PushVlan(t) => format!("push_vlan:{t:#x}"),
            Action::DecTtl => "dec_ttl".into(),
            Action::ModNwTtl(t) => format!("mod_nw_ttl:{t}"),
            Action::Controller(ml) => format!("CONTROLLER:{ml}"),
            Action::GotoTable(t) => format!("goto_table:{t}"),
            Action::Group(g) => format!("group:{g}"),
            Action::Normal => "NORMAL".into(),
            Action::UnrollXlate { table, cookie } => {
                format!("unroll_xlate(table={table}, cookie={cookie})")
            }
            Action::WriteMetadata { value, mask } => {
                if mask == u64::MAX {
                    format!("write_metadata:{value:#x}")
                } else {
                    format!("write_metadata:{value:#x}/{mask:#x}")
                }
            }
            Action::Load { dst, value, mask } => {
                // OVS holds a whole-field write as set_field and a contiguous part as
                // an NXM load (OpenFlow 1.3 dump).
                let ones = dst.fd().ones();
                let (ofs, n) = (mask.trailing_zeros(), mask.count_ones());
                let contiguous = mask != 0 && (mask >> ofs).wrapping_add(1) & (mask >> ofs) == 0;
                // C's %#x: "0" for zero (OVS prints `set_field:0->reg1`)
                let hx = |v: u64| {
                    if v == 0 {
                        "0".to_string()
                    } else {
                        format!("{v:#x}")
                    }
                };
                if mask == ones {
                    format!("set_field:{}->{}", hx(value), dst.name())
                } else if contiguous {
                    format!(
                        "load:{}->{}[{}..{}]",
                        hx(value >> ofs),
                        dst.nxm_name(),
                        ofs,
                        ofs + n - 1
                    )
                } else {
                    format!("set_field:{}/{mask:#x}->{}", hx(value), dst.name())
                }
            }
            Action::Move {
                src,
                src_ofs,
                dst,
                dst_ofs,
                n_bits,
            } => {
                format!(
                    "move:{}->{}",
                    subfield_text(src, src_ofs, n_bits),
                    subfield_text(dst, dst_ofs, n_bits)
                )
            }
            Action::LoadField {
                dst,
                value,
                mask,
                as_load,
            } => load_field_text(dst, value, mask, as_load),
            Action::Resubmit { port, table } => match (port, table) {
                (Some(p), None) => format!("resubmit:{p}"),
                (p, t) => format!(
                    "resubmit({},{})",
                    p.map(|p| p.to_string()).unwrap_or_default(),
                    t.map(|t| t.to_string()).unwrap_or_default()
                ),
            },
            Action::SetField(sf, v) => {
                let (val, name) = match sf {
                    SetField::EthSrc => (mac(v), "eth_src"),
                    SetField::EthDst => (mac(v), "eth_dst"),
                    SetField::Ipv4Src => (Ipv4Addr::from(v as u32).to_string(), "ip_src"),
                    SetField::Ipv4Dst => (Ipv4Addr::from(v as u32).to_string(), "ip_dst"),
                    SetField::Ipv6Src => (Ipv6Addr::from(v).to_string(), "ipv6_src"),
                    SetField::Ipv6Dst => (Ipv6Addr::from(v).to_string(), "ipv6_dst"),
                    SetField::IpDscp => ((v >> 2).to_string(), "ip_dscp"),
                    SetField::NwTos => (v.to_string(), "nw_tos"),
                    SetField::TcpSrc => (v.to_string(), "tcp_src"),
                    SetField::TcpDst => (v.to_string(), "tcp_dst"),
                    SetField::UdpSrc => (v.to_string(), "udp_src"),
                    SetField::UdpDst => (v.to_string(), "udp_dst"),
                    // OpenFlow 1.3 vlan_vid carries OFPVID_PRESENT (0x1000).
                    SetField::VlanVid => ((v | 0x1000).to_string(), "vlan_vid"),
                    SetField::VlanPcp => (v.to_string(), "vlan_pcp"),
                };
                format!("set_field:{val}->{name}")
            }
        })
        .collect();
    items.join(",")
}

/// OVS `mf_format_subfield`: `NAME[]` (whole), `NAME[i]` (one bit), `NAME[a..b]`.
fn subfield_text(fl: Field, ofs: u8, n_bits: u8) -> String {
    let name = fl.nxm_name();
    if ofs == 0 && n_bits == fl.bits() {
        format!("{name}[]")
    } else if n_bits == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{}..{}]", ofs, ofs as u32 + n_bits as u32 - 1)
    }
}

/// A packet-field write as OVS prints it after its OpenFlow 1.3 round trip
/// (`encode_SET_FIELD` / `format_SET_FIELD`): a whole-field `set_field` stays one; a
/// `load`, or a partial write of a field with an NXM header, becomes `reg_load`s, one
/// `load:` per contiguous run of the mask; a partial write of an OXM-only field is a
/// `reg_load2`, printed `set_field:V/M->F`.
fn load_field_text(dst: Field, value: u128, mask: u128, as_load: bool) -> String {
    let ones = dst.ones();
    if (!as_load && mask == ones) || !dst.has_nxm() {
        let v = field_value_text(dst, value);
        return if mask == ones {
            format!("set_field:{v}->{}", dst.name())
        } else {
            format!(
                "set_field:{v}/{}->{}",
                field_mask_text(dst, mask),
                dst.name()
            )
        };
    }
    let mut out = Vec::new();
    let bits = dst.bits() as u32;
    let mut i = 0u32;
    while i < bits {
        if mask >> i & 1 == 0 {
            i += 1;
            continue;
        }
        let start = i;
        // OVS next_load_segment: runs of at most 64 bits.
        while i < bits && mask >> i & 1 == 1 && i - start < 64 {
            i += 1;
        }
        let n = i - start;
        let seg = (value >> start)
            & if n >= 128 {
                u128::MAX
            } else {
                (1u128 << n) - 1
            };
        let hx = if seg == 0 {
            "0".to_string()
        } else {
            format!("{seg:#x}")
        };
        out.push(format!(
            "load:{hx}->{}",
            subfield_text(dst, start as u8, n as u8)
        ));
    }
    out.join(",")
}

/// OVS `mf_format` of a value of `fl` (the field's string format).
fn field_value_text(fl: Field, v: u128) -> String {
    match fl {
        Field::EthSrc
        | Field::EthDst
        | Field::ArpSha
        | Field::ArpTha
        | Field::NdSll
        | Field::NdTll => mac(v),
        Field::IpSrc | Field::IpDst | Field::ArpSpa | Field::ArpTpa => {
            Ipv4Addr::from(v as u32).to_string()
        }
        Field::Ipv6Src | Field::Ipv6Dst | Field::NdTarget => Ipv6Addr::from(v).to_string(),
        Field::Ipv6Label | Field::VlanTci | Field::EthType | Field::Meta(_) => {
            if v == 0 {
                "0".into()
            } else {
                format!("{v:#x}")
            }
        }
        _ => v.to_string(),
    }
}

fn field_mask_text(fl: Field, m: u128) -> String {
    match fl {
        Field::EthSrc
        | Field::EthDst
        | Field::ArpSha
        | Field::ArpTha
        | Field::NdSll
        | Field::NdTll
        | Field::IpSrc
        | Field::IpDst
        | Field::ArpSpa
        | Field::ArpTpa
        | Field::Ipv6Src
        | Field::Ipv6Dst
        | Field::NdTarget => field_value_text(fl, m),
        _ => format!("{m:#x}"),
    }
}

/// Groups: the dump texts and the load-time reference check.
impl FlowTable {
    /// `ovs-ofctl dump-groups` lines (OpenFlow 1.3 form).
    pub fn dump_groups(&self) -> Vec<String> {
        self.groups
            .values()
            .map(|e| {
                let g = &e.group;
                let kind = match g.kind {
                    crate::ofctl::GroupType::FastFailover => "ff",
                    k => k.name(),
                };
                let mut s = format!("group_id={},type={kind}", g.group_id);
                for b in &g.buckets {
                    // OVS's OpenFlow 1.3 dump: no bucket ids, weight when not 1.
                    let mut items = Vec::new();
                    if g.kind == crate::ofctl::GroupType::Select && b.weight != 1 {
                        items.push(format!("weight:{}", b.weight));
                    }
                    if let Some(p) = b.watch_port {
                        items.push(format!("watch_port:{p}"));
                    }
                    if let Some(w) = b.watch_group {
                        items.push(format!("watch_group:{w}"));
                    }
                    items.push(format!("actions={}", format_ofpacts(&b.actions)));
                    s += &format!(",bucket={}", items.join(","));
                }
                s
            })
            .collect()
    }

    /// `ovs-ofctl dump-group-stats` lines.
    pub fn dump_group_stats(&self) -> Vec<String> {
        self.groups
            .values()
            .map(|e| {
                let mut s = format!(
                    "group_id={},ref_count={},packet_count={},byte_count={}",
                    e.group.group_id,
                    self.rules
                        .values()
                        .filter(|r| r.actions.contains(&Action::Group(e.group.group_id)))
                        .count(),
                    e.stats.packets,
                    e.stats.bytes
                );
                for (i, (p, b)) in e.stats.buckets.iter().enumerate() {
                    s += &format!(",bucket{i}:packet_count={p},byte_count={b}");
                }
                s
            })
            .collect()
    }

    /// Checks that every `group:N` of the rules and every `watch_group` exists
    /// (ovs-ofctl refuses a flow pointing to a missing group: OFPBAC_BAD_OUT_GROUP).
    pub fn check_groups(&self) -> Result<(), String> {
        for r in self.rules.values() {
            for a in &r.actions {
                if let Action::Group(g) = a {
                    if !self.groups.contains_key(g) {
                        return Err(format!(
                            "rule `{}` outputs to group {g}, which does not exist",
                            format_ofpacts(&r.actions)
                        ));
                    }
                }
            }
        }
        for e in self.groups.values() {
            for b in &e.group.buckets {
                for a in &b.actions {
                    if let Action::Group(g) = a {
                        if !self.groups.contains_key(g) {
                            return Err(format!(
                                "group {}: a bucket chains to group {g}, which does not exist",
                                e.group.group_id
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::{Datapath, Hit};
    use crate::ofctl::{parse_exact_flow, parse_flows};
    use crate::FlowKey;

    const NO_MF_IDLE: u64 = 1_000_000;

    fn table(text: &str, now: u64) -> FlowTable {
        let mut t = FlowTable::new();
        for r in parse_flows(text).unwrap() {
            t.add_at(r, now);
        }
        t
    }
    fn id_of(t: &FlowTable, priority: u16) -> Option<u32> {
        t.rules
            .iter()
            .find(|(_, r)| r.priority == priority)
            .map(|(&id, _)| id)
    }
    fn pkt(s: &str) -> FlowKey {
        parse_exact_flow(s).unwrap()
    }

    #[test]
    fn hard_timeout_expires_even_when_busy() {
        let mut t = table(
            "priority=10,udp,hard_timeout=2,actions=output:2\npriority=1,actions=output:3\n",
            0,
        );
        let mut dp = Datapath::new();
        let k = pkt("in_port=1,udp,udp_dst=7");
        let mut now = 0;
        while now <= 2000 {
            let (a, _) = dp.process(&t, &k, 100, now);
            assert_eq!(crate::format_actions(a), "2", "at {now}");
            if now % 500 == 0 {
                let sw = dp.sweep(&mut t, now, NO_MF_IDLE);
                assert!(sw.rules_expired.is_empty(), "expired at {now}");
            }
            now += 100;
        }
        // OVS: `now > modified + hard_timeout * 1000`: still there at exactly 2 s.
        assert!(id_of(&t, 10).is_some());
        let sw = dp.sweep(&mut t, 2001, NO_MF_IDLE);
        assert_eq!(sw.rules_expired.len(), 1);
        let e = &sw.rules_expired[0];
        assert_eq!(e.reason, ExpireReason::Hard);
        // 21 packets (0, 100, ..., 2000 ms), every one credited, incl. the upcall's.
        assert_eq!(
            (e.stats.packets, e.stats.bytes, e.stats.used),
            (21, 2100, 2000)
        );
        assert!(id_of(&t, 10).is_none());
        // The revalidator (no flush): the megaflow now translates to the priority=1
        // rule with a mask inside the installed one, so it is modified in place.
        assert_eq!((sw.modified, sw.deleted_changed), (1, 0));
        assert_eq!(dp.n_flows(), 1);
        let (a, h) = dp.process(&t, &k, 100, 2100);
        assert_eq!((crate::format_actions(a).as_str(), h), ("3", Hit::Emc));
    }

    #[test]
    fn idle_timeout_stays_while_hit_and_goes_after_last_hit() {
        let mut t = table(
            "priority=10,udp,idle_timeout=1,actions=output:2\npriority=1,actions=drop\n",
            0,
        );
        let mut dp = Datapath::new();
        let k = pkt("in_port=1,udp,udp_dst=7");
        // Hit every 0.5 s from 0.5 s to 5 s, sweeping every 0.25 s.
        let mut now = 250;
        while now <= 5000 {
            if now % 500 == 0 {
                dp.process(&t, &k, 60, now);
            }
            assert!(dp.sweep(&mut t, now, NO_MF_IDLE).rules_expired.is_empty());
            now += 250;
        }
        let id = id_of(&t, 10).unwrap();
        assert_eq!(t.rule_stats(id).unwrap().used, 5000);
        assert_eq!(t.rule_stats(id).unwrap().packets, 10);
        // Last hit at 5 s: still there at exactly 6 s, gone just after.
        assert!(dp.sweep(&mut t, 6000, NO_MF_IDLE).rules_expired.is_empty());
        let sw = dp.sweep(&mut t, 6001, NO_MF_IDLE);
        assert_eq!(sw.rules_expired.len(), 1);
        assert_eq!(sw.rules_expired[0].reason, ExpireReason::Idle);
        assert_eq!(sw.rules_expired[0].stats.packets, 10);
        assert!(id_of(&t, 10).is_none());
    }

    #[test]
    fn idle_rule_never_hit_counts_from_install() {
        // OVS rule_construct: stats.used = modified (the install time).
        let mut t = table("priority=10,udp,idle_timeout=3,actions=output:2\n", 1000);
        let mut dp = Datapath::new();
        assert!(dp.sweep(&mut t, 4000, NO_MF_IDLE).rules_expired.is_empty());
        let e = dp.sweep(&mut t, 4001, NO_MF_IDLE).rules_expired;
        assert_eq!((e.len(), e[0].reason), (1, ExpireReason::Idle));
        // Hard wins when both pass in the same sweep (checked first, as in OVS).
        let mut t = table(
            "priority=10,idle_timeout=1,hard_timeout=1,actions=drop\n",
            0,
        );
        let e = dp.sweep(&mut t, 5000, NO_MF_IDLE).rules_expired;
        assert_eq!(e[0].reason, ExpireReason::Hard);
        // No timeouts: stays forever.
        let mut t = table("priority=10,actions=drop\n", 0);
        assert!(dp
            .sweep(&mut t, u32::MAX as u64, NO_MF_IDLE)
            .rules_expired
            .is_empty());
    }

    #[test]
    fn stats_sum_over_emc_megaflow_hits_and_upcalls() {
        let mut t = table(
            "priority=20,tcp,tp_dst=22,actions=drop\n\
             priority=10,tcp,nw_dst=10.0.0.0/24,actions=output:2\n\
             priority=0,actions=output:3\n",
            0,
        );
        let r10 = id_of(&t, 10).unwrap();
        let r20 = id_of(&t, 20).unwrap();
        let r0 = id_of(&t, 0).unwrap();
        let mut dp = Datapath::new();
        let a = pkt("in_port=1,tcp,nw_dst=10.0.0.9,tcp_dst=80");
        let mut b = a;
        b.set(crate::key::f::TP_DST, 81); // same megaflow as `a`, other exact key
        let c = pkt("in_port=2,tcp,nw_dst=10.0.0.9,tcp_dst=80"); // other megaflow, same rule
        let mut hits = [0usize; 3];
        let (mut n, mut bytes) = (0u64, 0u64);
        for (i, (k, len)) in [
            (a, 100),
            (a, 100),
            (b, 60),
            (b, 60),
            (c, 70),
            (a, 100),
            (c, 70),
        ]
        .into_iter()
        .enumerate()
        {
            let (_, h) = dp.process(&t, &k, len, 10 + i as u64);
            hits[h as usize] += 1;
            n += 1;
            bytes += len as u64;
            if i == 3 {
                dp.push_stats(&mut t); // a push in the middle changes nothing in the sum
            }
        }
        // 2 upcalls (one per megaflow), EMC hits and megaflow hits all counted.
        assert_eq!(hits, [4, 1, 2], "[emc, megaflow, upcall]");
        assert_eq!(dp.n_flows(), 2);
        let mf_pkts: u64 = dp.flows().map(|f| f.stats.packets).sum();
        assert_eq!(
            mf_pkts,
            n - 2,
            "megaflow stats leave out the upcall packets (OVS)"
        );
        // Not pushed yet: the rule shows only what the mid-way push credited.
        assert_eq!(t.rule_stats(r10).unwrap().packets, 4);
        dp.push_stats(&mut t);
        let s = *t.rule_stats(r10).unwrap();
        assert_eq!((s.packets, s.bytes, s.used), (n, bytes, 16));
        // The higher-priority rule that was looked at and did not match gets nothing.
        assert_eq!(t.rule_stats(r20).unwrap().packets, 0);
        assert_eq!(t.rule_stats(r0).unwrap().packets, 0);
        // Pushing again adds nothing.
        dp.push_stats(&mut t);
        assert_eq!(t.rule_stats(r10).unwrap().packets, n);
        // Megaflow idle expiry pushes first: nothing is lost.
        dp.process(&t, &c, 70, 20);
        let sw = dp.sweep(&mut t, 1000, 500);
        assert_eq!(sw.megaflows_expired, 2);
        assert_eq!(t.rule_stats(r10).unwrap().packets, n + 1);
        // Table miss (no rule): a megaflow crediting nothing.
        let mut t2 = table("priority=5,udp,actions=output:2\n", 0);
        let mut dp2 = Datapath::new();
        let (act, _) = dp2.process(&t2, &a, 60, 1);
        assert!(act.is_empty());
        assert_eq!(dp2.flows().next().unwrap().rule, None);
        dp2.push_stats(&mut t2);
    }

    #[test]
    fn replacing_a_rule_resets_its_counters() {
        let mut t = table("priority=10,udp,actions=output:2\n", 0);
        let id = id_of(&t, 10).unwrap();
        t.credit(id, 5, 500, 100);
        let new = t.add_at(
            parse_flows("priority=10,udp,actions=output:3\n").unwrap()[0].clone(),
            200,
        );
        assert_eq!(t.len(), 1);
        assert!(t.rule_stats(id).is_none());
        assert_eq!(t.rule_stats(new), Some(&RuleStats::new(200)));
        // A megaflow of a deleted rule credits nothing (and does not panic).
        t.credit(id, 1, 1, 300);
        assert_eq!(t.rule_stats(new).unwrap().packets, 0);
    }

    #[test]
    fn dump_lines_in_ovs_ofctl_format() {
        let mut t = table(
            "priority=200,in_port=1,udp,tp_dst=4000,idle_timeout=10,hard_timeout=20,cookie=0x2a,\
             actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,mod_tp_dst:4001,output:2\n\
             priority=150,udp,actions=mod_vlan_vid:5,controller\n\
             priority=100,in_port=2,dl_vlan=7,actions=strip_vlan,output:1,in_port\n\
             priority=0,actions=drop\n",
            0,
        );
        let mut dp = Datapath::new();
        let k = pkt("in_port=1,udp,nw_ttl=64,udp_dst=4000");
        dp.process(&t, &k, 106, 10);
        dp.process(&t, &k, 106, 20);
        dp.push_stats(&mut t);
        let d = t.dump_rules(2030);
        assert_eq!(
            d,
            vec![
                " cookie=0x2a, duration=2.030s, table=0, n_packets=2, n_bytes=212, idle_timeout=10, hard_timeout=20, idle_age=2, priority=200,udp,in_port=1,tp_dst=4000 actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,set_field:4001->udp_dst,output:2",
                " cookie=0x0, duration=2.030s, table=0, n_packets=0, n_bytes=0, idle_age=2, priority=150,udp actions=push_vlan:0x8100,set_field:4101->vlan_vid,CONTROLLER:65535",
                " cookie=0x0, duration=2.030s, table=0, n_packets=0, n_bytes=0, idle_age=2, priority=100,in_port=2,dl_vlan=7 actions=pop_vlan,output:1,IN_PORT",
                " cookie=0x0, duration=2.030s, table=0, n_packets=0, n_bytes=0, idle_age=2, priority=0 actions=drop",
            ]
        );
        assert_eq!(duration(3000), "3s");
        // Catch-all at the default priority: empty match, no space before `actions`.
        let r = parse_flows("actions=drop").unwrap().remove(0);
        assert_eq!(
            format_rule_stats(&r, &RuleStats::new(0), 3000),
            " cookie=0x0, duration=3s, table=0, n_packets=0, n_bytes=0, idle_age=3, actions=drop"
        );
    }
}
