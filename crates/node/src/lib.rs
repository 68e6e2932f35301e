//! # node — the node runtime
//!
//! Owns: what the parts of a dpustack node share and how they start and stop.
//! A [`Node`] is built from a [`Config`] and holds each part it started: the
//! soft RoCE device (rdma), the CM agent on its QP1 with the rping echo server
//! (cm, [`cm_agent`]), the NVMe-oF target (nvmf, built by [`target`]), the TSE
//! self-check (tse), the live switch (switch) and the object-store engine
//! (obj, [`objstore`]). Each part has a [`Status`]: running, disabled by the
//! config, not built yet (loud), or failed (loud; the other parts carry on).
//! [`Node::stop`] stops what runs, dependents first. No process-global state:
//! the CM agent gets the node's device from the `Node`, the CM settings from
//! the config.
//!
//! Does not own: the TOML file, Ctrl-C, printing (the `dpustack` CLI does
//! `up`, `config show`); the parts' protocols (their crates).
//!
//! Depends on `verbs`, `cm`, `cm-tools` (the rping server), `verbs-tools`
//! (device spec), `nvmf`, `bdev`, `tse`, `switch`, `obj`.

#![forbid(unsafe_code)]

pub mod cm_agent;
pub mod config;
pub mod manage;
pub mod objstore;
pub mod target;

use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

pub use cm_agent::CmAgent;
pub use config::{
    CmConfig, Config, MetricsConfig, NodeConfig, NvmfConfig, ObjConfig, RdmaConfig, SwitchConfig,
    TseConfig,
};

/// Errors of starting a part.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Device(#[from] verbs_tools::Error),
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    #[error(transparent)]
    Cm(#[from] cm::driver::DriverError),
    #[error(transparent)]
    Target(#[from] target::TargetError),
    #[error(transparent)]
    Switch(#[from] switch::Error),
    #[error(transparent)]
    Tse(#[from] tse::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// `what` failed because of `source`.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The TSE self-check ran its DAG wrong.
    #[error("TSE self-check failed: order {order:?}, {live} live task(s)")]
    SelfCheck { order: Vec<u32>, live: usize },
    /// A part failed; the message carries the causes.
    #[error("{0}")]
    Part(String),
}

/// Result of the node.
pub type Result<T> = std::result::Result<T, Error>;

/// An error and its causes, joined with ": " (as anyhow's `{:#}`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += ": ";
        s += &c.to_string();
        cur = c.source();
    }
    s
}

/// How a part of the node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Started; `detail` says what runs where.
    Running(String),
    /// Turned off (or given nothing to do) by the config; says which setting.
    Disabled(&'static str),
    /// Not built yet: say so loudly.
    NotYet {
        issue: Option<u32>,
        what: &'static str,
    },
    /// Failed to start (the error and its causes): say so loudly.
    Failed(String),
}

/// One part of the node.
#[derive(Debug, Clone)]
pub struct Part {
    pub name: &'static str,
    pub status: Status,
}

/// A running node: the parts it started and their status.
pub struct Node {
    parts: Vec<Part>,
    device: Option<verbs::Context>,
    cm: Option<CmAgent>,
    nvmf: Option<nvmf::NvmfServer>,
    switch: Option<switch::Switch>,
    obj: Option<obj::engine::Engine>,
}

impl Node {
    /// Starts every part `cfg` enables, in order (rdma, cm, nvmf, tse, switch,
    /// obj); a part that fails is recorded as [`Status::Failed`] and the rest
    /// carry on.
    pub fn start(cfg: &Config) -> Node {
        let mut n = Node {
            parts: Vec::new(),
            device: None,
            cm: None,
            nvmf: None,
            switch: None,
            obj: None,
        };
        let r = n.start_rdma(cfg);
        n.record("rdma", r);
        let r = n.start_cm(cfg);
        n.record("cm", r);
        let r = n.start_nvmf(cfg);
        n.record("nvmf", r);
        n.record("tse", start_tse(cfg));
        let r = n.start_switch(cfg);
        n.record("switch", r);
        let r = n.start_obj(cfg);
        n.record("obj", r);
        n
    }

    fn record(&mut self, name: &'static str, r: Result<Status>) {
        let status = r.unwrap_or_else(|e| Status::Failed(error_chain(&e)));
        self.parts.push(Part { name, status });
    }

    /// Every part, in start order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Parts that are not running although they should: failed or not built yet.
    pub fn missing(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| matches!(p.status, Status::Failed(_) | Status::NotYet { .. }))
            .count()
    }

    /// The node's soft RoCE device (the rdma part), while it runs.
    pub fn device(&self) -> Option<&verbs::Context> {
        self.device.as_ref()
    }

    /// The node's CM agent (the cm part), while it runs.
    pub fn cm(&self) -> Option<&CmAgent> {
        self.cm.as_ref()
    }

    /// The NVMe-oF target (the nvmf part), while it runs.
    pub fn nvmf(&self) -> Option<&nvmf::NvmfServer> {
        self.nvmf.as_ref()
    }

    /// The object-store engine (the obj part), while it runs.
    pub fn obj(&self) -> Option<&obj::engine::Engine> {
        self.obj.as_ref()
    }

    /// Whether the tse part ran (its schedulers and EQs are counted by tse::stats).
    pub fn tse_enabled(&self) -> bool {
        self.parts
            .iter()
            .any(|p| p.name == "tse" && matches!(p.status, Status::Running(_)))
    }

    /// A control handle of the live switch (the switch part), while it runs.
    pub fn switch_control(&self) -> Option<switch::control::Control> {
        self.switch.as_ref().map(|s| s.control())
    }

    /// Stops what runs, dependents first: obj, switch, nvmf, cm, then the device
    /// (dropping a `Node` does the same).
    pub fn stop(self) {
        drop(self)
    }

    /// A soft RoCE device with its poller thread.
    fn start_rdma(&mut self, cfg: &Config) -> Result<Status> {
        if !cfg.rdma.enabled {
            return Ok(Status::Disabled("[rdma] enabled = false"));
        }
        // the section's device, else the node's listen address (as the other services)
        let ctx = verbs_tools::open_device_with(
            cfg.device_spec(),
            verbs::soft::IoMode::Threaded,
            cfg.rdma.provider,
            cfg.rdma.limits(),
        )?;
        let attr = ctx.query_port(1)?;
        let what = match ctx.soft() {
            Some(_) => format!(
                "soft RoCEv2 device (datapath {})",
                verbs::soft::datapath(ctx.ip())
            ),
            None => "kernel RDMA device (rdma-core)".to_string(),
        };
        let detail = format!(
            "{what} {} on {}:4791, MTU {}, GID {:?}",
            ctx.name(),
            ctx.ip(),
            attr.active_mtu.bytes(),
            ctx.query_gid(1, 1)?.to_ipv4()
        );
        self.device = Some(ctx);
        Ok(Status::Running(detail))
    }

    /// The CM agent on the rdma part's device, or on a device of its own when
    /// the rdma part does not run.
    fn start_cm(&mut self, cfg: &Config) -> Result<Status> {
        if !cfg.cm.enabled {
            return Ok(Status::Disabled("[cm] enabled = false"));
        }
        let (ctx, shared) = match &self.device {
            Some(ctx) => (ctx.clone(), true),
            None => (
                verbs_tools::open_device(
                    cfg.device_spec(),
                    verbs::soft::IoMode::Threaded,
                    cfg.rdma.provider,
                )?,
                false,
            ),
        };
        let agent = CmAgent::start(ctx, shared, cfg.cm.core(), cfg.cm.rping_port)?;
        let detail = agent.detail.clone();
        self.cm = Some(agent);
        Ok(Status::Running(detail))
    }

    /// The NVMe/TCP target.
    fn start_nvmf(&mut self, cfg: &Config) -> Result<Status> {
        let n = &cfg.nvmf;
        if !n.enabled {
            return Ok(Status::Disabled("[nvmf] enabled = false"));
        }
        let (tgt, listen, groups) = if let Some(p) = &n.target_config {
            let f = target::TargetFile::load(p)?;
            let (t, l) = f.build()?;
            (t, l, f.poll_groups.unwrap_or(n.poll_groups))
        } else {
            let l = target::parse_listen(&n.listen, 4420, false)?;
            let a = l.trid.socket_addr().ok_or_else(|| {
                Error::Part(format!("[nvmf] listen {}: not an IP address", n.listen))
            })?;
            let (t, specs) = target::quick_target(&n.nqn, &n.bdev, &[a], n.discovery_port)?;
            (t, target::listen_as(l.trid.trtype, &specs), n.poll_groups)
        };
        // NVMe/RDMA listeners on the node's address go through the CM agent's device
        // (it owns UDP 4791 there); elsewhere a soft device of their own
        let rdma = listen
            .iter()
            .any(|l| l.trid.trtype == nvme::log::TrType::Rdma);
        let dev = self.cm.as_ref().map(|c| c.device().clone()).filter(|d| {
            listen
                .iter()
                .all(|l| l.trid.socket_addr().map(|a| a.ip()) == Some(IpAddr::V4(d.ip())))
        });
        let srv = target::start_target(tgt, &listen, groups, dev)?;
        let detail = format!(
            "{} target: {} on {}",
            if rdma { "NVMe/RDMA" } else { "NVMe/TCP" },
            srv.tgt()
                .subsystems()
                .map(|s| s.nqn.clone())
                .collect::<Vec<_>>()
                .join(", "),
            srv.tgt()
                .listeners()
                .iter()
                .map(|l| format!(
                    "{}{}",
                    l.trid.uri(),
                    if l.discovery_only { " (discovery)" } else { "" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.nvmf = Some(srv);
        Ok(Status::Running(detail))
    }

    /// The object-store engine on `[obj]`.
    fn start_obj(&mut self, cfg: &Config) -> Result<Status> {
        if !cfg.obj.enabled {
            return Ok(Status::Disabled("[obj] enabled = false"));
        }
        if !obj::IMPLEMENTED {
            return Ok(Status::NotYet {
                issue: Some(12),
                what: "DAOS-style object store",
            });
        }
        let ec = objstore::engine_config(cfg, None, None, None)?;
        let eng = objstore::start_engine(&ec, cfg.obj.max_clients)?;
        let detail = format!(
            "object engine on {} ({} targets; {}), data {}",
            eng.addr(),
            eng.targets(),
            ec.rdma_listen
                .map_or("RDMA off: [obj] rdma_listen".to_string(), |r| format!(
                    "RDMA on {r}"
                )),
            ec.data_dir.display()
        );
        self.obj = Some(eng);
        Ok(Status::Running(detail))
    }

    /// The live switch when `[switch] ports` are set.
    fn start_switch(&mut self, cfg: &Config) -> Result<Status> {
        let c = &cfg.switch;
        if !c.enabled {
            return Ok(Status::Disabled("[switch] enabled = false"));
        }
        if c.ports.is_empty() {
            return Ok(Status::Disabled(
                "no [switch] ports configured; `dpustack switch run` runs one by hand",
            ));
        }
        let opts = switch::SwitchOpts {
            flows: c.flows.clone(),
            groups: c.groups.clone(),
            vlans: c.vlans.clone(),
            mac_aging_s: c.mac_aging,
            mac_table_size: c.mac_table_size,
            ports: c.ports.clone(),
            duration: None,
            max_idle_ms: c.max_idle,
            openflow: switch::openflow_io::OfOpts {
                listen: c.openflow_listen.clone(),
                controllers: c.controllers.clone(),
                fail_mode: c.fail_mode.clone(),
                max_connections: c.openflow_max_connections,
                async_backlog: c.openflow_async_backlog,
                ..Default::default()
            },
            dp: switch::DatapathOpts {
                hw_offload: c.hw_offload,
                offload_priority: c.offload_priority.clone(),
                n_offload_threads: c.n_offload_threads,
                tc_policy: c.tc_policy.clone(),
                flow_limit: c.flow_limit,
                port_tx_queue: c.port_tx_queue,
                smc_enable: c.smc_enable,
                ..Default::default()
            },
        };
        let s = switch::Switch::start(opts)
            .map_err(|e| Error::Part(format!("switch: {}", error_chain(&e))))?;
        self.switch = Some(s);
        Ok(Status::Running(format!(
            "{} ports, controlled through the node's JSON-RPC socket (dpustack_switch_*)",
            c.ports.len(),
        )))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(e) = self.obj.take() {
            e.stop();
        }
        if let Some(s) = self.switch.take() {
            if let Err(e) = s.stop() {
                tracing::warn!("switch: {}", error_chain(&e));
            }
        }
        if let Some(s) = self.nvmf.take() {
            s.stop();
        }
        if let Some(c) = self.cm.take() {
            c.stop();
        }
    }
}

/// The TSE is a library with no service of its own: its part is a self-check.
fn start_tse(cfg: &Config) -> Result<Status> {
    if !cfg.tse.enabled {
        return Ok(Status::Disabled("[tse] enabled = false"));
    }
    tse_self_check()?;
    Ok(Status::Running(
        "library, no service of its own: schedulers and event queues are progressed by \
         the threads that use them (e.g. the object-store client's event queues); \
         self-check ran a 4-task DAG in order; every scheduler and EQ of the process is \
         counted (dpustack_tse_get_stats, dpustack_tse_* metrics)"
            .into(),
    ))
}

/// A 4-task diamond on a fresh scheduler: proves the engine works in this
/// build. Returns the order the bodies ran in.
pub fn tse_self_check() -> Result<Vec<u32>> {
    use tse::{Scheduler, TaskId};
    let mut s = Scheduler::new();
    let order = Rc::new(RefCell::new(Vec::new()));
    let ids: Vec<TaskId> = (0..4u32)
        .map(|i| {
            let o = order.clone();
            s.create(move |s, id| {
                o.borrow_mut().push(i);
                let _ = s.complete(id, Ok(()));
            })
        })
        .collect();
    s.register_deps(ids[3], &[ids[1], ids[2]])?;
    s.register_deps(ids[1], &[ids[0]])?;
    s.register_deps(ids[2], &[ids[0]])?;
    for &id in ids.iter().rev() {
        s.schedule(id)?;
    }
    s.progress();
    let order = order.borrow().clone();
    if order != [0, 1, 2, 3] || s.live() != 0 || !s.check_complete() {
        return Err(Error::SelfCheck {
            order,
            live: s.live(),
        });
    }
    Ok(order)
}
