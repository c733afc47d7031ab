use crate::response::close_connection;
use crate::stream_channel::StreamReceiver;
use bytes::Bytes;
use std::fs::File;
use std::os::fd::OwnedFd;

/// What an application thread hands back to the connection that owns the
/// request. Heads are already serialized (see `response.rs`), so the
/// connection task only writes bytes.
#[derive(Debug)]
pub enum Reply {
    /// Head and body in one buffer: one write.
    Full {
        status: u16,
        data: Bytes,
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
    /// The head, then `len` bytes of an open file, read by the engine.
    File {
        status: u16,
        head: Bytes,
        file: File,
        len: u64,
        close: bool,
    },
    /// The application takes the socket (`rack.hijack`): the engine hands
    /// over the descriptor and forgets the connection.
    Hijack {
        socket: std::sync::mpsc::SyncSender<std::io::Result<OwnedFd>>,
    },
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

impl Reply {
    /// The same reply for an HTTP/1 connection that must close after it
    /// (the server began to stop while the app made it): a head that would
    /// keep the connection says `connection: close` instead, so a client or
    /// proxy does not send its next request into a closing socket.
    pub fn closing(self) -> Reply {
        match self {
            Reply::Full {
                status,
                data,
                body_len,
                close: false,
            } => Reply::Full {
                status,
                data: close_connection(&data).into(),
                body_len,
                close: true,
            },
            Reply::File {
                status,
                head,
                file,
                len,
                close: false,
            } => Reply::File {
                status,
                head: close_connection(&head).into(),
                file,
                len,
                close: true,
            },
            Reply::Stream {
                status,
                head,
                chunks,
                framing,
                close: false,
            } => Reply::Stream {
                status,
                head: close_connection(&head).into(),
                chunks,
                framing,
                close: true,
            },
            other => other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFraming {
    /// The engine chunk-encodes.
    Chunked,
    /// Bytes go out as given: the application declared a length, framed the
    /// body itself, or the connection closes at the end.
    Raw { declared_len: Option<u64> },
}

#[derive(Debug)]
pub enum StreamMsg {
    Data(Bytes),
    /// The body finished normally. A sender dropped without sending this
    /// means the body failed, and the connection is cut short so the client
    /// cannot mistake a partial body for a whole one.
    End,
}
