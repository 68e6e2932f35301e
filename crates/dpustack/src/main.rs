//! `dpustack` — the command-line front end of the stack: argument parsing, output
//! and exit codes. The only crate that uses `anyhow`; each area of the stack has
//! its own module under `cmd/` that owns its subcommands and its benchmark; the
//! engines are library crates (`verbs-tools`, `cm-tools`, `switch`, `node`), the
//! node's parts and their config sections are the `node` runtime's.

mod cmd;
mod config;
mod up;

use anyhow::Result;
use clap::{Parser, Subcommand};
use config::ConfigFile;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "dpustack",
    version,
    about = "DPU / storage-node stack in user space: RDMA verbs + RoCEv2, RDMA CM, NVMe-oF, TSE, flow table"
)]
struct Cli {
    /// TOML config file; every value defaults to the embedded defaults (`dpustack config show`).
    #[arg(long, global = true, env = "DPUSTACK_CONFIG")]
    config: Option<PathBuf>,
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Verbs provider: soft (software RoCEv2), rdma-core (kernel RDMA devices,
    /// needs a build with `--features rdma-core`), auto (default: rdma-core for
    /// a kernel device when built with it, else soft). Config: `[rdma] provider`.
    #[arg(long, global = true, value_enum, env = "DPUSTACK_PROVIDER")]
    provider: Option<cmd::devices::ProviderChoice>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the node on the configured (or embedded default) settings until Ctrl-C.
    Up(up::UpArgs),
    /// Show the effective configuration.
    Config {
        #[command(subcommand)]
        what: ConfigCmd,
    },
    /// Benchmarks: every figure next to a baseline measured in the same run.
    Bench(cmd::bench::BenchArgs),
    /// RDMA devices of both providers: name, node GUID, ports, state, active MTU, GIDs.
    Devices(cmd::devices::DevicesArgs),
    #[command(flatten)]
    Rdma(cmd::rdma::Cmd),
    #[command(flatten)]
    Cm(cmd::cm::Cmd),
    #[command(flatten)]
    Storage(cmd::nvmf::Cmd),
    #[command(flatten)]
    Tse(cmd::tse::Cmd),
    #[command(flatten)]
    Switch(cmd::switch::Cmd),
    #[command(flatten)]
    Obj(cmd::obj::Cmd),
    #[command(flatten)]
    Rpc(cmd::rpc::Cmd),
    #[command(flatten)]
    System(cmd::system::Cmd),
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Print the effective configuration as TOML.
    Show,
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let mut cfg = config::Config::load(cli.config.as_deref())?;
    cmd::devices::select(cli.provider, &mut cfg)?;
    match cli.command {
        Command::Up(args) => up::run(&cfg, &args),
        Command::Config {
            what: ConfigCmd::Show,
        } => {
            print!("{}", cfg.to_toml()?);
            Ok(())
        }
        Command::Bench(args) => cmd::bench::run(&args, &cfg),
        Command::Devices(args) => cmd::devices::run(&args),
        Command::Rdma(c) => cmd::rdma::run(c, &cfg),
        Command::Cm(c) => cmd::cm::run(c, &cfg),
        Command::Storage(c) => cmd::nvmf::run(c, &cfg),
        Command::Tse(c) => cmd::tse::run(c, &cfg),
        Command::Switch(c) => cmd::switch::run(c, &cfg),
        Command::Obj(c) => cmd::sysobj::run(c, &cfg),
        Command::Rpc(c) => cmd::rpc::run(c),
        Command::System(c) => cmd::system::run(c, &cfg),
    }
}
