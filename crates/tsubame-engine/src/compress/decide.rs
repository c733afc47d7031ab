//! Whether a response is compressed: what its head says.

use super::Compression;

/// A response that may be compressed: where its head ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub head_len: usize,
}

/// Some(plan) when `data` (a whole HTTP/1 response the engine serialized,
/// `body_len` bytes of body after the head) may be compressed: a 200, 201,
/// 202 or 203 with a body of at least `min_size` bytes, a compressible
/// content type, no Content-Encoding or Content-Range of its own, and no
/// `Cache-Control: no-transform`.
pub(crate) fn plan(data: &[u8], body_len: u64, settings: &Compression) -> Option<Plan> {
    if body_len < settings.min_size.max(1) {
        return None;
    }
    let end = memchr::memmem::find(data, b"\r\n\r\n")? + 4;
    if (data.len() - end) as u64 != body_len {
        // HEAD, or a body that is not all here.
        return None;
    }
    let mut lines = data[..end - 4]
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status = lines.next()?.get(9..12)?;
    if !matches!(status, b"200" | b"201" | b"202" | b"203") {
        return None;
    }
    let mut type_ok = false;
    for line in lines {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-encoding") || name.eq_ignore_ascii_case(b"content-range") {
            return None;
        }
        if name.eq_ignore_ascii_case(b"cache-control")
            && value
                .split(|&b| b == b',')
                .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
        {
            return None;
        }
        if name.eq_ignore_ascii_case(b"content-type") {
            type_ok = compressible(value, &settings.types);
        }
    }
    type_ok.then_some(Plan { head_len: end })
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
        assert!(plan(&data, 20, &settings()).is_some());
        let data = response(
            "HTTP/1.1 201 Created\r\nContent-Type: Application/JSON\r\ncontent-length: 20",
            &body,
        );
        assert!(plan(&data, 20, &settings()).is_some());
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
            assert_eq!(plan(&response(head, &body), 20, &settings()), None, "{head}");
        }
        let small = response("HTTP/1.1 200 OK\r\ncontent-type: text/plain", "short");
        assert_eq!(plan(&small, 5, &settings()), None);
        // HEAD: the length says 20, no body follows.
        let head = response("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 20", "");
        assert_eq!(plan(&head, 20, &settings()), None);
    }
}
