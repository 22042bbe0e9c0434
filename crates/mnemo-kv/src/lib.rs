//! # mnemo-kv: a persistent key-value server that speaks the Redis protocol
//!
//! Issue 6. This crate will hold the keyspace (persistent structures on the heap and its
//! transactions) and the server around it. Today it holds the server's connection layer,
//! written against an [`server::Engine`] seam so that it is tested before the storage engine
//! exists; `docs/design/kv-server.md` describes the whole design.
//!
//! - [`server::Session`]: one client connection, sans-IO: bytes in, reply bytes out,
//!   connection-level commands answered in place, the rest handed out as
//!   [`server::Request`]s, replies kept in request order.
//! - [`server::run_batch`]: group commit: a batch of requests runs in one transaction and its
//!   replies are released only after the batch's sync point.
//! - [`server::Server`]: the thread that drives both over TCP (an epoll loop, commands
//!   executed inline like Redis).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engine;
pub mod server;
