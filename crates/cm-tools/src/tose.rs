//! ucmatose (rdma-core `librdmacm/examples/cmatose.c`) and udaddy (`udaddy.c`):
//! `connections` connections (or UD SIDR exchanges), `message_count` messages each
//! way, same progress lines as the C programs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cm::driver::{CmDevice, CmId};
use cm::{CmConfig, ConnParam, EventType, PortSpace};
use verbs::{
    AccessFlags, Cq, Mr, QpCap, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrDetail,
    WrOpcode,
};

use crate::{open_device, route_source, Console, Error, Result, T};

/// ucmatose / udaddy options (librdmacm's letters in brackets).
#[derive(Debug, Clone)]
pub struct ToseOpts {
    /// Server address: run as client (-s).
    pub server: Option<Ipv4Addr>,
    /// Bind (device) address (-b).
    pub bind: Option<Ipv4Addr>,
    /// Connections (-c).
    pub connections: usize,
    /// Messages per connection (-C).
    pub message_count: usize,
    /// Message size (-S).
    pub message_size: usize,
    /// Port (-p; none = ucmatose 7471, udaddy 7174).
    pub port: Option<u16>,
    /// Type of service (-t).
    pub tos: Option<u8>,
    /// Migrate the ids to a new event channel before disconnecting (-m, ucmatose).
    pub migrate: bool,
    /// The verbs provider of the device (`--provider`).
    pub provider: crate::Provider,
}

struct Node {
    id: CmId,
    send_cq: Cq,
    recv_cq: Cq,
    mr: Mr,
    connected: bool,
    /// UD: where replies go.
    remote: Option<(verbs::Ah, u32, u32)>,
}

fn node_for(dev: &CmDevice, mut id: CmId, a: &ToseOpts, ud: bool) -> Result<Node> {
    let n = a.message_count.max(1) as u32;
    let send_cq = dev.context().create_cq(2 * n as usize + 2, None)?;
    let recv_cq = if ud {
        send_cq.clone()
    } else {
        dev.context().create_cq(n as usize + 1, None)?
    };
    let cap = QpCap {
        max_send_wr: n,
        max_recv_wr: n,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    id.create_qp(&send_cq, &recv_cq, cap)?;
    let grh = if ud { 40 } else { 0 };
    let mr = dev
        .pd()
        .reg_mr(a.message_size.max(1) + grh, AccessFlags::LOCAL_WRITE)?;
    let node = Node {
        id,
        send_cq,
        recv_cq,
        mr,
        connected: false,
        remote: None,
    };
    if a.message_count > 0 {
        let qp = node.id.qp().ok_or_else(|| err!("no QP"))?;
        for _ in 0..a.message_count {
            qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &[node.mr.sge(0, (a.message_size + grh) as u32)],
            }])
            .map_err(|e| err!("failed to post receives: {:?}", e.error))?;
        }
    }
    Ok(node)
}

fn post_sends(node: &Node, a: &ToseOpts) -> Result<()> {
    if !node.connected || a.message_count == 0 {
        return Ok(());
    }
    let qp = node.id.qp().ok_or_else(|| err!("no QP"))?;
    let sge = [node.mr.sge(0, a.message_size as u32)];
    for _ in 0..a.message_count {
        let mut wr = SendWr::new(0, WrOpcode::Send, &sge);
        wr.send_flags = SendFlags::SIGNALED;
        if let Some((ah, qpn, qkey)) = node.remote {
            wr.opcode = WrOpcode::SendWithImm;
            wr.imm_data = qp.qp_num();
            wr.wr = WrDetail::Ud {
                ah,
                remote_qpn: qpn,
                remote_qkey: qkey,
            };
        }
        qp.post_send(&[wr])
            .map_err(|e| err!("failed to post sends: {:?}", e.error))?;
    }
    Ok(())
}

/// Polls `count` completions from `cq` (statuses must be success).
fn poll_n(cq: &Cq, count: usize, what: &str) -> Result<Vec<Wc>> {
    let mut out = Vec::with_capacity(count);
    let mut wc = [Wc::default(); 8];
    let t0 = Instant::now();
    while out.len() < count {
        let n = cq.poll(&mut wc)?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                bail!("{what}: completion error {:?}", w.status);
            }
            out.push(*w);
        }
        if n == 0 {
            if t0.elapsed() > T {
                bail!(
                    "{what}: timed out after {} of {count} completions",
                    out.len()
                );
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(out)
}

fn tose_device(a: &ToseOpts, cm: &CmConfig) -> Result<(CmDevice, Ipv4Addr)> {
    let ip = match (a.bind, a.server) {
        (Some(b), _) => b,
        (None, Some(dst)) => route_source(dst)?,
        (None, None) => {
            return Err(Error::Usage(
                "give the device (bind) address with -b".into(),
            ))
        }
    };
    Ok((open_device(ip, a.provider, cm)?, ip))
}

/// ucmatose: connected (RC) connections.
pub fn ucmatose(a: &ToseOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    tose(a, cm, con, "cmatose", 7471, PortSpace::Tcp)
}

/// udaddy: UD QPs found through SIDR.
pub fn udaddy(a: &ToseOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    tose(a, cm, con, "udaddy", 7174, PortSpace::Udp)
}

/// The body of librdmacm's cmatose and udaddy (same messages): client when a
/// server is given, else server; `ps` picks the connected or the UD flavour.
fn tose(
    a: &ToseOpts,
    cm: &CmConfig,
    con: &mut Console,
    tool: &str,
    default_port: u16,
    ps: PortSpace,
) -> Result<()> {
    let port = a.port.unwrap_or(default_port);
    let (dev, ip) = tose_device(a, cm)?;
    let r = if let Some(dst) = a.server {
        say!(con, "{tool}: starting client");
        tose_client(&dev, ip, dst, port, a, ps, con)
    } else {
        say!(con, "{tool}: starting server");
        tose_server(&dev, ip, port, a, ps, con)
    };
    say!(con, "test complete");
    say!(con, "return status {}", if r.is_ok() { 0 } else { -1 });
    r
}

fn tose_server(
    dev: &CmDevice,
    ip: Ipv4Addr,
    port: u16,
    a: &ToseOpts,
    ps: PortSpace,
    con: &mut Console,
) -> Result<()> {
    let ud = ps == PortSpace::Udp;
    let name = if ud { "udaddy" } else { "cmatose" };
    let mut ch = dev.create_event_channel();
    let listener = dev.create_id(Some(&ch), ps);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), port))?;
    listener.listen(0)?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut connects_left = a.connections;
    while connects_left > 0 {
        let ev = ch.get_event(None)?;
        match ev.event {
            EventType::ConnectRequest => {
                let id = CmId::from_request(dev, &ev);
                if nodes.len() == a.connections {
                    say!(con, "{name}: failing connection request");
                    id.reject(&[])?;
                    continue;
                }
                let mut node = node_for(dev, id, a, ud)?;
                // the id's own QP number goes into the REP/SIDR_REP, as in librdmacm
                node.id.accept(&ConnParam::default(), T)?;
                if ud {
                    node.connected = true;
                    connects_left -= 1;
                }
                nodes.push(node);
            }
            EventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id.handle() == ev.id) {
                    n.connected = true;
                }
                connects_left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                say!(con, "{name}: event: {}, error: {}", ev.event, ev.status);
                connects_left -= 1;
            }
            _ => {}
        }
    }
    if a.message_count > 0 {
        if ud {
            say!(con, "receiving data transfers");
            for n in nodes.iter_mut().filter(|n| n.connected) {
                let wcs = poll_n(&n.recv_cq, a.message_count, "receive")?;
                let mut grh = [0u8; 40];
                n.mr.read(0, &mut grh);
                let src = Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
                let ah = verbs::Ah {
                    ip: src,
                    ..verbs::Ah::default()
                };
                n.remote = Some((ah, wcs[0].imm_data, wire::mad::RDMA_UDP_QKEY));
            }
            say!(con, "sending replies");
            for n in &nodes {
                post_sends(n, a)?;
            }
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            say!(con, "data transfers complete");
        } else {
            say!(con, "initiating data transfers");
            for n in &nodes {
                post_sends(n, a)?;
            }
            say!(con, "completing sends");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            say!(con, "receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.recv_cq, a.message_count, "receive")?;
            }
            say!(con, "data transfers complete");
        }
    }
    if ud {
        return Ok(());
    }
    if a.migrate {
        say!(con, "migrating to new event channel");
        let new = dev.create_event_channel();
        listener.migrate(Some(&new))?;
        for n in &nodes {
            n.id.migrate(Some(&new))?;
        }
        ch = new;
    }
    say!(con, "cmatose: disconnecting");
    let mut disconnects_left = 0;
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        n.id.disconnect()?;
        disconnects_left += 1;
    }
    while disconnects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        if ev.event == EventType::Disconnected {
            disconnects_left -= 1;
        }
    }
    say!(con, "disconnected");
    Ok(())
}

fn tose_client(
    dev: &CmDevice,
    ip: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    a: &ToseOpts,
    ps: PortSpace,
    con: &mut Console,
) -> Result<()> {
    let ud = ps == PortSpace::Udp;
    let name = if ud { "udaddy" } else { "cmatose" };
    let ch = dev.create_event_channel();
    let mut pending: Vec<Option<CmId>> = (0..a.connections)
        .map(|_| Some(dev.create_id(Some(&ch), ps)))
        .collect();
    let mut nodes: Vec<Node> = Vec::new();
    say!(con, "{name}: connecting");
    for id in pending.iter().flatten() {
        id.resolve_addr(
            Some(SocketAddr::new(IpAddr::V4(ip), 0)),
            SocketAddr::new(IpAddr::V4(dst), port),
            Duration::from_secs(2),
        )?;
    }
    let mut connects_left = a.connections;
    let mut result = Ok(());
    while connects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        match ev.event {
            EventType::AddrResolved => {
                if let Some(Some(id)) = pending
                    .iter()
                    .find(|p| p.as_ref().is_some_and(|i| i.handle() == ev.id))
                {
                    if let Some(t) = a.tos {
                        id.set_option(cm::CmOption::Tos(t))?;
                    }
                    id.resolve_route(Duration::from_secs(2))?;
                }
            }
            EventType::RouteResolved => {
                let Some(slot) = pending
                    .iter_mut()
                    .find(|p| p.as_ref().is_some_and(|i| i.handle() == ev.id))
                else {
                    continue;
                };
                let id = slot.take().ok_or_else(|| err!("id"))?;
                let node = node_for(dev, id, a, ud)?;
                let param = ConnParam {
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 5,
                    ..ConnParam::default()
                };
                node.id.connect(&param, T)?;
                nodes.push(node);
            }
            EventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id.handle() == ev.id) {
                    n.connected = true;
                    if let Some(u) = ev.ud {
                        let ah = verbs::Ah {
                            ip: match u.remote {
                                IpAddr::V4(v) => v,
                                _ => dst,
                            },
                            ..verbs::Ah::default()
                        };
                        n.remote = Some((ah, u.qp_num, u.qkey));
                    }
                }
                connects_left -= 1;
            }
            EventType::AddrError
            | EventType::RouteError
            | EventType::ConnectError
            | EventType::Unreachable
            | EventType::Rejected => {
                say!(con, "{name}: event: {}, error: {}", ev.event, ev.status);
                connects_left -= 1;
                result = Err(err!("{} (status {})", ev.event, ev.status));
            }
            _ => {}
        }
    }
    result?;
    if a.message_count > 0 {
        if ud {
            say!(con, "initiating data transfers");
            for n in &nodes {
                post_sends(n, a)?;
            }
            say!(con, "receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                // our sends are signaled here (udaddy's are not): count only receives
                let mut got = 0;
                let t0 = Instant::now();
                while got < a.message_count {
                    let mut wc = [Wc::default(); 8];
                    let k = n.recv_cq.poll(&mut wc)?;
                    for w in &wc[..k] {
                        if w.status != WcStatus::Success {
                            bail!("completion error {:?}", w.status);
                        }
                        if w.opcode == WcOpcode::Recv {
                            got += 1;
                        }
                    }
                    if k == 0 {
                        if t0.elapsed() > T {
                            bail!("receive: timed out after {got} of {}", a.message_count);
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            }
            say!(con, "data transfers complete");
        } else {
            say!(con, "receiving data transfers");
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.recv_cq, a.message_count, "receive")?;
            }
            say!(con, "sending replies");
            for n in &nodes {
                post_sends(n, a)?;
            }
            for n in nodes.iter().filter(|n| n.connected) {
                poll_n(&n.send_cq, a.message_count, "send")?;
            }
            say!(con, "data transfers complete");
        }
    }
    if ud {
        return Ok(());
    }
    let mut disconnects_left = nodes.iter().filter(|n| n.connected).count();
    while disconnects_left > 0 {
        let ev = ch.get_event(Some(T))?;
        if ev.event == EventType::Disconnected {
            if let Some(n) = nodes.iter().find(|n| n.id.handle() == ev.id) {
                n.id.disconnect()?;
            }
            disconnects_left -= 1;
        }
    }
    Ok(())
}
