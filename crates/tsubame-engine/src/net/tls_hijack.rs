//! Full hijack on a TLS connection: the app cannot be given the TCP
//! socket (it carries TLS records), so it gets one end of a UNIX socket
//! pair and a task here carries plaintext between the other end and the
//! TLS stream, both ways, until either side is done. This is what lets
//! ActionCable 6.1 (which needs `env["rack.hijack"].call` and an IO it can
//! register with nio4r) serve `wss://`, as it does under Puma.
//!
//! Ends: when the app closes its end, the TLS side is shut down
//! (close_notify, then FIN) and the task stops once the client's bytes can
//! no longer be delivered; when the client closes, the app reads EOF. The
//! task is not a connection (it is not counted in `connections_active`
//! and a stop does not wait for it), like a hijacked plain socket; it ends
//! with the process at the latest.

use std::os::fd::OwnedFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Starts the bridge and returns the app's end (a blocking UNIX socket,
/// close-on-exec). Must run on the engine's runtime.
pub(crate) fn hijack<T>(tls: tokio_rustls::server::TlsStream<T>) -> std::io::Result<OwnedFd>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (app_end, engine_end) = std::os::unix::net::UnixStream::pair()?;
    engine_end.set_nonblocking(true)?;
    let engine_end = tokio::net::UnixStream::from_std(engine_end)?;
    tokio::spawn(bridge(tls, engine_end));
    Ok(app_end.into())
}

async fn bridge<T>(mut tls: tokio_rustls::server::TlsStream<T>, mut app: tokio::net::UnixStream)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // copy_bidirectional shuts down each side's write half when the other
    // side's reads end, and returns once both directions are done or one
    // fails (the app closed its end entirely, the client reset).
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut app).await;
    let _ = tls.shutdown().await;
}
