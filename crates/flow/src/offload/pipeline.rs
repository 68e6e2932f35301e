//! The offload pipeline (OVS dpif-netdev offload thread model): `hw-offload` on/off,
//! a provider priority list (`"tc,rte"`, like OVS's hw-offload-priority), N offload
//! threads each with an MPSC queue of [`OffloadOp`] (a flow's ops always go to the
//! same thread, `ufid % N`, so they stay in order). The forwarding path only sends
//! on a channel: it never waits for a provider. Results come back on a channel the
//! datapath drains ([`crate::dp::Datapath::offload_poll`]), which keeps each flow's
//! [`OffloadState`] and the mark -> flow map of partial offloads.
//!
//! `n_threads = 0` runs every op inline at enqueue time (deterministic tests).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::nic::NicConfig;
use super::rte::RteProvider;
use super::tc::{TcPolicy, TcProvider};
use super::{FlowSpec, HwRx, HwStats, OffloadError, OffloadProvider, Offloaded};

/// Offload settings (OVS other_config keys in brackets).
#[derive(Debug, Clone)]
pub struct OffloadConfig {
    /// [hw-offload]
    pub enabled: bool,
    /// Providers tried in order [hw-offload-priority]: `tc`, `rte`.
    pub priority: Vec<String>,
    /// Offload threads [n-offload-threads]; 0 = inline (tests).
    pub n_threads: usize,
    /// Hardware counters are read at most this often, ms [offloaded-stats-delay].
    pub stats_delay_ms: u64,
    /// The emulated NIC behind each provider.
    pub nic: NicConfig,
    /// [tc-policy]
    pub tc_policy: TcPolicy,
    /// (datapath port, Linux interface) of the afpacket ports: the devices the
    /// `tc-linux` provider programs.
    pub linux_ports: Vec<(u32, String)>,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        OffloadConfig {
            enabled: false,
            priority: vec!["tc".into(), "rte".into()],
            n_threads: 1,
            stats_delay_ms: 2000,
            nic: NicConfig::default(),
            tc_policy: TcPolicy::None,
            linux_ports: Vec::new(),
        }
    }
}

/// The real Linux tc-flower provider over the afpacket ports of `cfg`.
#[cfg(feature = "driver")]
fn tc_linux(cfg: &OffloadConfig) -> Result<Arc<dyn OffloadProvider>, String> {
    if cfg.linux_ports.is_empty() {
        return Err("tc-linux needs afpacket ports (Linux interfaces to put filters on)".into());
    }
    if cfg.tc_policy != TcPolicy::None && cfg.tc_policy != TcPolicy::SkipHw {
        tracing::warn!(
            "tc-linux: tc-policy {:?} ignored: filters are always skip_hw",
            cfg.tc_policy
        );
    }
    super::tc_linux::TcLinuxProvider::new(&cfg.linux_ports)
        .map(|p| Arc::new(p) as Arc<dyn OffloadProvider>)
        .map_err(|e| format!("tc-linux: {e}"))
}

#[cfg(not(feature = "driver"))]
fn tc_linux(_: &OffloadConfig) -> Result<Arc<dyn OffloadProvider>, String> {
    Err("tc-linux: built without the `driver` feature".into())
}

/// Work for an offload thread, keyed by megaflow id (ufid).
#[derive(Debug, Clone)]
pub enum OffloadOp {
    Add { ufid: u64, spec: FlowSpec },
    Mod { ufid: u64, spec: FlowSpec },
    Del { ufid: u64 },
    Flush,
}

/// A flow's offload state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OffloadState {
    /// Not offloaded (hw-offload off, or deleted).
    #[default]
    None,
    /// Queued for an offload thread.
    Pending,
    /// MARK in the NIC, actions in software (provider index into the priority list).
    Partial { provider: u8, mark: u32 },
    /// Match and actions in the provider (`in_hw` false: tc's software classifier).
    Full { provider: u8, in_hw: bool },
    /// Every provider refused it: the reasons, provider by provider.
    Failed(String),
}

/// What an offload thread reports for one op.
#[derive(Debug, Clone)]
pub struct Done {
    pub ufid: u64,
    pub state: OffloadState,
    /// For a delete: the flow's last hardware counters.
    pub last: Option<HwStats>,
}

/// Counters of the pipeline (`switch offload-stats`).
#[derive(Debug, Default)]
pub struct OffloadCounters {
    /// Ops queued per thread, not yet taken.
    pub queued: Vec<AtomicU64>,
    pub adds: AtomicU64,
    pub mods: AtomicU64,
    pub dels: AtomicU64,
    pub flushes: AtomicU64,
    pub full: AtomicU64,
    pub partial: AtomicU64,
    pub failed: AtomicU64,
    /// Time spent in providers' put, ns.
    pub put_ns: AtomicU64,
    /// Failures by reason (provider: reason).
    pub reasons: Mutex<BTreeMap<String, u64>>,
}

struct Worker {
    providers: Arc<Vec<Arc<dyn OffloadProvider>>>,
    /// ufid -> provider index, for the flows this worker put.
    owner: HashMap<u64, u8>,
    counters: Arc<OffloadCounters>,
}

impl Worker {
    fn put(&mut self, ufid: u64, spec: &FlowSpec) -> OffloadState {
        let t0 = std::time::Instant::now();
        let mark = ufid as u32;
        let mut order: Vec<usize> = (0..self.providers.len()).collect();
        if let Some(&o) = self.owner.get(&ufid) {
            // MOD: the owner first (its put replaces the old rule).
            order.retain(|&i| i != o as usize);
            order.insert(0, o as usize);
        }
        let prev = self.owner.remove(&ufid);
        let mut why = Vec::new();
        let mut st = None;
        for i in order {
            let p = &self.providers[i];
            match p.put(ufid, spec, mark) {
                Ok(how) => {
                    if let Some(o) = prev.filter(|&o| o as usize != i) {
                        let _ = self.providers[o as usize].del(ufid);
                    }
                    self.owner.insert(ufid, i as u8);
                    st = Some(match how {
                        Offloaded::Full { in_hw } => {
                            self.counters.full.fetch_add(1, Relaxed);
                            OffloadState::Full {
                                provider: i as u8,
                                in_hw,
                            }
                        }
                        Offloaded::Partial { mark } => {
                            self.counters.partial.fetch_add(1, Relaxed);
                            OffloadState::Partial {
                                provider: i as u8,
                                mark,
                            }
                        }
                    });
                    break;
                }
                Err(e) => {
                    let r = reason_class(&e);
                    *lock(&self.counters.reasons)
                        .entry(format!("{}: {r}", p.name()))
                        .or_default() += 1;
                    why.push(format!("{}: {e}", p.name()));
                }
            }
        }
        self.counters
            .put_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        st.unwrap_or_else(|| {
            if let Some(o) = prev {
                // the owner's failed put removed it; make sure nothing is left
                let _ = self.providers[o as usize].del(ufid);
            }
            self.counters.failed.fetch_add(1, Relaxed);
            OffloadState::Failed(why.join("; "))
        })
    }

    fn run(&mut self, op: OffloadOp) -> Vec<Done> {
        match op {
            OffloadOp::Add { ufid, spec } => {
                self.counters.adds.fetch_add(1, Relaxed);
                vec![Done {
                    ufid,
                    state: self.put(ufid, &spec),
                    last: None,
                }]
            }
            OffloadOp::Mod { ufid, spec } => {
                self.counters.mods.fetch_add(1, Relaxed);
                vec![Done {
                    ufid,
                    state: self.put(ufid, &spec),
                    last: None,
                }]
            }
            OffloadOp::Del { ufid } => {
                self.counters.dels.fetch_add(1, Relaxed);
                let last = self
                    .owner
                    .remove(&ufid)
                    .and_then(|o| self.providers[o as usize].del(ufid).ok());
                vec![Done {
                    ufid,
                    state: OffloadState::None,
                    last,
                }]
            }
            OffloadOp::Flush => {
                self.counters.flushes.fetch_add(1, Relaxed);
                let mut v = Vec::new();
                for (ufid, o) in self.owner.drain() {
                    let last = self.providers[o as usize].del(ufid).ok();
                    v.push(Done {
                        ufid,
                        state: OffloadState::None,
                        last,
                    });
                }
                v
            }
        }
    }
}

/// Short class of a failure, for the per-reason counters.
fn reason_class(e: &OffloadError) -> String {
    match e {
        OffloadError::Unsupported(s) => format!("unsupported ({s})"),
        OffloadError::TableFull(_) => "table full".into(),
        OffloadError::Device(_) => "device error".into(),
        OffloadError::NotFound(_) => "not found".into(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The offload pipeline.
pub struct Offload {
    pub cfg: OffloadConfig,
    providers: Arc<Vec<Arc<dyn OffloadProvider>>>,
    senders: Vec<Sender<OffloadOp>>,
    results: Receiver<Done>,
    results_tx: Sender<Done>,
    inline: Option<Worker>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub counters: Arc<OffloadCounters>,
    /// Time of the last hardware stats query (revalidator).
    pub last_hw_query: u64,
}

impl std::fmt::Debug for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offload")
            .field("cfg", &self.cfg)
            .field("providers", &self.provider_names())
            .finish()
    }
}

impl Offload {
    /// Builds the providers named in `cfg.priority` (each on its own emulated NIC
    /// configured by `cfg.nic`) and starts the threads.
    pub fn new(cfg: OffloadConfig) -> Result<Offload, String> {
        let mut ps: Vec<Arc<dyn OffloadProvider>> = Vec::new();
        for n in &cfg.priority {
            match n.as_str() {
                "tc" => ps.push(Arc::new(TcProvider::new(cfg.nic.clone(), cfg.tc_policy))),
                "rte" | "dpdk" => ps.push(Arc::new(RteProvider::new(cfg.nic.clone()))),
                "tc-linux" => ps.push(tc_linux(&cfg)?),
                _ => {
                    return Err(format!(
                        "unknown offload provider {n:?} (tc, rte, tc-linux)"
                    ))
                }
            }
        }
        Ok(Offload::with_providers(cfg, ps))
    }

    /// A pipeline over given providers (in priority order).
    pub fn with_providers(cfg: OffloadConfig, ps: Vec<Arc<dyn OffloadProvider>>) -> Offload {
        let providers = Arc::new(ps);
        let counters = Arc::new(OffloadCounters {
            queued: (0..cfg.n_threads.max(1))
                .map(|_| AtomicU64::new(0))
                .collect(),
            ..Default::default()
        });
        let (results_tx, results) = channel();
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        for i in 0..cfg.n_threads {
            let (tx, rx) = channel::<OffloadOp>();
            let mut w = Worker {
                providers: providers.clone(),
                owner: HashMap::new(),
                counters: counters.clone(),
            };
            let out = results_tx.clone();
            let t = std::thread::Builder::new()
                .name(format!("offload{i}"))
                .spawn(move || {
                    while let Ok(op) = rx.recv() {
                        w.counters.queued[i].fetch_sub(1, Relaxed);
                        for d in w.run(op) {
                            if out.send(d).is_err() {
                                return;
                            }
                        }
                    }
                })
                .expect("spawning an offload thread");
            senders.push(tx);
            threads.push(t);
        }
        let inline = (cfg.n_threads == 0).then(|| Worker {
            providers: providers.clone(),
            owner: HashMap::new(),
            counters: counters.clone(),
        });
        Offload {
            cfg,
            providers,
            senders,
            results,
            results_tx,
            inline,
            threads,
            counters,
            last_hw_query: 0,
        }
    }

    pub fn provider_names(&self) -> Vec<&'static str> {
        self.providers.iter().map(|p| p.name()).collect()
    }
    pub fn provider(&self, i: u8) -> &Arc<dyn OffloadProvider> {
        &self.providers[i as usize]
    }
    pub fn providers(&self) -> &[Arc<dyn OffloadProvider>] {
        &self.providers
    }

    /// Queues an op (never blocks: unbounded MPSC channel). Inline mode runs it now.
    pub fn enqueue(&mut self, op: OffloadOp) {
        let n = self.senders.len();
        if n == 0 {
            if let Some(w) = self.inline.as_mut() {
                for d in w.run(op) {
                    let _ = self.results_tx.send(d);
                }
            }
            return;
        }
        match op {
            OffloadOp::Flush => {
                for (i, s) in self.senders.iter().enumerate() {
                    self.counters.queued[i].fetch_add(1, Relaxed);
                    let _ = s.send(OffloadOp::Flush);
                }
            }
            OffloadOp::Add { ufid, .. } | OffloadOp::Mod { ufid, .. } | OffloadOp::Del { ufid } => {
                let i = (ufid % n as u64) as usize;
                self.counters.queued[i].fetch_add(1, Relaxed);
                let _ = self.senders[i].send(op);
            }
        }
    }

    /// Results ready (non-blocking).
    pub fn try_result(&self) -> Option<Done> {
        self.results.try_recv().ok()
    }

    /// Ops queued and not yet taken by a thread.
    pub fn queued(&self) -> u64 {
        self.counters.queued.iter().map(|q| q.load(Relaxed)).sum()
    }

    /// The hardware receive path: providers in priority order; the first that
    /// matches handles the frame.
    pub fn rx(&self, key: &crate::key::FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx {
        for p in self.providers.iter() {
            match p.rx_key(key, frame, now) {
                HwRx::Miss => {}
                r => return r,
            }
        }
        HwRx::Miss
    }

    /// `switch offload-stats` text.
    pub fn stats_text(&self) -> String {
        let c = &self.counters;
        let mut s = format!(
            "hw-offload: {}, providers: {}, offload threads: {}\n",
            if self.cfg.enabled { "true" } else { "false" },
            self.provider_names().join(","),
            self.cfg.n_threads
        );
        let q: Vec<String> = c
            .queued
            .iter()
            .map(|q| q.load(Relaxed).to_string())
            .collect();
        s += &format!("queue depths: {}\n", q.join(" "));
        let adds = c.adds.load(Relaxed) + c.mods.load(Relaxed);
        let ns = c.put_ns.load(Relaxed);
        let rate = if ns > 0 {
            adds as f64 / (ns as f64 / 1e9)
        } else {
            0.0
        };
        s += &format!(
            "ops: add {} mod {} del {} flush {}; results: full {} partial {} failed {}; put rate {:.0} flows/s of offload-thread time\n",
            c.adds.load(Relaxed),
            c.mods.load(Relaxed),
            c.dels.load(Relaxed),
            c.flushes.load(Relaxed),
            c.full.load(Relaxed),
            c.partial.load(Relaxed),
            c.failed.load(Relaxed),
            rate
        );
        for p in self.providers.iter() {
            s += &format!("provider {}: {} flows\n", p.name(), p.len());
        }
        for (r, n) in lock(&c.reasons).iter() {
            s += &format!("failures {r}: {n}\n");
        }
        s
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.senders.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
