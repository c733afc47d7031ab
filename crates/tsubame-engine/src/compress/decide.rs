//! Whether a response is compressed: what its head says.

use super::Compression;
use crate::message::response::StreamFraming;

/// A response that may be compressed: where its head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub head_len: usize,
}

/// Some(plan) when `data` (a whole HTTP/1 response the engine serialized,
/// `body_len` bytes of body after the head, the last `tail_len` of them in
/// the reply's tail) may be compressed: a body of at
/// least `min_size` bytes and a head that `head_allows`.
pub(crate) fn plan(data: &[u8], tail_len: usize, body_len: u64, settings: &Compression) -> Option<Plan> {
    if body_len < settings.min_size.max(1) {
        return None;
    }
    let end = memchr::memmem::find(data, b"\r\n\r\n")? + 4;
    if (data.len() - end + tail_len) as u64 != body_len {
        // HEAD, or a body that is not all here.
        return None;
    }
    head_allows(&data[..end], false, settings).then_some(Plan { head_len: end })
}

/// Whether a streamed body with this head may be compressed as it streams:
/// only one whose length is open and whose framing is the engine's: chunks
/// it encodes (HTTP/1.1) or DATA frames (HTTP/2). A declared length, the
/// app's own Transfer-Encoding, a partial hijack (the app writes to the
/// socket itself) and HTTP/1.0 (the close ends the body, which a hijack
/// looks like too) are left alone. The size is unknown, so `min_size`
/// does not apply.
pub(crate) fn stream_allowed(head: &[u8], framing: StreamFraming, http2: bool, settings: &Compression) -> bool {
    match framing {
        StreamFraming::Chunked => head_allows(head, false, settings),
        StreamFraming::Raw { declared_len: None } if http2 => head_allows(head, true, settings),
        StreamFraming::Raw { .. } => false,
    }
}

/// A 200, 201, 202 or 203 with a compressible content type, no
/// Content-Encoding or Content-Range of its own, no `Cache-Control:
/// no-transform`, and (when `no_framing` is asked) no Transfer-Encoding.
fn head_allows(head: &[u8], no_framing: bool, settings: &Compression) -> bool {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty());
    let status = lines.next().and_then(|l| l.get(9..12));
    if !matches!(status, Some(b"200" | b"201" | b"202" | b"203")) {
        return false;
    }
    let mut type_ok = false;
    for line in lines {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-encoding")
            || name.eq_ignore_ascii_case(b"content-range")
            || (no_framing && name.eq_ignore_ascii_case(b"transfer-encoding"))
        {
            return false;
        }
        if name.eq_ignore_ascii_case(b"cache-control")
            && value
                .split(|&b| b == b',')
                .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
        {
            return false;
        }
        if name.eq_ignore_ascii_case(b"content-type") {
            type_ok = compressible(value, &settings.types);
        }
    }
    type_ok
}

fn compressible(content_type: &[u8], types: &[String]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    types.iter().any(|t| {
        let t = t.as_bytes();
        if t.ends_with(b"/") {
            essence.len() > t.len() && essence[..t.len()].eq_ignore_ascii_case(t)
        } else {
            essence.eq_ignore_ascii_case(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Compression {
        Compression {
            min_size: 10,
            types: vec!["text/".into(), "application/json".into()],
        }
    }

    fn response(head: &str, body: &str) -> Vec<u8> {
        format!("{head}\r\n\r\n{body}").into_bytes()
    }

    #[test]
    fn compressible_responses() {
        let body = "x".repeat(20);
        let data = response(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 20",
            &body,
        );
        assert!(plan(&data, 0, 20, &settings()).is_some());
        let data = response(
            "HTTP/1.1 201 Created\r\nContent-Type: Application/JSON\r\ncontent-length: 20",
            &body,
        );
        assert!(plan(&data, 0, 20, &settings()).is_some());
    }

    #[test]
    fn left_alone() {
        let body = "x".repeat(20);
        for head in [
            "HTTP/1.1 200 OK\r\ncontent-type: image/png",
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: br",
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncache-control: public, no-transform",
            "HTTP/1.1 206 Partial Content\r\ncontent-type: text/plain\r\ncontent-range: bytes 0-19/40",
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-range: bytes 0-19/40",
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain",
            "HTTP/1.1 200 OK",
            "HTTP/1.1 200 OK\r\ncontent-type: text",
        ] {
            assert_eq!(plan(&response(head, &body), 0, 20, &settings()), None, "{head}");
        }
        let small = response("HTTP/1.1 200 OK\r\ncontent-type: text/plain", "short");
        assert_eq!(plan(&small, 0, 5, &settings()), None);
        // HEAD: the length says 20, no body follows.
        let head = response("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 20", "");
        assert_eq!(plan(&head, 0, 20, &settings()), None);
    }

    #[test]
    fn streams_whose_length_is_open() {
        let chunked = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let open = StreamFraming::Raw { declared_len: None };
        assert!(stream_allowed(chunked, StreamFraming::Chunked, false, &settings()));
        // The app's own Transfer-Encoding: its bytes are already framed.
        assert!(!stream_allowed(chunked, open, false, &settings()));
        assert!(!stream_allowed(chunked, open, true, &settings()));
        let h2 = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n";
        assert!(stream_allowed(h2, open, true, &settings()));
        // HTTP/1.0, or a partial hijack: the close ends the body.
        assert!(!stream_allowed(h2, open, false, &settings()));
        let declared = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n";
        let raw = StreamFraming::Raw { declared_len: Some(5) };
        assert!(!stream_allowed(declared, raw, true, &settings()));
        let image = b"HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(!stream_allowed(image, StreamFraming::Chunked, false, &settings()));
    }
}
