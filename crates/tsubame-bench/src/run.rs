//! Running the load. Each client thread runs its own single-threaded tokio
//! runtime with its share of the connections, so nothing is shared on the
//! hot path but one atomic ticket counter (closed loop) or nothing at all
//! (open loop).
//!
//! Closed loop: each connection sends a request, waits for its response,
//! and sends the next. Open loop: request `g` of the run is due at
//! `start + g / rate`; a free connection takes the next due request, waits
//! for its time, and sends it. When every connection is busy, due requests
//! wait for one, and their latency still counts from when they were due,
//! so a stalled server shows its stall in the latencies (no coordinated
//! omission).

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{connect, open_blocking, Connection, Opened, Response};
use crate::error::{Error, Failure};
use crate::request::Prepared;
use crate::stats::{Recorder, Timeline, Totals, WindowSummary};
use crate::url::Address;

/// Everything a run needs, fixed before it starts.
#[derive(Debug)]
pub struct Plan {
    pub address: Address,
    pub requests: Vec<Prepared>,
    pub schedule: Vec<u32>,
    pub connections: usize,
    pub threads: usize,
    pub rate: Option<f64>,
    pub duration: Option<Duration>,
    pub limit: Option<u64>,
    pub timeout: Duration,
    pub keepalive: bool,
    /// Open every connection before the clock starts.
    pub preconnect: bool,
    pub progress: bool,
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    pub totals: Totals,
    /// From the start to the last response or error.
    pub elapsed: Duration,
    pub windows: Vec<WindowSummary>,
    pub window: Duration,
    /// Open loop: requests that were due but never sent because the run
    /// stopped first (the server fell too far behind).
    pub unsent: u64,
    pub interrupted: bool,
}

/// Time windows for the latency-over-time series: about 300 per run, at
/// least 100 ms.
pub fn window_for(plan: &Plan) -> Duration {
    let expected = plan.duration.or_else(|| {
        plan.rate
            .zip(plan.limit)
            .map(|(r, n)| Duration::from_secs_f64(n as f64 / r))
    });
    match expected {
        Some(d) => (d / 300).clamp(Duration::from_millis(100), Duration::from_secs(10)),
        None => Duration::from_millis(100),
    }
}

struct Shared {
    plan: Plan,
    start: Instant,
    deadline: Option<Instant>,
    /// Open loop: no due request is started after this.
    hard_stop: Option<Instant>,
    issued: AtomicU64,
    stop: Arc<AtomicBool>,
}

impl Shared {
    fn closed_ticket(&self) -> Option<(u64, Instant)> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            return None;
        }
        let ticket = self.issued.fetch_add(1, Ordering::Relaxed);
        if self.plan.limit.is_some_and(|l| ticket >= l) {
            return None;
        }
        Some((ticket, now))
    }

    /// The due time of request `ticket` at `rate`, or None if past the run's end.
    fn due(&self, ticket: u64, rate: f64) -> Option<Instant> {
        if self.plan.limit.is_some_and(|l| ticket >= l) {
            return None;
        }
        let due = self.start + Duration::from_secs_f64(ticket as f64 / rate);
        if self.deadline.is_some_and(|d| due >= d) {
            return None;
        }
        Some(due)
    }

    async fn open_ticket(&self, rate: f64, next: &Cell<u64>, thread: usize) -> Option<(u64, Instant)> {
        if self.stop.load(Ordering::Relaxed) || self.hard_stop.is_some_and(|h| Instant::now() >= h) {
            return None;
        }
        // This thread takes requests thread, thread + T, thread + 2T, ...
        let local = next.get();
        let ticket = local * self.plan.threads as u64 + thread as u64;
        let due = self.due(ticket, rate)?;
        next.set(local + 1);
        if Instant::now() >= due {
            // Late: the request waited for a free connection, and that
            // wait is part of its latency.
            return Some((ticket, due));
        }
        // Early: the connection waits for the due time. The timer may wake
        // it a little late (tokio's timer has millisecond resolution); that
        // delay is the client's, so the clock starts when it is sent.
        tokio::time::sleep_until(due.into()).await;
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        Some((ticket, Instant::now().max(due)))
    }

    /// Open loop: how many requests were due over the run.
    fn due_count(&self, rate: f64) -> u64 {
        let by_time = self.plan.duration.map(|d| (d.as_secs_f64() * rate).ceil() as u64);
        match (by_time, self.plan.limit) {
            (Some(t), Some(l)) => t.min(l),
            (Some(t), None) => t,
            (None, Some(l)) => l,
            (None, None) => 0,
        }
    }
}

/// Runs the plan; `stop` ends it early (Ctrl-C).
pub fn run(plan: Plan, stop: Arc<AtomicBool>) -> Result<Outcome, Error> {
    let mut opened = if plan.preconnect {
        preconnect(&plan)?
    } else {
        Vec::new()
    };
    let window = window_for(&plan);
    // A little head start so every thread is up when the clock starts.
    let start = Instant::now() + Duration::from_millis(20);
    let deadline = plan.duration.map(|d| start + d);
    let hard_stop = plan.rate.map(|rate| {
        let span = plan
            .duration
            .unwrap_or_else(|| Duration::from_secs_f64(plan.limit.unwrap_or(0) as f64 / rate));
        start + span + plan.timeout
    });
    let threads = plan.threads.max(1);
    let progress = plan.progress;
    let shared = Arc::new(Shared {
        plan,
        start,
        deadline,
        hard_stop,
        issued: AtomicU64::new(0),
        stop,
    });

    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::with_capacity(threads);
    for thread in 0..threads {
        let connections = shared.plan.connections / threads + usize::from(thread < shared.plan.connections % threads);
        let shared = Arc::clone(&shared);
        let recorder = Recorder::new(thread, start, window, tx.clone());
        let mine: Vec<Opened> = opened.drain(..connections.min(opened.len())).collect();
        let handle = std::thread::Builder::new()
            .name(format!("bench-{thread}"))
            .spawn(move || client_thread(thread, connections, mine, shared, recorder))
            .map_err(|source| Error::File {
                path: "a client thread".into(),
                action: "start",
                source,
            })?;
        handles.push(handle);
    }
    drop(tx);

    let mut timeline = Timeline::new(threads, window);
    let mut progress = progress.then(|| Progress::new(start));
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(report) => timeline.add(report),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if let Some(p) = progress.as_mut() {
            p.maybe_print(&mut timeline);
        }
    }
    if let Some(p) = progress {
        p.clear();
    }

    let mut totals = Totals::new();
    for handle in handles {
        match handle.join() {
            Ok(Ok(t)) => totals.merge(&t),
            Ok(Err(source)) => {
                return Err(Error::File {
                    path: "the client runtime".into(),
                    action: "start",
                    source,
                })
            }
            Err(_) => return Err(Error::usage("a client thread panicked")),
        }
    }
    let interrupted = shared.stop.load(Ordering::Relaxed);
    let unsent = match shared.plan.rate {
        Some(rate) if !interrupted => shared.due_count(rate).saturating_sub(totals.sent),
        _ => 0,
    };
    let elapsed = totals
        .last_done
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(start));
    Ok(Outcome {
        totals,
        elapsed,
        windows: timeline.windows,
        window,
        unsent,
        interrupted,
    })
}

/// `--preconnect`: opens every connection, one after the other, before the
/// clock starts, so the run measures requests on open connections and not
/// a burst of TCP handshakes.
fn preconnect(plan: &Plan) -> Result<Vec<Opened>, Error> {
    (0..plan.connections)
        .map(|n| {
            open_blocking(&plan.address, plan.timeout).map_err(|e| {
                Error::usage(format!(
                    "--preconnect: connection {} of {} failed: {}",
                    n + 1,
                    plan.connections,
                    crate::error::io_message(&e).to_lowercase()
                ))
            })
        })
        .collect()
}

fn client_thread(
    thread: usize,
    connections: usize,
    mut opened: Vec<Opened>,
    shared: Arc<Shared>,
    recorder: Recorder,
) -> std::io::Result<Totals> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let recorder = Rc::new(RefCell::new(recorder));
    let next = Rc::new(Cell::new(0u64));
    local.block_on(&runtime, async {
        let mut tasks = Vec::with_capacity(connections);
        for _ in 0..connections {
            // A pre-opened connection that cannot join this runtime is
            // dropped; the task then connects as usual.
            let slot = opened.pop().and_then(|o| Connection::adopt(o).ok());
            let task = connection_task(
                slot,
                Arc::clone(&shared),
                Rc::clone(&recorder),
                Rc::clone(&next),
                thread,
            );
            tasks.push(tokio::task::spawn_local(task));
        }
        let ticker = tokio::task::spawn_local(ticker(shared.start, window_of(&shared), Rc::clone(&recorder)));
        for task in tasks {
            let _ = task.await;
        }
        ticker.abort();
    });
    drop(local);
    let recorder = Rc::try_unwrap(recorder)
        .map_err(|_| std::io::Error::other("recorder still shared at the end of the run"))?
        .into_inner();
    Ok(recorder.finish())
}

fn window_of(shared: &Shared) -> Duration {
    window_for(&shared.plan)
}

/// Closes windows while no response arrives (a stalled server).
async fn ticker(start: Instant, window: Duration, recorder: Rc<RefCell<Recorder>>) {
    let mut n = 1u32;
    loop {
        tokio::time::sleep_until((start + window * n).into()).await;
        recorder.borrow_mut().tick(Instant::now());
        n = n.saturating_add(1);
    }
}

async fn connection_task(
    mut slot: Option<Connection>,
    shared: Arc<Shared>,
    recorder: Rc<RefCell<Recorder>>,
    next: Rc<Cell<u64>>,
    thread: usize,
) {
    tokio::time::sleep_until(shared.start.into()).await;
    let plan = &shared.plan;
    loop {
        let ticket = match plan.rate {
            Some(rate) => shared.open_ticket(rate, &next, thread).await,
            None => shared.closed_ticket(),
        };
        let Some((ticket, due)) = ticket else { break };
        let index = plan.schedule[(ticket % plan.schedule.len() as u64) as usize] as usize;
        let request = &plan.requests[index];
        recorder.borrow_mut().sent(request.bytes.len());
        let result = tokio::time::timeout(plan.timeout, send(&mut slot, plan, request)).await;
        let now = Instant::now();
        let mut rec = recorder.borrow_mut();
        match result {
            Ok(Ok(response)) => rec.response(response.status, now.saturating_duration_since(due), response.bytes, now),
            Ok(Err(failure)) => rec.failure(failure, now),
            Err(_) => rec.failure(Failure::Timeout, now),
        }
    }
}

/// Sends one request on the kept connection or a new one. A failed
/// request is not retried, so every failure is counted (a server that
/// closes idle connections without `Connection: close` shows up as
/// "connection closed early").
async fn send(slot: &mut Option<Connection>, plan: &Plan, request: &Prepared) -> Result<Response, Failure> {
    let mut conn = match slot.take() {
        Some(conn) => conn,
        None => connect(&plan.address).await?,
    };
    let response = conn.exchange(&request.bytes, request.head).await?;
    if response.reusable && plan.keepalive {
        *slot = Some(conn);
    }
    Ok(response)
}

/// The live line on stderr: elapsed, rate over the last second, errors,
/// p99 of the last second.
struct Progress {
    start: Instant,
    last: Instant,
    last_count: u64,
    last_p99: Option<u64>,
    stderr: std::io::Stderr,
}

impl Progress {
    fn new(start: Instant) -> Self {
        Progress {
            start,
            last: start,
            last_count: 0,
            last_p99: None,
            stderr: std::io::stderr(),
        }
    }

    fn maybe_print(&mut self, timeline: &mut Timeline) {
        let now = Instant::now();
        if now < self.start || now.duration_since(self.last) < Duration::from_secs(1) {
            return;
        }
        let count = timeline.responses + timeline.errors;
        let rate = (count - self.last_count) as f64 / now.duration_since(self.last).as_secs_f64();
        if let Some(p99) = timeline.take_recent_p99() {
            self.last_p99 = Some(p99);
        }
        let p99 = self.last_p99.map_or("-".to_string(), crate::format::fmt_micros);
        let line = format!(
            "\r\x1b[2K{:>6.1}s  {} requests  {:.0} req/s  {} errors  p99 {}",
            now.duration_since(self.start).as_secs_f64(),
            count,
            rate,
            timeline.errors,
            p99
        );
        let _ = self.stderr.write_all(line.as_bytes());
        let _ = self.stderr.flush();
        self.last = now;
        self.last_count = count;
    }

    fn clear(mut self) {
        if self.last > self.start {
            let _ = self.stderr.write_all(b"\r\x1b[2K");
            let _ = self.stderr.flush();
        }
    }
}

/// Whether to show the progress line.
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}
