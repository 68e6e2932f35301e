//! Two CM endpoints on a simulated (seeded, lossy) link: every outstanding call
//! must end with an event, never a hang.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cm::{
    CmConfig, CmEndpoint, CmEvent, CmIdHandle, CmState, ConnParam, Ece, Error, EventType,
    PortSpace, QpAction,
};
use sim::{Clock, Link, LinkConfig};
use wire::mad::{CmMadRepr, CmMsgRepr, RejReason, RDMA_UDP_QKEY};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";
const PORT: u16 = 7471;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cfg(addr: &str, seed: u64) -> CmConfig {
    CmConfig {
        local_addrs: vec![ip(addr)],
        ca_guid: 0x0200_0000_0000_0000 | seed,
        cm_response_timeout: 12, // 16 ms
        packet_life_time: 8,     // 1 ms
        timewait: Duration::from_millis(50),
        seed,
        ..CmConfig::default()
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum OnRequest {
    Accept,
    Reject,
    Ignore,
}

struct Side {
    ep: CmEndpoint,
    ip: IpAddr,
    events: Vec<CmEvent>,
    on_request: OnRequest,
    /// Answer DISCONNECTED with rdma_disconnect, as librdmacm programs do.
    disconnect_on_dreq: bool,
    crashed: bool,
    qpn: u32,
}

struct Net {
    clock: Clock,
    s: [Side; 2],
    links: [Link<()>; 2],
    /// Every MAD put on the wire: (from side, bytes).
    log: Vec<(usize, Vec<u8>)>,
}

impl Net {
    fn new(link: LinkConfig, seed: u64) -> Net {
        let side = |addr: &str, seed: u64, qpn: u32| Side {
            ep: CmEndpoint::new(cfg(addr, seed)),
            ip: ip(addr),
            events: Vec::new(),
            on_request: OnRequest::Accept,
            disconnect_on_dreq: true,
            crashed: false,
            qpn,
        };
        Net {
            clock: Clock::new(),
            s: [side(A, seed * 2 + 1, 0x10), side(B, seed * 2 + 2, 0x21)],
            links: [Link::new(link, seed ^ 0xa), Link::new(link, seed ^ 0xb)],
            log: Vec::new(),
        }
    }

    fn react(&mut self, i: usize) {
        let now = self.clock.now();
        let side = &mut self.s[i];
        while let Some(ev) = side.ep.poll_any_event() {
            match ev.event {
                EventType::ConnectRequest => match side.on_request {
                    OnRequest::Accept => {
                        side.qpn += 1;
                        side.ep.attach_qp(ev.id, side.qpn).unwrap();
                        let param = ConnParam {
                            private_data: b"server-accept".to_vec(),
                            qp_num: side.qpn,
                            ..ConnParam::default()
                        };
                        side.ep.accept(now, ev.id, &param).unwrap();
                    }
                    OnRequest::Reject => side.ep.reject(ev.id, b"go away", None).unwrap(),
                    OnRequest::Ignore => {}
                },
                EventType::Disconnected if side.disconnect_on_dreq => {
                    side.ep.disconnect(now, ev.id).unwrap();
                }
                _ => {}
            }
            side.events.push(ev);
        }
    }

    /// Runs until nothing is in flight and no timer is armed, or `limit` of virtual time passed.
    /// Returns true if it went quiet (no hang).
    fn drive(&mut self, limit: Duration) -> bool {
        let end = self.clock.now() + limit;
        loop {
            let now = self.clock.now();
            for i in 0..2 {
                if self.s[i].crashed {
                    continue;
                }
                self.s[i].ep.handle_timeout(now);
                self.react(i);
                while let Some(t) = self.s[i].ep.poll_transmit() {
                    assert_eq!(t.src, self.s[i].ip);
                    self.log.push((i, t.mad.to_vec()));
                    if t.dst == self.s[1 - i].ip {
                        self.links[i].send(now, (), &t.mad);
                    }
                }
            }
            let mut delivered = false;
            for l in 0..2 {
                while let Some(((), d)) = self.links[l].recv(now) {
                    delivered = true;
                    let to = 1 - l;
                    if !self.s[to].crashed {
                        let (src, dst) = (self.s[l].ip, self.s[to].ip);
                        self.s[to].ep.handle_mad(now, src, dst, &d);
                    }
                }
            }
            if delivered {
                continue;
            }
            let next = [
                self.links[0].next_delivery(),
                self.links[1].next_delivery(),
                (!self.s[0].crashed)
                    .then(|| self.s[0].ep.poll_timeout())
                    .flatten(),
                (!self.s[1].crashed)
                    .then(|| self.s[1].ep.poll_timeout())
                    .flatten(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                None => return true,
                Some(t) if t > end => {
                    self.clock.advance_to(end);
                    return false;
                }
                Some(t) => self.clock.advance_to(t.max(now)),
            }
        }
    }

    fn listen(&mut self, ps: PortSpace) -> CmIdHandle {
        let ep = &mut self.s[1].ep;
        let l = ep.create_id(None, ps, 7);
        ep.bind_addr(l, SocketAddr::new(ip(B), PORT)).unwrap();
        ep.listen(l, 16).unwrap();
        l
    }

    /// Client: create, resolve addr+route, attach QP, connect.
    fn connect(&mut self, ps: PortSpace, pd: &[u8]) -> CmIdHandle {
        let now = self.clock.now();
        self.s[0].qpn += 1;
        let qpn = self.s[0].qpn;
        let ep = &mut self.s[0].ep;
        let id = ep.create_id(None, ps, 1);
        ep.resolve_addr(
            id,
            None,
            SocketAddr::new(ip(B), PORT),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(ep.poll_id_event(id).unwrap().event, EventType::AddrResolved);
        ep.resolve_route(id, Duration::from_secs(1)).unwrap();
        assert_eq!(
            ep.poll_id_event(id).unwrap().event,
            EventType::RouteResolved
        );
        ep.attach_qp(id, qpn).unwrap();
        let param = ConnParam {
            private_data: pd.to_vec(),
            qp_num: qpn,
            responder_resources: 4,
            initiator_depth: 2,
            ..ConnParam::default()
        };
        ep.connect(now, id, &param).unwrap();
        id
    }

    fn kinds(&self, i: usize) -> Vec<EventType> {
        self.s[i].events.iter().map(|e| e.event).collect()
    }

    fn sent(&self, from: usize) -> Vec<CmMadRepr> {
        self.log
            .iter()
            .filter(|(f, _)| *f == from)
            .map(|(_, b)| CmMadRepr::parse_bytes(b).unwrap())
            .collect()
    }
}

use EventType::*;

#[test]
fn connect_accept_disconnect_timewait() {
    let mut n = Net::new(LinkConfig::default(), 1);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"hello from client");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established]);
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
    // The request carried our private data after the CMA header, and the
    // resources from the server's point of view.
    let req = &n.s[1].events[0];
    assert_eq!(&req.param.private_data[..17], b"hello from client");
    assert_eq!(req.param.private_data.len(), 56);
    assert_eq!(
        (req.param.responder_resources, req.param.initiator_depth),
        (2, 4)
    );
    assert_eq!(req.param.qp_num, 0x11);
    let est = &n.s[0].events[0];
    assert_eq!(&est.param.private_data[..13], b"server-accept");
    assert_eq!(est.param.private_data.len(), 196);
    // Negotiated QP attributes agree across the wire.
    let s_id = n.s[1].events[0].id;
    let ca = n.s[0].ep.qp_attrs(c).unwrap();
    let sa = n.s[1].ep.qp_attrs(s_id).unwrap();
    assert_eq!((ca.dest_qp_num, sa.dest_qp_num), (0x22, 0x11));
    assert_eq!(ca.rq_psn, sa.sq_psn);
    assert_eq!(sa.rq_psn, ca.sq_psn);
    assert_eq!((ca.remote, sa.remote), (ip(B), ip(A)));
    assert_eq!(n.s[1].ep.peer_addr(s_id).unwrap().unwrap().ip(), ip(A));
    assert_eq!(
        n.s[1].ep.peer_addr(s_id).unwrap().unwrap().port(),
        n.s[0].ep.local_addr(c).unwrap().unwrap().port()
    );
    // Wire: REQ, RTU from the client; REP from the server.
    let names: Vec<_> = n.sent(0).iter().map(|m| m.msg.name()).collect();
    assert_eq!(names, ["ConnectRequest", "ReadyToUse"]);
    let names: Vec<_> = n.sent(1).iter().map(|m| m.msg.name()).collect();
    assert_eq!(names, ["ConnectReply"]);

    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
    assert_eq!(
        n.kinds(1),
        vec![ConnectRequest, Established, Disconnected, TimewaitExit]
    );
    assert_eq!(n.s[0].ep.state(c).unwrap(), CmState::Idle);
    let now = n.clock.now();
    n.s[0].ep.destroy_id(now, c).unwrap();
    assert_eq!(n.s[0].ep.state(c), Err(Error::InvalidId));
}

#[test]
fn consumer_reject_and_no_listener() {
    let mut n = Net::new(LinkConfig::default(), 2);
    n.s[1].on_request = OnRequest::Reject;
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    let ev = &n.s[0].events[0];
    assert_eq!(ev.event, Rejected);
    assert_eq!(ev.status, 28);
    assert_eq!(&ev.param.private_data[..7], b"go away");

    // No listener on the port: REJ reason 8, like the kernel ("connection refused").
    let mut n = Net::new(LinkConfig::default(), 3);
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Rejected]);
    assert_eq!(n.s[0].events[0].status, 8);
    let CmMsgRepr::Rej(rej) = &n.sent(1)[0].msg else {
        panic!()
    };
    assert_eq!(rej.reason, RejReason::InvalidServiceId);
    assert_eq!(rej.local_comm_id, 0);
}

#[test]
fn listener_closed_then_connect_is_refused() {
    let mut n = Net::new(LinkConfig::default(), 4);
    let l = n.listen(PortSpace::Tcp);
    let now = n.clock.now();
    n.s[1].ep.destroy_id(now, l).unwrap();
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Rejected]);
    assert_eq!(n.s[0].events[0].status, 8);
}

#[test]
fn pending_request_destroyed_is_rejected() {
    let mut n = Net::new(LinkConfig::default(), 5);
    n.s[1].on_request = OnRequest::Ignore;
    let l = n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_millis(5));
    assert_eq!(n.kinds(1), vec![ConnectRequest]);
    // The listener goes away, then the server drops the pending child id.
    let now = n.clock.now();
    n.s[1].ep.destroy_id(now, l).unwrap();
    let child = n.s[1].events[0].id;
    n.s[1].ep.destroy_id(now, child).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Rejected]);
    assert_eq!(n.s[0].events[0].status, 28);
}

#[test]
fn duplicate_req_gets_mra_then_late_accept() {
    let mut n = Net::new(LinkConfig::default(), 6);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    // Three REQ periods pass: the client retransmits, the server MRAs the duplicate.
    assert!(!n.drive(Duration::from_millis(60)));
    assert_eq!(
        n.kinds(1),
        vec![ConnectRequest],
        "one CONNECT_REQUEST per connection"
    );
    assert_eq!(n.s[0].ep.state(c).unwrap(), CmState::MraReqRcvd);
    assert!(n.sent(1).iter().any(|m| matches!(m.msg, CmMsgRepr::Mra(_))));
    // The MRA's service timeout (2^24 · 4 µs ≈ 65 s) keeps the client waiting.
    assert!(!n.drive(Duration::from_secs(10)));
    assert!(n.kinds(0).is_empty());
    let child = n.s[1].events[0].id;
    let now = n.clock.now();
    n.s[1].ep.attach_qp(child, 0x22).unwrap();
    n.s[1].ep.accept(now, child, &ConnParam::default()).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established]);
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
}

#[test]
fn duplicate_req_after_rep_resends_rep_and_stale_req_in_timewait() {
    let mut n = Net::new(LinkConfig::default(), 7);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(1)));
    let req = n.log.iter().find(|(f, _)| *f == 0).unwrap().1.clone();
    // Replay the REQ while established: ignored (no second CONNECT_REQUEST).
    let now = n.clock.now();
    n.s[1].ep.handle_mad(now, ip(A), ip(B), &req);
    assert!(n.s[1].ep.poll_transmit().is_none());
    // Disconnect; during the server's TIMEWAIT the old REQ is stale.
    n.s[1].disconnect_on_dreq = true;
    n.s[0].ep.disconnect(now, c).unwrap();
    n.drive(Duration::from_millis(5));
    let now = n.clock.now();
    n.s[1].ep.handle_mad(now, ip(A), ip(B), &req);
    let t = n.s[1].ep.poll_transmit().unwrap();
    let CmMsgRepr::Rej(rej) = CmMadRepr::parse_bytes(&t.mad).unwrap().msg else {
        panic!()
    };
    assert_eq!(rej.reason, RejReason::StaleConn);
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(
        n.kinds(1),
        vec![ConnectRequest, Established, Disconnected, TimewaitExit]
    );
}

#[test]
fn client_crash_mid_handshake_server_gets_unreachable() {
    let mut n = Net::new(LinkConfig::default(), 8);
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_micros(1)); // REQ on the wire
    n.s[0].crashed = true;
    assert!(n.drive(Duration::from_secs(30)));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Unreachable]);
    assert_eq!(n.s[1].events[1].status, -110);
    // 1 REP + 15 retries, then a REJ (timeout).
    let reps = n
        .sent(1)
        .iter()
        .filter(|m| matches!(m.msg, CmMsgRepr::Rep(_)))
        .count();
    assert_eq!(reps, 16);
}

#[test]
fn server_crash_client_gets_unreachable() {
    let mut n = Net::new(LinkConfig::default(), 9);
    n.listen(PortSpace::Tcp);
    n.s[1].crashed = true;
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(30)));
    assert_eq!(n.kinds(0), vec![Unreachable]);
    assert_eq!(n.s[0].events[0].status, -110);
    assert_eq!(n.s[0].ep.stats.retransmits, 15);
}

#[test]
fn peer_crash_while_established_disconnect_times_out() {
    let mut n = Net::new(LinkConfig::default(), 10);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(1)));
    n.s[1].crashed = true;
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(30)));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
}

#[test]
fn simultaneous_disconnect() {
    let mut n = Net::new(LinkConfig::default(), 11);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(1)));
    let s = n.s[1].events[0].id;
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    n.s[1].ep.disconnect(now, s).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
    assert_eq!(
        n.kinds(1),
        vec![ConnectRequest, Established, Disconnected, TimewaitExit]
    );
}

#[test]
fn active_destroy_during_handshake_rejects_server_side() {
    let mut n = Net::new(LinkConfig::default(), 12);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_millis(2));
    let now = n.clock.now();
    n.s[0].ep.destroy_id(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert!(n.kinds(0).is_empty(), "no events for a destroyed id");
    assert_eq!(n.kinds(1), vec![ConnectRequest, Rejected]);
    assert_eq!(n.s[1].events[1].status, 4); // REJ timeout, as the kernel sends
}

#[test]
fn unmanaged_qp_connect_response_then_establish() {
    let mut n = Net::new(LinkConfig::default(), 13);
    n.listen(PortSpace::Tcp);
    let now = n.clock.now();
    let ep = &mut n.s[0].ep;
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    ep.resolve_addr(id, None, SocketAddr::new(ip(B), PORT), Duration::ZERO)
        .unwrap();
    ep.resolve_route(id, Duration::ZERO).unwrap();
    let param = ConnParam {
        qp_num: 0x33,
        ..ConnParam::default()
    };
    ep.connect(now, id, &param).unwrap();
    assert!(!n.drive(Duration::from_millis(1)));
    assert_eq!(
        n.kinds(0),
        vec![AddrResolved, RouteResolved, ConnectResponse]
    );
    assert_eq!(n.kinds(1), vec![ConnectRequest]);
    assert_eq!(n.s[1].events[0].param.qp_num, 0x33);
    n.s[0].ep.establish(id).unwrap();
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
}

#[test]
fn lost_rtu_is_recovered_by_notify_or_rep_retry() {
    // Drop exactly the RTU: the server retransmits the REP, the client answers
    // it with a new RTU.
    let mut n = Net::new(LinkConfig::default(), 14);
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_micros(15)); // REQ delivered, REP on its way
    n.links[0].cfg.loss = 1.0;
    n.drive(Duration::from_micros(15)); // REP delivered, RTU lost
    n.links[0].cfg.loss = 0.0;
    assert_eq!(n.kinds(0), vec![Established]);
    assert_eq!(n.kinds(1), vec![ConnectRequest]);
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
    // notify() (first data before RTU) also establishes and is idempotent.
    let mut n = Net::new(LinkConfig::default(), 15);
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_micros(15));
    let s = n.s[1].events[0].id;
    n.s[1].ep.notify(s).unwrap();
    n.s[1].ep.notify(s).unwrap();
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
}

#[test]
fn ece_is_carried_and_reject_ece() {
    let mut n = Net::new(LinkConfig::default(), 16);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let now = n.clock.now();
    let ep = &mut n.s[0].ep;
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    ep.resolve_addr(id, None, SocketAddr::new(ip(B), PORT), Duration::ZERO)
        .unwrap();
    ep.resolve_route(id, Duration::ZERO).unwrap();
    let ece = Ece {
        vendor_id: 0x15b3,
        options: 0x8000_0001,
    };
    ep.set_local_ece(id, ece).unwrap();
    ep.connect(now, id, &ConnParam::default()).unwrap();
    n.drive(Duration::from_millis(1));
    let req = n.s[1].events[0].clone();
    assert_eq!(req.ece, ece);
    assert_eq!(n.s[1].ep.remote_ece(req.id).unwrap(), ece);
    let CmMsgRepr::Req(r) = &n.sent(0)[0].msg else {
        panic!()
    };
    assert_eq!(r.vendor_id, 0x15b3);
    assert_eq!(n.sent(0)[0].attr_mod, 0x8000_0001);
    let answer = Ece {
        vendor_id: 0x15b3,
        options: 1,
    };
    n.s[1].ep.set_local_ece(req.id, answer).unwrap();
    let now = n.clock.now();
    n.s[1]
        .ep
        .accept(now, req.id, &ConnParam::default())
        .unwrap();
    assert!(n.drive(Duration::from_secs(1)));
    let resp = n.s[0]
        .events
        .iter()
        .find(|e| e.event == ConnectResponse)
        .unwrap();
    assert_eq!(resp.ece, answer);
    assert_eq!(n.s[0].ep.remote_ece(id).unwrap(), answer);

    // reject_ece: REJ reason 35.
    let mut n = Net::new(LinkConfig::default(), 17);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_millis(1));
    let child = n.s[1].events[0].id;
    n.s[1].ep.reject_ece(child).unwrap();
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(0), vec![Rejected]);
    assert_eq!(n.s[0].events[0].status, 35);
}

#[test]
fn private_data_limits_and_bad_calls() {
    let mut n = Net::new(LinkConfig::default(), 18);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let now = n.clock.now();
    let ep = &mut n.s[0].ep;
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    // connect before resolving: state error, nothing sent
    assert_eq!(
        ep.connect(now, id, &ConnParam::default()),
        Err(Error::InvalidState(CmState::Idle))
    );
    ep.resolve_addr(id, None, SocketAddr::new(ip(B), PORT), Duration::ZERO)
        .unwrap();
    ep.resolve_route(id, Duration::ZERO).unwrap();
    let big = ConnParam {
        private_data: vec![1; 57],
        ..ConnParam::default()
    };
    assert_eq!(
        ep.connect(now, id, &big),
        Err(Error::PrivateDataTooLong { len: 57, max: 56 })
    );
    let ok = ConnParam {
        private_data: vec![1; 56],
        ..ConnParam::default()
    };
    ep.connect(now, id, &ok).unwrap();
    n.drive(Duration::from_millis(1));
    let child = n.s[1].events[0].id;
    let ep = &mut n.s[1].ep;
    let big = ConnParam {
        private_data: vec![1; 197],
        ..ConnParam::default()
    };
    assert_eq!(
        ep.accept(now, child, &big),
        Err(Error::PrivateDataTooLong { len: 197, max: 196 })
    );
    assert_eq!(
        ep.reject(child, &[0; 149], None),
        Err(Error::PrivateDataTooLong { len: 149, max: 148 })
    );
    assert_eq!(
        ep.disconnect(now, child),
        Err(Error::InvalidState(CmState::ReqRcvd))
    );
    // binding a port in use
    let other = ep.create_id(None, PortSpace::Tcp, 0);
    assert_eq!(
        ep.bind_addr(other, SocketAddr::new(ip(B), PORT)),
        Err(Error::AddrInUse)
    );
    assert_eq!(
        ep.bind_addr(other, SocketAddr::new(ip("10.9.9.9"), 1)),
        Err(Error::AddrNotAvailable(ip("10.9.9.9")))
    );
    // same port in another port space is fine
    let udp = ep.create_id(None, PortSpace::Udp, 0);
    ep.bind_addr(udp, SocketAddr::new(ip(B), PORT)).unwrap();
    // unreachable destination family
    let v6 = ep.create_id(None, PortSpace::Tcp, 0);
    ep.resolve_addr(v6, None, "[fe80::1]:1".parse().unwrap(), Duration::ZERO)
        .unwrap();
    let ev = ep.poll_id_event(v6).unwrap();
    assert_eq!((ev.event, ev.status), (AddrError, -113));
}

#[test]
fn sidr_udp_connect_accept_and_refused() {
    let mut n = Net::new(LinkConfig::default(), 19);
    n.listen(PortSpace::Udp);
    n.connect(PortSpace::Udp, b"udp hello");
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(1), vec![ConnectRequest]);
    let req = &n.s[1].events[0];
    assert_eq!(&req.param.private_data[..9], b"udp hello");
    assert_eq!(req.ud.unwrap().remote, ip(A));
    assert_eq!(n.kinds(0), vec![Established]);
    let ud = n.s[0].events[0].ud.unwrap();
    assert_eq!(
        (ud.qp_num, ud.qkey, ud.remote),
        (0x22, RDMA_UDP_QKEY, ip(B))
    );
    let names: Vec<_> = n.sent(0).iter().map(|m| m.msg.name()).collect();
    assert_eq!(names, ["ServiceIDResReq"]);

    let mut n = Net::new(LinkConfig::default(), 20);
    n.connect(PortSpace::Udp, b"");
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(0), vec![Unreachable]);
    assert_eq!(n.s[0].events[0].status, 1); // SIDR status: service ID not supported
}

#[test]
fn channels_and_migrate() {
    let mut ep = CmEndpoint::new(cfg(A, 1));
    let ch1 = ep.create_channel();
    let ch2 = ep.create_channel();
    let id = ep.create_id(Some(ch1), PortSpace::Tcp, 0);
    ep.resolve_addr(id, None, SocketAddr::new(ip(B), 1), Duration::ZERO)
        .unwrap();
    ep.migrate_id(id, Some(ch2)).unwrap();
    assert!(ep.poll_event(Some(ch1)).is_none());
    let ev = ep.poll_event(Some(ch2)).unwrap();
    assert_eq!(ev.event.name(), "RDMA_CM_EVENT_ADDR_RESOLVED");
    ep.addr_change(ip(B)); // not our address: nothing
    assert!(ep.poll_event(Some(ch2)).is_none());
    ep.addr_change(ip(A));
    let ev = ep.poll_event(Some(ch2)).unwrap();
    assert_eq!((ev.event, ev.status, ev.id), (AddrChange, 0, id));
    ep.device_removal();
    let ev = ep.poll_event(Some(ch2)).unwrap();
    assert_eq!((ev.event, ev.status, ev.id), (DeviceRemoval, 0, id));
    ep.addr_change(ip(A)); // a removed device reports nothing more
    assert!(ep.poll_any_event().is_none());
}

/// DEVICE_REMOVAL while connected, listening, bound and idle: the ids with an
/// address get the event (idle ones none), nothing more goes on the wire, timers
/// stop, MADs are ignored, every call but destroy fails with ENODEV.
#[test]
fn device_removal_ends_everything_with_enodev() {
    let mut n = Net::new(LinkConfig::default(), 31);
    let l = n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"x");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established]);
    let child = n.s[1].events[0].id;
    let ep = &mut n.s[1].ep;
    let idle = ep.create_id(None, PortSpace::Tcp, 0);
    let bound = ep.create_id(None, PortSpace::Udp, 0);
    ep.bind_addr(bound, SocketAddr::new(ip(B), 0)).unwrap();
    let wild = ep.create_id(None, PortSpace::Tcp, 0);
    ep.bind_addr(wild, "0.0.0.0:7000".parse().unwrap()).unwrap();
    ep.listen(wild, 1).unwrap();
    ep.device_removal();
    ep.device_removal(); // idempotent
    let mut got = Vec::new();
    while let Some(ev) = ep.poll_any_event() {
        assert_eq!((ev.event, ev.status), (DeviceRemoval, 0));
        got.push(ev.id);
    }
    got.sort();
    let mut want = vec![l, child, bound, wild];
    want.sort();
    assert_eq!(got, want, "idle id gets nothing, the others one each");
    assert!(ep.poll_timeout().is_none());
    let now = n.clock.now();
    assert_eq!(ep.disconnect(now, child), Err(Error::NoDevice));
    assert_eq!(ep.listen(idle, 1), Err(Error::NoDevice));
    assert_eq!(
        ep.resolve_addr(idle, None, SocketAddr::new(ip(A), 1), Duration::ZERO),
        Err(Error::NoDevice)
    );
    assert_eq!(Error::NoDevice.errno(), 19);
    // destroying still works and sends nothing (no DREQ for the connection)
    for h in [child, l, idle, bound, wild] {
        ep.destroy_id(now, h).unwrap();
    }
    assert!(ep.poll_transmit().is_none());
    // the peer's disconnect gets no answer: it times out into DISCONNECTED
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(30)));
    assert!(n.sent(1).iter().all(|m| m.msg.name() != "DisconnectReply"));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
    assert!(n.s[1].events.iter().all(|e| e.event != Disconnected));
}

/// `resolve_addr_routed`: what the kernel's route lookup said decides the source
/// address, an unreachable destination fails the call (ENETUNREACH, as
/// `rdma_resolve_ip`), a source without our device is ADDR_ERROR -ENODEV.
#[test]
fn resolve_addr_follows_the_route_lookup() {
    use cm::RouteHint;
    let dst = SocketAddr::new(ip("192.0.2.7"), PORT);
    let mut ep = CmEndpoint::new(cfg(A, 1));
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    assert_eq!(
        ep.resolve_addr_routed(id, None, dst, Duration::ZERO, RouteHint::Unreachable(101)),
        Err(Error::NoRoute(101))
    );
    assert_eq!(Error::NoRoute(101).errno(), 101);
    assert!(ep.poll_any_event().is_none());
    assert_eq!(ep.state(id).unwrap(), CmState::Idle);
    // the kernel would leave from an address that is not ours
    ep.resolve_addr_routed(id, None, dst, Duration::ZERO, RouteHint::Source(ip(B)))
        .unwrap();
    let ev = ep.poll_any_event().unwrap();
    assert_eq!((ev.event, ev.status), (AddrError, -19));
    assert_eq!(ep.state(id).unwrap(), CmState::Idle);
    // ... from ours
    ep.resolve_addr_routed(id, None, dst, Duration::ZERO, RouteHint::Source(ip(A)))
        .unwrap();
    assert_eq!(ep.poll_any_event().unwrap().event, AddrResolved);
    assert_eq!(ep.local_addr(id).unwrap().unwrap().ip(), ip(A));
    // a loopback route may leave from our loopback device's address
    let mut ep = CmEndpoint::new(cfg("127.0.4.9", 2));
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    let lo_dst = SocketAddr::new(ip("127.0.4.10"), PORT);
    ep.resolve_addr_routed(
        id,
        None,
        lo_dst,
        Duration::ZERO,
        RouteHint::Source(ip("127.0.0.1")),
    )
    .unwrap();
    assert_eq!(ep.poll_any_event().unwrap().event, AddrResolved);
    assert_eq!(ep.local_addr(id).unwrap().unwrap().ip(), ip("127.0.4.9"));
    // a bound id keeps its address whatever the hint says
    let mut ep = CmEndpoint::new(cfg(A, 3));
    let id = ep.create_id(None, PortSpace::Tcp, 0);
    let src = SocketAddr::new(ip(A), 0);
    ep.resolve_addr_routed(id, Some(src), dst, Duration::ZERO, RouteHint::Source(ip(B)))
        .unwrap();
    assert_eq!(ep.poll_any_event().unwrap().event, AddrResolved);
}

/// The core property: under loss, duplication and reordering, every connection
/// attempt and every disconnect ends with events on both sides and the network
/// goes quiet (no timer left armed, nothing in flight).
#[test]
fn lossy_network_never_hangs() {
    let mut established = 0;
    for seed in 0..24u64 {
        let link = LinkConfig {
            loss: 0.25,
            dup: 0.15,
            reorder: 0.2,
            jitter: Duration::from_micros(30),
            reorder_delay: Duration::from_millis(3),
            ..LinkConfig::default()
        };
        let mut n = Net::new(link, 100 + seed);
        if seed % 5 == 4 {
            n.s[1].on_request = OnRequest::Reject;
        }
        n.listen(PortSpace::Tcp);
        let c = n.connect(PortSpace::Tcp, b"x");
        assert!(
            n.drive(Duration::from_secs(60)),
            "seed {seed}: connect hung"
        );
        let ck = n.kinds(0);
        assert_eq!(ck.len(), 1, "seed {seed}: {ck:?}");
        match ck[0] {
            Established => {
                established += 1;
                let now = n.clock.now();
                n.s[0].ep.disconnect(now, c).unwrap();
                assert!(
                    n.drive(Duration::from_secs(60)),
                    "seed {seed}: disconnect hung"
                );
                assert_eq!(
                    n.kinds(0),
                    vec![Established, Disconnected, TimewaitExit],
                    "seed {seed}"
                );
                let sk = n.kinds(1);
                assert_eq!(sk[0], ConnectRequest, "seed {seed}");
                assert_eq!(sk.last(), Some(&TimewaitExit), "seed {seed}: {sk:?}");
                assert!(sk.contains(&Disconnected), "seed {seed}: {sk:?}");
                assert_eq!(
                    sk.iter().filter(|&&k| k == ConnectRequest).count(),
                    1,
                    "seed {seed}"
                );
            }
            Rejected => assert_eq!(n.s[0].events[0].status, 28, "seed {seed}"),
            other => panic!("seed {seed}: unexpected {other:?}"),
        }
    }
    assert!(established >= 15, "{established}");
}

/// Many connections at once to one listener, as cmtime does.
#[test]
fn many_connections() {
    let mut n = Net::new(LinkConfig::lossy(0.05), 77);
    n.listen(PortSpace::Tcp);
    let ids: Vec<_> = (0..100).map(|_| n.connect(PortSpace::Tcp, b"")).collect();
    assert!(n.drive(Duration::from_secs(60)));
    assert_eq!(
        n.kinds(0).iter().filter(|&&k| k == Established).count(),
        100
    );
    let now = n.clock.now();
    for id in ids {
        n.s[0].ep.disconnect(now, id).unwrap();
    }
    assert!(n.drive(Duration::from_secs(60)));
    assert_eq!(
        n.kinds(0).iter().filter(|&&k| k == TimewaitExit).count(),
        100
    );
    assert_eq!(
        n.kinds(1).iter().filter(|&&k| k == TimewaitExit).count(),
        100
    );
}

#[test]
#[ignore]
fn debug_seed() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let link = LinkConfig {
        loss: 0.25,
        dup: 0.15,
        reorder: 0.2,
        jitter: Duration::from_micros(30),
        reorder_delay: Duration::from_millis(3),
        ..LinkConfig::default()
    };
    let mut n = Net::new(link, 100 + seed);
    n.listen(PortSpace::Tcp);
    n.connect(PortSpace::Tcp, b"x");
    n.drive(Duration::from_secs(60));
    for (f, b) in &n.log {
        eprintln!("{f}: {}", CmMadRepr::parse_bytes(b).unwrap());
    }
    eprintln!("{:?}\n{:?}", n.kinds(0), n.kinds(1));
}

/// The simulated exchange, wrapped as RoCEv2 (UDP 4791, BTH UD SEND_ONLY to QP1,
/// DETH Q_Key 0x80010000), decodes in tshark as IB CM. Skipped without tshark.
#[test]
fn sim_capture_decodes_in_tshark() {
    let mut n = Net::new(LinkConfig::default(), 42);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"pcap");
    assert!(n.drive(Duration::from_secs(1)));
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(1)));
    let mut w = sim::PcapWriter::new(Vec::new()).unwrap();
    let addr = |i: usize| if i == 0 { [10, 0, 0, 1] } else { [10, 0, 0, 2] };
    for (k, (from, mad)) in n.log.iter().enumerate() {
        let mut p = vec![0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0x80, 0, 0, k as u8];
        p.extend_from_slice(&[0x80, 0x01, 0x00, 0x00, 0, 0, 0, 1]);
        p.extend_from_slice(mad);
        p.extend_from_slice(&[0; 4]); // ICRC (tshark does not check it)
        w.write_ipv4_udp(
            Duration::from_millis(k as u64),
            (addr(*from), 49152),
            (addr(1 - from), 4791),
            0,
            &p,
        )
        .unwrap();
    }
    let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join("cm-sim.pcap");
    std::fs::write(&path, w.into_inner()).unwrap();
    let Ok(out) = std::process::Command::new("tshark")
        .args([
            "-r",
            path.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "_ws.col.Info",
        ])
        .output()
    else {
        eprintln!(
            "tshark not installed: skipped the decode check ({})",
            path.display()
        );
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<_> = text.lines().map(str::trim).collect();
    assert_eq!(
        lines,
        [
            "CM: ConnectRequest",
            "CM: ConnectReply",
            "CM: ReadyToUse",
            "CM: DisconnectRequest",
            "CM: DisconnectReply"
        ],
        "{text}"
    );
}

/// A REQ captured from Linux rping (rxe) arrives at our listener: the CONNECT_REQUEST
/// carries its values, and the QP attributes follow the kernel's PSN convention
/// (our sq_psn is the REQ's starting PSN, as Linux's cm_req_handler sets it).
#[test]
fn linux_captured_req_is_accepted() {
    let req: &[u8; 256] = include_bytes!("../../wire/testdata/cm/req.mad");
    let mut ep = CmEndpoint::new(cfg("10.99.1.2", 5));
    let l = ep.create_id(None, PortSpace::Tcp, 0);
    ep.bind_addr(l, "10.99.1.2:7174".parse().unwrap()).unwrap();
    ep.listen(l, 1).unwrap();
    let t0 = sim::Clock::new().now();
    ep.handle_mad(t0, ip("10.99.1.1"), ip("10.99.1.2"), req);
    let ev = ep.poll_event(None).unwrap();
    assert_eq!(ev.event, ConnectRequest);
    assert_eq!(ev.listen_id, Some(l));
    assert_eq!(ev.param.qp_num, 0x11);
    assert_eq!(
        ep.peer_addr(ev.id).unwrap(),
        Some("10.99.1.1:40327".parse().unwrap())
    );
    let a = ep.qp_attrs(ev.id).unwrap();
    assert_eq!(a.sq_psn, 0x94_0f47);
    assert_eq!(a.dest_qp_num, 0x11);
    ep.accept(
        t0,
        ev.id,
        &ConnParam {
            qp_num: 0x99,
            ..ConnParam::default()
        },
    )
    .unwrap();
    let rep = CmMadRepr::parse_bytes(&ep.poll_transmit().unwrap().mad).unwrap();
    let CmMsgRepr::Rep(r) = rep.msg else { panic!() };
    assert_eq!(
        rep.tid, 0x0000_0002_0f7c_8682,
        "REP reuses the REQ's TID, as Linux does"
    );
    assert_eq!(r.remote_comm_id, 0x8286_7c0f);
    assert_eq!(r.starting_psn, a.rq_psn);
    // Linux's RTU for it (from the same capture, comm IDs patched to ours) establishes.
    let mut rtu = *include_bytes!("../../wire/testdata/cm/rtu.mad");
    rtu[28..32].copy_from_slice(&r.local_comm_id.to_be_bytes());
    ep.handle_mad(t0, ip("10.99.1.1"), ip("10.99.1.2"), &rtu);
    assert_eq!(ep.poll_event(None).unwrap().event, Established);
}

/// Race: the server accepts after the client already gave up (its REQ ran out of
/// retries and it sent REJ(timeout)): the server's child gets REJECTED and the late
/// accept is refused, nothing hangs.
#[test]
fn late_accept_after_client_timeout() {
    let mut n = Net::new(LinkConfig::default(), 30);
    n.s[1].ep = CmEndpoint::new(CmConfig {
        mra_service_timeout: 9, // 2 ms: the MRA barely extends the client's wait
        ..cfg(B, 61)
    });
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(30)));
    assert_eq!(n.kinds(0), vec![Unreachable]);
    assert_eq!(n.kinds(1), vec![ConnectRequest, Rejected]);
    assert_eq!(n.s[1].events[1].status, 4);
    let child = n.s[1].events[0].id;
    let now = n.clock.now();
    assert_eq!(
        n.s[1].ep.accept(now, child, &ConnParam::default()),
        Err(Error::InvalidState(CmState::Idle))
    );
    assert_eq!(n.s[0].ep.state(c).unwrap(), CmState::Idle);
}

/// Race: the RTU is lost and the client disconnects at once: the server sees the
/// DREQ while still waiting for the RTU and reports DISCONNECTED (as the kernel CMA
/// does), both sides reach TIMEWAIT_EXIT.
#[test]
fn disconnect_overtakes_lost_rtu() {
    let mut n = Net::new(LinkConfig::default(), 31);
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_micros(15)); // REQ delivered, REP on its way
    n.links[0].cfg.loss = 1.0;
    n.drive(Duration::from_micros(15)); // REP delivered, RTU lost
    n.links[0].cfg.loss = 0.0;
    assert_eq!(n.kinds(0), vec![Established]);
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
    assert_eq!(n.kinds(1), vec![ConnectRequest, Disconnected, TimewaitExit]);
}

/// Race: a reject and the client's destroy cross on the wire: each side ends with
/// at most one final event and the network goes quiet.
#[test]
fn reject_crosses_active_destroy() {
    let mut n = Net::new(LinkConfig::default(), 32);
    n.s[1].on_request = OnRequest::Ignore;
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    n.drive(Duration::from_micros(15));
    let child = n.s[1].events[0].id;
    let now = n.clock.now();
    n.s[1].ep.reject(child, b"", None).unwrap();
    n.s[0].ep.destroy_id(now, c).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    assert!(n.kinds(0).is_empty());
    // the server's child already finished with its own REJ: no further event
    assert_eq!(n.kinds(1), vec![ConnectRequest]);
}

/// The lossy sweep over many more seeds, half of them rejected (virtual time: fast).
#[test]
fn lossy_network_never_hangs_many_seeds() {
    for seed in 0..500u64 {
        let link = LinkConfig {
            loss: 0.3,
            dup: 0.2,
            reorder: 0.3,
            jitter: Duration::from_micros(30),
            reorder_delay: Duration::from_millis(5),
            ..LinkConfig::default()
        };
        let mut n = Net::new(link, 1000 + seed);
        n.s[1].on_request = [OnRequest::Accept, OnRequest::Reject][(seed % 2) as usize];
        n.listen(PortSpace::Tcp);
        let c = n.connect(PortSpace::Tcp, b"x");
        assert!(
            n.drive(Duration::from_secs(120)),
            "seed {seed}: connect hung"
        );
        let k = n.kinds(0);
        assert_eq!(k.len(), 1, "seed {seed}: {k:?}");
        if k[0] == Established {
            let now = n.clock.now();
            n.s[0].ep.disconnect(now, c).unwrap();
            assert!(
                n.drive(Duration::from_secs(120)),
                "seed {seed}: disconnect hung"
            );
            assert_eq!(n.kinds(0).last(), Some(&TimewaitExit), "seed {seed}");
            assert_eq!(n.kinds(1).last(), Some(&TimewaitExit), "seed {seed}");
        }
    }
}

/// The IB port space (RDMA_PS_IB, service ID 0x013F_xxxx) connects like TCP.
#[test]
fn ib_port_space_connects() {
    let mut n = Net::new(LinkConfig::default(), 33);
    n.listen(PortSpace::Ib);
    n.connect(PortSpace::Ib, b"ib");
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.kinds(0), vec![Established]);
    let CmMsgRepr::Req(r) = &n.sent(0)[0].msg else {
        panic!()
    };
    assert_eq!(r.service_id, 0x0000_0000_013f_0000 | u64::from(PORT));
    // a TCP-space client does not reach the IB-space listener
    let mut n = Net::new(LinkConfig::default(), 34);
    n.listen(PortSpace::Ib);
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(1)));
    assert_eq!(n.s[0].events[0].status, 8);
}

/// A received DREQ leaves the CM-managed QP usable (Linux: only the user's own
/// `rdma_disconnect` moves it to ERR), so an ACK still in flight can complete the last SEND.
#[test]
fn received_dreq_leaves_qp_until_own_disconnect() {
    let mut n = Net::new(LinkConfig::default(), 31);
    n.s[1].disconnect_on_dreq = false;
    n.listen(PortSpace::Tcp);
    let c = n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    let s_id = n.s[1].events[0].id;
    while n.s[1].ep.poll_qp_action().is_some() {}
    let now = n.clock.now();
    n.s[0].ep.disconnect(now, c).unwrap();
    // the active side errs its own QP at once
    let acts: Vec<_> = std::iter::from_fn(|| n.s[0].ep.poll_qp_action()).collect();
    assert!(acts.iter().any(|(h, a)| *h == c && *a == QpAction::Error));
    n.drive(Duration::from_millis(50));
    assert_eq!(n.kinds(1), vec![ConnectRequest, Established, Disconnected]);
    assert_eq!(
        n.s[1].ep.poll_qp_action(),
        None,
        "DREQ alone must not touch the QP"
    );
    let now = n.clock.now();
    n.s[1].ep.disconnect(now, s_id).unwrap();
    assert_eq!(n.s[1].ep.poll_qp_action(), Some((s_id, QpAction::Error)));
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Disconnected, TimewaitExit]);
}

#[test]
fn requests_past_max_ids_are_refused_with_no_resources() {
    let mut n = Net::new(LinkConfig::default(), 31);
    n.s[1].ep = CmEndpoint::new(CmConfig {
        max_ids: 3,
        ..cfg(B, 64)
    });
    n.listen(PortSpace::Tcp);
    // listener + two children fill the table
    n.connect(PortSpace::Tcp, b"");
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Established]);
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0), vec![Established, Established, Rejected]);
    assert_eq!(n.s[0].events[2].status, 3, "REJ reason: no resources");
    assert_eq!(n.s[1].ep.stats.refused_ids, 1);
    let rej = n
        .sent(1)
        .into_iter()
        .find_map(|m| match m.msg {
            CmMsgRepr::Rej(r) => Some(r),
            _ => None,
        })
        .unwrap();
    assert_eq!(rej.reason, RejReason::NoResources);
    // one child gone: the next request is admitted
    let child = n.s[1].events[0].id;
    let now = n.clock.now();
    n.s[1].ep.destroy_id(now, child).unwrap();
    assert!(n.drive(Duration::from_secs(5)));
    n.connect(PortSpace::Tcp, b"");
    assert!(n.drive(Duration::from_secs(5)));
    assert_eq!(n.kinds(0).last(), Some(&Established));
    assert_eq!(n.s[1].ep.stats.refused_ids, 1);
}
