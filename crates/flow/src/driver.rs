//! I/O glue for a live switch: AF_PACKET ports on Linux interfaces and pcap-file ports
//! (replay in, capture out). The protocol core (`key`, `xlate`, `dp`, `exec`) never
//! touches these.

use std::io;

/// A raw AF_PACKET socket bound to one interface (all EtherTypes), non-blocking.
#[derive(Debug)]
pub struct AfPacket {
    fd: libc::c_int,
    pub ifname: String,
}

impl AfPacket {
    pub fn open(ifname: &str) -> io::Result<AfPacket> {
        let cname = std::ffi::CString::new(ifname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
        // SAFETY: plain libc calls with valid arguments; the fd is owned by the result.
        unsafe {
            let ifindex = libc::if_nametoindex(cname.as_ptr());
            if ifindex == 0 {
                return Err(io::Error::last_os_error());
            }
            let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            sll.sll_ifindex = ifindex as i32;
            let r = libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            if r < 0 {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            // Ask for the VLAN tag the kernel strips on receive (VLAN acceleration), to
            // put it back into the frame.
            let one: libc::c_int = 1;
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_AUXDATA,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
            Ok(AfPacket {
                fd,
                ifname: ifname.to_string(),
            })
        }
    }
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }
    /// Receives one frame sent *to* this interface (frames we transmitted are skipped);
    /// a VLAN tag stripped by the kernel is re-inserted. `Ok(None)` when nothing is
    /// pending. `buf` should have 4 bytes of room beyond the largest frame.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            let cap = buf.len().saturating_sub(4);
            // SAFETY: an all-zero sockaddr_ll is a valid value (plain integers).
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut cbuf = [0u64; 16];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: cap,
            };
            // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = &mut sll as *mut libc::sockaddr_ll as *mut libc::c_void;
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&cbuf);
            // SAFETY: msg points at valid buffers for the lengths given.
            let n = unsafe { libc::recvmsg(self.fd, &mut msg, 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Ok(None);
                }
                return Err(e);
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let mut n = n as usize;
            // SAFETY: walking the control messages the kernel wrote into cbuf.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA
                    {
                        let aux = std::ptr::read_unaligned(
                            libc::CMSG_DATA(c) as *const libc::tpacket_auxdata
                        );
                        if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 && n >= 12 {
                            let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                                aux.tp_vlan_tpid
                            } else {
                                0x8100
                            };
                            buf.copy_within(12..n, 16);
                            buf[12..14].copy_from_slice(&tpid.to_be_bytes());
                            buf[14..16].copy_from_slice(&aux.tp_vlan_tci.to_be_bytes());
                            n += 4;
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            return Ok(Some(n));
        }
    }
    /// Frames the kernel dropped on this socket's receive queue (full) since the
    /// last call (PACKET_STATISTICS, which the kernel resets on each read).
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        // SAFETY: an all-zero tpacket_stats is a valid value (plain integers).
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: st and len are valid for the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(st.tp_drops))
    }
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: frame is valid for its length.
        let n = unsafe {
            libc::send(
                self.fd,
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Waits until one of `fds` is readable or `ms` milliseconds passed.
pub fn poll_readable(fds: &[libc::c_int], ms: i32) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: p is a valid pollfd array of its length.
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms);
    }
}

pub use wire::pcap::{read_pcap, LinkType, PcapWriter};
