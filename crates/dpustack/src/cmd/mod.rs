//! One module per area of the stack. Each owns: its subcommands (a clap
//! `Subcommand` enum flattened into the top level), their output, and its
//! benchmark (`fn bench`). The area's part of `dpustack up` and its config
//! section are in the `node` crate.

pub mod bench;
pub mod cm;
pub mod devices;
pub mod nvmf;
pub mod obj;
pub mod rdma;
pub mod rpc;
pub mod switch;
pub mod sysobj;
pub mod system;
pub mod tse;
