//! The control protocol on the switch's Unix socket: one request per
//! connection, first line the command, then the payload; the answer is
//! `OK\n` + text or `ERROR: message\n`.

use std::io::{Read, Write};
use std::path::Path;

use flow::dp::Datapath;
use flow::FlowTable;

use crate::{Error, Result};

/// Sends one request to a running switch; returns the text after `OK`.
pub fn call(sock: &Path, cmd: &str, payload: &str) -> Result<String> {
    let mut c = std::os::unix::net::UnixStream::connect(sock).map_err(|source| Error::Open {
        what: format!("connecting to the switch at {}", sock.display()),
        source,
    })?;
    c.write_all(format!("{cmd}\n{payload}").as_bytes())?;
    c.shutdown(std::net::Shutdown::Write)?;
    let mut resp = String::new();
    c.read_to_string(&mut resp)?;
    if let Some(e) = resp.strip_prefix("ERROR: ") {
        return Err(Error::Remote(e.trim_end().to_string()));
    }
    Ok(resp.strip_prefix("OK\n").unwrap_or(&resp).to_string())
}

/// Answers one request against the switch's table and datapath at `now` (ms);
/// returns the answer and whether the switch is to stop.
pub fn handle(req: &str, table: &mut FlowTable, dp: &mut Datapath, now: u64) -> (String, bool) {
    let (cmd, payload) = req.split_once('\n').unwrap_or((req, ""));
    let mut stop = false;
    let r: std::result::Result<String, String> = (|| {
        Ok(match cmd.trim() {
            "dump-flows" => {
                let mut s = String::new();
                for l in dp.dump(now, 1.0) {
                    s += &l;
                    s.push('\n');
                }
                s
            }
            "dump-rules" => {
                // Fresh counters: credit the megaflows' traffic first.
                dp.push_stats(table);
                let (t, m) =
                    flow::ofctl::parse_table_match(payload.trim()).map_err(|e| format!("{e}"))?;
                let mut s = String::new();
                for l in table.dump_rules_matching(now, t, &m) {
                    s += &l;
                    s.push('\n');
                }
                s
            }
            "add-flows" | "replace-flows" => {
                let rules = flow::parse_flows(payload).map_err(|e| format!("{e}"))?;
                // Credit the rules before the megaflows go.
                dp.push_stats(table);
                if cmd.trim() == "replace-flows" {
                    table.clear();
                }
                let n = rules.len();
                // A rule naming a missing group is refused (OVS: OFPBAC_BAD_OUT_GROUP);
                // nothing of the request is applied then.
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
                for r in rules {
                    table.add_at(r, now);
                }
                // No revalidator yet (issue 8): megaflows are flushed on any change.
                dp.flush();
                format!("{n} flows added, {} in table\n", table.len())
            }
            "del-flows" => {
                dp.push_stats(table);
                let n = if payload.trim().is_empty() {
                    let n = table.len();
                    table.clear();
                    n
                } else {
                    let (t, m) = flow::ofctl::parse_table_match(payload.trim())
                        .map_err(|e| format!("{e}"))?;
                    table.del_matching_in(t, &m)
                };
                dp.flush();
                format!("{n} flows deleted, {} in table\n", table.len())
            }
            "add-groups" | "mod-groups" => {
                // add-groups refuses an existing id (OFPGMFC_GROUP_EXISTS); mod-groups
                // replaces (counters reset, as a new group).
                let groups = flow::parse_groups(payload).map_err(|e| format!("{e}"))?;
                dp.push_stats(table);
                let n = groups.len();
                let mut t2 = table.clone();
                for g in groups {
                    let id = g.group_id;
                    let exists = t2.groups.contains_key(&id);
                    if cmd.trim() == "add-groups" && exists {
                        return Err(format!("group {id} exists (OFPGMFC_GROUP_EXISTS)"));
                    }
                    if cmd.trim() == "mod-groups" && !exists {
                        return Err(format!("group {id} does not exist (OFPGMFC_UNKNOWN_GROUP)"));
                    }
                    t2.add_group(g).map_err(|e| e.to_string())?;
                }
                t2.check_groups()?;
                *table = t2;
                dp.flush();
                format!("{n} groups added, {} in table\n", table.groups.len())
            }
            "del-groups" => {
                dp.push_stats(table);
                let id = match payload.trim() {
                    "" | "all" | "group_id=all" => None,
                    s => {
                        let v = s.strip_prefix("group_id=").unwrap_or(s);
                        Some(
                            v.parse::<u32>()
                                .map_err(|_| format!("bad group id `{v}`"))?,
                        )
                    }
                };
                let rules = table.len();
                let n = table.del_group(id);
                dp.flush();
                format!(
                    "{n} groups deleted ({} rules that used them), {} in table\n",
                    rules - table.len(),
                    table.groups.len()
                )
            }
            "fdb-show" => {
                let mut s = String::new();
                for l in table.bridge.ml.borrow().show(now) {
                    s += &l;
                    s.push('\n');
                }
                s
            }
            "fdb-flush" => {
                let n = {
                    let mut ml = table.bridge.ml.borrow_mut();
                    let n = ml.entries.len();
                    ml.entries.clear();
                    n
                };
                dp.push_stats(table);
                dp.flush();
                format!("{n} MAC entries flushed\n")
            }
            "dump-groups" => {
                let mut s = String::new();
                for l in table.dump_groups() {
                    s += &l;
                    s.push('\n');
                }
                s
            }
            "dump-group-stats" => {
                dp.push_stats(table);
                let mut s = String::new();
                for l in table.dump_group_stats() {
                    s += &l;
                    s.push('\n');
                }
                s
            }
            "port-down" | "port-up" => {
                let p: u32 = payload
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad port `{}`", payload.trim()))?;
                if cmd.trim() == "port-down" {
                    table.ports_down.insert(p);
                } else {
                    table.ports_down.remove(&p);
                }
                // Bucket liveness changed: translations must be redone.
                dp.push_stats(table);
                table.clear_frozen();
                dp.flush();
                format!(
                    "port {p} {}\n",
                    if cmd.trim() == "port-down" {
                        "down"
                    } else {
                        "up"
                    }
                )
            }
            "stats" => {
                // `key value` lines (the management plane's metrics and RPC)
                let st = dp.stats;
                format!(
                    "emc_hits {}\nmegaflow_hits {}\nupcalls {}\nsubtable_probes {}\nmegaflows {}\nrules {}\n",
                    st.emc_hits,
                    st.megaflow_hits,
                    st.upcalls,
                    st.subtable_probes,
                    dp.n_flows(),
                    table.len()
                )
            }
            "stop" => {
                stop = true;
                "stopping\n".to_string()
            }
            other => return Err(format!("unknown command `{other}`")),
        })
    })();
    match r {
        Ok(s) => (format!("OK\n{s}"), stop),
        Err(e) => (format!("ERROR: {e}\n"), stop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: &str = "020000000002020000000001080045000068000000004006aed8c0a801070a0000099c40005000000000000000005000000063580000000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

    fn frame() -> Vec<u8> {
        (0..FRAME.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&FRAME[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The control protocol against a table and datapath: statistics credited before
    /// a dump, megaflows flushed on a change, counts in the answers, errors as `ERROR:`.
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
        let (r, stop) = handle("dump-flows\n", &mut t, &mut dp, 2);
        assert!(!stop);
        assert!(r.starts_with("OK\n") && r.contains("actions:3"), "{r}");
        let (r, _) = handle("stats\n", &mut t, &mut dp, 2);
        assert!(
            r.contains("upcalls 1\n") && r.contains("megaflows 1\nrules 2\n"),
            "{r}"
        );
        let (r, _) = handle("dump-rules\n", &mut t, &mut dp, 2);
        assert!(r.contains("n_packets=1, n_bytes=118"), "{r}");
        let (r, _) = handle(
            "add-flows\npriority=5,in_port=2,actions=output:1\n",
            &mut t,
            &mut dp,
            3,
        );
        assert_eq!(r, "OK\n1 flows added, 3 in table\n");
        assert_eq!(dp.n_flows(), 0, "a change flushes the megaflows");
        let (r, _) = handle("del-flows\nin_port=2", &mut t, &mut dp, 4);
        assert_eq!(r, "OK\n1 flows deleted, 2 in table\n");
        let (r, _) = handle(
            "replace-flows\npriority=1,actions=drop\n",
            &mut t,
            &mut dp,
            5,
        );
        assert_eq!(r, "OK\n1 flows added, 1 in table\n");
        let (r, _) = handle("del-flows\nbogus=1", &mut t, &mut dp, 6);
        assert!(r.starts_with("ERROR: ") && r.contains("bogus"), "{r}");
        let (r, _) = handle("frobnicate\n", &mut t, &mut dp, 6);
        assert_eq!(r, "ERROR: unknown command `frobnicate`\n");
        let (r, _) = handle("del-flows\n", &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n1 flows deleted, 0 in table\n");
        assert_eq!(
            handle("stop\n", &mut t, &mut dp, 8),
            ("OK\nstopping\n".into(), true)
        );
    }

    /// Groups and table-scoped deletes at run time: add/mod/del/dump-groups, stats after
    /// traffic, port liveness, `del-flows table=N,...`, refusals as `ERROR:`.
    #[test]
    fn groups_at_run_time() {
        let mut t = FlowTable::new();
        let mut dp = Datapath::new();
        let (r, _) = handle(
            "add-groups\ngroup_id=1,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3\n",
            &mut t,
            &mut dp,
            1,
        );
        assert_eq!(r, "OK\n1 groups added, 1 in table\n");
        let (r, _) = handle(
            "add-groups\ngroup_id=1,type=all,bucket=output:2\n",
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("OFPGMFC_GROUP_EXISTS"), "{r}");
        let (r, _) = handle(
            "add-flows\ntable=0,in_port=1,actions=group:7\n",
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("group 7, which does not exist"), "{r}");
        assert_eq!(t.len(), 0);
        let (r, _) = handle(
            "add-groups\ngroup_id=5,type=all,bucket=group:6\n",
            &mut t,
            &mut dp,
            1,
        );
        assert!(r.contains("group 6, which does not exist"), "{r}");
        assert_eq!(t.groups.len(), 1);
        let (r, _) = handle(
            "add-flows\ntable=0,in_port=1,actions=resubmit(,3)\ntable=3,tcp,actions=group:1\ntable=3,udp,actions=output:4\n",
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
        let (r, _) = handle("port-down\n2", &mut t, &mut dp, 4);
        assert_eq!(r, "OK\nport 2 down\n");
        let ex = dp.receive_execute(&t, 1, &mut frame(), 5);
        assert_eq!(ex.outputs.iter().map(|o| o.0).collect::<Vec<_>>(), [3]);
        let (r, _) = handle("dump-group-stats\n", &mut t, &mut dp, 6);
        assert!(
            r.contains("group_id=1,ref_count=1,packet_count=2,byte_count=236,bucket0:packet_count=1,byte_count=118,bucket1:packet_count=1,byte_count=118"),
            "{r}"
        );
        let (r, _) = handle("dump-groups\n", &mut t, &mut dp, 6);
        assert_eq!(
            r,
            "OK\ngroup_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3\n"
        );
        let (r, _) = handle("dump-rules\ntable=3", &mut t, &mut dp, 7);
        assert_eq!(r.lines().count(), 3, "OK + the two table-3 rules: {r}");
        assert!(!r.contains("table=0"), "{r}");
        let (r, _) = handle("dump-rules\ntable=3,udp", &mut t, &mut dp, 7);
        assert_eq!(r.lines().count(), 2, "{r}");
        let (r, _) = handle("del-flows\ntable=3,udp", &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n1 flows deleted, 2 in table\n");
        let (r, _) = handle("del-flows\ntable=0,udp", &mut t, &mut dp, 7);
        assert_eq!(r, "OK\n0 flows deleted, 2 in table\n");
        let (r, _) = handle("del-groups\ngroup_id=1", &mut t, &mut dp, 8);
        assert_eq!(
            r,
            "OK\n1 groups deleted (1 rules that used them), 0 in table\n"
        );
        assert_eq!(t.len(), 1);
    }
}
