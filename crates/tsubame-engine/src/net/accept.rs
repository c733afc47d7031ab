//! Accepting connections, with a hand-off to less busy processes.
//!
//! Cluster workers all accept on one shared listening socket: the kernel
//! wakes each of them for a new connection and the first to call accept
//! gets it. A worker whose application threads are all busy would win that
//! race as often as an idle one, and its client would wait behind a slow
//! request while another worker sat idle. So a listener may carry a
//! `busy_accept_delay` (Puma's `wait_for_less_busy_worker`): when woken
//! with no idle thread, the engine waits that long before accepting, which
//! lets an idle worker take the connection first. If none does (every
//! worker is busy), it accepts after the delay and queues as usual.
//!
//! This needs readiness apart from the accept itself (the busy check must
//! happen when a connection is waiting, not when the previous accept
//! returned), hence `AsyncFd` instead of tokio's listener types.

use crate::dispatch::queue::JobQueue;
use crate::sys::{accept_nonblocking, OwnedListener};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::unix::AsyncFd;

pub(crate) struct Acceptor<L: OwnedListener> {
    fd: AsyncFd<L>,
    busy_delay: Option<Duration>,
}

impl<L: OwnedListener> Acceptor<L> {
    /// `listener` must be non-blocking. Needs a tokio runtime context.
    pub fn new(listener: L, busy_delay: Option<Duration>) -> io::Result<Self> {
        let fd = crate::sys::register_readable(listener)?;
        Ok(Acceptor { fd, busy_delay })
    }

    async fn accept_with<T>(&self, queue: &JobQueue, accept: impl Fn(&L) -> io::Result<T>) -> io::Result<T> {
        if self.busy_delay.is_some() {
            // The connection accepted last has not been read yet: its task
            // runs first, so its request is queued (and its thread counted
            // busy) before the next accept asks whether a thread is idle.
            // Otherwise one idle worker, woken for a burst, took the whole
            // burst while the others stayed idle (seen inline, where the
            // app thread accepts and counts as idle until a push).
            tokio::task::yield_now().await;
        }
        loop {
            let mut ready = self.fd.readable().await?;
            if let Some(delay) = self.busy_delay {
                hold_back_while_busy(queue, delay).await;
            }
            // WouldBlock (another process took the connection) clears the
            // readiness and waits for the next one.
            if let Ok(result) = ready.try_io(|fd| accept(fd.get_ref())) {
                return result;
            }
        }
    }
}

/// How often a held-back accept looks again whether a thread came free.
const BUSY_POLL: Duration = Duration::from_millis(1);

/// Waits up to `delay` while no application thread is idle. "No thread
/// waiting" is also true for a moment after each response, until the
/// thread that wrote it asks for the next request, and a client that sends
/// its next request at once lands right in that moment; so the check is
/// repeated and the wait ends as soon as a thread is back, while a worker
/// that is really busy holds back for the whole delay.
async fn hold_back_while_busy(queue: &JobQueue, delay: Duration) {
    let deadline = tokio::time::Instant::now() + delay;
    while queue.waiting() == 0 {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(BUSY_POLL.min(deadline - now)).await;
    }
}

impl Acceptor<std::net::TcpListener> {
    pub async fn accept(&self, queue: &JobQueue) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
        let (fd, peer) = self.accept_with(queue, accept_nonblocking).await?;
        let peer = peer
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a TCP peer without an IP address"))?;
        Ok((tokio::net::TcpStream::from_std(fd.into())?, peer))
    }
}

impl Acceptor<std::os::unix::net::UnixListener> {
    pub async fn accept(&self, queue: &JobQueue) -> io::Result<tokio::net::UnixStream> {
        let (fd, _) = self.accept_with(queue, accept_nonblocking).await?;
        tokio::net::UnixStream::from_std(fd.into())
    }
}
