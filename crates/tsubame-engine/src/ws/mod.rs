//! The WebSocket protocol (RFC 6455) as pure functions over bytes, with no
//! I/O: the opening handshake (`handshake.rs`: is a request an upgrade,
//! is it a valid one, the `Sec-WebSocket-Accept` value and the 101 head;
//! over HTTP/2 the extended CONNECT of RFC 8441),
//! frames (`frame.rs`: header parsing, server frame encoding, masking),
//! the decoder that turns a client's frames into messages (`message.rs`:
//! fragmentation, control frames between fragments, size limits, UTF-8
//! of text via `utf8.rs`), and close codes and payloads (`close.rs`).
//!
//! Every protocol violation comes out as the close code and reason the
//! server must send before closing (`ProtocolError`), so the connection
//! never has to interpret the RFC itself.
//!
//! Left to the connection that drives this: reading and writing the
//! socket, the closing handshake's sequencing (answering a close with a
//! close, then closing the TCP connection, §7.1), answering pings with
//! pongs, timers (idle and close timeouts, keep-alive pings), and
//! back-pressure (when to stop reading while the application is behind,
//! how much outgoing data to queue). permessage-deflate (`deflate.rs`) is
//! the one extension: the decoder lets RSV1 through once it is negotiated
//! (`Decoder::set_rsv1_allowed`) and the session inflates and deflates.

mod base64;
pub mod close;
pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod utf8;

pub use close::{close_payload, valid_received_code};
pub use frame::{encode, encode_header, OpCode};
pub use handshake::{
    accept_key, check, check_extended_connect, is_extended_connect, is_upgrade_request, response_head, HandshakeError,
    Upgrade,
};
pub use message::{Decoder, Limits, Message, ProtocolError};
