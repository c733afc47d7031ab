//! The socket side of an HTTP/2 connection over TLS: what the `h2` codec
//! writes is held in rustls and written once per pass of the connection
//! task, not once per frame.
//!
//! The codec flushes after every DATA frame larger than 256 bytes (it keeps
//! such a payload aside instead of copying it, and must write it before it
//! takes the next frame), and `tokio-rustls` writes its records to the
//! socket on every write and flush. So each DATA frame of each stream was a
//! TLS record and a `writev` of its own: ten replies ready together were
//! ten syscalls, a streamed body one per chunk.
//!
//! `HeldWrites` hands each write to rustls (which encrypts it into its own
//! buffer, as `tokio-rustls` would) without writing to the socket, and puts
//! off the first flush of a pass: it wakes the connection task and lets the
//! flush go through on the task's next pass, after the stream tasks that
//! were ready meanwhile have queued their frames. Everything then goes out
//! in one `writev` of up to 64 KiB of records (rustls's buffer limit; a full
//! buffer is written out at once). A pass runs from `serve_h2` polling the
//! connection until the connection has nothing left to do (`Pending`),
//! counted in `Passes`. No timer is involved: a flush waits at most for the
//! tasks ahead of the connection's in the run queue.

use std::io::{self, IoSlice, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

/// How many times `serve_h2` has polled its connection; shared with the
/// connection's `HeldWrites`.
#[derive(Clone, Default)]
pub(crate) struct Passes(Arc<AtomicU64>);

impl Passes {
    /// Called by `serve_h2` before each poll of the connection.
    pub fn begin(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn current(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub(crate) struct HeldWrites<T> {
    tls: TlsStream<T>,
    passes: Passes,
    /// The pass in which a flush of held records was put off.
    put_off: Option<u64>,
}

impl<T> HeldWrites<T> {
    pub fn new(tls: TlsStream<T>, passes: Passes) -> Self {
        HeldWrites {
            tls,
            passes,
            put_off: None,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> HeldWrites<T> {
    /// Writes every held record to the socket.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.tls).poll_flush(cx))?;
        self.put_off = None;
        Poll::Ready(Ok(()))
    }

    fn poll_hold(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        loop {
            let n = self.tls.get_mut().1.writer().write_vectored(bufs)?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            if !self.tls.get_ref().1.wants_write() {
                // Nothing held and still nothing taken: rustls takes no
                // more (the connection is closing), so no retry loop.
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            // rustls's buffer is full: write it out, then take more.
            ready!(self.poll_write_out(cx))?;
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeldWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HeldWrites<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_hold(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_hold(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Records held: ours, or one rustls queued itself (a key update).
        if !this.tls.get_ref().1.wants_write() {
            return Poll::Ready(Ok(()));
        }
        let pass = this.passes.current();
        if pass == 0 {
            // The handshake, before `serve_h2` polls the connection: our
            // SETTINGS go at once.
            return this.poll_write_out(cx);
        }
        match this.put_off {
            // Put off in an earlier pass: now it goes.
            Some(earlier) if earlier != pass => this.poll_write_out(cx),
            // Still the pass that put it off: more frames may come.
            Some(_) => Poll::Ready(Ok(())),
            None => {
                this.put_off = Some(pass);
                cx.waker().wake_by_ref();
                Poll::Ready(Ok(()))
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Held records go out before close_notify (both are in rustls's
        // buffer, in order).
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}
