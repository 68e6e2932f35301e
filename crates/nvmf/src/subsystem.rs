//! Subsystems and their namespaces (SPDK `spdk_nvmf_subsystem`, `spdk_nvmf_ns`).
//!
//! A subsystem is immutable once shared, so poll groups read it through an `Arc`
//! without locks; a change at run time (management plane) is a changed copy that
//! `Tgt::replace_subsystem` swaps in and hands to the connected controllers (each
//! qpair refreshes its cached `Arc` when the controller's generation moves).

use std::sync::Arc;

use nvme::identify::{
    dlfeat, ns_descriptor_list, IdentifyNamespace, Nidt, NsIdDescriptor, IDENTIFY_LEN,
};

/// The well-known discovery subsystem NQN.
pub use nvme::log::DISCOVERY_NQN;

/// What kind of subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubsystemType {
    Discovery,
    Nvme,
}

/// A namespace: an NSID on a bdev, with its identifiers.
pub struct Namespace {
    pub nsid: u32,
    pub bdev: Arc<dyn bdev::BlockDevice>,
    pub uuid: [u8; 16],
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// I/O counters of every qpair on this namespace (shared by the copies of a
    /// subsystem changed at run time).
    pub stats: crate::stats::IoStatsRegistry,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("block_size", &self.block_size())
            .field("blocks", &self.num_blocks())
            .finish()
    }
}

impl Namespace {
    pub fn block_size(&self) -> u32 {
        self.bdev.block_size()
    }
    pub fn num_blocks(&self) -> u64 {
        self.bdev.num_blocks()
    }
    /// Identify Namespace (CNS 00h): one LBA format, no metadata.
    pub fn identify(&self) -> IdentifyNamespace {
        let mut n = IdentifyNamespace::simple(self.num_blocks(), self.block_size());
        // NSFEAT bit 2: deallocated or unwritten logical block error support
        n.set_nsfeat(0x4);
        n.set_nmic(1); // may be attached to several controllers
        n.set_dlfeat(dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOCATE);
        n.set_nguid(self.nguid);
        n.set_eui64(self.eui64);
        n
    }
    /// Namespace Identification Descriptor list (CNS 03h): EUI64, NGUID, UUID.
    pub fn id_descriptors(&self) -> Box<[u8; IDENTIFY_LEN]> {
        let d = |nidt, id: &[u8]| NsIdDescriptor {
            nidt,
            nid: id.to_vec(),
        };
        ns_descriptor_list(&[
            d(Nidt::Eui64, &self.eui64),
            d(Nidt::Nguid, &self.nguid),
            d(Nidt::Uuid, &self.uuid),
        ])
    }
}

/// Why a subsystem refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubsystemError {
    #[error("NSID {0} is invalid or already used")]
    BadNsid(u32),
    #[error("subsystem already has its maximum of {0} namespaces")]
    TooManyNamespaces(u32),
    #[error("the discovery subsystem has no namespaces")]
    Discovery,
    #[error("invalid NQN {0:?}")]
    BadNqn(String),
    #[error("the target's subsystem list lock is poisoned")]
    Poisoned,
}

/// A subsystem (SPDK's `spdk_nvmf_subsystem`). `Clone` for copy-on-write changes
/// at run time (`Tgt::replace_subsystem`).
#[derive(Debug, Clone)]
pub struct Subsystem {
    pub nqn: String,
    pub subtype: SubsystemType,
    pub serial: String,
    pub model: String,
    pub allow_any_host: bool,
    pub hosts: Vec<String>,
    pub max_namespaces: u32,
    /// The listeners (trids) hosts may connect to this subsystem through; `None`
    /// = every listener of the target (target files, quick targets). Subsystems
    /// made over JSON-RPC start with an empty list, as SPDK's.
    pub listeners: Option<Vec<crate::transport::TransportId>>,
    namespaces: Vec<Arc<Namespace>>,
}

/// Checks an NQN the way Linux nvmet does: 11..=223 bytes, `nqn.` prefix.
pub fn valid_nqn(nqn: &str) -> bool {
    (11..=223).contains(&nqn.len())
        && (nqn.starts_with("nqn.") || nqn == DISCOVERY_NQN)
        && nqn.is_ascii()
}

impl Subsystem {
    /// An NVM subsystem.
    pub fn new(nqn: &str, serial: &str, model: &str) -> Result<Self, SubsystemError> {
        if !valid_nqn(nqn) {
            return Err(SubsystemError::BadNqn(nqn.to_string()));
        }
        Ok(Subsystem {
            nqn: nqn.to_string(),
            subtype: SubsystemType::Nvme,
            serial: serial.chars().take(20).collect(),
            model: model.chars().take(40).collect(),
            allow_any_host: true,
            hosts: Vec::new(),
            max_namespaces: 32,
            listeners: None,
            namespaces: Vec::new(),
        })
    }

    /// The discovery subsystem.
    pub fn discovery() -> Self {
        Subsystem {
            nqn: DISCOVERY_NQN.to_string(),
            subtype: SubsystemType::Discovery,
            serial: "dpustack-discovery".to_string(),
            model: "dpustack discovery".to_string(),
            allow_any_host: true,
            hosts: Vec::new(),
            max_namespaces: 0,
            listeners: None,
            namespaces: Vec::new(),
        }
    }

    /// Adds a namespace on `bdev`; `nsid` 0 picks the lowest free NSID.
    pub fn add_ns(
        &mut self,
        nsid: u32,
        bdev: Arc<dyn bdev::BlockDevice>,
        uuid: Option<[u8; 16]>,
    ) -> Result<u32, SubsystemError> {
        if self.subtype == SubsystemType::Discovery {
            return Err(SubsystemError::Discovery);
        }
        if self.namespaces.len() as u32 >= self.max_namespaces {
            return Err(SubsystemError::TooManyNamespaces(self.max_namespaces));
        }
        let nsid = if nsid == 0 {
            (1..=self.max_namespaces)
                .find(|n| self.ns(*n).is_none())
                .ok_or(SubsystemError::TooManyNamespaces(self.max_namespaces))?
        } else {
            nsid
        };
        if nsid == 0 || nsid > self.max_namespaces || nsid == u32::MAX || self.ns(nsid).is_some() {
            return Err(SubsystemError::BadNsid(nsid));
        }
        let uuid = uuid.unwrap_or_else(|| derive_id(&self.nqn, nsid));
        let mut nguid = uuid;
        nguid.reverse();
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&nguid[..8]);
        self.namespaces.push(Arc::new(Namespace {
            nsid,
            bdev,
            uuid,
            nguid,
            eui64,
            stats: Default::default(),
        }));
        self.namespaces.sort_by_key(|n| n.nsid);
        Ok(nsid)
    }

    /// Allows a host NQN (and turns off allow-any-host).
    pub fn add_host(&mut self, hostnqn: &str) {
        self.allow_any_host = false;
        self.hosts.push(hostnqn.to_string());
    }

    /// Removes namespace `nsid`; `false` if absent.
    pub fn remove_ns(&mut self, nsid: u32) -> bool {
        let n = self.namespaces.len();
        self.namespaces.retain(|x| x.nsid != nsid);
        n != self.namespaces.len()
    }

    /// Removes a host NQN; `false` if it was not allowed.
    pub fn remove_host(&mut self, hostnqn: &str) -> bool {
        let n = self.hosts.len();
        self.hosts.retain(|h| h != hostnqn);
        n != self.hosts.len()
    }

    /// May a host connect through listener `trid`?
    pub fn listener_allowed(&self, trid: &crate::transport::TransportId) -> bool {
        self.subtype == SubsystemType::Discovery
            || self
                .listeners
                .as_ref()
                .is_none_or(|l| l.iter().any(|t| t == trid))
    }

    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }

    pub fn ns(&self, nsid: u32) -> Option<&Arc<Namespace>> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
    pub fn namespaces(&self) -> &[Arc<Namespace>] {
        &self.namespaces
    }
    pub fn nsids(&self) -> Vec<u32> {
        self.namespaces.iter().map(|n| n.nsid).collect()
    }
}

/// A stable, name-derived 16-byte id (an RFC 4122 version-5-like layout built from
/// two FNV-1a hashes; unique per (subsystem, NSID) and identical across restarts).
pub fn derive_id(nqn: &str, nsid: u32) -> [u8; 16] {
    let h = |seed: u64| {
        let mut x = 0xcbf2_9ce4_8422_2325u64 ^ seed;
        for b in nqn.bytes().chain(nsid.to_le_bytes()) {
            x ^= b as u64;
            x = x.wrapping_mul(0x100_0000_01b3);
        }
        x
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&h(1).to_be_bytes());
    id[8..].copy_from_slice(&h(2).to_be_bytes());
    id[6] = (id[6] & 0x0f) | 0x50;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}
