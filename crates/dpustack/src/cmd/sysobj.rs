//! `dpustack pool|cont|obj|kv --system DIR`: the object CLI against a system
//! of several engines (`dpustack system start`), with the same subcommands,
//! output and errors as against one engine (`cmd::obj`).
//!
//! Pools and containers are made on every engine (by label; each engine has
//! its own UUIDs, the one shown is rank 0's) and recorded in the pool service
//! (`poolsvc`: the map, the containers, the pool's default class). Objects go
//! through `obj::dist::DistClient` on the pool service's map: placement,
//! replicated updates as DTX, reads from a serving replica, listings merged
//! over the object's groups. See docs/obj-dist.md ("CLI").

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use obj::client::{Client, PoolHandle};
use obj::rpc::msg::PoolInfo;
use obj::types::{Anchor, Iod, ObjType, ObjectId};

use crate::cmd::obj::{
    explain, parse_epoch, parse_oid, read_input, show_key, show_pool, write_output, ContCmd, KvCmd,
    ObjCmd, ObjRef, PoolCmd,
};
use crate::cmd::system::{self, dist_error, no_leader, Member};

/// The RPC deadline of the object commands: an engine silent for this long
/// is taken as DOWN (and reported so to the pool service), so not short on
/// a loaded machine.
const CLI_TIMEOUT: Duration = Duration::from_secs(5);
/// The bench's (1 MiB DTX writes from several clients queue behind fsyncs).
const BENCH_TIMEOUT: Duration = Duration::from_secs(15);

/// A management connection to one engine of the system.
fn engine(m: &Member) -> Result<Client> {
    Client::connect_with(&m.addr, Duration::from_secs(2)).map_err(|e| {
        anyhow!(
            "engine rank {} ({}): {}",
            m.rank,
            m.addr,
            explain(e, "engine")
        )
    })
}

fn svc(ms: &[Member]) -> Result<poolsvc::client::BlockingClient> {
    system::svc_client(ms)?.context(
        "this system runs no pool service (started by an older `system start`): \
         use `dpustack system create` / `system kv`",
    )
}

fn svc_write(c: &mut poolsvc::client::BlockingClient, cmd: poolsvc::state::Command) -> Result<()> {
    match c.write(cmd).map_err(no_leader)? {
        poolsvc::state::Reply::Refused(e) => bail!("pool service: {e}"),
        _ => Ok(()),
    }
}

/// The pool as the engines report it, added up (size, used, targets); the
/// UUID and container count are rank 0's (the first that answers).
fn pool_info(ms: &[Member], pool: &str) -> Result<(PoolInfo, Vec<usize>)> {
    let mut sum: Option<PoolInfo> = None;
    let mut missing = Vec::new();
    for m in ms {
        let r = engine(m).and_then(|c| {
            c.pool_query(pool, None)
                .and_then(|p| p.get())
                .map_err(|e| explain(e, &format!("pool {pool:?}")))
        });
        match r {
            Ok(p) => match &mut sum {
                None => sum = Some(p),
                Some(s) => {
                    s.size += p.size;
                    s.used += p.used;
                    s.targets += p.targets;
                }
            },
            Err(e) => {
                tracing::warn!(rank = m.rank, error = %e, "pool query");
                missing.push(m.rank);
            }
        }
    }
    let p =
        sum.with_context(|| format!("pool {pool:?}: no engine of the system answers for it"))?;
    Ok((p, missing))
}

/// Pool `label` of `bytes` (split evenly) on every engine and in the pool
/// service, with its default class; the engines' infos added up.
fn make_pool(
    ms: &[Member],
    label: &str,
    bytes: u64,
    class: Option<&(String, u32)>,
) -> Result<PoolInfo> {
    let mut c = svc(ms)?;
    if c.read().map_err(no_leader)?.pools.contains_key(label) {
        bail!("pool {label:?}: already exists");
    }
    let per = bytes / ms.len() as u64;
    let mut sum: Option<PoolInfo> = None;
    for m in ms {
        let e = engine(m)?;
        let p = e
            .pool_create(label, per, None)
            .and_then(|p| p.get())
            .map_err(|e| {
                let done: Vec<usize> = ms[..m.rank].iter().map(|m| m.rank).collect();
                anyhow!(
                    "engine rank {}: {} (made on ranks {done:?} already: \
                     `pool destroy --force {label}` removes them)",
                    m.rank,
                    explain(e, &format!("pool {label:?}"))
                )
            })?;
        match &mut sum {
            None => sum = Some(p),
            Some(s) => {
                s.size += p.size;
                s.used += p.used;
                s.targets += p.targets;
            }
        }
    }
    svc_write(
        &mut c,
        poolsvc::state::Command::CreatePool {
            pool: label.to_string(),
            domains: ms.len() as u32,
            per_domain: 1,
        },
    )?;
    if let Some((class, replicas)) = class {
        for (key, value) in [("class", class.clone()), ("replicas", replicas.to_string())] {
            svc_write(
                &mut c,
                poolsvc::state::Command::SetPoolProp {
                    pool: label.to_string(),
                    key: key.into(),
                    value,
                },
            )?;
        }
    }
    sum.context("a system without engines")
}

pub fn pool(cmd: PoolCmd, dir: &Path) -> Result<()> {
    let ms = system::load(dir)?;
    match cmd {
        PoolCmd::Create {
            label,
            size,
            class,
            replicas,
        } => {
            let bytes =
                bdev::spec::parse_size(&size).with_context(|| format!("bad size {size:?}"))?;
            let class = system::pool_class(class.as_deref(), replicas, ms.len())?;
            let p = make_pool(&ms, &label, bytes, class.as_ref())?;
            show_pool(&p);
            eprintln!(
                "on {} engines, pool map version 1{}",
                ms.len(),
                class.map_or(String::new(), |(c, r)| format!(
                    ", class {c} ({r} replica(s) per object)"
                ))
            );
        }
        PoolCmd::List => {
            let st = svc(&ms)?.read().map_err(no_leader)?;
            if st.pools.is_empty() {
                println!("no pools");
            }
            for name in st.pools.keys() {
                match pool_info(&ms, name) {
                    Ok((p, _)) => show_pool(&p),
                    Err(e) => println!("-  {name:<16} ({e})"),
                }
            }
        }
        PoolCmd::Query { pool } => {
            let mut c = svc(&ms)?;
            let (reply, served) = c
                .request(poolsvc::msg::ClientRequest::Read)
                .map_err(no_leader)?;
            let poolsvc::msg::ClientReply::State(st) = reply else {
                bail!("pool service: unexpected reply {reply:?}");
            };
            let sp = st
                .pools
                .get(&pool)
                .with_context(|| format!("pool {pool:?}: does not exist"))?;
            let (p, missing) = pool_info(&ms, &pool)?;
            show_pool(&p);
            let map = sp.map();
            let states: Vec<String> = map
                .targets()
                .iter()
                .map(|t| format!("rank {} {}", t.domain, t.state.name()))
                .collect();
            println!(
                "pool map version {} (pool service leader rank {}): {}",
                map.version(),
                served.by,
                states.join(", ")
            );
            if let Some(class) = sp.props.get("class") {
                println!(
                    "class {class}, {} replica(s) per object",
                    sp.props.get("replicas").map_or("?", |s| s.as_str())
                );
            }
            if !missing.is_empty() {
                println!("not answering (size/used without them): ranks {missing:?}");
            }
            for name in sp.unclean() {
                println!(
                    "container {name}: REDUNDANCY LOST (status UNCLEAN, -DER_RF); I/O refused until \
                     `dpustack cont set-prop {pool} {name} --properties status:healthy --system DIR`"
                );
            }
        }
        PoolCmd::Destroy { pool, force } => {
            let mut c = svc(&ms)?;
            let known = c.read().map_err(no_leader)?.pools.contains_key(&pool);
            let mut on = 0;
            for m in &ms {
                let e = engine(m)?;
                match e.pool_destroy(&pool, force, None).and_then(|p| p.get()) {
                    Ok(()) => on += 1,
                    // already gone there (an earlier destroy stopped half-way)
                    Err(obj::client::Error::Engine(obj::rpc::Status::NonExist)) if known => {}
                    Err(e) => {
                        return Err(anyhow!(
                            "engine rank {}: {}",
                            m.rank,
                            explain(e, &format!("pool {pool:?}"))
                        ))
                    }
                }
            }
            if known {
                svc_write(
                    &mut c,
                    poolsvc::state::Command::DestroyPool { pool: pool.clone() },
                )?;
            } else if on == 0 {
                bail!("pool {pool:?}: does not exist");
            }
            println!("pool {pool} destroyed");
        }
    }
    Ok(())
}

fn pool_connect(c: &Client, m: &Member, pool: &str) -> Result<PoolHandle> {
    c.pool_connect(pool, None)
        .and_then(|p| p.get())
        .map_err(|e| {
            anyhow!(
                "engine rank {}: {}",
                m.rank,
                explain(e, &format!("pool {pool:?}"))
            )
        })
}

/// The pool-service state, the pool checked to exist there.
fn svc_pool(
    ms: &[Member],
    pool: &str,
) -> Result<(poolsvc::client::BlockingClient, poolsvc::state::Pool)> {
    let mut c = svc(ms)?;
    let p = c
        .read()
        .map_err(no_leader)?
        .pools
        .get(pool)
        .cloned()
        .with_context(|| format!("pool {pool:?}: does not exist"))?;
    Ok((c, p))
}

/// Container `label` on every engine and in the pool service.
fn make_cont(
    ms: &[Member],
    c: &mut poolsvc::client::BlockingClient,
    pool: &str,
    label: &str,
    kv: &[(&str, &str)],
) -> Result<obj::rpc::msg::ContInfo> {
    let mut first = None;
    for m in ms {
        let e = engine(m)?;
        let poh = pool_connect(&e, m, pool)?;
        let ci = e
            .cont_create(&poh, label, kv, None)
            .and_then(|p| p.get())
            .map_err(|e| {
                anyhow!(
                    "engine rank {}: {}",
                    m.rank,
                    explain(e, &format!("container {label:?}"))
                )
            })?;
        first.get_or_insert(ci);
    }
    svc_write(
        c,
        poolsvc::state::Command::CreateCont {
            pool: pool.to_string(),
            cont: label.to_string(),
            props: kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
    )?;
    first.context("a system without engines")
}

pub fn cont(cmd: ContCmd, dir: &Path) -> Result<()> {
    let ms = system::load(dir)?;
    match cmd {
        ContCmd::Create { pool, label, props } => {
            let (mut c, sp) = svc_pool(&ms, &pool)?;
            if sp.containers.contains_key(&label) {
                bail!("container {label:?}: already exists");
            }
            let mut kv = Vec::new();
            for p in &props {
                let (k, v) = p
                    .split_once('=')
                    .with_context(|| format!("property {p:?} is not KEY=VALUE"))?;
                kv.push((k, v));
            }
            let ci = make_cont(&ms, &mut c, &pool, &label, &kv)?;
            println!("{}  {}", obj::types::Uuid::from_bytes(ci.uuid), ci.label);
        }
        ContCmd::List { pool } => {
            let (_, sp) = svc_pool(&ms, &pool)?;
            // the engines' view (UUID, snapshots, properties) from the first
            // that answers; the containers are the pool service's
            let mut infos = None;
            for m in &ms {
                let r = engine(m).and_then(|e| {
                    let poh = pool_connect(&e, m, &pool)?;
                    e.cont_list(&poh, None)
                        .and_then(|p| p.get())
                        .map_err(|e| explain(e, "containers"))
                });
                match r {
                    Ok(v) => {
                        infos = Some(v);
                        break;
                    }
                    Err(e) => tracing::warn!(rank = m.rank, error = %e, "container list"),
                }
            }
            let infos =
                infos.context("no engine of the system answers (`dpustack system query`)")?;
            if sp.containers.is_empty() {
                println!("no containers");
            }
            for name in sp.containers.keys() {
                match infos.iter().find(|ci| &ci.label == name) {
                    Some(ci) => {
                        let props: Vec<String> =
                            ci.props.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        println!(
                            "{}  {:<16} snapshots {}  {}",
                            obj::types::Uuid::from_bytes(ci.uuid),
                            ci.label,
                            ci.snapshots.len(),
                            props.join(",")
                        );
                    }
                    None => println!(
                        "-  {name:<16} (in the pool service, not on the engine that answered)"
                    ),
                }
            }
        }
        ContCmd::Destroy { pool, cont, force } => {
            let (mut c, sp) = svc_pool(&ms, &pool)?;
            if !sp.containers.contains_key(&cont) {
                bail!("container {cont:?}: does not exist");
            }
            for m in &ms {
                let e = engine(m)?;
                let poh = pool_connect(&e, m, &pool)?;
                match e
                    .cont_destroy(&poh, &cont, force, None)
                    .and_then(|p| p.get())
                {
                    Ok(()) | Err(obj::client::Error::Engine(obj::rpc::Status::NonExist)) => {}
                    Err(e) => {
                        return Err(anyhow!(
                            "engine rank {}: {}",
                            m.rank,
                            explain(e, &format!("container {cont:?}"))
                        ))
                    }
                }
            }
            svc_write(
                &mut c,
                poolsvc::state::Command::DestroyCont {
                    pool: pool.clone(),
                    cont: cont.clone(),
                },
            )?;
            println!("container {cont} destroyed");
        }
        ContCmd::Query { pool, cont } => {
            let (_, sp) = svc_pool(&ms, &pool)?;
            let c = sp
                .containers
                .get(&cont)
                .with_context(|| format!("container {cont:?}: does not exist"))?;
            let status = c
                .props
                .get(poolsvc::state::STATUS)
                .map_or(poolsvc::state::HEALTHY, |s| s.as_str());
            println!("container {cont} in pool {pool}");
            println!(
                "status {status}{}",
                if status == poolsvc::state::UNCLEAN {
                    format!(
                        " (redundancy lost, -DER_RF: {}; I/O refused until \
                         `dpustack cont set-prop {pool} {cont} --properties status:healthy --system DIR`)",
                        c.props
                            .get(poolsvc::state::LOST)
                            .map_or("?", |s| s.as_str())
                    )
                } else {
                    String::new()
                }
            );
            println!("redundancy factor {}", sp.cont_rf(c));
            for (k, v) in &c.props {
                println!("{k}={v}");
            }
        }
        ContCmd::SetProp {
            pool,
            cont,
            properties,
        } => {
            let (mut c, sp) = svc_pool(&ms, &pool)?;
            if !sp.containers.contains_key(&cont) {
                bail!("container {cont:?}: does not exist");
            }
            for kv in properties.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = kv
                    .split_once(':')
                    .or_else(|| kv.split_once('='))
                    .with_context(|| format!("property {kv:?} is not KEY:VALUE"))?;
                svc_write(
                    &mut c,
                    poolsvc::state::Command::SetContProp {
                        pool: pool.clone(),
                        cont: cont.clone(),
                        key: k.trim().to_string(),
                        value: v.trim().to_string(),
                    },
                )?;
                println!("container {cont}: {k} set to {v}");
            }
        }
        ContCmd::Snap { .. } => bail!(
            "container snapshots are NOT SUPPORTED against a system yet: each engine would \
             take its own epoch (there is no system-wide snapshot epoch); use one engine (--engine)"
        ),
    }
    Ok(())
}

/// The object class of a numeric OID against a system: `--class`, else the
/// pool's (`pool create --class`), else RP_2G1 (S1 with one engine).
fn class_of(o: &ObjRef, s: &system::Session) -> String {
    let c = o
        .class
        .clone()
        .or_else(|| s.class.clone())
        .unwrap_or_else(|| if s.addrs.len() == 1 { "S1" } else { "RP_2G1" }.to_string());
    match c.to_ascii_uppercase().as_str() {
        "RP_2" => "RP_2G1".into(),
        "RP_3" => "RP_3G1".into(),
        _ => c,
    }
}

fn open(o: &ObjRef, dir: &Path, otype: ObjType) -> Result<(system::Session, ObjectId)> {
    let s = system::session(dir, &o.pool, &o.cont, CLI_TIMEOUT)?;
    let oid = parse_oid(&o.oid, otype, &class_of(o, &s))?;
    Ok((s, oid))
}

pub fn object(cmd: ObjCmd, dir: &Path) -> Result<()> {
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
            let (mut s, oid) = open(&o, dir, ObjType::MultiHashed)?;
            let e =
                s.dc.update(
                    oid,
                    dkey.as_bytes(),
                    &[Iod::single(akey.as_str(), data.len() as u64)],
                    vec![data],
                )
                .map_err(|e| dist_error(e, &format!("object {oid}")))?;
            eprintln!("written at epoch {:#x} (object {oid})", e.0);
            s.finish()
        }
        ObjCmd::Get {
            o,
            dkey,
            akey,
            out,
            epoch,
        } => {
            let (mut s, oid) = open(&o, dir, ObjType::MultiHashed)?;
            let epoch = epoch.as_deref().map(parse_epoch).transpose()?;
            let v =
                s.dc.fetch_at(
                    oid,
                    epoch,
                    dkey.as_bytes(),
                    &[Iod::single(akey.as_str(), 0)],
                )
                .map_err(|e| dist_error(e, &format!("object {oid}")))?;
            let v = v.into_iter().next().unwrap_or_default();
            if v.is_empty() {
                bail!("object {oid}: no value under dkey {dkey:?} akey {akey:?}");
            }
            write_output(out.as_ref(), &v)?;
            s.finish()
        }
        ObjCmd::List { o, dkey, epoch } => {
            let (mut s, oid) = open(&o, dir, ObjType::MultiHashed)?;
            let epoch = epoch.as_deref().map(parse_epoch).transpose()?;
            let mut a = Anchor::default();
            let mut n = 0;
            while !a.is_eof() {
                let (keys, na) = match &dkey {
                    None => s.dc.list_dkeys(oid, epoch, &a, 256),
                    Some(d) => s.dc.list_akeys(oid, epoch, d.as_bytes(), &a, 256),
                }
                .map_err(|e| dist_error(e, "listing"))?;
                a = na;
                for k in keys {
                    println!("{}", show_key(&k));
                    n += 1;
                }
            }
            eprintln!("{n} key(s)");
            s.finish()
        }
        ObjCmd::Punch { o, dkey, akey } => {
            let (mut s, oid) = open(&o, dir, ObjType::MultiHashed)?;
            let r = match (&dkey, &akey) {
                (None, _) => s.dc.punch_obj(oid),
                (Some(d), None) => s.dc.punch_dkey(oid, d.as_bytes()),
                (Some(d), Some(a)) => s.dc.punch_akeys(oid, d.as_bytes(), &[a.as_bytes()]),
            };
            r.map_err(|e| dist_error(e, &format!("object {oid}")))?;
            eprintln!("punched");
            s.finish()
        }
    }
}

pub fn kv(cmd: KvCmd, dir: &Path) -> Result<()> {
    match cmd {
        KvCmd::Put { o, key, file } => {
            let data = read_input(file.as_ref())?;
            if data.is_empty() {
                bail!("empty value (use `kv remove` to remove a key)");
            }
            let (mut s, oid) = open(&o, dir, ObjType::KvHashed)?;
            s.dc.kv_put(oid, key.as_bytes(), &data)
                .map_err(|e| dist_error(e, &format!("key {key:?}")))?;
            s.finish()
        }
        KvCmd::Get { o, key, out } => {
            let (mut s, oid) = open(&o, dir, ObjType::KvHashed)?;
            let v =
                s.dc.kv_get(oid, key.as_bytes())
                    .map_err(|e| dist_error(e, &format!("key {key:?}")))?;
            write_output(out.as_ref(), &v)?;
            s.finish()
        }
        KvCmd::Remove { o, key } => {
            let (mut s, oid) = open(&o, dir, ObjType::KvHashed)?;
            s.dc.kv_remove(oid, key.as_bytes())
                .map_err(|e| dist_error(e, &format!("key {key:?}")))?;
            s.finish()
        }
        KvCmd::List { o } => {
            let (mut s, oid) = open(&o, dir, ObjType::KvHashed)?;
            let mut a = Anchor::default();
            while !a.is_eof() {
                let (keys, na) =
                    s.dc.list_dkeys(oid, None, &a, 256)
                        .map_err(|e| dist_error(e, "listing"))?;
                for k in keys {
                    println!("{}", show_key(&k));
                }
                a = na;
            }
            s.finish()
        }
    }
}

// ---- bench obj --system -----------------------------------------------------

/// The workloads of `bench obj`, as `bench obj --system` runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    IorEasyWrite,
    IorEasyRead,
    IorHardWrite,
    IorHardRead,
    MdEasyCreate,
    MdEasyStat,
    MdHardWrite,
    MdHardRead,
}

impl Work {
    const ALL: [Work; 8] = [
        Work::IorEasyWrite,
        Work::IorEasyRead,
        Work::IorHardWrite,
        Work::IorHardRead,
        Work::MdEasyCreate,
        Work::MdEasyStat,
        Work::MdHardWrite,
        Work::MdHardRead,
    ];
    fn name(self) -> &'static str {
        match self {
            Work::IorEasyWrite => "ior-easy write",
            Work::IorEasyRead => "ior-easy read",
            Work::IorHardWrite => "ior-hard write",
            Work::IorHardRead => "ior-hard read",
            Work::MdEasyCreate => "mdtest-easy create",
            Work::MdEasyStat => "mdtest-easy stat",
            Work::MdHardWrite => "mdtest-hard write",
            Work::MdHardRead => "mdtest-hard read",
        }
    }
    fn group(self) -> &'static str {
        let n = self.name();
        &n[..n.find(' ').unwrap_or(n.len())]
    }
}

const MIB: u64 = 1 << 20;
/// ior-hard's record (IO500's 47008 bytes) and records per dkey (a ~1 MiB
/// chunk of whole records, as an array's chunking would group them).
const HARD: u64 = 47_008;
const HARD_PER_DKEY: u64 = 22;

/// What the client threads share for one run: the shared objects' write
/// counters (readers read what was written).
struct Shared {
    hard_written: std::sync::atomic::AtomicU64,
    md_hard_written: std::sync::atomic::AtomicU64,
    next: std::sync::atomic::AtomicU64,
}

/// One client thread's part of one workload for `t`: operations done and
/// their latencies (ns). `easy_written` is this thread's ior-easy / mdtest-
/// easy count of the run (set by the write, used by the read).
#[allow(clippy::too_many_arguments)]
fn work(
    dc: &mut obj::dist::DistClient,
    w: Work,
    run: u64,
    tid: u64,
    class: obj::types::ObjClass,
    t: Duration,
    sh: &Shared,
    easy_written: &mut [u64; 2],
) -> Result<(u64, Vec<u64>)> {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Instant;
    let gen = |lo: u64, ty: ObjType| ObjectId::generate(0, lo, ty, class);
    // object numbers: run in bits 40.., workload in 32..40, thread in 24..32
    let easy_oid = gen((run << 40) | (1 << 32) | (tid << 24), ObjType::MultiHashed)?;
    let hard_oid = gen((run << 40) | (2 << 32), ObjType::MultiHashed)?;
    let md_base = (run << 40) | (3 << 32) | (tid << 24);
    let md_hard = gen((run << 40) | (4 << 32), ObjType::KvHashed)?;
    let buf = vec![0xa5u8; MIB as usize];
    let rec = vec![0x3cu8; HARD as usize];
    let small = [7u8; 64];
    let val = vec![0x11u8; 3901];
    let mut lat = Vec::with_capacity(1 << 14);
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < t {
        let t0 = Instant::now();
        match w {
            Work::IorEasyWrite => {
                dc.array_write(easy_oid, &i.to_be_bytes(), b"a", 0, &buf)?;
                easy_written[0] = i + 1;
            }
            Work::IorEasyRead => {
                let d = i % easy_written[0].max(1);
                let v = dc.array_read(easy_oid, &d.to_be_bytes(), b"a", 0, MIB)?;
                if v.len() as u64 != MIB || v[0] != 0xa5 {
                    bail!("ior-easy read: {} bytes, not what was written", v.len());
                }
            }
            Work::IorHardWrite => {
                let r = sh.next.fetch_add(1, Relaxed);
                let (d, off) = (r / HARD_PER_DKEY, (r % HARD_PER_DKEY) * HARD);
                dc.array_write(hard_oid, &d.to_be_bytes(), b"a", off, &rec)?;
                sh.hard_written.fetch_max(r + 1, Relaxed);
            }
            Work::IorHardRead => {
                let n = sh.hard_written.load(Relaxed).max(1);
                let r = (i * 7919 + tid) % n;
                let (d, off) = (r / HARD_PER_DKEY, (r % HARD_PER_DKEY) * HARD);
                let v = dc.array_read(hard_oid, &d.to_be_bytes(), b"a", off, HARD)?;
                if v.len() as u64 != HARD {
                    bail!("ior-hard read: {} bytes", v.len());
                }
            }
            Work::MdEasyCreate => {
                dc.kv_put(gen(md_base + i, ObjType::KvHashed)?, b"stat", &small)?;
                easy_written[1] = i + 1;
            }
            Work::MdEasyStat => {
                let o = gen(md_base + i % easy_written[1].max(1), ObjType::KvHashed)?;
                if dc.kv_get(o, b"stat")?.len() != small.len() {
                    bail!("mdtest-easy stat: wrong size");
                }
            }
            Work::MdHardWrite => {
                let k = sh.next.fetch_add(1, Relaxed);
                dc.kv_put(md_hard, &k.to_be_bytes(), &val)?;
                sh.md_hard_written.fetch_max(k + 1, Relaxed);
            }
            Work::MdHardRead => {
                let n = sh.md_hard_written.load(Relaxed).max(1);
                let k = (i * 7919 + tid) % n;
                if dc.kv_get(md_hard, &k.to_be_bytes())?.len() != val.len() {
                    bail!("mdtest-hard read: wrong size");
                }
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64);
        i += 1;
    }
    Ok((i, lat))
}

/// `dpustack bench obj --system DIR`: the four workloads of `bench obj`
/// against a running system (a pool `bench-PID` of the chosen class, made
/// and destroyed by the bench), `--clients` threads with one operation in
/// flight each (a `DistClient` each: DTX updates, reads from a replica),
/// next to the same-run baselines of `bench obj`.
pub fn bench(args: &crate::cmd::bench::BenchArgs, dir: &Path) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure, Report};
    use std::sync::atomic::AtomicU64;
    use std::sync::{mpsc, Arc};
    let t = args.run_time();
    let runs = args.runs();
    let clients = args.clients.max(1);
    let ms = system::load(dir)?;
    let n = ms.len();
    let class_name = args
        .class
        .clone()
        .unwrap_or_else(|| if n == 1 { "S1" } else { "RP_2" }.to_string());
    let (class_full, replicas) =
        system::pool_class(Some(&class_name), None, n)?.context("no class")?;
    let class = obj::types::ObjClass::parse(&class_full).map_err(|e| anyhow!("--class: {e}"))?;
    let only = std::env::var("DPUSTACK_BENCH_OBJ_ONLY").ok();
    let want = |w: Work| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x.trim() == w.group()))
    };
    let pool = format!("bench-{}", std::process::id());
    let tmp = std::env::temp_dir().join(format!("dpustack-bench-sys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    crate::cmd::obj::tune_malloc();
    make_pool(
        &ms,
        &pool,
        (16u64 << 30) * n as u64,
        Some(&(class_full.clone(), replicas)),
    )?;
    let result = (|| -> Result<Report> {
        let mut c = svc(&ms)?;
        make_cont(&ms, &mut c, &pool, "b", &[])?;
        let bar = if args.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(4 + 8 * runs as u64)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let med = |v: &mut Vec<f64>| median(v).unwrap_or(0.0);
        let base = |name: &str, f: &mut dyn FnMut() -> Result<f64>| -> Result<f64> {
            bar.set_message(name.to_string());
            let mut v = Vec::new();
            for _ in 0..runs {
                v.push(f()?);
            }
            bar.inc(1);
            Ok(med(&mut v))
        };
        // the same-run baselines of `bench obj`
        let tcp = base("raw TCP loopback", &mut || {
            Ok(netio::baseline::tcp_loopback_bw(t)?)
        })?;
        let raw_bdev = base("raw file bdev", &mut || {
            crate::cmd::obj::raw_bdev_write_bw(&tmp, t)
        })?;
        let raw_sync = base("raw file bdev durable 4 KiB", &mut || {
            crate::cmd::obj::raw_bdev_sync_iops(&tmp, 32, t)
        })?;
        let nvmf = base("NVMe/TCP 4 KiB randread", &mut || {
            crate::cmd::obj::nvmf_4k_iops(t)
        })?;

        // the client threads: a session (DistClient) each, jobs by channel
        type Job = (Work, u64, Arc<Shared>);
        type Done = Result<(u64, Vec<u64>)>;
        let mut workers = Vec::new();
        for tid in 0..clients as u64 {
            let (jtx, jrx) = mpsc::channel::<Job>();
            let (dtx, drx) = mpsc::channel::<Done>();
            let dir = dir.to_path_buf();
            let pool = pool.clone();
            let h = std::thread::spawn(move || {
                let mut s = match system::session(&dir, &pool, "b", BENCH_TIMEOUT) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = dtx.send(Err(e));
                        return;
                    }
                };
                let _ = dtx.send(Ok((0, Vec::new())));
                let mut written = [0u64; 2];
                while let Ok((w, run, sh)) = jrx.recv() {
                    let r = work(&mut s.dc, w, run, tid, class, t, &sh, &mut written)
                        .map_err(|e| e.context(format!("client {tid}: {}", w.name())));
                    if dtx.send(r).is_err() {
                        break;
                    }
                }
            });
            workers.push((jtx, drx, h));
        }
        for (_, drx, _) in &workers {
            drx.recv().context("a client thread died")??;
        }
        let mut fig: std::collections::BTreeMap<&str, (Vec<f64>, benchkit::Samples)> =
            Default::default();
        for run in 0..runs as u64 {
            let sh = Arc::new(Shared {
                hard_written: AtomicU64::new(0),
                md_hard_written: AtomicU64::new(0),
                next: AtomicU64::new(0),
            });
            for w in Work::ALL {
                if !want(w) {
                    bar.inc(1);
                    continue;
                }
                bar.set_message(w.name());
                if matches!(w, Work::MdHardWrite) {
                    sh.next.store(0, std::sync::atomic::Ordering::Relaxed);
                }
                let t0 = std::time::Instant::now();
                for (jtx, _, _) in &workers {
                    jtx.send((w, run, sh.clone()))
                        .map_err(|_| anyhow!("a client thread died"))?;
                }
                let (mut ops, mut lat) = (0u64, benchkit::Samples::with_capacity(1 << 16));
                for (_, drx, _) in &workers {
                    let (o, l) = drx.recv().context("a client thread died")??;
                    ops += o;
                    for ns in l {
                        lat.push_ns(ns);
                    }
                }
                let el = t0.elapsed().as_secs_f64();
                let v = if matches!(w, Work::IorEasyWrite | Work::IorEasyRead) {
                    (ops * MIB) as f64 / el
                } else {
                    ops as f64 / el
                };
                let e = fig
                    .entry(w.name())
                    .or_insert_with(|| (Vec::new(), benchkit::Samples::default()));
                e.0.push(v);
                e.1 = lat; // the last run's
                bar.inc(1);
            }
        }
        drop(workers); // the threads end when their job channel closes
        bar.finish_and_clear();
        let mut r = Report::new("obj");
        let sys = format!(
            "{n} engine{}, {class_full}, {clients} client{}",
            if n == 1 { "" } else { "s" },
            if clients == 1 { "" } else { "s" }
        );
        for w in Work::ALL {
            let Some((vals, lat)) = fig.get_mut(w.name()) else {
                continue;
            };
            let v = med(vals);
            let s = lat.summary();
            let lat_txt = s.map_or(String::new(), |s| {
                format!(
                    ", p50 {:.0} us p99 {:.0} us",
                    s.p50_ns as f64 / 1e3,
                    s.p99_ns as f64 / 1e3
                )
            });
            let detail = serde_json::json!({
                "system": dir.display().to_string(),
                "engines": n,
                "class": class_full,
                "clients": clients,
                "runs": vals,
                "p50_us": s.map(|s| s.p50_ns as f64 / 1e3),
                "p99_us": s.map(|s| s.p99_ns as f64 / 1e3),
            });
            let name = w.name();
            let f = if name.starts_with("ior-easy") {
                Figure::new(
                    format!("{name} 1 MiB ({sys}{lat_txt})"),
                    v / 1e6,
                    "MB/s",
                    "raw TCP loopback",
                    tcp / 1e6,
                    Better::Higher,
                )
            } else {
                Figure::new(
                    format!("{name} ({sys}{lat_txt})"),
                    v,
                    "ops/s",
                    "NVMe/TCP 4 KiB randread (null, qd 32)",
                    nvmf,
                    Better::Higher,
                )
            };
            r.push(f.with_detail(detail));
            if matches!(
                w,
                Work::IorHardWrite | Work::MdEasyCreate | Work::MdHardWrite
            ) {
                r.push(Figure::new(
                    format!("{name} ({sys})"),
                    v,
                    "ops/s",
                    "raw file bdev 4 KiB writes, qd 32 + one flush per round",
                    raw_sync,
                    Better::Higher,
                ));
            }
            if w == Work::IorEasyWrite {
                r.push(Figure::new(
                    format!("{name} 1 MiB ({sys})"),
                    v / 1e6,
                    "MB/s",
                    "raw file bdev 1 MiB write (qd 8, + flush)",
                    raw_bdev / 1e6,
                    Better::Higher,
                ));
            }
        }
        r.note(format!(
            "{runs} run(s) of {:.2} s each, medians; against the system at {} ({sys}: each client a DistClient with one operation in flight, updates as DTX through the leader replica, reads from a serving replica); \
             latency percentiles of the last run over all clients; the baselines in this process, raw bdevs in {}",
            t.as_secs_f64(),
            dir.display(),
            tmp.display()
        ));
        r.note(format!(
            "ior-easy = 1 MiB array writes/reads, one dkey per MiB, an object per client; ior-hard = 47008-byte records into one object, {HARD_PER_DKEY} per dkey; \
             mdtest-easy = one 64-byte KV put/get per new object; mdtest-hard = 3901-byte values under many keys of one object"
        ));
        Ok(r)
    })();
    // the bench's pool goes, whatever happened
    if let Err(e) = pool_destroy_quiet(&ms, &pool) {
        tracing::warn!(error = %e, pool, "bench obj --system: could not destroy its pool");
        eprintln!("warning: the bench's pool {pool} was not destroyed: {e}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// Destroys `pool` on every engine (forced) and in the pool service.
fn pool_destroy_quiet(ms: &[Member], pool: &str) -> Result<()> {
    for m in ms {
        let e = engine(m)?;
        match e.pool_destroy(pool, true, None).and_then(|p| p.get()) {
            Ok(()) | Err(obj::client::Error::Engine(obj::rpc::Status::NonExist)) => {}
            Err(e) => bail!("engine rank {}: {}", m.rank, explain(e, pool)),
        }
    }
    svc_write(
        &mut svc(ms)?,
        poolsvc::state::Command::DestroyPool {
            pool: pool.to_string(),
        },
    )
}

/// `dpustack pool|cont|obj|kv`: with `--system DIR` (or `DPUSTACK_SYSTEM`)
/// against that system, else against one engine (`cmd::obj::run`).
pub fn run(cmd: crate::cmd::obj::Cmd, cfg: &crate::config::Config) -> Result<()> {
    use crate::cmd::obj::{At, Cmd};
    match cmd {
        Cmd::Pool {
            at: At {
                system: Some(dir), ..
            },
            cmd,
        } => pool(cmd, &dir),
        Cmd::Cont {
            at: At {
                system: Some(dir), ..
            },
            cmd,
        } => cont(cmd, &dir),
        Cmd::Obj {
            at: At {
                system: Some(dir), ..
            },
            cmd,
        } => object(cmd, &dir),
        Cmd::Kv {
            at: At {
                system: Some(dir), ..
            },
            cmd,
        } => kv(cmd, &dir),
        cmd => crate::cmd::obj::run(cmd, cfg),
    }
}
