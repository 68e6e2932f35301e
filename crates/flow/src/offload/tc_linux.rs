//! The real Linux tc-flower backend (`tc-linux` in the provider priority list): the
//! tc translation of [`super::tc`] (flower keys + masks, chain = recirc_id, prio per
//! (mask, ethertype), cookie = ufid, mirred / vlan / pedit + csum / gact actions)
//! sent to the kernel over a NETLINK_ROUTE socket as RTM_NEWTFILTER / RTM_DELTFILTER /
//! RTM_GETTFILTER ([`super::netlink`]) on the clsact ingress hook of each port's
//! interface, always `skip_hw` (the kernel's software classifier runs them).
//!
//! * A flow's in_port and its mirred targets must be afpacket ports (a datapath port
//!   -> ifindex map given at construction); anything else is refused.
//! * Errors the kernel answers (errno + extack message) become the flow's failure
//!   reason; a failed put leaves nothing installed (a MOD deletes the old filter
//!   first; a filter the kernel refused was never created).
//! * Counters: packets/bytes from the kernel (the first action's TCA_ACT_STATS; the
//!   kernel's counters cannot be reset, so `stats(reset)` returns the difference from
//!   the last reset). `used`: the switch's AF_PACKET sockets see every frame before
//!   tc ingress runs (packet taps come first in the kernel's receive path), so
//!   [`OffloadProvider::rx_key`] looks the frame up in a shadow table of the installed
//!   filters: a hit means the kernel forwards that frame itself, software drops its
//!   copy and records the time of use. In the instant a filter is installed or
//!   removed a frame can be forwarded twice or not at all (the kernel and the shadow
//!   table are not updated atomically).

use std::collections::HashMap;
use std::sync::Mutex;

use super::netlink::{self, FilterId, FilterMsg, Replies, Reply};
use super::nic::{EmuNic, NicConfig};
use super::tc::{decode_match, TcPolicy, TcProvider};
use super::{Caps, FlowSpec, HwRx, HwStats, OffloadError, OffloadProvider, Offloaded};
use crate::key::FlowKey;

/// Errors of the netlink socket itself.
#[derive(Debug, thiserror::Error)]
pub enum TcLinuxError {
    #[error("netlink socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("kernel: {0}")]
    Kernel(#[from] netlink::NlError),
    #[error(transparent)]
    Malformed(#[from] netlink::Malformed),
    #[error("no reply from the kernel for seq {0}")]
    NoReply(u32),
    #[error("interface {0:?}: {1}")]
    Interface(String, String),
}

/// A NETLINK_ROUTE socket (blocking, 2 s receive timeout, extended acks on).
#[derive(Debug)]
pub struct NlSocket {
    fd: libc::c_int,
    seq: u32,
    rx: Vec<u8>,
}

impl Drop for NlSocket {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe {
            libc::close(self.fd);
        }
    }
}

impl NlSocket {
    pub fn open() -> Result<NlSocket, TcLinuxError> {
        // SAFETY: plain libc calls with valid arguments; the fd is owned by the result.
        unsafe {
            let fd = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            let s = NlSocket {
                fd,
                seq: 1,
                rx: vec![0u8; 65536],
            };
            let one: libc::c_int = 1;
            for opt in [libc::NETLINK_EXT_ACK, libc::NETLINK_CAP_ACK] {
                libc::setsockopt(
                    fd,
                    libc::SOL_NETLINK,
                    opt,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as u32,
                );
            }
            let tv = libc::timeval {
                tv_sec: 2,
                tv_usec: 0,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            let mut sa: libc::sockaddr_nl = std::mem::zeroed();
            sa.nl_family = libc::AF_NETLINK as u16;
            if libc::bind(
                fd,
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            ) < 0
            {
                return Err(std::io::Error::last_os_error().into());
            }
            Ok(s)
        }
    }

    /// The next sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    /// Sends one request (built with sequence number `seq`) and reads until its ack
    /// or error; every other message for `seq` goes to `on_msg(type, body)`, which
    /// returns true when that message ends the exchange (an echo without ack).
    pub fn transact(
        &mut self,
        req: &[u8],
        seq: u32,
        on_msg: &mut dyn FnMut(u16, &[u8]) -> bool,
    ) -> Result<(), TcLinuxError> {
        // SAFETY: req is valid for its length.
        let n = unsafe { libc::send(self.fd, req.as_ptr() as *const libc::c_void, req.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        loop {
            // SAFETY: rx is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd,
                    self.rx.as_mut_ptr() as *mut libc::c_void,
                    self.rx.len(),
                    0,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    return Err(TcLinuxError::NoReply(seq));
                }
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            for r in Replies::new(&self.rx[..n as usize]) {
                match r? {
                    Reply::Ack { seq: s } if s == seq => return Ok(()),
                    Reply::Err { seq: s, err } if s == seq => return Err(err.into()),
                    Reply::Done { seq: s } if s == seq => return Ok(()),
                    Reply::Msg { ty, seq: s, body } if s == seq && on_msg(ty, body) => {
                        return Ok(());
                    }
                    _ => {} // a stale reply of an earlier request
                }
            }
        }
    }
}

/// The interface index of `name` (in the caller's network namespace).
pub fn ifindex(name: &str) -> Result<u32, TcLinuxError> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| TcLinuxError::Interface(name.into(), "bad name".into()))?;
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(TcLinuxError::Interface(
            name.into(),
            std::io::Error::last_os_error().to_string(),
        ));
    }
    Ok(i)
}

#[derive(Debug)]
struct Installed {
    id: FilterId,
    /// Kernel counters at the last reset.
    base: (u64, u64),
}

#[derive(Debug)]
struct State {
    sock: NlSocket,
    msg: FilterMsg,
    flows: HashMap<u64, Installed>,
}

/// The tc-linux provider.
#[derive(Debug)]
pub struct TcLinuxProvider {
    /// Datapath port -> ifindex.
    ports: HashMap<u32, u32>,
    /// The translation (prio/handle allocation) of the emulated tc provider.
    xlate: TcProvider,
    state: Mutex<State>,
    /// Filters installed, looked up by the receive path (see the module doc).
    shadow: Mutex<EmuNic>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TcLinuxProvider {
    /// A provider for the ports `(datapath port, interface name)`: opens the
    /// netlink socket, resolves the interfaces and makes sure each has a clsact
    /// qdisc. Fails (loudly: the caller reports it) without CAP_NET_ADMIN.
    pub fn new(ports: &[(u32, String)]) -> Result<TcLinuxProvider, TcLinuxError> {
        let mut sock = NlSocket::open()?;
        let mut msg = FilterMsg::default();
        let mut map = HashMap::new();
        for (p, name) in ports {
            let ix = ifindex(name)?;
            let seq = sock.next_seq();
            match sock.transact(msg.new_clsact(seq, ix), seq, &mut |_, _| false) {
                Ok(()) => tracing::info!("tc-linux: clsact qdisc added on {name}"),
                Err(TcLinuxError::Kernel(e)) if e.errno == libc::EEXIST => {}
                Err(TcLinuxError::Kernel(e)) if e.errno == libc::EPERM => {
                    return Err(TcLinuxError::Interface(
                        name.clone(),
                        format!("adding a clsact qdisc needs root / CAP_NET_ADMIN: {e}"),
                    ))
                }
                Err(e) => {
                    return Err(TcLinuxError::Interface(
                        name.clone(),
                        format!("adding a clsact qdisc: {e}"),
                    ))
                }
            }
            map.insert(*p, ix);
        }
        if let Some((p, name)) = ports.first() {
            if let Err(e) = probe(&mut sock, &mut msg, map[p]) {
                tracing::error!(
                    "tc-linux: the kernel refuses a test flower filter on {name}: {e} \
                     (is cls_flower missing?): every flow will stay in software"
                );
            }
        }
        Ok(TcLinuxProvider {
            ports: map,
            xlate: TcProvider::new(NicConfig::default(), TcPolicy::SkipHw),
            state: Mutex::new(State {
                sock,
                msg,
                flows: HashMap::new(),
            }),
            shadow: Mutex::new(EmuNic::new(NicConfig::default())),
        })
    }

    /// The kernel id of the filter installed for `ufid`.
    pub fn filter_id(&self, ufid: u64) -> Option<FilterId> {
        lock(&self.state).flows.get(&ufid).map(|i| i.id)
    }

    fn delete(st: &mut State, id: &FilterId) -> Result<(), TcLinuxError> {
        let seq = st.sock.next_seq();
        let State { sock, msg, .. } = st;
        sock.transact(msg.del_filter(seq, id), seq, &mut |_, _| false)
    }

    fn kernel_stats(st: &mut State, id: &FilterId) -> Result<(u64, u64), TcLinuxError> {
        let seq = st.sock.next_seq();
        let State { sock, msg, .. } = st;
        let mut got = None;
        sock.transact(msg.get_filter(seq, id), seq, &mut |ty, body| {
            if ty == netlink::RTM_NEWTFILTER {
                got = netlink::parse_filter_stats(body);
                return true;
            }
            false
        })?;
        let s = got.ok_or(netlink::Malformed("filter reply without action counters"))?;
        Ok((s.packets, s.bytes))
    }
}

/// Adds and deletes a flower filter that matches nothing (dst_mac 00:00:00:00:00:00,
/// chain 0, the last prio): does the kernel have cls_flower and let us use it.
fn probe(sock: &mut NlSocket, msg: &mut FilterMsg, ifx: u32) -> Result<(), TcLinuxError> {
    use super::tc::{Filter, FlowerKey, TcAction};
    let f = Filter {
        chain: 0,
        prio: u16::MAX,
        handle: u32::MAX,
        cookie: 0,
        policy: TcPolicy::SkipHw,
        key: FlowerKey {
            dst_mac: (0, 0xffff_ffff_ffff),
            ..Default::default()
        },
        actions: vec![TcAction::Drop],
    };
    let seq = sock.next_seq();
    let req = msg
        .new_filter(seq, ifx, &f, &|_| None)
        .map_err(|e| TcLinuxError::Interface(String::new(), e.to_string()))?;
    sock.transact(req, seq, &mut |_, _| false)?;
    let seq = sock.next_seq();
    sock.transact(
        msg.del_filter(seq, &FilterId::of(&f, ifx)),
        seq,
        &mut |_, _| false,
    )
}

fn dev_err(e: TcLinuxError) -> OffloadError {
    OffloadError::Device(e.to_string())
}

impl OffloadProvider for TcLinuxProvider {
    fn name(&self) -> &'static str {
        "tc-linux"
    }
    fn caps(&self) -> Caps {
        Caps {
            full: true,
            partial: false,
            fields: super::all_fields(),
            capacity: usize::MAX,
        }
    }
    fn put(&self, ufid: u64, spec: &FlowSpec, _mark: u32) -> Result<Offloaded, OffloadError> {
        let mut st = lock(&self.state);
        // A MOD replaces: the old filter goes first (and stays gone on failure).
        if let Some(old) = st.flows.remove(&ufid) {
            lock(&self.shadow).remove(ufid);
            if let Err(e) = Self::delete(&mut st, &old.id) {
                tracing::warn!("tc-linux: deleting the old filter of {ufid:#x}: {e}");
            }
        }
        let fl = self.xlate.translate(ufid, spec)?;
        let ifx = *self.ports.get(&fl.key.indev).ok_or_else(|| {
            OffloadError::Unsupported(format!(
                "in_port {} has no Linux interface (tc-linux needs afpacket ports)",
                fl.key.indev
            ))
        })?;
        let id = FilterId::of(&fl, ifx);
        let seq = st.sock.next_seq();
        let ports = &self.ports;
        let State { sock, msg, .. } = &mut *st;
        let req = msg
            .new_filter(seq, ifx, &fl, &|p| ports.get(&p).copied())
            .map_err(|e| OffloadError::Unsupported(e.to_string()))?;
        sock.transact(req, seq, &mut |_, _| false)
            .map_err(dev_err)?;
        st.flows.insert(ufid, Installed { id, base: (0, 0) });
        let (k, m) = decode_match(fl.chain, &fl.key);
        lock(&self.shadow).insert(ufid, k, m, fl.prio as u32, Vec::new());
        Ok(Offloaded::Full { in_hw: false })
    }
    fn del(&self, ufid: u64) -> Result<HwStats, OffloadError> {
        let mut st = lock(&self.state);
        let inst = st.flows.remove(&ufid).ok_or(OffloadError::NotFound(ufid))?;
        let used = lock(&self.shadow).remove(ufid).map(|s| s.used).unwrap_or(0);
        let last = Self::kernel_stats(&mut st, &inst.id);
        Self::delete(&mut st, &inst.id).map_err(dev_err)?;
        let (p, b) = last.unwrap_or(inst.base);
        Ok(HwStats {
            packets: p.saturating_sub(inst.base.0),
            bytes: b.saturating_sub(inst.base.1),
            used,
        })
    }
    fn stats(&self, ufid: u64, reset: bool) -> Result<HwStats, OffloadError> {
        let mut st = lock(&self.state);
        let id = st.flows.get(&ufid).ok_or(OffloadError::NotFound(ufid))?.id;
        let (p, b) = Self::kernel_stats(&mut st, &id).map_err(dev_err)?;
        let used = lock(&self.shadow)
            .query(ufid, reset)
            .map(|s| s.used)
            .unwrap_or(0);
        let Some(inst) = st.flows.get_mut(&ufid) else {
            return Err(OffloadError::NotFound(ufid));
        };
        let out = HwStats {
            packets: p.saturating_sub(inst.base.0),
            bytes: b.saturating_sub(inst.base.1),
            used,
        };
        if reset {
            inst.base = (p, b);
        }
        Ok(out)
    }
    fn flush(&self) -> usize {
        let mut st = lock(&self.state);
        let all: Vec<(u64, FilterId)> = st.flows.drain().map(|(u, i)| (u, i.id)).collect();
        lock(&self.shadow).clear();
        let mut n = 0;
        for (ufid, id) in all {
            match Self::delete(&mut st, &id) {
                Ok(()) => n += 1,
                Err(e) => tracing::warn!("tc-linux: flush: filter of {ufid:#x}: {e}"),
            }
        }
        n
    }
    fn len(&self) -> usize {
        lock(&self.state).flows.len()
    }
    fn rx_key(&self, k: &FlowKey, frame: &mut Vec<u8>, now: u64) -> HwRx {
        // A hit: the kernel's filter forwards this frame; our copy (from the packet
        // tap, which runs before tc ingress) is dropped.
        lock(&self.shadow).rx(k, frame, now)
    }
}

impl Drop for TcLinuxProvider {
    fn drop(&mut self) {
        let n = self.flush();
        if n > 0 {
            tracing::info!("tc-linux: {n} filters deleted");
        }
    }
}
