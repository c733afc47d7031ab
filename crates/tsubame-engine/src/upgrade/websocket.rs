//! A WebSocket after its handshake: client frames decoded into messages
//! for the handler (one at a time: the socket is not read while Ruby has a
//! message, so a fast client is slowed by TCP instead of filling memory),
//! what Ruby wrote sent as frames, pings answered and sent, and the close
//! handshake, whichever side starts it.

use super::{write, EventKind, Out, Outbound, Session};
use crate::ws::close::close_payload;
use crate::ws::deflate::{inflate, with_deflater};
use crate::ws::frame::{encode, encode_compressed, OpCode};
use crate::ws::message::{Decoder, Limits, Message};
use bytes::BytesMut;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// How long the engine waits for the client's close frame after sending
/// its own, before it drops the connection.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Read room per connection: small, because idle connections keep it; a
/// larger frame gets room for itself once its header is read (the
/// decoder reserves it, up to 64 KiB ahead).
const READ_CHUNK: usize = 256;

/// Where the session is.
#[derive(PartialEq, Eq)]
enum Phase {
    Open,
    /// A stop began: `on_shutdown` runs, then the engine closes with 1001.
    ShuttingDown,
    /// Our close frame is out; waiting for the client's until the instant.
    Closing(Instant),
}

/// Runs the connection from the 101 response (`handshake`) to its end;
/// `buf` holds whatever the client sent after its request. `deflate`:
/// permessage-deflate was accepted in `handshake` (`ws/deflate.rs`).
/// `direct`: `io` is this plain socket, which Ruby's writes may go to
/// straight while nothing else is in flight (`registry.rs`); None for TLS,
/// HTTP/2 streams and compressed sessions, whose frames only the task can
/// make.
pub async fn run<T: AsyncRead + AsyncWrite + Unpin>(
    io: &mut T,
    mut buf: BytesMut,
    handshake: &[u8],
    deflate: bool,
    direct: Option<RawFd>,
    s: Session<'_>,
) {
    if write(io, handshake).await.is_err() {
        return s.finish();
    }
    // After the handshake: no frame may go out before the 101. The guard
    // lives in this future, which borrows `io`, so it ends before the
    // socket can be closed.
    let _direct = direct.filter(|_| !deflate).map(|fd| s.out.direct_writes(fd));
    let mut decoder = Decoder::new(Limits {
        max_frame: s.settings.max_frame,
        max_message: s.settings.max_message,
    });
    decoder.set_rsv1_allowed(deflate);
    let mut frames = BytesMut::new();
    let mut taken = Vec::new();
    let mut phase = Phase::Open;
    let mut shutdown_asked = false;
    // Everything written went out; on_drained is due once Ruby is free.
    let mut drained_due = false;
    let mut last_heard = Instant::now();
    let mut ping_out = false;
    let mut rate = Rate::new(s.settings.max_rate);
    s.event(EventKind::Open, None);
    let mut waiting = true;
    // Made once and kept: a broadcast wakes every connection, and a new
    // timer and stop waiter per wake-up cost more than the frame itself.
    let stopped = s.stopped();
    tokio::pin!(stopped);
    let timer = tokio::time::sleep_until(last_heard.into());
    tokio::pin!(timer);
    'session: loop {
        // Messages already read, while Ruby is free for the next one.
        while !waiting && phase != Phase::ShuttingDown {
            match decoder.decode(&mut buf) {
                Ok(Some(Message::Text(data))) | Ok(Some(Message::Binary(data))) if !matches!(phase, Phase::Open) => {
                    // After our close: read for the client's, drop the rest.
                    drop(data);
                }
                Ok(Some(message @ (Message::Text(_) | Message::Binary(_)))) => {
                    if !rate.allow() {
                        phase = close(&mut frames, 1008, "message rate limit");
                        break;
                    }
                    let (text, data) = match message {
                        Message::Text(data) => (true, data),
                        Message::Binary(data) => (false, data),
                        _ => continue,
                    };
                    let data = if decoder.last_compressed() {
                        match inflate(&data, text, s.settings.max_message) {
                            Ok(plain) => plain,
                            Err(e) => {
                                encode(OpCode::Close, &close_payload(e.code, e.reason), &mut frames);
                                let _ = flush(io, &s.out, &mut frames, false).await;
                                break 'session;
                            }
                        }
                    } else {
                        data
                    };
                    if !frames.is_empty() {
                        // Pongs for pings that came before the message go
                        // out before the handler can answer it (its writes
                        // may go straight to the socket).
                        match flush(io, &s.out, &mut frames, true).await {
                            Ok(drained) => drained_due |= drained,
                            Err(_) => break 'session,
                        }
                    }
                    s.event(EventKind::Message { text }, Some(data));
                    waiting = true;
                }
                Ok(Some(Message::Ping(data))) => encode(OpCode::Pong, &data, &mut frames),
                Ok(Some(Message::Pong(_))) => {}
                Ok(Some(Message::Close(code))) => {
                    if matches!(phase, Phase::Open) {
                        // Echo the client's code (RFC 6455 §5.5.1), 1000
                        // when it gave none.
                        let code = code.map_or(1000, |(code, _)| code);
                        encode(OpCode::Close, &close_payload(code, ""), &mut frames);
                    }
                    let _ = flush(io, &s.out, &mut frames, false).await;
                    break 'session;
                }
                Ok(None) => break,
                Err(e) => {
                    encode(OpCode::Close, &close_payload(e.code, e.reason), &mut frames);
                    let _ = flush(io, &s.out, &mut frames, false).await;
                    break 'session;
                }
            }
        }
        if !frames.is_empty() {
            // Pongs, a ping, or our close (after which Ruby's writes only
            // queue, and the task drops them).
            let open = matches!(phase, Phase::Open | Phase::ShuttingDown);
            match flush(io, &s.out, &mut frames, open).await {
                Ok(drained) => drained_due |= drained,
                Err(_) => break,
            }
        }
        if drained_due && !waiting && phase == Phase::Open {
            // After the handler's current event: on_drained never overlaps
            // the callback that wrote.
            drained_due = false;
            if s.out.wants_drained.load(std::sync::atomic::Ordering::Acquire) {
                s.event(EventKind::Drained, None);
                waiting = true;
                continue;
            }
        }
        if shutdown_asked && !waiting && phase == Phase::Open {
            s.event(EventKind::Shutdown, None);
            waiting = true;
            phase = Phase::ShuttingDown;
        } else if phase == Phase::ShuttingDown && !waiting {
            phase = close(&mut frames, 1001, "server shutting down");
            continue;
        }
        let due = match phase {
            Phase::Closing(until) => until,
            _ => last_heard + s.settings.ping_interval,
        };
        if timer.deadline() != due.into() {
            timer.as_mut().reset(due.into());
        }
        let read_allowed = !waiting || matches!(phase, Phase::Closing(_));
        if read_allowed {
            buf.reserve(READ_CHUNK);
        }
        // Ruby's writes before its `done`: a handler's last write (in
        // on_shutdown, say) goes out before the state moves on.
        tokio::select! {
            biased;
            _ = s.out.wake.notified() => {
                let got = s.out.take(&mut taken);
                let overflowed = got.overflowed;
                // What a direct write left of a frame goes before the rest.
                frames.extend_from_slice(&got.spill);
                let mut sent = got.counted;
                for out in taken.drain(..) {
                    match out {
                        _ if !matches!(phase, Phase::Open | Phase::ShuttingDown) => {}
                        Out::Text(data) => {
                            sent += data.len();
                            encode_message(OpCode::Text, &data, deflate, &mut frames);
                        }
                        Out::Binary(data) => {
                            sent += data.len();
                            encode_message(OpCode::Binary, &data, deflate, &mut frames);
                        }
                        Out::Close(code) => phase = close(&mut frames, code, ""),
                    }
                }
                if overflowed && matches!(phase, Phase::Open | Phase::ShuttingDown) {
                    phase = close(&mut frames, 1008, "client is not reading");
                }
                if !matches!(phase, Phase::Open | Phase::ShuttingDown) {
                    s.out.stop_direct();
                }
                if write(io, &frames).await.is_err() {
                    break;
                }
                frames.clear();
                let left = s.out.sent(sent);
                drained_due |= (sent > 0 || got.drained) && left == 0;
            }
            _ = s.out.done.notified(), if waiting => waiting = false,
            read = io.read_buf(&mut buf), if read_allowed => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        last_heard = Instant::now();
                        ping_out = false;
                    }
                }
            }
            _ = &mut stopped, if !shutdown_asked => shutdown_asked = true,
            _ = &mut timer => {
                match phase {
                    Phase::Closing(_) => break,
                    _ if ping_out => break,
                    _ => {
                        encode(OpCode::Ping, b"", &mut frames);
                        ping_out = true;
                        last_heard = Instant::now();
                    }
                }
            }
        }
    }
    s.end(waiting).await;
}

/// Writes `frames` (the task's own: pongs, a ping, a close), after what a
/// direct write left of a frame, which must go out whole first; writers
/// queue meanwhile. `open`: false once `frames` holds our close frame,
/// after which nothing of Ruby's may reach the socket. Whether the write
/// emptied what Ruby had written (`on_drained` is due).
async fn flush<T: AsyncWrite + Unpin>(
    io: &mut T,
    out: &Outbound,
    frames: &mut BytesMut,
    open: bool,
) -> std::io::Result<bool> {
    if !open {
        out.stop_direct();
    }
    let got = out.begin_write();
    write(io, &got.spill).await?;
    write(io, frames).await?;
    frames.clear();
    let left = out.sent(got.counted);
    Ok((got.counted > 0 || got.drained) && left == 0)
}

/// A message from Ruby as one frame, compressed when permessage-deflate is
/// on and it pays (`Deflater::deflate`).
fn encode_message(opcode: OpCode, data: &bytes::Bytes, deflate: bool, frames: &mut BytesMut) {
    match deflate.then(|| with_deflater(|d| d.deflate(data))).flatten() {
        Some(compressed) => encode_compressed(opcode, &compressed, frames),
        None => encode(opcode, data, frames),
    }
}

/// Queues a close frame and starts waiting for the client's.
fn close(frames: &mut BytesMut, code: u16, reason: &str) -> Phase {
    encode(OpCode::Close, &close_payload(code, reason), frames);
    Phase::Closing(Instant::now() + CLOSE_WAIT)
}

/// Messages a client may send per second: a window that restarts each
/// second.
struct Rate {
    limit: u32,
    count: u32,
    window: Instant,
}

impl Rate {
    fn new(limit: u32) -> Rate {
        Rate {
            limit,
            count: 0,
            window: Instant::now(),
        }
    }

    fn allow(&mut self) -> bool {
        if self.limit == 0 {
            return true;
        }
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Instant::now();
            self.count = 0;
        }
        self.count += 1;
        self.count <= self.limit
    }
}
