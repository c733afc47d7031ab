//! The hand-off to the Ruby fiber loops (`fiber_scheduler`): requests that
//! `fiber_paths` routes to fibers wait here instead of in the thread pool's
//! `JobQueue`.
//!
//! A fiber loop never blocks on this queue: it waits in its own selector
//! (epoll) together with its fibers' sockets, and a push makes that
//! selector ready through the waker the loop registered (`add_waker`). It
//! then takes every queued job with `try_pop`, which never blocks.
//! `max_fibers` counts queued and running jobs together, since every
//! running fiber holds its stack and its request in memory.

use crate::dispatch::job::Job;
use crate::dispatch::queue::{Backlog, Pop, PushError};
use crate::histogram::Histogram;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub use crate::dispatch::waker::Waker;

type State = Backlog;

#[derive(Default)]
pub struct FiberQueue {
    state: Mutex<State>,
    wakers: Mutex<Vec<Waker>>,
    max_fibers: Option<usize>,
    wait_times: Histogram,
}

impl FiberQueue {
    pub fn new(max_fibers: Option<usize>) -> Self {
        FiberQueue {
            max_fibers,
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation of `State` is a single step; a poisoned lock holds
        // nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        let wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for waker in wakers {
            waker();
        }
    }

    /// A fiber loop asks to be told when jobs arrive or the queue closes.
    pub fn add_waker(&self, waker: Waker) {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner()).push(waker);
        // Jobs may have been queued before the loop registered.
        if !self.lock().jobs.is_empty() {
            self.wake();
        }
    }

    /// Queues a job; `Full` once `max_fibers` jobs are queued or running.
    /// Wakes the loops only when the queue was empty: a loop drains it
    /// whole on each wake-up, so later pushes would wake it for nothing.
    pub fn push(&self, job: Job) -> Result<(), PushError> {
        let mut state = self.lock();
        if state.closed {
            return Err(PushError::Closed);
        }
        if self
            .max_fibers
            .is_some_and(|max| state.jobs.len() + state.running >= max)
        {
            return Err(PushError::Full);
        }
        let was_empty = state.jobs.is_empty();
        state.jobs.push_back(job);
        drop(state);
        if was_empty {
            self.wake();
        }
        Ok(())
    }

    /// Never blocks. Jobs the connection gave up on while queued are skipped.
    pub fn try_pop(&self) -> Pop {
        let mut state = self.lock();
        if let Some(job) = state.take_live(&self.wait_times, None) {
            return Pop::Job(Box::new(job));
        }
        if state.closed {
            Pop::Closed
        } else {
            Pop::Empty
        }
    }

    /// A fiber finished the job it took.
    pub fn finished(&self) {
        let mut state = self.lock();
        state.running = state.running.saturating_sub(1);
    }

    /// Removes the jobs queued longer than `timeout` (at the front: FIFO).
    pub fn expire(&self, timeout: Duration) -> Vec<Job> {
        self.lock().expire(timeout)
    }

    /// Queued jobs are still handed out; then `try_pop` says `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake();
    }

    pub fn close_and_take(&self) -> Vec<Job> {
        let jobs = self.lock().close_and_drain();
        self.wake();
        jobs
    }

    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn running(&self) -> usize {
        self.lock().running
    }

    pub fn taken(&self) -> u64 {
        self.lock().taken
    }

    pub fn wait_times(&self) -> &Histogram {
        &self.wait_times
    }

    /// See `Backlog::waited`.
    pub fn waited(&self, position: usize) -> Option<Duration> {
        self.lock().waited(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::queue::tests::job;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn wakes_once_per_empty_to_non_empty_and_on_close() {
        let q = FiberQueue::new(None);
        let wakes = Arc::new(AtomicUsize::new(0));
        let counter = wakes.clone();
        q.add_waker(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        q.push(job()).unwrap();
        q.push(job()).unwrap();
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "the loop drains whole: one wake-up");
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert!(matches!(q.try_pop(), Pop::Empty));
        q.push(job()).unwrap();
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
        q.close();
        assert_eq!(wakes.load(Ordering::SeqCst), 3);
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        assert!(matches!(q.try_pop(), Pop::Closed));
        assert_eq!(q.push(job()).unwrap_err(), PushError::Closed);
    }

    #[test]
    fn max_fibers_counts_queued_and_running() {
        let q = FiberQueue::new(Some(2));
        q.push(job()).unwrap();
        assert!(matches!(q.try_pop(), Pop::Job(_)));
        q.push(job()).unwrap();
        assert_eq!(q.push(job()).unwrap_err(), PushError::Full, "one running + one queued");
        q.finished();
        q.push(job()).unwrap();
        assert_eq!((q.running(), q.len(), q.taken()), (0, 2, 1));
    }

    #[test]
    fn a_waker_added_late_hears_about_queued_jobs_and_expired_jobs_leave() {
        let q = FiberQueue::new(None);
        q.push(job()).unwrap();
        let wakes = Arc::new(AtomicUsize::new(0));
        let counter = wakes.clone();
        q.add_waker(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(wakes.load(Ordering::SeqCst), 1);
        std::thread::sleep(Duration::from_millis(15));
        assert_eq!(q.expire(Duration::from_millis(10)).len(), 1);
        assert!(matches!(q.try_pop(), Pop::Empty));
    }
}
