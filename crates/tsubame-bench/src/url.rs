//! The URL to load: `http://HOST[:PORT][/PATH][?QUERY]` or
//! `unix:///SOCKET/PATH[/REQUEST/PATH][?QUERY]`.
//!
//! A unix URL names a socket file and a request path in one string. The
//! socket is the longest prefix of the path that is an existing file (not
//! a directory), so `unix:///tmp/app.sock/users?page=2` connects to
//! `/tmp/app.sock` and requests `/users?page=2`. When no prefix exists yet,
//! the socket ends at the first component ending in `.sock`, or else is the
//! whole path.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Host name or address (IPv6 without brackets) and port; resolved once
    /// before the run.
    Tcp {
        host: String,
        port: u16,
    },
    Unix {
        path: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub endpoint: Endpoint,
    /// The `Host` header value.
    pub authority: String,
    /// The request target: path and query, always starting with `/`.
    pub target: String,
    /// The URL as given, for the report.
    pub text: String,
}

/// Where a run connects, once resolved.
#[derive(Debug, Clone)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, Error> {
        Self::parse_with(text, &|p: &Path| p.exists() && !p.is_dir())
    }

    /// `is_socket` tells whether a path names the socket file; injected so
    /// the unix rule is testable without files.
    pub fn parse_with(text: &str, is_socket: &dyn Fn(&Path) -> bool) -> Result<Url, Error> {
        let invalid = |why: &str| {
            Error::usage(format!(
                "invalid URL \"{text}\": {why} (expected http://HOST[:PORT]/PATH or unix:///SOCKET/PATH)"
            ))
        };
        if let Some(rest) = text.strip_prefix("http://") {
            return parse_http(text, rest).map_err(|why| invalid(&why));
        }
        if let Some(rest) = text.strip_prefix("unix://") {
            return parse_unix(text, rest, is_socket).map_err(|why| invalid(&why));
        }
        if text.starts_with("https://") {
            return Err(Error::usage(format!("invalid URL \"{text}\": https is not supported")));
        }
        Err(invalid("unknown scheme"))
    }
}

fn parse_http(text: &str, rest: &str) -> Result<Url, String> {
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    if authority.is_empty() {
        return Err("no host".into());
    }
    if authority.contains('@') {
        return Err("user info is not supported".into());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let close = v6.find(']').ok_or("unclosed [ in host")?;
        let host = &v6[..close];
        let after = &v6[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(p)?,
            None if after.is_empty() => 80,
            None => return Err("junk after ]".into()),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), parse_port(port)?),
            None => (authority.to_string(), 80),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("bad character in host".into());
    }
    Ok(Url {
        endpoint: Endpoint::Tcp { host, port },
        authority: authority.to_string(),
        target: normalize_target(target)?,
        text: text.to_string(),
    })
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("bad port \"{text}\"")),
    }
}

fn parse_unix(text: &str, rest: &str, is_socket: &dyn Fn(&Path) -> bool) -> Result<Url, String> {
    if !rest.starts_with('/') {
        return Err("the socket path must be absolute (unix:///path/to.sock)".into());
    }
    let (path, query) = match rest.find('?') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    // Candidate ends: every '/' after the first character, and the end.
    let ends: Vec<usize> = path
        .char_indices()
        .skip(1)
        .filter(|&(_, c)| c == '/')
        .map(|(i, _)| i)
        .chain(std::iter::once(path.len()))
        .collect();
    let existing = ends
        .iter()
        .rev()
        .copied()
        .find(|&end| is_socket(Path::new(&path[..end])));
    let by_name = || {
        ends.iter()
            .copied()
            .find(|&end| path[..end].ends_with(".sock"))
            .unwrap_or(path.len())
    };
    let end = existing.unwrap_or_else(by_name);
    let socket = &path[..end];
    if socket.len() <= 1 {
        return Err("no socket path".into());
    }
    let target = format!("{}{}", &path[end..], query);
    Ok(Url {
        endpoint: Endpoint::Unix {
            path: PathBuf::from(socket),
        },
        authority: "localhost".to_string(),
        target: normalize_target(&target)?,
        text: text.to_string(),
    })
}

fn normalize_target(target: &str) -> Result<String, String> {
    if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("spaces or control characters in the path (percent-encode them)".into());
    }
    Ok(match target.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{target}"),
        Some(_) => target.to_string(),
    })
}

/// Checks a request path from a targets file the way a URL path is checked.
pub fn check_target(target: &str) -> Result<(), String> {
    if !target.starts_with('/') && target != "*" {
        return Err(format!("the path must start with / (got \"{target}\")"));
    }
    normalize_target(target).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Url, Error> {
        Url::parse_with(text, &|_| false)
    }

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn http_urls() {
        let url = parse("http://127.0.0.1:9292/a/b?c=d").unwrap();
        assert_eq!(url.endpoint, tcp("127.0.0.1", 9292));
        assert_eq!(url.authority, "127.0.0.1:9292");
        assert_eq!(url.target, "/a/b?c=d");

        let url = parse("http://localhost").unwrap();
        assert_eq!(url.endpoint, tcp("localhost", 80));
        assert_eq!(url.target, "/");

        let url = parse("http://example.test?x=1").unwrap();
        assert_eq!(url.target, "/?x=1");

        let url = parse("http://[::1]:8080/").unwrap();
        assert_eq!(url.endpoint, tcp("::1", 8080));
        assert_eq!(url.authority, "[::1]:8080");
    }

    #[test]
    fn bad_http_urls() {
        for bad in [
            "http://",
            "http://:80/",
            "http://host:0/",
            "http://host:99999/",
            "http://host:x/",
            "http://[::1/",
            "http://u@host/",
            "http://host/a b",
            "ftp://host/",
            "host:80",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("invalid URL \"{bad}\"")), "{bad}: {err}");
        }
        assert_eq!(
            parse("https://x/").unwrap_err().to_string(),
            "invalid URL \"https://x/\": https is not supported"
        );
    }

    #[test]
    fn unix_socket_is_the_longest_existing_prefix() {
        let exists = |p: &Path| p == Path::new("/tmp/dir.v2/app");
        let url = Url::parse_with("unix:///tmp/dir.v2/app/users/1?x=y", &exists).unwrap();
        assert_eq!(
            url.endpoint,
            Endpoint::Unix {
                path: "/tmp/dir.v2/app".into()
            }
        );
        assert_eq!(url.target, "/users/1?x=y");
        assert_eq!(url.authority, "localhost");
    }

    #[test]
    fn unix_socket_by_name_when_missing() {
        let url = parse("unix:///run/s.sock/health").unwrap();
        assert_eq!(
            url.endpoint,
            Endpoint::Unix {
                path: "/run/s.sock".into()
            }
        );
        assert_eq!(url.target, "/health");

        let url = parse("unix:///run/socket?q").unwrap();
        assert_eq!(
            url.endpoint,
            Endpoint::Unix {
                path: "/run/socket".into()
            }
        );
        assert_eq!(url.target, "/?q");
    }

    #[test]
    fn unix_socket_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("app");
        std::fs::write(&sock, "").unwrap();
        let url = Url::parse(&format!("unix://{}/x", sock.display())).unwrap();
        assert_eq!(url.endpoint, Endpoint::Unix { path: sock });
        assert_eq!(url.target, "/x");
    }

    #[test]
    fn bad_unix_urls() {
        assert!(parse("unix://relative.sock").is_err());
        assert!(parse("unix:///").is_err());
    }

    #[test]
    fn targets_file_paths() {
        assert!(check_target("/a?b").is_ok());
        assert!(check_target("*").is_ok());
        assert!(check_target("a").is_err());
        assert!(check_target("/a\tb").is_err());
    }
}
