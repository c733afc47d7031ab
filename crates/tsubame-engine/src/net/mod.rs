//! Sockets: binding listeners, accepting (and handing accepts between
//! cluster workers), TLS, the PROXY protocol, and the client stream trait
//! protocols write to.

pub(crate) mod accept;
pub(crate) mod accept_log;
pub mod bind;
pub mod client_io;
pub(crate) mod linger;
pub(crate) mod proxy_log;
pub mod proxy_protocol;
pub(crate) mod rewind;
pub mod tls;
pub mod tls_certs;
pub(crate) mod tls_ciphers;
pub mod tls_error;
pub(crate) mod tls_hijack;
pub(crate) mod tls_query;
pub(crate) mod tls_sni;
pub mod tls_tickets;
