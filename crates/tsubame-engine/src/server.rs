//! The engine as a whole: listeners bound at boot, a tokio runtime on its
//! own threads started later, accept loops, and a graceful stop.

use crate::bind::{BindSpec, Bound, Listener};
use crate::connection::{serve, ClientIo};
use crate::error::BindError;
use crate::job::{ConnInfo, ListenerInfo};
use crate::log;
use crate::options::EngineOptions;
use crate::parse::Limits;
use crate::queue::JobQueue;
use crate::stats::{Stats, StatsSnapshot};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

pub(crate) struct Shared {
    pub opts: EngineOptions,
    pub limits: Limits,
    pub queue: Arc<JobQueue>,
    pub stats: Stats,
    stopping: AtomicBool,
    pub stop_notify: Notify,
    /// Signalled whenever a connection closes while stopping.
    conn_closed: Notify,
    /// Arms the nudger (see `queue.rs`).
    pub nudger: Notify,
}

impl Shared {
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

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
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    lifecycle: Mutex<Lifecycle>,
    stopped: Condvar,
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
        let mut listeners = Vec::new();
        for uri in &opts.binds {
            listeners.extend(BindSpec::parse(uri)?.bind(opts.backlog)?);
        }
        let addresses = listeners.iter().map(|b| b.address.clone()).collect();
        let limits = Limits {
            max_uri_size: opts.max_uri_size,
            max_header_size: opts.max_header_size,
            max_headers: opts.max_headers,
        };
        Ok(Engine {
            shared: Arc::new(Shared {
                opts,
                limits,
                queue: Arc::new(JobQueue::new()),
                stats: Stats::default(),
                stopping: AtomicBool::new(false),
                stop_notify: Notify::new(),
                conn_closed: Notify::new(),
                nudger: Notify::new(),
            }),
            listeners: Mutex::new(listeners),
            addresses,
            runtime: Mutex::new(None),
            lifecycle: Mutex::new(Lifecycle::default()),
            stopped: Condvar::new(),
        })
    }

    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    pub fn queue(&self) -> &Arc<JobQueue> {
        &self.shared.queue
    }

    pub fn options(&self) -> &EngineOptions {
        &self.shared.opts
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot(self.shared.queue.len())
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
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.shared.opts.io_threads.max(1))
            .thread_name("tsubame-io")
            .on_thread_start(block_signals)
            .enable_all()
            .build()?;
        let listeners = std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|e| e.into_inner()));
        for bound in listeners {
            let info = Arc::new(ListenerInfo {
                server_name: bound.server_name,
                server_port: bound.server_port,
                url_scheme: "http",
            });
            let shared = self.shared.clone();
            match bound.listener {
                Listener::Tcp(std) => {
                    let _guard = runtime.enter();
                    let listener = tokio::net::TcpListener::from_std(std)?;
                    runtime.spawn(accept_tcp(listener, info, shared));
                }
                Listener::Unix(std, path) => {
                    let _guard = runtime.enter();
                    let listener = tokio::net::UnixListener::from_std(std)?;
                    runtime.spawn(accept_unix(listener, path, info, shared));
                }
            }
        }
        let engine = self.clone();
        runtime.spawn(async move { engine.supervise_stop().await });
        runtime.spawn(nudge_queue(self.shared.clone()));
        *self.runtime.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
        Ok(())
    }

    fn lock_lifecycle(&self) -> std::sync::MutexGuard<'_, Lifecycle> {
        self.lifecycle.lock().unwrap_or_else(|e| e.into_inner())
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
                let queued = shared.queue.close_and_take().len();
                break StopOutcome::TimedOut {
                    connections: open,
                    queued,
                };
            }
        };
        shared.queue.close();
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

    fn shutdown_runtime(&self) {
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
    // SAFETY: sigfillset initialises the set it is given, and
    // pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// How often the nudger looks at a queue whose jobs wait for a thread that
/// is already running a request.
const NUDGE_INTERVAL: Duration = Duration::from_micros(500);

/// Wakes an idle application thread when queued jobs make no progress
/// (see `queue.rs`). Sleeps on `nudger` while there is nothing to watch.
async fn nudge_queue(shared: Arc<Shared>) {
    loop {
        shared.nudger.notified().await;
        let mut taken = shared.queue.taken();
        loop {
            tokio::time::sleep(NUDGE_INTERVAL).await;
            match shared.queue.nudge(taken) {
                Some(now) => taken = now,
                None => break,
            }
        }
    }
}

fn conn_guard(shared: &Arc<Shared>) -> ConnGuard {
    Stats::bump(&shared.stats.connections_total);
    shared.stats.connections_active.fetch_add(1, Ordering::AcqRel);
    ConnGuard(shared.clone())
}

/// Out of descriptors or memory: pause accepting briefly instead of
/// spinning on an error that will repeat at once.
async fn accept_failed(err: std::io::Error) {
    log::error(&format!("accept failed: {err}"));
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn accept_tcp(listener: tokio::net::TcpListener, info: Arc<ListenerInfo>, shared: Arc<Shared>) {
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    while !shared.is_stopping() {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if shared.opts.tcp_nodelay {
                        let _ = stream.set_nodelay(true);
                    }
                    let conn = Arc::new(ConnInfo { peer_addr: peer.ip().to_string(), listener: info.clone() });
                    spawn_connection(stream, conn, &shared);
                }
                Err(err) => accept_failed(err).await,
            }
        }
    }
}

async fn accept_unix(listener: tokio::net::UnixListener, path: PathBuf, info: Arc<ListenerInfo>, shared: Arc<Shared>) {
    let stop = shared.stop_notify.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    while !shared.is_stopping() {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // A UNIX peer has no address; Puma reports loopback too.
                    let conn = Arc::new(ConnInfo { peer_addr: "127.0.0.1".into(), listener: info.clone() });
                    spawn_connection(stream, conn, &shared);
                }
                Err(err) => accept_failed(err).await,
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(path);
}

fn spawn_connection<T: ClientIo>(io: T, conn: Arc<ConnInfo>, shared: &Arc<Shared>) {
    let guard = conn_guard(shared);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _guard = guard;
        serve(io, conn, shared).await;
    });
}
