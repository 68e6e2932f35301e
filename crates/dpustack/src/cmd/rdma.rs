//! RDMA verbs tools over the software RoCEv2 provider (issue #3): rc-pingpong,
//! uc-pingpong, ud-pingpong (wire- and exchange-compatible with rdma-core's
//! ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong), perf (perftest-like) and
//! `bench roce`: their arguments and output. The engines are `verbs_tools`'.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use verbs::{Mtu, QpType};
use verbs_tools::perf::{self, is_lat, PerfParams, PerfResult};
use verbs_tools::pingpong::{self, PingpongOpts};
use verbs_tools::ProviderChoice;

pub use verbs_tools::perf::{PerfMode, PerfTest};
#[cfg(test)]
use {
    verbs::Gid,
    verbs_tools::exchange::{decode_dest, encode_dest, Dest},
};

use crate::cmd::bench::BenchArgs;
use crate::config::Config;

/// Options shared by rc-, uc- and ud-pingpong (rdma-core's letters).
#[derive(Args, Debug, Clone)]
pub struct PingpongArgs {
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Device: dpustack device name (dps_a_b_c_d) or its IPv4 address.
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Port of the device (always 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Message size (rc, uc: 4096, ud: 2048).
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Path MTU (rc, uc): 256..4096.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: usize,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: usize,
    /// Iterations.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: usize,
    /// Service level (carried, unused on RoCE).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events (completion channel) instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local GID index (0 and 1 are both the IPv4-mapped RoCEv2 GID here).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 1)]
    pub gid_idx: i32,
    /// Validate received buffers (ibv_*_pingpong -c compatible).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Server to connect to (none = be the server).
    pub host: Option<String>,
}

/// perftest-like tests and device modes: `verbs_tools::perf`'s, with clap's ValueEnum.

#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Which test.
    pub test: PerfTest,
    /// Server to connect to (none = be the server).
    pub host: Option<String>,
    /// Run both ends in this process between two devices (127.0.0.1 and 127.0.0.2).
    #[arg(long)]
    pub loopback: bool,
    /// Device (name or IPv4).
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18516)]
    pub port: u16,
    /// Message size (bw: 65536, lat: 2).
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Iterations (bw: 5000, lat: 1000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<usize>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<f64>,
    /// Outstanding work requests (bw tests).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    pub mtu: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Device progress: `manual` (default: no device thread, the test's own
    /// thread receives while it busy-polls its CQ, one thread per side),
    /// `threaded` (a poller thread per device, as `dpustack up`) or, with
    /// `--loopback`, `single` (one thread drives both devices).
    #[arg(long, value_enum, default_value_t = PerfMode::Manual)]
    pub mode: PerfMode,
    /// Do not use UDP GSO on loopback devices (one skb per packet).
    #[arg(long)]
    pub no_gso: bool,
}

/// How `perf` drives its devices.

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// ibv_rc_pingpong-compatible RC ping-pong (server when no host is given).
    RcPingpong(PingpongArgs),
    /// ibv_ud_pingpong-compatible UD ping-pong.
    UdPingpong(PingpongArgs),
    /// ibv_uc_pingpong-compatible UC ping-pong (no ACKs, no retransmission:
    /// a lost packet stalls it until the 60 s timeout).
    UcPingpong(PingpongArgs),
    /// perftest-style bandwidth/latency (write-bw, send-bw, read-bw, write-lat, send-lat).
    Perf(PerfArgs),
}

pub fn run(cmd: Cmd, cfg: &Config) -> Result<()> {
    // the device provider: `--provider`, else `[rdma] provider`
    let provider = cfg.rdma.provider;
    match cmd {
        Cmd::RcPingpong(a) => pingpong(a, QpType::Rc, provider),
        Cmd::UdPingpong(a) => pingpong(a, QpType::Ud, provider),
        Cmd::UcPingpong(a) => pingpong(a, QpType::Uc, provider),
        Cmd::Perf(a) => perf_cmd(a, provider),
    }
}

impl PingpongArgs {
    fn opts(&self, provider: ProviderChoice) -> PingpongOpts {
        PingpongOpts {
            port: self.port,
            dev: self.dev.clone(),
            ib_port: self.ib_port,
            size: self.size,
            mtu: self.mtu,
            rx_depth: self.rx_depth,
            iters: self.iters,
            sl: self.sl,
            events: self.events,
            gid_idx: self.gid_idx,
            chk: self.chk,
            host: self.host.clone(),
            provider,
        }
    }
}

fn pingpong(a: PingpongArgs, ty: QpType, provider: ProviderChoice) -> Result<()> {
    let r = pingpong::run(&a.opts(provider), ty, &mut std::io::stdout())?;
    let bytes = r.bytes as f64;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        r.bytes,
        r.secs,
        bytes * 8.0 / r.secs / 1e6
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        r.iters,
        r.secs,
        r.secs * 1e6 / r.iters as f64
    );
    if a.chk {
        println!(
            "data check: {} received buffers validated (every byte)",
            r.checked
        );
    }
    Ok(())
}

// ------------------------------------------------------------ perf

fn print_perf(r: &PerfResult, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
        return;
    }
    let line = "-".repeat(95);
    println!("{line}");
    match &r.lat {
        Some(l) => {
            println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    99% percentile[usec]   99.9% percentile[usec]");
            println!(
                " {:<6} {:<11} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<22.2} {:.2}",
                r.bytes,
                r.iters,
                l.min_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3,
                l.p50_ns as f64 / 1e3,
                l.mean_ns / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3
            );
        }
        None => {
            println!(
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
            );
            println!(
                " {:<10} {:<14} {:<18} {:<20.2} {:.6}",
                r.bytes,
                r.iters,
                "-",
                r.bw / 1e6,
                r.msg_rate / 1e6
            );
        }
    }
    println!("{line}");
}

fn perf_params(a: &PerfArgs, provider: ProviderChoice) -> Result<PerfParams> {
    let lat = is_lat(a.test);
    Ok(PerfParams {
        test: a.test,
        size: a.size.unwrap_or(if lat { 2 } else { 65536 }),
        iters: Some(a.iters.unwrap_or(if lat { 1000 } else { 5000 }) as u64),
        duration: a.duration.map(Duration::from_secs_f64),
        depth: a.tx_depth.max(1),
        mtu: Mtu::from_bytes(a.mtu).ok_or_else(|| anyhow!("invalid MTU {}", a.mtu))?,
        mode: a.mode,
        gso: !a.no_gso,
        provider,
    })
}

fn perf_cmd(a: PerfArgs, provider: ProviderChoice) -> Result<()> {
    let p = perf_params(&a, provider)?;
    if p.mode == PerfMode::Single && !a.loopback {
        bail!("--mode single needs --loopback");
    }
    if a.loopback {
        let r = perf_loopback(p, None)?;
        print_perf(&r, a.json);
        return Ok(());
    }
    match &a.host {
        Some(h) => {
            let res = perf::client(a.dev.as_deref(), h, a.port, p)?;
            print_perf(&res, a.json);
        }
        None => {
            perf::serve(a.dev.as_deref(), a.port, p, &mut std::io::stdout())?;
            println!("perf {:?} served", a.test);
        }
    }
    Ok(())
}

/// Both ends in this process on two loopback devices.
fn perf_loopback(p: PerfParams, ips: Option<(Ipv4Addr, Ipv4Addr)>) -> Result<PerfResult> {
    perf_loopback_counted(p, ips).map(|r| r.0)
}

/// [`perf_loopback`], also returning both devices' counters (client, server) read
/// after the run: what really crossed the wire, independent of the client's count.
fn perf_loopback_counted(
    p: PerfParams,
    ips: Option<(Ipv4Addr, Ipv4Addr)>,
) -> Result<(PerfResult, verbs::soft::Counters, verbs::soft::Counters)> {
    Ok(perf::loopback_counted(p, ips)?)
}

// ------------------------------------------------------------ bench

/// One figure of `bench roce`: per-run values and same-run baselines.
struct BenchCase {
    name: &'static str,
    test: PerfTest,
    size: usize,
    vals: Vec<f64>,
    bases: Vec<f64>,
}

impl BenchCase {
    fn new(name: &'static str, test: PerfTest, size: usize) -> Self {
        BenchCase {
            name,
            test,
            size,
            vals: vec![],
            bases: vec![],
        }
    }
}

/// `dpustack bench roce`.
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{Better, Figure};
    let t = args.run_time();
    let runs = args.runs();
    let mut rep = benchkit::Report::new("roce");
    // RoCE datagram for a 4 KiB MTU: BTH 12 + payload 4096 + ICRC 4 (+16 RETH on the first)
    let dgram = 12 + 4096 + 4;
    let mut cases: Vec<BenchCase> = vec![
        BenchCase::new("RDMA WRITE 4 KiB bandwidth", PerfTest::WriteBw, 4096),
        BenchCase::new("RDMA WRITE 64 KiB bandwidth", PerfTest::WriteBw, 65536),
        BenchCase::new("SEND 4 KiB bandwidth", PerfTest::SendBw, 4096),
        BenchCase::new("SEND 64 KiB bandwidth", PerfTest::SendBw, 65536),
        BenchCase::new("RDMA WRITE 2 B latency (one way)", PerfTest::WriteLat, 2),
    ];
    for _ in 0..runs {
        let gso = netio::baseline::udp_loopback_bw(dgram, t, true)?;
        // the floor of a socket-based provider: both ends busy-poll, as ours do
        let half_rtt =
            netio::baseline::udp_half_rtt(t.min(Duration::from_millis(500)), true)? / 1e3;
        for BenchCase {
            test,
            size,
            vals,
            bases,
            ..
        } in cases.iter_mut()
        {
            let p = PerfParams {
                test: *test,
                size: *size,
                iters: None,
                duration: Some(t),
                depth: 128,
                mtu: Mtu::Mtu4096,
                mode: PerfMode::Threaded,
                gso: true,
                provider: ProviderChoice::Soft,
            };
            let r = perf_loopback(p, None)?;
            if is_lat(*test) {
                vals.push(r.lat.map(|l| l.p50_ns as f64 / 1e3).unwrap_or(f64::NAN));
                bases.push(half_rtt);
            } else {
                vals.push(r.bw / 1e6);
                bases.push(gso / 1e6);
            }
        }
    }
    let mut spreads = Vec::new();
    for BenchCase {
        name,
        test,
        size,
        vals,
        bases,
    } in cases
    {
        // the machine is shared and noisy: the ratio is the median of the per-run
        // ratios (each against the baseline of its own run), not median/median
        let mut ratios: Vec<f64> = vals.iter().zip(&bases).map(|(v, b)| v / b).collect();
        let per_run = ratios.clone();
        let (lo, hi) = per_run
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        spreads.push(format!("{name}: {lo:.2}-{hi:.2}"));
        let r = benchkit::median(&mut ratios).unwrap_or(f64::NAN);
        let v = benchkit::median(&mut vals.clone()).unwrap_or(f64::NAN);
        let b = benchkit::median(&mut bases.clone()).unwrap_or(f64::NAN);
        let mut f = if is_lat(test) {
            Figure::new(
                name,
                v,
                "us",
                "UDP loopback half round trip, busy poll (p50)",
                b,
                Better::Lower,
            )
        } else {
            Figure::new(
                name,
                v,
                "MB/s",
                format!("UDP GSO loopback, {dgram}-byte datagrams"),
                b,
                Better::Higher,
            )
        };
        f.ratio = r;
        rep.push(f.with_detail(serde_json::json!({
            "size": size, "runs": vals, "baseline_runs": bases, "ratio_per_run": per_run
        })));
    }
    rep.note("two dpustack soft RoCE devices on 127.0.0.1 / 127.0.0.2 in one process, poller thread each, path MTU 4096, 128 WRs in flight");
    rep.note("baseline measured in the same run: netio::baseline::udp_loopback_bw(gso=true) at the RoCE datagram size");
    rep.note("value and baseline are medians over runs; ratio is the median of per-run ratios");
    rep.note("latency baseline: netio::baseline::udp_half_rtt(busy=true), a 2-byte UDP ping-pong with both ends busy-polling (the floor of a socket-based provider)");
    rep.note(format!(
        "per-run ratio range over {runs} run(s): {}",
        spreads.join("; ")
    ));
    rep.note(format!("CPU: {}", benchkit::cpu_model()));
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_format_matches_pingpong_c() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ipv4(Ipv4Addr::new(10, 99, 1, 1)),
        };
        let m = encode_dest(&d);
        assert_eq!(m.len(), 52);
        assert_eq!(
            &m[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a630101"
        );
        assert_eq!(m[51], 0);
        let back = decode_dest(&m).unwrap();
        assert_eq!((back.qpn, back.psn, back.gid), (0x11, 0xabcdef, d.gid));
    }

    #[test]
    fn perf_loopback_runs() {
        for (test, mode) in [
            (PerfTest::WriteBw, PerfMode::Manual),
            (PerfTest::WriteLat, PerfMode::Manual),
            (PerfTest::SendBw, PerfMode::Manual),
            (PerfTest::WriteBw, PerfMode::Single),
            (PerfTest::ReadBw, PerfMode::Single),
            (PerfTest::WriteLat, PerfMode::Single),
            (PerfTest::SendLat, PerfMode::Single),
        ]
        .into_iter()
        .chain(
            [
                PerfTest::WriteBw,
                PerfTest::SendBw,
                PerfTest::ReadBw,
                PerfTest::WriteLat,
                PerfTest::SendLat,
            ]
            .map(|t| (t, PerfMode::Threaded)),
        ) {
            let p = PerfParams {
                test,
                size: 8192,
                iters: Some(50),
                duration: None,
                depth: 16,
                mtu: Mtu::Mtu1024,
                mode,
                gso: true,
                provider: ProviderChoice::Soft,
            };
            let (r, ca, cb) = perf_loopback_counted(
                p,
                Some((Ipv4Addr::new(127, 0, 44, 1), Ipv4Addr::new(127, 0, 44, 2))),
            )
            .unwrap();
            // the client's own count (it stops at the iterations it was given) ...
            assert_eq!(r.iters, 50, "{test:?} {mode:?}");
            // ... and what the devices saw: 50 messages of 8 KiB at MTU 1024 are at
            // least 400 data packets into the side that receives them (the server; the
            // client for READ responses; both for the echoing latency tests), none
            // dropped for a bad header, ICRC, QP or state
            let pkts = 50 * 8192 / 1024;
            let (rx_srv, rx_cli) = match test {
                PerfTest::ReadBw => (50, pkts),
                PerfTest::WriteLat | PerfTest::SendLat => (pkts, pkts),
                _ => (pkts, 1),
            };
            assert!(
                cb.rx_packets >= rx_srv && ca.rx_packets >= rx_cli,
                "{test:?} {mode:?}: server received {} packets (want >= {rx_srv}), client {} (want >= {rx_cli})",
                cb.rx_packets,
                ca.rx_packets
            );
            for c in [ca, cb] {
                let dropped = c.drop_truncated
                    + c.drop_bad_opcode
                    + c.drop_bad_length
                    + c.drop_bad_version
                    + c.drop_bad_icrc
                    + c.drop_no_qp
                    + c.drop_qp_state;
                assert_eq!(dropped, 0, "{test:?} {mode:?}: {c:?}");
            }
        }
    }
}
