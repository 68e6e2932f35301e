//! Flow offload (OVS `netdev-offload` model): providers that put datapath megaflows
//! into a NIC, the emulated NIC they program, and the offload pipeline (threads with
//! work queues) that feeds them without blocking forwarding.
//!
//! * [`OffloadProvider`]: put / del / stats (query with reset) / flush / capabilities,
//!   and the hardware receive path of the NIC it drives ([`OffloadProvider::rx`]).
//! * [`nic`]: the emulated NIC table (capacity, supported fields, per-insert cost,
//!   failure injection) both providers program.
//! * [`rte`]: rte_flow-like provider: pattern items + actions, full or partial (MARK).
//! * [`tc`]: tc-flower-like provider: flower keys + actions, chains, priorities,
//!   skip_sw / skip_hw, ufid cookie.
//! * [`tc_linux`] (feature `driver`): the same translation programmed into the Linux
//!   kernel's tc flower (skip_hw) over rtnetlink ([`netlink`]: the messages, sans-IO).
//! * [`pipeline`]: hw-offload on/off, provider priority, N offload threads each with an
//!   MPSC queue of ADD / MOD / DEL / FLUSH, per-flow state.
//!
//! Every mask bit of a megaflow must be consumed by the translation, or the flow is
//! refused with a reason naming the fields left over (the flow stays in software).

pub mod netlink;
pub mod nic;
pub mod pipeline;
pub mod rte;
pub mod tc;
#[cfg(feature = "driver")]
pub mod tc_linux;
#[cfg(test)]
mod tests;

use crate::key::{f, Fd, FlowKey};
use crate::xlate::OdpAction;

pub use pipeline::{Offload, OffloadConfig, OffloadCounters, OffloadOp, OffloadState};

/// What a provider is asked to offload: one megaflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    /// Masked key (value & mask).
    pub key: FlowKey,
    pub mask: FlowKey,
    pub actions: Vec<OdpAction>,
}

/// How a flow was offloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloaded {
    /// Match and actions in the NIC: packets never reach software. `in_hw` false: the
    /// rule sits in a software path of the provider (tc `skip_hw`).
    Full { in_hw: bool },
    /// Match in the NIC, actions in software: the NIC marks packets with `mark` and
    /// software finds the flow by that mark (skipping the classifier).
    Partial { mark: u32 },
}

/// Hardware counters of one offloaded flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HwStats {
    pub packets: u64,
    pub bytes: u64,
    /// Last hit (the caller's clock, as passed to `rx`); 0 = never.
    pub used: u64,
}

/// Why an offload failed. The flow stays in software; the reason is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The provider cannot express the match or the actions.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The NIC table is full.
    #[error("NIC table full ({0} entries)")]
    TableFull(usize),
    /// The NIC refused the rule (injected failure or device error).
    #[error("device error: {0}")]
    Device(String),
    /// No such offloaded flow.
    #[error("flow {0:#x} not offloaded")]
    NotFound(u64),
}

/// Provider capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Can the provider put actions in hardware.
    pub full: bool,
    /// Can it do partial offload (MARK + software actions).
    pub partial: bool,
    /// The key bits the NIC can match on.
    pub fields: FlowKey,
    /// Entries the NIC table holds.
    pub capacity: usize,
}

/// What the hardware receive path did with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwRx {
    /// No rule matched: software handles the frame.
    Miss,
    /// A partial-offload rule matched: software runs the flow with this mark.
    Mark(u32),
    /// A full-offload rule matched and the NIC executed its actions.
    Done(crate::exec::Executed),
}

/// An offload provider (OVS `netdev_flow_api`).
pub trait OffloadProvider: Send + Sync {
    /// Short name: `rte`, `tc` (what `dump-flows` prints as `dp:NAME`).
    fn name(&self) -> &'static str;
    fn caps(&self) -> Caps;
    /// Puts (or replaces: MOD) the flow `ufid`. On failure nothing of it stays in the
    /// NIC (a replaced rule is removed too). `mark` is used for partial offload.
    fn put(&self, ufid: u64, spec: &FlowSpec, mark: u32) -> Result<Offloaded, OffloadError>;
    /// Removes the flow; returns its counters since the last reset.
    fn del(&self, ufid: u64) -> Result<HwStats, OffloadError>;
    /// The flow's counters since the last reset; `reset` zeroes them (COUNT query).
    fn stats(&self, ufid: u64, reset: bool) -> Result<HwStats, OffloadError>;
    /// Removes every flow; returns how many.
    fn flush(&self) -> usize;
    /// Number of flows in the provider.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The NIC's receive path: look the frame (parsed into `key`) up in the hardware
    /// table at `now`; a match runs its actions on the frame.
    fn rx_key(&self, key: &FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx;
    /// [`Self::rx_key`] parsing the frame first.
    fn rx(&self, in_port: u32, frame: &mut Vec<u8>, now: u64) -> HwRx {
        let k = FlowKey::from_packet(in_port, frame);
        self.rx_key(&k, frame, now)
    }
}

/// Names of the key fields (for refusal reasons and supported-field sets).
pub const FIELDS: &[(&str, Fd)] = &[
    ("in_port", f::IN_PORT),
    ("recirc_id", f::RECIRC_ID),
    ("dl_dst", f::DL_DST),
    ("dl_src", f::DL_SRC),
    ("dl_type", f::DL_TYPE),
    ("vlan_tpid", f::VLAN0_TPID),
    ("vlan_tci", f::VLAN0_TCI),
    ("vlan1_tpid", f::VLAN1_TPID),
    ("vlan1_tci", f::VLAN1_TCI),
    ("nw_src", f::NW_SRC),
    ("nw_dst", f::NW_DST),
    ("ipv6_src", f::IPV6_SRC_HI),
    ("ipv6_src", f::IPV6_SRC_LO),
    ("ipv6_dst", f::IPV6_DST_HI),
    ("ipv6_dst", f::IPV6_DST_LO),
    ("ipv6_label", f::IPV6_LABEL),
    ("nw_frag", f::NW_FRAG),
    ("nw_tos", f::NW_TOS),
    ("nw_ttl", f::NW_TTL),
    ("nw_proto", f::NW_PROTO),
    ("nd_target", f::ND_TARGET_HI),
    ("nd_target", f::ND_TARGET_LO),
    ("arp_sha", f::ARP_SHA),
    ("tcp_flags", f::TCP_FLAGS),
    ("arp_tha", f::ARP_THA),
    ("tp_src", f::TP_SRC),
    ("tp_dst", f::TP_DST),
    ("dp_hash", f::DP_HASH),
];

/// A set of fields as a mask (every bit of each named field); unknown names are an error.
pub fn field_mask(names: &[&str]) -> Result<FlowKey, String> {
    let mut m = FlowKey::ZERO;
    for n in names {
        let mut found = false;
        for (name, fd) in FIELDS {
            if name == n {
                m.full(*fd);
                found = true;
            }
        }
        if !found {
            return Err(format!("unknown field {n:?}"));
        }
    }
    Ok(m)
}

/// Every field.
pub fn all_fields() -> FlowKey {
    let mut m = FlowKey::ZERO;
    for (_, fd) in FIELDS {
        m.full(*fd);
    }
    m
}

/// Names of the fields with bits set in `m` (deduplicated, in key order).
pub fn field_names(m: &FlowKey) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for (name, fd) in FIELDS {
        if m.get(*fd) != 0 && !v.contains(name) {
            v.push(name);
        }
    }
    v
}

/// Walks a megaflow's mask during translation: each field taken is consumed; what is
/// left at the end was not expressed (the flow is refused).
#[derive(Debug, Clone)]
pub(crate) struct MaskCursor {
    pub key: FlowKey,
    rem: FlowKey,
}

impl MaskCursor {
    pub fn new(spec: &FlowSpec) -> MaskCursor {
        MaskCursor {
            key: spec.key.and(&spec.mask),
            rem: spec.mask,
        }
    }
    /// (value, mask) of the field's bits not consumed yet; consumes them.
    pub fn take(&mut self, fd: Fd) -> (u64, u64) {
        let m = self.rem.get(fd);
        self.rem.set(fd, 0);
        (self.key.get(fd) & m, m)
    }
    /// Takes a field that must be matched exactly or not at all (`what` names it in
    /// the refusal).
    pub fn take_exact(&mut self, fd: Fd, what: &str) -> Result<Option<u64>, OffloadError> {
        let (v, m) = self.take(fd);
        if m == 0 {
            Ok(None)
        } else if m == fd.ones() {
            Ok(Some(v))
        } else {
            Err(OffloadError::Unsupported(format!(
                "{what} can only be matched exactly (mask {m:#x})"
            )))
        }
    }
    /// Mask bits of the field not consumed yet (without consuming).
    pub fn peek_mask(&self, fd: Fd) -> u64 {
        self.rem.get(fd)
    }
    /// Refuses the flow if any mask bit was not consumed.
    pub fn finish(&self) -> Result<(), OffloadError> {
        if self.rem.is_zero() {
            Ok(())
        } else {
            Err(OffloadError::Unsupported(format!(
                "match on {} not expressible",
                field_names(&self.rem).join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn field_sets_and_names() {
        let m = field_mask(&["nw_src", "tp_dst"]).unwrap();
        assert_eq!(field_names(&m), vec!["nw_src", "tp_dst"]);
        assert!(field_mask(&["bogus"]).is_err());
        let spec = FlowSpec {
            key: FlowKey::ZERO,
            mask: m,
            actions: vec![],
        };
        let mut c = MaskCursor::new(&spec);
        assert_eq!(c.take(f::NW_SRC).1, 0xffff_ffff);
        let e = c.finish().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported: match on tp_dst not expressible"
        );
        c.take(f::TP_DST);
        c.finish().unwrap();
    }
}
