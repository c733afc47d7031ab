use crate::dispatch::stream_channel::StreamReceiver;
use crate::message::response::StreamFraming;
use bytes::Bytes;
use std::fs::File;
use std::os::fd::OwnedFd;

/// What an application thread hands back to the connection that owns the
/// request. Heads are already serialized (see `message/response.rs`), so the
/// connection task only writes bytes.
#[derive(Debug)]
pub enum Reply {
    /// Head and body in one buffer, and what follows it in `tail`: one
    /// write. `tail` is empty except for a large body the app made as one
    /// string, which is sent from the app's own memory instead of being
    /// copied after the head (`body_len` counts both parts).
    Full {
        status: u16,
        data: Bytes,
        tail: Bytes,
        body_len: u64,
        close: bool,
    },
    /// The head, then chunks as the application produces them.
    Stream {
        status: u16,
        head: Bytes,
        chunks: StreamReceiver,
        framing: StreamFraming,
        close: bool,
    },
    /// The head, then `len` bytes of an open file from `offset`, sent by
    /// the engine.
    File {
        status: u16,
        head: Bytes,
        file: File,
        offset: u64,
        len: u64,
        close: bool,
    },
    /// The application takes the socket (`rack.hijack`): the engine hands
    /// over the descriptor and forgets the connection.
    Hijack {
        socket: std::sync::mpsc::SyncSender<std::io::Result<OwnedFd>>,
    },
    /// The app took `rack.upgrade`: the connection becomes an engine-held
    /// WebSocket or SSE stream, registered as `id` (see `upgrade/`).
    Upgrade { kind: UpgradeKind, id: u64 },
    /// The engine itself turned the request away (503) while it was queued.
    Shed(crate::error::ShedReason),
    /// An informational response (103 Early Hints) before the real one,
    /// which arrives on `next`. `head` is in HTTP/1 form; the HTTP/2 writer
    /// turns it into an informational HEADERS frame.
    Interim {
        head: Bytes,
        next: tokio::sync::oneshot::Receiver<Reply>,
    },
}

/// What a `rack.upgrade` turns the connection into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeKind {
    WebSocket,
    Sse,
}
