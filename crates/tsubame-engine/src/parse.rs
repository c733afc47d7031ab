//! Request heads: bytes in, a validated `RequestHead` or the status the
//! engine answers with. The rules here are strict on purpose: anything that
//! could make two parsers disagree about where a request ends is refused.

use crate::error::HttpError;
use bytes::{Bytes, BytesMut};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_uri_size: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A stream of an HTTP/2 connection (see `h2.rs`); never parsed here.
    Http2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Bytes,
    /// The request target as sent, for logs and `REQUEST_URI`.
    pub target: Bytes,
    pub path: Bytes,
    pub query: Bytes,
    pub version: Version,
    pub headers: Vec<(Bytes, Bytes)>,
    /// From an absolute-form target if there was one, else the Host header.
    pub host: Option<Bytes>,
    pub framing: Framing,
    pub keep_alive: bool,
    pub expect_continue: bool,
}

impl RequestHead {
    pub fn is_head(&self) -> bool {
        &self.method[..] == b"HEAD"
    }
}

pub(crate) fn is_known_method(method: &[u8]) -> bool {
    KNOWN_METHODS.contains(&method)
}

/// Methods a Rack app may see. Anything else is answered 501 by the engine,
/// as Puma does; CONNECT is absent because Tsubame is not a proxy.
const KNOWN_METHODS: &[&[u8]] = &[
    b"GET",
    b"HEAD",
    b"POST",
    b"PUT",
    b"DELETE",
    b"OPTIONS",
    b"PATCH",
    b"TRACE",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
    b"LOCK",
    b"UNLOCK",
    b"REPORT",
    b"MKACTIVITY",
    b"CHECKOUT",
    b"MERGE",
    b"SEARCH",
    b"MKCALENDAR",
    b"LINK",
    b"UNLINK",
];

const INLINE_HEADERS: usize = 64;
/// The request line has to fit in this much beyond the target limit.
const REQUEST_LINE_SLACK: usize = 64;

/// Parses one request head from the front of `buf`, consuming it on success.
/// `Ok(None)` means more bytes are needed.
pub fn parse_head(buf: &mut BytesMut, limits: &Limits) -> Result<Option<RequestHead>, HttpError> {
    // RFC 9112 §2.2: a server should skip empty lines before a request line.
    let blank = buf.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
    if blank > 0 {
        let _ = buf.split_to(blank);
    }
    if buf.is_empty() {
        return Ok(None);
    }
    let mut inline = [httparse::EMPTY_HEADER; INLINE_HEADERS];
    let inline_len = limits.max_headers.min(INLINE_HEADERS);
    let parsed = match try_parse(buf, &mut inline[..inline_len], limits) {
        Err(HttpError::HeadersTooLarge) if limits.max_headers > INLINE_HEADERS => {
            let mut many = vec![httparse::EMPTY_HEADER; limits.max_headers];
            try_parse(buf, &mut many, limits)?
        }
        other => other?,
    };
    let Some(layout) = parsed else {
        check_partial(buf, limits)?;
        return Ok(None);
    };
    let raw = buf.split_to(layout.len).freeze();
    layout.build(raw)
}

/// Where each piece of the head lies in the buffer, so the head can be cut
/// out as one `Bytes` and every field sliced from it without copying.
struct Layout {
    len: usize,
    method: (usize, usize),
    target: (usize, usize),
    version: Version,
    headers: Vec<((usize, usize), (usize, usize))>,
    max_uri_size: usize,
}

fn span(base: &[u8], part: &[u8]) -> (usize, usize) {
    let start = part.as_ptr() as usize - base.as_ptr() as usize;
    (start, start + part.len())
}

fn try_parse<'b>(
    buf: &'b [u8],
    headers: &mut [httparse::Header<'b>],
    limits: &Limits,
) -> Result<Option<Layout>, HttpError> {
    let mut req = httparse::Request::new(headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(httparse::Error::HeaderName) => return Err(HttpError::BadRequest("invalid header name")),
        Err(httparse::Error::HeaderValue) => return Err(HttpError::BadRequest("invalid header value")),
        Err(httparse::Error::Token) => return Err(HttpError::BadRequest("invalid request method")),
        Err(httparse::Error::NewLine) => return Err(HttpError::BadRequest("invalid line ending")),
        Err(_) => return Err(HttpError::BadRequest("malformed request line")),
    };
    if len > limits.max_header_size {
        return Err(HttpError::HeadersTooLarge);
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HttpError::BadRequest("malformed request line"));
    };
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let headers = req
        .headers
        .iter()
        .map(|h| (span(buf, h.name.as_bytes()), span(buf, h.value)))
        .collect();
    Ok(Some(Layout {
        len,
        method: span(buf, method.as_bytes()),
        target: span(buf, target.as_bytes()),
        version,
        headers,
        max_uri_size: limits.max_uri_size,
    }))
}

/// A well-formed version other than 1.0 and 1.1 (`HTTP/2.0`, `HTTP/0.9`)
/// gets 505; anything else, such as `HTTP/1.x`, is garbage and gets 400.
fn version_error(buf: &[u8]) -> HttpError {
    let line_end = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    let line = &buf[..line_end];
    let Some(at) = memchr::memmem::rfind(line, b"HTTP/") else {
        return HttpError::BadRequest("malformed request line");
    };
    // HTTP-version = "HTTP/" DIGIT "." DIGIT, and then the line ends (or
    // has not arrived yet).
    match &line[at + 5..] {
        [major, b'.', minor, rest @ ..]
            if major.is_ascii_digit() && minor.is_ascii_digit() && (rest.is_empty() || rest == b"\r") =>
        {
            HttpError::VersionNotSupported
        }
        _ => HttpError::BadRequest("malformed request line"),
    }
}

fn check_partial(buf: &[u8], limits: &Limits) -> Result<(), HttpError> {
    match memchr::memchr(b'\n', buf) {
        None if buf.len() > limits.max_uri_size + REQUEST_LINE_SLACK => Err(HttpError::UriTooLong),
        Some(line_end) if line_end > limits.max_uri_size + REQUEST_LINE_SLACK => Err(HttpError::UriTooLong),
        _ if buf.len() > limits.max_header_size => Err(HttpError::HeadersTooLarge),
        _ => Ok(()),
    }
}

fn eq_ignore_case(a: &[u8], b: &[u8]) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

fn valid_host(host: &[u8]) -> bool {
    !host.is_empty()
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(&b))
}

impl Layout {
    fn build(self, raw: Bytes) -> Result<Option<RequestHead>, HttpError> {
        let slice = |(s, e): (usize, usize)| raw.slice(s..e);
        let method = slice(self.method);
        if !KNOWN_METHODS.contains(&&method[..]) {
            return Err(HttpError::NotImplemented("request method not supported"));
        }
        let target = slice(self.target);
        if target.len() > self.max_uri_size {
            return Err(HttpError::UriTooLong);
        }
        let (mut host, path_and_query) = split_target(&method, &target)?;
        let (path, query) = match memchr::memchr(b'?', &path_and_query) {
            Some(q) => (path_and_query.slice(..q), path_and_query.slice(q + 1..)),
            None => (path_and_query, Bytes::new()),
        };

        let mut content_length: Option<u64> = None;
        let mut transfer_codings: Vec<Bytes> = Vec::new();
        let mut host_headers = 0;
        let mut close = false;
        let mut keep_alive_token = false;
        let mut expect_continue = false;
        let mut headers = Vec::with_capacity(self.headers.len());
        for (name_span, value_span) in self.headers {
            let name = slice(name_span);
            let value = slice(value_span);
            if eq_ignore_case(&name, b"content-length") {
                let parsed = parse_content_length(&value)?;
                if content_length.is_some_and(|prev| prev != parsed) {
                    return Err(HttpError::BadRequest("conflicting Content-Length headers"));
                }
                content_length = Some(parsed);
            } else if eq_ignore_case(&name, b"transfer-encoding") {
                transfer_codings.extend(tokens(&value).map(|t| value.slice_ref(t)));
            } else if eq_ignore_case(&name, b"host") {
                host_headers += 1;
                if host_headers > 1 {
                    return Err(HttpError::BadRequest("more than one Host header"));
                }
                if !valid_host(&value) {
                    return Err(HttpError::BadRequest("invalid Host header"));
                }
                if host.is_none() {
                    host = Some(value.clone());
                }
            } else if eq_ignore_case(&name, b"connection") {
                for token in tokens(&value) {
                    close |= eq_ignore_case(token, b"close");
                    keep_alive_token |= eq_ignore_case(token, b"keep-alive");
                }
            } else if eq_ignore_case(&name, b"expect") {
                if eq_ignore_case(value.trim_ascii(), b"100-continue") {
                    expect_continue = self.version == Version::Http11;
                } else {
                    return Err(HttpError::ExpectationFailed);
                }
            }
            headers.push((name, value));
        }
        if self.version == Version::Http11 && host_headers == 0 {
            return Err(HttpError::BadRequest("HTTP/1.1 request without a Host header"));
        }
        let framing = match (content_length, transfer_codings.is_empty()) {
            (_, true) => content_length.map_or(Framing::None, Framing::Length),
            (Some(_), false) => {
                return Err(HttpError::BadRequest("both Content-Length and Transfer-Encoding"));
            }
            (None, false) => chunked_framing(self.version, &transfer_codings)?,
        };
        let keep_alive = !close
            && match self.version {
                Version::Http11 | Version::Http2 => true,
                Version::Http10 => keep_alive_token,
            };
        Ok(Some(RequestHead {
            method,
            target,
            path,
            query,
            version: self.version,
            headers,
            host,
            framing,
            keep_alive,
            expect_continue,
        }))
    }
}

/// Splits origin-form, absolute-form and asterisk-form targets. The host of
/// an absolute-form target wins over the Host header (RFC 9112 §3.2.2).
fn split_target(method: &Bytes, target: &Bytes) -> Result<(Option<Bytes>, Bytes), HttpError> {
    if target.first() == Some(&b'/') {
        return Ok((None, target.clone()));
    }
    if &target[..] == b"*" {
        if &method[..] == b"OPTIONS" {
            return Ok((None, target.clone()));
        }
        return Err(HttpError::BadRequest("asterisk-form target is only for OPTIONS"));
    }
    let lower: Vec<u8> = target.iter().take(8).map(u8::to_ascii_lowercase).collect();
    let scheme_len = if lower.starts_with(b"http://") {
        7
    } else if lower.starts_with(b"https://") {
        8
    } else {
        return Err(HttpError::BadRequest("invalid request target"));
    };
    let rest = target.slice(scheme_len..);
    let authority_end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    let authority = rest.slice(..authority_end);
    if !valid_host(&authority) || authority.contains(&b'@') {
        return Err(HttpError::BadRequest("invalid authority in request target"));
    }
    let path = if authority_end == rest.len() {
        Bytes::from_static(b"/")
    } else if rest[authority_end] == b'?' {
        // `http://h?q` has an empty path, which Rack wants as "/".
        let mut joined = BytesMut::with_capacity(rest.len() - authority_end + 1);
        joined.extend_from_slice(b"/");
        joined.extend_from_slice(&rest[authority_end..]);
        joined.freeze()
    } else {
        rest.slice(authority_end..)
    };
    Ok((Some(authority), path))
}

fn parse_content_length(value: &[u8]) -> Result<u64, HttpError> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::BadRequest("invalid Content-Length"));
    }
    digits
        .iter()
        .try_fold(0u64, |acc, &d| acc.checked_mul(10)?.checked_add(u64::from(d - b'0')))
        .ok_or(HttpError::BadRequest("invalid Content-Length"))
}

fn chunked_framing(version: Version, codings: &[Bytes]) -> Result<Framing, HttpError> {
    if version == Version::Http10 {
        return Err(HttpError::BadRequest("Transfer-Encoding in an HTTP/1.0 request"));
    }
    let is_chunked = |c: &Bytes| eq_ignore_case(c, b"chunked");
    match codings {
        [only] if is_chunked(only) => Ok(Framing::Chunked),
        [.., last] if is_chunked(last) && !codings[..codings.len() - 1].iter().any(is_chunked) => {
            Err(HttpError::NotImplemented("transfer coding not supported"))
        }
        _ => Err(HttpError::BadRequest("chunked must be the final transfer coding, once")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_uri_size: 100,
        max_header_size: 1024,
        max_headers: 10,
    };

    fn parse(raw: &str) -> Result<Option<RequestHead>, HttpError> {
        let mut buf = BytesMut::from(raw.as_bytes());
        parse_head(&mut buf, &LIMITS)
    }

    fn status(raw: &str) -> u16 {
        parse(raw).unwrap_err().status()
    }

    #[test]
    fn parses_a_simple_get_and_leaves_the_next_request() {
        let mut buf =
            BytesMut::from(&b"GET /a/b?x=1&y HTTP/1.1\r\nHost: example.com:8080\r\nX-A: 1\r\n\r\nGET /next"[..]);
        let head = parse_head(&mut buf, &LIMITS).unwrap().unwrap();
        assert_eq!(&head.method[..], b"GET");
        assert_eq!(&head.path[..], b"/a/b");
        assert_eq!(&head.query[..], b"x=1&y");
        assert_eq!(head.host.as_deref(), Some(&b"example.com:8080"[..]));
        assert_eq!(head.framing, Framing::None);
        assert!(head.keep_alive);
        assert_eq!(head.headers.len(), 2);
        assert_eq!(&buf[..], b"GET /next");
    }

    #[test]
    fn incomplete_heads_ask_for_more() {
        assert!(parse("GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
        assert!(parse("\r\n").unwrap().is_none());
    }

    #[test]
    fn http10_keep_alive_only_when_asked() {
        assert!(!parse("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(
            parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .unwrap()
                .keep_alive
        );
        assert!(
            !parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap()
                .unwrap()
                .keep_alive
        );
    }

    #[test]
    fn framing_rules() {
        let h = parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(5));
        let h = parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        let h = parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            501
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
        assert_eq!(status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"), 400);
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"),
            400
        );
    }

    #[test]
    fn limits_and_errors() {
        let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(200));
        assert_eq!(status(&long), 414);
        let unterminated = format!("GET /{}", "a".repeat(300));
        assert_eq!(status(&unterminated), 414);
        let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(2000));
        assert_eq!(status(&big), 431);
        let many: String = (0..20).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")), 431);
        assert_eq!(status("BREW / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
        assert_eq!(status("CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
        assert_eq!(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status("GET / HTTP/2.0"), 505);
        assert_eq!(status("GET / HTTP/1.x\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/2.0 x\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/22\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), 400);
        assert_eq!(status("GET foo HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("POST / HTTP/1.1\r\nHost: a\r\nExpect: tea\r\n\r\n"), 417);
    }

    #[test]
    fn absolute_form_sets_host_and_path() {
        let h = parse("GET http://example.org:81/p?q=1 HTTP/1.1\r\nHost: other\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.host.as_deref(), Some(&b"example.org:81"[..]));
        assert_eq!(&h.path[..], b"/p");
        assert_eq!(&h.query[..], b"q=1");
        let h = parse("GET http://example.org?q HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&h.path[..], b"/");
        assert_eq!(&h.query[..], b"q");
        let h = parse("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(&h.path[..], b"*");
    }

    #[test]
    fn expect_continue_only_on_http11() {
        let h = parse("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.expect_continue);
    }
}
