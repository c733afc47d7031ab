//! Precompressed siblings (`app.css.br`, `.zst`, `.gz`) chosen by the
//! client's Accept-Encoding (RFC 9110 §12.5.3).

/// The encodings a sibling may have, by file suffix, in the order preferred
/// when the client weighs them the same.
pub(crate) const CODINGS: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// The Content-Encoding value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }
}

/// The quality (0 to 1000) Accept-Encoding gives `coding`: its own entry,
/// else `*`, else 0. No header at all accepts no encoding here: only the
/// file itself is sure to be understood.
fn quality(accept: &[u8], coding: Coding) -> u32 {
    let mut star = None;
    for entry in accept.split(|&b| b == b',') {
        let mut params = entry.split(|&b| b == b';');
        let name = params.next().unwrap_or_default().trim_ascii();
        // No q means 1; a q that is not a qvalue accepts nothing.
        let q = params
            .find_map(|p| {
                let p = p.trim_ascii();
                p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))
            })
            .map_or(Some(1000), parse_q)
            .unwrap_or(0);
        let matches = name.eq_ignore_ascii_case(coding.name().as_bytes())
            || (coding == Coding::Gzip && name.eq_ignore_ascii_case(b"x-gzip"));
        if matches {
            return q;
        }
        if name == b"*" {
            star = Some(q);
        }
    }
    star.unwrap_or(0)
}

/// A qvalue as thousandths; None when malformed.
fn parse_q(value: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let q: f64 = text.parse().ok()?;
    (0.0..=1.0).contains(&q).then(|| (q * 1000.0).round() as u32)
}

/// The best of the `available` codings for this Accept-Encoding, if the
/// client accepts any: highest quality, ties by `CODINGS` order.
pub(crate) fn choose(accept: Option<&[u8]>, available: &[Coding]) -> Option<Coding> {
    let accept = accept?;
    let mut best: Option<(u32, Coding)> = None;
    for coding in CODINGS.iter().copied().filter(|c| available.contains(c)) {
        let q = quality(accept, coding);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, coding));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Coding] = &CODINGS;

    #[test]
    fn picks_by_quality_then_preference() {
        assert_eq!(choose(Some(b"gzip, deflate, br, zstd"), ALL), Some(Coding::Br));
        assert_eq!(choose(Some(b"gzip;q=1, br;q=0.5"), ALL), Some(Coding::Gzip));
        assert_eq!(choose(Some(b"gzip"), ALL), Some(Coding::Gzip));
        assert_eq!(choose(Some(b"x-gzip"), ALL), Some(Coding::Gzip));
        assert_eq!(
            choose(Some(b"zstd, gzip"), &[Coding::Gzip, Coding::Zstd]),
            Some(Coding::Zstd)
        );
        assert_eq!(choose(Some(b"br"), &[Coding::Gzip]), None);
        assert_eq!(choose(Some(b"*"), &[Coding::Gzip]), Some(Coding::Gzip));
        assert_eq!(
            choose(Some(b"*, gzip;q=0"), &[Coding::Gzip, Coding::Br]),
            Some(Coding::Br)
        );
    }

    #[test]
    fn refusals_and_no_header() {
        assert_eq!(choose(None, ALL), None);
        assert_eq!(choose(Some(b"identity"), ALL), None);
        assert_eq!(choose(Some(b"br;q=0, gzip;q=0"), ALL), None);
        assert_eq!(choose(Some(b"gzip;q=2"), ALL), None);
        assert_eq!(choose(Some(b""), ALL), None);
    }
}
