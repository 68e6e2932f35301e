//! The OpenFlow channel's connection state machine, sans-IO: bytes and the time in,
//! bytes to send, messages for the switch and "close" out. It owns framing, HELLO
//! version negotiation (OpenFlow 1.3 only; a peer offering only 1.0 gets
//! OFPET_HELLO_FAILED in 1.0 framing, as OVS answers), ECHO (answers requests, and
//! probes an idle peer: an ECHO_REQUEST after `probe_ms` of silence, the connection
//! is dropped after another `probe_ms`, OVS's inactivity probe), xids of the
//! messages it originates, the controller role with the switch-wide generation id
//! ([`Roles`]), and malformed input (an impossible length closes only this
//! connection; a message that parses badly gets an OFPT_ERROR).
//!
//! What the messages mean to the table is `openflow_switch`'s; the sockets are
//! `openflow_io`'s.

use openflow::consts::{err, role, t, OFP10_VERSION, OFP13_VERSION};
use openflow::header::{self, Header};
use openflow::msg::{self, Message};

/// The version bitmap we offer: OpenFlow 1.3 only.
pub const OUR_BITMAP: u32 = 1 << OFP13_VERSION;

/// Events for the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole OpenFlow 1.3 message (header included) the state machine does not
    /// handle itself.
    Message(Vec<u8>),
    /// The connection must be closed (why); its output may still be flushed.
    Close(String),
}

/// The controller's role on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Equal,
    Master,
    Slave,
}

impl Role {
    pub fn wire(self) -> u32 {
        match self {
            Role::Equal => role::EQUAL,
            Role::Master => role::MASTER,
            Role::Slave => role::SLAVE,
        }
    }
}

/// The switch-wide role state: the last generation id a master/slave request set
/// (OpenFlow 1.3 §6.3.6: a request with an older one is refused as stale).
#[derive(Debug, Clone, Copy, Default)]
pub struct Roles {
    pub generation_id: Option<u64>,
}

impl Roles {
    /// Checks and records the generation id of a MASTER/SLAVE request.
    pub fn check(&mut self, gen: u64) -> bool {
        if let Some(g) = self.generation_id {
            if (gen.wrapping_sub(g) as i64) < 0 {
                return false;
            }
        }
        self.generation_id = Some(gen);
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Our HELLO is sent; waiting for the peer's.
    HelloSent,
    /// OpenFlow 1.3 agreed.
    Up,
    Closed,
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Bytes taken by [`Conn::receive`] (until the connection closed).
    pub rx_bytes: u64,
    /// Whole messages framed from them.
    pub rx_msgs: u64,
    /// Messages queued for the peer (our HELLO, replies, asynchronous ones).
    pub tx_msgs: u64,
    /// Asynchronous messages (PACKET_IN, FLOW_REMOVED, PORT_STATUS) not queued
    /// because the output backlog was at [`Conn::async_limit`].
    pub async_dropped: u64,
    /// Of those, PACKET_INs.
    pub packet_ins_dropped: u64,
    /// 1 when the connection was closed for an output backlog above
    /// [`Conn::max_backlog`].
    pub backlog_closes: u64,
}

/// One OpenFlow connection (either direction of set-up: the switch always speaks
/// first with its HELLO).
#[derive(Debug)]
pub struct Conn {
    state: State,
    rx: Vec<u8>,
    /// Where the next message starts in `rx`.
    rx_off: usize,
    tx: Vec<u8>,
    stats: ConnStats,
    /// Output backlog (bytes) past which a peer that keeps sending requests but
    /// does not read is closed ([`MAX_TX_BACKLOG`] by default).
    pub max_backlog: usize,
    /// Output backlog (bytes) at which asynchronous messages are dropped (counted in
    /// [`ConnStats::async_dropped`]; [`ASYNC_BACKLOG`] by default): a controller that
    /// reads slowly loses packet-ins instead of growing the switch's memory (OVS
    /// drops packet-ins past its rconn queue limit the same way).
    pub async_limit: usize,
    next_xid: u32,
    last_rx: u64,
    probe_sent: Option<u64>,
    /// Inactivity probe interval (ms; 0: off).
    pub probe_ms: u64,
    pub role: Role,
    /// Bytes of a table-miss / controller packet sent in a PACKET_IN (SET_CONFIG).
    pub miss_send_len: u16,
    /// SET_CONFIG flags (fragment handling; kept and reported back).
    pub config_flags: u16,
}

/// The largest amount of unsent output a connection may hold; past it the peer is
/// not reading, and the connection is closed (OVS: rconn's backlog limit).
pub const MAX_TX_BACKLOG: usize = 16 << 20;

/// Default [`Conn::async_limit`]: 1 MiB of unsent output.
pub const ASYNC_BACKLOG: usize = 1 << 20;

impl Conn {
    /// A new connection at `now` (ms): our HELLO is queued.
    pub fn new(now: u64, probe_ms: u64) -> Conn {
        let mut c = Conn {
            state: State::HelloSent,
            rx: Vec::new(),
            rx_off: 0,
            tx: Vec::new(),
            stats: ConnStats::default(),
            max_backlog: MAX_TX_BACKLOG,
            async_limit: ASYNC_BACKLOG,
            next_xid: 1,
            last_rx: now,
            probe_sent: None,
            probe_ms,
            role: Role::Equal,
            miss_send_len: 128,
            config_flags: 0,
        };
        let x = c.xid();
        Message::Hello {
            bitmap: Some(OUR_BITMAP),
        }
        .emit(OFP13_VERSION, x, &mut c.tx);
        c.stats.tx_msgs += 1;
        c
    }

    /// The connection's counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Whether negotiation finished (OpenFlow 1.3 agreed).
    pub fn is_up(&self) -> bool {
        self.state == State::Up
    }

    /// Marks the connection closed (the socket ended or failed).
    pub fn set_closed(&mut self) {
        self.state = State::Closed;
    }

    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// A fresh xid for a message we originate.
    pub fn xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1).max(1);
        x
    }

    /// Queues an encoded message.
    pub fn send(&mut self, bytes: &[u8]) {
        if self.state != State::Closed {
            self.tx.extend_from_slice(bytes);
            self.stats.tx_msgs += 1;
        }
    }

    /// Queues an encoded asynchronous message (PACKET_IN, FLOW_REMOVED,
    /// PORT_STATUS) unless the output backlog would pass [`Conn::async_limit`]:
    /// then it is dropped and counted. Returns whether it was queued.
    pub fn send_async(&mut self, bytes: &[u8]) -> bool {
        if self.state == State::Closed {
            return false;
        }
        if self.tx.len() + bytes.len() > self.async_limit {
            self.stats.async_dropped += 1;
            if bytes.get(1) == Some(&t::PACKET_IN) {
                self.stats.packet_ins_dropped += 1;
            }
            return false;
        }
        self.send(bytes);
        true
    }

    /// Queues `m` (OpenFlow 1.3) with `xid`.
    pub fn send_msg(&mut self, m: &Message<'_>, xid: u32) {
        if self.state != State::Closed {
            m.emit(OFP13_VERSION, xid, &mut self.tx);
            self.stats.tx_msgs += 1;
        }
    }

    /// Queues an OFPT_ERROR answering the message `req` (its first 64 bytes ride along).
    pub fn send_error(&mut self, req: &[u8], err_type: u16, code: u16) {
        let xid = Header::parse(req).map(|h| h.xid).unwrap_or(0);
        let version = req.first().copied().unwrap_or(OFP13_VERSION);
        let v = if version == OFP10_VERSION {
            OFP10_VERSION
        } else {
            OFP13_VERSION
        };
        if self.state != State::Closed {
            Message::Error {
                err_type,
                code,
                data: req,
            }
            .emit(v, xid, &mut self.tx);
            self.stats.tx_msgs += 1;
        }
    }

    /// Output to write (taken: the caller writes what it can and gives the rest
    /// back with [`Conn::unsent`]).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.tx)
    }

    /// Puts back output the socket did not take, in front of anything queued since.
    pub fn unsent(&mut self, mut rest: Vec<u8>) {
        rest.extend_from_slice(&self.tx);
        self.tx = rest;
    }

    /// Bytes waiting to be sent.
    pub fn backlog(&self) -> usize {
        self.tx.len()
    }

    fn close(&mut self, why: impl Into<String>, ev: &mut Vec<Event>) {
        if self.state != State::Closed {
            self.state = State::Closed;
            ev.push(Event::Close(why.into()));
        }
    }

    /// Takes received bytes at `now`; [`Conn::next_event`] then gives what they
    /// hold, one message at a time.
    pub fn feed(&mut self, bytes: &[u8], now: u64) {
        if self.state == State::Closed {
            return;
        }
        self.last_rx = now;
        self.probe_sent = None;
        self.stats.rx_bytes += bytes.len() as u64;
        self.rx.drain(..self.rx_off);
        self.rx_off = 0;
        self.rx.extend_from_slice(bytes);
    }

    /// The next event of the bytes fed: a message for the switch, or a close
    /// (unframeable input, a failed negotiation, the output backlog past
    /// [`Conn::max_backlog`]). What the connection answers itself (ECHO, errors)
    /// is queued as the message comes, so when the caller handles each message
    /// before asking for the next, replies leave in the order of the requests
    /// however the stream was cut (a BARRIER_REPLY is not overtaken by the ECHO
    /// reply of a later request). None: nothing whole is left.
    pub fn next_event(&mut self) -> Option<Event> {
        let mut ev = Vec::new();
        while self.state != State::Closed && ev.is_empty() {
            if let Some(e) = self.overloaded() {
                return Some(e);
            }
            let n = match header::frame_len(&self.rx[self.rx_off..]) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    self.close(format!("unframeable input: {e}"), &mut ev);
                    break;
                }
            };
            let m = self.rx[self.rx_off..self.rx_off + n].to_vec();
            self.rx_off += n;
            self.stats.rx_msgs += 1;
            self.one(&m, &mut ev);
        }
        ev.pop()
    }

    /// Feeds received bytes at `now`; returns every event they hold (the
    /// messages for the switch and a [`Event::Close`] when the connection must
    /// go). A caller that answers messages should use [`Conn::feed`] +
    /// [`Conn::next_event`] instead: here the connection's own replies to the
    /// later messages are queued before the caller's to the earlier ones.
    pub fn receive(&mut self, bytes: &[u8], now: u64) -> Vec<Event> {
        self.feed(bytes, now);
        let mut ev = Vec::new();
        while let Some(e) = self.next_event() {
            ev.push(e);
        }
        ev
    }

    /// Closes the connection when its output backlog passed [`Conn::max_backlog`]
    /// (a peer that sends requests but does not read their replies); the caller
    /// asks after each message it handled, so one read of many requests cannot
    /// queue more than one message's replies past the bound.
    pub fn overloaded(&mut self) -> Option<Event> {
        if self.tx.len() <= self.max_backlog || self.state == State::Closed {
            return None;
        }
        self.stats.backlog_closes += 1;
        let mut ev = Vec::new();
        self.close(
            format!(
                "peer does not read (output backlog {} > {} bytes)",
                self.tx.len(),
                self.max_backlog
            ),
            &mut ev,
        );
        ev.pop()
    }

    fn one(&mut self, m: &[u8], ev: &mut Vec<Event>) {
        let version = m[0];
        let ty = m[1];
        if self.state == State::HelloSent {
            if ty != t::HELLO {
                self.send_error(m, err::BAD_REQUEST, err::BRC_BAD_TYPE);
                self.close("message before HELLO", ev);
                return;
            }
            let bitmap = match msg::parse(m) {
                Ok((_, Message::Hello { bitmap })) => bitmap,
                _ => None,
            };
            // With a bitmap: the highest common version; without: min(ours, theirs).
            let ok = match bitmap {
                Some(b) => b & OUR_BITMAP != 0,
                None => version >= OFP13_VERSION,
            };
            if ok {
                self.state = State::Up;
            } else {
                // OVS answers in the peer's version when it is lower; 0 is no
                // version at all: 1.0 then (an ERROR of version 0 decodes nowhere).
                let v = version.clamp(OFP10_VERSION, OFP13_VERSION);
                let text = format!(
                    "We support version 0x{OFP13_VERSION:02x}, you support version 0x{version:02x} and lower, no common versions"
                );
                Message::Error {
                    err_type: err::HELLO_FAILED,
                    code: err::HFC_INCOMPATIBLE,
                    data: text.as_bytes(),
                }
                .emit(
                    v,
                    Header::parse(m).map(|h| h.xid).unwrap_or(0),
                    &mut self.tx,
                );
                self.stats.tx_msgs += 1;
                self.close("no common OpenFlow version (we speak 1.3 only)", ev);
            }
            return;
        }
        if version != OFP13_VERSION {
            self.send_error(m, err::BAD_REQUEST, err::BRC_BAD_VERSION);
            return;
        }
        match ty {
            t::HELLO => {}
            t::ECHO_REQUEST => {
                let xid = Header::parse(m).map(|h| h.xid).unwrap_or(0);
                Message::EchoReply(&m[header::HEADER_LEN..]).emit(OFP13_VERSION, xid, &mut self.tx);
                self.stats.tx_msgs += 1;
            }
            t::ECHO_REPLY => {}
            t::ERROR => {
                if let Ok((_, Message::Error { err_type, code, .. })) = msg::parse(m) {
                    tracing::info!("openflow peer sent error type {err_type} code {code}");
                }
            }
            _ => ev.push(Event::Message(m.to_vec())),
        }
    }

    /// Timers at `now`: the inactivity probe. Returns a close event when the peer
    /// stayed silent for two probe intervals.
    pub fn poll(&mut self, now: u64) -> Option<Event> {
        if self.probe_ms == 0 || self.state == State::Closed {
            return None;
        }
        match self.probe_sent {
            None if now >= self.last_rx + self.probe_ms => {
                if self.state == State::Up {
                    let x = self.xid();
                    Message::EchoRequest(&[]).emit(OFP13_VERSION, x, &mut self.tx);
                    self.stats.tx_msgs += 1;
                }
                self.probe_sent = Some(now);
                None
            }
            Some(s) if now >= s + self.probe_ms => {
                let mut ev = Vec::new();
                self.close(
                    format!(
                        "no response to inactivity probe after {} s",
                        (now - self.last_rx) / 1000
                    ),
                    &mut ev,
                );
                ev.pop()
            }
            _ => None,
        }
    }

    /// When [`Conn::poll`] next has something to do (ms; None: never).
    pub fn next_deadline(&self) -> Option<u64> {
        if self.probe_ms == 0 || self.state == State::Closed {
            return None;
        }
        Some(match self.probe_sent {
            None => self.last_rx + self.probe_ms,
            Some(s) => s + self.probe_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(v: u8, bitmap: Option<u32>) -> Vec<u8> {
        Message::Hello { bitmap }.to_vec(v, 9)
    }

    fn msgs(b: &[u8]) -> Vec<(u8, u8)> {
        let mut v = Vec::new();
        let mut o = 0;
        while o < b.len() {
            let n = header::frame_len(&b[o..]).unwrap().unwrap();
            v.push((b[o], b[o + 1]));
            o += n;
        }
        v
    }

    #[test]
    fn negotiation_echo_and_split_input() {
        let mut c = Conn::new(0, 5000);
        assert_eq!(msgs(&c.take_output()), [(4, t::HELLO)]);
        // HELLO and an ECHO_REQUEST, fed one byte at a time.
        let mut input = hello(4, Some(0x12));
        input.extend(Message::EchoRequest(b"hi").to_vec(4, 33));
        input.extend(Message::BarrierRequest.to_vec(4, 34));
        let mut ev = Vec::new();
        for b in &input {
            ev.extend(c.receive(&[*b], 1));
        }
        assert!(c.is_up());
        assert_eq!(ev, [Event::Message(Message::BarrierRequest.to_vec(4, 34))]);
        let out = c.take_output();
        let (h, m) = msg::parse(&out).unwrap();
        assert_eq!((h.xid, m), (33, Message::EchoReply(b"hi")));
    }

    #[test]
    fn version_mismatch_and_garbage() {
        // A 1.0-only peer: HELLO_FAILED in 1.0 framing, then close.
        let mut c = Conn::new(0, 0);
        c.take_output();
        let ev = c.receive(&hello(1, None), 1);
        assert!(matches!(ev[..], [Event::Close(_)]));
        let out = c.take_output();
        assert_eq!((out[0], out[1]), (1, t::ERROR));
        assert_eq!(&out[8..12], &[0, 0, 0, 0]);
        // A peer with bitmap 1.0|1.3 is fine.
        let mut c = Conn::new(0, 0);
        assert!(c.receive(&hello(6, Some(0x12)), 1).is_empty() && c.is_up());
        // A length below 8 closes only this connection.
        let ev = c.receive(&[4, 0, 0, 4, 0, 0, 0, 0], 2);
        assert!(matches!(ev[..], [Event::Close(_)]));
        assert!(c.is_closed());
        // A message before HELLO: error + close.
        let mut c = Conn::new(0, 0);
        c.take_output();
        let ev = c.receive(&Message::BarrierRequest.to_vec(4, 5), 1);
        assert!(matches!(ev[..], [Event::Close(_)]));
        assert_eq!(msgs(&c.take_output()), [(4, t::ERROR)]);
    }

    #[test]
    fn hello_of_version_0_fails_in_1_0_framing() {
        // Found by the openflow_msg fuzz target: the HELLO_FAILED went out with
        // version 0, which no peer decodes.
        let mut c = Conn::new(0, 0);
        c.take_output();
        let ev = c.receive(&hello(0, None), 1);
        assert!(matches!(ev[..], [Event::Close(_)]));
        let out = c.take_output();
        let (h, m) = msg::parse(&out).unwrap();
        assert_eq!(h.version, OFP10_VERSION);
        assert!(
            matches!(
                m,
                Message::Error {
                    err_type: err::HELLO_FAILED,
                    ..
                }
            ),
            "{m:?}"
        );
    }

    #[test]
    fn inactivity_probe_on_injected_clock() {
        let mut c = Conn::new(0, 5000);
        c.receive(&hello(4, None), 0);
        c.take_output();
        assert_eq!(c.next_deadline(), Some(5000));
        assert_eq!(c.poll(4999), None);
        assert!(c.take_output().is_empty());
        assert_eq!(c.poll(5000), None);
        assert_eq!(msgs(&c.take_output()), [(4, t::ECHO_REQUEST)]);
        // The reply keeps it alive.
        c.receive(&Message::EchoReply(&[]).to_vec(4, 2), 6000);
        assert_eq!(c.poll(9999), None);
        assert_eq!(c.poll(11000), None);
        assert_eq!(msgs(&c.take_output()), [(4, t::ECHO_REQUEST)]);
        // Silence for another interval: closed.
        assert!(matches!(c.poll(16000), Some(Event::Close(_))));
        assert!(c.is_closed());
    }

    #[test]
    fn async_messages_past_the_bound_are_dropped_and_counted() {
        let mut c = Conn::new(0, 0);
        c.receive(&hello(4, None), 0);
        c.async_limit = 1000;
        let pin = Message::PacketIn(msg::PacketIn {
            buffer_id: u32::MAX,
            total_len: 300,
            reason: 0,
            table_id: 0,
            cookie: 0,
            matches: vec![],
            data: &[7; 300],
        })
        .to_vec(4, 0);
        let queued = (0..10).filter(|_| c.send_async(&pin)).count();
        assert_eq!(queued, (1000 - 16) / pin.len(), "queued up to the bound");
        let st = c.stats();
        assert_eq!(
            (st.async_dropped, st.packet_ins_dropped),
            (10 - queued as u64, 10 - queued as u64)
        );
        assert!(c.backlog() <= 1000);
        // Written out: room again.
        c.take_output();
        assert!(c.send_async(&pin));
        assert!(!c.is_closed());
        // A FLOW_REMOVED is async too, not a packet-in.
        c.async_limit = 0;
        assert!(!c.send_async(&Message::BarrierReply.to_vec(4, 0)));
        assert_eq!(c.stats().async_dropped, c.stats().packet_ins_dropped + 1);
    }

    #[test]
    fn requests_whose_replies_are_not_read_close_past_the_bound() {
        let mut c = Conn::new(0, 0);
        c.max_backlog = 10_000;
        c.receive(&hello(4, None), 0);
        let echo = Message::EchoRequest(&[1; 3000]).to_vec(4, 5);
        let mut ev = Vec::new();
        for _ in 0..3 {
            ev.extend(c.receive(&echo, 1));
        }
        assert!(ev.is_empty() && !c.is_closed(), "{ev:?}");
        let ev = c.receive(&echo, 1);
        assert!(
            matches!(&ev[..], [Event::Close(w)] if w.contains("backlog")),
            "{ev:?}"
        );
        assert_eq!(c.stats().backlog_closes, 1);
        // The caller's check after a message it handled: nothing more once closed.
        assert_eq!(c.overloaded(), None);
        let mut c = Conn::new(0, 0);
        c.max_backlog = 100;
        c.send(&[0; 101]);
        assert!(matches!(c.overloaded(), Some(Event::Close(_))));
        assert_eq!(c.stats().backlog_closes, 1);
    }

    #[test]
    fn generation_ids() {
        let mut r = Roles::default();
        assert!(r.check(5));
        assert!(r.check(5));
        assert!(r.check(6));
        assert!(!r.check(4));
        // Wrap-around: u64::MAX is "before" 1 after 1 was seen? No: 1 - MAX = 2 > 0.
        let mut r = Roles::default();
        assert!(r.check(u64::MAX));
        assert!(r.check(1));
        assert!(!r.check(u64::MAX - 1));
    }
}
