//! What the readiness probe says: "send me more" or "send me no more".
//!
//! A load balancer pulls an instance on a few failed checks, so the answer
//! must follow sustained saturation, not an instant's queue depth: every
//! request waits a moment between being queued and a thread taking it, and
//! a rule on the depth alone failed checks at a fifth of capacity.
//!
//! The rule: the server is saturated when more than `threshold` requests
//! wait for a thread (or a fiber loop) and the one at position `threshold`
//! (0 is the oldest) has waited at least `max_wait`. The queue is FIFO, so
//! that request has had more than `threshold` requests ahead of or beside
//! it for the whole of its wait: a queue that keeps turning over quickly
//! never counts, however deep it gets for an instant. Readiness answers
//! busy while saturated and for `hold` after the last time it saw that
//! (hysteresis, so it does not flap at the edge). A stop or a lame-duck
//! period (`shutdown_delay`) makes it answer draining.

use crate::dispatch::fiber_queue::FiberQueue;
use crate::dispatch::queue::JobQueue;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ready,
    Busy,
    Draining,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Busy => "busy",
            Verdict::Draining => "draining",
        }
    }
}

pub(crate) struct Readiness {
    threshold: usize,
    max_wait: Duration,
    hold: Duration,
    epoch: Instant,
    /// When a saturated queue was last seen, in nanoseconds after `epoch`;
    /// 0 means never.
    last_saturated: AtomicU64,
    /// `shutdown_delay`: still serving, but asking for no more traffic.
    lame_duck: AtomicBool,
}

impl Readiness {
    pub fn new(threshold: usize, max_wait: Duration, hold: Duration) -> Readiness {
        Readiness {
            threshold,
            max_wait,
            hold,
            epoch: Instant::now(),
            last_saturated: AtomicU64::new(0),
            lame_duck: AtomicBool::new(false),
        }
    }

    pub fn enter_lame_duck(&self) {
        self.lame_duck.store(true, Ordering::Release);
    }

    pub fn is_lame_duck(&self) -> bool {
        self.lame_duck.load(Ordering::Acquire)
    }

    fn saturated(&self, queue: &JobQueue, fibers: &FiberQueue) -> bool {
        let too_long = |waited: Option<Duration>| waited.is_some_and(|w| w >= self.max_wait);
        too_long(queue.waited(self.threshold)) || too_long(fibers.waited(self.threshold))
    }

    pub fn verdict(&self, stopping: bool, queue: &JobQueue, fibers: &FiberQueue) -> Verdict {
        if stopping || self.is_lame_duck() {
            return Verdict::Draining;
        }
        // Never 0, which means "never saturated".
        let now = u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        if self.saturated(queue, fibers) {
            self.last_saturated.store(now, Ordering::Release);
            return Verdict::Busy;
        }
        let last = self.last_saturated.load(Ordering::Acquire);
        let hold = u64::try_from(self.hold.as_nanos()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < hold {
            Verdict::Busy
        } else {
            Verdict::Ready
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::queue::tests::job;

    fn readiness(threshold: usize, max_wait_ms: u64, hold_ms: u64) -> Readiness {
        Readiness::new(
            threshold,
            Duration::from_millis(max_wait_ms),
            Duration::from_millis(hold_ms),
        )
    }

    #[test]
    fn a_queue_that_turns_over_quickly_stays_ready_however_deep() {
        let (queue, fibers) = (JobQueue::new(), FiberQueue::new(None));
        let r = readiness(0, 50, 100);
        for _ in 0..20 {
            queue.push(job()).unwrap();
        }
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Ready);
    }

    #[test]
    fn a_request_waiting_past_the_limit_is_busy_then_ready_after_the_hold() {
        let (queue, fibers) = (JobQueue::new(), FiberQueue::new(None));
        let r = readiness(0, 20, 60);
        queue.push(job()).unwrap();
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Busy);
        assert!(matches!(queue.try_pop(), crate::Pop::Job(_)));
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Busy, "held");
        std::thread::sleep(Duration::from_millis(70));
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Ready);
    }

    #[test]
    fn the_threshold_counts_requests_ahead_and_fibers_count_too() {
        let (queue, fibers) = (JobQueue::new(), FiberQueue::new(None));
        let r = readiness(1, 20, 0);
        queue.push(job()).unwrap();
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(
            r.verdict(false, &queue, &fibers),
            Verdict::Ready,
            "one waiting, threshold 1"
        );
        fibers.push(job()).unwrap();
        fibers.push(job()).unwrap();
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Busy, "two fibers waiting");
    }

    #[test]
    fn stopping_and_lame_duck_drain() {
        let (queue, fibers) = (JobQueue::new(), FiberQueue::new(None));
        let r = readiness(0, 20, 0);
        assert_eq!(r.verdict(true, &queue, &fibers), Verdict::Draining);
        r.enter_lame_duck();
        assert_eq!(r.verdict(false, &queue, &fibers), Verdict::Draining);
    }
}
