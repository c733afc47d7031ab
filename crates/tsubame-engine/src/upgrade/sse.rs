//! Server-Sent Events after `rack.upgrade`: the engine answers with an
//! open `text/event-stream` response and sends every message Ruby writes
//! as an event (`data:` lines). The client sends nothing more; a read that
//! ends means it went away.

use super::{write, EventKind, Out, Session};
use bytes::BytesMut;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// The response head: no length (the stream ends when the connection
/// closes), no caching, and no buffering by an nginx in front.
pub const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-accel-buffering: no\r\nconnection: close\r\n\r\n";

pub async fn run<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T, s: Session<'_>) {
    if write(io, HEAD).await.is_err() {
        return s.finish();
    }
    s.event(EventKind::Open, None);
    let mut waiting = true;
    let mut shutdown_asked = false;
    let mut shutting_down = false;
    let mut taken = Vec::new();
    let mut out = BytesMut::new();
    let mut scratch = [0u8; 512];
    let mut last_sent = Instant::now();
    let mut drained_due = false;
    let stopped = s.stopped();
    tokio::pin!(stopped);
    let timer = tokio::time::sleep_until((last_sent + s.settings.ping_interval).into());
    tokio::pin!(timer);
    loop {
        let due = last_sent + s.settings.ping_interval;
        if timer.deadline() != due.into() {
            timer.as_mut().reset(due.into());
        }
        if drained_due && !waiting && !shutting_down {
            drained_due = false;
            if s.out.wants_drained.load(std::sync::atomic::Ordering::Acquire) {
                s.event(EventKind::Drained, None);
                waiting = true;
                continue;
            }
        }
        if shutdown_asked && !waiting && !shutting_down {
            s.event(EventKind::Shutdown, None);
            waiting = true;
            shutting_down = true;
        } else if shutting_down && !waiting {
            break;
        }
        // Ruby's writes before its `done`: a handler's last write (in
        // on_shutdown, say) goes out before the state moves on.
        tokio::select! {
            biased;
            _ = s.out.wake.notified() => {
                // SSE never allows direct writes, so nothing was spilled.
                let overflowed = s.out.take(&mut taken).overflowed;
                let mut sent = 0;
                let mut closed = overflowed;
                for item in taken.drain(..) {
                    match item {
                        Out::Text(data) | Out::Binary(data) => {
                            sent += data.len();
                            event(&data, &mut out);
                        }
                        Out::Close(_) => closed = true,
                    }
                }
                if write(io, &out).await.is_err() {
                    break;
                }
                out.clear();
                last_sent = Instant::now();
                let left = s.out.sent(sent);
                if closed {
                    break;
                }
                drained_due |= sent > 0 && left == 0;
            }
            _ = s.out.done.notified(), if waiting => waiting = false,
            read = io.read(&mut scratch) => {
                if matches!(read, Ok(0) | Err(_)) {
                    break;
                }
            }
            _ = &mut stopped, if !shutdown_asked => shutdown_asked = true,
            _ = &mut timer => {
                // A comment line: keeps proxies from timing the stream out
                // and finds a client that left.
                if write(io, b":\n\n").await.is_err() {
                    break;
                }
                last_sent = Instant::now();
            }
        }
    }
    s.end(waiting).await;
}

/// One event: every line of `data` as a `data:` field (CR LF, CR and LF
/// all end a line, as the EventSource parser reads them), then the blank
/// line that dispatches it.
fn event(data: &[u8], out: &mut BytesMut) {
    let mut rest = data;
    loop {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r');
        let line = &rest[..end.unwrap_or(rest.len())];
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.extend_from_slice(b"\n");
        let Some(at) = end else { break };
        let skip = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        rest = &rest[at + skip..];
        if rest.is_empty() {
            break;
        }
    }
    out.extend_from_slice(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formatted(data: &[u8]) -> String {
        let mut out = BytesMut::new();
        event(data, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn lines_become_data_fields() {
        assert_eq!(formatted(b"hello"), "data: hello\n\n");
        assert_eq!(formatted(b"a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
        assert_eq!(formatted(b"trailing\n"), "data: trailing\n\n");
        assert_eq!(formatted(b""), "data: \n\n");
    }
}
