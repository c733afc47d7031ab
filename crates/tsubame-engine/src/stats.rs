use std::sync::atomic::{AtomicU64, Ordering};

/// Counters kept by the engine; read without locks for the stats endpoint.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_total: AtomicU64,
    pub connections_active: AtomicU64,
    pub requests_total: AtomicU64,
    /// Requests the engine answered itself (400, 408, 413, ...).
    pub rejected_total: AtomicU64,
    pub client_disconnects: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub connections_total: u64,
    pub connections_active: u64,
    pub requests_total: u64,
    pub rejected_total: u64,
    pub client_disconnects: u64,
    pub backlog: u64,
}

impl Stats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self, backlog: usize) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            connections_total: get(&self.connections_total),
            connections_active: get(&self.connections_active),
            requests_total: get(&self.requests_total),
            rejected_total: get(&self.rejected_total),
            client_disconnects: get(&self.client_disconnects),
            backlog: backlog as u64,
        }
    }
}
