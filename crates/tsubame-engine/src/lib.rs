//! Tsubame's HTTP engine. Everything here runs without Ruby: binding
//! listeners, reading and validating whole requests, queueing them for the
//! application threads, and writing the replies those threads hand back.
//! The Ruby binding (`ext/tsubame_native`) is the only consumer of the
//! queue in production; the tests in this crate play the application.
//!
//! The folders follow a request: `net/` accepts the socket (TCP, UNIX,
//! TLS), `http1/` or `h2/` reads the request into a `message/` head and
//! body, `dispatch/` queues it for the app and carries the reply back, and
//! the protocol writes it. Dependencies point one way: `server.rs` (the
//! engine) → protocols → `dispatch/` → `message/`; `shared.rs` is the
//! state they all read.
//!
//! `ws/` is the WebSocket protocol (RFC 6455) as pure functions over bytes,
//! for a connection that upgrades: handshake, frames, the message decoder.

#![deny(unsafe_code)]

pub mod compress;
pub mod crypto;
pub mod dispatch;
pub mod error;
pub mod files;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod h2;
pub mod handoff;
pub mod health;
pub mod histogram;
pub mod http1;
pub mod inline;
pub mod log;
pub mod message;
pub mod net;
pub mod observe;
pub mod options;
pub mod server;
mod shared;
pub mod stats;
mod submit;
#[allow(unsafe_code)]
mod sys;
pub mod upgrade;
pub mod ws;

pub use dispatch::fiber_queue::FiberQueue;
pub use dispatch::fiber_route::{FiberPath, FiberRoutes, PatternError};
pub use dispatch::job::{ConnInfo, Job};
pub use dispatch::queue::{JobQueue, Pop, PushError, Pushed};
pub use dispatch::reply::Reply;
pub use dispatch::stream_channel::StreamMsg;
pub use error::{BindError, HttpError, ShedReason};
pub use options::{EngineOptions, InlineMode};
pub use server::Engine;
