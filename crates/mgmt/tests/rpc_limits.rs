//! The RPC server's bound on clients served at once: one more is closed at
//! accept and counted, the clients within the bound keep being answered, and a
//! client leaving makes room.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mgmt::{Mgmt, RpcServer};
use serde_json::Value;

fn call(s: &mut UnixStream, id: u32) -> Value {
    let req = format!(r#"{{"jsonrpc":"2.0","method":"spdk_get_version","id":{id}}}"#);
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
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

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(3), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn clients_past_the_bound_are_closed_and_counted() {
    let path = std::env::temp_dir().join(format!("dpustack-rpc-lim-{}.sock", std::process::id()));
    let srv = RpcServer::start_with(&path, Arc::new(Mgmt::new()), 2).unwrap();
    let mut a = UnixStream::connect(&path).unwrap();
    let mut b = UnixStream::connect(&path).unwrap();
    assert!(call(&mut a, 1)["result"]["version"].is_string());
    assert!(call(&mut b, 2)["result"]["version"].is_string());
    let mut c = UnixStream::connect(&path).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = c.write_all(br#"{"jsonrpc":"2.0","method":"spdk_get_version","id":3}"#);
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the third client was answered");
    assert_eq!(srv.refused(), 1);
    // the two within the bound are still served
    assert!(call(&mut a, 4)["result"]["version"].is_string());
    drop(b);
    wait_for("a client gone", || srv.connections() == 1);
    let mut d = UnixStream::connect(&path).unwrap();
    assert!(call(&mut d, 5)["result"]["version"].is_string());
    assert_eq!(srv.refused(), 1);
}

#[test]
fn malloc_bdevs_past_the_budget_are_refused_with_enomem() {
    use mgmt::jsonrpc::Dispatch;
    use serde_json::json;
    let m = Mgmt::new();
    // the default budget (half of MemTotal) refuses a 2^40-block (512 TiB) request
    // instead of aborting the process on the failed allocation
    let e = m
        .call(
            "bdev_malloc_create",
            Some(&json!({"name": "huge", "num_blocks": 1u64 << 40, "block_size": 512})),
        )
        .unwrap_err();
    assert_eq!(e.code, -12, "{}", e.message);
    assert_eq!(m.malloc_refused(), 1);
    m.set_malloc_budget(1 << 20);
    let mk = |name: &str, blocks: u64| {
        m.call(
            "bdev_malloc_create",
            Some(&json!({"name": name, "num_blocks": blocks, "block_size": 4096})),
        )
    };
    mk("a", 128).unwrap(); // 512 KiB
    mk("b", 128).unwrap(); // 1 MiB held
    assert_eq!(mk("c", 1).unwrap_err().code, -12);
    assert_eq!(m.malloc_refused(), 2);
    // null bdevs hold no memory: not bounded by it
    m.call(
        "bdev_null_create",
        Some(&json!({"name": "n", "num_blocks": 1u64 << 30, "block_size": 512})),
    )
    .unwrap();
    m.call("bdev_malloc_delete", Some(&json!({"name": "a"})))
        .unwrap();
    mk("c", 128).unwrap();
    assert_eq!(m.malloc_refused(), 2);
}
