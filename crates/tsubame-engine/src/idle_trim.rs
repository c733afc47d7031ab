//! Giving memory back to the OS once a burst is over (`idle_memory_trim`).
//!
//! During a burst (large uploads, big responses built in Ruby) the app's
//! allocations climb; Ruby frees them at its next GC, but glibc keeps the
//! freed pages in its arenas, so a worker that peaked at 190 MiB stays at
//! 190 MiB while idle: measured with 300 KiB uploads at 200 concurrent,
//! where `malloc_trim` brought it back to 45 MiB. A container's memory
//! limit, a memory-based autoscaler or the next fork all see the peak.
//! When no request has arrived for a whole period after some did, the
//! engine asks glibc to return its free pages, once per quiet spell.

use crate::server::Shared;
use crate::stats::Stats;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Runs until the server stops; `after` is the quiet period.
pub(crate) async fn trim_when_idle(shared: Arc<Shared>, after: Duration) {
    let mut seen = shared.stats.requests_total.load(Ordering::Relaxed);
    // Nothing to give back before the first request.
    let mut trimmed = true;
    loop {
        tokio::time::sleep(after).await;
        if shared.is_stopping() {
            return;
        }
        let now = shared.stats.requests_total.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            trimmed = false;
            continue;
        }
        if trimmed {
            continue;
        }
        trimmed = true;
        // malloc_trim walks the arenas (milliseconds for a few hundred
        // MiB): off the I/O thread, which stays free to accept.
        let stats = shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if crate::sys::release_free_heap() {
                Stats::bump(&stats.stats.memory_trims);
            }
        })
        .await;
    }
}
