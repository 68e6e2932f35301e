//! One replica over TCP (the runner an engine uses, its store in a redb file):
//! it elects itself, applies writes, survives a restart with its state, and
//! bad frames (oversized, not JSON, cut short) only close their connection.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use poolsvc::client::BlockingClient;
use poolsvc::health::MonitorConfig;
use poolsvc::msg::{ClientReply, ClientRequest};
use poolsvc::runner::{Replica, ReplicaConfig};
use poolsvc::state::{Command, Reply};

fn config(addr: &str) -> ReplicaConfig {
    ReplicaConfig {
        id: 0,
        listen: addr.to_string(),
        members: [(0, addr.to_string())].into(),
        initialize: true,
        heartbeat_ms: 30,
        election_min_ms: 150,
        election_max_ms: 300,
        engines: BTreeMap::new(),
        monitor: MonitorConfig {
            detector: Default::default(),
            exclude_after: None,
        },
        rebuild: poolsvc::rebuild::RebuildConfig::off(),
        map_versions: None,
        lease: None,
    }
}

fn client(addr: &str) -> BlockingClient {
    let mut c = BlockingClient::new([(0, addr.to_string())].into()).unwrap();
    c.inner.deadline = Duration::from_secs(10);
    c
}

fn raw(addr: &str, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn single_replica_over_tcp_restarts_with_its_state_and_refuses_bad_frames() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pool_svc.redb");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");

    let r = Replica::spawn(config(&addr), &db).unwrap();
    let mut c = client(&addr);
    let create = Command::CreatePool {
        pool: "p".into(),
        domains: 2,
        per_domain: 1,
    };
    assert_eq!(c.write(create.clone()).unwrap(), Reply::MapVersion(1));
    let down = Command::SetDomainState {
        pool: "p".into(),
        domain: 1,
        state: "DOWN".into(),
    };
    assert_eq!(c.write(down).unwrap(), Reply::MapVersion(2));

    // bad frames: the server closes that connection and answers nothing
    let mut huge = (u32::MAX).to_be_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(raw(&addr, &huge).is_empty());
    let mut junk = 5u32.to_be_bytes().to_vec();
    junk.extend_from_slice(b"nope!");
    assert!(raw(&addr, &junk).is_empty());
    let mut short = 100u32.to_be_bytes().to_vec();
    short.extend_from_slice(b"{\"Client\"");
    assert!(raw(&addr, &short).is_empty());
    // and still serves
    match c.request(ClientRequest::Status).unwrap().0 {
        ClientReply::Status(s) => assert_eq!(s.role, "leader"),
        other => panic!("{other:?}"),
    }

    // restart from the same redb file: the state is there
    r.stop();
    let _r = Replica::spawn(config(&addr), &db).unwrap();
    let mut c = client(&addr);
    let st = c.read().unwrap();
    let m = st.pools["p"].map();
    assert_eq!(m.version(), 2);
    assert_eq!(m.target(1).unwrap().state.name(), "DOWN");
    // a second create is refused by the state machine, not lost
    assert!(matches!(c.write(create).unwrap(), Reply::Refused(_)));
}
