//! OpenFlow 1.3 messages into the `openflow` crate's decoder and into the switch's
//! sans-IO channel: `switch::openflow::Conn` (framing, HELLO negotiation, ECHO,
//! errors) and `switch::openflow_switch::OfSwitch::handle` (FLOW_MOD, PACKET_OUT,
//! multiparts, roles, ... applied to a real `FlowTable` + `Datapath`). No socket:
//! this is the layer `openflow_io` drives with the bytes it reads.
//!
//! Input: `[ctl, cut0, cut1, cut2, stream...]`. ctl bit 0: a valid HELLO (1.3) is
//! put in front of the stream (most inputs then reach the switch); bit 1: a small
//! stream is fed one byte at a time instead of at the three cut points (`cutN` /
//! 256 of the stream's length).
//!
//! Invariants beyond "no panic":
//! - decode -> encode -> decode equality for every framed message that decodes (and
//!   for FLOW / AGGREGATE multipart request bodies);
//! - every reply the switch emits decodes, as OpenFlow 1.3 (the one exception is
//!   the HELLO_FAILED error of a failed negotiation, sent in the peer's version as
//!   OVS does, right before the close);
//! - segmentation independence: the stream fed at once and fed in chunks give the
//!   same replies, the same PACKET_OUT frames, the same close and the same table;
//! - counters: `rx_bytes` = bytes fed and `rx_msgs` = the messages a separate
//!   framing finds (unless closed), `tx_msgs` = the messages in the output,
//!   `backlog_closes` = 1 exactly when the backlog bound closed it; every
//!   ECHO_REQUEST after negotiation is answered with its xid and payload;
//! - bounded output: at most 1 MiB of replies per message, and the output backlog
//!   never stays above the connection's bound (`Conn::max_backlog`, 1 MiB here)
//!   on an open connection: `Conn::next_event` closes it after the message that
//!   passed it;
//! - a table-miss packet through the fuzzed table raises PACKET_INs that decode.
#![no_main]
use flow::dp::Datapath;
use flow::ofctl::{Action, Match};
use flow::FlowTable;
use libfuzzer_sys::fuzz_target;
use openflow::consts::{err, t, OFP10_VERSION, OFP13_VERSION};
use openflow::header::{self, Header};
use openflow::msg::{self, Message};
use openflow::multipart::FlowStatsRequest;
use switch::openflow::{Conn, Event};
use switch::openflow_switch::{OfSwitch, PortInfo};

const NOW: u64 = 5_000;
const PER_MSG_OUT: usize = 1 << 20;
/// The output bound of the fuzzed connection (smaller than the default 16 MiB:
/// reached by inputs of many stats requests, and runs stay fast).
const BACKLOG: usize = 1 << 20;

#[derive(Debug, PartialEq)]
struct Outcome {
    out: Vec<u8>,
    frames: Vec<(u32, Vec<u8>)>,
    async_msgs: Vec<Vec<u8>>,
    packet_ins: usize,
    closed: Option<String>,
    rules: Vec<(u32, u16, Match, Vec<Action>)>,
    tx_msgs: u64,
    backlog_closes: u64,
}

thread_local! {
    /// The datapath the message runs use: `Datapath::new` zeroes an 8192-entry
    /// EMC (more than half the time of a run when made twice per input). No packet
    /// goes through this one (PACKET_OUT translates through the table), so it never
    /// holds a megaflow and what `handle` does to it (`push_stats` of nothing,
    /// `table_changed`) leaves no state that one input could pass to the next.
    static DP: std::cell::RefCell<Datapath> = std::cell::RefCell::new(Datapath::new());
}

fn switch() -> (OfSwitch, FlowTable) {
    let mut sw = OfSwitch::new(0x42);
    for p in 1..=3u32 {
        sw.ports.insert(
            p,
            PortInfo {
                name: format!("p{p}"),
                hw_addr: [2, 0, 0, 0, 0, p as u8],
                ..PortInfo::default()
            },
        );
    }
    let mut table = FlowTable::new();
    table.ports = Some([1, 2, 3].into_iter().collect());
    (sw, table)
}

/// Feeds `stream` in the chunks `cuts` make; handles every message. The output is
/// taken at the end only (a socket that is not written to), so the backlog bound
/// closes at the same message however the stream is cut.
fn run(stream: &[u8], cuts: &[usize]) -> (Outcome, FlowTable, Conn) {
    DP.with(|dp| run_on(stream, cuts, &mut dp.borrow_mut()))
}

fn run_on(stream: &[u8], cuts: &[usize], dp: &mut Datapath) -> (Outcome, FlowTable, Conn) {
    assert_eq!(dp.n_flows(), 0, "the shared datapath got a megaflow");
    let (mut sw, mut table) = switch();
    let mut conn = Conn::new(NOW, 0);
    conn.max_backlog = BACKLOG;
    let mut o = Outcome {
        out: Vec::new(),
        frames: Vec::new(),
        async_msgs: Vec::new(),
        packet_ins: 0,
        closed: None,
        rules: Vec::new(),
        tx_msgs: 0,
        backlog_closes: 0,
    };
    let mut fed = 0u64;
    let mut prev = 0;
    'feed: for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
        let chunk = &stream[prev..c];
        prev = c;
        if conn.is_closed() {
            break;
        }
        fed += chunk.len() as u64;
        conn.feed(chunk, NOW);
        while let Some(ev) = conn.next_event() {
            match ev {
                Event::Message(m) => {
                    assert!(conn.is_up(), "a message for the switch before HELLO");
                    assert_eq!(m.first(), Some(&OFP13_VERSION), "non-1.3 message passed up");
                    let before = conn.backlog();
                    let fx = sw.handle(&mut conn, &m, &mut table, dp, NOW);
                    let grew = conn.backlog() - before;
                    assert!(
                        grew <= PER_MSG_OUT,
                        "{grew} bytes of replies to one message"
                    );
                    assert!(
                        fx.outputs.len() <= m.len(),
                        "more PACKET_OUT frames than bytes"
                    );
                    o.frames.extend(fx.outputs);
                    o.async_msgs.extend(fx.async_msgs);
                    o.packet_ins += fx.packet_ins.len();
                }
                Event::Close(why) => {
                    assert!(o.closed.is_none(), "closed twice");
                    o.closed = Some(why);
                    break 'feed;
                }
            }
        }
        assert!(
            conn.is_closed() || conn.backlog() <= BACKLOG,
            "backlog above the bound on an open connection"
        );
    }
    o.out = conn.take_output();
    let st = conn.stats();
    assert!(st.rx_bytes <= fed, "rx_bytes {} > fed {fed}", st.rx_bytes);
    if o.closed.is_none() {
        assert_eq!(st.rx_bytes, fed, "rx_bytes");
        let whole = frames(stream).len() as u64;
        assert_eq!(st.rx_msgs, whole, "rx_msgs vs framed messages");
    }
    o.tx_msgs = st.tx_msgs;
    o.backlog_closes = st.backlog_closes;
    let mut rules: Vec<(u32, u16, Match, Vec<Action>)> = table
        .rules
        .iter()
        .map(|(&id, r)| (id, r.priority, r.m, r.actions.clone()))
        .collect();
    rules.sort_unstable_by_key(|r| r.0);
    o.rules = rules;
    (o, table, conn)
}

/// Splits a byte stream into whole messages (what is left over is ignored).
fn frames(b: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    let mut off = 0;
    while let Ok(Some(n)) = header::frame_len(&b[off..]) {
        v.push(&b[off..off + n]);
        off += n;
    }
    v
}

/// decode -> encode -> decode equality.
fn round_trip(m: &[u8]) {
    let Ok((h, msg)) = msg::parse(m) else { return };
    let mut again = Vec::new();
    if !msg.emit(h.version, h.xid, &mut again) {
        return; // did not fit 65535 bytes (only possible after canonicalisation)
    }
    let (h2, msg2) = msg::parse(&again).expect("re-encoded message decodes");
    assert_eq!(
        (h2.version, h2.msg_type, h2.xid),
        (h.version, h.msg_type, h.xid)
    );
    assert_eq!(msg2, msg, "decode -> encode -> decode");
    if let Message::MultipartRequest(mp) = &msg {
        if let Ok(f) = FlowStatsRequest::parse(mp.body) {
            let mut b = Vec::new();
            f.emit(&mut b);
            assert_eq!(FlowStatsRequest::parse(&b).expect("re-encoded body"), f);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (ctl, cut, fuzz) = (data[0], &data[1..4], &data[4..]);
    let mut stream = Vec::with_capacity(fuzz.len() + 16);
    if ctl & 1 == 1 {
        Message::Hello {
            bitmap: Some(1 << OFP13_VERSION),
        }
        .emit(OFP13_VERSION, 1, &mut stream);
    }
    stream.extend_from_slice(fuzz);

    // The decoder alone.
    let input_frames = frames(&stream);
    for m in &input_frames {
        round_trip(m);
    }

    // The channel, at once and in chunks.
    let (a, _, _) = run(&stream, &[]);
    let cuts: Vec<usize> = if ctl & 2 == 2 && stream.len() <= 96 {
        (1..stream.len()).collect()
    } else {
        let mut c: Vec<usize> = cut
            .iter()
            .map(|&x| stream.len() * usize::from(x) / 256)
            .collect();
        c.sort_unstable();
        c
    };
    let (b, table, _) = run(&stream, &cuts);
    if a != b {
        // Say which part differs, and where (the outcomes are large).
        let first = a.out.iter().zip(&b.out).position(|(x, y)| x != y);
        panic!(
            "the channel depends on segmentation (cuts {cuts:?}): closed {:?} / {:?}; rules {} / {}; \
             frames {} / {}; async {} / {}; tx_msgs {} / {}; output {} / {} bytes, first difference at {first:?}",
            a.closed, b.closed, a.rules.len(), b.rules.len(), a.frames.len(), b.frames.len(),
            a.async_msgs.len(), b.async_msgs.len(), a.tx_msgs, b.tx_msgs, a.out.len(), b.out.len()
        );
    }

    // Counters (rx: in `run`).
    assert_eq!(
        a.backlog_closes,
        u64::from(a.closed.as_deref().is_some_and(|w| w.contains("backlog"))),
        "backlog_closes"
    );
    let replies = frames(&a.out);
    assert_eq!(
        replies.iter().map(|r| r.len()).sum::<usize>(),
        a.out.len(),
        "output is whole messages"
    );
    // tx_msgs counts our HELLO too.
    assert_eq!(a.tx_msgs, replies.len() as u64, "tx_msgs vs messages sent");

    // Every reply decodes, as 1.3 (but a failed negotiation's HELLO_FAILED).
    let mut echo_replies = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        let last = i + 1 == replies.len();
        if matches!(r[0], 2 | 3) {
            // HELLO_FAILED in the peer's 1.1/1.2 (the decoder reads 1.0 and 1.3 only):
            // an ERROR of type HELLO_FAILED, last before the close.
            assert!(
                last && a.closed.is_some()
                    && r[1] == t::ERROR
                    && r[8..10] == err::HELLO_FAILED.to_be_bytes(),
                "reply {i} in version {}: {r:?}",
                r[0]
            );
            continue;
        }
        let (h, m) = msg::parse(r).unwrap_or_else(|e| panic!("reply {i} does not decode: {e}"));
        if h.version != OFP13_VERSION {
            // An error answering a 1.0-framed request is sent in 1.0; HELLO_FAILED
            // in the peer's version, last before the close.
            let ok = match m {
                Message::Error { err_type, .. } => {
                    h.version == OFP10_VERSION
                        || (err_type == err::HELLO_FAILED && last && a.closed.is_some())
                }
                _ => false,
            };
            assert!(ok, "reply {i} in version {}: {m:?}", h.version);
        }
        if let Message::EchoReply(d) = m {
            echo_replies.push((h.xid, d.to_vec()));
        }
    }
    for m in &a.async_msgs {
        msg::parse(m).expect("asynchronous message decodes");
    }
    // ECHO_REQUESTs after the HELLO are answered, in order.
    if a.closed.is_none() && ctl & 1 == 1 {
        let echoes: Vec<(u32, Vec<u8>)> = input_frames
            .iter()
            .filter(|m| m[0] == OFP13_VERSION && m[1] == t::ECHO_REQUEST)
            .map(|m| {
                let h = Header::parse(m).unwrap();
                (h.xid, m[header::HEADER_LEN..].to_vec())
            })
            .collect();
        assert_eq!(echo_replies, echoes, "echo replies");
    }

    // A packet through the fuzzed table: PACKET_INs decode and carry the frame
    // (a datapath of its own; none is needed for an empty table).
    if table.is_empty() {
        return;
    }
    let mut dp = Datapath::new();
    let mut frame = vec![
        0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0,
        10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0, 80, 0, 8, 0, 0,
    ];
    let ex = dp.receive_execute(&table, 1, &mut frame, NOW);
    for tc in &ex.to_controller {
        let pin = OfSwitch::packet_in(tc, 1, 128);
        match msg::parse(&pin) {
            Ok((h, Message::PacketIn(p))) => {
                assert_eq!(h.version, OFP13_VERSION);
                assert!(p.data.len() <= tc.frame.len());
                assert_eq!(p.data, &tc.frame[..p.data.len()]);
            }
            other => panic!("PACKET_IN does not decode: {other:?}"),
        }
    }
});
