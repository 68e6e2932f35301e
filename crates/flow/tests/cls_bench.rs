//! The classifier-with-caches figures of `dpustack bench flow` (issue 14: SMC and
//! subtable ranking) without building the CLI: the same `flow::bench::ClsWorkload`
//! cells and cache configurations, interleaved per run, medians and min–max printed.
//!
//! ```sh
//! cargo test --release -p flow --features bench --test cls_bench -- --ignored --nocapture
//! # knobs: CLS_RUNS (3), CLS_SECS (0.5), CLS_QUICK=1 (1 k flows only),
//! # CLS_MASKS=100 / CLS_FLOWS=1000 / CLS_TRAFFIC=zipf|uniform (one value each: only
//! # those cells), CLS_CONFIGS=2 or 0,2 (indices into CONFIGS: only those columns),
//! # CLS_UNBATCHED=1 (one `Datapath::lookup` per packet instead of `lookup_batch`)
//! ```
#![cfg(feature = "bench")]

use flow::bench::{Caches, ClsWorkload, Traffic};
use std::time::Duration;

const CONFIGS: [(&str, Caches); 5] = [
    (
        "dpcls unranked",
        Caches {
            emc: false,
            smc: false,
            ranking: false,
        },
    ),
    (
        "dpcls ranked",
        Caches {
            emc: false,
            smc: false,
            ranking: true,
        },
    ),
    (
        "SMC+dpcls",
        Caches {
            emc: false,
            smc: true,
            ranking: true,
        },
    ),
    (
        "EMC+dpcls",
        Caches {
            emc: true,
            smc: false,
            ranking: true,
        },
    ),
    (
        "EMC+SMC+dpcls",
        Caches {
            emc: true,
            smc: true,
            ranking: true,
        },
    ),
];

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn med(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn classifier_with_caches() {
    let runs: usize = env("CLS_RUNS", 3);
    let t = Duration::from_secs_f64(env("CLS_SECS", 0.5));
    let quick = env("CLS_QUICK", 0) == 1;
    let unbatched = env("CLS_UNBATCHED", 0) == 1;
    let only_masks: Option<usize> = std::env::var("CLS_MASKS").ok().and_then(|v| v.parse().ok());
    let only_flows: Option<usize> = std::env::var("CLS_FLOWS").ok().and_then(|v| v.parse().ok());
    let only_traffic = std::env::var("CLS_TRAFFIC").ok().map(|v| v.to_lowercase());
    let cols: Vec<usize> = match std::env::var("CLS_CONFIGS") {
        Ok(v) => v
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .filter(|&i| i < CONFIGS.len())
            .collect(),
        Err(_) => (0..CONFIGS.len()).collect(),
    };
    println!("M lookups per CPU-second (thread schedstat), median (min-max) of {runs} runs of {t:?} of CPU, then the wall-clock median; [emc/smc/dpcls hit %, subtables per dpcls lookup] of the first run");
    for masks in [10usize, 100, 1000] {
        if only_masks.is_some_and(|m| m != masks) {
            continue;
        }
        for flows in [1_000usize, 100_000] {
            if (quick && flows > 1000) || only_flows.is_some_and(|f| f != flows) {
                continue;
            }
            for traffic in [Traffic::Uniform, Traffic::Zipf] {
                if only_traffic
                    .as_deref()
                    .is_some_and(|t| t != format!("{traffic:?}").to_lowercase())
                {
                    continue;
                }
                let mut w = ClsWorkload::new(masks, flows, traffic);
                let top10 = w.top_share(10, flows);
                let mut res = vec![Vec::new(); CONFIGS.len()];
                for _ in 0..runs {
                    for &i in &cols {
                        res[i].push(w.measure_with(t, CONFIGS[i].1, !unbatched));
                    }
                }
                let base = flow::bench::baseline_hash_cpu(t) / 1e6;
                print!("[key-hash baseline {base:.1} M/CPU-s] ");
                print!(
                    "{masks:>4} masks {:>3}k flows {:<7} (top-10 share {:.2}):",
                    flows / 1000,
                    format!("{traffic:?}"),
                    top10
                );
                for &i in &cols {
                    let name = CONFIGS[i].0;
                    let (m, lo, hi) = med(res[i].iter().map(|f| f.rate / 1e6).collect());
                    let f = res[i][0];
                    let (wm, _, _) = med(res[i].iter().map(|f| f.wall_rate / 1e6).collect());
                    print!(
                        " | {name} {m:.2} ({lo:.2}-{hi:.2}) wall {wm:.2} [{:.0}/{:.0}/{:.0} {:.1}]",
                        f.emc_pct, f.smc_pct, f.dpcls_pct, f.probes
                    );
                }
                println!();
            }
        }
    }
}
