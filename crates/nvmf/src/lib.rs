//! # nvmf — NVMe over Fabrics target and host (SPDK's nvmf model)
//!
//! Owns: target, subsystems, namespaces on bdevs, controllers, queue pairs, poll
//! groups, the discovery subsystem, the NVMe/TCP transport (and, later, RDMA over
//! `verbs`), and the host library.
//!
//! Depends on `wire` (NVMe/TCP PDUs), `nvme` (SQE/CQE/SGL), `bdev`, `netio`.

pub mod tcp;
