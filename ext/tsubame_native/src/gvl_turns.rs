//! When a thread that holds the GVL through a long run of short steps
//! (ActionCable's threads writing a broadcast's frames to hijacked
//! sockets, `Tsubame::HijackedSocket#write_nonblock`) should pass it.
//!
//! Passing after every frame gave a waiting request its turn at once but
//! made ActionCable's own threads hand the GVL to one another (or, with
//! nobody waiting, `sched_yield` the core away) a thousand times a
//! broadcast. So the holder passes when a Tsubame thread is taking the
//! GVL back after a wait (a request popped from the queue, a WebSocket
//! event, a stream's write) and otherwise at most every `MAX_HOLD`, which
//! still gives any other waiter (an app thread back from a database
//! query) its turn long before Ruby's 100 ms time slice would.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Tsubame threads whose wait without the GVL has ended and that are
/// taking it back.
static RETURNING: AtomicUsize = AtomicUsize::new(0);

const MAX_HOLD: Duration = Duration::from_millis(1);

thread_local! {
    static LAST_PASS: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A Tsubame thread's wait ended; it is about to take the GVL back.
pub fn returning() {
    RETURNING.fetch_add(1, Ordering::Relaxed);
}

/// ... and it has it again.
pub fn returned() {
    RETURNING.fetch_sub(1, Ordering::Relaxed);
}

/// `Tsubame::Native.pass_gvl?`: true when the calling thread should pass
/// the GVL now (a Tsubame thread waits for it, or the caller has not
/// passed for `MAX_HOLD`); counts a true answer as a pass.
pub fn pass_due() -> bool {
    LAST_PASS.with(|last| {
        let now = Instant::now();
        let due =
            RETURNING.load(Ordering::Relaxed) > 0 || last.get().is_none_or(|at| now.duration_since(at) >= MAX_HOLD);
        if due {
            last.set(Some(now));
        }
        due
    })
}
