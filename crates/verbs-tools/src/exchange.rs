//! The out-of-band QP exchange over TCP, in rdma-core's formats: the
//! `ibv_*_pingpong` message ("LLLL:QQQQQQ:PPPPPP:GGGG…" + NUL) and perftest's
//! one-line form (QPN, PSN, rkey, address, GID); plus the RTR → RTS transition
//! both tools do with the peer's address.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use verbs::{AhAttr, Gid, Mtu, Qp, QpAttr, QpAttrMask, QpState, QpType};

use crate::{Error, Result};

/// "LLLL:QQQQQQ:PPPPPP:GGGG…" plus the terminating NUL, as `sizeof msg` in pingpong.c.
pub const EXCH_LEN: usize = "0000:000000:000000:00000000000000000000000000000000".len() + 1;

/// One side's address as `ibv_*_pingpong` exchanges it.
#[derive(Debug, Clone, Copy)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

/// A GID as 32 hex digits (pingpong.c's `gid_to_wire_gid`).
pub fn gid_to_wire(g: &Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`gid_to_wire`].
pub fn wire_to_gid(s: &str) -> Result<Gid> {
    if s.len() != 32 {
        return Err(Error::BadExchange(format!("bad GID in exchange: {s:?}")));
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)?;
    }
    Ok(Gid(g))
}

/// The exchange message of `d`.
pub fn encode_dest(d: &Dest) -> [u8; EXCH_LEN] {
    let s = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        d.lid,
        d.qpn,
        d.psn,
        gid_to_wire(&d.gid)
    );
    let mut m = [0u8; EXCH_LEN];
    m[..s.len()].copy_from_slice(s.as_bytes());
    m
}

/// Parses an exchange message.
pub fn decode_dest(m: &[u8]) -> Result<Dest> {
    let s = std::str::from_utf8(m)?.trim_end_matches('\0');
    let f: Vec<&str> = s.split(':').collect();
    if f.len() != 4 {
        return Err(Error::BadExchange(format!(
            "couldn't parse remote address {s:?}"
        )));
    }
    Ok(Dest {
        lid: u16::from_str_radix(f[0], 16)?,
        qpn: u32::from_str_radix(f[1], 16)?,
        psn: u32::from_str_radix(f[2], 16)?,
        gid: wire_to_gid(f[3])?,
    })
}

/// Client side: connect, send ours, read theirs, say "done".
pub fn client_exch(host: &str, port: u16, me: &Dest) -> Result<Dest> {
    let mut s = TcpStream::connect((host, port)).map_err(|source| Error::Exchange {
        what: format!("couldn't connect to {host}:{port}"),
        source,
    })?;
    s.write_all(&encode_dest(me))?;
    let mut m = [0u8; EXCH_LEN];
    s.read_exact(&mut m).map_err(|source| Error::Exchange {
        what: "couldn't read remote address".into(),
        source,
    })?;
    s.write_all(b"done\0")?;
    decode_dest(&m)
}

/// Server side: accept, read the client's address, `connect` (the QP goes to
/// RTR/RTS before we answer, as pingpong.c does), send ours, wait for "done".
pub fn server_exch(
    port: u16,
    me: &Dest,
    connect: impl FnOnce(&Dest) -> Result<()>,
) -> Result<Dest> {
    let l = TcpListener::bind(("0.0.0.0", port)).map_err(|source| Error::Exchange {
        what: format!("couldn't listen to port {port}"),
        source,
    })?;
    let (mut s, _) = l.accept()?;
    let mut m = [0u8; EXCH_LEN];
    s.read_exact(&mut m).map_err(|source| Error::Exchange {
        what: "couldn't read remote address".into(),
        source,
    })?;
    let rem = decode_dest(&m)?;
    connect(&rem)?;
    s.write_all(&encode_dest(me))?;
    let mut done = [0u8; 5];
    let _ = s.read_exact(&mut done);
    Ok(rem)
}

/// The line pingpong.c prints for an address (`which` = "local" or "remote").
pub fn format_dest(which: &str, d: &Dest) -> String {
    let g = d.gid.0;
    let gs = (0..8)
        .map(|i| format!("{:02x}{:02x}", g[2 * i], g[2 * i + 1]))
        .collect::<Vec<_>>()
        .join(":");
    format!(
        "  {which} address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {gs}",
        d.lid, d.qpn, d.psn
    )
}

/// A random 24-bit initial PSN (clock and pid mixed, as pingpong.c's lrand48 seeded by them).
pub fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = (t.as_nanos() as u64 ^ (std::process::id() as u64) << 20)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 40) as u32 & 0xff_ffff
}

/// RTR -> RTS of a connected QP with the attributes rdma-core's
/// pingpong.c / perftest pass: RC with its ACK timing and read/atomic depth,
/// UC (ibv_uc_pingpong) with only what the kernel allows for UC.
#[allow(clippy::too_many_arguments)]
pub fn connect_qp(
    qp: &Qp,
    ty: QpType,
    port: u8,
    my_psn: u32,
    mtu: Mtu,
    rem: &Dest,
    sgid: u8,
    rd_atomic: u8,
) -> Result<()> {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: rem.qpn,
        rq_psn: rem.psn,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid: rem.gid,
            sgid_index: sgid,
            hop_limit: 1,
            port_num: port,
            ..Default::default()
        },
        ..Default::default()
    };
    let rtr = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    let uc = ty == QpType::Uc;
    let rtr = if uc {
        rtr
    } else {
        rtr | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER
    };
    qp.modify(&a, rtr)
        .map_err(|err| Error::Modify { state: "RTR", err })?;
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = rd_atomic;
    let rts = if uc {
        QpAttrMask::STATE | QpAttrMask::SQ_PSN
    } else {
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC
    };
    qp.modify(&a, rts)
        .map_err(|err| Error::Modify { state: "RTS", err })?;
    Ok(())
}

/// One side of a perftest-style connection: QP, PSN and the buffer the peer may access.
#[derive(Debug, Clone, Copy)]
pub struct PerfDest {
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub addr: u64,
    pub gid: Gid,
}

/// perftest's exchange line for `d` (newline-terminated).
pub fn perf_line(d: &PerfDest) -> String {
    format!(
        "{:06x} {:06x} {:08x} {:016x} {}\n",
        d.qpn,
        d.psn,
        d.rkey,
        d.addr,
        gid_to_wire(&d.gid)
    )
}

/// Parses [`perf_line`].
pub fn parse_perf_line(l: &str) -> Result<PerfDest> {
    let f: Vec<&str> = l.split_whitespace().collect();
    if f.len() != 5 {
        return Err(Error::BadExchange(format!("bad perf exchange line {l:?}")));
    }
    Ok(PerfDest {
        qpn: u32::from_str_radix(f[0], 16)?,
        psn: u32::from_str_radix(f[1], 16)?,
        rkey: u32::from_str_radix(f[2], 16)?,
        addr: u64::from_str_radix(f[3], 16)?,
        gid: wire_to_gid(f[4])?,
    })
}
