//! Response compression (`--compress`): whole in-memory bodies the app
//! returned (Array bodies) are gzip-, zstd- or brotli-encoded by the engine, on a
//! blocking-pool thread, never on an app thread; streamed bodies are
//! encoded batch by batch as they stream (`stream.rs`). What is compressed
//! and what is left alone is decided in `decide.rs` from the response head;
//! `head.rs` rewrites the head.

mod decide;
mod head;
mod stream;

use crate::dispatch::reply::Reply;
use crate::files::encoding::{choose, Coding};
use bytes::Bytes;
use std::io::Write;
pub(crate) use stream::StreamEncoder;

/// The codings `--compress` produces, preferred in this order when the
/// client's q-values tie (as for precompressed files: `files/encoding.rs`).
const ENCODERS: &[Coding] = &[Coding::Br, Coding::Zstd, Coding::Gzip];

/// What compression may do for one request: its Accept-Encoding (the first
/// line, kept while the head goes to the app), or nothing at all.
#[derive(Debug)]
pub(crate) struct Wanted {
    accept: Option<Bytes>,
    http2: bool,
}

/// The request's wishes; nothing when compression is off or the request is
/// a HEAD (no body goes out, and an encoder would still write its header).
pub(crate) fn accept_encoding(
    compression: Option<&Compression>,
    head: &crate::message::head::RequestHead,
) -> Option<Wanted> {
    compression.filter(|_| !head.is_head()).map(|_| Wanted {
        accept: head.header(b"accept-encoding").cloned(),
        http2: head.version == crate::message::head::Version::Http2,
    })
}

/// The reply as the client gets it, for HTTP/1 and HTTP/2 alike: encoded
/// when compression is on and the request and reply allow it. A streamed
/// reply comes with the encoder its chunks must go through.
pub(crate) async fn for_client(
    compression: Option<&Compression>,
    reply: Reply,
    wanted: Option<Wanted>,
) -> (Reply, Option<StreamEncoder>) {
    match (compression, wanted) {
        (Some(compression), Some(wanted)) => compression.apply(reply, wanted).await,
        _ => (reply, None),
    }
}

/// The compression settings, ready to use.
#[derive(Debug, Clone)]
pub struct Compression {
    /// Bodies shorter than this are sent as they are.
    pub min_size: u64,
    /// Content types (before any `;`) that are compressed: an entry ending
    /// in `/` is a prefix (`text/`), any other must match whole.
    pub types: Vec<String>,
}

impl Compression {
    /// The reply to send for a request whose Accept-Encoding was `accept`:
    /// the same reply, a `Full` one with its body encoded, or a `Stream`
    /// with its head rewritten and the encoder for its chunks.
    async fn apply(&self, reply: Reply, wanted: Wanted) -> (Reply, Option<StreamEncoder>) {
        let accept = wanted.accept;
        match reply {
            Reply::Full {
                status,
                data,
                tail,
                body_len,
                close,
            } => (
                self.apply_full(status, (data, tail), body_len, close, accept).await,
                None,
            ),
            Reply::Stream {
                status,
                head,
                chunks,
                framing,
                close,
            } => {
                let (head, encoder) = if decide::stream_allowed(&head, framing, wanted.http2, self) {
                    match choose(accept.as_deref(), ENCODERS) {
                        Some(coding) => (
                            head::rewrite(&head, coding, None).into(),
                            Some(StreamEncoder::new(coding)),
                        ),
                        None => (head::add_vary(&head, head.len()).into(), None),
                    }
                } else {
                    (head, None)
                };
                let reply = Reply::Stream {
                    status,
                    head,
                    chunks,
                    framing,
                    close,
                };
                (reply, encoder)
            }
            other => (other, None),
        }
    }

    async fn apply_full(
        &self,
        status: u16,
        (data, tail): (Bytes, Bytes),
        body_len: u64,
        close: bool,
        accept: Option<Bytes>,
    ) -> Reply {
        let unchanged = |data, tail| Reply::Full {
            status,
            data,
            tail,
            body_len,
            close,
        };
        let Some(plan) = decide::plan(&data, tail.len(), body_len, self) else {
            return unchanged(data, tail);
        };
        let Some(coding) = choose(accept.as_deref(), ENCODERS) else {
            // Compressible, so the answer varies with Accept-Encoding even
            // when this client gets it plain.
            return unchanged(head::add_vary(&data, plan.head_len).into(), tail);
        };
        // The encoder reads the body in one piece.
        let data = if tail.is_empty() {
            data
        } else {
            let mut whole = Vec::with_capacity(data.len() + tail.len());
            whole.extend_from_slice(&data);
            whole.extend_from_slice(&tail);
            Bytes::from(whole)
        };
        let source = data.clone();
        let encoded = tokio::task::spawn_blocking(move || encode(&source[plan.head_len..], coding)).await;
        match encoded {
            Ok(Ok(body)) if (body.len() as u64) < body_len => {
                let mut out = head::rewrite(&data[..plan.head_len], coding, Some(body.len() as u64));
                let new_len = body.len() as u64;
                out.extend_from_slice(&body);
                Reply::Full {
                    status,
                    data: out.into(),
                    tail: Bytes::new(),
                    body_len: new_len,
                    close,
                }
            }
            // No smaller, or the encoder failed: sent as it was.
            _ => unchanged(head::add_vary(&data, plan.head_len).into(), Bytes::new()),
        }
    }
}

/// gzip at level 6 (nginx's and most proxies' default), zstd at level 3
/// (its default: faster than gzip 6 and smaller), brotli at quality 5
/// (close to gzip's speed, smaller).
fn encode(body: &[u8], coding: Coding) -> std::io::Result<Vec<u8>> {
    match coding {
        Coding::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 3), flate2::Compression::new(6));
            encoder.write_all(body)?;
            encoder.finish()
        }
        Coding::Zstd => zstd::bulk::compress(body, ZSTD_LEVEL),
        Coding::Br => {
            let mut out = Vec::with_capacity(body.len() / 3);
            {
                let mut encoder = brotli::CompressorWriter::new(&mut out, 64 * 1024, 5, 22);
                encoder.write_all(body)?;
                encoder.flush()?;
            }
            Ok(out)
        }
    }
}

/// zstd's own default level.
pub(crate) const ZSTD_LEVEL: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn settings() -> Compression {
        Compression {
            min_size: 100,
            types: vec!["text/".into()],
        }
    }

    fn full(head: &str, body: &[u8]) -> Reply {
        let mut data = format!("{head}\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        data.extend_from_slice(body);
        Reply::Full {
            status: 200,
            data: data.into(),
            tail: Bytes::new(),
            body_len: body.len() as u64,
            close: false,
        }
    }

    fn run(reply: Reply, accept: Option<&'static [u8]>) -> (String, Vec<u8>) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let wanted = Wanted {
            accept: accept.map(Bytes::from_static),
            http2: false,
        };
        let (reply, _) = runtime.block_on(settings().apply(reply, wanted));
        let Reply::Full { data, body_len, .. } = reply else {
            panic!("not a full reply")
        };
        let end = memchr::memmem::find(&data, b"\r\n\r\n").unwrap() + 4;
        assert_eq!((data.len() - end) as u64, body_len);
        (String::from_utf8(data[..end].to_vec()).unwrap(), data[end..].to_vec())
    }

    #[test]
    fn gzip_and_brotli_round_trip() {
        let body = "hello compressible world. ".repeat(200).into_bytes();
        let (head, gz) = run(full("HTTP/1.1 200 OK\r\ncontent-type: text/html", &body), Some(b"gzip"));
        assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}\r\n", gz.len())), "{head}");
        assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut plain).unwrap();
        assert_eq!(plain, body);

        let (head, br) = run(
            full("HTTP/1.1 200 OK\r\ncontent-type: text/html", &body),
            Some(b"gzip, br"),
        );
        assert!(head.contains("content-encoding: br\r\n"), "{head}");
        let mut plain = Vec::new();
        brotli::Decompressor::new(&br[..], 4096)
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(plain, body);
    }

    #[test]
    fn zstd_round_trips_and_ties_go_to_brotli_then_zstd() {
        let body = "hello compressible world. ".repeat(200).into_bytes();
        let page = || full("HTTP/1.1 200 OK\r\ncontent-type: text/html", &body);
        let (head, zst) = run(page(), Some(b"gzip;q=0.5, zstd"));
        assert!(head.contains("content-encoding: zstd\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}\r\n", zst.len())), "{head}");
        assert_eq!(zstd::stream::decode_all(&zst[..]).unwrap(), body);
        let (head, _) = run(page(), Some(b"gzip, zstd"));
        assert!(
            head.contains("content-encoding: zstd\r\n"),
            "zstd before gzip on a tie: {head}"
        );
        let (head, _) = run(page(), Some(b"gzip, zstd, br"));
        assert!(
            head.contains("content-encoding: br\r\n"),
            "brotli first on a tie: {head}"
        );
    }

    #[test]
    fn plain_answers_still_vary_and_the_rest_is_untouched() {
        let body = "x".repeat(500).into_bytes();
        let (head, out) = run(full("HTTP/1.1 200 OK\r\ncontent-type: text/plain", &body), None);
        assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
        assert!(!head.contains("content-encoding"), "{head}");
        assert_eq!(out, body);
        let (head, out) = run(full("HTTP/1.1 200 OK\r\ncontent-type: image/png", &body), Some(b"gzip"));
        assert!(!head.contains("vary") && !head.contains("content-encoding"), "{head}");
        assert_eq!(out, body);
    }
}
