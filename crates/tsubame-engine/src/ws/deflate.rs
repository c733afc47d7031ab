//! permessage-deflate (RFC 7692): which offer to accept, and a message's
//! payload deflated and inflated.
//!
//! Tsubame always answers with `server_no_context_takeover` and
//! `client_no_context_takeover`: each message is compressed on its own in
//! both directions, so a connection keeps no compression state between
//! messages (an idle WebSocket costs no 32 KiB window), and one broadcast
//! compresses to the same bytes for every subscriber (`Deflater` keeps the
//! last one). The price is a worse ratio for many small similar messages
//! than a shared window would give.

use super::close::INVALID_PAYLOAD;
use super::message::{ProtocolError, INVALID_TEXT, TOO_BIG};
use super::utf8::Utf8Validator;
use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The response's `Sec-WebSocket-Extensions` value when an offer is
/// accepted.
pub const ACCEPTED: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// Messages shorter than this go out uncompressed: the deflate block and
/// the work cost more than they save.
pub const MIN_SIZE: usize = 64;

/// The tail every sync-flushed deflate stream ends with; RFC 7692 §7.2.1
/// strips it from a message and §7.2.2 appends it again before inflating.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Whether the client's `Sec-WebSocket-Extensions` (all fields joined)
/// holds a permessage-deflate offer Tsubame can accept: the first one whose
/// parameters are all known, valid and given once (§7). An offer asking
/// the server for a window under 2^15 is declined (the encoder has only
/// the full window); the client's window does not matter to the inflater.
pub fn negotiate(extensions: &[u8]) -> bool {
    extensions.split(|&b| b == b',').any(acceptable_offer)
}

fn acceptable_offer(offer: &[u8]) -> bool {
    let mut parts = offer.split(|&b| b == b';').map(<[u8]>::trim_ascii);
    if !parts
        .next()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"permessage-deflate"))
    {
        return false;
    }
    let mut seen: Vec<&[u8]> = Vec::new();
    for param in parts {
        let (name, value) = match param.iter().position(|&b| b == b'=') {
            Some(eq) => (param[..eq].trim_ascii(), Some(unquote(param[eq + 1..].trim_ascii()))),
            None => (param, None),
        };
        if seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
            return false;
        }
        seen.push(name);
        let ok = match name.to_ascii_lowercase().as_slice() {
            b"server_no_context_takeover" | b"client_no_context_takeover" => value.is_none(),
            b"server_max_window_bits" => value.and_then(window_bits) == Some(15),
            b"client_max_window_bits" => value.is_none_or(|v| window_bits(v).is_some()),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn unquote(value: &[u8]) -> &[u8] {
    value
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
        .unwrap_or(value)
}

/// 8 to 15, digits only, no leading zero (§7.1.2).
fn window_bits(value: &[u8]) -> Option<u8> {
    if value.first() == Some(&b'0') {
        return None;
    }
    let bits: u8 = std::str::from_utf8(value).ok()?.parse().ok()?;
    (8..=15).contains(&bits).then_some(bits)
}

/// Compresses outgoing messages. One per I/O thread (see `with_deflater`):
/// the compressor's state is large, and with no context takeover it is
/// reset, not remade, for each message.
pub struct Deflater {
    compress: Compress,
    /// The last message compressed and its result: a broadcast hands every
    /// connection the same `Bytes`, so it is compressed once. The input is
    /// kept, so its address cannot be reused by other bytes while cached.
    last: Option<(Bytes, Option<Bytes>)>,
}

impl Default for Deflater {
    fn default() -> Deflater {
        Deflater {
            compress: Compress::new(Compression::new(6), false),
            last: None,
        }
    }
}

impl Deflater {
    /// The payload of a compressed frame for `message`, or None when it
    /// is not worth it (too short, or no smaller compressed).
    pub fn deflate(&mut self, message: &Bytes) -> Option<Bytes> {
        if message.len() < MIN_SIZE {
            return None;
        }
        if let Some((input, output)) = &self.last {
            if input.as_ptr() == message.as_ptr() && input.len() == message.len() {
                return output.clone();
            }
        }
        let output = self.compress_one(message);
        self.last = Some((message.clone(), output.clone()));
        output
    }

    fn compress_one(&mut self, message: &[u8]) -> Option<Bytes> {
        self.compress.reset();
        let mut out = Vec::with_capacity(message.len() / 2 + 64);
        let mut input = message;
        loop {
            let before_in = self.compress.total_in();
            let status = self.compress.compress_vec(input, &mut out, FlushCompress::Sync).ok()?;
            let used = (self.compress.total_in() - before_in) as usize;
            input = &input[used..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            if status == Status::StreamEnd {
                break;
            }
            out.reserve(out.capacity().max(64));
        }
        if !out.ends_with(&TAIL) {
            return None;
        }
        out.truncate(out.len() - TAIL.len());
        (out.len() < message.len()).then(|| Bytes::from(out))
    }
}

thread_local! {
    static DEFLATER: std::cell::RefCell<Deflater> = std::cell::RefCell::new(Deflater::default());
}

/// Runs `f` with this thread's `Deflater`.
pub fn with_deflater<T>(f: impl FnOnce(&mut Deflater) -> T) -> T {
    DEFLATER.with(|d| f(&mut d.borrow_mut()))
}

/// Inflates a compressed message's payload, at most `max_message` bytes
/// out (a small frame can inflate to gigabytes), and checks text as UTF-8.
/// Errors are the close the server sends: 1009 past the limit, 1007 for
/// data that is not deflate or text that is not UTF-8.
pub fn inflate(payload: &[u8], text: bool, max_message: usize) -> Result<Bytes, ProtocolError> {
    const BAD: ProtocolError = ProtocolError {
        code: INVALID_PAYLOAD,
        reason: "invalid compressed data",
    };
    let mut inflater = Decompress::new(false);
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    'inputs: for input in [payload, &TAIL[..]] {
        let mut input = input;
        loop {
            let (in_before, out_before) = (inflater.total_in(), inflater.total_out());
            let status = inflater
                .decompress(input, &mut chunk, FlushDecompress::Sync)
                .map_err(|_| BAD)?;
            let consumed = (inflater.total_in() - in_before) as usize;
            let produced = (inflater.total_out() - out_before) as usize;
            input = &input[consumed..];
            if out.len() + produced > max_message {
                return Err(TOO_BIG);
            }
            out.extend_from_slice(&chunk[..produced]);
            // A final block ends the data; what follows (the tail) is moot.
            if status == Status::StreamEnd {
                break 'inputs;
            }
            if input.is_empty() && produced < chunk.len() {
                break;
            }
            if consumed == 0 && produced == 0 {
                return Err(BAD);
            }
        }
    }
    if text {
        let mut validator = Utf8Validator::new();
        validator.feed(&out).map_err(|_| INVALID_TEXT)?;
        validator.finish().map_err(|_| INVALID_TEXT)?;
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_parameterised_offers() {
        assert!(negotiate(b"permessage-deflate"));
        assert!(negotiate(b"permessage-deflate; client_max_window_bits"));
        assert!(negotiate(
            b"permessage-deflate; client_max_window_bits=10; server_no_context_takeover"
        ));
        assert!(negotiate(b"Permessage-Deflate; server_max_window_bits=\"15\""));
        assert!(negotiate(
            b"x-webkit-deflate-frame, permessage-deflate; client_no_context_takeover"
        ));
    }

    #[test]
    fn declines_what_it_cannot_honour() {
        assert!(!negotiate(b""));
        assert!(!negotiate(b"x-webkit-deflate-frame"));
        assert!(!negotiate(b"permessage-deflate; server_max_window_bits=10"));
        assert!(!negotiate(b"permessage-deflate; server_max_window_bits"));
        assert!(!negotiate(b"permessage-deflate; client_max_window_bits=16"));
        assert!(!negotiate(b"permessage-deflate; client_max_window_bits=08"));
        assert!(!negotiate(b"permessage-deflate; server_no_context_takeover=1"));
        assert!(!negotiate(b"permessage-deflate; unknown"));
        assert!(!negotiate(
            b"permessage-deflate; client_no_context_takeover; client_no_context_takeover"
        ));
        // A declined offer, then one that can be taken.
        assert!(negotiate(
            b"permessage-deflate; server_max_window_bits=9, permessage-deflate"
        ));
    }

    #[test]
    fn round_trips_and_compresses_a_broadcast_once() {
        let message = Bytes::from("hello compressed world. ".repeat(50));
        let compressed = with_deflater(|d| d.deflate(&message)).unwrap();
        assert!(compressed.len() < message.len() / 4);
        assert!(!compressed.ends_with(&TAIL));
        assert_eq!(inflate(&compressed, true, 1 << 20).unwrap(), message);
        let again = with_deflater(|d| d.deflate(&message)).unwrap();
        assert_eq!(again.as_ptr(), compressed.as_ptr(), "the same Bytes, compressed once");
        // A different message with equal content is compressed anew, alike.
        let copy = Bytes::from(message.to_vec());
        assert_eq!(with_deflater(|d| d.deflate(&copy)).unwrap(), compressed);
    }

    #[test]
    fn small_or_incompressible_messages_stay_plain() {
        assert!(with_deflater(|d| d.deflate(&Bytes::from_static(b"short"))).is_none());
        let mut x = 0x9e3779b97f4a7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(with_deflater(|d| d.deflate(&Bytes::from(noise))).is_none());
    }

    #[test]
    fn inflate_refuses_bombs_garbage_and_bad_text() {
        let big = Bytes::from(vec![b'a'; 100_000]);
        let compressed = with_deflater(|d| d.deflate(&big)).unwrap();
        assert!(compressed.len() < 1000);
        assert_eq!(inflate(&compressed, false, 100_000).unwrap().len(), 100_000);
        assert_eq!(inflate(&compressed, false, 99_999).unwrap_err().code, 1009);
        assert_eq!(
            inflate(b"\xff\xff\xff\xff garbage", false, 1 << 20).unwrap_err().code,
            1007
        );
        let latin1 = Bytes::from(b"caf\xe9 ".repeat(40));
        let compressed = with_deflater(|d| d.deflate(&latin1)).unwrap();
        assert_eq!(inflate(&compressed, false, 1 << 20).unwrap(), latin1);
        assert_eq!(inflate(&compressed, true, 1 << 20).unwrap_err().code, 1007);
    }
}
