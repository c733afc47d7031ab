//! `Native::Server#metrics`: the engine's per-request counters as a Hash
//! for `Tsubame::Metrics` to render (at a scrape, never per request).

use crate::server::Server;
use magnus::{Error, RHash, Ruby};
use tsubame_engine::observe::buckets::{BucketsSnapshot, BOUNDS_MICROS};

fn histogram(ruby: &Ruby, snapshot: &BucketsSnapshot) -> Result<RHash, Error> {
    let hash = ruby.hash_new();
    hash.aset("buckets", ruby.ary_from_vec(snapshot.cumulative.clone()))?;
    hash.aset("sum", snapshot.sum_micros as f64 / 1_000_000.0)?;
    hash.aset("count", snapshot.count())?;
    Ok(hash)
}

pub fn metrics(ruby: &Ruby, rb_self: &Server) -> Result<RHash, Error> {
    let observer = rb_self.engine.observer();
    let m = observer.metrics.snapshot();
    let hash = ruby.hash_new();
    hash.aset("enabled", observer.metrics_on)?;
    let bounds: Vec<f64> = BOUNDS_MICROS.iter().map(|&b| b as f64 / 1_000_000.0).collect();
    hash.aset("bounds", ruby.ary_from_vec(bounds))?;
    let requests = ruby.ary_new();
    for r in &m.requests {
        requests.push((r.class, r.method, r.protocol, r.count))?;
    }
    hash.aset("requests", requests)?;
    hash.aset("queue_wait", histogram(ruby, &m.queue_wait)?)?;
    hash.aset("app", histogram(ruby, &m.app)?)?;
    hash.aset("total", histogram(ruby, &m.total)?)?;
    hash.aset("upstream_wait", histogram(ruby, &m.upstream_wait)?)?;
    hash.aset("request_body_bytes", m.request_body_bytes)?;
    hash.aset("response_body_bytes", m.response_body_bytes)?;
    let probes = ruby.ary_new();
    for (probe, result, count) in &m.probes {
        probes.push((*probe, *result, *count))?;
    }
    hash.aset("probes", probes)?;
    let (written, dropped) = observer
        .access_log
        .as_ref()
        .map_or((0, 0), |log| (log.written(), log.dropped()));
    hash.aset("access_log_lines", written)?;
    hash.aset("access_log_dropped", dropped)?;
    Ok(hash)
}

/// HUP: the access log file is opened again by name before its next line.
pub fn reopen_access_log(rb_self: &Server) -> bool {
    match &rb_self.engine.observer().access_log {
        Some(log) => {
            log.reopen();
            true
        }
        None => false,
    }
}
