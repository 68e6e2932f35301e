//! NVMe/RDMA target and host over two soft RoCE devices on loopback addresses
//! (real UDP 4791 sockets, each device on its own 127.0.0.x address), through the
//! RDMA CM with the NVMe/RDMA private data.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cm::driver::CmDevice;
use cm::CmConfig;
use nvme::log::{AdrFam, SubType, TrType};
use nvme::status::FabricsStatus;
use nvme::Status;
use nvmf::host::{discover_with, Controller, HostError, HostOpts};
use nvmf::rdma::{RdmaCounters, RdmaHostTransport, RdmaParams, RdmaTransport};
use nvmf::subsystem::Subsystem;
use nvmf::transport::{HostQueueParams, HostTransport, QueueError, TransportId};
use nvmf::{Listen, NvmfServer, Tgt, TgtParams};
use wire::nvme_rdma::{CmRej, CmRejStatus, CmReq};

mod rdma_common;

const NQN: &str = "nqn.2024-01.io.dpustack:rdma";

fn dev(ip: &str) -> CmDevice {
    // a device just dropped on this address may still hold its UDP socket for a moment
    let t0 = std::time::Instant::now();
    let ctx = loop {
        match verbs::Context::open(ip) {
            Err(e) if t0.elapsed() < Duration::from_secs(3) => {
                eprintln!("open {ip}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.expect("open soft device"),
        }
    };
    let cfg = CmConfig {
        timewait: Duration::from_millis(100),
        ..CmConfig::default()
    };
    CmDevice::open(&ctx, cfg).unwrap()
}

fn start(ip: &str, port: u16, blocks: u64) -> (NvmfServer, TransportId, Arc<RdmaCounters>) {
    start_on(dev(ip), port, blocks)
}

fn start_on(d: CmDevice, port: u16, blocks: u64) -> (NvmfServer, TransportId, Arc<RdmaCounters>) {
    let ip = d.ip();
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "SN-RDMA", "dpustack rdma").unwrap();
    let m = bdev::malloc::MallocBdev::new("m0", blocks, 512).unwrap();
    s.add_ns(1, Arc::new(m), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let transport = RdmaTransport::new(d, RdmaParams::default());
    let counters = transport.counters();
    let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap();
    let trid = TransportId::ip(TrType::Rdma, addr);
    let listen = [Listen {
        trid: trid.clone(),
        discovery_only: false,
    }];
    let srv = NvmfServer::start_with(tgt, transport, &listen, 2).unwrap();
    (srv, trid, counters)
}

/// Waits until the target has torn every queue down and given back every QP, MR
/// and buffer (the CM disconnect reaches it asynchronously).
fn assert_no_leaks(c: &RdmaCounters, what: &str) {
    let t0 = std::time::Instant::now();
    while c.snapshot() != (0, 0, 0) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        c.snapshot(),
        (0, 0, 0),
        "{what}: (qpairs, MRs, buffers lent) left"
    );
}

fn opts() -> HostOpts {
    HostOpts {
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

#[test]
fn discover_connect_io_every_size_several_queues() {
    let (srv, trid, tc) = start("127.0.0.41", 4420, 131072); // 64 MiB
    let host = RdmaHostTransport::new(dev("127.0.0.42"));

    let (_, entries) = discover_with(&host, &trid, &opts()).unwrap();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(
        (
            e.trtype,
            e.adrfam,
            e.subtype,
            e.traddr.as_str(),
            e.trsvcid.as_str()
        ),
        (
            TrType::Rdma,
            AdrFam::Ipv4,
            SubType::Nvme,
            "127.0.0.41",
            "4420"
        )
    );
    assert_eq!(e.subnqn, NQN);
    // TSAS RDMA: QPTYPE connected, PRTYPE not specified, CMS RDMA_CM
    assert_eq!(&e.tsas[..3], &[1, 1, 1]);

    let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 8, 32).unwrap();
    let id = c.identity.as_ref().unwrap();
    assert_eq!(id.mdts, 8, "1 MiB = 2^8 pages");
    // every size from 512 B to 1 MiB (rdma_common::SIZES: powers of two and sizes
    // off them; in-capsule up to 4 KiB on I/O queues, keyed SGL beyond), 32 in
    // flight on each of the 8 queues at once (up to 256 KiB; at most 64 MiB in
    // flight: 512 KiB at qd 16, 1 MiB at qd 8), written, read back from another
    // queue and compared
    let t0 = std::time::Instant::now();
    let ios = rdma_common::qd_sweep(&mut c, rdma_common::SIZES, 32, 64 << 20);
    eprintln!("{ios} I/Os over 8 queues in {:?}", t0.elapsed());

    // an unknown subsystem NQN: Fabrics Connect refused (Invalid Parameters)
    match Controller::connect_with(&host, &trid, "nqn.2024-01.io.dpustack:nope", &opts(), 1, 8) {
        Err(HostError::Status { status, .. }) => assert_eq!(
            status,
            Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true)
        ),
        other => panic!("expected Connect Invalid Parameters, got {other:?}"),
    }
    // the first controller still works
    let data = pattern(8192, 9);
    c.write(0, 1, 100, &data, 512).unwrap();
    assert_eq!(c.read(0, 1, 100, 16, 512).unwrap(), data);
    let (q, mrs, _) = tc.snapshot();
    assert_eq!(q, 9, "admin + 8 I/O queues live on the target");
    assert!(
        mrs >= 18,
        "receive + response regions of 9 queues, plus pool buffers"
    );
    c.shutdown().unwrap();
    assert_eq!(host.counters().snapshot(), (0, 0, 0), "host side");
    assert_no_leaks(&tc, "target after shutdown");
    srv.stop();
}

#[test]
fn cm_reject_with_nvme_rdma_status() {
    let (srv, trid, tc) = start("127.0.0.43", 4420, 2048);
    let host = RdmaHostTransport::new(dev("127.0.0.44"));
    // HSQSIZE 199 (a 200-entry queue) is more than MQES + 1 = 128: REJ INVALID_HSQSIZE
    let p = HostQueueParams {
        hdgst: false,
        ddgst: false,
        timeout: Duration::from_secs(5),
        qid: 0,
        depth: 200,
    };
    match host.connect(&trid, &p) {
        Err(QueueError::Terminated(why)) => {
            assert_eq!(why, nvmf::rdma::host::rej_text(CmRejStatus::InvalidHsqsize))
        }
        Err(e) => panic!("expected REJ, got {e}"),
        Ok(_) => panic!("expected REJ, got a queue"),
    }
    // the REJ private data bytes as Linux nvme-rdma parses them
    assert_eq!(CmRej::new(CmRejStatus::InvalidHsqsize).emit(), [0, 0, 4, 0]);
    // no listener on another port: the CM's own REJ (reason 8)
    let other = TransportId::ip(TrType::Rdma, "127.0.0.43:4421".parse().unwrap());
    match host.connect(&other, &HostQueueParams { depth: 8, ..p }) {
        Err(QueueError::Terminated(why)) => assert!(why.contains("no listener"), "{why}"),
        Err(e) => panic!("expected REJ 8, got {e}"),
        Ok(_) => panic!("expected REJ 8, got a queue"),
    }
    // and the target still takes a good connection
    let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
    let data = pattern(4096, 3);
    c.write(0, 1, 0, &data, 512).unwrap();
    assert_eq!(c.read(0, 1, 0, 8, 512).unwrap(), data);
    c.shutdown().unwrap();
    assert_no_leaks(&tc, "target after rejects and a shutdown");
    srv.stop();
}

/// A host that goes away mid-connection (its queues dropped without shutdown,
/// i.e. a DREQ) does not disturb another controller.
#[test]
fn peer_disappears_others_carry_on() {
    let (srv, trid, tc) = start("127.0.0.45", 4420, 2048);
    let host = RdmaHostTransport::new(dev("127.0.0.46"));
    let host2 = RdmaHostTransport::new(dev("127.0.0.47"));
    let mut a = Controller::connect_with(&host, &trid, NQN, &opts(), 2, 16).unwrap();
    let mut b = Controller::connect_with(&host2, &trid, NQN, &opts(), 2, 16).unwrap();
    let d = pattern(65536, 5);
    a.write(0, 1, 0, &d, 512).unwrap();
    drop(a); // no Property Set / shutdown: the queues just disconnect
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.read(1, 1, 0, 128, 512).unwrap(), d);
    b.write(1, 1, 128, &d, 512).unwrap();
    assert_eq!(b.read(0, 1, 128, 128, 512).unwrap(), d);
    b.shutdown().unwrap();
    assert_no_leaks(&tc, "target after a lost host and a shutdown");
    srv.stop();
}

/// A keyed SGL that reaches past the host's registered region: the target's RDMA
/// READ fails with a remote access error, the queue is torn down (the host sees
/// the CM disconnect), and the target carries on serving other hosts.
#[test]
fn keyed_sgl_past_the_registered_region_tears_the_queue_down() {
    use cm::{ConnParam, EventType, PortSpace};
    use verbs::{AccessFlags, QpCap, SendWr, WrOpcode};

    let (srv, trid, tc) = start("127.0.0.48", 4420, 2048);
    let d = dev("127.0.0.49");
    let t = Duration::from_secs(5);
    let mut id = d.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, trid.socket_addr().unwrap(), t)
        .unwrap();
    id.resolve_route(t).unwrap();
    let cq = d.context().create_cq(32, None).unwrap();
    id.create_qp(&cq, &cq, QpCap::default()).unwrap();
    let req = CmReq {
        recfmt: 0,
        qid: 0,
        hrqsize: 8,
        hsqsize: 7,
        cntlid: 0,
    };
    let ev = id
        .connect(
            &ConnParam {
                private_data: req.emit().to_vec(),
                responder_resources: 16,
                initiator_depth: 16,
                rnr_retry_count: 7,
                ..ConnParam::default()
            },
            t,
        )
        .unwrap()
        .unwrap();
    assert_eq!(ev.event, EventType::Established);
    // REP private data: CRQSIZE = our 8-entry queue
    let rep = wire::nvme_rdma::CmRep::parse(&ev.param.private_data).unwrap();
    assert_eq!(rep.crqsize, 8);
    let data = d
        .pd()
        .reg_mr(
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let cap = d.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    // Fabrics Connect: 1024 bytes of data, but the SGL starts 512 bytes before the end
    let mut sqe = nvme::Sqe::connect(0, 0, 31, 0);
    sqe.set_cid(1);
    sqe.set_sgl(nvme::sgl::SglDescriptor::keyed_data_block(
        data.addr() + 4096 - 512,
        1024,
        data.rkey(),
        false,
    ));
    cap.write(0, sqe.as_bytes());
    let sge = [cap.sge(0, 64)];
    id.qp()
        .unwrap()
        .post_send(&[SendWr::new(1, WrOpcode::Send, &sge)])
        .unwrap();
    let ev = id.get_event(Some(t)).unwrap();
    assert_eq!(
        ev.event,
        EventType::Disconnected,
        "the target drops the queue"
    );
    drop(id);

    // other hosts are served
    let host = RdmaHostTransport::new(dev("127.0.0.50"));
    let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
    let p = pattern(4096, 4);
    c.write(0, 1, 8, &p, 512).unwrap();
    assert_eq!(c.read(0, 1, 8, 8, 512).unwrap(), p);
    c.shutdown().unwrap();
    assert_no_leaks(&tc, "target after a failed RDMA READ");
    srv.stop();
}

/// Data named by a Last Segment list of several keyed data blocks in the capsule
/// (MSDBD 16, as SPDK's RDMA transport): the target gathers a write with one RDMA READ
/// per block into one buffer and scatters a read with one RDMA WRITE per block, the
/// response behind them; a list longer than MSDBD is refused with Invalid Number of
/// SGL Descriptors.
#[test]
fn keyed_descriptor_lists() {
    let (srv, trid, tc) = start("127.0.0.83", 4420, 8192);
    for split in [2usize, 3, 16] {
        let host = RdmaHostTransport::new(dev("127.0.0.84")).with_keyed_split(split);
        let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 2, 16).unwrap();
        if split == 2 {
            let raw = &c.identity.as_ref().unwrap().raw;
            assert_eq!(raw[1803], 16, "Identify MSDBD");
        }
        // sizes past the 4 KiB in-capsule limit, most not a multiple of the split
        for (n, size) in [8192usize, 12 * 1024, 36 * 1024, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let nlb = (size / 512) as u32;
            let slba = (n as u64 * 211 + split as u64) % (8192 - nlb as u64);
            let data = pattern(size, (split * 10 + n) as u32);
            c.write(n % 2, 1, slba, &data, 512).unwrap();
            let back = c.read((n + 1) % 2, 1, slba, nlb, 512).unwrap();
            assert!(back == data, "split {split}, size {size}: data differs");
        }
        c.shutdown().unwrap();
        drop(host);
        assert_no_leaks(&tc, "after a keyed-list controller");
    }
    // 17 descriptors: one more than MSDBD
    let host = RdmaHostTransport::new(dev("127.0.0.84")).with_keyed_split(17);
    let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
    match c.write(0, 1, 0, &pattern(64 * 1024, 1), 512) {
        Err(HostError::Status { status, .. }) => {
            assert_eq!(
                (u8::from(status.sct()), status.sc()),
                (0, 0x0e),
                "{status:?}"
            )
        }
        other => panic!("expected Invalid Number of SGL Descriptors, got {other:?}"),
    }
    // the queue still serves a well-formed command afterwards
    let host1 = RdmaHostTransport::new(dev("127.0.0.85"));
    let mut c1 = Controller::connect_with(&host1, &trid, NQN, &opts(), 1, 8).unwrap();
    c1.write(0, 1, 0, &pattern(8192, 2), 512).unwrap();
    assert_eq!(c1.read(0, 1, 0, 16, 512).unwrap(), pattern(8192, 2));
    c.shutdown().unwrap();
    c1.shutdown().unwrap();
    assert_no_leaks(&tc, "end");
    srv.stop();
}

/// A host that sends the CM REQ, gets the REP and never sends the RTU (nor any
/// capsule): the target's CM retries the REP, gives up (REJ timeout), and the
/// target tears the half-open queue down (leak counters back to zero) while
/// another host is served meanwhile.
#[test]
fn host_that_never_sends_rtu_is_timed_out() {
    use cm::{ConnParam, EventType, PortSpace};
    // the target gives up after 3 REP retries (librdmacm's default is 15), each waiting
    // the host's CM response timeout plus twice its own packet lifetime (2^10 x 4 us)
    let tctx = verbs::Context::open("127.0.0.86").expect("open soft device");
    let td = CmDevice::open(
        &tctx,
        CmConfig {
            max_cm_retries: 3,
            packet_life_time: 10,
            timewait: Duration::from_millis(100),
            ..CmConfig::default()
        },
    )
    .unwrap();
    let (srv, trid, tc) = start_on(td, 4420, 2048);
    // the host announces a short CM response timeout (2^14 x 4.096 us = 67 ms)
    let ctx = verbs::Context::open("127.0.0.87").expect("open soft device");
    let d = CmDevice::open(
        &ctx,
        CmConfig {
            cm_response_timeout: 14,
            timewait: Duration::from_millis(100),
            ..CmConfig::default()
        },
    )
    .unwrap();
    let t = Duration::from_secs(5);
    let id = d.create_id(None, PortSpace::Tcp);
    id.resolve_addr(None, trid.socket_addr().unwrap(), t)
        .unwrap();
    id.resolve_route(t).unwrap();
    let req = CmReq {
        recfmt: 0,
        qid: 0,
        hrqsize: 8,
        hsqsize: 7,
        cntlid: 0,
    };
    let param = ConnParam {
        private_data: req.emit().to_vec(),
        qp_num: 0x77,
        responder_resources: 4,
        initiator_depth: 4,
        ..ConnParam::default()
    };
    // no QP attached: CONNECT_RESPONSE, and no rdma_establish (so no RTU) follows
    let ev = id.connect(&param, t).unwrap().expect("an event");
    assert_eq!(ev.event, EventType::ConnectResponse);
    let t0 = std::time::Instant::now();
    while tc.snapshot().0 == 0 && t0.elapsed() < t {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        tc.snapshot().0,
        1,
        "the half-open queue exists on the target"
    );
    // another host is served meanwhile
    let host = RdmaHostTransport::new(dev("127.0.0.88"));
    let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
    let data = pattern(8192, 4);
    c.write(0, 1, 0, &data, 512).unwrap();
    assert_eq!(c.read(0, 1, 0, 16, 512).unwrap(), data);
    c.shutdown().unwrap();
    // 3 REP retries: the target gives up within a few seconds
    let t0 = std::time::Instant::now();
    while tc.snapshot() != (0, 0, 0) && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        tc.snapshot(),
        (0, 0, 0),
        "the half-open queue was not torn down"
    );
    let gave_up = t0.elapsed();
    drop(id);
    srv.stop();
    eprintln!("target gave up on the missing RTU {gave_up:?} after the other host finished");
}

/// A read whose RDMA WRITE post is refused by the provider (fault injected: the
/// last WRITE of the read's keyed blocks is rejected at post time, the ones before
/// it go out): no success response may follow for data that was not sent. The
/// target posts the WRITEs and the response SEND as one WR list, so the SEND behind
/// a refused WRITE is never posted, and the queue is torn down: the host's read
/// fails (it must not complete with success), another queue carries on, nothing
/// leaks. Before the fix, each WRITE was posted alone and the SEND went out anyway.
#[test]
fn refused_rdma_write_post_never_sends_success() {
    let d = dev("127.0.0.89");
    let ip = d.ip();
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "SN-RDMA", "dpustack rdma").unwrap();
    let m = bdev::malloc::MallocBdev::new("m0", 2048, 512).unwrap();
    s.add_ns(1, Arc::new(m), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let transport = RdmaTransport::new(d, RdmaParams::default());
    let tc = transport.counters();
    let faults = transport.faults();
    let trid = TransportId::ip(TrType::Rdma, format!("{ip}:4420").parse().unwrap());
    let listen = [Listen {
        trid: trid.clone(),
        discovery_only: false,
    }];
    let srv = NvmfServer::start_with(tgt, transport, &listen, 2).unwrap();

    // a host device per round (a fresh address: no wait for the last one's socket)
    for (split, hip) in [(1usize, "127.0.0.90"), (2, "127.0.0.95"), (3, "127.0.0.96")] {
        let host = RdmaHostTransport::new(dev(hip)).with_keyed_split(split);
        let mut c = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
        let mut other = Controller::connect_with(&host, &trid, NQN, &opts(), 1, 8).unwrap();
        let data = pattern(24 * 1024, split as u32);
        c.write(0, 1, 0, &data, 512).unwrap();
        assert_eq!(c.read(0, 1, 0, 48, 512).unwrap(), data, "before the fault");
        faults
            .refuse_write_posts
            .store(1, std::sync::atomic::Ordering::Release);
        // new data on the medium, so a read served without its WRITEs would return
        // the host buffer's previous contents
        let data2 = pattern(24 * 1024, 100 + split as u32);
        other.write(0, 1, 0, &data2, 512).unwrap();
        // the read at the queue level: every completion that arrives is kept, also
        // one that came in just before the target's disconnect
        let io = &mut c.io[0];
        let cid = io
            .submit(nvmf::host::read_sqe(1, 0, 48), &[], 24 * 1024)
            .unwrap();
        let t0 = std::time::Instant::now();
        let err = loop {
            match io.progress(true) {
                Err(e) => break e,
                Ok(_) if t0.elapsed() > Duration::from_secs(5) => {
                    panic!("split {split}: the queue was not torn down")
                }
                Ok(_) => {}
            }
        };
        eprintln!("split {split}: the queue failed as it must: {err}");
        while let Some(done) = io.pop_completion() {
            assert!(
                !(done.cqe.cid() == cid && done.cqe.status().is_success()),
                "split {split}: success for a read whose WRITE was refused (data {})",
                if done.data == data2 {
                    "right anyway"
                } else {
                    "wrong"
                }
            );
        }
        assert_eq!(
            faults
                .refuse_write_posts
                .load(std::sync::atomic::Ordering::Acquire),
            0,
            "the fault was used by the read"
        );
        // the other controller is served
        assert_eq!(other.read(0, 1, 0, 48, 512).unwrap(), data2);
        other.shutdown().unwrap();
        drop(c);
        drop(host);
        assert_no_leaks(&tc, "after a refused WRITE post");
    }
    srv.stop();
}
