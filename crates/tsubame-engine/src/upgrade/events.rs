//! The events of engine-held connections that Ruby must see (open, a
//! message, drained, shutdown, close), queued for the threads that run the
//! handlers. The connection task pushes; a Ruby thread pops with the GVL
//! released. A connection has at most one event out at a time (it waits
//! for `Registry::event_done`), so its handler's calls never overlap and
//! arrive in order, whichever thread runs them.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Open,
    /// A whole message: text (valid UTF-8) or binary.
    Message {
        text: bool,
    },
    /// Everything written so far has gone to the socket.
    Drained,
    /// The server is stopping; the connection closes after this.
    Shutdown,
    /// The connection is gone; the last event of a connection.
    Close,
}

#[derive(Debug)]
pub struct Event {
    pub id: u64,
    pub kind: EventKind,
    pub data: Option<Bytes>,
}

#[derive(Debug)]
pub enum Popped {
    Event(Event),
    /// The server stopped and every connection is gone: nothing will come.
    Closed,
    /// The waiter's interrupt flag was raised (Ruby wants the thread).
    Interrupted,
}

#[derive(Default)]
struct State {
    events: VecDeque<Event>,
    closed: bool,
}

#[derive(Default)]
pub struct EventQueue {
    state: Mutex<State>,
    ready: Condvar,
    /// Events handed to Ruby and not yet done (every kind but Close): the
    /// I/O thread stays awake a moment while there are some, since the
    /// handler's write is then about to wake it (`server.rs`).
    in_flight: AtomicUsize,
    /// Queued, readable without the lock: what a spinning thread watches.
    queued: AtomicUsize,
}

impl EventQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent; ignore poisoning.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, event: Event) {
        if event.kind != EventKind::Close {
            self.in_flight.fetch_add(1, Ordering::AcqRel);
        }
        self.lock().events.push_back(event);
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.ready.notify_one();
    }

    /// Ruby finished an event (not a Close).
    pub fn done(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Waits for an event; blocking, for a thread without the GVL. It
    /// first stays awake for up to `spin` (yielding): a conversation's
    /// next message often comes that soon, and a thread asleep on the
    /// condvar costs a futex wake-up to get back.
    pub fn pop_wait(&self, interrupted: &AtomicBool, spin: Duration) -> Popped {
        if !spin.is_zero() {
            let started = Instant::now();
            let mut n = 0u32;
            while self.queued.load(Ordering::Acquire) == 0 && !interrupted.load(Ordering::Acquire) {
                std::thread::yield_now();
                n += 1;
                if n.is_multiple_of(4) && started.elapsed() >= spin {
                    break;
                }
            }
        }
        let mut state = self.lock();
        loop {
            if let Some(event) = state.events.pop_front() {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                return Popped::Event(event);
            }
            if state.closed {
                return Popped::Closed;
            }
            if interrupted.load(Ordering::Acquire) {
                return Popped::Interrupted;
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Ends the queue once the events already in it are taken.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Wakes every waiter so it can look at its interrupt flag.
    pub fn wake_all(&self) {
        let _state = self.lock();
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn events_come_out_in_order_then_closed() {
        let queue = Arc::new(EventQueue::default());
        let flag = AtomicBool::new(false);
        queue.push(Event {
            id: 1,
            kind: EventKind::Open,
            data: None,
        });
        queue.push(Event {
            id: 1,
            kind: EventKind::Message { text: true },
            data: Some(Bytes::from_static(b"hi")),
        });
        queue.close();
        assert!(matches!(
            queue.pop_wait(&flag, Duration::ZERO),
            Popped::Event(Event {
                kind: EventKind::Open,
                ..
            })
        ));
        assert!(
            matches!(queue.pop_wait(&flag, Duration::ZERO), Popped::Event(Event { data: Some(d), .. }) if &d[..] == b"hi")
        );
        assert!(matches!(queue.pop_wait(&flag, Duration::ZERO), Popped::Closed));
    }

    #[test]
    fn a_waiter_is_woken_by_a_push_or_an_interrupt() {
        let queue = Arc::new(EventQueue::default());
        let waiter = {
            let queue = queue.clone();
            std::thread::spawn(move || queue.pop_wait(&AtomicBool::new(false), Duration::from_micros(50)))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        queue.push(Event {
            id: 7,
            kind: EventKind::Close,
            data: None,
        });
        assert!(matches!(waiter.join().unwrap(), Popped::Event(Event { id: 7, .. })));
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (queue, flag) = (queue.clone(), flag.clone());
            std::thread::spawn(move || queue.pop_wait(&flag, Duration::ZERO))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        flag.store(true, Ordering::Release);
        queue.wake_all();
        assert!(matches!(waiter.join().unwrap(), Popped::Interrupted));
    }
}
