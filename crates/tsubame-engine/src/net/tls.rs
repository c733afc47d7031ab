//! TLS for `ssl://` binds: rustls (ring provider) server configurations
//! built from PEM files, checked when the bind is made so a bad file fails
//! the boot, and swapped in place on reload (HUP) so new handshakes use the
//! new certificate while connections already open keep theirs.

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Puma's `verify_mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// No client certificate is asked for.
    None,
    /// A client certificate is asked for and checked against `ca` if sent.
    Peer,
    /// A client certificate signed by `ca` is required.
    ForcePeer,
}

impl VerifyMode {
    pub fn parse(text: &str) -> Option<VerifyMode> {
        match text {
            "none" => Some(VerifyMode::None),
            "peer" => Some(VerifyMode::Peer),
            "force_peer" => Some(VerifyMode::ForcePeer),
            _ => None,
        }
    }
}

/// What one TLS bind was configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
    pub verify_mode: VerifyMode,
    /// Offer `h2` by ALPN (before `http/1.1`).
    pub http2: bool,
}

/// A file that cannot serve as certificate, key or CA, named in the message.
#[derive(Debug)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn open(what: &str, path: &Path) -> Result<BufReader<File>, TlsError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| TlsError(format!("cannot read {what} {}: {e}", path.display())))
}

fn load_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut open(what, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("cannot parse {what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "no PEM certificate found in {what} {}",
            path.display()
        )));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut open("key", path)?)
        .map_err(|e| TlsError(format!("cannot parse key {}: {e}", path.display())))?
        .ok_or_else(|| TlsError(format!("no PEM private key found in key {}", path.display())))
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsSettings {
    /// Reads the files and builds a server configuration; every failure
    /// names the file it is about.
    pub fn build(&self) -> Result<ServerConfig, TlsError> {
        let certs = load_certs("certificate", &self.cert)?;
        let key = load_key(&self.key)?;
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError(format!("TLS setup failed: {e}")))?;
        let builder =
            match (self.verify_mode, &self.ca) {
                (VerifyMode::None, _) => builder.with_no_client_auth(),
                (_, None) => return Err(TlsError(
                    "verify_mode=peer and verify_mode=force_peer need ca=PATH (the CA that signs client certificates)"
                        .into(),
                )),
                (mode, Some(ca)) => {
                    let mut roots = RootCertStore::empty();
                    for cert in load_certs("CA certificate", ca)? {
                        roots
                            .add(cert)
                            .map_err(|e| TlsError(format!("unusable CA certificate {}: {e}", ca.display())))?;
                    }
                    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                    let verifier = if mode == VerifyMode::Peer {
                        verifier.allow_unauthenticated()
                    } else {
                        verifier
                    };
                    let verifier = verifier
                        .build()
                        .map_err(|e| TlsError(format!("unusable CA certificate {}: {e}", ca.display())))?;
                    builder.with_client_cert_verifier(verifier)
                }
            };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            TlsError(format!(
                "key {} does not go with certificate {}: {e}",
                self.key.display(),
                self.cert.display()
            ))
        })?;
        config.alpn_protocols = if self.http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(config)
    }
}

/// The live configuration of one TLS listener.
#[derive(Debug)]
pub struct TlsListener {
    settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
}

impl TlsListener {
    pub fn new(settings: TlsSettings) -> Result<TlsListener, TlsError> {
        let config = settings.build()?;
        Ok(TlsListener {
            settings,
            config: RwLock::new(Arc::new(config)),
        })
    }

    /// Taken once per handshake; a reload never waits for connections.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the files again. On failure the old configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.settings.build()?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }
}

/// A certificate for `localhost`, `127.0.0.1` and `::1`, made at boot for
/// `--tls-self-signed` (development only). Returns (certificate PEM, key PEM).
pub fn self_signed() -> Result<(String, String), TlsError> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    let certified = rcgen::generate_simple_self_signed(names)
        .map_err(|e| TlsError(format!("cannot generate a self-signed certificate: {e}")))?;
    Ok((certified.cert.pem(), certified.key_pair.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, cert: &str, key: &str) -> TlsSettings {
        TlsSettings {
            cert: dir.join(cert),
            key: dir.join(key),
            ca: None,
            verify_mode: VerifyMode::None,
            http2: true,
        }
    }

    #[test]
    fn builds_from_a_generated_pair_and_names_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed().unwrap();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), &key).unwrap();
        let (other_cert, _) = self_signed().unwrap();
        std::fs::write(dir.path().join("other.pem"), &other_cert).unwrap();
        let config = settings(dir.path(), "c.pem", "k.pem").build().unwrap();
        assert_eq!(config.alpn_protocols[0], b"h2");

        let err = settings(dir.path(), "missing.pem", "k.pem").build().unwrap_err().0;
        assert!(err.contains("missing.pem"), "{err}");
        let err = settings(dir.path(), "c.pem", "c.pem").build().unwrap_err().0;
        assert!(err.contains("no PEM private key") && err.contains("c.pem"), "{err}");
        let err = settings(dir.path(), "other.pem", "k.pem").build().unwrap_err().0;
        assert!(err.contains("does not go with") && err.contains("other.pem"), "{err}");
        let mut peer = settings(dir.path(), "c.pem", "k.pem");
        peer.verify_mode = VerifyMode::ForcePeer;
        assert!(peer.build().unwrap_err().0.contains("ca=PATH"));
    }
}
