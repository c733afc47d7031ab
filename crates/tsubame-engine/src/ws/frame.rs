//! The frame layer (RFC 6455 §5.2): parsing a frame header from the front
//! of a buffer, encoding server frames, and masking. What a sequence of
//! frames means (fragmentation, which frames may follow which) is
//! `message.rs`'s business.

use bytes::{BufMut, BytesMut};
use std::fmt;

/// A control frame's payload is at most this long (§5.5), so its length
/// always fits the 7-bit field.
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// The longest header: 2 bytes, a 64-bit extended length, a masking key.
pub const MAX_HEADER_LEN: usize = 14;

const FIN: u8 = 0x80;
const RSV1: u8 = 0x40;
const RSV2: u8 = 0x20;
const RSV3: u8 = 0x10;
const MASKED: u8 = 0x80;
/// The 7-bit length values that announce a 16- or 64-bit extended length.
const LEN_16: u8 = 126;
const LEN_64: u8 = 127;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl OpCode {
    /// `None` for the reserved opcodes 0x3-0x7 and 0xB-0xF.
    pub fn from_u8(value: u8) -> Option<OpCode> {
        match value {
            0x0 => Some(OpCode::Continuation),
            0x1 => Some(OpCode::Text),
            0x2 => Some(OpCode::Binary),
            0x8 => Some(OpCode::Close),
            0x9 => Some(OpCode::Ping),
            0xA => Some(OpCode::Pong),
            _ => None,
        }
    }

    pub fn as_u8(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    /// Control opcodes have the high bit of the nibble set (§5.5).
    pub fn is_control(self) -> bool {
        self.as_u8() & 0x8 != 0
    }
}

/// A parsed frame header; the payload follows it in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub fin: bool,
    /// Only ever true when the caller allowed it (permessage-deflate).
    pub rsv1: bool,
    pub opcode: OpCode,
    /// `None` for an unmasked frame; a server must refuse those (§5.1), but
    /// that is a rule of the role, enforced by the decoder.
    pub mask: Option<[u8; 4]>,
    pub payload_len: u64,
    /// How many bytes the header took, extended length and key included.
    pub header_len: usize,
}

/// A header that breaks a rule of §5.2 or §5.5. Each means "fail the
/// connection" with close code 1002.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// RSV1, RSV2 or RSV3 set without an extension that defines it.
    ReservedBits,
    ReservedOpcode(u8),
    FragmentedControl,
    ControlTooLong,
    /// The most significant bit of a 64-bit length is set.
    LengthHighBit,
    /// A length that fits a shorter encoding; §5.2 says "the minimal number
    /// of bytes MUST be used".
    NonMinimalLength,
}

impl FrameError {
    pub fn reason(self) -> &'static str {
        match self {
            FrameError::ReservedBits => "reserved bits set",
            FrameError::ReservedOpcode(_) => "reserved opcode",
            FrameError::FragmentedControl => "fragmented control frame",
            FrameError::ControlTooLong => "control frame payload over 125 bytes",
            FrameError::LengthHighBit => "64-bit length with the high bit set",
            FrameError::NonMinimalLength => "payload length not minimally encoded",
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::ReservedOpcode(op) => write!(f, "reserved opcode {op:#x}"),
            other => f.write_str(other.reason()),
        }
    }
}

impl std::error::Error for FrameError {}

/// Parses the header at the front of `buf` without consuming anything.
/// `Ok(None)` means the header is not complete yet. Errors are reported as
/// soon as the bytes that show them are present, so a bad frame fails
/// before its payload (or the rest of its header) is read.
pub fn parse_header(buf: &[u8], allow_rsv1: bool) -> Result<Option<FrameHeader>, FrameError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    let allowed_rsv = if allow_rsv1 { RSV1 } else { 0 };
    if b0 & (RSV1 | RSV2 | RSV3) & !allowed_rsv != 0 {
        return Err(FrameError::ReservedBits);
    }
    let raw_opcode = b0 & 0x0F;
    let opcode = OpCode::from_u8(raw_opcode).ok_or(FrameError::ReservedOpcode(raw_opcode))?;
    let fin = b0 & FIN != 0;
    let len7 = b1 & 0x7F;
    if opcode.is_control() {
        if !fin {
            return Err(FrameError::FragmentedControl);
        }
        if usize::from(len7) > MAX_CONTROL_PAYLOAD {
            return Err(FrameError::ControlTooLong);
        }
    }
    let (payload_len, mut header_len) = match len7 {
        LEN_16 => {
            let Some(ext) = buf.get(2..4) else {
                return Ok(None);
            };
            let len = u64::from(u16::from_be_bytes([ext[0], ext[1]]));
            if len < u64::from(LEN_16) {
                return Err(FrameError::NonMinimalLength);
            }
            (len, 4)
        }
        LEN_64 => {
            let Some(ext) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut be = [0u8; 8];
            be.copy_from_slice(ext);
            let len = u64::from_be_bytes(be);
            if len >> 63 != 0 {
                return Err(FrameError::LengthHighBit);
            }
            if len <= u64::from(u16::MAX) {
                return Err(FrameError::NonMinimalLength);
            }
            (len, 10)
        }
        short => (u64::from(short), 2),
    };
    let mask = if b1 & MASKED != 0 {
        let Some(key) = buf.get(header_len..header_len + 4) else {
            return Ok(None);
        };
        header_len += 4;
        Some([key[0], key[1], key[2], key[3]])
    } else {
        None
    };
    Ok(Some(FrameHeader {
        fin,
        rsv1: b0 & RSV1 != 0,
        opcode,
        mask,
        payload_len,
        header_len,
    }))
}

/// Appends one unmasked server frame (FIN set) to `out`: header with the
/// shortest length encoding, then payload.
pub fn encode(opcode: OpCode, payload: &[u8], out: &mut BytesMut) {
    out.reserve(MAX_HEADER_LEN + payload.len());
    encode_header(opcode, payload.len(), out);
    out.extend_from_slice(payload);
}

/// A data frame whose payload is compressed (permessage-deflate: RSV1 on
/// the message's frame, RFC 7692 §6).
pub fn encode_compressed(opcode: OpCode, payload: &[u8], out: &mut BytesMut) {
    let start = out.len();
    encode(opcode, payload, out);
    out[start] |= RSV1;
}

/// The longest header of a server frame: no masking key.
pub const MAX_SERVER_HEADER_LEN: usize = 10;

/// A server frame's header for `len` bytes of payload, on the stack, and
/// how long it is: for a writer that sends the payload from where it lies
/// (`upgrade/registry.rs`'s direct writes) instead of copying it behind.
pub fn server_header(opcode: OpCode, len: usize) -> ([u8; MAX_SERVER_HEADER_LEN], usize) {
    let mut head = [0u8; MAX_SERVER_HEADER_LEN];
    let mut room = &mut head[..];
    encode_header(opcode, len, &mut room);
    let used = MAX_SERVER_HEADER_LEN - room.len();
    (head, used)
}

/// Only the header, for writing a large payload with a vectored write
/// without copying it. Servers never mask (§5.1), so no key.
pub fn encode_header<B: BufMut>(opcode: OpCode, len: usize, out: &mut B) {
    out.put_u8(FIN | opcode.as_u8());
    match u16::try_from(len) {
        Ok(short) if short < u16::from(LEN_16) => out.put_u8(short as u8),
        Ok(medium) => {
            out.put_u8(LEN_16);
            out.put_u16(medium);
        }
        Err(_) => {
            out.put_u8(LEN_64);
            out.put_u64(len as u64);
        }
    }
}

/// XORs `payload` with the masking key in place (§5.3); masking and
/// unmasking are the same operation. Works eight bytes at a time because
/// this touches every byte a client sends.
pub fn apply_mask(payload: &mut [u8], key: [u8; 4]) {
    let wide = u64::from_ne_bytes([key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3]]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // Chunks of 8 keep the key's phase, so the tail starts at key[0].
    for (byte, k) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_header_is_what_encode_puts_before_the_payload() {
        for len in [0, 5, 125, 126, 65535, 65536, 1 << 20] {
            let payload = vec![b'a'; len];
            let framed = encoded(OpCode::Binary, &payload);
            let (head, used) = server_header(OpCode::Binary, len);
            assert_eq!(&head[..used], &framed[..framed.len() - len], "length {len}");
        }
    }

    fn encoded(opcode: OpCode, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode(opcode, payload, &mut out);
        out.to_vec()
    }

    #[test]
    fn encodes_the_rfc_unmasked_hello() {
        // RFC 6455 §5.7: a single-frame unmasked text message.
        assert_eq!(encoded(OpCode::Text, b"Hello"), b"\x81\x05\x48\x65\x6c\x6c\x6f");
    }

    #[test]
    fn encodes_the_rfc_unmasked_pong() {
        // RFC 6455 §5.7: an unmasked Pong answering the Ping "Hello".
        assert_eq!(encoded(OpCode::Pong, b"Hello"), b"\x8a\x05\x48\x65\x6c\x6c\x6f");
    }

    #[test]
    fn encodes_256_bytes_with_a_16_bit_length() {
        // RFC 6455 §5.7: 0x82 0x7E 0x0100 [256 bytes].
        let payload = vec![7u8; 256];
        let out = encoded(OpCode::Binary, &payload);
        assert_eq!(&out[..4], b"\x82\x7e\x01\x00");
        assert_eq!(&out[4..], &payload[..]);
    }

    #[test]
    fn encodes_64_kib_with_a_64_bit_length() {
        // RFC 6455 §5.7: 0x82 0x7F 0x0000000000010000 [65536 bytes].
        let payload = vec![9u8; 65536];
        let out = encoded(OpCode::Binary, &payload);
        assert_eq!(&out[..10], b"\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00");
        assert_eq!(out.len(), 10 + 65536);
    }

    #[test]
    fn chooses_the_shortest_length_at_each_boundary() {
        for (len, header_len) in [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)] {
            let mut out = BytesMut::new();
            encode_header(OpCode::Binary, len, &mut out);
            assert_eq!(out.len(), header_len, "len {len}");
            // The header parses back (as an unmasked frame) to the same length.
            let header = parse_header(&out, false).unwrap().unwrap();
            assert_eq!(header.payload_len, len as u64);
            assert_eq!(header.header_len, header_len);
            assert!(header.fin);
            assert_eq!(header.mask, None);
        }
    }

    #[test]
    fn parses_the_rfc_masked_hello_header() {
        let frame = b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58";
        let header = parse_header(frame, false).unwrap().unwrap();
        assert_eq!(
            header,
            FrameHeader {
                fin: true,
                rsv1: false,
                opcode: OpCode::Text,
                mask: Some([0x37, 0xfa, 0x21, 0x3d]),
                payload_len: 5,
                header_len: 6,
            }
        );
        let mut payload = frame[6..].to_vec();
        apply_mask(&mut payload, header.mask.unwrap());
        assert_eq!(payload, b"Hello");
    }

    #[test]
    fn an_incomplete_header_asks_for_more() {
        let frame = b"\x82\xfe\x01\x00\x01\x02\x03\x04";
        for cut in 0..frame.len() {
            assert_eq!(parse_header(&frame[..cut], false), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse_header(frame, false).unwrap().unwrap().header_len, 8);
    }

    #[test]
    fn refuses_reserved_bits_unless_rsv1_is_allowed() {
        assert_eq!(parse_header(b"\xc1\x80", false), Err(FrameError::ReservedBits));
        assert_eq!(parse_header(b"\xa1\x80", false), Err(FrameError::ReservedBits));
        assert_eq!(parse_header(b"\x91\x80", false), Err(FrameError::ReservedBits));
        assert!(parse_header(b"\xc1\x80\0\0\0\0", true).unwrap().unwrap().rsv1);
        assert_eq!(parse_header(b"\xa1\x80", true), Err(FrameError::ReservedBits));
    }

    #[test]
    fn refuses_reserved_opcodes() {
        for op in (0x3..=0x7).chain(0xB..=0xF) {
            assert_eq!(
                parse_header(&[0x80 | op, 0x80], false),
                Err(FrameError::ReservedOpcode(op))
            );
        }
    }

    #[test]
    fn refuses_bad_control_frames_from_their_first_two_bytes() {
        assert_eq!(parse_header(b"\x09\x80", false), Err(FrameError::FragmentedControl));
        assert_eq!(parse_header(b"\x88\xfe", false), Err(FrameError::ControlTooLong));
        assert_eq!(parse_header(b"\x8a\xff", false), Err(FrameError::ControlTooLong));
        assert!(parse_header(b"\x89\xfd\0\0\0\0", false).unwrap().is_some());
    }

    #[test]
    fn refuses_a_64_bit_length_with_the_high_bit_set() {
        assert_eq!(
            parse_header(b"\x82\xff\x80\0\0\0\0\0\0\0", false),
            Err(FrameError::LengthHighBit)
        );
    }

    #[test]
    fn refuses_non_minimal_lengths() {
        assert_eq!(
            parse_header(b"\x82\xfe\x00\x7d", false),
            Err(FrameError::NonMinimalLength)
        );
        assert_eq!(
            parse_header(b"\x82\xff\0\0\0\0\0\0\xff\xff", false),
            Err(FrameError::NonMinimalLength)
        );
    }

    #[test]
    fn masking_matches_the_bytewise_definition_at_every_length() {
        let key = [0x12, 0x34, 0x56, 0x78];
        for len in 0..40 {
            let plain: Vec<u8> = (0..len as u8).collect();
            let mut masked = plain.clone();
            apply_mask(&mut masked, key);
            let expected: Vec<u8> = plain.iter().enumerate().map(|(i, b)| b ^ key[i % 4]).collect();
            assert_eq!(masked, expected, "len {len}");
            apply_mask(&mut masked, key);
            assert_eq!(masked, plain);
        }
    }
}
