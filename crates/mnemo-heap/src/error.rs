//! Errors of the heap layer.

/// An error from the heap, the allocator, a transaction or the table of contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The media layer failed.
    #[error(transparent)]
    Pool(#[from] mnemo_pmem::Error),
    /// The heap handle was closed; open the pool again.
    #[error("the heap was closed; open the pool again to use it")]
    Closed,
    /// No heap superblock at the start of the pool's data area.
    #[error("{0}: the pool holds no mnemo heap (create one with Heap::create)")]
    NotAHeap(String),
    /// Heap metadata read from media is invalid.
    #[error("heap metadata is corrupt: {0}")]
    Corrupt(String),
    /// The pool is full and cannot grow (its maximum size is reached or the medium is full).
    #[error("out of space: {needed} bytes requested; the pool cannot grow further ({detail})")]
    OutOfSpace {
        /// Bytes the request needed.
        needed: u64,
        /// Why growth failed.
        detail: String,
    },
    /// A transaction's redo record does not fit one slot of its lane's log.
    #[error("transaction too large: its redo record needs {needed} bytes, a record slot holds {capacity} (split the transaction, or create the heap with a larger lane_log_size or fewer lane_slots)")]
    TransactionTooLarge {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes a record slot holds (`lane_log_size / lane_slots`).
        capacity: u64,
    },
    /// `free` of an offset that is not the start of a live allocation.
    #[error("invalid free of offset {offset:#x}: {detail}")]
    InvalidFree {
        /// The offset passed.
        offset: u64,
        /// What is wrong with it.
        detail: &'static str,
    },
    /// A region name longer than the limit.
    #[error("name is {len} bytes long; at most {max} fit")]
    NameTooLong {
        /// Length of the name in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An empty name or one containing a NUL byte.
    #[error("invalid region name {0:?}: names are 1..=63 bytes without NUL")]
    InvalidName(String),
    /// A named region exists with another size.
    #[error("region {name:?} exists with size {existing}, {requested} requested")]
    SizeMismatch {
        /// The name.
        name: String,
        /// Size on media.
        existing: u64,
        /// Size asked for.
        requested: u64,
    },
    /// No region by that name.
    #[error("no region named {0:?}")]
    NoSuchRegion(String),
    /// The table of contents is full.
    #[error("the table of contents is full ({0} entries); free a region first")]
    TocFull(u64),
    /// Another transaction is creating or freeing the same name right now.
    #[error("region {0:?} is being changed by another transaction; retry")]
    NameBusy(String),
    /// The transaction was aborted (an inner, joined transaction failed).
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// A caller passed an invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result of heap operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
