//! Liveness and readiness answers, written by the engine without queueing
//! behind the application, so a load balancer's probe is answered in
//! microseconds even while every thread is busy.

use crate::dispatch::readiness::Verdict;
use crate::message::head::RequestHead;
use crate::message::response::ResponseHead;
use crate::shared::Shared;
use std::fmt::Write;

enum Probe {
    Liveness,
    Readiness,
}

fn probe_for(head: &RequestHead, shared: &Shared) -> Option<Probe> {
    if !matches!(&head.method[..], b"GET" | b"HEAD") {
        return None;
    }
    let path = &head.path[..];
    let is = |configured: &Option<String>| configured.as_deref().is_some_and(|p| p.as_bytes() == path);
    if is(&shared.opts.health_check_path) {
        Some(Probe::Liveness)
    } else if is(&shared.opts.readiness_check_path) {
        Some(Probe::Readiness)
    } else {
        None
    }
}

/// The whole response (head and body) when `head` asks for a probe path.
pub(crate) fn answer(head: &RequestHead, shared: &Shared) -> Option<Vec<u8>> {
    let probe = probe_for(head, shared)?;
    let (status, state) = match probe {
        Probe::Liveness => (200, "ok"),
        Probe::Readiness => match shared.readiness_verdict() {
            Verdict::Ready => (200, "ready"),
            other => (503, other.as_str()),
        },
    };
    shared
        .observe
        .metrics
        .count_probe(matches!(probe, Probe::Readiness), status == 200);
    let body = status_json(shared, state);
    let mut response = ResponseHead::new(status).ok()?;
    response.header(b"content-type", b"application/json").ok()?;
    response.header(b"cache-control", b"no-store").ok()?;
    if status == 503 {
        let retry = shared.opts.retry_after.to_string();
        response.header(b"retry-after", retry.as_bytes()).ok()?;
    }
    let mut finished = response.finish_full(body.len() as u64, head.is_head(), head.keep_alive, head.version);
    if finished.send_body {
        finished.bytes.extend_from_slice(body.as_bytes());
    }
    Some(finished.bytes)
}

/// The JSON both probes return: enough to see why an instance is busy.
pub(crate) fn status_json(shared: &Shared, state: &str) -> String {
    let stats = shared.stats.snapshot(shared.queue.len());
    let max_threads = shared.opts.threads_max;
    let idle = shared.queue.waiting().min(max_threads);
    let waits = shared.queue.wait_times();
    let ms = |q: f64| waits.quantile(q).as_secs_f64() * 1000.0;
    let mut out = String::with_capacity(512);
    let _ = write!(
        out,
        concat!(
            "{{\"status\":\"{}\",\"busy_threads\":{},\"max_threads\":{},\"queue_depth\":{},",
            "\"connections\":{},\"workers\":0,\"draining\":{},\"requests_total\":{},",
            "\"timed_out\":{},\"stuck_threads\":{},\"read_timeouts\":{},\"proxy_refused\":{},\"shed\":{{\"queue_full\":{},\"queue_timeout\":{},",
            "\"request_timeout\":{},\"connection_limit\":{},\"upload_limit\":{},\"fiber_limit\":{}}},",
            "\"fibers\":{{\"queued\":{},\"running\":{}}},\"inline\":{},\"inline_takeovers\":{},",
            "\"queue_wait_ms\":{{\"p50\":{:.3},\"p99\":{:.3}}}}}\n"
        ),
        state,
        max_threads - idle,
        max_threads,
        stats.backlog,
        stats.connections_active,
        shared.is_leaving(),
        stats.requests_total,
        stats.shed_request_timeout,
        stats.stuck_threads,
        stats.read_timeouts,
        stats.proxy_refused,
        stats.shed_queue_full,
        stats.shed_queue_timeout,
        stats.shed_request_timeout,
        stats.shed_connections,
        stats.shed_uploads,
        stats.shed_fibers,
        shared.fibers.len(),
        shared.fibers.running(),
        shared.opts.inline_active().unwrap_or(false),
        stats.inline_takeovers,
        ms(0.5),
        ms(0.99),
    );
    out
}
