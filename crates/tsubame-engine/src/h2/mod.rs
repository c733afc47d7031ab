//! HTTP/2 (TLS with ALPN `h2`, or prior-knowledge h2c): one task per
//! connection, each stream submitted to dispatch like an HTTP/1 request;
//! a WebSocket's stream (RFC 8441) becomes an engine-held session.

pub(crate) mod connection;
mod io;
mod stream_io;
mod upgraded;
