//! DTX through real engines (three in this process, 127.0.0.54–56):
//! - RP_2 / RP_3 puts go through the leader replica and land on every
//!   replica at ONE epoch (read at that epoch: there; one below: not);
//! - a replica holding a prepared update answers reads "in progress" until
//!   the commit, then serves the value at the leader's epoch; an abort
//!   leaves nothing;
//! - an orphan (its leader gone: connection refused) is resolved by the
//!   follower without it (DTX resync: prepared on every other replica →
//!   committed); with its other follower out of the pool map too, it
//!   commits within a bound (prepared on every replica the map has in);
//! - a follower stopped: the leader aborts (unreachable), the client marks
//!   it DOWN and the retried put commits on survivor + spare.
//!
//! Second test: multi-akey updates (single values and array extents) and
//! punches (akeys, dkey, a whole SX object over every engine) at one epoch
//! on every replica; a prepared object punch holds reads of every dkey; a
//! follower engine stopped and restarted (same address and directory)
//! between a prepare and its commit still holds the key and applies the
//! commit (its prepared entry was persisted).

use std::sync::Arc;
use std::time::{Duration, Instant};

use obj::client::{kv::KV_AKEY, Client, Kv};
use obj::dist::{DistClient, Replication};
use obj::dtx_op::{held_keys, DtxOp, DtxWrite};
use obj::engine::dtx::{DtxId, Msg, Update};
use obj::engine::vos_backend::VosBackend;
use obj::engine::{Engine, EngineConfig};
use obj::membership::DetectorConfig;
use obj::placement::{group_of, layout};
use obj::rpc::msg::WireOid;
use obj::rpc::Status;
use obj::types::{AKey, DKey, Epoch, Iod, ObjClass, ObjType, ObjectId, Recx, Redundancy};

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

fn rp(r: u8) -> ObjClass {
    ObjClass {
        redundancy: Redundancy::Replicas(r),
        groups: 1,
    }
}

fn kv_oid(lo: u64, class: ObjClass) -> ObjectId {
    ObjectId::generate(0, lo, ObjType::KvHashed, class).unwrap()
}

struct Direct {
    c: Client,
    kv: Kv,
}

fn direct(addr: &str, oid: ObjectId) -> Direct {
    let c = Client::connect(addr).unwrap();
    let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
    let kv = c.kv_open(&coh, oid, None).unwrap().get().unwrap();
    Direct { c, kv }
}

impl Direct {
    /// The value of `key` as of `epoch` (`None`: latest); `Err` = status.
    fn at(&self, key: &[u8], epoch: Option<Epoch>) -> Result<Option<Vec<u8>>, Status> {
        let r = self.c.obj_fetch(
            &self.kv.oh,
            epoch,
            &DKey(key.to_vec()),
            &[Iod::single(KV_AKEY, 0)],
            Vec::new(),
            None,
        );
        match r.and_then(|p| p.get()) {
            Ok(f) if f.sizes[0] == 0 => Ok(None),
            Ok(mut f) => Ok(Some(f.sgls.pop().unwrap().concat())),
            Err(e) => Err(e.status().unwrap_or(Status::Misc)),
        }
    }
}

/// Sends one DTX message to engine `addr` (rank `to`) as rank `from`.
fn send(addr: &str, from: u32, from_addr: &str, to: u32, m: &Msg, peers: &[String]) {
    let c = Client::connect(addr).unwrap();
    let mut b = Vec::new();
    m.emit(&mut b);
    let peers = peers
        .iter()
        .enumerate()
        .filter(|(r, _)| *r as u32 != to)
        .map(|(r, a)| (r as u32, a.clone()))
        .collect();
    c.dtx_msg(from, from_addr, to, b, peers)
        .unwrap()
        .get()
        .unwrap();
}

/// [`send`] with the peers' addresses given.
fn send_peers(addr: &str, from: u32, from_addr: &str, to: u32, m: &Msg, peers: Vec<(u32, String)>) {
    let c = Client::connect(addr).unwrap();
    let mut b = Vec::new();
    m.emit(&mut b);
    c.dtx_msg(from, from_addr, to, b, peers)
        .unwrap()
        .get()
        .unwrap();
}

/// The `Update` a leader would prepare for a KV put.
fn kv_update(wire: WireOid, key: &[u8], val: &[u8]) -> Update {
    op_update(
        wire,
        DtxOp::Update {
            dkey: key.to_vec(),
            iods: vec![Iod::single(KV_AKEY, val.len() as u64)],
            data: vec![val.to_vec()],
        },
    )
}

fn op_update(wire: WireOid, op: DtxOp) -> Update {
    Update {
        keys: held_keys(wire, &op),
        payload: DtxWrite {
            pool: "dp".into(),
            cont: "dc".into(),
            oid: wire,
            op,
        }
        .emit(),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dtx_puts_one_epoch_holds_readers_and_resolves_orphans() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut engines: Vec<Option<Engine>> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| Some(start(d.path(), &format!("127.0.0.{}", 54 + i))))
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
        Duration::from_secs(3),
        DetectorConfig::default(),
    )
    .unwrap();
    assert_eq!(dc.replication(), Replication::Dtx);

    // 1. one epoch on every replica
    for (o, class) in [(1u64, rp(2)), (2, rp(3))] {
        let oid = kv_oid(o, class);
        for k in 0..20u32 {
            let key = format!("key{k}").into_bytes();
            let val = format!("value {o} {k}").into_bytes();
            let e = dc.kv_put(oid, &key, &val).unwrap();
            let l = layout(oid, dc.map()).unwrap();
            let grp = &l.groups[group_of(&key, l.groups.len())];
            for &t in grp {
                let d = direct(&addrs[t as usize], oid);
                // the commit reaches a follower after the client's answer
                wait_until("committed on the follower", || {
                    d.at(&key, Some(e)) != Err(Status::InProgress)
                });
                assert_eq!(
                    d.at(&key, Some(e)).unwrap(),
                    Some(val.clone()),
                    "replica {t}"
                );
                assert_eq!(
                    d.at(&key, Some(Epoch(e.0 - 1))).unwrap(),
                    None,
                    "replica {t}"
                );
            }
            assert_eq!(dc.kv_get(oid, &key).unwrap(), val);
        }
    }
    let dtx_updates = |e: &Engine| {
        e.op_counters()
            .by_opcode()
            .into_iter()
            .find(|(n, _)| *n == "obj_dtx_update")
            .unwrap()
            .1
    };
    let led: u64 = engines
        .iter()
        .map(|e| dtx_updates(e.as_ref().unwrap()))
        .sum();
    assert_eq!(led, 40, "every put went to one leader once");

    // 2. a prepared update holds readers; commit applies at its epoch
    let oid = kv_oid(3, rp(2));
    let wire = WireOid {
        hi: oid.hi,
        lo: oid.lo,
    };
    // rank 7: a "leader" that accepts connections and never answers (its
    // followers' queries go unanswered: entries stay prepared); rank 8: a
    // leader that is gone (connection refused)
    let silent = std::net::TcpListener::bind("127.0.0.54:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let fake = |seq| DtxId {
        leader: if seq >= 3 { 8 } else { 7 },
        incarnation: 1,
        seq,
    };
    let prepare =
        |seq: u64, epoch: u64, key: &[u8], val: &[u8], mut parts: Vec<u32>| Msg::Prepare {
            id: fake(seq),
            participants: {
                parts[0] = fake(seq).leader;
                parts
            },
            epoch,
            update: kv_update(wire, key, val),
        };
    let d0 = direct(&addrs[0], oid);
    // any epoch above the container's floor works (no snapshot here)
    let epoch = Epoch(1_000_000);
    let gone = "127.0.0.54:1";
    send(
        &addrs[0],
        7,
        &silent_addr,
        0,
        &prepare(1, epoch.0, b"held", b"v1", vec![7, 0]),
        &addrs,
    );
    wait_until("the key is held", || {
        d0.at(b"held", None) == Err(Status::InProgress)
    });
    // other keys are not held
    assert_eq!(d0.at(b"other", None), Ok(None));
    send(
        &addrs[0],
        7,
        &silent_addr,
        0,
        &Msg::Commit { id: fake(1) },
        &addrs,
    );
    wait_until("committed", || {
        d0.at(b"held", None) == Ok(Some(b"v1".to_vec()))
    });
    assert_eq!(d0.at(b"held", Some(epoch)), Ok(Some(b"v1".to_vec())));
    assert_eq!(d0.at(b"held", Some(Epoch(epoch.0 - 1))), Ok(None));
    // an abort leaves nothing and releases
    send(
        &addrs[0],
        7,
        &silent_addr,
        0,
        &prepare(2, epoch.0 + 5, b"aborted", b"x", vec![7, 0]),
        &addrs,
    );
    wait_until("held", || {
        d0.at(b"aborted", None) == Err(Status::InProgress)
    });
    send(
        &addrs[0],
        7,
        &silent_addr,
        0,
        &Msg::Abort { id: fake(2) },
        &addrs,
    );
    wait_until("aborted", || d0.at(b"aborted", None) == Ok(None));

    // 3. an orphan: prepared, its leader gone; the follower asks, the
    // connection is refused, it resolves alone (the only other replica)
    send(
        &addrs[0],
        8,
        gone,
        0,
        &prepare(3, epoch.0 + 9, b"orphan", b"o", vec![7, 0]),
        &addrs,
    );
    wait_until("orphan resolved", || {
        d0.at(b"orphan", None) == Ok(Some(b"o".to_vec()))
    });
    // RP_3 orphan whose other follower (rank 1) never saw it: aborted
    send(
        &addrs[0],
        8,
        gone,
        0,
        &prepare(4, epoch.0 + 11, b"orphan3", b"o3", vec![7, 0, 1]),
        &addrs,
    );
    wait_until("held", || {
        d0.at(b"orphan3", None) == Err(Status::InProgress)
    });
    wait_until("resolved", || {
        d0.at(b"orphan3", None) != Err(Status::InProgress)
    });
    assert_eq!(
        d0.at(b"orphan3", None),
        Ok(None),
        "rank 1 never prepared it: aborted"
    );
    // ... and rank 1 refuses it now
    let d1 = direct(&addrs[1], oid);
    send(
        &addrs[1],
        8,
        gone,
        1,
        &prepare(4, epoch.0 + 11, b"orphan3", b"o3", vec![7, 0, 1]),
        &addrs,
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d1.at(b"orphan3", None), Ok(None));

    // 4. a follower stopped: the put is retried without it
    let oid = kv_oid(4, rp(2));
    let key = b"after-stop".to_vec();
    let l = layout(oid, dc.map()).unwrap();
    let grp = l.groups[group_of(&key, l.groups.len())].clone();
    let follower = grp[1] as usize;
    engines[follower].take().unwrap().stop();
    let e = dc.kv_put(oid, &key, b"survived").unwrap();
    assert!(!dc.map().target(follower as u32).unwrap().state.is_serving());
    let l2 = layout(oid, dc.map()).unwrap();
    let grp2 = &l2.groups[group_of(&key, l2.groups.len())];
    assert!(!grp2.contains(&(follower as u32)));
    for &t in grp2 {
        let d = direct(&addrs[t as usize], oid);
        wait_until("committed", || {
            d.at(&key, Some(e)) != Err(Status::InProgress)
        });
        assert_eq!(d.at(&key, Some(e)).unwrap(), Some(b"survived".to_vec()));
    }
    assert_eq!(dc.kv_get(oid, &key).unwrap(), b"survived");
}

/// RP_3: a follower holds a prepared entry whose commit was lost, and its
/// leader and the other follower are both out of the pool map (a minority
/// of two cut off together, DOWN for good: nobody answers its queries).
/// A read must not wait for good: prepared on every participant still in
/// the map → committed (DAOS's resync), within a bound. While the pool map
/// does not have them out (refused connections only: they may come back
/// with their stores as they are) the key stays held. Before the fix the
/// key was held for good (the partition test's final read failed "in
/// progress").
#[test]
fn orphan_whose_leader_and_other_follower_are_out_of_the_map_commits() {
    let dir = tempfile::tempdir().unwrap();
    let e = start(dir.path(), "127.0.0.53");
    let addr = e.addr().to_string();
    DistClient::create(std::slice::from_ref(&addr), "dp", 64 << 20, "dc").unwrap();
    let oid = kv_oid(5, rp(3));
    let wire = WireOid {
        hi: oid.hi,
        lo: oid.lo,
    };
    let d0 = direct(&addr, oid);
    // leader rank 8 and follower rank 9: nothing listens there
    let (gone8, gone9) = ("127.0.0.53:1", "127.0.0.53:2");
    let id = DtxId {
        leader: 8,
        incarnation: 1,
        seq: 1,
    };
    let epoch = 1_000_000;
    send_peers(
        &addr,
        8,
        gone8,
        0,
        &Msg::Prepare {
            id,
            epoch,
            participants: vec![8, 0, 9],
            update: kv_update(wire, b"orphan", b"o"),
        },
        vec![(9, gone9.to_string())],
    );
    wait_until("held", || d0.at(b"orphan", None) == Err(Status::InProgress));
    // connections refused, no map: it waits (they may come back as they are)
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(d0.at(b"orphan", None), Err(Status::InProgress));
    // the pool map (as the engine's pool-service replica publishes it) has
    // ranks 8 and 9 DOWN: resolved within a bound
    let t = Instant::now();
    e.map_versions().publish_down("dp", 2, vec![8, 9]);
    loop {
        match d0.at(b"orphan", None) {
            Err(Status::InProgress) => {
                assert!(
                    t.elapsed() < Duration::from_secs(2),
                    "a prepared entry whose leader and other follower are DOWN is still held after {:?}",
                    t.elapsed()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            r => {
                assert_eq!(r, Ok(Some(b"o".to_vec())), "committed");
                break;
            }
        }
    }
    eprintln!("resolved {:?} after the map had them DOWN", t.elapsed());
    assert_eq!(
        d0.at(b"orphan", Some(Epoch(epoch))),
        Ok(Some(b"o".to_vec()))
    );
    assert_eq!(d0.at(b"orphan", Some(Epoch(epoch - 1))), Ok(None));
}

/// What `akeys` of `dkey` hold on the engine at `addr` as of `epoch`
/// (single values; arrays of 1-byte records over `0..16`); `Err` = status.
fn read_akeys(
    addr: &str,
    oid: ObjectId,
    dkey: &[u8],
    epoch: Option<Epoch>,
) -> Result<(Option<Vec<u8>>, Vec<u8>), Status> {
    let c = Client::connect(addr).unwrap();
    let poh = c.pool_connect("dp", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "dc", None).unwrap().get().unwrap();
    let oh = c.obj_open(&coh, oid, None).unwrap().get().unwrap();
    let iods = [
        Iod::single(AKey(b"s".to_vec()), 0),
        Iod::array(AKey(b"a".to_vec()), 1, vec![Recx { idx: 0, nr: 16 }]),
    ];
    match c
        .obj_fetch(&oh, epoch, &DKey(dkey.to_vec()), &iods, Vec::new(), None)
        .and_then(|p| p.get())
    {
        Ok(mut f) => {
            let arr = f.sgls.pop().unwrap().concat();
            let single = f.sgls.pop().unwrap().concat();
            Ok(((f.sizes[0] > 0).then_some(single), arr))
        }
        Err(e) => Err(e.status().unwrap_or(Status::Misc)),
    }
}

/// [`read_akeys`] once the replica has the commit (a follower gets it after
/// the client's answer: until then it answers `InProgress`).
fn settled(
    addr: &str,
    oid: ObjectId,
    dkey: &[u8],
    epoch: Option<Epoch>,
) -> Result<(Option<Vec<u8>>, Vec<u8>), Status> {
    let t = Instant::now();
    loop {
        match read_akeys(addr, oid, dkey, epoch) {
            Err(Status::InProgress) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(2))
            }
            r => return r,
        }
    }
}

fn oid_of(lo: u64, class: ObjClass) -> ObjectId {
    ObjectId::generate(0, lo, ObjType::MultiHashed, class).unwrap()
}

#[test]
fn dtx_updates_punches_and_a_follower_restart() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut engines: Vec<Option<Engine>> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| Some(start(d.path(), &format!("127.0.0.{}", 57 + i))))
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
        Duration::from_secs(3),
        DetectorConfig::default(),
    )
    .unwrap();
    let zeros = vec![0u8; 16];

    // 1. a multi-akey update (single value + array extents) on RP_3: both
    // akeys on every replica at one epoch, nothing one below
    let oid = oid_of(1, rp(3));
    let iods = [
        Iod::single(AKey(b"s".to_vec()), 5),
        Iod::array(
            AKey(b"a".to_vec()),
            1,
            vec![Recx { idx: 2, nr: 3 }, Recx { idx: 10, nr: 2 }],
        ),
    ];
    let e1 = dc
        .update(oid, b"d", &iods, vec![b"hello".to_vec(), b"abcde".to_vec()])
        .unwrap();
    let mut arr = zeros.clone();
    arr[2..5].copy_from_slice(b"abc");
    arr[10..12].copy_from_slice(b"de");
    for a in &addrs {
        assert_eq!(
            settled(a, oid, b"d", Some(e1)),
            Ok((Some(b"hello".to_vec()), arr.clone())),
            "{a}"
        );
        assert_eq!(
            settled(a, oid, b"d", Some(Epoch(e1.0 - 1))),
            Ok((None, zeros.clone()))
        );
    }
    // the array convenience on top, read back through the client
    let e2 = dc.array_write(oid, b"d", b"a", 4, b"XYZ").unwrap();
    assert!(e2 > e1);
    assert_eq!(
        dc.array_read(oid, b"d", b"a", 0, 8).unwrap(),
        b"\0\0abXYZ\0"
    );

    // 2. punch one akey: gone on every replica at one epoch, the other stays
    let e3 = dc.punch_akeys(oid, b"d", &[b"s"]).unwrap();
    for a in &addrs {
        let (s_now, a_now) = settled(a, oid, b"d", Some(e3)).unwrap();
        assert_eq!(s_now, None, "{a}");
        assert_ne!(a_now, zeros, "{a}");
        let (s_before, _) = settled(a, oid, b"d", Some(Epoch(e3.0 - 1))).unwrap();
        assert_eq!(s_before, Some(b"hello".to_vec()), "{a}");
    }
    // a dkey punch (the KV remove on top)
    let kv = kv_oid(2, rp(2));
    dc.kv_put(kv, b"k", b"v").unwrap();
    let e4 = dc.kv_remove(kv, b"k").unwrap();
    let l = layout(kv, dc.map()).unwrap();
    for &t in &l.groups[group_of(b"k", l.groups.len())] {
        let d = direct(&addrs[t as usize], kv);
        wait_until("committed", || {
            d.at(b"k", Some(e4)) != Err(Status::InProgress)
        });
        assert_eq!(d.at(b"k", Some(e4)), Ok(None));
        assert_eq!(d.at(b"k", Some(Epoch(e4.0 - 1))), Ok(Some(b"v".to_vec())));
    }

    // 3. an SX object (one group per engine): an object punch is one
    // transaction over every engine
    let sx = oid_of(3, ObjClass::SX);
    let dkeys: Vec<Vec<u8>> = (0..12).map(|i| format!("dk{i}").into_bytes()).collect();
    for d in &dkeys {
        dc.update(sx, d, &iods[..1], vec![b"12345".to_vec()])
            .unwrap();
    }
    let on: std::collections::HashSet<usize> = {
        let l = layout(sx, dc.map()).unwrap();
        dkeys
            .iter()
            .map(|d| l.groups[group_of(d, l.groups.len())][0] as usize)
            .collect()
    };
    assert!(on.len() > 1, "the dkeys spread over engines: {on:?}");
    let e5 = dc.punch_obj(sx).unwrap();
    let l = layout(sx, dc.map()).unwrap();
    for d in &dkeys {
        let t = l.groups[group_of(d, l.groups.len())][0] as usize;
        assert_eq!(settled(&addrs[t], sx, d, Some(e5)).unwrap().0, None);
        assert_eq!(
            settled(&addrs[t], sx, d, Some(Epoch(e5.0 - 1))).unwrap().0,
            Some(b"12345".to_vec())
        );
    }

    // 4. a prepared object punch holds every dkey of the object; its commit
    // punches them
    let silent = std::net::TcpListener::bind("127.0.0.57:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let id = |seq| DtxId {
        leader: 7,
        incarnation: 1,
        seq,
    };
    let multi = oid_of(4, rp(2));
    dc.update(multi, b"x", &iods[..1], vec![b"xxxxx".to_vec()])
        .unwrap();
    let ey = dc
        .update(multi, b"y", &iods[..1], vec![b"yyyyy".to_vec()])
        .unwrap();
    let w = WireOid {
        hi: multi.hi,
        lo: multi.lo,
    };
    let l = layout(multi, dc.map()).unwrap();
    let f = l.groups[0][0];
    // above every epoch written so far (the punch must be the newest)
    let base = ey.0.max(e5.0) + 1000;
    send(
        &addrs[f as usize],
        7,
        &silent_addr,
        f,
        &Msg::Prepare {
            id: id(1),
            epoch: base,
            participants: vec![7, f],
            update: op_update(w, DtxOp::PunchObj),
        },
        &addrs,
    );
    for d in [&b"x"[..], b"y"] {
        wait_until("held", || {
            read_akeys(&addrs[f as usize], multi, d, None) == Err(Status::InProgress)
        });
    }
    send(
        &addrs[f as usize],
        7,
        &silent_addr,
        f,
        &Msg::Commit { id: id(1) },
        &addrs,
    );
    for d in [&b"x"[..], b"y"] {
        let t = Instant::now();
        loop {
            let r = read_akeys(&addrs[f as usize], multi, d, None);
            if r.as_ref().is_ok_and(|r| r.0.is_none()) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "not punched: {r:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    // 5. a follower restarted between prepare and commit: the persisted
    // entry is held again after the restart and the commit applies
    let upd = op_update(
        w,
        DtxOp::Update {
            dkey: b"z".to_vec(),
            iods: iods.to_vec(),
            data: vec![b"after".to_vec(), b"fghij".to_vec()],
        },
    );
    send(
        &addrs[f as usize],
        7,
        &silent_addr,
        f,
        &Msg::Prepare {
            id: id(2),
            epoch: base + 10,
            participants: vec![7, f],
            update: upd,
        },
        &addrs,
    );
    wait_until("held", || {
        read_akeys(&addrs[f as usize], multi, b"z", None) == Err(Status::InProgress)
    });
    engines[f as usize].take().unwrap().stop();
    let ip = addrs[f as usize].rsplit_once(':').unwrap().0.to_string();
    let restarted = {
        let t = Instant::now();
        loop {
            let cfg = EngineConfig {
                listen: addrs[f as usize].parse().unwrap(),
                data_dir: dirs[f as usize].path().to_path_buf(),
                targets: 2,
                rdma_listen: None,
                aggregation: Default::default(),
            };
            match Engine::start(&cfg, Arc::new(VosBackend::default())) {
                Ok(e) => break e,
                Err(e) => {
                    assert!(t.elapsed() < Duration::from_secs(5), "restart on {ip}: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    };
    engines[f as usize] = Some(restarted);
    assert_eq!(
        read_akeys(&addrs[f as usize], multi, b"z", None),
        Err(Status::InProgress),
        "the prepared entry survived the restart"
    );
    send(
        &addrs[f as usize],
        7,
        &silent_addr,
        f,
        &Msg::Commit { id: id(2) },
        &addrs,
    );
    let mut arr = zeros.clone();
    arr[2..5].copy_from_slice(b"fgh");
    arr[10..12].copy_from_slice(b"ij");
    wait_until("committed after the restart", || {
        read_akeys(&addrs[f as usize], multi, b"z", None)
            == Ok((Some(b"after".to_vec()), arr.clone()))
    });
    assert_eq!(
        read_akeys(&addrs[f as usize], multi, b"z", Some(Epoch(base + 9))),
        Ok((None, zeros.clone()))
    );
    drop(silent);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Replicated put latency and throughput, DTX against the client-driven
/// path, interleaved in the same run on the same engines:
/// `cargo test -p obj --test dtx_e2e -- --ignored --nocapture`
/// (`DTX_BENCH_RUNS`, default 5; `DTX_BENCH_PUTS` per run and mode, default 300).
#[test]
#[ignore]
fn bench_dtx_vs_client_driven() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (runs, puts) = (env("DTX_BENCH_RUNS", 5), env("DTX_BENCH_PUTS", 300));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let engines: Vec<Engine> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| start(d.path(), &format!("127.0.0.{}", 57 + i)))
        .collect();
    let addrs: Vec<String> = engines.iter().map(|e| e.addr().to_string()).collect();
    DistClient::create(&addrs, "dp", 256 << 20, "dc").unwrap();
    let value = vec![0x5au8; 4096];
    for class in [rp(2), rp(3)] {
        let r = match class.redundancy {
            Redundancy::Replicas(r) => r,
            _ => unreachable!(),
        };
        // per mode: per-run median latency (µs) and throughput (puts/s)
        let mut lat: [Vec<f64>; 2] = Default::default();
        let mut tput: [Vec<f64>; 2] = Default::default();
        let mut p99: [Vec<f64>; 2] = Default::default();
        for run in 0..runs {
            for (m, mode) in [Replication::Dtx, Replication::ClientDriven]
                .into_iter()
                .enumerate()
            {
                let mut dc = DistClient::connect(
                    &addrs,
                    "dp",
                    "dc",
                    Duration::from_secs(5),
                    DetectorConfig::default(),
                )
                .unwrap()
                .with_replication(mode);
                let oid = kv_oid(
                    100 + run as u64 * 10 + m as u64 + u64::from(r) * 1000,
                    class,
                );
                let mut one = Vec::with_capacity(puts);
                let t0 = Instant::now();
                for i in 0..puts {
                    let t = Instant::now();
                    dc.kv_put(oid, format!("k{}", i % 64).as_bytes(), &value)
                        .unwrap();
                    one.push(t.elapsed().as_secs_f64() * 1e6);
                }
                let total = t0.elapsed().as_secs_f64();
                tput[m].push(puts as f64 / total);
                let med = median(&mut one);
                p99[m].push(one[one.len() * 99 / 100]);
                lat[m].push(med);
            }
        }
        let show = |name: &str, v: &mut Vec<f64>| {
            let med = median(v);
            let (lo, hi) = (v[0], v[v.len() - 1]);
            eprintln!("  {name}: median {med:.0} (min {lo:.0}, max {hi:.0})");
            med
        };
        eprintln!("RP_{r}: {runs} runs × {puts} puts of 4 KiB, one client, 3 engines in this process (dev profile)");
        let ld = show("DTX latency µs (per-run medians)", &mut lat[0]);
        let lc = show("client-driven latency µs", &mut lat[1]);
        show("DTX p99 µs", &mut p99[0]);
        show("client-driven p99 µs", &mut p99[1]);
        let td = show("DTX puts/s", &mut tput[0]);
        let tc = show("client-driven puts/s", &mut tput[1]);
        eprintln!(
            "  ratio DTX / client-driven: latency {:.2}, throughput {:.2}",
            ld / lc,
            td / tc
        );
    }
}
