//! Log pages a target serves: Error Information (01h), SMART / Health (02h),
//! Firmware Slot (03h), Changed Namespace List (04h) and the Discovery log (70h),
//! plus the Get Log Page command fields.

use crate::cmd::{get_str, put_str, NQN_LEN};
use crate::status::Status;
use crate::{le16, le64, put16, put32, put64, Error, Sqe};

enum_with_unknown! {
    /// Log page identifiers (Base 2.0 Figure 202).
    pub enum LogPageId(u8) {
        SupportedLogPages = 0x00 => "Supported Log Pages",
        ErrorInformation = 0x01 => "Error Information",
        SmartHealth = 0x02 => "SMART / Health Information",
        FirmwareSlot = 0x03 => "Firmware Slot Information",
        ChangedNsList = 0x04 => "Changed Namespace List",
        CommandsSupportedEffects = 0x05 => "Commands Supported and Effects",
        DeviceSelfTest = 0x06 => "Device Self-test",
        TelemetryHost = 0x07 => "Telemetry Host-Initiated",
        TelemetryController = 0x08 => "Telemetry Controller-Initiated",
        AnaLog = 0x0c => "Asymmetric Namespace Access",
        Discovery = 0x70 => "Discovery",
        ReservationNotification = 0x80 => "Reservation Notification",
        SanitizeStatus = 0x81 => "Sanitize Status",
    }
}

/// Get Log Page command fields.
impl Sqe {
    /// Log page identifier (CDW10 bits 7:0).
    pub fn log_lid(&self) -> LogPageId {
        LogPageId::from(self.cdw10() as u8)
    }
    /// Log specific field (CDW10 bits 14:8).
    pub fn log_lsp(&self) -> u8 {
        ((self.cdw10() >> 8) & 0x7f) as u8
    }
    /// Retain asynchronous event (CDW10 bit 15).
    pub fn log_rae(&self) -> bool {
        self.cdw10() & (1 << 15) != 0
    }
    /// Number of dwords to return, as a byte count: ((NUMDU << 16 | NUMDL) + 1) * 4.
    pub fn log_len(&self) -> u64 {
        let numdl = u64::from(self.cdw10() >> 16);
        let numdu = u64::from(self.cdw11() & 0xffff);
        ((numdu << 16 | numdl) + 1) * 4
    }
    /// Log page offset in bytes (CDW12 | CDW13 << 32).
    pub fn log_offset(&self) -> u64 {
        u64::from(self.cdw12()) | (u64::from(self.cdw13()) << 32)
    }
    /// Log specific identifier (CDW11 bits 31:16).
    pub fn log_lsi(&self) -> u16 {
        (self.cdw11() >> 16) as u16
    }
    /// A Get Log Page command for `len` bytes (a multiple of 4, >= 4) at `offset`.
    pub fn get_log_page(cid: u16, nsid: u32, lid: LogPageId, len: u32, offset: u64) -> Sqe {
        let mut s = Sqe::admin(crate::AdminOpcode::GetLogPage, cid, nsid);
        let numd = (len / 4).saturating_sub(1);
        s.set_cdw10(u32::from(lid.raw()) | ((numd & 0xffff) << 16));
        s.set_cdw11(numd >> 16);
        s.set_cdw12(offset as u32);
        s.set_cdw13((offset >> 32) as u32);
        s
    }
}

/// The bytes `[offset, offset + len)` of a log page image, zero padded past its
/// end (what a controller returns for Get Log Page with an offset).
pub fn page_slice(page: &[u8], offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if let Ok(off) = usize::try_from(offset) {
        if off < page.len() {
            let n = (page.len() - off).min(len);
            out[..n].copy_from_slice(&page[off..off + n]);
        }
    }
    out
}

/// Size of one Error Information log entry.
pub const ERROR_LOG_ENTRY_LEN: usize = 64;

/// One Error Information log entry (Base 2.0 Figure 205).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorLogEntry {
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    /// Status of the failed command (written with phase 0).
    pub status: Status,
    /// Byte (bits 7:0) and bit (10:8) in the command of the offending field, 0xffff if n/a.
    pub parameter_error_location: u16,
    pub lba: u64,
    pub nsid: u32,
    pub vendor_specific: u8,
    pub trtype: u8,
    pub command_specific: u64,
    pub trtype_specific: u16,
}

impl ErrorLogEntry {
    /// The 64-byte image.
    pub fn to_bytes(&self) -> [u8; ERROR_LOG_ENTRY_LEN] {
        let mut b = [0u8; ERROR_LOG_ENTRY_LEN];
        put64(&mut b, 0, self.error_count);
        put16(&mut b, 8, self.sqid);
        put16(&mut b, 10, self.cid);
        put16(&mut b, 12, self.status.to_field() << 1);
        put16(&mut b, 14, self.parameter_error_location);
        put64(&mut b, 16, self.lba);
        put32(&mut b, 24, self.nsid);
        b[28] = self.vendor_specific;
        b[29] = self.trtype;
        put64(&mut b, 32, self.command_specific);
        put16(&mut b, 40, self.trtype_specific);
        b
    }
    /// Parse a 64-byte entry.
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() < ERROR_LOG_ENTRY_LEN {
            return Err(Error::Truncated {
                need: ERROR_LOG_ENTRY_LEN,
                have: b.len(),
            });
        }
        Ok(ErrorLogEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cid: le16(b, 10),
            status: Status::from_field(le16(b, 12) >> 1),
            parameter_error_location: le16(b, 14),
            lba: le64(b, 16),
            nsid: crate::le32(b, 24),
            vendor_specific: b[28],
            trtype: b[29],
            command_specific: le64(b, 32),
            trtype_specific: le16(b, 40),
        })
    }
}

/// Size of the SMART / Health Information log page.
pub const SMART_LOG_LEN: usize = 512;

/// SMART / Health Information (Base 2.0 Figure 207), the fields a target fills in.
/// Counters are 128-bit in the page; here they are `u128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature in kelvins.
    pub temperature: u16,
    pub avail_spare: u8,
    pub spare_thresh: u8,
    pub percent_used: u8,
    /// Units of 1000 × 512 bytes read.
    pub data_units_read: u128,
    /// Units of 1000 × 512 bytes written.
    pub data_units_written: u128,
    pub host_read_commands: u128,
    pub host_write_commands: u128,
    pub controller_busy_time: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    pub media_errors: u128,
    pub num_err_log_entries: u128,
}

impl SmartLog {
    /// Data units (thousands of 512-byte units, rounded up) for a byte count.
    pub fn data_units(bytes: u64) -> u128 {
        u128::from(bytes.div_ceil(512)).div_ceil(1000)
    }
    /// The 512-byte image.
    pub fn to_bytes(&self) -> [u8; SMART_LOG_LEN] {
        let mut b = [0u8; SMART_LOG_LEN];
        b[0] = self.critical_warning;
        put16(&mut b, 1, self.temperature);
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        let counters = [
            self.data_units_read,
            self.data_units_written,
            self.host_read_commands,
            self.host_write_commands,
            self.controller_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.num_err_log_entries,
        ];
        for (i, c) in counters.iter().enumerate() {
            b[32 + 16 * i..48 + 16 * i].copy_from_slice(&c.to_le_bytes());
        }
        b
    }
    /// Parse the fields above from a page image.
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() < SMART_LOG_LEN {
            return Err(Error::Truncated {
                need: SMART_LOG_LEN,
                have: b.len(),
            });
        }
        let c = |i: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[32 + 16 * i..48 + 16 * i]);
            u128::from_le_bytes(a)
        };
        Ok(SmartLog {
            critical_warning: b[0],
            temperature: le16(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            data_units_read: c(0),
            data_units_written: c(1),
            host_read_commands: c(2),
            host_write_commands: c(3),
            controller_busy_time: c(4),
            power_cycles: c(5),
            power_on_hours: c(6),
            unsafe_shutdowns: c(7),
            media_errors: c(8),
            num_err_log_entries: c(9),
        })
    }
}

/// Size of the Firmware Slot Information log page.
pub const FW_SLOT_LOG_LEN: usize = 512;

/// Firmware Slot Information (Base 2.0 Figure 208): active slot info and seven
/// 8-byte revision strings.
pub fn firmware_slot_log(active_slot: u8, revisions: &[&str]) -> [u8; FW_SLOT_LOG_LEN] {
    let mut b = [0u8; FW_SLOT_LOG_LEN];
    b[0] = active_slot & 7;
    for (i, r) in revisions.iter().take(7).enumerate() {
        let f = &mut b[8 + 8 * i..16 + 8 * i];
        f.fill(b' ');
        let n = r.len().min(8);
        f[..n].copy_from_slice(&r.as_bytes()[..n]);
    }
    b
}

/// Size of the Changed Namespace List log page.
pub const CHANGED_NS_LOG_LEN: usize = 4096;

/// Changed Namespace List: up to 1024 NSIDs; more than that is reported as a single
/// entry 0xffffffff.
pub fn changed_ns_log(nsids: &[u32]) -> Box<[u8; CHANGED_NS_LOG_LEN]> {
    let mut b = Box::new([0u8; CHANGED_NS_LOG_LEN]);
    if nsids.len() > 1024 {
        put32(&mut b[..], 0, 0xffff_ffff);
    } else {
        for (i, n) in nsids.iter().enumerate() {
            put32(&mut b[..], i * 4, *n);
        }
    }
    b
}

// ---------------------------------------------------------------------------
// Discovery log page (0x70)

/// Size of the discovery log page header.
pub const DISC_HDR_LEN: usize = 1024;
/// Size of one discovery log page entry.
pub const DISC_ENTRY_LEN: usize = 1024;
/// Well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

enum_with_unknown! {
    /// Transport type (TRTYPE).
    pub enum TrType(u8) {
        Rdma = 1 => "RDMA",
        Fc = 2 => "Fibre Channel",
        Tcp = 3 => "TCP",
        Loop = 254 => "Intra-host",
    }
}

enum_with_unknown! {
    /// Address family (ADRFAM).
    pub enum AdrFam(u8) {
        Ipv4 = 1 => "IPv4",
        Ipv6 = 2 => "IPv6",
        Ib = 3 => "InfiniBand",
        Fc = 4 => "Fibre Channel",
        Loop = 254 => "Intra-host",
    }
}

enum_with_unknown! {
    /// Subsystem type (SUBTYPE).
    pub enum SubType(u8) {
        /// A referral to another discovery service.
        DiscoveryReferral = 1 => "Discovery subsystem referral",
        Nvme = 2 => "NVM subsystem",
        CurrentDiscovery = 3 => "Current discovery subsystem",
    }
}

/// TREQ bits: secure channel requirement (bits 1:0) and SQ flow control disable (bit 2).
pub mod treq {
    pub const SECURE_NOT_SPECIFIED: u8 = 0;
    pub const SECURE_REQUIRED: u8 = 1;
    pub const SECURE_NOT_REQUIRED: u8 = 2;
    /// The controller supports disabling SQ flow control.
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
}

/// One discovery log page entry (Base 2.0 Figure 264; Linux
/// `struct nvmf_disc_rsp_page_entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    pub trtype: TrType,
    pub adrfam: AdrFam,
    pub subtype: SubType,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    /// Entry flags (EFLAGS).
    pub eflags: u16,
    /// Transport service id (TCP: the port as decimal text), 32 bytes.
    pub trsvcid: String,
    pub subnqn: String,
    /// Transport address (TCP: the IP address as text), 256 bytes.
    pub traddr: String,
    /// Transport specific address subtype, 256 bytes (TCP: byte 0 is SECTYPE).
    pub tsas: [u8; 256],
}

impl Default for DiscoveryEntry {
    fn default() -> Self {
        DiscoveryEntry {
            trtype: TrType::Tcp,
            adrfam: AdrFam::Ipv4,
            subtype: SubType::Nvme,
            treq: treq::SECURE_NOT_REQUIRED,
            portid: 0,
            cntlid: crate::cmd::CNTLID_DYNAMIC,
            asqsz: 32,
            eflags: 0,
            trsvcid: String::new(),
            subnqn: String::new(),
            traddr: String::new(),
            tsas: [0; 256],
        }
    }
}

mod disc_field {
    pub const TRTYPE: usize = 0;
    pub const ADRFAM: usize = 1;
    pub const SUBTYPE: usize = 2;
    pub const TREQ: usize = 3;
    pub const PORTID: usize = 4;
    pub const CNTLID: usize = 6;
    pub const ASQSZ: usize = 8;
    pub const EFLAGS: usize = 10;
    pub const TRSVCID: core::ops::Range<usize> = 32..64;
    pub const SUBNQN: core::ops::Range<usize> = 256..512;
    pub const TRADDR: core::ops::Range<usize> = 512..768;
    pub const TSAS: core::ops::Range<usize> = 768..1024;
}

impl DiscoveryEntry {
    /// A TCP entry for `subnqn` at `traddr:trsvcid`.
    pub fn tcp(
        subtype: SubType,
        subnqn: &str,
        traddr: &str,
        trsvcid: &str,
        portid: u16,
        ipv6: bool,
    ) -> Self {
        DiscoveryEntry {
            subtype,
            adrfam: if ipv6 { AdrFam::Ipv6 } else { AdrFam::Ipv4 },
            subnqn: subnqn.to_string(),
            traddr: traddr.to_string(),
            trsvcid: trsvcid.to_string(),
            portid,
            ..Default::default()
        }
    }

    /// Write the 1024-byte image into `b` (at least 1024 bytes).
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..DISC_ENTRY_LEN];
        b.fill(0);
        b[disc_field::TRTYPE] = self.trtype.raw();
        b[disc_field::ADRFAM] = self.adrfam.raw();
        b[disc_field::SUBTYPE] = self.subtype.raw();
        b[disc_field::TREQ] = self.treq;
        put16(b, disc_field::PORTID, self.portid);
        put16(b, disc_field::CNTLID, self.cntlid);
        put16(b, disc_field::ASQSZ, self.asqsz);
        put16(b, disc_field::EFLAGS, self.eflags);
        // TRSVCID and TRADDR are ASCII, space padded (Base 2.0; Linux nvmet pads with spaces).
        crate::cmd::put_str_space(&mut b[disc_field::TRSVCID], &self.trsvcid);
        put_str(&mut b[disc_field::SUBNQN], &self.subnqn);
        crate::cmd::put_str_space(&mut b[disc_field::TRADDR], &self.traddr);
        b[disc_field::TSAS].copy_from_slice(&self.tsas);
    }

    /// Parse a 1024-byte entry.
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() < DISC_ENTRY_LEN {
            return Err(Error::Truncated {
                need: DISC_ENTRY_LEN,
                have: b.len(),
            });
        }
        let text = |r: core::ops::Range<usize>| {
            get_str(&b[r])
                .unwrap_or("")
                .trim_end_matches(' ')
                .to_string()
        };
        let mut tsas = [0u8; 256];
        tsas.copy_from_slice(&b[disc_field::TSAS]);
        Ok(DiscoveryEntry {
            trtype: TrType::from(b[disc_field::TRTYPE]),
            adrfam: AdrFam::from(b[disc_field::ADRFAM]),
            subtype: SubType::from(b[disc_field::SUBTYPE]),
            treq: b[disc_field::TREQ],
            portid: le16(b, disc_field::PORTID),
            cntlid: le16(b, disc_field::CNTLID),
            asqsz: le16(b, disc_field::ASQSZ),
            eflags: le16(b, disc_field::EFLAGS),
            trsvcid: text(disc_field::TRSVCID),
            subnqn: text(disc_field::SUBNQN),
            traddr: text(disc_field::TRADDR),
            tsas,
        })
    }
}

/// The discovery log page: header (GENCTR, NUMREC, RECFMT) and entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryLog {
    /// Generation counter: changes whenever the set of entries changes.
    pub genctr: u64,
    /// Record format (0).
    pub recfmt: u16,
    pub entries: Vec<DiscoveryEntry>,
}

impl DiscoveryLog {
    /// Full page length: header + entries.
    pub fn len(&self) -> usize {
        DISC_HDR_LEN + DISC_ENTRY_LEN * self.entries.len()
    }
    /// Whether the log has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The whole page image (serve a Get Log Page slice with [`page_slice`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.len()];
        put64(&mut b, 0, self.genctr);
        put64(&mut b, 8, self.entries.len() as u64);
        put16(&mut b, 16, self.recfmt);
        for (i, e) in self.entries.iter().enumerate() {
            let o = DISC_HDR_LEN + i * DISC_ENTRY_LEN;
            e.emit(&mut b[o..o + DISC_ENTRY_LEN]);
        }
        b
    }
    /// Parse the header only: (genctr, numrec, recfmt).
    pub fn parse_header(b: &[u8]) -> Result<(u64, u64, u16), Error> {
        if b.len() < 18 {
            return Err(Error::Truncated {
                need: 18,
                have: b.len(),
            });
        }
        Ok((le64(b, 0), le64(b, 8), le16(b, 16)))
    }
    /// Parse a page image holding the header and `numrec` entries (fails if the
    /// buffer is shorter than the header says).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        let (genctr, numrec, recfmt) = Self::parse_header(b)?;
        let need = usize::try_from(numrec)
            .ok()
            .and_then(|n| n.checked_mul(DISC_ENTRY_LEN))
            .and_then(|n| n.checked_add(DISC_HDR_LEN))
            .unwrap_or(usize::MAX);
        if b.len() < need {
            return Err(Error::Truncated {
                need,
                have: b.len(),
            });
        }
        let entries = (0..numrec as usize)
            .map(|i| DiscoveryEntry::parse(&b[DISC_HDR_LEN + i * DISC_ENTRY_LEN..]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DiscoveryLog {
            genctr,
            recfmt,
            entries,
        })
    }
}

/// Length of an NQN field, re-exported for discovery users.
pub const DISC_NQN_LEN: usize = NQN_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::GenericStatus;

    #[test]
    fn get_log_page_fields() {
        let s = Sqe::get_log_page(1, 0, LogPageId::Discovery, 4096 + 1024 * 70, 0x1_0000_0400);
        assert_eq!(s.log_lid(), LogPageId::Discovery);
        assert_eq!(s.log_len(), 4096 + 1024 * 70);
        assert_eq!(s.log_offset(), 0x1_0000_0400);
        assert_eq!(s.cdw10() & 0xff, 0x70);
        // NUMD 0's based dwords split across CDW10[31:16] and CDW11[15:0]
        let numd = (4096 + 1024 * 70) / 4 - 1;
        assert_eq!(s.cdw10() >> 16, numd & 0xffff);
        assert_eq!(s.cdw11() & 0xffff, numd >> 16);
    }

    #[test]
    fn page_slicing() {
        let p = [1u8, 2, 3, 4];
        assert_eq!(page_slice(&p, 2, 4), vec![3, 4, 0, 0]);
        assert_eq!(page_slice(&p, 10, 2), vec![0, 0]);
        assert_eq!(page_slice(&p, u64::MAX, 1), vec![0]);
    }

    /// Linux `struct nvmf_disc_rsp_page_hdr` / `nvmf_disc_rsp_page_entry` layout.
    #[test]
    fn discovery_layout() {
        let mut e =
            DiscoveryEntry::tcp(SubType::Nvme, "nqn.test:sub", "127.0.0.1", "4420", 1, false);
        e.cntlid = 0xffff;
        e.asqsz = 128;
        let log = DiscoveryLog {
            genctr: 5,
            recfmt: 0,
            entries: vec![
                DiscoveryEntry::tcp(
                    SubType::CurrentDiscovery,
                    DISCOVERY_NQN,
                    "127.0.0.1",
                    "8009",
                    1,
                    false,
                ),
                e.clone(),
            ],
        };
        let b = log.to_bytes();
        assert_eq!(b.len(), 3072);
        assert_eq!(&b[0..8], &5u64.to_le_bytes());
        assert_eq!(&b[8..16], &2u64.to_le_bytes());
        let o = 2048;
        assert_eq!(b[o], 3); // TCP
        assert_eq!(b[o + 1], 1); // IPv4
        assert_eq!(b[o + 2], 2); // NVM subsystem
        assert_eq!(b[o + 3], treq::SECURE_NOT_REQUIRED);
        assert_eq!(&b[o + 4..o + 6], &1u16.to_le_bytes());
        assert_eq!(&b[o + 6..o + 8], &[0xff, 0xff]);
        assert_eq!(&b[o + 8..o + 10], &128u16.to_le_bytes());
        assert_eq!(&b[o + 32..o + 36], b"4420");
        assert_eq!(b[o + 36], b' ');
        assert_eq!(&b[o + 256..o + 268], b"nqn.test:sub");
        assert_eq!(&b[o + 512..o + 521], b"127.0.0.1");
        let back = DiscoveryLog::parse(&b).unwrap();
        assert_eq!(back, log);
        assert_eq!(back.entries[1], e);
        assert_eq!(DiscoveryLog::parse_header(&b[..20]).unwrap(), (5, 2, 0));
        assert!(DiscoveryLog::parse(&b[..2000]).is_err());
        // paging: header only, then the second entry
        assert_eq!(page_slice(&b, 0, 1024).len(), 1024);
        let second = page_slice(&b, 2048, 1024);
        assert_eq!(DiscoveryEntry::parse(&second).unwrap(), e);
    }

    proptest::proptest! {
        /// Parsers never panic on arbitrary bytes.
        #[test]
        fn parsers_total(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000)) {
            let _ = DiscoveryLog::parse(&b);
            let _ = DiscoveryEntry::parse(&b);
            let _ = ErrorLogEntry::parse(&b);
            let _ = SmartLog::parse(&b);
            let _ = crate::identify::parse_ns_descriptor_list(&b);
        }
    }

    #[test]
    fn error_and_smart_and_fw() {
        let e = ErrorLogEntry {
            error_count: 3,
            sqid: 1,
            cid: 9,
            status: Status::generic(GenericStatus::LbaOutOfRange).with_dnr(true),
            parameter_error_location: 0xffff,
            lba: 77,
            nsid: 1,
            trtype: 3,
            ..Default::default()
        };
        let b = e.to_bytes();
        assert_eq!(&b[12..14], &(((0x80u16) | 0x4000) << 1).to_le_bytes());
        assert_eq!(&b[16..24], &77u64.to_le_bytes());
        assert_eq!(ErrorLogEntry::parse(&b).unwrap(), e);

        let s = SmartLog {
            temperature: 300,
            avail_spare: 100,
            data_units_read: SmartLog::data_units(512_001),
            host_write_commands: 42,
            ..Default::default()
        };
        let b = s.to_bytes();
        assert_eq!(&b[1..3], &300u16.to_le_bytes());
        assert_eq!(b[3], 100);
        assert_eq!(&b[32..48], &2u128.to_le_bytes()); // 1001 units of 512 -> 2 thousand-units
        assert_eq!(&b[80..96], &42u128.to_le_bytes());
        assert_eq!(SmartLog::parse(&b).unwrap(), s);

        let f = firmware_slot_log(1, &["0.1"]);
        assert_eq!(f[0], 1);
        assert_eq!(&f[8..16], b"0.1     ");
        let c = changed_ns_log(&[1, 2]);
        assert_eq!(&c[0..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
        let c = changed_ns_log(&vec![1; 1025]);
        assert_eq!(&c[0..4], &[0xff; 4]);
    }
}
