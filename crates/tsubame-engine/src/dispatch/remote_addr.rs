//! What `REMOTE_ADDR` says (Puma's `set_remote_address`): the connection's
//! peer (the default; on a PROXY-protocol bind, the client the header
//! named), a fixed value, or the client a forwarding header names when the
//! peer is a trusted proxy.
//!
//! The header walk, for `X-Forwarded-For` and the like (every field of
//! that name, in order, split at commas; empty elements skipped):
//! - the peer is not a trusted proxy: the header is ignored, the peer it is;
//! - otherwise, from the right (the entry the nearest proxy added), skip
//!   entries that are trusted proxies; the first one that is not is the
//!   client;
//! - every entry trusted: the leftmost;
//! - an entry that is not an address (garbage, a name, `unknown`) ends
//!   the walk: the last trusted hop passed (or the peer) is the answer,
//!   since nothing to its left can be told from a client's own claim.
//!
//! An entry may be an IPv4 or IPv6 address, `[v6]`, `[v6]:port` or
//! `v4:port`; the answer is the bare address. IPv4-mapped IPv6
//! (`::ffff:a.b.c.d`) is matched as the IPv4 address.
//!
//! This runs when the env is built, and only in header mode: with the
//! default (`Socket`) it costs one comparison.

use crate::message::head::RequestHead;
use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

/// An address range: `10.0.0.0/8`, `fc00::/7`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError(pub String);

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an address or CIDR range (such as 10.0.0.0/8 or ::1)",
            self.0
        )
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let error = || CidrError(text.to_string());
        let (address, prefix) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let ip = canonical(address.parse::<IpAddr>().map_err(|_| error())?);
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 3 => {
                p.parse::<u8>().ok().filter(|n| *n <= bits).ok_or_else(error)?
            }
            Some(_) => return Err(error()),
        };
        Ok(Cidr {
            network: mask(ip, prefix),
            prefix,
        })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix) == self.network
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Loopback and the private ranges (Rails' default trusted proxies).
pub const DEFAULT_TRUSTED: &[&str] = &[
    "127.0.0.0/8",
    "::1",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
];

pub fn default_trusted() -> Vec<Cidr> {
    DEFAULT_TRUSTED.iter().filter_map(|c| Cidr::parse(c).ok()).collect()
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let keep = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((bits & keep).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let keep = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((bits & keep).into())
        }
    }
}

/// How `REMOTE_ADDR` is decided, for every request of a listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RemoteAddress {
    /// The connection's peer.
    #[default]
    Socket,
    /// This value, whatever the connection (`set_remote_address "1.2.3.4"`).
    Fixed(String),
    /// The walk above over the header `name` (lowercase).
    Header { name: String, trusted: Vec<Cidr> },
}

impl RemoteAddress {
    /// `REMOTE_ADDR` for a request from `peer` (the connection's peer as
    /// text: an IP address, or 127.0.0.1 for a UNIX socket).
    pub fn resolve<'a>(&'a self, head: &RequestHead, peer: &'a str) -> Cow<'a, str> {
        match self {
            RemoteAddress::Socket => Cow::Borrowed(peer),
            RemoteAddress::Fixed(value) => Cow::Borrowed(value),
            RemoteAddress::Header { name, trusted } => walk(head, name, trusted, peer),
        }
    }
}

fn is_trusted(trusted: &[Cidr], ip: IpAddr) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

fn walk<'a>(head: &RequestHead, name: &str, trusted: &[Cidr], peer: &'a str) -> Cow<'a, str> {
    match peer.parse::<IpAddr>() {
        Ok(ip) if is_trusted(trusted, ip) => {}
        _ => return Cow::Borrowed(peer),
    }
    let mut answer = Cow::Borrowed(peer);
    // Fields from the last to the first, and each one's entries from the
    // right: together, the combined list from the right.
    for (_, value) in head
        .headers
        .iter()
        .rev()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
    {
        for entry in value.rsplit(|&b| b == b',') {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                continue;
            }
            let Some(ip) = entry_address(entry) else {
                return answer;
            };
            answer = Cow::Owned(canonical(ip).to_string());
            if !is_trusted(trusted, ip) {
                return answer;
            }
        }
    }
    answer
}

/// `a.b.c.d`, `a.b.c.d:port`, a bare IPv6 address, `[v6]`, `[v6]:port`.
fn entry_address(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (host, port) = text.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::head::{Framing, Version};
    use bytes::Bytes;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: Bytes::from_static(b"GET"),
            target: Bytes::from_static(b"/"),
            path: Bytes::from_static(b"/"),
            query: Bytes::new(),
            version: Version::Http11,
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        Bytes::copy_from_slice(n.as_bytes()),
                        Bytes::copy_from_slice(v.as_bytes()),
                    )
                })
                .collect(),
            host: None,
            framing: Framing::None,
            keep_alive: true,
            expect_continue: false,
            protocol: None,
        }
    }

    fn xff(trusted: &[&str]) -> RemoteAddress {
        RemoteAddress::Header {
            name: "x-forwarded-for".into(),
            trusted: trusted.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
        }
    }

    fn resolve(rule: &RemoteAddress, headers: &[(&str, &str)], peer: &str) -> String {
        rule.resolve(&head(headers), peer).into_owned()
    }

    #[test]
    fn cidrs_parse_and_match() {
        let ten = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(ten.contains("10.255.0.1".parse().unwrap()));
        assert!(!ten.contains("11.0.0.1".parse().unwrap()));
        assert!(ten.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!ten.contains("::1".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let ula = Cidr::parse("fc00::/7").unwrap();
        assert!(ula.contains("fd12::1".parse().unwrap()));
        assert!(!ula.contains("fe80::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains("8.8.8.8".parse().unwrap()));
        assert_eq!(Cidr::parse("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/x",
            "example.com",
            "10.0.0.0/-1",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(default_trusted().len(), DEFAULT_TRUSTED.len());
    }

    #[test]
    fn socket_and_fixed() {
        let h = head(&[("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(RemoteAddress::Socket.resolve(&h, "10.0.0.1"), "10.0.0.1");
        assert_eq!(
            RemoteAddress::Fixed("9.9.9.9".into()).resolve(&h, "10.0.0.1"),
            "9.9.9.9"
        );
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer() {
        let rule = xff(&["10.0.0.0/8"]);
        assert_eq!(resolve(&rule, &[("X-Forwarded-For", "1.2.3.4")], "10.0.0.1"), "1.2.3.4");
        assert_eq!(
            resolve(&rule, &[("X-Forwarded-For", "1.2.3.4")], "203.0.113.9"),
            "203.0.113.9"
        );
        assert_eq!(resolve(&rule, &[], "10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn walks_from_the_right_past_trusted_hops() {
        let rule = xff(&["10.0.0.0/8", "127.0.0.1"]);
        // The client forged 6.6.6.6; the proxy appended the real 1.2.3.4.
        let h = [("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.2")];
        assert_eq!(resolve(&rule, &h, "127.0.0.1"), "1.2.3.4");
        // Every hop trusted: the leftmost.
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "10.0.0.3, 10.0.0.2")], "127.0.0.1"),
            "10.0.0.3"
        );
    }

    #[test]
    fn several_fields_are_one_list_in_order() {
        let rule = xff(&["10.0.0.0/8"]);
        let h = [("x-forwarded-for", "6.6.6.6"), ("X-Forwarded-For", "1.2.3.4, 10.0.0.5")];
        assert_eq!(resolve(&rule, &h, "10.0.0.1"), "1.2.3.4");
        let h = [("x-forwarded-for", "1.2.3.4"), ("x-forwarded-for", "10.0.0.5")];
        assert_eq!(resolve(&rule, &h, "10.0.0.1"), "1.2.3.4");
    }

    #[test]
    fn garbage_ends_the_walk_at_the_last_trusted_hop() {
        let rule = xff(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4, evil")], "10.0.0.1"),
            "10.0.0.1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4, nonsense, 10.0.0.7")], "10.0.0.1"),
            "10.0.0.7"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "unknown")], "10.0.0.1"),
            "10.0.0.1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4:80:90")], "10.0.0.1"),
            "10.0.0.1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4\u{0}")], "10.0.0.1"),
            "10.0.0.1"
        );
        // Empty elements are allowed in a list and skipped.
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4,, ,")], "10.0.0.1"),
            "1.2.3.4"
        );
    }

    #[test]
    fn entries_with_ports_brackets_and_mapped_addresses() {
        let rule = xff(&["10.0.0.0/8"]);
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4:5678")], "10.0.0.1"),
            "1.2.3.4"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "[2001:db8::1]:443")], "10.0.0.1"),
            "2001:db8::1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "2001:db8::1")], "10.0.0.1"),
            "2001:db8::1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "[2001:db8::1]")], "10.0.0.1"),
            "2001:db8::1"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4, ::ffff:10.0.0.9")], "10.0.0.1"),
            "1.2.3.4"
        );
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "::ffff:1.2.3.4")], "10.0.0.1"),
            "1.2.3.4"
        );
        // A peer given as a mapped address is matched as IPv4.
        assert_eq!(
            resolve(&rule, &[("x-forwarded-for", "1.2.3.4")], "::ffff:10.0.0.1"),
            "1.2.3.4"
        );
    }

    #[test]
    fn other_header_names_and_spellings() {
        let rule = RemoteAddress::Header {
            name: "x-real-ip".into(),
            trusted: default_trusted(),
        };
        assert_eq!(
            resolve(&rule, &[("X-Real-IP", "198.51.100.4")], "127.0.0.1"),
            "198.51.100.4"
        );
        // The underscore spelling is another header (nginx drops it anyway).
        assert_eq!(
            resolve(&rule, &[("X_Real_IP", "198.51.100.4")], "127.0.0.1"),
            "127.0.0.1"
        );
    }
}
