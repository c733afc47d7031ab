//! From a request path to names inside the public folder: percent-decoding
//! and the refusals that keep a request inside the root. Pure functions;
//! the disk is only touched by `locate.rs`.

/// Why a path is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathError {
    /// Not a path at all: a bad escape, NUL or another control byte, or
    /// bytes that are not UTF-8 (overlong forms included). Answered 400.
    Malformed,
    /// A path that tries to leave its folder or reach a hidden name: `.`
    /// and `..` segments, an encoded `/`, a `\`, a dotfile. Answered 404.
    Refused,
    /// Not for the public folder (`/.well-known/...`): the app answers.
    NotMine,
}

/// A request path taken apart: its segments, decoded, and whether it ended
/// with `/` (a directory's index is only served then).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PublicPath {
    pub segments: Vec<String>,
    pub trailing_slash: bool,
}

/// Decodes and checks `raw` (the path of the request target, without the
/// query). Empty segments (`//`) are skipped, as nginx merges slashes.
pub(crate) fn parse(raw: &[u8]) -> Result<PublicPath, PathError> {
    if raw.first() != Some(&b'/') {
        return Err(PathError::Malformed);
    }
    let mut segments = Vec::new();
    for (index, piece) in raw[1..].split(|&b| b == b'/').enumerate() {
        if piece.is_empty() {
            continue;
        }
        let decoded = decode_segment(piece)?;
        if decoded == "." || decoded == ".." {
            return Err(PathError::Refused);
        }
        if decoded.starts_with('.') {
            // ACME challenges and the like belong to the app.
            if index == 0 && decoded == ".well-known" {
                return Err(PathError::NotMine);
            }
            return Err(PathError::Refused);
        }
        segments.push(decoded);
    }
    Ok(PublicPath {
        segments,
        trailing_slash: raw.ends_with(b"/"),
    })
}

fn decode_segment(piece: &[u8]) -> Result<String, PathError> {
    let mut out = Vec::with_capacity(piece.len());
    let mut i = 0;
    while i < piece.len() {
        let byte = match piece[i] {
            b'%' => {
                let hi = piece.get(i + 1).and_then(|&b| hex(b));
                let lo = piece.get(i + 2).and_then(|&b| hex(b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(PathError::Malformed);
                };
                i += 3;
                let byte = (hi << 4) | lo;
                // An encoded separator would let one segment name a path.
                if byte == b'/' || byte == b'\\' {
                    return Err(PathError::Refused);
                }
                byte
            }
            b'\\' => return Err(PathError::Refused),
            other => {
                i += 1;
                other
            }
        };
        if byte < 0x20 || byte == 0x7f {
            return Err(PathError::Malformed);
        }
        out.push(byte);
    }
    // from_utf8 refuses overlong forms (%C0%AE for "."), surrogates and
    // stray continuation bytes.
    String::from_utf8(out).map_err(|_| PathError::Malformed)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(raw: &str) -> Vec<String> {
        parse(raw.as_bytes()).unwrap().segments
    }

    #[test]
    fn plain_and_encoded_names_decode() {
        assert_eq!(segments("/a/b.css"), ["a", "b.css"]);
        assert_eq!(segments("//a///b"), ["a", "b"]);
        assert_eq!(segments("/caf%C3%A9%20menu.txt"), ["café menu.txt"]);
        assert_eq!(segments("/a%2eb"), ["a.b"]);
        assert!(parse(b"/").unwrap().segments.is_empty());
        assert!(parse(b"/docs/").unwrap().trailing_slash);
        assert!(!parse(b"/docs").unwrap().trailing_slash);
    }

    #[test]
    fn traversal_separators_and_dotfiles_are_refused() {
        for raw in [
            "/..",
            "/a/../b",
            "/a/./b",
            "/%2e%2e/x",
            "/%2E%2E/x",
            "/.%2e/x",
            "/a%2f..%2fb",
            "/a%2Fb",
            "/a\\b",
            "/a%5c..%5cb",
            "/.env",
            "/.git/config",
            "/a/.htaccess",
            "/%2ehidden",
        ] {
            assert_eq!(parse(raw.as_bytes()), Err(PathError::Refused), "{raw}");
        }
    }

    #[test]
    fn bad_escapes_controls_and_bad_utf8_are_malformed() {
        for raw in [
            "/a%",
            "/a%2",
            "/a%zz",
            "/a%00b",
            "/a%0a",
            "/a%7f",
            "/%c0%ae%c0%ae/x",
            "/%e0%80%ae",
            "/%ff",
            "/%80",
            "/%ed%a0%80",
            "a/b",
            "",
        ] {
            assert_eq!(parse(raw.as_bytes()), Err(PathError::Malformed), "{raw}");
        }
        assert_eq!(parse(b"/a\x00b"), Err(PathError::Malformed));
    }

    #[test]
    fn well_known_goes_to_the_app() {
        assert_eq!(parse(b"/.well-known/acme-challenge/x"), Err(PathError::NotMine));
        assert_eq!(parse(b"/a/.well-known/x"), Err(PathError::Refused));
    }
}
