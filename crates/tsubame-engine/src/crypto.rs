//! The cryptography library this build uses, chosen by a Cargo feature:
//! `aws-lc` (the default) or `ring`. Both expose the same API for what the
//! engine needs (AEAD and HKDF for session tickets, SHA-1 for the
//! WebSocket handshake) and each has a rustls provider, so the rest of the
//! crate names `crypto::lib` and `crypto::provider` and never the library.
//!
//! aws-lc is the default because an RSA handshake is dominated by the
//! server's RSA signature (63% of the workers' time with ring), and
//! aws-lc's is faster on x86-64 (it has OpenSSL's AVX-512 IFMA code;
//! ring only the MULX one): with ring, RSA handshakes per second were
//! 0.89x nginx's, with aws-lc 1.16x (docs/TLS_HTTP2.md). ring stays selectable
//! for a build that cannot compile aws-lc (`--no-default-features
//! --features ring`). With both features on, aws-lc is used.

#[cfg(not(any(feature = "aws-lc", feature = "ring")))]
compile_error!("tsubame-engine needs a crypto library: enable the `aws-lc` (default) or `ring` feature");

#[cfg(feature = "aws-lc")]
pub use aws_lc_rs as lib;
#[cfg(feature = "aws-lc")]
pub use rustls::crypto::aws_lc_rs as provider;

#[cfg(all(feature = "ring", not(feature = "aws-lc")))]
pub use ring as lib;
#[cfg(all(feature = "ring", not(feature = "aws-lc")))]
pub use rustls::crypto::ring as provider;

/// rustls's default provider of the selected library: every cipher suite
/// and key exchange group it has, its signature algorithms and key loader.
pub fn default_provider() -> rustls::crypto::CryptoProvider {
    provider::default_provider()
}

#[cfg(test)]
mod tests {
    use crate::net::tls::{self_signed, TlsSettings};
    use crate::net::tls_certs::Passwords;
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, NamedGroup, RootCertStore, ServerConnection};
    use std::sync::Arc;

    /// A server built the way a bind is, on a fresh self-signed certificate,
    /// and a client that trusts it; returns the group they agreed on.
    fn agreed_group(client_groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup>) -> Option<NamedGroup> {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed().unwrap();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), &key).unwrap();
        let server_config = TlsSettings::with_files(dir.path().join("c.pem"), dir.path().join("k.pem"))
            .build(Passwords::Fresh)
            .unwrap()
            .config;
        let mut roots = RootCertStore::empty();
        for der in rustls_pemfile::certs(&mut cert.as_bytes()) {
            roots.add(der.unwrap()).unwrap();
        }
        let provider = CryptoProvider {
            kx_groups: client_groups,
            ..super::default_provider()
        };
        let client_config = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").unwrap();
        let mut client = ClientConnection::new(Arc::new(client_config), name).unwrap();
        let mut server = ServerConnection::new(Arc::new(server_config)).unwrap();
        for _ in 0..10 {
            let mut wire = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut wire).unwrap();
            }
            let mut rest = &wire[..];
            while !rest.is_empty() {
                server.read_tls(&mut rest).unwrap();
                server.process_new_packets().ok()?;
            }
            let mut wire = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut wire).unwrap();
            }
            let mut rest = &wire[..];
            while !rest.is_empty() {
                client.read_tls(&mut rest).unwrap();
                client.process_new_packets().ok()?;
            }
            if !client.is_handshaking() && !server.is_handshaking() {
                return client.negotiated_key_exchange_group().map(|g| g.name());
            }
        }
        None
    }

    #[test]
    fn a_client_offering_x25519_first_gets_x25519() {
        let groups = super::default_provider().kx_groups;
        assert_eq!(groups[0].name(), NamedGroup::X25519);
        assert_eq!(agreed_group(groups), Some(NamedGroup::X25519));
        let p256 = super::provider::kx_group::SECP256R1;
        assert_eq!(agreed_group(vec![p256]), Some(NamedGroup::secp256r1));
    }

    /// The post-quantum hybrid (docs/TLS_HTTP2.md): aws-lc-rs has it, last
    /// in the server's list, but the client's preference among the groups
    /// both have decides (rustls follows the client's key shares), so a
    /// client that prefers it, as current browsers do, gets it.
    #[cfg(feature = "aws-lc")]
    #[test]
    fn aws_lc_agrees_on_x25519mlkem768_with_a_client_that_prefers_it() {
        use super::provider::kx_group::{X25519, X25519MLKEM768};
        let names: Vec<NamedGroup> = super::default_provider().kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(names.last(), Some(&NamedGroup::X25519MLKEM768), "{names:?}");
        assert_eq!(
            agreed_group(vec![X25519MLKEM768, X25519]),
            Some(NamedGroup::X25519MLKEM768)
        );
        assert_eq!(agreed_group(vec![X25519MLKEM768]), Some(NamedGroup::X25519MLKEM768));
    }
}
