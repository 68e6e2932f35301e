//! The DTX records of an engine ([`super::dtx::LogRec`]) in redb
//! (`DATA_DIR/dtx.redb`), with the VOS's transaction discipline
//! (docs/obj.md "Durability"): a batch of records is one write transaction,
//! committed with fsync (`Durability::Immediate`) before anything that
//! depends on it is sent; a batch of `Resolved` records only may be
//! committed without fsync (the next durable commit carries it; a lost one
//! only makes an entry resolve again after a restart).
//!
//! Tables: `prep` (DTX id → encoded `Prepared` record: the entries a
//! restart must resolve), `done` (DTX id → committed flag and wall-clock
//! seconds: outcomes, kept `keep` and pruned at open), `meta` (`rank`: the
//! engine's rank once known), `addrs` (rank → address of peers named in
//! prepared entries, so a restarted engine can ask them).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::dtx::{DtxId, LogRec, Rank};

const PREP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("prep");
const DONE: TableDefinition<&[u8], (bool, u64)> = TableDefinition::new("done");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const ADDRS: TableDefinition<u32, &str> = TableDefinition::new("addrs");

/// Errors of the DTX log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("dtx log: {0}")]
    Db(String),
    #[error("dtx log: damaged record: {0}")]
    Damaged(#[from] crate::rpc::WireError),
}

fn dberr<E: std::fmt::Display>(e: E) -> LogError {
    LogError::Db(e.to_string())
}

/// What a restarted engine finds.
#[derive(Debug, Default)]
pub struct Loaded {
    pub rank: Option<Rank>,
    /// `Resolved` outcomes first, then the `Prepared` entries still open.
    pub recs: Vec<LogRec>,
    pub addrs: Vec<(Rank, String)>,
}

/// The open log.
pub struct DtxLog {
    db: Database,
}

fn wall_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl DtxLog {
    /// Opens (or creates) the log at `path`.
    pub fn open(path: &Path) -> Result<DtxLog, LogError> {
        let db = Database::create(path).map_err(dberr)?;
        let w = db.begin_write().map_err(dberr)?;
        {
            w.open_table(PREP).map_err(dberr)?;
            w.open_table(DONE).map_err(dberr)?;
            w.open_table(META).map_err(dberr)?;
            w.open_table(ADDRS).map_err(dberr)?;
        }
        w.commit().map_err(dberr)?;
        Ok(DtxLog { db })
    }

    /// Everything to restore; outcomes older than `keep` are deleted.
    pub fn load(&self, keep: Duration) -> Result<Loaded, LogError> {
        let mut out = Loaded::default();
        let now = wall_secs();
        let mut old = Vec::new();
        {
            let r = self.db.begin_read().map_err(dberr)?;
            if let Some(v) = r
                .open_table(META)
                .map_err(dberr)?
                .get("rank")
                .map_err(dberr)?
            {
                out.rank = u32::try_from(v.value()).ok();
            }
            for e in r.open_table(ADDRS).map_err(dberr)?.iter().map_err(dberr)? {
                let (k, v) = e.map_err(dberr)?;
                out.addrs.push((k.value(), v.value().to_string()));
            }
            for e in r.open_table(DONE).map_err(dberr)?.iter().map_err(dberr)? {
                let (k, v) = e.map_err(dberr)?;
                let (committed, at) = v.value();
                if now.saturating_sub(at) > keep.as_secs() {
                    old.push(k.value().to_vec());
                    continue;
                }
                out.recs.push(LogRec::Resolved {
                    id: parse_key(k.value())?,
                    committed,
                });
            }
            for e in r.open_table(PREP).map_err(dberr)?.iter().map_err(dberr)? {
                let (_, v) = e.map_err(dberr)?;
                out.recs.push(LogRec::parse(v.value())?);
            }
        }
        if !old.is_empty() {
            let w = self.db.begin_write().map_err(dberr)?;
            {
                let mut t = w.open_table(DONE).map_err(dberr)?;
                for k in &old {
                    t.remove(k.as_slice()).map_err(dberr)?;
                }
            }
            w.commit().map_err(dberr)?;
        }
        Ok(out)
    }

    /// Writes `recs` (and the peers' addresses, the rank) in one
    /// transaction; durable when it returns if `durable`.
    pub fn write(
        &self,
        rank: Option<Rank>,
        recs: &[LogRec],
        addrs: &[(Rank, String)],
        durable: bool,
    ) -> Result<(), LogError> {
        let mut w = self.db.begin_write().map_err(dberr)?;
        w.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(dberr)?;
        {
            let mut prep = w.open_table(PREP).map_err(dberr)?;
            let mut done = w.open_table(DONE).map_err(dberr)?;
            let mut buf = Vec::new();
            let now = wall_secs();
            for r in recs {
                let k = LogRec::key(&r.id());
                match r {
                    LogRec::Prepared { .. } => {
                        buf.clear();
                        r.emit(&mut buf);
                        prep.insert(k.as_slice(), buf.as_slice()).map_err(dberr)?;
                    }
                    LogRec::Resolved { committed, .. } => {
                        prep.remove(k.as_slice()).map_err(dberr)?;
                        done.insert(k.as_slice(), (*committed, now))
                            .map_err(dberr)?;
                    }
                }
            }
            if !addrs.is_empty() {
                let mut t = w.open_table(ADDRS).map_err(dberr)?;
                for (r, a) in addrs {
                    t.insert(*r, a.as_str()).map_err(dberr)?;
                }
            }
            if let Some(r) = rank {
                w.open_table(META)
                    .map_err(dberr)?
                    .insert("rank", u64::from(r))
                    .map_err(dberr)?;
            }
        }
        w.commit().map_err(dberr)
    }
}

fn parse_key(k: &[u8]) -> Result<DtxId, LogError> {
    let bad = || {
        LogError::Damaged(crate::rpc::WireError::BadValue {
            field: "dtx record key length",
            value: k.len() as u64,
        })
    };
    let k: &[u8; 20] = k.try_into().map_err(|_| bad())?;
    let mut a = [0u8; 4];
    a.copy_from_slice(&k[..4]);
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[4..12]);
    let mut c = [0u8; 8];
    c.copy_from_slice(&k[12..]);
    Ok(DtxId {
        leader: u32::from_be_bytes(a),
        incarnation: u64::from_be_bytes(b),
        seq: u64::from_be_bytes(c),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::dtx::Update;

    #[test]
    fn records_survive_a_reopen_and_resolved_ones_drop_their_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dtx.redb");
        let id = |seq| DtxId {
            leader: 1,
            incarnation: 7,
            seq,
        };
        let prep = |seq| LogRec::Prepared {
            id: id(seq),
            epoch: 100 + seq,
            participants: vec![1, 2],
            update: Update {
                keys: vec![b"k".to_vec()],
                payload: b"v".to_vec(),
            },
        };
        {
            let log = DtxLog::open(&path).unwrap();
            log.write(Some(2), &[prep(1), prep(2)], &[(1, "a:1".into())], true)
                .unwrap();
            log.write(
                None,
                &[LogRec::Resolved {
                    id: id(1),
                    committed: true,
                }],
                &[],
                true,
            )
            .unwrap();
        }
        let log = DtxLog::open(&path).unwrap();
        let l = log.load(Duration::from_secs(60)).unwrap();
        assert_eq!(l.rank, Some(2));
        assert_eq!(l.addrs, vec![(1, "a:1".to_string())]);
        assert_eq!(
            l.recs,
            vec![
                LogRec::Resolved {
                    id: id(1),
                    committed: true
                },
                prep(2)
            ]
        );
    }
}
