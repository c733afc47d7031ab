//! The TLS keys of a bind's query string, as Puma writes them
//! (`cert`, `key`, `cert_pem`, `key_pem`, `key_password_command`, `ca`,
//! `verify_mode`, `ssl_cipher_filter`, `ssl_ciphersuites`, `reuse`,
//! `verification_flags`), plus Tsubame's `sni`, `sni_dir` and `ocsp`.
//!
//! Several certificates on one bind (SNI): the unsuffixed certificate keys
//! are the default certificate; `cert.1`, `key.1`, `sni.1`... a second,
//! and so on. `ssl_bind` repeated with `sni:` for one address is merged
//! into this form before binding (lib/tsubame/config/bind_uri.rb).

use crate::net::tls::{
    CrlCheck, TlsSettings, VerifyMode, DEFAULT_SESSION_CACHE, DEFAULT_TICKET_ROTATION, PUMA_REUSE_DEFAULT,
};
use crate::net::tls_certs::{CertSpec, PemSource};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One certificate's keys as they arrive, before they are checked.
#[derive(Default)]
struct CertKeys {
    cert: Option<PemSource>,
    key: Option<PemSource>,
    password: Option<String>,
    ocsp: Option<PathBuf>,
    sni: Option<String>,
}

#[derive(Default)]
pub struct TlsQuery {
    certs: BTreeMap<u32, CertKeys>,
    sni_dir: Option<PathBuf>,
    ca: Option<PathBuf>,
    verify_mode: Option<VerifyMode>,
    cipher_filter: Option<String>,
    ciphersuites: Option<String>,
    session_cache: Option<usize>,
    crl_check: Option<CrlCheck>,
}

/// OpenSSL's verification flags Puma passes on (`verification_flags=`)
/// that need nothing here: rustls's verifier (webpki) already behaves as
/// they ask, or they concern certificate policies, which it does not
/// process. `CRL_CHECK` and `CRL_CHECK_ALL` are mapped onto webpki's CRL
/// checks; the rest (`NO_CHECK_TIME`, `IGNORE_CRITICAL`, `SUITEB_*`, delta
/// CRLs) would change what is checked in ways webpki cannot, so they stop
/// the boot naming the flag.
const VERIFICATION_FLAGS: &[&str] = &[
    "USE_CHECK_TIME",
    "X509_STRICT",
    "ALLOW_PROXY_CERTS",
    "POLICY_CHECK",
    "EXPLICIT_POLICY",
    "INHIBIT_ANY",
    "INHIBIT_MAP",
    "NOTIFY_POLICY",
    "CHECK_SS_SIGNATURE",
    "TRUSTED_FIRST",
    "PARTIAL_CHAIN",
    "NO_ALT_CHAINS",
];

impl TlsQuery {
    /// Takes `name=value` if it is a TLS key. `Ok(false)`: not one of
    /// ours. `Err`: ours, with a bad value (the reason).
    pub fn accept(&mut self, name: &str, value: &str, decode: fn(&str) -> String) -> Result<bool, String> {
        let (base, index) = match name.split_once('.') {
            Some((base, n)) => match n.parse::<u32>() {
                Ok(i) if i >= 1 => (base, i),
                _ => {
                    return Err(format!(
                        "'{name}': a certificate's number is 1 or more (cert.1, key.1...)"
                    ))
                }
            },
            None => (name, 0),
        };
        let per_cert = matches!(
            base,
            "cert" | "key" | "cert_pem" | "key_pem" | "key_password_command" | "ocsp" | "sni"
        );
        if index > 0 && !per_cert {
            return Ok(false);
        }
        if per_cert {
            let entry = self.certs.entry(index).or_default();
            let text = decode(value);
            match base {
                "cert" => entry.cert = Some(PemSource::File(PathBuf::from(text))),
                "key" => entry.key = Some(PemSource::File(PathBuf::from(text))),
                "cert_pem" => entry.cert = Some(PemSource::Inline("cert_pem", text)),
                "key_pem" => entry.key = Some(PemSource::Inline("key_pem", text)),
                "key_password_command" => entry.password = Some(text),
                "ocsp" => entry.ocsp = Some(PathBuf::from(text)),
                _ => entry.sni = Some(text.to_ascii_lowercase()),
            }
            return Ok(true);
        }
        match name {
            "sni_dir" => self.sni_dir = Some(PathBuf::from(decode(value))),
            "ca" => self.ca = Some(PathBuf::from(decode(value))),
            "verify_mode" => {
                self.verify_mode = Some(VerifyMode::parse(value).ok_or("verify_mode must be none, peer or force_peer")?)
            }
            "ssl_cipher_filter" => self.cipher_filter = Some(decode(value)),
            "ssl_ciphersuites" => self.ciphersuites = Some(decode(value)),
            "reuse" => self.session_cache = Some(parse_reuse(&decode(value))?),
            "verification_flags" => {
                for flag in decode(value).split(',').map(str::trim).filter(|f| !f.is_empty()) {
                    if flag == "CRL_CHECK_ALL" {
                        self.crl_check = Some(CrlCheck::Chain);
                    } else if flag == "CRL_CHECK" {
                        self.crl_check = Some(self.crl_check.unwrap_or(CrlCheck::Leaf));
                    } else if !VERIFICATION_FLAGS.contains(&flag) {
                        return Err(format!(
                            "verification_flags: '{flag}' is not supported by rustls's verifier; \
                             accepted: CRL_CHECK, CRL_CHECK_ALL, {}",
                            VERIFICATION_FLAGS.join(", ")
                        ));
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Whether any key only a TLS bind can use was given.
    pub fn any(&self) -> bool {
        !self.certs.is_empty() || self.sni_dir.is_some() || self.ca.is_some()
    }

    /// The settings of a TLS bind.
    pub fn settings(self) -> Result<TlsSettings, String> {
        let mut certs = Vec::with_capacity(self.certs.len());
        for (index, keys) in self.certs {
            let suffix = if index == 0 { String::new() } else { format!(".{index}") };
            let (Some(cert), Some(key)) = (keys.cert, keys.key) else {
                return Err(if index == 0 && self.sni_dir.is_none() {
                    "a TLS bind needs cert=PATH and key=PATH (or cert_pem and key_pem, or --tls-self-signed \
                     for development)"
                        .to_string()
                } else {
                    format!("certificate{suffix} needs both cert{suffix} (or cert_pem{suffix}) and key{suffix} (or key_pem{suffix})")
                });
            };
            certs.push(CertSpec {
                cert,
                key,
                key_password_command: keys.password,
                ocsp: keys.ocsp,
                sni: keys.sni,
            });
        }
        if certs.is_empty() && self.sni_dir.is_none() {
            return Err(
                "a TLS bind needs cert=PATH and key=PATH (or cert_pem and key_pem, or --tls-self-signed for development)"
                    .to_string(),
            );
        }
        Ok(TlsSettings {
            certs,
            sni_dir: self.sni_dir,
            ca: self.ca,
            verify_mode: self.verify_mode.unwrap_or(VerifyMode::None),
            crl_check: self.crl_check.unwrap_or(CrlCheck::Off),
            http2: true,
            cipher_filter: self.cipher_filter,
            ciphersuites: self.ciphersuites,
            session_cache: self.session_cache.unwrap_or(DEFAULT_SESSION_CACHE),
            ticket_rotation: DEFAULT_TICKET_ROTATION,
        })
    }
}

/// Puma's `reuse=`: `dflt` (what `reuse: true` writes), `SIZE`,
/// `SIZE,TIMEOUT` or `,TIMEOUT`. The size is the TLS 1.2 session-ID cache;
/// rustls has no per-entry timeout, so TIMEOUT is accepted and unused
/// (tickets have their own lifetime, `tls_ticket_rotation`).
fn parse_reuse(value: &str) -> Result<usize, String> {
    if value == "dflt" || value == "true" {
        return Ok(PUMA_REUSE_DEFAULT);
    }
    let (size, timeout) = value.split_once(',').unwrap_or((value, ""));
    if !timeout.is_empty() && timeout.parse::<u64>().is_err() {
        return Err("reuse must be dflt, SIZE, SIZE,TIMEOUT or ,TIMEOUT (whole numbers)".into());
    }
    if size.is_empty() {
        return Ok(PUMA_REUSE_DEFAULT);
    }
    size.parse::<usize>()
        .map_err(|_| "reuse must be dflt, SIZE, SIZE,TIMEOUT or ,TIMEOUT (whole numbers)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn numbered_certificates_and_puma_reuse() {
        let mut q = TlsQuery::default();
        for (k, v) in [
            ("cert", "/a.pem"),
            ("key", "/a.key"),
            ("sni.1", "B.example"),
            ("cert.1", "/b.pem"),
            ("key_pem.1", "PEM"),
            ("ocsp.1", "/b.der"),
            ("reuse", "1000,300"),
        ] {
            assert!(q.accept(k, v, plain).unwrap(), "{k}");
        }
        assert!(!q.accept("backlog", "1", plain).unwrap());
        assert!(!q.accept("backlog.1", "1", plain).unwrap());
        assert!(q.accept("cert.0", "x", plain).is_err());
        let s = q.settings().unwrap();
        assert_eq!(s.certs.len(), 2);
        assert_eq!(s.certs[1].sni.as_deref(), Some("b.example"));
        assert_eq!(s.certs[1].key, PemSource::Inline("key_pem", "PEM".into()));
        assert_eq!(s.session_cache, 1000);
        assert_eq!(parse_reuse("dflt").unwrap(), PUMA_REUSE_DEFAULT);
        assert_eq!(parse_reuse(",20").unwrap(), PUMA_REUSE_DEFAULT);
        assert!(parse_reuse("lots").is_err());

        let mut q = TlsQuery::default();
        for flags in ["CRL_CHECK,PARTIAL_CHAIN", "CRL_CHECK_ALL"] {
            q.accept("verification_flags", flags, plain).unwrap();
        }
        assert!(q.accept("verification_flags", "NO_CHECK_TIME", plain).is_err());
        q.accept("cert", "/a.pem", plain).unwrap();
        q.accept("key", "/a.key", plain).unwrap();
        assert_eq!(q.settings().unwrap().crl_check, CrlCheck::Chain);

        let mut q = TlsQuery::default();
        q.accept("cert.1", "/b.pem", plain).unwrap();
        let err = q.settings().unwrap_err();
        assert!(err.contains("key.1"), "{err}");
    }
}
