//! Random operation sequences through the client and the engine (3 targets,
//! TCP loopback) against an in-memory model, compared after every step:
//! KV puts/removes/gets over several objects (spread over targets), paged
//! listings, snapshots read back at their epochs, and engine restarts.

use std::collections::BTreeMap;
use std::sync::Arc;

use obj::client::kv::KV_AKEY;
use obj::client::{Client, ContHandle, Kv};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::types::{Anchor, Epoch, Iod, ObjClass, ObjType, ObjectId};
use rand::{Rng, SeedableRng};

type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

fn start(dir: &std::path::Path) -> Engine {
    let cfg = EngineConfig {
        listen: "127.0.0.12:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        targets: 3,
        rdma_listen: None,
        aggregation: Default::default(),
    };
    Engine::start(&cfg, Arc::new(VosBackend::default())).unwrap()
}

fn open(c: &Client) -> (ContHandle, Vec<Kv>) {
    let poh = c.pool_connect("m", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let kvs = (0..6)
        .map(|i| {
            let oid = ObjectId::generate(0, 1000 + i, ObjType::KvHashed, ObjClass::S1).unwrap();
            c.kv_open(&coh, oid, None).unwrap().get().unwrap()
        })
        .collect();
    (coh, kvs)
}

/// Everything visible in object `o` at `epoch` (None = latest), listed in
/// pages of 3, with values.
fn dump(c: &Client, kv: &Kv, epoch: Option<Epoch>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut a = Anchor::default();
    let mut keys = Vec::new();
    while !a.is_eof() {
        let (ks, na) = c
            .obj_list_dkey(&kv.oh, epoch, &a, 3, None)
            .unwrap()
            .get()
            .unwrap();
        assert!(ks.len() <= 3);
        keys.extend(ks);
        a = na;
    }
    keys.into_iter()
        .map(|k| {
            let f = c
                .obj_fetch(
                    &kv.oh,
                    epoch,
                    &k,
                    &[Iod::single(KV_AKEY, 0)],
                    Vec::new(),
                    None,
                )
                .unwrap()
                .get()
                .unwrap();
            (k.0, f.sgls[0].concat())
        })
        .collect()
}

fn expect(m: &Model, o: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter()
        .filter(|((oo, _), _)| *oo == o)
        .map(|((_, k), v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn random_kv_ops_snapshots_and_restarts_match_the_model() {
    let seed: u64 = std::env::var("OBJ_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut eng = start(dir.path());
    let mut c = Client::connect(&eng.addr().to_string()).unwrap();
    c.pool_create("m", 96 << 20, None).unwrap().get().unwrap();
    let poh = c.pool_connect("m", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    let (mut coh, mut kvs) = open(&c);
    let mut model: Model = BTreeMap::new();
    let mut snaps: Vec<(Epoch, Model)> = Vec::new();
    for step in 0..400 {
        let o = rng.gen_range(0..kvs.len());
        let key = format!("k{:02}", rng.gen_range(0..24)).into_bytes();
        match rng.gen_range(0..100) {
            0..=44 => {
                let len = if rng.gen_bool(0.2) {
                    rng.gen_range(4097..20_000)
                } else {
                    rng.gen_range(1..64)
                };
                let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                c.kv_put(&kvs[o], &key, &v, None).unwrap().get().unwrap();
                model.insert((o, key), v);
            }
            45..=64 => {
                c.kv_remove(&kvs[o], &key, None).unwrap().get().unwrap();
                model.remove(&(o, key));
            }
            65..=84 => {
                let got = c.kv_get(&kvs[o], &key, None).unwrap().get().ok();
                assert_eq!(
                    got.as_ref(),
                    model.get(&(o, key.clone())),
                    "step {step}: get"
                );
            }
            85..=91 => {
                let e = c.cont_create_snap(&coh, None).unwrap().get().unwrap();
                snaps.push((e, model.clone()));
            }
            92..=97 if !snaps.is_empty() => {
                let (e, m) = &snaps[rng.gen_range(0..snaps.len())];
                assert_eq!(
                    dump(&c, &kvs[o], Some(*e)),
                    expect(m, o),
                    "step {step}: snapshot {e:?}"
                );
            }
            92..=97 => {}
            _ => {
                // restart the engine: everything must come back
                c.cont_close(&coh, None).unwrap().get().unwrap();
                drop(c);
                eng.stop();
                eng = start(dir.path());
                c = Client::connect(&eng.addr().to_string()).unwrap();
                (coh, kvs) = open(&c);
                let listed = c.cont_list_snap(&coh, None).unwrap().get().unwrap();
                assert_eq!(listed, snaps.iter().map(|s| s.0).collect::<Vec<_>>());
            }
        }
        assert_eq!(
            dump(&c, &kvs[o], None),
            expect(&model, o),
            "step {step} (seed {seed})"
        );
    }
    for (o, kv) in kvs.iter().enumerate() {
        assert_eq!(dump(&c, kv, None), expect(&model, o));
    }
}
