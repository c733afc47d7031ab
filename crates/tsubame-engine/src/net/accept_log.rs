//! The log lines for failed accepts. Out of descriptors, accept fails every
//! time the loop retries (every 50 ms), so one line per failure would bury
//! everything else in the log. The first failure is logged at once, then at
//! most one line a second says how many were not logged; once accepts work
//! again a line says after how many failures. `accept_errors` in the stats
//! still counts every one.

use std::time::{Duration, Instant};

/// At most one line per this long (per listener).
const EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(crate) struct AcceptFailures {
    /// Failures since the last "accepting again" line.
    streak: u64,
    /// Failures since the last line, not in any line yet.
    unlogged: u64,
    last_line: Option<Instant>,
}

impl AcceptFailures {
    fn may_log(&self, now: Instant) -> bool {
        self.last_line.is_none_or(|at| now.duration_since(at) >= EVERY)
    }

    /// Records a failure; returns the line to log, if one is due.
    pub(crate) fn failed(&mut self, err: &std::io::Error, now: Instant) -> Option<String> {
        self.streak += 1;
        if !self.may_log(now) {
            self.unlogged += 1;
            return None;
        }
        let line = match std::mem::take(&mut self.unlogged) {
            0 => format!("accept failed: {err}"),
            n => format!("accept failed: {err} ({n} more since the last line)"),
        };
        self.last_line = Some(now);
        Some(line)
    }

    /// Records a successful accept; returns the line to log, if one is due.
    /// Costs one comparison while nothing failed. Inside the rate limit
    /// the line waits for a later accept, so it still comes out, once.
    #[inline]
    pub(crate) fn succeeded(&mut self) -> Option<String> {
        if self.streak == 0 {
            return None;
        }
        self.recovered(Instant::now())
    }

    fn recovered(&mut self, now: Instant) -> Option<String> {
        if !self.may_log(now) {
            return None;
        }
        let line = format!(
            "accepting connections again after {} failed accepts ({} not logged)",
            std::mem::take(&mut self.streak),
            std::mem::take(&mut self.unlogged)
        );
        self.last_line = Some(now);
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> std::io::Error {
        std::io::Error::from_raw_os_error(24)
    }

    #[test]
    fn first_failure_at_once_then_one_line_a_second_with_the_count() {
        let mut log = AcceptFailures::default();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let first = log.failed(&emfile(), t0).unwrap_or_default();
        assert!(first.starts_with("accept failed: Too many open files"), "{first}");
        assert!(!first.contains("more"), "{first}");
        // Retries every 50 ms for the rest of the second: silent.
        for i in 1..20 {
            assert_eq!(log.failed(&emfile(), ms(50 * i)), None);
        }
        let second = log.failed(&emfile(), ms(1000)).unwrap_or_default();
        assert!(second.ends_with("(19 more since the last line)"), "{second}");
        assert_eq!(log.failed(&emfile(), ms(1050)), None);
        // Recovery inside the second waits for a later accept...
        assert_eq!(log.recovered(ms(1100)), None);
        // ...which reports the whole streak, then nothing more is due.
        assert_eq!(
            log.recovered(ms(2000)).as_deref(),
            Some("accepting connections again after 22 failed accepts (1 not logged)")
        );
        assert_eq!(log.succeeded(), None);
        // A new streak a second later is logged at once again.
        let again = log.failed(&emfile(), ms(3000)).unwrap_or_default();
        assert!(!again.contains("more"), "{again}");
    }

    #[test]
    fn alternating_failures_and_accepts_stay_within_one_line_a_second() {
        let mut log = AcceptFailures::default();
        let t0 = Instant::now();
        let mut lines = 0;
        let mut reported = 0u64;
        // Descriptors hovering at the limit: fail, accept, fail, ... every 25 ms for 3 s.
        for i in 0..120u64 {
            let now = t0 + Duration::from_millis(25 * i);
            let line = if i % 2 == 0 {
                log.failed(&emfile(), now)
            } else {
                log.recovered(now)
            };
            if let Some(line) = line {
                lines += 1;
                if let Some(n) = line.strip_prefix("accepting connections again after ") {
                    reported += n.split(' ').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
                }
            }
        }
        assert!(lines <= 4, "{lines} lines in 3 s");
        // Every failure is in some recovery line or still pending.
        assert_eq!(reported + log.streak, 60);
    }
}
