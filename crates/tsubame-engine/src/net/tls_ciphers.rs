//! Puma's `ssl_cipher_filter` (an OpenSSL cipher string, TLS 1.2) and
//! `ssl_ciphersuites` (OpenSSL's TLS 1.3 list) mapped onto the suites
//! rustls implements.
//!
//! A Puma config written for OpenSSL names suites rustls does not have
//! (DHE, CBC, CCM...). Refusing the whole config would make every hardened
//! Puma config unusable, and dropping the setting would serve suites the
//! operator excluded; so the string is evaluated with OpenSSL's rules over
//! rustls's suites, the intersection is served in the order the string
//! gives (the server's preference), and what it names that rustls lacks is
//! reported. An empty intersection is a configuration error.

use crate::crypto::provider::cipher_suite as suite;
use crate::net::tls_error::TlsError;
use rustls::SupportedCipherSuite;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Auth {
    Rsa,
    Ecdsa,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Enc {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20,
}

/// One TLS 1.2 suite of rustls's provider (aws-lc-rs and ring have the
/// same six), with the attributes OpenSSL's aliases select on.
struct Tls12 {
    openssl: &'static str,
    suite: SupportedCipherSuite,
    auth: Auth,
    enc: Enc,
}

impl Tls12 {
    fn bits(&self) -> u32 {
        if self.enc == Enc::Aes128Gcm {
            128
        } else {
            256
        }
    }
}

/// rustls's own preference order, which is also where the suites of an
/// alias are placed relative to each other.
fn tls12_table() -> [Tls12; 6] {
    [
        Tls12 {
            openssl: "ECDHE-ECDSA-AES256-GCM-SHA384",
            suite: suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            auth: Auth::Ecdsa,
            enc: Enc::Aes256Gcm,
        },
        Tls12 {
            openssl: "ECDHE-ECDSA-AES128-GCM-SHA256",
            suite: suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            auth: Auth::Ecdsa,
            enc: Enc::Aes128Gcm,
        },
        Tls12 {
            openssl: "ECDHE-ECDSA-CHACHA20-POLY1305",
            suite: suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            auth: Auth::Ecdsa,
            enc: Enc::Chacha20,
        },
        Tls12 {
            openssl: "ECDHE-RSA-AES256-GCM-SHA384",
            suite: suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            auth: Auth::Rsa,
            enc: Enc::Aes256Gcm,
        },
        Tls12 {
            openssl: "ECDHE-RSA-AES128-GCM-SHA256",
            suite: suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            auth: Auth::Rsa,
            enc: Enc::Aes128Gcm,
        },
        Tls12 {
            openssl: "ECDHE-RSA-CHACHA20-POLY1305",
            suite: suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            auth: Auth::Rsa,
            enc: Enc::Chacha20,
        },
    ]
}

fn tls13_table() -> [SupportedCipherSuite; 3] {
    [
        suite::TLS13_AES_256_GCM_SHA384,
        suite::TLS13_AES_128_GCM_SHA256,
        suite::TLS13_CHACHA20_POLY1305_SHA256,
    ]
}

/// Whether OpenSSL's alias `word` selects `s`; `None` when `word` is not
/// an alias or name OpenSSL would select any of rustls's suites with.
/// Aliases of things rustls never does (DHE, CBC, PSK...) are known and
/// select nothing.
fn alias_selects(word: &str, s: &Tls12) -> Option<bool> {
    let iana = format!("{:?}", s.suite.suite());
    Some(match word {
        "ALL" | "DEFAULT" | "HIGH" | "TLSv1.2" | "AEAD" | "kECDHE" | "kEECDH" | "ECDHE" | "EECDH" => true,
        "FIPS" => s.enc != Enc::Chacha20,
        "aRSA" | "RSA" => s.auth == Auth::Rsa,
        "aECDSA" | "ECDSA" => s.auth == Auth::Ecdsa,
        "AES" => s.enc != Enc::Chacha20,
        "AESGCM" => s.enc != Enc::Chacha20,
        "AES128" => s.enc == Enc::Aes128Gcm,
        "AES256" => s.enc == Enc::Aes256Gcm,
        "CHACHA20" => s.enc == Enc::Chacha20,
        "SHA256" => s.enc != Enc::Aes256Gcm,
        "SHA384" => s.enc == Enc::Aes256Gcm,
        "COMPLEMENTOFDEFAULT"
        | "COMPLEMENTOFALL"
        | "MEDIUM"
        | "LOW"
        | "EXPORT"
        | "EXP"
        | "eNULL"
        | "NULL"
        | "aNULL"
        | "kRSA"
        | "kDHE"
        | "kEDH"
        | "DHE"
        | "EDH"
        | "DH"
        | "kDH"
        | "ADH"
        | "AECDH"
        | "kPSK"
        | "PSK"
        | "ECDHEPSK"
        | "DHEPSK"
        | "RSAPSK"
        | "kSRP"
        | "SRP"
        | "aPSK"
        | "DSS"
        | "aDSS"
        | "DES"
        | "3DES"
        | "RC4"
        | "RC2"
        | "IDEA"
        | "SEED"
        | "MD5"
        | "SHA1"
        | "SHA"
        | "CAMELLIA"
        | "CAMELLIA128"
        | "CAMELLIA256"
        | "ARIA"
        | "ARIA128"
        | "ARIA256"
        | "ARIAGCM"
        | "AESCCM"
        | "AESCCM8"
        | "SSLv3"
        | "TLSv1"
        | "TLSv1.0"
        | "kGOST"
        | "aGOST"
        | "GOST94"
        | "GOST89MAC"
        | "kECDHEPSK"
        | "kDHEPSK"
        | "kRSAPSK"
        | "aSRP" => false,
        name => {
            if name == s.openssl || name == iana {
                true
            } else if is_cipher_name(name) {
                false
            } else {
                return None;
            }
        }
    })
}

/// rustls calls the TLS 1.3 suites `TLS13_...`; OpenSSL and the RFC `TLS_...`.
fn openssl_tls13_name(s: &SupportedCipherSuite) -> String {
    format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1)
}

/// A word that looks like a single cipher's name (OpenSSL's dashed form
/// or the IANA one) rather than an alias.
fn is_cipher_name(word: &str) -> bool {
    word.starts_with("TLS_") || word.contains('-')
}

/// The suites to offer, in the server's order of preference, and the
/// names the configuration gave that rustls does not implement.
#[derive(Debug)]
pub struct CipherChoice {
    pub suites: Vec<SupportedCipherSuite>,
    pub unavailable: Vec<String>,
}

impl CipherChoice {
    /// `filter`: `ssl_cipher_filter` (TLS 1.2); `tls13`: `ssl_ciphersuites`.
    /// Either absent means rustls's own list for that version.
    pub fn new(filter: Option<&str>, tls13: Option<&str>) -> Result<CipherChoice, TlsError> {
        let mut unavailable = Vec::new();
        let mut suites = match tls13 {
            None => tls13_table().to_vec(),
            Some(list) => {
                let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
                for name in list.split(':').map(str::trim).filter(|n| !n.is_empty()) {
                    match tls13_table().into_iter().find(|s| openssl_tls13_name(s) == name) {
                        Some(s) if !chosen.contains(&s) => chosen.push(s),
                        Some(_) => {}
                        None => unavailable.push(name.to_string()),
                    }
                }
                if chosen.is_empty() {
                    return Err(TlsError(format!(
                        "ssl_ciphersuites {list:?} names no TLS 1.3 suite rustls implements \
                         (TLS_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256, TLS_CHACHA20_POLY1305_SHA256)"
                    )));
                }
                chosen
            }
        };
        match filter {
            None => suites.extend(tls12_table().into_iter().map(|s| s.suite)),
            Some(text) => {
                let (chosen, missing) = evaluate_filter(text);
                if chosen.is_empty() {
                    return Err(TlsError(format!(
                        "ssl_cipher_filter {text:?} selects no TLS 1.2 suite rustls implements \
                         (ECDHE with AES-GCM or ChaCha20-Poly1305, RSA or ECDSA certificates)"
                    )));
                }
                suites.extend(chosen);
                unavailable.extend(missing);
            }
        }
        Ok(CipherChoice { suites, unavailable })
    }

    /// The one warning line for names left out, if any.
    pub fn warning(&self) -> Option<String> {
        if self.unavailable.is_empty() {
            None
        } else {
            Some(format!(
                "ssl_cipher_filter/ssl_ciphersuites: rustls does not implement {}; serving the rest",
                self.unavailable.join(", ")
            ))
        }
    }
}

/// OpenSSL's cipher-string rules over the TLS 1.2 table: items separated
/// by `:`, `,` or spaces; `A+B` selects what both select; a plain item
/// appends what it selects that is not already in the list, `-` takes it
/// out (it may come back), `!` takes it out for good, `+` moves it to the
/// end; `@STRENGTH` sorts by key length; `@SECLEVEL=n` changes nothing
/// here. Returns the list and the additive items that selected nothing.
fn evaluate_filter(text: &str) -> (Vec<SupportedCipherSuite>, Vec<String>) {
    let table = tls12_table();
    let mut list: Vec<usize> = Vec::new();
    let mut killed = [false; 6];
    let mut missing = Vec::new();
    for item in text.split([':', ',', ' ']).map(str::trim).filter(|i| !i.is_empty()) {
        if item == "@STRENGTH" {
            list.sort_by_key(|&i| std::cmp::Reverse(table[i].bits()));
            continue;
        }
        if item.starts_with('@') {
            continue;
        }
        let (op, body) = match item.as_bytes()[0] {
            b'!' | b'-' | b'+' => (item.as_bytes()[0], &item[1..]),
            _ => (b' ', item),
        };
        let selected: Vec<usize> = (0..table.len())
            .filter(|&i| body.split('+').all(|word| alias_selects(word, &table[i]) == Some(true)))
            .collect();
        match op {
            b'!' => {
                for &i in &selected {
                    killed[i] = true;
                }
                list.retain(|i| !selected.contains(i));
            }
            b'-' => list.retain(|i| !selected.contains(i)),
            b'+' => {
                let (moved, kept): (Vec<usize>, Vec<usize>) = list.iter().partition(|i| selected.contains(i));
                list = kept;
                list.extend(moved);
            }
            _ => {
                if selected.is_empty() {
                    missing.push(body.to_string());
                }
                for i in selected {
                    if !killed[i] && !list.contains(&i) {
                        list.push(i);
                    }
                }
            }
        }
    }
    (list.into_iter().map(|i| table[i].suite).collect(), missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(choice: &CipherChoice) -> Vec<String> {
        choice.suites.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn no_setting_keeps_rustls_list() {
        let choice = CipherChoice::new(None, None).unwrap();
        assert_eq!(choice.suites.len(), 9);
        assert!(choice.warning().is_none());
    }

    #[test]
    fn mozilla_intermediate_keeps_order_and_names_dhe() {
        let filter = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
                      ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
                      DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384";
        let choice = CipherChoice::new(Some(filter), None).unwrap();
        let names = names(&choice);
        assert_eq!(names[3], "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256");
        assert_eq!(names[4], "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
        assert_eq!(names.len(), 9);
        assert_eq!(
            choice.unavailable,
            ["DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384"]
        );
        let warning = choice.warning().unwrap();
        assert!(
            warning.contains("DHE-RSA-AES128-GCM-SHA256, DHE-RSA-AES256-GCM-SHA384"),
            "{warning}"
        );
    }

    #[test]
    fn aliases_exclusions_and_moves() {
        let choice = CipherChoice::new(Some("HIGH:!aNULL:!CHACHA20:+AES128"), None).unwrap();
        assert_eq!(
            &names(&choice)[3..],
            [
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ]
        );
        let choice = CipherChoice::new(Some("ECDHE+AESGCM+aRSA:-ALL:ECDHE+CHACHA20"), None).unwrap();
        assert_eq!(names(&choice)[3..].len(), 2);
        let choice = CipherChoice::new(Some("CHACHA20:!ECDSA:ECDSA"), None).unwrap();
        assert_eq!(names(&choice)[3..], ["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"]);
        let choice = CipherChoice::new(Some("AES128:AES256:@STRENGTH"), None).unwrap();
        assert_eq!(names(&choice)[3], "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384");
    }

    #[test]
    fn empty_intersections_name_the_directive() {
        let err = CipherChoice::new(Some("DHE-RSA-AES256-SHA:AES256-SHA"), None)
            .unwrap_err()
            .0;
        assert!(err.starts_with("ssl_cipher_filter"), "{err}");
        let err = CipherChoice::new(None, Some("TLS_AES_128_CCM_SHA256")).unwrap_err().0;
        assert!(err.starts_with("ssl_ciphersuites"), "{err}");
        let choice = CipherChoice::new(None, Some("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_CCM_8_SHA256")).unwrap();
        assert_eq!(names(&choice)[0], "TLS13_CHACHA20_POLY1305_SHA256");
        assert_eq!(choice.unavailable, ["TLS_AES_128_CCM_8_SHA256"]);
    }
}
