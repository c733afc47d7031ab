//! `Tsubame::Native.bind_listeners`: listening sockets owned by Ruby.
//!
//! In cluster mode the master binds and keeps the listeners (it never runs
//! an engine); each worker adopts them with `fd://N` binds, and a hot
//! restart passes them across `exec`. So the master needs the descriptors
//! themselves, which an `Engine` keeps to itself.

use crate::errors::bind_error;
use magnus::{Error, RArray, Ruby};
use std::os::fd::IntoRawFd;
use tsubame_engine::bind::{BindSpec, Listener};

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

/// Writes a development-only certificate for localhost (and its key) to
/// the two paths, for `--tls-self-signed`.
pub fn write_self_signed(ruby: &Ruby, cert_path: String, key_path: String) -> Result<(), Error> {
    let (cert, key) =
        tsubame_engine::tls::self_signed().map_err(|e| Error::new(ruby.exception_runtime_error(), e.to_string()))?;
    let io_error = |path: &str, e: std::io::Error| Error::new(ruby.exception_io_error(), format!("{path}: {e}"));
    std::fs::write(&cert_path, cert).map_err(|e| io_error(&cert_path, e))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(|e| io_error(&key_path, e))?;
        file.write_all(key.as_bytes()).map_err(|e| io_error(&key_path, e))?;
    }
    Ok(())
}
