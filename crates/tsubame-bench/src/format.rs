//! Numbers as people read them: latencies, byte counts, durations and
//! rates. Shared by the live progress line (`run`), the text report and
//! the HTML page; depends on nothing else in the crate.

use std::time::Duration;

/// A latency in microseconds as people read it: 850us, 12.34ms, 1.203s.
pub fn fmt_micros(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{:.3}s", us as f64 / 1e6)
    }
}

pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{s:.3}s")
    } else if s < 60.0 {
        format!("{s:.2}s")
    } else {
        format!("{}m{:05.2}s", (s / 60.0).floor() as u64, s % 60.0)
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_micros(850), "850us");
        assert_eq!(fmt_micros(12_345), "12.35ms");
        assert_eq!(fmt_micros(1_203_000), "1.203s");
        assert_eq!(fmt_bytes(10), "10 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(fmt_duration(Duration::from_millis(90_500)), "1m30.50s");
        assert_eq!(fmt_rate(1234.4), "1234");
        assert_eq!(fmt_rate(12.34), "12.3");
    }
}
