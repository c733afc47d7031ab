//! The access log's line formats. Each line is built into one buffer with
//! its newline, on the I/O thread that served the request.

use crate::message::head::Version;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `log_requests`: the Common Log Format with an HTTP date and the
    /// seconds taken, as Puma's request log writes it.
    Puma,
    /// NCSA Common Log Format.
    Common,
    /// Common plus the referer and user agent (Apache's and nginx's
    /// `combined`).
    Combined,
    /// One JSON object a line.
    Json,
}

impl Format {
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "common" => Some(Format::Common),
            "combined" => Some(Format::Combined),
            "json" => Some(Format::Json),
            "puma" => Some(Format::Puma),
            _ => None,
        }
    }

    /// Whether lines of this format carry the user agent and referer.
    pub fn wants_agent(self) -> bool {
        matches!(self, Format::Combined | Format::Json)
    }
}

/// What one line says about a request.
#[derive(Debug)]
pub struct LogLine<'a> {
    pub peer: &'a str,
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub version: Version,
    pub status: u16,
    pub body_bytes: u64,
    pub duration: Duration,
    pub queue_wait: Option<Duration>,
    pub app: Option<Duration>,
    pub request_id: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
}

pub fn format_line(format: Format, line: &LogLine<'_>, worker: Option<u32>) -> Vec<u8> {
    let now = SystemTime::now();
    let mut out = String::with_capacity(256);
    match format {
        Format::Puma => {
            let _ = write!(
                out,
                "{} - - [{}] \"{} {} {}\" {} {} {:.4}",
                line.peer,
                httpdate::fmt_http_date(now),
                String::from_utf8_lossy(line.method),
                String::from_utf8_lossy(line.target),
                line.version.as_str(),
                line.status,
                size(line.body_bytes),
                line.duration.as_secs_f64()
            );
        }
        Format::Common | Format::Combined => {
            let _ = write!(out, "{} - - [{}] \"", line.peer, clf_time(now));
            quoted(&mut out, line.method);
            out.push(' ');
            quoted(&mut out, line.target);
            let _ = write!(
                out,
                " {}\" {} {}",
                line.version.as_str(),
                line.status,
                size(line.body_bytes)
            );
            if format == Format::Combined {
                out.push_str(" \"");
                quoted(&mut out, line.referer.unwrap_or(b"-"));
                out.push_str("\" \"");
                quoted(&mut out, line.user_agent.unwrap_or(b"-"));
                out.push('"');
            }
        }
        Format::Json => json_line(&mut out, line, now, worker),
    }
    out.push('\n');
    out.into_bytes()
}

fn size(bytes: u64) -> String {
    if bytes == 0 {
        "-".to_string()
    } else {
        bytes.to_string()
    }
}

fn json_line(out: &mut String, line: &LogLine<'_>, now: SystemTime, worker: Option<u32>) {
    out.push_str("{\"time\":\"");
    out.push_str(&iso_time(now));
    out.push_str("\",\"request_id\":");
    json_opt(out, line.request_id);
    out.push_str(",\"method\":");
    json_string(out, line.method);
    out.push_str(",\"path\":");
    json_string(out, line.target);
    let _ = write!(
        out,
        ",\"protocol\":\"{}\",\"status\":{},\"bytes\":{},\"duration\":{:.6}",
        line.version.as_str(),
        line.status,
        line.body_bytes,
        line.duration.as_secs_f64()
    );
    for (name, value) in [("queue_wait", line.queue_wait), ("app", line.app)] {
        match value {
            Some(d) => {
                let _ = write!(out, ",\"{name}\":{:.6}", d.as_secs_f64());
            }
            None => {
                let _ = write!(out, ",\"{name}\":null");
            }
        }
    }
    match worker {
        Some(w) => {
            let _ = write!(out, ",\"worker\":{w}");
        }
        None => out.push_str(",\"worker\":null"),
    }
    out.push_str(",\"remote_addr\":");
    json_string(out, line.peer.as_bytes());
    out.push_str(",\"user_agent\":");
    json_opt(out, line.user_agent);
    out.push_str(",\"referer\":");
    json_opt(out, line.referer);
    out.push('}');
}

fn json_opt(out: &mut String, value: Option<&[u8]>) {
    match value {
        Some(v) => json_string(out, v),
        None => out.push_str("null"),
    }
}

/// A JSON string; bytes that are not UTF-8 become U+FFFD, so a line is
/// always valid JSON whatever the client sent.
fn json_string(out: &mut String, value: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(value).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A field inside double quotes of a CLF line: `"` and `\` are escaped and
/// bytes outside printable ASCII written as `\xHH` (as nginx does), so a
/// client cannot forge a field or a line.
fn quoted(out: &mut String, value: &[u8]) {
    for &b in value {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            other => {
                let _ = write!(out, "\\x{other:02X}");
            }
        }
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    millis: u32,
}

fn parts(time: SystemTime) -> Parts {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    Parts {
        year,
        month,
        day,
        hour: of_day / 3600,
        minute: of_day % 3600 / 60,
        second: of_day % 60,
        millis: since.subsec_millis(),
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `10/Oct/2000:13:55:36 +0000`, always UTC.
pub fn clf_time(time: SystemTime) -> String {
    let p = parts(time);
    let month = MONTHS[(p.month as usize).saturating_sub(1).min(11)];
    format!(
        "{:02}/{month}/{}:{:02}:{:02}:{:02} +0000",
        p.day, p.year, p.hour, p.minute, p.second
    )
}

/// `2000-10-10T13:55:36.123Z`.
pub fn iso_time(time: SystemTime) -> String {
    let p = parts(time);
    format!(
        "{}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        p.year, p.month, p.day, p.hour, p.minute, p.second, p.millis
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>() -> LogLine<'a> {
        LogLine {
            peer: "10.0.0.1",
            method: b"GET",
            target: b"/a?b=\"c\"",
            version: Version::Http11,
            status: 200,
            body_bytes: 12,
            duration: Duration::from_millis(3),
            queue_wait: Some(Duration::from_micros(250)),
            app: Some(Duration::from_millis(2)),
            request_id: Some(b"abc"),
            user_agent: Some(b"curl/8\x01"),
            referer: None,
        }
    }

    #[test]
    fn dates() {
        // 2000-10-10T13:55:36Z
        let t = UNIX_EPOCH + Duration::from_millis(971_186_136_123);
        assert_eq!(clf_time(t), "10/Oct/2000:13:55:36 +0000");
        assert_eq!(iso_time(t), "2000-10-10T13:55:36.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(iso_time(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn combined_escapes_what_the_client_sent() {
        let s = String::from_utf8(format_line(Format::Combined, &line(), None)).unwrap();
        assert!(s.starts_with("10.0.0.1 - - ["), "{s}");
        assert!(
            s.ends_with("\"GET /a?b=\\\"c\\\" HTTP/1.1\" 200 12 \"-\" \"curl/8\\x01\"\n"),
            "{s}"
        );
    }

    #[test]
    fn json_has_every_field() {
        let s = String::from_utf8(format_line(Format::Json, &line(), Some(3))).unwrap();
        for part in [
            "\"request_id\":\"abc\"",
            "\"method\":\"GET\"",
            "\"path\":\"/a?b=\\\"c\\\"\"",
            "\"status\":200",
            "\"bytes\":12",
            "\"duration\":0.003000",
            "\"queue_wait\":0.000250",
            "\"app\":0.002000",
            "\"worker\":3",
            "\"remote_addr\":\"10.0.0.1\"",
            "\"user_agent\":\"curl/8\\u0001\"",
            "\"referer\":null",
        ] {
            assert!(s.contains(part), "{part} in {s}");
        }
        assert!(s.ends_with("}\n"));
    }
}
