//! The lifetime and counters of one OpenFlow rule: kept by the flow table
//! ([`crate::xlate::FlowTable`]) per rule, credited and expired by
//! [`crate::ofproto`]. A leaf module, so that the table and ofproto do not
//! import each other.

/// Lifetime and counters of one OpenFlow rule (times in ms of the caller's clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Install time (`duration` counts from here).
    pub created: u64,
    /// Last modification (the hard timeout counts from here); = `created` here, as
    /// there is no modify-flows.
    pub modified: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Last use; the install time if never used.
    pub used: u64,
}

impl RuleStats {
    pub fn new(now: u64) -> RuleStats {
        RuleStats {
            created: now,
            modified: now,
            packets: 0,
            bytes: 0,
            used: now,
        }
    }
}
