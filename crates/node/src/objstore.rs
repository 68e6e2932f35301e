//! The node's object-store part: an `obj` engine (N targets, the VOS backend)
//! on the `[obj]` settings. `dpustack engine` runs the same engine by hand.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};

use crate::{Config, Error, Result};

/// The engine settings from `[obj]`, each overridable (the `engine` command's options).
pub fn engine_config(
    cfg: &Config,
    listen: Option<&str>,
    dir: Option<PathBuf>,
    targets: Option<usize>,
) -> Result<EngineConfig> {
    let o = &cfg.obj;
    let listen = listen.unwrap_or(&o.listen);
    let listen: SocketAddr = listen.parse().map_err(|e| Error::Context {
        what: format!("bad listen address {listen:?} (want IP:PORT)"),
        source: Box::new(e),
    })?;
    let rdma_listen = if o.rdma_listen.is_empty() {
        None
    } else {
        Some(parse_rdma(&o.rdma_listen)?)
    };
    Ok(EngineConfig {
        listen,
        data_dir: dir.unwrap_or_else(|| o.data_dir(cfg)),
        targets: targets.unwrap_or(o.targets),
        rdma_listen,
        aggregation: obj::engine::AggregationPolicy {
            interval: Some(secs(o.aggregate_interval_secs)).filter(|d| !d.is_zero()),
            delay: secs(o.aggregate_delay_secs),
        },
    })
}

/// An RDMA listen address, `IP:PORT` or `rdma://IP:PORT`.
pub fn parse_rdma(s: &str) -> Result<SocketAddr> {
    s.trim_start_matches("rdma://")
        .parse()
        .map_err(|e| Error::Context {
            what: format!("bad RDMA listen address {s:?} (want IP:PORT)"),
            source: Box::new(e),
        })
}

/// Starts an engine on the VOS backend, admitting at most `max_clients` RPC
/// clients (`[obj] max_clients`, `dpustack engine --max-clients`).
pub fn start_engine(ec: &EngineConfig, max_clients: usize) -> Result<Engine> {
    let limits = obj::engine::EngineLimits { max_clients };
    Engine::start_with(ec, Arc::new(VosBackend::default()), limits).map_err(|e| Error::Context {
        what: format!(
            "starting the object engine (data dir {})",
            ec.data_dir.display()
        ),
        source: Box::new(e),
    })
}

/// Seconds from the config (negative, NaN: 0; at most ~30 years).
fn secs(x: f64) -> Duration {
    Duration::try_from_secs_f64(x.clamp(0.0, 1e9)).unwrap_or_default()
}
