//! The channel a streamed body flows through: an application thread
//! (blocking, GVL released while it waits) on one end, the connection task
//! (async) on the other. Bounded by bytes, so a slow client slows the body
//! down instead of letting it pile up in memory, and a waiting sender can be
//! interrupted, which tokio's blocking send cannot.

use crate::dispatch::waker::Waker;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::Notify;

/// One message of a streamed body.
#[derive(Debug)]
pub enum StreamMsg {
    Data(Bytes),
    /// The body finished normally. A sender dropped without sending this
    /// means the body failed, and the connection is cut short so the client
    /// cannot mistake a partial body for a whole one.
    End,
}

struct State {
    queue: VecDeque<StreamMsg>,
    queued_bytes: usize,
    sender_gone: bool,
    receiver_gone: bool,
    /// Senders blocked on `space`: room is signalled only when there are
    /// some (a condvar notify is a syscall even when nobody waits).
    senders_waiting: usize,
    /// Set while a sender on a fiber waits for room without blocking its
    /// thread: called whenever room is made (or the receiver goes).
    room_waker: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    space: Condvar,
    data: Notify,
    limit: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent; ignore poisoning.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct StreamSender(Arc<Shared>);
pub struct StreamReceiver(Arc<Shared>);

impl std::fmt::Debug for StreamReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamReceiver")
    }
}

#[derive(Debug)]
pub enum SendError {
    /// The connection is gone (client disconnected or write failed).
    Closed,
    /// The caller's interrupt flag was raised while waiting for room.
    Interrupted(StreamMsg),
}

#[derive(Debug)]
pub enum TrySendError {
    /// The connection is gone (client disconnected or write failed).
    Closed,
    /// The channel is over its limit; the message comes back.
    Full(StreamMsg),
}

/// `limit` is how many body bytes may wait unsent before senders block.
pub fn stream_channel(limit: usize) -> (StreamSender, StreamReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            queued_bytes: 0,
            sender_gone: false,
            receiver_gone: false,
            senders_waiting: 0,
            room_waker: None,
        }),
        space: Condvar::new(),
        data: Notify::new(),
        limit,
    });
    (StreamSender(shared.clone()), StreamReceiver(shared))
}

fn msg_len(msg: &StreamMsg) -> usize {
    match msg {
        StreamMsg::Data(b) => b.len(),
        StreamMsg::End => 0,
    }
}

impl StreamSender {
    /// Sends, blocking while the channel is over its limit.
    pub fn send(&self, msg: StreamMsg, interrupted: &AtomicBool) -> Result<(), SendError> {
        let mut state = self.0.lock();
        loop {
            if state.receiver_gone {
                return Err(SendError::Closed);
            }
            if state.queued_bytes < self.0.limit {
                break;
            }
            if interrupted.load(Ordering::Acquire) {
                return Err(SendError::Interrupted(msg));
            }
            state.senders_waiting += 1;
            state = self.0.space.wait(state).unwrap_or_else(|e| e.into_inner());
            state.senders_waiting -= 1;
        }
        self.push(state, msg);
        Ok(())
    }

    /// `send` if it would not wait, under a single lock: the common case
    /// of an app writing many small chunks to a client that keeps up.
    /// `Err(Full(msg))` hands the message back.
    pub fn try_send(&self, msg: StreamMsg) -> Result<(), TrySendError> {
        let state = self.0.lock();
        if state.receiver_gone {
            return Err(TrySendError::Closed);
        }
        if state.queued_bytes >= self.0.limit {
            return Err(TrySendError::Full(msg));
        }
        self.push(state, msg);
        Ok(())
    }

    /// The receiver is woken only when the queue goes from empty to not
    /// empty: it looks at the queue before every wait and takes all of it,
    /// so later messages are covered by that wake-up. An app writing many
    /// small chunks then costs one wake-up per write the engine makes, not
    /// one per chunk.
    fn push(&self, mut state: MutexGuard<'_, State>, msg: StreamMsg) {
        let was_empty = state.queue.is_empty();
        state.queued_bytes += msg_len(&msg);
        state.queue.push_back(msg);
        drop(state);
        if was_empty {
            self.0.data.notify_one();
        }
    }

    /// Would `send` go through without waiting?
    pub fn has_room(&self) -> bool {
        let state = self.0.lock();
        state.receiver_gone || state.queued_bytes < self.0.limit
    }

    pub fn is_closed(&self) -> bool {
        self.0.lock().receiver_gone
    }

    /// For a sender that must not block its thread (a fiber): `waker` is
    /// called each time room is made, until it is replaced or cleared; the
    /// sender then checks `has_room` again.
    pub fn set_room_waker(&self, waker: Option<Waker>) {
        self.0.lock().room_waker = waker;
    }

    /// Wakes a sender blocked in `send` so it can look at its flag.
    pub fn wake(&self) {
        drop(self.0.lock());
        self.0.space.notify_all();
    }
}

impl Drop for StreamSender {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.data.notify_one();
    }
}

impl StreamReceiver {
    /// The next message, or `None` once the sender is dropped and drained.
    pub async fn recv(&mut self) -> Option<StreamMsg> {
        loop {
            {
                let mut state = self.0.lock();
                if let Some(msg) = state.queue.pop_front() {
                    state.queued_bytes -= msg_len(&msg);
                    self.made_room(state);
                    return Some(msg);
                }
                if state.sender_gone {
                    return None;
                }
            }
            // notify_one leaves a permit when nobody waits, so a send
            // between the unlock above and this await is not missed.
            self.0.data.notified().await;
        }
    }

    /// Waits for at least one message, then moves up to `max` of those
    /// queued into `out` under one lock: the writer then sends everything
    /// the app produced while it was busy in one write, instead of one
    /// syscall (and one sender wake-up) per chunk. Returns false once the
    /// sender is dropped and nothing is left.
    pub async fn recv_batch(&mut self, out: &mut Vec<StreamMsg>, max: usize) -> bool {
        loop {
            match self.take_ready(out, max) {
                Taken::Some => return true,
                Taken::SenderGone => return false,
                Taken::Nothing => {}
            }
            // As in `recv`: a permit left by notify_one covers a send
            // between the unlock and this await.
            self.0.data.notified().await;
        }
    }

    /// `recv_batch` without waiting: whatever is queued right now.
    pub fn try_recv_batch(&mut self, out: &mut Vec<StreamMsg>, max: usize) {
        self.take_ready(out, max);
    }

    fn take_ready(&mut self, out: &mut Vec<StreamMsg>, max: usize) -> Taken {
        let mut state = self.0.lock();
        if state.queue.is_empty() {
            return if state.sender_gone {
                Taken::SenderGone
            } else {
                Taken::Nothing
            };
        }
        let n = state.queue.len().min(max.max(1));
        let mut freed = 0;
        for msg in state.queue.drain(..n) {
            freed += msg_len(&msg);
            out.push(msg);
        }
        state.queued_bytes -= freed;
        self.made_room(state);
        Taken::Some
    }

    /// Tells whoever waits for room (a blocked thread, a parked fiber).
    fn made_room(&self, state: MutexGuard<'_, State>) {
        let blocked = state.senders_waiting > 0;
        let waker = state.room_waker.clone();
        drop(state);
        if blocked {
            self.0.space.notify_all();
        }
        if let Some(waker) = waker {
            waker();
        }
    }
}

enum Taken {
    Some,
    Nothing,
    SenderGone,
}

impl Drop for StreamReceiver {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.receiver_gone = true;
        let waker = state.room_waker.take();
        drop(state);
        self.0.space.notify_all();
        if let Some(waker) = waker {
            waker();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn delivers_in_order_and_applies_backpressure() {
        let (tx, mut rx) = stream_channel(10);
        let producer = std::thread::spawn(move || {
            let flag = AtomicBool::new(false);
            for i in 0..100u8 {
                tx.send(StreamMsg::Data(Bytes::from(vec![i; 4])), &flag).unwrap();
            }
            tx.send(StreamMsg::End, &flag).unwrap();
        });
        let mut got = Vec::new();
        while let Some(msg) = rx.recv().await {
            match msg {
                StreamMsg::Data(b) => got.extend_from_slice(&b),
                StreamMsg::End => break,
            }
        }
        producer.join().unwrap();
        assert_eq!(got.len(), 400);
        assert!(got.chunks(4).enumerate().all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_room_waker_hears_of_room_and_of_the_receiver_leaving() {
        let (tx, mut rx) = stream_channel(2);
        let flag = AtomicBool::new(false);
        tx.send(StreamMsg::Data(Bytes::from_static(b"xx")), &flag).unwrap();
        assert!(!tx.has_room());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = calls.clone();
        tx.set_room_waker(Some(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })));
        assert!(rx.recv().await.is_some());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(tx.has_room());
        drop(rx);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(tx.is_closed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_batch_takes_what_is_queued_up_to_max_and_frees_its_room() {
        let (tx, mut rx) = stream_channel(8);
        let flag = AtomicBool::new(false);
        let mut batch = Vec::new();
        rx.try_recv_batch(&mut batch, 10);
        assert!(batch.is_empty());
        for piece in [&b"ab"[..], b"cd", b"ef", b"gh"] {
            tx.send(StreamMsg::Data(Bytes::copy_from_slice(piece)), &flag).unwrap();
        }
        assert!(!tx.has_room());
        assert!(rx.recv_batch(&mut batch, 3).await);
        let got: Vec<u8> = batch
            .iter()
            .flat_map(|m| match m {
                StreamMsg::Data(b) => b.to_vec(),
                StreamMsg::End => Vec::new(),
            })
            .collect();
        assert_eq!(got, b"abcdef");
        assert!(tx.has_room());
        tx.send(StreamMsg::End, &flag).unwrap();
        drop(tx);
        batch.clear();
        rx.try_recv_batch(&mut batch, 10);
        assert_eq!(batch.len(), 2);
        assert!(matches!(batch[1], StreamMsg::End));
        batch.clear();
        assert!(!rx.recv_batch(&mut batch, 10).await);
    }

    #[test]
    fn try_send_hands_the_message_back_when_full_and_fails_once_closed() {
        let (tx, rx) = stream_channel(2);
        tx.try_send(StreamMsg::Data(Bytes::from_static(b"xx"))).unwrap();
        match tx.try_send(StreamMsg::Data(Bytes::from_static(b"yy"))) {
            Err(TrySendError::Full(StreamMsg::Data(back))) => assert_eq!(&back[..], b"yy"),
            other => panic!("expected Full, got {other:?}"),
        }
        drop(rx);
        assert!(matches!(tx.try_send(StreamMsg::End), Err(TrySendError::Closed)));
    }

    #[test]
    fn sender_learns_the_receiver_is_gone() {
        let (tx, rx) = stream_channel(1);
        drop(rx);
        let flag = AtomicBool::new(false);
        assert!(matches!(tx.send(StreamMsg::End, &flag), Err(SendError::Closed)));
    }

    #[test]
    fn a_blocked_sender_can_be_interrupted() {
        let (tx, _rx) = stream_channel(1);
        let flag = AtomicBool::new(false);
        tx.send(StreamMsg::Data(Bytes::from_static(b"xx")), &flag).unwrap();
        flag.store(true, Ordering::Release);
        assert!(matches!(
            tx.send(StreamMsg::Data(Bytes::from_static(b"y")), &flag),
            Err(SendError::Interrupted(_))
        ));
    }
}
