//! SPDK's methods on the node's state: the bdev registry, the NVMe-oF target
//! (`nvmf::Tgt`, changed while serving) and the transports; `save_config` writes
//! SPDK's JSON config format, [`Mgmt::load_config`] plays one back.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Map, Value};
use tracing::{info, warn};

use nvmf::subsystem::{Subsystem, SubsystemType};
use nvmf::{Listen, ListenerHandle, Tgt, TransportId};

use crate::jsonrpc::{params_object, Dispatch, RpcError, EINVAL, ENOMEM, ENOTSUP};

/// The methods served, in `rpc_get_methods` order.
pub const METHODS: &[&str] = &[
    "rpc_get_methods",
    "spdk_get_version",
    "framework_wait_init",
    "framework_get_subsystems",
    "framework_get_config",
    "save_config",
    "load_config",
    "bdev_malloc_create",
    "bdev_malloc_delete",
    "bdev_null_create",
    "bdev_null_delete",
    "bdev_uring_create",
    "bdev_uring_delete",
    "bdev_aio_create",
    "bdev_aio_delete",
    "bdev_get_bdevs",
    "bdev_get_iostat",
    "bdev_wait_for_examine",
    "nvmf_create_transport",
    "nvmf_get_transports",
    "nvmf_create_subsystem",
    "nvmf_delete_subsystem",
    "nvmf_subsystem_add_ns",
    "nvmf_subsystem_remove_ns",
    "nvmf_subsystem_add_listener",
    "nvmf_subsystem_remove_listener",
    "nvmf_subsystem_add_host",
    "nvmf_subsystem_remove_host",
    "nvmf_subsystem_allow_any_host",
    "nvmf_get_subsystems",
    "nvmf_subsystem_get_controllers",
    "nvmf_subsystem_get_qpairs",
    "nvmf_subsystem_get_listeners",
    "nvmf_get_stats",
];

/// What kind of bdev (what `save_config` re-creates it with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BdevKind {
    Malloc,
    Null,
    /// A file over io_uring made by `bdev_uring_create`.
    Uring,
    /// The same file bdev, made by `bdev_aio_create` (saved as that).
    Aio,
    /// Made outside the RPC (a target file's `file` bdev): listed, not saved.
    Other,
}

struct BdevEntry {
    kind: BdevKind,
    uuid: String,
    /// The file of a uring/aio bdev.
    file: Option<String>,
    dev: Arc<dyn bdev::BlockDevice>,
}

struct ListenerEntry {
    nqn: String,
    trid: TransportId,
}

#[derive(Default)]
struct State {
    bdevs: Vec<BdevEntry>,
    transports: Vec<Map<String, Value>>,
    listeners: Vec<ListenerEntry>,
    nvmf: Option<(Arc<Tgt>, ListenerHandle)>,
    next_malloc: u32,
    /// When the management plane started (`ticks` of `bdev_get_iostat`, ns).
    epoch: Option<std::time::Instant>,
    /// Bytes all malloc bdevs made over RPC may hold together.
    malloc_budget: u64,
    /// `bdev_malloc_create` calls refused by the budget.
    malloc_refused: u64,
}

/// The default malloc budget: half of the machine's memory (`MemTotal`),
/// 1 GiB when /proc/meminfo cannot be read. A bigger request would abort the
/// process when the allocation fails, or starve the node.
fn default_malloc_budget() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib * 1024 / 2)
        .unwrap_or(1 << 30)
}

/// Methods served by another part of the node (`dpustack_*`).
type Extra = (Vec<String>, Arc<dyn Dispatch + Send + Sync>);

/// The management plane's view of the node: implements [`Dispatch`].
pub struct Mgmt {
    state: Mutex<State>,
    extra: Mutex<Vec<Extra>>,
}

impl std::fmt::Debug for Mgmt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mgmt").finish_non_exhaustive()
    }
}

fn uuid_str(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// SPDK's trtype string.
fn trtype_str(t: nvme::log::TrType) -> &'static str {
    match t {
        nvme::log::TrType::Rdma => "RDMA",
        nvme::log::TrType::Tcp => "TCP",
        nvme::log::TrType::Fc => "FC",
        nvme::log::TrType::Loop => "LOOP",
        nvme::log::TrType::Unknown(_) => "UNKNOWN",
    }
}

fn parse_trtype(s: &str) -> Option<nvme::log::TrType> {
    match s.to_ascii_uppercase().as_str() {
        "TCP" => Some(nvme::log::TrType::Tcp),
        "RDMA" => Some(nvme::log::TrType::Rdma),
        _ => None,
    }
}

/// A new bdev UUID (name-, time- and counter-derived; SPDK's are random).
fn new_uuid(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u32);
    let seed = format!(
        "{name}/{}/{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    uuid_str(&nvmf::subsystem::derive_id(&seed, t))
}

/// Typed access to an SPDK params object with SPDK's decoder rules: unknown keys
/// and wrong types are "Invalid parameters".
struct Params {
    m: Map<String, Value>,
}

impl Params {
    fn new(p: Option<&Value>, known: &[&str]) -> Result<Params, RpcError> {
        let m = params_object(p)?;
        if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(RpcError::params(format!(
                "Invalid parameters: unknown key {k:?}"
            )));
        }
        Ok(Params { m })
    }
    fn opt_str(&self, k: &str) -> Result<Option<String>, RpcError> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(RpcError::params(format!(
                "Invalid parameters: {k} must be a string"
            ))),
        }
    }
    fn str(&self, k: &str) -> Result<String, RpcError> {
        self.opt_str(k)?
            .ok_or_else(|| RpcError::params(format!("Invalid parameters: missing {k}")))
    }
    fn opt_u64(&self, k: &str) -> Result<Option<u64>, RpcError> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                RpcError::params(format!(
                    "Invalid parameters: {k} must be an unsigned integer"
                ))
            }),
        }
    }
    fn u64(&self, k: &str) -> Result<u64, RpcError> {
        self.opt_u64(k)?
            .ok_or_else(|| RpcError::params(format!("Invalid parameters: missing {k}")))
    }
    fn opt_bool(&self, k: &str) -> Result<Option<bool>, RpcError> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(RpcError::params(format!(
                "Invalid parameters: {k} must be a bool"
            ))),
        }
    }
    fn obj(&self, k: &str, known: &[&str]) -> Result<Params, RpcError> {
        match self.m.get(k) {
            Some(v @ Value::Object(_)) => Params::new(Some(v), known),
            None => Err(RpcError::params(format!("Invalid parameters: missing {k}"))),
            Some(_) => Err(RpcError::params(format!(
                "Invalid parameters: {k} must be an object"
            ))),
        }
    }
}

const BDEV_CREATE_KEYS: &[&str] = &[
    "name",
    "num_blocks",
    "block_size",
    "physical_block_size",
    "uuid",
    "optimal_io_boundary",
    "md_size",
    "md_interleave",
    "dif_type",
    "dif_is_head_of_md",
    "dif_pi_format",
    "numa_id",
    "preferred_write_alignment",
    "preferred_write_granularity",
    "optimal_write_size",
    "preferred_unmap_alignment",
    "preferred_unmap_granularity",
];

const TRANSPORT_KEYS: &[&str] = &[
    "trtype",
    "tgt_name",
    "max_queue_depth",
    "max_io_qpairs_per_ctrlr",
    "max_qpairs_per_ctrlr",
    "in_capsule_data_size",
    "max_io_size",
    "io_unit_size",
    "max_aq_depth",
    "num_shared_buffers",
    "buf_cache_size",
    "iobuf_small_cache_size",
    "iobuf_large_cache_size",
    "zcopy",
    "num_cqe",
    "max_srq_depth",
    "no_srq",
    "c2h_success",
    "dif_insert_or_strip",
    "sock_priority",
    "acceptor_backlog",
    "abort_timeout_sec",
    "no_wr_batching",
    "control_msg_num",
    "disable_mappable_bar0",
    "disable_adaptive_irq",
    "disable_shadow_doorbells",
    "disable_command_passthru",
    "ack_timeout",
    "data_wr_pool_size",
    "disable_command_passthru",
    "kas",
    "min_kato",
    "transport_specific",
    "masked_oncs",
    "masked_fuses",
];

impl Default for Mgmt {
    fn default() -> Self {
        Self::new()
    }
}

impl Mgmt {
    pub fn new() -> Mgmt {
        Mgmt {
            state: Mutex::new(State {
                epoch: Some(std::time::Instant::now()),
                malloc_budget: default_malloc_budget(),
                ..State::default()
            }),
            extra: Mutex::new(Vec::new()),
        }
    }

    /// Bytes all malloc bdevs made over RPC may hold together (default: half of
    /// MemTotal); `bdev_malloc_create` past it fails with ENOMEM and is counted.
    pub fn set_malloc_budget(&self, bytes: u64) {
        if let Ok(mut st) = self.state.lock() {
            st.malloc_budget = bytes;
        }
    }

    /// `bdev_malloc_create` calls refused by the budget since start.
    pub fn malloc_refused(&self) -> u64 {
        self.state.lock().map(|st| st.malloc_refused).unwrap_or(0)
    }

    /// Serves `names` through `d` as well (the node's `dpustack_*` methods).
    pub fn add_methods(&self, names: &[&str], d: Arc<dyn Dispatch + Send + Sync>) {
        if let Ok(mut g) = self.extra.lock() {
            g.push((names.iter().map(|s| s.to_string()).collect(), d));
        }
    }

    fn extra_for(&self, method: &str) -> Option<Arc<dyn Dispatch + Send + Sync>> {
        let g = self.extra.lock().ok()?;
        g.iter()
            .find(|(n, _)| n.iter().any(|m| m == method))
            .map(|(_, d)| d.clone())
    }

    /// Every method served, in `rpc_get_methods` order.
    pub fn method_names(&self) -> Vec<String> {
        let mut v: Vec<String> = METHODS.iter().map(|s| s.to_string()).collect();
        if let Ok(g) = self.extra.lock() {
            for (n, _) in g.iter() {
                v.extend(n.iter().cloned());
            }
        }
        v
    }

    fn st(&self) -> Result<MutexGuard<'_, State>, RpcError> {
        self.state
            .lock()
            .map_err(|_| RpcError::internal("management state lock poisoned"))
    }

    /// Serves the running NVMe-oF target: its subsystems' bdevs are imported
    /// (`kinds` says which were malloc/null, by bdev name), its listeners
    /// become every subsystem's listeners, the server's transport (TCP or
    /// RDMA) is the one transport.
    pub fn attach_nvmf(
        &self,
        tgt: Arc<Tgt>,
        listeners: ListenerHandle,
        kinds: &[(String, BdevKind)],
    ) -> Result<(), RpcError> {
        let mut st = self.st()?;
        for s in tgt.subsystems() {
            for ns in s.namespaces() {
                let name = ns.bdev.name().to_string();
                if st.bdevs.iter().any(|b| b.dev.name() == name) {
                    continue;
                }
                let kind = kinds
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(BdevKind::Other, |k| k.1);
                let uuid = new_uuid(&name);
                st.bdevs.push(BdevEntry {
                    kind,
                    uuid,
                    file: None,
                    dev: ns.bdev.clone(),
                });
            }
            for l in tgt.listeners().iter().filter(|l| !l.discovery_only) {
                st.listeners.push(ListenerEntry {
                    nqn: s.nqn.clone(),
                    trid: l.trid.clone(),
                });
            }
        }
        if !tgt.listeners().is_empty() || tgt.subsystems().next().is_some() {
            let mut t = Map::new();
            t.insert("trtype".into(), json!(trtype_str(listeners.trtype())));
            st.transports.push(t);
        }
        st.nvmf = Some((tgt, listeners));
        Ok(())
    }

    /// Plays back an SPDK JSON config (`{"subsystems":[{"subsystem":..,"config":[..]}]}`);
    /// a method dpustack does not have is an error naming it and its place.
    pub fn load_config(&self, cfg: &Value) -> Result<usize, RpcError> {
        let subs = cfg
            .get("subsystems")
            .and_then(Value::as_array)
            .ok_or_else(|| RpcError::params("config: no \"subsystems\" array"))?;
        let mut n = 0;
        for (i, s) in subs.iter().enumerate() {
            let name = s.get("subsystem").and_then(Value::as_str).unwrap_or("?");
            let Some(entries) = s.get("config") else {
                continue;
            };
            let entries = match entries {
                Value::Null => continue,
                Value::Array(a) => a,
                _ => {
                    return Err(RpcError::params(format!(
                        "config: subsystems[{i}] ({name}): \"config\" is not an array"
                    )))
                }
            };
            for (j, e) in entries.iter().enumerate() {
                let place = format!("subsystems[{i}] ({name}) config[{j}]");
                let method = e
                    .get("method")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::params(format!("config: {place}: no method")))?;
                if !METHODS.contains(&method)
                    || matches!(
                        method,
                        "save_config" | "load_config" | "framework_get_config"
                    )
                {
                    return Err(RpcError::new(
                        ENOTSUP,
                        format!("config: {place}: method {method:?} is not supported by dpustack"),
                    ));
                }
                self.call(method, e.get("params")).map_err(|err| {
                    RpcError::new(
                        err.code,
                        format!("config: {place}: {method}: {}", err.message),
                    )
                })?;
                n += 1;
            }
        }
        info!(methods = n, "JSON config loaded");
        Ok(n)
    }

    fn bdev_create(&self, p: Option<&Value>, kind: BdevKind) -> Result<Value, RpcError> {
        let p = Params::new(p, BDEV_CREATE_KEYS)?;
        let mut st = self.st()?;
        let name = match (p.opt_str("name")?, kind) {
            (Some(n), _) => n,
            (None, BdevKind::Malloc) => loop {
                let n = format!("Malloc{}", st.next_malloc);
                st.next_malloc += 1;
                if !st.bdevs.iter().any(|b| b.dev.name() == n) {
                    break n;
                }
            },
            (None, _) => return Err(RpcError::params("Invalid parameters: missing name")),
        };
        let num_blocks = p.u64("num_blocks")?;
        let bs = p.u64("block_size")?;
        for k in ["md_size", "dif_type"] {
            if p.opt_u64(k)?.unwrap_or(0) != 0 {
                return Err(RpcError::new(
                    ENOTSUP,
                    format!("{k} (metadata/DIF) is not supported"),
                ));
            }
        }
        if st.bdevs.iter().any(|b| b.dev.name() == name) {
            return Err(RpcError::exists(format!(
                "Bdev {name} already exists: File exists"
            )));
        }
        let uuid = match p.opt_str("uuid")? {
            Some(u) => {
                let b = parse_hex::<16>(&u).ok_or_else(|| {
                    RpcError::params(format!("Invalid parameters: bad uuid {u:?}"))
                })?;
                uuid_str(&b)
            }
            None => new_uuid(&name),
        };
        let bytes = num_blocks
            .checked_mul(bs)
            .filter(|b| *b > 0)
            .ok_or_else(|| RpcError::params("Invalid parameters: size is zero or overflows"))?;
        if kind == BdevKind::Malloc {
            let held: u64 = st
                .bdevs
                .iter()
                .filter(|b| b.kind == BdevKind::Malloc)
                .map(|b| b.dev.num_blocks() * u64::from(b.dev.block_size()))
                .sum();
            if held.saturating_add(bytes) > st.malloc_budget {
                st.malloc_refused += 1;
                warn!(%name, bytes, held, budget = st.malloc_budget, "bdev_malloc_create refused: over the malloc budget");
                return Err(RpcError::new(
                    ENOMEM,
                    format!(
                        "Could not create malloc bdev: {bytes} bytes with {held} held would pass the budget of {} bytes: Cannot allocate memory",
                        st.malloc_budget
                    ),
                ));
            }
        }
        let spec = match kind {
            BdevKind::Malloc => format!("malloc:{bytes}"),
            _ => format!("null:{bytes}"),
        };
        let dev = bdev::spec::create(&name, &spec, bs as u32)
            .map_err(|e| RpcError::params(format!("Invalid parameters: {e}")))?;
        info!(%name, %spec, "bdev created");
        st.bdevs.push(BdevEntry {
            kind,
            uuid,
            file: None,
            dev,
        });
        Ok(json!(name))
    }

    fn bdev_delete(&self, p: Option<&Value>, kind: BdevKind) -> Result<Value, RpcError> {
        let p = Params::new(p, &["name"])?;
        let name = p.str("name")?;
        let mut st = self.st()?;
        let Some(i) = st
            .bdevs
            .iter()
            .position(|b| b.dev.name() == name && b.kind == kind)
        else {
            return Err(RpcError::no_device("No such device"));
        };
        if let Some((tgt, _)) = &st.nvmf {
            if tgt
                .subsystems()
                .any(|s| s.namespaces().iter().any(|n| n.bdev.name() == name))
            {
                return Err(RpcError::new(
                    -16,
                    format!("bdev {name} is a namespace of a subsystem (remove the namespace first): Device or resource busy"),
                ));
            }
        }
        st.bdevs.remove(i);
        Ok(json!(true))
    }

    /// Names of the bdevs that are namespaces (one pass over the subsystems).
    fn claimed(st: &State) -> std::collections::HashSet<String> {
        let mut set = std::collections::HashSet::new();
        if let Some((t, _)) = &st.nvmf {
            for s in t.subsystems() {
                set.extend(s.namespaces().iter().map(|n| n.bdev.name().to_string()));
            }
        }
        set
    }

    fn bdev_json(claimed: &std::collections::HashSet<String>, b: &BdevEntry) -> Value {
        let d = &b.dev;
        let sup = |t| d.io_type_supported(t);
        json!({
            "name": d.name(),
            "aliases": [],
            "product_name": match b.kind {
                BdevKind::Malloc => "Malloc disk",
                BdevKind::Null => "Null disk",
                BdevKind::Uring => "URING bdev",
                BdevKind::Aio => "AIO disk",
                BdevKind::Other => "dpustack bdev",
            },
            "block_size": d.block_size(),
            "num_blocks": d.num_blocks(),
            "uuid": b.uuid,
            "assigned_rate_limits": {
                "rw_ios_per_sec": 0, "rw_mbytes_per_sec": 0,
                "r_mbytes_per_sec": 0, "w_mbytes_per_sec": 0
            },
            "claimed": claimed.contains(d.name()),
            "zoned": false,
            "supported_io_types": {
                "read": sup(bdev::IoType::Read),
                "write": sup(bdev::IoType::Write),
                "unmap": sup(bdev::IoType::Unmap),
                "write_zeroes": sup(bdev::IoType::WriteZeroes),
                "flush": sup(bdev::IoType::Flush),
                "reset": false,
                "compare": false,
                "compare_and_write": false,
                "abort": false,
                "nvme_admin": false,
                "nvme_io": false
            },
            "driver_specific": match (b.kind, &b.file) {
                (BdevKind::Uring, Some(f)) => json!({"uring": {"filename": f}}),
                (BdevKind::Aio, Some(f)) => json!({"aio": {"filename": f, "block_size_override": true, "readonly": false, "fallocate": false}}),
                _ => json!({}),
            }
        })
    }

    fn bdev_get_bdevs(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["name", "timeout"])?;
        let st = self.st()?;
        match p.opt_str("name")? {
            Some(n) => {
                let b = st
                    .bdevs
                    .iter()
                    .find(|b| b.dev.name() == n || b.uuid == n)
                    .ok_or_else(|| RpcError::no_device("No such device"))?;
                Ok(json!([Self::bdev_json(&Self::claimed(&st), b)]))
            }
            None => {
                let claimed = Self::claimed(&st);
                Ok(Value::Array(
                    st.bdevs
                        .iter()
                        .map(|b| Self::bdev_json(&claimed, b))
                        .collect(),
                ))
            }
        }
    }

    fn tgt(st: &State) -> Result<Arc<Tgt>, RpcError> {
        st.nvmf
            .as_ref()
            .map(|(t, _)| t.clone())
            .ok_or_else(|| RpcError::no_device("the NVMe-oF target is not running in this node"))
    }

    fn subsys(tgt: &Tgt, nqn: &str) -> Result<Subsystem, RpcError> {
        tgt.subsystem(nqn)
            .filter(|s| s.subtype == SubsystemType::Nvme)
            .map(|s| (*s).clone())
            .ok_or_else(|| RpcError::params(format!("Unable to find subsystem with NQN {nqn}")))
    }

    fn create_transport(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, TRANSPORT_KEYS)?;
        let trtype = p.str("trtype")?.to_ascii_uppercase();
        let mut st = self.st()?;
        Self::tgt(&st)?;
        let served = st
            .nvmf
            .as_ref()
            .map_or("TCP", |(_, h)| trtype_str(h.trtype()));
        if trtype != served {
            return Err(RpcError::params(format!(
                "Transport type '{trtype}' is not supported by this target (it serves {served}; start `nvmf serve` with rdma:// listeners for RDMA)"
            )));
        }
        if st.transports.iter().any(|t| t["trtype"] == trtype.as_str()) {
            return Err(RpcError::params(format!(
                "Transport type '{trtype}' already exists"
            )));
        }
        let mut m = p.m;
        m.insert("trtype".into(), json!(trtype));
        m.remove("tgt_name");
        st.transports.push(m);
        Ok(json!(true))
    }

    fn create_subsystem(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(
            p,
            &[
                "nqn",
                "tgt_name",
                "serial_number",
                "model_number",
                "allow_any_host",
                "max_namespaces",
                "ana_reporting",
                "min_cntlid",
                "max_cntlid",
                "dmrsl",
                "wzsl",
                "passthrough",
                "enable_nssr",
                "admin_label",
            ],
        )?;
        let nqn = p.str("nqn")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        if tgt.subsystem(&nqn).is_some() {
            // as SPDK (spdk_nvmf_subsystem_create fails; the RPC says only this)
            return Err(RpcError::internal(format!(
                "Unable to create subsystem {nqn}"
            )));
        }
        let serial = p
            .opt_str("serial_number")?
            .unwrap_or_else(|| "00000000000000000000".into());
        let model = p
            .opt_str("model_number")?
            .unwrap_or_else(|| "SPDK bdev Controller".into());
        let mut s = Subsystem::new(&nqn, &serial, &model)
            .map_err(|e| RpcError::params(format!("Unable to create subsystem {nqn}: {e}")))?;
        s.allow_any_host = p.opt_bool("allow_any_host")?.unwrap_or(false);
        // as SPDK's: reachable only through the listeners added to it
        s.listeners = Some(Vec::new());
        if let Some(m) = p.opt_u64("max_namespaces")? {
            if m > 0 {
                s.max_namespaces = m.min(u32::MAX as u64 - 1) as u32;
            }
        }
        tgt.insert_subsystem(s)
            .map_err(|e| RpcError::params(format!("Unable to create subsystem {nqn}: {e}")))?;
        info!(%nqn, "subsystem created");
        Ok(json!(true))
    }

    fn delete_subsystem(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let mut st = self.st()?;
        let tgt = Self::tgt(&st)?;
        tgt.remove_subsystem(&nqn)
            .ok_or_else(|| RpcError::params(format!("Unable to find subsystem with NQN {nqn}")))?;
        st.listeners.retain(|l| l.nqn != nqn);
        Ok(json!(true))
    }

    fn add_ns(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "namespace", "tgt_name", "no_auto_visible"])?;
        let nqn = p.str("nqn")?;
        let ns = p.obj(
            "namespace",
            &[
                "bdev_name",
                "nsid",
                "nguid",
                "eui64",
                "uuid",
                "ptpl_file",
                "anagrpid",
                "no_auto_visible",
                "hide_metadata",
            ],
        )?;
        let bdev_name = ns.str("bdev_name")?;
        let nsid = ns.opt_u64("nsid")?.unwrap_or(0);
        let uuid =
            match ns.opt_str("uuid")? {
                Some(u) => Some(parse_hex::<16>(&u).ok_or_else(|| {
                    RpcError::params(format!("Invalid parameters: bad uuid {u:?}"))
                })?),
                None => None,
            };
        for k in ["nguid", "eui64", "ptpl_file"] {
            if ns.opt_str(k)?.is_some() {
                return Err(RpcError::new(
                    ENOTSUP,
                    format!("namespace {k} is not supported (derived from the UUID)"),
                ));
            }
        }
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut s = Self::subsys(&tgt, &nqn)?;
        let dev = st
            .bdevs
            .iter()
            .find(|b| b.dev.name() == bdev_name)
            .map(|b| b.dev.clone())
            .ok_or_else(|| {
                RpcError::params(format!(
                    "Unable to add namespace: bdev {bdev_name} not found"
                ))
            })?;
        let nsid = u32::try_from(nsid).map_err(|_| RpcError::params("Invalid parameters: nsid"))?;
        let nsid = s
            .add_ns(nsid, dev, uuid)
            .map_err(|e| RpcError::params(format!("Unable to add namespace: {e}")))?;
        tgt.replace_subsystem(s);
        info!(%nqn, nsid, bdev = %bdev_name, "namespace added");
        Ok(json!(nsid))
    }

    fn remove_ns(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "nsid", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let nsid = p.u64("nsid")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut s = Self::subsys(&tgt, &nqn)?;
        if !s.remove_ns(nsid as u32) {
            return Err(RpcError::params(format!(
                "Invalid parameters: no namespace {nsid}"
            )));
        }
        tgt.replace_subsystem(s);
        Ok(json!(true))
    }

    fn add_listener(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(
            p,
            &[
                "nqn",
                "listen_address",
                "tgt_name",
                "secure_channel",
                "ana_state",
                "sock_impl",
                "numa_id",
            ],
        )?;
        let nqn = p.str("nqn")?;
        let la = p.obj("listen_address", &["trtype", "adrfam", "traddr", "trsvcid"])?;
        let (trtype, addr) = Self::listen_address(&la)?;
        let tname = trtype_str(trtype);
        let mut st = self.st()?;
        let tgt = Self::tgt(&st)?;
        if !st.transports.iter().any(|t| t["trtype"] == tname) {
            return Err(RpcError::params(format!(
                "Unable to add listener: transport {tname} has not been created (nvmf_create_transport)"
            )));
        }
        let discovery = nvmf::tgt::is_discovery_nqn(&nqn);
        let mut sub = if discovery {
            None
        } else {
            Some(Self::subsys(&tgt, &nqn)?)
        };
        let want = TransportId::ip(trtype, addr);
        if st.listeners.iter().any(|l| l.nqn == nqn && l.trid == want) {
            return Err(RpcError::exists("Listener already exists: File exists"));
        }
        let bound = tgt
            .listeners()
            .into_iter()
            .find(|l| l.trid == want || (addr.port() != 0 && l.trid.socket_addr() == Some(addr)))
            .map(|l| l.trid);
        let trid = match bound {
            Some(t) => t,
            None => {
                let h = st
                    .nvmf
                    .as_ref()
                    .map(|(_, h)| h.clone())
                    .ok_or_else(|| RpcError::internal("no target"))?;
                h.add(Listen {
                    trid: want,
                    discovery_only: discovery,
                })
                .map_err(|e| RpcError::internal(format!("Unable to add listener {addr}: {e}")))?
            }
        };
        info!(%nqn, trid = %trid.uri(), "listener added");
        if let Some(s) = sub.as_mut() {
            if let Some(l) = s.listeners.as_mut() {
                l.push(trid.clone());
                tgt.replace_subsystem(s.clone());
            }
        }
        st.listeners.push(ListenerEntry { nqn, trid });
        Ok(json!(true))
    }

    fn add_host(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(
            p,
            &[
                "nqn",
                "host",
                "tgt_name",
                "psk",
                "dhchap_key",
                "dhchap_ctrlr_key",
            ],
        )?;
        let nqn = p.str("nqn")?;
        let host = p.str("host")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut s = Self::subsys(&tgt, &nqn)?;
        if s.hosts.contains(&host) {
            return Err(RpcError::exists(format!(
                "Host {host} already allowed: File exists"
            )));
        }
        let any = s.allow_any_host;
        s.add_host(&host);
        s.allow_any_host = any;
        tgt.replace_subsystem(s);
        Ok(json!(true))
    }

    fn allow_any_host(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "allow_any_host", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let allow = p
            .opt_bool("allow_any_host")?
            .ok_or_else(|| RpcError::params("Invalid parameters: missing allow_any_host"))?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut s = Self::subsys(&tgt, &nqn)?;
        s.allow_any_host = allow;
        tgt.replace_subsystem(s);
        Ok(json!(true))
    }

    fn addr_json(trid: &TransportId) -> Value {
        let (adrfam, traddr, trsvcid) = match trid.socket_addr() {
            Some(a) => (
                if a.is_ipv4() { "IPv4" } else { "IPv6" },
                a.ip().to_string(),
                a.port().to_string(),
            ),
            None => ("IPv4", trid.to_string(), String::new()),
        };
        json!({"trtype": trtype_str(trid.trtype), "adrfam": adrfam, "traddr": traddr, "trsvcid": trsvcid})
    }

    fn get_subsystems(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "tgt_name"])?;
        let only = p.opt_str("nqn")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut out = Vec::new();
        let disc_addrs: Vec<Value> = tgt
            .listeners()
            .iter()
            .map(|l| Self::addr_json(&l.trid))
            .collect();
        out.push(json!({
            "nqn": nvmf::DISCOVERY_NQN,
            "subtype": "Discovery",
            "listen_addresses": disc_addrs,
            "allow_any_host": true,
            "hosts": []
        }));
        for s in tgt.subsystems() {
            let ls: Vec<Value> = st
                .listeners
                .iter()
                .filter(|l| l.nqn == s.nqn)
                .map(|l| Self::addr_json(&l.trid))
                .collect();
            let nss: Vec<Value> = s
                .namespaces()
                .iter()
                .map(|n| {
                    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02X}")).collect::<String>();
                    json!({
                        "nsid": n.nsid,
                        "bdev_name": n.bdev.name(),
                        "name": n.bdev.name(),
                        "nguid": hex(&n.nguid),
                        "eui64": hex(&n.eui64),
                        "uuid": uuid_str(&n.uuid)
                    })
                })
                .collect();
            out.push(json!({
                "nqn": s.nqn,
                "subtype": "NVMe",
                "listen_addresses": ls,
                "allow_any_host": s.allow_any_host,
                "hosts": s.hosts.iter().map(|h| json!({"nqn": h})).collect::<Vec<_>>(),
                "serial_number": s.serial,
                "model_number": s.model,
                "max_namespaces": s.max_namespaces,
                "min_cntlid": 1,
                "max_cntlid": 65519,
                "namespaces": nss
            }));
        }
        if let Some(n) = only {
            out.retain(|s| s["nqn"] == n.as_str());
            if out.is_empty() {
                return Err(RpcError::params(format!(
                    "Unable to find subsystem with NQN {n}"
                )));
            }
        }
        Ok(Value::Array(out))
    }

    /// (trtype, socket address) of a `listen_address` object.
    fn listen_address(la: &Params) -> Result<(nvme::log::TrType, std::net::SocketAddr), RpcError> {
        let t = la.str("trtype")?;
        let trtype = parse_trtype(&t).ok_or_else(|| {
            RpcError::params(format!(
                "Invalid parameters: transport {t} is not supported (TCP, RDMA)"
            ))
        })?;
        let traddr = la.str("traddr")?;
        let trsvcid = la.opt_str("trsvcid")?.unwrap_or_else(|| "4420".into());
        let addr: std::net::SocketAddr = format!(
            "{}:{trsvcid}",
            if traddr.contains(':') {
                format!("[{traddr}]")
            } else {
                traddr.clone()
            }
        )
        .parse()
        .map_err(|_| {
            RpcError::params(format!(
                "Invalid parameters: bad address {traddr}:{trsvcid}"
            ))
        })?;
        Ok((trtype, addr))
    }

    /// `bdev_uring_create` / `bdev_aio_create`: a file bdev over io_uring on an
    /// existing file or block device.
    fn file_bdev_create(&self, p: Option<&Value>, kind: BdevKind) -> Result<Value, RpcError> {
        let keys: &[&str] = if kind == BdevKind::Aio {
            &[
                "filename",
                "name",
                "block_size",
                "readonly",
                "fallocate",
                "uuid",
                "nowait",
            ]
        } else {
            &["filename", "name", "block_size", "uuid"]
        };
        let p = Params::new(p, keys)?;
        let filename = p.str("filename")?;
        let name = p.str("name")?;
        for k in ["readonly", "fallocate", "nowait"] {
            if p.opt_bool(k)?.unwrap_or(false) {
                return Err(RpcError::new(
                    ENOTSUP,
                    format!("{k} is not supported by dpustack's file bdev"),
                ));
            }
        }
        let bs = p.opt_u64("block_size")?.unwrap_or(512);
        let bs = u32::try_from(bs)
            .ok()
            .filter(|b| b.is_power_of_two() && (512..=65536).contains(b))
            .ok_or_else(|| RpcError::params(format!("Invalid parameters: block_size {bs}")))?;
        let uuid =
            match p.opt_str("uuid")? {
                Some(u) => uuid_str(&parse_hex::<16>(&u).ok_or_else(|| {
                    RpcError::params(format!("Invalid parameters: bad uuid {u:?}"))
                })?),
                None => new_uuid(&name),
            };
        let mut st = self.st()?;
        if st.bdevs.iter().any(|b| b.dev.name() == name) {
            return Err(RpcError::exists(format!(
                "Bdev {name} already exists: File exists"
            )));
        }
        if !std::path::Path::new(&filename).exists() {
            return Err(RpcError::no_device(format!(
                "Unable to create bdev {name}: {filename}: No such device"
            )));
        }
        let opts = bdev::file::FileOptions {
            block_size: bs,
            ..Default::default()
        };
        let dev = bdev::file::FileBdev::open(&name, &filename, opts)
            .map_err(|e| RpcError::new(EINVAL, format!("Unable to create bdev {name}: {e}")))?;
        info!(%name, %filename, "file bdev (io_uring) created");
        st.bdevs.push(BdevEntry {
            kind,
            uuid,
            file: Some(filename),
            dev: Arc::new(dev),
        });
        Ok(json!(name))
    }

    /// `bdev_get_iostat`: SPDK's shape; ops and bytes from the bdev's channel
    /// counters, latency from the NVMe-oF namespaces on it (ticks are ns).
    fn bdev_get_iostat(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["name", "names", "per_channel", "reset_mode"])?;
        if p.opt_bool("per_channel")?.unwrap_or(false) {
            return Err(RpcError::new(ENOTSUP, "per_channel is not supported"));
        }
        match p.opt_str("reset_mode")?.as_deref() {
            None | Some("none") => {}
            Some(m) => {
                return Err(RpcError::new(
                    ENOTSUP,
                    format!("reset_mode {m} is not supported (counters only grow)"),
                ))
            }
        }
        let mut names: Option<Vec<String>> = p.opt_str("name")?.map(|n| vec![n]);
        match p.m.get("names") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                let v: Option<Vec<String>> =
                    a.iter().map(|x| x.as_str().map(String::from)).collect();
                names = Some(v.ok_or_else(|| {
                    RpcError::params("Invalid parameters: names must be strings")
                })?);
            }
            Some(_) => {
                return Err(RpcError::params(
                    "Invalid parameters: names must be an array",
                ))
            }
        }
        let st = self.st()?;
        if let Some(n) = &names {
            if let Some(missing) = n
                .iter()
                .find(|n| !st.bdevs.iter().any(|b| b.dev.name() == n.as_str()))
            {
                return Err(RpcError::no_device(format!(
                    "Bdev {missing} does not exist: No such device"
                )));
            }
        }
        // latency per bdev name, from the namespaces on it
        let mut lat: std::collections::HashMap<String, nvmf::stats::IoStats> = Default::default();
        if let Some((t, _)) = &st.nvmf {
            for s in t.subsystems() {
                for ns in s.namespaces() {
                    lat.entry(ns.bdev.name().to_string())
                        .or_default()
                        .add(&ns.stats.total());
                }
            }
        }
        let mut out = Vec::new();
        for b in &st.bdevs {
            let name = b.dev.name();
            if names.as_ref().is_some_and(|n| !n.iter().any(|x| x == name)) {
                continue;
            }
            let s = b.dev.stats();
            let l = lat.get(name).copied().unwrap_or_default();
            out.push(json!({
                "name": name,
                "bytes_read": s.read.bytes,
                "num_read_ops": s.read.ops,
                "bytes_written": s.write.bytes,
                "num_write_ops": s.write.ops,
                "bytes_unmapped": s.unmap.bytes,
                "num_unmap_ops": s.unmap.ops,
                "bytes_copied": 0,
                "num_copy_ops": 0,
                "read_latency_ticks": l.read_latency.sum_ns,
                "write_latency_ticks": l.write_latency.sum_ns,
                "unmap_latency_ticks": 0,
                "copy_latency_ticks": 0,
                "io_error": {"total": s.errors}
            }));
        }
        let ticks = st.epoch.map_or(0, |e| e.elapsed().as_nanos() as u64);
        Ok(json!({"tick_rate": 1_000_000_000u64, "ticks": ticks, "bdevs": out}))
    }

    fn remove_host(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "host", "tgt_name", "timeout_ms"])?;
        let nqn = p.str("nqn")?;
        let host = p.str("host")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let mut s = Self::subsys(&tgt, &nqn)?;
        if !s.remove_host(&host) {
            return Err(RpcError::internal("Internal error"));
        }
        tgt.replace_subsystem(s);
        // as SPDK (spdk_nvmf_subsystem_disconnect_host): its controllers go
        let n = tgt.disconnect(&nqn, "host removed", |c| c.hostnqn == host);
        info!(%nqn, %host, disconnected = n, "host removed");
        Ok(json!(true))
    }

    fn remove_listener(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "listen_address", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let la = p.obj("listen_address", &["trtype", "adrfam", "traddr", "trsvcid"])?;
        let (trtype, addr) = Self::listen_address(&la)?;
        let want = TransportId::ip(trtype, addr);
        let mut st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let discovery = nvmf::tgt::is_discovery_nqn(&nqn);
        let mut sub = if discovery {
            None
        } else {
            Some(Self::subsys(&tgt, &nqn)?)
        };
        let Some(i) = st
            .listeners
            .iter()
            .position(|l| l.nqn == nqn && l.trid == want)
        else {
            return Err(RpcError::params(format!(
                "Unable to remove listener {}: not a listener of {nqn}",
                want.uri()
            )));
        };
        st.listeners.remove(i);
        if let Some(s) = sub.as_mut() {
            // a subsystem that listened everywhere now lists the rest
            let all: Vec<TransportId> = tgt
                .listeners()
                .into_iter()
                .filter(|l| !l.discovery_only)
                .map(|l| l.trid)
                .collect();
            let l = s.listeners.get_or_insert(all);
            l.retain(|t| *t != want);
            tgt.replace_subsystem(s.clone());
            // as SPDK: the qpairs connected through it are closed (with them
            // their controllers)
            let ports: Vec<u16> = tgt
                .listeners()
                .iter()
                .filter(|l| l.trid == want)
                .map(|l| l.portid)
                .collect();
            let n = tgt.disconnect(&nqn, "listener removed", |c| {
                c.qpairs().iter().any(|q| ports.contains(&q.portid))
            });
            info!(%nqn, trid = %want.uri(), disconnected = n, "listener removed");
        }
        // As SPDK's transports (a listener's reference count): the socket is closed
        // once no subsystem listens there any more, discovery included.
        let in_use = st.listeners.iter().any(|l| l.trid == want)
            || tgt.subsystems().any(|s| {
                !nvmf::tgt::is_discovery_nqn(&s.nqn)
                    && s.listeners.as_ref().is_none_or(|l| l.contains(&want))
            });
        if !in_use {
            let h = st.nvmf.as_ref().map(|(_, h)| h.clone());
            match h.map(|h| h.remove(&want)) {
                Some(Ok(true)) => info!(trid = %want.uri(), "listener socket closed"),
                Some(Ok(false)) => {
                    // not one of the server's sockets: take it off the target's list
                    tgt.remove_listener(&want);
                }
                Some(Err(e)) => warn!(%e, trid = %want.uri(), "closing the listener socket"),
                None => {}
            }
        }
        Ok(json!(true))
    }

    fn get_controllers(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        Self::subsys(&tgt, &nqn)?;
        Ok(Value::Array(
            tgt.ctrlrs()
                .iter()
                .filter(|c| c.subsys.nqn == nqn)
                .map(|c| {
                    let io = c.qpairs().iter().filter(|q| q.qid != 0).count();
                    json!({
                        "cntlid": c.cntlid,
                        "cntrltype": if c.is_discovery() { "discovery" } else { "io" },
                        "hostnqn": c.hostnqn,
                        "hostid": uuid_str(&c.hostid),
                        "num_io_qpairs": io
                    })
                })
                .collect(),
        ))
    }

    fn get_qpairs(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        Self::subsys(&tgt, &nqn)?;
        let listeners = tgt.listeners();
        let mut out = Vec::new();
        for c in tgt.ctrlrs().iter().filter(|c| c.subsys.nqn == nqn) {
            for q in c.qpairs() {
                let mut o = json!({
                    "cntlid": c.cntlid,
                    "qid": q.qid,
                    "state": if c.is_failed() { "deactivating" } else { "enabled" },
                    "thread": poll_group_name(q.poll_group),
                    "hostnqn": c.hostnqn,
                });
                if let Some(l) = listeners.iter().find(|l| l.portid == q.portid) {
                    o["listen_address"] = Self::addr_json(&l.trid);
                    if let Ok(a) = q.peer.parse::<std::net::SocketAddr>() {
                        o["peer_address"] = Self::addr_json(&TransportId::ip(l.trid.trtype, a));
                    }
                }
                out.push(o);
            }
        }
        Ok(Value::Array(out))
    }

    fn get_listeners(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        let p = Params::new(p, &["nqn", "tgt_name"])?;
        let nqn = p.str("nqn")?;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        if !nvmf::tgt::is_discovery_nqn(&nqn) {
            Self::subsys(&tgt, &nqn)?;
        }
        Ok(Value::Array(
            st.listeners
                .iter()
                .filter(|l| l.nqn == nqn)
                .map(|l| json!({"address": Self::addr_json(&l.trid)}))
                .collect(),
        ))
    }

    fn get_stats(&self, p: Option<&Value>) -> Result<Value, RpcError> {
        Params::new(p, &["tgt_name"])?;
        use std::sync::atomic::Ordering::Relaxed;
        let st = self.st()?;
        let tgt = Self::tgt(&st)?;
        let groups: Vec<Value> = tgt
            .poll_group_stats()
            .iter()
            .map(|g| {
                json!({
                    "name": poll_group_name(g.id),
                    "admin_qpairs": g.admin_qpairs.load(Relaxed),
                    "io_qpairs": g.io_qpairs.load(Relaxed),
                    "current_admin_qpairs": g.current_admin_qpairs.load(Relaxed),
                    "current_io_qpairs": g.current_io_qpairs.load(Relaxed),
                    "pending_bdev_io": g.pending_bdev_io.load(Relaxed),
                    "completed_nvme_io": g.completed_nvme_io.load(Relaxed),
                    "transports": [{"trtype": g.transport}]
                })
            })
            .collect();
        let r = tgt.refusals();
        Ok(json!({
            "tick_rate": 1_000_000_000u64,
            "poll_groups": groups,
            // not in SPDK: the target's bounds and what they refused
            "dpustack_limits": {
                "connections": tgt.connections(),
                "max_connections": tgt.params.max_connections,
                "refused_connections": r.connections,
                "controllers": tgt.ctrlr_count(),
                "max_controllers": tgt.params.max_controllers,
                "refused_controllers": r.controllers,
            }
        }))
    }

    fn save_config(&self) -> Result<Value, RpcError> {
        let st = self.st()?;
        let mut bdevs = Vec::new();
        for b in &st.bdevs {
            let method = match b.kind {
                BdevKind::Malloc => "bdev_malloc_create",
                BdevKind::Null => "bdev_null_create",
                BdevKind::Uring | BdevKind::Aio => {
                    let method = if b.kind == BdevKind::Uring {
                        "bdev_uring_create"
                    } else {
                        "bdev_aio_create"
                    };
                    bdevs.push(json!({"method": method, "params": {
                        "name": b.dev.name(),
                        "filename": b.file,
                        "block_size": b.dev.block_size(),
                        "uuid": b.uuid
                    }}));
                    continue;
                }
                BdevKind::Other => {
                    return Err(RpcError::new(
                        ENOTSUP,
                        format!("save_config: bdev {} was not made by a malloc/null/uring/aio RPC or target file entry; cannot be saved", b.dev.name()),
                    ))
                }
            };
            bdevs.push(json!({"method": method, "params": {
                "name": b.dev.name(),
                "num_blocks": b.dev.num_blocks(),
                "block_size": b.dev.block_size(),
                "uuid": b.uuid
            }}));
        }
        bdevs.push(json!({"method": "bdev_wait_for_examine"}));
        let mut nv = Vec::new();
        for t in &st.transports {
            nv.push(json!({"method": "nvmf_create_transport", "params": t}));
        }
        if let Some((tgt, _)) = &st.nvmf {
            for s in tgt.subsystems() {
                nv.push(json!({"method": "nvmf_create_subsystem", "params": {
                    "nqn": s.nqn, "allow_any_host": s.allow_any_host,
                    "serial_number": s.serial, "model_number": s.model,
                    "max_namespaces": s.max_namespaces
                }}));
                for h in &s.hosts {
                    nv.push(json!({"method": "nvmf_subsystem_add_host", "params": {"nqn": s.nqn, "host": h}}));
                }
                for n in s.namespaces() {
                    nv.push(json!({"method": "nvmf_subsystem_add_ns", "params": {
                        "nqn": s.nqn,
                        "namespace": {"nsid": n.nsid, "bdev_name": n.bdev.name(), "uuid": uuid_str(&n.uuid)}
                    }}));
                }
                for l in st.listeners.iter().filter(|l| l.nqn == s.nqn) {
                    nv.push(json!({"method": "nvmf_subsystem_add_listener", "params": {
                        "nqn": s.nqn, "listen_address": Self::addr_json(&l.trid)
                    }}));
                }
            }
        }
        if let Some((tgt, _)) = &st.nvmf {
            for l in tgt.listeners().iter().filter(|l| l.discovery_only) {
                nv.push(json!({"method": "nvmf_subsystem_add_listener", "params": {
                    "nqn": nvmf::DISCOVERY_NQN, "listen_address": Self::addr_json(&l.trid)
                }}));
            }
        }
        Ok(json!({"subsystems": [
            {"subsystem": "bdev", "config": bdevs},
            {"subsystem": "nvmf", "config": nv}
        ]}))
    }
}

impl Dispatch for Mgmt {
    fn call(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        match method {
            "rpc_get_methods" => {
                Params::new(params, &["current", "include_aliases"])?;
                Ok(json!(self.method_names()))
            }
            "spdk_get_version" => {
                Params::new(params, &[])?;
                let v = env!("CARGO_PKG_VERSION");
                Ok(json!({
                    "version": format!("dpustack {v} (SPDK JSON-RPC subset)"),
                    "fields": {"major": 0, "minor": 1, "patch": 0, "suffix": "-dpustack"}
                }))
            }
            "framework_wait_init" | "bdev_wait_for_examine" => {
                Params::new(params, &[])?;
                Ok(json!(true))
            }
            "framework_get_subsystems" => Ok(json!([
                {"subsystem": "bdev", "depends_on": []},
                {"subsystem": "nvmf", "depends_on": ["bdev"]}
            ])),
            "framework_get_config" => {
                let p = Params::new(params, &["name", "with_batches"])?;
                let name = p.str("name")?;
                let cfg = self.save_config()?;
                cfg["subsystems"]
                    .as_array()
                    .and_then(|a| a.iter().find(|s| s["subsystem"] == name.as_str()))
                    .map(|s| s["config"].clone())
                    .ok_or_else(|| RpcError::params(format!("Subsystem {name} not found")))
            }
            "save_config" => {
                Params::new(params, &["subsystems"])?;
                self.save_config()
            }
            "load_config" => {
                let cfg = params.cloned().unwrap_or(Value::Null);
                self.load_config(&cfg).map(|_| json!(true))
            }
            "bdev_malloc_create" => self.bdev_create(params, BdevKind::Malloc),
            "bdev_null_create" => self.bdev_create(params, BdevKind::Null),
            "bdev_malloc_delete" => self.bdev_delete(params, BdevKind::Malloc),
            "bdev_null_delete" => self.bdev_delete(params, BdevKind::Null),
            "bdev_get_bdevs" => self.bdev_get_bdevs(params),
            "bdev_uring_create" => self.file_bdev_create(params, BdevKind::Uring),
            "bdev_aio_create" => self.file_bdev_create(params, BdevKind::Aio),
            "bdev_uring_delete" => self.bdev_delete(params, BdevKind::Uring),
            "bdev_aio_delete" => self.bdev_delete(params, BdevKind::Aio),
            "bdev_get_iostat" => self.bdev_get_iostat(params),
            "nvmf_create_transport" => self.create_transport(params),
            "nvmf_get_transports" => {
                let p = Params::new(params, &["trtype", "tgt_name"])?;
                let want = p.opt_str("trtype")?.map(|t| t.to_ascii_uppercase());
                let st = self.st()?;
                Ok(Value::Array(
                    st.transports
                        .iter()
                        .filter(|t| want.as_deref().is_none_or(|w| t["trtype"] == w))
                        .map(|t| Value::Object(t.clone()))
                        .collect(),
                ))
            }
            "nvmf_create_subsystem" => self.create_subsystem(params),
            "nvmf_delete_subsystem" => self.delete_subsystem(params),
            "nvmf_subsystem_add_ns" => self.add_ns(params),
            "nvmf_subsystem_remove_ns" => self.remove_ns(params),
            "nvmf_subsystem_add_listener" => self.add_listener(params),
            "nvmf_subsystem_add_host" => self.add_host(params),
            "nvmf_subsystem_remove_host" => self.remove_host(params),
            "nvmf_subsystem_remove_listener" => self.remove_listener(params),
            "nvmf_subsystem_get_controllers" => self.get_controllers(params),
            "nvmf_subsystem_get_qpairs" => self.get_qpairs(params),
            "nvmf_subsystem_get_listeners" => self.get_listeners(params),
            "nvmf_get_stats" => self.get_stats(params),
            "nvmf_subsystem_allow_any_host" => self.allow_any_host(params),
            "nvmf_get_subsystems" => self.get_subsystems(params),
            _ => match self.extra_for(method) {
                Some(d) => d.call(method, params),
                None => Err(RpcError::method_not_found()),
            },
        }
    }
}

/// Metrics of the bdevs and of the NVMe-oF target this management plane serves.
impl crate::metrics::Collector for Mgmt {
    fn collect(&self, e: &mut crate::metrics::Exposition) {
        use crate::metrics::Kind;
        let Ok(st) = self.st() else {
            return;
        };
        e.counter(
            "dpustack_bdev_malloc_refused_total",
            "bdev_malloc_create calls refused by the malloc budget (ENOMEM).",
            &[],
            st.malloc_refused,
        );
        e.declare(
            "dpustack_bdev_ops_total",
            Kind::Counter,
            "Completed bdev I/Os by type.",
        );
        for b in &st.bdevs {
            let s = b.dev.stats();
            let name = b.dev.name();
            for (t, o) in [
                ("read", s.read),
                ("write", s.write),
                ("flush", s.flush),
                ("write_zeroes", s.write_zeroes),
                ("unmap", s.unmap),
            ] {
                let l = [("bdev", name), ("type", t)];
                e.counter(
                    "dpustack_bdev_ops_total",
                    "Completed bdev I/Os by type.",
                    &l,
                    o.ops,
                );
                e.counter(
                    "dpustack_bdev_bytes_total",
                    "Bytes of completed bdev I/Os by type.",
                    &l,
                    o.bytes,
                );
            }
            e.counter(
                "dpustack_bdev_io_errors_total",
                "bdev I/Os completed with an error.",
                &[("bdev", name)],
                s.errors,
            );
        }
        let Some((tgt, _)) = &st.nvmf else {
            return;
        };
        collect_nvmf(tgt, e);
    }
}

/// The NVMe-oF target's samples: per namespace I/Os, bytes, errors and latency
/// histograms; controllers per subsystem; per poll group qpairs and I/Os.
pub fn collect_nvmf(tgt: &Tgt, e: &mut crate::metrics::Exposition) {
    use crate::metrics::Kind;
    let bounds: Vec<f64> = (0..nvmf::stats::LAT_BUCKETS)
        .map(|i| nvmf::stats::bucket_bound_ns(i) as f64 / 1e9)
        .collect();
    e.gauge(
        "dpustack_nvmf_io_stats_enabled",
        "1 when per-namespace I/O counters are kept (metrics on).",
        &[],
        if tgt.io_stats() { 1.0 } else { 0.0 },
    );
    for (n, help) in [
        ("dpustack_nvmf_read_ops_total", "NVMe-oF reads completed."),
        ("dpustack_nvmf_read_bytes_total", "Bytes read over NVMe-oF."),
        ("dpustack_nvmf_write_ops_total", "NVMe-oF writes completed."),
        (
            "dpustack_nvmf_write_bytes_total",
            "Bytes written over NVMe-oF.",
        ),
    ] {
        e.declare(n, Kind::Counter, help);
    }
    let ctrlrs = tgt.ctrlrs();
    for s in tgt.subsystems() {
        let nqn = s.nqn.as_str();
        let nc = ctrlrs.iter().filter(|c| c.subsys.nqn == s.nqn).count();
        e.gauge(
            "dpustack_nvmf_controllers",
            "Connected controllers per subsystem.",
            &[("subsystem", nqn)],
            nc as f64,
        );
        for ns in s.namespaces() {
            let t = ns.stats.total();
            let nsid = ns.nsid.to_string();
            let l = [
                ("subsystem", nqn),
                ("nsid", nsid.as_str()),
                ("bdev", ns.bdev.name()),
            ];
            e.counter(
                "dpustack_nvmf_read_ops_total",
                "NVMe-oF reads completed.",
                &l,
                t.read_ops,
            );
            e.counter(
                "dpustack_nvmf_read_bytes_total",
                "Bytes read over NVMe-oF.",
                &l,
                t.read_bytes,
            );
            e.counter(
                "dpustack_nvmf_write_ops_total",
                "NVMe-oF writes completed.",
                &l,
                t.write_ops,
            );
            e.counter(
                "dpustack_nvmf_write_bytes_total",
                "Bytes written over NVMe-oF.",
                &l,
                t.write_bytes,
            );
            e.counter(
                "dpustack_nvmf_other_ops_total",
                "NVMe-oF flush, write zeroes, dataset management and compare commands completed.",
                &l,
                t.other_ops,
            );
            e.counter(
                "dpustack_nvmf_io_errors_total",
                "NVMe-oF I/O commands the bdev failed.",
                &l,
                t.errors,
            );
            e.histogram(
                "dpustack_nvmf_read_latency_seconds",
                "NVMe-oF read latency in the target (command to completion).",
                &l,
                &bounds,
                &t.read_latency.buckets,
                t.read_latency.sum_ns as f64 / 1e9,
            );
            e.histogram(
                "dpustack_nvmf_write_latency_seconds",
                "NVMe-oF write latency in the target (command to completion).",
                &l,
                &bounds,
                &t.write_latency.buckets,
                t.write_latency.sum_ns as f64 / 1e9,
            );
        }
    }
    use std::sync::atomic::Ordering::Relaxed;
    let r = tgt.refusals();
    e.gauge(
        "dpustack_nvmf_connections",
        "Transport connections held by the target ([nvmf] max_connections bounds them).",
        &[],
        tgt.connections() as f64,
    );
    for (what, v) in [("connection", r.connections), ("controller", r.controllers)] {
        e.counter(
            "dpustack_nvmf_refused_total",
            "Connections closed at accept ([nvmf] max_connections) and admin Connects answered Controller Busy ([nvmf] max_controllers).",
            &[("what", what)],
            v,
        );
    }
    for pg in tgt.poll_group_stats() {
        let name = poll_group_name(pg.id);
        for (ty, v) in [
            ("admin", pg.current_admin_qpairs.load(Relaxed)),
            ("io", pg.current_io_qpairs.load(Relaxed)),
        ] {
            e.gauge(
                "dpustack_nvmf_qpairs",
                "Connected queue pairs per poll group.",
                &[("poll_group", &name), ("type", ty)],
                v as f64,
            );
        }
        for (ty, v) in [
            ("admin", pg.admin_qpairs.load(Relaxed)),
            ("io", pg.io_qpairs.load(Relaxed)),
        ] {
            e.counter(
                "dpustack_nvmf_qpairs_connected_total",
                "Queue pairs connected per poll group since start.",
                &[("poll_group", &name), ("type", ty)],
                v,
            );
        }
        e.counter(
            "dpustack_nvmf_completed_ios_total",
            "NVMe I/O commands completed by the bdev per poll group.",
            &[("poll_group", &name), ("transport", &pg.transport)],
            pg.completed_nvme_io.load(Relaxed),
        );
    }
}

/// SPDK's poll group thread names.
pub fn poll_group_name(id: usize) -> String {
    format!("nvmf_tgt_poll_group_{id:03}")
}
