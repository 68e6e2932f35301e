//! Controller properties (registers): CAP, VS, CC, CSTS, AQA/ASQ/ACQ offsets and
//! bit fields. On fabrics they are read and written with Property Get / Set.

/// Property offsets.
pub mod offset {
    pub const CAP: u32 = 0x00;
    pub const VS: u32 = 0x08;
    pub const INTMS: u32 = 0x0c;
    pub const INTMC: u32 = 0x10;
    pub const CC: u32 = 0x14;
    pub const CSTS: u32 = 0x1c;
    pub const NSSR: u32 = 0x20;
    pub const AQA: u32 = 0x24;
    pub const ASQ: u32 = 0x28;
    pub const ACQ: u32 = 0x30;
}

/// Size in bytes of the property at `offset` (8 for CAP, ASQ, ACQ; 4 for the
/// others defined; `None` if undefined).
pub fn property_size(off: u32) -> Option<u8> {
    match off {
        offset::CAP | offset::ASQ | offset::ACQ => Some(8),
        offset::VS
        | offset::INTMS
        | offset::INTMC
        | offset::CC
        | offset::CSTS
        | offset::NSSR
        | offset::AQA => Some(4),
        _ => None,
    }
}

fn bits(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}
fn set_bits(v: u64, lo: u32, width: u32, x: u64) -> u64 {
    let m = ((1u64 << width) - 1) << lo;
    (v & !m) | ((x << lo) & m)
}

/// Controller Capabilities (CAP, 64-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum queue entries supported (0's based).
    pub fn mqes(self) -> u16 {
        bits(self.0, 0, 16) as u16
    }
    pub fn with_mqes(self, v: u16) -> Self {
        Cap(set_bits(self.0, 0, 16, v.into()))
    }
    /// Contiguous queues required.
    pub fn cqr(self) -> bool {
        bits(self.0, 16, 1) != 0
    }
    pub fn with_cqr(self, v: bool) -> Self {
        Cap(set_bits(self.0, 16, 1, v.into()))
    }
    /// Arbitration mechanisms supported (bits 18:17).
    pub fn ams(self) -> u8 {
        bits(self.0, 17, 2) as u8
    }
    /// Timeout (500 ms units) to wait for CSTS.RDY transitions.
    pub fn to(self) -> u8 {
        bits(self.0, 24, 8) as u8
    }
    pub fn with_to(self, v: u8) -> Self {
        Cap(set_bits(self.0, 24, 8, v.into()))
    }
    /// Doorbell stride (2^(2 + DSTRD) bytes).
    pub fn dstrd(self) -> u8 {
        bits(self.0, 32, 4) as u8
    }
    /// NVM subsystem reset supported.
    pub fn nssrs(self) -> bool {
        bits(self.0, 36, 1) != 0
    }
    /// Command sets supported (bits 44:37; bit 37 = NVM command set, bit 44 = admin only).
    pub fn css(self) -> u8 {
        bits(self.0, 37, 8) as u8
    }
    pub fn with_css(self, v: u8) -> Self {
        Cap(set_bits(self.0, 37, 8, v.into()))
    }
    /// Memory page size minimum (2^(12 + MPSMIN)).
    pub fn mpsmin(self) -> u8 {
        bits(self.0, 48, 4) as u8
    }
    pub fn with_mpsmin(self, v: u8) -> Self {
        Cap(set_bits(self.0, 48, 4, v.into()))
    }
    /// Memory page size maximum (2^(12 + MPSMAX)).
    pub fn mpsmax(self) -> u8 {
        bits(self.0, 52, 4) as u8
    }
    pub fn with_mpsmax(self, v: u8) -> Self {
        Cap(set_bits(self.0, 52, 4, v.into()))
    }
    /// Controller memory buffer supported (bit 57).
    pub fn cmbs(self) -> bool {
        bits(self.0, 57, 1) != 0
    }
}

/// CAP.CSS bit: NVM command set.
pub const CAP_CSS_NVM: u8 = 1 << 0;
/// CAP.CSS bit: I/O command sets (CC.CSS = 110b).
pub const CAP_CSS_IOCS: u8 = 1 << 6;
/// CAP.CSS bit: no I/O command set (admin only; discovery controllers).
pub const CAP_CSS_ADMIN_ONLY: u8 = 1 << 7;

/// Version (VS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.3.
    pub const V1_3: Vs = Vs::new(1, 3, 0);
    /// NVMe 1.4.
    pub const V1_4: Vs = Vs::new(1, 4, 0);
    /// NVMe 2.0.
    pub const V2_0: Vs = Vs::new(2, 0, 0);
    pub const fn new(mjr: u16, mnr: u8, ter: u8) -> Self {
        Vs(((mjr as u32) << 16) | ((mnr as u32) << 8) | ter as u32)
    }
    pub fn mjr(self) -> u16 {
        (self.0 >> 16) as u16
    }
    pub fn mnr(self) -> u8 {
        (self.0 >> 8) as u8
    }
    pub fn ter(self) -> u8 {
        self.0 as u8
    }
}

/// Shutdown notification (CC.SHN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shn {
    None,
    Normal,
    Abrupt,
    Reserved,
}

/// Controller Configuration (CC, 32-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cc(pub u32);

impl Cc {
    pub fn en(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn with_en(self, v: bool) -> Self {
        Cc((self.0 & !1) | u32::from(v))
    }
    /// I/O command set selected (bits 6:4).
    pub fn css(self) -> u8 {
        ((self.0 >> 4) & 7) as u8
    }
    pub fn with_css(self, v: u8) -> Self {
        Cc(set_bits(self.0.into(), 4, 3, v.into()) as u32)
    }
    /// Memory page size (bits 10:7): page = 2^(12 + MPS).
    pub fn mps(self) -> u8 {
        ((self.0 >> 7) & 0xf) as u8
    }
    pub fn with_mps(self, v: u8) -> Self {
        Cc(set_bits(self.0.into(), 7, 4, v.into()) as u32)
    }
    /// Memory page size in bytes.
    pub fn page_size(self) -> u64 {
        1u64 << (12 + u32::from(self.mps()))
    }
    /// Arbitration mechanism selected (bits 13:11).
    pub fn ams(self) -> u8 {
        ((self.0 >> 11) & 7) as u8
    }
    /// Shutdown notification (bits 15:14).
    pub fn shn(self) -> Shn {
        match (self.0 >> 14) & 3 {
            0 => Shn::None,
            1 => Shn::Normal,
            2 => Shn::Abrupt,
            _ => Shn::Reserved,
        }
    }
    pub fn with_shn(self, v: Shn) -> Self {
        let x = match v {
            Shn::None => 0,
            Shn::Normal => 1,
            Shn::Abrupt => 2,
            Shn::Reserved => 3,
        };
        Cc(set_bits(self.0.into(), 14, 2, x) as u32)
    }
    /// I/O submission queue entry size (bits 19:16, log2).
    pub fn iosqes(self) -> u8 {
        ((self.0 >> 16) & 0xf) as u8
    }
    pub fn with_iosqes(self, v: u8) -> Self {
        Cc(set_bits(self.0.into(), 16, 4, v.into()) as u32)
    }
    /// I/O completion queue entry size (bits 23:20, log2).
    pub fn iocqes(self) -> u8 {
        ((self.0 >> 20) & 0xf) as u8
    }
    pub fn with_iocqes(self, v: u8) -> Self {
        Cc(set_bits(self.0.into(), 20, 4, v.into()) as u32)
    }
}

/// Shutdown status (CSTS.SHST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shst {
    Normal,
    Occurring,
    Complete,
    Reserved,
}

/// Controller Status (CSTS, 32-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Csts(pub u32);

impl Csts {
    pub fn rdy(self) -> bool {
        self.0 & 1 != 0
    }
    pub fn with_rdy(self, v: bool) -> Self {
        Csts((self.0 & !1) | u32::from(v))
    }
    /// Controller fatal status.
    pub fn cfs(self) -> bool {
        self.0 & 2 != 0
    }
    pub fn with_cfs(self, v: bool) -> Self {
        Csts((self.0 & !2) | (u32::from(v) << 1))
    }
    pub fn shst(self) -> Shst {
        match (self.0 >> 2) & 3 {
            0 => Shst::Normal,
            1 => Shst::Occurring,
            2 => Shst::Complete,
            _ => Shst::Reserved,
        }
    }
    pub fn with_shst(self, v: Shst) -> Self {
        let x = match v {
            Shst::Normal => 0,
            Shst::Occurring => 1,
            Shst::Complete => 2,
            Shst::Reserved => 3,
        };
        Csts((self.0 & !0xc) | (x << 2))
    }
    /// NVM subsystem reset occurred.
    pub fn nssro(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// Processing paused.
    pub fn pp(self) -> bool {
        self.0 & 0x20 != 0
    }
}

/// Admin Queue Attributes (AQA): 0's based admin SQ (11:0) and CQ (27:16) sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Aqa(pub u32);

impl Aqa {
    pub fn asqs(self) -> u16 {
        (self.0 & 0xfff) as u16
    }
    pub fn acqs(self) -> u16 {
        ((self.0 >> 16) & 0xfff) as u16
    }
    pub fn new(asqs: u16, acqs: u16) -> Self {
        Aqa(u32::from(asqs & 0xfff) | (u32::from(acqs & 0xfff) << 16))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields() {
        // Linux: NVME_CAP_MQES(cap) = cap & 0xffff, NVME_CAP_TIMEOUT = (cap >> 24) & 0xff,
        // NVME_CAP_STRIDE = (cap >> 32) & 0xf, NVME_CAP_MPSMIN = (cap >> 48) & 0xf,
        // NVME_CAP_MPSMAX = (cap >> 52) & 0xf, NVME_CAP_CSS_NVM = 1 << 0 of CSS at 37.
        let c = Cap::default()
            .with_mqes(127)
            .with_cqr(true)
            .with_to(30)
            .with_css(CAP_CSS_NVM)
            .with_mpsmax(4);
        assert_eq!(c.0, 127 | 1 << 16 | 30 << 24 | 1 << 37 | 4 << 52);
        assert_eq!(
            (c.mqes(), c.to(), c.css(), c.mpsmin(), c.mpsmax()),
            (127, 30, 1, 0, 4)
        );
        assert!(c.cqr());
        assert!(!c.nssrs());
        assert_eq!(Cap(0xf << 32).dstrd(), 0xf);
    }

    #[test]
    fn vs_cc_csts() {
        assert_eq!(Vs::V1_3.0, 0x0001_0300);
        assert_eq!(Vs::V2_0.mjr(), 2);
        // Linux nvme_enable_ctrl: CC = CSS_NVM | (page_shift - 12) << 7 | AMS_RR | SHN_NONE
        //   | IOSQES (6) << 16 | IOCQES (4) << 20 | EN -> 0x00460001 for 4 KiB pages
        let cc = Cc::default().with_en(true).with_iosqes(6).with_iocqes(4);
        assert_eq!(cc.0, 0x0046_0001);
        assert_eq!(cc.page_size(), 4096);
        assert_eq!(cc.with_mps(2).page_size(), 16384);
        assert_eq!(Cc(0x0046_4001).shn(), Shn::Normal);
        assert_eq!(cc.with_shn(Shn::Abrupt).0 >> 14 & 3, 2);
        assert!(!cc.with_en(false).en());
        let cs = Csts::default().with_rdy(true).with_shst(Shst::Complete);
        assert_eq!(cs.0, 0b1001);
        assert_eq!(cs.shst(), Shst::Complete);
        assert!(Csts(2).cfs());
        assert_eq!(Aqa::new(31, 31).0, 0x001f_001f);
        assert_eq!(property_size(offset::CAP), Some(8));
        assert_eq!(property_size(offset::CSTS), Some(4));
        assert_eq!(property_size(0x3), None);
    }
}
