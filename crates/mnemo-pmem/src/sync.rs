//! Sync points and durability policies.
//!
//! A *sync point* is the moment a program says "these ranges must now be durable":
//! [`crate::Pool::msync`] for one range, [`crate::Pool::gmsync`] for several (a transaction
//! commit is one too). Every sync point goes through the pool's [`SyncPolicy`]:
//!
//! ```text
//! stores into the mapping
//!   -> sync point (ranges; later narrowed to what changed by dirty tracking)
//!   -> SyncPolicy::sync   local: flush + fence (or msync(2))   replication: ship, wait
//!   -> return: now, and only now, the caller may rely on the data
//! ```
//!
//! Replication adds policies (mirror, backups) without changing any caller.

use std::fmt::Debug;

use crate::error::MediaError;
use crate::media::Media;

/// A range of pool bytes, by offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct ByteRange {
    /// First byte, as an offset from the pool's start.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

impl ByteRange {
    /// A range of `len` bytes at `offset`.
    pub const fn new(offset: u64, len: u64) -> ByteRange {
        ByteRange { offset, len }
    }

    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// How a pool makes the ranges of a sync point durable (and, later, replicated).
pub trait SyncPolicy: Send + Sync + Debug {
    /// The mode's name, as `mnemo pool info` and INFO print it ("local", "sync", ...).
    fn name(&self) -> &'static str;

    /// Make every range durable before returning. The ranges lie within `media.len()`.
    fn sync(&self, media: &dyn Media, ranges: &[ByteRange]) -> Result<(), MediaError>;

    /// Make every range durable, where the caller has already flushed them (written with
    /// `copy_nodrain`/`stream_nodrain`): a local policy need only fence; replication still
    /// ships the ranges. The default flushes again, which is always correct.
    fn sync_flushed(&self, media: &dyn Media, ranges: &[ByteRange]) -> Result<(), MediaError> {
        self.sync(media, ranges)
    }
}

/// The "local" mode (Mojim's S-unreplicated): flush the ranges, then one fence (or one
/// `msync(2)` where the pool is a page-cache file).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalPolicy;

impl SyncPolicy for LocalPolicy {
    fn name(&self) -> &'static str {
        "local"
    }

    fn sync(&self, media: &dyn Media, ranges: &[ByteRange]) -> Result<(), MediaError> {
        for range in ranges {
            media.flush(range.offset, range.len);
        }
        media.drain()
    }

    fn sync_flushed(&self, media: &dyn Media, _ranges: &[ByteRange]) -> Result<(), MediaError> {
        media.drain()
    }
}
