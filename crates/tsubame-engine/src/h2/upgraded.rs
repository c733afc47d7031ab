//! An HTTP/2 stream whose request the app answered with `rack.upgrade`: a
//! WebSocket bootstrapped by extended CONNECT (RFC 8441). The engine
//! answers 200 (with the permessage-deflate it accepts) instead of a 101,
//! then runs the same WebSocket session as HTTP/1.1 (`upgrade/`) over the
//! stream's DATA frames (`h2/stream_io.rs`). When the session ends the
//! stream ends with END_STREAM; a client's RST_STREAM ends the session as
//! a TCP reset would.

use crate::dispatch::reply::UpgradeKind;
use crate::h2::stream_io::StreamIo;
use crate::net::linger::{LINGER_BYTES, LINGER_TIME};
use crate::shared::Shared;
use crate::upgrade::{abandon, run_websocket};
use crate::ws::deflate::ACCEPTED;
use crate::ws::handshake::{HandshakeError, Upgrade, VERSION};
use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{HeaderValue, Response, StatusCode};
use tokio::io::AsyncWriteExt;

/// The status the request is logged with: 200 for a WebSocket that opens,
/// the refusal's otherwise (see `serve`).
pub(crate) fn status(kind: UpgradeKind, websocket: Option<&Result<Upgrade, HandshakeError>>) -> u16 {
    match (kind, websocket) {
        (UpgradeKind::WebSocket, Some(Ok(_))) => 200,
        (UpgradeKind::WebSocket, Some(Err(e))) => e.status(),
        _ => 400,
    }
}

pub(crate) async fn serve(
    mut respond: SendResponse<Bytes>,
    recv: RecvStream,
    kind: UpgradeKind,
    id: u64,
    websocket: Option<Result<Upgrade, HandshakeError>>,
    shared: &Shared,
) {
    let Some(session) = shared.upgrade_session(id) else {
        return;
    };
    let upgrade = match (kind, websocket) {
        (UpgradeKind::WebSocket, Some(Ok(upgrade))) => upgrade,
        (_, refused) => {
            // The app took an upgrade this stream cannot have: the client
            // hears why (400, or 426 naming the version spoken) and the
            // handler gets its on_close. SSE is not offered on HTTP/2.
            refuse(&mut respond, refused.and_then(Result::err));
            return abandon(&shared.upgrades, &shared.upgrade_events, id);
        }
    };
    let deflate = shared.upgrade_settings.deflate_for(&upgrade);
    let mut response = Response::new(());
    if deflate {
        response
            .headers_mut()
            .insert("sec-websocket-extensions", HeaderValue::from_static(ACCEPTED));
    }
    let send = match respond.send_response(response, false) {
        Ok(send) => send,
        Err(_) => return session.finish(),
    };
    let mut io = StreamIo::new(send, recv);
    // The 200 went out above, so the session writes no handshake of its
    // own; the stream starts with the WebSocket frames.
    // No direct writes: the frames go inside the stream's DATA frames.
    run_websocket(&mut io, BytesMut::new(), b"", deflate, None, session).await;
    // END_STREAM (fails harmlessly if the client reset the stream), then a
    // moment for the client's own END_STREAM, so an orderly close is one
    // both ways and not a reset.
    if io.shutdown().await.is_ok() {
        io.linger(LINGER_BYTES, LINGER_TIME).await;
    }
}

fn refuse(respond: &mut SendResponse<Bytes>, error: Option<HandshakeError>) {
    let mut response = Response::new(());
    match error {
        Some(HandshakeError::BadVersion) => {
            *response.status_mut() = StatusCode::UPGRADE_REQUIRED;
            response
                .headers_mut()
                .insert("sec-websocket-version", HeaderValue::from_static(VERSION));
        }
        _ => *response.status_mut() = StatusCode::BAD_REQUEST,
    }
    let reason = error.map_or("invalid WebSocket handshake", HandshakeError::reason);
    let body = Bytes::from(format!("{reason}\r\n"));
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    response
        .headers_mut()
        .insert("content-length", HeaderValue::from(body.len()));
    match respond.send_response(response, false) {
        // A short body fits the initial window (RFC 9113's floor is 64 KiB).
        Ok(mut stream) => {
            if stream.send_data(body, true).is_err() {
                stream.send_reset(Reason::INTERNAL_ERROR);
            }
        }
        Err(_) => respond.send_reset(Reason::INTERNAL_ERROR),
    }
}
