//! The RPC server over its Unix socket, spoken to in plain JSON-RPC: a target
//! built from nothing, a host connecting to it, save_config → a new node loading
//! it → the same state; bad input and a silent client.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mgmt::client::Client;
use mgmt::{Mgmt, RpcServer};
use nvmf::host::{Controller, HostOpts};
use nvmf::{NvmfServer, Tgt, TgtParams};
use serde_json::{json, Value};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn sock(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dpustack-rpc-{}-{tag}.sock", std::process::id()))
}

/// An empty target (no subsystems, no listeners) with the RPC server on it.
fn node(path: &Path) -> (NvmfServer, RpcServer) {
    let params = TgtParams {
        idle_spins: 0,
        ..TgtParams::default()
    };
    let srv = NvmfServer::start(Tgt::new(params), &[], 1).unwrap();
    let m = Mgmt::new();
    m.attach_nvmf(srv.tgt().clone(), srv.listener_handle(), &[])
        .unwrap();
    let rpc = RpcServer::start(path, Arc::new(m)).unwrap();
    (srv, rpc)
}

fn call(c: &mut Client, method: &str, params: Value) -> Value {
    let p = (!params.is_null()).then_some(params);
    match c.call(method, p).unwrap() {
        Ok(v) => v,
        Err(e) => panic!("{method}: {e}"),
    }
}

fn err(c: &mut Client, method: &str, params: Value) -> i32 {
    c.call(method, Some(params)).unwrap().unwrap_err().code
}

#[test]
fn build_a_target_from_nothing_connect_save_and_reload() {
    let path = sock("build");
    let (srv, rpc) = node(&path);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = Client::connect(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(
        call(&mut c, "framework_wait_init", Value::Null),
        json!(true)
    );
    let name = call(
        &mut c,
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 8192, "block_size": 512}),
    );
    assert_eq!(name, "Malloc0");
    // domain errors: an existing name (-17), a missing one (-19)
    assert_eq!(
        err(
            &mut c,
            "bdev_malloc_create",
            json!({"name": "Malloc0", "num_blocks": 8, "block_size": 512})
        ),
        -17
    );
    assert_eq!(err(&mut c, "bdev_get_bdevs", json!({"name": "nope"})), -19);
    assert_eq!(
        err(&mut c, "bdev_malloc_delete", json!({"name": "nope"})),
        -19
    );
    // wrong types and unknown keys: SPDK's -32602
    assert_eq!(
        err(
            &mut c,
            "bdev_malloc_create",
            json!({"name": "x", "num_blocks": "8", "block_size": 512})
        ),
        -32602
    );
    assert_eq!(err(&mut c, "bdev_get_bdevs", json!({"bogus": 1})), -32602);
    assert_eq!(err(&mut c, "no_such_method", json!({})), -32601);
    // listener before the transport: refused
    let la = json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"});
    call(&mut c, "nvmf_create_transport", json!({"trtype": "TCP"}));
    assert_eq!(
        err(&mut c, "nvmf_create_transport", json!({"trtype": "tcp"})),
        -32602
    );
    call(
        &mut c,
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true, "serial_number": "SPDK00000000000001"}),
    );
    assert_eq!(
        err(&mut c, "nvmf_create_subsystem", json!({"nqn": NQN})),
        -17
    );
    let nsid = call(
        &mut c,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    assert_eq!(nsid, 1);
    call(
        &mut c,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": la}),
    );
    // a discovery-only port (saved and reloaded too)
    call(
        &mut c,
        "nvmf_subsystem_add_listener",
        json!({"nqn": nvmf::DISCOVERY_NQN, "listen_address": la}),
    );
    let subs = call(&mut c, "nvmf_get_subsystems", Value::Null);
    assert_eq!(subs[0]["listen_addresses"].as_array().unwrap().len(), 2);
    let s = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == NQN)
        .unwrap();
    assert_eq!(s["namespaces"][0]["bdev_name"], "Malloc0");
    let port: u16 = s["listen_addresses"][0]["trsvcid"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(port, 0);
    let bdevs = call(&mut c, "bdev_get_bdevs", Value::Null);
    assert_eq!(bdevs[0]["claimed"], true);
    assert_eq!(
        err(&mut c, "bdev_malloc_delete", json!({"name": "Malloc0"})),
        -16
    );

    // a host connects to what the RPCs built
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut ctrlr = Controller::connect(addr, NQN, &HostOpts::default(), 1, 8).unwrap();
    assert_eq!(ctrlr.active_namespaces().unwrap(), vec![1]);
    assert_eq!(ctrlr.identify_ns(1).unwrap().blocks, 8192);
    drop(ctrlr);

    let cfg = call(&mut c, "save_config", Value::Null);
    drop(c);
    rpc.stop();
    srv.stop();
    assert!(!path.exists(), "socket removed on stop");

    // a new node from the saved config
    let path2 = sock("reload");
    let (srv2, rpc2) = node(&path2);
    let mut c = Client::connect(&path2, Duration::from_secs(10)).unwrap();
    call(&mut c, "load_config", cfg.clone());
    assert_eq!(call(&mut c, "nvmf_get_subsystems", Value::Null), subs);
    assert_eq!(call(&mut c, "bdev_get_bdevs", Value::Null), bdevs);
    assert_eq!(call(&mut c, "save_config", Value::Null), cfg);
    let mut ctrlr = Controller::connect(addr, NQN, &HostOpts::default(), 1, 8).unwrap();
    assert_eq!(ctrlr.identify_ns(1).unwrap().blocks, 8192);
    drop(ctrlr);
    // a config with a method dpustack does not have names it and its place
    let mut bad = cfg.clone();
    bad["subsystems"][0]["config"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"method": "bdev_aio_create", "params": {}}));
    let e = c.call("load_config", Some(bad)).unwrap().unwrap_err();
    assert!(
        e.message.contains("subsystems[0] (bdev) config[0]")
            && e.message.contains("bdev_aio_create"),
        "{e}"
    );
    drop(c);
    rpc2.stop();
    srv2.stop();
}

#[test]
fn bad_input_and_a_silent_client() {
    let path = sock("bad");
    let (_srv, rpc) = node(&path);
    // a client that connects and never sends
    let silent = UnixStream::connect(&path).unwrap();
    // malformed JSON: parse error, then the server closes the connection
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": }")
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["code"], -32700);
    // a request over the limit
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"bdev_get_bdevs\",\"params\":{{\"name\":\"{}\"}}}}",
        "a".repeat(2 << 20)
    );
    let _ = s.write_all(big.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let v: Value = serde_json::Deserializer::from_slice(&out)
        .into_iter::<Value>()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(v["error"]["code"], -32600);
    // a batch while the silent client is connected: answered at once
    let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    let v = c
        .raw(br#"[{"jsonrpc":"2.0","id":1,"method":"spdk_get_version"},{"jsonrpc":"2.0","method":"framework_wait_init"},{"jsonrpc":"2.0","id":2,"method":"nope"}]"#)
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
    let b = v.as_array().unwrap();
    assert_eq!(b.len(), 2, "the notification is not answered");
    assert!(b[0]["result"]["version"]
        .as_str()
        .unwrap()
        .contains("dpustack"));
    assert_eq!(b[1]["error"]["code"], -32601);
    // 200 concurrent clients
    let clients: Vec<_> = (0..200)
        .map(|_| Client::connect(&path, Duration::from_secs(20)).unwrap())
        .collect();
    for mut c in clients {
        assert_eq!(
            call(&mut c, "framework_wait_init", Value::Null),
            json!(true)
        );
    }
    drop(silent);
    // a second server on a live socket is refused
    assert!(matches!(
        RpcServer::start(&path, Arc::new(Mgmt::new())),
        Err(mgmt::Error::InUse(_))
    ));
    rpc.stop();
}
