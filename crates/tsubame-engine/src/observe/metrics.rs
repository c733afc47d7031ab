//! The per-request counters behind `/metrics`: requests by status class,
//! method and protocol, the three duration histograms, bytes, probe
//! answers. Every one is a relaxed atomic add on the connection's I/O
//! thread; nothing here locks or allocates, and Ruby only reads them at a
//! scrape.

use crate::message::head::Version;
use crate::observe::buckets::{Buckets, BucketsSnapshot};
use std::sync::atomic::{AtomicU64, Ordering};

/// Methods with a label of their own; the rest count as `OTHER`.
pub const METHODS: [&str; 8] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "OTHER"];
pub const PROTOCOLS: [&str; 3] = ["1.0", "1.1", "2"];
/// 1xx to 5xx; anything else an app may send (it cannot, the binding
/// checks 100..=599) would count as 5xx.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Liveness ok, liveness failed (never happens: a live engine answers
/// 200), readiness ready, readiness not ready.
pub const PROBES: [(&str, &str); 4] = [
    ("liveness", "ok"),
    ("liveness", "fail"),
    ("readiness", "ready"),
    ("readiness", "not_ready"),
];

const CELLS: usize = CLASSES.len() * METHODS.len() * PROTOCOLS.len();

#[derive(Debug)]
pub struct Metrics {
    requests: [AtomicU64; CELLS],
    /// From the push onto the queue to a thread taking it.
    pub queue_wait: Buckets,
    /// From a thread taking the request to its response head coming back.
    pub app: Buckets,
    /// From the head read to the last byte written.
    pub total: Buckets,
    /// From the `X-Request-Start` a proxy stamped to the engine reading
    /// the head: time in front of this server.
    pub upstream_wait: Buckets,
    pub request_body_bytes: AtomicU64,
    pub response_body_bytes: AtomicU64,
    probes: [AtomicU64; PROBES.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            queue_wait: Buckets::default(),
            app: Buckets::default(),
            total: Buckets::default(),
            upstream_wait: Buckets::default(),
            request_body_bytes: AtomicU64::new(0),
            response_body_bytes: AtomicU64::new(0),
            probes: Default::default(),
        }
    }
}

/// One non-zero cell of the request counters, for the exposition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCount {
    pub class: &'static str,
    pub method: &'static str,
    pub protocol: &'static str,
    pub count: u64,
}

#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    pub requests: Vec<RequestCount>,
    pub queue_wait: BucketsSnapshot,
    pub app: BucketsSnapshot,
    pub total: BucketsSnapshot,
    pub upstream_wait: BucketsSnapshot,
    pub request_body_bytes: u64,
    pub response_body_bytes: u64,
    pub probes: Vec<(&'static str, &'static str, u64)>,
}

pub fn method_index(method: &[u8]) -> usize {
    match method {
        b"GET" => 0,
        b"HEAD" => 1,
        b"POST" => 2,
        b"PUT" => 3,
        b"PATCH" => 4,
        b"DELETE" => 5,
        b"OPTIONS" => 6,
        _ => 7,
    }
}

fn protocol_index(version: Version) -> usize {
    match version {
        Version::Http10 => 0,
        Version::Http11 => 1,
        Version::Http2 => 2,
    }
}

fn class_index(status: u16) -> usize {
    usize::from(status / 100).clamp(1, 5) - 1
}

impl Metrics {
    pub fn count_request(&self, status: u16, method: &[u8], version: Version) {
        let cell =
            (class_index(status) * METHODS.len() + method_index(method)) * PROTOCOLS.len() + protocol_index(version);
        self.requests[cell].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_probe(&self, readiness: bool, passed: bool) {
        let index = usize::from(readiness) * 2 + usize::from(!passed);
        self.probes[index].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut requests = Vec::new();
        for (class_i, class) in CLASSES.iter().enumerate() {
            for (method_i, method) in METHODS.iter().enumerate() {
                for (protocol_i, protocol) in PROTOCOLS.iter().enumerate() {
                    let cell = (class_i * METHODS.len() + method_i) * PROTOCOLS.len() + protocol_i;
                    let count = self.requests[cell].load(Ordering::Relaxed);
                    if count > 0 {
                        requests.push(RequestCount {
                            class,
                            method,
                            protocol,
                            count,
                        });
                    }
                }
            }
        }
        MetricsSnapshot {
            requests,
            queue_wait: self.queue_wait.snapshot(),
            app: self.app.snapshot(),
            total: self.total.snapshot(),
            upstream_wait: self.upstream_wait.snapshot(),
            request_body_bytes: self.request_body_bytes.load(Ordering::Relaxed),
            response_body_bytes: self.response_body_bytes.load(Ordering::Relaxed),
            probes: PROBES
                .iter()
                .zip(&self.probes)
                .map(|(&(probe, result), c)| (probe, result, c.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_lands_in_its_own_cell() {
        let m = Metrics::default();
        m.count_request(200, b"GET", Version::Http11);
        m.count_request(204, b"GET", Version::Http11);
        m.count_request(404, b"PROPFIND", Version::Http2);
        m.count_request(503, b"POST", Version::Http10);
        let s = m.snapshot();
        let find = |class, method, protocol| {
            s.requests
                .iter()
                .find(|r| r.class == class && r.method == method && r.protocol == protocol)
                .map(|r| r.count)
        };
        assert_eq!(find("2xx", "GET", "1.1"), Some(2));
        assert_eq!(find("4xx", "OTHER", "2"), Some(1));
        assert_eq!(find("5xx", "POST", "1.0"), Some(1));
        assert_eq!(s.requests.len(), 3);
    }

    #[test]
    fn probes_by_kind_and_answer() {
        let m = Metrics::default();
        m.count_probe(false, true);
        m.count_probe(true, false);
        m.count_probe(true, false);
        let s = m.snapshot();
        assert_eq!(s.probes[0], ("liveness", "ok", 1));
        assert_eq!(s.probes[3], ("readiness", "not_ready", 2));
    }
}
