//! `dpustack system ...`: a system of several object engines on this machine
//! (one process each, on 127.0.0.x), and a distributed KV over it
//! (`obj::dist`: placement with the pool map, replicated puts, reads from a
//! healthy replica).
//!
//! Every engine also runs a replica of the pool service (`poolsvc`: the pool
//! map, containers and handles replicated with Raft). `system create` makes
//! the pool there, `system kv` takes its pool map from there (and reports the
//! engines it found DOWN back), `system query` shows each replica's role and
//! the leader, `system pool-query` the replicated pool map. See
//! docs/obj-dist.md.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use obj::client::Client;
use obj::dist::DistClient;
use obj::membership::DetectorConfig;
use obj::placement::{layout, PoolMap};
use obj::types::ObjType;

use crate::cmd::obj::parse_oid;
use crate::config::Config;

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// A system of several object engines on this machine: start, stop,
    /// query, and a replicated KV over it.
    System {
        /// Directory of the system (engines' data, logs, system.txt; default
        /// `<node data_dir>/system`).
        #[arg(long, global = true)]
        dir: Option<PathBuf>,
        #[command(subcommand)]
        cmd: SystemCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum SystemCmd {
    /// Start N engines (one process each) on FIRST_IP, FIRST_IP+1, ... :PORT.
    Start {
        #[arg(long, default_value_t = 3)]
        engines: usize,
        #[arg(long, default_value = "127.0.0.60")]
        first_ip: Ipv4Addr,
        #[arg(long, default_value_t = 10501)]
        port: u16,
        /// Targets (threads) per engine.
        #[arg(long, default_value_t = 1)]
        targets: usize,
        /// Port of the pool-service replicas (on each engine's IP).
        #[arg(long, default_value_t = 10601)]
        svc_port: u16,
        /// Milliseconds a dead engine stays DOWN before the pool service
        /// marks it EXCLUDED (0 = never).
        #[arg(long, default_value_t = 5000)]
        exclude_after_ms: u64,
        /// Rebuild throttle: values copied per second at most (0 = unlimited).
        #[arg(long, default_value_t = 0)]
        rebuild_rate: u64,
        /// Engines accept `system fault` (network-partition injection; tests).
        #[arg(long)]
        fault_injection: bool,
        /// The engines' lease on the pool map (the fence: an engine that has
        /// not heard from a pool-service leader for this long refuses object
        /// I/O as a stale map until it fetches the map again); 0 = no fence.
        #[arg(long, default_value_t = 450)]
        lease_ms: u64,
        /// A DOWN engine that answers again is reintegrated at once (DOWN →
        /// UP → UP-IN, its data reconciled and filled) instead of waiting
        /// for EXCLUDED. On by default (docs/obj-dist.md "DOWN → UP-IN
        /// return"); `--return-from-down=false` waits for EXCLUDED.
        #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
              action = clap::ArgAction::Set)]
        return_from_down: bool,
    },
    /// Cut engine RANK's links (the system must run with `start
    /// --fault-injection`): messages to the `--drop-to` ranks and from the
    /// `--drop-from` ranks (comma lists) are lost, in the pool service and in
    /// engine-to-engine object traffic. No lists: heal. Replaces RANK's rules.
    Fault {
        rank: u64,
        #[arg(long, value_delimiter = ',')]
        drop_to: Vec<u64>,
        #[arg(long, value_delimiter = ',')]
        drop_from: Vec<u64>,
    },
    /// Stop every engine of the system (SIGINT, then SIGKILL after 5 s).
    Stop,
    /// Each engine: rank, address, pid, whether it answers.
    Query,
    /// Create pool LABEL (SIZE bytes on each engine, K/M/G) and container CONT
    /// on every engine.
    Create {
        pool: String,
        cont: String,
        #[arg(default_value = "64M")]
        size: String,
        /// The pool's default object class (`system kv` uses it when given
        /// no `--class`): S1, SX, RP_2, RP_3 (or any full class name).
        #[arg(long)]
        class: Option<String>,
        /// Replicas per object; must agree with `--class` (S1/SX: 1, RP_n: n)
        /// and be at most the number of engines (distinct fault domains).
        /// Alone, it picks the class: 1 → S1, n → RP_n.
        #[arg(long)]
        replicas: Option<u32>,
    },
    /// The pool as the pool service has it (linearizable read from the
    /// leader): map version, targets and states, containers, handles,
    /// properties, rebuild progress.
    PoolQuery {
        pool: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Set the state of engine RANK's targets in POOL's map (UP, UP-IN, DOWN,
    /// EXCLUDED; DAOS transitions only), through the pool service. Taking a
    /// serving engine out (DOWN / EXCLUDED) needs `--force`: it is not
    /// delayed by the engine's lease, so an engine cut off from the pool
    /// service can still serve clients that kept the old map for up to its
    /// lease (`--lease-ms`) afterwards. The pool service's monitor marks an
    /// unreachable engine DOWN itself, once its lease can have lapsed.
    SetState {
        pool: String,
        rank: u32,
        state: String,
        /// Take a serving engine out now, without waiting for its lease.
        #[arg(long)]
        force: bool,
    },
    /// Replicated KV: `put KEY VALUE` / `get KEY` / `where` of object OID.
    Kv {
        pool: String,
        cont: String,
        oid: String,
        /// Object class (S1, SX, RP_2G1, RP_3G1, ...); default: the pool's
        /// (`create --class`), else RP_2G1.
        #[arg(long)]
        class: Option<String>,
        /// put KEY VALUE | get KEY | where
        #[arg(num_args = 1..=3, required = true)]
        args: Vec<String>,
    },
}

pub(crate) struct Member {
    pub(crate) rank: usize,
    pub(crate) addr: String,
    pid: i32,
    /// The pool-service replica's address (systems started before it have none).
    svc: Option<String>,
}

/// A client of the system's pool service (None when the engines run none).
pub(crate) fn svc_client(ms: &[Member]) -> Result<Option<poolsvc::client::BlockingClient>> {
    let replicas: std::collections::BTreeMap<u64, String> = ms
        .iter()
        .filter_map(|m| Some((m.rank as u64, m.svc.clone()?)))
        .collect();
    if replicas.is_empty() {
        return Ok(None);
    }
    let mut c = poolsvc::client::BlockingClient::new(replicas)?;
    c.inner.rpc_timeout = Duration::from_millis(1000);
    // how long a command looks for a leader (DPUSTACK_SVC_DEADLINE_MS: tests)
    c.inner.deadline = std::env::var("DPUSTACK_SVC_DEADLINE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    Ok(Some(c))
}

fn system_file(dir: &Path) -> PathBuf {
    dir.join("system.txt")
}

/// The pool map the `kv` commands share (`DIR/poolmap.txt`): an engine once
/// found DOWN stays DOWN for later commands (no reintegration yet). A file,
/// not a replicated pool service: two commands racing keep the last write.
fn map_file(dir: &Path) -> PathBuf {
    dir.join("poolmap.txt")
}

fn load_map(dir: &Path) -> Result<Option<PoolMap>> {
    match std::fs::read_to_string(map_file(dir)) {
        Ok(t) => {
            Ok(Some(PoolMap::from_text(&t).with_context(|| {
                format!("reading {}", map_file(dir).display())
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn save_map(dir: &Path, m: &PoolMap) -> Result<()> {
    let tmp = dir.join("poolmap.txt.tmp");
    std::fs::write(&tmp, m.to_text())?;
    std::fs::rename(&tmp, map_file(dir))?;
    Ok(())
}

pub(crate) fn load(dir: &Path) -> Result<Vec<Member>> {
    let f = system_file(dir);
    let text = std::fs::read_to_string(&f).with_context(|| {
        format!(
            "no system at {} (run `dpustack system start`)",
            dir.display()
        )
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            match p.as_slice() {
                [r, a, pid] => Ok(Member {
                    rank: r.parse()?,
                    addr: a.to_string(),
                    pid: pid.parse()?,
                    svc: None,
                }),
                [r, a, pid, svc] => Ok(Member {
                    rank: r.parse()?,
                    addr: a.to_string(),
                    pid: pid.parse()?,
                    svc: Some(svc.to_string()),
                }),
                _ => Err(anyhow!("bad line in {}: {l:?}", f.display())),
            }
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    // a zombie (dead, not yet reaped by whoever inherited it) is not alive
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => st
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => true,
    }
}

pub fn run(cmd: Cmd, cfg: &Config) -> Result<()> {
    let Cmd::System { dir, cmd } = cmd;
    let dir = dir.unwrap_or_else(|| cfg.node.data_dir.join("system"));
    match cmd {
        SystemCmd::Start {
            engines,
            first_ip,
            port,
            targets,
            svc_port,
            exclude_after_ms,
            rebuild_rate,
            fault_injection,
            lease_ms,
            return_from_down,
        } => start(
            &dir,
            engines,
            first_ip,
            port,
            targets,
            svc_port,
            (exclude_after_ms, rebuild_rate, fault_injection, lease_ms),
            return_from_down,
        ),
        SystemCmd::Fault {
            rank,
            drop_to,
            drop_from,
        } => {
            let ms = load(&dir)?;
            let c = svc_client(&ms)?.context("this system runs no pool service")?;
            let req = poolsvc::msg::ClientRequest::Faults { drop_to, drop_from };
            match c
                .call_one(rank, req)
                .map_err(|e| anyhow!("rank {rank}: {e}"))?
            {
                poolsvc::msg::ClientReply::Status(s) => {
                    println!("rank {rank}: links set ({} t{})", s.role, s.term);
                    Ok(())
                }
                poolsvc::msg::ClientReply::Error(e) => bail!("rank {rank}: {e}"),
                r => bail!("rank {rank}: unexpected reply {r:?}"),
            }
        }
        SystemCmd::Stop => stop(&dir),
        SystemCmd::Query => query(&dir),
        SystemCmd::Create {
            pool,
            cont,
            size,
            class,
            replicas,
        } => {
            let size =
                bdev::spec::parse_size(&size).with_context(|| format!("bad size {size:?}"))?;
            let ms = load(&dir)?;
            let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
            let class = pool_class(class.as_deref(), replicas, addrs.len())?;
            DistClient::create(&addrs, &pool, size, &cont)?;
            println!(
                "pool {pool:?} ({size} bytes per engine) and container {cont:?} on {} engines",
                addrs.len()
            );
            if let Some(mut c) = svc_client(&ms)? {
                let r = c.write(poolsvc::state::Command::CreatePool {
                    pool: pool.clone(),
                    domains: addrs.len() as u32,
                    per_domain: 1,
                })?;
                if let poolsvc::state::Reply::Refused(e) = &r {
                    bail!("pool service: {e}");
                }
                let r = c.write(poolsvc::state::Command::CreateCont {
                    pool: pool.clone(),
                    cont: cont.clone(),
                    props: [("size".to_string(), size.to_string())].into(),
                })?;
                if let poolsvc::state::Reply::Refused(e) = &r {
                    bail!("pool service: {e}");
                }
                if let Some((class, replicas)) = &class {
                    for (key, value) in
                        [("class", class.clone()), ("replicas", replicas.to_string())]
                    {
                        let r = c.write(poolsvc::state::Command::SetPoolProp {
                            pool: pool.clone(),
                            key: key.into(),
                            value,
                        })?;
                        if let poolsvc::state::Reply::Refused(e) = &r {
                            bail!("pool service: {e}");
                        }
                    }
                    println!("pool class {class}, {replicas} replicas per object");
                }
                println!(
                    "pool service (leader rank {}): pool map version 1, {} targets",
                    c.inner.leader().map_or("?".into(), |l| l.to_string()),
                    addrs.len()
                );
            }
            Ok(())
        }
        SystemCmd::PoolQuery { pool, json } => pool_query(&dir, &pool, json),
        SystemCmd::SetState {
            pool,
            rank,
            state,
            force,
        } => {
            let ms = load(&dir)?;
            let mut c = svc_client(&ms)?.context("this system runs no pool service")?;
            let out = matches!(state.to_ascii_uppercase().as_str(), "DOWN" | "EXCLUDED");
            if out && !force {
                let st = c.read()?;
                let serving = st
                    .pools
                    .get(&pool)
                    .with_context(|| format!("no pool {pool:?} in the pool service"))?
                    .map()
                    .target(rank)
                    .is_ok_and(|t| t.state.is_serving());
                if serving {
                    bail!(
                        "rank {rank} serves in pool {pool}'s map: a {state} set by hand is not \
                         delayed by the engine's lease (an engine cut off from the pool service \
                         can serve clients that kept the old map for up to its lease); the pool \
                         service marks an unreachable engine DOWN itself once its lease can have \
                         lapsed. Use --force to set it now"
                    );
                }
            }
            match c.write(poolsvc::state::Command::SetDomainState {
                pool,
                domain: rank,
                state,
            })? {
                poolsvc::state::Reply::MapVersion(v) => {
                    println!("pool map version {v}");
                    Ok(())
                }
                poolsvc::state::Reply::Refused(e) => bail!("pool service: {e}"),
                r => bail!("pool service: unexpected reply {r:?}"),
            }
        }
        SystemCmd::Kv {
            pool,
            cont,
            oid,
            class,
            args,
        } => kv(&dir, &pool, &cont, &oid, class.as_deref(), &args),
    }
}

fn start(
    dir: &Path,
    n: usize,
    first_ip: Ipv4Addr,
    port: u16,
    targets: usize,
    svc_port: u16,
    (exclude_after_ms, rebuild_rate, fault_injection, lease_ms): (u64, u64, bool, u64),
    return_from_down: bool,
) -> Result<()> {
    if n == 0 {
        bail!("--engines must be at least 1");
    }
    if let Ok(ms) = load(dir) {
        if ms.iter().any(|m| alive(m.pid)) {
            bail!(
                "a system is already running at {} (`dpustack system stop` first)",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // a new system starts with every engine in the map (data dirs are reused:
    // an earlier system's map would not say what the engines now hold)
    let _ = std::fs::remove_file(map_file(dir));
    let exe = std::env::current_exe()?;
    let base = u32::from(first_ip);
    let svc_addrs: Vec<String> = (0..n)
        .map(|r| format!("{}:{svc_port}", Ipv4Addr::from(base + r as u32)))
        .collect();
    let svc_members = svc_addrs
        .iter()
        .enumerate()
        .map(|(r, a)| format!("{r}={a}"))
        .collect::<Vec<_>>()
        .join(",");
    let engine_addrs = (0..n)
        .map(|r| format!("{r}={}:{port}", Ipv4Addr::from(base + r as u32)))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (rank, svc_addr) in svc_addrs.iter().enumerate() {
        let ip = Ipv4Addr::from(base + rank as u32);
        let addr = format!("{ip}:{port}");
        let edir = dir.join(format!("engine{rank}"));
        // a new system is a new pool-service group (as the map file above)
        let _ = std::fs::remove_file(edir.join("pool_svc.redb"));
        let log = std::fs::File::create(dir.join(format!("engine{rank}.log")))?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "engine",
            "--listen",
            &addr,
            "--targets",
            &targets.to_string(),
        ])
        .arg("--data-dir")
        .arg(&edir)
        .args(["--pool-svc-id", &rank.to_string()])
        .args(["--pool-svc-members", &svc_members])
        .args(["--pool-svc-engines", &engine_addrs])
        .args(["--pool-svc-exclude-after-ms", &exclude_after_ms.to_string()])
        .args(["--pool-svc-rebuild-rate", &rebuild_rate.to_string()])
        .args(["--pool-svc-lease-ms", &lease_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        use std::os::unix::process::CommandExt as _;
        if rank == 0 {
            cmd.arg("--pool-svc-init");
        }
        if fault_injection {
            cmd.arg("--fault-injection");
        }
        cmd.arg(format!("--pool-svc-return-from-down={return_from_down}"));
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting engine {rank}"))?;
        members.push(Member {
            rank,
            addr,
            pid: child.id() as i32,
            svc: Some(svc_addr.clone()),
        });
    }
    let mut f = std::fs::File::create(system_file(dir))?;
    for m in &members {
        writeln!(
            f,
            "{} {} {} {}",
            m.rank,
            m.addr,
            m.pid,
            m.svc.as_deref().unwrap_or("-")
        )?;
    }
    // wait until every engine answers
    let deadline = Instant::now() + Duration::from_secs(20);
    for m in &members {
        loop {
            if Client::connect_with(&m.addr, Duration::from_millis(500)).is_ok() {
                break;
            }
            if !alive(m.pid) || Instant::now() > deadline {
                bail!(
                    "engine {} at {} did not come up (see {})",
                    m.rank,
                    m.addr,
                    dir.join(format!("engine{}.log", m.rank)).display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // and until the pool service has a leader
    if let Some(c) = svc_client(&members)? {
        let leader = loop {
            let l = c
                .statuses()
                .into_values()
                .filter_map(|s| s.ok())
                .find(|s| s.role == "leader");
            if let Some(l) = l {
                break l;
            }
            if Instant::now() > deadline {
                bail!("the pool service elected no leader within 20 s (see the engine logs)");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        println!(
            "pool service leader: rank {} (term {})",
            leader.id, leader.term
        );
    }
    println!("system of {n} engines at {}:", dir.display());
    for m in &members {
        println!("  rank {} {} pid {}", m.rank, m.addr, m.pid);
    }
    Ok(())
}

fn stop(dir: &Path) -> Result<()> {
    let ms = load(dir)?;
    let mut running = Vec::new();
    for m in &ms {
        if alive(m.pid) {
            // SAFETY: signalling a pid recorded by `system start`.
            unsafe { libc::kill(m.pid, libc::SIGINT) };
            running.push(m);
        } else {
            println!("rank {} (pid {}) was not running", m.rank, m.pid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for m in running {
        while alive(m.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(m.pid) {
            // SAFETY: as above.
            unsafe { libc::kill(m.pid, libc::SIGKILL) };
            println!("rank {} (pid {}) killed", m.rank, m.pid);
        } else {
            println!("rank {} (pid {}) stopped", m.rank, m.pid);
        }
    }
    std::fs::remove_file(system_file(dir))?;
    Ok(())
}

fn query(dir: &Path) -> Result<()> {
    let ms = load(dir)?;
    // the map: the pool service's (its first pool) when there is one, else the file
    let mut map = None;
    if let Some(mut c) = svc_client(&ms)? {
        match c.read() {
            Ok(st) => {
                for (name, p) in &st.pools {
                    println!(
                        "pool {name}: map version {} (pool service)",
                        p.map().version()
                    );
                }
                map = st.pools.values().next().map(|p| p.map());
            }
            Err(e) => println!("pool service: no answer from a leader ({e})"),
        }
    } else {
        map = load_map(dir)?;
        match &map {
            Some(m) => println!("pool map version {}", m.version()),
            None => println!("pool map version 1 (no failure seen yet)"),
        }
    }
    let svc = svc_client(&ms)?.map(|c| c.statuses());
    if let Some(st) = &svc {
        let leaders: std::collections::BTreeSet<(u64, u64)> = st
            .values()
            .filter_map(|s| s.as_ref().ok())
            .filter(|s| s.role == "leader")
            .map(|s| (s.id, s.term))
            .collect();
        match leaders.iter().next_back() {
            Some((id, term)) => println!("pool service leader: rank {id} (term {term})"),
            None => println!("pool service leader: NONE (election under way or no quorum)"),
        }
    }
    println!(
        "{:<5} {:<22} {:<8} {:<9} {:<14} PROCESS",
        "RANK", "ADDRESS", "PID", "MAP", "POOL-SVC"
    );
    for m in &ms {
        let role = match svc.as_ref().and_then(|s| s.get(&(m.rank as u64))) {
            Some(Ok(s)) => format!("{} t{}", s.role, s.term),
            Some(Err(_)) => "-".to_string(),
            None => "none".to_string(),
        };
        let up = Client::connect_with(&m.addr, Duration::from_millis(500)).is_ok();
        let st = map
            .as_ref()
            .and_then(|p| p.target(m.rank as u32).ok())
            .map_or("UP-IN", |t| t.state.name());
        println!(
            "{:<5} {:<22} {:<8} {:<9} {:<14} {}",
            m.rank,
            m.addr,
            m.pid,
            st,
            role,
            if up { "answers" } else { "NOT ANSWERING" }
        );
    }
    Ok(())
}

/// A [`DistClient`] on a system's pool and container for one CLI command
/// (`system kv` and `dpustack pool|cont|obj|kv --system DIR`): the pool map
/// from the pool service (else the file of the previous session), a map
/// source for stale-map refusals; [`Session::finish`] reports the engines
/// the command found DOWN back to the pool service.
pub(crate) struct Session {
    pub(crate) dc: DistClient,
    /// The pool's default object class (`create --class`), if it has one.
    pub(crate) class: Option<String>,
    pub(crate) addrs: Vec<String>,
    known: Option<PoolMap>,
    svc: Option<poolsvc::client::BlockingClient>,
    dir: PathBuf,
    pool: String,
}

/// The error of a pool-service read, with what to look at.
pub(crate) fn no_leader(e: poolsvc::SvcError) -> anyhow::Error {
    anyhow!(
        "pool service: no leader answered ({e}); is a majority of the engines up? \
         (`dpustack system query`)"
    )
}

/// Opens `pool` / `cont` of the system at `dir` (see [`Session`]). An
/// unknown pool or container is refused by the pool service's metadata
/// before any engine is asked; engines that do not answer within `timeout`
/// (an RPC's deadline) are DOWN for this command (none answering: an error)
/// and reported DOWN to the pool service by [`Session::finish`].
pub(crate) fn session(dir: &Path, pool: &str, cont: &str, timeout: Duration) -> Result<Session> {
    let ms = load(dir)?;
    let addrs: Vec<String> = ms.iter().map(|m| m.addr.clone()).collect();
    // the pool map: from the pool service when there is one, else the file
    let mut svc = svc_client(&ms)?;
    let svc_pool = match svc.as_mut() {
        Some(c) => {
            let st = c.read().map_err(no_leader)?;
            let p = st.pools.get(pool).cloned().with_context(|| {
                format!("pool {pool:?}: does not exist (not in the pool service)")
            })?;
            if !p.containers.contains_key(cont) {
                bail!(
                    "container {cont:?} in pool {pool:?}: does not exist (not in the pool service)"
                );
            }
            Some(p)
        }
        None => None,
    };
    let class = svc_pool
        .as_ref()
        .and_then(|p| p.props.get("class").cloned());
    let view = svc_pool.as_ref().map(|p| p.view().rebuild);
    let known = match svc_pool.map(|p| p.map()) {
        Some(m) => Some(m),
        None => load_map(dir)?,
    };
    let mut dc = DistClient::connect_with_map(
        &addrs,
        pool,
        cont,
        timeout,
        DetectorConfig::default(),
        known.clone(),
    )
    .map_err(|e| match e {
        obj::dist::Error::NoEngine => anyhow!(
            "no engine of the system at {} answers (`dpustack system query`)",
            dir.display()
        ),
        e => dist_error(e, &format!("container {cont:?} in pool {pool:?}")),
    })?;
    if svc.is_some() {
        // an engine whose pool-service replica has a newer map refuses our
        // requests (DER_STALE): the client fetches the map again from here
        if let Some(mut rep) = svc_client(&ms)? {
            // a replica of a write this client cannot reach: the pool
            // service is told (it probes it; only its own probes and the
            // engine's lease decide DOWN), the write waits for its decision
            rep.inner.deadline = Duration::from_secs(1);
            dc = dc.with_unreachable_reporter(Box::new(move |rank| {
                let req = poolsvc::msg::ClientRequest::ReportUnreachable { rank: rank as u32 };
                if let Err(e) = rep.request(req) {
                    tracing::warn!(rank, "report to the pool service: {e}");
                }
            }));
        }
        if let Some(mut src) = svc_client(&ms)? {
            let pool = pool.to_string();
            // with the rebuild view: which replicas are complete
            dc = dc
                .with_rebuild_view(view.unwrap_or_default())
                .with_view_source(Box::new(move || {
                    let st = src.read().map_err(|e| e.to_string())?;
                    st.pools
                        .get(&pool)
                        .map(|p| p.view())
                        .ok_or_else(|| format!("pool {pool} is not in the pool service"))
                }));
        }
    }
    Ok(Session {
        dc,
        class,
        addrs,
        known,
        svc,
        dir: dir.to_path_buf(),
        pool: pool.to_string(),
    })
}

/// A clear message for a distributed-client error about `what` (the
/// single-engine wording for the engine's own refusals).
pub(crate) fn dist_error(e: obj::dist::Error, what: &str) -> anyhow::Error {
    match e {
        obj::dist::Error::Engine { rank, addr, source } => {
            let unreachable = matches!(
                source,
                obj::client::Error::Unreachable { .. }
                    | obj::client::Error::Disconnected
                    | obj::client::Error::TimedOut
            );
            let msg = crate::cmd::obj::explain(source, what);
            if unreachable {
                anyhow!("engine rank {rank} ({addr}): {msg}")
            } else {
                msg
            }
        }
        obj::dist::Error::NoReplica => {
            anyhow!("{what}: no replica of the object answers (its engines are DOWN)")
        }
        e => anyhow!("{what}: {e}"),
    }
}

impl Session {
    /// Reports the engines this command found DOWN to the pool service (or
    /// saves the map to the file of a system without one) and notes the
    /// engines not serving.
    pub(crate) fn finish(mut self) -> Result<()> {
        let dc = &self.dc;
        if self.known.as_ref() != Some(dc.map()) {
            if let Some(c) = self.svc.as_mut() {
                // against the service's map now: the client may have refreshed
                let svc_map = c
                    .read()
                    .map_err(no_leader)?
                    .pools
                    .get(&self.pool)
                    .map(|p| p.map());
                if dc.refreshes() > 0 {
                    eprintln!(
                        "pool map refreshed {} time(s) after stale-map refusals (now version {})",
                        dc.refreshes(),
                        dc.sent_map_version().unwrap_or(0)
                    );
                }
                for r in 0..self.addrs.len() as u32 {
                    let was = svc_map
                        .as_ref()
                        .and_then(|k| k.target(r).ok())
                        .map(|t| t.state);
                    let now = dc.map().target(r).ok().map(|t| t.state);
                    if now == Some(obj::placement::TargetState::Down) && was != now {
                        // never set DOWN from here: a rank this client does
                        // not reach may be live (its lease running, serving
                        // others); the service probes it and decides
                        let req = poolsvc::msg::ClientRequest::ReportUnreachable { rank: r };
                        match c.request(req) {
                            Ok(_) => eprintln!(
                                "rank {r} did not answer this command: reported to the pool \
                                 service (it marks it DOWN only if its own probes fail)"
                            ),
                            Err(e) => eprintln!("pool service: report of rank {r}: {e}"),
                        }
                    }
                }
            } else {
                save_map(&self.dir, dc.map())?;
            }
        }
        let down: Vec<usize> = (0..self.addrs.len())
            .filter(|&r| {
                !dc.map()
                    .target(r as u32)
                    .is_ok_and(|t| t.state.is_serving())
            })
            .collect();
        if !down.is_empty() {
            eprintln!(
                "note: engines {down:?} are DOWN (map version {})",
                dc.map().version()
            );
        }
        Ok(())
    }
}

fn kv(
    dir: &Path,
    pool: &str,
    cont: &str,
    oid: &str,
    class: Option<&str>,
    args: &[String],
) -> Result<()> {
    // 5 s: a write waits for the pool service to mark a dead replica DOWN
    // (1.5 s by default) rather than going around it
    let mut s = session(dir, pool, cont, Duration::from_secs(5))?;
    let class = match class {
        Some(c) => c.to_string(),
        None => s.class.clone().unwrap_or_else(|| "RP_2G1".into()),
    };
    let oid = parse_oid(oid, ObjType::KvHashed, &class)?;
    let addrs = s.addrs.clone();
    let dc = &mut s.dc;
    match args {
        [op, key, value] if op == "put" => {
            dc.kv_put(oid, key.as_bytes(), value.as_bytes())?;
        }
        [op, key] if op == "get" => {
            let v = dc.kv_get(oid, key.as_bytes())?;
            std::io::stdout().write_all(&v)?;
            println!();
        }
        [op] if op == "where" => {
            let l = layout(oid, dc.map())?;
            println!("{oid} (map version {}):", dc.map().version());
            for (g, grp) in l.groups.iter().enumerate() {
                let ranks: Vec<String> = grp
                    .iter()
                    .map(|&t| {
                        let d = dc.map().target(t).map(|t| t.domain).unwrap_or(u32::MAX);
                        format!("rank {d} ({})", addrs[d as usize])
                    })
                    .collect();
                println!("  group {g}: {}", ranks.join(", "));
            }
        }
        _ => bail!("want `put KEY VALUE`, `get KEY` or `where`"),
    }
    s.finish()
}

/// `--class` / `--replicas` of `create`: the class name `kv` uses and the
/// replica count, checked against each other and the number of engines.
pub(crate) fn pool_class(
    class: Option<&str>,
    replicas: Option<u32>,
    engines: usize,
) -> Result<Option<(String, u32)>> {
    let full = |c: &str| -> String {
        match c.to_ascii_uppercase().as_str() {
            "RP_2" => "RP_2G1".into(),
            "RP_3" => "RP_3G1".into(),
            u => u.to_string(),
        }
    };
    let (name, reps) = match (class, replicas) {
        (None, None) => return Ok(None),
        (None, Some(1)) => ("S1".to_string(), 1),
        (None, Some(n)) => (format!("RP_{n}G1"), n),
        (Some(c), r) => {
            let name = full(c);
            let parsed =
                obj::types::ObjClass::parse(&name).map_err(|e| anyhow!("--class {c}: {e}"))?;
            let n = match parsed.redundancy {
                obj::types::Redundancy::None => 1,
                obj::types::Redundancy::Replicas(n) => u32::from(n),
                obj::types::Redundancy::Ec { .. } => {
                    bail!("--class {c}: erasure codes are not placed yet")
                }
            };
            if let Some(r) = r {
                if r != n {
                    bail!("--replicas {r} does not agree with --class {c} ({n} per object)");
                }
            }
            (name, n)
        }
    };
    if reps as usize > engines {
        bail!("{reps} replicas need {reps} engines (distinct fault domains); the system has {engines}");
    }
    Ok(Some((name, reps)))
}

fn pool_query(dir: &Path, pool: &str, json: bool) -> Result<()> {
    let ms = load(dir)?;
    let mut c = svc_client(&ms)?.context("this system runs no pool service")?;
    let (reply, served) = c.request(poolsvc::msg::ClientRequest::Read)?;
    let poolsvc::msg::ClientReply::State(st) = reply else {
        bail!("pool service: unexpected reply {reply:?}");
    };
    let p = st
        .pools
        .get(pool)
        .with_context(|| format!("no pool {pool:?} in the pool service"))?;
    let map = p.map();
    let rb = &p.rebuild;
    let rb_state = if rb.state.is_empty() {
        "idle"
    } else {
        &rb.state
    };
    if json {
        let v = serde_json::json!({
            "pool": pool,
            "leader": served.by,
            "map_version": map.version(),
            "targets": map.targets().iter().map(|t| serde_json::json!({
                "target": t.id, "rank": t.domain, "state": t.state.name(),
            })).collect::<Vec<_>>(),
            "containers": p.containers.iter().map(|(n, c)| (n.clone(), serde_json::json!(c.props))).collect::<serde_json::Map<_, _>>(),
            "props": p.props,
            "handles": p.handles.len(),
            "redundancy_lost": p.unclean(),
            "rebuild": {
                "state": rb_state,
                "kind": rb.kind,
                "version": rb.version,
                "pass": rb.pass,
                "objs_scanned": rb.objs_scanned,
                "keys_scanned": rb.keys_scanned,
                "objs_copied": rb.objs_copied,
                "recs_copied": rb.recs_copied,
                "bytes_copied": rb.bytes_copied,
                "reclaimed": rb.reclaimed,
                "reclaim": rb.reclaim,
                "elapsed_ms": rb.elapsed_ms,
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "pool {pool}: leader rank {} (after {} tries)",
        served.by, served.tries
    );
    println!("pool map version {}", map.version());
    println!("{:<7} {:<7} STATE", "TARGET", "RANK");
    for t in map.targets() {
        println!("{:<7} {:<7} {}", t.id, t.domain, t.state.name());
    }
    for (name, cont) in &p.containers {
        let props: Vec<String> = cont.props.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("container {name} {}", props.join(" "));
    }
    if !p.props.is_empty() {
        let props: Vec<String> = p.props.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("pool props {}", props.join(" "));
    }
    println!("open handles {}", p.handles.len());
    for name in p.unclean() {
        println!(
            "container {name}: REDUNDANCY LOST (status UNCLEAN, -DER_RF: {}); its I/O is refused \
             until `dpustack cont set-prop {pool} {name} --properties status:healthy --system DIR`",
            p.containers[&name]
                .props
                .get(poolsvc::state::LOST)
                .map_or("?", |s| s.as_str())
        );
    }
    if rb.version == 0 {
        println!("rebuild idle (never ran)");
    } else {
        println!(
            "rebuild {rb_state} ({}) to map version {} pass {}: {} objects / {} keys scanned, \
             {} objects / {} values / {} bytes copied, {} ms",
            rb.kind,
            rb.version,
            rb.pass,
            rb.objs_scanned,
            rb.keys_scanned,
            rb.objs_copied,
            rb.recs_copied,
            rb.bytes_copied,
            rb.elapsed_ms
        );
        if !rb.reclaim.is_empty() {
            println!(
                "reclaim {}: {} leftover dkeys deleted from engines that left their groups",
                rb.reclaim, rb.reclaimed
            );
        }
    }
    Ok(())
}
