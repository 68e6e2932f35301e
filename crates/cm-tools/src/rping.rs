//! rping (rdma-core `librdmacm/examples/rping.c`): the client advertises a
//! buffer, the server RDMA READs it, the client advertises a second buffer, the
//! server RDMA WRITEs the data back; `-V` checks it, `-v` prints it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cm::driver::{CmDevice, CmId};
use cm::{CmConfig, ConnParam, PortSpace};
use verbs::{AccessFlags, Cq, Mr, Wc, WcOpcode, WrOpcode};

use crate::{
    error_chain, open_device, post_recv, post_send, qp_cap, route_source, wait_wc, Console, Error,
    Result, Waits, T,
};

/// rping options (rdma-core's letters in brackets).
#[derive(Debug, Clone)]
pub struct RpingOpts {
    /// Server (-s).
    pub server: bool,
    /// Client (-c).
    pub client: bool,
    /// The server's bind address, the client's destination (-a).
    pub addr: Option<Ipv4Addr>,
    /// Client source address, the soft device's address (-I).
    pub src: Option<Ipv4Addr>,
    /// Port (-p).
    pub port: u16,
    /// Ping count (-C; none = forever).
    pub count: Option<u64>,
    /// Ping buffer size (-S).
    pub size: usize,
    /// Print ping data (-v).
    pub verbose: bool,
    /// Validate ping data (-V).
    pub validate: bool,
    /// Debug output (-d).
    pub debug: bool,
    /// Persistent server: serve clients one after another (-P).
    pub persistent: bool,
    /// Run as a node service: nothing printed, the device may vanish at any time.
    pub service: bool,
    /// The verbs provider of the device (`--provider`).
    pub provider: crate::Provider,
}

/// `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32).
const INFO_LEN: usize = 16;

fn info(mr: &Mr, size: usize) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&mr.addr().to_be_bytes());
    b[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
    b[12..16].copy_from_slice(&(size as u32).to_be_bytes());
    b
}

fn parse_info(mr: &Mr) -> (u64, u32, u32) {
    let mut b = [0u8; INFO_LEN];
    mr.read(0, &mut b);
    (
        u64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[12..16].try_into().unwrap_or_default()),
    )
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Runs rping as `a` says (exactly one of server and client).
pub fn run(a: &RpingOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    if a.server == a.client {
        bail!("rping: give exactly one of -s (server) or -c (client)");
    }
    if a.size < 32 {
        bail!("rping: size must be at least 32 bytes");
    }
    if a.server {
        server(a, cm, con)
    } else {
        client(a, cm, con)
    }
}

/// The rping server: serves one client (every client in turn with `persistent`).
pub fn server(a: &RpingOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    let ip = a
        .addr
        .or(a.src)
        .ok_or_else(|| Error::Usage("rping -s: give the address to bind with -a".into()))?;
    let dev = open_device(ip, a.provider, cm)?;
    let listener = dev.create_id(None, PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), a.port))?;
    listener.listen(3)?;
    if a.debug {
        warn!(con, "rping: listening on {ip}:{}", a.port);
    }
    loop {
        let (id, ev) = listener.get_request(None)?;
        if a.debug {
            warn!(con, "cma_event type {} cma_id {} (child)", ev.event, ev.id);
        }
        let r = serve_one(&dev, id, a, con);
        if let Err(e) = &r {
            warn!(con, "rping server: {}", error_chain(e));
        }
        if !a.persistent {
            return r.map(|_| ());
        }
    }
}

/// One rping connection, server side (the request `id` from the listener);
/// returns the number of pings served.
pub fn serve_one(dev: &CmDevice, mut id: CmId, a: &RpingOpts, con: &mut Console) -> Result<u64> {
    let ctx = dev.context();
    let cq = ctx.create_cq(32, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let pd = dev.pd();
    let recv_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let rdma_mr = pd.reg_mr(
        a.size,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    post_recv(&id, &recv_mr, INFO_LEN as u32)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        ..ConnParam::default()
    };
    id.accept(&param, T)?;
    if a.debug {
        warn!(con, "accepted connection from {:?}", id.peer_addr());
    }
    // Every exit of this loop is the client's DISCONNECTED.
    let mut pings = 0u64;
    let mut w = Waits::default();
    // Client's start buffer advertisement.
    while let Some(wc) = wait_recv(&cq, &id, &mut w)? {
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        let (raddr, rkey, rlen) = parse_info(&recv_mr);
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        if a.debug {
            warn!(
                con,
                "Received rkey {rkey:x} addr {raddr:x} len {rlen} from peer"
            );
        }
        let len = (rlen as usize).min(a.size) as u32;
        post_send(
            &id,
            2,
            WrOpcode::RdmaRead,
            &rdma_mr,
            len,
            Some((raddr, rkey)),
        )?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            break;
        }
        if a.verbose {
            let mut b = vec![0u8; a.size];
            rdma_mr.read(0, &mut b);
            say!(con, "server ping data: {}", cstr(&b));
        }
        // Tell the client to continue.
        post_send(&id, 3, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            break;
        }
        // Client's RDMA buffer advertisement.
        let Some(wc) = wait_recv(&cq, &id, &mut w)? else {
            break;
        };
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        let (raddr, rkey, _) = parse_info(&recv_mr);
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        let mut b = vec![0u8; a.size];
        rdma_mr.read(0, &mut b);
        let wlen = (b.iter().position(|&c| c == 0).unwrap_or(a.size - 1) + 1) as u32;
        post_send(
            &id,
            4,
            WrOpcode::RdmaWrite,
            &rdma_mr,
            wlen,
            Some((raddr, rkey)),
        )?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            break;
        }
        post_send(&id, 5, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            break;
        }
        pings += 1;
        if a.count.is_some_and(|c| pings >= c) {
            // -C on the server (Linux's rping server ignores it and waits for the
            // client's DREQ, forever if that one DREQ is lost: a Linux client
            // destroys its id right after disconnecting, which ends the kernel's
            // resends): after the last ping, disconnect from this side too
            say!(con, "rping: {pings} pings (-C), disconnecting");
            id.disconnect()?;
            crate::wait_disconnected(&id, w.disconnected);
            return Ok(pings);
        }
    }
    if a.service {
        // the device may be gone (DEVICE_REMOVAL at shutdown): nothing to tell
        let _ = id.disconnect();
    } else {
        say!(con, "server DISCONNECT EVENT...");
        id.disconnect()?;
    }
    Ok(pings)
}

/// Waits for the next receive completion. rping's messages alternate, but their
/// completions need not: the peer's next message may complete here before the
/// ACK of our last SEND does (seen on rxe). A completion of the other kind is
/// therefore held in `held` for the next wait; more than a few is a protocol error.
pub(crate) fn wait_recv(cq: &Cq, id: &CmId, w: &mut Waits) -> Result<Option<Wc>> {
    wait_kind(cq, id, w, true, Duration::from_secs(3600))
}

/// Waits for the next send-side completion (SEND, READ, WRITE); see [`wait_recv`].
pub(crate) fn wait_send(cq: &Cq, id: &CmId, w: &mut Waits) -> Result<Option<Wc>> {
    wait_kind(cq, id, w, false, T)
}

fn wait_kind(
    cq: &Cq,
    id: &CmId,
    w: &mut Waits,
    recv: bool,
    timeout: Duration,
) -> Result<Option<Wc>> {
    let is_recv = |w: &Wc| w.opcode == WcOpcode::Recv;
    let held = &mut w.held;
    if let Some(i) = held.iter().position(|w| is_recv(w) == recv) {
        return Ok(held.remove(i));
    }
    loop {
        match wait_wc(cq, id, timeout, &mut w.disconnected)? {
            Some(wc) if is_recv(&wc) == recv => return Ok(Some(wc)),
            Some(wc) => {
                if held.len() >= 2 {
                    bail!(
                        "unexpected completion {:?} (len {}) while waiting for a {}",
                        wc.opcode,
                        wc.byte_len,
                        if recv { "receive" } else { "send" }
                    );
                }
                held.push_back(wc);
            }
            None => return Ok(None),
        }
    }
}

/// The rping client: `count` pings (forever without), then disconnect.
pub fn client(a: &RpingOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    let dst = a
        .addr
        .ok_or_else(|| Error::Usage("rping -c: give the server address with -a".into()))?;
    let src = match a.src {
        Some(s) => s,
        None => route_source(dst)?,
    };
    let dev = open_device(src, a.provider, cm)?;
    let mut id = dev.create_id(None, PortSpace::Tcp);
    id.resolve_addr(
        Some(SocketAddr::new(IpAddr::V4(src), 0)),
        SocketAddr::new(IpAddr::V4(dst), a.port),
        Duration::from_secs(2),
    )?;
    id.resolve_route(Duration::from_secs(2))?;
    let ctx = dev.context();
    let cq = ctx.create_cq(32, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let pd = dev.pd();
    let recv_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send_mr = pd.reg_mr(INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let start_mr = pd.reg_mr(a.size, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    let rdma_mr = pd.reg_mr(a.size, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    post_recv(&id, &recv_mr, INFO_LEN as u32)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 6,
        rnr_retry_count: 7,
        ..ConnParam::default()
    };
    match id.connect(&param, T) {
        Ok(_) => {}
        Err(cm::driver::DriverError::Event { event, status }) => {
            say!(con, "cma event {}, error {}", event, status);
            bail!("connect error");
        }
        Err(e) => return Err(e.into()),
    }
    let mut start: u8 = 65;
    let mut ping: u64 = 0;
    let mut w = Waits::default();
    let mut result = Ok(());
    while a.count.is_none_or(|c| ping < c) {
        let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
        buf.truncate(a.size);
        let mut c = start;
        while buf.len() < a.size {
            buf.push(c);
            c += 1;
            if c > 122 {
                c = 65;
            }
        }
        start += 1;
        if start > 122 {
            start = 65;
        }
        buf[a.size - 1] = 0;
        start_mr.write(0, &buf);
        rdma_mr.write(0, &vec![0u8; a.size]);
        send_mr.write(0, &info(&start_mr, a.size));
        post_send(&id, 1, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            result = Err(err!("server disconnected"));
            break;
        }
        // Server's "go ahead" after its RDMA READ.
        let Some(wc) = wait_recv(&cq, &id, &mut w)? else {
            result = Err(err!("server disconnected"));
            break;
        };
        if wc.byte_len as usize != INFO_LEN {
            bail!("Received bogus data, size {}", wc.byte_len);
        }
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        send_mr.write(0, &info(&rdma_mr, a.size));
        post_send(&id, 2, WrOpcode::Send, &send_mr, INFO_LEN as u32, None)?;
        if wait_send(&cq, &id, &mut w)?.is_none() {
            result = Err(err!("server disconnected"));
            break;
        }
        // Server's "RDMA WRITE done".
        let Some(_) = wait_recv(&cq, &id, &mut w)? else {
            result = Err(err!("server disconnected"));
            break;
        };
        post_recv(&id, &recv_mr, INFO_LEN as u32)?;
        let mut got = vec![0u8; a.size];
        rdma_mr.read(0, &mut got);
        if a.validate && got != buf {
            warn!(con, "data mismatch!");
            result = Err(err!("data mismatch"));
            break;
        }
        if a.verbose {
            say!(con, "ping data: {}", cstr(&got));
        }
        ping += 1;
    }
    id.disconnect()?;
    crate::wait_disconnected(&id, w.disconnected);
    if a.debug {
        warn!(con, "rping: {ping} pings, CM stats {:?}", dev.stats());
    }
    result
}
