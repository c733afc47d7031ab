//! An HTTP/1.1 connection whose request the app answered with
//! `rack.upgrade`: the WebSocket handshake (checked when the request was
//! read) or the SSE response, then the engine-held session (`upgrade/`).

use crate::dispatch::reply::UpgradeKind;
use crate::net::client_io::{send, ClientIo};
use crate::shared::Shared;
use crate::upgrade::{abandon, run_sse, run_websocket};
use crate::ws::handshake::{response_head, HandshakeError, Upgrade};
use bytes::BytesMut;

pub(crate) async fn serve<T: ClientIo>(
    mut io: T,
    buf: BytesMut,
    kind: UpgradeKind,
    id: u64,
    websocket: Option<Result<Upgrade, HandshakeError>>,
    shared: &Shared,
) {
    let Some(session) = shared.upgrade_session(id) else {
        return;
    };
    match (kind, websocket) {
        (UpgradeKind::Sse, _) => run_sse(&mut io, session).await,
        (UpgradeKind::WebSocket, Some(Ok(upgrade))) => {
            let deflate = shared.upgrade_settings.deflate_for(&upgrade);
            let head = response_head(&upgrade, None, deflate.then_some(crate::ws::deflate::ACCEPTED));
            // The request's read buffer is sized for heads and bodies; an
            // idle WebSocket keeps only what the client already sent.
            let rest = BytesMut::from(&buf[..]);
            drop(buf);
            let direct = io.plain_socket();
            run_websocket(&mut io, rest, &head, deflate, direct, session).await;
        }
        (UpgradeKind::WebSocket, refused) => {
            // The app asked for a WebSocket the request cannot have (the
            // env offered none, or the handshake is invalid): the client
            // hears why and the handler gets its on_close.
            let answer: &[u8] = match refused {
                Some(Err(HandshakeError::BadVersion)) => {
                    b"HTTP/1.1 426 Upgrade Required\r\nsec-websocket-version: 13\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                }
                _ => b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 29\r\nconnection: close\r\n\r\ninvalid WebSocket handshake\r\n",
            };
            let _ = send(&mut io, answer).await;
            abandon(&shared.upgrades, &shared.upgrade_events, id);
        }
    }
}
