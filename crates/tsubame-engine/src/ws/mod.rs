//! The WebSocket protocol (RFC 6455) as pure functions over bytes, with no
//! I/O. Being built up file by file; see the final module doc.

pub mod close;
pub mod frame;
pub mod message;
pub mod utf8;

pub use close::{close_payload, valid_received_code};
pub use frame::{encode, encode_header, OpCode};
pub use message::{Decoder, Limits, Message, ProtocolError};
