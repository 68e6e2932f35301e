//! The receive side of the soft driver: a socket on `ip:4791`, batched receive
//! (`recvmmsg`) into the engine, timers, then transmit ([`super::transmit`]);
//! one poller thread per device, or manual progress from the application
//! (`Device::progress`, and `Cq::poll` in manual mode / while busy polling).
//! Buffers are allocated once per device; the steady state allocates nothing per
//! packet (checked by `tests/alloc.rs`).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::clock::{clock, coarse_ns, mono_ns};
use super::device::{Device, Inner};

/// One receive + timers + transmit round. Returns datagrams received.
fn round(shared: &Device, rx: &mut netio::udp::RxBatch, tx: bool) -> crate::Result<usize> {
    let Some(sock) = shared.sock.as_ref() else {
        return Ok(0);
    };
    if let Some(port) = super::xdp::port_for(shared.ip) {
        return Ok(super::xdp::recv(shared.ip, port, |pkts| {
            let now = clock();
            let mut g = shared.lock();
            for (ip, data) in pkts.iter() {
                g.engine.handle_datagram(now, ip.src, Some(ip), data);
            }
            finish_round(shared, &mut g, now, tx);
        }));
    }
    let n = rx.recv(sock)?;
    if n == 0 {
        return Ok(0); // timers are the caller's business when nothing arrived
    }
    let now = Instant::now();
    let mut g = shared.lock();
    for i in 0..n {
        if let Some((src, data)) = rx.get(i) {
            g.engine.handle_datagram(now, src.ip().octets(), None, data);
        }
    }
    finish_round(shared, &mut g, now, tx);
    Ok(n)
}

/// The end of a receive round that got packets: fire due timers, then send what
/// became ready (`tx`) or leave it queued for the caller's next post, with the
/// round's time for it to reuse.
fn finish_round(shared: &Device, g: &mut Inner, now: Instant, tx: bool) {
    if g.engine.poll_timeout().is_some_and(|t| t <= now) {
        g.engine.handle_timeout(now);
    }
    if tx {
        shared.after(g);
    } else {
        g.rx_now = Some((now, coarse_ns()));
        shared.after_no_tx(g);
    }
}

/// Manual progress: drain the socket, fire timers, send.
pub(crate) fn progress(shared: &Device) -> crate::Result<usize> {
    drain(shared, true, true)
}

/// Manual progress from `Cq::poll`: as [`progress`], but what the received
/// packets make ready to send is left queued (`Device::tx_deferred`) for the
/// caller to send with its next post, or at its next empty poll.
/// Timers are only looked at when `timers` (a caller polling in a loop passes
/// it every few calls: reading the clock costs an HPET access in the guest).
pub(crate) fn progress_deferred(shared: &Device, timers: bool) -> crate::Result<usize> {
    drain(shared, false, timers)
}

/// Receive rounds until the socket is drained (`tx`: send what they make ready
/// at once); without traffic, fire due timers when `timers`.
fn drain(shared: &Device, tx: bool, timers: bool) -> crate::Result<usize> {
    let mut guard = shared.lock_rx();
    let Some(rx) = guard.batch.as_mut() else {
        return Ok(0);
    };
    let mut total = 0;
    loop {
        let n = round(shared, rx, tx)?;
        total += n;
        if n < netio::udp::MAX_BATCH {
            break;
        }
    }
    if total == 0 && timers {
        // timers still need firing without traffic
        let now = Instant::now();
        let mut g = shared.lock();
        if g.engine.poll_timeout().is_some_and(|t| t <= now) {
            g.engine.handle_timeout(now);
            shared.after(&mut g);
        }
    }
    Ok(total)
}

/// Opportunistic progress from an application thread that is busy polling an
/// empty CQ: if nobody is receiving right now, drain the socket here instead of
/// waiting for the poller thread to wake up (polling mode, as SPDK/DPDK do).
/// What the packets make ready to send (ACKs, READ responses) is deferred, as in
/// manual mode, to leave with the application's next post in one `sendmmsg` (an
/// ACK and the reply it prompted), or at its next `Cq::poll` ([`flush_deferred`]),
/// or, if the application stops polling, by the poller thread when the busy-poll
/// grace ends.
pub(crate) fn try_progress(shared: &Device) {
    shared
        .busy_poll_at
        .store(mono_ns(), std::sync::atomic::Ordering::Relaxed);
    let Some(mut g) = shared.try_lock_rx() else {
        return;
    };
    if let Some(rx) = g.batch.as_mut() {
        while let Ok(n) = round(shared, rx, false) {
            if n < netio::udp::MAX_BATCH {
                break;
            }
        }
    }
}

/// Sends what a busy-poll receive left queued, if anything (threaded mode: a
/// deferral lasts until the application's next post or poll).
pub(crate) fn flush_deferred(shared: &Device) {
    if shared
        .tx_deferred
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        let mut g = shared.lock();
        shared.after(&mut g); // clears the flag
    }
}

/// The poller's turn without a receive: fire due timers, and send what they or
/// a busy poller's deferred receive made ready (if it stopped polling).
fn service_timers(s: &Device) {
    let now = Instant::now();
    let mut g = s.lock();
    service_timers_locked(s, &mut g, now);
}

/// [`service_timers`] with the engine held.
fn service_timers_locked(s: &Device, g: &mut super::device::Inner, now: Instant) {
    let due = g.engine.poll_timeout().is_some_and(|t| t <= now);
    if due {
        g.engine.handle_timeout(now);
    }
    if due || s.tx_deferred.load(std::sync::atomic::Ordering::Relaxed) {
        s.after(g);
    }
}

/// While an application thread busy-polls (and so receives itself), the poller
/// thread stays out of its way for this long after the last busy poll.
const BUSY_POLL_GRACE_NS: u64 = 200_000;

/// Timer turns in a row on which the poller finds the engine held before it
/// waits for it.
const MAX_TIMER_MISSES: u32 = 4;

/// How long the poller keeps polling an idle socket before blocking in poll().
const POLLER_SPIN: Duration = Duration::from_micros(10);

/// How long the poller of a device on the AF_XDP datapath sleeps between receive rounds.
const XDP_POLLER_NAP: Duration = Duration::from_micros(50);

/// Starts the device's poller thread. It holds only a weak reference and exits
/// when the last handle of the device is dropped.
pub(crate) fn spawn_poller(shared: &Arc<Device>) -> std::io::Result<()> {
    let weak: Weak<Device> = Arc::downgrade(shared);
    let sock = shared
        .sock
        .clone()
        .ok_or_else(|| std::io::Error::other("no socket"))?;
    // the AF_XDP port has no fd to sleep on here: its poller wakes every
    // XDP_POLLER_NAP to receive (applications that busy-poll receive at once)
    let xdp = super::xdp::port_for(shared.ip).is_some();
    let h = std::thread::Builder::new()
        .name(format!("roce-{}", shared.name))
        .spawn(move || {
            let mut timer_misses = 0u32;
            loop {
                let (timeout, since) = {
                    let Some(s) = weak.upgrade() else { return };
                    let now = Instant::now();
                    let t = s.lock().engine.poll_timeout();
                    let since = mono_ns()
                        .saturating_sub(s.busy_poll_at.load(std::sync::atomic::Ordering::Relaxed));
                    let t = t.map_or(Duration::from_millis(50), |t| {
                        t.saturating_duration_since(now)
                            .min(Duration::from_millis(50))
                    });
                    (t, since)
                };
                if since < BUSY_POLL_GRACE_NS {
                    // an application thread busy-polls and receives itself: stay off
                    // the socket (a poll() woken by every arriving packet took a core
                    // from the busy poller on these 2-core machines: issue 19's
                    // profile, 0.4 wake-ups and ~8 µs of poller CPU per message of
                    // the 2-byte latency test); timers remain ours
                    std::thread::sleep(
                        timeout.min(Duration::from_nanos(BUSY_POLL_GRACE_NS - since)),
                    );
                    let Some(s) = weak.upgrade() else { return };
                    s.poller_wakeups
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // the busy poller holds the engine for its posts and receives
                    // (a sendmmsg under it): waiting for it put this thread to
                    // sleep on the futex and cost the poller a wake-up syscall on
                    // every unlock (issue 19's write-bw profile: 11 % of the CPU).
                    // A holder runs the engine and sends what it makes ready; due
                    // timers wait for a turn on which the engine is free, or for
                    // the MAX_TIMER_MISSES-th turn in a row, which waits for it.
                    match s.try_lock() {
                        Some(mut g) => {
                            timer_misses = 0;
                            service_timers_locked(&s, &mut g, Instant::now());
                        }
                        None if timer_misses + 1 >= MAX_TIMER_MISSES => {
                            timer_misses = 0;
                            service_timers(&s);
                        }
                        None => timer_misses += 1,
                    }
                    continue;
                }
                if xdp {
                    std::thread::sleep(timeout.min(XDP_POLLER_NAP));
                } else if !sock.wait_readable(Some(timeout)).unwrap_or(false) {
                    let Some(s) = weak.upgrade() else { return };
                    service_timers(&s);
                    continue;
                }
                let Some(s) = weak.upgrade() else { return };
                s.poller_wakeups
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let since = mono_ns()
                    .saturating_sub(s.busy_poll_at.load(std::sync::atomic::Ordering::Relaxed));
                if since < BUSY_POLL_GRACE_NS {
                    // a busy poller started while we waited: it receives (next turn sleeps)
                    continue;
                }
                // the receive batch is shared with busy pollers (`try_progress`)
                let mut g = s.lock_rx();
                let Some(rx) = g.batch.as_mut() else { return };
                // drain, then keep polling the socket for a short while: during a
                // stream this saves a wake-up (and a context switch) per datagram
                let mut last = Instant::now();
                loop {
                    match round(&s, rx, true) {
                        Ok(0) => {
                            if last.elapsed() > POLLER_SPIN {
                                break;
                            }
                            std::hint::spin_loop();
                        }
                        Ok(_) => last = Instant::now(),
                        Err(e) => {
                            tracing::warn!("roce rx: {e}");
                            break;
                        }
                    }
                }
                let now = Instant::now();
                let mut eg = s.lock();
                if eg.engine.poll_timeout().is_some_and(|t| t <= now) {
                    eg.engine.handle_timeout(now);
                    s.after(&mut eg);
                }
            }
        })?;
    *shared.poller.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    Ok(())
}
