//! The Redis protocol (RESP2 and RESP3) without I/O: bytes in, commands out; replies in,
//! bytes out. Like rustls's core, it never touches a socket, so tests and fuzzers drive it
//! directly and the server's network threads own all the I/O.
//!
//! - [`Decoder`]: client requests (multibulk and inline, pipelined, cut anywhere) into
//!   [`Command`]s, with Redis 7's limits and Redis 7's exact protocol error texts
//!   ([`ProtocolError`]); after an error the connection must be closed, as Redis does.
//! - [`Encoder`] / [`Reply`]: replies, in RESP3 or downgraded to RESP2 the way Redis
//!   downgrades them ([`Protocol`]).
//! - [`ReplyDecoder`]: the client side, for tests and benchmark drivers.
//! - [`command`]: the command table (id, arity, flags, key positions) behind COMMAND, the
//!   argument-count check and the server's dispatch; [`errors`]: Redis's error texts for the
//!   command layer.
//! - [`parse_i64`], [`parse_f64`], [`format_f64`]: numbers read and written exactly as Redis
//!   does (`string2ll`, `strtod`, `%.17g`).
//! - [`limits`]: every size limit, with its reason.
//!
//! Nothing here panics on input from the network: there is no unchecked indexing and no
//! `unwrap` on parsed data, and `unsafe` is forbidden.
//!
//! ```
//! use bytes::BytesMut;
//! use mnemo_resp::{Decoder, Encoder, Protocol};
//!
//! let mut decoder = Decoder::new();
//! decoder.feed(b"*1\r\n$4\r\nPI");
//! assert_eq!(decoder.next_command(), Ok(None)); // a request cut in two: wait
//! decoder.feed(b"NG\r\n");
//! let command = decoder.next_command().unwrap().unwrap();
//! assert_eq!(command.name(), b"PING");
//!
//! let mut out = BytesMut::new();
//! Encoder::new(&mut out, Protocol::Resp2).simple(b"PONG");
//! assert_eq!(&out[..], b"+PONG\r\n");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The `bytes` crate this API uses, so callers name the same `Bytes` / `BytesMut`.
pub use bytes;

pub mod command;
mod decode;
mod encode;
pub mod errors;
mod inline;
pub mod limits;
mod number;
mod reply;

pub use command::{check_arity, lookup, CommandId, CommandSpec};
pub use decode::{Command, Decoder, ProtocolError};
pub use encode::{encode_command, BulkMap, Encoder, Protocol, Reply};
pub use errors::CommandError;
pub use number::{format_f64, parse_f64, parse_i64, parse_strtod, write_i64};
pub use reply::{ReplyDecoder, ReplyError};
