//! Identify data structures: Controller (CNS 01h), Namespace (CNS 00h), active
//! namespace ID list (CNS 02h), namespace identification descriptors (CNS 03h).
//!
//! Each is a 4096-byte little-endian buffer with accessors at the offsets of the
//! Base 2.0 / NVM Command Set 1.0 figures (and Linux `struct nvme_id_ctrl` /
//! `struct nvme_id_ns`; the tests check those offsets).

use crate::cmd::{get_str, put_str, put_str_space};
use crate::{le32, put32, Error, Sqe};

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

enum_with_unknown! {
    /// Controller or Namespace Structure (Identify CDW10 bits 7:0).
    pub enum Cns(u8) {
        Namespace = 0x00 => "Identify Namespace",
        Controller = 0x01 => "Identify Controller",
        ActiveNsList = 0x02 => "Active Namespace ID list",
        NsDescriptorList = 0x03 => "Namespace Identification Descriptor list",
        NvmSetList = 0x04 => "NVM Set List",
        IoCsNamespace = 0x05 => "I/O Command Set specific Identify Namespace",
        IoCsController = 0x06 => "I/O Command Set specific Identify Controller",
        IoCsActiveNsList = 0x07 => "I/O Command Set specific Active Namespace ID list",
        CsIndependentNamespace = 0x08 => "I/O Command Set Independent Identify Namespace",
        AllocatedNsList = 0x10 => "Allocated Namespace ID list",
        AllocatedNamespace = 0x11 => "Identify Namespace (allocated)",
        NsControllerList = 0x12 => "Namespace attached Controller list",
        ControllerList = 0x13 => "Controller list",
        CommandSetList = 0x1c => "I/O Command Set data structure",
    }
}

/// Identify command fields from an SQE.
impl Sqe {
    /// Identify: CNS (CDW10 bits 7:0).
    pub fn identify_cns(&self) -> Cns {
        Cns::from(self.cdw10() as u8)
    }
    /// Identify: controller id (CDW10 bits 31:16).
    pub fn identify_cntid(&self) -> u16 {
        (self.cdw10() >> 16) as u16
    }
    /// Identify: command set identifier (CDW11 bits 31:24).
    pub fn identify_csi(&self) -> u8 {
        (self.cdw11() >> 24) as u8
    }
    /// An Identify command (data pointer to be set by the caller).
    pub fn identify(cid: u16, cns: Cns, nsid: u32) -> Sqe {
        let mut s = Sqe::admin(crate::AdminOpcode::Identify, cid, nsid);
        s.set_cdw10(u32::from(cns.raw()));
        s
    }
}

macro_rules! identify_struct {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name {
            bytes: Box<[u8; IDENTIFY_LEN]>,
        }
        impl Default for $name {
            fn default() -> Self {
                $name { bytes: Box::new([0; IDENTIFY_LEN]) }
            }
        }
        impl $name {
            /// All zero.
            pub fn new() -> Self {
                Self::default()
            }
            /// Copy from a buffer of at least 4096 bytes.
            pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
                if b.len() < IDENTIFY_LEN {
                    return Err(Error::Truncated { need: IDENTIFY_LEN, have: b.len() });
                }
                let mut s = Self::default();
                s.bytes.copy_from_slice(&b[..IDENTIFY_LEN]);
                Ok(s)
            }
            /// The 4096 bytes.
            pub fn as_bytes(&self) -> &[u8; IDENTIFY_LEN] {
                &self.bytes
            }
            /// The 4096 bytes, writable.
            pub fn as_bytes_mut(&mut self) -> &mut [u8; IDENTIFY_LEN] {
                &mut self.bytes
            }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "({} bytes)"), IDENTIFY_LEN)
            }
        }
    };
}

identify_struct!(
    /// Identify Controller data structure (CNS 01h).
    IdentifyController
);

/// SGL support bits (Identify Controller SGLS, bytes 536..540).
pub mod sgls {
    /// Bits 1:0 = 01b: SGLs supported, no alignment requirement.
    pub const SUPPORTED: u32 = 1 << 0;
    /// Bits 1:0 = 10b: SGLs supported with dword alignment.
    pub const SUPPORTED_DWORD_ALIGNED: u32 = 2;
    /// Keyed SGL Data Block descriptor supported.
    pub const KEYED: u32 = 1 << 2;
    /// Bit Bucket descriptor supported.
    pub const BIT_BUCKET: u32 = 1 << 16;
    /// Address field in Data Block descriptors may be an offset.
    pub const OFFSET: u32 = 1 << 20;
    /// Transport SGL Data Block descriptor supported.
    pub const TRANSPORT: u32 = 1 << 21;
}

/// ONCS bits (optional NVM command support).
pub mod oncs {
    pub const COMPARE: u16 = 1 << 0;
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    pub const DSM: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
    pub const SAVE_FEATURES: u16 = 1 << 4;
    pub const RESERVATIONS: u16 = 1 << 5;
    pub const TIMESTAMP: u16 = 1 << 6;
    pub const VERIFY: u16 = 1 << 7;
    pub const COPY: u16 = 1 << 8;
}

/// Controller type (CNTRLTYPE, byte 111).
pub mod cntrltype {
    pub const IO: u8 = 1;
    pub const DISCOVERY: u8 = 2;
    pub const ADMIN: u8 = 3;
}

impl IdentifyController {
    le_fields! {
        /// PCI vendor id.
        vid, set_vid: u16 @ 0;
        /// PCI subsystem vendor id.
        ssvid, set_ssvid: u16 @ 2;
        /// Recommended arbitration burst.
        rab, set_rab: u8 @ 72;
        /// Multi-path I/O and namespace sharing capabilities.
        cmic, set_cmic: u8 @ 76;
        /// Maximum data transfer size (2^n units of CAP.MPSMIN; 0 = no limit).
        mdts, set_mdts: u8 @ 77;
        /// Controller id.
        cntlid, set_cntlid: u16 @ 78;
        /// Version (same encoding as the VS property).
        ver, set_ver: u32 @ 80;
        /// RTD3 resume latency.
        rtd3r, set_rtd3r: u32 @ 84;
        /// RTD3 entry latency.
        rtd3e, set_rtd3e: u32 @ 88;
        /// Optional asynchronous events supported.
        oaes, set_oaes: u32 @ 92;
        /// Controller attributes.
        ctratt, set_ctratt: u32 @ 96;
        /// Controller type (1 I/O, 2 discovery, 3 administrative).
        cntrltype, set_cntrltype: u8 @ 111;
        /// Command retry delay time 1 (100 ms units).
        crdt1, set_crdt1: u16 @ 128;
        crdt2, set_crdt2: u16 @ 130;
        crdt3, set_crdt3: u16 @ 132;
        /// Optional admin command support.
        oacs, set_oacs: u16 @ 256;
        /// Abort command limit (0's based).
        acl, set_acl: u8 @ 258;
        /// Asynchronous event request limit (0's based).
        aerl, set_aerl: u8 @ 259;
        /// Firmware updates.
        frmw, set_frmw: u8 @ 260;
        /// Log page attributes.
        lpa, set_lpa: u8 @ 261;
        /// Error log page entries (0's based).
        elpe, set_elpe: u8 @ 262;
        /// Number of power states supported (0's based).
        npss, set_npss: u8 @ 263;
        /// Warning composite temperature threshold (K).
        wctemp, set_wctemp: u16 @ 266;
        /// Critical composite temperature threshold (K).
        cctemp, set_cctemp: u16 @ 268;
        /// Keep alive support (granularity in 100 ms units; 0 = not supported).
        kas, set_kas: u16 @ 320;
        /// ANA transition time.
        anatt, set_anatt: u8 @ 342;
        /// ANA capabilities.
        anacap, set_anacap: u8 @ 343;
        /// SQ entry size (bits 3:0 required, 7:4 maximum; log2).
        sqes, set_sqes: u8 @ 512;
        /// CQ entry size (bits 3:0 required, 7:4 maximum; log2).
        cqes, set_cqes: u8 @ 513;
        /// Maximum outstanding commands (fabrics).
        maxcmd, set_maxcmd: u16 @ 514;
        /// Number of namespaces (maximum NSID).
        nn, set_nn: u32 @ 516;
        /// Optional NVM command support (see [`oncs`]).
        oncs, set_oncs: u16 @ 520;
        /// Fused operation support.
        fuses, set_fuses: u16 @ 522;
        /// Format NVM attributes.
        fna, set_fna: u8 @ 524;
        /// Volatile write cache (bit 0 present).
        vwc, set_vwc: u8 @ 525;
        /// Atomic write unit normal (0's based, blocks).
        awun, set_awun: u16 @ 526;
        /// Atomic write unit power fail (0's based, blocks).
        awupf, set_awupf: u16 @ 528;
        /// Atomic compare & write unit.
        acwu, set_acwu: u16 @ 532;
        /// SGL support (see [`sgls`]).
        sgls, set_sgls: u32 @ 536;
        /// Maximum number of allowed namespaces.
        mnan, set_mnan: u32 @ 540;
        /// Fabrics: I/O queue command capsule supported size (16-byte units).
        ioccsz, set_ioccsz: u32 @ 1792;
        /// Fabrics: I/O queue response capsule supported size (16-byte units).
        iorcsz, set_iorcsz: u32 @ 1796;
        /// Fabrics: in-capsule data offset (16-byte units).
        icdoff, set_icdoff: u16 @ 1800;
        /// Fabrics: controller attributes (bit 0 dynamic controller model).
        fcatt, set_fcatt: u8 @ 1802;
        /// Fabrics: maximum SGL data block descriptors per command.
        msdbd, set_msdbd: u8 @ 1803;
        /// Fabrics: optional fabrics commands supported.
        ofcs, set_ofcs: u16 @ 1804;
    }

    /// IEEE OUI (3 bytes).
    pub fn ieee(&self) -> [u8; 3] {
        [self.bytes[73], self.bytes[74], self.bytes[75]]
    }
    pub fn set_ieee(&mut self, v: [u8; 3]) {
        self.bytes[73..76].copy_from_slice(&v);
    }
    /// Serial number (ASCII, space padded, 20 bytes).
    pub fn sn(&self) -> Option<&str> {
        trim_ascii(&self.bytes[4..24])
    }
    pub fn set_sn(&mut self, s: &str) {
        put_str_space(&mut self.bytes[4..24], s)
    }
    /// Model number (ASCII, space padded, 40 bytes).
    pub fn mn(&self) -> Option<&str> {
        trim_ascii(&self.bytes[24..64])
    }
    pub fn set_mn(&mut self, s: &str) {
        put_str_space(&mut self.bytes[24..64], s)
    }
    /// Firmware revision (ASCII, space padded, 8 bytes).
    pub fn fr(&self) -> Option<&str> {
        trim_ascii(&self.bytes[64..72])
    }
    pub fn set_fr(&mut self, s: &str) {
        put_str_space(&mut self.bytes[64..72], s)
    }
    /// NVM subsystem NQN (NUL terminated, 256 bytes at 768).
    pub fn subnqn(&self) -> Option<&str> {
        get_str(&self.bytes[768..1024])
    }
    pub fn set_subnqn(&mut self, s: &str) {
        put_str(&mut self.bytes[768..1024], s)
    }
    /// Total NVM capacity (bytes, 128-bit; low 64 bits).
    pub fn tnvmcap(&self) -> u128 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.bytes[280..296]);
        u128::from_le_bytes(a)
    }
    pub fn set_tnvmcap(&mut self, v: u128) {
        self.bytes[280..296].copy_from_slice(&v.to_le_bytes());
    }
    /// Power state descriptor `i` (32 bytes at 2048 + 32 i): max power (centiwatts),
    /// entry/exit latency. Only the max-power field is exposed.
    pub fn psd_max_power(&self, i: usize) -> u16 {
        let o = 2048 + 32 * (i % 32);
        u16::from_le_bytes([self.bytes[o], self.bytes[o + 1]])
    }
    pub fn set_psd_max_power(&mut self, i: usize, centiwatts: u16) {
        let o = 2048 + 32 * (i % 32);
        self.bytes[o..o + 2].copy_from_slice(&centiwatts.to_le_bytes());
    }
}

fn trim_ascii(b: &[u8]) -> Option<&str> {
    let s = core::str::from_utf8(b).ok()?;
    Some(s.trim_end_matches([' ', '\0']))
}

identify_struct!(
    /// Identify Namespace data structure for the NVM command set (CNS 00h).
    IdentifyNamespace
);

/// An LBA format (NVM Command Set Figure 98).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LbaFormat {
    /// Metadata size per block.
    pub ms: u16,
    /// LBA data size as a power of two (9 = 512 B, 12 = 4 KiB).
    pub lbads: u8,
    /// Relative performance (bits 1:0).
    pub rp: u8,
}

/// DLFEAT (byte 33) bits.
pub mod dlfeat {
    /// Bits 2:0 = 001b: deallocated blocks read as all zeroes.
    pub const READ_ZEROES: u8 = 1;
    /// Bit 3: the Deallocate bit in Write Zeroes is supported.
    pub const WRITE_ZEROES_DEALLOCATE: u8 = 1 << 3;
}

impl IdentifyNamespace {
    le_fields! {
        /// Namespace size (blocks).
        nsze, set_nsze: u64 @ 0;
        /// Namespace capacity (blocks).
        ncap, set_ncap: u64 @ 8;
        /// Namespace utilization (blocks).
        nuse, set_nuse: u64 @ 16;
        /// Namespace features (bit 0 thin provisioning, bit 1 NAWUN etc. valid...).
        nsfeat, set_nsfeat: u8 @ 24;
        /// Number of LBA formats (0's based).
        nlbaf, set_nlbaf: u8 @ 25;
        /// Formatted LBA size (bits 3:0 format index, bit 4 extended metadata).
        flbas, set_flbas: u8 @ 26;
        /// Metadata capabilities.
        mc, set_mc: u8 @ 27;
        /// End-to-end data protection capabilities.
        dpc, set_dpc: u8 @ 28;
        /// End-to-end data protection type settings.
        dps, set_dps: u8 @ 29;
        /// Namespace multi-path I/O and sharing capabilities.
        nmic, set_nmic: u8 @ 30;
        /// Reservation capabilities.
        rescap, set_rescap: u8 @ 31;
        /// Format progress indicator.
        fpi, set_fpi: u8 @ 32;
        /// Deallocate logical block features (see [`dlfeat`]).
        dlfeat, set_dlfeat: u8 @ 33;
        /// Namespace atomic write unit normal.
        nawun, set_nawun: u16 @ 34;
        /// Namespace atomic write unit power fail.
        nawupf, set_nawupf: u16 @ 36;
        /// Namespace optimal I/O boundary.
        noiob, set_noiob: u16 @ 46;
        /// Namespace preferred write granularity (0's based).
        npwg, set_npwg: u16 @ 64;
        /// Namespace preferred write alignment (0's based).
        npwa, set_npwa: u16 @ 66;
        /// Namespace optimal write size (0's based).
        nows, set_nows: u16 @ 72;
        /// ANA group identifier.
        anagrpid, set_anagrpid: u32 @ 92;
        /// Namespace attributes (bit 0 write protected).
        nsattr, set_nsattr: u8 @ 99;
        /// NVM set identifier.
        nvmsetid, set_nvmsetid: u16 @ 100;
        /// Endurance group identifier.
        endgid, set_endgid: u16 @ 102;
    }

    /// Namespace globally unique identifier (16 bytes at 104).
    pub fn nguid(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.bytes[104..120]);
        a
    }
    pub fn set_nguid(&mut self, v: [u8; 16]) {
        self.bytes[104..120].copy_from_slice(&v);
    }
    /// IEEE extended unique identifier (8 bytes at 120).
    pub fn eui64(&self) -> [u8; 8] {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.bytes[120..128]);
        a
    }
    pub fn set_eui64(&mut self, v: [u8; 8]) {
        self.bytes[120..128].copy_from_slice(&v);
    }
    /// LBA format `i` (0..64) at 128 + 4 i.
    pub fn lbaf(&self, i: usize) -> LbaFormat {
        let o = 128 + 4 * (i % 64);
        LbaFormat {
            ms: u16::from_le_bytes([self.bytes[o], self.bytes[o + 1]]),
            lbads: self.bytes[o + 2],
            rp: self.bytes[o + 3] & 3,
        }
    }
    pub fn set_lbaf(&mut self, i: usize, f: LbaFormat) {
        let o = 128 + 4 * (i % 64);
        self.bytes[o..o + 2].copy_from_slice(&f.ms.to_le_bytes());
        self.bytes[o + 2] = f.lbads;
        self.bytes[o + 3] = f.rp & 3;
    }
    /// The index of the format in use (FLBAS bits 3:0, plus bits 6:5 as high bits).
    pub fn flbas_index(&self) -> usize {
        let f = self.flbas();
        usize::from(f & 0xf) | (usize::from((f >> 5) & 3) << 4)
    }
    /// Block size of the format in use, in bytes (None if LBADS is out of range).
    pub fn block_size(&self) -> Option<u32> {
        let ds = self.lbaf(self.flbas_index()).lbads;
        if (9..32).contains(&ds) {
            Some(1u32 << ds)
        } else {
            None
        }
    }
    /// Fill in a simple namespace: `blocks` blocks of `block_size` bytes (a power
    /// of two), one LBA format, no metadata.
    pub fn simple(blocks: u64, block_size: u32) -> Self {
        let mut ns = IdentifyNamespace::new();
        ns.set_nsze(blocks);
        ns.set_ncap(blocks);
        ns.set_nuse(blocks);
        ns.set_nlbaf(0);
        ns.set_flbas(0);
        ns.set_lbaf(
            0,
            LbaFormat {
                ms: 0,
                lbads: block_size.trailing_zeros() as u8,
                rp: 0,
            },
        );
        ns
    }
}

/// Active namespace ID list (CNS 02h): up to 1024 NSIDs greater than the command's
/// NSID, ascending, zero terminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveNsList {
    bytes: Box<[u8; IDENTIFY_LEN]>,
}

/// Most entries in one active namespace list.
pub const NS_LIST_MAX: usize = IDENTIFY_LEN / 4;

impl ActiveNsList {
    /// The list of the NSIDs in `nsids` that are greater than `after`, sorted,
    /// at most 1024.
    pub fn new(nsids: impl IntoIterator<Item = u32>, after: u32) -> Self {
        let mut v: Vec<u32> = nsids.into_iter().filter(|&n| n > after && n != 0).collect();
        v.sort_unstable();
        v.dedup();
        let mut bytes = Box::new([0u8; IDENTIFY_LEN]);
        for (i, n) in v.iter().take(NS_LIST_MAX).enumerate() {
            put32(&mut bytes[..], i * 4, *n);
        }
        ActiveNsList { bytes }
    }
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        if b.len() < IDENTIFY_LEN {
            return Err(Error::Truncated {
                need: IDENTIFY_LEN,
                have: b.len(),
            });
        }
        let mut bytes = Box::new([0u8; IDENTIFY_LEN]);
        bytes.copy_from_slice(&b[..IDENTIFY_LEN]);
        Ok(ActiveNsList { bytes })
    }
    pub fn as_bytes(&self) -> &[u8; IDENTIFY_LEN] {
        &self.bytes
    }
    /// The NSIDs up to the first zero.
    pub fn nsids(&self) -> Vec<u32> {
        (0..NS_LIST_MAX)
            .map(|i| le32(&self.bytes[..], i * 4))
            .take_while(|&n| n != 0)
            .collect()
    }
}

enum_with_unknown! {
    /// Namespace identifier type (NIDT) in a namespace identification descriptor.
    pub enum Nidt(u8) {
        Eui64 = 1 => "IEEE Extended Unique Identifier",
        Nguid = 2 => "Namespace Globally Unique Identifier",
        Uuid = 3 => "Namespace UUID",
        Csi = 4 => "Command Set Identifier",
    }
}

impl Nidt {
    /// The identifier length (NIDL) this type requires.
    pub fn nidl(self) -> Option<u8> {
        match self {
            Nidt::Eui64 => Some(8),
            Nidt::Nguid | Nidt::Uuid => Some(16),
            Nidt::Csi => Some(1),
            Nidt::Unknown(_) => None,
        }
    }
}

/// One namespace identification descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsIdDescriptor {
    pub nidt: Nidt,
    pub nid: Vec<u8>,
}

/// Build the namespace identification descriptor list (CNS 03h, 4096 bytes):
/// each entry is NIDT (1), NIDL (1), reserved (2), then NIDL bytes; a zero NIDT ends it.
pub fn ns_descriptor_list(descs: &[NsIdDescriptor]) -> Box<[u8; IDENTIFY_LEN]> {
    let mut b = Box::new([0u8; IDENTIFY_LEN]);
    let mut o = 0usize;
    for d in descs {
        let n = d.nid.len().min(255);
        if o + 4 + n > IDENTIFY_LEN {
            break;
        }
        b[o] = d.nidt.raw();
        b[o + 1] = n as u8;
        b[o + 4..o + 4 + n].copy_from_slice(&d.nid[..n]);
        o += 4 + n;
    }
    b
}

/// Parse a namespace identification descriptor list; stops at NIDT 0 or the end.
/// A descriptor running past the buffer is an error.
pub fn parse_ns_descriptor_list(b: &[u8]) -> Result<Vec<NsIdDescriptor>, Error> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o + 4 <= b.len() {
        let nidt = b[o];
        if nidt == 0 {
            break;
        }
        let n = usize::from(b[o + 1]);
        let end = o + 4 + n;
        if end > b.len() {
            return Err(Error::Truncated {
                need: end,
                have: b.len(),
            });
        }
        out.push(NsIdDescriptor {
            nidt: Nidt::from(nidt),
            nid: b[o + 4..end].to_vec(),
        });
        o = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets from Linux `struct nvme_id_ctrl` (include/linux/nvme.h).
    #[test]
    fn controller_offsets() {
        let mut c = IdentifyController::new();
        c.set_vid(0x1b36);
        c.set_sn("SN123");
        c.set_mn("dpustack");
        c.set_fr("0.1");
        c.set_mdts(5);
        c.set_cntlid(0x0102);
        c.set_ver(0x0002_0000);
        c.set_oacs(0x0304);
        c.set_kas(10);
        c.set_sqes(0x66);
        c.set_cqes(0x44);
        c.set_maxcmd(128);
        c.set_nn(32);
        c.set_oncs(oncs::DSM | oncs::WRITE_ZEROES);
        c.set_vwc(1);
        c.set_sgls(sgls::SUPPORTED | sgls::OFFSET | sgls::TRANSPORT);
        c.set_subnqn("nqn.2014-08.org.nvmexpress:uuid:1");
        c.set_ioccsz(260);
        c.set_iorcsz(1);
        c.set_icdoff(0);
        c.set_fcatt(1);
        c.set_msdbd(1);
        c.set_cntrltype(cntrltype::IO);
        c.set_psd_max_power(0, 2500);
        let b = c.as_bytes();
        assert_eq!(&b[0..2], &0x1b36u16.to_le_bytes());
        assert_eq!(&b[4..9], b"SN123");
        assert_eq!(b[9], b' ');
        assert_eq!(&b[24..32], b"dpustack");
        assert_eq!(&b[64..67], b"0.1");
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[0x02, 0x01]);
        assert_eq!(&b[80..84], &0x0002_0000u32.to_le_bytes());
        assert_eq!(b[111], 1);
        assert_eq!(&b[256..258], &0x0304u16.to_le_bytes());
        assert_eq!(&b[320..322], &10u16.to_le_bytes());
        assert_eq!((b[512], b[513]), (0x66, 0x44));
        assert_eq!(&b[514..516], &128u16.to_le_bytes());
        assert_eq!(&b[516..520], &32u32.to_le_bytes());
        assert_eq!(&b[520..522], &0x000cu16.to_le_bytes());
        assert_eq!(b[525], 1);
        assert_eq!(&b[536..540], &(1u32 | 1 << 20 | 1 << 21).to_le_bytes());
        assert_eq!(&b[768..777], b"nqn.2014-");
        assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
        assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
        assert_eq!(b[1802], 1);
        assert_eq!(b[1803], 1);
        assert_eq!(&b[2048..2050], &2500u16.to_le_bytes());
        let d = IdentifyController::from_bytes(b).unwrap();
        assert_eq!(d.sn(), Some("SN123"));
        assert_eq!(d.mn(), Some("dpustack"));
        assert_eq!(d.fr(), Some("0.1"));
        assert_eq!(d.subnqn(), Some("nqn.2014-08.org.nvmexpress:uuid:1"));
        assert_eq!(d.ioccsz(), 260);
        assert!(IdentifyController::from_bytes(&b[..4095]).is_err());
    }

    /// Offsets from Linux `struct nvme_id_ns`.
    #[test]
    fn namespace_offsets() {
        let mut ns = IdentifyNamespace::simple(1 << 20, 4096);
        ns.set_dlfeat(dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEALLOCATE);
        ns.set_nguid([0xab; 16]);
        ns.set_eui64([0xcd; 8]);
        ns.set_anagrpid(1);
        let b = ns.as_bytes();
        assert_eq!(&b[0..8], &(1u64 << 20).to_le_bytes());
        assert_eq!(&b[8..16], &(1u64 << 20).to_le_bytes());
        assert_eq!(b[33], 0x09);
        assert_eq!(&b[92..96], &1u32.to_le_bytes());
        assert_eq!(&b[104..120], &[0xab; 16]);
        assert_eq!(&b[120..128], &[0xcd; 8]);
        assert_eq!(b[128 + 2], 12);
        assert_eq!(ns.block_size(), Some(4096));
        let mut ns = IdentifyNamespace::new();
        ns.set_nlbaf(1);
        ns.set_lbaf(
            1,
            LbaFormat {
                ms: 8,
                lbads: 9,
                rp: 2,
            },
        );
        ns.set_flbas(1);
        assert_eq!(ns.block_size(), Some(512));
        assert_eq!(
            ns.lbaf(1),
            LbaFormat {
                ms: 8,
                lbads: 9,
                rp: 2
            }
        );
        assert_eq!(&ns.as_bytes()[132..136], &[8, 0, 9, 2]);
        assert_eq!(IdentifyNamespace::new().block_size(), None);
    }

    #[test]
    fn active_ns_list() {
        let l = ActiveNsList::new([5, 1, 3, 3, 0], 1);
        assert_eq!(l.nsids(), vec![3, 5]);
        assert_eq!(&l.as_bytes()[0..8], &[3, 0, 0, 0, 5, 0, 0, 0]);
        let big = ActiveNsList::new(1..=2000, 0);
        assert_eq!(big.nsids().len(), 1024);
        assert_eq!(
            ActiveNsList::from_bytes(big.as_bytes()).unwrap().nsids()[1023],
            1024
        );
    }

    #[test]
    fn ns_descriptors() {
        let d = vec![
            NsIdDescriptor {
                nidt: Nidt::Nguid,
                nid: vec![1; 16],
            },
            NsIdDescriptor {
                nidt: Nidt::Uuid,
                nid: vec![2; 16],
            },
            NsIdDescriptor {
                nidt: Nidt::Csi,
                nid: vec![0],
            },
        ];
        let b = ns_descriptor_list(&d);
        assert_eq!(&b[0..4], &[2, 16, 0, 0]);
        assert_eq!(&b[20..24], &[3, 16, 0, 0]);
        assert_eq!(&b[40..45], &[4, 1, 0, 0, 0]);
        assert_eq!(parse_ns_descriptor_list(&b[..]).unwrap(), d);
        assert_eq!(Nidt::Uuid.nidl(), Some(16));
        assert!(parse_ns_descriptor_list(&[3, 16, 0, 0, 1]).is_err());
    }

    #[test]
    fn identify_sqe() {
        let mut s = Sqe::identify(3, Cns::ActiveNsList, 0);
        s.set_cdw10(s.cdw10() | (7 << 16));
        assert_eq!(s.identify_cns(), Cns::ActiveNsList);
        assert_eq!(s.identify_cntid(), 7);
        assert_eq!(s.opcode(), 0x06);
    }
}
