//! The decoder a server runs over the bytes a client sends: frames in,
//! whole messages out (RFC 6455 §5.4-§5.6). It enforces the rules a
//! sequence of frames must follow, the size limits, and UTF-8 for text,
//! and reports each violation as the close code the server must answer
//! with.

use super::close::{self, CloseError, INVALID_PAYLOAD, MESSAGE_TOO_BIG, PROTOCOL_ERROR};
use super::frame::{self, FrameError, FrameHeader, OpCode};
use super::utf8::Utf8Validator;
use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// How much a client may make the server buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame payload. A frame is decoded only once it is whole
    /// in the read buffer, so this bounds how far that buffer grows.
    pub max_frame: usize,
    /// The largest message, all fragments together. A message is handed
    /// over only once it is complete, so this bounds what one connection
    /// holds for the application.
    pub max_message: usize,
}

impl Default for Limits {
    /// 1 MiB frames and 4 MiB messages: far above what chat, RPC and
    /// notification traffic sends (browsers usually send a message as one
    /// frame), while a thousand connections each at the limit still fit in
    /// a few GiB. Applications that move files over a WebSocket raise them.
    fn default() -> Limits {
        Limits {
            max_frame: 1 << 20,
            max_message: 4 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Text(Bytes),
    Binary(Bytes),
    Ping(Bytes),
    Pong(Bytes),
    /// The code and UTF-8 reason; `None` for a close frame with no payload
    /// (APIs that need a number report 1005 for it).
    Close(Option<(u16, Bytes)>),
}

/// Why the connection must be failed, as the close frame the server sends
/// before closing it (§7.1.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError {
    /// 1002 protocol error, 1007 invalid payload data, 1009 message too big.
    pub code: u16,
    pub reason: &'static str,
}

impl ProtocolError {
    const fn protocol(reason: &'static str) -> ProtocolError {
        ProtocolError {
            code: PROTOCOL_ERROR,
            reason,
        }
    }
}

const UNMASKED: ProtocolError = ProtocolError::protocol("unmasked client frame");
const RSV1_OUT_OF_PLACE: ProtocolError = ProtocolError::protocol("RSV1 set on a control or continuation frame");
const NOTHING_TO_CONTINUE: ProtocolError = ProtocolError::protocol("continuation frame without a message to continue");
const MESSAGE_STILL_OPEN: ProtocolError = ProtocolError::protocol("new message before the fragmented one ended");
const FRAME_TOO_BIG: ProtocolError = ProtocolError {
    code: MESSAGE_TOO_BIG,
    reason: "frame too big",
};
pub(super) const TOO_BIG: ProtocolError = ProtocolError {
    code: MESSAGE_TOO_BIG,
    reason: "message too big",
};
pub(super) const INVALID_TEXT: ProtocolError = ProtocolError {
    code: INVALID_PAYLOAD,
    reason: "text message is not UTF-8",
};

impl From<FrameError> for ProtocolError {
    fn from(err: FrameError) -> ProtocolError {
        ProtocolError::protocol(err.reason())
    }
}

impl From<CloseError> for ProtocolError {
    fn from(err: CloseError) -> ProtocolError {
        ProtocolError {
            code: err.code(),
            reason: err.reason(),
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.code)
    }
}

impl std::error::Error for ProtocolError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataKind {
    Text,
    Binary,
}

impl DataKind {
    fn message(self, payload: Bytes) -> Message {
        match self {
            DataKind::Text => Message::Text(payload),
            DataKind::Binary => Message::Binary(payload),
        }
    }
}

/// A message whose first fragment has arrived but not its last.
#[derive(Debug)]
struct Fragmented {
    kind: DataKind,
    payload: BytesMut,
    /// `None` for binary messages, and for compressed text, which can only
    /// be checked once inflated.
    utf8: Option<Utf8Validator>,
    compressed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// A close frame was returned; nothing after it is read (§5.5.1).
    Closed,
    /// The connection is failed; every later call repeats the error.
    Failed(ProtocolError),
}

#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    allow_rsv1: bool,
    fragmented: Option<Fragmented>,
    last_compressed: bool,
    state: State,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            allow_rsv1: false,
            fragmented: None,
            last_compressed: false,
            state: State::Open,
        }
    }

    /// Accepts RSV1 on the first frame of a data message, as
    /// permessage-deflate (RFC 7692) uses it, once that extension is
    /// negotiated. Off by default: with no extension, RSV1 is a protocol
    /// error (§5.2). The decoder does not inflate; it skips the UTF-8 check
    /// of compressed text (the inflater's job) and reports the bit through
    /// `last_compressed`. Limits then apply to the compressed size.
    pub fn set_rsv1_allowed(&mut self, allowed: bool) {
        self.allow_rsv1 = allowed;
    }

    /// Whether the last Text or Binary message returned had RSV1 set.
    pub fn last_compressed(&self) -> bool {
        self.last_compressed
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Takes bytes from the front of `buf` (client frames) and returns the
    /// next complete message, Ok(None) if more bytes are needed (partial
    /// frames stay in `buf`), or the close the server must send. After a
    /// `Close` message it returns Ok(None) and reads nothing more; after an
    /// error it returns the same error.
    ///
    /// A frame's payload is unmasked in place once the whole frame is in
    /// `buf`, and a one-frame message is split off `buf` without copying.
    /// When a frame's header arrives, `buf` is grown to hold the whole
    /// frame, so the reads that bring the rest never regrow (and recopy) it.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        match self.state {
            State::Failed(err) => return Err(err),
            State::Closed => return Ok(None),
            State::Open => {}
        }
        let result = self.next_message(buf);
        match &result {
            Err(err) => {
                self.state = State::Failed(*err);
                self.fragmented = None;
            }
            Ok(Some(Message::Close(_))) => {
                self.state = State::Closed;
                self.fragmented = None;
            }
            Ok(_) => {}
        }
        result
    }

    fn next_message(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        loop {
            let Some(header) = frame::parse_header(buf, self.allow_rsv1)? else {
                return Ok(None);
            };
            let payload_len = self.check(&header)?;
            let frame_len = header.header_len.checked_add(payload_len).ok_or(FRAME_TOO_BIG)?;
            if buf.len() < frame_len {
                // Room for what is missing, but at most 64 KiB ahead of the
                // bytes that came: a header alone never makes the server set
                // aside `max_frame` (thousands of idle clients could).
                buf.reserve((frame_len - buf.len()).min(64 * 1024));
                return Ok(None);
            }
            buf.advance(header.header_len);
            let mut payload = buf.split_to(payload_len);
            if let Some(key) = header.mask {
                frame::apply_mask(&mut payload, key);
            }
            if let Some(message) = self.take_frame(&header, payload)? {
                return Ok(Some(message));
            }
        }
    }

    /// The rules that can be judged from the header alone, checked before
    /// any of the payload is buffered. Returns the payload length.
    fn check(&self, header: &FrameHeader) -> Result<usize, ProtocolError> {
        // §5.1: a server must fail the connection on an unmasked frame.
        if header.mask.is_none() {
            return Err(UNMASKED);
        }
        let buffered = match header.opcode {
            OpCode::Continuation => {
                let Some(fragmented) = &self.fragmented else {
                    return Err(NOTHING_TO_CONTINUE);
                };
                // RFC 7692 §6.1: only a message's first frame carries RSV1.
                if header.rsv1 {
                    return Err(RSV1_OUT_OF_PLACE);
                }
                fragmented.payload.len()
            }
            OpCode::Text | OpCode::Binary => {
                if self.fragmented.is_some() {
                    return Err(MESSAGE_STILL_OPEN);
                }
                0
            }
            OpCode::Close | OpCode::Ping | OpCode::Pong => {
                if header.rsv1 {
                    return Err(RSV1_OUT_OF_PLACE);
                }
                // At most 125 bytes (frame.rs checked), outside the limits:
                // a control frame must always get through, even mid-message.
                return Ok(header.payload_len as usize);
            }
        };
        let len = usize::try_from(header.payload_len).map_err(|_| FRAME_TOO_BIG)?;
        if len > self.limits.max_frame {
            return Err(FRAME_TOO_BIG);
        }
        if buffered.saturating_add(len) > self.limits.max_message {
            return Err(TOO_BIG);
        }
        Ok(len)
    }

    /// Applies one whole, unmasked frame; a message when it completes one.
    fn take_frame(&mut self, header: &FrameHeader, payload: BytesMut) -> Result<Option<Message>, ProtocolError> {
        let kind = match header.opcode {
            OpCode::Ping => return Ok(Some(Message::Ping(payload.freeze()))),
            OpCode::Pong => return Ok(Some(Message::Pong(payload.freeze()))),
            OpCode::Close => return Ok(Some(Message::Close(close::parse_close(payload.freeze())?))),
            OpCode::Continuation => return self.continue_message(header, &payload),
            OpCode::Text => DataKind::Text,
            OpCode::Binary => DataKind::Binary,
        };
        let compressed = header.rsv1;
        let mut utf8 = (kind == DataKind::Text && !compressed).then(Utf8Validator::new);
        if let Some(validator) = &mut utf8 {
            validator.feed(&payload).map_err(|_| INVALID_TEXT)?;
        }
        if !header.fin {
            self.fragmented = Some(Fragmented {
                kind,
                payload,
                utf8,
                compressed,
            });
            return Ok(None);
        }
        if let Some(validator) = &utf8 {
            validator.finish().map_err(|_| INVALID_TEXT)?;
        }
        self.last_compressed = compressed;
        Ok(Some(kind.message(payload.freeze())))
    }

    fn continue_message(&mut self, header: &FrameHeader, payload: &[u8]) -> Result<Option<Message>, ProtocolError> {
        let Some(fragmented) = &mut self.fragmented else {
            return Err(NOTHING_TO_CONTINUE);
        };
        // Checked per fragment so invalid text fails before the rest of
        // the message arrives (§8.1 allows failing at the first bad byte).
        if let Some(validator) = &mut fragmented.utf8 {
            validator.feed(payload).map_err(|_| INVALID_TEXT)?;
        }
        fragmented.payload.extend_from_slice(payload);
        if !header.fin {
            return Ok(None);
        }
        let Some(done) = self.fragmented.take() else {
            return Err(NOTHING_TO_CONTINUE);
        };
        if let Some(validator) = &done.utf8 {
            validator.finish().map_err(|_| INVALID_TEXT)?;
        }
        self.last_compressed = done.compressed;
        Ok(Some(done.kind.message(done.payload.freeze())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    const FIN: u8 = 0x80;

    /// A client frame: `first` is the first header byte (FIN, RSV, opcode),
    /// masked with `KEY`, length in the shortest encoding.
    fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            len @ 0..=125 => out.push(0x80 | len as u8),
            len @ 126..=65535 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&KEY);
        let mut masked = payload.to_vec();
        frame::apply_mask(&mut masked, KEY);
        out.extend_from_slice(&masked);
        out
    }

    fn concat(frames: &[Vec<u8>]) -> Vec<u8> {
        frames.concat()
    }

    /// Decodes everything in `bytes` at once: the messages, then the error
    /// that stopped the decoder if one did.
    fn decode_all(limits: Limits, bytes: &[u8]) -> (Vec<Message>, Option<ProtocolError>) {
        let mut decoder = Decoder::new(limits);
        let mut buf = BytesMut::from(bytes);
        let mut messages = Vec::new();
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(message)) => messages.push(message),
                Ok(None) => return (messages, None),
                Err(err) => return (messages, Some(err)),
            }
        }
    }

    /// The same, one byte at a time, as a slow client's reads would come.
    fn decode_bytewise(limits: Limits, bytes: &[u8]) -> (Vec<Message>, Option<ProtocolError>) {
        let mut decoder = Decoder::new(limits);
        let mut buf = BytesMut::new();
        let mut messages = Vec::new();
        for &byte in bytes {
            buf.extend_from_slice(&[byte]);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(message)) => messages.push(message),
                    Ok(None) => break,
                    Err(err) => return (messages, Some(err)),
                }
            }
        }
        (messages, None)
    }

    fn decode_one(bytes: &[u8]) -> Result<Option<Message>, ProtocolError> {
        Decoder::new(Limits::default()).decode(&mut BytesMut::from(bytes))
    }

    fn error_of(bytes: &[u8]) -> ProtocolError {
        let (_, err) = decode_all(Limits::default(), bytes);
        err.expect("the decoder should fail")
    }

    fn text(s: &str) -> Message {
        Message::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn decodes_the_rfc_masked_hello() {
        let frame = b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58";
        assert_eq!(decode_one(frame), Ok(Some(text("Hello"))));
    }

    #[test]
    fn decodes_the_rfc_masked_pong() {
        // RFC 6455 §5.7: a masked Pong whose body is "Hello".
        let frame = b"\x8a\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58";
        assert_eq!(decode_one(frame), Ok(Some(Message::Pong(Bytes::from_static(b"Hello")))));
    }

    #[test]
    fn decodes_the_rfc_fragmented_hello() {
        // RFC 6455 §5.7's "Hel" + "lo", masked as a client sends them.
        let bytes = concat(&[client_frame(0x01, b"Hel"), client_frame(FIN, b"lo")]);
        assert_eq!(decode_all(Limits::default(), &bytes), (vec![text("Hello")], None));
    }

    #[test]
    fn decodes_a_ping() {
        let bytes = client_frame(FIN | 0x9, b"Hello");
        assert_eq!(
            decode_one(&bytes),
            Ok(Some(Message::Ping(Bytes::from_static(b"Hello"))))
        );
    }

    #[test]
    fn decodes_256_bytes_with_a_16_bit_length() {
        let payload: Vec<u8> = (0..=255).collect();
        let bytes = client_frame(FIN | 0x2, &payload);
        assert_eq!(&bytes[..4], b"\x82\xfe\x01\x00");
        assert_eq!(decode_one(&bytes), Ok(Some(Message::Binary(payload.into()))));
    }

    #[test]
    fn decodes_64_kib_with_a_64_bit_length() {
        let payload: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
        let bytes = client_frame(FIN | 0x2, &payload);
        assert_eq!(&bytes[..10], b"\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00");
        assert_eq!(decode_one(&bytes), Ok(Some(Message::Binary(payload.into()))));
    }

    #[test]
    fn byte_by_byte_gives_the_same_messages_as_all_at_once() {
        let big: Vec<u8> = (0..70000u32).map(|i| i as u8).collect();
        let bytes = concat(&[
            client_frame(FIN | 0x1, "héllo".as_bytes()),
            client_frame(0x02, &big[..300]),
            client_frame(FIN | 0x9, b"mid"),
            client_frame(0x00, &big[300..]),
            client_frame(FIN | 0xA, b""),
            client_frame(FIN, b""),
            client_frame(0x01, "世".as_bytes()[..1].as_ref()),
            client_frame(0x00, "世".as_bytes()[1..].as_ref()),
            client_frame(FIN, "界".as_bytes()),
            client_frame(FIN | 0x2, b""),
            client_frame(FIN | 0x8, b"\x03\xe8bye"),
        ]);
        let expected = vec![
            text("héllo"),
            Message::Ping(Bytes::from_static(b"mid")),
            Message::Pong(Bytes::new()),
            Message::Binary(big.into()),
            text("世界"),
            Message::Binary(Bytes::new()),
            Message::Close(Some((1000, Bytes::from_static(b"bye")))),
        ];
        assert_eq!(decode_all(Limits::default(), &bytes), (expected.clone(), None));
        assert_eq!(decode_bytewise(Limits::default(), &bytes), (expected, None));
    }

    #[test]
    fn returns_one_message_per_call_and_leaves_the_rest() {
        let first = client_frame(FIN | 0x1, b"one");
        let second = client_frame(FIN | 0x1, b"two");
        let mut buf = BytesMut::from(&concat(&[first, second.clone()])[..]);
        let mut decoder = Decoder::new(Limits::default());
        assert_eq!(decoder.decode(&mut buf), Ok(Some(text("one"))));
        assert_eq!(&buf[..], &second[..]);
        // A partial frame stays in the buffer, untouched.
        buf.truncate(second.len() - 1);
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert_eq!(&buf[..], &second[..second.len() - 1]);
    }

    #[test]
    fn a_one_frame_message_is_split_off_the_buffer_without_copying() {
        let mut buf = BytesMut::from(&client_frame(FIN | 0x2, &[5u8; 1000])[..]);
        let payload_at = buf.as_ptr().wrapping_add(8);
        let Ok(Some(Message::Binary(payload))) = Decoder::new(Limits::default()).decode(&mut buf) else {
            panic!("expected a binary message");
        };
        assert_eq!(payload.as_ptr(), payload_at);
        assert_eq!(&payload[..], &[5u8; 1000][..]);
    }

    #[test]
    fn empty_messages_are_fine() {
        let bytes = concat(&[
            client_frame(FIN | 0x1, b""),
            client_frame(FIN | 0x2, b""),
            client_frame(0x01, b""),
            client_frame(FIN, b""),
            client_frame(FIN | 0x8, b""),
        ]);
        let expected = vec![text(""), Message::Binary(Bytes::new()), text(""), Message::Close(None)];
        assert_eq!(decode_all(Limits::default(), &bytes), (expected, None));
    }

    #[test]
    fn control_frames_may_arrive_between_fragments() {
        let bytes = concat(&[
            client_frame(0x01, b"a"),
            client_frame(FIN | 0x9, b"p"),
            client_frame(0x00, b"b"),
            client_frame(FIN | 0xA, b"q"),
            client_frame(FIN, b"c"),
        ]);
        let expected = vec![
            Message::Ping(Bytes::from_static(b"p")),
            Message::Pong(Bytes::from_static(b"q")),
            text("abc"),
        ];
        assert_eq!(decode_all(Limits::default(), &bytes), (expected, None));
    }

    #[test]
    fn a_close_between_fragments_ends_decoding() {
        let bytes = concat(&[
            client_frame(0x01, b"a"),
            client_frame(FIN | 0x8, b"\x03\xe9"),
            client_frame(FIN, b"b"),
        ]);
        let mut decoder = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Some(Message::Close(Some((1001, Bytes::new())))))
        );
        // Nothing after the close frame is read.
        assert_eq!(decoder.decode(&mut buf), Ok(None));
        assert_eq!(buf.len(), client_frame(FIN, b"b").len());
    }

    #[test]
    fn an_unmasked_client_frame_is_a_protocol_error() {
        // RFC 6455 §5.7's unmasked "Hello": fine from a server, not from a client.
        let err = error_of(b"\x81\x05\x48\x65\x6c\x6c\x6f");
        assert_eq!((err.code, err.reason), (1002, "unmasked client frame"));
        // The unmasked fragmented example fails at its first frame.
        assert_eq!(error_of(b"\x01\x03\x48\x65\x6c").code, 1002);
    }

    #[test]
    fn reserved_bits_are_a_protocol_error() {
        for first in [0xC1, 0xA1, 0x91] {
            assert_eq!(error_of(&client_frame(first, b"x")).code, 1002, "{first:#x}");
        }
    }

    #[test]
    fn reserved_opcodes_are_a_protocol_error() {
        for op in (0x3..=0x7).chain(0xB..=0xF) {
            assert_eq!(error_of(&client_frame(FIN | op, b"")).code, 1002, "{op:#x}");
        }
    }

    #[test]
    fn oversized_or_fragmented_control_frames_are_a_protocol_error() {
        assert_eq!(error_of(&client_frame(FIN | 0x9, &[0; 126])).code, 1002);
        assert_eq!(error_of(&client_frame(FIN | 0x8, &[3; 126])).code, 1002);
        assert_eq!(error_of(&client_frame(0x9, b"")).code, 1002);
        assert_eq!(error_of(&client_frame(0xA, b"")).code, 1002);
        // 125 bytes is the most a control frame may carry.
        let ping = client_frame(FIN | 0x9, &[1; 125]);
        assert_eq!(decode_one(&ping), Ok(Some(Message::Ping(vec![1; 125].into()))));
    }

    #[test]
    fn a_continuation_with_nothing_to_continue_is_a_protocol_error() {
        assert_eq!(error_of(&client_frame(FIN, b"x")).code, 1002);
        assert_eq!(error_of(&client_frame(0x00, b"x")).code, 1002);
        // Also after a message that ended.
        let bytes = concat(&[client_frame(FIN | 0x1, b"a"), client_frame(FIN, b"b")]);
        let (messages, err) = decode_all(Limits::default(), &bytes);
        assert_eq!(messages, vec![text("a")]);
        assert_eq!(err.map(|e| e.code), Some(1002));
    }

    #[test]
    fn a_new_message_inside_a_fragmented_one_is_a_protocol_error() {
        for op in [0x1, 0x2] {
            let bytes = concat(&[client_frame(0x01, b"a"), client_frame(FIN | op, b"b")]);
            let err = error_of(&bytes);
            assert_eq!(
                (err.code, err.reason),
                (1002, "new message before the fragmented one ended")
            );
        }
    }

    #[test]
    fn a_64_bit_length_with_the_high_bit_set_is_a_protocol_error() {
        let err = error_of(b"\x82\xff\x80\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04");
        assert_eq!(err.code, 1002);
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_from_its_header() {
        let limits = Limits {
            max_frame: 1000,
            max_message: 4000,
        };
        // Only the header of a 1001-byte frame: refused before the payload.
        let header = &client_frame(FIN | 0x2, &[0; 1001])[..8];
        let (_, err) = decode_all(limits, header);
        assert_eq!(err, Some(FRAME_TOO_BIG));
        assert_eq!(FRAME_TOO_BIG.code, 1009);
        // The default limit refuses a declared 2 GiB frame the same way.
        let err = error_of(b"\x82\xff\x00\x00\x00\x00\x80\x00\x00\x00\x01\x02\x03\x04");
        assert_eq!(err.code, 1009);
        // At the limit is fine.
        let (messages, err) = decode_all(limits, &client_frame(FIN | 0x2, &[0; 1000]));
        assert_eq!((messages.len(), err), (1, None));
    }

    #[test]
    fn a_message_over_the_limit_is_refused_at_the_fragment_that_crosses_it() {
        let limits = Limits {
            max_frame: 1000,
            max_message: 1500,
        };
        let bytes = concat(&[client_frame(0x02, &[0; 1000]), client_frame(0x00, &[0; 500])]);
        // 1500 bytes so far is at the limit; the next fragment's header crosses it.
        let mut with_next = bytes.clone();
        with_next.extend_from_slice(&client_frame(FIN, b"x")[..6]);
        assert_eq!(decode_all(limits, &with_next), (vec![], Some(TOO_BIG)));
        // One frame alone over max_message is refused too.
        let limits = Limits {
            max_frame: 1000,
            max_message: 10,
        };
        assert_eq!(
            decode_all(limits, &client_frame(FIN | 0x1, b"eleven byte")),
            (vec![], Some(TOO_BIG))
        );
    }

    #[test]
    fn control_frames_are_outside_the_limits() {
        let limits = Limits {
            max_frame: 10,
            max_message: 10,
        };
        let bytes = concat(&[client_frame(0x02, &[0; 10]), client_frame(FIN | 0x9, &[0; 100])]);
        let (messages, err) = decode_all(limits, &bytes);
        assert_eq!((messages, err), (vec![Message::Ping(vec![0; 100].into())], None));
    }

    #[test]
    fn invalid_utf8_in_a_text_message_is_invalid_payload() {
        let err = error_of(&client_frame(FIN | 0x1, b"bad \xff"));
        assert_eq!((err.code, err.reason), (1007, "text message is not UTF-8"));
        // Cut off at the end of the message.
        assert_eq!(error_of(&client_frame(FIN | 0x1, b"\xe4\xb8")).code, 1007);
        let bytes = concat(&[client_frame(0x01, b"\xe4"), client_frame(FIN, b"\xb8")]);
        assert_eq!(error_of(&bytes).code, 1007);
        // Binary messages are not checked.
        let binary = client_frame(FIN | 0x2, b"\xff");
        assert_eq!(
            decode_one(&binary),
            Ok(Some(Message::Binary(Bytes::from_static(b"\xff"))))
        );
    }

    #[test]
    fn utf8_split_across_fragments_is_valid() {
        let snowman = "☃".as_bytes();
        let bytes = concat(&[
            client_frame(0x01, &snowman[..1]),
            client_frame(0x00, &snowman[1..2]),
            client_frame(FIN | 0x9, b""),
            client_frame(FIN, &snowman[2..]),
        ]);
        let (messages, err) = decode_bytewise(Limits::default(), &bytes);
        assert_eq!((messages, err), (vec![Message::Ping(Bytes::new()), text("☃")], None));
    }

    #[test]
    fn invalid_utf8_in_the_first_fragment_fails_before_the_rest_arrives() {
        let mut decoder = Decoder::new(Limits::default());
        // Only the first fragment: E0 80 can never begin valid UTF-8.
        let mut buf = BytesMut::from(&client_frame(0x01, b"ok\xe0\x80")[..]);
        assert_eq!(decoder.decode(&mut buf), Err(INVALID_TEXT));
        // The same for a first fragment with a wholly invalid byte.
        let mut decoder = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&client_frame(0x01, b"\xff")[..]);
        assert_eq!(decoder.decode(&mut buf).map_err(|e| e.code), Err(1007));
        // A later fragment fails as soon as it arrives, not at the end.
        let mut decoder = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&concat(&[client_frame(0x01, b"fine"), client_frame(0x00, b"\xc0")])[..]);
        assert_eq!(decoder.decode(&mut buf), Err(INVALID_TEXT));
    }

    #[test]
    fn bad_close_payloads_fail_with_the_rfc_codes() {
        let one_byte = error_of(&client_frame(FIN | 0x8, b"\x03"));
        assert_eq!(one_byte.code, 1002);
        for code in [0u16, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000] {
            let err = error_of(&client_frame(FIN | 0x8, &code.to_be_bytes()));
            assert_eq!(err.code, 1002, "{code}");
        }
        let not_utf8 = error_of(&client_frame(FIN | 0x8, b"\x03\xe8\xce"));
        assert_eq!(not_utf8.code, 1007);
    }

    #[test]
    fn valid_close_payloads_come_out_whole() {
        for code in [1000u16, 1003, 1007, 1011, 1014, 3000, 4999] {
            let mut payload = code.to_be_bytes().to_vec();
            payload.extend_from_slice("ça va".as_bytes());
            let message = decode_one(&client_frame(FIN | 0x8, &payload));
            assert_eq!(message, Ok(Some(Message::Close(Some((code, Bytes::from("ça va")))))));
        }
    }

    #[test]
    fn an_error_is_repeated_on_every_later_call() {
        let mut decoder = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&client_frame(FIN | 0x3, b"")[..]);
        let err = decoder.decode(&mut buf).unwrap_err();
        buf.extend_from_slice(&client_frame(FIN | 0x1, b"later"));
        assert_eq!(decoder.decode(&mut buf), Err(err));
    }

    #[test]
    fn rsv1_passes_only_where_permessage_deflate_puts_it() {
        let mut decoder = Decoder::new(Limits::default());
        decoder.set_rsv1_allowed(true);
        // Compressed text is not UTF-8 until inflated.
        let bytes = concat(&[client_frame(0x41, b"\xff\x00"), client_frame(FIN, b"\x01")]);
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(
            decoder.decode(&mut buf),
            Ok(Some(Message::Text(Bytes::from_static(b"\xff\x00\x01"))))
        );
        assert!(decoder.last_compressed());
        buf.extend_from_slice(&client_frame(FIN | 0x1, b"plain"));
        assert_eq!(decoder.decode(&mut buf), Ok(Some(text("plain"))));
        assert!(!decoder.last_compressed());

        for bytes in [
            client_frame(FIN | 0x40 | 0x9, b""),
            concat(&[client_frame(0x41, b"a"), client_frame(FIN | 0x40, b"b")]),
        ] {
            let mut decoder = Decoder::new(Limits::default());
            decoder.set_rsv1_allowed(true);
            let mut buf = BytesMut::from(&bytes[..]);
            assert_eq!(decoder.decode(&mut buf), Err(RSV1_OUT_OF_PLACE));
        }
    }

    #[test]
    fn the_default_limits_are_1_mib_frames_and_4_mib_messages() {
        assert_eq!(
            Limits::default(),
            Limits {
                max_frame: 1024 * 1024,
                max_message: 4 * 1024 * 1024
            }
        );
    }
}
