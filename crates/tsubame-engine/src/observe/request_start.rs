//! `X-Request-Start`: when a proxy stamped the request (Heroku's router,
//! nginx's `t=${msec}`, APM agents' conventions). The engine reads it to
//! measure time spent in front of this server, and with
//! `request_start_header` adds one when it is missing, so an APM agent or
//! an autoscaler in the app measures the queue from when the engine read
//! the head.

use crate::message::head::RequestHead;
use bytes::Bytes;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const NAME: &[u8] = b"x-request-start";

/// Microseconds since the epoch from `t=VALUE` or a bare `VALUE`, in
/// seconds (with a fraction), milliseconds, microseconds or nanoseconds:
/// the unit is told by the size, as every reader of this header does
/// (a date after 1973 in seconds never looks like one in milliseconds).
pub fn parse(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let number = text.strip_prefix("t=").unwrap_or(text);
    let v: f64 = number.parse().ok()?;
    if !v.is_finite() || v <= 0.0 {
        return None;
    }
    let micros = if v >= 1e17 {
        v / 1000.0
    } else if v >= 1e14 {
        v
    } else if v >= 1e11 {
        v * 1000.0
    } else {
        v * 1_000_000.0
    };
    Some(micros as u64)
}

fn now_micros(now: SystemTime) -> u64 {
    u64::try_from(now.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()).unwrap_or(u64::MAX)
}

/// How long ago the proxy stamped the request (`value` is its
/// `X-Request-Start`); `None` for one that cannot be read or from a clock
/// ahead of ours.
pub fn upstream_wait(value: &[u8], now: SystemTime) -> Option<Duration> {
    let started = parse(value)?;
    now_micros(now).checked_sub(started).map(Duration::from_micros)
}

/// Adds `x-request-start: t=MICROS` when the request has none.
pub fn stamp(head: &mut RequestHead, now: SystemTime) {
    if head.header(NAME).is_none() {
        let value = format!("t={}", now_micros(now));
        head.headers.push((Bytes::from_static(NAME), Bytes::from(value)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_read() {
        let micros = 1_700_000_000_123_456u64;
        assert_eq!(parse(b"t=1700000000.123456").map(|v| v / 1000), Some(micros / 1000));
        assert_eq!(parse(b"t=1700000000123"), Some(1_700_000_000_123_000));
        assert_eq!(parse(b"t=1700000000123456"), Some(micros));
        assert_eq!(parse(b"1700000000123456789"), Some(micros));
        assert_eq!(parse(b"t=abc"), None);
        assert_eq!(parse(b"t=-5"), None);
    }
}
