//! One module per area of the stack. Each owns: its subcommands (a clap
//! `Subcommand` enum flattened into the top level), its config section, its part
//! of `dpustack up` (`fn up`) and its benchmark (`fn bench`).

pub mod bench;
pub mod cm;
pub mod nvmf;
pub mod obj;
pub mod rdma;
pub mod switch;
pub mod tse;
