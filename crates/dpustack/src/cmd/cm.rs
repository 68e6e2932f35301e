//! RDMA CM tools (issue #4): rping, cm-server/cm-client, ucmatose, udaddy, cmtime.

use anyhow::Result;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[cm]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CmConfig {
    pub enabled: bool,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// rping-compatible RDMA CM ping (-s server, -c client).
    Rping {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The rdma_server side of the librdmacm simple exchange.
    CmServer {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The rdma_client side of the librdmacm simple exchange.
    CmClient {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// librdmacm ucmatose-compatible connection test.
    Ucmatose {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// librdmacm udaddy-compatible UD test.
    Udaddy {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// cmtime-like timing of each CM step.
    Cmtime {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::Rping { .. } => Err(not_implemented("rping", 4)),
        Cmd::CmServer { .. } => Err(not_implemented("cm-server", 4)),
        Cmd::CmClient { .. } => Err(not_implemented("cm-client", 4)),
        Cmd::Ucmatose { .. } => Err(not_implemented("ucmatose", 4)),
        Cmd::Udaddy { .. } => Err(not_implemented("udaddy", 4)),
        Cmd::Cmtime { .. } => Err(not_implemented("cmtime", 4)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.cm.enabled {
        return Ok(Part::Disabled { name: "cm" });
    }
    Ok(Part::not_yet(
        "cm",
        Some(4),
        "RDMA connection manager (QP1 CM MADs)",
    ))
}

/// `dpustack bench cm`.
pub fn bench(_args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    Err(not_implemented("bench cm", 4))
}
