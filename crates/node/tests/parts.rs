//! The node's parts (the cm tests moved from the CLI's `cmd/cm.rs` with the code).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use cm::{ConnParam, EventType, PortSpace};
use cm_tools::rping::RpingOpts;
use cm_tools::{Console, T};
use node::{Config, Node, Status};

/// A node on `ip` with only the cm part (and the TSE self-check, which binds nothing).
fn node(ip: &str) -> Config {
    let mut c = Config::default();
    c.node.listen_ip = ip.into();
    c.rdma.enabled = false;
    c.nvmf.enabled = false;
    c.obj.enabled = false;
    c
}

/// The node's device on `ip` is released after `stop`: its UDP 4791 can be
/// bound again. Within a bounded wait, not at once: when the device's
/// poller thread holds the last reference at that moment (it upgrades its
/// weak one for each round), the device is dropped on that thread and its
/// socket closes when the thread exits, just after `stop` returned (seen in
/// 1 of 30 runs of this binary at f863ac5; docs/verbs note it). A device
/// still bound after 2 s fails.
fn released_after_stop(ip: &str) {
    let t0 = Instant::now();
    loop {
        match verbs::Context::open(ip) {
            Ok(_) => return,
            Err(e) if t0.elapsed() < Duration::from_secs(2) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("device on {ip} not released 2 s after stop: {e:?}"),
        }
    }
}

fn cm_status(n: &Node) -> Status {
    n.parts()
        .iter()
        .find(|p| p.name == "cm")
        .expect("a cm part")
        .status
        .clone()
}

#[test]
fn up_disabled_by_config() {
    let mut c = node("127.0.4.75");
    c.cm.enabled = false;
    let n = Node::start(&c);
    match cm_status(&n) {
        Status::Disabled(why) => assert!(why.contains("enabled = false")),
        other => panic!("not disabled: {other:?}"),
    }
    assert!(n.cm().is_none());
}

/// `up`'s cm part alone (no rdma part: it opens the device itself): an rping
/// client gets 3 validated pings, a REQ for another port gets REJ 8, and stop
/// releases the device (its UDP 4791 can be bound again).
#[test]
fn up_serves_rping_and_rejects_unknown_ports() {
    let c = node("127.0.4.76");
    let n = Node::start(&c);
    let Status::Running(detail) = cm_status(&n) else {
        panic!("cm part not running: {:?}", cm_status(&n));
    };
    assert!(
        detail.contains("rping echo server on 127.0.4.76:7174"),
        "{detail}"
    );
    assert!(!detail.contains("the rdma part's device"), "{detail}");
    let client = RpingOpts {
        provider: cm_tools::Provider::Auto,
        server: false,
        client: true,
        addr: Some(Ipv4Addr::new(127, 0, 4, 76)),
        src: Some(Ipv4Addr::new(127, 0, 4, 77)),
        port: 7174,
        count: Some(3),
        size: 64,
        verbose: false,
        validate: true,
        debug: false,
        persistent: false,
        service: false,
    };
    let cm = c.cm.core();
    cm_tools::rping::client(&client, &cm, &mut Console::silent()).unwrap();
    let dev =
        cm_tools::open_device(Ipv4Addr::new(127, 0, 4, 78), cm_tools::Provider::Soft, &cm).unwrap();
    let id = dev.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, "127.0.4.76:9".parse().unwrap(), T)
        .unwrap();
    id.resolve_route(T).unwrap();
    match id.connect(&ConnParam::default(), T) {
        Err(cm::driver::DriverError::Event {
            event: EventType::Rejected,
            status: 8,
        }) => {}
        other => panic!("expected REJ 8, got {other:?}"),
    }
    let t0 = Instant::now();
    n.stop();
    assert!(t0.elapsed() < Duration::from_secs(5));
    released_after_stop("127.0.4.76");
}

/// With the rdma part running, the cm part's agent sits on the node's device
/// (the one `Node::device` hands out), not on a second one; stop releases it.
#[test]
fn cm_agent_shares_the_rdma_device() {
    let mut c = node("127.0.4.79");
    c.rdma.enabled = true;
    let n = Node::start(&c);
    let rdma = &n.parts()[0];
    assert_eq!(rdma.name, "rdma");
    assert!(matches!(rdma.status, Status::Running(_)), "{rdma:?}");
    let Status::Running(detail) = cm_status(&n) else {
        panic!("cm part not running: {:?}", cm_status(&n));
    };
    assert!(detail.contains("the rdma part's device"), "{detail}");
    let dev = n.device().expect("the node's device");
    assert_eq!(n.cm().unwrap().device().ip(), dev.ip());
    // a second device on the node's address cannot bind its UDP 4791
    assert!(verbs::Context::open("127.0.4.79").is_err());
    n.stop();
    released_after_stop("127.0.4.79");
}

/// A failing part is reported as failed (with its causes) and the others still
/// start; a disabled part is not counted as missing.
#[test]
fn failed_parts_are_counted() {
    let mut c = node("127.0.4.80");
    c.cm.enabled = false;
    c.switch.ports = vec!["1=pcap-rx:/nonexistent/dpustack-node-test.pcap".into()];
    let n = Node::start(&c);
    let names: Vec<&str> = n.parts().iter().map(|p| p.name).collect();
    assert_eq!(names, ["rdma", "cm", "nvmf", "tse", "switch", "obj"]);
    let sw = &n.parts()[4].status;
    match sw {
        Status::Failed(e) => assert!(
            e.starts_with("switch: opening /nonexistent/dpustack-node-test.pcap"),
            "{e}"
        ),
        other => panic!("switch should have failed: {other:?}"),
    }
    assert_eq!(
        n.parts()[5].status,
        Status::Disabled("[obj] enabled = false")
    );
    assert!(matches!(n.parts()[3].status, Status::Running(_)));
    assert_eq!(n.missing(), 1);
}

/// `[nvmf] listen = "rdma://IP"` on the node's address: the nvmf part serves
/// NVMe/RDMA through the CM agent's device (the one soft device that owns UDP 4791
/// there, so the agent keeps answering for the ports nobody listens on); a host on
/// another address discovers, connects, writes and reads back.
#[test]
fn nvmf_part_serves_rdma_on_the_cm_agents_device() {
    use nvme::log::TrType;
    use nvmf::host::{discover_with, Controller, HostOpts};
    use nvmf::transport::TransportId;
    let mut c = node("127.0.4.81");
    c.rdma.enabled = true;
    c.nvmf.enabled = true;
    c.nvmf.listen = "rdma://127.0.4.81:4420".into();
    c.nvmf.bdev = "malloc:4M".into();
    let n = Node::start(&c);
    let part = n.parts().iter().find(|p| p.name == "nvmf").unwrap();
    match &part.status {
        Status::Running(d) => {
            assert!(d.starts_with("NVMe/RDMA target: "), "{d}");
            assert!(d.contains("rdma://127.0.4.81:4420"), "{d}");
        }
        other => panic!("nvmf part not running: {other:?}"),
    }
    assert_eq!(n.missing(), 0);
    let host = nvmf::rdma::RdmaHostTransport::new(
        nvmf::rdma::open_device(Ipv4Addr::new(127, 0, 4, 91)).unwrap(),
    );
    let opts = HostOpts {
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let trid = TransportId::ip(TrType::Rdma, "127.0.4.81:4420".parse().unwrap());
    let (_, entries) = discover_with(&host, &trid, &opts).unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e.trtype == TrType::Rdma && e.subnqn == c.nvmf.nqn),
        "{entries:?}"
    );
    let mut ctl = Controller::connect_with(&host, &trid, &c.nvmf.nqn, &opts, 1, 8).unwrap();
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 253) as u8).collect();
    ctl.write(0, 1, 8, &data, 512).unwrap();
    assert!(ctl.read(0, 1, 8, 128, 512).unwrap() == data);
    ctl.shutdown().unwrap();
}

/// The obj part: an engine on `[obj]` (its own port, data under the node's data
/// dir), running until the node stops.
#[test]
fn obj_part_runs_an_engine() {
    let dir = std::env::temp_dir().join(format!("dpustack-node-obj-{}", std::process::id()));
    let mut c = node("127.0.4.82");
    c.cm.enabled = false;
    c.obj.enabled = true;
    c.obj.listen = "127.0.0.1:0".into();
    c.obj.targets = 1;
    c.node.data_dir = dir.clone();
    let n = Node::start(&c);
    let obj = &n.parts()[5];
    assert_eq!(obj.name, "obj");
    match &obj.status {
        Status::Running(d) => {
            assert!(d.starts_with("object engine on 127.0.0.1:"), "{d}");
            assert!(
                d.contains(&format!("data {}", dir.join("obj").display())),
                "{d}"
            );
        }
        other => panic!("obj part not running: {other:?}"),
    }
    assert_eq!(n.missing(), 0);
    let eng = n.obj().expect("the node's engine");
    assert_ne!(eng.addr().port(), 0, "the engine's real port");
    n.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The management plane's view of the rdma and cm parts: after an rping run the
/// RoCE collector's packet and byte counters moved, the CM collector lists the
/// rping server's listening id, and the `dpustack_*` methods say the same.
#[test]
fn collectors_and_node_methods_see_the_parts() {
    use mgmt::jsonrpc::Dispatch;
    let mut c = node("127.0.4.93");
    c.rdma.enabled = true;
    let n = Node::start(&c);
    assert!(n.device().is_some() && n.cm().is_some());
    let reg = mgmt::Registry::new();
    for col in node::manage::collectors(&n, &c) {
        reg.add(col);
    }
    let sample = |text: &str, name: &str, label: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains(label))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} {label}:\n{text}"))
    };
    let before = reg.scrape();
    let rx0 = sample(&before, "dpustack_roce_rx_packets_total", "");
    assert_eq!(
        sample(&before, "dpustack_cm_connections", "state=\"listen\""),
        1.0
    );
    let client = RpingOpts {
        server: false,
        client: true,
        addr: Some(Ipv4Addr::new(127, 0, 4, 93)),
        src: Some(Ipv4Addr::new(127, 0, 4, 94)),
        port: 7174,
        count: Some(3),
        size: 64,
        verbose: false,
        validate: true,
        debug: false,
        persistent: false,
        service: false,
        provider: cm_tools::Provider::Soft,
    };
    cm_tools::rping::client(&client, &c.cm.core(), &mut Console::silent()).unwrap();
    let after = reg.scrape();
    let rx1 = sample(&after, "dpustack_roce_rx_packets_total", "");
    assert!(rx1 >= rx0 + 6.0, "rx packets {rx0} -> {rx1}");
    assert!(sample(&after, "dpustack_roce_rx_bytes_total", "") > rx1 * 12.0);
    assert!(sample(&after, "dpustack_cm_mads_received_total", "") >= 2.0);
    let m = node::manage::NodeMethods::new(&n, &c);
    let devs = m.call("dpustack_rdma_get_devices", None).unwrap();
    assert_eq!(devs[0]["ip"], "127.0.4.93", "{devs}");
    assert!(devs[0]["counters"]["rx_packets"].as_f64().unwrap() >= rx1);
    let ids = m.call("dpustack_cm_get_connections", None).unwrap();
    assert!(
        ids.as_array()
            .unwrap()
            .iter()
            .any(|i| i["state"] == "listen" && i["local_address"] == "127.0.4.93:7174"),
        "{ids}"
    );
    let e = m.call("dpustack_switch_get_stats", None).unwrap_err();
    assert_eq!(e.code, -19, "no switch in this node: {e}");
    assert_eq!(
        m.call(
            "dpustack_rdma_get_devices",
            Some(&serde_json::json!({"x": 1}))
        )
        .unwrap_err()
        .code,
        -32602
    );
    drop((m, reg));
    n.stop();
}

/// The switch's control commands as `dpustack_switch_*` methods and its
/// counters in the metrics, against a running switch part (one pcap-tx port).
#[test]
fn switch_methods_and_metrics_on_a_running_switch() {
    use mgmt::jsonrpc::Dispatch;
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("dpustack-node-sw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = node("127.0.4.95");
    c.cm.enabled = false;
    c.switch.ports = vec![format!("1=pcap-tx:{}", dir.join("tx.pcap").display())];
    let n = Node::start(&c);
    let sw = n.parts().iter().find(|p| p.name == "switch").unwrap();
    assert!(matches!(sw.status, Status::Running(_)), "{sw:?}");
    let m = node::manage::NodeMethods::new(&n, &c);
    let r = m
        .call(
            "dpustack_switch_add_flows",
            Some(&json!({"flows": ["priority=5,in_port=2,actions=output:1", "priority=0,actions=drop"]})),
        )
        .unwrap();
    assert_eq!(r, "2 flows added, 2 in table");
    let rules = m.call("dpustack_switch_dump_rules", None).unwrap();
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("in_port=2")),
        "{rules}"
    );
    let st = m.call("dpustack_switch_get_stats", None).unwrap();
    assert_eq!(st["rules"], 2, "{st}");
    assert_eq!(st["upcalls"], 0);
    let reg = mgmt::Registry::new();
    for col in node::manage::collectors(&n, &c) {
        reg.add(col);
    }
    let text = reg.scrape();
    assert!(text.contains("\ndpustack_switch_up 1\n"), "{text}");
    assert!(text.contains("\ndpustack_switch_rules 2\n"), "{text}");
    assert!(
        text.contains("\ndpustack_switch_upcalls_total 0\n"),
        "{text}"
    );
    let r = m
        .call(
            "dpustack_switch_del_flows",
            Some(&json!({"match": "in_port=2"})),
        )
        .unwrap();
    assert_eq!(r, "1 flows deleted, 1 in table");
    // groups, ports, MAC table, filtered dumps
    let r = m
        .call(
            "dpustack_switch_add_groups",
            Some(&json!({"groups": "group_id=7,type=all,bucket=output:1"})),
        )
        .unwrap();
    assert_eq!(r, "1 groups added, 1 in table");
    let e = m
        .call(
            "dpustack_switch_add_groups",
            Some(&json!({"groups": "group_id=7,type=all,bucket=output:1"})),
        )
        .unwrap_err();
    assert!(e.message.contains("OFPGMFC_GROUP_EXISTS"), "{e}");
    let g = m.call("dpustack_switch_dump_groups", None).unwrap();
    assert_eq!(g, json!(["group_id=7,type=all,bucket=actions=output:1"]));
    let r = m
        .call(
            "dpustack_switch_add_flows",
            Some(&json!({"flows": "table=1,udp,actions=group:7"})),
        )
        .unwrap();
    assert_eq!(r, "1 flows added, 2 in table");
    let t1 = m
        .call(
            "dpustack_switch_dump_rules",
            Some(&json!({"match": "table=1"})),
        )
        .unwrap();
    assert_eq!(t1.as_array().unwrap().len(), 1, "{t1}");
    let gs = m.call("dpustack_switch_dump_group_stats", None).unwrap();
    assert!(gs[0].as_str().unwrap().starts_with("group_id=7,"), "{gs}");
    assert_eq!(
        m.call("dpustack_switch_port_down", Some(&json!({"port": 1})))
            .unwrap(),
        "port 1 down"
    );
    assert_eq!(
        m.call("dpustack_switch_port_up", Some(&json!({"port": 1})))
            .unwrap(),
        "port 1 up"
    );
    assert_eq!(
        m.call("dpustack_switch_port_up", Some(&json!({"port": "x"})))
            .unwrap_err()
            .code,
        -32602
    );
    assert_eq!(
        m.call("dpustack_switch_fdb_show", None).unwrap(),
        json!([" port  VLAN  MAC                Age"]),
        "the header, no MAC learned"
    );
    assert_eq!(
        m.call("dpustack_switch_fdb_flush", None).unwrap(),
        "0 MAC entries flushed"
    );
    let r = m
        .call("dpustack_switch_del_groups", Some(&json!({"group_id": 7})))
        .unwrap();
    assert_eq!(r, "1 groups deleted (1 rules that used them), 0 in table");
    assert_eq!(
        m.call(
            "dpustack_switch_add_flows",
            Some(&json!({"flows": "bogus=1"}))
        )
        .unwrap_err()
        .code,
        -32603
    );
    assert_eq!(
        m.call("dpustack_switch_add_flows", None).unwrap_err().code,
        -32602
    );
    // stop: the loop ends, later calls say the switch is not running
    assert_eq!(m.call("dpustack_switch_stop", None).unwrap(), "stopping");
    let mut code = 0;
    for _ in 0..100 {
        match m.call("dpustack_switch_get_stats", None) {
            Err(e) => {
                code = e.code;
                break;
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    assert_eq!(code, -19, "a stopped switch is -19");
    assert!(reg.scrape().contains("\ndpustack_switch_up 0\n"));
    drop((m, reg));
    n.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// TSE/EQ counts: `dpustack_tse_get_stats` lists a live scheduler and EQ of the
/// process with their exact counts, the node's self-check in the retired sums, and
/// the `dpustack_tse_*` families carry the totals.
#[test]
fn tse_counts_in_methods_and_metrics() {
    use mgmt::jsonrpc::Dispatch;
    use tse::{EventQueue, ManualClock, Scheduler, Wait};
    let mut c = node("127.0.4.96");
    c.cm.enabled = false;
    let n = Node::start(&c);
    assert!(n.tse_enabled(), "{:?}", n.parts());
    let m = node::manage::NodeMethods::new(&n, &c);
    let mut s = Scheduler::with_clock(Box::new(ManualClock::new()));
    let a = s.create(|s, t| {
        let _ = s.complete(t, Ok(()));
    });
    let b = s.create(|_, _| {}); // runs, stays in flight
    s.schedule(a).unwrap();
    s.schedule(b).unwrap();
    s.progress();
    let mut eq = EventQueue::new(Scheduler::with_clock(Box::new(ManualClock::new())));
    let ev = eq.event_init(None).unwrap();
    eq.launch(ev).unwrap();
    eq.complete_event(ev, Ok(())).unwrap();
    let mut out = Vec::new();
    assert_eq!(eq.poll(Wait::NoWait, 4, &mut out).unwrap(), 1);
    let st = m.call("dpustack_tse_get_stats", None).unwrap();
    let mine = st["schedulers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == s.id())
        .cloned()
        .unwrap_or_else(|| panic!("scheduler {} not listed: {st}", s.id()));
    assert_eq!(mine["tasks_created"], 2, "{mine}");
    assert_eq!(mine["tasks_ran"], 2, "{mine}");
    assert_eq!(mine["tasks_completed"], 1, "{mine}");
    assert_eq!(mine["tasks_failed"], 0, "{mine}");
    assert_eq!(mine["tasks_in_flight"], 1, "{mine}");
    let q = st["event_queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == eq.id())
        .cloned()
        .unwrap();
    assert_eq!(q["sched_id"], eq.sched().id());
    assert_eq!(
        (
            &q["events_launched"],
            &q["events_completed"],
            &q["events_polled"],
            &q["polls"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{q}"
    );
    // the self-check's scheduler (4 tasks) was dropped: it is in the retired sums
    assert!(st["retired"]["schedulers"].as_u64().unwrap() >= 1, "{st}");
    assert!(
        st["retired"]["tasks_completed"].as_u64().unwrap() >= 4,
        "{st}"
    );
    assert!(
        st["totals"]["tasks_in_flight"].as_u64().unwrap() >= 1,
        "{st}"
    );
    assert_eq!(
        m.call("dpustack_tse_get_stats", Some(&serde_json::json!({"x": 1})))
            .unwrap_err()
            .code,
        -32602
    );
    let reg = mgmt::Registry::new();
    for col in node::manage::collectors(&n, &c) {
        reg.add(col);
    }
    let text = reg.scrape();
    let val = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {text}"))
            .parse()
            .unwrap()
    };
    assert!(val("dpustack_tse_tasks_created_total") >= 6.0, "{text}");
    assert!(val("dpustack_tse_tasks_in_flight") >= 1.0, "{text}");
    assert!(val("dpustack_tse_events_polled_total") >= 1.0, "{text}");
    assert!(val("dpustack_tse_schedulers") >= 2.0, "{text}");
    drop((m, reg, s, eq));
    n.stop();
}

/// The object engine's request counters: `dpustack_obj_get_stats` and the
/// metrics count the RPCs a client sent, by opcode.
#[test]
fn obj_request_counters() {
    use mgmt::jsonrpc::Dispatch;
    let dir = std::env::temp_dir().join(format!("dpustack-node-obj-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = node("127.0.4.97");
    c.cm.enabled = false;
    c.obj.enabled = true;
    c.obj.targets = 1;
    c.obj.listen = format!("127.0.0.1:{port}");
    c.obj.data_dir = Some(dir.clone());
    let n = Node::start(&c);
    assert!(n.obj().is_some(), "{:?}", n.parts());
    let m = node::manage::NodeMethods::new(&n, &c);
    let client = obj::client::Client::connect(&c.obj.listen).unwrap();
    let before = m.call("dpustack_obj_get_stats", None).unwrap();
    for _ in 0..3 {
        client.ping(None).unwrap().get().unwrap();
    }
    client.pool_list(None).unwrap().get().unwrap();
    let after = m.call("dpustack_obj_get_stats", None).unwrap();
    let d = |op: &str| {
        after["requests"][op].as_u64().unwrap() - before["requests"][op].as_u64().unwrap()
    };
    assert_eq!(
        (d("ping"), d("pool_list"), d("obj_update")),
        (3, 1, 0),
        "{after}"
    );
    let reg = mgmt::Registry::new();
    for col in node::manage::collectors(&n, &c) {
        reg.add(col);
    }
    let text = reg.scrape();
    let want = format!(
        "dpustack_obj_requests_total{{opcode=\"ping\"}} {}\n",
        after["requests"]["ping"]
    );
    assert!(text.contains(&want), "{want} in\n{text}");
    drop((client, m, reg));
    n.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dpustack up`'s switch part serves OpenFlow 1.3 on `[switch] openflow_listen`:
/// HELLO, then FEATURES_REQUEST answered with a FEATURES_REPLY (raw bytes).
#[test]
fn switch_part_serves_openflow() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("dpustack-node-of-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = 20000 + (std::process::id() % 20000) as u16;
    let mut c = node("127.0.4.96");
    c.cm.enabled = false;
    c.switch.ports = vec![format!("1=pcap-tx:{}", dir.join("tx.pcap").display())];
    c.switch.openflow_listen = vec![format!("ptcp:{port}:127.0.4.96")];
    let n = Node::start(&c);
    let sw = n.parts().iter().find(|p| p.name == "switch").unwrap();
    assert!(matches!(sw.status, Status::Running(_)), "{sw:?}");
    let t = Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.4.96", port)) {
            Ok(s) => break s,
            Err(e) if t.elapsed() < Duration::from_secs(3) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("no OpenFlow listener: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    // OFPT_HELLO and OFPT_FEATURES_REQUEST, version 0x04 (OpenFlow 1.3)
    s.write_all(&[4, 0, 0, 8, 0, 0, 0, 1, 4, 5, 0, 8, 0, 0, 0, 2])
        .unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 512];
    let features = loop {
        // walk the whole messages read so far
        let mut at = 0;
        let mut found = None;
        while buf.len() >= at + 8 {
            let len = u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as usize;
            if len < 8 || buf.len() < at + len {
                break;
            }
            if buf[at + 1] == 6 {
                found = Some(buf[at..at + len].to_vec());
            }
            at += len;
        }
        if let Some(f) = found {
            break f;
        }
        let k = s.read(&mut b).expect("read");
        assert!(k > 0, "connection closed before FEATURES_REPLY");
        buf.extend_from_slice(&b[..k]);
    };
    assert_eq!(features[0], 4, "OpenFlow 1.3");
    assert_eq!(&features[4..8], &[0, 0, 0, 2], "reply to our xid");
    assert_eq!(features.len(), 32);
    drop(s);
    n.stop();
}
