//! CM MADs into a live CM endpoint (two listeners, one active connect), mixed
//! with application calls and time, driven by the fuzz input. Invariants:
//! - every MAD that parses re-emits to a MAD that parses to the same Repr;
//! - every MAD the endpoint sends parses;
//! - counters: `mads_in` counts every MAD handed in, drops never exceed it,
//!   `mads_out` equals the MADs we took from `poll_transmit`;
//! - time makes everything finish: no timer stays armed after the retries.
#![no_main]
use cm::{CmConfig, CmEndpoint, ConnParam, PortSpace};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use wire::mad::{CmMadRepr, MAD_LEN};

const CAPTURED: [&[u8; 256]; 9] = [
    include_bytes!("../../crates/wire/testdata/cm/req.mad"),
    include_bytes!("../../crates/wire/testdata/cm/rep.mad"),
    include_bytes!("../../crates/wire/testdata/cm/rtu.mad"),
    include_bytes!("../../crates/wire/testdata/cm/dreq.mad"),
    include_bytes!("../../crates/wire/testdata/cm/drep.mad"),
    include_bytes!("../../crates/wire/testdata/cm/sidr_req.mad"),
    include_bytes!("../../crates/wire/testdata/cm/sidr_rep.mad"),
    include_bytes!("../../crates/wire/testdata/cm/req_noport.mad"),
    include_bytes!("../../crates/wire/testdata/cm/rej.mad"),
];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn roundtrip(m: &[u8]) {
    if let Ok(r) = CmMadRepr::parse_bytes(m) {
        let b = r.to_bytes();
        let r2 = CmMadRepr::parse_bytes(&b).expect("re-parse of an emitted MAD");
        assert_eq!(r2, r, "parse -> emit -> parse changed the CM MAD");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut ep = CmEndpoint::new(CmConfig {
        local_addrs: vec![ip("10.99.1.2"), ip("10.99.1.1")],
        cm_response_timeout: 10,
        timewait: Duration::from_millis(5),
        ..CmConfig::default()
    });
    let mut now = Instant::now();
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

    let mut ours: Vec<u32> = Vec::new();
    let (mut fed, mut sent) = (0u64, 0u64);
    while ep.poll_transmit().is_some() {
        sent += 1; // the REQ of the active side
    }
    let mut removed = false;
    let mut inp = Input(data);
    let mut steps = 0;
    while let Some(op) = inp.take(1) {
        steps += 1;
        if steps > 64 {
            break;
        }
        let op = op[0];
        let arg = usize::from(op >> 4);
        match op & 0x0f {
            // a captured MAD with up to 3 byte edits, optionally carrying our comm ID
            0..=4 => {
                let mut m = *CAPTURED[arg % CAPTURED.len()];
                if arg & 8 != 0 {
                    if let Some(&c) = ours.last() {
                        m[28..32].copy_from_slice(&c.to_be_bytes());
                    }
                }
                let Some(edits) = inp.take(1) else { break };
                for _ in 0..(edits[0] % 4) {
                    let Some(e) = inp.take(2) else { break };
                    m[usize::from(e[0])] ^= e[1];
                }
                roundtrip(&m);
                ep.handle_mad(now, ip("10.99.1.1"), ip("10.99.1.2"), &m);
                fed += 1;
            }
            // raw bytes, any length up to a MAD and a bit
            5 => {
                let Some(l) = inp.take(1) else { break };
                let n = usize::from(l[0]).min(inp.0.len()).min(MAD_LEN + 16);
                let Some(m) = inp.take(n) else { break };
                roundtrip(m);
                ep.handle_mad(now, ip("10.99.1.1"), ip("10.99.1.2"), m);
                fed += 1;
            }
            6 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.accept(now, h, &ConnParam::default());
                }
            }
            7 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.reject(h, b"x", None);
                }
            }
            8 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.disconnect(now, h);
                }
            }
            9 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.destroy_id(now, h);
                }
            }
            10 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.establish(h);
                }
            }
            11 => {
                if let Some(&h) = ids.get(arg) {
                    let _ = ep.notify(h);
                }
            }
            12 | 13 => {
                now += Duration::from_millis((arg as u64 + 1) * 150);
                ep.handle_timeout(now);
            }
            14 => ep.addr_change(ip("10.99.1.2")),
            _ => {
                ep.device_removal();
                removed = true;
                assert!(ep.poll_transmit().is_none(), "a MAD left a removed device");
                assert!(ep.poll_timeout().is_none(), "a timer armed after removal");
            }
        }
        while let Some(ev) = ep.poll_any_event() {
            if !ids.contains(&ev.id) {
                ids.push(ev.id);
            }
        }
        while let Some(t) = ep.poll_transmit() {
            sent += 1;
            let m = CmMadRepr::parse_bytes(&t.mad);
            assert!(m.is_ok(), "we emitted an unparsable MAD: {m:?}");
            let c = u32::from_be_bytes([t.mad[24], t.mad[25], t.mad[26], t.mad[27]]);
            if c != 0 {
                ours.push(c);
            }
        }
        while ep.poll_qp_action().is_some() {}
        let s = ep.stats;
        assert_eq!(s.mads_in, fed, "mads_in");
        assert!(
            s.dropped_malformed + s.dropped_unmatched <= s.mads_in,
            "{s:?}"
        );
        if removed {
            // removal discards what was queued and not yet taken
            assert!(
                sent <= s.mads_out,
                "polled {sent} > mads_out {}",
                s.mads_out
            );
        } else {
            assert_eq!(s.mads_out, sent, "mads_out vs MADs polled");
        }
    }
    for _ in 0..64 {
        match ep.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                ep.handle_timeout(now);
            }
            None => break,
        }
        while ep.poll_transmit().is_some() {}
        while ep.poll_any_event().is_some() {}
    }
    assert!(
        ep.poll_timeout().is_none(),
        "a timer is still armed after all retries"
    );
});

/// The fuzz input, consumed front to back.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
}
