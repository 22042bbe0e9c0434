//! Errors of virtual persistent memory.

use std::io;
use std::path::PathBuf;

/// What can go wrong creating, opening or allocating virtual persistent memory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{path}: {op} failed: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A bad argument (size, budget, owner name).
    #[error("{0}")]
    InvalidArgument(String),
    /// The file is not a persistent-memory file of this format, or is damaged.
    #[error("{path}: {detail}")]
    Corrupt {
        /// The file concerned.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// No region of that owner and sequence number.
    #[error("no region {seq} of owner {owner:?}")]
    NotFound {
        /// Owner name.
        owner: String,
        /// Allocation sequence number.
        seq: u64,
    },
    /// The persistent-memory file, its table of contents or the fault handler's table is full.
    #[error("{0}")]
    Full(String),
    /// The region is already open in this process.
    #[error("region {seq} of owner {owner:?} is already open")]
    Busy {
        /// Owner name.
        owner: String,
        /// Allocation sequence number.
        seq: u64,
    },
    /// Another process (or another `Space` of this one) has the region open: its lock file
    /// is held.
    #[error("region {seq} of owner {owner:?} is in use by another process (lock {}); stop it first", lock.display())]
    InUse {
        /// Owner name.
        owner: String,
        /// Allocation sequence number.
        seq: u64,
        /// The lock file held.
        lock: std::path::PathBuf,
    },
    /// The media layer refused (the persistent-memory file's mapping).
    #[error(transparent)]
    Pmem(#[from] mnemo_pmem::Error),
}

impl Error {
    pub(crate) fn io(path: &std::path::Path, op: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(path: &std::path::Path, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
