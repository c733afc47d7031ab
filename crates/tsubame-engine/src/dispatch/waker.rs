//! How the engine wakes a Ruby-side loop that sleeps on its own terms (a
//! fiber loop's selector): jobs arrived for it, or a full stream has room
//! again.

use std::sync::Arc;

/// Called (from an I/O thread) when there is work for the loop.
pub type Waker = Arc<dyn Fn() + Send + Sync>;
