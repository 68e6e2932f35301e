//! Host address and link changes for the driver, from an rtnetlink socket
//! subscribed to `RTMGRP_IPV4_IFADDR | RTMGRP_LINK` (no privileges needed).
//!
//! The driver's poller drains it between CQ polls ([`AddrWatch::poll`]) and turns
//! what it reads into the core's `addr_change` / `device_removal` entry points.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const NLMSG_HDR: usize = 16;
const IFADDRMSG: usize = 8;
const IFINFOMSG: usize = 16;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTMGRP_LINK: u32 = 1;
const RTMGRP_IPV4_IFADDR: u32 = 0x10;

/// One thing rtnetlink told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NlEvent {
    /// An IPv4 address (its interface index) was removed.
    AddrRemoved(Ipv4Addr, u32),
    /// An IPv4 address was added.
    AddrAdded(Ipv4Addr, u32),
    /// An interface was deleted.
    LinkRemoved(u32),
    /// The socket overran (`ENOBUFS`): messages were lost, re-check everything.
    Overrun,
}

fn nla_align(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parse one datagram of rtnetlink messages (host byte order); malformed or
/// foreign messages are skipped.
pub(crate) fn parse(buf: &[u8], out: &mut Vec<NlEvent>) {
    let mut off = 0;
    while let (Some(len), Some(ty)) = (u32_at(buf, off), u16_at(buf, off + 4)) {
        let len = len as usize;
        if len < NLMSG_HDR || off + len > buf.len() {
            return;
        }
        let body = &buf[off + NLMSG_HDR..off + len];
        match ty {
            RTM_NEWADDR | RTM_DELADDR if body.len() >= IFADDRMSG => {
                let family = body[0];
                let index = u32_at(body, 4).unwrap_or(0);
                if i32::from(family) == libc::AF_INET {
                    let (mut local, mut address) = (None, None);
                    let mut a = IFADDRMSG;
                    while let (Some(alen), Some(aty)) = (u16_at(body, a), u16_at(body, a + 2)) {
                        let alen = alen as usize;
                        if alen < 4 || a + alen > body.len() {
                            break;
                        }
                        let data = &body[a + 4..a + alen];
                        if let Ok(v) = <[u8; 4]>::try_from(data) {
                            match aty {
                                IFA_LOCAL => local = Some(Ipv4Addr::from(v)),
                                IFA_ADDRESS => address = Some(Ipv4Addr::from(v)),
                                _ => {}
                            }
                        }
                        a += nla_align(alen);
                    }
                    // IFA_LOCAL is the interface's own address (IFA_ADDRESS is
                    // the peer's on point-to-point links)
                    if let Some(ip) = local.or(address) {
                        out.push(if ty == RTM_DELADDR {
                            NlEvent::AddrRemoved(ip, index)
                        } else {
                            NlEvent::AddrAdded(ip, index)
                        });
                    }
                }
            }
            RTM_DELLINK if body.len() >= IFINFOMSG => {
                out.push(NlEvent::LinkRemoved(u32_at(body, 4).unwrap_or(0)));
            }
            _ => {}
        }
        off += nla_align(len);
    }
}

/// The subscribed rtnetlink socket (nonblocking, close-on-exec).
pub(crate) struct AddrWatch {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl AddrWatch {
    pub(crate) fn open() -> io::Result<AddrWatch> {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_nl is valid; the fields are set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_LINK;
        // SAFETY: binds our own socket to a valid sockaddr_nl of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(AddrWatch {
            fd,
            buf: vec![0; 16384],
        })
    }

    /// Read every queued message (never blocks).
    pub(crate) fn poll(&mut self, out: &mut Vec<NlEvent>) {
        loop {
            // SAFETY: receives into our own buffer of the given length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    out.push(NlEvent::Overrun);
                    continue;
                }
                return;
            }
            if n == 0 {
                return;
            }
            parse(&self.buf[..n as usize], out);
        }
    }
}

/// Whether `ip` is still a local address of this network namespace (a UDP bind to
/// it succeeds; with `net.ipv4.ip_nonlocal_bind` set it always does).
pub(crate) fn is_local(ip: Ipv4Addr) -> bool {
    match UdpSocket::bind(SocketAddrV4::new(ip, 0)) {
        Ok(_) => true,
        Err(e) => e.kind() != io::ErrorKind::AddrNotAvailable,
    }
}

/// The index of the interface that carries exactly `ip`, if any.
pub(crate) fn ifindex_of(ip: Ipv4Addr) -> Option<u32> {
    let (name, _) = netio::ifaddr::ipv4_addrs()
        .into_iter()
        .find(|(_, a)| *a == ip)?;
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// What a route lookup says about reaching `dst` from `src` (or from anywhere):
/// `Ok(source address the kernel picks)` or `Err(positive errno)`, e.g.
/// `ENETUNREACH`. A connected UDP socket: no packet is sent.
pub(crate) fn route_source(src: Option<Ipv4Addr>, dst: Ipv4Addr) -> Result<Ipv4Addr, i32> {
    netio::ifaddr::route_source(src, dst, wire::roce::ROCE_PORT)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn ifaddr(family: u8, index: u32, attrs: &[(u16, [u8; 4])]) -> Vec<u8> {
        let mut b = vec![family, 24, 0, 0];
        b.extend_from_slice(&index.to_ne_bytes());
        for (ty, v) in attrs {
            b.extend_from_slice(&8u16.to_ne_bytes());
            b.extend_from_slice(&ty.to_ne_bytes());
            b.extend_from_slice(v);
        }
        b
    }

    #[test]
    fn parses_addr_and_link_messages() {
        let mut buf = msg(
            RTM_DELADDR,
            &ifaddr(
                libc::AF_INET as u8,
                3,
                &[(IFA_ADDRESS, [10, 0, 0, 9]), (IFA_LOCAL, [10, 0, 0, 1])],
            ),
        );
        buf.extend(msg(
            RTM_NEWADDR,
            &ifaddr(libc::AF_INET as u8, 4, &[(IFA_ADDRESS, [127, 0, 9, 9])]),
        ));
        buf.extend(msg(
            RTM_DELADDR,
            &ifaddr(libc::AF_INET6 as u8, 4, &[(IFA_ADDRESS, [1, 2, 3, 4])]),
        ));
        let mut link = vec![0u8; IFINFOMSG];
        link[4..8].copy_from_slice(&7u32.to_ne_bytes());
        buf.extend(msg(RTM_DELLINK, &link));
        let mut out = vec![];
        parse(&buf, &mut out);
        assert_eq!(
            out,
            vec![
                NlEvent::AddrRemoved(Ipv4Addr::new(10, 0, 0, 1), 3),
                NlEvent::AddrAdded(Ipv4Addr::new(127, 0, 9, 9), 4),
                NlEvent::LinkRemoved(7),
            ]
        );
    }

    #[test]
    fn truncated_and_garbage_input_is_skipped() {
        let good = msg(
            RTM_DELADDR,
            &ifaddr(libc::AF_INET as u8, 3, &[(IFA_LOCAL, [10, 0, 0, 1])]),
        );
        for cut in 0..good.len() {
            let mut out = vec![];
            parse(&good[..cut], &mut out);
            assert!(out.is_empty(), "cut at {cut}: {out:?}");
        }
        let mut out = vec![];
        parse(&[0xff; 64], &mut out);
        parse(&[0; 64], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn loopback_is_local_and_route_lookup_sends_nothing() {
        assert!(is_local(Ipv4Addr::new(127, 0, 4, 77)));
        assert_eq!(
            route_source(
                Some(Ipv4Addr::new(127, 0, 4, 77)),
                Ipv4Addr::new(127, 0, 4, 78)
            ),
            Ok(Ipv4Addr::new(127, 0, 4, 77))
        );
    }
}
