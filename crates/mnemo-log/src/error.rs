//! Errors of the log layer. Each says what happened and what to do about it.

/// An error from [`crate::Log`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The region given for the log is unusable (misaligned, too small, outside the pool).
    #[error("invalid log region {start}..{end}: {detail}")]
    InvalidRegion {
        /// First pool offset of the region.
        start: u64,
        /// One past the last pool offset.
        end: u64,
        /// What is wrong with it.
        detail: String,
    },
    /// The region holds no log: never created, or its creation did not complete (one header
    /// copy empty, the other empty or torn). Create one with [`crate::Log::create`].
    #[error("no log in region {start}..{end} (never created, or creation did not complete); create one with Log::create")]
    NotFormatted {
        /// First pool offset of the region.
        start: u64,
        /// One past the last pool offset.
        end: u64,
    },
    /// The log was created over a region of another length than the one given to open.
    #[error("the log was created over a region of {created} bytes but opened with {given}; open it with the range it was created with")]
    RegionMismatch {
        /// Region length recorded in the header.
        created: u64,
        /// Region length given to open.
        given: u64,
    },
    /// The on-media bytes are damaged: no valid header copy, or a record whose torn bits say
    /// it was written completely but whose checksum does not match (not a crash: media
    /// corruption). Nothing was changed on media.
    #[error("log in region {start}..{end} is corrupt: {detail}")]
    Corrupt {
        /// First pool offset of the region.
        start: u64,
        /// One past the last pool offset.
        end: u64,
        /// What was found.
        detail: String,
    },
    /// One entry is larger than the log could ever hold.
    #[error("entry of {len} bytes is larger than the log can hold ({max} bytes at most); create a larger log")]
    TooLarge {
        /// Bytes asked for.
        len: u64,
        /// Largest entry this log can hold.
        max: u64,
    },
    /// Not enough free space now; truncate the front (or reset) and retry.
    #[error("log full: the append needs {needed} bytes, {free} are free; truncate_front or reset to reclaim space")]
    Full {
        /// Bytes of log space the append needs (records, including their length words).
        needed: u64,
        /// Bytes free.
        free: u64,
    },
    /// An LSN that is not the start of a live entry (or the end of the log).
    #[error("LSN {lsn} is not the start of a live entry (live entries span {head}..{tail})")]
    InvalidLsn {
        /// The LSN given.
        lsn: u64,
        /// First live LSN.
        head: u64,
        /// End of the log.
        tail: u64,
    },
    /// The log was closed.
    #[error("the log is closed")]
    Closed,
    /// An earlier media error left the end of the log uncertain; reopen the log (recovery
    /// finds exactly the complete appends).
    #[error("an earlier media error left the log's end uncertain; reopen the log")]
    Poisoned,
    /// The pool layer failed.
    #[error(transparent)]
    Pool(#[from] mnemo_pmem::Error),
}
