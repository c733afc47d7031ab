//! The chunked decoder alone, against a plain reference decoder: whatever
//! the engine accepts must decode to the same bytes the reference finds,
//! and the way bytes are split into reads must not change the result.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tsubame_engine::http1::chunked::{ChunkedDecoder, Decoded};

enum Outcome {
    Done(Vec<u8>, usize),
    Short,
    Error,
}

fn decode(data: &[u8], read: usize) -> Outcome {
    let mut decoder = ChunkedDecoder::new(512);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        match decoder.decode(&mut buf) {
            Err(_) => return Outcome::Error,
            Ok(Decoded::Done) => return Outcome::Done(body, at - buf.len()),
            Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
            Ok(Decoded::NeedMore) => {
                if at == data.len() {
                    return Outcome::Short;
                }
                let n = read.min(data.len() - at);
                buf.extend_from_slice(&data[at..at + n]);
                at += n;
            }
        }
    }
}

/// RFC 9112 §7.1 read literally: hex size, optional extension, CRLF,
/// data, CRLF; a zero chunk, trailer lines, CRLF. Returns the body and the
/// bytes consumed, or None when the input is not a complete chunked body.
fn reference(data: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut at = 0;
    let mut body = Vec::new();
    let line = |from: usize| -> Option<usize> {
        let end = data[from..].windows(2).position(|w| w == b"\r\n")? + from;
        Some(end)
    };
    loop {
        let end = line(at)?;
        let size_part = &data[at..end];
        let digits = size_part.split(|&b| b == b';').next()?;
        let size = u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        if digits.iter().any(|b| !b.is_ascii_hexdigit()) {
            return None;
        }
        at = end + 2;
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).ok()?;
        let data_end = at.checked_add(size)?;
        if data_end + 2 > data.len() || &data[data_end..data_end + 2] != b"\r\n" {
            return None;
        }
        body.extend_from_slice(&data[at..data_end]);
        at = data_end + 2;
    }
    loop {
        let end = line(at)?;
        let empty = end == at;
        at = end + 2;
        if empty {
            return Some((body, at));
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&read, data)) = input.split_first() else {
        return;
    };
    let whole = decode(data, data.len().max(1));
    let split = decode(data, usize::from(read % 17) + 1);
    match (&whole, &split) {
        (Outcome::Done(a, used_a), Outcome::Done(b, used_b)) => {
            assert_eq!(a, b, "read size changed the body");
            assert_eq!(used_a, used_b);
        }
        (Outcome::Error, Outcome::Error) => {}
        // Smaller reads can stop at an error or a short body the whole
        // buffer reached differently only when the data is not valid.
        (Outcome::Done(..), _) | (_, Outcome::Done(..)) => panic!("read size changed whether the body ended"),
        _ => {}
    }
    if let Outcome::Done(body, used) = &whole {
        // Whatever the engine accepts, the literal reading accepts too, with
        // the same bytes and the same end: no smuggling room.
        let (expected, end) = reference(&data[..*used]).expect("engine accepted what the RFC grammar refuses");
        assert_eq!(body, &expected);
        assert_eq!(*used, end);
    }
});
