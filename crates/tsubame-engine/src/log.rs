//! The engine's error and warning lines, to stderr, each written with one
//! call so lines from different threads never mix. (Access lines are the
//! access log's, `observe/access_log.rs`.)

use std::io::Write;
use std::time::SystemTime;

pub fn error(message: &str) {
    let line = format!("[tsubame] {} ERROR {message}\n", timestamp());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub fn warn(message: &str) {
    let line = format!("[tsubame] {} WARN {message}\n", timestamp());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

fn timestamp() -> String {
    httpdate::fmt_http_date(SystemTime::now())
}
