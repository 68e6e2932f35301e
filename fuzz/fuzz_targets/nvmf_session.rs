//! A canonical NVMe/TCP session (shared by the two nvmf fuzz targets): a host
//! and a target joined in memory run ICReq/ICResp and four commands (a read,
//! an in-capsule write, a write by R2T + H2CData PDUs, a read in several
//! C2HData PDUs). What each side sent becomes the other side's fuzzed input: the
//! fuzz bytes are XORed onto it, so an all-zero input replays the valid session
//! and every mutation is a corruption of a real stream.
use nvme::{Cqe, Sqe};
use nvmf::tcp::{HostConn, HostEvent, HostParams, TargetConn, TargetEvent, TargetParams};

/// (cid, opcode, write length, read length)
pub const CMDS: [(u16, u8, usize, u32); 4] = [
    (0, 0x02, 0, 512),
    (1, 0x01, 100, 0),
    (2, 0x01, 5_000, 0),
    (3, 0x02, 0, 3_000),
];

/// Small PDUs so that the session stays short (fast runs: ~5.6 KB from the host,
/// ~3.9 KB from the target) yet has several H2CData (4096 is the least MAXH2CDATA
/// a host takes) and C2HData PDUs per command.
pub fn target_params() -> TargetParams {
    TargetParams {
        maxh2cdata: 4096,
        c2h_chunk: 1024,
        ..TargetParams::default()
    }
}

/// Number of cut points of the chunked replay.
pub const CUTS: usize = 4;

/// The chunked replay's cut points: `CUTS` big-endian u16 offsets (taken modulo
/// the stream's length + 1, sorted) from the input's head. A few fuzzed cuts
/// instead of one-byte chunks: libFuzzer places them where they matter (inside a
/// header, a digest, between two PDUs) and a run costs two replays, not one
/// `handle_bytes` call per byte.
pub fn cuts(head: &[u8], len: usize) -> Vec<usize> {
    let mut c: Vec<usize> = head
        .chunks_exact(2)
        .take(CUTS)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])) % (len + 1))
        .collect();
    c.sort_unstable();
    c
}

/// The chunks of `stream` the sorted cut points `cuts` make (empty ones too).
pub fn chunks<'a>(stream: &'a [u8], cuts: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let ends = cuts.iter().copied().chain(std::iter::once(stream.len()));
    let starts = std::iter::once(0).chain(cuts.iter().copied());
    starts.zip(ends).map(move |(a, b)| &stream[a..b])
}

#[allow(dead_code)] // each target reads one side
pub struct Session {
    pub host_tx: Vec<u8>,
    pub target_tx: Vec<u8>,
}

pub fn host_params(dig: bool) -> HostParams {
    HostParams {
        hdgst: dig,
        ddgst: dig,
        ..Default::default()
    }
}

pub fn sqe(opc: u8, cid: u16) -> Sqe {
    let mut s = Sqe::zeroed();
    s.set_opcode(opc);
    s.set_cid(cid);
    s
}

pub fn cqe(cid: u16, status: u16) -> Cqe {
    let mut c = Cqe::zeroed();
    c.set_cid(cid);
    c.set_status_raw(status << 1);
    c
}

/// Submits [`CMDS`] (write data is a pattern of the cid, made once per process).
pub fn submit_all(h: &mut HostConn) {
    static W: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    let w = W.get_or_init(|| {
        CMDS.iter()
            .map(|&(cid, _, wlen, _)| vec![cid as u8 ^ 0xa5; wlen])
            .collect()
    });
    for ((cid, opc, _, rlen), w) in CMDS.into_iter().zip(w) {
        h.submit(sqe(opc, cid), w, rlen, 8192).expect("submit");
    }
}

/// Completes a target command: success, with `c2h_len` bytes of data.
pub fn complete(t: &mut TargetConn, ev: TargetEvent) {
    if let TargetEvent::Command(req) = ev {
        let status = if req.error.is_some() { 0x04 } else { 0 };
        let data = vec![req.cid() as u8; req.c2h_len as usize];
        t.complete(&cqe(req.cid(), status), bdev::IoBuf::from(data));
    }
}

pub fn session(dig: bool) -> Session {
    let mut h = HostConn::new(host_params(dig));
    let mut t = TargetConn::new(target_params());
    let (mut host_tx, mut target_tx) = (Vec::new(), Vec::new());
    let mut submitted = false;
    for _ in 0..16 {
        let b = h.poll_transmit().to_vec();
        h.advance_tx(b.len());
        host_tx.extend_from_slice(&b);
        t.handle_bytes(&b);
        while let Some(ev) = t.poll_event() {
            complete(&mut t, ev);
        }
        let b = t.drain_tx();
        target_tx.extend_from_slice(&b);
        h.handle_bytes(&b);
        while let Some(ev) = h.poll_event() {
            if let HostEvent::Terminated { .. } = ev {
                panic!("canonical session terminated: {ev:?}");
            }
        }
        if h.is_established() && !submitted {
            submit_all(&mut h);
            submitted = true;
        }
    }
    assert!(
        submitted && h.in_flight() == 0,
        "canonical session did not finish"
    );
    Session { host_tx, target_tx }
}

/// `base` with `fuzz` XORed onto it, then the rest of `fuzz` appended. (A zip
/// over the common part, not a bounds-checked `get_mut` per byte: that loop was
/// ~4 % of a run under the fuzzer's compare tracing.)
pub fn xor_onto(base: &[u8], fuzz: &[u8]) -> Vec<u8> {
    let n = base.len().min(fuzz.len());
    let mut v = Vec::with_capacity(base.len().max(fuzz.len()));
    v.extend_from_slice(base);
    for (x, b) in v[..n].iter_mut().zip(&fuzz[..n]) {
        *x ^= b;
    }
    v.extend_from_slice(&fuzz[n..]);
    v
}
