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
    // an existing NQN: SPDK's -32603 "Unable to create subsystem"
    let e = c
        .call("nvmf_create_subsystem", Some(json!({"nqn": NQN})))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, -32603);
    assert!(e.message.starts_with("Unable to create subsystem"), "{e}");
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
        .insert(0, json!({"method": "bdev_rbd_create", "params": {}}));
    let e = c.call("load_config", Some(bad)).unwrap().unwrap_err();
    assert!(
        e.message.contains("subsystems[0] (bdev) config[0]")
            && e.message.contains("bdev_rbd_create"),
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

fn host(nqn: &str) -> HostOpts {
    HostOpts {
        hostnqn: nqn.into(),
        ..HostOpts::default()
    }
}

/// Reads block 0 of NSID 1 on the controller's first I/O queue.
fn read0(c: &mut Controller) -> nvmf::host::Completion {
    c.io[0]
        .exec(nvmf::host::read_sqe(1, 0, 1), &[], 512)
        .unwrap()
}

/// Polls until `f` holds (the target's timer pass closes failed controllers'
/// queues within ~100 ms).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The queries and the live changes SPDK has: controllers, qpairs and listeners
/// of a subsystem, nvmf_get_stats and bdev_get_iostat counting what a host did;
/// a removed listener drops the controllers connected through it and refuses new
/// ones; a removed host is dropped and refused; io_uring file bdevs (uring and
/// aio) are made, serve a namespace, are saved and deleted.
#[test]
fn queries_and_live_removals() {
    let path = sock("live");
    let (srv, rpc) = node(&path);
    srv.tgt().set_io_stats(true);
    let mut c = Client::connect(&path, Duration::from_secs(10)).unwrap();
    let h1 = "nqn.2014-08.org.nvmexpress:uuid:h1";
    let h2 = "nqn.2014-08.org.nvmexpress:uuid:h2";
    call(
        &mut c,
        "bdev_malloc_create",
        json!({"name": "M0", "num_blocks": 2048, "block_size": 512}),
    );
    call(&mut c, "nvmf_create_transport", json!({"trtype": "TCP"}));
    call(&mut c, "nvmf_create_subsystem", json!({"nqn": NQN}));
    for h in [h1, h2] {
        call(
            &mut c,
            "nvmf_subsystem_add_host",
            json!({"nqn": NQN, "host": h}),
        );
    }
    call(
        &mut c,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "M0"}}),
    );
    // no listener yet: SPDK's subsystems are reachable only through theirs
    let la0 = json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0"});
    for _ in 0..2 {
        call(
            &mut c,
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": la0}),
        );
    }
    let ls = call(&mut c, "nvmf_subsystem_get_listeners", json!({"nqn": NQN}));
    let ls = ls.as_array().unwrap();
    assert_eq!(ls.len(), 2, "{ls:?}");
    assert_eq!(ls[0]["address"]["trtype"], "TCP");
    let port = |i: usize| -> u16 {
        ls[i]["address"]["trsvcid"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (p1, p2) = (port(0), port(1));
    assert_ne!(p1, p2);
    let at = |p: u16| -> std::net::SocketAddr { format!("127.0.0.1:{p}").parse().unwrap() };
    let mut c1 = Controller::connect(at(p1), NQN, &host(h1), 1, 8).unwrap();
    let mut c2 = Controller::connect(at(p2), NQN, &host(h2), 1, 8).unwrap();
    for _ in 0..5 {
        assert!(read0(&mut c1).cqe.status().is_success());
    }
    assert!(read0(&mut c2).cqe.status().is_success());

    let ctrlrs = call(
        &mut c,
        "nvmf_subsystem_get_controllers",
        json!({"nqn": NQN}),
    );
    let ctrlrs = ctrlrs.as_array().unwrap();
    assert_eq!(ctrlrs.len(), 2);
    assert!(ctrlrs
        .iter()
        .any(|x| x["hostnqn"] == h1 && x["cntlid"] == c1.cntlid));
    assert!(ctrlrs
        .iter()
        .all(|x| x["num_io_qpairs"] == 1 && x["cntrltype"] == "io"));
    let qps = call(&mut c, "nvmf_subsystem_get_qpairs", json!({"nqn": NQN}));
    let qps = qps.as_array().unwrap();
    assert_eq!(qps.len(), 4, "{qps:?}");
    let p2s = p2.to_string();
    let on_p2: Vec<_> = qps
        .iter()
        .filter(|q| q["listen_address"]["trsvcid"] == p2s.as_str())
        .collect();
    assert_eq!(on_p2.len(), 2);
    assert!(on_p2.iter().all(|q| q["hostnqn"] == h2
        && q["state"] == "enabled"
        && q["peer_address"]["traddr"] == "127.0.0.1"));
    let st = call(&mut c, "nvmf_get_stats", Value::Null);
    let pg = &st["poll_groups"][0];
    assert_eq!(pg["name"], "nvmf_tgt_poll_group_000");
    assert_eq!(pg["current_admin_qpairs"], 2);
    assert_eq!(pg["current_io_qpairs"], 2);
    assert_eq!(pg["completed_nvme_io"], 6);
    assert_eq!(pg["pending_bdev_io"], 0);
    assert_eq!(pg["transports"][0]["trtype"], "TCP");
    let io = call(&mut c, "bdev_get_iostat", json!({"name": "M0"}));
    let b = &io["bdevs"][0];
    assert_eq!(b["name"], "M0");
    assert_eq!(b["num_read_ops"], 6);
    assert_eq!(b["bytes_read"], 6 * 512);
    assert!(b["read_latency_ticks"].as_u64().unwrap() > 0);
    assert_eq!(io["tick_rate"], 1_000_000_000u64);
    assert_eq!(err(&mut c, "bdev_get_iostat", json!({"name": "nope"})), -19);

    // remove the second listener: c2 (connected through it) is dropped, c1 stays,
    // a new connection through it is refused
    let la2 = json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": p2.to_string()});
    call(
        &mut c,
        "nvmf_subsystem_remove_listener",
        json!({"nqn": NQN, "listen_address": la2}),
    );
    assert_eq!(
        err(
            &mut c,
            "nvmf_subsystem_remove_listener",
            json!({"nqn": NQN, "listen_address": la2})
        ),
        -32602
    );
    wait_for("c2 dropped after its listener went", || {
        call(
            &mut c,
            "nvmf_subsystem_get_controllers",
            json!({"nqn": NQN}),
        )
        .as_array()
        .unwrap()
        .len()
            == 1
    });
    let gone = c2.io[0].exec(nvmf::host::read_sqe(1, 0, 1), &[], 512);
    assert!(
        gone.as_ref().map_or(true, |x| !x.cqe.status().is_success()),
        "I/O on a dropped controller: {gone:?}"
    );
    assert!(Controller::connect(at(p2), NQN, &host(h2), 1, 8).is_err());
    // no subsystem listens there any more: the socket is closed at once, the port free
    let e = std::net::TcpStream::connect(("127.0.0.1", p2)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    drop(std::net::TcpListener::bind(("127.0.0.1", p2)).expect("the port is free"));
    assert!(read0(&mut c1).cqe.status().is_success());
    assert_eq!(
        call(&mut c, "nvmf_subsystem_get_listeners", json!({"nqn": NQN}))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // remove host h1: dropped and refused; h2 still gets in through p1
    call(
        &mut c,
        "nvmf_subsystem_remove_host",
        json!({"nqn": NQN, "host": h1}),
    );
    wait_for("h1 dropped", || {
        call(
            &mut c,
            "nvmf_subsystem_get_controllers",
            json!({"nqn": NQN}),
        )
        .as_array()
        .unwrap()
        .is_empty()
    });
    assert!(Controller::connect(at(p1), NQN, &host(h1), 1, 8).is_err());
    let mut c3 = Controller::connect(at(p1), NQN, &host(h2), 1, 8).unwrap();
    assert!(read0(&mut c3).cqe.status().is_success());
    drop(c3);
    assert_eq!(
        err(
            &mut c,
            "nvmf_subsystem_remove_host",
            json!({"nqn": NQN, "host": h1})
        ),
        -32603
    );

    // io_uring file bdevs
    let f = std::env::temp_dir().join(format!("dpustack-rpc-{}-uring.img", std::process::id()));
    std::fs::write(&f, vec![0x5au8; 1 << 20]).unwrap();
    let fname = f.display().to_string();
    assert_eq!(
        call(
            &mut c,
            "bdev_uring_create",
            json!({"filename": fname, "name": "U0", "block_size": 512})
        ),
        "U0"
    );
    assert_eq!(
        call(
            &mut c,
            "bdev_aio_create",
            json!({"filename": fname, "name": "A0"})
        ),
        "A0"
    );
    assert_eq!(
        err(
            &mut c,
            "bdev_uring_create",
            json!({"filename": "/nonexistent/x", "name": "U1"})
        ),
        -19
    );
    assert_eq!(
        err(
            &mut c,
            "bdev_uring_create",
            json!({"filename": fname, "name": "U0"})
        ),
        -17
    );
    let u = call(&mut c, "bdev_get_bdevs", json!({"name": "U0"}));
    assert_eq!(u[0]["num_blocks"], 2048);
    assert_eq!(u[0]["driver_specific"]["uring"]["filename"], fname.as_str());
    // a controller connected before the namespace is added sees it (live, with
    // the Changed Namespace List; the AEN itself: nvmf's qpair tests)
    let mut c5 = Controller::connect(at(p1), NQN, &host(h2), 1, 8).unwrap();
    assert_eq!(c5.active_namespaces().unwrap(), vec![1]);
    call(
        &mut c,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "U0", "nsid": 2}}),
    );
    assert_eq!(c5.active_namespaces().unwrap(), vec![1, 2]);
    let r = c5.io[0]
        .exec(nvmf::host::read_sqe(2, 0, 1), &[], 512)
        .unwrap();
    assert!(r.cqe.status().is_success());
    let changed = c5.get_log_page(0x04u8, 0, 4096).unwrap();
    assert_eq!(&changed[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    drop(c5);
    let mut c4 = Controller::connect(at(p1), NQN, &host(h2), 1, 8).unwrap();
    let r = c4.io[0]
        .exec(nvmf::host::read_sqe(2, 3, 1), &[], 512)
        .unwrap();
    assert!(r.cqe.status().is_success());
    assert!(r.data.iter().all(|&b| b == 0x5a), "the file's bytes");
    drop(c4);
    let cfg = call(&mut c, "save_config", Value::Null);
    let bdev_cfg = cfg["subsystems"][0]["config"].as_array().unwrap();
    assert!(bdev_cfg
        .iter()
        .any(|e| e["method"] == "bdev_uring_create" && e["params"]["filename"] == fname.as_str()));
    assert!(bdev_cfg.iter().any(|e| e["method"] == "bdev_aio_create"));
    assert_eq!(err(&mut c, "bdev_uring_delete", json!({"name": "A0"})), -19);
    call(&mut c, "bdev_aio_delete", json!({"name": "A0"}));
    call(
        &mut c,
        "nvmf_subsystem_remove_ns",
        json!({"nqn": NQN, "nsid": 2}),
    );
    call(&mut c, "bdev_uring_delete", json!({"name": "U0"}));
    let _ = std::fs::remove_file(&f);
    drop((c, c1, c2));
    rpc.stop();
    srv.stop();
}

/// A target serving NVMe/RDMA is reported and saved as RDMA (it was TCP): its
/// transport, its listeners in nvmf_get_subsystems, save_config; a TCP
/// transport is refused on it, a listener added over RPC is an RDMA one, and a
/// dpustack host connects over RDMA to the RPC-built subsystem.
#[test]
fn an_rdma_target_is_reported_as_rdma() {
    use nvme::log::TrType;
    let ip = "127.0.5.61";
    let tgt = Tgt::new(TgtParams {
        idle_spins: 0,
        ..TgtParams::default()
    });
    let listen = [nvmf::Listen {
        trid: nvmf::TransportId::ip(TrType::Rdma, format!("{ip}:4420").parse().unwrap()),
        discovery_only: true,
    }];
    let srv = nvmf::rdma::start_server(tgt, &listen, 1, Default::default()).unwrap();
    let m = Mgmt::new();
    m.attach_nvmf(srv.tgt().clone(), srv.listener_handle(), &[])
        .unwrap();
    let path = sock("rdma");
    let rpc = RpcServer::start(&path, Arc::new(m)).unwrap();
    let mut c = Client::connect(&path, Duration::from_secs(10)).unwrap();
    let t = call(&mut c, "nvmf_get_transports", Value::Null);
    assert_eq!(t, json!([{"trtype": "RDMA"}]));
    assert_eq!(
        err(&mut c, "nvmf_create_transport", json!({"trtype": "TCP"})),
        -32602
    );
    let subs = call(&mut c, "nvmf_get_subsystems", Value::Null);
    assert_eq!(subs[0]["listen_addresses"][0]["trtype"], "RDMA", "{subs}");
    call(
        &mut c,
        "bdev_malloc_create",
        json!({"name": "M0", "num_blocks": 256, "block_size": 512}),
    );
    call(
        &mut c,
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true}),
    );
    call(
        &mut c,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "M0"}}),
    );
    let la = json!({"trtype": "RDMA", "adrfam": "IPv4", "traddr": ip, "trsvcid": "4421"});
    call(
        &mut c,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": la}),
    );
    let l = call(&mut c, "nvmf_subsystem_get_listeners", json!({"nqn": NQN}));
    assert_eq!(l[0]["address"], la);
    let cfg = call(&mut c, "save_config", Value::Null);
    let nv = cfg["subsystems"][1]["config"].as_array().unwrap();
    assert!(nv
        .iter()
        .any(|e| e["method"] == "nvmf_create_transport" && e["params"]["trtype"] == "RDMA"));
    let ls: Vec<_> = nv
        .iter()
        .filter(|e| e["method"] == "nvmf_subsystem_add_listener")
        .collect();
    assert_eq!(ls.len(), 2, "{nv:?}");
    assert!(ls
        .iter()
        .all(|e| e["params"]["listen_address"]["trtype"] == "RDMA"));
    // a host over NVMe/RDMA on the RPC-built listener
    let addr = format!("{ip}:4421").parse().unwrap();
    let h = nvmf::rdma::host_transport(addr, Some("127.0.5.62".parse().unwrap())).unwrap();
    let mut ctrlr = Controller::connect_with(
        &h,
        &nvmf::TransportId::ip(TrType::Rdma, addr),
        NQN,
        &HostOpts::default(),
        1,
        8,
    )
    .unwrap();
    assert_eq!(ctrlr.identify_ns(1).unwrap().blocks, 256);
    let qps = call(&mut c, "nvmf_subsystem_get_qpairs", json!({"nqn": NQN}));
    assert_eq!(qps[0]["listen_address"]["trtype"], "RDMA", "{qps}");
    drop(ctrlr);
    drop(c);
    rpc.stop();
    srv.stop();
}
