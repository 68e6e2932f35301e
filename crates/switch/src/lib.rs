//! # switch — the live switch over `flow`'s datapath
//!
//! Owns: the switch runtime ([`run`] on the caller's thread, [`Switch`] on its
//! own): ports on Linux interfaces (AF_PACKET) or pcap files ([`port`]), the
//! datapath cache in front of the OpenFlow table, hardware offload to an emulated
//! NIC and the revalidator every 0.5 s and after each table change ([`offload`]:
//! settings, `offload-stats`, `config`), and its control commands ([`control`]:
//! dump-flows, dump-rules, add/del/replace-flows, add/mod/del/dump-groups,
//! dump-group-stats, fdb-show/flush, port-down/port-up, stats, offload-stats, config,
//! stop), applied by the loop and sent to it in-process through a
//! [`control::Control`] (other processes reach them as the node's
//! `dpustack_switch_*` JSON-RPC methods, node::manage). [`trace`] parses the packet
//! lines of `switch trace`. The OpenFlow 1.3 channel (listeners, controllers):
//! [`openflow`] (connection state machine), [`openflow_switch`] (messages applied to
//! the table), [`openflow_conv`] (OXM/actions <-> rules), [`openflow_io`] (sockets).
//!
//! Does not own: classification, translation, megaflows (`flow`); argument
//! parsing (the CLI). The loop's own lines ("switch running", expired rules,
//! "switch stopped") go to the `std::io::Write` it is given.
//!
//! Depends on `flow` (with its `driver` feature: AF_PACKET, pcap, poll) and
//! `openflow` (the wire format).

#![forbid(unsafe_code)]

pub mod control;
pub mod offload;
pub mod openflow;
pub mod openflow_conv;
pub mod openflow_io;
pub mod openflow_switch;
pub mod port;
mod runtime;
pub mod trace;

pub use offload::DatapathOpts;
pub use runtime::{run, StopHandle, Switch, SwitchOpts};

/// Errors of the switch.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A file or socket could not be opened (`what` says which).
    #[error("{what}")]
    Open {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A bad port spec, flow file or packet line.
    #[error("{0}")]
    Config(String),
    /// The running switch refused a control command.
    #[error("{0}")]
    Remote(String),
    /// No switch loop runs behind a control handle (stopped, or never started).
    #[error("the switch is not running")]
    Stopped,
    /// The switch loop did not answer a control command in time.
    #[error("the switch did not answer within {}s", control::REPLY_TIMEOUT.as_secs())]
    Timeout,
    /// The switch thread ended before it was ready.
    #[error("switch thread ended")]
    ThreadEnded,
}

/// Result of the switch.
pub type Result<T> = std::result::Result<T, Error>;

/// Reads a flow file (ovs-ofctl add-flows syntax).
pub fn read_flows(p: &std::path::Path) -> Result<Vec<flow::Rule>> {
    let t = std::fs::read_to_string(p).map_err(|source| Error::Open {
        what: format!("reading {}", p.display()),
        source,
    })?;
    flow::parse_flows(&t).map_err(|e| Error::Config(format!("{}: {e}", p.display())))
}

/// Reads a groups file (ovs-ofctl add-groups syntax).
pub fn read_groups(p: &std::path::Path) -> Result<Vec<flow::Group>> {
    let t = std::fs::read_to_string(p).map_err(|source| Error::Open {
        what: format!("reading {}", p.display()),
        source,
    })?;
    flow::parse_groups(&t).map_err(|e| Error::Config(format!("{}: {e}", p.display())))
}

/// Sets up NORMAL's bridge: every port of `table.ports` (in number order: the flood
/// order) as a trunk of all VLANs unless `vlans` (`N:tag=V;trunks=A,B;vlan_mode=M`)
/// configures it; MAC aging and table size.
pub fn configure_bridge(
    table: &mut flow::FlowTable,
    vlans: &[String],
    mac_aging_s: u64,
    mac_table_size: usize,
) -> Result<()> {
    let ports: Vec<u32> = table.ports.iter().flatten().copied().collect();
    for p in &ports {
        table.bridge.set_port(*p, flow::normal::PortVlan::default());
    }
    for v in vlans {
        let (p, cfg) = flow::normal::parse_port_vlan(v).map_err(Error::Config)?;
        if table.ports.is_some() && !ports.contains(&p) {
            return Err(Error::Config(format!(
                "--vlan {v}: port {p} is not a port of the switch"
            )));
        }
        table.bridge.set_port(p, cfg);
    }
    if mac_table_size == 0 {
        return Err(Error::Config("MAC table size must be at least 1".into()));
    }
    let mut ml = table.bridge.ml.borrow_mut();
    ml.idle_ms = mac_aging_s.saturating_mul(1000);
    ml.max_entries = mac_table_size;
    Ok(())
}

/// Builds a table from rules and groups, checking that every group a rule or bucket
/// names exists (as OVS refuses such a flow or group) and that each select group can
/// be run (see [`flow::group::GroupError`]).
pub fn build_table(rules: Vec<flow::Rule>, groups: Vec<flow::Group>) -> Result<flow::FlowTable> {
    let mut t = flow::FlowTable::new();
    for g in groups {
        t.add_group(g).map_err(|e| Error::Config(e.to_string()))?;
    }
    for r in rules {
        t.add(r);
    }
    t.check_groups().map_err(Error::Config)?;
    Ok(t)
}
