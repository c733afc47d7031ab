//! Turning `tcp://`, `ssl://` and `unix://` bind URIs into listening
//! sockets, and `fd://N` into a listener adopted from an inherited
//! descriptor.
//!
//! TLS travels with the bind: `ssl://HOST:PORT?cert=PATH&key=PATH` (Puma's
//! form), or `ssl=true&cert=...` on a `unix://` or `fd://` bind. The files
//! are read when the bind is made, so a bad one fails the boot.
//!
//! `proxy_protocol=v1` (or `v2`) on any bind: every connection must begin
//! with a PROXY header of that version (`proxy_protocol.rs`).
//!
//! A `unix://` bind takes Puma's `umask=` and `mode=`: the socket file's
//! permissions are set before the socket listens, so no client connects
//! while they are looser than asked.
//!
//! `fd://N` is how cluster workers and a re-executed master (hot restart)
//! serve sockets another process bound: the engine listens on a duplicate
//! of N and never closes N itself, so whoever owns N decides when the
//! socket really closes. An adopted unix listener carries no path, so the
//! engine that adopted it never removes the socket file either: the file
//! belongs to the process that bound it.

use crate::error::BindError;
use crate::net::proxy_protocol::ProxyVersion;
use crate::net::tls::{TlsListener, TlsSettings};
use crate::net::tls_query::TlsQuery;
use socket2::{Domain, Socket, Type};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::RawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindTarget {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
    Fd(RawFd),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindSpec {
    pub uri: String,
    pub target: BindTarget,
    pub backlog: Option<u32>,
    /// See `net/accept.rs`: set on the binds of cluster workers.
    pub busy_accept_delay: Option<Duration>,
    pub tls: Option<TlsSettings>,
    /// Cleartext HTTP/2 with prior knowledge (`h2c=true`).
    pub h2c: bool,
    /// A PROXY header first on every connection (`proxy_protocol=v1|v2`).
    pub proxy: Option<ProxyVersion>,
    /// The socket file's permissions (`mode=`, or `umask=` as 0777 less
    /// the mask); `None` leaves what the process umask gave.
    pub unix_mode: Option<u32>,
}

/// A bound, listening socket plus what the Rack env needs to know about it.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

#[derive(Debug)]
pub struct Bound {
    pub listener: Listener,
    /// The address actually bound (port 0 resolved), as a URI.
    pub address: String,
    pub server_name: String,
    pub server_port: u16,
    pub busy_accept_delay: Option<Duration>,
    pub tls: Option<Arc<TlsListener>>,
    pub h2c: bool,
    pub proxy: Option<ProxyVersion>,
}

impl BindSpec {
    pub fn parse(uri: &str) -> Result<BindSpec, BindError> {
        let invalid = |reason: &str| BindError::Invalid {
            uri: uri.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| invalid("expected tcp://HOST:PORT or unix://PATH"))?;
        let (location, query) = match rest.split_once('?') {
            Some((l, q)) => (l, Some(q)),
            None => (rest, None),
        };
        let mut backlog = None;
        let mut busy_accept_delay = None;
        let mut ssl = scheme == "ssl";
        let mut tls_query = TlsQuery::default();
        let mut h2c = false;
        let mut proxy = None;
        let (mut umask, mut mode) = (None, None);
        let flag = |value: &str, key: &str| match value {
            "true" | "1" | "" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(invalid(&format!("{key} must be true or false"))),
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = name;
            match name {
                "backlog" => {
                    backlog = Some(
                        value
                            .parse::<u32>()
                            .map_err(|_| invalid("backlog must be a whole number"))?,
                    )
                }
                "busy_accept_delay" => {
                    let seconds = value
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| invalid("busy_accept_delay must be a number of seconds"))?;
                    busy_accept_delay = Some(Duration::from_secs_f64(seconds)).filter(|d| !d.is_zero());
                }
                // Puma accepts these on tcp binds; they change nothing here.
                "low_latency" | "reuse_port" => {}
                "ssl" => ssl = flag(value, key)?,
                "h2c" => h2c = flag(value, key)?,
                "proxy_protocol" => {
                    proxy = match value {
                        "off" | "false" => None,
                        v => Some(
                            ProxyVersion::parse(v).ok_or_else(|| invalid("proxy_protocol must be v1, v2 or off"))?,
                        ),
                    }
                }
                // Puma reads umask with Ruby's Integer(): octal with a
                // leading 0, decimal without; mode always as octal.
                "umask" => {
                    umask = Some(puma_integer(value).ok_or_else(|| invalid("umask must be a number such as 0111"))?)
                }
                "mode" => {
                    mode = Some(
                        u32::from_str_radix(value, 8)
                            .ok()
                            .filter(|m| *m <= 0o7777)
                            .ok_or_else(|| invalid("mode must be an octal number such as 0666"))?,
                    )
                }
                // TLS 1.0 and 1.1 are never offered (rustls speaks 1.2 and 1.3).
                "no_tlsv1" | "no_tlsv1_1" => {}
                "keystore" | "keystore-pass" | "keystore-type" | "truststore" | "truststore-pass"
                | "truststore-type" | "cipher_suites" | "ssl_cipher_list" | "protocols" => {
                    return Err(invalid(&format!(
                        "'{key}' is JRuby Puma's (a Java keystore); give PEM files with cert=PATH&key=PATH"
                    )))
                }
                _ if tls_query.accept(name, value, percent_decode).map_err(|e| invalid(&e))? => {}
                _ => return Err(invalid(&format!("unknown bind parameter '{key}'"))),
            }
        }
        let target = match scheme {
            "tcp" | "http" => {
                let (host, port) = split_host_port(location).ok_or_else(|| invalid("expected HOST:PORT"))?;
                BindTarget::Tcp { host, port }
            }
            "unix" => {
                if location.is_empty() {
                    return Err(invalid("unix bind needs a path"));
                }
                BindTarget::Unix(PathBuf::from(location))
            }
            "fd" => match location.parse::<RawFd>() {
                Ok(fd) if fd >= 0 => BindTarget::Fd(fd),
                _ => return Err(invalid("expected fd://N with N a file descriptor number")),
            },
            "ssl" => {
                let (host, port) = split_host_port(location).ok_or_else(|| invalid("expected HOST:PORT"))?;
                BindTarget::Tcp { host, port }
            }
            other => return Err(invalid(&format!("unsupported scheme '{other}'"))),
        };
        if (umask.is_some() || mode.is_some()) && scheme != "unix" {
            return Err(invalid("umask and mode are for unix:// binds"));
        }
        let unix_mode = mode.or(umask.map(|mask| 0o777 & !mask));
        let tls = if ssl {
            let settings = tls_query.settings().map_err(|e| invalid(&e))?;
            if h2c {
                return Err(invalid(
                    "h2c is cleartext HTTP/2; a TLS bind negotiates h2 by ALPN instead",
                ));
            }
            Some(settings)
        } else if tls_query.any() {
            return Err(invalid("cert, key and ca are for ssl:// binds (or ssl=true)"));
        } else {
            None
        };
        Ok(BindSpec {
            uri: uri.to_string(),
            target,
            backlog,
            busy_accept_delay,
            tls,
            h2c,
            proxy,
            unix_mode,
        })
    }

    /// Binds and listens. A host that resolves to several addresses (such as
    /// `localhost`) is bound on each, as Puma does.
    pub fn bind(&self, default_backlog: u32) -> Result<Vec<Bound>, BindError> {
        let backlog = self.backlog.unwrap_or(default_backlog) as i32;
        let io_err = |source| BindError::Io {
            uri: self.uri.clone(),
            source,
        };
        let tls = match &self.tls {
            Some(settings) => {
                let listener = TlsListener::new(settings.clone()).map_err(|e| BindError::Invalid {
                    uri: self.uri.clone(),
                    reason: e.0,
                })?;
                // Said once, by the process that binds; the engines that
                // adopt the socket (fd://, cluster workers) stay quiet.
                if let (Some(warning), false) = (listener.warning(), matches!(self.target, BindTarget::Fd(_))) {
                    crate::log::warn(&format!("{}: {warning}", crate::error::redacted(&self.uri)));
                }
                Some(Arc::new(listener))
            }
            None => None,
        };
        let (h2c, delay, proxy) = (self.h2c, self.busy_accept_delay, self.proxy);
        let mut bound = match &self.target {
            BindTarget::Tcp { host, port } => {
                let addrs: Vec<SocketAddr> = (host.as_str(), *port).to_socket_addrs().map_err(io_err)?.collect();
                if addrs.is_empty() {
                    return Err(BindError::Invalid {
                        uri: self.uri.clone(),
                        reason: "host resolves to no address".into(),
                    });
                }
                let mut bound = Vec::with_capacity(addrs.len());
                for addr in addrs {
                    let listener = bind_tcp(addr, backlog).map_err(io_err)?;
                    let local = listener.local_addr().map_err(io_err)?;
                    bound.push(Bound {
                        address: format!("tcp://{}", format_addr(&local)),
                        server_name: host.trim_start_matches('[').trim_end_matches(']').to_string(),
                        server_port: local.port(),
                        busy_accept_delay: delay,
                        listener: Listener::Tcp(listener),
                        tls: None,
                        h2c,
                        proxy,
                    });
                }
                bound
            }
            BindTarget::Unix(path) => {
                remove_stale_socket(path).map_err(io_err)?;
                let listener = bind_unix(path, backlog, self.unix_mode).map_err(io_err)?;
                vec![Bound {
                    address: format!("unix://{}", path.display()),
                    server_name: "localhost".into(),
                    server_port: 0,
                    busy_accept_delay: delay,
                    listener: Listener::Unix(listener, path.clone()),
                    tls: None,
                    h2c,
                    proxy,
                }]
            }
            BindTarget::Fd(fd) => vec![adopt(*fd, delay, h2c, proxy).map_err(io_err)?],
        };
        for b in &mut bound {
            if tls.is_some() {
                if let Some(rest) = b.address.strip_prefix("tcp://") {
                    b.address = format!("ssl://{rest}");
                }
            }
            b.tls = tls.clone();
        }
        Ok(bound)
    }
}

/// Listens on a duplicate of the inherited descriptor `fd`, which must be a
/// listening stream socket (TCP or UNIX).
fn adopt(
    fd: RawFd,
    busy_accept_delay: Option<Duration>,
    h2c: bool,
    proxy: Option<ProxyVersion>,
) -> std::io::Result<Bound> {
    let owned = crate::sys::duplicate(fd)?;
    let socket = Socket::from(owned);
    let not_a_listener = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a listening stream socket");
    if socket.r#type()? != Type::STREAM || !socket.is_listener()? {
        return Err(not_a_listener());
    }
    socket.set_nonblocking(true)?;
    let local = socket.local_addr()?;
    if let Some(addr) = local.as_socket() {
        let listener: TcpListener = socket.into();
        return Ok(Bound {
            address: format!("tcp://{}", format_addr(&addr)),
            server_name: addr.ip().to_string(),
            server_port: addr.port(),
            busy_accept_delay,
            listener: Listener::Tcp(listener),
            tls: None,
            h2c,
            proxy,
        });
    }
    let path = local.as_pathname().map(PathBuf::from).ok_or_else(not_a_listener)?;
    Ok(Bound {
        address: format!("unix://{}", path.display()),
        server_name: "localhost".into(),
        server_port: 0,
        busy_accept_delay,
        listener: Listener::Unix(socket.into(), PathBuf::new()),
        tls: None,
        h2c,
        proxy,
    })
}

/// A number as Ruby's `Integer()` reads it (Puma's `umask=`): `0o`/`0`
/// prefix octal, `0x` hexadecimal, `0b` binary, otherwise decimal.
fn puma_integer(text: &str) -> Option<u32> {
    let (digits, radix) = if let Some(rest) = text.strip_prefix("0o").or_else(|| text.strip_prefix("0O")) {
        (rest, 8)
    } else if let Some(rest) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        (rest, 16)
    } else if let Some(rest) = text.strip_prefix("0b").or_else(|| text.strip_prefix("0B")) {
        (rest, 2)
    } else if text.len() > 1 && text.starts_with('0') {
        (&text[1..], 8)
    } else {
        (text, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok().filter(|n| *n <= 0o7777)
}

/// Paths in a bind's query may be percent-encoded (`%20`, `%26`, ...).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn split_host_port(location: &str) -> Option<(String, u16)> {
    if let Some(rest) = location.strip_prefix('[') {
        let (host, port) = rest.split_once("]:")?;
        return Some((host.to_string(), port.parse().ok()?));
    }
    let (host, port) = location.rsplit_once(':')?;
    if host.is_empty() || host.contains(':') {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

fn format_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

fn bind_tcp(addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // Lets `[::]` and `0.0.0.0` be bound side by side on the same port.
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn bind_unix(path: &PathBuf, backlog: i32, mode: Option<u32>) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    // Before listen: until then a connect is refused, whatever the mode.
    if let Some(mode) = mode {
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    }
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A socket file left by a crashed server would make bind fail with
/// EADDRINUSE; a regular file at that path is the operator's and is kept.
fn remove_stale_socket(path: &PathBuf) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another server is listening on this socket",
                ));
            }
            std::fs::remove_file(path)
        }
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "path exists and is not a socket",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tls::VerifyMode;
    use crate::net::tls_certs::PemSource;

    #[test]
    fn parses_tcp_ipv4_ipv6_and_unix() {
        let spec = BindSpec::parse("tcp://127.0.0.1:9292").unwrap();
        assert_eq!(
            spec.target,
            BindTarget::Tcp {
                host: "127.0.0.1".into(),
                port: 9292
            }
        );
        let spec = BindSpec::parse("tcp://[::1]:80?backlog=64").unwrap();
        assert_eq!(
            spec.target,
            BindTarget::Tcp {
                host: "::1".into(),
                port: 80
            }
        );
        assert_eq!(spec.backlog, Some(64));
        let spec = BindSpec::parse("unix:///tmp/t.sock").unwrap();
        assert_eq!(spec.target, BindTarget::Unix("/tmp/t.sock".into()));
        let spec = BindSpec::parse("fd://7?busy_accept_delay=0.005").unwrap();
        assert_eq!(spec.target, BindTarget::Fd(7));
        assert_eq!(spec.busy_accept_delay, Some(Duration::from_millis(5)));
    }

    #[test]
    fn rejects_bad_uris_with_the_uri_in_the_message() {
        for uri in [
            "localhost:80",
            "tcp://host",
            "tcp://h:notaport",
            "ftp://x:1",
            "tcp://h:1?bogus=1",
            "unix://",
            "fd://",
            "fd://-1",
            "fd://x",
            "fd://3?busy_accept_delay=soon",
        ] {
            let err = BindSpec::parse(uri).unwrap_err().to_string();
            assert!(err.starts_with(uri), "{err}");
        }
    }

    #[test]
    fn parses_tls_settings_from_the_query() {
        let spec = BindSpec::parse("ssl://127.0.0.1:9443?cert=/a%20b.pem&key=/k.pem&ca=/ca.pem&verify_mode=force_peer")
            .unwrap();
        let tls = spec.tls.unwrap();
        assert_eq!(tls.certs[0].cert, PemSource::File(PathBuf::from("/a b.pem")));
        assert_eq!(tls.certs[0].key, PemSource::File(PathBuf::from("/k.pem")));
        assert_eq!(tls.ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.verify_mode, VerifyMode::ForcePeer);
        let spec = BindSpec::parse("fd://5?ssl=true&cert=/c&key=/k&busy_accept_delay=0.01").unwrap();
        assert!(spec.tls.is_some());
        assert!(BindSpec::parse("unix:///s.sock?ssl=true&cert=/c&key=/k")
            .unwrap()
            .tls
            .is_some());
        assert!(BindSpec::parse("tcp://127.0.0.1:1?h2c=true").unwrap().h2c);
        for (uri, reason) in [
            ("ssl://127.0.0.1:1", "needs cert=PATH and key=PATH"),
            ("ssl://127.0.0.1:1?cert=/c", "needs cert=PATH and key=PATH"),
            (
                "ssl://127.0.0.1:1?cert=/c&key=/k&verify_mode=sometimes",
                "verify_mode must be",
            ),
            ("ssl://127.0.0.1:1?cert_pem=x", "needs cert=PATH and key=PATH"),
            ("ssl://127.0.0.1:1?keystore=x", "JRuby"),
            ("ssl://127.0.0.1:1?cert=/c&key=/k&h2c=true", "h2c is cleartext"),
            ("tcp://127.0.0.1:1?cert=/c", "cert, key and ca are for ssl://"),
        ] {
            let err = BindSpec::parse(uri).unwrap_err().to_string();
            assert!(
                err.starts_with(&crate::error::redacted(uri)) && err.contains(reason),
                "{err}"
            );
        }
    }

    #[test]
    fn a_tls_bind_reports_an_ssl_address_and_names_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = crate::net::tls::self_signed().unwrap();
        let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        let uri = format!(
            "ssl://127.0.0.1:0?cert={}&key={}",
            cert_path.display(),
            key_path.display()
        );
        let bound = BindSpec::parse(&uri).unwrap().bind(16).unwrap();
        assert!(bound[0].address.starts_with("ssl://127.0.0.1:"));
        assert!(bound[0].tls.is_some());
        let missing = dir.path().join("missing.pem");
        let uri = format!(
            "ssl://127.0.0.1:0?cert={}&key={}",
            missing.display(),
            key_path.display()
        );
        let err = BindSpec::parse(&uri).unwrap().bind(16).unwrap_err().to_string();
        assert!(
            err.contains(&format!("cannot read certificate {}", missing.display())),
            "{err}"
        );
    }

    #[test]
    fn parses_proxy_protocol_and_unix_permissions() {
        let spec = BindSpec::parse("tcp://127.0.0.1:1?proxy_protocol=v1").unwrap();
        assert_eq!(spec.proxy, Some(ProxyVersion::V1));
        let spec = BindSpec::parse("fd://4?ssl=true&cert=/c&key=/k&proxy_protocol=v2").unwrap();
        assert_eq!(spec.proxy, Some(ProxyVersion::V2));
        assert_eq!(BindSpec::parse("tcp://h:1?proxy_protocol=off").unwrap().proxy, None);
        assert_eq!(BindSpec::parse("unix:///s?umask=0111").unwrap().unix_mode, Some(0o666));
        assert_eq!(BindSpec::parse("unix:///s?umask=0o027").unwrap().unix_mode, Some(0o750));
        // Puma's Integer(): no leading zero is decimal (63 = 0o77).
        assert_eq!(BindSpec::parse("unix:///s?umask=63").unwrap().unix_mode, Some(0o700));
        assert_eq!(BindSpec::parse("unix:///s?mode=0660").unwrap().unix_mode, Some(0o660));
        assert_eq!(BindSpec::parse("unix:///s?mode=666").unwrap().unix_mode, Some(0o666));
        assert_eq!(
            BindSpec::parse("unix:///s?umask=0077&mode=0666").unwrap().unix_mode,
            Some(0o666)
        );
        for (uri, reason) in [
            ("tcp://h:1?proxy_protocol=v3", "proxy_protocol must be"),
            ("tcp://h:1?proxy_protocol", "proxy_protocol must be"),
            ("unix:///s?umask=abc", "umask must be"),
            ("unix:///s?umask=099", "umask must be"),
            ("unix:///s?mode=0688", "mode must be"),
            ("unix:///s?mode=", "mode must be"),
            ("tcp://h:1?mode=0666", "for unix:// binds"),
        ] {
            let err = BindSpec::parse(uri).unwrap_err().to_string();
            assert!(err.contains(reason), "{uri}: {err}");
        }
    }

    #[test]
    fn a_unix_bind_gets_the_mode_asked_for() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for (query, expected) in [("mode=0600", 0o600), ("umask=0111", 0o666), ("mode=0666", 0o666)] {
            let path = dir.path().join(format!("{expected:o}.sock"));
            let uri = format!("unix://{}?{query}", path.display());
            let _bound = BindSpec::parse(&uri).unwrap().bind(16).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, expected, "{query}");
        }
    }

    #[test]
    fn binds_port_zero_and_reports_the_real_port() {
        let bound = BindSpec::parse("tcp://127.0.0.1:0").unwrap().bind(16).unwrap();
        assert_eq!(bound.len(), 1);
        assert_ne!(bound[0].server_port, 0);
        assert!(bound[0].address.starts_with("tcp://127.0.0.1:"));
    }

    #[test]
    fn unix_bind_replaces_stale_socket_but_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        drop(UnixListener::bind(&path).unwrap());
        let uri = format!("unix://{}", path.display());
        assert!(BindSpec::parse(&uri).unwrap().bind(16).is_ok());
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let err = BindSpec::parse(&format!("unix://{}", file.display())).unwrap().bind(16);
        assert!(err.is_err());
    }

    #[test]
    fn adopts_a_duplicate_of_an_inherited_listener_and_leaves_the_original_open() {
        use std::os::fd::AsRawFd;
        let original = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = original.local_addr().unwrap().port();
        let uri = format!("fd://{}", original.as_raw_fd());
        let bound = BindSpec::parse(&uri).unwrap().bind(16).unwrap();
        assert_eq!(bound[0].address, format!("tcp://127.0.0.1:{port}"));
        assert_eq!(bound[0].server_port, port);
        drop(bound);
        // The duplicate is gone; the original still accepts.
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(original.accept().is_ok());
        drop(client);
    }

    #[test]
    fn adopted_unix_listener_keeps_no_path_to_remove() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sock");
        let original = UnixListener::bind(&path).unwrap();
        let bound = BindSpec::parse(&format!("fd://{}", original.as_raw_fd()))
            .unwrap()
            .bind(16)
            .unwrap();
        assert_eq!(bound[0].address, format!("unix://{}", path.display()));
        match &bound[0].listener {
            Listener::Unix(_, owned_path) => assert!(owned_path.as_os_str().is_empty()),
            other => panic!("expected a unix listener, got {other:?}"),
        }
    }

    #[test]
    fn refuses_descriptors_that_are_not_listening_sockets() {
        use std::os::fd::AsRawFd;
        let file = tempfile::tempfile().unwrap();
        assert!(BindSpec::parse(&format!("fd://{}", file.as_raw_fd()))
            .unwrap()
            .bind(16)
            .is_err());
        let unlistened = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(BindSpec::parse(&format!("fd://{}", unlistened.as_raw_fd()))
            .unwrap()
            .bind(16)
            .is_err());
        assert!(BindSpec::parse("fd://100000").unwrap().bind(16).is_err());
    }
}
