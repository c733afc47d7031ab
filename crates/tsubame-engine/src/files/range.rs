//! The Range header (RFC 9110 §14.1.2): byte ranges of a file of known
//! length.

/// At most this many ranges in one request; more is answered with the
/// whole file (RFC 9110 §14.2 lets a server ignore Range).
pub(crate) const MAX_RANGES: usize = 16;

/// What a Range header asks of a file of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ranges {
    /// Not a byte-range set we take (another unit, bad syntax, too many
    /// ranges, or ranges adding up to more than the file): the whole file.
    Whole,
    /// No range overlaps the file: 416.
    Unsatisfiable,
    /// The satisfiable ranges, first to last byte inclusive, in the order
    /// asked.
    Parts(Vec<(u64, u64)>),
}

pub(crate) fn parse(value: &[u8], len: u64) -> Ranges {
    let Ok(text) = std::str::from_utf8(value) else {
        return Ranges::Whole;
    };
    let Some((unit, set)) = text.trim().split_once('=') else {
        return Ranges::Whole;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ranges::Whole;
    }
    let mut parts = Vec::new();
    let mut asked = 0usize;
    for spec in set.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        asked += 1;
        if asked > MAX_RANGES {
            return Ranges::Whole;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return Ranges::Whole;
        };
        let (first, last) = (first.trim(), last.trim());
        let range = if first.is_empty() {
            // A suffix: the last N bytes.
            let Some(n) = number(last) else {
                return Ranges::Whole;
            };
            (n > 0 && len > 0).then(|| (len - n.min(len), len - 1))
        } else {
            let Some(start) = number(first) else {
                return Ranges::Whole;
            };
            let end = if last.is_empty() {
                u64::MAX
            } else {
                match number(last) {
                    Some(end) if end >= start => end,
                    _ => return Ranges::Whole,
                }
            };
            (start < len).then(|| (start, end.min(len - 1)))
        };
        if let Some(range) = range {
            parts.push(range);
        }
    }
    if asked == 0 {
        return Ranges::Whole;
    }
    if parts.is_empty() {
        return Ranges::Unsatisfiable;
    }
    // Overlapping ranges that ask for more than the file are a way to make
    // a server send a file many times over: answered with it once.
    let total: u64 = parts.iter().map(|(a, b)| b - a + 1).sum();
    if parts.len() > 1 && total > len {
        return Ranges::Whole;
    }
    Ranges::Parts(parts)
}

/// Digits only: no sign, no spaces inside, no overflow.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(value: &str) -> Ranges {
        parse(value.as_bytes(), 1000)
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-99"), Ranges::Parts(vec![(0, 99)]));
        assert_eq!(p("bytes=900-"), Ranges::Parts(vec![(900, 999)]));
        assert_eq!(p("bytes=-100"), Ranges::Parts(vec![(900, 999)]));
        assert_eq!(p("bytes=-5000"), Ranges::Parts(vec![(0, 999)]));
        assert_eq!(p("bytes=990-5000"), Ranges::Parts(vec![(990, 999)]));
        assert_eq!(p("Bytes = 1-1"), Ranges::Parts(vec![(1, 1)]));
    }

    #[test]
    fn several_ranges_keep_their_order_and_drop_the_unsatisfiable() {
        assert_eq!(p("bytes=500-599, 0-9"), Ranges::Parts(vec![(500, 599), (0, 9)]));
        assert_eq!(p("bytes=0-9,2000-3000"), Ranges::Parts(vec![(0, 9)]));
        assert_eq!(p("bytes=0-9,,20-29"), Ranges::Parts(vec![(0, 9), (20, 29)]));
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(p("bytes=1000-"), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=5000-6000,2000-"), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=-0"), Ranges::Unsatisfiable);
        assert_eq!(parse(b"bytes=0-", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn ignored_forms_serve_the_whole_file() {
        for value in [
            "items=0-1",
            "bytes",
            "bytes=",
            "bytes=a-b",
            "bytes=5-1",
            "bytes=-",
            "bytes=+1-2",
            "bytes=1-2-3",
            "bytes=99999999999999999999-",
            "bytes=0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0",
        ] {
            assert_eq!(p(value), Ranges::Whole, "{value}");
        }
        // Overlaps adding up to more than the file.
        assert_eq!(p("bytes=0-999,0-999"), Ranges::Whole);
    }
}
