//! Run-to-completion targets: a client's object I/O goes to the owning
//! target's own connection (no network thread in between); a request for
//! another target's object gets `DER_INVAL` and the connection carries on; a
//! client that dies on a target connection leaves nothing behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::client::{Client, DEFAULT_TIMEOUT};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{route, Engine, EngineConfig};
use obj::rpc::frame::{encode_request, Decoded, FrameDecoder};
use obj::rpc::header::HeaderRepr;
use obj::rpc::msg::{BulkSeg, IodType, ObjTarget, Request, WireIod, WireOid};
use obj::rpc::{Status, MAX_BODY};
use obj::types::{DKey, Iod, ObjClass, ObjType, ObjectId, SgList};
use tse::Wait;

fn start(dir: &std::path::Path, ip: &str) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets: 2,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn oid(lo: u64) -> ObjectId {
    ObjectId::generate(0, lo, ObjType::MultiHashed, ObjClass::S1).unwrap()
}

fn wire(o: ObjectId) -> WireOid {
    WireOid { hi: o.hi, lo: o.lo }
}

/// The first OID (from `lo` up) that target `t` of 2 owns.
fn oid_on(t: usize, lo: u64) -> ObjectId {
    (lo..).map(oid).find(|o| route(wire(*o), 2) == t).unwrap()
}

/// Object requests counted by opcode (both paths together).
fn object_ops(eng: &Engine) -> u64 {
    eng.op_counters()
        .by_opcode()
        .iter()
        .filter(|(n, _)| n.starts_with("obj_"))
        .map(|(_, c)| c)
        .sum()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn object_io_of_an_rtc_client_goes_to_the_targets_not_through_obj_net() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.31");
    let addr = eng.addr().to_string();
    let stats = eng.op_counters();
    assert_eq!(eng.target_addrs().len(), 2);
    let c = Client::connect_opts(&addr, DEFAULT_TIMEOUT, true).unwrap();
    assert_eq!(c.target_connections(), 2);
    wait_until("two target connections", || stats.target_connections() == 2);
    c.pool_create("p", 32 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("p", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    // control operations went over the main connection
    assert_eq!(stats.target_requests(), 0);

    let (ops0, tgt0) = (object_ops(&eng), stats.target_requests());
    // objects on both targets, 16 updates in flight through events
    let oids: Vec<ObjectId> = vec![oid_on(0, 1), oid_on(1, 1), oid_on(0, 100), oid_on(1, 100)];
    let evs: Vec<_> = (0..16).map(|_| c.event(None).unwrap()).collect();
    let mut pend = Vec::new();
    for (i, ev) in evs.iter().enumerate() {
        let oh = c.obj_open(&coh, oids[i % 4], None).unwrap().get().unwrap();
        let v = vec![i as u8; 10 + i];
        pend.push(
            c.obj_update(
                &oh,
                &DKey(format!("k{i}").into_bytes()),
                &[Iod::single("a", v.len() as u64)],
                &[SgList::one(v)],
                Some(ev),
            )
            .unwrap(),
        );
    }
    let mut out = Vec::new();
    while out.len() < evs.len() {
        c.poll(Wait::Forever, 16, &mut out).unwrap();
    }
    for p in pend {
        p.get().unwrap();
    }
    for i in 0..16usize {
        let oh = c.obj_open(&coh, oids[i % 4], None).unwrap().get().unwrap();
        let f = c
            .obj_fetch(
                &oh,
                None,
                &DKey(format!("k{i}").into_bytes()),
                &[Iod::single("a", 0)],
                Vec::new(),
                None,
            )
            .unwrap()
            .get()
            .unwrap();
        assert_eq!(f.sgls[0].concat(), vec![i as u8; 10 + i]);
    }
    // 32 object requests, every one received by a target itself
    assert_eq!(object_ops(&eng) - ops0, 32);
    assert_eq!(stats.target_requests() - tgt0, 32);
    assert_eq!(stats.wrong_target(), 0);

    // the old path, in the same engine: a client without target connections
    let old = Client::connect_opts(&addr, DEFAULT_TIMEOUT, false).unwrap();
    assert_eq!(old.target_connections(), 0);
    let poh2 = old.pool_connect("p", None).unwrap().get().unwrap();
    let coh2 = old.cont_open(&poh2, "c", None).unwrap().get().unwrap();
    let (ops1, tgt1) = (object_ops(&eng), stats.target_requests());
    for (i, o) in oids.iter().enumerate() {
        let oh = old.obj_open(&coh2, *o, None).unwrap().get().unwrap();
        let f = old
            .obj_fetch(
                &oh,
                None,
                &DKey(format!("k{i}").into_bytes()),
                &[Iod::single("a", 0)],
                Vec::new(),
                None,
            )
            .unwrap()
            .get()
            .unwrap();
        assert_eq!(f.sgls[0].concat(), vec![i as u8; 10 + i]);
    }
    assert_eq!(object_ops(&eng) - ops1, 4);
    assert_eq!(
        stats.target_requests(),
        tgt1,
        "the old path crossed obj-net"
    );
}

/// A raw connection that speaks frames by hand.
struct Raw {
    s: TcpStream,
    dec: FrameDecoder,
}

impl Raw {
    fn connect(addr: std::net::SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            s,
            dec: FrameDecoder::new(MAX_BODY),
        }
    }
    fn req(&mut self, id: u64, req: &Request, bulk: &[&[u8]]) {
        let mut b = Vec::new();
        encode_request(&mut b, id, 0, req, bulk);
        self.s.write_all(&b).unwrap();
    }
    fn reply(&mut self) -> Option<HeaderRepr> {
        loop {
            match self.dec.decode() {
                Ok(Some(Decoded::Frame { hdr, .. })) => return Some(hdr),
                Ok(Some(Decoded::Oversized { hdr })) => return Some(hdr),
                Ok(None) => {}
                Err(e) => panic!("engine sent garbage: {e}"),
            }
            let mut buf = [0u8; 65536];
            let n = self.s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.dec.input(&buf[..n]);
        }
    }
    fn status_of(&mut self, id: u64) -> Status {
        let h = self.reply().expect("a reply");
        assert_eq!(h.rpc_id, id, "{h}");
        Status::from_code(h.status)
    }
}

fn update(coh: u64, o: ObjectId) -> Request {
    Request::ObjUpdate {
        t: ObjTarget {
            coh,
            oid: wire(o),
            epoch: 0,
            stripe: 0,
        },
        dkey: b"d".to_vec(),
        iods: vec![WireIod {
            akey: b"a".to_vec(),
            kind: IodType::Single,
            rsize: 3,
            recxs: Vec::new(),
            sgl: vec![BulkSeg { off: 0, len: 3 }],
        }],
    }
}

#[test]
fn a_request_for_another_targets_object_is_refused_and_all_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.32");
    let addr = eng.addr().to_string();
    let stats = eng.op_counters();
    let c = Client::connect_opts(&addr, DEFAULT_TIMEOUT, true).unwrap();
    c.pool_create("p", 32 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("p", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let (mine, theirs) = (oid_on(0, 1), oid_on(1, 1));

    let mut r = Raw::connect(eng.target_addrs()[0]);
    r.req(1, &update(coh.coh, theirs), &[b"xyz"]);
    assert_eq!(r.status_of(1), Status::Invalid);
    assert_eq!(stats.wrong_target(), 1);
    // the same connection carries on: the owner's object, a ping
    r.req(2, &update(coh.coh, mine), &[b"xyz"]);
    assert_eq!(r.status_of(2), Status::Ok);
    r.req(3, &Request::Ping, &[]);
    assert_eq!(r.status_of(3), Status::Ok);
    // pool / container operations belong on the main connection
    r.req(4, &Request::PoolList, &[]);
    assert_eq!(r.status_of(4), Status::Invalid);
    // obj_list_obj names its shard: only this target's
    let list = |shard| Request::ObjListObj {
        coh: coh.coh,
        shard,
        epoch: 0,
        anchor: Vec::new(),
        max: 16,
    };
    r.req(5, &list(1), &[]);
    assert_eq!(r.status_of(5), Status::Invalid);
    r.req(6, &list(0), &[]);
    assert_eq!(r.status_of(6), Status::Ok);
    // an unknown handle, an oversized frame: clean errors, connection kept
    r.req(7, &update(0xdead, mine), &[b"xyz"]);
    assert_eq!(r.status_of(7), Status::NoHandle);
    let big = vec![0u8; MAX_BODY + 1];
    r.req(8, &update(coh.coh, mine), &[&big]);
    assert_eq!(r.status_of(8), Status::RecTooBig);
    r.req(9, &Request::Ping, &[]);
    assert_eq!(r.status_of(9), Status::Ok);
    assert_eq!(stats.wrong_target(), 2);

    // what the raw connection wrote is there, read through the client
    let oh = c.obj_open(&coh, mine, None).unwrap().get().unwrap();
    let f = c
        .obj_fetch(
            &oh,
            None,
            &DKey::from("d"),
            &[Iod::single("a", 0)],
            Vec::new(),
            None,
        )
        .unwrap()
        .get()
        .unwrap();
    assert_eq!(f.sgls[0].concat(), b"xyz");
}

#[test]
fn a_client_dying_mid_rpc_on_target_connections_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.33");
    let addr = eng.addr().to_string();
    let stats = eng.op_counters();
    let admin = Client::connect_opts(&addr, DEFAULT_TIMEOUT, false).unwrap();
    admin
        .pool_create("p", 64 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    {
        let poh = admin.pool_connect("p", None).unwrap().get().unwrap();
        admin
            .cont_create(&poh, "c", &[], None)
            .unwrap()
            .get()
            .unwrap();
        admin.pool_disconnect(&poh, None).unwrap().get().unwrap();
    }
    for round in 0..3u64 {
        let c = Client::connect_opts(&addr, DEFAULT_TIMEOUT, true).unwrap();
        assert_eq!(c.target_connections(), 2);
        wait_until("target connections open", || {
            stats.target_connections() == 2
        });
        let poh = c.pool_connect("p", None).unwrap().get().unwrap();
        let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
        // 32 updates of 64 KiB on objects of both targets, sent, then the
        // client is gone before the replies are read
        let evs: Vec<_> = (0..32).map(|_| c.event(None).unwrap()).collect();
        let mut pend = Vec::new();
        for (i, ev) in evs.iter().enumerate() {
            let oh = c
                .obj_open(&coh, oid_on(i % 2, round * 100 + i as u64), None)
                .unwrap()
                .get()
                .unwrap();
            let v = vec![7u8; 64 << 10];
            pend.push(
                c.obj_update(
                    &oh,
                    &DKey::from("d"),
                    &[Iod::single("a", v.len() as u64)],
                    &[SgList::one(v)],
                    Some(ev),
                )
                .unwrap(),
            );
        }
        let mut out = Vec::new();
        c.poll(Wait::NoWait, 32, &mut out).unwrap();
        drop(pend);
        drop(c);
        // and a raw client that dies in the middle of a frame
        let mut r = Raw::connect(eng.target_addrs()[1]);
        let mut b = Vec::new();
        encode_request(&mut b, 1, 0, &update(coh.coh, oid_on(1, 1)), &[b"xyz"]);
        r.s.write_all(&b[..b.len() - 2]).unwrap();
        drop(r);
        wait_until("target connections closed", || {
            stats.target_connections() == 0
        });
        wait_until("main connection closed", || stats.clients.clients() == 1);
    }
    // its pool and container handles went with it: the pool is not in use
    admin.pool_destroy("p", false, None).unwrap().get().unwrap();
    // and the engine serves a new client
    let c = Client::connect_opts(&addr, DEFAULT_TIMEOUT, true).unwrap();
    c.pool_create("q", 16 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("q", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let oh = c.obj_open(&coh, oid(5), None).unwrap().get().unwrap();
    c.obj_update(
        &oh,
        &DKey::from("d"),
        &[Iod::single("a", 2)],
        &[SgList::one(b"ok".to_vec())],
        None,
    )
    .unwrap()
    .get()
    .unwrap();
}
