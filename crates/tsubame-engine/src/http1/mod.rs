//! HTTP/1.x: parsing heads, chunked bodies, and the connection task that
//! reads requests and writes replies.

pub mod chunked;
pub(crate) mod closing;
pub mod connection;
pub mod parse;
mod stream_frames;
mod upgraded;
