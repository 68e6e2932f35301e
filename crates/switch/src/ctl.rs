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
                let mut s = String::new();
                for l in table.dump_rules(now) {
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
                    let m = flow::ofctl::parse_match(payload.trim()).map_err(|e| format!("{e}"))?;
                    table.del_matching(&m)
                };
                dp.flush();
                format!("{n} flows deleted, {} in table\n", table.len())
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
}
