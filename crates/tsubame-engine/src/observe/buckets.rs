//! A histogram with fixed Prometheus buckets: recording is a short scan of
//! the bounds and two relaxed atomic adds (the bucket, the sum), from any
//! thread, no lock. The count is the buckets' total, so a scrape always
//! sees a count that agrees with its buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds in microseconds: 0.5 ms to 60 s, roughly 1-2.5-5 per
/// decade, which covers a hello world's queue wait and a slow report's app
/// time alike. The last slot is +Inf.
pub const BOUNDS_MICROS: [u64; 16] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000, 30_000_000, 60_000_000,
];

#[derive(Debug, Default)]
pub struct Buckets {
    counts: [AtomicU64; BOUNDS_MICROS.len() + 1],
    sum_micros: AtomicU64,
}

/// What a scrape reads: cumulative counts per bound (the last is +Inf),
/// and the sum in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketsSnapshot {
    pub cumulative: Vec<u64>,
    pub sum_micros: u64,
}

impl BucketsSnapshot {
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

impl Buckets {
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let slot = BOUNDS_MICROS
            .iter()
            .position(|&bound| micros <= bound)
            .unwrap_or(BOUNDS_MICROS.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> BucketsSnapshot {
        let mut running = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                running += c.load(Ordering::Relaxed);
                running
            })
            .collect();
        BucketsSnapshot {
            cumulative,
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_that_holds_them() {
        let b = Buckets::default();
        b.record(Duration::from_micros(500)); // on the bound: le=0.0005
        b.record(Duration::from_micros(501));
        b.record(Duration::from_millis(3));
        b.record(Duration::from_secs(120)); // +Inf only
        let s = b.snapshot();
        assert_eq!(s.cumulative[0], 1);
        assert_eq!(s.cumulative[1], 2);
        assert_eq!(s.cumulative[2], 2);
        assert_eq!(s.cumulative[3], 3);
        assert_eq!(s.cumulative[BOUNDS_MICROS.len() - 1], 3);
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum_micros, 500 + 501 + 3_000 + 120_000_000);
    }
}
