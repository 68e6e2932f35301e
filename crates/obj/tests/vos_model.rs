//! Model-based test of the versioned store: random sequences of updates (single
//! values, partial array overwrites, writes into the past), punches at every
//! level, snapshots, aggregation, listing with anchors, commits and reopens,
//! against a plain in-memory model that keeps every version and answers reads by
//! definition. After every step the store and the model are compared at every
//! epoch whose reads are guaranteed (latest, each snapshot, the aggregation
//! boundary and a few above it), and the store's space map is checked.

use std::collections::BTreeSet;
use std::sync::Arc;

use obj::types::*;
use obj::vos::{Vos, VosConfig};
use proptest::prelude::*;

const CONT: Uuid = Uuid::from_u128(0x1234);
const DKEYS: [&[u8]; 3] = [b"d0", b"d\x001", b"e"];
/// akey name, kind: "s" single, "x" array of 1-byte records, "y" of 3-byte records.
const AKEYS: [(&[u8], Option<u64>); 3] = [(b"s", None), (b"x", Some(1)), (b"y", Some(3))];
const SPAN: u64 = 48;

fn oid(i: u8) -> ObjectId {
    ObjectId::generate(u64::from(i), 7, ObjType::MultiHashed, ObjClass::S1).unwrap()
}

/// akey index, recxs `(idx, nr)`, fill seed, single-value length.
type IodSpec = (usize, Vec<(u64, u64)>, u8, usize);
/// Per record index: the newest version and its bytes.
type Cell = Option<((u64, u64), Vec<u8>)>;

#[derive(Debug, Clone)]
enum Op {
    Update {
        o: u8,
        d: usize,
        back: u64,
        iods: Vec<IodSpec>,
    },
    PunchObj {
        o: u8,
        back: u64,
    },
    PunchDkey {
        o: u8,
        d: usize,
        back: u64,
    },
    PunchAkey {
        o: u8,
        d: usize,
        a: usize,
        back: u64,
    },
    Snap {
        back: u64,
    },
    SnapDestroy {
        pick: usize,
    },
    Aggregate {
        back: u64,
    },
    Commit,
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let recx = (0..SPAN - 1, 1u64..16).prop_map(|(i, n)| (i, n.min(SPAN - i)));
    let iod = (
        0usize..3,
        proptest::collection::vec(recx, 1..3),
        any::<u8>(),
        prop_oneof![1usize..40, 60usize..200],
    );
    prop_oneof![
        8 => (0u8..2, 0usize..3, 0u64..4, proptest::collection::vec(iod, 1..3))
            .prop_map(|(o, d, back, iods)| Op::Update { o, d, back, iods }),
        1 => (0u8..2, 0u64..4).prop_map(|(o, back)| Op::PunchObj { o, back }),
        1 => (0u8..2, 0usize..3, 0u64..4).prop_map(|(o, d, back)| Op::PunchDkey { o, d, back }),
        2 => (0u8..2, 0usize..3, 0usize..3, 0u64..4)
            .prop_map(|(o, d, a, back)| Op::PunchAkey { o, d, a, back }),
        1 => (0u64..3).prop_map(|back| Op::Snap { back }),
        1 => (0usize..8).prop_map(|pick| Op::SnapDestroy { pick }),
        1 => (0u64..6).prop_map(|back| Op::Aggregate { back }),
        1 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone)]
enum Kind {
    ObjPunch,
    DkeyPunch(usize),
    AkeyPunch(usize, usize),
    Sv(usize, usize, Vec<u8>),
    Ext(usize, usize, u64, Vec<u8>), // dkey, akey, idx, records (rec_size fixed per akey)
}

#[derive(Debug, Clone)]
struct Rec {
    o: u8,
    ver: (u64, u64),
    kind: Kind,
}

#[derive(Default)]
struct Model {
    recs: Vec<Rec>,
    seq: u64,
    snaps: BTreeSet<u64>,
    hwm: u64,
}

impl Model {
    fn push(&mut self, o: u8, epoch: u64, kind: Kind) {
        self.seq += 1;
        self.recs.push(Rec {
            o,
            ver: (epoch, self.seq),
            kind,
        });
    }
    fn floor(&self, o: u8, d: usize, a: usize, e: u64) -> Option<(u64, u64)> {
        self.recs
            .iter()
            .filter(|r| r.o == o && r.ver.0 <= e)
            .filter(|r| match r.kind {
                Kind::ObjPunch => true,
                Kind::DkeyPunch(rd) => rd == d,
                Kind::AkeyPunch(rd, ra) => rd == d && ra == a,
                _ => false,
            })
            .map(|r| r.ver)
            .max()
    }
    fn sv(&self, o: u8, d: usize, a: usize, e: u64) -> Option<Vec<u8>> {
        let f = self.floor(o, d, a, e);
        self.recs
            .iter()
            .filter(|r| r.o == o && r.ver.0 <= e && Some(r.ver) > f)
            .filter_map(|r| match &r.kind {
                Kind::Sv(rd, ra, v) if *rd == d && *ra == a => Some((r.ver, v.clone())),
                _ => None,
            })
            .max_by_key(|x| x.0)
            .map(|x| x.1)
    }
    /// Per record index: the newest visible extent's bytes for it.
    fn array(&self, o: u8, d: usize, a: usize, e: u64, rs: u64) -> Vec<Option<Vec<u8>>> {
        let f = self.floor(o, d, a, e);
        let mut best: Vec<Cell> = vec![None; SPAN as usize];
        for r in self
            .recs
            .iter()
            .filter(|r| r.o == o && r.ver.0 <= e && Some(r.ver) > f)
        {
            if let Kind::Ext(rd, ra, idx, data) = &r.kind {
                if *rd != d || *ra != a {
                    continue;
                }
                let nr = data.len() as u64 / rs;
                for i in *idx..idx + nr {
                    let slot = &mut best[i as usize];
                    if slot.as_ref().is_none_or(|b| b.0 < r.ver) {
                        let off = ((i - idx) * rs) as usize;
                        *slot = Some((r.ver, data[off..off + rs as usize].to_vec()));
                    }
                }
            }
        }
        best.into_iter().map(|b| b.map(|x| x.1)).collect()
    }
    fn akey_visible(&self, o: u8, d: usize, a: usize, e: u64) -> bool {
        match AKEYS[a].1 {
            None => self.sv(o, d, a, e).is_some(),
            Some(rs) => self.array(o, d, a, e, rs).iter().any(|x| x.is_some()),
        }
    }
    /// Changes must be above the aggregated epoch and the newest snapshot.
    fn write_floor(&self) -> u64 {
        self.hwm
            .max(self.snaps.iter().next_back().copied().unwrap_or(0))
    }
    fn legal(&self, e: u64) -> bool {
        e >= self.hwm || self.snaps.contains(&e)
    }
}

fn runs(cells: &[Option<Vec<u8>>]) -> Vec<Recx> {
    let mut out: Vec<Recx> = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        if c.is_some() {
            match out.last_mut() {
                Some(l) if l.end() == i as u64 => l.nr += 1,
                _ => out.push(Recx {
                    idx: i as u64,
                    nr: 1,
                }),
            }
        }
    }
    out
}

struct Harness {
    dir: tempfile::TempDir,
    bdev: Arc<dyn bdev::BlockDevice>,
    vos: Option<Vos>,
    cfg: VosConfig,
}

impl Harness {
    fn vos(&mut self) -> &mut Vos {
        self.vos.as_mut().unwrap()
    }
    fn reopen(&mut self) {
        self.vos().commit().unwrap();
        self.vos = None;
        self.vos = Some(
            Vos::open(
                self.dir.path().join("idx"),
                self.bdev.clone(),
                self.cfg.clone(),
            )
            .unwrap(),
        );
    }
}

fn compare(h: &mut Harness, m: &Model, clock: u64, limit: usize) -> Result<(), TestCaseError> {
    let mut epochs: BTreeSet<u64> = m.snaps.clone();
    epochs.insert(u64::MAX);
    epochs.insert(clock);
    if m.hwm > 0 {
        epochs.insert(m.hwm);
    }
    for back in 1..4 {
        epochs.insert(clock.saturating_sub(back).max(1));
    }
    let vos = h.vos();
    for &e in epochs.iter().filter(|&&e| m.legal(e)) {
        let ep = Epoch(e);
        // objects
        let mut anchor = Anchor::default();
        let mut objs = Vec::new();
        while !anchor.is_eof() {
            objs.extend(vos.list_obj(CONT, ep, &mut anchor, limit).unwrap());
        }
        let want_objs: Vec<ObjectId> = (0..2u8)
            .filter(|&o| (0..3).any(|d| (0..3).any(|a| m.akey_visible(o, d, a, e))))
            .map(oid)
            .collect();
        prop_assert_eq!(objs, want_objs, "list_obj at {}", e);
        for o in 0..2u8 {
            let mut anchor = Anchor::default();
            let mut got = Vec::new();
            while !anchor.is_eof() {
                let page = vos.list_dkey(CONT, oid(o), ep, &mut anchor, limit).unwrap();
                prop_assert!(page.len() <= limit);
                got.extend(page);
            }
            let mut want: Vec<DKey> = (0..3)
                .filter(|&d| (0..3).any(|a| m.akey_visible(o, d, a, e)))
                .map(|d| DKey(DKEYS[d].to_vec()))
                .collect();
            want.sort();
            prop_assert_eq!(&got, &want, "list_dkey o{} at {}", o, e);
            prop_assert_eq!(
                vos.query_max_dkey(CONT, oid(o), ep).unwrap(),
                want.last().cloned()
            );
            for (d, dkb) in DKEYS.iter().enumerate() {
                let dk = DKey(dkb.to_vec());
                let mut anchor = Anchor::default();
                let mut got = Vec::new();
                while !anchor.is_eof() {
                    got.extend(
                        vos.list_akey(CONT, oid(o), ep, &dk, &mut anchor, limit)
                            .unwrap(),
                    );
                }
                let want: Vec<AKey> = (0..3)
                    .filter(|&a| m.akey_visible(o, d, a, e))
                    .map(|a| AKey(AKEYS[a].0.to_vec()))
                    .collect();
                prop_assert_eq!(got, want, "list_akey o{} d{} at {}", o, d, e);
                // all akeys in one fetch
                let iods: Vec<Iod> = AKEYS
                    .iter()
                    .map(|(a, k)| match k {
                        None => Iod::single(&a[..], 0),
                        Some(rs) => Iod::array(
                            &a[..],
                            *rs,
                            vec![
                                Recx { idx: 0, nr: 20 },
                                Recx {
                                    idx: 20,
                                    nr: SPAN - 20,
                                },
                            ],
                        ),
                    })
                    .collect();
                let mut sgls: Vec<SgList> = AKEYS
                    .iter()
                    .map(|(_, k)| match k {
                        None => SgList {
                            iovs: vec![vec![0xee; 100], vec![0xee; 200]],
                        },
                        Some(rs) => SgList {
                            iovs: vec![vec![0xee; 7], vec![0xee; (SPAN * rs) as usize - 7]],
                        },
                    })
                    .collect();
                let out = vos.fetch(CONT, oid(o), ep, &dk, &iods, &mut sgls).unwrap();
                for (a, (_, kind)) in AKEYS.iter().enumerate() {
                    match kind {
                        None => {
                            let want = m.sv(o, d, a, e);
                            prop_assert_eq!(
                                out.sizes[a],
                                want.as_ref().map_or(0, |v| v.len() as u64)
                            );
                            if let Some(v) = &want {
                                prop_assert_eq!(&sgls[a].concat()[..v.len()], &v[..]);
                            }
                            // the server's one-pass fetch, size left open
                            let (fo, bufs) = vos
                                .fetch_owned(
                                    CONT,
                                    oid(o),
                                    ep,
                                    &dk,
                                    &[Iod::single(AKEYS[a].0, 0)],
                                    u64::MAX,
                                )
                                .unwrap();
                            prop_assert_eq!(
                                fo.sizes[0],
                                want.as_ref().map_or(0, |v| v.len() as u64)
                            );
                            prop_assert_eq!(&bufs[0], &want.unwrap_or_default());
                        }
                        Some(rs) => {
                            let cells = m.array(o, d, a, e, *rs);
                            let any = cells.iter().any(|c| c.is_some());
                            prop_assert_eq!(out.sizes[a], if any { *rs } else { 0 });
                            // the record size is in the iod: all holes read as zeroes
                            {
                                let want: Vec<u8> = cells
                                    .iter()
                                    .flat_map(|c| {
                                        c.clone().unwrap_or_else(|| vec![0; *rs as usize])
                                    })
                                    .collect();
                                prop_assert_eq!(
                                    sgls[a].concat(),
                                    want,
                                    "array o{} d{} a{} at {}",
                                    o,
                                    d,
                                    a,
                                    e
                                );
                            }
                            let ak = AKey(AKEYS[a].0.to_vec());
                            let mut anchor = Anchor::default();
                            let mut got = Vec::new();
                            while !anchor.is_eof() {
                                got.extend(
                                    vos.list_recx(CONT, oid(o), ep, &dk, &ak, &mut anchor, limit)
                                        .unwrap()
                                        .0,
                                );
                            }
                            let want = runs(&cells);
                            prop_assert_eq!(&got, &want, "list_recx o{} d{} a{} at {}", o, d, a, e);
                            // the server's one-pass fetch: the whole span with the
                            // record size left open, then each visible run alone
                            // (an extent read whole becomes the reply buffer)
                            let span = Iod::array(AKEYS[a].0, 0, vec![Recx { idx: 0, nr: SPAN }]);
                            let (fo, bufs) = vos
                                .fetch_owned(CONT, oid(o), ep, &dk, &[span], u64::MAX)
                                .unwrap();
                            let whole: Vec<u8> = if any {
                                cells
                                    .iter()
                                    .flat_map(|c| {
                                        c.clone().unwrap_or_else(|| vec![0; *rs as usize])
                                    })
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            prop_assert_eq!(fo.sizes[0], if any { *rs } else { 0 });
                            prop_assert_eq!(
                                &bufs[0],
                                &whole,
                                "fetch_owned span o{} d{} a{} at {}",
                                o,
                                d,
                                a,
                                e
                            );
                            for run in &want {
                                let iod = Iod::array(AKEYS[a].0, *rs, vec![*run]);
                                let (_, bufs) = vos
                                    .fetch_owned(CONT, oid(o), ep, &dk, &[iod], u64::MAX)
                                    .unwrap();
                                let lo = (run.idx * rs) as usize;
                                let hi = (run.end() * rs) as usize;
                                prop_assert_eq!(
                                    &bufs[0][..],
                                    &whole[lo..hi],
                                    "fetch_owned run {:?}",
                                    run
                                );
                            }
                            let too_big =
                                Iod::array(AKEYS[a].0, *rs, vec![Recx { idx: 0, nr: SPAN }]);
                            let r =
                                vos.fetch_owned(CONT, oid(o), ep, &dk, &[too_big], SPAN * rs - 1);
                            let too_large = matches!(r, Err(StoreError::TooLarge { .. }));
                            prop_assert!(too_large, "one byte over the limit: {:?}", r.map(|_| ()));
                            prop_assert_eq!(
                                vos.query_max_recx(CONT, oid(o), ep, &dk, &ak).unwrap(),
                                want.last().copied()
                            );
                        }
                    }
                }
            }
        }
    }
    let snaps: Vec<u64> = vos
        .snap_list(CONT)
        .unwrap()
        .iter()
        .map(|s| s.epoch.0)
        .collect();
    prop_assert_eq!(snaps, m.snaps.iter().copied().collect::<Vec<_>>());
    vos.check()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(())
}

fn run(ops: Vec<Op>, auto_commit: bool, limit: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let bdev: Arc<dyn bdev::BlockDevice> =
        Arc::new(bdev::malloc::MallocBdev::new("m", 2048, 512).unwrap());
    let cfg = VosConfig {
        inline_max: 32,
        auto_commit,
        ..VosConfig::default()
    };
    let vos = Vos::open(dir.path().join("idx"), bdev.clone(), cfg.clone()).unwrap();
    let mut h = Harness {
        dir,
        bdev,
        vos: Some(vos),
        cfg,
    };
    h.vos().cont_create(CONT).unwrap();
    let mut m = Model::default();
    let mut clock = 10u64;
    let mut seed = 1u8;
    for op in ops {
        clock += 1;
        let ep = |back: u64| clock - back;
        let vos = h.vos.as_mut().unwrap();
        match op.clone() {
            Op::Update { o, d, back, iods } => {
                let e = ep(back);
                let mut ios = Vec::new();
                let mut sgls = Vec::new();
                let mut recs = Vec::new();
                for (a, recxs, fill, slen) in iods {
                    seed = seed.wrapping_add(fill).wrapping_add(1);
                    let (name, kind) = AKEYS[a];
                    match kind {
                        None => {
                            let v: Vec<u8> =
                                (0..slen).map(|i| seed.wrapping_add(i as u8)).collect();
                            ios.push(Iod::single(name, v.len() as u64));
                            sgls.push(SgList::one(v.clone()));
                            recs.push(Kind::Sv(d, a, v));
                        }
                        Some(rs) => {
                            let rx: Vec<Recx> =
                                recxs.iter().map(|&(idx, nr)| Recx { idx, nr }).collect();
                            let mut all = Vec::new();
                            for r in &rx {
                                let v: Vec<u8> = (0..r.nr * rs)
                                    .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8) | 1)
                                    .collect();
                                recs.push(Kind::Ext(d, a, r.idx, v.clone()));
                                all.extend(v);
                            }
                            // split the data over two iovs to exercise gathering
                            let cut = all.len() / 3;
                            sgls.push(SgList {
                                iovs: vec![all[..cut].to_vec(), all[cut..].to_vec()],
                            });
                            ios.push(Iod::array(name, rs, rx));
                        }
                    }
                }
                let r = vos.update(
                    CONT,
                    oid(o),
                    Epoch(e),
                    &DKey(DKEYS[d].to_vec()),
                    &ios,
                    &sgls,
                );
                if e <= m.write_floor() {
                    prop_assert!(matches!(r, Err(StoreError::BadEpoch(..))), "{:?}", r);
                } else {
                    r.unwrap();
                    for k in recs {
                        m.push(o, e, k);
                    }
                }
            }
            Op::PunchObj { o, back } => {
                let e = ep(back);
                let r = vos.punch_obj(CONT, oid(o), Epoch(e));
                if e <= m.write_floor() {
                    prop_assert!(r.is_err());
                } else {
                    r.unwrap();
                    m.push(o, e, Kind::ObjPunch);
                }
            }
            Op::PunchDkey { o, d, back } => {
                let e = ep(back);
                let r = vos.punch_dkeys(CONT, oid(o), Epoch(e), &[DKey(DKEYS[d].to_vec())]);
                if e <= m.write_floor() {
                    prop_assert!(r.is_err());
                } else {
                    r.unwrap();
                    m.push(o, e, Kind::DkeyPunch(d));
                }
            }
            Op::PunchAkey { o, d, a, back } => {
                let e = ep(back);
                let r = vos.punch_akeys(
                    CONT,
                    oid(o),
                    Epoch(e),
                    &DKey(DKEYS[d].to_vec()),
                    &[AKey(AKEYS[a].0.to_vec())],
                );
                if e <= m.write_floor() {
                    prop_assert!(r.is_err());
                } else {
                    r.unwrap();
                    m.push(o, e, Kind::AkeyPunch(d, a));
                }
            }
            Op::Snap { back } => {
                let e = ep(back);
                let r = vos.snap_create(CONT, Epoch(e), Some("s"));
                if e <= m.hwm {
                    prop_assert!(r.is_err());
                } else {
                    r.unwrap();
                    m.snaps.insert(e);
                }
            }
            Op::SnapDestroy { pick } => {
                if let Some(&e) = m.snaps.iter().nth(pick) {
                    vos.snap_destroy(CONT, Epoch(e)).unwrap();
                    m.snaps.remove(&e);
                } else {
                    prop_assert!(matches!(
                        vos.snap_destroy(CONT, Epoch(3)),
                        Err(StoreError::NoSnapshot(_))
                    ));
                }
            }
            Op::Aggregate { back } => {
                let e = ep(back);
                vos.aggregate(CONT, Epoch(e)).unwrap();
                m.hwm = m.hwm.max(e);
            }
            Op::Commit => vos.commit().unwrap(),
            Op::Reopen => h.reopen(),
        }
        compare(&mut h, &m, clock, limit)?;
    }
    // everything aggregated away but the visible state: space shrinks to it
    let before = h.vos().space().unwrap();
    clock += 1;
    m.snaps.clear();
    let snaps: Vec<Snapshot> = h.vos().snap_list(CONT).unwrap();
    for s in snaps {
        h.vos().snap_destroy(CONT, s.epoch).unwrap();
    }
    h.vos().aggregate(CONT, Epoch(clock)).unwrap();
    m.hwm = clock;
    h.reopen();
    compare(&mut h, &m, clock, limit)?;
    let after = h.vos().space().unwrap();
    prop_assert!(after.bdev_free >= before.bdev_free);
    prop_assert!(after.inline_bytes <= before.inline_bytes);
    // destroying the container gives every block back
    h.vos().cont_destroy(CONT).unwrap();
    h.reopen();
    let s = h.vos().space().unwrap();
    prop_assert_eq!(s.bdev_free, s.bdev_total);
    prop_assert_eq!(s.inline_bytes, 0);
    h.vos().check().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_model(
        ops in proptest::collection::vec(op_strategy(), 1..40),
        auto_commit in any::<bool>(),
        limit in 1usize..4,
    ) {
        run(ops, auto_commit, limit)?;
    }
}

/// Fixed scenario with known answers (a readable anchor for the model test).
#[test]
fn partial_overwrite_snapshot_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let bdev: Arc<dyn bdev::BlockDevice> =
        Arc::new(bdev::malloc::MallocBdev::new("m", 1024, 512).unwrap());
    let cfg = VosConfig {
        inline_max: 8,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("idx"), bdev.clone(), cfg).unwrap();
    v.cont_create(CONT).unwrap();
    let dk = DKey::from("d");
    let o = oid(0);
    let w = |v: &mut Vos, e: u64, idx: u64, data: &[u8]| {
        v.update(
            CONT,
            o,
            Epoch(e),
            &dk,
            &[Iod::array(
                "a",
                1,
                vec![Recx {
                    idx,
                    nr: data.len() as u64,
                }],
            )],
            &[SgList::one(data.to_vec())],
        )
        .unwrap()
    };
    let r = |v: &mut Vos, e: u64| {
        let mut s = [SgList::one(vec![9; 12])];
        v.fetch(
            CONT,
            o,
            Epoch(e),
            &dk,
            &[Iod::array("a", 1, vec![Recx { idx: 0, nr: 12 }])],
            &mut s,
        )
        .unwrap();
        s[0].concat()
    };
    w(&mut v, 10, 0, b"aaaaaaaaaa"); // 10 bytes: on the bdev
    w(&mut v, 20, 2, b"bb");
    v.snap_create(CONT, Epoch(20), None).unwrap();
    w(&mut v, 30, 0, b"cccccccccc"); // hides all of epoch 10 and 20
    assert_eq!(r(&mut v, 15), b"aaaaaaaaaa\0\0");
    assert_eq!(r(&mut v, 25), b"aabbaaaaaa\0\0");
    assert_eq!(r(&mut v, u64::MAX), b"cccccccccc\0\0");
    let used = |v: &mut Vos| {
        let s = v.space().unwrap();
        s.bdev_total - s.bdev_free
    };
    assert_eq!(used(&mut v), 2 * 512);
    // the snapshot at 20 keeps epoch 10's extent (partly visible at 20)
    let st = v.aggregate(CONT, Epoch(40)).unwrap();
    assert_eq!(st.versions_removed, 0);
    assert_eq!(r(&mut v, 20), b"aabbaaaaaa\0\0");
    v.snap_destroy(CONT, Epoch(20)).unwrap();
    let st = v.aggregate(CONT, Epoch(41)).unwrap();
    assert_eq!(st.versions_removed, 2);
    assert_eq!(st.bdev_bytes_freed, 512);
    assert_eq!(used(&mut v), 512);
    assert_eq!(r(&mut v, u64::MAX), b"cccccccccc\0\0");
    assert!(matches!(
        v.update(
            CONT,
            o,
            Epoch(41),
            &dk,
            &[Iod::single("s", 1)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::BadEpoch(..))
    ));
    v.check().unwrap();
}
