//! HTTP/2 connections: `h2` negotiated by ALPN on TLS binds, or cleartext
//! with prior knowledge (h2c) where configured. The `h2` crate does the
//! framing, HPACK and flow control; each stream becomes one request that
//! goes through the same queue, health probes and shedding as HTTP/1.
//!
//! Replies come back from the application threads as for HTTP/1: a head
//! in `name: value` lines (made with `Version::Http2`, so without framing
//! or connection headers) and the body. `response_parts` turns the head
//! into a HEADERS frame; connection-specific headers are dropped there, as
//! RFC 9113 §8.2.2 requires. A streamed body goes out a batch of chunks at
//! a time (`send_stream`), and over TLS the frames of every stream collect
//! in rustls and reach the socket once per pass of the connection task
//! (`h2/io.rs`), not once per frame.

use crate::compress::{accept_encoding, for_client, StreamEncoder};
use crate::dispatch::job::ConnInfo;
use crate::dispatch::queue::Pushed;
use crate::dispatch::reply::Reply;
use crate::dispatch::stream_channel::StreamMsg;
use crate::dispatch::stream_channel::StreamReceiver;
use crate::error::HttpError;
use crate::h2::io::{HeldWrites, Passes};
use crate::health;
use crate::log;
use crate::message::body::{Body, BodySink};
use crate::message::head::{Framing, RequestHead, Version};
use crate::message::response::StreamFraming;
use crate::message::response::{error_response, unavailable_response};
use crate::net::client_io::ClientIo;
use crate::net::linger::{LINGER_BYTES, LINGER_TIME};
use crate::net::rewind::Rewind;
use crate::observe::Finished;
use crate::shared::Shared;
use crate::stats::Stats;
use crate::submit::{accepts_json, await_reply, reply_status, shed, submit, Answer, Submitted};
use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout, timeout_at};
use tokio_rustls::server::TlsStream;

const FILE_CHUNK: usize = 64 * 1024;

/// The client preface every HTTP/2 connection starts with (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What `serve_h2` runs over. Over TLS the codec's writes are held in
/// rustls and written once per pass of the connection task (`h2_io`);
/// h2c (cleartext, prior knowledge) writes as the codec does.
pub(crate) trait H2Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn into_h2_io(self, passes: &Passes) -> Self::Io;
}

impl<T> H2Io for TlsStream<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = HeldWrites<T>;
    fn into_h2_io(self, passes: &Passes) -> HeldWrites<T> {
        HeldWrites::new(self, passes.clone())
    }
}

impl<T: ClientIo> H2Io for Rewind<T> {
    type Io = Self;
    fn into_h2_io(self, _: &Passes) -> Self {
        self
    }
}

pub(crate) async fn serve_h2<T: H2Io>(io: T, conn: Arc<ConnInfo>, shared: Arc<Shared>) {
    let opts = &shared.opts;
    let passes = Passes::default();
    let io = io.into_h2_io(&passes);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(opts.h2_max_concurrent_streams)
        .initial_window_size(opts.h2_initial_window_size)
        .initial_connection_window_size(opts.h2_initial_connection_window_size)
        .max_header_list_size(u32::try_from(opts.max_header_size).unwrap_or(u32::MAX))
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSockets over this
        // connection's streams (RFC 8441, `h2/upgraded.rs`).
        .enable_connect_protocol();
    let mut connection = match timeout(opts.first_data_timeout, builder.handshake::<_, Bytes>(io)).await {
        Ok(Ok(connection)) => connection,
        _ => return,
    };
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let mut draining = false;
    // A pass ends when the connection has nothing more to do (Pending), so
    // streams accepted one after another belong to the same pass.
    let mut new_pass = true;
    loop {
        if !draining && shared.is_stopping() {
            // GOAWAY: streams already open finish, no new ones start.
            connection.graceful_shutdown();
            draining = true;
        }
        let accepted = tokio::select! {
            biased;
            _ = &mut stop, if !draining => continue,
            accepted = std::future::poll_fn(|cx| {
                if new_pass {
                    passes.begin();
                }
                let polled = connection.poll_accept(cx);
                new_pass = polled.is_pending();
                polled
            }) => accepted,
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
    // An extended CONNECT's DATA frames are the WebSocket's, read by the
    // session once the app took the upgrade: not a body to read now.
    let websocket = head
        .protocol
        .is_some()
        .then(|| crate::ws::handshake::check_extended_connect(&head));
    if websocket.is_some() {
        head.framing = Framing::None;
    } else if recv.is_end_stream() && head.framing == Framing::Chunked {
        // HEADERS ended the stream: no body at all, as a GET over HTTP/1.
        head.framing = Framing::None;
    }
    if let (Framing::Length(len), Some(limit)) = (head.framing, shared.opts.max_body_size) {
        if len > limit {
            refuse(&mut respond, &shared, HttpError::PayloadTooLarge).await;
            return drain(&mut recv).await;
        }
    }
    let body = match websocket {
        Some(_) => Body::Empty,
        None => match read_body(&mut recv, &head, &shared).await {
            Ok(body) => body,
            Err(None) => return,
            Err(Some(e)) => {
                refuse(&mut respond, &shared, e).await;
                return drain(&mut recv).await;
            }
        },
    };
    // A probe's 200 would tell a WebSocket client its stream opened.
    if let Some(probe) = websocket.is_none().then(|| health::answer(&head, &shared)).flatten() {
        let _ = send_full(&mut respond, probe.into(), Bytes::new(), &shared).await;
        return;
    }
    Stats::bump(&shared.stats.requests_total);
    let tags = shared.observe.prepare(&mut head);
    let request_body_bytes = body.len();
    let (method, target) = (head.method.clone(), head.target.clone());
    let wants_json = accepts_json(&head);
    let accept_encoding = accept_encoding(shared.compression.as_ref(), &head);
    let public = shared.public.as_ref().and_then(|p| p.answer(&head, true));
    let mut job_state = None;
    let mut replied_at = None;
    let mut declined = false;
    let reply = if let Some(reply) = public {
        reply
    } else {
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
        // A shed has no app time: the engine answered instead.
        replied_at = (shared.observe.is_on() && matches!(answer, Answer::Reply(_))).then(Instant::now);
        job_state = Some(state);
        declined = websocket.is_some() && matches!(&answer, Answer::Reply(r) if !matches!(r, Reply::Upgrade { .. }));
        let reply = match answer {
            Answer::Reply(reply) => reply,
            Answer::Shed(reason) => {
                shed(&shared, reason, (&method, &target, &conn.peer_addr), seq, received_at);
                let data = unavailable_response(reason, wants_json, shared.opts.retry_after, true, Version::Http2);
                Reply::Full {
                    status: 503,
                    data: data.into(),
                    tail: Bytes::new(),
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
        reply
    };
    // Each stream is counted once, however it ends.
    let finished = |status, response_body_bytes| Finished {
        peer: &conn.peer_addr,
        method: &method,
        target: &target,
        version: Version::Http2,
        status,
        request_body_bytes,
        response_body_bytes,
        received_at,
        replied_at,
        state: job_state.as_deref(),
        tags: &tags,
    };
    if declined {
        // A WebSocket the app did not take with `rack.upgrade`: most
        // likely an app that opens WebSockets by full hijack
        // (faye-websocket, ActionCable), which HTTP/2 cannot offer. A
        // browser goes over extended CONNECT whenever the server's
        // SETTINGS allow it, and would fail on the app's 404; resetting
        // the stream with HTTP_1_1_REQUIRED (RFC 9113 §7) makes it retry
        // the WebSocket over HTTP/1.1, where the app's own handshake
        // works, and where a deliberate refusal reaches it all the same.
        shared.observe.finish(&finished(reply_status(&reply), 0));
        respond.send_reset(Reason::HTTP_1_1_REQUIRED);
        return;
    }
    if let Reply::Upgrade { kind, id } = reply {
        // The stream is handed over: counted now, as a 200 (the WebSocket
        // opened) or its refusal, with no body.
        shared
            .observe
            .finish(&finished(crate::h2::upgraded::status(kind, websocket.as_ref()), 0));
        drop((method, target, accept_encoding, job_state, tags));
        return crate::h2::upgraded::serve(respond, recv, kind, id, websocket, &shared).await;
    }
    let (reply, encoder) = for_client(shared.compression.as_ref(), reply, accept_encoding).await;
    let status = reply_status(&reply);
    let reply = shared.observe.tag_reply(reply, &tags);
    let body_bytes = write_reply(&mut respond, reply, encoder, &shared).await;
    shared.observe.finish(&finished(status, body_bytes.unwrap_or(0)));
    if body_bytes.is_none() {
        Stats::bump(&shared.stats.client_disconnects);
    }
}

/// Maps the pseudo-headers onto what the HTTP/1 parser would have produced:
/// `:method`, `:path` (split into path and query), `:authority` (as the
/// host, and as a `host` header when the client sent none), and an
/// extended CONNECT's `:protocol`.
fn request_head(parts: &http::request::Parts, shared: &Shared) -> Result<RequestHead, HttpError> {
    let method = Bytes::copy_from_slice(parts.method.as_str().as_bytes());
    // An extended CONNECT (RFC 8441) names the protocol the stream will
    // carry; the `h2` crate lets it through only on CONNECT, with :scheme
    // and :path. The engine speaks one: WebSocket, offered to the app
    // whatever `supported_http_methods` says (it is the handshake, not a
    // proxy's CONNECT).
    let protocol = parts
        .extensions
        .get::<h2::ext::Protocol>()
        .map(|p| Bytes::copy_from_slice(p.as_str().as_bytes()));
    match &protocol {
        Some(p) if !p.eq_ignore_ascii_case(b"websocket") => {
            return Err(HttpError::NotImplemented("unsupported :protocol in extended CONNECT"));
        }
        Some(_) => {}
        None if !shared.opts.http_methods.allows(&method) => {
            return Err(HttpError::NotImplemented("request method not supported"));
        }
        None => {}
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
        protocol,
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
/// (`net/linger.rs`), lets it finish the upload and read the answer; otherwise
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
    let _ = send_full(respond, bytes.into(), Bytes::new(), shared).await;
}

/// The status line and header lines of an HTTP/1-form head as an HTTP/2
/// response, and where the body starts. Connection-specific headers
/// (RFC 9113 §8.2.2) are dropped.
///
/// The head is one `message/response.rs` (or `error_response`) wrote: `HTTP/1.x
/// NNN reason`, `name: value` lines, an empty line. It is read line by line
/// up to that empty line only (a Full reply's body follows in the same
/// buffer), and the values are slices of `bytes`, not copies. A line that
/// is not a valid header is left out; a head without its end is `None`.
pub(crate) fn response_parts(bytes: &Bytes) -> Option<(Response<()>, usize)> {
    let (status_line, mut at) = next_line(bytes, 0)?;
    let status = match status_line {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', code @ ..] => code.get(..3).filter(|_| {
            // Three digits, then a space (and the reason) or nothing.
            matches!(code.get(3), None | Some(b' '))
        }),
        _ => None,
    };
    let status = StatusCode::from_bytes(status?).ok()?;
    let mut map = HeaderMap::with_capacity(RESPONSE_HEADERS);
    loop {
        let (line, next) = next_line(bytes, at)?;
        if line.is_empty() {
            let mut response = Response::new(());
            *response.status_mut() = status;
            *response.headers_mut() = map;
            return Some((response, next));
        }
        if let Some(colon) = memchr::memchr(b':', line) {
            let raw = &line[colon + 1..];
            let value = raw.trim_ascii();
            let start = at + colon + 1 + (raw.len() - raw.trim_ascii_start().len());
            if let Ok(name) = HeaderName::from_bytes(&line[..colon]) {
                if !is_connection_specific(&name) {
                    let value = HeaderValue::from_maybe_shared(bytes.slice(start..start + value.len()));
                    if let Ok(value) = value {
                        map.append(name, value);
                    }
                }
            }
        }
        at = next;
    }
}

/// Room for this many response headers before the map grows (the
/// benchmark apps send 25 plus date and content-length).
const RESPONSE_HEADERS: usize = 32;

/// The line that starts at `at` without its CRLF (or bare LF), and where
/// the next one starts.
fn next_line(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = bytes.get(at..)?;
    let end = memchr::memchr(b'\n', rest)?;
    let line = &rest[..end];
    Some((line.strip_suffix(b"\r").unwrap_or(line), at + end + 1))
}

fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "proxy-connection" | "te"
    )
}

/// A head and body in one buffer. Returns the body bytes sent, or `None`
/// when the client went away.
async fn send_full(respond: &mut SendResponse<Bytes>, bytes: Bytes, tail: Bytes, shared: &Shared) -> Option<u64> {
    let Some((response, body_at)) = response_parts(&bytes) else {
        respond.send_reset(Reason::INTERNAL_ERROR);
        return None;
    };
    let body = bytes.slice(body_at..);
    let len = (body.len() + tail.len()) as u64;
    let mut stream = respond.send_response(response, len == 0).ok()?;
    let wait = shared.opts.body_timeout;
    if !body.is_empty() {
        send_data(&mut stream, body, tail.is_empty(), wait).await?;
    }
    if !tail.is_empty() {
        send_data(&mut stream, tail, true, wait).await?;
    }
    Some(len)
}

/// Sends `data` as flow control allows: never more than the peer's window,
/// so a slow reader holds the stream back instead of filling memory. The
/// `h2` codec cuts what fits into DATA frames of the peer's frame size.
async fn send_data(stream: &mut SendStream<Bytes>, mut data: Bytes, end: bool, wait: Duration) -> Option<()> {
    if data.is_empty() {
        if end {
            stream.send_data(Bytes::new(), true).ok()?;
        }
        return Some(());
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        // Capacity is usually there at once (the window is open): no wait.
        let mut granted = stream.capacity();
        if granted == 0 {
            granted = match timeout(wait, std::future::poll_fn(|cx| stream.poll_capacity(cx))).await {
                Ok(Some(Ok(n))) => n,
                _ => return None,
            };
            if granted == 0 {
                continue;
            }
        }
        let chunk = data.split_to(granted.min(data.len()));
        stream.send_data(chunk, end && data.is_empty()).ok()?;
    }
    Some(())
}

/// Most chunks taken from a stream's channel at once.
const STREAM_BATCH: usize = 256;

/// A streamed body. Each wake-up takes every chunk the app queued meanwhile
/// (as the HTTP/1 writer does) and sends runs of small ones as one DATA
/// frame (`Coalesced`): each frame is a write of its own in the `h2` codec
/// (and a TLS record), so a body of many small pieces would otherwise cost
/// a syscall per piece. A chunk the app wrote before pausing still goes out
/// at once. The end of the body rides on the last DATA frame when it is in
/// the same batch. Returns the body bytes sent, `None` if the client left.
async fn send_stream(
    stream: &mut SendStream<Bytes>,
    chunks: &mut StreamReceiver,
    mut encoder: Option<StreamEncoder>,
    declared: Option<u64>,
    wait: Duration,
) -> Option<u64> {
    let mut batch = Vec::with_capacity(STREAM_BATCH);
    let mut pieces = Coalesced::default();
    let mut sent = 0u64;
    loop {
        if !chunks.recv_batch(&mut batch, STREAM_BATCH).await {
            // The body failed (the sender went without `End`): the reset
            // tells the client it is incomplete.
            stream.send_reset(Reason::INTERNAL_ERROR);
            return Some(sent);
        }
        if let Some(encoder) = encoder.as_mut() {
            if encoder.encode(&mut batch).await.is_err() {
                log::error("compressing a streamed body failed; resetting the stream");
                stream.send_reset(Reason::INTERNAL_ERROR);
                return Some(sent);
            }
        }
        let mut ended = false;
        for msg in batch.drain(..) {
            match msg {
                StreamMsg::Data(mut data) if !ended => {
                    if let Some(limit) = declared {
                        data.truncate(limit.saturating_sub(sent).min(data.len() as u64) as usize);
                    }
                    sent += data.len() as u64;
                    pieces.push(data);
                }
                StreamMsg::Data(_) => {}
                StreamMsg::End => ended = true,
            }
        }
        let complete = ended && declared.is_none_or(|l| l == sent);
        let frames = pieces.take();
        let count = frames.len();
        for (i, data) in frames.into_iter().enumerate() {
            send_data(stream, data, complete && i + 1 == count, wait).await?;
        }
        if complete {
            if count == 0 {
                send_data(stream, Bytes::new(), true, wait).await?;
            }
            return Some(sent);
        }
        if ended {
            // Shorter than its content-length: the reset tells the client.
            stream.send_reset(Reason::INTERNAL_ERROR);
            return Some(sent);
        }
    }
}

/// Runs of small chunks are merged up to this size: the default (and
/// usual) SETTINGS_MAX_FRAME_SIZE, so a merged run is one DATA frame.
const COALESCE: usize = 16 * 1024;

/// Body chunks in order, consecutive small ones merged into pieces of at
/// most `COALESCE` bytes (one copy); a chunk alone in its run, or as large
/// as `COALESCE`, goes as it is.
#[derive(Default)]
struct Coalesced {
    out: Vec<Bytes>,
    run: Vec<Bytes>,
    run_len: usize,
}

impl Coalesced {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if self.run_len + data.len() > COALESCE {
            self.close_run();
        }
        if data.len() >= COALESCE {
            self.out.push(data);
        } else {
            self.run_len += data.len();
            self.run.push(data);
        }
    }

    fn close_run(&mut self) {
        if self.run.len() > 1 {
            let mut merged = BytesMut::with_capacity(self.run_len);
            for piece in self.run.drain(..) {
                merged.extend_from_slice(&piece);
            }
            self.out.push(merged.freeze());
        } else {
            self.out.append(&mut self.run);
        }
        self.run_len = 0;
    }

    /// Everything pushed since the last call, in order.
    fn take(&mut self) -> Vec<Bytes> {
        self.close_run();
        std::mem::take(&mut self.out)
    }
}

async fn write_reply(
    respond: &mut SendResponse<Bytes>,
    reply: Reply,
    encoder: Option<StreamEncoder>,
    shared: &Shared,
) -> Option<u64> {
    let wait = shared.opts.body_timeout;
    match reply {
        Reply::Full { data, tail, .. } => send_full(respond, data, tail, shared).await,
        Reply::File {
            head,
            file,
            offset,
            len,
            ..
        } => {
            let (response, _) = response_parts(&head)?;
            let mut stream = respond.send_response(response, len == 0).ok()?;
            // DATA frames carry the bytes, so they pass through the engine.
            Stats::bump(&shared.stats.files_copied);
            let mut sent = 0u64;
            while sent < len {
                let want = (len - sent).min(FILE_CHUNK as u64) as usize;
                let mut chunk = vec![0u8; want];
                let n = match file.read_at(&mut chunk, offset + sent) {
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
            send_stream(&mut stream, &mut chunks, encoder, declared, wait).await
        }
        Reply::Hijack { socket } => {
            let _ = socket.send(Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "full hijack is not available on HTTP/2",
            )));
            respond.send_reset(Reason::INTERNAL_ERROR);
            None
        }
        Reply::Upgrade { id, .. } => {
            // Handed to `h2/upgraded.rs` before this is called.
            crate::upgrade::abandon(&shared.upgrades, &shared.upgrade_events, id);
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
    crate::message::response::status_has_no_body(response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_parts_drops_connection_headers_and_finds_the_body() {
        let bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello";
        let bytes = Bytes::from_static(bytes);
        let (response, at) = response_parts(&bytes).unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(&bytes[at..], b"hello");
        assert_eq!(response.headers()["content-type"], "text/plain");
        assert!(response.headers().get("connection").is_none());
        assert!(response.headers().get("transfer-encoding").is_none());
        assert_eq!(response.headers().get_all("x-a").iter().count(), 2);
    }

    #[test]
    fn response_parts_reads_the_heads_the_engine_writes() {
        let head = |text: &'static [u8]| response_parts(&Bytes::from_static(text));
        // Values are trimmed; an empty value is kept; the body may hold
        // anything, header-like lines included.
        let bytes = Bytes::from_static(b"HTTP/1.1 404 Not Found\r\nx-v:  a b \t\r\nx-e:\r\n\r\nx-not: header\r\n\r\n");
        let (response, at) = response_parts(&bytes).unwrap();
        assert_eq!(response.status(), 404);
        assert_eq!(response.headers()["x-v"], "a b");
        assert_eq!(response.headers()["x-e"], "");
        assert_eq!(response.headers().len(), 2);
        assert_eq!(&bytes[at..], b"x-not: header\r\n\r\n");
        // A head without a body, a reason-less status line, bare LFs.
        let (response, at) = head(b"HTTP/1.1 204\nx: 1\n\n").unwrap();
        assert_eq!((response.status().as_u16(), at), (204, 19));
        let (response, _) = head(b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n").unwrap();
        assert_eq!(response.status(), 103);
        assert_eq!(response.headers()["link"], "</a.css>; rel=preload");
        // Lines that are no header are left out; a head cut short or a bad
        // status line is no head at all.
        let (response, _) = head(b"HTTP/1.1 200 OK\r\nbad name: 1\r\nno colon\r\nok: 1\r\n\r\n").unwrap();
        assert_eq!(response.headers().len(), 1);
        assert!(head(b"HTTP/1.1 200 OK\r\nx: 1\r\n").is_none());
        assert!(head(b"HTTP/1.1 20 OK\r\n\r\n").is_none());
        assert!(head(b"HTTP/1.1 2000 OK\r\n\r\n").is_none());
        assert!(head(b"ICY 200 OK\r\n\r\n").is_none());
        assert!(head(b"").is_none());
    }

    #[test]
    fn response_parts_shares_the_buffer_for_values() {
        let bytes = Bytes::from(b"HTTP/1.1 200 OK\r\nx-long: 0123456789\r\n\r\nbody".to_vec());
        let (response, _) = response_parts(&bytes).unwrap();
        let value = response.headers()["x-long"].as_bytes();
        let within = bytes.as_ptr_range();
        assert!(
            within.contains(&value.as_ptr()),
            "the value is a slice of the head, not a copy"
        );
    }

    fn coalesce(chunks: &[&[u8]]) -> Vec<Bytes> {
        let mut pieces = Coalesced::default();
        for chunk in chunks {
            pieces.push(Bytes::copy_from_slice(chunk));
        }
        pieces.take()
    }

    #[test]
    fn small_chunks_merge_up_to_a_frame_and_keep_their_order() {
        let big = vec![b'b'; COALESCE];
        let near = vec![b'n'; COALESCE - 2];
        let pieces = coalesce(&[b"a", b"", b"bc", &near, b"d", &big, b"e", b"f"]);
        let lens: Vec<usize> = pieces.iter().map(Bytes::len).collect();
        // "a" and "bc" merge; `near` would take that run past COALESCE, so
        // it starts the next one, which "d" joins; `big` goes alone.
        assert_eq!(lens, vec![3, COALESCE - 1, COALESCE, 2]);
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let expected: Vec<u8> = [&b"abc"[..], &near, b"d", &big, b"ef"].concat();
        assert_eq!(joined, expected);
        // Nothing pushed, nothing taken; the state is clear after a take.
        let mut pieces = Coalesced::default();
        assert!(pieces.take().is_empty());
        pieces.push(Bytes::from_static(b"x"));
        assert_eq!(pieces.take(), vec![Bytes::from_static(b"x")]);
        assert!(pieces.take().is_empty());
    }

    #[test]
    fn a_chunk_alone_in_its_run_is_not_copied() {
        let chunk = Bytes::from(vec![7u8; 100]);
        let mut pieces = Coalesced::default();
        pieces.push(chunk.clone());
        let big = Bytes::from(vec![8u8; COALESCE]);
        pieces.push(big.clone());
        let taken = pieces.take();
        assert_eq!(taken[0].as_ptr(), chunk.as_ptr());
        assert_eq!(taken[1].as_ptr(), big.as_ptr());
    }
}
