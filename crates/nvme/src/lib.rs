//! # nvme — NVMe specification types
//!
//! Owns: submission/completion queue entries, opcodes (admin, I/O, fabrics), status
//! codes, Identify structures, log pages, SGL descriptors and PRP lists with
//! builders and walkers that turn them into iovec lists.
//!
//! Depends on nothing inside dpustack. No I/O.
