//! `Tsubame::Native.write_self_signed`: the certificate behind
//! `--tls-self-signed` (see lib/tsubame/self_signed.rb), made by the
//! engine's rcgen so Ruby needs no certificate code of its own.

use magnus::{Error, Ruby};

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
