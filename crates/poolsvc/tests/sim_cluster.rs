//! Pool-service replicas on a simulated network: tokio's paused clock (virtual
//! time: a 10 s test runs in well under a second of CPU), links with seeded
//! loss and latency, partitions, replicas killed and restarted from their
//! redb. Checked: at most one leader per term (standard Raft: openraft's
//! `single-term-leader`; every committed vote any replica reports is
//! recorded as (term, leader)), no acknowledged update lost, nothing applied
//! that no client asked for, replicas converge.
//!
//! Not bit-for-bit reproducible: openraft draws its election timeouts from
//! its own thread RNG, which cannot be seeded from outside. The network's
//! losses are seeded (`POOLSVC_SEED` picks one seed; the default runs a few).
//! The properties checked hold for every schedule.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use poolsvc::client::PoolClient;
use poolsvc::msg::{Rpc, RpcReply};
use poolsvc::net::Transport;
use poolsvc::service::PoolService;
use poolsvc::state::{Command, Reply};
use poolsvc::store::Store;
use poolsvc::NodeId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Net {
    nodes: HashMap<NodeId, PoolService>,
    /// directed pairs that cannot talk
    cut: HashSet<(NodeId, NodeId)>,
    loss: f64,
    rng: StdRng,
    latency: Duration,
}

#[derive(Clone)]
struct SimNet(Arc<Mutex<Net>>);

impl Transport for SimNet {
    async fn call(
        &self,
        from: NodeId,
        to: NodeId,
        _addr: &str,
        rpc: Rpc,
        timeout: Duration,
    ) -> Result<RpcReply, String> {
        let (svc, lost_req, lost_reply, lat) = {
            let mut n = self.0.lock().unwrap();
            let svc = n.nodes.get(&to).cloned();
            let cut_req = n.cut.contains(&(from, to));
            let cut_rep = n.cut.contains(&(to, from));
            let (loss, lat) = (n.loss, n.latency);
            let l1 = cut_req || n.rng.gen_bool(loss);
            let l2 = cut_rep || n.rng.gen_bool(loss);
            (svc, l1, l2, lat)
        };
        tokio::time::sleep(lat).await;
        let Some(svc) = svc else {
            return Err(format!("{to}: connection refused"));
        };
        if lost_req {
            tokio::time::sleep(timeout.saturating_sub(lat)).await;
            return Err(format!("{to}: timed out (request lost)"));
        }
        let reply = match tokio::time::timeout(timeout, svc.handle(rpc)).await {
            Ok(r) => r,
            Err(_) => return Err(format!("{to}: timed out")),
        };
        if lost_reply {
            tokio::time::sleep(timeout.saturating_sub(lat)).await;
            return Err(format!("{to}: timed out (reply lost)"));
        }
        tokio::time::sleep(lat).await;
        Ok(reply)
    }
}

/// (term, leader) pairs every replica reported, for the election-safety check.
#[derive(Clone, Default)]
struct Observed(Arc<Mutex<BTreeMap<u64, BTreeSet<NodeId>>>>);

struct Cluster {
    net: SimNet,
    dbs: BTreeMap<NodeId, Arc<redb::Database>>,
    members: BTreeMap<NodeId, String>,
    observed: Observed,
}

/// Heartbeat 20 ms, elections after 150–450 ms. openraft checks the election
/// timeout on a tick (1.5 heartbeats) and draws each replica's timeout once;
/// on a virtual clock with replicas started at the same instant their ticks
/// coincide, and with standard Raft's one-leader-per-term votes, candidates
/// whose timeouts round to the same tick split the vote again and again (the
/// majority side of a partition needs all three of its votes). Replicas are
/// started at seeded, different instants and the timeout range is wide: what
/// real clocks do by themselves.
fn config() -> openraft::Config {
    poolsvc::raft_config(20, 150, 450)
}

impl Cluster {
    async fn new(n: u64, seed: u64, loss: f64) -> Cluster {
        let net = SimNet(Arc::new(Mutex::new(Net {
            nodes: HashMap::new(),
            cut: HashSet::new(),
            loss,
            rng: StdRng::seed_from_u64(seed),
            latency: Duration::from_millis(1),
        })));
        let members: BTreeMap<NodeId, String> = (0..n).map(|i| (i, format!("sim-{i}"))).collect();
        let mut c = Cluster {
            net,
            dbs: BTreeMap::new(),
            members,
            observed: Observed::default(),
        };
        for id in 0..n {
            let skew = c.skew();
            tokio::time::sleep(skew).await;
            let store = Store::in_memory().unwrap();
            c.dbs.insert(id, store.db());
            c.start(id, store).await;
        }
        let first = c.svc(0);
        first.initialize(&c.members).await.unwrap();
        c
    }

    async fn start(&mut self, id: NodeId, store: Store) {
        let svc = PoolService::start(id, config(), store, self.net.clone())
            .await
            .unwrap();
        // record every (term, leader) this replica accepted: a committed vote
        // is one a quorum granted (the leader's own, or the leader a follower
        // follows)
        let mut rx = svc.raft.metrics();
        let obs = self.observed.clone();
        tokio::spawn(async move {
            loop {
                {
                    let v = rx.borrow_and_update().vote;
                    if v.is_committed() {
                        if let Some(l) = v.leader_id().voted_for() {
                            let t = v.leader_id().get_term();
                            obs.0.lock().unwrap().entry(t).or_default().insert(l);
                        }
                    }
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        self.net.0.lock().unwrap().nodes.insert(id, svc);
    }

    fn svc(&self, id: NodeId) -> PoolService {
        self.net.0.lock().unwrap().nodes[&id].clone()
    }

    fn alive(&self) -> Vec<NodeId> {
        let mut v: Vec<_> = self.net.0.lock().unwrap().nodes.keys().copied().collect();
        v.sort();
        v
    }

    async fn kill(&mut self, id: NodeId) {
        let svc = self.net.0.lock().unwrap().nodes.remove(&id).unwrap();
        svc.shutdown().await;
    }

    /// A seeded start offset under one tick.
    fn skew(&self) -> Duration {
        Duration::from_micros(self.net.0.lock().unwrap().rng.gen_range(0..30_000))
    }

    async fn restart(&mut self, id: NodeId) {
        let store = Store::with_db(self.dbs[&id].clone()).unwrap();
        self.start(id, store).await;
    }

    /// The leader all live replicas agree on, waiting up to `within`.
    async fn wait_leader(&self, within: Duration) -> Option<NodeId> {
        let t0 = tokio::time::Instant::now();
        while t0.elapsed() < within {
            let alive = self.alive();
            let leaders: BTreeSet<Option<NodeId>> = alive
                .iter()
                .map(|id| {
                    let s = self.svc(*id).status();
                    s.leader
                })
                .collect();
            if let Some(Some(l)) = leaders.iter().next() {
                if leaders.len() == 1 && alive.contains(l) && self.svc(*l).status().role == "leader"
                {
                    return Some(*l);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    fn client(&self) -> PoolClient<SimNet> {
        let mut c = PoolClient::new(self.members.clone(), self.net.clone());
        c.rpc_timeout = Duration::from_millis(500);
        c.deadline = Duration::from_secs(20);
        c
    }

    fn partition(&self, side_a: &[NodeId]) {
        let mut n = self.net.0.lock().unwrap();
        for a in side_a {
            for b in self.members.keys() {
                if !side_a.contains(b) {
                    n.cut.insert((*a, *b));
                    n.cut.insert((*b, *a));
                }
            }
        }
    }

    fn heal(&self) {
        self.net.0.lock().unwrap().cut.clear();
    }

    fn assert_one_leader_per_term(&self) {
        for (term, ls) in self.observed.0.lock().unwrap().iter() {
            assert!(ls.len() <= 1, "term {term} had leaders {ls:?}");
        }
    }

    fn terms_seen(&self) -> usize {
        self.observed.0.lock().unwrap().len()
    }
}

fn cont(i: usize) -> Command {
    Command::CreateCont {
        pool: "p".into(),
        cont: format!("c{i}"),
        props: BTreeMap::new(),
    }
}

/// Write containers `range` one by one; the ones acknowledged.
async fn write_conts(
    c: &mut PoolClient<SimNet>,
    range: std::ops::Range<usize>,
    acked: &mut BTreeSet<String>,
) {
    for i in range {
        match c.write(cont(i)).await {
            Ok(Reply::Done) => {
                acked.insert(format!("c{i}"));
            }
            // a retried write whose first attempt was applied: it is there
            Ok(Reply::Refused(e)) if e.contains("exists") => {
                acked.insert(format!("c{i}"));
            }
            Ok(r) => panic!("c{i}: {r:?}"),
            Err(e) => eprintln!("c{i} not acknowledged: {e}"),
        }
    }
}

/// Every acknowledged container is in a linearizable read, and nothing that was
/// never written is; every live replica applies the same state.
async fn check_state(
    cl: &Cluster,
    client: &mut PoolClient<SimNet>,
    acked: &BTreeSet<String>,
    attempted: usize,
) {
    let s = client.read().await.expect("linearizable read");
    let have: BTreeSet<String> = s.pools["p"].containers.keys().cloned().collect();
    let lost: Vec<_> = acked.difference(&have).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let asked: BTreeSet<String> = (0..attempted).map(|i| format!("c{i}")).collect();
    assert!(
        have.is_subset(&asked),
        "never written: {:?}",
        have.difference(&asked).collect::<Vec<_>>()
    );
    // replicas converge on the leader's state
    let t0 = tokio::time::Instant::now();
    loop {
        let states: Vec<_> = cl
            .alive()
            .iter()
            .map(|id| cl.svc(*id).local_state())
            .collect();
        if states
            .iter()
            .all(|x| x.pools.get("p").map(|p| p.containers.len()) == Some(have.len()))
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "replicas did not converge"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("POOLSVC_SEED") {
        Ok(s) => vec![s.parse().expect("POOLSVC_SEED is a number")],
        Err(_) => vec![1, 2, 3],
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn leader_killed_new_leader_elected_no_ack_lost() {
    for seed in seeds() {
        let mut cl = Cluster::new(3, seed, 0.02).await;
        cl.wait_leader(Duration::from_secs(5))
            .await
            .expect("first leader");
        let mut client = cl.client();
        let r = client
            .write(Command::CreatePool {
                pool: "p".into(),
                domains: 3,
                per_domain: 1,
            })
            .await
            .unwrap();
        // (a retry after a lost reply finds the pool made by the first try)
        assert!(
            r == Reply::MapVersion(1) || r == Reply::Refused("pool \"p\" exists".into()),
            "{r:?}"
        );
        let mut acked = BTreeSet::new();
        write_conts(&mut client, 0..20, &mut acked).await;
        // the leader now (lost heartbeats may have moved it since)
        let l0 = cl
            .wait_leader(Duration::from_secs(5))
            .await
            .expect("a leader");
        let term0 = cl.svc(l0).status().term;

        let t_kill = tokio::time::Instant::now();
        cl.kill(l0).await;
        let l1 = cl
            .wait_leader(Duration::from_secs(10))
            .await
            .expect("a new leader after the kill");
        let failover = t_kill.elapsed();
        assert_ne!(l1, l0);
        assert!(cl.svc(l1).status().term > term0);
        eprintln!("seed {seed}: leader {l0} killed, {l1} leads after {failover:?} (virtual)");

        // pool operations go on through the new leader (the client follows)
        let v = client
            .write(Command::SetTargetState {
                pool: "p".into(),
                target: l0 as u32,
                state: "DOWN".into(),
            })
            .await
            .unwrap();
        assert_eq!(v, Reply::MapVersion(2));
        write_conts(&mut client, 20..40, &mut acked).await;
        assert_ne!(client.leader(), Some(l0));
        check_state(&cl, &mut client, &acked, 40).await;
        assert!(
            acked.len() >= 38,
            "most writes acknowledged with 2% loss: {}",
            acked.len()
        );

        // the killed replica restarts from its redb and catches up
        cl.restart(l0).await;
        write_conts(&mut client, 40..45, &mut acked).await;
        check_state(&cl, &mut client, &acked, 45).await;
        let m = cl.svc(l0).local_state().pools["p"].map();
        assert_eq!(
            m.version(),
            2,
            "the restarted replica has the map change made while it was down"
        );
        cl.assert_one_leader_per_term();
        for id in cl.alive() {
            cl.kill(id).await;
        }
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn partition_never_two_leaders_in_a_term_nor_lost_acks() {
    for seed in seeds() {
        let mut cl = Cluster::new(5, seed, 0.05).await;
        cl.wait_leader(Duration::from_secs(5))
            .await
            .expect("first leader");
        let mut client = cl.client();
        client
            .write(Command::CreatePool {
                pool: "p".into(),
                domains: 5,
                per_domain: 1,
            })
            .await
            .unwrap();
        let mut acked = BTreeSet::new();
        write_conts(&mut client, 0..10, &mut acked).await;

        // the leader and one other in the minority
        let l0 = cl
            .wait_leader(Duration::from_secs(5))
            .await
            .expect("a leader");
        let other = (l0 + 1) % 5;
        cl.partition(&[l0, other]);
        // a write straight to the old leader cannot commit without a majority
        // (it waits, or redirects once it learns of a newer leader: never applies)
        let r = cl
            .net
            .call(
                poolsvc::net::CLIENT,
                l0,
                "",
                Rpc::Client(poolsvc::msg::ClientRequest::Write(cont(1000))),
                Duration::from_secs(2),
            )
            .await;
        assert!(
            !matches!(
                r,
                Ok(RpcReply::Client(poolsvc::msg::ClientReply::Applied { .. }))
            ),
            "the minority leader acknowledged a write: {r:?}"
        );

        // the majority elects a leader and takes writes
        let t0 = tokio::time::Instant::now();
        let mut l1 = None;
        while t0.elapsed() < Duration::from_secs(10) {
            let maj: Vec<_> = cl
                .alive()
                .into_iter()
                .filter(|i| *i != l0 && *i != other)
                .collect();
            if let Some(l) = maj.iter().find(|i| cl.svc(**i).status().role == "leader") {
                l1 = Some(*l);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let l1 = l1.unwrap_or_else(|| {
            let st: Vec<_> = cl.alive().iter().map(|i| cl.svc(*i).status()).collect();
            panic!("the majority side elects no leader: {st:?}")
        });
        eprintln!("seed {seed}: partition {{{l0},{other}}} | rest: {l1} leads the majority");
        write_conts(&mut client, 10..30, &mut acked).await;

        // heal: one leader again, the old one steps down, nothing acked is lost
        cl.heal();
        cl.wait_leader(Duration::from_secs(10))
            .await
            .expect("one leader after healing");
        write_conts(&mut client, 30..40, &mut acked).await;
        check_state(&cl, &mut client, &acked, 40).await;
        let s = client.read().await.unwrap();
        assert!(
            !s.pools["p"].containers.contains_key("c1000"),
            "the minority's write was applied"
        );
        cl.assert_one_leader_per_term();
        assert!(cl.terms_seen() >= 2);
        for id in cl.alive() {
            cl.kill(id).await;
        }
    }
}

/// Client sessions: an `OpenHandle` applied by the leader whose answer is
/// lost, the leader killed, the client's retry served by the next leader →
/// one handle (the retry answered with the first reply). Without a session
/// (the same run, `without_session`) the retry opens a second handle: the
/// test sees the difference.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retried_open_handle_after_leader_kill_opens_one_handle() {
    for seed in seeds() {
        for session in [true, false] {
            let mut cl = Cluster::new(3, seed, 0.0).await;
            let l0 = cl
                .wait_leader(Duration::from_secs(5))
                .await
                .expect("first leader");
            let mut client = cl.client();
            if !session {
                client = client.without_session();
            }
            client
                .write(Command::CreatePool {
                    pool: "p".into(),
                    domains: 3,
                    per_domain: 1,
                })
                .await
                .unwrap();
            // the leader's answers to the client are lost from now on
            cl.net
                .0
                .lock()
                .unwrap()
                .cut
                .insert((l0, poolsvc::net::CLIENT));
            let task = tokio::spawn(async move {
                let r = client
                    .write(Command::OpenHandle {
                        pool: "p".into(),
                        client: "app".into(),
                    })
                    .await;
                (client, r)
            });
            // applied (so committed) on the leader, its answer lost: kill it
            let t0 = tokio::time::Instant::now();
            while cl.svc(l0).local_state().pools["p"].handles.is_empty() {
                assert!(t0.elapsed() < Duration::from_secs(5), "never applied");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            cl.kill(l0).await;
            let (_client, r) = task.await.unwrap();
            let r = r.expect("the retried write is answered by the next leader");
            let l1 = cl
                .wait_leader(Duration::from_secs(10))
                .await
                .expect("a new leader");
            assert_ne!(l1, l0);
            let st = cl.client().read().await.unwrap();
            let handles = st.pools["p"].handles.len();
            eprintln!("seed {seed} session {session}: reply {r:?}, {handles} handle(s)");
            if session {
                assert_eq!(r, Reply::Handle(1), "the first application's reply");
                assert_eq!(handles, 1, "a retried OpenHandle opened a second handle");
            } else {
                assert_eq!(handles, 2, "without sessions the retry applies again");
            }
            for id in cl.alive() {
                cl.kill(id).await;
            }
        }
    }
}
