//! The error of everything TLS setup reads: a file that cannot serve as
//! certificate, key or CA, a directive that selects nothing. Its own file
//! so the TLS modules can share it without importing one another in a
//! circle.

use std::fmt;

/// What went wrong, naming the file or directive it is about.
#[derive(Debug)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}
