//! The revalidator (OVS ofproto-dpif-upcall's revalidator threads, as a sans-IO
//! policy over [`Datapath::revalidate`]): when a round is due (every
//! `dump_interval_ms`), which idle time applies and whether every flow must go
//! (the dynamic flow limit), and whether hardware counters are read this round
//! (at most every `offloaded_stats_delay_ms`). Time is the caller's (`now`, ms):
//! tests drive it with a made-up clock.
//!
//! OVS's rules (`revalidate`, `udpif_revalidator`):
//! * more flows than the flow limit: idle time 100 ms instead of max-idle;
//! * more than twice the limit: every flow is deleted;
//! * after each dump the limit adapts to how long the dump took: > 2 s, divided by
//!   the seconds; > 1.3 s, times 3/4; < 1 s with more than 2000 flows, + 1000 (at
//!   most the configured limit, at least 1000).

use crate::dp::{Datapath, RevalParams, Sweep};
use crate::xlate::FlowTable;

/// Revalidator settings (OVS other_config keys in brackets).
#[derive(Debug, Clone, Copy)]
pub struct RevalidatorConfig {
    /// Idle megaflows go after this long, ms [max-idle] (OVS default 10 s).
    pub max_idle_ms: u64,
    /// Most megaflows [flow-limit] (OVS default 200 000).
    pub flow_limit: usize,
    /// Period of the dump / sweep rounds, ms (OVS: ~500 ms).
    pub dump_interval_ms: u64,
    /// Hardware counters read at most this often, ms [offloaded-stats-delay].
    pub offloaded_stats_delay_ms: u64,
}

impl Default for RevalidatorConfig {
    fn default() -> Self {
        RevalidatorConfig {
            max_idle_ms: 10_000,
            flow_limit: crate::dp::DEFAULT_FLOW_LIMIT,
            dump_interval_ms: 500,
            offloaded_stats_delay_ms: 2000,
        }
    }
}

/// OVS's idle time when over the flow limit (ms).
pub const OVER_LIMIT_IDLE_MS: u64 = 100;
/// OVS's floor of the dynamic flow limit.
pub const MIN_FLOW_LIMIT: usize = 1000;

/// The revalidator's state.
#[derive(Debug, Clone)]
pub struct Revalidator {
    pub cfg: RevalidatorConfig,
    /// The current (dynamic) flow limit.
    pub flow_limit: usize,
    last_round: Option<u64>,
    last_hw_query: Option<u64>,
    /// Duration of the last round as measured by the caller (ms).
    pub last_duration_ms: u64,
    pub rounds: u64,
}

impl Revalidator {
    pub fn new(cfg: RevalidatorConfig) -> Revalidator {
        Revalidator {
            cfg,
            flow_limit: cfg.flow_limit,
            last_round: None,
            last_hw_query: None,
            last_duration_ms: 0,
            rounds: 0,
        }
    }

    /// Whether a round is due at `now`.
    pub fn due(&self, now: u64) -> bool {
        self.last_round
            .is_none_or(|t| now >= t + self.cfg.dump_interval_ms)
    }

    /// The parameters of a round at `now` for a datapath of `n_flows` flows.
    pub fn params(&self, now: u64, n_flows: usize) -> RevalParams {
        RevalParams {
            max_idle: if n_flows > self.flow_limit {
                OVER_LIMIT_IDLE_MS.min(self.cfg.max_idle_ms)
            } else {
                self.cfg.max_idle_ms
            },
            kill_all: n_flows > self.flow_limit.saturating_mul(2),
            query_hw: self
                .last_hw_query
                .is_none_or(|t| now >= t + self.cfg.offloaded_stats_delay_ms),
        }
    }

    /// Runs one round now (whether due or not).
    pub fn run(&mut self, dp: &mut Datapath, table: &mut FlowTable, now: u64) -> Sweep {
        // upcalls install up to the current (dynamic) limit, as OVS's handlers read it
        dp.flow_limit = self.flow_limit;
        let p = self.params(now, dp.n_flows());
        if p.query_hw {
            self.last_hw_query = Some(now);
        }
        self.last_round = Some(now);
        self.rounds += 1;
        dp.revalidate(table, now, p)
    }

    /// Runs a round if one is due.
    pub fn tick(&mut self, dp: &mut Datapath, table: &mut FlowTable, now: u64) -> Option<Sweep> {
        self.due(now).then(|| self.run(dp, table, now))
    }

    /// Adapts the flow limit to how long the last round took (`duration_ms`, measured
    /// by the caller) with `n_flows` flows (OVS `udpif_revalidator`).
    pub fn update_flow_limit(&mut self, duration_ms: u64, n_flows: usize) {
        self.last_duration_ms = duration_ms;
        let mut l = self.flow_limit;
        if duration_ms > 2000 {
            l /= (duration_ms / 1000) as usize;
        } else if duration_ms > 1300 {
            l = l * 3 / 4;
        } else if duration_ms < 1000
            && n_flows > 2000
            && (l as u64) < (n_flows as u64 * 1000) / duration_ms.max(1)
        {
            l += 1000;
        }
        self.flow_limit = l.min(self.cfg.flow_limit).max(MIN_FLOW_LIMIT);
    }
}
