//! Insertion rate of the `tc-linux` provider into the kernel's tc flower (skip_hw)
//! beside the emulated `tc` provider (skip_hw policy, same translation, same specs)
//! in the same run, and the revalidator's hardware-stats pass (`Datapath::
//! query_hw_stats`, one RTM_GETTFILTER per flow) with N kernel flows.
//!
//! Needs root and a kernel with cls_flower (the QEMU guest of tests/peers):
//!   tc_linux_bench IF_IN IF_OUT [N=10000] [RUNS=3]
//! IF_IN gets the filters (datapath port 1); mirred redirects to IF_OUT (port 2).

use std::time::Instant;

use flow::dp::Datapath;
use flow::key::{f, FlowKey, VLAN_CFI};
use flow::offload::nic::NicConfig;
use flow::offload::tc::{TcPolicy, TcProvider};
use flow::offload::tc_linux::TcLinuxProvider;
use flow::offload::{FlowSpec, Offload, OffloadConfig, OffloadProvider, OffloadState};
use flow::xlate::OdpAction;

fn specs(n: usize) -> Vec<FlowSpec> {
    let mut m = FlowKey::ZERO;
    for fd in [f::IN_PORT, f::DL_DST, f::DL_TYPE, f::NW_DST] {
        m.full(fd);
    }
    m.set(f::VLAN0_TCI, VLAN_CFI as u64);
    (0..n)
        .map(|i| {
            let mut k = FlowKey::ZERO;
            k.set(f::IN_PORT, 1);
            k.set(f::DL_DST, 0x0200_0000_0000 | i as u64);
            k.set(f::DL_TYPE, 0x0800);
            k.set(f::NW_DST, 0x0a00_0000 | i as u64);
            FlowSpec {
                key: k,
                mask: m,
                actions: vec![
                    OdpAction::SetEth {
                        src: (0, 0),
                        dst: (0x0200_0000_00ff, 0xffff_ffff_ffff),
                    },
                    OdpAction::Output(2),
                ],
            }
        })
        .collect()
}

fn med(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: tc_linux_bench IF_IN IF_OUT [N] [RUNS]");
        std::process::exit(2);
    }
    let n: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let runs: usize = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(3);
    let ports = vec![(1u32, a[1].clone()), (2u32, a[2].clone())];
    let sp = specs(n);
    let (mut kern, mut emu, mut reval, mut del) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        // emulated tc provider (baseline)
        let e = TcProvider::new(NicConfig::default(), TcPolicy::SkipHw);
        let t0 = Instant::now();
        for (i, s) in sp.iter().enumerate() {
            e.put(i as u64 + 1, s, 0).expect("emulated put");
        }
        emu.push(n as f64 / t0.elapsed().as_secs_f64());
        // the kernel
        let p = TcLinuxProvider::new(&ports).expect("tc-linux provider");
        let t0 = Instant::now();
        let mut failed = 0;
        for (i, s) in sp.iter().enumerate() {
            if let Err(e) = p.put(i as u64 + 1, s, 0) {
                if failed == 0 {
                    eprintln!("put failed: {e}");
                }
                failed += 1;
            }
        }
        kern.push(n as f64 / t0.elapsed().as_secs_f64());
        assert_eq!(failed, 0, "every flow into the kernel");
        let t0 = Instant::now();
        let gone = p.flush();
        del.push(n as f64 / t0.elapsed().as_secs_f64());
        assert_eq!(gone, n);
        // the revalidator's hardware pass over N kernel flows (inline offload)
        let prov: std::sync::Arc<dyn OffloadProvider> =
            std::sync::Arc::new(TcLinuxProvider::new(&ports).expect("tc-linux provider"));
        let mut dp = Datapath::new();
        dp.set_offload(Some(Offload::with_providers(
            OffloadConfig {
                enabled: true,
                n_threads: 0,
                ..Default::default()
            },
            vec![prov],
        )));
        for s in &sp {
            dp.install(&s.key, &s.mask, s.actions.clone());
        }
        dp.offload_poll();
        let full = dp
            .flows()
            .filter(|f| matches!(f.offload, OffloadState::Full { .. }))
            .count();
        assert_eq!(full, n, "every megaflow in the kernel");
        let t0 = Instant::now();
        let q = dp.query_hw_stats();
        reval.push(t0.elapsed().as_secs_f64() * 1e3);
        assert_eq!(q, n);
        dp.set_offload(None);
        eprintln!("run {run}: done");
    }
    let (k, klo, khi) = med(&mut kern);
    let (e, elo, ehi) = med(&mut emu);
    let (d, dlo, dhi) = med(&mut del);
    let (r, rlo, rhi) = med(&mut reval);
    println!("tc-linux insert: {n} flows, {runs} runs: median {k:.0} flows/s (min {klo:.0}, max {khi:.0})");
    println!("emulated tc insert (same specs, same run): median {e:.0} flows/s (min {elo:.0}, max {ehi:.0}); ratio kernel/emulated {:.4}", k / e);
    println!("tc-linux delete (flush): median {d:.0} flows/s (min {dlo:.0}, max {dhi:.0})");
    println!("revalidator hw-stats pass over {n} kernel flows: median {r:.1} ms (min {rlo:.1}, max {rhi:.1})");
}
