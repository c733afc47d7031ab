//! Requests whose deadline passed while an application thread ran them.
//! The engine has already answered 503; the Ruby side's watchdog takes
//! each number from here (waiting with the GVL released) and raises
//! Tsubame::RequestTimeout in the thread running that request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    seqs: VecDeque<u64>,
    closed: bool,
}

#[derive(Default)]
pub struct TimedOut {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, PartialEq, Eq)]
pub enum NextTimeout {
    Seq(u64),
    Closed,
    Interrupted,
}

impl TimedOut {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Single-call critical sections: a poisoned state is still valid.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, seq: u64) {
        self.lock().seqs.push_back(seq);
        self.ready.notify_one();
    }

    pub fn wait(&self, interrupted: &AtomicBool) -> NextTimeout {
        let mut state = self.lock();
        loop {
            if let Some(seq) = state.seqs.pop_front() {
                return NextTimeout::Seq(seq);
            }
            if state.closed {
                return NextTimeout::Closed;
            }
            if interrupted.load(Ordering::Acquire) {
                return NextTimeout::Interrupted;
            }
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn wake_all(&self) {
        drop(self.lock());
        self.ready.notify_all();
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_in_order_then_closes() {
        let t = TimedOut::default();
        let flag = AtomicBool::new(false);
        t.push(7);
        t.push(9);
        assert_eq!(t.wait(&flag), NextTimeout::Seq(7));
        assert_eq!(t.wait(&flag), NextTimeout::Seq(9));
        flag.store(true, Ordering::Release);
        assert_eq!(t.wait(&flag), NextTimeout::Interrupted);
        t.close();
        assert_eq!(t.wait(&flag), NextTimeout::Closed);
    }
}
