//! NVMe/TCP PDUs into the host's sans-IO connection (`nvmf::tcp::HostConn`): a
//! real target's stream (ICResp, R2T, C2HData, CapsuleResp; with or without
//! digests) with the fuzz bytes XORed onto it, after the host submitted four
//! commands. Invariants:
//! - no panic; every byte is counted (`bytes_rx`);
//! - segmentation does not matter (same events at once and cut at four fuzzed
//!   points, after the ICResp fed alone);
//! - completions only for submitted CIDs, each at most once, with exactly the
//!   read length submitted; `in_flight` = submitted - completed until the end;
//! - nothing is delivered after `Terminated`.
//!
//! Input: `[ctl (bit 0: digests), 4 x u16 cut points, bytes XORed on the stream]`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvme::Cqe;
use nvmf::tcp::{HostConn, HostEvent};
use std::sync::OnceLock;

#[path = "nvmf_session.rs"]
mod session;
use session::CMDS;

fn sessions() -> &'static [session::Session; 2] {
    static S: OnceLock<[session::Session; 2]> = OnceLock::new();
    S.get_or_init(|| [session::session(false), session::session(true)])
}

/// ICResp is one 128-byte PDU: fed first, then the commands are submitted.
const ICRESP_LEN: usize = 128;

/// What the host reported, for the segmentation comparison (the whole CQE and
/// the data, compared with `==`; no string formatting per event).
#[derive(Debug, PartialEq)]
enum Ev {
    Established,
    Completion {
        cqe: Cqe,
        data: Vec<u8>,
        ddgst_error: bool,
    },
    Terminated(String),
}

fn run(dig: bool, stream: &[u8], cuts: &[usize]) -> (Vec<Ev>, Vec<u8>) {
    let mut h = HostConn::new(session::host_params(dig));
    let mut evs = Vec::new();
    let mut done = [false; CMDS.len()];
    let mut submitted = false;
    let mut terminated = false;
    let (first, rest) = stream.split_at(ICRESP_LEN.min(stream.len()));
    let mut tx = h.poll_transmit().to_vec();
    h.advance_tx(tx.len());
    // The cut points are offsets in the whole stream; the ICResp goes first alone.
    let cuts: Vec<usize> = cuts
        .iter()
        .filter_map(|&c| c.checked_sub(first.len()))
        .collect();
    for (i, c) in std::iter::once(first)
        .chain(session::chunks(rest, &cuts))
        .enumerate()
    {
        h.handle_bytes(c);
        if i == 0 && h.is_established() {
            session::submit_all(&mut h);
            submitted = true;
        }
        while let Some(ev) = h.poll_event() {
            assert!(!terminated, "event after Terminated: {ev:?}");
            match &ev {
                HostEvent::Established => {}
                HostEvent::Completion { cqe, data, .. } => {
                    let cid = cqe.cid();
                    let k = CMDS.iter().position(|c| c.0 == cid);
                    let k = k.unwrap_or_else(|| panic!("completion for CID {cid} never submitted"));
                    assert!(submitted, "completion before any submit");
                    assert!(!done[k], "CID {cid} completed twice");
                    done[k] = true;
                    assert_eq!(
                        data.len(),
                        CMDS[k].3 as usize,
                        "read data length of CID {cid}"
                    );
                }
                HostEvent::Terminated { .. } => terminated = true,
            }
            evs.push(match ev {
                HostEvent::Established => Ev::Established,
                HostEvent::Completion {
                    cqe,
                    data,
                    ddgst_error,
                } => Ev::Completion {
                    cqe,
                    data,
                    ddgst_error,
                },
                ev @ HostEvent::Terminated { .. } => Ev::Terminated(format!("{ev:?}")),
            });
        }
        if submitted && !terminated {
            let left = done.iter().filter(|d| !**d).count();
            assert_eq!(h.in_flight(), left, "in_flight vs completions");
        }
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        tx.extend_from_slice(&b);
    }
    assert_eq!(h.stats().bytes_rx, stream.len() as u64, "bytes_rx");
    (evs, tx)
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
    let dig = ctl & 1 == 1;
    let s = &sessions()[usize::from(dig)];
    let stream = session::xor_onto(&s.target_tx, fuzz);
    let cuts = session::cuts(head, stream.len());
    let a = run(dig, &stream, &[]);
    let b = run(dig, &stream, &cuts);
    assert_eq!(a, b, "host depends on segmentation (cuts {cuts:?})");
});
