//! HTTP/2 connections: `h2` negotiated by ALPN on TLS binds, or cleartext
//! with prior knowledge (h2c) where configured. The `h2` crate does the
//! framing, HPACK and flow control; each stream becomes one request that
//! goes through the same queue, health probes and shedding as HTTP/1.
//!
//! Replies come back from the application threads as for HTTP/1: a head
//! in `name: value` lines (made with `Version::Http2`, so without framing
//! or connection headers) and the body. `response_parts` turns the head
//! into a HEADERS frame; connection-specific headers are dropped there, as
//! RFC 9113 §8.2.2 requires.

use crate::body::{Body, BodySink};
use crate::connection::{accepts_json, await_reply, reply_status, shed, submit, Answer, Submitted};
use crate::error::HttpError;
use crate::health;
use crate::job::ConnInfo;
use crate::linger::{LINGER_BYTES, LINGER_TIME};
use crate::log::{self, AccessEntry};
use crate::parse::{is_known_method, Framing, RequestHead, Version};
use crate::queue::Pushed;
use crate::reply::{Reply, StreamFraming, StreamMsg};
use crate::response::{error_response, unavailable_response};
use crate::server::Shared;
use crate::stats::Stats;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout, timeout_at};

const FILE_CHUNK: usize = 64 * 1024;

/// The client preface every HTTP/2 connection starts with (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(crate) async fn serve_h2<T>(io: T, conn: Arc<ConnInfo>, shared: Arc<Shared>)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = &shared.opts;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(opts.h2_max_concurrent_streams)
        .initial_window_size(opts.h2_initial_window_size)
        .initial_connection_window_size(opts.h2_initial_connection_window_size)
        .max_header_list_size(u32::try_from(opts.max_header_size).unwrap_or(u32::MAX));
    let mut connection = match timeout(opts.first_data_timeout, builder.handshake::<_, Bytes>(io)).await {
        Ok(Ok(connection)) => connection,
        _ => return,
    };
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let mut draining = false;
    loop {
        if !draining && shared.is_stopping() {
            // GOAWAY: streams already open finish, no new ones start.
            connection.graceful_shutdown();
            draining = true;
        }
        let accepted = tokio::select! {
            biased;
            _ = &mut stop, if !draining => continue,
            accepted = connection.accept() => accepted,
            _ = tokio::time::sleep(opts.persistent_timeout), if !draining => {
                if !connection.has_streams() {
                    connection.graceful_shutdown();
                    draining = true;
                }
                continue;
            }
        };
        match accepted {
            Some(Ok((request, respond))) => {
                tokio::spawn(serve_stream(request, respond, conn.clone(), shared.clone()));
            }
            Some(Err(_)) | None => break,
        }
    }
}

async fn serve_stream(
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: Arc<ConnInfo>,
    shared: Arc<Shared>,
) {
    let received_at = Instant::now();
    let (parts, mut recv) = request.into_parts();
    let mut head = match request_head(&parts, &shared) {
        Ok(head) => head,
        Err(e) => return refuse(&mut respond, &shared, e).await,
    };
    if recv.is_end_stream() && head.framing == Framing::Chunked {
        // HEADERS ended the stream: no body at all, as a GET over HTTP/1.
        head.framing = Framing::None;
    }
    if let (Framing::Length(len), Some(limit)) = (head.framing, shared.opts.max_body_size) {
        if len > limit {
            refuse(&mut respond, &shared, HttpError::PayloadTooLarge).await;
            return drain(&mut recv).await;
        }
    }
    let body = match read_body(&mut recv, &head, &shared).await {
        Ok(body) => body,
        Err(None) => return,
        Err(Some(e)) => {
            refuse(&mut respond, &shared, e).await;
            return drain(&mut recv).await;
        }
    };
    if let Some(probe) = health::answer(&head, &shared) {
        let _ = send_full(&mut respond, probe.into(), &shared).await;
        return;
    }
    Stats::bump(&shared.stats.requests_total);
    let (method, target) = (head.method.clone(), head.target.clone());
    let wants_json = accepts_json(&head);
    let submitted = submit(&shared, head, body, &conn, true, received_at, &target);
    let Some(Submitted { mut answer, state, seq }) = submitted.await else {
        return refuse(&mut respond, &shared, HttpError::Internal("server is shutting down")).await;
    };
    while let Answer::Reply(Reply::Interim { head, next }) = answer {
        if let Some((response, _)) = response_parts(&head) {
            if respond.send_informational(response).is_err() {
                return;
            }
        }
        answer = await_reply(next, Pushed::Done, &state, seq, received_at, &shared).await;
    }
    let reply = match answer {
        Answer::Reply(reply) => reply,
        Answer::Shed(reason) => {
            shed(&shared, reason, (&method, &target, &conn.peer_addr), seq, received_at);
            let data = unavailable_response(reason, wants_json, shared.opts.retry_after, true, Version::Http2);
            Reply::Full {
                status: 503,
                data: data.into(),
                body_len: 0,
                close: false,
            }
        }
        Answer::Dropped => {
            log::error("an application thread dropped a request without answering it");
            return refuse(
                &mut respond,
                &shared,
                HttpError::Internal("no response from the application"),
            )
            .await;
        }
    };
    let status = reply_status(&reply);
    let body_bytes = write_reply(&mut respond, reply, &shared).await;
    if shared.opts.log_requests {
        log::access(&AccessEntry {
            peer: &conn.peer_addr,
            method: &method,
            target: &target,
            version: Version::Http2.as_str(),
            status,
            body_bytes: body_bytes.unwrap_or(0),
            elapsed: received_at.elapsed(),
        });
    }
    if body_bytes.is_none() {
        Stats::bump(&shared.stats.client_disconnects);
    }
}

/// Maps the pseudo-headers onto what the HTTP/1 parser would have produced:
/// `:method`, `:path` (split into path and query), `:authority` (as the
/// host, and as a `host` header when the client sent none).
fn request_head(parts: &http::request::Parts, shared: &Shared) -> Result<RequestHead, HttpError> {
    let method = Bytes::copy_from_slice(parts.method.as_str().as_bytes());
    if !is_known_method(&method) {
        return Err(HttpError::NotImplemented("request method not supported"));
    }
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    if target.len() > shared.limits.max_uri_size {
        return Err(HttpError::UriTooLong);
    }
    let target = Bytes::copy_from_slice(target.as_bytes());
    let (path, query) = match memchr::memchr(b'?', &target) {
        Some(q) => (target.slice(..q), target.slice(q + 1..)),
        None => (target.clone(), Bytes::new()),
    };
    if parts.headers.len() > shared.limits.max_headers {
        return Err(HttpError::HeadersTooLarge);
    }
    let mut headers = Vec::with_capacity(parts.headers.len() + 1);
    let authority = parts
        .uri
        .authority()
        .map(|a| Bytes::copy_from_slice(a.as_str().as_bytes()));
    let has_host = parts.headers.contains_key(http::header::HOST);
    if let (Some(authority), false) = (&authority, has_host) {
        headers.push((Bytes::from_static(b"host"), authority.clone()));
    }
    let mut framing = None;
    for (name, value) in &parts.headers {
        if name == http::header::CONTENT_LENGTH {
            let len = std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or(HttpError::BadRequest("invalid content-length"))?;
            framing = Some(Framing::Length(len));
        }
        headers.push((
            Bytes::copy_from_slice(name.as_str().as_bytes()),
            Bytes::copy_from_slice(value.as_bytes()),
        ));
    }
    let host = authority.or_else(|| {
        parts
            .headers
            .get(http::header::HOST)
            .map(|h| Bytes::copy_from_slice(h.as_bytes()))
    });
    Ok(RequestHead {
        method,
        target,
        path,
        query,
        version: Version::Http2,
        headers,
        host,
        // Without a content-length the body's length is learnt by reading
        // it, as for a chunked HTTP/1 body; `rack_env` then reports it.
        framing: framing.unwrap_or(Framing::Chunked),
        keep_alive: true,
        expect_continue: false,
    })
}

/// `Err(None)`: the stream was reset or the connection lost; nobody is
/// left to answer.
async fn read_body(recv: &mut RecvStream, head: &RequestHead, shared: &Shared) -> Result<Body, Option<HttpError>> {
    if recv.is_end_stream() {
        return Ok(Body::Empty);
    }
    let declared = match head.framing {
        Framing::Length(len) => Some(len),
        _ => None,
    };
    let opts = &shared.opts;
    let mut sink = BodySink::new(declared, opts.spool_threshold, opts.max_body_size, &shared.spool_gate)?;
    loop {
        match timeout(opts.body_timeout, recv.data()).await {
            Err(_) => return Err(Some(HttpError::RequestTimeout)),
            Ok(None) => return Ok(sink.finish()?),
            Ok(Some(Err(_))) => return Err(None),
            Ok(Some(Ok(chunk))) => {
                // Granting the window back only once the bytes are stored
                // keeps a slow disk from being overrun.
                sink.push(&chunk)?;
                let _ = recv.flow_control().release_capacity(chunk.len());
            }
        }
    }
}

/// After an early answer (413, 408) the client may still be sending its
/// body. Reading more, within the bounds an HTTP/1 connection lingers for
/// (`linger.rs`), lets it finish the upload and read the answer; otherwise
/// the stream is reset under it (RST_STREAM NO_ERROR), which some clients
/// (curl 7.88) report as an error instead of showing the response.
async fn drain(recv: &mut RecvStream) {
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    let mut budget = LINGER_BYTES;
    while !recv.is_end_stream() {
        match timeout_at(deadline, recv.data()).await {
            Ok(Some(Ok(chunk))) => {
                let _ = recv.flow_control().release_capacity(chunk.len());
                match budget.checked_sub(chunk.len()) {
                    Some(left) => budget = left,
                    None => return,
                }
            }
            _ => return,
        }
    }
}

async fn refuse(respond: &mut SendResponse<Bytes>, shared: &Shared, error: HttpError) {
    match error {
        HttpError::Unavailable(reason) => {
            shared.stats.shed(reason);
            log::warn(&format!("503 {} on an HTTP/2 stream", reason.as_str()));
        }
        HttpError::RequestTimeout => Stats::bump(&shared.stats.read_timeouts),
        _ => Stats::bump(&shared.stats.rejected_total),
    }
    let bytes = error_response(error.status(), error.detail());
    let _ = send_full(respond, bytes.into(), shared).await;
}

/// The status line and header lines of an HTTP/1-form head as an HTTP/2
/// response, and where the body starts. Connection-specific headers
/// (RFC 9113 §8.2.2) are dropped.
pub(crate) fn response_parts(bytes: &[u8]) -> Option<(Response<()>, usize)> {
    let lines = memchr::memmem::find_iter(bytes, b"\r\n").count();
    let mut headers = vec![httparse::EMPTY_HEADER; lines.max(1)];
    let mut parsed = httparse::Response::new(&mut headers);
    let end = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(end)) => end,
        _ => return None,
    };
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(parsed.code?).ok()?;
    let map = response.headers_mut();
    for header in parsed.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(header.name.as_bytes()) else {
            continue;
        };
        if is_connection_specific(&name) {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(header.value) {
            map.append(name, value);
        }
    }
    Some((response, end))
}

fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "proxy-connection" | "te"
    )
}

/// A head and body in one buffer. Returns the body bytes sent, or `None`
/// when the client went away.
async fn send_full(respond: &mut SendResponse<Bytes>, bytes: Bytes, shared: &Shared) -> Option<u64> {
    let Some((response, body_at)) = response_parts(&bytes) else {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return None;
    };
    let body = bytes.slice(body_at..);
    let mut stream = respond.send_response(response, body.is_empty()).ok()?;
    let len = body.len() as u64;
    if !body.is_empty() {
        send_data(&mut stream, body, true, shared.opts.body_timeout).await?;
    }
    Some(len)
}

/// Sends `data` as flow control allows: never more than the peer's window,
/// so a slow reader holds the stream back instead of filling memory.
async fn send_data(stream: &mut SendStream<Bytes>, mut data: Bytes, end: bool, wait: Duration) -> Option<()> {
    if data.is_empty() {
        if end {
            stream.send_data(Bytes::new(), true).ok()?;
        }
        return Some(());
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match timeout(wait, std::future::poll_fn(|cx| stream.poll_capacity(cx))).await {
            Ok(Some(Ok(n))) => n,
            _ => return None,
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        stream.send_data(chunk, end && data.is_empty()).ok()?;
    }
    Some(())
}

async fn write_reply(respond: &mut SendResponse<Bytes>, reply: Reply, shared: &Shared) -> Option<u64> {
    let wait = shared.opts.body_timeout;
    match reply {
        Reply::Full { data, .. } => send_full(respond, data, shared).await,
        Reply::File {
            head, mut file, len, ..
        } => {
            let (response, _) = response_parts(&head)?;
            let mut stream = respond.send_response(response, len == 0).ok()?;
            let mut sent = 0u64;
            while sent < len {
                let want = (len - sent).min(FILE_CHUNK as u64) as usize;
                let mut chunk = vec![0u8; want];
                let n = match file.read(&mut chunk) {
                    Ok(0) | Err(_) => {
                        log::error("file body ended before its length; resetting the stream");
                        stream.send_reset(Reason::INTERNAL_ERROR);
                        return Some(sent);
                    }
                    Ok(n) => n,
                };
                chunk.truncate(n);
                sent += n as u64;
                send_data(&mut stream, chunk.into(), sent == len, wait).await?;
            }
            Some(sent)
        }
        Reply::Stream {
            head,
            mut chunks,
            framing,
            ..
        } => {
            let (response, _) = response_parts(&head)?;
            let declared = match framing {
                StreamFraming::Raw { declared_len } => declared_len,
                StreamFraming::Chunked => None,
            };
            if declared == Some(0) || status_has_no_body(&response) {
                respond.send_response(response, true).ok()?;
                return Some(0);
            }
            let mut stream = respond.send_response(response, false).ok()?;
            let mut sent = 0u64;
            loop {
                match chunks.recv().await {
                    Some(StreamMsg::Data(mut data)) => {
                        if let Some(limit) = declared {
                            data.truncate(limit.saturating_sub(sent).min(data.len() as u64) as usize);
                        }
                        if data.is_empty() {
                            continue;
                        }
                        sent += data.len() as u64;
                        send_data(&mut stream, data, false, wait).await?;
                    }
                    Some(StreamMsg::End) if declared.is_none_or(|l| l == sent) => {
                        send_data(&mut stream, Bytes::new(), true, wait).await?;
                        return Some(sent);
                    }
                    Some(StreamMsg::End) | None => {
                        // A body that failed or fell short of its length:
                        // the reset tells the client it is incomplete.
                        stream.send_reset(Reason::INTERNAL_ERROR);
                        return Some(sent);
                    }
                }
            }
        }
        Reply::Hijack { socket } => {
            let _ = socket.send(Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "full hijack is not available on HTTP/2",
            )));
            respond.send_reset(Reason::INTERNAL_ERROR);
            None
        }
        Reply::Shed(_) | Reply::Interim { .. } => {
            respond.send_reset(Reason::INTERNAL_ERROR);
            None
        }
    }
}

fn status_has_no_body(response: &Response<()>) -> bool {
    crate::response::status_has_no_body(response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_parts_drops_connection_headers_and_finds_the_body() {
        let bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello";
        let (response, at) = response_parts(bytes).unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(&bytes[at..], b"hello");
        assert_eq!(response.headers()["content-type"], "text/plain");
        assert!(response.headers().get("connection").is_none());
        assert!(response.headers().get("transfer-encoding").is_none());
        assert_eq!(response.headers().get_all("x-a").iter().count(), 2);
    }
}
