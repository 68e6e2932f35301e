//! The node's CM part: a CM agent on QP1 of the node's soft RoCE device (the
//! rdma part's device when it runs: a second device cannot bind the same UDP
//! 4791), so the node answers CM MADs as a Linux node does (REQ for a port nobody
//! listens on → REJ 8, SIDR → status 1), and an rping-compatible echo server.

use std::net::{IpAddr, SocketAddr};
use std::thread::JoinHandle;

use cm::driver::{CmDevice, CmId};
use cm::{EventType, PortSpace};
use cm_tools::rping::{serve_one, RpingOpts};
use cm_tools::Console;

use crate::{Error, Result};

/// A running CM agent (and its rping server, if configured).
pub struct CmAgent {
    dev: CmDevice,
    server: Option<JoinHandle<()>>,
    _ctx: verbs::Context,
    /// What `up` prints for it.
    pub detail: String,
}

impl CmAgent {
    /// Starts the agent on `ctx` (`shared`: the rdma part's device) with `cm`
    /// settings; `rping_port` 0 = no rping server.
    pub fn start(
        ctx: verbs::Context,
        shared: bool,
        cm: cm::CmConfig,
        rping_port: u16,
    ) -> Result<CmAgent> {
        let dev = CmDevice::open(&ctx, cm)?;
        let ip = dev.ip();
        let mut detail = format!(
            "CM agent on QP1 of {} ({ip}{}): REQ/SIDR answered, no listener -> REJ 8 / SIDR status 1",
            ctx.name(),
            if shared { ", the rdma part's device" } else { "" }
        );
        let server = if rping_port != 0 {
            let listener = dev.create_id(None, PortSpace::Tcp);
            listener
                .bind_addr(SocketAddr::new(IpAddr::V4(ip), rping_port))
                .map_err(|e| Error::Context {
                    what: format!("rping server: binding {ip}:{rping_port}"),
                    source: Box::new(e),
                })?;
            listener.listen(16)?;
            detail += &format!("; rping echo server on {ip}:{rping_port}");
            let d = dev.clone();
            Some(
                std::thread::Builder::new()
                    .name("cm-rping".into())
                    .spawn(move || rping_service(&d, listener))?,
            )
        } else {
            detail += "; rping server off ([cm] rping_port = 0)";
            None
        };
        Ok(CmAgent {
            dev,
            server,
            _ctx: ctx,
            detail,
        })
    }

    /// The agent's CM device (for the node's other CM users).
    pub fn device(&self) -> &CmDevice {
        &self.dev
    }

    /// DEVICE_REMOVAL for every id (the acceptor and each connection end), then
    /// waits for the rping server.
    pub fn stop(self) {
        self.dev.close();
        if let Some(t) = self.server {
            let _ = t.join();
        }
    }
}

/// The node's rping server: every client on its own thread (as `rping -s -P`),
/// until the device is closed.
fn rping_service(dev: &CmDevice, listener: CmId) {
    let a = RpingOpts {
        provider: cm_tools::Provider::Auto,
        server: true,
        client: false,
        addr: Some(dev.ip()),
        src: None,
        port: 0,
        count: None,
        size: 64,
        verbose: false,
        validate: false,
        debug: false,
        persistent: true,
        service: true,
    };
    let mut conns = Vec::new();
    loop {
        match listener.get_request(None) {
            Ok((id, ev)) => {
                let peer = ev.param.private_data.len();
                tracing::debug!("cm up: rping CONNECT_REQUEST ({peer} bytes private data)");
                let (d, a) = (dev.clone(), a.clone());
                let t = std::thread::Builder::new()
                    .name("cm-rping-conn".into())
                    .spawn(move || {
                        let peer = id.peer_addr();
                        match serve_one(&d, id, &a, &mut Console::silent()) {
                            Ok(n) => tracing::info!("cm up: rping from {peer:?}: {n} pings"),
                            Err(e) => tracing::warn!(
                                "cm up: rping from {peer:?}: {}",
                                crate::error_chain(&e)
                            ),
                        }
                    });
                match t {
                    Ok(t) => conns.push(t),
                    Err(e) => tracing::warn!("cm up: rping: no thread: {e}"),
                }
                conns.retain(|t| !t.is_finished());
            }
            Err(cm::driver::DriverError::Event {
                event: EventType::AddrChange,
                ..
            }) => {
                // the node's address went away; keep listening for when it is back
                tracing::warn!("cm up: rping server: {} changed (ADDR_CHANGE)", dev.ip());
            }
            Err(e) => {
                // DEVICE_REMOVAL (stop) or ENODEV
                tracing::debug!("cm up: rping server ends: {e}");
                break;
            }
        }
    }
    for t in conns {
        let _ = t.join();
    }
}
