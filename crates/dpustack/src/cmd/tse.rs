//! Task Scheduler Engine tools (issue #6).

use anyhow::Result;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[tse]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TseConfig {
    pub enabled: bool,
}

impl Default for TseConfig {
    fn default() -> Self {
        TseConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run a demo DAG of tasks on the TSE and print the order they ran in.
    TseDemo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::TseDemo { .. } => Err(not_implemented("tse-demo", 6)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.tse.enabled {
        return Ok(Part::Disabled { name: "tse" });
    }
    Ok(Part::not_yet(
        "tse",
        Some(6),
        "task scheduler engine and event queues",
    ))
}

/// `dpustack bench tse`.
pub fn bench(_args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    Err(not_implemented("bench tse", 6))
}
