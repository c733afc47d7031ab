//! A reply written after a stop began, on an HTTP/1 connection.

use crate::dispatch::reply::Reply;
use crate::message::response::close_connection;

/// The same reply for an HTTP/1 connection that must close after it
/// (the server began to stop while the app made it): a head that would
/// keep the connection says `connection: close` instead, so a client or
/// proxy does not send its next request into a closing socket.
pub(crate) fn closing(reply: Reply) -> Reply {
    match reply {
        Reply::Full {
            status,
            data,
            tail,
            body_len,
            close: false,
        } => Reply::Full {
            status,
            data: close_connection(&data).into(),
            tail,
            body_len,
            close: true,
        },
        Reply::File {
            status,
            head,
            file,
            offset,
            len,
            close: false,
        } => Reply::File {
            status,
            head: close_connection(&head).into(),
            file,
            offset,
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
