//! The live switch loop: receive on the ports, switch through the (optionally
//! offloaded) datapath cache, apply control commands (from
//! [`crate::control::Control`]; `offload-stats` and `config` answered here, the
//! others by [`crate::control::handle`]), run the revalidator every 0.5 s and right
//! after a command changed the table.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flow::dp::Datapath;
use flow::driver::poll_readable;
use flow::FlowTable;

use crate::control::{self, Control, ControlRx};
use crate::port::{open_port, Port, TxOutcome, TxQueue};
use crate::{read_flows, Error, Result};

/// What a switch runs with.
#[derive(Debug, Clone)]
pub struct SwitchOpts {
    /// Initial flow table (ovs-ofctl add-flows file).
    pub flows: Option<PathBuf>,
    /// Initial group table (ovs-ofctl add-groups file).
    pub groups: Option<PathBuf>,
    /// Ports: `N=afpacket:IF`, `N=pcap-rx:FILE`, `N=pcap-tx:FILE`.
    pub ports: Vec<String>,
    /// Stop after this long (none: until stopped).
    pub duration: Option<Duration>,
    /// Megaflows idle this long are removed (OVS other_config:max-idle).
    pub max_idle_ms: u64,
    /// NORMAL: port VLAN configuration, `N:tag=V;trunks=A,B;vlan_mode=M` (ports not
    /// named are trunks of every VLAN, as ports without `tag` in OVS).
    pub vlans: Vec<String>,
    /// NORMAL: MAC aging (OVS other_config:mac-aging-time, default 300 s).
    pub mac_aging_s: u64,
    /// NORMAL: MAC table size (OVS other_config:mac-table-size, default 8192).
    pub mac_table_size: usize,
    /// hw-offload, offload providers/threads, flow limit ([`crate::offload`]).
    pub dp: crate::offload::DatapathOpts,
    /// The OpenFlow channel: listeners, controllers, fail mode
    /// ([`crate::openflow_io`]; none configured: no channel).
    pub openflow: crate::openflow_io::OfOpts,
}

/// Stops a running switch loop (from a signal handler, another thread, or `up`'s stop).
#[derive(Debug, Clone, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    pub fn new() -> StopHandle {
        StopHandle::default()
    }
    /// Asks the loop to stop (it notices within ~10 ms).
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Counters {
    rx: u64,
    tx: u64,
    dropped_no_port: u64,
    packet_ins: u64,
    rules_expired: u64,
    /// Frames the kernel dropped on the AF_PACKET ports' receive queues.
    port_rx_dropped: u64,
}

/// Frames read from one port per loop round: the bound of the switch's own
/// receive queue (the rest waits in the kernel's, whose drops are counted).
const RX_BATCH: usize = 64;

/// A switch on its own thread.
pub struct Switch {
    stop: StopHandle,
    control: Control,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl Switch {
    /// Opens the ports, then runs the loop on a thread named "switch" (its lines go
    /// to stderr); returns once it is up, or the error that kept it from coming up.
    /// [`Switch::control`] sends it commands.
    pub fn start(opts: SwitchOpts) -> Result<Switch> {
        let stop = StopHandle::new();
        let (control, crx) = control::channel()?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("switch".into())
            .spawn(move || {
                let set = setup(&opts);
                let (mut table, mut ports) = match set {
                    Ok(x) => {
                        let _ = ready_tx.send(None);
                        x
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Some(e));
                        return Ok(());
                    }
                };
                let mut log = std::io::stderr();
                run_loop(&opts, &s2, &mut table, &mut ports, &crx, &mut log)
            })?;
        match ready_rx.recv() {
            Ok(None) => Ok(Switch {
                stop,
                control,
                thread,
            }),
            Ok(Some(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(Error::ThreadEnded),
            },
        }
    }

    /// A handle that sends the running loop commands (it answers
    /// [`Error::Stopped`] once the loop ended).
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Stops the loop and waits for it.
    pub fn stop(self) -> Result<()> {
        self.stop.stop();
        self.thread.join().map_err(|_| Error::ThreadEnded)?
    }
}

/// Runs the switch on this thread until `stop`, a [`control::Command::Stop`] or
/// `opts.duration`, applying the commands sent through `ctl`'s [`Control`]; its
/// lines go to `log`.
pub fn run(
    opts: &SwitchOpts,
    stop: &StopHandle,
    ctl: &ControlRx,
    log: &mut dyn Write,
) -> Result<()> {
    let (mut table, mut ports) = setup(opts)?;
    run_loop(opts, stop, &mut table, &mut ports, ctl, log)
}

type Setup = (FlowTable, BTreeMap<u32, Port>);

fn setup(a: &SwitchOpts) -> Result<Setup> {
    let rules = match &a.flows {
        Some(p) => read_flows(p)?,
        None => Vec::new(),
    };
    let groups = match &a.groups {
        Some(p) => crate::read_groups(p)?,
        None => Vec::new(),
    };
    let table = crate::build_table(rules, groups)?;
    let mut ports: BTreeMap<u32, Port> = BTreeMap::new();
    for spec in &a.ports {
        let (n, p) = open_port(spec)?;
        if ports.insert(n, p).is_some() {
            return Err(Error::Config(format!("port {n} given twice")));
        }
    }
    if ports.is_empty() {
        return Err(Error::Config(
            "no ports: give --port N=afpacket:IF / pcap-rx:FILE / pcap-tx:FILE".into(),
        ));
    }
    let mut table = table;
    table.ports = Some(ports.keys().copied().collect());
    crate::configure_bridge(&mut table, &a.vlans, a.mac_aging_s, a.mac_table_size)?;
    Ok((table, ports))
}

/// (port, interface) of the `N=afpacket:IF` ports.
fn afpacket_ports(a: &SwitchOpts) -> Vec<(u32, String)> {
    a.ports
        .iter()
        .filter_map(|s| {
            let (n, rest) = s.split_once('=')?;
            let n: u32 = n.trim().parse().ok()?;
            match rest.split_once(':') {
                Some(("afpacket", ifname)) => Some((n, ifname.to_string())),
                _ => None,
            }
        })
        .collect()
}

fn run_loop(
    a: &SwitchOpts,
    stop: &StopHandle,
    table: &mut FlowTable,
    ports: &mut BTreeMap<u32, Port>,
    ctl: &ControlRx,
    log: &mut dyn Write,
) -> Result<()> {
    let mut dp = Datapath::new();
    let mut dpo = a.dp.clone();
    dpo.linux_ports = afpacket_ports(a);
    dp.set_offload(dpo.offload()?);
    dp.set_smc(dpo.smc_enable);
    if dpo.hw_offload {
        let emu = dpo
            .offload_priority
            .split(',')
            .any(|p| matches!(p.trim(), "tc" | "rte" | "dpdk"));
        writeln!(
            log,
            "hw-offload on: providers {}{}, {} offload threads",
            dpo.offload_priority,
            if emu {
                " (tc, rte: an EMULATED NIC, no hardware is programmed; tc-linux: the kernel's tc flower, skip_hw)"
            } else {
                " (tc-linux: the kernel's tc flower, skip_hw)"
            },
            dpo.n_offload_threads
        )?;
    }
    let mut rv = dpo.revalidator(a.max_idle_ms);
    let start = Instant::now();
    let deadline = a.duration.map(|d| start + d);
    let mut c = Counters::default();
    let mut buf = vec![0u8; 65536];
    let mut pending: Vec<(u32, Vec<u8>)> = Vec::new();
    // A bounded transmit queue per AF_PACKET port.
    let mut txq: BTreeMap<u32, TxQueue> = ports
        .iter()
        .filter(|(_, p)| matches!(p, Port::Af(_)))
        .map(|(&n, _)| (n, TxQueue::new(dpo.port_tx_queue)))
        .collect();
    let mut next_drop_check = 0u64;
    // pcap-rx ports are replayed once, in port order.
    for (&n, p) in ports.iter_mut() {
        if let Port::PcapRx(frames) = p {
            for fr in frames.drain(..) {
                pending.push((n, fr));
            }
        }
    }
    let mut of = if a.openflow.enabled() {
        let names: BTreeMap<u32, String> = a
            .ports
            .iter()
            .filter_map(|s| {
                let (n, rest) = s.split_once('=')?;
                let n: u32 = n.trim().parse().ok()?;
                let name = match rest.split_once(':') {
                    Some(("afpacket", ifname)) => ifname.to_string(),
                    _ => format!("p{n}"),
                };
                Some((n, name))
            })
            .collect();
        let ag = crate::openflow_io::OfAgent::start(&a.openflow, &names, 1)?;
        writeln!(
            log,
            "openflow: listening on {:?}, controllers {:?}, fail mode {}",
            a.openflow.listen, a.openflow.controllers, a.openflow.fail_mode
        )?;
        Some(ag)
    } else {
        None
    };
    writeln!(
        log,
        "switch running: {} ports, {} rules, {} groups",
        ports.len(),
        table.len(),
        table.groups.len(),
    )?;
    while !stop.is_stopped() && deadline.is_none_or(|d| Instant::now() < d) {
        let now_ms = start.elapsed().as_millis() as u64 + 1;
        // Frames the kernel had no room for last round.
        for (n, q) in txq.iter_mut() {
            if let (false, Some(Port::Af(s))) = (q.is_empty(), ports.get(n)) {
                let sent = q.flush(|f| s.send(f));
                c.tx += sent as u64;
            }
        }
        // The kernel's receive-queue drops, every 0.5 s.
        if now_ms >= next_drop_check {
            next_drop_check = now_ms + 500;
            for p in ports.values() {
                if let Port::Af(s) = p {
                    c.port_rx_dropped += s.take_kernel_drops().unwrap_or(0);
                }
            }
        }
        // Receive.
        for (&n, p) in ports.iter() {
            if let Port::Af(s) = p {
                for _ in 0..RX_BATCH {
                    match s.recv(&mut buf)? {
                        Some(len) => pending.push((n, buf[..len].to_vec())),
                        None => break,
                    }
                }
            }
        }
        // Switch.
        for (in_port, mut frame) in pending.drain(..) {
            c.rx += 1;
            if let Some(ag) = of.as_mut() {
                ag.count_rx(in_port, frame.len());
            }
            let ex = dp.receive_execute(table, in_port, &mut frame, now_ms);
            c.packet_ins += ex.packet_ins as u64;
            if let Some(ag) = of.as_mut() {
                ag.packet_ins(in_port, &ex.to_controller);
            }
            for (out, fr) in ex.outputs {
                send_out(ports, &mut txq, &mut of, &mut c, start, out, &fr)?;
            }
        }
        // OpenFlow: connections, FLOW_MODs, PACKET_OUTs (their frames go out here).
        if let Some(ag) = of.as_mut() {
            let outs = ag.run(table, &mut dp, now_ms);
            for l in ag.log.drain(..) {
                writeln!(log, "{l}")?;
            }
            for (out, fr) in outs {
                send_out(ports, &mut txq, &mut of, &mut c, start, out, &fr)?;
            }
        }
        // Control commands.
        let of_stats = of.as_ref().map(|ag| ag.stats()).unwrap_or_default();
        let fill = |s: &mut control::Stats| {
            s.rx_packets = c.rx;
            s.tx_packets = c.tx;
            s.dropped_no_port = c.dropped_no_port;
            s.rules_expired = c.rules_expired;
            s.port_rx_dropped = c.port_rx_dropped;
            for q in txq.values() {
                s.port_tx_queued += q.len() as u64;
                s.port_tx_dropped += q.stats.dropped;
                s.port_tx_errors += q.stats.errors;
            }
            s.of_connections = of_stats.connections;
            s.of_connections_refused = of_stats.connections_refused;
            s.of_async_dropped = of_stats.async_dropped;
            s.of_packet_ins_dropped = of_stats.packet_ins_dropped;
            s.of_backlog_closes = of_stats.backlog_closes;
        };
        let mut own = |cmd: &control::Command, dp: &mut Datapath| match cmd {
            control::Command::OffloadStats => Some(Ok(control::Reply::Text(
                crate::offload::offload_stats(dp, &rv),
            ))),
            control::Command::Config(args) => Some(
                crate::offload::apply_config(args, &mut dpo, &mut rv, dp)
                    .map(control::Reply::Text)
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        };
        let down_before = of.as_ref().map(|_| table.ports_down.clone());
        if ctl.serve(table, &mut dp, now_ms, &fill, &mut own) {
            stop.stop();
        }
        // port-down / port-up: PORT_STATUS to the controllers.
        if let (Some(ag), Some(before)) = (of.as_mut(), down_before) {
            for p in before.symmetric_difference(&table.ports_down) {
                ag.port_changed(table, *p);
            }
        }
        // Offload results (states, marks); cheap when none is ready.
        dp.offload_poll();
        // Every 0.5 s the revalidator (OVS: a dump every ~0.5 s): hardware counters
        // (at most every offloaded-stats-delay), stats pushed to the rules, idle
        // megaflows (max-idle, shorter above the flow limit), rule timeouts, and
        // after a table change each megaflow kept / modified / deleted -- right after
        // the control command that changed the table (OVS wakes its revalidators on
        // a change), so no packet meets a stale megaflow.
        if rv.due(now_ms) || dp.needs_revalidation() {
            let t0 = Instant::now();
            let sw = rv.run(&mut dp, table, now_ms);
            rv.update_flow_limit(t0.elapsed().as_millis() as u64, dp.n_flows());
            for e in &sw.rules_expired {
                c.rules_expired += 1;
                if let Some(ag) = of.as_mut() {
                    ag.expired(e, now_ms);
                }
                writeln!(
                    log,
                    "rule expired ({:?} timeout): {}",
                    e.reason,
                    flow::ofproto::format_rule_stats(&e.rule, &e.stats, now_ms).trim_start()
                )?;
            }
        }
        // Wait for traffic or a control command (10 ms).
        let mut fds: Vec<i32> = ports
            .values()
            .filter_map(|p| match p {
                Port::Af(s) => Some(s.fd()),
                _ => None,
            })
            .collect();
        fds.push(ctl.fd());
        if let Some(ag) = of.as_ref() {
            fds.extend(ag.fds());
        }
        poll_readable(&fds, 10);
    }
    drop(of);
    writeln!(
        log,
        "switch stopped: rx {} tx {} dropped(no port) {} packet-ins {} upcalls {} recirculations {} megaflows {} rules expired {} hw-forwarded {} mark hits {}",
        c.rx,
        c.tx,
        c.dropped_no_port,
        c.packet_ins,
        dp.stats.upcalls,
        dp.stats.recirculations,
        dp.n_flows(),
        c.rules_expired,
        dp.stats.hw_forwarded,
        dp.stats.mark_hits
    )?;
    Ok(())
}

/// Sends a frame to port `out` (AF_PACKET through its bounded transmit queue, or
/// pcap), counting it.
fn send_out(
    ports: &mut BTreeMap<u32, Port>,
    txq: &mut BTreeMap<u32, TxQueue>,
    of: &mut Option<crate::openflow_io::OfAgent>,
    c: &mut Counters,
    start: Instant,
    out: u32,
    fr: &[u8],
) -> Result<()> {
    match ports.get_mut(&out) {
        Some(Port::Af(s)) => {
            let q = txq.entry(out).or_insert_with(|| TxQueue::new(1));
            match q.send(fr, |f| s.send(f)) {
                TxOutcome::Sent => {}
                TxOutcome::Queued => return Ok(()),
                TxOutcome::Dropped | TxOutcome::Error => {
                    if let Some(ag) = of.as_mut() {
                        ag.count_tx_dropped(out);
                    }
                    return Ok(());
                }
            }
        }
        Some(Port::PcapTx(w)) => w.write(start.elapsed(), fr)?,
        _ => {
            c.dropped_no_port += 1;
            return Ok(());
        }
    }
    c.tx += 1;
    if let Some(ag) = of.as_mut() {
        ag.count_tx(out, fr.len());
    }
    Ok(())
}
