use crate::body::Body;
use crate::parse::RequestHead;
use crate::reply::Reply;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// What the Rack env needs to know about the listener a request came in on.
#[derive(Debug)]
pub struct ListenerInfo {
    pub server_name: String,
    pub server_port: u16,
    pub url_scheme: &'static str,
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
    pub reply: oneshot::Sender<Reply>,
    pub received_at: Instant,
    /// Set by the engine when it is draining, so the reply says
    /// `connection: close` instead of promising another request.
    pub keep_alive: bool,
}
