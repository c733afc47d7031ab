//! The engine-held connections by id, what Ruby has written to each and
//! not yet sent, and the channels they subscribe to (`Tsubame.publish`).
//! Ruby threads write and publish here without waiting on any socket: a
//! message is queued and the connection's task is woken to send it.

use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// What Ruby asked a connection to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Text(Bytes),
    Binary(Bytes),
    /// Close the connection (a WebSocket close frame with this code).
    Close(u16),
}

impl Out {
    fn len(&self) -> usize {
        match self {
            Out::Text(b) | Out::Binary(b) => b.len(),
            Out::Close(_) => 0,
        }
    }
}

/// Why a write was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// The connection is closed or closing.
    Closed,
    /// More than `max_pending` bytes already wait for a client that does
    /// not read: the connection is being closed instead.
    Overflow,
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Out>,
    bytes: usize,
    closed: bool,
    overflowed: bool,
}

/// One connection's outgoing side, shared by its task and Ruby threads.
pub struct Outbound {
    state: Mutex<OutState>,
    max_pending: usize,
    /// Wakes the task: something to send, or a close.
    pub(crate) wake: Notify,
    /// Wakes the task when Ruby has finished the event it was given.
    pub(crate) done: Notify,
    /// The handler has `on_drained`: tell it when the queue empties.
    pub(crate) wants_drained: AtomicBool,
}

impl Outbound {
    fn new(max_pending: usize) -> Outbound {
        Outbound {
            state: Mutex::new(OutState::default()),
            max_pending,
            wake: Notify::new(),
            done: Notify::new(),
            wants_drained: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, OutState> {
        // Every critical section leaves OutState consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `out` for the task to send.
    pub fn push(&self, out: Out) -> Result<(), WriteError> {
        let mut state = self.lock();
        if state.closed || state.overflowed {
            return Err(WriteError::Closed);
        }
        if matches!(out, Out::Close(_)) {
            state.closed = true;
        } else if state.bytes + out.len() > self.max_pending {
            state.overflowed = true;
            drop(state);
            self.wake.notify_one();
            return Err(WriteError::Overflow);
        }
        state.bytes += out.len();
        state.queue.push_back(out);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Everything queued, in order, and whether the queue overflowed.
    pub(crate) fn take(&self, into: &mut Vec<Out>) -> bool {
        let mut state = self.lock();
        into.extend(state.queue.drain(..));
        state.overflowed
    }

    /// The bytes in `sent` went to the socket.
    pub(crate) fn sent(&self, sent: usize) -> usize {
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_sub(sent);
        state.bytes
    }

    /// Whether the handler wants `on_drained`.
    pub fn set_wants_drained(&self, wants: bool) {
        self.wants_drained.store(wants, Ordering::Release);
    }

    /// Ruby finished the event the connection handed over.
    pub fn event_done(&self) {
        self.done.notify_one();
    }

    /// Bytes written by Ruby and not yet sent to the socket.
    pub fn pending(&self) -> usize {
        self.lock().bytes
    }

    pub fn is_open(&self) -> bool {
        let state = self.lock();
        !state.closed && !state.overflowed
    }

    /// No more writes are taken (the connection is going).
    pub(crate) fn shut(&self) {
        self.lock().closed = true;
    }
}

struct Conn {
    out: Arc<Outbound>,
    channels: Vec<Bytes>,
}

#[derive(Default)]
struct Inner {
    conns: HashMap<u64, Conn>,
    channels: HashMap<Bytes, HashSet<u64>>,
}

#[derive(Default)]
pub struct Registry {
    next_id: AtomicU64,
    inner: Mutex<Inner>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves Inner consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection's id and outgoing side, registered before the
    /// handshake so the handler may write from `on_open` on.
    pub fn open(&self, max_pending: usize) -> (u64, Arc<Outbound>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let out = Arc::new(Outbound::new(max_pending));
        self.lock().conns.insert(
            id,
            Conn {
                out: out.clone(),
                channels: Vec::new(),
            },
        );
        (id, out)
    }

    pub fn get(&self, id: u64) -> Option<Arc<Outbound>> {
        self.lock().conns.get(&id).map(|c| c.out.clone())
    }

    /// Forgets a connection and its subscriptions.
    pub fn remove(&self, id: u64) {
        let mut inner = self.lock();
        let Some(conn) = inner.conns.remove(&id) else {
            return;
        };
        conn.out.shut();
        for channel in conn.channels {
            if let Some(members) = inner.channels.get_mut(&channel) {
                members.remove(&id);
                if members.is_empty() {
                    inner.channels.remove(&channel);
                }
            }
        }
    }

    /// Subscribes `id` to `channel`; false if the connection is gone.
    pub fn subscribe(&self, id: u64, channel: Bytes) -> bool {
        let mut inner = self.lock();
        let Some(conn) = inner.conns.get_mut(&id) else {
            return false;
        };
        if !conn.channels.contains(&channel) {
            conn.channels.push(channel.clone());
        }
        inner.channels.entry(channel).or_default().insert(id);
        true
    }

    pub fn unsubscribe(&self, id: u64, channel: &[u8]) -> bool {
        let mut inner = self.lock();
        let Some(conn) = inner.conns.get_mut(&id) else {
            return false;
        };
        let had = conn.channels.iter().position(|c| &c[..] == channel);
        if let Some(at) = had {
            conn.channels.swap_remove(at);
        }
        if let Some(members) = inner.channels.get_mut(channel) {
            members.remove(&id);
            if members.is_empty() {
                inner.channels.remove(channel);
            }
        }
        had.is_some()
    }

    /// Queues `message` on every connection subscribed to `channel`;
    /// returns how many took it. The bytes are shared, not copied.
    pub fn publish(&self, channel: &[u8], message: Out) -> usize {
        let targets: Vec<Arc<Outbound>> = {
            let inner = self.lock();
            let Some(members) = inner.channels.get(channel) else {
                return 0;
            };
            members
                .iter()
                .filter_map(|id| inner.conns.get(id).map(|c| c.out.clone()))
                .collect()
        };
        targets.iter().filter(|out| out.push(message.clone()).is_ok()).count()
    }

    pub fn len(&self) -> usize {
        self.lock().conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_queue_until_taken_and_close_ends_them() {
        let registry = Registry::default();
        let (id, out) = registry.open(10);
        out.push(Out::Text(Bytes::from_static(b"abcd"))).unwrap();
        assert_eq!(out.pending(), 4);
        let mut taken = Vec::new();
        assert!(!out.take(&mut taken));
        assert_eq!(taken, vec![Out::Text(Bytes::from_static(b"abcd"))]);
        assert_eq!(out.sent(4), 0);
        out.push(Out::Close(1000)).unwrap();
        assert_eq!(out.push(Out::Text(Bytes::from_static(b"x"))), Err(WriteError::Closed));
        assert!(!out.is_open());
        registry.remove(id);
        assert!(registry.get(id).is_none());
    }

    #[test]
    fn a_client_that_does_not_read_overflows() {
        let registry = Registry::default();
        let (_, out) = registry.open(8);
        out.push(Out::Binary(Bytes::from_static(b"12345"))).unwrap();
        assert_eq!(
            out.push(Out::Binary(Bytes::from_static(b"6789"))),
            Err(WriteError::Overflow)
        );
        assert!(out.take(&mut Vec::new()), "the task learns it overflowed");
        assert_eq!(out.push(Out::Binary(Bytes::from_static(b"1"))), Err(WriteError::Closed));
    }

    #[test]
    fn publish_reaches_subscribers_only() {
        let registry = Registry::default();
        let (a, out_a) = registry.open(100);
        let (b, out_b) = registry.open(100);
        let (_, out_c) = registry.open(100);
        assert!(registry.subscribe(a, Bytes::from_static(b"chat")));
        assert!(registry.subscribe(b, Bytes::from_static(b"chat")));
        assert!(registry.subscribe(b, Bytes::from_static(b"chat")), "twice is once");
        assert_eq!(registry.publish(b"chat", Out::Text(Bytes::from_static(b"hi"))), 2);
        assert_eq!((out_a.pending(), out_b.pending(), out_c.pending()), (2, 2, 0));
        assert!(registry.unsubscribe(a, b"chat"));
        assert!(!registry.unsubscribe(a, b"chat"));
        registry.remove(b);
        assert_eq!(registry.publish(b"chat", Out::Text(Bytes::from_static(b"hi"))), 0);
        assert_eq!(registry.publish(b"none", Out::Text(Bytes::from_static(b"hi"))), 0);
    }
}
