//! Start-up helpers shared by the `dpustack system` multi-engine tests
//! (system_raft, system_rebuild, system_soak, system_partition, system_fence): run the CLI, read the members
//! it started from DIR/system.txt, kill them all when the test ends.
#![allow(dead_code)] // each test binary uses a part

pub mod soak;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

pub fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("system")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

pub fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[derive(Clone)]
pub struct Member {
    pub addr: String,
    pub pid: i32,
    pub svc: String,
}

pub fn members(dir: &Path) -> Vec<Member> {
    std::fs::read_to_string(dir.join("system.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            Some(Member {
                addr: p.get(1)?.to_string(),
                pid: p.get(2)?.parse().ok()?,
                svc: p.get(3)?.to_string(),
            })
        })
        .collect()
}

/// Kills every engine the test started (also restarted ones) and removes the
/// directory (kept when `REBUILD_KEEP` is set, for a look after a failure).
pub struct Guard(pub PathBuf, pub Vec<std::process::Child>);
impl Drop for Guard {
    fn drop(&mut self) {
        for m in members(&self.0) {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(m.pid.to_string())
                .status();
        }
        for c in &mut self.1 {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::env::var_os("REBUILD_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `dpustack system start` of `engines` engine processes from `ip` on, the
/// engines' and the pool service's ports picked free, then `extra` arguments;
/// returns its output.
pub fn start_system(dir: &Path, ip: &str, engines: usize, extra: &[&str]) -> String {
    let port = free_port(ip).to_string();
    let svc_port = free_port(ip).to_string();
    let n = engines.to_string();
    let mut args = vec![
        "start",
        "--engines",
        &n,
        "--first-ip",
        ip,
        "--port",
        &port,
        "--svc-port",
        &svc_port,
    ];
    args.extend_from_slice(extra);
    ok(dir, &args)
}

/// kill -9 of engine process `pid`; returns its command line (read first), to
/// restart it the same way.
pub fn kill_9(pid: i32) -> Vec<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    args
}

pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind(format!("{ip}:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
