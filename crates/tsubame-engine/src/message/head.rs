//! A request head as both protocols hand it to dispatch: HTTP/1's parser
//! (`http1/parse.rs`) and HTTP/2's stream headers (`h2/connection.rs`)
//! build the same `RequestHead`, so the queue and the app see one shape.

use bytes::Bytes;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_uri_size: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
    /// False when `supported_http_methods` is set: the connection checks
    /// the method against that policy instead (see `message/methods.rs`).
    pub known_methods_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A stream of an HTTP/2 connection (see `h2/connection.rs`); never
    /// parsed by `http1/parse.rs`.
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
    /// The `:protocol` of an HTTP/2 extended CONNECT (RFC 8441), such as
    /// `websocket`; `None` for every other request.
    pub protocol: Option<Bytes>,
}

impl RequestHead {
    pub fn is_head(&self) -> bool {
        &self.method[..] == b"HEAD"
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &[u8]) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Methods a Rack app may see. Anything else is answered 501 by the engine,
/// as Puma does; CONNECT is absent because Tsubame is not a proxy.
pub(crate) const KNOWN_METHODS: &[&[u8]] = &[
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
    // RFC 10008; in Puma 8's default list.
    b"QUERY",
];
