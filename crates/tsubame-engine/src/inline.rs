//! Inline mode: with one app thread, that thread also drives the
//! connections, as Iodine runs its app on its I/O thread, so a request
//! crosses no thread on its way in or out.
//!
//! The engine runs on one `current_thread` runtime that whichever thread
//! holds the baton drives (`Runtime::block_on`; tokio lets several threads
//! call it, one at a time does the work):
//! - the app thread, when it has no request, drives until one is queued
//!   (`drive_for_job`): it reads, parses and queues requests itself, and a
//!   push from a task it polls wakes it with no system call;
//! - the app thread, when it answers, holds the reply (`pass`) until the
//!   next drive, whoever drives, which sends every held reply from inside
//!   the runtime, so the connection tasks they wake are queued locally
//!   instead of waking another thread, and are written together (a burst
//!   of writes wakes the client once, not once per reply); a reply drives
//!   at once when the last drive was `DRIVE_EVERY` ago, so neither a slow
//!   app nor a queue that never empties holds replies back;
//! - the keeper thread (`tsubame-io`) drives when no app thread has for
//!   `TAKEOVER`, so health probes are answered, deadlines enforced, slow
//!   uploads read and streams written while the app thread is busy, and
//!   gives the baton back as soon as the app thread asks for it.
//!
//! The baton is taken by compare-and-swap before `block_on` and released
//! after it, so no thread ever waits inside tokio for the runtime's core.

use crate::dispatch::queue::Pop;
use crate::dispatch::reply::Reply;
use crate::shared::Shared;
use crate::stats::Stats;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

const FREE: u8 = 0;
const APP: u8 = 1;
const KEEPER: u8 = 2;
const CLOSED: u8 = 3;

/// How long the baton may lie free (the app thread busy in the app) before
/// the keeper drives: the bound on how late a probe, a deadline or another
/// connection's bytes are seen while the app thread runs a request. The
/// queue watcher's interval (server.rs), for the same reason.
pub const TAKEOVER: Duration = Duration::from_micros(500);

/// While the keeper keeps finding the app thread cycling (the baton held,
/// or free for less than `TAKEOVER`), it looks less often, up to every
/// `TAKEOVER << KEEPER_BACKOFF` (2 ms): at hello-world rates its wake-ups,
/// 1,700 a second on the other core, cost 3% of the process's CPU. Its
/// first takeover resets the interval.
const KEEPER_BACKOFF: u32 = 2;

/// A reply sent this long after the last drive drives at once rather than
/// waiting for the next one: the bound on how long a whole reply waits
/// when the queue stays full. (Hello at -c50: 100 µs, 200 µs and 1 ms
/// cost the same CPU per request; never driving before the queue empties
/// cost 5-8% more and had the highest p99.)
const DRIVE_EVERY: Duration = Duration::from_micros(100);

pub struct Inline {
    /// Taken out only by `shutdown`, after the baton is closed.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
    holder: AtomicU8,
    /// When the baton was last released, in nanoseconds since `epoch`.
    released_at: AtomicU64,
    /// When a drive (a turn that ran the ready tasks) last ended, likewise.
    driven_at: AtomicU64,
    epoch: Instant,
    /// The app thread asked the keeper to give the baton back.
    want: AtomicBool,
    want_notify: tokio::sync::Notify,
    keeper: OnceLock<std::thread::Thread>,
    /// The keeper sleeps with no timeout while the app thread waits for a
    /// request in the runtime; the app thread wakes it when it leaves.
    keeper_asleep: AtomicBool,
    /// `shutdown` has begun: the keeper takes the baton no more.
    closing: AtomicBool,
    shared: Arc<Shared>,
    spin: Duration,
    /// Replies the app thread answered while holding the baton, sent at the
    /// start of the next drive (`send_held`). Holding them costs a reply no
    /// entry into the runtime of its own (its lock, its context, tokio's
    /// clock reads around a turn): entering it for each reply cost 4% more
    /// CPU per hello-world request at -c50. Only the baton's holder touches
    /// them, and `shutdown` once nobody can hold it.
    held: Mutex<Vec<(tokio::sync::oneshot::Sender<Reply>, Reply)>>,
}

/// The baton, released when dropped (a panic in a task included).
/// `at`: the time of the release when the holder has just read the clock
/// (a reply's check, a drive's end), so the release reads it no second
/// time; a request costs a clock read for each event it timestamps, and
/// these were three of them.
struct Held<'a> {
    inline: &'a Inline,
    at: Option<u64>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let at = self.at.unwrap_or_else(|| self.inline.now_ns());
        self.inline.released_at.store(at, Ordering::Relaxed);
        // Only the holder changes `holder` while it is held (`shutdown`
        // swaps only FREE), so a plain store releases it.
        self.inline.holder.store(FREE, Ordering::Release);
    }
}

impl Inline {
    /// `spin`: how long an app thread out of work polls before it sleeps
    /// in `epoll_wait` (`handoff_spin`).
    pub(crate) fn new(runtime: tokio::runtime::Runtime, shared: Arc<Shared>, spin: Duration) -> Arc<Inline> {
        Arc::new(Inline {
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            holder: AtomicU8::new(FREE),
            released_at: AtomicU64::new(0),
            driven_at: AtomicU64::new(0),
            epoch: Instant::now(),
            want: AtomicBool::new(false),
            want_notify: tokio::sync::Notify::new(),
            keeper: OnceLock::new(),
            keeper_asleep: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            shared,
            spin,
            held: Mutex::new(Vec::new()),
        })
    }

    /// The clock the baton's and the drives' times are kept in
    /// (nanoseconds since the runtime was made).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long before `now` (`now_ns`) the time kept in `at` was.
    fn since(at: &AtomicU64, now: u64) -> Duration {
        Duration::from_nanos(now.saturating_sub(at.load(Ordering::Relaxed)))
    }

    fn since_release(&self) -> Duration {
        Self::since(&self.released_at, self.now_ns())
    }

    fn try_take(&self, who: u8) -> Option<Held<'_>> {
        self.holder
            .compare_exchange(FREE, who, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held { inline: self, at: None })
    }

    /// The app thread wants the baton: the keeper gives it back at once.
    fn ask_keeper_back(&self) {
        if self.holder.load(Ordering::Relaxed) == KEEPER {
            self.want.store(true, Ordering::Release);
            self.want_notify.notify_one();
        }
    }

    /// Runs the runtime (`block_on`) until `f` is done, for the baton's
    /// holder (`held`): the held replies go first, from inside it. `None`
    /// once `shutdown` took the runtime.
    fn drive<F: std::future::Future>(&self, held: &mut Held<'_>, f: F) -> Option<F::Output> {
        let out = {
            let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner());
            runtime.as_ref().map(|rt| {
                rt.block_on(async {
                    self.send_held();
                    f.await
                })
            })
        };
        let now = self.now_ns();
        self.driven_at.store(now, Ordering::Relaxed);
        held.at = Some(now);
        out
    }

    /// The app thread has no request: drives the runtime until one is
    /// queued, the queue closes, or `interrupted` is set (then
    /// `JobQueue::wake_all` wakes it). `None` when it cannot have the
    /// baton; the caller then waits on the queue as before.
    pub fn drive_for_job(&self, interrupted: &AtomicBool) -> Option<Pop> {
        let mut held = match self.try_take(APP) {
            Some(held) => held,
            None => self.take_from_keeper()?,
        };
        let queue = &self.shared.queue;
        let spin = self.spin;
        let popped = self.drive(&mut held, async {
            // Polls without sleeping first (each turn runs the ready tasks
            // and one `epoll_wait(0)`): at low concurrency the next request
            // often comes within it, and then costs no sleep and no wake.
            // The clock is read only once the queue was found empty: under
            // load a request is usually waiting.
            let mut started = None;
            queue.set_driver_spinning(true);
            loop {
                match queue.try_pop() {
                    Pop::Empty if !interrupted.load(Ordering::Acquire) => {
                        if started.get_or_insert_with(Instant::now).elapsed() >= spin {
                            break;
                        }
                        tokio::task::yield_now().await
                    }
                    popped => {
                        queue.set_driver_spinning(false);
                        return if matches!(popped, Pop::Empty) {
                            Pop::Interrupted
                        } else {
                            popped
                        };
                    }
                }
            }
            queue.set_driver_spinning(false);
            poll_fn(|cx| match queue.try_pop_or_register(cx.waker(), interrupted) {
                Some(pop) => Poll::Ready(pop),
                None => Poll::Pending,
            })
            .await
        });
        queue.clear_driver();
        drop(held);
        if self.keeper_asleep.load(Ordering::Acquire) {
            if let Some(keeper) = self.keeper.get() {
                keeper.unpark();
            }
        }
        Some(popped.unwrap_or(Pop::Closed))
    }

    /// The keeper drives (the app thread was busy for a while): asks for
    /// the baton and waits the moment the keeper takes to let go.
    fn take_from_keeper(&self) -> Option<Held<'_>> {
        if self.holder.load(Ordering::Relaxed) != KEEPER {
            return None;
        }
        self.ask_keeper_back();
        // Idle meanwhile, for busy accept (`net/accept.rs`): the keeper may
        // be accepting for this process right now.
        self.shared.queue.set_driver_spinning(true);
        let started = Instant::now();
        let held = loop {
            if let Some(held) = self.try_take(APP) {
                break Some(held);
            }
            if self.holder.load(Ordering::Relaxed) == CLOSED || started.elapsed() > TAKEOVER {
                break None;
            }
            std::thread::yield_now();
        };
        self.shared.queue.set_driver_spinning(false);
        held
    }

    /// Whether a reply sent at `now` (`now_ns`) should be written at once:
    /// the last drive was `DRIVE_EVERY` ago (a slow app, or a queue that
    /// stays full, would otherwise hold the replies back).
    pub fn drive_due(&self, now: u64) -> bool {
        Self::since(&self.driven_at, now) >= DRIVE_EVERY
    }

    /// Hands a reply to its connection task. With the baton, the reply is
    /// held and the next drive sends it from inside the runtime, so the
    /// task it wakes is queued on the driving thread rather than woken on
    /// another. `drive`: drive one turn right now (the held replies, the
    /// tasks they wake, one `epoll_wait(0)`), which is work for a caller
    /// that released the GVL; otherwise the call costs no system call and
    /// does not enter the runtime. When another thread drives, just sends
    /// (that wakes it). `now`: the clock as the caller just read it
    /// (`now_ns`), if it did.
    pub fn pass(&self, drive: bool, now: Option<u64>, sender: tokio::sync::oneshot::Sender<Reply>, reply: Reply) {
        let Some(mut held) = self.try_take(APP) else {
            self.ask_keeper_back();
            let _ = sender.send(reply);
            return;
        };
        self.held_replies().push((sender, reply));
        if drive {
            // `yield_now` defers its wake to the end of the runtime's turn.
            self.drive(&mut held, tokio::task::yield_now());
        } else {
            held.at = now;
        }
    }

    fn held_replies(&self) -> std::sync::MutexGuard<'_, Vec<(tokio::sync::oneshot::Sender<Reply>, Reply)>> {
        // Nothing panics while it is locked (a push, or sends that only
        // wake tasks), so a poisoned lock still holds whole replies.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends the held replies, in the order they were answered. A closed
    /// receiver means the engine already dropped the connection (a stop
    /// that timed out); nothing is left to tell.
    fn send_held(&self) {
        for (sender, reply) in self.held_replies().drain(..) {
            let _ = sender.send(reply);
        }
    }

    /// The keeper's loop (thread `tsubame-io`): drives whenever the baton
    /// has lain free for `TAKEOVER`, until the app thread wants it back.
    pub(crate) fn keep(self: &Arc<Self>) {
        let _ = self.keeper.set(std::thread::current());
        // Consecutive looks that found nothing to take over.
        let mut idle_looks = 0u32;
        loop {
            let interval = Self::look_interval(idle_looks);
            match self.holder.load(Ordering::Acquire) {
                CLOSED => return,
                _ if self.closing.load(Ordering::Acquire) => return,
                FREE if self.since_release() >= TAKEOVER => {
                    idle_looks = 0;
                    if let Some(mut held) = self.try_take(KEEPER) {
                        Stats::bump(&self.shared.stats.inline_takeovers);
                        self.want.store(false, Ordering::Relaxed);
                        self.drive(&mut held, async {
                            while !self.want.swap(false, Ordering::AcqRel) {
                                self.want_notify.notified().await;
                            }
                        });
                    }
                }
                FREE => {
                    std::thread::park_timeout(interval.saturating_sub(self.since_release()));
                    idle_looks = idle_looks.saturating_add(1);
                }
                _ if self.shared.queue.driver_parked() => {
                    // The app thread waits for a request in the runtime:
                    // nothing to cover until it leaves with one.
                    self.keeper_asleep.store(true, Ordering::Release);
                    if self.shared.queue.driver_parked() && self.holder.load(Ordering::Acquire) == APP {
                        std::thread::park();
                    }
                    self.keeper_asleep.store(false, Ordering::Release);
                    // The app thread left with a request after a quiet
                    // spell: that request is watched at the full rate.
                    idle_looks = 0;
                }
                _ => {
                    std::thread::park_timeout(interval);
                    idle_looks = idle_looks.saturating_add(1);
                }
            }
        }
    }

    /// The keeper's interval after `idle_looks` looks in a row that found
    /// nothing to take over.
    fn look_interval(idle_looks: u32) -> Duration {
        TAKEOVER * (1 << idle_looks.min(KEEPER_BACKOFF))
    }

    /// Stops the keeper and shuts the runtime down once nobody drives (a
    /// `current_thread` runtime cannot be shut down from under a driver).
    pub(crate) fn shutdown(&self, timeout: Duration) {
        // The keeper stops taking the baton first, or it would take it back
        // each time it lay free for `TAKEOVER` while this waits for it.
        self.closing.store(true, Ordering::Release);
        let started = Instant::now();
        loop {
            match self
                .holder
                .compare_exchange(FREE, CLOSED, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(CLOSED) => return,
                Err(_) if started.elapsed() > timeout => return,
                Err(_) => {
                    self.ask_keeper_back();
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        if let Some(keeper) = self.keeper.get() {
            keeper.unpark();
        }
        // Nobody drives any more: replies still held go the plain way.
        self.send_held();
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_timeout(timeout);
        }
    }

    pub(crate) fn spawn<F>(&self, f: F)
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ShedReason;
    use crate::options::EngineOptions;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn the_keeper_looks_less_often_while_it_finds_nothing_up_to_2_ms() {
        assert_eq!(Inline::look_interval(0), TAKEOVER);
        assert_eq!(Inline::look_interval(1), Duration::from_millis(1));
        assert_eq!(Inline::look_interval(2), Duration::from_millis(2));
        assert_eq!(Inline::look_interval(3), Duration::from_millis(2));
        assert_eq!(Inline::look_interval(u32::MAX), Duration::from_millis(2));
    }

    fn inline(spin: Duration) -> Arc<Inline> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let shared = Arc::new(Shared::new(EngineOptions::default(), None));
        Inline::new(runtime, shared, spin)
    }

    /// Polls `done` for up to 5 s.
    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Starts the keeper and waits until it drives (the baton lay free).
    fn driving_keeper(inline: &Arc<Inline>) -> std::thread::JoinHandle<()> {
        let keeper = {
            let inline = inline.clone();
            std::thread::spawn(move || inline.keep())
        };
        wait_for("the keeper never drove", || {
            inline.holder.load(Ordering::SeqCst) == KEEPER
        });
        keeper
    }

    #[test]
    fn a_lazy_pass_leaves_the_woken_task_for_the_next_drive() {
        let inline = inline(Duration::ZERO);
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<Reply>();
        let seen = ran.clone();
        inline.spawn(async move {
            if matches!(rx.await, Ok(Reply::Shed(ShedReason::QueueFull))) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
        // An interrupted drive returns before running any task.
        let stop = AtomicBool::new(true);
        assert!(matches!(inline.drive_for_job(&stop), Some(Pop::Interrupted)));
        inline.pass(false, None, tx, Reply::Shed(ShedReason::QueueFull));
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a lazy pass runs no task");
        assert_eq!(inline.holder.load(Ordering::SeqCst), FREE);
        assert_eq!(inline.held_replies().len(), 1, "the reply waits for the next drive");
        let (other, _) = tokio::sync::oneshot::channel::<Reply>();
        inline.pass(true, None, other, Reply::Shed(ShedReason::QueueFull));
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "a driving pass sends what was held and runs it"
        );
        assert!(inline.held_replies().is_empty());
        inline.shutdown(Duration::from_secs(1));
    }

    /// A task that counts the replies it receives.
    fn reply_counter(inline: &Inline, ran: &Arc<AtomicUsize>) -> tokio::sync::oneshot::Sender<Reply> {
        let (tx, rx) = tokio::sync::oneshot::channel::<Reply>();
        let seen = ran.clone();
        inline.spawn(async move {
            if rx.await.is_ok() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
        tx
    }

    #[test]
    fn a_held_reply_goes_out_when_the_keeper_takes_over_and_at_shutdown() {
        let inline = inline(Duration::ZERO);
        let ran = Arc::new(AtomicUsize::new(0));
        let first = reply_counter(&inline, &ran);
        // The app thread answers, then runs a long request: the keeper's
        // takeover sends the held reply and runs its task.
        inline.pass(false, None, first, Reply::Shed(ShedReason::QueueFull));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let keeper = driving_keeper(&inline);
        wait_for("the keeper never sent the held reply", || {
            ran.load(Ordering::SeqCst) == 1
        });
        inline.shutdown(Duration::from_secs(1));
        keeper.join().expect("keeper");

        // Held when the stop comes: sent, not dropped (its receiver sees a
        // reply, not a closed channel).
        let inline = super::tests::inline(Duration::ZERO);
        let (tx, mut rx) = tokio::sync::oneshot::channel::<Reply>();
        inline.pass(false, None, tx, Reply::Shed(ShedReason::QueueFull));
        inline.shutdown(Duration::from_secs(1));
        assert!(matches!(rx.try_recv(), Ok(Reply::Shed(ShedReason::QueueFull))));
    }

    #[test]
    fn the_keeper_drives_while_the_baton_lies_free_and_gives_it_back() {
        let inline = inline(Duration::ZERO);
        let keeper = driving_keeper(&inline);
        let ran = Arc::new(AtomicBool::new(false));
        let seen = ran.clone();
        inline.spawn(async move { seen.store(true, Ordering::SeqCst) });
        wait_for("the keeper never ran the task", || ran.load(Ordering::SeqCst));
        assert_eq!(inline.holder.load(Ordering::SeqCst), KEEPER);
        assert!(inline.shared.stats.inline_takeovers.load(Ordering::SeqCst) >= 1);
        // The app thread asks and gets the baton back. One ask waits
        // `TAKEOVER` for the keeper to let go, then falls back to the queue
        // (`None`); on a loaded machine the keeper may not get a core that
        // soon, so the ask is repeated, as the app thread's next wait would.
        let stop = AtomicBool::new(true);
        let started = Instant::now();
        let popped = loop {
            match inline.drive_for_job(&stop) {
                Some(popped) => break popped,
                None => assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "the keeper never gave the baton back"
                ),
            }
        };
        assert!(matches!(popped, Pop::Interrupted), "{popped:?}");
        inline.shutdown(Duration::from_secs(1));
        keeper.join().expect("keeper");
        assert_eq!(inline.holder.load(Ordering::SeqCst), CLOSED);
    }

    #[test]
    fn shutdown_takes_the_baton_from_a_driving_keeper_at_once() {
        let inline = inline(Duration::ZERO);
        let keeper = driving_keeper(&inline);
        let started = Instant::now();
        inline.shutdown(Duration::from_secs(2));
        assert_eq!(inline.holder.load(Ordering::SeqCst), CLOSED);
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        keeper.join().expect("keeper");
    }

    #[test]
    fn a_driver_parked_in_the_runtime_counts_idle_and_wake_all_reaches_it() {
        let inline = inline(Duration::ZERO);
        let queue = inline.shared.queue.clone();
        let interrupted = Arc::new(AtomicBool::new(false));
        let driver = {
            let (inline, interrupted) = (inline.clone(), interrupted.clone());
            std::thread::spawn(move || inline.drive_for_job(&interrupted))
        };
        wait_for("the driver never parked", || queue.driver_parked());
        assert_eq!(queue.waiting(), 1, "a parked driver is an idle thread");
        interrupted.store(true, Ordering::SeqCst);
        queue.wake_all();
        assert!(matches!(driver.join().expect("driver"), Some(Pop::Interrupted)));
        assert!(!queue.driver_parked());
        inline.shutdown(Duration::from_secs(1));
    }
}
