//! Handing a request to the application and waiting for its answer: the
//! half of serving a request that HTTP/1 (`http1/connection.rs`) and HTTP/2
//! (`h2/connection.rs`) share, so a request is the same job whichever
//! protocol carried it.

use crate::dispatch::job::{ConnInfo, Job, JobState};
use crate::dispatch::queue::{PushError, Pushed};
use crate::dispatch::reply::Reply;
use crate::error::ShedReason;
use crate::log;
use crate::message::body::Body;
use crate::message::head::RequestHead;
use crate::shared::Shared;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// A request handed to an application pool, and what came of it.
pub(crate) struct Submitted {
    pub answer: Answer,
    pub state: Arc<JobState>,
    pub seq: u64,
}

/// Queues a request for the application and waits for its first answer
/// (a reply, an interim 103, or a shed). `None`: the server is shutting
/// down and took no more work. Shared by HTTP/1 and HTTP/2, so a request
/// is the same job whichever protocol carried it.
pub(crate) async fn submit(
    shared: &Shared,
    mut head: RequestHead,
    body: Body,
    conn: &Arc<ConnInfo>,
    keep_alive: bool,
    received_at: Instant,
    target: &[u8],
) -> Option<Submitted> {
    // Puma's `allow_underscore_headers false`: such headers never reach
    // the app (behind a proxy, a client could pass them for dashed ones).
    if !shared.opts.allow_underscore_headers {
        head.headers.retain(|(name, _)| !name.contains(&b'_'));
    }
    let (reply_tx, reply_rx) = oneshot::channel();
    let state = Arc::new(JobState::new(shared.opts.request_timeout));
    let seq = shared.next_seq();
    // The queue's wait counts from here, not from the start of a long
    // upload; a request without a body was queued the moment it arrived,
    // so the clock read then serves.
    let queued_at = if matches!(body, Body::Empty) {
        received_at
    } else {
        Instant::now()
    };
    let job = Job {
        keep_alive,
        head,
        body,
        conn: conn.clone(),
        reply: Some(reply_tx),
        received_at,
        seq,
        state: state.clone(),
        queued_at,
        taken_at: None,
    };
    let answer = match enqueue(shared, job, target) {
        Ok(pushed) => await_reply(reply_rx, pushed, &state, seq, received_at, shared).await,
        Err(Enqueue::Shed(reason)) => Answer::Shed(reason),
        Err(Enqueue::Closed) => return None,
    };
    Some(Submitted { answer, state, seq })
}

/// Why a job could not be queued.
pub(crate) enum Enqueue {
    Shed(ShedReason),
    Closed,
}

/// Queues a job with the pool its path belongs to: the fiber queue when
/// fiber routes match it, the thread pool's queue otherwise. One place for
/// both protocols, so HTTP/1 and HTTP/2 requests are routed alike.
pub(crate) fn enqueue(shared: &Shared, job: Job, target: &[u8]) -> Result<Pushed, Enqueue> {
    let to_fibers = shared.routes.as_ref().is_some_and(|routes| routes.matches(target));
    let pushed = if to_fibers {
        // A fiber loop is woken by the push itself; the watcher is armed
        // only to expire jobs a stuck loop never takes.
        shared.fibers.push(job).map(|()| {
            if shared.opts.queue_timeout.is_some() {
                Pushed::NudgeLater
            } else {
                Pushed::Done
            }
        })
    } else {
        shared.queue.push(job)
    };
    pushed.map_err(|e| match e {
        PushError::Full if to_fibers => Enqueue::Shed(ShedReason::FiberLimit),
        PushError::Full => Enqueue::Shed(ShedReason::QueueFull),
        PushError::Closed => Enqueue::Closed,
    })
}

pub(crate) enum Answer {
    Reply(Reply),
    /// The engine answers 503 itself.
    Shed(ShedReason),
    /// The application side dropped the request without a reply.
    Dropped,
}

/// Waits for the application's reply, or for the request's deadline. The
/// deadline is read again each time it passes, since the app may move it.
pub(crate) async fn await_reply(
    mut reply_rx: oneshot::Receiver<Reply>,
    pushed: Pushed,
    state: &JobState,
    seq: u64,
    received_at: Instant,
    shared: &Shared,
) -> Answer {
    if pushed == Pushed::NudgeLater {
        shared.nudger.notify_one();
    }
    let settle = |reply: Result<Reply, oneshot::error::RecvError>| match reply {
        Ok(Reply::Shed(reason)) => Answer::Shed(reason),
        Ok(reply) => Answer::Reply(reply),
        Err(_) => Answer::Dropped,
    };
    loop {
        let Some(deadline) = state.deadline() else {
            return settle((&mut reply_rx).await);
        };
        let at = tokio::time::Instant::from_std(received_at + deadline);
        tokio::select! {
            biased;
            reply = &mut reply_rx => return settle(reply),
            _ = tokio::time::sleep_until(at) => {}
        }
        if state
            .deadline()
            .is_none_or(|moved| received_at + moved > Instant::now())
        {
            continue;
        }
        if let Ok(reply) = reply_rx.try_recv() {
            return settle(Ok(reply));
        }
        if state.abandon() {
            return Answer::Shed(ShedReason::RequestTimeout);
        }
        if state.time_out() {
            shared.timed_out.push(seq);
            return Answer::Shed(ShedReason::RequestTimeout);
        }
    }
}

pub(crate) fn accepts_json(head: &RequestHead) -> bool {
    head.headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case(b"accept") && memchr::memmem::find(value, b"application/json").is_some()
    })
}

/// Every request the engine turns away is counted and logged: nothing
/// disappears silently.
pub(crate) fn shed(shared: &Shared, reason: ShedReason, request: (&[u8], &[u8], &str), seq: u64, received_at: Instant) {
    let (method, target, peer) = request;
    shared.stats.shed(reason);
    log::warn(&format!(
        "503 {} #{seq} {} {} from {peer} after {:.3}s",
        reason.as_str(),
        String::from_utf8_lossy(method),
        String::from_utf8_lossy(target),
        received_at.elapsed().as_secs_f64()
    ));
}

pub(crate) fn reply_status(reply: &Reply) -> u16 {
    match reply {
        Reply::Full { status, .. } | Reply::Stream { status, .. } | Reply::File { status, .. } => *status,
        Reply::Hijack { .. } => 101,
        Reply::Upgrade {
            kind: crate::dispatch::reply::UpgradeKind::Sse,
            ..
        } => 200,
        Reply::Upgrade { .. } => 101,
        Reply::Shed(_) => 503,
        Reply::Interim { .. } => 103,
    }
}
