//! Rewriting a serialized HTTP/1 head for a compressed body.

use crate::files::encoding::Coding;

/// `head` (through its empty line) for a body now encoded with `coding`:
/// its new length (`None` for a streamed body, whose framing stays as it
/// was) and `content-encoding`, `vary` naming Accept-Encoding,
/// and a strong ETag made weak (the bytes are no longer the app's, as
/// nginx does).
pub(crate) fn rewrite(head: &[u8], coding: Coding, len: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 64);
    let mut vary_done = false;
    for line in lines(head) {
        let (name, value) = split(line);
        if name.eq_ignore_ascii_case(b"content-length") {
            continue;
        }
        if name.eq_ignore_ascii_case(b"etag") && value.starts_with(b"\"") {
            push(&mut out, name, &[b"W/", value].concat());
            continue;
        }
        if name.eq_ignore_ascii_case(b"vary") {
            vary_done = true;
            push(&mut out, name, &with_accept_encoding(value));
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    if !vary_done {
        out.extend_from_slice(b"vary: accept-encoding\r\n");
    }
    push(&mut out, b"content-encoding", coding.name().as_bytes());
    if let Some(len) = len {
        push(&mut out, b"content-length", itoa::Buffer::new().format(len).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `data` (a whole response, head `head_len` bytes long) with `vary:
/// accept-encoding` in its head, for a compressible answer sent plain.
pub(crate) fn add_vary(data: &[u8], head_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 32);
    let mut vary_done = false;
    for line in lines(&data[..head_len]) {
        let (name, value) = split(line);
        if name.eq_ignore_ascii_case(b"vary") {
            vary_done = true;
            push(&mut out, name, &with_accept_encoding(value));
        } else {
            out.extend_from_slice(line);
            out.extend_from_slice(b"\r\n");
        }
    }
    if !vary_done {
        out.extend_from_slice(b"vary: accept-encoding\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&data[head_len..]);
    out
}

/// The head's lines without their CRLF, status line first, up to the empty
/// line.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

fn split(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b':', line) {
        Some(colon) => (&line[..colon], line[colon + 1..].trim_ascii()),
        None => (line, b""),
    }
}

fn push(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn with_accept_encoding(value: &[u8]) -> Vec<u8> {
    let listed = value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii() == b"*" || t.trim_ascii().eq_ignore_ascii_case(b"accept-encoding"));
    if listed {
        value.to_vec()
    } else {
        [value, b", accept-encoding"].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_sets_length_encoding_vary_and_weakens_the_etag() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\netag: \"abc\"\r\ncontent-length: 100\r\nconnection: close\r\n\r\n";
        let out = rewrite(head, Coding::Gzip, Some(42));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\netag: W/\"abc\"\r\nconnection: close\r\nvary: accept-encoding\r\ncontent-encoding: gzip\r\ncontent-length: 42\r\n\r\n"
        );
    }

    #[test]
    fn vary_is_extended_not_repeated() {
        let head = b"HTTP/1.1 200 OK\r\nVary: Cookie\r\n\r\nbody";
        assert_eq!(
            String::from_utf8(add_vary(head, head.len() - 4)).unwrap(),
            "HTTP/1.1 200 OK\r\nVary: Cookie, accept-encoding\r\n\r\nbody"
        );
        let head = b"HTTP/1.1 200 OK\r\nvary: Accept-Encoding\r\n\r\n";
        let out = rewrite(head, Coding::Br, Some(1));
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("vary: Accept-Encoding\r\ncontent-encoding: br\r\n"));
    }
}
