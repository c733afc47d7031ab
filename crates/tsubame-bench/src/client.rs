//! A minimal HTTP/1.1 client connection: write a pre-serialized request,
//! read one response (head parsed with httparse, body skipped according to
//! its framing), keep the connection if both sides allow it.

use std::io;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::error::Failure;
use crate::url::Address;

const BUFFER: usize = 64 * 1024;
/// The largest response head accepted.
const MAX_HEAD: usize = 1024 * 1024;
const MAX_HEADERS: usize = 128;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Appends what arrives to `buf`'s spare capacity, which is never
    /// zeroed first: a connection touches only the pages its responses
    /// fill, so opening a thousand connections costs no 64 MiB of memset
    /// and page faults that the server under test would share the CPU with.
    async fn read_into(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_buf(buf).await,
            Stream::Unix(s) => s.read_buf(buf).await,
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }
}

/// What was learned from one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Whether the connection may carry another request.
    pub reusable: bool,
    /// Bytes of head and body as received.
    pub bytes: u64,
}

pub struct Connection {
    stream: Stream,
    /// Received bytes; `buf[start..]` is not consumed yet.
    buf: Vec<u8>,
    start: usize,
    /// Requests completed on this connection.
    pub served: u64,
}

pub async fn connect(address: &Address) -> Result<Connection, Failure> {
    let stream = match address {
        Address::Tcp(addr) => {
            let s = TcpStream::connect(addr).await.map_err(|e| Failure::from_io(&e, true))?;
            s.set_nodelay(true).map_err(|e| Failure::from_io(&e, true))?;
            Stream::Tcp(s)
        }
        Address::Unix(path) => Stream::Unix(connect_unix(path).await?),
    };
    Ok(Connection::over(stream))
}

/// A connection opened before the run (`--preconnect`), with a blocking
/// connect on the main thread, to be adopted by a client thread's runtime.
pub enum Opened {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

pub fn open_blocking(address: &Address, timeout: std::time::Duration) -> io::Result<Opened> {
    Ok(match address {
        Address::Tcp(addr) => Opened::Tcp(std::net::TcpStream::connect_timeout(addr, timeout)?),
        Address::Unix(path) => Opened::Unix(std::os::unix::net::UnixStream::connect(path)?),
    })
}

impl Connection {
    /// Takes over a pre-opened connection; needs the thread's runtime.
    pub fn adopt(opened: Opened) -> io::Result<Connection> {
        let stream = match opened {
            Opened::Tcp(s) => {
                s.set_nonblocking(true)?;
                let s = TcpStream::from_std(s)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            Opened::Unix(s) => {
                s.set_nonblocking(true)?;
                Stream::Unix(UnixStream::from_std(s)?)
            }
        };
        Ok(Connection::over(stream))
    }

    fn over(stream: Stream) -> Connection {
        Connection {
            stream,
            buf: Vec::with_capacity(BUFFER),
            start: 0,
            served: 0,
        }
    }
}

async fn connect_unix(path: &Path) -> Result<UnixStream, Failure> {
    UnixStream::connect(path).await.map_err(|e| Failure::from_io(&e, true))
}

/// Framing of the body after a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

struct Head {
    status: u16,
    len: usize,
    framing: Framing,
    keep_alive: bool,
}

fn parse_head(bytes: &[u8], request_was_head: bool) -> Result<Option<Head>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure::InvalidResponse),
    };
    let status = response.code.ok_or(Failure::InvalidResponse)?;
    let http11 = response.version == Some(1);
    let mut keep_alive = http11;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value).map_err(|_| Failure::InvalidResponse)?;
            let n = value.trim().parse::<u64>().map_err(|_| Failure::InvalidResponse)?;
            if length.is_some_and(|l| l != n) {
                return Err(Failure::InvalidResponse);
            }
            length = Some(n);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = header
                .value
                .split(|&b| b == b',')
                .next_back()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if request_was_head || (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    if framing == Framing::UntilClose {
        keep_alive = false;
    }
    Ok(Some(Head {
        status,
        len,
        framing,
        keep_alive,
    }))
}

/// A chunked body decoder that only finds where the body ends.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

impl Chunked {
    /// Consumes what it can of `data`; returns the bytes used. Needs more
    /// input when it returns less than `data.len()` and is not `Done`.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, Failure> {
        let mut used = 0;
        loop {
            let rest = &data[used..];
            match *self {
                Chunked::Done => return Ok(used),
                Chunked::Data(n) => {
                    let take = n.min(rest.len() as u64);
                    used += take as usize;
                    *self = if take == n {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(n - take)
                    };
                    if take < n {
                        return Ok(used);
                    }
                }
                Chunked::Size | Chunked::DataEnd | Chunked::Trailer => {
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() > 4096 {
                            return Err(Failure::InvalidResponse);
                        }
                        return Ok(used);
                    };
                    let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
                    used += nl + 1;
                    *self = match *self {
                        Chunked::DataEnd if line.is_empty() => Chunked::Size,
                        Chunked::DataEnd => return Err(Failure::InvalidResponse),
                        Chunked::Trailer if line.is_empty() => Chunked::Done,
                        Chunked::Trailer => Chunked::Trailer,
                        _ => match chunk_size(line)? {
                            0 => Chunked::Trailer,
                            n => Chunked::Data(n),
                        },
                    };
                }
            }
        }
    }
}

fn chunk_size(line: &[u8]) -> Result<u64, Failure> {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
    if hex.is_empty() || hex.len() > 15 {
        return Err(Failure::InvalidResponse);
    }
    let mut n = 0u64;
    for &b in hex {
        let digit = (b as char).to_digit(16).ok_or(Failure::InvalidResponse)?;
        n = n * 16 + u64::from(digit);
    }
    Ok(n)
}

impl Connection {
    /// Reads more bytes into the buffer; 0 means the peer closed.
    async fn fill(&mut self) -> Result<usize, Failure> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.buf.len() == self.buf.capacity() {
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            } else if self.buf.capacity() < MAX_HEAD {
                let grown = (self.buf.capacity() * 2).min(MAX_HEAD);
                self.buf.reserve_exact(grown - self.buf.len());
            } else {
                return Err(Failure::InvalidResponse);
            }
        }
        self.stream
            .read_into(&mut self.buf)
            .await
            .map_err(|e| Failure::from_io(&e, false))
    }

    /// Sends `request` and reads its response.
    pub async fn exchange(&mut self, request: &[u8], head_request: bool) -> Result<Response, Failure> {
        self.stream
            .write_all(request)
            .await
            .map_err(|e| Failure::from_io(&e, false))?;
        let mut bytes = 0u64;
        let head = loop {
            match parse_head(&self.buf[self.start..], head_request)? {
                Some(head) if (100..200).contains(&head.status) && head.status != 101 => {
                    // An interim response (100 Continue, 103 Early Hints): the real one follows.
                    self.start += head.len;
                    bytes += head.len as u64;
                }
                Some(head) => break head,
                None => {
                    if self.fill().await? == 0 {
                        return Err(Failure::Closed);
                    }
                }
            }
        };
        self.start += head.len;
        bytes += head.len as u64;
        match head.framing {
            Framing::None => {}
            Framing::Length(mut left) => loop {
                let have = (self.buf.len() - self.start) as u64;
                let take = have.min(left);
                self.start += take as usize;
                left -= take;
                bytes += take;
                if left == 0 {
                    break;
                }
                if self.fill().await? == 0 {
                    return Err(Failure::Closed);
                }
            },
            Framing::Chunked => {
                let mut decoder = Chunked::default();
                loop {
                    let used = decoder.feed(&self.buf[self.start..])?;
                    self.start += used;
                    bytes += used as u64;
                    if decoder == Chunked::Done {
                        break;
                    }
                    if self.fill().await? == 0 {
                        return Err(Failure::Closed);
                    }
                }
            }
            Framing::UntilClose => loop {
                bytes += (self.buf.len() - self.start) as u64;
                self.start = self.buf.len();
                if self.fill().await? == 0 {
                    break;
                }
            },
        }
        self.served += 1;
        Ok(Response {
            status: head.status,
            reusable: head.keep_alive,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str, head_request: bool) -> Head {
        parse_head(text.as_bytes(), head_request).unwrap().unwrap()
    }

    #[test]
    fn framing_from_headers() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false);
        assert_eq!((h.status, h.framing, h.keep_alive), (200, Framing::Length(5), true));
        assert_eq!(h.len, 38);
        let h = head(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n",
            false,
        );
        assert_eq!(h.framing, Framing::Chunked);
        let h = head(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(!h.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false);
        assert!(!h.keep_alive);
        let h = head(
            "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(h.keep_alive);
        let h = head("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true);
        assert_eq!(h.framing, Framing::None);
        let h = head("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false);
        assert_eq!(h.framing, Framing::None);
    }

    #[test]
    fn partial_and_invalid_heads() {
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le", false).unwrap().is_none());
        assert!(parse_head(b"garbage\r\n\r\n", false).is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
    }

    #[test]
    fn chunked_whole_and_split() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut d = Chunked::default();
        assert_eq!(d.feed(body).unwrap(), body.len() - 4);
        assert_eq!(d, Chunked::Done);

        // Byte by byte, as if each arrived in its own read.
        let mut d = Chunked::default();
        let mut buffered: Vec<u8> = Vec::new();
        let mut consumed = 0;
        for &b in body.iter() {
            buffered.push(b);
            let used = d.feed(&buffered).unwrap();
            buffered.drain(..used);
            consumed += used;
            if d == Chunked::Done {
                break;
            }
        }
        assert_eq!(d, Chunked::Done);
        assert_eq!(consumed, body.len() - 4);
    }

    #[test]
    fn chunked_errors() {
        assert!(Chunked::default().feed(b"zz\r\n").is_err());
        assert!(Chunked::default().feed(b"\r\n").is_err());
        assert!(Chunked::default().feed(b"2\r\nabX\r\n").is_err());
        assert!(Chunked::default().feed(&[b'1'; 5000]).is_err());
    }

    #[tokio::test]
    async fn exchange_over_a_socket_pair() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut conn = Connection {
            stream: Stream::Unix(a),
            buf: Vec::with_capacity(16),
            start: 0,
            served: 0,
        };
        let server = tokio::spawn(async move {
            let mut req = [0u8; 64];
            let n = b.read(&mut req).await.unwrap();
            assert_eq!(&req[..n], b"GET / HTTP/1.1\r\n\r\n");
            b.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            b.write_all(b"3\r\nabc\r\n0\r\n\r\n").await.unwrap();
            let n = b.read(&mut req).await.unwrap();
            assert_eq!(n, 18);
            let big = "x".repeat(100);
            b.write_all(format!("HTTP/1.1 500 E\r\nContent-Length: 100\r\n\r\n{big}").as_bytes())
                .await
                .unwrap();
            let n = b.read(&mut req).await.unwrap();
            assert_eq!(n, 18);
            b.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
                .await
                .unwrap();
        });
        let r = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", false).await.unwrap();
        assert_eq!((r.status, r.reusable), (200, true));
        assert_eq!(r.bytes, 25 + 47 + 13);
        let r = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", false).await.unwrap();
        assert_eq!((r.status, r.bytes), (500, 39 + 100));
        let err = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", false).await.unwrap_err();
        assert_eq!(err, Failure::Closed);
        server.await.unwrap();
        assert_eq!(conn.served, 2);
    }
}
