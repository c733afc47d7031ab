//! `Tsubame::Native.write_self_signed`: the certificate behind
//! `--tls-self-signed` (see lib/tsubame/self_signed.rb), made by the
//! engine's rcgen so Ruby needs no certificate code of its own.

use crate::ffi::os_path;
use magnus::{Error, RString, Ruby};
use std::path::Path;

/// Writes a development-only certificate for localhost (and its key) to
/// the two paths, for `--tls-self-signed`. The paths are taken as bytes,
/// whatever their encoding.
pub fn write_self_signed(ruby: &Ruby, cert_path: RString, key_path: RString) -> Result<(), Error> {
    let (cert_path, key_path) = (os_path(cert_path), os_path(key_path));
    let (cert, key) = tsubame_engine::net::tls::self_signed()
        .map_err(|e| Error::new(ruby.exception_runtime_error(), e.to_string()))?;
    let io_error =
        |path: &Path, e: std::io::Error| Error::new(ruby.exception_io_error(), format!("{}: {e}", path.display()));
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
