//! A lock-free latency histogram for queue wait times: log-linear buckets
//! (16 per power of two, so within ~6%), recorded from any thread with one
//! atomic add.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const SUB: u32 = 16;
const POWERS: u32 = 40; // up to 2^40 µs, about 12 days
const BUCKETS: usize = (SUB * POWERS) as usize;

pub struct Histogram {
    counts: Box<[AtomicU64]>,
    total: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
        }
    }
}

fn bucket_of(micros: u64) -> usize {
    if micros < u64::from(SUB) {
        return micros as usize;
    }
    let power = 63 - micros.leading_zeros(); // >= 4
    let shift = power - SUB.trailing_zeros();
    let sub = (micros >> shift) as u32 - SUB; // 0..SUB
    (((power - SUB.trailing_zeros() + 1) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The upper edge of a bucket, in microseconds.
fn bucket_top(index: usize) -> u64 {
    let index = index as u32;
    if index < SUB {
        return u64::from(index);
    }
    let group = index / SUB - 1;
    let sub = index % SUB;
    ((u64::from(SUB + sub) + 1) << group).saturating_sub(1)
}

impl Histogram {
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The value at quantile `q` (0.0..=1.0), or zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count.load(Ordering::Relaxed);
            if seen >= rank {
                return Duration::from_micros(bucket_top(index));
            }
        }
        Duration::from_micros(bucket_top(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for micros in [0u64, 1, 15, 16, 17, 31, 32, 100, 1000, 12_345, 1_000_000, 60_000_000] {
            let b = bucket_of(micros);
            assert!(b >= last, "{micros}");
            last = b;
            let top = bucket_top(b);
            assert!(top >= micros, "{micros} > top {top}");
            assert!(top as f64 <= micros as f64 * 1.07 + 1.0, "{micros} top {top}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), Duration::ZERO);
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).as_secs_f64() * 1000.0;
        let p99 = h.quantile(0.99).as_secs_f64() * 1000.0;
        assert!((49.0..=54.0).contains(&p50), "{p50}");
        assert!((98.0..=106.0).contains(&p99), "{p99}");
    }
}
