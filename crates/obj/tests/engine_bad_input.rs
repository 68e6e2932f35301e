//! Bad input over the wire and misbehaving clients: every case gets a clean
//! error (or a closed connection for undecodable streams) and the engine
//! keeps serving everyone else. Also: many clients at once, timeouts,
//! cancellation, an unreachable engine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use obj::client::{Client, Error};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::rpc::frame::{encode_request, Decoded, FrameDecoder};
use obj::rpc::header::{HeaderRepr, Opcode, HEADER_LEN};
use obj::rpc::msg::{BulkSeg, IodType, ObjTarget, Request, WireIod, WireOid};
use obj::rpc::{Status, MAX_BODY};
use obj::types::{DKey, Iod, ObjClass, ObjType, ObjectId, SgList};
use tse::{TaskError, Wait};

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

/// A raw connection that speaks frames by hand.
struct Raw {
    s: TcpStream,
    dec: FrameDecoder,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            s,
            dec: FrameDecoder::new(MAX_BODY),
        }
    }
    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }
    fn req(&mut self, id: u64, req: &Request, bulk: &[&[u8]]) {
        let mut b = Vec::new();
        encode_request(&mut b, id, 0, req, bulk);
        self.send(&b);
    }
    /// The next reply frame, or None if the engine closed the connection.
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
    fn ping_ok(&mut self, id: u64) {
        self.req(id, &Request::Ping, &[]);
        assert_eq!(self.status_of(id), Status::Ok);
    }
}

fn target(coh: u64) -> ObjTarget {
    ObjTarget {
        coh,
        oid: WireOid {
            hi: oid(1).hi,
            lo: 1,
        },
        epoch: 0,
        stripe: 0,
    }
}

#[test]
fn malformed_rpcs_get_clean_errors_and_the_engine_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.3");
    let addr = eng.addr().to_string();
    // a well-behaved client with an open container, used throughout
    let good = Client::connect(&addr).unwrap();
    good.pool_create("p", 16 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    let poh = good.pool_connect("p", None).unwrap().get().unwrap();
    good.cont_create(&poh, "c", &[], None)
        .unwrap()
        .get()
        .unwrap();
    let coh = good.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let oh = good.obj_open(&coh, oid(1), None).unwrap().get().unwrap();
    let put = |k: &str| {
        good.obj_update(
            &oh,
            &DKey::from(k),
            &[Iod::single("a", 3)],
            &[SgList::one(b"xyz".to_vec())],
            None,
        )
        .unwrap()
        .get()
        .unwrap()
    };
    put("before");

    let mut r = Raw::connect(&addr);
    // 1. a valid header with a body that does not parse (object I/O and control)
    let mut b = Vec::new();
    encode_request(&mut b, 1, 0, &Request::ContQuery { coh: 0 }, &[]);
    b[6] = u16::from(Opcode::ObjUpdate) as u8; // an update whose body is 8 bytes
    r.send(&b);
    assert_eq!(r.status_of(1), Status::Proto);
    let mut b = Vec::new();
    encode_request(
        &mut b,
        2,
        0,
        &Request::PoolCreate {
            label: "x".into(),
            size: 1,
        },
        &[],
    );
    let hl = HEADER_LEN;
    b[hl] = 0xff; // label length 255 > body
    r.send(&b);
    assert_eq!(r.status_of(2), Status::Proto);
    // 2. unknown opcode
    let mut b = Vec::new();
    encode_request(&mut b, 3, 0, &Request::Ping, &[]);
    b[6] = 0x77;
    r.send(&b);
    assert_eq!(r.status_of(3), Status::NoSys);
    // 3. unknown and stale handles
    let upd = |coh: u64, seg: BulkSeg| Request::ObjUpdate {
        t: target(coh),
        dkey: b"d".to_vec(),
        iods: vec![WireIod {
            akey: b"a".to_vec(),
            kind: IodType::Single,
            rsize: 4,
            recxs: vec![],
            sgl: vec![seg],
        }],
    };
    r.req(4, &upd(0x1234, BulkSeg { off: 0, len: 4 }), &[b"abcd"]);
    assert_eq!(r.status_of(4), Status::NoHandle);
    r.req(5, &Request::ContClose { coh: 99 }, &[]);
    assert_eq!(r.status_of(5), Status::NoHandle);
    // 4. a bulk descriptor outside the request's bulk region
    r.req(6, &upd(coh.coh, BulkSeg { off: 2, len: 4 }), &[b"abcd"]);
    assert_eq!(r.status_of(6), Status::Invalid);
    // 5. descriptors that do not add up to the iod
    r.req(7, &upd(coh.coh, BulkSeg { off: 0, len: 3 }), &[b"abcd"]);
    assert_eq!(r.status_of(7), Status::Invalid);
    // 6. a bad object class in the OID
    let mut bad = upd(coh.coh, BulkSeg { off: 0, len: 4 });
    if let Request::ObjUpdate { t, .. } = &mut bad {
        t.oid.hi = 0x7f << 56;
    }
    r.req(8, &bad, &[b"abcd"]);
    assert_eq!(r.status_of(8), Status::Invalid);
    // an update at an explicit epoch (could rewrite a snapshot's past)
    let mut past = upd(coh.coh, BulkSeg { off: 0, len: 4 });
    if let Request::ObjUpdate { t, .. } = &mut past {
        t.epoch = 5;
    }
    r.req(13, &past, &[b"abcd"]);
    assert_eq!(r.status_of(13), Status::Invalid);
    // 7. an oversized request: refused, its bytes skipped, the connection kept
    let huge = vec![0x5au8; MAX_BODY + 10];
    r.req(9, &upd(coh.coh, BulkSeg { off: 0, len: 4 }), &[&huge]);
    assert_eq!(r.status_of(9), Status::RecTooBig);
    r.ping_ok(10);
    // a reply frame sent by a client is refused too
    let mut b = Vec::new();
    encode_request(&mut b, 11, 0, &Request::Ping, &[]);
    b[5] = 1;
    r.send(&b);
    assert_eq!(r.status_of(11), Status::Proto);
    r.ping_ok(12);
    // the good client never noticed
    put("during");

    // 8. garbage: one Proto reply, then the engine closes that connection
    let mut g = Raw::connect(&addr);
    g.send(&[0xde; 64]);
    let h = g.reply().expect("an error reply before the close");
    assert_eq!(Status::from_code(h.status), Status::Proto);
    assert!(g.reply().is_none(), "connection closed");
    put("after garbage");

    // 9. clients dying mid-request and mid-RPC
    for cut in [5usize, HEADER_LEN, HEADER_LEN + 3] {
        let mut d = Raw::connect(&addr);
        let mut b = Vec::new();
        encode_request(
            &mut b,
            1,
            0,
            &upd(coh.coh, BulkSeg { off: 0, len: 4 }),
            &[b"abcd"],
        );
        d.send(&b[..cut]);
        drop(d);
    }
    {
        let mut d = Raw::connect(&addr);
        for i in 0..50 {
            d.req(i, &upd(coh.coh, BulkSeg { off: 0, len: 4 }), &[b"dead"]);
        }
        drop(d); // gone before its replies
    }
    // a dying client's handles are closed: its coh is unknown afterwards
    let dying = Client::connect(&addr).unwrap();
    let dpoh = dying.pool_connect("p", None).unwrap().get().unwrap();
    let dcoh = dying.cont_open(&dpoh, "c", None).unwrap().get().unwrap();
    drop(dying);
    let mut seen_closed = false;
    for i in 0..500 {
        r.req(
            100 + i,
            &upd(dcoh.coh, BulkSeg { off: 0, len: 4 }),
            &[b"wxyz"],
        );
        match r.status_of(100 + i) {
            Status::NoHandle => {
                seen_closed = true;
                break;
            }
            Status::Ok => std::thread::sleep(Duration::from_millis(10)),
            s => panic!("{s}"),
        }
    }
    assert!(seen_closed, "the dead client's container handle was closed");
    put("after the dead");
    let f = good
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
    assert!(f.sizes[0] == 4, "{f:?}");
    drop(eng);
}

#[test]
fn many_clients_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.4");
    let addr = eng.addr().to_string();
    let c = Client::connect(&addr).unwrap();
    c.pool_create("p", 64 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("p", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let threads: Vec<_> = (0..24u64)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let c = Client::connect(&addr).unwrap();
                let poh = c.pool_connect("p", None).unwrap().get().unwrap();
                let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
                let oh = c
                    .obj_open(&coh, oid(1000 + t % 5), None)
                    .unwrap()
                    .get()
                    .unwrap();
                // 8 updates in flight at a time, through events
                let evs: Vec<_> = (0..8).map(|_| c.event(None).unwrap()).collect();
                for round in 0..5u64 {
                    let mut pend = Vec::new();
                    for (i, ev) in evs.iter().enumerate() {
                        let k = DKey(format!("t{t}-r{round}-{i}").into_bytes());
                        let v = vec![(t * 31 + round + i as u64) as u8; 100 + i * 1000];
                        pend.push(
                            c.obj_update(
                                &oh,
                                &k,
                                &[Iod::single("v", v.len() as u64)],
                                &[SgList::one(v)],
                                Some(ev),
                            )
                            .unwrap(),
                        );
                    }
                    let mut out = Vec::new();
                    while out.len() < evs.len() {
                        c.poll(Wait::Forever, 8, &mut out).unwrap();
                    }
                    for p in pend {
                        p.get().unwrap();
                    }
                }
                for round in 0..5u64 {
                    for i in 0..8usize {
                        let k = DKey(format!("t{t}-r{round}-{i}").into_bytes());
                        let f = c
                            .obj_fetch(&oh, None, &k, &[Iod::single("v", 0)], Vec::new(), None)
                            .unwrap()
                            .get()
                            .unwrap();
                        assert_eq!(
                            f.sgls[0].concat(),
                            vec![(t * 31 + round + i as u64) as u8; 100 + i * 1000]
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn timeouts_cancellation_and_unreachable_engines() {
    // nothing listens
    let l = TcpListener::bind("127.0.0.5:0").unwrap();
    let closed = l.local_addr().unwrap().to_string();
    drop(l);
    assert!(matches!(
        Client::connect(&closed),
        Err(Error::Unreachable { .. })
    ));
    // something listens but never answers: connect gives up (as unreachable)
    let silent = TcpListener::bind("127.0.0.5:0").unwrap();
    let saddr = silent.local_addr().unwrap().to_string();
    let keep = std::thread::spawn(move || {
        // hold the connection, never answer, until the client gives up
        if let Some(Ok(mut s)) = silent.incoming().next() {
            let mut buf = [0u8; 1024];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    let t0 = std::time::Instant::now();
    assert!(matches!(
        Client::connect_with(&saddr, Duration::from_millis(300)),
        Err(Error::Unreachable { .. })
    ));
    assert!(t0.elapsed() < Duration::from_secs(5));
    keep.join().unwrap();

    // an engine that stops answering mid-session: timeouts, then cancel
    let dir = tempfile::tempdir().unwrap();
    let eng = start(dir.path(), "127.0.0.5");
    let c = Client::connect(&eng.addr().to_string()).unwrap();
    c.set_timeout(Duration::from_millis(300));
    c.pool_create("p", 16 << 20, None).unwrap().get().unwrap();
    let ev = c.event(None).unwrap();
    let p = c.pool_list(Some(&ev)).unwrap();
    assert_eq!(c.test(ev, Wait::Forever).unwrap(), Some(Ok(())));
    assert_eq!(p.get().unwrap().len(), 1);
    // a silent engine (stopped targets keep the socket but never answer) is
    // simulated by a listener that accepts and reads
    let silent = TcpListener::bind("127.0.0.5:0").unwrap();
    let saddr = silent.local_addr().unwrap();
    let answer_ping = std::thread::spawn(move || {
        let (mut s, _) = silent.accept().unwrap();
        let mut dec = FrameDecoder::new(MAX_BODY);
        let mut buf = [0u8; 4096];
        // answer the connect ping only, then go silent
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return;
            }
            dec.input(&buf[..n]);
            if let Ok(Some(Decoded::Frame { hdr, .. })) = dec.decode() {
                let mut out = Vec::new();
                obj::rpc::frame::encode_reply(
                    &mut out,
                    hdr.rpc_id,
                    hdr.opcode,
                    Status::Ok,
                    &obj::rpc::Reply::Empty,
                    &[],
                );
                s.write_all(&out).unwrap();
                break;
            }
        }
        // then silent until the client hangs up
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let c2 = Client::connect_with(&saddr.to_string(), Duration::from_millis(200)).unwrap();
    let t0 = std::time::Instant::now();
    assert!(matches!(
        c2.pool_list(None).unwrap().get(),
        Err(Error::TimedOut)
    ));
    assert!(t0.elapsed() >= Duration::from_millis(200) && t0.elapsed() < Duration::from_secs(5));
    c2.set_timeout(Duration::from_secs(60));
    let ev = c2.event(None).unwrap();
    let p = c2.pool_list(Some(&ev)).unwrap();
    assert_eq!(c2.test(ev, Wait::NoWait).unwrap(), None);
    c2.abort(ev).unwrap();
    assert_eq!(
        c2.test(ev, Wait::Forever).unwrap(),
        Some(Err(TaskError::Cancelled))
    );
    assert!(matches!(p.get(), Err(Error::Cancelled)));
    drop(c2);
    answer_ping.join().unwrap();
    drop(eng);
}
