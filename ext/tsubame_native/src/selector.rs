//! `Tsubame::Native::Selector`: the fiber scheduler's event loop wait.
//!
//! epoll (through mio) holds the descriptors that waiting fibers asked
//! about; `select` waits on all of them at once with the GVL released, so
//! other Ruby threads (the thread pool) run meanwhile, and returns the
//! ready ones. An eventfd (mio's `Waker`) makes the wait return early:
//! for an `unblock` from another thread, for a request the engine queued
//! for fibers, or for Ruby needing the thread back (a signal).
//!
//! mio registers edge-triggered; the scheduler waits on a descriptor only
//! until its first event and then re-registers (a MOD re-arms and reports
//! readiness that is already there), so no edge is lost.

use crate::ffi::without_gvl;
use magnus::{Error, RArray, Ruby};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Ruby's IO::READABLE, IO::PRIORITY, IO::WRITABLE.
const READABLE: u32 = 1;
const PRIORITY: u32 = 2;
const WRITABLE: u32 = 4;

const WAKE: Token = Token(usize::MAX);
const EVENTS_CAPACITY: usize = 1024;

#[magnus::wrap(class = "Tsubame::Native::Selector", free_immediately, size)]
pub struct Selector {
    poll: Mutex<(Poll, Events)>,
    registry: Registry,
    waker: Arc<mio::Waker>,
}

fn io_error(ruby: &Ruby, what: &str, e: std::io::Error) -> Error {
    Error::new(ruby.exception_io_error(), format!("selector {what}: {e}"))
}

impl Selector {
    pub fn new(ruby: &Ruby) -> Result<Selector, Error> {
        let poll = Poll::new().map_err(|e| io_error(ruby, "epoll", e))?;
        let registry = poll.registry().try_clone().map_err(|e| io_error(ruby, "epoll", e))?;
        let waker = mio::Waker::new(poll.registry(), WAKE).map_err(|e| io_error(ruby, "eventfd", e))?;
        Ok(Selector {
            poll: Mutex::new((poll, Events::with_capacity(EVENTS_CAPACITY))),
            registry,
            waker: Arc::new(waker),
        })
    }

    /// Waits for `events` (IO::READABLE | IO::WRITABLE ...) on `fd`,
    /// replacing what was asked for it before. False for a descriptor
    /// epoll cannot watch (a regular file): it never blocks, so it is ready.
    pub fn watch(ruby: &Ruby, rb_self: &Self, fd: i32, events: u32) -> Result<bool, Error> {
        let interest = match (events & (READABLE | PRIORITY) != 0, events & WRITABLE != 0) {
            (true, true) => Interest::READABLE | Interest::WRITABLE,
            (false, true) => Interest::WRITABLE,
            _ => Interest::READABLE,
        };
        let token = Token(usize::try_from(fd).map_err(|_| io_error(ruby, "watch", bad_fd()))?);
        let mut source = SourceFd(&fd);
        let outcome = match rb_self.registry.reregister(&mut source, token, interest) {
            // Not registered yet, or the descriptor was closed (epoll forgot
            // it) and its number reused.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                rb_self.registry.register(&mut source, token, interest)
            }
            other => other,
        };
        match outcome {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(false),
            Err(e) => Err(io_error(ruby, "watch", e)),
        }
    }

    /// Stops watching `fd`; a descriptor closed meanwhile is already gone.
    pub fn unwatch(&self, fd: i32) {
        let _ = self.registry.deregister(&mut SourceFd(&fd));
    }

    /// Waits up to `timeout` seconds (nil: until something happens) and
    /// returns [fd, events, fd, events, ...] for the ready descriptors;
    /// empty after a wake-up or a timeout.
    pub fn select(ruby: &Ruby, rb_self: &Self, timeout: Option<f64>) -> Result<RArray, Error> {
        let timeout = timeout.map(|s| Duration::from_secs_f64(if s.is_finite() { s.max(0.0) } else { 0.0 }));
        let mut guard = rb_self.poll.lock().unwrap_or_else(|e| e.into_inner());
        let (poll, events) = &mut *guard;
        let ready = if timeout == Some(Duration::ZERO) {
            // Nothing to wait for: no reason to give up the GVL.
            Some(poll.poll(events, timeout))
        } else {
            let waker = rb_self.waker.clone();
            let (ready, raised) = without_gvl(
                || poll.poll(events, timeout),
                || {
                    let _ = waker.wake();
                },
            );
            raised?;
            ready
        };
        let out = ruby.ary_new_capa(events.iter().count() * 2);
        match ready {
            Some(Ok(())) => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(out),
            Some(Err(e)) => return Err(io_error(ruby, "wait", e)),
            None => return Ok(out),
        }
        for event in events.iter() {
            if event.token() == WAKE {
                continue;
            }
            let mut ready = 0;
            // An error or hang-up wakes readers and writers alike: the
            // next read or write reports it.
            let failed = event.is_error() || event.is_read_closed() || event.is_write_closed();
            if event.is_readable() || failed {
                ready |= READABLE;
            }
            if event.is_priority() {
                ready |= PRIORITY;
            }
            if event.is_writable() || failed {
                ready |= WRITABLE;
            }
            out.push(event.token().0 as i64)?;
            out.push(ready)?;
        }
        Ok(out)
    }

    /// Makes a `select` in progress (or the next one) return at once. Safe
    /// from any thread.
    pub fn wakeup(&self) {
        let _ = self.waker.wake();
    }

    /// A function waking this selector, for the engine to call.
    pub fn waker(&self) -> tsubame_engine::dispatch::fiber_queue::Waker {
        let waker = self.waker.clone();
        Arc::new(move || {
            let _ = waker.wake();
        })
    }
}

fn bad_fd() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::InvalidInput)
}
