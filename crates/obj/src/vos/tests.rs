use std::sync::Arc;

use bdev::malloc::MallocBdev;
use bdev::{BdevIo, BlockDevice, IoBuf};

use super::*;
use crate::types::{ObjClass, ObjType, Uuid};

const C: Uuid = Uuid::from_u128(1);

fn oid() -> ObjectId {
    ObjectId::generate(0, 1, ObjType::MultiHashed, ObjClass::S1).unwrap()
}

fn setup(blocks: u64, auto_commit: bool) -> (tempfile::TempDir, Arc<dyn BlockDevice>, Vos) {
    let dir = tempfile::tempdir().unwrap();
    let bdev: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", blocks, 512).unwrap());
    let cfg = VosConfig {
        inline_max: 100,
        auto_commit,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg).unwrap();
    v.cont_create(C).unwrap();
    v.commit().unwrap();
    (dir, bdev, v)
}

fn put(v: &mut Vos, e: u64, k: &str, val: &[u8]) -> StoreResult<()> {
    v.update(
        C,
        oid(),
        Epoch(e),
        &DKey::from(k),
        &[Iod::single("a", val.len() as u64)],
        &[SgList::one(val.to_vec())],
    )
}

fn get(v: &mut Vos, e: u64, k: &str) -> Option<Vec<u8>> {
    let mut s = [SgList::one(vec![0; 4096])];
    let out = v
        .fetch(
            C,
            oid(),
            Epoch(e),
            &DKey::from(k),
            &[Iod::single("a", 0)],
            &mut s,
        )
        .unwrap();
    (out.sizes[0] > 0).then(|| s[0].iovs[0][..out.sizes[0] as usize].to_vec())
}

#[test]
fn group_commit_abort_and_reopen() {
    let (dir, bdev, mut v) = setup(256, false);
    let free0 = v.space().unwrap().bdev_free;
    put(&mut v, 5, "k1", &[1; 1000]).unwrap();
    put(&mut v, 5, "k2", &[2; 10]).unwrap();
    assert!(v.has_pending());
    // the batch reads its own writes
    assert_eq!(get(&mut v, 9, "k1").unwrap(), vec![1; 1000]);
    assert!(v.space().unwrap().bdev_free < free0);
    v.abort().unwrap();
    assert_eq!(get(&mut v, 9, "k1"), None);
    assert_eq!(v.space().unwrap().bdev_free, free0);
    put(&mut v, 6, "k1", &[3; 1000]).unwrap();
    v.commit().unwrap();
    drop(v);
    let cfg = VosConfig {
        inline_max: 100,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
    assert_eq!(get(&mut v, EPOCH_MAX.0, "k1").unwrap(), vec![3; 1000]);
    assert_eq!(v.max_epoch(), Epoch(6));
    assert_eq!(v.space().unwrap().bdev_free, free0 - 1024);
    assert_eq!(v.check().unwrap().used_blocks, 2);
    drop(v);
    // another geometry is refused
    let other: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", 512, 512).unwrap());
    assert!(matches!(
        Vos::open(dir.path().join("i"), other, cfg),
        Err(StoreError::InvalidArg(_))
    ));
}

#[test]
fn bdev_corruption_is_detected() {
    let (_dir, bdev, mut v) = setup(64, true);
    put(&mut v, 5, "k", &[7; 600]).unwrap();
    let mut ch = bdev.open_channel().unwrap();
    ch.submit(BdevIo::write(0, 1, vec![IoBuf::zeroed(512)], 0))
        .unwrap();
    let mut done = Vec::new();
    while ch.poll(&mut done) == 0 {}
    let mut s = [SgList::one(vec![0; 4096])];
    let r = v.fetch(
        C,
        oid(),
        EPOCH_MAX,
        &DKey::from("k"),
        &[Iod::single("a", 0)],
        &mut s,
    );
    assert!(matches!(r, Err(StoreError::Corrupt(_))), "{r:?}");
}

#[test]
fn out_of_space_leaks_nothing() {
    let (_dir, _bdev, mut v) = setup(16, true);
    let mut n = 0;
    let err = loop {
        match put(&mut v, 10 + n, &format!("k{n}"), &[n as u8; 1500]) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err}");
    assert_eq!(n, 5); // 16 blocks / 3 per value
                      // a two-value update that fits only half way changes nothing
    let r = v.update(
        C,
        oid(),
        Epoch(100),
        &DKey::from("two"),
        &[Iod::single("a", 600), Iod::single("b", 600)],
        &[SgList::one(vec![1; 600]), SgList::one(vec![2; 600])],
    );
    assert!(matches!(r, Err(StoreError::NoSpace { .. })));
    assert_eq!(get(&mut v, EPOCH_MAX.0, "two"), None);
    let rep = v.check().unwrap();
    assert_eq!((rep.used_blocks, rep.free_blocks), (15, 1));
    // aggregation after punches gives the space back
    v.punch_obj(C, oid(), Epoch(200)).unwrap();
    v.aggregate(C, Epoch(300)).unwrap();
    assert_eq!(v.check().unwrap().free_blocks, 16);
    assert_eq!(v.check().unwrap().records, 0);
}

#[test]
fn caller_errors() {
    let (_dir, _bdev, mut v) = setup(64, true);
    let d = DKey::from("d");
    let bad = ObjectId { hi: 0, lo: 1 };
    assert!(matches!(
        v.update(
            C,
            bad,
            Epoch(1),
            &d,
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::Oid(_))
    ));
    assert!(matches!(
        put(&mut v, 0, "d", b"x"),
        Err(StoreError::BadEpoch(..))
    ));
    assert!(matches!(
        put(&mut v, u64::MAX, "d", b"x"),
        Err(StoreError::BadEpoch(..))
    ));
    assert!(matches!(
        v.update(
            Uuid::from_u128(9),
            oid(),
            Epoch(1),
            &d,
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::NoContainer(_))
    ));
    assert!(matches!(
        v.update(
            C,
            oid(),
            Epoch(1),
            &d,
            &[Iod::single("a", 2)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::InvalidArg(_))
    ));
    assert!(matches!(
        v.update(
            C,
            oid(),
            Epoch(1),
            &DKey(vec![1; MAX_KEY_LEN + 1]),
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::TooLarge { .. })
    ));
    assert!(matches!(
        v.update(
            C,
            oid(),
            Epoch(1),
            &DKey::default(),
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])]
        ),
        Err(StoreError::InvalidArg(_))
    ));
    put(&mut v, 3, "d", &[5; 50]).unwrap();
    let mut small = [SgList::one(vec![0; 10])];
    assert!(matches!(
        v.fetch(C, oid(), EPOCH_MAX, &d, &[Iod::single("a", 0)], &mut small),
        Err(StoreError::BufferTooSmall { need: 50, have: 10 })
    ));
    // size query with an empty sgl
    let mut none = [SgList::default()];
    let out = v
        .fetch(C, oid(), EPOCH_MAX, &d, &[Iod::single("a", 0)], &mut none)
        .unwrap();
    assert_eq!(out.sizes, vec![50]);
    assert!(matches!(
        v.cont_create(C),
        Err(StoreError::ContainerExists(_))
    ));
    assert!(matches!(
        v.aggregate(C, EPOCH_MAX),
        Err(StoreError::BadEpoch(..))
    ));
    // nothing above changed the store
    assert_eq!(v.check().unwrap().records, 1);
}

#[test]
fn numeric_max_dkey_for_uint64_objects() {
    let (_dir, _bdev, mut v) = setup(64, true);
    let o = ObjectId::generate(0, 2, ObjType::DkeyUint64, ObjClass::S1).unwrap();
    for (e, k) in [(1u64, 3u64), (2, 256), (3, 255)] {
        v.update(
            C,
            o,
            Epoch(e),
            &DKey::from_u64(k),
            &[Iod::single("a", 1)],
            &[SgList::one(vec![1])],
        )
        .unwrap();
    }
    // bytewise, 255 (ff 00..) would beat 256 (00 01 ..); numerically 256 wins
    assert_eq!(
        v.query_max_dkey(C, o, EPOCH_MAX).unwrap(),
        Some(DKey::from_u64(256))
    );
    assert_eq!(
        v.query_max_dkey(C, o, Epoch(1)).unwrap(),
        Some(DKey::from_u64(3))
    );
}

fn setup_inject(auto_commit: bool) -> (tempfile::TempDir, Arc<bdev::inject::Injector>, Vos) {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", 256, 512).unwrap());
    let dev = bdev::inject::ErrorInjectBdev::new("inj", inner);
    let inj = dev.injector();
    let cfg = VosConfig {
        inline_max: 100,
        auto_commit,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("i"), Arc::new(dev), cfg).unwrap();
    v.cont_create(C).unwrap();
    v.commit().unwrap();
    (dir, inj, v)
}

fn rule(t: IoType) -> bdev::inject::Rule {
    bdev::inject::Rule {
        io_type: Some(t),
        offset_blocks: 0,
        num_blocks: u64::MAX,
        fault: bdev::inject::Fault::Fail(bdev::IoError::Os(5)),
        count: 1,
    }
}

#[test]
fn failed_flush_fails_the_batch_and_keeps_the_space_map() {
    let (_dir, inj, mut v) = setup_inject(false);
    put(&mut v, 5, "a", &[1; 700]).unwrap();
    put(&mut v, 6, "b", &[2; 10]).unwrap();
    inj.arm(rule(IoType::Flush));
    assert!(matches!(v.commit(), Err(StoreError::Bdev(_))));
    assert_eq!(get(&mut v, EPOCH_MAX.0, "a"), None);
    assert_eq!(get(&mut v, EPOCH_MAX.0, "b"), None);
    let rep = v.check().unwrap();
    assert_eq!((rep.records, rep.used_blocks, rep.free_blocks), (0, 0, 256));
    assert_eq!(v.max_epoch(), Epoch(0));
    // the next batch works
    put(&mut v, 7, "a", &[3; 700]).unwrap();
    v.commit().unwrap();
    assert_eq!(get(&mut v, EPOCH_MAX.0, "a").unwrap(), vec![3; 700]);
    assert_eq!(v.max_epoch(), Epoch(7));
}

#[test]
fn failed_bdev_write_fails_only_that_update() {
    let (_dir, inj, mut v) = setup_inject(false);
    put(&mut v, 5, "a", &[1; 700]).unwrap();
    inj.arm(rule(IoType::Write));
    assert!(matches!(
        put(&mut v, 6, "b", &[2; 700]),
        Err(StoreError::Bdev(_))
    ));
    put(&mut v, 7, "c", &[3; 700]).unwrap();
    v.commit().unwrap();
    assert_eq!(get(&mut v, EPOCH_MAX.0, "a").unwrap(), vec![1; 700]);
    assert_eq!(get(&mut v, EPOCH_MAX.0, "b"), None);
    assert_eq!(get(&mut v, EPOCH_MAX.0, "c").unwrap(), vec![3; 700]);
    assert_eq!(v.check().unwrap().used_blocks, 4);
    // a failed read is an error, not zeroes
    inj.arm(rule(IoType::Read));
    let mut s = [SgList::one(vec![0; 4096])];
    assert!(matches!(
        v.fetch(
            C,
            oid(),
            EPOCH_MAX,
            &DKey::from("a"),
            &[Iod::single("a", 0)],
            &mut s
        ),
        Err(StoreError::Bdev(_))
    ));
}

#[test]
fn snapshots_are_immutable() {
    let (_dir, _bdev, mut v) = setup(64, true);
    put(&mut v, 10, "k", b"old").unwrap();
    v.snap_create(C, Epoch(20), Some("s")).unwrap();
    // a change at or below the snapshot would alter what it shows
    assert!(matches!(
        put(&mut v, 15, "k", b"new"),
        Err(StoreError::BadEpoch(..))
    ));
    assert!(matches!(
        v.punch_obj(C, oid(), Epoch(20)),
        Err(StoreError::BadEpoch(..))
    ));
    put(&mut v, 21, "k", b"new").unwrap();
    assert_eq!(get(&mut v, 20, "k").unwrap(), b"old");
    assert_eq!(v.snap_list(C).unwrap()[0].name.as_deref(), Some("s"));
    // once the snapshot is gone, the past is open again (until aggregated)
    v.snap_destroy(C, Epoch(20)).unwrap();
    put(&mut v, 15, "k", b"mid").unwrap();
    assert_eq!(get(&mut v, 16, "k").unwrap(), b"mid");
    assert!(matches!(
        v.snap_destroy(C, Epoch(20)),
        Err(StoreError::NoSnapshot(_))
    ));
}

/// Reads skip the punch lookups only in containers that never held a punch:
/// the record of which ones did survives a restart, and a store from before
/// the record (no `punch_tracking`) treats every container as punched.
#[test]
fn punch_tracking_survives_restart_and_upgrade() {
    let (dir, bdev, mut v) = setup(256, false);
    let other = Uuid::from_u128(2);
    v.cont_create(other).unwrap();
    put(&mut v, 5, "k1", &[1; 10]).unwrap();
    put(&mut v, 5, "k2", &[2; 10]).unwrap();
    v.commit().unwrap();
    assert!(v.punched.is_empty());
    v.punch_dkeys(C, oid(), Epoch(7), &[DKey::from("k1")])
        .unwrap();
    // visible to reads of the same open batch
    assert_eq!(get(&mut v, 9, "k1"), None);
    assert_eq!(get(&mut v, 6, "k1").unwrap(), vec![1; 10]);
    v.commit().unwrap();
    assert!(v.punched.contains(C.as_bytes()) && !v.punched.contains(other.as_bytes()));
    drop(v);
    let cfg = VosConfig {
        inline_max: 100,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
    assert!(v.punched.contains(C.as_bytes()));
    assert_eq!(get(&mut v, 9, "k1"), None);
    assert_eq!(get(&mut v, 9, "k2").unwrap(), vec![2; 10]);
    drop(v);
    // a store written before the record: drop it by hand
    {
        let db = Database::create(dir.path().join("i")).unwrap();
        let t = db.begin_write().unwrap();
        t.delete_table(PUNCHED).unwrap();
        t.open_table(META)
            .unwrap()
            .remove("punch_tracking")
            .unwrap();
        t.commit().unwrap();
    }
    let mut v = Vos::open(dir.path().join("i"), bdev, cfg).unwrap();
    assert!(v.punched.contains(C.as_bytes()) && v.punched.contains(other.as_bytes()));
    assert_eq!(get(&mut v, 9, "k1"), None);
    assert_eq!(get(&mut v, 9, "k2").unwrap(), vec![2; 10]);
}

/// `fetch_owned` (the engine's one-pass fetch) against overlapping extents,
/// older epochs, open sizes and a punch: an extent read whole becomes the
/// reply buffer, anything else is assembled; both must read the same bytes.
#[test]
fn fetch_owned_whole_extents_overwrites_and_punch() {
    let (_d, _b, mut v) = setup(1024, true);
    let dk = DKey::from("d");
    let arr = |idx: u64, nr: u64, rs: u64| Iod::array("x", rs, vec![Recx { idx, nr }]);
    let owned = |v: &mut Vos, e: u64, iods: &[Iod]| {
        v.fetch_owned(C, oid(), Epoch(e), &dk, iods, u64::MAX)
            .unwrap()
    };
    // [0, 300) of 'a' on the bdev (above inline_max), then [10, 20) of 'b' inline
    v.update(
        C,
        oid(),
        Epoch(5),
        &dk,
        &[arr(0, 300, 1)],
        &[SgList::one(vec![b'a'; 300])],
    )
    .unwrap();
    v.update(
        C,
        oid(),
        Epoch(6),
        &dk,
        &[arr(10, 10, 1)],
        &[SgList::one(vec![b'b'; 10])],
    )
    .unwrap();
    put(&mut v, 6, "d", b"single").unwrap();
    let mut want = vec![b'a'; 300];
    want[10..20].fill(b'b');
    // the whole range: assembled from two extents
    let (o, b) = owned(&mut v, 7, &[arr(0, 300, 0)]);
    assert_eq!((o.sizes[0], &b[0]), (1, &want));
    // each extent read whole, and at the older epoch the first one alone
    assert_eq!(owned(&mut v, 7, &[arr(10, 10, 1)]).1[0], vec![b'b'; 10]);
    assert_eq!(owned(&mut v, 5, &[arr(0, 300, 1)]).1[0], vec![b'a'; 300]);
    // part of an extent, and a range reaching past the end (a hole)
    assert_eq!(
        owned(&mut v, 7, &[arr(5, 10, 1)]).1[0],
        want[5..15].to_vec()
    );
    let mut tail = vec![b'a'; 20];
    tail.extend_from_slice(&[0; 30]);
    assert_eq!(owned(&mut v, 7, &[arr(280, 50, 1)]).1[0], tail);
    // a single value and an array in one call, sizes open; a missing akey
    let (o, b) = owned(
        &mut v,
        7,
        &[Iod::single("a", 0), arr(0, 300, 0), Iod::single("none", 0)],
    );
    assert_eq!(o.sizes, vec![6, 1, 0]);
    assert_eq!(b, vec![b"single".to_vec(), want.clone(), Vec::new()]);
    // a single value larger than its stated size; the byte limit
    assert!(matches!(
        v.fetch_owned(C, oid(), Epoch(7), &dk, &[Iod::single("a", 3)], u64::MAX),
        Err(StoreError::BufferTooSmall { need: 6, have: 3 })
    ));
    assert!(matches!(
        v.fetch_owned(C, oid(), Epoch(7), &dk, &[arr(0, 300, 1)], 299),
        Err(StoreError::TooLarge {
            size: 300,
            limit: 299
        })
    ));
    // after a dkey punch: nothing visible; with a record size, zeroes
    v.punch_dkeys(C, oid(), Epoch(8), std::slice::from_ref(&dk))
        .unwrap();
    let (o, b) = owned(&mut v, 9, &[arr(0, 300, 0), Iod::single("a", 0)]);
    assert_eq!(
        (o.sizes.clone(), b),
        (vec![0, 0], vec![Vec::new(), Vec::new()])
    );
    assert_eq!(owned(&mut v, 9, &[arr(0, 300, 1)]).1[0], vec![0; 300]);
    // the same answers from the two-pass fetch the engine used before
    let mut s = [SgList::one(vec![0xee; 300])];
    v.fetch(C, oid(), Epoch(7), &dk, &[arr(0, 300, 1)], &mut s)
        .unwrap();
    assert_eq!(s[0].concat(), want);
}

/// The latest-value cache in front of the index never serves a version an
/// update, a punch or a rollback has replaced, nor one a read at an older
/// epoch must not see.
#[test]
fn latest_value_cache_follows_updates_punches_and_rollback() {
    let (_d, _b, mut v) = setup(1024, false);
    let get_latest = |v: &mut Vos, k: &str| -> Option<Vec<u8>> {
        let (o, mut b) = v
            .fetch_owned(
                C,
                oid(),
                EPOCH_MAX,
                &DKey::from(k),
                &[Iod::single("a", 0)],
                u64::MAX,
            )
            .unwrap();
        (o.sizes[0] > 0).then(|| b.remove(0))
    };
    let get_at = |v: &mut Vos, e: u64, k: &str| -> Option<Vec<u8>> {
        let (o, mut b) = v
            .fetch_owned(
                C,
                oid(),
                Epoch(e),
                &DKey::from(k),
                &[Iod::single("a", 0)],
                u64::MAX,
            )
            .unwrap();
        (o.sizes[0] > 0).then(|| b.remove(0))
    };
    put(&mut v, 5, "k", b"one").unwrap();
    put(&mut v, 5, "big", &[9; 500]).unwrap(); // on the bdev
    v.commit().unwrap();
    // fill, then hit (twice the same answer), older epoch misses the entry
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"one"[..]));
    assert_eq!(get_latest(&mut v, "big"), Some(vec![9; 500]));
    assert!(v
        .st
        .svc
        .get(
            &keys::akey_prefix(&keys::dkey_prefix(C, oid(), b"k"), b"a"),
            u64::MAX
        )
        .is_some());
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"one"[..]));
    assert_eq!(get_latest(&mut v, "big"), Some(vec![9; 500]));
    assert_eq!(get_at(&mut v, 4, "k"), None);
    // an update replaces it (read inside the batch and after the commit)
    put(&mut v, 7, "k", b"two").unwrap();
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"two"[..]));
    v.commit().unwrap();
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"two"[..]));
    assert_eq!(get_at(&mut v, 6, "k").as_deref(), Some(&b"one"[..]));
    // a read inside a batch that is then rolled back: the old value again
    put(&mut v, 8, "k", b"three").unwrap();
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"three"[..]));
    v.abort().unwrap();
    assert_eq!(get_latest(&mut v, "k").as_deref(), Some(&b"two"[..]));
    // a punch hides it
    v.punch_dkeys(C, oid(), Epoch(9), &[DKey::from("k")])
        .unwrap();
    v.commit().unwrap();
    assert_eq!(get_latest(&mut v, "k"), None);
    assert_eq!(get_at(&mut v, 8, "k").as_deref(), Some(&b"two"[..]));
    assert_eq!(get_latest(&mut v, "big"), Some(vec![9; 500]));
    // a cache of 0 bytes holds nothing and reads the same
    let (_d2, _b2, mut w) = {
        let dir = tempfile::tempdir().unwrap();
        let bdev: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", 256, 512).unwrap());
        let cfg = VosConfig {
            value_cache_bytes: 0,
            ..VosConfig::default()
        };
        let mut w = Vos::open(dir.path().join("i"), bdev.clone(), cfg).unwrap();
        w.cont_create(C).unwrap();
        (dir, bdev, w)
    };
    put(&mut w, 5, "k", b"x").unwrap();
    assert_eq!(get_latest(&mut w, "k").as_deref(), Some(&b"x"[..]));
    assert!(w.st.svc.map.is_empty());
}

/// A full latest-value cache sheds part of its entries, stays within its
/// byte budget, and what it keeps still reads right.
#[test]
fn latest_value_cache_sheds_within_its_budget() {
    let mut c = SvCache {
        limit: 10_000,
        ..SvCache::default()
    };
    for i in 0..200u32 {
        let ap = i.to_be_bytes().to_vec();
        let was_full = c.bytes + SvCache::cost(&ap, &Loc::Inline(vec![0; 100])) > c.limit;
        c.put(&ap, 5, &Loc::Inline(vec![i as u8; 100]));
        assert!(c.bytes <= c.limit, "{} > {}", c.bytes, c.limit);
        // the entry just made is there (unless the full cache did not admit it)
        if !was_full {
            assert_eq!(c.get(&ap, 5), Some(&Loc::Inline(vec![i as u8; 100])));
        }
    }
    // bytes agree with the entries; kept ones are intact; not all were dropped
    let total: usize = c.map.iter().map(|(k, (_, l))| SvCache::cost(k, l)).sum();
    assert_eq!(total, c.bytes);
    assert!(c.map.len() > 10, "{} entries kept", c.map.len());
    for (k, (e, l)) in &c.map {
        let i = u32::from_be_bytes(k[..].try_into().unwrap());
        assert_eq!((*e, l), (5, &Loc::Inline(vec![i as u8; 100])));
    }
    // one entry larger than the whole budget is not kept
    c.put(b"huge", 5, &Loc::Inline(vec![0; 20_000]));
    assert!(c.get(b"huge", 5).is_none());
}

/// A cyclic read of more keys than the latest-value cache holds (mdtest-hard's
/// read phase: a miss is read from the index, then offered to the cache) keeps
/// hitting about the share of the keys the cache holds; admitting every miss
/// (and shedding for it) churned the cache and nearly every read missed.
#[test]
fn latest_value_cache_is_not_churned_by_a_cyclic_read() {
    let mut c = SvCache {
        limit: 100 * SvCache::cost(&[0; 4], &Loc::Inline(vec![0; 100])),
        ..SvCache::default()
    };
    let keys = 160u32; // 1.6 x what fits
    let mut hits = 0;
    for round in 0..12 {
        for i in 0..keys {
            let ap = i.to_be_bytes();
            if c.get(&ap, 5).is_some() {
                if round == 11 {
                    hits += 1;
                }
            } else {
                c.put(&ap, 5, &Loc::Inline(vec![i as u8; 100]));
            }
            assert!(c.bytes <= c.limit);
        }
    }
    // what fits is 100 of 160 keys: 62 % at best (98 hits); admitting every
    // miss and shedding a quarter for it gave 75
    assert!(
        hits * 100 >= keys * 55,
        "{hits} hits of {keys} reads in a cycle"
    );
}

/// The blocks of the newest single value of dkey `k` (akey "a").
fn bdev_loc(v: &mut Vos, k: &str) -> (u64, u64) {
    let ap = keys::akey_prefix(&keys::dkey_prefix(C, oid(), k.as_bytes()), b"a");
    v.with_view(|r, _| sv_at(r, &ap, u64::MAX, None))
        .unwrap()
        .and_then(|l| l.bdev_extent())
        .unwrap()
}

/// What a crash leaves of a store: its files as they are now (redb's file
/// holds the last durable commit; later commits went through the redo log).
fn crash_copy(dir: &std::path::Path, to: &str) {
    std::fs::copy(dir.join("i"), dir.join(to)).unwrap();
    std::fs::copy(wal_path(&dir.join("i")), wal_path(&dir.join(to))).unwrap();
}

#[test]
fn redo_log_replays_acknowledged_batches_and_drops_a_torn_last_one() {
    let (dir, bdev, mut v) = setup(256, false);
    let cfg = VosConfig {
        inline_max: 100,
        ..VosConfig::default()
    };
    // batch 1: a bdev value, an inline value, an array extent, a punch
    put(&mut v, 5, "k1", &[1; 1000]).unwrap();
    put(&mut v, 5, "k2", &[2; 10]).unwrap();
    v.update(
        C,
        oid(),
        Epoch(5),
        &DKey::from("arr"),
        &[Iod::array("x", 4, vec![Recx { idx: 10, nr: 50 }])],
        &[SgList::one(vec![9; 200])],
    )
    .unwrap();
    v.punch_dkeys(C, oid(), Epoch(6), &[DKey::from("k2")])
        .unwrap();
    v.commit().unwrap();
    // batch 2
    put(&mut v, 7, "k3", &[3; 700]).unwrap();
    v.commit().unwrap();
    assert!(
        std::fs::metadata(wal_path(&dir.path().join("i")))
            .unwrap()
            .len()
            >= 8192
    );
    crash_copy(dir.path(), "j");
    crash_copy(dir.path(), "off");
    // batch 3, whose bdev value is then lost (its flush ran beside the log write)
    put(&mut v, 8, "k4", &[4; 900]).unwrap();
    v.commit().unwrap();
    let (off, blocks) = bdev_loc(&mut v, "k4");
    let free = v.space().unwrap().bdev_free;
    crash_copy(dir.path(), "torn");
    drop(v);
    // the clean close (redb's own durable commit) records how much of the
    // log the index holds: nothing is applied twice
    let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
    assert_eq!(get(&mut v, EPOCH_MAX.0, "k3").unwrap(), vec![3; 700]);
    assert_eq!(v.space().unwrap().bdev_free, free);
    v.check().unwrap();
    drop(v);
    let mut ch = bdev.open_channel().unwrap();
    ch.submit(BdevIo::write(
        off,
        blocks,
        vec![IoBuf::zeroed((blocks * 512) as usize)],
        0,
    ))
    .unwrap();
    let mut done = Vec::new();
    while ch.poll(&mut done) == 0 {}

    let verify = |v: &mut Vos, k4: bool| {
        assert_eq!(get(v, EPOCH_MAX.0, "k1").unwrap(), vec![1; 1000]);
        assert_eq!(get(v, EPOCH_MAX.0, "k2"), None, "punched");
        assert_eq!(get(v, 5, "k2").unwrap(), vec![2; 10]);
        assert_eq!(get(v, EPOCH_MAX.0, "k3").unwrap(), vec![3; 700]);
        let mut s = [SgList::one(vec![0; 200])];
        v.fetch(
            C,
            oid(),
            EPOCH_MAX,
            &DKey::from("arr"),
            &[Iod::array("x", 4, vec![Recx { idx: 10, nr: 50 }])],
            &mut s,
        )
        .unwrap();
        assert_eq!(s[0].iovs[0], vec![9; 200]);
        assert_eq!(get(v, EPOCH_MAX.0, "k4").is_some(), k4);
        assert!(v.punched.contains(C.as_bytes()));
        v.check().unwrap();
    };
    // a crash after batch 2: both batches replayed
    let mut v = Vos::open(dir.path().join("j"), bdev.clone(), cfg.clone()).unwrap();
    verify(&mut v, false);
    assert_eq!(v.max_epoch(), Epoch(7));
    drop(v);
    let mut v = Vos::open(dir.path().join("j"), bdev.clone(), cfg.clone()).unwrap();
    verify(&mut v, false);
    drop(v);
    // a crash after batch 3 whose value did not reach the bdev: batch 3 is
    // dropped, its blocks are free
    let mut v = Vos::open(dir.path().join("torn"), bdev.clone(), cfg.clone()).unwrap();
    verify(&mut v, false);
    assert_eq!(v.space().unwrap().bdev_free, free + blocks * 512);
    drop(v);
    // a replay with the log off still applies what the log holds
    let off_cfg = VosConfig {
        wal: false,
        ..cfg.clone()
    };
    let mut v = Vos::open(dir.path().join("off"), bdev.clone(), off_cfg).unwrap();
    verify(&mut v, false);
}

/// With the index commit deferred (`wal_defer_index`), the open transaction
/// holds acknowledged batches: a batch that then fails (its bdev flush)
/// must leave them readable (replayed from the log), drop only itself, and
/// the state must survive a crash and a clean reopen. Same sequence with the
/// deferral off.
#[test]
fn deferred_index_commit_keeps_acknowledged_batches_when_one_fails() {
    for defer in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", 256, 512).unwrap());
        let dev = Arc::new(bdev::inject::ErrorInjectBdev::new("inj", inner));
        let inj = dev.injector();
        let bdev: Arc<dyn BlockDevice> = dev;
        let cfg = VosConfig {
            inline_max: 100,
            auto_commit: false,
            wal_defer_index: defer,
            ..VosConfig::default()
        };
        let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
        v.cont_create(C).unwrap();
        v.commit().unwrap();
        put(&mut v, 5, "a", &[1; 700]).unwrap();
        v.commit().unwrap();
        put(&mut v, 6, "b", &[2; 10]).unwrap();
        v.commit().unwrap();
        assert_eq!(v.deferred, if defer { 2 } else { 0 });
        assert_eq!(v.txn.is_some(), defer);
        assert!(!v.has_pending());
        // nothing new: a commit changes nothing
        v.commit().unwrap();
        assert_eq!(v.deferred, if defer { 2 } else { 0 });
        let free_ab = v.space().unwrap().bdev_free;
        put(&mut v, 7, "c", &[3; 700]).unwrap();
        inj.arm(rule(IoType::Flush));
        assert!(matches!(v.commit(), Err(StoreError::Bdev(_))));
        assert_eq!(v.deferred, 0);
        let check = |v: &mut Vos, d: bool| {
            assert_eq!(get(v, EPOCH_MAX.0, "a").unwrap(), vec![1; 700]);
            assert_eq!(get(v, EPOCH_MAX.0, "b").unwrap(), vec![2; 10]);
            assert_eq!(get(v, EPOCH_MAX.0, "c"), None);
            assert_eq!(get(v, EPOCH_MAX.0, "d").is_some(), d);
            v.check().unwrap();
        };
        check(&mut v, false);
        assert_eq!(v.space().unwrap().bdev_free, free_ab);
        assert_eq!(v.max_epoch(), Epoch(6));
        // the next batches work; a read between them commits the open one
        put(&mut v, 8, "d", &[4; 700]).unwrap();
        v.commit().unwrap();
        put(&mut v, 9, "e", &[5; 10]).unwrap();
        v.commit().unwrap();
        assert_eq!(v.deferred, if defer { 2 } else { 0 });
        crash_copy(dir.path(), "j");
        assert_eq!(get(&mut v, EPOCH_MAX.0, "e").unwrap(), vec![5; 10]);
        assert_eq!(v.deferred, 0);
        assert!(v.txn.is_none());
        // an abort after acknowledged batches keeps them
        put(&mut v, 10, "f", &[6; 10]).unwrap();
        v.commit().unwrap();
        put(&mut v, 11, "g", &[7; 10]).unwrap();
        v.abort().unwrap();
        assert_eq!(get(&mut v, EPOCH_MAX.0, "f").unwrap(), vec![6; 10]);
        assert_eq!(get(&mut v, EPOCH_MAX.0, "g"), None);
        check(&mut v, true);
        drop(v);
        // a crash after "e"'s batch: everything acknowledged is replayed
        let mut v = Vos::open(dir.path().join("j"), bdev.clone(), cfg.clone()).unwrap();
        check(&mut v, true);
        assert_eq!(get(&mut v, EPOCH_MAX.0, "e").unwrap(), vec![5; 10]);
        assert_eq!(v.max_epoch(), Epoch(9));
        drop(v);
        // a clean close
        let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
        check(&mut v, true);
        assert_eq!(get(&mut v, EPOCH_MAX.0, "f").unwrap(), vec![6; 10]);
        assert_eq!(v.max_epoch(), Epoch(10));
    }
}

/// A device whose flushes complete only once the test opens the gate.
struct Gated {
    inner: Arc<dyn BlockDevice>,
    open: Arc<std::sync::atomic::AtomicBool>,
}

struct GatedChan {
    inner: Box<dyn bdev::IoChannel>,
    open: Arc<std::sync::atomic::AtomicBool>,
    held: Vec<BdevIo>,
}

impl BlockDevice for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn io_type_supported(&self, t: IoType) -> bool {
        self.inner.io_type_supported(t)
    }
    fn open_channel(&self) -> Result<Box<dyn bdev::IoChannel>, bdev::Error> {
        Ok(Box::new(GatedChan {
            inner: self.inner.open_channel()?,
            open: self.open.clone(),
            held: Vec::new(),
        }))
    }
    fn stats(&self) -> bdev::Stats {
        self.inner.stats()
    }
}

impl bdev::IoChannel for GatedChan {
    fn submit(&mut self, io: BdevIo) -> Result<(), bdev::Rejected> {
        self.inner.submit(io)
    }
    fn poll(&mut self, done: &mut Vec<BdevIo>) -> usize {
        let mut got = Vec::new();
        self.inner.poll(&mut got);
        for io in got {
            if io.io_type == Some(IoType::Flush) {
                self.held.push(io);
            } else {
                done.push(io);
            }
        }
        let mut n = done.len();
        if self.open.load(std::sync::atomic::Ordering::SeqCst) {
            n += self.held.len();
            done.append(&mut self.held);
        }
        n
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.held.len()
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn stats(&self) -> bdev::Stats {
        self.inner.stats()
    }
}

/// The commit pipeline (`commit_start` / `commit_poll`): a batch is
/// reported durable only after its bdev flush has completed (the flush is
/// held back here), the next batch executes meanwhile and reads the first,
/// and both are what a crash image and a reopen hold. Fails if `commit_poll`
/// reports a batch before its flush (a reply before the covering fsync).
#[test]
fn pipelined_commit_reports_a_batch_only_after_its_flush() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let inner: Arc<dyn BlockDevice> = Arc::new(MallocBdev::new("m", 256, 512).unwrap());
    let bdev: Arc<dyn BlockDevice> = Arc::new(Gated {
        inner,
        open: open.clone(),
    });
    let cfg = VosConfig {
        inline_max: 100,
        auto_commit: false,
        commit_pipeline: true,
        ..VosConfig::default()
    };
    let mut v = Vos::open(dir.path().join("i"), bdev.clone(), cfg.clone()).unwrap();
    v.cont_create(C).unwrap();
    open.store(true, Ordering::SeqCst);
    v.commit().unwrap();
    open.store(false, Ordering::SeqCst);
    put(&mut v, 5, "a", &[1; 700]).unwrap();
    assert!(
        v.commit_start().unwrap(),
        "a logged batch commits asynchronously"
    );
    for _ in 0..20 {
        assert!(v.commit_poll(false).is_none(), "reported before its flush");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // the next batch executes while the first commits, and sees it
    put(&mut v, 6, "b", &[2; 700]).unwrap();
    assert_eq!(get(&mut v, EPOCH_MAX.0, "a").unwrap(), vec![1; 700]);
    assert!(v.commit_poll(false).is_none(), "reported before its flush");
    open.store(true, Ordering::SeqCst);
    let r = v.commit_poll(true);
    assert!(matches!(r, Some(Ok(()))), "{r:?}");
    assert!(v.commit_start().unwrap());
    assert!(matches!(v.commit_poll(true), Some(Ok(()))));
    // nothing left in flight
    assert!(matches!(v.commit_poll(false), Some(Ok(()))));
    // a batch of inline values only commits in place (no flush to overlap)
    put(&mut v, 7, "c", &[3; 10]).unwrap();
    assert!(!v.commit_start().unwrap());
    assert_eq!(get(&mut v, EPOCH_MAX.0, "c").unwrap(), vec![3; 10]);
    crash_copy(dir.path(), "j");
    drop(v);
    for name in ["i", "j"] {
        let mut w = Vos::open(dir.path().join(name), bdev.clone(), cfg.clone()).unwrap();
        assert_eq!(
            get(&mut w, EPOCH_MAX.0, "a").unwrap(),
            vec![1; 700],
            "{name}"
        );
        assert_eq!(
            get(&mut w, EPOCH_MAX.0, "b").unwrap(),
            vec![2; 700],
            "{name}"
        );
        w.check().unwrap();
    }
}

/// A started commit that fails (its bdev flush) fails its batch and the
/// batch executed after it; acknowledged batches stay.
#[test]
fn pipelined_commit_failure_loses_its_batch_and_the_next() {
    let (_dir, inj, mut v) = setup_inject(false);
    v.cfg.commit_pipeline = true;
    put(&mut v, 4, "z", &[9; 700]).unwrap();
    assert!(v.commit_start().unwrap());
    assert!(matches!(v.commit_poll(true), Some(Ok(()))));
    put(&mut v, 5, "a", &[1; 700]).unwrap();
    inj.arm(rule(IoType::Flush));
    assert!(v.commit_start().unwrap());
    put(&mut v, 6, "b", &[2; 700]).unwrap();
    assert!(matches!(
        v.commit_poll(true),
        Some(Err(StoreError::Bdev(_)))
    ));
    assert!(v.commit_start().is_err(), "the later batch is lost with it");
    assert_eq!(get(&mut v, EPOCH_MAX.0, "z").unwrap(), vec![9; 700]);
    assert_eq!(get(&mut v, EPOCH_MAX.0, "a"), None);
    assert_eq!(get(&mut v, EPOCH_MAX.0, "b"), None);
    v.check().unwrap();
    put(&mut v, 7, "c", &[3; 700]).unwrap();
    assert!(v.commit_start().unwrap());
    assert!(matches!(v.commit_poll(true), Some(Ok(()))));
    assert_eq!(get(&mut v, EPOCH_MAX.0, "c").unwrap(), vec![3; 700]);
}

#[test]
fn update_flat_stores_what_update_stores() {
    let (_d, _b, mut v) = setup(256, true);
    // inline (10 B) and on the bdev (1000 B; inline_max is 100), borrowed
    // buffers against a two-iov sgl of the same bytes
    for (k, len) in [("s", 10usize), ("b", 1000)] {
        let val: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let flat_key = format!("{k}-flat");
        v.update_flat(
            C,
            oid(),
            Epoch(3),
            &DKey::from(flat_key.as_str()),
            &[Iod::single("a", len as u64)],
            &[&val],
        )
        .unwrap();
        let (x, y) = val.split_at(len / 3);
        v.update(
            C,
            oid(),
            Epoch(3),
            &DKey::from(k),
            &[Iod::single("a", len as u64)],
            &[SgList {
                iovs: vec![x.to_vec(), y.to_vec()],
            }],
        )
        .unwrap();
        assert_eq!(get(&mut v, 3, &flat_key).as_deref(), Some(&val[..]));
        assert_eq!(get(&mut v, 3, k).as_deref(), Some(&val[..]));
    }
    // caller errors as update's: counts and lengths that disagree
    let iod = [Iod::single("a", 4)];
    assert!(matches!(
        v.update_flat(C, oid(), Epoch(4), &DKey::from("e"), &iod, &[]),
        Err(StoreError::InvalidArg(_))
    ));
    assert!(matches!(
        v.update_flat(C, oid(), Epoch(4), &DKey::from("e"), &iod, &[&[1, 2, 3]]),
        Err(StoreError::InvalidArg(_))
    ));
    assert_eq!(get(&mut v, 4, "e"), None);
}
