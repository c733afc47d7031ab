//! The engine as a whole: listeners bound at boot, a tokio runtime on its
//! own threads started later, accept loops, and a graceful stop.

use crate::dispatch::fiber_queue::FiberQueue;
use crate::dispatch::fiber_route::{FiberRoutes, PatternError};
use crate::dispatch::job::{ConnInfo, ListenerInfo};
use crate::dispatch::queue::{Crowd, JobQueue};
use crate::dispatch::reply::Reply;
use crate::dispatch::timeouts::TimedOut;
use crate::error::BindError;
use crate::error::ShedReason;
use crate::handoff::HandoffError;
use crate::http1::connection::serve;
use crate::log;
use crate::message::head::Version;
use crate::message::response::unavailable_response;
use crate::net::accept::Acceptor;
use crate::net::accept_log::AcceptFailures;
use crate::net::bind::{BindSpec, Bound, Listener};
use crate::net::client_io::{ClientIo, READ_CHUNK};
use crate::net::proxy_log::ProxyRefusals;
use crate::net::proxy_protocol::{read_header, ProxyError, ProxySource, ProxyVersion};
use crate::net::rewind::Rewind;
use crate::net::tls::{TlsError, TlsListener};
use crate::options::EngineOptions;
use crate::shared::Shared;
use crate::stats::{Stats, StatsSnapshot};
use bytes::BytesMut;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Every connection finished its request and closed.
    Drained,
    /// drain_timeout passed with connections still open; they were cut.
    TimedOut { connections: u64, queued: usize },
}

#[derive(Default)]
struct Lifecycle {
    started: bool,
    outcome: Option<StopOutcome>,
}

pub struct Engine {
    shared: Arc<Shared>,
    listeners: Mutex<Vec<Bound>>,
    addresses: Vec<String>,
    /// Every TLS listener's live configuration, for `reload_tls`.
    tls: Vec<Arc<TlsListener>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// Inline mode's runtime and baton (`inline.rs`), when on.
    inline: std::sync::OnceLock<Arc<crate::inline::Inline>>,
    lifecycle: Mutex<Lifecycle>,
    stopped: Condvar,
    /// The WebSocket worker's end of the hand-off socket, taken by `start`.
    handoff_from: Mutex<Option<OwnedFd>>,
}

struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.stats.connections_active.fetch_sub(1, Ordering::AcqRel);
        if self.0.is_stopping() {
            self.0.conn_closed.notify_one();
        }
    }
}

impl Engine {
    /// Binds every listener now, so a bad bind fails the boot before any
    /// thread starts, and the real addresses can be printed.
    pub fn bind(opts: EngineOptions) -> Result<Engine, BindError> {
        opts.inline_active().map_err(|e| BindError::Invalid {
            uri: "inline".to_string(),
            reason: e.to_string(),
        })?;
        let mut listeners = Vec::new();
        let proxy = match opts.proxy_protocol.as_deref() {
            None => None,
            Some(v) => Some(ProxyVersion::parse(v).ok_or_else(|| BindError::Invalid {
                uri: "proxy_protocol".to_string(),
                reason: format!("must be v1 or v2, got {v:?}"),
            })?),
        };
        for uri in &opts.binds {
            let mut spec = BindSpec::parse(uri)?;
            spec.proxy = spec.proxy.or(proxy);
            if let Some(tls) = &mut spec.tls {
                tls.http2 = opts.http2;
                tls.ticket_rotation = opts.tls_ticket_rotation;
            }
            spec.h2c |= opts.h2c && spec.tls.is_none();
            listeners.extend(spec.bind(opts.backlog)?);
        }
        let addresses = listeners.iter().map(|b| b.address.clone()).collect();
        let routes = if opts.fiber_scheduler {
            Some(FiberRoutes::compile(&opts.fiber_paths).map_err(config_error)?)
        } else {
            None
        };
        let mut tls: Vec<Arc<TlsListener>> = Vec::new();
        for listener in listeners.iter().filter_map(|b| b.tls.as_ref()) {
            if !tls.iter().any(|t| Arc::ptr_eq(t, listener)) {
                tls.push(listener.clone());
            }
        }
        let public = match &opts.public_dir {
            Some(dir) => Some(
                crate::files::Public::new(dir, opts.public_index, opts.public_immutable.as_deref()).map_err(|e| {
                    BindError::Invalid {
                        uri: "public_dir".to_string(),
                        reason: e.to_string(),
                    }
                })?,
            ),
            None => None,
        };
        let observe = observer(&opts)?;
        let inherited = |name: &str, fd: Option<i32>| {
            fd.map(crate::sys::duplicate)
                .transpose()
                .map_err(|e| BindError::Invalid {
                    uri: name.to_string(),
                    reason: e.to_string(),
                })
        };
        let handoff_to = inherited("handoff_to_fd", opts.handoff_to_fd)?;
        let handoff_from = inherited("handoff_from_fd", opts.handoff_from_fd)?;
        let mut shared = Shared::new(opts, routes);
        shared.public = public;
        shared.observe = observe;
        shared.handoff = handoff_to.map(crate::handoff::HandoffTarget::new);
        Ok(Engine {
            shared: Arc::new(shared),
            listeners: Mutex::new(listeners),
            addresses,
            tls,
            runtime: Mutex::new(None),
            inline: std::sync::OnceLock::new(),
            lifecycle: Mutex::new(Lifecycle::default()),
            stopped: Condvar::new(),
            handoff_from: Mutex::new(handoff_from),
        })
    }

    /// `websocket_workers`, in an HTTP worker: whether upgrade requests go
    /// to the WebSocket workers (the master says when one is up). No-op
    /// without a hand-off socket.
    pub fn set_handoff(&self, on: bool) {
        if let Some(target) = &self.shared.handoff {
            target.set_on(on);
        }
    }

    /// Whether this HTTP worker hands upgrades over now (what the master
    /// last told it); false without a hand-off socket.
    pub fn handoff_on(&self) -> bool {
        self.shared.handoff.as_ref().is_some_and(|target| target.is_on())
    }

    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Reads every TLS bind's certificate and key again (HUP). New
    /// handshakes use them; open connections keep the ones they began with.
    /// If any bind fails, the error names its file, and the binds that
    /// failed keep their old certificates. Returns how many were reloaded.
    pub fn reload_tls(&self) -> Result<usize, TlsError> {
        let mut failures = Vec::new();
        for listener in &self.tls {
            if let Err(e) = listener.reload() {
                failures.push(e.0);
            }
        }
        if failures.is_empty() {
            Ok(self.tls.len())
        } else {
            Err(TlsError(failures.join("; ")))
        }
    }

    pub fn queue(&self) -> &Arc<JobQueue> {
        &self.shared.queue
    }

    pub fn fibers(&self) -> &Arc<FiberQueue> {
        &self.shared.fibers
    }

    /// The engine-held WebSockets and SSE streams (`rack.upgrade`).
    pub fn upgrades(&self) -> &crate::upgrade::Registry {
        &self.shared.upgrades
    }

    /// Their events, for the Ruby threads that run the handlers.
    pub fn upgrade_events(&self) -> &crate::upgrade::EventQueue {
        &self.shared.upgrade_events
    }

    /// How long a thread out of work stays awake (`handoff_spin`).
    pub fn handoff_spin(&self) -> Duration {
        self.shared.opts.handoff_spin
    }

    /// Bytes Ruby may queue for one upgraded connection.
    pub fn upgrade_max_pending(&self) -> usize {
        self.shared.upgrade_settings.max_pending
    }

    /// Requests that passed their deadline while a thread ran them.
    pub fn timed_out(&self) -> &TimedOut {
        &self.shared.timed_out
    }

    /// The Ruby side found a thread still running a request after its
    /// timeout's grace period.
    pub fn report_stuck_thread(&self) {
        Stats::bump(&self.shared.stats.stuck_threads);
    }

    /// The per-request metrics, the access log's dropped lines.
    pub fn observer(&self) -> &crate::observe::Observer {
        &self.shared.observe
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot(self.shared.queue.len())
    }

    /// Runs `f` on the I/O runtime's threads, best effort (one task per
    /// `io_threads`; with more than one, two may land on the same thread).
    /// For work that must happen on the thread that owns something, such
    /// as a thread-local allocator cache.
    pub fn on_io_threads(&self, f: fn()) {
        if let Some(inline) = self.inline.get() {
            inline.spawn(async move { f() });
            return;
        }
        let guard = self.runtime.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(runtime) = guard.as_ref() {
            for _ in 0..self.shared.opts.io_threads.max(1) {
                runtime.spawn(async move { f() });
            }
        }
    }

    /// Hands the memory glibc holds free back to the OS (`malloc_trim`),
    /// counted in `memory_trims`; true if any was returned. The Ruby side
    /// calls it once a server has gone quiet (`idle_memory_trim`).
    pub fn trim_memory(&self) -> bool {
        let trimmed = crate::sys::release_free_heap();
        if trimmed {
            Stats::bump(&self.shared.stats.memory_trims);
        }
        trimmed
    }

    /// Starts the I/O threads and the accept loops. Calling it twice is a
    /// no-op.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        {
            let mut life = self.lock_lifecycle();
            if life.started {
                return Ok(());
            }
            life.started = true;
        }
        let inline = self.shared.opts.inline_active().unwrap_or(false);
        let runtime = if inline {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(self.shared.opts.io_threads.max(1))
                .thread_name("tsubame-io")
                .on_thread_start(block_signals)
                .on_thread_park({
                    let shared = self.shared.clone();
                    move || spin_before_park(&shared)
                })
                .enable_all()
                .build()?
        };
        let listeners = std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|e| e.into_inner()));
        for bound in listeners {
            let info = Arc::new(ListenerInfo {
                server_name: bound.server_name,
                server_port: bound.server_port,
                url_scheme: if bound.tls.is_some() { "https" } else { "http" },
                trust_forwarded_proto: self.shared.opts.trust_forwarded_proto,
                remote_address: self.shared.opts.remote_address.clone(),
            });
            let protocol = match (bound.tls, bound.h2c) {
                (Some(tls), _) => Protocol::Tls(tls),
                (None, true) => Protocol::H2c,
                (None, false) => Protocol::Http1,
            };
            let route = Route {
                protocol,
                proxy: bound.proxy.map(|version| {
                    Arc::new(ProxyBind {
                        version,
                        refusals: ProxyRefusals::default(),
                    })
                }),
            };
            let shared = self.shared.clone();
            match bound.listener {
                Listener::Tcp(std) => {
                    let _guard = runtime.enter();
                    let listener = Acceptor::new(std, bound.busy_accept_delay)?;
                    runtime.spawn(accept_tcp(listener, info, route, shared));
                }
                Listener::Unix(std, path) => {
                    let _guard = runtime.enter();
                    let listener = Acceptor::new(std, bound.busy_accept_delay)?;
                    runtime.spawn(accept_unix(listener, path, info, route, shared));
                }
            }
        }
        if let Some(socket) = self.handoff_from.lock().unwrap_or_else(|e| e.into_inner()).take() {
            runtime.spawn(accept_handoffs(socket, self.shared.clone()));
        }
        let engine = self.clone();
        runtime.spawn(async move { engine.supervise_stop().await });
        runtime.spawn(watch_queue(self.shared.clone()));
        if inline {
            let inline = crate::inline::Inline::new(runtime, self.shared.clone(), self.shared.opts.handoff_spin);
            let keeper = inline.clone();
            std::thread::Builder::new().name("tsubame-io".into()).spawn(move || {
                block_signals();
                keeper.keep();
            })?;
            let _ = self.inline.set(inline);
            return Ok(());
        }
        *self.runtime.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
        Ok(())
    }

    fn lock_lifecycle(&self) -> std::sync::MutexGuard<'_, Lifecycle> {
        self.lifecycle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lame-duck period before a stop (`shutdown_delay`): readiness
    /// answers 503 draining and responses carry `connection: close`, while
    /// the listeners go on accepting and serving until `stop`.
    pub fn enter_lame_duck(&self) {
        self.shared.readiness.enter_lame_duck();
    }

    /// Begins a graceful stop: no new connections, idle keep-alive
    /// connections closed, requests in flight allowed to finish. Returns at
    /// once; safe from any thread, any number of times.
    pub fn stop(&self) {
        if self.shared.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.stop_notify.notify_waiters();
        let started = self.lock_lifecycle().started;
        if !started {
            self.shared.queue.close();
            self.shared.fibers.close();
            self.shared.upgrade_events.close();
            self.finish(StopOutcome::Drained);
        }
    }

    async fn supervise_stop(self: Arc<Self>) {
        let shared = &self.shared;
        loop {
            let stop = shared.stop_notify.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            if shared.is_stopping() {
                break;
            }
            stop.await;
        }
        let deadline = tokio::time::Instant::now() + shared.opts.drain_timeout;
        let outcome = loop {
            let closed = shared.conn_closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let open = shared.stats.connections_active.load(Ordering::Acquire);
            if open == 0 {
                break StopOutcome::Drained;
            }
            // Re-checking on a short tick as well covers a close that
            // happened before this waiter was registered.
            let tick = (deadline - tokio::time::Instant::now()).min(Duration::from_millis(100));
            if tokio::time::timeout(tick, &mut closed).await.is_err() && tokio::time::Instant::now() >= deadline {
                let queued = shared.queue.close_and_take().len() + shared.fibers.close_and_take().len();
                break StopOutcome::TimedOut {
                    connections: open,
                    queued,
                };
            }
        };
        shared.queue.close();
        shared.fibers.close();
        shared.timed_out.close();
        // Every upgraded connection has ended (or the drain timed out):
        // the handler threads finish the events left and stop.
        shared.upgrade_events.close();
        if let StopOutcome::TimedOut { connections, queued } = outcome {
            log::warn(&format!(
                "drain timeout: closing {connections} connection(s) still open, {queued} queued request(s) dropped"
            ));
        }
        self.finish(outcome);
    }

    fn finish(&self, outcome: StopOutcome) {
        self.lock_lifecycle().outcome = Some(outcome);
        self.stopped.notify_all();
    }

    /// Blocks until the stop has finished, or until `interrupted` is set and
    /// `wake_waiters` called (the caller may have to service a signal).
    /// Returns `None` when interrupted.
    pub fn wait_stopped(&self, interrupted: &AtomicBool) -> Option<StopOutcome> {
        let mut life = self.lock_lifecycle();
        loop {
            if let Some(outcome) = life.outcome {
                drop(life);
                self.shutdown_runtime();
                return Some(outcome);
            }
            if interrupted.load(Ordering::Acquire) {
                return None;
            }
            life = self.stopped.wait(life).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn wake_waiters(&self) {
        drop(self.lock_lifecycle());
        self.stopped.notify_all();
    }

    /// Inline mode's runtime, when on.
    pub fn inline(&self) -> Option<&Arc<crate::inline::Inline>> {
        self.inline.get()
    }

    fn shutdown_runtime(&self) {
        if let Some(inline) = self.inline.get() {
            inline.shutdown(Duration::from_secs(1));
        }
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Signals belong to the Ruby side (trap handlers for TERM, INT, ...). The
/// I/O threads block them all so the kernel never picks one of them to run
/// Ruby's signal handler on.
fn block_signals() {
    crate::sys::block_all_signals();
}

/// Called by tokio when an I/O thread is about to sleep (for at most
/// `handoff_spin`). While an app
/// thread runs a request, its reply usually comes within microseconds; an
/// I/O thread asleep in epoll would then be woken for it, a context switch
/// that costs more than the whole request at low concurrency. Staying
/// awake a moment lets the reply's wake-up find the thread still running:
/// tokio then takes the task without sleeping at all.
fn spin_before_park(shared: &Shared) {
    let limit = shared.opts.handoff_spin;
    if limit.is_zero() {
        return;
    }
    // Only when every open connection waits for the app: then the reply is
    // the one thing that can wake this thread. With connections waiting
    // for their clients, the thread is woken for them soon anyway, and the
    // spin would take a core from the app thread or the clients.
    // And only when the app usually answers within the spin: a Rails
    // action of half a millisecond would leave the thread spinning for
    // nothing.
    let connections = shared.stats.connections_active.load(Ordering::Relaxed);
    // Upgraded connections whose handler runs wait for Ruby the same way.
    let upgrades = shared.upgrade_events.in_flight();
    let waiting = (shared.queue.outstanding() + upgrades) as u64;
    if connections == 0 || waiting < connections || (upgrades == 0 && shared.queue.typical_service() >= limit) {
        return;
    }
    let started = std::time::Instant::now();
    let mut n = 0u32;
    // Yielding, like the app thread's spin (`JobQueue::pop_wait`): a
    // runnable app thread on this core gets it at once.
    while shared.queue.app_busy() || shared.upgrade_events.in_flight() > 0 {
        std::thread::yield_now();
        n += 1;
        if n.is_multiple_of(4) && started.elapsed() >= limit {
            break;
        }
    }
}

/// How often the watcher looks at a queue that has jobs in it.
const WATCH_INTERVAL: Duration = Duration::from_micros(500);

/// The share of one core the process's other threads must have used over
/// a look's interval for the running jobs to count as computing
/// (`Crowd::Computing`): the thread that holds the GVL uses nearly a whole
/// one, a thread waiting for I/O next to none.
const COMPUTING_SHARE: f64 = 0.75;

/// For how many looks after a preemption the running threads count as
/// computing: a preempted thread can wait several milliseconds for a core
/// (the scheduler's latency), off the CPU but not waiting for I/O.
const PREEMPTION_LOOKS: u32 = 10;

/// The share of a core the other threads must have used in the look that
/// saw a preemption, or in the one before, for it to count: a thread the
/// kernel took off a core was running until then. Threads that wait for
/// I/O use next to none, and a preemption of one of their short runs on a
/// busy machine (where the cores are also taken by other processes) says
/// nothing about whether they compute.
const PREEMPTED_SHARE: f64 = 0.25;

/// How long queued jobs wait behind threads that compute before one is
/// woken all the same: a thread that computes and now and then lets the
/// GVL go (a `File.stat`) would otherwise keep the others waiting for as
/// long as it runs.
const COMPUTING_AT_MOST: Duration = Duration::from_millis(50);

/// Runs while requests wait in the queue: answers 503 to those past
/// `queue_timeout`, and wakes an idle application thread while the running
/// ones wait off the CPU, or once queued jobs have made no progress for
/// `COMPUTING_AT_MOST` (see `dispatch/queue.rs`). Sleeps on `nudger`
/// otherwise, so an idle server has no timer ticking.
async fn watch_queue(shared: Arc<Shared>) {
    loop {
        shared.nudger.notified().await;
        let mut taken = shared.queue.taken();
        let mut clocks = CpuClocks::read();
        let mut progressed = clocks.at;
        let mut waiting_looks = 0u32;
        let mut looks_since_preemption = PREEMPTION_LOOKS;
        let mut last_share = 0.0;
        loop {
            tokio::time::sleep(WATCH_INTERVAL).await;
            if let Some(limit) = shared.opts.queue_timeout {
                for job in shared
                    .queue
                    .expire(limit)
                    .into_iter()
                    .chain(shared.fibers.expire(limit))
                {
                    job.answer(Reply::Shed(ShedReason::QueueTimeout));
                }
            }
            let now = CpuClocks::read();
            let share = now.others_share_since(&clocks);
            // A thread the kernel preempted while it computed may wait for
            // a core for several looks after: with the cores taken,
            // another thread would not run either. (The watcher's own
            // thread, also preempted on a busy machine, does not count.)
            let preempted = now.preemptions > clocks.preemptions && share.max(last_share) >= PREEMPTED_SHARE;
            looks_since_preemption = if preempted {
                0
            } else {
                looks_since_preemption.saturating_add(1)
            };
            last_share = share;
            let computing = share >= COMPUTING_SHARE || looks_since_preemption < PREEMPTION_LOOKS;
            // Two looks in a row, so that a moment off the CPU (a page
            // fault, a wake-up) wakes nobody: a woken thread stays busy
            // while jobs are queued.
            waiting_looks = if computing { 0 } else { waiting_looks + 1 };
            let stalled = now.at.saturating_duration_since(progressed) >= COMPUTING_AT_MOST;
            clocks = now;
            let crowd = if waiting_looks >= 2 || stalled {
                Crowd::Waiting
            } else {
                Crowd::Computing
            };
            match shared.queue.nudge(crowd) {
                Some(now_taken) => {
                    if now_taken != taken || crowd == Crowd::Waiting {
                        // A wake-up starts the count again too: the next
                        // one waits for its own two looks.
                        progressed = clocks.at;
                        waiting_looks = 0;
                    }
                    taken = now_taken;
                }
                None if !shared.fibers.is_empty() => {}
                None => break,
            }
        }
    }
}

/// The clocks the queue watcher compares from one look to the next.
struct CpuClocks {
    at: Instant,
    process: Duration,
    /// The watcher's own thread, which also runs connections: its work is
    /// not the app threads'.
    this_thread: Duration,
    /// Involuntary context switches of the process's other threads.
    preemptions: u64,
}

impl CpuClocks {
    /// Two `getrusage` calls give both CPU times and both switch counts.
    fn read() -> Self {
        let (process, process_preemptions) = crate::sys::usage(libc::RUSAGE_SELF);
        let (this_thread, own_preemptions) = crate::sys::usage(libc::RUSAGE_THREAD);
        CpuClocks {
            at: Instant::now(),
            process,
            this_thread,
            preemptions: process_preemptions.saturating_sub(own_preemptions),
        }
    }

    /// The share of one core the other threads of the process used since
    /// `before`.
    fn others_share_since(&self, before: &CpuClocks) -> f64 {
        let wall = self.at.saturating_duration_since(before.at).as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        let process = self.process.saturating_sub(before.process);
        let here = self.this_thread.saturating_sub(before.this_thread);
        process.saturating_sub(here).as_secs_f64() / wall
    }
}

/// A `fiber_paths` pattern the `regex` crate cannot take is a
/// configuration mistake, reported before anything is served.
/// Metrics, the access log (its file opened now, so a path that cannot be
/// written fails the boot) and request ids, as the options ask.
fn observer(opts: &EngineOptions) -> Result<crate::observe::Observer, BindError> {
    use crate::observe::access_log::{AccessLog, Destination};
    use crate::observe::log_format::Format;
    let format = match opts.access_log.as_deref() {
        Some(name) => Some(Format::parse(name).ok_or_else(|| BindError::Invalid {
            uri: "access_log".to_string(),
            reason: format!("must be common, combined or json, got {name:?}"),
        })?),
        None if opts.log_requests => Some(Format::Puma),
        None => None,
    };
    let access_log = match format {
        Some(format) => {
            let destination = opts
                .access_log_file
                .clone()
                .map_or(Destination::Stdout, Destination::File);
            Some(
                AccessLog::start(format, destination, opts.worker_index).map_err(|e| BindError::Invalid {
                    uri: "access_log_file".to_string(),
                    reason: e.to_string(),
                })?,
            )
        }
        None => None,
    };
    Ok(crate::observe::Observer {
        metrics: Default::default(),
        metrics_on: opts.metrics,
        access_log,
        request_ids: opts.request_id.then(Default::default),
        add_request_start: opts.request_start_header,
    })
}

fn config_error(e: PatternError) -> BindError {
    BindError::Invalid {
        uri: "fiber_paths".to_string(),
        reason: e.to_string(),
    }
}

fn conn_guard(shared: &Arc<Shared>) -> ConnGuard {
    Stats::bump(&shared.stats.connections_total);
    shared.stats.connections_active.fetch_add(1, Ordering::AcqRel);
    ConnGuard(shared.clone())
}

/// Out of descriptors or memory: pause accepting briefly instead of
/// spinning on an error that will repeat at once. Counted every time,
/// logged within a rate limit (see `accept_log`).
async fn accept_failed(err: std::io::Error, failures: &mut AcceptFailures, shared: &Shared) {
    Stats::bump(&shared.stats.accept_errors);
    if let Some(line) = failures.failed(&err, std::time::Instant::now()) {
        log::error(&line);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn accepted_ok(failures: &mut AcceptFailures) {
    if let Some(line) = failures.succeeded() {
        log::warn(&line);
    }
}

/// What a listener speaks; decided once per listener, so a plain HTTP/1
/// connection costs what it did before TLS and HTTP/2 existed.
#[derive(Clone)]
enum Protocol {
    Http1,
    /// HTTP/1 or, by prior knowledge, cleartext HTTP/2.
    H2c,
    /// TLS, then HTTP/2 or HTTP/1.1 as ALPN decides.
    Tls(Arc<TlsListener>),
}

/// A listener's protocol, and whether a PROXY header comes first.
struct Route {
    protocol: Protocol,
    proxy: Option<Arc<ProxyBind>>,
}

/// A bind with `proxy_protocol`: the version expected, and its log limit.
struct ProxyBind {
    version: ProxyVersion,
    refusals: ProxyRefusals,
}

fn dispatch<T: ClientIo>(io: T, conn: Arc<ConnInfo>, route: &Route, shared: &Arc<Shared>) {
    if let Some(proxy) = &route.proxy {
        return spawn_proxied(io, conn, route.protocol.clone(), proxy.clone(), shared);
    }
    match &route.protocol {
        Protocol::Http1 => spawn_connection(io, conn, shared, BytesMut::with_capacity(READ_CHUNK)),
        Protocol::H2c => spawn_h2c(io, conn, shared),
        Protocol::Tls(tls) => spawn_tls(io, conn, tls.config(), shared),
    }
}

/// A connection on a PROXY-protocol bind: the header is read first in the
/// connection's task (bounded by first_data_timeout), its client becomes
/// the peer, and the bytes read past it go on to the listener's protocol
/// (for TLS, replayed into the handshake). Without a valid header of the
/// bind's version the connection is closed with nothing written: the
/// peer may be the balancer, to which a reply would be the client's.
fn spawn_proxied<T: ClientIo>(
    mut io: T,
    conn: Arc<ConnInfo>,
    protocol: Protocol,
    proxy: Arc<ProxyBind>,
    shared: &Arc<Shared>,
) {
    if shared.stats.connections_active.load(Ordering::Acquire) >= shared.max_connections {
        return match protocol {
            Protocol::Tls(_) => {
                at_connection_limit(shared, &conn);
            }
            _ => shed_connection(io, &conn, shared),
        };
    }
    let guard = conn_guard(shared);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let read = tokio::time::timeout(shared.opts.first_data_timeout, read_header(&mut io, proxy.version)).await;
        let (source, buf) = match read.unwrap_or(Err(ProxyError::TimedOut)) {
            Ok(header) => header,
            Err(e) => {
                Stats::bump(&shared.stats.proxy_refused);
                if let Some(line) = proxy.refusals.refused(&conn.peer_addr, &e, std::time::Instant::now()) {
                    log::warn(&line);
                }
                return;
            }
        };
        let conn = match source {
            ProxySource::Client(addr) => Arc::new(ConnInfo {
                peer_addr: addr.ip().to_string(),
                listener: conn.listener.clone(),
            }),
            ProxySource::KeepPeer => conn,
        };
        match protocol {
            Protocol::Http1 => serve(io, conn, shared, buf).await,
            Protocol::H2c => serve_h2c(io, conn, shared, buf).await,
            Protocol::Tls(tls) => serve_tls(Rewind::new(buf.freeze(), io), conn, tls.config(), shared).await,
        }
    });
}

async fn accept_tcp(
    listener: Acceptor<std::net::TcpListener>,
    info: Arc<ListenerInfo>,
    route: Route,
    shared: Arc<Shared>,
) {
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let mut failures = AcceptFailures::default();
    while !shared.is_stopping() {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept(&shared.queue) => match accepted {
                Ok((stream, peer)) => {
                    accepted_ok(&mut failures);
                    if shared.opts.tcp_nodelay {
                        let _ = stream.set_nodelay(true);
                    }
                    let conn = Arc::new(ConnInfo { peer_addr: peer.ip().to_string(), listener: info.clone() });
                    dispatch(stream, conn, &route, &shared);
                }
                Err(err) => accept_failed(err, &mut failures, &shared).await,
            }
        }
    }
}

/// `websocket_workers`, in a WebSocket worker: takes every connection the
/// HTTP workers hand over (`handoff.rs`) until the engine stops, and
/// serves each as an accepted one, the handed bytes as its first read.
async fn accept_handoffs(socket: OwnedFd, shared: Arc<Shared>) {
    let socket = match crate::sys::register_readable(std::os::unix::net::UnixDatagram::from(socket)) {
        Ok(socket) => socket,
        Err(e) => return log::error(&format!("WebSocket hand-offs cannot be received: {e}")),
    };
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let mut buf = vec![0u8; crate::handoff::MAX_PAYLOAD];
    while !shared.is_stopping() {
        let mut ready = tokio::select! {
            biased;
            _ = &mut stop => break,
            ready = socket.readable() => match ready {
                Ok(ready) => ready,
                Err(e) => return log::error(&format!("WebSocket hand-offs stopped: {e}")),
            },
        };
        // Everything queued, then back to waiting.
        loop {
            match crate::handoff::receive(socket.get_ref().as_fd(), &mut buf) {
                Ok((handed, client)) => {
                    Stats::bump(&shared.stats.handoffs_received);
                    let (conn, buf) = handed.into_parts(shared.opts.trust_forwarded_proto, &shared.opts.remote_address);
                    if let Err(e) = serve_handed(client, conn, buf, &shared) {
                        log::warn(&format!("a handed-over connection could not be served: {e}"));
                    }
                }
                Err(HandoffError::Socket(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    break;
                }
                Err(e) => {
                    Stats::bump(&shared.stats.handoffs_refused);
                    log::warn(&format!("WebSocket hand-off dropped: {e}"));
                }
            }
        }
    }
}

/// A handed-over socket is TCP, or UNIX from a `unix://` bind.
fn serve_handed(client: OwnedFd, conn: Arc<ConnInfo>, buf: BytesMut, shared: &Arc<Shared>) -> std::io::Result<()> {
    if socket2::SockRef::from(&client).domain()? == socket2::Domain::UNIX {
        let std = std::os::unix::net::UnixStream::from(client);
        std.set_nonblocking(true)?;
        spawn_connection(tokio::net::UnixStream::from_std(std)?, conn, shared, buf);
    } else {
        let std = std::net::TcpStream::from(client);
        std.set_nonblocking(true)?;
        spawn_connection(tokio::net::TcpStream::from_std(std)?, conn, shared, buf);
    }
    Ok(())
}

async fn accept_unix(
    listener: Acceptor<std::os::unix::net::UnixListener>,
    path: PathBuf,
    info: Arc<ListenerInfo>,
    route: Route,
    shared: Arc<Shared>,
) {
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let mut failures = AcceptFailures::default();
    while !shared.is_stopping() {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept(&shared.queue) => match accepted {
                Ok(stream) => {
                    accepted_ok(&mut failures);
                    // A UNIX peer has no address; Puma reports loopback too.
                    let conn = Arc::new(ConnInfo { peer_addr: "127.0.0.1".into(), listener: info.clone() });
                    dispatch(stream, conn, &route, &shared);
                }
                Err(err) => accept_failed(err, &mut failures, &shared).await,
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(path);
}

fn at_connection_limit(shared: &Shared, conn: &ConnInfo) -> bool {
    if shared.stats.connections_active.load(Ordering::Acquire) < shared.max_connections {
        return false;
    }
    shared.stats.shed(ShedReason::Connections);
    log::warn(&format!("503 connection_limit from {}", conn.peer_addr));
    true
}

/// The handshake runs in the connection's own task (bounded by
/// first_data_timeout), so a slow client never holds up the accept loop.
/// Over the connection limit a TLS client is closed before the handshake:
/// a plaintext 503 would mean nothing to it.
fn spawn_tls<T>(io: T, conn: Arc<ConnInfo>, config: Arc<rustls::ServerConfig>, shared: &Arc<Shared>)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if at_connection_limit(shared, &conn) {
        return;
    }
    let guard = conn_guard(shared);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        serve_tls(io, conn, config, shared).await;
    });
}

async fn serve_tls<T>(io: T, conn: Arc<ConnInfo>, config: Arc<rustls::ServerConfig>, shared: Arc<Shared>)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(shared.opts.first_data_timeout, acceptor.accept(io)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            Stats::bump(&shared.stats.rejected_total);
            if shared.opts.log_requests {
                log::warn(&format!("{} TLS handshake failed: {e}", conn.peer_addr));
            }
            return;
        }
        Err(_) => {
            Stats::bump(&shared.stats.read_timeouts);
            return;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        crate::h2::connection::serve_h2(stream, conn, shared).await;
    } else {
        serve(stream, conn, shared, BytesMut::with_capacity(READ_CHUNK)).await;
    }
}

/// Reads until the first bytes are either the HTTP/2 preface or something
/// else (then HTTP/1, with the bytes read so far handed on).
fn spawn_h2c<T: ClientIo>(io: T, conn: Arc<ConnInfo>, shared: &Arc<Shared>) {
    if shared.stats.connections_active.load(Ordering::Acquire) >= shared.max_connections {
        // Answered as on a plain bind: most clients here speak HTTP/1.
        return spawn_connection(io, conn, shared, BytesMut::with_capacity(READ_CHUNK));
    }
    let guard = conn_guard(shared);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        serve_h2c(io, conn, shared, BytesMut::with_capacity(READ_CHUNK)).await;
    });
}

/// `buf`: bytes already read (after a PROXY header), looked at first.
async fn serve_h2c<T: ClientIo>(mut io: T, conn: Arc<ConnInfo>, shared: Arc<Shared>, mut buf: BytesMut) {
    let preface = crate::h2::connection::PREFACE;
    while buf.len() < preface.len() && preface.starts_with(&buf) {
        match tokio::time::timeout(shared.opts.first_data_timeout, io.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
    if buf.starts_with(preface) {
        let io = Rewind::new(buf.freeze(), io);
        crate::h2::connection::serve_h2(io, conn, shared).await;
    } else {
        serve(io, conn, shared, buf).await;
    }
}

/// `buf`: bytes already read for it (a connection handed over by another
/// worker, `handoff.rs`), looked at first.
pub(crate) fn spawn_connection<T: ClientIo>(io: T, conn: Arc<ConnInfo>, shared: &Arc<Shared>, buf: BytesMut) {
    if shared.stats.connections_active.load(Ordering::Acquire) >= shared.max_connections {
        return shed_connection(io, &conn, shared);
    }
    let guard = conn_guard(shared);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        serve(io, conn, shared, buf).await;
    });
}

/// Over `max_connections`: accept and answer rather than leave the client
/// in the backlog with no idea why: it learns at once to retry elsewhere.
fn shed_connection<T: ClientIo>(mut io: T, conn: &ConnInfo, shared: &Arc<Shared>) {
    shared.stats.shed(ShedReason::Connections);
    log::warn(&format!("503 connection_limit from {}", conn.peer_addr));
    let bytes = unavailable_response(
        ShedReason::Connections,
        false,
        shared.opts.retry_after,
        false,
        Version::Http11,
    );
    let write_timeout = shared.opts.body_timeout;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(write_timeout, io.write_all(&bytes)).await;
        let _ = io.shutdown().await;
    });
}
