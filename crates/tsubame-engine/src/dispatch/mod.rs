//! Between the connections and the app: the queues that hand requests to
//! Ruby threads or fiber loops, the replies and streams that come back,
//! what watches them (readiness, request timeouts), and what `REMOTE_ADDR`
//! says (`remote_addr.rs`).

pub mod fiber_queue;
pub mod fiber_route;
pub mod job;
pub mod queue;
pub mod readiness;
pub mod remote_addr;
pub mod reply;
pub mod stream_channel;
pub mod timeouts;
pub mod waker;
