//! Batched UDP I/O for datagram protocols (RoCEv2 on 4791): `sendmmsg` with UDP
//! GSO groups, `recvmmsg`, preallocated buffers (no allocation per packet).
//!
//! IPv4 ID: sockets are set to `IP_PMTUDISC_DO` and always send with `sendto`
//! semantics (unconnected), so Linux sends DF datagrams with IPv4 ID 0; a GSO send
//! of k segments leaves with IDs 0, 1, .., k-1 (the kernel numbers the segments).
//! Protocols whose checksum covers the ID (the RoCEv2 ICRC) can therefore compute
//! it: see [`TxBatch::for_each_packet`].

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Most datagrams handed to one `sendmmsg`/`recvmmsg`.
pub const MAX_BATCH: usize = 64;
/// Most segments in one GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or more).
pub const MAX_GSO_SEGS: usize = 64;
/// Most bytes in one GSO send.
pub const MAX_GSO_BYTES: usize = 65000;

/// A UDP socket set up for batched datagram I/O.
pub struct UdpBatchSocket {
    sock: UdpSocket,
    gso: bool,
    gro: bool,
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: valid fd, pointer to a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl UdpBatchSocket {
    /// Binds `addr`, nonblocking, DF with IPv4 ID 0, large socket buffers, GSO if
    /// the kernel has it.
    pub fn bind(addr: SocketAddrV4) -> io::Result<UdpBatchSocket> {
        let sock = UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if setsockopt_int(fd, libc::SOL_SOCKET, force, 8 << 20).is_err() {
                let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, 8 << 20);
            }
        }
        // probe GSO: setting the socket option works iff the kernel supports it
        let gso = setsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok();
        Ok(UdpBatchSocket {
            sock,
            gso,
            gro: false,
        })
    }

    /// Turns UDP GRO on (`UDP_GRO`): the kernel may then hand over several
    /// datagrams of one flow as one, with their segment size in a control message
    /// (on loopback a GSO send arrives whole, never segmented). Only an [`RxBatch`]
    /// made with [`RxBatch::new_gro`] splits them again: receive with one of those.
    /// Returns whether the kernel took it.
    pub fn enable_gro(&mut self) -> bool {
        self.gro = setsockopt_int(self.fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        self.gro
    }

    pub fn gro(&self) -> bool {
        self.gro
    }

    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        match self.sock.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(a),
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "not IPv4")),
        }
    }

    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Disables GSO (for tests and for peers that mishandle it).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on && self.gso;
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Waits until readable or `timeout` (None = forever). True if readable.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(rc > 0)
    }
}

#[derive(Clone, Copy)]
struct TxPkt {
    off: usize,
    len: usize,
    dst: SocketAddrV4,
    /// Caller's tag (e.g. the source port / socket the datagram must leave from).
    tag: u16,
}

/// A batch of outgoing datagrams laid out back to back in one buffer (so equal
/// sized datagrams to one destination can leave as one GSO send).
pub struct TxBatch {
    buf: Vec<u8>,
    used: usize,
    max_pkt: usize,
    pkts: Vec<TxPkt>,
    /// `sendmmsg` calls made (a counter for per-packet cost breakdowns).
    calls: u64,
}

impl TxBatch {
    /// Room for `MAX_BATCH` datagrams of up to `max_pkt` bytes.
    pub fn new(max_pkt: usize) -> TxBatch {
        TxBatch {
            buf: vec![0; MAX_BATCH * max_pkt],
            used: 0,
            max_pkt,
            pkts: Vec::with_capacity(MAX_BATCH),
            calls: 0,
        }
    }

    /// `sendmmsg` calls made by this batch so far.
    pub fn syscalls(&self) -> u64 {
        self.calls
    }

    /// Space for the next datagram, or None when the batch is full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.pkts.len() >= MAX_BATCH || self.used + self.max_pkt > self.buf.len() {
            return None;
        }
        Some(&mut self.buf[self.used..self.used + self.max_pkt])
    }

    /// Commits the first `len` bytes of the last `slot()` as a datagram to `dst`.
    pub fn commit(&mut self, dst: SocketAddrV4, len: usize) {
        self.commit_tagged(dst, len, 0);
    }

    /// As [`TxBatch::commit`], with a tag that [`TxBatch::flush_tagged`] maps to
    /// the socket to send from (datagrams of different tags never share a GSO send).
    pub fn commit_tagged(&mut self, dst: SocketAddrV4, len: usize, tag: u16) {
        let len = len.min(self.max_pkt);
        self.pkts.push(TxPkt {
            off: self.used,
            len,
            dst,
            tag,
        });
        self.used += len;
    }

    pub fn len(&self) -> usize {
        self.pkts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Length of the GSO group starting at packet `i`.
    fn group_len(&self, i: usize, gso: bool) -> usize {
        let p = self.pkts[i];
        if !gso {
            return 1;
        }
        let mut n = 1;
        let mut bytes = p.len;
        while i + n < self.pkts.len() && n < MAX_GSO_SEGS {
            let q = self.pkts[i + n];
            if q.dst != p.dst || q.tag != p.tag || q.len > p.len || bytes + q.len > MAX_GSO_BYTES {
                break;
            }
            n += 1;
            bytes += q.len;
            if q.len < p.len {
                break; // a shorter segment can only be the last one
            }
        }
        n
    }

    /// Calls `f(datagram, dst, ipv4_id)` for every datagram, with the IPv4 ID the
    /// kernel will give it when sent by [`TxBatch::flush`] on `sock`.
    pub fn for_each_packet(
        &mut self,
        sock: &UdpBatchSocket,
        mut f: impl FnMut(&mut [u8], SocketAddrV4, u16),
    ) {
        self.for_each_tagged(|_| sock.gso, |b, d, id, _| f(b, d, id));
    }

    /// As [`TxBatch::for_each_packet`] for tagged datagrams: `gso(tag)` says
    /// whether the socket of that tag uses GSO; `f` also gets the tag.
    pub fn for_each_tagged(
        &mut self,
        gso: impl Fn(u16) -> bool,
        mut f: impl FnMut(&mut [u8], SocketAddrV4, u16, u16),
    ) {
        let mut i = 0;
        while i < self.pkts.len() {
            let tag = self.pkts[i].tag;
            let n = self.group_len(i, gso(tag));
            for k in 0..n {
                let p = self.pkts[i + k];
                f(&mut self.buf[p.off..p.off + p.len], p.dst, k as u16, tag);
            }
            i += n;
        }
    }

    /// Sends every datagram from the socket `sock_for(tag)` (consecutive runs of
    /// one tag per `sendmmsg`) and empties the batch.
    pub fn flush_tagged<'s>(
        &mut self,
        sock_for: impl Fn(u16) -> &'s UdpBatchSocket,
    ) -> io::Result<usize> {
        let mut sent = 0;
        let mut i = 0;
        let mut res = Ok(());
        while i < self.pkts.len() {
            let tag = self.pkts[i].tag;
            let mut j = i;
            while j < self.pkts.len() && self.pkts[j].tag == tag {
                j += 1;
            }
            match self.send_range(i, j, sock_for(tag)) {
                Ok(n) => sent += n,
                Err(e) => res = Err(e),
            }
            i = j;
        }
        self.clear();
        res.map(|_| sent)
    }

    /// Sends everything (GSO groups where possible) and empties the batch.
    /// Datagrams the kernel refuses (ENOBUFS, EAGAIN, ECONNREFUSED) are dropped,
    /// as a network would drop them. Returns datagrams handed to the kernel.
    pub fn flush(&mut self, sock: &UdpBatchSocket) -> io::Result<usize> {
        let r = self.send_range(0, self.pkts.len(), sock);
        self.clear();
        r
    }

    /// Sends datagrams `start..end` (GSO groups never cross `end`).
    fn send_range(&mut self, start: usize, end: usize, sock: &UdpBatchSocket) -> io::Result<usize> {
        let mut iov: [MaybeUninit<libc::iovec>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        let mut names: [MaybeUninit<libc::sockaddr_in>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        // cmsg space for one u16 UDP_SEGMENT per message
        const CM: usize = 32;
        let mut cmsgs = [[0u8; CM]; MAX_BATCH];
        let mut msgs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        let mut nmsg = 0;
        let mut segs_of = [0usize; MAX_BATCH];
        let mut i = start;
        while i < end {
            let n = self.group_len(i, sock.gso).min(end - i);
            let p = self.pkts[i];
            let total: usize = self.pkts[i..i + n].iter().map(|q| q.len).sum();
            iov[nmsg].write(libc::iovec {
                iov_base: self.buf[p.off..].as_mut_ptr() as *mut libc::c_void,
                iov_len: total,
            });
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: p.dst.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(p.dst.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            names[nmsg].write(sa);
            // SAFETY: zeroed msghdr is valid; fields set below.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = names[nmsg].as_mut_ptr() as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = iov[nmsg].as_mut_ptr();
            h.msg_iovlen = 1;
            if n > 1 {
                let c = &mut cmsgs[nmsg];
                h.msg_control = c.as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE of a u16 fits in CM bytes.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                // SAFETY: h.msg_control points at CM zeroed bytes, enough for one cmsg.
                unsafe {
                    let cm = libc::CMSG_FIRSTHDR(&h);
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = libc::UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut u16, p.len as u16);
                }
            }
            msgs[nmsg].write(libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            });
            segs_of[nmsg] = n;
            nmsg += 1;
            i += n;
        }
        let mut sent = 0;
        let mut done = 0;
        while done < nmsg {
            self.calls += 1;
            // SAFETY: msgs[done..nmsg] are initialised and point at live buffers.
            let rc = unsafe {
                libc::sendmmsg(
                    sock.fd(),
                    msgs[done].as_mut_ptr(),
                    (nmsg - done) as libc::c_uint,
                    0,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN)
                    | Some(libc::ENOBUFS)
                    | Some(libc::ECONNREFUSED)
                    | Some(libc::EPERM) => {
                        done += 1; // drop this one, like a full queue would
                        continue;
                    }
                    Some(libc::EIO) | Some(libc::EINVAL) if segs_of[done] > 1 => {
                        // GSO refused (e.g. by the device): drop; caller may disable GSO
                        done += 1;
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            for s in &segs_of[done..done + rc as usize] {
                sent += s;
            }
            done += rc as usize;
        }
        Ok(sent)
    }

    pub fn clear(&mut self) {
        self.pkts.clear();
        self.used = 0;
    }
}

/// A batch of receive buffers for `recvmmsg`.
///
/// The `recvmmsg` arguments (iovecs, address slots, message headers) are built
/// once: a poll of an empty socket costs the syscall and nothing more (busy
/// pollers call this in a loop; on an emulated CPU rebuilding 64 headers per
/// call was the largest user-space cost).
pub struct RxBatch {
    buf: Vec<u8>,
    slot: usize,
    /// Messages per `recvmmsg` (MAX_BATCH, or fewer big ones with GRO).
    nmsg: usize,
    lens: [usize; MAX_BATCH],
    srcs: [SocketAddrV4; MAX_BATCH],
    /// Received messages.
    n: usize,
    /// GRO: control buffers (the segment size), and the datagrams the messages
    /// split into: (message, offset in its slot, length).
    gro: Option<Box<GroState>>,
    /// Datagrams (= `n` without GRO).
    nseg: usize,
    /// `recvmmsg` calls made, and those that found nothing (counters for
    /// per-packet cost breakdowns).
    calls: u64,
    empty_calls: u64,
    // Heap arrays that never move nor resize: `msgs` points into `iov` and
    // `names`, `iov` points into `buf`.
    _iov: Box<[libc::iovec; MAX_BATCH]>,
    names: Box<[libc::sockaddr_in; MAX_BATCH]>,
    msgs: Box<[libc::mmsghdr; MAX_BATCH]>,
}

/// Most datagrams one GRO receive batch is split into.
pub const MAX_GRO_SEGS: usize = 1024;
/// Bytes of control buffer per message (one `UDP_GRO` int).
const GRO_CMSG: usize = 32;

struct GroState {
    ctrl: [[u8; GRO_CMSG]; MAX_BATCH],
    segs: [(u16, u32, u32); MAX_GRO_SEGS],
}

// SAFETY: the raw pointers only point into the batch's own heap allocations,
// which move with it; nothing is shared with another owner.
unsafe impl Send for RxBatch {}

impl RxBatch {
    /// `MAX_BATCH` buffers of `slot` bytes each.
    pub fn new(slot: usize) -> RxBatch {
        Self::with_geometry(MAX_BATCH, slot, false)
    }

    /// For a socket with [`UdpBatchSocket::enable_gro`]: `nmsg` (at most
    /// `MAX_BATCH`) buffers of 64 KiB, each message split into its datagrams by
    /// the segment size the kernel reports. [`RxBatch::get`] then indexes datagrams.
    pub fn new_gro(nmsg: usize) -> RxBatch {
        Self::with_geometry(nmsg.clamp(1, MAX_BATCH), 65536, true)
    }

    fn with_geometry(nmsg: usize, slot: usize, gro: bool) -> RxBatch {
        let mut buf = vec![0u8; nmsg * slot];
        // SAFETY: an all-zero iovec is a valid value (null base, length 0).
        let mut iov: Box<[libc::iovec; MAX_BATCH]> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: an all-zero sockaddr_in is a valid value (AF_UNSPEC, 0.0.0.0:0).
        let mut names: Box<[libc::sockaddr_in; MAX_BATCH]> =
            Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: an all-zero mmsghdr is a valid value (null pointers, zero lengths).
        let mut msgs: Box<[libc::mmsghdr; MAX_BATCH]> = Box::new(unsafe { std::mem::zeroed() });
        let mut gro = gro.then(|| {
            Box::new(GroState {
                ctrl: [[0; GRO_CMSG]; MAX_BATCH],
                segs: [(0, 0, 0); MAX_GRO_SEGS],
            })
        });
        let base = buf.as_mut_ptr();
        for i in 0..nmsg {
            // SAFETY: i*slot + slot <= buf.len().
            iov[i].iov_base = unsafe { base.add(i * slot) } as *mut libc::c_void;
            iov[i].iov_len = slot;
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = &mut names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            if let Some(g) = gro.as_mut() {
                h.msg_control = g.ctrl[i].as_mut_ptr() as *mut libc::c_void;
                h.msg_controllen = GRO_CMSG as _;
            }
        }
        RxBatch {
            buf,
            slot,
            nmsg,
            lens: [0; MAX_BATCH],
            srcs: [SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); MAX_BATCH],
            n: 0,
            gro,
            nseg: 0,
            calls: 0,
            empty_calls: 0,
            _iov: iov,
            names,
            msgs,
        }
    }

    /// Receives what is queued now (never blocks). Returns how many datagrams.
    pub fn recv(&mut self, sock: &UdpBatchSocket) -> io::Result<usize> {
        loop {
            self.calls += 1;
            // SAFETY: MAX_BATCH initialised mmsghdrs pointing at live buffers
            // owned by self (see the struct).
            let rc = unsafe {
                libc::recvmmsg(
                    sock.fd(),
                    self.msgs.as_mut_ptr(),
                    self.nmsg as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => {
                        self.empty_calls += 1;
                        self.n = 0;
                        self.nseg = 0;
                        return Ok(0);
                    }
                    Some(libc::ECONNREFUSED) => continue,
                    _ => return Err(e),
                }
            }
            let n = rc as usize;
            for i in 0..n {
                let m = &mut self.msgs[i];
                self.lens[i] = m.msg_len as usize;
                // the kernel shrank it to what it wrote: reset for the next call
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                let sa = &self.names[i];
                self.srcs[i] = SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
                    u16::from_be(sa.sin_port),
                );
            }
            self.n = n;
            self.nseg = match self.gro.is_some() {
                false => n,
                true => self.split_gro(n),
            };
            return Ok(self.nseg);
        }
    }

    /// GRO: each message into its datagrams (the `UDP_GRO` control message gives
    /// the segment size; none = one datagram), and the control buffers reset.
    fn split_gro(&mut self, n: usize) -> usize {
        let Some(g) = self.gro.as_mut() else {
            return n;
        };
        let mut k = 0;
        for i in 0..n {
            let h = &mut self.msgs[i].msg_hdr;
            let mut seg = 0usize;
            // SAFETY: h.msg_control points at this message's GRO_CMSG-byte buffer and
            // msg_controllen is what the kernel wrote into it.
            unsafe {
                let mut cm = libc::CMSG_FIRSTHDR(h);
                while !cm.is_null() {
                    if (*cm).cmsg_level == libc::SOL_UDP && (*cm).cmsg_type == libc::UDP_GRO {
                        seg = std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::c_int)
                            as usize;
                    }
                    cm = libc::CMSG_NXTHDR(h, cm);
                }
            }
            h.msg_controllen = GRO_CMSG as _;
            let len = self.lens[i].min(self.slot);
            let seg = if seg == 0 { len.max(1) } else { seg };
            let mut off = 0;
            while off < len && k < MAX_GRO_SEGS {
                let l = seg.min(len - off);
                g.segs[k] = (i as u16, off as u32, l as u32);
                k += 1;
                off += l;
            }
            if len == 0 && k < MAX_GRO_SEGS {
                g.segs[k] = (i as u16, 0, 0);
                k += 1;
            }
        }
        k
    }

    /// Datagrams received by the last [`RxBatch::recv`].
    pub fn len(&self) -> usize {
        self.nseg
    }
    pub fn is_empty(&self) -> bool {
        self.nseg == 0
    }
    /// `recvmmsg` calls made so far, and how many of them found nothing.
    pub fn syscalls(&self) -> (u64, u64) {
        (self.calls, self.empty_calls)
    }

    /// `recvmmsg` messages of the last receive (with GRO: fewer than datagrams).
    pub fn messages(&self) -> usize {
        self.n
    }

    /// The i-th received datagram and its source.
    pub fn get(&self, i: usize) -> Option<(SocketAddrV4, &[u8])> {
        if i >= self.nseg {
            return None;
        }
        if let Some(g) = self.gro.as_ref() {
            let (m, off, len) = g.segs[i];
            let base = m as usize * self.slot + off as usize;
            return Some((self.srcs[m as usize], &self.buf[base..base + len as usize]));
        }
        let off = i * self.slot;
        Some((
            self.srcs[i],
            &self.buf[off..off + self.lens[i].min(self.slot)],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_roundtrip_with_gso_groups() {
        let a = UdpBatchSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let b = UdpBatchSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let dst = b.local_addr().unwrap();
        let mut tx = TxBatch::new(1500);
        // 5 full + 1 short to one destination (one GSO group), then 2 single
        for (i, len) in [1000usize, 1000, 1000, 1000, 1000, 300, 77, 1000]
            .into_iter()
            .enumerate()
        {
            let s = tx.slot().unwrap();
            s[..len].fill(i as u8);
            tx.commit(dst, len);
        }
        let mut ids = vec![];
        tx.for_each_packet(&a, |_, _, id| ids.push(id));
        if a.gso() {
            assert_eq!(ids, [0, 1, 2, 3, 4, 5, 0, 0]);
        }
        assert_eq!(tx.flush(&a).unwrap(), 8);
        assert!(tx.is_empty());
        let mut rx = RxBatch::new(2048);
        let mut got = vec![];
        for _ in 0..100 {
            b.wait_readable(Some(Duration::from_millis(20))).unwrap();
            rx.recv(&b).unwrap();
            for i in 0..rx.len() {
                let (src, d) = rx.get(i).unwrap();
                assert_eq!(src.port(), a.local_addr().unwrap().port());
                got.push((d.len(), d[0]));
            }
            if got.len() == 8 {
                break;
            }
        }
        assert_eq!(
            got,
            [
                (1000, 0),
                (1000, 1),
                (1000, 2),
                (1000, 3),
                (1000, 4),
                (300, 5),
                (77, 6),
                (1000, 7)
            ]
        );
    }

    /// A GSO send to a GRO socket on loopback arrives as one message (the kernel
    /// never segments it) and is split back into the same datagrams, in order.
    #[test]
    fn gro_receive_splits_gso_groups() {
        let a = UdpBatchSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut b = UdpBatchSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        if !a.gso() || !b.enable_gro() {
            panic!("this kernel has UDP GSO/GRO (Linux >= 5.0): setting them failed");
        }
        let dst = b.local_addr().unwrap();
        let mut tx = TxBatch::new(1500);
        let lens: Vec<usize> = (0..20).map(|_| 1400).chain([333, 1400]).collect();
        for (i, &len) in lens.iter().enumerate() {
            let s = tx.slot().unwrap();
            s[..len].fill(i as u8);
            s[0] = 0xA0 ^ i as u8;
            tx.commit(dst, len);
        }
        assert_eq!(tx.flush(&a).unwrap(), lens.len());
        let mut rx = RxBatch::new_gro(8);
        let mut got = vec![];
        let mut msgs = 0;
        for _ in 0..100 {
            b.wait_readable(Some(Duration::from_millis(20))).unwrap();
            rx.recv(&b).unwrap();
            msgs += rx.messages();
            for i in 0..rx.len() {
                let (src, d) = rx.get(i).unwrap();
                assert_eq!(src.port(), a.local_addr().unwrap().port());
                got.push((d.len(), d[0], d[d.len() - 1]));
            }
            if got.len() == lens.len() {
                break;
            }
        }
        let want: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, 0xA0 ^ i as u8, i as u8))
            .collect();
        assert_eq!(got, want);
        // 21 datagrams of the GSO group (20 x 1400 + 333) in one message, the last alone
        assert_eq!(msgs, 2, "GSO group not delivered whole");
    }
}
