//! The cryptography library this build uses, chosen by a Cargo feature:
//! `aws-lc` (the default) or `ring`. Both expose the same API for what the
//! engine needs (AEAD and HKDF for session tickets, SHA-1 for the
//! WebSocket handshake) and each has a rustls provider, so the rest of the
//! crate names `crypto::lib` and `crypto::provider` and never the library.
//!
//! aws-lc is the default because an RSA handshake is dominated by the
//! server's RSA signature, and aws-lc's is about twice as fast as ring's
//! on x86-64 (it has OpenSSL's AVX-512 and MULX code paths; ring only the
//! MULX one): with ring, RSA handshakes per second were level with nginx,
//! with aws-lc they are ahead (docs/TLS_HTTP2.md). ring stays selectable
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
