//! Errors of the replication layer.

use std::io;

/// Bytes that cannot be a frame (the link that sent them is closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Not this protocol (a wrong port or a different program).
    #[error("not a mnemo replication peer (bad magic)")]
    BadMagic,
    /// A frame longer than the protocol allows.
    #[error("frame of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// The checksum does not match: damaged on the way.
    #[error("frame checksum mismatch")]
    Checksum,
    /// A body shorter than its fields.
    #[error("frame body truncated")]
    Truncated,
    /// A field with a value no frame has.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// A frame kind this version does not know.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
}

/// Errors of links, mirrors and the replication policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Socket or file trouble, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// The peer sent bytes that are not a frame.
    #[error("protocol error from the peer: {0}")]
    Proto(#[from] ProtoError),
    /// The peer does not know the shared secret, or speaks another version.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer refused the link or a record, with its reason.
    #[error("refused by the peer: {0}")]
    Refused(String),
    /// A frame that does not belong at this point of the conversation.
    #[error("unexpected frame from the peer: {0}")]
    Unexpected(String),
    /// The secret file is missing, too short or readable by others.
    #[error("secret: {0}")]
    Secret(String),
    /// The mirror's own storage (image, log, state).
    #[error("mirror storage: {0}")]
    Storage(String),
    /// The pool layer.
    #[error(transparent)]
    Pool(#[from] mnemo_pmem::Error),
    /// The log layer.
    #[error(transparent)]
    Log(#[from] mnemo_log::Error),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result with this crate's error.
pub type Result<T> = std::result::Result<T, Error>;
