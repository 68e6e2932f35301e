//! Object store tools (issue #12): `dpustack engine`, `pool`, `cont`, `obj`,
//! `kv`, `bench obj` (the object store's part of `dpustack up` is `node::objstore`).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use obj::client::{Client, ContHandle, Error as ObjError, PoolHandle};
use obj::engine::EngineConfig;
use obj::rpc::Status;
use obj::types::{AKey, Anchor, DKey, Epoch, Iod, ObjClass, ObjType, ObjectId, SgList};

use crate::config::Config;
use node::objstore::{engine_config, parse_rdma, start_engine};

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run an object-store engine (N targets) until Ctrl-C.
    Engine(EngineArgs),
    /// Pools: create, list, query, destroy.
    Pool {
        #[command(flatten)]
        at: At,
        #[command(subcommand)]
        cmd: PoolCmd,
    },
    /// Containers: create, list, destroy, snapshots.
    Cont {
        #[command(flatten)]
        at: At,
        #[command(subcommand)]
        cmd: ContCmd,
    },
    /// Objects: put, get, list, punch (dkey/akey single values).
    Obj {
        #[command(flatten)]
        at: At,
        #[command(subcommand)]
        cmd: ObjCmd,
    },
    /// Key-value objects (daos_kv): put, get, remove, list.
    Kv {
        #[command(flatten)]
        at: At,
        #[command(subcommand)]
        cmd: KvCmd,
    },
}

#[derive(Args, Debug)]
pub struct EngineArgs {
    /// Listen address (default: `[obj] listen`).
    #[arg(long)]
    pub listen: Option<String>,
    /// Data directory (default: `[obj] data_dir`, else `<node data_dir>/obj`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Targets (poller threads; default `[obj] targets`, 0 = one per core).
    #[arg(long)]
    pub targets: Option<usize>,
    /// Stop by itself after this many seconds.
    #[arg(long = "for", value_name = "SECS")]
    pub for_secs: Option<f64>,
    /// Also serve RPC over RDMA (soft RoCE device on this IP, RDMA CM on
    /// this port; default `[obj] rdma_listen`).
    #[arg(long, value_name = "IP:PORT")]
    pub rdma_listen: Option<String>,
    /// Connected RPC clients admitted (TCP + RDMA; default `[obj]
    /// max_clients`, 4096); past it a connection is closed at accept and counted.
    #[arg(long, value_name = "N")]
    pub max_clients: Option<usize>,
    /// Also run a pool-service replica (Raft) with this id; its store is
    /// `pool_svc.redb` in the data directory.
    #[arg(long, requires = "pool_svc_members")]
    pub pool_svc_id: Option<u64>,
    /// The pool-service replicas: `ID=IP:PORT,...` (this one's own included;
    /// it listens on its own entry).
    #[arg(long)]
    pub pool_svc_members: Option<String>,
    /// Make the pool service's first membership if this replica is pristine
    /// (one replica of a new group).
    #[arg(long)]
    pub pool_svc_init: bool,
    /// The engines the pool service watches when it leads: `RANK=IP:PORT,...`
    /// (rank = fault domain); dead ones are marked DOWN, then EXCLUDED.
    #[arg(long)]
    pub pool_svc_engines: Option<String>,
    /// Milliseconds an engine stays DOWN (and dead) before the pool service
    /// marks it EXCLUDED; 0 = never.
    #[arg(long, default_value_t = 5000)]
    pub pool_svc_exclude_after_ms: u64,
    /// Rebuild (after EXCLUDED) and reintegration (of returning engines) by
    /// the pool-service leader: values copied per second at most (0 =
    /// unlimited).
    #[arg(long, default_value_t = 0)]
    pub pool_svc_rebuild_rate: u64,
    /// No rebuild and no reintegration (a DOWN/EXCLUDED engine stays out).
    #[arg(long)]
    pub pool_svc_no_rebuild: bool,
    /// The engine's lease on the pool map, in milliseconds (the fence):
    /// versioned object I/O is served only within this long of a
    /// pool-service leader's answer to the engine's lease request, refused
    /// as a stale map otherwise until the map is fetched again; 0 = no fence.
    #[arg(long, default_value_t = 450)]
    pub pool_svc_lease_ms: u64,
    /// Reintegrate a DOWN engine that answers again at once (DOWN → UP →
    /// UP-IN) instead of waiting for EXCLUDED; on by default
    /// (`--pool-svc-return-from-down=false`: wait; docs/obj-dist.md).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub pool_svc_return_from_down: bool,
    /// Accept network-partition injection through the pool service
    /// (`dpustack system fault`; tests only): links to/from other ranks cut.
    #[arg(long, requires = "pool_svc_id")]
    pub fault_injection: bool,
}

/// Which engine the tools talk to.
#[derive(Args, Debug, Clone)]
pub struct At {
    /// Engine address (default: `[obj] listen`); `rdma://IP:PORT` for RPC
    /// over RDMA (with --rdma-src).
    #[arg(short = 'a', long = "engine", env = "DPUSTACK_ENGINE", global = true)]
    pub engine: Option<String>,
    /// Local IP of the soft RoCE device for `rdma://` engines (UDP 4791 of
    /// that address must be free).
    #[arg(long, env = "DPUSTACK_RDMA_SRC", global = true)]
    pub rdma_src: Option<String>,
    /// A system of several engines instead of one engine: the directory of
    /// `dpustack system start` (its engines and pool service; objects
    /// placed and replicated over the engines). Wins over --engine.
    #[arg(long, value_name = "DIR", env = "DPUSTACK_SYSTEM", global = true)]
    pub system: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum PoolCmd {
    /// Create a pool of SIZE bytes (K/M/G suffixes) over all targets.
    Create {
        label: String,
        /// The pool's size (against a system: all engines together, split
        /// evenly).
        #[arg(long, default_value = "1G")]
        size: String,
        /// Against a system: the pool's default object class (S1, SX, RP_2,
        /// RP_3 or a full class name).
        #[arg(long)]
        class: Option<String>,
        /// Against a system: replicas per object (must agree with --class;
        /// alone it picks S1 or RP_n).
        #[arg(long)]
        replicas: Option<u32>,
    },
    List,
    /// Show a pool (by label or UUID).
    Query {
        pool: String,
    },
    /// Destroy a pool (refused while connected unless --force).
    Destroy {
        pool: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ContCmd {
    /// Create a container with a label and KEY=VALUE properties.
    Create {
        pool: String,
        label: String,
        #[arg(long = "prop", value_name = "KEY=VALUE")]
        props: Vec<String>,
    },
    List {
        pool: String,
    },
    /// Destroy a container (refused while open unless --force).
    Destroy {
        pool: String,
        cont: String,
        #[arg(long)]
        force: bool,
    },
    /// Show a container: its properties and, against a system, its status
    /// (`HEALTHY`, or `UNCLEAN`: redundancy lost, I/O refused with -DER_RF).
    Query {
        pool: String,
        cont: String,
    },
    /// Set container properties (DAOS's `daos cont set-prop`), against a
    /// system: `--properties status:healthy` clears a redundancy-lost
    /// (`UNCLEAN`) container, accepting the loss; `rf:N` sets its
    /// redundancy factor.
    SetProp {
        pool: String,
        cont: String,
        /// `KEY:VALUE[,KEY:VALUE...]` (DAOS's syntax; `KEY=VALUE` too).
        #[arg(long)]
        properties: String,
    },
    /// Snapshots: create (prints the epoch), list, destroy EPOCH.
    Snap {
        #[command(subcommand)]
        cmd: SnapCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapCmd {
    Create {
        pool: String,
        cont: String,
    },
    List {
        pool: String,
        cont: String,
    },
    Destroy {
        pool: String,
        cont: String,
        epoch: String,
    },
}

/// An object: `HI.LO` (hex, class bits included) or a number (the low
/// bits; type and class are filled in from --class).
#[derive(Args, Debug, Clone)]
pub struct ObjRef {
    pub pool: String,
    pub cont: String,
    pub oid: String,
    /// Object class for numeric OIDs (S1, SX, RP_2G1, EC_4P2GX, ...);
    /// default S1, against a system the pool's class (`pool create
    /// --class`), else RP_2G1 (S1 on a one-engine system).
    #[arg(long)]
    pub class: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ObjCmd {
    /// Write a single value under DKEY/AKEY from FILE (default: stdin).
    Put {
        #[command(flatten)]
        o: ObjRef,
        dkey: String,
        akey: String,
        file: Option<PathBuf>,
    },
    /// Read the single value under DKEY/AKEY to FILE (default: stdout).
    Get {
        #[command(flatten)]
        o: ObjRef,
        dkey: String,
        akey: String,
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Read at this epoch (a snapshot), hex or decimal.
        #[arg(long)]
        epoch: Option<String>,
    },
    /// List the object's dkeys, or the akeys of DKEY.
    List {
        #[command(flatten)]
        o: ObjRef,
        dkey: Option<String>,
        #[arg(long)]
        epoch: Option<String>,
    },
    /// Punch the object, a dkey, or an akey of a dkey.
    Punch {
        #[command(flatten)]
        o: ObjRef,
        dkey: Option<String>,
        akey: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum KvCmd {
    /// Set KEY to the contents of FILE (default: stdin).
    Put {
        #[command(flatten)]
        o: ObjRef,
        key: String,
        file: Option<PathBuf>,
    },
    /// Print KEY's value (to FILE with --out).
    Get {
        #[command(flatten)]
        o: ObjRef,
        key: String,
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    Remove {
        #[command(flatten)]
        o: ObjRef,
        key: String,
    },
    List {
        #[command(flatten)]
        o: ObjRef,
    },
}

/// A pool/cont/obj/kv command against one engine (`cmd::sysobj::run` sends the
/// `--system` ones to a system first).
pub fn run(cmd: Cmd, cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::Engine(a) => engine(&a, cfg),
        Cmd::Pool { at, cmd } => pool(cmd, &connect(&at, cfg)?),
        Cmd::Cont { at, cmd } => cont(cmd, &connect(&at, cfg)?),
        Cmd::Obj { at, cmd } => object(cmd, &connect(&at, cfg)?),
        Cmd::Kv { at, cmd } => kv(cmd, &connect(&at, cfg)?),
    }
}

/// glibc malloc for an engine's buffers: values and frames of up to 16 MiB
/// come from the heap and freed memory is kept (up to 64 MiB at a heap's top)
/// instead of a fresh mmap per large buffer and a munmap/trim at its free —
/// with the defaults every 1 MiB value (ior-easy) cost 256 page faults
/// (zeroed pages) and an unmap in the client and the engine (perf: 15 % of the
/// bench client's samples in clear_page/page faults/unmap_page_range).
/// Fixed thresholds also turn off glibc's dynamic threshold.
pub(crate) fn tune_malloc() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only changes the allocator's tuning parameters; it is
        // called before the engine's threads start allocating large buffers
        // and is thread-safe in glibc.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20) == 1
        };
        if !ok {
            tracing::warn!("mallopt refused the engine's malloc thresholds: large buffers stay mmap'd per allocation");
        }
    }
}

fn engine(a: &EngineArgs, cfg: &Config) -> Result<()> {
    tune_malloc();
    let mut ec = engine_config(cfg, a.listen.as_deref(), a.data_dir.clone(), a.targets)?;
    if let Some(r) = &a.rdma_listen {
        ec.rdma_listen = Some(parse_rdma(r)?);
    }
    let eng = start_engine(&ec, a.max_clients.unwrap_or(cfg.obj.max_clients))?;
    println!(
        "object engine on {}{} — {} target(s), data dir {}; Ctrl-C to stop",
        eng.addr(),
        ec.rdma_listen
            .map_or(String::new(), |r| format!(" and rdma://{r}")),
        eng.targets(),
        ec.data_dir.display()
    );
    let replica = match a.pool_svc_id {
        Some(id) => {
            let members =
                poolsvc::runner::parse_members(a.pool_svc_members.as_deref().unwrap_or(""))
                    .map_err(|e| anyhow!("--pool-svc-members: {e}"))?;
            let listen = members
                .get(&id)
                .cloned()
                .with_context(|| format!("--pool-svc-members has no replica {id}"))?;
            let cfg = poolsvc::runner::ReplicaConfig {
                id,
                listen: listen.clone(),
                members,
                initialize: a.pool_svc_init,
                heartbeat_ms: 30,
                election_min_ms: 150,
                election_max_ms: 450,
                engines: match &a.pool_svc_engines {
                    Some(e) => poolsvc::runner::parse_members(e)
                        .map_err(|e| anyhow!("--pool-svc-engines: {e}"))?,
                    None => Default::default(),
                },
                monitor: poolsvc::health::MonitorConfig {
                    detector: obj::membership::DetectorConfig::default(),
                    exclude_after: (a.pool_svc_exclude_after_ms > 0)
                        .then(|| Duration::from_millis(a.pool_svc_exclude_after_ms)),
                },
                rebuild: poolsvc::rebuild::RebuildConfig {
                    enabled: !a.pool_svc_no_rebuild,
                    rate: a.pool_svc_rebuild_rate,
                    return_from_down: a.pool_svc_return_from_down,
                    ..Default::default()
                },
                // the engine refuses object I/O sent with an older pool map
                map_versions: Some(eng.map_versions()),
                lease: (a.pool_svc_lease_ms > 0)
                    .then(|| Duration::from_millis(a.pool_svc_lease_ms)),
            };
            if a.fault_injection {
                // each rank's object-RPC and pool-service addresses
                let mut addrs: std::collections::BTreeMap<u64, Vec<String>> = cfg
                    .members
                    .iter()
                    .map(|(r, s)| (*r, vec![s.clone()]))
                    .collect();
                for (r, e) in &cfg.engines {
                    addrs.entry(*r).or_default().push(e.clone());
                }
                obj::fault::install(addrs).map_err(|e| anyhow!("--fault-injection: {e}"))?;
            }
            let r = poolsvc::runner::Replica::spawn(cfg, &ec.data_dir.join("pool_svc.redb"))
                .context("starting the pool-service replica")?;
            println!("pool-service replica {id} on {listen}");
            Some(r)
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))?;
    }
    let deadline = a
        .for_secs
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    while !stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(r) = replica {
        r.stop();
    }
    eng.stop();
    println!("engine stopped");
    Ok(())
}

fn connect(at: &At, cfg: &Config) -> Result<Client> {
    let addr = at.engine.clone().unwrap_or_else(|| cfg.obj.listen.clone());
    if let Some(r) = addr.strip_prefix("rdma://") {
        let server: SocketAddr = r
            .parse()
            .with_context(|| format!("bad engine address {addr:?}"))?;
        let src = at.rdma_src.as_deref().context(
            "an rdma:// engine needs --rdma-src IP (the local soft RoCE device's address)",
        )?;
        return Client::connect_rdma(server, src).map_err(|e| explain(e, "engine"));
    }
    Client::connect(&addr).map_err(|e| explain(e, "engine"))
}

/// A clear message for an error about `what`.
pub(crate) fn explain(e: ObjError, what: &str) -> anyhow::Error {
    match &e {
        ObjError::Unreachable { .. } => {
            anyhow!("{e} (is `dpustack engine` running there? set --engine / DPUSTACK_ENGINE)")
        }
        ObjError::Engine(Status::NonExist) => anyhow!("{what}: does not exist"),
        ObjError::Engine(Status::Exists) => anyhow!("{what}: already exists"),
        ObjError::Engine(Status::NoSpace) => anyhow!("{what}: out of space in the pool"),
        ObjError::Engine(Status::Busy) => {
            anyhow!("{what}: still in use (open handles or connections; --force to override)")
        }
        ObjError::Engine(Status::RecTooBig) | ObjError::ValueTooLarge { .. } => {
            anyhow!("{what}: value too large ({e})")
        }
        ObjError::Engine(Status::NoHandle) => {
            anyhow!("{what}: unknown handle (closed, or the engine restarted)")
        }
        ObjError::Oid(_) => anyhow!("bad OID or class: {e}"),
        _ => anyhow!("{what}: {e}"),
    }
}

pub(crate) fn show_pool(p: &obj::rpc::msg::PoolInfo) {
    println!(
        "{}  {:<16} size {:>12}  used {:>12}  targets {}  containers {}",
        obj::types::Uuid::from_bytes(p.uuid),
        p.label,
        p.size,
        p.used,
        p.targets,
        p.conts
    );
}

fn pool(cmd: PoolCmd, c: &Client) -> Result<()> {
    match cmd {
        PoolCmd::Create {
            label,
            size,
            class,
            replicas,
        } => {
            if class.is_some() || replicas.is_some() {
                bail!("--class / --replicas place objects over several engines: use --system DIR (one engine holds every object whole)");
            }
            let bytes =
                bdev::spec::parse_size(&size).with_context(|| format!("bad size {size:?}"))?;
            let p = c
                .pool_create(&label, bytes, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("pool {label:?}")))?;
            show_pool(&p);
        }
        PoolCmd::List => {
            let ps = c
                .pool_list(None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, "pools"))?;
            if ps.is_empty() {
                println!("no pools");
            }
            for p in &ps {
                show_pool(p);
            }
        }
        PoolCmd::Query { pool } => {
            let p = c
                .pool_query(&pool, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("pool {pool:?}")))?;
            show_pool(&p);
        }
        PoolCmd::Destroy { pool, force } => {
            c.pool_destroy(&pool, force, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("pool {pool:?}")))?;
            println!("pool {pool} destroyed");
        }
    }
    Ok(())
}

fn pool_connect(c: &Client, pool: &str) -> Result<PoolHandle> {
    c.pool_connect(pool, None)
        .and_then(|p| p.get())
        .map_err(|e| explain(e, &format!("pool {pool:?}")))
}

fn cont_open(c: &Client, pool: &str, cont: &str) -> Result<ContHandle> {
    let poh = pool_connect(c, pool)?;
    c.cont_open(&poh, cont, None)
        .and_then(|p| p.get())
        .map_err(|e| explain(e, &format!("container {cont:?} in pool {pool:?}")))
}

pub(crate) fn parse_epoch(s: &str) -> Result<Epoch> {
    let v = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map(Epoch).with_context(|| format!("bad epoch {s:?}"))
}

fn cont(cmd: ContCmd, c: &Client) -> Result<()> {
    match cmd {
        ContCmd::Create { pool, label, props } => {
            let poh = pool_connect(c, &pool)?;
            let mut kv = Vec::new();
            for p in &props {
                let (k, v) = p
                    .split_once('=')
                    .with_context(|| format!("property {p:?} is not KEY=VALUE"))?;
                kv.push((k, v));
            }
            let ci = c
                .cont_create(&poh, &label, &kv, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("container {label:?}")))?;
            println!("{}  {}", obj::types::Uuid::from_bytes(ci.uuid), ci.label);
        }
        ContCmd::List { pool } => {
            let poh = pool_connect(c, &pool)?;
            let cs = c
                .cont_list(&poh, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, "containers"))?;
            if cs.is_empty() {
                println!("no containers");
            }
            for ci in cs {
                let props: Vec<String> = ci.props.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!(
                    "{}  {:<16} snapshots {}  {}",
                    obj::types::Uuid::from_bytes(ci.uuid),
                    ci.label,
                    ci.snapshots.len(),
                    props.join(",")
                );
            }
        }
        ContCmd::Query { pool, cont } => {
            let poh = pool_connect(c, &pool)?;
            let cs = c
                .cont_list(&poh, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, "containers"))?;
            let ci = cs
                .into_iter()
                .find(|ci| ci.label == cont)
                .with_context(|| format!("container {cont:?}: does not exist"))?;
            println!(
                "container {}  {}",
                ci.label,
                obj::types::Uuid::from_bytes(ci.uuid)
            );
            println!("snapshots {}", ci.snapshots.len());
            for (k, v) in &ci.props {
                println!("{k}={v}");
            }
        }
        ContCmd::SetProp { .. } => bail!(
            "cont set-prop is NOT SUPPORTED against one engine (a container's status and \
             redundancy factor live in a system's pool service): use --system DIR"
        ),
        ContCmd::Destroy { pool, cont, force } => {
            let poh = pool_connect(c, &pool)?;
            c.cont_destroy(&poh, &cont, force, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("container {cont:?}")))?;
            println!("container {cont} destroyed");
        }
        ContCmd::Snap { cmd } => match cmd {
            SnapCmd::Create { pool, cont } => {
                let coh = cont_open(c, &pool, &cont)?;
                let e = c
                    .cont_create_snap(&coh, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "snapshot"))?;
                println!("{:#x}", e.0);
            }
            SnapCmd::List { pool, cont } => {
                let coh = cont_open(c, &pool, &cont)?;
                for e in c
                    .cont_list_snap(&coh, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "snapshots"))?
                {
                    println!("{:#x}", e.0);
                }
            }
            SnapCmd::Destroy { pool, cont, epoch } => {
                let coh = cont_open(c, &pool, &cont)?;
                let e = parse_epoch(&epoch)?;
                c.cont_destroy_snap(&coh, e, None)
                    .and_then(|p| p.get())
                    .map_err(|er| explain(er, &format!("snapshot {epoch}")))?;
                println!("snapshot {epoch} destroyed");
            }
        },
    }
    Ok(())
}

/// An OID from text: `HI.LO` in hex, or a number with type and class added.
pub(crate) fn parse_oid(s: &str, otype: ObjType, class: &str) -> Result<ObjectId> {
    let oid = if s.contains('.') {
        let oid: ObjectId = s.parse().map_err(|e| anyhow!("bad OID or class: {e}"))?;
        oid
    } else {
        let n = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        }
        .map_err(|_| anyhow!("bad OID {s:?}: want HI.LO (hex) or a number"))?;
        let class = ObjClass::parse(class).map_err(|e| anyhow!("bad OID or class: {e}"))?;
        ObjectId::generate(0, n, otype, class).map_err(|e| anyhow!("bad OID or class: {e}"))?
    };
    oid.validate()
        .map_err(|e| anyhow!("bad OID or class: {e}"))?;
    Ok(oid)
}

pub(crate) fn read_input(file: Option<&PathBuf>) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    match file {
        Some(p) if p.as_os_str() != "-" => {
            v = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        }
        _ => {
            std::io::stdin()
                .read_to_end(&mut v)
                .context("reading stdin")?;
        }
    }
    Ok(v)
}

pub(crate) fn write_output(out: Option<&PathBuf>, data: &[u8]) -> Result<()> {
    match out {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, data).with_context(|| format!("writing {}", p.display()))
        }
        _ => {
            let mut s = std::io::stdout().lock();
            s.write_all(data)?;
            s.flush()?;
            Ok(())
        }
    }
}

pub(crate) fn show_key(k: &[u8]) -> String {
    match std::str::from_utf8(k) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => format!(
            "0x{}",
            k.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

fn object(cmd: ObjCmd, c: &Client) -> Result<()> {
    let open = |o: &ObjRef| -> Result<obj::client::ObjHandle> {
        let oid = parse_oid(
            &o.oid,
            ObjType::MultiHashed,
            o.class.as_deref().unwrap_or("S1"),
        )?;
        let coh = cont_open(c, &o.pool, &o.cont)?;
        c.obj_open(&coh, oid, None)
            .and_then(|p| p.get())
            .map_err(|e| explain(e, "object"))
    };
    match cmd {
        ObjCmd::Put {
            o,
            dkey,
            akey,
            file,
        } => {
            let data = read_input(file.as_ref())?;
            if data.is_empty() {
                bail!("empty value (use `obj punch` to remove a value)");
            }
            let oh = open(&o)?;
            let e = c
                .obj_update(
                    &oh,
                    &DKey::from(dkey.as_str()),
                    &[Iod::single(akey.as_str(), data.len() as u64)],
                    &[SgList::one(data)],
                    None,
                )
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("object {}", oh.oid)))?;
            eprintln!("written at epoch {:#x} (object {})", e.0, oh.oid);
        }
        ObjCmd::Get {
            o,
            dkey,
            akey,
            out,
            epoch,
        } => {
            let oh = open(&o)?;
            let epoch = epoch.as_deref().map(parse_epoch).transpose()?;
            let f = c
                .obj_fetch(
                    &oh,
                    epoch,
                    &DKey::from(dkey.as_str()),
                    &[Iod::single(akey.as_str(), 0)],
                    Vec::new(),
                    None,
                )
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("object {}", oh.oid)))?;
            if f.sizes.first().copied().unwrap_or(0) == 0 {
                bail!(
                    "object {}: no value under dkey {dkey:?} akey {akey:?}",
                    oh.oid
                );
            }
            write_output(out.as_ref(), &f.sgls[0].concat())?;
        }
        ObjCmd::List { o, dkey, epoch } => {
            let oh = open(&o)?;
            let epoch = epoch.as_deref().map(parse_epoch).transpose()?;
            let mut a = Anchor::default();
            let mut n = 0;
            while !a.is_eof() {
                let keys: Vec<Vec<u8>> = match &dkey {
                    None => {
                        let (ks, na) = c
                            .obj_list_dkey(&oh, epoch, &a, 256, None)
                            .and_then(|p| p.get())
                            .map_err(|e| explain(e, "listing"))?;
                        a = na;
                        ks.into_iter().map(|k| k.0).collect()
                    }
                    Some(d) => {
                        let (ks, na) = c
                            .obj_list_akey(&oh, epoch, &DKey::from(d.as_str()), &a, 256, None)
                            .and_then(|p| p.get())
                            .map_err(|e| explain(e, "listing"))?;
                        a = na;
                        ks.into_iter().map(|k: AKey| k.0).collect()
                    }
                };
                for k in keys {
                    println!("{}", show_key(&k));
                    n += 1;
                }
            }
            eprintln!("{n} key(s)");
        }
        ObjCmd::Punch { o, dkey, akey } => {
            let oh = open(&o)?;
            let r = match (&dkey, &akey) {
                (None, _) => c.obj_punch(&oh, None),
                (Some(d), None) => c.obj_punch_dkey(&oh, &DKey::from(d.as_str()), None),
                (Some(d), Some(a)) => c.obj_punch_akeys(
                    &oh,
                    &DKey::from(d.as_str()),
                    &[AKey::from(a.as_str())],
                    None,
                ),
            };
            r.and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("object {}", oh.oid)))?;
            eprintln!("punched");
        }
    }
    Ok(())
}

fn kv(cmd: KvCmd, c: &Client) -> Result<()> {
    let open = |o: &ObjRef| -> Result<obj::client::Kv> {
        let oid = parse_oid(
            &o.oid,
            ObjType::KvHashed,
            o.class.as_deref().unwrap_or("S1"),
        )?;
        let coh = cont_open(c, &o.pool, &o.cont)?;
        c.kv_open(&coh, oid, None)
            .and_then(|p| p.get())
            .map_err(|e| explain(e, "KV object"))
    };
    match cmd {
        KvCmd::Put { o, key, file } => {
            let data = read_input(file.as_ref())?;
            if data.is_empty() {
                bail!("empty value (use `kv remove` to remove a key)");
            }
            let kv = open(&o)?;
            c.kv_put(&kv, key.as_bytes(), &data, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("key {key:?}")))?;
        }
        KvCmd::Get { o, key, out } => {
            let kv = open(&o)?;
            let v = c
                .kv_get(&kv, key.as_bytes(), None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("key {key:?}")))?;
            write_output(out.as_ref(), &v)?;
        }
        KvCmd::Remove { o, key } => {
            let kv = open(&o)?;
            c.kv_remove(&kv, key.as_bytes(), None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("key {key:?}")))?;
        }
        KvCmd::List { o } => {
            let kv = open(&o)?;
            let mut a = Anchor::default();
            while !a.is_eof() {
                let (ks, na) = c
                    .kv_list(&kv, &a, 256, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "listing"))?;
                for k in ks {
                    println!("{}", show_key(&k));
                }
                a = na;
            }
        }
    }
    Ok(())
}

// ---- bench obj ------------------------------------------------------------------

/// Runs `issue` with `qd` operations in flight for `t`: each call starts one
/// operation on the given event and returns a check of its output. Returns
/// (operations, elapsed, latencies).
/// A loopback address of this process's own for the soft RoCE devices of
/// `bench obj` (`role`: 31 engine, 32 its client, 33/34 the raw baseline):
/// 127.(100 + pid/256 % 100).(pid % 256).role, so two benches that run at
/// once do not bind the same device address.
fn bench_ip(role: u8) -> std::net::IpAddr {
    let pid = std::process::id();
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(
        127,
        100 + ((pid >> 8) % 100) as u8,
        (pid & 0xff) as u8,
        role,
    ))
}

fn drive(
    c: &Client,
    qd: usize,
    t: Duration,
    issue: impl FnMut(u64, &tse::Event) -> Result<Box<dyn FnOnce() -> Result<()>>>,
) -> Result<(u64, Duration, benchkit::Samples)> {
    drive_max(c, qd, t, u64::MAX, issue)
}

/// [`drive`] that issues at most `max` operations (the phase ends at `t` or
/// at `max`, whichever comes first).
fn drive_max(
    c: &Client,
    qd: usize,
    t: Duration,
    max: u64,
    mut issue: impl FnMut(u64, &tse::Event) -> Result<Box<dyn FnOnce() -> Result<()>>>,
) -> Result<(u64, Duration, benchkit::Samples)> {
    let evs = (0..qd)
        .map(|_| c.event(None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    type Check = Box<dyn FnOnce() -> Result<()>>;
    let mut inflight: Vec<Option<(Instant, Check)>> = (0..qd).map(|_| None).collect();
    let mut lat = benchkit::Samples::with_capacity(1 << 16);
    let mut out = Vec::with_capacity(qd);
    let (mut n, mut done) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        if start.elapsed() < t {
            for (slot, ev) in inflight.iter_mut().zip(&evs) {
                if slot.is_none() && n < max {
                    *slot = Some((Instant::now(), issue(n, ev)?));
                    n += 1;
                }
            }
        }
        if inflight.iter().all(Option::is_none) {
            break;
        }
        out.clear();
        c.poll(tse::Wait::Forever, qd, &mut out)?;
        for (ev, _) in &out {
            let i = evs.iter().position(|e| e == ev).context("unknown event")?;
            let (t0, check) = inflight[i].take().context("idle event completed")?;
            lat.push(t0.elapsed());
            check()?;
            done += 1;
        }
    }
    let el = start.elapsed();
    for ev in evs {
        c.event_fini(ev)?;
    }
    Ok((done, el, lat))
}

fn check<T: 'static>(
    p: obj::client::Pending<T>,
    what: &'static str,
) -> Box<dyn FnOnce() -> Result<()>> {
    Box::new(move || p.get().map(|_| ()).map_err(|e| explain(e, what)))
}

/// Raw bandwidth of the file bdev the engine's stores live on: 1 MiB
/// sequential writes, 8 in flight, then a flush (the engine flushes per
/// batch too).
pub(crate) fn raw_bdev_write_bw(dir: &std::path::Path, t: Duration) -> Result<f64> {
    use bdev::file::{FileBdev, FileOptions};
    use bdev::{BdevIo, BlockDevice, IoBuf};
    let path = dir.join("raw.bdev");
    let dev = FileBdev::open(
        "raw",
        &path,
        FileOptions {
            block_size: 4096,
            size: Some(512 << 20),
            ..Default::default()
        },
    )?;
    let mut ch = dev.open_channel()?;
    let blocks = (1u64 << 20) / 4096;
    let span = dev.num_blocks() / blocks;
    let mut done = Vec::new();
    let (mut sub, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < t || ch.in_flight() > 0 {
        while start.elapsed() < t && ch.in_flight() < 8 {
            let io = BdevIo::write(
                (sub % span) * blocks,
                blocks,
                vec![IoBuf::zeroed(1 << 20)],
                sub,
            );
            ch.submit(io)
                .map_err(|_| anyhow!("raw bdev refused a write"))?;
            sub += 1;
        }
        done.clear();
        ch.poll(&mut done);
        for io in &done {
            if !io.is_success() {
                bail!("raw bdev write failed: {:?}", io.status);
            }
            bytes += io.buf_len();
        }
    }
    ch.submit(BdevIo::flush(0))
        .map_err(|_| anyhow!("raw bdev refused a flush"))?;
    while ch.in_flight() > 0 {
        done.clear();
        ch.poll(&mut done);
    }
    let el = start.elapsed();
    drop(ch);
    let _ = std::fs::remove_file(&path);
    Ok(bytes as f64 / el.as_secs_f64())
}

/// Durable small writes on the file bdev the engine's stores live on: rounds
/// of `qd` 4 KiB writes in flight, then one flush, acknowledged when the
/// flush is done. The ceiling of a group-committing store at this depth
/// (one flush per round; the store's commit needs at least that), so the
/// same-durability baseline of the durable write rows. Writes per second.
pub(crate) fn raw_bdev_sync_iops(dir: &std::path::Path, qd: usize, t: Duration) -> Result<f64> {
    use bdev::file::{FileBdev, FileOptions};
    use bdev::{BdevIo, BlockDevice, IoBuf};
    let path = dir.join("raw-sync.bdev");
    let dev = FileBdev::open(
        "raw-sync",
        &path,
        FileOptions {
            block_size: 4096,
            size: Some(64 << 20),
            ..Default::default()
        },
    )?;
    let mut ch = dev.open_channel()?;
    let span = dev.num_blocks();
    let mut done = Vec::new();
    let mut bufs: Vec<IoBuf> = (0..qd).map(|_| IoBuf::zeroed(4096)).collect();
    let mut sub = 0u64;
    let start = Instant::now();
    while start.elapsed() < t {
        for b in bufs.drain(..) {
            // scattered offsets, like a store's index pages and values
            let lba = sub.wrapping_mul(0x9e37_79b9) % span;
            ch.submit(BdevIo::write(lba, 1, vec![b], sub))
                .map_err(|_| anyhow!("raw bdev refused a write"))?;
            sub += 1;
        }
        while ch.in_flight() > 0 {
            done.clear();
            ch.poll(&mut done);
            for io in done.drain(..) {
                if !io.is_success() {
                    bail!("raw bdev write failed: {:?}", io.status);
                }
                bufs.extend(io.bufs);
            }
        }
        ch.submit(BdevIo::flush(0))
            .map_err(|_| anyhow!("raw bdev refused a flush"))?;
        while ch.in_flight() > 0 {
            done.clear();
            ch.poll(&mut done);
            if let Some(io) = done.iter().find(|io| !io.is_success()) {
                bail!("raw bdev flush failed: {:?}", io.status);
            }
        }
    }
    let el = start.elapsed();
    drop(ch);
    let _ = std::fs::remove_file(&path);
    Ok(sub as f64 / el.as_secs_f64())
}

/// Whether `dir` is on tmpfs (fsync there is a no-op: a store on it is not
/// durable across a power loss; the bench says so in its report).
pub(crate) fn on_tmpfs(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statfs that the call
    // fills; both outlive the call.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type as i64 == libc::TMPFS_MAGIC
}

/// Raw soft-RoCE SEND bandwidth of 64 KiB messages, 8 in flight, between
/// two devices on loopback ([`bench_ip`] 33/34) (RC QP through the RDMA CM): the RDMA
/// transport's own figure next to RPC over RDMA.
fn raw_rdma_send_bw(t: Duration) -> Result<f64> {
    use cm::driver::CmDevice;
    use cm::{CmConfig, ConnParam, PortSpace};
    const MSG: usize = 64 * 1024;
    const DEPTH: usize = 8;
    let to = Duration::from_secs(5);
    let dev = |ip: &str| -> Result<CmDevice> {
        let ctx = verbs::Context::open(ip).with_context(|| format!("soft RoCE device on {ip}"))?;
        Ok(CmDevice::open(&ctx, CmConfig::default())?)
    };
    let addr = SocketAddr::new(bench_ip(33), 7499);
    let sdev = dev(&bench_ip(33).to_string())?;
    let listener = sdev.listen_ep(addr, PortSpace::Tcp, 4)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let srv = std::thread::spawn(move || -> Result<()> {
        let (mut id, _) = listener.get_request(Some(to))?;
        id.create_qp_default(cm_cap())?;
        let mr = id.reg_msgs(MSG * 2 * DEPTH)?;
        for i in 0..2 * DEPTH {
            id.post_recv(i as u64, &mr, i * MSG, MSG as u32)?;
        }
        id.accept(&ConnParam::default(), to)?;
        while !s2.load(Ordering::Relaxed) {
            if let Ok(wc) = id.get_recv_comp(Duration::from_millis(10)) {
                let i = wc.wr_id as usize;
                id.post_recv(wc.wr_id, &mr, i * MSG, MSG as u32)?;
            }
        }
        let _ = id.disconnect();
        drop(sdev);
        Ok(())
    });
    let cdev = dev(&bench_ip(34).to_string())?;
    let id = cdev.connect_ep(None, addr, PortSpace::Tcp, cm_cap())?;
    id.connect(&ConnParam::default(), to)?;
    let mr = id.reg_msgs(MSG * DEPTH)?;
    mr.write(0, &vec![0x5a; MSG * DEPTH]);
    let (mut inflight, mut bytes) = (0usize, 0u64);
    let start = Instant::now();
    let mut next = 0usize;
    while start.elapsed() < t || inflight > 0 {
        while start.elapsed() < t && inflight < DEPTH {
            id.post_send(next as u64, &mr, (next % DEPTH) * MSG, MSG as u32)?;
            next += 1;
            inflight += 1;
        }
        let wc = id.get_send_comp(to)?;
        if wc.status != verbs::WcStatus::Success {
            bail!("raw RDMA SEND failed: {:?}", wc.status);
        }
        inflight -= 1;
        bytes += MSG as u64;
    }
    let el = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = id.disconnect();
    srv.join()
        .map_err(|_| anyhow!("raw RDMA server panicked"))??;
    Ok(bytes as f64 / el.as_secs_f64())
}

fn cm_cap() -> verbs::QpCap {
    verbs::QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        ..verbs::QpCap::default()
    }
}

/// NVMe/TCP 4 KiB random-read IOPS (null bdev, queue depth 32) in this
/// process: the issue's baseline for the small-I/O figures.
pub(crate) fn nvmf_4k_iops(t: Duration) -> Result<f64> {
    use nvmf::host::{Controller, HostOpts};
    use nvmf::perf::{PerfOpts, Workload};
    use nvmf::subsystem::Subsystem;
    use nvmf::{ListenSpec, NvmfServer, Tgt, TgtParams};
    let nqn = "nqn.2024-01.io.dpustack:bench-obj";
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(nqn, "BENCHOBJ", "dpustack bench obj")?;
    s.add_ns(1, bdev::spec::create("null0", "null:4G", 512)?, None)?;
    tgt.add_subsystem(s)?;
    let srv = NvmfServer::start(
        tgt,
        &[ListenSpec {
            addr: "127.0.0.1:0".parse()?,
            discovery_only: false,
        }],
        1,
    )?;
    let mut c = Controller::connect(srv.addrs()[0], nqn, &HostOpts::default(), 1, 32)?;
    let r = nvmf::perf::run(
        &mut c,
        &PerfOpts {
            depth: 32,
            io_size: 4096,
            workload: Workload::RandRead,
            read_pct: 100,
            time: t,
            nsid: 1,
            warmup: Duration::from_millis(50),
        },
    )?;
    let _ = c.shutdown();
    srv.stop();
    if r.errors > 0 {
        bail!("NVMe/TCP baseline: {} I/O errors", r.errors);
    }
    Ok(r.iops())
}

/// `dpustack bench obj`: IO500-style workloads against an engine in this
/// process (TCP loopback, the default vos backend in a temporary directory),
/// each next to a raw figure of the same run.
pub fn bench(args: &crate::cmd::bench::BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure, Report};
    let t = args.run_time();
    let runs = args.runs();
    // 1 MiB ior-easy at 8 in flight (8 MiB); the small-I/O workloads at the
    // queue depth of their NVMe/TCP baseline (32)
    let qd = 8usize;
    // (DPUSTACK_BENCH_OBJ_QD overrides it, to compare with figures taken at 8)
    let qd_small = std::env::var("DPUSTACK_BENCH_OBJ_QD")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&q| q > 0)
        .unwrap_or(32);
    let dir = std::env::temp_dir().join(format!("dpustack-bench-obj-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    tune_malloc();
    if on_tmpfs(&dir) {
        tracing::warn!(dir = %dir.display(), "bench obj: the stores are on tmpfs (TMPDIR): fsync is a no-op, the figures are not durable ones");
    }
    let result = (|| -> Result<Report> {
        let rdma_at = SocketAddr::new(bench_ip(31), 7490);
        let ec = EngineConfig {
            listen: "127.0.0.1:0".parse()?,
            data_dir: dir.join("engine"),
            targets: 0,
            rdma_listen: Some(rdma_at),
            aggregation: Default::default(),
        };
        let eng = start_engine(&ec, _cfg.obj.max_clients)?;
        let c = Client::connect(&eng.addr().to_string()).map_err(|e| explain(e, "engine"))?;
        c.pool_create("bench", 16 << 30, None)
            .and_then(|p| p.get())
            .map_err(|e| explain(e, "pool bench"))?;
        let poh = pool_connect(&c, "bench")?;
        c.cont_create(&poh, "b", &[], None)
            .and_then(|p| p.get())
            .map_err(|e| explain(e, "container"))?;
        let coh = cont_open(&c, "bench", "b")?;
        // DPUSTACK_BENCH_OBJ_ONLY=ior-easy,ior-hard,mdtest-easy,mdtest-hard,rdma:
        // only these groups (for profiling one workload; the baselines always run)
        let only = std::env::var("DPUSTACK_BENCH_OBJ_ONLY").ok();
        let want = |g: &str| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x.trim() == g))
        };
        let steps = 4 + 11 * runs as u64;
        let bar = if args.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(steps)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let med = |v: &mut Vec<f64>| median(v).unwrap_or(0.0);
        // same-run baselines
        bar.set_message("raw TCP loopback");
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(netio::baseline::tcp_loopback_bw(t)?);
        }
        let tcp = med(&mut v);
        bar.inc(1);
        bar.set_message("raw file bdev");
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(raw_bdev_write_bw(&dir, t)?);
        }
        let raw_bdev = med(&mut v);
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(raw_bdev_sync_iops(&dir, qd_small, t)?);
        }
        let raw_sync = med(&mut v);
        bar.inc(1);
        bar.set_message("NVMe/TCP 4 KiB randread");
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(nvmf_4k_iops(t)?);
        }
        let nvmf = med(&mut v);
        bar.inc(1);
        bar.set_message("raw soft RoCE SEND 64 KiB");
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(raw_rdma_send_bw(t)?);
        }
        let raw_rdma = med(&mut v);
        bar.inc(1);
        let rc = Client::connect_rdma(rdma_at, &bench_ip(32).to_string())
            .map_err(|e| explain(e, "engine over RDMA"))?;
        let rpoh = pool_connect(&rc, "bench")?;
        let rcoh = rc
            .cont_open(&rpoh, "b", None)
            .and_then(|p| p.get())
            .map_err(|e| explain(e, "container over RDMA"))?;

        let mut fig: std::collections::BTreeMap<&str, (Vec<f64>, benchkit::Samples)> =
            Default::default();
        let mut record = |name: &'static str, val: f64, lat: benchkit::Samples| {
            let e = fig
                .entry(name)
                .or_insert_with(|| (Vec::new(), benchkit::Samples::default()));
            e.0.push(val);
            e.1 = lat; // the last run's latencies
        };
        // the class of the ior objects and the mdtest-hard object: SX (its
        // dkeys striped over the engine's targets) as DAOS's IO500 runs use;
        // DPUSTACK_BENCH_OBJ_CLASS=S1 puts each on one target (A/B)
        let class = match std::env::var("DPUSTACK_BENCH_OBJ_CLASS") {
            Ok(c) => ObjClass::parse(&c).map_err(|e| anyhow!("DPUSTACK_BENCH_OBJ_CLASS: {e}"))?,
            Err(_) => ObjClass::SX,
        };
        let mut next_oid = 1u64;
        let mut oid = |t: ObjType| -> Result<ObjectId> {
            next_oid += 1;
            Ok(ObjectId::generate(0, next_oid, t, class)?)
        };
        const MIB: u64 = 1 << 20;
        const HARD: u64 = 47_008;
        let buf = vec![0xa5u8; MIB as usize];
        // the mdtest-hard object and its key count, for the RDMA read row
        let mut hard_kv: Option<(obj::client::Kv, u64)> = None;
        for run in 0..runs {
            if want("ior-easy") {
                // ior-easy: 1 MiB sequential array I/O
                bar.set_message("ior-easy write");
                let arr = c
                    .array_create(&coh, oid(ObjType::Array)?, 1, MIB, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "array"))?;
                let (n, el, lat) = drive(&c, qd, t, |i, ev| {
                    Ok(check(
                        c.array_write(&arr, i * MIB, &buf, Some(ev))?,
                        "ior-easy write",
                    ))
                })?;
                record("ior-easy write", (n * MIB) as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
                bar.set_message("ior-easy read");
                let written = n.max(1);
                let (n, el, lat) = drive(&c, qd, t, |i, ev| {
                    Ok(check(
                        c.array_read(&arr, (i % written) * MIB, MIB, Some(ev))?,
                        "ior-easy read",
                    ))
                })?;
                record("ior-easy read", (n * MIB) as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
            }
            if want("ior-hard") {
                // ior-hard: 47008-byte records strided into one object
                bar.set_message("ior-hard write");
                let arr = c
                    .array_create(&coh, oid(ObjType::Array)?, 1, MIB, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "array"))?;
                let rec = vec![0x3cu8; HARD as usize];
                let (n, el, lat) = drive(&c, qd_small, t, |i, ev| {
                    Ok(check(
                        c.array_write(&arr, i * HARD, &rec, Some(ev))?,
                        "ior-hard write",
                    ))
                })?;
                record("ior-hard write", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
                bar.set_message("ior-hard read");
                let written = n.max(1);
                let (n, el, lat) = drive(&c, qd_small, t, |i, ev| {
                    Ok(check(
                        c.array_read(&arr, (i % written) * HARD, HARD, Some(ev))?,
                        "ior-hard read",
                    ))
                })?;
                record("ior-hard read", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
            }
            if want("mdtest-easy") {
                // mdtest-easy: many small objects (one key each)
                bar.set_message("mdtest-easy create");
                // object numbers far above the ones `oid` hands out
                let base = (u64::from(run) + 1) << 32;
                let (n, el, lat) = drive(&c, qd_small, t, |i, ev| {
                    let o = ObjectId::generate(0, base + i, ObjType::KvHashed, ObjClass::S1)?;
                    let kv = obj::client::Kv {
                        oh: obj::client::ObjHandle {
                            coh: coh.coh,
                            oid: o,
                        },
                    };
                    Ok(check(
                        c.kv_put(&kv, b"stat", &[7u8; 64], Some(ev))?,
                        "mdtest-easy create",
                    ))
                })?;
                record("mdtest-easy create", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
                bar.set_message("mdtest-easy stat");
                let made = n.max(1);
                let (n, el, lat) = drive(&c, qd_small, t, |i, ev| {
                    let o =
                        ObjectId::generate(0, base + i % made, ObjType::KvHashed, ObjClass::S1)?;
                    let kv = obj::client::Kv {
                        oh: obj::client::ObjHandle {
                            coh: coh.coh,
                            oid: o,
                        },
                    };
                    Ok(check(c.kv_get(&kv, b"stat", Some(ev))?, "mdtest-easy stat"))
                })?;
                record("mdtest-easy stat", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
            }
            if want("mdtest-hard") {
                // mdtest-hard: many 3901-byte keys in one object
                bar.set_message("mdtest-hard write");
                let kv = c
                    .kv_open(&coh, oid(ObjType::KvHashed)?, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "kv"))?;
                let val = vec![0x11u8; 3901];
                // DPUSTACK_BENCH_OBJ_HARD_KEYS=N: at most N keys. The read
                // phase cycles through the keys the write phase made, so its
                // rate depends on how many there are (the value cache); a cap
                // compares two binaries' reads over the same key set
                let max_keys = std::env::var("DPUSTACK_BENCH_OBJ_HARD_KEYS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(u64::MAX);
                let (n, el, lat) = drive_max(&c, qd_small, t, max_keys, |i, ev| {
                    Ok(check(
                        c.kv_put(&kv, &i.to_be_bytes(), &val, Some(ev))?,
                        "mdtest-hard write",
                    ))
                })?;
                record("mdtest-hard write", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
                bar.set_message("mdtest-hard read");
                let made = n.max(1);
                let (n, el, lat) = drive(&c, qd_small, t, |i, ev| {
                    Ok(check(
                        c.kv_get(&kv, &(i % made).to_be_bytes(), Some(ev))?,
                        "mdtest-hard read",
                    ))
                })?;
                record("mdtest-hard read", n as f64 / el.as_secs_f64(), lat);
                bar.inc(1);
                hard_kv = Some((kv, made));
            }
            if want("rdma") {
                // the same client code over RPC over RDMA
                bar.set_message("ior-easy write over RDMA");
                let arr = rc
                    .array_create(&rcoh, oid(ObjType::Array)?, 1, MIB, None)
                    .and_then(|p| p.get())
                    .map_err(|e| explain(e, "array"))?;
                let (n, el, lat) = drive(&rc, qd, t, |i, ev| {
                    Ok(check(
                        rc.array_write(&arr, i * MIB, &buf, Some(ev))?,
                        "ior-easy write over RDMA",
                    ))
                })?;
                record(
                    "ior-easy write over RDMA",
                    (n * MIB) as f64 / el.as_secs_f64(),
                    lat,
                );
                bar.inc(1);
                bar.set_message("ior-easy read over RDMA");
                let written = n.max(1);
                let (n, el, lat) = drive(&rc, qd, t, |i, ev| {
                    Ok(check(
                        rc.array_read(&arr, (i % written) * MIB, MIB, Some(ev))?,
                        "ior-easy read over RDMA",
                    ))
                })?;
                record(
                    "ior-easy read over RDMA",
                    (n * MIB) as f64 / el.as_secs_f64(),
                    lat,
                );
                bar.inc(1);
                bar.set_message("mdtest-hard read over RDMA");
                let Some((kv, made)) = hard_kv else {
                    continue; // needs the mdtest-hard object
                };
                let rkv = obj::client::Kv {
                    oh: obj::client::ObjHandle {
                        coh: rcoh.coh,
                        oid: kv.oh.oid,
                    },
                };
                let (n, el, lat) = drive(&rc, qd_small, t, |i, ev| {
                    Ok(check(
                        rc.kv_get(&rkv, &(i % made).to_be_bytes(), Some(ev))?,
                        "mdtest-hard read over RDMA",
                    ))
                })?;
                record(
                    "mdtest-hard read over RDMA",
                    n as f64 / el.as_secs_f64(),
                    lat,
                );
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        let mut r = Report::new("obj");
        for (name, (mut vals, mut lat)) in fig {
            let v = med(&mut vals);
            let row_qd = if name.starts_with("ior-easy") {
                qd
            } else {
                qd_small
            };
            let s = lat.summary();
            let detail = serde_json::json!({
                "queue_depth": row_qd,
                "runs": vals,
                "p50_us": s.map(|s| s.p50_ns as f64 / 1e3),
                "p99_us": s.map(|s| s.p99_ns as f64 / 1e3),
            });
            let lat_txt = s.map_or(String::new(), |s| {
                format!(
                    ", p50 {:.0} us p99 {:.0} us",
                    s.p50_ns as f64 / 1e3,
                    s.p99_ns as f64 / 1e3
                )
            });
            let f = if name.starts_with("ior-easy") && name.ends_with("RDMA") {
                Figure::new(
                    format!("{name} 1 MiB (qd {qd}{lat_txt})"),
                    v / 1e6,
                    "MB/s",
                    "raw soft RoCE SEND 64 KiB (8 in flight)",
                    raw_rdma / 1e6,
                    Better::Higher,
                )
            } else if name.starts_with("ior-easy") {
                Figure::new(
                    format!("{name} 1 MiB (qd {qd}{lat_txt})"),
                    v / 1e6,
                    "MB/s",
                    "raw TCP loopback",
                    tcp / 1e6,
                    Better::Higher,
                )
            } else {
                Figure::new(
                    format!("{name} (qd {row_qd}{lat_txt})"),
                    v,
                    "ops/s",
                    "NVMe/TCP 4 KiB randread (null, qd 32)",
                    nvmf,
                    Better::Higher,
                )
            };
            r.push(f.with_detail(detail));
            if matches!(
                name,
                "ior-hard write" | "mdtest-easy create" | "mdtest-hard write"
            ) {
                // the same-durability baseline: every acknowledged write of
                // these rows survives a crash, the NVMe/TCP null read does not
                r.push(Figure::new(
                    format!("{name} (qd {row_qd})"),
                    v,
                    "ops/s",
                    format!("raw file bdev 4 KiB writes, qd {qd_small} + one flush per round"),
                    raw_sync,
                    Better::Higher,
                ));
            }
            if name == "ior-easy write" {
                r.push(Figure::new(
                    format!("{name} 1 MiB (qd {qd})"),
                    v / 1e6,
                    "MB/s",
                    "raw file bdev 1 MiB write (qd 8, + flush)",
                    raw_bdev / 1e6,
                    Better::Higher,
                ));
            }
        }
        r.note(format!(
            "{runs} run(s) of {:.2} s each, medians; engine in this process on 127.0.0.1 over TCP and on {} over soft RDMA (client device {}), {} targets, vos on io_uring file bdevs in {}; \
             latency percentiles of the last run, at the queue depth in each row (they include queueing)",
            t.as_secs_f64(),
            rdma_at.ip(),
            bench_ip(32),
            eng.targets(),
            std::env::temp_dir().display()
        ));
        if on_tmpfs(&dir) {
            r.note(format!(
                "STORE ON TMPFS ({}): flushes and fsyncs are no-ops, so no figure of this run is durable; it shows the software cost without the disk",
                dir.display()
            ));
        }
        r.note(format!("ior-hard = 47008-byte array writes/reads at stride 47008 into one object; mdtest-easy = one 64-byte KV put/get per new object (class S1); mdtest-hard = 3901-byte values under many keys of one object; the ior and mdtest-hard objects are of class {class} (SX: dkeys striped over the targets)"));
        if let Some((_, made)) = &hard_kv {
            r.note(format!(
                "mdtest-hard read cycles through the {made} keys the last run's write phase made (more keys, fewer value-cache hits: compare reads at equal key counts, DPUSTACK_BENCH_OBJ_HARD_KEYS=N caps them)"
            ));
        }
        drop(rc);
        drop(c);
        eng.stop();
        Ok(r)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file system type of `path`'s mount, from /proc/mounts (the
    /// longest mount point that is a prefix of it).
    fn fstype(path: &str) -> Option<String> {
        let m = std::fs::read_to_string("/proc/mounts").ok()?;
        m.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2).then(|| (f[1].to_string(), f[2].to_string()))
            })
            .filter(|(mp, _)| path == mp || mp == "/" || path.starts_with(&format!("{mp}/")))
            .max_by_key(|(mp, _)| mp.len())
            .map(|(_, t)| t)
    }

    /// The bench's tmpfs warning agrees with the mount table.
    #[test]
    fn on_tmpfs_agrees_with_proc_mounts() {
        let mut seen = 0;
        for p in ["/", "/dev/shm", "/proc", "/tmp"] {
            let Some(t) = fstype(p) else { continue };
            if !std::path::Path::new(p).exists() {
                continue;
            }
            assert_eq!(on_tmpfs(std::path::Path::new(p)), t == "tmpfs", "{p}: {t}");
            seen += 1;
        }
        assert!(seen > 0, "no mount found in /proc/mounts");
        assert!(!on_tmpfs(std::path::Path::new("/no/such/dir")));
    }
}
