//! The engine over RPC over RDMA (soft RoCE on loopback addresses, RC QPs
//! through the RDMA CM): small messages by SEND/RECV, values larger than a
//! message slot by RDMA READ in both directions, events in flight, and the
//! same data seen by a TCP client.

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
