//! # mnemo-heap: the persistent heap
//!
//! Programs allocate and update data structures directly in a pool and find them again by
//! name after a restart or a crash. Design: `docs/design/heap-and-transactions.md`; byte
//! layouts: `docs/design/media-format.md` ("Heap").
//!
//! * [`Heap`]: create/open a heap in a [`mnemo_pmem::Pool`]; open replays committed redo
//!   records and rebuilds the allocator from media.
//! * Allocation: [`Heap::pmalloc`], [`Heap::alloc`], [`Heap::alloc_into`], [`Heap::free`];
//!   in transactions [`Tx::alloc`], [`Tx::alloc_bytes`], [`Tx::free`]. Small sizes come from
//!   runs with persistent bitmaps (size classes 16 B..64 KiB), large ones are whole 256 KiB
//!   chunks. Per-thread arenas. [`HeapStats`] reports fragmentation.
//! * [`PPtr<T>`]: 8-byte offset pointers; only [`Persist`] types (zerocopy plain bytes: no
//!   references, no raw pointers) can be stored, so user code needs no `unsafe`.
//! * Named regions and roots: [`Heap::nvalloc`], [`Heap::nvfree`], [`Heap::root`].
//! * Consistent updates: [`Heap::atomic_update`] (8 bytes, one fence),
//!   [`Heap::shadow_update`] (new version aside, published with the free of the old one in
//!   one record), and durable transactions [`Heap::tx`] / [`Heap::begin`] ([`Tx`]).
//!   (The append-only torn-bit log is `mnemo-log`.)
//!
//! ## Transactions
//! A transaction is an explicit object, [`Tx`], owned by its caller: `heap.tx(|tx| ...)`
//! commits on `Ok` and aborts on `Err` or panic; [`Heap::begin`] hands it out for
//! [`Tx::commit`] / [`Tx::abort`] by hand. Nothing joins it implicitly: a heap call outside
//! it is a transaction of its own, so code that wants allocations, frees or named regions in
//! the transaction calls the [`Tx`]'s methods. [`Tx::savepoint`] / [`Tx::rollback_to`] undo
//! part of a transaction (writes, allocations, frees), nested.
//!
//! Redo logging with one fence per transaction: writes are buffered in a volatile write set
//! indexed by offset (reads through the transaction see them, found by lookup; bytes written
//! twice are logged once); the commit writes one redo record into a lane
//! and makes it durable with one sync point (the commit point), which also makes durable the
//! thread's previous transaction's in-place application; then it applies the record in
//! place, left for the next fence. Allocations and frees are bitmap/chunk-table changes in
//! the same record, so they take effect only if it commits; freed space is reused once the
//! freeing record can no longer be replayed. Several threads may commit at once (one lane
//! each). Code that stores to transactional
//! data outside transactions uses [`Heap::set_fenced_commits`] and
//! [`Heap::retire_committed`].
//!
//! **Isolation is the caller's business** (as with PMDK): transactions are atomic and
//! durable, not isolated. Two concurrent transactions must not write the same bytes; guard
//! shared objects with your own locks, held until the transaction returns.
//!
//! ## Mutants (deliberately broken variants for crash testing)
//! Switch one on with `mnemo_pmem::mutant::with(name, ..)` (feature `mutants`):
//!
//! | name | what breaks |
//! |---|---|
//! | `tx.apply_before_commit` | entries are applied in place before the record is durable |
//! | `tx.skip_record_flush` | the redo record is stored but never flushed before fence 1 |
//! | `tx.skip_flush` | the applied data is not flushed, so the next fence does not make it durable |
//! | `redo.skip_checksum` | recovery replays records whose checksum does not match |
//! | `redo.no_horizon` | records carry horizon 0, so applied records are replayed over newer data |
//! | `redo.defer_forgets` | a commit that leaves its predecessor's application unflushed forgets those lines: never flushed, yet later horizons pass the record |
//! | `alloc.skip_bitmap` | a transactional allocation does not log its bitmap bit (double allocation after reopen) |
//! | `alloc.direct_skip_flush` | `pmalloc` of a small size (no record: its bitmap bit set directly) fences without flushing the word (an acknowledged allocation lost) |
//! | `heap.reuse_before_horizon` | freed space is handed out again at once, before the freeing record is past the durable horizon: its replay clobbers the new owner's unlogged bytes |
//! | `redo.ignore_overwrite_rule` | a lane's slot is overwritten while no durable claim passes its record: an older record of another lane that wrote the same bytes is replayed over the lost one's |
//! | `redo.horizon_early` | a horizon scan passes over other lanes' pending records: a record claims them fenced while their application may still be lost, and recovery skips them |
//! | `redo.reuse_lane_unretired` | a lane taken over by another thread while its pending record is unretired (application unfenced) is reused as if the record were the new holder's: neither flushed nor named, then cleared |
//! | `heap.free_before_commit` | a transaction's free hands the space back to the allocator at once, before the freeing record commits: another thread allocates it while the object is still published (and the free's record later frees the new owner's object) |
//!
//! The last four need several threads committing at once ([`CONCURRENCY_MUTANTS`]): they
//! are caught by the concurrency tests (`tests/concurrency.rs`, `scripts/test-shuttle.sh`).
#![deny(unsafe_code)]

mod alloc;
mod error;
mod heap;
pub mod layout;
mod pptr;
pub mod redo;
mod sync;
#[cfg(feature = "testing")]
pub mod testing;
mod tx;

pub use alloc::{ClassStats, HeapStats};
pub use error::{Error, Result};
pub use heap::{Heap, HeapOptions};
pub use pptr::{PPtr, Persist};
pub use tx::{Savepoint, Tx};

/// A process-unique number for volatile per-instance state.
pub(crate) fn next_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The mutants of this crate (see the crate documentation).
pub const MUTANTS: &[&str] = &[
    "tx.apply_before_commit",
    "tx.skip_record_flush",
    "tx.skip_flush",
    "redo.skip_checksum",
    "redo.no_horizon",
    "redo.defer_forgets",
    "alloc.skip_bitmap",
    "alloc.direct_skip_flush",
    "heap.reuse_before_horizon",
    "redo.ignore_overwrite_rule",
    "redo.horizon_early",
    "redo.reuse_lane_unretired",
    "heap.free_before_commit",
];

/// The mutants of [`MUTANTS`] that only a concurrent schedule can catch (the overwrite rule
/// binds, and other threads' pending records exist, only with several threads committing
/// at once): caught by `tests/concurrency.rs` under `--cfg mnemo_shuttle`
/// (`scripts/test-shuttle.sh`), not by the single-threaded crash tests.
pub const CONCURRENCY_MUTANTS: &[&str] = &[
    "redo.ignore_overwrite_rule",
    "redo.horizon_early",
    "redo.reuse_lane_unretired",
    "heap.free_before_commit",
];
