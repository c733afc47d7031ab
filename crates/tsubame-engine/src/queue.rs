//! The hand-off between connection tasks and application threads.
//!
//! A plain mutex and condvar: pushes come from the I/O threads, pops from
//! Ruby threads that have released the GVL. A popper first tries without
//! blocking (while it still holds the GVL), so a busy thread keeps taking
//! work with no sleep, wake-up or GVL hand-off per request.

use crate::job::Job;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    waiting: usize,
    closed: bool,
}

#[derive(Default)]
pub struct JobQueue {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueClosed;

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

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave `State` half-updated
        // (every mutation is a single VecDeque call), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses (dropping the job) once the queue is closed.
    pub fn push(&self, job: Job) -> Result<(), QueueClosed> {
        let mut state = self.lock();
        if state.closed {
            return Err(QueueClosed);
        }
        state.jobs.push_back(job);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Returns a job taken by a thread that could not run it, ahead of
    /// the rest, so it is not lost and does not lose its place.
    pub fn push_front(&self, job: Job) {
        let mut state = self.lock();
        state.jobs.push_front(job);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.ready.notify_one();
        }
    }

    pub fn try_pop(&self) -> Pop {
        let mut state = self.lock();
        match state.jobs.pop_front() {
            Some(job) => Pop::Job(Box::new(job)),
            None if state.closed => Pop::Closed,
            None => Pop::Empty,
        }
    }

    /// Blocks until a job arrives, the queue closes, or `interrupted` is set
    /// and `wake_all` called.
    pub fn pop_wait(&self, interrupted: &AtomicBool) -> Pop {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Pop::Job(Box::new(job));
            }
            if state.closed {
                return Pop::Closed;
            }
            if interrupted.load(Ordering::Acquire) {
                return Pop::Interrupted;
            }
            state.waiting += 1;
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiting -= 1;
        }
    }

    /// Wakes every waiter so each can look at its own interrupt flag.
    /// Taking the lock first means a waiter between its flag check and its
    /// wait cannot miss the wake-up.
    pub fn wake_all(&self) {
        drop(self.lock());
        self.ready.notify_all();
    }

    /// Queued jobs are still handed out; once they are gone, poppers get
    /// `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Closes and takes every queued job, for a stop that ran out of time.
    pub fn close_and_take(&self) -> Vec<Job> {
        let mut state = self.lock();
        state.closed = true;
        let jobs = state.jobs.drain(..).collect();
        drop(state);
        self.ready.notify_all();
        jobs
    }

    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }
}
