//! Incremental decoder for `Transfer-Encoding: chunked` request bodies.

use crate::error::HttpError;
use bytes::{Bytes, BytesMut};

/// A chunk-size line, extensions included, must fit in this.
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Data(Bytes),
    NeedMore,
    Done,
}

const BAD: HttpError = HttpError::BadRequest("malformed chunked body");

impl ChunkedDecoder {
    pub fn new(max_trailer_bytes: usize) -> Self {
        ChunkedDecoder {
            state: State::Size,
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    /// Consumes what it can from `buf`. Trailer fields are read and dropped:
    /// Rack has no place for them.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, HttpError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::Done),
                State::Size => {
                    let Some(line) = take_line(buf, MAX_SIZE_LINE)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    let size = parse_size_line(&line)?;
                    self.state = if size == 0 { State::Trailers } else { State::Data(size) };
                }
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = remaining.min(buf.len() as u64) as usize;
                    let data = buf.split_to(take).freeze();
                    let left = remaining - take as u64;
                    self.state = if left == 0 { State::DataEnd } else { State::Data(left) };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(BAD);
                    }
                    let _ = buf.split_to(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    let limit = self.max_trailer_bytes.saturating_sub(self.trailer_bytes);
                    let Some(line) = take_line(buf, limit)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    self.trailer_bytes += line.len();
                    if line.len() == 2 {
                        self.state = State::Done;
                    } else if !line.contains(&b':') || line.contains(&0) {
                        return Err(BAD);
                    }
                }
            }
        }
    }
}

/// Takes one CRLF-terminated line (CRLF included); a bare LF is refused,
/// since a front proxy may read it differently.
fn take_line(buf: &mut BytesMut, limit: usize) -> Result<Option<BytesMut>, HttpError> {
    match memchr::memchr(b'\n', buf) {
        Some(end) => {
            if end == 0 || buf[end - 1] != b'\r' || end + 1 > limit {
                return Err(BAD);
            }
            Ok(Some(buf.split_to(end + 1)))
        }
        None if buf.len() >= limit => Err(BAD),
        None => Ok(None),
    }
}

fn parse_size_line(line: &[u8]) -> Result<u64, HttpError> {
    let line = &line[..line.len() - 2];
    let (digits, ext) = match memchr::memchr(b';', line) {
        Some(at) => (&line[..at], Some(&line[at + 1..])),
        None => (line, None),
    };
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(BAD);
    }
    if let Some(ext) = ext {
        if ext.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(BAD);
        }
    }
    digits
        .iter()
        .try_fold(0u64, |acc, &d| {
            let v = (d as char).to_digit(16)? as u64;
            acc.checked_mul(16)?.checked_add(v)
        })
        .ok_or(BAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<Vec<u8>, HttpError> {
        let mut dec = ChunkedDecoder::new(1024);
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        // Feed one byte at a time: the decoder must cope with any split.
        for &b in input {
            buf.extend_from_slice(&[b]);
            loop {
                match dec.decode(&mut buf)? {
                    Decoded::Data(d) => out.extend_from_slice(&d),
                    Decoded::NeedMore => break,
                    Decoded::Done => return Ok(out),
                }
            }
        }
        Err(HttpError::BadRequest("incomplete"))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let body = b"5\r\nhello\r\n6;name=val\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n";
        assert_eq!(decode_all(body).unwrap(), b"hello world");
        assert_eq!(decode_all(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(), b"0123456789");
    }

    #[test]
    fn rejects_malformed_chunks() {
        for bad in [
            &b"x\r\nhello\r\n0\r\n\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"-1\r\n",
            b"ffffffffffffffffff\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5;a\x01\r\nhello\r\n0\r\n\r\n",
            b"0\r\nbad trailer\r\n\r\n",
        ] {
            assert!(decode_all(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn leaves_pipelined_bytes_after_the_body() {
        let mut dec = ChunkedDecoder::new(1024);
        let mut buf = BytesMut::from(&b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n"[..]);
        assert_eq!(dec.decode(&mut buf).unwrap(), Decoded::Data(Bytes::from_static(b"abc")));
        assert_eq!(dec.decode(&mut buf).unwrap(), Decoded::Done);
        assert_eq!(&buf[..], b"GET / HTTP/1.1\r\n");
    }
}
