//! The perftest-style engine: RDMA WRITE/SEND/READ bandwidth and WRITE/SEND
//! latency between two RC QPs, over the TCP line exchange
//! ([`exchange::perf_line`](crate::exchange::perf_line)) or as an in-process
//! loopback pair ([`loopback`]) for `dpustack bench roce` and the tests.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;

use crate::exchange::{connect_qp, parse_perf_line, perf_line, random_psn, Dest, PerfDest};
use crate::{open_device, Error, ProviderChoice, Result};

/// perftest-like tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PerfTest {
    WriteBw,
    SendBw,
    ReadBw,
    WriteLat,
    SendLat,
}

/// How `perf` drives its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PerfMode {
    Manual,
    Threaded,
    /// `--loopback` only: one thread drives both devices (manual progress).
    Single,
}

impl PerfMode {
    /// The verbs device progress mode of this perf mode.
    pub fn io(self) -> IoMode {
        match self {
            PerfMode::Manual | PerfMode::Single => IoMode::Manual,
            PerfMode::Threaded => IoMode::Threaded,
        }
    }
}

/// Whether `t` is a latency test.
pub fn is_lat(t: PerfTest) -> bool {
    matches!(t, PerfTest::WriteLat | PerfTest::SendLat)
}

/// One perf run's parameters.
#[derive(Debug, Clone, Copy)]
pub struct PerfParams {
    pub test: PerfTest,
    pub size: usize,
    /// Iterations (unless `duration` is given).
    pub iters: Option<u64>,
    pub duration: Option<Duration>,
    /// Outstanding WRs (bandwidth tests).
    pub depth: usize,
    pub mtu: Mtu,
    pub mode: PerfMode,
    /// UDP GSO on the devices (loopback pair).
    pub gso: bool,
    /// Provider of `client`'s / `serve`'s device (the loopback pair is always soft).
    pub provider: ProviderChoice,
}

/// One end of a perf connection.
struct End {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    /// Sends of the test's size go inline (`IBV_SEND_INLINE`, as perftest
    /// for small latency messages): the QP was made with room for them.
    inline: bool,
    /// The peer (for the echoing side of latency tests).
    remote: std::sync::OnceLock<PerfDest>,
}

/// Inline data perftest's latency tests ask for (its `DEF_INLINE_WRITE`):
/// messages up to this size are posted with `IBV_SEND_INLINE`.
const LAT_INLINE: usize = 220;

/// Receives the passive side of send-bw keeps posted: perftest's `rx_depth`
/// (its `DEF_RX_SEND`, 512), at least the sender's window: a receiver that
/// reposts each completion later than the sender's next SEND of a full window
/// answered RNR NAKs.
const RX_DEPTH_SEND_BW: usize = 512;

fn rx_depth(p: &PerfParams) -> usize {
    match p.test {
        PerfTest::SendBw => (p.depth + 8).max(RX_DEPTH_SEND_BW),
        _ => p.depth + 8,
    }
}

fn perf_end(ctx: Context, p: &PerfParams) -> Result<End> {
    let (size, depth) = (p.size, p.depth);
    let pd = ctx.alloc_pd()?;
    // two halves of size.max(8) (send/receive areas); rounded up to 8 so the
    // latency test's last byte lies in a whole 64-bit word
    let mr = pd.reg_mr(
        (size.max(8) * 2).next_multiple_of(8),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let rx = rx_depth(p);
    let cq = ctx.create_cq(depth + rx + 16, None)?;
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    let inline = is_lat(p.test) && size <= LAT_INLINE;
    init.cap = QpCap {
        max_send_wr: depth as u32,
        max_recv_wr: rx as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: if inline { LAT_INLINE as u32 } else { 0 },
    };
    let qp = pd.create_qp(&init)?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    Ok(End {
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
        inline,
        remote: std::sync::OnceLock::new(),
    })
}

impl End {
    fn dest(&self, psn: u32) -> PerfDest {
        PerfDest {
            qpn: self.qp.qp_num(),
            psn,
            rkey: self.mr.rkey(),
            addr: self.mr.addr(),
            gid: Gid::from_ipv4(self.ctx.ip()),
        }
    }
    fn connect(&self, my_psn: u32, rem: &PerfDest, mtu: Mtu) -> Result<()> {
        let d = Dest {
            lid: 0,
            qpn: rem.qpn,
            psn: rem.psn,
            gid: rem.gid,
        };
        let sgid = self.ctx.ip_gid_index() as u8;
        connect_qp(&self.qp, QpType::Rc, 1, my_psn, mtu, &d, sgid, 16)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PerfResult {
    pub test: String,
    pub bytes: usize,
    pub iters: u64,
    pub secs: f64,
    /// Payload bytes per second.
    pub bw: f64,
    pub msg_rate: f64,
    /// One-way latency samples summary (lat tests), ns.
    pub lat: Option<benchkit::LatencySummary>,
    /// The client QP's retransmitted packets and retransmit timeouts.
    pub retransmits: u64,
    pub timeouts: u64,
}

/// One turn of a busy-poll loop. Plain spinning by default, as perftest's
/// loops (no PAUSE: under QEMU TCG a PAUSE leaves the translated code on
/// every turn); `DPUSTACK_PERF_PAUSE=1` puts `std::hint::spin_loop` back for
/// A/B runs (docs/roce.md, figures of the rdma-core provider).
#[inline]
fn relax() {
    static PAUSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *PAUSE.get_or_init(|| std::env::var_os("DPUSTACK_PERF_PAUSE").is_some_and(|v| v == "1")) {
        std::hint::spin_loop();
    }
}

/// A completion's status as a result.
fn check_wc(w: &Wc) -> Result<()> {
    if w.status != WcStatus::Success {
        return Err(Error::Run(format!(
            "completion error: {} (wr_id {})",
            w.status.as_str(),
            w.wr_id
        )));
    }
    Ok(())
}

/// The byte at `off` of `mr`, read through an atomic load of its 64-bit word
/// (the peer's RDMA WRITE lands there while we spin).
fn byte_at(mr: &Mr, off: usize) -> u8 {
    mr.load_u64(off & !7)
        .map(|v| v.to_ne_bytes()[off & 7])
        .unwrap_or(0)
}

/// One poll; every completion it returns must be a success.
fn poll_checked(cq: &Cq, wc: &mut [Wc]) -> Result<usize> {
    let n = cq.poll(wc)?;
    for w in &wc[..n] {
        check_wc(w)?;
    }
    Ok(n)
}

/// Polls until completions arrive; `idle` runs before every poll (the other
/// end's step in `--mode single`: what we just sent is usually in its socket
/// already, so it goes first and our poll then finds its answer).
fn poll_one(
    cq: &Cq,
    wc: &mut [Wc],
    deadline: Instant,
    idle: &mut dyn FnMut() -> Result<()>,
) -> Result<usize> {
    let mut k = 0u32;
    loop {
        k = k.wrapping_add(1);
        idle()?;
        let n = poll_checked(cq, wc)?;
        if n > 0 {
            return Ok(n);
        }
        // the clock is not free (an HPET read in the guest): look now and then
        if k.is_multiple_of(4096) && Instant::now() > deadline {
            return Err(Error::Run("timed out waiting for completions".into()));
        }
        relax();
    }
}

/// WRs per post_send call in the bandwidth tests.
const POST_LIST: usize = 16;

/// The measuring side.
fn perf_client(
    e: &End,
    rem: &PerfDest,
    p: PerfParams,
    idle: &mut dyn FnMut() -> Result<()>,
) -> Result<PerfResult> {
    let size = p.size;
    let sge = [e.mr.sge(0, size as u32)];
    let rsge = [e.mr.sge(size.max(8), size as u32)];
    let mut wc = [Wc::default(); 64];
    let limit = |done: u64, t0: Instant| match (p.iters, p.duration) {
        (_, Some(d)) => t0.elapsed() < d,
        (Some(n), None) => done < n,
        (None, None) => done < 1000,
    };
    let hard =
        Instant::now() + p.duration.unwrap_or(Duration::from_secs(60)) + Duration::from_secs(30);
    if is_lat(p.test) {
        // samples in CPU cycles (as perftest), converted with the rate measured
        // against the wall clock over the whole run: reading the clock costs a
        // syscall and an HPET access in the guest, the TSC costs nothing
        let mut raw: Vec<u64> = Vec::with_capacity(p.iters.unwrap_or(1 << 16) as usize);
        let mut samples = benchkit::Samples::with_capacity(p.iters.unwrap_or(1000) as usize);
        let t0 = Instant::now();
        let c0 = netio::baseline::cycles();
        let mut done = 0u64;
        if p.test == PerfTest::WriteLat {
            if size == 0 {
                return Err(Error::Run(
                    "write-lat needs a size of at least 1 byte".into(),
                ));
            }
            // perftest's ib_write_lat: a plain RDMA WRITE (inline when small)
            // whose last byte carries the iteration number; the peer spins on
            // that byte of its memory and writes back the same way; each side
            // also waits for its own WRITE's completion. No receive WQE, no
            // receive completion (an RDMA WRITE with immediate would need both).
            let m = size.max(8);
            // a kernel device writes our memory without our polling:
            // ib_write_lat's order exactly — our WRITE's completion first, then
            // a spin on the echo byte alone. A soft device keeps the mixed loop:
            // its CQ polls are what keeps its poller thread from napping
            // (strict order there: 2 B one-way latency 4.9 -> 288 us)
            let strict = e.ctx.soft().is_none();
            let mut flags = SendFlags::SIGNALED;
            if e.inline {
                flags |= SendFlags::INLINE;
            }
            while limit(done, t0) {
                let want = (done + 1) as u8; // wraps as perftest's (char) counter
                let t = netio::baseline::cycles();
                e.mr.write(size - 1, &[want]);
                let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
                w.send_flags = flags;
                w.wr = WrDetail::Rdma {
                    remote_addr: rem.addr,
                    rkey: rem.rkey,
                };
                e.qp.post_send(&[w])?;
                let (mut echoed, mut completed) = (false, false);
                let mut k = 0u32;
                while !(echoed && completed) {
                    if !echoed && (!strict || completed) && byte_at(&e.mr, m + size - 1) == want {
                        echoed = true;
                        continue;
                    }
                    if strict && completed {
                        k = k.wrapping_add(1);
                        if k.is_multiple_of(1 << 20) && Instant::now() > hard {
                            return Err(Error::Run("timed out waiting for the echo".into()));
                        }
                        relax();
                        continue;
                    }
                    idle()?;
                    let n = e.cq.poll(&mut wc)?;
                    for w in &wc[..n] {
                        check_wc(w)?;
                        completed = true;
                    }
                    k = k.wrapping_add(1);
                    if k.is_multiple_of(4096) && Instant::now() > hard {
                        return Err(Error::Run("timed out waiting for the echo".into()));
                    }
                    relax();
                }
                raw.push(netio::baseline::cycles().wrapping_sub(t));
                done += 1;
            }
        } else {
            // SEND latency (perftest's ib_send_lat): a receive posted before
            // each SEND, the echo's receive completion ends the iteration
            e.qp.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &rsge,
            }])?;
            while limit(done, t0) {
                let t = netio::baseline::cycles();
                let mut w = SendWr::new(1, WrOpcode::Send, &sge);
                w.send_flags = SendFlags::SIGNALED;
                e.qp.post_send(&[w])?;
                let mut got_recv = false;
                let mut got_send = false;
                while !(got_recv && got_send) {
                    let n = poll_one(&e.cq, &mut wc, hard, idle)?;
                    for w in &wc[..n] {
                        if w.wr_id == 0 {
                            got_recv = true;
                        } else {
                            got_send = true;
                        }
                    }
                }
                raw.push(netio::baseline::cycles().wrapping_sub(t));
                e.qp.post_recv(&[RecvWr {
                    wr_id: 0,
                    sg_list: &rsge,
                }])?;
                done += 1;
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let ns_per_cycle = secs * 1e9 / netio::baseline::cycles().wrapping_sub(c0).max(1) as f64;
        for c in raw {
            samples.push(Duration::from_nanos((c as f64 * ns_per_cycle / 2.0) as u64));
        }
        return Ok(PerfResult {
            test: format!("{:?}", p.test),
            bytes: size,
            iters: done,
            secs,
            bw: (done as f64 * size as f64) / secs,
            msg_rate: done as f64 / secs,
            lat: samples.summary(),
            retransmits: 0,
            timeouts: 0,
        }
        .with_counters(&e.qp));
    }
    let op = match p.test {
        PerfTest::WriteBw => WrOpcode::RdmaWrite,
        PerfTest::SendBw => WrOpcode::Send,
        _ => WrOpcode::RdmaRead,
    };
    let depth = if op == WrOpcode::RdmaRead {
        p.depth.min(16)
    } else {
        p.depth
    };
    let (mut posted, mut done) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut stop_posting = false;
    // a list is posted only whole (perftest: `scnt - ccnt + post_list <=
    // tx_depth`): refilling the window one or two WRs at a time as completions
    // trickled in cost a sendmmsg per WR or two (half the bandwidth in the
    // TCG guest, where a syscall costs tens of µs)
    let list_len = POST_LIST.min(depth) as u64;
    while done < posted || !stop_posting {
        // post lists of up to POST_LIST WRs (perftest's -l): one doorbell, one
        // device lock and one sendmmsg for the lot
        let mut list = [SendWr::new(0, op, &sge); POST_LIST];
        let mut k = 0;
        // one clock read per list, not per WR (the clock is an HPET read in the guest)
        let room = !stop_posting && (posted - done) + list_len <= depth as u64;
        if room && p.duration.is_some_and(|d| t0.elapsed() >= d) {
            stop_posting = true;
        }
        while room && !stop_posting && (k as u64) < list_len {
            if p.duration.is_none() && !limit(posted + k as u64, t0) {
                stop_posting = true;
                break;
            }
            list[k] = SendWr::new(posted + k as u64, op, &sge);
            list[k].wr = WrDetail::Rdma {
                remote_addr: rem.addr,
                rkey: rem.rkey,
            };
            k += 1;
        }
        if k > 0 {
            e.qp.post_send(&list[..k])?;
            posted += k as u64;
        }
        if done < posted {
            // perftest's loop: while the window has room for a list, one poll
            // that does not wait, then post again; wait only when it has not
            // (or posting is done). Waiting after every list kept one list in
            // flight, not `depth`: WRITE 4 KiB went in lock step, each side
            // idle half the time (issue 19's profile).
            if stop_posting || (posted - done) + list_len > depth as u64 {
                done += poll_one(&e.cq, &mut wc, hard, idle)? as u64;
            } else {
                idle()?;
                done += poll_checked(&e.cq, &mut wc)? as u64;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(PerfResult {
        test: format!("{:?}", p.test),
        bytes: size,
        iters: done,
        secs,
        bw: (done as f64 * size as f64) / secs,
        msg_rate: done as f64 / secs,
        lat: None,
        retransmits: 0,
        timeouts: 0,
    }
    .with_counters(&e.qp))
}

impl PerfResult {
    fn with_counters(mut self, qp: &Qp) -> Self {
        if let Some(Ok(c)) = qp.context().soft().map(|s| s.qp_counters(qp.qp_num())) {
            self.retransmits = c.retransmits;
            self.timeouts = c.timeouts;
        }
        self
    }
}

/// The passive side: receives for SEND tests, echoes for latency tests; one
/// `step` polls its CQ once (in manual mode that also progresses its device).
struct Server<'a> {
    e: &'a End,
    test: PerfTest,
    rsge: [Sge; 1],
    sge: [Sge; 1],
    rem: Option<PerfDest>,
    size: usize,
    wc: [Wc; 64],
    /// write-lat: the iteration number the next WRITE's last byte carries.
    expect: u8,
    /// write-lat on a kernel device (memory written without our polling): wait
    /// as ib_write_lat does, on the byte alone, then on our echo's completion
    /// alone.
    strict: bool,
    /// write-lat, strict: our echo's completion is still to come.
    echo_pending: bool,
}

impl<'a> Server<'a> {
    fn new(e: &'a End, p: PerfParams) -> Result<Self> {
        let size = p.size;
        let s = Server {
            e,
            test: p.test,
            rsge: [e.mr.sge(0, size as u32)],
            sge: [e.mr.sge(size.max(8), size as u32)],
            rem: e.remote.get().copied(),
            size,
            wc: [Wc::default(); 64],
            expect: 1,
            strict: e.ctx.soft().is_none(),
            echo_pending: false,
        };
        let (n, base) = match p.test {
            PerfTest::SendBw => (rx_depth(&p), 0),
            PerfTest::SendLat => (4, 100),
            _ => (0, 0),
        };
        for i in 0..n {
            e.qp.post_recv(&[RecvWr {
                wr_id: (base + i) as u64,
                sg_list: &s.rsge,
            }])?;
        }
        if is_lat(p.test) && s.rem.is_none() {
            return Err(Error::Run("no remote".into()));
        }
        Ok(s)
    }

    /// Polls once and reacts; returns the completions (and echoes) handled.
    fn step(&mut self) -> Result<usize> {
        let e = self.e;
        if self.test == PerfTest::WriteLat {
            // perftest's ib_write_lat, passive side: the client's WRITE shows in
            // memory, so the byte is checked before the CQ is polled (an echo
            // must not wait behind a poll); our completions only say our echoes
            // went out
            if self.strict && self.echo_pending {
                let n = e.cq.poll(&mut self.wc)?;
                for w in &self.wc[..n] {
                    if w.status != WcStatus::Success {
                        return Err(Error::Run(format!("server: {}", w.status.as_str())));
                    }
                }
                self.echo_pending = n == 0;
                return Ok(n);
            }
            let mut echoed = 0;
            if self.size > 0 && byte_at(&e.mr, self.size - 1) == self.expect {
                let rem = self.rem.ok_or_else(|| Error::Run("no remote".into()))?;
                let m = self.size.max(8);
                e.mr.write(m + self.size - 1, &[self.expect]);
                self.expect = self.expect.wrapping_add(1);
                let mut s = SendWr::new(1, WrOpcode::RdmaWrite, &self.sge);
                s.send_flags = SendFlags::SIGNALED;
                if e.inline {
                    s.send_flags |= SendFlags::INLINE;
                }
                s.wr = WrDetail::Rdma {
                    remote_addr: rem.addr + m as u64,
                    rkey: rem.rkey,
                };
                e.qp.post_send(&[s])?;
                echoed = 1;
                if self.strict {
                    self.echo_pending = true;
                    return Ok(1);
                }
            }
            if self.strict {
                return Ok(echoed);
            }
            let n = e.cq.poll(&mut self.wc)?;
            for w in &self.wc[..n] {
                if w.status != WcStatus::Success {
                    return Err(Error::Run(format!("server: {}", w.status.as_str())));
                }
            }
            return Ok(n + echoed);
        }
        let n = e.cq.poll(&mut self.wc)?;
        if n == 0 {
            return Ok(0);
        }
        let mut list = [RecvWr {
            wr_id: 0,
            sg_list: &self.rsge,
        }; 64];
        for (i, w) in self.wc[..n].iter().enumerate() {
            if w.status != WcStatus::Success {
                return Err(Error::Run(format!("server: {}", w.status.as_str())));
            }
            list[i].wr_id = w.wr_id;
        }
        match self.test {
            PerfTest::SendBw => {
                e.qp.post_recv(&list[..n])?;
            }
            PerfTest::SendLat => {
                let rem = self.rem.ok_or_else(|| Error::Run("no remote".into()))?;
                for w in &list[..n] {
                    if w.wr_id >= 100 {
                        e.qp.post_recv(&[*w])?;
                        let mut s = SendWr::new(1, WrOpcode::Send, &self.sge);
                        s.send_flags = SendFlags::empty();
                        s.wr = WrDetail::Rdma {
                            remote_addr: rem.addr + self.size.max(8) as u64,
                            rkey: rem.rkey,
                        };
                        e.qp.post_send(&[s])?;
                    }
                }
            }
            _ => {}
        }
        Ok(n)
    }
}

/// The passive side on its own thread; returns when `stop()` says so.
fn perf_server(e: &End, p: PerfParams, stop: &dyn Fn() -> bool) -> Result<()> {
    let mut s = Server::new(e, p)?;
    // a kernel device (rdma-core) needs no progress from us either
    let idle_server = p.mode == PerfMode::Threaded || e.ctx.soft().is_none();
    if idle_server && matches!(p.test, PerfTest::WriteBw | PerfTest::ReadBw) {
        // the device's poller thread (or the kernel) does all the work
        while !stop() {
            std::thread::sleep(Duration::from_millis(5));
        }
        return Ok(());
    }
    // busy poll the CQ (in manual mode this progresses the device; an empty
    // poll yields the CPU now and then)
    while !stop() {
        if s.step()? == 0 {
            relax();
        }
    }
    Ok(())
}

/// Both ends in this process on two loopback devices (127.0.0.1 / .2, else
/// 127.0.33.1 / .2, unless `ips` names them).
pub fn loopback(p: PerfParams, ips: Option<(Ipv4Addr, Ipv4Addr)>) -> Result<PerfResult> {
    loopback_counted(p, ips).map(|r| r.0)
}

/// A soft device's counters (zeros for another provider).
fn dev_counters(ctx: &Context) -> verbs::soft::Counters {
    ctx.soft().map(|d| d.counters()).unwrap_or_default()
}

/// [`loopback`], also returning both devices' counters (client, server) read
/// after the run: what really crossed the wire, independent of the client's count.
pub fn loopback_counted(
    p: PerfParams,
    ips: Option<(Ipv4Addr, Ipv4Addr)>,
) -> Result<(PerfResult, verbs::soft::Counters, verbs::soft::Counters)> {
    let candidates = match ips {
        Some(x) => vec![x],
        None => vec![
            (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2)),
            (Ipv4Addr::new(127, 0, 33, 1), Ipv4Addr::new(127, 0, 33, 2)),
        ],
    };
    let mut last = None;
    for (ia, ib) in candidates {
        let open = |ip| {
            let mut o = DeviceOptions::new(ip);
            o.mode = p.mode.io();
            o.gso &= p.gso;
            o.open()
        };
        match (open(ia), open(ib)) {
            (Ok(ca), Ok(cb)) => {
                let a = perf_end(ca, &p)?;
                let b = perf_end(cb, &p)?;
                let (pa, pb) = (random_psn(), random_psn() ^ 0x5a5a5a);
                let (da, db) = (a.dest(pa), b.dest(pb));
                a.connect(pa, &db, p.mtu)?;
                b.connect(pb, &da, p.mtu)?;
                let _ = b.remote.set(da);
                if p.mode == PerfMode::Single {
                    // one thread drives both devices: the server steps whenever
                    // the client's poll comes back empty
                    let mut srv = Server::new(&b, p)?;
                    let r = perf_client(&a, &db, p, &mut || srv.step().map(|_| ()))?;
                    return Ok((r, dev_counters(&a.ctx), dev_counters(&b.ctx)));
                }
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let s2 = stop.clone();
                let server = std::thread::spawn(move || {
                    perf_server(&b, p, &|| s2.load(std::sync::atomic::Ordering::SeqCst))?;
                    Ok::<_, Error>(dev_counters(&b.ctx))
                });
                let r = perf_client(&a, &db, p, &mut || Ok(()));
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                let cb = server
                    .join()
                    .map_err(|_| Error::Run("server thread panicked".into()))??;
                return Ok((r?, dev_counters(&a.ctx), cb));
            }
            (Err(e), _) | (_, Err(e)) => last = Some(e),
        }
    }
    Err(Error::Run(format!(
        "cannot open two loopback devices: {last:?}"
    )))
}

/// The measuring side over the TCP line exchange with a `serve` peer at `host:port`.
pub fn client(dev: Option<&str>, host: &str, port: u16, p: PerfParams) -> Result<PerfResult> {
    let ctx = open_device(dev, p.mode.io(), p.provider)?;
    let e = perf_end(ctx, &p)?;
    let my_psn = random_psn();
    let me = e.dest(my_psn);
    let s = TcpStream::connect((host, port)).map_err(|source| Error::Exchange {
        what: format!("connect {host}:{port}"),
        source,
    })?;
    let mut w = s.try_clone()?;
    w.write_all(perf_line(&me).as_bytes())?;
    let mut r = BufReader::new(s);
    let mut l = String::new();
    r.read_line(&mut l)?;
    let rem = parse_perf_line(&l)?;
    e.connect(my_psn, &rem, p.mtu)?;
    w.write_all(b"go\n")?;
    let res = perf_client(&e, &rem, p, &mut || Ok(()))?;
    w.write_all(b"done\n")?;
    Ok(res)
}

/// The passive side: waits for one `client` on TCP `port` (saying so on `out`)
/// and serves it until it is done.
pub fn serve(dev: Option<&str>, port: u16, p: PerfParams, out: &mut dyn Write) -> Result<()> {
    let ctx = open_device(dev, p.mode.io(), p.provider)?;
    let e = perf_end(ctx, &p)?;
    let my_psn = random_psn();
    let me = e.dest(my_psn);
    let l = TcpListener::bind(("0.0.0.0", port))?;
    writeln!(out, "waiting for a perf client on port {port}")?;
    let (s, _) = l.accept()?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let rem = parse_perf_line(&line)?;
    e.connect(my_psn, &rem, p.mtu)?;
    let _ = e.remote.set(rem);
    w.write_all(perf_line(&me).as_bytes())?;
    line.clear();
    r.read_line(&mut line)?; // "go"
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = r.read_line(&mut l);
        s2.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    perf_server(&e, p, &|| stop.load(std::sync::atomic::Ordering::SeqCst))
}
