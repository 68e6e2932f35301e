//! Listing over several engines (`DistClient::list_dkeys` / `list_akeys`,
//! what `dpustack obj list --system` and `kv list --system` use): three
//! engines in this process on 127.0.0.161–163; an SX object whose dkeys are
//! spread over every engine listed whole, in order, without duplicates,
//! through anchors with small pages; a key an engine holds for another group
//! (a leftover copy) not listed; an RP_2 KV object listed whole with an
//! engine stopped; akeys of one dkey by pages; a read at an older epoch.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use obj::client::Client;
use obj::dist::DistClient;
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::membership::DetectorConfig;
use obj::placement::{group_of, layout};
use obj::types::{Anchor, DKey, Iod, ObjClass, ObjType, ObjectId, SgList};

fn start(dir: &std::path::Path, ip: &str) -> Engine {
    let cfg = EngineConfig {
        listen: format!("{ip}:0").parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets: 1,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn list_all(dc: &mut DistClient, oid: ObjectId, page: u32) -> (Vec<Vec<u8>>, usize) {
    let mut a = Anchor::default();
    let (mut out, mut calls) = (Vec::new(), 0);
    while !a.is_eof() {
        let (ks, na) = dc.list_dkeys(oid, None, &a, page).unwrap();
        assert!(ks.len() <= page as usize, "page of {} > {page}", ks.len());
        out.extend(ks);
        a = na;
        calls += 1;
        assert!(calls < 10_000, "listing does not end");
    }
    (out, calls)
}

#[test]
fn listing_merges_groups_through_anchors() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut engines: Vec<Option<Engine>> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| Some(start(d.path(), &format!("127.0.0.{}", 161 + i))))
        .collect();
    let addrs: Vec<String> = engines
        .iter()
        .map(|e| e.as_ref().unwrap().addr().to_string())
        .collect();
    DistClient::create(&addrs, "dp", 64 << 20, "dc").unwrap();
    let mut dc = DistClient::connect(
        &addrs,
        "dp",
        "dc",
        Duration::from_secs(2),
        DetectorConfig::default(),
    )
    .unwrap();

    // SX: one group per engine; 120 dkeys spread over all three
    let sx = ObjectId::generate(0, 1, ObjType::MultiHashed, ObjClass::SX).unwrap();
    let l = layout(sx, dc.map()).unwrap();
    assert_eq!(l.groups.len(), 3);
    let mut want = BTreeSet::new();
    for i in 0..120u32 {
        let k = format!("d{i:03}").into_bytes();
        dc.update(sx, &k, &[Iod::single("a", 2)], vec![b"v1".to_vec()])
            .unwrap();
        want.insert(k);
    }
    // no engine holds them all: the listing has to merge
    let per_group: Vec<usize> = (0..3)
        .map(|g| want.iter().filter(|k| group_of(k, 3) == g).count())
        .collect();
    assert!(per_group.iter().all(|&n| n > 0 && n < 120), "{per_group:?}");
    // leftover copies: keys of groups 0 and 2 written straight to the engine
    // of group 1 (as a spare keeps them after reintegration); not listed.
    // 20 of them sort before every real key: that engine's first pages are
    // leftovers only, so the merge must not run past them (else it skips
    // the engine's real keys between them and the others' last keys)
    let strays: Vec<Vec<u8>> = (0..)
        .map(|i| format!("c{i:03}").into_bytes())
        .filter(|k| group_of(k, 3) != 1)
        .take(20)
        .chain(std::iter::once(b"stray".to_vec()))
        .collect();
    let wrong = l.groups[1][0] as usize;
    assert_ne!(wrong, l.groups[0][0] as usize);
    {
        let c = Client::connect(&addrs[wrong]).unwrap();
        let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
        let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
        let oh = c.obj_open(&coh, sx, None).unwrap().get().unwrap();
        for k in &strays {
            c.obj_update(
                &oh,
                &DKey(k.clone()),
                &[Iod::single("a", 1)],
                &[SgList::one(b"x".to_vec())],
                None,
            )
            .unwrap()
            .get()
            .unwrap();
        }
    }
    for page in [1u32, 7, 256] {
        let (got, calls) = list_all(&mut dc, sx, page);
        let sorted: Vec<Vec<u8>> = want.iter().cloned().collect();
        assert_eq!(got, sorted, "page {page}: listing differs");
        if page == 7 {
            assert!(calls >= 120 / 7, "{calls} calls for 120 keys by 7");
        }
    }

    // akeys of one dkey, by pages of 3
    let iods: Vec<Iod> = (0..10)
        .map(|i| Iod::single(format!("ak{i}").as_str(), 1))
        .collect();
    dc.update(sx, b"many", &iods, (0..10).map(|_| b"z".to_vec()).collect())
        .unwrap();
    let mut a = Anchor::default();
    let mut akeys = Vec::new();
    while !a.is_eof() {
        let (ks, na) = dc.list_akeys(sx, None, b"many", &a, 3).unwrap();
        assert!(ks.len() <= 3);
        akeys.extend(ks);
        a = na;
    }
    let want_a: Vec<Vec<u8>> = (0..10).map(|i| format!("ak{i}").into_bytes()).collect();
    assert_eq!(akeys, want_a);

    // a read at an older epoch: the value of then (one epoch on every replica)
    let rp2 = ObjectId::generate(
        0,
        2,
        ObjType::MultiHashed,
        ObjClass::parse("RP_2G1").unwrap(),
    )
    .unwrap();
    let e1 = dc
        .update(rp2, b"k", &[Iod::single("a", 3)], vec![b"old".to_vec()])
        .unwrap();
    dc.update(rp2, b"k", &[Iod::single("a", 3)], vec![b"new".to_vec()])
        .unwrap();
    let at = |dc: &mut DistClient, e| {
        dc.fetch_at(rp2, e, b"k", &[Iod::single("a", 0)])
            .unwrap()
            .remove(0)
    };
    assert_eq!(at(&mut dc, Some(e1)), b"old");
    assert_eq!(at(&mut dc, None), b"new");

    // an RP_2 KV object, 40 keys, listed whole with one replica's engine gone
    let kv =
        ObjectId::generate(0, 3, ObjType::KvHashed, ObjClass::parse("RP_2G1").unwrap()).unwrap();
    let mut keys: Vec<Vec<u8>> = (0..40).map(|i| format!("k{i:02}").into_bytes()).collect();
    for k in &keys {
        dc.kv_put(kv, k, b"val").unwrap();
    }
    keys.sort();
    assert_eq!(list_all(&mut dc, kv, 6).0, keys);
    let first = layout(kv, dc.map()).unwrap().groups[0][0] as usize;
    engines[first].take().unwrap().stop();
    assert_eq!(
        list_all(&mut dc, kv, 6).0,
        keys,
        "with rank {first} stopped"
    );
    assert!(!dc.map().target(first as u32).unwrap().state.is_serving());
    for e in engines.into_iter().flatten() {
        e.stop();
    }
}
