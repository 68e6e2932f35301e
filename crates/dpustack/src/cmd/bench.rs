//! `dpustack bench <area>`: the project's benchmark convention. Each area returns a
//! [`benchkit::Report`] whose figures carry a baseline measured in the same run and
//! the ratio; printed as a table, or as JSON with `--json`.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::cmd;
use crate::config::Config;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// What to measure.
    pub area: Area,
    /// Print machine-readable JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// How many runs of each figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub secs: f64,
    /// Short runs for smoke tests (figures are then noisy).
    #[arg(long)]
    pub quick: bool,
    /// `bench nvmf`: only the metrics-cost figures (loopback A/B, callgrind
    /// instruction counts, in-memory harness), not the transports' figures.
    #[arg(long)]
    pub metrics_only: bool,
    /// `bench obj`: against the system of several engines at DIR (`dpustack
    /// system start`) instead of an engine in this process.
    #[arg(long, value_name = "DIR")]
    pub system: Option<std::path::PathBuf>,
    /// `bench obj --system`: the object class (S1, SX, RP_2, RP_3, ...;
    /// default RP_2, S1 with one engine).
    #[arg(long)]
    pub class: Option<String>,
    /// `bench obj --system`: client threads, one operation in flight each.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
}

impl BenchArgs {
    /// Duration of one run, shortened by `--quick`.
    pub fn run_time(&self) -> std::time::Duration {
        let s = if self.quick {
            self.secs.min(0.2)
        } else {
            self.secs
        };
        std::time::Duration::from_secs_f64(s.max(0.01))
    }
    /// Number of runs, 1 with `--quick`.
    pub fn runs(&self) -> u32 {
        if self.quick {
            1
        } else {
            self.runs.max(1)
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// This machine's physical limits: memcpy, UDP (plain and GSO) and TCP loopback.
    Baseline,
    /// RDMA WRITE/SEND bandwidth and latency over the software RoCEv2 provider.
    Roce,
    /// RDMA CM connection setup time.
    Cm,
    /// NVMe-oF target + host on loopback, TCP and RDMA (soft RoCE).
    Nvmf,
    /// Task Scheduler Engine overheads.
    Tse,
    /// Flow lookup rates (EMC, megaflow classifier, upcall).
    Flow,
    /// Flow offload (emulated NIC): insertion rate per provider, revalidator round
    /// times at 10 k / 100 k flows, forwarding with offload on vs off.
    Offload,
    /// Object store, IO500-style (ior-easy/hard, mdtest-easy/hard) over TCP.
    Obj,
}

pub fn run(args: &BenchArgs, cfg: &Config) -> Result<()> {
    let report = match args.area {
        Area::Baseline => baseline(args)?,
        Area::Roce => cmd::rdma::bench(args, cfg)?,
        Area::Cm => cmd::cm::bench(args, cfg)?,
        Area::Nvmf => cmd::nvmf::bench(args, cfg)?,
        Area::Tse => cmd::tse::bench(args, cfg)?,
        Area::Flow => cmd::switch::bench(args, cfg)?,
        Area::Offload => cmd::switch::bench_offload(args, cfg)?,
        Area::Obj => match &args.system {
            Some(dir) => cmd::sysobj::bench(args, dir)?,
            None => cmd::obj::bench(args, cfg)?,
        },
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

/// The machine's limits, each next to memcpy of the same size as its baseline.
fn baseline(args: &BenchArgs) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure, Report};
    use netio::baseline as b;
    let t = args.run_time();
    let runs = args.runs();
    let med = |f: &mut dyn FnMut() -> std::io::Result<f64>| -> Result<f64> {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(f()?);
        }
        Ok(median(&mut v).unwrap_or(0.0))
    };
    let mut r = Report::new("baseline");
    let mem64k = med(&mut || Ok(b::memcpy_bw(64 * 1024, t)))?;
    let udp = med(&mut || b::udp_loopback_bw(1024, t, false))?;
    let gso = med(&mut || b::udp_loopback_bw(1024, t, true))?;
    let tcp = med(&mut || b::tcp_loopback_bw(t))?;
    let rtt_block = med(&mut || b::udp_half_rtt(t, false))?;
    let rtt_busy = med(&mut || b::udp_half_rtt(t, true))?;
    r.push(Figure::new(
        "memcpy 64 KiB",
        mem64k / 1e6,
        "MB/s",
        "memcpy 64 KiB",
        mem64k / 1e6,
        Better::Higher,
    ));
    r.push(Figure::new(
        "UDP loopback 1 KiB",
        udp / 1e6,
        "MB/s",
        "memcpy 64 KiB",
        mem64k / 1e6,
        Better::Higher,
    ));
    r.push(Figure::new(
        "UDP GSO loopback 1 KiB",
        gso / 1e6,
        "MB/s",
        "UDP loopback 1 KiB",
        udp / 1e6,
        Better::Higher,
    ));
    r.push(Figure::new(
        "TCP loopback",
        tcp / 1e6,
        "MB/s",
        "memcpy 64 KiB",
        mem64k / 1e6,
        Better::Higher,
    ));
    r.push(Figure::new(
        "UDP loopback half round trip, busy poll (p50)",
        rtt_busy / 1e3,
        "us",
        "UDP half round trip, blocking recv",
        rtt_block / 1e3,
        Better::Lower,
    ));
    r.note(format!(
        "{runs} run(s) of {:.2} s each, medians",
        t.as_secs_f64()
    ));
    Ok(r)
}
