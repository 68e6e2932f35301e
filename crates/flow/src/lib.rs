//! # flow — flow table, megaflow cache and (later) offload (Open vSwitch model)
//!
//! Owns: packet parsing into a flow key, an OpenFlow-style table loaded from
//! ovs-ofctl syntax, classification with OVS's megaflow semantics, the datapath
//! cache (EMC + tuple-space megaflow classifier), and later the offload providers
//! and the revalidator.
//!
//! Depends on `wire` (L2–L4 views).
