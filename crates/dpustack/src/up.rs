//! `dpustack up`: start the node (`node::Node`), print each part's status —
//! loudly for parts that failed or are not built yet — and run until Ctrl-C (or
//! `--for SECS`).

use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::{Node, Status};

use crate::config::Config;

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Stop by itself after this many seconds (for scripts and tests).
    #[arg(long = "for", value_name = "SECS")]
    pub for_secs: Option<f64>,
    #[command(flatten)]
    pub rpc: crate::cmd::rpc::ServerArgs,
}

pub fn run(cfg: &Config, args: &UpArgs) -> Result<()> {
    std::fs::create_dir_all(&cfg.node.data_dir)?;
    println!(
        "dpustack {} — node on {} (data dir {})",
        env!("CARGO_PKG_VERSION"),
        cfg.node.listen_ip,
        cfg.node.data_dir.display()
    );
    let node = Node::start(cfg);
    // a failing part is reported, the rest of the node carries on
    for p in node.parts() {
        if let Status::Failed(e) = &p.status {
            eprintln!("  FAILED   {:<8} {e}", p.name);
        }
    }
    for p in node.parts() {
        let name = p.name;
        match &p.status {
            Status::Running(detail) => println!("  running  {name:<8} {detail}"),
            Status::NotYet { issue, what } => {
                let issue = issue.map_or("a later issue".to_string(), |n| format!("issue #{n}"));
                eprintln!("  NOT YET  {name:<8} {what} — not implemented yet ({issue})");
            }
            Status::Disabled(why) => println!("  disabled {name:<8} ({why})"),
            Status::Failed(_) => {}
        }
    }
    let missing = node.missing();
    if missing > 0 {
        eprintln!("WARNING: {missing} part(s) of the node are not running (see above)");
    }
    let kinds = vec![(
        "bdev0".to_string(),
        crate::cmd::rpc::kind_of_spec(&cfg.nvmf.bdev),
    )];
    let mgmt = crate::cmd::rpc::start_management(&args.rpc, cfg, node.nvmf(), &kinds, Some(&node))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))?;
    }
    let deadline = args
        .for_secs
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    println!("up; Ctrl-C to stop");
    while !stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("stopping");
    mgmt.stop();
    node.stop();
    Ok(())
}
