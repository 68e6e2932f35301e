//! The switch's datapath settings (hw-offload, providers, offload threads, max-idle,
//! flow limit) and the two control commands for them, as functions any control layer
//! can call: [`offload_stats`] (`switch offload-stats`) and [`apply_config`]
//! (`switch config KEY=VALUE ...`). The runtime answers them on its control socket
//! before handing other requests to [`crate::ctl`].
//!
//! The offload target of `tc` and `rte` is the emulated NIC of `flow::offload::nic`
//! (no hardware is programmed): the live switch says so when hw-offload is on.
//! `tc-linux` programs the kernel's tc flower (skip_hw) on the afpacket ports.

use flow::dp::Datapath;
use flow::offload::nic::NicConfig;
use flow::offload::{Offload, OffloadConfig};
use flow::revalidator::{Revalidator, RevalidatorConfig};

use crate::{Error, Result};

/// Datapath settings (OVS other_config names in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatapathOpts {
    /// [hw-offload]
    pub hw_offload: bool,
    /// [hw-offload-priority]: providers in order, `tc`, `rte`, `tc-linux`.
    pub offload_priority: String,
    /// [n-offload-threads]
    pub n_offload_threads: usize,
    /// [tc-policy]: none, skip_sw, skip_hw.
    pub tc_policy: String,
    /// [flow-limit]
    pub flow_limit: usize,
    /// [offloaded-stats-delay], ms.
    pub offloaded_stats_delay_ms: u64,
    /// Entries of the emulated NIC table behind each provider.
    pub nic_capacity: usize,
    /// Frames a port's transmit queue holds while the kernel has no room
    /// (past it: dropped, counted in `port_tx_dropped`).
    pub port_tx_queue: usize,
    /// (port, interface) of the afpacket ports, for the `tc-linux` provider (set by
    /// the runtime from `--port N=afpacket:IF`).
    pub linux_ports: Vec<(u32, String)>,
    /// [smc-enable]: the signature match cache between the EMC and the megaflow
    /// classifier (off by default, as in OVS).
    pub smc_enable: bool,
}

impl Default for DatapathOpts {
    fn default() -> Self {
        DatapathOpts {
            hw_offload: false,
            offload_priority: "tc,rte".into(),
            n_offload_threads: 1,
            tc_policy: "none".into(),
            flow_limit: 200_000,
            offloaded_stats_delay_ms: 2000,
            nic_capacity: 65536,
            port_tx_queue: crate::port::DEFAULT_TX_QUEUE,
            linux_ports: Vec::new(),
            smc_enable: false,
        }
    }
}

impl DatapathOpts {
    /// The offload pipeline these settings describe (None: hw-offload off).
    pub fn offload(&self) -> Result<Option<Offload>> {
        if !self.hw_offload {
            return Ok(None);
        }
        let cfg = OffloadConfig {
            enabled: true,
            priority: self
                .offload_priority
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            n_threads: self.n_offload_threads,
            stats_delay_ms: self.offloaded_stats_delay_ms,
            nic: NicConfig {
                capacity: self.nic_capacity,
                ..Default::default()
            },
            tc_policy: self.tc_policy.parse().map_err(Error::Config)?,
            linux_ports: self.linux_ports.clone(),
        };
        if cfg.priority.is_empty() {
            return Err(Error::Config(
                "hw-offload-priority names no provider".into(),
            ));
        }
        if self.n_offload_threads == 0 {
            return Err(Error::Config("n-offload-threads must be at least 1".into()));
        }
        Offload::new(cfg).map(Some).map_err(Error::Config)
    }

    /// The revalidator these settings (and `max_idle_ms`) describe.
    pub fn revalidator(&self, max_idle_ms: u64) -> Revalidator {
        Revalidator::new(RevalidatorConfig {
            max_idle_ms,
            flow_limit: self.flow_limit,
            offloaded_stats_delay_ms: self.offloaded_stats_delay_ms,
            ..Default::default()
        })
    }
}

/// `switch offload-stats`: the pipeline's queue depths, op counts, results, put
/// rate, failures by reason; the datapath's hardware-forwarded / mark-hit counts;
/// the revalidator's flow limit and last round time.
pub fn offload_stats(dp: &Datapath, rv: &Revalidator) -> String {
    let mut s = match dp.offload() {
        Some(o) => o.stats_text(),
        None => "hw-offload: false\n".to_string(),
    };
    let (mut full, mut partial, mut failed, mut pending) = (0, 0, 0, 0);
    for f in dp.flows() {
        match f.offload {
            flow::offload::OffloadState::Full { .. } => full += 1,
            flow::offload::OffloadState::Partial { .. } => partial += 1,
            flow::offload::OffloadState::Failed(_) => failed += 1,
            flow::offload::OffloadState::Pending => pending += 1,
            flow::offload::OffloadState::None => {}
        }
    }
    s += &format!(
        "megaflows: {} (offloaded full {full}, partial {partial}, failed {failed}, pending {pending})\n",
        dp.n_flows()
    );
    s += &format!(
        "packets: hw-forwarded {}, mark hits {}, smc hits {}, upcalls {}, flow-limit hits {}\n",
        dp.stats.hw_forwarded,
        dp.stats.mark_hits,
        dp.stats.smc_hits,
        dp.stats.upcalls,
        dp.stats.flow_limit_hits
    );
    s += &format!(
        "revalidator: flow-limit {} (configured {}), max-idle {} ms, rounds {}, last round {} ms\n",
        rv.flow_limit, rv.cfg.flow_limit, rv.cfg.max_idle_ms, rv.rounds, rv.last_duration_ms
    );
    s
}

/// `switch config KEY=VALUE ...` (keys: hw-offload, hw-offload-priority,
/// n-offload-threads, tc-policy, max-idle (ms), flow-limit, offloaded-stats-delay (ms),
/// smc-enable).
/// Applies them live: a change of the offload settings rebuilds the pipeline (the
/// old one's flows are flushed from its providers, every megaflow is queued to the
/// new one). Without arguments prints the settings.
pub fn apply_config(
    args: &str,
    opts: &mut DatapathOpts,
    rv: &mut Revalidator,
    dp: &mut Datapath,
) -> Result<String> {
    let mut new = opts.clone();
    let mut max_idle = rv.cfg.max_idle_ms;
    for kv in args.split_whitespace() {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::Config(format!("{kv:?}: expected KEY=VALUE")))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| Error::Config(format!("{k}={v}: not a number")))
        };
        match k {
            "hw-offload" => {
                new.hw_offload = v
                    .parse()
                    .map_err(|_| Error::Config(format!("{kv}: true or false")))?
            }
            "hw-offload-priority" => new.offload_priority = v.to_string(),
            "n-offload-threads" => new.n_offload_threads = num(v)? as usize,
            "tc-policy" => new.tc_policy = v.to_string(),
            "max-idle" => max_idle = num(v)?,
            "flow-limit" => new.flow_limit = num(v)? as usize,
            "offloaded-stats-delay" => new.offloaded_stats_delay_ms = num(v)?,
            "smc-enable" => {
                new.smc_enable = v
                    .parse()
                    .map_err(|_| Error::Config(format!("{kv}: true or false")))?
            }
            _ => return Err(Error::Config(format!("unknown key {k:?}"))),
        }
    }
    let offload_changed = (
        new.hw_offload,
        &new.offload_priority,
        new.n_offload_threads,
        &new.tc_policy,
        new.offloaded_stats_delay_ms,
    ) != (
        opts.hw_offload,
        &opts.offload_priority,
        opts.n_offload_threads,
        &opts.tc_policy,
        opts.offloaded_stats_delay_ms,
    );
    if offload_changed {
        let o = new.offload()?; // validate before touching anything
        dp.set_offload(o);
    }
    if new.smc_enable != dp.smc_enabled() {
        dp.set_smc(new.smc_enable);
    }
    rv.cfg.max_idle_ms = max_idle;
    rv.cfg.offloaded_stats_delay_ms = new.offloaded_stats_delay_ms;
    if new.flow_limit != opts.flow_limit {
        rv.cfg.flow_limit = new.flow_limit;
        rv.flow_limit = new.flow_limit;
    }
    *opts = new;
    Ok(format!(
        "hw-offload={} hw-offload-priority={} n-offload-threads={} tc-policy={} max-idle={} flow-limit={} offloaded-stats-delay={} smc-enable={}\n",
        opts.hw_offload,
        opts.offload_priority,
        opts.n_offload_threads,
        opts.tc_policy,
        rv.cfg.max_idle_ms,
        rv.cfg.flow_limit,
        opts.offloaded_stats_delay_ms,
        opts.smc_enable
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_apply_live_and_bad_values_change_nothing() {
        let mut o = DatapathOpts::default();
        let mut rv = o.revalidator(10_000);
        let mut dp = Datapath::new();
        let r = apply_config(
            "hw-offload=true n-offload-threads=2 max-idle=5000 flow-limit=3000",
            &mut o,
            &mut rv,
            &mut dp,
        )
        .unwrap();
        assert!(r.contains("hw-offload=true"), "{r}");
        assert!(dp.offload().is_some());
        assert_eq!(dp.offload().unwrap().cfg.n_threads, 2);
        assert_eq!((rv.cfg.max_idle_ms, rv.flow_limit), (5000, 3000));
        assert!(offload_stats(&dp, &rv).contains("offload threads: 2"));
        assert!(!dp.smc_enabled());
        let r = apply_config("smc-enable=true", &mut o, &mut rv, &mut dp).unwrap();
        assert!(r.contains("smc-enable=true") && dp.smc_enabled(), "{r}");
        assert!(apply_config("smc-enable=yes", &mut o, &mut rv, &mut dp).is_err());
        assert!(dp.smc_enabled(), "a bad value changes nothing");
        apply_config("smc-enable=false", &mut o, &mut rv, &mut dp).unwrap();
        assert!(!dp.smc_enabled());
        for bad in [
            "hw-offload=maybe",
            "bogus=1",
            "hw-offload-priority=nic",
            "tc-policy=x",
            "max-idle=soon",
        ] {
            assert!(
                apply_config(bad, &mut o, &mut rv, &mut dp).is_err(),
                "{bad}"
            );
        }
        assert_eq!(o.offload_priority, "tc,rte");
        assert!(dp.offload().is_some());
        apply_config("hw-offload=false", &mut o, &mut rv, &mut dp).unwrap();
        assert!(dp.offload().is_none());
        assert!(offload_stats(&dp, &rv).starts_with("hw-offload: false"));
    }
}
