//! One task per client connection: read a whole request, queue it, wait for
//! the application's reply, write it, repeat while keep-alive holds.
//! No Ruby runs here and nothing here waits on the GVL.

use crate::compress::{accept_encoding, for_client, StreamEncoder};
use crate::dispatch::job::ConnInfo;
use crate::dispatch::queue::Pushed;
use crate::dispatch::reply::Reply;
use crate::error::HttpError;
use crate::health;
use crate::http1::chunked::{ChunkedDecoder, Decoded};
use crate::http1::parse::parse_head;
use crate::http1::stream_frames;
use crate::log;
use crate::message::body::{Body, BodySink};
use crate::message::head::{Framing, RequestHead};
use crate::message::response::StreamFraming;
use crate::message::response::{error_response, unavailable_response};
use crate::net::client_io::{send, send_head_more, send_parts, within, ClientIo, READ_CHUNK};
use crate::net::linger::linger;
use crate::observe::Finished;
use crate::shared::Shared;
use crate::stats::Stats;
use crate::submit::{accepts_json, await_reply, reply_status, shed, submit, Answer, Submitted};
use bytes::{Bytes, BytesMut};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep_until, timeout, timeout_at, Sleep};

/// How long a stopping server waits for the first request of a connection
/// it accepted just before the stop (see `read_head`).
const FIRST_REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a stopping server keeps a kept-alive connection that sits
/// between requests, for a request its client may already have sent (see
/// `read_head`).
const IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);
const FILE_CHUNK: usize = 64 * 1024;
/// At most this much per sendfile(2) call: a socket takes far less at a
/// time anyway, and a cold file's disk reads stay short on the runtime's
/// thread.
const SENDFILE_CHUNK: u64 = 1024 * 1024;
/// Files up to this size are read and written with their head in one
/// write instead of sent with sendfile.
const SMALL_FILE: u64 = 32 * 1024;
/// At most this many messages of a streamed body per write: two iovecs
/// each stay well under IOV_MAX (1024), and the channel's byte limit
/// already bounds the size.
const STREAM_BATCH: usize = 256;

enum ReadError {
    Http(HttpError),
    Io,
}

impl From<HttpError> for ReadError {
    fn from(e: HttpError) -> Self {
        ReadError::Http(e)
    }
}

enum Written {
    KeepAlive(bool),
    Failed,
}

/// `buf` may already hold the start of the first request (read while
/// looking for an HTTP/2 preface on an h2c bind).
pub(crate) async fn serve<T: ClientIo>(mut io: T, conn: Arc<ConnInfo>, shared: Arc<Shared>, mut buf: BytesMut) {
    let mut served: u64 = 0;
    // Registered with the stop signal once for the connection's life, not
    // once per wait between requests (a lock to join the waiters and one to
    // leave, per request); once a stop has fired it stays ready.
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    // The keep-alive wait's timer, made at the first wait and moved along
    // for each next one (see `read_head`).
    let mut idle = None;
    loop {
        let mut head = match read_head(&mut io, &mut buf, &shared, served, stop.as_mut(), &mut idle).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(ReadError::Io) => {
                // Bytes of a head were read: a request was cut short, not
                // an idle connection reset.
                if !buf.is_empty() {
                    Stats::bump(&shared.stats.client_disconnects);
                }
                return;
            }
            Err(ReadError::Http(e)) => return refuse(&mut io, &mut buf, &shared, &conn, e).await,
        };
        served += 1;
        let received_at = Instant::now();
        // With `supported_http_methods` set the parser took any method.
        if !shared.limits.known_methods_only && !shared.opts.http_methods.allows(&head.method) {
            let e = HttpError::NotImplemented("request method not supported");
            return refuse(&mut io, &mut buf, &shared, &conn, e).await;
        }
        // `websocket_workers`: the connection goes to a WebSocket worker,
        // this request first; served here if it cannot.
        if let Some(target) = shared.handoff.as_ref().filter(|target| target.takes(&head)) {
            if let Some(fd) = io.plain_socket() {
                match target.send(fd, &conn, &head, &buf) {
                    Ok(()) => {
                        Stats::bump(&shared.stats.handoffs_sent);
                        return;
                    }
                    Err(e) => {
                        Stats::bump(&shared.stats.handoffs_failed);
                        if shared.opts.log_requests {
                            log::warn(&format!("{} served here: {e}", conn.peer_addr));
                        }
                    }
                }
            }
        }
        // `max_keep_alive`: the response to the last request allowed
        // closes the connection, as Puma does.
        let within_limit = shared.opts.max_keep_alive.is_none_or(|max| served < max);
        if let (Framing::Length(len), Some(limit)) = (head.framing, shared.opts.max_body_size) {
            // Before any 100 Continue: a client that asked first must hear
            // the refusal instead of an invitation to send the body.
            if len > limit {
                return refuse(&mut io, &mut buf, &shared, &conn, HttpError::PayloadTooLarge).await;
            }
        }
        if head.expect_continue
            && head.framing != Framing::None
            && buf.is_empty()
            && send(&mut io, b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        let body = match read_body(&mut io, &mut buf, &head, &shared).await {
            Ok(body) => body,
            Err(ReadError::Io) => {
                Stats::bump(&shared.stats.client_disconnects);
                return;
            }
            Err(ReadError::Http(e)) => return refuse(&mut io, &mut buf, &shared, &conn, e).await,
        };
        if let Some(probe) = health::answer(&head, &shared) {
            // Probes are answered here and never reach the queue.
            let keep = head.keep_alive && within_limit && !shared.is_leaving();
            if !matches!(
                timeout(shared.opts.body_timeout, send(&mut io, &probe)).await,
                Ok(Ok(()))
            ) || !keep
            {
                return;
            }
            continue;
        }
        Stats::bump(&shared.stats.requests_total);
        let tags = shared.observe.prepare(&mut head);
        let request_body_bytes = body.len();
        // Kept (two reference counts, no copy) for the access log and for
        // the log line of a refused request; formatted only when written.
        let (method, target) = (head.method.clone(), head.target.clone());
        let wants_json = accepts_json(&head);
        let keep_alive = head.keep_alive && within_limit && !shared.is_leaving();
        let version = head.version;
        // The public folder answers first; whatever it does not have goes
        // on to the app.
        let accept_encoding = accept_encoding(shared.compression.as_ref(), &head);
        // Checked now, while the head is here: the app may take the
        // upgrade (`rack.upgrade`) once the head has gone to Ruby.
        let websocket = crate::ws::handshake::is_upgrade_request(&head).then(|| crate::ws::handshake::check(&head));
        let public = shared.public.as_ref().and_then(|p| p.answer(&head, keep_alive));
        let mut job_state = None;
        let mut replied_at = None;
        let reply = if let Some(reply) = public {
            reply
        } else {
            let submitted = submit(&shared, head, body, &conn, keep_alive, received_at, &target);
            let Some(Submitted { mut answer, state, seq }) = submitted.await else {
                return refuse(
                    &mut io,
                    &mut buf,
                    &shared,
                    &conn,
                    HttpError::Internal("server is shutting down"),
                )
                .await;
            };
            while let Answer::Reply(Reply::Interim { head, next }) = answer {
                // An HTTP/1.0 client would take a 1xx for the response itself
                // (RFC 9110 §15.2), so it never sees one.
                if version == crate::message::head::Version::Http11
                    && !matches!(
                        timeout(shared.opts.body_timeout, send(&mut io, &head)).await,
                        Ok(Ok(()))
                    )
                {
                    Stats::bump(&shared.stats.client_disconnects);
                    return;
                }
                answer = await_reply(next, Pushed::Done, &state, seq, received_at, &shared).await;
            }
            // A shed has no app time: the engine answered instead.
            replied_at = (shared.observe.is_on() && matches!(answer, Answer::Reply(_))).then(Instant::now);
            job_state = Some(state);
            let reply = match answer {
                Answer::Reply(reply) => reply,
                Answer::Shed(reason) => {
                    shed(&shared, reason, (&method, &target, &conn.peer_addr), seq, received_at);
                    Reply::Full {
                        status: 503,
                        data: unavailable_response(reason, wants_json, shared.opts.retry_after, keep_alive, version)
                            .into(),
                        tail: Bytes::new(),
                        body_len: 0,
                        close: !keep_alive,
                    }
                }
                Answer::Dropped => {
                    log::error("an application thread dropped a request without answering it");
                    return refuse(
                        &mut io,
                        &mut buf,
                        &shared,
                        &conn,
                        HttpError::Internal("no response from the application"),
                    )
                    .await;
                }
            };
            reply
        };
        // Each request is counted once, however it ends; one whose
        // connection leaves the HTTP loop (upgrade, hijack) when it leaves:
        // 101 (200 for SSE), no body.
        let finished = |status, response_body_bytes| Finished {
            peer: &conn.peer_addr,
            method: &method,
            target: &target,
            version,
            status,
            request_body_bytes,
            response_body_bytes,
            received_at,
            replied_at,
            state: job_state.as_deref(),
            tags: &tags,
        };
        if let Reply::Upgrade { kind, id } = reply {
            shared.observe.finish(&finished(reply_status(&reply), 0));
            // These share the request's read buffer (16 KiB); held across
            // the session's await they would keep it for the life of an
            // idle WebSocket.
            drop((method, target, accept_encoding));
            return crate::http1::upgraded::serve(io, buf, kind, id, websocket, &shared).await;
        }
        let (reply, encoder) = for_client(shared.compression.as_ref(), reply, accept_encoding).await;
        // The stop (or its lame-duck period) may have begun while the app
        // ran: the head it made would keep the connection open.
        let reply = if shared.is_leaving() {
            crate::http1::closing::closing(reply)
        } else {
            reply
        };
        let status = reply_status(&reply);
        let reply = shared.observe.tag_reply(reply, &tags);
        let (written, body_bytes) = match reply {
            Reply::Hijack { socket } => {
                shared.observe.finish(&finished(status, 0));
                let _ = socket.send(io.into_owned_fd());
                return;
            }
            other => write_reply(&mut io, other, encoder, &shared).await,
        };
        shared.observe.finish(&finished(status, body_bytes));
        match written {
            Written::KeepAlive(true) if !shared.is_leaving() => continue,
            Written::KeepAlive(_) => {
                let _ = io.shutdown().await;
                return;
            }
            Written::Failed => {
                Stats::bump(&shared.stats.client_disconnects);
                return;
            }
        }
    }
}

/// Answers a request the engine will not pass on, then closes: after a
/// framing error nothing later on the connection can be trusted. The close
/// lingers (see `linger`) so a client still sending gets to read the answer.
async fn refuse<T: ClientIo>(io: &mut T, buf: &mut BytesMut, shared: &Shared, conn: &ConnInfo, error: HttpError) {
    match error {
        HttpError::Unavailable(reason) => {
            // Under load: logged whatever log_requests says (see `shed`).
            shared.stats.shed(reason);
            log::warn(&format!("503 {} from {}", reason.as_str(), conn.peer_addr));
        }
        HttpError::RequestTimeout => Stats::bump(&shared.stats.read_timeouts),
        HttpError::SpoolFailed => Stats::bump(&shared.stats.spool_errors),
        _ => Stats::bump(&shared.stats.rejected_total),
    }
    if shared.opts.log_requests && !matches!(error, HttpError::Unavailable(_)) {
        log::warn(&format!("{} refused: {}", conn.peer_addr, error));
    }
    let bytes = match error {
        HttpError::Unavailable(reason) => unavailable_response(
            reason,
            false,
            shared.opts.retry_after,
            false,
            crate::message::head::Version::Http11,
        ),
        other => error_response(other.status(), other.detail()),
    };
    if !matches!(timeout(shared.opts.body_timeout, send(io, &bytes)).await, Ok(Ok(()))) {
        // The client does not take the answer: nothing to linger for.
        return;
    }
    if io.shutdown().await.is_ok() {
        linger(io, buf, shared).await;
    }
}

/// Reads until a whole head is parsed. `Ok(None)` is a clean end: the client
/// closed, stayed idle past the keep-alive timeout, or the server is
/// stopping while the connection sat between requests.
async fn read_head<T: ClientIo>(
    io: &mut T,
    buf: &mut BytesMut,
    shared: &Shared,
    served: u64,
    mut stop: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    idle: &mut Option<std::pin::Pin<Box<Sleep>>>,
) -> Result<Option<RequestHead>, ReadError> {
    let idle_timeout = if served == 0 {
        shared.opts.first_data_timeout
    } else {
        shared.opts.persistent_timeout
    };
    let mut head_deadline = None;
    loop {
        if !buf.is_empty() {
            if let Some(head) = parse_head(buf, &shared.limits)? {
                return Ok(Some(head));
            }
        }
        buf.reserve(READ_CHUNK);
        if buf.is_empty() {
            // Between requests: the only place a draining server may close
            // a connection without cutting a request short. A connection
            // accepted just before the stop has not been read from yet, but
            // its client connected to send a request (often already in the
            // socket buffer): it gets FIRST_REQUEST_GRACE to arrive, or a
            // restart would fail that request. A kept-alive connection gets
            // IDLE_GRACE: a proxy that pools connections may be sending on
            // it at the very moment of a close, and would lose that request
            // (seen behind HAProxy with `http-reuse always` during rolling
            // restarts); one that arrives is served with `connection: close`.
            let grace = if served == 0 { FIRST_REQUEST_GRACE } else { IDLE_GRACE };
            let read = if shared.is_stopping() {
                timeout(idle_timeout.min(grace), io.read_buf(buf)).await.ok()
            } else {
                // One timer for all of a connection's waits: a later
                // deadline only moves it (an atomic store; the wheel sees
                // it once, when the old deadline comes), where a timeout
                // per wait put an entry in the timer wheel and took it out
                // again for every request on a kept-alive connection.
                let deadline = tokio::time::Instant::now() + idle_timeout;
                let timer = idle.get_or_insert_with(|| Box::pin(sleep_until(deadline)));
                timer.as_mut().reset(deadline);
                tokio::select! {
                    biased;
                    read = io.read_buf(buf) => Some(read),
                    _ = timer.as_mut() => None,
                    _ = stop.as_mut() => timeout(idle_timeout.min(grace), io.read_buf(buf)).await.ok(),
                }
            };
            match read {
                Some(Ok(0)) | None => return Ok(None),
                Some(Ok(_)) => {}
                Some(Err(_)) => return Err(ReadError::Io),
            }
        } else {
            // The whole head must arrive within first_data_timeout of its
            // first byte, so dribbling a byte at a time buys nothing.
            let deadline =
                *head_deadline.get_or_insert_with(|| tokio::time::Instant::now() + shared.opts.first_data_timeout);
            match timeout_at(deadline, io.read_buf(buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Err(ReadError::Io),
                Ok(Ok(_)) => {}
                Err(_) => return Err(ReadError::Http(HttpError::RequestTimeout)),
            }
        }
    }
}

async fn read_more<T: ClientIo>(io: &mut T, buf: &mut BytesMut, shared: &Shared) -> Result<(), ReadError> {
    buf.reserve(READ_CHUNK);
    match timeout(shared.opts.body_timeout, io.read_buf(buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Err(ReadError::Io),
        Ok(Ok(_)) => Ok(()),
        Err(_) => Err(ReadError::Http(HttpError::RequestTimeout)),
    }
}

async fn read_body<T: ClientIo>(
    io: &mut T,
    buf: &mut BytesMut,
    head: &RequestHead,
    shared: &Shared,
) -> Result<Body, ReadError> {
    let limit = shared.opts.max_body_size;
    match head.framing {
        Framing::None | Framing::Length(0) => Ok(Body::Empty),
        Framing::Length(len) => {
            // A declared length over the limit was refused in `serve`.
            if len <= shared.opts.spool_threshold {
                // The common small body: wait until it is all buffered, then
                // cut it out without a copy.
                while (buf.len() as u64) < len {
                    read_more(io, buf, shared).await?;
                }
                return Ok(Body::Memory(buf.split_to(len as usize).freeze()));
            }
            let mut sink = BodySink::new(Some(len), shared.opts.spool_threshold, limit, &shared.spool_gate)?;
            let mut remaining = len;
            loop {
                let take = remaining.min(buf.len() as u64) as usize;
                if take > 0 {
                    sink.push(&buf.split_to(take))?;
                    remaining -= take as u64;
                }
                if remaining == 0 {
                    return Ok(sink.finish()?);
                }
                read_more(io, buf, shared).await?;
            }
        }
        Framing::Chunked => {
            let mut sink = BodySink::new(None, shared.opts.spool_threshold, limit, &shared.spool_gate)?;
            let mut decoder = ChunkedDecoder::new(shared.opts.max_header_size);
            loop {
                match decoder.decode(buf)? {
                    Decoded::Data(data) => sink.push(&data)?,
                    Decoded::Done => return Ok(sink.finish()?),
                    Decoded::NeedMore => read_more(io, buf, shared).await?,
                }
            }
        }
    }
}

/// Writes a reply; returns whether the connection may be reused and how
/// many body bytes went out.
async fn write_reply<T: ClientIo>(
    io: &mut T,
    reply: Reply,
    encoder: Option<StreamEncoder>,
    shared: &Shared,
) -> (Written, u64) {
    let write_timeout = shared.opts.body_timeout;
    match reply {
        Reply::Full {
            data,
            tail,
            body_len,
            close,
            ..
        } => match within(write_timeout, send_full(io, data, tail)).await {
            Ok(Ok(())) => (Written::KeepAlive(!close), body_len),
            _ => (Written::Failed, 0),
        },
        Reply::File {
            head,
            file,
            offset,
            len,
            close,
            ..
        } => write_file(io, head, file, offset..offset + len, close, shared).await,
        Reply::Stream {
            head,
            chunks,
            framing,
            close,
            ..
        } => write_stream(io, head, chunks, encoder, framing, close, shared).await,
        Reply::Hijack { .. } | Reply::Shed(_) | Reply::Interim { .. } | Reply::Upgrade { .. } => (Written::Failed, 0),
    }
}

/// A whole reply: one write, or one vectored write when the body has a
/// tail of its own.
async fn send_full<T: ClientIo>(io: &mut T, data: Bytes, tail: Bytes) -> std::io::Result<()> {
    if tail.is_empty() {
        send(io, &data).await
    } else {
        send_parts(io, &[data, tail]).await
    }
}

async fn write_file<T: ClientIo>(
    io: &mut T,
    head: Bytes,
    file: std::fs::File,
    region: std::ops::Range<u64>,
    close: bool,
    shared: &Shared,
) -> (Written, u64) {
    let write_timeout = shared.opts.body_timeout;
    let len = region.end - region.start;
    if len <= SMALL_FILE {
        // Small files go out with their head in one write: one syscall and
        // one packet, where sendfile would add a second of each.
        Stats::bump(&shared.stats.files_copied);
        let mut data = Vec::with_capacity(head.len() + len as usize);
        data.extend_from_slice(&head);
        data.resize(head.len() + len as usize, 0);
        let body = &mut data[head.len()..];
        if file.read_exact_at(body, region.start).is_err() {
            // Nothing was sent yet: the head that promised `len` bytes
            // goes out with the ones the file still has, then the close.
            let got = read_some_at(&file, body, region.start);
            let _ = timeout(write_timeout, send(io, &data[..head.len() + got])).await;
            log::error("file body ended before its length; closing the connection");
            return (Written::Failed, got as u64);
        }
        return match timeout(write_timeout, send(io, &data)).await {
            Ok(Ok(())) => (Written::KeepAlive(!close), len),
            _ => (Written::Failed, 0),
        };
    }
    let head_sent = if T::SENDS_FILES {
        timeout(write_timeout, send_head_more(io, &head)).await
    } else {
        timeout(write_timeout, send(io, &head)).await
    };
    if !matches!(head_sent, Ok(Ok(()))) {
        return (Written::Failed, 0);
    }
    let sent = if T::SENDS_FILES {
        Stats::bump(&shared.stats.files_sendfile);
        send_file_in_kernel(io, &file, region, write_timeout).await
    } else {
        Stats::bump(&shared.stats.files_copied);
        read_and_send_file(io, &file, region, write_timeout).await
    };
    match sent {
        FileSent::All => (Written::KeepAlive(!close), len),
        FileSent::Short(sent) => {
            // The head promised `len` bytes: ending the connection is the
            // only way to tell the client the body is incomplete.
            log::error("file body ended before its length; closing the connection");
            (Written::Failed, sent)
        }
        FileSent::Failed(sent) => (Written::Failed, sent),
    }
}

/// How many bytes of `buf` the file has from `offset` (it shrank).
fn read_some_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}

enum FileSent {
    All,
    /// The file ended (it shrank) after this many body bytes.
    Short(u64),
    /// The client went away or stopped reading after this many body bytes.
    Failed(u64),
}

/// Plain sockets: sendfile(2), the bytes never enter user space. Each call
/// sends what the socket buffer takes, so the write timeout bounds the
/// wait for progress, not the whole body.
async fn send_file_in_kernel<T: ClientIo>(
    io: &mut T,
    file: &std::fs::File,
    region: std::ops::Range<u64>,
    write_timeout: std::time::Duration,
) -> FileSent {
    let mut offset = region.start;
    while offset < region.end {
        let want = (region.end - offset).min(SENDFILE_CHUNK) as usize;
        let step = std::future::poll_fn(|cx| io.poll_send_file(cx, file, &mut offset, want));
        match timeout(write_timeout, step).await {
            Ok(Ok(0)) => return FileSent::Short(offset - region.start),
            Ok(Ok(_)) => {}
            _ => return FileSent::Failed(offset - region.start),
        }
    }
    FileSent::All
}

/// TLS: the bytes must pass through rustls, so they are read and written.
async fn read_and_send_file<T: ClientIo>(
    io: &mut T,
    file: &std::fs::File,
    region: std::ops::Range<u64>,
    write_timeout: std::time::Duration,
) -> FileSent {
    let len = region.end - region.start;
    let mut sent: u64 = 0;
    let mut chunk = vec![0u8; FILE_CHUNK];
    while sent < len {
        let want = (len - sent).min(FILE_CHUNK as u64) as usize;
        // Served files are read through the page cache; a blocking-pool hop
        // per 64 KiB would cost more than the read.
        let n = match file.read_at(&mut chunk[..want], region.start + sent) {
            Ok(0) | Err(_) => return FileSent::Short(sent),
            Ok(n) => n,
        };
        if !matches!(timeout(write_timeout, send(io, &chunk[..n])).await, Ok(Ok(()))) {
            return FileSent::Failed(sent);
        }
        sent += n as u64;
    }
    FileSent::All
}

async fn write_stream<T: ClientIo>(
    io: &mut T,
    head: Bytes,
    mut chunks: crate::dispatch::stream_channel::StreamReceiver,
    mut encoder: Option<StreamEncoder>,
    framing: StreamFraming,
    close: bool,
    shared: &Shared,
) -> (Written, u64) {
    let write_timeout = shared.opts.body_timeout;
    let mut batch = Vec::with_capacity(STREAM_BATCH);
    let mut parts = Vec::with_capacity(2 * STREAM_BATCH + 2);
    // The head goes out now, with whatever the app has already written.
    chunks.try_recv_batch(&mut batch, STREAM_BATCH);
    parts.push(head);
    let mut sent: u64 = 0;
    loop {
        if let Some(encoder) = encoder.as_mut() {
            if encoder.encode(&mut batch).await.is_err() {
                log::error("compressing a streamed body failed; closing the connection");
                return (Written::Failed, sent);
            }
        }
        let encoded = stream_frames::encode(&mut batch, framing, sent, &mut parts);
        if !matches!(timeout(write_timeout, send_parts(io, &parts)).await, Ok(Ok(()))) {
            return (Written::Failed, sent);
        }
        parts.clear();
        sent += encoded.body_len;
        if encoded.ended {
            return match framing {
                StreamFraming::Chunked => (Written::KeepAlive(!close), sent),
                StreamFraming::Raw { declared_len } => {
                    let complete = declared_len.is_none_or(|l| l == sent);
                    if !complete {
                        log::error("streamed body length differs from its content-length; closing the connection");
                    }
                    (Written::KeepAlive(!close && complete && declared_len.is_some()), sent)
                }
            };
        }
        // Everything queued while the last write ran goes in the next one;
        // a chunk the app wrote before pausing is never held back.
        if !chunks.recv_batch(&mut batch, STREAM_BATCH).await {
            // The body raised or was abandoned: cut the response short so
            // the client sees an incomplete body rather than a whole one.
            return (Written::KeepAlive(false), sent);
        }
    }
}
