//! The node configuration as a file: TOML, every field defaulted to the embedded
//! defaults, one section per part of the node. The types are the node runtime's
//! (`node::config`); the CLI reads and prints them.

use anyhow::{Context, Result};
use std::path::Path;

pub use node::config::*;

/// Reading and printing the config as TOML.
pub trait ConfigFile: Sized {
    /// Embedded defaults, overlaid with `path` if given.
    fn load(path: Option<&Path>) -> Result<Self>;
    /// The effective config as TOML (`dpustack config show`).
    fn to_toml(&self) -> Result<String>;
}

impl ConfigFile for Config {
    fn load(path: Option<&Path>) -> Result<Config> {
        match path {
            None => Ok(Config::default()),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing config {}", p.display()))
            }
        }
    }

    fn to_toml(&self) -> Result<String> {
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
