//! The `date:` response header, formatted once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static CACHED: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// Appends `date: <IMF-fixdate>\r\n`.
pub fn append_date_header(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    CACHED.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            cached.1.clear();
            cached.1.extend_from_slice(b"date: ");
            cached.1.extend_from_slice(httpdate::fmt_http_date(now).as_bytes());
            cached.1.extend_from_slice(b"\r\n");
            cached.0 = secs;
        }
        out.extend_from_slice(&cached.1);
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_an_imf_date_line() {
        let mut out = Vec::new();
        super::append_date_header(&mut out);
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("date: ") && line.ends_with(" GMT\r\n"), "{line}");
        assert_eq!(line.len(), "date: Sun, 22 Nov 2026 03:04:05 GMT\r\n".len());
    }
}
