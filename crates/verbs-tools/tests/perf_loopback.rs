//! The perf engine's latency and bandwidth loops on a loopback pair of soft
//! devices, in each progress mode: every iteration must complete (an echo that
//! is never seen, or a completion never polled, ends in the loop's timeout
//! error), and the figures must be the ones of the iterations asked for.

use std::net::Ipv4Addr;
use verbs_tools::perf::{loopback, PerfMode, PerfParams, PerfTest};
use verbs_tools::ProviderChoice;

fn params(test: PerfTest, mode: PerfMode, size: usize, iters: u64) -> PerfParams {
    PerfParams {
        test,
        size,
        iters: Some(iters),
        duration: None,
        depth: 16,
        mtu: verbs::Mtu::Mtu1024,
        mode,
        gso: true,
        provider: ProviderChoice::Soft,
    }
}

#[test]
fn write_lat_completes_every_iteration_in_each_mode() {
    for (i, mode) in [PerfMode::Threaded, PerfMode::Manual, PerfMode::Single]
        .into_iter()
        .enumerate()
    {
        let ips = (
            Ipv4Addr::new(127, 0, 61, 1 + 2 * i as u8),
            Ipv4Addr::new(127, 0, 61, 2 + 2 * i as u8),
        );
        let r = loopback(params(PerfTest::WriteLat, mode, 2, 300), Some(ips))
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(r.iters, 300, "{mode:?}");
        let lat = r.lat.expect("latency summary");
        assert_eq!(lat.count, 300, "{mode:?}");
        assert!(lat.p50_ns > 0, "{mode:?}: {lat:?}");
    }
}

#[test]
fn write_bw_moves_the_bytes_asked_for() {
    let ips = (Ipv4Addr::new(127, 0, 62, 1), Ipv4Addr::new(127, 0, 62, 2));
    let r = loopback(
        params(PerfTest::WriteBw, PerfMode::Threaded, 65536, 200),
        Some(ips),
    )
    .expect("write-bw");
    assert_eq!(r.iters, 200);
    assert!(r.bw > 0.0);
}
