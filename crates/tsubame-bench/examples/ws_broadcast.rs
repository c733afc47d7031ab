//! The broadcast half of benchmarks/websocket.rb with a client that is not
//! the bottleneck: CLIENTS WebSockets opened to PORT (a plain HTTP/1.1
//! handshake to `/`), then, once stdin gives a line, one `GET /publish`
//! and the time until every connection has read the text frame
//! `broadcast`. All sockets are read at once on one tokio thread (epoll),
//! where a Ruby client reading them one after the other adds its own
//! ~20-40 µs per socket to the figure.
//!
//! Usage: ws_broadcast PORT CLIENTS
//! Prints `connected N` once the connections are open (the caller
//! measures the server's memory then), waits for a line on stdin, and
//! prints `received N of M, last ms, p50 ms, p99 ms`.

use std::io::BufRead;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The frame `upgrade_echo.ru` publishes: FIN + text, 9 bytes, unmasked.
const FRAME: &[u8] = b"\x81\x09broadcast";
const HANDSHAKE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = || std::io::Error::other("usage: ws_broadcast PORT CLIENTS");
    let port: u16 = args.next().and_then(|p| p.parse().ok()).ok_or_else(usage)?;
    let clients: usize = args.next().and_then(|n| n.parse().ok()).ok_or_else(usage)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(run(port, clients))
}

async fn run(port: u16, clients: usize) -> std::io::Result<()> {
    let mut sockets = Vec::with_capacity(clients);
    for _ in 0..clients {
        sockets.push(open(port).await?);
    }
    println!("connected {}", sockets.len());
    // The caller reads the server's memory now, then says go.
    tokio::task::spawn_blocking(|| std::io::stdin().lock().lines().next())
        .await
        .map_err(std::io::Error::other)?;
    let started = Instant::now();
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|socket| tokio::spawn(read_frame(socket, started)))
        .collect();
    publish(port).await?;
    let mut times = Vec::with_capacity(clients);
    // The sockets stay open until every reader is done: a client that
    // closed as soon as it had the frame would have the server closing
    // connections while it is still sending to the others.
    let mut done = Vec::with_capacity(clients);
    for reader in readers {
        if let Ok((elapsed, socket)) = reader.await {
            times.extend(elapsed);
            done.push(socket);
        }
    }
    times.sort();
    let ms = |d: Option<&Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    println!(
        "received {} of {clients}, last {:.1} ms, p50 {:.1} ms, p99 {:.1} ms",
        times.len(),
        ms(times.last()),
        ms(times.get(times.len() / 2)),
        ms(times.get(times.len() * 99 / 100)),
    );
    Ok(())
}

/// A WebSocket after its 101 (the app sends nothing on open).
async fn open(port: u16) -> std::io::Result<TcpStream> {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).await?;
    socket.write_all(HANDSHAKE).await?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte up to the blank line: nothing of a frame is read here.
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await? == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 101") {
        return Err(std::io::Error::other(String::from_utf8_lossy(&head).into_owned()));
    }
    Ok(socket)
}

/// How long after `started` the socket had the whole broadcast frame, and
/// the socket, still open.
async fn read_frame(mut socket: TcpStream, started: Instant) -> (Option<Duration>, TcpStream) {
    let elapsed = frame_time(&mut socket, started).await;
    (elapsed, socket)
}

async fn frame_time(socket: &mut TcpStream, started: Instant) -> Option<Duration> {
    let mut got = Vec::with_capacity(FRAME.len());
    let mut buf = [0u8; 64];
    while got.len() < FRAME.len() {
        let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got.starts_with(FRAME).then(|| started.elapsed())
}

async fn publish(port: u16) -> std::io::Result<()> {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).await?;
    socket
        .write_all(b"GET /publish HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await?;
    Ok(())
}
