//! OpenFlow groups as Open vSwitch 3.1 runs them (ofproto/ofproto-dpif.c
//! `group_setup_dp_hash_table`, ofproto-dpif-xlate.c `xlate_group_action`): the group
//! table entries, the `dp_hash` bucket map of select groups, group statistics and the
//! datapath `hash(sym_l4(0))` function (lib/flow.c `flow_hash_symmetric_l3l4`).

use crate::key::{f, FlowKey, FRAG_MASK};
use crate::ofctl::{Group, GroupType};
use wire::ethernet::{ethertype, ipproto};

/// OVS `MAX_SELECT_GROUP_HASH_VALUES` / the 256 hash values the default method allows.
pub const MAX_HASH_VALUES: u64 = 256;

/// OpenFlow `OFPP_CONTROLLER` as a `watch_port`.
pub const OFPP_CONTROLLER: u32 = 0xffff_fffd;

/// A group as installed: the group, the derived select-bucket map, its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub group: Group,
    /// Select groups (OVS default selection method `dp_hash`, symmetric L4 hash, basis
    /// 0): bucket index for each of the `hash_mask + 1` hash values (Webster's method
    /// over the weights).
    pub hash_map: Vec<usize>,
    pub hash_mask: u32,
    pub stats: GroupStats,
}

/// `ovs-ofctl dump-group-stats` counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupStats {
    pub packets: u64,
    pub bytes: u64,
    /// Per bucket (same order as the group's buckets).
    pub buckets: Vec<(u64, u64)>,
}

/// Why a group cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("group {0}: a select group with these weights needs more than 256 hash values; OVS then falls back to its slow-path `hash` selection, which is not implemented")]
    TooManyHashValues(u32),
    #[error("group {0}: a select group whose weights are all 0 uses OVS's slow-path `hash` selection, which is not implemented")]
    ZeroWeight(u32),
    #[error("group {0}: a select group without buckets uses OVS's slow-path `hash` selection, which is not implemented")]
    NoBuckets(u32),
}

impl GroupEntry {
    /// Builds the entry; select groups get OVS's `dp_hash` table (or an error where OVS
    /// would fall back to the default hash method).
    pub fn new(group: Group) -> Result<GroupEntry, GroupError> {
        let n = group.buckets.len();
        let mut e = GroupEntry {
            hash_map: Vec::new(),
            hash_mask: 0,
            stats: GroupStats {
                buckets: vec![(0, 0); n],
                ..Default::default()
            },
            group,
        };
        if e.group.kind == GroupType::Select {
            let id = e.group.group_id;
            if n == 0 {
                return Err(GroupError::NoBuckets(id));
            }
            let total: u64 = e.group.buckets.iter().map(|b| b.weight as u64).sum();
            if total == 0 {
                return Err(GroupError::ZeroWeight(id));
            }
            let min = e
                .group
                .buckets
                .iter()
                .filter(|b| b.weight > 0)
                .map(|b| b.weight as u64)
                .min()
                .unwrap_or(u16::MAX as u64);
            let n_hash = total.div_ceil(min).next_power_of_two().max(16);
            if n_hash > MAX_HASH_VALUES {
                return Err(GroupError::TooManyHashValues(id));
            }
            // Webster's method (ties go to the first bucket, as OVS's strict `>`).
            let mut div = vec![1u32; n];
            let mut val: Vec<f64> = e.group.buckets.iter().map(|b| b.weight as f64).collect();
            for _ in 0..n_hash {
                let mut w = 0;
                for i in 1..n {
                    if val[i] > val[w] {
                        w = i;
                    }
                }
                div[w] += 2;
                val[w] = e.group.buckets[w].weight as f64 / div[w] as f64;
                e.hash_map.push(w);
            }
            e.hash_mask = (n_hash - 1) as u32;
        }
        Ok(e)
    }
}

fn mhash_add(hash: u32, data: u32) -> u32 {
    let mut h = hash;
    if data != 0 {
        let d = data
            .wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593);
        h ^= d;
    }
    h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

fn mhash_finish(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

fn hash_add64(h: u32, d: u64) -> u32 {
    mhash_add(mhash_add(h, d as u32), (d >> 32) as u32)
}

/// OVS's `flow_hash_symmetric_l3l4(flow, basis, false)` (the datapath action
/// `hash(sym_l4(basis))`) on a parsed packet, as an x86-64 build without SSE 4.2
/// computes it (struct flow fields are in network byte order in memory and read as
/// little-endian words).
pub fn hash_sym_l4(k: &FlowKey, basis: u32) -> u32 {
    let mut h = basis;
    let dl_type = k.dl_type();
    if dl_type == ethertype::IPV4 {
        let x = (k.get(f::NW_SRC) ^ k.get(f::NW_DST)) as u32;
        h = mhash_add(h, x.swap_bytes());
    } else if dl_type == ethertype::IPV6 {
        for (s, d) in [
            (f::IPV6_SRC_HI, f::IPV6_DST_HI),
            (f::IPV6_SRC_LO, f::IPV6_DST_LO),
        ] {
            h = hash_add64(h, (k.get(s) ^ k.get(d)).swap_bytes());
        }
    } else {
        return hash_sym_l2(k, basis);
    }
    let proto = k.nw_proto();
    h = mhash_add(h, proto as u32);
    if k.nw_frag() & FRAG_MASK == 0 && (proto == ipproto::TCP || proto == ipproto::SCTP) {
        let x = (k.get(f::TP_SRC) ^ k.get(f::TP_DST)) as u16;
        h = mhash_add(h, x.swap_bytes() as u32);
    }
    mhash_finish(h ^ basis)
}

/// OVS `flow_hash_symmetric_l2`.
fn hash_sym_l2(k: &FlowKey, basis: u32) -> u32 {
    let x = (k.get(f::DL_SRC) ^ k.get(f::DL_DST)).to_be_bytes(); // 48 bits in the low bytes
    let mac = &x[2..8];
    let tci = ((k.get(f::VLAN0_TCI) ^ k.get(f::VLAN1_TCI)) as u16) & 0x0fff;
    let et = k.dl_type();
    let w0 = u32::from_le_bytes([(et >> 8) as u8, et as u8, (tci >> 8) as u8, tci as u8]);
    let w1 = u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]);
    let w2 = u32::from_le_bytes([mac[4], mac[5], 0, 0]);
    let mut h = basis;
    h = mhash_add(h, w0);
    h = mhash_add(h, w1);
    h = mhash_add(h, w2);
    mhash_finish(h ^ basis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ofctl::parse_group;

    #[test]
    fn webster_spreads_by_weight() {
        let g =
            parse_group("group_id=1,type=select,bucket=weight:1,output:1,bucket=weight:3,output:2")
                .unwrap();
        let e = GroupEntry::new(g).unwrap();
        assert_eq!(e.hash_mask, 15);
        let n2 = e.hash_map.iter().filter(|&&b| b == 1).count();
        assert_eq!(n2, 12);
        // equal weights alternate, first bucket first
        let g = parse_group("group_id=1,type=select,bucket=output:1,bucket=output:2").unwrap();
        let e = GroupEntry::new(g).unwrap();
        assert_eq!(&e.hash_map[..4], &[0, 1, 0, 1]);
    }

    #[test]
    fn select_groups_ovs_cannot_hash_in_the_datapath_are_refused() {
        let g = parse_group("group_id=1,type=select,bucket=weight:0,output:1").unwrap();
        assert_eq!(GroupEntry::new(g), Err(GroupError::ZeroWeight(1)));
        let g = parse_group(
            "group_id=2,type=select,bucket=weight:1,output:1,bucket=weight:1000,output:2",
        )
        .unwrap();
        assert_eq!(GroupEntry::new(g), Err(GroupError::TooManyHashValues(2)));
    }
}
