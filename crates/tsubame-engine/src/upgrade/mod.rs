//! Connections the engine keeps after the app asked for `rack.upgrade`
//! (the interface Iodine and Agoo define): WebSockets and Server-Sent
//! Events. The connection's task does the protocol (frames, pings, the
//! close handshake, limits, back-pressure); Ruby runs only the handler's
//! callbacks, one event at a time per connection (`events.rs`), so an idle
//! connection costs memory and no thread. What Ruby writes goes straight
//! to an idle plain socket or is queued in `registry.rs` and sent by the
//! task.

pub mod events;
pub mod registry;
mod sse;
mod websocket;

pub use events::{Event, EventKind, EventQueue, Popped};
pub use registry::{Out, Outbound, Registry, WriteError};
pub use sse::run as run_sse;
pub use websocket::run as run_websocket;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The limits and timers of engine-held connections (from `EngineOptions`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest frame and whole message a client may send (close 1009).
    pub max_frame: usize,
    pub max_message: usize,
    /// Messages a client may send per second (close 1008 beyond).
    pub max_rate: u32,
    /// Bytes Ruby may queue for a client that does not read before the
    /// connection is closed (1008).
    pub max_pending: usize,
    /// Quiet this long, the engine pings (WebSocket) or sends a comment
    /// (SSE); a WebSocket that stays silent another period is dropped.
    pub ping_interval: Duration,
    /// permessage-deflate may be accepted.
    pub deflate: bool,
}

impl Settings {
    /// Whether this WebSocket gets permessage-deflate: allowed here and
    /// offered acceptably by the client (HTTP/1.1 and HTTP/2 alike).
    pub(crate) fn deflate_for(&self, upgrade: &crate::ws::handshake::Upgrade) -> bool {
        self.deflate && crate::ws::deflate::negotiate(&upgrade.extensions)
    }

    pub fn from_options(opts: &crate::options::EngineOptions) -> Settings {
        Settings {
            max_frame: opts.websocket_max_frame,
            max_message: opts.websocket_max_message,
            max_rate: opts.websocket_max_rate,
            max_pending: opts.upgrade_max_pending,
            ping_interval: opts.upgrade_ping_interval,
            deflate: opts.websocket_deflate,
        }
    }
}

/// What a connection's task needs besides its socket.
pub struct Session<'a> {
    pub id: u64,
    pub out: Arc<Outbound>,
    pub registry: &'a Registry,
    pub events: &'a EventQueue,
    pub settings: &'a Settings,
    pub stop: &'a Notify,
    pub stopping: &'a AtomicBool,
}

impl Session<'_> {
    /// Hands an event to Ruby; the task waits for `out.done` before the
    /// next one.
    fn event(&self, kind: EventKind, data: Option<bytes::Bytes>) {
        self.events.push(Event {
            id: self.id,
            kind,
            data,
        });
    }

    /// Resolves once a stop has begun (at once if it already had).
    async fn stopped(&self) {
        loop {
            let notified = self.stop.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// The session is over: no more writes; an event Ruby still runs
    /// (`waiting`) ends before the handler's `on_close`.
    async fn end(&self, waiting: bool) {
        self.out.shut();
        if waiting {
            self.out.done.notified().await;
        }
        self.finish();
    }

    /// The connection is gone: no more writes, the handler's `on_close`.
    pub fn finish(&self) {
        abandon(self.registry, self.events, self.id);
    }
}

/// Writes and flushes (TLS holds records until flushed; a plain socket's
/// flush does nothing).
async fn write<T: tokio::io::AsyncWrite + Unpin>(io: &mut T, bytes: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    if bytes.is_empty() {
        return Ok(());
    }
    io.write_all(bytes).await?;
    io.flush().await
}

/// Ends connection `id` that never became (or no longer is) a session:
/// forgotten, and its handler gets `on_close`.
pub fn abandon(registry: &Registry, events: &EventQueue, id: u64) {
    registry.remove(id);
    events.push(Event {
        id,
        kind: EventKind::Close,
        data: None,
    });
}
