//! Control of a running switch: typed [`Command`]s applied by the switch loop between
//! packet batches, on the loop's own table and datapath. A [`Control`] (cloneable,
//! `Send + Sync`) hands a command to the loop over a channel, wakes the loop's poll
//! through a socket pair, and waits for the [`Reply`]. There is no socket of the
//! switch's own: the node's JSON-RPC server (`dpustack_switch_*`, node::manage) is the
//! way in from other processes.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use flow::dp::Datapath;
use flow::FlowTable;

use crate::{Error, Result};

/// How long a caller waits for the loop's answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A control command (ovs-ofctl / ovs-appctl syntax in the strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Datapath (megaflow) flows, like `ovs-appctl dpctl/dump-flows`.
    DumpFlows,
    /// OpenFlow rules with statistics matching the match (`table=N` included; empty:
    /// all), like `ovs-ofctl dump-flows`.
    DumpRules(String),
    /// Add flows (ovs-ofctl add-flows lines).
    AddFlows(String),
    /// Replace every flow with these.
    ReplaceFlows(String),
    /// Delete the flows matching (empty: all).
    DelFlows(String),
    /// Add groups (ovs-ofctl add-groups lines); an existing id is refused.
    AddGroups(String),
    /// Replace existing groups.
    ModGroups(String),
    /// Delete a group (`group_id=N` or `N`; empty or `all`: every group) and its rules.
    DelGroups(String),
    DumpGroups,
    DumpGroupStats,
    /// NORMAL's MAC table, like `ovs-appctl fdb/show`.
    FdbShow,
    FdbFlush,
    PortDown(u32),
    PortUp(u32),
    /// The datapath and loop counters.
    Stats,
    /// Offload queues, per-flow offload states, revalidator figures
    /// (`switch offload-stats`; answered by the loop, [`crate::offload::offload_stats`]).
    OffloadStats,
    /// Datapath settings, `KEY=VALUE ...` (hw-offload, max-idle, flow-limit, ...;
    /// empty: show them; [`crate::offload::apply_config`]).
    Config(String),
    /// Stop the switch loop.
    Stop,
}

/// Counters of a running switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub emc_hits: u64,
    pub megaflow_hits: u64,
    pub upcalls: u64,
    pub subtable_probes: u64,
    /// Megaflows installed now.
    pub megaflows: u64,
    /// OpenFlow rules now.
    pub rules: u64,
    /// Groups now.
    pub groups: u64,
    /// Frames received on the ports (the loop's counters; 0 from [`handle`] alone).
    pub rx_packets: u64,
    /// Frames sent on the ports.
    pub tx_packets: u64,
    /// Outputs to a port the switch does not have.
    pub dropped_no_port: u64,
    /// OpenFlow rules removed by their idle/hard timeout.
    pub rules_expired: u64,
    /// Upcalls not installed because the datapath held its flow limit (slow path).
    pub flow_limit_hits: u64,
    /// Frames the kernel dropped on the ports' receive queues (full).
    pub port_rx_dropped: u64,
    /// Frames waiting in the ports' transmit queues now.
    pub port_tx_queued: u64,
    /// Frames dropped because a port's transmit queue was at its bound.
    pub port_tx_dropped: u64,
    /// Frames a port's kernel refused for another reason than room.
    pub port_tx_errors: u64,
    /// OpenFlow connections up now.
    pub of_connections: u64,
    /// OpenFlow connections closed at accept (`max_connections` reached).
    pub of_connections_refused: u64,
    /// Asynchronous OpenFlow messages dropped at a connection's async backlog bound.
    pub of_async_dropped: u64,
    /// Of those, PACKET_INs.
    pub of_packet_ins_dropped: u64,
    /// OpenFlow connections closed for an output backlog past `max_backlog`.
    pub of_backlog_closes: u64,
}

impl Stats {
    /// `(name, value)` pairs, in a fixed order (the JSON-RPC answer's keys).
    pub fn fields(&self) -> [(&'static str, u64); 21] {
        [
            ("emc_hits", self.emc_hits),
            ("megaflow_hits", self.megaflow_hits),
            ("upcalls", self.upcalls),
            ("subtable_probes", self.subtable_probes),
            ("megaflows", self.megaflows),
            ("rules", self.rules),
            ("groups", self.groups),
            ("rx_packets", self.rx_packets),
            ("tx_packets", self.tx_packets),
            ("dropped_no_port", self.dropped_no_port),
            ("rules_expired", self.rules_expired),
            ("flow_limit_hits", self.flow_limit_hits),
            ("port_rx_dropped", self.port_rx_dropped),
            ("port_tx_queued", self.port_tx_queued),
            ("port_tx_dropped", self.port_tx_dropped),
            ("port_tx_errors", self.port_tx_errors),
            ("of_connections", self.of_connections),
            ("of_connections_refused", self.of_connections_refused),
            ("of_async_dropped", self.of_async_dropped),
            ("of_packet_ins_dropped", self.of_packet_ins_dropped),
            ("of_backlog_closes", self.of_backlog_closes),
        ]
    }
}

/// The loop's answer to a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Text lines (dumps, `N flows added, M in table`, ...), each ending in `\n`.
    Text(String),
    Stats(Stats),
    /// The loop stops after this answer.
    Stopping,
}

impl Reply {
    /// The text of a reply (a `Stats` reply as `key value` lines).
    pub fn text(&self) -> String {
        match self {
            Reply::Text(s) => s.clone(),
            Reply::Stats(st) => st
                .fields()
                .iter()
                .map(|(k, v)| format!("{k} {v}\n"))
                .collect(),
            Reply::Stopping => "stopping\n".into(),
        }
    }
}

/// The loop's answer to a command, or why it was refused.
pub type Answer = std::result::Result<Reply, String>;

/// A hook of the loop that answers the commands needing its own state (None: not one
/// of them).
pub type OwnCommands<'a> = dyn FnMut(&Command, &mut Datapath) -> Option<Answer> + 'a;

struct Request {
    cmd: Command,
    reply: mpsc::SyncSender<std::result::Result<Reply, String>>,
}

/// The caller's side: sends commands to a switch loop (clone it freely).
#[derive(Clone)]
pub struct Control {
    tx: mpsc::Sender<Request>,
    wake: Arc<UnixStream>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").finish_non_exhaustive()
    }
}

/// The loop's side of a [`Control`]: handed to [`crate::run`].
pub struct ControlRx {
    rx: mpsc::Receiver<Request>,
    wake: UnixStream,
}

impl std::fmt::Debug for ControlRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlRx").finish_non_exhaustive()
    }
}

/// A control channel: the caller's end and the loop's end.
pub fn channel() -> Result<(Control, ControlRx)> {
    let (a, b) = UnixStream::pair()?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (tx, rx) = mpsc::channel();
    Ok((
        Control {
            tx,
            wake: Arc::new(a),
        },
        ControlRx { rx, wake: b },
    ))
}

impl Control {
    /// Runs `cmd` on the switch loop and waits for its answer: [`Error::Remote`] when
    /// the switch refused it, [`Error::Stopped`] when no loop runs behind this handle.
    pub fn call(&self, cmd: Command) -> Result<Reply> {
        let (rtx, rrx) = mpsc::sync_channel(1);
        self.tx
            .send(Request { cmd, reply: rtx })
            .map_err(|_| Error::Stopped)?;
        // A full socket buffer means the loop has wake-ups pending already.
        let _ = (&*self.wake).write(&[1]);
        match rrx.recv_timeout(REPLY_TIMEOUT) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(Error::Remote(e)),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::Stopped),
        }
    }

    /// Runs `cmd`, returns its text.
    pub fn text(&self, cmd: Command) -> Result<String> {
        self.call(cmd).map(|r| r.text())
    }

    /// The switch's counters.
    pub fn stats(&self) -> Result<Stats> {
        match self.call(Command::Stats)? {
            Reply::Stats(s) => Ok(s),
            other => Err(Error::Remote(format!(
                "unexpected answer to stats: {other:?}"
            ))),
        }
    }
}

impl ControlRx {
    /// The descriptor to poll for readability (a command is waiting).
    pub fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Applies every waiting command; returns whether one asked the loop to stop.
    /// `fill` completes a `Stats` reply with the loop's own counters; `own` answers
    /// the commands that need the loop's own state (offload settings, the
    /// revalidator: `OffloadStats`, `Config`), None for the rest ([`handle`]).
    pub fn serve(
        &self,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
        fill: &dyn Fn(&mut Stats),
        own: &mut OwnCommands<'_>,
    ) -> bool {
        let mut b = [0u8; 256];
        loop {
            match (&self.wake).read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let mut stop = false;
        while let Ok(req) = self.rx.try_recv() {
            let mut r = match own(&req.cmd, dp) {
                Some(r) => r,
                None => handle(req.cmd, table, dp, now),
            };
            match &mut r {
                Ok(Reply::Stats(s)) => fill(s),
                Ok(Reply::Stopping) => stop = true,
                _ => {}
            }
            let _ = req.reply.send(r);
        }
        stop
    }
}

fn lines(v: impl IntoIterator<Item = String>) -> String {
    let mut s = String::new();
    for l in v {
        s += &l;
        s.push('\n');
    }
    s
}

/// Applies one command to the switch's table and datapath at `now` (ms): the answer,
/// or why it was refused (nothing of a refused change is applied).
pub fn handle(
    cmd: Command,
    table: &mut FlowTable,
    dp: &mut Datapath,
    now: u64,
) -> std::result::Result<Reply, String> {
    Ok(Reply::Text(match cmd {
        Command::DumpFlows => lines(dp.dump(now, 1.0)),
        Command::DumpRules(m) => {
            // Fresh counters: credit the megaflows' traffic first.
            dp.push_stats(table);
            let (t, m) = flow::ofctl::parse_table_match(m.trim()).map_err(|e| format!("{e}"))?;
            lines(table.dump_rules_matching(now, t, &m))
        }
        Command::AddFlows(ref f) | Command::ReplaceFlows(ref f) => {
            let rules = flow::parse_flows(f).map_err(|e| format!("{e}"))?;
            // A rule naming a missing group is refused (OVS: OFPBAC_BAD_OUT_GROUP);
            // nothing of the request is applied then.
            let replace = matches!(cmd, Command::ReplaceFlows(_));
            for r in &rules {
                for a in &r.actions {
                    if let flow::ofctl::Action::Group(g) = a {
                        if !table.groups.contains_key(g) {
                            return Err(format!(
                                "a rule outputs to group {g}, which does not exist (OFPBAC_BAD_OUT_GROUP)"
                            ));
                        }
                    }
                }
            }
            // Credit the rules before the megaflows go.
            dp.push_stats(table);
            if replace {
                table.clear();
            }
            let n = rules.len();
            for r in rules {
                table.add_at(r, now);
            }
            // The revalidator keeps, modifies or deletes each megaflow (the loop runs
            // it right after the commands).
            dp.table_changed();
            format!("{n} flows added, {} in table\n", table.len())
        }
        Command::DelFlows(m) => {
            let parsed = if m.trim().is_empty() {
                None
            } else {
                Some(flow::ofctl::parse_table_match(m.trim()).map_err(|e| format!("{e}"))?)
            };
            dp.push_stats(table);
            let n = match parsed {
                None => {
                    let n = table.len();
                    table.clear();
                    n
                }
                Some((t, m)) => table.del_matching_in(t, &m),
            };
            dp.table_changed();
            format!("{n} flows deleted, {} in table\n", table.len())
        }
        Command::AddGroups(ref g) | Command::ModGroups(ref g) => {
            // add-groups refuses an existing id (OFPGMFC_GROUP_EXISTS); mod-groups
            // replaces (counters reset, as a new group).
            let add = matches!(cmd, Command::AddGroups(_));
            let groups = flow::parse_groups(g).map_err(|e| format!("{e}"))?;
            dp.push_stats(table);
            let n = groups.len();
            let mut t2 = table.clone();
            for g in groups {
                let id = g.group_id;
                let exists = t2.groups.contains_key(&id);
                if add && exists {
                    return Err(format!("group {id} exists (OFPGMFC_GROUP_EXISTS)"));
                }
                if !add && !exists {
                    return Err(format!("group {id} does not exist (OFPGMFC_UNKNOWN_GROUP)"));
                }
                t2.add_group(g).map_err(|e| e.to_string())?;
            }
            t2.check_groups()?;
            *table = t2;
            dp.table_changed();
            format!("{n} groups added, {} in table\n", table.groups.len())
        }
        Command::DelGroups(g) => {
            let id = match g.trim() {
                "" | "all" | "group_id=all" => None,
                s => {
                    let v = s.strip_prefix("group_id=").unwrap_or(s);
                    Some(
                        v.parse::<u32>()
                            .map_err(|_| format!("bad group id `{v}`"))?,
                    )
                }
            };
            dp.push_stats(table);
            let rules = table.len();
            let n = table.del_group(id);
            dp.table_changed();
            format!(
                "{n} groups deleted ({} rules that used them), {} in table\n",
                rules - table.len(),
                table.groups.len()
            )
        }
        Command::FdbShow => lines(table.bridge.ml.borrow().show(now)),
        Command::FdbFlush => {
            let n = {
                let mut ml = table.bridge.ml.borrow_mut();
                let n = ml.entries.len();
                ml.entries.clear();
                n
            };
            dp.push_stats(table);
            dp.table_changed();
            format!("{n} MAC entries flushed\n")
        }
        Command::DumpGroups => lines(table.dump_groups()),
        Command::DumpGroupStats => {
            dp.push_stats(table);
            lines(table.dump_group_stats())
        }
        Command::PortDown(p) | Command::PortUp(p) => {
            let down = matches!(cmd, Command::PortDown(_));
            if down {
                table.ports_down.insert(p);
            } else {
                table.ports_down.remove(&p);
            }
            // Bucket liveness changed: translations must be redone.
            dp.push_stats(table);
            table.clear_frozen();
            dp.table_changed();
            format!("port {p} {}\n", if down { "down" } else { "up" })
        }
        Command::Stats => {
            let st = dp.stats;
            return Ok(Reply::Stats(Stats {
                emc_hits: st.emc_hits,
                megaflow_hits: st.megaflow_hits,
                upcalls: st.upcalls,
                subtable_probes: st.subtable_probes,
                megaflows: dp.n_flows() as u64,
                rules: table.len() as u64,
                groups: table.groups.len() as u64,
                flow_limit_hits: st.flow_limit_hits,
                ..Stats::default()
            }));
        }
        Command::OffloadStats | Command::Config(_) => {
            return Err("offload-stats and config are answered by a running switch loop".into())
        }
        Command::Stop => return Ok(Reply::Stopping),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A revalidator round's parameters that only re-translate (nothing is idle).
    fn reval() -> flow::dp::RevalParams {
        flow::dp::RevalParams {
            max_idle: 1_000_000,
            kill_all: false,
            query_hw: false,
        }
    }

    /// The answer as text, as the switch loop runs a command: [`handle`], then the
    /// revalidator when the command changed the table.
    fn run(cmd: Command, t: &mut FlowTable, dp: &mut Datapath, now: u64) -> String {
        let r = run_only(cmd, t, dp, now);
        if dp.needs_revalidation() {
            dp.revalidate(t, now, reval());
        }
        r
    }

    /// The answer as text: `OK\n` + the reply's text, or `ERROR: why\n`.
    fn run_only(cmd: Command, t: &mut FlowTable, dp: &mut Datapath, now: u64) -> String {
        match handle(cmd, t, dp, now) {
            Ok(r) => format!("OK\n{}", r.text()),
            Err(e) => format!("ERROR: {e}\n"),
        }
    }

    const FRAME: &str = "020000000002020000000001080045000068000000004006aed8c0a801070a0000099c40005000000000000000005000000063580000000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

    fn frame() -> Vec<u8> {
        (0..FRAME.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&FRAME[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The control protocol against a table and datapath: statistics credited before
    /// a dump, megaflows revalidated (not flushed) after a change, counts in the answers, errors as `ERROR:`.
    #[test]
    fn requests_change_and_dump_the_table() {
        let mut t = FlowTable::from_rules(
            flow::parse_flows(
                "priority=200,in_port=1,tcp,actions=output:3\npriority=0,actions=drop\n",
            )
            .unwrap(),
        );
        let mut dp = Datapath::new();
        dp.receive(&t, 1, &frame(), 1);
        assert_eq!(dp.n_flows(), 1);
        let r = run(Command::DumpFlows, &mut t, &mut dp, 2);
        assert!(r.starts_with("OK\n") && r.contains("actions:3"), "{r}");
        let r = run(Command::Stats, &mut t, &mut dp, 2);
        assert!(
            r.contains("upcalls 1\n") && r.contains("megaflows 1\nrules 2\n"),
            "{r}"
        );
        let r = run(Command::DumpRules("".into()), &mut t, &mut dp, 2);
        assert!(r.contains("n_packets=1, n_bytes=118"), "{r}");
        let r = run_only(
            Command::AddFlows("priority=5,in_port=2,actions=output:1\n".into()),
            &mut t,
            &mut dp,
            3,
        );
        assert_eq!(r, "OK\n1 flows added, 3 in table\n");
        // No flush: the change is left to the revalidator, which keeps this megaflow
        // (the new rule cannot match in_port=1).
        assert!(
            dp.needs_revalidation(),
            "a change marks the megaflows for revalidation"
        );
        assert_eq!(dp.n_flows(), 1, "a change no longer flushes the megaflows");
        dp.revalidate(&mut t, 3, reval());
        assert_eq!(dp.n_flows(), 1);
        assert!(run_only(Command::DumpFlows, &mut t, &mut dp, 3).contains("actions:3"));
        // A rule that takes over this flow: its megaflow is modified in place.
        let r = run_only(
            Command::AddFlows("priority=300,in_port=1,tcp,actions=output:2\n".into()),
            &mut t,
            &mut dp,
            3,
        );
        assert_eq!(r, "OK\n1 flows added, 4 in table\n");
        assert!(run_only(Command::DumpFlows, &mut t, &mut dp, 3).contains("actions:3"));
        let sw = dp.revalidate(&mut t, 3, reval());
        assert_eq!((dp.n_flows(), sw.modified), (1, 1));
        let r = run_only(Command::DumpFlows, &mut t, &mut dp, 3);
        assert!(r.contains("actions:2") && !r.contains("actions:3"), "{r}");
        // Both in_port=1,tcp rules go: the megaflow now meets the drop rule.
        let r = run_only(
            Command::DelFlows("in_port=1,tcp".into()),
            &mut t,
            &mut dp,
            3,
        );
        assert_eq!(r, "OK\n2 flows deleted, 2 in table\n");
        dp.revalidate(&mut t, 3, reval());
        let r = run_only(Command::DumpFlows, &mut t, &mut dp, 3);
        assert!(r.contains("actions:drop"), "{r}");
        let r = run(Command::DelFlows("in_port=2".into()), &mut t, &mut dp, 4);
        assert_eq!(r, "OK\n1 flows deleted, 1 in table\n");
        let r = run(
            Command::ReplaceFlows("priority=1,actions=drop\n".into()),
            &mut t,
            &mut dp,
            5,
        );
        assert_eq!(r, "OK\n1 flows added, 1 in table\n");
        let r = run(Command::DelFlows("bogus=1".into()), &mut t, &mut dp, 6);
        assert!(r.starts_with("ERROR: ") && r.contains("bogus"), "{r}");
        let r = run(Command::DelFlows("".into()), &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n1 flows deleted, 0 in table\n");
        assert_eq!(
            handle(Command::Stop, &mut t, &mut dp, 8),
            Ok(Reply::Stopping)
        );
    }

    /// Groups and table-scoped deletes at run time: add/mod/del/dump-groups, stats after
    /// traffic, port liveness, `del-flows table=N,...`, refusals as `ERROR:`.
    #[test]
    fn groups_at_run_time() {
        let mut t = FlowTable::new();
        let mut dp = Datapath::new();
        let r = run(
            Command::AddGroups(
                "group_id=1,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3\n"
                    .into(),
            ),
            &mut t,
            &mut dp,
            1,
        );
        assert_eq!(r, "OK\n1 groups added, 1 in table\n");
        let r = run(
            Command::AddGroups("group_id=1,type=all,bucket=output:2\n".into()),
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("OFPGMFC_GROUP_EXISTS"), "{r}");
        let r = run(
            Command::AddFlows("table=0,in_port=1,actions=group:7\n".into()),
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("group 7, which does not exist"), "{r}");
        assert_eq!(t.len(), 0);
        let r = run(
            Command::AddGroups("group_id=5,type=all,bucket=group:6\n".into()),
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("group 6, which does not exist"), "{r}");
        assert_eq!(t.groups.len(), 1);
        let r = run(
            Command::AddFlows("table=0,in_port=1,actions=resubmit(,3)\ntable=3,tcp,actions=group:1\ntable=3,udp,actions=output:4\n".into()),
            &mut t,
            &mut dp,
            2,
        );
        assert!(r.starts_with("OK\n3 flows added"), "{r}");
        t.ports = Some((1..=4).collect());
        let mut fr = frame();
        fr[12..14].copy_from_slice(&[0x08, 0x00]);
        let ex = dp.receive_execute(&t, 1, &mut fr, 3);
        assert_eq!(ex.outputs.iter().map(|o| o.0).collect::<Vec<_>>(), [2]);
        let r = run(Command::PortDown(2), &mut t, &mut dp, 4);
        assert_eq!(r, "OK\nport 2 down\n");
        let ex = dp.receive_execute(&t, 1, &mut frame(), 5);
        assert_eq!(ex.outputs.iter().map(|o| o.0).collect::<Vec<_>>(), [3]);
        let r = run(Command::DumpGroupStats, &mut t, &mut dp, 6);
        assert!(
            r.contains("group_id=1,ref_count=1,packet_count=2,byte_count=236,bucket0:packet_count=1,byte_count=118,bucket1:packet_count=1,byte_count=118"),
            "{r}"
        );
        let r = run(Command::DumpGroups, &mut t, &mut dp, 6);
        assert_eq!(
            r,
            "OK\ngroup_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3\n"
        );
        let r = run(Command::DumpRules("table=3".into()), &mut t, &mut dp, 7);
        assert_eq!(r.lines().count(), 3, "OK + the two table-3 rules: {r}");
        assert!(!r.contains("table=0"), "{r}");
        let r = run(Command::DumpRules("table=3,udp".into()), &mut t, &mut dp, 7);
        assert_eq!(r.lines().count(), 2, "{r}");
        let r = run(Command::DelFlows("table=3,udp".into()), &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n1 flows deleted, 2 in table\n");
        let r = run(Command::DelFlows("table=0,udp".into()), &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n0 flows deleted, 2 in table\n");
        let r = run(Command::DelGroups("group_id=1".into()), &mut t, &mut dp, 8);
        assert_eq!(
            r,
            "OK\n1 groups deleted (1 rules that used them), 0 in table\n"
        );
        assert_eq!(t.len(), 1);
    }
}
