//! Network-namespace helpers shared by the switch's root-only live tests
//! (normal_netns, openflow_controller): run a command, create hosts in namespaces on
//! veths whose switch ends stay in the test's namespace, delete them on drop.

use std::process::Command;

/// Runs `args`; true when it exits 0.
pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `args`; panics naming the command when it fails.
pub fn must(args: &[&str]) {
    assert!(sh(args), "failed: {}", args.join(" "));
}

/// `args` run inside namespace `ns`.
pub fn ns_exec<'a>(ns: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    v
}

/// Namespaces created by a test, deleted (with their veths) when dropped.
pub struct Topo {
    pub ns: Vec<String>,
}

impl Drop for Topo {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

/// Creates namespace `ns` holding a host whose `eth0` is the peer of veth `sw_if` (left
/// up in the test's namespace for the switch), both without IPv6 (no router or neighbour
/// solicitations to disturb the tests' counts and tables), `lo` and `eth0` up.
pub fn add_host(ns: &str, sw_if: &str) {
    must(&["ip", "netns", "add", ns]);
    must(&[
        "ip", "link", "add", sw_if, "type", "veth", "peer", "name", "eth0", "netns", ns,
    ]);
    must(&["ip", "link", "set", sw_if, "up"]);
    must(&[
        "sysctl",
        "-q",
        "-w",
        &format!("net.ipv6.conf.{sw_if}.disable_ipv6=1"),
    ]);
    must(&ns_exec(
        ns,
        &["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"],
    ));
    must(&ns_exec(
        ns,
        &["sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"],
    ));
    must(&ns_exec(ns, &["ip", "link", "set", "lo", "up"]));
    must(&ns_exec(ns, &["ip", "link", "set", "eth0", "up"]));
}
