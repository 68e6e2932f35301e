//! AF_XDP ping-pong latency vs the UDP-socket floor, same run, same netns.
//!
//! `xdp_pingpong [SECS] [BURST]` (root): unshares a private network namespace,
//! creates veth `xdp-a` (10.77.0.1) <-> `xdp-b` (10.77.0.2), attaches the
//! generic-XDP redirect program to both ends and binds an AF_XDP socket (copy
//! mode, queue 0) on each. One thread echoes, the main thread pings; both busy
//! poll their RX rings (no syscall to receive, one `sendto` kick per burst). Each
//! round trip sends BURST frames with a 2-byte UDP payload in one kick each way
//! (BURST 2 is the RoCE RC ping-pong pattern: WRITE + ACK per direction). Prints
//! the p50 half round trip (TSC samples calibrated against the wall clock, as
//! `netio::baseline::udp_half_rtt`) next to `udp_half_rtt(t, true)` measured in
//! the same process and netns (busy-polling UDP sockets on lo). The namespace and
//! everything in it vanish when the process exits. Not root: prints SKIP.
//!
//! Usage: `xdp_pingpong [SECS=2] [BURST=1] [first]`, env `XDP_MODE=drv` for
//! veth's native XDP hook instead of generic XDP. The UDP rows use the RoCE
//! driver's socket pattern (`netio::udp` TxBatch/RxBatch, sendmmsg/recvmmsg, GSO
//! off) with the same burst and wait rule, plus `udp_half_rtt(t, true)`.
//!
//! Measured 2026-11-30, p50 half RTT in us, generic XDP (3 s runs, 2-3 runs each;
//! the host was shared with other builds, so p99s are noisy and not quoted):
//!
//! | pattern                              | QEMU TCG guest (6.1) | host (6.18) |
//! |--------------------------------------|----------------------|-------------|
//! | AF_XDP, 1 frame                      | 7.8 - 9.9            | 2.0         |
//! | UDP busy recv/send, 1 datagram       | 9.6 - 13.1           | 2.8 - 3.1   |
//! | UDP sendmmsg/recvmmsg, 1 datagram    | 13.9 - 17.6          | 3.1 - 3.6   |
//! | AF_XDP, 2 frames/kick, wait all      | 14.6 - 17.1          | 3.3         |
//! | UDP sendmmsg/recvmmsg, 2, wait all   | 24.5 - 30.5          | 5.6 - 7.4   |
//! | AF_XDP, 2 frames/kick, data first    | 9.6 - 9.8            | 1.9         |
//! | UDP sendmmsg/recvmmsg, 2, data first | 16.0 - 17.6          | 3.8         |
//! | AF_XDP native veth XDP, 1 / 2 frames | 12.6 - 13.8 / 22.8 - 23.4 | 1.5 / 2.9 |
//!
//! Reading: in the guest each frame costs the kernel ~7 us (skb build, veth,
//! backlog, generic XDP, copy into the UMEM) whatever the socket type; AF_XDP
//! saves the syscall on receive and the IP/UDP layers (~40-45 % of the UDP
//! figure). A receiver sees the first frame of a kick while the sender's
//! syscall is still building the second, so queueing the data frame before the
//! ACK keeps the second frame off the critical path ("data first").

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netio::udp::{RxBatch, TxBatch, UdpBatchSocket};
use netio::xdp::bpf::{XdpRedirect, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use netio::xdp::frame::{self, UdpFlow, HEADERS_LEN};
use netio::xdp::{if_mac, ifindex, XdpConfig, XdpSocket};

const PORT: u16 = 4791;

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status();
    match st {
        Ok(s) if s.success() => {}
        other => panic!("`{cmd}` failed: {other:?}"),
    }
}

/// Payload byte 0 of the frame that carries the ping-pong (a WRITE's stand-in);
/// the other frames of a burst carry `ACK` (an ACK's stand-in).
const DATA: u8 = 1;
const ACK: u8 = 2;

/// What the round trip waits for: every frame of the burst, or (`first`) only
/// the data frame, which is queued first (the rest are drained as they come, as
/// a RoCE requester takes ACKs off the critical path).
#[derive(Clone, Copy)]
struct Pattern {
    burst: usize,
    first: bool,
}

impl Pattern {
    fn need(&self) -> usize {
        if self.first {
            1
        } else {
            self.burst
        }
    }
    fn count(&self, data: usize, acks: usize) -> usize {
        if self.first {
            data
        } else {
            data + acks
        }
    }
}

/// Queues one data frame and `burst - 1` ACK frames of `flow`, kicks once.
fn send_burst(x: &mut XdpSocket, flow: &UdpFlow, burst: usize) {
    for i in 0..burst {
        let ok = x.send_with(|buf| {
            let Some(n) = flow.emit_headers(buf, 2) else {
                return 0;
            };
            buf[HEADERS_LEN..n].copy_from_slice(&[if i == 0 { DATA } else { ACK }, 0]);
            n
        });
        assert!(ok, "no TX frame free");
    }
    x.flush().expect("sendto kick");
}

/// Takes the frames in the RX ring; counts (data, ACK) frames UDP to our port.
fn take(x: &mut XdpSocket, port: u16, p: Pattern) -> usize {
    let (mut data, mut acks) = (0, 0);
    x.recv(64, |f| {
        if let Ok(u) = frame::parse(f) {
            if u.dst_port == port && u.payload.len() == 2 {
                if u.payload[0] == DATA {
                    data += 1;
                } else {
                    acks += 1;
                }
            }
        }
    });
    p.count(data, acks)
}

struct Result {
    p50_ns: f64,
    p99_ns: f64,
    rtts: usize,
    lost: u64,
}

fn xdp_half_rtt(t: Duration, p: Pattern, xdp_flags: u32) -> std::io::Result<Result> {
    let (ia, ib) = (ifindex("xdp-a")?, ifindex("xdp-b")?);
    let (ma, mb) = (if_mac("xdp-a")?, if_mac("xdp-b")?);
    let (ipa, ipb) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
    let pa = XdpRedirect::attach_mode(ia, u32::from(ipa), PORT, 1, xdp_flags)?;
    let pb = XdpRedirect::attach_mode(ib, u32::from(ipb), PORT, 1, xdp_flags)?;
    let mut xa = XdpSocket::open(ia, 0, XdpConfig::default())?;
    let mut xb = XdpSocket::open(ib, 0, XdpConfig::default())?;
    pa.register(0, xa.fd())?;
    pb.register(0, xb.fd())?;
    let ab = UdpFlow {
        src_mac: ma,
        dst_mac: mb,
        src_ip: ipa,
        dst_ip: ipb,
        src_port: PORT,
        dst_port: PORT,
        tos: 0,
    };
    let ba = ab.reversed();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut have = 0;
        let mut k = 0u32;
        while !s2.load(Ordering::Relaxed) {
            have += take(&mut xb, PORT, p);
            if have >= p.need() {
                have -= p.need();
                send_burst(&mut xb, &ba, p.burst);
            } else {
                k = k.wrapping_add(1);
                if k.is_multiple_of(1 << 12) {
                    xb.reap();
                }
                std::hint::spin_loop();
            }
        }
        xb
    });
    let mut raw = Vec::with_capacity(1 << 16);
    let mut lost = 0u64;
    let t0 = Instant::now();
    let c0 = netio::baseline::cycles();
    'outer: while t0.elapsed() < t {
        let s = netio::baseline::cycles();
        let sent_at = Instant::now();
        send_burst(&mut xa, &ab, p.burst);
        let mut have = 0;
        let mut k = 0u32;
        while have < p.need() {
            let n = take(&mut xa, PORT, p);
            have += n;
            if n == 0 {
                k = k.wrapping_add(1);
                if k.is_multiple_of(1 << 14) && sent_at.elapsed() > Duration::from_millis(200) {
                    // A frame went missing (e.g. an early frame before the link
                    // settled): drain and start a new round trip.
                    lost += 1;
                    std::thread::sleep(Duration::from_millis(20));
                    while xa.recv(64, |_| ()) > 0 {}
                    if lost > 20 {
                        break 'outer;
                    }
                    continue 'outer;
                }
                std::hint::spin_loop();
            }
        }
        raw.push(netio::baseline::cycles().wrapping_sub(s));
    }
    let secs = t0.elapsed().as_secs_f64();
    let ns_per_cycle = secs * 1e9 / netio::baseline::cycles().wrapping_sub(c0).max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    let xb = echo.join().expect("echo thread");
    eprintln!("  a: {:?}\n  b: {:?}", xa.stats(), xb.stats());
    drop((pa, pb));
    if raw.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no round trip completed ({lost} lost)"),
        ));
    }
    raw.sort_unstable();
    let at = |q: f64| raw[((raw.len() - 1) as f64 * q) as usize] as f64 * ns_per_cycle / 2.0;
    Ok(Result {
        p50_ns: at(0.5),
        p99_ns: at(0.99),
        rtts: raw.len(),
        lost,
    })
}

fn udp_queue(tx: &mut TxBatch, dst: std::net::SocketAddrV4, burst: usize) {
    for i in 0..burst {
        if let Some(sl) = tx.slot() {
            sl[..2].copy_from_slice(&[if i == 0 { DATA } else { ACK }, 0]);
            tx.commit(dst, 2);
        }
    }
}

fn udp_take(rx: &mut RxBatch, s: &UdpBatchSocket, p: Pattern) -> usize {
    let n = rx.recv(s).unwrap_or(0);
    let data = (0..n)
        .filter(|&i| rx.get(i).is_some_and(|(_, d)| d.first() == Some(&DATA)))
        .count();
    p.count(data, n - data)
}

/// The UDP-socket pattern of the RoCE driver: `burst` datagrams per direction in
/// one `sendmmsg` (netio::udp::TxBatch, no GSO), received with `recvmmsg`
/// (RxBatch), both sides busy polling, on 127.0.0.1. p50 half RTT in ns.
fn udp_batch_half_rtt(t: Duration, p: Pattern) -> std::io::Result<f64> {
    let any = std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let mut a = UdpBatchSocket::bind(any)?;
    let mut b = UdpBatchSocket::bind(any)?;
    a.set_gso(false);
    b.set_gso(false);
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut rx = RxBatch::new(64);
        let mut tx = TxBatch::new(64);
        let mut have = 0;
        while !s2.load(Ordering::Relaxed) {
            have += udp_take(&mut rx, &b, p);
            if have >= p.need() {
                have -= p.need();
                udp_queue(&mut tx, aa, p.burst);
                let _ = tx.flush(&b);
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let mut rx = RxBatch::new(64);
    let mut tx = TxBatch::new(64);
    let mut raw = Vec::with_capacity(1 << 16);
    let t0 = Instant::now();
    let c0 = netio::baseline::cycles();
    'outer: while t0.elapsed() < t {
        let s = netio::baseline::cycles();
        let sent_at = Instant::now();
        udp_queue(&mut tx, ba, p.burst);
        tx.flush(&a)?;
        let mut have = 0;
        while have < p.need() {
            let n = udp_take(&mut rx, &a, p);
            have += n;
            if n == 0 {
                if sent_at.elapsed() > Duration::from_millis(200) {
                    continue 'outer;
                }
                std::hint::spin_loop();
            }
        }
        raw.push(netio::baseline::cycles().wrapping_sub(s));
    }
    let secs = t0.elapsed().as_secs_f64();
    let ns_per_cycle = secs * 1e9 / netio::baseline::cycles().wrapping_sub(c0).max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    if raw.is_empty() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    raw.sort_unstable();
    Ok(raw[raw.len() / 2] as f64 * ns_per_cycle / 2.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let burst: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let first = args.next().is_some_and(|s| s == "first");
    let p = Pattern { burst, first };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP xdp_pingpong: needs root (netns, veth, bpf, AF_XDP)");
        return;
    }
    // SAFETY: unshare affects only this (still single-threaded) process; every
    // thread and child started later inherits the new namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        println!(
            "SKIP xdp_pingpong: unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    sh("ip link set lo up");
    sh("ip link add xdp-a type veth peer name xdp-b");
    sh("ip addr add 10.77.0.1/24 dev xdp-a && ip addr add 10.77.0.2/24 dev xdp-b");
    sh("ip link set xdp-a up && ip link set xdp-b up");
    let t = Duration::from_secs_f64(secs);
    let drv = std::env::var("XDP_MODE").is_ok_and(|m| m == "drv");
    let flags = if drv {
        XDP_FLAGS_DRV_MODE
    } else {
        XDP_FLAGS_SKB_MODE
    };
    let x = match xdp_half_rtt(t, p, flags) {
        Ok(r) => r,
        Err(e) => {
            println!("FAIL xdp_pingpong: {e}");
            std::process::exit(1);
        }
    };
    let udp = netio::baseline::udp_half_rtt(t, true).expect("udp baseline");
    let udpb = udp_batch_half_rtt(t, p).expect("udp batch baseline");
    println!(
        "af_xdp ({}) half RTT p50 {:.2} us (p99 {:.2} us, {} frame(s)/kick, waits for {}, {} RTTs, {} lost)",
        if drv { "native" } else { "generic" },
        x.p50_ns / 1e3,
        x.p99_ns / 1e3,
        burst,
        if first { "the first" } else { "all" },
        x.rtts,
        x.lost
    );
    println!(
        "udp    half RTT p50 {:.2} us (busy-polling sockets on lo, same run, 1 datagram)",
        udp / 1e3
    );
    println!(
        "udp    half RTT p50 {:.2} us (sendmmsg/recvmmsg, {} datagram(s)/call, waits for {}, same run)",
        udpb / 1e3,
        burst,
        if first { "the first" } else { "all" }
    );
    println!(
        "ratio af_xdp/udp {:.2}, af_xdp/udp-batch {:.2}",
        x.p50_ns / udp,
        x.p50_ns / udpb
    );
}
