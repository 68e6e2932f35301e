//! Crash test: kill -9 the engine during a write-heavy run, restart it, and
//! check that every acknowledged write is readable and intact, that writes
//! in flight at the kill are either absent or whole (never half-written),
//! and that the pool's space accounting survives. Repeated over several kill
//! points.

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use obj::client::{Client, Kv};
use obj::types::{ObjClass, ObjType, ObjectId};
use tse::Wait;

const BIN: &str = env!("CARGO_BIN_EXE_dpustack");

struct Engine(Child);
impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(addr: &str, dir: &std::path::Path) -> (Engine, Client) {
    let e = Engine(
        Command::new(BIN)
            .args(["engine", "--listen", addr, "--targets", "2", "--data-dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    loop {
        if let Ok(c) = Client::connect(addr) {
            return (e, c);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "engine did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value written under `key`: its length and bytes follow from the key
/// (some inline in the index, some on the bdev).
fn value_of(key: u64) -> Vec<u8> {
    let mut x = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let len = 50 + (x % 12_000) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Kill -9s of the test (one per round).
const ROUNDS: u64 = 12;

/// Where round `r` kills the engine, ms after its writes start: spread over
/// 20..420 ms (early in a batch, mid-commit, late) in a fixed pseudo-random order.
fn kill_point_ms(r: u64) -> u64 {
    20 + (r * 149 + 37) % 400
}

fn open_kv(c: &Client) -> Kv {
    let poh = c.pool_connect("crash", None).unwrap().get().unwrap();
    let coh = c.cont_open(&poh, "c", None).unwrap().get().unwrap();
    let oid = ObjectId::generate(0, 77, ObjType::KvHashed, ObjClass::S1).unwrap();
    c.kv_open(&coh, oid, None).unwrap().get().unwrap()
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = std::env::temp_dir().join(format!("dpustack-obj-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = TcpListener::bind("127.0.0.10:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.10:{port}");
    let (eng, c) = spawn(&addr, &dir);
    c.pool_create("crash", 256 << 20, None)
        .unwrap()
        .get()
        .unwrap();
    let poh = c.pool_connect("crash", None).unwrap().get().unwrap();
    c.cont_create(&poh, "c", &[], None).unwrap().get().unwrap();
    drop(c);
    drop(eng);

    let mut acked: HashMap<u64, ()> = HashMap::new();
    let mut unknown: Vec<u64> = Vec::new();
    let mut next_key = 0u64;
    let mut last_used = 0u64;
    for round in 0..ROUNDS {
        let (mut eng, c) = spawn(&addr, &dir);
        let kv = open_kv(&c);
        // everything acknowledged before is there, intact
        for k in acked.keys() {
            let got = c.kv_get(&kv, &k.to_be_bytes(), None).unwrap().get();
            assert_eq!(
                got.ok(),
                Some(value_of(*k)),
                "round {round}: acknowledged key {k}"
            );
        }
        // writes that were in flight: absent or whole
        for k in unknown.drain(..) {
            match c.kv_get(&kv, &k.to_be_bytes(), None).unwrap().get() {
                Ok(v) => {
                    assert_eq!(
                        v,
                        value_of(k),
                        "round {round}: in-flight key {k} half-written"
                    );
                    acked.insert(k, ());
                }
                Err(e) => assert_eq!(e.status(), Some(obj::rpc::Status::NonExist), "{e}"),
            }
        }
        let used = c.pool_query("crash", None).unwrap().get().unwrap().used;
        assert!(
            used >= last_used,
            "space accounting went back: {used} < {last_used}"
        );
        last_used = used;
        // write with 16 updates in flight; kill -9 at a round-dependent point
        let kill_after = Duration::from_millis(kill_point_ms(round));
        let evs: Vec<_> = (0..16).map(|_| c.event(None).unwrap()).collect();
        let mut slots: Vec<Option<(u64, obj::client::Pending<obj::types::Epoch>)>> =
            (0..16).map(|_| None).collect();
        let t0 = Instant::now();
        let mut killed = false;
        let mut out = Vec::new();
        loop {
            for (i, ev) in evs.iter().enumerate() {
                if slots[i].is_none() && !killed {
                    let k = next_key;
                    next_key += 1;
                    let p = c
                        .kv_put(&kv, &k.to_be_bytes(), &value_of(k), Some(ev))
                        .unwrap();
                    slots[i] = Some((k, p));
                }
            }
            if !killed && t0.elapsed() >= kill_after {
                eng.0.kill().unwrap();
                eng.0.wait().unwrap();
                killed = true;
            }
            out.clear();
            c.poll(Wait::Timeout(Duration::from_millis(50)), 16, &mut out)
                .unwrap();
            for (ev, _) in &out {
                let i = evs.iter().position(|e| e == ev).unwrap();
                let (k, p) = slots[i].take().unwrap();
                match p.get() {
                    Ok(_) => {
                        acked.insert(k, ());
                    }
                    Err(_) => unknown.push(k),
                }
            }
            if killed && slots.iter().all(Option::is_none) {
                break;
            }
        }
        assert!(
            acked.len() as u64 > round * 5,
            "the run wrote something before the kill"
        );
    }
    let (_eng, c) = spawn(&addr, &dir);
    let kv = open_kv(&c);
    for k in acked.keys() {
        assert_eq!(
            c.kv_get(&kv, &k.to_be_bytes(), None).unwrap().get().ok(),
            Some(value_of(*k))
        );
    }
    // the last round's writes in flight at the kill: absent or whole
    for k in unknown.drain(..) {
        match c.kv_get(&kv, &k.to_be_bytes(), None).unwrap().get() {
            Ok(v) => assert_eq!(v, value_of(k), "last round: in-flight key {k} half-written"),
            Err(e) => assert_eq!(e.status(), Some(obj::rpc::Status::NonExist), "{e}"),
        }
    }
    let used = c.pool_query("crash", None).unwrap().get().unwrap().used;
    assert!(
        used >= last_used,
        "space accounting went back: {used} < {last_used}"
    );
    eprintln!(
        "{} acknowledged writes survived {ROUNDS} kill -9s",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
