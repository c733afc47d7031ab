//! One connection served over an in-memory stream, with a stand-in
//! application, so the fuzz targets can drive the whole request path
//! (head, body framing, spooling, 100-continue, keep-alive, refusals)
//! without sockets or Ruby. Built only with the `fuzzing` feature.

use crate::dispatch::job::{ConnInfo, ListenerInfo};
use crate::dispatch::queue::Pop;
use crate::dispatch::reply::Reply;
use crate::http1::connection::serve;
use crate::message::body::Body;
use crate::message::head::Framing;
use crate::message::response::ResponseHead;
use crate::net::client_io::ClientIo;
use crate::options::EngineOptions;
use crate::shared::Shared;
use bytes::BytesMut;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

impl ClientIo for DuplexStream {
    fn into_owned_fd(self) -> std::io::Result<OwnedFd> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "an in-memory stream has no descriptor",
        ))
    }
}

/// A request as the application received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Vec<u8>,
    pub framing: Framing,
    pub body: Vec<u8>,
}

#[derive(Debug)]
pub struct Exchange {
    /// Everything the server wrote, until it closed.
    pub output: Vec<u8>,
    /// What reached the application, in order.
    pub seen: Vec<Seen>,
}

/// Sends `input` in writes of the given sizes (cycled), then closes the
/// client's sending side, and collects the server's answer. The stand-in
/// app answers each request 200 with `len=N` (N the body's length).
/// Timeouts run on a paused clock, so a stalled exchange ends at once.
pub fn serve_in_memory(input: &[u8], write_sizes: &[usize], opts: EngineOptions) -> std::io::Result<Exchange> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let shared = Arc::new(Shared::new(opts, None));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conn = Arc::new(ConnInfo {
        peer_addr: "127.0.0.1".into(),
        listener: Arc::new(ListenerInfo {
            server_name: "fuzz".into(),
            server_port: 80,
            url_scheme: "http",
            trust_forwarded_proto: false,
            remote_address: Default::default(),
        }),
    });
    let output = runtime.block_on(async {
        let app = tokio::spawn(application(shared.clone(), seen.clone()));
        let (client, server) = tokio::io::duplex(16 * 1024);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let writer = async move {
            let mut sizes = write_sizes.iter().map(|&n| n.max(1)).cycle();
            let mut rest = input;
            while !rest.is_empty() {
                let n = sizes.next().unwrap_or(rest.len()).min(rest.len());
                if to_server.write_all(&rest[..n]).await.is_err() {
                    return;
                }
                rest = &rest[n..];
                tokio::task::yield_now().await;
            }
            let _ = to_server.shutdown().await;
        };
        let reader = async move {
            let mut out = Vec::new();
            let _ = from_server.read_to_end(&mut out).await;
            out
        };
        let ((), (), out) = tokio::join!(serve(server, conn, shared.clone(), BytesMut::new()), writer, reader);
        app.abort();
        out
    });
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Exchange { output, seen })
}

async fn application(shared: Arc<Shared>, seen: Arc<Mutex<Vec<Seen>>>) {
    loop {
        let mut job = match shared.queue.try_pop() {
            // Popping marks the job running, as a Ruby thread's pop does.
            Pop::Job(job) => job,
            Pop::Closed => return,
            Pop::Empty | Pop::Interrupted => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let body = match std::mem::replace(&mut job.body, Body::Empty) {
            Body::Empty => Vec::new(),
            Body::Memory(bytes) => bytes.to_vec(),
            Body::File { mut file, .. } => {
                let mut data = Vec::new();
                let _ = file.read_to_end(&mut data);
                data
            }
        };
        let text = format!("len={}\n", body.len());
        seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
            method: job.head.method.to_vec(),
            framing: job.head.framing,
            body,
        });
        let reply = match ResponseHead::new(200) {
            Ok(mut head) => {
                let _ = head.header(b"content-type", b"text/plain");
                let finished =
                    head.finish_full(text.len() as u64, job.head.is_head(), job.keep_alive, job.head.version);
                let mut data = finished.bytes;
                if finished.send_body {
                    data.extend_from_slice(text.as_bytes());
                }
                Reply::Full {
                    status: 200,
                    data: data.into(),
                    tail: bytes::Bytes::new(),
                    body_len: text.len() as u64,
                    close: !finished.keep_alive,
                }
            }
            Err(_) => return,
        };
        job.answer(reply);
        shared.queue.finished();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The fuzz target is only as good as this harness: a pipelined pair of
    // requests must reach the stand-in app and be answered in order.
    #[test]
    fn serves_a_pipelined_pair_in_memory() {
        let input = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let exchange = serve_in_memory(input, &[7], EngineOptions::default()).expect("runtime");
        let text = String::from_utf8_lossy(&exchange.output);
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
        assert!(text.contains("len=3\n") && text.contains("len=0\n"), "{text}");
        let methods: Vec<_> = exchange.seen.iter().map(|s| s.method.clone()).collect();
        assert_eq!(methods, vec![b"POST".to_vec(), b"GET".to_vec()]);
        assert_eq!(exchange.seen[0].body, b"abc");
    }
}
