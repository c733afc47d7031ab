//! Lingering close: after an early answer (413, a 500 for an upload that
//! could not be stored, a 400 or 408 with the body still arriving) the
//! client may still be sending. Closing a socket with unread bytes makes
//! the kernel answer with a RST, and a client that writes its whole body
//! before it reads (most do, Net::HTTP and curl without `Expect` among
//! them) fails on the write and never sees the answer. Reading and
//! dropping what still arrives, for a bounded time and amount, lets it
//! finish and read the answer. HTTP/2 drains a refused stream with the
//! same bounds (`h2/connection.rs`).

use crate::net::client_io::{ClientIo, READ_CHUNK};
use crate::shared::Shared;
use bytes::BytesMut;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::{timeout_at, Instant};

/// How much is read and thrown away at most. A client blocked writing its
/// body needs the rest of it taken before it turns to read; a few MiB
/// covers the uploads a limit usually refuses (a form, an image) without
/// letting a refused client waste much bandwidth. Past it the close resets.
pub(crate) const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// How long at most: long enough for a loopback or LAN client to send
/// `LINGER_BYTES`, short enough that a client which neither sends nor
/// closes holds its connection slot (and descriptor) only briefly.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);

/// Reads and drops incoming bytes until the client closes, `LINGER_BYTES`
/// or `LINGER_TIME` are used up, a read fails, or the server stops (a
/// stopping server does not wait on refused clients). The write side must
/// already be shut down, so the client has the answer and its end.
/// `buf` is the connection's read buffer; whatever it held is dropped.
pub(crate) async fn linger<T: ClientIo>(io: &mut T, buf: &mut BytesMut, shared: &Shared) {
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    if shared.is_stopping() {
        return;
    }
    let deadline = Instant::now() + LINGER_TIME;
    let mut left = LINGER_BYTES;
    loop {
        buf.clear();
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            biased;
            _ = &mut stop => return,
            read = timeout_at(deadline, io.read_buf(buf)) => read,
        };
        match read {
            Ok(Ok(n)) if n > 0 && n < left => left -= n,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::EngineOptions;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (server, client)
    }

    /// Writes `total` bytes (or until the write fails); returns how many went out.
    fn send(mut client: TcpStream, total: usize, close: bool) -> tokio::task::JoinHandle<usize> {
        tokio::spawn(async move {
            let chunk = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while sent < total {
                match client.write(&chunk[..chunk.len().min(total - sent)]).await {
                    Ok(n) => sent += n,
                    Err(_) => return sent,
                }
            }
            if close {
                let _ = client.shutdown().await;
            } else {
                // Stay open, so only the byte bound can end the linger.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            sent
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ends_at_the_clients_eof() {
        let shared = Shared::new(EngineOptions::default(), None);
        let (mut server, client) = pair().await;
        let writer = send(client, 300 * 1024, true);
        let started = std::time::Instant::now();
        linger(&mut server, &mut BytesMut::new(), &shared).await;
        assert!(started.elapsed() < LINGER_TIME, "{:?}", started.elapsed());
        assert_eq!(writer.await.ok(), Some(300 * 1024), "every byte was taken");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ends_after_the_byte_budget() {
        let shared = Shared::new(EngineOptions::default(), None);
        let (mut server, client) = pair().await;
        let writer = send(client, 64 * 1024 * 1024, false);
        let started = std::time::Instant::now();
        let mut buf = BytesMut::new();
        linger(&mut server, &mut buf, &shared).await;
        assert!(started.elapsed() < LINGER_TIME, "{:?}", started.elapsed());
        drop(server);
        let sent = writer.await.unwrap_or(0);
        // The budget was read; the writer was then cut off well short of 64 MiB.
        assert!(sent >= LINGER_BYTES, "{sent}");
        assert!(sent < 64 * 1024 * 1024, "{sent}");
        assert!(buf.capacity() <= READ_CHUNK * 4, "reads reuse one buffer");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_ends_it_and_a_stopping_server_does_not_start_it() {
        let shared = std::sync::Arc::new(Shared::new(EngineOptions::default(), None));
        let (mut server, _client) = pair().await;
        let stopper = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stopper.begin_stop_for_test();
        });
        // The client neither sends nor closes: only the stop ends the wait.
        let started = std::time::Instant::now();
        linger(&mut server, &mut BytesMut::new(), &shared).await;
        assert!(started.elapsed() < LINGER_TIME / 2, "{:?}", started.elapsed());

        let (mut server, _client) = pair().await;
        let started = std::time::Instant::now();
        linger(&mut server, &mut BytesMut::new(), &shared).await;
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
    }
}
