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
