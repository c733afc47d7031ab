//! The responses of the public folder: 200, 206 (one range from the file,
//! several as multipart/byteranges), 304, 416, and the 400/404 refusals.

use super::conditional::Validators;
use super::encoding::Coding;
use super::range::{self, Ranges};
use crate::dispatch::reply::Reply;
use crate::message::head::{RequestHead, Version};
use crate::message::response::ResponseHead;
use bytes::Bytes;
use std::fs::{File, Metadata};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Several ranges are copied into one multipart body in memory, up to this
/// many bytes of file; a larger set gets the whole file (by sendfile).
const MULTIPART_LIMIT: u64 = 4 * 1024 * 1024;

const IMMUTABLE: &[u8] = b"public, max-age=31536000, immutable";

/// The file picked for a request, with what its headers need.
pub(crate) struct Chosen {
    pub file: File,
    pub meta: Metadata,
    pub content_type: &'static str,
    pub immutable: bool,
    /// Set when a precompressed sibling is sent instead of the file.
    pub encoding: Option<Coding>,
    /// The file has precompressed siblings: the answer depends on
    /// Accept-Encoding.
    pub vary: bool,
}

/// What of the request the answer depends on.
pub(crate) struct Request<'a> {
    head: &'a RequestHead,
    keep_alive: bool,
}

impl<'a> Request<'a> {
    pub(crate) fn new(head: &'a RequestHead, keep_alive: bool) -> Request<'a> {
        Request { head, keep_alive }
    }

    /// The first value of a request header.
    pub(crate) fn header(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.head.header(name).map(|v| &v[..])
    }

    fn is_head(&self) -> bool {
        self.head.is_head()
    }

    fn version(&self) -> Version {
        self.head.version
    }

    /// 400 or 404 with a short text body; the connection stays open (the
    /// request was framed fine, only its path is refused).
    pub(crate) fn refusal(&self, status: u16) -> Option<Reply> {
        let body: &[u8] = if status == 400 {
            b"400 Bad Request\n"
        } else {
            b"404 Not Found\n"
        };
        let mut head = ResponseHead::new(i64::from(status)).ok()?;
        head.header(b"content-type", b"text/plain; charset=utf-8").ok()?;
        Some(self.full(head, body))
    }

    /// A head and an in-memory body (none for HEAD or a bodiless status).
    fn full(&self, head: ResponseHead, body: &[u8]) -> Reply {
        let status = head.status();
        let is_head = self.is_head();
        let mut finished = head.finish_full(body.len() as u64, is_head, self.keep_alive, self.version());
        let body_len = if finished.send_body { body.len() as u64 } else { 0 };
        if finished.send_body {
            finished.bytes.extend_from_slice(body);
        }
        let close = !finished.keep_alive;
        Reply::Full {
            status,
            data: Bytes::from(finished.bytes),
            tail: Bytes::new(),
            body_len,
            close,
        }
    }

    /// `len` bytes of `file` from `offset`, sent by the connection (with
    /// sendfile where it can).
    fn file(&self, mut head: ResponseHead, file: File, offset: u64, len: u64) -> Option<Reply> {
        // Declared here so HEAD says it too (finish_full keeps a HEAD's own
        // content-length).
        head.header(b"content-length", itoa::Buffer::new().format(len).as_bytes())
            .ok()?;
        let status = head.status();
        let finished = head.finish_full(len, self.is_head(), self.keep_alive, self.version());
        let close = !finished.keep_alive;
        if !finished.send_body || len == 0 {
            return Some(Reply::Full {
                status,
                data: Bytes::from(finished.bytes),
                tail: Bytes::new(),
                body_len: 0,
                close,
            });
        }
        Some(Reply::File {
            status,
            head: Bytes::from(finished.bytes),
            file,
            offset,
            len,
            close,
        })
    }

    /// The answer for a file that exists: 304, 416, 206 or 200.
    pub(crate) fn serve(&self, chosen: Chosen) -> Option<Reply> {
        let validators = Validators::of(&chosen.meta);
        let len = chosen.meta.len();
        if validators.not_modified(self.header(b"if-none-match"), self.header(b"if-modified-since")) {
            let mut head = ResponseHead::new(304).ok()?;
            self.validator_headers(&mut head, &chosen, &validators)?;
            return Some(self.full(head, b""));
        }
        let ranges = match self.header(b"range") {
            Some(value) if self.header(b"if-range").is_none_or(|v| validators.if_range_holds(v)) => {
                range::parse(value, len)
            }
            _ => Ranges::Whole,
        };
        match ranges {
            Ranges::Whole => {
                let mut head = ResponseHead::new(200).ok()?;
                self.entity_headers(&mut head, &chosen, &validators)?;
                self.file(head, chosen.file, 0, len)
            }
            Ranges::Unsatisfiable => {
                let mut head = ResponseHead::new(416).ok()?;
                head.header(b"content-range", format!("bytes */{len}").as_bytes())
                    .ok()?;
                self.validator_headers(&mut head, &chosen, &validators)?;
                head.header(b"content-type", b"text/plain; charset=utf-8").ok()?;
                Some(self.full(head, b"416 Range Not Satisfiable\n"))
            }
            Ranges::Parts(parts) => match parts[..] {
                [(first, last)] => {
                    let mut head = ResponseHead::new(206).ok()?;
                    self.entity_headers(&mut head, &chosen, &validators)?;
                    head.header(b"content-range", format!("bytes {first}-{last}/{len}").as_bytes())
                        .ok()?;
                    self.file(head, chosen.file, first, last - first + 1)
                }
                _ => self.multipart(chosen, &validators, &parts),
            },
        }
    }

    /// Several ranges in one multipart/byteranges body (RFC 9110 §14.6),
    /// or the whole file when they add up to more than `MULTIPART_LIMIT`.
    fn multipart(&self, chosen: Chosen, validators: &Validators, parts: &[(u64, u64)]) -> Option<Reply> {
        let len = chosen.meta.len();
        let total: u64 = parts.iter().map(|(a, b)| b - a + 1).sum();
        if total > MULTIPART_LIMIT {
            let mut head = ResponseHead::new(200).ok()?;
            self.entity_headers(&mut head, &chosen, validators)?;
            return self.file(head, chosen.file, 0, len);
        }
        let boundary = boundary();
        let mut body = Vec::with_capacity(total as usize + parts.len() * 128);
        for &(first, last) in parts {
            body.extend_from_slice(
                format!(
                    "\r\n--{boundary}\r\ncontent-type: {}\r\ncontent-range: bytes {first}-{last}/{len}\r\n\r\n",
                    chosen.content_type
                )
                .as_bytes(),
            );
            let at = body.len();
            body.resize(at + (last - first + 1) as usize, 0);
            // A file that shrank since its length was read cannot fill the
            // part: the request goes to the app instead of a wrong answer.
            chosen.file.read_exact_at(&mut body[at..], first).ok()?;
        }
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let mut head = ResponseHead::new(206).ok()?;
        self.validator_headers(&mut head, &chosen, validators)?;
        head.header(b"accept-ranges", b"bytes").ok()?;
        if let Some(coding) = chosen.encoding {
            head.header(b"content-encoding", coding.name().as_bytes()).ok()?;
        }
        head.header(
            b"content-type",
            format!("multipart/byteranges; boundary={boundary}").as_bytes(),
        )
        .ok()?;
        Some(self.full(head, &body))
    }

    /// ETag, Last-Modified, Cache-Control and Vary: what a 304 repeats
    /// (RFC 9110 §15.4.5).
    fn validator_headers(&self, head: &mut ResponseHead, chosen: &Chosen, validators: &Validators) -> Option<()> {
        head.header(b"etag", validators.etag.as_bytes()).ok()?;
        head.header(b"last-modified", validators.last_modified().as_bytes())
            .ok()?;
        if chosen.immutable {
            head.header(b"cache-control", IMMUTABLE).ok()?;
        }
        if chosen.vary {
            head.header(b"vary", b"accept-encoding").ok()?;
        }
        Some(())
    }

    /// The headers of a 200 or single-range 206.
    fn entity_headers(&self, head: &mut ResponseHead, chosen: &Chosen, validators: &Validators) -> Option<()> {
        self.validator_headers(head, chosen, validators)?;
        head.header(b"content-type", chosen.content_type.as_bytes()).ok()?;
        head.header(b"accept-ranges", b"bytes").ok()?;
        if let Some(coding) = chosen.encoding {
            head.header(b"content-encoding", coding.name().as_bytes()).ok()?;
        }
        Some(())
    }
}

/// A multipart boundary unlikely to occur in any file: the process id, a
/// counter and the time, in hex.
fn boundary() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("tsubame-{:x}-{n:x}-{nanos:x}", std::process::id())
}
