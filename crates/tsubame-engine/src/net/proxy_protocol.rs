//! The PROXY protocol (HAProxy's, versions 1 and 2): a header a load
//! balancer writes first on each connection it opens to us, naming the
//! client it is relaying. A bind asks for it with `proxy_protocol=v1` or
//! `proxy_protocol=v2`; then every connection of that bind must begin with
//! a header of that version, read before anything else (before the TLS
//! handshake on an `ssl://` bind). Anything else closes the connection:
//! nothing on it can be trusted, and a client that reached the port
//! directly must not get to name its own address.
//!
//! v1 is one text line, at most 107 bytes with its CRLF:
//! `PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n` or `PROXY UNKNOWN ...\r\n`.
//! Parsing is strict: single spaces, addresses of the family named, ports
//! as decimals without leading zeros.
//!
//! v2 is binary: a 12-byte signature, version and command (LOCAL or PROXY),
//! family and transport, a big-endian length, the addresses, then TLVs
//! (skipped). LOCAL (the balancer's own health check), UNSPEC, UNIX and v1's
//! UNKNOWN keep the socket's peer.

use bytes::BytesMut;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The v2 signature.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 line, CRLF included, is at most this long (the spec's bound).
pub const V1_MAX: usize = 107;
/// The most a v2 header may carry after its 16 fixed bytes. The format
/// allows 65535; addresses take at most 216 and balancers add a few TLVs
/// (TLS details, a unique id, a cloud endpoint id), so anything near the
/// maximum is refused rather than buffered.
pub const V2_MAX_PAYLOAD: usize = 4096;
const V1_PREFIX: &[u8] = b"PROXY ";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    V1,
    V2,
}

impl ProxyVersion {
    /// `v1`/`1` or `v2`/`2`, as a bind's query or the option spells it.
    pub fn parse(text: &str) -> Option<ProxyVersion> {
        match text {
            "v1" | "1" => Some(ProxyVersion::V1),
            "v2" | "2" => Some(ProxyVersion::V2),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProxyVersion::V1 => "v1",
            ProxyVersion::V2 => "v2",
        }
    }
}

/// Whom a valid header names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxySource {
    /// The client the balancer relays (its address and port).
    Client(SocketAddr),
    /// v1 UNKNOWN, v2 LOCAL, UNSPEC or UNIX: the socket's peer stands.
    KeepPeer,
}

/// What the bytes read so far amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A header may still come: read more.
    Incomplete,
    /// A whole header of `len` bytes; what follows is the connection's.
    Header { len: usize, source: ProxySource },
}

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyError {
    /// The first bytes cannot begin a PROXY header (plain HTTP, a TLS
    /// ClientHello, garbage).
    Missing,
    /// A header of the other version.
    WrongVersion {
        expected: ProxyVersion,
    },
    /// A header that breaks the format.
    Malformed(&'static str),
    /// Longer than `V1_MAX` or `V2_MAX_PAYLOAD` allow.
    TooLong,
    /// The peer closed before the header was complete.
    Closed,
    /// The header did not come within the timeout.
    TimedOut,
    Io(std::io::ErrorKind),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Missing => write!(f, "no PROXY header"),
            ProxyError::WrongVersion { expected } => {
                write!(
                    f,
                    "a PROXY header of the wrong version (the bind expects {})",
                    expected.as_str()
                )
            }
            ProxyError::Malformed(why) => write!(f, "malformed PROXY header: {why}"),
            ProxyError::TooLong => write!(f, "PROXY header too long"),
            ProxyError::Closed => write!(f, "closed before the PROXY header was complete"),
            ProxyError::TimedOut => write!(f, "no complete PROXY header in time"),
            ProxyError::Io(kind) => write!(f, "reading the PROXY header: {kind}"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// Looks at the first bytes of a connection for a header of `version`.
pub fn parse(buf: &[u8], version: ProxyVersion) -> Result<Parsed, ProxyError> {
    match version {
        ProxyVersion::V1 => {
            if could_be(buf, V2_SIGNATURE) {
                return Err(ProxyError::WrongVersion { expected: version });
            }
            parse_v1(buf)
        }
        ProxyVersion::V2 => {
            if could_be(buf, V1_PREFIX) {
                return Err(ProxyError::WrongVersion { expected: version });
            }
            parse_v2(buf)
        }
    }
}

/// Whether `buf` and `prefix` agree on their common length (and `buf` is
/// not empty). The two versions differ in their first byte (`P`, `\r`),
/// so one byte is enough to tell the other version apart.
fn could_be(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    n > 0 && buf[..n] == prefix[..n]
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    if buf.len() < V1_PREFIX.len() {
        return if V1_PREFIX.starts_with(buf) {
            Ok(Parsed::Incomplete)
        } else {
            Err(ProxyError::Missing)
        };
    }
    if !buf.starts_with(V1_PREFIX) {
        return Err(ProxyError::Missing);
    }
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if !window.iter().all(|&b| is_line_byte(b)) {
            return Err(ProxyError::Malformed("a byte that is not printable ASCII"));
        }
        return if buf.len() >= V1_MAX {
            Err(ProxyError::TooLong)
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    match buf.get(cr + 1) {
        None if cr + 1 >= V1_MAX => return Err(ProxyError::TooLong),
        None => return Ok(Parsed::Incomplete),
        Some(b'\n') => {}
        Some(_) => return Err(ProxyError::Malformed("CR not followed by LF")),
    }
    let line = &buf[..cr];
    if !line.iter().all(|&b| is_line_byte(b)) {
        return Err(ProxyError::Malformed("a byte that is not printable ASCII"));
    }
    let source = parse_v1_line(&line[V1_PREFIX.len()..])?;
    Ok(Parsed::Header { len: cr + 2, source })
}

fn is_line_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b)
}

/// What follows `PROXY `.
fn parse_v1_line(rest: &[u8]) -> Result<ProxySource, ProxyError> {
    // Printable ASCII was checked, so this is valid UTF-8.
    let text = std::str::from_utf8(rest).map_err(|_| ProxyError::Malformed("not ASCII"))?;
    let mut fields = text.split(' ');
    let protocol = fields.next().unwrap_or("");
    if protocol == "UNKNOWN" {
        // The spec: whatever follows UNKNOWN up to the CRLF is ignored.
        return Ok(ProxySource::KeepPeer);
    }
    let fields: Vec<&str> = fields.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err(ProxyError::Malformed("expected PROXY TCP4|TCP6 SRC DST SPORT DPORT"));
    };
    // The destination is checked as strictly as the source, then unused.
    let src: IpAddr = match protocol {
        "TCP4" => {
            ipv4(dst).ok_or(ProxyError::Malformed("bad destination address"))?;
            ipv4(src).ok_or(ProxyError::Malformed("bad source address"))?.into()
        }
        "TCP6" => {
            ipv6(dst).ok_or(ProxyError::Malformed("bad destination address"))?;
            ipv6(src).ok_or(ProxyError::Malformed("bad source address"))?.into()
        }
        _ => return Err(ProxyError::Malformed("protocol must be TCP4, TCP6 or UNKNOWN")),
    };
    let sport = port(sport).ok_or(ProxyError::Malformed("bad source port"))?;
    port(dport).ok_or(ProxyError::Malformed("bad destination port"))?;
    Ok(ProxySource::Client(SocketAddr::new(src, sport)))
}

/// Dotted quad, no leading zeros (std refuses them).
fn ipv4(text: &str) -> Option<Ipv4Addr> {
    text.parse().ok()
}

/// Textual IPv6 with no brackets, zone or embedded port.
fn ipv6(text: &str) -> Option<Ipv6Addr> {
    if !text.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
        return None;
    }
    text.parse().ok()
}

/// 0..=65535 in decimal without leading zeros.
fn port(text: &str) -> Option<u16> {
    let valid = !text.is_empty()
        && text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !valid {
        return None;
    }
    text.parse().ok()
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] != V2_SIGNATURE[..n] {
        return Err(ProxyError::Missing);
    }
    if buf.len() < 16 {
        return Ok(Parsed::Incomplete);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Err(ProxyError::Malformed("version must be 2"));
    }
    let local = match command {
        0 => true,
        1 => false,
        _ => return Err(ProxyError::Malformed("command must be LOCAL or PROXY")),
    };
    let family = buf[13];
    let payload = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if payload > V2_MAX_PAYLOAD {
        return Err(ProxyError::TooLong);
    }
    let len = 16 + payload;
    if buf.len() < len {
        return Ok(Parsed::Incomplete);
    }
    if local {
        // The balancer speaking for itself (a health check): whatever the
        // family says, the socket's peer stands.
        return Ok(Parsed::Header {
            len,
            source: ProxySource::KeepPeer,
        });
    }
    let addresses = &buf[16..len];
    let source = match family {
        // UNSPEC: the balancer could not say.
        0x00 => ProxySource::KeepPeer,
        // TCP over IPv4: 4 + 4 address bytes, 2 + 2 port bytes.
        0x11 => {
            let a = addresses
                .get(..12)
                .ok_or(ProxyError::Malformed("too short for IPv4 addresses"))?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            ProxySource::Client(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
        }
        // TCP over IPv6: 16 + 16, 2 + 2.
        0x21 => {
            let a = addresses
                .get(..36)
                .ok_or(ProxyError::Malformed("too short for IPv6 addresses"))?;
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&a[..16]);
            let ip = Ipv6Addr::from(octets);
            ProxySource::Client(SocketAddr::new(ip.into(), u16::from_be_bytes([a[32], a[33]])))
        }
        // UNIX stream: two 108-byte paths; no IP to report.
        0x31 => {
            if addresses.len() < 216 {
                return Err(ProxyError::Malformed("too short for UNIX addresses"));
            }
            ProxySource::KeepPeer
        }
        0x12 | 0x22 | 0x32 => return Err(ProxyError::Malformed("a datagram transport on a stream connection")),
        _ => return Err(ProxyError::Malformed("unknown address family or transport")),
    };
    Ok(Parsed::Header { len, source })
}

/// Reads a header of `version` from the start of `io`. Returns whom it
/// names and the bytes read past it (the start of the TLS handshake or of
/// the first request). The caller bounds it with a timeout.
pub async fn read_header<T: AsyncRead + Unpin>(
    io: &mut T,
    version: ProxyVersion,
) -> Result<(ProxySource, BytesMut), ProxyError> {
    let mut buf = BytesMut::with_capacity(crate::net::client_io::READ_CHUNK);
    loop {
        match io.read_buf(&mut buf).await {
            Ok(0) => return Err(ProxyError::Closed),
            Ok(_) => {}
            Err(e) => return Err(ProxyError::Io(e.kind())),
        }
        if let Parsed::Header { len, source } = parse(&buf, version)? {
            let _ = buf.split_to(len);
            return Ok((source, buf));
        }
        if buf.capacity() == buf.len() {
            buf.reserve(crate::net::client_io::READ_CHUNK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProxyVersion::{V1, V2};

    fn client(text: &str) -> ProxySource {
        ProxySource::Client(text.parse().unwrap())
    }

    fn header(buf: &[u8], version: ProxyVersion) -> (usize, ProxySource) {
        match parse(buf, version) {
            Ok(Parsed::Header { len, source }) => (len, source),
            other => panic!("expected a header from {buf:?}, got {other:?}"),
        }
    }

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&(addresses.len() as u16).to_be_bytes());
        out.extend_from_slice(addresses);
        out
    }

    fn v2_ipv4(src: [u8; 4], sport: u16) -> Vec<u8> {
        let mut a = src.to_vec();
        a.extend_from_slice(&[10, 0, 0, 1]);
        a.extend_from_slice(&sport.to_be_bytes());
        a.extend_from_slice(&443u16.to_be_bytes());
        v2(1, 0x11, &a)
    }

    #[test]
    fn v1_tcp4_and_tcp6_name_the_client_and_leave_what_follows() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(header(line, V1), (41, client("192.0.2.7:56324")));
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 80\r\n";
        assert_eq!(header(line, V1), (line.len(), client("[2001:db8::7]:65535")));
        let line = b"PROXY TCP6 ::ffff:192.0.2.1 ::1 0 80\r\n";
        assert_eq!(header(line, V1).1, client("[::ffff:192.0.2.1]:0"));
    }

    #[test]
    fn v1_unknown_keeps_the_peer_whatever_follows() {
        assert_eq!(header(b"PROXY UNKNOWN\r\n", V1), (15, ProxySource::KeepPeer));
        let line = b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
        assert_eq!(header(line, V1).1, ProxySource::KeepPeer);
    }

    #[test]
    fn v1_waits_for_the_rest_of_a_split_line() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n";
        for cut in 1..line.len() {
            assert_eq!(parse(&line[..cut], V1), Ok(Parsed::Incomplete), "cut at {cut}");
        }
    }

    #[test]
    fn v1_the_longest_line_fits_and_one_byte_more_does_not() {
        let longest = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(longest.len(), V1_MAX);
        assert_eq!(header(longest, V1).0, V1_MAX);
        let mut over = b"PROXY UNKNOWN ".to_vec();
        over.resize(V1_MAX + 20, b'x');
        assert_eq!(parse(&over, V1), Err(ProxyError::TooLong));
        // CR as the 107th byte: its LF would be the 108th.
        let mut at_edge = b"PROXY UNKNOWN ".to_vec();
        at_edge.resize(V1_MAX - 1, b'x');
        at_edge.push(b'\r');
        assert_eq!(parse(&at_edge, V1), Err(ProxyError::TooLong));
    }

    #[test]
    fn v1_refuses_malformed_lines() {
        for line in [
            &b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n"[..],
            b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443 extra\r\n",
            b"PROXY TCP4  192.0.2.7 10.0.0.1 56324 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443 \r\n",
            b"PROXY TCP4 2001:db8::1 10.0.0.1 56324 443\r\n",
            b"PROXY TCP6 192.0.2.7 ::1 56324 443\r\n",
            b"PROXY TCP4 192.0.2.256 10.0.0.1 56324 443\r\n",
            b"PROXY TCP4 192.0.2.07 10.0.0.1 56324 443\r\n",
            b"PROXY TCP4 localhost 10.0.0.1 56324 443\r\n",
            b"PROXY TCP6 [::1] ::1 56324 443\r\n",
            b"PROXY TCP6 fe80::1%eth0 ::1 56324 443\r\n",
            b"PROXY UDP4 192.0.2.7 10.0.0.1 56324 443\r\n",
            b"PROXY tcp4 192.0.2.7 10.0.0.1 56324 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 056324 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 -1 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 +80 443\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 80 99999\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 80 443\rX",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 80 443\n",
            b"PROXY TCP4 192.0.2.7\t10.0.0.1 80 443\r\n",
            b"PROXY \r\n",
        ] {
            assert!(
                matches!(parse(line, V1), Err(ProxyError::Malformed(_))),
                "{:?} gave {:?}",
                String::from_utf8_lossy(line),
                parse(line, V1)
            );
        }
    }

    #[test]
    fn v1_refuses_what_is_not_a_header() {
        for bytes in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"proxy TCP4 1.2.3.4 1.2.3.4 1 1\r\n",
            b"PROXYTCP4",
            b"\x16\x03\x01\x02\x00\x01",
            b"\0\0\0\0",
        ] {
            assert_eq!(parse(bytes, V1), Err(ProxyError::Missing), "{bytes:?}");
        }
    }

    #[test]
    fn each_version_refuses_the_other() {
        let v2_header = v2_ipv4([192, 0, 2, 7], 1234);
        assert_eq!(parse(&v2_header, V1), Err(ProxyError::WrongVersion { expected: V1 }));
        assert_eq!(
            parse(&v2_header[..1], V1),
            Err(ProxyError::WrongVersion { expected: V1 })
        );
        let v1_line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n";
        assert_eq!(parse(v1_line, V2), Err(ProxyError::WrongVersion { expected: V2 }));
        assert_eq!(parse(b"PRO", V2), Err(ProxyError::WrongVersion { expected: V2 }));
    }

    #[test]
    fn v2_tcp_over_ipv4_and_ipv6() {
        let mut bytes = v2_ipv4([192, 0, 2, 7], 56324);
        let len = bytes.len();
        bytes.extend_from_slice(b"GET /");
        assert_eq!(header(&bytes, V2), (len, client("192.0.2.7:56324")));
        let mut a = Vec::new();
        a.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        a.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        a.extend_from_slice(&8080u16.to_be_bytes());
        a.extend_from_slice(&443u16.to_be_bytes());
        assert_eq!(header(&v2(1, 0x21, &a), V2).1, client("[2001:db8::7]:8080"));
    }

    #[test]
    fn v2_skips_tlvs() {
        let mut a = vec![192, 0, 2, 7, 10, 0, 0, 1, 0, 80, 1, 187];
        // PP2_TYPE_ALPN "h2", PP2_TYPE_AUTHORITY "example.com", a NOOP.
        a.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']);
        a.extend_from_slice(&[0x02, 0x00, 0x0b]);
        a.extend_from_slice(b"example.com");
        a.extend_from_slice(&[0x04, 0x00, 0x00]);
        let bytes = v2(1, 0x11, &a);
        assert_eq!(header(&bytes, V2), (bytes.len(), client("192.0.2.7:80")));
    }

    #[test]
    fn v2_local_unspec_and_unix_keep_the_peer() {
        assert_eq!(header(&v2(0, 0x00, &[]), V2), (16, ProxySource::KeepPeer));
        // LOCAL with addresses: still the peer.
        assert_eq!(header(&v2(0, 0x11, &[1; 12]), V2).1, ProxySource::KeepPeer);
        assert_eq!(header(&v2(1, 0x00, &[]), V2).1, ProxySource::KeepPeer);
        assert_eq!(header(&v2(1, 0x31, &[0; 216]), V2).1, ProxySource::KeepPeer);
    }

    #[test]
    fn v2_waits_for_a_split_header() {
        let bytes = v2_ipv4([192, 0, 2, 7], 1);
        for cut in 1..bytes.len() {
            assert_eq!(parse(&bytes[..cut], V2), Ok(Parsed::Incomplete), "cut at {cut}");
        }
    }

    #[test]
    fn v2_refuses_malformed_headers() {
        let mut bad_version = v2_ipv4([1, 2, 3, 4], 1);
        bad_version[12] = 0x11;
        let mut bad_command = v2_ipv4([1, 2, 3, 4], 1);
        bad_command[12] = 0x22;
        for (bytes, why) in [
            (bad_version, "version"),
            (bad_command, "command"),
            (v2(1, 0x11, &[1; 11]), "IPv4"),
            (v2(1, 0x21, &[1; 35]), "IPv6"),
            (v2(1, 0x31, &[0; 215]), "UNIX"),
            (v2(1, 0x12, &[1; 12]), "datagram"),
            (v2(1, 0x41, &[1; 12]), "family"),
            (v2(1, 0x13, &[1; 12]), "family"),
        ] {
            match parse(&bytes, V2) {
                Err(ProxyError::Malformed(reason)) => assert!(reason.contains(why), "{reason} for {why}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    #[test]
    fn v2_refuses_a_bad_signature_and_an_oversized_length() {
        let mut bytes = v2_ipv4([1, 2, 3, 4], 1);
        bytes[5] = b'X';
        assert_eq!(parse(&bytes, V2), Err(ProxyError::Missing));
        assert_eq!(parse(b"GET / HTTP/1.1\r\n", V2), Err(ProxyError::Missing));
        assert_eq!(parse(b"\x16\x03\x01\x00", V2), Err(ProxyError::Missing));
        let mut long = v2(1, 0x11, &[0; 12]);
        long[14..16].copy_from_slice(&((V2_MAX_PAYLOAD + 1) as u16).to_be_bytes());
        assert_eq!(parse(&long[..16], V2), Err(ProxyError::TooLong));
        let most = v2(1, 0x11, &vec![0; V2_MAX_PAYLOAD]);
        assert_eq!(header(&most, V2).0, 16 + V2_MAX_PAYLOAD);
    }

    #[test]
    fn versions_parse_from_their_names() {
        assert_eq!(ProxyVersion::parse("v1"), Some(V1));
        assert_eq!(ProxyVersion::parse("2"), Some(V2));
        assert_eq!(ProxyVersion::parse("v3"), None);
    }

    #[tokio::test]
    async fn read_header_returns_the_bytes_after_it_even_across_reads() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for piece in [
                &b"PROXY TCP4 19"[..],
                b"2.0.2.7 10.0.0.1 5",
                b"6324 443\r\nGET / HTTP/1.1\r\n",
            ] {
                client.write_all(piece).await.unwrap();
                client.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            client
        });
        let (source, rest) = read_header(&mut server, V1).await.unwrap();
        assert_eq!(source, client_addr("192.0.2.7:56324"));
        let mut rest = rest.to_vec();
        while !rest.ends_with(b"\r\n") || rest.len() < 16 {
            let mut more = [0u8; 64];
            let n = server.read(&mut more).await.unwrap();
            rest.extend_from_slice(&more[..n]);
        }
        assert_eq!(&rest[..], b"GET / HTTP/1.1\r\n");
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn read_header_reports_a_close_before_the_end() {
        let (client, mut server) = tokio::io::duplex(64);
        {
            let mut client = client;
            use tokio::io::AsyncWriteExt;
            client.write_all(b"PROXY TCP4 1.2").await.unwrap();
        }
        assert_eq!(read_header(&mut server, V1).await.unwrap_err(), ProxyError::Closed);
    }

    fn client_addr(text: &str) -> ProxySource {
        client(text)
    }
}
