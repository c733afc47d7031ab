//! The server's side of the opening handshake (RFC 6455 §4.2): deciding
//! whether a request asks for a WebSocket, checking it as §4.2.1 requires,
//! and writing the 101 response (§4.2.2). Over HTTP/2 the handshake is an
//! extended CONNECT instead (RFC 8441 §4–5: `:protocol websocket`, no key,
//! a 200 answer), checked by `check_extended_connect`; what it negotiates
//! (subprotocols, extensions) is the same `Upgrade`.

use super::base64;
use crate::crypto::lib::digest;
use crate::message::head::{RequestHead, Version};
use std::fmt;

/// The only protocol version this module speaks (§4.4); sent in
/// `Sec-WebSocket-Version` with a 426 when a client asks for another.
pub const VERSION: &str = "13";

/// Appended to the client's key before hashing (§1.3); a constant no other
/// protocol would use, so a non-WebSocket server cannot answer by accident.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What a valid handshake asks for; the application chooses among it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// The `Sec-WebSocket-Accept` value; `None` for an HTTP/2 extended
    /// CONNECT, which has no key to answer (RFC 8441 §5).
    pub accept: Option<String>,
    /// `Sec-WebSocket-Protocol` offers, in the client's order of preference.
    pub protocols: Vec<String>,
    /// The raw `Sec-WebSocket-Extensions` value (fields joined with ", "),
    /// empty when none was sent. Parsed only once an extension is supported.
    pub extensions: Vec<u8>,
}

/// A request that is not a valid WebSocket opening handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    NotGet,
    /// HTTP/1.0, or an HTTP/2 stream (RFC 8441's extended CONNECT is a
    /// different handshake).
    NotHttp11,
    NoHost,
    NoUpgradeHeader,
    NoConnectionUpgrade,
    /// Answer 426 with `Sec-WebSocket-Version: 13` (§4.2.2).
    BadVersion,
    BadKey,
    /// A `Sec-WebSocket-Protocol` entry that is not an HTTP token.
    BadProtocol,
    /// An HTTP/2 stream that is not a CONNECT with `:protocol websocket`.
    NotExtendedConnect,
}

impl HandshakeError {
    /// The status to answer with (§4.2.2 says 400 for a bad handshake,
    /// and 426 for an unsupported version).
    pub fn status(self) -> u16 {
        match self {
            HandshakeError::BadVersion => 426,
            _ => 400,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            HandshakeError::NotGet => "WebSocket handshake must be a GET",
            HandshakeError::NotHttp11 => "WebSocket handshake must be HTTP/1.1",
            HandshakeError::NoHost => "WebSocket handshake without a Host header",
            HandshakeError::NoUpgradeHeader => "no websocket token in Upgrade",
            HandshakeError::NoConnectionUpgrade => "no upgrade token in Connection",
            HandshakeError::BadVersion => "unsupported Sec-WebSocket-Version",
            HandshakeError::BadKey => "Sec-WebSocket-Key is not 16 bytes in base64",
            HandshakeError::BadProtocol => "invalid Sec-WebSocket-Protocol",
            HandshakeError::NotExtendedConnect => "WebSocket over HTTP/2 must be a CONNECT with :protocol websocket",
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for HandshakeError {}

/// Cheap: the Upgrade header has the token "websocket" (case-insensitive,
/// comma list). For `env["rack.upgrade?"]`; `check` does the rest.
pub fn is_upgrade_request(head: &RequestHead) -> bool {
    has_token(head, b"upgrade", b"websocket")
}

/// The checks of RFC 6455 §4.2.1, in its order.
pub fn check(head: &RequestHead) -> Result<Upgrade, HandshakeError> {
    // Methods are case-sensitive (RFC 9110 §9.1).
    if &head.method[..] != b"GET" {
        return Err(HandshakeError::NotGet);
    }
    if head.version != Version::Http11 {
        return Err(HandshakeError::NotHttp11);
    }
    if head.host.is_none() && head.header(b"host").is_none() {
        return Err(HandshakeError::NoHost);
    }
    if !is_upgrade_request(head) {
        return Err(HandshakeError::NoUpgradeHeader);
    }
    if !has_token(head, b"connection", b"upgrade") {
        return Err(HandshakeError::NoConnectionUpgrade);
    }
    // §11.3.4 and §11.3.5: the key and version fields must not be repeated
    // in a request, so a second one makes the field invalid.
    match single_value(head, b"sec-websocket-version") {
        Some(version) if version == VERSION.as_bytes() => {}
        _ => return Err(HandshakeError::BadVersion),
    }
    let key = single_value(head, b"sec-websocket-key").ok_or(HandshakeError::BadKey)?;
    if base64::decode_strict(key).map(|nonce| nonce.len()) != Some(16) {
        return Err(HandshakeError::BadKey);
    }
    Ok(Upgrade {
        accept: Some(accept_key(key)),
        protocols: protocols(head)?,
        extensions: joined_values(head, b"sec-websocket-extensions"),
    })
}

/// The `:protocol` (RFC 8441 §4) and `Upgrade` token of WebSockets.
const WEBSOCKET: &[u8] = b"websocket";

/// Cheap: an HTTP/2 stream that asks for a WebSocket, i.e. an extended
/// CONNECT whose `:protocol` is `websocket`. For `env["rack.upgrade?"]`;
/// `check_extended_connect` does the rest. (The `h2` crate already reset
/// streams whose `:protocol` lacks `:scheme` or `:path`, or that carry it
/// on another method, with PROTOCOL_ERROR, as RFC 8441 §4 asks.)
pub fn is_extended_connect(head: &RequestHead) -> bool {
    head.version == Version::Http2
        && &head.method[..] == b"CONNECT"
        && head
            .protocol
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case(WEBSOCKET))
}

/// The checks RFC 8441 §5 keeps of RFC 6455 §4.2.1 for a WebSocket over
/// an HTTP/2 stream: a host (`:authority`, or a `host` header), version
/// 13, subprotocol offers that are tokens. There is no key, no `Upgrade`
/// and no `Connection` (HTTP/2 has neither), and the answer is a 200
/// rather than a 101.
pub fn check_extended_connect(head: &RequestHead) -> Result<Upgrade, HandshakeError> {
    if !is_extended_connect(head) {
        return Err(HandshakeError::NotExtendedConnect);
    }
    if head.host.is_none() && head.header(b"host").is_none() {
        return Err(HandshakeError::NoHost);
    }
    match single_value(head, b"sec-websocket-version") {
        Some(version) if version == VERSION.as_bytes() => {}
        _ => return Err(HandshakeError::BadVersion),
    }
    Ok(Upgrade {
        accept: None,
        protocols: protocols(head)?,
        extensions: joined_values(head, b"sec-websocket-extensions"),
    })
}

/// base64(SHA-1(key + 258EAFA5-E914-47DA-95CA-C5AB0DC85B11)) (§4.2.2).
/// `key` is the header value as sent, not its decoded bytes.
pub fn accept_key(key: &[u8]) -> String {
    // SHA-1 is what the RFC fixes; it proves the server read the key, not
    // secrecy, so its weakness as a hash does not matter here.
    let mut context = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    context.update(key);
    context.update(ACCEPT_GUID);
    base64::encode(context.finish().as_ref())
}

/// The 101 response head, blank line included. `protocol` must be one of
/// `upgrade.protocols` (§4.2.2: a client fails the connection on any other);
/// one that is not is left out rather than sent.
pub fn response_head(upgrade: &Upgrade, protocol: Option<&str>, extensions: Option<&str>) -> Vec<u8> {
    let mut head = Vec::with_capacity(160);
    head.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n");
    if let Some(accept) = &upgrade.accept {
        head.extend_from_slice(b"sec-websocket-accept: ");
        head.extend_from_slice(accept.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    // Offers are checked tokens, so matching one also keeps CR/LF out.
    if let Some(chosen) = protocol.filter(|p| upgrade.protocols.iter().any(|offer| offer == p)) {
        head.extend_from_slice(b"sec-websocket-protocol: ");
        head.extend_from_slice(chosen.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if let Some(extensions) = extensions {
        head.extend_from_slice(b"sec-websocket-extensions: ");
        head.extend_from_slice(extensions.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Every value of a header, trimmed; a field may be sent more than once.
fn values<'a>(head: &'a RequestHead, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    head.headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim_ascii())
}

/// The entries of a comma-separated list header, over all its fields.
fn list_items<'a>(head: &'a RequestHead, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    values(head, name).flat_map(|value| {
        value
            .split(|&b| b == b',')
            .map(|item| item.trim_ascii())
            .filter(|item| !item.is_empty())
    })
}

fn has_token(head: &RequestHead, name: &[u8], token: &[u8]) -> bool {
    list_items(head, name).any(|item| item.eq_ignore_ascii_case(token))
}

/// The value of a header that must appear exactly once.
fn single_value<'a>(head: &'a RequestHead, name: &'a [u8]) -> Option<&'a [u8]> {
    let mut all = values(head, name);
    let first = all.next()?;
    all.next().is_none().then_some(first)
}

fn joined_values(head: &RequestHead, name: &[u8]) -> Vec<u8> {
    let mut joined = Vec::new();
    for value in values(head, name).filter(|v| !v.is_empty()) {
        if !joined.is_empty() {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(value);
    }
    joined
}

fn protocols(head: &RequestHead) -> Result<Vec<String>, HandshakeError> {
    list_items(head, b"sec-websocket-protocol")
        .map(|item| match std::str::from_utf8(item) {
            Ok(token) if token.bytes().all(is_tchar) => Ok(token.to_owned()),
            _ => Err(HandshakeError::BadProtocol),
        })
        .collect()
}

/// RFC 9110 §5.6.2 token characters: §4.1 requires subprotocol names to be
/// tokens, which is also what keeps them safe to echo in a header.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::parse::parse_head;
    use crate::message::head::Limits;
    use bytes::{Bytes, BytesMut};

    const RFC_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    /// Parses a request the way the HTTP/1 connection does.
    fn head(raw: &str) -> RequestHead {
        let limits = Limits {
            max_uri_size: 1024,
            max_header_size: 8192,
            max_headers: 50,
            known_methods_only: true,
        };
        parse_head(&mut BytesMut::from(raw.as_bytes()), &limits)
            .expect("a valid request")
            .expect("a whole request")
    }

    /// The RFC's handshake (§1.3), with `extra` header lines added.
    fn handshake(extra: &str) -> RequestHead {
        head(&format!(
            "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ))
    }

    /// A request of the given lines, Host included.
    fn request(lines: &[&str]) -> RequestHead {
        head(&format!(
            "GET /chat HTTP/1.1\r\nHost: h\r\n{}\r\n",
            lines.iter().map(|l| format!("{l}\r\n")).collect::<String>()
        ))
    }

    #[test]
    fn the_rfc_example_key_gives_the_rfc_accept_value() {
        assert_eq!(accept_key(RFC_KEY.as_bytes()), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn accepts_the_rfc_handshake() {
        let upgrade = check(&handshake("Origin: http://example.com\r\n")).unwrap();
        assert_eq!(
            upgrade,
            Upgrade {
                accept: Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()),
                protocols: vec![],
                extensions: vec![],
            }
        );
    }

    #[test]
    fn collects_protocol_offers_in_order_and_raw_extensions() {
        let upgrade = check(&handshake(
            "Sec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Protocol: v2.json\r\n\
             Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\
             Sec-WebSocket-Extensions: x-webkit\r\n",
        ))
        .unwrap();
        assert_eq!(upgrade.protocols, vec!["chat", "superchat", "v2.json"]);
        assert_eq!(
            upgrade.extensions,
            b"permessage-deflate; client_max_window_bits, x-webkit"
        );
    }

    #[test]
    fn refuses_a_protocol_that_is_not_a_token() {
        let err = check(&handshake("Sec-WebSocket-Protocol: chat, a b\r\n")).unwrap_err();
        assert_eq!(err, HandshakeError::BadProtocol);
    }

    #[test]
    fn tokens_are_found_case_insensitively_in_comma_lists() {
        let varied = request(&[
            "Upgrade: h2c, WebSocket",
            "Connection: keep-alive, UPGRADE",
            "Sec-WebSocket-Version: 13",
            &format!("Sec-WebSocket-Key: {RFC_KEY}"),
        ]);
        assert!(is_upgrade_request(&varied));
        assert!(check(&varied).is_ok());
        // Across repeated fields too.
        let repeated = request(&[
            "Upgrade: h2c",
            "Upgrade: websocket",
            "Connection: keep-alive",
            "Connection: upgrade",
            "Sec-WebSocket-Version: 13",
            &format!("Sec-WebSocket-Key: {RFC_KEY}"),
        ]);
        assert!(check(&repeated).is_ok());
    }

    #[test]
    fn is_upgrade_request_looks_only_at_the_upgrade_header() {
        assert!(is_upgrade_request(&request(&["Upgrade: websocket"])));
        assert!(!is_upgrade_request(&request(&[])));
        assert!(!is_upgrade_request(&request(&["Upgrade: h2c"])));
        assert!(!is_upgrade_request(&request(&["Upgrade: websockets"])));
        assert!(!is_upgrade_request(&request(&["Connection: websocket"])));
    }

    #[test]
    fn refuses_other_methods() {
        let raw = format!(
            "POST /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(check(&head(&raw)), Err(HandshakeError::NotGet));
    }

    #[test]
    fn refuses_http_1_0_and_http_2() {
        let raw = format!(
            "GET /chat HTTP/1.0\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {RFC_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        assert_eq!(check(&head(&raw)), Err(HandshakeError::NotHttp11));
        let mut h2 = handshake("");
        h2.version = Version::Http2;
        assert_eq!(check(&h2), Err(HandshakeError::NotHttp11));
    }

    #[test]
    fn refuses_a_request_without_a_host() {
        // The HTTP/1.1 parser already refuses this; a head built elsewhere
        // is checked all the same.
        let mut no_host = handshake("");
        no_host.host = None;
        no_host.headers.retain(|(name, _)| !name.eq_ignore_ascii_case(b"host"));
        assert_eq!(check(&no_host), Err(HandshakeError::NoHost));
    }

    #[test]
    fn refuses_a_missing_upgrade_or_connection_token() {
        let key = format!("Sec-WebSocket-Key: {RFC_KEY}");
        let no_upgrade = request(&["Connection: Upgrade", "Sec-WebSocket-Version: 13", &key]);
        assert_eq!(check(&no_upgrade), Err(HandshakeError::NoUpgradeHeader));
        let no_connection = request(&["Upgrade: websocket", "Sec-WebSocket-Version: 13", &key]);
        assert_eq!(check(&no_connection), Err(HandshakeError::NoConnectionUpgrade));
        let keep_alive = request(&[
            "Upgrade: websocket",
            "Connection: keep-alive",
            "Sec-WebSocket-Version: 13",
            &key,
        ]);
        assert_eq!(check(&keep_alive), Err(HandshakeError::NoConnectionUpgrade));
    }

    #[test]
    fn refuses_other_versions_with_426() {
        let key = format!("Sec-WebSocket-Key: {RFC_KEY}");
        for version in [None, Some("8"), Some("14"), Some("13, 8"), Some("")] {
            let version_line = version.map(|v| format!("Sec-WebSocket-Version: {v}"));
            let mut lines = vec!["Upgrade: websocket", "Connection: Upgrade", key.as_str()];
            lines.extend(version_line.as_deref());
            let err = check(&request(&lines)).unwrap_err();
            assert_eq!((err, err.status()), (HandshakeError::BadVersion, 426), "{version:?}");
        }
        let twice = handshake("Sec-WebSocket-Version: 13\r\n");
        assert_eq!(check(&twice), Err(HandshakeError::BadVersion));
    }

    #[test]
    fn refuses_a_key_that_is_not_16_bytes_of_base64() {
        for key in [
            "",
            "dGhlIHNhbXBsZSBub25jZQ",   // unpadded
            "dGhlIHNhbXBsZSBub25jZR==", // non-zero trailing bits
            "dGhlIHNhbXBsZSBub25jZQ=",  // bad padding
            "dGhlIHNhbXBsZSBub25j",     // 15 bytes
            "dGhlIHNhbXBsZSBub25jZSE=", // 17 bytes
            "dGhlIHNhbXBsZSBub25jZQ==dGhl",
            "dGhlIHNhbXBsZSBub25j*Q==",
        ] {
            let lines = ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13"];
            let key_line = format!("Sec-WebSocket-Key: {key}");
            let mut all = lines.to_vec();
            all.push(&key_line);
            let err = check(&request(&all)).unwrap_err();
            assert_eq!((err, err.status()), (HandshakeError::BadKey, 400), "{key:?}");
        }
        let missing = request(&["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13"]);
        assert_eq!(check(&missing), Err(HandshakeError::BadKey));
        let twice = handshake("Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n");
        assert_eq!(check(&twice), Err(HandshakeError::BadKey));
    }

    #[test]
    fn writes_the_101_response() {
        let upgrade = check(&handshake("Sec-WebSocket-Protocol: chat, superchat\r\n")).unwrap();
        assert_eq!(
            response_head(&upgrade, None, None),
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
              sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        );
        assert_eq!(
            response_head(&upgrade, Some("chat"), None),
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
              sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nsec-websocket-protocol: chat\r\n\r\n"
        );
    }

    #[test]
    fn a_protocol_the_client_did_not_offer_is_left_out() {
        let upgrade = check(&handshake("Sec-WebSocket-Protocol: chat\r\n")).unwrap();
        assert_eq!(
            response_head(&upgrade, Some("other"), None),
            response_head(&upgrade, None, None)
        );
        assert_eq!(
            response_head(&upgrade, Some("chat\r\nx: y"), None),
            response_head(&upgrade, None, None)
        );
    }

    #[test]
    fn builds_heads_by_hand_too() {
        // The shape HTTP/2 or a test would build, without the parser.
        let head = RequestHead {
            method: Bytes::from_static(b"GET"),
            target: Bytes::from_static(b"/"),
            path: Bytes::from_static(b"/"),
            query: Bytes::new(),
            version: Version::Http11,
            headers: vec![
                (Bytes::from_static(b"host"), Bytes::from_static(b"h")),
                (Bytes::from_static(b"upgrade"), Bytes::from_static(b"websocket")),
                (Bytes::from_static(b"connection"), Bytes::from_static(b"upgrade")),
                (
                    Bytes::from_static(b"sec-websocket-version"),
                    Bytes::from_static(b" 13 "),
                ),
                (
                    Bytes::from_static(b"sec-websocket-key"),
                    Bytes::from_static(RFC_KEY.as_bytes()),
                ),
            ],
            host: Some(Bytes::from_static(b"h")),
            framing: crate::message::head::Framing::None,
            keep_alive: true,
            expect_continue: false,
            protocol: None,
        };
        assert_eq!(
            check(&head).map(|u| u.accept),
            Ok(Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_owned()))
        );
    }

    /// An HTTP/2 stream's head as `h2/connection.rs` builds it.
    fn extended_connect(protocol: Option<&'static str>, headers: &[(&'static str, &'static str)]) -> RequestHead {
        RequestHead {
            method: Bytes::from_static(b"CONNECT"),
            target: Bytes::from_static(b"/chat"),
            path: Bytes::from_static(b"/chat"),
            query: Bytes::new(),
            version: Version::Http2,
            headers: headers
                .iter()
                .map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes())))
                .collect(),
            host: Some(Bytes::from_static(b"server.example.com")),
            framing: crate::message::head::Framing::None,
            keep_alive: true,
            expect_continue: false,
            protocol: protocol.map(|p| Bytes::from_static(p.as_bytes())),
        }
    }

    #[test]
    fn accepts_an_extended_connect_without_a_key() {
        let head = extended_connect(
            Some("websocket"),
            &[
                ("sec-websocket-version", "13"),
                ("sec-websocket-protocol", "chat, superchat"),
                ("sec-websocket-extensions", "permessage-deflate"),
                ("origin", "http://www.example.com"),
            ],
        );
        assert!(is_extended_connect(&head));
        assert_eq!(
            check_extended_connect(&head),
            Ok(Upgrade {
                accept: None,
                protocols: vec!["chat".into(), "superchat".into()],
                extensions: b"permessage-deflate".to_vec(),
            })
        );
        // The token is compared as HTTP/1's Upgrade token is.
        let upper = extended_connect(Some("WebSocket"), &[("sec-websocket-version", "13")]);
        assert!(check_extended_connect(&upper).is_ok());
    }

    #[test]
    fn refuses_other_extended_connects() {
        let version = [("sec-websocket-version", "13")];
        for protocol in [None, Some("websockets"), Some("connect-udp"), Some("")] {
            let head = extended_connect(protocol, &version);
            assert!(!is_extended_connect(&head), "{protocol:?}");
            assert_eq!(check_extended_connect(&head), Err(HandshakeError::NotExtendedConnect));
        }
        // An HTTP/1.1 upgrade request is not one, whatever its fields.
        assert!(!is_extended_connect(&handshake("")));
        let mut get = extended_connect(Some("websocket"), &version);
        get.method = Bytes::from_static(b"GET");
        assert!(!is_extended_connect(&get));
    }

    #[test]
    fn an_extended_connect_needs_version_13_and_a_host() {
        for headers in [
            &[][..],
            &[("sec-websocket-version", "8")],
            &[("sec-websocket-version", "13, 8")],
        ] {
            let err = check_extended_connect(&extended_connect(Some("websocket"), headers)).unwrap_err();
            assert_eq!((err, err.status()), (HandshakeError::BadVersion, 426), "{headers:?}");
        }
        let mut no_host = extended_connect(Some("websocket"), &[("sec-websocket-version", "13")]);
        no_host.host = None;
        assert_eq!(check_extended_connect(&no_host), Err(HandshakeError::NoHost));
        let bad = extended_connect(
            Some("websocket"),
            &[("sec-websocket-version", "13"), ("sec-websocket-protocol", "a b")],
        );
        assert_eq!(check_extended_connect(&bad), Err(HandshakeError::BadProtocol));
    }
}
