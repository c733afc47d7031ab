//! TLS for `ssl://` binds: rustls (`crypto.rs`'s provider) server configurations
//! built from PEM files, checked when the bind is made so a bad file fails
//! the boot, and swapped in place on reload (HUP) so new handshakes use the
//! new certificate while connections already open keep theirs.

use crate::net::tls_certs::{directory_pairs, load_certs, CertSpec, Passwords, PemSource};
use crate::net::tls_ciphers::CipherChoice;
pub use crate::net::tls_error::TlsError;
use crate::net::tls_sni::SniResolver;
use crate::net::tls_tickets::SharedTickets;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

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

/// Puma's `verification_flags` `CRL_CHECK` / `CRL_CHECK_ALL`: client
/// certificates checked against the CRLs in the `ca` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrlCheck {
    Off,
    /// `CRL_CHECK`: the client's own certificate.
    Leaf,
    /// `CRL_CHECK_ALL`: every certificate of its chain.
    Chain,
}

/// What one TLS bind was configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The bind's certificates in configuration order; the first is the
    /// default (clients without SNI, names nothing else matches).
    pub certs: Vec<CertSpec>,
    /// A directory of more certificate/key pairs, chosen by SNI.
    pub sni_dir: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub verify_mode: VerifyMode,
    pub crl_check: CrlCheck,
    /// Offer `h2` by ALPN (before `http/1.1`).
    pub http2: bool,
    /// Puma's `ssl_cipher_filter` (OpenSSL cipher string, TLS 1.2).
    pub cipher_filter: Option<String>,
    /// Puma's `ssl_ciphersuites` (TLS 1.3 suite names).
    pub ciphersuites: Option<String>,
    /// TLS 1.2 session-ID cache entries (Puma's `reuse`); 0 turns it off.
    pub session_cache: usize,
    /// How often the shared session-ticket key changes (`tls_tickets.rs`).
    pub ticket_rotation: Duration,
}

/// The session-ID cache when the bind says nothing (rustls's own size).
pub const DEFAULT_SESSION_CACHE: usize = 256;
/// Puma's `reuse=dflt`: OpenSSL's default cache size.
pub const PUMA_REUSE_DEFAULT: usize = 20_480;
pub const DEFAULT_TICKET_ROTATION: Duration = Duration::from_secs(3600);

impl TlsSettings {
    /// One certificate from files, everything else at its default.
    pub fn with_files(cert: PathBuf, key: PathBuf) -> TlsSettings {
        TlsSettings {
            certs: vec![CertSpec {
                cert: PemSource::File(cert),
                key: PemSource::File(key),
                key_password_command: None,
                ocsp: None,
                sni: None,
            }],
            sni_dir: None,
            ca: None,
            verify_mode: VerifyMode::None,
            crl_check: CrlCheck::Off,
            http2: true,
            cipher_filter: None,
            ciphersuites: None,
            session_cache: DEFAULT_SESSION_CACHE,
            ticket_rotation: DEFAULT_TICKET_ROTATION,
        }
    }
}

/// A built configuration and the warning its cipher settings gave, if any.
pub struct Built {
    pub config: ServerConfig,
    pub warning: Option<String>,
}

impl TlsSettings {
    /// Reads the files (runs `key_password_command`) and builds a server
    /// configuration; every failure names the file or directive it is about.
    pub fn build(&self, passwords: Passwords) -> Result<Built, TlsError> {
        let choice = CipherChoice::new(self.cipher_filter.as_deref(), self.ciphersuites.as_deref())?;
        let provider = Arc::new(CryptoProvider {
            cipher_suites: choice.suites.clone(),
            ..crate::crypto::default_provider()
        });
        let mut specs = self.certs.clone();
        if let Some(dir) = &self.sni_dir {
            let password = self.certs.first().and_then(|c| c.key_password_command.clone());
            for mut pair in directory_pairs(dir)? {
                pair.key_password_command = password.clone();
                specs.push(pair);
            }
        }
        let mut certified = Vec::with_capacity(specs.len());
        for spec in &specs {
            certified.push((spec.sni.clone(), Arc::new(spec.load(&provider, passwords)?)));
        }
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
                    for cert in load_certs(&PemSource::File(ca.clone()), "CA certificate")? {
                        roots
                            .add(cert)
                            .map_err(|e| TlsError(format!("unusable CA certificate {}: {e}", ca.display())))?;
                    }
                    let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                    if self.crl_check != CrlCheck::Off {
                        verifier = verifier.with_crls(load_crls(ca)?);
                        if self.crl_check == CrlCheck::Leaf {
                            verifier = verifier.only_check_end_entity_revocation();
                        }
                    }
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
        let mut config = builder.with_cert_resolver(Arc::new(SniResolver::new(certified)));
        // The server's order, not the client's: testssl and other audits
        // flag client order, and the configured filter is an order.
        config.ignore_client_order = true;
        config.session_storage = if self.session_cache == 0 {
            Arc::new(NoServerSessionStorage {})
        } else {
            ServerSessionMemoryCache::new(self.session_cache)
        };
        config.ticketer = Arc::new(
            SharedTickets::new(self.ticket_rotation)
                .ok_or_else(|| TlsError("no system randomness for the session-ticket key".into()))?,
        );
        config.alpn_protocols = if self.http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Built {
            config,
            warning: choice.warning(),
        })
    }
}

/// The CRLs (PEM `X509 CRL` blocks) in the `ca` file, as OpenSSL reads
/// them from its CA store when asked to check revocation.
fn load_crls(ca: &std::path::Path) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, TlsError> {
    let text = std::fs::read(ca).map_err(|e| TlsError(format!("cannot read CA certificate {}: {e}", ca.display())))?;
    let crls = rustls_pemfile::crls(&mut std::io::BufReader::new(text.as_slice()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("cannot parse the CRLs in {}: {e}", ca.display())))?;
    if crls.is_empty() {
        return Err(TlsError(format!(
            "verification_flags CRL_CHECK/CRL_CHECK_ALL need CRLs (PEM X509 CRL blocks) in ca={}",
            ca.display()
        )));
    }
    Ok(crls)
}

/// The live configuration of one TLS listener.
#[derive(Debug)]
pub struct TlsListener {
    settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
    warning: Option<String>,
}

impl TlsListener {
    pub fn new(settings: TlsSettings) -> Result<TlsListener, TlsError> {
        let built = settings.build(Passwords::Remembered)?;
        Ok(TlsListener {
            settings,
            config: RwLock::new(Arc::new(built.config)),
            warning: built.warning,
        })
    }

    /// Taken once per handshake; a reload never waits for connections.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the files again (and runs `key_password_command` again). On
    /// failure the old configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let built = self.settings.build(Passwords::Fresh)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(built.config);
        Ok(())
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// Cipher names the configuration gave that rustls lacks, as one line.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
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

    use std::path::Path;

    fn settings(dir: &Path, cert: &str, key: &str) -> TlsSettings {
        TlsSettings::with_files(dir.join(cert), dir.join(key))
    }

    #[test]
    fn builds_from_a_generated_pair_and_names_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed().unwrap();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), &key).unwrap();
        let (other_cert, _) = self_signed().unwrap();
        std::fs::write(dir.path().join("other.pem"), &other_cert).unwrap();
        let config = settings(dir.path(), "c.pem", "k.pem")
            .build(Passwords::Fresh)
            .unwrap()
            .config;
        assert!(config.ignore_client_order);
        assert_eq!(config.alpn_protocols[0], b"h2");

        let err = settings(dir.path(), "missing.pem", "k.pem")
            .build(Passwords::Fresh)
            .err()
            .unwrap()
            .0;
        assert!(err.contains("missing.pem"), "{err}");
        let err = settings(dir.path(), "c.pem", "c.pem")
            .build(Passwords::Fresh)
            .err()
            .unwrap()
            .0;
        assert!(err.contains("no PEM private key") && err.contains("c.pem"), "{err}");
        let err = settings(dir.path(), "other.pem", "k.pem")
            .build(Passwords::Fresh)
            .err()
            .unwrap()
            .0;
        assert!(err.contains("does not go with") && err.contains("other.pem"), "{err}");
        let mut peer = settings(dir.path(), "c.pem", "k.pem");
        peer.verify_mode = VerifyMode::ForcePeer;
        assert!(peer.build(Passwords::Fresh).err().unwrap().0.contains("ca=PATH"));
    }
}
