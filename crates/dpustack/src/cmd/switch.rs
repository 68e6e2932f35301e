//! Flow table / megaflow switch (issue #7): switch trace, run, dump-flows, add/del/replace-flows.

use anyhow::Result;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[switch]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    pub enabled: bool,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// OpenFlow table + megaflow datapath: trace, run, dump-flows, add-flows, del-flows, replace-flows.
    Switch {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::Switch { .. } => Err(not_implemented("switch", 7)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.switch.enabled {
        return Ok(Part::Disabled { name: "switch" });
    }
    Ok(Part::not_yet(
        "switch",
        Some(7),
        "flow table and megaflow datapath",
    ))
}

/// `dpustack bench flow`.
pub fn bench(_args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    Err(not_implemented("bench flow", 7))
}
