//! [`FaultyMedia`]: any [`Media`] with an I/O error or ENOSPC injected at the Nth call of
//! `drain`, `grow` or `ensure_backed`, failing once or forever (SQLite's I/O-error loops).
//!
//! A failed `drain` does not reach the medium below: the fence did not happen, so what was
//! flushed before it is not yet durable (on a [`crate::SimMedia`], the next successful fence
//! persists it). A failed `grow` or `ensure_backed` changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mnemo_pmem::{ForwardMedia, Media, MediaError};

/// Which call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// [`Media::drain`], the fence.
    Drain,
    /// [`Media::grow`].
    Grow,
    /// [`Media::ensure_backed`].
    EnsureBacked,
}

/// What the failure looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`.
    Io,
    /// `ENOSPC`.
    NoSpace,
}

/// When to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    /// The call that fails.
    pub op: FaultOp,
    /// Index (0-based) of the first failing call of `op`.
    pub nth: u64,
    /// Keep failing every later call of `op` too.
    pub forever: bool,
    /// The error.
    pub kind: FaultKind,
}

/// A medium that fails as planned and otherwise forwards to the one it wraps. Clones share
/// the medium and the counters: keep one to read [`FaultyMedia::calls`] after boxing another
/// into a pool.
#[derive(Debug, Clone)]
pub struct FaultyMedia {
    inner: Arc<dyn Media>,
    plan: Option<FaultPlan>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    calls: [AtomicU64; 3],
    injected: AtomicU64,
}

impl FaultyMedia {
    /// Wrap `inner`; `plan: None` forwards everything (to count calls).
    pub fn new(inner: Box<dyn Media>, plan: Option<FaultPlan>) -> FaultyMedia {
        FaultyMedia {
            inner: Arc::from(inner),
            plan,
            counters: Arc::default(),
        }
    }

    /// Calls of `op` so far.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.counters.calls[op as usize].load(Ordering::Acquire)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.counters.injected.load(Ordering::Acquire)
    }

    fn check(&self, op: FaultOp, what: &'static str) -> Result<(), MediaError> {
        let n = self.counters.calls[op as usize].fetch_add(1, Ordering::AcqRel);
        let Some(plan) = self.plan.filter(|p| p.op == op) else {
            return Ok(());
        };
        if n == plan.nth || (plan.forever && n > plan.nth) {
            self.counters.injected.fetch_add(1, Ordering::AcqRel);
            return Err(match plan.kind {
                FaultKind::Io => MediaError::Io {
                    op: what,
                    source: std::io::Error::other("injected I/O error"),
                },
                FaultKind::NoSpace => MediaError::NoSpace { op: what },
            });
        }
        Ok(())
    }
}

impl ForwardMedia for FaultyMedia {
    type Inner = dyn Media;

    fn inner(&self) -> &(dyn Media + 'static) {
        &*self.inner
    }

    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        self.check(FaultOp::Grow, "growing (injected)")?;
        self.inner.grow(new_len)
    }

    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        self.check(FaultOp::EnsureBacked, "reserving blocks (injected)")?;
        self.inner.ensure_backed(offset, len)
    }

    fn drain(&self) -> Result<(), MediaError> {
        self.check(FaultOp::Drain, "draining (injected)")?;
        self.inner.drain()
    }
}
