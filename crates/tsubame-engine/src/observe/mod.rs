//! What the engine records about each request for operators, kept off the
//! GVL: Prometheus counters and histograms (`metrics.rs`, `buckets.rs`),
//! the access log (`access_log.rs`, `log_format.rs`), request ids
//! (`request_id.rs`) and `X-Request-Start` (`request_start.rs`).
//!
//! A protocol calls `Observer::prepare` with the head before queueing the
//! request and `Observer::finish` after the last byte of the reply; both
//! do nothing beyond a few branches for what is turned off.

pub mod access_log;
pub mod buckets;
pub mod log_format;
pub mod metrics;
pub mod request_id;
pub mod request_start;

use crate::dispatch::job::JobState;
use crate::dispatch::reply::Reply;
use crate::message::head::{RequestHead, Version};
use access_log::AccessLog;
use bytes::Bytes;
use log_format::LogLine;
use metrics::Metrics;
use request_id::IdGen;
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Default)]
pub struct Observer {
    pub metrics: Metrics,
    /// `metrics false` skips the per-request counting (not the counters
    /// the engine kept before, such as sheds).
    pub metrics_on: bool,
    pub access_log: Option<AccessLog>,
    pub request_ids: Option<IdGen>,
    pub add_request_start: bool,
}

/// What `prepare` took from the head for `finish`, which runs after the
/// head went to the app.
#[derive(Debug, Default)]
pub struct Tags {
    pub request_id: Option<Bytes>,
    pub user_agent: Option<Bytes>,
    pub referer: Option<Bytes>,
}

/// A request answered: what `finish` counts and logs.
pub struct Finished<'a> {
    pub peer: &'a str,
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub version: Version,
    pub status: u16,
    pub request_body_bytes: u64,
    pub response_body_bytes: u64,
    pub received_at: Instant,
    /// When the app's answer reached the connection (none for the public
    /// folder's files, which the app never sees).
    pub replied_at: Option<Instant>,
    pub state: Option<&'a JobState>,
    pub tags: &'a Tags,
}

impl Observer {
    pub fn prepare(&self, head: &mut RequestHead) -> Tags {
        let mut tags = Tags::default();
        // The clock is read only for a request that has the header or
        // gets one: most have neither.
        if self.metrics_on {
            if let Some(value) = head.header(request_start::NAME) {
                if let Some(wait) = request_start::upstream_wait(value, SystemTime::now()) {
                    self.metrics.upstream_wait.record(wait);
                }
            }
        }
        if self.add_request_start {
            request_start::stamp(head, SystemTime::now());
        }
        if let Some(ids) = &self.request_ids {
            tags.request_id = Some(ids.assign(head));
        }
        if self.access_log.as_ref().is_some_and(|log| log.format().wants_agent()) {
            tags.user_agent = head.header(b"user-agent").cloned();
            tags.referer = head.header(b"referer").cloned();
        }
        tags
    }

    /// The reply with the request id in its head, when ids are on.
    pub fn tag_reply(&self, reply: Reply, tags: &Tags) -> Reply {
        match &tags.request_id {
            Some(id) => request_id::tag_reply(reply, id),
            None => reply,
        }
    }

    /// Whether `finish` records anything: the protocols read the clock
    /// for it only then.
    pub fn is_on(&self) -> bool {
        self.metrics_on || self.access_log.is_some()
    }

    pub fn finish(&self, done: &Finished<'_>) {
        if !self.is_on() {
            return;
        }
        let total = done.received_at.elapsed();
        let taken = done.state.and_then(JobState::taken);
        let queue_wait = taken.map(|(_, wait)| wait);
        let app = match (taken, done.replied_at) {
            (Some((offset, _)), Some(replied)) => Some(
                replied
                    .saturating_duration_since(done.received_at)
                    .saturating_sub(offset),
            ),
            _ => None,
        };
        if self.metrics_on {
            let m = &self.metrics;
            m.count_request(done.status, done.method, done.version);
            m.total.record(total);
            if let Some(wait) = queue_wait {
                m.queue_wait.record(wait);
            }
            if let Some(app) = app {
                m.app.record(app);
            }
            add(&m.request_body_bytes, done.request_body_bytes);
            add(&m.response_body_bytes, done.response_body_bytes);
        }
        if let Some(log) = &self.access_log {
            log.write(&LogLine {
                peer: done.peer,
                method: done.method,
                target: done.target,
                version: done.version,
                status: done.status,
                body_bytes: done.response_body_bytes,
                duration: total,
                queue_wait,
                app,
                request_id: done.tags.request_id.as_deref(),
                user_agent: done.tags.user_agent.as_deref(),
                referer: done.tags.referer.as_deref(),
            });
        }
    }

    /// Lines still queued for the access log get up to `limit` to be
    /// written (at a stop).
    pub fn flush(&self, limit: Duration) {
        if let Some(log) = &self.access_log {
            log.flush(limit);
        }
    }
}

fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::head::Framing;

    fn head() -> RequestHead {
        let header = |n: &'static [u8], v: &'static [u8]| (Bytes::from_static(n), Bytes::from_static(v));
        RequestHead {
            method: Bytes::from_static(b"GET"),
            target: Bytes::from_static(b"/"),
            path: Bytes::from_static(b"/"),
            query: Bytes::new(),
            version: Version::Http11,
            headers: vec![
                header(b"host", b"127.0.0.1:9292"),
                header(b"user-agent", b"wrk"),
                header(b"accept", b"*/*"),
            ],
            host: Some(Bytes::from_static(b"127.0.0.1:9292")),
            framing: Framing::None,
            keep_alive: true,
            expect_continue: false,
            protocol: None,
        }
    }

    #[test]
    fn finish_counts_and_times_a_request() {
        let observer = Observer {
            metrics_on: true,
            ..Observer::default()
        };
        let mut h = head();
        let tags = observer.prepare(&mut h);
        let state = JobState::new(None);
        let received_at = Instant::now() - Duration::from_millis(30);
        state.mark_taken(Duration::from_millis(10), Duration::from_millis(10));
        observer.finish(&Finished {
            peer: "127.0.0.1",
            method: b"GET",
            target: b"/",
            version: Version::Http11,
            status: 200,
            request_body_bytes: 0,
            response_body_bytes: 7,
            received_at,
            replied_at: Some(received_at + Duration::from_millis(25)),
            state: Some(&state),
            tags: &tags,
        });
        let s = observer.metrics.snapshot();
        assert_eq!(s.requests.len(), 1);
        assert_eq!(s.total.count(), 1);
        assert_eq!(s.queue_wait.sum_micros, 10_000);
        // 25 ms after receipt, taken at 10 ms: 15 ms in the app.
        assert_eq!(s.app.sum_micros, 15_000);
        assert!(s.total.sum_micros >= 30_000);
        assert_eq!(s.response_body_bytes, 7);
    }

    /// What the metrics add to one request on the I/O thread (`prepare`
    /// and `finish`, metrics on, access log off), in nanoseconds:
    /// `cargo test -p tsubame-engine --release -- --ignored --nocapture observe_cost`.
    #[test]
    #[ignore]
    fn observe_cost() {
        let on = Observer {
            metrics_on: true,
            ..Observer::default()
        };
        let off = Observer::default();
        let state = JobState::new(None);
        state.mark_taken(Duration::from_micros(20), Duration::from_micros(5));
        let per_call = |observer: &Observer| {
            let rounds = 2_000_000u32;
            let started = Instant::now();
            for _ in 0..rounds {
                let mut h = head();
                let tags = observer.prepare(&mut h);
                let received_at = Instant::now();
                observer.finish(&Finished {
                    peer: "127.0.0.1",
                    method: &h.method,
                    target: &h.target,
                    version: h.version,
                    status: 200,
                    request_body_bytes: 0,
                    response_body_bytes: 7,
                    received_at,
                    replied_at: Some(Instant::now()),
                    state: Some(&state),
                    tags: &tags,
                });
                std::hint::black_box(&h);
            }
            started.elapsed().as_nanos() as f64 / f64::from(rounds)
        };
        let mut pairs = Vec::new();
        for _ in 0..5 {
            pairs.push((per_call(&on), per_call(&off)));
        }
        let mut extra: Vec<f64> = pairs.iter().map(|(a, b)| a - b).collect();
        extra.sort_by(|a, b| a.total_cmp(b));
        println!(
            "observe_cost: rounds (on ns, off ns) {pairs:?}; median extra per request {:.1} ns",
            extra[2]
        );
    }
}
