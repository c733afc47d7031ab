//! Serializing response heads from what the application returned, and
//! deciding how the body is framed. Runs on the application thread, so the
//! connection task only copies finished bytes to the socket.

use crate::error::ShedReason;
use crate::message::date::append_date_header;
use crate::message::head::Version;
use std::fmt;

/// How a streamed body goes on the wire after its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFraming {
    /// The engine chunk-encodes.
    Chunked,
    /// Bytes go out as given: the application declared a length, framed the
    /// body itself, or the connection closes at the end.
    Raw { declared_len: Option<u64> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    InvalidStatus(i64),
    InvalidHeaderName(String),
    InvalidHeaderValue(String),
    InvalidContentLength(String),
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseError::InvalidStatus(s) => write!(f, "invalid response status {s}"),
            ResponseError::InvalidHeaderName(n) => write!(f, "invalid response header name {n:?}"),
            ResponseError::InvalidHeaderValue(n) => write!(f, "invalid value for response header {n:?}"),
            ResponseError::InvalidContentLength(v) => write!(f, "invalid content-length {v:?}"),
        }
    }
}

impl std::error::Error for ResponseError {}

/// A head under construction. Framing headers (content-length,
/// transfer-encoding, connection) are held back and written by `finish_*`,
/// which know the body and the connection.
#[derive(Debug)]
pub struct ResponseHead {
    buf: Vec<u8>,
    status: u16,
    content_length: Option<u64>,
    app_transfer_encoding: bool,
    /// The app's last transfer coding is chunked, so a client finds the
    /// body's end; any other coding ends the body with the connection.
    app_chunked: bool,
    app_close: bool,
    app_connection: Option<Vec<u8>>,
    has_date: bool,
}

/// Statuses that never carry a body (RFC 9110 §6.4.1).
pub fn status_has_no_body(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl ResponseHead {
    pub fn new(status: i64) -> Result<ResponseHead, ResponseError> {
        if !(100..=999).contains(&status) {
            return Err(ResponseError::InvalidStatus(status));
        }
        let status = status as u16;
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"HTTP/1.1 ");
        let mut digits = itoa::Buffer::new();
        buf.extend_from_slice(digits.format(status).as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(reason_phrase(status).as_bytes());
        buf.extend_from_slice(b"\r\n");
        Ok(ResponseHead {
            buf,
            status,
            content_length: None,
            app_transfer_encoding: false,
            app_chunked: false,
            app_close: false,
            app_connection: None,
            has_date: false,
        })
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// Adds one header. A value holding newlines becomes one header line per
    /// part (Rack 2's way of sending several values). Other control bytes
    /// (CR, NUL, DEL, anything below space but tab) are refused: CR could
    /// start a new header or response, and the rest make strict clients and
    /// proxies reject the whole response (RFC 9110 §5.5).
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), ResponseError> {
        if name.is_empty() || !name.iter().all(|&b| is_token_byte(b)) {
            return Err(ResponseError::InvalidHeaderName(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        if value
            .iter()
            .any(|&b| (b < b' ' && b != b'\t' && b != b'\n') || b == 0x7f)
        {
            return Err(ResponseError::InvalidHeaderValue(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let text = std::str::from_utf8(value).unwrap_or("").trim();
            let len = text
                .parse::<u64>()
                .map_err(|_| ResponseError::InvalidContentLength(String::from_utf8_lossy(value).into_owned()))?;
            self.content_length = Some(len);
            return Ok(());
        }
        if name.eq_ignore_ascii_case(b"connection") {
            // Several values (one per line) are one comma-separated list:
            // this header goes out as a single line of our own.
            let value: Vec<u8> = value.iter().map(|&b| if b == b'\n' { b',' } else { b }).collect();
            self.app_close |= value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
            self.app_connection = Some(value);
            return Ok(());
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.app_transfer_encoding = true;
            self.app_chunked = value
                .split(|&b| b == b',' || b == b'\n')
                .map(<[u8]>::trim_ascii)
                .rfind(|t| !t.is_empty())
                .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"date") {
            self.has_date = true;
        }
        for part in value.split(|&b| b == b'\n') {
            self.push_raw_header(name, part);
        }
        Ok(())
    }

    fn push_raw_header(&mut self, name: &[u8], value: &[u8]) {
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn end(&mut self, keep_alive: bool, version: Version) {
        if !self.has_date {
            append_date_header(&mut self.buf);
        }
        let app_connection = self.app_connection.take();
        if version == Version::Http2 {
            // HTTP/2 has no connection-level headers in a response.
        } else if !keep_alive {
            self.buf.extend_from_slice(b"connection: close\r\n");
        } else if let Some(value) = app_connection.filter(|v| !v.trim_ascii().eq_ignore_ascii_case(b"keep-alive")) {
            // Tokens other than close/keep-alive (such as `upgrade`) are the
            // app's business and go out unchanged.
            self.push_raw_header(b"connection", &value);
        } else if version == Version::Http10 {
            self.buf.extend_from_slice(b"connection: keep-alive\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Found by the response fuzz target: a Transfer-Encoding the app set
    /// whose last coding is not chunked leaves the body's end to the close,
    /// so the connection cannot be kept.
    fn app_allows_keep_alive(&self) -> bool {
        !self.app_close && (!self.app_transfer_encoding || self.app_chunked)
    }

    fn push_content_length(&mut self, len: u64) {
        let mut digits = itoa::Buffer::new();
        self.buf.extend_from_slice(b"content-length: ");
        self.buf.extend_from_slice(digits.format(len).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Finishes a head for a body already complete in memory (`body_len`
    /// bytes). Returns the head and whether the body goes out after it.
    /// The length written is the real one, whatever the application claimed,
    /// except for HEAD, where the application's claim is all there is: the
    /// body is not looked at, so without a claim no length is sent (a made-up
    /// 0 would misstate what GET sends, RFC 9110 §8.6).
    pub fn finish_full(mut self, body_len: u64, is_head: bool, keep_alive: bool, version: Version) -> FinishedHead {
        let keep_alive = keep_alive && self.app_allows_keep_alive();
        let send_body = !is_head && !status_has_no_body(self.status);
        if self.app_transfer_encoding {
            // The app frames the body itself; a Content-Length beside its
            // Transfer-Encoding would let a client or proxy pick either
            // (RFC 9112 §6.2), so none is sent.
        } else if self.status == 304 {
            if let Some(len) = self.content_length {
                self.push_content_length(len);
            }
        } else if !status_has_no_body(self.status) && !self.app_transfer_encoding {
            let len = if is_head { self.content_length } else { Some(body_len) };
            if let Some(len) = len {
                self.push_content_length(len);
            }
        }
        self.end(keep_alive, version);
        FinishedHead {
            bytes: self.buf,
            send_body,
            keep_alive,
            framing: StreamFraming::Raw { declared_len: None },
        }
    }

    /// Finishes a head for a body produced piece by piece.
    pub fn finish_stream(mut self, is_head: bool, keep_alive: bool, version: Version) -> FinishedHead {
        let mut keep_alive = keep_alive && self.app_allows_keep_alive();
        let send_body = !is_head && !status_has_no_body(self.status);
        let declared = self
            .content_length
            .filter(|_| !status_has_no_body(self.status) && !self.app_transfer_encoding);
        let framing = if let Some(len) = declared {
            self.push_content_length(len);
            StreamFraming::Raw {
                declared_len: Some(len),
            }
        } else if self.app_transfer_encoding || !send_body || version == Version::Http2 {
            // HTTP/2 frames the body itself (DATA frames, END_STREAM).
            StreamFraming::Raw { declared_len: None }
        } else if version == Version::Http11 {
            self.buf.extend_from_slice(b"transfer-encoding: chunked\r\n");
            StreamFraming::Chunked
        } else {
            // HTTP/1.0 has no chunking: the end of the body is the close.
            keep_alive = false;
            StreamFraming::Raw { declared_len: None }
        };
        self.end(keep_alive, version);
        FinishedHead {
            bytes: self.buf,
            send_body,
            keep_alive,
            framing,
        }
    }
}

impl ResponseHead {
    /// Finishes a head for a partial hijack: the app writes raw bytes after
    /// it and the connection closes when the app closes the stream.
    pub fn finish_hijacked(mut self) -> FinishedHead {
        // The app speaks for the connection now (often `upgrade`), so its
        // own Connection header goes out as given and nothing is added.
        if let Some(value) = self.app_connection.take() {
            self.push_raw_header(b"connection", &value);
        }
        if !self.has_date {
            append_date_header(&mut self.buf);
        }
        self.buf.extend_from_slice(b"\r\n");
        FinishedHead {
            bytes: self.buf,
            send_body: true,
            keep_alive: false,
            framing: StreamFraming::Raw { declared_len: None },
        }
    }
}

#[derive(Debug)]
pub struct FinishedHead {
    pub bytes: Vec<u8>,
    pub send_body: bool,
    pub keep_alive: bool,
    pub framing: StreamFraming,
}

/// `bytes` (a serialized HTTP/1 head, possibly followed by its body) with
/// the head changed to close the connection: for a reply the app made
/// before a stop began and that is written after. Our own heads never hold
/// an empty line before their end (header values are checked for CR and
/// LF), so the first one is the head's end.
pub fn close_connection(bytes: &[u8]) -> Vec<u8> {
    const KEEP_ALIVE: &[u8] = b"connection: keep-alive\r\n";
    let Some(end) = memchr::memmem::find(bytes, b"\r\n\r\n") else {
        return bytes.to_vec();
    };
    let (head, rest) = bytes.split_at(end + 2);
    let mut out = Vec::with_capacity(bytes.len() + 19);
    // Ours is the head's last line, in exactly this form (HTTP/1.0).
    let own_keep_alive =
        head.len() > KEEP_ALIVE.len() && head.ends_with(KEEP_ALIVE) && head[head.len() - KEEP_ALIVE.len() - 1] == b'\n';
    if own_keep_alive {
        out.extend_from_slice(&head[..head.len() - KEEP_ALIVE.len()]);
    } else {
        out.extend_from_slice(head);
    }
    out.extend_from_slice(b"connection: close\r\n");
    out.extend_from_slice(rest);
    out
}

/// A minimal response for requests the engine refuses itself; the
/// connection closes after it.
pub fn error_response(status: u16, detail: &str) -> Vec<u8> {
    let body = format!("{} {}\n{}\n", status, reason_phrase(status), detail);
    let mut head = ResponseHead::new(i64::from(status)).unwrap_or_else(|_| unreachable_status());
    let _ = head.header(b"content-type", b"text/plain; charset=utf-8");
    let mut finished = head.finish_full(body.len() as u64, false, false, Version::Http11);
    finished.bytes.extend_from_slice(body.as_bytes());
    finished.bytes
}

/// The 503 for a request the engine turned away under load. The request
/// was read whole, so the connection may stay open. JSON when the client's
/// Accept asks for it, plain text otherwise.
pub fn unavailable_response(
    reason: ShedReason,
    json: bool,
    retry_after: u64,
    keep_alive: bool,
    version: Version,
) -> Vec<u8> {
    let (content_type, body): (&[u8], String) = if json {
        (
            b"application/json",
            format!(
                "{{\"error\":\"service_unavailable\",\"reason\":\"{}\",\"detail\":\"{}\"}}\n",
                reason.as_str(),
                reason.detail()
            ),
        )
    } else {
        (
            b"text/plain; charset=utf-8",
            format!("503 Service Unavailable\n{} ({})\n", reason.detail(), reason.as_str()),
        )
    };
    let mut head = ResponseHead::new(503).unwrap_or_else(|_| unreachable_status());
    let _ = head.header(b"content-type", content_type);
    let _ = head.header(b"retry-after", retry_after.to_string().as_bytes());
    let mut finished = head.finish_full(body.len() as u64, false, keep_alive, version);
    finished.bytes.extend_from_slice(body.as_bytes());
    finished.bytes
}

fn unreachable_status() -> ResponseHead {
    ResponseHead {
        buf: b"HTTP/1.1 500 Internal Server Error\r\n".to_vec(),
        status: 500,
        content_length: None,
        app_transfer_encoding: false,
        app_chunked: false,
        app_close: false,
        app_connection: None,
        has_date: false,
    }
}

pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(head: &FinishedHead) -> String {
        String::from_utf8(head.bytes.clone()).unwrap()
    }

    #[test]
    fn a_keep_alive_head_is_turned_into_a_closing_one_body_untouched() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"x-note", b"connection: keep-alive").unwrap();
        let mut done = head.finish_full(4, false, true, Version::Http10);
        done.bytes.extend_from_slice(b"\r\n\r\n");
        let closed = String::from_utf8(close_connection(&done.bytes)).unwrap();
        assert!(closed.contains("x-note: connection: keep-alive\r\n"), "{closed}");
        assert!(!closed.contains("\r\nconnection: keep-alive"), "{closed}");
        assert!(closed.ends_with("\r\nconnection: close\r\n\r\n\r\n\r\n"), "{closed}");
        let h11 = ResponseHead::new(204)
            .unwrap()
            .finish_full(0, false, true, Version::Http11);
        let closed = String::from_utf8(close_connection(&h11.bytes)).unwrap();
        assert!(closed.starts_with("HTTP/1.1 204 No Content\r\n"), "{closed}");
        assert!(closed.ends_with("connection: close\r\n\r\n"), "{closed}");
    }

    #[test]
    fn full_response_gets_real_length_and_date() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"content-type", b"text/plain").unwrap();
        head.header(b"content-length", b"999").unwrap();
        let done = head.finish_full(7, false, true, Version::Http11);
        let t = text(&done);
        assert!(t.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"), "{t}");
        assert!(t.contains("content-length: 7\r\n"));
        assert!(!t.contains("999"));
        assert!(t.contains("date: "));
        assert!(t.ends_with("\r\n\r\n"));
        assert!(done.send_body && done.keep_alive);
    }

    #[test]
    fn head_keeps_the_apps_length_and_sends_no_body() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"content-length", b"1234").unwrap();
        let done = head.finish_full(0, true, true, Version::Http11);
        assert!(text(&done).contains("content-length: 1234\r\n"));
        assert!(!done.send_body);
        let done = ResponseHead::new(200)
            .unwrap()
            .finish_full(0, true, true, Version::Http11);
        assert!(!text(&done).contains("content-length"), "{}", text(&done));
        assert!(!done.send_body && done.keep_alive);
    }

    #[test]
    fn bodiless_statuses() {
        for status in [100, 204, 304] {
            let done = ResponseHead::new(status)
                .unwrap()
                .finish_full(5, false, true, Version::Http11);
            assert!(!done.send_body);
            assert!(!text(&done).contains("content-length"), "{status}");
        }
    }

    #[test]
    fn newline_values_become_several_headers_and_cr_is_refused() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"set-cookie", b"a=1\nb=2").unwrap();
        let t = text(&head.finish_full(0, false, true, Version::Http11));
        assert!(t.contains("set-cookie: a=1\r\nset-cookie: b=2\r\n"));
        let mut head = ResponseHead::new(200).unwrap();
        assert!(head.header(b"x", b"a\r\nInjected: 1").is_err());
        // Found by the response fuzz target: control bytes made a head that
        // strict clients refuse whole.
        for bad in [&b"a\x06b"[..], b"\x01", b"a\x7f", b"\x1b[31m"] {
            assert!(head.header(b"x", bad).is_err(), "{bad:?}");
        }
        assert!(head.header(b"x", b"tab\tand obs-text \xe9").is_ok());
        assert!(head.header(b"bad name", b"v").is_err());
        assert!(ResponseHead::new(99).is_err());
        assert!(ResponseHead::new(1000).is_err());
    }

    #[test]
    fn stream_framing() {
        let done = ResponseHead::new(200)
            .unwrap()
            .finish_stream(false, true, Version::Http11);
        assert_eq!(done.framing, StreamFraming::Chunked);
        assert!(text(&done).contains("transfer-encoding: chunked\r\n"));
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"content-length", b"10").unwrap();
        let done = head.finish_stream(false, true, Version::Http11);
        assert_eq!(done.framing, StreamFraming::Raw { declared_len: Some(10) });
        let done = ResponseHead::new(200)
            .unwrap()
            .finish_stream(false, true, Version::Http10);
        assert!(!done.keep_alive);
        assert!(text(&done).contains("connection: close\r\n"));
    }

    #[test]
    fn app_connection_close_is_honoured() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"Connection", b"close").unwrap();
        let done = head.finish_full(0, false, true, Version::Http11);
        assert!(!done.keep_alive);
        assert!(text(&done).contains("connection: close\r\n"));
    }

    #[test]
    fn the_apps_transfer_encoding_wins_over_its_content_length() {
        // Found by the response fuzz target: both headers went out.
        for stream in [false, true] {
            let mut head = ResponseHead::new(200).unwrap();
            head.header(b"transfer-encoding", b"chunked").unwrap();
            head.header(b"content-length", b"81").unwrap();
            let done = if stream {
                head.finish_stream(false, true, Version::Http11)
            } else {
                head.finish_full(5, false, true, Version::Http11)
            };
            let t = text(&done);
            assert!(!t.contains("content-length"), "{t}");
            assert!(done.keep_alive);
            assert_eq!(done.framing, StreamFraming::Raw { declared_len: None });
        }
    }

    #[test]
    fn a_transfer_coding_not_ending_in_chunked_closes_the_connection() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"transfer-encoding", b"chunked, gzip").unwrap();
        let done = head.finish_stream(false, true, Version::Http11);
        assert!(!done.keep_alive);
        assert!(text(&done).contains("connection: close\r\n"));
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"transfer-encoding", b"gzip\nchunked").unwrap();
        assert!(head.finish_full(0, false, true, Version::Http11).keep_alive);
    }

    #[test]
    fn a_multi_line_connection_value_stays_on_one_line() {
        let mut head = ResponseHead::new(200).unwrap();
        head.header(b"connection", b"upgrade\nx-other").unwrap();
        let t = text(&head.finish_full(0, false, true, Version::Http11));
        assert!(t.contains("connection: upgrade,x-other\r\n"), "{t}");
        assert!(!t.replace("\r\n", "").contains('\n'), "{t:?}");
    }

    #[test]
    fn error_responses_close() {
        let t = String::from_utf8(error_response(413, "too big")).unwrap();
        assert!(t.starts_with("HTTP/1.1 413 Content Too Large\r\n"));
        assert!(t.contains("connection: close\r\n"));
        assert!(t.ends_with("too big\n"));
    }
}
