//! Validators of a file (ETag, Last-Modified) and the conditional request
//! headers that compare against them (RFC 9110 §8.8, §13).

use std::fs::Metadata;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A file's validators: a strong ETag made of its modification time and
/// size (as nginx makes it), and its modification time in whole seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Validators {
    pub etag: String,
    pub modified_secs: u64,
}

impl Validators {
    pub(crate) fn of(meta: &Metadata) -> Validators {
        let modified_secs = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        Validators::new(modified_secs, meta.len())
    }

    pub(crate) fn new(modified_secs: u64, len: u64) -> Validators {
        Validators {
            etag: format!("\"{modified_secs:x}-{len:x}\""),
            modified_secs,
        }
    }

    pub(crate) fn last_modified(&self) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(self.modified_secs))
    }

    /// Whether a GET or HEAD with these header values gets 304: If-None-Match
    /// when present (weak comparison, `*` matches), else If-Modified-Since
    /// (RFC 9110 §13.2.2: the date is ignored when If-None-Match is there).
    pub(crate) fn not_modified(&self, if_none_match: Option<&[u8]>, if_modified_since: Option<&[u8]>) -> bool {
        if let Some(list) = if_none_match {
            return etag_list_matches(list, &self.etag);
        }
        match if_modified_since.and_then(parse_date) {
            Some(since) => self.modified_secs <= since,
            None => false,
        }
    }

    /// Whether a Range applies under this If-Range value (RFC 9110 §13.1.5):
    /// an ETag must match strongly, a date exactly.
    pub(crate) fn if_range_holds(&self, value: &[u8]) -> bool {
        let value = value.trim_ascii();
        if value.starts_with(b"\"") {
            return value == self.etag.as_bytes();
        }
        if value.starts_with(b"W/") {
            return false;
        }
        parse_date(value) == Some(self.modified_secs)
    }
}

fn parse_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let time = httpdate::parse_http_date(text).ok()?;
    time.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// Whether a comma-separated list of entity tags names `etag`, by weak
/// comparison (the `W/` prefix is ignored), as If-None-Match asks.
fn etag_list_matches(list: &[u8], etag: &str) -> bool {
    list.split(|&b| b == b',').any(|tag| {
        let tag = tag.trim_ascii();
        if tag == b"*" {
            return true;
        }
        tag.strip_prefix(b"W/").unwrap_or(tag) == etag.as_bytes()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> Validators {
        // 2023-11-14 22:13:20 UTC
        Validators::new(1_700_000_000, 4096)
    }

    #[test]
    fn etag_and_date_forms() {
        assert_eq!(v().etag, "\"6553f100-1000\"");
        assert_eq!(v().last_modified(), "Tue, 14 Nov 2023 22:13:20 GMT");
    }

    #[test]
    fn if_none_match_lists_weak_tags_and_star() {
        let etag = v().etag;
        assert!(v().not_modified(Some(etag.as_bytes()), None));
        assert!(v().not_modified(Some(format!("\"a\", W/{etag}").as_bytes()), None));
        assert!(v().not_modified(Some(b"*"), None));
        assert!(!v().not_modified(Some(b"\"other\""), None));
        // If-None-Match wins over a date that would say "not modified".
        assert!(!v().not_modified(Some(b"\"other\""), Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
    }

    #[test]
    fn if_modified_since_compares_seconds() {
        assert!(v().not_modified(None, Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
        assert!(v().not_modified(None, Some(b"Wed, 15 Nov 2023 00:00:00 GMT")));
        assert!(!v().not_modified(None, Some(b"Tue, 14 Nov 2023 22:13:19 GMT")));
        assert!(!v().not_modified(None, Some(b"yesterday")));
        assert!(!v().not_modified(None, None));
    }

    #[test]
    fn if_range_needs_a_strong_match_or_the_exact_date() {
        let etag = v().etag;
        assert!(v().if_range_holds(etag.as_bytes()));
        assert!(!v().if_range_holds(format!("W/{etag}").as_bytes()));
        assert!(!v().if_range_holds(b"\"other\""));
        assert!(v().if_range_holds(b"Tue, 14 Nov 2023 22:13:20 GMT"));
        assert!(!v().if_range_holds(b"Wed, 15 Nov 2023 00:00:00 GMT"));
    }
}
