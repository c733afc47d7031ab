//! The engine's two outputs: errors to stderr, access lines to stdout, each
//! line written with one call so lines from different threads never mix.

use std::io::Write;
use std::time::{Duration, SystemTime};

pub fn error(message: &str) {
    let line = format!("[tsubame] {} ERROR {message}\n", timestamp());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub fn warn(message: &str) {
    let line = format!("[tsubame] {} WARN {message}\n", timestamp());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Common Log Format plus the time taken, as Puma's request log has it.
pub struct AccessEntry<'a> {
    pub peer: &'a str,
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub version: &'a str,
    pub status: u16,
    pub body_bytes: u64,
    pub elapsed: Duration,
}

pub fn access(entry: &AccessEntry<'_>) {
    let size = if entry.body_bytes == 0 {
        "-".to_string()
    } else {
        entry.body_bytes.to_string()
    };
    let line = format!(
        "{} - - [{}] \"{} {} {}\" {} {} {:.4}\n",
        entry.peer,
        httpdate::fmt_http_date(SystemTime::now()),
        String::from_utf8_lossy(entry.method),
        String::from_utf8_lossy(entry.target),
        entry.version,
        entry.status,
        size,
        entry.elapsed.as_secs_f64()
    );
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}

fn timestamp() -> String {
    httpdate::fmt_http_date(SystemTime::now())
}
