//! One HTTP/2 stream as a byte pipe both ways (`AsyncRead` +
//! `AsyncWrite`), for a stream that carries another protocol after its
//! headers: a WebSocket bootstrapped by extended CONNECT (RFC 8441), whose
//! DATA frames hold WebSocket frames. The engine-held WebSocket session
//! (`upgrade/websocket.rs`) runs over this exactly as over a TCP or TLS
//! socket, so both protocols share one implementation.
//!
//! Flow control stands in for TCP's: the window is given back to the
//! client only as the session reads what arrived (not when it arrives), so
//! a session that stops reading while Ruby handles a message stops the
//! client after one window; a write waits for send capacity (the client's
//! window, and the `h2` crate's bounded send buffer), so a client that does
//! not read holds the writer back instead of filling memory.

use bytes::{Buf, Bytes};
use h2::{RecvStream, SendStream};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(crate) struct StreamIo {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// The part of the last DATA frame not read yet.
    unread: Bytes,
}

impl StreamIo {
    pub(crate) fn new(send: SendStream<Bytes>, recv: RecvStream) -> StreamIo {
        StreamIo {
            send,
            recv,
            unread: Bytes::new(),
        }
    }

    /// Reads and drops what the client still sends until it ends its side
    /// or `limit` bytes or `wait` have passed; the stream then closes
    /// without a reset when the client ends promptly (RFC 8441 §5 maps a
    /// WebSocket's orderly TCP close to END_STREAM both ways).
    pub(crate) async fn linger(&mut self, limit: usize, wait: std::time::Duration) {
        let mut budget = limit;
        let deadline = tokio::time::Instant::now() + wait;
        while !self.recv.is_end_stream() {
            match tokio::time::timeout_at(deadline, self.recv.data()).await {
                Ok(Some(Ok(chunk))) => {
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    match budget.checked_sub(chunk.len()) {
                        Some(left) => budget = left,
                        None => return,
                    }
                }
                _ => return,
            }
        }
    }
}

/// The stream was reset or the connection lost.
fn broken(e: h2::Error) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, e)
}

impl AsyncRead for StreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        while this.unread.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => this.unread = data,
                Some(Err(e)) => return Poll::Ready(Err(broken(e))),
                // END_STREAM: the client's side is closed, as a TCP FIN.
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = this.unread.len().min(buf.remaining());
        buf.put_slice(&this.unread[..n]);
        this.unread.advance(n);
        // The window reopens only for bytes the session has taken.
        let _ = this.recv.flow_control().release_capacity(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for StreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        this.send.reserve_capacity(data.len());
        loop {
            let granted = this.send.capacity();
            if granted > 0 {
                let n = granted.min(data.len());
                this.send
                    .send_data(Bytes::copy_from_slice(&data[..n]), false)
                    .map_err(broken)?;
                return Poll::Ready(Ok(n));
            }
            match ready!(this.send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(broken(e))),
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }

    /// The connection task writes the frames (over TLS once per pass,
    /// `h2/io.rs`); nothing is held here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// END_STREAM: the server's side is closed, as a TCP FIN.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.send.reserve_capacity(0);
        Poll::Ready(this.send.send_data(Bytes::new(), true).map_err(broken))
    }
}
