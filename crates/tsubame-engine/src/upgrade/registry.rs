//! The engine-held connections by id, what Ruby has written to each and
//! not yet sent, and the channels they subscribe to (`Tsubame.publish`).
//! Ruby threads write and publish here without waiting on any socket.
//!
//! A message for a WebSocket on a plain socket (HTTP/1.1, TCP or UNIX, no
//! permessage-deflate) with nothing else in flight goes straight to the
//! socket from the writing thread, with one non-blocking send: an echo
//! then needs no second hand-off to the I/O thread, and a publish to idle
//! connections wakes no task per connection. Whatever the socket does not
//! take at once (it is full, or took part of the frame), and every message
//! while something is in flight, is queued, and the connection's task is
//! woken to send it, as on every other connection. One lock (`OutState`)
//! covers "nothing in flight" and the send, so frames leave in the order
//! they were written and never interleave.

use crate::sys::send_nonblocking;
use crate::ws::frame::{server_header, OpCode};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::IoSlice;
use std::os::fd::RawFd;
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
    /// The socket writers may send to themselves (`Outbound::direct_writes`),
    /// held only while the session runs, so it is never another socket
    /// that reused the number.
    direct: Option<RawFd>,
    /// The task has bytes in flight (taken from here, or a pong, ping or
    /// close of its own): the socket is its until `sent`.
    writing: bool,
    /// The part of a frame a direct write left over; it goes out before
    /// anything else (`take`, `begin_write`).
    spill: BytesMut,
    /// How much of `bytes` the spill's payload is.
    spill_counted: usize,
    /// A direct write sent everything there was: `on_drained` is due.
    drained: bool,
}

impl OutState {
    /// The socket a writer may send to itself now: nothing is queued or in
    /// flight, so its frame would be the next on the wire anyway.
    fn direct_now(&self) -> Option<RawFd> {
        self.direct
            .filter(|_| !self.writing && self.queue.is_empty() && self.spill.is_empty())
    }

    /// The socket is the task's until `sent`; what it must send first.
    fn claim(&mut self) -> Taken {
        self.writing = true;
        Taken {
            // Taken whole: a split would keep the allocation alive in the
            // connection through its spare capacity.
            spill: std::mem::take(&mut self.spill),
            counted: std::mem::take(&mut self.spill_counted),
            overflowed: self.overflowed,
            drained: std::mem::take(&mut self.drained),
        }
    }
}

/// What a direct write did.
enum Direct {
    /// The whole frame is on the socket.
    Sent,
    /// Part is; the rest is the spill, for the task.
    Partly,
    /// Nothing went (the socket is full or failing): queue the message.
    NotSent,
}

/// What the task takes before it writes.
pub(crate) struct Taken {
    /// What a direct write left of a frame: to be sent first.
    pub spill: BytesMut,
    /// Payload bytes of the spill, for `sent`.
    pub counted: usize,
    /// The queue overflowed (close 1008).
    pub overflowed: bool,
    /// Direct writes emptied everything since the last take: `on_drained`
    /// is due if nothing is left after this write.
    pub drained: bool,
}

/// While it lives, writers may send to the session's socket themselves;
/// dropped (the session ended, or its future was dropped) before the
/// socket can be closed, since the session borrows the socket.
pub(crate) struct DirectWrites<'a>(&'a Outbound);

impl Drop for DirectWrites<'_> {
    fn drop(&mut self) {
        self.0.stop_direct();
    }
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

    /// Sends `out` now if the socket is free and takes it all
    /// (`direct_writes`), else queues it for the task to send.
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
        } else if let Some(fd) = state.direct_now() {
            match send_direct(&mut state, fd, &out) {
                Direct::Sent => {
                    // The task hears of it only if the handler wants
                    // on_drained: an echo or a publish wakes nothing.
                    let wake = self.wants_drained.load(Ordering::Acquire);
                    state.drained |= wake;
                    drop(state);
                    if wake {
                        self.wake.notify_one();
                    }
                    return Ok(());
                }
                Direct::Partly => {
                    drop(state);
                    self.wake.notify_one();
                    return Ok(());
                }
                Direct::NotSent => {}
            }
        }
        state.bytes += out.len();
        state.queue.push_back(out);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Lets writers send to `fd` themselves while the guard lives. Only
    /// for a plain socket the session writes WebSocket frames to unchanged
    /// (no TLS, no HTTP/2 stream, no permessage-deflate); the session must
    /// own the socket for longer than the guard.
    pub(crate) fn direct_writes(&self, fd: RawFd) -> DirectWrites<'_> {
        self.lock().direct = Some(fd);
        DirectWrites(self)
    }

    /// No more direct writes: the session is ending, or about to send its
    /// close frame, after which nothing of Ruby's may follow.
    pub(crate) fn stop_direct(&self) {
        self.lock().direct = None;
    }

    /// The task is about to write frames of its own: what a direct write
    /// left over goes first, and nobody else writes until `sent`.
    pub(crate) fn begin_write(&self) -> Taken {
        self.lock().claim()
    }

    /// `begin_write`, and everything queued, in order, into `into`.
    pub(crate) fn take(&self, into: &mut Vec<Out>) -> Taken {
        let mut state = self.lock();
        into.extend(state.queue.drain(..));
        state.claim()
    }

    /// The task's write is done and `sent` payload bytes of what it took
    /// went to the socket; what is still pending.
    pub(crate) fn sent(&self, sent: usize) -> usize {
        let mut state = self.lock();
        state.writing = false;
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

/// One non-blocking send of `out` as a frame: the header from the stack,
/// the payload from where it is (a publish's bytes are shared, not copied
/// per connection). Called with the state locked and the socket free.
fn send_direct(state: &mut OutState, fd: RawFd, out: &Out) -> Direct {
    let (opcode, data) = match out {
        Out::Text(data) => (OpCode::Text, data),
        Out::Binary(data) => (OpCode::Binary, data),
        Out::Close(_) => return Direct::NotSent,
    };
    let (head, head_len) = server_header(opcode, data.len());
    let total = head_len + data.len();
    match send_nonblocking(fd, &[IoSlice::new(&head[..head_len]), IoSlice::new(data)]) {
        Ok(n) if n >= total => Direct::Sent,
        Ok(n) => {
            // The frame is begun on the wire: its rest must be the next
            // bytes sent, whoever sends them.
            if n < head_len {
                state.spill.extend_from_slice(&head[n..head_len]);
                state.spill.extend_from_slice(data);
            } else {
                state.spill.extend_from_slice(&data[n - head_len..]);
            }
            let counted = data.len().min(total - n);
            state.spill_counted += counted;
            state.bytes += counted;
            Direct::Partly
        }
        // Full (WouldBlock), or failing (the task's own write will find
        // out and end the session): the queue takes it as before.
        Err(_) => Direct::NotSent,
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
        assert!(!out.take(&mut taken).overflowed);
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
        assert!(out.take(&mut Vec::new()).overflowed, "the task learns it overflowed");
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

    /// A socket pair whose writing end is small, so it fills quickly.
    fn pair() -> (std::os::unix::net::UnixStream, std::os::unix::net::UnixStream) {
        std::os::unix::net::UnixStream::pair().unwrap()
    }

    fn read_now(from: &mut std::os::unix::net::UnixStream) -> Vec<u8> {
        use std::io::Read;
        from.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    #[test]
    fn a_free_socket_takes_the_frame_at_once_and_the_task_hears_nothing() {
        use std::os::fd::AsRawFd;
        let registry = Registry::default();
        let (_, out) = registry.open(1 << 20);
        let (ours, mut client) = pair();
        let guard = out.direct_writes(ours.as_raw_fd());
        out.push(Out::Text(Bytes::from_static(b"hello"))).unwrap();
        assert_eq!(read_now(&mut client), b"\x81\x05hello");
        assert_eq!(out.pending(), 0);
        let mut taken = Vec::new();
        let got = out.take(&mut taken);
        assert!(taken.is_empty() && got.spill.is_empty() && !got.drained);
        // While the task writes (between take and sent), writes queue.
        out.push(Out::Binary(Bytes::from_static(b"ab"))).unwrap();
        assert!(read_now(&mut client).is_empty(), "nothing passes the task's write");
        assert_eq!(out.pending(), 2);
        out.sent(0);
        out.take(&mut taken);
        assert_eq!(taken, vec![Out::Binary(Bytes::from_static(b"ab"))]);
        out.sent(2);
        // Once the guard is gone (the session ended), nothing goes direct.
        drop(guard);
        out.push(Out::Text(Bytes::from_static(b"later"))).unwrap();
        assert!(read_now(&mut client).is_empty());
        assert_eq!(out.pending(), 5);
    }

    #[test]
    fn a_full_socket_leaves_the_rest_of_the_frame_to_the_task_and_later_writes_queue_behind_it() {
        use std::os::fd::AsRawFd;
        let registry = Registry::default();
        let (_, out) = registry.open(64 << 20);
        out.set_wants_drained(true);
        let (ours, mut client) = pair();
        let _guard = out.direct_writes(ours.as_raw_fd());
        let big = Bytes::from(vec![b'x'; 8 << 20]);
        out.push(Out::Binary(big.clone())).unwrap();
        let pending = out.pending();
        assert!(
            pending > 0 && pending < big.len(),
            "the socket took part: {pending} left"
        );
        out.push(Out::Text(Bytes::from_static(b"after"))).unwrap();
        assert_eq!(out.pending(), pending + 5, "queued behind the rest, not sent");
        let mut taken = Vec::new();
        let got = out.take(&mut taken);
        assert_eq!(got.counted, pending);
        assert_eq!(taken, vec![Out::Text(Bytes::from_static(b"after"))]);
        // The bytes on the wire, then the spill, make exactly one frame.
        let mut wire = read_now(&mut client);
        wire.extend_from_slice(&got.spill);
        let (head, head_len) = server_header(OpCode::Binary, big.len());
        assert_eq!(&wire[..head_len], &head[..head_len]);
        assert_eq!(wire.len(), head_len + big.len());
        assert!(wire[head_len..].iter().all(|&b| b == b'x'));
        assert_eq!(out.sent(got.counted + 5), 0);
        // Now free again: the next write goes straight out, and on_drained
        // is announced to the task.
        out.push(Out::Text(Bytes::from_static(b"ok"))).unwrap();
        assert_eq!(read_now(&mut client), b"\x81\x02ok");
        assert!(out.take(&mut taken).drained);
    }

    #[test]
    fn a_socket_that_cannot_take_anything_gets_the_message_queued() {
        use std::os::fd::AsRawFd;
        let registry = Registry::default();
        let (_, out) = registry.open(64 << 20);
        let (ours, _client) = pair();
        ours.set_nonblocking(true).unwrap();
        // Fill the socket to the brim first.
        let fill = vec![0u8; 65536];
        while send_nonblocking(ours.as_raw_fd(), &[IoSlice::new(&fill)]).is_ok() {}
        let _guard = out.direct_writes(ours.as_raw_fd());
        out.push(Out::Text(Bytes::from_static(b"waits"))).unwrap();
        let mut taken = Vec::new();
        let got = out.take(&mut taken);
        assert!(got.spill.is_empty());
        assert_eq!(taken, vec![Out::Text(Bytes::from_static(b"waits"))]);
        assert_eq!(out.pending(), 5);
    }

    #[test]
    fn the_task_stopping_direct_writes_keeps_them_behind_its_close() {
        use std::os::fd::AsRawFd;
        let registry = Registry::default();
        let (_, out) = registry.open(1 << 20);
        let (ours, mut client) = pair();
        let _guard = out.direct_writes(ours.as_raw_fd());
        out.stop_direct();
        out.push(Out::Text(Bytes::from_static(b"late"))).unwrap();
        assert!(read_now(&mut client).is_empty());
        assert_eq!(out.pending(), 4);
    }
}
