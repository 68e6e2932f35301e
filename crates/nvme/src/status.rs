//! Completion status: Status Code Type (SCT), Status Code (SC), CRD, More, DNR,
//! with the spec's names for generic, command-specific (incl. fabrics), media and
//! path-related codes.

enum_with_unknown! {
    /// Status code type (status field bits 11:9 in the CQE).
    pub enum Sct(u8) {
        Generic = 0 => "Generic Command Status",
        CommandSpecific = 1 => "Command Specific Status",
        MediaError = 2 => "Media and Data Integrity Errors",
        Path = 3 => "Path Related Status",
        VendorSpecific = 7 => "Vendor Specific",
    }
}

enum_with_unknown! {
    /// Generic command status codes (SCT 0; Base 2.0 Figure 100, NVM Command Set Figure 34).
    pub enum GenericStatus(u8) {
        Success = 0x00 => "Successful Completion",
        InvalidOpcode = 0x01 => "Invalid Command Opcode",
        InvalidField = 0x02 => "Invalid Field in Command",
        CommandIdConflict = 0x03 => "Command ID Conflict",
        DataTransferError = 0x04 => "Data Transfer Error",
        AbortedPowerLoss = 0x05 => "Commands Aborted due to Power Loss Notification",
        InternalError = 0x06 => "Internal Error",
        AbortedByRequest = 0x07 => "Command Abort Requested",
        AbortedSqDeletion = 0x08 => "Command Aborted due to SQ Deletion",
        AbortedFailedFused = 0x09 => "Command Aborted due to Failed Fused Command",
        AbortedMissingFused = 0x0a => "Command Aborted due to Missing Fused Command",
        InvalidNamespaceOrFormat = 0x0b => "Invalid Namespace or Format",
        CommandSequenceError = 0x0c => "Command Sequence Error",
        InvalidSglSegmentDescriptor = 0x0d => "Invalid SGL Segment Descriptor",
        InvalidNumberOfSglDescriptors = 0x0e => "Invalid Number of SGL Descriptors",
        DataSglLengthInvalid = 0x0f => "Data SGL Length Invalid",
        MetadataSglLengthInvalid = 0x10 => "Metadata SGL Length Invalid",
        SglDescriptorTypeInvalid = 0x11 => "SGL Descriptor Type Invalid",
        InvalidControllerMemoryBufferUse = 0x12 => "Invalid Use of Controller Memory Buffer",
        PrpOffsetInvalid = 0x13 => "PRP Offset Invalid",
        AtomicWriteUnitExceeded = 0x14 => "Atomic Write Unit Exceeded",
        OperationDenied = 0x15 => "Operation Denied",
        SglOffsetInvalid = 0x16 => "SGL Offset Invalid",
        HostIdInconsistentFormat = 0x18 => "Host Identifier Inconsistent Format",
        KeepAliveTimerExpired = 0x19 => "Keep Alive Timer Expired",
        KeepAliveTimeoutInvalid = 0x1a => "Keep Alive Timeout Invalid",
        AbortedPreemptAndAbort = 0x1b => "Command Aborted due to Preempt and Abort",
        SanitizeFailed = 0x1c => "Sanitize Failed",
        SanitizeInProgress = 0x1d => "Sanitize In Progress",
        SglDataBlockGranularityInvalid = 0x1e => "SGL Data Block Granularity Invalid",
        CommandNotSupportedForQueueInCmb = 0x1f => "Command Not Supported for Queue in CMB",
        NamespaceWriteProtected = 0x20 => "Namespace is Write Protected",
        CommandInterrupted = 0x21 => "Command Interrupted",
        TransientTransportError = 0x22 => "Transient Transport Error",
        LbaOutOfRange = 0x80 => "LBA Out of Range",
        CapacityExceeded = 0x81 => "Capacity Exceeded",
        NamespaceNotReady = 0x82 => "Namespace Not Ready",
        ReservationConflict = 0x83 => "Reservation Conflict",
        FormatInProgress = 0x84 => "Format In Progress",
    }
}

enum_with_unknown! {
    /// Command specific status codes (SCT 1; Base 2.0 Figure 101, NVM Command Set Figure 35).
    /// Codes 0x80..=0x82 are NVM-command-set meanings; for fabrics commands the same
    /// values mean [`FabricsStatus`].
    pub enum CommandSpecificStatus(u8) {
        CompletionQueueInvalid = 0x00 => "Completion Queue Invalid",
        InvalidQueueIdentifier = 0x01 => "Invalid Queue Identifier",
        InvalidQueueSize = 0x02 => "Invalid Queue Size",
        AbortCommandLimitExceeded = 0x03 => "Abort Command Limit Exceeded",
        AsyncEventRequestLimitExceeded = 0x05 => "Asynchronous Event Request Limit Exceeded",
        InvalidFirmwareSlot = 0x06 => "Invalid Firmware Slot",
        InvalidFirmwareImage = 0x07 => "Invalid Firmware Image",
        InvalidInterruptVector = 0x08 => "Invalid Interrupt Vector",
        InvalidLogPage = 0x09 => "Invalid Log Page",
        InvalidFormat = 0x0a => "Invalid Format",
        FirmwareActivationRequiresConventionalReset = 0x0b => "Firmware Activation Requires Conventional Reset",
        InvalidQueueDeletion = 0x0c => "Invalid Queue Deletion",
        FeatureIdNotSaveable = 0x0d => "Feature Identifier Not Saveable",
        FeatureNotChangeable = 0x0e => "Feature Not Changeable",
        FeatureNotNamespaceSpecific = 0x0f => "Feature Not Namespace Specific",
        FirmwareActivationRequiresNvmReset = 0x10 => "Firmware Activation Requires NVM Subsystem Reset",
        FirmwareActivationRequiresReset = 0x11 => "Firmware Activation Requires Controller Level Reset",
        FirmwareActivationRequiresMaxTimeViolation = 0x12 => "Firmware Activation Requires Maximum Time Violation",
        FirmwareActivationProhibited = 0x13 => "Firmware Activation Prohibited",
        OverlappingRange = 0x14 => "Overlapping Range",
        NamespaceInsufficientCapacity = 0x15 => "Namespace Insufficient Capacity",
        NamespaceIdUnavailable = 0x16 => "Namespace Identifier Unavailable",
        NamespaceAlreadyAttached = 0x18 => "Namespace Already Attached",
        NamespaceIsPrivate = 0x19 => "Namespace Is Private",
        NamespaceNotAttached = 0x1a => "Namespace Not Attached",
        ThinProvisioningNotSupported = 0x1b => "Thin Provisioning Not Supported",
        ControllerListInvalid = 0x1c => "Controller List Invalid",
        DeviceSelfTestInProgress = 0x1d => "Device Self-test In Progress",
        BootPartitionWriteProhibited = 0x1e => "Boot Partition Write Prohibited",
        InvalidControllerIdentifier = 0x1f => "Invalid Controller Identifier",
        InvalidSecondaryControllerState = 0x20 => "Invalid Secondary Controller State",
        InvalidNumberOfControllerResources = 0x21 => "Invalid Number of Controller Resources",
        InvalidResourceIdentifier = 0x22 => "Invalid Resource Identifier",
        SanitizeProhibitedPmrEnabled = 0x23 => "Sanitize Prohibited While Persistent Memory Region is Enabled",
        AnaGroupIdentifierInvalid = 0x24 => "ANA Group Identifier Invalid",
        AnaAttachFailed = 0x25 => "ANA Attach Failed",
        ConflictingAttributes = 0x80 => "Conflicting Attributes",
        InvalidProtectionInformation = 0x81 => "Invalid Protection Information",
        AttemptedWriteToReadOnlyRange = 0x82 => "Attempted Write to Read Only Range",
    }
}

enum_with_unknown! {
    /// Fabrics command specific status codes (SCT 1; NVMe-oF 1.1 Figure 10).
    pub enum FabricsStatus(u8) {
        IncompatibleFormat = 0x80 => "Connect Incompatible Format",
        ControllerBusy = 0x81 => "Connect Controller Busy",
        InvalidParameters = 0x82 => "Connect Invalid Parameters",
        RestartDiscovery = 0x83 => "Connect Restart Discovery",
        InvalidHost = 0x84 => "Connect Invalid Host",
        InvalidQueueType = 0x85 => "Invalid Queue Type",
        DiscoverRestart = 0x90 => "Discover Restart",
        AuthenticationRequired = 0x91 => "Authentication Required",
    }
}

enum_with_unknown! {
    /// Media and data integrity errors (SCT 2; NVM Command Set Figure 36).
    pub enum MediaStatus(u8) {
        WriteFault = 0x80 => "Write Fault",
        UnrecoveredReadError = 0x81 => "Unrecovered Read Error",
        GuardCheckError = 0x82 => "End-to-end Guard Check Error",
        ApplicationTagCheckError = 0x83 => "End-to-end Application Tag Check Error",
        ReferenceTagCheckError = 0x84 => "End-to-end Reference Tag Check Error",
        CompareFailure = 0x85 => "Compare Failure",
        AccessDenied = 0x86 => "Access Denied",
        DeallocatedOrUnwrittenBlock = 0x87 => "Deallocated or Unwritten Logical Block",
    }
}

enum_with_unknown! {
    /// Path related status (SCT 3; Base 2.0 Figure 103).
    pub enum PathStatus(u8) {
        InternalPathError = 0x00 => "Internal Path Error",
        AsymmetricAccessPersistentLoss = 0x01 => "Asymmetric Access Persistent Loss",
        AsymmetricAccessInaccessible = 0x02 => "Asymmetric Access Inaccessible",
        AsymmetricAccessTransition = 0x03 => "Asymmetric Access Transition",
        ControllerPathingError = 0x60 => "Controller Pathing Error",
        HostPathingError = 0x70 => "Host Pathing Error",
        CommandAbortedByHost = 0x71 => "Command Aborted By Host",
    }
}

/// A completion status (the CQE status field without the phase tag).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status {
    sct: u8,
    sc: u8,
    crd: u8,
    more: bool,
    dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status {
        sct: 0,
        sc: 0,
        crd: 0,
        more: false,
        dnr: false,
    };

    /// A status from its type and code.
    pub const fn new(sct: Sct, sc: u8) -> Self {
        let sct = match sct {
            Sct::Generic => 0,
            Sct::CommandSpecific => 1,
            Sct::MediaError => 2,
            Sct::Path => 3,
            Sct::VendorSpecific => 7,
            Sct::Unknown(v) => v & 7,
        };
        Status {
            sct,
            sc,
            crd: 0,
            more: false,
            dnr: false,
        }
    }
    /// A generic status.
    pub const fn generic(s: GenericStatus) -> Self {
        let sc = match s {
            GenericStatus::Unknown(v) => v,
            // const-compatible conversion via the macro's mapping is not const; use a table
            other => generic_code(other),
        };
        Status::new(Sct::Generic, sc)
    }
    /// A command-specific status.
    pub fn command_specific(s: CommandSpecificStatus) -> Self {
        Status::new(Sct::CommandSpecific, s.raw())
    }
    /// A fabrics command-specific status.
    pub fn fabrics(s: FabricsStatus) -> Self {
        Status::new(Sct::CommandSpecific, s.raw())
    }
    /// A media error status.
    pub fn media(s: MediaStatus) -> Self {
        Status::new(Sct::MediaError, s.raw())
    }
    /// A path-related status.
    pub fn path(s: PathStatus) -> Self {
        Status::new(Sct::Path, s.raw())
    }
    /// Set Do Not Retry.
    pub const fn with_dnr(mut self, dnr: bool) -> Self {
        self.dnr = dnr;
        self
    }
    /// Set More (more status information in the Error log page).
    pub const fn with_more(mut self, more: bool) -> Self {
        self.more = more;
        self
    }
    /// Set Command Retry Delay index (0..=3).
    pub const fn with_crd(mut self, crd: u8) -> Self {
        self.crd = crd & 3;
        self
    }

    /// Decode the 15-bit status field (CQE status >> 1): SC 7:0, SCT 10:8, CRD 12:11,
    /// M 13, DNR 14.
    pub const fn from_field(v: u16) -> Self {
        Status {
            sc: (v & 0xff) as u8,
            sct: ((v >> 8) & 7) as u8,
            crd: ((v >> 11) & 3) as u8,
            more: (v >> 13) & 1 != 0,
            dnr: (v >> 14) & 1 != 0,
        }
    }
    /// Encode into the 15-bit status field.
    pub const fn to_field(self) -> u16 {
        (self.sc as u16)
            | ((self.sct as u16 & 7) << 8)
            | ((self.crd as u16 & 3) << 11)
            | ((self.more as u16) << 13)
            | ((self.dnr as u16) << 14)
    }

    pub fn sct(self) -> Sct {
        Sct::from(self.sct)
    }
    pub fn sc(self) -> u8 {
        self.sc
    }
    pub fn dnr(self) -> bool {
        self.dnr
    }
    pub fn more(self) -> bool {
        self.more
    }
    pub fn crd(self) -> u8 {
        self.crd
    }
    /// SCT 0 and SC 0.
    pub fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }
    /// Whether this is the given generic status.
    pub fn is_generic(self, s: GenericStatus) -> bool {
        self.sct == 0 && self.sc == s.raw()
    }

    /// The spec name, reading command-specific codes as NVM/admin codes.
    pub fn name(self) -> &'static str {
        match self.sct() {
            Sct::Generic => GenericStatus::from(self.sc).name(),
            Sct::CommandSpecific => CommandSpecificStatus::from(self.sc).name(),
            Sct::MediaError => MediaStatus::from(self.sc).name(),
            Sct::Path => PathStatus::from(self.sc).name(),
            Sct::VendorSpecific => "Vendor Specific",
            Sct::Unknown(_) => "Unknown",
        }
    }

    /// The spec name for a status returned to a fabrics command (Connect etc.):
    /// command-specific codes 0x80 and up read as [`FabricsStatus`].
    pub fn fabrics_name(self) -> &'static str {
        if self.sct == 1 && self.sc >= 0x80 {
            FabricsStatus::from(self.sc).name()
        } else {
            self.name()
        }
    }
}

const fn generic_code(s: GenericStatus) -> u8 {
    // Mirrors the enum_with_unknown mapping for use in const context.
    use GenericStatus::*;
    match s {
        Success => 0x00,
        InvalidOpcode => 0x01,
        InvalidField => 0x02,
        CommandIdConflict => 0x03,
        DataTransferError => 0x04,
        AbortedPowerLoss => 0x05,
        InternalError => 0x06,
        AbortedByRequest => 0x07,
        AbortedSqDeletion => 0x08,
        AbortedFailedFused => 0x09,
        AbortedMissingFused => 0x0a,
        InvalidNamespaceOrFormat => 0x0b,
        CommandSequenceError => 0x0c,
        InvalidSglSegmentDescriptor => 0x0d,
        InvalidNumberOfSglDescriptors => 0x0e,
        DataSglLengthInvalid => 0x0f,
        MetadataSglLengthInvalid => 0x10,
        SglDescriptorTypeInvalid => 0x11,
        InvalidControllerMemoryBufferUse => 0x12,
        PrpOffsetInvalid => 0x13,
        AtomicWriteUnitExceeded => 0x14,
        OperationDenied => 0x15,
        SglOffsetInvalid => 0x16,
        HostIdInconsistentFormat => 0x18,
        KeepAliveTimerExpired => 0x19,
        KeepAliveTimeoutInvalid => 0x1a,
        AbortedPreemptAndAbort => 0x1b,
        SanitizeFailed => 0x1c,
        SanitizeInProgress => 0x1d,
        SglDataBlockGranularityInvalid => 0x1e,
        CommandNotSupportedForQueueInCmb => 0x1f,
        NamespaceWriteProtected => 0x20,
        CommandInterrupted => 0x21,
        TransientTransportError => 0x22,
        LbaOutOfRange => 0x80,
        CapacityExceeded => 0x81,
        NamespaceNotReady => 0x82,
        ReservationConflict => 0x83,
        FormatInProgress => 0x84,
        Unknown(v) => v,
    }
}

impl From<GenericStatus> for Status {
    fn from(s: GenericStatus) -> Self {
        Status::generic(s)
    }
}
impl From<MediaStatus> for Status {
    fn from(s: MediaStatus) -> Self {
        Status::media(s)
    }
}
impl From<CommandSpecificStatus> for Status {
    fn from(s: CommandSpecificStatus) -> Self {
        Status::command_specific(s)
    }
}
impl From<FabricsStatus> for Status {
    fn from(s: FabricsStatus) -> Self {
        Status::fabrics(s)
    }
}

impl core::fmt::Debug for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Status(sct={} sc={:#04x} {}",
            self.sct,
            self.sc,
            self.name()
        )?;
        if self.dnr {
            f.write_str(" DNR")?;
        }
        if self.more {
            f.write_str(" M")?;
        }
        if self.crd != 0 {
            write!(f, " CRD={}", self.crd)?;
        }
        f.write_str(")")
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} (sct {:#x}, sc {:#04x})",
            self.name(),
            self.sct,
            self.sc
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn const_table_matches_macro() {
        for s in GenericStatus::ALL {
            assert_eq!(generic_code(*s), s.raw(), "{s:?}");
            assert_eq!(Status::generic(*s).sc(), s.raw());
        }
    }

    #[test]
    fn field_round_trip() {
        for v in 0u16..0x8000 {
            let s = Status::from_field(v);
            if s.sct <= 7 {
                assert_eq!(s.to_field(), v);
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(Status::SUCCESS.name(), "Successful Completion");
        assert!(Status::SUCCESS.is_success());
        assert_eq!(
            Status::generic(GenericStatus::LbaOutOfRange).name(),
            "LBA Out of Range"
        );
        let s = Status::fabrics(FabricsStatus::InvalidHost);
        assert_eq!(s.fabrics_name(), "Connect Invalid Host");
        assert_eq!(s.sct(), Sct::CommandSpecific);
        assert_eq!(s.sc(), 0x84);
        assert_eq!(
            Status::command_specific(CommandSpecificStatus::InvalidLogPage).name(),
            "Invalid Log Page"
        );
        assert_eq!(Status::media(MediaStatus::CompareFailure).sc(), 0x85);
        assert_eq!(Status::new(Sct::Generic, 0x7e).name(), "Unknown");
        assert!(Status::generic(GenericStatus::InvalidOpcode)
            .with_dnr(true)
            .is_generic(GenericStatus::InvalidOpcode));
        // Linux nvme.h: NVME_SC_DNR = 0x4000 in the status field (>> 1 of the CQE word)
        assert_eq!(Status::SUCCESS.with_dnr(true).to_field(), 0x4000);
        assert_eq!(Status::SUCCESS.with_more(true).to_field(), 0x2000);
        // NVME_SC_CONNECT_INVALID_HOST = 0x184 (SCT 1 << 8 | 0x84)
        assert_eq!(
            Status::fabrics(FabricsStatus::InvalidHost).to_field(),
            0x184
        );
        // NVME_SC_COMPARE_FAILED = 0x285
        assert_eq!(Status::media(MediaStatus::CompareFailure).to_field(), 0x285);
    }
}
