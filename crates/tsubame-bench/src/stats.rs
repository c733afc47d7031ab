//! Recording results. Each client thread has a `Recorder` (no locks: one
//! thread owns it). Latencies go into an HDR histogram for the whole run
//! and into one for the current time window; a finished window is sent to
//! the main thread, whose `Timeline` merges the threads' windows into the
//! latency-over-time series and feeds the progress line.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::Failure;

/// Latencies are recorded in microseconds, up to an hour.
pub const MAX_MICROS: u64 = 3_600_000_000;

/// A histogram with `sigfig` significant digits (3 for the run's totals,
/// 2 for time windows, which only feed charts and the progress line).
pub fn histogram(sigfig: u8) -> Histogram<u64> {
    // The bounds are constants hdrhistogram accepts (1 <= low, high >= 2 * low, sigfig <= 5).
    Histogram::new_with_bounds(1, MAX_MICROS, sigfig).expect("constant histogram bounds are valid")
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One thread's share of one time window.
#[derive(Debug)]
pub struct WindowReport {
    pub thread: usize,
    pub index: u64,
    /// The thread will send nothing more for windows below this.
    pub frontier: u64,
    pub latencies: Histogram<u64>,
    pub responses: u64,
    pub ok: u64,
    pub errors: u64,
}

/// What one thread measured over the whole run.
#[derive(Debug)]
pub struct Totals {
    pub latencies: Histogram<u64>,
    /// Responses by status code (index 0..1000).
    pub statuses: Vec<u64>,
    pub failures: [u64; Failure::COUNT],
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Requests started.
    pub sent: u64,
    pub last_done: Option<Instant>,
}

impl Totals {
    pub fn new() -> Self {
        Totals {
            latencies: histogram(3),
            statuses: vec![0; 1000],
            failures: [0; Failure::COUNT],
            bytes_read: 0,
            bytes_written: 0,
            sent: 0,
            last_done: None,
        }
    }

    pub fn merge(&mut self, other: &Totals) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latencies.add(&other.latencies);
        for (a, b) in self.statuses.iter_mut().zip(&other.statuses) {
            *a += b;
        }
        for (a, b) in self.failures.iter_mut().zip(&other.failures) {
            *a += b;
        }
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.sent += other.sent;
        self.last_done = self.last_done.max(other.last_done);
    }

    pub fn responses(&self) -> u64 {
        self.statuses.iter().sum()
    }

    pub fn errors(&self) -> u64 {
        self.failures.iter().sum()
    }

    /// Responses with a 2xx or 3xx status.
    pub fn ok(&self) -> u64 {
        self.statuses[200..400].iter().sum()
    }
}

impl Default for Totals {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Recorder {
    thread: usize,
    start: Instant,
    window: Duration,
    pub totals: Totals,
    win: Histogram<u64>,
    win_index: u64,
    win_responses: u64,
    win_ok: u64,
    win_errors: u64,
    tx: Sender<WindowReport>,
}

impl Recorder {
    pub fn new(thread: usize, start: Instant, window: Duration, tx: Sender<WindowReport>) -> Self {
        Recorder {
            thread,
            start,
            window,
            totals: Totals::new(),
            win: histogram(2),
            win_index: 0,
            win_responses: 0,
            win_ok: 0,
            win_errors: 0,
            tx,
        }
    }

    fn index_of(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.start);
        (since.as_nanos() / self.window.as_nanos().max(1)) as u64
    }

    pub fn sent(&mut self, bytes: usize) {
        self.totals.sent += 1;
        self.totals.bytes_written += bytes as u64;
    }

    pub fn response(&mut self, status: u16, latency: Duration, bytes: u64, now: Instant) {
        self.tick(now);
        let us = micros(latency).max(1);
        self.totals.latencies.saturating_record(us);
        self.win.saturating_record(us);
        let status = usize::from(status).min(999);
        self.totals.statuses[status] += 1;
        self.totals.bytes_read += bytes;
        self.totals.last_done = Some(now);
        self.win_responses += 1;
        if (200..400).contains(&status) {
            self.win_ok += 1;
        }
    }

    pub fn failure(&mut self, failure: Failure, now: Instant) {
        self.tick(now);
        self.totals.failures[failure.index()] += 1;
        self.totals.last_done = Some(now);
        self.win_errors += 1;
    }

    /// Sends the current window if `now` is past it.
    pub fn tick(&mut self, now: Instant) {
        let index = self.index_of(now);
        if index > self.win_index {
            self.flush(index);
        }
    }

    fn flush(&mut self, frontier: u64) {
        let latencies = std::mem::replace(&mut self.win, histogram(2));
        let report = WindowReport {
            thread: self.thread,
            index: self.win_index,
            frontier,
            latencies,
            responses: self.win_responses,
            ok: self.win_ok,
            errors: self.win_errors,
        };
        // The receiver only goes away when the run is being torn down.
        let _ = self.tx.send(report);
        self.win_index = frontier;
        self.win_responses = 0;
        self.win_ok = 0;
        self.win_errors = 0;
    }

    /// Sends the last window and returns the totals.
    pub fn finish(mut self) -> Totals {
        self.flush(u64::MAX);
        self.totals
    }
}

/// One time window of the whole run, all threads merged.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSummary {
    /// Seconds from the start of the run to the start of the window.
    pub start: f64,
    pub responses: u64,
    pub ok: u64,
    pub errors: u64,
    /// Latency percentiles of the window's responses, microseconds (0 when none).
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

struct Pending {
    latencies: Histogram<u64>,
    responses: u64,
    ok: u64,
    errors: u64,
}

/// Merges the threads' window reports into finished windows, in order.
pub struct Timeline {
    window: Duration,
    frontiers: Vec<u64>,
    pending: BTreeMap<u64, Pending>,
    next: u64,
    pub windows: Vec<WindowSummary>,
    /// Latencies of the windows finished since `take_recent`.
    recent: Histogram<u64>,
    /// Responses and errors reported so far (finished windows or not).
    pub responses: u64,
    pub errors: u64,
}

impl Timeline {
    pub fn new(threads: usize, window: Duration) -> Self {
        Timeline {
            window,
            frontiers: vec![0; threads],
            pending: BTreeMap::new(),
            next: 0,
            windows: Vec::new(),
            recent: histogram(2),
            responses: 0,
            errors: 0,
        }
    }

    pub fn add(&mut self, report: WindowReport) {
        self.responses += report.responses;
        self.errors += report.errors;
        if let Some(f) = self.frontiers.get_mut(report.thread) {
            *f = (*f).max(report.frontier);
        }
        let slot = self.pending.entry(report.index).or_insert_with(|| Pending {
            latencies: histogram(2),
            responses: 0,
            ok: 0,
            errors: 0,
        });
        let _ = slot.latencies.add(&report.latencies);
        slot.responses += report.responses;
        slot.ok += report.ok;
        slot.errors += report.errors;
        self.finish_ready();
    }

    /// Turns every window that no thread can still add to into a summary.
    fn finish_ready(&mut self) {
        let done_below = self.frontiers.iter().copied().min().unwrap_or(0);
        let last_seen = self.pending.keys().next_back().map_or(0, |&k| k + 1);
        let upto = done_below.min(last_seen.max(self.next));
        while self.next < upto {
            let index = self.next;
            let start = (self.window.as_secs_f64() * index as f64 * 1e6).round() / 1e6;
            let summary = match self.pending.remove(&index) {
                Some(p) => {
                    let _ = self.recent.add(&p.latencies);
                    let h = &p.latencies;
                    let empty = h.is_empty();
                    let q = |x: f64| if empty { 0 } else { h.value_at_quantile(x) };
                    WindowSummary {
                        start,
                        responses: p.responses,
                        ok: p.ok,
                        errors: p.errors,
                        p50: q(0.5),
                        p90: q(0.9),
                        p99: q(0.99),
                        max: if empty { 0 } else { h.max() },
                    }
                }
                None => WindowSummary {
                    start,
                    responses: 0,
                    ok: 0,
                    errors: 0,
                    p50: 0,
                    p90: 0,
                    p99: 0,
                    max: 0,
                },
            };
            self.windows.push(summary);
            self.next += 1;
        }
    }

    /// The p99 of the windows finished since the last call (None if no
    /// response finished), and starts over.
    pub fn take_recent_p99(&mut self) -> Option<u64> {
        let p99 = (!self.recent.is_empty()).then(|| self.recent.value_at_quantile(0.99));
        self.recent.reset();
        p99
    }
}

/// The latency numbers of the report, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub p50: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        Some(Latency {
            min: h.min(),
            mean: h.mean(),
            stdev: h.stdev(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        })
    }
}

/// The latency-by-percentile curve for the distribution chart: points
/// (percentile, microseconds), denser towards the tail.
pub fn distribution(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut points = Vec::new();
    // 0..90 % in steps of 5, then each further "nine" in 20 steps.
    for step in 0..18 {
        let q = f64::from(step) * 0.05;
        points.push((q * 100.0, h.value_at_quantile(q)));
    }
    for nines in 1..=5 {
        let lo = 1.0 - 10f64.powi(-nines);
        let hi = 1.0 - 10f64.powi(-(nines + 1));
        for step in 0..20 {
            let q = lo + (hi - lo) * f64::from(step) / 20.0;
            points.push((q * 100.0, h.value_at_quantile(q)));
        }
        if 10f64.powi(nines + 1) > h.len() as f64 {
            break;
        }
    }
    points.push((100.0, h.max()));
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn latency_summary_math() {
        let mut h = histogram(3);
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap(); // 1 ms .. 1000 ms
        }
        let l = Latency::of(&h).unwrap();
        let near = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64 <= 0.001;
        assert!(near(l.min, 1_000), "{l:?}");
        assert!(near(l.p50, 500_000), "{l:?}");
        assert!(near(l.p90, 900_000), "{l:?}");
        assert!(near(l.p95, 950_000), "{l:?}");
        assert!(near(l.p99, 990_000), "{l:?}");
        assert!(near(l.p999, 999_000), "{l:?}");
        assert!(near(l.max, 1_000_000), "{l:?}");
        assert!((l.mean - 500_500.0).abs() / 500_500.0 < 0.001, "{l:?}");
        assert!(Latency::of(&histogram(3)).is_none());
    }

    #[test]
    fn totals_merge_and_count() {
        let mut a = Totals::new();
        a.statuses[200] = 3;
        a.statuses[500] = 1;
        a.failures[Failure::Timeout.index()] = 2;
        a.latencies.record(10).unwrap();
        let mut b = Totals::new();
        b.statuses[302] = 1;
        b.statuses[404] = 5;
        b.latencies.record(20).unwrap();
        b.sent = 7;
        a.merge(&b);
        assert_eq!(a.responses(), 10);
        assert_eq!(a.ok(), 4);
        assert_eq!(a.errors(), 2);
        assert_eq!(a.sent, 7);
        assert_eq!(a.latencies.len(), 2);
    }

    #[test]
    fn windows_merge_across_threads_in_order() {
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let w = Duration::from_millis(100);
        let mut r0 = Recorder::new(0, start, w, tx.clone());
        let mut r1 = Recorder::new(1, start, w, tx);
        r0.response(200, Duration::from_millis(1), 10, start + Duration::from_millis(10));
        r1.response(500, Duration::from_millis(3), 10, start + Duration::from_millis(50));
        r0.response(200, Duration::from_millis(2), 10, start + Duration::from_millis(250));
        r1.failure(Failure::Reset, start + Duration::from_millis(120));
        let t0 = r0.finish();
        let t1 = r1.finish();
        assert_eq!(t0.responses() + t1.responses(), 3);

        let mut timeline = Timeline::new(2, w);
        for report in rx.try_iter() {
            timeline.add(report);
        }
        let ws = &timeline.windows;
        assert_eq!(ws.len(), 3, "{ws:?}");
        assert_eq!((ws[0].responses, ws[0].ok, ws[0].errors), (2, 1, 0));
        assert!((2990..=3010).contains(&ws[0].max), "{:?}", ws[0]);
        assert_eq!((ws[1].responses, ws[1].errors), (0, 1));
        assert_eq!(ws[1].start, 0.1);
        assert_eq!((ws[2].responses, ws[2].p50 / 100), (1, 20));
        assert_eq!((timeline.responses, timeline.errors), (3, 1));
        assert!(timeline.take_recent_p99().is_some());
        assert!(timeline.take_recent_p99().is_none());
    }

    #[test]
    fn windows_wait_for_slow_threads() {
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let w = Duration::from_millis(100);
        let mut r0 = Recorder::new(0, start, w, tx.clone());
        let r1 = Recorder::new(1, start, w, tx);
        r0.response(200, Duration::from_millis(1), 0, start + Duration::from_millis(10));
        r0.tick(start + Duration::from_millis(150));
        let mut timeline = Timeline::new(2, w);
        for report in rx.try_iter() {
            timeline.add(report);
        }
        assert!(timeline.windows.is_empty(), "thread 1 may still add to window 0");
        drop(r1.finish());
        for report in rx.try_iter() {
            timeline.add(report);
        }
        assert_eq!(timeline.windows.len(), 1);
    }

    #[test]
    fn distribution_is_monotonic_and_ends_at_max() {
        let mut h = histogram(3);
        for us in 1..=10_000u64 {
            h.record(us).unwrap();
        }
        let d = distribution(&h);
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(d.last().unwrap(), &(100.0, h.max()));
        assert!(d.iter().any(|&(p, _)| p > 99.9));
        assert!(distribution(&histogram(3)).is_empty());
    }
}
