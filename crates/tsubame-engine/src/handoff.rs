//! `websocket_workers`: cluster workers of their own for WebSocket
//! connections. An HTTP worker that reads a WebSocket upgrade request on a
//! plain socket passes the socket and the request's bytes over a UNIX
//! datagram socket the master made before forking (SCM_RIGHTS), and
//! forgets the connection; the WebSocket worker that reads the datagram
//! serves it from that request on as if it had accepted it. The long-lived
//! connections, and the garbage their app makes (ActionCable allocates per
//! subscriber on every broadcast), then live in a process whose collector
//! pauses no plain request.
//!
//! The receiving loop is the engine's (`server.rs`, beside the accept
//! loops); this file is the format and the two system calls' users.
//!
//! A hand-off that cannot be made (no WebSocket worker is up, the
//! socket is full, the request is too large to pass) is not an error the
//! client sees: the HTTP worker serves the request itself.

use crate::dispatch::job::{ConnInfo, ListenerInfo};
use crate::dispatch::remote_addr::RemoteAddress;
use crate::message::head::{Framing, RequestHead, Version};
use bytes::BytesMut;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The largest datagram passed: a head within the default
/// `max_header_size` (112 KiB) and what the client sent after it.
pub(crate) const MAX_PAYLOAD: usize = 192 * 1024;

/// Starts every payload, so that anything else on the socket is refused.
const MAGIC: &[u8; 4] = b"TSH1";

/// Why a hand-off was not made, or a received one not served.
#[derive(Debug)]
pub enum HandoffError {
    /// The head and the bytes after it exceed `MAX_PAYLOAD`.
    TooLarge,
    /// The socket refused it (full, or closed).
    Socket(std::io::Error),
    /// A received datagram that is not one of ours, or carries no socket.
    Malformed(&'static str),
}

impl std::fmt::Display for HandoffError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoffError::TooLarge => write!(f, "request too large to hand off"),
            HandoffError::Socket(e) => write!(f, "hand-off socket: {e}"),
            HandoffError::Malformed(what) => write!(f, "malformed hand-off: {what}"),
        }
    }
}

/// An HTTP worker's end: where upgrade requests go while the WebSocket
/// worker is up (the master says so; see `set_on`).
pub struct HandoffTarget {
    socket: OwnedFd,
    on: AtomicBool,
}

impl HandoffTarget {
    pub fn new(socket: OwnedFd) -> HandoffTarget {
        HandoffTarget {
            socket,
            on: AtomicBool::new(false),
        }
    }

    /// The master turns hand-offs on once the WebSocket worker has booted
    /// and off when it stops or dies: a datagram sent meanwhile would wait
    /// in the socket until the next one boots.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Release);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Whether this request goes to the WebSocket workers: a WebSocket
    /// upgrade (without a body: the handshake has none) while it is up.
    pub(crate) fn takes(&self, head: &RequestHead) -> bool {
        head.framing == Framing::None && self.is_on() && crate::ws::handshake::is_upgrade_request(head)
    }

    /// Passes the client socket `client` with `head` (rebuilt as bytes)
    /// and `rest` (what the client sent after it). On `Ok` the WebSocket
    /// worker has its own descriptor for the socket and the caller only
    /// closes its own (no shutdown: that would end the connection for both).
    pub(crate) fn send(
        &self,
        client: RawFd,
        conn: &ConnInfo,
        head: &RequestHead,
        rest: &[u8],
    ) -> Result<(), HandoffError> {
        let payload = encode(conn, head, rest)?;
        crate::sys::send_with_fd(self.socket.as_fd(), client, &payload).map_err(HandoffError::Socket)
    }
}

/// What a datagram carries besides the socket.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Handed {
    peer_addr: String,
    server_name: String,
    server_port: u16,
    /// The request as the client sent it (head rebuilt from its parts),
    /// then whatever followed: the receiving connection's read buffer.
    bytes: BytesMut,
}

fn push_str(out: &mut Vec<u8>, s: &[u8]) -> Result<(), HandoffError> {
    let len = u16::try_from(s.len()).map_err(|_| HandoffError::TooLarge)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s);
    Ok(())
}

fn encode(conn: &ConnInfo, head: &RequestHead, rest: &[u8]) -> Result<Vec<u8>, HandoffError> {
    let mut out = Vec::with_capacity(512 + rest.len());
    out.extend_from_slice(MAGIC);
    push_str(&mut out, conn.peer_addr.as_bytes())?;
    push_str(&mut out, conn.listener.server_name.as_bytes())?;
    out.extend_from_slice(&conn.listener.server_port.to_be_bytes());
    // The parser kept every field as sent, so the head it re-parses is the
    // client's (header order and case included).
    out.extend_from_slice(&head.method);
    out.push(b' ');
    out.extend_from_slice(&head.target);
    out.push(b' ');
    out.extend_from_slice(match head.version {
        Version::Http10 => b"HTTP/1.0",
        _ => b"HTTP/1.1",
    });
    out.extend_from_slice(b"\r\n");
    for (name, value) in &head.headers {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(rest);
    if out.len() > MAX_PAYLOAD {
        return Err(HandoffError::TooLarge);
    }
    Ok(out)
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], HandoffError> {
    if input.len() < n {
        return Err(HandoffError::Malformed("truncated"));
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

fn take_str(input: &mut &[u8]) -> Result<String, HandoffError> {
    let len = take(input, 2)?;
    let len = u16::from_be_bytes([len[0], len[1]]) as usize;
    String::from_utf8(take(input, len)?.to_vec()).map_err(|_| HandoffError::Malformed("not UTF-8"))
}

fn decode(payload: &[u8]) -> Result<Handed, HandoffError> {
    let mut input = payload;
    if take(&mut input, MAGIC.len())? != MAGIC {
        return Err(HandoffError::Malformed("not a hand-off"));
    }
    let peer_addr = take_str(&mut input)?;
    let server_name = take_str(&mut input)?;
    let port = take(&mut input, 2)?;
    Ok(Handed {
        peer_addr,
        server_name,
        server_port: u16::from_be_bytes([port[0], port[1]]),
        bytes: BytesMut::from(input),
    })
}

/// Reads the next datagram queued on the WebSocket workers' end without
/// waiting: the socket and what came with it. `WouldBlock` when none is
/// queued; a datagram that is not a hand-off is an error (its descriptor,
/// if any, closed).
pub(crate) fn receive(socket: std::os::fd::BorrowedFd<'_>, buf: &mut [u8]) -> Result<(Handed, OwnedFd), HandoffError> {
    let (n, client) = crate::sys::recv_with_fd(socket, buf).map_err(HandoffError::Socket)?;
    let client = client.ok_or(HandoffError::Malformed("no socket"))?;
    Ok((decode(&buf[..n])?, client))
}

impl Handed {
    /// The connection as the HTTP worker saw it, and its first read (the
    /// request, then what followed it). Only plain sockets are handed off
    /// (TLS state stays where its handshake was made), so the scheme is
    /// http; the rest of the listener's settings are the cluster's, the
    /// same in every worker.
    pub(crate) fn into_parts(
        self,
        trust_forwarded_proto: bool,
        remote_address: &RemoteAddress,
    ) -> (Arc<ConnInfo>, BytesMut) {
        let listener = Arc::new(ListenerInfo {
            server_name: self.server_name,
            server_port: self.server_port,
            url_scheme: "http",
            trust_forwarded_proto,
            remote_address: remote_address.clone(),
        });
        let conn = Arc::new(ConnInfo {
            peer_addr: self.peer_addr,
            listener,
        });
        (conn, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::head::Limits;

    fn conn() -> ConnInfo {
        ConnInfo {
            peer_addr: "203.0.113.7".into(),
            listener: Arc::new(ListenerInfo {
                server_name: "example.test".into(),
                server_port: 8080,
                url_scheme: "http",
                trust_forwarded_proto: false,
                remote_address: RemoteAddress::default(),
            }),
        }
    }

    fn parse(raw: &[u8]) -> RequestHead {
        let limits = Limits {
            max_uri_size: 8192,
            max_header_size: 65536,
            max_headers: 100,
            known_methods_only: true,
        };
        let mut buf = BytesMut::from(raw);
        crate::http1::parse::parse_head(&mut buf, &limits)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("did not parse: {raw:?}"))
    }

    const UPGRADE: &[u8] = b"GET /cable?x=1 HTTP/1.1\r\nHost: example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Odd-Case: a  b\r\n\r\n";

    #[test]
    fn a_handed_request_is_the_clients_bytes_with_what_followed() {
        let head = parse(UPGRADE);
        let payload = encode(&conn(), &head, b"\x81\x05early").map_err(|e| e.to_string());
        let handed = decode(&payload.unwrap_or_default()).map_err(|e| e.to_string());
        let handed = handed.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(handed.peer_addr, "203.0.113.7");
        assert_eq!(handed.server_name, "example.test");
        assert_eq!(handed.server_port, 8080);
        let mut expected = UPGRADE.to_vec();
        expected.extend_from_slice(b"\x81\x05early");
        assert_eq!(handed.bytes, expected);
        // And it parses to the same head on the other side.
        let again = parse(&handed.bytes[..UPGRADE.len()]);
        assert_eq!(again.target, head.target);
        assert_eq!(again.headers, head.headers);
    }

    #[test]
    fn only_bodiless_websocket_upgrades_are_taken_and_only_while_on() {
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap_or_else(|e| panic!("{e}"));
        let target = HandoffTarget::new(OwnedFd::from(a));
        let upgrade = parse(UPGRADE);
        assert!(!target.takes(&upgrade), "off until the master says the worker is up");
        target.set_on(true);
        assert!(target.takes(&upgrade));
        assert!(!target.takes(&parse(b"GET /cable HTTP/1.1\r\nHost: x\r\n\r\n")));
        assert!(!target.takes(&parse(
            b"POST /cable HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nContent-Length: 3\r\n\r\n"
        )));
        target.set_on(false);
        assert!(!target.takes(&upgrade));
    }

    #[test]
    fn a_socket_and_its_request_cross_the_datagram_socket() {
        use std::io::{Read, Write};
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap_or_else(|e| panic!("{e}"));
        let target = HandoffTarget::new(OwnedFd::from(a));
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
        let head = parse(UPGRADE);
        let sent = target.send(std::os::fd::AsRawFd::as_raw_fd(&server), &conn(), &head, b"");
        assert!(sent.is_ok(), "{sent:?}");
        drop(server);
        let mut buf = vec![0u8; MAX_PAYLOAD];
        let (handed, fd) = receive(b.as_fd(), &mut buf)
            .map_err(|e| e.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(handed.bytes, UPGRADE);
        let (conn, bytes) = handed.into_parts(false, &RemoteAddress::default());
        assert_eq!(
            (conn.peer_addr.as_str(), conn.listener.server_port),
            ("203.0.113.7", 8080)
        );
        assert_eq!(&bytes[..], UPGRADE);
        // The received descriptor is the same connection: what the client
        // writes arrives there, and what is written there reaches it.
        let mut received = std::os::unix::net::UnixStream::from(fd);
        client.write_all(b"ping").unwrap_or_else(|e| panic!("{e}"));
        let mut got = [0u8; 4];
        received.read_exact(&mut got).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got, b"ping");
        received.write_all(b"pong").unwrap_or_else(|e| panic!("{e}"));
        client.read_exact(&mut got).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got, b"pong");
    }

    #[test]
    fn a_request_too_large_to_pass_is_refused_before_sending() {
        let head = parse(UPGRADE);
        let rest = vec![0u8; MAX_PAYLOAD];
        assert!(matches!(encode(&conn(), &head, &rest), Err(HandoffError::TooLarge)));
    }

    #[test]
    fn a_datagram_that_is_not_ours_is_refused() {
        assert!(matches!(
            decode(b"GET / HTTP/1.1\r\n\r\n"),
            Err(HandoffError::Malformed(_))
        ));
        assert!(matches!(decode(b"TSH1\x00"), Err(HandoffError::Malformed(_))));
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap_or_else(|e| panic!("{e}"));
        a.send(b"TSH1 no socket").unwrap_or_else(|e| panic!("{e}"));
        let mut buf = vec![0u8; 64];
        assert!(matches!(
            receive(b.as_fd(), &mut buf),
            Err(HandoffError::Malformed("no socket"))
        ));
        assert!(
            matches!(receive(b.as_fd(), &mut buf), Err(HandoffError::Socket(e)) if e.kind() == std::io::ErrorKind::WouldBlock)
        );
    }
}
