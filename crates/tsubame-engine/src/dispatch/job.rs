use crate::dispatch::reply::Reply;
use crate::message::body::Body;
use crate::message::head::RequestHead;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// What the Rack env needs to know about the listener a request came in on.
#[derive(Debug)]
pub struct ListenerInfo {
    pub server_name: String,
    pub server_port: u16,
    pub url_scheme: &'static str,
    /// `X-Forwarded-Proto` may set `rack.url_scheme` (see `EngineOptions`).
    pub trust_forwarded_proto: bool,
    /// How `REMOTE_ADDR` is decided (`remote_addr.rs`).
    pub remote_address: crate::dispatch::remote_addr::RemoteAddress,
}

#[derive(Debug)]
pub struct ConnInfo {
    pub peer_addr: String,
    pub listener: Arc<ListenerInfo>,
}

/// A request read whole, waiting for (or held by) an application thread.
/// Dropping it without replying makes the engine answer 500.
#[derive(Debug)]
pub struct Job {
    pub head: RequestHead,
    pub body: Body,
    pub conn: Arc<ConnInfo>,
    /// Where the answer goes. Always there when the job is queued; whoever
    /// answers takes it (an app thread's request keeps it apart from the
    /// job, which it drops at its final reply).
    pub reply: Option<oneshot::Sender<Reply>>,
    pub received_at: Instant,
    /// Set by the engine when it is draining, so the reply says
    /// `connection: close` instead of promising another request.
    pub keep_alive: bool,
    /// Numbers requests for the Ruby side's timeout watchdog.
    pub seq: u64,
    pub state: Arc<JobState>,
    /// When it was queued (`submit`): queue_timeout counts from here, not
    /// from the start of a long upload.
    pub queued_at: Instant,
    /// Set by the queue when an app thread takes the job, from the clock
    /// read that also times its wait: where its service time starts.
    pub taken_at: Option<Instant>,
}

impl Job {
    /// Answers the request with `reply`, if it was not answered before. A
    /// closed receiver means the connection is gone; nothing is left to
    /// tell.
    pub fn answer(self, reply: Reply) {
        if let Some(sender) = self.reply {
            let _ = sender.send(reply);
        }
    }
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const ABANDONED: u8 = 2;
const TIMED_OUT: u8 = 3;

/// Who owns a request's outcome. The connection task and the application
/// thread race for it (queue timeout vs. pick-up, request deadline vs.
/// reply), and a compare-and-swap decides, so exactly one answer is sent.
#[derive(Debug, Default)]
pub struct JobState {
    phase: std::sync::atomic::AtomicU8,
    /// Milliseconds after `received_at` when the request times out; 0 is
    /// none. The app may move it (`env["tsubame.request"].deadline = s`).
    deadline_ms: std::sync::atomic::AtomicU64,
    /// When a thread took the job, for the metrics and the access log:
    /// microseconds after `received_at` (high 32 bits) and microseconds it
    /// waited in the queue (low 32 bits), one store; 0 until taken.
    taken: std::sync::atomic::AtomicU64,
}

impl JobState {
    pub fn new(deadline: Option<std::time::Duration>) -> Self {
        let state = JobState::default();
        state.set_deadline(deadline);
        state
    }

    /// An application thread takes the job; false if the connection gave
    /// up on it while it was queued.
    pub fn take(&self) -> bool {
        self.swap_phase(QUEUED, RUNNING)
    }

    /// The connection gives up on a queued job; false if a thread has it.
    pub fn abandon(&self) -> bool {
        self.swap_phase(QUEUED, ABANDONED)
    }

    /// The connection answers a running job's deadline itself; false if
    /// the job was not running.
    pub fn time_out(&self) -> bool {
        self.swap_phase(RUNNING, TIMED_OUT)
    }

    /// Recorded by the queue as a thread takes the job (`take_live`).
    pub fn mark_taken(&self, since_received: std::time::Duration, waited: std::time::Duration) {
        let micros = |d: std::time::Duration| {
            u64::try_from(d.as_micros())
                .unwrap_or(u64::MAX)
                .min(u64::from(u32::MAX))
        };
        // Never 0 once taken: a job taken at once still reads as taken.
        let packed = (micros(since_received).max(1) << 32) | micros(waited);
        self.taken.store(packed, std::sync::atomic::Ordering::Relaxed);
    }

    /// (time from `received_at` to being taken, time waited in the queue),
    /// or `None` if no thread took the job.
    pub fn taken(&self) -> Option<(std::time::Duration, std::time::Duration)> {
        match self.taken.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            packed => Some((
                std::time::Duration::from_micros(packed >> 32),
                std::time::Duration::from_micros(packed & u64::from(u32::MAX)),
            )),
        }
    }

    pub fn is_timed_out(&self) -> bool {
        self.phase.load(std::sync::atomic::Ordering::Acquire) == TIMED_OUT
    }

    fn swap_phase(&self, from: u8, to: u8) -> bool {
        use std::sync::atomic::Ordering;
        self.phase
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn set_deadline(&self, deadline: Option<std::time::Duration>) {
        let ms = deadline.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
        self.deadline_ms.store(ms, std::sync::atomic::Ordering::Release);
    }

    pub fn deadline(&self) -> Option<std::time::Duration> {
        match self.deadline_ms.load(std::sync::atomic::Ordering::Acquire) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_side_wins() {
        let s = JobState::new(None);
        assert!(s.abandon());
        assert!(!s.take());
        let s = JobState::new(Some(std::time::Duration::from_secs(2)));
        assert!(s.take());
        assert!(!s.abandon());
        assert!(s.time_out());
        assert!(s.is_timed_out());
        assert_eq!(s.deadline(), Some(std::time::Duration::from_secs(2)));
    }
}
