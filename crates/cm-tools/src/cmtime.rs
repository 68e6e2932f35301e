//! cmtime (rdma-core `librdmacm/examples/cmtime.c`, the per-step table of
//! rdma-core ≤ v45): each CM step for all connections at once, timed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId};
use cm::{CmConfig, ConnParam, EventType, PortSpace};
use verbs::QpCap;

use crate::{open_device, route_source, Console, Error, Result, T};

/// cmtime options (librdmacm's letters in brackets).
#[derive(Debug, Clone)]
pub struct CmtimeOpts {
    /// Server address: run as client (-s).
    pub server: Option<Ipv4Addr>,
    /// Bind (device) address (-b).
    pub bind: Option<Ipv4Addr>,
    /// Connections (-c).
    pub connections: usize,
    /// Port (-p).
    pub port: u16,
    /// The verbs provider of the device (`--provider`).
    pub provider: crate::Provider,
}

const STEPS: [&str; 8] = [
    "create id",
    "bind addr",
    "resolve addr",
    "resolve route",
    "create qp",
    "connect",
    "disconnect",
    "destroy",
];

/// Per-connection (start, end) of each step, plus each step's wall-clock span.
pub struct StepTimes {
    per: Vec<[(Option<Instant>, Option<Instant>); 8]>,
    span: [(Option<Instant>, Option<Instant>); 8],
}

impl StepTimes {
    fn new(n: usize) -> Self {
        StepTimes {
            per: vec![[(None, None); 8]; n],
            span: [(None, None); 8],
        }
    }
    fn start(&mut self, c: usize, s: usize) {
        let now = Instant::now();
        self.per[c][s].0 = Some(now);
        self.span[s].0.get_or_insert(now);
    }
    fn end(&mut self, c: usize, s: usize) {
        let now = Instant::now();
        self.per[c][s].1 = Some(now);
        self.span[s].1 = Some(now);
    }
    /// (step, total ms, max ms, min us, us/conn) rows, as cmtime prints them.
    pub fn rows(&self) -> Vec<(&'static str, f64, f64, f64, f64)> {
        let n = self.per.len().max(1) as f64;
        STEPS
            .iter()
            .enumerate()
            .map(|(s, name)| {
                let d: Vec<f64> = self
                    .per
                    .iter()
                    .filter_map(|p| Some((p[s].1? - p[s].0?).as_secs_f64() * 1e6))
                    .collect();
                let total_us = match self.span[s] {
                    (Some(a), Some(b)) => (b - a).as_secs_f64() * 1e6,
                    _ => 0.0,
                };
                let max = d.iter().copied().fold(0.0, f64::max);
                let min = d.iter().copied().fold(f64::INFINITY, f64::min);
                (
                    *name,
                    total_us / 1e3,
                    max / 1e3,
                    if min.is_finite() { min } else { 0.0 },
                    total_us / n,
                )
            })
            .collect()
    }
    /// The table cmtime prints (a header line, then one line per step).
    pub fn table(&self) -> String {
        let mut s = "step              total ms     max ms     min us  us / conn\n".to_string();
        for (name, total, max, min, per) in self.rows() {
            s += &format!("{name:<13}: {total:>11.2} {max:>10.2} {min:>10.2} {per:>10.2}\n");
        }
        s
    }
}

/// cmtime: the client times `connections` connections and returns the step
/// times; the server (no `server` address) accepts them and returns `None`.
pub fn run(a: &CmtimeOpts, cm: &CmConfig, con: &mut Console) -> Result<Option<StepTimes>> {
    let ip = match (a.bind, a.server) {
        (Some(b), _) => b,
        (None, Some(dst)) => route_source(dst)?,
        (None, None) => {
            return Err(Error::Usage(
                "cmtime: give the device (bind) address with -b".into(),
            ))
        }
    };
    let dev = open_device(ip, a.provider, cm)?;
    match a.server {
        Some(dst) => {
            let t = client(&dev, ip, dst, a.port, a.connections, Some(con))?;
            Ok(Some(t))
        }
        None => server(&dev, ip, a.port, a.connections, con).map(|()| None),
    }
}

/// Accepts `n` connections (QP to RTS before the REP) and answers each DISCONNECTED.
pub fn server(dev: &CmDevice, ip: Ipv4Addr, port: u16, n: usize, con: &mut Console) -> Result<()> {
    let ch = dev.create_event_channel();
    let listener = dev.create_id(Some(&ch), PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), port))?;
    listener.listen(n.max(1))?;
    let cq = dev.context().create_cq(4 * n + 4, None)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut ids: Vec<CmId> = Vec::new();
    let mut disconnected = 0;
    while disconnected < n {
        let ev = ch.get_event(None)?;
        match ev.event {
            EventType::ConnectRequest => {
                if ids.is_empty() {
                    say!(con, "\tAccepting");
                }
                let mut id = CmId::from_request(dev, &ev);
                id.create_qp(&cq, &cq, cap)?;
                // the id's own QP number goes into the REP/SIDR_REP, as in librdmacm
                id.accept(&ConnParam::default(), T)?;
                ids.push(id);
            }
            EventType::Disconnected => {
                if disconnected == 0 {
                    say!(con, "\tDisconnecting");
                }
                if let Some(id) = ids.iter().find(|i| i.handle() == ev.id) {
                    id.disconnect()?;
                }
                disconnected += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each step for all `n` connections at once (as cmtime): start all, then wait for
/// all; `con` gets the progress lines (none: quiet).
pub fn client(
    dev: &CmDevice,
    ip: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    n: usize,
    mut con: Option<&mut Console>,
) -> Result<StepTimes> {
    let mut say = |m: &str| -> Result<()> {
        if let Some(con) = con.as_deref_mut() {
            say!(con, "{m}");
        }
        Ok(())
    };
    let ch = dev.create_event_channel();
    let mut t = StepTimes::new(n);
    let cq = dev.context().create_cq(4 * n + 4, None)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    say("creating id")?;
    let mut ids = Vec::with_capacity(n);
    for c in 0..n {
        t.start(c, 0);
        ids.push(dev.create_id(Some(&ch), PortSpace::Tcp));
        t.end(c, 0);
    }
    say("binding source address")?;
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 1);
        id.bind_addr(SocketAddr::new(IpAddr::V4(ip), 0))?;
        t.end(c, 1);
    }
    let index = |ids: &[CmId], h| ids.iter().position(|i: &CmId| i.handle() == h);
    let wait_all = |t: &mut StepTimes, ids: &[CmId], step: usize, want: EventType| -> Result<()> {
        let mut left = ids.len();
        while left > 0 {
            let ev = ch.get_event(Some(T))?;
            let Some(c) = index(ids, ev.id) else { continue };
            if ev.event == want {
                t.end(c, step);
                left -= 1;
            } else if ev.event != EventType::TimewaitExit {
                bail!(
                    "cmtime: {} (status {}) while waiting for {want}",
                    ev.event,
                    ev.status
                );
            }
        }
        Ok(())
    };
    say("resolving address")?;
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 2);
        id.resolve_addr(
            None,
            SocketAddr::new(IpAddr::V4(dst), port),
            Duration::from_secs(2),
        )?;
    }
    wait_all(&mut t, &ids, 2, EventType::AddrResolved)?;
    say("resolving route")?;
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 3);
        id.resolve_route(Duration::from_secs(2))?;
    }
    wait_all(&mut t, &ids, 3, EventType::RouteResolved)?;
    say("creating qp")?;
    for (c, id) in ids.iter_mut().enumerate() {
        t.start(c, 4);
        id.create_qp(&cq, &cq, cap)?;
        t.end(c, 4);
    }
    say("connecting")?;
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 5);
        id.connect(&ConnParam::default(), T)?;
    }
    wait_all(&mut t, &ids, 5, EventType::Established)?;
    say("disconnecting")?;
    for (c, id) in ids.iter().enumerate() {
        t.start(c, 6);
        id.disconnect()?;
    }
    wait_all(&mut t, &ids, 6, EventType::Disconnected)?;
    say("destroying id")?;
    for (c, id) in ids.into_iter().enumerate() {
        t.start(c, 7);
        drop(id);
        t.end(c, 7);
    }
    Ok(t)
}
