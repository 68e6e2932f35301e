//! Get / Set Features: feature identifiers and the command fields, plus the
//! value layouts a target needs (Number of Queues, Async Event Configuration,
//! Keep Alive Timer, Volatile Write Cache).

use crate::Sqe;

enum_with_unknown! {
    /// Feature identifiers (Base 2.0 Figure 317).
    pub enum FeatureId(u8) {
        Arbitration = 0x01 => "Arbitration",
        PowerManagement = 0x02 => "Power Management",
        LbaRangeType = 0x03 => "LBA Range Type",
        TemperatureThreshold = 0x04 => "Temperature Threshold",
        ErrorRecovery = 0x05 => "Error Recovery",
        VolatileWriteCache = 0x06 => "Volatile Write Cache",
        NumberOfQueues = 0x07 => "Number of Queues",
        InterruptCoalescing = 0x08 => "Interrupt Coalescing",
        InterruptVectorConfig = 0x09 => "Interrupt Vector Configuration",
        WriteAtomicityNormal = 0x0a => "Write Atomicity Normal",
        AsyncEventConfig = 0x0b => "Asynchronous Event Configuration",
        AutonomousPowerStateTransition = 0x0c => "Autonomous Power State Transition",
        HostMemoryBuffer = 0x0d => "Host Memory Buffer",
        Timestamp = 0x0e => "Timestamp",
        KeepAliveTimer = 0x0f => "Keep Alive Timer",
        HostControlledThermalMgmt = 0x10 => "Host Controlled Thermal Management",
        NonOperationalPowerStateConfig = 0x11 => "Non-Operational Power State Config",
        ReadRecoveryLevelConfig = 0x12 => "Read Recovery Level Config",
        PredictableLatencyModeConfig = 0x13 => "Predictable Latency Mode Config",
        PredictableLatencyModeWindow = 0x14 => "Predictable Latency Mode Window",
        HostBehaviorSupport = 0x16 => "Host Behavior Support",
        SanitizeConfig = 0x17 => "Sanitize Config",
        EnduranceGroupEventConfig = 0x18 => "Endurance Group Event Configuration",
        SoftwareProgressMarker = 0x80 => "Software Progress Marker",
        HostIdentifier = 0x81 => "Host Identifier",
        ReservationNotificationMask = 0x82 => "Reservation Notification Mask",
        ReservationPersistence = 0x83 => "Reservation Persistence",
    }
}

enum_with_unknown! {
    /// Get Features select (SEL, CDW10 bits 10:8).
    pub enum FeatureSelect(u8) {
        Current = 0 => "Current",
        Default = 1 => "Default",
        Saved = 2 => "Saved",
        SupportedCapabilities = 3 => "Supported Capabilities",
    }
}

/// Get / Set Features command fields.
impl Sqe {
    /// Feature identifier (CDW10 bits 7:0).
    pub fn feature_id(&self) -> FeatureId {
        FeatureId::from(self.cdw10() as u8)
    }
    /// Get Features: select (CDW10 bits 10:8).
    pub fn feature_select(&self) -> FeatureSelect {
        FeatureSelect::from(((self.cdw10() >> 8) & 7) as u8)
    }
    /// Set Features: save (CDW10 bit 31).
    pub fn feature_save(&self) -> bool {
        self.cdw10() & (1 << 31) != 0
    }
    /// A Get Features command.
    pub fn get_features(cid: u16, fid: FeatureId, sel: FeatureSelect) -> Sqe {
        let mut s = Sqe::admin(crate::AdminOpcode::GetFeatures, cid, 0);
        s.set_cdw10(u32::from(fid.raw()) | (u32::from(sel.raw() & 7) << 8));
        s
    }
    /// A Set Features command with value `cdw11`.
    pub fn set_features(cid: u16, fid: FeatureId, cdw11: u32) -> Sqe {
        let mut s = Sqe::admin(crate::AdminOpcode::SetFeatures, cid, 0);
        s.set_cdw10(u32::from(fid.raw()));
        s.set_cdw11(cdw11);
        s
    }
}

/// Number of Queues (CDW11 of Set Features and DW0 of the completion): 0's based
/// counts of I/O submission (bits 15:0) and completion (bits 31:16) queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumberOfQueues {
    /// Number of I/O submission queues (a count, not 0's based).
    pub nsq: u32,
    /// Number of I/O completion queues (a count, not 0's based).
    pub ncq: u32,
}

impl NumberOfQueues {
    /// Decode from the dword (adds one to each 0's based count).
    pub fn from_dword(v: u32) -> Self {
        NumberOfQueues {
            nsq: (v & 0xffff) + 1,
            ncq: (v >> 16) + 1,
        }
    }
    /// Encode to the dword (counts clamped to 1..=65535).
    pub fn to_dword(self) -> u32 {
        let s = self.nsq.clamp(1, 0xffff) - 1;
        let c = self.ncq.clamp(1, 0xffff) - 1;
        s | (c << 16)
    }
}

/// Asynchronous Event Configuration bits (CDW11).
pub mod aec {
    /// SMART / health critical warnings (bits 7:0).
    pub const SMART_MASK: u32 = 0xff;
    /// Namespace Attribute Notices.
    pub const NS_ATTR: u32 = 1 << 8;
    /// Firmware Activation Notices.
    pub const FW_ACTIVATION: u32 = 1 << 9;
    /// Telemetry Log Notices.
    pub const TELEMETRY: u32 = 1 << 10;
    /// ANA Change Notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Discovery Log Page Change Notification (fabrics).
    pub const DISCOVERY_CHANGE: u32 = 1 << 31;
}

/// Asynchronous event types and information (AER completion DW0).
pub mod aen {
    /// Event type (bits 2:0): notice.
    pub const TYPE_NOTICE: u8 = 2;
    /// Notice: namespace attribute changed.
    pub const INFO_NS_ATTR_CHANGED: u8 = 0x00;
    /// Notice: discovery log page changed.
    pub const INFO_DISCOVERY_CHANGED: u8 = 0xf0;
    /// Encode an AER completion DW0: type, info, and the log page to read.
    pub fn dw0(event_type: u8, info: u8, log_page: u8) -> u32 {
        u32::from(event_type & 7) | (u32::from(info) << 8) | (u32::from(log_page) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let s = Sqe::get_features(1, FeatureId::NumberOfQueues, FeatureSelect::Default);
        assert_eq!(s.opcode(), 0x0a);
        assert_eq!(s.feature_id(), FeatureId::NumberOfQueues);
        assert_eq!(s.feature_select(), FeatureSelect::Default);
        let s = Sqe::set_features(2, FeatureId::KeepAliveTimer, 120_000);
        assert_eq!(s.opcode(), 0x09);
        assert_eq!(s.cdw10(), 0x0f);
        assert_eq!(s.cdw11(), 120_000);
        assert!(!s.feature_save());
        assert_eq!(FeatureId::AsyncEventConfig.raw(), 0x0b);
        assert_eq!(FeatureId::HostIdentifier.raw(), 0x81);
    }

    #[test]
    fn number_of_queues() {
        let q = NumberOfQueues::from_dword(0x0003_0007);
        assert_eq!(q, NumberOfQueues { nsq: 8, ncq: 4 });
        assert_eq!(q.to_dword(), 0x0003_0007);
        assert_eq!(
            NumberOfQueues {
                nsq: 0,
                ncq: 1 << 20
            }
            .to_dword(),
            0xfffe_0000
        );
    }

    #[test]
    fn aen_dw0() {
        // Linux: NVME_AER_NOTICE_DISC_CHANGED = 0xf0 with type notice, log page 0x70
        assert_eq!(
            aen::dw0(aen::TYPE_NOTICE, aen::INFO_DISCOVERY_CHANGED, 0x70),
            0x0070_f002
        );
    }
}
