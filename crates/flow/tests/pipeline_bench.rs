//! Figures for the closing note of issue 20 (`#[ignore]`d: a benchmark, run on demand):
//! a 4-table pipeline of 1 k rules per table (goto_table + a register load per table)
//! next to a 1 k-rule table 0 in the same run — upcalls/s (translate + install) and
//! megaflow hits/s (EMC off) on the megaflows those upcalls installed; first the EMC hit
//! rate next to the flow-key hash baseline (the key grew to 24 words with the registers).
//!
//! ```sh
//! cargo test -p flow --test pipeline_bench -- --ignored --nocapture   # test profile is optimized
//! ```

use flow::bench::{random_pipeline, random_table, table_rates, Rng};
use std::time::Duration;

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn pipeline_vs_table0() {
    let t = Duration::from_secs(1);
    let one = random_table(&mut Rng::new(5), 1000);
    let four = random_pipeline(&mut Rng::new(6), 4, 1000);
    let runs = 3;
    for _ in 0..runs {
        let h = flow::bench::baseline_hash(t);
        let (emc, pct) = flow::bench::emc_hits(t, 1000);
        eprintln!(
            "run: hash of flow key {:.1} M/s | EMC hits (1k flows) {:.1} M/s ({pct:.0}% EMC)",
            h / 1e6,
            emc / 1e6
        );
    }
    let mut rows: Vec<[f64; 4]> = Vec::new();
    for _ in 0..runs {
        let (u1, h1, f1, m1) = table_rates(t, &one);
        let (u4, h4, f4, m4) = table_rates(t, &four);
        eprintln!(
            "run: table0 upcalls {:.3} M/s hits {:.2} M/s ({f1} megaflows, {m1} masks) | 4-table upcalls {:.3} M/s hits {:.2} M/s ({f4} megaflows, {m4} masks)",
            u1 / 1e6,
            h1 / 1e6,
            u4 / 1e6,
            h4 / 1e6
        );
        rows.push([u1, h1, u4, h4]);
    }
    let med = |i: usize| {
        let mut v: Vec<f64> = rows.iter().map(|r| r[i]).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    for (i, name) in [
        "table 0 (1k rules) upcalls/s",
        "table 0 megaflow hits/s",
        "4 tables x 1k upcalls/s",
        "4 tables megaflow hits/s",
    ]
    .iter()
    .enumerate()
    {
        let (m, lo, hi) = med(i);
        eprintln!(
            "{name}: median {:.3} M (min {:.3}, max {:.3})",
            m / 1e6,
            lo / 1e6,
            hi / 1e6
        );
        assert!(m > 0.0);
    }
}
