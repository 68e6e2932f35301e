//! Local interface addresses (getifaddrs) and route look-ups.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

/// IPv4 addresses of interfaces that are up, in the kernel's order, with the
/// interface name.
pub fn ipv4_addrs() -> Vec<(String, Ipv4Addr)> {
    let mut out = vec![];
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list returned by getifaddrs.
        let e = unsafe { &*p };
        if !e.ifa_addr.is_null() && e.ifa_flags & libc::IFF_UP as u32 != 0 {
            // SAFETY: ifa_addr is a valid sockaddr; checked family before the cast.
            let fam = unsafe { (*e.ifa_addr).sa_family } as i32;
            if fam == libc::AF_INET {
                // SAFETY: AF_INET => sockaddr_in.
                let sin = unsafe { &*(e.ifa_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                // SAFETY: ifa_name is a NUL-terminated string.
                let name = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) }
                    .to_string_lossy()
                    .into_owned();
                out.push((name, ip));
            }
        }
        p = e.ifa_next;
    }
    // SAFETY: allocated by getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
    out
}

/// The first configured non-loopback IPv4 address, else 127.0.0.1.
pub fn default_ipv4() -> Ipv4Addr {
    ipv4_addrs()
        .into_iter()
        .map(|(_, ip)| ip)
        .find(|ip| !ip.is_loopback())
        .unwrap_or(Ipv4Addr::LOCALHOST)
}

/// The source address the kernel picks to reach `dst:port` from `src` (or from
/// any local address): a UDP socket bound and connected, no packet sent. Errors
/// are the kernel's: `EADDRNOTAVAIL` for a `src` that is not local,
/// `ENETUNREACH` without a route.
pub fn route_source(src: Option<Ipv4Addr>, dst: Ipv4Addr, port: u16) -> io::Result<Ipv4Addr> {
    let s = UdpSocket::bind(SocketAddrV4::new(src.unwrap_or(Ipv4Addr::UNSPECIFIED), 0))?;
    s.connect(SocketAddrV4::new(dst, port))?;
    match s.local_addr()? {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(_) => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
    }
}

/// An `ifreq` ioctl that reads `name` and fills the answer (SIOCGIFHWADDR,
/// SIOCGIFMTU, ...) on a throwaway socket of the caller's network namespace.
pub(crate) fn if_ioctl(name: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: plain socket(2).
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor we own.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: `request` is an ifreq ioctl: it reads ifr_name and writes the ifreq we pass.
    if unsafe { libc::ioctl(s.as_raw_fd(), request, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    #[test]
    fn has_loopback() {
        assert!(super::ipv4_addrs().iter().any(|(_, ip)| ip.is_loopback()));
    }

    #[test]
    fn route_to_loopback_leaves_from_the_given_source() {
        let d = Ipv4Addr::new(127, 0, 0, 1);
        assert_eq!(super::route_source(Some(d), d, 4791).unwrap(), d);
        // 127.0.0.1 reaches another 127/8 address from itself
        assert!(super::route_source(None, Ipv4Addr::new(127, 0, 0, 9), 4791)
            .unwrap()
            .is_loopback());
    }
}
