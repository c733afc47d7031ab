//! HTTP/2 (TLS with ALPN `h2`, or prior-knowledge h2c): one task per
//! connection, each stream submitted to dispatch like an HTTP/1 request.

pub(crate) mod connection;
mod io;
