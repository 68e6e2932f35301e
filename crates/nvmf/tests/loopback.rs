//! Target + host on 127.0.0.1: discovery, connect, identify, data verification
//! with digests on and off, small and big I/O, many queues, error statuses, and
//! malformed PDUs that must not disturb other connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::features::FeatureId;
use nvme::status::{CommandSpecificStatus, FabricsStatus, GenericStatus, MediaStatus};
use nvme::{AdminOpcode, IoOpcode, Sqe, Status};
use nvmf::ctrlr::{AdminOutcome, Ctrlr};
use nvmf::host::{self, Controller, HostError, HostOpts};
use nvmf::subsystem::Subsystem;
use nvmf::{ListenSpec, NvmfServer, Tgt, TgtParams, DISCOVERY_NQN};
use wire::nvme_tcp::{Digests, PduRepr};

const NQN: &str = "nqn.2024-01.io.dpustack:test";
const NQN2: &str = "nqn.2024-01.io.dpustack:restricted";
const BS: u32 = 512;

fn server() -> NvmfServer {
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "SN-TEST", "dpustack test").unwrap();
    let m = bdev::malloc::MallocBdev::new("m0", 16384, BS).unwrap(); // 8 MiB
    s.add_ns(1, Arc::new(m), None).unwrap();
    let n = bdev::null::NullBdev::new("n0", 1 << 20, 4096).unwrap();
    s.add_ns(2, Arc::new(n), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let mut r = Subsystem::new(NQN2, "SN-R", "restricted").unwrap();
    r.add_host("nqn.2024-01.io.dpustack:allowed");
    r.add_ns(
        0,
        Arc::new(bdev::malloc::MallocBdev::new("m1", 64, BS).unwrap()),
        None,
    )
    .unwrap();
    tgt.add_subsystem(r).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    NvmfServer::start(
        tgt,
        &[
            ListenSpec {
                addr,
                discovery_only: false,
            },
            ListenSpec {
                addr,
                discovery_only: true,
            },
        ],
        2,
    )
    .unwrap()
}

fn opts(dig: bool) -> HostOpts {
    HostOpts {
        hdgst: dig,
        ddgst: dig,
        kato_ms: 10_000,
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn discovery_on_both_ports() {
    let srv = server();
    for &a in srv.addrs() {
        let (genctr, entries) = host::discover(a, &opts(false)).unwrap();
        assert!(genctr >= 1);
        // the default host sees the open subsystem only, on the I/O listener only
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].subnqn, NQN);
        assert_eq!(entries[0].trsvcid, srv.addrs()[0].port().to_string());
        assert_eq!(entries[0].traddr, "127.0.0.1");
    }
    // the allowed host sees both
    let mut o = opts(false);
    o.hostnqn = "nqn.2024-01.io.dpustack:allowed".into();
    let (_, entries) = host::discover(srv.addrs()[0], &o).unwrap();
    assert_eq!(entries.len(), 2);
    // log page paging: offset 1024, one record
    let mut c = Controller::connect(srv.addrs()[1], DISCOVERY_NQN, &o, 0, 0).unwrap();
    let page = c.get_log_page(0x70, 1024, 1024).unwrap();
    assert_eq!(page.len(), 1024);
    assert_eq!(page[0], 3); // TRTYPE TCP
    let full = c.get_log_page(0x70, 0, 3072).unwrap();
    assert_eq!(&full[1024..2048], &page[..]);
    assert_eq!(u64::from_le_bytes(full[8..16].try_into().unwrap()), 2);
    c.shutdown().unwrap();
}

#[test]
fn write_read_verify_digests_on_and_off() {
    let srv = server();
    let a = srv.addrs()[0];
    for dig in [false, true] {
        let mut c = Controller::connect(a, NQN, &opts(dig), 2, 32).unwrap();
        assert_eq!(c.io[0].digests().header, dig);
        let id = c.identity.clone().unwrap();
        assert_eq!(id.subnqn, NQN);
        assert_eq!(id.serial, "SN-TEST");
        assert_eq!(id.cntrltype, 1);
        assert_eq!(c.active_namespaces().unwrap(), vec![1, 2]);
        let ns = c.identify_ns(1).unwrap();
        assert_eq!(ns.blocks, 16384);
        assert_eq!(ns.block_size, BS);
        // small (in-capsule), medium (R2T), big (R2T split by MAXH2CDATA, C2H chunks)
        for (i, blocks) in [1u32, 8, 64, 1024, 2048].into_iter().enumerate() {
            let data = pattern((blocks * BS) as usize, i as u8 + dig as u8 * 7);
            let slba = 100 + i as u64 * 2048;
            c.write(i % 2, 1, slba, &data, BS).unwrap();
            let back = c.read((i + 1) % 2, 1, slba, blocks, BS).unwrap();
            assert!(back == data, "mismatch at {blocks} blocks, digests {dig}");
        }
        c.keep_alive().unwrap();
        c.shutdown().unwrap();
    }
}

#[test]
fn many_queues_queue_depth_and_null_bdev() {
    let srv = server();
    let a = srv.addrs()[0];
    let mut c = Controller::connect(a, NQN, &opts(false), 8, 16).unwrap();
    assert_eq!(c.io.len(), 8);
    // pipeline 16 writes on each queue, then read everything back
    for (qi, q) in c.io.iter_mut().enumerate() {
        for k in 0..16u64 {
            let slba = (qi as u64 * 16 + k) * 8;
            let data = pattern(4096, (qi * 16 + k as usize) as u8);
            q.submit(host::write_sqe(1, slba, 8), &data, 0).unwrap();
        }
    }
    for q in c.io.iter_mut() {
        let mut n = 0;
        while n < 16 {
            q.progress(true).unwrap();
            while let Some(comp) = q.pop_completion() {
                assert!(comp.cqe.status().is_success());
                n += 1;
            }
        }
    }
    for qi in 0..8usize {
        for k in 0..16u64 {
            let slba = (qi as u64 * 16 + k) * 8;
            let back = c.read(7 - qi, 1, slba, 8, BS).unwrap();
            assert_eq!(back, pattern(4096, (qi * 16 + k as usize) as u8));
        }
    }
    // null bdev: reads are zeroes, writes are discarded
    let ns2 = c.identify_ns(2).unwrap();
    assert_eq!(ns2.block_size, 4096);
    c.write(0, 2, 5, &[0xaa; 8192], 4096).unwrap();
    assert_eq!(c.read(0, 2, 5, 2, 4096).unwrap(), vec![0; 8192]);
}

fn status_of(c: &Controller, s: &nvmf::host::Completion) -> Status {
    let _ = c;
    s.cqe.status()
}

#[test]
fn nvme_statuses_for_bad_commands() {
    let srv = server();
    let a = srv.addrs()[0];
    let mut c = Controller::connect(a, NQN, &opts(false), 1, 8).unwrap();
    // LBA out of range
    let r = c.io_exec(0, host::read_sqe(1, 16384, 1), &[], BS).unwrap();
    assert_eq!(
        status_of(&c, &r),
        Status::generic(GenericStatus::LbaOutOfRange).with_dnr(true)
    );
    // invalid namespace
    let r = c.io_exec(0, host::read_sqe(9, 0, 1), &[], BS).unwrap();
    assert!(r
        .cqe
        .status()
        .is_generic(GenericStatus::InvalidNamespaceOrFormat));
    // SGL length disagrees with NLB
    let r = c.io_exec(0, host::read_sqe(1, 0, 2), &[], BS).unwrap();
    assert!(r
        .cqe
        .status()
        .is_generic(GenericStatus::DataSglLengthInvalid));
    // unknown opcode
    let mut sqe = Sqe::zeroed();
    sqe.set_opcode(0x7e);
    sqe.set_nsid(1);
    let r = c.io_exec(0, sqe, &[], 0).unwrap();
    assert!(r.cqe.status().is_generic(GenericStatus::InvalidOpcode));
    // compare: equal then different; write zeroes; DSM deallocate; flush
    let data = pattern(1024, 3);
    c.write(0, 1, 10, &data, BS).unwrap();
    let cmp = Sqe::rw(IoOpcode::Compare, 0, 1, 10, 2);
    assert!(c
        .io_exec(0, cmp, &data, 0)
        .unwrap()
        .cqe
        .status()
        .is_success());
    let r = c.io_exec(0, cmp, &pattern(1024, 4), 0).unwrap();
    assert_eq!(r.cqe.status(), Status::media(MediaStatus::CompareFailure));
    let wz = Sqe::rw(IoOpcode::WriteZeroes, 0, 1, 10, 1);
    assert!(c.io_exec(0, wz, &[], 0).unwrap().cqe.status().is_success());
    let back = c.read(0, 1, 10, 2, BS).unwrap();
    assert_eq!(&back[..512], &[0u8; 512][..]);
    assert_eq!(&back[512..], &data[512..]);
    let mut dsm = Sqe::zeroed();
    dsm.set_opcode(IoOpcode::DatasetManagement.raw());
    dsm.set_nsid(1);
    dsm.set_cdw10(0); // one range
    dsm.set_cdw11(1 << 2); // AD
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&1u32.to_le_bytes());
    range[8..16].copy_from_slice(&11u64.to_le_bytes());
    assert!(c
        .io_exec(0, dsm, &range, 0)
        .unwrap()
        .cqe
        .status()
        .is_success());
    assert_eq!(c.read(0, 1, 11, 1, BS).unwrap(), vec![0; 512]);
    let mut fl = Sqe::zeroed();
    fl.set_opcode(IoOpcode::Flush.raw());
    fl.set_nsid(1);
    assert!(c.io_exec(0, fl, &[], 0).unwrap().cqe.status().is_success());
    // admin: an unsupported log page is "Invalid Log Page" (NVMe base 2.0, Get Log
    // Page command specific status 09h), do not retry
    match c.get_log_page(0x42, 0, 512) {
        Err(HostError::Status { status, .. }) => assert_eq!(
            status,
            Status::command_specific(CommandSpecificStatus::InvalidLogPage).with_dnr(true)
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn connect_checks() {
    let srv = server();
    let a = srv.addrs()[0];
    // host not on the allow list
    match Controller::connect(a, NQN2, &opts(false), 1, 4) {
        Err(HostError::Status { status, .. }) => {
            assert_eq!(
                status,
                Status::fabrics(FabricsStatus::InvalidHost).with_dnr(true)
            )
        }
        other => panic!("{other:?}"),
    }
    // unknown subsystem
    match Controller::connect(a, "nqn.2024-01.io.dpustack:nope", &opts(false), 1, 4) {
        Err(HostError::Status { status, .. }) => {
            assert_eq!(
                status,
                Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true)
            )
        }
        other => panic!("{other:?}"),
    }
    // NVM subsystem on the discovery-only port: Connect Invalid Parameters (the
    // subsystem is not reachable through this port), do not retry
    let refused = Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true);
    match Controller::connect(srv.addrs()[1], NQN, &opts(false), 1, 4) {
        Err(HostError::Status { status, .. }) => assert_eq!(status, refused),
        other => panic!("{other:?}"),
    }
    // allowed host works
    let mut o = opts(false);
    o.hostnqn = "nqn.2024-01.io.dpustack:allowed".into();
    let mut c = Controller::connect(a, NQN2, &o, 1, 4).unwrap();
    c.write(0, 1, 0, &[7; 512], BS).unwrap();
    // an I/O queue for a controller id that does not exist: Connect Invalid
    // Parameters (CNTLID), do not retry
    let mut q = host::Queue::open(a, &o, 1, 4).unwrap();
    match q.connect(&o, NQN2, 0x7777, 3, 0) {
        Err(HostError::Status { status, .. }) => assert_eq!(status, refused),
        other => panic!("{other:?}"),
    }
}

/// The target drops a host that sends nothing for its KATO: polled for (the
/// controller count), not slept on; not before the KATO has passed.
#[test]
fn keep_alive_timeout_disconnects() {
    let srv = server();
    let mut o = opts(false);
    o.kato_ms = 300;
    let t0 = Instant::now();
    let mut c = Controller::connect(srv.addrs()[0], NQN, &o, 1, 4).unwrap();
    assert_eq!(srv.tgt().ctrlr_count(), 1);
    while srv.tgt().ctrlr_count() != 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let gone = t0.elapsed();
    assert_eq!(srv.tgt().ctrlr_count(), 0, "still connected after {gone:?}");
    assert!(
        gone >= Duration::from_millis(300),
        "dropped after {gone:?}, before the 300 ms KATO"
    );
    // commands on the failed controller are refused (Command Sequence Error) until its
    // connection is closed, which must follow
    let mut r = c.read(0, 1, 0, 1, BS);
    while let Err(HostError::Status { status, .. }) = &r {
        assert!(
            status.is_generic(GenericStatus::CommandSequenceError),
            "{r:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "connection still open after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
        r = c.read(0, 1, 0, 1, BS);
    }
    assert!(
        matches!(r, Err(HostError::Terminated(_)) | Err(HostError::Io(_))),
        "{r:?}"
    );
}

/// The keep-alive timer itself on an injected clock (ms): alive up to and including
/// KATO after the last command, failed 1 ms later; any admin command (Keep Alive
/// here) restarts it; Set Features KATO changes it.
#[test]
fn keep_alive_timer_on_an_injected_clock() {
    let mut t = Tgt::new(TgtParams::default());
    let s = t
        .add_subsystem(Subsystem::new(NQN, "SN-KA", "ka").unwrap())
        .unwrap();
    let ok = |o: AdminOutcome| matches!(o, AdminOutcome::Done(st, ..) if st.is_success());
    let c = Ctrlr::new(1, s, "nqn.2024-01.io.dpustack:h", [0; 16], 300, 4, 1_000);
    // CC.EN = 1 (IOSQES 6, IOCQES 4) at 1_000: the controller takes commands
    let en = Sqe::property_set(1, nvmf::ctrlr::prop::CC, false, 1 | (6 << 16) | (4 << 20));
    assert!(ok(c.exec_admin(&t, &en, &[], 1_000)));
    assert!(c.check_keep_alive(1_300));
    let ka = Sqe::admin(AdminOpcode::KeepAlive, 1, 0);
    assert!(ok(c.exec_admin(&t, &ka, &[], 1_250)));
    assert!(c.check_keep_alive(1_550) && !c.is_failed());
    let kato = Sqe::set_features(2, FeatureId::KeepAliveTimer, 100);
    assert!(ok(c.exec_admin(&t, &kato, &[], 1_600)));
    assert_eq!(c.kato_ms(), 100);
    assert!(c.check_keep_alive(1_700) && !c.is_failed());
    assert!(!c.check_keep_alive(1_701));
    assert!(c.is_failed());
}

#[test]
fn malformed_pdus_terminate_only_that_connection() {
    let srv = server();
    let a = srv.addrs()[0];
    let mut good = Controller::connect(a, NQN, &opts(true), 1, 4).unwrap();
    let cases: Vec<Vec<u8>> = vec![
        // garbage before ICReq
        vec![0xff; 64],
        // ICReq with a bad PFV
        {
            let mut v = Vec::new();
            PduRepr::IcReq {
                pfv: 0,
                hpda: 0,
                hdgst: false,
                ddgst: false,
                maxr2t: 0,
            }
            .emit_to_vec(&mut v, &[], Digests::default(), 0);
            v[8] = 9;
            v
        },
        // a PDU claiming 2 GiB
        vec![0x00, 0, 128, 0, 0, 0, 0, 0x80],
    ];
    for bytes in cases {
        let mut s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(&bytes).unwrap();
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        assert!(!resp.is_empty(), "no term request for {bytes:02x?}");
        assert_eq!(resp[0], 0x03, "C2HTermReq expected, got {resp:02x?}");
        assert!(resp.len() <= 152);
    }
    // bad header digest after a good ICReq
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut v = Vec::new();
    let dg = Digests {
        header: true,
        data: true,
    };
    PduRepr::IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: true,
        ddgst: true,
        maxr2t: 0,
    }
    .emit_to_vec(&mut v, &[], Digests::default(), 0);
    PduRepr::CapsuleCmd { sqe: [0; 64] }.emit_to_vec(&mut v, &[], dg, 0);
    let n = v.len();
    v[n - 1] ^= 0xff;
    s.write_all(&v).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    assert_eq!(resp[0], 0x01); // ICResp
    assert_eq!(resp[128], 0x03); // C2HTermReq
    assert_eq!(u16::from_le_bytes([resp[136], resp[137]]), 3); // header digest error
                                                               // the good connection is unaffected
    let data = pattern(8192, 9);
    good.write(0, 1, 0, &data, BS).unwrap();
    assert_eq!(good.read(0, 1, 0, 16, BS).unwrap(), data);
}
