use std::time::Duration;

/// Every setting the engine reads. The Ruby side (`Tsubame::Options#native`)
/// builds this whole from defaults, the config file and CLI flags, so the
/// defaults below only matter to Rust callers such as the tests.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub binds: Vec<String>,
    pub backlog: u32,
    pub io_threads: usize,
    /// The application thread pool's size, run by the Ruby side; kept here
    /// so the one options structure describes the whole server.
    pub threads_min: usize,
    pub threads_max: usize,
    /// Largest request body accepted; `None` means no limit.
    pub max_body_size: Option<u64>,
    /// Bodies larger than this go to an unlinked temp file instead of memory.
    pub spool_threshold: u64,
    /// Where spooled bodies go; `None` is the system's temp directory
    /// (`$TMPDIR`).
    pub upload_dir: Option<std::path::PathBuf>,
    pub max_uri_size: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
    /// How long a new connection may take to deliver a complete header block.
    pub first_data_timeout: Duration,
    /// How long an idle keep-alive connection is kept open.
    pub persistent_timeout: Duration,
    /// Longest pause allowed between two reads of a request body.
    pub body_timeout: Duration,
    /// How long a graceful stop waits for in-flight requests.
    pub drain_timeout: Duration,
    pub log_requests: bool,
    /// Count every request for `/metrics` (`observe/metrics.rs`).
    pub metrics: bool,
    /// The access log's format (`common`, `combined`, `json`); `None`
    /// leaves only `log_requests`.
    pub access_log: Option<String>,
    /// Where the access log goes; `None` is stdout.
    pub access_log_file: Option<std::path::PathBuf>,
    /// Keep or make an `X-Request-Id` for every request.
    pub request_id: bool,
    /// Add `X-Request-Start: t=MICROS` to requests that come without one.
    pub request_start_header: bool,
    /// The cluster worker's index, for the access log; set by the worker,
    /// not a setting.
    pub worker_index: Option<u32>,
    /// `websocket_workers` (`handoff.rs`), set by the cluster, not
    /// settings: an HTTP worker's inherited descriptor of the datagram
    /// socket that upgrade requests are handed to ...
    pub handoff_to_fd: Option<i32>,
    /// ... and a WebSocket worker's, that it takes them from.
    pub handoff_from_fd: Option<i32>,
    pub tcp_nodelay: bool,
    /// Answer 503 when the app has not started its response by then.
    pub request_timeout: Option<Duration>,
    /// How long after a timeout the thread may keep the request before it
    /// is reported stuck (the Ruby side enforces it).
    pub request_timeout_grace: Duration,
    /// Answer 503 when no thread took the request within this.
    pub queue_timeout: Option<Duration>,
    /// Answer 503 at once when this many requests already wait.
    pub max_queue: Option<usize>,
    /// Open connections beyond this get a 503 and are closed; `None`
    /// derives it from the descriptor limit.
    pub max_connections: Option<usize>,
    /// Bodies being written to disk at once; more get 503.
    pub max_spooled_uploads: usize,
    /// Bytes of bodies past `spool_threshold` (with a declared length) that
    /// may be held in memory at once instead of on disk; 0 spools them all.
    pub upload_memory: u64,
    /// Seconds sent in `Retry-After` with every 503.
    pub retry_after: u64,
    pub health_check_path: Option<String>,
    pub readiness_check_path: Option<String>,
    /// Readiness fails once more than this many requests have waited for
    /// a thread at least `readiness_queue_wait` (see `dispatch/readiness.rs`);
    /// `None` means 0.
    pub readiness_queue_threshold: Option<usize>,
    pub readiness_queue_wait: Duration,
    /// How long readiness keeps answering busy after saturation was seen.
    pub readiness_hold: Duration,
    /// How long a thread that ran out of work stays awake for the next
    /// hand-off before it sleeps: an app thread waiting for a request, an
    /// I/O thread waiting for the app's reply (when every connection waits
    /// on the app). Zero turns it off.
    pub handoff_spin: Duration,
    /// Whether the app thread also drives the I/O (`inline.rs`).
    pub inline: InlineMode,
    /// Fiber mode: requests `fiber_paths` selects (all of them when it is
    /// empty) go to the fiber queue, run by `fiber_threads` Ruby threads.
    pub fiber_scheduler: bool,
    pub fiber_paths: Vec<crate::dispatch::fiber_route::FiberPath>,
    pub fiber_threads: usize,
    /// Fiber requests queued and running together; beyond it 503.
    pub max_fibers: Option<usize>,
    /// Offer HTTP/2 by ALPN on TLS binds.
    pub http2: bool,
    /// How often the session-ticket key of TLS binds changes
    /// (`net/tls_tickets.rs`).
    pub tls_ticket_rotation: Duration,
    /// Cleartext HTTP/2 with prior knowledge on every plain TCP/UNIX bind
    /// (a bind can also ask for it with `h2c=true`).
    pub h2c: bool,
    /// Streams one HTTP/2 connection may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// Flow-control windows the server grants per stream and per connection.
    pub h2_initial_window_size: u32,
    pub h2_initial_connection_window_size: u32,
    /// Take `X-Forwarded-Proto` (from a trusted proxy) as `rack.url_scheme`.
    pub trust_forwarded_proto: bool,
    /// A PROXY header (`"v1"` or `"v2"`) first on every connection of the
    /// binds that do not name a version themselves (`proxy_protocol=`);
    /// Puma's `set_remote_address proxy_protocol: :v1`.
    pub proxy_protocol: Option<String>,
    /// What `REMOTE_ADDR` says (`dispatch/remote_addr.rs`).
    pub remote_address: crate::dispatch::remote_addr::RemoteAddress,
    /// The public folder: files answered by the engine before the app
    /// (`files/`); `None` turns it off.
    pub public_dir: Option<std::path::PathBuf>,
    /// Serve `index.html` for a directory path ending in `/`.
    pub public_index: bool,
    /// File names that get `Cache-Control: public, max-age=31536000,
    /// immutable` (a regex); `None` for none.
    pub public_immutable: Option<String>,
    /// Compress whole response bodies by Accept-Encoding (`compress/`).
    pub compress: bool,
    /// Bodies shorter than this are not compressed.
    pub compress_min_size: u64,
    /// Content types compressed; an entry ending in `/` is a prefix.
    pub compress_types: Vec<String>,
    /// Engine-held WebSockets and SSE (`upgrade/`): the largest frame and
    /// message a client may send, messages per second (0: no limit), bytes
    /// queued for a client that does not read, and the quiet time before a
    /// ping.
    pub websocket_max_frame: usize,
    pub websocket_max_message: usize,
    pub websocket_max_rate: u32,
    /// permessage-deflate (RFC 7692) when the client offers it.
    pub websocket_deflate: bool,
    pub upgrade_max_pending: usize,
    pub upgrade_ping_interval: Duration,
    /// Requests one HTTP/1 connection may make; the response to the last
    /// one closes it (Puma's `max_keep_alive`). None: no limit.
    pub max_keep_alive: Option<u64>,
    /// Methods that reach the app (Puma's `supported_http_methods`).
    pub http_methods: crate::message::methods::MethodPolicy,
    /// False: request headers with an underscore in their name are dropped
    /// before the app sees them (Puma's `allow_underscore_headers`).
    pub allow_underscore_headers: bool,
}

/// Fingerprinted names as asset pipelines write them (Rails' Propshaft and
/// Sprockets: `name-<hex digest>.ext`), with or without a compression
/// suffix.
pub const DEFAULT_IMMUTABLE: &str = r"-[0-9a-fA-F]{8,64}\.[A-Za-z0-9]+(\.(br|gz|zst))?$";

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            binds: vec!["tcp://0.0.0.0:9292".to_string()],
            backlog: 1024,
            io_threads: 1,
            threads_min: 0,
            threads_max: 5,
            max_body_size: None,
            spool_threshold: 256 * 1024,
            upload_dir: None,
            max_uri_size: 12 * 1024,
            max_header_size: 112 * 1024,
            max_headers: 100,
            first_data_timeout: Duration::from_secs(30),
            persistent_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            log_requests: false,
            metrics: true,
            access_log: None,
            access_log_file: None,
            request_id: false,
            request_start_header: false,
            worker_index: None,
            handoff_to_fd: None,
            handoff_from_fd: None,
            tcp_nodelay: true,
            request_timeout: None,
            request_timeout_grace: Duration::from_secs(10),
            queue_timeout: Some(Duration::from_secs(30)),
            max_queue: Some(1024),
            max_connections: None,
            max_spooled_uploads: 32,
            upload_memory: 64 * 1024 * 1024,
            retry_after: 1,
            health_check_path: None,
            readiness_check_path: None,
            readiness_queue_threshold: None,
            readiness_queue_wait: Duration::from_millis(250),
            readiness_hold: Duration::from_millis(500),
            handoff_spin: Duration::from_micros(50),
            inline: InlineMode::Auto,
            fiber_scheduler: false,
            fiber_paths: Vec::new(),
            fiber_threads: 1,
            max_fibers: Some(10_000),
            http2: true,
            // net::tls::DEFAULT_TICKET_ROTATION (options.rs imports nothing from net/).
            tls_ticket_rotation: Duration::from_secs(3600),
            h2c: false,
            h2_max_concurrent_streams: 100,
            h2_initial_window_size: 1024 * 1024,
            h2_initial_connection_window_size: 4 * 1024 * 1024,
            trust_forwarded_proto: false,
            proxy_protocol: None,
            remote_address: Default::default(),
            public_dir: None,
            public_index: false,
            public_immutable: Some(DEFAULT_IMMUTABLE.to_string()),
            compress: false,
            compress_min_size: 1024,
            compress_types: [
                "text/",
                "application/json",
                "application/javascript",
                "application/xml",
                "application/xhtml+xml",
                "application/rss+xml",
                "application/atom+xml",
                "application/manifest+json",
                "application/ld+json",
                "application/wasm",
                "image/svg+xml",
            ]
            .map(String::from)
            .to_vec(),
            websocket_max_frame: 1 << 20,
            websocket_max_message: 4 << 20,
            websocket_max_rate: 1000,
            websocket_deflate: true,
            upgrade_max_pending: 16 << 20,
            upgrade_ping_interval: Duration::from_secs(30),
            max_keep_alive: None,
            http_methods: Default::default(),
            allow_underscore_headers: true,
        }
    }
}

/// `inline`: whether the one app thread also drives the connections
/// (`inline.rs`), or hands every request across to the I/O thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineMode {
    /// On where it applies: one app thread, one I/O thread, no fibers.
    Auto,
    On,
    Off,
}

/// Why `inline true` cannot be had with the rest of the options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineConflict(pub &'static str);

impl std::fmt::Display for InlineConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "inline needs {}", self.0)
    }
}

impl EngineOptions {
    /// Whether the engine runs inline, or why `inline true` cannot.
    pub fn inline_active(&self) -> Result<bool, InlineConflict> {
        let conflict = if self.threads_max != 1 {
            Some("threads_max 1 (one app thread drives the I/O while it has no request)")
        } else if self.io_threads != 1 {
            Some("io_threads 1 (its one runtime has one driver at a time)")
        } else if self.fiber_scheduler {
            Some("fiber_scheduler off (fiber loops take requests from their own queue)")
        } else {
            None
        };
        match (self.inline, conflict) {
            (InlineMode::Off, _) => Ok(false),
            (InlineMode::Auto, conflict) => Ok(conflict.is_none()),
            (InlineMode::On, None) => Ok(true),
            (InlineMode::On, Some(why)) => Err(InlineConflict(why)),
        }
    }
}

#[cfg(test)]
mod inline_tests {
    use super::*;

    #[test]
    fn auto_is_on_for_one_app_thread_only() {
        let mut opts = EngineOptions {
            threads_min: 1,
            threads_max: 1,
            ..EngineOptions::default()
        };
        assert_eq!(opts.inline_active(), Ok(true));
        opts.threads_max = 5;
        assert_eq!(opts.inline_active(), Ok(false));
        opts.inline = InlineMode::On;
        assert!(opts
            .inline_active()
            .is_err_and(|e| e.to_string().contains("threads_max 1")));
        opts.inline = InlineMode::Off;
        opts.threads_max = 1;
        assert_eq!(opts.inline_active(), Ok(false));
        opts.inline = InlineMode::Auto;
        opts.fiber_scheduler = true;
        assert_eq!(opts.inline_active(), Ok(false));
    }
}
