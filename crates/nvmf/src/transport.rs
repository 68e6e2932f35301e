//! The transport interface (SPDK `spdk_nvmf_transport_ops`).

/// What a transport tells the controllers of its queues (SPDK `cdata_init`):
/// Identify's MDTS and IOCCSZ, and the largest Get Log Page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// Largest data transfer of one command (MDTS), bytes.
    pub max_xfer: u32,
    /// Largest in-capsule data on I/O queues, bytes (IOCCSZ = (64 + this) / 16).
    pub in_capsule: u32,
}

impl Default for TransportLimits {
    /// NVMe/TCP's defaults (1 MiB, 8 KiB).
    fn default() -> Self {
        TransportLimits {
            max_xfer: 1024 * 1024,
            in_capsule: 8192,
        }
    }
}
