//! rdma_server / rdma_client (rdma-core `librdmacm/examples/rdma_{server,client}.c`):
//! one 16-byte SEND each way over a connected QP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cm::{CmConfig, ConnParam, PortSpace};
use verbs::{AccessFlags, WcOpcode, WrOpcode};

use crate::rping::{wait_recv, wait_send};
use crate::{
    open_device, post_recv, post_send, qp_cap, route_source, wait_wc, Console, Error, Result, T,
};

/// rdma_server / rdma_client options.
#[derive(Debug, Clone)]
pub struct SimpleOpts {
    /// Server address (client: destination; server: bind address if no `bind`) (-s).
    pub server: Option<Ipv4Addr>,
    /// Local (device) address (-b).
    pub bind: Option<Ipv4Addr>,
    /// Port (-p).
    pub port: u16,
    /// The verbs provider of the device (`--provider`).
    pub provider: crate::Provider,
}

const SIMPLE_MSG: usize = 16;

/// The rdma_server side.
pub fn server(a: &SimpleOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    let ip = a
        .bind
        .or(a.server)
        .ok_or_else(|| Error::Usage("cm-server: give the device address with -b".into()))?;
    let dev = open_device(ip, a.provider, cm)?;
    let listener = dev.create_id(None, PortSpace::Tcp);
    listener.bind_addr(SocketAddr::new(IpAddr::V4(ip), a.port))?;
    listener.listen(0)?;
    say!(con, "rdma_server: start");
    let (mut id, _ev) = listener.get_request(None)?;
    let cq = dev.context().create_cq(8, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let mr = dev.pd().reg_mr(SIMPLE_MSG, AccessFlags::LOCAL_WRITE)?;
    post_recv(&id, &mr, SIMPLE_MSG as u32)?;
    id.accept(&ConnParam::default(), T)?;
    let mut w = crate::Waits::default();
    if wait_recv(&cq, &id, &mut w)?.is_none() {
        bail!("client disconnected before sending");
    }
    post_send(&id, 2, WrOpcode::Send, &mr, SIMPLE_MSG as u32, None)?;
    if wait_send(&cq, &id, &mut w)?.is_none() {
        bail!("client disconnected before our send completed");
    }
    id.disconnect()?;
    crate::wait_disconnected(&id, w.disconnected);
    say!(con, "rdma_server: end 0");
    Ok(())
}

/// The rdma_client side.
pub fn client(a: &SimpleOpts, cm: &CmConfig, con: &mut Console) -> Result<()> {
    let dst = a
        .server
        .ok_or_else(|| Error::Usage("cm-client: give the server address with -s".into()))?;
    let src = match a.bind {
        Some(b) => b,
        None => route_source(dst)?,
    };
    let dev = open_device(src, a.provider, cm)?;
    say!(con, "rdma_client: start");
    let mut id = dev.create_id(None, PortSpace::Tcp);
    id.resolve_addr(
        Some(SocketAddr::new(IpAddr::V4(src), 0)),
        SocketAddr::new(IpAddr::V4(dst), a.port),
        Duration::from_secs(2),
    )?;
    id.resolve_route(Duration::from_secs(2))?;
    let cq = dev.context().create_cq(8, None)?;
    id.create_qp(&cq, &cq, qp_cap())?;
    let mr = dev.pd().reg_mr(SIMPLE_MSG, AccessFlags::LOCAL_WRITE)?;
    post_recv(&id, &mr, SIMPLE_MSG as u32)?;
    id.connect(&ConnParam::default(), T)?;
    post_send(&id, 2, WrOpcode::Send, &mr, SIMPLE_MSG as u32, None)?;
    let mut got_send = false;
    let mut got_recv = false;
    let mut seen = false;
    while !(got_send && got_recv) {
        match wait_wc(&cq, &id, T, &mut seen)? {
            Some(wc) if wc.opcode == WcOpcode::Recv => got_recv = true,
            Some(_) => got_send = true,
            None => bail!("server disconnected early"),
        }
    }
    id.disconnect()?;
    crate::wait_disconnected(&id, seen);
    say!(con, "rdma_client: end 0");
    Ok(())
}
