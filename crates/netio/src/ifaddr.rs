//! Local interface addresses (getifaddrs).

use std::net::Ipv4Addr;

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

#[cfg(test)]
mod tests {
    #[test]
    fn has_loopback() {
        assert!(super::ipv4_addrs().iter().any(|(_, ip)| ip.is_loopback()));
    }
}
