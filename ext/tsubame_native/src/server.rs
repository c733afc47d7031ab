//! `Tsubame::Native::Server`: the engine as seen from Ruby.

use crate::errors::bind_error;
use crate::ffi::{os_path, without_gvl};
use crate::request::Request;
use crate::selector::Selector;
use magnus::{prelude::*, Error, RArray, RHash, RString, Ruby, Symbol, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tsubame_engine::dispatch::fiber_route::check_pattern;
use tsubame_engine::dispatch::remote_addr::{default_trusted, Cidr, RemoteAddress};
use tsubame_engine::dispatch::timeouts::NextTimeout;
use tsubame_engine::message::methods::MethodPolicy;
use tsubame_engine::server::StopOutcome;
use tsubame_engine::{Engine, EngineOptions, FiberPath, FiberQueue, InlineMode, Pop};

thread_local! {
    /// When this Ruby thread (1:1 with an OS thread in Ruby 3.1) took the
    /// job of its last `next_request`, if it took one; asking again means
    /// it finished it.
    static HOLDING_JOB: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

#[magnus::wrap(class = "Tsubame::Native::Server", free_immediately, size)]
pub struct Server {
    pub(crate) engine: Arc<Engine>,
}

const OPTION_KEYS: &[&str] = &[
    "binds",
    "backlog",
    "io_threads",
    "threads_min",
    "threads_max",
    "max_body_size",
    "spool_threshold",
    "upload_dir",
    "max_uri_size",
    "max_header_size",
    "max_headers",
    "first_data_timeout",
    "persistent_timeout",
    "body_timeout",
    "drain_timeout",
    "log_requests",
    "metrics",
    "access_log",
    "access_log_file",
    "request_id",
    "request_start_header",
    "worker_index",
    "handoff_to_fd",
    "handoff_from_fd",
    "tcp_nodelay",
    "request_timeout",
    "request_timeout_grace",
    "queue_timeout",
    "max_queue",
    "max_connections",
    "max_spooled_uploads",
    "upload_memory",
    "retry_after",
    "health_check_path",
    "readiness_check_path",
    "readiness_queue_threshold",
    "readiness_queue_wait",
    "readiness_hold",
    "handoff_spin",
    "inline",
    "fiber_scheduler",
    "fiber_paths",
    "fiber_threads",
    "max_fibers",
    "http2",
    "tls_ticket_rotation",
    "h2c",
    "h2_max_concurrent_streams",
    "h2_initial_window_size",
    "h2_initial_connection_window_size",
    "trust_forwarded_proto",
    "proxy_protocol",
    "remote_address_header",
    "remote_address_value",
    "trusted_proxies",
    "public_dir",
    "public_index",
    "public_immutable",
    "compress",
    "compress_min_size",
    "compress_types",
    "websocket_max_frame",
    "websocket_max_message",
    "websocket_max_rate",
    "websocket_deflate",
    "upgrade_max_pending",
    "upgrade_ping_interval",
    "max_keep_alive",
    "supported_http_methods",
    "allow_underscore_headers",
];

struct OptionReader<'a> {
    ruby: &'a Ruby,
    hash: RHash,
}

impl OptionReader<'_> {
    fn get<T: magnus::TryConvert>(&self, key: &str) -> Result<Option<T>, Error> {
        match self.hash.get(self.ruby.to_symbol(key)) {
            None => Ok(None),
            Some(v) if v.is_nil() => Ok(None),
            Some(v) => T::try_convert(v)
                .map(Some)
                .map_err(|e| Error::new(self.ruby.exception_arg_error(), format!("option {key}: {e}"))),
        }
    }

    /// A duration that may be zero (`drain_timeout 0`, `handoff_spin 0`);
    /// the Ruby side has already refused negative ones.
    fn seconds(&self, key: &str, default: Duration) -> Result<Duration, Error> {
        match self.get::<f64>(key)? {
            None => Ok(default),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(Error::new(
                self.ruby.exception_arg_error(),
                format!("option {key}: must be a non-negative number of seconds, got {s}"),
            )),
        }
    }

    /// For settings that can be off: an absent key keeps `default`; nil or
    /// false turns the setting off.
    fn optional<T: magnus::TryConvert>(&self, key: &str, default: Option<T>) -> Result<Option<T>, Error> {
        match self.hash.get(self.ruby.to_symbol(key)) {
            None => Ok(default),
            Some(v) if v.is_nil() || v.is_kind_of(self.ruby.class_false_class()) => Ok(None),
            Some(_) => self.get(key),
        }
    }

    /// `inline`: true, false, or :auto.
    fn inline_mode(&self, key: &str, default: InlineMode) -> Result<InlineMode, Error> {
        match self.hash.get(self.ruby.to_symbol(key)) {
            None => Ok(default),
            Some(v) if v.is_kind_of(self.ruby.class_true_class()) => Ok(InlineMode::On),
            Some(v) if v.is_kind_of(self.ruby.class_false_class()) => Ok(InlineMode::Off),
            Some(v) if v.to_string() == "auto" => Ok(InlineMode::Auto),
            Some(v) => Err(Error::new(
                self.ruby.exception_arg_error(),
                format!("option {key}: must be true, false or :auto, got {v}"),
            )),
        }
    }

    fn optional_seconds(&self, key: &str, default: Option<Duration>) -> Result<Option<Duration>, Error> {
        match self.optional::<f64>(key, default.map(|d| d.as_secs_f64()))? {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(Error::new(
                self.ruby.exception_arg_error(),
                format!("option {key}: must be a positive number of seconds, got {s}"),
            )),
        }
    }
}

/// The engine gets the whole options structure at once; keys it does not
/// know are a programming error on the Ruby side, so they are refused.
fn engine_options(ruby: &Ruby, hash: RHash) -> Result<EngineOptions, Error> {
    let mut unknown = Vec::new();
    hash.foreach(|key: Value, _: Value| {
        let name = Symbol::from_value(key).map(|s| s.name().map(|n| n.to_string()));
        match name {
            Some(Ok(n)) if OPTION_KEYS.contains(&n.as_str()) => {}
            _ => unknown.push(key.inspect()),
        }
        Ok(magnus::r_hash::ForEach::Continue)
    })?;
    if !unknown.is_empty() {
        return Err(Error::new(
            ruby.exception_arg_error(),
            format!("unknown engine options: {}", unknown.join(", ")),
        ));
    }
    let r = OptionReader { ruby, hash };
    let d = EngineOptions::default();
    Ok(EngineOptions {
        binds: r.get::<Vec<String>>("binds")?.unwrap_or(d.binds),
        backlog: r.get("backlog")?.unwrap_or(d.backlog),
        io_threads: r.get("io_threads")?.unwrap_or(d.io_threads),
        threads_min: r.get("threads_min")?.unwrap_or(d.threads_min),
        threads_max: r.get("threads_max")?.unwrap_or(d.threads_max),
        max_body_size: r.get("max_body_size")?,
        spool_threshold: r.get("spool_threshold")?.unwrap_or(d.spool_threshold),
        upload_dir: r.get::<RString>("upload_dir")?.map(os_path),
        max_uri_size: r.get("max_uri_size")?.unwrap_or(d.max_uri_size),
        max_header_size: r.get("max_header_size")?.unwrap_or(d.max_header_size),
        max_headers: r.get("max_headers")?.unwrap_or(d.max_headers),
        first_data_timeout: r.seconds("first_data_timeout", d.first_data_timeout)?,
        persistent_timeout: r.seconds("persistent_timeout", d.persistent_timeout)?,
        body_timeout: r.seconds("body_timeout", d.body_timeout)?,
        drain_timeout: r.seconds("drain_timeout", d.drain_timeout)?,
        log_requests: r.get("log_requests")?.unwrap_or(d.log_requests),
        metrics: r.get("metrics")?.unwrap_or(d.metrics),
        access_log: r.get("access_log")?,
        access_log_file: r.get::<RString>("access_log_file")?.map(os_path),
        request_id: r.get("request_id")?.unwrap_or(d.request_id),
        request_start_header: r.get("request_start_header")?.unwrap_or(d.request_start_header),
        worker_index: r.get("worker_index")?,
        handoff_to_fd: r.get("handoff_to_fd")?,
        handoff_from_fd: r.get("handoff_from_fd")?,
        tcp_nodelay: r.get("tcp_nodelay")?.unwrap_or(d.tcp_nodelay),
        request_timeout: r.optional_seconds("request_timeout", d.request_timeout)?,
        request_timeout_grace: r.seconds("request_timeout_grace", d.request_timeout_grace)?,
        queue_timeout: r.optional_seconds("queue_timeout", d.queue_timeout)?,
        max_queue: r.optional("max_queue", d.max_queue)?,
        max_connections: r.optional("max_connections", d.max_connections)?,
        max_spooled_uploads: r.get("max_spooled_uploads")?.unwrap_or(d.max_spooled_uploads),
        upload_memory: r.get("upload_memory")?.unwrap_or(d.upload_memory),
        retry_after: r.get("retry_after")?.unwrap_or(d.retry_after),
        health_check_path: r.optional("health_check_path", d.health_check_path)?,
        readiness_check_path: r.optional("readiness_check_path", d.readiness_check_path)?,
        readiness_queue_threshold: r.optional("readiness_queue_threshold", d.readiness_queue_threshold)?,
        readiness_queue_wait: r.seconds("readiness_queue_wait", d.readiness_queue_wait)?,
        readiness_hold: r.seconds("readiness_hold", d.readiness_hold)?,
        handoff_spin: r.seconds("handoff_spin", d.handoff_spin)?,
        inline: r.inline_mode("inline", d.inline)?,
        fiber_scheduler: r.get("fiber_scheduler")?.unwrap_or(d.fiber_scheduler),
        fiber_paths: match r.get::<RArray>("fiber_paths")? {
            None => d.fiber_paths,
            Some(list) => list
                .into_iter()
                .map(|entry| fiber_path(ruby, entry))
                .collect::<Result<Vec<_>, _>>()?,
        },
        fiber_threads: r.get("fiber_threads")?.unwrap_or(d.fiber_threads),
        max_fibers: r.optional("max_fibers", d.max_fibers)?,
        http2: r.get("http2")?.unwrap_or(d.http2),
        tls_ticket_rotation: r.seconds("tls_ticket_rotation", d.tls_ticket_rotation)?,
        h2c: r.get("h2c")?.unwrap_or(d.h2c),
        h2_max_concurrent_streams: r
            .get("h2_max_concurrent_streams")?
            .unwrap_or(d.h2_max_concurrent_streams),
        h2_initial_window_size: r.get("h2_initial_window_size")?.unwrap_or(d.h2_initial_window_size),
        h2_initial_connection_window_size: r
            .get("h2_initial_connection_window_size")?
            .unwrap_or(d.h2_initial_connection_window_size),
        trust_forwarded_proto: r.get("trust_forwarded_proto")?.unwrap_or(d.trust_forwarded_proto),
        proxy_protocol: r.get("proxy_protocol")?,
        remote_address: remote_address(ruby, &r)?,
        public_dir: r.get::<RString>("public_dir")?.map(os_path),
        public_index: r.get("public_index")?.unwrap_or(d.public_index),
        public_immutable: r.optional("public_immutable", d.public_immutable)?,
        compress: r.get("compress")?.unwrap_or(d.compress),
        compress_min_size: r.get("compress_min_size")?.unwrap_or(d.compress_min_size),
        compress_types: r.get::<Vec<String>>("compress_types")?.unwrap_or(d.compress_types),
        websocket_max_frame: r.get("websocket_max_frame")?.unwrap_or(d.websocket_max_frame),
        websocket_max_message: r.get("websocket_max_message")?.unwrap_or(d.websocket_max_message),
        websocket_max_rate: r.get("websocket_max_rate")?.unwrap_or(d.websocket_max_rate),
        websocket_deflate: r.get("websocket_deflate")?.unwrap_or(d.websocket_deflate),
        upgrade_max_pending: r.get("upgrade_max_pending")?.unwrap_or(d.upgrade_max_pending),
        upgrade_ping_interval: r.seconds("upgrade_ping_interval", d.upgrade_ping_interval)?,
        max_keep_alive: r.get("max_keep_alive")?,
        http_methods: http_methods(&r)?,
        allow_underscore_headers: r.get("allow_underscore_headers")?.unwrap_or(d.allow_underscore_headers),
    })
}

/// `supported_http_methods`: absent or nil keeps the engine's list,
/// "any" lets every method through, an Array names the only ones.
fn http_methods(r: &OptionReader<'_>) -> Result<MethodPolicy, Error> {
    if let Ok(Some(word)) = r.get::<String>("supported_http_methods") {
        return if word == "any" {
            Ok(MethodPolicy::Any)
        } else {
            Err(Error::new(
                r.ruby.exception_arg_error(),
                format!("option supported_http_methods: \"any\" or an Array, got {word:?}"),
            ))
        };
    }
    Ok(match r.get::<Vec<String>>("supported_http_methods")? {
        None => MethodPolicy::Known,
        Some(list) => MethodPolicy::Only(list.into_iter().map(String::into_bytes).collect()),
    })
}

/// `set_remote_address`: a fixed value wins over a header; with neither,
/// the socket's peer. The trusted proxies matter only for a header.
fn remote_address(ruby: &Ruby, r: &OptionReader<'_>) -> Result<RemoteAddress, Error> {
    if let Some(value) = r.get::<String>("remote_address_value")? {
        return Ok(RemoteAddress::Fixed(value));
    }
    let Some(name) = r.get::<String>("remote_address_header")? else {
        return Ok(RemoteAddress::Socket);
    };
    let trusted = match r.get::<Vec<String>>("trusted_proxies")? {
        None => default_trusted(),
        Some(list) => list
            .iter()
            .map(|c| Cidr::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::new(ruby.exception_arg_error(), format!("option trusted_proxies: {e}")))?,
    };
    Ok(RemoteAddress::Header {
        name: name.to_ascii_lowercase(),
        trusted,
    })
}

/// A `fiber_paths` entry: a String is a prefix, a Regexp a pattern.
pub fn fiber_path(ruby: &Ruby, entry: Value) -> Result<FiberPath, Error> {
    if let Some(prefix) = RString::from_value(entry) {
        return Ok(FiberPath::Prefix(prefix.to_string()?));
    }
    if entry.is_kind_of(ruby.class_regexp()) {
        let source: String = entry.funcall("source", ())?;
        let options: i64 = entry.funcall("options", ())?;
        return Ok(FiberPath::Pattern {
            source,
            ignore_case: options & 1 != 0,
            extended: options & 2 != 0,
            multiline: options & 4 != 0,
        });
    }
    Err(Error::new(
        ruby.exception_arg_error(),
        format!(
            "option fiber_paths: expected a String prefix or a Regexp, got {}",
            entry.inspect()
        ),
    ))
}

/// nil when the `regex` crate takes this `fiber_paths` entry, else why not
/// (for the config file check, which names the line).
pub fn fiber_path_error(ruby: &Ruby, entry: Value) -> Result<Option<String>, Error> {
    let path = fiber_path(ruby, entry)?;
    Ok(check_pattern(&path).err().map(|e| e.to_string()))
}

impl Server {
    /// Parses the options and binds every listener (raising
    /// Tsubame::BindError naming the bind that failed).
    pub fn new(ruby: &Ruby, options: RHash) -> Result<Server, Error> {
        let opts = engine_options(ruby, options)?;
        let engine = Engine::bind(opts).map_err(|e| Error::new(bind_error(ruby), e.to_string()))?;
        Ok(Server {
            engine: Arc::new(engine),
        })
    }

    pub fn fibers(&self) -> &Arc<FiberQueue> {
        self.engine.fibers()
    }

    /// The next request routed to fibers, without blocking: nil when none
    /// is queued, false once the server stopped and the queue is empty.
    /// The fiber loop waits in its Selector, which the queue wakes.
    pub fn next_fiber_request(ruby: &Ruby, rb_self: &Self) -> Value {
        match rb_self.engine.fibers().try_pop() {
            Pop::Job(job) => ruby.obj_wrap(Request::new(job, None)).as_value(),
            Pop::Closed => ruby.qfalse().as_value(),
            Pop::Empty | Pop::Interrupted => ruby.qnil().as_value(),
        }
    }

    /// A fiber finished the request it took (frees its max_fibers slot).
    pub fn fiber_finished(&self) {
        self.engine.fibers().finished();
    }

    pub fn addresses(&self) -> Vec<String> {
        self.engine.addresses().to_vec()
    }

    pub fn start(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self
            .engine
            .start()
            .map_err(|e| Error::new(ruby.exception_runtime_error(), format!("cannot start the engine: {e}")))
    }

    /// `websocket_workers`: the master says whether a WebSocket worker is
    /// up, so upgrade requests go to the WebSocket workers (or stay here).
    pub fn set_handoff(&self, on: bool) {
        self.engine.set_handoff(on);
    }

    /// The lame-duck period before a stop (`shutdown_delay`): readiness
    /// answers 503 while requests are still served. Safe in a trap handler.
    pub fn enter_lame_duck(&self) {
        self.engine.enter_lame_duck();
    }

    /// Begins a graceful stop and returns at once (safe in a trap handler).
    pub fn stop(&self) {
        self.engine.stop();
    }

    /// The next request, or nil once the server has stopped and every
    /// queued request has been handed out. Waits with the GVL released.
    pub fn next_request(ruby: &Ruby, rb_self: &Self) -> Result<Option<Request>, Error> {
        let queue = rb_self.engine.queue();
        // The first look at the queue also counts the job this thread just
        // finished, if it had one: one lock for both.
        let mut first = match HOLDING_JOB.with(|h| h.replace(None)) {
            Some(taken) => {
                let now = Instant::now();
                queue.record_service(now.saturating_duration_since(taken));
                Some(queue.finished_and_try_pop(now))
            }
            None => None,
        };
        loop {
            let pop = match first.take().unwrap_or_else(|| queue.try_pop()) {
                Pop::Empty => {
                    let interrupted = AtomicBool::new(false);
                    let inline = rb_self.engine.inline();
                    let (popped, raised) = without_gvl(
                        || {
                            inline
                                .and_then(|inline| inline.drive_for_job(&interrupted))
                                .unwrap_or_else(|| queue.pop_wait(&interrupted))
                        },
                        || {
                            interrupted.store(true, Ordering::Release);
                            queue.wake_all();
                        },
                    );
                    if let Err(e) = raised {
                        // Ruby is unwinding this thread (kill, raise): a job
                        // it had already taken goes back for another thread.
                        if let Some(Pop::Job(job)) = popped {
                            queue.push_front(*job);
                        }
                        return Err(e);
                    }
                    popped.unwrap_or(Pop::Interrupted)
                }
                other => other,
            };
            match pop {
                Pop::Job(job) => {
                    let taken_at = job.taken_at.unwrap_or_else(Instant::now);
                    HOLDING_JOB.with(|h| h.set(Some(taken_at)));
                    return Ok(Some(Request::new(job, rb_self.engine.inline().cloned())));
                }
                Pop::Closed => return Ok(None),
                Pop::Interrupted | Pop::Empty => ruby.thread_check_ints()?,
            }
        }
    }

    /// Blocks (GVL released, signals still handled) until a stop has
    /// finished. Returns :drained or :timed_out.
    pub fn wait(ruby: &Ruby, rb_self: &Self) -> Result<Symbol, Error> {
        let engine = &rb_self.engine;
        let outcome = wait_interruptibly(ruby, |flag| engine.wait_stopped(flag), || engine.wake_waiters())?;
        // The last requests' access lines, before the process exits.
        engine.observer().flush(Duration::from_secs(2));
        Ok(ruby.to_symbol(match outcome {
            StopOutcome::Drained => "drained",
            StopOutcome::TimedOut { .. } => "timed_out",
        }))
    }

    pub fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let s = rb_self.engine.stats();
        let queue = rb_self.engine.queue();
        let hash = ruby.hash_new();
        hash.aset("connections_total", s.connections_total)?;
        hash.aset("connections_active", s.connections_active)?;
        hash.aset("requests_total", s.requests_total)?;
        hash.aset("rejected_total", s.rejected_total)?;
        hash.aset("read_timeouts", s.read_timeouts)?;
        hash.aset("client_disconnects", s.client_disconnects)?;
        hash.aset("spool_errors", s.spool_errors)?;
        hash.aset("accept_errors", s.accept_errors)?;
        hash.aset("memory_trims", s.memory_trims)?;
        hash.aset("files_sendfile", s.files_sendfile)?;
        hash.aset("files_copied", s.files_copied)?;
        hash.aset("backlog", s.backlog)?;
        hash.aset("waiting_threads", queue.waiting() as u64)?;
        hash.aset("timed_out", s.shed_request_timeout)?;
        hash.aset("stuck_threads", s.stuck_threads)?;
        hash.aset("proxy_refused", s.proxy_refused)?;
        hash.aset("inline", rb_self.engine.inline().is_some())?;
        hash.aset("inline_takeovers", s.inline_takeovers)?;
        hash.aset("handoff_on", rb_self.engine.handoff_on())?;
        hash.aset("handoffs_sent", s.handoffs_sent)?;
        hash.aset("handoffs_failed", s.handoffs_failed)?;
        hash.aset("handoffs_received", s.handoffs_received)?;
        hash.aset("handoffs_refused", s.handoffs_refused)?;
        let shed = ruby.hash_new();
        shed.aset("queue_full", s.shed_queue_full)?;
        shed.aset("queue_timeout", s.shed_queue_timeout)?;
        shed.aset("request_timeout", s.shed_request_timeout)?;
        shed.aset("connection_limit", s.shed_connections)?;
        shed.aset("upload_limit", s.shed_uploads)?;
        shed.aset("fiber_limit", s.shed_fibers)?;
        hash.aset("shed", shed)?;
        hash.aset("shed_total", s.shed_total())?;
        let ms = |q: f64| queue.wait_times().quantile(q).as_secs_f64() * 1000.0;
        hash.aset("queue_wait_p50_ms", ms(0.5))?;
        hash.aset("queue_wait_p99_ms", ms(0.99))?;
        let fibers = rb_self.engine.fibers();
        hash.aset("fiber_backlog", fibers.len() as u64)?;
        hash.aset("fibers_running", fibers.running() as u64)?;
        hash.aset("fiber_requests_total", fibers.taken())?;
        Ok(hash)
    }

    /// The sequence number of the next request whose deadline passed while
    /// a thread ran it, or nil once the server has stopped. Waits with the
    /// GVL released.
    pub fn next_timeout(ruby: &Ruby, rb_self: &Self) -> Result<Option<u64>, Error> {
        let timed_out = rb_self.engine.timed_out();
        let next = wait_interruptibly(
            ruby,
            |flag| match timed_out.wait(flag) {
                NextTimeout::Seq(seq) => Some(Some(seq)),
                NextTimeout::Closed => Some(None),
                NextTimeout::Interrupted => None,
            },
            || timed_out.wake_all(),
        )?;
        Ok(next)
    }

    /// Reads the TLS certificates and keys again (HUP); returns how many
    /// binds were reloaded, or raises Tsubame::BindError naming the file
    /// (those binds keep their old certificate).
    pub fn reload_tls(ruby: &Ruby, rb_self: &Self) -> Result<usize, Error> {
        rb_self
            .engine
            .reload_tls()
            .map_err(|e| Error::new(bind_error(ruby), e.to_string()))
    }

    pub fn report_stuck_thread(&self) {
        self.engine.report_stuck_thread();
    }

    /// Gives back what the allocators hold free: mimalloc's caches of this
    /// thread and of the I/O threads (which allocate every request and get
    /// most of it freed by Ruby threads), then glibc's (`malloc_trim`,
    /// milliseconds; the GVL stays held, since it is called only when no
    /// request is running).
    pub fn trim_memory(&self) -> bool {
        crate::ffi::collect_allocator_cache();
        self.engine.on_io_threads(crate::ffi::collect_allocator_cache);
        self.engine.trim_memory()
    }
}

/// Runs `wait` with the GVL released until it returns `Some`. When Ruby
/// needs the thread (a signal, `Thread#raise`, `Thread#kill`), `wake` makes
/// `wait` see its flag and return `None`; pending interrupts are then run
/// (they may raise) and the wait resumes.
fn wait_interruptibly<T>(ruby: &Ruby, wait: impl Fn(&AtomicBool) -> Option<T>, wake: impl Fn()) -> Result<T, Error> {
    loop {
        let interrupted = AtomicBool::new(false);
        let (result, raised) = without_gvl(
            || wait(&interrupted),
            || {
                interrupted.store(true, Ordering::Release);
                wake();
            },
        );
        raised?;
        match result.flatten() {
            Some(value) => return Ok(value),
            None => ruby.thread_check_ints()?,
        }
    }
}

/// `Selector#attach(server)`: wakes the selector whenever the engine
/// queues requests for fibers. Defined here, beside the server it reads,
/// so the selector (which streams also use) knows nothing of servers.
pub fn attach_selector(selector: &Selector, server: &Server) {
    server.fibers().add_waker(selector.waker());
}
