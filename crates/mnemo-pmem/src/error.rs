//! Errors of the media layer. Every message names the file (where there is one) and says
//! what to do about it.

use std::io;
use std::path::PathBuf;

/// An error from a [`crate::Media`] implementation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MediaError {
    /// An operating-system call failed.
    #[error("{op} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The medium has no room left (ENOSPC or an injected fault).
    #[error("no space left on the device while {op}")]
    NoSpace {
        /// What was being done.
        op: &'static str,
    },
    /// The write-ahead file of a page-cache pool ([`crate::wal`]) cannot be used.
    #[error("write-ahead file: {detail}")]
    WriteAhead {
        /// What is wrong.
        detail: String,
    },
    /// Growth beyond the reserved capacity.
    #[error("cannot grow to {requested} bytes: the pool reserved only {capacity} bytes of address space (open it with a larger maximum size)")]
    CapacityExceeded {
        /// Requested length.
        requested: u64,
        /// Reserved capacity.
        capacity: u64,
    },
}

impl MediaError {
    /// Wrap an I/O error, mapping ENOSPC/EDQUOT to [`MediaError::NoSpace`].
    pub fn io(op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(code) if code == libc_enospc() || code == libc_edquot() => {
                MediaError::NoSpace { op }
            }
            _ => MediaError::Io { op, source },
        }
    }
}

fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

fn libc_edquot() -> i32 {
    rustix::io::Errno::DQUOT.raw_os_error()
}

/// An error from the pool layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pool file does not exist.
    #[error("{path}: no such pool file (create it with `mnemo pool create {path} --size 64M`)", path = .path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file exists where a new pool was to be created.
    #[error("{path}: file already exists; refusing to overwrite it (choose another path or remove the file)", path = .path.display())]
    AlreadyExists {
        /// The file.
        path: PathBuf,
    },
    /// No permission to open the file for writing.
    #[error("{path}: permission denied ({detail}); a pool must be readable and writable by its owner (chmod 600 it, or run as its owner)", path = .path.display())]
    PermissionDenied {
        /// The file.
        path: PathBuf,
        /// What was refused.
        detail: String,
    },
    /// Another process holds the pool open.
    #[error("{path}: pool is in use by another process (only one process may open a pool at a time; stop the other one first)", path = .path.display())]
    Busy {
        /// The file.
        path: PathBuf,
    },
    /// The file is shorter than a pool can be, or than its header says.
    #[error("{path}: pool file is truncated: it is {file_len} bytes but {expected} are needed ({detail}); restore it from a copy or a replica, the pool cannot be opened safely", path = .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Actual length.
        file_len: u64,
        /// Length needed.
        expected: u64,
        /// Why that length is needed.
        detail: &'static str,
    },
    /// Neither header copy carries mnemo's magic: not a pool at all.
    #[error("{path}: not a mnemo pool ({detail})", path = .path.display())]
    NotAPool {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// The magic is right but no header copy is valid.
    #[error("{path}: pool header is corrupt: {detail}; run `mnemo pool check {path}` for details", path = .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with each copy.
        detail: String,
    },
    /// The pool did not close cleanly and has a write-ahead file whose records only the
    /// write-ahead policy replays, but another policy was given.
    #[error("{path}: did not close cleanly, and its write-ahead file {wal} may hold writes a crash left that a {policy} policy would not replay; open the pool once without a policy (that replays them), close it, then open it with this one", path = .path.display(), wal = .wal.display())]
    WriteAheadLeft {
        /// The pool file.
        path: PathBuf,
        /// Its write-ahead file.
        wal: PathBuf,
        /// The policy given.
        policy: String,
    },
    /// The pool was written by a newer mnemo.
    #[error("{path}: pool format version {found} is newer than this mnemo supports ({supported}); upgrade mnemo to open it", path = .path.display())]
    NewerVersion {
        /// The file.
        path: PathBuf,
        /// Version on media.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// The pool was written by an older, incompatible format.
    #[error("{path}: pool format version {found} is older than this mnemo supports ({supported}); it cannot be read by this version", path = .path.display())]
    OlderVersion {
        /// The file.
        path: PathBuf,
        /// Version on media.
        found: u32,
        /// Oldest version this build reads.
        supported: u32,
    },
    /// The pool was created for another program.
    #[error("{path}: pool layout is {found:?}, expected {expected:?} (this pool belongs to another program)", path = .path.display())]
    LayoutMismatch {
        /// The file.
        path: PathBuf,
        /// Layout the caller asked for.
        expected: String,
        /// Layout on media.
        found: String,
    },
    /// Not enough space to create or grow the pool.
    #[error("{path}: not enough space: {needed} bytes needed, {available} available on its file system; free space or choose a smaller size", path = .path.display())]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A caller passed an invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An access outside the pool.
    #[error("range {offset}+{len} is outside the pool (size {size})")]
    OutOfBounds {
        /// Start of the range.
        offset: u64,
        /// Its length.
        len: u64,
        /// Pool size.
        size: u64,
    },
    /// An operating-system call failed.
    #[error("{path}: {op} failed: {source}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The medium failed.
    #[error("{path}: {source}", path = .path.display())]
    Media {
        /// The file (or a description of the medium).
        path: PathBuf,
        /// The media error.
        #[source]
        source: MediaError,
    },
}

impl Error {
    /// Map an I/O error on `path` while doing `op` to the most helpful variant.
    pub fn from_io(path: &std::path::Path, op: &'static str, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::NotFound => Error::NotFound { path },
            io::ErrorKind::AlreadyExists => Error::AlreadyExists { path },
            io::ErrorKind::PermissionDenied => Error::PermissionDenied {
                path,
                detail: format!("{op}: {source}"),
            },
            _ => match MediaError::io(op, source) {
                MediaError::Io { op, source } => Error::Io { path, op, source },
                other => Error::Media {
                    path,
                    source: other,
                },
            },
        }
    }
}
