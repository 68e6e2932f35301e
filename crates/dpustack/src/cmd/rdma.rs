//! RDMA verbs tools over the software RoCEv2 provider (issue #3): rc-pingpong, ud-pingpong, perf.

use anyhow::Result;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[rdma]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaConfig {
    pub enabled: bool,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// ibv_rc_pingpong-compatible RC ping-pong (server when no host is given).
    RcPingpong {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// ibv_ud_pingpong-compatible UD ping-pong.
    UdPingpong {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// perftest-style bandwidth/latency (write-bw, send-bw, read-bw, write-lat, send-lat).
    Perf {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::RcPingpong { .. } => Err(not_implemented("rc-pingpong", 3)),
        Cmd::UdPingpong { .. } => Err(not_implemented("ud-pingpong", 3)),
        Cmd::Perf { .. } => Err(not_implemented("perf", 3)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.rdma.enabled {
        return Ok(Part::Disabled { name: "rdma" });
    }
    Ok(Part::not_yet(
        "rdma",
        Some(3),
        "software RoCEv2 device (verbs provider)",
    ))
}

/// `dpustack bench roce`.
pub fn bench(_args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    Err(not_implemented("bench roce", 3))
}
