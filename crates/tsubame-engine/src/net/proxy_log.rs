//! The log line for connections refused on a PROXY-protocol bind (see
//! `proxy_protocol.rs`). Anyone who can reach such a port can make every
//! connection a refusal, so the lines are limited: at most one a second per
//! listener, saying how many were not logged since the last one. The
//! `proxy_refused` counter in the stats counts every one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one line per this long (per listener).
const EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct ProxyRefusals {
    started: Instant,
    /// Milliseconds after `started` of the last line, plus one (0: none yet).
    last_line: AtomicU64,
    unlogged: AtomicU64,
}

impl Default for ProxyRefusals {
    fn default() -> Self {
        ProxyRefusals {
            started: Instant::now(),
            last_line: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
        }
    }
}

impl ProxyRefusals {
    /// Records a refusal; returns the line to log, if one is due. Called
    /// from connection tasks on any I/O thread: one of several racing for
    /// the same second wins it.
    pub(crate) fn refused(&self, peer: &str, why: &dyn std::fmt::Display, now: Instant) -> Option<String> {
        let now_ms = now.saturating_duration_since(self.started).as_millis() as u64 + 1;
        let last = self.last_line.load(Ordering::Relaxed);
        let due = last == 0 || now_ms.saturating_sub(last) >= EVERY.as_millis() as u64;
        if !due
            || self
                .last_line
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(match self.unlogged.swap(0, Ordering::Relaxed) {
            0 => format!("{peer} closed: {why}"),
            n => format!("{peer} closed: {why} ({n} more refused since the last line)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_counting_the_rest() {
        let log = ProxyRefusals::default();
        let t0 = Instant::now();
        let first = log.refused("10.0.0.9", &"no PROXY header", t0).unwrap();
        assert_eq!(first, "10.0.0.9 closed: no PROXY header");
        for i in 1..=5 {
            assert!(log
                .refused("10.0.0.9", &"x", t0 + Duration::from_millis(100 * i))
                .is_none());
        }
        let next = log
            .refused("10.0.0.8", &"why", t0 + Duration::from_millis(1200))
            .unwrap();
        assert_eq!(next, "10.0.0.8 closed: why (5 more refused since the last line)");
        assert!(log.refused("x", &"y", t0 + Duration::from_millis(1300)).is_none());
    }
}
