//! The node configuration: TOML, every field defaulted to the embedded defaults,
//! one section per area (each section's type lives in that area's `cmd` module).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::cmd;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub node: NodeConfig,
    pub rdma: cmd::rdma::RdmaConfig,
    pub cm: cmd::cm::CmConfig,
    pub nvmf: cmd::nvmf::NvmfConfig,
    pub tse: cmd::tse::TseConfig,
    pub switch: cmd::switch::SwitchConfig,
    pub obj: cmd::obj::ObjConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the node keeps its data (bdev files, object store, logs).
    pub data_dir: PathBuf,
    /// The address services listen on unless their section says otherwise.
    pub listen_ip: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        NodeConfig {
            data_dir: base.join("dpustack"),
            listen_ip: "127.0.0.1".into(),
        }
    }
}

impl Config {
    /// Embedded defaults, overlaid with `path` if given.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        match path {
            None => Ok(Config::default()),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing config {}", p.display()))
            }
        }
    }

    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string_pretty(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let c = Config::default();
        let text = c.to_toml().unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.to_toml().unwrap(), text);
    }

    #[test]
    fn partial_file_keeps_other_defaults() {
        let c: Config = toml::from_str("[node]\nlisten_ip = \"127.0.0.9\"\n").unwrap();
        assert_eq!(c.node.listen_ip, "127.0.0.9");
        assert_eq!(c.node.data_dir, NodeConfig::default().data_dir);
    }

    #[test]
    fn unknown_keys_are_errors() {
        assert!(toml::from_str::<Config>("[node]\nlisten_ipp = \"x\"\n").is_err());
    }
}
