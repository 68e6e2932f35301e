//! A small eventfd wrapper: the fd of completion channels and async events, usable
//! with epoll / tokio `AsyncFd`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd(2) takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor (checked >= 0) nobody else owns;
        // the OwnedFd becomes its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }
    pub(crate) fn notify(&self) {
        let v: u64 = 1;
        // SAFETY: writes 8 bytes from a live local u64 to our own eventfd.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &v as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
    /// Consumes the counter; false if it was zero (nonblocking).
    pub(crate) fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live local u64 from our own eventfd.
        let rc = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
        rc == 8
    }
    /// Blocks until readable (or `timeout_ms`, -1 = forever).
    pub(crate) fn wait(&self, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one live pollfd (count 1) for our own fd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
