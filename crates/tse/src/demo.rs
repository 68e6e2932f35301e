//! An example asynchronous operation built on the scheduler, for the docs,
//! tests, `dpustack tse-demo` and `dpustack bench tse`: [`echo`] sends a value
//! over a [`LoopbackNet`] (a stand-in transport answering after a fixed
//! latency on the scheduler's clock) and returns the answer. Its task body
//! returns without completing the task; the transport's poller completes it
//! later, the normal case for network I/O.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use crate::call::call;
use crate::clock::Time;
use crate::eq::{Event, EventQueue, Poller};
use crate::error::{CallError, TaskError};
use crate::sched::{Scheduler, TaskId};

/// One request in flight on a [`LoopbackNet`].
pub struct Request {
    /// The value to echo.
    pub value: u64,
    /// Make the "server" answer with this error code instead.
    pub fail: Option<i32>,
    /// Where the answer lands.
    pub out: Rc<Cell<Option<u64>>>,
}

struct NetInner {
    latency: Duration,
    inflight: VecDeque<(Time, TaskId, Request)>,
    answered: u64,
}

/// A loopback "network": [`LoopbackNet::send`] queues a request for a task;
/// polling (as the EQ's [`Poller`]) answers the requests whose latency has
/// passed and completes their tasks. Clones share the same network.
#[derive(Clone)]
pub struct LoopbackNet {
    inner: Rc<RefCell<NetInner>>,
}

impl LoopbackNet {
    pub fn new(latency: Duration) -> Self {
        LoopbackNet {
            inner: Rc::new(RefCell::new(NetInner {
                latency,
                inflight: VecDeque::new(),
                answered: 0,
            })),
        }
    }

    /// Queues `req` for `task`, sent at `now`.
    pub fn send(&self, now: Time, task: TaskId, req: Request) {
        let mut n = self.inner.borrow_mut();
        let due = now + n.latency;
        n.inflight.push_back((due, task, req));
    }

    /// Requests not answered yet.
    pub fn in_flight(&self) -> usize {
        self.inner.borrow().inflight.len()
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.inner.borrow().answered
    }
}

impl Poller for LoopbackNet {
    /// Answers due requests; if none is due, waits (on the scheduler's clock)
    /// up to `timeout` for the next one, like a transport blocking in epoll.
    fn poll(&mut self, sched: &mut Scheduler, timeout: Duration) -> usize {
        let mut now = sched.now();
        let next_due = self.inner.borrow().inflight.front().map(|e| e.0);
        match next_due {
            Some(due) if due > now && !timeout.is_zero() => {
                sched.sleep_until(due.min(now + timeout));
                now = sched.now();
            }
            None if !timeout.is_zero() => {
                sched.sleep_until(now + timeout);
                return 0;
            }
            _ => {}
        }
        let mut n = 0;
        loop {
            // constant latency: requests are due in sending order
            let e = {
                let mut inner = self.inner.borrow_mut();
                match inner.inflight.front() {
                    Some((due, _, _)) if *due <= now => inner.inflight.pop_front(),
                    _ => None,
                }
            };
            let Some((_, task, req)) = e else { break };
            let r = match req.fail {
                Some(code) => Err(TaskError::Code(code)),
                None => {
                    req.out.set(Some(req.value));
                    Ok(())
                }
            };
            self.inner.borrow_mut().answered += 1;
            if sched.complete(task, r).is_ok() {
                n += 1;
            }
        }
        n
    }
}

/// The example asynchronous operation: echoes `value` through `net` into
/// `out`. With `ev`, returns once scheduled (the result lands in the event);
/// without, blocks until answered (see [`call`]).
pub fn echo(
    eq: &mut EventQueue,
    ev: Option<&Event>,
    net: &LoopbackNet,
    value: u64,
    fail: Option<i32>,
    out: Rc<Cell<Option<u64>>>,
) -> Result<(), CallError> {
    let net = net.clone();
    call(eq, ev, move |s| {
        Ok(s.create_with_priv(
            move |s, id| match s.take_priv::<Request>(id) {
                // body: send and return; the poller completes the task later
                Ok(req) => net.send(s.now(), id, req),
                Err(_) => {
                    let _ = s.complete(id, Err(TaskError::Code(-22)));
                }
            },
            Request { value, fail, out },
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::eq::Wait;

    #[test]
    fn echo_blocking_and_nonblocking_share_the_path() {
        let clock = ManualClock::new();
        let net = LoopbackNet::new(Duration::from_micros(50));
        let mut eq = EventQueue::with_poller(
            Scheduler::with_clock(Box::new(clock.clone())),
            Box::new(net.clone()),
        );
        // blocking
        let out = Rc::new(Cell::new(None));
        echo(&mut eq, None, &net, 7, None, out.clone()).unwrap();
        assert_eq!(out.get(), Some(7));
        assert_eq!(clock.now(), Time::from_nanos(50_000));
        assert_eq!(
            echo(&mut eq, None, &net, 8, Some(-5), out.clone()),
            Err(CallError::Op(TaskError::Code(-5)))
        );
        // non-blocking: three in flight at once
        let evs: Vec<Event> = (0..3).map(|_| eq.event_init(None).unwrap()).collect();
        let outs: Vec<_> = (0..3).map(|_| Rc::new(Cell::new(None))).collect();
        for (i, ev) in evs.iter().enumerate() {
            let fail = (i == 1).then_some(-1);
            echo(&mut eq, Some(ev), &net, i as u64, fail, outs[i].clone()).unwrap();
        }
        assert_eq!(eq.running(), 3);
        let mut got = Vec::new();
        while got.len() < 3 {
            eq.poll(Wait::Forever, 8, &mut got).unwrap();
        }
        got.sort();
        assert_eq!(
            got,
            [
                (evs[0], Ok(())),
                (evs[1], Err(TaskError::Code(-1))),
                (evs[2], Ok(()))
            ]
        );
        assert_eq!(outs[2].get(), Some(2));
        assert_eq!(outs[1].get(), None);
        assert_eq!(eq.sched().live(), 0);
        assert_eq!(net.answered(), 5);
        for ev in evs {
            eq.event_fini(ev).unwrap();
        }
        eq.destroy(false).unwrap();
    }
}
