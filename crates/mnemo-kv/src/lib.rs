//! # mnemo-kv: a persistent key-value server that speaks the Redis protocol
//!
//! Issue 6. The keyspace lives in a pool, as persistent structures on the heap and its
//! transactions ([`engine`], `docs/design/kv-engine.md`); the server around it is written
//! against the [`server::Engine`] seam, so each is tested without the other
//! (`docs/design/kv-server.md`).
//!
//! - [`server::Session`]: one client connection, sans-IO: bytes in, reply bytes out,
//!   connection-level commands answered in place, the rest handed out as
//!   [`server::Request`]s, replies kept in request order.
//! - [`server::run_batch`]: group commit: a batch of requests runs in one transaction and its
//!   replies are released only after the batch's sync point.
//! - [`server::EventLoop`] / [`server::Server`]: the loop that drives both over TCP (epoll,
//!   commands executed inline like Redis), with per-connection backpressure.
//! - [`engine::PersistentEngine`]: the persistent keyspace.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engine;
pub mod server;
