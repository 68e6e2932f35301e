//! The Raft storage of one replica, in redb (the engine's embedded store):
//! the log (index → entry), the vote, the committed id, the applied state
//! machine and the last snapshot. Every write is one redb transaction
//! committed before the call returns (fsync with a file backend), so what
//! openraft was told is persisted is persisted.
//!
//! Values are JSON (serde): the log entries, vote and snapshots are small
//! control-plane records; JSON keeps them readable with any redb tool.

// openraft's trait methods return its `StorageError` (224 bytes); the helpers
// here return the same type so `?` needs no conversion
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogState, RaftLogReader, RaftSnapshotBuilder, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftStorage, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{PoolSvcState, Reply};
use crate::{NodeId, TypeConfig};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const K_VOTE: &str = "vote";
const K_COMMITTED: &str = "committed";
const K_PURGED: &str = "last_purged";
const K_SM: &str = "state_machine";
const K_SNAP: &str = "snapshot";

type SErr = StorageError<NodeId>;

fn io(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: impl std::fmt::Display) -> SErr {
    StorageIOError::new(subject, verb, AnyError::error(e.to_string())).into()
}
fn rd(e: impl std::fmt::Display) -> SErr {
    io(ErrorSubject::Store, ErrorVerb::Read, e)
}
fn wr(e: impl std::fmt::Display) -> SErr {
    io(ErrorSubject::Store, ErrorVerb::Write, e)
}

/// The applied state machine with the Raft bookkeeping that goes with it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, openraft::BasicNode>,
    pub state: PoolSvcState,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
}

/// One replica's storage; clones share the database and the in-memory copy of
/// the state machine (openraft asks for separate log-reader and
/// snapshot-builder handles).
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    sm: Arc<Mutex<Applied>>,
    /// The hosting engine's map versions, raised as map changes apply (the
    /// engine refuses object I/O sent with an older map).
    versions: Option<Arc<obj::engine::MapVersions>>,
}

impl Store {
    /// Open (or create) the store in the file `path`.
    pub fn open(path: &Path) -> Result<Store, redb::Error> {
        let db = Database::create(path)?;
        Store::with_db(Arc::new(db))
    }

    /// A store in memory (simulation tests: a "restarted" replica is a new
    /// `Store` over the same database).
    pub fn in_memory() -> Result<Store, redb::Error> {
        let db = Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?;
        Store::with_db(Arc::new(db))
    }

    /// A store over an existing database (reopened after a simulated crash).
    pub fn with_db(db: Arc<Database>) -> Result<Store, redb::Error> {
        let tx = db.begin_write()?;
        tx.open_table(LOG)?;
        let sm = {
            let meta = tx.open_table(META)?;
            let v = meta.get(K_SM)?.map(|g| g.value().to_vec());
            match v {
                Some(b) => serde_json::from_slice(&b)
                    .map_err(|e| redb::Error::Corrupted(format!("pool service state: {e}")))?,
                None => Applied::default(),
            }
        };
        tx.commit()?;
        Ok(Store {
            db,
            sm: Arc::new(Mutex::new(sm)),
            versions: None,
        })
    }

    /// Publishes every pool's map version to `m` now and after every apply
    /// (the engine process hosting this replica checks object I/O against
    /// them).
    pub fn with_map_versions(mut self, m: Arc<obj::engine::MapVersions>) -> Self {
        self.versions = Some(m);
        let a = self.applied();
        self.publish(&a);
        self
    }

    fn publish(&self, a: &Applied) {
        if let Some(m) = &self.versions {
            for (label, p) in &a.state.pools {
                let map = p.map();
                m.raise(label, map.version());
                // the engine's DTX takes these as its peers' liveness
                let mut down: Vec<u32> = map
                    .targets()
                    .iter()
                    .filter(|t| {
                        matches!(
                            t.state,
                            obj::placement::TargetState::Down
                                | obj::placement::TargetState::Excluded
                        )
                    })
                    .map(|t| t.domain)
                    .collect();
                down.dedup();
                m.publish_down(label, map.version(), down);
                // a DTX leader checks its clients' participants against it
                m.publish_map(label, map.clone());
            }
        }
    }

    /// The database (to reopen it after a simulated crash).
    pub fn db(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// A copy of the applied state (what this replica has applied; may lag the
    /// leader).
    pub fn applied(&self) -> Applied {
        self.sm.lock().unwrap().clone()
    }

    fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SErr> {
        let tx = self.db.begin_read().map_err(rd)?;
        let t = tx.open_table(META).map_err(rd)?;
        match t.get(key).map_err(rd)? {
            Some(g) => Ok(Some(serde_json::from_slice(g.value()).map_err(rd)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(&self, key: &str, v: &T) -> Result<(), SErr> {
        self.put_meta_with(key, v, Durability::Immediate)
    }

    /// `put_meta` with the commit's durability: `None` for what may be lost
    /// in a crash (redb makes it durable with the next fsync'd commit).
    fn put_meta_with<T: Serialize>(
        &self,
        key: &str,
        v: &T,
        durability: Durability,
    ) -> Result<(), SErr> {
        let b = serde_json::to_vec(v).map_err(wr)?;
        let mut tx = self.db.begin_write().map_err(wr)?;
        tx.set_durability(durability).map_err(wr)?;
        tx.open_table(META)
            .map_err(wr)?
            .insert(key, b.as_slice())
            .map_err(wr)?;
        tx.commit().map_err(wr)
    }

    fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, SErr> {
        let tx = self.db.begin_read().map_err(rd)?;
        let t = tx.open_table(LOG).map_err(rd)?;
        let last = t.last().map_err(rd)?;
        let r = match last {
            Some((_, v)) => {
                let e: Entry<TypeConfig> = serde_json::from_slice(v.value()).map_err(rd)?;
                Some(e.log_id)
            }
            None => None,
        };
        Ok(r)
    }

    /// Remove log entries with index in `range`.
    fn remove_logs(&self, range: impl RangeBounds<u64>) -> Result<(), SErr> {
        let tx = self.db.begin_write().map_err(wr)?;
        {
            let mut t = tx.open_table(LOG).map_err(wr)?;
            t.retain_in(range, |_, _| false).map_err(wr)?;
        }
        tx.commit().map_err(wr)
    }

    fn snapshot_of(&self, a: &Applied) -> Result<Snapshot<TypeConfig>, SErr> {
        let data = serde_json::to_vec(a).map_err(rd)?;
        let meta = SnapshotMeta {
            last_log_id: a.last_applied,
            last_membership: a.membership.clone(),
            snapshot_id: match a.last_applied {
                Some(l) => format!("{}-{}", l.leader_id, l.index),
                None => "empty".to_string(),
            },
        };
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

fn bound_owned(b: Bound<&u64>) -> Bound<u64> {
    match b {
        Bound::Included(x) => Bound::Included(*x),
        Bound::Excluded(x) => Bound::Excluded(*x),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl RaftLogReader<TypeConfig> for Store {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, SErr> {
        let r = (
            bound_owned(range.start_bound()),
            bound_owned(range.end_bound()),
        );
        let tx = self.db.begin_read().map_err(rd)?;
        let t = tx.open_table(LOG).map_err(rd)?;
        let mut out = Vec::new();
        for kv in t.range::<u64>(r).map_err(rd)? {
            let (_, v) = kv.map_err(rd)?;
            out.push(serde_json::from_slice(v.value()).map_err(rd)?);
        }
        Ok(out)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Store {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let a = self.applied();
        let snap = self.snapshot_of(&a)?;
        let stored = StoredSnapshot {
            meta: snap.meta.clone(),
            data: snap.snapshot.get_ref().clone(),
        };
        self.put_meta(K_SNAP, &stored)?;
        Ok(snap)
    }
}

impl RaftStorage<TypeConfig> for Store {
    type LogReader = Store;
    type SnapshotBuilder = Store;

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), SErr> {
        self.put_meta(K_VOTE, vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, SErr> {
        self.get_meta(K_VOTE)
    }

    /// Not fsync'd: the committed index is a hint openraft may lose (it
    /// learns it again from the leader, and applies only what a quorum holds);
    /// an fsync per commit-index advance doubled this store's fsyncs, and on a
    /// slow disk each one held the replica's thread (see runner.rs).
    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), SErr> {
        self.put_meta_with(K_COMMITTED, &committed, Durability::None)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, SErr> {
        Ok(self
            .get_meta::<Option<LogId<NodeId>>>(K_COMMITTED)?
            .flatten())
    }

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let last_purged: Option<LogId<NodeId>> = self.get_meta(K_PURGED)?.flatten();
        let last = self.last_log_id()?.or(last_purged);
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn append_to_log<I>(&mut self, entries: I) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let tx = self.db.begin_write().map_err(wr)?;
        {
            let mut t = tx.open_table(LOG).map_err(wr)?;
            for e in entries {
                let b = serde_json::to_vec(&e).map_err(wr)?;
                t.insert(e.log_id.index, b.as_slice()).map_err(wr)?;
            }
        }
        tx.commit().map_err(wr)
    }

    async fn delete_conflict_logs_since(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        self.remove_logs(log_id.index..)
    }

    async fn purge_logs_upto(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        self.put_meta(K_PURGED, &Some(log_id))?;
        self.remove_logs(..=log_id.index)
    }

    async fn last_applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<NodeId>>,
            StoredMembership<NodeId, openraft::BasicNode>,
        ),
        SErr,
    > {
        let a = self.sm.lock().unwrap();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply_to_state_machine(
        &mut self,
        entries: &[Entry<TypeConfig>],
    ) -> Result<Vec<Reply>, SErr> {
        let mut a = self.applied();
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            a.last_applied = Some(e.log_id);
            match &e.payload {
                EntryPayload::Blank => out.push(Reply::Done),
                EntryPayload::Normal(cmd) => out.push(a.state.apply(cmd)),
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    out.push(Reply::Done)
                }
            }
        }
        // persisted before the replies are returned (and before the in-memory
        // copy changes), so a crash never shows an applied-but-lost command
        self.put_meta(K_SM, &a)?;
        self.publish(&a);
        *self.sm.lock().unwrap() = a;
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let data = snapshot.into_inner();
        let mut a: Applied = serde_json::from_slice(&data).map_err(wr)?;
        a.last_applied = meta.last_log_id;
        a.membership = meta.last_membership.clone();
        self.put_meta(
            K_SNAP,
            &StoredSnapshot {
                meta: meta.clone(),
                data,
            },
        )?;
        self.put_meta(K_SM, &a)?;
        self.publish(&a);
        *self.sm.lock().unwrap() = a;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        Ok(self.get_meta::<StoredSnapshot>(K_SNAP)?.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
