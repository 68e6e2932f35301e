//! NVMe/TCP PDUs into the target's sans-IO connection (`nvmf::tcp::TargetConn`):
//! a real host's stream (ICReq, capsules, H2CData; with or without digests)
//! with the fuzz bytes XORed onto it. Invariants:
//! - no panic; every byte is counted (`bytes_rx`);
//! - segmentation does not matter: the stream fed at once and fed in chunks cut
//!   at four fuzzed points give the same events and the same transmitted bytes;
//!
//! Input: `[ctl (bit 0: digests), 4 x u16 cut points, bytes XORed on the stream]`.
//! - bounded allocation: a command's data and its C2H length never exceed MDTS;
//! - after `Terminated` no command is delivered.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvmf::tcp::{TargetConn, TargetEvent};
use std::sync::OnceLock;

#[path = "nvmf_session.rs"]
mod session;

fn sessions() -> &'static [session::Session; 2] {
    static S: OnceLock<[session::Session; 2]> = OnceLock::new();
    S.get_or_init(|| [session::session(false), session::session(true)])
}

#[derive(Debug, PartialEq)]
enum Ev {
    Established,
    Command {
        cid: u16,
        data: Vec<u8>,
        c2h_len: u32,
        error: bool,
    },
    Terminated(String),
}

fn run(stream: &[u8], cuts: &[usize]) -> (Vec<Ev>, Vec<u8>, TargetConn) {
    let p = session::target_params();
    let mut t = TargetConn::new(p);
    let mut evs = Vec::new();
    let mut tx = Vec::new();
    let mut terminated = false;
    for c in session::chunks(stream, cuts) {
        t.handle_bytes(c);
        while let Some(ev) = t.poll_event() {
            evs.push(match ev {
                TargetEvent::Established => Ev::Established,
                TargetEvent::Command(req) => {
                    assert!(!terminated, "command after Terminated");
                    assert!(
                        req.data.len() as u64 <= u64::from(p.max_xfer),
                        "data beyond MDTS"
                    );
                    assert!(req.c2h_len <= p.max_xfer, "c2h_len beyond MDTS");
                    Ev::Command {
                        cid: req.cid(),
                        data: req.data.to_vec(),
                        c2h_len: req.c2h_len,
                        error: req.error.is_some(),
                    }
                }
                TargetEvent::Terminated { fes, by_peer } => {
                    terminated = true;
                    Ev::Terminated(format!("{fes:?} {by_peer}"))
                }
            });
        }
        tx.extend_from_slice(&t.drain_tx());
    }
    assert_eq!(t.stats().bytes_rx, stream.len() as u64, "bytes_rx");
    (evs, tx, t)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let head = 2 * session::CUTS;
    if rest.len() < head {
        return;
    }
    let (head, fuzz) = rest.split_at(head);
    let s = &sessions()[usize::from(ctl & 1)];
    let stream = session::xor_onto(&s.host_tx, fuzz);
    let cuts = session::cuts(head, stream.len());
    let (ev1, tx1, _) = run(&stream, &[]);
    let (ev2, tx2, mut t) = run(&stream, &cuts);
    assert_eq!(ev1, ev2, "events depend on segmentation (cuts {cuts:?})");
    assert_eq!(tx1, tx2, "transmit depends on segmentation (cuts {cuts:?})");
    // complete whatever was delivered: completions must not panic either
    for e in ev2 {
        if let Ev::Command {
            cid,
            c2h_len,
            error,
            ..
        } = e
        {
            let status = if error { 0x04 } else { 0 };
            t.complete(
                &session::cqe(cid, status),
                bdev::IoBuf::from(vec![0u8; c2h_len as usize]),
            );
        }
    }
    let _ = t.drain_tx();
});
