//! The RPC server under abuse while the target serves I/O: deeply nested JSON,
//! 1000 concurrent clients, with a host reading all along (its completions are
//! counted in 100 ms windows during the test: the node keeps serving), and no
//! file descriptor left behind once the clients and the server are gone. Its
//! own test binary: the fd count is the whole process's.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mgmt::client::Client;
use mgmt::{Mgmt, RpcServer};
use nvmf::host::{Controller, HostOpts};
use nvmf::subsystem::Subsystem;
use nvmf::{ListenSpec, NvmfServer, Tgt, TgtParams};
use serde_json::{json, Value};

const NQN: &str = "nqn.2016-06.io.spdk:load";

fn fd_list() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .map(|e| {
            format!(
                "{:?} -> {:?}",
                e.file_name(),
                std::fs::read_link(e.path()).ok()
            )
        })
        .collect()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// One JSON value from a connection (the server writes values back to back).
fn read_value(s: &mut UnixStream) -> Value {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        if let Some(Ok(v)) = serde_json::Deserializer::from_slice(&buf)
            .into_iter::<Value>()
            .next()
        {
            return v;
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "connection closed before an answer");
        buf.extend_from_slice(&b[..n]);
    }
}

#[test]
fn deep_nesting_1000_clients_io_keeps_flowing_no_fd_leak() {
    let fds0 = open_fds();
    let mut tgt = Tgt::new(TgtParams {
        idle_spins: 0,
        ..TgtParams::default()
    });
    let mut s = Subsystem::new(NQN, "SN", "load").unwrap();
    let m = bdev::malloc::MallocBdev::new("M0", 2048, 512).unwrap();
    s.add_ns(1, Arc::new(m), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let srv = NvmfServer::start(
        tgt,
        &[ListenSpec {
            addr: "127.0.0.1:0".parse().unwrap(),
            discovery_only: false,
        }],
        1,
    )
    .unwrap();
    let addr = srv.addrs()[0];
    let mgmt = Mgmt::new();
    mgmt.attach_nvmf(srv.tgt().clone(), srv.listener_handle(), &[])
        .unwrap();
    let path = std::env::temp_dir().join(format!("dpustack-rpc-load-{}.sock", std::process::id()));
    let rpc = RpcServer::start(&path, Arc::new(mgmt)).unwrap();

    // a host reading block 0 over and over; completions per 100 ms window
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let io = std::thread::spawn(move || {
        let mut c = Controller::connect(addr, NQN, &HostOpts::default(), 1, 8).unwrap();
        let t0 = Instant::now();
        let mut windows: Vec<u64> = Vec::new();
        while !stop2.load(Ordering::Relaxed) {
            let r = c.io[0]
                .exec(nvmf::host::read_sqe(1, 0, 1), &[], 512)
                .unwrap();
            assert!(r.cqe.status().is_success());
            let w = (t0.elapsed().as_millis() / 100) as usize;
            if windows.len() <= w {
                windows.resize(w + 1, 0);
            }
            windows[w] += 1;
            let _ = c.maybe_keep_alive();
        }
        let _ = c.shutdown();
        windows
    });
    std::thread::sleep(Duration::from_millis(300));

    // deeply nested JSON: a parse error (serde's recursion limit), then closed
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&vec![b'['; 100_000]).unwrap();
    let v = read_value(&mut s);
    assert_eq!(v["error"]["code"], -32700, "{v}");
    // closed after the error (a reset: the server left the rest unread)
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("not closed after the parse error: {other:?}"),
    }
    drop(s);
    // nested but within the limit, in params: SPDK's wrong-type answer
    let mut deep = json!("x");
    for _ in 0..100 {
        deep = json!({ "a": deep });
    }
    let mut c = Client::connect(&path, Duration::from_secs(10)).unwrap();
    let e = c
        .call("bdev_get_bdevs", Some(json!({ "name": deep })))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, -32602);
    // a nested batch: every element answered "Invalid request"
    let mut nested = String::from("[");
    nested += &"[".repeat(100);
    nested += &"]".repeat(100);
    nested += ",[]]";
    let v = c.raw(nested.as_bytes()).unwrap();
    let b = v.as_array().unwrap();
    assert_eq!(b.len(), 2);
    assert!(b.iter().all(|r| r["error"]["code"] == -32600), "{v}");
    drop(c);

    // 1000 concurrent clients, each connected before any asks; all answered
    let t = Instant::now();
    let mut clients: Vec<Client> = (0..1000)
        .map(|_| Client::connect(&path, Duration::from_secs(60)).unwrap())
        .collect();
    let connected = t.elapsed();
    let mut answers = 0;
    for (i, c) in clients.iter_mut().enumerate() {
        let method = if i % 2 == 0 {
            "bdev_get_bdevs"
        } else {
            "nvmf_get_subsystems"
        };
        let v = c.call(method, None).unwrap().unwrap();
        assert!(v.is_array());
        answers += 1;
    }
    assert_eq!(answers, 1000);
    let served = t.elapsed();
    let peak = rpc.connections();
    assert!(peak >= 1000, "{peak} connections served at once");
    drop(clients);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let windows = io.join().unwrap();

    // I/O all along: no 100 ms window without completions from the first to
    // the last (the host's own start-up aside)
    let busy = &windows[1..windows.len().saturating_sub(1)];
    let total: u64 = windows.iter().sum();
    let min = busy.iter().copied().min().unwrap_or(0);
    println!(
        "1000 clients connected in {connected:?}, answered in {served:?}; host I/O: {total} reads in {} windows of 100 ms, min {min}, max {}",
        windows.len(),
        busy.iter().max().unwrap_or(&0)
    );
    assert!(busy.len() >= 3, "the test took {} windows", windows.len());
    assert!(min > 0, "a 100 ms window without I/O: {windows:?}");

    // every descriptor back once the server is gone
    rpc.stop();
    srv.stop();
    let t = Instant::now();
    while open_fds() > fds0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(open_fds(), fds0, "file descriptors leaked: {:?}", fd_list());
}
