//! The server's limits and fixed answers, in one place, each with its reason.

/// The Redis version HELLO and INFO report. Clients pick features by it; we implement the
/// 7.0 protocol and error texts, so we say 7.0.
pub const REDIS_VERSION: &str = "7.0.0";

/// Databases SELECT accepts unless `--databases` says otherwise: Redis's default, 16.
pub const DATABASES_DEFAULT: usize = 16;

/// Most requests in one batch: bounds the replies held back while a sync point runs and the
/// size of one transaction. Fifty clients with short pipelines fit comfortably.
pub const BATCH_REQUESTS_MAX: usize = 1024;

/// Unsent reply bytes at which a connection stops being read (Redis's
/// `client-output-buffer-limit`, which for normal clients is unlimited; a client that
/// pipelines without reading its replies would otherwise make the server buffer without
/// bound). Reading resumes once the socket has taken the backlog below it. A connection can
/// exceed it by at most the replies of one wake-up's requests from it
/// ([`REQUESTS_PER_CONNECTION_WAKEUP`]).
pub const OUTPUT_BUFFER_BYTES_MAX: usize = 16 << 20;

/// Requests taken from one connection per wake-up; the rest wait in its decoder (and its
/// socket) for the next wake-up. Bounds what one pipelining client adds to a batch, and so
/// the replies it can add past [`OUTPUT_BUFFER_BYTES_MAX`] at once, without cutting
/// batches below [`BATCH_REQUESTS_MAX`].
pub const REQUESTS_PER_CONNECTION_WAKEUP: usize = BATCH_REQUESTS_MAX;

/// Bytes read from a socket per `read` call: a pipelined burst of small requests arrives in
/// one or two reads without a large per-connection buffer.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Longest wait of the event loop for an event: an idle loop wakes this often to read its
/// stop flag. A stop is signalled through a waker as well; once in a CI run a test's loop
/// slept on in `epoll_wait` after its stop (cause not found), so the flag is read at least
/// this often whatever becomes of the waker's event (Redis's own cron wakes it 10 times a
/// second).
pub const IDLE_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// Longest a writing batch waits for the clients its loop has just answered before its
/// commit (`gather.rs`), whatever the commits' measured duration (half of which
/// bounds it first: 50-150 us on an SSD's `fdatasync`, a few ms on a disk with heads).
pub const GATHER_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(4);
