//! Opcodes: admin, NVM command set I/O, and fabrics command types.

enum_with_unknown! {
    /// Admin command set opcodes (NVMe Base 2.0, Figure 138).
    pub enum AdminOpcode(u8) {
        DeleteIoSq = 0x00 => "Delete I/O Submission Queue",
        CreateIoSq = 0x01 => "Create I/O Submission Queue",
        GetLogPage = 0x02 => "Get Log Page",
        DeleteIoCq = 0x04 => "Delete I/O Completion Queue",
        CreateIoCq = 0x05 => "Create I/O Completion Queue",
        Identify = 0x06 => "Identify",
        Abort = 0x08 => "Abort",
        SetFeatures = 0x09 => "Set Features",
        GetFeatures = 0x0a => "Get Features",
        AsyncEventRequest = 0x0c => "Asynchronous Event Request",
        NsManagement = 0x0d => "Namespace Management",
        FirmwareCommit = 0x10 => "Firmware Commit",
        FirmwareImageDownload = 0x11 => "Firmware Image Download",
        DeviceSelfTest = 0x14 => "Device Self-test",
        NsAttachment = 0x15 => "Namespace Attachment",
        KeepAlive = 0x18 => "Keep Alive",
        DirectiveSend = 0x19 => "Directive Send",
        DirectiveReceive = 0x1a => "Directive Receive",
        VirtualizationManagement = 0x1c => "Virtualization Management",
        NvmeMiSend = 0x1d => "NVMe-MI Send",
        NvmeMiReceive = 0x1e => "NVMe-MI Receive",
        DoorbellBufferConfig = 0x7c => "Doorbell Buffer Config",
        Fabrics = 0x7f => "Fabrics Command",
        FormatNvm = 0x80 => "Format NVM",
        SecuritySend = 0x81 => "Security Send",
        SecurityReceive = 0x82 => "Security Receive",
        Sanitize = 0x84 => "Sanitize",
        GetLbaStatus = 0x86 => "Get LBA Status",
    }
}

enum_with_unknown! {
    /// NVM command set I/O opcodes (NVM Command Set 1.0, Figure 18).
    pub enum IoOpcode(u8) {
        Flush = 0x00 => "Flush",
        Write = 0x01 => "Write",
        Read = 0x02 => "Read",
        WriteUncorrectable = 0x04 => "Write Uncorrectable",
        Compare = 0x05 => "Compare",
        WriteZeroes = 0x08 => "Write Zeroes",
        DatasetManagement = 0x09 => "Dataset Management",
        Verify = 0x0c => "Verify",
        ReservationRegister = 0x0d => "Reservation Register",
        ReservationReport = 0x0e => "Reservation Report",
        ReservationAcquire = 0x11 => "Reservation Acquire",
        ReservationRelease = 0x15 => "Reservation Release",
        Copy = 0x19 => "Copy",
        Fabrics = 0x7f => "Fabrics Command",
    }
}

enum_with_unknown! {
    /// Fabrics command types (FCTYPE, byte 4 of a fabrics command; NVMe-oF 1.1 Figure 7).
    pub enum FabricsType(u8) {
        PropertySet = 0x00 => "Property Set",
        Connect = 0x01 => "Connect",
        PropertyGet = 0x04 => "Property Get",
        AuthenticationSend = 0x05 => "Authentication Send",
        AuthenticationReceive = 0x06 => "Authentication Receive",
        Disconnect = 0x08 => "Disconnect",
    }
}

/// The opcode value shared by every fabrics command (admin and I/O queues).
pub const FABRICS_OPCODE: u8 = 0x7f;

impl AdminOpcode {
    /// Data transfer direction from the opcode's low two bits (Base 2.0 §5: 00 none,
    /// 01 host to controller, 10 controller to host, 11 bidirectional).
    pub fn data_direction(self) -> DataDirection {
        DataDirection::from_opcode(self.raw())
    }
}

impl IoOpcode {
    /// Data transfer direction from the opcode's low two bits.
    pub fn data_direction(self) -> DataDirection {
        DataDirection::from_opcode(self.raw())
    }
}

impl FabricsType {
    /// Data transfer direction from the FCTYPE's low two bits (same encoding as opcodes).
    pub fn data_direction(self) -> DataDirection {
        DataDirection::from_opcode(self.raw())
    }
}

/// Direction of a command's data transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataDirection {
    /// No data.
    None,
    /// Host to controller (write-like).
    HostToController,
    /// Controller to host (read-like).
    ControllerToHost,
    /// Both directions.
    Bidirectional,
}

impl DataDirection {
    /// From an opcode (or FCTYPE) value's low two bits.
    pub fn from_opcode(op: u8) -> Self {
        match op & 3 {
            0 => DataDirection::None,
            1 => DataDirection::HostToController,
            2 => DataDirection::ControllerToHost,
            _ => DataDirection::Bidirectional,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_unknown() {
        for op in AdminOpcode::ALL {
            assert_eq!(AdminOpcode::from(op.raw()), *op);
        }
        for op in IoOpcode::ALL {
            assert_eq!(IoOpcode::from(op.raw()), *op);
        }
        for op in FabricsType::ALL {
            assert_eq!(FabricsType::from(op.raw()), *op);
        }
        assert_eq!(AdminOpcode::from(0x03), AdminOpcode::Unknown(0x03));
        assert_eq!(u8::from(AdminOpcode::Unknown(0x03)), 0x03);
        assert_eq!(IoOpcode::Unknown(0x42).to_string(), "Unknown(0x42)");
    }

    #[test]
    fn values_match_spec() {
        // Spot values from the spec / Linux nvme.h enum nvme_admin_opcode, nvme_opcode, nvmf_capsule_command.
        assert_eq!(AdminOpcode::Identify.raw(), 0x06);
        assert_eq!(AdminOpcode::KeepAlive.raw(), 0x18);
        assert_eq!(AdminOpcode::AsyncEventRequest.raw(), 0x0c);
        assert_eq!(IoOpcode::Read.raw(), 0x02);
        assert_eq!(IoOpcode::WriteZeroes.raw(), 0x08);
        assert_eq!(IoOpcode::DatasetManagement.raw(), 0x09);
        assert_eq!(FabricsType::PropertyGet.raw(), 0x04);
        assert_eq!(FabricsType::Connect.raw(), 0x01);
        assert_eq!(
            IoOpcode::Write.data_direction(),
            DataDirection::HostToController
        );
        assert_eq!(
            IoOpcode::Read.data_direction(),
            DataDirection::ControllerToHost
        );
        assert_eq!(
            AdminOpcode::Identify.data_direction(),
            DataDirection::ControllerToHost
        );
        assert_eq!(
            FabricsType::Connect.data_direction(),
            DataDirection::HostToController
        );
        assert_eq!(
            FabricsType::PropertySet.data_direction(),
            DataDirection::None
        );
    }
}
