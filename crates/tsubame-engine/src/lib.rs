//! Tsubame's HTTP engine. Everything here runs without Ruby: binding
//! listeners, reading and validating whole requests, queueing them for the
//! application threads, and writing the replies those threads hand back.
//! The Ruby binding (`ext/tsubame_native`) is the only consumer of the
//! queue in production; the tests in this crate play the application.

#![deny(unsafe_code)]

mod accept;
mod accept_log;
pub mod bind;
pub mod body;
pub mod chunked;
pub mod connection;
pub mod date;
pub mod error;
pub mod fiber_queue;
pub mod fiber_route;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod h2;
mod h2_io;
pub mod health;
pub mod histogram;
pub mod job;
mod linger;
pub mod log;
pub mod options;
pub mod parse;
pub mod queue;
pub mod readiness;
pub mod reply;
pub mod response;
mod rewind;
pub mod server;
pub mod stats;
pub mod stream_channel;
mod stream_frames;
#[allow(unsafe_code)]
mod sys;
pub mod timeouts;
pub mod tls;

pub use error::{BindError, HttpError, ShedReason};
pub use fiber_queue::FiberQueue;
pub use fiber_route::{FiberPath, FiberRoutes, PatternError};
pub use job::{ConnInfo, Job};
pub use options::EngineOptions;
pub use queue::{JobQueue, Pop, PushError, Pushed};
pub use reply::{Reply, StreamMsg};
pub use server::Engine;
