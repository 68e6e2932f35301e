//! Same-run baselines of this machine's physical limits: memcpy, UDP loopback
//! (plain and with UDP GSO), TCP loopback. Every `dpustack bench` figure is
//! reported next to one of these, measured in the same run.

use std::io;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// memcpy bandwidth (bytes copied per second) for a buffer of `size` bytes.
pub fn memcpy_bw(size: usize, t: Duration) -> f64 {
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; size];
    dst.copy_from_slice(&src); // warm up
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < t {
        for _ in 0..16 {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        bytes += 16 * size as u64;
    }
    bytes as f64 / start.elapsed().as_secs_f64()
}

/// Sets UDP_SEGMENT (GSO) on a socket: one send of up to 64 KiB leaves as
/// datagrams of `seg` bytes.
pub fn set_udp_gso(sock: &UdpSocket, seg: u16) -> io::Result<()> {
    let v: libc::c_int = seg as libc::c_int;
    // SAFETY: valid fd, pointer to a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
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

/// Payload bytes per second that a receiver got over UDP loopback from one sender
/// of `dgram`-byte datagrams (with `gso`, 64 KiB-ish sends split by the kernel).
pub fn udp_loopback_bw(dgram: usize, t: Duration, gso: bool) -> io::Result<f64> {
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    let addr = rx.local_addr()?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(addr)?;
    let segs = if gso { (65000 / dgram).max(1) } else { 1 };
    if gso {
        set_udp_gso(&tx, dgram as u16)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let buf = vec![0xabu8; dgram * segs];
        while !s2.load(Ordering::Relaxed) {
            // ENOBUFS/ECONNREFUSED under overload: keep going
            let _ = tx.send(&buf);
        }
    });
    let mut buf = vec![0u8; 65536];
    // skip the first few ms (sender start)
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(20) {
        let _ = rx.recv(&mut buf);
    }
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < t {
        if let Ok(n) = rx.recv(&mut buf) {
            bytes += n as u64;
        }
    }
    let el = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    Ok(bytes as f64 / el.as_secs_f64())
}

/// Bytes per second over one TCP loopback connection (64 KiB writes).
pub fn tcp_loopback_bw(t: Duration) -> io::Result<f64> {
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || -> io::Result<()> {
        let mut c = TcpStream::connect(addr)?;
        let buf = vec![0xcdu8; 65536];
        while !s2.load(Ordering::Relaxed) {
            c.write_all(&buf)?;
        }
        Ok(())
    });
    let (mut s, _) = l.accept()?;
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < t {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    let el = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    drop(s);
    let _ = sender.join();
    Ok(bytes as f64 / el.as_secs_f64())
}

/// Half a UDP round trip on loopback, p50 in nanoseconds: the latency floor
/// under any transport on UDP sockets. 2-byte datagrams ping-pong between two
/// sockets on 127.0.0.1, an echo thread on one. With `busy`, both sides spin on
/// non-blocking `recv` (as a polling data plane does: no wake-ups); without,
/// both block in `recv` (a wake-up per datagram). Samples are taken with the
/// CPU's cycle counter and converted with the rate measured against the wall
/// clock over the run (reading the clock is an emulated HPET access in a TCG
/// guest, the TSC is not).
pub fn udp_half_rtt(t: Duration, busy: bool) -> io::Result<f64> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    a.set_nonblocking(busy)?;
    b.set_nonblocking(busy)?;
    if !busy {
        a.set_read_timeout(Some(Duration::from_millis(500)))?;
        b.set_read_timeout(Some(Duration::from_millis(50)))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !s2.load(Ordering::Relaxed) {
            match b.recv(&mut buf) {
                Ok(n) => {
                    let _ = b.send(&buf[..n]);
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
    });
    let mut buf = [0u8; 64];
    let mut raw = Vec::with_capacity(1 << 16);
    let t0 = Instant::now();
    let c0 = cycles();
    let mut k = 0u32;
    let res = loop {
        k = k.wrapping_add(1);
        if k.is_multiple_of(256) && t0.elapsed() >= t {
            break Ok(());
        }
        let s = cycles();
        if let Err(e) = a.send(&[1u8; 2]) {
            break Err(e);
        }
        let got = loop {
            match a.recv(&mut buf) {
                Ok(_) => break Ok(()),
                Err(e) if busy && e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = got {
            break Err(e);
        }
        raw.push(cycles().wrapping_sub(s));
    };
    let secs = t0.elapsed().as_secs_f64();
    let ns_per_cycle = secs * 1e9 / cycles().wrapping_sub(c0).max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    res?;
    if raw.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no round trip completed",
        ));
    }
    raw.sort_unstable();
    Ok(raw[raw.len() / 2] as f64 * ns_per_cycle / 2.0)
}

/// A cheap cycle counter for latency samples (TSC on x86_64, else nanoseconds):
/// convert with the rate measured against the wall clock over the whole run
/// (reading the clock is an emulated HPET access in the TCG test guest).
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_measure_something() {
        let t = Duration::from_millis(50);
        assert!(memcpy_bw(4096, t) > 1e6);
        assert!(udp_loopback_bw(1024, t, false).unwrap() > 0.0);
        assert!(udp_loopback_bw(1024, t, true).unwrap() > 0.0);
        assert!(tcp_loopback_bw(t).unwrap() > 1e5);
        for busy in [false, true] {
            let h = udp_half_rtt(t, busy).unwrap();
            // a loopback half round trip takes more than 100 ns and less than 50 ms
            assert!(h > 100.0 && h < 5e7, "busy={busy}: {h} ns");
        }
    }
}
