//! Every limit the codec enforces, in one place, each with its reason.
//!
//! The values match Redis 7 so that a client sees the same errors at the same sizes, with one
//! deliberate exception noted on [`MULTIBULK_ARGS_MAX`].

/// Largest bulk string a client may send (Redis `proto-max-bulk-len`, 512 MiB): bounds the
/// memory one argument can pin before the command is even looked at.
pub const BULK_BYTES_MAX: u64 = 512 * 1024 * 1024;

/// Most arguments in one multibulk request. Redis 6 used this value; Redis 7.0 raised it to
/// `INT_MAX`. We keep 1 Mi so that a header alone cannot make the server reserve gigabytes of
/// argument slots; the error text is the same either way.
pub const MULTIBULK_ARGS_MAX: u64 = 1024 * 1024;

/// Longest inline request, and longest `*<count>` / `$<len>` line we wait for without finding
/// its CR (Redis `PROTO_INLINE_MAX_SIZE`, 64 KiB): a peer cannot grow the buffer forever by
/// never ending a line.
pub const INLINE_BYTES_MAX: usize = 64 * 1024;

/// Most arguments an unauthenticated connection may announce (as redis-server 7.0.15 does when
/// a password is set; enabled by `Decoder::set_authenticated(false)`): AUTH and HELLO need few.
pub const UNAUTHENTICATED_ARGS_MAX: u64 = 10;

/// Largest bulk an unauthenticated connection may announce (redis-server 7.0.15 likewise): a
/// password fits, a 512 MiB allocation by a stranger does not.
pub const UNAUTHENTICATED_BULK_BYTES_MAX: u64 = 16 * 1024;

/// Capacity an empty receive buffer may keep between requests. After a large request (a
/// 100 MiB SET) the buffer is dropped instead, so an idle connection does not pin that memory
/// (Redis shrinks idle query buffers for the same reason).
pub const IDLE_BUFFER_BYTES_MAX: usize = 64 * 1024;

/// Arguments slots reserved up front for one multibulk request, whatever its header claims:
/// the header is untrusted, so growth beyond this is paid for by bytes actually received.
pub const ARGS_RESERVE_MAX: usize = 1024;

/// Bytes of the command name, and of the arguments, echoed by the "unknown command" error
/// (Redis formats them with `%.128s`).
pub const ERROR_ECHO_BYTES_MAX: usize = 128;

/// Bytes in `i64::MIN` written in decimal ("-9223372036854775808"); Redis rejects any integer
/// string of 21 bytes or more (`LONG_STR_SIZE`) before looking at it.
pub const I64_TEXT_BYTES_MAX: usize = 20;

/// Deepest nesting of aggregates the reply decoder follows: the parser recurses per level, and
/// no Redis reply nests more than a few levels (COMMAND DOCS is the deepest, about 6).
pub const REPLY_DEPTH_MAX: usize = 64;
