//! The transport interface carries a second, non-TCP transport without any change
//! to the core: an in-process "loop" transport (TRTYPE 254, intra-host) that moves
//! SQEs, CQEs and data over channels. The target (`NvmfServer::start_with`), the
//! discovery log page, Fabrics Connect, admin and I/O commands and the host
//! library (`Controller::connect_with`, `discover_with`) all run over it.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use bdev::IoBuf;
use nvme::log::{AdrFam, DiscoveryEntry, SubType, TrType};
use nvme::status::{FabricsStatus, MediaStatus};
use nvme::{Cqe, IoOpcode, Sqe, Status};
use nvmf::host::{discover_with, Controller, HostError, HostOpts};
use nvmf::subsystem::Subsystem;
use nvmf::transport::{
    Accepted, HostCompletion, HostQueue, HostQueueParams, HostTransport, QpairEvent, QueueError,
    Request, SubmitError, Transport, TransportId, TransportLimits, TransportPollGroup,
    TransportQpair,
};
use nvmf::{Listen, NvmfServer, Tgt, TgtParams};

const NQN: &str = "nqn.2024-01.io.dpustack:loop";

/// A command on its way to the target: SQE, host-to-controller data, read length.
type Cmd = (Sqe, Vec<u8>, u32);
/// A completion on its way back: CQE and controller-to-host data.
type Done = (Cqe, Vec<u8>);

struct LoopQpair {
    cmds: Receiver<Cmd>,
    done: Sender<Done>,
    events: VecDeque<QpairEvent>,
    gone: bool,
}

impl LoopQpair {
    fn recv(&mut self) -> bool {
        let mut progress = false;
        loop {
            match self.cmds.try_recv() {
                Ok((sqe, data, read_len)) => {
                    self.events.push_back(QpairEvent::Command(Request {
                        sqe,
                        data: IoBuf::Vec(data),
                        c2h_len: read_len,
                        error: None,
                    }));
                    progress = true;
                }
                Err(TryRecvError::Empty) => return progress,
                Err(TryRecvError::Disconnected) => {
                    self.gone = true;
                    return progress;
                }
            }
        }
    }
}

impl TransportQpair for LoopQpair {
    fn poll_event(&mut self) -> Option<QpairEvent> {
        self.events.pop_front()
    }
    fn complete(&mut self, cqe: &Cqe, data: IoBuf) {
        if self.done.send((*cqe, data.into_vec())).is_err() {
            self.gone = true;
        }
    }
    fn get_buf(&mut self, len: usize) -> IoBuf {
        IoBuf::zeroed(len)
    }
    fn put_buf(&mut self, _buf: IoBuf) {}
    fn connected(&mut self, _sqflow_disabled: bool) {}
    fn is_terminated(&self) -> bool {
        self.gone
    }
    fn peer(&self) -> String {
        "loop".into()
    }
    fn describe_stats(&self) -> String {
        String::new()
    }
}

struct LoopGroup;

impl TransportPollGroup for LoopGroup {
    type Qpair = LoopQpair;
    fn poll<Q: AsMut<LoopQpair>>(&mut self, qpairs: &mut [Q]) -> bool {
        let mut progress = false;
        for q in qpairs.iter_mut() {
            progress |= q.as_mut().recv();
        }
        progress
    }
    fn flush<Q: AsMut<LoopQpair>>(&mut self, _qpairs: &mut [Q]) -> bool {
        false // completions are sent at once
    }
    fn wait<Q: AsMut<LoopQpair>>(&mut self, _qpairs: &mut [Q], timeout: Duration) -> bool {
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
        false
    }
    fn remove(&mut self, _qpair: LoopQpair) {}
}

/// The target side: new qpairs arrive with the service id the host asked for.
struct LoopTransport {
    incoming: Receiver<(LoopQpair, String)>,
    listening: Vec<TransportId>,
}

impl Transport for LoopTransport {
    type Qpair = LoopQpair;
    type PollGroup = LoopGroup;
    fn trtype(&self) -> TrType {
        TrType::Loop
    }
    fn limits(&self) -> TransportLimits {
        TransportLimits {
            max_xfer: 256 * 1024,
            ..TransportLimits::default()
        }
    }
    fn listen(&mut self, trid: &TransportId) -> std::io::Result<TransportId> {
        self.listening.push(trid.clone());
        Ok(trid.clone())
    }
    fn listener_discover(&self, trid: &TransportId, entry: &mut DiscoveryEntry) {
        entry.trtype = TrType::Loop;
        entry.adrfam = AdrFam::Loop;
        entry.traddr = trid.traddr.clone();
        entry.trsvcid = trid.trsvcid.clone();
        entry.treq = nvme::log::treq::SECURE_NOT_SPECIFIED;
    }
    fn stop_listen(&mut self, trid: &TransportId) -> Option<usize> {
        let i = self.listening.iter().position(|t| t == trid)?;
        self.listening.remove(i);
        Some(i)
    }
    fn accept(
        &mut self,
        timeout: Duration,
        out: &mut Vec<Accepted<LoopQpair>>,
    ) -> std::io::Result<()> {
        match self.incoming.recv_timeout(timeout) {
            Ok((qpair, svc)) => {
                if let Some(listener) = self.listening.iter().position(|t| t.trsvcid == svc) {
                    out.push(Accepted { qpair, listener });
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => Ok(()),
        }
    }
    fn poll_group_create(&self, _event_driven: bool) -> LoopGroup {
        LoopGroup
    }
}

struct LoopHostQueue {
    cmds: Sender<Cmd>,
    done: Receiver<Done>,
}

impl HostQueue for LoopHostQueue {
    fn submit(
        &mut self,
        sqe: Sqe,
        write: &[u8],
        read_len: u32,
        _in_capsule: u32,
    ) -> Result<(), SubmitError> {
        self.cmds
            .send((sqe, write.to_vec(), read_len))
            .map_err(|_| SubmitError::NotReady)
    }
    fn progress(
        &mut self,
        block: bool,
        done: &mut VecDeque<HostCompletion>,
    ) -> Result<bool, QueueError> {
        let mut moved = false;
        loop {
            match self.done.try_recv() {
                Ok((cqe, data)) => {
                    done.push_back(HostCompletion { cqe, data });
                    moved = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    return Err(QueueError::Terminated("loop target gone"))
                }
            }
        }
        if !moved && block {
            if let Ok((cqe, data)) = self.done.recv_timeout(Duration::from_millis(100)) {
                done.push_back(HostCompletion { cqe, data });
                moved = true;
            }
        }
        Ok(moved)
    }
    fn recycle(&mut self, _buf: Vec<u8>) {}
}

/// The host side: connecting hands the target a new qpair.
struct LoopHost {
    to_target: Sender<(LoopQpair, String)>,
}

impl HostTransport for LoopHost {
    fn trtype(&self) -> TrType {
        TrType::Loop
    }
    fn connect(
        &self,
        trid: &TransportId,
        _params: &HostQueueParams,
    ) -> Result<Box<dyn HostQueue>, QueueError> {
        let (cmd_tx, cmd_rx) = channel();
        let (done_tx, done_rx) = channel();
        let q = LoopQpair {
            cmds: cmd_rx,
            done: done_tx,
            events: VecDeque::new(),
            gone: false,
        };
        self.to_target
            .send((q, trid.trsvcid.clone()))
            .map_err(|_| QueueError::Terminated("loop target not running"))?;
        Ok(Box::new(LoopHostQueue {
            cmds: cmd_tx,
            done: done_rx,
        }))
    }
}

fn loop_trid(svc: &str) -> TransportId {
    TransportId {
        trtype: TrType::Loop,
        adrfam: AdrFam::Loop,
        traddr: "loop0".into(),
        trsvcid: svc.into(),
    }
}

fn start() -> (NvmfServer, LoopHost) {
    let mut tgt = Tgt::new(TgtParams::default());
    let mut s = Subsystem::new(NQN, "SN-LOOP", "dpustack loop").unwrap();
    let m = bdev::malloc::MallocBdev::new("m0", 2048, 512).unwrap();
    s.add_ns(1, Arc::new(m), None).unwrap();
    tgt.add_subsystem(s).unwrap();
    let (tx, rx) = channel();
    let transport = LoopTransport {
        incoming: rx,
        listening: Vec::new(),
    };
    let listen = [
        Listen {
            trid: loop_trid("1"),
            discovery_only: false,
        },
        Listen {
            trid: loop_trid("discovery"),
            discovery_only: true,
        },
    ];
    let srv = NvmfServer::start_with(tgt, transport, &listen, 2).unwrap();
    (srv, LoopHost { to_target: tx })
}

fn opts() -> HostOpts {
    HostOpts {
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

#[test]
fn discovery_connect_and_io_over_a_non_tcp_transport() {
    let (srv, host) = start();
    assert!(srv.addrs().is_empty(), "no IP listeners");
    assert_eq!(srv.trids()[0].trtype, TrType::Loop);

    // the discovery log entry is the loop transport's, not TCP's
    let (_, entries) = discover_with(&host, &loop_trid("discovery"), &opts()).unwrap();
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
        (TrType::Loop, AdrFam::Loop, SubType::Nvme, "loop0", "1")
    );
    assert_eq!((e.subnqn.as_str(), e.portid), (NQN, 1));

    // the NVM subsystem is refused on the discovery-only listener
    match Controller::connect_with(&host, &loop_trid("discovery"), NQN, &opts(), 1, 8) {
        Err(HostError::Status { status, .. }) => {
            assert_eq!(
                status,
                Status::fabrics(FabricsStatus::InvalidParameters).with_dnr(true)
            )
        }
        other => panic!("expected Connect Invalid Parameters, got {other:?}"),
    }

    let mut c = Controller::connect_with(&host, &loop_trid("1"), NQN, &opts(), 2, 8).unwrap();
    // Identify reports the transport's limits: MDTS 256 KiB = 2^6 pages
    assert_eq!(c.identity.as_ref().unwrap().mdts, 6);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    c.write(0, 1, 16, &data, 512).unwrap();
    assert_eq!(c.read(1, 1, 16, 128, 512).unwrap(), data);
    // a compare that differs is a media error, one that matches succeeds
    let mut other = data[..512].to_vec();
    let cmp = |c: &mut Controller, d: &[u8]| {
        let mut sqe = Sqe::rw(IoOpcode::Compare, 0, 1, 16, 1);
        sqe.set_cid(0);
        c.io_exec(0, sqe, d, 0).unwrap().cqe.status()
    };
    assert!(cmp(&mut c, &data[..512]).is_success());
    other[3] ^= 1;
    assert_eq!(
        cmp(&mut c, &other),
        Status::media(MediaStatus::CompareFailure)
    );
    c.shutdown().unwrap();
    srv.stop();
}
