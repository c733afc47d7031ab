//! Turns a batch of streamed-body messages into the pieces of one vectored
//! write: the app's chunks as they are (no copy) between the framing bytes
//! (chunk-size lines, CRLFs, the last chunk), all framing of a batch in one
//! buffer. Writing a batch at once is what keeps a body produced in many
//! small pieces from costing a syscall and a TCP segment per piece.

use crate::dispatch::stream_channel::StreamMsg;
use crate::message::response::StreamFraming;
use bytes::{BufMut, Bytes, BytesMut};
use std::fmt::Write;

/// What one batch amounts to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Encoded {
    /// Body bytes the app wrote in this batch (before any truncation to a
    /// declared length, so that a body longer than declared is noticed).
    pub body_len: u64,
    /// The batch held the end of the body (and, when chunked, `parts` now
    /// ends with the last chunk).
    pub ended: bool,
}

/// Appends the pieces to write for `batch` to `parts`. `sent` is how many
/// body bytes went out before this batch.
pub(crate) fn encode(batch: &mut Vec<StreamMsg>, framing: StreamFraming, sent: u64, parts: &mut Vec<Bytes>) -> Encoded {
    let mut encoded = Encoded {
        body_len: 0,
        ended: false,
    };
    // Framing between two chunks ("\r\n" then the next size line) lands
    // in one piece: two iovecs per chunk, not three.
    let mut frame = BytesMut::new();
    if framing == StreamFraming::Chunked {
        frame.reserve(batch.len() * 12 + 7);
    }
    for msg in batch.drain(..) {
        match msg {
            StreamMsg::Data(data) if data.is_empty() => {}
            StreamMsg::Data(data) => {
                let len = data.len() as u64;
                match framing {
                    StreamFraming::Chunked => {
                        // Formatting into a BytesMut cannot fail.
                        let _ = write!(frame, "{len:x}\r\n");
                        parts.push(frame.split().freeze());
                        parts.push(data);
                        frame.put_slice(b"\r\n");
                    }
                    StreamFraming::Raw { declared_len } => {
                        // Never send more than was declared: the extra bytes
                        // would be read as the start of the next response.
                        let done = sent + encoded.body_len;
                        let allowed = declared_len.map_or(len, |l| l.saturating_sub(done).min(len));
                        if allowed > 0 {
                            parts.push(data.slice(..allowed as usize));
                        }
                    }
                }
                encoded.body_len += len;
            }
            StreamMsg::End => {
                if framing == StreamFraming::Chunked {
                    frame.put_slice(b"0\r\n\r\n");
                }
                encoded.ended = true;
                // Nothing follows End: the sender is gone once it is sent.
                break;
            }
        }
    }
    batch.clear();
    if !frame.is_empty() {
        parts.push(frame.freeze());
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(bytes: &'static [u8]) -> StreamMsg {
        StreamMsg::Data(Bytes::from_static(bytes))
    }

    fn joined(parts: &[Bytes]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn chunked_batches_concatenate_to_a_valid_chunked_body() {
        let mut parts = Vec::new();
        let mut batch = vec![data(b"hello"), data(b""), data(&[b'x'; 20])];
        let first = encode(&mut batch, StreamFraming::Chunked, 0, &mut parts);
        assert_eq!(
            first,
            Encoded {
                body_len: 25,
                ended: false
            }
        );
        assert!(batch.is_empty());
        // Two pieces per chunk plus the trailing CRLF: framing is shared.
        assert_eq!(parts.len(), 5);
        let mut batch = vec![data(b"!"), StreamMsg::End];
        let second = encode(&mut batch, StreamFraming::Chunked, 25, &mut parts);
        assert_eq!(
            second,
            Encoded {
                body_len: 1,
                ended: true
            }
        );
        let expected = format!("5\r\nhello\r\n14\r\n{}\r\n1\r\n!\r\n0\r\n\r\n", "x".repeat(20));
        assert_eq!(joined(&parts), expected.as_bytes());
    }

    #[test]
    fn an_end_alone_writes_the_last_chunk() {
        let mut parts = Vec::new();
        let encoded = encode(&mut vec![StreamMsg::End], StreamFraming::Chunked, 7, &mut parts);
        assert_eq!(
            encoded,
            Encoded {
                body_len: 0,
                ended: true
            }
        );
        assert_eq!(joined(&parts), b"0\r\n\r\n");
    }

    #[test]
    fn raw_bodies_are_cut_at_the_declared_length_but_counted_whole() {
        let mut parts = Vec::new();
        let raw = StreamFraming::Raw { declared_len: Some(6) };
        let encoded = encode(&mut vec![data(b"abcd"), data(b"efgh")], raw, 0, &mut parts);
        assert_eq!(
            encoded,
            Encoded {
                body_len: 8,
                ended: false
            }
        );
        assert_eq!(joined(&parts), b"abcdef");
        let later = encode(&mut vec![data(b"ij"), StreamMsg::End], raw, 8, &mut parts);
        assert_eq!(
            later,
            Encoded {
                body_len: 2,
                ended: true
            }
        );
        assert_eq!(joined(&parts), b"abcdef");
    }

    #[test]
    fn raw_bodies_without_a_length_go_out_as_given() {
        let mut parts = Vec::new();
        let raw = StreamFraming::Raw { declared_len: None };
        encode(&mut vec![data(b"ab"), data(b"cd"), StreamMsg::End], raw, 0, &mut parts);
        assert_eq!(joined(&parts), b"abcd");
    }
}
