//! Response heads as the application hands them over (any status, any
//! header names and values, any body shape) through `ResponseHead`. Whatever
//! is accepted must serialize to one valid HTTP/1.1 head: a proper status
//! line, every line CRLF-terminated with no stray CR or LF (no header or
//! response injection), a parseable header block, and framing a client
//! reads the same way the engine writes the body.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tsubame_engine::message::head::Version;
use tsubame_engine::message::response::StreamFraming;
use tsubame_engine::message::response::{status_has_no_body, FinishedHead, ResponseHead};

#[derive(Arbitrary, Debug)]
enum Shape {
    /// A body complete in memory (array/string bodies, files by length).
    Full { body_len: u32 },
    /// A body streamed piece by piece (`each` with no length known).
    Stream,
    /// A partial hijack: the app writes after the head.
    Hijacked,
}

/// Names the engine treats specially, so the fuzzer meets them often.
const KNOWN_NAMES: &[&[u8]] = &[
    b"content-length",
    b"Content-Length",
    b"transfer-encoding",
    b"connection",
    b"Connection",
    b"date",
    b"set-cookie",
    b"content-type",
];

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Raw(Vec<u8>),
}

impl Name {
    fn bytes(&self) -> &[u8] {
        match self {
            Name::Known(i) => KNOWN_NAMES[usize::from(*i) % KNOWN_NAMES.len()],
            Name::Raw(raw) => raw,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    status: i64,
    headers: Vec<(Name, Vec<u8>)>,
    shape: Shape,
    is_head: bool,
    keep_alive: bool,
    http10: bool,
}

fn lines(head: &[u8]) -> Vec<&[u8]> {
    assert!(head.ends_with(b"\r\n\r\n"), "head does not end with an empty line");
    // Every line without its CRLF; the empty line that ends the head dropped.
    let block = &head[..head.len() - 2];
    block
        .split(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .split_last()
        .map(|(last, lines)| {
            assert!(last.is_empty());
            lines
                .iter()
                .map(|&line| {
                    let line = line
                        .strip_suffix(b"\r")
                        .unwrap_or_else(|| panic!("bare LF in head {head:?}"));
                    assert!(!line.contains(&b'\r'), "stray CR in head {head:?}");
                    line
                })
                .collect()
        })
        .unwrap_or_default()
}

fn header_values<'a>(lines: &[&'a [u8]], name: &[u8]) -> Vec<&'a [u8]> {
    lines[1..]
        .iter()
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            line[..colon]
                .eq_ignore_ascii_case(name)
                .then(|| line[colon + 1..].trim_ascii())
        })
        .collect()
}

fn check(input: &Input, finished: &FinishedHead, status: u16) {
    let head = &finished.bytes;
    let lines = lines(head);
    let status_line = lines[0];
    assert!(status_line.starts_with(b"HTTP/1.1 "));
    assert_eq!(&status_line[9..12], status.to_string().as_bytes());
    assert_eq!(status_line.get(12), Some(&b' '));
    for line in &lines[1..] {
        assert!(!line.is_empty(), "empty line inside the head {head:?}");
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .expect("header line without a colon");
        assert!(colon > 0);
        assert!(
            !line[..colon].iter().any(|&b| b <= b' ' || b == 0x7f),
            "bad header name {line:?}"
        );
        assert!(!line.contains(&0), "NUL in header line");
    }
    // A strict client parser sees the same head.
    let mut parsed = [httparse::EMPTY_HEADER; 512];
    let mut response = httparse::Response::new(&mut parsed);
    match response.parse(head) {
        Ok(httparse::Status::Complete(len)) => assert_eq!(len, head.len()),
        other => {
            if lines.len() - 1 <= parsed.len() {
                panic!("client cannot parse the head: {other:?} {head:?}")
            }
        }
    }

    let lengths = header_values(&lines, b"content-length");
    let te = header_values(&lines, b"transfer-encoding");
    assert!(lengths.len() <= 1, "several Content-Length headers: {head:?}");
    // RFC 9112 §6.2: never both; a client or proxy would pick one.
    assert!(
        lengths.is_empty() || te.is_empty(),
        "Content-Length alongside Transfer-Encoding: {head:?}"
    );
    if let Shape::Full { body_len } = input.shape {
        if finished.send_body && te.is_empty() && status != 304 {
            assert_eq!(
                lengths,
                vec![body_len.to_string().as_bytes()],
                "length does not match the body"
            );
        }
    }
    if finished.send_body && !matches!(input.shape, Shape::Hijacked) {
        assert!(!status_has_no_body(status), "a body for status {status}");
    }
    let closes = header_values(&lines, b"connection").iter().any(|v| {
        v.split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    });
    if !finished.keep_alive && !matches!(input.shape, Shape::Hijacked) {
        assert!(closes, "the engine closes but did not say so: {head:?}");
    }
    if finished.keep_alive {
        assert!(!closes, "keep-alive kept after Connection: close: {head:?}");
        // A kept connection needs a body end the client can find.
        if finished.send_body {
            // A length, or chunked as the last coding (RFC 9112 §6.3).
            let chunked_last = te.last().is_some_and(|v| {
                v.split(|&b| b == b',')
                    .map(<[u8]>::trim_ascii)
                    .rfind(|t| !t.is_empty())
                    .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"))
            });
            assert!(
                !lengths.is_empty() || chunked_last,
                "kept-alive body without framing: {head:?}"
            );
        }
    }
    if let StreamFraming::Raw {
        declared_len: Some(len),
    } = finished.framing
    {
        assert_eq!(lengths, vec![len.to_string().as_bytes()]);
    }
    if finished.framing == StreamFraming::Chunked {
        assert_eq!(te, vec![&b"chunked"[..]]);
    }
}

fuzz_target!(|input: Input| {
    let Ok(mut head) = ResponseHead::new(input.status) else {
        assert!(!(100..=999).contains(&input.status));
        return;
    };
    for (name, value) in &input.headers {
        if head.header(name.bytes(), value).is_err() {
            // Refused headers fail the whole response (the app gets a 500).
            return;
        }
    }
    let status = head.status();
    let version = if input.http10 { Version::Http10 } else { Version::Http11 };
    let finished = match input.shape {
        Shape::Full { body_len } => head.finish_full(u64::from(body_len), input.is_head, input.keep_alive, version),
        Shape::Stream => head.finish_stream(input.is_head, input.keep_alive, version),
        Shape::Hijacked => head.finish_hijacked(),
    };
    check(&input, &finished, status);
});
