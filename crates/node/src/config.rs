//! The node configuration: one section per part, every field defaulted to the
//! embedded defaults (serde; the CLI reads and prints it as TOML).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

use crate::target::DEFAULT_NQN;

/// The whole node configuration (`dpustack --config FILE`, `dpustack config show`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub node: NodeConfig,
    pub rdma: RdmaConfig,
    pub cm: CmConfig,
    pub nvmf: NvmfConfig,
    pub tse: TseConfig,
    pub switch: SwitchConfig,
    pub obj: ObjConfig,
    pub metrics: MetricsConfig,
}

/// The `[metrics]` section: the Prometheus endpoint of `up` and `nvmf serve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:PORT` of the HTTP endpoint (`GET /metrics`); `"0"` = off (no
    /// endpoint, and the NVMe-oF target keeps no per-namespace I/O counters).
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
        }
    }
}

/// The `[node]` section.
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

/// The `[rdma]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaConfig {
    pub enabled: bool,
    /// IPv4 address (or `dps_a_b_c_d` name) of the soft device `up` starts;
    /// empty = `node.listen_ip`.
    pub device: String,
    /// Verbs provider of the tools and the node's device: auto, soft, rdma-core
    /// (`--provider`).
    pub provider: verbs_tools::ProviderChoice,
    /// Bounds of the soft device on objects held at once (`ibv_query_device`
    /// reports them; past one a creation fails with EINVAL and is counted in
    /// `dpustack_rdma_refused_resources_total`). A kernel device keeps its own.
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_srq: u32,
}

impl RdmaConfig {
    /// The soft device's bounds from this section.
    pub fn limits(&self) -> verbs::soft::DeviceLimits {
        verbs::soft::DeviceLimits {
            max_qp: self.max_qp,
            max_cq: self.max_cq,
            max_mr: self.max_mr,
            max_pd: self.max_pd,
            max_srq: self.max_srq,
        }
    }
}

impl Default for RdmaConfig {
    fn default() -> Self {
        let l = verbs::soft::DeviceLimits::default();
        RdmaConfig {
            max_qp: l.max_qp,
            max_cq: l.max_cq,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_srq: l.max_srq,
            enabled: true,
            device: String::new(),
            provider: Default::default(),
        }
    }
}

impl Config {
    /// The node's soft RoCE device: `[rdma] device`, else `[node] listen_ip`
    /// (none when both are empty: the host's default address).
    pub fn device_spec(&self) -> Option<&str> {
        let dev = if self.rdma.device.is_empty() {
            self.node.listen_ip.as_str()
        } else {
            self.rdma.device.as_str()
        };
        (!dev.is_empty()).then_some(dev)
    }
}

/// The `[cm]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CmConfig {
    pub enabled: bool,
    /// CM response timeout (IB time: 4.096 us * 2^n; 20 ~ 4.3 s, as the kernel CMA).
    pub cm_response_timeout: u8,
    /// MAD retries before UNREACHABLE / giving up a DREQ.
    pub max_cm_retries: u8,
    /// How long a closed connection stays in TIMEWAIT, in ms.
    pub timewait_ms: u64,
    /// `dpustack up`: port of the rping-compatible echo server on the node's
    /// address (0 = off; 7174 is rping's default).
    pub rping_port: u16,
    /// Most CM ids held at once; peers' connection requests past it are
    /// refused (REJ "no resources") and counted in `dpustack_cm_refused_requests_total`.
    pub max_ids: usize,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            enabled: true,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            timewait_ms: 1000,
            rping_port: 7174,
            max_ids: cm::CmConfig::default().max_ids,
        }
    }
}

impl CmConfig {
    /// The `cm` crate's settings for a CM device (the node's agent and the CM tools).
    pub fn core(&self) -> cm::CmConfig {
        cm::CmConfig {
            cm_response_timeout: self.cm_response_timeout.min(31),
            max_cm_retries: self.max_cm_retries.min(15),
            timewait: Duration::from_millis(self.timewait_ms),
            max_ids: self.max_ids,
            ..cm::CmConfig::default()
        }
    }
}

/// The `[nvmf]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmfConfig {
    pub enabled: bool,
    /// I/O listener of `dpustack up` (`IP:PORT`, `tcp://IP:PORT`, or `rdma://IP[:PORT]`:
    /// NVMe/RDMA on the node's soft RoCE device when IP is its address).
    pub listen: String,
    /// Discovery-only port (0 = none); discovery also answers on `listen`.
    pub discovery_port: u16,
    /// Backing device of the single namespace of `dpustack up` (`malloc:64M`, `null:1G`,
    /// `file:PATH[,size=64M][,direct][,qd=N]`).
    pub bdev: String,
    pub nqn: String,
    /// A full target configuration file (TOML or JSON) used instead of the quick form.
    pub target_config: Option<PathBuf>,
    /// Poll group threads (0 = one per CPU).
    pub poll_groups: usize,
}

impl Default for NvmfConfig {
    fn default() -> Self {
        NvmfConfig {
            enabled: true,
            listen: "127.0.0.1:4420".into(),
            discovery_port: 8009,
            bdev: "malloc:64M".into(),
            nqn: DEFAULT_NQN.into(),
            target_config: None,
            poll_groups: 1,
        }
    }
}

/// The `[tse]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TseConfig {
    pub enabled: bool,
}

impl Default for TseConfig {
    fn default() -> Self {
        TseConfig { enabled: true }
    }
}

/// The `[switch]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    pub enabled: bool,
    /// Initial flow table for `dpustack up` (ovs-ofctl add-flows file).
    pub flows: Option<PathBuf>,
    /// Ports for `dpustack up`, as for `switch run --port`: "N=afpacket:IF", ...
    /// Without ports the switch is not started by `up`.
    pub ports: Vec<String>,
    /// Initial group table (ovs-ofctl add-groups file).
    pub groups: Option<PathBuf>,
    /// NORMAL: port VLAN config as for `switch run --vlan`: "N:tag=10",
    /// "N:trunks=10,20", "N:tag=10;trunks=20;vlan_mode=native-untagged".
    pub vlans: Vec<String>,
    /// NORMAL: MAC aging in seconds (OVS mac-aging-time).
    pub mac_aging: u64,
    /// NORMAL: MAC learning table size (OVS mac-table-size).
    pub mac_table_size: usize,
    /// Offload megaflows to the (emulated) NIC (OVS hw-offload).
    pub hw_offload: bool,
    /// Offload providers in order: "tc,rte" (OVS hw-offload-priority).
    pub offload_priority: String,
    /// Offload threads (OVS n-offload-threads).
    pub n_offload_threads: usize,
    /// tc provider policy: none, skip_sw, skip_hw (OVS tc-policy).
    pub tc_policy: String,
    /// Idle megaflows go after this many ms (OVS max-idle).
    pub max_idle: u64,
    /// Most datapath flows (OVS flow-limit).
    pub flow_limit: usize,
    /// Signature match cache before the megaflow classifier (OVS smc-enable).
    pub smc_enable: bool,
    /// OpenFlow 1.3 passive targets, as `switch run --listen`: "ptcp:[PORT][:IP]", "punix:PATH".
    pub openflow_listen: Vec<String>,
    /// OpenFlow controllers to connect to, as `switch run --controller`: "tcp:IP[:PORT]".
    pub controllers: Vec<String>,
    /// Fail mode without a controller: "secure" (default) or "standalone".
    pub fail_mode: String,
    /// Frames an AF_PACKET port's transmit queue holds (past it: dropped, counted).
    pub port_tx_queue: usize,
    /// OpenFlow connections accepted at once (past it: closed at accept, counted).
    pub openflow_max_connections: usize,
    /// Unsent OpenFlow output (bytes) at which async messages are dropped.
    pub openflow_async_backlog: usize,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            enabled: true,
            flows: None,
            ports: Vec::new(),
            groups: None,
            vlans: Vec::new(),
            mac_aging: 300,
            mac_table_size: 8192,
            hw_offload: false,
            offload_priority: "tc,rte".into(),
            n_offload_threads: 1,
            tc_policy: "none".into(),
            max_idle: 10_000,
            flow_limit: 200_000,
            smc_enable: false,
            openflow_listen: Vec::new(),
            controllers: Vec::new(),
            fail_mode: "secure".into(),
            port_tx_queue: switch::port::DEFAULT_TX_QUEUE,
            openflow_max_connections: switch::openflow_io::DEFAULT_MAX_CONNECTIONS,
            openflow_async_backlog: switch::openflow::ASYNC_BACKLOG,
        }
    }
}

/// The `[obj]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjConfig {
    pub enabled: bool,
    /// Where the engine listens (and where the tools connect): `IP:PORT`.
    pub listen: String,
    /// Targets (poller threads); 0 = one per core.
    pub targets: usize,
    /// The engine's data directory (default: `<node data_dir>/obj`).
    pub data_dir: Option<PathBuf>,
    /// Also serve RPC over RDMA (soft RoCE on this IP, RDMA CM on this
    /// port), e.g. `127.0.0.1:7480`; empty = TCP only.
    pub rdma_listen: String,
    /// Seconds between two background VOS aggregation passes (0 = none: the
    /// space of overwritten versions then comes back only with the container).
    pub aggregate_interval_secs: f64,
    /// A pass aggregates the versions older than this many seconds that no
    /// snapshot needs (reads at younger epochs keep theirs).
    pub aggregate_delay_secs: f64,
    /// Connected RPC clients (TCP + RDMA) the engine admits; past it a
    /// connection is closed at accept (RDMA: rejected) and counted.
    pub max_clients: usize,
}

impl Default for ObjConfig {
    fn default() -> Self {
        ObjConfig {
            enabled: true,
            listen: "127.0.0.1:10001".into(),
            targets: 0,
            data_dir: None,
            rdma_listen: String::new(),
            aggregate_interval_secs: 10.0,
            aggregate_delay_secs: 30.0,
            max_clients: obj::rpc::limit::DEFAULT_MAX_CLIENTS,
        }
    }
}

impl ObjConfig {
    /// The engine's data directory: `data_dir`, else `<node data_dir>/obj`.
    pub fn data_dir(&self, cfg: &Config) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| cfg.node.data_dir.join("obj"))
    }
}
