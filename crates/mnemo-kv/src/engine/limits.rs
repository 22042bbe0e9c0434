//! Every limit of the engine, in one place, each with its reason.

/// Most databases a pool may hold (`--databases`): the database array is one allocation of
/// a word per database, and every database costs an empty table (about 150 bytes).
pub const DATABASES_MAX: usize = 1 << 16;
/// Largest string, key or element: Redis's default `proto-max-bulk-len` (512 MiB); also the
/// largest length believed when read from the pool (a larger one is corruption).
pub const VALUE_BYTES_MAX: u64 = 512 * 1024 * 1024;
/// Values up to this size live inside their table entry (one allocation, updated in place
/// when they fit); larger ones get an allocation of their own (written unlogged when fresh).
pub const INLINE_VALUE_BYTES_MAX: u64 = 256;
/// An APPEND of at most this many bytes into spare capacity is logged in place; a larger
/// one copies the value into a fresh allocation (which needs no redo logging).
pub const APPEND_IN_PLACE_BYTES_MAX: u64 = 4096;
/// Slots of a new table's index (keyspace and nested): tiny, tables grow by doubling.
pub const BUCKETS_MIN: u64 = 8;
/// Largest slot array: 2^26 * 16 B = 1 GiB, the heap's largest allocation. A table holds at
/// most one element less (one slot stays empty); past 3/4 of it, probes grow longer.
pub const BUCKETS_MAX: u64 = 1 << 26;
/// Resize steps per table operation while a table is resizing (Redis moves one bucket per
/// operation); a step takes the home slots of one probe run, at most [`REHASH_RUN_HOMES`],
/// so every operation stays O(1).
pub const REHASH_BUCKETS_PER_OP: u64 = 1;
/// Extra keyspace resize steps per committed batch, so a resize finishes under writes.
pub const REHASH_BUCKETS_PER_BATCH: u64 = 16;
/// Empty buckets a rehash step may skip per bucket it should move (bounds its cost).
pub const REHASH_EMPTY_VISITS: u64 = 10;
/// Home slots one rehash step takes at most, from one read of the run they share (so a
/// step moves about twelve elements at the load of 3/4 that starts a resize).
pub const REHASH_RUN_HOMES: u64 = 16;
/// Keyspace buckets the active expiry examines per committed batch.
pub const EXPIRE_BUCKETS_PER_BATCH: u64 = 32;
/// Allocations freed per committed batch from the reclaim queue (lazily freed big values):
/// bounds the work and the redo record a DEL or FLUSHALL adds to later batches.
pub const RECLAIM_FREES_PER_BATCH: u64 = 256;
/// Allocations freed per transaction when a FLUSHALL or FLUSHDB without ASYNC empties the
/// reclaim queue before it answers: 16 times a batch's share, so that a large flush takes
/// few sync points (each a durable write on a disk pool). A transaction too large for the
/// heap's redo record is retried with a quarter of the frees, down to
/// [`RECLAIM_FREES_PER_DRAIN_MIN`].
pub const RECLAIM_FREES_PER_DRAIN: u64 = 16 * RECLAIM_FREES_PER_BATCH;
/// The fewest frees a drain transaction tries before it leaves the rest to the lazy path,
/// and the fewest a batch's lazy step tries after steps too large for its redo record.
pub const RECLAIM_FREES_PER_DRAIN_MIN: u64 = 16;
/// A container with at most this many elements is freed inside the command that drops it;
/// a larger one goes to the reclaim queue.
pub const FREE_INLINE_ELEMENTS_MAX: u64 = 64;
/// Element slots per list segment: one 544-byte allocation serves 64 pushes.
pub const LIST_SEGMENT_SLOTS: u64 = 64;
/// Bucket visits of one SCAN call per element asked for with COUNT (Redis uses 10 as well).
pub const SCAN_VISITS_PER_COUNT: u64 = 10;
/// Attempts at a random non-empty bucket before SPOP falls back to a linear search.
pub const RANDOM_BUCKET_TRIES: u32 = 64;
/// Arguments of a command the slow log keeps (Redis's `SLOWLOG_ENTRY_MAX_ARGC`): the last
/// one kept says how many more there were.
pub const SLOWLOG_ARGUMENTS_MAX: usize = 32;
/// Bytes of one argument the slow log keeps (Redis's `SLOWLOG_ENTRY_MAX_STRING`).
pub const SLOWLOG_ARGUMENT_BYTES_MAX: usize = 128;
/// Memory the Lua interpreter of EVAL may hold (every cached script, every table a script
/// builds): past it an allocation fails inside Lua, and the script gets Lua's "not enough
/// memory" error instead of the server's allocator failing (Redis sets no bound; the
/// process would die there).
pub const SCRIPT_MEMORY_MAX: usize = 256 << 20;
