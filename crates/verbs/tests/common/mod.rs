//! Shared fixtures: two soft devices joined by a `sim` link pair.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sim::{Clock, Link, LinkConfig};
use verbs::soft::{DeviceOptions, IoMode};
use verbs::*;
use wire::roce::{Ipv4Pseudo, ROCE_PORT};

pub const IP_A: [u8; 4] = [10, 0, 0, 1];
pub const IP_B: [u8; 4] = [10, 0, 0, 2];

pub struct Side {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

pub struct Net {
    pub clock: Clock,
    pub a: Side,
    pub b: Side,
    pub ab: Link<u16>,
    pub ba: Link<u16>,
    buf: Vec<u8>,
    pub pcap: Option<sim::PcapWriter<std::fs::File>>,
    /// When Some, every packet put on a link: (source IP, header fields).
    pub log: Option<Vec<([u8; 4], wire::roce::RocePacketRepr)>>,
}

pub fn full_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

pub fn side(ip: [u8; 4], qp_type: QpType, mr_len: usize) -> Side {
    let mut o = DeviceOptions::new(Ipv4Addr::from(ip));
    o.mode = IoMode::External;
    o.mtu = Some(Mtu::Mtu4096);
    let ctx = o.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096, None).unwrap();
    let mut init = QpInitAttr::new(qp_type, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 8,
        max_recv_sge: 8,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&init).unwrap();
    let mr = pd.reg_mr(mr_len, full_access()).unwrap();
    Side {
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

pub struct RcParams {
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub rd_atomic: u8,
    pub access: AccessFlags,
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            mtu: Mtu::Mtu1024,
            psn_a: 0xff_ff00, // the requester wraps 2^24 early in every test
            psn_b: 0xff_fff0, // wraps during the tests
            timeout: 8,       // ~1 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

pub fn connect_rc(
    qp: &Qp,
    my_psn: u32,
    peer_ip: [u8; 4],
    peer_qpn: u32,
    peer_psn: u32,
    p: &RcParams,
) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: p.access,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = p.mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = p.rd_atomic;
    a.min_rnr_timer = p.min_rnr_timer;
    a.ah_attr = AhAttr {
        dgid: Gid::from_ipv4(Ipv4Addr::from(peer_ip)),
        port_num: 1,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = my_psn;
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.max_rd_atomic = p.rd_atomic;
    qp.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// RESET -> INIT -> RTR -> RTS for a UC QP with exactly the attributes the
/// kernel requires for UC (what ibv_uc_pingpong passes).
pub fn connect_uc(qp: &Qp, my_psn: u32, peer_ip: [u8; 4], peer_qpn: u32, peer_psn: u32, mtu: Mtu) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = peer_psn;
    a.ah_attr = AhAttr {
        dgid: Gid::from_ipv4(Ipv4Addr::from(peer_ip)),
        port_num: 1,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN,
    )
    .unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = my_psn;
    qp.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
}

impl Net {
    /// Two UC QPs (A's PSNs wrap 2^24 early in every test).
    pub fn uc(cfg: LinkConfig, seed: u64, mr_len: usize, mtu: Mtu) -> Net {
        let a = side(IP_A, QpType::Uc, mr_len);
        let b = side(IP_B, QpType::Uc, mr_len);
        let (psn_a, psn_b) = (0xff_fff0, 0x12_3456);
        connect_uc(&a.qp, psn_a, IP_B, b.qp.qp_num(), psn_b, mtu);
        connect_uc(&b.qp, psn_b, IP_A, a.qp.qp_num(), psn_a, mtu);
        Net::new(a, b, cfg, seed)
    }

    pub fn rc(cfg: LinkConfig, seed: u64, mr_len: usize, p: &RcParams) -> Net {
        let a = side(IP_A, QpType::Rc, mr_len);
        let b = side(IP_B, QpType::Rc, mr_len);
        connect_rc(&a.qp, p.psn_a, IP_B, b.qp.qp_num(), p.psn_b, p);
        connect_rc(&b.qp, p.psn_b, IP_A, a.qp.qp_num(), p.psn_a, p);
        Net::new(a, b, cfg, seed)
    }

    pub fn new(a: Side, b: Side, cfg: LinkConfig, seed: u64) -> Net {
        Net {
            clock: Clock::new(),
            a,
            b,
            ab: Link::new(cfg, seed),
            ba: Link::new(cfg, seed ^ 0x9e37_79b9),
            buf: vec![0; 9000],
            pcap: None,
            log: None,
        }
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// One round: transmit everything, deliver what is due, fire timers.
    /// Returns false when nothing is in flight and no timer is armed.
    pub fn step(&mut self) -> bool {
        let now = self.clock.now();
        let mut active = false;
        for (ctx, link, src, dst) in [
            (&self.a.ctx, &mut self.ab, IP_A, IP_B),
            (&self.b.ctx, &mut self.ba, IP_B, IP_A),
        ] {
            while let Some(t) = ctx.soft().unwrap().poll_transmit(now, &mut self.buf) {
                assert_eq!(t.dst, dst);
                if let Some(p) = self.pcap.as_mut() {
                    p.write_ipv4_udp(
                        self.clock.elapsed(),
                        (src, t.sport),
                        (dst, ROCE_PORT),
                        0,
                        &self.buf[..t.len],
                    )
                    .unwrap();
                }
                if let Some(log) = self.log.as_mut() {
                    let (r, _) = wire::roce::RocePacketRepr::parse(&self.buf[..t.len]).unwrap();
                    log.push((src, r));
                }
                if std::env::var_os("SIMTRACE").is_some() {
                    if let Ok((r, _)) = wire::roce::RocePacketRepr::parse(&self.buf[..t.len]) {
                        eprintln!("{:>10?} {}->{} {}", self.clock.elapsed(), src[3], dst[3], r);
                    }
                }
                link.send(now, t.sport, &self.buf[..t.len]);
                active = true;
            }
        }
        for (ctx, link, src, dst) in [
            (&self.b.ctx, &mut self.ab, IP_A, IP_B),
            (&self.a.ctx, &mut self.ba, IP_B, IP_A),
        ] {
            while let Some((sport, d)) = link.recv(now) {
                let ip = Ipv4Pseudo::df(src, dst, sport, ROCE_PORT);
                ctx.soft().unwrap().handle_datagram(now, src, Some(&ip), &d);
                active = true;
            }
        }
        self.a.ctx.soft().unwrap().handle_timeout(now);
        self.b.ctx.soft().unwrap().handle_timeout(now);
        // next event
        let next = [
            self.ab.next_delivery(),
            self.ba.next_delivery(),
            self.a.ctx.soft().unwrap().poll_timeout(),
            self.b.ctx.soft().unwrap().poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            _ if active => true,
            Some(t) => {
                self.clock.advance_to(t.max(now + Duration::from_nanos(1)));
                true
            }
            None => false,
        }
    }

    /// Steps until `done` or the network is idle, at most `max` steps.
    pub fn drive_until(&mut self, max: usize, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        for _ in 0..max {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        false
    }
}

pub fn poll_all(cq: &Cq, out: &mut Vec<Wc>) {
    let mut wc = [Wc::default(); 64];
    loop {
        let n = cq.poll(&mut wc).unwrap();
        out.extend_from_slice(&wc[..n]);
        if n < wc.len() {
            break;
        }
    }
}

/// xorshift bytes for payloads.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
