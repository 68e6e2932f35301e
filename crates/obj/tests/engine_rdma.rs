//! The engine over RPC over RDMA (soft RoCE on loopback addresses, RC QPs
//! through the RDMA CM): small messages by SEND/RECV, values larger than a
//! message slot by RDMA READ (requests) and RDMA WRITE into registered sinks
//! (fetch replies), pooled buffers, events in flight, and the same data seen
//! by a TCP client.

use std::sync::Arc;

use obj::client::kv::KV_AKEY;
use obj::client::Client;
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::rpc::frame::encode_request;
use obj::rpc::header::HEADER_LEN;
use obj::rpc::msg::{BulkSeg, IodType, ObjTarget, Request, WireIod, WireOid};
use obj::rpc::rdma::{RdmaClient, FLAG_RDMA_BULK};
use obj::types::{ObjClass, ObjType, ObjectId};
use tse::Wait;

#[test]
fn rpc_over_rdma_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let rdma: std::net::SocketAddr = "127.0.0.15:7480".parse().unwrap();
    let cfg = EngineConfig {
        listen: "127.0.0.15:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        targets: 2,
        rdma_listen: Some(rdma),
        aggregation: Default::default(),
    };
    let eng = Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap();
    let c = Client::connect_rdma(rdma, "127.0.0.16").unwrap();
    assert!(c.addr().starts_with("rdma://"));
    c.pool_create("r", 64 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("r", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let kv_oid = ObjectId::generate(0, 5, ObjType::KvHashed, ObjClass::S1).unwrap();
    let kv = c.kv_open(&coh, kv_oid, None).unwrap().get().unwrap();
    c.kv_put(&kv, b"small", b"tiny value", None)
        .unwrap()
        .get()
        .unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    c.kv_put(&kv, b"big", &big, None).unwrap().get().unwrap();
    assert_eq!(
        c.kv_get(&kv, b"small", None).unwrap().get().unwrap(),
        b"tiny value"
    );
    assert_eq!(c.kv_get(&kv, b"big", None).unwrap().get().unwrap(), big);

    // array I/O across chunks, several RPCs in flight at once
    let aoid = ObjectId::generate(0, 6, ObjType::Array, ObjClass::S1).unwrap();
    let arr = c
        .array_create(&coh, aoid, 1, 1 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
    let ev = c.event(None).unwrap();
    let p = c.array_write(&arr, 100, &data, Some(&ev)).unwrap();
    assert_eq!(c.test(ev, Wait::Forever).unwrap(), Some(Ok(())));
    p.get().unwrap();
    let back = c
        .array_read(&arr, 100, data.len() as u64, None)
        .unwrap()
        .get()
        .unwrap();
    assert!(back == data, "array read back over RDMA");
    let evs: Vec<_> = (0..12).map(|_| c.event(None).unwrap()).collect();
    let pend: Vec<_> = evs
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let v = vec![i as u8; 1000 + i * 9000];
            c.kv_put(&kv, format!("k{i}").as_bytes(), &v, Some(ev))
                .unwrap()
        })
        .collect();
    let mut out = Vec::new();
    while out.len() < evs.len() {
        c.poll(Wait::Forever, 16, &mut out).unwrap();
    }
    for p in pend {
        p.get().unwrap();
    }

    // a TCP client sees the same objects
    let t = Client::connect(&eng.addr().to_string()).unwrap();
    let tpoh = t.pool_connect("r", None).unwrap().get().unwrap();
    let tcoh = t.cont_open(&tpoh, "c", None).unwrap().get().unwrap();
    let tkv = t.kv_open(&tcoh, kv_oid, None).unwrap().get().unwrap();
    assert_eq!(t.kv_get(&tkv, b"big", None).unwrap().get().unwrap(), big);
    for i in 0..12usize {
        let v = t
            .kv_get(&tkv, format!("k{i}").as_bytes(), None)
            .unwrap()
            .get()
            .unwrap();
        assert_eq!(v, vec![i as u8; 1000 + i * 9000]);
    }
    // the RDMA client goes away; TCP carries on
    drop(c);
    assert_eq!(
        t.kv_get(&tkv, b"small", None).unwrap().get().unwrap(),
        b"tiny value"
    );

    // a bulk descriptor outside the client's registered memory: the engine's
    // READ fails, that client's connection ends, everyone else carries on
    let mut raw = RdmaClient::connect(rdma, "127.0.0.17").unwrap();
    let req = Request::ObjUpdate {
        t: ObjTarget {
            coh: tcoh.coh,
            oid: WireOid {
                hi: kv_oid.hi,
                lo: kv_oid.lo,
            },
            epoch: 0,
            stripe: 0,
        },
        dkey: b"forged".to_vec(),
        iods: vec![WireIod {
            akey: KV_AKEY.to_vec(),
            kind: IodType::Single,
            rsize: 100,
            recxs: vec![],
            sgl: vec![BulkSeg { off: 0, len: 100 }],
        }],
    };
    let mut frame = Vec::new();
    encode_request(&mut frame, 1, 0, &req, &[]);
    frame[5] |= FLAG_RDMA_BULK;
    // the bulk region: a descriptor naming memory nobody registered
    frame.extend_from_slice(&0x1000u64.to_le_bytes());
    frame.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    frame.extend_from_slice(&100u32.to_le_bytes());
    let body_len = (frame.len() - HEADER_LEN) as u32;
    frame[24..28].copy_from_slice(&body_len.to_le_bytes());
    frame[28..32].copy_from_slice(&16u32.to_le_bytes());
    raw.send_raw(frame);
    let t0 = std::time::Instant::now();
    while !raw.core.is_closed() && t0.elapsed() < std::time::Duration::from_secs(10) {
        raw.progress(std::time::Duration::from_millis(10));
    }
    assert!(
        raw.core.is_closed(),
        "the forged READ ended that connection"
    );
    assert_eq!(
        t.kv_get(&tkv, b"forged", None)
            .unwrap()
            .get()
            .unwrap_err()
            .status(),
        Some(obj::rpc::Status::NonExist)
    );
    let c2 = Client::connect_rdma(rdma, "127.0.0.18").unwrap();
    c2.ping(None).unwrap().get().unwrap();
    drop(c2);
    drop(t);
    eng.stop();
}

// ---- buffer pools, fetch replies by RDMA WRITE (issue 12) ------------------
//
// Each test has its own engine and soft RoCE devices on 127.0.12.x (one
// device per IP: UDP 4791 of that address), so they run side by side.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use obj::client::{ContHandle, Kv};
use obj::rpc::rdma::{server_stats, RdmaStats, FLAG_SINK, SLOT};
use obj::rpc::{RawReply, RpcError, Status};
use obj::types::{DKey, Iod, SgList};

fn start_engine(dir: &std::path::Path, rdma: &str) -> (Engine, SocketAddr) {
    let rdma: SocketAddr = rdma.parse().unwrap();
    let cfg = EngineConfig {
        listen: SocketAddr::new(rdma.ip(), 0),
        data_dir: dir.to_path_buf(),
        targets: 2,
        rdma_listen: Some(rdma),
        aggregation: Default::default(),
    };
    (
        Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap(),
        rdma,
    )
}

/// Pool "p" and container "c" (created if `create`), opened by `c`.
fn open_cont(c: &Client, create: bool) -> ContHandle {
    if create {
        c.pool_create("p", 1 << 30, None).unwrap().get().unwrap();
    }
    let poh = c.pool_connect("p", None).unwrap().get().unwrap();
    if create {
        c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    }
    c.cont_open(&poh, "c", None).unwrap().get().unwrap()
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn stats(addr: SocketAddr) -> RdmaStats {
    server_stats(addr).expect("engine listener registered")
}

/// Waits until the engine has `n` RDMA connections (a client that left is
/// noticed by its CM disconnect).
fn wait_conns(addr: SocketAddr, n: usize) -> RdmaStats {
    let t0 = Instant::now();
    loop {
        let s = stats(addr);
        if s.conns == n || t0.elapsed() > Duration::from_secs(15) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the engine has no pool buffer lent (a WRITE source goes back
/// when the engine reaps the WRITE's completion, which may be after the
/// client saw the reply).
fn wait_unlent(addr: SocketAddr) -> RdmaStats {
    let t0 = Instant::now();
    loop {
        let s = stats(addr);
        if s.pool_lent == 0 || t0.elapsed() > Duration::from_secs(5) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One RPC on a raw RDMA client, driven to its end.
fn raw_rpc(raw: &mut RdmaClient, req: &Request) -> Result<RawReply, RpcError> {
    let id = raw
        .core
        .start(Instant::now(), req, &[], Some(Duration::from_secs(10)));
    let t0 = Instant::now();
    loop {
        raw.progress(Duration::from_millis(5));
        while let Some(c) = raw.core.poll_completion() {
            if c.rpc_id == id {
                return c.result;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "RPC never ended");
    }
}

fn kv_fetch(kv: &Kv, key: &[u8]) -> Request {
    Request::ObjFetch {
        t: ObjTarget {
            coh: kv.oh.coh,
            oid: WireOid {
                hi: kv.oh.oid.hi,
                lo: kv.oh.oid.lo,
            },
            epoch: 0,
            stripe: 0,
        },
        dkey: key.to_vec(),
        iods: vec![WireIod {
            akey: KV_AKEY.to_vec(),
            kind: IodType::Single,
            rsize: 0,
            recxs: vec![],
            sgl: vec![],
        }],
    }
}

/// Values of 1 B .. 4 MiB, many around the 64 KiB slot (where a frame stops
/// fitting a SEND), put and fetched three ways (size unknown: an open sink
/// of one pool buffer, a larger reply READ by the client; exact SGL; SGL with
/// spare room), every byte compared. Catches: bulk lost or shifted at the
/// slot edge or in the WRITE path (data compare); large fetch replies no
/// longer pushed by WRITE (sink_writes count), or pulled by READ when they
/// fit the sink (client bulk_reads = the open fetches larger than a pool
/// buffer, exactly); memory registered on the I/O path in steady state
/// (pool_grown must not move on the second pass, on either side).
#[test]
fn values_of_every_size_fetched_by_rdma_write() {
    let dir = tempfile::tempdir().unwrap();
    let (eng, rdma) = start_engine(dir.path(), "127.0.12.1:7481");
    let c = Client::connect_rdma(rdma, "127.0.12.2").unwrap();
    let coh = open_cont(&c, true);
    let oid = ObjectId::generate(0, 1, ObjType::KvHashed, ObjClass::S1).unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    let mut sizes = vec![1usize, 2, 100, 4095, 4096, 30_000, 65_000];
    for d in [-400i64, -200, -150, -100, -80, -64, -40, -1, 0, 1, 64, 4096] {
        sizes.push((SLOT as i64 + d) as usize);
    }
    sizes.extend([
        100_000,
        200_000,
        1 << 20,
        (1 << 20) + 1,
        3 << 20,
        (4 << 20) - 1,
        4 << 20,
    ]);
    let mut grown = None;
    for pass in 0..2u32 {
        let before_c = c.rdma_stats().unwrap();
        let before_e = stats(rdma);
        let mut big_fetches = 0u64;
        let mut open_reads = 0u64;
        for (i, &n) in sizes.iter().enumerate() {
            let key = format!("v{i}");
            let v = pattern(n, i as u32 + pass);
            c.kv_put(&kv, key.as_bytes(), &v, None)
                .unwrap()
                .get()
                .unwrap();
            let got = c.kv_get(&kv, key.as_bytes(), None).unwrap().get().unwrap();
            assert!(got == v, "kv_get of {n} bytes (pass {pass})");
            let dkey = DKey(key.into_bytes());
            for spare in [0usize, 1000] {
                let iod = Iod::single(KV_AKEY, (n + spare) as u64);
                let f = c
                    .obj_fetch(
                        &kv.oh,
                        None,
                        &dkey,
                        &[iod],
                        vec![SgList::one(vec![0; n + spare])],
                        None,
                    )
                    .unwrap()
                    .get()
                    .unwrap();
                assert_eq!(f.sizes, vec![n as u64]);
                let b = &f.sgls[0].iovs[0];
                assert!(
                    b[..n] == v[..],
                    "obj_fetch of {n} bytes into {} (pass {pass})",
                    n + spare
                );
                assert!(b[n..].iter().all(|&x| x == 0));
            }
            // a reply frame bigger than a slot must have come by WRITE, but
            // kv_get's (size open: a sink of one pool buffer) by READ when
            // larger than that sink
            if n > SLOT - 32 {
                big_fetches += 2;
                if n > obj::rpc::rdma::POOL_BUF {
                    open_reads += 1;
                } else {
                    big_fetches += 1;
                }
            }
        }
        let after_c = c.rdma_stats().unwrap();
        let after_e = wait_unlent(rdma);
        let wrote = after_c.sink_writes - before_c.sink_writes;
        assert!(
            wrote >= big_fetches && wrote <= 3 * sizes.len() as u64,
            "{wrote} fetch replies by WRITE, {big_fetches} needed"
        );
        assert_eq!(after_e.sink_writes - before_e.sink_writes, wrote);
        assert_eq!(
            after_c.bulk_reads - before_c.bulk_reads,
            open_reads,
            "only open-size fetches larger than their sink pulled by READ"
        );
        assert_eq!(after_c.pool_lent, 0, "client buffers all back");
        assert_eq!(after_e.pool_lent, 0, "engine buffers all back");
        assert!(
            after_e.bulk_reads > before_e.bulk_reads,
            "large updates READ"
        );
        let g = (after_c.pool_grown, after_e.pool_grown);
        if let Some(first) = grown {
            assert_eq!(g, first, "no registration in steady state");
        }
        grown = Some(g);
    }
    drop(c);
    eng.stop();
}

/// A sink too small for the reply: a clean RecTooBig for that fetch, no
/// byte written past the sink (a canary after its advertised end), and the
/// connection goes on serving (a fetch that fits, by WRITE). Catches an
/// engine that writes the whole bulk regardless of the sink's length
/// (canary, or the client sees more bytes written than it offered: the
/// connection would end) or that ends the connection instead of refusing.
#[test]
fn fetch_into_a_too_small_sink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (eng, rdma) = start_engine(dir.path(), "127.0.12.3:7482");
    let c = Client::connect_rdma(rdma, "127.0.12.4").unwrap();
    let coh = open_cont(&c, true);
    let oid = ObjectId::generate(0, 2, ObjType::KvHashed, ObjClass::S1).unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    let big = pattern(300_000, 1);
    let fits = pattern(90_000, 2);
    c.kv_put(&kv, b"big", &big, None).unwrap().get().unwrap();
    c.kv_put(&kv, b"fits", &fits, None).unwrap().get().unwrap();

    let mut raw = RdmaClient::connect(rdma, "127.0.12.5").unwrap();
    raw.set_sink_cap(Some(100_000));
    let r = raw_rpc(&mut raw, &kv_fetch(&kv, b"big"));
    assert_eq!(r.unwrap_err(), RpcError::Status(Status::RecTooBig));
    assert_eq!(stats(rdma).sink_too_small, 1);
    let r = raw_rpc(&mut raw, &kv_fetch(&kv, b"fits")).unwrap();
    assert!(r.bulk() == &fits[..], "a fetch that fits the sink");
    let s = raw.stats();
    assert_eq!((s.sink_writes, s.sink_overruns, s.pool_lent), (1, 0, 0));
    assert!(!raw.core.is_closed());
    // the well-behaved client is unaffected
    assert_eq!(c.kv_get(&kv, b"big", None).unwrap().get().unwrap(), big);
    drop(raw);
    drop(c);
    eng.stop();
}

/// A forged sink descriptor (memory the client never registered): the
/// engine's WRITE fails, which ends that client's RC connection only; the
/// engine's buffers of that connection are released (none lent, pool gone).
/// Catches an engine that keeps serving on a broken QP, dies, or leaks the
/// WRITE source.
#[test]
fn forged_sink_descriptor_ends_only_that_client() {
    let dir = tempfile::tempdir().unwrap();
    let (eng, rdma) = start_engine(dir.path(), "127.0.12.6:7483");
    let c = Client::connect_rdma(rdma, "127.0.12.7").unwrap();
    let coh = open_cont(&c, true);
    let oid = ObjectId::generate(0, 3, ObjType::KvHashed, ObjClass::S1).unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    let big = pattern(500_000, 3);
    c.kv_put(&kv, b"big", &big, None).unwrap().get().unwrap();
    let one = stats(rdma);
    assert_eq!(one.conns, 1);

    let mut raw = RdmaClient::connect(rdma, "127.0.12.8").unwrap();
    let mut frame = Vec::new();
    encode_request(&mut frame, 1, 0, &kv_fetch(&kv, b"big"), &[]);
    frame[5] |= FLAG_SINK;
    frame.extend_from_slice(&0x1000u64.to_le_bytes());
    frame.extend_from_slice(&0x0bad_cafeu32.to_le_bytes());
    frame.extend_from_slice(&(1u32 << 20).to_le_bytes());
    let body_len = (frame.len() - HEADER_LEN) as u32;
    frame[24..28].copy_from_slice(&body_len.to_le_bytes());
    frame[28..32].copy_from_slice(&16u32.to_le_bytes());
    raw.send_raw(frame);
    let t0 = Instant::now();
    while !raw.core.is_closed() && t0.elapsed() < Duration::from_secs(10) {
        raw.progress(Duration::from_millis(10));
    }
    assert!(
        raw.core.is_closed(),
        "the forged WRITE ended that connection"
    );
    let s = wait_conns(rdma, 1);
    assert_eq!(s.conns, 1, "only the forger's connection ended");
    assert_eq!(s.pool_lent, 0);
    assert_eq!(s.pool_buffers, one.pool_buffers, "its pool went with it");
    assert_eq!(c.kv_get(&kv, b"big", None).unwrap().get().unwrap(), big);
    drop(raw);
    drop(c);
    eng.stop();
}

/// Five RDMA clients at once (own device each), each writing and reading
/// its own values (several in flight, across the slot size) and a shared
/// one; then all leave. Catches: replies routed to the wrong connection or
/// bulk mixed between clients (data compare), buffers lent and never given
/// back, and pools that outlive their connection (engine counters back to
/// zero buffers once every client is gone).
#[test]
fn five_clients_at_once_and_pools_back_to_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (eng, rdma) = start_engine(dir.path(), "127.0.12.10:7484");
    let setup = Client::connect_rdma(rdma, "127.0.12.20").unwrap();
    let coh = open_cont(&setup, true);
    let oid = ObjectId::generate(0, 4, ObjType::KvHashed, ObjClass::S1).unwrap();
    let kv = setup.kv_open(&coh, oid, None).unwrap().get().unwrap();
    let shared = pattern(700_000, 99);
    setup
        .kv_put(&kv, b"shared", &shared, None)
        .unwrap()
        .get()
        .unwrap();
    drop(setup);
    assert_eq!(wait_conns(rdma, 0).pool_buffers, 0);

    const N: usize = 5;
    // (counters, not a Barrier: a client that fails to connect must fail
    // the test, not hang it)
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..N)
        .map(|k| {
            let (connected, go) = (connected.clone(), go.clone());
            let shared = shared.clone();
            std::thread::spawn(move || {
                let c = Client::connect_rdma(rdma, &format!("127.0.12.{}", 11 + k)).unwrap();
                let coh = open_cont(&c, false);
                let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
                connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let t0 = Instant::now();
                while !go.load(std::sync::atomic::Ordering::SeqCst) {
                    assert!(t0.elapsed() < Duration::from_secs(60), "never started");
                    std::thread::sleep(Duration::from_millis(5));
                }
                let sizes = [10usize, 60_000, 70_000, 250_000, 1 << 20, 2_500_000];
                for round in 0..3u32 {
                    let evs: Vec<_> = sizes.iter().map(|_| c.event(None).unwrap()).collect();
                    let vals: Vec<_> = sizes
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| pattern(n, (k * 100 + i) as u32 + round))
                        .collect();
                    let pend: Vec<_> = vals
                        .iter()
                        .zip(&evs)
                        .enumerate()
                        .map(|(i, (v, ev))| {
                            c.kv_put(&kv, format!("c{k}-{i}").as_bytes(), v, Some(ev))
                                .unwrap()
                        })
                        .collect();
                    let mut out = Vec::new();
                    while out.len() < evs.len() {
                        c.poll(Wait::Forever, 16, &mut out).unwrap();
                    }
                    for p in pend {
                        p.get().unwrap();
                    }
                    let gets: Vec<_> = (0..sizes.len())
                        .map(|i| {
                            c.kv_get(&kv, format!("c{k}-{i}").as_bytes(), Some(&evs[i]))
                                .unwrap()
                        })
                        .collect();
                    let mut out = Vec::new();
                    while out.len() < evs.len() {
                        c.poll(Wait::Forever, 16, &mut out).unwrap();
                    }
                    for (i, p) in gets.into_iter().enumerate() {
                        assert!(p.get().unwrap() == vals[i], "client {k} value {i}");
                    }
                    assert!(c.kv_get(&kv, b"shared", None).unwrap().get().unwrap() == shared);
                }
                let s = c.rdma_stats().unwrap();
                assert_eq!(s.pool_lent, 0, "client {k}: buffers all back");
                assert!(s.sink_writes > 0);
            })
        })
        .collect();
    let t0 = Instant::now();
    while connected.load(std::sync::atomic::Ordering::SeqCst) < N {
        if threads.iter().any(|t| t.is_finished()) || t0.elapsed() > Duration::from_secs(60) {
            go.store(true, std::sync::atomic::Ordering::SeqCst);
            for t in threads {
                t.join().unwrap();
            }
            panic!("a client could not connect");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let busy = stats(rdma);
    go.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(busy.conns, N, "all clients connected at once");
    assert!(busy.pool_buffers >= N * obj::rpc::rdma::POOL_INIT);
    for t in threads {
        t.join().unwrap();
    }
    let idle = wait_conns(rdma, 0);
    assert_eq!(
        (
            idle.conns,
            idle.pool_buffers,
            idle.pool_bytes,
            idle.pool_lent
        ),
        (0, 0, 0, 0),
        "every pool gone with its connection: {idle:?}"
    );
    // per client and round: 70 k, 250 k, 1 MiB and the shared 700 k by WRITE
    // into the sink; the 2.5 MB kv_get (size open) is larger than its sink
    // (one pool buffer) and comes by READ
    assert!(idle.sink_writes >= (N * 3 * 4) as u64);
    eng.stop();
}
