//! Transport rules for data pointers: PCIe admin commands use PRPs only; fabrics
//! commands (admin and I/O) use SGLs only, with the descriptor types each fabric
//! allows in SGL descriptor 1.

use crate::cmd::Psdt;
use crate::sgl::{SglSubtype, SglType};
use crate::status::{GenericStatus, Status};
use crate::Sqe;

/// Which transport carries the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// PCI Express (memory-based; PRPs and, for I/O, optionally SGLs).
    Pcie,
    /// NVMe/TCP (message-based).
    Tcp,
    /// NVMe/RDMA (message-based).
    Rdma,
}

/// Which queue the command arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    Admin,
    Io,
}

/// A data pointer that breaks a transport rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RuleError {
    /// PSDT is 11b (reserved).
    #[error("PSDT is reserved (11b)")]
    PsdtReserved,
    /// An admin command on PCIe uses SGLs.
    #[error("admin commands on PCIe must use PRPs")]
    SglOnPcieAdmin,
    /// An I/O command on PCIe uses SGLs but the controller does not support them.
    #[error("SGLs not supported by this controller")]
    SglNotSupported,
    /// A fabrics command uses PRPs.
    #[error("fabrics commands must use SGLs")]
    PrpOnFabrics,
    /// PSDT 10b (metadata as SGL) on fabrics, which carries no separate metadata.
    #[error("fabrics commands must use PSDT 01b")]
    FabricsMetadataSgl,
    /// SGL descriptor 1 has a type this transport does not accept.
    #[error("SGL descriptor type {id:#04x} not allowed on {transport:?}")]
    DescriptorType { transport: Transport, id: u8 },
}

impl RuleError {
    /// The NVMe status for this error.
    pub fn status(&self) -> Status {
        match self {
            RuleError::DescriptorType { .. } => {
                Status::generic(GenericStatus::SglDescriptorTypeInvalid)
            }
            _ => Status::generic(GenericStatus::InvalidField),
        }
    }
}

/// Check a command's PSDT and SGL descriptor 1 against the transport rules.
/// `sgl_supported` is the controller's SGL support (PCIe I/O queues only).
///
/// Fabrics SGL descriptor 1 may be: TCP — Data Block with Offset subtype
/// (in-capsule data) or Transport Data Block (0x5a); RDMA — Data Block / Last
/// Segment with Offset subtype (in-capsule) or Keyed Data Block (Address or
/// Invalidate Key). A command without data (length 0) passes whatever the type.
pub fn check_data_pointer(
    sqe: &Sqe,
    transport: Transport,
    queue: QueueKind,
    sgl_supported: bool,
) -> Result<(), RuleError> {
    let psdt = sqe.psdt();
    if psdt == Psdt::Reserved {
        return Err(RuleError::PsdtReserved);
    }
    match transport {
        Transport::Pcie => match (queue, psdt.is_sgl()) {
            (_, false) => Ok(()),
            (QueueKind::Admin, true) => Err(RuleError::SglOnPcieAdmin),
            (QueueKind::Io, true) if !sgl_supported => Err(RuleError::SglNotSupported),
            (QueueKind::Io, true) => Ok(()),
        },
        Transport::Tcp | Transport::Rdma => {
            match psdt {
                Psdt::Prp => return Err(RuleError::PrpOnFabrics),
                Psdt::SglMptrSgl => return Err(RuleError::FabricsMetadataSgl),
                _ => {}
            }
            let d = sqe.sgl1();
            if d.data_length() == 0 {
                return Ok(());
            }
            let ok = matches!(
                (transport, d.sgl_type(), d.subtype()),
                (Transport::Tcp, SglType::DataBlock, SglSubtype::Offset)
                    | (
                        Transport::Tcp,
                        SglType::TransportDataBlock,
                        SglSubtype::TransportSpecific
                    )
                    | (
                        Transport::Rdma,
                        SglType::DataBlock | SglType::LastSegment,
                        SglSubtype::Offset
                    )
                    | (
                        Transport::Rdma,
                        SglType::KeyedDataBlock,
                        SglSubtype::Address | SglSubtype::InvalidateKey
                    )
            );
            if ok {
                Ok(())
            } else {
                Err(RuleError::DescriptorType {
                    transport,
                    id: d.id(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgl::SglDescriptor;
    use crate::{AdminOpcode, IoOpcode};

    #[test]
    fn pcie_admin_prp_only() {
        let mut s = Sqe::admin(AdminOpcode::Identify, 1, 0);
        s.set_prp(0x1000, 0);
        assert_eq!(
            check_data_pointer(&s, Transport::Pcie, QueueKind::Admin, true),
            Ok(())
        );
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Address, 0x1000, 4096));
        assert_eq!(
            check_data_pointer(&s, Transport::Pcie, QueueKind::Admin, true),
            Err(RuleError::SglOnPcieAdmin)
        );
        let mut r = Sqe::rw(IoOpcode::Read, 1, 1, 0, 8);
        r.set_sgl(SglDescriptor::data_block(SglSubtype::Address, 0x1000, 4096));
        assert_eq!(
            check_data_pointer(&r, Transport::Pcie, QueueKind::Io, true),
            Ok(())
        );
        assert_eq!(
            check_data_pointer(&r, Transport::Pcie, QueueKind::Io, false),
            Err(RuleError::SglNotSupported)
        );
        r.set_flags(0xc0);
        assert_eq!(
            check_data_pointer(&r, Transport::Pcie, QueueKind::Io, true),
            Err(RuleError::PsdtReserved)
        );
    }

    #[test]
    fn fabrics_sgl_only() {
        let mut s = Sqe::rw(IoOpcode::Write, 1, 1, 0, 1);
        s.set_prp(0x1000, 0);
        let e = check_data_pointer(&s, Transport::Tcp, QueueKind::Io, true).unwrap_err();
        assert_eq!(e, RuleError::PrpOnFabrics);
        assert_eq!(e.status(), Status::generic(GenericStatus::InvalidField));
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Offset, 0, 4096));
        assert_eq!(
            check_data_pointer(&s, Transport::Tcp, QueueKind::Io, true),
            Ok(())
        );
        s.set_sgl(SglDescriptor::transport_data_block(4096));
        assert_eq!(
            check_data_pointer(&s, Transport::Tcp, QueueKind::Io, true),
            Ok(())
        );
        // keyed is RDMA-only
        s.set_sgl(SglDescriptor::keyed_data_block(0x1000, 4096, 5, false));
        let e = check_data_pointer(&s, Transport::Tcp, QueueKind::Io, true).unwrap_err();
        assert_eq!(
            e,
            RuleError::DescriptorType {
                transport: Transport::Tcp,
                id: 0x40
            }
        );
        assert_eq!(
            e.status(),
            Status::generic(GenericStatus::SglDescriptorTypeInvalid)
        );
        assert_eq!(
            check_data_pointer(&s, Transport::Rdma, QueueKind::Io, true),
            Ok(())
        );
        // Data Block with Address subtype is not valid on fabrics
        s.set_sgl(SglDescriptor::data_block(SglSubtype::Address, 0x1000, 4096));
        assert!(check_data_pointer(&s, Transport::Rdma, QueueKind::Io, true).is_err());
        // fabrics admin commands follow the same rule
        let mut c = Sqe::connect(1, 0, 31, 0);
        assert_eq!(
            check_data_pointer(&c, Transport::Tcp, QueueKind::Admin, true),
            Err(RuleError::PrpOnFabrics)
        );
        c.set_sgl(SglDescriptor::data_block(SglSubtype::Offset, 0, 1024));
        assert_eq!(
            check_data_pointer(&c, Transport::Tcp, QueueKind::Admin, true),
            Ok(())
        );
        c.set_psdt(Psdt::SglMptrSgl);
        assert_eq!(
            check_data_pointer(&c, Transport::Tcp, QueueKind::Admin, true),
            Err(RuleError::FabricsMetadataSgl)
        );
        // no data: any descriptor type passes
        let mut f = Sqe::rw(IoOpcode::Flush, 1, 1, 0, 1);
        f.set_psdt(Psdt::SglMptrContig);
        assert_eq!(
            check_data_pointer(&f, Transport::Tcp, QueueKind::Io, true),
            Ok(())
        );
    }
}
