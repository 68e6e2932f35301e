//! The NVMe-oF target's configuration: a target file (bdevs, subsystems with
//! namespaces and hosts, listeners; TOML or JSON) or the quick form (one
//! subsystem, one namespace on one bdev), built into an `nvmf::Tgt` and its
//! listen list. Used by the node's nvmf part and by `dpustack nvmf serve`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use nvme::log::TrType;
use nvmf::subsystem::Subsystem;
use nvmf::transport::TransportId;
use nvmf::{Listen, ListenSpec, NvmfServer, Tgt, TgtParams};

/// NQN of the subsystem the quick forms (`serve --bdev`, `up`) create.
pub const DEFAULT_NQN: &str = "nqn.2024-01.io.dpustack:nvme0";

/// Errors of the target configuration.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A file could not be read or parsed, a value could not be parsed (`what` says which).
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A bdev could not be created.
    #[error("bdev {name:?} ({spec})")]
    Bdev {
        name: String,
        spec: String,
        #[source]
        source: bdev::Error,
    },
    #[error(transparent)]
    Subsystem(#[from] nvmf::subsystem::SubsystemError),
    /// The configuration is inconsistent or a value is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Result of the target configuration.
pub type Result<T> = std::result::Result<T, TargetError>;

macro_rules! bail {
    ($($t:tt)*) => { return Err(TargetError::Invalid(format!($($t)*))) };
}
macro_rules! invalid {
    ($($t:tt)*) => { TargetError::Invalid(format!($($t)*)) };
}

fn context<E: std::error::Error + Send + Sync + 'static>(
    what: String,
) -> impl FnOnce(E) -> TargetError {
    move |e| TargetError::Context {
        what,
        source: Box::new(e),
    }
}

/// A target configuration file: bdevs, subsystems with namespaces and hosts, listeners.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TargetFile {
    #[serde(default)]
    pub bdev: Vec<BdevConf>,
    #[serde(default)]
    pub subsystem: Vec<SubsystemConf>,
    #[serde(default)]
    pub listener: Vec<ListenerConf>,
    /// Poll group threads (default 1).
    #[serde(default)]
    pub poll_groups: Option<usize>,
    /// Accept header/data digests when hosts ask (default true).
    #[serde(default)]
    pub digests: Option<bool>,
    /// Most transport connections held at once (default 4096); more are closed at accept.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Most controllers at once (default 1024); more get "Connect Controller Busy".
    #[serde(default)]
    pub max_controllers: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BdevConf {
    pub name: String,
    /// malloc | null | file
    pub kind: String,
    /// e.g. "64M", "1G"; for a file: creates/resizes a regular file (absent = its size)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    #[serde(default = "default_bs")]
    pub block_size: u32,
    /// file: the file or block device
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// file: open with O_DIRECT
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// file: io_uring queue depth per channel (default 128)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u32>,
}

impl BdevConf {
    /// The `bdev::spec` text for this entry (`malloc:64M`, `file:/p,size=1G,direct`).
    pub fn spec(&self) -> Result<String> {
        let size = || {
            self.size
                .as_deref()
                .ok_or_else(|| invalid!("bdev {:?}: {} wants size", self.name, self.kind))
        };
        let file_only = self.path.is_some() || self.direct || self.queue_depth.is_some();
        match self.kind.as_str() {
            "malloc" | "null" if file_only => bail!(
                "bdev {:?}: path/direct/queue_depth are for kind = \"file\"",
                self.name
            ),
            "malloc" | "null" => Ok(format!("{}:{}", self.kind, size()?)),
            "file" => {
                let path = self
                    .path
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| invalid!("bdev {:?}: kind = \"file\" wants path", self.name))?;
                if path.contains(',') {
                    bail!("bdev {:?}: a path with ',' is not supported", self.name);
                }
                let mut spec = format!("file:{path}");
                if let Some(sz) = &self.size {
                    spec += &format!(",size={sz}");
                }
                if self.direct {
                    spec += ",direct";
                }
                if let Some(q) = self.queue_depth {
                    spec += &format!(",qd={q}");
                }
                Ok(spec)
            }
            other => bail!(
                "bdev {:?}: unknown kind {other:?} (malloc, null, file)",
                self.name
            ),
        }
    }
}

fn default_bs() -> u32 {
    512
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConf {
    pub nqn: String,
    #[serde(default = "default_serial")]
    pub serial: String,
    #[serde(default = "default_model")]
    pub model: String,
    #[serde(default = "yes")]
    pub allow_any_host: bool,
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub max_namespaces: Option<u32>,
    #[serde(default)]
    pub namespace: Vec<NamespaceConf>,
}

fn default_serial() -> String {
    "DPUSTACK0001".into()
}
fn default_model() -> String {
    "dpustack NVMe-oF".into()
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConf {
    /// 0 or absent = the lowest free NSID.
    #[serde(default)]
    pub nsid: u32,
    pub bdev: String,
    /// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; derived from the NQN and NSID if absent.
    #[serde(default)]
    pub uuid: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConf {
    /// tcp://IP:PORT
    pub address: String,
    #[serde(default)]
    pub discovery_only: bool,
}

/// Parses "64M", "1G", "4096", "512K".
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => bail!("bad size suffix in {s:?}"),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(context(format!("bad size {s:?}")))?;
    n.checked_mul(mul)
        .ok_or_else(|| invalid!("size {s:?} overflows"))
}

/// `rdma://IP[:PORT]` → its address; other schemes → `None`.
pub fn rdma_addr(s: &str, default_port: u16) -> Result<Option<SocketAddr>> {
    match s.strip_prefix("rdma://") {
        Some(rest) => parse_addr(rest, default_port).map(Some),
        None => Ok(None),
    }
}

/// A listener address: `rdma://IP[:PORT]` (NVMe/RDMA), or `tcp://IP:PORT`,
/// `IP:PORT`, `IP` (NVMe/TCP).
pub fn parse_listen(s: &str, default_port: u16, discovery_only: bool) -> Result<Listen> {
    let trid = match rdma_addr(s, default_port)? {
        Some(a) => TransportId::ip(TrType::Rdma, a),
        None => TransportId::tcp(parse_addr(s, default_port)?),
    };
    Ok(Listen {
        trid,
        discovery_only,
    })
}

/// `specs` (addresses of the quick form) as listeners of transport `tr`.
pub fn listen_as(tr: TrType, specs: &[ListenSpec]) -> Vec<Listen> {
    specs
        .iter()
        .map(|l| Listen {
            trid: TransportId::ip(tr, l.addr),
            discovery_only: l.discovery_only,
        })
        .collect()
}

/// Starts `tgt` on `listen`: NVMe/TCP when every listener is TCP, NVMe/RDMA when
/// every one is RDMA (on `rdma_dev` when given — the node's CM device, which owns
/// UDP 4791 on its address — else on a soft RoCE device opened on the listeners'
/// address). One server serves one transport: a mix is refused with a message.
pub fn start_target(
    tgt: Tgt,
    listen: &[Listen],
    poll_groups: usize,
    rdma_dev: Option<cm::driver::CmDevice>,
) -> Result<NvmfServer> {
    let rdma = listen
        .iter()
        .filter(|l| l.trid.trtype == TrType::Rdma)
        .count();
    if rdma == 0 {
        let specs: Vec<ListenSpec> = listen
            .iter()
            .filter_map(|l| {
                l.trid.socket_addr().map(|addr| ListenSpec {
                    addr,
                    discovery_only: l.discovery_only,
                })
            })
            .collect();
        return NvmfServer::start(tgt, &specs, poll_groups)
            .map_err(context("starting the NVMe/TCP target".into()));
    }
    if rdma != listen.len() {
        bail!(
            "listeners {}: one target serves one transport (all tcp:// or all rdma://); \
             run a second target for the other",
            listen
                .iter()
                .map(|l| l.trid.uri())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let params = nvmf::rdma::RdmaParams::default();
    match rdma_dev {
        Some(dev) => nvmf::rdma::start_server_on(tgt, dev, listen, poll_groups, params),
        None => nvmf::rdma::start_server(tgt, listen, poll_groups, params),
    }
    .map_err(context("starting the NVMe/RDMA target".into()))
}

/// Parses `tcp://IP:PORT`, `IP:PORT`, or `IP` (with `default_port`). An
/// `rdma://` address is refused here (a TCP address is wanted); [`parse_listen`]
/// takes both.
pub fn parse_addr(s: &str, default_port: u16) -> Result<SocketAddr> {
    if s.starts_with("rdma://") {
        bail!("{s}: a TCP address is wanted here (rdma:// is for NVMe/RDMA listeners and hosts)");
    }
    let s = s.strip_prefix("tcp://").unwrap_or(s);
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    s.to_socket_addrs()
        .map_err(context(format!("bad address {s:?}")))?
        .next()
        .ok_or_else(|| invalid!("address {s:?} did not resolve"))
}

pub fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        bail!("bad UUID {s:?}");
    }
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(context(format!("bad UUID {s:?}")))?;
    }
    Ok(u)
}

/// Creates a bdev named `name` from a `bdev::spec` text (`malloc:64M`, `null:1G`,
/// `file:PATH[,size=64M][,direct][,qd=N]`) with block size `bs`.
pub fn make_bdev(name: &str, spec: &str, bs: u32) -> Result<Arc<dyn bdev::BlockDevice>> {
    bdev::spec::create(name, spec, bs).map_err(|source| TargetError::Bdev {
        name: name.to_string(),
        spec: spec.to_string(),
        source,
    })
}

impl TargetFile {
    pub fn load(path: &Path) -> Result<TargetFile> {
        let text = std::fs::read_to_string(path)
            .map_err(context(format!("reading {}", path.display())))?;
        if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(context(format!("parsing {}", path.display())))
        } else {
            toml::from_str(&text).map_err(context(format!("parsing {}", path.display())))
        }
    }

    /// Builds the target and the listen list (tcp:// and rdma:// listeners).
    pub fn build(&self) -> Result<(Tgt, Vec<Listen>)> {
        let mut params = TgtParams::default();
        if let Some(d) = self.digests {
            params.digests = d;
        }
        if let Some(n) = self.max_connections {
            params.max_connections = n;
        }
        if let Some(n) = self.max_controllers {
            params.max_controllers = n;
        }
        let mut tgt = Tgt::new(params);
        let mut bdevs = std::collections::HashMap::new();
        for b in &self.bdev {
            if bdevs.contains_key(&b.name) {
                bail!("bdev {:?} defined twice", b.name);
            }
            bdevs.insert(
                b.name.clone(),
                make_bdev(&b.name, &b.spec()?, b.block_size)?,
            );
        }
        for s in &self.subsystem {
            let mut sub = Subsystem::new(&s.nqn, &s.serial, &s.model)?;
            if let Some(m) = s.max_namespaces {
                sub.max_namespaces = m;
            }
            for h in &s.hosts {
                sub.add_host(h);
            }
            sub.allow_any_host = s.allow_any_host && s.hosts.is_empty();
            for ns in &s.namespace {
                let b = bdevs
                    .get(&ns.bdev)
                    .ok_or_else(|| invalid!("namespace refers to unknown bdev {:?}", ns.bdev))?;
                let uuid = ns.uuid.as_deref().map(parse_uuid).transpose()?;
                sub.add_ns(ns.nsid, b.clone(), uuid)?;
            }
            tgt.add_subsystem(sub)?;
        }
        let mut listen = Vec::new();
        for l in &self.listener {
            listen.push(parse_listen(&l.address, 4420, l.discovery_only)?);
        }
        if listen.is_empty() {
            bail!("no listener configured");
        }
        Ok((tgt, listen))
    }
}

/// The quick form: one subsystem `nqn`, one namespace on `bdev`, any host.
pub fn quick_target(
    nqn: &str,
    bdev_spec: &str,
    listen: &[SocketAddr],
    discovery_port: u16,
) -> Result<(Tgt, Vec<ListenSpec>)> {
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(nqn, "DPUSTACK0001", "dpustack NVMe-oF")?;
    s.add_ns(1, make_bdev("bdev0", bdev_spec, 512)?, None)?;
    tgt.add_subsystem(s)?;
    let mut specs: Vec<ListenSpec> = listen
        .iter()
        .map(|&addr| ListenSpec {
            addr,
            discovery_only: false,
        })
        .collect();
    if discovery_port != 0 {
        if let Some(first) = listen.first() {
            if first.port() != discovery_port {
                specs.push(ListenSpec {
                    addr: SocketAddr::new(first.ip(), discovery_port),
                    discovery_only: true,
                });
            }
        }
    }
    Ok((tgt, specs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf::host::{self, HostOpts};

    /// One server, one transport: tcp:// and rdma:// listeners together are refused
    /// (before anything binds).
    #[test]
    fn mixed_transports_are_refused() {
        let listen = [
            parse_listen("127.0.0.1:4420", 4420, false).unwrap(),
            parse_listen("rdma://127.0.0.1:4421", 4420, false).unwrap(),
        ];
        let e = start_target(Tgt::new(TgtParams::default()), &listen, 1, None)
            .expect_err("a mix of transports must be refused")
            .to_string();
        assert!(e.contains("one target serves one transport"), "{e}");
    }

    #[test]
    fn sizes_and_addresses() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
        assert_eq!(parse_addr("tcp://10.0.0.1:4420", 1).unwrap().port(), 4420);
        assert_eq!(parse_addr("127.0.0.1", 8009).unwrap().port(), 8009);
        assert!(parse_addr("rdma://127.0.0.1:4420", 1).is_err());
        assert_eq!(
            rdma_addr("rdma://10.0.0.1", 4420).unwrap(),
            Some("10.0.0.1:4420".parse().unwrap())
        );
        assert_eq!(rdma_addr("tcp://10.0.0.1", 4420).unwrap(), None);
        let l = parse_listen("rdma://10.0.0.1", 4420, false).unwrap();
        assert_eq!(
            (l.trid.trtype, l.trid.uri().as_str()),
            (TrType::Rdma, "rdma://10.0.0.1:4420")
        );
        let l = parse_listen("10.0.0.1:4421", 4420, true).unwrap();
        assert_eq!((l.trid.trtype, l.discovery_only), (TrType::Tcp, true));
        assert_eq!(
            parse_uuid("6b3c7e0e-1111-4222-8333-444455556666").unwrap()[0],
            0x6b
        );
    }

    #[test]
    fn target_file_toml_and_json() {
        let toml_text = r#"
            [[bdev]]
            name = "m0"
            kind = "malloc"
            size = "1M"
            [[subsystem]]
            nqn = "nqn.2024-01.io.dpustack:a"
            hosts = ["nqn.2024-01.io.dpustack:h"]
            [[subsystem.namespace]]
            bdev = "m0"
            [[listener]]
            address = "tcp://127.0.0.1:0"
        "#;
        let f: TargetFile = toml::from_str(toml_text).unwrap();
        let (tgt, listen) = f.build().unwrap();
        let s = tgt.subsystem("nqn.2024-01.io.dpustack:a").unwrap();
        assert!(!s.allow_any_host);
        assert!(s.host_allowed("nqn.2024-01.io.dpustack:h"));
        assert_eq!(s.nsids(), vec![1]);
        assert_eq!(listen.len(), 1);
        let json = serde_json::to_string(&f).unwrap();
        let g: TargetFile = serde_json::from_str(&json).unwrap();
        assert!(g.build().is_ok());
        // a namespace on an unknown bdev is an error
        let bad = toml_text.replace("bdev = \"m0\"", "bdev = \"nope\"");
        let f: TargetFile = toml::from_str(&bad).unwrap();
        assert!(f.build().is_err());
    }

    /// A bdev of kind "file" from a target config file: data written by our host
    /// over NVMe/TCP lands in the file at NSID 1's LBA offsets, and bytes put in
    /// the file are read back over NVMe/TCP.
    #[test]
    fn file_bdev_from_config_over_loopback() {
        let dir = std::env::temp_dir().join(format!("dpustack-nvmf-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ns1.img");
        let text = format!(
            r#"
            [[bdev]]
            name = "f0"
            kind = "file"
            path = "{}"
            size = "1M"
            block_size = 4096
            queue_depth = 16
            [[subsystem]]
            nqn = "nqn.2024-01.io.dpustack:file"
            [[subsystem.namespace]]
            bdev = "f0"
            [[listener]]
            address = "tcp://127.0.0.1:0"
            "#,
            path.display()
        );
        let f: TargetFile = toml::from_str(&text).unwrap();
        assert_eq!(
            f.bdev[0].spec().unwrap(),
            format!("file:{},size=1M,qd=16", path.display())
        );
        let (tgt, listen) = f.build().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        let srv = start_target(tgt, &listen, 1, None).unwrap();
        let o = HostOpts {
            timeout: std::time::Duration::from_secs(5),
            ..Default::default()
        };
        let mut c =
            host::Controller::connect(srv.addrs()[0], "nqn.2024-01.io.dpustack:file", &o, 1, 8)
                .unwrap();
        let ns = c.identify_ns(1).unwrap();
        assert_eq!((ns.blocks, ns.block_size), (256, 4096));
        // 3 blocks at LBA 5 (R2T path) and 1 block at LBA 255 (in-capsule, last block)
        let data: Vec<u8> = (0..3 * 4096).map(|i| (i * 7 + i / 4096) as u8).collect();
        c.write(0, 1, 5, &data, 4096).unwrap();
        c.write(0, 1, 255, &[0xa5; 4096], 4096).unwrap();
        let file = std::fs::read(&path).unwrap();
        assert!(
            file[5 * 4096..8 * 4096] == data[..],
            "file content after host write"
        );
        assert!(file[255 * 4096..].iter().all(|&b| b == 0xa5));
        assert!(file[..5 * 4096].iter().all(|&b| b == 0));
        // the other way: bytes written to the file are what the host reads
        let mut img = file;
        img[100 * 4096..101 * 4096].fill(0x3c);
        std::fs::write(&path, &img).unwrap();
        assert!(c.read(0, 1, 100, 1, 4096).unwrap() == vec![0x3c; 4096]);
        assert!(c.read(0, 1, 5, 3, 4096).unwrap() == data);
        c.shutdown().unwrap();
        srv.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bdev_specs() {
        let conf = |kind: &str, size: Option<&str>, path: Option<&str>| BdevConf {
            name: "b".into(),
            kind: kind.into(),
            size: size.map(Into::into),
            block_size: 512,
            path: path.map(Into::into),
            direct: false,
            queue_depth: None,
        };
        assert_eq!(
            conf("malloc", Some("1M"), None).spec().unwrap(),
            "malloc:1M"
        );
        assert!(conf("malloc", None, None).spec().is_err());
        assert!(conf("null", Some("1M"), Some("/x")).spec().is_err());
        assert!(conf("file", Some("1M"), None).spec().is_err());
        assert!(conf("file", None, Some("/a,b")).spec().is_err());
        assert!(conf("disk", Some("1M"), None).spec().is_err());
        let mut d = conf("file", None, Some("/dev/nvme0n1"));
        d.direct = true;
        assert_eq!(d.spec().unwrap(), "file:/dev/nvme0n1,direct");
        // the quick form (--bdev) takes the same specs
        assert_eq!(make_bdev("q", "null:1M", 512).unwrap().num_blocks(), 2048);
        assert!(make_bdev("q", "malloc", 512).is_err());
        let p = std::env::temp_dir().join(format!("dpustack-nvmf-quick-{}", std::process::id()));
        let (t, _) = quick_target(
            DEFAULT_NQN,
            &format!("file:{},size=64K", p.display()),
            &["127.0.0.1:0".parse().unwrap()],
            0,
        )
        .unwrap();
        let ns = t.subsystem(DEFAULT_NQN).unwrap().ns(1).unwrap().clone();
        assert_eq!(ns.num_blocks(), 128);
        let _ = std::fs::remove_file(&p);
    }
}
