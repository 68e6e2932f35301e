//! Network-partition fault injection for engine processes (tests only).
//!
//! An engine started with fault injection on (`dpustack engine
//! --fault-injection`) installs one process-wide [`PeerFaults`] table: the
//! engine ranks it must not send to (`drop_to`) and must not hear from
//! (`drop_from`), with each rank's addresses (object RPC and pool service).
//! The transports consult it on every engine-to-engine message:
//!
//! - the pool service's TCP transport (`poolsvc::net`): a message to a
//!   `drop_to` peer is lost (the caller waits its timeout, as for a lost
//!   packet); the server drops a request from a `drop_from` peer unanswered
//!   and, for a request from a `drop_to` peer, applies it but loses the reply
//!   — so a one-way cut A→B is message-level one-way (B's requests reach A,
//!   A's answers do not come back), which iptables on TCP cannot give (a
//!   one-way packet loss breaks TCP in both directions);
//! - the DTX senders (engine to engine, one-way messages) and the pool
//!   service's engine probes: a message to a `drop_to` address is lost.
//!
//! Not covered: the object RPC server does not look at `drop_from` (its
//! engine-to-engine traffic is one-way DTX messages, cut at the sender; but
//! a probe's answer to a rank in its `drop_to` is not lost, so a one-way cut
//! is two-way for probes only when both sides list each other), nor the
//! rebuild driver's copies (its probes are cut).
//!
//! One table per process: one engine per process (the `dpustack engine`
//! process). In a process that never installs it, every check is one relaxed
//! atomic load.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};

/// The rules in force.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rules {
    pub drop_to: BTreeSet<u64>,
    pub drop_from: BTreeSet<u64>,
}

/// The process's fault table.
#[derive(Debug)]
pub struct PeerFaults {
    /// Rank → its addresses (object RPC, pool service).
    addrs: BTreeMap<u64, Vec<String>>,
    rules: RwLock<(Rules, BTreeSet<String>)>,
}

static TABLE: OnceLock<PeerFaults> = OnceLock::new();
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Errors of fault injection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    #[error("fault injection is off in this process (engine started without --fault-injection)")]
    Off,
    #[error("fault injection already installed")]
    Installed,
    #[error("unknown rank {0}")]
    UnknownRank(u64),
}

/// Turn fault injection on for this process, with every rank's addresses.
/// No rule is in force until [`set`].
pub fn install(addrs: BTreeMap<u64, Vec<String>>) -> Result<(), FaultError> {
    TABLE
        .set(PeerFaults {
            addrs,
            rules: RwLock::new(Default::default()),
        })
        .map_err(|_| FaultError::Installed)?;
    tracing::warn!("fault injection is ON in this engine (a test setting: peers may be cut off)");
    Ok(())
}

/// Replace the rules (empty sets heal every cut).
pub fn set(rules: Rules) -> Result<(), FaultError> {
    let t = TABLE.get().ok_or(FaultError::Off)?;
    if let Some(r) = rules
        .drop_to
        .iter()
        .chain(rules.drop_from.iter())
        .find(|r| !t.addrs.contains_key(r))
    {
        return Err(FaultError::UnknownRank(*r));
    }
    let to_addrs: BTreeSet<String> = rules
        .drop_to
        .iter()
        .flat_map(|r| t.addrs.get(r).into_iter().flatten().cloned())
        .collect();
    let any = !rules.drop_to.is_empty() || !rules.drop_from.is_empty();
    tracing::warn!(
        drop_to = ?rules.drop_to,
        drop_from = ?rules.drop_from,
        "fault injection: rules set"
    );
    *t.rules.write().unwrap_or_else(|e| e.into_inner()) = (rules, to_addrs);
    ACTIVE.store(any, Ordering::Release);
    Ok(())
}

/// The rules in force (empty when off).
pub fn rules() -> Rules {
    match TABLE.get() {
        Some(t) => t.rules.read().unwrap_or_else(|e| e.into_inner()).0.clone(),
        None => Rules::default(),
    }
}

/// Whether a message to `addr` (a peer's object-RPC or pool-service address)
/// is lost.
pub fn drops_to_addr(addr: &str) -> bool {
    if !ACTIVE.load(Ordering::Acquire) {
        return false;
    }
    TABLE.get().is_some_and(|t| {
        t.rules
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .contains(addr)
    })
}

/// Whether a message to rank `r` is lost.
pub fn drops_to(r: u64) -> bool {
    if !ACTIVE.load(Ordering::Acquire) {
        return false;
    }
    TABLE.get().is_some_and(|t| {
        t.rules
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .drop_to
            .contains(&r)
    })
}

/// Whether a message from rank `r` is lost.
pub fn drops_from(r: u64) -> bool {
    if !ACTIVE.load(Ordering::Acquire) {
        return false;
    }
    TABLE.get().is_some_and(|t| {
        t.rules
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .drop_from
            .contains(&r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_then_rules_then_healed() {
        // one test: the table is process-wide
        assert!(!drops_to(1));
        assert_eq!(set(Rules::default()), Err(FaultError::Off));
        let addrs = BTreeMap::from([
            (
                0,
                vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()],
            ),
            (
                1,
                vec!["127.0.0.2:1".to_string(), "127.0.0.2:2".to_string()],
            ),
        ]);
        install(addrs.clone()).unwrap();
        assert_eq!(install(addrs), Err(FaultError::Installed));
        assert!(!drops_to(1) && !drops_to_addr("127.0.0.2:2"));
        let cut = Rules {
            drop_to: [1].into(),
            drop_from: [0].into(),
        };
        set(cut.clone()).unwrap();
        assert_eq!(rules(), cut);
        assert!(drops_to(1) && !drops_to(0));
        assert!(drops_to_addr("127.0.0.2:1") && drops_to_addr("127.0.0.2:2"));
        assert!(!drops_to_addr("127.0.0.1:1"));
        assert!(drops_from(0) && !drops_from(1));
        assert_eq!(
            set(Rules {
                drop_to: [7].into(),
                drop_from: Default::default()
            }),
            Err(FaultError::UnknownRank(7))
        );
        assert!(drops_to(1), "a refused rule set leaves the old one");
        set(Rules::default()).unwrap();
        assert!(!drops_to(1) && !drops_from(0) && !drops_to_addr("127.0.0.2:1"));
    }
}
