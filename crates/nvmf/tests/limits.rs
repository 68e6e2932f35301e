//! The target's bounds on what hosts can grow: transport connections
//! (`max_connections`: one more is closed at accept) and controllers
//! (`max_controllers`: one more admin Connect gets "Connect Controller Busy"),
//! each refusal counted, and room made again when a host leaves.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::status::FabricsStatus;
use nvme::Status;
use nvmf::host::{Controller, HostError, HostOpts};
use nvmf::subsystem::Subsystem;
use nvmf::{ListenSpec, NvmfServer, Tgt, TgtParams};

const NQN: &str = "nqn.2024-01.io.dpustack:limits";

fn server(max_connections: usize, max_controllers: usize) -> NvmfServer {
    let mut tgt = Tgt::new(TgtParams {
        max_connections,
        max_controllers,
        idle_spins: 0,
        ..TgtParams::default()
    });
    let mut s = Subsystem::new(NQN, "SN-LIM", "limits").unwrap();
    let n = bdev::null::NullBdev::new("n0", 1 << 16, 512).unwrap();
    s.add_ns(1, Arc::new(n), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    NvmfServer::start(
        tgt,
        &[ListenSpec {
            addr,
            discovery_only: false,
        }],
        1,
    )
    .unwrap()
}

fn opts() -> HostOpts {
    HostOpts {
        hdgst: false,
        ddgst: false,
        ..HostOpts::default()
    }
}

/// Polls `f` for up to 3 s.
fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(3), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The target closed `s`: a read sees EOF (or a reset), not a timeout.
fn closed_by_target(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 8];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn connections_past_the_bound_are_closed_and_counted() {
    let srv = server(2, 64);
    let a = srv.addrs()[0];
    let tgt = srv.tgt().clone();
    let s1 = TcpStream::connect(a).unwrap();
    let _s2 = TcpStream::connect(a).unwrap();
    wait_for("two connections", || tgt.connections() == 2);
    let mut s3 = TcpStream::connect(a).unwrap();
    assert!(closed_by_target(&mut s3), "the third connection stays open");
    assert_eq!(tgt.refusals().connections, 1);
    assert_eq!(tgt.connections(), 2);
    // a host leaves: the next one is admitted and works end to end
    drop(s1);
    wait_for("one connection", || tgt.connections() == 1);
    drop(_s2);
    wait_for("no connection", || tgt.connections() == 0);
    let mut c = Controller::connect(a, NQN, &opts(), 1, 4).unwrap();
    c.write(0, 1, 1, &[5; 512], 512).unwrap();
    assert_eq!(tgt.connections(), 2, "admin + one I/O queue");
    assert_eq!(tgt.refusals().connections, 1);
}

#[test]
fn controllers_past_the_bound_get_controller_busy() {
    let srv = server(64, 1);
    let a = srv.addrs()[0];
    let tgt = srv.tgt().clone();
    let c1 = Controller::connect(a, NQN, &opts(), 1, 4).unwrap();
    match Controller::connect(a, NQN, &opts(), 1, 4) {
        Err(HostError::Status { status, .. }) => {
            assert_eq!(status, Status::fabrics(FabricsStatus::ControllerBusy))
        }
        other => panic!("second controller: {other:?}"),
    }
    assert_eq!(tgt.refusals().controllers, 1);
    drop(c1);
    wait_for("controller gone", || tgt.ctrlr_count() == 0);
    Controller::connect(a, NQN, &opts(), 1, 4).unwrap();
    assert_eq!(tgt.refusals().controllers, 1);
}
