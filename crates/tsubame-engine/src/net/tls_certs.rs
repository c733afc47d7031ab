//! One certificate of a TLS bind: its chain and key from files or from PEM
//! text (Puma's `cert_pem`/`key_pem`), a key encrypted as PKCS#8 opened
//! with the output of `key_password_command`, and an OCSP response to
//! staple. Read at boot and again on every reload (HUP).

use crate::net::tls_error::TlsError;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Passwords `key_password_command` printed, by command. The process that
/// binds runs it at boot; the engines that adopt its sockets (in a forked
/// worker too, which inherits this memory) use what it printed, so the
/// command runs once at boot. A reload runs it again.
static PASSWORDS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Whether to run `key_password_command` again or use its last output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passwords {
    Remembered,
    Fresh,
}

/// Where PEM text comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    /// The text itself (`cert_pem=`, `key_pem=`), named in messages by
    /// the query key rather than quoted.
    Inline(&'static str, String),
}

impl PemSource {
    fn describe(&self, what: &str) -> String {
        match self {
            PemSource::File(path) => format!("{what} {}", path.display()),
            PemSource::Inline(key, _) => format!("{what} from {key}"),
        }
    }

    fn read(&self, what: &str) -> Result<Vec<u8>, TlsError> {
        match self {
            PemSource::File(path) => {
                std::fs::read(path).map_err(|e| TlsError(format!("cannot read {what} {}: {e}", path.display())))
            }
            PemSource::Inline(_, text) => Ok(text.clone().into_bytes()),
        }
    }
}

/// What the bind says about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSpec {
    pub cert: PemSource,
    pub key: PemSource,
    /// Run with `sh -c`; its standard output, less the final newline, is
    /// the password of an encrypted PKCS#8 key.
    pub key_password_command: Option<String>,
    /// A DER OCSP response to staple.
    pub ocsp: Option<PathBuf>,
    /// The host name (or `*.domain`) that picks this certificate; without
    /// one, the names the certificate itself is valid for.
    pub sni: Option<String>,
}

impl CertSpec {
    /// Reads everything and checks that the key goes with the certificate.
    pub fn load(&self, provider: &CryptoProvider, passwords: Passwords) -> Result<CertifiedKey, TlsError> {
        let certs = load_certs(&self.cert, "certificate")?;
        let key = self.load_key(passwords)?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError(format!("unusable {}: {e}", self.key.describe("key"))))?;
        let mut certified = CertifiedKey::new(certs, signing);
        match certified.keys_match() {
            // A key type whose public half rustls cannot derive: the first
            // handshake will tell, as before this check existed.
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(e) => {
                return Err(TlsError(format!(
                    "{} does not go with {}: {e}",
                    self.key.describe("key"),
                    self.cert.describe("certificate")
                )))
            }
        }
        if let Some(path) = &self.ocsp {
            let response = std::fs::read(path)
                .map_err(|e| TlsError(format!("cannot read OCSP response {}: {e}", path.display())))?;
            // An OCSP response is a DER SEQUENCE; a PEM or empty file is a
            // mistake worth stopping for rather than stapling garbage.
            if response.first() != Some(&0x30) {
                return Err(TlsError(format!(
                    "OCSP response {} is not DER (expected the output of `openssl ocsp -respout`)",
                    path.display()
                )));
            }
            certified.ocsp = Some(response);
        }
        Ok(certified)
    }

    fn load_key(&self, passwords: Passwords) -> Result<PrivateKeyDer<'static>, TlsError> {
        let what = self.key.describe("key");
        let text = self.key.read("key")?;
        if let Some(encrypted) = find_pem(&text, "ENCRYPTED PRIVATE KEY") {
            let Some(command) = &self.key_password_command else {
                return Err(TlsError(format!(
                    "{what} is encrypted; give key_password_command to supply its password"
                )));
            };
            let password = password_for(command, passwords)?;
            let info = pkcs8::EncryptedPrivateKeyInfo::try_from(encrypted.as_slice())
                .map_err(|e| TlsError(format!("cannot parse encrypted {what}: {e}")))?;
            let plain = info.decrypt(password.as_bytes()).map_err(|e| {
                TlsError(format!(
                    "cannot decrypt {what} with the key_password_command output: {e}"
                ))
            })?;
            return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                plain.as_bytes().to_vec(),
            )));
        }
        if text.windows(9).any(|w| w == b"ENCRYPTED") {
            return Err(TlsError(format!(
                "{what} is encrypted in OpenSSL's legacy format; convert it with \
                 `openssl pkcs8 -topk8 -v2 aes-256-cbc` (encrypted PKCS#8 is supported)"
            )));
        }
        rustls_pemfile::private_key(&mut BufReader::new(text.as_slice()))
            .map_err(|e| TlsError(format!("cannot parse {what}: {e}")))?
            .ok_or_else(|| TlsError(format!("no PEM private key found in {what}")))
    }
}

pub fn load_certs(source: &PemSource, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = source.read(what)?;
    let certs = rustls_pemfile::certs(&mut BufReader::new(text.as_slice()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("cannot parse {}: {e}", source.describe(what))))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "no PEM certificate found in {}",
            source.describe(what)
        )));
    }
    Ok(certs)
}

/// The DER bytes of the first PEM block labelled `label`.
fn find_pem(text: &[u8], label: &str) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    let begin = format!("-----BEGIN {label}-----");
    let start = text.find(&begin)? + begin.len();
    let end = text[start..].find(&format!("-----END {label}-----"))? + start;
    let whole = format!("{begin}\n{}\n-----END {label}-----\n", text[start..end].trim());
    pkcs8::der::pem::decode_vec(whole.as_bytes()).ok().map(|(_, der)| der)
}

fn password_for(command: &str, passwords: Passwords) -> Result<String, TlsError> {
    let mut cache = PASSWORDS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if passwords == Passwords::Remembered {
        if let Some(password) = cache.get(command) {
            return Ok(password.clone());
        }
    }
    let password = run_password_command(command)?;
    cache.insert(command.to_string(), password.clone());
    Ok(password)
}

/// Puma's `key_password_command`: run through the shell, stdout is the
/// password (one trailing newline removed, as Puma's `chomp`). A failing
/// command stops the boot, or the reload, naming it.
fn run_password_command(command: &str) -> Result<String, TlsError> {
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| TlsError(format!("cannot run key_password_command {command:?}: {e}")))?;
    if !output.status.success() {
        return Err(TlsError(format!(
            "key_password_command {command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let mut password = String::from_utf8(output.stdout).map_err(|_| {
        TlsError(format!(
            "key_password_command {command:?} printed a password that is not UTF-8"
        ))
    })?;
    if password.ends_with('\n') {
        password.pop();
        if password.ends_with('\r') {
            password.pop();
        }
    }
    Ok(password)
}

/// A directory of certificate/key pairs (`sni_dir=`): `NAME.pem` or
/// `NAME.crt` with `NAME.key`, and `NAME.ocsp` to staple if present; each
/// picked for the names its certificate is valid for. Sorted by file name.
pub fn directory_pairs(dir: &Path) -> Result<Vec<CertSpec>, TlsError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| TlsError(format!("cannot read sni_dir {}: {e}", dir.display())))?;
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("pem" | "crt")))
        .collect();
    names.sort();
    let mut pairs = Vec::new();
    for cert in names {
        let key = cert.with_extension("key");
        if !key.is_file() {
            continue;
        }
        let ocsp = Some(cert.with_extension("ocsp")).filter(|p| p.is_file());
        pairs.push(CertSpec {
            cert: PemSource::File(cert),
            key: PemSource::File(key),
            key_password_command: None,
            ocsp,
            sni: None,
        });
    }
    if pairs.is_empty() {
        return Err(TlsError(format!(
            "sni_dir {} holds no certificate/key pair (NAME.pem or NAME.crt with NAME.key)",
            dir.display()
        )));
    }
    Ok(pairs)
}
