//! Object-store RPC frames (`obj::rpc`): the stream decoder and the engine's
//! connection (`ServerConn`), request and reply bodies, and the client core
//! fed forged replies. Invariants:
//! - no panic; framing does not depend on segmentation (the same frames and the
//!   same verdict at once and in fuzzed chunks);
//! - a body that parses re-emits to a body that parses to the same request or
//!   reply, and a re-encoded request frame decodes to the same header and body;
//! - the client completes only RPCs it started, each exactly once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use obj::rpc::frame::{encode_request, split_body, Decoded, FrameDecoder};
use obj::rpc::{ClientCore, Incoming, Reply, Request, ServerConn, MAX_BODY};
use std::time::{Duration, Instant};

fn frames(stream: &[u8], chunk: usize) -> (Vec<Decoded>, Option<obj::rpc::WireError>) {
    let mut d = FrameDecoder::new(4096);
    let mut out = Vec::new();
    for c in stream.chunks(chunk) {
        d.input(c);
        loop {
            match d.decode() {
                Ok(Some(f)) => out.push(f),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, stream)) = data.split_first() else {
        return;
    };
    let chunk = 1 + usize::from(ctl) * 3;
    let (f1, e1) = frames(stream, stream.len().max(1));
    let (f2, e2) = frames(stream, chunk);
    assert_eq!(
        (&f1, e1),
        (&f2, e2),
        "framing depends on segmentation (chunk {chunk})"
    );

    for f in &f1 {
        let Decoded::Frame { hdr, body } = f else {
            continue;
        };
        let (args, bulk) = split_body(hdr, body);
        if !hdr.response {
            if let Ok(req) = Request::parse(hdr.opcode, args, bulk.len()) {
                assert_eq!(req.opcode(), hdr.opcode);
                let mut a2 = Vec::new();
                req.emit(&mut a2);
                let r2 = Request::parse(hdr.opcode, &a2, bulk.len())
                    .expect("re-parse of an emitted request");
                assert_eq!(r2, req, "request parse -> emit -> parse");
                let mut fr = Vec::new();
                encode_request(&mut fr, hdr.rpc_id, hdr.timeout_ms, &req, &[bulk]);
                let (g, e) = frames(&fr, fr.len());
                assert_eq!(e, None);
                let [Decoded::Frame { hdr: h3, body: b3 }] = &g[..] else {
                    panic!("re-encoded frame: {g:?}")
                };
                assert_eq!(
                    (h3.opcode, h3.rpc_id, h3.bulk_len),
                    (hdr.opcode, hdr.rpc_id, bulk.len() as u32)
                );
                let (a3, bulk3) = split_body(h3, b3);
                assert_eq!(bulk3, bulk);
                assert_eq!(
                    Request::parse(h3.opcode, a3, bulk3.len()).as_ref(),
                    Ok(&req)
                );
            }
        } else if let Ok(rep) = Reply::parse(hdr.opcode, args, bulk.len()) {
            let mut a2 = Vec::new();
            rep.emit(&mut a2);
            let r2 =
                Reply::parse(hdr.opcode, &a2, bulk.len()).expect("re-parse of an emitted reply");
            assert_eq!(r2, rep, "reply parse -> emit -> parse");
        }
    }

    // the engine side of a connection
    let mut s = ServerConn::new();
    s.handle_input(stream);
    let mut n = 0;
    while let Some(inc) = s.poll_incoming() {
        n += 1;
        assert!(
            n <= stream.len() / 32 + 1,
            "more frames than 32-byte headers"
        );
        if let Incoming::Reject { hdr, status } = inc {
            s.reply_error(&hdr, status);
        }
    }
    let _ = s.transmit();

    // the client side: three RPCs in flight, the stream as the engine's replies
    let now = Instant::now();
    let mut c = ClientCore::new();
    let ids: Vec<u64> = (0..3)
        .map(|_| c.start(now, &Request::Ping, &[], Some(Duration::from_secs(1))))
        .collect();
    c.handle_input(stream);
    c.handle_timeout(now + Duration::from_secs(2));
    let mut seen = Vec::new();
    while let Some(done) = c.poll_completion() {
        assert!(
            ids.contains(&done.rpc_id),
            "completion of RPC {} never started",
            done.rpc_id
        );
        assert!(
            !seen.contains(&done.rpc_id),
            "RPC {} completed twice",
            done.rpc_id
        );
        seen.push(done.rpc_id);
    }
    assert_eq!(
        seen.len(),
        ids.len(),
        "every RPC finishes (reply, error or timeout)"
    );
    let _ = MAX_BODY;
});
