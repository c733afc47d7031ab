//! The hand-off between connection tasks and application threads.
//!
//! A plain mutex and condvar: pushes come from the I/O threads, pops from
//! Ruby threads that have released the GVL. A popper first tries without
//! blocking (while it still holds the GVL), so a busy thread keeps taking
//! work with no sleep, wake-up or GVL hand-off per request.
//!
//! Waking an idle thread while another is running Ruby code mostly buys a
//! futex wake and a GVL hand-off: the woken thread cannot run until the GVL
//! is free, and by then the running thread has usually taken the job
//! itself. So a push wakes a waiter at once only when no thread is running
//! a request or woken to run one; otherwise the engine's queue watcher
//! (server.rs `watch_queue`) looks again every `WATCH_INTERVAL` while jobs
//! are queued, and wakes a waiter when the running threads are off the CPU
//! (`Crowd::Waiting`: in I/O, say, where an idle thread is worth its
//! wake-up), not when they are busy on it (`Crowd::Computing`: a GC or a
//! long computation holds the GVL, and a woken thread would only wait for
//! it). A thread once busy stays busy while jobs are queued, so threads
//! woken for nothing would each take a share of the GVL hand-offs from
//! then on: a CPU-bound Rails action at `-c20` cost 20% more CPU with five
//! busy threads than with one.

use crate::dispatch::job::Job;
use crate::histogram::Histogram;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The jobs of one pool and its counts: what the thread pool's queue and
/// the fiber queue (`fiber_queue.rs`) both keep, with the rules for taking,
/// expiring and draining them in one place.
#[derive(Default)]
pub(crate) struct Backlog {
    pub jobs: VecDeque<Job>,
    /// Jobs taken and not yet finished.
    pub running: usize,
    /// Jobs taken so far, so the nudger can tell whether a pool progresses.
    pub taken: u64,
    pub closed: bool,
}

impl Backlog {
    /// Pops the next job to run, marking it taken: jobs whose connection
    /// gave up on them (a request deadline that passed while queued) are
    /// dropped.
    /// `now`: a clock read the caller already made (a thread that just
    /// finished a request timed its service with it), or None to read one.
    pub fn take_live(&mut self, wait_times: &Histogram, now: Option<std::time::Instant>) -> Option<Job> {
        while let Some(mut job) = self.jobs.pop_front() {
            if job.state.take() {
                self.running += 1;
                self.taken += 1;
                // One clock read for the wait histogram and the job's
                // own record (metrics, access log).
                let now = now.unwrap_or_else(std::time::Instant::now);
                let waited = now.saturating_duration_since(job.queued_at);
                wait_times.record(waited);
                job.state
                    .mark_taken(now.saturating_duration_since(job.received_at), waited);
                job.taken_at = Some(now);
                return Some(job);
            }
        }
        None
    }

    /// Removes the jobs that have waited longer than `timeout` (they are at
    /// the front: the queue is FIFO) so the engine can answer them 503.
    pub fn expire(&mut self, timeout: std::time::Duration) -> Vec<Job> {
        let mut expired = Vec::new();
        while self.jobs.front().is_some_and(|job| job.queued_at.elapsed() >= timeout) {
            if let Some(job) = self.jobs.pop_front() {
                if job.state.abandon() {
                    expired.push(job);
                }
            }
        }
        expired
    }

    /// How long the job at `position` (0 is the oldest) has waited, if that
    /// many are queued. FIFO order makes it a sustained measure: when the
    /// job at position N has waited D, more than N jobs have been waiting
    /// at every moment of D, since every job ahead of it is still here.
    pub fn waited(&self, position: usize) -> Option<std::time::Duration> {
        self.jobs.get(position).map(|job| job.queued_at.elapsed())
    }

    /// Closes and takes every queued job, for a stop that ran out of time.
    pub fn close_and_drain(&mut self) -> Vec<Job> {
        self.closed = true;
        self.jobs.drain(..).collect()
    }
}

/// One thread asleep in `pop_wait`, on a condvar of its own so that it can
/// be woken alone. Its fields are read and written under the queue's lock.
#[derive(Default)]
struct Sleeper {
    ready: Condvar,
    /// Taken off the stack by a wake-up meant for it alone: it is spoken
    /// for (a push counted on it for a job).
    called: AtomicBool,
}

#[derive(Default)]
struct State {
    backlog: Backlog,
    /// Threads asleep in `pop_wait` and not yet woken, the last to sleep
    /// on top: it is the one woken next.
    sleepers: Vec<Arc<Sleeper>>,
    /// Threads woken alone and not yet awake: each will take a job, so a
    /// push counts them as running.
    pending: usize,
    /// A thread is spinning in `pop_wait` before it sleeps: it will see a
    /// job pushed meanwhile, so the push need not wake anyone.
    spinning: bool,
    /// Inline mode: the idle Ruby thread driving the runtime until a job
    /// comes (`try_pop_or_register`); a push wakes it first.
    driver: Option<std::task::Waker>,
}

/// How the threads running jobs spent the watcher's last interval, as far
/// as the process's CPU clock tells (server.rs `watch_queue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crowd {
    /// Mostly off the CPU (waiting for I/O, a lock, a sleep): another
    /// thread could run meanwhile.
    Waiting,
    /// On the CPU, and not for long enough to be unfair to the jobs that
    /// wait: another thread would wait for the GVL.
    Computing,
}

/// What `push` did about waking an application thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// An idle thread was woken for it.
    Done,
    /// No thread was woken: the queue watcher must look after the job
    /// (wake a thread if none takes it, or time it out).
    NudgeLater,
}

#[derive(Default)]
pub struct JobQueue {
    state: Mutex<State>,
    /// Jobs queued or running, readable without the lock: the I/O thread
    /// looks at it before it parks (see `server.rs` `spin_before_park`).
    outstanding: AtomicUsize,
    /// Jobs queued, likewise: what a spinning thread watches.
    queued: AtomicUsize,
    /// How long the app takes over a request, a moving average in
    /// nanoseconds: an I/O thread waits awake for a reply only when it is
    /// likely to come within the spin.
    service_ns: AtomicU64,
    /// The queue watcher's last verdict on the running threads: waiting
    /// off the CPU (`Crowd::Waiting`).
    crowd_waiting: AtomicBool,
    max_len: Option<usize>,
    /// How long an application thread with no job stays awake before it
    /// sleeps on the condvar (`handoff_spin`, see `pop_wait`).
    spin: std::time::Duration,
    wait_times: Histogram,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The server is stopping.
    Closed,
    /// `max_queue` requests already wait.
    Full,
}

#[derive(Debug)]
pub enum Pop {
    Job(Box<Job>),
    /// Empty and closed: the server is stopping and nothing more will come.
    Closed,
    /// The waiter's interrupt flag was raised (Ruby wants the thread back).
    Interrupted,
    /// Only from `try_pop`: nothing queued right now.
    Empty,
}

impl JobQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limit(max_len: Option<usize>) -> Self {
        JobQueue {
            max_len,
            ..Self::default()
        }
    }

    /// `max_len` as `with_limit`; `spin` is how long a thread that finds
    /// the queue empty stays awake for the next job before it sleeps.
    pub fn with_spin(max_len: Option<usize>, spin: std::time::Duration) -> Self {
        JobQueue {
            max_len,
            spin,
            ..Self::default()
        }
    }

    /// How long taken jobs waited in the queue.
    pub fn wait_times(&self) -> &Histogram {
        &self.wait_times
    }

    fn pop_live(&self, state: &mut State, now: Option<std::time::Instant>) -> Option<Job> {
        let job = state.backlog.take_live(&self.wait_times, now);
        self.count_outstanding(state);
        job
    }

    fn count_outstanding(&self, state: &State) {
        let queued = state.backlog.jobs.len();
        self.queued.store(queued, Ordering::Relaxed);
        self.outstanding
            .store(queued + state.backlog.running, Ordering::Relaxed);
    }

    /// Whether requests are queued for or running in the app: a reply may
    /// be moments away.
    pub fn app_busy(&self) -> bool {
        self.outstanding() > 0
    }

    /// An application thread ran a job for `elapsed` (from taking it to
    /// asking for the next): folded into the moving average, 1/8 each.
    pub fn record_service(&self, elapsed: std::time::Duration) {
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let old = self.service_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + sample / 8;
        self.service_ns.store(new, Ordering::Relaxed);
    }

    /// The moving average of `record_service`.
    pub fn typical_service(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.service_ns.load(Ordering::Relaxed))
    }

    /// Jobs queued or running.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Removes the jobs that have waited longer than `timeout`, so the
    /// engine can answer them 503.
    pub fn expire(&self, timeout: std::time::Duration) -> Vec<Job> {
        let mut state = self.lock();
        let expired = state.backlog.expire(timeout);
        self.count_outstanding(&state);
        expired
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave `State` half-updated
        // (every mutation is a single VecDeque call), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses (dropping the job) once the queue is closed.
    pub fn push(&self, job: Job) -> Result<Pushed, PushError> {
        let mut state = self.lock();
        if state.backlog.closed {
            return Err(PushError::Closed);
        }
        if self.max_len.is_some_and(|max| state.backlog.jobs.len() >= max) {
            return Err(PushError::Full);
        }
        state.backlog.jobs.push_back(job);
        self.count_outstanding(&state);
        if let Some(driver) = state.driver.take() {
            drop(state);
            driver.wake();
            return Ok(Pushed::Done);
        }
        // A spinning thread takes one job: the first one queued.
        if state.spinning && state.backlog.jobs.len() == 1 {
            return Ok(Pushed::Done);
        }
        if state.sleepers.is_empty()
            || (state.backlog.running > 0 && !self.crowd_waiting.load(Ordering::Relaxed))
            || state.pending > 0
            || state.spinning
        {
            // Either nobody can take it yet, or a running (or just woken,
            // or spinning) thread probably will: the watcher expires the
            // job or wakes a thread for it if not (a second job pushed
            // during a spin would otherwise wait for the spinner's request
            // to finish). A burst of requests into an idle server so wakes
            // one thread, not one per request. Running threads that the
            // watcher last saw waiting off the CPU will not take it soon:
            // then a sleeper is woken at once.
            return Ok(Pushed::NudgeLater);
        }
        Self::wake_one(state);
        Ok(Pushed::Done)
    }

    /// Wakes a waiter if jobs are queued and the running threads are
    /// `Crowd::Waiting`. Returns how many jobs were taken so far (the
    /// watcher's measure of progress), or `None` once the queue is empty
    /// (nothing left to watch).
    pub fn nudge(&self, crowd: Crowd) -> Option<u64> {
        let state = self.lock();
        if state.backlog.jobs.is_empty() {
            return None;
        }
        let taken = state.backlog.taken;
        // Kept for `push`, which wakes a thread at once while the running
        // ones wait.
        self.crowd_waiting.store(crowd == Crowd::Waiting, Ordering::Relaxed);
        // A thread woken before and not yet running cannot have shown
        // what it does: wait for it.
        if crowd == Crowd::Waiting && state.pending == 0 {
            Self::wake_one(state);
        }
        Some(taken)
    }

    pub fn taken(&self) -> u64 {
        self.lock().backlog.taken
    }

    /// An application thread finished the job it took.
    pub fn finished(&self) {
        let mut state = self.lock();
        state.backlog.running = state.backlog.running.saturating_sub(1);
        self.count_outstanding(&state);
    }

    /// Returns a job taken by a thread that could not run it, ahead of
    /// the rest, so it is not lost and does not lose its place.
    pub fn push_front(&self, job: Job) {
        let mut state = self.lock();
        state.backlog.running = state.backlog.running.saturating_sub(1);
        state.backlog.jobs.push_front(job);
        self.count_outstanding(&state);
        Self::wake_one(state);
    }

    /// Wakes the thread that went to sleep last, if any sleeps, and
    /// releases `state`: the wake-up's system call is made without the lock.
    fn wake_one(mut state: MutexGuard<'_, State>) {
        let Some(sleeper) = state.sleepers.pop() else {
            return;
        };
        sleeper.called.store(true, Ordering::Relaxed);
        state.pending += 1;
        drop(state);
        sleeper.ready.notify_one();
    }

    pub fn try_pop(&self) -> Pop {
        let mut state = self.lock();
        self.try_pop_locked(&mut state, None)
    }

    /// `finished` and then `try_pop`, under one lock: what a thread that
    /// ends a request and looks for the next one does every time. `now` is
    /// when the request ended, which also times the next one's take.
    pub fn finished_and_try_pop(&self, now: std::time::Instant) -> Pop {
        let mut state = self.lock();
        state.backlog.running = state.backlog.running.saturating_sub(1);
        self.try_pop_locked(&mut state, Some(now))
    }

    fn try_pop_locked(&self, state: &mut State, now: Option<std::time::Instant>) -> Pop {
        match self.pop_live(state, now) {
            Some(job) => Pop::Job(Box::new(job)),
            None if state.backlog.closed => Pop::Closed,
            None => Pop::Empty,
        }
    }

    /// Blocks until a job arrives, the queue closes, or `interrupted` is set
    /// and `wake_all` called.
    pub fn pop_wait(&self, interrupted: &AtomicBool) -> Pop {
        let mut state = self.lock();
        let mut spun = false;
        loop {
            if let Some(job) = self.pop_live(&mut state, None) {
                return Pop::Job(Box::new(job));
            }
            if state.backlog.closed {
                return Pop::Closed;
            }
            if interrupted.load(Ordering::Acquire) {
                return Pop::Interrupted;
            }
            if !spun && !state.spinning && !self.spin.is_zero() && state.backlog.running == 0 {
                // One thread at a time stays awake a moment before it
                // sleeps: the next request often arrives within it, and
                // then costs no futex wake-up and no context switch. Only
                // while no other thread runs a request: a running thread
                // takes the next job itself when it finishes (see `push`),
                // so a spinner beside it would burn a core for nothing.
                spun = true;
                state.spinning = true;
                drop(state);
                let limit = self.spin;
                let started = std::time::Instant::now();
                let mut n = 0u32;
                // Yielding rather than busy-waiting: when the I/O thread
                // (or the load generator) shares this core, the spin hands
                // it the core instead of taking it; measured at -c50 on two
                // cores, a busy spin cost 15% of throughput, a yielding one
                // gained 10% over not spinning at all.
                while self.queued.load(Ordering::Relaxed) == 0 && !interrupted.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                    n += 1;
                    if n.is_multiple_of(4) && started.elapsed() >= limit {
                        break;
                    }
                }
                state = self.lock();
                state.spinning = false;
                continue;
            }
            // A new one for each sleep, not one per thread: a condvar must
            // not be used with more than one mutex over its life (std's
            // `Condvar::wait` may panic otherwise), and a thread may wait on
            // another queue later. Next to the sleep, the allocation is
            // nothing.
            let me = Arc::new(Sleeper::default());
            state.sleepers.push(me.clone());
            state = me.ready.wait(state).unwrap_or_else(|e| e.into_inner());
            if me.called.load(Ordering::Relaxed) {
                state.pending = state.pending.saturating_sub(1);
            } else {
                // Woken with everyone (`wake_everyone` emptied the stack),
                // or spuriously: then it is still on the stack.
                state.sleepers.retain(|s| !Arc::ptr_eq(s, &me));
            }
        }
    }

    /// Wakes every waiter so each can look at its own interrupt flag.
    /// Taking the lock first means a waiter between its flag check and its
    /// wait cannot miss the wake-up.
    pub fn wake_all(&self) {
        self.wake_everyone(self.lock());
    }

    /// Releases `state`, then wakes every condvar waiter and the inline
    /// driver (`try_pop_or_register`), each to look at the queue again.
    fn wake_everyone(&self, mut state: MutexGuard<'_, State>) {
        let driver = state.driver.take();
        let sleepers = std::mem::take(&mut state.sleepers);
        drop(state);
        for sleeper in sleepers {
            sleeper.ready.notify_one();
        }
        if let Some(driver) = driver {
            driver.wake();
        }
    }

    /// Inline mode: a job if one is queued (or the queue's end, or the
    /// interrupt), else registers `waker` to be woken by the next push.
    /// Checked and registered under the lock, so no wake is lost.
    pub fn try_pop_or_register(&self, waker: &std::task::Waker, interrupted: &AtomicBool) -> Option<Pop> {
        let mut state = self.lock();
        match self.try_pop_locked(&mut state, None) {
            Pop::Empty if interrupted.load(Ordering::Acquire) => Some(Pop::Interrupted),
            Pop::Empty => {
                state.driver = Some(waker.clone());
                None
            }
            other => Some(other),
        }
    }

    /// Inline mode: the driver polls the queue while it spins, as a
    /// `pop_wait` spinner does, and counts as idle (`waiting`) meanwhile.
    pub fn set_driver_spinning(&self, spinning: bool) {
        self.lock().spinning = spinning;
    }

    /// An idle Ruby thread is driving the runtime, waiting for a job.
    pub fn driver_parked(&self) -> bool {
        self.lock().driver.is_some()
    }

    /// The driver left the runtime: a push must not count on its waker.
    pub fn clear_driver(&self) {
        self.lock().driver = None;
    }

    /// Queued jobs are still handed out; once they are gone, poppers get
    /// `Closed`.
    pub fn close(&self) {
        let mut state = self.lock();
        state.backlog.closed = true;
        self.wake_everyone(state);
    }

    /// Closes and takes every queued job, for a stop that ran out of time.
    pub fn close_and_take(&self) -> Vec<Job> {
        let mut state = self.lock();
        let jobs = state.backlog.close_and_drain();
        self.count_outstanding(&state);
        self.wake_everyone(state);
        jobs
    }

    pub fn len(&self) -> usize {
        self.lock().backlog.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Idle application threads free for a new job: asleep on the condvar
    /// and not already woken for a job pushed before, or the one spinning
    /// before it sleeps. A woken thread counts as busy even before it runs:
    /// on a loaded machine it may take a while to get a core, and a busy
    /// worker that counted it idle would take connections an idle worker
    /// should have (see `net/accept.rs`).
    pub fn waiting(&self) -> usize {
        let state = self.lock();
        state.sleepers.len() + usize::from(state.spinning) + usize::from(state.driver.is_some())
    }

    /// See `Backlog::waited`.
    pub fn waited(&self, position: usize) -> Option<std::time::Duration> {
        self.lock().backlog.waited(position)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dispatch::job::{ConnInfo, ListenerInfo};
    use crate::http1::parse::parse_head;
    use crate::message::body::Body;
    use crate::message::head::Limits;
    use std::sync::Arc;

    pub(crate) fn job() -> Job {
        let mut buf = bytes::BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..]);
        let limits = Limits {
            max_uri_size: 100,
            max_header_size: 1000,
            max_headers: 10,
            known_methods_only: true,
        };
        let head = parse_head(&mut buf, &limits).unwrap().unwrap();
        let listener = Arc::new(ListenerInfo {
            server_name: "a".into(),
            server_port: 1,
            url_scheme: "http",
            trust_forwarded_proto: false,
            remote_address: Default::default(),
        });
        Job {
            head,
            body: Body::Empty,
            conn: Arc::new(ConnInfo {
                peer_addr: "127.0.0.1".into(),
                listener,
            }),
            reply: Some(tokio::sync::oneshot::channel().0),
            received_at: std::time::Instant::now(),
            keep_alive: true,
            seq: 0,
            state: Arc::new(crate::dispatch::job::JobState::new(None)),
            queued_at: std::time::Instant::now(),
            taken_at: None,
        }
    }

    #[test]
    fn defers_wake_ups_while_a_thread_runs_and_nudges_only_while_it_waits() {
        let q = JobQueue::new();
        assert_eq!(q.push(job()).unwrap(), Pushed::NudgeLater, "no waiter: watched");
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        // One thread running, one waiting: a push must not wake at once.
        q.lock().sleepers.push(Arc::default());
        assert_eq!(q.push(job()).unwrap(), Pushed::NudgeLater);
        let before = q.taken();
        assert_eq!(q.nudge(Crowd::Computing), Some(before), "computing: keeps watching");
        assert_eq!(
            q.lock().sleepers.len(),
            1,
            "no thread woken while the running one computes"
        );
        assert_eq!(q.nudge(Crowd::Waiting), Some(before), "waiting: wakes, keeps watching");
        assert!(q.lock().sleepers.is_empty());
        q.lock().pending = 0; // the woken thread is awake
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert_eq!(q.nudge(Crowd::Waiting), None, "queue empty: stop watching");
        q.finished();
        q.finished();
        assert_eq!(
            q.push(job()).unwrap(),
            Pushed::NudgeLater,
            "the only waiter is already spoken for"
        );
        q.lock().sleepers.push(Arc::default()); // the nudged waiter went back to sleep
        assert_eq!(q.push(job()).unwrap(), Pushed::Done, "nobody running: woken at once");
    }

    #[test]
    fn a_spinning_thread_covers_one_job_and_the_watcher_the_next() {
        let q = JobQueue::new();
        {
            let mut state = q.lock();
            state.spinning = true;
            state.sleepers = (0..3).map(|_| Arc::default()).collect();
        }
        assert_eq!(q.push(job()).unwrap(), Pushed::Done, "the spinner takes it");
        assert_eq!(
            q.push(job()).unwrap(),
            Pushed::NudgeLater,
            "the spinner is on its way: the watcher decides about more"
        );
        assert_eq!(q.lock().sleepers.len(), 3, "nobody woken");
        q.lock().spinning = false;
        assert_eq!(
            q.push(job()).unwrap(),
            Pushed::Done,
            "with nobody running, a sleeper is woken"
        );
        assert_eq!(q.lock().sleepers.len(), 2);
    }

    #[test]
    fn while_the_running_threads_wait_a_push_wakes_a_sleeper_at_once() {
        let q = JobQueue::new();
        q.push(job()).unwrap();
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        q.lock().sleepers = (0..2).map(|_| Arc::default()).collect();
        q.push(job()).unwrap();
        assert_eq!(q.nudge(Crowd::Computing), Some(1), "computing: nobody woken");
        assert_eq!(q.push(job()).unwrap(), Pushed::NudgeLater, "left to the running thread");
        assert_eq!(q.nudge(Crowd::Waiting), Some(1));
        assert_eq!(q.lock().sleepers.len(), 1, "the watcher woke one");
        q.lock().pending = 0; // it is awake and took a job
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert_eq!(
            q.push(job()).unwrap(),
            Pushed::Done,
            "the running threads wait: woken at once"
        );
        assert!(q.lock().sleepers.is_empty());
    }

    #[test]
    fn a_burst_into_an_idle_pool_wakes_one_thread() {
        let q = JobQueue::new();
        q.lock().sleepers = (0..5).map(|_| Arc::default()).collect();
        assert_eq!(q.push(job()).unwrap(), Pushed::Done);
        for _ in 0..4 {
            assert_eq!(q.push(job()).unwrap(), Pushed::NudgeLater);
        }
        assert_eq!(q.lock().sleepers.len(), 4, "four still asleep");
        assert_eq!(q.waiting(), 4);
    }

    #[test]
    fn the_thread_that_slept_last_is_woken_first() {
        let q = Arc::new(JobQueue::new());
        let sleep = |name: &'static str| {
            let worker = q.clone();
            let before = q.waiting();
            let thread = std::thread::spawn(move || {
                let flag = AtomicBool::new(false);
                match worker.pop_wait(&flag) {
                    Pop::Job(_) => {
                        worker.finished();
                        name
                    }
                    _ => "",
                }
            });
            while q.waiting() == before {
                std::thread::yield_now();
            }
            thread
        };
        let first = sleep("first");
        let second = sleep("second");
        q.push(job()).unwrap();
        assert_eq!(second.join().unwrap(), "second", "the last to sleep takes the job");
        assert_eq!(q.waiting(), 1, "the other sleeps on");
        q.push(job()).unwrap();
        assert_eq!(first.join().unwrap(), "first");
    }

    #[test]
    fn closing_wakes_every_sleeper() {
        let q = Arc::new(JobQueue::new());
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || matches!(q.pop_wait(&AtomicBool::new(false)), Pop::Closed))
            })
            .collect();
        while q.waiting() < 3 {
            std::thread::yield_now();
        }
        q.close();
        for thread in threads {
            assert!(thread.join().unwrap(), "each sleeper sees the queue closed");
        }
    }

    #[test]
    fn finishing_and_taking_the_next_job_keeps_the_counts() {
        let q = JobQueue::new();
        q.push(job()).unwrap();
        q.push(job()).unwrap();
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert_eq!(q.outstanding(), 2, "one running, one queued");
        assert!(matches!(q.finished_and_try_pop(std::time::Instant::now()), Pop::Job(_)));
        assert_eq!(q.outstanding(), 1, "the first finished, the second running");
        assert!(matches!(q.finished_and_try_pop(std::time::Instant::now()), Pop::Empty));
        assert_eq!(q.outstanding(), 0);
        assert!(!q.app_busy());
        q.close();
        assert!(matches!(q.finished_and_try_pop(std::time::Instant::now()), Pop::Closed));
        assert_eq!(q.outstanding(), 0, "never below zero");
    }

    #[test]
    fn full_queue_refuses_and_expired_jobs_leave_from_the_front() {
        let q = JobQueue::with_limit(Some(2));
        q.push(job()).unwrap();
        q.push(job()).unwrap();
        assert_eq!(q.push(job()).unwrap_err(), PushError::Full);
        assert_eq!(q.expire(std::time::Duration::from_secs(60)).len(), 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let expired = q.expire(std::time::Duration::from_millis(10));
        assert_eq!(expired.len(), 2);
        assert!(matches!(q.try_pop(), Pop::Empty));
    }

    #[test]
    fn abandoned_jobs_are_skipped() {
        let q = JobQueue::new();
        let dead = job();
        assert!(dead.state.abandon());
        q.push(dead).unwrap();
        q.push(job()).unwrap();
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert!(matches!(q.try_pop(), Pop::Empty));
        assert_eq!(q.wait_times().count(), 1);
    }

    #[test]
    fn closed_queue_hands_out_what_it_has_then_reports_closed() {
        let q = JobQueue::new();
        q.push(job()).unwrap();
        q.close();
        assert!(q.push(job()).is_err());
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert!(matches!(q.try_pop(), Pop::Closed));
        let flag = AtomicBool::new(false);
        assert!(matches!(q.pop_wait(&flag), Pop::Closed));
    }
}
