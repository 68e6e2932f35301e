//! The `ibv_rc_pingpong` / `ibv_uc_pingpong` / `ibv_ud_pingpong` engine
//! (rdma-core `libibverbs/examples`): same exchange, same QP attributes, same
//! buffer check (`-c`), so either side may be the rdma-core program.

use std::io::Write;
use std::time::{Duration, Instant};

use verbs::*;

use crate::exchange::{client_exch, connect_qp, format_dest, random_psn, server_exch, Dest};
use crate::{open_device, Error, Result};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const UD_QKEY: u32 = 0x1111_1111;
const PAGE: usize = 4096;

/// `-c`: what our client sends in iteration `seq`, every byte of it checked when it
/// comes back (ibv_*_pingpong sends and receives in one buffer, so it echoes what it
/// received). Page starts are 0, as ibv_*_pingpong -c sets and checks them (one byte
/// per page); the other bytes vary with the offset and the iteration, so a lost,
/// misplaced or corrupted packet changes the buffer.
fn chk_pattern(seq: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| match i % PAGE {
            0 => 0,
            _ => ((i + i / 251 * 7 + seq * 31) % 251 + 1) as u8,
        })
        .collect()
}

/// Options shared by rc-, uc- and ud-pingpong (rdma-core's letters in brackets).
#[derive(Debug, Clone)]
pub struct PingpongOpts {
    /// TCP port of the out-of-band exchange (-p).
    pub port: u16,
    /// Device: name (dps_a_b_c_d) or IPv4 address (-d); none = the default.
    pub dev: Option<String>,
    /// Port of the device (-i).
    pub ib_port: u8,
    /// Message size (-s); none = rc, uc: 4096, ud: 2048.
    pub size: Option<usize>,
    /// Path MTU (-m, rc and uc).
    pub mtu: usize,
    /// Receives posted at a time (-r).
    pub rx_depth: usize,
    /// Iterations (-n).
    pub iters: usize,
    /// Service level (-l; carried, unused on RoCE).
    pub sl: u8,
    /// Sleep on completion events instead of busy polling (-e).
    pub events: bool,
    /// Local GID index (-g).
    pub gid_idx: i32,
    /// Validate received buffers (-c).
    pub chk: bool,
    /// Server to connect to (none = be the server).
    pub host: Option<String>,
    /// Provider of the device (`--provider`).
    pub provider: crate::ProviderChoice,
}

/// What a finished ping-pong measured.
#[derive(Debug, Clone)]
pub struct PingpongStats {
    /// Bytes moved both ways.
    pub bytes: u64,
    pub secs: f64,
    pub iters: usize,
    /// Received buffers validated (with `chk`).
    pub checked: usize,
}

/// Runs one ping-pong of type `ty`; the local and remote address lines go to `out`
/// as pingpong.c prints them.
pub fn run(a: &PingpongOpts, ty: QpType, out: &mut dyn Write) -> Result<PingpongStats> {
    let ud = ty == QpType::Ud;
    let size = a.size.unwrap_or(if ud { 2048 } else { 4096 });
    let mtu =
        Mtu::from_bytes(a.mtu).ok_or_else(|| Error::BadOption(format!("Invalid MTU {}", a.mtu)))?;
    let ctx = open_device(a.dev.as_deref(), verbs::soft::IoMode::Threaded, a.provider)?;
    let port = ctx
        .query_port(a.ib_port)
        .map_err(|_| Error::Run("Couldn't get port info".into()))?;
    if ud && size > port.active_mtu.bytes() {
        return Err(Error::BadOption(format!(
            "Requested size larger than port MTU ({})",
            port.active_mtu.bytes()
        )));
    }
    let grh = if ud { 40 } else { 0 };
    let pd = ctx.alloc_pd()?;
    // sends go out of [0, size + grh), receives land in [size + grh, 2 * (size + grh)):
    // a receive that writes nothing cannot pass the -c check with what we sent
    let rbase = size + grh;
    let mr = pd.reg_mr(2 * rbase, AccessFlags::LOCAL_WRITE)?;
    mr.write(0, &vec![0x7b; rbase]);
    mr.write(rbase, &vec![0xee; rbase]);
    let ch = if a.events {
        Some(ctx.create_comp_channel()?)
    } else {
        None
    };
    let cq = ctx.create_cq(a.rx_depth + 1, ch.as_ref())?;
    let mut init = QpInitAttr::new(ty, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init)?;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        port_num: a.ib_port,
        ..Default::default()
    };
    if ud {
        at.qkey = UD_QKEY;
        qp.modify(
            &at,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        at.qp_state = QpState::Rtr;
        qp.modify(&at, QpAttrMask::STATE)?;
    } else {
        qp.modify(
            &at,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )?;
    }
    let rsge = [mr.sge(rbase, (size + grh) as u32)];
    let post_recv = |n: usize| -> usize {
        let mut k = 0;
        while k < n
            && qp
                .post_recv(&[RecvWr {
                    wr_id: RECV_WRID,
                    sg_list: &rsge,
                }])
                .is_ok()
        {
            k += 1;
        }
        k
    };
    let mut routs = post_recv(a.rx_depth);
    if routs < a.rx_depth {
        return Err(Error::Run(format!("Couldn't post receive ({routs})")));
    }
    if let Some(_ch) = &ch {
        cq.req_notify(false)?;
    }
    let my_psn = random_psn();
    let gid = if a.gid_idx >= 0 {
        ctx.query_gid(a.ib_port, a.gid_idx as u32)?
    } else {
        Gid::default()
    };
    let me = Dest {
        lid: port.lid,
        qpn: qp.qp_num(),
        psn: my_psn,
        gid,
    };
    if ud {
        at.qp_state = QpState::Rts;
        at.sq_psn = my_psn;
        qp.modify(&at, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
    }
    writeln!(out, "{}", format_dest("local", &me))?;
    let sgid = a.gid_idx.max(0) as u8;
    let connect = |rem: &Dest| -> Result<()> {
        if !ud {
            connect_qp(&qp, ty, a.ib_port, my_psn, mtu, rem, sgid, 1)?;
        }
        Ok(())
    };
    let rem = match &a.host {
        Some(h) => {
            let r = client_exch(h, a.port, &me)?;
            connect(&r)?;
            r
        }
        None => server_exch(a.port, &me, connect)?,
    };
    writeln!(out, "{}", format_dest("remote", &rem))?;
    let ah = if ud {
        Some(pd.create_ah(&AhAttr {
            dgid: rem.gid,
            sgid_index: sgid,
            hop_limit: 1,
            port_num: a.ib_port,
            ..Default::default()
        })?)
    } else {
        None
    };
    let ssge = [mr.sge(grh, size as u32)];
    let sent = std::cell::Cell::new(0usize);
    let post_send = || -> Result<()> {
        if a.chk && a.host.is_some() {
            mr.write(grh, &chk_pattern(sent.get(), size));
        }
        sent.set(sent.get() + 1);
        let mut w = SendWr::new(SEND_WRID, WrOpcode::Send, &ssge);
        if let Some(ah) = ah {
            w.wr = WrDetail::Ud {
                ah,
                remote_qpn: rem.qpn,
                remote_qkey: UD_QKEY,
            };
        }
        qp.post_send(&[w])
            .map_err(|e| Error::Run(format!("Couldn't post send: {e}")))
    };
    let start = Instant::now();
    let mut pending = RECV_WRID;
    if a.host.is_some() {
        post_send()?;
        pending |= SEND_WRID;
    }
    let (mut rcnt, mut scnt) = (0usize, 0usize);
    let mut checked = 0usize;
    let mut peer_buf: Option<Vec<u8>> = None;
    let mut wc = [Wc::default(); 2];
    let deadline = Duration::from_secs(60);
    while rcnt < a.iters || scnt < a.iters {
        if let Some(ch) = &ch {
            ch.get_cq_event(1000)
                .map_err(|_| Error::Run("Failed to get cq_event".into()))?;
            cq.ack_events(1);
            cq.req_notify(false)?;
        }
        let n = cq.poll(&mut wc)?;
        if n == 0 && start.elapsed() > deadline {
            return Err(Error::Run(format!(
                "timed out: {rcnt} receives, {scnt} sends completed"
            )));
        }
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(Error::Run(format!(
                    "Failed status {} ({}) for wr_id {}",
                    w.status.as_str(),
                    w.status as u32,
                    w.wr_id
                )));
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if a.chk {
                        // every byte: the client gets back the pattern it sent last; the
                        // server gets our client's pattern for this iteration, or from
                        // ibv_*_pingpong the same buffer every time (its first one,
                        // 0x7b and 0: it echoes what we echo)
                        let mut got = vec![0u8; size];
                        mr.read(rbase + grh, &mut got);
                        let want = match &a.host {
                            Some(_) => chk_pattern(sent.get().saturating_sub(1), size),
                            None => {
                                if rcnt == 0
                                    && got != chk_pattern(0, size)
                                    && got.iter().all(|&b| b == 0 || b == 0x7b)
                                {
                                    peer_buf = Some(got.clone());
                                }
                                peer_buf.clone().unwrap_or_else(|| chk_pattern(rcnt, size))
                            }
                        };
                        if let Some(at) = (0..size).find(|&i| got[i] != want[i]) {
                            return Err(Error::Run(format!(
                                "invalid data in received buffer {rcnt}: byte {at} (page {}) is {:#04x}, sent {:#04x}",
                                at / PAGE,
                                got[at],
                                want[at]
                            )));
                        }
                        checked += 1;
                        if a.host.is_none() {
                            // the server echoes what it received, as ibv_*_pingpong
                            mr.write(grh, &got);
                        }
                        // the next receive must write every byte again
                        mr.write(rbase + grh, &vec![0xee; size]);
                    }
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recv(a.rx_depth - routs);
                        if routs < a.rx_depth {
                            return Err(Error::Run(format!("Couldn't post receive ({routs})")));
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(Error::Run(format!("Completion for unknown wr_id {other}"))),
            }
            pending &= !w.wr_id;
            if scnt < a.iters && pending == 0 {
                post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if ty == QpType::Rc {
        // The peer's last message may still wait for our ACK (lost on the way, or
        // sent after our last completion): keep the QP a moment so the device
        // thread answers a retransmission (a duplicate is ACKed again) before the
        // QP goes away. Without it the peer can only end in retry exceeded — and
        // the guest's rxe (Linux 6.1) kept retrying for the 90 s of 10-netem's
        // bound. ibv_rc_pingpong does not wait; the figures above exclude it.
        std::thread::sleep(RC_LINGER);
    }
    Ok(PingpongStats {
        bytes: (size * a.iters * 2) as u64,
        secs,
        iters: a.iters,
        checked,
    })
}

/// How long an RC ping-pong keeps its QP after its last completion: several of
/// a peer's retransmission timeouts (rxe's with ibv_rc_pingpong's timeout 14:
/// ~67 ms).
const RC_LINGER: std::time::Duration = std::time::Duration::from_millis(500);
