use crate::error::ShedReason;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters kept by the engine; read without locks for the stats endpoint
/// and the health answer.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_total: AtomicU64,
    pub connections_active: AtomicU64,
    pub requests_total: AtomicU64,
    /// Requests the engine refused as malformed or over a limit (4xx/5xx).
    pub rejected_total: AtomicU64,
    /// 408s: a head or body that did not arrive in time.
    pub read_timeouts: AtomicU64,
    /// Clients that went away with a request half sent or a response half
    /// written.
    pub client_disconnects: AtomicU64,
    /// Request bodies that could not be written to disk (disk full, no
    /// descriptors); each was answered 500.
    pub spool_errors: AtomicU64,
    /// accept() failures (out of descriptors, out of memory); the client
    /// stays in the backlog until a later accept succeeds.
    pub accept_errors: AtomicU64,
    /// Times idle_memory_trim gave freed memory back to the OS.
    pub memory_trims: AtomicU64,
    /// File bodies sent with sendfile(2) (plain HTTP/1 sockets).
    pub files_sendfile: AtomicU64,
    /// File bodies read and written by the engine (TLS, HTTP/2).
    pub files_copied: AtomicU64,
    pub shed_queue_full: AtomicU64,
    pub shed_queue_timeout: AtomicU64,
    pub shed_request_timeout: AtomicU64,
    pub shed_connections: AtomicU64,
    pub shed_uploads: AtomicU64,
    pub shed_fibers: AtomicU64,
    /// Threads still running a request after its timeout and grace period,
    /// as reported by the Ruby side.
    pub stuck_threads: AtomicU64,
    /// Connections closed on a PROXY-protocol bind for a missing, malformed
    /// or late header (or one of the other version).
    pub proxy_refused: AtomicU64,
    /// Inline mode: turns the I/O thread drove because the app thread was
    /// busy (`inline.rs`).
    pub inline_takeovers: AtomicU64,
    /// `websocket_workers`: upgrade requests this HTTP worker handed to the
    /// WebSocket workers, and ones it served itself because the hand-off
    /// failed (`handoff.rs`) ...
    pub handoffs_sent: AtomicU64,
    pub handoffs_failed: AtomicU64,
    /// ... and connections a WebSocket worker took, or dropped as
    /// malformed.
    pub handoffs_received: AtomicU64,
    pub handoffs_refused: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub connections_total: u64,
    pub connections_active: u64,
    pub requests_total: u64,
    pub rejected_total: u64,
    pub read_timeouts: u64,
    pub client_disconnects: u64,
    pub spool_errors: u64,
    pub accept_errors: u64,
    pub memory_trims: u64,
    pub files_sendfile: u64,
    pub files_copied: u64,
    pub shed_queue_full: u64,
    pub shed_queue_timeout: u64,
    pub shed_request_timeout: u64,
    pub shed_connections: u64,
    pub shed_uploads: u64,
    pub shed_fibers: u64,
    pub stuck_threads: u64,
    pub proxy_refused: u64,
    pub inline_takeovers: u64,
    pub handoffs_sent: u64,
    pub handoffs_failed: u64,
    pub handoffs_received: u64,
    pub handoffs_refused: u64,
    pub backlog: u64,
}

impl Stats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn shed(&self, reason: ShedReason) {
        Stats::bump(match reason {
            ShedReason::QueueFull => &self.shed_queue_full,
            ShedReason::QueueTimeout => &self.shed_queue_timeout,
            ShedReason::RequestTimeout => &self.shed_request_timeout,
            ShedReason::Connections => &self.shed_connections,
            ShedReason::Uploads => &self.shed_uploads,
            ShedReason::FiberLimit => &self.shed_fibers,
        });
    }

    pub fn snapshot(&self, backlog: usize) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            connections_total: get(&self.connections_total),
            connections_active: get(&self.connections_active),
            requests_total: get(&self.requests_total),
            rejected_total: get(&self.rejected_total),
            read_timeouts: get(&self.read_timeouts),
            client_disconnects: get(&self.client_disconnects),
            spool_errors: get(&self.spool_errors),
            accept_errors: get(&self.accept_errors),
            memory_trims: get(&self.memory_trims),
            files_sendfile: get(&self.files_sendfile),
            files_copied: get(&self.files_copied),
            shed_queue_full: get(&self.shed_queue_full),
            shed_queue_timeout: get(&self.shed_queue_timeout),
            shed_request_timeout: get(&self.shed_request_timeout),
            shed_connections: get(&self.shed_connections),
            shed_uploads: get(&self.shed_uploads),
            shed_fibers: get(&self.shed_fibers),
            stuck_threads: get(&self.stuck_threads),
            proxy_refused: get(&self.proxy_refused),
            inline_takeovers: get(&self.inline_takeovers),
            handoffs_sent: get(&self.handoffs_sent),
            handoffs_failed: get(&self.handoffs_failed),
            handoffs_received: get(&self.handoffs_received),
            handoffs_refused: get(&self.handoffs_refused),
            backlog: backlog as u64,
        }
    }
}

impl StatsSnapshot {
    pub fn shed_total(&self) -> u64 {
        self.shed_queue_full
            + self.shed_queue_timeout
            + self.shed_request_timeout
            + self.shed_connections
            + self.shed_uploads
            + self.shed_fibers
    }
}
