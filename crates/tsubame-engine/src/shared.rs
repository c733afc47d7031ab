//! State shared by the engine, its accept loops and every connection.

use crate::dispatch::fiber_queue::FiberQueue;
use crate::dispatch::fiber_route::FiberRoutes;
use crate::dispatch::queue::JobQueue;
use crate::dispatch::readiness::{Readiness, Verdict};
use crate::dispatch::timeouts::TimedOut;
use crate::message::body::SpoolGate;
use crate::message::head::Limits;
use crate::options::EngineOptions;
use crate::stats::Stats;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// The state every connection task and the engine share: options, the
/// queues, counters, and whether a stop has begun. Protocol code
/// (`http1/`, `h2/`) and the accept loops read it; it knows nothing of
/// them.
pub(crate) struct Shared {
    pub opts: EngineOptions,
    pub limits: Limits,
    pub queue: Arc<JobQueue>,
    /// Requests for the fiber loops; `routes` is `Some` in fiber mode only,
    /// so the thread-pool path pays one branch for it.
    pub fibers: Arc<FiberQueue>,
    pub routes: Option<FiberRoutes>,
    pub stats: Stats,
    /// Metrics, the access log, request ids (`observe/`).
    pub observe: crate::observe::Observer,
    pub(crate) stopping: AtomicBool,
    pub stop_notify: Notify,
    /// Signalled whenever a connection closes while stopping.
    pub(crate) conn_closed: Notify,
    /// Arms the queue watcher (see `watch_queue`).
    pub nudger: Notify,
    pub spool_gate: Arc<SpoolGate>,
    pub timed_out: TimedOut,
    pub(crate) readiness: Readiness,
    pub(crate) seq: AtomicU64,
    pub(crate) max_connections: u64,
    /// The public folder, when `public_dir` is set (see `files/`).
    pub(crate) public: Option<crate::files::Public>,
    /// Response compression, when `compress` is on.
    pub(crate) compression: Option<crate::compress::Compression>,
    /// Engine-held WebSockets and SSE (`rack.upgrade`): the connections,
    /// the events for Ruby, the limits.
    pub upgrades: crate::upgrade::Registry,
    pub upgrade_events: crate::upgrade::EventQueue,
    pub(crate) upgrade_settings: crate::upgrade::Settings,
    /// An HTTP worker's way to the WebSocket workers (`websocket_workers`).
    pub(crate) handoff: Option<crate::handoff::HandoffTarget>,
}

impl Shared {
    pub(crate) fn new(opts: EngineOptions, routes: Option<FiberRoutes>) -> Shared {
        let limits = Limits {
            max_uri_size: opts.max_uri_size,
            max_header_size: opts.max_header_size,
            max_headers: opts.max_headers,
            known_methods_only: opts.http_methods.parser_checks(),
        };
        let max_connections = opts.max_connections.map_or_else(default_max_connections, |m| m as u64);
        let readiness = Readiness::new(
            opts.readiness_queue_threshold.unwrap_or(0),
            opts.readiness_queue_wait,
            opts.readiness_hold,
        );
        let compression = opts.compress.then(|| crate::compress::Compression {
            min_size: opts.compress_min_size,
            types: opts.compress_types.clone(),
        });
        let upgrade_settings = crate::upgrade::Settings::from_options(&opts);
        Shared {
            readiness,
            spool_gate: SpoolGate::with_memory(opts.max_spooled_uploads, opts.upload_dir.clone(), opts.upload_memory),
            timed_out: TimedOut::default(),
            seq: AtomicU64::new(1),
            max_connections,
            queue: Arc::new(JobQueue::with_spin(opts.max_queue, opts.handoff_spin)),
            fibers: Arc::new(FiberQueue::new(opts.max_fibers)),
            routes,
            opts,
            limits,
            stats: Stats::default(),
            observe: crate::observe::Observer::default(),
            stopping: AtomicBool::new(false),
            stop_notify: Notify::new(),
            conn_closed: Notify::new(),
            nudger: Notify::new(),
            public: None,
            compression,
            upgrades: crate::upgrade::Registry::default(),
            upgrade_events: crate::upgrade::EventQueue::default(),
            upgrade_settings,
            handoff: None,
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Stopping, or in the lame-duck period before a stop: responses tell
    /// the client to close, so its next request opens a connection that a
    /// load balancer sends elsewhere.
    pub fn is_leaving(&self) -> bool {
        self.is_stopping() || self.readiness.is_lame_duck()
    }

    pub fn readiness_verdict(&self) -> Verdict {
        self.readiness.verdict(self.is_stopping(), &self.queue, &self.fibers)
    }

    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The engine-held session of upgraded connection `id` (a WebSocket or
    /// SSE stream over HTTP/1.1 or HTTP/2), or None if its handler is gone.
    pub(crate) fn upgrade_session(&self, id: u64) -> Option<crate::upgrade::Session<'_>> {
        Some(crate::upgrade::Session {
            id,
            out: self.upgrades.get(id)?,
            registry: &self.upgrades,
            events: &self.upgrade_events,
            settings: &self.upgrade_settings,
            stop: &self.stop_notify,
            stopping: &self.stopping,
        })
    }
}

#[cfg(test)]
impl Shared {
    /// What `Engine::stop` does to the connections, without an engine.
    pub(crate) fn begin_stop_for_test(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stop_notify.notify_waiters();
    }
}

/// Enough connections to use most of the descriptor limit, leaving room
/// for the app's own files and sockets.
fn default_max_connections() -> u64 {
    crate::sys::open_files_soft_limit()
        .unwrap_or(1024)
        .saturating_sub(128)
        .max(16)
}
