//! rping with -C on the server (two soft devices on loopback): after its last ping the
//! server disconnects itself (Linux's rping server ignores -C and waits for the
//! client's DREQ, forever when that one DREQ is lost). With -C on both ends the two
//! DREQs cross, and both ends must see the exchange end at once (a DREP for the
//! crossing DREQ), not wait out the DREQ resends.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cm::CmConfig;
use cm_tools::rping::RpingOpts;
use cm_tools::{Console, Provider};

fn opts(server: bool, net: u8, count: u64) -> RpingOpts {
    RpingOpts {
        server,
        client: !server,
        addr: Some(Ipv4Addr::new(127, 0, net, 61)),
        src: (!server).then_some(Ipv4Addr::new(127, 0, net, 62)),
        port: 7174,
        count: Some(count),
        size: 64,
        verbose: false,
        validate: true,
        debug: false,
        persistent: false,
        service: false,
        provider: Provider::Soft,
    }
}

/// Runs a server (`scount` pings) and a client (`ccount`); the client's result.
fn run(net: u8, scount: u64, ccount: u64) -> cm_tools::Result<()> {
    let cm = CmConfig::default();
    let scm = cm.clone();
    // the server's result through a channel: a server that never ends fails the
    // test after a bound instead of hanging it
    let (tx, srv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cm_tools::rping::server(
            &opts(true, net, scount),
            &scm,
            &mut Console::silent(),
        ));
    });
    // the listener is up within a few ms; a client that comes too early is rejected
    let mut r = Err(cm_tools::Error::Usage("not run".into()));
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(40));
        r = cm_tools::rping::client(&opts(false, net, ccount), &cm, &mut Console::silent());
        match &r {
            Err(e)
                if format!("{e}").contains("REJECTED") || format!("{e:?}").contains("Rejected") => {
            }
            _ => break,
        }
    }
    srv.recv_timeout(Duration::from_secs(60))
        .expect("the rping server did not end within 60 s (or panicked)")
        .expect("server");
    r
}

#[test]
fn both_ends_with_count_disconnect_at_once() {
    let t0 = Instant::now();
    run(5, 3, 3).expect("client");
    // both ends disconnect at once: well under one DREQ resend (~4.3 s)
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn server_with_count_disconnects_after_its_last_ping() {
    let r = run(6, 2, 5);
    let e = r.expect_err("the client got more pings than the server's -C");
    assert!(format!("{e}").contains("server disconnected"), "{e}");
}
