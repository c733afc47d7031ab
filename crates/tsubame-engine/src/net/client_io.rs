//! The client sockets the engine serves: plain TCP, UNIX and TLS streams
//! behind one trait, and the writes every protocol uses on them.

use crate::sys;
use bytes::Bytes;
use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};

/// How much a connection reads from its socket at a time.
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// `tokio::time::timeout`, except that a future ready at its first poll (a
/// reply the socket takes whole, as almost every one on a healthy
/// connection) never reads the clock for a deadline it cannot miss.
pub(crate) async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    fut: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut fut = std::pin::pin!(fut);
    let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => tokio::time::timeout(limit, fut).await,
    }
}

/// A client socket the engine can serve and, on `rack.hijack`, give away.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether a finished write may still sit in a buffer until flushed
    /// (TLS: rustls takes the plaintext before the socket has taken the
    /// records). Plain sockets say no, so their flush is compiled out.
    const BUFFERS_WRITES: bool = false;

    /// Whether `poll_send_file` works: the stream is a plain socket the
    /// kernel can copy a file into (sendfile). TLS must encrypt, so it
    /// reads and writes instead.
    const SENDS_FILES: bool = false;

    fn into_owned_fd(self) -> std::io::Result<OwnedFd>;

    /// The socket's descriptor when what is written to the stream goes to
    /// it unchanged (plain TCP and UNIX sockets; not TLS), for writers
    /// outside the task (`upgrade/registry.rs`).
    fn plain_socket(&self) -> Option<RawFd> {
        None
    }

    /// Sends up to `count` bytes of `file` from `*offset` straight from the
    /// kernel (sendfile), once the socket can take them; advances `*offset`
    /// and returns how many went. `Ok(0)` means the file ends at `*offset`.
    /// Only called when `SENDS_FILES`.
    fn poll_send_file(
        &mut self,
        _cx: &mut Context<'_>,
        _file: &File,
        _offset: &mut u64,
        _count: usize,
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Err(std::io::ErrorKind::Unsupported.into()))
    }

    /// Writes some of `buf` as the start of a longer send (a file's head
    /// before `poll_send_file`): plain sockets hold it back (MSG_MORE) so
    /// it leaves in the same packets as the file's first bytes. Only
    /// called when `SENDS_FILES`.
    fn poll_write_more(&mut self, _cx: &mut Context<'_>, _buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Err(std::io::ErrorKind::Unsupported.into()))
    }
}

/// Writes a file region with `ClientIo::poll_send_file` for the two plain
/// socket types: wait until writable, try, and on WouldBlock (tokio then
/// forgets the readiness) wait again.
macro_rules! poll_send_file_on_socket {
    () => {
        const SENDS_FILES: bool = true;

        fn poll_send_file(
            &mut self,
            cx: &mut Context<'_>,
            file: &File,
            offset: &mut u64,
            count: usize,
        ) -> Poll<std::io::Result<usize>> {
            loop {
                ready!(self.poll_write_ready(cx))?;
                match self.try_io(Interest::WRITABLE, || {
                    sys::sendfile(self.as_fd(), file.as_fd(), offset, count)
                }) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    done => return Poll::Ready(done),
                }
            }
        }

        fn poll_write_more(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            loop {
                ready!(self.poll_write_ready(cx))?;
                match self.try_io(Interest::WRITABLE, || sys::send_more(self.as_fd(), buf)) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    done => return Poll::Ready(done),
                }
            }
        }
    };
}

/// Writes all of `head` with `ClientIo::poll_write_more`: it waits in the
/// socket for the body that follows instead of going out as a packet of
/// its own.
pub(crate) async fn send_head_more<T: ClientIo>(io: &mut T, head: &[u8]) -> std::io::Result<()> {
    let mut rest = head;
    while !rest.is_empty() {
        let n = std::future::poll_fn(|cx| io.poll_write_more(cx, rest)).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        rest = &rest[n..];
    }
    Ok(())
}

/// Writes all of `bytes` and, where the stream buffers, pushes them out:
/// after this the connection may wait on something else (the next
/// request, the app's next chunk) without leaving bytes behind.
pub(crate) async fn send<T: ClientIo>(io: &mut T, bytes: &[u8]) -> std::io::Result<()> {
    io.write_all(bytes).await?;
    if T::BUFFERS_WRITES {
        io.flush().await?;
    }
    Ok(())
}

/// `send` for several pieces at once, with vectored writes: one syscall
/// for as many pieces as the socket takes.
pub(crate) async fn send_parts<T: ClientIo>(io: &mut T, parts: &[Bytes]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = io.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    if T::BUFFERS_WRITES {
        io.flush().await?;
    }
    Ok(())
}

impl ClientIo for tokio::net::TcpStream {
    poll_send_file_on_socket!();

    fn plain_socket(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }

    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        let std = self.into_std()?;
        // Ruby's IO expects to manage blocking itself; hand it a plain socket.
        std.set_nonblocking(false)?;
        Ok(std.into())
    }
}

/// Full hijack hands Ruby a descriptor; on a TLS connection the raw one
/// would carry ciphertext, so the app gets a UNIX socket whose other end
/// the engine bridges to the TLS stream (`tls_hijack.rs`).
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ClientIo for tokio_rustls::server::TlsStream<T> {
    const BUFFERS_WRITES: bool = true;

    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        crate::net::tls_hijack::hijack(self)
    }
}

impl ClientIo for tokio::net::UnixStream {
    poll_send_file_on_socket!();

    fn plain_socket(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }

    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        let std = self.into_std()?;
        std.set_nonblocking(false)?;
        Ok(std.into())
    }
}
