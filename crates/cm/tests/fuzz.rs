//! Robustness: arbitrary and mutated MADs, and random sequences of application
//! calls, never panic the endpoint; every error is a typed `Err` or a counted drop.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use cm::{CmConfig, CmEndpoint, CmIdHandle, ConnParam, PortSpace};
use proptest::prelude::*;

const CAPTURED: [&[u8; 256]; 9] = [
    include_bytes!("../../wire/testdata/cm/req.mad"),
    include_bytes!("../../wire/testdata/cm/rep.mad"),
    include_bytes!("../../wire/testdata/cm/rtu.mad"),
    include_bytes!("../../wire/testdata/cm/dreq.mad"),
    include_bytes!("../../wire/testdata/cm/drep.mad"),
    include_bytes!("../../wire/testdata/cm/sidr_req.mad"),
    include_bytes!("../../wire/testdata/cm/sidr_rep.mad"),
    include_bytes!("../../wire/testdata/cm/req_noport.mad"),
    include_bytes!("../../wire/testdata/cm/rej.mad"),
];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn endpoint() -> (CmEndpoint, Vec<CmIdHandle>, Instant) {
    let mut ep = CmEndpoint::new(CmConfig {
        local_addrs: vec![ip("10.99.1.2"), ip("10.99.1.1")],
        cm_response_timeout: 10,
        timewait: Duration::from_millis(5),
        ..CmConfig::default()
    });
    let now = Instant::now();
    let mut ids = Vec::new();
    for (ps, port) in [(PortSpace::Tcp, 7174u16), (PortSpace::Udp, 7174)] {
        let l = ep.create_id(None, ps, 0);
        ep.bind_addr(l, SocketAddr::new(ip("10.99.1.2"), port))
            .unwrap();
        ep.listen(l, 4).unwrap();
        ids.push(l);
    }
    let c = ep.create_id(None, PortSpace::Tcp, 0);
    ep.resolve_addr(c, None, "10.99.1.2:7174".parse().unwrap(), Duration::ZERO)
        .unwrap();
    ep.resolve_route(c, Duration::ZERO).unwrap();
    ep.connect(now, c, &ConnParam::default()).unwrap();
    ids.push(c);
    (ep, ids, now)
}

#[derive(Debug, Clone)]
enum Op {
    Mad {
        which: usize,
        flips: Vec<(usize, u8)>,
        patch_comm: bool,
    },
    Raw(Vec<u8>),
    Accept(usize),
    Reject(usize),
    Disconnect(usize),
    Destroy(usize),
    Establish(usize),
    Notify(usize),
    Time(u16),
    AddrChange,
    DeviceRemoval,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..9, proptest::collection::vec((0usize..256, any::<u8>()), 0..4), any::<bool>())
            .prop_map(|(which, flips, patch_comm)| Op::Mad { which, flips, patch_comm }),
        1 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Op::Raw),
        1 => (0usize..8).prop_map(Op::Accept),
        1 => (0usize..8).prop_map(Op::Reject),
        1 => (0usize..8).prop_map(Op::Disconnect),
        1 => (0usize..8).prop_map(Op::Destroy),
        1 => (0usize..8).prop_map(Op::Establish),
        1 => (0usize..8).prop_map(Op::Notify),
        2 => (0u16..2000).prop_map(Op::Time),
        1 => Just(Op::AddrChange),
        1 => Just(Op::DeviceRemoval),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_mads_and_calls_never_panic(ops in proptest::collection::vec(op(), 1..40)) {
        let (mut ep, mut ids, mut now) = endpoint();
        // the comm IDs our endpoint uses, learnt from what it sends
        let mut ours: Vec<u32> = Vec::new();
        for op in ops {
            match op {
                Op::Mad { which, flips, patch_comm } => {
                    let mut m = *CAPTURED[which];
                    if patch_comm {
                        if let Some(&c) = ours.last() {
                            m[28..32].copy_from_slice(&c.to_be_bytes());
                        }
                    }
                    for (i, v) in flips {
                        m[i] ^= v;
                    }
                    ep.handle_mad(now, ip("10.99.1.1"), ip("10.99.1.2"), &m);
                }
                Op::Raw(b) => ep.handle_mad(now, ip("10.99.1.1"), ip("10.99.1.2"), &b),
                Op::Accept(i) => { if let Some(&h) = ids.get(i) { let _ = ep.accept(now, h, &ConnParam::default()); } }
                Op::Reject(i) => { if let Some(&h) = ids.get(i) { let _ = ep.reject(h, b"x", None); } }
                Op::Disconnect(i) => { if let Some(&h) = ids.get(i) { let _ = ep.disconnect(now, h); } }
                Op::Destroy(i) => { if let Some(&h) = ids.get(i) { let _ = ep.destroy_id(now, h); } }
                Op::Establish(i) => { if let Some(&h) = ids.get(i) { let _ = ep.establish(h); } }
                Op::Notify(i) => { if let Some(&h) = ids.get(i) { let _ = ep.notify(h); } }
                Op::Time(ms) => {
                    now += Duration::from_millis(u64::from(ms));
                    ep.handle_timeout(now);
                }
                Op::AddrChange => ep.addr_change(ip("10.99.1.2")),
                Op::DeviceRemoval => {
                    ep.device_removal();
                    // nothing may leave a removed device, and no timer runs
                    prop_assert!(ep.poll_transmit().is_none());
                    prop_assert!(ep.poll_timeout().is_none());
                }
            }
            if ep.is_removed() {
                prop_assert!(ep.poll_timeout().is_none(), "a timer armed after removal");
            }
            while let Some(ev) = ep.poll_any_event() {
                if !ids.contains(&ev.id) {
                    ids.push(ev.id);
                }
            }
            while let Some(t) = ep.poll_transmit() {
                let m = wire::mad::CmMadRepr::parse_bytes(&t.mad);
                prop_assert!(m.is_ok(), "we emitted an unparsable MAD");
                let c = u32::from_be_bytes([t.mad[24], t.mad[25], t.mad[26], t.mad[27]]);
                if c != 0 {
                    ours.push(c);
                }
            }
            while ep.poll_qp_action().is_some() {}
        }
        // Whatever happened, time makes everything finish: no timer stays armed forever.
        for _ in 0..64 {
            match ep.poll_timeout() {
                Some(t) => { now = now.max(t); ep.handle_timeout(now); }
                None => break,
            }
            while ep.poll_transmit().is_some() {}
            while ep.poll_any_event().is_some() {}
        }
        prop_assert!(ep.poll_timeout().is_none(), "a timer is still armed after all retries");
    }
}
