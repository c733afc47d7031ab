//! Choosing a bind's certificate by the name the client asked for (SNI).
//!
//! Certificates given with `sni=` answer that name (`*.example.com`
//! answers one label under it); the others, and those of `sni_dir`, answer
//! the names they are valid for, as a client would check them (webpki's
//! own name check, so wildcards and IP addresses behave as in the client).
//! In configuration order the first match wins; a client that sends no
//! name, or a name nothing matches, gets the first certificate: the
//! default.

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

#[derive(Debug)]
pub struct SniResolver {
    /// (explicit name, certificate); the first is the default.
    certs: Vec<(Option<String>, Arc<CertifiedKey>)>,
}

impl SniResolver {
    pub fn new(certs: Vec<(Option<String>, Arc<CertifiedKey>)>) -> SniResolver {
        SniResolver { certs }
    }

    fn pick(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = name {
            let name = name.to_ascii_lowercase();
            for (explicit, certified) in &self.certs {
                let matches = match explicit {
                    Some(pattern) => name_matches(pattern, &name),
                    None => certified.cert.first().is_some_and(|leaf| valid_for(leaf, &name)),
                };
                if matches {
                    return Some(certified.clone());
                }
            }
        }
        self.certs.first().map(|(_, c)| c.clone())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// `pattern` as given to `sni=`: an exact name, or `*.domain` for one
/// label under `domain`.
fn name_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(domain) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == domain),
        None => pattern == name,
    }
}

fn valid_for(leaf: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(server_name) = ServerName::try_from(name) else {
        return false;
    };
    webpki::EndEntityCert::try_from(leaf).is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&server_name).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_names_and_wildcards() {
        assert!(name_matches("a.example", "a.example"));
        assert!(name_matches("*.example", "a.example"));
        assert!(!name_matches("*.example", "a.b.example"));
        assert!(!name_matches("*.example", "example"));
        assert!(name_matches("A.Example", "a.example"));
    }
}
