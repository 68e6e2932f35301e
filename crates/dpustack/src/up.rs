//! `dpustack up`: start every part of the node that exists, say loudly which parts
//! do not exist yet, and run until Ctrl-C (or `--for SECS`).

use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::config::Config;

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Stop by itself after this many seconds (for scripts and tests).
    #[arg(long = "for", value_name = "SECS")]
    pub for_secs: Option<f64>,
}

/// One part of the node as `up` sees it.
#[allow(dead_code)] // `Running` is constructed by each area once its service exists
pub enum Part {
    /// Started; `stop` is called on shutdown.
    Running {
        name: &'static str,
        detail: String,
        stop: Option<Box<dyn FnOnce() + Send>>,
    },
    /// Not built yet: `up` prints this loudly.
    NotYet {
        name: &'static str,
        issue: Option<u32>,
        what: &'static str,
    },
    /// Turned off (or given nothing to do) by the config; `why` says which setting.
    Disabled {
        name: &'static str,
        why: &'static str,
    },
}

impl Part {
    pub fn not_yet(name: &'static str, issue: Option<u32>, what: &'static str) -> Part {
        Part::NotYet { name, issue, what }
    }
}

/// How an area starts its part of the node.
type Starter = fn(&Config) -> Result<Part>;

pub fn run(cfg: &Config, args: &UpArgs) -> Result<()> {
    std::fs::create_dir_all(&cfg.node.data_dir)?;
    println!(
        "dpustack {} — node on {} (data dir {})",
        env!("CARGO_PKG_VERSION"),
        cfg.node.listen_ip,
        cfg.node.data_dir.display()
    );
    let starters: [(&str, Starter); 6] = [
        ("rdma", cmd::rdma::up),
        ("cm", cmd::cm::up),
        ("nvmf", cmd::nvmf::up),
        ("tse", cmd::tse::up),
        ("switch", cmd::switch::up),
        ("obj", object_store_up),
    ];
    let mut parts = Vec::new();
    let mut missing = 0;
    for (name, start) in starters {
        match start(cfg) {
            Ok(p) => parts.push(p),
            Err(e) => {
                // a failing part is reported, the rest of the node carries on
                eprintln!("  FAILED   {name:<8} {e:#}");
                missing += 1;
            }
        }
    }
    for p in &parts {
        match p {
            Part::Running { name, detail, .. } => println!("  running  {name:<8} {detail}"),
            Part::NotYet { name, issue, what } => {
                missing += 1;
                let issue = issue.map_or("a later issue".to_string(), |n| format!("issue #{n}"));
                eprintln!("  NOT YET  {name:<8} {what} — not implemented yet ({issue})");
            }
            Part::Disabled { name, why } => println!("  disabled {name:<8} ({why})"),
        }
    }
    if missing > 0 {
        eprintln!("WARNING: {missing} part(s) of the node are not running (see above)");
    }
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
    for p in parts {
        if let Part::Running { stop: Some(f), .. } = p {
            f();
        }
    }
    Ok(())
}

fn object_store_up(cfg: &Config) -> Result<Part> {
    cmd::obj::up(cfg)
}
