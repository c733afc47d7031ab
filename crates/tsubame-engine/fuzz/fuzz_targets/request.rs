//! Request bytes in, a parsed head (and a decoded chunked body) or an
//! error out. Besides "never panics", checks that the parser's answer does
//! not depend on how the bytes were split into reads, and that whatever it
//! accepts is something the application can trust: a known method, a
//! target without spaces or controls, header values without CR, LF or NUL,
//! one framing.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tsubame_engine::http1::chunked::{ChunkedDecoder, Decoded};
use tsubame_engine::http1::parse::parse_head;
use tsubame_engine::message::head::{Framing, Limits, RequestHead};
use tsubame_engine::HttpError;

const LIMITS: Limits = Limits {
    max_uri_size: 256,
    max_header_size: 2048,
    max_headers: 16,
    known_methods_only: true,
};

/// What a connection would end up with: the head (or error) and the bytes
/// left for the body.
type Outcome = (Result<Option<RequestHead>, HttpError>, Vec<u8>);

/// Feeds `data` in reads whose sizes come from `splits`, as a connection
/// does, stopping at the first complete head or error.
fn parse_in_reads(data: &[u8], splits: &[u8]) -> Outcome {
    let mut buf = BytesMut::new();
    let mut at = 0;
    let mut sizes = splits.iter().map(|&s| usize::from(s) + 1).cycle();
    while at < data.len() {
        let n = sizes.next().unwrap_or(data.len()).min(data.len() - at);
        buf.extend_from_slice(&data[at..at + n]);
        at += n;
        match parse_head(&mut buf, &LIMITS) {
            Ok(None) => continue,
            other => {
                buf.extend_from_slice(&data[at..]);
                return (other, buf.to_vec());
            }
        }
    }
    (Ok(None), buf.to_vec())
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (&a.0, &b.0) {
        (Ok(Some(x)), Ok(Some(y))) => {
            x.method == y.method
                && x.target == y.target
                && x.path == y.path
                && x.query == y.query
                && x.version == y.version
                && x.headers == y.headers
                && x.host == y.host
                && x.framing == y.framing
                && x.keep_alive == y.keep_alive
                && x.expect_continue == y.expect_continue
                && a.1 == b.1
        }
        (Ok(None), Ok(None)) => true,
        // The status may differ (a prefix can hit a size limit first); that
        // both refuse is what matters.
        (Err(_), Err(_)) => true,
        _ => false,
    }
}

fn check_head(head: &RequestHead) {
    assert!(!head.method.is_empty() && head.method.iter().all(u8::is_ascii_uppercase));
    assert!(!head.target.is_empty() && head.target.len() <= LIMITS.max_uri_size);
    assert!(
        head.target.iter().all(|&b| b > b' ' && b != 0x7f),
        "target {:?}",
        head.target
    );
    assert!(
        head.path.first() == Some(&b'/') || &head.path[..] == b"*",
        "path {:?}",
        head.path
    );
    assert!(head.headers.len() <= LIMITS.max_headers);
    for (name, value) in &head.headers {
        assert!(!name.is_empty());
        assert!(
            !value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0),
            "value {value:?}"
        );
    }
    let counts = |n: &[u8]| head.headers.iter().filter(|(h, _)| h.eq_ignore_ascii_case(n)).count();
    match head.framing {
        Framing::Chunked => assert_eq!(counts(b"content-length"), 0),
        Framing::Length(_) => assert_eq!(counts(b"transfer-encoding"), 0),
        Framing::None => assert_eq!(counts(b"transfer-encoding") + counts(b"content-length"), 0),
    }
    if let Some(host) = &head.host {
        assert!(
            !host.iter().any(|&b| b <= b' ' || b == b'/' || b == b'@'),
            "host {host:?}"
        );
    }
}

/// Decodes a chunked body in reads of the given sizes; returns the body
/// and whether it ended, or None for an error.
fn decode_chunked(data: &[u8], splits: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut decoder = ChunkedDecoder::new(1024);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut at = 0;
    let mut sizes = splits.iter().map(|&s| usize::from(s) + 1).cycle();
    loop {
        match decoder.decode(&mut buf) {
            Err(_) => return None,
            Ok(Decoded::Done) => return Some((body, true)),
            Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
            Ok(Decoded::NeedMore) => {
                if at == data.len() {
                    return Some((body, false));
                }
                let n = sizes.next().unwrap_or(data.len()).min(data.len() - at);
                buf.extend_from_slice(&data[at..at + n]);
                at += n;
            }
        }
    }
}

fuzz_target!(|input: &[u8]| {
    // The first bytes choose read sizes; the rest is the request.
    let (splits, data) = input.split_at(input.len().min(4));
    let whole = {
        let mut buf = BytesMut::from(data);
        let result = parse_head(&mut buf, &LIMITS);
        (result, buf.to_vec())
    };
    let split = parse_in_reads(data, splits);
    assert!(
        same(&whole, &split),
        "split reads changed the outcome: {:?} vs {:?}",
        whole.0,
        split.0
    );
    if let (Ok(Some(head)), rest) = &whole {
        check_head(head);
        assert!(data.ends_with(rest), "the parser consumed bytes that were not the head");
        if head.framing == Framing::Chunked {
            let one = decode_chunked(rest, &[u8::MAX]);
            let many = decode_chunked(rest, splits);
            match (&one, &many) {
                // Reads split differently may stop short of the same error
                // or end; a body both finished must be the same body.
                (Some((a, true)), Some((b, true))) => assert_eq!(a, b),
                (Some((a, _)), Some((b, _))) => assert!(a.starts_with(b) || b.starts_with(a)),
                _ => {}
            }
            if let Some((body, _)) = one {
                assert!(body.len() <= rest.len());
            }
        }
    }
});
