//! `Tsubame::Native.bind_listeners`: listening sockets owned by Ruby.
//!
//! In cluster mode the master binds and keeps the listeners (it never runs
//! an engine); each worker adopts them with `fd://N` binds, and a hot
//! restart passes them across `exec`. So the master needs the descriptors
//! themselves, which an `Engine` keeps to itself.

use crate::errors::bind_error;
use magnus::{Error, RArray, Ruby};
use std::os::fd::IntoRawFd;
use tsubame_engine::net::bind::{BindSpec, Listener};

/// Binds `uri` (a host may resolve to several addresses, so there may be
/// several listeners) and returns `[[address, fd], ...]`. The caller owns
/// each fd from then on: Ruby wraps it in a Socket that closes it.
pub fn bind_listeners(ruby: &Ruby, uri: String, backlog: u32) -> Result<RArray, Error> {
    let bound = BindSpec::parse(&uri)
        .and_then(|spec| spec.bind(backlog))
        .map_err(|e| Error::new(bind_error(ruby), e.to_string()))?;
    let pairs = ruby.ary_new_capa(bound.len());
    for b in bound {
        let fd = match b.listener {
            Listener::Tcp(l) => l.into_raw_fd(),
            Listener::Unix(l, _) => l.into_raw_fd(),
        };
        pairs.push((b.address, fd))?;
    }
    Ok(pairs)
}

/// `Tsubame::Native.seed_tls_tickets`: makes this process's session-ticket
/// secret now. The cluster master calls it before forking, so every worker
/// inherits the same secret and a ticket one worker issued resumes on any
/// other (crates/tsubame-engine/src/net/tls_tickets.rs). False when the
/// system had no randomness to give.
pub fn seed_tls_tickets() -> bool {
    tsubame_engine::net::tls_tickets::seed_tickets()
}
