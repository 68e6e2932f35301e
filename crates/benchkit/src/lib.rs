//! # benchkit — shared timing, percentile and report helpers for `dpustack bench`
//!
//! Owns: the benchmark convention of the project. Every figure is a [`Figure`]
//! measured next to a baseline from the same run, reported as a human table and,
//! with `--json`, as machine-readable JSON including the ratio.
//!
//! Depends on nothing inside dpustack.

#![forbid(unsafe_code)]

use serde::Serialize;
use std::time::{Duration, Instant};

/// Latency samples in nanoseconds with percentile queries.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    ns: Vec<u64>,
    sorted: bool,
}

impl Samples {
    /// An empty sample set with room for `n` samples (allocate before timing).
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            ns: Vec::with_capacity(n),
            sorted: true,
        }
    }
    /// Record one duration.
    pub fn push(&mut self, d: Duration) {
        self.ns.push(d.as_nanos() as u64);
        self.sorted = false;
    }
    /// Record one duration given in nanoseconds.
    pub fn push_ns(&mut self, ns: u64) {
        self.ns.push(ns);
        self.sorted = false;
    }
    pub fn len(&self) -> usize {
        self.ns.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }
    fn sort(&mut self) {
        if !self.sorted {
            self.ns.sort_unstable();
            self.sorted = true;
        }
    }
    /// The `p`-th percentile (0.0..=100.0), nearest-rank; `None` when empty.
    pub fn percentile(&mut self, p: f64) -> Option<u64> {
        if self.ns.is_empty() {
            return None;
        }
        self.sort();
        let p = p.clamp(0.0, 100.0);
        let rank = ((p / 100.0) * self.ns.len() as f64).ceil() as usize;
        Some(self.ns[rank.saturating_sub(1).min(self.ns.len() - 1)])
    }
    pub fn mean(&self) -> Option<f64> {
        if self.ns.is_empty() {
            return None;
        }
        Some(self.ns.iter().map(|&x| x as f64).sum::<f64>() / self.ns.len() as f64)
    }
    /// min, p50, p99, p99.9, max in ns.
    pub fn summary(&mut self) -> Option<LatencySummary> {
        Some(LatencySummary {
            count: self.ns.len(),
            min_ns: self.percentile(0.0)?,
            p50_ns: self.percentile(50.0)?,
            p99_ns: self.percentile(99.0)?,
            p999_ns: self.percentile(99.9)?,
            max_ns: self.percentile(100.0)?,
            mean_ns: self.mean()?,
        })
    }
}

/// A compact latency distribution.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: usize,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
}

/// Median of a set of values (e.g. several runs of one figure).
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// Runs `f` repeatedly until at least `min` time has passed; returns (iterations, elapsed).
/// `f` is given the iteration index and returns how many operations it did.
pub fn run_for(min: Duration, mut f: impl FnMut(u64) -> u64) -> (u64, Duration) {
    let start = Instant::now();
    let mut ops = 0u64;
    let mut i = 0u64;
    loop {
        ops += f(i);
        i += 1;
        let el = start.elapsed();
        if el >= min {
            return (ops, el);
        }
    }
}

/// Whether a larger or a smaller value of a figure is better.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// One measured figure next to its same-run baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured, e.g. "RDMA WRITE 64 KiB bandwidth".
    pub name: String,
    pub value: f64,
    pub unit: String,
    /// What the baseline is, e.g. "UDP GSO loopback".
    pub baseline_name: String,
    pub baseline: f64,
    /// value / baseline.
    pub ratio: f64,
    pub better: Better,
    /// Optional extra detail (percentiles, parameters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl Figure {
    pub fn new(
        name: impl Into<String>,
        value: f64,
        unit: impl Into<String>,
        baseline_name: impl Into<String>,
        baseline: f64,
        better: Better,
    ) -> Self {
        let ratio = if baseline != 0.0 {
            value / baseline
        } else {
            f64::NAN
        };
        Figure {
            name: name.into(),
            value,
            unit: unit.into(),
            baseline_name: baseline_name.into(),
            baseline,
            ratio,
            better,
            detail: None,
        }
    }
    pub fn with_detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// The result of one `dpustack bench <area>` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub area: String,
    pub figures: Vec<Figure>,
    /// Free-form notes printed under the table (conditions, caveats).
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(area: impl Into<String>) -> Self {
        Report {
            area: area.into(),
            figures: Vec::new(),
            notes: Vec::new(),
        }
    }
    pub fn push(&mut self, f: Figure) {
        self.figures.push(f);
    }
    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
    /// A human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let w = self
            .figures
            .iter()
            .map(|f| f.name.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let bw = self
            .figures
            .iter()
            .map(|f| f.baseline_name.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(s, "bench {}", self.area);
        let _ = writeln!(
            s,
            "{:<w$}  {:>14} {:<8}  {:<bw$}  {:>14}  {:>8}",
            "figure", "value", "unit", "baseline", "baseline val", "ratio"
        );
        for f in &self.figures {
            let _ = writeln!(
                s,
                "{:<w$}  {:>14} {:<8}  {:<bw$}  {:>14}  {:>8.3}",
                f.name,
                fmt_num(f.value),
                f.unit,
                f.baseline_name,
                fmt_num(f.baseline),
                f.ratio
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Keeps a value alive for the optimiser (re-export of `std::hint::black_box`).
pub use std::hint::black_box;

/// The machine's CPU as `/proc/cpuinfo` names it, with the number of CPUs this
/// process may run on ("unknown" where there is no /proc/cpuinfo): printed with
/// benchmark figures, which only compare within one machine.
pub fn cpu_model() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model} ({n} CPUs)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut s = Samples::with_capacity(100);
        for i in 1..=100 {
            s.push_ns(i);
        }
        assert_eq!(s.percentile(50.0), Some(50));
        assert_eq!(s.percentile(99.0), Some(99));
        assert_eq!(s.percentile(100.0), Some(100));
        assert_eq!(s.percentile(0.0), Some(1));
        let sum = s.summary().unwrap();
        assert_eq!(sum.count, 100);
        assert!((sum.mean_ns - 50.5).abs() < 1e-9);
    }

    #[test]
    fn empty_has_no_percentile() {
        let mut s = Samples::default();
        assert_eq!(s.percentile(50.0), None);
        assert!(s.summary().is_none());
    }

    #[test]
    fn median_even_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn figure_ratio_and_report() {
        let f = Figure::new("x", 50.0, "MB/s", "udp", 100.0, Better::Higher);
        assert!((f.ratio - 0.5).abs() < 1e-12);
        let mut r = Report::new("demo");
        r.push(f);
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(j["figures"][0]["ratio"], 0.5);
        assert!(r.to_table().contains("udp"));
    }

    #[test]
    fn run_for_counts_ops() {
        let (ops, el) = run_for(Duration::from_millis(5), |_| 2);
        assert!(ops >= 2 && ops % 2 == 0);
        assert!(el >= Duration::from_millis(5));
    }
}
