//! Verbs provider selection (`--provider soft|rdma-core|auto`, config
//! `[rdma] provider`) and `dpustack devices`: the devices of both providers
//! with name, node GUID, GIDs, ports, state and active MTU.
//!
//! `auto` (the default): a device spec that names a kernel RDMA device (its
//! name, or the IPv4 of one of its RoCE v2 GIDs) opens it through rdma-core
//! when this build has the provider; with no spec, the first kernel device if
//! there is one; anything else is a soft device. `rdma-core` forces kernel
//! devices (and fails loudly on a build without the feature); `soft` never
//! touches them. The choice and the device opening are `verbs_tools`'
//! (`ProviderChoice`, `open_device`): the engines open their devices.

use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use verbs::Gid;

use crate::config::Config;

/// Which verbs provider serves the tools' devices (`verbs_tools`' type: the
/// engines open the devices).
pub use verbs_tools::ProviderChoice;

/// Fixes the run's provider choice in `cfg.rdma.provider`: the command
/// line's, else the config's; `rdma-core` on a build without it is an error.
pub fn select(cli: Option<ProviderChoice>, cfg: &mut Config) -> Result<()> {
    let c = cli.unwrap_or(cfg.rdma.provider);
    if c == ProviderChoice::RdmaCore && !verbs::rdma_core::BUILT {
        bail!("--provider rdma-core: {}", verbs::rdma_core::NOT_BUILT);
    }
    cfg.rdma.provider = c;
    Ok(())
}

/// `dpustack devices`.
#[derive(Args, Debug, Clone)]
pub struct DevicesArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct GidRow {
    index: u32,
    gid: String,
    kind: &'static str,
}

#[derive(Serialize)]
struct PortRow {
    port: u8,
    state: String,
    active_mtu: usize,
    gids: Vec<GidRow>,
}

#[derive(Serialize)]
struct DeviceRow {
    provider: &'static str,
    name: String,
    node_guid: String,
    /// How packets move: the soft provider's `udp` sockets or `af_xdp`
    /// (`DPUSTACK_ROCE_IO=xdp`), or the kernel's device.
    datapath: String,
    ports: Vec<PortRow>,
}

fn gid_str(g: &Gid) -> String {
    (0..8)
        .map(|i| format!("{:02x}{:02x}", g.0[2 * i], g.0[2 * i + 1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn guid_str(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// The MTU of the interface that holds `ip`.
fn if_mtu(ip: std::net::Ipv4Addr) -> Option<u32> {
    netio::neigh::if_mtu(&netio::neigh::iface_of(ip)?).ok()
}

/// The soft provider's devices, described without opening them (opening binds
/// UDP 4791): the values its `query_device`/`query_port`/`query_gid` give.
fn soft_rows() -> Vec<DeviceRow> {
    verbs::soft::device_list()
        .into_iter()
        .map(|(name, ip)| {
            let o = ip.octets();
            let datapath = verbs::soft::datapath(ip);
            // as the provider opens it (the AF_XDP path: the interface MTU, at most 2048)
            let mtu = match (datapath.starts_with("af_xdp"), if_mtu(ip)) {
                (true, Some(m)) => verbs::Mtu::for_ip_mtu(m as usize)
                    .min(verbs::Mtu::Mtu2048)
                    .bytes(),
                _ if ip.is_loopback() => 4096,
                _ => 1024,
            };
            let g = gid_str(&Gid::from_ipv4(ip));
            DeviceRow {
                provider: "soft",
                name,
                datapath,
                node_guid: guid_str(u64::from_be_bytes([0x02, 0, 0, 0, o[0], o[1], o[2], o[3]])),
                ports: vec![PortRow {
                    port: 1,
                    state: "ACTIVE".into(),
                    active_mtu: mtu,
                    gids: (0..2)
                        .map(|i| GidRow {
                            index: i,
                            gid: g.clone(),
                            kind: "RoCE v2",
                        })
                        .collect(),
                }],
            }
        })
        .collect()
}

#[cfg(feature = "rdma-core")]
fn kernel_rows() -> Result<Vec<DeviceRow>> {
    use anyhow::Context as _;
    let mut rows = Vec::new();
    for name in verbs::rdma_core::device_names()? {
        let ctx = verbs::rdma_core::open(&name).with_context(|| format!("opening {name}"))?;
        let Some(d) = ctx.rdma_core() else { continue };
        let nports = ctx.query_device().phys_port_cnt;
        let ports = (1..=nports)
            .map(|p| {
                let pa = ctx.query_port(p);
                PortRow {
                    port: p,
                    state: d.port_state(p).unwrap_or("?").to_string(),
                    active_mtu: pa.map(|a| a.active_mtu.bytes()).unwrap_or(0),
                    gids: d
                        .gids(p)
                        .into_iter()
                        .map(|e| GidRow {
                            index: e.index,
                            gid: gid_str(&e.gid),
                            kind: if e.roce_v2 { "RoCE v2" } else { "RoCE v1/IB" },
                        })
                        .collect(),
                }
            })
            .collect();
        rows.push(DeviceRow {
            provider: "rdma-core",
            name,
            datapath: "kernel".into(),
            node_guid: guid_str(d.node_guid()),
            ports,
        });
    }
    Ok(rows)
}

pub fn run(a: &DevicesArgs) -> Result<()> {
    #[cfg(not(feature = "rdma-core"))]
    let rows = soft_rows();
    #[cfg(feature = "rdma-core")]
    let rows = {
        let mut r = soft_rows();
        r.extend(kernel_rows()?);
        r
    };
    let kernel_unseen = !verbs::rdma_core::BUILT && verbs::rdma_core::kernel_has_devices();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        for d in &rows {
            println!(
                "{} ({})  node GUID {}  datapath {}",
                d.name, d.provider, d.node_guid, d.datapath
            );
            for p in &d.ports {
                println!(
                    "  port {}: state {}, active MTU {}",
                    p.port, p.state, p.active_mtu
                );
                for g in &p.gids {
                    println!("    GID[{:>3}] {} {}", g.index, g.gid, g.kind);
                }
            }
        }
    }
    if kernel_unseen {
        eprintln!(
            "NOTE: this host has kernel RDMA devices (/sys/class/infiniband) that are not listed: {}",
            verbs::rdma_core::NOT_BUILT
        );
    }
    Ok(())
}
