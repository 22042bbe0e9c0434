//! Handles: what C holds instead of pointers into Rust memory.
//!
//! A handle is an opaque pointer whose value is `id << 3 | kind`; C never dereferences it,
//! and every call looks it up in a table. So a closed, foreign or garbage handle is an error
//! ([`code::ECLOSED`], [`code::EBADHANDLE`]), never a use after free. Ids are never reused.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use mnemo_heap::Heap;
use mnemo_log::Log;
use mnemo_pmem::{ByteRange, Pool};

use crate::error::{code, Failure, Result};

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `mnemo_pool *`.
    Pool = 1,
    /// `mnemo_log *`.
    Log = 2,
    /// `mnemo_tx *`.
    Tx = 3,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Pool => "pool",
            Kind::Log => "log",
            Kind::Tx => "transaction",
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh handle value of `kind`.
pub fn new_handle(kind: Kind) -> usize {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    ((id as usize) << 3) | kind as usize
}

/// Why `handle` is not in its table: closed (an id that was handed out) or no handle at all.
pub fn missing(handle: usize, kind: Kind) -> Failure {
    let issued = (handle >> 3) as u64;
    if handle & 7 == kind as usize && issued > 0 && issued < NEXT_ID.load(Ordering::Relaxed) {
        Failure::new(
            code::ECLOSED,
            format!("the {} handle was closed or ended", kind.noun()),
        )
    } else if handle == 0 {
        Failure::invalid(format!("the {} handle is NULL", kind.noun()))
    } else {
        Failure::new(
            code::EBADHANDLE,
            format!("{handle:#x} is not a {} handle", kind.noun()),
        )
    }
}

/// Ranges that redo records committed through this ABI wrote, while those records may still
/// be replayed by recovery. A raw store to such bytes followed by `mnemo_msync` must first
/// make the record unreplayable (or recovery would put the record's older bytes back).
///
/// Each range carries a bound on its commit's sequence number (the heap's next sequence
/// number, read after the commit returned); the record is final, and the range forgotten,
/// once the heap's durable horizon reaches that bound ([`Heap::durable_horizon`]). A later
/// commit alone does not do it: with one-fence commits a record may carry an older horizon.
#[derive(Debug, Default)]
pub struct Replayable {
    /// (range, bound: its commit's sequence number is below this).
    ranges: Vec<(ByteRange, u64)>,
}

/// Most ranges remembered before they are merged into one covering range (conservative).
const REPLAYABLE_RANGES_MAX: usize = 4096;

impl Replayable {
    /// A commit whose sequence number is below `bound` wrote `written`; `horizon` is the
    /// heap's durable horizon now.
    pub fn committed(&mut self, horizon: u64, bound: u64, written: &[ByteRange]) {
        self.forget(horizon);
        self.ranges.extend(written.iter().map(|&r| (r, bound)));
        if self.ranges.len() > REPLAYABLE_RANGES_MAX {
            let lo = self.ranges.iter().map(|(r, _)| r.offset).min().unwrap_or(0);
            let hi = self.ranges.iter().map(|(r, _)| r.end()).max().unwrap_or(0);
            let bound = self.ranges.iter().map(|&(_, b)| b).max().unwrap_or(bound);
            self.ranges = vec![(ByteRange::new(lo, hi - lo), bound)];
        }
    }

    /// Forget the ranges of records below the durable horizon `horizon`.
    pub fn forget(&mut self, horizon: u64) {
        self.ranges.retain(|&(_, bound)| bound > horizon);
    }

    /// Whether no range is remembered.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether a replayable record wrote some byte of `range`.
    pub fn overlaps(&self, range: ByteRange) -> bool {
        self.ranges
            .iter()
            .any(|(r, _)| r.offset < range.end() && range.offset < r.end())
    }
}

/// An open pool.
#[derive(Debug)]
pub struct PoolEntry {
    /// Its handle value.
    pub handle: usize,
    /// The heap (and through it the pool).
    pub heap: Heap,
    /// Transactions begun on it and not yet ended (any thread).
    pub open_txs: AtomicU64,
    /// See [`Replayable`].
    pub replayable: Mutex<Replayable>,
    /// Regions (offsets) with an open log handle: one handle per log.
    pub open_logs: Mutex<HashSet<u64>>,
}

impl PoolEntry {
    /// A new entry for `heap`, under handle value `handle`.
    pub fn new(handle: usize, heap: Heap) -> PoolEntry {
        // C code stores to heap memory outside transactions: every commit's application must
        // be durable when it returns (the heap's one-fence commit leaves it to the next
        // fence), and so must every commit made before this entry existed. A failure here
        // (the medium failing) shows again at the next call that persists anything.
        heap.set_fenced_commits(true);
        let _ = heap.retire_committed();
        PoolEntry {
            handle,
            heap,
            open_txs: AtomicU64::new(0),
            replayable: Mutex::default(),
            open_logs: Mutex::default(),
        }
    }

    /// An entry for an opened `heap` (the pool's open applied its gmsync journal, before the
    /// heap's recovery replayed newer redo records).
    pub fn open(handle: usize, heap: Heap) -> Result<PoolEntry> {
        Ok(PoolEntry::new(handle, heap))
    }
}

/// Lets a [`Log`] hold its pool through a clone of the heap (keeps the pool open).
#[derive(Debug, Clone)]
pub struct HeapPool(pub Heap);

impl std::ops::Deref for HeapPool {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        self.0.pool()
    }
}

/// An open log.
#[derive(Debug)]
pub struct LogEntry {
    /// The pool's handle value.
    pub pool: usize,
    /// The pool, for the open-log set.
    pub entry: Arc<PoolEntry>,
    /// The log's region offset (key of `open_logs`).
    pub region: u64,
    /// The log (appends need `&mut`).
    pub log: Mutex<Log<HeapPool>>,
}

impl Drop for LogEntry {
    fn drop(&mut self) {
        lock(&self.entry.open_logs).remove(&self.region);
    }
}

/// Every open pool and log.
#[derive(Debug, Default)]
pub struct Registry {
    /// Pools by handle value.
    pub pools: HashMap<usize, Arc<PoolEntry>>,
    /// Logs by handle value.
    pub logs: HashMap<usize, Arc<LogEntry>>,
}

/// The process's handle table.
pub static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(Default::default);

/// Lock a mutex, ignoring poisoning (every guarded structure stays consistent on panic).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

/// Exclusive access to the table.
pub fn write() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

/// The open pool `handle` names.
pub fn pool(handle: usize) -> Result<Arc<PoolEntry>> {
    read()
        .pools
        .get(&handle)
        .cloned()
        .ok_or_else(|| missing(handle, Kind::Pool))
}

/// The open log `handle` names.
pub fn log(handle: usize) -> Result<Arc<LogEntry>> {
    read()
        .logs
        .get(&handle)
        .cloned()
        .ok_or_else(|| missing(handle, Kind::Log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replayable_forgets_ranges_once_the_durable_horizon_passes_them() {
        let mut r = Replayable::default();
        r.committed(1, 5, &[ByteRange::new(100, 8)]);
        assert!(r.overlaps(ByteRange::new(104, 1)));
        assert!(!r.overlaps(ByteRange::new(108, 8)));
        // A later commit while the horizon has not passed the first: both stay.
        r.committed(4, 7, &[ByteRange::new(200, 8)]);
        assert!(r.overlaps(ByteRange::new(100, 8)) && r.overlaps(ByteRange::new(200, 8)));
        // The horizon reaches the first bound only: the first is final.
        r.forget(5);
        assert!(!r.overlaps(ByteRange::new(100, 8)) && r.overlaps(ByteRange::new(200, 8)));
        r.forget(7);
        assert!(r.is_empty());
    }

    #[test]
    fn replayable_merges_when_too_many() {
        let mut r = Replayable::default();
        let many: Vec<_> = (0..5000).map(|i| ByteRange::new(i * 100, 8)).collect();
        r.committed(1, 2, &many);
        assert_eq!(r.ranges.len(), 1);
        assert!(r.overlaps(ByteRange::new(50, 1)), "merging is conservative");
    }

    #[test]
    fn handles_tell_closed_from_bogus() {
        let h = new_handle(Kind::Pool);
        assert_eq!(missing(h, Kind::Pool).code, code::ECLOSED);
        assert_eq!(missing(h, Kind::Log).code, code::EBADHANDLE);
        assert_eq!(missing(0, Kind::Pool).code, code::EINVAL);
        assert_eq!(missing(usize::MAX, Kind::Pool).code, code::EBADHANDLE);
    }
}
