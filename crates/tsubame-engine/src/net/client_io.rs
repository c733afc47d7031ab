//! The client sockets the engine serves: plain TCP, UNIX and TLS streams
//! behind one trait, and the writes every protocol uses on them.

use bytes::Bytes;
use std::io::IoSlice;
use std::os::fd::OwnedFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// How much a connection reads from its socket at a time.
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// A client socket the engine can serve and, on `rack.hijack`, give away.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether a finished write may still sit in a buffer until flushed
    /// (TLS: rustls takes the plaintext before the socket has taken the
    /// records). Plain sockets say no, so their flush is compiled out.
    const BUFFERS_WRITES: bool = false;

    fn into_owned_fd(self) -> std::io::Result<OwnedFd>;
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
    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        let std = self.into_std()?;
        // Ruby's IO expects to manage blocking itself; hand it a plain socket.
        std.set_nonblocking(false)?;
        Ok(std.into())
    }
}

/// Full hijack hands Ruby the raw descriptor, and on a TLS connection that
/// would carry ciphertext: refused (the env does not offer `rack.hijack`
/// there; partial hijack, which the engine writes, still works).
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ClientIo for tokio_rustls::server::TlsStream<T> {
    const BUFFERS_WRITES: bool = true;

    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "full hijack is not available on a TLS connection",
        ))
    }
}

impl ClientIo for tokio::net::UnixStream {
    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        let std = self.into_std()?;
        std.set_nonblocking(false)?;
        Ok(std.into())
    }
}
