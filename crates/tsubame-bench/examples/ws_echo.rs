//! The echo half of benchmarks/websocket.rb with a client that costs the
//! round trip little: one WebSocket to PORT (`/`), then COUNT round trips
//! of a 32-byte text frame, each sent (masked, as a client must) and its
//! echo read whole before the next, on blocking sockets with Nagle off.
//! The Ruby client spends some 20 µs of its own per round trip, which
//! every server's figure then carries alike and which flattens their
//! ratios.
//!
//! Usage: ws_echo PORT COUNT
//! Prints `median_us P50 p99_us P99` (microseconds).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

const HANDSHAKE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
const PAYLOAD: &[u8; 32] = b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
const MASK: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = || std::io::Error::other("usage: ws_echo PORT COUNT");
    let port: u16 = args.next().and_then(|p| p.parse().ok()).ok_or_else(usage)?;
    let count: usize = args.next().and_then(|n| n.parse().ok()).ok_or_else(usage)?;
    let mut socket = TcpStream::connect(("127.0.0.1", port))?;
    socket.set_nodelay(true)?;
    socket.write_all(HANDSHAKE)?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte)? == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 101") {
        return Err(std::io::Error::other(String::from_utf8_lossy(&head).into_owned()));
    }
    // FIN + text, MASK bit + length 32, the key, the masked payload.
    let mut frame = vec![0x81, 0x80 | PAYLOAD.len() as u8];
    frame.extend_from_slice(&MASK);
    frame.extend(PAYLOAD.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    // The echo: FIN + text, length 32, unmasked.
    let mut expected = vec![0x81, PAYLOAD.len() as u8];
    expected.extend_from_slice(PAYLOAD);
    let mut reply = vec![0u8; expected.len()];
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        socket.write_all(&frame)?;
        socket.read_exact(&mut reply)?;
        times.push(started.elapsed());
        if reply != expected {
            return Err(std::io::Error::other(format!("unexpected echo {reply:?}")));
        }
    }
    times.sort();
    let us = |i: usize| times.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    println!("median_us {:.1} p99_us {:.1}", us(count / 2), us(count * 99 / 100));
    Ok(())
}
