//! The OpenFlow channel's I/O driver: passive listeners (`ptcp:[PORT][:IP]`,
//! `punix:PATH`), active controller connections (`tcp:IP[:PORT]`, reconnect with
//! back-off 1 s doubling to 8 s, as OVS's rconn), nonblocking sockets serviced from
//! the switch loop (bounded reads per round: a controller flooding FLOW_MODs is
//! read at the loop's pace while the datapath keeps forwarding), fail mode
//! (standalone: after 3 probe intervals without any controller, NORMAL forwarding;
//! secure: never). The protocol is [`crate::openflow::Conn`]'s and
//! [`crate::openflow_switch::OfSwitch`]'s.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use flow::dp::Datapath;
use flow::FlowTable;

use crate::openflow::{Conn, Event, Role};
use crate::openflow_switch::{OfSwitch, PortInfo};
use crate::{Error, Result};

/// The OpenFlow port (IANA).
pub const DEFAULT_PORT: u16 = 6653;
/// Bytes read from one connection per loop round (back-pressure on floods).
const READ_BUDGET: usize = 256 * 1024;
/// First and largest reconnect back-off (OVS rconn: 1 s .. max_backoff 8 s).
const BACKOFF_MIN_MS: u64 = 1000;
const BACKOFF_MAX_MS: u64 = 8000;
/// Cookie of the fail-open rule (standalone fail mode).
pub const FAIL_OPEN_COOKIE: u64 = 0xf0f0_f0f0_f0f0_f0f0;

/// OpenFlow settings of a switch.
#[derive(Debug, Clone)]
pub struct OfOpts {
    /// Passive targets: `ptcp:[PORT][:IP]` (default 6653 on 127.0.0.1), `punix:PATH`.
    pub listen: Vec<String>,
    /// Active targets: `tcp:IP[:PORT]`.
    pub controllers: Vec<String>,
    /// `secure` (default) or `standalone`.
    pub fail_mode: String,
    /// Inactivity probe (ms; 0: off). OVS's default is 5 s.
    pub probe_ms: u64,
    pub datapath_id: u64,
    /// Connections accepted on the listeners at once; past it a new one is
    /// closed at accept and counted (controllers we connect to are not counted).
    pub max_connections: usize,
    /// Unsent output (bytes) past which a connection is closed (a peer that
    /// sends requests and does not read the replies).
    pub max_backlog: usize,
    /// Unsent output (bytes) at which asynchronous messages (PACKET_IN,
    /// FLOW_REMOVED, PORT_STATUS) to a connection are dropped and counted.
    pub async_backlog: usize,
}

/// Default [`OfOpts::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// The channel's counters (connections up now, and totals since start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OfStats {
    pub connections: u64,
    pub connections_refused: u64,
    pub async_dropped: u64,
    pub packet_ins_dropped: u64,
    pub backlog_closes: u64,
}

impl Default for OfOpts {
    fn default() -> OfOpts {
        OfOpts {
            listen: Vec::new(),
            controllers: Vec::new(),
            fail_mode: "secure".into(),
            probe_ms: 5000,
            datapath_id: 1,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_backlog: crate::openflow::MAX_TX_BACKLOG,
            async_backlog: crate::openflow::ASYNC_BACKLOG,
        }
    }
}

impl OfOpts {
    pub fn enabled(&self) -> bool {
        !self.listen.is_empty() || !self.controllers.is_empty()
    }
}

/// A parsed connection target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    PTcp(SocketAddr),
    PUnix(PathBuf),
    Tcp(SocketAddr),
}

/// Parses `ptcp:[PORT][:IP]`, `punix:PATH` (passive) or `tcp:IP[:PORT]` (active).
pub fn parse_target(s: &str) -> Result<Target> {
    let bad = |why: &str| Error::Config(format!("OpenFlow target `{s}`: {why}"));
    if let Some(rest) = s
        .strip_prefix("ptcp:")
        .or_else(|| (s == "ptcp").then_some(""))
    {
        let (port, ip) = match rest.split_once(':') {
            Some((p, ip)) => (p, ip),
            None => (rest, "127.0.0.1"),
        };
        let port: u16 = if port.is_empty() {
            DEFAULT_PORT
        } else {
            port.parse().map_err(|_| bad("bad port"))?
        };
        let ip = ip.trim_start_matches('[').trim_end_matches(']');
        let ip: std::net::IpAddr = ip.parse().map_err(|_| bad("bad IP"))?;
        return Ok(Target::PTcp(SocketAddr::new(ip, port)));
    }
    if let Some(p) = s.strip_prefix("punix:") {
        if p.is_empty() {
            return Err(bad("no path"));
        }
        return Ok(Target::PUnix(PathBuf::from(p)));
    }
    if let Some(rest) = s.strip_prefix("tcp:") {
        let (ip, port) = match rest.rsplit_once(':') {
            Some((ip, p)) if !ip.is_empty() && !ip.ends_with(':') => {
                (ip, p.parse().map_err(|_| bad("bad port"))?)
            }
            _ => (rest, DEFAULT_PORT),
        };
        let ip: std::net::IpAddr = ip.parse().map_err(|_| bad("bad IP"))?;
        return Ok(Target::Tcp(SocketAddr::new(ip, port)));
    }
    Err(bad(
        "expected ptcp:[PORT][:IP], punix:PATH or tcp:IP[:PORT]",
    ))
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
}

struct Peer {
    stream: Stream,
    conn: Conn,
    name: String,
    /// Index of the active controller this is (None: accepted on a listener).
    active: Option<usize>,
}

struct Active {
    addr: SocketAddr,
    connected: bool,
    next_try: u64,
    backoff: u64,
}

/// The switch's OpenFlow channel: listeners, connections, the switch-wide state.
pub struct OfAgent {
    pub sw: OfSwitch,
    listeners: Vec<Listener>,
    peers: Vec<Peer>,
    actives: Vec<Active>,
    probe_ms: u64,
    max_connections: usize,
    max_backlog: usize,
    async_backlog: usize,
    /// Counters of connections gone, and the refusals.
    retired: OfStats,
    standalone: bool,
    /// Since when no controller has been connected (ms).
    alone_since: Option<u64>,
    fail_open: bool,
    /// Lines for the switch's log (connects, disconnects, fail-open).
    pub log: Vec<String>,
}

impl std::fmt::Debug for OfAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfAgent")
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl OfAgent {
    /// Opens the listeners; active connections are tried from the first
    /// [`OfAgent::run`]. `ports`: OpenFlow port number -> name.
    pub fn start(o: &OfOpts, ports: &BTreeMap<u32, String>, now: u64) -> Result<OfAgent> {
        let standalone = match o.fail_mode.as_str() {
            "secure" => false,
            "standalone" => true,
            m => {
                return Err(Error::Config(format!(
                    "fail mode `{m}`: secure or standalone"
                )))
            }
        };
        let mut listeners = Vec::new();
        for s in &o.listen {
            match parse_target(s)? {
                Target::PTcp(a) => {
                    let l = TcpListener::bind(a).map_err(|source| Error::Open {
                        what: format!("OpenFlow listener {s}"),
                        source,
                    })?;
                    l.set_nonblocking(true)?;
                    listeners.push(Listener::Tcp(l));
                }
                Target::PUnix(p) => {
                    let _ = std::fs::remove_file(&p);
                    let l = UnixListener::bind(&p).map_err(|source| Error::Open {
                        what: format!("OpenFlow listener {s}"),
                        source,
                    })?;
                    l.set_nonblocking(true)?;
                    listeners.push(Listener::Unix(l, p));
                }
                Target::Tcp(_) => {
                    return Err(Error::Config(format!(
                        "--listen {s}: an active target (use --controller)"
                    )))
                }
            }
        }
        let mut actives = Vec::new();
        for s in &o.controllers {
            match parse_target(s)? {
                Target::Tcp(addr) => actives.push(Active {
                    addr,
                    connected: false,
                    next_try: now,
                    backoff: BACKOFF_MIN_MS,
                }),
                _ => {
                    return Err(Error::Config(format!(
                        "--controller {s}: expected tcp:IP[:PORT]"
                    )))
                }
            }
        }
        let mut sw = OfSwitch::new(o.datapath_id);
        for (&p, name) in ports {
            sw.ports.insert(
                p,
                PortInfo {
                    name: name.clone(),
                    hw_addr: [0x02, 0, 0, 0, (p >> 8) as u8, p as u8],
                    since: now,
                    ..PortInfo::default()
                },
            );
        }
        Ok(OfAgent {
            sw,
            listeners,
            peers: Vec::new(),
            actives,
            probe_ms: o.probe_ms,
            max_connections: o.max_connections,
            max_backlog: o.max_backlog,
            async_backlog: o.async_backlog,
            retired: OfStats::default(),
            standalone,
            alone_since: Some(now),
            fail_open: false,
            log: Vec::new(),
        })
    }

    /// Descriptors to poll for readability.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v: Vec<RawFd> = self
            .listeners
            .iter()
            .map(|l| match l {
                Listener::Tcp(t) => t.as_raw_fd(),
                Listener::Unix(u, _) => u.as_raw_fd(),
            })
            .collect();
        v.extend(self.peers.iter().map(|p| p.stream.fd()));
        v
    }

    /// Number of connections up (negotiated).
    pub fn n_connected(&self) -> usize {
        self.peers.iter().filter(|p| p.conn.is_up()).count()
    }

    /// The channel's counters: connections up, refusals, drops (live connections
    /// and gone ones).
    pub fn stats(&self) -> OfStats {
        let mut s = self.retired;
        for p in &self.peers {
            let c = p.conn.stats();
            s.connections += u64::from(p.conn.is_up());
            s.async_dropped += c.async_dropped;
            s.packet_ins_dropped += c.packet_ins_dropped;
            s.backlog_closes += c.backlog_closes;
        }
        s
    }

    /// A new connection with the agent's bounds.
    fn conn(&self, now: u64) -> Conn {
        let mut c = Conn::new(now, self.probe_ms);
        c.max_backlog = self.max_backlog;
        c.async_limit = self.async_backlog;
        c
    }

    /// Counts a frame dropped on its way out of port `p` (PORT_STATS tx_dropped).
    pub fn count_tx_dropped(&mut self, p: u32) {
        if let Some(i) = self.sw.ports.get_mut(&p) {
            i.tx_dropped += 1;
        }
    }

    /// Counts a frame received on / sent to a port (PORT_STATS).
    pub fn count_rx(&mut self, p: u32, len: usize) {
        if let Some(i) = self.sw.ports.get_mut(&p) {
            i.rx_packets += 1;
            i.rx_bytes += len as u64;
        }
    }
    pub fn count_tx(&mut self, p: u32, len: usize) {
        if let Some(i) = self.sw.ports.get_mut(&p) {
            i.tx_packets += 1;
            i.tx_bytes += len as u64;
        }
    }

    /// Sends an asynchronous message to every connection that is up and not a slave.
    fn broadcast(&mut self, msg: &[u8], except: Option<usize>) {
        for (i, p) in self.peers.iter_mut().enumerate() {
            if Some(i) != except && p.conn.is_up() && p.conn.role != Role::Slave {
                p.conn.send_async(msg);
            }
        }
    }

    /// PACKET_INs for packets a controller action sent up (received on `in_port`).
    pub fn packet_ins(&mut self, in_port: u32, tcs: &[flow::exec::ToController]) {
        for p in self.peers.iter_mut() {
            if !p.conn.is_up() || p.conn.role == Role::Slave {
                continue;
            }
            for tc in tcs {
                let b = OfSwitch::packet_in(tc, in_port, p.conn.miss_send_len);
                p.conn.send_async(&b);
            }
        }
    }

    /// FLOW_REMOVED for a rule the revalidator expired.
    pub fn expired(&mut self, e: &flow::ofproto::Expired, now: u64) {
        if let Some(b) = self.sw.expired(e, now) {
            self.broadcast(&b, None);
        }
    }

    /// PORT_STATUS (modify) to every controller, after a port went down or up.
    pub fn port_changed(&mut self, table: &FlowTable, p: u32) {
        let b = self.sw.port_status(table, p, openflow::consts::pr::MODIFY);
        self.broadcast(&b, None);
    }

    /// One round at `now` (ms): accept, (re)connect, read and handle, timers, write.
    /// Returns the frames PACKET_OUTs send, as (port, frame), and the in_port +
    /// packet-ins PACKET_OUTs raised are sent here already.
    pub fn run(
        &mut self,
        table: &mut FlowTable,
        dp: &mut Datapath,
        now: u64,
    ) -> Vec<(u32, Vec<u8>)> {
        self.accept(now);
        self.connect(now);
        let mut outputs = Vec::new();
        let mut buf = vec![0u8; 65536];
        let mut async_out: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut pins: Vec<flow::exec::ToController> = Vec::new();
        let mut new_master = None;
        for (i, p) in self.peers.iter_mut().enumerate() {
            let mut got = 0;
            let mut io_events = Vec::new();
            while got < READ_BUDGET && !p.conn.is_closed() {
                match p.stream.read(&mut buf) {
                    Ok(0) => {
                        io_events.push(Event::Close("connection closed by peer".into()));
                        break;
                    }
                    Ok(n) => {
                        got += n;
                        p.conn.feed(&buf[..n], now);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        io_events.push(Event::Close(format!("read: {e}")));
                        break;
                    }
                }
            }
            if let Some(e) = p.conn.poll(now) {
                io_events.push(e);
            }
            // One message at a time, each handled before the next is framed: the
            // replies keep the requests' order, and the backlog bound is checked
            // after each one's replies.
            let mut closed = None;
            while let Some(ev) = p.conn.next_event() {
                match ev {
                    Event::Message(m) => {
                        let fx = self.sw.handle(&mut p.conn, &m, table, dp, now);
                        outputs.extend(fx.outputs);
                        pins.extend(fx.packet_ins);
                        async_out.extend(fx.async_msgs.into_iter().map(|b| (i, b)));
                        if fx.became_master {
                            new_master = Some(i);
                        }
                    }
                    Event::Close(why) => {
                        closed = Some(why);
                        break;
                    }
                }
            }
            if closed.is_none() {
                closed = io_events.into_iter().find_map(|e| match e {
                    Event::Close(why) => Some(why),
                    Event::Message(_) => None,
                });
            }
            if let Some(why) = closed {
                self.log
                    .push(format!("openflow: {} disconnected: {why}", p.name));
                // Flush what is queued (an error, a HELLO_FAILED) best-effort.
                let out = p.conn.take_output();
                let _ = p.stream.write(&out);
                p.conn.set_closed();
            }
        }
        if let Some(m) = new_master {
            for (i, p) in self.peers.iter_mut().enumerate() {
                if i != m && p.conn.role == Role::Master {
                    p.conn.role = Role::Slave;
                }
            }
        }
        // FLOW_REMOVED of a delete goes to every controller (the requester too).
        for (_, b) in async_out {
            self.broadcast(&b, None);
        }
        if !pins.is_empty() {
            // A PACKET_OUT's packet-ins: in_port is the controller.
            self.packet_ins(0xfffd, &pins);
        }
        // Write, drop closed peers.
        for p in self.peers.iter_mut() {
            let out = p.conn.take_output();
            if out.is_empty() {
                continue;
            }
            let mut off = 0;
            while off < out.len() {
                match p.stream.write(&out[off..]) {
                    Ok(0) => break,
                    Ok(n) => off += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            p.conn.unsent(out[off..].to_vec());
        }
        let actives = &mut self.actives;
        let log = &mut self.log;
        let retired = &mut self.retired;
        self.peers.retain(|p| {
            if p.conn.is_closed() {
                let c = p.conn.stats();
                retired.async_dropped += c.async_dropped;
                retired.packet_ins_dropped += c.packet_ins_dropped;
                retired.backlog_closes += c.backlog_closes;
                if let Some(a) = p.active {
                    actives[a].connected = false;
                    actives[a].next_try = now + actives[a].backoff;
                    log.push(format!(
                        "openflow: reconnecting to {} in {} ms",
                        actives[a].addr, actives[a].backoff
                    ));
                }
                false
            } else {
                true
            }
        });
        self.fail_mode(table, dp, now);
        outputs
    }

    fn accept(&mut self, now: u64) {
        for l in &self.listeners {
            loop {
                let (stream, name) = match l {
                    Listener::Tcp(t) => match t.accept() {
                        Ok((s, a)) => {
                            let _ = s.set_nodelay(true);
                            (Stream::Tcp(s), format!("tcp:{a}"))
                        }
                        Err(_) => break,
                    },
                    Listener::Unix(u, p) => match u.accept() {
                        Ok((s, _)) => (Stream::Unix(s), format!("unix:{}", p.display())),
                        Err(_) => break,
                    },
                };
                let nb = match &stream {
                    Stream::Tcp(s) => s.set_nonblocking(true),
                    Stream::Unix(s) => s.set_nonblocking(true),
                };
                if nb.is_err() {
                    continue;
                }
                let accepted = self.peers.iter().filter(|p| p.active.is_none()).count();
                if accepted >= self.max_connections {
                    self.retired.connections_refused += 1;
                    let n = self.retired.connections_refused;
                    if n.is_power_of_two() {
                        self.log.push(format!(
                            "openflow: {name} refused: {accepted} connections (max_connections); {n} refused so far"
                        ));
                    }
                    drop(stream);
                    continue;
                }
                tracing::debug!("openflow: accepted {name}");
                let conn = self.conn(now);
                self.peers.push(Peer {
                    stream,
                    conn,
                    name,
                    active: None,
                });
            }
        }
    }

    fn connect(&mut self, now: u64) {
        for (i, a) in self.actives.iter_mut().enumerate() {
            if a.connected || now < a.next_try {
                continue;
            }
            match TcpStream::connect_timeout(&a.addr, Duration::from_millis(100)) {
                Ok(s) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = s.set_nodelay(true);
                    a.connected = true;
                    a.backoff = BACKOFF_MIN_MS;
                    self.log
                        .push(format!("openflow: connected to controller {}", a.addr));
                    let mut conn = Conn::new(now, self.probe_ms);
                    conn.max_backlog = self.max_backlog;
                    conn.async_limit = self.async_backlog;
                    self.peers.push(Peer {
                        stream: Stream::Tcp(s),
                        conn,
                        name: format!("controller tcp:{}", a.addr),
                        active: Some(i),
                    });
                }
                Err(e) => {
                    a.next_try = now + a.backoff;
                    tracing::debug!(
                        "openflow: connect {}: {e}; next try in {} ms",
                        a.addr,
                        a.backoff
                    );
                    a.backoff = (a.backoff * 2).min(BACKOFF_MAX_MS);
                }
            }
        }
    }

    /// Standalone fail mode: after three probe intervals (at least 3 s) without a
    /// controller connection, a `priority=0,actions=NORMAL` rule (cookie
    /// [`FAIL_OPEN_COOKIE`]) makes the switch a learning switch; it goes when a
    /// controller is back. (OVS uses a hidden rule above every OpenFlow priority;
    /// here it is a visible lowest-priority rule, so the controller's rules win.)
    fn fail_mode(&mut self, table: &mut FlowTable, dp: &mut Datapath, now: u64) {
        if !self.standalone || self.actives.is_empty() {
            return;
        }
        let up = self
            .peers
            .iter()
            .any(|p| p.active.is_some() && p.conn.is_up());
        if up {
            self.alone_since = None;
            if self.fail_open {
                self.fail_open = false;
                dp.push_stats(table);
                let ids: Vec<u32> = table
                    .rules
                    .iter()
                    .filter(|(_, r)| r.cookie == FAIL_OPEN_COOKIE)
                    .map(|(&id, _)| id)
                    .collect();
                for id in ids {
                    table.remove_rule(id);
                }
                dp.table_changed();
                self.log
                    .push("openflow: controller connected: fail-open ended".into());
            }
            return;
        }
        let since = *self.alone_since.get_or_insert(now);
        let after = (3 * self.probe_ms).max(3000);
        if !self.fail_open && now >= since + after {
            self.fail_open = true;
            let mut r = flow::parse_flows("priority=0,actions=NORMAL")
                .expect("fail-open rule parses")
                .remove(0);
            r.cookie = FAIL_OPEN_COOKIE;
            dp.push_stats(table);
            table.add_at(r, now);
            dp.table_changed();
            self.log.push(format!(
                "openflow: no controller for {} ms: fail-open (standalone): NORMAL forwarding",
                now - since
            ));
        }
    }

    /// When the agent next needs to run for its timers (ms), for the loop's poll.
    pub fn next_deadline(&self) -> Option<u64> {
        let a = self
            .actives
            .iter()
            .filter(|a| !a.connected)
            .map(|a| a.next_try)
            .min();
        let c = self
            .peers
            .iter()
            .filter_map(|p| p.conn.next_deadline())
            .min();
        match (a, c) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}

impl Drop for OfAgent {
    fn drop(&mut self) {
        for l in &self.listeners {
            if let Listener::Unix(_, p) = l {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("ptcp:6653:127.0.0.1").unwrap(),
            Target::PTcp("127.0.0.1:6653".parse().unwrap())
        );
        assert_eq!(
            parse_target("ptcp:").unwrap(),
            Target::PTcp("127.0.0.1:6653".parse().unwrap())
        );
        assert_eq!(
            parse_target("ptcp:7000").unwrap(),
            Target::PTcp("127.0.0.1:7000".parse().unwrap())
        );
        assert_eq!(
            parse_target("tcp:127.0.0.2").unwrap(),
            Target::Tcp("127.0.0.2:6653".parse().unwrap())
        );
        assert_eq!(
            parse_target("tcp:127.0.0.2:6633").unwrap(),
            Target::Tcp("127.0.0.2:6633".parse().unwrap())
        );
        assert_eq!(
            parse_target("punix:/tmp/x.sock").unwrap(),
            Target::PUnix("/tmp/x.sock".into())
        );
        assert!(parse_target("ssl:1.2.3.4").is_err());
        assert!(parse_target("ptcp:99999").is_err());
        assert!(parse_target("tcp:nonsense").is_err());
    }
}
