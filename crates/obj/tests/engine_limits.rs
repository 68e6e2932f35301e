//! The engine's bound on RPC clients (`EngineLimits::max_clients`): past it a
//! TCP connection is closed at accept (the client reads EOF), counted in
//! `OpCounters::clients`; a client that leaves frees its slot; the admitted
//! clients keep being served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig, EngineLimits};
use obj::rpc::frame::{encode_request, Decoded, FrameDecoder};
use obj::rpc::msg::Request;
use obj::rpc::{Status, MAX_BODY};

/// Pings over a raw connection: Some(status) or None when the engine closed it.
fn ping(s: &mut TcpStream, id: u64) -> Option<Status> {
    let mut b = Vec::new();
    encode_request(&mut b, id, 0, &Request::Ping, &[]);
    s.write_all(&b).ok()?;
    let mut dec = FrameDecoder::new(MAX_BODY);
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(Some(Decoded::Frame { hdr, .. })) = dec.decode() {
            assert_eq!(hdr.rpc_id, id);
            return Some(Status::from_code(hdr.status));
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => dec.input(&buf[..n]),
        }
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn clients_past_max_clients_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        targets: 1,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    let eng = Engine::start_with(
        &cfg,
        Arc::new(VosBackend::default()),
        EngineLimits { max_clients: 2 },
    )
    .unwrap();
    let addr = eng.addr().to_string();
    let st = eng.op_counters();
    assert_eq!(st.clients.max(), 2);
    let mut a = connect(&addr);
    let mut b = connect(&addr);
    assert_eq!(ping(&mut a, 1), Some(Status::Ok));
    assert_eq!(ping(&mut b, 2), Some(Status::Ok));
    assert_eq!((st.clients.clients(), st.clients.refused()), (2, 0));
    // The third and fourth: closed at accept, no reply.
    for k in 0..2 {
        let mut c = connect(&addr);
        assert_eq!(
            ping(&mut c, 3),
            None,
            "client {} past the bound served",
            k + 3
        );
    }
    assert_eq!(st.clients.refused(), 2);
    assert_eq!(st.clients.clients(), 2);
    // The admitted ones are still served.
    assert_eq!(ping(&mut a, 4), Some(Status::Ok));
    // One leaves: its slot is free again (once the network thread saw the EOF).
    drop(b);
    let t0 = Instant::now();
    while st.clients.clients() > 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "slot not freed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut d = connect(&addr);
    assert_eq!(ping(&mut d, 5), Some(Status::Ok));
    assert_eq!((st.clients.clients(), st.clients.refused()), (2, 2));
    eng.stop();
}
