//! Next hops and neighbours (ARP) for frames built in user space (the AF_XDP
//! path, [`crate::xdp`]): the interface MTU, the route's gateway from
//! `/proc/net/route`, the neighbour's MAC from `/proc/net/arp`, and a
//! solicitation that makes the kernel resolve a missing one (an empty UDP
//! datagram to the discard port: the kernel ARPs before sending it). All of it
//! reads the caller's network namespace (`/proc/net` is per process; the MTU
//! comes from an ioctl, not from `/sys`, which shows the namespace sysfs was
//! mounted in).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// The interface that holds `ip` (an address of this host), if any.
pub fn iface_of(ip: Ipv4Addr) -> Option<String> {
    crate::ifaddr::ipv4_addrs()
        .into_iter()
        .find(|(_, a)| *a == ip)
        .map(|(n, _)| n)
}

/// The MTU of `name` (SIOCGIFMTU).
pub fn if_mtu(name: &str) -> io::Result<u32> {
    let req = crate::ifaddr::if_ioctl(name, libc::SIOCGIFMTU)?;
    // SAFETY: the kernel filled the mtu member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// A `/proc/net` hex address (the in-memory bytes of a network-order u32).
fn proc_addr(s: &str) -> Option<Ipv4Addr> {
    u32::from_str_radix(s, 16)
        .ok()
        .map(|v| Ipv4Addr::from(v.to_ne_bytes()))
}

/// The next hop towards `dst` out of `ifname` by the routes in `table` (the
/// text of `/proc/net/route`): the gateway of the longest matching route of
/// that interface, or `dst` itself when that route is on-link. None: no route
/// of `ifname` covers `dst`.
pub fn next_hop_in(table: &str, ifname: &str, dst: Ipv4Addr) -> Option<Ipv4Addr> {
    let d = u32::from(dst);
    let mut best: Option<(u32, Ipv4Addr)> = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != ifname {
            continue;
        }
        let (Some(net), Some(gw), Some(mask)) = (proc_addr(f[1]), proc_addr(f[2]), proc_addr(f[7]))
        else {
            continue;
        };
        let flags = u32::from_str_radix(f[3], 16).unwrap_or(0);
        if flags & 0x1 == 0 {
            continue; // RTF_UP
        }
        let m = u32::from(mask);
        if d & m != u32::from(net) & m {
            continue;
        }
        if best.is_none_or(|(bm, _)| m.count_ones() > bm.count_ones()) {
            let hop = if flags & 0x2 != 0 { gw } else { dst }; // RTF_GATEWAY
            best = Some((m, hop));
        }
    }
    best.map(|(_, h)| h)
}

/// The complete neighbour entry of `ip` on `ifname` in `table` (the text of
/// `/proc/net/arp`).
pub fn arp_in(table: &str, ifname: &str, ip: Ipv4Addr) -> Option<[u8; 6]> {
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[5] != ifname || f[0].parse::<Ipv4Addr>().ok() != Some(ip) {
            continue;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0);
        if flags & 0x2 == 0 {
            continue; // ATF_COM: resolved
        }
        let mut mac = [0u8; 6];
        let mut parts = f[3].split(':');
        for b in mac.iter_mut() {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        if mac == [0; 6] {
            continue;
        }
        return Some(mac);
    }
    None
}

/// Why a neighbour could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum NeighError {
    #[error("no route to {dst} out of {ifname}")]
    NoRoute { ifname: String, dst: Ipv4Addr },
    #[error("no ARP answer from {hop} on {ifname} within {waited:?}")]
    Unresolved {
        ifname: String,
        hop: Ipv4Addr,
        waited: Duration,
    },
    #[error("reading /proc/net: {0}")]
    Io(#[from] io::Error),
}

/// The MAC address frames to `dst` out of `ifname` go to: the next hop's
/// (gateway or `dst`), from the kernel's neighbour table; when it has no
/// complete entry, one empty UDP datagram from `src` to the hop's discard port
/// makes the kernel resolve it, and the table is read again every millisecond
/// for up to `wait`.
pub fn resolve(
    ifname: &str,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    wait: Duration,
) -> Result<[u8; 6], NeighError> {
    let routes = std::fs::read_to_string("/proc/net/route")?;
    let hop = next_hop_in(&routes, ifname, dst).ok_or_else(|| NeighError::NoRoute {
        ifname: ifname.to_string(),
        dst,
    })?;
    let lookup = || -> io::Result<Option<[u8; 6]>> {
        Ok(arp_in(
            &std::fs::read_to_string("/proc/net/arp")?,
            ifname,
            hop,
        ))
    };
    if let Some(m) = lookup()? {
        return Ok(m);
    }
    let t0 = Instant::now();
    if let Ok(s) = UdpSocket::bind(SocketAddrV4::new(src, 0)) {
        let _ = s.send_to(&[], SocketAddrV4::new(hop, 9));
    }
    while t0.elapsed() < wait {
        std::thread::sleep(Duration::from_millis(1));
        if let Some(m) = lookup()? {
            return Ok(m);
        }
    }
    Err(NeighError::Unresolved {
        ifname: ifname.to_string(),
        hop,
        waited: wait,
    })
}

/// Resolved neighbours of one interface, kept for the life of the port (a
/// neighbour that changes its MAC is not followed).
#[derive(Debug)]
pub struct NeighCache {
    ifname: String,
    src: Ipv4Addr,
    own_mac: [u8; 6],
    loopback: bool,
    entries: Vec<(Ipv4Addr, [u8; 6])>,
    /// Destinations that did not resolve, and when (not asked again for a second).
    failed: Vec<(Ipv4Addr, Instant)>,
}

impl NeighCache {
    /// For `ifname` (MAC `own_mac`), sending from `src`. On a loopback
    /// interface every frame goes to `own_mac`.
    pub fn new(ifname: &str, src: Ipv4Addr, own_mac: [u8; 6]) -> NeighCache {
        NeighCache {
            ifname: ifname.to_string(),
            src,
            own_mac,
            loopback: ifname == "lo",
            entries: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// The destination MAC for `dst`; the first frame to a new neighbour may
    /// wait up to 100 ms for ARP. None (logged): unresolved, the frame is not
    /// sent (RC retransmits it; a CM MAD is resent by its timer).
    pub fn mac_for(&mut self, dst: Ipv4Addr) -> Option<[u8; 6]> {
        if self.loopback {
            return Some(self.own_mac);
        }
        if let Some((_, m)) = self.entries.iter().find(|(a, _)| *a == dst) {
            return Some(*m);
        }
        if let Some((_, t)) = self.failed.iter().find(|(a, _)| *a == dst) {
            if t.elapsed() < Duration::from_secs(1) {
                return None;
            }
        }
        self.failed.retain(|(a, _)| *a != dst);
        match resolve(&self.ifname, self.src, dst, Duration::from_millis(100)) {
            Ok(m) => {
                self.entries.push((dst, m));
                Some(m)
            }
            Err(e) => {
                tracing::warn!("af_xdp: frame to {dst} not sent: {e}");
                self.failed.push((dst, Instant::now()));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
vr\t0002630A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
vr\t0000000A\t0202630A\t0003\t0\t0\t0\t000000FF\t0\t0\t0
";

    #[test]
    fn next_hop_takes_the_longest_route_of_the_interface() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        // on-link /24
        assert_eq!(
            next_hop_in(ROUTE, "vr", ip("10.99.2.7")),
            Some(ip("10.99.2.7"))
        );
        // 10/8 via 10.99.2.2
        assert_eq!(
            next_hop_in(ROUTE, "vr", ip("10.5.0.1")),
            Some(ip("10.99.2.2"))
        );
        // default route of eth0, not of vr
        assert_eq!(
            next_hop_in(ROUTE, "eth0", ip("8.8.8.8")),
            Some(ip("192.168.2.1"))
        );
        assert_eq!(next_hop_in(ROUTE, "vr", ip("8.8.8.8")), None);
        assert_eq!(next_hop_in(ROUTE, "lo", ip("10.99.2.7")), None);
    }

    const ARP: &str =
        "IP address       HW type     Flags       HW address            Mask     Device
10.99.2.1        0x1         0x2         aa:bb:cc:dd:ee:01     *        vp
10.99.2.9        0x1         0x0         00:00:00:00:00:00     *        vp
10.99.2.1        0x1         0x2         aa:bb:cc:dd:ee:02     *        eth1
";

    #[test]
    fn arp_entries_must_be_complete_and_on_the_interface() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            arp_in(ARP, "vp", ip("10.99.2.1")),
            Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x01])
        );
        assert_eq!(
            arp_in(ARP, "eth1", ip("10.99.2.1")),
            Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x02])
        );
        assert_eq!(arp_in(ARP, "vp", ip("10.99.2.9")), None, "incomplete");
        assert_eq!(arp_in(ARP, "vp", ip("10.99.2.3")), None);
        assert_eq!(arp_in("garbage", "vp", ip("10.99.2.1")), None);
    }

    #[test]
    fn loopback_mtu_and_interface() {
        assert_eq!(iface_of(Ipv4Addr::LOCALHOST).as_deref(), Some("lo"));
        assert!(if_mtu("lo").unwrap() >= 1500);
        assert!(if_mtu("no-such-if0").is_err());
    }
}
