//! NVMe-oF target and host tools (issue #5): nvmf serve, nvme discover/connect/identify/read/write/perf.

use anyhow::Result;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[nvmf]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmfConfig {
    pub enabled: bool,
}

impl Default for NvmfConfig {
    fn default() -> Self {
        NvmfConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// NVMe-oF target: `nvmf serve --listen tcp://IP:PORT --bdev malloc:64M`.
    Nvmf {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// NVMe-oF host: discover, connect, identify, read, write, perf.
    Nvme {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::Nvmf { .. } => Err(not_implemented("nvmf", 5)),
        Cmd::Nvme { .. } => Err(not_implemented("nvme", 5)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.nvmf.enabled {
        return Ok(Part::Disabled { name: "nvmf" });
    }
    Ok(Part::not_yet(
        "nvmf",
        Some(5),
        "NVMe-oF/TCP target (malloc namespace on 127.0.0.1:4420, discovery on 8009)",
    ))
}

/// `dpustack bench nvmf`.
pub fn bench(_args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    Err(not_implemented("bench nvmf", 5))
}
