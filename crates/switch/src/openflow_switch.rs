//! What OpenFlow 1.3 messages do to the switch, sans-IO: FLOW_MOD (add / modify /
//! modify_strict / delete / delete_strict with cookie + mask, out_port, out_group,
//! SEND_FLOW_REM, CHECK_OVERLAP, RESET_COUNTS), PACKET_OUT, FEATURES, GET/SET_CONFIG,
//! BARRIER, ROLE_REQUEST, multipart DESC / FLOW / AGGREGATE / TABLE / PORT_STATS /
//! PORT_DESC / TABLE_FEATURES, and the asynchronous PACKET_IN and FLOW_REMOVED. Rule
//! changes go to the same [`flow::FlowTable`] and [`flow::dp::Datapath`] as the
//! switch's control commands (stats pushed first, megaflows marked for the
//! revalidator after). Everything refused gets an OFPT_ERROR.

use std::collections::{BTreeMap, HashMap};

use flow::dp::Datapath;
use flow::key::FlowKey;
use flow::ofctl::{Action, Match, Rule};
use flow::ofproto::{ExpireReason, RuleStats};
use flow::FlowTable;
use openflow::consts::{self as c, cap, err, fc, ff, mp, pir, port, rr, OFP13_VERSION};
use openflow::msg::{self, FeaturesReply, Message, Multipart, Port, SwitchConfig};
use openflow::multipart::{
    self as mpb, Aggregate, Desc, FlowStats, FlowStatsRequest, PortStats, TableFeatures, TableStats,
};
use openflow::oxm::Oxm;

use crate::openflow::{Conn, Role, Roles};
use crate::openflow_conv::{self as conv, OfError};

/// Number of OpenFlow tables (0–254).
pub const N_TABLES: u8 = 255;

/// Largest multipart reply body before it is split (`OFPMPF_REPLY_MORE`).
const MP_CHUNK: usize = 60_000;

/// A port as OpenFlow shows it.
#[derive(Debug, Clone, Default)]
pub struct PortInfo {
    pub name: String,
    pub hw_addr: [u8; 6],
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
    /// When the port was added (ms).
    pub since: u64,
}

/// What handling a message asks of the switch loop besides the replies queued on
/// the connection.
#[derive(Debug, Default)]
pub struct Effects {
    /// Frames a PACKET_OUT sends: (port, frame).
    pub outputs: Vec<(u32, Vec<u8>)>,
    /// Asynchronous messages for every connection that is not a slave (FLOW_REMOVED
    /// of a delete).
    pub async_msgs: Vec<Vec<u8>>,
    /// PACKET_INs raised by a PACKET_OUT's controller action.
    pub packet_ins: Vec<flow::exec::ToController>,
    /// This connection became master: the others that were master become slaves.
    pub became_master: bool,
}

/// The switch-wide OpenFlow state.
#[derive(Debug)]
pub struct OfSwitch {
    pub datapath_id: u64,
    pub roles: Roles,
    /// Flow mod flags of each rule, by (table, match, priority).
    flags: HashMap<(u8, Match, u16), u16>,
    /// The ports (OpenFlow number -> description and counters).
    pub ports: BTreeMap<u32, PortInfo>,
}

fn of_err(conn: &mut Conn, req: &[u8], e: &OfError) {
    tracing::info!("openflow: refused: {e}");
    conn.send_error(req, e.err_type, e.code);
}

/// Whether rule `r` outputs to `p` (OpenFlow port, `OFPP_ANY` = yes).
fn outputs_to(r: &Rule, p: u32) -> bool {
    if p == port::ANY {
        return true;
    }
    r.actions.iter().any(|a| match *a {
        Action::Output(o) => conv::port_to_of13(o) == p,
        Action::InPort => p == port::IN_PORT,
        Action::Normal => p == port::NORMAL,
        Action::Controller(_) => p == port::CONTROLLER,
        _ => false,
    })
}

fn uses_group(r: &Rule, g: u32) -> bool {
    g == c::GROUP_ANY
        || r.actions
            .iter()
            .any(|a| matches!(a, Action::Group(x) if *x == g))
}

/// Whether there is a packet both matches can match (OpenFlow CHECK_OVERLAP).
fn overlaps(a: &Match, b: &Match) -> bool {
    (0..a.key.w.len()).all(|i| (a.key.w[i] ^ b.key.w[i]) & a.mask.w[i] & b.mask.w[i] == 0)
}

/// `m` covers rule match `r` (non-strict): every bit `m` fixes, `r` fixes the same way.
fn covers(m: &Match, r: &Match) -> bool {
    r.mask.and(&m.mask) == m.mask && r.key.and(&m.mask) == m.key
}

fn secs(ms: u64) -> (u32, u32) {
    ((ms / 1000) as u32, ((ms % 1000) * 1_000_000) as u32)
}

impl OfSwitch {
    pub fn new(datapath_id: u64) -> OfSwitch {
        OfSwitch {
            datapath_id,
            roles: Roles::default(),
            flags: HashMap::new(),
            ports: BTreeMap::new(),
        }
    }

    fn flags_of(&self, r: &Rule) -> u16 {
        self.flags
            .get(&(r.table, r.m, r.priority))
            .copied()
            .unwrap_or(0)
    }

    /// The FLOW_REMOVED for a rule that went (None when it did not ask for one);
    /// forgets its flags.
    pub fn flow_removed(
        &mut self,
        r: &Rule,
        s: &RuleStats,
        reason: u8,
        now: u64,
    ) -> Option<Vec<u8>> {
        let fl = self.flags.remove(&(r.table, r.m, r.priority)).unwrap_or(0);
        if fl & ff::SEND_FLOW_REM == 0 {
            return None;
        }
        let (ds, dn) = secs(now.saturating_sub(s.created));
        let m = Message::FlowRemoved(msg::FlowRemoved {
            cookie: r.cookie,
            priority: r.priority,
            reason,
            table_id: r.table,
            duration_sec: ds,
            duration_nsec: dn,
            idle_timeout: r.idle_timeout,
            hard_timeout: r.hard_timeout,
            packet_count: s.packets,
            byte_count: s.bytes,
            matches: conv::match_to_oxm(&r.m),
        });
        Some(m.to_vec(OFP13_VERSION, 0))
    }

    /// FLOW_REMOVED for a rule removed by its idle / hard timeout.
    pub fn expired(&mut self, e: &flow::ofproto::Expired, now: u64) -> Option<Vec<u8>> {
        let reason = match e.reason {
            ExpireReason::Idle => rr::IDLE_TIMEOUT,
            ExpireReason::Hard => rr::HARD_TIMEOUT,
        };
        self.flow_removed(&e.rule, &e.stats, reason, now)
    }

    /// A PACKET_IN for a controller action on a packet received on `in_port`;
    /// `miss_send_len` is the connection's (table-miss) and the action's max_len
    /// otherwise.
    pub fn packet_in(tc: &flow::exec::ToController, in_port: u32, miss_send_len: u16) -> Vec<u8> {
        let (reason, max) = match tc.reason {
            3 => (pir::NO_MATCH, miss_send_len.min(tc.max_len)),
            2 => (pir::INVALID_TTL, tc.max_len),
            _ => (pir::ACTION, tc.max_len),
        };
        // Buffers are not kept (OFP_NO_BUFFER): the controller gets the whole packet
        // unless max_len asks for less (OVS with n_buffers 0 sends at most max_len
        // too).
        let n = if max == c::CML_NO_BUFFER {
            tc.frame.len()
        } else {
            tc.frame.len().min(max as usize)
        };
        let p = conv::port_to_of13(in_port);
        Message::PacketIn(msg::PacketIn {
            buffer_id: c::NO_BUFFER,
            total_len: tc.frame.len().min(0xffff) as u16,
            reason,
            table_id: tc.table_id,
            cookie: tc.cookie,
            matches: vec![Oxm::basic(openflow::oxm::basic::IN_PORT, &p.to_be_bytes())],
            data: &tc.frame[..n],
        })
        .to_vec(OFP13_VERSION, 0)
    }

    /// A PORT_STATUS message for port `p` (reason `OFPPR_*`).
    pub fn port_status(&self, table: &FlowTable, p: u32, reason: u8) -> Vec<u8> {
        Message::PortStatus {
            reason,
            port: self.port_desc(table, p),
        }
        .to_vec(OFP13_VERSION, 0)
    }

    fn port_desc(&self, table: &FlowTable, p: u32) -> Port {
        let info = self.ports.get(&p).cloned().unwrap_or_default();
        let down = table.ports_down.contains(&p);
        Port {
            port_no: p,
            hw_addr: info.hw_addr,
            name: info.name,
            config: if down { c::pc::PORT_DOWN } else { 0 },
            state: if down { c::pc::LINK_DOWN } else { c::pc::LIVE },
            ..Port::default()
        }
    }

    /// Handles one message from `conn` at `now` (ms). Replies and errors are queued
    /// on `conn`; what the loop must do besides is returned.
    pub fn handle(
        &mut self,
        conn: &mut Conn,
        req: &[u8],
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
    ) -> Effects {
        let mut fx = Effects::default();
        let (h, m) = match msg::parse(req) {
            Ok(x) => x,
            Err(e) => {
                of_err(conn, req, &OfError::from(e));
                return fx;
            }
        };
        let slave = conn.role == Role::Slave;
        let refuse_slave = |conn: &mut Conn| {
            conn.send_error(req, err::BAD_REQUEST, err::BRC_IS_SLAVE);
        };
        match m {
            Message::FeaturesRequest => conn.send_msg(
                &Message::FeaturesReply(FeaturesReply {
                    datapath_id: self.datapath_id,
                    n_buffers: 0,
                    n_tables: N_TABLES - 1,
                    auxiliary_id: 0,
                    capabilities: cap::FLOW_STATS | cap::TABLE_STATS | cap::PORT_STATS,
                }),
                h.xid,
            ),
            Message::GetConfigRequest => conn.send_msg(
                &Message::GetConfigReply(SwitchConfig {
                    flags: conn.config_flags,
                    miss_send_len: conn.miss_send_len,
                }),
                h.xid,
            ),
            Message::SetConfig(sc) => {
                if slave {
                    refuse_slave(conn);
                } else {
                    conn.config_flags = sc.flags;
                    conn.miss_send_len = sc.miss_send_len;
                }
            }
            Message::BarrierRequest => conn.send_msg(&Message::BarrierReply, h.xid),
            Message::RoleRequest(r) => {
                let new = match r.role {
                    c::role::NOCHANGE => None,
                    c::role::EQUAL => Some(Role::Equal),
                    c::role::MASTER => Some(Role::Master),
                    c::role::SLAVE => Some(Role::Slave),
                    _ => {
                        conn.send_error(req, err::ROLE_REQUEST_FAILED, err::RRFC_BAD_ROLE);
                        return fx;
                    }
                };
                if matches!(new, Some(Role::Master) | Some(Role::Slave))
                    && !self.roles.check(r.generation_id)
                {
                    conn.send_error(req, err::ROLE_REQUEST_FAILED, err::RRFC_STALE);
                    return fx;
                }
                if let Some(n) = new {
                    fx.became_master = n == Role::Master && conn.role != Role::Master;
                    conn.role = n;
                }
                conn.send_msg(
                    &Message::RoleReply(msg::Role {
                        role: conn.role.wire(),
                        generation_id: self.roles.generation_id.unwrap_or(0),
                    }),
                    h.xid,
                );
            }
            Message::FlowMod(fm) => {
                if slave {
                    refuse_slave(conn);
                    return fx;
                }
                if let Err(e) = self.flow_mod(&fm, table, dp, now, &mut fx) {
                    of_err(conn, req, &e);
                }
            }
            Message::PacketOut(po) => {
                if slave {
                    refuse_slave(conn);
                    return fx;
                }
                if let Err(e) = self.packet_out(&po, table, dp, now, &mut fx) {
                    of_err(conn, req, &e);
                }
            }
            Message::MultipartRequest(mpr) => {
                if let Err(e) = self.multipart(conn, h.xid, &mpr, table, dp, now) {
                    of_err(conn, req, &e);
                }
            }
            Message::Experimenter { .. } => {
                conn.send_error(req, err::BAD_REQUEST, err::BRC_BAD_EXPERIMENTER)
            }
            Message::GetAsyncRequest => conn.send_error(req, err::BAD_REQUEST, err::BRC_BAD_TYPE),
            // Replies and switch-to-controller messages are not requests.
            _ => conn.send_error(req, err::BAD_REQUEST, err::BRC_BAD_TYPE),
        }
        fx
    }

    fn flow_mod(
        &mut self,
        fm: &msg::FlowMod<'_>,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
        fx: &mut Effects,
    ) -> Result<(), OfError> {
        let m = conv::oxm_to_match(&fm.matches)?;
        if fm.buffer_id != c::NO_BUFFER
            && matches!(fm.command, fc::ADD | fc::MODIFY | fc::MODIFY_STRICT)
        {
            return Err(OfError::new(
                err::BAD_REQUEST,
                err::BRC_BUFFER_UNKNOWN,
                "no packet buffers (n_buffers 0)",
            ));
        }
        let groups = |g: u32| table.groups.contains_key(&g);
        match fm.command {
            fc::ADD | fc::MODIFY | fc::MODIFY_STRICT => {
                if fm.table_id > flow::ofctl::MAX_TABLE {
                    return Err(OfError::new(
                        err::FLOW_MOD_FAILED,
                        err::FMFC_BAD_TABLE_ID,
                        format!("table {} (add needs one table)", fm.table_id),
                    ));
                }
                let actions =
                    conv::instructions_from_of(&fm.instructions, fm.table_id, &m, &groups)?;
                if fm.command == fc::ADD {
                    return self.add(fm, m, actions, table, dp, now);
                }
                // Modify: the matching rules get the new actions; counters kept
                // unless RESET_COUNTS; none matching (and no cookie filter): add.
                let strict = fm.command == fc::MODIFY_STRICT;
                let ids = self.select(fm, &m, strict, table, false);
                if ids.is_empty() {
                    if fm.cookie_mask == 0 {
                        return self.add(fm, m, actions, table, dp, now);
                    }
                    return Ok(());
                }
                dp.push_stats(table);
                for id in ids {
                    let Some((mut r, mut s)) = table.remove_rule(id) else {
                        continue;
                    };
                    r.actions = actions.clone();
                    if fm.flags & ff::RESET_COUNTS != 0 {
                        s.packets = 0;
                        s.bytes = 0;
                    }
                    s.modified = now;
                    let nid = table.add_at(r, now);
                    table.set_rule_stats(nid, s);
                }
                dp.table_changed();
            }
            fc::DELETE | fc::DELETE_STRICT => {
                let strict = fm.command == fc::DELETE_STRICT;
                let ids = self.select(fm, &m, strict, table, true);
                if ids.is_empty() {
                    return Ok(());
                }
                dp.push_stats(table);
                for id in ids {
                    if let Some((r, s)) = table.remove_rule(id) {
                        if let Some(b) = self.flow_removed(&r, &s, rr::DELETE, now) {
                            fx.async_msgs.push(b);
                        }
                    }
                }
                dp.table_changed();
            }
            other => {
                return Err(OfError::new(
                    err::FLOW_MOD_FAILED,
                    err::FMFC_BAD_COMMAND,
                    format!("flow mod command {other}"),
                ))
            }
        }
        Ok(())
    }

    /// The rules a modify/delete selects: table (255 = all), match (strict: equal
    /// match and priority), cookie under the mask; deletes also filter on out_port
    /// and out_group.
    fn select(
        &self,
        fm: &msg::FlowMod<'_>,
        m: &Match,
        strict: bool,
        table: &FlowTable,
        delete: bool,
    ) -> Vec<u32> {
        if strict && fm.table_id != c::TABLE_ALL {
            // One table: the classifier finds the rule without a scan.
            return table
                .table_cls(fm.table_id)
                .and_then(|cl| cl.find(m, fm.priority))
                .filter(|id| {
                    let r = &table.rules[id];
                    (r.cookie ^ fm.cookie) & fm.cookie_mask == 0
                        && (!delete || (outputs_to(r, fm.out_port) && uses_group(r, fm.out_group)))
                })
                .into_iter()
                .collect();
        }
        let mut ids: Vec<u32> = table
            .rules
            .iter()
            .filter(|(_, r)| fm.table_id == c::TABLE_ALL || r.table == fm.table_id)
            .filter(|(_, r)| {
                if strict {
                    r.m == *m && r.priority == fm.priority
                } else {
                    covers(m, &r.m)
                }
            })
            .filter(|(_, r)| (r.cookie ^ fm.cookie) & fm.cookie_mask == 0)
            .filter(|(_, r)| !delete || (outputs_to(r, fm.out_port) && uses_group(r, fm.out_group)))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn add(
        &mut self,
        fm: &msg::FlowMod<'_>,
        m: Match,
        actions: Vec<Action>,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
    ) -> Result<(), OfError> {
        let same = table
            .table_cls(fm.table_id)
            .and_then(|c| c.find(&m, fm.priority));
        if fm.flags & ff::CHECK_OVERLAP != 0 {
            let clash = table
                .rules
                .values()
                .any(|r| r.table == fm.table_id && r.priority == fm.priority && overlaps(&r.m, &m));
            if clash {
                return Err(OfError::new(
                    err::FLOW_MOD_FAILED,
                    err::FMFC_OVERLAP,
                    "an overlapping rule of the same priority exists",
                ));
            }
        }
        dp.push_stats(table);
        // Replacing an identical rule keeps its counters unless RESET_COUNTS (OVS).
        let carried = same
            .and_then(|id| table.rule_stats(id).copied())
            .filter(|_| fm.flags & ff::RESET_COUNTS == 0);
        let r = Rule {
            table: fm.table_id,
            priority: fm.priority,
            cookie: fm.cookie,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            m,
            actions,
        };
        let key = (r.table, r.m, r.priority);
        let id = table.add_at(r, now);
        if let Some(old) = carried {
            let mut s = RuleStats::new(now);
            s.packets = old.packets;
            s.bytes = old.bytes;
            table.set_rule_stats(id, s);
        }
        let keep = fm.flags
            & (ff::SEND_FLOW_REM
                | ff::CHECK_OVERLAP
                | ff::RESET_COUNTS
                | ff::NO_PKT_COUNTS
                | ff::NO_BYT_COUNTS);
        if keep != 0 {
            self.flags.insert(key, keep);
        } else {
            self.flags.remove(&key);
        }
        dp.table_changed();
        Ok(())
    }

    fn packet_out(
        &mut self,
        po: &msg::PacketOut<'_>,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
        fx: &mut Effects,
    ) -> Result<(), OfError> {
        if po.buffer_id != c::NO_BUFFER {
            return Err(OfError::new(
                err::BAD_REQUEST,
                err::BRC_BUFFER_UNKNOWN,
                "no packet buffers (n_buffers 0)",
            ));
        }
        let in_port = match po.in_port {
            port::CONTROLLER => 0xfffd,
            port::ANY => 0xffff,
            p => conv::port_from_of13(p).ok_or_else(|| {
                OfError::new(
                    err::BAD_REQUEST,
                    err::BRC_BAD_PORT,
                    format!("in_port {p:#x}"),
                )
            })?,
        };
        let groups = |g: u32| table.groups.contains_key(&g);
        let acts = conv::actions_from_of(&po.actions, &Match::default(), &groups)?;
        if acts
            .iter()
            .any(|a| matches!(a, Action::GotoTable(_) | Action::WriteMetadata { .. }))
        {
            return Err(OfError::new(
                err::BAD_ACTION,
                err::BAC_BAD_TYPE,
                "instruction in packet out",
            ));
        }
        let mut frame = po.data.to_vec();
        let k = FlowKey::from_packet(in_port, &frame);
        let x = table.xlate_packet_out(&k, &acts, now);
        let _ = dp;
        let ex = flow::exec::execute(&x.actions, &mut frame);
        fx.outputs.extend(ex.outputs);
        fx.packet_ins.extend(ex.to_controller);
        Ok(())
    }

    fn multipart(
        &mut self,
        conn: &mut Conn,
        xid: u32,
        req: &Multipart<'_>,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
    ) -> Result<(), OfError> {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        match req.mp_type {
            mp::DESC => {
                let mut b = Vec::new();
                Desc {
                    mfr_desc: "dpustack".into(),
                    hw_desc: "dpustack switch".into(),
                    sw_desc: env!("CARGO_PKG_VERSION").into(),
                    serial_num: "None".into(),
                    dp_desc: "dpustack switch".into(),
                }
                .emit(&mut b);
                entries.push(b);
            }
            mp::FLOW | mp::AGGREGATE => {
                let fr = FlowStatsRequest::parse(req.body)?;
                let m = conv::oxm_to_match(&fr.matches)?;
                dp.push_stats(table);
                let mut ids: Vec<u32> = table
                    .rules
                    .iter()
                    .filter(|(_, r)| fr.table_id == c::TABLE_ALL || r.table == fr.table_id)
                    .filter(|(_, r)| covers(&m, &r.m))
                    .filter(|(_, r)| (r.cookie ^ fr.cookie) & fr.cookie_mask == 0)
                    .filter(|(_, r)| outputs_to(r, fr.out_port) && uses_group(r, fr.out_group))
                    .map(|(&id, _)| id)
                    .collect();
                ids.sort_by_key(|id| {
                    let r = &table.rules[id];
                    (r.table, std::cmp::Reverse(r.priority), *id)
                });
                if req.mp_type == mp::AGGREGATE {
                    let mut a = Aggregate {
                        packet_count: 0,
                        byte_count: 0,
                        flow_count: ids.len() as u32,
                    };
                    for id in &ids {
                        let s = table.rule_stats(*id).copied().unwrap_or_default();
                        a.packet_count += s.packets;
                        a.byte_count += s.bytes;
                    }
                    let mut b = Vec::new();
                    a.emit(&mut b);
                    entries.push(b);
                } else {
                    for id in ids {
                        let r = &table.rules[&id];
                        let s = table.rule_stats(id).copied().unwrap_or_default();
                        let (ds, dn) = secs(now.saturating_sub(s.created));
                        let mut b = Vec::new();
                        FlowStats {
                            table_id: r.table,
                            duration_sec: ds,
                            duration_nsec: dn,
                            priority: r.priority,
                            idle_timeout: r.idle_timeout,
                            hard_timeout: r.hard_timeout,
                            flags: self.flags_of(r),
                            cookie: r.cookie,
                            packet_count: s.packets,
                            byte_count: s.bytes,
                            matches: conv::match_to_oxm(&r.m),
                            instructions: conv::actions_to_of(&r.actions),
                        }
                        .emit(&mut b);
                        entries.push(b);
                    }
                }
            }
            mp::TABLE => {
                // Per-table lookup / matched counts are not kept by the table (0).
                for tid in 0..N_TABLES - 1 {
                    let mut b = Vec::new();
                    TableStats {
                        table_id: tid,
                        active_count: table.table_len(tid) as u32,
                        lookup_count: 0,
                        matched_count: 0,
                    }
                    .emit(&mut b);
                    entries.push(b);
                }
            }
            mp::PORT_STATS => {
                let want = mpb::parse_port_stats_request(req.body)?;
                for (&p, info) in &self.ports {
                    if want != port::ANY && conv::port_to_of13(p) != want {
                        continue;
                    }
                    let (ds, dn) = secs(now.saturating_sub(info.since));
                    let mut b = Vec::new();
                    PortStats {
                        port_no: conv::port_to_of13(p),
                        rx_packets: info.rx_packets,
                        tx_packets: info.tx_packets,
                        rx_bytes: info.rx_bytes,
                        tx_bytes: info.tx_bytes,
                        tx_dropped: info.tx_dropped,
                        duration_sec: ds,
                        duration_nsec: dn,
                        ..PortStats::default()
                    }
                    .emit(&mut b);
                    entries.push(b);
                }
            }
            mp::PORT_DESC => {
                for &p in self.ports.keys() {
                    let mut b = Vec::new();
                    self.port_desc(table, p).emit(&mut b);
                    entries.push(b);
                }
            }
            mp::TABLE_FEATURES => {
                if !req.body.is_empty() {
                    return Err(OfError::new(
                        err::TABLE_MOD_FAILED + 5, // OFPET_TABLE_FEATURES_FAILED
                        5,                         // OFPTFFC_EPERM
                        "setting table features is not supported",
                    ));
                }
                // The same 254 entries (~245 KB) every time: encoded once.
                static TF: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
                let tf = TF.get_or_init(|| {
                    let tf = table_features_template();
                    (0..N_TABLES - 1)
                        .map(|tid| {
                            let mut f = tf.clone();
                            f.table_id = tid;
                            f.name = format!("table{tid}");
                            f.next_tables = ((tid + 1)..N_TABLES - 1).collect();
                            let mut b = Vec::new();
                            f.emit(&mut b);
                            b
                        })
                        .collect()
                });
                entries.extend(tf.iter().cloned());
            }
            other => {
                return Err(OfError::new(
                    err::BAD_REQUEST,
                    err::BRC_BAD_MULTIPART,
                    format!("multipart type {other} is not supported"),
                ))
            }
        }
        // Split into replies of at most MP_CHUNK bytes of body (REPLY_MORE on all but
        // the last).
        let mut chunks: Vec<Vec<u8>> = vec![Vec::new()];
        for e in entries {
            if !chunks.last().is_some_and(|c| c.is_empty())
                && chunks.last().map_or(0, Vec::len) + e.len() > MP_CHUNK
            {
                chunks.push(Vec::new());
            }
            chunks.last_mut().expect("one chunk").extend(e);
        }
        let n = chunks.len();
        for (i, body) in chunks.iter().enumerate() {
            conn.send_msg(
                &Message::MultipartReply(Multipart {
                    mp_type: req.mp_type,
                    flags: if i + 1 < n { mp::MORE } else { 0 },
                    body,
                }),
                xid,
            );
        }
        Ok(())
    }
}

/// What every table supports (TABLE_FEATURES): instructions, actions, match fields.
fn table_features_template() -> TableFeatures {
    use openflow::consts::{at, it};
    use openflow::oxm::{basic, class};
    let h = |cl: u16, f: u8, n: u32| ((cl as u32) << 16) | ((f as u32) << 9) | n;
    let mut fields: Vec<u32> = [
        (basic::IN_PORT, 4),
        (basic::METADATA, 8),
        (basic::ETH_DST, 6),
        (basic::ETH_SRC, 6),
        (basic::ETH_TYPE, 2),
        (basic::VLAN_VID, 2),
        (basic::VLAN_PCP, 1),
        (basic::IP_DSCP, 1),
        (basic::IP_ECN, 1),
        (basic::IP_PROTO, 1),
        (basic::IPV4_SRC, 4),
        (basic::IPV4_DST, 4),
        (basic::TCP_SRC, 2),
        (basic::TCP_DST, 2),
        (basic::UDP_SRC, 2),
        (basic::UDP_DST, 2),
        (basic::SCTP_SRC, 2),
        (basic::SCTP_DST, 2),
        (basic::ICMPV4_TYPE, 1),
        (basic::ICMPV4_CODE, 1),
        (basic::ARP_OP, 2),
        (basic::ARP_SPA, 4),
        (basic::ARP_TPA, 4),
        (basic::ARP_SHA, 6),
        (basic::ARP_THA, 6),
        (basic::IPV6_SRC, 16),
        (basic::IPV6_DST, 16),
        (basic::IPV6_FLABEL, 4),
        (basic::ICMPV6_TYPE, 1),
        (basic::ICMPV6_CODE, 1),
        (basic::IPV6_ND_TARGET, 16),
        (basic::IPV6_ND_SLL, 6),
        (basic::IPV6_ND_TLL, 6),
    ]
    .iter()
    .map(|&(f, n)| h(class::OPENFLOW_BASIC, f, n))
    .collect();
    fields.extend((0..16).map(|r| h(class::NXM_1, r, 4)));
    let set: Vec<u32> = [
        (basic::ETH_DST, 6),
        (basic::ETH_SRC, 6),
        (basic::VLAN_VID, 2),
        (basic::VLAN_PCP, 1),
        (basic::IP_DSCP, 1),
        (basic::IPV4_SRC, 4),
        (basic::IPV4_DST, 4),
        (basic::TCP_SRC, 2),
        (basic::TCP_DST, 2),
        (basic::UDP_SRC, 2),
        (basic::UDP_DST, 2),
        (basic::IPV6_SRC, 16),
        (basic::IPV6_DST, 16),
        (basic::METADATA, 8),
    ]
    .iter()
    .map(|&(f, n)| h(class::OPENFLOW_BASIC, f, n))
    .chain((0..16).map(|r| h(class::NXM_1, r, 4)))
    .collect();
    TableFeatures {
        table_id: 0,
        name: String::new(),
        metadata_match: u64::MAX,
        metadata_write: u64::MAX,
        max_entries: 1_000_000,
        instructions: vec![it::GOTO_TABLE, it::WRITE_METADATA, it::APPLY_ACTIONS],
        next_tables: Vec::new(),
        actions: vec![
            at::OUTPUT,
            at::PUSH_VLAN,
            at::POP_VLAN,
            at::GROUP,
            at::DEC_NW_TTL,
            at::SET_FIELD,
        ],
        wildcards: fields.clone(),
        match_fields: fields,
        set_fields: set,
    }
}
