//! Between the connections and the app: the queues that hand requests to
//! Ruby threads or fiber loops, the replies and streams that come back,
//! and what watches them (readiness, request timeouts).

pub mod fiber_queue;
pub mod fiber_route;
pub mod job;
pub mod queue;
pub mod readiness;
pub mod reply;
pub mod stream_channel;
pub mod timeouts;
pub mod waker;
