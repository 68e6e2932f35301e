//! Flow table / megaflow switch (issue #7): switch trace, run, dump-flows, add/del/replace-flows.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::cmd::bench::BenchArgs;
use crate::cmd::not_implemented;
use crate::config::Config;
use crate::up::Part;

/// The `[switch]` section of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    pub enabled: bool,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig { enabled: true }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// OpenFlow table + megaflow datapath: trace, run, dump-flows, add-flows, del-flows, replace-flows.
    Switch {
        #[command(subcommand)]
        cmd: SwitchCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum SwitchCmd {
    /// Trace packets through a flow table like `ovs-appctl ofproto/trace`: prints the
    /// megaflow and the datapath actions OVS would install.
    Trace(TraceArgs),
    /// Run a live switch (AF_PACKET / pcap ports). NOT IMPLEMENTED yet.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Dump the datapath flows of a running switch. NOT IMPLEMENTED yet.
    DumpFlows {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Add flows to a running switch. NOT IMPLEMENTED yet.
    AddFlows {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Delete flows from a running switch. NOT IMPLEMENTED yet.
    DelFlows {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Replace the flows of a running switch. NOT IMPLEMENTED yet.
    ReplaceFlows {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Flow table in `ovs-ofctl add-flows` syntax.
    #[arg(long)]
    pub flows: PathBuf,
    /// Packets, one per line: an OpenFlow exact-flow string (`in_port=1,tcp,nw_dst=...`),
    /// optionally followed by the Ethernet frame as hex (then the frame is parsed and the
    /// flow string only supplies `in_port`).
    #[arg(long)]
    pub packets: Option<PathBuf>,
    /// Print a JSON list of {"packet","megaflow","actions"}.
    #[arg(long)]
    pub json: bool,
    /// Disable the nw_src/nw_dst prefix tries (like OVS `prefixes=none`).
    #[arg(long)]
    pub no_prefixes: bool,
    /// Packets given on the command line (same syntax as --packets lines).
    pub flow: Vec<String>,
}

fn is_hex(s: &str) -> bool {
    s.len() >= 28 && s.len() % 2 == 0 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Parses one packet line into a flow key; true when it came from packet bytes.
pub fn packet_key(line: &str) -> Result<(flow::FlowKey, bool)> {
    let line = line.trim();
    let mut parts = line.split_whitespace();
    let first = parts.next().unwrap_or("");
    if let Some(h) = parts.next() {
        if is_hex(h) {
            let meta =
                flow::parse_exact_flow(first).map_err(|e| anyhow!("packet `{line}`: {e}"))?;
            return Ok((
                flow::FlowKey::from_packet(meta.in_port(), &hex_bytes(h)),
                true,
            ));
        }
    }
    let k = flow::parse_exact_flow(line).map_err(|e| anyhow!("packet `{line}`: {e}"))?;
    Ok((k, false))
}

fn trace_cmd(a: &TraceArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.flows)
        .with_context(|| format!("reading {}", a.flows.display()))?;
    let rules = flow::parse_flows(&text).map_err(|e| anyhow!("{}: {e}", a.flows.display()))?;
    let mut table = flow::FlowTable::from_rules(rules);
    table.cls.set_prefix_tracking(!a.no_prefixes);
    let mut pkts: Vec<String> = a.flow.clone();
    if let Some(p) = &a.packets {
        let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        pkts.extend(
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
    }
    if pkts.is_empty() {
        bail!("no packets: give FLOW arguments or --packets FILE");
    }
    let mut out = Vec::new();
    for (i, p) in pkts.iter().enumerate() {
        let (k, bytes) = packet_key(p)?;
        let t = flow::trace(&table, &k, bytes);
        if a.json {
            out.push(
                serde_json::json!({"packet": p, "megaflow": t.megaflow, "actions": t.actions}),
            );
        } else {
            if i > 0 {
                println!();
            }
            if pkts.len() > 1 {
                println!("Packet: {p}");
            }
            println!("Megaflow: {}", t.megaflow);
            println!("Datapath actions: {}", t.actions);
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    let Cmd::Switch { cmd } = cmd;
    match cmd {
        SwitchCmd::Trace(a) => trace_cmd(&a),
        SwitchCmd::Run { .. } => Err(not_implemented("switch run", 7)),
        SwitchCmd::DumpFlows { .. } => Err(not_implemented("switch dump-flows", 7)),
        SwitchCmd::AddFlows { .. } => Err(not_implemented("switch add-flows", 7)),
        SwitchCmd::DelFlows { .. } => Err(not_implemented("switch del-flows", 7)),
        SwitchCmd::ReplaceFlows { .. } => Err(not_implemented("switch replace-flows", 7)),
    }
}

/// This area's part of `dpustack up`.
pub fn up(cfg: &Config) -> Result<Part> {
    if !cfg.switch.enabled {
        return Ok(Part::Disabled { name: "switch" });
    }
    Ok(Part::not_yet(
        "switch",
        Some(7),
        "flow table and megaflow datapath",
    ))
}

/// `dpustack bench flow`: single-core lookup rates of the datapath cache, each next to
/// the same-run cost of hashing a flow key (the EMC's own hash over the 120-byte key).
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    use benchkit::{median, Better, Figure};
    use flow::bench as fb;
    let t = args.run_time();
    let runs = args.runs();
    let med = |mut v: Vec<f64>| median(&mut v).unwrap_or(0.0);
    let mut rep = benchkit::Report::new("flow");
    let mut base = Vec::new();
    let mut cpy = Vec::new();
    for _ in 0..runs {
        base.push(fb::baseline_hash(t));
        cpy.push(fb::baseline_memcpy(t));
    }
    let base = med(base);
    let cpy = med(cpy);
    let bname = "hash of flow key (120 B)";
    rep.push(Figure::new(
        "baseline: memcpy of flow key (120 B)",
        cpy / 1e6,
        "Mops/s",
        bname,
        base / 1e6,
        Better::Higher,
    ));
    let (mut v, mut d) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, emc) = fb::emc_hits(t, 1000);
        v.push(x);
        d.push(emc);
    }
    rep.push(
        Figure::new(
            "EMC hit lookups (1k flows, incl. stats)",
            med(v) / 1e6,
            "Mlookup/s",
            bname,
            base / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"emc_hit_pct": med(d)})),
    );
    let quick = args.quick;
    for &masks in &[10usize, 100, 1000] {
        for &flows in &[1_000usize, 100_000] {
            if flows < masks || (quick && flows > 1000) {
                continue;
            }
            let (mut v, mut p) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let (x, probes) = fb::dpcls_lookups(t, masks, flows);
                v.push(x);
                p.push(probes);
            }
            rep.push(
                Figure::new(
                    format!("megaflow lookups, {masks} masks, {}k flows", flows / 1000),
                    med(v) / 1e6,
                    "Mlookup/s",
                    bname,
                    base / 1e6,
                    Better::Higher,
                )
                .with_detail(serde_json::json!({"avg_subtables_probed": med(p), "emc": false, "hit_distribution": "uniform over megaflows"})),
            );
        }
    }
    let (mut v, mut fr) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, frac) = fb::upcalls(t, 1000);
        v.push(x);
        fr.push(frac);
    }
    rep.push(
        Figure::new(
            "upcalls (miss -> xlate -> install), 1k rules",
            med(v) / 1e6,
            "Mupcall/s",
            bname,
            base / 1e6,
            Better::Higher,
        )
        .with_detail(serde_json::json!({"megaflows_per_mask_at_end": med(fr)})),
    );
    rep.note("single core, keys pre-parsed (parsing excluded); EMC off for the megaflow figures");
    rep.note("context (OVS commit messages, 10G NIC): dpcls ~5.4 Mpps/core, EMC ~12 Mpps/core");
    rep.note("megaflow packets pick a megaflow uniformly, so about half the masks are probed: tuple space search cost grows with masks");
    Ok(rep)
}
