//! Request heads: bytes in, a validated `RequestHead` or the status the
//! engine answers with. The rules here are strict on purpose: anything that
//! could make two parsers disagree about where a request ends is refused.

use crate::error::HttpError;
use crate::message::head::{Framing, Limits, RequestHead, Version, KNOWN_METHODS};
use bytes::{Buf, Bytes, BytesMut};

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
    let parsed = match parse_layout(buf, limits) {
        Err(HttpError::VersionNotSupported) => match later_http1_minor(buf) {
            // RFC 9110 §2.5: a later HTTP/1 minor version is processed as
            // the highest one implemented. Only this error path pays for it.
            Some(at) => {
                buf[at] = b'1';
                parse_layout(buf, limits)?
            }
            None => return Err(HttpError::VersionNotSupported),
        },
        other => other?,
    };
    let Some(layout) = parsed else {
        check_partial(buf, limits)?;
        return Ok(None);
    };
    // Copied out rather than split off: a head sliced from the read buffer
    // would keep all of its 16 KiB alive for as long as the request's
    // fields live (in an app thread's request object, until Ruby's GC
    // frees it), so every request would allocate a new read buffer and
    // the old ones would pile up between collections (9 MB of RSS under
    // load). A few hundred bytes copied leave the buffer free for reuse.
    let raw = Bytes::copy_from_slice(&buf[..layout.len]);
    buf.advance(layout.len);
    layout.build(raw)
}

fn parse_layout(buf: &[u8], limits: &Limits) -> Result<Option<Layout>, HttpError> {
    let mut inline = [httparse::EMPTY_HEADER; INLINE_HEADERS];
    let inline_len = limits.max_headers.min(INLINE_HEADERS);
    match try_parse(buf, &mut inline[..inline_len], limits) {
        Err(HttpError::HeadersTooLarge) if limits.max_headers > INLINE_HEADERS => {
            let mut many = vec![httparse::EMPTY_HEADER; limits.max_headers];
            try_parse(buf, &mut many, limits)
        }
        other => other,
    }
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
    known_methods_only: bool,
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
    let target = span(buf, target.as_bytes());
    // httparse accepts a bare LF as a line ending; every line end is
    // checked here where its position is already known (the request line
    // after "SP HTTP/1.x", each field after its value, the final empty
    // line), instead of scanning the head again.
    let mut crlf = ends_in_crlf(buf, target.1 + b" HTTP/1.1".len()) && buf[len - 2] == b'\r';
    let headers = req
        .headers
        .iter()
        .map(|h| {
            let value = span(buf, h.value);
            crlf &= ends_in_crlf(buf, value.1);
            (span(buf, h.name.as_bytes()), value)
        })
        .collect();
    if !crlf {
        return Err(HttpError::BadRequest("line not ended by CRLF"));
    }
    Ok(Some(Layout {
        len,
        method: span(buf, method.as_bytes()),
        target,
        version,
        headers,
        max_uri_size: limits.max_uri_size,
        known_methods_only: limits.known_methods_only,
    }))
}

/// Whether the line whose content ends at `at` (trailing whitespace
/// aside) ends in CRLF. RFC 9112 §2.2 lets a recipient accept a bare LF;
/// this parser does not, because a front proxy that splits lines only at
/// CRLF would see different header fields than the application does. A
/// bare CR never gets here: httparse refuses it.
fn ends_in_crlf(buf: &[u8], mut at: usize) -> bool {
    while matches!(buf.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    buf.get(at) == Some(&b'\r')
}

/// The version field of a request line that is otherwise three
/// space-separated fields, as far as it has arrived.
fn version_field(buf: &[u8]) -> Option<&[u8]> {
    let line_end = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    let line = &buf[..line_end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    (!method.is_empty() && !target.is_empty()).then_some(version)
}

/// A well-formed version other than 1.0 and 1.1 (`HTTP/2.0`, `HTTP/0.9`)
/// gets 505; anything else, such as `HTTP/1.x` or a request line with a
/// space in its target, is garbage and gets 400.
fn version_error(buf: &[u8]) -> HttpError {
    match version_field(buf) {
        // HTTP-version = "HTTP/" DIGIT "." DIGIT
        Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            HttpError::VersionNotSupported
        }
        _ => HttpError::BadRequest("malformed request line"),
    }
}

/// Where the minor digit of an `HTTP/1.2`..`HTTP/1.9` request line is.
fn later_http1_minor(buf: &[u8]) -> Option<usize> {
    let version = version_field(buf)?;
    match version {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'2'..=b'9'] => {
            Some(version.as_ptr() as usize - buf.as_ptr() as usize + version.len() - 1)
        }
        _ => None,
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

/// Bytes a request target may hold as they are: visible ASCII. That is
/// wider than RFC 3986 (unreserved, sub-delims, ":", "@", "/", "?", "%")
/// because browsers leave "[", "]", "|", "^", "{" and "}" unencoded in
/// queries and real applications depend on it. Not "#" (a fragment is never
/// sent), and no control, space or non-ASCII byte.
static TARGET_BYTES: [bool; 256] = byte_table(b"");

/// A reg-name (RFC 3986 §3.2.2): unreserved, sub-delims and "%".
static REG_NAME_BYTES: [bool; 256] = byte_table(b"-._~!$&'()*+,;=%");

/// With no extras: visible ASCII but "#". With extras: ALPHA, DIGIT and
/// the extras.
const fn byte_table(extras: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0x21;
    while b < 0x7f {
        table[b] = if extras.is_empty() {
            b != b'#' as usize
        } else {
            (b as u8).is_ascii_alphanumeric()
        };
        b += 1;
    }
    let mut i = 0;
    while i < extras.len() {
        table[extras[i] as usize] = true;
        i += 1;
    }
    table
}

/// So that no two layers can decode the target differently.
fn valid_target(target: &[u8]) -> bool {
    encoded_within(target, &TARGET_BYTES)
}

/// Every byte is in `allowed`, and every "%" starts a "%XX" triplet.
fn encoded_within(text: &[u8], allowed: &[bool; 256]) -> bool {
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if !allowed[b as usize] {
            return false;
        }
        if b == b'%' {
            let hex = |at: usize| text.get(at).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 2;
        }
        i += 1;
    }
    true
}

/// `uri-host [":" port]` (RFC 9110 §7.2), for the Host header and the
/// authority of an absolute-form target: a reg-name or IPv4 address, or an
/// IPv6 literal in brackets, then an optional all-digit port.
fn valid_host(host: &[u8]) -> bool {
    let (name_ok, port) = if let Some(inner) = host.strip_prefix(b"[") {
        let Some(end) = memchr::memchr(b']', inner) else {
            return false;
        };
        let literal = &inner[..end];
        let ok = !literal.is_empty() && literal.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        match &inner[end + 1..] {
            [] => (ok, None),
            [b':', port @ ..] => (ok, Some(port)),
            _ => return false,
        }
    } else {
        let (name, port) = match memchr::memchr(b':', host) {
            Some(colon) => (&host[..colon], Some(&host[colon + 1..])),
            None => (host, None),
        };
        let ok = !name.is_empty() && encoded_within(name, &REG_NAME_BYTES);
        (ok, port)
    };
    name_ok && port.is_none_or(|p| p.iter().all(u8::is_ascii_digit))
}

impl Layout {
    fn build(self, raw: Bytes) -> Result<Option<RequestHead>, HttpError> {
        let slice = |(s, e): (usize, usize)| raw.slice(s..e);
        let method = slice(self.method);
        if self.known_methods_only && !KNOWN_METHODS.contains(&&method[..]) {
            return Err(HttpError::NotImplemented("request method not supported"));
        }
        let target = slice(self.target);
        if target.len() > self.max_uri_size {
            return Err(HttpError::UriTooLong);
        }
        let (mut host, path_and_query) = split_target(&method, &target)?;
        if !valid_target(&path_and_query) {
            return Err(HttpError::BadRequest("invalid request target"));
        }
        let (path, query) = match memchr::memchr(b'?', &path_and_query) {
            Some(q) => (path_and_query.slice(..q), path_and_query.slice(q + 1..)),
            None => (path_and_query, Bytes::new()),
        };

        let mut content_length: Option<u64> = None;
        let mut transfer_codings: Vec<Bytes> = Vec::new();
        let mut transfer_encoding_fields = 0;
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
                transfer_encoding_fields += 1;
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
        if transfer_encoding_fields > 0 && transfer_codings.is_empty() {
            // Present but empty is not absent: a peer may read it either way.
            return Err(HttpError::BadRequest("empty Transfer-Encoding"));
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
            protocol: None,
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
    if !valid_host(&authority) {
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
        known_methods_only: true,
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
    fn line_endings_are_crlf_only() {
        assert_eq!(status("GET / HTTP/1.1\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\n\n"), 400);
        assert!(parse("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn versions() {
        let h = parse("GET / HTTP/1.2\r\nHost: a\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.version, Version::Http11);
        assert_eq!(status("GET / HTTP/0.9\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET /a  HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.10\r\nHost: a\r\n\r\n"), 400);
    }

    #[test]
    fn targets_must_be_unambiguous() {
        for bad in ["/a%zz", "/a%", "/a%4", "/a?q=100%", "/a#f", "/caf\u{e9}", "/a\x7fb"] {
            assert_eq!(
                status(&format!("GET {bad} HTTP/1.1\r\nHost: a\r\n\r\n")),
                400,
                "{bad:?}"
            );
        }
        for good in ["/a%2Fb", "/a?x[]=1|2", "/a\\b", "/%00"] {
            let h = parse(&format!("GET {good} HTTP/1.1\r\nHost: a\r\n\r\n"))
                .unwrap()
                .unwrap();
            assert_eq!(&h.target[..], good.as_bytes());
        }
    }

    #[test]
    fn host_values() {
        for good in [
            "a",
            "a:80",
            "a:",
            "[::1]",
            "[::1]:8080",
            "10.0.0.1:9",
            "xn--caf-dma.example",
        ] {
            assert!(
                parse(&format!("GET / HTTP/1.1\r\nHost: {good}\r\n\r\n"))
                    .unwrap()
                    .is_some(),
                "{good:?}"
            );
        }
        for bad in ["", "a:80a", "a:1:2", "[::1", "[::1]x", "u@a", "a/b", "a%zz", "a, b"] {
            assert_eq!(
                status(&format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n")),
                400,
                "{bad:?}"
            );
        }
        assert_eq!(status("GET http://a:8x/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    }

    #[test]
    fn empty_transfer_encoding_is_not_absent() {
        assert_eq!(status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n"), 400);
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\nContent-Length: 1\r\n\r\n"),
            400
        );
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
