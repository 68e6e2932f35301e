//! A wrapper device that injects failures, for testing the layers above
//! (NVMe status mapping, retry of `Busy`): wrap any device, then arm rules at run
//! time through the shared [`Injector`]. Not for production paths: the rule check
//! takes a mutex when (and only when) rules are armed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::{BdevIo, BlockDevice, Error, IoChannel, IoError, IoStatus, IoType, Rejected, Stats};

/// What an armed rule does to a matching I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Complete the I/O (without running it) with this error.
    Fail(IoError),
    /// Reject the submit with [`Error::Busy`] (the caller should retry).
    Busy,
}

/// A rule: I/Os of `io_type` (any type if `None`) overlapping blocks
/// `[offset_blocks, offset_blocks + num_blocks)` get `fault`, `count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub io_type: Option<IoType>,
    pub offset_blocks: u64,
    pub num_blocks: u64,
    pub fault: Fault,
    pub count: u32,
}

/// Arms and clears rules; shared by the device and every channel.
#[derive(Debug, Default)]
pub struct Injector {
    armed: AtomicBool,
    rules: Mutex<Vec<Rule>>,
}

impl Injector {
    /// Add a rule.
    pub fn arm(&self, rule: Rule) {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        r.push(rule);
        self.armed.store(true, Ordering::Release);
    }
    /// Remove all rules.
    pub fn clear(&self) {
        let mut r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        r.clear();
        self.armed.store(false, Ordering::Release);
    }
    /// Rules left (with their remaining counts).
    pub fn rules(&self) -> Vec<Rule> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn take(&self, io: &BdevIo) -> Option<Fault> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let t = io.io_type?;
        let end = io.offset_blocks.saturating_add(io.num_blocks.max(1));
        let i = rules.iter().position(|r| {
            r.count > 0
                && r.io_type.is_none_or(|rt| rt == t)
                && io.offset_blocks < r.offset_blocks.saturating_add(r.num_blocks)
                && r.offset_blocks < end
        })?;
        let fault = rules[i].fault;
        rules[i].count -= 1;
        if rules[i].count == 0 {
            rules.remove(i);
        }
        if rules.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
        Some(fault)
    }
}

/// A device that forwards to `inner` except where an armed rule says otherwise.
pub struct ErrorInjectBdev {
    name: String,
    inner: Arc<dyn BlockDevice>,
    injector: Arc<Injector>,
}

impl ErrorInjectBdev {
    pub fn new(name: &str, inner: Arc<dyn BlockDevice>) -> Self {
        ErrorInjectBdev {
            name: name.to_string(),
            inner,
            injector: Arc::new(Injector::default()),
        }
    }
    /// The rule switchboard (clone the `Arc` to arm rules from a test).
    pub fn injector(&self) -> Arc<Injector> {
        self.injector.clone()
    }
}

impl BlockDevice for ErrorInjectBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn buf_align(&self) -> usize {
        self.inner.buf_align()
    }
    fn io_type_supported(&self, t: IoType) -> bool {
        self.inner.io_type_supported(t)
    }
    fn unmap_reads_zeroes(&self) -> bool {
        self.inner.unmap_reads_zeroes()
    }
    fn open_channel(&self) -> Result<Box<dyn IoChannel>, Error> {
        Ok(Box::new(InjectChannel {
            inner: self.inner.open_channel()?,
            injector: self.injector.clone(),
            failed: Vec::new(),
            block_size: self.inner.block_size(),
            num_blocks: self.inner.num_blocks(),
        }))
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

struct InjectChannel {
    inner: Box<dyn IoChannel>,
    injector: Arc<Injector>,
    failed: Vec<BdevIo>,
    block_size: u32,
    num_blocks: u64,
}

impl IoChannel for InjectChannel {
    #[allow(clippy::result_large_err)]
    fn submit(&mut self, mut io: BdevIo) -> Result<(), Rejected> {
        match self.injector.take(&io) {
            None => self.inner.submit(io),
            Some(Fault::Busy) => Err(Rejected {
                error: Error::Busy,
                io,
            }),
            Some(Fault::Fail(e)) => {
                // Caller mistakes are still reported as such.
                if let Err(error) = crate::validate(&io, self.block_size, self.num_blocks) {
                    return Err(Rejected { error, io });
                }
                io.status = IoStatus::Failed(e);
                self.failed.push(io);
                Ok(())
            }
        }
    }
    fn poll(&mut self, done: &mut Vec<BdevIo>) -> usize {
        let n = self.failed.len();
        done.append(&mut self.failed);
        n + self.inner.poll(done)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.failed.len()
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::malloc::MallocBdev;
    use crate::IoBuf;

    #[test]
    fn fail_and_busy_then_recover() {
        let d = ErrorInjectBdev::new("e0", Arc::new(MallocBdev::new("m", 64, 512).unwrap()));
        let inj = d.injector();
        let mut ch = d.open_channel().unwrap();
        inj.arm(Rule {
            io_type: Some(IoType::Read),
            offset_blocks: 10,
            num_blocks: 2,
            fault: Fault::Fail(IoError::Os(libc::EIO)),
            count: 1,
        });
        inj.arm(Rule {
            io_type: None,
            offset_blocks: 0,
            num_blocks: 64,
            fault: Fault::Busy,
            count: 1,
        });
        // a read elsewhere hits the Busy rule first (any type, whole device)
        let e = ch
            .submit(BdevIo::read(0, 1, vec![IoBuf::zeroed(512)], 1))
            .unwrap_err();
        assert!(matches!(e.error, Error::Busy));
        ch.submit(e.io).unwrap();
        // the read overlapping block 11 fails once
        ch.submit(BdevIo::read(11, 1, vec![IoBuf::zeroed(512)], 2))
            .unwrap();
        ch.submit(BdevIo::read(11, 1, vec![IoBuf::zeroed(512)], 3))
            .unwrap();
        let mut done = Vec::new();
        ch.poll(&mut done);
        done.sort_by_key(|i| i.ctx);
        let st: Vec<_> = done.iter().map(|i| (i.ctx, i.status)).collect();
        assert_eq!(
            st,
            vec![
                (1, IoStatus::Success),
                (2, IoStatus::Failed(IoError::Os(libc::EIO))),
                (3, IoStatus::Success)
            ]
        );
        assert!(inj.rules().is_empty());
        // a write is not matched by a read rule
        inj.arm(Rule {
            io_type: Some(IoType::Read),
            offset_blocks: 0,
            num_blocks: 64,
            fault: Fault::Fail(IoError::Aborted),
            count: 5,
        });
        ch.submit(BdevIo::write(0, 1, vec![IoBuf::zeroed(512)], 4))
            .unwrap();
        done.clear();
        ch.poll(&mut done);
        assert!(done[0].is_success());
        assert_eq!(inj.rules()[0].count, 5);
        inj.clear();
        assert!(inj.rules().is_empty());
    }
}
