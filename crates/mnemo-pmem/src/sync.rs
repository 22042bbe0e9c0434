//! Sync points and durability policies.
//!
//! A *sync point* is the moment a layer says "these ranges must now be durable". It is the
//! only way to durability above this crate: the layers above store into the mapping, *stage*
//! what they want written back early ([`crate::Pool::stage`], [`crate::Pool::copy_nodrain`],
//! [`crate::Pool::stream_nodrain`]: a flush without a fence), and then make one sync point
//! ([`crate::Pool::sync`], or [`crate::Pool::msync`] / [`crate::Pool::gmsync`] for programs)
//! that names every range it makes durable, staged or not. Every sync point goes through the
//! pool's [`SyncPolicy`], and the policy is where the fence happens:
//!
//! ```text
//! stores into the mapping, staged ranges flushed early
//!   -> sync point: SyncPoint { kind, ranges (to flush), staged (already flushed) }
//!      (ranges narrowed to what changed by dirty tracking)
//!   -> SyncPolicy::sync   local: flush ranges + one fence (or msync(2))
//!                         recording (tests): local, then copy every range to a shadow image
//!                         replication: local and/or ship the ranges as one record, wait
//!   -> return: now, and only now, the caller may rely on the data
//! ```
//!
//! Because the fence is issued only by a policy, a change that some layer made durable
//! without naming it in a sync point is a change a mirror never receives. The testkit's
//! recording policy proves there are none: it keeps a *shadow replica* fed only by sync
//! points, and every crash workload checks that the shadow recovers at every sync point.
//!
//! Internal metadata (the pool header, the heap's superblock and table of contents, a log's
//! header) is made durable by sync points too, marked with its [`SyncKind`], so a policy may
//! treat it differently (a mirror keeps its own pool header) but always sees it.

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

/// What a sync point makes durable, for policies that treat kinds differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncKind {
    /// A program's data or a layer's commit (a transaction, a log append): `msync`,
    /// `gmsync`, commits. Counted in [`crate::PoolStats::sync_points`].
    Data,
    /// A layer's own metadata (heap superblock, table of contents, horizon word, log header):
    /// part of the image any replica needs to recover.
    Metadata,
    /// The pool header (open/close flag, generation, size after growth). A mirror keeps a
    /// header of its own and may take only the size from it; recording policies copy it so
    /// that the shadow image opens as a pool.
    Header,
}

/// One sync point, as a policy receives it. Offsets lie within the medium's `len()`.
#[derive(Clone, Copy, Debug)]
pub struct SyncPoint<'a> {
    /// What it makes durable.
    pub kind: SyncKind,
    /// Ranges the policy must flush (stored to, not yet written back).
    pub ranges: &'a [ByteRange],
    /// Ranges the calling thread already staged (flushed, or written with non-temporal
    /// stores) since their last change: a local policy need only fence them; replication
    /// ships them like the others.
    pub staged: &'a [ByteRange],
}

impl<'a> SyncPoint<'a> {
    /// A sync point over `ranges`, none of them staged.
    #[inline]
    pub const fn new(kind: SyncKind, ranges: &'a [ByteRange]) -> SyncPoint<'a> {
        SyncPoint {
            kind,
            ranges,
            staged: &[],
        }
    }

    /// A sync point over ranges the caller staged already.
    #[inline]
    pub const fn staged(kind: SyncKind, staged: &'a [ByteRange]) -> SyncPoint<'a> {
        SyncPoint {
            kind,
            ranges: &[],
            staged,
        }
    }

    /// Every range the sync point makes durable: `ranges`, then `staged`.
    #[inline]
    pub fn all(&self) -> impl Iterator<Item = &'a ByteRange> {
        self.ranges.iter().chain(self.staged)
    }
}

/// How a pool makes the ranges of a sync point durable (and, with replication, replicated).
pub trait SyncPolicy: Send + Sync + Debug {
    /// The mode's name, as `mnemo pool info` and INFO print it ("local", "sync", ...).
    fn name(&self) -> &'static str;

    /// Make every range of `point` durable before returning. This is the only place above
    /// the media that fences: implementations end with `media.drain()` (or delegate to a
    /// policy that does).
    fn sync(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError>;

    /// The pool attaches this policy: after reading its header (of pool `pool`), before
    /// writing one or reading a byte of the data area; `created`: a new pool. A policy with
    /// durable state of its own (the write-ahead file of [`crate::wal`]) brings the medium
    /// up to date here. Default: nothing.
    fn open(&self, media: &dyn Media, pool: uuid::Uuid, created: bool) -> Result<(), MediaError> {
        let _ = (media, pool, created);
        Ok(())
    }

    /// The pool closes cleanly: before it marks its header clean, everything the policy
    /// made durable elsewhere must be durable in the pool itself. Default: nothing.
    fn close(&self, media: &dyn Media) -> Result<(), MediaError> {
        let _ = media;
        Ok(())
    }

    /// Make everything the policy holds durable in place now (the write-ahead policy's
    /// checkpoint); `Pool::checkpoint`. Default: nothing to do.
    fn checkpoint_all(&self, media: &dyn Media) -> Result<(), MediaError> {
        let _ = media;
        Ok(())
    }

    /// Whether the pool should be mapped privately (copy-on-write) under this policy
    /// ([`Media::private`]); the pool asks once, before it attaches the policy. Default: no.
    fn private_mapping(&self) -> bool {
        false
    }

    /// Acknowledge sync points once appended, durable later (see
    /// [`crate::WalPolicy::defer_acks`]); `notify` is called from a thread of the policy
    /// whenever more became durable (`None`: no thread, the owner calls
    /// [`SyncPolicy::pump`]). `false` if this policy cannot. Default: cannot.
    fn defer_acks(&self, notify: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) -> bool {
        let _ = notify;
        false
    }

    /// Under deferred acknowledgements without a thread: make everything appended durable
    /// now. Default: nothing to do.
    fn pump(&self) -> Result<(), MediaError> {
        Ok(())
    }

    /// Under deferred acknowledgements, the marks `(appended, durable)` (see
    /// [`crate::wal::Shared::marks`]); `None` while sync points are durable on return.
    fn ack_marks(&self) -> Option<Result<(u64, u64), MediaError>> {
        None
    }

    /// Figures of the write-ahead file, if the policy keeps one (checkpoints, bytes pending
    /// replay, the last `fdatasync`'s duration), for `mnemo pool info` and `INFO
    /// persistence`. Default: none.
    fn write_ahead(&self) -> Option<crate::wal::WalStats> {
        None
    }
}

/// The "local" mode (Mojim's S-unreplicated): flush the unstaged ranges, then one fence (or
/// one `msync(2)` where the pool is a page-cache file).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalPolicy;

impl SyncPolicy for LocalPolicy {
    fn name(&self) -> &'static str {
        "local"
    }

    fn sync(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError> {
        for range in point.ranges {
            crate::durable_site!("policy.flush", {
                media.flush(range.offset, range.len);
                Ok::<(), MediaError>(())
            })?;
        }
        crate::durable_site!("policy.fence", media.drain())
    }
}
