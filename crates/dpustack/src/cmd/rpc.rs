//! The management plane on the command line: `dpustack rpc METHOD` (a small
//! JSON-RPC client, SPDK's `rpc.py` without Python) and the RPC server options
//! of `up` and `nvmf serve` (`-r PATH`, `--json FILE`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use mgmt::methods::BdevKind;
use mgmt::{Mgmt, RpcServer, DEFAULT_SOCKET};

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Call a JSON-RPC method of a running node (SPDK's method names):
    /// `dpustack rpc bdev_get_bdevs`, `dpustack rpc bdev_malloc_create --param name=M0
    /// --param num_blocks=8192 --param block_size=512`, or params as JSON.
    Rpc(RpcArgs),
}

#[derive(Args, Debug)]
pub struct RpcArgs {
    /// Method name.
    pub method: String,
    /// Params as one JSON object (instead of --param).
    pub json: Option<String>,
    /// A param `key=value` (value parsed as JSON if it is, else a string); repeatable.
    #[arg(long = "param", short = 'p')]
    pub params: Vec<String>,
    /// RPC socket.
    #[arg(short = 's', long = "server", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Seconds to wait for the answer.
    #[arg(short = 't', long = "timeout", default_value_t = 60.0)]
    pub timeout: f64,
}

/// RPC server options of `up` and `nvmf serve`.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// JSON-RPC socket (as SPDK's apps' -r); default /var/tmp/dpustack.sock.
    #[arg(short = 'r', long = "rpc-socket")]
    pub rpc_socket: Option<PathBuf>,
    /// No JSON-RPC server.
    #[arg(long)]
    pub no_rpc: bool,
    /// SPDK JSON config to load at start (what `save_config` writes).
    #[arg(long = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Prometheus endpoint IP:PORT (`GET /metrics`), 0 = off; default `[metrics] listen`.
    #[arg(long = "metrics-listen", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// JSON-RPC clients served at once; more are closed at accept and counted.
    #[arg(long = "rpc-max-clients", default_value_t = mgmt::server::MAX_CONNECTIONS)]
    pub rpc_max_clients: usize,
    /// Bytes all malloc bdevs made over RPC may hold (default: half of MemTotal);
    /// bdev_malloc_create past it fails with ENOMEM.
    #[arg(long = "malloc-budget", value_name = "BYTES")]
    pub malloc_budget: Option<u64>,
}

/// The management plane of a running node: the JSON-RPC server and the metrics
/// endpoint (stop both before the node).
pub struct Management {
    pub rpc: Option<RpcServer>,
    pub metrics: Option<mgmt::MetricsServer>,
}

impl Management {
    pub fn stop(self) {
        if let Some(r) = self.rpc {
            r.stop();
        }
        if let Some(m) = self.metrics {
            m.stop();
        }
    }
}

/// Starts the JSON-RPC server and the metrics endpoint on the running target
/// (and the node's parts when `node` is given).
pub fn start_management(
    a: &ServerArgs,
    cfg: &node::Config,
    srv: Option<&nvmf::NvmfServer>,
    kinds: &[(String, BdevKind)],
    node: Option<&node::Node>,
) -> Result<Management> {
    let explicit = a.metrics_listen.is_some();
    let listen = a
        .metrics_listen
        .clone()
        .unwrap_or_else(|| cfg.metrics.listen.clone());
    let maddr = mgmt::metrics::parse_listen(&listen).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let (Some(_), Some(s)) = (maddr, srv) {
        s.tgt().set_io_stats(true);
    }
    let m = Arc::new(Mgmt::new());
    if let Some(n) = node {
        m.add_methods(
            node::manage::NODE_METHODS,
            Arc::new(node::manage::NodeMethods::new(n, cfg)),
        );
    }
    let rpc = start_server(a, srv, kinds, m.clone())?;
    let metrics = match maddr {
        None => None,
        Some(addr) => {
            let reg = mgmt::Registry::new();
            reg.add(m.clone());
            if let Some(n) = node {
                for c in node::manage::collectors(n, cfg) {
                    reg.add(c);
                }
            }
            match mgmt::MetricsServer::start(addr, reg) {
                Ok(s) => {
                    println!("metrics on http://{}/metrics", s.addr());
                    Some(s)
                }
                Err(e) if !explicit => {
                    eprintln!(
                        "WARNING: metrics endpoint off: {} (set [metrics] listen or --metrics-listen)",
                        node::error_chain(&e)
                    );
                    None
                }
                Err(e) => return Err(e).with_context(|| format!("metrics endpoint on {addr}")),
            }
        }
    };
    Ok(Management { rpc, metrics })
}

pub fn run(c: Cmd) -> Result<()> {
    let Cmd::Rpc(a) = c;
    let params = build_params(a.json.as_deref(), &a.params)?;
    let mut client = mgmt::client::Client::connect(&a.socket, Duration::from_secs_f64(a.timeout))?;
    match client.call(&a.method, params)? {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }
        Err(e) => {
            let req = serde_json::json!({"method": a.method});
            eprintln!("request: {req}");
            bail!("JSON-RPC error {}: {}", e.code, e.message)
        }
    }
}

fn build_params(json: Option<&str>, kv: &[String]) -> Result<Option<Value>> {
    if let Some(j) = json {
        if !kv.is_empty() {
            bail!("give params either as JSON or as --param k=v, not both");
        }
        let v: Value = serde_json::from_str(j).context("params are not valid JSON")?;
        if !v.is_object() {
            bail!("params must be a JSON object");
        }
        return Ok(Some(v));
    }
    if kv.is_empty() {
        return Ok(None);
    }
    let mut m = Map::new();
    for p in kv {
        let (k, v) = p
            .split_once('=')
            .with_context(|| format!("--param {p:?}: want key=value"))?;
        let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        m.insert(k.to_string(), v);
    }
    Ok(Some(Value::Object(m)))
}

/// Starts the RPC server on the running target (and loads `--json`). With the
/// default socket in use by another node the server stays off, loudly; with an
/// explicit `-r` that is an error.
fn start_server(
    a: &ServerArgs,
    srv: Option<&nvmf::NvmfServer>,
    kinds: &[(String, BdevKind)],
    m: Arc<Mgmt>,
) -> Result<Option<RpcServer>> {
    if let Some(s) = srv {
        m.attach_nvmf(s.tgt().clone(), s.listener_handle(), kinds)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if let Some(b) = a.malloc_budget {
        m.set_malloc_budget(b);
    }
    if let Some(f) = &a.json {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let cfg: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", f.display()))?;
        let n = m
            .load_config(&cfg)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        println!("loaded {} ({n} methods)", f.display());
    }
    if a.no_rpc {
        return Ok(None);
    }
    let path = a
        .rpc_socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    match RpcServer::start_with(&path, m, a.rpc_max_clients) {
        Ok(s) => {
            println!("JSON-RPC on {}", path.display());
            Ok(Some(s))
        }
        Err(e) if a.rpc_socket.is_none() => {
            eprintln!(
                "WARNING: JSON-RPC server off: {} (use -r PATH)",
                node::error_chain(&e)
            );
            Ok(None)
        }
        Err(e) => {
            Err(e).with_context(|| format!("starting the JSON-RPC server on {}", path.display()))
        }
    }
}

/// The bdev kinds of a `bdev::spec` text (for `save_config`).
pub fn kind_of_spec(spec: &str) -> BdevKind {
    match spec.split(':').next() {
        Some("malloc") => BdevKind::Malloc,
        Some("null") => BdevKind::Null,
        _ => BdevKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_from_kv_and_json() {
        let p = build_params(
            None,
            &["name=M0".into(), "num_blocks=8".into(), "x=true".into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(p["name"], "M0");
        assert_eq!(p["num_blocks"], 8);
        assert_eq!(p["x"], true);
        assert!(build_params(Some("[1]"), &[]).is_err());
        assert!(build_params(Some("{}"), &["a=1".into()]).is_err());
        assert_eq!(build_params(None, &[]).unwrap(), None);
    }
}
